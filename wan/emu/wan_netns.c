/* wan_netns.c — the network-namespace mode of the WAN emulator (root only): one namespace per region,
 * each with a TUN device "xw0" addressed 10.77.0.(i+1)/24 and a `tc tbf` qdisc on it for the rate; a
 * "wire" thread in this process carries IPv4 packets between the TUN devices with one-way delay, jitter
 * (never reordering) and real packet loss, so kernel TCP in the namespaces meets a long fat pipe.
 * Namespaces are created with `ip netns add` and removed by destroy (also after a failed create). */
#include "wan/emu/xdc_wan_emu.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_MAX_REGIONS 16
#define NS_PKT_BYTES   2048  /* TUN MTU 1500 plus slack */
#define NS_QUEUE_PKTS  16384 /* per destination: > rate x one-way delay at 1 Gbit/s, 80 ms */

extern char **environ;

typedef struct ns_pkt {
    uint64_t release_ns;
    uint16_t len;
    uint8_t data[NS_PKT_BYTES];
} ns_pkt;

typedef struct ns_queue {
    ns_pkt *ring; /* (NS_QUEUE_PKTS) */
    uint32_t head, count;
    uint64_t last_release_ns[NS_MAX_REGIONS]; /* per source: jitter never reorders one link */
} ns_queue;

struct xdc_wan_netns {
    char prefix[32];
    int n;
    int created;                /* namespaces created so far (destroy removes these) */
    xdc_wan_link_model *models; /* (n, n): [from * n + to] */
    int tun[NS_MAX_REGIONS];
    ns_queue q[NS_MAX_REGIONS]; /* packets waiting for region i */
    pthread_t thread;
    int thread_started, stop, wake_fd;
    xdc_rng rng;
    uint64_t dropped, forwarded;
};

/* Run a command (no shell); 0 when it exited 0. */
static int run_argv(const char *const argv[])
{
    pid_t pid;
    if (posix_spawnp(&pid, argv[0], NULL, NULL, (char *const *)argv, environ) != 0) return -1;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void ns_name(const xdc_wan_netns *w, int i, char *buf, size_t cap) { snprintf(buf, cap, "%s-%d", w->prefix, i); }

void xdc_wan_netns_addr(int region, char *buf, size_t cap) { snprintf(buf, cap, "10.77.0.%d", region + 1); }

const char *xdc_wan_netns_name(const xdc_wan_netns *w, int region, char *buf, size_t cap)
{
    ns_name(w, region, buf, cap);
    return buf;
}

/* Open a TUN device named xw0 inside namespace `ns` (this thread enters it and comes back). */
static int tun_open_in(const char *ns, xdc_diag *diag)
{
    char path[128];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), target = open(path, O_RDONLY | O_CLOEXEC), fd = -1;
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
        xdc_diag_set(diag, "netns %s: cannot enter: %m", ns);
        goto out;
    }
    fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "xw0");
    if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) != 0) {
        xdc_diag_set(diag, "netns %s: TUN device: %m", ns);
        if (fd >= 0) close(fd);
        fd = -1;
    }
    if (setns(self, CLONE_NEWNET) != 0) {
        xdc_diag_set(diag, "netns %s: cannot return to our namespace: %m", ns);
        if (fd >= 0) close(fd);
        fd = -1;
    }
out:
    if (self >= 0) close(self);
    if (target >= 0) close(target);
    return fd;
}

static void wire_forward(xdc_wan_netns *w, int from, uint64_t now)
{
    uint8_t buf[NS_PKT_BYTES];
    for (int k = 0; k < 256; k++) {
        ssize_t n = read(w->tun[from], buf, sizeof buf);
        if (n <= 0) return;
        if (n < 20 || (buf[0] >> 4) != 4 || buf[16] != 10 || buf[17] != 77 || buf[18] != 0) continue;
        int to = buf[19] - 1;
        if (to < 0 || to >= w->n || to == from) continue;
        const xdc_wan_link_model *m = &w->models[from * w->n + to];
        ns_queue *q = &w->q[to];
        if (q->count == NS_QUEUE_PKTS || (m->loss_pct > 0 && xdc_rng_uniform(&w->rng) * 100.0 < m->loss_pct)) {
            __atomic_fetch_add(&w->dropped, 1, __ATOMIC_RELAXED);
            continue;
        }
        uint64_t rel = now + (uint64_t)((m->rtt_ms / 2 + m->jitter_ms * xdc_rng_uniform(&w->rng)) * 1e6);
        if (rel < q->last_release_ns[from]) rel = q->last_release_ns[from];
        q->last_release_ns[from] = rel;
        ns_pkt *p = &q->ring[(q->head + q->count) % NS_QUEUE_PKTS];
        p->release_ns = rel;
        p->len = (uint16_t)n;
        memcpy(p->data, buf, (size_t)n);
        q->count++;
    }
}

