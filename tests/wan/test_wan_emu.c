/* test_wan_emu.c — the userspace WAN emulator: a relayed link is never faster than the configured
 * rate nor quicker than its RTT, and an outage cut through the relay's API breaks every stream of a transfer,
 * which still delivers every message exactly once after restore; the routes of one relay share its rate; an idle
 * rate-limited link does not poll; an in-flight outage waits for a transfer and cuts it on its way; the bytes a side
 * sent before it reset the connection still arrive, then the reset. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_time.h"
#include "wan/emu/xdc_wan_emu.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define WAIT_MS 30000

XDC_TEST(wan_emu_measured_rtt_and_rate_match_the_model)
{
    xdc_wan_link_model m = {.rate_mbps = 80, .rtt_ms = 30, .seed = 1};
    double rtt = 0, rate = 0;
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_emu_measure(&m, 1.5, &rtt, &rate, &d) == XDC_OK, "%s", d.msg);
    printf("relay: rtt %.2f ms (model 30), rate %.2f Mbit/s (model 80)\n", rtt, rate);
    wan_test_assert_shaped(rtt, 30, rate, 80);
}

XDC_TEST(wan_emu_rejects_bad_model)
{
    xdc_wan_link_model m = {.rate_mbps = 10, .rtt_ms = 10, .loss_pct = 100};
    xdc_wan_relay *r = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", 9, &m, &r, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "loss");
    m.loss_pct = 0;
    XDC_ASSERT_ERR(xdc_wan_relay_create("127.0.0.1", 0, "not-an-ip", 9, &m, &r, &d), XDC_ERR_INVALID);
    XDC_ASSERT(r == NULL);
    xdc_wan_relay_destroy(NULL);
}

static int put_relay(int port, void *arg)
{
    xdc_wan_relay **r = arg;
    xdc_wan_link_model m = {.rtt_ms = 4, .jitter_ms = 1, .seed = 3};
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", port, &m, r, &d) == XDC_OK, "%s", d.msg);
    return xdc_wan_relay_port(*r);
}

static void relay_outage(void *arg)
{
    xdc_wan_relay *relay = arg;
    xdc_wan_relay_cut(relay); /* every stream is reset while the rest is in flight */
    xdc_wan_relay_restore(relay);
}

/* Messages both ways; the relay is cut twice while frames and ACKs are in flight. */
XDC_TEST(wan_emu_outage_mid_transfer_delivers_exactly_once)
{
    xdc_wan_relay *relay = NULL;
    wan_test_pair tp;
    wan_test_pair_open(&tp, 3, WAIT_MS, put_relay, &relay);
    uint64_t conns_before = 0, conns_after = 0;
    xdc_wan_relay_counters(relay, &conns_before, NULL);
    xdc_wan_stats st, ss;
    wan_test_both_ways_through_outages(&tp, WAIT_MS, relay_outage, relay, &st, &ss);
    xdc_wan_relay_counters(relay, &conns_after, NULL);
    XDC_ASSERT(conns_after >= conns_before + 3); /* every stream redialled */
    wan_test_pair_close(&tp);
    xdc_wan_relay_destroy(relay);
}

/* ---- routes of one relay share the link ------------------------------------------------------- */

#define SHARE_BYTES (3u << 19) /* per flow: 1.5 MiB */

typedef struct {
    int lfd, port;
    uint64_t got;
} share_sink;

static void *sink_main(void *arg)
{
    share_sink *s = arg;
    int fd = accept(s->lfd, NULL, NULL);
    char buf[65536];
    ssize_t n;
    while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0) s->got += (uint64_t)n;
    if (fd >= 0) close(fd);
    return NULL;
}

static void *source_main(void *arg)
{
    int port = *(int *)arg;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    static char buf[65536];
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
        for (uint64_t sent = 0; sent < SHARE_BYTES;) {
            ssize_t n = write(fd, buf, sizeof buf);
            if (n <= 0) break;
            sent += (uint64_t)n;
        }
    close(fd);
    return NULL;
}

