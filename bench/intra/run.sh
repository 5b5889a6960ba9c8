#!/usr/bin/env bash
# bench/intra/run.sh — all_reduce bandwidth of the intra CPU backend (built by `make bench-intra` into
# $XDC_BENCH_BIN) at 2, 3 and 4 ranks next to two baselines measured in the same run, Open MPI's
# MPI_Allreduce and Gloo's ring allreduce, plus memcpy; then send/recv throughput between 2 ranks.
# xdc's buffers come from xdc_intra_mem_alloc, as the worker's come from the CPU device: shared
# allocations the peers reduce in place (docs/intra.md); XDC_BENCH_PLAIN_BUFFERS=1 times plain ones.
# The machine may be shared, so the three are interleaved: for every rank count and size, xdc, MPI and
# Gloo run back to back (each fastest of 3 trials), INTRA_BENCH_ROUNDS times over all of them, and each
# keeps its best round per size.
# Prints an nccl-tests-style table; the last line is the key=value summary
#   busbw_vs_best_peer_min=<min over rank counts and sizes >= 256 KiB of xdc busbw / max(MPI, Gloo)> ...
set -euo pipefail
bin=${XDC_BENCH_BIN:?XDC_BENCH_BIN is not set; run through make bench-intra}
here=$(cd "$(dirname "$0")" && pwd)
min=${INTRA_BENCH_MIN:-262144}
max=${INTRA_BENCH_MAX:-33554432}
ranks=${INTRA_BENCH_RANKS:-2 3 4}
rounds=${INTRA_BENCH_ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mpicc -O2 -o "$tmp/allreduce_mpi" "$here/mpi/allreduce_mpi.c"
g++ -O2 -std=c++17 -o "$tmp/allreduce_gloo" "$here/gloo/allreduce_gloo.cc" -lgloo -pthread
mpirun_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

echo "# load before: $(uptime)"
"$bin" memcpy "$min" "$max" >"$tmp/memcpy"
"$bin" p2p "$min" "$max" >"$tmp/p2p"
: >"$tmp/xdc"
: >"$tmp/mpi"
: >"$tmp/gloo"
for ((round = 0; round < rounds; round++)); do
  for n in $ranks; do
    for ((b = min; b <= max; b *= 2)); do
      "$bin" "$n" "$b" "$b" >>"$tmp/xdc"
      mpirun "${mpirun_flags[@]}" -np "$n" "$tmp/allreduce_mpi" "$b" "$b" >>"$tmp/mpi"
      store=$(mktemp -d "$tmp/store.XXXXXX")
      "$tmp/allreduce_gloo" "$n" "$b" "$b" "$store" >>"$tmp/gloo"
    done
  done
done
echo "# load after: $(uptime)"

# best round per (ranks, bytes): "ranks:bytes us busbw"
best() { awk '{ k = $2 ":" $3; if (!(k in bw) || $6 > bw[k]) { bw[k] = $6; us[k] = $4 } }
              END { for (k in bw) print k, us[k], bw[k] }' "$1" | sort; }
best "$tmp/xdc" >"$tmp/xdc.best"
best "$tmp/mpi" >"$tmp/mpi.best"
best "$tmp/gloo" >"$tmp/gloo.best"

echo "# all_reduce fp32 sum, in place; time in us, busbw in GB/s (busbw = algbw * 2(n-1)/n); best of $rounds rounds"
printf '%5s %10s %9s %8s %9s %8s %9s %8s %8s %9s\n' ranks bytes xdc_us xdc_bus mpi_us mpi_bus gloo_us gloo_bus memcpy xdc/best
join "$tmp/xdc.best" "$tmp/mpi.best" | join - "$tmp/gloo.best" | tr ':' ' ' | sort -k2,2 |
  join -1 2 -2 1 - <(awk '{print $2, $3}' "$tmp/memcpy" | sort -k1,1) |
  awk '{ best = $6 > $8 ? $6 : $8
         printf "%5d %10d %9.1f %8.3f %9.1f %8.3f %9.1f %8.3f %8.3f %9.2f\n", $2, $1, $3, $4, $5, $6, $7, $8, $9, $4 / best }' |
  sort -k1,1n -k2,2n | tee "$tmp/table"

echo "# send/recv, 2 ranks, one message at a time (pipeline activations); GB/s"
printf '%10s %10s %8s %8s %9s\n' bytes p2p_us p2p_bw memcpy p2p/memcpy
join -j1 <(awk '{print $2, $3, $4}' "$tmp/p2p" | sort -k1,1) <(awk '{print $2, $3}' "$tmp/memcpy" | sort -k1,1) |
  sort -n | awk '{printf "%10d %10.1f %8.3f %8.3f %9.3f\n", $1, $2, $3, $4, $3 / $4}'

awk '$2 >= 262144 { r = $10; if (!k || r < lo) { lo = r; at = $1 " ranks " $2 " bytes" } s += r; k++ }
     END { if (!k) { print "busbw_vs_best_peer_min=nan (no sizes >= 256 KiB)"; exit 1 }
           printf "busbw_vs_best_peer_min=%.2f worst=\"%s\" busbw_vs_best_peer_mean=%.2f rows=%d\n", lo, at, s / k, k }' \
  "$tmp/table"
