#!/usr/bin/env bash
# bench/model/run.sh — CPU training-step throughput of the tiny and the ~10M-parameter GPT against
# OpenBLAS sgemm measured in the same run (built by `make bench-model` into $XDC_BENCH_BIN). Uses every
# online CPU; set BENCH_MODEL_THREADS or BENCH_MODEL_STEPS to change that, OPENBLAS_CORETYPE to force a
# kernel set (OpenBLAS 0.3.21 may not recognise newer CPUs). The last line is the key=value summary for
# the ~10M config.
set -euo pipefail
bin=${XDC_BENCH_BIN:?XDC_BENCH_BIN is not set; run through make bench-model}
here=$(cd "$(dirname "$0")/../.." && pwd)
threads=${BENCH_MODEL_THREADS:-$(nproc)}
steps=${BENCH_MODEL_STEPS:-10}
exec "$bin" --threads "$threads" --steps "$steps" \
    "$here/examples/models/tiny.yaml" "$here/examples/models/small10m.yaml"
