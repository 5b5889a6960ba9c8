/* topo_sim.c — discrete-event simulator of one plan (xdc_plan.h). Entities: every pipeline stage of
 * every replica (a 1F1B op sequence, as orchestrator/orch_train.c runs it), one FIFO per directed WAN
 * link (bandwidth + one-way delay), and per data-parallel group the comm engine's two-stage bucket
 * pipeline (orchestrator/xdc_sync.c: A = reduce-scatter + encode + send, B = wait + decode +
 * all-gather), with a second engine for streaming fragments. One binary-heap event queue; no threads.
 * Operation durations come from the same cost functions as the planner (topo_plan_cost.c). */
#include "scheduler/sched_priv.h"

#include "common/xdc_alloc.h"

#include <math.h>
#include <string.h>

enum { EV_OP_DONE, EV_ACT, EV_GRAD, EV_ENGINE_DONE, EV_BUCKET, EV_WAKE };

/* Where a stage's input for one microbatch (activation or its gradient) is: not sent yet; sent by an
 * in-region neighbour, waiting for this stage to post its receive; moving; here. */
enum { IN_NONE = 0, IN_SENT, IN_MOVING, IN_HERE };

typedef struct event {
    double t;
    unsigned long long seq; /* ties resolve in push order: the run is deterministic */
    int type, a, b, c;
} event;

typedef struct inst {
    int region, stage, warm, queued;
    int next_op, busy;
    double op_dur, busy_s;
    unsigned char *fwd_ready, *bwd_ready; /* (M) input states, IN_* */
} inst;

typedef struct sync_round {
    double params; /* elements */
    int n_regions; /* regions exchanging (1: intra only) */
    topo_codec_info ci;
} sync_round;

typedef struct engine {
    int region, stage, ranks, lanes, group; /* lanes: the WAN lanes of the plan (xdc_plan_lanes) */
    sync_round rounds[2];
    int started, n_rounds, cur, j, busy, k; /* current round, ops done in it, buckets in the round */
    /* The thread's order (sync/sync_engine.c run_round): A of bucket `next_a` once it is ready, B of `fin`
     * (the oldest in flight) after it — with in-region replicas once the bucket after `fin` was sent, without
     * them early only when `fin`'s shards are in while `next_a` is not ready, else after the last A. */
    int next_a, fin;
    int waking;             /* a wake-up for a bucket's readiness is queued */
    double ready0, overlap; /* round 0's buckets are handed over from ready0 during `overlap` seconds */
    double bucket_elems, tail_elems;
    topo_bucket_cost full, tail; /* the first bucket of a round is the short tail of the arena */
    int *arrived[2];             /* (cap) per round and bucket: shards received from the other regions */
    int cap;
    double end;
} engine;

typedef struct sim {
    const xdc_topology *t;
    const xdc_model_shape *m;
    const xdc_plan *p;
    const xdc_plan_calib *c;
    event *heap;
    long long n_heap, cap_heap;
    unsigned long long seq;
    long long events;
    inst *in; /* (n_inst) replica-major: inst q*P + s */
    int n_inst, M, P;
    engine *eng;               /* (n_groups * 2): [2g] gradient engine, [2g+1] streaming fragments */
    int n_groups, *group_left; /* (n_groups) replicas of the group still in the pipeline */
    int *group_of;             /* (n_inst) */
    int *region_group0;        /* (n_regions) first group of a region (data parallel), -1 idle */
    double *link_free;         /* (n_regions^2) */
    int *route;                /* (n_regions^2) xdc_topology_routes over the data-parallel regions; NULL: none */
    int *reach;                /* (n_regions^2) per source, the other data-parallel regions by hops, then index */
    double now, wan_bytes, pipe_end;
    /* (n_regions) per region: when its step began, its pipeline phase ended, and its step ended (pipeline and
     * engines). Regions keep one clock but for DiLoCo's nobody waits, whose inner steps are each region's own. */
    double *reg_t0, *reg_pipe, *reg_end;
    unsigned char *computes;        /* (n_regions) the region runs an inner step in the step under way */
    int cores_free;                 /* host_cores mode: idle cores; -1 unlimited */
    int *core_queue, q_head, q_len; /* (n_inst) ring of stages waiting for a core, FIFO */
    xdc_err_t err;
} sim;

