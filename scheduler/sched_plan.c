/* topo_plan.c — the planner's search: enumerate data-parallel structures (P stages per replica, W/P
 * replicas per region) with every cross-region sync setting (sync / diloco / streaming, codec, period,
 * bucket size), and pipelines that span a chain of regions with a speed-proportional, memory-bounded
 * layer partition; price each with the cost model (topo_plan_cost.c); pick the most faithful plan within
 * a tolerance of the fastest per token, and explain why the others lost. */
#include "scheduler/sched_priv.h"

#include "common/xdc_alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct search {
    const xdc_topology *t;
    const xdc_model_shape *m;
    const xdc_batch_shape *b;
    const xdc_plan_opts *o;
    double global_tokens;
    int mb;          /* sequences per microbatch of the structure being priced */
    xdc_plan *cands; /* (cap) */
    int n, cap;
    int n_eval, n_rej;
    double worst_fit; /* smallest memory need / memory available seen among rejections */
    double best_tpt;  /* fastest seconds per token so far */
    char reject[512];
    xdc_err_t err;
    xdc_plan all; /* the fastest data-parallel candidate with every region with workers (has_all) */
    int has_all;
    /* The data-parallel region set being priced (search_dp): its routes (xdc_topology_routes: the region each
     * region's shard comes from, relays where two regions have no direct link) and each directed link's load,
     * how many regions' shards cross it per bucket (n_regions^2 each). */
    int *route, *load;
} search;

#define MAX_CODECS 16 /* candidates of one ladder (topo_codec_ladder) */
static const int periods[] = {10, 25, 50, 100, 250, 500};
static const double bucket_mbs[] = {1, 4, 16, 64};

const char *xdc_plan_mode_name(xdc_plan_mode m)
{
    static const char *const names[] = {"sync", "diloco", "streaming", "pipeline"};
    return (unsigned)m < 4 ? names[m] : "?";
}

static int workers(const search *s, int r) { return xdc_topology_region_workers(s->t, r); }

static void reject_memory(search *s, double need, double have, const char *where)
{
    s->n_rej++;
    double fit = have / need;
    if (s->reject[0] && fit <= s->worst_fit) return;
    s->worst_fit = fit;
    snprintf(s->reject, sizeof s->reject, "%s needs %.2f GiB per GPU, only %.2f GiB usable", where, need, have);
}

static void add_cand(search *s, const xdc_plan *p)
{
    s->n_eval++;
    double tpt = p->t_step / p->tokens;
    int every = p->mode != XDC_PLAN_PIPELINE;
    for (int r = 0; r < s->t->n_regions && every; r++) every = !workers(s, r) || p->replicas[r] > 0;
    if (every && (!s->has_all || tpt < s->all.t_step / s->all.tokens)) {
        s->all = *p;
        s->has_all = 1;
    }
    /* Far slower than the best so far can neither win nor be a close runner-up: keep memory bounded. */
    if (s->n > 0 && tpt > 2 * s->best_tpt) return;
    if (s->n == 0 || tpt < s->best_tpt) s->best_tpt = tpt;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        xdc_plan *c = xdc_realloc(s->cands, (size_t)cap * sizeof *c);
        if (!c) {
            s->err = XDC_ERR_NOMEM;
            return;
        }
        s->cands = c;
        s->cap = cap;
    }
    s->cands[s->n++] = *p;
}

static int microbatches_for(const search *s, int replicas)
{
    if (s->o->microbatches > 0) return s->o->microbatches;
    double per_mb = (double)s->mb * s->b->seq_len * replicas;
    int m = (int)ceil(s->global_tokens / per_mb - 1e-9);
    return m < 1 ? 1 : m;
}

/* 1F1B over stages with per-microbatch compute c[s], boundary latency lat[s] (s -> s+1) and boundary
 * occupancy occ[s] (link time per microbatch per direction): fill + drain cross every stage and
 * boundary twice, and the steady state advances one microbatch per slowest stage cycle or link. A stage
 * posts its receive from an in-region neighbour (in_region[s]: boundary s -> s+1) only when its op before
 * ends (orch_train.c's 1F1B groups), so each such receive adds its latency to every steady-state cycle of
 * the stage; WAN receives are posted when the step begins. */
static double pipe_time(const double *c, const double *lat, const double *occ, const unsigned char *in_region, int P,
                        int M, int v, double *compute)
{
    double sum = 0, cmax = 0, period = 0;
    if (v > 1) {
        /* Interleaved 1F1B (v chunks per stage, inside a region): the fill and drain cross one chunk (c/v) of
         * every stage but the slowest, (P − 1)/(M·v) of the compute for equal stages, and each boundary's
         * latency once each way; each of a microbatch's v schedule steps waits for its group's transfers
         * (orch_train.c completes a step's group before the next compute). */
        double lsum = 0, lmax = 0, omax = 0;
        for (int i = 0; i < P; i++) {
            sum += c[i];
            cmax = fmax(cmax, c[i]);
            if (i + 1 < P) lsum += lat[i], lmax = fmax(lmax, lat[i]), omax = fmax(omax, occ[i]);
        }
        /* A link carries 2v − 1 of a microbatch's activations each way where the wrap-around shares it (2
         * stages: the cut forward v times, the wrap v − 1 times back); taken for the busiest link. */
        *compute = M * cmax;
        return M * fmax(cmax + v * lmax, (2 * v - 1) * omax) + (sum - cmax) / v + 2 * lsum;
    }
    for (int i = 0; i < P; i++) {
        sum += c[i];
        if (c[i] > cmax) cmax = c[i];
        double cycle = c[i] + (i > 0 && in_region[i - 1] ? lat[i - 1] : 0) + (i + 1 < P && in_region[i] ? lat[i] : 0);
        if (cycle > period) period = cycle;
        if (i + 1 < P) {
            sum += 2 * lat[i];
            if (occ[i] > period) period = occ[i];
        }
    }
    /* Upstream of a WAN cut the 1F1B slots, P - i when M exceeds them (what the runtime holds), bound the
     * period: a microbatch holds its slot for the round trip through the later stages and back, and
     * microbatch f + P - i waits for it. With M <= P - i every microbatch has a slot: no such wait. */
    for (int i = 0; i + 1 < P; i++) {
        if (M <= P - i) continue;
        int cut = 0;
        for (int j = i; j + 1 < P && !cut; j++) cut = !in_region[j];
        if (!cut) break;
        double trip = c[i];
        for (int j = i + 1; j < P; j++) trip += c[j] + 2 * lat[j - 1];
        if (trip / (P - i) > period) period = trip / (P - i);
    }
    *compute = M * cmax;
    return sum + (M - 1) * period;
}

static double tokens_mb(const search *s) { return (double)s->mb * s->b->seq_len; }

/* Emulated on one machine (calib.host_cores): every worker's compute shares the host's cores, so the
 * pipeline phase lasts at least the step's total compute over the cores; the wait counts as bubble. */
static void host_bound(const search *s, double total_compute, double *t_pipe, double *bubble)
{
    int cores = s->o->calib.host_cores;
    if (cores <= 0 || total_compute / cores <= *t_pipe) return;
    *bubble += total_compute / cores - *t_pipe;
    *t_pipe = total_compute / cores;
}

/* ---- layer partitions ----------------------------------------------------------------------------- */

/* One stage of a partition: the GPU speed and memory it runs on, the microbatches it keeps in flight. */
typedef struct chain_stage {
    int region;
    double flops, mem_limit;
    int inflight;
} chain_stage;

static double stage_time(const search *s, const chain_stage *cs, int lb, int le)
{
    return topo_stage_flops(s->m, lb, le, tokens_mb(s), s->b->seq_len) / cs->flops;
}

/* What a sync plan keeps per parameter beyond the weights and AdamW: delayed averaging's second gradient
 * arena (the stage's grad_buffers 2, orch_worker.c). */
static double sync_extra_bytes(const search *s) { return s->o->delay_steps ? TOPO_DELAY_BYTES_PER_PARAM : 0; }

static int stage_fits(const search *s, const chain_stage *cs, int lb, int le)
{
    return topo_stage_mem_gib(s->m, lb, le, cs->inflight, s->mb, s->b->seq_len, sync_extra_bytes(s)) <= cs->mem_limit;
}

/* Greedy fill under a time cap: each stage takes the most layers it can run within cap and hold in
 * memory, leaving at least one layer for each later stage. 1 when every layer found a stage. */
static int partition_under(const search *s, const chain_stage *cs, int P, double cap, int *lb)
{
    int L = s->m->layers, at = 0;
    for (int i = 0; i < P; i++) {
        lb[i] = at;
        int most = L - at - (P - i - 1), k = i == P - 1 ? most : 0;
        if (i < P - 1)
            while (k < most && stage_time(s, &cs[i], at, at + k + 1) <= cap && stage_fits(s, &cs[i], at, at + k + 1))
                k++;
        if (k < 1) return 0;
        if (stage_time(s, &cs[i], at, at + k) > cap || !stage_fits(s, &cs[i], at, at + k)) return 0;
        at += k;
    }
    lb[P] = L;
    return at == L;
}

