/* wan_frame.h — private: the wire frame header of the WAN transport (see docs/wan.md). Fixed 56 bytes,
 * little-endian, followed by payload_len bytes of payload. Pure functions, no I/O, fuzzed by
 * tests/fuzz/fuzz_wan_frame.c. */
#ifndef XDC_WAN_FRAME_H
#define XDC_WAN_FRAME_H

#include "common/xdc_err.h"

#include <stdint.h>

#define WAN_FRAME_MAGIC     0x57434458u /* "XDCW" read as little-endian u32 */
#define WAN_FRAME_VERSION   2           /* 2: sequence numbers and ACKs per traffic class */
#define WAN_FRAME_HDR_BYTES 56
/* Connections of one peer pair: up to XDC_WAN_MAX_STREAMS bulk streams and the latency stream. */
#define WAN_MAX_CONNS       (XDC_WAN_MAX_STREAMS + 1)

enum wan_frame_type {
    WAN_FT_HELLO = 1,     /* client -> server on each new stream: session, stream index, streams */
    WAN_FT_HELLO_ACK = 2, /* server -> client: session accepted (resumed or new) */
    WAN_FT_DATA = 3,      /* a piece of a message */
    WAN_FT_ACK = 4,       /* cumulative: every DATA seq < `seq` of class `cls` was received */
    WAN_FT_PING = 5,      /* RTT probe, timestamp in msg_off */
    WAN_FT_PONG = 6,      /* echo of a PING's timestamp */
    WAN_FT_BYE = 7,       /* orderly close of the whole peer, with the closer's acks (as HELLO_ACK) */
    WAN_FT_MAX_ = 7,
};

#define WAN_FLAG_RESUMED 0x1 /* HELLO_ACK: the server still had this session's state */

typedef struct wan_frame {
    uint8_t type;
    uint8_t cls;   /* traffic class (DATA, ACK) */
    uint8_t codec; /* codec id of the message (DATA) */
    uint16_t flags;
    uint32_t payload_len; /* bytes following the header; DATA only, <= max payload */
    uint64_t seq;         /* DATA: frame sequence number in its class; ACK: cumulative ack of its class;
                           * HELLO_ACK, BYE: cumulative ack of the latency class */
    uint64_t msg_seq;     /* DATA: message index within its class; HELLO*: session id */
    uint64_t msg_off;     /* DATA: byte offset of the payload; HELLO: stream index; PING/PONG: ns;
                           * HELLO_ACK, BYE: cumulative ack of the bulk class */
    uint64_t msg_len;     /* DATA: total message bytes; HELLO: streams */
} wan_frame;

/* Write the header (WAN_FRAME_HDR_BYTES) for `f`, including its check word. */
void wan_frame_encode(const wan_frame *f, uint8_t out[WAN_FRAME_HDR_BYTES]);
/* Validate and decode a header read from the network: magic, version, check word, known type, payload
 * bound (`max_payload`), per-type field rules (control frames carry no payload, DATA pieces lie inside
 * their message). XDC_ERR_PROTO with the reason in diag on any violation. */
xdc_err_t wan_frame_decode(const uint8_t in[WAN_FRAME_HDR_BYTES], uint32_t max_payload, wan_frame *out, xdc_diag *diag);
const char *wan_frame_type_name(unsigned type);
/* The first frame of a server connection (decoded): a HELLO; when it resumes a session of
 * `session_streams` streams (0: no such session) it must name the same count. XDC_ERR_PROTO otherwise. */
xdc_err_t wan_frame_check_hello(const wan_frame *f, int session_streams, xdc_diag *diag);
/* A decoded DATA header against the receive it matched: an earlier frame of the message announced
 * `known_len` bytes (UINT64_MAX: this is the first), which this one must repeat (XDC_ERR_PROTO);
 * *oversize says whether the message is longer than the receive's `cap` bytes. */
xdc_err_t wan_frame_check_announce(const wan_frame *f, uint64_t known_len, uint64_t cap, int *oversize, xdc_diag *diag);

#endif /* XDC_WAN_FRAME_H */
