/* orch_outer.h — the outer round of DiLoCo and streaming (orch_outer.c), as libxdc's xdc_outer_round uses it
 * over a user's parameters: the part of orchestrator/worker/ that orchestrator/api reaches, on a worker
 * without a model made around the libxdc program's member. The outer round moves to orchestrator/member/
 * (the section of orch_member.h that names what both need once) when its overlapped form is built there;
 * then this header goes. */
#ifndef ORCH_OUTER_H
#define ORCH_OUTER_H

#include "intra/xdc_intra.h"
#include "kernels/xdc_device.h"
#include "orchestrator/member/orch_member.h"
#include "sync/xdc_sync.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct orch_worker orch_worker;

/* One outer loop's state: the parameters it updates, and the global parameters, momentum and
 * pseudo-gradient on the same device. */
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

/* A worker without a model on member m (loaded, placed, its device chosen, connected, its comm engine
 * running; m stays the caller's): enough for the outer rounds below, never elastic. Its outer state lives on
 * `be` (NULL: the member's backend; libxdc's device entry points: the caller's device). Destroy frees it only
 * (NULL: no-op). */
xdc_err_t orch_worker_bare_create(orch_member *m, const xdc_kern_backend *be, orch_worker **out);
void orch_worker_bare_destroy(orch_worker *w);

/* The outer loop over o->local (o->n fp32 device memory of w's backend; global = its values now), its
 * arithmetic on o->stream (NULL: the calling thread's current stream), without elastic rounds: libxdc's
 * outer rounds over a user's parameters. */
xdc_err_t orch_outer_open(orch_worker *w, orch_outer *o, xdc_intra_comm *dp, xdc_diag *diag);
void orch_outer_destroy(orch_worker *w, orch_outer *o);
/* An outer round over the whole stage (after its quorum): every member region ends on the same global
 * parameters, local = global. */
xdc_err_t orch_outer_round(orch_worker *w, orch_outer *o, xdc_diag *diag);

#endif /* ORCH_OUTER_H */
