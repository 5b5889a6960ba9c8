#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU checks in one go, for a machine with NVIDIA GPUs, nvcc and NCCL: builds the
# tree with CUDA into build/gpu, then runs the tests that skip without a GPU (the NCCL backend of intra/
# against the same serial reference as the CPU backend, the CUDA model stage and the CUDA quantisation
# kernels against their CPU references).
# A GPU test that still skips here is a failure: the machine was supposed to have a device.
#   usage: tests/gpu/run.sh [extra test-name substrings...]
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/gpu}
GPU_TESTS=(intra_nccl kern_cuda quant_cuda "$@")

nvidia-smi -L || { echo "tests/gpu/run.sh: no NVIDIA GPU visible (nvidia-smi failed)" >&2; exit 69; }
make BUILD="$BUILD" CUDA=1 -j"$(nproc)" "$BUILD/xdc_tests" >"$BUILD.log" 2>&1 || {
  tail -40 "$BUILD.log" >&2
  echo "tests/gpu/run.sh: build failed (log: $BUILD.log)" >&2
  exit 70
}
status=0
for t in "${GPU_TESTS[@]}"; do
  out=$("$BUILD/xdc_tests" "$t" 2>&1) || status=1
  echo "$out"
  if grep -q '^SKIP' <<<"$out"; then
    echo "tests/gpu/run.sh: '$t' skipped on a GPU machine" >&2
    status=1
  fi
done
exit $status
