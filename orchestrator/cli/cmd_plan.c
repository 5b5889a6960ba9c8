/* cmd_plan.c — `xdc plan -t TOPOLOGY -m MODEL.yaml [--json] [--explain] [--global-batch N] [constraints]`:
 * load the topology and the model file, search plans (topology/xdc_plan.h) and print the chosen one with
 * its predicted step time split, WAN bytes, egress cost and memory, the runners-up with why they lost,
 * and with --explain every candidate considered. Also the input loading `xdc simulate` shares. */
#include "orchestrator/cli/cmd_plan.h"

#include "common/xdc_parse.h"
#include "common/xdc_alloc.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "orchestrator/cli/xdc_cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* Print a config failure and release what plan_inputs_load had loaded. */
static int config_failed(plan_inputs *in, const char *path, xdc_err_t rc, xdc_cfg_errors *errs)
{
    plan_inputs_free(in);
    xdc_cfg_errors_print(errs, stderr);
    if (errs->count == 0) fprintf(stderr, "%s: error: %s\n", path, xdc_strerror(rc));
    return XDC_EX_CONFIG;
}

static void codec_constraint(const plan_inputs *in, const char *codec, char *out, size_t cap)
{
    /* The run file's "link" resolves as the runtime resolves it; "auto" means int8. */
    if (strcmp(codec, "link") == 0) codec = xdc_plan_codec_of_links(in->topo);
    if (strcmp(codec, "auto") == 0 || strcmp(codec, "topk") == 0) codec = strcmp(codec, "topk") ? "int8" : "topk:0.01";
    snprintf(out, cap, "%s", codec);
}

int plan_inputs_load(const char *topo_path, const char *model_path, const char *run_path, double global_tokens,
                     plan_inputs *in)
{
    memset(in, 0, sizeof *in);
    in->opts = (xdc_plan_opts)XDC_PLAN_OPTS_INIT;
    xdc_cfg_errors errs;
    xdc_err_t rc = xdc_topology_load(topo_path, &in->topo, &errs);
    if (rc != XDC_OK) return config_failed(in, topo_path, rc, &errs);
    xdc_train_config tc;
    if (run_path) {
        static orch_run_config run; /* large; one command loads one */
        rc = orch_run_config_load(run_path, &run, &errs);
        if (rc != XDC_OK) return config_failed(in, run_path, rc, &errs);
        /* The run as planned on this machine: its compute probe, unless the file keeps the topology's model. */
        int ex = xdc_cli_plan_probe("plan", &run, in->topo, NULL, NULL);
        xdc_diag prd = {{0}};
        if (ex == XDC_EX_OK && orch_plan_probe_take(&run, &prd) != XDC_OK) {
            fprintf(stderr, "%s: error: %s\n", run_path, prd.msg);
            ex = XDC_EX_CONFIG;
        }
        if (ex != XDC_EX_OK) {
            plan_inputs_free(in);
            return ex;
        }
        if (run.plan_auto) { /* the run as `xdc launch` runs it: with the plan it takes */
            static orch_planned planned;
            xdc_diag pd = {{0}};
            rc = orch_plan_apply(&run, in->topo, &planned, &pd);
            if (rc != XDC_OK) {
                fprintf(stderr, "%s: plan: auto: %s\n", run_path, pd.msg[0] ? pd.msg : xdc_strerror(rc));
                plan_inputs_free(in);
                return xdc_cli_exit_code(rc);
            }
        }
        tc = run.train;
        snprintf(in->model_path, sizeof in->model_path, "%s", run.model_path);
        xdc_plan_opts *o = &in->opts;
        o->all_regions = 1; /* xdc launch runs every region of the topology */
        o->mode = run.span_regions                  ? XDC_PLAN_PIPELINE
                  : run.mode == ORCH_MODE_DILOCO    ? XDC_PLAN_DILOCO
                  : run.mode == ORCH_MODE_STREAMING ? XDC_PLAN_STREAMING
                                                    : XDC_PLAN_SYNC;
        /* span_regions: one pipeline over every worker of every region (one replica). */
        o->stages = run.span_regions ? xdc_topology_total_workers(in->topo) : run.pipeline_stages;
        o->microbatches = run.microbatches;
        codec_constraint(in, run.span_regions ? run.activation_codec : run.codec, o->codec, sizeof o->codec);
        o->bucket_mb = run.bucket_mb;
        if (run.mode != ORCH_MODE_SYNC) o->inner_steps = run.diloco.inner_steps;
        if (run.mode == ORCH_MODE_STREAMING) o->fragments = run.streaming.fragments;
        o->keep_unsent = run.diloco.keep_unsent ? 1 : -1; /* the run as written */
        o->nobody_waits = run.diloco.nobody_waits ? 1 : -1;
        o->overlap = run.diloco.overlap_steps ? 1 : -1;
        double pace[XDC_TOPO_MAX_REGIONS]; /* diloco.slowdown: the regions' paces the plan prices */
        xdc_diag pd = {{0}};
        if (orch_run_config_slowdown(&run, in->topo->n_regions, pace, &pd) != XDC_OK) {
            fprintf(stderr, "%s: error: %s\n", run_path, pd.msg);
            plan_inputs_free(in);
            return XDC_EX_CONFIG;
        }
        memcpy(o->calib.region_scale, pace, (size_t)in->topo->n_regions * sizeof *pace);
        o->calib.probe_flops = run.probe_flops;
        o->calib.probe_cores = run.probe_cores;
        orch_plan_compute_describe(&run, in->topo, in->compute, sizeof in->compute);
        o->delay_steps = run.sync.delay_steps;
        o->chunks = run.pipeline_chunks;
        o->steps = run.train.steps;
    } else {
        rc = xdc_model_config_load(model_path, &tc, &errs);
        if (rc != XDC_OK) return config_failed(in, model_path, rc, &errs);
        snprintf(in->model_path, sizeof in->model_path, "%s", model_path);
        snprintf(in->compute, sizeof in->compute,
                 "compute from the topology (bf16_tflops x MFU, not calibrated: -c RUN.yaml probes this machine)");
    }
    const xdc_gpt_config *g = &tc.model;
    xdc_model_shape_gpt(g->n_layer, g->n_head, g->n_embd, g->max_seq_len, g->vocab_size, &in->shape);
    in->batch.micro_batch = tc.batch_size;
    in->batch.seq_len = tc.seq_len;
    in->batch.global_batch_tokens = global_tokens > 0 ? global_tokens
                                                      : (double)tc.batch_size * tc.seq_len * tc.microbatches *
                                                            xdc_topology_total_workers(in->topo);
    return XDC_EX_OK;
}

