/* orch_member.h — a member of a run: what a training worker (orchestrator/worker) and a user program on
 * libxdc (orchestrator/api) share, behind one opaque handle. A member loads the topology and the run file,
 * learns who it is from the environment contract and where it sits in the layout, picks its device,
 * connects (the WAN engine with its credentials, the rendezvous client, the intra-region communicators, the
 * WAN peers it dials or accepts) and runs the comm engine, the one thread every sync of the process runs on,
 * with the sync configuration the run file gives. The model, 1F1B, pipeline transfers, the training modes
 * and checkpoints are the worker's; the tags are libxdc's.
 *
 * Set-up, in this order (each step after the ones before it succeeded):
 *   orch_member_create   (load)    the run file, the topology, the identity, `plan: auto`
 *   orch_member_place              the layout: stage, replica, layers
 *   orch_member_choose_device | orch_member_use_host
 *   orch_member_open_wan, [orch_member_set_rejoin], orch_member_connect
 *   orch_member_comm_engine        the WAN codec and the sync engine
 * Teardown (docs/design.md, "Threads"), the owner's syncs interleaved:
 *   stop every sync of the owner; orch_member_disconnect; destroy the owner's syncs; orch_member_destroy.
 * Threads: the WAN engine's and the sync engine's (and, with etcd, the lease keep-alive); every function
 * here is called from the owner's one thread. */
#ifndef ORCH_MEMBER_H
#define ORCH_MEMBER_H

#include "common/xdc_err.h"
#include "compression/xdc_codec.h"
#include "intra/xdc_intra.h"
#include "kernels/xdc_kernels.h"
#include "orchestrator/launch/orch_creds.h"
#include "orchestrator/launch/orch_device.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "sync/xdc_sync.h"
#include "topology/xdc_topology.h"
#include "wan/xdc_wan.h"

typedef struct orch_member orch_member;

/* Where the member's files and flags come from (the worker: `xdc worker`'s options; libxdc: its
 * xdc_comm_options and the launcher's variables). Strings are the caller's, read during orch_member_create
 * and orch_member_open_wan. */
typedef struct orch_member_opts {
    const char *topology_path; /* topology file */
    const char *config_path;   /* run file */
    const char *run_dir;       /* the run folder (certificates, checkpoints, logs, traces) */
    int emulate_wan;           /* dial the other regions through the launcher's relays */
    int resume;                /* continue from the newest complete checkpoint (the worker reads it) */
    rdzv_flags rdzv;           /* --rdzv (else XDC_RDZV, the run file's rdzv:, the built-in store) and etcd's TLS */
    orch_creds_flags creds;    /* --cert-dir --ca --crl (orch_creds.h: else XDC_*, else RUN_DIR/certs) */
} orch_member_opts;

/* Who this member is and where it sits (environment contract, DESIGN.md), fixed after orch_member_place.
 * Layout: lrank = replica * n_stages + stage; with span, one pipeline over every worker of every region in
 * order (stage = global rank). */
typedef struct orch_member_id {
    char run_id[64], region[XDC_NAME_MAX], node[XDC_NAME_MAX], member[RDZV_MEMBER_MAX];
    char run_dir[512], coord_host[256];
    int coord_port;
    rdzv_target rdzv; /* the store this member joins (the built-in one at coord_host:coord_port, or etcd) */
    int region_idx, n_regions;
    int lrank, lsize; /* rank and size within the region */
    int local_rank;   /* LOCAL_RANK: index on the node (mod the visible GPUs, picks the GPU on CUDA) */
    int grank, gsize; /* global */
    int emulate_wan, resume;
    int span;
    int stage, n_stages, replica, n_replicas;
    /* Regions of different worker counts run the same stages with different replica counts: lanes = the fewest
     * replicas any region has (xdc_sync_cfg.lanes), rep_first = the replicas of the regions before this one (this
     * replica's data shard is rep_first + replica of replicas_all); with span, 1, 0 and 1. */
    int lanes, rep_first, replicas_all;
    int replicas[XDC_TOPO_MAX_REGIONS]; /* (n_regions) each region's replicas; with span, [0] = 1 */
    int layer_begin, layer_end;
} orch_member_id;

/* ---- set-up --------------------------------------------------------------------------------------- */

