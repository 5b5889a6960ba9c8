/* fuzz_wan_hello.c — the first frame a WAN server reads on a fresh connection, before the connection
 * belongs to any peer: header decode (no payload allowed) and the HELLO rules (a HELLO, naming a stream
 * inside its count, and the count of the session it resumes). Input: a 56-byte header, then an optional
 * byte: the stream count of the session it would resume (0: none). The check word is recomputed on a
 * second pass so the rules behind it are reached. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "wan/wan_frame.h"
#include "wan/xdc_wan.h"

#include <stdio.h>
#include <string.h>

static xdc_err_t hello_one(const uint8_t *hdr, int session_streams, wan_frame *f, xdc_diag *d)
{
    d->msg[0] = '\0';
    xdc_err_t rc = wan_frame_decode(hdr, 0, f, d);
    if (rc == XDC_OK) rc = wan_frame_check_hello(f, session_streams, d);
    if (rc != XDC_OK && d->msg[0] == '\0') __builtin_trap(); /* a refusal always says why */
    if (rc == XDC_OK &&
        (f->type != WAN_FT_HELLO || f->payload_len != 0 || f->msg_len < 1 || f->msg_len > XDC_WAN_MAX_STREAMS ||
         f->msg_off >= f->msg_len || (session_streams > 0 && f->msg_len != (uint64_t)session_streams)))
        __builtin_trap(); /* accepted a HELLO the engine would index out of its stream table with */
    return rc;
}

XDC_FUZZ_TARGET(wan_hello)
{
    if (size < WAN_FRAME_HDR_BYTES) return 0;
    int session = size > WAN_FRAME_HDR_BYTES ? data[WAN_FRAME_HDR_BYTES] : 0;
    wan_frame f;
    xdc_diag d;
    hello_one(data, session, &f, &d);
    uint8_t fixed[WAN_FRAME_HDR_BYTES];
    memcpy(fixed, data, sizeof fixed);
    uint32_t check = (uint32_t)xdc_xxh3(fixed, 48);
    for (int i = 0; i < 4; i++) fixed[48 + i] = (uint8_t)(check >> (8 * i));
    hello_one(fixed, session, &f, &d);
    return 0;
}

/* The session, stream and count of an accepted HELLO, or the refusal. */
XDC_FUZZ_VERDICT(wan_hello)
{
    if (size < WAN_FRAME_HDR_BYTES) {
        snprintf(summary, cap, "%zu bytes is shorter than a header", size);
        return XDC_ERR_PROTO;
    }
    int session = size > WAN_FRAME_HDR_BYTES ? data[WAN_FRAME_HDR_BYTES] : 0;
    wan_frame f;
    xdc_diag d;
    xdc_err_t rc = hello_one(data, session, &f, &d);
    if (rc != XDC_OK) snprintf(summary, cap, "%s", d.msg);
    else
        snprintf(summary, cap, "session=%llu stream=%llu of %llu%s", (unsigned long long)f.msg_seq,
                 (unsigned long long)f.msg_off, (unsigned long long)f.msg_len, session ? " resumed" : " new");
    return rc;
}
