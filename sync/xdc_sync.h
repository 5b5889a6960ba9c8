/* xdc_sync.h — the cross-region hierarchical sync. An xdc_sync averages one fp32 buffer (a stage's
 * gradients, a DiLoCo pseudo-gradient, one streaming fragment) across the data-parallel replicas of a
 * region and across regions, bucket by bucket, so the work overlaps compute:
 *   intra reduce-scatter over the replicas → WAN exchange of this rank's shard with the same rank of
 *   every other region (codec + error feedback, TLS, its own streams) → intra all-gather.
 * Regions with more replicas than the smallest one exchange over as many lanes as it has replicas
 * (xdc_sync_cfg.lanes): all-reduce over the replicas → the lanes' WAN exchange → a broadcast from each lane.
 * Buckets are processed from the end of the buffer towards the start (the order backward produces
 * them); a bucket goes as soon as the caller marks it final. Regions without a direct link exchange through
 * regions that relay the encoded shard unchanged (xdc_sync_cfg.route). Every region decodes every contribution,
 * its own included, and sums them in region order, so all regions end with bit-identical results.
 *
 * The work runs on one comm thread per process (or per worker), the xdc_sync_engine: every xdc_sync
 * is a client of one engine, and each of its operations (a round, a codec switch) is a job in the
 * engine's FIFO queue, run to completion one after the other. A process with one gradient sync and a
 * thousand streaming fragments still has one comm thread. Jobs run in the order they were posted, so
 * two ranks that post the same jobs in the same order issue their collectives and WAN messages in the
 * same order, whatever the timing; a job does not start before the one ahead of it finished, so post a
 * round only when everything it waits for (the caller marking buckets ready, the peers' matching
 * rounds) does not wait for a job posted after it.
 *
 * Device memory: the buffer, the padding of a bucket, the shards and the decode targets are device memory
 * of the sync's backend (xdc_sync_cfg.backend); only encoded bytes are host memory (pinned: the WAN reads
 * and writes them). The comm thread queues a sync's device work on a stream of the sync's own. Events order
 * the two sides: xdc_sync_mark_ready records, per bucket that became final, an event on the producer's
 * stream (xdc_sync_cfg.compute) which the comm stream waits for before it reads the bucket; a round ends
 * with an event on the comm stream that xdc_sync_end makes the compute stream wait for, so work queued
 * there afterwards (the optimizer) reads the averaged buffer. Collectives get device pointers; the comm
 * stream is synchronized before each one. */
#ifndef XDC_SYNC_H
#define XDC_SYNC_H

#include "common/xdc_err.h"
#include "compression/xdc_codec.h"
#include "intra/xdc_intra.h"
#include "kernels/xdc_device.h"
#include "kernels/xdc_kernels.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

#define XDC_SYNC_MAX_REGIONS 256 /* xdc_sync_cfg.n_regions at most */

/* The phases of one bucket, for a timeline (xdc_sync_cfg.trace). */
typedef enum {
    XDC_SYNC_PHASE_REDUCE_SCATTER = 0, /* intra reduce-scatter over the replicas */
    XDC_SYNC_PHASE_ENCODE_SEND,        /* codec + error feedback, posting the sends */
    XDC_SYNC_PHASE_WAIT_DECODE,        /* waiting for every region's shard, decoding and summing them */
    XDC_SYNC_PHASE_ALL_GATHER,         /* intra all-gather over the replicas */
} xdc_sync_phase;

/* Called on the comm thread when a phase of a bucket ends: start and duration on xdc_now_ns()'s clock,
 * bytes = encoded bytes sent (ENCODE_SEND) or received (WAIT_DECODE), else 0. Must not block. */
typedef void (*xdc_sync_trace_fn)(void *ctx, const char *sync_name, xdc_sync_phase phase, uint64_t start_ns,
                                  uint64_t dur_ns, size_t bytes);

