/* orch_outer.h — the outer round of DiLoCo and streaming (orch_outer.c), on a member: what the training
 * worker's modes and libxdc's xdc_outer_* share. The outer state (global parameters, momentum,
 * pseudo-gradient) on the member's device, the pseudo-gradient `global − local`, the outer Nesterov step and
 * the round's exchange on a sync of the member's engine; a round runs at once (orch_outer_round) or
 * overlapped with the next inner steps (orch_outer_begin ... orch_outer_apply: docs/runtime.md,
 * "Overlapped outer rounds"). What only the worker has (elastic rounds, rejoin, exposed-WAN accounting)
 * it plugs in through orch_outer_hooks; libxdc passes none. */
#ifndef ORCH_OUTER_H
#define ORCH_OUTER_H

#include "intra/xdc_intra.h"
#include "compression/xdc_codec.h"
#include "kernels/xdc_kernels.h"
#include "orchestrator/member/orch_member.h"
#include "sync/xdc_sync.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the round's owner does around the exchange of a round at `step` on `sync` (the worker: elastic
 * rounds, docs/runtime.md "Leaving during a round"). NULL hooks: the sync's own members, xdc_sync_end. */
typedef struct orch_outer_hooks {
    void *ctx;
    /* Who takes part in this round, taken into sync's members (before its pseudo-gradient is taken). */
    xdc_err_t (*quorum)(void *ctx, xdc_sync *sync, int64_t step, xdc_diag *diag);
    /* The exchange is posted on the engine (begun and marked ready). */
    void (*opened)(void *ctx, xdc_sync *sync, int64_t step);
    /* Wait for the exchange to end (as xdc_sync_end). */
    xdc_err_t (*end)(void *ctx, xdc_sync *sync, int64_t step, xdc_diag *diag);
} orch_outer_hooks;

/* How a round runs against the caller's inner steps (docs/runtime.md, "Overlapped outer rounds"). */
typedef enum {
    ORCH_OUTER_AT_ONCE = 0, /* begin and apply back to back: local = global' (orch_outer_round) */
    /* overlapped, the inner steps between begin and apply going on from local as it was at begin (s = local) */
    ORCH_OUTER_DELAYED = 1,
    /* overlapped, the inner steps going on from the eager estimate of where the round leaves local: the round
     * taken at begin with this member's own contribution the only one in the mean (s = that estimate; local =
     * s): ĉ = what o->codec carries of Δ = global − local (decoded, no error feedback: Δ itself for codec none),
     * s = the outer step of global − (Δ − ĉ) (keep_unsent; else global) and momentum, on copies (both stay as
     * they are), with ĉ times this member's share of the mean (xdc_sync_share) for the mean. Over the whole of
     * local (DiLoCo's rounds) */
    ORCH_OUTER_EAGER = 2,
} orch_outer_overlap;

/* One outer loop's state: the parameters it updates, and the global parameters, momentum and
 * pseudo-gradient on the same device. The caller sets local, n, stream, hooks and keep_unsent before
 * orch_outer_open, and be where the state lives elsewhere than on the member's device (libxdc's device
 * tags: the device table XDC_DEVICE names, its device bound by the caller around every call). */
typedef struct orch_outer {
    float *local;           /* device (n) the parameters the rounds update (the stage's; libxdc: its staging) */
    size_t n;               /* parameters, fp32 */
    xdc_stream *stream;     /* where the outer arithmetic and copies queue (the stage's compute stream) */
    orch_outer_hooks hooks; /* zero: none */
    bool keep_unsent;    /* after each round but a `mean` one: local −= the codec's residual (diloco.keep_unsent) */
    xdc_codec_cfg codec; /* the exchange's codec (orch_outer_open: the sync's): the eager estimate's */
    const xdc_kern_backend *be; /* the device that holds the state and its model ops (NULL at open: the member's) */
    xdc_sync *sync;             /* pseudo-gradients across regions (codec + error feedback) */
    float *global;              /* device (n) the last agreed global parameters */
    float *mom;                 /* device (n) outer Nesterov momentum */
    float *pseudo;              /* device (n) pseudo-gradient: what the sync averages */
    float *snapshot;            /* device (n) s: where an overlapped round's inner steps began; made at its first */
    /* The eager estimate's (made at the first eager round): device (n) scratch, the codec (n elements, no error
     * feedback, no zstd) and pinned host (its bound) for its bytes */
    float *own;
    xdc_codec *own_codec;
    uint8_t *own_bytes;
    size_t own_cap;
    float *host;        /* pinned host (n): staging of global and momentum (checkpoints, rejoin) */
    float lr, momentum; /* outer Nesterov η, μ (the run file's diloco section) */
    bool mean;          /* the next outer step is the plain mean (η = 1, μ = 0): keep_unsent's last round */
    /* The rounds leave this member's parameters alone: it sends a zero pseudo-gradient and a round's mean is only
     * received (in o->pseudo), its outer step not taken: a streaming joiner that trains from its snapshot while its
     * state comes (orchestrator/worker/orch_rejoin.c), whose global parameters are not the run's yet */
    bool bystander;
    orch_outer_overlap overlap; /* how the round in flight began */
    int64_t begun_at;           /* the step of the round in flight, or -1 */
    uint64_t steps_in_flight;   /* inner steps counted (orch_outer_stepped) while a round was in flight, in total */
} orch_outer;

