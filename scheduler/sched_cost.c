/* sched_cost.c — the cost model's building blocks shared by the planner and the simulator: stage FLOPs
 * and memory (from the model's shape, model/xdc_model_shape.h), codec wire ratios and speeds (from
 * compression's codec table), effective region and link speeds, and the comm engine's per-bucket timing
 * (docs/planner.md derives each formula). */
#include "scheduler/sched_priv.h"

#include "compression/xdc_lowrank.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double topo_stage_flops(const xdc_model_shape *m, int lb, int le, double tokens, int seq_len)
{
    /* Backward costs twice the forward. */
    return 3 * xdc_model_shape_fwd_flops_per_token(m, lb, le, seq_len) * tokens;
}

double topo_stage_act_bytes(const xdc_model_shape *m, int lb, int le, int inflight, int batch, int seq_len)
{
    return inflight * xdc_model_shape_slot_bytes(m, lb, le, batch, seq_len);
}

double topo_stage_mem_gib(const xdc_model_shape *m, int lb, int le, int inflight, int batch, int seq_len,
                          double extra_bytes_per_param)
{
    double p = xdc_model_shape_stage_params(m, lb, le);
    double bytes = p * (m->bytes_per_param + m->optim_bytes_per_param + extra_bytes_per_param);
    /* The activation slots of the microbatches in flight, and the one backward scratch. */
    bytes += topo_stage_act_bytes(m, lb, le, inflight, batch, seq_len);
    bytes += xdc_model_shape_scratch_bytes(m, lb, le, batch, seq_len);
    /* The pipeline boundary buffers: one microbatch each, whatever the microbatch count. */
    bytes += xdc_model_shape_boundary_bytes(m, lb, le, batch, seq_len);
    return bytes / (1024.0 * 1024.0 * 1024.0);
}

void topo_even_split(int layers, int parts, int i, int *lb, int *le)
{
    int base = layers / parts, extra = layers % parts;
    *lb = i * base + (i < extra ? i : extra);
    *le = *lb + base + (i < extra ? 1 : 0);
}

double topo_chunks_mem_gib(const xdc_model_shape *m, int P, int stage, int chunks, int M, int batch, int seq_len,
                           double extra_bytes_per_param, double *act_bytes, int *inflight, double *params,
                           double *flops_mb)
{
    double bytes = 2 * (double)batch * seq_len * m->boundary_bytes_per_token; /* x_in, dy_in */
    *act_bytes = *params = *flops_mb = 0;
    *inflight = 0;
    for (int k = 0; k < chunks; k++) {
        int lb, le, slots = xdc_model_shape_interleaved_inflight(P, stage, chunks, M, k);
        topo_even_split(m->layers, P * chunks, stage + k * P, &lb, &le);
        double p = xdc_model_shape_stage_params(m, lb, le),
               act = topo_stage_act_bytes(m, lb, le, slots, batch, seq_len);
        bytes += p * (m->bytes_per_param + m->optim_bytes_per_param + extra_bytes_per_param) + act +
                 xdc_model_shape_scratch_bytes(m, lb, le, batch, seq_len);
        *act_bytes += act;
        *inflight += slots;
        *params += p;
        *flops_mb += topo_stage_flops(m, lb, le, (double)batch * seq_len, seq_len);
    }
    return bytes / (1024.0 * 1024.0 * 1024.0);
}

static const char *const sparse_variants[] = TOPO_PLAN_SPARSE_VARIANTS;
#define N_SPARSE_VARIANTS (int)(sizeof sparse_variants / sizeof sparse_variants[0])

/* Place of a sparse codec's "F:B" among the search's variants; past the end for any other. */
static int sparse_variant(const char *param)
{
    int i = 0;
    while (i < N_SPARSE_VARIANTS && strcmp(param, sparse_variants[i]) != 0) i++;
    return i;
}

int topo_sparse_variant(const char *name)
{
    const char *param = strncmp(name, "sparse:", 7) == 0 ? name + 7 : NULL;
    int i = param ? sparse_variant(param) : 0;
    return i < N_SPARSE_VARIANTS ? i : N_SPARSE_VARIANTS;
}

