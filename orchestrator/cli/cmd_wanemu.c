/* cmd_wanemu.c — `xdc wan-emu --topology FILE`: make a topology's WAN links real on this machine with
 * userspace relays (no root). Port plan: worker r of region B listens on B's wan_endpoint port + r; a
 * worker of region A reaches it through 127.0.0.1:(that port + OFFSET x (A's index + 1)), a relay
 * carrying the A->B link's rate, RTT, jitter and loss. `--check` measures every link instead and
 * prints configured vs measured RTT and rate. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_parse.h"
#include "common/xdc_alloc.h"
#include "common/xdc_time.h"
#include "orchestrator/launch/orch_launch.h"
#include "topology/xdc_topology.h"
#include "wan/emu/xdc_wan_emu.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wanemu_usage(FILE *f)
{
    fprintf(f, "usage: xdc wan-emu --topology FILE [--port-offset N] [--ranks N]\n"
               "                   [--outage DUR@START[:in-flight][,...]]... [--duration SECONDS]\n"
               "                   [--check [--seconds S]] [--netns PREFIX [--coordinator]]\n"
               "  One relay per (link, destination worker): worker r of region B listens on B's wan_endpoint\n"
               "  port + r; region A (index a, 0-based) reaches it at 127.0.0.1:(port + r + N x (a + 1)),\n"
               "  N = --port-offset (default 1000). --ranks overrides the workers per region (default: topology).\n"
               "  --outage 30s@10s cuts every relay for 30 s starting 10 s after start (repeat it, or give a list\n"
               "  30s@10s,5s@60s, for several; 30s@10s:in-flight waits from then for a transfer on its way,\n"
               "  16 KiB or more, and cuts it). Runs until Ctrl-C or\n"
               "  --duration. --check measures each link for S seconds (default 1.5) and prints configured vs\n"
               "  measured RTT and rate instead of running relays.\n"
               "  --netns PREFIX (root): network namespaces PREFIX-0.. (one per region, address 10.77.0.(i+1) on\n"
               "  device xw0, `tc tbf` for the rate) joined by a TUN wire with the links' delay, jitter and packet\n"
               "  loss; run workers with `ip netns exec PREFIX-i`. Removed on exit and on Ctrl-C.\n"
               "  --coordinator: one more namespace PREFIX-N (N regions; address 10.77.0.(N+1)) for the rendezvous,\n"
               "  placed in the first region's datacenter: no delay to it, the first region's links to the others.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}


/* netns: NULL measures each link through a loopback relay, else through the namespace wire. */
static int run_check(const xdc_topology *t, double seconds, xdc_wan_netns *netns)
{
    int bad = 0;
    printf("%-24s %10s %10s %10s %12s %12s %s\n", "link", "rtt_ms", "jitter_ms", "min_rtt", "rate_mbps", "meas_rate",
           "verdict");
    for (int i = 0; i < t->n_links; i++) {
        const xdc_link *l = &t->links[i];
        xdc_wan_link_model m;
        orch_link_model(l, (uint64_t)i + 1, &m);
        double rtt = 0, rate = 0;
        xdc_diag d = {{0}};
        xdc_err_t rc = netns ? xdc_wan_netns_measure(netns, l->from, l->to, m.rate_mbps, seconds, &rtt, &rate, &d)
                             : xdc_wan_emu_measure(&m, seconds, &rtt, &rate, &d);
        if (rc != XDC_OK) {
            fprintf(stderr, "xdc wan-emu: %s -> %s: %s\n", t->regions[l->from].name, t->regions[l->to].name, d.msg);
            return xdc_cli_exit_code(rc);
        }
        /* The measured RTT is a minimum: it lies in [rtt, rtt + 2 x jitter] up to 10 %. Loss lowers the rate,
         * and in netns mode tbf counts TCP/IP headers (1448 payload bytes per 1500): judge what applies. */
        double want_rtt = m.rtt_ms, want_rate = netns ? m.rate_mbps * 1448.0 / 1500.0 : m.rate_mbps;
        int ok = rtt >= 0.9 * want_rtt - 0.5 && rtt <= 1.1 * (want_rtt + 2 * m.jitter_ms) + 0.5 &&
                 (m.loss_pct > 0 || m.rate_mbps <= 0 || fabs(rate - want_rate) <= 0.05 * want_rate);
        bad |= !ok;
        char name[160];
        snprintf(name, sizeof name, "%s->%s", t->regions[l->from].name, t->regions[l->to].name);
        printf("%-24s %10.2f %10.2f %10.2f %12.1f %12.1f %s\n", name, want_rtt, m.jitter_ms, rtt, m.rate_mbps, rate,
               ok ? "ok" : "OFF");
    }
    return bad ? XDC_EX_SOFTWARE : XDC_EX_OK;
}

