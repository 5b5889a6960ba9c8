/* orch_worker.h — private to the worker runtime (the entry point is xdc_worker.h). One worker process
 * runs one pipeline stage of one data-parallel replica in one region. Its state is split by concern:
 * identity and layout (orch_worker_id), the model stage and its step buffers (orch_model), pipeline
 * transfers (orch_pipe), connections (orch_comm: WAN engine, intra communicators, sync engine),
 * telemetry, progress, and the mode (orch_mode_ops + its own state). Files: orch_worker.c (set-up,
 * teardown), orch_train.c (the 1F1B loop, the training loop), orch_pipe.c, orch_checkpoint.c, orch_rejoin.c,
 * orch_observe.c, and one orch_mode_*.c per mode. */
#ifndef ORCH_WORKER_H
#define ORCH_WORKER_H

#include "compression/xdc_codec.h"
#include "intra/xdc_intra.h"
#include "model/xdc_gpt.h"
#include "orchestrator/obs/orch_metrics.h"
#include "orchestrator/obs/orch_steplog.h"
#include "orchestrator/launch/orch_creds.h"
#include "orchestrator/launch/orch_device.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "sync/xdc_sync.h"
#include "orchestrator/obs/orch_trace.h"
#include "model/xdc_data.h"
#include "topology/xdc_topology.h"
#include "wan/xdc_wan.h"
#include "orchestrator/worker/xdc_worker.h"

#include <stdint.h>

/* One pipeline transfer in flight: intra or WAN (then `wire` holds the encoded bytes). */
typedef struct orch_pipe_req {
    xdc_intra_req *ir;
    xdc_wan_request *wr;
    xdc_wan_peer *peer;
    uint8_t *wire; /* WAN receive of an activation: encoded bytes to decode into dst */
    float *dst;    /* receive: (n) fp32 */
    size_t n;
} orch_pipe_req;

typedef struct orch_observe orch_observe; /* orch_observe.c: the worker's metric series */

/* Who this worker is and where it sits (environment contract, DESIGN.md), fixed after set-up. Layout:
 * lrank = replica * n_stages + stage; with span, one pipeline over every worker of every region in
 * order (stage = global rank). */
typedef struct orch_worker_id {
    char run_id[64], region[XDC_NAME_MAX], node[XDC_NAME_MAX], member[RDZV_MEMBER_MAX];
    char run_dir[512], coord_host[256];
    int coord_port;
    rdzv_target rdzv; /* the store this worker joins (the built-in one at coord_host:coord_port, or etcd) */
    int region_idx, n_regions;
    int lrank, lsize; /* rank and size within the region */
    int local_rank;   /* LOCAL_RANK: index on the node (picks the GPU on CUDA) */
    int grank, gsize; /* global */
    int emulate_wan, resume;
    int span;
    int stage, n_stages, replica, n_replicas;
    int layer_begin, layer_end;
} orch_worker_id;

/* The model stage this worker computes, its data and its step buffers (allocated once). */
typedef struct orch_model {
    const xdc_kern_backend *be;
    orch_device device;      /* the region's device (orch_device.h): be's kind */
    int cuda_device;         /* CUDA ordinal among the visible devices (LOCAL_RANK); -1 on the CPU devices */
    xdc_intra_backend intra; /* NCCL on CUDA, the shared-memory backend otherwise */
    xdc_gpt_stage *st;
    size_t n_params;
    xdc_data *data; /* training shard of this replica (first and last stage only) */
    xdc_data *val;  /* validation batches, the same on every replica (first and last stage) */
    int B, T, C, M;
    int32_t *tokens, *targets; /* (M, B*T) */
    /* Pipeline boundary buffers, device memory, one microbatch each: 1F1B never has two microbatches in
     * one (orch_train.c, docs/runtime.md). NULL where the stage has no such neighbour. */
    float *x_in;   /* (B*T*C) fp32 activation received from the previous stage */
    float *dy_in;  /* (B*T*C) fp32 gradient received from the next stage */
    float *dx_out; /* (B*T*C) fp32 copy of the input gradient being sent: the send outlives the next backward */
} orch_model;

/* Allocates m's boundary buffers (x_in, dy_in, dx_out) for the stage m->st on m->be's device, one
 * microbatch of m->B × m->T × m->C each, those the stage uses only; *bytes: their total, what the planner
 * counts (xdc_model_shape_boundary_bytes; tests/scheduler/test_plan.c compares). Freed by the worker's teardown. */
