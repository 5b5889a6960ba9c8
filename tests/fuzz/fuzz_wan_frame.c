/* fuzz_wan_frame.c — the WAN frame header decoder on untrusted bytes: it must reject or accept without
 * crashing, never accept a payload above the bound, and whatever it accepts must encode back to the
 * same 56 bytes (so no field is silently dropped or reinterpreted). Input: a header, optionally
 * followed by payload bytes that are ignored. */
#include "tests/fuzz/xdc_fuzz.h"

#include "wan/wan_frame.h"
#include "wan/xdc_wan.h"

#include <string.h>

XDC_FUZZ_TARGET(wan_frame)
{
    if (size < WAN_FRAME_HDR_BYTES) return 0;
    wan_frame f;
    xdc_diag d;
    uint32_t bound = size > WAN_FRAME_HDR_BYTES ? (uint32_t)(data[WAN_FRAME_HDR_BYTES] << 16) : (1u << 20);
    if (wan_frame_decode(data, bound, &f, &d) != XDC_OK) {
        if (d.msg[0] == '\0') __builtin_trap(); /* a refusal always says why */
        return 0;
    }
    if (f.payload_len > bound || f.payload_len > XDC_WAN_MAX_FRAME_PAYLOAD) __builtin_trap();
    if (f.type == WAN_FT_DATA && (f.msg_off > f.msg_len || f.payload_len > f.msg_len - f.msg_off)) __builtin_trap();
    uint8_t again[WAN_FRAME_HDR_BYTES];
    wan_frame_encode(&f, again);
    if (memcmp(again, data, WAN_FRAME_HDR_BYTES) != 0) __builtin_trap();
    return 0;
}