/* Smallest bottleneck time over layer partitions (binary search on the cap); 0 when memory forbids. */
static int partition_layers(const search *s, const chain_stage *cs, int P, int *lb)
{
    double hi = 0;
    for (int i = 0; i < P; i++) hi = fmax(hi, stage_time(s, &cs[i], 0, s->m->layers));
    if (!partition_under(s, cs, P, hi * 1.0001, lb)) return 0;
    double lo = 0;
    for (int it = 0; it < 60; it++) {
        double mid = 0.5 * (lo + hi);
        if (partition_under(s, cs, P, mid, lb)) hi = mid;
        else lo = mid;
    }
    return partition_under(s, cs, P, hi, lb);
}

/* ---- data-parallel structures: every region runs whole replicas, regions sync gradients ---------- */

typedef struct dp_region {
    double t_pipe, compute, bubble;
    double link_Bps, owd; /* per stage group: share of the slowest incoming/outgoing link */
} dp_region;

/* The stages of a data-parallel replica: the partition with the smallest slowest stage on the slowest
 * region's GPUs within the smallest GPU's memory (the runtime runs one partition in every region), so the
 * stage holding the embeddings or the LM head gets fewer layers; the runtime's even split
 * (orch_stage_layers) when memory allows no balanced one (dp_fits then says why). */
/* The chunks a pipeline of P stages at M microbatches runs: opts.chunks where the interleaved schedule
 * applies (P >= 2, M a multiple of P, a layer per chunk at least), else 1. */
static int plan_chunks(const search *s, int P, int M)
{
    int v = s->o->chunks;
    return v > 1 && P >= 2 && M % P == 0 && P * v <= s->m->layers ? v : 1;
}

/* Interleaved 1F1B: the runtime's even P·v split (it runs no other with chunks), each stage's figures summed
 * over its chunks (topo_chunks_mem_gib); its memory is dp_mem's. */
static void fill_chunked(search *s, xdc_plan *p, int P, int M)
{
    for (int i = 0; i < P; i++) {
        xdc_plan_stage *st = &p->stage[i];
        st->region = -1;
        topo_even_split(s->m->layers, P * p->chunks, i, &st->layer_begin, &st->layer_end);
        (void)topo_chunks_mem_gib(s->m, P, i, p->chunks, M, s->mb, s->b->seq_len, 0, &st->act_bytes, &st->inflight,
                                  &st->params, &st->flops_mb);
        st->boundary_bytes = 2 * (double)s->mb * s->b->seq_len * s->m->boundary_bytes_per_token; /* x_in, dy_in */
    }
}

static void fill_stages(search *s, xdc_plan *p, int P, int M)
{
    p->stages = P;
    p->chunks = plan_chunks(s, P, M);
    if (p->chunks > 1) {
        fill_chunked(s, p, P, M);
        return;
    }
    chain_stage cs[XDC_PLAN_MAX_STAGES];
    double flops = 1e300, mem = 1e300;
    for (int r = 0; r < s->t->n_regions; r++) {
        if (!p->replicas[r]) continue;
        flops = fmin(flops, topo_region_flops(s->t, r, &s->o->calib));
        mem = fmin(mem, TOPO_PLAN_MEM_HEADROOM * s->t->regions[r].gpu_memory_gib);
    }
    for (int i = 0; i < P; i++)
        cs[i] = (chain_stage){
            .region = -1, .flops = flops, .mem_limit = mem, .inflight = xdc_model_shape_1f1b_inflight(P, i, M)};
    int lb[XDC_PLAN_MAX_STAGES + 1];
    int balanced = partition_layers(s, cs, P, lb);
    for (int i = 0; i < P; i++) {
        xdc_plan_stage *st = &p->stage[i];
        st->region = -1;
        topo_even_split(s->m->layers, P, i, &st->layer_begin, &st->layer_end); /* orch_stage_layers' split */
        if (balanced) st->layer_begin = lb[i], st->layer_end = lb[i + 1];
        st->params = xdc_model_shape_stage_params(s->m, st->layer_begin, st->layer_end);
        st->flops_mb = topo_stage_flops(s->m, st->layer_begin, st->layer_end, tokens_mb(s), s->b->seq_len);
        st->inflight = cs[i].inflight;
        st->act_bytes = topo_stage_act_bytes(s->m, st->layer_begin, st->layer_end, st->inflight, s->mb, s->b->seq_len);
        st->boundary_bytes = xdc_model_shape_boundary_bytes(s->m, st->layer_begin, st->layer_end, s->mb, s->b->seq_len);
    }
}

/* Memory per GPU of a data-parallel plan (every region holds every stage): 1 when the worst stage fits. */
static int dp_mem(const search *s, xdc_plan *p, double extra_bytes_per_param)
{
    p->mem_gib_max = 0;
    p->mem_gib_limit = 1e30;
    for (int r = 0; r < s->t->n_regions; r++)
        if (p->replicas[r] > 0 && s->t->regions[r].gpu_memory_gib < p->mem_gib_limit)
            p->mem_gib_limit = s->t->regions[r].gpu_memory_gib;
    for (int i = 0; i < p->stages; i++) {
        xdc_plan_stage *st = &p->stage[i];
        double act, params, flops;
        int inflight;
        st->mem_gib = p->chunks > 1
                          ? topo_chunks_mem_gib(s->m, p->stages, i, p->chunks, p->microbatches, p->micro_batch,
                                                s->b->seq_len, extra_bytes_per_param, &act, &inflight, &params, &flops)
                          : topo_stage_mem_gib(s->m, st->layer_begin, st->layer_end, st->inflight, p->micro_batch,
                                               s->b->seq_len, extra_bytes_per_param);
        if (st->mem_gib > p->mem_gib_max) p->mem_gib_max = st->mem_gib;
    }
    return p->mem_gib_max <= TOPO_PLAN_MEM_HEADROOM * p->mem_gib_limit;
}

/* Memory check for a data-parallel plan; a miss is counted as a rejection. */
static int dp_fits(search *s, xdc_plan *p, double extra_bytes_per_param)
{
    if (dp_mem(s, p, extra_bytes_per_param)) return 1;
    char where[128];
    snprintf(where, sizeof where, "%s with %d stage%s per replica", xdc_plan_mode_name(p->mode), p->stages,
             p->stages > 1 ? "s" : "");
    reject_memory(s, p->mem_gib_max, TOPO_PLAN_MEM_HEADROOM * p->mem_gib_limit, where);
    return 0;
}

/* Walk the route of region q's shard to region r (s->route) back from r: each hop's link (from, to). */
#define FOR_HOPS(s, q, r, from, to)                                                 \
    for (int to = (r), from = (s)->route[(q) * (s)->t->n_regions + (r)]; to != (q); \
         to = from, from = to != (q) ? (s)->route[(q) * (s)->t->n_regions + to] : -1)

/* The link region r gets region q's shard over: from the region before it on the route. */
static int dp_last_hop(const search *s, int q, int r) { return s->route[q * s->t->n_regions + r]; }

/* The routes and link loads of the region set `in` (s->route, s->load); 0 when its regions are not connected
 * among themselves. Each region receives each other region's shard once, over the last hop of its route (a
 * relay forwards the copy it received for itself), so a link's load is the number of routes ending with it. */
static int dp_routes(search *s, const unsigned char *in)
{
    int n = s->t->n_regions;
    if (xdc_topology_routes(s->t, in, s->route) != XDC_OK) return 0;
    memset(s->load, 0, (size_t)n * (size_t)n * sizeof *s->load);
    for (int q = 0; q < n; q++)
        for (int r = 0; r < n; r++)
            if (q != r && in[q] && in[r]) s->load[dp_last_hop(s, q, r) * n + r]++;
    return 1;
}

static void dp_region_times(search *s, const xdc_plan *p, int r, dp_region *out)
{
    double c[XDC_PLAN_MAX_STAGES], lat[XDC_PLAN_MAX_STAGES], occ[XDC_PLAN_MAX_STAGES];
    unsigned char in_region[XDC_PLAN_MAX_STAGES];
    double xfer = topo_intra_p2p_s(s->t, r, tokens_mb(s) * s->m->boundary_bytes_per_token, &s->o->calib);
    for (int i = 0; i < p->stages; i++) {
        c[i] = topo_stage_compute_s(s->t, r, i, p->stage[i].flops_mb, tokens_mb(s), &s->o->calib);
        lat[i] = occ[i] = xfer;
        in_region[i] = 1;
    }
    out->t_pipe = pipe_time(c, lat, occ, in_region, p->stages, p->microbatches, p->chunks, &out->compute);
    out->bubble = out->t_pipe - out->compute;
    /* Every link a shard crosses on its way to r, and every link out of r, carries one shard of a bucket per
     * region routed over it (s->load): the slowest such share paces r's buckets. A shard relayed h hops lands
     * after each hop's one-way delay and message overhead (the relay forwards what came in, as it comes). */
    int n = s->t->n_regions;
    out->link_Bps = 1e30;
    out->owd = 0;
    for (int q = 0; q < n; q++) {
        if (q == r || p->replicas[q] == 0) continue;
        double owd = 0;
        FOR_HOPS(s, q, r, from, to)
        {
            double bw = topo_link_Bps(s->t, from, to, &s->o->calib) / s->load[from * n + to];
            if (bw / p->stages < out->link_Bps) out->link_Bps = bw / p->stages; /* every stage group shares it */
            owd += topo_link_owd(s->t, from, to) + (from != q ? TOPO_PLAN_MSG_OVERHEAD_S : 0);
        }
        if (owd > out->owd) out->owd = owd;
        if (s->load[r * n + q] > 0) {
            double bw = topo_link_Bps(s->t, r, q, &s->o->calib) / s->load[r * n + q];
            if (bw / p->stages < out->link_Bps) out->link_Bps = bw / p->stages;
        }
    }
}

