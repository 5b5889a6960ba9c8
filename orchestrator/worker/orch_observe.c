/* orch_observe.c — the worker's Prometheus metrics: the standard xdc_* families with const labels
 * region/host/rank, updated once per step, served on /metrics (port metrics_port + global rank, or any
 * free port for 0; the address goes into the rendezvous as metrics/<region>/<rank> and into the log),
 * and a final snapshot written to RUN/metrics/<region>-<rank>.prom when the run ends; and the step log
 * RUN/steps/<region>-<rank>.tsv (orchestrator/obs/orch_steplog.h), whatever metrics_port says. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct orch_observe {
    orch_metric_series *step_total, *step_seconds, *compute, *intra, *wan_exposed, *loss, *tokens;
    orch_metric_series *tx[XDC_TOPO_MAX_REGIONS], *raw[XDC_TOPO_MAX_REGIONS], *rtt[XDC_TOPO_MAX_REGIONS],
        *goodput[XDC_TOPO_MAX_REGIONS], *reconnects[XDC_TOPO_MAX_REGIONS], *retransmits[XDC_TOPO_MAX_REGIONS],
        *slowdown[XDC_TOPO_MAX_REGIONS];
    /* the peer's cumulative xdc_wan_stats counters at the last step, so each step adds its increase */
    uint64_t last_tx[XDC_TOPO_MAX_REGIONS], last_raw[XDC_TOPO_MAX_REGIONS], last_reconnects[XDC_TOPO_MAX_REGIONS],
        last_retransmits[XDC_TOPO_MAX_REGIONS];
};

/* Add a cumulative counter's increase since *last to a Prometheus counter. */
static void add_increase(orch_metric_series *s, uint64_t now, uint64_t *last)
{
    orch_metrics_add(s, (double)(now - *last));
    *last = now;
}

static orch_metric_series *series(orch_metric_family *f, const char *peer, xdc_diag *diag)
{
    orch_metric_series *s = NULL;
    const char *labels[1] = {peer};
    if (orch_metrics_series(f, peer ? labels : NULL, &s, diag) != XDC_OK) return NULL;
    return s;
}

xdc_err_t orch_observe_start(orch_worker *w, xdc_diag *diag)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/steps", w->id->run_dir);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s-%d.tsv", dir, w->id->region, w->id->lrank);
    /* A resumed run starts a fresh log; the one before it stays as <region>-<rank>.tsv.<n>. */
    for (int n = 1; w->id->resume && access(path, F_OK) == 0 && n < 1000; n++) {
        char kept[720];
        snprintf(kept, sizeof kept, "%s.%d", path, n);
        if (access(kept, F_OK) != 0 && rename(path, kept) == 0) break;
    }
    XDC_CHECK(orch_steplog_open(path, &w->tele.steps, diag));
    if (w->cfg->metrics_port < 0) return XDC_OK;
    /* Worker k serves metrics_port + k: the whole range must be ports, or the last workers would bind
     * wrapped or invalid numbers. */
    if (w->cfg->metrics_port > 0 && (int64_t)w->cfg->metrics_port + w->id->gsize - 1 > 65535) {
        xdc_diag_set(diag, "%s: metrics_port %d: its %d workers would serve ports %d..%lld, beyond 65535", w->cfg->path,
                     w->cfg->metrics_port, w->id->gsize, w->cfg->metrics_port,
                     (long long)w->cfg->metrics_port + w->id->gsize - 1);
        return XDC_ERR_CONFIG;
    }
    char rank[16];
    snprintf(rank, sizeof rank, "%d", w->id->lrank);
    const char *names[3] = {"region", "host", "rank"}, *values[3] = {w->id->region, w->id->node, rank};
    XDC_CHECK(orch_metrics_create(names, values, 3, &w->tele.metrics, diag));
    XDC_CHECK(orch_metrics_register_std(w->tele.metrics, &w->tele.m, diag));
    orch_observe *o = w->tele.series = xdc_calloc(1, sizeof *o);
    if (!o) return XDC_ERR_NOMEM;
    o->step_total = series(w->tele.m.step_total, NULL, diag);
    o->step_seconds = series(w->tele.m.step_seconds, NULL, diag);
    o->compute = series(w->tele.m.compute_seconds, NULL, diag);
    o->intra = series(w->tele.m.intra_seconds, NULL, diag);
    o->wan_exposed = series(w->tele.m.wan_exposed_seconds, NULL, diag);
    o->loss = series(w->tele.m.loss, NULL, diag);
    o->tokens = series(w->tele.m.tokens_total, NULL, diag);
    for (int r = 0; r < w->id->n_regions && w->id->n_regions > 1 && !w->id->span; r++)
        o->slowdown[r] = series(w->tele.m.region_slowdown, w->topo->regions[r].name, diag);
    for (int r = 0; r < w->id->n_regions && orch_member_peers(w->member); r++) {
        if (!orch_member_peers(w->member)[r]) continue;
        const char *peer = w->topo->regions[r].name;
        o->tx[r] = series(w->tele.m.wan_tx_bytes, peer, diag);
        o->raw[r] = series(w->tele.m.wan_raw_bytes, peer, diag);
        o->rtt[r] = series(w->tele.m.wan_rtt, peer, diag);
        o->goodput[r] = series(w->tele.m.wan_goodput, peer, diag);
        o->reconnects[r] = series(w->tele.m.wan_reconnects, peer, diag);
        o->retransmits[r] = series(w->tele.m.wan_retransmits, peer, diag);
    }
    int port = w->cfg->metrics_port ? w->cfg->metrics_port + w->id->grank : 0; /* regions may share a host */
    const char *adv = getenv("XDC_ADVERTISE_HOST");
    XDC_CHECK(orch_metrics_server_start(w->tele.metrics, w->cfg->metrics_bind, port, &w->tele.srv, diag));
    char val[300];
    snprintf(val, sizeof val, "%s:%d", adv && *adv ? adv : w->id->node, orch_metrics_server_port(w->tele.srv));
    XDC_INFO(XDC_SUB_ORCH, "metrics on http://%s/metrics", val);
    return rdzv_set(orch_member_rdzv(w->member), rdzv_key_metrics(w->id->region, w->id->lrank).s, val, diag);
}

