/* orch_plan.c — the runtime following the planner. With `plan: auto` in the run file, every process
 * (launcher, workers) runs the same deterministic search over the topology and the model file and takes
 * the mode, stages per replica, layer partition, microbatches and their size, WAN codec, bucket size, DiLoCo period,
 * keep_unsent, nobody waits and overlapped rounds
 * from the best plan the runtime can execute (every worker busy: replicas x stages = each region's
 * workers; a cross-region pipeline over all workers). Hand-set keys in the run file are constraints the
 * search respects. */
#include "orchestrator/runcfg/orch_run_config.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "compression/xdc_lowrank.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int runnable(const xdc_topology *t, const xdc_plan *p)
{
    if (p->mode == XDC_PLAN_PIPELINE) return p->stages == xdc_topology_total_workers(t) && p->n_chain == t->n_regions;
    for (int r = 0; r < t->n_regions; r++)
        if (p->replicas[r] * p->stages != xdc_topology_region_workers(t, r)) return 0;
    return 1;
}

/* The planner's inputs for this run: model shape, batch, constraints from hand-set keys. */
static void plan_inputs(const orch_run_config *c, const xdc_topology *t, xdc_model_shape *m, xdc_batch_shape *b,
                        xdc_plan_opts *o)
{
    const xdc_gpt_config *g = &c->train.model;
    xdc_model_shape_gpt(g->n_layer, g->n_head, g->n_embd, g->max_seq_len, g->vocab_size, m);
    /* The run file's microbatches set the tokens per optimizer step (microbatches x batch x sequence x
     * workers, as `xdc plan` reads it); the planner cuts that into microbatches for the stages it picks
     * (P stages per replica: P times the microbatches of one stage per replica). */
    *b = (xdc_batch_shape){.micro_batch = c->train.batch_size,
                           .seq_len = c->train.seq_len,
                           .global_batch_tokens = (double)c->train.microbatches * c->train.batch_size *
                                                  c->train.seq_len * xdc_topology_total_workers(t)};
    xdc_plan_opts d = XDC_PLAN_OPTS_INIT;
    *o = d;
    o->all_regions = 1;
    /* Keys the run file set by hand bind the search. */
    if (c->mode_set) o->mode = c->span_regions ? XDC_PLAN_PIPELINE : (int)c->mode;
    if (c->sync.delay_steps && !c->span_regions) o->mode = XDC_PLAN_SYNC; /* the option is sync mode's */
    o->delay_steps = c->sync.delay_steps;
    if (c->stages_set) o->stages = c->pipeline_stages;
    if (c->batch_size) o->micro_batch = c->batch_size;
    if (strcmp(c->codec, "link") != 0) snprintf(o->codec, sizeof o->codec, "%s", c->codec);
    if (c->diloco.keep_unsent) o->keep_unsent = 1; /* else the search may choose it */
    /* DiLoCo's nobody waits and overlapped rounds: set by hand they bind (DiLoCo plans with them only). The
     * slowdown is each region's pace, priced in every mode (sync and waiting DiLoCo wait for the slowest); a
     * mode the run file's checks refuse with it is passed over by orch_plan_apply. */
    if (c->diloco.nobody_waits) o->nobody_waits = 1;
    if (c->diloco.overlap_steps) o->overlap = 1;
    for (int r = 0; r < c->diloco.n_slowdown && r < t->n_regions; r++) o->calib.region_scale[r] = c->diloco.slowdown[r];
    o->steps = c->train.steps; /* the periods that leave the run enough outer rounds (xdc_plan_max_period) */
    o->calib.probe_flops = c->probe_flops;
    o->calib.probe_cores = c->probe_cores;
}

bool orch_plan_wants_probe(const orch_run_config *c) { return !c->plan_compute_topology; }

