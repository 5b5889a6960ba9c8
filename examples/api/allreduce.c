/* allreduce.c — a complete program on libxdc (docs/api.md): every member of a run all-reduces a buffer a
 * few times and checks the result against the exact mean it can compute itself.
 *
 *   cc allreduce.c $(pkg-config --cflags --libs xdc) -lm -o allreduce
 *   xdc launch -t TOPOLOGY.yaml -c RUN.yaml --exec -- ./allreduce [COUNT [ROUNDS [TOLERANCE]]]
 *
 * Member r of n fills value i of round k with r + ((i + k) % 8) / 4, so the mean is (n - 1) / 2 +
 * ((i + k) % 8) / 4: with the run file's `codec: none` the all-reduce must give it exactly (every value is
 * a multiple of 1/8), with a lossy codec within TOLERANCE (absolute; default 0.05, int8's error here). One
 * line per member names the largest error and a hash of the final buffer, the same on every member. */
#include <xdc.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FNV-1a over the bytes of n floats: equal buffers, equal hashes. */
static uint64_t hash_floats(const float *x, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)x;
    for (size_t i = 0; i < n * sizeof *x; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int main(int argc, char **argv)
{
    size_t count = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    double tolerance = argc > 3 ? atof(argv[3]) : 0.05;
    if (count == 0 || rounds < 1 || tolerance < 0) {
        fprintf(stderr, "usage: allreduce [COUNT [ROUNDS [TOLERANCE]]]\n");
        return 64;
    }
    if (xdc_api_version() >> 16 != XDC_API_VERSION_MAJOR) {
        fprintf(stderr, "allreduce: built for libxdc %d.x, loaded %d.%d\n", XDC_API_VERSION_MAJOR,
                xdc_api_version() >> 16, xdc_api_version() & 0xffff);
        return 69;
    }
    /* Everything from the environment `xdc launch --exec` sets: topology, run file, identity. */
    char err[1024];
    xdc_comm *comm;
    int st = xdc_comm_create(NULL, &comm, err, sizeof err);
    if (st != XDC_SUCCESS) {
        fprintf(stderr, "allreduce: xdc_comm_create: %s: %s\n", xdc_status_string(st), err);
        return 1;
    }
    int rank = xdc_comm_rank(comm), size = xdc_comm_size(comm);
    float *buf = malloc(count * sizeof *buf); /* (count) fp32, host memory */
    if (!buf) {
        xdc_comm_destroy(comm);
        return 1;
    }
    double worst = 0;
    for (int k = 0; k < rounds && st == XDC_SUCCESS; k++) {
        for (size_t i = 0; i < count; i++) buf[i] = (float)rank + (float)((i + (size_t)k) % 8) / 4.0f;
        st = xdc_allreduce(comm, 0, buf, count); /* tag 0: the same buffer each round, its residual kept */
        for (size_t i = 0; i < count && st == XDC_SUCCESS; i++) {
            double exact = (size - 1) / 2.0 + (double)((i + (size_t)k) % 8) / 4.0;
            double e = fabs(buf[i] - exact);
            if (e > worst) worst = e;
        }
    }
    if (st != XDC_SUCCESS) {
        fprintf(stderr, "allreduce: rank %d: %s: %s\n", rank, xdc_status_string(st), xdc_comm_last_error(comm));
        free(buf);
        xdc_comm_destroy(comm);
        return 1;
    }
    printf("allreduce: rank %d of %d (region %s): %d rounds of %zu values, max error %.6g, hash %016llx\n", rank, size,
           xdc_comm_region_name(comm), rounds, count, worst, (unsigned long long)hash_floats(buf, count));
    fflush(stdout);
    st = xdc_comm_finalize(comm); /* nobody leaves while another member still exchanges with it */
    if (st != XDC_SUCCESS)
        fprintf(stderr, "allreduce: rank %d: finalize: %s: %s\n", rank, xdc_status_string(st),
                xdc_comm_last_error(comm));
    xdc_comm_destroy(comm);
    free(buf);
    if (st != XDC_SUCCESS) return 1;
    if (worst > tolerance) {
        fprintf(stderr, "allreduce: rank %d: max error %.6g exceeds the tolerance %.6g\n", rank, worst, tolerance);
        return 1;
    }
    return 0;
}
