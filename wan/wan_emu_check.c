/* wan_emu_check.c — measure an emulated link: a loopback echo/sink server behind a relay with the
 * link model, RTT from 1-byte ping-pongs (median) and rate from a bulk transfer whose end the sink
 * confirms (elapsed time minus one RTT). Used by `xdc wan-emu --check` and the emulator tests. */
#include "wan/xdc_wan.h"

#include "common/xdc_alloc.h"
#include "common/xdc_time.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

/* Serves exactly two connections: 'E' echoes bytes back, 'S' counts bytes to EOF and replies the count. */
static void *server_main(void *arg)
{
    check_server *cs = arg;
    static char buf[1 << 16]; /* one server at a time per process: the buffer's content is never read */
    for (int k = 0; k < 2; k++) {
        int fd = accept(cs->lfd, NULL, NULL);
        if (fd < 0) return NULL;
        set_timeouts(fd);
        char mode = 0;
        if (io_full(fd, &mode, 1, 0) == 0) {
            uint64_t total = 0;
            ssize_t n;
            while ((n = recv(fd, buf, mode == 'E' ? 1 : sizeof buf, 0)) > 0) {
                total += (uint64_t)n;
                if (mode == 'E' && io_full(fd, buf, (size_t)n, 1) != 0) break;
            }
            if (mode == 'S') io_full(fd, &total, sizeof total, 1);
        }
        close(fd);
    }
    return NULL;
}

static int dial(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
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

xdc_err_t xdc_wan_emu_measure(const xdc_wan_link_model *m, double seconds, double *rtt_ms, double *rate_mbps,
                              xdc_diag *diag)
{
    if (!m || !rtt_ms || !rate_mbps || seconds <= 0) return XDC_ERR_INVALID;
    check_server cs = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (cs.lfd < 0 || bind(cs.lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(cs.lfd, 4) != 0 ||
        getsockname(cs.lfd, (struct sockaddr *)&a, &alen) != 0) {
        xdc_diag_set(diag, "measure: cannot open a loopback server: %m");
        if (cs.lfd >= 0) close(cs.lfd);
        return XDC_ERR_UNAVAILABLE;
    }
    xdc_wan_relay *relay = NULL;
    xdc_err_t rc = xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", ntohs(a.sin_port), m, &relay, diag);
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
    int port = xdc_wan_relay_port(relay);
    double samples[CHECK_PINGS];
    char *bulk = NULL;
    int fd = dial(port);
    char mode = 'E', b = 'x';
    rc = XDC_ERR_IO;
    if (fd < 0 || io_full(fd, &mode, 1, 1) != 0) goto done;
    for (int i = 0; i < CHECK_PINGS; i++) {
        uint64_t t0 = xdc_now_ns();
        if (io_full(fd, &b, 1, 1) != 0 || io_full(fd, &b, 1, 0) != 0) goto done;
        samples[i] = (double)(xdc_now_ns() - t0) / 1e6;
    }
    close(fd);
    qsort(samples, CHECK_PINGS, sizeof samples[0], cmp_double);
    *rtt_ms = samples[CHECK_PINGS / 2];
    /* Bulk: rate x seconds bytes (unlimited links: 64 MiB), timed until the sink confirms the count. */
    uint64_t total = m->rate_mbps > 0 ? (uint64_t)(m->rate_mbps * 1e6 / 8 * seconds) : (64u << 20);
    size_t chunk = 1 << 16;
    bulk = xdc_calloc(1, chunk);
    fd = dial(port);
    mode = 'S';
    if (!bulk || fd < 0 || io_full(fd, &mode, 1, 1) != 0) goto done;
    uint64_t t0 = xdc_now_ns();
    for (uint64_t sent = 0; sent < total; sent += chunk) {
        size_t n = total - sent < chunk ? (size_t)(total - sent) : chunk;
        if (io_full(fd, bulk, n, 1) != 0) goto done;
    }
    shutdown(fd, SHUT_WR);
    uint64_t got = 0;
    if (io_full(fd, &got, sizeof got, 0) != 0 || got != total) goto done;
    double elapsed_s = (double)(xdc_now_ns() - t0) / 1e9 - *rtt_ms / 1e3;
    *rate_mbps = elapsed_s > 0 ? (double)total * 8 / elapsed_s / 1e6 : 0;
    rc = XDC_OK;
done:
    if (rc != XDC_OK) xdc_diag_set(diag, "measure: transfer through the relay failed: %m");
    if (fd >= 0) close(fd);
    xdc_free(bulk);
    shutdown(cs.lfd, SHUT_RDWR); /* wakes the server if it still waits in accept() */
    pthread_join(th, NULL);
    close(cs.lfd);
    xdc_wan_relay_destroy(relay);
    return rc;
}