void orch_observe_step(orch_worker *w, double step_s, double compute_s, double intra_s, double wan_s, float loss)
{
    if (!w->tele.metrics) return;
    orch_observe *o = w->tele.series;
    orch_metrics_add(o->step_total, 1);
    orch_metrics_observe(o->step_seconds, step_s);
    orch_metrics_add(o->compute, compute_s);
    orch_metrics_add(o->intra, intra_s);
    orch_metrics_add(o->wan_exposed, wan_s);
    orch_metrics_set(o->loss, loss);
    orch_metrics_add(o->tokens, (double)w->model.B * w->model.T * w->model.M);
    for (int r = 0; r < w->id->n_regions; r++)
        if (o->slowdown[r]) orch_metrics_set(o->slowdown[r], w->prog.slowdown[r]);
    for (int r = 0; r < w->id->n_regions && orch_member_peers(w->member); r++) {
        if (!orch_member_peers(w->member)[r]) continue;
        xdc_wan_stats st;
        xdc_wan_peer_stats(orch_member_peers(w->member)[r], &st);
        add_increase(o->tx[r], st.tx_payload_bytes, &o->last_tx[r]);
        add_increase(o->raw[r], st.tx_raw_bytes, &o->last_raw[r]);
        add_increase(o->reconnects[r], st.reconnects, &o->last_reconnects[r]);
        add_increase(o->retransmits[r], st.retransmit_frames, &o->last_retransmits[r]);
        orch_metrics_set(o->rtt[r], st.rtt_ms / 1e3);
        orch_metrics_set(o->goodput[r], st.goodput_gbps * 1e9);
    }
}

void orch_observe_finish(orch_worker *w)
{
    xdc_diag d = {{0}};
    if (orch_steplog_close(w->tele.steps, &d) != XDC_OK) XDC_WARN(XDC_SUB_ORCH, "%s", d.msg);
    w->tele.steps = NULL;
    if (!w->tele.metrics) return;
    /* Destroying the registry before the worker's other teardown keeps the server from reading freed series. */
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/metrics", w->id->run_dir);
    if (orch_mkdirs(dir, 0755, &d) != XDC_OK) XDC_WARN(XDC_SUB_ORCH, "metrics snapshot not written: %s", d.msg);
    snprintf(path, sizeof path, "%s/%s-%d.prom", dir, w->id->region, w->id->lrank);
    char *text = NULL;
    size_t len = 0;
    if (orch_metrics_render(w->tele.metrics, &text, &len) == XDC_OK) {
        FILE *f = fopen(path, "w");
        if (f) {
            fwrite(text, 1, len, f);
            fclose(f);
        }
    }
    xdc_free(text);
    orch_metrics_server_stop(w->tele.srv);
    w->tele.srv = NULL;
    orch_metrics_destroy(w->tele.metrics);
    w->tele.metrics = NULL;
    xdc_free(w->tele.series);
    w->tele.series = NULL;
}
