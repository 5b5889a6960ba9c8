/* orch_snapshot.c — the warm rejoin of elastic DiLoCo and streaming DiLoCo (docs/runtime.md, "Rejoining"): each
 * member writes a snapshot of every outer round (streaming: every fragment's round, right after it landed) to a
 * local file (orch_snapshot.h) and keeps the last rounds' means over their range of the stage (DiLoCo: the whole
 * stage; streaming: the fragment's), each with the xxh64 of the whole global parameters before and after its
 * outer step, and the hash after each of many more rounds; a restarted worker that finds a valid snapshot posts
 * its round and hash (warm/<region>/<rank>) before it asks to rejoin, and a donor whose kept rounds lead from that
 * hash to its own global parameters sends it those rounds' means over its slice instead of its slice of the state
 * (orch_rejoin.c), when they cost fewer bytes than the slice's global parameters and momentum. The joiner replays
 * them from its snapshot with the members' outer step, each on its range, in order. A donor that finds the
 * snapshot's round and hash among the older rounds' sends the global parameters and momentum alone: the joiner
 * keeps its snapshot's AdamW moments (as it does when it replays means; each region's inner optimizer is its own).
 * In streaming any fragment's round is such a point: the global parameters there are the fragments each synced
 * at its own last round, the same bytes on every member, and the rounds after it change only their fragment's
 * global parameters and momentum, so replaying their means in order brings the snapshot to the members' global
 * parameters bit for bit. */
#include "orchestrator/worker/orch_snapshot.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/worker/orch_worker.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rounds a member keeps the means of: DiLoCo 1, streaming 1 period of fragment rounds (each fragment's once),
 * at most ORCH_WARM_MAX: 4 bytes a parameter, where the global parameters and momentum a joiner with a snapshot
 * of this run takes instead are 8 (less, coded: orch_rejoin.c), so a second period would never be sent
 * (orch_warm_chain) and would only hold device memory. */
#define WARM_PERIODS    1
/* The rounds whose global parameters' hash a member keeps, ORCH_SNAP_HISTORY (16 bytes each): a joiner whose
 * snapshot is one of them, round and hash, holds this run's model at that round, and keeps its AdamW moments when
 * it takes the global parameters and momentum (orch_warm_chain). A restarted worker takes back those its snapshot
 * carries, so a region that rejoined still knows the rounds before its return (a later joiner of an older round
 * took the whole state from it, 7.0 MB against 5.9 for gpt1m, in bench-chaos). */
#define WARM_HISTORY    ORCH_SNAP_HISTORY
#define SNAP_ZSTD_LEVEL (-1) /* zstd's fastest levels: fp32 parameters hardly compress, and it runs every round */

size_t orch_snapshot_bytes(size_t n)
{
    return sizeof(orch_snapshot_meta) + (size_t)ORCH_SNAP_PARTS * n * sizeof(float);
}

void orch_snapshot_parts(void *buf, size_t n, orch_snapshot_meta **meta, float *part[ORCH_SNAP_PARTS])
{
    *meta = buf;
    float *p = (float *)((uint8_t *)buf + sizeof(orch_snapshot_meta));
    for (int i = 0; i < ORCH_SNAP_PARTS; i++) part[i] = p + (size_t)i * n;
}

xdc_err_t orch_snapshot_save(const char *dir, const void *buf, size_t n, const xdc_ckpt_blob_opt *opt, xdc_diag *diag)
{
    return xdc_ckpt_blob_write(dir, ORCH_SNAPSHOT_FILE, buf, orch_snapshot_bytes(n), opt, diag);
}

xdc_err_t orch_snapshot_load(const char *dir, void *buf, size_t n, xdc_diag *diag)
{
    XDC_CHECK(xdc_ckpt_blob_load(dir, ORCH_SNAPSHOT_FILE, buf, orch_snapshot_bytes(n), diag));
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts(buf, n, &m, part);
    uint64_t h = xdc_xxh64(part[ORCH_SNAP_GLOBAL], n * sizeof(float), 0);
    if (m->n != n || h != m->hash) {
        xdc_diag_set(diag, "%s/%s: a snapshot of %llu parameters whose global parameters hash to %016llx, not %016llx",
                     dir, ORCH_SNAPSHOT_FILE, (unsigned long long)m->n, (unsigned long long)h,
                     (unsigned long long)m->hash);
        return XDC_ERR_CORRUPT;
    }
    return XDC_OK;
}