xdc_err_t orch_model_alloc_boundary(orch_model *m, size_t *bytes);

/* Pipeline transfers between neighbouring stages (orch_pipe.c). */
typedef struct orch_pipe {
    orch_pipe_req *x_req, *dy_req, *y_req, *dx_req; /* (M) */
    uint8_t *wire;                                  /* span: (4, M, bound) encoded activations: x, dy, y, dx */
    xdc_codec *enc, *dec;                           /* span: activation codec (no error feedback) */
    size_t elems, bound;                            /* elements of one activation (B*T*C); encoded bytes bound */
    int codec_kind;
    uint64_t tx_bytes, raw_bytes;
    float *scalars; /* (ORCH_PIPE_SCALAR_ROWS, ORCH_PIPE_MAX_SCALARS) fp32, device: in-region small messages
                     * (orch_pipe_*_small, orch_pipe_allreduce_sum) */
} orch_pipe;

#define ORCH_PIPE_MAX_SCALARS 32 /* fp32 one small message carries (loss, norm, counts; the 128-byte hash state) */
#define ORCH_PIPE_SCALAR_ROWS 3  /* small messages in flight at once: the sum's from below, up, from above */

/* Every connection of the worker: the WAN engine and its peers, the rendezvous, the intra communicators,
 * and the sync engine (the one comm thread that runs every sync of the mode, in posting order). */
typedef struct orch_comm {
    xdc_wan_engine *wan;
    xdc_wan_listener *lis;
    xdc_wan_peer **peers;                /* (n_regions) same lrank in every other region */
    xdc_wan_peer *prev_peer, *next_peer; /* span: neighbouring stages across a region boundary */
    rdzv_client *rdzv;
    xdc_intra_comm *region_comm, *pp, *dp;
    xdc_intra_comm *dp_wan; /* streaming with replicas: the fragment syncs' own replicas communicator */
    xdc_sync_engine *sync_eng;
    xdc_codec_cfg codec_cfg; /* the WAN codec in use */
} orch_comm;

/* Metrics and trace. */
typedef struct orch_telemetry {
    orch_trace *trace; /* Chrome trace of this rank (RUN/traces/trace-<rank>.json) */
    orch_metrics *metrics;
    orch_metrics_std m;
    orch_metrics_server *srv;
    orch_observe *series;
    orch_steplog *steps; /* RUN/steps/<region>-<rank>.tsv, one row per step */
} orch_telemetry;

/* Progress and the accounting for the progress line and the summary (seconds). */
typedef struct orch_progress {
    int64_t step; /* optimizer steps done */
    double t_compute, t_intra, t_wan_exposed, t_step;
    double last_loss, val_loss;
    uint64_t tokens_done;
    /* Stragglers (orch_train.c pace): per region, the same rank's cumulative compute seconds and step at
     * the last look, its compute seconds per step since the look before, and that pace over the median of
     * the other regions' (0: not known yet). */
    double pace_comp0[XDC_TOPO_MAX_REGIONS], pace[XDC_TOPO_MAX_REGIONS], slowdown[XDC_TOPO_MAX_REGIONS];
    int64_t pace_step0[XDC_TOPO_MAX_REGIONS];
} orch_progress;

/* Elastic DiLoCo and streaming (orch_mode_diloco.c, docs/runtime.md): the regions in the last outer round's quorum, as
 * the rendezvous host decided it (orchestrator/elastic/orch_quorum.h). */
typedef struct orch_elastic {
    int on;                                /* orch_quorum_elastic */
    uint8_t live[XDC_TOPO_MAX_REGIONS];    /* 1: in the last round (all before the first) */
    uint8_t joining[XDC_TOPO_MAX_REGIONS]; /* 1: rejoins at the last round (it gets the round's outer state) */
    int n_live;
    /* This process is a restarted worker of a region that left a running job (orch_rejoin.c): it found its
     * own WAN address of an earlier process in the store. */
    int rejoin;
    int left;             /* the rejoiner's region left the run this many times (left/<region>, orch_quorum.h) */
    uint64_t started;     /* xdc_now_ns() when this worker process began (xdc_worker_run) */
    uint64_t rejoin_t0;   /* xdc_now_ns() when it asked to rejoin */
    int64_t rejoin_round; /* the round that took it back; -1 once its first round as a member was logged */
    /* The round whose exchange is under way (a streaming fragment's is, across the next inner step): its
     * sync, NULL when none, its step, and the regions already named lost to it (lost/<step>). */
    xdc_sync *open;
    int64_t open_step;
    uint8_t told[XDC_TOPO_MAX_REGIONS];
} orch_elastic;

