/* sync_engine.c — the comm thread and its job queue (xdc_sync_engine), and the rounds it runs for its
 * clients (xdc_sync; see xdc_sync.h). A round is a two-stage software pipeline per bucket:
 *   A: intra reduce-scatter, encode the shard, send it to every other region;
 *   B: wait for the other regions' shards, decode and sum every region's contribution, intra all-gather.
 * A of bucket k+1 runs while bucket k is on the wire, so the encoder and the link work at once.
 *
 * The order of the two stages (run_round). With in-region replicas it is fixed, since their collectives
 * must come in the same order on every replica whatever each one's timing: A(n-1), A(n-2), B(n-1),
 * A(n-3), B(n-2), ..., A(0), B(1), B(0) (buckets go from the end of the buffer). Without replicas a send
 * is never held behind a wait for another region: A of the next bucket runs as soon as it is ready;
 * while it is not, B of the oldest bucket in flight runs only once every other region's shard of it has
 * come in (polled, SYNC_POLL_MS); B waits for shards only when every bucket has been sent. A step then
 * exposes about one one-way delay plus the last buckets' transfer after its last backward, not one
 * one-way delay per bucket the backward hands over late.
 *
 * Relays (xdc_sync_cfg.route). A region without a direct link to another gets that region's encoded shard
 * from a region that relays it: the relay forwards the bytes it received, unchanged, in its B of the bucket,
 * as each comes in, to the linked regions that get that source's shard through it. B waits for the sources
 * in order of hops (then index), so a shard h hops away only waits for forwards of shards fewer hops away:
 * no cycle. A region that forwards runs the fixed order above (as with replicas), so the messages it puts on
 * a link come in one order, A(n-1) own, A(n-2) own, B(n-1) forwards, ..., and its neighbour posts its
 * receives in that same order (post_receives): receives of a class match messages in the order they were
 * sent. A forward is sent from a copy of the received bytes (bucket.fwd), since the next round posts its
 * receive into the received buffer before this forward is known to be acknowledged. A source that left during
 * the round (xdc_sync_lose) and whose shard never came is forwarded as an empty message: the next region's
 * receive of that shard (given up or not, a receive consumes one message) takes it, not the relay's next
 * message on the link, and an empty shard from a relay says its source was missed. The routes may change between
 * rounds (xdc_sync_set_routes, every region alike; the first are cfg.route's): a job that lets the sends in flight
 * complete, then swaps the plan (struct route_plan) and each bucket's send requests.
 *
 * Every WAN receive of a round is posted when the round starts, and nothing waits for a send to
 * complete before posting a receive: a WAN stream whose next frame has no posted receive stops
 * reading, and the acknowledgements of our own sends queue behind it (docs/wan.md). A send's buffer is
 * only reused after that send completed, checked when the next round encodes into it.
 *
 * Device side (xdc_sync.h): the buffer, pad and shards are device memory; each job runs its device work on
 * the sync's comm stream (current on the comm thread while the job runs). A bucket's reads wait for its
 * ready event (recorded on the compute stream by xdc_sync_mark_ready); the comm stream is synchronized
 * before the host side (the intra collectives, the WAN) touches anything; the round's completion event is
 * what the compute stream waits for in xdc_sync_end.
 *
 * Devices: a sync belongs to the device its creating thread was bound to (get_device at xdc_sync_create);
 * the comm thread binds that device (set_device) before each job, before any device call, so its stream
 * work, its kernels and its allocations land on the GPU of the worker (LOCAL_RANK), not on GPU 0. A ready
 * event whose record failed fails the round before the comm stream touches the bucket: waiting on an event
 * that was never recorded (or still holds last round's capture) would read gradients before backward wrote
 * them. */
#include "sync/xdc_sync.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "kernels/xdc_model_ops.h"
#include "kernels/xdc_quant.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct {
    size_t lo, len;     /* slice of the buffer, fp32 elements */
    size_t plen, shard; /* padded length (multiple of the lanes) and a lane's shard length, elements */
    xdc_codec *codec;   /* EF residual of this bucket's shard lives here */
    uint8_t *enc;       /* pinned host (bound) bytes: this rank's encoded shard */
    size_t enc_len, bound;
    uint8_t **rx;           /* (n_regions) pinned host (bound) bytes received from each region; NULL at mine */
    uint8_t **fwd;          /* (n_regions) pinned host (bound) copy of rx[src] being forwarded; NULL if not relayed */
    size_t *rx_len;         /* (n_regions) bytes this round's message from each region holds */
    xdc_wan_request **sreq; /* (n_sends) one per xdc_sync.snd entry */
    xdc_wan_request **rreq; /* (n_regions) the receive of each source's shard */
    float *shard_buf;       /* device (shard) fp32 */
    xdc_event *ready;       /* recorded on the compute stream when the bucket became final */
} bucket;

/* The routes as this region runs them (xdc_sync_cfg.route, xdc_sync_set_routes): route (n_regions * n_regions) a
 * copy of the table; via (n_regions) the region each source's shard comes from (the source itself when linked; -1
 * at mine); order (n_regions - 1) the other regions by hops from them, then index, the order B takes their shards
 * in; snd (n_sends) the messages of a bucket, {source, dest}: this region's shard to each linked region, then each
 * shard it forwards, in `order`; relays (n_regions) 1 for each source whose shard this region forwards. */
typedef struct route_plan {
    int *route, *via, *order;
    struct {
        int src, dst;
    } * snd;
    int n_sends;
    uint8_t *relays;
} route_plan;

typedef enum { JOB_ROUND, JOB_SET_CODEC, JOB_RESIDUALS, JOB_RESUM, JOB_TAKE, JOB_ROUTES } job_kind;

/* One sync has at most one job at a time (a round between begin and its completion, a codec switch or
 * a residual copy), so the job lives in the sync and posting allocates nothing. */
typedef struct job {
    job_kind kind;
    const xdc_codec_cfg *codec; /* JOB_SET_CODEC */
    float *host;                /* JOB_RESIDUALS: (xdc_sync_residual_elems) fp32 host, the checkpoint's copy */
    int save;                   /* JOB_RESIDUALS: 1 device -> host, 0 host -> device */
    float *dst;                 /* JOB_TAKE: (n_elems) fp32 device, the buffer the residuals are moved into */
    const uint8_t *set;         /* JOB_RESUM: (n_regions) the regions to sum over */
    struct route_plan *plan;    /* JOB_ROUTES: the routes to install; gets the ones they replace */
    struct job *next;           /* queue link */
} job;

struct xdc_sync_engine {
    pthread_t thread;
    pthread_mutex_t mu;     /* guards the queue and every client's round state (ready_from, done, ...) */
    pthread_cond_t cv;      /* to the thread: a job was posted, readiness moved, a stop */
    pthread_cond_t done_cv; /* to the callers: a job completed */
    job *head, *tail;       /* FIFO of posted jobs */
    xdc_sync *running;      /* the sync whose job the thread runs now */
    int stop, n_clients;
};

struct xdc_sync {
    xdc_sync_cfg cfg;
    xdc_sync_engine *eng;
    int dp_size, dp_rank;
    /* WAN lanes (xdc_sync_cfg.lanes): the replicas that exchange across regions, ranks 0..lanes-1, each one lane
     * shard of every bucket; `wide` when the region has more replicas than lanes (its replicas all-reduce and the
     * lanes broadcast their results), and `wan` when this rank exchanges across regions at all. */
    int lanes, wide, wan;
    bucket *b; /* (n_buckets) */
    int n_buckets;
    const xdc_device_ops *dev; /* the backend's device table */
    int device;                /* the creating thread's bound device: the comm thread binds it per job */
    xdc_stream *stream;        /* the comm stream: this sync's device work on the comm thread */
    xdc_event *done_ev;        /* recorded on the comm stream when a round's last bucket is gathered */
    float *pad; /* device (max plen) fp32 scratch for buckets whose length is not a multiple of the lanes */
    /* device (bucket 0's shard: the longest) fp32 scratch, a contribution of weight other than 1 decoded to be
     * weighed; allocated by the comm thread at the first weighted sum (NULL until then) */
    float *dec;
    job job;
    int stop; /* set under eng->mu, read by the thread's waits without it */
    /* current round, under eng->mu */
    float *buf;
    int queued, active, done;
    size_t ready_from;
    xdc_err_t ready_err; /* a ready event's record failed this round (xdc_sync_mark_ready): the round fails */
    xdc_diag ready_diag;
    xdc_err_t err;
    xdc_diag diag;
    xdc_sync_stats st;  /* under eng->mu */
    xdc_sync_stats rst; /* this round's, comm thread only; merged into st when the round ends */
    /* Comm thread only: seconds its waits for each region's shards and acknowledgements took, this
     * round's and the last SYNC_HISTORY rounds' (a ring), for a long wait's log line. */
    double *round_wait; /* (n_regions) */
    double *waited;     /* (SYNC_HISTORY, n_regions) */
    int rounds;         /* rounds completed */
    /* (n_regions) each region's weight in the mean (xdc_sync_set_weights; 1 for all at first), 1 where it is
     * above 0 (the region takes part in the rounds), and how many do: set between rounds, read by the comm
     * thread during one. */
    float *weight;
    uint8_t *member;
    int n_members;
    /* With replicas: this replica's weight in its region's mean and Σ of the replicas' weights in replica order
     * (xdc_sync_set_replica_weights), 0 while they are all equal (the plain mean of the reduce-scatter) */
    float rep_weight, rep_total;
    /* (n_regions) 1 where xdc_sync_lose said the region left (any thread writes, the comm thread reads;
     * atomics), and 1 where this round gave up on a shard of the region because it had left (comm thread). */
    uint8_t *lost, *missed;
    route_plan rt; /* the routes in force (xdc_sync_cfg.route at creation, then xdc_sync_set_routes) */
    int fixed;     /* the fixed stage order: replicas, or this region forwards */
};