/* One kept round: its mean over its range [lo, hi) of the stage (device, cap >= hi - lo fp32) and the global
 * parameters' hash before its outer step (0: not known, the first round this process kept), that is after the
 * round `since`, and after it. */
typedef struct {
    int64_t round, since;
    uint64_t before, after;
    size_t lo, hi, cap;
    float *d;
    int mean;
} warm_round;

/* A kept round's mean over a slice on the wire: this record, then (hi - lo) fp32 (the round's range within the
 * slice: empty where a streaming fragment lies outside it). */
typedef struct {
    uint64_t lo, hi;
} warm_record;

struct orch_warm {
    char dir[1024];
    uint8_t *buf;            /* pinned (orch_snapshot_bytes(n)): the snapshot as written; a joiner's as loaded */
    int have;                /* a joiner: buf holds a valid snapshot of its earlier process */
    xdc_ckpt_blob_opt opt;   /* the file's scratch, allocated once */
    warm_round *ring;        /* (n_cap) */
    int n_cap, head, n_ring; /* the slots; the next one; the rounds kept (the newest n_ring before head) */
    orch_round_hash hist[WARM_HISTORY]; /* the last rounds' hashes (the newest n_hist before hist_head) */
    int hist_head, n_hist;
    int hist_gap; /* hist came from the snapshot: its newest is not the round before the next one kept */
    /* the cost, for the run's log: snapshots written, their seconds, and the first and last one's time */
    long long saves;
    double save_s;
    uint64_t t_first, t_last;
};

static const char *const why_text[] = {
    [ORCH_WARM_OK] = "",
    [ORCH_WARM_NONE] = "it found no valid snapshot of its own",
    [ORCH_WARM_MISMATCH] = "its snapshot's global parameters differ from this member's at that round (hash)",
    [ORCH_WARM_OLD] = "its snapshot's round is older than the rounds this member keeps",
    [ORCH_WARM_OFF] = "this member keeps no rounds yet (not a member long enough)",
    [ORCH_WARM_COST] = "the means of the rounds since its snapshot would cost as many bytes as the global parameters "
                       "and momentum",
};

const char *orch_warm_why(int code)
{
    return code >= 0 && code < (int)(sizeof why_text / sizeof why_text[0]) ? why_text[code] : "?";
}

/* The modes with a warm rejoin: those whose joiners replay kept rounds (sync mode has none). */
static int warm_mode(const orch_worker *w)
{
    return w->cfg->mode == ORCH_MODE_DILOCO || w->cfg->mode == ORCH_MODE_STREAMING;
}

/* The warm state of w, made at its first use (the dir: XDC_SNAPSHOT_DIR or the run's folder, per region and
 * rank). */
static xdc_err_t warm_of(orch_worker *w, struct orch_warm **out)
{
    if (w->elastic.warm) return *out = w->elastic.warm, XDC_OK;
    struct orch_warm *k = xdc_calloc(1, sizeof *k);
    if (!k) return XDC_ERR_NOMEM;
    w->elastic.warm = k; /* freed by orch_warm_destroy, whatever happens */
    const char *env = getenv("XDC_SNAPSHOT_DIR");
    if (env && *env) snprintf(k->dir, sizeof k->dir, "%s/%s/%s-%d", env, w->id->run_id, w->id->region, w->id->lrank);
    else snprintf(k->dir, sizeof k->dir, "%s/snapshot/%s-%d", w->id->run_dir, w->id->region, w->id->lrank);
    size_t bytes = orch_snapshot_bytes(w->model.n_params);
    k->opt = (xdc_ckpt_blob_opt){.cap = xdc_ckpt_blob_scratch_bytes(bytes), .level = SNAP_ZSTD_LEVEL};
    k->opt.scratch = xdc_malloc(k->opt.cap);
    if (!k->opt.scratch) return XDC_ERR_NOMEM;
    XDC_CHECK(w->model.be->device->host_alloc((void **)&k->buf, bytes));
    k->n_cap = w->cfg->mode == ORCH_MODE_STREAMING ? WARM_PERIODS * w->cfg->streaming.fragments : WARM_PERIODS;
    if (k->n_cap > ORCH_WARM_MAX) k->n_cap = ORCH_WARM_MAX;
    k->ring = xdc_calloc((size_t)k->n_cap, sizeof *k->ring);
    if (!k->ring) return XDC_ERR_NOMEM;
    *out = k;
    return XDC_OK;
}

