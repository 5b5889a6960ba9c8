/* allreduce_mpi.c — the Open MPI baseline for bench/intra: MPI_Allreduce (fp32 sum, in place) over the
 * same sizes, iteration counts and fastest-of-3 timing as bench_intra, printing the same "row" lines. Built by run.sh with
 * mpicc; not part of the xdc build.   mpirun -np N allreduce_mpi MIN_BYTES MAX_BYTES */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t iters_for(size_t bytes)
{
    size_t it = ((size_t)128 << 20) / bytes;
    return it < 5 ? 5 : it > 200 ? 200 : it;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    size_t min_b = argc > 1 ? strtoull(argv[1], NULL, 0) : 65536,
           max_b = argc > 2 ? strtoull(argv[2], NULL, 0) : 32u << 20;
    float *buf = malloc(max_b);
    memset(buf, 0, max_b);
    for (size_t bytes = min_b; bytes <= max_b; bytes *= 2) {
        int count = (int)(bytes / 4);
        size_t it = iters_for(bytes);
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double us = 1e30;
        for (int trial = 0; trial < 3; trial++) { /* fastest of 3, as bench_intra.c */
            double t0 = MPI_Wtime();
            for (size_t i = 0; i < it; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double t = (MPI_Wtime() - t0) * 1e6 / (double)it;
            us = t < us ? t : us;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        if (rank == 0) {
            double algbw = (double)bytes / us / 1e3, busbw = algbw * 2.0 * (n - 1) / n;
            printf("row %d %zu %.1f %.3f %.3f\n", n, bytes, us, algbw, busbw);
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