xdc_err_t orch_plan_probe_take(orch_run_config *c, xdc_diag *diag)
{
    c->probe_flops = 0;
    c->probe_cores = 0;
    const char *v = getenv(ORCH_PLAN_PROBE_ENV);
    if (!orch_plan_wants_probe(c) || !v) return XDC_OK;
    double flops;
    int cores, used = 0;
    if (sscanf(v, "%lf %d%n", &flops, &cores, &used) != 2 || v[used] != '\0' || !(flops > 0) || flops > 1e18 ||
        cores < 0 || cores > 65536) {
        xdc_diag_set(diag,
                     "%s='%s': want \"FLOPS CORES\" (FLOP/s > 0 of one worker, the cores its host's workers share, 0: "
                     "a core each)",
                     ORCH_PLAN_PROBE_ENV, v);
        return XDC_ERR_CONFIG;
    }
    c->probe_flops = flops;
    c->probe_cores = cores;
    return XDC_OK;
}

/* Plan p's settings into the run config c (the keys the run file set by hand stay); m and o: its search's inputs. */
static void take(orch_run_config *c, const xdc_topology *t, const xdc_plan *p, const xdc_model_shape *m,
                 const xdc_plan_opts *o)
{
    c->mode = p->mode == XDC_PLAN_DILOCO      ? ORCH_MODE_DILOCO
              : p->mode == XDC_PLAN_STREAMING ? ORCH_MODE_STREAMING
                                              : ORCH_MODE_SYNC;
    c->span_regions = p->mode == XDC_PLAN_PIPELINE;
    c->pipeline_stages = p->stages;
    c->microbatches = c->train.microbatches = p->microbatches;
    if (p->micro_batch != c->train.batch_size) { /* the planner's microbatch size; evaluation keeps its sequences */
        int eval_seqs = c->train.eval_batches * c->train.batch_size;
        c->train.batch_size = p->micro_batch;
        c->train.eval_batches = (eval_seqs + p->micro_batch - 1) / p->micro_batch;
    }
    if (p->bucket_mb > 0) c->bucket_mb = p->bucket_mb;
    /* A low-rank activation codec set by hand stays, with its ranks and bits; the plan may choose plain
     * lowrank itself (TOPO_PLAN_ACT_LOWRANK, docs/planner.md). */
    bool act_by_hand = xdc_lowrank_named(c->activation_codec);
    if (p->mode == XDC_PLAN_PIPELINE && !act_by_hand)
        snprintf(c->activation_codec, sizeof c->activation_codec, "%s", p->codec);
    else snprintf(c->codec, sizeof c->codec, "%s", p->codec);
    /* Each cut its link's own codec, the weakest that keeps it within the tolerance (a link's activation_codec
     * set by hand wins, orch_run_config_act_codec); the plan's one codec where the link sends nothing. */
    c->n_act_cut = 0;
    for (int i = 0; p->mode == XDC_PLAN_PIPELINE && !act_by_hand && i + 1 < p->n_chain && i < ORCH_MAX_STAGES; i++) {
        char codec[16];
        double sec;
        xdc_plan_link_codec(t, m, p, &o->calib, p->chain[i], p->chain[i + 1], o->tolerance, codec, &sec);
        /* interleaved 1F1B refuses lowrank across regions (orch_worker.c): such a cut keeps the plan's codec */
        if (!codec[0] || (c->pipeline_chunks > 1 && xdc_lowrank_named(codec))) continue;
        c->act_cut[c->n_act_cut].a = p->chain[i];
        c->act_cut[c->n_act_cut].b = p->chain[i + 1];
        snprintf(c->act_cut[c->n_act_cut++].codec, sizeof c->act_cut[0].codec, "%s", codec);
    }
    orch_run_config_outer_defaults(c);
    if (p->keep_unsent) { /* keys set by hand stay */
        c->diloco.keep_unsent = true;
        if (!c->diloco.final_codec[0])
            snprintf(c->diloco.final_codec, sizeof c->diloco.final_codec, "%s", p->final_codec);
        if (!c->diloco.outer_lr_set && p->outer_lr > 0) c->diloco.outer_lr = p->outer_lr;
    }
    /* Nobody waits: the decider counts each round's steps with the same paces (orch_run_config_pace). */
    if (p->nobody_waits) c->diloco.nobody_waits = true;
    if (p->overlap_steps && !c->diloco.overlap_steps) c->diloco.overlap_steps = p->overlap_steps;
    /* Unequal replicas: the plan's counts, one per replica, region by region (orch_run_config_replica_mb). */
    c->n_replica_mb = 0;
    for (int r = 0; p->mode == XDC_PLAN_SYNC && r < t->n_regions; r++)
        for (int i = 0; p->replica_mb[r] && i < p->replicas[r] && c->n_replica_mb < ORCH_MAX_REPLICA_MB; i++)
            c->replica_mb[c->n_replica_mb++] = p->replica_mb[r];
    if (p->inner_steps > 0) c->diloco.inner_steps = p->inner_steps;
    if (p->fragments > 0) c->streaming.fragments = p->fragments;
    /* The plan's layer partition (faster GPUs get more layers). */
    c->n_split = p->stages <= ORCH_MAX_STAGES ? p->stages : 0;
    for (int s = 0; s < c->n_split; s++) c->stage_layer_begin[s] = p->stage[s].layer_begin;
    c->stage_layer_begin[c->n_split] = c->train.model.n_layer;
}

