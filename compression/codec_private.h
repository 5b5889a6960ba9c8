/* codec_private.h — the layout of an xdc_codec context and of a chunk header, shared by codec_ctx.c
 * (configuration, lifetime, residual) and codec_chunk.c (encode/decode of one chunk). */
#ifndef XDC_CODEC_PRIVATE_H
#define XDC_CODEC_PRIVATE_H

#include "compression/xdc_codec.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_quant.h"

#include <zstd.h>

/* Chunk header, 40 bytes, little-endian (docs/compression.md, "Chunk format"):
 *   0 u32 magic "XDC1"   4 u8 version   5 u8 codec   6 u8 flags   7 u8 aux (sparse: value bits; else 0)
 *   8 u32 count (elements)   12 u32 param (block or k)   16 u32 raw_len   20 u32 wire_len
 *  24 u64 first (element index in the buffer)   32 u64 check = xxh3(bytes 0..32) ^ xxh3(payload) */
#define CODEC_HDR_BYTES        40u
#define CODEC_MAGIC            0x31434458u /* "XDC1" */
#define CODEC_VERSION          1u
#define CODEC_FLAG_ZSTD        1u
#define CODEC_FLAG_SHUFFLED    2u
#define CODEC_MAX_CHUNK_ELEMS  (1u << 28)
/* int8/int4 payloads hardly compress, and a failed zstd attempt costs more than the quantizer: those
 * chunks first compress a sample of this many bytes from their start and skip zstd when it does not pay.
 * The decision depends on the chunk's own bytes only, so chunks encode identically in any order. */
#define CODEC_ZSTD_PROBE_BYTES 16384u

/* Sparse chunks are cut into blocks of this many elements, each with its own top-k and scales: indices
 * within a block fit u16, and a block's scales follow its local magnitudes. */
#define CODEC_SPARSE_BLOCK    4096u
#define CODEC_SPARSE_BITS_MIN 2u
#define CODEC_SPARSE_BITS_MAX 8u

/* Decoded fields larger than this are refused: inputs are capped at 2^100 and residuals add little to
 * that, so anything beyond 2^110 did not come from an encoder (and could overflow an accumulation). */
#define CODEC_WIRE_MAX_ABS 1.2980742146337069e33f

typedef struct codec_hdr {
    uint8_t codec, flags, aux;
    uint32_t count, param, raw_len, wire_len;
    uint64_t first, check;
} codec_hdr;

/* Where each buffer lives: the lossy stage (quantizers, top-k selection, dequantizers, the range checks of
 * the input) runs on the backend's device memory through its quant table on the calling thread's current
 * stream; only the compressed payload crosses to the host (copy_d2h into pinned memory, or back with
 * copy_h2d), where the byte planes and zstd run through the CPU quant table. With the CPU backend both
 * sides are host memory and the copies are memcpy. */
struct xdc_codec {
    xdc_codec_cfg cfg;
    const xdc_quant_ops *ops;  /* the backend's quant table: device buffers */
    const xdc_quant_ops *hops; /* the CPU table: byte planes and wire checks on the pinned host copies */
    const xdc_device_ops *dev; /* the backend's device table: memory, copies, stream waits */
    float *residual;           /* device (n_elems) fp32, error feedback; NULL when EF is off or kind is none */
    uint8_t *raw;              /* device (raw_cap) bytes: lossy payload of one chunk (encoder output, decoder input) */
    uint8_t *hraw;             /* pinned host (raw_cap) bytes: the same payload on the host side */
    uint8_t *planes;           /* pinned host (raw_cap) bytes: byte planes of `hraw`, zstd input / output; the
                                 * (index, value) pairs of a top-k or sparse chunk on their way to the device */
    float *decoded;            /* device (chunk_elems) fp32: bf16 values checked here before they are added */
    void *topk_scratch;        /* device (topk_scratch_bytes) for topk_select */
    size_t *count;             /* device: count_out_of_range's result */
    size_t *hcount;            /* pinned host: its copy */
    size_t raw_cap;            /* bytes of raw, hraw and planes: the largest raw payload of any codec */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    xdc_codec_stats stats;
};

/* Raw payload bytes of a chunk of `count` elements with `param` (block or k; sparse: k of a full block)
 * and `aux` (sparse: value bits). */
size_t codec_raw_len(xdc_codec_kind kind, size_t count, size_t param, size_t aux);
/* Bytes per element for byte planes of a codec's payload; 0 when planes do not help (int8, int4). */
size_t codec_plane_elem(xdc_codec_kind kind);
/* The header parameter of a chunk of `count` elements under cfg: int8/int4 block, top-k k, sparse k of a
 * full block, else 0. */
size_t codec_chunk_param(const xdc_codec_cfg *cfg, size_t count);
/* k for a top-k chunk of `count` elements. */
size_t codec_topk_k(float fraction, size_t count);

/* codec_sparse.c. k of a sparse block of `len` elements when a full block keeps `kfull`; and the total
 * over a chunk of `count` elements. */
size_t codec_sparse_block_k(size_t kfull, size_t len);
size_t codec_sparse_total_k(size_t kfull, size_t count);
/* Scatter k (index, value) pairs from pinned host memory into dst (device, n fp32): they cross PCIe into
 * c->raw (8k bytes), then the device writes them (after zeroing dst) or adds them. Host buffers may be
 * reused after the next stream_sync. */
xdc_err_t codec_scatter_pairs(xdc_codec *c, const uint32_t *idx, const float *val, size_t k, float *dst, size_t n,
                              bool add);
/* Lossy stage of a sparse chunk: top-k per block of xs (m fp32, device) with residual slice r (device,
 * or NULL), values quantized on the host into payload (host, codec_raw_len bytes); the quantization
 * error goes back into r. */
xdc_err_t codec_sparse_encode(xdc_codec *c, const float *xs, float *r, size_t m, size_t kfull, uint8_t *payload);
/* Checks a sparse payload (host) of chunk h and writes or adds its values into dst (device, h->count). */
xdc_err_t codec_sparse_decode(xdc_codec *c, const codec_hdr *h, const uint8_t *payload, float *dst, bool add,
                              xdc_diag *diag);

#endif /* XDC_CODEC_PRIVATE_H */