/* One gradient or parameter round over every region and stage: the slowest group sets the time, counted
 * from the end of the pipeline phase. A gradient round (`overlap`) starts during each stage's last
 * backward (orchestrator/orch_train.c hands buckets over layer by layer); parameter rounds start after. */
static double dp_round(search *s, const xdc_plan *p, const dp_region *dr, int n_active, const char *codec, double frac,
                       int overlap, double *intra, double *wire_per_region)
{
    double worst = 0;
    *intra = 0;
    for (int r = 0; r < s->t->n_regions; r++) {
        if (p->replicas[r] == 0) continue;
        topo_codec_info ci;
        const xdc_link *l = NULL;
        for (int q = 0; q < s->t->n_regions && !l; q++)
            if (q != r && p->replicas[q] > 0) l = xdc_topology_link(s->t, r, q);
        topo_grad_codec_get(codec, l ? l->bandwidth_gbps : 100, &s->o->calib, &ci);
        double wire = 0;
        for (int i = 0; i < p->stages; i++) {
            double in, w,
                last_bwd = overlap ? topo_stage_compute_s(s->t, r, i, p->stage[i].flops_mb * 2 / 3, tokens_mb(s),
                                                          &s->o->calib)
                                   : 0;
            double tr = topo_sync_round_s(s->t, r, p->replicas[r], xdc_plan_lanes(s->t, p), n_active,
                                          p->stage[i].params * frac, p->bucket_mb * 1048576.0 / 4, last_bwd, &ci,
                                          dr[r].link_Bps, dr[r].owd, &in, &w) -
                        last_bwd;
            if (tr > worst) worst = tr;
            if (in > *intra) *intra = in;
            wire += w;
        }
        wire_per_region[r] = wire;
    }
    return worst;
}

static void dp_wan_totals(search *s, xdc_plan *p, const double *wire_per_region, double rounds_per_step)
{
    p->wan_bytes = p->egress_usd = 0;
    for (int r = 0; r < s->t->n_regions; r++) /* r's shards into q, over the last hop of their route */
        for (int q = 0; q < s->t->n_regions; q++) {
            if (q == r || !p->replicas[r] || !p->replicas[q]) continue;
            double bytes = wire_per_region[r] * rounds_per_step;
            p->wan_bytes += bytes;
            p->egress_usd += bytes / 1e9 * xdc_topology_link(s->t, dp_last_hop(s, r, q), q)->cost_usd_per_gb;
        }
}

static int codec_allowed(const search *s, const char *codec)
{
    return !s->o->codec[0] || strcmp(s->o->codec, codec) == 0;
}

/* Nobody waits and overlapped rounds asked for (opts 1) are DiLoCo's alone. */
static int mode_allowed(const search *s, xdc_plan_mode m)
{
    if ((s->o->nobody_waits > 0 || s->o->overlap > 0) && m != XDC_PLAN_DILOCO) return 0;
    return s->o->mode < 0 || s->o->mode == (int)m;
}

/* Whether a DiLoCo candidate keeps what a round's codec did not send in each region's parameters
 * (diloco.keep_unsent): only where the runtime can (one replica per stage in every region: a replica's
 * codec keeps only its shard's residual), and then when the run asks for it or the codec is sparse. Left
 * in a sparse codec's residual the unsent 95 % is re-learned from the old point and applied late, and
 * bench-e2e's sparse row never reached the reference's loss; kept in the parameters it did, in fewer steps
 * than int8 DiLoCo (docs/benchmarks.md, "keep_unsent"). */
static int keep_unsent_for(const search *s, const xdc_plan *base, const char *codec)
{
    if (s->o->keep_unsent < 0) return 0;
    for (int r = 0; r < s->t->n_regions; r++)
        if (base->replicas[r] > 1) return 0;
    return s->o->keep_unsent > 0 || strncmp(codec, "sparse", 6) == 0;
}

static int codec_rank(const char *codec)
{
    topo_codec_info ci;
    return topo_codec_info_get(codec, 100, &ci) == XDC_OK ? ci.rank : 9;
}

/* Outer rounds for the loss, measured on bench-e2e's model and data at 1.5x the one-region reference's steps
 * (docs/benchmarks.md, "e2e", "Period and outer settings"): over 2 regions sparse DiLoCo with keep_unsent reached
 * the reference's loss with 15-22 rounds (H = 20-30 in 450 steps); over 4 regions with 45 (H = 10), and not with 22
 * (H = 20, 0.06 above it), 18, 15 or 9: each further region's diverging trajectory needs about 15 more rounds. Time
 * per token (the search's own rule) then chooses among the periods this leaves. */
int xdc_plan_max_period(int steps, int regions)
{
    return steps > 0 && regions > 1 ? steps / (XDC_PLAN_ROUNDS_PER_REGION * (regions - 1)) : 0;
}

/* Region r's inner step of DiLoCo plan p: its pipeline phase and its replicas' gradient sync (no WAN). */
static double region_inner_step(search *s, const xdc_plan *p, const dp_region *dr, int r, double *inner)
{
    xdc_plan q = *p;
    double wire[XDC_TOPO_MAX_REGIONS];
    for (int k = 0; k < s->t->n_regions; k++) q.replicas[k] = k == r ? p->replicas[k] : 0;
    double in;
    *inner = dp_round(s, &q, dr, 1, "none", 1.0, 1, &in, wire);
    return dr[r].t_pipe + *inner;
}

/* The DiLoCo candidate p (every region runs H inner steps, the round blocks the step it falls on) and its
 * variants the runtime can run (orch_run_config_check), each added as a candidate:
 *   overlap (diloco.overlap_steps 1): the round runs during the next inner step, as a streaming fragment does,
 *     and shows only by what outlasts it: max(0, round - step) per round;
 *   nobody waits (diloco.nobody_waits), where the regions' paces differ: region r runs
 *     h_r = xdc_plan_round_steps(H, pace_r) inner steps of t_r each in the round's time budget, the round lasts
 *     max_r h_r t_r + the exchange, and the tokens are sum_r h_r D_r M tau: per step of the round, both / H;
 *   both: nobody waits with the round overlapped (each round weighed by the counts of the round it closes), the
 *     exchange then showing by what outlasts the fastest region's inner step.
 * The overlap is one step (the round applied at the end of the next: the simulator's fragment engine); the runtime
 * takes more, not searched. With the run's length known (the search weighs the loss, as for the period and the
 * sparse density) an overlapped round counts one step lossier (fidelity + 1): its pseudo-gradient is a step stale
 * when applied, and on bench-e2e's 4-region row (H = 10, sparse:0.05:2, keep_unsent, nobody waits) the run ended
 * 0.020 higher in validation loss with it (2.2266 against 2.2066, above the reference's 2.2258) and 0.04 higher by
 * step 350 with 4 steps (docs/benchmarks.md, "e2e", "Overlap and the codec for the loss"); it then wins only where
 * hiding the round saves more than the search's tolerance per token (at most 1 / H of the step: H < 10). */
static void diloco_variants(search *s, xdc_plan *p, const dp_region *dr, int n_active, double step_inner, double round,
                            double intra, double closing)
{
    int H = p->inner_steps, n = s->t->n_regions, differ = 0, D = 0, a = -1;
    unsigned char in[XDC_TOPO_MAX_REGIONS] = {0};
    double pace[XDC_TOPO_MAX_REGIONS], outer_intra = fmin(intra, round) / H;
    for (int r = 0; r < n; r++) in[r] = p->replicas[r] > 0, D += p->replicas[r];
    xdc_plan_region_pace(s->t, &s->o->calib, in, pace);
    for (int r = 0; r < n; r++) differ |= in[r] && xdc_plan_round_steps(H, pace[r]) < H;
    if (s->o->nobody_waits <= 0 && s->o->overlap <= 0) add_cand(s, p);
    if (s->o->overlap >= 0 && s->o->nobody_waits <= 0 && n_active > 1) {
        xdc_plan q = *p;
        q.overlap_steps = 1;
        q.fidelity += s->o->steps > 0;
        q.t_intra -= outer_intra;
        q.t_wan_exposed = fmax(0, round - step_inner) / H;
        q.t_step = step_inner + q.t_wan_exposed + closing;
        add_cand(s, &q);
    }
    if (s->o->nobody_waits < 0 || n_active < 2 || (!differ && s->o->nobody_waits <= 0)) return;
    xdc_plan q = *p;
    double wall = 0, tokens = 0, inner_a = 0, per_replica = p->tokens / D; /* one replica's inner step */
    double fastest = 0; /* the fastest region's inner step: the step an overlapped round runs beside */
    for (int r = 0; r < n; r++) {
        if (!in[r]) continue;
        double inner, t_r = region_inner_step(s, p, dr, r, &inner);
        if (fastest == 0 || t_r < fastest) fastest = t_r;
        q.round_steps[r] = xdc_plan_round_steps(H, pace[r]);
        q.round_busy_s[r] = q.round_steps[r] * t_r;
        tokens += (double)q.round_steps[r] * q.replicas[r] * per_replica;
        if (q.round_busy_s[r] > wall) wall = q.round_busy_s[r], a = r, inner_a = inner;
    }
    q.nobody_waits = 1;
    q.tokens = tokens / H;
    q.t_compute = dr[a].compute * q.round_steps[a] / H;
    q.t_bubble = dr[a].bubble * q.round_steps[a] / H;
    q.t_intra = inner_a * q.round_steps[a] / H + outer_intra + closing;
    q.t_wan_exposed = round / H - outer_intra;
    q.t_step = wall / H + round / H + closing;
    if (s->o->overlap <= 0) add_cand(s, &q);
    if (s->o->overlap < 0) return;
    q.overlap_steps = 1;
    q.fidelity += s->o->steps > 0;
    q.t_intra -= outer_intra;
    q.t_wan_exposed = fmax(0, round - fastest) / H;
    q.t_step = wall / H + q.t_wan_exposed + closing;
    add_cand(s, &q);
}