/* Load the topology and run file (every error printed to stderr, the first in diag with file:line:col:
 * XDC_ERR_CONFIG), resolve the identity from the environment contract (XDC_ERR_CONFIG naming what is
 * missing and where it looked), apply the plan with `plan: auto`, and set the log prefix. On failure *out
 * is NULL and nothing is left to free. */
xdc_err_t orch_member_create(const orch_member_opts *o, orch_member **out, xdc_diag *diag);
/* Check the identity against the topology and derive this process's place in the layout. */
xdc_err_t orch_member_place(orch_member *m, xdc_diag *diag);
/* The worker's device (orch_device.h: `flag`, else XDC_DEVICE, else the topology), checked on this node
 * before anything is set up; on CUDA, LOCAL_RANK mod the visible GPUs picks the GPU and it becomes this thread's. */
xdc_err_t orch_member_choose_device(orch_member *m, const char *flag, xdc_diag *diag);
/* The kernel registry's answers (visible GPUs, kernels per device) for the device checks of orch_device.h:
 * the worker's, `xdc agent`'s and `xdc doctor`'s. */
const orch_device_probe *orch_member_device_probe(void);
/* libxdc: the caller's buffers are host memory, so the CPU device and the shared-memory intra backend,
 * whatever device the topology gives the region. */
xdc_err_t orch_member_use_host(orch_member *m, xdc_diag *diag);
/* The WAN engine with the member's credentials, and the rendezvous client (nothing waited for yet). */
xdc_err_t orch_member_open_wan(orch_member *m, xdc_diag *diag);
/* This process is a restarted member of a region that left a running elastic job, the `left`-th time
 * (the elastic member client found out, between open_wan and connect): connect passes no barrier, takes
 * the region's intra bootstrap of this return, and dials nobody (the rejoin dials the round's members). */
void orch_member_set_rejoin(orch_member *m, int left);
/* The "joined" barrier (everyone present before anyone waits on anyone), the intra communicators (the
 * region, split into pipeline groups and data-parallel groups), the WAN peers (the same local rank in
 * every other region; with span the neighbouring stages across a region boundary). *what names the step
 * that failed. */
xdc_err_t orch_member_connect(orch_member *m, const char **what, xdc_diag *diag);
/* The run's WAN codec (orch_member_codec) and the sync engine, the comm thread every sync runs on. */
xdc_err_t orch_member_comm_engine(orch_member *m, xdc_diag *diag);

/* ---- the run -------------------------------------------------------------------------------------- */

/* Dial region r's rank `rank` (directly, or through the launcher's relay) and wait for the handshake. */
xdc_err_t orch_member_dial(orch_member *m, int r, int rank, xdc_wan_peer **out, xdc_diag *diag);
/* The same for a peer that is a member of a round we take part in (a joiner dialling the round's members): the
 * handshake is waited for up to timeouts.operation (the longest a round lets a member be silent) where that is
 * longer than timeouts.handshake, and every ORCH_MEMBER_DIAL_LOOK_MS gone(ctx, r) is asked: non-zero (the run
 * counted region r out meanwhile) gives up with XDC_ERR_UNAVAILABLE. A stopped process's kernel takes the
 * connection and nobody answers it until it is continued: a member stopped for a while answers late, one that
 * the run drops is not waited for. gone NULL: orch_member_dial. */
#define ORCH_MEMBER_DIAL_LOOK_MS 250
xdc_err_t orch_member_dial_unless(orch_member *m, int r, int rank, int (*gone)(void *ctx, int r), void *ctx,
                                  xdc_wan_peer **out, xdc_diag *diag);
/* The configuration a sync of this member starts from: the run's bucket size and WAN codec, the
 * data-parallel replicas, and with `across_regions` the other regions (none with span: each stage exists
 * once). The caller sets n_elems, name, the device and the trace hook. */
void orch_member_sync_cfg(const orch_member *m, int across_regions, xdc_sync_cfg *out);
/* Regions of different sizes: where `units` ((n_regions) what each region's contribution stands for: its members,
 * or its replicas' microbatches per step) differ, each region's units become its weight in `s`'s cross-region
 * mean (xdc_sync_set_weights), so the mean is over every unit of every region; where they are equal, nothing
 * (the plain mean). */
xdc_err_t orch_member_weigh_regions(const orch_member *m, xdc_sync *s, const int *units, xdc_diag *diag);
/* Log "<what> failed" and post failed/<member> to the rendezvous, for the launcher to name (m NULL or not
 * connected: the log line only). */
