/* xdc_plan.h — the topology-aware planner and the discrete-event simulator.
 *
 * The planner turns a topology, a model shape and batch settings into a plan: the mode (sync, diloco,
 * streaming across regions, or one pipeline that spans regions), pipeline stages and data-parallel
 * replicas per region, the layer partition, where a cross-region cut goes, microbatches, bucket size,
 * the WAN codec and the DiLoCo period, with a predicted step time split into compute / intra / exposed
 * WAN / bubble, WAN bytes, egress cost and memory per GPU. It enumerates candidates, scores each with a
 * closed-form cost model that follows the runtime's data flow (docs/planner.md has the formulas), and
 * keeps the runners-up with the reason each lost. Deterministic: the same inputs give the same plan.
 *
 * The simulator replays one plan as a discrete-event model (binary-heap event queue; one entity per
 * pipeline stage of every replica, one FIFO per directed WAN link, one comm-engine state machine per
 * data-parallel group) and reports the step time it observes.
 *
 * The model arrives as numbers: xdc_model_shape (model/xdc_model_shape.h), whose xdc_model_shape_gpt
 * counts the project's GPT the way its stages allocate it. */
#ifndef XDC_PLAN_H
#define XDC_PLAN_H

#include "common/xdc_err.h"
#include "model/xdc_model_shape.h"
#include "topology/xdc_topology.h"

#include <stdbool.h>
#include <stddef.h>

#define XDC_PLAN_MAX_STAGES 128 /* stages per replica */
#define XDC_PLAN_MAX_CHAIN  16  /* regions one cross-region pipeline may span */

typedef struct xdc_batch_shape {
    int micro_batch;            /* sequences per microbatch */
    int seq_len;                /* tokens per sequence */
    double global_batch_tokens; /* tokens per optimizer step over all replicas; sets the microbatch count */
} xdc_batch_shape;

typedef enum { XDC_PLAN_SYNC = 0, XDC_PLAN_DILOCO, XDC_PLAN_STREAMING, XDC_PLAN_PIPELINE } xdc_plan_mode;
const char *xdc_plan_mode_name(xdc_plan_mode m);

/* Measured numbers from an earlier run; zero fields mean "use the topology's". */
typedef struct xdc_plan_calib {
    double mfu;           /* fraction of the topology's peak TFLOP/s reached (default 0.4) */
    double compute_scale; /* multiplies every predicted compute time (from a measured run) */
    double wan_gbps;      /* measured WAN goodput per link, Gbit/s */
    int host_cores;       /* > 0: every worker shares this many cores (an emulated run on one machine) */
    /* Measured WAN wire bytes per fp32 byte of the gradients (or DiLoCo pseudo-gradients) a run sent with
     * codec `ratio_codec`: replaces that codec's table ratio for gradient rounds. How far zstd shrinks
     * int8 or bf16 output depends on the model's gradients, which no table knows (0: the table's). */
    double wire_ratio;
    char ratio_codec[16];
    /* Measured seconds of one activation (or its gradient) handed between neighbouring stages in a region,
     * from the receiver posting its receive to the data being there (0: the topology's intra latency +
     * bytes / bandwidth). On one emulating host it is thread wake-ups more than bytes. */
    double intra_p2p_s;
    /* Per stage i, a factor on top of compute_scale for that stage's compute times (0: 1). How the stages'
     * measured speeds differ from their FLOP ratio (the LM head's softmax, caches, a core shared unevenly)
     * only a run can say; xdc_plan_calibrate_compute sets it from one measurement per stage. */
    double stage_scale[XDC_PLAN_MAX_STAGES];
    /* Per region r, a factor on every compute time of its workers (0: 1): a run's diloco.slowdown, which makes
     * each inner step of the region cost that many times its compute (a sleep the runtime counts as compute). */
    double region_scale[XDC_TOPO_MAX_REGIONS];
    /* A compute speed measured on the machine planned for (xdc_plan_probe_flops: a probe timing the run's model on
     * its device before planning), FLOP/s of one worker with a core to itself; > 0 replaces every region's
     * bf16 TFLOP/s x mfu. probe_cores > 0: every worker of the topology runs on one host of that many cores and
     * gets the share of one xdc_plan_host_share says. 0: each worker has its own. */
    double probe_flops;
    int probe_cores;
} xdc_plan_calib;

