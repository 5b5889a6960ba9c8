/* xdc_data.c — the GPT data loader (xdc_data.h): reads bytes, a uint16 shard or a directory of text
 * files into one token array, then serves shuffled, rank-sharded windows from it. */
#include "model/xdc_data.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARD_MAGIC       20240520
#define SHARD_VERSION     1
#define SHARD_HEADER_INTS 256
#define MAX_SOURCE_BYTES  ((size_t)1 << 34) /* 16 GiB: refuse anything larger than memory could hold */

struct xdc_data {
    xdc_data_config cfg;
    uint16_t *tokens; /* (n_tokens) */
    size_t n_tokens, n_train;
    size_t train_windows, val_windows; /* windows of T+1 tokens at stride T */
    uint64_t batches_per_epoch;
    uint32_t *perm;      /* (train_windows) order of the current epoch */
    uint64_t perm_epoch; /* epoch `perm` was drawn for */
    xdc_data_pos pos;
    int *mb;         /* (world) cfg.microbatches copied, or NULL */
    size_t mb_total; /* Σ mb: microbatches of a global step */
};

/* Appends the whole file to buf (grown as needed). */
static xdc_err_t read_file_append(const char *path, uint8_t **buf, size_t *len, size_t *cap, xdc_diag *diag)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        xdc_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        return XDC_ERR_IO;
    }
    struct stat st;
    xdc_err_t rc = XDC_OK;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size > MAX_SOURCE_BYTES - *len) {
        xdc_diag_set(diag, "%s: cannot size the file or it is larger than 16 GiB", path);
        rc = XDC_ERR_IO;
        goto out;
    }
    size_t need = *len + (size_t)st.st_size;
    if (need > *cap) {
        uint8_t *nb = xdc_realloc(*buf, need ? need : 1);
        if (!nb) {
            rc = XDC_ERR_NOMEM;
            goto out;
        }
        *buf = nb;
        *cap = need;
    }
    while (*len < need) {
        ssize_t r = read(fd, *buf + *len, need - *len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            xdc_diag_set(diag, "%s: read failed: %s", path, r < 0 ? strerror(errno) : "file shrank");
            rc = XDC_ERR_IO;
            goto out;
        }
        *len += (size_t)r;
    }
out:
    close(fd);
    return rc;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool skipped_name(const char *n)
{
    size_t l = strlen(n);
    return n[0] == '.' || (l > 4 && strcmp(n + l - 4, ".dat") == 0) || (l > 3 && strcmp(n + l - 3, ".u8") == 0);
}

static xdc_err_t read_dir(const char *path, uint8_t **buf, size_t *len, xdc_diag *diag)
{
    DIR *dir = opendir(path);
    if (!dir) {
        xdc_diag_set(diag, "%s: cannot open directory: %s", path, strerror(errno));
        return XDC_ERR_IO;
    }
    char **names = NULL;
    size_t n = 0, cap_names = 0, cap = 0;
    xdc_err_t rc = XDC_OK;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (skipped_name(e->d_name)) continue;
        if (n == cap_names) {
            cap_names = cap_names ? 2 * cap_names : 64;
            char **nn = xdc_realloc(names, cap_names * sizeof *names);
            if (!nn) {
                rc = XDC_ERR_NOMEM;
                goto out;
            }
            names = nn;
        }
        if (!(names[n] = xdc_strdup(e->d_name))) {
            rc = XDC_ERR_NOMEM;
            goto out;
        }
        n++;
    }
    qsort(names, n, sizeof *names, name_cmp);
    for (size_t i = 0; i < n && rc == XDC_OK; i++) {
        char full[4096];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", path, names[i]);
        if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        rc = read_file_append(full, buf, len, &cap, diag);
    }
out:
    for (size_t i = 0; i < n; i++) xdc_free(names[i]);
    xdc_free(names);
    closedir(dir);
    return rc;
}