#define SYNC_HISTORY 4    /* rounds of wait times kept per region */
#define SYNC_NAG_MS  5000 /* a wait for a region logs who and since when this often */
/* While the next bucket is not ready and one is in flight, the comm thread looks whether the other regions'
 * shards of the oldest have come in this often (the WAN engine has no completion callback). A late look
 * only delays that bucket's decode, never a send: a bucket becoming ready wakes the thread at once. */
#define SYNC_POLL_MS 1

static double secs_since(uint64_t t0) { return (double)(xdc_now_ns() - t0) / 1e9; }

/* Whether xdc_sync_lose named region r gone. */
static int gone(const xdc_sync *s, int r) { return __atomic_load_n(&s->lost[r], __ATOMIC_ACQUIRE); }

/* A transfer with region r failed and the round goes on without it: r left (gone), or r is a member the sum
 * leaves out (weight 0: a region rejoining an elastic run, whose process may fail and close its connections
 * while the round is under way; its contribution changes no one's sum). */
static int can_lose(const xdc_sync *s, int r) { return gone(s, r) || s->weight[r] == 0.0f; }

/* The sync or its whole engine is being stopped: a wait of the comm thread gives up. */
static int stopping(xdc_sync *s)
{
    return __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->eng->stop, __ATOMIC_ACQUIRE);
}

static void trace(xdc_sync *s, xdc_sync_phase phase, uint64_t t0, size_t bytes)
{
    if (s->cfg.trace) s->cfg.trace(s->cfg.trace_ctx, s->cfg.name, phase, t0, xdc_now_ns() - t0, bytes);
}

/* Wait for a collective that `rc` says was started (req set by the start call, read only after it). The
 * communicator fails it when a rank makes no progress for its op timeout; a stop request ends the wait. */
static xdc_err_t intra_wait(xdc_sync *s, xdc_err_t rc, xdc_intra_req *req, xdc_diag *diag)
{
    if (rc != XDC_OK) return rc;
    for (;;) {
        rc = xdc_intra_wait(req, 200, diag);
        if (rc != XDC_ERR_TIMEOUT) return rc;
        if (stopping(s)) {
            xdc_diag_set(diag, "sync stopped");
            return XDC_ERR_CLOSED;
        }
    }
}

/* Where bucket k's padded (lanes, shard) data lives for the collectives. */
static float *padded(xdc_sync *s, bucket *k) { return k->plen == k->len ? s->buf + k->lo : s->pad; }

/* A wait for region r's shard (or for a send to linked region r) has lasted `secs`: say who, since when, and
 * how long its last rounds kept us. */
static void nag(const xdc_sync *s, const bucket *k, int r, double secs)
{
    const xdc_wan_identity *id = xdc_wan_peer_identity(s->cfg.peers[s->rt.via[r]]);
    char hist[160] = "";
    int n = s->rounds < SYNC_HISTORY ? s->rounds : SYNC_HISTORY;
    size_t len = 0;
    for (int i = 1; i <= n && len < sizeof hist; i++) /* newest first */
        len += (size_t)snprintf(hist + len, sizeof hist - len, "%s%.3f", i > 1 ? ", " : "",
                                s->waited[((s->rounds - i) % SYNC_HISTORY) * s->cfg.n_regions + r]);
    XDC_WARN(XDC_SUB_ORCH, "%s bucket at %zu, round %d: waiting for %s%s/%d for %.1f s; %s%s%s", s->cfg.name, k->lo,
             s->rounds + 1, s->rt.via[r] == r ? "" : "a relay of ", id->region, id->rank, secs,
             n ? "its last rounds kept us waiting " : "no earlier round", hist, n ? " s" : "");
}

/* Wait for a WAN request to or from region r without a total deadline: the engine fails it when the
 * peer has been silent for its liveness deadline, so a slow but live peer (another region still
 * computing, a DiLoCo region H steps behind) is waited for, and named every SYNC_NAG_MS. Gives up with
 * XDC_ERR_CLOSED when the sync is being stopped, and with XDC_ERR_PEER_LOST (the request cancelled) once
 * region r is gone (xdc_sync_lose) and the request has not completed. */
static xdc_err_t wan_wait(xdc_sync *s, const bucket *k, int r, xdc_wan_request **req, size_t *len, uint8_t *codec,
                          xdc_diag *diag)
{
    uint64_t t0 = xdc_now_ns(), next_nag = t0 + SYNC_NAG_MS * XDC_NS_PER_MS;
    for (;;) {
        int left = gone(s, r); /* looked at before the wait: what came in by then still counts */
        xdc_err_t rc = xdc_wan_wait(*req, left ? 0 : 200, len, codec, diag);
        if (rc != XDC_ERR_AGAIN || left) {
            if (rc == XDC_ERR_AGAIN) {
                (void)xdc_wan_request_cancel(*req);
                xdc_diag_set(diag, "region %d left during the round", r);
                rc = XDC_ERR_PEER_LOST;
            }
            *req = NULL; /* completed, failed (a silent peer: TIMEOUT) or cancelled: released */
            s->round_wait[r] += secs_since(t0);
            return rc;
        }
        if (stopping(s)) {
            xdc_diag_set(diag, "sync stopped");
            return XDC_ERR_CLOSED; /* the request stays with the engine, which fails it when destroyed */
        }
        if (xdc_now_ns() >= next_nag) {
            nag(s, k, r, secs_since(t0));
            next_nag += SYNC_NAG_MS * XDC_NS_PER_MS;
        }
    }
}

/* Complete the sends of bucket k still in flight (from this round or the last). */
static xdc_err_t wait_sends(xdc_sync *s, bucket *k, xdc_diag *diag)
{
    for (int j = 0; j < s->rt.n_sends; j++) {
        int r = s->rt.snd[j].dst;
        if (!k->sreq[j]) continue;
        if (!s->member[r]) { /* left the rounds (maybe gone): its copy is sent or dropped by the engine */
            (void)xdc_wan_request_cancel(k->sreq[j]);
            k->sreq[j] = NULL;
            continue;
        }
        xdc_err_t rc = wan_wait(s, k, r, &k->sreq[j], NULL, NULL, diag);
        if (rc != XDC_OK && !can_lose(s, r)) {
            xdc_diag_prefix(diag, "%s bucket at %zu: send to region %d", s->cfg.name, k->lo, r);
            return rc;
        }
    }
    return XDC_OK;
}

/* Post the receive of region r's shard of bucket i, on the link it comes over. */
static xdc_err_t post_receive(xdc_sync *s, int i, int r)
{
    if (!s->member[r]) return XDC_OK;
    return xdc_wan_irecv(s->cfg.peers[s->rt.via[r]], XDC_WAN_BULK, s->b[i].rx[r], s->b[i].bound, &s->b[i].rreq[r]);
}

/* Post the receive of every bucket from every other region, in the order a linked region sends on the link: its
 * own shards in the order A goes, each bucket's forwarded ones (in `order`) where the fixed order has B of that
 * bucket, A(n-1), A(n-2), B(n-1), A(n-3), ..., B(0). A region that forwards nothing sends its own shards only,
 * in bucket order, which this order keeps whichever order it runs. */
static xdc_err_t post_receives(xdc_sync *s)
{
    if (!s->wan) return XDC_OK;
    for (int i = s->n_buckets - 1; i >= -1; i--) { /* A(i) and B(i + 1): A(n-1), A(n-2), B(n-1), ..., B(0) */
        for (int j = 0; j < s->cfg.n_regions - 1 && i >= 0; j++)
            if (s->rt.via[s->rt.order[j]] == s->rt.order[j]) XDC_CHECK(post_receive(s, i, s->rt.order[j]));
        for (int j = 0; j < s->cfg.n_regions - 1 && i + 1 < s->n_buckets; j++)
            if (s->rt.via[s->rt.order[j]] != s->rt.order[j]) XDC_CHECK(post_receive(s, i + 1, s->rt.order[j]));
    }
    return XDC_OK;
}

/* On the comm stream, by the backend's quant ops (which run on the calling thread's current stream): x (n fp32,
 * device) *= a, then, with y, y += x. */
static xdc_err_t on_comm_stream(xdc_sync *s, float *x, float *y, size_t n, float a)
{
    xdc_stream *prev = NULL;
    XDC_CHECK(s->dev->get_stream(&prev));
    XDC_CHECK(s->dev->set_stream(s->stream));
    xdc_err_t rc = s->cfg.backend->quant->scale(x, n, a);
    if (rc == XDC_OK && y) rc = s->cfg.backend->quant->accumulate(x, n, y);
    xdc_err_t rc2 = s->dev->set_stream(prev);
    return rc != XDC_OK ? rc : rc2;
}

/* x += w·d (n fp32, device; d is scaled in place): a weighted contribution into the sum. */
static xdc_err_t weigh_in(xdc_sync *s, float *d, size_t n, float w, float *x) { return on_comm_stream(s, d, x, n, w); }

/* Send region src's encoded shard of bucket k (`len` bytes at `bytes`: ours, or a copy of what came in; 0: a relay's
 * word that it never came) on every link the routes send it over from here, to the members there; *sent += the bytes
 * sent. */
