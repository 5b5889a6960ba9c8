/* fuzz_codec_sparse.c — the sparse codec's payload decoder (compression/codec_sparse.c) on untrusted
 * bytes. Random headers rarely name the sparse codec with valid value bits and a checksum that matches,
 * so a second pass forces them: codec byte = sparse, aux byte = 2..8, then the check field repaired, so
 * mutations reach the scale, position and code checks. Decoded as a whole buffer in both modes. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "compression/xdc_codec.h"

#include <stdio.h>
#include <string.h>

#define FUZZ_ELEMS  12000 /* decoder buffer (fp32 elements): three sparse blocks */
#define FUZZ_MAX_IN 65536 /* bytes */

static xdc_err_t decoder(xdc_codec **dec)
{
    if (*dec) return XDC_OK;
    xdc_codec_cfg cfg = XDC_CODEC_CFG_INIT;
    cfg.n_elems = FUZZ_ELEMS;
    cfg.chunk_elems = 8192;
    cfg.error_feedback = false; /* receive only */
    return xdc_codec_create(&cfg, dec, NULL);
}

XDC_FUZZ_TARGET(codec_sparse)
{
    static xdc_codec *dec;
    static float out[FUZZ_ELEMS];
    static uint8_t fixed[FUZZ_MAX_IN];
    if (decoder(&dec) != XDC_OK) return 0;
    xdc_diag d;
    (void)xdc_codec_decode(dec, data, size, out, FUZZ_ELEMS, XDC_CODEC_ACCUMULATE, &d);
    if (size < 40 || size > FUZZ_MAX_IN) return 0;
    /* Header layout (docs/compression.md): codec at 5, aux at 7, wire_len at 20, check at 32. */
    memcpy(fixed, data, size);
    fixed[5] = XDC_CODEC_SPARSE;
    fixed[7] = (uint8_t)(2 + fixed[7] % 7);
    uint32_t wire;
    memcpy(&wire, fixed + 20, 4);
    size_t body = wire <= size - 40 ? wire : size - 40;
    uint64_t check = xdc_xxh3(fixed, 32) ^ xdc_xxh3(fixed + 40, body);
    memcpy(fixed + 32, &check, 8);
    (void)xdc_codec_decode(dec, fixed, size, out, FUZZ_ELEMS, XDC_CODEC_WRITE, &d);
    (void)xdc_codec_decode(dec, fixed, size, out, FUZZ_ELEMS, XDC_CODEC_ACCUMULATE, &d);
    return 0;
}

/* The whole buffer decoded into zeros: how many values came out nonzero and a hash of all of them. */
XDC_FUZZ_VERDICT(codec_sparse)
{
    static xdc_codec *dec;
    static float out[FUZZ_ELEMS];
    XDC_CHECK(decoder(&dec));
    memset(out, 0, sizeof out);
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_codec_decode(dec, data, size, out, FUZZ_ELEMS, XDC_CODEC_ACCUMULATE, &d);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", d.msg);
        return rc;
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < FUZZ_ELEMS; i++) nonzero += out[i] != 0.0f;
    snprintf(summary, cap, "nonzero=%zu xxh3=%016llx", nonzero, (unsigned long long)xdc_xxh3(out, sizeof out));
    return XDC_OK;
}