/* The WAN side of a data-parallel structure: equal and split are the pipeline phase, its compute and bubble,
 * with M microbatches for every replica and with base->replica_mb's split (dp_split), which sync mode runs; the
 * outer-round modes run the equal split. */
static void dp_comm_settings(search *s, xdc_plan *base, const dp_region *dr, int n_active, const double *equal,
                             const double *split)
{
    double t_pipe = equal[0], compute = equal[1], bubble = equal[2];
    char codecs[MAX_CODECS][16];
    int n_codecs = topo_codec_ladder(false, codecs, MAX_CODECS);
    if (s->o->codec[0] || n_active < 2) /* fixed, or no WAN to cross */
        n_codecs = 1, snprintf(codecs[0], sizeof codecs[0], "%s", s->o->codec[0] ? s->o->codec : "none");
    double wire[XDC_TOPO_MAX_REGIONS] = {0}, closing = topo_step_allreduce_s(s->t, base, &s->o->calib);
    for (int ci = 0; ci < n_codecs; ci++) {
        const char *codec = codecs[ci];
        xdc_plan p = *base;
        snprintf(p.codec, sizeof p.codec, "%s", codec);
        if (mode_allowed(s, XDC_PLAN_SYNC) && s->o->inner_steps <= 0 && s->o->keep_unsent <= 0 &&
            dp_fits(s, &p, sync_extra_bytes(s))) {
            double intra, round = dp_round(s, &p, dr, n_active, codec, 1.0, 1, &intra, wire);
            p.mode = XDC_PLAN_SYNC;
            p.inner_steps = p.fragments = 0;
            p.delay_steps = s->o->delay_steps;
            /* Delayed averaging: the round runs while the next step's pipeline computes, so only what
             * outlasts that pass shows: step = max(pass, round) + closing. */
            double shown = p.delay_steps ? fmax(0, round - split[0]) : round;
            p.t_intra = n_active < 2 ? shown : fmin(intra, shown); /* what overlaps the backward is hidden */
            p.t_wan_exposed = shown - p.t_intra;
            p.t_intra += closing;
            p.t_step = split[0] + shown + closing;
            p.fidelity = codec_rank(codec);
            dp_wan_totals(s, &p, wire, 1);
            p.t_compute = split[1];
            p.t_bubble = split[2];
            add_cand(s, &p);
        }
        if (n_active < 2 || strcmp(codec, "none") == 0) continue; /* outer rounds always compress */
        /* Outer rounds send sparse pseudo-gradients through the sparse codec, which keeps more entries than
         * top-k in the same bytes (quantized values, u16 positions) - SparseLoCo's finding - unless the
         * run pins top-k. */
        if (strncmp(codec, "topk", 4) == 0 && !s->o->codec[0]) continue;
        if (s->o->steps > 0 && !s->o->codec[0] && topo_sparse_variant(codec) >= TOPO_PLAN_LOSS_SPARSE_VARIANTS &&
            strncmp(codec, "sparse", 6) == 0)
            continue; /* sparser rounds miss the run's loss */
        /* Inner steps sync over the region's replicas only, uncompressed. */
        double inner_intra, inner_wire[XDC_TOPO_MAX_REGIONS];
        double inner = dp_round(s, base, dr, 1, "none", 1.0, 1, &inner_intra, inner_wire); /* all intra */
        int longest = xdc_plan_max_period(s->o->steps, n_active); /* for the loss: enough rounds in the run */
        for (size_t h = 0; h < sizeof periods / sizeof *periods; h++) {
            int H = s->o->inner_steps > 0 ? s->o->inner_steps : periods[h];
            if (h > 0 && (s->o->inner_steps > 0 || (longest > 0 && H > longest))) break;
            for (xdc_plan_mode mode = XDC_PLAN_DILOCO; mode <= XDC_PLAN_STREAMING; mode++) {
                int keep = mode == XDC_PLAN_DILOCO && keep_unsent_for(s, base, codec);
                if (!mode_allowed(s, mode) || (s->o->keep_unsent > 0 && !keep)) continue;
                p = *base;
                memset(p.replica_mb, 0, sizeof p.replica_mb); /* outer rounds: every replica runs M */
                snprintf(p.codec, sizeof p.codec, "%s", codec);
                p.mode = mode;
                p.keep_unsent = keep;
                if (keep) {
                    snprintf(p.final_codec, sizeof p.final_codec, "%s", TOPO_PLAN_KEEP_UNSENT_FINAL_CODEC);
                    p.outer_lr = TOPO_PLAN_KEEP_UNSENT_OUTER_LR;
                }
                if (!dp_fits(s, &p, TOPO_OUTER_BYTES_PER_PARAM)) continue;
                p.inner_steps = H;
                p.fragments = mode == XDC_PLAN_STREAMING ? (s->o->fragments > 0 ? s->o->fragments : (H < 4 ? H : 4))
                                                         : 0;
                double frac = mode == XDC_PLAN_STREAMING ? 1.0 / p.fragments : 1.0, intra;
                /* The outer round blocks the step it falls on (orch_mode_diloco.c) whether or not keep_unsent
                 * is on; keep_unsent adds one device copy per round. Its last round, once per run in
                 * final_codec, is not a per-step cost. */
                double round = dp_round(s, &p, dr, n_active, codec, frac, 0, &intra, wire);
                double step_inner = t_pipe + inner;
                double exposed = mode == XDC_PLAN_DILOCO ? round / H : p.fragments * fmax(0, round - step_inner) / H;
                double outer_intra = mode == XDC_PLAN_DILOCO ? fmin(intra, round) / H : 0;
                p.t_intra = inner + outer_intra + closing;
                p.t_wan_exposed = exposed - outer_intra;
                p.t_step = step_inner + exposed + closing;
                /* keep_unsent: the period and the sparse density count, the codec's lossiness does not. Nothing
                 * a round leaves unsent is lost (it stays in the parameters; the last round is dense): at H = 30
                 * sparse:0.05:2 reached the reference's loss in 320 steps against int8 DiLoCo's 350 and int8
                 * streaming's 390, 0.03:2 in 340 (docs/benchmarks.md, "keep_unsent"). */
                p.fidelity = keep ? 3 + (int)h + topo_sparse_variant(codec)
                                  : codec_rank(codec) + 3 + (int)h + (mode == XDC_PLAN_DILOCO);
                dp_wan_totals(s, &p, wire, (mode == XDC_PLAN_STREAMING ? p.fragments : 1) / (double)H);
                p.t_compute = compute;
                p.t_bubble = bubble;
                if (mode == XDC_PLAN_DILOCO) diloco_variants(s, &p, dr, n_active, step_inner, round, intra, closing);
                else add_cand(s, &p);
            }
        }
    }
}

/* Price the pipeline phase of a data-parallel structure (P stages, D replicas over the regions of `base`)
 * with microbatches of b sequences: fills base's batch fields and stages, dr per region, and the slowest
 * region's pipeline phase, its compute and bubble. 1 when every stage fits in memory (without the
 * DiLoCo/streaming copies, which each mode checks). */
static int dp_price(search *s, xdc_plan *base, int P, int D, int b, dp_region *dr, xdc_plan_mb_option *o)
{
    const xdc_topology *t = s->t;
    s->mb = b;
    base->microbatches = microbatches_for(s, D);
    base->micro_batch = b;
    base->seq_len = s->b->seq_len;
    base->tokens = (double)base->microbatches * tokens_mb(s) * D;
    fill_stages(s, base, P, base->microbatches);
    double total = 0, half = 0;
    *o = (xdc_plan_mb_option){.micro_batch = b, .microbatches = base->microbatches};
    for (int r = 0; r < t->n_regions; r++) {
        if (!base->replicas[r]) continue;
        dp_region_times(s, base, r, &dr[r]);
        if (dr[r].t_pipe > o->t_pipe)
            o->t_pipe = dr[r].t_pipe, o->t_compute = dr[r].compute, o->t_bubble = dr[r].bubble,
            half = topo_region_half_tokens(t, r);
        for (int i = 0; i < P; i++)
            total += (double)base->replicas[r] * base->microbatches *
                     topo_stage_compute_s(t, r, i, base->stage[i].flops_mb, tokens_mb(s), &s->o->calib);
    }
    host_bound(s, total, &o->t_pipe, &o->t_bubble);
    o->t_mb_cost = o->t_compute * half / (tokens_mb(s) + half); /* what c(tau) = w (tau + h) adds: w h each */
    return o->fits = dp_mem(s, base, sync_extra_bytes(s));
}

