/* test_snapshot.c — a worker's outer-round snapshot file (orchestrator/worker/orch_snapshot.h): it loads back
 * bit for bit; a write killed midway (its NAME.tmp left half written) leaves the previous snapshot the one that
 * loads; a flipped byte, global parameters that do not hash to the meta's hash, and another model's snapshot are
 * refused. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "orchestrator/worker/orch_snapshot.h"

#include <stdio.h>
#include <string.h>

#define N 1000

/* A snapshot of round `round` of N parameters into buf: every part filled from the round, its hash set. */
static void fill(void *buf, int64_t round)
{
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts(buf, N, &m, part);
    for (int p = 0; p < ORCH_SNAP_PARTS; p++)
        for (int i = 0; i < N; i++) part[p][i] = (float)round + 0.001f * (float)i - (float)p;
    *m = (orch_snapshot_meta){.n = N,
                              .round = round,
                              .step = round + 2,
                              .adam_t = round,
                              .epoch = 0,
                              .batch = 7,
                              .hash = xdc_xxh64(part[ORCH_SNAP_GLOBAL], N * sizeof(float), 0)};
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    XDC_ASSERT(f != NULL);
    XDC_ASSERT_EQ(fwrite(data, 1, len, f), len);
    fclose(f);
}

XDC_TEST(snapshot_survives_a_torn_write_and_refuses_a_corrupt_one)
{
    const char *dir = xdc_test_tmpdir();
    size_t bytes = orch_snapshot_bytes(N);
    uint8_t *a = xdc_malloc(bytes), *b = xdc_malloc(bytes), *got = xdc_malloc(bytes);
    xdc_ckpt_blob_opt opt = {.cap = xdc_ckpt_blob_scratch_bytes(bytes), .level = -1};
    opt.scratch = xdc_malloc(opt.cap);
    fill(a, 20);
    fill(b, 24);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_snapshot_save(dir, a, N, &opt, &d));
    XDC_ASSERT_OK(orch_snapshot_load(dir, got, N, &d));
    XDC_ASSERT(memcmp(got, a, bytes) == 0);

    /* The next round's write killed halfway: its temp file holds the first half of the blob it would write. */
    char tmp[600], path[600];
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, ORCH_SNAPSHOT_FILE);
    snprintf(path, sizeof path, "%s/%s", dir, ORCH_SNAPSHOT_FILE);
    XDC_ASSERT_OK(orch_snapshot_save(dir, b, N, &opt, &d)); /* to have B's bytes, then put A back */
    FILE *f = fopen(path, "rb");
    uint8_t *file = xdc_malloc(opt.cap);
    size_t len = fread(file, 1, opt.cap, f);
    fclose(f);
    XDC_ASSERT_OK(orch_snapshot_save(dir, a, N, &opt, &d));
    write_file(tmp, file, len / 2);
    XDC_ASSERT_OK(orch_snapshot_load(dir, got, N, &d));
    XDC_ASSERT_MSG(memcmp(got, a, bytes) == 0, "a torn write replaced the last snapshot");
    XDC_ASSERT_OK(orch_snapshot_save(dir, b, N, &opt, &d)); /* the next write goes through the stale temp file */
    XDC_ASSERT_OK(orch_snapshot_load(dir, got, N, &d));
    XDC_ASSERT(memcmp(got, b, bytes) == 0);

    /* The file cut short, or one byte of it changed: refused by its checksum. */
    write_file(path, file, len / 2);
    XDC_ASSERT_EQ(orch_snapshot_load(dir, got, N, &d), XDC_ERR_CORRUPT);
    file[len / 2] ^= 0x40;
    write_file(path, file, len);
    XDC_ASSERT_EQ(orch_snapshot_load(dir, got, N, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "checksum mismatch");

    /* Global parameters that do not hash to the meta's hash, and another model's snapshot. */
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts(a, N, &m, part);
    part[ORCH_SNAP_GLOBAL][3] += 1.0f;
    XDC_ASSERT_OK(orch_snapshot_save(dir, a, N, &opt, &d));
    XDC_ASSERT_EQ(orch_snapshot_load(dir, got, N, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "hash to ");
    XDC_ASSERT_OK(orch_snapshot_save(dir, b, N, &opt, &d));
    XDC_ASSERT_EQ(orch_snapshot_load(dir, got, N - 1, &d), XDC_ERR_CONFIG);

    /* A scratch too short for the blob is the caller's error, not a torn file. */
    opt.cap = 16;
    XDC_ASSERT_EQ(orch_snapshot_save(dir, a, N, &opt, &d), XDC_ERR_INVALID);
    XDC_ASSERT_OK(orch_snapshot_load(dir, got, N, &d));
    XDC_ASSERT(memcmp(got, b, bytes) == 0);
    xdc_free(opt.scratch);
    xdc_free(file);
    xdc_free(a);
    xdc_free(b);
    xdc_free(got);
}