xdc_err_t topo_codec_info_get(const char *name, double link_gbps, topo_codec_info *out)
{
    xdc_codec_estimate e;
    const xdc_codec_info *info;
    if (xdc_codec_estimate_for(name, link_gbps, &e, &info) != XDC_OK) return XDC_ERR_INVALID;
    int rank = info->lossiness;
    if (info->kind == XDC_CODEC_SPARSE) rank += sparse_variant(strchr(name, ':') + 1);
    *out = (topo_codec_info){.ratio = e.ratio, .enc_Bps = e.enc_Bps, .dec_Bps = e.dec_Bps, .rank = rank};
    return XDC_OK;
}

xdc_err_t topo_grad_codec_get(const char *name, double link_gbps, const xdc_plan_calib *c, topo_codec_info *out)
{
    XDC_CHECK(topo_codec_info_get(name, link_gbps, out));
    if (c && c->wire_ratio > 0 && strcmp(c->ratio_codec, name) == 0) out->ratio = c->wire_ratio;
    return XDC_OK;
}

xdc_err_t topo_act_codec_get(const char *name, const xdc_model_shape *m, double tokens, topo_codec_info *out)
{
    if (!xdc_lowrank_named(name)) return topo_codec_info_get(name, 100, out);
    double ratio, flops;
    if (xdc_lowrank_estimate(name, m->width, (size_t)tokens, &ratio, &flops, NULL) != XDC_OK) return XDC_ERR_INVALID;
    /* Encode and decode of one activation (and, in turn, one gradient) take flops / 2 of host time: half each. */
    double Bps = 4.0 * tokens * m->width / (flops / 2 / TOPO_PLAN_HOST_FLOPS) * 2;
    *out = (topo_codec_info){.ratio = ratio, .enc_Bps = Bps, .dec_Bps = Bps, .rank = TOPO_PLAN_ACT_LOWRANK_FIDELITY};
    return XDC_OK;
}

int topo_codec_ladder(bool activations, char names[][16], int cap)
{
    int n = 0;
    for (size_t i = 0; i < xdc_codec_info_count() && n < cap; i++) {
        const xdc_codec_info *c = xdc_codec_info_at(i);
        if (activations && !c->for_activations) continue;
        if (c->kind == XDC_CODEC_SPARSE)
            for (int v = 0; v < N_SPARSE_VARIANTS && n < cap; v++)
                snprintf(names[n++], 16, "%s:%s", c->name, sparse_variants[v]);
        else if (c->param_in_size) snprintf(names[n++], 16, "%s:%g", c->name, TOPO_PLAN_TOPK_FRACTION);
        else snprintf(names[n++], 16, "%s", c->name);
    }
    if (activations && n < cap) snprintf(names[n++], 16, "%s", TOPO_PLAN_ACT_LOWRANK);
    return n;
}

void topo_codec_names(char *buf, size_t cap)
{
    buf[0] = '\0';
    for (size_t i = 0; i < xdc_codec_info_count(); i++) {
        const xdc_codec_info *c = xdc_codec_info_at(i);
        snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s%s", i ? "|" : "", c->name,
                 c->kind == XDC_CODEC_SPARSE ? ":F:B"
                 : c->param_in_size          ? ":F"
                                             : "");
    }
}

/* Workers up to which xdc_plan_host_share counts the others' computing exactly; past it, the mean demand. */
#define HOST_SHARE_EXACT 64