typedef struct xdc_sync_cfg {
    size_t n_elems;       /* buffer length, fp32 */
    size_t bucket_elems;  /* elements per bucket (rounded up to a multiple of the lanes) */
    xdc_intra_comm *dp;   /* data-parallel group of this stage in this region; NULL when alone */
    xdc_wan_peer **peers; /* (n_regions) the same rank in each linked region; NULL at my_region and unlinked ones */
    int n_regions, my_region;
    /* WAN lanes: the fewest replicas any region has (0: this region's, dp's size, for regions of equal replica
     * counts). Every region splits each bucket into `lanes` shards alike, and dp ranks 0..lanes-1 each exchange
     * one with the same rank of the other regions (peers: NULL on the other ranks). A region with as many
     * replicas as lanes reduce-scatters and all-gathers as before; one with more all-reduces the bucket over its
     * replicas, its lanes exchange their shards of the region's mean, and each lane broadcasts its result
     * (docs/runtime.md, "Regions of different sizes"). Every region must give the same lanes and bucket_elems. */
    int lanes;
    /* (n_regions * n_regions) the routes over the links that exist (xdc_topology_routes): [src * n_regions + dst]
     * is the region dst receives src's shard from, src itself over a direct link, else a region that relays it
     * (copied: the first routes, as xdc_sync_set_routes would set them); NULL: a full mesh, every shard straight
     * from its region. */
    const int *route;
    xdc_codec_cfg codec;     /* WAN codec (n_elems is filled per bucket shard) */
    const char *name;        /* for logs and traces: "gradients", "pseudo-gradients" (kept, not copied) */
    xdc_sync_trace_fn trace; /* optional timeline hook (NULL: none) */
    void *trace_ctx;
    /* The backend whose device memory the buffer lives in (NULL: the CPU backend); the WAN codec runs on
     * it too. */
    const xdc_kern_backend *backend;
    /* The stream whose queued work writes the buffer before xdc_sync_mark_ready and reads it after
     * xdc_sync_end (the stage's compute stream); NULL: the calling thread's current stream at each call. */
    xdc_stream *compute;
} xdc_sync_cfg;

typedef struct xdc_sync_stats {
    uint64_t wan_tx_bytes;    /* encoded bytes sent to all peers, relayed ones included */
    uint64_t wan_relay_bytes; /* of those, other regions' shards this region forwarded (xdc_sync_cfg.route) */
    uint64_t wan_raw_bytes;   /* the fp32 bytes they stand for */
    double wan_seconds;       /* comm-thread time spent in WAN exchanges (encode, transfer, decode) */
    double intra_seconds;     /* comm-thread time in reduce-scatter and all-gather */
} xdc_sync_stats;

typedef struct xdc_sync_engine xdc_sync_engine;
typedef struct xdc_sync xdc_sync;

/* Start the comm thread and its empty job queue. */
xdc_err_t xdc_sync_engine_create(xdc_sync_engine **out, xdc_diag *diag);
/* Stop and join the thread. Every xdc_sync of the engine must have been destroyed first (the engine
 * refuses to run a job of a freed sync, but cannot know of one). NULL: no-op. */
void xdc_sync_engine_destroy(xdc_sync_engine *e);
/* How many syncs are attached to the engine now. */
int xdc_sync_engine_clients(xdc_sync_engine *e);

/* Allocates every buffer and codec context once and attaches the sync to `engine`. */
xdc_err_t xdc_sync_create(xdc_sync_engine *engine, const xdc_sync_cfg *cfg, xdc_sync **out, xdc_diag *diag);
/* Stop the sync: a job of it still queued is dropped, a running one gives up at its next wait, and a
 * caller waiting in xdc_sync_end gets XDC_ERR_CLOSED. Returns once the comm thread no longer touches
 * the sync. WAN requests and intra collectives it posted may still be in flight and write into its
 * buffers: close the WAN peers and the intra communicators before xdc_sync_destroy frees them. NULL:
 * no-op. */
void xdc_sync_stop(xdc_sync *s);
/* Stop (if not yet), complete or release every WAN request the sync still holds (a send waits for its
 * acknowledgement, or for the WAN engine's liveness deadline when the peer went silent; requests of
 * closed peers return at once), detach from the engine and free. NULL: no-op. */
void xdc_sync_destroy(xdc_sync *s);

/* Post a round on `buf` (n_elems fp32 device memory, not touched by the caller until xdc_sync_end
 * returns). Nothing moves until elements are marked final and the jobs posted before it on the engine are
 * done. */
xdc_err_t xdc_sync_begin(xdc_sync *s, float *buf);
/* Elements [from, n_elems) are final once the work queued so far on the compute stream ran: every bucket
 * entirely inside gets an event recorded there, and goes as soon as that event completed. */
void xdc_sync_mark_ready(xdc_sync *s, size_t from);
/* Mark everything final and wait until every bucket holds the average over replicas and regions. There
 * is no total deadline (another region may be slower); a peer silent past the WAN engine's liveness
 * deadline or a replica past the intra op timeout fails the round, with the peer named in diag, as does
 * a corrupt chunk. On success the compute stream waits for the round's completion event (the host
 * does not): work queued there from now on sees the result. */
