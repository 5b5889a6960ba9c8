/* orch_rejoin.c — a region that left an elastic DiLoCo, streaming or sync run comes back (docs/runtime.md,
 * "Rejoining"). Its restarted workers find their earlier process's WAN address in the store (the job is
 * running), skip the joined/start barriers, post outer/<region>/<rank> = join:<nonce> and wait for
 * rejoin/<nonce>: the step of the round the store host names them joining in
 * (orchestrator/elastic/orch_quorum.c). They dial that round's members twice: one connection for the rounds
 * (it replaces the dead process's peer) and, to each donor (a '1' of that round), one of the state's own, so
 * that the state never queues ahead of a round's shards. In elastic DiLoCo (orch_quorum_joins_in_round) each
 * member accepts them before that round's exchange, and the joiner takes part in it with weight 0, so it gets
 * the round's mean as every member does; the state it is handed is the one of the round's start. Elsewhere each
 * member accepts them once the round's exchange is done (overlapped DiLoCo: once the round is applied; streaming:
 * after its fragment landed, one step later, when nothing is on the wire), and the state is the one after it.
 * Rank k of each of the round's k' donor regions sends rank k of the joiner its slice of the
 * state on the second: a header (the step, the data position, the AdamW step count, the slice's bounds and the
 * xxh64 of each part) then the slice of the global parameters, the outer momentum and the AdamW moments. The
 * slices follow the links: each donor's share of the parameters is proportional to the bandwidth of its link to
 * the joiner (to the slowest of the round's joiners), so every slice takes about as long over its link. The
 * global parameters and the outer momentum go bit for bit (every member holds the same bytes, and the joiner's
 * outer steps must stay bit-equal to theirs): as they are, or, where a joiner's link is slow enough that zstd
 * keeps up with it (xdc_codec_zstd_level_for_link), coded with the lossless codec (byte planes + zstd level 1:
 * 0.84 of their bytes on gpt1m; XOR against the joiner's snapshot would save only 0.02-0.09 more); in DiLoCo
 * and streaming the AdamW moments go as bf16 (each region's inner optimizer is its own: the joiner's moments only
 * shape its own inner steps, whose pseudo-gradient is averaged like any other, so every region still ends on the
 * same parameters; 12 bytes a parameter instead of 16), in sync mode as fp32 (there every region applies the same AdamW step to the
 * averaged gradient, from the same moments). The member stages its slice on its training thread (a device
 * copy: the round's state, before the next step changes it) and posts the sends to the comm engine, which
 * moves them while the member trains on; they are settled at a later call.
 *
 * Nobody waits for the joiner's state (DiLoCo and streaming): the joiner takes the headers (its step and data
 * position), then takes part in every round while the slices arrive, with weight 0 and no inner steps: it
 * arrives at once ("taking:<step>": quorum 't'), sends a zero pseudo-gradient that the sum leaves out
 * (xdc_sync_set_members) and receives the round's mean, which it keeps. At the first round it arrives at with
 * every slice in ("took:<step>": 'c' once all its region's workers did), or right after the exchange of the round
 * that took it back when all its region's workers have theirs by then (orch_elastic_region_took), it checks each
 * hash, takes the state, replays the outer steps of the rounds it kept (the same operations on the same bytes as
 * the members', so its global parameters end bit-equal to theirs), sets local = global and trains from there, a
 * member from the next round on. A streaming joiner that trains while rounds wait and whose donors complete its own
 * snapshot trains from that snapshot meanwhile instead (trains_while_taking), its rounds leaving its parameters
 * alone (o->bystander), and carries its progress onto the state it takes (local = global + local − the snapshot's
 * global). At the run's last round it waits for the state instead. Sync mode (every region applies the same AdamW
 * step from the same moments each step: no round to keep) and a return at the last round take it at once.
 * Warm (DiLoCo and streaming): a joiner that posted a valid snapshot of its own gets, from each donor whose kept
 * rounds lead from that snapshot's hash to its global parameters, the means of the rounds it missed over the
 * donor's range (streaming: each fragment round's over its fragment's part of that range) instead of the slice of
 * the state, when they cost fewer bytes than the slice's global parameters and momentum (4 bytes a parameter a
 * round: 1 DiLoCo round, or 1 streaming period), and replays them from its snapshot (orch_snapshot.c). A joiner
 * whose snapshot is older than those rounds but this run's model at its round (a donor kept that round's hash)
 * takes the global parameters and momentum alone from that donor and keeps its snapshot's AdamW moments (8 bytes
 * a parameter, fewer coded, instead of 12). Each joiner of a round is served on its own. In
 * elastic DiLoCo a joiner whose snapshot is of the round just before the one that took it back gets 0 rounds'
 * means (no bytes): its slices are in at once, and it trains from that round on. With train_while_waiting it
 * trains from that snapshot while it asks (early_start); when the round counts those steps (ran/<round>) its
 * pseudo-gradient is in the round's mean with their weight, and it keeps its AdamW moments and data position.
 * The store's side of the handshake (the request, the round that takes it, who to dial) is the round
 * protocol's member half, orchestrator/elastic/orch_elastic_member.c; this file moves the model state.
 *
 * The test hook XDC_TEST_REJOIN=<fault>@<region>[,<fault>@<region>...] (tests/e2e/test_elastic.c) fires one
 * fault per process, at the run's own events: corrupt (a member of <region> changes one value of its slice after
 * hashing it), absent (the joiner of <region> gives up after learning its round, before it dials), miss (a member of
 * <region> closes the joiner's state connection instead of sending its slice), vanish (a member of <region>
 * that is not a restarted process itself dies, SIGKILL, once it accepted the joiner's connections, before its
 * slice), hold (a member of <region> sends its header at once but holds its slice until it finished two more
 * DiLoCo periods, 2·H steps: the joiner takes part with weight 0 meanwhile), freeze (a member of <region> that is
 * not a restarted process stops itself, SIGSTOP, before it takes the joiner's connections: the test continues it
 * once the run dropped it), stall (a worker of <region> that is not a restarted process stops itself, SIGSTOP, once
 * the exchange of its first outer round at or after step 20 is posted: orch_worker_outer.c; the test continues it);
 * and of the warm rejoin
 * (orch_snapshot.c): die (a worker of <region> that is not a restarted process dies, SIGKILL, right after
 * writing its snapshot of the first round at or after step 20), nosnap (the joiner of <region> ignores its
 * snapshot), stale (the joiner of <region> changes one global parameter of its snapshot and hashes it again: a
 * valid snapshot that is not the members'), torn (the joiner of <region> changes a byte of its snapshot's file
 * before it reads it). */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "compression/xdc_codec.h"
#include "kernels/xdc_quant.h"
#include "orchestrator/elastic/orch_elastic_member.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/worker/orch_snapshot.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define REJOIN_ACCEPT_MS 250 /* a wait for a joiner's connection or a donor's slice, between looks at the store */
/* zstd level of the coded global parameters and momentum: on gpt1m's, level 1 packs them to 0.844 of their bytes,
 * levels 3 and 9 to 0.855 and 0.850 in 7x and 20x the time (docs/benchmarks.md, "chaos": "cheapback") */
#define STATE_ZSTD_LEVEL 1

/* The parts of a slice, one after the other in its message. */
enum { PART_GLOBAL, PART_MOM, PART_M, PART_V, N_PART };
static const char *const part_name[N_PART] = {"global parameters", "outer momentum", "AdamW first moment",
                                              "AdamW second moment"};
/* The header ahead of a slice (host byte order: the hosts of a run share one architecture). HDR_WARM: 0 when the
 * slice is the state (HDR_WHY: the orch_warm_why code), else 1 + the rounds of means it holds instead (the
 * rounds since the joiner's snapshot whose global parameters hash to HDR_FROM, as orch_warm_stage lays them out;
 * bit j of HDR_MEANS: round j was a plain mean), their hash at HDR_HASH. HDR_BYTES: the bytes that follow. A
 * slice of the state: its global parameters and momentum, coded (HDR_CODED bytes of the lossless codec's chunks:
 * byte planes + zstd; padded to 8, coded_span) or as they are (HDR_CODED 0), then the AdamW moments unless
 * HDR_OWN (the joiner keeps its snapshot's, whose global parameters hash to HDR_FROM); each part's hash, of its
 * bytes as they are, at HDR_HASH + p. */
enum {
    HDR_STEP,
    HDR_EPOCH,
    HDR_BATCH,
    HDR_PARAMS,
    HDR_ADAM_T,
    HDR_LO,
    HDR_HI,
    HDR_WARM,
    HDR_WHY,
    HDR_FROM,
    HDR_MEANS,
    HDR_BYTES,
    HDR_OWN,
    HDR_CODED,
    HDR_HASH,
    HDR_N = HDR_HASH + N_PART
};

/* Bytes of one parameter's moment on the wire: bf16 outside sync mode (see the top of the file). */
static size_t moment_bytes(const orch_worker *w) { return w->cfg->mode == ORCH_MODE_SYNC ? 4 : 2; }

/* Bytes of part p of a slice of len parameters, and of the whole slice (the parts one after the other). */
static size_t part_bytes(const orch_worker *w, int p, size_t len)
{
    return len * (p == PART_M || p == PART_V ? moment_bytes(w) : sizeof(float));
}

static size_t slice_bytes(const orch_worker *w, size_t len)
{
    size_t n = 0;
    for (int p = 0; p < N_PART; p++) n += part_bytes(w, p, len);
    return n;
}

