/* xdc_ckpt.c — stage checkpoints (format in xdc_ckpt.h): zstd payload, XXH64 checksum, atomic
 * temp-file + fsync + rename + directory fsync. */
#include "model/xdc_ckpt.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#define CKPT_MAGIC        "XDCCKPT1"
#define CKPT_VERSION      1u
#define CKPT_HEADER_BYTES 128
#define CKPT_ZSTD_LEVEL   3

typedef struct ckpt_header {
    char magic[8];
    uint32_t version, stage, n_stages, reserved;
    uint64_t num_params;
    int64_t step, adam_t;
    uint64_t data_epoch, data_batch;
    uint64_t rng[4];
    uint64_t raw_bytes, zst_bytes;
    uint64_t checksum;
} ckpt_header;
_Static_assert(sizeof(ckpt_header) <= CKPT_HEADER_BYTES, "checkpoint header outgrew its slot");

void xdc_ckpt_path(const char *dir, int stage, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/stage-%d.ckpt", dir, stage);
}

static uint64_t checksum(const uint8_t *header_bytes, const void *zst, size_t zst_len)
{
    uint8_t h[CKPT_HEADER_BYTES];
    memcpy(h, header_bytes, sizeof h);
    memset(h + offsetof(ckpt_header, checksum), 0, sizeof(uint64_t));
    xdc_hash_state *st = xdc_hash64_create(0);
    if (!st) return 0;
    xdc_hash64_update(st, h, sizeof h);
    xdc_hash64_update(st, zst, zst_len);
    uint64_t v = xdc_hash64_digest(st);
    xdc_hash64_destroy(st);
    return v;
}

static xdc_err_t write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return XDC_ERR_IO;
        b += w;
        n -= (size_t)w;
    }
    return XDC_OK;
}

static xdc_err_t fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return XDC_ERR_IO;
    int r = fsync(fd);
    close(fd);
    return r == 0 ? XDC_OK : XDC_ERR_IO;
}

xdc_err_t xdc_ckpt_save(const char *dir, xdc_gpt_stage *s, const xdc_ckpt_meta *meta, xdc_diag *diag)
{
    char path[4096], tmp[4200];
    xdc_ckpt_path(dir, meta->stage, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    size_t n = xdc_gpt_stage_num_params(s), raw_bytes = 3 * n * sizeof(float);
    size_t bound = ZSTD_compressBound(raw_bytes);
    float *raw = xdc_malloc(raw_bytes);
    uint8_t *file = xdc_malloc(CKPT_HEADER_BYTES + bound);
    xdc_err_t rc = XDC_ERR_NOMEM;
    int fd = -1;
    if (!raw || !file) goto fail;
    ckpt_header h = {.version = CKPT_VERSION,
                     .stage = (uint32_t)meta->stage,
                     .n_stages = (uint32_t)meta->n_stages,
                     .num_params = n,
                     .step = meta->step,
                     .data_epoch = meta->data_pos.epoch,
                     .data_batch = meta->data_pos.batch,
                     .raw_bytes = raw_bytes};
    memcpy(h.magic, CKPT_MAGIC, 8);
    memcpy(h.rng, meta->rng.s, sizeof h.rng);
    XDC_CHECK_GOTO(xdc_gpt_stage_state_get(s, raw, raw + n, raw + 2 * n, &h.adam_t), rc, fail);
    size_t z = ZSTD_compress(file + CKPT_HEADER_BYTES, bound, raw, raw_bytes, CKPT_ZSTD_LEVEL);
    if (ZSTD_isError(z)) {
        xdc_diag_set(diag, "%s: zstd: %s", path, ZSTD_getErrorName(z));
        rc = XDC_ERR_INTERNAL;
        goto fail;
    }
    h.zst_bytes = z;
    memset(file, 0, CKPT_HEADER_BYTES);
    memcpy(file, &h, sizeof h);
    h.checksum = checksum(file, file + CKPT_HEADER_BYTES, z);
    memcpy(file + offsetof(ckpt_header, checksum), &h.checksum, sizeof h.checksum);

    rc = XDC_ERR_IO;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, file, CKPT_HEADER_BYTES + z) != XDC_OK || fsync(fd) != 0) {
        xdc_diag_set(diag, "%s: cannot write: %s", tmp, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    if (rename(tmp, path) != 0 || fsync_dir(dir) != XDC_OK) {
        xdc_diag_set(diag, "%s: cannot rename into place or sync %s: %s", tmp, dir, strerror(errno));
        goto fail;
    }
    rc = XDC_OK;
fail:
    if (fd >= 0) close(fd);
    if (rc != XDC_OK) unlink(tmp);
    xdc_free(raw);
    xdc_free(file);
    return rc;
}

static xdc_err_t read_whole(const char *path, size_t max, uint8_t **out, size_t *len, xdc_diag *diag)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        xdc_diag_set(diag, "%s: cannot open checkpoint: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return XDC_ERR_IO;
    }
    if ((size_t)st.st_size < CKPT_HEADER_BYTES || (size_t)st.st_size > max) {
        xdc_diag_set(diag, "%s: checkpoint is %lld bytes, expected %d..%zu for this model", path, (long long)st.st_size,
                     CKPT_HEADER_BYTES, max);
        close(fd);
        return XDC_ERR_CORRUPT;
    }
    uint8_t *buf = xdc_malloc((size_t)st.st_size);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf) return XDC_ERR_NOMEM;
    if (got != (size_t)st.st_size) {
        xdc_diag_set(diag, "%s: short read", path);
        xdc_free(buf);
        return XDC_ERR_IO;
    }
    *out = buf;
    *len = got;
    return XDC_OK;
}

