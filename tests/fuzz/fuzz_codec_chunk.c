/* fuzz_codec_chunk.c — the codec chunk decoder on untrusted bytes: every input is decoded as one chunk
 * (write and accumulate modes) and as a whole buffer; a second pass repairs the checksum field first so
 * mutations reach the checks behind it (counts, lengths, zstd payload, top-k indices, value ranges). */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "compression/xdc_codec.h"

#include <stdio.h>
#include <string.h>

#define FUZZ_ELEMS  8192  /* decoder buffer (fp32 elements) */
#define FUZZ_CHUNK  4096  /* decoder chunk size (elements): larger chunks must be refused */
#define FUZZ_MAX_IN 65536 /* bytes */

static void decode_all_ways(xdc_codec *c, const uint8_t *data, size_t size, float *out)
{
    size_t used = 0;
    xdc_diag d;
    (void)xdc_codec_decode_chunk(c, data, size, out, FUZZ_ELEMS, XDC_CODEC_WRITE, &used, NULL, NULL, &d);
    (void)xdc_codec_decode_chunk(c, data, size, out, FUZZ_ELEMS, XDC_CODEC_ACCUMULATE, &used, NULL, NULL, &d);
    (void)xdc_codec_decode(c, data, size, out, FUZZ_ELEMS, XDC_CODEC_WRITE, &d);
}

XDC_FUZZ_TARGET(codec_chunk)
{
    static xdc_codec *dec;
    static float out[FUZZ_ELEMS];
    static uint8_t fixed[FUZZ_MAX_IN];
    if (!dec) {
        xdc_codec_cfg cfg = XDC_CODEC_CFG_INIT;
        cfg.n_elems = FUZZ_ELEMS;
        cfg.chunk_elems = FUZZ_CHUNK;
        if (xdc_codec_create(&cfg, &dec, NULL) != XDC_OK) return 0;
    }
    decode_all_ways(dec, data, size, out);
    if (size < 40 || size > FUZZ_MAX_IN) return 0;
    /* Same bytes with a valid check field (layout: docs/compression.md): wire_len at 20, check at 32. */
    memcpy(fixed, data, size);
    uint32_t wire;
    memcpy(&wire, fixed + 20, 4);
    size_t body = wire <= size - 40 ? wire : size - 40;
    uint64_t check = xdc_xxh3(fixed, 32) ^ xdc_xxh3(fixed + 40, body);
    memcpy(fixed + 32, &check, 8);
    decode_all_ways(dec, fixed, size, out);
    return 0;
}

/* Chunk after chunk into zeros until the bytes are used up: how many chunks, the slice they covered and
 * a hash of the decoded values. */
XDC_FUZZ_VERDICT(codec_chunk)
{
    static xdc_codec *dec;
    static float out[FUZZ_ELEMS];
    if (!dec) {
        xdc_codec_cfg cfg = XDC_CODEC_CFG_INIT;
        cfg.n_elems = FUZZ_ELEMS;
        cfg.chunk_elems = FUZZ_CHUNK;
        XDC_CHECK(xdc_codec_create(&cfg, &dec, NULL));
    }
    memset(out, 0, sizeof out);
    size_t at = 0, lo = FUZZ_ELEMS, hi = 0;
    int chunks = 0;
    do {
        size_t used = 0, first = 0, count = 0;
        xdc_diag d = {{0}};
        xdc_err_t rc = xdc_codec_decode_chunk(dec, data + at, size - at, out, FUZZ_ELEMS, XDC_CODEC_WRITE, &used,
                                              &first, &count, &d);
        if (rc != XDC_OK) {
            snprintf(summary, cap, "chunk %d: %s", chunks, d.msg);
            return rc;
        }
        at += used;
        chunks++;
        lo = first < lo ? first : lo;
        hi = first + count > hi ? first + count : hi;
    } while (at < size);
    snprintf(summary, cap, "chunks=%d elems=[%zu,%zu) xxh3=%016llx", chunks, lo, hi,
             (unsigned long long)xdc_xxh3(out, sizeof out));
    return XDC_OK;
}