/* Constraints: a zero / negative / empty field leaves the choice to the planner. */
typedef struct xdc_plan_opts {
    xdc_plan_calib calib;
    int mode;         /* -1: any; else an xdc_plan_mode */
    int stages;       /* pipeline stages per replica */
    int microbatches; /* per replica per step (instead of global_batch_tokens) */
    int micro_batch;  /* sequences per microbatch (else the search picks one for data-parallel plans) */
    char codec[16];   /* WAN codec: none|bf16|int8|int4|topk:F */
    int inner_steps;  /* DiLoCo / streaming H */
    int fragments;    /* streaming F */
    double bucket_mb; /* gradient bucket, MiB of fp32 */
    double tolerance; /* a more faithful plan wins if at most this much slower per token (0.10) */
    int all_regions;  /* 1: every region with workers takes part (as `xdc launch` runs them) */
    /* DiLoCo's keep_unsent (xdc_plan.keep_unsent): 0 the search may choose it, 1 only plans with it (a run
     * file that sets it), -1 none (a run file as written without it). */
    int keep_unsent;
    int delay_steps; /* sync: 1 averages a step's gradients while the next step computes (sync.delay_steps) */
    /* DiLoCo's nobody waits (xdc_plan.nobody_waits) and overlapped rounds (xdc_plan.overlap_steps), as
     * keep_unsent: 0 the search may choose them, 1 only plans with them (a run file that sets them), -1 none. */
    int nobody_waits;
    int overlap;
    /* Interleaved 1F1B: model chunks per stage (pipeline_chunks; 0 or 1: none). Priced for the pipelines of
     * data-parallel structures, inside a region, where P >= 2, M is a multiple of P and P·v <= the layers;
     * a pipeline across regions is planned without (docs/planner.md). */
    int chunks;
    /* The run's optimizer steps (0: unknown, as `xdc plan` without a run file): DiLoCo and streaming periods are
     * searched up to xdc_plan_max_period, so the run holds enough outer rounds to reach its loss. */
    int steps;
} xdc_plan_opts;
#define XDC_PLAN_OPTS_INIT                                                                      \
    {                                                                                           \
        .calib = {.mfu = 0.4, .compute_scale = 1.0}, .mode = -1, .codec = "", .tolerance = 0.10 \
    }

typedef struct xdc_plan_stage {
    int region;                 /* region index; -1: the same stage in every region (data parallel) */
    int layer_begin, layer_end; /* chunks > 1: of its first chunk (the others follow every P·v-th part) */
    double params;              /* count */
    double flops_mb;            /* forward + backward FLOPs of one microbatch */
    double mem_gib;             /* per GPU, worst region */
    int inflight;     /* microbatches this stage keeps in flight: 1F1B's min(M, P − s), as the runtime (chunks
                       * > 1: the sum of its chunks' slots, xdc_model_shape_interleaved_inflight) */
    double act_bytes; /* activation high-water mark per GPU: inflight × one microbatch's activation slot */
    /* pipeline boundary buffers per GPU, bytes: xdc_model_shape_boundary_bytes, whatever the microbatches */
    double boundary_bytes;
} xdc_plan_stage;

/* One microbatch size the search priced for a data-parallel structure: its pipeline phase per step. */
typedef struct xdc_plan_mb_option {
    int micro_batch, microbatches;      /* b sequences per microbatch, M per replica per step */
    int fits;                           /* 1: every stage fits in the GPUs' memory */
    double t_pipe, t_compute, t_bubble; /* pipeline phase = compute + bubble, seconds per step (slowest region) */
    double t_mb_cost;                   /* of that compute, what the per-microbatch cost adds, seconds */
} xdc_plan_mb_option;