/* Until SIGINT/SIGTERM, or `duration` seconds when > 0. */
static void wait_for_stop(const sigset_t *sigs, double duration)
{
    struct timespec ts = {.tv_sec = (time_t)duration, .tv_nsec = (long)((duration - floor(duration)) * 1e9)};
    int sig;
    do {
        sig = duration > 0 ? sigtimedwait(sigs, NULL, &ts) : sigwaitinfo(sigs, NULL);
    } while (sig < 0 && errno == EINTR);
}

typedef struct {
    const char *topo_path, *netns_prefix;
    int offset, ranks, check, coordinator;
    double seconds, duration;
    xdc_wan_outage outages[XDC_WAN_MAX_OUTAGES]; /* --outage, each flag adding to the schedule */
    int n_outages;
} wanemu_opts;

/* The (n_ns, n_ns) link models of the namespaces: the topology's links between regions; with a coordinator
 * namespace (index n_regions), the first region's links for it, and none between it and the first region. */
static xdc_wan_link_model *netns_models(const xdc_topology *t, int n_ns)
{
    int n = t->n_regions;
    xdc_wan_link_model *models = xdc_calloc((size_t)n_ns * (size_t)n_ns, sizeof *models);
    if (!models) return NULL;
    for (int i = 0; i < t->n_links; i++)
        orch_link_model(&t->links[i], (uint64_t)i + 1, &models[t->links[i].from * n_ns + t->links[i].to]);
    for (int j = 1; j < n && n_ns > n; j++) {
        models[n * n_ns + j] = models[0 * n_ns + j];
        models[j * n_ns + n] = models[j * n_ns + 0];
    }
    return models;
}

static int run_netns(const xdc_topology *t, const wanemu_opts *o, const sigset_t *sigs)
{
    if (o->n_outages > 0) {
        fprintf(stderr, "xdc wan-emu: --outage works with the relays only, not with --netns\n");
        return XDC_EX_USAGE;
    }
    int n = t->n_regions, n_ns = n + (o->coordinator ? 1 : 0);
    xdc_wan_link_model *models = netns_models(t, n_ns);
    if (!models) return XDC_EX_SOFTWARE;
    xdc_wan_netns *w = NULL;
    xdc_diag d = {{0}};
    xdc_err_t e = xdc_wan_netns_create(o->netns_prefix, n_ns, models, &w, &d);
    xdc_free(models);
    if (e != XDC_OK) {
        fprintf(stderr, "xdc wan-emu --netns: %s\n", d.msg);
        return xdc_cli_exit_code(e);
    }
    int rc = XDC_EX_OK;
    if (o->check) {
        rc = run_check(t, o->seconds, w);
    } else {
        for (int i = 0; i < n_ns; i++) {
            char ns[64], ip[32];
            xdc_wan_netns_addr(i, ip, sizeof ip);
            printf("%s %s: ip netns exec %s ...   address %s (device xw0)\n", i < n ? "region" : "coordinator",
                   i < n ? t->regions[i].name : "(rendezvous)", xdc_wan_netns_name(w, i, ns, sizeof ns), ip);
        }
        printf("xdc wan-emu: %d namespaces up; Ctrl-C to stop and remove them\n", n_ns);
        fflush(stdout);
        wait_for_stop(sigs, o->duration);
    }
    xdc_wan_netns_destroy(w);
    return rc;
}