static xdc_err_t send_shard(xdc_sync *s, bucket *k, int src, const uint8_t *bytes, size_t len, size_t *sent)
{
    size_t raw = len ? k->shard * sizeof(float) : 0; /* bytes: the fp32 an encoded shard stands for */
    for (int j = 0; j < s->rt.n_sends; j++) {
        int r = s->rt.snd[j].dst;
        if (s->rt.snd[j].src != src || !s->member[r] || gone(s, r)) continue;
        XDC_CHECK(
            xdc_wan_isend(s->cfg.peers[r], XDC_WAN_BULK, bytes, len, (uint8_t)s->cfg.codec.kind, raw, &k->sreq[j]));
        s->rst.wan_tx_bytes += len;
        s->rst.wan_raw_bytes += raw;
        if (src != s->cfg.my_region) s->rst.wan_relay_bytes += len;
        *sent += len;
    }
    return XDC_OK;
}

static xdc_err_t stage_a(xdc_sync *s, bucket *k, xdc_diag *diag)
{
    const xdc_device_ops *dev = s->dev;
    float *x = k->shard_buf;
    XDC_CHECK(dev->stream_wait_event(s->stream, k->ready)); /* the producing kernels ran */
    if (s->dp_size > 1) {
        uint64_t t0 = xdc_now_ns();
        float *src = padded(s, k);
        if (src == s->pad) {
            XDC_CHECK(dev->copy_d2d(s->pad, s->buf + k->lo, k->len * sizeof(float), s->stream));
            XDC_CHECK(dev->memset(s->pad + k->len, 0, (k->plen - k->len) * sizeof(float), s->stream));
        }
        /* Weighted replicas: each scales its contribution (the buffer is overwritten by the gather anyway), the
         * collective sums, and the shard is divided by Σ w; equal weights keep the plain mean's arithmetic. */
        float total = s->rep_total;
        if (total > 0.0f) XDC_CHECK(on_comm_stream(s, src, NULL, k->plen, s->rep_weight));
        XDC_CHECK(dev->stream_sync(s->stream)); /* the collective reads what the device wrote */
        xdc_intra_req *req = NULL;
        xdc_intra_redop op = total > 0.0f ? XDC_INTRA_SUM : XDC_INTRA_AVG;
        /* More replicas than lanes: every replica gets the region's whole mean, and a lane encodes its shard of it
         * (the reduce-scatter's (replicas, shard) split would not be the other regions' (lanes, shard) one). */
        xdc_err_t rc = s->wide ? xdc_intra_all_reduce(s->cfg.dp, src, src, k->plen, XDC_INTRA_F32, op, &req)
                               : xdc_intra_reduce_scatter(s->cfg.dp, src, x, k->shard, XDC_INTRA_F32, op, &req);
        XDC_CHECK(intra_wait(s, rc, req, diag));
        if (s->wide) x = src + (size_t)s->dp_rank * k->shard; /* a lane's shard (read by lanes only) */
        if (total > 0.0f && (!s->wide || s->wan)) XDC_CHECK(on_comm_stream(s, x, NULL, k->shard, 1.0f / total));
        s->rst.intra_seconds += secs_since(t0);
        trace(s, XDC_SYNC_PHASE_REDUCE_SCATTER, t0, 0);
    } else {
        x = s->buf + k->lo;
    }
    if (!s->wan) return XDC_OK;
    uint64_t t0 = xdc_now_ns();
    XDC_CHECK(wait_sends(s, k, diag)); /* last round's sends of this bucket still read k->enc */
    XDC_CHECK(xdc_codec_encode(k->codec, x, k->shard, k->enc, k->bound, &k->enc_len, diag));
    size_t sent = 0;
    XDC_CHECK(send_shard(s, k, s->cfg.my_region, k->enc, k->enc_len, &sent));
    s->rst.wan_seconds += secs_since(t0);
    trace(s, XDC_SYNC_PHASE_ENCODE_SEND, t0, sent);
    return XDC_OK;
}

/* Region r's shard of bucket k came in with `rc` (its receive is released): keep its length, check its
 * codec. */
static xdc_err_t shard_in(xdc_sync *s, bucket *k, int r, xdc_err_t rc, size_t len, uint8_t codec, xdc_diag *diag)
{
    /* it left (or weighs 0): this round goes on without its contribution (a relay says so with an empty
     * message, stage_b) */
    if ((rc != XDC_OK && can_lose(s, r)) || (rc == XDC_OK && len == 0 && s->rt.via[r] != r)) {
        s->missed[r] = 1;
        return XDC_OK;
    }
    if (rc == XDC_OK && codec != (uint8_t)s->cfg.codec.kind) {
        xdc_diag_set(diag, "region %d sent codec %u, this run uses %u", r, codec, (unsigned)s->cfg.codec.kind);
        rc = XDC_ERR_PROTO;
    }
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "%s bucket at %zu: WAN exchange with region %d", s->cfg.name, k->lo, r);
        return rc;
    }
    k->rx_len[r] = len;
    return XDC_OK;
}

/* Without waiting: *all = 1 when every other member region's shard of bucket k has come in (a receive
 * completed is collected here and its request cleared). */
static xdc_err_t shards_in(xdc_sync *s, bucket *k, int *all, xdc_diag *diag)
{
    *all = 1;
    for (int r = 0; r < s->cfg.n_regions; r++) {
        if (r == s->cfg.my_region || !s->member[r] || !k->rreq[r]) continue;
        int done = 0;
        size_t len = 0;
        uint8_t codec = 0;
        xdc_err_t rc = xdc_wan_test(k->rreq[r], &done, &len, &codec, diag);
        if (rc == XDC_OK && !done && gone(s, r)) {
            (void)xdc_wan_request_cancel(k->rreq[r]);
            rc = XDC_ERR_PEER_LOST;
        } else if (rc == XDC_OK && !done) {
            *all = 0;
            continue;
        }
        k->rreq[r] = NULL; /* completed or failed: the engine released it */
        XDC_CHECK(shard_in(s, k, r, rc, len, codec, diag));
    }
    return XDC_OK;
}

/* Where bucket k's shard of the average is summed: the reduce-scattered shard with replicas, else the
 * bucket's slice of the buffer. */
static float *shard_of(xdc_sync *s, bucket *k) { return s->dp_size > 1 ? k->shard_buf : s->buf + k->lo; }

/* x = the weighted mean Σ w_r·d_r / Σ w_r of the decoded contributions d_r of the regions in `set` (their
 * encoded shards: ours in k->enc, the others' as received), summed in region order: the same operations on
 * the same bytes everywhere, so every region that sums over the same set with the same weights holds the same
 * result. A contribution of weight 1 is decoded straight into the sum (the plain mean's arithmetic, exactly
 * as before weights existed); any other is decoded into s->dec, scaled by its weight (one rounded multiply)
 * and added. The weights apply after decoding, so each region's codec and error feedback see its own
 * unweighted contribution whatever its weight this round. */
static xdc_err_t sum_over(xdc_sync *s, bucket *k, const uint8_t *set, float *x, xdc_diag *diag)
{
    float total = 0; /* Σ w_r in region order, fp32: n for n members of weight 1, as the plain mean's 1/n */
    XDC_CHECK(s->dev->memset(x, 0, k->shard * sizeof(float), s->stream));
    for (int r = 0; r < s->cfg.n_regions; r++) {
        if (!set[r] || s->weight[r] == 0.0f) continue; /* weight 0: a member left out of the sum */
        const uint8_t *in = r == s->cfg.my_region ? k->enc : k->rx[r];
        size_t len = r == s->cfg.my_region ? k->enc_len : k->rx_len[r];
        float w = s->weight[r];
        xdc_err_t rc = XDC_OK;
        if (w != 1.0f && !s->dec) /* the first weighted sum: bucket 0's shard is the longest */
            rc = s->dev->mem_alloc((void **)&s->dec, s->b[0].shard * sizeof(float));
        float *into = w == 1.0f ? x : s->dec;
        if (rc == XDC_OK && into != x) rc = s->dev->memset(into, 0, k->shard * sizeof(float), s->stream);
        if (rc == XDC_OK) rc = xdc_codec_decode(k->codec, in, len, into, k->shard, XDC_CODEC_ACCUMULATE, diag);
        if (rc != XDC_OK) {
            xdc_diag_prefix(diag, "%s bucket at %zu from region %d", s->cfg.name, k->lo, r);
            return rc;
        }
        if (into != x) XDC_CHECK(weigh_in(s, into, k->shard, w, x));
        total += w;
    }
    /* none weighed (every member is left out of the sum): the mean of nothing, 0 */
    return on_comm_stream(s, x, NULL, k->shard, total > 0.0f ? 1.0f / total : 0.0f);
}

/* With replicas: all-gather bucket k's averaged shard x back into the buffer; with more replicas than lanes,
 * each lane broadcasts its shard, in lane order (a replica that is no lane has no x). */
static xdc_err_t gather(xdc_sync *s, bucket *k, float *x, xdc_diag *diag)
{
    if (s->dp_size == 1) return XDC_OK;
    uint64_t t0 = xdc_now_ns();
    float *dst = padded(s, k);
    xdc_intra_req *req = NULL;
    if (s->wide && s->dp_rank < s->lanes)
        XDC_CHECK(s->dev->copy_d2d(dst + (size_t)s->dp_rank * k->shard, x, k->shard * sizeof(float), s->stream));
    XDC_CHECK(s->dev->stream_sync(s->stream)); /* the decoded shard is complete */
    for (int j = 0; s->wide && j < s->lanes; j++) {
        xdc_err_t rc = xdc_intra_broadcast(s->cfg.dp, dst + (size_t)j * k->shard, k->shard, XDC_INTRA_F32, j, &req);
        XDC_CHECK(intra_wait(s, rc, req, diag));
    }
    if (!s->wide) {
        xdc_err_t rc = xdc_intra_all_gather(s->cfg.dp, x, dst, k->shard, XDC_INTRA_F32, &req);
        XDC_CHECK(intra_wait(s, rc, req, diag));
    }
    if (dst == s->pad) XDC_CHECK(s->dev->copy_d2d(s->buf + k->lo, s->pad, k->len * sizeof(float), s->stream));
    s->rst.intra_seconds += secs_since(t0);
    trace(s, XDC_SYNC_PHASE_ALL_GATHER, t0, 0);
    return XDC_OK;
}