/* The i-th oldest kept round. */
static warm_round *kept(struct orch_warm *k, int i)
{
    return &k->ring[(k->head - k->n_ring + i + 2 * k->n_cap) % k->n_cap];
}

/* Keep the round's mean over [lo, hi) (o->pseudo there, just applied) in the ring, with the hash `after` it. */
static xdc_err_t keep_round(orch_worker *w, struct orch_warm *k, orch_outer *o, int64_t round, size_t lo, size_t hi,
                            uint64_t after)
{
    const xdc_device_ops *d = w->model.be->device;
    warm_round *e = &k->ring[k->head];
    if (e->cap < hi - lo) { /* a streaming run's final round is the whole stage's */
        d->mem_free(e->d);
        e->d = NULL, e->cap = 0;
        XDC_CHECK(d->mem_alloc((void **)&e->d, (hi - lo) * sizeof(float) + 1)); /* + 1: a range may be empty */
        e->cap = hi - lo;
    }
    /* the round before: the newest hash kept (e may be its slot in the ring) */
    const orch_round_hash *last = k->n_hist && !k->hist_gap ? &k->hist[(k->hist_head + WARM_HISTORY - 1) % WARM_HISTORY]
                                                            : NULL;
    k->hist_gap = 0;
    e->round = round, e->since = last ? last->round : -1, e->before = last ? last->hash : 0;
    e->after = after, e->mean = o->mean, e->lo = lo, e->hi = hi;
    XDC_CHECK(d->copy_d2d(e->d, o->pseudo + lo, (hi - lo) * sizeof(float), o->stream));
    k->head = (k->head + 1) % k->n_cap;
    if (k->n_ring < k->n_cap) k->n_ring++;
    k->hist[k->hist_head] = (orch_round_hash){.round = round, .hash = after};
    k->hist_head = (k->hist_head + 1) % WARM_HISTORY;
    if (k->n_hist < WARM_HISTORY) k->n_hist++;
    return XDC_OK;
}