double xdc_plan_host_share(const xdc_topology *t, int r, const xdc_plan_calib *c)
{
    if (!c || c->probe_cores <= 0) return 1;
    double demand = 0;
    for (int j = 0; j < t->n_regions; j++)
        demand += xdc_topology_region_workers(t, j) / (c->region_scale[j] > 1 ? c->region_scale[j] : 1);
    if (xdc_topology_total_workers(t) > HOST_SHARE_EXACT) return demand > c->probe_cores ? c->probe_cores / demand : 1;
    /* Worker j computes a fraction 1 / slowdown_j of the time (the rest its sleep), independently of the others:
     * pk[k] is the chance that k of the other workers compute while one of region r does. */
    double pk[HOST_SHARE_EXACT + 1] = {1}; /* (others + 1) probabilities */
    int n = 0;
    for (int j = 0; j < t->n_regions; j++) {
        double p = c->region_scale[j] > 1 ? 1 / c->region_scale[j] : 1;
        for (int i = xdc_topology_region_workers(t, j) - (j == r); i > 0; i--, n++)
            for (int k = n + 1; k >= 0; k--) pk[k] = pk[k] * (1 - p) + (k > 0 ? pk[k - 1] * p : 0);
    }
    double share = 0;
    for (int k = 0; k <= n; k++) share += pk[k] * fmin(1, c->probe_cores / (k + 1.0));
    return share;
}

double xdc_plan_probe_flops(const xdc_topology *t, const xdc_model_shape *m, double tokens, int seq_len, double seconds)
{
    if (!(seconds > 0) || !(tokens > 0) || t->n_regions < 1) return 0;
    return topo_stage_flops(m, 0, m->layers, tokens, seq_len) / seconds * (1 + topo_region_half_tokens(t, 0) / tokens);
}

double topo_region_flops(const xdc_topology *t, int r, const xdc_plan_calib *c)
{
    double mfu = c && c->mfu > 0 ? c->mfu : 0.4;
    double scale = c && c->compute_scale > 0 ? c->compute_scale : 1.0;
    if (c && r >= 0 && r < XDC_TOPO_MAX_REGIONS && c->region_scale[r] > 0) scale *= c->region_scale[r];
    /* The probe's speed, shared with the host's other workers, else the topology's peak at the assumed MFU. */
    double flops = c && c->probe_flops > 0 ? c->probe_flops * xdc_plan_host_share(t, r, c)
                                           : t->regions[r].gpu_bf16_tflops * 1e12 * mfu;
    return flops / scale;
}

void xdc_plan_region_pace(const xdc_topology *t, const xdc_plan_calib *c, const unsigned char *in, double *pace)
{
    double fastest = 0;
    for (int r = 0; r < t->n_regions; r++)
        if (in ? in[r] : xdc_topology_region_workers(t, r) > 0) fastest = fmax(fastest, topo_region_flops(t, r, c));
    for (int r = 0; r < t->n_regions; r++)
        pace[r] = (in ? in[r] : xdc_topology_region_workers(t, r) > 0) ? fastest / topo_region_flops(t, r, c) : 0;
}

int xdc_plan_round_steps(int budget, double pace)
{
    int n = (int)floor((double)budget / (pace >= 1.0 ? pace : 1.0) + 1e-9);
    return n < 1 ? 1 : n;
}

long long xdc_plan_round_ran(int steps, int budget, long long p) { return (p * steps + budget - 1) / budget; }

bool xdc_plan_round_runs(int steps, int budget, int p)
{
    return xdc_plan_round_ran(steps, budget, p + 1) > xdc_plan_round_ran(steps, budget, p);
}

double topo_region_half_tokens(const xdc_topology *t, int r)
{
    return t->regions[r].gpus_per_node > 0 ? TOPO_PLAN_GPU_HALF_TOKENS : TOPO_PLAN_CPU_HALF_TOKENS;
}

double topo_stage_compute_s(const xdc_topology *t, int r, int stage, double flops, double tokens,
                            const xdc_plan_calib *c)
{
    double f = c && stage >= 0 && stage < XDC_PLAN_MAX_STAGES && c->stage_scale[stage] > 0 ? c->stage_scale[stage] : 1;
    return flops / topo_region_flops(t, r, c) * (1 + topo_region_half_tokens(t, r) / tokens) * f;
}

