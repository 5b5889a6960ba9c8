/* orch_worker.h — private to the worker runtime (the entry point is xdc_worker.h). One worker process runs one pipeline stage of one data-parallel replica in
 * one region, on a member of the run (orchestrator/member/orch_member.h: identity and layout, run file,
 * device, connections, sync engine). Its own state is split by concern: the model stage and its step
 * buffers (orch_model), pipeline transfers (orch_pipe), telemetry, progress, elastic rounds, and the mode
 * (orch_mode_ops + its own state). Files: orch_worker.c (set-up, teardown), orch_worker_sync.c (the
 * worker's syncs), orch_worker_outer.c (its side of the outer round), orch_train.c (the 1F1B loop, the training loop), orch_pipe.c, orch_checkpoint.c,
 * orch_rejoin.c, orch_observe.c, and one orch_mode_*.c per mode. */
#ifndef ORCH_WORKER_H
#define ORCH_WORKER_H

#include "compression/xdc_codec.h"
#include "compression/xdc_lowrank.h"
#include "intra/xdc_intra.h"
#include "model/xdc_gpt.h"
#include "orchestrator/elastic/orch_elastic_member.h"
#include "orchestrator/elastic/orch_routes.h"
#include "orchestrator/obs/orch_metrics.h"
#include "orchestrator/obs/orch_steplog.h"
#include "orchestrator/member/orch_member.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "sync/xdc_sync.h"
#include "orchestrator/obs/orch_trace.h"
#include "model/xdc_data.h"
#include "topology/xdc_topology.h"
#include "wan/xdc_wan.h"
#include "orchestrator/member/orch_outer.h"
#include "orchestrator/worker/xdc_worker.h"

#include <stdint.h>

/* One pipeline transfer in flight: intra or WAN (then `wire` holds the encoded bytes). */
typedef struct orch_pipe_link orch_pipe_link;

typedef struct orch_pipe_req {
    xdc_intra_req *ir;
    xdc_wan_request *wr;
    xdc_wan_peer *peer;
    const orch_pipe_link *link; /* WAN receive: the link it comes by, whose codec decodes it */
    uint8_t *wire;              /* WAN receive of an activation: encoded bytes to decode into dst */
    float *dst;                 /* receive: (n) fp32 */
    size_t n;
} orch_pipe_req;

typedef struct orch_worker orch_worker;
typedef struct orch_observe orch_observe; /* orch_observe.c: the worker's metric series */

/* The model stage this worker computes, its data and its step buffers (allocated once). */
typedef struct orch_model {
    const xdc_kern_backend *be; /* the member's device (orch_member_backend): a static table, it outlives the member */
    xdc_gpt_stage *st;
    size_t n_params;
    /* this region's run-file slowdown (1: none): each training pass costs that many times its compute */
    double slowdown;
    xdc_data *data; /* training shard of this replica (first and last stage only) */
    xdc_data *val;  /* validation batches, the same on every replica (first and last stage) */
    int B, T, C, M; /* M: this replica's microbatches per step (microbatches_per_replica, else microbatches) */
    int M_region;   /* the microbatches of all the region's replicas together per step */
    /* (n_regions) each region's M_region (its replicas may be more or fewer than this region's), and whether they
     * differ between regions: then each region's weight in every cross-region mean (orch_region_weights) */
    int region_mb[XDC_TOPO_MAX_REGIONS];
    bool regions_differ;
    double layer_s; /* emulate_layer_ms of this worker's region, seconds (0: real compute only; orch_train.c) */
    int32_t *tokens, *targets; /* (M, B*T) */
    /* Interleaved 1F1B (pipeline_chunks v = chunks > 1): chunk[k] holds the layers of virtual stage stage + k·P of
     * the P·v-way split (orch_train.c), st is chunk[0] and n_params its count (what the mode's sync,
     * checkpoints and outer rounds carry; orch_run_config.c refuses all but sync mode with chunks). chunks 1:
     * chunk[0] = st. */
    xdc_gpt_stage *chunk[ORCH_MAX_CHUNKS];
    int chunks;
    /* chunks > 1 in sync mode: each chunk's gradient sync (its own arena; [0] the mode's), set by the mode */
    xdc_sync *chunk_sync[ORCH_MAX_CHUNKS];
    /* Pipeline boundary buffers, device memory, one microbatch each: 1F1B never has two microbatches in
     * one (orch_train.c, docs/runtime.md). NULL where the stage has no such neighbour. With chunks > 1 every
     * stage has x_in and dy_in (the chunks' boundary wraps from the last stage to the first) and no dx_out
     * (each schedule step's transfers complete within it). */
    float *x_in;   /* (B*T*C) fp32 activation received from the previous stage */
    float *dy_in;  /* (B*T*C) fp32 gradient received from the next stage */
    float *dx_out; /* (B*T*C) fp32 copy of the input gradient being sent: the send outlives the next backward */
} orch_model;