xdc_err_t orch_warm_round(orch_worker *w, orch_outer *o, int64_t round, size_t lo, size_t hi)
{
    if (!w->elastic.on || !warm_mode(w) || w->elastic.take) return XDC_OK;
    uint64_t t0 = xdc_now_ns();
    struct orch_warm *k;
    XDC_CHECK(warm_of(w, &k));
    xdc_diag dd = {{0}};
    if (!k->saves && orch_mkdirs(k->dir, 0755, &dd) != XDC_OK)
        XDC_WARN(XDC_SUB_ORCH, "no snapshots of the outer rounds: %s", dd.msg);
    k->have = 0; /* a joiner's snapshot is used: its buffer is the member's from now on */
    const xdc_device_ops *d = w->model.be->device;
    size_t n = o->n;
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts(k->buf, n, &m, part);
    XDC_CHECK(d->copy_d2h(part[ORCH_SNAP_GLOBAL], o->global, n * sizeof(float), o->stream));
    XDC_CHECK(d->copy_d2h(part[ORCH_SNAP_MOM], o->mom, n * sizeof(float), o->stream));
    int64_t adam_t;
    XDC_CHECK(xdc_gpt_stage_moments_get(w->model.st, 0, n, part[ORCH_SNAP_M], part[ORCH_SNAP_V], &adam_t));
    XDC_CHECK(d->stream_sync(o->stream));
    *m = (orch_snapshot_meta){.n = n,
                              .round = round,
                              .step = w->prog.step,
                              .adam_t = adam_t,
                              .hash = xdc_xxh64(part[ORCH_SNAP_GLOBAL], n * sizeof(float), 0)};
    if (w->model.data) {
        xdc_data_pos pos = xdc_data_get_pos(w->model.data);
        m->epoch = pos.epoch, m->batch = pos.batch;
    }
    XDC_CHECK(keep_round(w, k, o, round, lo, hi, m->hash));
    m->n_hist = (uint64_t)k->n_hist; /* oldest first */
    for (int i = 0; i < k->n_hist; i++)
        m->hist[i] = k->hist[(k->hist_head - k->n_hist + i + WARM_HISTORY) % WARM_HISTORY];
    if (orch_snapshot_save(k->dir, k->buf, n, &k->opt, &dd) != XDC_OK) /* the run goes on without it */
        XDC_WARN(XDC_SUB_ORCH, "round %lld: snapshot not written: %s", (long long)round, dd.msg);
    if (!w->elastic.rejoin && round >= 20 && orch_rejoin_test_fault(w, "die")) raise(SIGKILL);
    uint64_t t1 = xdc_now_ns();
    if (!k->saves++) k->t_first = t1;
    k->t_last = t1;
    k->save_s += (double)(t1 - t0) / 1e9;
    return XDC_OK;
}

xdc_err_t orch_warm_ask(orch_worker *w, xdc_diag *diag)
{
    if (!warm_mode(w)) return XDC_OK;
    struct orch_warm *k;
    XDC_CHECK(warm_of(w, &k));
    size_t n = w->model.n_params;
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts(k->buf, n, &m, part);
    if (orch_rejoin_test_fault(w, "torn")) { /* as if the file were cut short by a crash of the machine */
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", k->dir, ORCH_SNAPSHOT_FILE);
        FILE *f = fopen(path, "r+b");
        if (f) fseek(f, 200, SEEK_SET), fputc(0x5a, f), fclose(f);
    }
    xdc_diag d = {{0}};
    xdc_err_t rc = orch_snapshot_load(k->dir, k->buf, n, &d);
    if (rc == XDC_OK && orch_rejoin_test_fault(w, "nosnap")) {
        xdc_diag_set(&d, "test hook nosnap");
        rc = XDC_ERR_UNAVAILABLE;
    }
    k->have = rc == XDC_OK;
    if (k->have && m->n_hist <= WARM_HISTORY) { /* the rounds its earlier process kept: the run's, whatever this
                                                  * snapshot turns out to be (they were hashed as the rounds passed) */
        memcpy(k->hist, m->hist, (size_t)m->n_hist * sizeof *k->hist);
        k->n_hist = (int)m->n_hist, k->hist_head = k->n_hist % WARM_HISTORY, k->hist_gap = 1;
    }
    if (k->have && orch_rejoin_test_fault(w, "stale")) { /* a valid snapshot that is not the members' model */
        part[ORCH_SNAP_GLOBAL][0] += 1.0f;
        m->hash = xdc_xxh64(part[ORCH_SNAP_GLOBAL], n * sizeof(float), 0);
    }
    char val[64] = "none";
    if (k->have) snprintf(val, sizeof val, "%lld %016llx", (long long)m->round, (unsigned long long)m->hash);
    if (k->have)
        XDC_WARN(XDC_SUB_ORCH,
                 "region %s rank %d: its snapshot of round %lld (step %lld, hash %016llx) is valid: it "
                 "asks for the rounds since",
                 w->id->region, w->id->lrank, (long long)m->round, (long long)m->step, (unsigned long long)m->hash);
    else
        XDC_WARN(XDC_SUB_ORCH, "region %s rank %d: no snapshot to rejoin from (%s): it takes the whole state",
                 w->id->region, w->id->lrank, rc == XDC_ERR_IO ? "none written" : d.msg);
    return rdzv_set(orch_member_rdzv(w->member), rdzv_key_warm(w->id->region_idx, w->id->lrank).s, val, diag);
}