/* The room the coded global parameters and momentum take ahead of the moments: `coded` bytes padded to 8, so the
 * moments after them (fp32 or bf16) are aligned for their type on both ends. */
static size_t coded_span(size_t coded) { return (coded + 7) & ~(size_t)7; }

/* Bytes on the wire of a slice of len parameters: its global parameters and momentum (`coded` bytes, padded by
 * coded_span, or as they are when 0), then its AdamW moments unless the joiner keeps its own. */

static size_t state_bytes(const orch_worker *w, size_t len, size_t coded, int own)
{
    size_t bytes = coded ? coded_span(coded) : part_bytes(w, PART_GLOBAL, len) + part_bytes(w, PART_MOM, len);
    return bytes + (own ? 0 : part_bytes(w, PART_M, len) + part_bytes(w, PART_V, len));
}

/* The lossless codec over 2 len fp32 (a slice's global parameters and momentum, one after the other). */
static xdc_err_t state_codec(size_t len, xdc_codec **c, xdc_diag *diag)
{
    xdc_codec_cfg cfg = XDC_CODEC_CFG_INIT;
    cfg.kind = XDC_CODEC_NONE, cfg.n_elems = 2 * len, cfg.zstd_level = STATE_ZSTD_LEVEL, cfg.error_feedback = false;
    return xdc_codec_create(&cfg, c, diag);
}

/* A member's hand-over of its slice to the regions one round took back, on the comm engine. */
struct orch_rejoin_out {
    int64_t step;  /* the member's, at the round */
    uint8_t *host; /* pinned (slice_bytes(hi - lo)): the slice of the state, staged once for every joiner that
                    * takes it (as sent unless `wire`); NULL: none does */
    uint8_t *wire; /* (state_bytes(hi - lo, coded, 0)) the slice as sent when its global parameters and momentum are
                    * coded (`coded` bytes), the moments after them; NULL: they go as they are */
    size_t coded;
    uint8_t *means; /* pinned (off[rounds] bytes, orch_warm_stage): the newest kept rounds' means over the slice,
                     * oldest first, staged once for the joiners that take them (one r rounds behind: the last r,
                     * from off[rounds - r]); NULL: none */
    size_t off[ORCH_WARM_MAX + 1];
    int rounds;
    uint64_t hdr[XDC_TOPO_MAX_REGIONS][HDR_N];      /* each joining region's header */
    int peer_region[XDC_TOPO_MAX_REGIONS];          /* each peer's region */
    xdc_wan_request *req[2 * XDC_TOPO_MAX_REGIONS]; /* header and slice to each joiner; NULL once settled */
    int n_req;
    xdc_wan_peer *peer[XDC_TOPO_MAX_REGIONS]; /* (n_peer) each joiner's state connection, closed once settled */
    int n_peer;
    int64_t hold_until;           /* test hook "hold": the slices go once the member is at this step; 0: sent */
    struct orch_rejoin_out *next; /* an earlier hand-over still sending (each round's has a staging of its own) */
};

/* The joiner's side of one donor: its header, then its slice into the staging at slice_bytes(its lo). */
typedef struct {
    int region;
    uint64_t hdr[HDR_N];
    xdc_wan_request *req[2];
    xdc_wan_peer *peer; /* the state's own connection to it */
} donor_in;

/* The mean of a round a joiner took part in with weight 0, on [lo, hi) of the stage: the outer step it replays
 * once its state came (mean: that round's was the plain mean, keep_unsent's last). */
typedef struct {
    float *d; /* device (hi - lo) */
    size_t lo, hi;
    bool mean;
} kept_round;

/* A joiner's state on its way (orch_rejoin_take), while it takes part in the rounds with weight 0. */
struct orch_rejoin_in {
    donor_in dn[XDC_TOPO_MAX_REGIONS];
    int k;                               /* donors */
    char mask[XDC_TOPO_MAX_REGIONS + 1]; /* the decision of the round that took it back: who sends which slice */
    long long at, want;                  /* that round, and the step of the state */
    uint8_t *host;                       /* pinned (slice_bytes(n_params)): donor i's slice at slice_bytes(its lo) */
    kept_round *kept;                    /* (n_kept of cap) the rounds since, in order */
    int n_kept, cap;
    xdc_err_t failed; /* a slice that will not come (slices_in), and why */
    xdc_diag why;
    int64_t passed; /* inner steps let pass since the state's step (orch_rejoin_pass): the members ran them */
    /* the inner steps it ran from its snapshot while it asked (early_start), and 1 when the round that took it back
     * counts them (orch_elastic_took_early): it keeps its AdamW moments and data position, trained on from there */
    int early, trained;
    /* 1: it trains from its snapshot while the slices come (trains_while_taking; o->bystander): it keeps its AdamW
     * moments and data position, and its progress from the snapshot is carried onto the state it takes */
    int trains;
};

