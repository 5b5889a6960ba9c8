/* xdc_codec.h — the gradient codec pipeline: a lossy stage (none, bf16, int8, int4, top-k, sparse) with error
 * feedback, then a lossless stage (byte planes + zstd, skipped per chunk when it does not pay), cut
 * into self-describing chunks so encode, send and decode can pipeline. docs/compression.md describes
 * the chunk format, the error bound of each codec, error feedback and the NaN/Inf policy.
 *
 * Usage: one context per gradient buffer (bucket, DiLoCo fragment), created once with the buffer
 * length; every encode of that buffer goes through it so the residual of error feedback carries over.
 * Callers bring output buffers sized with xdc_codec_bound(). A context is used by one thread at a time
 * and allocates nothing after xdc_codec_create(). A receive-only context (decoding what peers send)
 * sets error_feedback = false, so no residual is allocated; its chunk_elems must be at least the
 * senders' (larger chunks are refused), while its kind does not matter: chunks name their codec. */
#ifndef XDC_CODEC_H
#define XDC_CODEC_H

#include "common/xdc_err.h"
#include "kernels/xdc_kernels.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    XDC_CODEC_NONE = 0, /* fp32 as is (lossless; zstd on byte planes may still help) */
    XDC_CODEC_BF16 = 1, /* round to bfloat16 */
    XDC_CODEC_INT8 = 2, /* blockwise absmax int8 */
    XDC_CODEC_INT4 = 3, /* blockwise min/max int4 */
    XDC_CODEC_TOPK = 4, /* largest-magnitude fraction, delta-coded indices + fp32 values */
    /* top-k per 4096-element block, u16 delta-coded indices + values at 2..8 bits (sign and magnitude
     * between the block's smallest and largest kept |value|): SparseLoCo-style outer gradients */
    XDC_CODEC_SPARSE = 5,
} xdc_codec_kind;

/* The codec registry: one row per lossy codec, weakest first — the one list of codec names. Parsing and
 * formatting (below), the planner's candidates and cost model (scheduler/) and the docs follow it.
 * Estimates come from bench/codec on one core of the development VM (docs/benchmarks.md): wire bytes
 * per fp32 byte and encode / decode speeds, without the zstd stage and with it as the runtime adds it on
 * slow links (xdc_codec_zstd_level_for_link > 0). The int8 ratio with zstd is the one the demo run
 * measures (x4.4). */
typedef struct xdc_codec_estimate {
    double ratio;   /* wire bytes / fp32 bytes; top-k: per unit of the kept fraction (wire = ratio * f);
                     * sparse: per unit of the kept fraction at 2 bits (wire = ratio * f * (16 + B) / 18) */
    double enc_Bps; /* fp32 bytes encoded per second, one core */
    double dec_Bps; /* fp32 bytes decoded per second, one core */
} xdc_codec_estimate;

typedef struct xdc_codec_info {
    const char *name;     /* "int8": the word xdc_codec_parse reads before any ':' */
    xdc_codec_kind kind;  /* the registry is in kind order: xdc_codec_info_at(kind)->kind == kind */
    const char *param;    /* what ":X" sets ("block", "fraction"); NULL: takes none */
    bool param_in_size;   /* the wire size is proportional to the parameter: estimates need it ("topk:F",
                           * "sparse:F:B") */
    int lossiness;        /* 0 exact; higher is lossier (the planner's fidelity order) */
    bool for_activations; /* a candidate for activations crossing the WAN: accurate without error feedback */
    xdc_codec_estimate plain, zstd;
} xdc_codec_info;