typedef struct orch_worker orch_worker;

/* A training mode (orch_mode_sync.c, orch_mode_diloco.c, orch_mode_streaming.c): the syncs and buffers it
 * needs live in its own state, made by setup and freed by destroy. The span layout (one pipeline across
 * regions) is sync mode with nothing to average across regions. */
typedef struct orch_mode_ops {
    const char *name;
    /* Create the mode's syncs (clients of w->comm.sync_eng) and buffers, once the comm is up. */
    xdc_err_t (*setup)(orch_worker *w, void **state, xdc_diag *diag);
    /* One training step: the pipeline pass with its gradient sync, the optimizer step (advancing
     * w->prog.step), and the mode's outer work due at the new step. */
    xdc_err_t (*step)(orch_worker *w, void *state, float *loss, xdc_diag *diag);
    /* After the last step: what the mode needs so every region ends on one model. */
    xdc_err_t (*finish)(orch_worker *w, void *state, xdc_diag *diag);
    /* Free the state and destroy its syncs (stopped before, see orch_worker_close). NULL state: no-op. */
    void (*destroy)(void *state);
    /* The mode's syncs, in creation order; returns how many (at most cap). */
    int (*syncs)(const void *state, xdc_sync **out, int cap);
    /* The sync that carries the WAN traffic a re-plan may switch, or NULL (streaming: fragments are in
     * flight across steps). */
    xdc_sync *(*replan_sync)(const void *state);
    /* What the mode saves or loads next to the stage checkpoint in `dir` (NULL: nothing); a checkpoint may
     * be taken after any step. */
    xdc_err_t (*checkpoint_io)(orch_worker *w, void *state, const char *dir, int save, xdc_diag *diag);
    /* A restarted worker of a region that left takes the running job's state (orch_rejoin_take; NULL in
     * sync mode, which is never elastic). */
    xdc_err_t (*rejoin)(orch_worker *w, void *state, xdc_diag *diag);
} orch_mode_ops;

extern const orch_mode_ops orch_mode_sync_ops, orch_mode_diloco_ops, orch_mode_streaming_ops;

struct orch_worker {
    orch_worker_id id;
    const orch_creds_flags *creds; /* where its key, certificate, CA and CRL are (orch_creds.h) */
    xdc_topology *topo;
    orch_run_config cfg;
    orch_planned planned; /* with cfg.plan_auto: the plan the run follows */
    orch_model model;
    orch_pipe pipe;
    orch_comm comm;
    orch_telemetry tele;
    orch_progress prog;
    orch_elastic elastic;
    const orch_mode_ops *mode; /* chosen by cfg.mode */
    void *mode_state;
    /* re-plan window: per peer region, the WAN counters of its incoming link at the window's start */
    uint64_t replan_rx0[XDC_TOPO_MAX_REGIONS]; /* bytes received */
    double replan_busy0[XDC_TOPO_MAX_REGIONS]; /* seconds they were arriving */
};

/* orch_train.c */
xdc_err_t orch_train_run(orch_worker *w, xdc_diag *diag);
/* One pipeline pass of M microbatches with the gradient sync of `grad_sync` started during the last
 * microbatch's backward, then the clipped AdamW step; advances w->prog.step. *loss: the mean loss over
 * the microbatches, summed over the stages. */
xdc_err_t orch_train_inner_step(orch_worker *w, xdc_sync *grad_sync, float *loss, xdc_diag *diag);
/* The two halves of it. The pipeline pass into the stage's current gradient arena, with the round of
 * `grad_sync` begun during the last microbatch's backward and waited for at the end (NULL: no sync; the
 * arena holds this replica's own gradients); *loss: this stage's mean microbatch loss. */
xdc_err_t orch_train_pass(orch_worker *w, xdc_sync *grad_sync, float *loss, xdc_diag *diag);
/* Clip the current gradient arena by the global gradient norm (over all stages) and take one AdamW step at
 * the learning rate of step `lr_step`; *loss is summed over the stages on the way. */