double topo_link_Bps(const xdc_topology *t, int from, int to, const xdc_plan_calib *c)
{
    const xdc_link *l = xdc_topology_link(t, from, to);
    if (!l) return 0;
    if (c && c->wan_gbps > 0) return c->wan_gbps * 1e9 / 8;
    double bps = l->bandwidth_gbps * 1e9;
    if (l->loss_pct > 0 && l->rtt_ms > 0) {
        /* Mathis et al.: one Reno-like flow reaches ~1.22 MSS / (RTT sqrt(p)); streams add up. */
        double mss = (l->mtu > 100 ? l->mtu : 1500) - 40;
        double flow = 1.22 * mss * 8 / (l->rtt_ms / 1e3 * sqrt(l->loss_pct / 100));
        double cap = flow * (l->streams > 0 ? l->streams : 1);
        if (cap < bps) bps = cap;
    }
    return bps / 8;
}

double topo_link_owd(const xdc_topology *t, int from, int to)
{
    const xdc_link *l = xdc_topology_link(t, from, to);
    return l ? l->rtt_ms / 2e3 : 0;
}

double topo_intra_p2p_s(const xdc_topology *t, int r, double bytes, const xdc_plan_calib *c)
{
    if (c && c->intra_p2p_s > 0) return c->intra_p2p_s;
    const xdc_region *g = &t->regions[r];
    double bw = g->intra_bandwidth_gbps > 0 ? g->intra_bandwidth_gbps * 1e9 / 8 : 1e10;
    return g->intra_latency_us * 1e-6 + bytes / bw;
}

double topo_intra_collective_s(const xdc_topology *t, int r, int ranks, double bytes)
{
    if (ranks <= 1) return 0;
    const xdc_region *g = &t->regions[r];
    double bw = g->intra_bandwidth_gbps > 0 ? g->intra_bandwidth_gbps * 1e9 / 8 : 1e10;
    return (ranks - 1) * (g->intra_latency_us * 1e-6 + bytes / ranks / bw);
}

void topo_bucket_cost_get(const xdc_topology *t, int r, int ranks, int lanes, int n_regions, double elems,
                          const topo_codec_info *ci, topo_bucket_cost *out)
{
    if (n_regions < 2 || lanes < 1 || lanes > ranks) lanes = ranks > 0 ? ranks : 1;
    double bytes = 4 * elems, shard = bytes / lanes;
    double coll = topo_intra_collective_s(t, r, ranks, bytes);
    out->t_a = lanes < ranks ? 2 * coll : coll; /* more replicas than lanes: an all-reduce */
    out->t_b = coll;
    out->wire = 0;
    if (n_regions > 1) {
        out->t_a += shard / ci->enc_Bps;
        out->t_b += n_regions * shard / ci->dec_Bps;
        out->wire = shard * ci->ratio;
    }
}

double topo_step_allreduce_s(const xdc_topology *t, const xdc_plan *p, const xdc_plan_calib *c)
{
    double worst = 0, s = 0;
    if (p->mode == XDC_PLAN_PIPELINE) {
        for (int i = 0; i + 1 < p->stages; i++) {
            int a = p->stage[i].region, b = p->stage[i + 1].region;
            s += 2 * (a == b ? topo_intra_p2p_s(t, a, 8, c) : topo_link_owd(t, a, b) + TOPO_PLAN_MSG_OVERHEAD_S);
        }
        return s;
    }
    for (int r = 0; r < t->n_regions; r++)
        if (p->replicas[r] > 0) worst = fmax(worst, 2 * (p->stages - 1) * topo_intra_p2p_s(t, r, 8, c));
    return worst;
}

int xdc_plan_lanes(const xdc_topology *t, const xdc_plan *p)
{
    int lanes = 0;
    for (int r = 0; r < t->n_regions; r++)
        if (p->replicas[r] > 0 && (lanes == 0 || p->replicas[r] < lanes)) lanes = p->replicas[r];
    return lanes;
}

int topo_plan_n_buckets(double params, double bucket_elems)
{
    double n = ceil(params / (bucket_elems > 0 ? bucket_elems : params));
    return n < 1 ? 1 : n > 1e9 ? 1000000000 : (int)n;
}

/* The engine thread's time once it has finished (B) buckets fin..n-1 from `thread`, bucket j's shards
 * landing at arr[j] (bucket 0 is the tail). */