/* Rows of the registry, and row i (NULL past the end). */
size_t xdc_codec_info_count(void);
const xdc_codec_info *xdc_codec_info_at(size_t i);
/* The row named by the first `len` characters of `name` (the part before ':'), or NULL. */
const xdc_codec_info *xdc_codec_info_find(const char *name, size_t len);
/* The cost-model numbers of codec `text` on a link of `link_gbps` Gbit/s (the zstd stage included where
 * the runtime adds it; 100 = none). `text` is a bare name for codecs whose size does not depend on their
 * parameter (int8 and int4 at their default block), "topk:F" with F in (0, 0.5] for top-k, "sparse:F:B"
 * (F in (0, 0.5], B in 2..8) for sparse; anything else is XDC_ERR_CONFIG (nothing measured for it). `info` (may be NULL) receives the row. */
xdc_err_t xdc_codec_estimate_for(const char *text, double link_gbps, xdc_codec_estimate *out,
                                 const xdc_codec_info **info);

typedef struct xdc_codec_cfg {
    xdc_codec_kind kind;
    size_t n_elems;        /* length of the buffer this context encodes (fp32 elements); the residual size */
    uint32_t block;        /* int8/int4 values per scale: even, 16..4096 (64..256 is the useful range) */
    float topk_fraction;   /* top-k: fraction of each chunk sent, in (0, 0.5] */
    float sparse_fraction; /* sparse: fraction of each 4096-element block sent, in (0, 0.5] */
    uint32_t sparse_bits;  /* sparse: bits per sent value, 2..8 (one of them the sign) */
    int zstd_level;        /* 0: no zstd stage; 1..19: ZSTD level (the link picks it) */
    float zstd_min_ratio;  /* keep a chunk's zstd output only if raw/compressed >= this (e.g. 1.05) */
    size_t chunk_elems;    /* fp32 elements per chunk (1..2^28); the pipelining unit */
    bool error_feedback;   /* keep residual = input - decoded and add it to the next input */
    /* The backend whose device holds the fp32 side (NULL: the CPU backend): encode reads device memory,
     * decode writes or accumulates into device memory, the residual and the scratch of the lossy stage
     * are device memory; the wire side (encode's output, decode's input) is host memory, ideally pinned
     * (its device table's host_alloc). Work is queued on the calling thread's current stream, and every
     * call has synchronized it when it returns. */
    const xdc_kern_backend *backend;
} xdc_codec_cfg;

/* int8 with 128-value blocks, zstd level 1 where it pays, 128 Ki elements (512 KiB fp32) per chunk, EF on.
 * 512 KiB keeps a chunk in L2 between the range check and the quantizer (bench-codec: int8 encode 0.50-0.52x
 * memcpy, against 0.45-0.53x with 1 MiB chunks) at no cost to top-k speed or zstd ratios. */
#define XDC_CODEC_CFG_INIT                                                                                        \
    {                                                                                                             \
        .kind = XDC_CODEC_INT8, .n_elems = 0, .block = 128, .topk_fraction = 0.01f, .sparse_fraction = 0.02f,     \
        .sparse_bits = 2, .zstd_level = 1, .zstd_min_ratio = 1.05f, .chunk_elems = 131072, .error_feedback = true \
    }

/* Parse "none", "bf16", "int8[:block]", "int4[:block]", "topk[:fraction]" (e.g. "topk:0.01") or
 * "sparse[:fraction[:bits]]" (e.g. "sparse:0.02:2") into the codec fields of cfg (kind, block,
 * topk_fraction, sparse_fraction, sparse_bits); other fields are left alone. XDC_ERR_CONFIG with
 * the reason in diag on anything else. */
xdc_err_t xdc_codec_parse(const char *text, xdc_codec_cfg *cfg, xdc_diag *diag);
/* The canonical text of cfg's codec ("int8:128", "topk:0.01", "sparse:0.02:2"), which xdc_codec_parse reads back. */
void xdc_codec_format(const xdc_codec_cfg *cfg, char *buf, size_t cap);
/* zstd level for a link: the highest level whose single-core speed on shuffled codec output (measured
 * by bench/codec, see docs/compression.md) stays above the link rate; 0 (off) on links so fast that
 * even level 1 would be the bottleneck. */
int xdc_codec_zstd_level_for_link(double link_gbps);