xdc_err_t orch_train_update(orch_worker *w, float *loss, int64_t lr_step, xdc_diag *diag);
/* Wait for the round of `sync` to end (xdc_sync_end, or the elastic wait), counted as exposed WAN time
 * and drawn on the trace's WAN lane. */
xdc_err_t orch_train_wait_sync(orch_worker *w, xdc_sync *sync, xdc_diag *diag);
/* Stragglers: for each of n regions, its pace (compute seconds per step; <= 0: unknown) over the median
 * of the other regions' known paces, into slowdown[n] (0 where either is unknown). */
void orch_pace_slowdowns(const double *pace, int n, double *slowdown);
/* Switch the WAN codec (the mode's re-plan sync, its residuals carried over) and, in DiLoCo, the period
 * (> 0) to a re-plan's choice: at a re-plan, and on resume to what the checkpoint ran with. */
xdc_err_t orch_train_switch_wan(orch_worker *w, const char *codec, int period, xdc_diag *diag);
/* Pipeline-forward the fixed validation batches; every stage returns the same mean loss. */
xdc_err_t orch_train_eval(orch_worker *w, double *loss, xdc_diag *diag);

/* orch_pipe.c */
/* Region and in-region pipeline rank of pipeline stage `stage` of this worker's replica. */
void orch_pipe_locate(const orch_worker *w, int stage, int *region, int *pp_rank);
xdc_err_t orch_pipe_send(orch_worker *w, int to_stage, const float *buf, size_t n, uint8_t *wire, orch_pipe_req *r,
                         xdc_diag *diag);
xdc_err_t orch_pipe_recv(orch_worker *w, int from_stage, float *buf, size_t n, uint8_t *wire, orch_pipe_req *r,
                         xdc_diag *diag);
/* Complete a transfer (no-op on an empty request); charges intra or WAN time. */
xdc_err_t orch_pipe_wait(orch_worker *w, orch_pipe_req *r, xdc_diag *diag);
xdc_err_t orch_pipe_allreduce_sum(orch_worker *w, float *v, int n, xdc_diag *diag);
/* Small control messages (the scalar sums, the parameter-hash state; n <= ORCH_PIPE_MAX_SCALARS fp32) to or
 * from the neighbour stage `peer`: through device row `row` of w->pipe.scalars when it is in this region
 * (the intra communicator is NCCL on a GPU, which takes device memory only), raw from host memory over
 * the WAN otherwise. wait_small completes either and brings a received row to `v` (NULL for a send).
 * Two messages in flight at once use different rows. */
xdc_err_t orch_pipe_send_small(orch_worker *w, int peer, const float *v, int n, int row, orch_pipe_req *r,
                               xdc_diag *diag);
xdc_err_t orch_pipe_recv_small(orch_worker *w, int peer, float *v, int n, int row, orch_pipe_req *r, xdc_diag *diag);
xdc_err_t orch_pipe_wait_small(orch_worker *w, int peer, float *v, int n, int row, orch_pipe_req *r, xdc_diag *diag);

/* orch_mode_diloco.c: the outer loop DiLoCo and streaming share. */
typedef struct orch_outer {
    xdc_sync *sync;     /* pseudo-gradients across regions (codec + error feedback) */
    float *local;       /* device (n) the parameters the rounds update (the stage's; libxdc: its staging) */
    size_t n;           /* parameters, fp32 */
    xdc_stream *stream; /* where the outer arithmetic and copies queue (the stage's compute stream) */
    float *global;      /* device (n) the last agreed global parameters */
    float *mom;         /* device (n) outer Nesterov momentum */
    float *pseudo;      /* device (n) pseudo-gradient: what the sync averages */
    float *host;        /* pinned host (n): the checkpoint's staging of global and momentum */
    bool mean;          /* the next outer step is the plain mean (η = 1, μ = 0): keep_unsent's last round */
} orch_outer;
/* Save (or load) global and mom as state files next to the stage checkpoint in `dir`. */
xdc_err_t orch_outer_checkpoint_io(orch_worker *w, orch_outer *o, const char *dir, int save, xdc_diag *diag);
/* Buffers (global = the stage's parameters now) and the pseudo-gradient sync over `dp` and the regions;
 * elastic rounds as the run file says. */