static double finish_from(double thread, const double *arr, int fin, int n, const topo_bucket_cost *tail,
                          const topo_bucket_cost *full)
{
    for (int j = fin; j < n; j++) thread = fmax(thread, arr[j]) + (j == 0 ? tail : full)->t_b;
    return thread;
}

double topo_sync_round_s(const xdc_topology *t, int r, int ranks, int lanes, int n_regions, double params,
                         double bucket_elems, double overlap_s, const topo_codec_info *ci, double link_Bps, double owd,
                         double *intra_s, double *wire_bytes)
{
    int k = topo_plan_n_buckets(params, bucket_elems);
    double last = params - (double)(k - 1) * bucket_elems;
    topo_bucket_cost full, tail;
    if (n_regions < 2 || lanes < 1 || lanes > ranks) lanes = ranks > 0 ? ranks : 1;
    topo_bucket_cost_get(t, r, ranks, lanes, n_regions, k > 1 ? bucket_elems : params, ci, &full);
    topo_bucket_cost_get(t, r, ranks, lanes, n_regions, last, ci, &tail);
    /* The wire carries every lane's shard: the whole bucket, encoded. */
    *wire_bytes = n_regions > 1 ? ((k - 1) * full.wire + tail.wire) * lanes : 0;
    int wide = lanes < ranks ? 3 : 2; /* all-reduce + broadcasts, or reduce-scatter + all-gather */
    *intra_s = (k - 1) * (wide * topo_intra_collective_s(t, r, ranks, 4 * bucket_elems)) +
               wide * topo_intra_collective_s(t, r, ranks, 4 * last);
    /* Buckets go from the top of the arena (the short tail bucket first) down to offset 0, in the order
     * the last backward finishes their gradients: bucket j is ready once the backward has covered the
     * parameters above its start (proportional to parameters, over overlap_s). The engine thread
     * (sync/sync_engine.c run_round) runs A(j) once bucket j is ready. With in-region replicas its order is
     * fixed: A(0), then A(j), B(j-1) for j = 1..k-1, then B(k-1). Without, a send never waits for another
     * region: while bucket j is not ready the thread finishes the oldest bucket in flight only if its
     * shards have landed, and the rest after the last A. B(j) waits for bucket j from the other regions,
     * which left when their A(j) ended (symmetric regions), queued on the link behind earlier buckets, and
     * landed one-way later. Past 4096 buckets the period is steady: extrapolate. */
    double arr[4096]; /* (lim) when bucket j's shards landed, s */
    double thread = 0, link = 0, t_half = 0;
    int lim = k < 4096 ? k : 4096, fin = 0; /* fin: the oldest bucket not finished (B) yet */
    for (int j = 0; j < lim; j++) {
        const topo_bucket_cost *c = j == 0 ? &tail : &full;
        double above = j == 0 ? last : last + (double)j * bucket_elems;
        double ready = k == 1 ? overlap_s : overlap_s * (above < params ? above : params) / params;
        while (ranks == 1 && fin < j && fmax(thread, arr[fin]) < ready) {
            thread = fmax(thread, arr[fin]) + (fin == 0 ? tail.t_b : full.t_b);
            fin++;
        }
        if (ready > thread) thread = ready;
        thread += c->t_a;
        arr[j] = thread;
        if (n_regions > 1) {
            double start = thread > link ? thread : link;
            link = start + c->wire * lanes / link_Bps;
            arr[j] = link + owd + TOPO_PLAN_MSG_OVERHEAD_S;
        }
        if (ranks > 1 && j > 0) {
            thread = fmax(thread, arr[j - 1]) + (j == 1 ? tail.t_b : full.t_b);
            fin = j;
        }
        if (j == lim / 2 - 1) t_half = finish_from(thread, arr, fin, j + 1, &tail, &full);
    }
    double end = finish_from(thread, arr, fin, lim, &tail, &full);
    if (k > lim) end += (double)(k - lim) * (end - t_half) / (lim - lim / 2);
    return end;
}
