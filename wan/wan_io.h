/* wan_io.h — private: the I/O layer table of a WAN stream. A connection is a stack of layers, each a
 * table of non-blocking functions (handshake / read / write / shutdown / close) over the layer below:
 * TCP at the bottom (wan_io_tcp.c), TLS 1.3 over it (wan_io_tls.c, which reads and writes through the
 * TCP layer with a BIO of its own), and in tests a fault layer on top (wan_io_fault.c, wan_fault.h).
 * The engine talks to the top layer only and never sees OpenSSL (curl's connection filters, redis's
 * ConnectionType). A layer that must wait says for what in its stack: POLLIN / POLLOUT on the socket
 * (OpenSSL's WANT_READ / WANT_WRITE become these), or a time; the engine's poll loop does the waiting.
 * A failure is recorded once per stack (the lowest layer that saw it names it) and the stream breaks. */
#ifndef XDC_WAN_IO_H
#define XDC_WAN_IO_H

#include "common/xdc_err.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum wan_io_result {
    WAN_IO_FAILED = -1, /* the connection is unusable; stack->err and stack->why say why */
    WAN_IO_AGAIN = 0,   /* nothing moved: stack->want (socket) or stack->retry_ns (time) says what to wait for */
    WAN_IO_DONE = 1,    /* the handshake completed, or *n > 0 bytes were read / written */
};

typedef struct wan_io wan_io;
typedef struct wan_io_stack wan_io_stack;

typedef struct wan_io_ops {
    const char *name;
    /* Drive the connection's setup (TCP connect, TLS handshake) one step; the layer below first. */
    int (*handshake)(wan_io *io);
    /* Move up to len bytes; *n receives how many (> 0 with WAN_IO_DONE). A read that meets the end of
     * the stream fails (XDC_ERR_CLOSED): the WAN protocol ends a connection with BYE, never with EOF. */
    int (*read)(wan_io *io, void *buf, size_t len, size_t *n);
    int (*write)(wan_io *io, const void *buf, size_t len, size_t *n);
    /* End the connection: `abortive` 0 lets what was written reach the peer (unread input is drained
     * first, so the close does not turn into a reset that drops it); 1 cuts it (both sides fail). */
    void (*shutdown)(wan_io *io, int abortive);
    /* Free this layer (not the ones below). */
    void (*close)(wan_io *io);
} wan_io_ops;

/* The head of every layer's own struct. */
struct wan_io {
    const wan_io_ops *ops;
    wan_io *lower; /* NULL at the bottom */
    wan_io_stack *stk;
};

/* One connection: lives in its wan_stream; reset by wan_io_stack_close. */
struct wan_io_stack {
    wan_io *top;       /* NULL: no connection */
    int fd;            /* the socket at the bottom, for poll(); -1 when none */
    short want;        /* POLLIN / POLLOUT the layers wait for; the engine clears it before each turn */
    short hold;        /* POLLIN / POLLOUT the layers cannot use now (a stalled direction): left out of poll */
    uint64_t retry_ns; /* a layer waits for a time rather than the socket: call again from then (0: no) */
    xdc_err_t err;     /* after WAN_IO_FAILED: the first failure recorded */
    char why[256];     /* and its reason ("connect to H:P: Connection refused", "reset by the fault layer") */
};

/* Record a failure of the stack unless one is recorded already (the lowest layer names it); returns
 * WAN_IO_FAILED. */
int wan_io_fail(wan_io_stack *stk, xdc_err_t err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Put `io` (allocated by its layer, ops set) on top of the stack. */
void wan_io_push(wan_io_stack *stk, wan_io *io, const wan_io_ops *ops);
/* The layer of this kind in the stack, or NULL. */
wan_io *wan_io_find(const wan_io_stack *stk, const wan_io_ops *ops);
/* Shut the connection down (orderly or abortive, see wan_io_ops.shutdown), free every layer and reset
 * the stack to "no connection". No-op on an empty stack. */
void wan_io_stack_close(wan_io_stack *stk, int abortive);
/* An empty stack. */
void wan_io_stack_init(wan_io_stack *stk);

static inline int wan_io_handshake(wan_io_stack *stk) { return stk->top->ops->handshake(stk->top); }
static inline int wan_io_read(wan_io_stack *stk, void *buf, size_t len, size_t *n)
{
    return stk->top->ops->read(stk->top, buf, len, n);
}
static inline int wan_io_write(wan_io_stack *stk, const void *buf, size_t len, size_t *n)
{
    return stk->top->ops->write(stk->top, buf, len, n);
}

/* ---- TCP (wan_io_tcp.c) -------------------------------------------------------------------------- */

/* Open a non-blocking connection to addr (text `where` for messages) and make it the stack's bottom;
 * the handshake completes the connect. WAN_IO_FAILED (reason in the stack) when the socket cannot be
 * made or the connect failed at once. `sockbuf` > 0 sets SO_SNDBUF / SO_RCVBUF. */
int wan_io_tcp_dial(wan_io_stack *stk, const struct sockaddr_storage *addr, socklen_t addr_len, int sockbuf,
                    const char *where);
/* An accepted socket becomes the stack's bottom (made non-blocking, tuned). XDC_ERR_NOMEM: the fd
 * was closed. */
xdc_err_t wan_io_tcp_adopt(wan_io_stack *stk, int fd, int sockbuf);

/* ---- TLS (wan_io_tls.c) -------------------------------------------------------------------------- */

/* Put a TLS 1.3 session over the stack (an SSL_CTX *, as void * so that callers need not include
 * OpenSSL). The server side refuses a first byte that is not a TLS handshake record ("plaintext
 * client"). XDC_ERR_NOMEM / XDC_ERR_TLS when the session cannot be made. */
xdc_err_t wan_io_tls_push(wan_io_stack *stk, void *ssl_ctx, int is_client);
/* After the handshake: the peer's identity from its certificate, refused (XDC_ERR_AUTH, reason in diag)
 * when its run differs from self's or, expect_region not NULL, its region/rank from the expectation. */
xdc_err_t wan_io_tls_check_peer(const wan_io_stack *stk, const xdc_wan_identity *self, const char *expect_region,
                                int expect_rank, xdc_wan_identity *peer, xdc_diag *diag);
/* 1 when the revocation list (a wan_tls_crl *) names the peer's certificate. */
int wan_io_tls_revoked(const wan_io_stack *stk, const void *crl);

/* ---- fault layer for tests (wan_io_fault.c; configured through wan/wan_fault.h) ------------------- */

struct wan_fault;
/* Put a fault layer on top of the stack, armed with `f` (NULL: pass-through until armed). */
xdc_err_t wan_io_fault_push(wan_io_stack *stk, const struct wan_fault *f);
/* Arm (or re-arm) the stack's fault layer; byte counts start from now. XDC_ERR_INVALID: none in it. */
xdc_err_t wan_io_fault_arm(wan_io_stack *stk, const struct wan_fault *f);

#endif /* XDC_WAN_IO_H */
