/* xdc_lowrank.h — the low-rank activation codec: each row of a (rows, C) fp32 tensor is projected onto an
 * r-dimensional subspace both ends share, and its r coefficients are quantized to B bits (3..8) with one
 * scale byte per row. The sender computes the subspace (the top r eigenvectors of the rows' C×C second
 * moment, by orthogonal iteration) from the message it is encoding, on the first message and every
 * `refresh` messages after, and ships it (r×C int8 with a bf16 scale per row, the precision both ends then
 * use) inside that message; the receiver only stores it. Activations and their gradients have their own
 * settings (the gradients need more directions, docs/compression.md).
 * What lies outside the subspace is dropped: there is no error feedback, because each activation (and
 * each activation gradient) belongs to one microbatch of one step and is never sent again, so a residual
 * has nothing to be added back to (docs/compression.md). Host memory only; one context per direction of
 * one link (an encoder and its peer's decoder see the same message sequence, in order).
 *
 * Wire format of one message (little-endian): a 16-byte header — u8 'L', u8 version 2, u8 bits B (3..8),
 * u8 flags (1: a basis follows), u16 rank, u16 cols, u32 rows, u32 basis id (the encoder's count of
 * bases computed, 1 for the first) — then, if flagged, the basis (rank bf16 row scales, then rank rows of
 * cols int8; element = code · its row's scale, orthonormal to ~2^-8), then rank bf16 column scales (each
 * coefficient's RMS over the message's rows), then per row a scale byte s (step = 2^((s - 128) / 8)) and
 * ceil(rank·B/8) bytes of B-bit codes u packed least significant bit first; coefficient k of a row is
 * (u - (2^B - 1)/2) · step · column scale k. */
#ifndef XDC_LOWRANK_H
#define XDC_LOWRANK_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct xdc_lowrank_cfg {
    int cols;    /* C: values per row (1..65535) */
    int rank;    /* r: 1..cols */
    int bits;    /* coefficient bits: 3..8 */
    int refresh; /* encoder: a new basis every `refresh` messages (>= 1) */
    size_t rows; /* most rows one message carries (the scratch size) */
} xdc_lowrank_cfg;

#define XDC_LOWRANK_HEADER 16 /* bytes of the message header */

/* True when `text` names this codec ("lowrank" with or without parameters: "lowrank", "lowrank:…", "lowrank/…"). */
int xdc_lowrank_named(const char *text);
/* Parses "lowrank[:rank[:intB[:refresh]]][/rank[:intB[:refresh]]]" into the rank, bits and refresh of fwd
 * (activations) and bwd (their gradients; after '/', else as the activations when those are given).
 * Plain "lowrank" is the measured setting (docs/compression.md): activations rank cols/4 int4, gradients
 * rank cols/2 int3, a basis every 2 messages; a part's missing fields keep its direction's. Both cols
 * must be set first. XDC_ERR_CONFIG with the reason in diag on anything else. */
xdc_err_t xdc_lowrank_parse(const char *text, xdc_lowrank_cfg *fwd, xdc_lowrank_cfg *bwd, xdc_diag *diag);

/* What `spec` costs for one activation and its gradient, each `rows` rows of `cols` values, averaged over the
 * refresh cycles (the planner's cost model, docs/planner.md): *ratio = wire bytes over their fp32 bytes,
 * *flops = host arithmetic to encode and decode both (the basis fit amortized over its messages).
 * XDC_ERR_CONFIG on a spec xdc_lowrank_parse refuses. */
xdc_err_t xdc_lowrank_estimate(const char *spec, int cols, size_t rows, double *ratio, double *flops, xdc_diag *diag);

typedef struct xdc_lowrank xdc_lowrank;

/* Validates cfg (XDC_ERR_CONFIG) and allocates every buffer; nothing is allocated after. */
xdc_err_t xdc_lowrank_create(const xdc_lowrank_cfg *cfg, xdc_lowrank **out, xdc_diag *diag);
void xdc_lowrank_destroy(xdc_lowrank *c);
/* Most bytes a message of `rows` rows takes (with a basis). */
size_t xdc_lowrank_bound(const xdc_lowrank *c, size_t rows);
/* Encodes x (rows × cols fp32, host) into out (cap bytes); a basis is computed and shipped on the first
 * call and every `refresh` calls. NaN, ±Inf or |x| > 2^100 is XDC_ERR_RANGE (index in diag), nothing
 * changed. The same inputs in the same order give the same bytes. */
xdc_err_t xdc_lowrank_encode(xdc_lowrank *c, const float *x, size_t rows, uint8_t *out, size_t cap, size_t *len,
                             xdc_diag *diag);
/* Decodes one message into x (rows × cols fp32, host), storing a shipped basis first. Every header field
 * is checked (XDC_ERR_CORRUPT); a message whose basis id is not the one stored (a message lost or out of
 * order) is XDC_ERR_PROTO. */
xdc_err_t xdc_lowrank_decode(xdc_lowrank *c, const uint8_t *in, size_t len, float *x, size_t rows, xdc_diag *diag);
/* The current basis (rank × cols fp32, orthonormal rows), NULL before the first; its id (0 before). */
const float *xdc_lowrank_basis(const xdc_lowrank *c, uint32_t *id);

#endif /* XDC_LOWRANK_H */
