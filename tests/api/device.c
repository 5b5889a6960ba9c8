/* device.c — a libxdc program for the suite (tests/e2e/test_api.c): the device entry points on XDC_DEVICE's
 * device (the suite runs it on cpu-strict, whose memory the host cannot touch: every byte goes through the
 * device table), one member per region. The outer rounds of tests/api/outer.c over two parameters in device
 * memory (the same exact values with codec none, diloco.outer_lr 0.5, outer_momentum 0.5), an all-reduce of a
 * device buffer to its exact mean, and the refusals: a host call on a device tag, a device that does not
 * exist. Prints "device: rank R: 2 rounds exact, mean exact" and exits 0, or says what differed and exits 1.
 * With the argument `lossy` (a run file with a lossy codec: the codec runs on the device): every value within
 * 0.05 of the exact one, and "device: rank R: lossy within 0.05, hash H" with H the FNV-1a hash of the results
 * (the same on every member). With the argument `replicas` (several members per region): the device calls are refused with
 * XDC_STATUS_UNSUPPORTED (the region's communicator is host memory); prints "device: rank R: refused". */
#include <xdc.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NA 100
#define NB 37
#define NR 3000

/* FNV-1a of n bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static int fail(xdc_comm *c, const char *what, int st)
{
    fprintf(stderr, "device: %s: %s: %s\n", what, xdc_status_string(st), xdc_comm_last_error(c));
    return 1;
}

/* Several members in the region: a device all-reduce and device outer rounds refused, naming why. */
static int replicas(xdc_comm *c, float *dev)
{
    size_t count = 64;
    int st = xdc_allreduce_device(c, 4, dev, count, 0, NULL);
    if (st != XDC_STATUS_UNSUPPORTED) return fail(c, "all-reduce with replicas", st);
    if (!strstr(xdc_comm_last_error(c), "members in this region")) return fail(c, "its diagnostic", st);
    if ((st = xdc_outer_init_device(c, 3, 1, &dev, &count, 0, NULL)) != XDC_STATUS_UNSUPPORTED)
        return fail(c, "outer_init with replicas", st);
    if ((st = xdc_comm_finalize(c)) != XDC_SUCCESS) return fail(c, "finalize", st);
    printf("device: rank %d: refused\n", xdc_comm_rank(c));
    xdc_device_free(c, dev);
    xdc_comm_destroy(c);
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    xdc_comm *c;
    int st = xdc_comm_create(NULL, &c, err, sizeof err);
    if (st != XDC_SUCCESS) {
        fprintf(stderr, "device: create: %s: %s\n", xdc_status_string(st), err);
        return 1;
    }
    int rank = xdc_comm_rank(c), size = xdc_comm_size(c);
    static float host[NA + NB], red[NR]; /* fp32 host staging of the parameters, of the all-reduce */
    float *params[2];
    void *pa, *pb, *pr;
    size_t counts[2] = {NA, NB};
    if ((st = xdc_device_alloc(c, 0, NA * sizeof(float), &pa)) != XDC_SUCCESS ||
        (st = xdc_device_alloc(c, 0, NB * sizeof(float), &pb)) != XDC_SUCCESS ||
        (st = xdc_device_alloc(c, 0, NR * sizeof(float), &pr)) != XDC_SUCCESS)
        return fail(c, "device_alloc", st);
    if (argc > 1 && strcmp(argv[1], "replicas") == 0) return replicas(c, pr);
    double tol = argc > 1 && strcmp(argv[1], "lossy") == 0 ? 0.05 : 0; /* 0: exact */
    params[0] = pa;
    params[1] = pb;
    for (int i = 0; i < NA + NB; i++) host[i] = 1.0f;
    if ((st = xdc_device_copy(c, 0, pa, host, NA * sizeof(float), 1, NULL)) != XDC_SUCCESS ||
        (st = xdc_device_copy(c, 0, pb, host + NA, NB * sizeof(float), 1, NULL)) != XDC_SUCCESS)
        return fail(c, "device_copy in", st);
    if ((st = xdc_outer_init_device(c, 3, 2, params, counts, 0, NULL)) != XDC_SUCCESS)
        return fail(c, "outer_init_device", st);
    if ((st = xdc_outer_round(c, 3, params)) != XDC_STATUS_INVALID) return fail(c, "host round on a device tag", st);
    if ((st = xdc_allreduce_device(c, 4, pr, NR, 7, NULL)) != XDC_STATUS_INVALID)
        return fail(c, "all-reduce on device 7", st);
    double delta = (size + 1) / 16.0, m = 0, global = 1;
    for (int round = 1; round <= 2; round++) {
        /* the inner phase: the parameters move by -(rank + 1) / 8, through the device */
        for (int i = 0; i < NA + NB; i++) host[i] = (float)global - (float)(rank + 1) / 8.0f;
        if ((st = xdc_device_copy(c, 0, pa, host, NA * sizeof(float), 1, NULL)) != XDC_SUCCESS ||
            (st = xdc_device_copy(c, 0, pb, host + NA, NB * sizeof(float), 1, NULL)) != XDC_SUCCESS)
            return fail(c, "device_copy in", st);
        if ((st = xdc_outer_round_device(c, 3, params, NULL)) != XDC_SUCCESS) return fail(c, "outer_round_device", st);
        m = 0.5 * m + delta;
        global -= 0.5 * (delta + 0.5 * m);
        if ((st = xdc_device_copy(c, 0, host, pa, NA * sizeof(float), 0, NULL)) != XDC_SUCCESS ||
            (st = xdc_device_copy(c, 0, host + NA, pb, NB * sizeof(float), 0, NULL)) != XDC_SUCCESS)
            return fail(c, "device_copy out", st);
        for (int i = 0; i < NA + NB; i++)
            if (fabs(host[i] - (float)global) > tol) {
                fprintf(stderr, "device: rank %d round %d: value %d is %.9g, want %.9g\n", rank, round, i, host[i],
                        global);
                return 1;
            }
    }
    /* every value a multiple of 1/8: the mean over the members is exact */
    for (int i = 0; i < NR; i++) red[i] = (float)(i % 64) / 8.0f + (float)rank;
    if ((st = xdc_device_copy(c, 0, pr, red, sizeof red, 1, NULL)) != XDC_SUCCESS) return fail(c, "copy in", st);
    if ((st = xdc_allreduce_device(c, 4, pr, NR, 0, NULL)) != XDC_SUCCESS) return fail(c, "allreduce_device", st);
    if ((st = xdc_allreduce(c, 4, red, NR)) != XDC_STATUS_INVALID) return fail(c, "host all-reduce on device tag", st);
    if ((st = xdc_device_copy(c, 0, red, pr, sizeof red, 0, NULL)) != XDC_SUCCESS) return fail(c, "copy out", st);
    for (int i = 0; i < NR; i++)
        if (fabs(red[i] - ((float)(i % 64) / 8.0f + (float)(size - 1) / 2.0f)) > tol) {
            fprintf(stderr, "device: rank %d: mean %d is %.9g\n", rank, i, red[i]);
            return 1;
        }
    if ((st = xdc_comm_finalize(c)) != XDC_SUCCESS) return fail(c, "finalize", st);
    if (tol > 0)
        printf("device: rank %d: lossy within %g, hash %016llx\n", rank, tol,
               (unsigned long long)fnv(fnv(14695981039346656037ull, host, sizeof host), red, sizeof red));
    else printf("device: rank %d: 2 rounds exact (%.9g), mean exact\n", rank, global);
    xdc_device_free(c, pa);
    xdc_device_free(c, pb);
    xdc_device_free(c, pr);
    xdc_comm_destroy(c);
    return 0;
}