static void sink_open(share_sink *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    XDC_ASSERT(s->lfd >= 0 && bind(s->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(s->lfd, 4) == 0);
    XDC_ASSERT(getsockname(s->lfd, (struct sockaddr *)&a, &len) == 0);
    s->port = ntohs(a.sin_port);
    s->got = 0;
}

XDC_TEST(wan_emu_routes_of_one_link_share_its_rate)
{
    /* Two flows through two routes of one 40 Mbit/s link: together they get the link's rate, not twice it
     * (an upper bound only: a loaded machine can make the flows slower, never faster). */
    const double rate = 40;
    xdc_wan_link_model m = {.rate_mbps = rate, .rtt_ms = 4, .seed = 3};
    share_sink sink[2];
    sink_open(&sink[0]);
    sink_open(&sink[1]);
    xdc_wan_relay *r;
    xdc_diag d = {{0}};
    int port[2];
    XDC_ASSERT_OK(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", sink[0].port, &m, &r, &d));
    port[0] = xdc_wan_relay_port(r);
    XDC_ASSERT_OK(xdc_wan_relay_add_route(r, "127.0.0.1", 0, "127.0.0.1", sink[1].port, &port[1], &d));
    XDC_ASSERT(port[1] > 0 && port[1] != port[0]);
    pthread_t st[2], src[2];
    uint64_t t0 = xdc_now_ns();
    for (int i = 0; i < 2; i++) {
        pthread_create(&st[i], NULL, sink_main, &sink[i]);
        pthread_create(&src[i], NULL, source_main, &port[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(src[i], NULL);
        pthread_join(st[i], NULL);
    }
    double secs = (double)(xdc_now_ns() - t0) / 1e9;
    XDC_ASSERT_EQ(sink[0].got, SHARE_BYTES);
    XDC_ASSERT_EQ(sink[1].got, SHARE_BYTES);
    double mbps = 2.0 * SHARE_BYTES * 8 / secs / 1e6;
    printf("two flows together: %.1f Mbit/s over a %.0f Mbit/s link\n", mbps, rate);
    XDC_ASSERT_MSG(mbps <= rate * 1.15, "two routes got %.1f Mbit/s together on a %.0f Mbit/s link", mbps, rate);
    xdc_wan_relay_destroy(r);
    close(sink[0].lfd);
    close(sink[1].lfd);
}

/* A relay with link model `m` to a fresh sink and one connection through it: the client's end, the sink's end and
 * the relay's address. */
typedef struct {
    share_sink sink;
    xdc_wan_relay *r;
    struct sockaddr_in a;
    int fd, peer;
} relayed;

static void relayed_open(relayed *c, const xdc_wan_link_model *m)
{
    sink_open(&c->sink);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_relay_create("127.0.0.1", 0, "127.0.0.1", c->sink.port, m, &c->r, &d));
    c->a = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons((uint16_t)xdc_wan_relay_port(c->r))};
    inet_pton(AF_INET, "127.0.0.1", &c->a.sin_addr);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    XDC_ASSERT(c->fd >= 0 && connect(c->fd, (struct sockaddr *)&c->a, sizeof c->a) == 0);
    c->peer = accept(c->sink.lfd, NULL, NULL);
    XDC_ASSERT(c->peer >= 0);
}

static void relayed_close(relayed *c)
{
    close(c->fd);
    close(c->peer);
    xdc_wan_relay_destroy(c->r);
    close(c->sink.lfd);
}

XDC_TEST(wan_emu_idle_link_sleeps_until_bytes_come)
{
    /* A 20 Mbit/s link with a connection open, after a few bytes, carries nothing for 300 ms: its thread sleeps
     * in poll (at most its 50 ms housekeeping: ~6 wakeups), where a 1 ms refill tick woke it ~300 times. An upper
     * bound only: a loaded machine can delay wakeups, never add them. Then bytes still pass. */
    relayed c;
    relayed_open(&c, &(xdc_wan_link_model){.rate_mbps = 20, .rtt_ms = 4, .seed = 5});
    char buf[4] = "ping";
    XDC_ASSERT_EQ(send(c.fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    XDC_ASSERT_EQ(recv(c.peer, buf, sizeof buf, MSG_WAITALL), (ssize_t)sizeof buf);
    uint64_t w0 = xdc_wan_relay_wakeups(c.r);
    xdc_sleep_s(0.3); /* the idle window measured */
    uint64_t idle = xdc_wan_relay_wakeups(c.r) - w0;
    printf("idle 300 ms: %llu wakeups\n", (unsigned long long)idle);
    XDC_ASSERT_MSG(idle <= 20, "an idle link woke %llu times in 300 ms", (unsigned long long)idle);
    XDC_ASSERT_EQ(send(c.fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
    XDC_ASSERT_EQ(recv(c.peer, buf, sizeof buf, MSG_WAITALL), (ssize_t)sizeof buf);
    relayed_close(&c);
}

XDC_TEST(wan_emu_in_flight_outage_waits_for_a_transfer)
{
    /* An in-flight outage due at once lets a handshake-sized exchange pass, then cuts the first transfer on its
     * way, and the link refuses connections while the outage lasts. On a link with a delay the transfer is seen in
     * the delay line (20 ms one way: the receiver gets none of it); on a slow link with a short delay, which never
     * holds a chunk's worth, by its sender held back by the rate (an idle link's bucket holds one chunk, 16 KiB,
     * which the handshake-sized bytes pass on). */
    static const xdc_wan_link_model links[2] = {{.rtt_ms = 40, .seed = 7}, {.rate_mbps = 2, .rtt_ms = 2, .seed = 7}};
    static char buf[1 << 16]; /* one transfer: 64 KiB */
    for (int i = 0; i < 2; i++) {
        relayed c;
        relayed_open(&c, &links[i]);
        if (links[i].rate_mbps > 0) xdc_sleep_s(0.1); /* the idle bucket fills to its chunk (65 ms at 2 Mbit/s) */
        XDC_ASSERT_OK(xdc_wan_relay_schedule_outage(c.r, &(xdc_wan_outage){.duration_ms = 60000, .in_flight = 1}));
        struct timeval tv = {.tv_sec = 20};
        setsockopt(c.peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        XDC_ASSERT_EQ(send(c.fd, buf, 4096, 0), (ssize_t)4096);
        XDC_ASSERT_MSG(recv(c.peer, buf, 4096, MSG_WAITALL) == 4096, "4 KiB did not pass an in-flight outage's wait");
        XDC_ASSERT_EQ(send(c.fd, buf, sizeof buf, 0), (ssize_t)sizeof buf);
        ssize_t n, got = 0;
        while ((n = recv(c.peer, buf, sizeof buf, 0)) > 0) got += n;
        printf("in-flight outage (%g Mbit/s, rtt %g ms): 4096 bytes passed before it, %zd of the %zu-byte transfer "
               "after\n",
               links[i].rate_mbps, links[i].rtt_ms, got, sizeof buf);
        XDC_ASSERT_MSG(got < (ssize_t)sizeof buf && (links[i].rate_mbps > 0 || got == 0),
                       "%zd bytes of the transfer the outage cut reached the receiver", got);
        int again = socket(AF_INET, SOCK_STREAM, 0);
        XDC_ASSERT(again >= 0 && connect(again, (struct sockaddr *)&c.a, sizeof c.a) == 0); /* the kernel accepts... */
        XDC_ASSERT(recv(again, buf, 1, 0) <= 0); /* ...and the cut relay resets it */
        close(again);
        relayed_close(&c);
    }
}

XDC_TEST(wan_emu_bytes_sent_before_a_reset_arrive_before_it)
{
    /* A side writes its last bytes and resets the connection (a close with unread input does so: a WAN peer's BYE,
     * then its close while the other's BYE is on its way): on a link with a 100 ms one-way delay the bytes are still
     * in the relay's delay line when the reset reaches it. They arrive, as they would over a real link; then the
     * reset. Dropped with the connection, the other side saw a reset and never the last frame. */
    relayed c;
    relayed_open(&c, &(xdc_wan_link_model){.rtt_ms = 200, .seed = 9});
    char buf[8] = "bye!";
    XDC_ASSERT_EQ(send(c.fd, buf, 4, 0), (ssize_t)4);
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(c.fd);                            /* the reset */
    c.fd = socket(AF_INET, SOCK_STREAM, 0); /* relayed_close's */
    struct timeval tv = {.tv_sec = 20};
    setsockopt(c.peer, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    memset(buf, 0, sizeof buf);
    ssize_t got = recv(c.peer, buf, 4, MSG_WAITALL);
    XDC_ASSERT_MSG(got == 4 && memcmp(buf, "bye!", 4) == 0, "the bytes before the reset: %zd arrived ('%.4s')", got,
                   buf);
    XDC_ASSERT(recv(c.peer, buf, sizeof buf, 0) <= 0); /* then the connection ends */
    relayed_close(&c);
}
