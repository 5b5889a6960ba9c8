/* orch_run_config.h — the run file `xdc launch -c RUN.yaml` reads: which model file, which data, the
 * distributed mode and its knobs, checkpoints and timeouts. The model and optimizer live in the model
 * file it points to (xdc_model_config.h), so one model file serves `xdc train --single` and distributed
 * runs alike. docs/config.md lists every key. */
#ifndef ORCH_RUN_CONFIG_H
#define ORCH_RUN_CONFIG_H

#include "model/xdc_model_config.h"
#include "orchestrator/rdzv/orch_rdzv_quota.h"
#include "scheduler/xdc_plan.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { ORCH_MODE_SYNC = 0, ORCH_MODE_DILOCO = 1, ORCH_MODE_STREAMING = 2 } orch_mode;

#define ORCH_MAX_STAGES     64
#define ORCH_MAX_SLOWDOWN   256 /* per-region lists (diloco.slowdown, emulate_layer_ms): one entry per region at most */
#define ORCH_MAX_CHUNKS     8   /* pipeline_chunks */
#define ORCH_MAX_REPLICA_MB 1024 /* microbatches_per_replica entries: one per replica (of a region or of all) */

/* The run file's sections, one struct each, named as in the YAML (docs/config.md). */
typedef struct orch_diloco_config {
    int inner_steps;                 /* H */
    double outer_lr, outer_momentum; /* outer Nesterov; unset: orch_run_config_outer_defaults */
    bool outer_lr_set, outer_momentum_set;
    /* What the codec did not send of a region's pseudo-gradient stays in that region's parameters
     * (local = global - residual after each outer round but the last) instead of in the codec's residual */
    bool keep_unsent;
    char final_codec[32]; /* the codec of the last outer round ("": the run's) */
    /* Nobody waits (docs/runtime.md): each region runs the inner steps it manages in a round's budget (the
     * period, in inner steps of a region of slowdown 1), as the round's decider counts them, and the outer step
     * weighs each region's pseudo-gradient by the tokens it processed */
    bool nobody_waits;
    /* Train while waiting (docs/runtime.md): a member that waits for an outer round's decision (a region late,
     * stopped, slower) runs inner steps meanwhile, and the round weighs each region's pseudo-gradient by the
     * tokens it processed, those steps counted (the decider's ran/<step>). Elastic DiLoCo whose rounds run at
     * once, one worker per region */
    bool train_while_waiting;
    /* A simulated slowness per region, in the topology's order (n_slowdown of them; 0: none), in every mode
     * (its section is DiLoCo's, where it began): each training pass of region r costs slowdown[r] times its
     * compute (the extra as a sleep counted as compute, orch_train_pass). Deterministic, for tests and benches
     * on one machine, where real speed differences do not reproduce. */
    double slowdown[ORCH_MAX_SLOWDOWN];
    int n_slowdown;
    /* d > 0: the round due at step S begins at the start of step S+1 and is applied at the end of step S+d,
     * keeping the local progress of those d steps (docs/runtime.md, "Overlapped outer rounds"); 0: at once */
    int overlap_steps;
    /* diloco.overlap: eager (else delayed): the d inner steps of an overlapped DiLoCo round (mode diloco only:
     * orch_run_config_check) go on from the outer step taken with the region's own pseudo-gradient in place of
     * the mean, which corrects it when it lands (orch_outer.h, ORCH_OUTER_EAGER) */
    bool eager;
} orch_diloco_config;

typedef struct orch_streaming_config {
    int fragments; /* parameter fragments synced at staggered steps */
} orch_streaming_config;

typedef struct orch_sync_config {
    /* 1 averages step t's gradients across regions while step t+1 computes and applies them at its end
     * (stale by one step); 0: every step applies its own average (docs/runtime.md, "Delayed averaging") */
    int delay_steps;
} orch_sync_config;

