/* fuzz_lowrank.c — the low-rank activation codec's decoder (compression/codec_lowrank.c) on untrusted
 * bytes, with a fresh receiver per input (8 columns, rank 3, int3: codes cross byte boundaries, at most
 * 16 rows). Random headers rarely match, so a second pass forces the header valid (a basis, id 1, the rows
 * the length holds) so mutations reach the basis and column scale checks and the codes, then sends the
 * same message again without its basis, to the receiver that now holds it. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "compression/xdc_lowrank.h"

#include <stdio.h>
#include <string.h>

#define FUZZ_COLS  8
#define FUZZ_RANK  3
#define FUZZ_BITS  3
#define FUZZ_ROWS  16
#define FUZZ_BASIS (FUZZ_RANK * (FUZZ_COLS + 2)) /* bytes: bf16 row scales, int8 elements */
#define FUZZ_FIXED (XDC_LOWRANK_HEADER + FUZZ_BASIS + FUZZ_RANK * 2)
#define FUZZ_ROW   (1 + (FUZZ_RANK * FUZZ_BITS + 7) / 8) /* bytes: the scale byte and the codes */

static xdc_err_t receiver(xdc_lowrank **c)
{
    xdc_lowrank_cfg cfg = {.cols = FUZZ_COLS, .rank = FUZZ_RANK, .bits = FUZZ_BITS, .refresh = 1, .rows = FUZZ_ROWS};
    return xdc_lowrank_create(&cfg, c, NULL);
}

/* The rows the header names, at most FUZZ_ROWS (the decoder refuses a mismatch either way). */
static size_t header_rows(const uint8_t *data, size_t size)
{
    if (size < 12) return 0;
    uint32_t rows = (uint32_t)data[8] | (uint32_t)data[9] << 8 | (uint32_t)data[10] << 16 | (uint32_t)data[11] << 24;
    return rows < FUZZ_ROWS ? rows : FUZZ_ROWS;
}

XDC_FUZZ_TARGET(lowrank)
{
    static float out[FUZZ_ROWS * FUZZ_COLS];
    static uint8_t fixed[FUZZ_FIXED + FUZZ_ROWS * FUZZ_ROW];
    xdc_lowrank *c = NULL;
    if (receiver(&c) != XDC_OK) return 0;
    xdc_diag d;
    (void)xdc_lowrank_decode(c, data, size, out, header_rows(data, size), &d);
    xdc_lowrank_destroy(c);
    if (size < FUZZ_FIXED || receiver(&c) != XDC_OK) return 0;
    size_t rows = (size - FUZZ_FIXED) / FUZZ_ROW;
    if (rows > FUZZ_ROWS) rows = FUZZ_ROWS;
    size_t len = FUZZ_FIXED + rows * FUZZ_ROW;
    memcpy(fixed, data, len);
    const uint8_t head[XDC_LOWRANK_HEADER] = {'L',           2, FUZZ_BITS, 1, FUZZ_RANK, 0, FUZZ_COLS, 0,
                                              (uint8_t)rows, 0, 0,         0, 1,         0, 0,         0};
    memcpy(fixed, head, sizeof head);
    if (xdc_lowrank_decode(c, fixed, len, out, rows, &d) == XDC_OK) {
        fixed[3] = 0; /* the same message again, its basis left out */
        memmove(fixed + XDC_LOWRANK_HEADER, fixed + XDC_LOWRANK_HEADER + FUZZ_BASIS,
                len - XDC_LOWRANK_HEADER - FUZZ_BASIS);
        (void)xdc_lowrank_decode(c, fixed, len - FUZZ_BASIS, out, rows, &d);
    }
    xdc_lowrank_destroy(c);
    return 0;
}

/* The message decoded by a fresh receiver: its rows and a hash of the values. */
XDC_FUZZ_VERDICT(lowrank)
{
    static float out[FUZZ_ROWS * FUZZ_COLS];
    xdc_lowrank *c = NULL;
    XDC_CHECK(receiver(&c));
    memset(out, 0, sizeof out);
    xdc_diag d = {{0}};
    size_t rows = header_rows(data, size);
    xdc_err_t rc = xdc_lowrank_decode(c, data, size, out, rows, &d);
    xdc_lowrank_destroy(c);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", d.msg);
        return rc;
    }
    snprintf(summary, cap, "rows=%zu xxh3=%016llx", rows,
             (unsigned long long)xdc_xxh3(out, rows * FUZZ_COLS * sizeof(float)));
    return XDC_OK;
}