static xdc_err_t stage_b(xdc_sync *s, bucket *k, xdc_diag *diag)
{
    float *x = shard_of(s, k);
    if (s->wan) {
        uint64_t t0 = xdc_now_ns();
        for (int j = 0; j < s->cfg.n_regions - 1; j++) { /* by hops: a forward waits only for nearer ones */
            int r = s->rt.order[j];
            if (!s->member[r]) continue;
            if (k->rreq[r]) { /* a cleared receive of a member came in already (shards_in) */
                size_t len = 0;
                uint8_t codec = 0;
                xdc_err_t rc = wan_wait(s, k, r, &k->rreq[r], &len, &codec, diag);
                XDC_CHECK(shard_in(s, k, r, rc, len, codec, diag));
            }
            if (s->rt.relays[r]) { /* relayed through here: on, as it came (A(k) waited last round's), or empty */
                size_t sent = 0, len = s->missed[r] ? 0 : k->rx_len[r];
                memcpy(k->fwd[r], k->rx[r], len);
                XDC_CHECK(send_shard(s, k, r, k->fwd[r], len, &sent));
            }
        }
        /* The members, less those given up on (they left during the round): xdc_sync_resum sums again over the
         * set every region agreed on. */
        uint8_t set[XDC_SYNC_MAX_REGIONS];
        for (int r = 0; r < s->cfg.n_regions; r++) set[r] = s->member[r] && !s->missed[r];
        XDC_CHECK(sum_over(s, k, set, x, diag));
        s->rst.wan_seconds += secs_since(t0);
        size_t got = 0;
        for (int r = 0; r < s->cfg.n_regions; r++)
            if (r != s->cfg.my_region && set[r]) got += k->rx_len[r];
        trace(s, XDC_SYNC_PHASE_WAIT_DECODE, t0, got);
    }
    return gather(s, k, x, diag);
}

/* The last round's every bucket summed again over `set` (JOB_RESUM), in the round's bucket order so that
 * replicas issue their all-gathers alike. */
static xdc_err_t resum(xdc_sync *s, const uint8_t *set, xdc_diag *diag)
{
    for (int i = s->n_buckets - 1; i >= 0; i--) {
        if (s->wan) XDC_CHECK(sum_over(s, &s->b[i], set, shard_of(s, &s->b[i]), diag));
        XDC_CHECK(gather(s, &s->b[i], shard_of(s, &s->b[i]), diag));
    }
    return s->dev->event_record(s->done_ev, s->stream);
}

/* Under e->mu. A failed ready event counts as ready: the waits end and the round stops on it. */
static int bucket_ready(xdc_sync *s, const bucket *k) { return s->ready_from <= k->lo || s->ready_err != XDC_OK; }

/* A codec context for bucket k's shard: the run's codec, sized to the shard. */
static xdc_err_t bucket_codec_create(const xdc_sync *s, const xdc_codec_cfg *codec, const bucket *k, xdc_codec **out,
                                     xdc_diag *diag)
{
    xdc_codec_cfg cc = *codec;
    cc.backend = s->cfg.backend;
    cc.n_elems = k->shard;
    if (cc.chunk_elems > k->shard) cc.chunk_elems = k->shard;
    return xdc_codec_create(&cc, out, diag);
}

/* `ms` from now on the monotonic clock, the engine's condition variables' clock. */
static struct timespec after_ms(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    return ts;
}

/* Wait until bucket k is ready, or `poll_ms` passed (< 0: no limit); XDC_ERR_CLOSED when the sync stops. */
static xdc_err_t wait_ready(xdc_sync *s, const bucket *k, int poll_ms, xdc_diag *diag)
{
    xdc_sync_engine *e = s->eng;
    struct timespec ts = after_ms(poll_ms);
    pthread_mutex_lock(&e->mu);
    int timed_out = 0;
    while (!bucket_ready(s, k) && !s->stop && !e->stop && !timed_out) {
        if (poll_ms < 0) pthread_cond_wait(&e->cv, &e->mu);
        else timed_out = pthread_cond_timedwait(&e->cv, &e->mu, &ts) == ETIMEDOUT;
    }
    int stop = s->stop || e->stop;
    pthread_mutex_unlock(&e->mu);
    if (!stop) return XDC_OK;
    xdc_diag_set(diag, "sync %s stopped", s->cfg.name);
    return XDC_ERR_CLOSED;
}

/* One round, in the order the file comment gives. */
static xdc_err_t run_round(xdc_sync *s, xdc_diag *diag)
{
    xdc_sync_engine *e = s->eng;
    memset(s->missed, 0, (size_t)s->cfg.n_regions);
    XDC_CHECK(post_receives(s));
    /* Buckets go from the last to the first: `next` is the next to send (A), `fin` the next to finish (B);
     * fin..next+1 are in flight. */
    int next = s->n_buckets - 1, fin = s->n_buckets - 1;
    while (fin >= 0) {
        int in_flight = fin > next;
        /* Every bucket sent, or (fixed order) the one after `fin` sent: B(fin) now, waiting for the shards. */
        if (in_flight && (next < 0 || (s->fixed && fin > next + 1))) {
            XDC_CHECK(stage_b(s, &s->b[fin--], diag));
            continue;
        }
        pthread_mutex_lock(&e->mu);
        int ready = bucket_ready(s, &s->b[next]);
        xdc_err_t rerr = s->ready_err;
        if (rerr != XDC_OK) *diag = s->ready_diag;
        pthread_mutex_unlock(&e->mu);
        if (rerr != XDC_OK) return rerr; /* before the comm stream reads a bucket nothing ordered */
        if (ready) {
            XDC_CHECK(stage_a(s, &s->b[next--], diag));
            continue;
        }
        /* Bucket `next` is not ready. Without replicas, finish the oldest bucket in flight meanwhile, but only
         * once its shards are in: waiting for them here would hold the next send behind a WAN delay. */
        int poll = in_flight && !s->fixed;
        if (poll) {
            int all = 0;
            XDC_CHECK(shards_in(s, &s->b[fin], &all, diag));
            if (all) {
                XDC_CHECK(stage_b(s, &s->b[fin--], diag));
                continue;
            }
        }
        XDC_CHECK(wait_ready(s, &s->b[next], poll ? SYNC_POLL_MS : -1, diag));
    }
    return s->dev->event_record(s->done_ev, s->stream); /* xdc_sync_end makes the compute stream wait for it */
}

/* A wire buffer that exists (*buf not NULL) replaced by one of `bound` bytes. */
static xdc_err_t grow(xdc_sync *s, uint8_t **buf, size_t bound)
{
    uint8_t *grown = NULL;
    if (!*buf) return XDC_OK;
    XDC_CHECK(s->dev->host_alloc((void **)&grown, bound));
    s->dev->host_free(*buf);
    *buf = grown;
    return XDC_OK;
}

/* The codec switch of xdc_sync_set_codec, on the comm thread. */
static xdc_err_t switch_codec(xdc_sync *s, const xdc_codec_cfg *codec, xdc_diag *diag)
{
    for (int i = 0; i < s->n_buckets; i++) {
        bucket *k = &s->b[i];
        XDC_CHECK(wait_sends(s, k, diag)); /* the old encoding may still be on the wire */
        xdc_codec *nc;
        XDC_CHECK(bucket_codec_create(s, codec, k, &nc, diag));
        /* Carry the residual over; a codec without error feedback (none) has none to take. */
        xdc_err_t rc = xdc_codec_residual(nc) ? xdc_codec_set_residual(nc, xdc_codec_residual(k->codec), k->shard)
                                              : XDC_OK;
        size_t bound = xdc_codec_bound(nc, k->shard);
        /* A rare path: grow the wire buffers when the new codec may need more room. */
        if (rc == XDC_OK && bound > k->bound) { /* nothing is posted on them between rounds: no copy */
            rc = grow(s, &k->enc, bound);
            for (int r = 0; r < s->cfg.n_regions && rc == XDC_OK; r++) {
                rc = grow(s, &k->rx[r], bound);
                if (rc == XDC_OK) rc = grow(s, &k->fwd[r], bound);
            }
        }
        if (rc != XDC_OK) {
            xdc_codec_destroy(nc);
            return rc;
        }
        xdc_codec_destroy(k->codec);
        k->codec = nc;
        if (bound > k->bound) k->bound = bound;
    }
    s->cfg.codec = *codec;
    return XDC_OK;
}

/* The source of region r's shard at region d in the n regions' table `route`, or r itself in a full mesh (NULL). */
static int route_of(const int *route, int n, int r, int d)
{
    return route ? route[(size_t)r * (size_t)n + (size_t)d] : r;
}

static void plan_free(route_plan *p)
{
    xdc_free(p->route);
    xdc_free(p->via);
    xdc_free(p->order);
    xdc_free(p->snd);
    xdc_free(p->relays);
    memset(p, 0, sizeof *p);
}

/* This region's plan of the routes `route` (NULL: a full mesh) into *p, checked: every route ends at another
 * region, over a peer (the table's first hop from here). That peer may come later (a rejoining member dials the
 * members of the round that takes it back after its syncs exist): xdc_sync_begin checks it is there. */
