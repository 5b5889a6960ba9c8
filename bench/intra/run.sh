#!/usr/bin/env bash
# bench/intra/run.sh — all_reduce bandwidth of the intra CPU backend (built by `make bench-intra` into
# $XDC_BENCH_BIN) at 2 and 4 ranks, next to memcpy and Open MPI's MPI_Allreduce measured in the same run,
# then send/recv throughput between 2 ranks next to memcpy.
# Prints an nccl-tests-style table; the last line is the key=value summary
#   busbw_vs_mpi_4ranks=<mean over sizes >= 1 MiB of cpu busbw / mpi busbw> ...
set -euo pipefail
bin=${XDC_BENCH_BIN:?XDC_BENCH_BIN is not set; run through make bench-intra}
here=$(cd "$(dirname "$0")" && pwd)
min=${INTRA_BENCH_MIN:-65536}
max=${INTRA_BENCH_MAX:-33554432}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mpicc -O2 -o "$tmp/allreduce_mpi" "$here/mpi/allreduce_mpi.c"
mpirun_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

"$bin" memcpy "$min" "$max" >"$tmp/memcpy"
"$bin" p2p "$min" "$max" >"$tmp/p2p"
for n in 2 4; do
  "$bin" "$n" "$min" "$max" >"$tmp/cpu$n"
  mpirun "${mpirun_flags[@]}" -np "$n" "$tmp/allreduce_mpi" "$min" "$max" >"$tmp/mpi$n"
done

echo "# all_reduce fp32 sum, in place; time in us, bandwidths in GB/s; busbw = algbw * 2(n-1)/n"
printf '%5s %10s %10s %8s %8s %10s %8s %8s %8s %9s\n' ranks bytes cpu_us cpu_alg cpu_bus mpi_us mpi_alg mpi_bus memcpy cpu/mpi
for n in 2 4; do
  join -j1 <(awk '{print $3, $4, $5, $6}' "$tmp/cpu$n") <(awk '{print $3, $4, $5, $6}' "$tmp/mpi$n") |
    join -j1 - <(awk '{print $2, $3}' "$tmp/memcpy") |
    sort -n | awk -v n="$n" '{printf "%5d %10d %10.1f %8.3f %8.3f %10.1f %8.3f %8.3f %8.3f %9.2f\n", n, $1, $2, $3, $4, $5, $6, $7, $8, $4 / $7}'
done | tee "$tmp/table"
echo "# send/recv, 2 ranks, one message at a time (pipeline activations); GB/s"
printf '%10s %10s %8s %8s %9s\n' bytes p2p_us p2p_bw memcpy p2p/memcpy
join -j1 <(awk '{print $2, $3, $4}' "$tmp/p2p") <(awk '{print $2, $3}' "$tmp/memcpy") | sort -n |
  awk '{printf "%10d %10.1f %8.3f %8.3f %9.3f\n", $1, $2, $3, $4, $3 / $4}'
awk '$1 == 4 && $2 >= 1048576 { r += $5 / $8; c += $5; m += $8; mc += $9; k++ }
     END { if (!k) { print "busbw_vs_mpi_4ranks=nan (no sizes >= 1 MiB)"; exit 1 }
           printf "busbw_vs_mpi_4ranks=%.2f cpu_busbw_4ranks_gbps=%.3f mpi_busbw_4ranks_gbps=%.3f busbw_vs_memcpy_4ranks=%.3f sizes=%d\n",
                  r / k, c / k, m / k, c / mc, k }' "$tmp/table"
