/* wan_priv.h — private layouts of the WAN transport: engine, listener, peer, stream and request, and
 * the functions wan_engine.c (sockets, TLS handshakes, reconnects, the poll loop) and wan_peer.c
 * (frames: striping, acknowledgement, resend, reassembly, requests) call in each other.
 * Locking: one mutex per engine guards everything below; the engine thread holds it except in poll(). */
#ifndef XDC_WAN_PRIV_H
#define XDC_WAN_PRIV_H

#include "common/xdc_pool.h"
#include "wan/wan_fault.h"
#include "wan/wan_frame.h"
#include "wan/wan_io.h"
#include "wan/wan_tls.h"
#include "wan/xdc_wan.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

enum wan_req_state { WAN_REQ_FREE = 0, WAN_REQ_PENDING, WAN_REQ_DONE, WAN_REQ_FAILED };

struct xdc_wan_request {
    xdc_wan_request *next; /* class queue of its peer */
    xdc_wan_engine *eng;   /* kept after release: a stale handle is recognised without touching its peer */
    xdc_wan_peer *peer;    /* kept alive by the request until it is released (peer->nreqs) */
    int state;             /* enum wan_req_state */
    int is_send;
    int cls;
    uint8_t *buf;     /* (cap) bytes: send source or receive destination; NULL once cancelled */
    size_t cap;       /* send: message length; receive: buffer capacity */
    uint64_t msg_seq; /* index of the message within its class */
    uint8_t codec;
    size_t raw_len; /* send: pre-compression bytes for stats */
    /* send side */
    size_t framed;    /* bytes already cut into frames */
    int framing_done; /* every frame created (needed for empty messages) */
    uint64_t frames_unacked;
    int writers; /* streams in the middle of writing a frame of this message */
    /* receive side */
    uint64_t msg_len;  /* known from the first frame; UINT64_MAX before */
    uint64_t rx_bytes; /* payload bytes placed */
    int rx_arriving;   /* its first frame was seen and it is counted in its peer's rx_arriving */
    xdc_err_t err;
    char why[384]; /* failure detail copied out by test() */
    /* cancelled (xdc_wan_request_cancel): the caller gave the handle up and its buffer back; the request
     * is released when it completes or fails. A send keeps its unsent bytes [owned_off, cap) in `owned`. */
    int cancelled;
    uint8_t *owned; /* engine-owned copy (xdc_malloc), freed on release */
    size_t owned_off;
    /* latency sends: the peer's bulk_tx_bytes at isend, for xdc_wan_stats.latency_bulk_ahead_bytes */
    uint64_t bulk_mark;
    int departed; /* its last byte was written to a stream once */
};

/* One DATA frame the sender keeps until the peer acknowledges it. Ring slot seq & (window-1). */
typedef struct wan_txf {
    xdc_wan_request *req; /* NULL: slot free (acknowledged) */
    uint64_t off;         /* byte offset in the message */
    uint32_t len;         /* payload bytes */
    int stream;           /* stream it was last written on; -1 while queued for (re)send */
} wan_txf;

enum wan_stream_state {
    WAN_ST_DOWN = 0,  /* client: waiting out the backoff; server: waiting for the client to redial */
    WAN_ST_HANDSHAKE, /* the I/O stack's handshake: TCP connect (client), then TLS */
    WAN_ST_HELLO,     /* authenticated; HELLO / HELLO_ACK exchange */
    WAN_ST_READY,
};

#define WAN_CTRL_QUEUE  8
#define WAN_STAGE_BYTES 16384 /* header + small payload coalesced into one TLS record */

typedef struct wan_stream {
    struct wan_stream *next_pending; /* server: engine list of connections not yet given a HELLO */
    xdc_wan_peer *peer;              /* NULL on the server before HELLO */
    xdc_wan_listener *listener;      /* server: where it came in */
    int idx;
    int is_client;
    int state;         /* enum wan_stream_state */
    wan_io_stack io;   /* the connection: TCP -> TLS (-> fault, in tests) layers; io.fd for poll() */
    int kick;          /* progress without waiting for poll (buffered TLS data, budget ran out) */
    short revents;     /* from the last poll() */
    uint64_t since_ns; /* state entered (handshake timeouts), or next redial time when DOWN */
    int backoff_ms;
    char peer_addr[80];           /* "host:port" as text, for messages */
    struct sockaddr_storage from; /* server: the connection's source, for the per-address handshake cap */
    /* transmit: one frame at a time */
    wan_frame ctrl[WAN_CTRL_QUEUE];
    int ctrl_n;
    int tx_active;
    uint8_t tx_stage[WAN_STAGE_BYTES]; /* header (+ payload when small) */
    size_t tx_stage_len, tx_stage_off;
    const uint8_t *tx_payload; /* large payload written after the stage; NULL when none */
    size_t tx_payload_len, tx_payload_off;
    xdc_wan_request *tx_req; /* message whose frame is being written (writers count) */
    int tx_last;             /* that frame ends its message */
    /* receive: header, then payload into the receive buffer or discarded */
    uint8_t rx_hdr[WAN_FRAME_HDR_BYTES];
    size_t rx_hdr_got;
    int rx_in_payload;
    wan_frame rx_cur;
    uint8_t *rx_dst; /* NULL: discard */
    uint64_t rx_left;
    xdc_wan_request *rx_req;
    int stalled; /* next DATA frame's message has no posted receive yet */
} wan_stream;