xdc_err_t orch_outer_setup(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag);
/* The same over o->local (o->n fp32 device memory of w's backend; global = its values now), its arithmetic
 * on o->stream (NULL: the calling thread's current stream), without elastic rounds: libxdc's outer rounds
 * over a user's parameters. */
xdc_err_t orch_outer_open(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag);
void orch_outer_destroy(orch_worker *w, orch_outer *o);
/* The device and compute stream of the worker's stage in `sc` (every sync of the modes). */
void orch_sync_device_cfg(orch_worker *w, xdc_sync_cfg *sc);
/* Make the stage's compute stream the calling thread's current one (the outer arithmetic's model ops run
 * there); leave restores `prev` and reports that stream's sticky error. */
xdc_err_t orch_outer_enter(const orch_worker *w, xdc_stream **prev);
xdc_err_t orch_outer_leave(const orch_worker *w, xdc_stream *prev);
/* pseudo = global - local on [lo, hi) (local: o->local). */
xdc_err_t orch_outer_pseudo(orch_worker *w, orch_outer *o, size_t lo, size_t hi);
/* Outer Nesterov step on [lo, hi): pseudo holds the cross-region mean of (global - local). */
xdc_err_t orch_outer_update(orch_worker *w, orch_outer *o, size_t lo, size_t hi);
/* Elastic rounds: the quorum of the round at this step (orch_elastic_agree) taken into `sync`'s members;
 * nothing without elastic rounds. Before each sync across regions of an outer round. */
xdc_err_t orch_outer_quorum(orch_worker *w, xdc_sync *sync, xdc_diag *diag);
/* Elastic rounds (docs/runtime.md, "Leaving during a round"): the exchange of the outer round at `step` is
 * under way on `sync` (begun); until orch_outer_end, every orch_elastic_wait tells it the member regions the
 * store's host names lost during it. Nothing without elastic rounds. */
void orch_outer_opened(orch_worker *w, xdc_sync *sync, int64_t step);
/* End `sync`'s round (as xdc_sync_end) while a round's exchange is open: looking every 200 ms whether a member
 * region left during it, and telling the open round's sync (xdc_sync_lose), which may be what `sync` waits
 * behind on the comm thread. Without an open exchange, xdc_sync_end. */
xdc_err_t orch_elastic_wait(orch_worker *w, xdc_sync *sync, xdc_diag *diag);
/* End the exchange of `sync`'s round, the outer round at `step` (its time counted as exposed WAN). Elastic
 * rounds: orch_elastic_wait, then the round ends on its final set; otherwise xdc_sync_end. */
xdc_err_t orch_outer_end(orch_worker *w, xdc_sync *sync, int64_t step, xdc_diag *diag);
/* An outer round over the whole stage (after its quorum): every member region ends on the same global
 * parameters, local = global. */
xdc_err_t orch_outer_round(orch_worker *w, orch_outer *o, xdc_diag *diag);

/* Elastic rounds: post this worker's arrival at `round` (a step, or ORCH_QUORUM_END) and take the store
 * host's decision of who is in it into w->elastic; XDC_ERR_UNAVAILABLE when this region was left out. */
xdc_err_t orch_elastic_agree(orch_worker *w, const char *round, xdc_diag *diag);

/* orch_rejoin.c: a region that left an elastic DiLoCo or streaming run comes back (docs/runtime.md,
 * "Rejoining"). */
/* At start: is this worker a restarted one of a running elastic job (w->elastic.rejoin)? Then wait until the
 * store host let its region go. Over the emulated WAN the launcher opened the
 * routes a joiner needs to dial lower regions once the region left (orch_launch.c, pump_relays). */
xdc_err_t orch_rejoin_detect(orch_worker *w, xdc_diag *diag);
/* The joiner, before its first step: ask to rejoin, wait for the round that takes it, dial that round's
 * members and take the global parameters and outer momentum from the lowest one (hash-checked; XDC_ERR_CORRUPT
 * on a mismatch); local = global, the step and the data position are the sender's. `lag`: how many steps
 * after a round the members hand its state over (DiLoCo 0; streaming 1, once the round's fragment landed);
 * the run's last round hands it over at once. */
