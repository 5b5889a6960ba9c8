/* fuzz_wan_announce.c — a DATA header as the receive path judges it: decode under the engine's frame
 * bound, then the announcement against the posted receive (the message length repeated by every frame,
 * within XDC_WAN_MAX_MESSAGE, longer than the buffer or not). Input: a 56-byte header, then optional
 * state, little-endian: u64 length an earlier frame announced (all ones: none), u64 receive capacity.
 * The check word is recomputed on a second pass so the rules behind it are reached. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "wan/wan_frame.h"
#include "wan/xdc_wan.h"

#include <stdio.h>
#include <string.h>

#define ANNOUNCE_BOUND (1u << 20) /* the engine's default frame_bytes */

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static xdc_err_t announce_one(const uint8_t *hdr, uint64_t known, uint64_t cap, wan_frame *f, int *oversize,
                              xdc_diag *d)
{
    d->msg[0] = '\0';
    *oversize = 0;
    xdc_err_t rc = wan_frame_decode(hdr, ANNOUNCE_BOUND, f, d);
    if (rc == XDC_OK && f->type != WAN_FT_DATA) {
        xdc_diag_set(d, "%s frame is not an announcement", wan_frame_type_name(f->type));
        return XDC_ERR_INVALID;
    }
    if (rc == XDC_OK) rc = wan_frame_check_announce(f, known, cap, oversize, d);
    if (rc != XDC_OK && d->msg[0] == '\0') __builtin_trap();
    if (rc == XDC_OK) {
        /* Whatever is accepted is safe to place: inside its message, its message inside the bound, the
         * length the same as before, and never written into a buffer it does not fit. */
        if (f->msg_len > XDC_WAN_MAX_MESSAGE || f->msg_off > f->msg_len || f->payload_len > f->msg_len - f->msg_off ||
            f->payload_len > ANNOUNCE_BOUND || (known != UINT64_MAX && known != f->msg_len) ||
            (!*oversize && f->msg_off + f->payload_len > cap))
            __builtin_trap();
    }
    return rc;
}

static void state_of(const uint8_t *data, size_t size, uint64_t *known, uint64_t *cap)
{
    *known = size >= WAN_FRAME_HDR_BYTES + 8 ? le64(data + WAN_FRAME_HDR_BYTES) : UINT64_MAX;
    *cap = size >= WAN_FRAME_HDR_BYTES + 16 ? le64(data + WAN_FRAME_HDR_BYTES + 8) : 1u << 20;
}

XDC_FUZZ_TARGET(wan_announce)
{
    if (size < WAN_FRAME_HDR_BYTES) return 0;
    uint64_t known, cap;
    state_of(data, size, &known, &cap);
    wan_frame f;
    xdc_diag d;
    int oversize;
    announce_one(data, known, cap, &f, &oversize, &d);
    uint8_t fixed[WAN_FRAME_HDR_BYTES];
    memcpy(fixed, data, sizeof fixed);
    uint32_t check = (uint32_t)xdc_xxh3(fixed, 48);
    for (int i = 0; i < 4; i++) fixed[48 + i] = (uint8_t)(check >> (8 * i));
    announce_one(fixed, known, cap, &f, &oversize, &d);
    return 0;
}

/* The message, piece and verdict on the receive buffer, or the refusal. */
XDC_FUZZ_VERDICT(wan_announce)
{
    if (size < WAN_FRAME_HDR_BYTES) {
        snprintf(summary, cap, "%zu bytes is shorter than a header", size);
        return XDC_ERR_PROTO;
    }
    uint64_t known, rcap;
    state_of(data, size, &known, &rcap);
    wan_frame f;
    xdc_diag d;
    int oversize;
    xdc_err_t rc = announce_one(data, known, rcap, &f, &oversize, &d);
    if (rc != XDC_OK) snprintf(summary, cap, "%s", d.msg);
    else
        snprintf(summary, cap, "msg_seq=%llu len=%llu piece=[%llu,+%u) %s", (unsigned long long)f.msg_seq,
                 (unsigned long long)f.msg_len, (unsigned long long)f.msg_off, f.payload_len,
                 oversize ? "oversize" : "fits");
    return rc;
}