void orch_member_report_failure(orch_member *m, const char *what, xdc_err_t rc, const char *msg);
/* The end of a run: nobody leaves before everyone is done (the "done" barrier), then global rank 0 posts
 * "finished" so a coordinator may close the store. */
xdc_err_t orch_member_end_barrier(orch_member *m, xdc_diag *diag);
/* Layers of stage s of n: an even split, the first stages taking one more when it does not divide. */
void orch_stage_layers(int n_layer, int n_stages, int s, int *begin, int *end);

/* ---- what the member holds (valid from the step that makes it until orch_member_destroy) ------------ */

const orch_member_id *orch_member_identity(const orch_member *m);
xdc_topology *orch_member_topology(const orch_member *m);
/* The run file; a re-plan changes the DiLoCo period in it. */
orch_run_config *orch_member_config(orch_member *m);
/* With `plan: auto`, the plan the run follows (a re-plan updates it). */
orch_planned *orch_member_planned(orch_member *m);
const xdc_kern_backend *orch_member_backend(const orch_member *m);
rdzv_client *orch_member_rdzv(const orch_member *m);
xdc_wan_engine *orch_member_wan(const orch_member *m);
xdc_wan_listener *orch_member_listener(const orch_member *m); /* NULL with one region */
/* (n_regions) the same local rank in every other region (NULL at its own index and with span). An
 * elastic member replaces a rejoining region's entry with its new peer (the old one destroyed first). */
xdc_wan_peer **orch_member_peers(const orch_member *m);
xdc_wan_peer *orch_member_prev_peer(const orch_member *m); /* span: the stage before, across a region boundary */
xdc_wan_peer *orch_member_next_peer(const orch_member *m); /* span: the stage after */
/* Interleaved 1F1B over regions (pipeline_chunks > 1 with span, docs/runtime.md): the chunks' wrap-around from
 * the last stage to the first crosses from the last region to the first. 1 when it has a WAN link: the span's
 * one link (2 regions of one worker each; *own = 0) or one of its own (*own = 1), which the first stage
 * dials where the last region has 2 workers or more (so its last worker accepts no other peer) and the
 * topology links the two regions; 0 otherwise. wrap_peer: that own link, on the first and the last stage. */
int orch_member_span_wrap(const orch_member *m, int *own);
xdc_wan_peer *orch_member_wrap_peer(const orch_member *m);
xdc_intra_comm *orch_member_region_comm(const orch_member *m);
xdc_intra_comm *orch_member_pp(const orch_member *m); /* this replica's pipeline group */
xdc_intra_comm *orch_member_dp(const orch_member *m); /* this stage's data-parallel group */
xdc_sync_engine *orch_member_sync_engine(const orch_member *m);
/* The WAN codec in use; a re-plan switches it (orch_member_set_codec) for the syncs it creates after. */
const xdc_codec_cfg *orch_member_codec(const orch_member *m);
void orch_member_set_codec(orch_member *m, const xdc_codec_cfg *cc);

/* ---- what both the C runtime and libxdc need once -----------------------------------------------
 * The outer round (orch_outer.h: the outer state, the pseudo-gradient, the outer Nesterov step and the
 * round's exchange, at once or overlapped with the next inner steps) is built here once, on a member: the
 * training worker's DiLoCo and streaming and libxdc's xdc_outer_* run it; the worker's elastic rounds plug
 * in through its hooks. A per-member weighting of means (each member's contribution weighed by tokens
 * seen instead of 1/R) belongs in the sync configuration above. */

/* ---- teardown ------------------------------------------------------------------------------------- */

/* Destroy the intra communicators and close the WAN peers (with BYE), after the owner stopped every sync
 * (xdc_sync_stop) and before it destroys them: neither transport writes into a sync's buffers after this.
 * NULL: no-op. */
void orch_member_disconnect(orch_member *m);
/* The sync engine (it joins the comm thread, whose jobs call into the WAN engine; the owner destroyed its
 * syncs before), the rendezvous client, the WAN engine (the peers and the listener with it), the
 * topology; frees m. Whatever set-up got to. NULL: no-op. */
void orch_member_destroy(orch_member *m);

#endif /* ORCH_MEMBER_H */