xdc_err_t orch_rejoin_detect(orch_worker *w, xdc_diag *diag)
{
    if (!orch_quorum_elastic(w->cfg, w->id->n_regions)) return XDC_OK; /* not elastic: all or nothing */
    XDC_CHECK(orch_elastic_rejoin_detect(orch_member_rdzv(w->member), w->id->region, w->id->region_idx, w->id->lrank,
                                         w->cfg->timeouts.rendezvous_ms + w->cfg->elastic.grace_ms, &w->elastic.rejoin,
                                         &w->elastic.left, diag));
    /* A joiner's every rank takes its state from the same rank of the members, which regions of other replica
     * counts may not have (docs/runtime.md, "Regions of different sizes"). */
    if (w->elastic.rejoin && w->id->replicas_all != w->id->lanes * w->id->n_regions) {
        xdc_diag_set(diag, "region %s cannot rejoin: its regions have different worker counts", w->id->region);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

/* Complete a WAN request; the engine fails it when the peer is silent past the operation deadline. */
static xdc_err_t finish(xdc_wan_request *req, size_t *size, xdc_diag *diag)
{
    for (;;) {
        xdc_err_t rc = xdc_wan_wait(req, 1000, size, NULL, diag);
        if (rc != XDC_ERR_AGAIN) return rc;
    }
}

static void post_slices(orch_worker *w, struct orch_rejoin_out *g);

/* Settle the sends of hand-over g: those done (or failed: a joiner that took nothing is only named; it misses its
 * state and the store host drops it), and with `wait` all of them; 1 once all are, its staging and state
 * connections released. Slices the test hook holds go once their step came (or at `wait`). */
static int settle_one(orch_worker *w, struct orch_rejoin_out *g, int wait)
{
    if (g->hold_until && (wait || w->prog.step >= g->hold_until)) post_slices(w, g);
    if (g->hold_until) return 0;
    int left = 0;
    for (int i = 0; i < g->n_req; i++) {
        if (!g->req[i]) continue;
        xdc_diag d = {{0}};
        int done = 1;
        xdc_err_t rc = wait ? finish(g->req[i], NULL, &d) : xdc_wan_test(g->req[i], &done, NULL, NULL, &d);
        if (rc == XDC_OK && !done) {
            left++;
            continue;
        }
        g->req[i] = NULL;
        if (rc != XDC_OK)
            XDC_WARN(XDC_SUB_ORCH,
                     "round %llu: a rejoining region did not take this member's slice of the state (%s: %s)",
                     (unsigned long long)g->step, xdc_strerror(rc), d.msg);
    }
    if (left) return 0;
    for (int i = 0; i < g->n_peer; i++) xdc_wan_peer_destroy(g->peer[i]);
    if (g->host) w->model.be->device->host_free(g->host);
    if (g->means) w->model.be->device->host_free(g->means);
    xdc_free(g->wire);
    return 1;
}

/* Settle every hand-over still sending (settle_one), newest first; those done are freed. A member never waits
 * for one while it trains (only `wait`, at teardown): a joiner over a slow link may still be taking the last
 * one's state when the next round takes another region back (bench-chaos: a donor held 7.8 s there). */
static void settle_sends(orch_worker *w, int wait)
{
    for (struct orch_rejoin_out **p = &w->elastic.give; *p;) {
        struct orch_rejoin_out *g = *p;
        if (!settle_one(w, g, wait)) {
            p = &g->next;
            continue;
        }
        *p = g->next;
        xdc_free(g);
    }
}

/* Release a joiner's state on its way: its receives, state connections, staging and kept rounds. */
static void free_in(orch_worker *w, struct orch_rejoin_in *in)
{
    if (!in) return;
    const xdc_device_ops *d = w->model.be->device;
    for (int i = 0; i < in->k; i++) {
        for (int j = 0; j < 2; j++)
            if (in->dn[i].req[j]) (void)xdc_wan_request_cancel(in->dn[i].req[j]);
        xdc_wan_peer_destroy(in->dn[i].peer);
    }
    for (int i = 0; i < in->n_kept; i++) d->mem_free(in->kept[i].d);
    xdc_free(in->kept);
    if (in->host) d->host_free(in->host);
    xdc_free(in);
}

void orch_rejoin_drain(orch_worker *w)
{
    settle_sends(w, 1);
    free_in(w, w->elastic.take);
    w->elastic.take = NULL;
    orch_warm_destroy(w);
}

/* The parts of a slice of len parameters laid out from `base` (slice_bytes), into part[N_PART]. */
static void parts_of(const orch_worker *w, uint8_t *base, size_t len, uint8_t **part)
{
    for (int p = 0; p < N_PART; p++) {
        part[p] = base;
        base += part_bytes(w, p, len);
    }
}

/* A hand-over's header: the member's step, data position and AdamW steps, the slice's bounds. */
static void header(orch_worker *w, uint64_t *h, int64_t adam_t, size_t lo, size_t hi)
{
    h[HDR_STEP] = (uint64_t)w->prog.step, h[HDR_PARAMS] = w->model.n_params, h[HDR_ADAM_T] = (uint64_t)adam_t;
    h[HDR_LO] = lo, h[HDR_HI] = hi;
    if (w->model.data) {
        xdc_data_pos pos = xdc_data_get_pos(w->model.data);
        h[HDR_EPOCH] = pos.epoch, h[HDR_BATCH] = pos.batch;
    }
}

/* What hand-over g sends the joiner whose header is h: the rounds' means it is behind (the newest of g's) or the
 * slice of the state (HDR_OWN: its global parameters and momentum alone, the front of it); its bytes in *bytes. */
static const void *payload(const orch_worker *w, const struct orch_rejoin_out *g, const uint64_t *h, size_t *bytes)
{
    size_t len = h[HDR_HI] - h[HDR_LO];
    if (!h[HDR_WARM]) return *bytes = state_bytes(w, len, g->coded, (int)h[HDR_OWN]), g->wire ? g->wire : g->host;
    int r = (int)h[HDR_WARM] - 1;
    *bytes = g->off[g->rounds] - g->off[g->rounds - r];
    return g->means + g->off[g->rounds - r];
}

/* The global parameters and momentum of hand-over g's slice (2 len fp32 at the front of g->host) coded with the
 * lossless codec into g->wire, the AdamW moments (`moments`: staged) after them, when that is smaller; parameters
 * the codec refuses (a NaN) go as they are. */
static xdc_err_t code_slice(orch_worker *w, struct orch_rejoin_out *g, size_t len, int moments)
{
    xdc_codec *c = NULL;
    xdc_diag d = {{0}};
    XDC_CHECK(state_codec(len, &c, &d));
    size_t cap = xdc_codec_bound(c, 2 * len), raw = state_bytes(w, len, 0, 1), rest = state_bytes(w, len, 0, 0) - raw;
    size_t coded = 0;
    xdc_err_t rc = (g->wire = xdc_calloc(1, coded_span(cap) + (moments ? rest : 0))) ? XDC_OK : XDC_ERR_NOMEM;
    if (rc == XDC_OK) rc = xdc_codec_encode(c, (const float *)g->host, 2 * len, g->wire, cap, &coded, &d);
    xdc_codec_destroy(c);
    if (rc == XDC_ERR_RANGE || (rc == XDC_OK && coded >= raw)) { /* as they are */
        xdc_free(g->wire);
        g->wire = NULL;
        return XDC_OK;
    }
    XDC_CHECK(rc);
    if (moments) memcpy(g->wire + coded_span(coded), g->host + raw, rest); /* the padding zeroed */
    g->coded = coded;
    return XDC_OK;
}

/* Coding pays on this member's links to the round's joiners: the slowest is slow enough that zstd keeps up with it
 * (xdc_codec_zstd_level_for_link; a joiner with no direct link is reached through a relay, whose rate the topology
 * does not say: taken as slow). */
static int code_pays(const orch_worker *w)
{
    for (int r = 0; r < w->id->n_regions; r++) {
        if (!w->elastic.m.joining[r]) continue;
        const xdc_link *l = xdc_topology_link(w->topo, w->id->region_idx, r);
        if (!l || xdc_codec_zstd_level_for_link(l->bandwidth_gbps) != 0) return 1;
    }
    return 0;
}

/* Stage this member's slice of the round's state in hand-over g: the global parameters and outer momentum (o),
 * with `moments` the AdamW moments (the stage's; bf16 outside sync mode), each part's xxh64 into h, then coded
 * where it pays (code_slice); the AdamW steps into *adam_t. */
static xdc_err_t stage_state(orch_worker *w, orch_outer *o, struct orch_rejoin_out *g, size_t lo, size_t hi,
                             int moments, uint64_t *h, int64_t *adam_t)
{
    const xdc_device_ops *d = w->model.be->device;
    size_t len = hi - lo, bytes = len * sizeof(float);
    XDC_CHECK(d->host_alloc((void **)&g->host, slice_bytes(w, len) + 1)); /* + 1: a slice may be empty */
    uint8_t *part[N_PART];
    parts_of(w, g->host, len, part);
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    XDC_CHECK(d->copy_d2h(part[PART_GLOBAL], o->global + lo, bytes, s));
    XDC_CHECK(d->copy_d2h(part[PART_MOM], o->mom + lo, bytes, s));
    float none;
    if (!moments) { /* the count alone; on the same stream, which it waits for */
        XDC_CHECK(xdc_gpt_stage_moments_get(w->model.st, 0, 0, &none, &none, adam_t));
    } else if (moment_bytes(w) == sizeof(float)) {
        XDC_CHECK(xdc_gpt_stage_moments_get(w->model.st, lo, hi, (float *)part[PART_M], (float *)part[PART_V], adam_t));
    } else { /* fp32 into a host scratch, then bf16 (round to nearest even) into the slice */
        float *mv = xdc_malloc(2 * bytes + 1);
        if (!mv) return XDC_ERR_NOMEM;
        xdc_err_t rc = xdc_gpt_stage_moments_get(w->model.st, lo, hi, mv, mv + len, adam_t);
        if (rc == XDC_OK) rc = xdc_quant_cpu_ops.fp32_to_bf16(mv, NULL, len, (uint16_t *)part[PART_M]);
        if (rc == XDC_OK) rc = xdc_quant_cpu_ops.fp32_to_bf16(mv + len, NULL, len, (uint16_t *)part[PART_V]);
        xdc_free(mv);
        XDC_CHECK(rc);
    }
    for (int p = 0; p < (moments ? N_PART : PART_M); p++)
        h[HDR_HASH + p] = xdc_xxh64(part[p], part_bytes(w, p, len), 0);
    if (len && orch_rejoin_test_fault(w, "corrupt")) ((float *)part[PART_MOM])[0] += 1.0f;
    return len && code_pays(w) ? code_slice(w, g, len, moments) : XDC_OK;
}

/* Stage this member's hand-over to the round's joining regions: to each whose snapshot its kept rounds lead
 * from (orch_warm_chain) the means of the rounds since, when fewer bytes than the slice's global parameters and
 * momentum (orch_snapshot.c); to each whose snapshot is this run's model at an older round (its round and hash
 * among those this member kept) those alone, the joiner keeping its snapshot's AdamW moments; to the others its
 * slice of the state; each joiner's header (the member's step, data position and AdamW steps, the slice's
 * bounds, what follows and its hash). */
static xdc_err_t stage_slice(orch_worker *w, orch_outer *o, struct orch_rejoin_out **out)
{
    size_t lo, hi;
    orch_elastic_slice(w->topo, w->model.n_params, w->elastic.m.quorum, w->id->region_idx, &lo, &hi);
    size_t len = hi - lo;
    struct orch_rejoin_out *g = xdc_calloc(1, sizeof *g);
    if (!g) return XDC_ERR_NOMEM;
    *out = g;
    g->step = w->prog.step;
    int n = w->id->n_regions, why[XDC_TOPO_MAX_REGIONS], rounds[XDC_TOPO_MAX_REGIONS] = {0},
        own[XDC_TOPO_MAX_REGIONS] = {0}, state = 0, moments = 0, warm = 0;
    uint64_t from[XDC_TOPO_MAX_REGIONS] = {0}, base[HDR_N] = {0}, means = 0;
    for (int r = 0; r < n; r++) {
        if (!w->elastic.m.joining[r]) continue;
        why[r] = orch_warm_chain(w, r, lo, hi, state_bytes(w, len, 0, 1), &rounds[r], &from[r], &own[r]);
        if (why[r] != ORCH_WARM_OK) state = 1, moments |= !own[r];
        else warm = 1, g->rounds = rounds[r] > g->rounds ? rounds[r] : g->rounds;
    }
    int64_t adam_t = 0;
    float none;
    if (state) XDC_CHECK(stage_state(w, o, g, lo, hi, moments, base, &adam_t));
    else XDC_CHECK(xdc_gpt_stage_moments_get(w->model.st, 0, 0, &none, &none, &adam_t)); /* the count alone */
    if (warm) { /* + 1: a joiner may be 0 rounds behind */
        XDC_CHECK(w->model.be->device->host_alloc((void **)&g->means, orch_warm_bytes(w, g->rounds, lo, hi) + 1));
        XDC_CHECK(orch_warm_stage(w, g->rounds, lo, hi, g->means, g->off, &means));
    }
    header(w, base, adam_t, lo, hi);
    base[HDR_CODED] = g->coded;
    for (int r = 0; r < n; r++) {
        if (!w->elastic.m.joining[r]) continue;
        uint64_t *h = g->hdr[r];
        memcpy(h, base, sizeof base);
        size_t bytes = 0;
        if (why[r] != ORCH_WARM_OK) { /* the reason only where there is a warm path */
            h[HDR_WHY] = w->cfg->mode != ORCH_MODE_SYNC ? (uint64_t)why[r] : 0;
            h[HDR_OWN] = (uint64_t)own[r], h[HDR_FROM] = own[r] ? from[r] : 0;
            (void)payload(w, g, h, &bytes);
            h[HDR_BYTES] = bytes;
            continue;
        }
        h[HDR_WARM] = (uint64_t)rounds[r] + 1, h[HDR_FROM] = from[r], h[HDR_CODED] = 0;
        h[HDR_MEANS] = means >> (g->rounds - rounds[r]);
        const void *buf = payload(w, g, h, &bytes);
        h[HDR_BYTES] = bytes, h[HDR_HASH] = xdc_xxh64(buf, bytes, 0);
        for (int p = 1; p < N_PART; p++) h[HDR_HASH + p] = 0;
    }
    return XDC_OK;
}

/* Post a message of the hand-over to joiner peer p; the engine sends it while we train on. */
static void give_part(orch_worker *w, struct orch_rejoin_out *g, xdc_wan_peer *p, const void *buf, size_t bytes)
{
    const xdc_wan_identity *id = xdc_wan_peer_identity(p);
    xdc_err_t rc = xdc_wan_isend(p, XDC_WAN_BULK, buf, bytes, 0, bytes, &g->req[g->n_req]);
    if (rc == XDC_OK) g->n_req++;
    else
        XDC_WARN(XDC_SUB_ORCH, "round %lld: region %s rank %d: its slice of the state not sent (%s)",
                 (long long)w->prog.step, id->region, id->rank, xdc_strerror(rc));
}

/* The slice to every joiner's state connection (at once, or once the test hook's hold ended). */
static void post_slices(orch_worker *w, struct orch_rejoin_out *g)
{
    g->hold_until = 0;
    for (int i = 0; i < g->n_peer; i++) {
        const xdc_wan_identity *id = xdc_wan_peer_identity(g->peer[i]);
        const uint64_t *h = g->hdr[g->peer_region[i]];
        size_t bytes = 0;
        const void *buf = payload(w, g, h, &bytes);
        if (bytes) give_part(w, g, g->peer[i], buf, bytes); /* none: the header says so (wait_part) */
        if (h[HDR_WARM])
            XDC_INFO(XDC_SUB_ORCH,
                     "round %lld: sending region %s rank %d parameters [%llu, %llu) of the means of the %llu rounds "
                     "since its snapshot (%.2f MB)",
                     (long long)w->prog.step, id->region, id->rank, (unsigned long long)h[HDR_LO],
                     (unsigned long long)h[HDR_HI], (unsigned long long)h[HDR_WARM] - 1, (double)bytes / 1e6);
        else
            XDC_INFO(XDC_SUB_ORCH,
                     "round %lld: sending region %s rank %d parameters [%llu, %llu) of the state%s (%.2f MB%s)%s%s",
                     (long long)w->prog.step, id->region, id->rank, (unsigned long long)h[HDR_LO],
                     (unsigned long long)h[HDR_HI], h[HDR_OWN] ? ", global parameters and momentum alone" : "",
                     (double)bytes / 1e6, h[HDR_CODED] ? ", coded" : "", h[HDR_WHY] ? ": " : "",
                     orch_warm_why((int)h[HDR_WHY]));
    }
}

/* Accept a joiner's connection until `deadline`, in short waits: a joiner that left the run again before it
 * came (its worker or agent failed: the store host counted it out, orch_elastic_left_again) is not waited for
 * to the deadline; once every joiner still awaited left, XDC_ERR_UNAVAILABLE. */
static xdc_err_t accept_joiner(orch_worker *w, uint64_t deadline, xdc_wan_peer **p, xdc_diag *diag)
{
    for (;;) {
        int wait_ms = xdc_deadline_poll_ms(deadline);
        xdc_err_t rc = xdc_wan_accept(orch_member_listener(w->member),
                                      wait_ms < REJOIN_ACCEPT_MS ? wait_ms : REJOIN_ACCEPT_MS, p, diag);
        if (rc != XDC_ERR_TIMEOUT || xdc_deadline_passed(deadline)) return rc;
        int awaited = 0;
        for (int r = 0; r < w->id->n_regions; r++)
            awaited += w->elastic.m.joining[r] && !orch_elastic_left_again(&w->elastic.m, r);
        if (!awaited) {
            xdc_diag_set(diag, "the joining regions left the run again before they came for the state");
            return XDC_ERR_UNAVAILABLE;
        }
    }
}

xdc_err_t orch_rejoin_give(orch_worker *w, orch_outer *o)
{
    int n = w->id->n_regions, want = 0;
    settle_sends(w, 0);
    for (int r = 0; r < n; r++) want += w->elastic.m.joining[r];
    if (!want) return XDC_OK;
    /* A donor is a member of the round in full ('1'); one still catching up itself ('t', 'c') has no state to
     * give: the joiner dials it once, for the rounds. */
    int donor = w->elastic.m.quorum[w->id->region_idx] == '1', conns = donor ? 2 : 1;
    /* An earlier hand-over to a region joining again: that region left the run since, its process is gone, and
     * the sends to it would only end at the WAN deadline (at teardown: bench-chaos held a donor 60 s there). */
    for (struct orch_rejoin_out *e = w->elastic.give; e; e = e->next)
        for (int i = 0; i < e->n_peer; i++) {
            int r = xdc_topology_region_index(w->topo, xdc_wan_peer_identity(e->peer[i])->region);
            if (r >= 0 && r < n && w->elastic.m.joining[r]) xdc_wan_peer_close(e->peer[i]);
        }
    struct orch_rejoin_out *g = NULL;
    if (donor) {
        xdc_err_t rs = stage_slice(w, o, &g);
        if (g) g->next = w->elastic.give, w->elastic.give = g;
        XDC_CHECK(rs);
        if (orch_rejoin_test_fault(w,
                                   "hold")) /* not past the run's last round, which the joiner waits at for its state */
            g->hold_until = w->prog.step + 2 * w->cfg->diloco.inner_steps < w->cfg->train.steps
                                ? w->prog.step + 2 * w->cfg->diloco.inner_steps
                                : w->cfg->train.steps;
    }
    /* Accept each joiner's connections (it dials once it read the round), the rounds' in place of the dead
     * process's peer, then the state's. A joiner that never comes or takes no state is not waited for again: it
     * misses its state and the store host drops it, so every member agrees on the set all the same. */
    if (donor && !w->elastic.rejoin && orch_rejoin_test_fault(w, "freeze"))
        raise(SIGSTOP); /* a donor stopped before it takes the joiner's connections: the joiner's handshake hangs */
    xdc_diag d = {{0}};
    uint64_t deadline = xdc_deadline_ms(w->cfg->timeouts.handshake_ms);
    int got[XDC_TOPO_MAX_REGIONS] = {0};
    while (want > 0) {
        xdc_wan_peer *p;
        xdc_err_t rc = accept_joiner(w, deadline, &p, &d);
        if (rc != XDC_OK) {
            XDC_WARN(XDC_SUB_ORCH, "round %lld: a rejoining region's rank %d did not connect (%s: %s); it %s",
                     (long long)w->prog.step, w->id->lrank, xdc_strerror(rc), d.msg,
                     w->elastic.m.joins_in_round ? "is left out of this round" : "will miss the next round");
            break;
        }
        const xdc_wan_identity *id = xdc_wan_peer_identity(p);
        int r = xdc_topology_region_index(w->topo, id->region);
        if (r < 0 || r >= n || !w->elastic.m.joining[r] || id->rank != w->id->lrank) {
            XDC_WARN(XDC_SUB_ORCH,
                     "round %lld: unexpected WAN peer %s/%d (expected rank %d of a rejoining region); "
                     "closed",
                     (long long)w->prog.step, id->region, id->rank, w->id->lrank);
            xdc_wan_peer_destroy(p);
            continue;
        }
        if (++got[r] == conns) w->elastic.m.joining[r] = 0, want--;
        if (got[r] == 1) { /* the rounds' connection: the earlier process's sequence numbers died with it */
            xdc_wan_peer_destroy(orch_member_peers(w->member)[r]);
            orch_member_peers(w->member)[r] = p;
            continue;
        }
        if (!w->elastic.rejoin && orch_rejoin_test_fault(w, "vanish"))
            raise(SIGKILL);                      /* a donor that dies mid-transfer */
        if (orch_rejoin_test_fault(w, "miss")) { /* as if its connection never reached us */
            xdc_wan_peer_destroy(p);
            continue;
        }
        g->peer_region[g->n_peer] = r;
        g->peer[g->n_peer++] = p;
        give_part(w, g, p, g->hdr[r], sizeof g->hdr[r]); /* the header at once: the joiner's step, data position */
    }
    /* Before the round's exchange (m.joins_in_round): a joiner that never came is left out of it here (no peer of
     * its process to exchange with); the final set then leaves it out everywhere, and it leaves the run. */
    for (int r = 0; r < n; r++)
        if (w->elastic.m.joining[r] && !got[r] && w->elastic.m.live[r]) {
            w->elastic.m.live[r] = w->elastic.m.catching_up[r] = 0;
            w->elastic.m.n_live--;
        }
    memset(w->elastic.m.joining, 0, sizeof w->elastic.m.joining);
    if (g && !g->hold_until) post_slices(w, g);
    settle_sends(w, 0); /* nothing to send (no joiner came): the staging goes now */
    return XDC_OK;
}

/* Check donor `dn`'s header against the step due, the model and the first donor's (step, data position and
 * AdamW steps agree across members: they took the same steps over the same global batches), and its slice
 * bounds against the round's split. */
static xdc_err_t check_header(orch_worker *w, const donor_in *dn, const donor_in *first, long long want,
                              const char *mask, xdc_diag *diag)
{
    const uint64_t *h = dn->hdr;
    size_t lo, hi;
    orch_elastic_slice(w->topo, w->model.n_params, mask, dn->region, &lo, &hi);
    const char *from = w->topo->regions[dn->region].name;
    if (h[HDR_PARAMS] != w->model.n_params || h[HDR_STEP] != (uint64_t)want || h[HDR_LO] != lo || h[HDR_HI] != hi) {
        xdc_diag_set(diag,
                     "rejoin: %s sent parameters [%llu, %llu) of step %llu of a model of %llu; expected [%zu, %zu) of "
                     "step %lld, %zu",
                     from, (unsigned long long)h[HDR_LO], (unsigned long long)h[HDR_HI],
                     (unsigned long long)h[HDR_STEP], (unsigned long long)h[HDR_PARAMS], lo, hi, want,
                     w->model.n_params);
        return XDC_ERR_PROTO;
    }
    size_t len = hi - lo, raw = state_bytes(w, len, 0, 1);
    if (!h[HDR_WARM] && (h[HDR_OWN] > 1 || (h[HDR_CODED] && h[HDR_CODED] >= raw) ||
                         h[HDR_BYTES] != state_bytes(w, len, (size_t)h[HDR_CODED], (int)h[HDR_OWN]))) {
        xdc_diag_set(diag,
                     "rejoin: %s sent a slice of %llu bytes (%llu of them its coded global parameters and "
                     "momentum, own moments %llu) over parameters [%zu, %zu)",
                     from, (unsigned long long)h[HDR_BYTES], (unsigned long long)h[HDR_CODED],
                     (unsigned long long)h[HDR_OWN], lo, hi);
        return XDC_ERR_PROTO;
    }
    /* Training while rounds wait, each region ran its own count of inner steps: the joiner takes the furthest data
     * position of its donors (orch_rejoin_take) and the AdamW step count of the slice it takes last. */
    if (!w->elastic.m.ran && (h[HDR_EPOCH] != first->hdr[HDR_EPOCH] || h[HDR_BATCH] != first->hdr[HDR_BATCH] ||
                              h[HDR_ADAM_T] != first->hdr[HDR_ADAM_T])) {
        xdc_diag_set(diag,
                     "rejoin: %s is at data epoch %llu batch %llu after %llu AdamW steps, %s at epoch %llu batch %llu "
                     "after %llu: the members disagree",
                     from, (unsigned long long)h[HDR_EPOCH], (unsigned long long)h[HDR_BATCH],
                     (unsigned long long)h[HDR_ADAM_T], w->topo->regions[first->region].name,
                     (unsigned long long)first->hdr[HDR_EPOCH], (unsigned long long)first->hdr[HDR_BATCH],
                     (unsigned long long)first->hdr[HDR_ADAM_T]);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

/* Our snapshot over donor dn's [lo, lo + len): its AdamW moments into the stage (their step count the donor's +
 * `passed`), with `params` its global parameters and momentum into o too. The donor sent what completes the
 * snapshot whose global parameters hash to its HDR_FROM: XDC_ERR_PROTO when this worker holds no snapshot,
 * XDC_ERR_CORRUPT when ours is another. */
static xdc_err_t from_snapshot(orch_worker *w, orch_outer *o, const donor_in *dn, int64_t passed, int params,
                               xdc_diag *diag)
{
    const uint64_t *h = dn->hdr;
    size_t lo = h[HDR_LO], len = h[HDR_HI] - lo, bytes = len * sizeof(float);
    const void *snap = orch_warm_snapshot(w);
    if (!snap) {
        xdc_diag_set(diag, "rejoin: %s sent what completes a snapshot this worker does not hold",
                     w->topo->regions[dn->region].name);
        return XDC_ERR_PROTO;
    }
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts((void *)snap, w->model.n_params, &m, part);
    if (h[HDR_FROM] != m->hash) {
        xdc_diag_set(diag, "rejoin: %s sent what completes a snapshot hashing to %016llx, ours %016llx",
                     w->topo->regions[dn->region].name, (unsigned long long)h[HDR_FROM], (unsigned long long)m->hash);
        return XDC_ERR_CORRUPT;
    }
    const xdc_device_ops *d = w->model.be->device;
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    if (params) XDC_CHECK(d->copy_h2d(o->global + lo, part[ORCH_SNAP_GLOBAL] + lo, bytes, s));
    if (params) XDC_CHECK(d->copy_h2d(o->mom + lo, part[ORCH_SNAP_MOM] + lo, bytes, s));
    if (w->elastic.take->trained || w->elastic.take->trains)
        return XDC_OK; /* its moments went on from the snapshot's with its inner steps */
    return xdc_gpt_stage_moments_set(w->model.st, lo, lo + len, part[ORCH_SNAP_M] + lo, part[ORCH_SNAP_V] + lo,
                                     (int64_t)h[HDR_ADAM_T] + passed);
}

/* Donor dn's slice as received at `host` (state_bytes) into its parts: the global parameters and momentum in
 * place, or decoded into *gm (2 len fp32, the caller frees it) where they came coded; the AdamW moments after
 * them (HDR_OWN: none, part[PART_M] and part[PART_V] unset). */
static xdc_err_t slice_parts(orch_worker *w, const donor_in *dn, uint8_t *host, uint8_t **part, float **gm,
                             xdc_diag *diag)
{
    size_t lo = dn->hdr[HDR_LO], len = dn->hdr[HDR_HI] - lo, coded = dn->hdr[HDR_CODED];
    parts_of(w, host, len, part);
    if (!coded) return XDC_OK;
    xdc_codec *c = NULL;
    XDC_CHECK(state_codec(len, &c, diag));
    xdc_err_t rc = (*gm = xdc_malloc(2 * len * sizeof(float))) ? XDC_OK : XDC_ERR_NOMEM;
    if (rc == XDC_OK) rc = xdc_codec_decode(c, host, coded, *gm, 2 * len, XDC_CODEC_WRITE, diag);
    xdc_codec_destroy(c);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "rejoin: the coded global parameters and momentum (parameters [%zu, %zu)) from %s", lo,
                        lo + len, w->topo->regions[dn->region].name);
        return rc;
    }
    part[PART_GLOBAL] = (uint8_t *)*gm, part[PART_MOM] = (uint8_t *)(*gm + len);
    part[PART_M] = host + coded_span(coded), part[PART_V] = part[PART_M] + part_bytes(w, PART_M, len);
    return XDC_OK;
}

/* Donor dn's slice, received into `host` (state_bytes from slice_bytes(its lo)): each part's xxh64 against the
 * header's (XDC_ERR_CORRUPT naming the part and the donor), then into the global parameters, the outer momentum
 * and the AdamW moments (HDR_OWN: our snapshot's, from_snapshot), whose step count becomes the donor's +
 * `passed`. */
static xdc_err_t take_slice(orch_worker *w, orch_outer *o, const donor_in *dn, uint8_t *host, int64_t passed,
                            xdc_diag *diag)
{
    int64_t adam_t = (int64_t)dn->hdr[HDR_ADAM_T] + passed;
    const xdc_device_ops *d = w->model.be->device;
    size_t lo = dn->hdr[HDR_LO], len = dn->hdr[HDR_HI] - lo, bytes = len * sizeof(float);
    int own = (int)dn->hdr[HDR_OWN];
    uint8_t *part[N_PART];
    float *gm = NULL;
    xdc_err_t rc = slice_parts(w, dn, host, part, &gm, diag);
    for (int p = 0; rc == XDC_OK && p < (own ? PART_M : N_PART); p++) {
        uint64_t got = xdc_xxh64(part[p], part_bytes(w, p, len), 0);
        if (got != dn->hdr[HDR_HASH + p]) {
            xdc_diag_set(diag,
                         "rejoin: the %s (parameters [%zu, %zu)) from %s hash to %016llx, the sender's is %016llx",
                         part_name[p], lo, lo + len, w->topo->regions[dn->region].name, (unsigned long long)got,
                         (unsigned long long)dn->hdr[HDR_HASH + p]);
            rc = XDC_ERR_CORRUPT;
        }
    }
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    if (rc == XDC_OK) rc = d->copy_h2d(o->global + lo, part[PART_GLOBAL], bytes, s);
    if (rc == XDC_OK) rc = d->copy_h2d(o->mom + lo, part[PART_MOM], bytes, s);
    if (rc == XDC_OK) rc = d->stream_sync(s); /* gm is freed below */
    xdc_free(gm);
    XDC_CHECK(rc);
    if (own) return from_snapshot(w, o, dn, passed, 0, diag);
    if (moment_bytes(w) == sizeof(float)) /* on the same stream, which it waits for */
        return xdc_gpt_stage_moments_set(w->model.st, lo, lo + len, (const float *)part[PART_M],
                                         (const float *)part[PART_V], adam_t);
    float *mv = xdc_malloc(2 * bytes + 1); /* bf16 back to fp32 */
    if (!mv) return XDC_ERR_NOMEM;
    rc = xdc_quant_cpu_ops.bf16_to_fp32((const uint16_t *)part[PART_M], len, mv);
    if (rc == XDC_OK) rc = xdc_quant_cpu_ops.bf16_to_fp32((const uint16_t *)part[PART_V], len, mv + len);
    if (rc == XDC_OK) rc = xdc_gpt_stage_moments_set(w->model.st, lo, lo + len, mv, mv + len, adam_t);
    xdc_free(mv);
    return rc;
}

/* Bytes donor dn sends after its header: the rounds' means (HDR_WARM) or its slice of the state. */
static size_t donor_bytes(const donor_in *dn) { return (size_t)dn->hdr[HDR_BYTES]; }

/* Donor dn's means of the rounds since our snapshot over its [lo, hi), received into `host`: their hash against
 * the header's, then the snapshot's global parameters, outer momentum and AdamW moments there (from_snapshot) and
 * the rounds' outer steps replayed on them (orch_warm_replay), through `dev` (device, hi - lo fp32): the members'
 * operations on the same bytes, so the global parameters come out as theirs. */
static xdc_err_t take_rounds(orch_worker *w, orch_outer *o, const donor_in *dn, const uint8_t *host, int64_t passed,
                             float *dev, xdc_diag *diag)
{
    const uint64_t *h = dn->hdr;
    size_t lo = h[HDR_LO], len = h[HDR_HI] - lo;
    if (h[HDR_BYTES] > slice_bytes(w, len) || h[HDR_WARM] - 1 > ORCH_WARM_MAX) { /* more than was received */
        xdc_diag_set(diag, "rejoin: %s sent %llu rounds' means in %llu bytes over parameters [%zu, %zu)",
                     w->topo->regions[dn->region].name, (unsigned long long)h[HDR_WARM] - 1,
                     (unsigned long long)h[HDR_BYTES], lo, lo + len);
        return XDC_ERR_PROTO;
    }
    uint64_t got = xdc_xxh64(host, donor_bytes(dn), 0);
    if (got != h[HDR_HASH]) {
        xdc_diag_set(diag,
                     "rejoin: the rounds' means (parameters [%zu, %zu)) from %s hash to %016llx, the sender's is "
                     "%016llx",
                     lo, lo + len, w->topo->regions[dn->region].name, (unsigned long long)got,
                     (unsigned long long)h[HDR_HASH]);
        return XDC_ERR_CORRUPT;
    }
    XDC_CHECK(from_snapshot(w, o, dn, passed, 1, diag));
    return orch_warm_replay(w, o, host, donor_bytes(dn), (int)h[HDR_WARM] - 1, lo, lo + len, h[HDR_MEANS], dev, diag);
}

/* Complete a receive from one of the k donors; the engine fails it when the peer is silent past the operation
 * deadline, and a donor whose region left the run since the round was read (orch_elastic_left_again: its
 * process is gone) before all its parts came fails it at once, XDC_ERR_UNAVAILABLE: the joiner exits, its region is dropped and it asks
 * again, instead of holding its first round back. */
static xdc_err_t take(orch_worker *w, const donor_in *dn, int k, xdc_wan_request *req, size_t *size, xdc_diag *diag)
{
    for (;;) {
        xdc_err_t rc = xdc_wan_wait(req, REJOIN_ACCEPT_MS, size, NULL, diag);
        if (rc != XDC_ERR_AGAIN) return rc;
        for (int i = 0; i < k; i++) /* one whose parts are all in may go */
            if ((dn[i].req[0] || dn[i].req[1]) && orch_elastic_left_again(&w->elastic.m, dn[i].region)) {
                xdc_diag_set(diag, "its region left the run before its slice of the state came");
                return XDC_ERR_UNAVAILABLE;
            }
    }
}

/* Post every donor's header and slice receives on its state connection, all before any is waited for, so the
 * slices cross every link at once. */
static xdc_err_t post_receives(orch_worker *w, struct orch_rejoin_in *in)
{
    for (int i = 0; i < in->k; i++) {
        donor_in *dn = &in->dn[i];
        size_t lo, hi;
        orch_elastic_slice(w->topo, w->model.n_params, in->mask, dn->region, &lo, &hi);
        XDC_CHECK(xdc_wan_irecv(dn->peer, XDC_WAN_BULK, dn->hdr, sizeof dn->hdr, &dn->req[0]));
        XDC_CHECK(
            xdc_wan_irecv(dn->peer, XDC_WAN_BULK, in->host + slice_bytes(w, lo), slice_bytes(w, hi - lo), &dn->req[1]));
    }
    return XDC_OK;
}

/* Part j (0: the header, checked; 1: the slice) from every donor, waited for (take: a donor that left is not).
 * Once the headers are in, the slice of a donor whose header says it sends no bytes (0 rounds' means, or an empty
 * slice) is in: it sends none (post_slices). */
static xdc_err_t wait_part(orch_worker *w, struct orch_rejoin_in *in, int j, xdc_diag *diag)
{
    for (int i = 0; i < in->k; i++) {
        donor_in *dn = &in->dn[i];
        if (!dn->req[j]) continue;
        size_t got = 0;
        xdc_diag d = {{0}};
        xdc_err_t r = take(w, in->dn, in->k, dn->req[j], &got, &d);
        dn->req[j] = NULL;
        if (r == XDC_OK && j == 0 && got != sizeof dn->hdr) {
            xdc_diag_set(&d, "a header of %zu bytes where %zu were due", got, sizeof dn->hdr);
            r = XDC_ERR_PROTO;
        }
        if (r != XDC_OK) {
            xdc_diag_set(diag, "rejoin: no state from %s: %s", w->topo->regions[dn->region].name, d.msg);
            return r;
        }
        if (j == 0) XDC_CHECK(check_header(w, dn, &in->dn[0], in->want, in->mask, diag));
        if (j == 0 && !donor_bytes(dn)) { /* nothing comes: its receive is given up */
            (void)xdc_wan_request_cancel(dn->req[1]);
            dn->req[1] = NULL;
        }
    }
    return XDC_OK;
}

/* Without waiting: *all = 1 when every donor's slice is in. A failed receive is its donor's error, and a donor
 * whose region left the run since (its slice will not come) XDC_ERR_UNAVAILABLE: the joiner exits, its region
 * is dropped and it asks again. */
static xdc_err_t slices_in(orch_worker *w, struct orch_rejoin_in *in, int *all, xdc_diag *diag)
{
    *all = 1;
    if (in->failed != XDC_OK) {
        xdc_diag_set(diag, "%s", in->why.msg);
        return in->failed;
    }
    for (int i = 0; i < in->k; i++) {
        donor_in *dn = &in->dn[i];
        if (!dn->req[1]) continue;
        int done = 0;
        xdc_diag d = {{0}};
        xdc_err_t rc = xdc_wan_test(dn->req[1], &done, NULL, NULL, &d);
        if (rc == XDC_OK && !done && orch_elastic_left_again(&w->elastic.m, dn->region)) {
            xdc_diag_set(&d, "its region left the run before its slice of the state came");
            rc = XDC_ERR_UNAVAILABLE;
        }
        if (rc == XDC_OK && !done) {
            *all = 0;
            continue;
        }
        if (rc != XDC_ERR_UNAVAILABLE) dn->req[1] = NULL; /* completed or failed: released */
        if (rc != XDC_OK) {
            xdc_diag_set(&in->why, "rejoin: no state from %s: %s", w->topo->regions[dn->region].name, d.msg);
            xdc_diag_set(diag, "%s", in->why.msg);
            return in->failed = rc;
        }
    }
    return XDC_OK;
}

/* orch_elastic_member's state_in (ctx: the worker): every slice in. A failure waits for the next arrival, which
 * reports it (orch_rejoin_arrive). */
static int state_in(void *ctx)
{
    orch_worker *w = ctx;
    int all = 0;
    xdc_diag d = {{0}};
    return slices_in(w, w->elastic.take, &all, &d) == XDC_OK && all;
}

/* Joiners of one round are members of the next together: each dials the lower ones, then accepts the higher
 * ones (no wait goes up the region order, so none waits in a circle). */
static xdc_err_t link_joiners(orch_worker *w, const char *mask, xdc_diag *diag)
{
    xdc_wan_peer **peers = orch_member_peers(w->member);
    int us = w->id->region_idx, higher = 0;
    for (int r = 0; mask[r]; r++) {
        if (mask[r] != 'j' || r == us) continue;
        if (r > us) higher++;
        else XDC_CHECK(orch_member_dial(w->member, r, w->id->lrank, &peers[r], diag));
    }
    while (higher > 0) {
        xdc_wan_peer *p;
        XDC_CHECK(xdc_wan_accept(orch_member_listener(w->member), w->cfg->timeouts.handshake_ms, &p, diag));
        const xdc_wan_identity *id = xdc_wan_peer_identity(p);
        int r = xdc_topology_region_index(w->topo, id->region);
        if (r <= us || r >= w->id->n_regions || mask[r] != 'j' || peers[r] || id->rank != w->id->lrank) {
            XDC_WARN(XDC_SUB_ORCH,
                     "rejoin: unexpected WAN peer %s/%d (expected rank %d of a higher joining region); closed",
                     id->region, id->rank, w->id->lrank);
            xdc_wan_peer_destroy(p);
            continue;
        }
        peers[r] = p;
        higher--;
    }
    return XDC_OK;
}

/* What the donors' headers say they send, for the joiner's log: "a slice from each (...state..., N MB" or the
 * rounds' means since its snapshot from some. */
static void took_how(const orch_worker *w, const struct orch_rejoin_in *in, char *out, size_t cap)
{
    size_t bytes = 0, raw = 0;
    int warm = 0, own = 0, coded = 0, why = 0;
    uint64_t rounds = 0;
    for (int i = 0; i < in->k; i++) {
        const uint64_t *h = in->dn[i].hdr;
        bytes += donor_bytes(&in->dn[i]);
        if (h[HDR_WARM]) {
            warm++, rounds = h[HDR_WARM] - 1;
            continue;
        }
        own += h[HDR_OWN] != 0, coded += h[HDR_CODED] != 0, why = (int)h[HDR_WHY];
        raw += state_bytes(w, h[HDR_HI] - h[HDR_LO], 0, (int)h[HDR_OWN]);
    }
    char parts[160], from[48] = "";
    const char *bf16 = moment_bytes(w) == sizeof(float) ? "" : " as bf16";
    if (!own) snprintf(parts, sizeof parts, "global parameters, outer momentum and AdamW moments%s", bf16);
    else if (own == in->k - warm)
        snprintf(parts, sizeof parts,
                 "global parameters and outer momentum, its own AdamW "
                 "moments from its snapshot");
    else
        snprintf(parts, sizeof parts, "global parameters and outer momentum, AdamW moments%s from %d", bf16,
                 in->k - warm - own);
    if (coded) snprintf(from, sizeof from, ", coded from %.2f", (double)raw / 1e6);
    if (warm)
        snprintf(out, cap,
                 "warm: %d of them the means of the %llu rounds since its snapshot, replayed from it (its own AdamW "
                 "moments), %d the state (%s%s%.1f MB in all, the state %.1f MB",
                 warm, (unsigned long long)rounds, in->k - warm, warm < in->k ? parts : "", warm < in->k ? "; " : "",
                 (double)bytes / 1e6, (double)slice_bytes(w, w->model.n_params) / 1e6);
    else
        snprintf(out, cap, "a slice from each (%s, %.2f MB%s, the state %.2f MB%s%s", parts, (double)bytes / 1e6, from,
                 (double)slice_bytes(w, w->model.n_params) / 1e6, why ? "; not warm: " : "", orch_warm_why(why));
}

/* The state landed (every slice in): check and take each donor's slice, replay the outer steps of the rounds
 * kept since (the members took them from the same bytes), local = global, logged. */
static xdc_err_t take_state(orch_worker *w, orch_outer *o, struct orch_rejoin_in *in, xdc_diag *diag)
{
    const xdc_device_ops *d = w->model.be->device;
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    float *dev = NULL; /* (the widest warm slice) a round's means on the device, replayed from */
    size_t widest = 0;
    for (int i = 0; i < in->k; i++)
        if (in->dn[i].hdr[HDR_WARM] && in->dn[i].hdr[HDR_HI] - in->dn[i].hdr[HDR_LO] > widest)
            widest = in->dn[i].hdr[HDR_HI] - in->dn[i].hdr[HDR_LO];
    xdc_err_t rc = widest ? d->mem_alloc((void **)&dev, widest * sizeof(float)) : XDC_OK;
    for (int i = 0; i < in->k && rc == XDC_OK; i++) {
        const donor_in *dn = &in->dn[i];
        uint8_t *host = in->host + slice_bytes(w, dn->hdr[HDR_LO]);
        rc = dn->hdr[HDR_WARM] ? take_rounds(w, o, dn, host, in->passed, dev, diag)
                               : take_slice(w, o, dn, host, in->passed, diag);
    }
    for (int i = 0; i < in->n_kept && rc == XDC_OK; i++)
        rc = orch_outer_step(o, in->kept[i].d, in->kept[i].lo, in->kept[i].hi, in->kept[i].mean);
    /* A joiner that trained meanwhile carries its progress onto the global parameters: its next pseudo-gradients
     * hold it, so the rounds average it in as any member's; at the run's last round it ends on the members' model. */
    int carried = in->trains && w->prog.step < w->cfg->train.steps;
    o->bystander = false;
    if (rc == XDC_OK) {
        orch_snapshot_meta *m;
        float *part[ORCH_SNAP_PARTS];
        if (carried) orch_snapshot_parts((void *)orch_warm_snapshot(w), o->n, &m, part);
        rc = carried ? orch_outer_rebase(o, part[ORCH_SNAP_GLOBAL])
                     : d->copy_d2d(o->local, o->global, o->n * sizeof(float), s);
    }
    xdc_err_t rs = d->stream_sync(s);
    d->mem_free(dev);
    XDC_CHECK(rc);
    XDC_CHECK(rs);
    const uint64_t *h = in->dn[0].hdr;
    char how[320], where[160];
    took_how(w, in, how, sizeof how);
    if (in->trained || in->trains)
        snprintf(where, sizeof where,
                 "step %lld, its own AdamW moments and data position after %d inner steps from "
                 "its snapshot%s",
                 in->want, in->trained ? in->early : w->elastic.m.taking_ran,
                 carried ? ", their progress carried onto the state" : "");
    else
        snprintf(where, sizeof where, "step %lld, data epoch %llu batch %llu, %llu AdamW steps", in->want,
                 (unsigned long long)h[HDR_EPOCH], (unsigned long long)h[HDR_BATCH], (unsigned long long)h[HDR_ADAM_T]);
    XDC_WARN(XDC_SUB_ORCH,
             "region %s took the state of round %lld (%s) from the round's %d member regions, %s, hashes checked) "
             "%.2f s after its rejoin request; %d rounds %s %s, their outer steps replayed; it trains from step %lld, "
             "a member from the next round",
             w->id->region, in->at, where, in->k, how, (double)(xdc_now_ns() - w->elastic.rejoin_t0) / 1e9, in->n_kept,
             in->trained ? "with its steps' weight" : "with weight 0",
             w->elastic.m.joins_in_round ? "from that round on" : "meanwhile", (long long)w->prog.step);
    return XDC_OK;
}

/* orch_member_dial_unless's gone (ctx: the worker): a member region dropped since the round that takes us back was
 * read. A member stopped (SIGSTOP, a frozen VM) after that round's decision is such a one once the run drops it; its
 * kernel takes our connection and its process never answers, and waiting out timeouts.handshake for it (15 s) held
 * piled-up returns in bench-chaos. We leave, our region is dropped, and our restart asks again. */
static int member_gone(void *ctx, int r)
{
    orch_worker *w = ctx;
    return orch_elastic_left_again(&w->elastic.m, r);
}

/* Dial the members of the round that took us back (mask): every region in the next round ('1', 't', 'c') for
 * the rounds, in place of the dead process's peer, and each donor ('1') once more for the state. */
static xdc_err_t dial_members(orch_worker *w, struct orch_rejoin_in *in, xdc_diag *diag)
{
    xdc_wan_peer **peers = orch_member_peers(w->member);
    for (int r = 0; r < w->id->n_regions; r++) {
        if (!strchr("1tc", in->mask[r])) continue;
        XDC_CHECK(orch_member_dial_unless(w->member, r, w->id->lrank, member_gone, w, &peers[r], diag));
        if (in->mask[r] != '1') continue;
        in->dn[in->k].region = r;
        XDC_CHECK(orch_member_dial_unless(w->member, r, w->id->lrank, member_gone, w, &in->dn[in->k++].peer, diag));
    }
    return XDC_OK;
}

/* Streaming that trains while rounds wait (m.ran: one worker a region), its headers read: when every donor sends
 * what completes the snapshot this worker posted (its means since, or the global parameters alone), that snapshot is
 * of this run's model and its state will be the members' replayed from it, so it trains from the snapshot while the
 * slices come instead of letting the steps pass: the snapshot's parameters, AdamW moments and data position
 * (orch_warm_start), the rounds leaving them alone (o->bystander) until take_state carries its progress onto the
 * state. Its step is the run's from the header on (the learning rate's). Elsewhere the state replaces what it
 * trained: DiLoCo counts a joiner's steps only where the round that takes it back begins from its snapshot
 * (early_start), and a state not built on the snapshot gives its progress no base. */
static xdc_err_t trains_while_taking(orch_worker *w, orch_outer *o, struct orch_rejoin_in *in)
{
    long long round;
    if (w->cfg->mode != ORCH_MODE_STREAMING || !w->elastic.m.ran || in->want >= w->cfg->train.steps) return XDC_OK;
    for (int i = 0; i < in->k; i++)
        if (!in->dn[i].hdr[HDR_WARM] && !in->dn[i].hdr[HDR_OWN]) return XDC_OK;
    xdc_err_t rc = orch_warm_start(w, o, &round);
    if (rc == XDC_ERR_UNAVAILABLE) return XDC_OK; /* no snapshot: the donors' headers said otherwise */
    XDC_CHECK(rc);
    in->trains = 1;
    o->bystander = true;
    w->elastic.m.taking_ran = 0;
    return XDC_OK;
}

bool orch_rejoin_trains(const orch_worker *w) { return w->elastic.take && w->elastic.take->trains; }

/* Elastic DiLoCo (the mode gives its inner step) that trains while rounds wait (m.ran), its rounds at once (lag 0)
 * of H steps each (not nobody waits): a joiner with a valid snapshot trains from it while it asks. When that snapshot is of the round decided
 * last, the round that takes it back is the next one, which its members began from the same global parameters:
 * its inner steps are that round's like theirs, and the round counts them (orch_quorum.c's ran_early) and weighs its
 * pseudo-gradient by them. Otherwise they are dropped (the state it takes replaces them). early->most: the steps
 * to that round (0: it does not train). */
static xdc_err_t early_start(orch_worker *w, orch_outer *o, int lag, orch_elastic_early *early)
{
    long long round;
    int H = w->cfg->diloco.inner_steps;
    if (!early->step || !w->elastic.m.ran || !w->elastic.m.joins_in_round || lag || w->cfg->diloco.nobody_waits ||
        orch_warm_start(w, o, &round) != XDC_OK)
        return XDC_OK;
    early->most = (int)(round + H - w->prog.step);
    if (round + H >= w->cfg->train.steps) early->most = 0; /* the run's last round takes no region back */
    if (early->most > 0)
        XDC_WARN(XDC_SUB_ORCH,
                 "region %s trains from its snapshot of round %lld while it asks to rejoin (up to %d inner steps: the "
                 "round after it counts them if it takes the region back)",
                 w->id->region, round, early->most);
    return XDC_OK;
}

xdc_err_t orch_rejoin_take(orch_worker *w, orch_outer *o, int lag, xdc_err_t (*step)(void *ctx, xdc_diag *diag),
                           xdc_diag *diag)
{
    uint8_t in_round[XDC_TOPO_MAX_REGIONS];
    int lowest;
    long long at;
    w->elastic.rejoin_t0 = xdc_now_ns();
    XDC_CHECK(orch_warm_ask(w, diag)); /* before the request: the round's donors read it */
    orch_elastic_early early = {.step = step, .ctx = w};
    XDC_CHECK(early_start(w, o, lag, &early));
    XDC_CHECK(orch_elastic_rejoin_ask(&w->elastic.m, w->id->member,
                                      w->cfg->timeouts.rendezvous_ms + w->cfg->timeouts.operation_ms,
                                      early.most > 0 ? &early : NULL, &at, in_round, &lowest, diag));
    w->elastic.rejoin_round = at;
    if (at == RDZV_ROUND_END) return XDC_OK; /* the run ended first: nothing to take */
    if (orch_rejoin_test_fault(w, "absent")) {
        xdc_diag_set(diag, "rejoin: region %s gives up before it dials the round at step %lld (test hook)",
                     w->id->region, at);
        return XDC_ERR_UNAVAILABLE;
    }
    struct orch_rejoin_in *in = xdc_calloc(1, sizeof *in);
    if (!in) return XDC_ERR_NOMEM;
    w->elastic.take = in; /* released by orch_rejoin_drain, whatever happens */
    in->at = at;
    in->want = at + lag; /* no round takes a region back at the run's last round (orch_quorum.h) */
    in->early = early.ran;
    in->trained = orch_elastic_took_early(&w->elastic.m, w->id->region_idx);
    memcpy(in->mask, w->elastic.m.quorum, sizeof in->mask);
    XDC_CHECK(dial_members(w, in, diag));
    XDC_CHECK(link_joiners(w, in->mask, diag));
    XDC_CHECK(w->model.be->device->host_alloc((void **)&in->host, slice_bytes(w, w->model.n_params)));
    XDC_CHECK(post_receives(w, in));
    XDC_CHECK(wait_part(w, in, 0, diag)); /* the headers: each donor sends its own at once */
    const uint64_t *h = in->dn[0].hdr;
    const donor_in *far = &in->dn[0]; /* the donors agree but training while rounds waited (check_header) */
    for (int i = 1; i < in->k; i++)
        if (in->dn[i].hdr[HDR_EPOCH] > far->hdr[HDR_EPOCH] ||
            (in->dn[i].hdr[HDR_EPOCH] == far->hdr[HDR_EPOCH] && in->dn[i].hdr[HDR_BATCH] > far->hdr[HDR_BATCH]))
            far = &in->dn[i];
    XDC_CHECK(trains_while_taking(w, o, in));
    if (w->model.data && !in->trained && !in->trains &&
        xdc_data_set_pos(w->model.data, (xdc_data_pos){.epoch = far->hdr[HDR_EPOCH], .batch = far->hdr[HDR_BATCH]}) !=
            XDC_OK) {
        xdc_diag_set(diag, "rejoin: %s's data position (epoch %llu, batch %llu) is not one of our shard",
                     w->topo->regions[far->region].name, (unsigned long long)far->hdr[HDR_EPOCH],
                     (unsigned long long)far->hdr[HDR_BATCH]);
        return XDC_ERR_PROTO;
    }
    w->prog.step = (int64_t)h[HDR_STEP];
    if (w->cfg->mode != ORCH_MODE_SYNC) { /* the slices come while we take part */
        w->elastic.m.arrive = RDZV_ARRIVE_TAKING;
        w->elastic.m.state_in = state_in, w->elastic.m.state_ctx = w;
        size_t bytes = 0;
        for (int i = 0; i < in->k; i++) bytes += donor_bytes(&in->dn[i]);
        if (in->trained)
            XDC_WARN(XDC_SUB_ORCH,
                     "region %s rejoins at round %lld with the %d inner steps it ran from its snapshot (%d counted): "
                     "its pseudo-gradient is in this round's mean with their weight (%.1f MB from %d member regions)",
                     w->id->region, at, in->early, w->elastic.m.extra[w->id->region_idx], (double)bytes / 1e6, in->k);
        else if (in->early)
            XDC_WARN(XDC_SUB_ORCH,
                     "region %s: the round that took it back (%lld) does not count the %d inner steps it ran from its "
                     "snapshot (not of the round before it): it takes the state as any joiner",
                     w->id->region, at, in->early);
        if (!in->trained)
            XDC_WARN(
                XDC_SUB_ORCH,
                "region %s rejoins at round %lld: it takes part with weight 0 from %s until its state came (%.1f MB "
                "from %d member regions)%s",
                w->id->region, at, w->elastic.m.joins_in_round ? "this round's exchange" : "the next round",
                (double)bytes / 1e6, in->k,
                in->trains ? "; it trains from its snapshot meanwhile, its progress carried onto the state" : "");
        return XDC_OK;
    }
    XDC_CHECK(wait_part(w, in, 1, diag));
    XDC_CHECK(take_state(w, o, in, diag));
    free_in(w, in);
    w->elastic.take = NULL;
    return XDC_OK;
}

xdc_err_t orch_rejoin_pass(orch_worker *w, float *loss)
{
    size_t bt = (size_t)w->model.B * w->model.T;
    for (int mb = 0; w->model.data && mb < w->model.M; mb++)
        XDC_CHECK(xdc_data_next_train(w->model.data, w->model.tokens + mb * bt, w->model.targets + mb * bt));
    *loss = (float)w->prog.last_loss;
    w->prog.step++;
    w->elastic.take->passed++;
    return XDC_OK;
}

xdc_err_t orch_rejoin_arrive(orch_worker *w, xdc_diag *diag)
{
    struct orch_rejoin_in *in = w->elastic.take;
    if (!in) return XDC_OK;
    int all;
    XDC_CHECK(slices_in(w, in, &all, diag));
    w->elastic.m.arrive = all ? RDZV_ARRIVE_TOOK : RDZV_ARRIVE_TAKING;
    return XDC_OK;
}

xdc_err_t orch_rejoin_catch_up(orch_worker *w, orch_outer *o, size_t lo, size_t hi, xdc_diag *diag)
{
    struct orch_rejoin_in *in = w->elastic.take;
    if (!in) return XDC_OK;
    const xdc_device_ops *d = w->model.be->device;
    if (in->n_kept == in->cap) {
        int cap = in->cap ? 2 * in->cap : 8;
        kept_round *k = xdc_realloc(in->kept, (size_t)cap * sizeof *k);
        if (!k) return XDC_ERR_NOMEM;
        in->kept = k, in->cap = cap;
    }
    kept_round *k = &in->kept[in->n_kept];
    *k = (kept_round){.lo = lo, .hi = hi, .mean = o->mean};
    XDC_CHECK(d->mem_alloc((void **)&k->d, (hi - lo) * sizeof(float)));
    in->n_kept++;
    XDC_CHECK(d->copy_d2d(k->d, o->pseudo + lo, (hi - lo) * sizeof(float), o->stream)); /* the round's mean */
    /* Every worker of our region had its state at this round ('c'; at the round that took it back, in its exchange:
     * once its workers agree that all of them have it), or the run ends: take it (at the end, waited for) and train
     * from here. */
    int last = w->prog.step >= w->cfg->train.steps, now = w->elastic.m.quorum[w->id->region_idx] == 'c' || last;
    if (!now && w->elastic.m.joins_in_round && w->prog.step == in->at) {
        int all;
        XDC_CHECK(slices_in(w, in, &all, diag));
        XDC_CHECK(orch_elastic_region_took(&w->elastic.m, in->at, all, &now, diag));
    }
    if (!now) return XDC_OK;
    XDC_CHECK(wait_part(w, in, 1, diag));
    XDC_CHECK(take_state(w, o, in, diag));
    free_in(w, in);
    w->elastic.take = NULL;
    w->elastic.m.arrive = RDZV_ARRIVE;
    w->elastic.m.state_in = NULL;
    return XDC_OK;
}

void orch_rejoin_member(orch_worker *w, int64_t round)
{
    if (!w->elastic.rejoin || w->elastic.rejoin_round < 0 || w->elastic.take) return;
    uint64_t now = xdc_now_ns();
    XDC_WARN(XDC_SUB_ORCH,
             "region %s rejoined at round %lld (%.2f s after its rejoin request, %.2f s after this worker started; "
             "state of round %lld)",
             w->id->region, (long long)round, (double)(now - w->elastic.rejoin_t0) / 1e9,
             (double)(now - w->elastic.started) / 1e9, (long long)w->elastic.rejoin_round);
    w->elastic.rejoin_round = -1;
}