void plan_inputs_free(plan_inputs *in)
{
    xdc_topology_destroy(in->topo);
    in->topo = NULL;
}

int plan_inputs_search(plan_inputs *in, xdc_plan_set **out)
{
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_plan_search(in->topo, &in->shape, &in->batch, &in->opts, out, &d);
    if (rc == XDC_OK) return XDC_EX_OK;
    fprintf(stderr, "xdc plan: %s: %s\n", in->topo->path, d.msg[0] ? d.msg : xdc_strerror(rc));
    /* The planner's INVALID is a request the files make impossible: a configuration error here. */
    return xdc_cli_exit_code(rc == XDC_ERR_INVALID ? XDC_ERR_CONFIG : rc);
}

static void plan_oneline(FILE *f, const xdc_topology *t, const xdc_plan *p)
{
    char what[160];
    if (p->mode == XDC_PLAN_PIPELINE) {
        int n = 0;
        n += snprintf(what + n, sizeof what - n, "pipeline ");
        for (int i = 0; i < p->n_chain && n < (int)sizeof what - 40; i++)
            n += snprintf(what + n, sizeof what - n, "%s%s", i ? ">" : "", t->regions[p->chain[i]].name);
        snprintf(what + n, sizeof what - n, " P=%d D=%d act=%s", p->stages, p->replicas[p->chain[0]], p->codec);
    } else {
        int used = 0;
        for (int r = 0; r < t->n_regions; r++) used += p->replicas[r] > 0;
        snprintf(what, sizeof what, "%s regions=%d P=%d %s bucket=%gMiB", xdc_plan_mode_name(p->mode), used, p->stages,
                 p->codec, p->bucket_mb);
        if (p->inner_steps) snprintf(what + strlen(what), sizeof what - strlen(what), " H=%d", p->inner_steps);
        if (p->fragments) snprintf(what + strlen(what), sizeof what - strlen(what), " F=%d", p->fragments);
        if (p->keep_unsent) snprintf(what + strlen(what), sizeof what - strlen(what), " keep_unsent");
        if (p->nobody_waits) snprintf(what + strlen(what), sizeof what - strlen(what), " nobody_waits");
        if (p->overlap_steps)
            snprintf(what + strlen(what), sizeof what - strlen(what), " overlap=%d", p->overlap_steps);
        if (p->delay_steps) snprintf(what + strlen(what), sizeof what - strlen(what), " delay=%d", p->delay_steps);
        if (p->chunks > 1) snprintf(what + strlen(what), sizeof what - strlen(what), " v=%d", p->chunks);
    }
    fprintf(f, "%-58s M=%-4d step %8.4fs  tok/s %10.0f  wan %.3g MB  fid %d", what, p->microbatches, p->t_step,
            p->tokens / p->t_step, p->wan_bytes / 1e6, p->fidelity);
}

/* Whether p splits the step's microbatches unequally over the replicas (xdc_plan.replica_mb). */
static int plan_split(const xdc_plan *p)
{
    for (int r = 0; r < XDC_TOPO_MAX_REGIONS; r++)
        if (p->replica_mb[r]) return 1;
    return 0;
}

