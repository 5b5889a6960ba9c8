/* xdc_wan.h — the WAN transport between regions: TCP + TLS 1.3 with mutual authentication against a
 * cluster CA, K parallel streams per peer pair, framed messages striped across the streams and
 * reassembled in order, resend after reconnect, and a non-blocking isend/irecv/test API completed by a
 * progress engine thread (the NCCL net-plugin contract). The transport only: certificates (`xdc
 * certs`) are in wan/xdc_wan_certs.h, the WAN emulator (relays, network namespaces, link measurement)
 * in wan/emu/xdc_wan_emu.h.
 *
 * Identities: every certificate carries a SAN URI "xdc://RUN/REGION/RANK". A connection is accepted
 * only when the peer's chain verifies against the cluster CA, its run equals ours, and (when dialling)
 * its region and rank equal what the caller expects. Refusals come back as XDC_ERR_AUTH or XDC_ERR_TLS
 * with a message saying which peer and why.
 *
 * Threading: all functions are thread-safe. isend/irecv/test never block on the network; the engine
 * thread does all socket and TLS work. Codecs are not linked here: a message only carries a codec id
 * byte and the caller-reported pre-compression size (for statistics). */
#ifndef XDC_WAN_H
#define XDC_WAN_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

#define XDC_WAN_NAME_MAX          64
#define XDC_WAN_MAX_STREAMS       64
/* Hard bound on a frame's payload: a header announcing more is a protocol error, never an allocation. */
#define XDC_WAN_MAX_FRAME_PAYLOAD (16u << 20)
/* Hard bound on a message's length (1 TiB): a DATA header announcing more fails its peer with a protocol
 * error as soon as the header arrives; xdc_wan_isend refuses longer messages (XDC_ERR_INVALID). */
#define XDC_WAN_MAX_MESSAGE       (1ull << 40)

typedef struct xdc_wan_engine xdc_wan_engine;     /* progress thread + TLS credentials */
typedef struct xdc_wan_listener xdc_wan_listener; /* accepting socket; yields authenticated peers */
typedef struct xdc_wan_peer xdc_wan_peer;         /* one peer pair: K streams, two traffic classes */
typedef struct xdc_wan_request xdc_wan_request;   /* one isend or irecv in flight */

typedef struct xdc_wan_identity {
    char run[XDC_WAN_NAME_MAX];
    char region[XDC_WAN_NAME_MAX];
    int rank;
} xdc_wan_identity;

typedef enum {
    XDC_WAN_LATENCY = 0, /* activations: a stream of their own, written ahead of bulk (docs/wan.md) */
    XDC_WAN_BULK = 1,    /* gradient chunks */
    XDC_WAN_NUM_CLASSES = 2,
} xdc_wan_class;

typedef struct xdc_wan_config {
    const char *cert_path; /* PEM node certificate (with SAN URI xdc://RUN/REGION/RANK) */
    const char *key_path;  /* PEM private key */
    const char *ca_path;   /* PEM cluster CA certificate */
    /* PEM certificate revocation list of the cluster CA (`xdc certs revoke`), or NULL for none: a peer whose
     * certificate it lists is refused at the handshake (both ways). The engine re-reads the file when it
     * changes (looked at once a second) and cuts live connections whose certificate the new list names. */
    const char *crl_path;
    int streams;          /* bulk TCP streams per peer pair when dialling (1..XDC_WAN_MAX_STREAMS); one more
                            * stream, the first, carries the latency class alone */
    int sockbuf_bytes;    /* SO_SNDBUF/SO_RCVBUF per stream; 0 keeps the kernel's autotuning */
    uint32_t frame_bytes; /* payload bytes per DATA frame (<= XDC_WAN_MAX_FRAME_PAYLOAD) */
    int window_frames;    /* unacknowledged DATA frames per direction (power of two) */
    int64_t deadline_ms;  /* a peer silent (or unreachable) this long fails its requests */
    int backoff_min_ms;   /* reconnect backoff, doubling up to backoff_max_ms */
    int backoff_max_ms;
    int ping_interval_ms; /* RTT probe and keepalive period */
    /* Server: connections still in their TLS handshake or HELLO, per listener and per source address;
     * more are closed at once and counted as refused, so a flood of half-open connections cannot use up
     * descriptors and memory. A peer needs one per stream, so keep per_addr >= the streams of a peer + 1. */
    int max_pending_handshakes;
    int max_pending_per_addr;
} xdc_wan_config;

#define XDC_WAN_CONFIG_INIT                                                                                          \
    {                                                                                                                \
        .cert_path = NULL, .key_path = NULL, .ca_path = NULL, .crl_path = NULL, .streams = 4, .sockbuf_bytes = 0,    \
        .frame_bytes = 1u << 20, .window_frames = 1024, .deadline_ms = 30000, .backoff_min_ms = 20,                  \
        .backoff_max_ms = 2000, .ping_interval_ms = 200, .max_pending_handshakes = 256, .max_pending_per_addr = 128, \
    }

