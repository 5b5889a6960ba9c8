/* codec_private.h — the layout of an xdc_codec context and of a chunk header, shared by codec_ctx.c
 * (configuration, lifetime, residual) and codec_chunk.c (encode/decode of one chunk). */
#ifndef XDC_CODEC_PRIVATE_H
#define XDC_CODEC_PRIVATE_H

#include "compression/xdc_codec.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_quant.h"

#include <zstd.h>

/* Chunk header, 40 bytes, little-endian (docs/compression.md, "Chunk format"):
 *   0 u32 magic "XDC1"   4 u8 version   5 u8 codec   6 u8 flags   7 u8 zero
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

typedef struct codec_hdr {
    uint8_t codec, flags;
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
                                 * dense values of a top-k chunk on decode */
    float *decoded;            /* device (chunk_elems) fp32: bf16 values checked here before they are added */
    void *topk_scratch;        /* device (topk_scratch_bytes) for topk_select */
    size_t *count;             /* device: count_out_of_range's result */
    size_t *hcount;            /* pinned host: its copy */
    size_t raw_cap;            /* bytes of raw, hraw and planes: the largest raw payload of any codec */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    xdc_codec_stats stats;
};

/* Raw payload bytes of a chunk of `count` elements with `param` (block or k). */
size_t codec_raw_len(xdc_codec_kind kind, size_t count, size_t param);
/* Bytes per element for byte planes of a codec's payload; 0 when planes do not help (int8, int4). */
size_t codec_plane_elem(xdc_codec_kind kind);
/* k for a top-k chunk of `count` elements. */
size_t codec_topk_k(float fraction, size_t count);

#endif /* XDC_CODEC_PRIVATE_H */