static xdc_err_t plan_routes(const xdc_sync *s, const int *route, route_plan *p, xdc_diag *diag)
{
    const xdc_sync_cfg *c = &s->cfg;
    int n = c->n_regions, me = c->my_region, *hops = xdc_calloc((size_t)n, sizeof *hops);
    memset(p, 0, sizeof *p);
    p->route = xdc_calloc((size_t)n * (size_t)n, sizeof *p->route);
    p->via = xdc_calloc((size_t)n, sizeof *p->via);
    p->order = xdc_calloc((size_t)n, sizeof *p->order);
    p->relays = xdc_calloc((size_t)n, sizeof *p->relays);
    int sends = 0; /* this region's shard to each region that gets it from here, and every forward */
    for (int src = 0; src < n; src++)
        for (int d = 0; d < n; d++) {
            sends += d != src && d != me && route_of(route, n, src, d) == me;
            if (p->route) p->route[(size_t)src * (size_t)n + (size_t)d] = route_of(route, n, src, d);
        }
    p->snd = xdc_calloc((size_t)sends + 1, sizeof *p->snd);
    if (!hops || !p->route || !p->via || !p->order || !p->relays || !p->snd) {
        xdc_free(hops);
        plan_free(p);
        return XDC_ERR_NOMEM;
    }
    xdc_err_t rc = XDC_OK;
    for (int r = 0; r < n && rc == XDC_OK; r++) {
        p->via[r] = r == me ? -1 : route_of(route, n, r, me);
        for (int d = me; d != r && rc == XDC_OK; d = route_of(route, n, r, d)) /* back along the route to r */
            if (++hops[r] > n || route_of(route, n, r, d) < 0 || route_of(route, n, r, d) >= n) rc = XDC_ERR_INVALID;
        if (rc == XDC_OK && r != me && (!c->peers || p->via[r] == me)) rc = XDC_ERR_INVALID;
        if (rc != XDC_OK) xdc_diag_set(diag, "sync %s: no route from region %d to region %d", c->name, r, me);
    }
    int m = 0;
    for (int h = 1; h < n && rc == XDC_OK; h++) /* the other regions by hops, then index */
        for (int r = 0; r < n; r++)
            if (r != me && hops[r] == h) p->order[m++] = r;
    for (int j = -1; j < n - 1 && rc == XDC_OK; j++) { /* this region's shard, then the forwards in `order` */
        int src = j < 0 ? me : p->order[j];
        for (int d = 0; d < n; d++)
            if (d != src && d != me && route_of(route, n, src, d) == me) {
                p->snd[p->n_sends].src = src;
                p->snd[p->n_sends++].dst = d;
                if (src != me) p->relays[src] = 1;
            }
    }
    xdc_free(hops);
    if (rc != XDC_OK) plan_free(p);
    return rc;
}

/* Bucket k's requests and forward copies for the plan p: its send requests (p's n_sends, none in flight) into
 * *sreq, and a wire buffer for each shard p forwards that has none yet (kept once made: a later plan may relay it
 * again). */
static xdc_err_t bucket_routes(xdc_sync *s, bucket *k, const route_plan *p, xdc_wan_request ***sreq)
{
    *sreq = xdc_calloc((size_t)p->n_sends + 1, sizeof **sreq); /* + 1: never a 0-byte allocation */
    if (!*sreq) return XDC_ERR_NOMEM;
    for (int r = 0; p->relays && r < s->cfg.n_regions; r++) /* a shard forwarded to several: one copy */
        if (p->relays[r] && !k->fwd[r]) XDC_CHECK(s->dev->host_alloc((void **)&k->fwd[r], k->bound));
    return XDC_OK;
}

/* Does any region's shard reach some region through a relay in the routes `route`? */
static int route_relays(const int *route, int n)
{
    for (int r = 0; r < n; r++)
        for (int d = 0; d < n; d++)
            if (d != r && route_of(route, n, r, d) != r) return 1;
    return 0;
}

/* Install the plan *p as the routes in force; *p gets the routes it replaces. The buckets' send requests were made
 * for it (bucket_routes). */
static void install_routes(xdc_sync *s, route_plan *p)
{
    route_plan was = s->rt;
    s->rt = *p;
    *p = was;
    s->fixed = s->dp_size > 1; /* replicas: their collectives come in one order; so does a region that forwards */
    for (int r = 0; r < s->cfg.n_regions; r++) s->fixed |= s->rt.relays[r];
}

/* The route change of xdc_sync_set_routes, on the comm thread: the sends still in flight complete on the routes
 * they went (every region takes the new routes between the same two rounds, so no message of the old ones is
 * still to come in), then every bucket's requests follow the plan *p. */
static xdc_err_t switch_routes(xdc_sync *s, route_plan *p, xdc_diag *diag)
{
    xdc_err_t rc = XDC_OK;
    for (int i = 0; i < s->n_buckets; i++) XDC_CHECK(wait_sends(s, &s->b[i], diag));
    xdc_wan_request ***sreq = xdc_calloc((size_t)s->n_buckets, sizeof *sreq);
    if (!sreq) return XDC_ERR_NOMEM;
    for (int i = 0; i < s->n_buckets && rc == XDC_OK; i++) rc = bucket_routes(s, &s->b[i], p, &sreq[i]);
    for (int i = 0; i < s->n_buckets; i++) { /* every bucket on the new routes, or none */
        xdc_free(rc == XDC_OK ? s->b[i].sreq : sreq[i]);
        if (rc == XDC_OK) s->b[i].sreq = sreq[i];
    }
    xdc_free(sreq);
    if (rc == XDC_OK) install_routes(s, p);
    return rc;
}

/* Does bucket k's codec keep a residual that travels with a checkpoint? Not without a WAN exchange (its
 * codec never encodes), nor for an exact codec. */
static int keeps_residual(const xdc_sync *s, const bucket *k) { return s->wan && xdc_codec_residual(k->codec) != NULL; }

/* xdc_sync_residual_take on the comm thread: each bucket's residual (its shard is the whole bucket: no
 * replicas) is subtracted from its slice of dst and zeroed, on the comm stream, synchronized before the job
 * completes so that the caller's next work on dst sees it. */
static xdc_err_t take_residuals(xdc_sync *s, float *dst)
{
    for (int i = 0; i < s->n_buckets; i++) {
        bucket *k = &s->b[i];
        if (!keeps_residual(s, k)) continue;
        s->cfg.backend->model->sub(dst + k->lo, dst + k->lo, xdc_codec_residual(k->codec), k->len);
        XDC_CHECK(xdc_codec_set_residual(k->codec, NULL, k->shard));
    }
    return s->dev->stream_sync(s->stream);
}

/* The residuals of xdc_sync_residual_get/set, on the comm thread: every bucket's, in bucket order, through
 * the sync's comm stream (the one its encodes ran on). Loading goes through a device buffer of the bucket's
 * shard size, made and freed per bucket, since the codec takes its residual from device memory. */
static xdc_err_t copy_residuals(xdc_sync *s, float *host, int save)
{
    size_t off = 0;
    for (int i = 0; i < s->n_buckets; i++) {
        bucket *k = &s->b[i];
        if (!keeps_residual(s, k)) continue;
        size_t bytes = k->shard * sizeof(float);
        if (save) {
            XDC_CHECK(s->dev->copy_d2h(host + off, xdc_codec_residual(k->codec), bytes, s->stream));
        } else {
            float *dev = NULL;
            XDC_CHECK(s->dev->mem_alloc((void **)&dev, bytes)); /* a resume, once: not a data path */
            xdc_err_t rc = s->dev->copy_h2d(dev, host + off, bytes, s->stream);
            if (rc == XDC_OK) rc = s->dev->stream_sync(s->stream);
            if (rc == XDC_OK) rc = xdc_codec_set_residual(k->codec, dev, k->shard);
            s->dev->mem_free(dev);
            XDC_CHECK(rc);
        }
        off += k->shard;
    }
    return s->dev->stream_sync(s->stream);
}

/* Under e->mu: the sync's job is over (run, dropped or refused) with `rc`. */
static void complete(xdc_sync *s, xdc_err_t rc, const xdc_diag *d)
{
    s->err = rc;
    if (d) s->diag = *d;
    else if (rc != XDC_OK) xdc_diag_set(&s->diag, "sync %s stopped", s->cfg.name);
    s->queued = 0;
    s->done = 1;
    pthread_cond_broadcast(&s->eng->done_cv);
}

/* The comm thread: take the oldest job, run it to completion, repeat. */
static void *engine_main(void *arg)
{
    xdc_sync_engine *e = arg;
    pthread_setname_np(pthread_self(), "xdc-sync"); /* for top -H, gdb, /proc/PID/task/TID/comm */
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) break; /* xdc_sync_engine_destroy completes what is still queued */
        job *j = e->head;
        e->head = j->next;
        if (!e->head) e->tail = NULL;
        j->next = NULL;
        xdc_sync *s = (xdc_sync *)((char *)j - offsetof(xdc_sync, job));
        e->running = s;
        pthread_mutex_unlock(&e->mu);
        xdc_diag d = {{0}};
        memset(&s->rst, 0, sizeof s->rst);
        memset(s->round_wait, 0, (size_t)s->cfg.n_regions * sizeof *s->round_wait);
        /* The sync's device first (cudaSetDevice: this thread's kernels, allocations and stream calls then
         * go to the worker's GPU), then its comm stream, where the codec's work queues. */
        xdc_err_t rc = s->dev->set_device(s->device);
        if (rc != XDC_OK) xdc_diag_set(&d, "sync %s: comm thread cannot bind device %d", s->cfg.name, s->device);
        if (rc == XDC_OK) rc = s->dev->set_stream(s->stream);
        if (rc == XDC_OK)
            rc = j->kind == JOB_ROUND       ? run_round(s, &d)
                 : j->kind == JOB_SET_CODEC ? switch_codec(s, j->codec, &d)
                 : j->kind == JOB_RESUM     ? resum(s, j->set, &d)
                 : j->kind == JOB_TAKE      ? take_residuals(s, j->dst)
                 : j->kind == JOB_ROUTES    ? switch_routes(s, j->plan, &d)
                                            : copy_residuals(s, j->host, j->save);
        if (rc == XDC_OK && j->kind == JOB_ROUND) { /* into the history ring */
            memcpy(s->waited + (s->rounds % SYNC_HISTORY) * s->cfg.n_regions, s->round_wait,
                   (size_t)s->cfg.n_regions * sizeof *s->round_wait);
            s->rounds++;
        }
        if (rc != XDC_OK && !d.msg[0]) (void)s->dev->stream_error(s->stream, &d);
        (void)s->dev->set_stream(NULL);
        pthread_mutex_lock(&e->mu);
        s->st.wan_tx_bytes += s->rst.wan_tx_bytes;
        s->st.wan_relay_bytes += s->rst.wan_relay_bytes;
        s->st.wan_raw_bytes += s->rst.wan_raw_bytes;
        s->st.wan_seconds += s->rst.wan_seconds;
        s->st.intra_seconds += s->rst.intra_seconds;
        e->running = NULL;
        complete(s, rc, &d);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

