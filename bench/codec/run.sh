#!/usr/bin/env bash
# bench/codec/run.sh — runs the codec benchmark (built by `make bench-codec` into $XDC_BENCH_BIN) pinned
# to one core; its last line is the key=value summary.
set -euo pipefail
bin=${XDC_BENCH_BIN:?XDC_BENCH_BIN is not set; run through make bench-codec}
if command -v taskset >/dev/null 2>&1; then exec taskset -c 0 "$bin"; else exec "$bin"; fi