xdc_err_t orch_run_config_pace(const orch_run_config *c, const xdc_topology *t, double *pace, xdc_diag *diag)
{
    /* the probe's figure too (plan: auto): on a shared host a slowed region computes while the others do, so its
     * pace is more than its slowdown (xdc_plan_host_share), and the plan's counts were made with it */
    xdc_plan_calib calib = {.mfu = 0.4, .compute_scale = 1.0};
    calib.probe_flops = c->probe_flops;
    calib.probe_cores = c->probe_cores;
    XDC_CHECK(orch_run_config_slowdown(c, t->n_regions, calib.region_scale, diag));
    xdc_plan_region_pace(t, &calib, NULL, pace);
    return XDC_OK;
}

xdc_err_t orch_run_config_act_codec(const orch_run_config *c, const xdc_topology *t, int a, int b, const char **codec,
                                    xdc_diag *diag)
{
    const xdc_link *ab = xdc_topology_link(t, a, b), *ba = xdc_topology_link(t, b, a);
    const char *x = ab ? ab->act_codec : "", *y = ba ? ba->act_codec : "";
    if (x[0] && y[0] && strcmp(x, y) != 0) {
        /* both directions of a cut carry one message sequence each way; one codec keeps the rule simple */
        xdc_diag_set(diag, "links %s -> %s and %s -> %s: activation_codec %s and %s differ; a pipeline cut has one",
                     t->regions[a].name, t->regions[b].name, t->regions[b].name, t->regions[a].name, x, y);
        return XDC_ERR_CONFIG;
    }
    *codec = x[0] ? x : y[0] ? y : c->activation_codec;
    for (int i = 0; !x[0] && !y[0] && i < c->n_act_cut; i++)
        if ((c->act_cut[i].a == a && c->act_cut[i].b == b) || (c->act_cut[i].a == b && c->act_cut[i].b == a))
            *codec = c->act_cut[i].codec;
    return XDC_OK;
}

xdc_err_t orch_plan_apply(orch_run_config *c, const xdc_topology *t, orch_planned *out, xdc_diag *diag)
{
    XDC_CHECK(orch_plan_probe_take(c, diag));
    plan_inputs(c, t, &out->m, &out->b, &out->o);
    xdc_plan_set *set;
    XDC_CHECK(xdc_plan_search(t, &out->m, &out->b, &out->o, &set, diag));
    /* The first plan in pick order the runtime runs: every worker busy, and settings the run's own keys allow
     * (orch_run_config_check: e.g. overlapped rounds need checkpoint_every a multiple of the planned period). */
    orch_run_config *trial = xdc_malloc(sizeof *trial);
    const xdc_plan *p = NULL;
    for (int i = 0; trial && i < set->n_cands && !p; i++) {
        if (!runnable(t, &set->cands[i])) continue;
        xdc_cfg_errors errs;
        xdc_cfg_errors_init(&errs, c->path);
        *trial = *c;
        take(trial, t, &set->cands[i], &out->m, &out->o);
        if (orch_run_config_check(trial, true, &errs) == XDC_OK) p = &set->cands[i];
    }
    if (!p) {
        xdc_diag_set(diag,
                     trial
                         ? "plan: none of the %d feasible plans keeps every worker busy (replicas x stages must "
                           "equal each region's workers) with settings the run file allows; set pipeline_stages by hand"
                         : "plan: out of memory (%d plans)",
                     set->n_cands);
        xdc_free(trial);
        xdc_plan_set_destroy(set);
        return trial ? XDC_ERR_UNAVAILABLE : XDC_ERR_NOMEM;
    }
    out->plan = *p;
    *c = *trial;
    xdc_free(trial);
    xdc_plan_set_destroy(set);
    return XDC_OK;
}