xdc_err_t xdc_ckpt_load(const char *dir, int stage, xdc_gpt_stage *s, xdc_ckpt_meta *meta, xdc_diag *diag)
{
    char path[4096];
    xdc_ckpt_path(dir, stage, path, sizeof path);
    size_t raw_bytes = 3 * xdc_gpt_stage_num_params(s) * sizeof(float);
    uint8_t *file = NULL;
    size_t len = 0;
    XDC_CHECK(read_whole(path, CKPT_HEADER_BYTES + ZSTD_compressBound(raw_bytes), &file, &len, diag));
    xdc_err_t rc = xdc_ckpt_decode(path, file, len, stage, s, meta, diag);
    xdc_free(file);
    return rc;
}

xdc_err_t xdc_ckpt_decode(const char *path, const uint8_t *file, size_t len, int stage, xdc_gpt_stage *s,
                          xdc_ckpt_meta *meta, xdc_diag *diag)
{
    size_t n = xdc_gpt_stage_num_params(s), raw_bytes = 3 * n * sizeof(float);
    float *raw = NULL;
    xdc_err_t rc;
    if (len < CKPT_HEADER_BYTES) {
        xdc_diag_set(diag, "%s: %zu bytes is shorter than a checkpoint header", path, len);
        return XDC_ERR_CORRUPT;
    }
    ckpt_header h;
    memcpy(&h, file, sizeof h);
    rc = XDC_ERR_CORRUPT;
    if (memcmp(h.magic, CKPT_MAGIC, 8) != 0 || h.version != CKPT_VERSION) {
        xdc_diag_set(diag, "%s: not an xdc checkpoint (bad magic or version %u)", path, h.version);
        goto fail;
    }
    if (h.zst_bytes != len - CKPT_HEADER_BYTES) {
        xdc_diag_set(diag, "%s: truncated or padded: header says %llu payload bytes, file has %zu", path,
                     (unsigned long long)h.zst_bytes, len - CKPT_HEADER_BYTES);
        goto fail;
    }
    uint64_t want = checksum(file, file + CKPT_HEADER_BYTES, len - CKPT_HEADER_BYTES);
    if (want != h.checksum) {
        xdc_diag_set(diag, "%s: checksum mismatch (stored %016llx, computed %016llx): the checkpoint is corrupt", path,
                     (unsigned long long)h.checksum, (unsigned long long)want);
        goto fail;
    }
    if ((int)h.stage != stage || h.num_params != n || h.raw_bytes != raw_bytes || h.adam_t < 0) {
        xdc_diag_set(diag, "%s: checkpoint is for stage %u with %llu parameters; this run has stage %d with %zu", path,
                     h.stage, (unsigned long long)h.num_params, stage, n);
        rc = XDC_ERR_CONFIG;
        goto fail;
    }
    raw = xdc_malloc(raw_bytes);
    if (!raw) {
        rc = XDC_ERR_NOMEM;
        goto fail;
    }
    size_t got = ZSTD_decompress(raw, raw_bytes, file + CKPT_HEADER_BYTES, len - CKPT_HEADER_BYTES);
    if (ZSTD_isError(got) || got != raw_bytes) {
        xdc_diag_set(diag, "%s: payload does not decompress to %zu bytes (%s)", path, raw_bytes,
                     ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
        goto fail;
    }
    XDC_CHECK_GOTO(xdc_gpt_stage_state_set(s, raw, raw + n, raw + 2 * n, h.adam_t), rc, fail);
    meta->stage = (int)h.stage;
    meta->n_stages = (int)h.n_stages;
    meta->step = h.step;
    meta->data_pos = (xdc_data_pos){h.data_epoch, h.data_batch};
    memcpy(meta->rng.s, h.rng, sizeof h.rng);
    rc = XDC_OK;
fail:
    xdc_free(raw);
    return rc;
}
