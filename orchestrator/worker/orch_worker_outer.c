/* orch_worker_outer.c — the worker's side of the outer round (orchestrator/member/orch_outer.h): the outer
 * state over the stage's parameters on its compute stream, and the hooks the worker plugs into every round
 * of its modes: elastic rounds (its arrival and the store host's decision through
 * orchestrator/elastic/orch_elastic_member.h, regions lost during an exchange), the exposed-WAN accounting,
 * and rejoining regions once a round is applied. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "model/xdc_ckpt.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <signal.h>

static double now_s(void) { return (double)xdc_now_ns() / 1e9; }

void orch_sync_device_cfg(orch_worker *w, xdc_sync_cfg *sc)
{
    sc->backend = w->model.be;
    sc->compute = xdc_gpt_stage_stream(w->model.st); /* the buffers are written and read there */
}

/* A region out of this round (it left) or taken back at it ('j') is gone for every sync of the worker, not only
 * for this round's: a sync with no round since the region left (streaming: a fragment's sync has one round every
 * H steps; DiLoCo: a region that died after its last round's exchange and is taken back at the next, in whose
 * exchange it takes part) may still hold a send of its last round to it, pending on the peer of a process that is
 * gone, which a rejoin's hand-over destroys (orch_rejoin_give: "the peer was closed locally"). Told, the sync
 * drops that send once the region is a member again (xdc_sync_set_members) instead of failing its next round on
 * it. */
static void tell_out(orch_worker *w)
{
    const orch_elastic_member *m = &w->elastic.m;
    xdc_sync *syncs[ORCH_MAX_SYNCS];
    int n = orch_worker_syncs(w, syncs, ORCH_MAX_SYNCS);
    for (int r = 0; r < w->id->n_regions; r++)
        for (int i = 0; i < n && (!m->live[r] || m->joining[r]); i++) xdc_sync_lose(syncs[i], r);
}

xdc_err_t orch_elastic_quorum(orch_worker *w, xdc_sync *sync, int64_t step, xdc_diag *diag)
{
    if (!w->elastic.on) return XDC_OK;
    const orch_elastic_member *m = &w->elastic.m;
    /* A joiner in the exchange of the round that took it back read that round's decision when it asked. */
    if (!(m->joins_in_round && w->elastic.take && w->elastic.rejoin_round == step)) {
        XDC_CHECK(orch_rejoin_arrive(w, diag)); /* a joiner still catching up says so in its arrival */
        XDC_CHECK(orch_elastic_report_links(w, (long long)step, diag));
        XDC_CHECK(orch_elastic_agree(w, (long long)step, diag));
    }
    if (w->elastic.weigh) w->elastic.weigh(w); /* the decision's counts: nobody waits, train while waiting */
    tell_out(w);
    /* The regions this round takes back connect now and take part in its exchange: their peers replace the dead
     * processes' before the sync is given its members (orch_rejoin_give; one that never came is left out). */
    if (m->joins_in_round) XDC_CHECK(orch_rejoin_give(w, w->elastic.outer));
    float weight[XDC_TOPO_MAX_REGIONS];
    for (int r = 0; r < w->id->n_regions; r++) {
        int early = orch_elastic_took_early(m, r); /* its inner steps from its snapshot are the round's */
        weight[r] = !m->live[r] || m->catching_up[r] ? 0.0f
                    : w->elastic.weight              ? w->elastic.weight[r]
                                                     : orch_region_weight(w, r);
        if ((m->catching_up[r] || early) && w->id->lrank == 0)
            XDC_INFO(XDC_SUB_ORCH, "round %lld: %s %s", (long long)step, w->topo->regions[r].name,
                     early                 ? "taken back at this round, in its exchange with the inner steps it ran "
                                             "from its snapshot"
                     : m->quorum[r] == 'j' ? "taken back at this round, in its exchange with weight 0"
                     : m->quorum[r] == 't' ? "still taking its state, weight 0"
                                           : "took its state, weight 0 a last time; a member from the next round");
    }
    XDC_CHECK(xdc_sync_set_members(sync, m->live, weight, diag));
    return orch_elastic_routes(w, sync, (long long)step, diag);
}