/* The microbatch size of a data-parallel structure. The tokens per step stay the global batch's; with
 * S = global batch / (D x seq_len) sequences per replica, every divisor b of S is a candidate (M = S / b).
 * More microbatches shrink the 1F1B bubble ((P-1)/(M+P-1)) but each pays the per-microbatch cost (the
 * efficiency of topo_stage_compute_s, the in-region hand-offs) and holds more boundary buffers; fewer
 * hold larger activation slots. The shortest pipeline phase that fits in memory wins, ties to the larger
 * b; none fitting, the smallest b (dp_fits then names the miss). A pinned b (opts.micro_batch), a pinned
 * M (opts.microbatches) or a global batch that is no whole number of sequences per replica keeps b. */
static void dp_pick_micro_batch(search *s, xdc_plan *base, int P, int D, dp_region *dr, double *t_pipe, double *compute,
                                double *bubble)
{
    double seqs = s->global_tokens / ((double)s->b->seq_len * D);
    int pinned = s->o->micro_batch > 0 || s->o->microbatches > 0 || !(seqs >= 1 && seqs <= 1 << 20) ||
                 fabs(seqs - round(seqs)) > 1e-9;
    int S = pinned ? 0 : (int)round(seqs), fixed = s->o->micro_batch > 0 ? s->o->micro_batch : s->b->micro_batch;
    xdc_plan_mb_option opt, best = {0}, most = {0};
    int best_b = 0, best_fits = 0, tried = 0;
    for (int b = pinned ? fixed : S; b >= 1; b--) {
        if (!pinned && S % b) continue;
        int fits = dp_price(s, base, P, D, b, dr, &opt);
        tried++;
        most = opt;
        if (tried == 1) base->mb_pick[1] = opt; /* the fewest microbatches */
        if (!best_b || (fits && !best_fits) || (fits == best_fits && opt.t_pipe < best.t_pipe * (1 - 1e-9)) ||
            (!fits && !best_fits))
            best = opt, best_b = b, best_fits = fits;
        if (pinned) break;
    }
    base->mb_pick[2] = most;
    base->mb_tried = pinned ? 0 : tried;
    if (best_b != most.micro_batch) dp_price(s, base, P, D, best_b, dr, &opt);
    base->mb_pick[0] = best;
    *t_pipe = best.t_pipe;
    *compute = best.t_compute;
    *bubble = best.t_bubble;
}

/* Unequal replicas: the M x D microbatches of a step split over the replicas by speed. Greedily, one more
 * microbatch per replica goes to the region whose replicas would then finish soonest, (m_r + 1) x c_r with c_r
 * its slowest stage's time per microbatch (1F1B's steady-state rate), until every microbatch is placed (each
 * replica at least one). Kept (p->replica_mb, *pipe = the split's slowest region's pipeline phase, its compute
 * and bubble) only where the regions' speeds differ and the split shortens the phase; else p->replica_mb stays
 * 0 and *pipe the equal split's. */
static void dp_split(search *s, xdc_plan *p, const double *equal, double *pipe)
{
    int n = s->t->n_regions, total = 0, target = 0, m[XDC_TOPO_MAX_REGIONS] = {0}; /* target: Σ replicas x M */
    double c[XDC_TOPO_MAX_REGIONS] = {0}, lo = 1e300, hi = 0;
    memcpy(pipe, equal, 3 * sizeof *pipe);
    memset(p->replica_mb, 0, sizeof p->replica_mb);
    p->split_pipe = equal[0];
    for (int r = 0; r < n; r++) {
        if (!p->replicas[r]) continue;
        for (int i = 0; i < p->stages; i++)
            c[r] = fmax(c[r], topo_stage_compute_s(s->t, r, i, p->stage[i].flops_mb, tokens_mb(s), &s->o->calib));
        lo = fmin(lo, c[r]), hi = fmax(hi, c[r]);
        m[r] = 1;
        total += p->replicas[r];
        target += p->replicas[r] * p->microbatches;
    }
    if (hi <= lo * (1 + 1e-9) || total > target) return;
    while (total < target) {
        int best = -1;
        for (int r = 0; r < n; r++)
            if (p->replicas[r] && p->replicas[r] <= target - total &&
                (best < 0 || (m[r] + 1) * c[r] < (m[best] + 1) * c[best]))
                best = r;
        if (best < 0) return; /* no region's replicas fit the rest exactly: keep the equal split */
        m[best]++;
        total += p->replicas[best];
    }
    double split[3] = {0}, all = 0;
    for (int r = 0; r < n; r++) {
        if (!p->replicas[r]) continue;
        xdc_plan q = *p;
        q.microbatches = m[r];
        dp_region d;
        dp_region_times(s, &q, r, &d);
        if (d.t_pipe > split[0]) split[0] = d.t_pipe, split[1] = d.compute, split[2] = d.bubble;
        for (int i = 0; i < p->stages; i++)
            all += (double)p->replicas[r] * m[r] *
                   topo_stage_compute_s(s->t, r, i, p->stage[i].flops_mb, tokens_mb(s), &s->o->calib);
    }
    host_bound(s, all, &split[0], &split[2]);
    if (split[0] >= equal[0] * (1 - 1e-9)) return;
    memcpy(pipe, split, sizeof split);
    memcpy(p->replica_mb, m, sizeof m);
}

/* Data-parallel structures over the regions in `in` (1 = takes part). */
static void search_dp(search *s, const unsigned char *in)
{
    const xdc_topology *t = s->t;
    if (!dp_routes(s, in)) return;
    int n_active = 0, maxP = s->m->layers < XDC_PLAN_MAX_STAGES ? s->m->layers : XDC_PLAN_MAX_STAGES;
    for (int r = 0; r < t->n_regions; r++) n_active += in[r];
    for (int P = 1; P <= maxP; P++) {
        if (s->o->stages > 0 && P != s->o->stages) continue;
        xdc_plan base;
        memset(&base, 0, sizeof base);
        int ok = 1, D = 0;
        for (int r = 0; r < t->n_regions; r++) {
            if (!in[r]) continue;
            if (workers(s, r) % P) ok = 0;
            base.replicas[r] = workers(s, r) / P;
            D += base.replicas[r];
        }
        if (!ok || D == 0) continue;
        dp_region dr[XDC_TOPO_MAX_REGIONS];
        double t_pipe, compute, bubble;
        dp_pick_micro_batch(s, &base, P, D, dr, &t_pipe, &compute, &bubble);
        double equal[3] = {t_pipe, compute, bubble}, split[3];
        dp_split(s, &base, equal, split);
        for (size_t bi = 0; bi < sizeof bucket_mbs / sizeof *bucket_mbs; bi++) {
            base.bucket_mb = s->o->bucket_mb > 0 ? s->o->bucket_mb : bucket_mbs[bi];
            dp_comm_settings(s, &base, dr, n_active, equal, split);
            double biggest = 0;
            for (int i = 0; i < P; i++) biggest = fmax(biggest, base.stage[i].params * 4 / 1048576.0);
            if (s->o->bucket_mb > 0 || base.bucket_mb >= biggest) break; /* larger buckets change nothing */
        }
    }
}

/* 1 when every pair of regions in `in` has links both ways: no shard needs a relay. */
static int meshed(search *s, const unsigned char *in)
{
    for (int r = 0; r < s->t->n_regions; r++)
        for (int q = 0; q < s->t->n_regions; q++)
            if (q != r && in[r] && in[q] && !(topo_link_Bps(s->t, r, q, &s->o->calib) > 0)) return 0;
    return 1;
}

/* Region sets for data parallelism: every region with workers (pairs without a direct link exchange through
 * relays: dp_routes); when they are not fully linked (up to 12 regions) also every maximal fully linked set,
 * which needs no relay; and each region alone. */
static void search_dp_sets(search *s)
{
    int R = s->t->n_regions, n_with = 0;
    unsigned char in[XDC_TOPO_MAX_REGIONS] = {0};
    for (int r = 0; r < R; r++) n_with += in[r] = workers(s, r) > 0;
    int full = meshed(s, in);
    if (s->err) return;
    search_dp(s, in);
    if (s->o->all_regions) return;
    if (!full && R <= 12) {
        for (unsigned mask = 1; mask < 1u << R && !s->err; mask++) {
            int size = 0, maximal = 1;
            for (int r = 0; r < R; r++) size += in[r] = (mask >> r & 1) && workers(s, r) > 0;
            if (size < 2 || (unsigned)size != (unsigned)__builtin_popcount(mask) || !meshed(s, in)) continue;
            for (int r = 0; r < R && maximal; r++) {
                if (mask >> r & 1 || workers(s, r) == 0) continue;
                in[r] = 1;
                maximal = !meshed(s, in);
                in[r] = 0;
            }
            if (maximal) search_dp(s, in);
        }
    }
    for (int r = 0; r < R && n_with > 1 && !s->err; r++) {
        if (workers(s, r) == 0) continue;
        memset(in, 0, (size_t)R);
        in[r] = 1;
        search_dp(s, in);
    }
}

