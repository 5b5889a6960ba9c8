/* wan_io_tcp.c — the bottom I/O layer of a WAN stream: a non-blocking TCP socket (connect, recv, send,
 * and a close that does not turn into a reset). Waiting maps onto the stack's poll interest. */
#include "wan/wan_io.h"

#include "common/xdc_alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct wan_io_tcp {
    wan_io io;
    int fd;
    int connecting;  /* a non-blocking connect() not yet seen complete */
    char where[112]; /* "host:port" dialled, for messages */
} wan_io_tcp;

/* Bytes of unread input discarded before a close, at most: a peer keeps sending for one RTT at most. */
#define CLOSE_DRAIN_MAX ((size_t)1 << 20)

static void sock_tune(int fd, int bufsz)
{
    int one = 1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bufsz > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
    }
}

static int tcp_handshake(wan_io *io)
{
    wan_io_tcp *t = (wan_io_tcp *)io;
    if (!t->connecting) return WAN_IO_DONE;
    struct pollfd pfd = {.fd = t->fd, .events = POLLOUT};
    if (poll(&pfd, 1, 0) <= 0 || !(pfd.revents & (POLLOUT | POLLERR | POLLHUP))) {
        io->stk->want |= POLLOUT;
        return WAN_IO_AGAIN;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(t->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) return wan_io_fail(io->stk, XDC_ERR_UNAVAILABLE, "connect to %s: %s", t->where, strerror(err));
    t->connecting = 0;
    return WAN_IO_DONE;
}

/* A failed recv/send: the connection is gone (reset, broken pipe, ...). */
static int tcp_lost(wan_io *io, int err)
{
    int r = wan_io_fail(io->stk, XDC_ERR_CLOSED, "connection closed by the peer%s%s", err ? ": " : "",
                        err ? strerror(err) : "");
    errno = err; /* a TLS layer above reads it for its own report */
    return r;
}

static int tcp_read(wan_io *io, void *buf, size_t len, size_t *n)
{
    wan_io_tcp *t = (wan_io_tcp *)io;
    *n = 0;
    ssize_t r;
    do r = recv(t->fd, buf, len, 0);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        *n = (size_t)r;
        return WAN_IO_DONE;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        io->stk->want |= POLLIN;
        return WAN_IO_AGAIN;
    }
    return tcp_lost(io, r == 0 ? 0 : errno);
}

static int tcp_write(wan_io *io, const void *buf, size_t len, size_t *n)
{
    wan_io_tcp *t = (wan_io_tcp *)io;
    *n = 0;
    ssize_t r;
    do r = send(t->fd, buf, len, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r > 0) {
        *n = (size_t)r;
        return WAN_IO_DONE;
    }
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        io->stk->want |= POLLOUT;
        return WAN_IO_AGAIN;
    }
    return tcp_lost(io, r == 0 ? 0 : errno);
}

static void tcp_shutdown(wan_io *io, int abortive)
{
    wan_io_tcp *t = (wan_io_tcp *)io;
    if (abortive) {
        /* Both directions end now, and the close sends a reset: the peer's next read or write fails. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(t->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
        shutdown(t->fd, SHUT_RDWR);
        return;
    }
    /* close() with unread input queued resets the connection instead of ending it, and a reset makes the
     * peer (or a relay on the way) drop what it has not read yet: our BYE, written just before. So what
     * the peer sent that nobody will read (its own BYE, an ack) is discarded first. */
    char sink[4096];
    ssize_t n;
    size_t drained = 0;
    while (drained < CLOSE_DRAIN_MAX && (n = recv(t->fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) drained += (size_t)n;
}

static void tcp_close(wan_io *io)
{
    wan_io_tcp *t = (wan_io_tcp *)io;
    close(t->fd);
    xdc_free(t);
}

static const wan_io_ops tcp_ops = {
    .name = "tcp",
    .handshake = tcp_handshake,
    .read = tcp_read,
    .write = tcp_write,
    .shutdown = tcp_shutdown,
    .close = tcp_close,
};

static wan_io_tcp *tcp_push(wan_io_stack *stk, int fd)
{
    wan_io_tcp *t = xdc_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->fd = fd;
    wan_io_push(stk, &t->io, &tcp_ops);
    stk->fd = fd;
    return t;
}

int wan_io_tcp_dial(wan_io_stack *stk, const struct sockaddr_storage *addr, socklen_t addr_len, int sockbuf,
                    const char *where)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return wan_io_fail(stk, XDC_ERR_IO, "socket() failed: %s", strerror(errno));
    sock_tune(fd, sockbuf);
    if (connect(fd, (const struct sockaddr *)addr, addr_len) != 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        return wan_io_fail(stk, XDC_ERR_UNAVAILABLE, "connect to %s: %s", where, strerror(err));
    }
    wan_io_tcp *t = tcp_push(stk, fd);
    if (!t) {
        close(fd);
        return wan_io_fail(stk, XDC_ERR_NOMEM, "out of memory for a connection");
    }
    t->connecting = 1;
    snprintf(t->where, sizeof t->where, "%s", where);
    return WAN_IO_DONE;
}

xdc_err_t wan_io_tcp_adopt(wan_io_stack *stk, int fd, int sockbuf)
{
    sock_tune(fd, sockbuf);
    if (!tcp_push(stk, fd)) {
        close(fd);
        return XDC_ERR_NOMEM;
    }
    return XDC_OK;
}