void orch_elastic_open(orch_worker *w, xdc_sync *sync, int64_t step)
{
    if (!w->elastic.on) return;
    w->elastic.open = sync;
    orch_elastic_opened(&w->elastic.m, (long long)step);
    /* test hook (orch_rejoin.c's list): a region stopped inside an exchange its members cannot end without it */
    if (step >= 20 && !w->elastic.rejoin && orch_rejoin_test_fault(w, "stall")) raise(SIGSTOP);
}

/* The exchange of an elastic round, open on `sync` since orch_elastic_open: wait for it as orch_elastic_wait does
 * (training meanwhile where the round keeps the progress made while it was on the wire: a streaming fragment's,
 * orch_quorum_trains_in_exchange; a round at once sets local = global' after it); after it, settle the round on
 * its final set, summing again over it unless it is the set the round began with (then every bucket of every
 * member used it). */
static xdc_err_t elastic_exchange(orch_worker *w, xdc_sync *sync, long long step, xdc_diag *diag)
{
    uint8_t got[XDC_TOPO_MAX_REGIONS], final[XDC_TOPO_MAX_REGIONS];
    int resum;
    /* not a joiner whose state is still on its way: it runs no inner step until it took it (orch_rejoin.c) */
    int train = orch_quorum_trains_in_exchange(w->cfg) && w->elastic.outer &&
                w->elastic.outer->overlap == ORCH_OUTER_DELAYED && !w->elastic.take;
    long long ran0 = w->elastic.waiting_run;
    double t0 = now_s(), s0 = w->elastic.waiting_s;
    xdc_err_t rc = orch_elastic_wait(w, sync, train, diag);
    if (w->elastic.waiting_run > ran0) {
        long long ran = w->elastic.waiting_run - ran0;
        w->elastic.exchange_run += ran;
        w->elastic.exchange_s += w->elastic.waiting_s - s0;
        /* bench/chaos reads the steps run in a round's waits from this line as from the decider's */
        XDC_INFO(XDC_SUB_ORCH,
                 "the outer round at step %lld: its exchange waited %.2f s: inner steps run while it waited: %s %lld",
                 step, now_s() - t0, w->id->region, ran);
    }
    w->elastic.open = NULL;
    orch_elastic_links(w, step);
    XDC_CHECK(rc);
    xdc_sync_received(sync, got);
    XDC_CHECK(orch_elastic_settle(&w->elastic.m, step, got, final, &resum, diag));
    return resum ? xdc_sync_resum(sync, final, diag) : XDC_OK;
}

xdc_err_t orch_elastic_end(orch_worker *w, xdc_sync *sync, int64_t step, xdc_diag *diag)
{
    double t0 = now_s();
    xdc_err_t rc = w->elastic.on ? elastic_exchange(w, sync, (long long)step, diag) : xdc_sync_end(sync, diag);
    w->prog.t_wan_exposed += now_s() - t0;
    return rc;
}

/* The outer rounds' hooks (orch_outer_hooks, ctx: the worker): the worker's elastic rounds. */
static xdc_err_t hook_quorum(void *ctx, xdc_sync *sync, int64_t step, xdc_diag *diag)
{
    return orch_elastic_quorum(ctx, sync, step, diag);
}
static void hook_opened(void *ctx, xdc_sync *sync, int64_t step) { orch_elastic_open(ctx, sync, step); }
static xdc_err_t hook_end(void *ctx, xdc_sync *sync, int64_t step, xdc_diag *diag)
{
    return orch_elastic_end(ctx, sync, step, diag);
}