/* The reliability half of a peer (the other half, I/O, is its streams: each one's layer stack and frame
 * buffers). Each traffic class has its own sequence numbers, window and cumulative ACKs (indexed by class),
 * so a bulk frame the receiver cannot place yet never holds back the acknowledgement of latency frames.
 * Nothing here knows a stream or a socket: wan_peer.c cuts frames from it, hands them to whichever stream
 * can write, and applies what the streams read. */
typedef struct wan_rel {
    /* send */
    xdc_wan_request *txq_head[XDC_WAN_NUM_CLASSES], *txq_tail[XDC_WAN_NUM_CLASSES];
    uint64_t tx_msgs[XDC_WAN_NUM_CLASSES];
    wan_txf *txf[XDC_WAN_NUM_CLASSES]; /* (window) ring per class: the resend queue */
    int window;
    uint64_t tx_next_seq[XDC_WAN_NUM_CLASSES];
    uint64_t tx_acked[XDC_WAN_NUM_CLASSES]; /* every seq below is acknowledged */
    int resend_pending[XDC_WAN_NUM_CLASSES];
    /* receive */
    xdc_wan_request *rxq_head[XDC_WAN_NUM_CLASSES], *rxq_tail[XDC_WAN_NUM_CLASSES];
    uint64_t rx_posted[XDC_WAN_NUM_CLASSES];
    uint64_t *rx_seen[XDC_WAN_NUM_CLASSES]; /* (window / 64 + 1) bitmap of seqs in [rx_cum, rx_cum + window) */
    uint64_t rx_cum[XDC_WAN_NUM_CLASSES];
    uint64_t ack_sent[XDC_WAN_NUM_CLASSES]; /* rx_cum in the last ACK written; UINT64_MAX forces the next one */
} wan_rel;

struct xdc_wan_peer {
    xdc_wan_peer *next;
    xdc_wan_engine *eng;
    xdc_wan_identity id;
    char name[192]; /* "region/rank (host:port)" for messages */
    int is_client;
    /* I/O: the streams, each with its layer stack (wan_io.h) and frame buffers */
    int nstreams;
    wan_stream **streams; /* (nstreams); server: NULL slots until the client dials them */
    uint64_t session;
    int established; /* every stream was up once */
    int admitted;    /* client: a stream got its HELLO_ACK once; only then do the other streams dial, so a
                      * refused client costs the server one connection, refused with its reason */
    int accepted;    /* server: handed to accept() */
    int closed;
    int released;       /* the owner gave the handle up (xdc_wan_peer_destroy), or nobody will ever get it */
    int nreqs;          /* requests of this peer not yet released; the peer is freed when released and 0 */
    xdc_err_t fail_err; /* XDC_OK while healthy */
    char fail_why[384];
    char host[64];
    int port;
    struct sockaddr_storage addr; /* client: resolved once when dialling; server: where its first stream came from */
    xdc_wan_listener *via;        /* server, until established: the listener whose handshake caps it counts against */
    socklen_t addr_len;
    char last_err[256]; /* why a stream last went down */
    char expect_region[XDC_WAN_NAME_MAX];
    int expect_any; /* dialled without an expected identity: any peer of our run */
    int expect_rank;
    wan_rel rel;               /* reliability: sequence numbers, ACKs, the resend queue (no I/O) */
    uint64_t bulk_tx_bytes;    /* bulk DATA bytes (headers + payload) written to the streams */
    int rx_arriving;           /* receives between their first frame and their end (xdc_wan_stats.rx_busy_seconds) */
    uint64_t rx_busy_since_ns; /* when rx_arriving last became nonzero */
    uint64_t rx_busy_ns;       /* closed busy intervals */
    /* liveness */
    uint64_t last_rx_ns;
    uint64_t down_since_ns; /* 0 while every stream is up */
    uint64_t next_ping_ns;
    int ping_rr;
    char last_heard[128];
    /* stats */
    xdc_wan_stats st;
    /* Sending time: the intervals during which some send was queued (from isend to its acknowledgement),
     * so goodput leaves out the time the link had nothing to carry. */
    uint64_t tx_busy_ns;  /* closed intervals, ns */
    uint64_t tx_since_ns; /* start of the open interval; 0 while no send is queued */
};

