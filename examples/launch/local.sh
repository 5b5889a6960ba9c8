#!/usr/bin/env bash
# local.sh — every region on this machine with an emulated WAN: what `make demo` runs.
set -euo pipefail
exec "${XDC:-build/xdc}" launch -t "${1:-examples/topology/demo-2region.yaml}" -c "${2:-examples/train/demo.yaml}"
