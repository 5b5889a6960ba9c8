/* wan_frame.c — encoding and validating decoding of the WAN frame header. Layout (little-endian):
 *   0 magic u32 | 4 version u8 | 5 type u8 | 6 class u8 | 7 codec u8 | 8 flags u16 | 10 zero u16
 *  12 payload_len u32 | 16 seq u64 | 24 msg_seq u64 | 32 msg_off u64 | 40 msg_len u64
 *  48 check u32 (low 32 bits of XXH3 over bytes 0..47) | 52 zero u32
 * The check word catches a desynchronised stream (reading a payload as a header) before any length in
 * it is trusted; TLS already authenticates the bytes themselves. */
#include "wan/wan_frame.h"

#include "common/xdc_hash.h"
#include "wan/xdc_wan.h"

#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t header_check(const uint8_t *hdr) { return (uint32_t)xdc_xxh3(hdr, 48); }

const char *wan_frame_type_name(unsigned type)
{
    static const char *names[] = {"?", "HELLO", "HELLO_ACK", "DATA", "ACK", "PING", "PONG", "BYE"};
    return type <= WAN_FT_MAX_ ? names[type] : "unknown";
}

void wan_frame_encode(const wan_frame *f, uint8_t out[WAN_FRAME_HDR_BYTES])
{
    memset(out, 0, WAN_FRAME_HDR_BYTES);
    put32(out, WAN_FRAME_MAGIC);
    out[4] = WAN_FRAME_VERSION;
    out[5] = f->type;
    out[6] = f->cls;
    out[7] = f->codec;
    put16(out + 8, f->flags);
    put32(out + 12, f->payload_len);
    put64(out + 16, f->seq);
    put64(out + 24, f->msg_seq);
    put64(out + 32, f->msg_off);
    put64(out + 40, f->msg_len);
    put32(out + 48, header_check(out));
}

xdc_err_t wan_frame_decode(const uint8_t in[WAN_FRAME_HDR_BYTES], uint32_t max_payload, wan_frame *out, xdc_diag *diag)
{
    uint32_t magic = get32(in);
    if (magic != WAN_FRAME_MAGIC) {
        xdc_diag_set(diag, "bad frame magic 0x%08x (expected 0x%08x)", magic, WAN_FRAME_MAGIC);
        return XDC_ERR_PROTO;
    }
    if (in[4] != WAN_FRAME_VERSION) {
        xdc_diag_set(diag, "unsupported frame version %u (this build speaks %u)", in[4], WAN_FRAME_VERSION);
        return XDC_ERR_PROTO;
    }
    uint32_t check = get32(in + 48);
    if (check != header_check(in)) {
        xdc_diag_set(diag, "frame header check word mismatch (stream out of sync or corrupted)");
        return XDC_ERR_PROTO;
    }
    if (get16(in + 10) != 0 || get32(in + 52) != 0) {
        xdc_diag_set(diag, "reserved frame header bytes are not zero");
        return XDC_ERR_PROTO;
    }
    wan_frame f = {
        .type = in[5],
        .cls = in[6],
        .codec = in[7],
        .flags = get16(in + 8),
        .payload_len = get32(in + 12),
        .seq = get64(in + 16),
        .msg_seq = get64(in + 24),
        .msg_off = get64(in + 32),
        .msg_len = get64(in + 40),
    };
    if (f.type < WAN_FT_HELLO || f.type > WAN_FT_MAX_) {
        xdc_diag_set(diag, "unknown frame type %u", f.type);
        return XDC_ERR_PROTO;
    }
    if (f.payload_len > max_payload || f.payload_len > XDC_WAN_MAX_FRAME_PAYLOAD) {
        xdc_diag_set(diag, "%s frame payload of %u bytes exceeds the bound of %u bytes", wan_frame_type_name(f.type),
                     f.payload_len, max_payload);
        return XDC_ERR_PROTO;
    }
    if (f.type == WAN_FT_DATA) {
        if (f.cls >= XDC_WAN_NUM_CLASSES) {
            xdc_diag_set(diag, "DATA frame with unknown traffic class %u", f.cls);
            return XDC_ERR_PROTO;
        }
        if (f.msg_off > f.msg_len || f.payload_len > f.msg_len - f.msg_off) {
            xdc_diag_set(diag, "DATA frame seq %llu: piece [%llu, +%u) lies outside its %llu-byte message",
                         (unsigned long long)f.seq, (unsigned long long)f.msg_off, f.payload_len,
                         (unsigned long long)f.msg_len);
            return XDC_ERR_PROTO;
        }
        if (f.msg_len > XDC_WAN_MAX_MESSAGE) {
            xdc_diag_set(diag, "DATA frame seq %llu announces a message of %llu bytes, above the bound of %llu bytes",
                         (unsigned long long)f.seq, (unsigned long long)f.msg_len,
                         (unsigned long long)XDC_WAN_MAX_MESSAGE);
            return XDC_ERR_PROTO;
        }
        if (f.payload_len == 0 && f.msg_len != 0) {
            xdc_diag_set(diag, "empty DATA frame for a %llu-byte message", (unsigned long long)f.msg_len);
            return XDC_ERR_PROTO;
        }
    } else {
        if (f.payload_len != 0) {
            xdc_diag_set(diag, "%s control frame carries %u payload bytes", wan_frame_type_name(f.type), f.payload_len);
            return XDC_ERR_PROTO;
        }
        if (f.type == WAN_FT_HELLO && (f.msg_len < 1 || f.msg_len > WAN_MAX_CONNS || f.msg_off >= f.msg_len)) {
            xdc_diag_set(diag, "HELLO for stream %llu of %llu streams is out of range (1..%d streams)",
                         (unsigned long long)f.msg_off, (unsigned long long)f.msg_len, WAN_MAX_CONNS);
            return XDC_ERR_PROTO;
        }
        if (f.type == WAN_FT_ACK && f.cls >= XDC_WAN_NUM_CLASSES) {
            xdc_diag_set(diag, "ACK frame with unknown traffic class %u", f.cls);
            return XDC_ERR_PROTO;
        }
    }
    *out = f;
    return XDC_OK;
}

xdc_err_t wan_frame_check_hello(const wan_frame *f, int session_streams, xdc_diag *diag)
{
    if (f->type != WAN_FT_HELLO) {
        xdc_diag_set(diag, "first frame is %s, not HELLO", wan_frame_type_name(f->type));
        return XDC_ERR_PROTO;
    }
    if (session_streams > 0 && f->msg_len != (uint64_t)session_streams) {
        xdc_diag_set(diag, "HELLO names %llu streams, its session has %d", (unsigned long long)f->msg_len,
                     session_streams);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

xdc_err_t wan_frame_check_announce(const wan_frame *f, uint64_t known_len, uint64_t cap, int *oversize, xdc_diag *diag)
{
    if (known_len != UINT64_MAX && known_len != f->msg_len) {
        xdc_diag_set(diag, "message %llu changed length from %llu to %llu bytes", (unsigned long long)f->msg_seq,
                     (unsigned long long)known_len, (unsigned long long)f->msg_len);
        return XDC_ERR_PROTO;
    }
    *oversize = f->msg_len > cap;
    return XDC_OK;
}
