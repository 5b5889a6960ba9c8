/* orch_worker_sync.c — the worker's syncs: the configuration each starts from (the member's, with this
 * stage's parameters and the trace hook), the list of the mode's, the wait for a round (exposed WAN time),
 * the worker's elastic setup and the wait on an open elastic round (regions the store's host names lost), a stopped
 * worker's notice that its region was dropped, and the switch of the WAN codec
 * and DiLoCo period a re-plan or a resume makes. Below orch_train.c,
 * orch_checkpoint.c and the modes, which all use it. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double now_s(void) { return (double)xdc_now_ns() / 1e9; }

/* The comm thread's timeline: each bucket phase of every sync on the worker's trace lanes. */
static void sync_trace(void *ctx, const char *sync_name, xdc_sync_phase phase, uint64_t start_ns, uint64_t dur_ns,
                       size_t bytes)
{
    orch_worker *w = ctx;
    static const char *const what[] = {"reduce-scatter", "encode+send", "wait+decode", "all-gather"};
    static const orch_trace_lane lane[] = {ORCH_LANE_INTRA, ORCH_LANE_CODEC, ORCH_LANE_WAN_RX, ORCH_LANE_INTRA};
    if (!w->tele.trace) return;
    uint64_t now_us = orch_trace_now_us(w->tele.trace), ago_us = (xdc_now_ns() - start_ns) / 1000;
    char name[ORCH_TRACE_NAME_MAX];
    snprintf(name, sizeof name, "%s %s", sync_name, what[phase]);
    orch_trace_complete(w->tele.trace, lane[phase], name,
                        phase == XDC_SYNC_PHASE_REDUCE_SCATTER || phase == XDC_SYNC_PHASE_ALL_GATHER ? "intra" : "wan",
                        now_us > ago_us ? now_us - ago_us : 0, dur_ns / 1000, "bytes", (double)bytes);
}

void orch_worker_sync_cfg(orch_worker *w, int across_regions, xdc_sync_cfg *out)
{
    orch_member_sync_cfg(w->member, across_regions, out);
    out->n_elems = w->model.n_params;
    out->name = "gradients";
    out->trace = sync_trace;
    out->trace_ctx = w;
}

xdc_err_t orch_replica_weights(orch_worker *w, xdc_sync *sync, xdc_diag *diag)
{
    int n = w->id->n_replicas, m;
    if (w->cfg->n_replica_mb && n > 1) {
        float rep[ORCH_MAX_REPLICA_MB] = {0};
        for (int i = 0; i < n; i++) {
            XDC_CHECK(
                orch_run_config_replica_mb(w->cfg, w->id->replicas, w->id->n_regions, w->id->region_idx, i, &m, diag));
            rep[i] = (float)m;
        }
        XDC_CHECK(xdc_sync_set_replica_weights(sync, rep, diag));
    }
    return orch_region_weights(w, sync, diag);
}

float orch_region_weight(const orch_worker *w, int r)
{
    return w->model.regions_differ ? (float)w->model.region_mb[r] : 1.0f; /* exact: integers far below 2^24 */
}

xdc_err_t orch_region_weights(orch_worker *w, xdc_sync *sync, xdc_diag *diag)
{
    return orch_member_weigh_regions(w->member, sync, w->model.region_mb, diag);
}

int orch_worker_syncs(const orch_worker *w, xdc_sync **out, int cap)
{
    return w->mode && w->mode_state ? w->mode->syncs(w->mode_state, out, cap) : 0;
}

/* How often a worker whose round's exchange is under way looks whether a member left during it (lost/<S>). */
#define ORCH_LOST_POLL_MS 200

/* The member regions the store's host named lost during the open round's exchange since the last look are
 * no longer waited for. */
static xdc_err_t poll_lost(orch_worker *w, xdc_diag *diag)
{
    uint8_t lost[XDC_TOPO_MAX_REGIONS];
    int n;
    XDC_CHECK(orch_elastic_lost(&w->elastic.m, lost, &n, diag));
    for (int r = 0; n > 0 && r < w->id->n_regions; r++)
        if (lost[r]) xdc_sync_lose(w->elastic.open, r);
    return XDC_OK;
}

/* A member region's link with no stream up (its connection broke: reset, refused, timed out) at a look of the
 * wait: down since the look before (`since`, xdc_now_ns). Counted against the exchange only where its routes use the
 * link (not around it: orch_elastic_routes); seen for the next link report either way. */