/* ---- pipelines that span a chain of regions ------------------------------------------------------ */


static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* `bytes` each way over the link between regions a and b: the plan's WAN bytes and egress cost. */
static void chain_link_bytes(const search *s, xdc_plan *p, int a, int b, double bytes)
{
    for (int dir = 0; dir < 2; dir++) {
        const xdc_link *l = xdc_topology_link(s->t, dir ? b : a, dir ? a : b);
        p->wan_bytes += bytes;
        p->egress_usd += bytes / 1e9 * (l ? l->cost_usd_per_gb : 0);
    }
}

static void eval_chain_codec(search *s, xdc_plan *p, const chain_stage *cs, const char *codec, int D)
{
    int P = p->stages, M = p->microbatches;
    double c[XDC_PLAN_MAX_STAGES] = {0}, lat[XDC_PLAN_MAX_STAGES] = {0}, occ[XDC_PLAN_MAX_STAGES] = {0},
           lat0[XDC_PLAN_MAX_STAGES] = {0};
    unsigned char in_region[XDC_PLAN_MAX_STAGES] = {0};
    double act = tokens_mb(s) * s->m->boundary_bytes_per_token, compute, compute0;
    topo_codec_info ci;
    topo_act_codec_get(codec, s->m, tokens_mb(s), &ci);
    p->wan_bytes = p->egress_usd = 0;
    for (int i = 0; i < P; i++) {
        c[i] = topo_stage_compute_s(s->t, cs[i].region, i, p->stage[i].flops_mb, tokens_mb(s), &s->o->calib);
        if (i + 1 == P) break;
        int a = cs[i].region, b = cs[i + 1].region;
        lat0[i] = topo_intra_p2p_s(s->t, a, act, &s->o->calib);
        in_region[i] = a == b;
        if (a == b) {
            lat[i] = occ[i] = lat0[i];
            continue;
        }
        double bw = fmin(topo_link_Bps(s->t, a, b, &s->o->calib), topo_link_Bps(s->t, b, a, &s->o->calib));
        double wire = act * ci.ratio;
        occ[i] = D * wire / bw; /* every replica's activations share the link */
        lat[i] = topo_link_owd(s->t, a, b) + TOPO_PLAN_MSG_OVERHEAD_S + wire / bw + act / ci.enc_Bps + act / ci.dec_Bps;
        chain_link_bytes(s, p, a, b, (double)D * M * wire * p->chunks); /* each chunk crosses the cut */
    }
    if (p->chunks > 1) { /* the wrap-around from the last stage to the first, v − 1 times per microbatch */
        topo_codec_info ci;
        topo_codec_info_get(codec, 100, &ci);
        chain_link_bytes(s, p, cs[P - 1].region, cs[0].region, (double)D * M * act * ci.ratio * (p->chunks - 1));
    }
    double t_pipe = pipe_time(c, lat, occ, in_region, P, M, p->chunks, &compute);
    double t_pipe0 = pipe_time(c, lat0, lat0, in_region, P, M, p->chunks, &compute0), total = 0,
           wan_part = t_pipe - t_pipe0, bubble0 = 0;
    for (int i = 0; i < P; i++) total += (double)D * M * c[i];
    host_bound(s, total, &t_pipe0, &bubble0);
    t_pipe = t_pipe0 + wan_part;
    /* Gradient sync stays inside each region: a stage's D replicas all live where the stage lives. */
    double sync = 0;
    topo_codec_info none;
    topo_codec_info_get("none", 100, &none);
    for (int i = 0; i < P; i++) {
        double in, w, last_bwd = 2 * c[i] / 3;
        double tr = topo_sync_round_s(s->t, cs[i].region, D, D, 1, p->stage[i].params, p->bucket_mb * 1048576.0 / 4,
                                      last_bwd, &none, 1, 0, &in, &w);
        sync = fmax(sync, tr - last_bwd);
    }
    snprintf(p->codec, sizeof p->codec, "%s", codec);
    double closing = topo_step_allreduce_s(s->t, p, &s->o->calib);
    p->t_compute = compute;
    p->t_bubble = t_pipe0 - compute;
    p->t_wan_exposed = t_pipe - t_pipe0;
    p->t_intra = sync + closing;
    p->t_step = t_pipe + sync + closing;
    p->fidelity = ci.rank;
    add_cand(s, p);
}

static void eval_chain(search *s, const int *chain, int n)
{
    s->mb = s->o->micro_batch > 0 ? s->o->micro_batch : s->b->micro_batch; /* chains keep the given b */
    int g = 0, with = 0;
    for (int r = 0; r < s->t->n_regions; r++) with += workers(s, r) > 0;
    if (s->o->all_regions && n < with) return;
    for (int i = 0; i < n; i++) g = gcd(g, workers(s, chain[i]));
    for (int D = 1; D <= g; D++) {
        if (g % D) continue;
        xdc_plan p;
        memset(&p, 0, sizeof p);
        chain_stage cs[XDC_PLAN_MAX_STAGES];
        int P = 0;
        for (int i = 0; i < n; i++) P += workers(s, chain[i]) / D;
        if (P > s->m->layers || P > XDC_PLAN_MAX_STAGES || (s->o->stages > 0 && P != s->o->stages)) continue;
        p.mode = XDC_PLAN_PIPELINE;
        p.stages = P;
        p.chunks = 1; /* the runtime builds no WAN link for the chunks' wrap-around (docs/planner.md) */
        p.n_chain = n;
        p.microbatches = microbatches_for(s, D);
        p.micro_batch = s->mb;
        p.seq_len = s->b->seq_len;
        p.tokens = (double)p.microbatches * tokens_mb(s) * D;
        p.bucket_mb = s->o->bucket_mb > 0 ? s->o->bucket_mb : 16;
        p.mem_gib_limit = 1e30;
        /* Microbatches in flight: the 1F1B bound min(M, P - s), what the runtime creates the stage with
         * (orch_worker.c): a WAN cut's round trip is exposed time in the cost, not extra slots. */
        int k = 0;
        for (int i = n - 1; i >= 0; i--) {
            int ps = workers(s, chain[i]) / D;
            for (int j = 0; j < ps; j++) {
                int idx = P - 1 - k++;
                cs[idx].region = chain[i];
                cs[idx].flops = topo_region_flops(s->t, chain[i], &s->o->calib);
                cs[idx].mem_limit = TOPO_PLAN_MEM_HEADROOM * s->t->regions[chain[i]].gpu_memory_gib;
                cs[idx].inflight = xdc_model_shape_1f1b_inflight(P, idx, p.microbatches);
            }
            p.chain[i] = chain[i];
            p.replicas[chain[i]] = D;
            if (s->t->regions[chain[i]].gpu_memory_gib < p.mem_gib_limit)
                p.mem_gib_limit = s->t->regions[chain[i]].gpu_memory_gib;
        }
        /* Interleaved where the runtime runs it: one pipeline (D = 1) whose wrap-around from the last stage to
         * the first has a WAN link, the span's one link (2 regions of one worker) or its own (the last region
         * has 2 workers or more and a link to the first; orch_member_span_wrap). Each chunk crosses a cut, the
         * wrap-around v − 1 times per microbatch each way (eval_chain_codec, pipe_time). */
        int last_w = workers(s, chain[n - 1]),
            wraps = n == 2 && P == 2 ? 1 : last_w >= 2 && xdc_topology_link(s->t, chain[0], chain[n - 1]);
        p.chunks = D == 1 && wraps ? plan_chunks(s, P, p.microbatches) : 1;
        if (p.chunks > 1) {
            fill_chunked(s, &p, P, p.microbatches);
            for (int i = 0; i < P; i++) {
                xdc_plan_stage *st = &p.stage[i];
                double act, params, flops;
                int inflight;
                st->region = cs[i].region;
                st->mem_gib = topo_chunks_mem_gib(s->m, P, i, p.chunks, p.microbatches, s->mb, s->b->seq_len,
                                                  sync_extra_bytes(s), &act, &inflight, &params, &flops);
                p.mem_gib_max = fmax(p.mem_gib_max, st->mem_gib);
            }
            for (int i = 1, cut = 0; i < P; i++) /* before the first stage of each next region (its first chunk) */
                if (cs[i].region != cs[i - 1].region) p.cut_layer[cut++] = p.stage[i].layer_begin;
            if (p.mem_gib_max > TOPO_PLAN_MEM_HEADROOM * p.mem_gib_limit) {
                reject_memory(s, p.mem_gib_max, TOPO_PLAN_MEM_HEADROOM * p.mem_gib_limit, "an interleaved pipeline");
                continue;
            }
            char act[MAX_CODECS][16];
            int n_act = topo_codec_ladder(true, act, MAX_CODECS);
            for (int c = 0; c < n_act; c++)
                if (codec_allowed(s, act[c])) eval_chain_codec(s, &p, cs, act[c], D);
            continue;
        }
        int lb[XDC_PLAN_MAX_STAGES + 1];
        if (!partition_layers(s, cs, P, lb)) {
            double need = 0;
            for (int i = 0; i < P; i++) {
                int lo = s->m->layers * i / P, hi = s->m->layers * (i + 1) / P;
                need = fmax(need, topo_stage_mem_gib(s->m, lo, hi > lo ? hi : lo + 1, cs[i].inflight, s->mb,
                                                     s->b->seq_len, sync_extra_bytes(s)));
            }
            char where[128];
            snprintf(where, sizeof where, "a pipeline over %d region%s with %d stages", n, n > 1 ? "s" : "", P);
            reject_memory(s, need, TOPO_PLAN_MEM_HEADROOM * p.mem_gib_limit, where);
            continue;
        }
        int cut = 0;
        for (int i = 0; i < P; i++) {
            xdc_plan_stage *st = &p.stage[i];
            st->region = cs[i].region;
            st->layer_begin = lb[i];
            st->layer_end = lb[i + 1];
            st->params = xdc_model_shape_stage_params(s->m, lb[i], lb[i + 1]);
            st->flops_mb = topo_stage_flops(s->m, lb[i], lb[i + 1], tokens_mb(s), s->b->seq_len);
            st->inflight = cs[i].inflight;
            st->act_bytes = topo_stage_act_bytes(s->m, lb[i], lb[i + 1], st->inflight, s->mb, s->b->seq_len);
            st->boundary_bytes = xdc_model_shape_boundary_bytes(s->m, lb[i], lb[i + 1], s->mb, s->b->seq_len);
            st->mem_gib = topo_stage_mem_gib(s->m, lb[i], lb[i + 1], st->inflight, s->mb, s->b->seq_len,
                                             sync_extra_bytes(s));
            p.mem_gib_max = fmax(p.mem_gib_max, st->mem_gib);
            if (i > 0 && cs[i].region != cs[i - 1].region) p.cut_layer[cut++] = lb[i];
        }
        char act[MAX_CODECS][16];
        int n_act = topo_codec_ladder(true, act, MAX_CODECS);
        for (int c = 0; c < n_act; c++)
            if (codec_allowed(s, act[c])) eval_chain_codec(s, &p, cs, act[c], D);
    }
}

