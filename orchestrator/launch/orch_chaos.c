/* orch_chaos.c — `xdc launch --chaos` (orch_chaos.h): the seeded fault schedule, and the injector the
 * launcher ticks, which fires each fault once the run reached its step, ends stalls and link faults when
 * their time is up, watches the regions leave and come back, and writes one story line per fault and per
 * recovery. */
#include "orchestrator/launch/orch_chaos.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define CHAOS_POLL_MS  250 /* how often the members' heartbeats (the run's step) and the decider's keys are read */
#define CHAOS_LATE_PCT 90  /* a fault held back (its target busy) is dropped past this share of the steps */

static const char *const kind_names[ORCH_CHAOS_KINDS] = {"kill-worker", "kill-agent", "stall",
                                                         "link-down",   "link-slow",  "kill-donor",
                                                         "kill-pair",   "kill-etcd",  "kill-decider"};

const char *orch_chaos_kind_name(orch_chaos_kind k) { return k >= 0 && k < ORCH_CHAOS_KINDS ? kind_names[k] : "?"; }

/* ---- the schedule -------------------------------------------------------------------------------- */

static xdc_err_t parse_kinds(const char *text, unsigned *out, xdc_diag *diag)
{
    *out = 0;
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, ",");
        int k = 0;
        while (k < ORCH_CHAOS_KINDS && (strlen(kind_names[k]) != n || strncmp(p, kind_names[k], n) != 0)) k++;
        if (k == ORCH_CHAOS_KINDS) {
            xdc_diag_set(diag,
                         "unknown fault kind '%.*s' (kinds: kill-worker, kill-agent, stall, link-down, "
                         "link-slow, kill-donor, kill-pair, kill-etcd, kill-decider)",
                         (int)n, p);
            return XDC_ERR_INVALID;
        }
        *out |= 1u << k;
        p += n + (p[n] == ',');
    }
    if (!*out) {
        xdc_diag_set(diag, "no fault kind in '%s'", text);
        return XDC_ERR_INVALID;
    }
    return XDC_OK;
}

xdc_err_t orch_chaos_spec_parse(const char *text, orch_chaos_spec *out, xdc_diag *diag)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", text);
    char *rate = strchr(buf, ':'), *kinds = NULL, *end;
    if (rate) {
        *rate++ = '\0';
        kinds = strchr(rate, ':');
        if (kinds) *kinds++ = '\0';
    }
    *out = (orch_chaos_spec){.on = 1, .rate = 1.0, .kinds = (1u << ORCH_CHAOS_KINDS) - 1};
    errno = 0;
    out->seed = strtoull(buf, &end, 10);
    if (!buf[0] || *end || errno || buf[0] == '-') {
        xdc_diag_set(diag, "seed '%s' is not a whole number (SEED[:RATE[:KINDS]])", buf);
        return XDC_ERR_INVALID;
    }
    if (rate) {
        out->rate = strtod(rate, &end);
        if (!rate[0] || *end || !(out->rate > 0 && out->rate <= 100)) {
            xdc_diag_set(diag, "rate '%s' is not a number of faults per region per 100 steps in (0, 100]", rate);
            return XDC_ERR_INVALID;
        }
    }
    return kinds ? parse_kinds(kinds, &out->kinds, diag) : XDC_OK;
}

unsigned orch_chaos_kinds_allowed(const orch_chaos_spec *s, const orch_chaos_shape *shape)
{
    unsigned ok = 0;
    if (shape->restarts && shape->spare_regions >= 1)
        ok |= 1u << ORCH_CHAOS_KILL_WORKER | 1u << ORCH_CHAOS_KILL_AGENT | 1u << ORCH_CHAOS_STALL;
    if (shape->restarts && shape->spare_regions >= 2) ok |= 1u << ORCH_CHAOS_KILL_DONOR | 1u << ORCH_CHAOS_KILL_PAIR;
    if (shape->links && shape->n_regions > 1) ok |= 1u << ORCH_CHAOS_LINK_DOWN | 1u << ORCH_CHAOS_LINK_SLOW;
    if (shape->etcd_members > 0) ok |= 1u << ORCH_CHAOS_KILL_ETCD;
    if (shape->deciders > 0) ok |= 1u << ORCH_CHAOS_KILL_DECIDER;
    return ok & s->kinds;
}

/* Uniform in [lo, hi]. */
static int64_t draw(xdc_rng *g, int64_t lo, int64_t hi)
{
    return lo + (int64_t)xdc_rng_below(g, (uint64_t)(hi - lo + 1));
}

static void draw_target(xdc_rng *g, const orch_chaos_shape *sh, orch_chaos_fault *f)
{
    int n = sh->n_regions;
    f->region = (int)draw(g, 0, n - 1);
    f->other = -1;
    switch (f->kind) {
    case ORCH_CHAOS_KILL_WORKER: f->rank = (int)draw(g, 0, sh->workers[f->region] - 1); break;
    case ORCH_CHAOS_STALL:
        f->rank = (int)draw(g, 0, sh->workers[f->region] - 1);
        f->duration_ms = (int)draw(g, 2000, 30000);
        break;
    case ORCH_CHAOS_LINK_DOWN:
    case ORCH_CHAOS_LINK_SLOW: {
        int a = (int)draw(g, 0, n - 2), b = (int)draw(g, a + 1, n - 1);
        f->region = a;
        f->other = b;
        f->duration_ms = f->kind == ORCH_CHAOS_LINK_DOWN ? (int)draw(g, 2000, 20000) : (int)draw(g, 10000, 60000);
        break;
    }
    case ORCH_CHAOS_KILL_PAIR: f->other = (f->region + 1 + (int)draw(g, 0, n - 2)) % n; break;
    case ORCH_CHAOS_KILL_ETCD: f->region = (int)draw(g, 0, sh->etcd_members - 1); break;
    default: break;
    }
}