static void watch_links(orch_worker *w, uint64_t since)
{
    xdc_wan_peer **peers = orch_member_peers(w->member);
    double waited = (double)(xdc_now_ns() - since) / 1e9;
    for (int r = 0; r < w->id->n_regions; r++) {
        xdc_wan_stats st;
        if (r == w->id->region_idx || !peers[r] || !w->elastic.m.live[r]) continue;
        xdc_wan_peer_stats(peers[r], &st);
        w->elastic.down[r] = st.streams_up == 0;
        w->elastic.cut[r] |= w->elastic.down[r];
        if (w->elastic.down[r] && !orch_routes_avoids(w->topo, w->elastic.routes, r, w->id->region_idx))
            w->elastic.down_s[r] += waited;
    }
}

void orch_elastic_links(orch_worker *w, long long step)
{
    for (int r = 0; r < w->id->n_regions; r++) {
        if (w->elastic.down_s[r] <= 0 || w->elastic.m.told[r]) { /* a region that left: its process is gone */
            w->elastic.down_s[r] = 0;
            continue;
        }
        XDC_WARN(XDC_SUB_ORCH,
                 "outer round at step %lld: the link to region %s was down for %.1f s of the exchange (its WAN "
                 "connection broke%s); the exchange waited for it (the next rounds go around it while it is down)",
                 step, w->topo->regions[r].name, w->elastic.down_s[r],
                 w->elastic.down[r] ? ", not back yet" : " and came back");
        w->elastic.down_s[r] = 0;
    }
}

/* Outer rounds of DiLoCo and streaming go per-round routes; elastic sync mode's every step does not. */
static int routed(const orch_worker *w, long long step)
{
    return w->elastic.on && w->cfg->mode != ORCH_MODE_SYNC && step != RDZV_ROUND_END;
}

xdc_err_t orch_elastic_report_links(orch_worker *w, long long step, xdc_diag *diag)
{
    if (!routed(w, step) || w->id->lrank != 0) return XDC_OK;
    xdc_wan_peer **peers = orch_member_peers(w->member);
    int n = w->id->n_regions, me = w->id->region_idx;
    char rep[XDC_TOPO_MAX_REGIONS + 1];
    for (int r = 0; r < n; r++) {
        const xdc_link *l = xdc_topology_link(w->topo, r, me);
        xdc_wan_stats st;
        rep[r] = '-';
        if (r == me || !peers[r] || !l) continue;
        xdc_wan_peer_stats(peers[r], &st);
        /* what the link carried since the last report: a rate measure when enough, and not cut meanwhile */
        uint64_t bytes = st.rx_payload_bytes - w->elastic.rx_bytes[r];
        double busy = st.rx_busy_seconds - w->elastic.rx_busy[r];
        if ((double)bytes * 8.0 / (l->bandwidth_gbps * 1e9) * 1e3 >= ORCH_ROUTES_MIN_MS && busy > 0 &&
            !w->elastic.cut[r]) {
            w->elastic.rate[r] = orch_routes_report_char(0, (double)bytes * 8.0 / busy / 1e9 / l->bandwidth_gbps);
            w->elastic.rate_age[r] = 0;
        } else if (w->elastic.cut[r] || ++w->elastic.rate_age[r] >= ORCH_ROUTES_PROBE) {
            w->elastic.rate[r] = '?'; /* down meanwhile, or the probe of a link avoided as slow */
        }
        w->elastic.rx_bytes[r] = st.rx_payload_bytes;
        w->elastic.rx_busy[r] = st.rx_busy_seconds;
        w->elastic.cut[r] = 0;
        rep[r] = orch_routes_report_char(st.streams_up == 0, -1.0);
        if (rep[r] != 'd' && w->elastic.rate[r]) rep[r] = w->elastic.rate[r];
    }
    rep[n] = '\0';
    char val[XDC_TOPO_MAX_REGIONS + 32];
    snprintf(val, sizeof val, "%lld:%s", step, rep);
    return rdzv_set(orch_member_rdzv(w->member), rdzv_key_links(me, 0).s, val, diag);
}

xdc_err_t orch_elastic_routes(orch_worker *w, xdc_sync *sync, long long step, xdc_diag *diag)
{
    if (!routed(w, step)) return XDC_OK;
    char now[ORCH_ROUTES_VALUE_MAX], line[1024];
    int n = w->id->n_regions, *route = xdc_calloc((size_t)n * (size_t)n, sizeof *route);
    if (!route) return XDC_ERR_NOMEM;
    /* published before the round's decision, which this worker has: none is every link direct */
    xdc_err_t rc = rdzv_try_get(orch_member_rdzv(w->member), rdzv_key_routes(step).s, now, sizeof now, diag);
    if (rc == XDC_ERR_AGAIN) rc = XDC_OK, snprintf(now, sizeof now, "-");
    if (rc == XDC_OK) rc = orch_routes_table(w->topo, now, route, diag);
    if (rc == XDC_OK) rc = xdc_sync_set_routes(sync, route, diag);
    xdc_free(route);
    XDC_CHECK(rc);
    if (orch_routes_describe(w->topo, step, w->elastic.routes, now, line, sizeof line))
        XDC_WARN(XDC_SUB_ORCH, "%s", line);
    snprintf(w->elastic.routes, sizeof w->elastic.routes, "%s", now);
    return XDC_OK;
}