/* 0 when the options are complete; else the exit code (-1: --help printed, exit 0). */
static int wanemu_parse(int argc, char **argv, wanemu_opts *o)
{
    static const struct option opts[] = {
        {"topology", required_argument, NULL, 't'},
        {"port-offset", required_argument, NULL, 'o'},
        {"ranks", required_argument, NULL, 'r'},
        {"outage", required_argument, NULL, 'u'},
        {"duration", required_argument, NULL, 'd'},
        {"check", no_argument, NULL, 'c'},
        {"seconds", required_argument, NULL, 's'},
        {"netns", required_argument, NULL, 'n'},
        {"coordinator", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (wanemu_opts){.offset = 1000, .seconds = 1.5};
    int c;
    xdc_diag d;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't': o->topo_path = optarg; break;
        case 'o':
        case 'r':
            if (xdc_parse_int(optarg, c == 'o' ? 1 : 0, 65535, c == 'o' ? &o->offset : &o->ranks, &d) != XDC_OK) {
                fprintf(stderr, "xdc wan-emu: %s: %s\n", c == 'o' ? "--port-offset" : "--ranks", d.msg);
                return XDC_EX_USAGE;
            }
            break;
        case 'u': {
            xdc_diag d = {{0}};
            if (xdc_wan_outages_parse(optarg, o->outages, &o->n_outages, &d) != XDC_OK) {
                fprintf(stderr, "xdc wan-emu: --outage: %s\n", d.msg);
                return XDC_EX_USAGE;
            }
            break;
        }
        case 'd': o->duration = atof(optarg); break;
        case 'c': o->check = 1; break;
        case 's': o->seconds = atof(optarg); break;
        case 'n': o->netns_prefix = optarg; break;
        case 'C': o->coordinator = 1; break;
        case 'h': wanemu_usage(stdout); return -1;
        default: return wanemu_usage(stderr);
        }
    }
    if (!o->topo_path || optind != argc || o->offset < 1 || o->ranks < 0 || o->seconds <= 0 || o->duration < 0) {
        fprintf(stderr, "xdc wan-emu: %s\n", !o->topo_path ? "--topology FILE is required" : "bad option value");
        return XDC_EX_USAGE;
    }
    if (o->coordinator && !o->netns_prefix) {
        fprintf(stderr, "xdc wan-emu: --coordinator adds a namespace: it needs --netns PREFIX\n");
        return XDC_EX_USAGE;
    }
    return 0;
}

typedef struct {
    xdc_wan_relay **v;
    int n, cap;
} relay_set;