/* Turns the raw bytes into tokens: a shard when the header says so, otherwise one token per byte. */
static xdc_err_t decode_tokens(xdc_data *d, const char *path, const uint8_t *raw, size_t len, xdc_diag *diag)
{
    int32_t header[3] = {0};
    if (len >= SHARD_HEADER_INTS * 4) memcpy(header, raw, sizeof header);
    if (header[0] == SHARD_MAGIC) {
        size_t body = len - SHARD_HEADER_INTS * 4;
        if (header[1] != SHARD_VERSION || header[2] < 0 || (size_t)header[2] * 2 != body) {
            xdc_diag_set(diag,
                         "%s: bad token shard header (version %d, %d tokens, %zu body bytes; want version %d and "
                         "2 bytes per token)",
                         path, header[1], header[2], body, SHARD_VERSION);
            return XDC_ERR_CORRUPT;
        }
        d->n_tokens = (size_t)header[2];
        d->tokens = xdc_malloc(d->n_tokens * sizeof(uint16_t) + 1);
        if (!d->tokens) return XDC_ERR_NOMEM;
        const uint8_t *p = raw + SHARD_HEADER_INTS * 4;
        for (size_t i = 0; i < d->n_tokens; i++) d->tokens[i] = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
    } else {
        d->n_tokens = len;
        d->tokens = xdc_malloc(len * sizeof(uint16_t) + 1);
        if (!d->tokens) return XDC_ERR_NOMEM;
        for (size_t i = 0; i < len; i++) d->tokens[i] = raw[i];
    }
    for (size_t i = 0; i < d->n_tokens; i++)
        if (d->tokens[i] >= d->cfg.vocab_size) {
            xdc_diag_set(diag, "%s: token %u at position %zu is outside the vocabulary (%d)", path, d->tokens[i], i,
                         d->cfg.vocab_size);
            return XDC_ERR_CORRUPT;
        }
    return XDC_OK;
}

static xdc_err_t check_config(const xdc_data_config *c, xdc_diag *diag)
{
    if (c->batch >= 1 && c->seq_len >= 1 && c->val_fraction > 0.0 && c->val_fraction < 1.0 && c->world >= 1 &&
        c->rank >= 0 && c->rank < c->world && c->vocab_size >= 2 && c->vocab_size <= 65536) {
        for (int q = 0; c->microbatches && q < c->world; q++)
            if (c->microbatches[q] < 1 || c->microbatches[q] > 1024) {
                xdc_diag_set(diag, "data: rank %d's microbatches %d is not in [1, 1024]", q, c->microbatches[q]);
                return XDC_ERR_INVALID;
            }
        return XDC_OK;
    }
    xdc_diag_set(diag,
                 "data: need batch, seq_len >= 1, 0 < val_fraction < 1, 0 <= rank < world, 2 <= vocab <= 65536 "
                 "(got B=%d T=%d val=%g rank=%d world=%d vocab=%d)",
                 c->batch, c->seq_len, c->val_fraction, c->rank, c->world, c->vocab_size);
    return XDC_ERR_INVALID;
}

xdc_err_t xdc_data_open_bytes(const char *name, const uint8_t *raw, size_t len, const xdc_data_config *cfg,
                              xdc_data **out, xdc_diag *diag)
{
    XDC_CHECK(check_config(cfg, diag));
    xdc_data *d = xdc_calloc(1, sizeof *d);
    if (!d) return XDC_ERR_NOMEM;
    d->cfg = *cfg;
    xdc_err_t rc;
    XDC_CHECK_GOTO(decode_tokens(d, name, raw, len, diag), rc, fail);

    if (cfg->microbatches) {
        d->mb = xdc_malloc((size_t)cfg->world * sizeof *d->mb);
        if (!d->mb) {
            rc = XDC_ERR_NOMEM;
            goto fail;
        }
        memcpy(d->mb, cfg->microbatches, (size_t)cfg->world * sizeof *d->mb);
        d->cfg.microbatches = d->mb;
        for (int q = 0; q < cfg->world; q++) d->mb_total += (size_t)d->mb[q];
    }
    /* windows of one global batch (equal), or of one global step (unequal: whole steps make an epoch) */
    size_t T = (size_t)cfg->seq_len, per_batch = (size_t)cfg->batch * (d->mb ? d->mb_total : (size_t)cfg->world);
    d->n_train = (size_t)((double)d->n_tokens * (1.0 - cfg->val_fraction));
    d->train_windows = d->n_train > T ? (d->n_train - 1) / T : 0;
    size_t n_val = d->n_tokens - d->n_train;
    d->val_windows = n_val > T ? (n_val - 1) / T : 0;
    d->batches_per_epoch = d->train_windows / per_batch * (d->mb ? (size_t)d->mb[cfg->rank] : 1);
    if (d->batches_per_epoch == 0 || d->val_windows == 0 || d->train_windows > UINT32_MAX) {
        xdc_diag_set(diag,
                     "%s: %zu tokens give %zu train and %zu validation windows of %zu tokens; need at least "
                     "B*world = %zu train windows and one validation window",
                     name, d->n_tokens, d->train_windows, d->val_windows, T + 1, per_batch);
        rc = XDC_ERR_INVALID;
        goto fail;
    }
    d->perm = xdc_malloc(d->train_windows * sizeof *d->perm);
    if (!d->perm) {
        rc = XDC_ERR_NOMEM;
        goto fail;
    }
    d->perm_epoch = UINT64_MAX;
    *out = d;
    return XDC_OK;
fail:
    xdc_data_destroy(d);
    return rc;
}