/* Kept round e's range within [lo, hi), as its record says it (empty where they do not meet: [lo, lo)). */
static warm_record record_of(const warm_round *e, size_t lo, size_t hi)
{
    size_t a = e->lo > lo ? e->lo : lo, b = e->hi < hi ? e->hi : hi;
    return b > a ? (warm_record){.lo = a, .hi = b} : (warm_record){.lo = lo, .hi = lo};
}

/* Bytes of the newest `rounds` kept rounds' records over [lo, hi) (warm_record and its means). */
static size_t records_bytes(struct orch_warm *k, int rounds, size_t lo, size_t hi)
{
    size_t bytes = 0;
    for (int j = k->n_ring - rounds; j < k->n_ring; j++) {
        warm_record r = record_of(kept(k, j), lo, hi);
        bytes += sizeof r + (size_t)(r.hi - r.lo) * sizeof(float);
    }
    return bytes;
}

int orch_warm_chain(orch_worker *w, int region, size_t lo, size_t hi, size_t params, int *rounds, uint64_t *from,
                    int *own)
{
    struct orch_warm *k = w->elastic.warm;
    *own = 0;
    if (!warm_mode(w)) return ORCH_WARM_OFF;
    char val[64];
    long long s0;
    unsigned long long h0;
    xdc_diag d = {{0}};
    if (rdzv_try_get(orch_member_rdzv(w->member), rdzv_key_warm(region, w->id->lrank).s, val, sizeof val, &d) !=
            XDC_OK ||
        sscanf(val, "%lld %llx", &s0, &h0) != 2)
        return ORCH_WARM_NONE;
    if (!k || !k->n_ring) return ORCH_WARM_OFF;
    *from = h0;
    for (int i = k->n_hist - 1; i >= 0; i--) { /* newest first: the joiner's round among the hashes kept */
        const orch_round_hash *e = &k->hist[(k->hist_head - k->n_hist + i + WARM_HISTORY) % WARM_HISTORY];
        if (e->round != s0) continue;
        if (e->hash != h0) return ORCH_WARM_MISMATCH;
        *own = 1;
        break;
    }
    int why = ORCH_WARM_OLD;
    for (int i = k->n_ring - 1; i >= 0; i--) { /* newest first: the chain of hashes back to the joiner's */
        const warm_round *e = kept(k, i);
        if (e->after == h0) {
            *rounds = k->n_ring - 1 - i, why = ORCH_WARM_OK;
            break;
        }
        if (e->round == s0) return ORCH_WARM_MISMATCH;
        if (e->before == h0) {
            *rounds = k->n_ring - i, why = ORCH_WARM_OK;
            break;
        }
        if (e->before && e->since == s0) return ORCH_WARM_MISMATCH;
        if (!e->before || e->round < s0) break;
    }
    return why == ORCH_WARM_OK && records_bytes(k, *rounds, lo, hi) >= params ? ORCH_WARM_COST : why;
}

size_t orch_warm_bytes(orch_worker *w, int rounds, size_t lo, size_t hi)
{
    return records_bytes(w->elastic.warm, rounds, lo, hi);
}

xdc_err_t orch_warm_stage(orch_worker *w, int rounds, size_t lo, size_t hi, uint8_t *host, size_t *off, uint64_t *means)
{
    struct orch_warm *k = w->elastic.warm;
    const xdc_device_ops *d = w->model.be->device;
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    *means = 0;
    off[0] = 0;
    for (int j = 0; j < rounds; j++) {
        const warm_round *e = kept(k, k->n_ring - rounds + j);
        warm_record r = record_of(e, lo, hi);
        size_t bytes = (size_t)(r.hi - r.lo) * sizeof(float);
        memcpy(host + off[j], &r, sizeof r);
        if (bytes) XDC_CHECK(d->copy_d2h(host + off[j] + sizeof r, e->d + (r.lo - e->lo), bytes, s));
        off[j + 1] = off[j] + sizeof r + bytes;
        if (e->mean) *means |= 1ull << j;
    }
    return d->stream_sync(s);
}

