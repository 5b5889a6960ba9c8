#!/usr/bin/env bash
# demo.sh — the default demo. Today: validate and print the two-region demo topology.
set -euo pipefail
xdc=${1:-build/xdc}
"$xdc" topo check examples/topology/demo-2region.yaml
