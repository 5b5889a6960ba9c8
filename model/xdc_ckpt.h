/* xdc_ckpt.h — per-stage training checkpoints: parameters, AdamW moments and step, training step, data
 * position and RNG state, in `<dir>/stage-<k>.ckpt`.
 *
 * File layout (little-endian): a 128-byte header — magic "XDCCKPT1", u32 version, u32 stage,
 * u32 n_stages, u32 reserved, u64 num_params, i64 step, i64 adam_t, u64 data epoch, u64 data batch,
 * u64 rng[4], u64 raw payload bytes, u64 compressed payload bytes, u64 checksum, zero padding — then a
 * zstd frame of the payload: params, m, v (num_params fp32 each, the stage's arena order). The checksum
 * is XXH64 over the header (checksum field zeroed) and the compressed payload, checked before anything
 * is used.
 *
 * Saving writes `<file>.tmp`, fsyncs it, renames it over the old file and fsyncs the directory, so a
 * crash leaves either the old or the new checkpoint, never a torn one. The directory must not be a
 * symbolic link and the temp file is created afresh (O_EXCL | O_NOFOLLOW, after removing a stale one),
 * so a planted link cannot turn the save into a write elsewhere. */
#ifndef XDC_CKPT_H
#define XDC_CKPT_H

#include "common/xdc_err.h"
#include "common/xdc_rng.h"
#include "model/xdc_gpt.h"
#include "model/xdc_data.h"

#include <stddef.h>
#include <stdint.h>

typedef struct xdc_ckpt_meta {
    int stage, n_stages;
    int64_t step; /* optimizer steps completed */
    xdc_data_pos data_pos;
    xdc_rng rng;
} xdc_ckpt_meta;

/* "<dir>/stage-<k>.ckpt" into buf. */
void xdc_ckpt_path(const char *dir, int stage, char *buf, size_t cap);

xdc_err_t xdc_ckpt_save(const char *dir, xdc_gpt_stage *s, const xdc_ckpt_meta *meta, xdc_diag *diag);
/* Loads stage `stage`'s file into `s` and `meta`; the run has `max_step` steps, so the checkpoint's step
 * must lie in 0..max_step. Every header field is checked and a misfit is named with the file, the field,
 * its value and what the run expects: XDC_ERR_CORRUPT on a bad magic, checksum, payload or impossible
 * value; XDC_ERR_CONFIG when the file belongs to a different stage, model shape or a longer run;
 * XDC_ERR_IO when it cannot be read. */
xdc_err_t xdc_ckpt_load(const char *dir, int stage, int64_t max_step, xdc_gpt_stage *s, xdc_ckpt_meta *meta,
                        xdc_diag *diag);
/* The same checks and restore from a file image already in memory; `name` appears in errors. */
xdc_err_t xdc_ckpt_decode(const char *name, const uint8_t *file, size_t len, int stage, int64_t max_step,
                          xdc_gpt_stage *s, xdc_ckpt_meta *meta, xdc_diag *diag);

/* State kept next to a stage checkpoint (error-feedback residuals, outer optimizer state): `bytes` of
 * `data` as `<dir>/<name>`, written atomically the same way. Layout: a 128-byte header (magic "XDCBLOB1",
 * u32 version, u32 reserved, u64 raw bytes, u64 compressed bytes, u64 checksum, zero padding) and a zstd
 * frame; the checksum is XXH64 over the header (checksum zeroed) and the frame. */
xdc_err_t xdc_ckpt_blob_save(const char *dir, const char *name, const void *data, size_t bytes, xdc_diag *diag);
/* How a blob is written (xdc_ckpt_blob_write): into the caller's scratch of `cap` bytes (at least
 * xdc_ckpt_blob_scratch_bytes), so a file written every outer round allocates nothing; zstd `level` (negative:
 * its fast levels); `durable`: fsync the file and the directory (a checkpoint's). Without it the rename still
 * leaves the old or the new file whole after a killed process, not after a lost machine (a node-local file
 * the checksum rejects then). */
typedef struct xdc_ckpt_blob_opt {
    void *scratch;
    size_t cap;
    int level, durable;
} xdc_ckpt_blob_opt;
size_t xdc_ckpt_blob_scratch_bytes(size_t bytes);
/* xdc_ckpt_blob_save as `opt` says (same format); XDC_ERR_INVALID when the scratch is short. */
xdc_err_t xdc_ckpt_blob_write(const char *dir, const char *name, const void *data, size_t bytes,
                              const xdc_ckpt_blob_opt *opt, xdc_diag *diag);
/* Load `<dir>/<name>` into data (exactly `bytes`): XDC_ERR_IO when it cannot be read, XDC_ERR_CONFIG when it
 * holds another size (another codec, model or layout), XDC_ERR_CORRUPT on a bad magic, checksum or payload. */
xdc_err_t xdc_ckpt_blob_load(const char *dir, const char *name, void *data, size_t bytes, xdc_diag *diag);

#endif /* XDC_CKPT_H */