/* Per-peer measurements (one direction each where it says so). */
typedef struct xdc_wan_stats {
    double rtt_ms;             /* smoothed PING/PONG round trip; 0 before the first sample */
    double goodput_gbps;       /* acknowledged payload bits / seconds some send was queued */
    uint64_t tx_payload_bytes; /* payload bytes acknowledged by the peer (after compression) */
    uint64_t tx_raw_bytes;     /* the same messages' pre-compression bytes, as the caller reported */
    uint64_t rx_payload_bytes; /* payload bytes delivered to receives */
    /* Seconds this peer's messages were arriving: from the first DATA frame header of a message read to
     * its last byte, overlapping messages counted once. Never longer than the link took to move them (a
     * message whose bytes had already arrived before its receive was posted reads in no time), so
     * rx_payload_bytes / rx_busy_seconds is at least the rate the link moved them at: a low value is
     * evidence of a slow link, not of a late peer. */
    double rx_busy_seconds;
    uint64_t tx_wire_bytes;     /* frame headers + payload written, retransmissions included */
    uint64_t retransmit_frames; /* DATA frames sent again after a stream broke */
    uint64_t duplicate_frames;  /* DATA frames received twice and dropped */
    uint64_t reconnects;        /* streams re-established after a break */
    /* The most bulk DATA bytes (headers and payload) written to this peer's streams between a latency
     * message's isend and the write of its last byte: how much bulk went out ahead of an activation on our
     * side. The latency stream has the first write of each loop turn, so this stays near 0 unless the
     * latency stream's own socket buffer was full (docs/wan.md, "Traffic classes"). */
    uint64_t latency_bulk_ahead_bytes;
    /* Seconds since anything (a frame, a PING or PONG) last arrived from the peer. The engine answers
     * keepalives whatever its caller does, so a process blocked in a long wait stays near the ping
     * interval; a stopped or hung one grows without bound. */
    double silent_seconds;
    int streams_up; /* streams currently usable */
    int streams;    /* streams of the peer: the dialler's bulk streams and the latency stream */
} xdc_wan_stats;

/* ---- engine ------------------------------------------------------------------------------------ */

/* Load credentials (errors name the file and OpenSSL's reason), read our identity from our
 * certificate, and start the progress thread. */
xdc_err_t xdc_wan_engine_create(const xdc_wan_config *cfg, xdc_wan_engine **out, xdc_diag *diag);
/* Stop the thread and close every stream. NULL: no-op. Peers, listeners and requests of the engine
 * (pending or not) are freed with it: no handle of the engine may be used afterwards. */
void xdc_wan_engine_destroy(xdc_wan_engine *eng);
/* Our identity as read from our certificate. */
const xdc_wan_identity *xdc_wan_engine_identity(const xdc_wan_engine *eng);
/* What the engine holds now, for leak checks and the store's logs. */
typedef struct xdc_wan_counts {
    int peers;    /* sessions not yet freed: dialled, accepted, or refused and not yet reaped */
    int pending;  /* connections before their HELLO, and server sessions whose announced streams are not all up */
    int requests; /* requests not yet released */
} xdc_wan_counts;
void xdc_wan_engine_counts(xdc_wan_engine *eng, xdc_wan_counts *out);

/* ---- listening ----------------------------------------------------------------------------------- */

/* Bind and listen on host:port (host NULL or "" = all IPv4 addresses; port 0 = any free port). */
xdc_err_t xdc_wan_listen(xdc_wan_engine *eng, const char *host, int port, xdc_wan_listener **out, xdc_diag *diag);
/* The port actually bound. */
int xdc_wan_listener_port(const xdc_wan_listener *l);
/* Wait up to timeout_ms (<0: forever) for a peer whose streams all connected and authenticated.
 * XDC_ERR_TIMEOUT when none came; refused attempts do not end the wait but are remembered in
 * xdc_wan_listener_last_refusal(). */
xdc_err_t xdc_wan_accept(xdc_wan_listener *l, int64_t timeout_ms, xdc_wan_peer **out, xdc_diag *diag);
/* Copy the reason the most recent incoming connection was refused into `diag`; returns how many
 * connections this listener refused so far. */
int xdc_wan_listener_last_refusal(xdc_wan_listener *l, xdc_diag *diag);
/* Stop accepting and close the socket. Peers already accepted stay up. NULL: no-op. */
void xdc_wan_listener_close(xdc_wan_listener *l);

/* ---- dialling ------------------------------------------------------------------------------------ */

/* Open cfg->streams streams to host:port expecting the peer expect_region/expect_rank (its run must be
 * ours; expect_region NULL accepts any identity of our run, for tools like `xdc wan send`). Returns
 * at once; the engine connects in the background and requests may be posted right away. Use
 * xdc_wan_peer_wait_ready() to learn whether the handshake succeeded. */
xdc_err_t xdc_wan_connect(xdc_wan_engine *eng, const char *host, int port, const char *expect_region, int expect_rank,
                          xdc_wan_peer **out, xdc_diag *diag);
/* Wait until every stream is up (XDC_OK), the peer was refused or failed (its error and reason), or
 * timeout_ms passed (XDC_ERR_TIMEOUT). */