/* The timeout hierarchy (docs/runtime.md, "Timeouts"; orch_timeouts.c): a WAN handshake, the rendezvous
 * (joins, barriers and peer addresses at start), one operation (a collective, pipeline transfer or WAN
 * exchange making no progress), and the silence after which the launcher calls a member dead (heartbeat).
 * Those the run file leaves unset scale from the topology's RTTs (orch_run_config_scale_timeouts); `set`
 * has bit ORCH_TIMEOUT_* for each one it set. */
typedef struct orch_timeouts_config {
    int64_t handshake_ms, rendezvous_ms, operation_ms, heartbeat_ms;
    unsigned set;
} orch_timeouts_config;

/* Elastic regions (DiLoCo and streaming; sync mode when the run file has `elastic:`; docs/runtime.md): an
 * outer round (sync mode: a step) goes on with the regions that arrived within grace_ms of the first one, if
 * they are at least min_regions (0: a majority of the topology's regions, orch_quorum_min); the others are
 * dropped. With grace_min_ms the window shrinks to a few times the rounds' normal arrival spread. */
typedef struct orch_elastic_config {
    int min_regions;
    int64_t grace_ms;
    int64_t grace_min_ms; /* > 0: the window follows the rounds' arrival spread, this at least (orch_quorum_spread) */
    bool set;             /* the run file has `elastic:` (what makes sync mode elastic) */
} orch_elastic_config;

typedef struct orch_run_config {
    char path[512];
    char model_path[512]; /* resolved relative to the run file */
    char data_path[512];
    xdc_train_config train; /* loaded from model_path, then overridden by the run file */
    orch_mode mode;
    int pipeline_stages; /* per replica; divides each region's workers */
    int pipeline_chunks; /* v: model chunks per stage, interleaved 1F1B (docs/runtime.md); 1: not interleaved */
    bool span_regions;   /* one pipeline over every worker of every region (stages cross the WAN) */
    /* codec of activations crossing the WAN: none|bf16|int8[:block]|lowrank[...], every cut's unless its topology
     * link names its own (orch_run_config_act_codec) */
    char activation_codec[32];
    /* plan: auto, span: the planner's codec of each cut between regions act_cut[i].a and .b (xdc_plan_link_codec),
     * n_act_cut of them; where a link's activation_codec is not set by hand it is the cut's */
    struct {
        int a, b;
        char codec[32];
    } act_cut[ORCH_MAX_STAGES];
    int n_act_cut;
    int microbatches; /* per replica per step (overrides the model file when set) */
    /* Unequal replicas (docs/runtime.md): microbatches per step of each data-parallel replica, n_replica_mb of
     * them: one per replica of a region in replica order (every region the same), or one per replica of every
     * region, region-major (orch_run_config_replica_mb); 0: `microbatches` for every replica */
    int replica_mb[ORCH_MAX_REPLICA_MB];
    int n_replica_mb;
    int batch_size;                  /* sequences per microbatch, when set (plan: auto: pins it) */
    int steps;                       /* overrides the model file when set */
    int eval_interval;               /* overrides the model file when set */
    char codec[32];                  /* WAN gradient codec ("int8", "topk:0.01", ..., "link": each link's own) */
    int zstd_level;                  /* -1: chosen from the link bandwidth */
    double bucket_mb;                /* gradient bucket size, MiB of fp32 */
    int threads;                     /* BLAS threads per worker */
    orch_diloco_config diloco;       /* diloco: (streaming reads it too) */
    orch_streaming_config streaming; /* streaming: */
    orch_sync_config sync;           /* sync: */
    int checkpoint_every;            /* steps; 0: only at the end */
    /* checkpoint_failure: continue: a checkpoint that cannot be written is logged (path, errno) and the run
     * goes on without it; stop (the default): the worker fails with the error. */
    bool checkpoint_continue;
    orch_timeouts_config timeouts; /* timeouts: */
    int metrics_port;              /* -1: off; 0: any free port */
    char metrics_bind[64];         /* address the metrics endpoints listen on (default 127.0.0.1) */
    char rdzv[512];                /* the rendezvous store: "builtin" or etcd://HOST:PORT[/PREFIX] ("": built-in) */
    int replan_every;              /* plan: auto: steps between checks of measured WAN goodput against the plan */
    /* A region whose compute seconds per step exceed this many times the other regions' median is
     * reported as a straggler (progress line, log, xdc_region_slowdown); default 2. */
    double straggler_factor;
    /* emulate_layer_ms: a device of fixed speed per region (n_layer_ms entries: 1, every region the same, or
     * one per region in the topology's order; 0: real compute only). A stage's forward of a microbatch takes at
     * least layers × layer_ms, its backward twice that (the rest a sleep counted as compute): a schedule's
     * shape, and regions of different speed, reproducible on one machine (bench/pipeline). */
    double layer_ms[ORCH_MAX_SLOWDOWN];
    int n_layer_ms;
    orch_elastic_config elastic; /* elastic: */
    bool dump_params;            /* region 0 / replica 0 writes RUN/params-stage-S.f32 at the end (tests) */
    bool plan_auto;              /* `plan: auto`: take the layout and WAN settings from the planner */
    /* The planner's compute model (docs/planner.md, "Compute speed"): `plan_compute: topology` the topology's
     * bf16_tflops x an assumed MFU; else (probe, the default) the speed a probe measured on this machine, which
     * orch_plan_apply takes from ORCH_PLAN_PROBE_ENV into probe_flops and probe_cores (xdc_plan_calib's). */
    bool plan_compute_topology;
    double probe_flops;
    int probe_cores;
    bool mode_set, stages_set; /* the run file set these by hand (constraints for the planner) */
    /* Layer partition: stage s owns [stage_layer_begin[s], stage_layer_begin[s+1]); n_split = 0: even. */
    int stage_layer_begin[ORCH_MAX_STAGES + 1];
    int n_split;
} orch_run_config;