int orch_chaos_schedule(const orch_chaos_spec *s, const orch_chaos_shape *shape, orch_chaos_fault *out, int cap)
{
    unsigned allowed = orch_chaos_kinds_allowed(s, shape);
    orch_chaos_kind kinds[ORCH_CHAOS_KINDS];
    int m = 0;
    for (int k = 0; k < ORCH_CHAOS_KINDS; k++)
        if (allowed & (1u << k)) kinds[m++] = (orch_chaos_kind)k;
    double want = s->rate * shape->n_regions * (double)shape->steps / 100.0 + 0.5;
    int n = m == 0 || shape->steps < 1 ? 0 : want > cap ? cap : (int)want;
    xdc_rng g;
    xdc_rng_seed(&g, s->seed);
    for (int i = m - 1; i > 0; i--) { /* a shuffled first pass: every kind once before any twice */
        int j = (int)draw(&g, 0, i);
        orch_chaos_kind t = kinds[i];
        kinds[i] = kinds[j];
        kinds[j] = t;
    }
    int64_t lo = shape->steps / 10 > 1 ? shape->steps / 10 : 1, hi = shape->steps * 85 / 100;
    if (hi < lo) hi = lo;
    for (int i = 0; i < n; i++) {
        out[i] = (orch_chaos_fault){.kind = i < m ? kinds[i] : kinds[draw(&g, 0, m - 1)], .step = draw(&g, lo, hi)};
        draw_target(&g, shape, &out[i]);
    }
    for (int i = 1; i < n; i++) { /* by step, stable: insertion */
        orch_chaos_fault f = out[i];
        int j = i;
        for (; j > 0 && out[j - 1].step > f.step; j--) out[j] = out[j - 1];
        out[j] = f;
    }
    return n;
}

/* ---- the injector -------------------------------------------------------------------------------- */

typedef enum { F_PENDING, F_ACTIVE, F_DONE, F_SKIPPED } fault_state;

typedef struct {
    orch_chaos_fault f;
    fault_state state;
    double fired_s, ends_s;       /* seconds since the launch; ends_s: when a stall or link fault is undone (0: none) */
    int regions[2], n_regions;    /* the regions the fault took out (kills, stall), to see them leave and return */
    double out_s[2];              /* when each was seen out of the run (0: not yet) */
    int64_t out_step[2];          /* the run's step when each was seen out */
    int64_t back_step[2];         /* the run's step when each was taken back (-1: not yet): it has recovered once
                                * its own members report a later step (they train again) */
    int64_t back_round[2];        /* the last round each did not train in: the one that took it back, or the last
                                   * it took part in with weight 0 while its state arrived; the end of steps_out
                                   * (bench-chaos's lost steps) */
    long long left0[2];           /* times each had left the run when the fault fired (left/<region>) */
    long long taken_at[2];        /* the round that took each back (back/<region>/<n>) */
    double back_s[2];             /* when that was seen */
    double train_s[2];            /* when each was first seen training from its snapshot while it asked (its
                                   * request join:<nonce>+<n>; 0: not seen): elastic DiLoCo's joiner, whose steps the
                                   * round that takes it back counts when its snapshot is of the round before; or
                                   * while its state came (taking:<round>+<n>): a streaming joiner, whose progress
                                   * is carried onto the state it takes */
    int taking_ran[2];            /* the inner steps each ran while its state came, as its arrivals last said */
    uint8_t back[2];              /* each region's recovery was logged */
    uint8_t catching_up[2];       /* taken back, not training yet by the last decision read (decided_as) */
    int undone;                   /* the stall continued, the link restored */
    long long cont_round;         /* stall: the last round decided when it continued (back once a later one kept
                                   * its region in) */
    pid_t pid;                    /* stall: the stopped worker; kill-etcd: the killed member */
    char holder[RDZV_MEMBER_MAX]; /* kill-decider: the holder it took out ("<host>:<pid>") */
    double was_mbps;              /* link-slow: the rate before */
    int64_t fired_step;           /* the run's step when it fired (heartbeats) */
    double recovery_s;            /* from the end of the fault's cause (a kill: at once; a stall: its SIGCONT; a
                                   * link fault: its restore) to its recovery */
} fault;

struct orch_chaos {
    orch_chaos_world w;
    orch_chaos_shape shape;
    fault f[ORCH_CHAOS_MAX_FAULTS];
    int n;
    uint64_t t0;
    int64_t step;                              /* the furthest step any member reported */
    int64_t region_step[XDC_TOPO_MAX_REGIONS]; /* the furthest step each region's members reported */
    double next_poll_s;
    int polled; /* this tick read the heartbeats: the decider's keys are read too (with etcd each is a request) */
    long long seen_decided; /* the last round decided at the end of the last tick (XDC_TEST_CHAOS_LINK_AT) */
    char etcd[ORCH_CHAOS_MAX_ETCD][ORCH_CHAOS_PATH_MAX];    /* the etcd members' pid files */
    char decider[ORCH_CHAOS_MAX_ETCD][ORCH_CHAOS_PATH_MAX]; /* the standby coordinators' pid files */
};

static double since(const orch_chaos *c) { return (double)(xdc_now_ns() - c->t0) / 1e9; }