/* The outer loop over o->local (o->n fp32 device memory of o->be, the member's backend when NULL; global =
 * its values now), its exchange a sync made from `sc` (the caller's configuration: n_elems, dp, codec, name;
 * the device fields are set here: o->be and o->stream), its arithmetic on o->stream. The outer lr and
 * momentum from m's run file. */
xdc_err_t orch_outer_open(orch_member *m, orch_outer *o, const xdc_sync_cfg *sc, xdc_diag *diag);
/* orch_outer_open's state without a member: the caller sets o->be, lr, momentum and codec too, and gives the exchange's
 * sync (n_elems o->n on o->be's device and o->stream), which o owns from now on (the outer tests' regions in one
 * process). */
xdc_err_t orch_outer_init(orch_outer *o, xdc_sync *sync);
/* Its sync, buffers; o zeroed. */
void orch_outer_destroy(orch_outer *o);

/* An outer round over the whole of local at `step`, at once: every member region ends on the same global
 * parameters, local = global (less the codec's residual with keep_unsent, but not after a `mean` round). */
xdc_err_t orch_outer_round(orch_outer *o, int64_t step, xdc_diag *diag);

/* The overlapped round, on [lo, hi) of local with `sync` (n_elems hi − lo: o->sync over the whole, or a
 * streaming fragment's): begin takes the pseudo-gradient Δ = global − local now and posts its exchange (EAGER:
 * and sets local = s, the estimate above, global and momentum left as they are); the
 * caller keeps stepping; apply waits for the exchange, takes the outer step on [lo, hi) with the mean and, when
 * the round overlapped, keeps the local progress since begin: local = global' + (local − s) (− residual with
 * keep_unsent); AT_ONCE: local = global' (orch_outer_round). One round in flight per state. */
xdc_err_t orch_outer_begin(orch_outer *o, xdc_sync *sync, size_t lo, size_t hi, int64_t step, orch_outer_overlap how,
                           xdc_diag *diag);
xdc_err_t orch_outer_apply(orch_outer *o, xdc_sync *sync, size_t lo, size_t hi, xdc_diag *diag);
/* The outer Nesterov step of [lo, hi) from the averaged pseudo-gradient d (device, hi − lo; mean: the plain
 * mean's step, η = 1, μ = 0), on o->stream: what orch_outer_apply takes, and what a rejoining region replays
 * for the rounds it took part in while its state was on its way (orchestrator/worker/orch_rejoin.c). */
xdc_err_t orch_outer_step(orch_outer *o, const float *d, size_t lo, size_t hi, bool mean);
/* local = global + (local − base): the progress the inner steps made from `base` (host, o->n fp32: the global
 * parameters they began from) carried onto the global parameters; o->pseudo is its scratch. */
xdc_err_t orch_outer_rebase(orch_outer *o, const float *base);
/* An inner step was taken: counted in steps_in_flight while a round is in flight (the proof that the loop
 * kept stepping while a round was on the wire). */
void orch_outer_stepped(orch_outer *o);

/* The outer state to and from host memory (n fp32 each, between rounds): global parameters, momentum. */
typedef enum { ORCH_OUTER_GLOBAL = 0, ORCH_OUTER_MOMENTUM = 1 } orch_outer_part;
xdc_err_t orch_outer_get(orch_outer *o, orch_outer_part part, float *host);
xdc_err_t orch_outer_set(orch_outer *o, orch_outer_part part, const float *host);

#endif /* ORCH_OUTER_H */