/* Allocates m's boundary buffers (x_in, dy_in, dx_out) for the stage m->st on m->be's device, one
 * microbatch of m->B × m->T × m->C each, those the stage uses only; *bytes: their total, what the planner
 * counts (xdc_model_shape_boundary_bytes; tests/scheduler/test_plan.c compares). Freed by the worker's teardown. */
xdc_err_t orch_model_alloc_boundary(orch_model *m, size_t *bytes);

/* One WAN neighbour of a stage across a pipeline cut, with the cut's activation codec (orch_run_config_act_codec:
 * the neighbour derives the same one from the same files). */
struct orch_pipe_link {
    xdc_wan_peer *peer;   /* NULL: no such neighbour across the WAN */
    int codec_kind;       /* the codec byte of an activation message: xdc_codec_kind or ORCH_PIPE_LOWRANK */
    xdc_codec *enc, *dec; /* bf16/int8 (stateless: one each) */
    /* lowrank: one context per direction, as each keeps the basis of its own message sequence: tx what this
     * stage sends over the link (x to the next stage, dx to the previous), rx what it receives */
    xdc_lowrank *tx, *rx;
};

enum { ORCH_PIPE_PREV, ORCH_PIPE_NEXT, ORCH_PIPE_WRAP, ORCH_PIPE_LINKS };

/* Pipeline transfers between neighbouring stages (orch_pipe.c). */
typedef struct orch_pipe {
    orch_pipe_req *x_req, *dy_req, *y_req, *dx_req; /* (M) */
    uint8_t *wire; /* span: encoded activations, wire_n[k] × bound bytes per kind k (x, dy, y, dx), in turn */
    int wire_n[4]; /* encoded buffers per kind: what can be in flight (orch_pipe_wire_counts), 0 within a region */
    /* span: the previous stage, the next and the interleaved wrap-around (orch_member_wrap_peer), each
     * across the WAN with its cut's codec; a two-region wrap rides the next or previous link */
    orch_pipe_link link[ORCH_PIPE_LINKS];
    float *lowrank_host; /* (B*T*C) fp32 host staging: the low-rank codec runs on the host; NULL without it */
    size_t elems, bound; /* elements of one activation (B*T*C); encoded bytes bound, the largest of the links' */
    uint64_t tx_bytes, raw_bytes;
    float *scalars; /* (ORCH_PIPE_SCALAR_ROWS, ORCH_PIPE_MAX_SCALARS) fp32, device: in-region small messages
                     * (orch_pipe_*_small, orch_pipe_allreduce_sum) */
} orch_pipe;

#define ORCH_PIPE_LOWRANK     0xfe /* codec byte of a low-rank activation message (0xff: raw control) */
#define ORCH_PIPE_MAX_SCALARS 32   /* fp32 one small message carries (loss, norm, counts; the 128-byte hash state) */
#define ORCH_PIPE_SCALAR_ROWS 3    /* small messages in flight at once: the sum's from below, up, from above */