xdc_err_t xdc_wan_peer_wait_ready(xdc_wan_peer *p, int64_t timeout_ms, xdc_diag *diag);
const xdc_wan_identity *xdc_wan_peer_identity(const xdc_wan_peer *p);
/* Statistics snapshot. */
void xdc_wan_peer_stats(xdc_wan_peer *p, xdc_wan_stats *out);
/* Close the peer (as xdc_wan_peer_close) and give the handle up: the engine frees the peer once its
 * requests that are still out (collect them with test/wait, or cancel them) are released. The handle
 * may not be used afterwards. A long-lived listener must destroy the peers it accepts, or each one
 * keeps its memory until the engine is destroyed. NULL: no-op. */
void xdc_wan_peer_destroy(xdc_wan_peer *p);
/* Send BYE and close the peer's streams; its pending requests fail with XDC_ERR_CLOSED (collect them
 * with xdc_wan_test/xdc_wan_wait, or xdc_wan_request_cancel). Synchronous: when it returns, no buffer
 * of the peer's requests is read or written again, so they may be freed at once. The other side, on the
 * BYE, closes its streams and fails its own pending requests (XDC_ERR_CLOSED) the same way. NULL: no-op. */
void xdc_wan_peer_close(xdc_wan_peer *p);

/* ---- messages ------------------------------------------------------------------------------------ */

/* Send `len` bytes from `buf` (not copied: keep it alive and unchanged until the request completes,
 * which is when the peer acknowledged every frame, fails, or is cancelled). `raw_len` is the pre-compression size for stats
 * (pass len when uncompressed); `codec` is carried to the receiver untouched. */
xdc_err_t xdc_wan_isend(xdc_wan_peer *p, xdc_wan_class cls, const void *buf, size_t len, uint8_t codec, size_t raw_len,
                        xdc_wan_request **req);
/* Receive the next message of class `cls` into buf (capacity `cap` bytes). Receives of one class match
 * messages in the order they were sent. Post receives early: a stream whose next frame belongs to a
 * message with no posted receive stops reading until one is posted (backpressure, no unbounded
 * buffering), and frames queued behind it on that stream wait too — including the peer's ACKs for our
 * own sends, so do not make posting a receive depend on a send to the same peer completing. A message
 * longer than `cap` fails the receive with XDC_ERR_RANGE as soon as its first frame's header arrives; its
 * bytes are then read and discarded (the rest of the stream is unaffected). */
xdc_err_t xdc_wan_irecv(xdc_wan_peer *p, xdc_wan_class cls, void *buf, size_t cap, xdc_wan_request **req);
/* Poll a request. *done = 1 when complete; then the request is released, and for a receive *size is
 * the message length and *codec its codec id (either pointer may be NULL). A failed request returns
 * its error (detail in diag, naming the peer and what was last heard) and is released as well. */
xdc_err_t xdc_wan_test(xdc_wan_request *req, int *done, size_t *size, uint8_t *codec, xdc_diag *diag);
/* Block until the request completes or fails, or timeout_ms passes: XDC_ERR_AGAIN, and only then the
 * request stays valid (wait again, or cancel it). Any other result released it, XDC_ERR_TIMEOUT included
 * (the peer was silent past the engine's deadline), so a caller waits again only on XDC_ERR_AGAIN. Same
 * release rule as xdc_wan_test. */
xdc_err_t xdc_wan_wait(xdc_wan_request *req, int64_t timeout_ms, size_t *size, uint8_t *codec, xdc_diag *diag);
/* Give a request up; the handle is invalid afterwards (test/wait/cancel on it: XDC_ERR_INVALID, until
 * the engine reuses it). When cancel returns, the request's buffer is never read or written again and
 * may be freed at once:
 * - a completed or failed request is released (its result is dropped);
 * - a pending receive is marked cancelled and its buffer dropped: it still consumes its message (the
 *   next receive of the class gets the next message, as before), whose bytes are read, acknowledged
 *   and discarded; the request is released when that message is complete or the peer fails;
 * - a pending send none of whose bytes were cut into frames yet is withdrawn: the peer never sees it,
 *   and the later messages of the class (none framed either) take over its place in the order;
 * - any other pending send is still delivered complete and correct: the bytes not yet acknowledged are
 *   copied to an engine-owned buffer (freed when the peer acknowledged them or failed) and sent from
 *   there. So the peer receives a cancelled send in full or not at all, never a part.
 * Returns XDC_OK; XDC_ERR_INVALID for a released or already cancelled handle (NULL: no-op, XDC_OK);
 * XDC_ERR_NOMEM when the copy of a send could not be allocated: the peer then fails (its requests end
 * with XDC_ERR_NOMEM) and the buffer is released all the same. */
xdc_err_t xdc_wan_request_cancel(xdc_wan_request *req);

/* Buffers and teardown: a request's buffer belongs to the caller again once the request completed or
 * failed (reported by xdc_wan_test/xdc_wan_wait), was cancelled, or its peer was closed
 * (xdc_wan_peer_close returned). The engine never touches it after that, so a caller may free buffers
 * (e.g. sync buffers) before or without destroying the engine: the old rule "destroy the WAN engine
 * before freeing buffers of posted requests" is not needed any more. */

#endif /* XDC_WAN_H */