xdc_err_t xdc_sync_end(xdc_sync *s, xdc_diag *diag);
/* xdc_sync_end with a deadline: timeout_ms < 0 waits as long as xdc_sync_end; otherwise, when the round has not
 * completed within timeout_ms, XDC_ERR_AGAIN and the round goes on (wait again, or end it; meanwhile the
 * caller may name regions gone with xdc_sync_lose); 0 only looks. */
xdc_err_t xdc_sync_wait(xdc_sync *s, int64_t timeout_ms, xdc_diag *diag);
/* Switch the WAN codec between rounds (a re-plan; a job on the engine, waited for): every bucket gets
 * a new context of the new kind that keeps its error-feedback residual. Every region must switch at
 * the same step. */
xdc_err_t xdc_sync_set_codec(xdc_sync *s, const xdc_codec_cfg *codec, xdc_diag *diag);
/* The routes of the rounds from now on (route: as xdc_sync_cfg.route, copied; NULL: a full mesh), e.g. around a link
 * that is down or slow (docs/runtime.md, "Chaos"): checked as at creation (every route ends at another region; a
 * round over a peer not dialled, or with a region out of the rounds while a route relays, is refused at
 * xdc_sync_begin). Every region must give the same routes before the same round: a forwarding region's message
 * order on a link is the one its neighbour's receives are posted in. The sends of earlier rounds still in flight
 * complete first (a job on the engine, waited for; routes equal to those in force: nothing is posted). Between rounds
 * only (XDC_ERR_INVALID during one). */
xdc_err_t xdc_sync_set_routes(xdc_sync *s, const int *route, xdc_diag *diag);
/* Error-feedback residuals, for checkpoints: a resumed run must encode exactly as an uninterrupted one.
 * How many fp32 elements the sync keeps (every bucket's shard whose codec keeps a residual; 0 for an exact
 * codec or without other regions), and copies of them to and from host memory (n == that count, bucket
 * order), each a job on the engine between rounds, waited for. XDC_ERR_INVALID for a wrong n or during a
 * round. */
size_t xdc_sync_residual_elems(const xdc_sync *s);
xdc_err_t xdc_sync_residual_get(xdc_sync *s, float *host, size_t n, xdc_diag *diag);
xdc_err_t xdc_sync_residual_set(xdc_sync *s, const float *host, size_t n, xdc_diag *diag);
/* Move the residuals into `dst` (n_elems fp32 device memory, written by work already complete): dst -= every
 * bucket's residual, in its slice, and the residual becomes 0. DiLoCo's keep_unsent: the part of a region's
 * pseudo-gradient the codec did not send stays in that region's parameters instead of the codec. A job on the
 * engine between rounds, waited for; nothing to move for an exact codec or without other regions.
 * XDC_ERR_INVALID during a round or with replicas (a replica keeps only its shard's residual). */
xdc_err_t xdc_sync_residual_take(xdc_sync *s, float *dst, xdc_diag *diag);
/* Each region's weight in the rounds from now on (weight: (n_regions), each in [0, XDC_SYNC_MAX_WEIGHT]; 1 for
 * all at creation): the result is Σ w_r·x_r / Σ w_r over the regions of weight above 0, the members, summed in
 * region order, so every member holds the same bytes provided every member was given the same weights. A
 * weight of 0 means the region is not a member: sends and receives go to members only, and a send still
 * pending to a region that left is cancelled (the engine delivers it whole or not at all). Equal weights give
 * the plain mean bit for bit (weight 1: the contribution is decoded straight into the sum; any other is
 * decoded, multiplied by its weight and added). The weight applies after decoding: each region encodes its
 * own unweighted contribution, so its error-feedback residual (and DiLoCo's keep_unsent, which moves that
 * residual into its parameters) is what it would be with equal weights; what the weights change is only how
 * much of each region's sent contribution the mean holds. DiLoCo's "nobody waits" rounds weigh each region's
 * pseudo-gradient by the tokens it processed (docs/runtime.md); an elastic quorum round gives 1 or 0; regions of
 * different replica counts weigh each region by its replicas (its microbatches per step), so the mean is the one
 * over every replica of every region.
 * Between rounds only (XDC_ERR_INVALID during one); this region must be a member. */