static const char *region_name(const orch_chaos *c, int r) { return c->w.t->regions[r].name; }

static int live(const orch_chaos *c, int r) { return !c->w.live || c->w.live[r]; }

/* Etcd member i by its pid file's name ("m1.pid"). */
static const char *etcd_name(const orch_chaos *c, int i)
{
    const char *slash = strrchr(c->etcd[i], '/');
    return slash ? slash + 1 : c->etcd[i];
}

/* The pid in file `path`; 0 when there is none. */
static pid_t read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = 0;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = 0;
        fclose(f);
    }
    return v > 0 ? (pid_t)v : 0;
}

/* 1 when pid is one of the standby coordinators' (their pid files): a process kill-decider may kill. */
static int standby_pid(const orch_chaos *c, pid_t pid)
{
    for (int i = 0; i < c->shape.deciders; i++)
        if (pid > 0 && read_pid(c->decider[i]) == pid) return 1;
    return 0;
}

static pid_t worker_pid(const orch_chaos *c, int r, int rank)
{
    char path[ORCH_CHAOS_PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/pids/%s-%d.pid", c->w.run_dir, region_name(c, r), rank);
    return read_pid(path);
}

/* Agents of region r now running. */
static int agents_alive(const orch_chaos *c, int r)
{
    int n = 0;
    for (int i = 0; i < c->w.agents->n; i++) n += c->w.agent_region[i] == r && c->w.agents->pid[i] != 0;
    return n;
}

static int link_index(const orch_chaos *c, int a, int b)
{
    int idx = 0, n = c->w.t->n_regions;
    for (int i = 0; i < a; i++) idx += n - 1 - i;
    return idx + b - a - 1;
}

/* The furthest step in the members' heartbeats ("step 20"), of the run and of each region (members in the store's
 * order: region by region, rank by rank). One read a member (rdzv_server_status): with etcd, the four requests a
 * member of rdzv_server_member's took four times a second cost the run ~5 % of its pace on 2 shared cores (a
 * streaming run of 150 steps without faults: 0.94 of its reference's pace, 0.99 with the poll ten times rarer). */
static void poll_step(orch_chaos *c)
{
    for (int r = 0, i = 0; r < c->w.t->n_regions; r++) {
        c->region_step[r] = 0;
        for (int k = 0; k < xdc_topology_region_workers(c->w.t, r); k++, i++) {
            char status[RDZV_STATUS_MAX];
            long long s;
            if (rdzv_server_status(c->w.rdzv, i, status, sizeof status) == 0 && sscanf(status, "step %lld", &s) == 1 &&
                s > c->region_step[r])
                c->region_step[r] = s;
        }
        if (c->region_step[r] > c->step) c->step = c->region_step[r];
    }
}

/* The store's events for region r, the keys the round decider writes, not its state: a launch that does not
 * decide reads that state every 250 ms (orch_decider.h), and an outage shorter than that never shows there.
 * times_left: left/<r>, how many times the region left the run (0: never). */
static long long times_left(const orch_chaos *c, int r)
{
    char val[64];
    long long n;
    return rdzv_server_get(c->w.rdzv, rdzv_key_left(r).s, val, sizeof val) == 0 &&
                   rdzv_val_round_parse(val, &n) == XDC_OK
               ? n
               : 0;
}

/* The round that took region i of fault x back after it left (back/<region>/<times left>, written by whichever
 * process decides); -1: none yet. */
static long long taken_back(const orch_chaos *c, const fault *x, int i)
{
    char val[64];
    long long round;
    int n = (int)times_left(c, x->regions[i]);
    if (n <= x->left0[i] || rdzv_server_get(c->w.rdzv, rdzv_key_back(x->regions[i], n).s, val, sizeof val) != 0 ||
        rdzv_val_round_parse(val, &round) != XDC_OK)
        return -1;
    return round;
}

/* "kill-worker ap-south/0 at step 20" into buf. */
static void describe(const orch_chaos *c, const orch_chaos_fault *f, char *buf, size_t cap)
{
    const char *k = orch_chaos_kind_name(f->kind), *a = region_name(c, f->region);
    switch (f->kind) {
    case ORCH_CHAOS_KILL_WORKER: snprintf(buf, cap, "%s %s/%d at step %lld", k, a, f->rank, (long long)f->step); break;
    case ORCH_CHAOS_STALL:
        snprintf(buf, cap, "%s %s/%d at step %lld for %.1f s", k, a, f->rank, (long long)f->step,
                 f->duration_ms / 1000.0);
        break;
    case ORCH_CHAOS_LINK_DOWN:
    case ORCH_CHAOS_LINK_SLOW:
        snprintf(buf, cap, "%s %s<->%s at step %lld for %.1f s", k, a, region_name(c, f->other), (long long)f->step,
                 f->duration_ms / 1000.0);
        break;
    case ORCH_CHAOS_KILL_PAIR:
        snprintf(buf, cap, "%s %s+%s at step %lld", k, a, region_name(c, f->other), (long long)f->step);
        break;
    case ORCH_CHAOS_KILL_ETCD:
        snprintf(buf, cap, "%s %s at step %lld", k, etcd_name(c, f->region), (long long)f->step);
        break;
    default: snprintf(buf, cap, "%s %s at step %lld", k, a, (long long)f->step); break;
    }
}

static void story(const orch_chaos *c, const fault *x, const char *verb, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* One line: "chaos: <verb> <n> <kind> at step <s> (t=<t> s): <what>". */
static void story(const orch_chaos *c, const fault *x, const char *verb, const char *fmt, ...)
{
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    printf("chaos: %s %d %s at step %lld (t=%.1f s): %s\n", verb, (int)(x - c->f) + 1, orch_chaos_kind_name(x->f.kind),
           (long long)c->step, since(c), what);
    fflush(stdout);
}

/* Kill the worker (region r, rank) for fault x; 0 when it has no pid yet. */
static int kill_worker(orch_chaos *c, fault *x, int r, int rank)
{
    pid_t pid = worker_pid(c, r, rank);
    if (pid <= 0 || kill(pid, SIGKILL) != 0) return 0;
    x->regions[x->n_regions++] = r;
    return 1;
}

/* The region a kill-donor fault hits while region `joiner` rejoins: the first in the run from f->region on. */
static int donor_region(const orch_chaos *c, const fault *x, int joiner)
{
    int n = c->w.t->n_regions;
    for (int i = 0; i < n; i++) {
        int r = (x->f.region + i) % n;
        if (r != joiner && live(c, r)) return r;
    }
    return -1;
}

/* A region whose restarted agents are running while it is out of the run: a rejoin under way; -1: none. */
static int rejoining(const orch_chaos *c)
{
    for (int r = 0; r < c->w.t->n_regions; r++)
        if (!live(c, r) && c->w.restarts[r] > 0 && agents_alive(c, r)) return r;
    return -1;
}

static int has_restart(const orch_chaos *c, int r) { return c->w.restarts[r] < c->w.max_restarts; }

/* Another fault still holds region r (a killed region may not have been seen leaving yet): wait for it. */
static int region_busy(const orch_chaos *c, int r)
{
    for (int i = 0; i < c->n; i++)
        for (int k = 0; c->f[i].state == F_ACTIVE && k < c->f[i].n_regions; k++)
            if (c->f[i].regions[k] == r) return 1;
    return 0;
}

/* Regions out of the run or held by a fault: a fault that takes k more out waits while this + k would pass
 * the regions the quorum can spare (the run would end below elastic.min_regions). */
static int regions_down(const orch_chaos *c)
{
    int n = 0;
    for (int r = 0; r < c->w.t->n_regions; r++) n += !live(c, r) || region_busy(c, r);
    return n;
}

/* Another link fault still holds link a<->b (a rate cut restores the rate it found). */
static int link_busy(const orch_chaos *c, int a, int b)
{
    for (int i = 0; i < c->n; i++) {
        const orch_chaos_fault *f = &c->f[i].f;
        if (c->f[i].state == F_ACTIVE && (f->kind == ORCH_CHAOS_LINK_DOWN || f->kind == ORCH_CHAOS_LINK_SLOW) &&
            f->region == a && f->other == b)
            return 1;
    }
    return 0;
}

/* Fault x would take region r out for good: it has used every restart. */
static int skip(orch_chaos *c, fault *x, int r)
{
    x->state = F_SKIPPED;
    story(c, x, "skipped", "region %s has used its %d restarts (--max-restarts)", region_name(c, r), c->w.max_restarts);
    return 1;
}

/* Fire fault x if its target is ready; 1 when it fired (or was skipped for good). */
static int fire(orch_chaos *c, fault *x)
{
    const orch_chaos_fault *f = &x->f;
    int r = f->region, ok = 0;
    char what[300] = "";
    switch (f->kind) {
    case ORCH_CHAOS_KILL_WORKER:
    case ORCH_CHAOS_STALL:
    case ORCH_CHAOS_KILL_AGENT:
        if (!live(c, r) || !agents_alive(c, r) || region_busy(c, r) || regions_down(c) + 1 > c->shape.spare_regions)
            return 0;
        if (!has_restart(c, r)) return skip(c, x, r);
        if (f->kind == ORCH_CHAOS_KILL_WORKER) {
            ok = kill_worker(c, x, r, f->rank);
            snprintf(what, sizeof what, "worker %s/%d killed (SIGKILL)", region_name(c, r), f->rank);
        } else if (f->kind == ORCH_CHAOS_STALL) {
            x->pid = worker_pid(c, r, f->rank);
            ok = x->pid > 0 && kill(x->pid, SIGSTOP) == 0;
            x->regions[x->n_regions++] = r;
            x->ends_s = since(c) + f->duration_ms / 1000.0;
            snprintf(what, sizeof what, "worker %s/%d stopped (SIGSTOP) for %.1f s", region_name(c, r), f->rank,
                     f->duration_ms / 1000.0);
        } else {
            for (int i = 0; i < c->w.agents->n; i++)
                if (c->w.agent_region[i] == r && c->w.agents->pid[i] != 0 && kill(c->w.agents->pid[i], SIGKILL) == 0)
                    ok = 1;
            x->regions[x->n_regions++] = r;
            snprintf(what, sizeof what, "region %s's agents killed (SIGKILL; their workers follow)", region_name(c, r));
        }
        break;
    case ORCH_CHAOS_KILL_PAIR:
        if (!live(c, r) || !live(c, f->other) || !agents_alive(c, r) || !agents_alive(c, f->other) ||
            region_busy(c, r) || region_busy(c, f->other) || regions_down(c) + 2 > c->shape.spare_regions)
            return 0;
        if (!has_restart(c, r) || !has_restart(c, f->other)) return skip(c, x, has_restart(c, r) ? f->other : r);
        ok = kill_worker(c, x, r, 0);
        ok = kill_worker(c, x, f->other, 0) || ok;
        snprintf(what, sizeof what, "workers %s/0 and %s/0 killed at once (SIGKILL)", region_name(c, r),
                 region_name(c, f->other));
        break;
    case ORCH_CHAOS_KILL_DONOR: {
        int j = rejoining(c), d = j < 0 ? -1 : donor_region(c, x, j);
        if (j < 0 || d < 0 || !agents_alive(c, d) || region_busy(c, d) || regions_down(c) + 1 > c->shape.spare_regions)
            return 0;
        if (!has_restart(c, d)) return skip(c, x, d);
        ok = kill_worker(c, x, d, 0);
        snprintf(what, sizeof what, "worker %s/0 killed (SIGKILL) while region %s rejoins", region_name(c, d),
                 region_name(c, j));
        break;
    }
    case ORCH_CHAOS_LINK_DOWN:
    case ORCH_CHAOS_LINK_SLOW: {
        xdc_wan_relay *rel = c->w.relays[link_index(c, r, f->other)];
        if (!rel || link_busy(c, r, f->other)) return 0;
        if (f->kind == ORCH_CHAOS_LINK_DOWN) {
            ok = xdc_wan_relay_schedule_outage(rel, &(xdc_wan_outage){.duration_ms = f->duration_ms}) == XDC_OK;
            snprintf(what, sizeof what, "link %s<->%s cut for %.1f s", region_name(c, r), region_name(c, f->other),
                     f->duration_ms / 1000.0);
        } else {
            xdc_wan_relay_set_rate(rel, 0, &x->was_mbps);
            xdc_wan_relay_set_rate(rel, x->was_mbps / 10, NULL);
            ok = 1;
            snprintf(what, sizeof what, "link %s<->%s at a tenth of its rate (%g -> %g Mbit/s) for %.1f s",
                     region_name(c, r), region_name(c, f->other), x->was_mbps, x->was_mbps / 10,
                     f->duration_ms / 1000.0);
        }
        x->ends_s = since(c) + f->duration_ms / 1000.0;
        break;
    }
    case ORCH_CHAOS_KILL_ETCD:
        x->pid = read_pid(c->etcd[r]);
        if (x->pid <= 0) return 0;
        ok = kill(x->pid, SIGKILL) == 0;
        snprintf(what, sizeof what, "etcd member %s (pid %d) killed (SIGKILL)", etcd_name(c, r), (int)x->pid);
        break;
    case ORCH_CHAOS_KILL_DECIDER: {
        const char *colon;
        if (rdzv_server_get(c->w.rdzv, RDZV_KEY_DECIDER, x->holder, sizeof x->holder) != 0) return 0; /* moving */
        if (strcmp(x->holder, c->w.decider->holder) == 0) {
            orch_decider_lapse(c->w.decider);
            ok = 1;
            snprintf(
                what, sizeof what,
                "the round decider %s (this launch) gone as if killed: its lease runs out, it decides nothing more",
                x->holder);
            break;
        }
        x->pid = (colon = strrchr(x->holder, ':')) ? (pid_t)atoi(colon + 1) : 0;
        if (!standby_pid(c, x->pid)) return 0; /* not one we may kill: wait for the role to move */
        ok = kill(x->pid, SIGKILL) == 0;
        snprintf(what, sizeof what, "the round decider %s (a coordinator) killed (SIGKILL)", x->holder);
        break;
    }
    default: break;
    }
    if (!ok) {
        x->state = F_SKIPPED;
        story(c, x, "skipped", "%s: no such process", what);
        return 1;
    }
    x->state = F_ACTIVE;
    x->fired_s = since(c);
    x->fired_step = c->step;
    for (int i = 0; i < x->n_regions; i++) { /* its leaving and its return are the later events */
        x->left0[i] = times_left(c, x->regions[i]);
    }
    story(c, x, "fault", "%s", what);
    return 1;
}

/* The end of a fault's own time: continue the stalled worker, restore the link. */
static void undo(orch_chaos *c, fault *x)
{
    const orch_chaos_fault *f = &x->f;
    if (x->undone || !x->ends_s) return;
    x->undone = 1;
    if (f->kind == ORCH_CHAOS_STALL && x->pid > 0) kill(x->pid, SIGCONT);
    x->cont_round = c->w.decided ? *c->w.decided : c->region_step[f->region];
    if (f->kind == ORCH_CHAOS_LINK_SLOW)
        xdc_wan_relay_set_rate(c->w.relays[link_index(c, f->region, f->other)], x->was_mbps, NULL);
    /* link-down: the relay's own schedule ends the outage */
}

/* " steps_out=eu-west:40-60" (or "40-end" while not back, or still with weight 0 at the end): the steps region i of fault x was out, from the
 * run's step when it was seen leaving (the heartbeats' step) to the round that took it back (not the
 * heartbeats' step then, which lags it by up to their 10-step resolution: the steps missed were undercounted),
 * less the `early` inner steps it ran from its snapshot that round counted (" steps_out=eu-west:40-57 early=3");
 * "" when it never left. */
static void steps_out(const orch_chaos *c, const fault *x, int i, int early, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (!x->out_s[i]) return;
    int n = snprintf(buf, cap, " steps_out=%s:%lld-", region_name(c, x->regions[i]), (long long)x->out_step[i]);
    if (n < 0 || (size_t)n >= cap) return;
    if (x->back_step[i] >= 0 && x->back_round[i] != RDZV_ROUND_END) /* else still catching up at the end */
        snprintf(buf + n, cap - (size_t)n, "%lld", (long long)x->back_round[i] - early);
    else snprintf(buf + n, cap - (size_t)n, "end");
    n = (int)strlen(buf);
    if (early && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, " early=%d", early);
}

/* Region r's character in the last round decided: 'j' taken back, 't'/'c' in with weight 0 while its state
 * arrives or as it has just come (docs/runtime.md "Rejoining"); '1' without elastic rounds or a decision read. */
static char decided_as(const orch_chaos *c, int r)
{
    char mask[XDC_TOPO_MAX_REGIONS + 1];
    if (!c->w.decided || *c->w.decided < 0 ||
        rdzv_server_get(c->w.rdzv, rdzv_key_quorum(*c->w.decided).s, mask, sizeof mask) != 0 || (int)strlen(mask) <= r)
        return '1';
    return mask[r];
}

/* Does region r, decided 'j' at `round`, train from that round on? In elastic DiLoCo a joiner takes part in
 * the exchange of the round that takes it back and, when its state is in by that round's end, trains from it
 * (docs/runtime.md, "Rejoining"): each of its workers then posts took:<round> as its arrival there, and a plain
 * later round once it arrives at the next. 0 while any worker is still taking it (or has posted nothing since). */
static int trains_from(const orch_chaos *c, int r, long long round)
{
    for (int k = 0; k < xdc_topology_region_workers(c->w.t, r); k++) {
        char val[64], nonce[RDZV_NONCE_MAX];
        long long at;
        rdzv_arrive_kind kind;
        if (rdzv_server_get(c->w.rdzv, rdzv_key_outer(r, k).s, val, sizeof val) != 0 ||
            rdzv_val_outer_parse(val, &at, nonce, &kind, NULL) != XDC_OK ||
            !((kind == RDZV_ARRIVE_TOOK && at == round) || (kind == RDZV_ARRIVE && at > round)))
            return 0;
    }
    return 1;
}

/* The inner steps every worker of region r ran from its snapshot, the fewest, as its outer/<r>/<k> says: while it
 * asks to rejoin (`joining`: join:<nonce>+<n>, elastic DiLoCo's early start) or while its state came
 * (taking:<round>+<n>, took:<round>+<n>: a streaming joiner); 0 when any worker posted no such count. */
static int trained_from_snapshot(const orch_chaos *c, int r, int joining)
{
    int fewest = 0;
    for (int k = 0; k < xdc_topology_region_workers(c->w.t, r); k++) {
        char val[128], nonce[RDZV_NONCE_MAX];
        long long at;
        rdzv_arrive_kind kind;
        int n = 0;
        if (rdzv_server_get(c->w.rdzv, rdzv_key_outer(r, k).s, val, sizeof val) != 0 ||
            rdzv_val_outer_parse(val, &at, nonce, &kind, &n) != XDC_OK || n <= 0 ||
            (joining ? !nonce[0] : kind == RDZV_ARRIVE))
            return 0;
        if (k == 0 || n < fewest) fewest = n;
    }
    return fewest;
}

/* The inner steps region r ran from its snapshot that the round at `round`, which took it back, counted (ran/<round>);
 * 0 when none (or no such key: the run does not train while rounds wait). */
static int counted_early(const orch_chaos *c, int r, long long round)
{
    char val[RDZV_VALUE_MAX];
    int h[XDC_TOPO_MAX_REGIONS];
    if (round < 0 || rdzv_server_get(c->w.rdzv, rdzv_key_ran(round).s, val, sizeof val) != 0 ||
        rdzv_val_steps_parse(val, c->w.t->n_regions, h) != XDC_OK)
        return 0;
    return h[r];
}

/* Has fault x recovered? Logs the recovery line when it has. */
static void watch(orch_chaos *c, fault *x)
{
    double now = since(c);
    for (int i = 0; i < x->n_regions; i++) {
        int r = x->regions[i];
        long long round;
        if (!x->out_s[i] && (!live(c, r) || (c->polled && times_left(c, r) > x->left0[i])))
            x->out_s[i] = now, x->out_step[i] = c->step;
        if (x->out_s[i] && x->back_step[i] < 0 && c->polled && !x->train_s[i] && trained_from_snapshot(c, r, 1))
            x->train_s[i] = now;
        if (x->out_s[i] && x->back_step[i] < 0 && c->polled && (round = taken_back(c, x, i)) >= 0)
            x->back_step[i] = c->step, x->back_round[i] = x->taken_at[i] = round, x->back_s[i] = now;
        int n;
        if (x->out_s[i] && x->back_step[i] >= 0 && !x->back[i] && c->polled &&
            (n = trained_from_snapshot(c, r, 0)) > 0) {
            if (!x->train_s[i]) x->train_s[i] = now;
            x->taking_ran[i] = n;
        }
    }
    if (x->ends_s && now >= x->ends_s) undo(c, x);
    if (x->ends_s && !x->undone) return;
    double end_s = x->ends_s ? x->ends_s : x->fired_s, fault_s = end_s - x->fired_s; /* the cause's end */
    switch (x->f.kind) {
    case ORCH_CHAOS_LINK_DOWN:
    case ORCH_CHAOS_LINK_SLOW:
        x->recovery_s = now - end_s;
        /* what the run did meanwhile, from its heartbeats: an exchange over a cut link holds until it is back */
        story(c, x, "recovered",
              "link %s<->%s back at its rate after %.1f s; the run went from step %lld to %lld meanwhile "
              "(fault_s=%.1f recovery_s=%.1f)",
              region_name(c, x->f.region), region_name(c, x->f.other), now - x->fired_s, (long long)x->fired_step,
              (long long)c->step, fault_s, x->recovery_s);
        x->state = F_DONE;
        return;
    case ORCH_CHAOS_KILL_ETCD: {
        pid_t p = read_pid(c->etcd[x->f.region]);
        if (p <= 0 || p == x->pid || kill(p, 0) != 0) return;
        x->recovery_s = now - x->fired_s;
        story(c, x, "recovered", "etcd member %s running again (pid %d) after %.1f s (fault_s=0.0 recovery_s=%.1f)",
              etcd_name(c, x->f.region), (int)p, x->recovery_s, x->recovery_s);
        x->state = F_DONE;
        return;
    }
    case ORCH_CHAOS_KILL_DECIDER: {
        char now_held[RDZV_MEMBER_MAX];
        if (rdzv_server_get(c->w.rdzv, RDZV_KEY_DECIDER, now_held, sizeof now_held) != 0 ||
            strcmp(now_held, x->holder) == 0)
            return;
        x->recovery_s = now - x->fired_s;
        story(c, x, "recovered", "the round decider's role taken over by %s after %.1f s (fault_s=0.0 recovery_s=%.1f)",
              now_held, x->recovery_s, x->recovery_s);
        x->state = F_DONE;
        return;
    }
    default: break;
    }
    /* Region faults: one line as each region it took out trains again (a stall whose region never left: once a
     * round decided after its SIGCONT kept the region in), done once all are back. */
    int all = 1;
    for (int i = 0; i < x->n_regions; i++) {
        int r = x->regions[i];
        if (x->back[i]) continue;
        long long decided = c->w.decided ? *c->w.decided : c->region_step[r];
        /* the decision is a key of the decider's: read with the heartbeats, not at every tick. The round it names
         * is the one read there: between two polls this launcher's own decider may decide later rounds, which
         * say nothing of the region until the next poll reads them. */
        if (c->polled) {
            /* With weight 0 at the round decided: 't' still takes its state; 'c' took it during the round and,
             * as every worker of the region had it at that round's arrival, catches up in its exchange and trains
             * from the step after it (docs/runtime.md, "Rejoining", step 6), as does a 'j' whose state was in by
             * the round's end. That round is the last it did not train in. */
            char as = decided_as(c, r);
            int weightless = x->out_s[i] && x->back_step[i] >= 0 && strchr("jtc", as);
            if (weightless) x->back_round[i] = decided;
            x->catching_up[i] = weightless && as != 'c' && !(as == 'j' && trains_from(c, r, decided));
        }
        if (x->catching_up[i] || (x->f.kind != ORCH_CHAOS_STALL && !x->out_s[i]) || !live(c, r) ||
            (!x->out_s[i] && decided <= x->cont_round) ||
            (x->out_s[i] && (x->back_step[i] < 0 || c->region_step[r] <= x->back_step[i]))) {
            all = 0; /* not seen leaving yet, out, or taken back but not training yet */
            continue;
        }
        x->back[i] = 1;
        /* A joiner whose steps from its snapshot the round counted was back from its first one (seen by the poll; or,
         * missed there, by the time its return was seen: it trained before), as was one whose steps while its state
         * came are carried onto it (seen at its first arrival after its first such step: up to a round late) */
        int early = x->out_s[i] ? counted_early(c, r, x->taken_at[i]) : 0;
        if (x->out_s[i] && !early) early = x->taking_ran[i];
        double at = !early ? now : x->train_s[i] ? x->train_s[i] : x->back_s[i];
        double back = at - x->fired_s, rec = at - end_s, detect = x->out_s[i] ? x->out_s[i] - x->fired_s : 0;
        char out[160];
        if (rec > x->recovery_s) x->recovery_s = rec;
        steps_out(c, x, i, early, out, sizeof out);
        if (!x->out_s[i])
            story(c, x, "recovered",
                  "worker %s/%d continued (SIGCONT) after %.1f s, its region never left (fault_s=%.1f "
                  "recovery_s=%.1f)",
                  region_name(c, r), x->f.rank, fault_s, fault_s, rec);
        else
            story(c, x, "recovered",
                  "region %s back in the run and training; left %.1f s after the fault, back %.1f s after it "
                  "(fault_s=%.1f detect_s=%.1f recovery_s=%.1f rejoin_s=%.1f%s)",
                  region_name(c, r), detect, back, fault_s, detect, rec, back - detect, out);
    }
    if (all) x->state = F_DONE;
}

/* The comma-separated pid files of `list` (named `var` in errors; NULL: none) into out, *n of them. */
static xdc_err_t pid_files(const char *var, const char *list, char (*out)[ORCH_CHAOS_PATH_MAX], int *n, xdc_diag *diag)
{
    *n = 0;
    for (const char *p = list; p && *p && *n < ORCH_CHAOS_MAX_ETCD;) {
        size_t len = strcspn(p, ",");
        if (len >= ORCH_CHAOS_PATH_MAX) {
            xdc_diag_set(diag, "%s: a path longer than %d bytes", var, ORCH_CHAOS_PATH_MAX - 1);
            return XDC_ERR_INVALID;
        }
        if (len) snprintf(out[(*n)++], ORCH_CHAOS_PATH_MAX, "%.*s", (int)len, p);
        p += len + (p[len] == ',');
    }
    return XDC_OK;
}

xdc_err_t orch_chaos_create(const orch_chaos_spec *s, const orch_chaos_shape *shape, const orch_chaos_world *w,
                            orch_chaos **out, xdc_diag *diag)
{
    orch_chaos *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_ERR_NOMEM;
    c->w = *w;
    c->shape = *shape;
    xdc_err_t rc = pid_files("XDC_CHAOS_ETCD_PIDS", w->etcd_pids, c->etcd, &c->shape.etcd_members, diag);
    if (rc == XDC_OK)
        rc = pid_files("XDC_CHAOS_DECIDER_PIDS", w->decider ? w->decider_pids : NULL, c->decider, &c->shape.deciders,
                       diag);
    if (rc != XDC_OK) {
        xdc_free(c);
        return rc;
    }
    orch_chaos_fault plan[ORCH_CHAOS_MAX_FAULTS];
    c->n = orch_chaos_schedule(s, &c->shape, plan, ORCH_CHAOS_MAX_FAULTS);
    for (int i = 0; i < c->n; i++) c->f[i] = (fault){.f = plan[i], .back_step = {-1, -1}};
    c->t0 = xdc_now_ns();
    c->seen_decided = -1;
    char line[ORCH_CHAOS_MAX_FAULTS * 64];
    size_t len = 0;
    for (int i = 0; i < c->n && len < sizeof line; i++) {
        char d[160];
        describe(c, &plan[i], d, sizeof d);
        len += (size_t)snprintf(line + len, sizeof line - len, "%s%d %s", i ? "; " : "", i + 1, d);
    }
    unsigned kinds = orch_chaos_kinds_allowed(s, &c->shape);
    printf("chaos: seed %llu, %g faults per region per 100 steps over %lld steps: %d planned%s%s\n",
           (unsigned long long)s->seed, s->rate, (long long)shape->steps, c->n, c->n ? ": " : "",
           c->n    ? line
           : kinds ? ""
                   : " (this run allows no fault kind asked for: see xdc launch --help)");
    fflush(stdout);
    *out = c;
    return XDC_OK;
}

/* Test hook XDC_TEST_CHAOS_LINK_AT (tests/e2e/test_chaos_launch.c): a link fault due fires only "between" outer
 * rounds' exchanges (the last round decided has its final set: every member's exchange is over, they compute), or
 * as a round was just decided ("exchange": this launcher's tick decided it, the tick runs right after the decider's,
 * and the round's routes were chosen with the link up: its exchange meets the cut), so that a test knows which
 * rounds meet the cut; unset, whenever it is due. */
static int link_fault_may_fire(const orch_chaos *c, const fault *x)
{
    const char *at = getenv("XDC_TEST_CHAOS_LINK_AT");
    char set[XDC_TOPO_MAX_REGIONS + 1];
    if (!at || !at[0] || (x->f.kind != ORCH_CHAOS_LINK_DOWN && x->f.kind != ORCH_CHAOS_LINK_SLOW)) return 1;
    if (!c->w.decided || *c->w.decided < 0) return 0;
    if (strcmp(at, "exchange") == 0) return *c->w.decided != c->seen_decided;
    return rdzv_server_get(c->w.rdzv, rdzv_key_final(*c->w.decided).s, set, sizeof set) == 0;
}

void orch_chaos_tick(orch_chaos *c)
{
    double now = since(c);
    c->polled = now >= c->next_poll_s;
    if (c->polled) {
        poll_step(c);
        c->next_poll_s = now + CHAOS_POLL_MS / 1000.0;
    }
    for (int i = 0; i < c->n; i++) {
        fault *x = &c->f[i];
        if (x->state == F_PENDING && c->step >= x->f.step && c->step > c->shape.steps * CHAOS_LATE_PCT / 100) {
            x->state = F_SKIPPED; /* waited past the point where a recovery still has room */
            story(c, x, "not injected", "its target was held until step %lld, past %d %% of the run's %lld steps",
                  (long long)c->step, CHAOS_LATE_PCT, (long long)c->shape.steps);
        } else if (x->state == F_PENDING && c->step >= x->f.step && link_fault_may_fire(c, x)) fire(c, x);
        else if (x->state == F_ACTIVE) watch(c, x);
    }
    if (c->w.decided) c->seen_decided = *c->w.decided;
}

void orch_chaos_finish(orch_chaos *c)
{
    int fired = 0, done = 0;
    double worst = 0;
    c->polled = 1; /* a last look at the decider's keys */
    for (int i = 0; i < c->n; i++) {
        fault *x = &c->f[i];
        char d[160], out[256] = "";
        describe(c, &x->f, d, sizeof d);
        if (x->state == F_ACTIVE) watch(c, x);
        if (x->state == F_ACTIVE) undo(c, x);
        for (int k = 0, n = 0; k < x->n_regions && n < (int)sizeof out; k++) /* the regions not back */
            if (!x->back[k]) steps_out(c, x, k, 0, out + n, sizeof out - (size_t)n), n = (int)strlen(out);
        if (x->state == F_PENDING) story(c, x, "not injected", "%s: the run ended first", d);
        if (x->state == F_ACTIVE) story(c, x, "not recovered", "%s: the run ended first%s", d, out);
        fired += x->state == F_ACTIVE || x->state == F_DONE;
        done += x->state == F_DONE;
        if (x->state == F_DONE && x->recovery_s > worst) worst = x->recovery_s;
    }
    printf("chaos: %d faults injected of %d planned, %d recovered, max recovery %.1f s\n", fired, c->n, done, worst);
    fflush(stdout);
}

void orch_chaos_destroy(orch_chaos *c) { xdc_free(c); }