struct xdc_wan_listener {
    xdc_wan_listener *next;
    xdc_wan_engine *eng;
    int fd;
    int port;
    xdc_wan_peer *ready[64]; /* accepted peers not yet returned by accept() */
    int n_ready;
    int refused;
    int n_pending;            /* connections of this listener before their HELLO (capped) */
    uint64_t paused_until_ns; /* accept() ran out of file descriptors: not polled until then */
    int pause_ms;             /* the current back-off, doubling while descriptors stay short */
    int closed;               /* closed by the caller; freed by the engine thread at the end of a loop turn */
    char last_refusal[512];
};

struct xdc_wan_engine {
    xdc_wan_config cfg;
    xdc_wan_identity self;
    SSL_CTX *srv_ctx, *cli_ctx;
    wan_tls_crl crl; /* the revocation list in force (wan_tls.h); its changes cut the peers it lists */
    pthread_t thread;
    int thread_started;
    int stop;
    int wake_fd; /* eventfd: API calls poke the poll loop */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on request completion, peer state change, accepts */
    xdc_wan_listener *listeners;
    xdc_wan_peer *peers;
    wan_stream *pending;              /* server connections before their HELLO */
    wan_stream *graveyard;            /* replaced streams, freed at the end of a loop turn */
    xdc_wan_listener *dead_listeners; /* closed listeners, freed the same way (poll may still name them) */
    xdc_pool reqs;                    /* xdc_wan_request objects, allocated once and reused, freed with the engine */
    struct {                          /* tests only (wan_fault.h): fault layers in this engine's connections */
        int on;                       /* every new connection gets a fault layer */
        int next_dials;               /* so many more dials get `next` armed from their first byte */
        wan_fault next;
    } faults;
};

/* wan_engine.c */
void wan_engine_wake(xdc_wan_engine *eng);

/* The one place a stream's I/O stack is called and a failure acted on. */
enum wan_io_op { WAN_IO_HANDSHAKE, WAN_IO_READ, WAN_IO_WRITE };
/* Run the stack's handshake, read(buf, len) or write(buf, len) (wan_io.h). Waiting becomes the stack's
 * poll interest (WAN_IO_AGAIN). A failure (WAN_IO_FAILED) is acted on with the reason the stack
 * recorded: a client whose handshake, or whose first read after it (the HELLO_ACK), ends in a refusal
 * (XDC_ERR_AUTH) fails its peer for good ("refused peer at HOST:PORT: ...", "refused by peer at
 * HOST:PORT: ..."); any other failure breaks the stream with the reason (a server's pre-HELLO stream
 * counts as a refusal). `n` (may be NULL for the handshake) receives the bytes moved. */
int wan_stream_io(wan_stream *s, enum wan_io_op op, void *buf, size_t len, size_t *n);
/* A stream failed: log, close, requeue its unacknowledged frames; the client redials after backoff. */
void wan_stream_break(wan_stream *s, const char *why);
/* Fail the peer: every pending request ends with `err`, streams close, no more redials. */
void wan_peer_fail(xdc_wan_peer *p, xdc_err_t err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Close every stream of a peer for good (failed or closed): no stream keeps a pointer into a request's
 * buffer afterwards, and no redial follows. */
void wan_peer_close_streams(xdc_wan_peer *p);

/* wan_peer.c */
xdc_err_t wan_peer_alloc(xdc_wan_engine *eng, int nstreams, xdc_wan_peer **out);
void wan_peer_free(xdc_wan_peer *p);
/* Drive a READY stream: write queued control and data frames, read and dispatch frames. */
void wan_stream_pump(wan_stream *s);
/* Write queued frames until the socket is full. -1 when the stream broke. */
int wan_stream_write(wan_stream *s);
/* Send our cumulative ACK again at the next chance (it may have been lost with a broken stream). */
void wan_peer_force_ack(xdc_wan_peer *p);
/* Apply a cumulative acknowledgement of class `cls`; XDC_ERR_PROTO (peer failed) when it is out of range. */
xdc_err_t wan_peer_ack(xdc_wan_peer *p, int cls, uint64_t cum);
/* Reset per-stream frame state (on a fresh connection) and requeue frames it was carrying. */
void wan_stream_reset_io(wan_stream *s);
void wan_stream_queue_ctrl(wan_stream *s, const wan_frame *f);
/* Should the poll loop wait for this stream to be writable: it has a frame to finish, or (ready) a control
 * frame, ACK or DATA frame of a class it carries that it may write now (a bulk stream yields to the
 * latency stream while that one can write). */
int wan_stream_wants_write(const wan_stream *s);
/* End a pending request (unlinked from its queue); a cancelled one is released instead of reported. */
void wan_req_finish(xdc_wan_request *r, xdc_err_t err, const char *why);
void wan_peer_fail_requests(xdc_wan_peer *p, xdc_err_t err, const char *why);

#endif /* XDC_WAN_PRIV_H */