/* ---- event queue ----------------------------------------------------------------------------------- */

static int ev_less(const event *x, const event *y) { return x->t < y->t || (x->t == y->t && x->seq < y->seq); }

static void push(sim *s, double t, int type, int a, int b, int c)
{
    if (s->n_heap == s->cap_heap) {
        long long cap = s->cap_heap ? 2 * s->cap_heap : 4096;
        event *h = xdc_realloc(s->heap, (size_t)cap * sizeof *h);
        if (!h) {
            s->err = XDC_ERR_NOMEM;
            return;
        }
        s->heap = h;
        s->cap_heap = cap;
    }
    long long i = s->n_heap++;
    event e = {t, s->seq++, type, a, b, c};
    while (i > 0 && ev_less(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
}

static event pop(sim *s)
{
    event top = s->heap[0], last = s->heap[--s->n_heap];
    long long i = 0, n = s->n_heap;
    for (;;) {
        long long l = 2 * i + 1, m = i;
        const event *best = &last;
        if (l < n && ev_less(&s->heap[l], best)) m = l, best = &s->heap[l];
        if (l + 1 < n && ev_less(&s->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

/* ---- transfers --------------------------------------------------------------------------------------- */

/* Time at which `wire` bytes sent at `at` from region a arrive in region b: FIFO on the directed link. */
static double wan_send_at(sim *s, int a, int b, double wire, double at)
{
    double bw = topo_link_Bps(s->t, a, b, s->c);
    double *free_at = &s->link_free[a * s->t->n_regions + b];
    double start = at > *free_at ? at : *free_at;
    *free_at = start + wire / (bw > 0 ? bw : 1);
    s->wan_bytes += wire;
    return *free_at + topo_link_owd(s->t, a, b) + TOPO_PLAN_MSG_OVERHEAD_S;
}

static double wan_send(sim *s, int a, int b, double wire) { return wan_send_at(s, a, b, wire, s->now); }

/* Arrivals (at, n_regions) of a shard region a sends now to every data-parallel region, along the routes: a
 * linked region gets it over its link, the others from the relay before them once it came in there, nearer
 * regions first; each link it crosses counted (wan_bytes) and queued (FIFO) as a direct send is. */
static void route_send(sim *s, int a, double wire, double *at)
{
    int R = s->t->n_regions;
    at[a] = s->now;
    for (int i = 0; i < R && s->reach[a * R + i] >= 0; i++) {
        int d = s->reach[a * R + i], from = s->route[a * R + d];
        at[d] = wan_send_at(s, from, d, wire, at[from]);
    }
}

static double boundary_bytes(const sim *s)
{
    return (double)s->p->micro_batch * s->p->seq_len * s->m->boundary_bytes_per_token;
}

/* Arrival of a boundary tensor sent now from region `from` over the WAN to region `to` (the receiving
 * stage posted its WAN receives when the step began). */
static double wan_boundary_arrival(sim *s, int from, int to)
{
    double act = boundary_bytes(s);
    topo_codec_info ci;
    topo_act_codec_get(s->p->codec, s->m, (double)s->p->micro_batch * s->p->seq_len, &ci);
    return wan_send(s, from, to, act * ci.ratio) + act / ci.enc_Bps + act / ci.dec_Bps;
}

/* ---- pipeline stages --------------------------------------------------------------------------------- */

/* The k-th op of a 1F1B sequence with `warm` forwards first: returns the microbatch, *fwd = 1 for F. */
static int op_at(int k, int warm, int M, int *fwd)
{
    if (k < warm) return *fwd = 1, k;
    if (k < warm + 2 * (M - warm)) {
        int j = (k - warm) / 2;
        *fwd = (k - warm) % 2 == 0;
        return *fwd ? warm + j : j;
    }
    *fwd = 0;
    return k - M;
}

static void engine_try(sim *s, int e);
static void engine_start(sim *s, int e, int first, int n_rounds, double overlap);

/* Sync with delayed averaging: a step's round starts with the next step, its buckets all final, and
 * overlaps that step's pipeline pass; step 0 has no round (the run's last one, after the last step, is
 * not simulated). */
static int delayed(const sim *s) { return s->p->mode == XDC_PLAN_SYNC && s->p->delay_steps > 0; }

static void inst_try(sim *s, int i)
{
    inst *x = &s->in[i];
    if (x->busy || x->next_op == 2 * s->M) return;
    int fwd, mb = op_at(x->next_op, x->warm, s->M, &fwd);
    unsigned char *in = fwd ? (x->stage > 0 ? &x->fwd_ready[mb] : NULL)
                            : (x->stage < s->P - 1 ? &x->bwd_ready[mb] : NULL);
    if (in && *in == IN_SENT) {
        /* The runtime posts a stage's receive from an in-region neighbour only once the op before has ended
         * (orch_train.c groups "backward + receive the next input", as Megatron's 1F1B does), so the
         * transfer starts now, however early the neighbour sent. */
        *in = IN_MOVING;
        push(s, s->now + topo_intra_p2p_s(s->t, x->region, boundary_bytes(s), s->c), fwd ? EV_ACT : EV_GRAD, i, mb, 0);
    }
    if (in && *in != IN_HERE) return;
    if (s->cores_free == 0) { /* every shared core is busy: wait in line */
        if (!x->queued) s->core_queue[(s->q_head + s->q_len++) % s->n_inst] = i;
        x->queued = 1;
        return;
    }
    if (s->cores_free > 0) s->cores_free--;
    const xdc_plan_stage *st = &s->p->stage[x->stage];
    double t = topo_stage_compute_s(s->t, x->region, x->stage, st->flops_mb, (double)s->p->micro_batch * s->p->seq_len,
                                    s->c) /
               3;
    x->op_dur = fwd ? t : 2 * t;
    x->busy = 1;
    push(s, s->now + x->op_dur, EV_OP_DONE, i, mb, fwd);
    /* The last backward hands its gradients to the comm engine layer by layer (orch_train.c): the
     * group's sync starts once every replica of the stage is in it. */
    int g = s->group_of[i];
    if (x->next_op == 2 * s->M - 1 && --s->group_left[g] == 0 && !delayed(s))
        engine_start(s, 2 * g, 0, s->eng[2 * g].n_rounds, x->op_dur);
}

/* Start engine e now at round `first` (1: a region without an inner step this step joins the outer round
 * alone); the gradients of round 0 appear over the next `overlap` seconds. */
static void engine_start(sim *s, int e, int first, int n_rounds, double overlap)
{
    engine *g = &s->eng[e];
    g->n_rounds = n_rounds;
    g->started = 1;
    g->ready0 = s->now;
    g->overlap = overlap;
    g->j = g->busy = g->next_a = g->fin = 0;
    g->cur = first;
    g->end = s->now;
    engine_try(s, e);
}

static void inst_done(sim *s, const event *ev)
{
    inst *x = &s->in[ev->a];
    x->busy = 0;
    x->busy_s += x->op_dur;
    x->next_op++;
    int q = ev->a / s->P, to = -1;
    if (ev->c && x->stage < s->P - 1) to = q * s->P + x->stage + 1;
    else if (!ev->c && x->stage > 0) to = q * s->P + x->stage - 1;
    if (to >= 0 && s->in[to].region != x->region) {
        push(s, wan_boundary_arrival(s, x->region, s->in[to].region), ev->c ? EV_ACT : EV_GRAD, to, ev->b, 0);
    } else if (to >= 0) {
        (ev->c ? s->in[to].fwd_ready : s->in[to].bwd_ready)[ev->b] = IN_SENT;
        inst_try(s, to);
    }
    if (x->next_op == 2 * s->M && s->now > s->pipe_end) s->pipe_end = s->now;
    if (x->next_op == 2 * s->M) s->reg_pipe[x->region] = fmax(s->reg_pipe[x->region], s->now);
    if (s->cores_free >= 0) {
        s->cores_free++;
        while (s->cores_free > 0 && s->q_len > 0) { /* hand the core to the longest waiter */
            int w = s->core_queue[s->q_head];
            s->q_head = (s->q_head + 1) % s->n_inst;
            s->q_len--;
            s->in[w].queued = 0;
            inst_try(s, w);
        }
    }
    inst_try(s, ev->a);
}

/* ---- comm engines ------------------------------------------------------------------------------------ */

static void engine_round_setup(sim *s, engine *g)
{
    const sync_round *r = &g->rounds[g->cur];
    g->k = topo_plan_n_buckets(r->params, g->bucket_elems);
    if (g->k > g->cap) g->k = g->cap; /* buckets past the cap are merged into the last one */
    double tail = r->params - (g->k - 1) * g->bucket_elems;
    g->tail_elems = tail;
    topo_bucket_cost_get(s->t, g->region, g->ranks, g->lanes, r->n_regions, g->k > 1 ? g->bucket_elems : r->params,
                         &r->ci, &g->full);
    topo_bucket_cost_get(s->t, g->region, g->ranks, g->lanes, r->n_regions, tail, &r->ci, &g->tail);
}

/* Has every other region's shard of `bucket` of the current round come in? */
static int shards_in(const engine *g, int bucket)
{
    const sync_round *r = &g->rounds[g->cur];
    return r->n_regions < 2 || g->arrived[g->cur][bucket] >= r->n_regions - 1;
}

/* Start A (a = 1) or B of `bucket` now; B first waits for every other region's shard of it. */
static void engine_op(sim *s, int e, int bucket, int a)
{
    engine *g = &s->eng[e];
    if (!a && !shards_in(g, bucket)) return;
    const topo_bucket_cost *c = bucket == 0 ? &g->tail : &g->full;
    g->busy = 1;
    push(s, s->now + (a ? c->t_a : c->t_b), EV_ENGINE_DONE, e, bucket, a);
}

static void engine_try(sim *s, int e)
{
    engine *g = &s->eng[e];
    if (!g->started || g->busy || g->cur >= g->n_rounds) return;
    if (g->j == 0) engine_round_setup(s, g);
    const sync_round *r = &g->rounds[g->cur];
    int in_flight = g->fin < g->next_a;
    if (in_flight && (g->next_a == g->k || (g->ranks > 1 && g->fin < g->next_a - 1))) {
        engine_op(s, e, g->fin, 0);
        return;
    }
    if (g->cur == 0 && g->overlap > 0) {
        /* Buckets go from the top of the arena (the short one first) to offset 0, as backward frees them. */
        double above = g->tail_elems + (double)g->next_a * g->bucket_elems;
        double ready = g->ready0 + g->overlap * (g->k == 1 || above >= r->params ? 1.0 : above / r->params);
        if (ready > s->now) {
            if (in_flight && g->ranks == 1 && shards_in(g, g->fin)) {
                engine_op(s, e, g->fin, 0);
                return;
            }
            if (!g->waking) push(s, ready, EV_WAKE, e, 0, 0);
            g->waking = 1;
            return;
        }
    }
    engine_op(s, e, g->next_a, 1);
}

static void engine_done(sim *s, const event *ev)
{
    engine *g = &s->eng[ev->a];
    g->busy = 0;
    const sync_round *r = &g->rounds[g->cur];
    if (ev->c && r->n_regions > 1) {
        const topo_bucket_cost *c = ev->b == 0 ? &g->tail : &g->full;
        int slot = ev->a % 2;
        double at[XDC_TOPO_MAX_REGIONS];
        route_send(s, g->region, c->wire * g->lanes, at);
        for (int q = 0; q < s->t->n_regions; q++) {
            if (q == g->region || s->region_group0[q] < 0) continue;
            int peer = 2 * (s->region_group0[q] + g->stage) + slot;
            push(s, at[q], EV_BUCKET, peer, ev->b, g->cur);
        }
    }
    if (ev->c) g->next_a++;
    else g->fin++;
    if (++g->j == 2 * g->k) {
        g->j = g->next_a = g->fin = 0;
        g->cur++;
        g->end = s->now;
        s->reg_end[g->region] = fmax(s->reg_end[g->region], s->now);
    }
    engine_try(s, ev->a);
}

/* ---- setup ------------------------------------------------------------------------------------------- */

static xdc_err_t build(sim *s)
{
    const xdc_plan *p = s->p;
    int R = s->t->n_regions, P = p->stages, reps = 0, pipeline = p->mode == XDC_PLAN_PIPELINE;
    for (int r = 0; r < R; r++) reps += p->replicas[r];
    if (pipeline) reps = p->replicas[p->stage[0].region];
    s->P = P;
    s->M = p->microbatches;
    s->n_inst = reps * P;
    s->n_groups = pipeline ? P : 0;
    s->region_group0 = xdc_malloc((size_t)R * sizeof *s->region_group0);
    s->link_free = xdc_calloc((size_t)R * R, sizeof *s->link_free);
    s->reg_t0 = xdc_calloc((size_t)R * 3, sizeof *s->reg_t0);
    s->computes = xdc_malloc((size_t)R);
    if (!s->region_group0 || !s->link_free || !s->reg_t0 || !s->computes) return XDC_ERR_NOMEM;
    s->reg_pipe = s->reg_t0 + R;
    s->reg_end = s->reg_pipe + R;
    unsigned char dp[XDC_TOPO_MAX_REGIONS];
    for (int r = 0; r < R; r++) {
        s->region_group0[r] = !pipeline && p->replicas[r] > 0 ? s->n_groups : -1;
        if (s->region_group0[r] >= 0) s->n_groups += P;
        dp[r] = s->region_group0[r] >= 0;
    }
    if (!pipeline) {
        s->route = xdc_malloc((size_t)R * R * sizeof *s->route);
        s->reach = xdc_malloc((size_t)R * R * sizeof *s->reach);
        if (!s->route || !s->reach) return XDC_ERR_NOMEM;
        XDC_CHECK(xdc_topology_routes(s->t, dp, s->route)); /* the plan's regions are connected: it was planned */
        for (int a = 0; a < R; a++) {
            int n = 0, hops[XDC_TOPO_MAX_REGIONS], most = 0;
            for (int d = 0; d < R; d++) {
                hops[d] = dp[a] && dp[d] ? xdc_topology_route_hops(s->t, s->route, a, d) : 0;
                if (hops[d] > most) most = hops[d];
            }
            for (int h = 1; h <= most; h++)
                for (int d = 0; d < R; d++)
                    if (hops[d] == h) s->reach[a * R + n++] = d;
            if (n < R) s->reach[a * R + n] = -1;
        }
    }
    s->in = xdc_calloc((size_t)s->n_inst, sizeof *s->in);
    s->group_of = xdc_malloc((size_t)s->n_inst * sizeof *s->group_of);
    s->group_left = xdc_calloc((size_t)s->n_groups, sizeof *s->group_left);
    s->eng = xdc_calloc((size_t)s->n_groups * 2, sizeof *s->eng);
    s->core_queue = xdc_malloc((size_t)s->n_inst * sizeof *s->core_queue);
    s->cores_free = s->c->host_cores > 0 ? s->c->host_cores : -1;
    unsigned char *flags = xdc_calloc((size_t)s->n_inst * 2, (size_t)s->M);
    if (!s->in || !s->group_of || !s->group_left || !s->eng || !s->core_queue || !flags) {
        xdc_free(flags);
        return XDC_ERR_NOMEM;
    }
    int q = 0;
    for (int r = 0; r < R && q < reps; r++) {
        int d_r = pipeline ? reps : p->replicas[r];
        for (int d = 0; d < d_r; d++, q++)
            for (int st = 0; st < P; st++) {
                inst *x = &s->in[q * P + st];
                x->stage = st;
                x->region = pipeline ? p->stage[st].region : r;
                int inflight = p->stage[st].inflight > 0 ? p->stage[st].inflight : P - st;
                x->warm = inflight - 1 < s->M ? inflight - 1 : s->M;
                x->fwd_ready = flags + ((size_t)(q * P + st) * 2) * s->M;
                x->bwd_ready = x->fwd_ready + s->M;
                s->group_of[q * P + st] = pipeline ? st : s->region_group0[r] + st;
            }
    }
    for (int g = 0; g < s->n_groups; g++)
        for (int slot = 0; slot < 2; slot++) {
            engine *e = &s->eng[2 * g + slot];
            e->group = g;
            e->stage = g;
            e->region = pipeline ? p->stage[g].region : 0;
            for (int r = 0; r < R; r++)
                if (!pipeline && s->region_group0[r] >= 0 && g >= s->region_group0[r] && g < s->region_group0[r] + P)
                    e->region = r, e->stage = g - s->region_group0[r];
            e->ranks = p->replicas[e->region];
            e->lanes = pipeline ? 1 : xdc_plan_lanes(s->t, p);
            e->bucket_elems = p->bucket_mb * 1048576.0 / 4;
            e->cap = 1 << 16;
            for (int k = 0; k < 2; k++)
                if (!(e->arrived[k] = xdc_calloc((size_t)e->cap, sizeof(int)))) return XDC_ERR_NOMEM;
        }
    return XDC_OK;
}

static void sim_free(sim *s)
{
    if (s->in) xdc_free(s->in[0].fwd_ready);
    for (int i = 0; s->eng && i < 2 * s->n_groups; i++) {
        xdc_free(s->eng[i].arrived[0]);
        xdc_free(s->eng[i].arrived[1]);
    }
    xdc_free(s->eng);
    xdc_free(s->in);
    xdc_free(s->group_of);
    xdc_free(s->group_left);
    xdc_free(s->core_queue);
    xdc_free(s->region_group0);
    xdc_free(s->link_free);
    xdc_free(s->reg_t0);
    xdc_free(s->computes);
    xdc_free(s->route);
    xdc_free(s->reach);
    xdc_free(s->heap);
}

static int active_regions(const sim *s)
{
    int n = 0;
    for (int r = 0; r < s->t->n_regions; r++) n += s->region_group0[r] >= 0;
    return n;
}

/* Rounds of step `i` (0-based) for group g's two engines. */
static void plan_rounds(sim *s, int i)
{
    const xdc_plan *p = s->p;
    int R = active_regions(s), H = p->inner_steps > 0 ? p->inner_steps : 1, F = p->fragments > 0 ? p->fragments : 1;
    int frag_now = 0;
    for (int f = 0; p->mode == XDC_PLAN_STREAMING && i > 0 && f < F; f++) frag_now |= i % H == f * H / F;
    /* An overlapped DiLoCo round (diloco.overlap_steps 1) leaves when the next step begins, as a fragment of the
     * whole parameters, and the step ends once it is in. */
    int overlap = p->mode == XDC_PLAN_DILOCO && p->overlap_steps > 0;
    if (overlap) frag_now = i > 0 && i % H == 0, F = 1;
    for (int g = 0; g < s->n_groups; g++) {
        engine *e = &s->eng[2 * g], *fr = &s->eng[2 * g + 1];
        const xdc_link *l = NULL;
        for (int q = 0; q < s->t->n_regions && !l; q++)
            if (q != e->region && s->region_group0[q] >= 0) l = xdc_topology_link(s->t, e->region, q);
        double gbps = l ? l->bandwidth_gbps : 100, params = p->stage[e->stage].params;
        sync_round inner = {params, p->mode == XDC_PLAN_SYNC ? R : 1, {0, 0, 0, 0}};
        topo_grad_codec_get(p->mode == XDC_PLAN_SYNC ? p->codec : "none", gbps, s->c, &inner.ci);
        e->rounds[0] = inner;
        e->n_rounds = 1;
        if (p->mode == XDC_PLAN_DILOCO && !overlap && (i + 1) % H == 0) {
            e->rounds[1] = (sync_round){params, R, {0, 0, 0, 0}};
            topo_grad_codec_get(p->codec, gbps, s->c, &e->rounds[1].ci);
            e->n_rounds = 2;
        }
        e->started = fr->started = e->waking = fr->waking = 0;
        fr->n_rounds = 0;
        fr->cur = 0;
        if (frag_now) {
            fr->rounds[0] = (sync_round){params / F, R, {0, 0, 0, 0}};
            topo_grad_codec_get(p->codec, gbps, s->c, &fr->rounds[0].ci);
        }
        for (int k = 0; k < 2; k++) {
            memset(e->arrived[k], 0, (size_t)e->cap * sizeof(int));
            memset(fr->arrived[k], 0, (size_t)fr->cap * sizeof(int));
        }
        s->now = s->reg_t0[e->region];
        if (frag_now) engine_start(s, 2 * g + 1, 0, 1, 0);
        if (delayed(s) && i == 0) e->n_rounds = 0;
        if (delayed(s) && i > 0) engine_start(s, 2 * g, 0, 1, 0);
        /* Nobody waits: a region past its inner steps of the round has no inner sync; at the round's last step
         * it joins the outer round from where its clock is (overlapped: when the next round's first step begins,
         * as the fragment above). */
        if (!s->computes[e->region]) {
            e->n_rounds = 0;
            if (p->mode == XDC_PLAN_DILOCO && !overlap && (i + 1) % H == 0) engine_start(s, 2 * g, 1, 2, 0);
        }
    }
}

xdc_err_t xdc_sim_run(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan *p, const xdc_plan_calib *c,
                      int steps, xdc_sim_result *out, xdc_diag *diag)
{
    memset(out, 0, sizeof *out);
    if (steps < 1 || p->stages < 1 || p->stages > XDC_PLAN_MAX_STAGES || p->microbatches < 1) {
        xdc_diag_set(diag, "simulate: need at least one step, 1..%d stages and a microbatch", XDC_PLAN_MAX_STAGES);
        return XDC_ERR_INVALID;
    }
    if (p->chunks > 1) { /* its events are non-interleaved 1F1B's; the planner's formula prices the rest */
        xdc_diag_set(diag, "simulate: pipeline_chunks %d (interleaved 1F1B) is not simulated; `xdc plan` prices it",
                     p->chunks);
        return XDC_ERR_INVALID;
    }
    xdc_plan_calib none = {.mfu = 0.4, .compute_scale = 1.0};
    sim s = {.t = t, .m = m, .p = p, .c = c ? c : &none};
    xdc_err_t rc = build(&s);
    double t0 = 0, busy_total = 0, busiest_total = 0, bubble_total = 0;
    int R = t->n_regions, H = p->inner_steps > 0 ? p->inner_steps : 1;
    for (int i = 0; i < steps && rc == XDC_OK; i++) {
        s.now = t0;
        s.pipe_end = t0;
        /* Nobody waits: region r runs round_steps[r] inner steps of each round, spread over it as the runtime
         * does (xdc_plan_round_runs), from its own clock. */
        for (int r = 0; r < R; r++) {
            if (!p->nobody_waits) s.reg_t0[r] = t0;
            s.reg_pipe[r] = s.reg_end[r] = s.reg_t0[r];
            s.computes[r] = !p->nobody_waits || xdc_plan_round_runs(p->round_steps[r], H, i % H);
        }
        for (int k = 0; k < s.n_inst; k++) {
            inst *x = &s.in[k];
            x->next_op = s.computes[x->region] ? 0 : 2 * s.M;
            x->busy = x->queued = 0;
            x->busy_s = 0;
            memset(x->fwd_ready, 0, 2 * (size_t)s.M);
        }
        for (int g = 0; g < s.n_groups; g++) s.group_left[g] = 0;
        for (int k = 0; k < s.n_inst; k++) s.group_left[s.group_of[k]]++;
        plan_rounds(&s, i);
        for (int k = 0; k < s.n_inst; k++) {
            s.now = s.reg_t0[s.in[k].region];
            inst_try(&s, k);
        }
        while (s.n_heap > 0 && !s.err) {
            event ev = pop(&s);
            s.now = ev.t;
            s.events++;
            switch (ev.type) {
            case EV_OP_DONE: inst_done(&s, &ev); break;
            case EV_ACT:
                s.in[ev.a].fwd_ready[ev.b] = IN_HERE;
                inst_try(&s, ev.a);
                break;
            case EV_GRAD:
                s.in[ev.a].bwd_ready[ev.b] = IN_HERE;
                inst_try(&s, ev.a);
                break;
            case EV_ENGINE_DONE: engine_done(&s, &ev); break;
            case EV_BUCKET:
                s.eng[ev.a].arrived[ev.c][ev.b]++;
                engine_try(&s, ev.a);
                break;
            case EV_WAKE:
                s.eng[ev.a].waking = 0;
                engine_try(&s, ev.a);
                break;
            }
        }
        rc = s.err;
        double end = s.pipe_end, busiest = 0;
        for (int g = 0; g < 2 * s.n_groups; g++) {
            if (rc == XDC_OK && s.eng[g].cur < s.eng[g].n_rounds) {
                xdc_diag_set(diag, "simulate: engine of group %d stalled (a bucket never arrived)", g / 2);
                rc = XDC_ERR_INTERNAL;
            }
            if (s.eng[g].n_rounds > 0 && s.eng[g].end > end) end = s.eng[g].end;
        }
        for (int k = 0; k < s.n_inst; k++) {
            busy_total += s.in[k].busy_s;
            if (s.in[k].busy_s > busiest) busiest = s.in[k].busy_s;
            if (s.in[k].next_op != 2 * s.M && rc == XDC_OK) {
                xdc_diag_set(diag, "simulate: stage %d stalled at op %d (schedule deadlock)", s.in[k].stage,
                             s.in[k].next_op);
                rc = XDC_ERR_INTERNAL;
            }
        }
        double closing = topo_step_allreduce_s(t, p, s.c), span = 0;
        if (p->nobody_waits) { /* each region on from its own end; the step's span the longest region's */
            end = 0;
            for (int r = 0; r < R; r++) {
                if (s.region_group0[r] < 0) continue;
                if (s.computes[r]) span = fmax(span, s.reg_pipe[r] - s.reg_t0[r]);
                s.reg_t0[r] = fmax(s.reg_pipe[r], s.reg_end[r]) + (s.computes[r] ? closing : 0);
                end = fmax(end, s.reg_t0[r]);
            }
            t0 = end;
        } else {
            span = s.pipe_end - t0;
            t0 = end + closing;
        }
        busiest_total += busiest;
        bubble_total += fmax(0, span - busiest);
    }
    if (rc == XDC_OK) {
        out->steps = steps;
        out->t_step = t0 / steps;
        out->t_compute = busiest_total / steps;
        out->t_bubble = bubble_total / steps;
        out->t_comm_exposed = fmax(0, out->t_step - out->t_compute - out->t_bubble); /* rounding */
        out->utilisation = t0 > 0 ? busy_total / (t0 * s.n_inst) : 0;
        out->wan_bytes = s.wan_bytes / steps;
        out->events = s.events;
        out->gpus = s.n_inst;
    }
    sim_free(&s);
    return rc;
}