typedef struct xdc_codec xdc_codec;

typedef struct xdc_codec_stats {
    uint64_t encode_calls, chunks_encoded, chunks_zstd, chunks_decoded;
    uint64_t bytes_in;  /* fp32 bytes given to encode */
    uint64_t bytes_out; /* wire bytes encode produced */
    uint64_t rejected;  /* encodes refused for out-of-range input */
} xdc_codec_stats;

/* Validates cfg (XDC_ERR_CONFIG, reason in diag) and allocates the residual and all scratch. */
xdc_err_t xdc_codec_create(const xdc_codec_cfg *cfg, xdc_codec **out, xdc_diag *diag);
void xdc_codec_destroy(xdc_codec *c);

/* Most wire bytes encoding n (<= n_elems) elements can take. */
size_t xdc_codec_bound(const xdc_codec *c, size_t n);
/* Number of chunks a buffer of n elements is cut into. */
size_t xdc_codec_chunk_count(const xdc_codec *c, size_t n);

/* Encode x (n fp32, n == cfg.n_elems) into out (cap bytes, >= xdc_codec_bound) as consecutive chunks.
 * Error feedback is applied inside. Input with NaN or |x| > 2^100 is refused with XDC_ERR_RANGE (first
 * bad index in diag) and leaves the residual as it was for the chunks not yet encoded. The same input
 * and residual always give the same bytes. */
xdc_err_t xdc_codec_encode(xdc_codec *c, const float *x, size_t n, uint8_t *out, size_t cap, size_t *out_len,
                           xdc_diag *diag);
/* Encode only chunk `chunk` of x (elements [chunk*chunk_elems, ...)): the pipelining form. */
xdc_err_t xdc_codec_encode_chunk(xdc_codec *c, const float *x, size_t n, size_t chunk, uint8_t *out, size_t cap,
                                 size_t *out_len, xdc_diag *diag);

typedef enum {
    XDC_CODEC_WRITE = 0,      /* out[slice] = decoded */
    XDC_CODEC_ACCUMULATE = 1, /* out[slice] += decoded (receiving side of a reduction) */
} xdc_codec_mode;

/* Decode one chunk from the front of in (len bytes) into its slice of out (n fp32) and report the bytes
 * it used in *consumed and its slice in *first and *count (either may be NULL). Every header field is
 * checked (XDC_ERR_CORRUPT, reason in diag) before it is used; chunks whose element count exceeds this
 * context's chunk_elems are refused. In ACCUMULATE mode out is untouched on error; in WRITE mode the
 * slice is unspecified on error. Decoding uses scratch only, never the residual. */
xdc_err_t xdc_codec_decode_chunk(xdc_codec *c, const uint8_t *in, size_t len, float *out, size_t n, xdc_codec_mode mode,
                                 size_t *consumed, size_t *first, size_t *count, xdc_diag *diag);
/* Decode a whole encoded buffer: chunks must cover out (n fp32) exactly once, in order. */
xdc_err_t xdc_codec_decode(xdc_codec *c, const uint8_t *in, size_t len, float *out, size_t n, xdc_codec_mode mode,
                           xdc_diag *diag);

/* The residual (n_elems fp32, device memory of the context's backend) for checkpoints; stays owned by the
 * context. NULL when error_feedback is off or the kind is none (exact: nothing to feed back). */
const float *xdc_codec_residual(const xdc_codec *c);
/* Replace the residual (n == n_elems, device memory of the same backend) from a checkpoint or another
 * context, or zero it (r == NULL). */
xdc_err_t xdc_codec_set_residual(xdc_codec *c, const float *r, size_t n);
/* Change the zstd level mid-run (the link was re-measured); 0 turns the stage off. */
xdc_err_t xdc_codec_set_zstd_level(xdc_codec *c, int level);
void xdc_codec_get_stats(const xdc_codec *c, xdc_codec_stats *out);

#endif /* XDC_CODEC_H */