static void *wire_main(void *arg)
{
    xdc_wan_netns *w = arg;
    struct pollfd pfd[NS_MAX_REGIONS + 1];
    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        uint64_t now = xdc_now_ns(), timeout = 50 * XDC_NS_PER_MS;
        for (int i = 0; i < w->n; i++) {
            ns_queue *q = &w->q[i];
            while (q->count && q->ring[q->head].release_ns <= now) {
                ns_pkt *p = &q->ring[q->head];
                if (write(w->tun[i], p->data, p->len) < 0 && errno == EAGAIN) break;
                q->head = (q->head + 1) % NS_QUEUE_PKTS;
                q->count--;
                __atomic_fetch_add(&w->forwarded, 1, __ATOMIC_RELAXED);
            }
            if (q->count && q->ring[q->head].release_ns > now && q->ring[q->head].release_ns - now < timeout)
                timeout = q->ring[q->head].release_ns - now;
            pfd[i] = (struct pollfd){.fd = w->tun[i], .events = POLLIN};
        }
        pfd[w->n] = (struct pollfd){.fd = w->wake_fd, .events = POLLIN};
        struct timespec ts = {.tv_sec = (time_t)(timeout / 1000000000u), .tv_nsec = (long)(timeout % 1000000000u)};
        ppoll(pfd, (nfds_t)w->n + 1, &ts, NULL);
        now = xdc_now_ns();
        for (int i = 0; i < w->n; i++)
            if (pfd[i].revents & POLLIN) wire_forward(w, i, now);
    }
    return NULL;
}

/* Configure namespace i: loopback up, xw0 addressed and up, tbf at the fastest outgoing link's rate. */
static xdc_err_t ns_configure(xdc_wan_netns *w, int i, xdc_diag *diag)
{
    char ns[64], addr[32], rate[32];
    ns_name(w, i, ns, sizeof ns);
    xdc_wan_netns_addr(i, addr, sizeof addr);
    strcat(addr, "/24");
    double mbps = 0;
    for (int j = 0; j < w->n; j++)
        if (j != i && w->models[i * w->n + j].rate_mbps > mbps) mbps = w->models[i * w->n + j].rate_mbps;
    const char *lo[] = {"ip", "-n", ns, "link", "set", "lo", "up", NULL};
    const char *ad[] = {"ip", "-n", ns, "addr", "add", addr, "dev", "xw0", NULL};
    const char *up[] = {"ip", "-n", ns, "link", "set", "xw0", "up", NULL};
    if (run_argv(lo) || run_argv(ad) || run_argv(up)) {
        xdc_diag_set(diag, "netns %s: `ip` could not configure xw0", ns);
        return XDC_ERR_UNAVAILABLE;
    }
    if (mbps > 0) {
        /* Burst of 1 ms at the rate (at least 16 KiB) and a queue of 100 ms: a bottleneck, not a policer. */
        char burst[32];
        snprintf(rate, sizeof rate, "%.0fkbit", mbps * 1000);
        double b = mbps * 1e6 / 8 / 1000;
        snprintf(burst, sizeof burst, "%.0f", b > 16384 ? b : 16384);
        const char *tbf[] = {"ip",   "netns", "exec", ns,   "tc",    "qdisc", "add",     "dev",   "xw0",
                             "root", "tbf",   "rate", rate, "burst", burst,   "latency", "100ms", NULL};
        if (run_argv(tbf)) {
            xdc_diag_set(diag, "netns %s: `tc qdisc add ... tbf rate %s` failed", ns, rate);
            return XDC_ERR_UNAVAILABLE;
        }
    }
    return XDC_OK;
}