void plan_print(FILE *f, const xdc_topology *t, const xdc_plan *p)
{
    fprintf(f, "  mode %s, %d stage%s per replica, %d microbatches of %dx%d tokens", xdc_plan_mode_name(p->mode),
            p->stages, p->stages > 1 ? "s" : "", p->microbatches, p->micro_batch, p->seq_len);
    if (p->mode == XDC_PLAN_PIPELINE) fprintf(f, ", activation codec %s\n", p->codec);
    else fprintf(f, ", WAN codec %s, bucket %g MiB\n", p->codec, p->bucket_mb);
    if (p->inner_steps) fprintf(f, "  outer period H = %d inner steps\n", p->inner_steps);
    if (p->fragments) fprintf(f, "  streaming fragments F = %d\n", p->fragments);
    if (p->keep_unsent)
        fprintf(f,
                "  keep_unsent: what a round does not send stays in each region's parameters; last round in %s, "
                "outer lr %g\n",
                p->final_codec, p->outer_lr);
    if (p->delay_steps) fprintf(f, "  gradients averaged while the next step computes, applied one step late\n");
    if (p->overlap_steps)
        fprintf(f, "  overlap: each outer round runs during the next inner step, applied at its end\n");
    if (p->nobody_waits) {
        fprintf(f, "  nobody waits: inner steps per round of %d (the rest of the round's time budget idle):",
                p->inner_steps);
        for (int r = 0; r < t->n_regions; r++)
            if (p->replicas[r]) fprintf(f, " %s=%d", t->regions[r].name, p->round_steps[r]);
        fprintf(f, "\n");
    }
    if (p->chunks > 1)
        fprintf(f,
                "  interleaved 1F1B: v = %d chunks per stage (stage s holds parts s, s + %d, ... of a %d-way layer "
                "split), bubble (P-1)/(M*v) = %.4f of the compute\n",
                p->chunks, p->stages, p->stages * p->chunks,
                (double)(p->stages - 1) / ((double)p->microbatches * p->chunks));
    if (p->chunks > 1 && p->mode == XDC_PLAN_PIPELINE)
        fprintf(f,
                "  %d WAN crossings per microbatch each way: each cut once per chunk, the wrap-around from the last "
                "stage to the first v - 1 times\n",
                (p->n_chain - 1) * p->chunks + p->chunks - 1);
    fprintf(f, "  replicas per region:");
    int lanes = xdc_plan_lanes(t, p), wider = 0;
    for (int r = 0; r < t->n_regions; r++) {
        fprintf(f, " %s=%d", t->regions[r].name, p->replicas[r]);
        wider |= p->replicas[r] > lanes;
    }
    if (wider && p->mode != XDC_PLAN_PIPELINE)
        fprintf(f,
                "\n  WAN lanes per stage: %d (the fewest replicas of a region; a region of more all-reduces its "
                "replicas and %d of them exchange)",
                lanes, lanes);
    if (plan_split(p)) {
        fprintf(f, "\n  microbatches per replica (unequal replicas):");
        for (int r = 0; r < t->n_regions; r++)
            if (p->replicas[r]) fprintf(f, " %s=%d", t->regions[r].name, p->replica_mb[r]);
    }
    fprintf(f, "\n  stages:\n");
    for (int i = 0; i < p->stages; i++) {
        const xdc_plan_stage *s = &p->stage[i];
        if (i == 8 && p->stages > 10) {
            fprintf(f, "    ... %d more\n", p->stages - 9);
            i = p->stages - 2;
            continue;
        }
        fprintf(f, "    stage %-3d %-14s layers %3d-%-3d %10.4g params  %7.3f GiB/GPU  %d in flight\n", i,
                s->region >= 0 ? t->regions[s->region].name : "(every region)", s->layer_begin, s->layer_end - 1,
                s->params, s->mem_gib, s->inflight);
    }
    for (int i = 0; p->mode == XDC_PLAN_PIPELINE && i + 1 < p->n_chain; i++)
        fprintf(f, "  WAN cut %s -> %s before layer %d\n", t->regions[p->chain[i]].name,
                t->regions[p->chain[i + 1]].name, p->cut_layer[i]);
    fprintf(f, "  predicted step %.4f s = compute %.4f + bubble %.4f + intra %.4f + exposed WAN %.4f\n", p->t_step,
            p->t_compute, p->t_bubble, p->t_intra, p->t_wan_exposed);
    fprintf(
        f,
        "  %.0f tokens/step, %.0f tokens/s; WAN %.3f MB/step, egress $%.6f/step; memory %.3f GiB of %g GiB per GPU\n",
        p->tokens, p->tokens / p->t_step, p->wan_bytes / 1e6, p->egress_usd, p->mem_gib_max, p->mem_gib_limit);
}

/* Per-link codecs with why: the weakest whose bytes at the link's rate fit the tolerance. A pipeline's cut runs its
 * link's (orch_run_config_act_codec: with plan: auto the plan's, unless the link names one by hand); gradients'
 * stay advisory (the runtime runs the plan's one codec). */
static void print_link_codecs(const plan_inputs *in, const xdc_plan *p)
{
    int any = 0, pipe = p->mode == XDC_PLAN_PIPELINE;
    double budget = in->opts.tolerance * (p->t_compute + p->t_bubble);
    for (int i = 0; i < in->topo->n_links; i++) {
        const xdc_link *l = &in->topo->links[i];
        char codec[16];
        double sec;
        xdc_plan_link_codec(in->topo, &in->shape, p, &in->opts.calib, l->from, l->to, in->opts.tolerance, codec, &sec);
        if (!codec[0]) continue;
        if (!any++)
            printf("  per-link %s codec (the weakest whose bytes at the link's rate take at most %.0f%% of the "
                   "%.4f s of compute they hide behind, %.4f s; %s):\n",
                   pipe ? "activation" : "gradient", in->opts.tolerance * 100, p->t_compute + p->t_bubble, budget,
                   pipe ? "each cut runs its link's" : "advisory: the run uses the plan's one codec");
        printf("    %s -> %s: %s, %.3f MB per round at %g Gbit/s = %.4f s (%s)", in->topo->regions[l->from].name,
               in->topo->regions[l->to].name, codec, sec * l->bandwidth_gbps * 1e9 / 8 / 1e6, l->bandwidth_gbps, sec,
               sec <= budget ? "fits" : "the strongest, still over");
        if (pipe && l->act_codec[0])
            printf("; the link sets activation_codec %s by hand, which the run takes", l->act_codec);
        printf("\n");
    }
}