typedef struct xdc_plan {
    xdc_plan_mode mode;
    int stages; /* P per replica */
    xdc_plan_stage stage[XDC_PLAN_MAX_STAGES];
    int replicas[XDC_TOPO_MAX_REGIONS];     /* data-parallel replicas per region (0: region idle) */
    int chain[XDC_PLAN_MAX_CHAIN], n_chain; /* pipeline mode: regions in stage order */
    int cut_layer[XDC_PLAN_MAX_CHAIN];      /* pipeline mode: first layer after each WAN cut */
    int microbatches, micro_batch, seq_len;
    int chunks; /* v: model chunks per stage, interleaved 1F1B (1: not interleaved); opts.chunks where it applies */
    /* Unequal replicas (sync mode; docs/planner.md): microbatches per step of each replica of region r, the same
     * M x D microbatches per step split by the regions' speed so none waits for a slower one; all 0: M for every
     * replica. split_pipe: the pipeline phase the equal split would take (the plan's t_compute + t_bubble are
     * the split's), for --explain. */
    int replica_mb[XDC_TOPO_MAX_REGIONS];
    double split_pipe;
    /* How b was chosen (data-parallel plans): mb_tried sizes priced (0: b was given or pinned); mb_pick[0]
     * the chosen, [1] the fewest microbatches, [2] the most. */
    int mb_tried;
    xdc_plan_mb_option mb_pick[3];
    double bucket_mb;
    char codec[16];             /* WAN codec: gradients (sync/diloco/streaming), activations (pipeline) */
    int inner_steps, fragments; /* H, F (diloco / streaming) */
    int delay_steps;            /* sync: 1 = each step applies the previous step's average (opts.delay_steps) */
    int fidelity;               /* 0 = exact sync; higher = lossier codec or longer period */
    /* diloco: what a round's codec leaves unsent stays in each region's parameters (the run file's
     * diloco.keep_unsent), the run's last round in final_codec; outer_lr the outer learning rate the
     * evidence for it was measured with (0: the run's default). */
    int keep_unsent;
    char final_codec[16];
    double outer_lr;
    /* diloco, nobody waits (diloco.nobody_waits): region r runs round_steps[r] inner steps of each round of H
     * (xdc_plan_round_steps: what the round's time budget, H steps of the fastest region, buys at its pace),
     * the outer mean weighted by the tokens each processed; 0 everywhere: every region runs H and the round
     * waits for the slowest. The plan's tokens and t_step are per step of the round (a round's / H). */
    int nobody_waits;
    int round_steps[XDC_TOPO_MAX_REGIONS];
    double round_busy_s[XDC_TOPO_MAX_REGIONS]; /* nobody waits: round_steps[r] x region r's inner step, seconds */
    /* diloco: 1 = the round due at step S runs during step S+1 and is applied at its end
     * (diloco.overlap_steps); 0 = it blocks step S. */
    int overlap_steps;
    /* predictions per optimizer step */
    double t_step, t_compute, t_intra, t_wan_exposed, t_bubble; /* seconds */
    double tokens, wan_bytes, egress_usd;
    double mem_gib_max, mem_gib_limit; /* per GPU: worst stage, and the smallest GPU that holds it */
    char why[256];                     /* runners-up: why it lost */
} xdc_plan;

typedef struct xdc_plan_set {
    xdc_plan best;
    xdc_plan *cands; /* (n_cands) feasible candidates in pick order; cands[0] is best */
    int n_cands;
    int n_evaluated, n_rejected;
    char reject_reason[512]; /* the most common rejection, e.g. a memory shortfall */
    /* The fastest data-parallel candidate in which every region with workers takes part (its `why` says how it
     * compares with `best`), found or not (every_region 0: none fitted), kept even when it was too slow to be
     * among cands: what `xdc plan --explain` quotes when the chosen plan leaves regions out. */
    xdc_plan all;
    int every_region;
} xdc_plan_set;

/* Search the candidates. XDC_ERR_UNAVAILABLE with diag naming why when no plan fits (model too large
 * even across all regions, constraints impossible); XDC_ERR_INVALID for bad shapes. */
xdc_err_t xdc_plan_search(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                          const xdc_plan_opts *o, xdc_plan_set **out, xdc_diag *diag);
void xdc_plan_set_destroy(xdc_plan_set *s);

/* Re-plan only the WAN side of `cur` (codec, mode among sync/diloco/streaming, period) for a measured
 * WAN goodput, keeping its stages, replicas, partition and bucket: what a run does when its links drift
 * far from the topology's numbers. `o` is the search's options (constraints on codec/mode still apply).
 * *out = cur when nothing better fits. */
xdc_err_t xdc_plan_replan_wan(const xdc_topology *t, const xdc_model_shape *m, const xdc_batch_shape *b,
                              const xdc_plan_opts *o, const xdc_plan *cur, double measured_gbps, xdc_plan *out,
                              xdc_diag *diag);

/* The codec link from -> to would need for its share of plan p's WAN traffic to take at most `tolerance`
 * (e.g. 0.1) of the compute time it can hide behind (a step; H steps for DiLoCo; H/F for streaming): the
 * weakest of none, bf16, int8, int4, topk:0.01 (activations: none, bf16, int8) that does, else the
 * strongest. Advisory: the runtime uses one codec per run (the plan's `codec`). Empty when the plan sends
 * nothing over that link. *seconds = the link's busy time per round with that codec. */
void xdc_plan_link_codec(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan *p, const xdc_plan_calib *c,
                         int from, int to, double tolerance, char codec[16], double *seconds);

/* The WAN codec of a run whose run file says `codec: link`: the lossiest codec (compression's registry
 * order) that any link of `t` names, "auto" counting as int8; "none" without links. The runtime and the
 * planner both resolve "link" here, so a plan describes the codec the run will use. */
const char *xdc_plan_codec_of_links(const xdc_topology *t);

/* Each region's pace: how many times longer its inner step takes than the fastest region's of those in `in`
 * (NULL: every region with workers), from its workers' speed (the GPUs' bf16 TFLOP/s, or c->probe_flops with its
 * host share) and c->region_scale, into pace[n_regions] (0 for a region not in it). The runtime's decider and the
 * planner both count a round's inner steps with it. */
