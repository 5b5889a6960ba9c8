/* fuzz_wan_frame.c — the WAN frame header decoder on untrusted bytes: it must reject or accept without
 * crashing, never accept a payload above the bound, and whatever it accepts must encode back to the
 * same 56 bytes (so no field is silently dropped or reinterpreted). Input: a header, then optional
 * bytes: the first sets the payload bound (its value << 16). Each input is decoded twice: as it is,
 * and with its check word recomputed, so the field rules behind the check are reached too. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "wan/wan_frame.h"
#include "wan/xdc_wan.h"

#include <stdio.h>
#include <string.h>

static void decode_one(const uint8_t *hdr, uint32_t bound)
{
    wan_frame f;
    xdc_diag d;
    d.msg[0] = '\0';
    if (wan_frame_decode(hdr, bound, &f, &d) != XDC_OK) {
        if (d.msg[0] == '\0') __builtin_trap(); /* a refusal always says why */
        return;
    }
    if (f.payload_len > bound || f.payload_len > XDC_WAN_MAX_FRAME_PAYLOAD) __builtin_trap();
    if (f.type == WAN_FT_DATA && (f.msg_off > f.msg_len || f.payload_len > f.msg_len - f.msg_off)) __builtin_trap();
    uint8_t again[WAN_FRAME_HDR_BYTES];
    wan_frame_encode(&f, again);
    if (memcmp(again, hdr, WAN_FRAME_HDR_BYTES) != 0) __builtin_trap();
}

XDC_FUZZ_TARGET(wan_frame)
{
    if (size < WAN_FRAME_HDR_BYTES) return 0;
    uint32_t bound = size > WAN_FRAME_HDR_BYTES ? (uint32_t)data[WAN_FRAME_HDR_BYTES] << 16 : 1u << 20;
    decode_one(data, bound);
    uint8_t fixed[WAN_FRAME_HDR_BYTES];
    memcpy(fixed, data, sizeof fixed);
    uint32_t check = (uint32_t)xdc_xxh3(fixed, 48);
    for (int i = 0; i < 4; i++) fixed[48 + i] = (uint8_t)(check >> (8 * i));
    decode_one(fixed, bound);
    return 0;
}

/* The header under a 1 MiB payload bound: its fields. */
XDC_FUZZ_VERDICT(wan_frame)
{
    if (size < WAN_FRAME_HDR_BYTES) {
        snprintf(summary, cap, "%zu bytes is shorter than a header", size);
        return XDC_ERR_PROTO;
    }
    wan_frame f;
    xdc_diag d = {{0}};
    xdc_err_t rc = wan_frame_decode(data, 1u << 20, &f, &d);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", d.msg);
        return rc;
    }
    snprintf(summary, cap, "type=%u cls=%u codec=%u flags=%u payload=%u seq=%llu msg_seq=%llu off=%llu len=%llu",
             f.type, f.cls, f.codec, f.flags, f.payload_len, (unsigned long long)f.seq, (unsigned long long)f.msg_seq,
             (unsigned long long)f.msg_off, (unsigned long long)f.msg_len);
    return XDC_OK;
}