xdc_err_t orch_run_config_load(const char *path, orch_run_config *out, xdc_cfg_errors *errs);
/* The microbatches per step of replica `replica` of region `region` (n_regions regions of replicas[r] each);
 * XDC_ERR_CONFIG, with the counts named, when microbatches_per_replica has neither one entry per replica of a
 * region (one list for every region, where every region has as many) nor one per replica of the run (region by
 * region). */
xdc_err_t orch_run_config_replica_mb(const orch_run_config *c, const int *replicas, int n_regions, int region,
                                     int replica, int *out, xdc_diag *diag);

/* ---- timeouts (orch_timeouts.c) ------------------------------------------------------------------- */

enum {
    ORCH_TIMEOUT_HANDSHAKE = 1u,
    ORCH_TIMEOUT_RENDEZVOUS = 2u,
    ORCH_TIMEOUT_OPERATION = 4u,
    ORCH_TIMEOUT_HEARTBEAT = 8u
};

/* Fill the timeouts the run file left unset (bits not in c->timeouts.set) from the largest RTT R (ms)
 * of t's links (t NULL: R = 0, the flat defaults loading gives):
 *   handshake  = min(rendezvous, max(15 s, 40 R))
 *   rendezvous = max(60 s, 200 R)
 *   operation  = max(60 s, 200 R)
 *   heartbeat  = max(1 s, operation / 2)
 * Every process of a run computes the same values from the same files. */
void orch_run_config_scale_timeouts(orch_run_config *c, const xdc_topology *t);

/* The message of a wait that ran out: "<what>: no answer from <who> at <where> within <timeout_ms> ms
 * (waiting since HH:MM:SS UTC; timeouts.<key> in the run file)". `since_wall_ns` is the wall clock
 * (xdc_wall_ns) when the wait began; `key` the run file key that sets this timeout. Replaces diag's
 * text; a reason already in diag (the layer below's) is kept after a colon. */
void orch_wait_expired(xdc_diag *diag, const char *what, const char *who, const char *where, uint64_t since_wall_ns,
                       int64_t timeout_ms, const char *key);
/* The outer learning rate and momentum the run file left unset, for its codec: DiLoCo's 0.7 / 0.9, or
 * 1.0 / 0.5 with the sparse codec (the sweep in docs/benchmarks.md). Loading calls it; so does
 * orch_plan_apply once the planner picked the codec. */