/* Chains to try: every ordering of linked regions when there are few, else greedy cheapest-link paths. */
static void chain_rec(search *s, int *chain, int n, unsigned long long used)
{
    if (n >= 2) eval_chain(s, chain, n);
    if (n == s->t->n_regions || n == XDC_PLAN_MAX_CHAIN || s->err) return;
    for (int r = 0; r < s->t->n_regions; r++) {
        if (used >> r & 1 || workers(s, r) == 0) continue;
        if (n > 0 && !xdc_topology_link(s->t, chain[n - 1], r)) continue;
        chain[n] = r;
        chain_rec(s, chain, n + 1, used | 1ull << r);
    }
}

static void search_chains(search *s)
{
    int chain[XDC_PLAN_MAX_CHAIN];
    if (s->t->n_regions <= 4) {
        chain_rec(s, chain, 0, 0);
        return;
    }
    for (int start = 0; start < s->t->n_regions; start++) {
        if (workers(s, start) == 0) continue;
        unsigned char used[XDC_TOPO_MAX_REGIONS] = {0};
        int n = 0;
        chain[n++] = start;
        used[start] = 1;
        while (n < XDC_PLAN_MAX_CHAIN) {
            int best = -1;
            double best_bw = 0;
            for (int r = 0; r < s->t->n_regions; r++) {
                if (used[r] || workers(s, r) == 0) continue;
                double bw = topo_link_Bps(s->t, chain[n - 1], r, &s->o->calib);
                if (bw > best_bw) best = r, best_bw = bw;
            }
            if (best < 0) break;
            chain[n++] = best;
            used[best] = 1;
            eval_chain(s, chain, n);
        }
    }
}

/* ---- choice ---------------------------------------------------------------------------------------- */

typedef struct order_key {
    int outside, fidelity, idx;
    double tpt;
} order_key;

static int order_cmp(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->outside != y->outside) return x->outside - y->outside;
    if (!x->outside && x->fidelity != y->fidelity) return x->fidelity - y->fidelity;
    if (x->tpt != y->tpt) return x->tpt < y->tpt ? -1 : 1;
    return x->idx - y->idx;
}

static const char *biggest_gap(const xdc_plan *p, const xdc_plan *best)
{
    double d[4] = {p->t_compute / p->tokens - best->t_compute / best->tokens,
                   p->t_bubble / p->tokens - best->t_bubble / best->tokens,
                   p->t_intra / p->tokens - best->t_intra / best->tokens,
                   p->t_wan_exposed / p->tokens - best->t_wan_exposed / best->tokens};
    static const char *const names[] = {"more compute per token", "a larger pipeline bubble", "more intra-region sync",
                                        "more exposed WAN time"};
    int k = 0;
    for (int i = 1; i < 4; i++)
        if (d[i] > d[k]) k = i;
    return names[k];
}

static xdc_err_t choose(search *s, xdc_plan_set *set)
{
    order_key *keys = xdc_malloc((size_t)s->n * sizeof *keys);
    xdc_plan *sorted = xdc_malloc((size_t)s->n * sizeof *sorted);
    if (!keys || !sorted) {
        xdc_free(keys);
        xdc_free(sorted);
        return XDC_ERR_NOMEM;
    }
    double best = 1e300, tol = s->o->tolerance > 0 ? s->o->tolerance : 0;
    for (int i = 0; i < s->n; i++) best = fmin(best, s->cands[i].t_step / s->cands[i].tokens);
    for (int i = 0; i < s->n; i++) {
        double tpt = s->cands[i].t_step / s->cands[i].tokens;
        keys[i] = (order_key){tpt > best * (1 + tol) * (1 + 1e-12), s->cands[i].fidelity, i, tpt};
    }
    qsort(keys, (size_t)s->n, sizeof *keys, order_cmp);
    for (int i = 0; i < s->n; i++) sorted[i] = s->cands[keys[i].idx];
    const xdc_plan *b = &sorted[0];
    double btpt = b->t_step / b->tokens;
    for (int i = 1; i < s->n; i++) {
        xdc_plan *p = &sorted[i];
        double slower = (p->t_step / p->tokens / btpt - 1) * 100;
        if (slower < 0.05 && p->fidelity == b->fidelity)
            snprintf(p->why, sizeof p->why, "ties the chosen plan (the search keeps the first found)");
        else if (keys[i].outside)
            snprintf(p->why, sizeof p->why, "%.1f%% slower per token (%s)", slower, biggest_gap(p, b));
        else if (p->fidelity > b->fidelity)
            snprintf(p->why, sizeof p->why, "lossier (fidelity %d vs %d) for %+.1f%% time per token", p->fidelity,
                     b->fidelity, -slower);
        else
            snprintf(p->why, sizeof p->why, "%.1f%% slower per token at the same fidelity (%s)", slower,
                     biggest_gap(p, b));
    }
    snprintf(sorted[0].why, sizeof sorted[0].why,
             "chosen: the most faithful plan within %.0f%% of the fastest per token", tol * 100);
    set->every_region = s->has_all;
    if (s->has_all) {
        set->all = s->all;
        snprintf(set->all.why, sizeof set->all.why, "%+.1f%% time per token against the chosen plan (%s)",
                 (s->all.t_step / s->all.tokens / btpt - 1) * 100, biggest_gap(&s->all, b));
    }
    set->best = sorted[0];
    set->cands = sorted;
    set->n_cands = s->n;
    xdc_free(keys);
    return XDC_OK;
}

static xdc_err_t check_inputs(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                              const xdc_plan_opts *o, xdc_diag *diag)
{
    if (m->layers < 1 || m->width < 1 || !(m->params > 0) || !(m->bytes_per_param > 0)) {
        xdc_diag_set(diag, "model shape: layers, width, parameters and bytes per parameter must be positive");
        return XDC_ERR_INVALID;
    }
    if (b->micro_batch < 1 || b->seq_len < 1 || (!(b->global_batch_tokens > 0) && o->microbatches < 1)) {
        xdc_diag_set(
            diag, "batch: microbatch size, sequence length and a global batch (or microbatch count) must be positive");
        return XDC_ERR_INVALID;
    }
    if (o->keep_unsent > 0 && o->mode >= 0 && o->mode != XDC_PLAN_DILOCO) {
        xdc_diag_set(diag, "keep_unsent needs mode diloco (asked: %s)", xdc_plan_mode_name((xdc_plan_mode)o->mode));
        return XDC_ERR_INVALID;
    }
    topo_codec_info ci;
    if (o->codec[0] && topo_codec_info_get(o->codec, 100, &ci) != XDC_OK) {
        char names[128];
        topo_codec_names(names, sizeof names);
        xdc_diag_set(diag, "unknown codec '%s' (%s)", o->codec, names);
        return XDC_ERR_INVALID;
    }
    if (xdc_topology_total_workers(t) < 1) {
        xdc_diag_set(diag, "topology %s has no workers", t->path);
        return XDC_ERR_UNAVAILABLE;
    }
    for (int r = 0; r < t->n_regions; r++)
        if (xdc_topology_region_workers(t, r) > 0 && !(t->regions[r].gpu_bf16_tflops > 0)) {
            xdc_diag_set(diag, "region %s: gpu bf16_tflops must be positive to plan", t->regions[r].name);
            return XDC_ERR_UNAVAILABLE;
        }
    return XDC_OK;
}