void orch_elastic_setup(orch_worker *w)
{
    w->elastic.on = orch_quorum_elastic(w->cfg, w->id->n_regions);
    orch_elastic_member_init(&w->elastic.m, orch_member_rdzv(w->member), w->topo, w->id->region_idx, w->id->lrank,
                             w->cfg->elastic.grace_ms, w->cfg->timeouts.operation_ms);
    w->elastic.m.joins_in_round = w->elastic.on && orch_quorum_joins_in_round(w->cfg);
    w->elastic.m.ran = w->elastic.on && w->cfg->diloco.train_while_waiting;
}

/* A look's spacing past STOP_TIMES its usual one, and at least STOP_MIN_S, says the worker was stopped. */
#define STOP_TIMES 4.0
#define STOP_MIN_S 1.0

xdc_err_t orch_elastic_look(orch_worker *w, uint64_t *last_ns, double *usual_s, xdc_diag *diag)
{
    if (!w->elastic.on) return XDC_OK;
    uint64_t now = xdc_now_ns();
    double gap = (double)(now - *last_ns) / 1e9, usual = *usual_s, limit = fmax(STOP_MIN_S, STOP_TIMES * usual);
    int first = *last_ns == 0;
    *last_ns = now;
    if (first) return XDC_OK;
    *usual_s = usual == 0 ? fmin(gap, limit) : 0.8 * usual + 0.2 * fmin(gap, limit);
    return gap > limit ? orch_elastic_woke(&w->elastic.m, w->elastic.left, gap, diag) : XDC_OK;
}

xdc_err_t orch_elastic_wait(orch_worker *w, xdc_sync *sync, int train, xdc_diag *diag)
{
    if (!w->elastic.open) return xdc_sync_end(sync, diag);
    xdc_err_t rc;
    orch_elastic_member *m = &w->elastic.m;
    uint64_t look = xdc_now_ns(), busy_at = look + (uint64_t)(m->busy_after_s * 1e9);
    double usual = ORCH_LOST_POLL_MS / 1000.0;
    train = train && m->busy;
    /* Once the exchange took twice the usual inner step (as a round's decision, orch_elastic_arrive), a member that
     * trains while it waits runs inner steps, looking at the exchange between them. */
    while ((rc = xdc_sync_wait(sync, train && xdc_now_ns() >= busy_at ? 0 : ORCH_LOST_POLL_MS, diag)) ==
           XDC_ERR_AGAIN) {
        watch_links(w, look);
        XDC_CHECK(orch_elastic_look(w, &look, &usual, diag)); /* stopped in the wait, its region dropped: it leaves */
        XDC_CHECK(poll_lost(w, diag));
        if (!train || xdc_now_ns() < busy_at) continue;
        XDC_CHECK(m->busy(m->busy_ctx, diag));
        look = xdc_now_ns(); /* the step is no stop */
    }
    return rc;
}


xdc_err_t orch_train_wait_sync(orch_worker *w, xdc_sync *sync, xdc_diag *diag)
{
    double t0 = now_s();
    uint64_t u0 = orch_trace_now_us(w->tele.trace);
    xdc_err_t rc = orch_elastic_wait(w, sync, 0, diag); /* a streaming fragment's exchange may be open */
    w->prog.t_wan_exposed += now_s() - t0;
    orch_trace_complete(w->tele.trace, ORCH_LANE_WAN_RX, "wait for gradient sync", "wan", u0,
                        orch_trace_now_us(w->tele.trace) - u0, NULL, 0);
    return rc;
}

xdc_err_t orch_train_switch_wan(orch_worker *w, const char *codec, int period, xdc_diag *diag)
{
    xdc_sync *sync = w->mode->replan_sync(w->mode_state);
    xdc_codec_cfg cc = *orch_member_codec(w->member);
    XDC_CHECK(xdc_codec_parse(codec, &cc, diag));
    /* Delayed averaging keeps a round in flight across the step boundary: it ends on the codec it began
     * with (the next step's wait for it then returns at once), and the switch comes between rounds. */
    if (sync && w->cfg->sync.delay_steps) XDC_CHECK(orch_train_wait_sync(w, sync, diag));
    if (sync) XDC_CHECK(xdc_sync_set_codec(sync, &cc, diag));
    snprintf(w->planned->plan.codec, sizeof w->planned->plan.codec, "%s", codec);
    orch_member_set_codec(w->member, &cc);
    if (period > 0 && w->cfg->mode == ORCH_MODE_DILOCO)
        w->cfg->diloco.inner_steps = w->planned->plan.inner_steps = period;
    return XDC_OK;
}