void orch_run_config_outer_defaults(orch_run_config *c);

/* A plan the run follows, with the inputs it was searched with (a re-plan reuses them). */
typedef struct orch_planned {
    xdc_model_shape m;
    xdc_batch_shape b;
    xdc_plan_opts o;
    xdc_plan plan;
} orch_planned;

/* The run's settings that go together or not (modes and their keys, DiLoCo's overlapped rounds against the period
 * and checkpoints, ...): XDC_ERR_CONFIG, said in errs, for a pair the runtime cannot run. Loading checks the
 * file (planned false: with plan: auto what the planner decides is left open); orch_plan_apply checks its result
 * (planned true), so a plan the run takes is one a run file could say. */
xdc_err_t orch_run_config_check(const orch_run_config *c, bool planned, xdc_cfg_errors *errs);

/* The stages the run's regions can hold: with span_regions one pipeline through every worker of topology t
 * (pipeline_stages equal to its workers, at most the model's layers); otherwise every region runs the same stages,
 * so each region's workers are a multiple of pipeline_stages (their replica counts may differ). XDC_ERR_CONFIG,
 * naming the region, in diag. `xdc launch` checks it before it starts anything, each worker again
 * (orch_member_place). */
xdc_err_t orch_run_config_check_layout(const orch_run_config *c, const xdc_topology *t, xdc_diag *diag);

/* The environment variable that carries a probe's figure, "FLOPS CORES" (xdc_plan_calib.probe_flops, probe_cores), from
 * the process that measured it (`xdc launch`, `xdc plan -c`) to every process that plans the run: the launcher's
 * agents and workers inherit it, so all of them choose the same plan. Set by hand it stands for a measurement. */
#define ORCH_PLAN_PROBE_ENV "XDC_PLAN_PROBE"
/* Whether c plans with a probe's figure (plan: auto or `xdc simulate -c`, without plan_compute: topology), and that
 * figure from ORCH_PLAN_PROBE_ENV into c->probe_flops, c->probe_cores (0: none set; XDC_ERR_CONFIG, said in diag,
 * for a value that is not "FLOPS CORES" with FLOPS > 0 and CORES >= 0). */
bool orch_plan_wants_probe(const orch_run_config *c);
xdc_err_t orch_plan_probe_take(orch_run_config *c, xdc_diag *diag);

/* orch_plan.c: with plan_auto, run the planner and take its layout and WAN settings (every process gets
 * the same answer). XDC_ERR_UNAVAILABLE with a reason when nothing fits. */
xdc_err_t orch_plan_apply(orch_run_config *c, const xdc_topology *t, orch_planned *out, xdc_diag *diag);
/* One line for the log: mode, stages and partition, microbatches, codec, predicted step. */
void orch_plan_describe(const orch_run_config *c, const xdc_topology *t, const xdc_plan *p, char *buf, size_t cap);
/* "compute ...": the compute model c plans with and where its figure came from (the probe's, shared among the
 * host's workers, or the topology's), for the plan line and `xdc plan --explain`. */
void orch_plan_compute_describe(const orch_run_config *c, const xdc_topology *t, char *buf, size_t cap);
const char *orch_mode_name(orch_mode m);
/* Whether outer rounds go by quorum (DiLoCo, streaming, or sync mode with `elastic:` and no delayed averaging,
 * without span, over several regions; sync mode's rounds are its steps), and the quorum's minimum
 * for n_regions regions: min_regions, or a majority when it is unset. */
bool orch_quorum_elastic(const orch_run_config *c, int n_regions);
/* Each of n_regions regions' diloco.slowdown into out[n_regions] (1 where the run file gives none);
 * XDC_ERR_CONFIG, said in diag, when the file gives a list of another length. */
xdc_err_t orch_run_config_slowdown(const orch_run_config *c, int n_regions, double *out, xdc_diag *diag);
/* Region `region`'s emulate_layer_ms of n_regions regions into *ms (0 without the key); XDC_ERR_CONFIG, said
 * in diag, when the list has neither 1 nor n_regions entries. */