void orch_plan_describe(const orch_run_config *c, const xdc_topology *t, const xdc_plan *p, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "plan: %s, %d stage%s per replica (layers", xdc_plan_mode_name(p->mode),
                                p->stages, p->stages == 1 ? "" : "s");
    for (int s = 0; s < c->n_split && n < cap; s++)
        n += (size_t)snprintf(buf + n, cap - n, " %d-%d", c->stage_layer_begin[s], c->stage_layer_begin[s + 1] - 1);
    if (n < cap)
        snprintf(buf + n, cap - n,
                 "), %d microbatches%s of %d sequences, codec %s, bucket %.2g MiB%s%s%s%s; predicted step %.3f s "
                 "(compute %.3f, exposed WAN %.3f)",
                 p->microbatches,
                 c->n_replica_mb ? " per replica on average (unequal replicas: microbatches_per_replica)" : "",
                 p->micro_batch, p->codec, c->bucket_mb,
                 p->mode == XDC_PLAN_DILOCO || p->mode == XDC_PLAN_STREAMING ? ", with an outer period" : "",
                 p->keep_unsent ? ", keep_unsent (last round in the final codec)" : "",
                 p->nobody_waits ? ", nobody waits (each region's inner steps by its pace)" : "",
                 p->overlap_steps ? ", the round overlapped with the next inner step" : "", p->t_step, p->t_compute,
                 p->t_wan_exposed);
    n = strlen(buf);
    if (n + 2 < cap) {
        snprintf(buf + n, cap - n, "; ");
        orch_plan_compute_describe(c, t, buf + n + 2, cap - n - 2);
    }
}

void orch_plan_compute_describe(const orch_run_config *c, const xdc_topology *t, char *buf, size_t cap)
{
    xdc_plan_calib calib = {.probe_flops = c->probe_flops, .probe_cores = c->probe_cores};
    orch_run_config_slowdown(c, t->n_regions, calib.region_scale, NULL); /* checked when the run file was planned */
    /* the regions' shares of a core: a slowed region's is the lowest */
    double lo = 1, hi = 0;
    for (int r = 0; r < t->n_regions; r++) {
        lo = fmin(lo, xdc_plan_host_share(t, r, &calib));
        hi = fmax(hi, xdc_plan_host_share(t, r, &calib));
    }
    char slowed[48] = "";
    if (lo < hi) snprintf(slowed, sizeof slowed, ", a slowed region's x%.3f", lo);
    if (c->probe_flops > 0 && c->probe_cores > 0)
        snprintf(
            buf, cap,
            "compute calibrated on this machine: %.3g GFLOP/s a worker (probe %.3g GFLOP/s alone, x%.3f of a core: "
            "%d workers share %d cores%s)",
            c->probe_flops * hi / 1e9, c->probe_flops / 1e9, hi, xdc_topology_total_workers(t), c->probe_cores, slowed);
    else if (c->probe_flops > 0)
        snprintf(buf, cap, "compute calibrated on this machine: %.3g GFLOP/s a worker (probe)", c->probe_flops / 1e9);
    else snprintf(buf, cap, "compute from the topology (bf16_tflops x MFU 0.4, not calibrated)");
}