/* The worker's own connections; the member holds the rest (orch_member_rdzv, orch_member_peers, ...). */
typedef struct orch_comm {
    xdc_intra_comm *dp_wan; /* streaming with replicas: the fragment syncs' own replicas communicator */
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

/* Elastic DiLoCo and streaming (orch_mode_diloco.c, docs/runtime.md): the worker's side of the round protocol
 * (orchestrator/elastic/orch_elastic_member.h: the regions in the last outer round's quorum, as the rendezvous
 * host decided it) and what the worker keeps beside it. */
typedef struct orch_elastic {
    int on;                /* orch_quorum_elastic */
    orch_elastic_member m; /* live, joining, n_live: the last round's decision */
    /* This process is a restarted worker of a region that left a running job (orch_rejoin.c): it found its
     * own WAN address of an earlier process in the store. */
    int rejoin;
    int left;             /* the rejoiner's region left the run this many times (left/<region>, orch_quorum.h) */
    uint64_t started;     /* xdc_now_ns() when this worker process began (xdc_worker_run) */
    uint64_t rejoin_t0;   /* xdc_now_ns() when it asked to rejoin */
    int64_t rejoin_round; /* the round that took it back (RDZV_ROUND_END: none, the run ended first); -1 once
                           * its first round as a member was logged */
    struct orch_rejoin_out *give; /* a member's hand-overs of its slice of the state whose sends are not all
                                   * settled, newest first (orch_rejoin.c); NULL: none */
    /* A rejoined worker's state on its way while it takes part in the rounds with weight 0 and runs no inner
     * step (orch_rejoin.c); NULL: none */
    struct orch_rejoin_in *take;
    /* DiLoCo and streaming: this worker's snapshot of its last outer round and the last rounds' means (orch_snapshot.c);
     * a restarted worker's snapshot of its earlier process; NULL: none yet */
    struct orch_warm *warm;
    /* A stop's notice after each inner step (orch_elastic_look): xdc_now_ns() at the end of the last one (0: none
     * yet), and their usual spacing, seconds */
    uint64_t inner_end_ns;
    double inner_gap_s;
    /* DiLoCo and streaming: the outer state its rounds update (orch_outer_setup), of which a member hands a region
     * taken back at a round its slice before that round's exchange (m.joins_in_round); NULL in sync mode */
    orch_outer *outer;
    /* The sync of the round whose exchange is under way (a streaming fragment's is, across the next inner
     * step), NULL when none; m.open is its step. */
    xdc_sync *open;
    /* The links the open round's exchange waited on with no stream up (their connection broke and is not back:
     * the run's own event; a real link fails without telling): the seconds of this round's waits each was seen
     * so, and whether it was at the last look. orch_elastic_wait looks, orch_elastic_links says. */
    double down_s[XDC_TOPO_MAX_REGIONS];
    uint8_t down[XDC_TOPO_MAX_REGIONS];
    /* Rank 0's link report (orchestrator/elastic/orch_routes.h): per peer, its received payload bytes and busy
     * seconds at the last report, whether it was seen down since, its last rate measure ('0'..'9'; 0 or '?': none)
     * and how many reports ago that was. And the routes the last round went ("": direct). */
    uint64_t rx_bytes[XDC_TOPO_MAX_REGIONS];
    double rx_busy[XDC_TOPO_MAX_REGIONS];
    uint8_t cut[XDC_TOPO_MAX_REGIONS];
    char rate[XDC_TOPO_MAX_REGIONS];
    int rate_age[XDC_TOPO_MAX_REGIONS];
    char routes[ORCH_ROUTES_VALUE_MAX];
    /* (n_regions) each member region's weight in the next outer round's mean (DiLoCo's nobody waits and train
     * while waiting: the tokens it processed, orch_mode_diloco.c); NULL: 1 each. Regions out of the round weigh 0
     * whatever it says. Set by weigh(w), when the mode has one, once the round's decision is read. */
    const float *weight;
    void (*weigh)(orch_worker *w);
    /* Train while waiting (diloco.train_while_waiting, DiLoCo and streaming; orch_train_while_waiting): the region's
     * replicas' sync the steps run in a round's wait use, how many ran and their wall seconds (all of them), and of
     * those the ones run while an exchange waited for a member (orch_quorum_trains_in_exchange: a streaming
     * fragment's; the rest waited for a round's decision, which the decider counts) */
    xdc_sync *waiting_grad;
    long long waiting_run, exchange_run;
    double waiting_s, exchange_s;
} orch_elastic;

/* A training mode (orch_mode_sync.c, orch_mode_diloco.c, orch_mode_streaming.c): the syncs and buffers it
 * needs live in its own state, made by setup and freed by destroy. The span layout (one pipeline across
 * regions) is sync mode with nothing to average across regions. */
typedef struct orch_mode_ops {
    const char *name;
    /* Create the mode's syncs (clients of the member's sync engine) and buffers, once the comm is up. */
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
    orch_member *member; /* load, place, device, connections, the sync engine: what libxdc shares */
    /* Views into the member, set once it is loaded (orch_member.h; the member owns them): */
    const orch_member_id *id;
    xdc_topology *topo;
    orch_run_config *cfg;
    orch_planned *planned;
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

/* Encoded-activation buffers a stage of a span pipeline needs per kind (x, dy, y, dx) into n[4]: what the
 * 1F1B pass can have in flight with a neighbour over the WAN (`prev_wan`, `next_wan`), 0 for an in-region
 * one. x and dx: the previous stage's slots, min(M, P − s + 1); dy and y: this stage's, min(M, P − s)
 * (orch_train.c says why none is overwritten while in flight), where there were M of each before. */
void orch_pipe_wire_counts(int stages, int stage, int microbatches, bool prev_wan, bool next_wan, int n[4]);

/* orch_train.c: the training loop and the 1F1B pass. */
xdc_err_t orch_train_run(orch_worker *w, xdc_diag *diag);
/* One pipeline pass of M microbatches with the gradient sync of `grad_sync` started during the last
 * microbatch's backward, then the clipped AdamW step; advances w->prog.step. *loss: the mean loss over
 * the microbatches, summed over the stages. In an elastic run, a worker that finds it was stopped since its last
 * inner step and its region dropped meanwhile fails with XDC_ERR_UNAVAILABLE after it (orch_elastic_woke). */
xdc_err_t orch_train_inner_step(orch_worker *w, xdc_sync *grad_sync, float *loss, xdc_diag *diag);
/* Train while waiting (diloco.train_while_waiting; docs/runtime.md): at a mode's setup, an elastic member that waits
 * for a round's decision past twice its usual inner step runs inner steps on `grad` (the region's replicas' sync)
 * until it comes, each announced to the decider first (orch_elastic_arrive). Nothing without the setting. */
void orch_train_while_waiting(orch_worker *w, xdc_sync *grad);
/* The two halves of it. The pipeline pass into the stage's current gradient arena, with the round of
 * `grad_sync` begun during the last microbatch's backward and waited for at the end (NULL: no sync; the
 * arena holds this replica's own gradients); *loss: this stage's mean microbatch loss. */
xdc_err_t orch_train_pass(orch_worker *w, xdc_sync *grad_sync, float *loss, xdc_diag *diag);
/* Clip the current gradient arena by the global gradient norm (over all stages) and take one AdamW step at
 * the learning rate of step `lr_step`; *loss is summed over the stages on the way. */
xdc_err_t orch_train_update(orch_worker *w, float *loss, int64_t lr_step, xdc_diag *diag);
/* Stragglers: for each of n regions, its pace (compute seconds per step; <= 0: unknown) over the median
 * of the other regions' known paces, into slowdown[n] (0 where either is unknown). */
void orch_pace_slowdowns(const double *pace, int n, double *slowdown);
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

/* orch_worker_outer.c: the worker's side of the outer loop DiLoCo and streaming share
 * (orchestrator/member/orch_outer.h). */
/* Save (or load) global and mom as state files next to the stage checkpoint in `dir`. */
xdc_err_t orch_outer_checkpoint_io(orch_outer *o, const char *dir, int save, xdc_diag *diag);
/* The outer state over the stage's parameters on its compute stream, the pseudo-gradient sync over `dp` and
 * the regions, the worker's hooks (elastic rounds as the run file says, exposed WAN time). */
xdc_err_t orch_outer_setup(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag);
/* The device and compute stream of the worker's stage in `sc` (every sync of the modes). */
void orch_sync_device_cfg(orch_worker *w, xdc_sync_cfg *sc);
/* DiLoCo's and streaming's inner-step sync over the region's replicas (no WAN), its configuration into *sc
 * (sc->dp: the replicas' communicator, NULL with one replica); *out NULL with one replica: nothing to average, and a
 * round of it on the comm thread would queue behind an outer round's exchange in flight (a streaming fragment's),
 * holding the inner step's end until that exchange ended. */
xdc_err_t orch_replicas_sync(orch_worker *w, xdc_sync_cfg *sc, xdc_sync **out, xdc_diag *diag);
/* orch_outer_apply of the round in flight, then the rejoin's part (orch_rejoin_member, orch_rejoin_give). */
xdc_err_t orch_worker_outer_apply(orch_worker *w, orch_outer *o, xdc_sync *sync, size_t lo, size_t hi, xdc_diag *diag);
/* A whole-stage round at the step now, at once (orch_outer_round with the rejoin's part). */
xdc_err_t orch_worker_outer_round(orch_worker *w, orch_outer *o, xdc_diag *diag);
/* At a mode's setup: w->elastic.on (orch_quorum_elastic) and its member half of the round protocol, no round
 * open. */
void orch_elastic_setup(orch_worker *w);
/* A worker that was stopped (SIGSTOP, a frozen VM; docs/runtime.md "Leaving") finds the monotonic clock, which
 * runs on while a process is stopped, far past its pace. At a look (after each inner step, at each poll of an open
 * round's wait): *last_ns, xdc_now_ns() at the previous look (0: none), becomes now, and *usual_s, a moving mean of
 * the looks' spacing in seconds, takes this spacing in (at most as the limit, so neither a stop nor a long wait
 * hides the next stop). A spacing past the limit (4 x the usual, at least 1 s) asks the store once whether the
 * region was dropped meanwhile: then XDC_ERR_UNAVAILABLE, the worker leaves (orch_elastic_woke). Elastic runs only. */
xdc_err_t orch_elastic_look(orch_worker *w, uint64_t *last_ns, double *usual_s, xdc_diag *diag);
/* Elastic rounds (nothing without them): the quorum of the round at `step` (orch_elastic_agree) into `sync`'s
 * weights (0 out; 1 in, or with nobody waiting the tokens each region processed: w->elastic.weight), before
 * its exchange; orch_elastic_open: that exchange is under way on `sync` (begun), and until orch_elastic_end
 * every orch_elastic_wait tells it the member regions the store's host names lost during it (docs/runtime.md,
 * "Leaving during a round"). The outer rounds' hooks, and each step of elastic sync mode. */
xdc_err_t orch_elastic_quorum(orch_worker *w, xdc_sync *sync, int64_t step, xdc_diag *diag);
void orch_elastic_open(orch_worker *w, xdc_sync *sync, int64_t step);
/* End the exchange of `sync`'s round at `step` (its time counted as exposed WAN). Elastic rounds:
 * orch_elastic_wait, then the round ends on its final set; otherwise xdc_sync_end. */
xdc_err_t orch_elastic_end(orch_worker *w, xdc_sync *sync, int64_t step, xdc_diag *diag);
/* End `sync`'s round (as xdc_sync_end) while a round's exchange is open: looking every 200 ms whether a member
 * region left during it, and telling the open round's sync (xdc_sync_lose), which may be what `sync` waits
 * behind on the comm thread; and whether the link to a member region is down (its WAN peer has no stream up).
 * With `train` (the open exchange's own wait, where the members train while they wait:
 * orch_quorum_trains_in_exchange) and a member that trains while it waits (m.busy), inner steps run between the
 * looks once it took m.busy_after_s. Without an open exchange, xdc_sync_end. */
xdc_err_t orch_elastic_wait(orch_worker *w, xdc_sync *sync, int train, xdc_diag *diag);
/* After the exchange of the round at `step`: each link orch_elastic_wait saw down during it, logged with how
 * long the exchange waited on it (it holds until the link is back: no relay around a down link yet); not the
 * link to a region named lost during the round (its process died: the round went on without it). */
void orch_elastic_links(orch_worker *w, long long step);
/* Before arriving at the round at `step`: rank 0 posts its region's report of its links (links/<region>/0,
 * orchestrator/elastic/orch_routes.h) for the decider; other ranks nothing. */
xdc_err_t orch_elastic_report_links(orch_worker *w, long long step, xdc_diag *diag);
/* After the round's decision: the routes the decider chose for it (routes/<step>) into `sync` (xdc_sync_set_routes),
 * a change logged. */
xdc_err_t orch_elastic_routes(orch_worker *w, xdc_sync *sync, long long step, xdc_diag *diag);
/* Elastic rounds: post this worker's arrival at `round` (a step, or RDZV_ROUND_END) and take the store
 * host's decision of who is in it into w->elastic.m (orch_elastic_arrive); XDC_ERR_UNAVAILABLE when this
 * region was left out. */
xdc_err_t orch_elastic_agree(orch_worker *w, long long round, xdc_diag *diag);

/* orch_rejoin.c: a region that left an elastic DiLoCo, streaming or sync run comes back (docs/runtime.md,
 * "Rejoining"). */
/* At start: is this worker a restarted one of a running elastic job (w->elastic.rejoin)? Then wait until the
 * store host let its region go. Over the emulated WAN the launcher opened the
 * routes a joiner needs to dial lower regions once the region left (orch_launch.c, pump_relays). */
xdc_err_t orch_rejoin_detect(orch_worker *w, xdc_diag *diag);
/* The joiner, before its first step: ask to rejoin, wait for the round that takes it, dial that round's
 * members (in elastic DiLoCo before the round's exchange, which the mode then runs with it: m.joins_in_round)
 * and post the receives of a slice of the state from each, all at once: the global parameters, outer
 * momentum and AdamW moments (hash-checked; XDC_ERR_CORRUPT naming the part and the member on a mismatch). The
 * step and the data position are the members' (their headers, XDC_ERR_PROTO when they disagree). In DiLoCo and
 * streaming the slices land while the joiner takes part in the rounds with weight 0 (w->elastic.take;
 * orch_rejoin_arrive, orch_rejoin_catch_up); in sync mode it waits for them here and local = global, the AdamW
 * step count the members'. `lag`: how many steps after a round the members hand its state over (DiLoCo 0;
 * streaming 1, once the round's fragment landed). When the run's end was decided first, w->elastic.rejoin_round =
 * RDZV_ROUND_END and nothing is taken: the run has no use for this worker. `step` (ctx: the worker; NULL: none):
 * the mode's inner step, which elastic DiLoCo's joiner runs from its snapshot while it asks (orch_rejoin.c). */
xdc_err_t orch_rejoin_take(orch_worker *w, orch_outer *o, int lag, xdc_err_t (*step)(void *ctx, xdc_diag *diag),
                           xdc_diag *diag);
/* A joiner's inner step while its state is on its way: the step's batches are drawn and nothing is computed
 * (its data position stays a member's), counted so that its AdamW step count becomes the members' when it takes
 * the state. */
xdc_err_t orch_rejoin_pass(orch_worker *w, float *loss);
/* Does the joiner whose state is on its way train from its snapshot meanwhile (streaming with train_while_waiting,
 * orch_rejoin.c)? Then its inner steps are real ones instead of orch_rejoin_pass. */
bool orch_rejoin_trains(const orch_worker *w);
/* Before a joiner's arrival at a round while its state is on its way: "took" when every slice is in, else
 * "taking" (w->elastic.m.arrive); XDC_ERR_UNAVAILABLE when a donor left the run before its slice came. */
xdc_err_t orch_rejoin_arrive(orch_worker *w, xdc_diag *diag);
/* After the outer step of a round on [lo, hi) a joiner took part in with weight 0: the round's mean is kept;
 * once the round's decision says its region had the state ('c'), at the round that took it back when every worker
 * of its region has its state by its end (m.joins_in_round), or at the run's last round (waited for), the state is
 * taken, the kept rounds' outer steps replayed and local = global: it trains from here, a member from the next
 * round on. */
xdc_err_t orch_rejoin_catch_up(orch_worker *w, orch_outer *o, size_t lo, size_t hi, xdc_diag *diag);
/* After the exchange of the round at step `round`: the first one a rejoined worker took part in as a member
 * (with its weight) is logged with the time it took. */
void orch_rejoin_member(orch_worker *w, int64_t round);
/* A member at a round that named joining regions, once its decision is read and before its exchange (elastic
 * DiLoCo, m.joins_in_round: the state of the round's start, and the joiner takes part in the exchange), else once
 * its exchange is done (nothing on the wire): stage this
 * member's slice of the state (with its step, data position and AdamW step count), accept each joiner's new
 * WAN peer in place of the dead one and post the slice to it on the comm engine, which sends it while this
 * worker trains on; each call settles the sends of earlier hand-overs that completed, never waiting for them. A joiner that does not
 * connect or take the state is named and not waited for again (before the exchange: left out of it; the store
 * host drops it at the next round); errors are the device's. */
xdc_err_t orch_rejoin_give(orch_worker *w, orch_outer *o);
/* At teardown: wait for the last hand-over's sends (the engine ends those to a silent joiner) and free it, and a
 * joiner's state still on its way. */
void orch_rejoin_drain(orch_worker *w);
/* XDC_TEST_REJOIN=<fault>@<region> names `fault` at our region and has not fired in this process yet (then it
 * fires: 1); orch_rejoin.c lists the faults. */
int orch_rejoin_test_fault(const orch_worker *w, const char *fault);

/* orch_snapshot.c: the warm rejoin of elastic DiLoCo and streaming (docs/runtime.md, "Rejoining"). Why a donor
 * sends a joiner its slice of the state rather than the rounds' means since its snapshot: */
enum { ORCH_WARM_OK, ORCH_WARM_NONE, ORCH_WARM_MISMATCH, ORCH_WARM_OLD, ORCH_WARM_OFF, ORCH_WARM_COST };
#define ORCH_WARM_MAX 64 /* rounds a member keeps at most: a header's bit each (plain mean or not) */
const char *orch_warm_why(int code);
/* After the outer step of the round at `round` on [lo, hi) of the stage (DiLoCo: all of it; streaming: the
 * fragment's, once it landed), elastic DiLoCo or streaming, a worker holding its state: the snapshot (global
 * parameters, outer momentum, AdamW moments and step count, step, data position, the global parameters' xxh64)
 * written to its local file, and the round's mean over [lo, hi) kept with the hashes before and after it. A
 * failed write is logged and the run goes on; errors are the device's. */
xdc_err_t orch_warm_round(orch_worker *w, orch_outer *o, int64_t round, size_t lo, size_t hi);
/* A restarted worker of elastic DiLoCo or streaming before it asks to rejoin: its snapshot loaded when valid,
 * and warm/<region>/<rank> posted ("<round> <hash>", or "none"), logged either way. */
xdc_err_t orch_warm_ask(orch_worker *w, xdc_diag *diag);
/* A donor of the round just applied, for joining region `region` and this member's slice [lo, hi), whose global
 * parameters and momentum cost `params` bytes: ORCH_WARM_OK when it asked with a snapshot whose hash (*from) this
 * member's kept rounds lead from to its global parameters, in *rounds rounds whose means over the slice cost fewer
 * bytes; else why not. *own = 1 when that snapshot's round and hash are among the rounds this member keeps the hash
 * of: it is this run's model at that round, and its AdamW moments may stay the joiner's. */
int orch_warm_chain(orch_worker *w, int region, size_t lo, size_t hi, size_t params, int *rounds, uint64_t *from,
                    int *own);
/* Bytes of the newest `rounds` kept rounds' means over [lo, hi) as orch_warm_stage lays them out. */
size_t orch_warm_bytes(orch_worker *w, int rounds, size_t lo, size_t hi);
/* The newest `rounds` kept means over [lo, hi) into host (orch_warm_bytes), oldest first, each a record of its
 * range within [lo, hi) and its fp32 values there; off[j] (rounds + 1): round j's offset, off[rounds] the end;
 * bit j of *means set when round j was a plain mean (orch_outer.mean). */
xdc_err_t orch_warm_stage(orch_worker *w, int rounds, size_t lo, size_t hi, uint8_t *host, size_t *off,
                          uint64_t *means);
/* A joiner: the outer steps of `rounds` rounds staged so (buf, bytes: a donor's over [lo, hi)) replayed in order
 * on o, each on its range, through dev (device, hi - lo fp32); XDC_ERR_PROTO when buf is not such records. */
xdc_err_t orch_warm_replay(orch_worker *w, orch_outer *o, const uint8_t *buf, size_t bytes, int rounds, size_t lo,
                           size_t hi, uint64_t means, float *dev, xdc_diag *diag);
/* A joiner that trains from its snapshot while it asks (elastic DiLoCo, orch_rejoin_take): the snapshot's global
 * parameters and outer momentum into o, local = global, its AdamW moments and step count into the stage, its data
 * position and step into the worker; *round: its round. XDC_ERR_UNAVAILABLE when it holds none. */
xdc_err_t orch_warm_start(orch_worker *w, orch_outer *o, long long *round);
/* A joiner's snapshot buffer (orch_snapshot.h), NULL when it has none. */
const void *orch_warm_snapshot(const orch_worker *w);
/* At teardown: the snapshots' cost logged, the buffers freed. */
void orch_warm_destroy(orch_worker *w);

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

/* orch_worker_sync.c: the worker's syncs. */
#define ORCH_MAX_SYNCS (2 + 1024) /* gradients, pseudo-gradients, streaming fragments */
/* Every sync of this worker's mode, in creation order; returns how many (at most cap). */
int orch_worker_syncs(const orch_worker *w, xdc_sync **out, int cap);
/* The configuration every sync of the worker starts from (orch_member_sync_cfg): this stage's parameters,
 * named "gradients", the trace hook. */
void orch_worker_sync_cfg(orch_worker *w, int across_regions, xdc_sync_cfg *out);
/* Unequal replicas (microbatches_per_replica): each replica's microbatch count as its weight in its region's
 * mean (xdc_sync_set_replica_weights) and, where the regions' totals differ, each region's total as its weight
 * across regions (xdc_sync_set_weights), so the mean of `sync` is over every microbatch of the step, as an
 * equal split of the same global batch averages it. No-op without the list. */
xdc_err_t orch_replica_weights(orch_worker *w, xdc_sync *sync, xdc_diag *diag);
/* Where the regions' microbatches per step differ (w->model.regions_differ: unequal replicas, or regions of
 * different replica counts), each region's total as its weight in `sync`'s cross-region mean (xdc_sync_set_weights),
 * so the mean is over every microbatch of every replica; else nothing. Every cross-region sync gets it at setup. */
xdc_err_t orch_region_weights(orch_worker *w, xdc_sync *sync, xdc_diag *diag);
/* Region r's weight in a round of the cross-region mean that takes it in: its microbatches per step where the
 * regions' differ, else 1 (the plain mean). */
float orch_region_weight(const orch_worker *w, int r);
/* Wait for the round of `sync` to end (xdc_sync_end, or the elastic wait), counted as exposed WAN time
 * and drawn on the trace's WAN lane. */
xdc_err_t orch_train_wait_sync(orch_worker *w, xdc_sync *sync, xdc_diag *diag);
/* Switch the WAN codec (the mode's re-plan sync, its residuals carried over) and, in DiLoCo, the period
 * (> 0) to a re-plan's choice: at a re-plan, and on resume to what the checkpoint ran with. */
xdc_err_t orch_train_switch_wan(orch_worker *w, const char *codec, int period, xdc_diag *diag);

#endif /* ORCH_WORKER_H */
