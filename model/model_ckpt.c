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
#define BLOB_MAGIC        "XDCBLOB1"

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

/* XXH64 over a CKPT_HEADER_BYTES header whose checksum field (at byte `at`) counts as zero, then the
 * compressed payload. */
static uint64_t checksum(const uint8_t *header_bytes, size_t at, const void *zst, size_t zst_len)
{
    uint8_t h[CKPT_HEADER_BYTES];
    memcpy(h, header_bytes, sizeof h);
    memset(h + at, 0, sizeof(uint64_t));
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

/* Write `len` bytes as `dir`/`name`, atomically. Everything happens relative to the directory opened
 * once, which must not be a symbolic link, and the temp file is created fresh (O_EXCL | O_NOFOLLOW): a
 * link planted at NAME.tmp or in place of the directory cannot redirect the write onto another file. A
 * stale temp file of a crashed save is removed first (unlinking a link removes the link, not its
 * target). On failure the temp file is removed and an earlier `name` is left as it was. */
static xdc_err_t write_atomic(const char *dir, const char *name, const void *data, size_t len, int durable,
                              xdc_diag *diag)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", name);
    xdc_err_t rc = XDC_ERR_IO;
    int fd = -1, dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        xdc_diag_set(diag, "%s: cannot open the checkpoint directory%s: %s", dir,
                     errno == ELOOP || errno == ENOTDIR ? " (it must be a directory, not a symbolic link)" : "",
                     strerror(errno));
        return XDC_ERR_IO;
    }
    if (unlinkat(dfd, tmp, 0) != 0 && errno != ENOENT) {
        xdc_diag_set(diag, "%s/%s: cannot remove a stale temp file: %s", dir, tmp, strerror(errno));
        goto fail;
    }
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 || write_all(fd, data, len) != XDC_OK || (durable && fsync(fd) != 0)) {
        xdc_diag_set(diag, "%s/%s: cannot write: %s", dir, tmp, strerror(errno));
        goto fail;
    }
    close(fd);
    fd = -1;
    if (renameat(dfd, tmp, dfd, name) != 0 || (durable && fsync(dfd) != 0)) {
        xdc_diag_set(diag, "%s/%s: cannot rename into place or sync %s: %s", dir, tmp, dir, strerror(errno));
        goto fail;
    }
    rc = XDC_OK;
fail:
    if (fd >= 0) close(fd);
    if (rc != XDC_OK) unlinkat(dfd, tmp, 0);
    close(dfd);
    return rc;
}