xdc_err_t orch_warm_replay(orch_worker *w, orch_outer *o, const uint8_t *buf, size_t bytes, int rounds, size_t lo,
                           size_t hi, uint64_t means, float *dev, xdc_diag *diag)
{
    const xdc_device_ops *d = w->model.be->device;
    size_t at = 0;
    int j = 0;
    for (; j < rounds && at + sizeof(warm_record) <= bytes; j++) { /* on the stage's stream, one after the other */
        warm_record r;
        memcpy(&r, buf + at, sizeof r);
        at += sizeof r;
        if (r.lo < lo || r.hi < r.lo || r.hi > hi || (r.hi - r.lo) * sizeof(float) > bytes - at) break;
        size_t len = (size_t)(r.hi - r.lo);
        if (len) XDC_CHECK(d->copy_h2d(dev, buf + at, len * sizeof(float), o->stream));
        if (len) XDC_CHECK(orch_outer_step(o, dev, (size_t)r.lo, (size_t)r.hi, (means >> j) & 1));
        at += len * sizeof(float);
    }
    if (j == rounds && at == bytes) return XDC_OK;
    xdc_diag_set(diag, "rejoin: %zu bytes of %d rounds' means over parameters [%zu, %zu) are not their records", bytes,
                 rounds, lo, hi);
    return XDC_ERR_PROTO;
}

xdc_err_t orch_warm_start(orch_worker *w, orch_outer *o, long long *round)
{
    const struct orch_warm *k = w->elastic.warm;
    if (!k || !k->have) return XDC_ERR_UNAVAILABLE;
    const xdc_device_ops *d = w->model.be->device;
    size_t n = o->n, bytes = n * sizeof(float);
    orch_snapshot_meta *m;
    float *part[ORCH_SNAP_PARTS];
    orch_snapshot_parts(k->buf, n, &m, part);
    XDC_CHECK(d->copy_h2d(o->global, part[ORCH_SNAP_GLOBAL], bytes, o->stream));
    XDC_CHECK(d->copy_h2d(o->mom, part[ORCH_SNAP_MOM], bytes, o->stream));
    XDC_CHECK(d->copy_d2d(o->local, o->global, bytes, o->stream));
    XDC_CHECK(xdc_gpt_stage_moments_set(w->model.st, 0, n, part[ORCH_SNAP_M], part[ORCH_SNAP_V], m->adam_t));
    XDC_CHECK(d->stream_sync(o->stream));
    if (w->model.data) XDC_CHECK(xdc_data_set_pos(w->model.data, (xdc_data_pos){.epoch = m->epoch, .batch = m->batch}));
    w->prog.step = m->step;
    *round = m->round;
    return XDC_OK;
}

const void *orch_warm_snapshot(const orch_worker *w)
{
    const struct orch_warm *k = w->elastic.warm;
    return k && k->have ? k->buf : NULL;
}

void orch_warm_destroy(orch_worker *w)
{
    struct orch_warm *k = w->elastic.warm;
    if (!k) return;
    if (k->saves > 1)
        XDC_INFO(XDC_SUB_ORCH,
                 "region %s rank %d: %lld outer-round snapshots in %s, %.1f ms each (%.2f MB), against %.2f s a round",
                 w->id->region, w->id->lrank, k->saves, k->dir, 1e3 * k->save_s / (double)k->saves,
                 (double)orch_snapshot_bytes(w->model.n_params) / 1e6,
                 (double)(k->t_last - k->t_first) / 1e9 / (double)(k->saves - 1));
    const xdc_device_ops *d = w->model.be->device;
    for (int i = 0; k->ring && i < k->n_cap; i++) d->mem_free(k->ring[i].d);
    xdc_free(k->ring);
    if (k->buf) d->host_free(k->buf);
    xdc_free(k->opt.scratch);
    xdc_free(k);
    w->elastic.warm = NULL;
}