xdc_err_t xdc_data_open(const char *path, const xdc_data_config *cfg, xdc_data **out, xdc_diag *diag)
{
    XDC_CHECK(check_config(cfg, diag));
    uint8_t *raw = NULL;
    size_t len = 0, cap = 0;
    xdc_err_t rc;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) rc = read_dir(path, &raw, &len, diag);
    else rc = read_file_append(path, &raw, &len, &cap, diag);
    if (rc == XDC_OK) rc = xdc_data_open_bytes(path, raw, len, cfg, out, diag);
    xdc_free(raw);
    return rc;
}

void xdc_data_destroy(xdc_data *d)
{
    if (!d) return;
    xdc_free(d->tokens);
    xdc_free(d->perm);
    xdc_free(d->mb);
    xdc_free(d);
}

static void draw_perm(xdc_data *d, uint64_t epoch)
{
    if (d->perm_epoch == epoch) return;
    xdc_rng r;
    xdc_rng_seed(&r, d->cfg.seed ^ (0xD1B54A32D192ED03ull * (epoch + 1)));
    for (size_t i = 0; i < d->train_windows; i++) d->perm[i] = (uint32_t)i;
    for (size_t i = d->train_windows - 1; i > 0; i--) {
        size_t j = (size_t)xdc_rng_below(&r, i + 1);
        uint32_t t = d->perm[i];
        d->perm[i] = d->perm[j];
        d->perm[j] = t;
    }
    d->perm_epoch = epoch;
}

static void copy_window(const xdc_data *d, size_t start, int32_t *in, int32_t *tgt)
{
    for (int t = 0; t < d->cfg.seq_len; t++) {
        in[t] = d->tokens[start + (size_t)t];
        tgt[t] = d->tokens[start + (size_t)t + 1];
    }
}

/* The global microbatch slot of this rank's batch `batch` of the epoch (xdc_data.h): batch·world + rank when
 * every rank reads one per global batch, else its slot in the round-robin of its step. */
static size_t slot_of(const xdc_data *d, uint64_t batch)
{
    if (!d->mb) return (size_t)batch * (size_t)d->cfg.world + (size_t)d->cfg.rank;
    int own = d->mb[d->cfg.rank], j = (int)(batch % (uint64_t)own);
    size_t slot = (size_t)(batch / (uint64_t)own) * d->mb_total;
    for (int q = 0; q < d->cfg.world; q++)
        slot += (size_t)(d->mb[q] < j ? d->mb[q] : j) + (q < d->cfg.rank && d->mb[q] > j);
    return slot;
}

xdc_err_t xdc_data_next_train(xdc_data *d, int32_t *inputs, int32_t *targets)
{
    draw_perm(d, d->pos.epoch);
    size_t T = (size_t)d->cfg.seq_len, B = (size_t)d->cfg.batch;
    size_t base = slot_of(d, d->pos.batch) * B;
    for (size_t j = 0; j < B; j++) copy_window(d, (size_t)d->perm[base + j] * T, inputs + j * T, targets + j * T);
    if (++d->pos.batch == d->batches_per_epoch) {
        d->pos.batch = 0;
        d->pos.epoch++;
    }
    return XDC_OK;
}

int xdc_data_val_batches(const xdc_data *d)
{
    size_t per = (size_t)d->cfg.batch * (size_t)d->cfg.world, n = d->val_windows / per;
    return n == 0 ? 1 : (n > 1000000 ? 1000000 : (int)n);
}

xdc_err_t xdc_data_val_batch(xdc_data *d, int index, int32_t *inputs, int32_t *targets)
{
    XDC_REQUIRE(index >= 0 && index < xdc_data_val_batches(d), XDC_ERR_RANGE);
    size_t T = (size_t)d->cfg.seq_len, B = (size_t)d->cfg.batch;
    size_t base = ((size_t)index * (size_t)d->cfg.world + (size_t)d->cfg.rank) * B;
    for (size_t j = 0; j < B; j++)
        copy_window(d, d->n_train + ((base + j) % d->val_windows) * T, inputs + j * T, targets + j * T);
    return XDC_OK;
}

xdc_data_pos xdc_data_get_pos(const xdc_data *d) { return d->pos; }

xdc_err_t xdc_data_set_pos(xdc_data *d, xdc_data_pos pos)
{
    XDC_REQUIRE(pos.batch < d->batches_per_epoch, XDC_ERR_RANGE);
    d->pos = pos;
    return XDC_OK;
}

size_t xdc_data_train_tokens(const xdc_data *d) { return d->n_train; }
size_t xdc_data_val_tokens(const xdc_data *d) { return d->n_tokens - d->n_train; }
uint64_t xdc_data_batches_per_epoch(const xdc_data *d) { return d->batches_per_epoch; }
const uint16_t *xdc_data_val_view(const xdc_data *d) { return d->tokens + d->n_train; }