xdc_err_t orch_rejoin_take(orch_worker *w, orch_outer *o, int lag, xdc_diag *diag);
/* After the exchange of the round at step `round`: the first one a rejoined worker took part in is logged with
 * the time it took. */
void orch_rejoin_member(orch_worker *w, int64_t round);
/* A member, once the exchange of a round that named joining regions is done (nothing on the wire): accept each
 * joiner's new WAN peer in place of the dead one, and, in the lowest member region, send it the global
 * parameters and momentum, with this worker's step and data position. A joiner
 * that does not connect or take the state is named and not waited for again (the store host drops it at
 * the next round); errors are the device's. */
xdc_err_t orch_rejoin_give(orch_worker *w, orch_outer *o);
/* orch_worker.c: dial region r's rank `rank` (directly, or through the launcher's relay). */
xdc_err_t orch_worker_dial(orch_worker *w, int r, int rank, xdc_wan_peer **out, xdc_diag *diag);

/* orch_observe.c: Prometheus metrics of the worker (metrics_port >= 0) */
xdc_err_t orch_observe_start(orch_worker *w, xdc_diag *diag);
void orch_observe_step(orch_worker *w, double step_s, double compute_s, double intra_s, double wan_s, float loss);
/* Write RUN/metrics/<region>-<rank>.prom and stop the server. */
void orch_observe_finish(orch_worker *w);

/* orch_checkpoint.c */
int orch_checkpoint_due(const orch_worker *w);
xdc_err_t orch_checkpoint_save(orch_worker *w, xdc_diag *diag);
/* Load the newest complete checkpoint of the run, if any (w->step stays 0 without one). */
xdc_err_t orch_checkpoint_resume(orch_worker *w, xdc_diag *diag);

/* orch_worker.c: the set-up and teardown every member process of a run shares, the worker (xdc_worker_run)
 * and a user program on libxdc (orchestrator/api). In this order: load, place, the device (the worker's
 * choice; libxdc: the CPU), connect, comm engine; close after any of them. */
/* Zero w; load the topology and run file (every error printed to stderr, the first in diag with
 * file:line:col: XDC_ERR_CONFIG), resolve the identity from the environment contract (XDC_ERR_CONFIG
 * naming what is missing and where it looked), apply the plan with `plan: auto`. */
xdc_err_t orch_worker_load(orch_worker *w, const xdc_worker_opts *o, xdc_diag *diag);
/* Check the identity against the topology and derive this process's place in the layout. */
xdc_err_t orch_worker_place(orch_worker *w, xdc_diag *diag);
/* The WAN engine with the member's credentials, the rendezvous join (and the "joined" barrier), the intra
 * communicators, the WAN peers. *what names the step that failed. */
xdc_err_t orch_worker_connect(orch_worker *w, const char **what, xdc_diag *diag);
/* The run's WAN codec (w->comm.codec_cfg) and the sync engine, the comm thread every sync runs on. */
xdc_err_t orch_worker_comm_engine(orch_worker *w, xdc_diag *diag);
/* Log "<what> failed" and post failed/<member> to the rendezvous, for the launcher to name. */
void orch_worker_report_failure(orch_worker *w, const char *what, xdc_err_t rc, const char *msg);
/* The end of a run: nobody leaves before everyone is done (the "done" barrier), then global rank 0 posts
 * "finished" so a coordinator may close the store. */
xdc_err_t orch_worker_end_barrier(orch_worker *w, xdc_diag *diag);
/* Tear down whatever was set up, in the order docs/design.md gives (the mode's syncs through w->mode). */
void orch_worker_close(orch_worker *w);

#define ORCH_MAX_SYNCS (2 + 1024) /* gradients, pseudo-gradients, streaming fragments */
/* Every sync of this worker's mode, in creation order; returns how many (at most cap). */
int orch_worker_syncs(const orch_worker *w, xdc_sync **out, int cap);
/* The configuration every sync of the worker starts from: this stage's parameters, the run's bucket
 * size and WAN codec, the replicas, the trace hook, and with `across_regions` the other regions (none
 * with span: each stage exists once). */
void orch_worker_sync_cfg(orch_worker *w, int across_regions, xdc_sync_cfg *out);
/* Layers of stage s of n: an even split, the first stages taking one more when it does not divide. */
void orch_stage_layers(int n_layer, int n_stages, int s, int *begin, int *end);

#endif /* ORCH_WORKER_H */