static int plan_usage(FILE *f)
{
    fprintf(
        f,
        "usage: xdc plan -t TOPOLOGY.yaml (-m MODEL.yaml | -c RUN.yaml) [--json] [--explain]\n"
        "                [--global-batch TOKENS] [--mode sync|diloco|streaming|pipeline] [--stages P]\n"
        "                [--micro-batch B] [--codec C] [--chunks V] [--mfu F] [--steps N]\n"
        "  Choose how to train the model on the topology: mode, stages and replicas per region, layer\n"
        "  partition, WAN cut, microbatches, bucket, codec and DiLoCo period, with the predicted step time.\n"
        "  --global-batch  tokens per optimizer step (default: microbatch x microbatches x workers)\n"
        "  --micro-batch   sequences per microbatch (default: the planner picks a divisor of the sequences\n"
        "                  per replica per step for data-parallel plans)\n"
        "  --chunks        interleaved 1F1B: V model chunks per stage (the run file's pipeline_chunks), priced\n"
        "                  for pipelines inside a region\n"
        "  -c RUN.yaml     plan the run file as `xdc launch` runs it (plan: auto: the plan it takes), its\n"
        "                  compute calibrated by a probe on this machine unless it says plan_compute: topology\n"
        "                  (docs/planner.md, \"Compute speed\")\n"
        "  --steps         the run's optimizer steps (with -c: the run file's): DiLoCo and streaming periods\n"
        "                  leave it enough outer rounds for its loss (default: unknown, periods priced by time alone)\n"
        "  --explain       every candidate considered, the selection rule and the compute model\n"
        "  Exit 78 on a config error, 69 when no plan fits (the reason is printed).\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

static int parse_mode(const char *s)
{
    for (int m = 0; m <= XDC_PLAN_PIPELINE; m++)
        if (strcmp(s, xdc_plan_mode_name((xdc_plan_mode)m)) == 0) return m;
    return -2;
}

/* Why the chosen plan fits the regime: what flat fp32 sync of the same layout would spend on syncing
 * against its compute, and what the chosen plan sends and hides instead. */
static void explain_regime(const xdc_topology *t, const xdc_plan_set *s)
{
    const xdc_plan *b = &s->best, *flat = NULL, *fast = &s->best;
    for (int i = 0; i < s->n_cands; i++) {
        const xdc_plan *p = &s->cands[i];
        if (p->t_step / p->tokens < fast->t_step / fast->tokens) fast = p;
        if (!flat && p->mode == XDC_PLAN_SYNC && strcmp(p->codec, "none") == 0 && p->stages == b->stages &&
            memcmp(p->replicas, b->replicas, sizeof p->replicas) == 0)
            flat = p;
    }
    int regions = 0;
    for (int r = 0; r < t->n_regions; r++) regions += b->replicas[r] > 0;
    if (flat && regions > 1) {
        double sync = flat->t_intra + flat->t_wan_exposed, ratio = flat->t_compute > 0 ? sync / flat->t_compute : 0;
        printf("  regime: flat fp32 sync of this layout would leave %.4f s of sync per step unhidden (%.3g MB over "
               "the WAN) against %.4f s of compute: %.2fx, %s\n",
               sync, flat->wan_bytes / 1e6, flat->t_compute, ratio,
               ratio >= 1     ? "WAN-bound: outer rounds overlapped with compute and strong codecs pay"
               : ratio >= 0.1 ? "the WAN matters: a codec or a period pays where it hides the sync"
                              : "compute-bound: syncing every step costs little");
    } else if (regions <= 1) {
        printf("  regime: one region takes part, nothing crosses the WAN\n");
    }
    printf("  chosen: %s, codec %s", xdc_plan_mode_name(b->mode), b->codec);
    if (b->inner_steps) printf(", H = %d", b->inner_steps);
    printf(", %d microbatches per replica: %.3g MB over the WAN per step", b->microbatches, b->wan_bytes / 1e6);
    if (flat && flat != b && b->wan_bytes > 0) printf(" (%.0fx less than flat)", flat->wan_bytes / b->wan_bytes);
    printf(", %.4f s exposed of a %.4f s step; %.1f%% slower per token than the fastest candidate (%s %s)\n",
           b->t_wan_exposed, b->t_step, (b->t_step / b->tokens / (fast->t_step / fast->tokens) - 1) * 100,
           xdc_plan_mode_name(fast->mode), fast->codec);
    /* The best of each kind (candidates are in pick order): the numbers the choice weighed. */
    printf("  compared, the best of each kind:\n");
    for (int kind = 0; kind <= XDC_PLAN_PIPELINE + 1; kind++) {
        xdc_plan_mode mode = kind > XDC_PLAN_PIPELINE ? XDC_PLAN_DILOCO : (xdc_plan_mode)kind;
        int keep = kind > XDC_PLAN_PIPELINE;
        for (int i = 0; i < s->n_cands; i++) {
            const xdc_plan *p = &s->cands[i];
            if (p->mode != mode || p->keep_unsent != keep) continue;
            printf("    %-21s codec %-13s", keep ? "diloco + keep_unsent" : xdc_plan_mode_name(mode), p->codec);
            if (p->inner_steps) printf(" H=%-3d", p->inner_steps);
            else printf("      ");
            printf(" step %.4f s (%+.1f%% per token), exposed WAN %.4f s, %.3g MB/step, fidelity %d: %s\n", p->t_step,
                   (p->t_step / p->tokens / (b->t_step / b->tokens) - 1) * 100, p->t_wan_exposed, p->wan_bytes / 1e6,
                   p->fidelity, i == 0 ? "chosen" : p->why);
            break;
        }
    }
}

/* Why the microbatch size: the pipeline phase of the chosen b against one microbatch and the most. */
static void explain_microbatches(const xdc_plan *b)
{
    if (b->mb_tried == 0) {
        printf("  microbatches: %d of %d sequences per replica, b as given (pinned, a cross-region pipeline, or a "
               "global batch that is no whole number of sequences per replica)\n",
               b->microbatches, b->micro_batch);
        return;
    }
    const xdc_plan_mb_option *c = &b->mb_pick[0], *few = &b->mb_pick[1], *most = &b->mb_pick[2];
    printf("  microbatches: M = %d of b = %d sequences per replica (%d sizes tried for the same %d sequences per "
           "replica per step): "
           "pipeline phase %.4g s = compute %.4g (per-microbatch cost %.3g of it) + bubble %.3g\n",
           c->microbatches, c->micro_batch, b->mb_tried, c->microbatches * c->micro_batch, c->t_pipe, c->t_compute,
           c->t_mb_cost, c->t_bubble);
    const xdc_plan_mb_option *alt[2] = {few, most};
    for (int i = 0; i < 2; i++)
        if (alt[i]->micro_batch != c->micro_batch)
            printf("    %s: M = %d of b = %d: %.4g s (%+.1f%%) = compute %.4g (per-microbatch cost %.3g) + bubble "
                   "%.3g%s\n",
                   i ? "the most microbatches" : "the fewest", alt[i]->microbatches, alt[i]->micro_batch,
                   alt[i]->t_pipe, (alt[i]->t_pipe / c->t_pipe - 1) * 100, alt[i]->t_compute, alt[i]->t_mb_cost,
                   alt[i]->t_bubble, alt[i]->fits ? "" : "; does not fit in memory");
    if (b->stages == 1)
        printf("    one stage: no bubble for more microbatches to shrink, so the largest b fits best\n");
    else if (c->microbatches == few->microbatches)
        printf("    more microbatches would shrink the bubble by less than their per-microbatch cost\n");
    else if (c->microbatches == most->microbatches)
        printf("    the most microbatches: the bubble they shrink outweighs their per-microbatch cost\n");
    else
        printf("    between the two: fewer leave a larger bubble, more pay more per-microbatch cost than the bubble "
               "they save\n");
}

/* Why the replicas' microbatch counts: each region's replicas compute a microbatch at their GPUs' speed, and
 * sync mode's step waits for the slowest replica, so the faster ones take more of the same global batch. */
static void explain_replica_split(const xdc_topology *t, const xdc_plan *b)
{
    int used = 0, total = 0;
    for (int r = 0; r < t->n_regions; r++) used += b->replicas[r] > 0, total += b->replicas[r] * b->microbatches;
    if (b->mode != XDC_PLAN_SYNC || used < 2) return;
    if (!plan_split(b)) {
        printf("  replicas: every replica runs M = %d microbatches (the taking-part regions' GPUs are equally fast, "
               "or no split of the step's microbatches finishes sooner)\n",
               b->microbatches);
        return;
    }
    printf("  replicas: unequal microbatch counts, the same %d microbatches per step, the gradient mean weighted by "
           "count (docs/runtime.md):\n",
           total);
    for (int r = 0; r < t->n_regions; r++)
        if (b->replicas[r])
            printf("    %s: %d replicas x %d microbatches (%s, %g bf16 TFLOPS)\n", t->regions[r].name, b->replicas[r],
                   b->replica_mb[r], t->regions[r].gpu_model, t->regions[r].gpu_bf16_tflops);
    printf("    faster GPUs take more microbatches so no replica waits for a slower one: pipeline phase %.4g s, "
           "against %.4g s with M = %d for every replica\n",
           b->t_compute + b->t_bubble, b->split_pipe, b->microbatches);
}

/* Why the layer split: data-parallel stages balance compute on the slowest taking-part GPUs (the LM head's
 * stage gets fewer layers); a cross-region pipeline gives each region layers in proportion to its speed. */
static void explain_split(const xdc_plan *b)
{
    if (b->stages < 2) return;
    int uneven = 0;
    printf("  layer split:");
    for (int i = 0; i < b->stages; i++) {
        int n = b->stage[i].layer_end - b->stage[i].layer_begin;
        uneven |= n != b->stage[0].layer_end - b->stage[0].layer_begin;
        if (i < 16) printf(" %d", n);
    }
    printf("%s layers per stage", b->stages > 16 ? " ..." : "");
    if (b->mode == XDC_PLAN_PIPELINE)
        printf(": each stage on its own region's GPUs, split so the slowest stage is as fast as memory allows (a "
               "region twice as fast takes twice the layers)\n");
    else
        printf(": %s\n", uneven ? "uneven, to balance the stages' compute on the slowest taking-part region's GPUs "
                                  "(the stage with the LM head takes fewer layers)"
                                : "even: it balances the stages' compute");
}

/* Nobody waits: each region's inner steps of a round and the seconds they take; the round lasts the longest. */
static void print_round_busy(const xdc_topology *t, const xdc_plan *p)
{
    if (!p->nobody_waits) return;
    printf("      each region's inner steps of a round (the round lasts the longest):");
    for (int r = 0, n = 0; r < t->n_regions; r++)
        if (p->replicas[r])
            printf("%s %s %d x %.3g s = %.3g s", n++ ? "," : "", t->regions[r].name, p->round_steps[r],
                   p->round_busy_s[r] / p->round_steps[r], p->round_busy_s[r]);
    printf("\n");
}

/* When the chosen plan leaves regions idle: which, and the fastest plan with every region in numbers, with the
 * pairs its exchange relays (no direct link). */
static void explain_regions(const xdc_topology *t, const xdc_plan_set *s)
{
    const xdc_plan *b = &s->best;
    int idle = 0, n_idle = 0, used[XDC_TOPO_MAX_REGIONS] = {0};
    for (int r = 0; r < t->n_regions; r++) used[r] = b->replicas[r] > 0;
    for (int i = 0; b->mode == XDC_PLAN_PIPELINE && i < b->n_chain; i++) used[b->chain[i]] = 1;
    for (int r = 0; r < t->n_regions; r++)
        if (!used[r] && xdc_topology_region_workers(t, r) > 0) {
            printf("%s%s", n_idle++ ? ", " : "  regions: the chosen plan leaves out ", t->regions[r].name);
            idle += xdc_topology_region_workers(t, r);
        }
    if (!n_idle) return;
    printf(" (%d of %d workers idle)\n", idle, xdc_topology_total_workers(t));
    if (!s->every_region) {
        printf("    no data-parallel plan with every region fits%s%s\n", s->reject_reason[0] ? ": " : "",
               s->reject_reason);
        return;
    }
    size_t n = (size_t)t->n_regions;
    int *route = malloc(n * n * sizeof *route), relayed = 0;
    if (route && xdc_topology_routes(t, NULL, route) == XDC_OK)
        for (int a = 0; a < t->n_regions; a++)
            for (int c = a + 1; c < t->n_regions; c++)
                if (route[(size_t)a * n + (size_t)c] != a)
                    printf("%s%s <-> %s through %s",
                           relayed++ ? ", " : "    relayed (no direct link): ", t->regions[a].name, t->regions[c].name,
                           t->regions[route[(size_t)a * n + (size_t)c]].name);
    if (relayed) printf("\n");
    free(route);
    printf("    the fastest plan with every region: ");
    plan_oneline(stdout, t, &s->all);
    printf("\n      compute %.4f bubble %.4f intra %.4f wan %.4f  %s\n", s->all.t_compute, s->all.t_bubble,
           s->all.t_intra, s->all.t_wan_exposed, s->all.why);
    print_round_busy(t, &s->all);
}

/* The settings of a data-parallel plan --explain weighs one at a time (explain_choices). */
enum { K_CODEC, K_PERIOD, K_KEEP, K_OVERLAP, K_WAIT, N_KNOBS };

/* 1 when a and b differ in knob k and in nothing else the search varies for one layout. */
static int differs_in(const xdc_plan *a, const xdc_plan *b, int k)
{
    int d[N_KNOBS] = {strcmp(a->codec, b->codec) != 0, a->inner_steps != b->inner_steps,
                      a->keep_unsent != b->keep_unsent, a->overlap_steps != b->overlap_steps,
                      a->nobody_waits != b->nobody_waits};
    if (a->mode != b->mode || a->stages != b->stages || a->microbatches != b->microbatches ||
        a->micro_batch != b->micro_batch || a->bucket_mb != b->bucket_mb ||
        memcmp(a->replicas, b->replicas, sizeof a->replicas) != 0)
        return 0;
    for (int i = 0; i < N_KNOBS; i++)
        if (d[i] != (i == k)) return 0;
    return 1;
}

/* DiLoCo plan p's setting k, in words. */
static void print_setting(const xdc_topology *t, const xdc_plan *p, int k)
{
    switch (k) {
    case K_CODEC: printf("%s", p->codec); break;
    case K_PERIOD: printf("H = %d", p->inner_steps); break;
    case K_KEEP: printf("%s", p->keep_unsent ? "on" : "off"); break;
    case K_OVERLAP:
        printf("%s", p->overlap_steps ? "the round during the next inner step" : "the round blocking its step");
        break;
    default:
        if (!p->nobody_waits) {
            printf("every region running H, the round waiting for the slowest");
            break;
        }
        printf("nobody waits, inner steps per round of %d:", p->inner_steps);
        for (int r = 0; r < t->n_regions; r++)
            if (p->replicas[r]) printf(" %s=%d", t->regions[r].name, p->round_steps[r]);
    }
}

/* What each of the chosen DiLoCo plan's settings buys: against the best candidate (pick order) that differs from
 * it in that setting alone, its time per token, exposed WAN and fidelity; or why there is none. */
static void explain_choices(const xdc_topology *t, const xdc_plan_set *s, const xdc_plan_opts *o)
{
    const xdc_plan *b = &s->best;
    if (b->mode != XDC_PLAN_DILOCO) return;
    unsigned char in[XDC_TOPO_MAX_REGIONS] = {0};
    double pace[XDC_TOPO_MAX_REGIONS];
    int one_pace = 1;
    for (int r = 0; r < t->n_regions; r++) in[r] = b->replicas[r] > 0;
    xdc_plan_region_pace(t, &o->calib, in, pace);
    for (int r = 0; r < t->n_regions; r++)
        one_pace &= !in[r] || xdc_plan_round_steps(b->inner_steps, pace[r]) == b->inner_steps;
    static const char *const what[N_KNOBS] = {"codec (density, bits)", "period", "keep_unsent", "overlap",
                                              "nobody waits"};
    printf("  settings, each against the best plan that differs from the chosen one in it alone:\n");
    for (int k = 0; k < N_KNOBS; k++) {
        const xdc_plan *alt = NULL;
        for (int i = 1; i < s->n_cands && !alt; i++)
            if (differs_in(&s->cands[i], b, k)) alt = &s->cands[i];
        printf("    %-22s ", what[k]);
        print_setting(t, b, k);
        printf(" (step %.4g s, exposed WAN %.4g s, fidelity %d)", b->t_step, b->t_wan_exposed, b->fidelity);
        if (!alt) {
            printf("; no alternative: %s\n",
                   k == K_WAIT && b->nobody_waits
                       ? "every region running H, the round waiting for the slowest, is more than twice as slow per "
                         "token (not kept)"
                   : k == K_WAIT && one_pace ? "the taking-part regions run at one pace (GPU TFLOP/s, slowdown)"
                   : k == K_OVERLAP && o->overlap < 0
                       ? "the run file as written has no diloco.overlap_steps (plan: auto searches it, one step "
                         "lossier where the run's steps are known)"
                   : k == K_KEEP && b->keep_unsent
                       ? "sparse rounds are searched with it wherever the runtime can keep the unsent part"
                   : k == K_KEEP ? "the runtime keeps the unsent part only with one replica per stage in every region"
                                 : "none kept (more than twice as slow per token, or constrained)");
            continue;
        }
        printf("; against ");
        print_setting(t, alt, k);
        printf(": step %.4g s, %.0f tokens, exposed WAN %.4g s, %.3g MB/step, fidelity %d: %+.1f%% time per token\n",
               alt->t_step, alt->tokens, alt->t_wan_exposed, alt->wan_bytes / 1e6, alt->fidelity,
               (alt->t_step / alt->tokens / (b->t_step / b->tokens) - 1) * 100);
    }
    int used = 0;
    for (int r = 0; r < t->n_regions; r++) used += in[r];
    int longest = xdc_plan_max_period(o->steps, used);
    if (longest > 0)
        printf(
            "    period for the loss: the run's %d steps over %d regions keep at least %d x %d = %d outer rounds, so "
            "H <= %d (the shortest period searched whatever this says: docs/planner.md, \"Period for the loss\")\n",
            o->steps, used, XDC_PLAN_ROUNDS_PER_REGION, used - 1, XDC_PLAN_ROUNDS_PER_REGION * (used - 1), longest);
    print_round_busy(t, b);
}

static void explain(const xdc_topology *t, const xdc_plan_set *s, const xdc_plan_opts *o)
{
    printf("\nhow the plan was chosen:\n"
           "  %d candidates evaluated, %d rejected (memory)%s%s\n"
           "  rule: the fastest candidate per token sets the bar; among candidates within %.0f%% of it the most\n"
           "  faithful wins (fidelity 0 = exact sync; +1..5 for lossier codecs; +3.. for DiLoCo/streaming periods)\n"
           "  every feasible candidate, in pick order:\n",
           s->n_evaluated, s->n_rejected, s->reject_reason[0] ? "; closest miss: " : "", s->reject_reason,
           o->tolerance * 100);
    explain_regime(t, s);
    explain_choices(t, s, o);
    explain_regions(t, s);
    explain_microbatches(&s->best);
    explain_replica_split(t, &s->best);
    explain_split(&s->best);
    for (int i = 0; i < s->n_cands && i < 60; i++) {
        printf("  %3d. ", i + 1);
        plan_oneline(stdout, t, &s->cands[i]);
        printf("\n       compute %.4f bubble %.4f intra %.4f wan %.4f  %s\n", s->cands[i].t_compute,
               s->cands[i].t_bubble, s->cands[i].t_intra, s->cands[i].t_wan_exposed, s->cands[i].why);
    }
    if (s->n_cands > 60) printf("  ... %d more\n", s->n_cands - 60);
}

int xdc_cmd_plan(int argc, char **argv)
{
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"model", required_argument, NULL, 'm'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"json", no_argument, NULL, 'j'},
                                         {"explain", no_argument, NULL, 'x'},
                                         {"global-batch", required_argument, NULL, 'g'},
                                         {"mode", required_argument, NULL, 'M'},
                                         {"stages", required_argument, NULL, 'P'},
                                         {"chunks", required_argument, NULL, 'V'},
                                         {"micro-batch", required_argument, NULL, 'b'},
                                         {"codec", required_argument, NULL, 'C'},
                                         {"mfu", required_argument, NULL, 'f'},
                                         {"steps", required_argument, NULL, 'S'},
                                         {"help", no_argument, NULL, 'h'},
                                         {0}};
    const char *topo = NULL, *model = NULL, *run = NULL, *mode = NULL, *codec = NULL;
    int json = 0, expl = 0, stages = 0, chunks = 0, micro_batch = 0, steps = 0, c;
    double global = 0, mfu = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:m:c:jxg:h", opts, NULL)) != -1) {
        char *end = NULL;
        const char *bad = NULL; /* the integer flag that failed */
        xdc_diag d;
        switch (c) {
        case 't': topo = optarg; break;
        case 'm': model = optarg; break;
        case 'c': run = optarg; break;
        case 'j': json = 1; break;
        case 'x': expl = 1; break;
        case 'g': global = strtod(optarg, &end); break;
        case 'M': mode = optarg; break;
        case 'P': bad = xdc_parse_int(optarg, 0, 1 << 20, &stages, &d) != XDC_OK ? "--stages" : NULL; break;
        case 'V': bad = xdc_parse_int(optarg, 1, ORCH_MAX_CHUNKS, &chunks, &d) != XDC_OK ? "--chunks" : NULL; break;
        case 'b': bad = xdc_parse_int(optarg, 1, 1 << 20, &micro_batch, &d) != XDC_OK ? "--micro-batch" : NULL; break;
        case 'C': codec = optarg; break;
        case 'S': bad = xdc_parse_int(optarg, 1, 1 << 30, &steps, &d) != XDC_OK ? "--steps" : NULL; break;
        case 'f': mfu = strtod(optarg, &end); break;
        case 'h': return plan_usage(stdout);
        default: return plan_usage(stderr);
        }
        if (bad) {
            fprintf(stderr, "xdc plan: %s: %s\n", bad, d.msg);
            return XDC_EX_USAGE;
        }
        if (end && (*end || end == optarg)) {
            fprintf(stderr, "xdc plan: bad number '%s'\n", optarg);
            return XDC_EX_USAGE;
        }
    }
    if (!topo || !model == !run || optind != argc) return plan_usage(stderr);
    if (global < 0 || stages < 0 || mfu < 0 || mfu > 1 || (mode && parse_mode(mode) < 0)) {
        fprintf(stderr, "xdc plan: --global-batch, --stages need positive values, --mfu in (0,1], --mode one of "
                        "sync|diloco|streaming|pipeline\n");
        return XDC_EX_USAGE;
    }
    plan_inputs in;
    int ex = plan_inputs_load(topo, model, run, global, &in);
    if (ex != XDC_EX_OK) return ex;
    if (mode) in.opts.mode = parse_mode(mode);
    if (codec) snprintf(in.opts.codec, sizeof in.opts.codec, "%s", codec);
    if (mfu > 0) in.opts.calib.mfu = mfu;
    if (stages) in.opts.stages = stages; /* a run file's constraints stay unless a flag sets them */
    if (chunks) in.opts.chunks = chunks;
    if (micro_batch) in.opts.micro_batch = micro_batch;
    if (steps) in.opts.steps = steps;
    xdc_plan_set *set = NULL;
    ex = plan_inputs_search(&in, &set);
    if (ex == XDC_EX_OK && json) {
        char *text = NULL;
        if (xdc_plan_to_json(in.topo, &in.shape, &in.opts, set, 5, &text) == XDC_OK) printf("%s\n", text);
        else ex = XDC_EX_SOFTWARE;
        xdc_free(text);
    } else if (ex == XDC_EX_OK) {
        printf("plan for %s (%.4g parameters) on %s (%d workers in %d regions), global batch %.0f tokens\n",
               in.model_path, in.shape.params, in.topo->name, xdc_topology_total_workers(in.topo), in.topo->n_regions,
               in.batch.global_batch_tokens);
        plan_print(stdout, in.topo, &set->best);
        print_link_codecs(&in, &set->best);
        printf("  runners-up:\n");
        for (int i = 1; i < set->n_cands && i <= 5; i++) {
            printf("    ");
            plan_oneline(stdout, in.topo, &set->cands[i]);
            printf("\n      lost: %s\n", set->cands[i].why);
        }
        if (expl) {
            printf("  %s\n", in.compute);
            explain(in.topo, set, &in.opts);
        }
    }
    xdc_plan_set_destroy(set);
    plan_inputs_free(&in);
    return ex;
}