xdc_err_t xdc_ckpt_save(const char *dir, xdc_gpt_stage *s, const xdc_ckpt_meta *meta, xdc_diag *diag)
{
    char path[4096], name[64];
    xdc_ckpt_path(dir, meta->stage, path, sizeof path);
    snprintf(name, sizeof name, "stage-%d.ckpt", meta->stage);
    size_t n = xdc_gpt_stage_num_params(s), raw_bytes = 3 * n * sizeof(float);
    size_t bound = ZSTD_compressBound(raw_bytes);
    float *raw = xdc_malloc(raw_bytes);
    uint8_t *file = xdc_malloc(CKPT_HEADER_BYTES + bound);
    xdc_err_t rc = XDC_ERR_NOMEM;
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
    h.checksum = checksum(file, offsetof(ckpt_header, checksum), file + CKPT_HEADER_BYTES, z);
    memcpy(file + offsetof(ckpt_header, checksum), &h.checksum, sizeof h.checksum);

    rc = write_atomic(dir, name, file, CKPT_HEADER_BYTES + z, 1, diag);
fail:
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

xdc_err_t xdc_ckpt_load(const char *dir, int stage, int64_t max_step, xdc_gpt_stage *s, xdc_ckpt_meta *meta,
                        xdc_diag *diag)
{
    char path[4096];
    xdc_ckpt_path(dir, stage, path, sizeof path);
    size_t raw_bytes = 3 * xdc_gpt_stage_num_params(s) * sizeof(float);
    uint8_t *file = NULL;
    size_t len = 0;
    XDC_CHECK(read_whole(path, CKPT_HEADER_BYTES + ZSTD_compressBound(raw_bytes), &file, &len, diag));
    xdc_err_t rc = xdc_ckpt_decode(path, file, len, stage, max_step, s, meta, diag);
    xdc_free(file);
    return rc;
}

/* Every header field against the run, after the checksum: a field that does not fit is named with its
 * value and what this run expects. XDC_ERR_CONFIG for a checkpoint of another stage or model shape,
 * XDC_ERR_CORRUPT for values no save could have written. */
static xdc_err_t check_fields(const char *path, const ckpt_header *h, const uint8_t *file, int stage, size_t n,
                              int64_t max_step, xdc_diag *diag)
{
    size_t raw_bytes = 3 * n * sizeof(float);
    if ((int64_t)h->stage != stage) {
        xdc_diag_set(diag, "%s: field stage is %u; this run loads stage %d", path, h->stage, stage);
        return XDC_ERR_CONFIG;
    }
    if (h->num_params != n) {
        xdc_diag_set(diag, "%s: field num_params is %llu; stage %d of this run's model has %zu parameters", path,
                     (unsigned long long)h->num_params, stage, n);
        return XDC_ERR_CONFIG;
    }
    if (h->n_stages < 1 || h->stage >= h->n_stages) {
        xdc_diag_set(diag, "%s: field n_stages is %u, which does not hold stage %u", path, h->n_stages, h->stage);
        return XDC_ERR_CORRUPT;
    }
    if (h->raw_bytes != raw_bytes) {
        xdc_diag_set(diag, "%s: field raw_bytes is %llu; %zu parameters make %zu (params, m, v as fp32)", path,
                     (unsigned long long)h->raw_bytes, n, raw_bytes);
        return XDC_ERR_CORRUPT;
    }
    if (h->step < 0 || h->step > max_step) {
        xdc_diag_set(diag, "%s: field step is %lld, outside this run's steps 0..%lld", path, (long long)h->step,
                     (long long)max_step);
        return XDC_ERR_CONFIG;
    }
    if (h->adam_t < 0 || h->adam_t > (INT64_C(1) << 53)) {
        xdc_diag_set(diag, "%s: field adam_t is %lld, not an optimizer step count", path, (long long)h->adam_t);
        return XDC_ERR_CORRUPT;
    }
    int pad_zero = h->reserved == 0;
    for (size_t i = sizeof *h; i < CKPT_HEADER_BYTES; i++) pad_zero &= file[i] == 0;
    if (!pad_zero) {
        xdc_diag_set(diag, "%s: reserved header bytes are not zero", path);
        return XDC_ERR_CORRUPT;
    }
    return XDC_OK;
}

xdc_err_t xdc_ckpt_decode(const char *path, const uint8_t *file, size_t len, int stage, int64_t max_step,
                          xdc_gpt_stage *s, xdc_ckpt_meta *meta, xdc_diag *diag)
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
    uint64_t want = checksum(file, offsetof(ckpt_header, checksum), file + CKPT_HEADER_BYTES, len - CKPT_HEADER_BYTES);
    if (want != h.checksum) {
        xdc_diag_set(diag, "%s: checksum mismatch (stored %016llx, computed %016llx): the checkpoint is corrupt", path,
                     (unsigned long long)h.checksum, (unsigned long long)want);
        goto fail;
    }
    XDC_CHECK_GOTO(check_fields(path, &h, file, stage, n, max_step, diag), rc, fail);
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

typedef struct blob_header {
    char magic[8];
    uint32_t version, reserved;
    uint64_t raw_bytes, zst_bytes;
    uint64_t checksum;
} blob_header;
_Static_assert(sizeof(blob_header) <= CKPT_HEADER_BYTES, "blob header outgrew its slot");

size_t xdc_ckpt_blob_scratch_bytes(size_t bytes) { return CKPT_HEADER_BYTES + ZSTD_compressBound(bytes); }

xdc_err_t xdc_ckpt_blob_write(const char *dir, const char *name, const void *data, size_t bytes,
                              const xdc_ckpt_blob_opt *opt, xdc_diag *diag)
{
    size_t cap = xdc_ckpt_blob_scratch_bytes(bytes);
    if (opt->cap < cap) {
        xdc_diag_set(diag, "%s/%s: a scratch of %zu bytes where %zu are needed", dir, name, opt->cap, cap);
        return XDC_ERR_INVALID;
    }
    uint8_t *file = opt->scratch;
    memset(file, 0, CKPT_HEADER_BYTES);
    size_t z = ZSTD_compress(file + CKPT_HEADER_BYTES, cap - CKPT_HEADER_BYTES, data, bytes, opt->level);
    if (ZSTD_isError(z)) {
        xdc_diag_set(diag, "%s/%s: zstd: %s", dir, name, ZSTD_getErrorName(z));
        return XDC_ERR_INTERNAL;
    }
    blob_header h = {.version = CKPT_VERSION, .raw_bytes = bytes, .zst_bytes = z};
    memcpy(h.magic, BLOB_MAGIC, 8);
    memcpy(file, &h, sizeof h);
    h.checksum = checksum(file, offsetof(blob_header, checksum), file + CKPT_HEADER_BYTES, z);
    memcpy(file + offsetof(blob_header, checksum), &h.checksum, sizeof h.checksum);
    return write_atomic(dir, name, file, CKPT_HEADER_BYTES + z, opt->durable, diag);
}

xdc_err_t xdc_ckpt_blob_save(const char *dir, const char *name, const void *data, size_t bytes, xdc_diag *diag)
{
    xdc_ckpt_blob_opt opt = {.cap = xdc_ckpt_blob_scratch_bytes(bytes), .level = CKPT_ZSTD_LEVEL, .durable = 1};
    opt.scratch = xdc_malloc(opt.cap);
    if (!opt.scratch) return XDC_ERR_NOMEM;
    xdc_err_t rc = xdc_ckpt_blob_write(dir, name, data, bytes, &opt, diag);
    xdc_free(opt.scratch);
    return rc;
}

xdc_err_t xdc_ckpt_blob_load(const char *dir, const char *name, void *data, size_t bytes, xdc_diag *diag)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    uint8_t *file = NULL;
    size_t len = 0;
    XDC_CHECK(read_whole(path, CKPT_HEADER_BYTES + ZSTD_compressBound(bytes), &file, &len, diag));
    blob_header h;
    memcpy(&h, file, sizeof h);
    xdc_err_t rc = XDC_ERR_CORRUPT;
    if (memcmp(h.magic, BLOB_MAGIC, 8) != 0 || h.version != CKPT_VERSION || h.zst_bytes != len - CKPT_HEADER_BYTES) {
        xdc_diag_set(diag, "%s: not an xdc state file of this version, or truncated", path);
    } else if (checksum(file, offsetof(blob_header, checksum), file + CKPT_HEADER_BYTES, len - CKPT_HEADER_BYTES) !=
               h.checksum) {
        xdc_diag_set(diag, "%s: checksum mismatch: the file is corrupt", path);
    } else if (h.raw_bytes != bytes) {
        xdc_diag_set(diag, "%s: holds %llu bytes; this run needs %zu here (another codec, model or layout)", path,
                     (unsigned long long)h.raw_bytes, bytes);
        rc = XDC_ERR_CONFIG;
    } else {
        size_t got = ZSTD_decompress(data, bytes, file + CKPT_HEADER_BYTES, len - CKPT_HEADER_BYTES);
        if (ZSTD_isError(got) || got != bytes)
            xdc_diag_set(diag, "%s: payload does not decompress to %zu bytes", path, bytes);
        else rc = XDC_OK;
    }
    xdc_free(file);
    return rc;
}