xdc_err_t xdc_sync_engine_create(xdc_sync_engine **out, xdc_diag *diag)
{
    *out = NULL;
    xdc_sync_engine *e = xdc_calloc(1, sizeof *e);
    if (!e) return XDC_ERR_NOMEM;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca; /* the comm thread's timed waits (wait_ready) count on the monotonic clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_cond_init(&e->done_cv, &ca); /* so do the callers' (xdc_sync_wait) */
    pthread_condattr_destroy(&ca);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        xdc_diag_set(diag, "sync engine: cannot start the comm thread");
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        pthread_cond_destroy(&e->done_cv);
        xdc_free(e);
        return XDC_ERR_NOMEM;
    }
    *out = e;
    return XDC_OK;
}

void xdc_sync_engine_destroy(xdc_sync_engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    if (e->n_clients)
        XDC_ERROR(XDC_SUB_ORCH, "sync engine destroyed with %d syncs still attached (destroy them first)",
                  e->n_clients);
    __atomic_store_n(&e->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    /* Jobs never started end with XDC_ERR_CLOSED (only possible with syncs still attached). */
    for (job *j = e->head, *nx; j; j = nx) {
        nx = j->next;
        j->next = NULL;
        complete((xdc_sync *)((char *)j - offsetof(xdc_sync, job)), XDC_ERR_CLOSED, NULL);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->done_cv);
    xdc_free(e);
}

int xdc_sync_engine_clients(xdc_sync_engine *e)
{
    pthread_mutex_lock(&e->mu);
    int n = e->n_clients;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Under e->mu: append the sync's job to the queue. */
static void post(xdc_sync *s, job_kind kind, const xdc_codec_cfg *codec)
{
    xdc_sync_engine *e = s->eng;
    s->job.kind = kind;
    s->job.codec = codec;
    s->job.next = NULL;
    if (e->tail) e->tail->next = &s->job;
    else e->head = &s->job;
    e->tail = &s->job;
    s->queued = 1;
    s->done = 0;
    s->err = XDC_OK;
    pthread_cond_broadcast(&e->cv);
}

/* Under e->mu: wait for the sync's job to end, at most timeout_ms (< 0: no limit); its result, or
 * XDC_ERR_AGAIN when it is still running. */
static xdc_err_t wait_done(xdc_sync *s, int64_t timeout_ms, xdc_diag *diag)
{
    struct timespec ts = after_ms(timeout_ms < 0 ? 0 : timeout_ms);
    int timed_out = 0;
    while (!s->done && !timed_out) {
        if (timeout_ms < 0) pthread_cond_wait(&s->eng->done_cv, &s->eng->mu);
        else timed_out = pthread_cond_timedwait(&s->eng->done_cv, &s->eng->mu, &ts) == ETIMEDOUT;
    }
    if (!s->done) return XDC_ERR_AGAIN;
    if (s->err != XDC_OK && diag) *diag = s->diag;
    return s->err == XDC_ERR_AGAIN ? XDC_ERR_INTERNAL : s->err; /* AGAIN says "still running" only */
}

xdc_err_t xdc_sync_create(xdc_sync_engine *engine, const xdc_sync_cfg *cfg, xdc_sync **out, xdc_diag *diag)
{
    *out = NULL;
    if (!engine || cfg->n_elems == 0 || cfg->bucket_elems == 0 || cfg->n_regions < 1 ||
        cfg->n_regions > XDC_SYNC_MAX_REGIONS) {
        xdc_diag_set(diag, "sync: no engine, empty buffer, zero bucket size or bad region count");
        return XDC_ERR_INVALID;
    }
    const xdc_kern_backend *be = cfg->backend;
    if (!be) XDC_CHECK(xdc_kern_backend_get(XDC_BACKEND_CPU, &be, diag));
    xdc_sync *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    s->cfg = *cfg;
    s->cfg.backend = be;
    s->dev = be->device;
    s->done = 1; /* no round yet */
    s->dp_size = cfg->dp ? xdc_intra_size(cfg->dp) : 1;
    s->dp_rank = cfg->dp ? xdc_intra_rank(cfg->dp) : 0;
    s->lanes = cfg->n_regions > 1 && cfg->lanes > 0 && cfg->lanes < s->dp_size ? cfg->lanes : s->dp_size;
    s->wide = s->lanes < s->dp_size;
    s->wan = cfg->n_regions > 1 && s->dp_rank < s->lanes;
    size_t L = (size_t)s->lanes, bsz = (cfg->bucket_elems + L - 1) / L * L;
    s->n_buckets = (int)((cfg->n_elems + bsz - 1) / bsz);
    s->b = xdc_calloc((size_t)s->n_buckets, sizeof *s->b);
    s->round_wait = xdc_calloc((size_t)cfg->n_regions, sizeof *s->round_wait);
    s->waited = xdc_calloc((size_t)SYNC_HISTORY * (size_t)cfg->n_regions, sizeof *s->waited);
    s->member = xdc_calloc((size_t)cfg->n_regions, sizeof *s->member);
    if (s->member) memset(s->member, 1, (size_t)cfg->n_regions);
    s->weight = xdc_calloc((size_t)cfg->n_regions, sizeof *s->weight);
    for (int r = 0; s->weight && r < cfg->n_regions; r++) s->weight[r] = 1.0f;
    s->n_members = cfg->n_regions;
    s->lost = xdc_calloc((size_t)cfg->n_regions, sizeof *s->lost);
    s->missed = xdc_calloc((size_t)cfg->n_regions, sizeof *s->missed);
    const xdc_device_ops *dev = s->dev;
    xdc_err_t rc = s->b && s->round_wait && s->waited && s->member && s->weight && s->lost && s->missed ? XDC_OK
                                                                                                        : XDC_ERR_NOMEM;
    s->fixed = s->dp_size > 1;
    route_plan first = {0};
    if (rc == XDC_OK && s->wan) rc = plan_routes(s, cfg->route, &first, diag);
    if (rc == XDC_OK && s->wan) install_routes(s, &first); /* nothing to replace */
    s->cfg.route = NULL;                                   /* not kept: s->rt.route is the table in force */
    if (rc == XDC_OK) rc = dev->get_device(&s->device);    /* the streams and memory below are made on it too */
    if (rc == XDC_OK) rc = dev->stream_create(&s->stream);
    if (rc == XDC_OK) rc = dev->event_create(&s->done_ev);
    if (rc == XDC_OK && s->dp_size > 1) rc = dev->mem_alloc((void **)&s->pad, bsz * sizeof(float)); /* replicas pad */
    for (int i = 0; i < s->n_buckets && rc == XDC_OK; i++) {
        bucket *k = &s->b[i];
        k->lo = (size_t)i * bsz;
        k->len = cfg->n_elems - k->lo < bsz ? cfg->n_elems - k->lo : bsz;
        k->plen = (k->len + L - 1) / L * L;
        k->shard = k->plen / L;
        if ((rc = bucket_codec_create(s, &cfg->codec, k, &k->codec, diag)) != XDC_OK) break;
        k->bound = xdc_codec_bound(k->codec, k->shard);
        k->rx = xdc_calloc((size_t)cfg->n_regions, sizeof *k->rx);
        k->fwd = xdc_calloc((size_t)cfg->n_regions, sizeof *k->fwd);
        k->rreq = xdc_calloc((size_t)cfg->n_regions, sizeof *k->rreq);
        k->rx_len = xdc_calloc((size_t)cfg->n_regions, sizeof *k->rx_len);
        if (!k->rx || !k->fwd || !k->rreq || !k->rx_len) rc = XDC_ERR_NOMEM;
        if (rc == XDC_OK) rc = dev->event_create(&k->ready);
        if (rc == XDC_OK) rc = dev->host_alloc((void **)&k->enc, k->bound);
        if (rc == XDC_OK && s->dp_size > 1) rc = dev->mem_alloc((void **)&k->shard_buf, k->shard * sizeof(float));
        for (int r = 0; r < cfg->n_regions && rc == XDC_OK && s->wan; r++)
            if (r != cfg->my_region) rc = dev->host_alloc((void **)&k->rx[r], k->bound);
        if (rc == XDC_OK) rc = bucket_routes(s, k, &s->rt, &k->sreq);
    }
    if (rc != XDC_OK) {
        s->n_buckets = s->b ? s->n_buckets : 0;
        xdc_sync_destroy(s); /* not attached yet: frees only */
        return rc;
    }
    pthread_mutex_lock(&engine->mu);
    s->eng = engine;
    engine->n_clients++;
    pthread_mutex_unlock(&engine->mu);
    XDC_DEBUG(XDC_SUB_ORCH, "sync %s: %zu elements in %d buckets of %zu, %d replicas, %d lanes, %d regions", cfg->name,
              cfg->n_elems, s->n_buckets, bsz, s->dp_size, s->lanes, cfg->n_regions);
    *out = s;
    return XDC_OK;
}

void xdc_sync_stop(xdc_sync *s)
{
    if (!s || !s->eng) return;
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    if (s->queued && e->running != s) { /* still waiting in the queue: drop it */
        job **pp = &e->head;
        while (*pp && *pp != &s->job) pp = &(*pp)->next;
        if (*pp) {
            *pp = s->job.next;
            if (e->tail == &s->job) {
                e->tail = NULL;
                for (job *j = e->head; j; j = j->next) e->tail = j;
            }
        }
        complete(s, XDC_ERR_CLOSED, NULL);
    }
    pthread_cond_broadcast(&e->cv); /* a running job waiting for readiness sees the stop */
    while (e->running == s) pthread_cond_wait(&e->done_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

/* Complete or release a WAN request the sync still holds, waiting until `deadline_ns` at most; 0 when
 * it is still posted then (its buffer must stay allocated). */
static int drain(xdc_wan_request **req, uint64_t deadline_ns)
{
    while (*req) {
        uint64_t now = xdc_now_ns();
        if (now >= deadline_ns) return 0;
        xdc_diag ignore;
        if (xdc_wan_wait(*req, (int64_t)((deadline_ns - now) / 1000000) + 1, NULL, NULL, &ignore) != XDC_ERR_AGAIN)
            *req = NULL; /* released, whatever its result */
    }
    return 1;
}

void xdc_sync_destroy(xdc_sync *s)
{
    if (!s) return;
    xdc_sync_stop(s);
    uint64_t deadline = xdc_now_ns() + 5 * (uint64_t)1000000000; /* for every request of the sync together */
    int leaked = 0;
    for (int i = 0; s->b && i < s->n_buckets; i++) {
        bucket *k = &s->b[i];
        int held = 0; /* a request the WAN engine still holds reads or writes this bucket's wire buffers */
        for (int j = 0; k->sreq && j < s->rt.n_sends; j++)
            if (!drain(&k->sreq[j], deadline)) held = 1;
        for (int r = 0; k->rreq && r < s->cfg.n_regions; r++)
            if (!drain(&k->rreq[r], deadline)) held = 1;
        xdc_codec_destroy(k->codec);
        if (held) {
            leaked++; /* left to the WAN engine, which fails the request when destroyed */
        } else {
            s->dev->host_free(k->enc);
            for (int r = 0; k->rx && r < s->cfg.n_regions; r++) s->dev->host_free(k->rx[r]);
            for (int r = 0; k->fwd && r < s->cfg.n_regions; r++) s->dev->host_free(k->fwd[r]);
        }
        xdc_free(k->rx);
        xdc_free(k->fwd);
        xdc_free(k->sreq);
        xdc_free(k->rreq);
        xdc_free(k->rx_len);
        s->dev->mem_free(k->shard_buf);
        s->dev->event_destroy(k->ready);
    }
    if (leaked)
        XDC_WARN(XDC_SUB_ORCH, "sync %s: %d buckets still posted with the WAN engine; their wire buffers are kept",
                 s->cfg.name, leaked);
    xdc_free(s->b);
    xdc_free(s->round_wait);
    xdc_free(s->waited);
    xdc_free(s->member);
    xdc_free(s->weight);
    xdc_free(s->lost);
    xdc_free(s->missed);
    plan_free(&s->rt);
    if (s->dev) {
        s->dev->stream_destroy(s->stream); /* waits for what the comm thread queued on it */
        s->dev->event_destroy(s->done_ev);
        s->dev->mem_free(s->pad);
        s->dev->mem_free(s->dec);
    }
    if (s->eng) {
        pthread_mutex_lock(&s->eng->mu);
        s->eng->n_clients--;
        pthread_mutex_unlock(&s->eng->mu);
    }
    xdc_free(s);
}

/* The region whose shard reaches this one over no peer this round (a member, or one relaying for a member, not
 * dialled), or -1: every route has its peer. */
static int unrouted(const xdc_sync *s)
{
    for (int r = 0; r < s->cfg.n_regions; r++)
        if (r != s->cfg.my_region && s->member[r] && !s->cfg.peers[s->rt.via[r]]) return r;
    return -1;
}

/* A region out of the rounds while the routes relay some shard (-1: none): a cancelled relayed receive would take
 * the next message, so regions leave the rounds only where every pair is linked. */
static int out_of_relayed(const xdc_sync *s)
{
    for (int r = 0; r < s->cfg.n_regions && route_relays(s->rt.route, s->cfg.n_regions); r++)
        if (!s->member[r]) return r;
    return -1;
}

xdc_err_t xdc_sync_begin(xdc_sync *s, float *buf)
{
    xdc_sync_engine *e = s->eng;
    int r = s->wan ? unrouted(s) : -1, out = s->wan ? out_of_relayed(s) : -1;
    if (r >= 0 || out >= 0) {
        if (r >= 0)
            XDC_ERROR(XDC_SUB_ORCH, "sync %s: no route from region %d to region %d over a peer (region %d not dialled)",
                      s->cfg.name, r, s->cfg.my_region, s->rt.via[r]);
        else
            XDC_ERROR(XDC_SUB_ORCH,
                      "sync %s: region %d is out of a round whose routes relay (regions leave the rounds "
                      "only where no route relays)",
                      s->cfg.name, out);
        return XDC_ERR_INVALID;
    }
    pthread_mutex_lock(&e->mu);
    if (!s->done || s->active || s->stop) {
        pthread_mutex_unlock(&e->mu);
        XDC_ERROR(XDC_SUB_ORCH, "sync %s: a round began while a job is still running or after stop", s->cfg.name);
        return XDC_ERR_INVALID;
    }
    s->buf = buf;
    s->ready_from = s->cfg.n_elems;
    s->ready_err = XDC_OK;
    s->active = 1;
    post(s, JOB_ROUND, NULL);
    pthread_mutex_unlock(&e->mu);
    return XDC_OK;
}

void xdc_sync_mark_ready(xdc_sync *s, size_t from)
{
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    size_t was = s->ready_from; /* moved only by this (the compute) thread */
    pthread_mutex_unlock(&e->mu);
    /* Each bucket that becomes final gets its event on the producer's stream before the comm thread can
     * see it ready. A failed record leaves the event without this round's capture: the round must fail
     * (rerr, published with the readiness) rather than let the comm stream wait on the stale capture and
     * read gradients backward has not written. The failure is also sticky on the producer's stream. */
    xdc_err_t rerr = XDC_OK;
    xdc_diag rd = {{0}};
    for (int i = 0; i < s->n_buckets && from < was && rerr == XDC_OK; i++)
        if (s->b[i].lo >= from && s->b[i].lo < was &&
            (rerr = s->dev->event_record(s->b[i].ready, s->cfg.compute)) != XDC_OK) {
            xdc_diag why = {{0}};
            (void)s->dev->stream_error(s->cfg.compute, &why);
            xdc_diag_set(&rd, "sync %s bucket at %zu: recording its ready event on the compute stream failed (%s)%s%s",
                         s->cfg.name, s->b[i].lo, xdc_strerror(rerr), why.msg[0] ? ": " : "", why.msg);
            XDC_ERROR(XDC_SUB_ORCH, "%s", rd.msg);
        }
    pthread_mutex_lock(&e->mu);
    if (rerr != XDC_OK && s->ready_err == XDC_OK) {
        s->ready_err = rerr;
        s->ready_diag = rd;
    }
    if (from < s->ready_from || rerr != XDC_OK) {
        if (from < s->ready_from) s->ready_from = from;
        if (e->running == s) pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

xdc_err_t xdc_sync_end(xdc_sync *s, xdc_diag *diag) { return xdc_sync_wait(s, -1, diag); }

xdc_err_t xdc_sync_wait(xdc_sync *s, int64_t timeout_ms, xdc_diag *diag)
{
    xdc_sync_mark_ready(s, 0);
    pthread_mutex_lock(&s->eng->mu);
    xdc_err_t rc = wait_done(s, timeout_ms, diag);
    if (rc != XDC_ERR_AGAIN) s->active = 0;
    pthread_mutex_unlock(&s->eng->mu);
    if (rc == XDC_ERR_AGAIN) return rc;
    /* comm -> compute: what is queued on the compute stream from now on runs after the round's last copy */
    if (rc == XDC_OK) rc = s->dev->stream_wait_event(s->cfg.compute, s->done_ev);
    return rc;
}

void xdc_sync_get_stats(xdc_sync *s, xdc_sync_stats *out)
{
    pthread_mutex_lock(&s->eng->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->eng->mu);
}

xdc_err_t xdc_sync_set_weights(xdc_sync *s, const float *weight, xdc_diag *diag)
{
    uint8_t member[XDC_SYNC_MAX_REGIONS];
    for (int r = 0; r < s->cfg.n_regions; r++) member[r] = weight[r] > 0.0f;
    return xdc_sync_set_members(s, member, weight, diag);
}

xdc_err_t xdc_sync_set_members(xdc_sync *s, const uint8_t *member, const float *weight, xdc_diag *diag)
{
    int n = 0;
    for (int r = 0; r < s->cfg.n_regions; r++) {
        if (!(weight[r] >= 0.0f && weight[r] <= XDC_SYNC_MAX_WEIGHT)) { /* NaN fails too */
            xdc_diag_set(diag, "sync %s: region %d's weight %g is not in [0, %g]", s->cfg.name, r, (double)weight[r],
                         (double)XDC_SYNC_MAX_WEIGHT);
            return XDC_ERR_INVALID;
        }
        n += member[r] != 0;
    }
    if (!member[s->cfg.my_region]) {
        xdc_diag_set(diag, "sync %s: this region (%d) must be a member of its own rounds", s->cfg.name,
                     s->cfg.my_region);
        return XDC_ERR_INVALID;
    }
    xdc_sync_engine *e = s->eng;
    int dropped[XDC_SYNC_MAX_REGIONS] = {0};
    pthread_mutex_lock(&e->mu);
    int idle = s->done && !s->active;
    if (idle) {
        for (int r = 0; r < s->cfg.n_regions; r++) {
            int in = member[r] != 0, back = in && (!s->member[r] || gone(s, r));
            s->weight[r] = in ? weight[r] : 0.0f;
            s->member[r] = (uint8_t)in;
            if (!back) continue;
            /* Back (a rejoin): a send of an earlier round to it may still be pending, on the peer of a process
             * that died (and may be destroyed since, its requests failed); this sync's rounds never waited for
             * it (the region left, or this sync had no round while it was out), and its bytes are no one's now. */
            __atomic_store_n(&s->lost[r], 0, __ATOMIC_RELEASE);
            for (int i = 0; i < s->n_buckets; i++)
                for (int j = 0; j < s->rt.n_sends; j++)
                    if (s->rt.snd[j].dst == r && s->b[i].sreq[j]) {
                        int done = 0; /* completed or failed: released by the test; pending: cancelled */
                        xdc_err_t rc = xdc_wan_test(s->b[i].sreq[j], &done, NULL, NULL, NULL);
                        if (rc == XDC_OK && !done) (void)xdc_wan_request_cancel(s->b[i].sreq[j]);
                        s->b[i].sreq[j] = NULL;
                        dropped[r] += rc != XDC_OK || !done; /* what its next round would have failed on */
                    }
        }
        s->n_members = n;
    }
    pthread_mutex_unlock(&e->mu);
    for (int r = 0; r < s->cfg.n_regions; r++)
        if (dropped[r])
            XDC_INFO(XDC_SUB_ORCH,
                     "sync %s: region %d is a member again; %d sends of earlier rounds to it, failed or still "
                     "pending on its old process's connection, dropped",
                     s->cfg.name, r, dropped[r]);
    if (!idle) xdc_diag_set(diag, "sync %s: members changed during a round", s->cfg.name);
    return idle ? XDC_OK : XDC_ERR_INVALID;
}

xdc_err_t xdc_sync_set_replica_weights(xdc_sync *s, const float *weight, xdc_diag *diag)
{
    float total = 0;
    int equal = 1;
    for (int i = 0; i < s->dp_size; i++) {
        if (!(weight[i] > 0.0f && weight[i] <= XDC_SYNC_MAX_WEIGHT)) { /* NaN fails too */
            xdc_diag_set(diag, "sync %s: replica %d's weight %g is not in (0, %g]", s->cfg.name, i, (double)weight[i],
                         (double)XDC_SYNC_MAX_WEIGHT);
            return XDC_ERR_INVALID;
        }
        total += weight[i];
        equal &= weight[i] == weight[0];
    }
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    int idle = s->done && !s->active;
    if (idle) {
        s->rep_weight = weight[s->dp_rank];
        s->rep_total = equal ? 0.0f : total;
    }
    pthread_mutex_unlock(&e->mu);
    if (!idle) xdc_diag_set(diag, "sync %s: replica weights changed during a round", s->cfg.name);
    return idle ? XDC_OK : XDC_ERR_INVALID;
}

void xdc_sync_lose(xdc_sync *s, int region)
{
    if (region >= 0 && region < s->cfg.n_regions && region != s->cfg.my_region)
        __atomic_store_n(&s->lost[region], 1, __ATOMIC_RELEASE);
}

float xdc_sync_share(xdc_sync *s)
{
    if (!s->weight) return 1.0f;
    float total = 0, mine;
    pthread_mutex_lock(&s->eng->mu);
    for (int r = 0; r < s->cfg.n_regions; r++) total += s->weight[r];
    mine = s->weight[s->cfg.my_region];
    pthread_mutex_unlock(&s->eng->mu);
    return total > 0.0f ? mine / total : 1.0f;
}

void xdc_sync_received(xdc_sync *s, uint8_t *set)
{
    pthread_mutex_lock(&s->eng->mu); /* the round's `missed`, written by the comm thread before it completed */
    for (int r = 0; r < s->cfg.n_regions; r++) set[r] = s->member[r] && !s->missed[r];
    pthread_mutex_unlock(&s->eng->mu);
}

xdc_err_t xdc_sync_resum(xdc_sync *s, const uint8_t *set, xdc_diag *diag)
{
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    const char *why = !s->done || s->active || s->stop ? "a round is summed again only after it ended"
                      : !set[s->cfg.my_region]         ? "the set leaves this region out"
                                                       : NULL;
    for (int r = 0; r < s->cfg.n_regions && !why; r++)
        if (set[r] && (!s->member[r] || s->missed[r])) why = "the set names a region whose contribution is not here";
    if (why) {
        pthread_mutex_unlock(&e->mu);
        xdc_diag_set(diag, "sync %s: %s", s->cfg.name, why);
        return XDC_ERR_INVALID;
    }
    s->job.set = set; /* stays valid: this call waits for the job */
    post(s, JOB_RESUM, NULL);
    xdc_err_t rc = wait_done(s, -1, diag);
    pthread_mutex_unlock(&e->mu);
    /* comm -> compute, as xdc_sync_end: work queued there from now on reads the new sums */
    return rc == XDC_OK ? s->dev->stream_wait_event(s->cfg.compute, s->done_ev) : rc;
}

xdc_err_t xdc_sync_set_codec(xdc_sync *s, const xdc_codec_cfg *codec, xdc_diag *diag)
{
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    if (!s->done || s->active || s->stop) {
        pthread_mutex_unlock(&e->mu);
        return XDC_ERR_INVALID;
    }
    post(s, JOB_SET_CODEC, codec); /* `codec` stays valid: this call waits for the job */
    xdc_err_t rc = wait_done(s, -1, diag);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

xdc_err_t xdc_sync_set_routes(xdc_sync *s, const int *route, xdc_diag *diag)
{
    if (!s->wan) return XDC_OK; /* no WAN exchange on this rank: nothing goes over any route */
    route_plan p;
    XDC_CHECK(plan_routes(s, route, &p, diag));
    size_t n = (size_t)s->cfg.n_regions;
    if (memcmp(p.route, s->rt.route, n * n * sizeof *p.route) == 0) { /* the routes in force: nothing moves */
        plan_free(&p);
        return XDC_OK;
    }
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    xdc_err_t rc = XDC_ERR_INVALID;
    if (!s->done || s->active || s->stop) {
        xdc_diag_set(diag, "sync %s: routes change between rounds only", s->cfg.name);
    } else {
        s->job.plan = &p; /* stays valid: this call waits for the job */
        post(s, JOB_ROUTES, NULL);
        rc = wait_done(s, -1, diag);
    }
    pthread_mutex_unlock(&e->mu);
    plan_free(&p); /* the routes replaced, or those refused */
    return rc;
}

size_t xdc_sync_residual_elems(const xdc_sync *s)
{
    size_t n = 0;
    for (int i = 0; i < s->n_buckets; i++)
        if (keeps_residual(s, &s->b[i])) n += s->b[i].shard;
    return n;
}

/* A residual copy as a job on the engine, waited for: the codec contexts belong to the comm thread. */
static xdc_err_t residual_job(xdc_sync *s, float *host, size_t n, int save, xdc_diag *diag)
{
    xdc_sync_engine *e = s->eng;
    if (n != xdc_sync_residual_elems(s)) {
        xdc_diag_set(diag, "sync %s: %zu residual elements given, it keeps %zu", s->cfg.name, n,
                     xdc_sync_residual_elems(s));
        return XDC_ERR_INVALID;
    }
    pthread_mutex_lock(&e->mu);
    if (!s->done || s->active || s->stop) {
        pthread_mutex_unlock(&e->mu);
        xdc_diag_set(diag, "sync %s: residuals are copied between rounds only", s->cfg.name);
        return XDC_ERR_INVALID;
    }
    s->job.host = host;
    s->job.save = save;
    post(s, JOB_RESIDUALS, NULL);
    xdc_err_t rc = wait_done(s, -1, diag);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

xdc_err_t xdc_sync_residual_get(xdc_sync *s, float *host, size_t n, xdc_diag *diag)
{
    return residual_job(s, host, n, 1, diag);
}

xdc_err_t xdc_sync_residual_set(xdc_sync *s, const float *host, size_t n, xdc_diag *diag)
{
    return residual_job(s, (float *)host, n, 0, diag); /* read only: save is 0 */
}

xdc_err_t xdc_sync_residual_take(xdc_sync *s, float *dst, xdc_diag *diag)
{
    xdc_sync_engine *e = s->eng;
    pthread_mutex_lock(&e->mu);
    const char *why = !s->done || s->active || s->stop ? "residuals are taken between rounds only"
                      : s->dp_size > 1 ? "residuals are taken only without replicas (each replica keeps a shard's)"
                                       : NULL;
    if (why) {
        pthread_mutex_unlock(&e->mu);
        xdc_diag_set(diag, "sync %s: %s", s->cfg.name, why);
        return XDC_ERR_INVALID;
    }
    s->job.dst = dst; /* stays valid: this call waits for the job */
    post(s, JOB_TAKE, NULL);
    xdc_err_t rc = wait_done(s, -1, diag);
    pthread_mutex_unlock(&e->mu);
    return rc;
}
