/* orch_worker.h — private to the worker runtime (orch_worker.c: identity, connections, lifecycle;
 * orch_train.c: the training loop). One worker process runs one pipeline stage of one data-parallel
 * replica in one region. */
#ifndef ORCH_WORKER_H
#define ORCH_WORKER_H

#include "compression/xdc_codec.h"
#include "intra/xdc_intra.h"
#include "model/xdc_gpt.h"
#include "orchestrator/obs/orch_metrics.h"
#include "orchestrator/control/orch_rdzv.h"
#include "orchestrator/control/orch_run_config.h"
#include "sync/xdc_sync.h"
#include "orchestrator/obs/orch_trace.h"
#include "model/xdc_data.h"
#include "topology/xdc_topology.h"
#include "wan/xdc_wan.h"

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

typedef struct orch_worker {
    /* identity (environment contract, DESIGN.md) */
    char run_id[64], region[XDC_NAME_MAX], node[XDC_NAME_MAX], member[RDZV_MEMBER_MAX];
    char run_dir[512], coord_host[256];
    int coord_port;
    int region_idx, n_regions;
    int lrank, lsize; /* rank and size within the region */
    int grank, gsize; /* global */
    int emulate_wan, resume;

    xdc_topology *topo;
    orch_run_config cfg;
    orch_planned planned;    /* with cfg.plan_auto: the plan the run follows */
    xdc_codec_cfg codec_cfg; /* the WAN codec in use */
    uint64_t replan_tx0;     /* comm-engine counters at the start of the re-plan window */
    double replan_secs0;

    /* layout: lrank = replica * n_stages + stage; with span, one pipeline over every worker of every
     * region in order (stage = global rank) */
    int span;
    int stage, n_stages, replica, n_replicas;
    int layer_begin, layer_end;

    const xdc_kern_backend *be;
    xdc_gpt_stage *st;
    size_t n_params;
    xdc_data *data; /* training shard of this replica (first and last stage only) */
    xdc_data *val;  /* validation batches, the same on every replica (first and last stage) */

    xdc_wan_engine *wan;
    xdc_wan_listener *lis;
    xdc_wan_peer **peers;                /* (n_regions) same lrank in every other region */
    xdc_wan_peer *prev_peer, *next_peer; /* span: neighbouring stages across a region boundary */
    xdc_codec *pipe_enc, *pipe_dec;      /* span: activation codec (no error feedback) */
    size_t pipe_elems, pipe_bound;       /* elements of one activation (B*T*C); encoded bytes bound */
    int pipe_codec_kind;
    uint64_t pipe_tx_bytes, pipe_raw_bytes;
    orch_trace *trace; /* Chrome trace of this rank (RUN/traces/trace-<rank>.json) */
    orch_metrics *metrics;
    orch_metrics_std m;
    orch_metrics_server *metrics_srv;
    orch_observe *obs;
    rdzv_client *rdzv;
    xdc_intra_comm *region_comm, *pp, *dp;
    xdc_intra_comm *dp_wan;    /* streaming: a second replicas' communicator for the fragment syncs */
    xdc_sync_engine *sync_eng; /* the one comm thread that runs every sync below, in posting order */
    xdc_sync *grad_sync;       /* sync: replicas + regions; diloco/streaming: replicas only */
    xdc_sync *outer_sync;      /* diloco: pseudo-gradients across regions */
    xdc_sync **frag_sync;      /* streaming: one per fragment */

    /* step buffers, allocated once */
    int B, T, C, M;
    int32_t *tokens, *targets; /* (M, B*T) */
    float *x_in;               /* (M, B*T*C) activations received from the previous stage */
    float *dy_in;              /* (M, B*T*C) gradients received from the next stage */
    float *dx_out;             /* (M, B*T*C) copies of the input gradients we send, so sends never wait */
    orch_pipe_req *x_req, *dy_req, *y_req, *dx_req; /* (M) */
    uint8_t *wire;                                  /* span: (4, M, pipe_bound) encoded activations: x, dy, y, dx */
    float *global_params;                           /* diloco/streaming: (n_params) the last agreed global parameters */
    float *outer_mom;                               /* diloco/streaming: (n_params) outer Nesterov momentum */
    float *pseudo;                                  /* diloco/streaming: (n_params) pseudo-gradient scratch */
    float *snapshot; /* streaming: (n_params) local parameters when a fragment was sent */
    int64_t step;    /* optimizer steps done */

    /* accounting for the progress line and the summary, seconds */
    double t_compute, t_intra, t_wan_exposed, t_step;
    double last_loss, val_loss;
    uint64_t tokens_done;
} orch_worker;

/* orch_train.c */
xdc_err_t orch_train_run(orch_worker *w, xdc_diag *diag);
/* Pipeline-forward the fixed validation batches; every stage returns the same mean loss. */
xdc_err_t orch_train_eval(orch_worker *w, double *loss, xdc_diag *diag);

/* orch_pipe.c */
xdc_err_t orch_pipe_send(orch_worker *w, int to_stage, const float *buf, size_t n, uint8_t *wire, orch_pipe_req *r,
                         xdc_diag *diag);
xdc_err_t orch_pipe_recv(orch_worker *w, int from_stage, float *buf, size_t n, uint8_t *wire, orch_pipe_req *r,
                         xdc_diag *diag);
/* Complete a transfer (no-op on an empty request); charges intra or WAN time. */
xdc_err_t orch_pipe_wait(orch_worker *w, orch_pipe_req *r, xdc_diag *diag);
xdc_err_t orch_pipe_allreduce_sum(orch_worker *w, float *v, int n, xdc_diag *diag);

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

/* orch_worker.c */
#define ORCH_MAX_SYNCS (2 + 1024) /* gradients, pseudo-gradients, streaming fragments */
/* Every comm engine of this worker, in creation order; returns how many (at most cap). */
int orch_worker_syncs(const orch_worker *w, xdc_sync **out, int cap);
/* Streaming: fragment f of this stage's parameters is [lo, hi). */
void orch_fragment_range(const orch_worker *w, int f, size_t *lo, size_t *hi);
/* Layers of stage s of n: an even split, the first stages taking one more when it does not divide. */
void orch_stage_layers(int n_layer, int n_stages, int s, int *begin, int *end);

#endif /* ORCH_WORKER_H */