#define XDC_SYNC_MAX_WEIGHT 1e30f
xdc_err_t xdc_sync_set_weights(xdc_sync *s, const float *weight, xdc_diag *diag);
/* xdc_sync_set_weights with the members named apart from the weights: member[r] (n_regions) says who sends and
 * receives, weight[r] (each in [0, XDC_SYNC_MAX_WEIGHT]) its weight, where 0 for a member means it is left out of
 * the sum: it sends its
 * contribution and receives every member's, and ends the round on the same bytes as the others, which it did
 * not change. A region that rejoins an elastic run while its state is still arriving (docs/runtime.md,
 * "Rejoining"): it takes each round's mean without holding the round. A transfer with a member of weight 0 that
 * fails (its process failed and closed its connections) does not fail the round: it goes on without that member,
 * as without one that left (xdc_sync_received leaves it out). When no member weighs above 0 the round's
 * result is 0. */
xdc_err_t xdc_sync_set_members(xdc_sync *s, const uint8_t *member, const float *weight, xdc_diag *diag);
/* The same weighting one level down, inside the region: each replica's weight in the region's contribution from
 * now on (weight: (dp size), in the data-parallel group's rank order, each in (0, XDC_SYNC_MAX_WEIGHT]; equal at
 * creation). The region's contribution becomes Σ w_i·x_i / Σ w_i: each replica scales its buffer by its weight
 * before the intra reduce-scatter, which sums, and the reduced shard is multiplied by 1 / Σ w_i (the sum in
 * replica order, fp32) before the WAN exchange; the all-gather gives every replica the same bytes provided every
 * replica was given the same weights. Equal weights keep the plain mean's reduce-scatter bit for bit. Unequal
 * replicas (docs/runtime.md): replica i ran w_i microbatches and averaged its gradients over them, so the region's
 * mean is the mean over all its microbatches; across regions, give each region xdc_sync_set_weights its Σ w_i.
 * Between rounds only (XDC_ERR_INVALID during one). */
xdc_err_t xdc_sync_set_replica_weights(xdc_sync *s, const float *weight, xdc_diag *diag);
/* This region's share of the rounds' mean from now on: its weight over the sum of the members' weights, in region
 * order, fp32 (1 without other regions or weights above 0). Any time from the thread that sets the weights: an
 * estimate of the mean from this region's contribution alone (DiLoCo's eager rounds, orch_outer.h). */
float xdc_sync_share(xdc_sync *s);
/* A member region left during the round (the store's host dropped it; docs/runtime.md, "Leaving during a
 * round"): the round stops waiting for its shards and acknowledgements (within 200 ms of a wait), cancels what
 * it still had for it, and goes on without its contribution from the bucket where a shard of it was missing.
 * Any thread, any time; it holds until xdc_sync_set_weights names the region a member again, which drops the sends
 * of earlier rounds to it still held (never waited for: a sync waits for its sends at its next round), failed
 * or pending on the connection of its process that left (logged). Between rounds too: a region that left while
 * this sync had no round, whose return this sync's next round sees (orch_elastic_quorum). Regions that
 * left mid-round can leave members with sums over different sets (one got the region's shard, another not):
 * xdc_sync_received says which set this round used in every bucket, and xdc_sync_resum makes every member's
 * result the sum over one agreed set. A region lost whose shard this region relays (xdc_sync_cfg.route) and had not
 * received is forwarded as an empty message, which the next region takes as its source missed: the receive it posted
 * for that shard consumes one message on the link either way, never the relay's next one. */
void xdc_sync_lose(xdc_sync *s, int region);
/* After the round (xdc_sync_end returned): set[n_regions] = 1 for each region whose contribution every bucket
 * of it summed (the members, less those whose shard of some bucket never came because they left). */
void xdc_sync_received(xdc_sync *s, uint8_t *set);
/* Sum every bucket of the last round again over `set` (a subset of what xdc_sync_received gave; this region
 * in it), from the encoded shards the round kept (no resend), and gather it with replicas as the round did:
 * every replica must make the same call. As xdc_sync_end, the compute stream then waits for the result.
 * XDC_ERR_INVALID during a round or for a set the round cannot sum. */
xdc_err_t xdc_sync_resum(xdc_sync *s, const uint8_t *set, xdc_diag *diag);
/* Cumulative statistics. */
void xdc_sync_get_stats(xdc_sync *s, xdc_sync_stats *out);

#endif /* XDC_SYNC_H */