xdc_err_t xdc_wan_netns_create(const char *prefix, int n_regions, const xdc_wan_link_model *models, xdc_wan_netns **out,
                               xdc_diag *diag)
{
    if (!prefix || !models || !out || n_regions < 2 || n_regions > NS_MAX_REGIONS || strlen(prefix) > 20) {
        xdc_diag_set(diag, "netns: 2..%d regions and a prefix of at most 20 characters", NS_MAX_REGIONS);
        return XDC_ERR_INVALID;
    }
    for (const char *c = prefix; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-')) {
            xdc_diag_set(diag, "netns prefix '%s': use a-z, 0-9 and -", prefix);
            return XDC_ERR_INVALID;
        }
    xdc_wan_netns *w = xdc_calloc(1, sizeof *w);
    if (!w) return XDC_ERR_NOMEM;
    snprintf(w->prefix, sizeof w->prefix, "%s", prefix);
    w->n = n_regions;
    w->wake_fd = -1;
    for (int i = 0; i < NS_MAX_REGIONS; i++) w->tun[i] = -1;
    xdc_rng_seed(&w->rng, models[1].seed);
    xdc_err_t rc = XDC_ERR_NOMEM;
    w->models = xdc_malloc((size_t)n_regions * (size_t)n_regions * sizeof *models);
    if (!w->models) goto fail;
    memcpy(w->models, models, (size_t)n_regions * (size_t)n_regions * sizeof *models);
    for (int i = 0; i < n_regions; i++)
        if (!(w->q[i].ring = xdc_malloc(NS_QUEUE_PKTS * sizeof(ns_pkt)))) goto fail;
    for (int i = 0; i < n_regions; i++) {
        char ns[64];
        ns_name(w, i, ns, sizeof ns);
        const char *add[] = {"ip", "netns", "add", ns, NULL};
        if (run_argv(add) != 0) {
            xdc_diag_set(diag, "`ip netns add %s` failed (needs root / CAP_NET_ADMIN, or the name is taken)", ns);
            rc = XDC_ERR_UNAVAILABLE;
            goto fail;
        }
        w->created = i + 1;
        if ((w->tun[i] = tun_open_in(ns, diag)) < 0) {
            rc = XDC_ERR_UNAVAILABLE;
            goto fail;
        }
        XDC_CHECK_GOTO(ns_configure(w, i, diag), rc, fail);
    }
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (w->wake_fd < 0 || pthread_create(&w->thread, NULL, wire_main, w) != 0) {
        xdc_diag_set(diag, "netns: cannot start the wire thread");
        goto fail;
    }
    w->thread_started = 1;
    *out = w;
    return XDC_OK;
fail:
    xdc_wan_netns_destroy(w);
    return rc;
}

void xdc_wan_netns_destroy(xdc_wan_netns *w)
{
    if (!w) return;
    if (w->thread_started) {
        __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(w->wake_fd, &one, sizeof one) < 0) XDC_WARN(XDC_SUB_WAN, "netns: wake: %m");
        pthread_join(w->thread, NULL);
    }
    for (int i = 0; i < NS_MAX_REGIONS; i++)
        if (w->tun[i] >= 0) close(w->tun[i]);
    for (int i = 0; i < w->created; i++) {
        char ns[64];
        ns_name(w, i, ns, sizeof ns);
        const char *del[] = {"ip", "netns", "del", ns, NULL};
        if (run_argv(del) != 0) XDC_WARN(XDC_SUB_WAN, "netns: `ip netns del %s` failed", ns);
    }
    for (int i = 0; i < NS_MAX_REGIONS; i++) xdc_free(w->q[i].ring);
    if (w->wake_fd >= 0) close(w->wake_fd);
    xdc_free(w->models);
    xdc_free(w);
}

void xdc_wan_netns_counters(xdc_wan_netns *w, uint64_t *forwarded, uint64_t *dropped)
{
    if (forwarded) *forwarded = __atomic_load_n(&w->forwarded, __ATOMIC_RELAXED);
    if (dropped) *dropped = __atomic_load_n(&w->dropped, __ATOMIC_RELAXED);
}