xdc_err_t orch_replicas_sync(orch_worker *w, xdc_sync_cfg *sc, xdc_sync **out, xdc_diag *diag)
{
    *out = NULL;
    orch_worker_sync_cfg(w, 0, sc);
    orch_sync_device_cfg(w, sc);
    return sc->dp ? xdc_sync_create(orch_member_sync_engine(w->member), sc, out, diag) : XDC_OK;
}

xdc_err_t orch_outer_setup(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag)
{
    o->local = xdc_gpt_stage_params(w->model.st);
    o->n = w->model.n_params;
    o->stream = xdc_gpt_stage_stream(w->model.st);
    o->hooks = (orch_outer_hooks){.ctx = w, .quorum = hook_quorum, .opened = hook_opened, .end = hook_end};
    orch_elastic_setup(w);
    w->elastic.outer = o;
    xdc_sync_cfg sc;
    orch_worker_sync_cfg(w, 1, &sc);
    sc.dp = dp;
    sc.name = "pseudo-gradients";
    XDC_CHECK(orch_outer_open(w->member, o, &sc, diag));
    return orch_region_weights(w, o->sync, diag);
}

xdc_err_t orch_worker_outer_apply(orch_worker *w, orch_outer *o, xdc_sync *sync, size_t lo, size_t hi, xdc_diag *diag)
{
    int64_t step = o->begun_at;
    XDC_CHECK(orch_outer_apply(o, sync, lo, hi, diag));
    orch_rejoin_member(w, step); /* before the catch-up: its last round, with weight 0, is not the first back */
    XDC_CHECK(orch_rejoin_catch_up(w, o, lo, hi, diag));
    XDC_CHECK(orch_warm_round(w, o, step, lo, hi)); /* before the give: a donor sends this round's mean too */
    return orch_rejoin_give(w, o);
}

xdc_err_t orch_worker_outer_round(orch_worker *w, orch_outer *o, xdc_diag *diag)
{
    XDC_CHECK(orch_outer_begin(o, o->sync, 0, o->n, w->prog.step, ORCH_OUTER_AT_ONCE, diag));
    return orch_worker_outer_apply(w, o, o->sync, 0, o->n, diag);
}

/* Who takes part in round `round` (a step, or RDZV_ROUND_END; orchestrator/elastic/orch_quorum.h): the store
 * host's decision (orch_elastic_arrive). The run's first rank says when the number of regions changes. */
xdc_err_t orch_elastic_agree(orch_worker *w, long long round, xdc_diag *diag)
{
    orch_elastic_member *m = &w->elastic.m;
    int before = m->n_live;
    XDC_CHECK(orch_elastic_arrive(m, round, diag));
    if (m->n_live != before && w->id->grank == 0) {
        printf("step %5lld  round %s with %d of %d regions (quorum %s)\n", (long long)w->prog.step,
               rdzv_val_round(round).s, m->n_live, w->id->n_regions, m->quorum);
        fflush(stdout);
    }
    return XDC_OK;
}

xdc_err_t orch_outer_checkpoint_io(orch_outer *o, const char *dir, int save, xdc_diag *diag)
{
    const orch_outer_part part[2] = {ORCH_OUTER_GLOBAL, ORCH_OUTER_MOMENTUM};
    const char *name[2] = {"outer-global.ckpt", "outer-momentum.ckpt"};
    size_t bytes = o->n * sizeof(float);
    for (int i = 0; i < 2; i++) { /* through the pinned staging, one buffer after the other */
        if (save) {
            XDC_CHECK(orch_outer_get(o, part[i], o->host));
            XDC_CHECK(xdc_ckpt_blob_save(dir, name[i], o->host, bytes, diag));
        } else {
            XDC_CHECK(xdc_ckpt_blob_load(dir, name[i], o->host, bytes, diag));
            XDC_CHECK(orch_outer_set(o, part[i], o->host));
        }
    }
    return XDC_OK;
}