xdc_err_t xdc_plan_search(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                          const xdc_plan_opts *o, xdc_plan_set **out, xdc_diag *diag)
{
    *out = NULL;
    XDC_CHECK(check_inputs(t, m, b, o, diag));
    search s = {.t = t, .m = m, .b = b, .o = o, .global_tokens = b->global_batch_tokens};
    s.route = xdc_malloc((size_t)t->n_regions * (size_t)t->n_regions * sizeof *s.route);
    s.load = xdc_malloc((size_t)t->n_regions * (size_t)t->n_regions * sizeof *s.load);
    if (!s.route || !s.load) s.err = XDC_ERR_NOMEM;
    if (mode_allowed(&s, XDC_PLAN_SYNC) || mode_allowed(&s, XDC_PLAN_DILOCO) || mode_allowed(&s, XDC_PLAN_STREAMING))
        search_dp_sets(&s);
    if (t->n_regions > 1 && mode_allowed(&s, XDC_PLAN_PIPELINE) && o->keep_unsent <= 0 && !s.err) search_chains(&s);
    xdc_free(s.route);
    xdc_free(s.load);
    if (s.err) {
        xdc_free(s.cands);
        return s.err;
    }
    if (s.n == 0) {
        if (s.reject[0])
            xdc_diag_set(diag, "no plan fits: %s (%d candidates rejected; the model has %.3g parameters)", s.reject,
                         s.n_rej, m->params);
        else
            xdc_diag_set(diag, "no plan matches: the constraints (stages, mode, codec) leave no candidate for %s",
                         t->path);
        xdc_free(s.cands);
        return XDC_ERR_UNAVAILABLE;
    }
    xdc_plan_set *set = xdc_calloc(1, sizeof *set);
    xdc_err_t rc = set ? choose(&s, set) : XDC_ERR_NOMEM;
    xdc_free(s.cands);
    if (rc != XDC_OK) {
        xdc_free(set);
        return rc;
    }
    set->n_evaluated = s.n_eval + s.n_rej;
    set->n_rejected = s.n_rej;
    snprintf(set->reject_reason, sizeof set->reject_reason, "%s", s.reject);
    *out = set;
    return XDC_OK;
}

void xdc_plan_set_destroy(xdc_plan_set *s)
{
    if (!s) return;
    xdc_free(s->cands);
    xdc_free(s);
}

xdc_err_t xdc_plan_calibrate_compute(const xdc_topology *t, const xdc_plan *p, const double *measured_s, int n,
                                     xdc_plan_calib *calib)
{
    if (n < 1 || (n != 1 && n != p->stages)) return XDC_ERR_INVALID;
    for (int i = 0; i < n; i++)
        if (!(measured_s[i] > 0)) return XDC_ERR_INVALID;
    int r = p->stage[0].region >= 0 ? p->stage[0].region : 0;
    xdc_plan_calib unit = *calib; /* the topology's speed: predicted seconds per step of each stage */
    unit.compute_scale = 1.0;
    memset(unit.stage_scale, 0, sizeof unit.stage_scale);
    double pred[XDC_PLAN_MAX_STAGES];
    for (int i = 0; i < n; i++) {
        pred[i] = p->microbatches * topo_stage_compute_s(t, p->stage[i].region >= 0 ? p->stage[i].region : r, i,
                                                         p->stage[i].flops_mb, (double)p->micro_batch * p->seq_len,
                                                         &unit);
        if (!(pred[i] > 0)) return XDC_ERR_INVALID;
    }
    calib->compute_scale = measured_s[0] / pred[0];
    memset(calib->stage_scale, 0, sizeof calib->stage_scale);
    for (int i = 1; i < n; i++) calib->stage_scale[i] = measured_s[i] / pred[i] / calib->compute_scale;
    return XDC_OK;
}

xdc_err_t xdc_plan_replan_wan(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                              const xdc_plan_opts *o, const xdc_plan *cur, double measured_gbps, xdc_plan *out,
                              xdc_diag *diag)
{
    *out = *cur;
    if (!(measured_gbps > 0)) {
        xdc_diag_set(diag, "re-plan: measured goodput must be positive");
        return XDC_ERR_INVALID;
    }
    /* An overlapped round may be in flight at the check: the plan stays. Nobody waits keeps its period, the
     * budget the decider counts each round's steps in. */
    if (cur->overlap_steps) return XDC_OK;
    xdc_plan_opts ro = *o;
    ro.calib.wan_gbps = measured_gbps;
    if (cur->nobody_waits) ro.inner_steps = cur->inner_steps, ro.nobody_waits = 1;
    ro.stages = cur->stages;
    ro.microbatches = cur->microbatches;
    ro.micro_batch = cur->micro_batch;
    ro.bucket_mb = cur->bucket_mb;
    ro.all_regions = 0;
    if (cur->mode == XDC_PLAN_PIPELINE) ro.mode = XDC_PLAN_PIPELINE;
    xdc_plan_set *set = NULL;
    XDC_CHECK(xdc_plan_search(t, m, b, &ro, &set, diag));
    /* The first candidate in pick order with the same layout: same regions, replicas and layers. */
    for (int i = 0; i < set->n_cands; i++) {
        const xdc_plan *p = &set->cands[i];
        int same = (p->mode == XDC_PLAN_PIPELINE) == (cur->mode == XDC_PLAN_PIPELINE) &&
                   p->keep_unsent == cur->keep_unsent && memcmp(p->replicas, cur->replicas, sizeof p->replicas) == 0 &&
                   memcmp(p->replica_mb, cur->replica_mb, sizeof p->replica_mb) == 0; /* the run's counts stay */
        for (int k = 0; same && k < p->stages; k++)
            same = p->stage[k].region == cur->stage[k].region && p->stage[k].layer_begin == cur->stage[k].layer_begin &&
                   p->stage[k].layer_end == cur->stage[k].layer_end;
        if (same) {
            *out = *p;
            break;
        }
    }
    xdc_plan_set_destroy(set);
    return XDC_OK;
}

void xdc_plan_link_codec(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan *p, const xdc_plan_calib *c,
                         int from, int to, double tolerance, char codec[16], double *seconds)
{
    codec[0] = '\0';
    *seconds = 0;
    int pipeline = p->mode == XDC_PLAN_PIPELINE, crosses = 0;
    double raw = 0, hide = p->t_compute + p->t_bubble, latency = 0;
    if (pipeline) {
        /* Activations forward (or their gradients backward) at each cut over this link, every replica. */
        for (int i = 0; i + 1 < p->stages; i++) {
            int a = p->stage[i].region, b = p->stage[i + 1].region;
            crosses += (a == from && b == to) || (a == to && b == from);
        }
        raw = crosses * (double)p->replicas[from] * p->microbatches * p->micro_batch * p->seq_len *
              m->boundary_bytes_per_token;
    } else if (p->replicas[from] > 0 && p->replicas[to] > 0) {
        for (int i = 0; i < p->stages; i++) raw += 4 * p->stage[i].params;
        latency = topo_link_owd(t, from, to); /* each round waits for the peers' shards to land */
        if (p->mode == XDC_PLAN_STREAMING) raw /= p->fragments, hide *= (double)p->inner_steps / p->fragments;
        if (p->mode == XDC_PLAN_DILOCO) hide *= p->inner_steps;
        crosses = 1;
    }
    double bw = topo_link_Bps(t, from, to, c);
    if (!crosses || !(raw > 0) || !(bw > 0)) return;
    char ladder[MAX_CODECS][16];
    int n = topo_codec_ladder(pipeline, ladder, MAX_CODECS);
    const xdc_link *l = xdc_topology_link(t, from, to);
    for (int i = 0; i < n; i++) {
        topo_codec_info ci;
        if (pipeline) topo_act_codec_get(ladder[i], m, (double)p->micro_batch * p->seq_len, &ci);
        else topo_grad_codec_get(ladder[i], l->bandwidth_gbps, c, &ci);
        *seconds = raw * ci.ratio / bw + latency;
        snprintf(codec, 16, "%s", ladder[i]);
        if (*seconds <= tolerance * hide) break;
    }
}

const char *xdc_plan_codec_of_links(const xdc_topology *t)
{
    const xdc_codec_info *best = NULL;
    for (int i = 0; i < t->n_links; i++) {
        const char *c = strcmp(t->links[i].codec, "auto") == 0 ? "int8" : t->links[i].codec;
        const xdc_codec_info *info = xdc_codec_info_find(c, strcspn(c, ":"));
        if (info && (!best || info->lossiness > best->lossiness)) best = info;
    }
    return best ? best->name : "none";
}