xdc_err_t orch_run_config_layer_ms(const orch_run_config *c, int n_regions, int region, double *ms, xdc_diag *diag);
int orch_quorum_min(const orch_run_config *c, int n_regions);
/* The step of an elastic run's last round before its end: the finish's (train.steps) in DiLoCo and streaming,
 * the last step's (train.steps - 1) in sync mode, whose rounds come before each step's pass. */
long long orch_quorum_last_round(const orch_run_config *c);
/* Whether a region taken back at a round takes part in that round's own exchange, with weight 0 (docs/runtime.md,
 * "Rejoining"): elastic DiLoCo whose round runs at once (no diloco.overlap_steps) and weighs every member alike
 * (no diloco.nobody_waits, whose weights come from the round before, which the joiner did not see). Then its
 * members accept its connections and hand it over before that round's exchange, and the decider counts it in
 * the round's final set; else (streaming, overlapped or nobody-waits DiLoCo, sync mode) it comes in after it. */
bool orch_quorum_joins_in_round(const orch_run_config *c);
/* Whether the members of an exchange a region holds up train while they wait for it (docs/runtime.md, "Training
 * while a round waits"): streaming with diloco.train_while_waiting, whose fragments land a step after they leave and
 * keep the local progress made meanwhile (steps run in the wait are more of it). DiLoCo's rounds at once set local =
 * global' after the exchange: steps run in it would be lost. */
bool orch_quorum_trains_in_exchange(const orch_run_config *c);
/* How long a member region quiet on the store during its exchange is waited for before it leaves the run
 * (orch_quorum_init's silent_ms): elastic.grace where the members train while they wait
 * (orch_quorum_trains_in_exchange), as at a round's arrival; else timeouts.heartbeat, since they sit idle. */
int64_t orch_quorum_exchange_silent_ms(const orch_run_config *c);
/* orch_plan.c: the activation codec of the pipeline cut between regions a and b (either order): the topology link's
 * activation_codec (a -> b's, else b -> a's; both set and different is a config error), else the plan's for the
 * cut (act_cut), else the run file's activation_codec. Sender and receiver of a cut both derive it here from the
 * files they share. XDC_ERR_CONFIG, naming the link, said in diag. */
xdc_err_t orch_run_config_act_codec(const orch_run_config *c, const xdc_topology *t, int a, int b, const char **codec,
                                    xdc_diag *diag);
/* orch_plan.c: each region's pace (xdc_plan_region_pace) with the run's diloco.slowdown: how many times longer its
 * inner step takes than the fastest region's, its GPUs' TFLOP/s and its slowdown counted; what the round's decider
 * divides nobody waits' budget by and the planner prices. XDC_ERR_CONFIG as orch_run_config_slowdown. */
xdc_err_t orch_run_config_pace(const orch_run_config *c, const xdc_topology *t, double *pace, xdc_diag *diag);
/* What the run writes to the rendezvous under its prefixes of many keys (docs/security.md, "Quotas"), from
 * the run file alone, so the store host and every member get the same:
 *   rejoins = elastic ? ceil(steps * per_period / period) + 1 : 0, a region leaving at most once per outer
 *             round and at the end; period = diloco.inner_steps (1 in sync mode, and with plan: auto, whose
 *             re-plans may shorten it), per_period = 1 (DiLoCo) or min(streaming.fragments, period) (streaming);
 *   replans = plan: auto over several regions without span ? steps / replan_every : 0. */
void orch_run_config_rdzv_shape(const orch_run_config *c, int n_regions, rdzv_run_shape *out);

/* Make folder `path` and any missing parents (an existing folder is fine). A failure names the folder and
 * its errno (a read-only run folder says "Read-only file system" here, not ENOENT at a later open):
 * XDC_ERR_IO. */
xdc_err_t orch_mkdirs(const char *path, int mode, xdc_diag *diag);

#endif /* ORCH_RUN_CONFIG_H */
