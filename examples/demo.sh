#!/usr/bin/env bash
# demo.sh — the default demo: two emulated regions (100 Mbit/s, 40 ms RTT, TLS 1.3, int8 + zstd on the
# WAN) x two pipeline stages train the tiny GPT on the Debian fortunes corpus, on this machine, no GPU,
# no root. Ends with the run summary and the `final ...` line.
set -euo pipefail
xdc=${1:-build/xdc}
"$xdc" topo check examples/topology/demo-2region.yaml
exec "$xdc" launch -t examples/topology/demo-2region.yaml -c examples/train/demo.yaml