/* One relay per destination worker of link i; 0 or the exit code. */
static int start_link_relays(const xdc_topology *t, const wanemu_opts *o, int i, relay_set *rs)
{
    const xdc_link *l = &t->links[i];
    const xdc_region *to = &t->regions[l->to];
    char host[256];
    int port;
    if (xdc_parse_host_port(to->wan_endpoint, host, sizeof host, &port, NULL) != XDC_OK) {
        fprintf(stderr, "xdc wan-emu: %s:%d:%d: region %s has no usable wan_endpoint HOST:PORT ('%s')\n", t->path,
                to->line, to->col, to->name, to->wan_endpoint);
        return XDC_EX_CONFIG;
    }
    int workers = o->ranks ? o->ranks : xdc_topology_region_workers(t, l->to);
    for (int r = 0; r < workers; r++) {
        int listen_port = port + r + o->offset * (l->from + 1);
        if (listen_port > 65535) {
            fprintf(stderr, "xdc wan-emu: relay port %d for %s->%s rank %d is above 65535; lower --port-offset\n",
                    listen_port, t->regions[l->from].name, to->name, r);
            return XDC_EX_CONFIG;
        }
        if (rs->n == rs->cap) {
            int cap = rs->cap ? 2 * rs->cap : 16;
            xdc_wan_relay **nr = xdc_realloc(rs->v, (size_t)cap * sizeof *nr);
            if (!nr) return XDC_EX_SOFTWARE;
            rs->v = nr;
            rs->cap = cap;
        }
        xdc_wan_link_model m;
        orch_link_model(l, (uint64_t)(i * 4096 + r + 1), &m);
        xdc_diag d = {{0}};
        xdc_err_t e = xdc_wan_relay_create("127.0.0.1", listen_port, host, port + r, &m, &rs->v[rs->n], &d);
        if (e != XDC_OK) {
            fprintf(stderr, "xdc wan-emu: %s->%s rank %d: %s\n", t->regions[l->from].name, to->name, r, d.msg);
            return xdc_cli_exit_code(e);
        }
        for (int k = 0; k < o->n_outages; k++) /* at most the relay's capacity: never refused */
            xdc_wan_relay_schedule_outage(rs->v[rs->n], &o->outages[k]);
        printf("relay %s->%s rank %d: 127.0.0.1:%d -> %s:%d  rate %.1f Mbit/s rtt %.1f ms jitter %.1f ms loss %.3f%%\n",
               t->regions[l->from].name, to->name, r, listen_port, host, port + r, m.rate_mbps, m.rtt_ms, m.jitter_ms,
               m.loss_pct);
        rs->n++;
    }
    return XDC_EX_OK;
}

/* Userspace relays for every link until SIGINT/SIGTERM or --duration. */
static int run_relays(const xdc_topology *t, const wanemu_opts *o, const sigset_t *sigs)
{
    relay_set rs = {0};
    int rc = XDC_EX_OK;
    for (int i = 0; i < t->n_links && rc == XDC_EX_OK; i++) rc = start_link_relays(t, o, i, &rs);
    if (rc == XDC_EX_OK) {
        printf("xdc wan-emu: %d relays up%s; Ctrl-C to stop\n", rs.n, o->n_outages ? " (outages scheduled)" : "");
        fflush(stdout);
        wait_for_stop(sigs, o->duration);
    }
    for (int i = 0; i < rs.n; i++) xdc_wan_relay_destroy(rs.v[i]);
    xdc_free(rs.v);
    return rc;
}

static pthread_t g_main_thread;

/* A stop signal taken by a thread that does not block it (the OpenBLAS pool starts its threads when
 * the library loads, before main can block anything) is handed to the main thread, which takes it in
 * sigwait, or keeps it pending during the cleanup: without this handler its default action would end
 * the process in the middle of removing the namespaces, and the next start would find them. */
static void forward_stop_signal(int sig)
{
    int saved = errno;
    pthread_kill(g_main_thread, sig);
    errno = saved;
}

int xdc_cmd_wanemu(int argc, char **argv)
{
    wanemu_opts o;
    int rc = wanemu_parse(argc, argv, &o);
    if (rc != 0) return rc < 0 ? XDC_EX_OK : rc;
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    xdc_cfg_errors_init(&errs, o.topo_path);
    if (xdc_topology_load(o.topo_path, &t, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return XDC_EX_CONFIG;
    }
    /* Signals are taken synchronously (sigwait below); emulator threads inherit the blocked mask, and
     * threads started before it hand them on (forward_stop_signal), so Ctrl-C, or a second one during the
     * cleanup, always reaches the cleanup and never cuts it short. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    g_main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_stop_signal;
    sa.sa_mask = sigs; /* no nesting: one forward at a time per thread */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (o.netns_prefix) rc = run_netns(t, &o, &sigs);
    else if (o.check) rc = run_check(t, o.seconds, NULL);
    else rc = run_relays(t, &o, &sigs);
    xdc_topology_destroy(t);
    return rc;
}