void xdc_plan_region_pace(const xdc_topology *t, const xdc_plan_calib *c, const unsigned char *in, double *pace);
/* The inner steps a region of `pace` runs in a round whose time budget is `budget` steps of the fastest
 * region: max(1, floor(budget / pace)). */
int xdc_plan_round_steps(int budget, double pace);
/* Where in its round a region runs its `steps` of `budget` (nobody waits): of the round's first p steps
 * (p <= budget) it ran ⌈p·steps/budget⌉, its k-th (from 0) at the round's step ⌊k·budget/steps⌋, where a
 * region that runs every step is when one that takes budget/steps times as long per step begins it. Spread so,
 * a slow region is about as far into the round, in wall time, as the others at every step of it, so an
 * overlapped round, applied d steps after it began, is applied at about the same time everywhere (with its
 * steps first in the round, the slow region applied it after d of its own steps and every region's apply
 * waited for it there: docs/benchmarks.md, "Nobody waits with the round overlapped"); a round at once ends
 * after its steps either way. The runtime (orch_mode_diloco.c) and the simulator place a slow region's steps
 * with these. */
long long xdc_plan_round_ran(int steps, int budget, long long p);
/* Whether the region runs an inner step at step p (0 <= p < budget) of its round. */
bool xdc_plan_round_runs(int steps, int budget, int p);
/* The WAN lanes of data-parallel plan p: the fewest replicas of any region that takes part, over which every
 * region's buckets cross (xdc_sync_cfg.lanes; docs/runtime.md, "Regions of different sizes"). */
int xdc_plan_lanes(const xdc_topology *t, const xdc_plan *p);

/* The FLOP/s of one worker that a probe measured: `seconds` for one training step (forward + backward, the AdamW
 * step priced with them) of the whole model m on a microbatch of `tokens` tokens (sequences of seq_len) on the
 * device of region 0 of t, with the per-microbatch efficiency of that device taken out, so that the planner's
 * compute time of that microbatch is `seconds` (xdc_plan_calib.probe_flops). 0 when seconds is not positive. */
double xdc_plan_probe_flops(const xdc_topology *t, const xdc_model_shape *m, double tokens, int seq_len,
                            double seconds);
/* The fraction of a core a worker of region r gets while it computes, its host's c->probe_cores shared by every
 * worker of t (1 without probe_cores): the mean over how many others compute at once of min(1, cores / (1 + them)),
 * worker j computing 1 / region_scale[j] of its time (a slowdown's sleep takes no core) independently of the others.
 * A slowed region computes while the others do, so its share is the lowest and its pace more than its slowdown. */
double xdc_plan_host_share(const xdc_topology *t, int r, const xdc_plan_calib *c);

/* The longest DiLoCo / streaming period for the loss of a run of `steps` optimizer steps over `regions` taking-part
 * regions: at least XDC_PLAN_ROUNDS_PER_REGION x (regions - 1) outer rounds in the run, so steps / that (0: no
 * bound, the steps unknown or one region). The search keeps its shortest period whatever this says. */
#define XDC_PLAN_ROUNDS_PER_REGION 15
int xdc_plan_max_period(int steps, int regions);

/* Calibrate compute times from measured_s[0..n) (seconds of compute per step, e.g. from a run's progress
 * lines or step logs). n = 1: calib->compute_scale so that stage 0's predicted compute per step equals
 * measured_s[0], every stage following by its FLOPs (stage_scale cleared). n = p->stages: stage i's equals
 * measured_s[i] (compute_scale from stage 0, stage_scale[i] the rest). XDC_ERR_INVALID (calib untouched)
 * for any other n or a value that is not positive. */
xdc_err_t xdc_plan_calibrate_compute(const xdc_topology *t, const xdc_plan *p, const double *measured_s, int n,
                                     xdc_plan_calib *calib);

/* The plan (with each used link's advisory codec, see xdc_plan_link_codec) and the runners-up, up to
 * `max_alt`, as JSON text; caller frees with xdc_free. */
xdc_err_t xdc_plan_to_json(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan_opts *o,
                           const xdc_plan_set *s, int max_alt, char **out);

typedef struct xdc_sim_result {
    int steps;
    double t_step;         /* mean seconds per step */
    double t_compute;      /* busiest GPU's compute seconds per step */
    double t_bubble;       /* pipeline phase beyond the busiest GPU's compute, per step */
    double t_comm_exposed; /* step time after the pipeline phase (sync, WAN), per step */
    double utilisation;    /* mean GPU busy fraction */
    double wan_bytes;      /* per step, all links */
    long long events;      /* events processed */
    int gpus;              /* simulated workers */
} xdc_sim_result;

/* Run `steps` optimizer steps of plan p. */
xdc_err_t xdc_sim_run(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan *p, const xdc_plan_calib *c,
                      int steps, xdc_sim_result *out, xdc_diag *diag);

#endif /* XDC_PLAN_H */
