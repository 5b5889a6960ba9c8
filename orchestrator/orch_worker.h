/* orch_worker.h — private to the worker runtime (orch_worker.c: identity, connections, lifecycle;
 * orch_train.c: the training loop). One worker process runs one pipeline stage of one data-parallel
 * replica in one region. */
#ifndef ORCH_WORKER_H
#define ORCH_WORKER_H

#include "compression/xdc_codec.h"
#include "intra/xdc_intra.h"
#include "kernels/xdc_gpt.h"
#include "orchestrator/orch_rdzv.h"
#include "orchestrator/orch_run_config.h"
#include "orchestrator/orch_sync.h"
#include "orchestrator/xdc_data.h"
#include "topology/xdc_topology.h"
#include "wan/xdc_wan.h"

#include <stdint.h>

typedef struct orch_worker {
    /* identity (environment contract, DESIGN.md) */
    char run_id[64], region[XDC_NAME_MAX], node[XDC_NAME_MAX], member[RDZV_MEMBER_MAX];
    char run_dir[512], coord_host[256];
    int coord_port;
    int region_idx, n_regions;
    int lrank, lsize;   /* rank and size within the region */
    int grank, gsize;   /* global */
    int emulate_wan, resume;

    xdc_topology *topo;
    orch_run_config cfg;

    /* layout: lrank = replica * n_stages + stage */
    int stage, n_stages, replica, n_replicas;
    int layer_begin, layer_end;

    const xdc_kern_backend *be;
    xdc_gpt_stage *st;
    size_t n_params;
    xdc_data *data;      /* training shard of this replica (first and last stage only) */
    xdc_data *val;       /* validation batches, the same on every replica (first and last stage) */

    xdc_wan_engine *wan;
    xdc_wan_listener *lis;
    xdc_wan_peer **peers; /* (n_regions) same lrank in every other region */
    rdzv_client *rdzv;
    xdc_intra_comm *region_comm, *pp, *dp;
    orch_sync *grad_sync;  /* sync: replicas + regions; diloco/streaming: replicas only */
    orch_sync *outer_sync; /* diloco: pseudo-gradients across regions */
    orch_sync **frag_sync; /* streaming: one per fragment */

    /* step buffers, allocated once */
    int B, T, C, M;
    int32_t *tokens, *targets; /* (M, B*T) */
    float *x_in;               /* (M, B*T*C) activations received from the previous stage */
    float *dy_in;              /* (M, B*T*C) gradients received from the next stage */
    float *y_out, *dx_out;     /* (M, B*T*C) copies of what we send, so sends never wait */
    xdc_intra_req **x_req, **dy_req, **y_req, **dx_req; /* (M) */
    float *global_params;      /* diloco/streaming: (n_params) the last agreed global parameters */
    float *outer_mom;          /* diloco/streaming: (n_params) outer Nesterov momentum */
    float *pseudo;             /* diloco/streaming: (n_params) pseudo-gradient scratch */
    float *snapshot;           /* streaming: (n_params) local parameters when a fragment was sent */
    int64_t step;              /* optimizer steps done */

    /* accounting for the progress line and the summary, seconds */
    double t_compute, t_intra, t_wan_exposed, t_step;
    double last_loss, val_loss;
    uint64_t tokens_done;
} orch_worker;

/* orch_train.c */
xdc_err_t orch_train_run(orch_worker *w, xdc_diag *diag);
/* Pipeline-forward the fixed validation batches; every stage returns the same mean loss. */
xdc_err_t orch_train_eval(orch_worker *w, double *loss, xdc_diag *diag);

/* orch_checkpoint.c */
int orch_checkpoint_due(const orch_worker *w);
xdc_err_t orch_checkpoint_save(orch_worker *w, xdc_diag *diag);
/* Load the newest complete checkpoint of the run, if any (w->step stays 0 without one). */
xdc_err_t orch_checkpoint_resume(orch_worker *w, xdc_diag *diag);

/* orch_worker.c */
/* Layers of stage s of n: an even split, the first stages taking one more when it does not divide. */
void orch_stage_layers(int n_layer, int n_stages, int s, int *begin, int *end);

#endif /* ORCH_WORKER_H */
