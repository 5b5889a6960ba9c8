/* xdc_data.h — training data for the GPT: a token stream split into train and validation, cut into
 * windows of T+1 tokens (inputs and next-token targets), shuffled per epoch by seed, sharded over
 * data-parallel ranks, with a position that checkpoints save and restore.
 *
 * Sources (detected from the content):
 *  - uint16 token shards in the llm.c/nanoGPT layout: a header of 256 int32 (magic 20240520, version 1,
 *    token count), then the tokens as little-endian uint16;
 *  - anything else is raw bytes (byte-level vocabulary, 256 tokens);
 *  - a directory: its regular files in name order, skipping *.dat and *.u8 and symlinks, concatenated as
 *    raw bytes (so `--data /usr/share/games/fortunes` trains on the Debian fortunes corpus).
 *
 * Split: the first (1 - val_fraction) of the tokens train, the rest validate. Train windows start at
 * multiples of T; epoch e visits them in the order of a Fisher–Yates permutation seeded by (seed, e), and
 * global batch k of the epoch gives rank r the windows perm[(k*world + r)*B .. +B), so replicas never see
 * the same window in an epoch. With unequal microbatch counts m_q per step (xdc_data_config.microbatches), step
 * s is global batch s of M = Σ m_q microbatches (B windows each): its microbatch slots go round-robin over the
 * ranks that still have one, rank r's j-th microbatch of the step taking slot Σ_q min(m_q, j) + #{q < r: m_q > j}
 * (j·world + r when all are equal), so the step's windows are perm[s·M·B .. (s+1)·M·B) as for a single rank
 * reading M microbatches per step; an epoch is whole steps. Validation batches are fixed (no shuffle), also
 * sharded by rank. */
#ifndef XDC_DATA_H
#define XDC_DATA_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct xdc_data_config {
    int batch, seq_len;  /* B, T per rank */
    double val_fraction; /* in (0, 1) */
    uint64_t seed;
    int rank, world; /* data-parallel shard: 0 <= rank < world */
    /* Unequal replicas: (world) microbatches each rank reads per step, each in [1, 1024] (copied); NULL: every
     * rank reads one batch per global batch. */
    const int *microbatches;
    int vocab_size; /* every token must be below it */
} xdc_data_config;

/* Where the train stream is: the next batch is batch `batch` of epoch `epoch`. */
typedef struct xdc_data_pos {
    uint64_t epoch, batch;
} xdc_data_pos;

typedef struct xdc_data xdc_data;

/* Loads and validates the source; errors name the file (XDC_ERR_IO unreadable, XDC_ERR_CORRUPT bad shard
 * header or token out of vocabulary, XDC_ERR_INVALID too little data for one batch). */
xdc_err_t xdc_data_open(const char *path, const xdc_data_config *cfg, xdc_data **out, xdc_diag *diag);
/* The same from bytes already in memory (copied); `name` appears in errors. The fuzz target's entry. */
xdc_err_t xdc_data_open_bytes(const char *name, const uint8_t *raw, size_t len, const xdc_data_config *cfg,
                              xdc_data **out, xdc_diag *diag);
void xdc_data_destroy(xdc_data *d);

/* Next training batch of this rank: inputs and targets (B,T) int32 each; advances the position. */
xdc_err_t xdc_data_next_train(xdc_data *d, int32_t *inputs, int32_t *targets);
/* Validation batch `index` (0 <= index < xdc_data_val_batches) of this rank. */
xdc_err_t xdc_data_val_batch(xdc_data *d, int index, int32_t *inputs, int32_t *targets);
int xdc_data_val_batches(const xdc_data *d);

xdc_data_pos xdc_data_get_pos(const xdc_data *d);
xdc_err_t xdc_data_set_pos(xdc_data *d, xdc_data_pos pos);

/* Token counts of the split ("train" first part, "val" the rest) and the batches per epoch per rank. */
size_t xdc_data_train_tokens(const xdc_data *d);
size_t xdc_data_val_tokens(const xdc_data *d);
uint64_t xdc_data_batches_per_epoch(const xdc_data *d);
/* Read-only view of the validation tokens (for statistics such as the unigram entropy). */
const uint16_t *xdc_data_val_view(const xdc_data *d);

#endif /* XDC_DATA_H */
