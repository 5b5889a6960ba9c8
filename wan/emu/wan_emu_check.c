/* wan_emu_check.c — measure an emulated link (a relay on loopback, or the namespace mode's wire): an
 * echo/sink server behind it, RTT from 1-byte ping-pongs (minimum) and rate from a bulk transfer whose end the sink
 * confirms (elapsed time minus one RTT). Used by `xdc wan-emu --check` and the emulator tests. */
#include "wan/emu/xdc_wan_emu.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHECK_PINGS 15

typedef struct {
    int lfd;
} check_server;

static int io_full(int fd, void *buf, size_t len, int is_write)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = is_write ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL)
                             : recv(fd, (char *)buf + done, len - done, 0);
        if (n <= 0) return -1;
        done += (size_t)n;
    }
    return 0;
}

static void set_timeouts(int fd)
{
    struct timeval tv = {.tv_sec = 30};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Serves exactly two connections: 'E' echoes bytes back; 'S' + u64 total counts bytes to EOF, sends one
 * marker byte when a quarter of the total has arrived (so slow start and the pipe fill are left out of
 * the rate), and replies the count at EOF. */
static void *server_main(void *arg)
{
    check_server *cs = arg;
    static char buf[1 << 16]; /* one server at a time per process: the buffer's content is never read */
    for (int k = 0; k < 2; k++) {
        int fd = accept(cs->lfd, NULL, NULL);
        if (fd < 0) return NULL;
        set_timeouts(fd);
        char mode = 0;
        uint64_t expect = 0;
        if (io_full(fd, &mode, 1, 0) == 0 && (mode == 'E' || io_full(fd, &expect, sizeof expect, 0) == 0)) {
            uint64_t total = 0;
            ssize_t n;
            int marked = 0;
            while ((n = recv(fd, buf, mode == 'E' ? 1 : sizeof buf, 0)) > 0) {
                total += (uint64_t)n;
                if (mode == 'E' && io_full(fd, buf, (size_t)n, 1) != 0) break;
                if (mode == 'S' && !marked && total >= expect / 4) {
                    marked = 1;
                    if (io_full(fd, &mode, 1, 1) != 0) break;
                }
            }
            if (mode == 'S') io_full(fd, &total, sizeof total, 1);
        }
        close(fd);
    }
    return NULL;
}

/* A TCP socket created inside network namespace `ns` (NULL: ours); it stays there when we return. */
static int socket_in(const char *ns)
{
    if (!ns) return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char path[128];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), target = open(path, O_RDONLY | O_CLOEXEC), fd = -1;
    if (self >= 0 && target >= 0 && setns(target, CLONE_NEWNET) == 0) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (setns(self, CLONE_NEWNET) != 0 && fd >= 0) {
            close(fd); /* cannot come back: refuse rather than run on in the wrong namespace */
            fd = -1;
        }
    }
    if (self >= 0) close(self);
    if (target >= 0) close(target);
    return fd;
}

static int dial(const char *ns, struct in_addr ip, int port)
{
    int fd = socket_in(ns);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = ip};
    if (fd < 0) return -1;
    set_timeouts(fd);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Measure the path from a client in `cli_ns` to an echo/sink server in `srv_ns` listening on srv_ip.
 * `relay_model` (not NULL): a relay with that model sits in front of the server (loopback only).
 * `total` bytes go through for the rate. */
static xdc_err_t measure_path(const char *srv_ns, const char *srv_ip, const char *cli_ns,
                              const xdc_wan_link_model *relay_model, uint64_t total, double *rtt_ms, double *rate_mbps,
                              xdc_diag *diag)
{
    check_server cs = {.lfd = socket_in(srv_ns)};
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t alen = sizeof a;
    if (cs.lfd < 0 || inet_pton(AF_INET, srv_ip, &a.sin_addr) != 1 ||
        bind(cs.lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(cs.lfd, 4) != 0 ||
        getsockname(cs.lfd, (struct sockaddr *)&a, &alen) != 0) {
        xdc_diag_set(diag, "measure: cannot open a server on %s%s%s: %m", srv_ip, srv_ns ? " in netns " : "",
                     srv_ns ? srv_ns : "");
        if (cs.lfd >= 0) close(cs.lfd);
        return XDC_ERR_UNAVAILABLE;
    }
    xdc_wan_relay *relay = NULL;
    xdc_err_t rc = XDC_OK;
    if (relay_model) rc = xdc_wan_relay_create("127.0.0.1", 0, srv_ip, ntohs(a.sin_port), relay_model, &relay, diag);
    pthread_t th;
    if (rc != XDC_OK) {
        close(cs.lfd);
        return rc;
    }
    if (pthread_create(&th, NULL, server_main, &cs) != 0) {
        xdc_wan_relay_destroy(relay);
        close(cs.lfd);
        return XDC_ERR_NOMEM;
    }
    int port = relay ? xdc_wan_relay_port(relay) : ntohs(a.sin_port);
    struct in_addr ip = a.sin_addr;
    if (relay) ip.s_addr = htonl(INADDR_LOOPBACK);
    double samples[CHECK_PINGS];
    char *bulk = NULL;
    int fd = dial(cli_ns, ip, port);
    char mode = 'E', b = 'x';
    rc = XDC_ERR_IO;
    if (fd < 0 || io_full(fd, &mode, 1, 1) != 0) goto done;
    for (int i = 0; i < CHECK_PINGS; i++) {
        uint64_t t0 = xdc_now_ns();
        if (io_full(fd, &b, 1, 1) != 0 || io_full(fd, &b, 1, 0) != 0) goto done;
        samples[i] = (double)(xdc_now_ns() - t0) / 1e6;
    }
    close(fd);
    /* The minimum, as ping reports it: on a loaded host scheduling delay only ever adds to a sample. */
    qsort(samples, CHECK_PINGS, sizeof samples[0], cmp_double);
    *rtt_ms = samples[0];
    /* Bulk: timed until the sink confirms the count. */
    size_t chunk = 1 << 16;
    bulk = xdc_calloc(1, chunk);
    fd = dial(cli_ns, ip, port);
    mode = 'S';
    if (!bulk || fd < 0 || io_full(fd, &mode, 1, 1) != 0 || io_full(fd, &total, sizeof total, 1) != 0) goto done;
    /* Send everything while watching for the quarter marker; rate = the last three quarters over the
     * time between marker and final count (both travel the same way back, so the delays cancel). */
    uint64_t sent = 0, t_mark = 0;
    uint8_t reply[1 + sizeof(uint64_t)];
    size_t got_reply = 0;
    while (got_reply < sizeof reply) {
        struct pollfd pf = {.fd = fd, .events = POLLIN | (sent < total ? POLLOUT : 0)};
        if (poll(&pf, 1, 30000) <= 0) goto done;
        if ((pf.revents & POLLOUT) && sent < total) {
            size_t n = total - sent < chunk ? (size_t)(total - sent) : chunk;
            ssize_t w = send(fd, bulk, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && errno != EAGAIN) goto done;
            if (w > 0) sent += (uint64_t)w;
            if (sent == total) shutdown(fd, SHUT_WR);
        }
        if (pf.revents & (POLLIN | POLLHUP)) {
            ssize_t r = recv(fd, reply + got_reply, sizeof reply - got_reply, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN)) goto done;
            if (r > 0) {
                if (got_reply == 0) t_mark = xdc_now_ns();
                got_reply += (size_t)r;
            }
        }
    }
    uint64_t t_end = xdc_now_ns(), got;
    memcpy(&got, reply + 1, sizeof got);
    if (got != total) goto done;
    double elapsed_s = (double)(t_end - t_mark) / 1e9;
    *rate_mbps = elapsed_s > 0 ? (double)(total - total / 4) * 8 / elapsed_s / 1e6 : 0;
    rc = XDC_OK;
done:
    if (rc != XDC_OK) xdc_diag_set(diag, "measure: transfer to %s failed: %m", srv_ip);
    if (fd >= 0) close(fd);
    xdc_free(bulk);
    shutdown(cs.lfd, SHUT_RDWR); /* wakes the server if it still waits in accept() */
    pthread_join(th, NULL);
    close(cs.lfd);
    xdc_wan_relay_destroy(relay);
    return rc;
}

static uint64_t bulk_bytes(double rate_mbps, double seconds)
{
    return rate_mbps > 0 ? (uint64_t)(rate_mbps * 1e6 / 8 * seconds) : (64u << 20);
}

xdc_err_t xdc_wan_emu_measure(const xdc_wan_link_model *m, double seconds, double *rtt_ms, double *rate_mbps,
                              xdc_diag *diag)
{
    if (!m || !rtt_ms || !rate_mbps || seconds <= 0) return XDC_ERR_INVALID;
    return measure_path(NULL, "127.0.0.1", NULL, m, bulk_bytes(m->rate_mbps, seconds), rtt_ms, rate_mbps, diag);
}

xdc_err_t xdc_wan_netns_measure(xdc_wan_netns *w, int from, int to, double rate_mbps, double seconds, double *rtt_ms,
                                double *measured_mbps, xdc_diag *diag)
{
    if (!w || !rtt_ms || !measured_mbps || seconds <= 0 || from == to) return XDC_ERR_INVALID;
    char ns_from[64], ns_to[64], ip[32];
    xdc_wan_netns_name(w, from, ns_from, sizeof ns_from);
    xdc_wan_netns_name(w, to, ns_to, sizeof ns_to);
    xdc_wan_netns_addr(to, ip, sizeof ip);
    return measure_path(ns_to, ip, ns_from, NULL, bulk_bytes(rate_mbps, seconds), rtt_ms, measured_mbps, diag);
}
