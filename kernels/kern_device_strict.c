/* kern_device_strict.c — the cpu-strict device (xdc_device_strict_ops): a device that fails where a GPU
 * would, so the device path of the callers can be proven on a machine without one (docs/device.md).
 *
 *  - Memory: every allocation is a memfd mapped twice. The pointer handed out is a PROT_NONE view (a host
 *    read or write faults; a SIGSEGV handler names the allocation); the ops work through the read-write
 *    alias at the same offset.
 *  - Streams: one thread per stream runs its queue in order; ops are queued by the wrappers of
 *    kern_strict_ops.c (the CPU ops, pointer arguments translated to the alias) and by the copies here.
 *  - Events: a record captures (stream, sequence number); a wait item blocks the waiting stream's thread
 *    until that stream completed that item.
 *  - Hazards: every queued item gets a sequence number on its stream; each stream carries a vector clock
 *    (what it is ordered after), joined from an event when it waits on one and from the host clock at
 *    every enqueue; the host clock (one per process) joins a stream's clock when the host waited for it.
 *    Accesses are byte ranges: per 64 KiB block of each allocation the core keeps a list of (bytes,
 *    stream, sequence, read/write, op) entries. An op that reads bytes another stream wrote, or writes
 *    bytes another stream read or wrote, without that stream's entry being in its clock, is refused at
 *    enqueue time (only overlapping bytes count): the stream fails with a message naming the op, the
 *    argument, the buffer, the bytes and both streams. The check runs on the order in
 *    which the host queued the work, so a missing event fails every run, not only unlucky ones.
 *  - Devices: XDC_STRICT_DEVICES pretend GPUs. A thread is bound to one (set_device; 0 at first); streams
 *    and allocations belong to the device of the thread that made them, each device has its own main
 *    stream, and an op (not a copy) is refused when the calling thread is bound to another device than its
 *    stream's, or when an argument is another device's memory: what CUDA refuses or faults on.
 *  - Failure injection (xdc_device_strict_fail_next): a thread's next call of a named device function
 *    fails without doing its work and fails its stream, as a refused CUDA call does. */
#include "kernels/kern_strict_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_STREAMS  64 /* clock entries: stream ids, then comm hold ids (ids are reused; sequence numbers continue) */
#define STREAM_IDS   48 /* live streams at once: ids 1 .. STREAM_IDS - 1 */
#define MAX_ALLOCS   4096
#define BLOCK_SHIFT  16 /* 64 KiB blocks index the recorded byte ranges */
#define BLOCK_BYTES  ((size_t)1 << BLOCK_SHIFT)
#define BLOCK_CAP    64 /* range entries per block; > MAX_STREAMS - 1, so two entries of one stream exist to merge */
#define STREAM_MAGIC 0x58444353u /* "XDCS" */

/* One access recorded in a 64 KiB block: bytes [lo, hi) of the block (offsets from the block's start)
 * last read or written by (stream, seq). Entries of one block may overlap (readers of several streams,
 * a writer and its readers). */
typedef struct {
    uint32_t lo, hi;
    uint16_t stream;
    bool write;
    uint64_t seq;
    const char *op;
} range_entry;

typedef struct {
    int n;
    range_entry e[BLOCK_CAP];
} block_state;

typedef struct {
    _Atomic uintptr_t view; /* 0: free slot; read by the SIGSEGV handler without a lock */
    _Atomic size_t mapped;
    size_t bytes;
    char *alias;
    int dev; /* the device of the thread that allocated it */
    block_state *blocks;
} slot_t;

typedef struct item {
    struct item *next;
    uint64_t seq;
    bool is_wait;
    int wait_id;
    uint64_t wait_seq;
    xdc_err_t *result; /* a waited-for op's result; written before its completion is published */
    strict_op op;
} item;

struct xdc_stream {
    uint32_t magic;
    int id;
    int dev;      /* the device of the thread that created it */
    bool is_main; /* a device's main stream: never destroyed */
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    item *head, *tail;        /* mu */
    bool stop;                /* mu */
    uint64_t vc[MAX_STREAMS]; /* g_lock */
};

struct xdc_event {
    bool recorded;
    bool timed;
    _Atomic uint64_t t_ns; /* timed: host clock when the stream thread ran the record's stamp */
    int id;
    uint64_t seq;
    uint64_t vc[MAX_STREAMS];
};

static slot_t slots[MAX_ALLOCS];
static _Atomic int slots_hi;

/* Bookkeeping at enqueue time: slots and their blocks, sequence numbers, clocks. Taken before d_lock
 * and before a stream's mu, never by stream threads. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t id_seq[MAX_STREAMS];
static bool id_used[MAX_STREAMS];
static uint64_t host_vc[MAX_STREAMS];

/* Completion: what each stream id ran, and its sticky error. */
static pthread_mutex_t d_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t d_cv = PTHREAD_COND_INITIALIZER;
static uint64_t id_done[MAX_STREAMS];
static xdc_err_t id_err[MAX_STREAMS];
static uint64_t id_fail_seq[MAX_STREAMS]; /* the item at which the stream failed */
static char id_msg[MAX_STREAMS][512];

/* Each device's main stream, made on first use under main_lock. */
static pthread_mutex_t main_lock = PTHREAD_MUTEX_INITIALIZER;
static xdc_stream *main_streams[XDC_STRICT_DEVICES];
static _Thread_local xdc_stream *current;
static _Thread_local int bound_dev; /* set_device */

/* xdc_device_strict_fail_next: the calling thread's next call of fail_fn fails with fail_err. */
static _Thread_local const char *fail_fn;
static _Thread_local xdc_err_t fail_err;

/* ---- the fault handler ---------------------------------------------------------------------------- */

static struct sigaction old_segv;
static pthread_once_t segv_once = PTHREAD_ONCE_INIT;

static size_t put_str(char *b, size_t at, const char *s)
{
    while (*s && at < 255) b[at++] = *s++;
    return at;
}

static size_t put_num(char *b, size_t at, uintptr_t v, unsigned base)
{
    char t[32];
    int n = 0;
    do {
        t[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    if (base == 16) at = put_str(b, at, "0x");
    while (n && at < 255) b[at++] = t[--n];
    return at;
}

/* Async-signal-safe: a lock-free scan of the slots and write(2). Then the previous disposition is put
 * back and the fault re-raised (the faulting access runs again and dies of SIGSEGV). */
static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    int hi = atomic_load(&slots_hi);
    for (int i = 0; i < hi; i++) {
        uintptr_t v = atomic_load(&slots[i].view);
        if (v && a >= v && a < v + atomic_load(&slots[i].mapped)) {
            char b[256];
            size_t at = put_str(b, 0, "xdc: host touched cpu-strict device memory at ");
            at = put_num(b, at, a, 16);
            at = put_str(b, at, " (allocation of ");
            at = put_num(b, at, slots[i].bytes, 10);
            at = put_str(b, at, " bytes)\n");
            ssize_t w = write(2, b, at);
            (void)w;
            break;
        }
    }
    sigaction(SIGSEGV, &old_segv, NULL);
    if (si->si_code <= 0) raise(sig); /* sent by kill/raise: it would not repeat by itself */
}

static void install_segv(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
}

/* ---- errors ---------------------------------------------------------------------------------------- */

static void fail_stream(int id, uint64_t at, xdc_err_t err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail_stream(int id, uint64_t at, xdc_err_t err, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&d_lock);
    bool first = id_err[id] == XDC_OK;
    if (first) {
        id_err[id] = err;
        id_fail_seq[id] = at;
        memcpy(id_msg[id], msg, sizeof msg);
    }
    pthread_mutex_unlock(&d_lock);
    if (first) XDC_ERROR(XDC_SUB_KERN, "cpu-strict stream %d failed: %s", id, msg);
}

static xdc_err_t sticky(int id, xdc_diag *diag)
{
    pthread_mutex_lock(&d_lock);
    xdc_err_t err = id_err[id];
    if (err != XDC_OK && diag) xdc_diag_set(diag, "%s", id_msg[id]);
    pthread_mutex_unlock(&d_lock);
    return err;
}

/* The sticky error of stream id if it failed at or before item seq (what an event captured). */
static xdc_err_t sticky_upto(int id, uint64_t seq, xdc_diag *diag)
{
    pthread_mutex_lock(&d_lock);
    xdc_err_t err = id_fail_seq[id] <= seq ? id_err[id] : XDC_OK;
    if (err != XDC_OK && diag) xdc_diag_set(diag, "%s", id_msg[id]);
    pthread_mutex_unlock(&d_lock);
    return err;
}

static void wait_done(int id, uint64_t seq)
{
    pthread_mutex_lock(&d_lock);
    while (id_done[id] < seq) pthread_cond_wait(&d_cv, &d_lock);
    pthread_mutex_unlock(&d_lock);
}

static void join(uint64_t *into, const uint64_t *from)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (from[i] > into[i]) into[i] = from[i];
}

/* ---- streams --------------------------------------------------------------------------------------- */

static void *stream_main(void *arg)
{
    xdc_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        item *it = s->head;
        if (it) {
            s->head = it->next;
            if (!s->head) s->tail = NULL;
        }
        pthread_mutex_unlock(&s->mu);
        if (!it) break;
        xdc_err_t r = XDC_OK;
        if (it->is_wait) {
            wait_done(it->wait_id, it->wait_seq);
            xdc_diag d;
            xdc_err_t up = sticky_upto(it->wait_id, it->wait_seq, &d);
            if (up != XDC_OK && it->wait_id != s->id)
                fail_stream(s->id, it->seq, up, "waited on an event of stream %d, which failed: %s", it->wait_id,
                            d.msg);
        } else if ((r = sticky(s->id, NULL)) == XDC_OK) {
            r = it->op.fn(&it->op);
            if (r != XDC_OK) fail_stream(s->id, it->seq, r, "%s: %s", it->op.name, xdc_strerror(r));
        }
        pthread_mutex_lock(&d_lock);
        if (it->result) *it->result = r;
        id_done[s->id] = it->seq;
        pthread_cond_broadcast(&d_cv);
        pthread_mutex_unlock(&d_lock);
        xdc_free(it);
    }
    return NULL;
}

static xdc_err_t strict_stream_create(xdc_stream **out)
{
    xdc_stream *s = xdc_calloc(1, sizeof *s);
    if (!s) return XDC_ERR_NOMEM;
    s->magic = STREAM_MAGIC;
    s->dev = bound_dev;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&g_lock);
    int id = 0;
    for (int i = 1; i < STREAM_IDS && !id; i++)
        if (!id_used[i]) id = i;
    if (id) {
        id_used[id] = true;
        s->id = id;
        s->vc[id] = id_seq[id]; /* ordered after everything its id ran before */
        pthread_mutex_lock(&d_lock);
        id_err[id] = XDC_OK;
        id_fail_seq[id] = 0;
        id_msg[id][0] = 0;
        pthread_mutex_unlock(&d_lock);
    }
    pthread_mutex_unlock(&g_lock);
    if (!id) {
        XDC_ERROR(XDC_SUB_KERN, "cpu-strict: more than %d streams at once", STREAM_IDS - 1);
        xdc_free(s);
        return XDC_ERR_NOMEM;
    }
    if (pthread_create(&s->thr, NULL, stream_main, s) != 0) {
        pthread_mutex_lock(&g_lock);
        id_used[id] = false;
        pthread_mutex_unlock(&g_lock);
        xdc_free(s);
        return XDC_ERR_NOMEM;
    }
    *out = s;
    return XDC_OK;
}

static xdc_err_t resolve(xdc_stream **s)
{
    if (*s) return (*s)->magic == STREAM_MAGIC ? XDC_OK : XDC_ERR_INVALID;
    if (current) {
        *s = current;
        return XDC_OK;
    }
    xdc_err_t err = XDC_OK;
    pthread_mutex_lock(&main_lock);
    if (!main_streams[bound_dev] && (err = strict_stream_create(&main_streams[bound_dev])) == XDC_OK)
        main_streams[bound_dev]->is_main = true;
    *s = main_streams[bound_dev];
    pthread_mutex_unlock(&main_lock);
    return err;
}

/* The injected failure, if the calling thread armed one for `fn`: disarmed, and stream s failed with it at
 * its next item, as a refused enqueue fails a CUDA stream here (docs/device.md). */
static xdc_err_t injected(const char *fn, xdc_stream *s)
{
    if (!fail_fn || strcmp(fail_fn, fn) != 0) return XDC_OK;
    xdc_err_t err = fail_err;
    fail_fn = NULL;
    pthread_mutex_lock(&g_lock);
    uint64_t at = id_seq[s->id] + 1;
    pthread_mutex_unlock(&g_lock);
    fail_stream(s->id, at, err, "%s: injected failure (xdc_device_strict_fail_next)", fn);
    return err;
}

void xdc_device_strict_fail_next(const char *fn, xdc_err_t err)
{
    fail_fn = err != XDC_OK ? fn : NULL;
    fail_err = err;
}

static xdc_err_t strict_set_device(int ordinal)
{
    if (ordinal < 0 || ordinal >= XDC_STRICT_DEVICES) return XDC_ERR_INVALID;
    bound_dev = ordinal;
    return XDC_OK;
}

static xdc_err_t strict_get_device(int *out)
{
    *out = bound_dev;
    return XDC_OK;
}

static void push(xdc_stream *s, item *it)
{
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static xdc_err_t strict_stream_sync(xdc_stream *s)
{
    xdc_err_t err = resolve(&s);
    if (err != XDC_OK) return err;
    uint64_t snap[MAX_STREAMS];
    pthread_mutex_lock(&g_lock);
    uint64_t target = id_seq[s->id];
    memcpy(snap, s->vc, sizeof snap);
    pthread_mutex_unlock(&g_lock);
    wait_done(s->id, target);
    pthread_mutex_lock(&g_lock);
    join(host_vc, snap);
    pthread_mutex_unlock(&g_lock);
    return sticky(s->id, NULL);
}

static void strict_stream_destroy(xdc_stream *s)
{
    if (!s || s->is_main || s->magic != STREAM_MAGIC) return;
    strict_stream_sync(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thr, NULL);
    if (current == s) current = NULL;
    pthread_mutex_lock(&g_lock);
    id_used[s->id] = false;
    pthread_mutex_unlock(&g_lock);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    s->magic = 0;
    xdc_free(s);
}

/* The caller's stream is one of this backend's (the test stand-in for a framework's CUDA stream): itself. */
static xdc_err_t strict_stream_wrap(void *native, xdc_stream **out)
{
    xdc_stream *s = native;
    XDC_CHECK(resolve(&s));
    *out = s;
    return XDC_OK;
}

static void strict_stream_unwrap(xdc_stream *s) { (void)s; }

static xdc_err_t strict_stream_error(xdc_stream *s, xdc_diag *diag)
{
    xdc_err_t err = resolve(&s);
    return err != XDC_OK ? err : sticky(s->id, diag);
}

static xdc_err_t strict_set_stream(xdc_stream *s)
{
    if (s && s->magic != STREAM_MAGIC) return XDC_ERR_INVALID;
    current = s && s->is_main ? NULL : s;
    return XDC_OK;
}

static xdc_err_t strict_get_stream(xdc_stream **out)
{
    xdc_stream *s = NULL;
    xdc_err_t err = resolve(&s);
    if (err == XDC_OK) *out = s;
    return err;
}

xdc_err_t strict_sync_current(void) { return strict_stream_sync(NULL); }

/* ---- memory ---------------------------------------------------------------------------------------- */

/* The slot whose view holds p (g_lock held, or a caller that only reads immutable slots). */
static slot_t *find_slot(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    int hi = atomic_load(&slots_hi);
    for (int i = 0; i < hi; i++) {
        uintptr_t v = atomic_load(&slots[i].view);
        if (v && a >= v && a < v + (slots[i].bytes ? slots[i].bytes : 1)) return &slots[i];
    }
    return NULL;
}

static xdc_err_t strict_mem_alloc(void **out, size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t mapped = ((bytes ? bytes : 1) + page - 1) / page * page;
    size_t nblocks = (mapped + ((size_t)1 << BLOCK_SHIFT) - 1) >> BLOCK_SHIFT;
    block_state *blocks = xdc_calloc(nblocks, sizeof *blocks);
    if (!blocks) return XDC_ERR_NOMEM;
    int fd = memfd_create("xdc-cpu-strict", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)mapped) != 0) {
        if (fd >= 0) close(fd);
        xdc_free(blocks);
        return XDC_ERR_NOMEM;
    }
    void *view = mmap(NULL, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    void *alias = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (view == MAP_FAILED || alias == MAP_FAILED) {
        if (view != MAP_FAILED) munmap(view, mapped);
        if (alias != MAP_FAILED) munmap(alias, mapped);
        xdc_free(blocks);
        return XDC_ERR_NOMEM;
    }
    pthread_once(&segv_once, install_segv);
    pthread_mutex_lock(&g_lock);
    int k = -1;
    for (int i = 0; i < MAX_ALLOCS && k < 0; i++)
        if (!atomic_load(&slots[i].view)) k = i;
    if (k >= 0) {
        slots[k].bytes = bytes;
        slots[k].alias = alias;
        slots[k].dev = bound_dev;
        slots[k].blocks = blocks;
        atomic_store(&slots[k].mapped, mapped);
        atomic_store(&slots[k].view, (uintptr_t)view);
        if (k + 1 > atomic_load(&slots_hi)) atomic_store(&slots_hi, k + 1);
    }
    pthread_mutex_unlock(&g_lock);
    if (k < 0) {
        XDC_ERROR(XDC_SUB_KERN, "cpu-strict: more than %d device allocations", MAX_ALLOCS);
        munmap(view, mapped);
        munmap(alias, mapped);
        xdc_free(blocks);
        return XDC_ERR_NOMEM;
    }
    *out = view;
    return XDC_OK;
}

/* Waits until every stream ran what was queued so far (no queued op may still use the memory). */
static void device_idle(void)
{
    uint64_t snap[MAX_STREAMS];
    pthread_mutex_lock(&g_lock);
    memcpy(snap, id_seq, sizeof snap);
    pthread_mutex_unlock(&g_lock);
    for (int i = 1; i < STREAM_IDS; i++) wait_done(i, snap[i]);
}

static void strict_mem_free(void *p)
{
    if (!p) return;
    device_idle();
    pthread_mutex_lock(&g_lock);
    slot_t *s = find_slot(p);
    if (!s || (uintptr_t)p != atomic_load(&s->view)) {
        pthread_mutex_unlock(&g_lock);
        XDC_ERROR(XDC_SUB_KERN, "cpu-strict: mem_free(%p): not the start of a device allocation", p);
        return;
    }
    size_t mapped = atomic_load(&s->mapped);
    char *alias = s->alias;
    block_state *blocks = s->blocks;
    atomic_store(&s->view, 0);
    s->alias = NULL;
    s->blocks = NULL;
    pthread_mutex_unlock(&g_lock);
    munmap(p, mapped);
    munmap(alias, mapped);
    xdc_free(blocks);
}

static xdc_err_t strict_host_alloc(void **out, size_t bytes)
{
    size_t rounded = (bytes + 4095) & ~(size_t)4095;
    void *p = xdc_aligned_alloc(4096, rounded ? rounded : 4096);
    if (!p) return XDC_ERR_NOMEM;
    memset(p, 0, rounded ? rounded : 4096);
    *out = p;
    return XDC_OK;
}

static void strict_host_free(void *p) { xdc_free(p); }

static xdc_err_t strict_comm_view(const void *dev_ptr, void **out)
{
    pthread_mutex_lock(&g_lock);
    slot_t *s = find_slot(dev_ptr);
    void *alias = s ? s->alias + ((uintptr_t)dev_ptr - atomic_load(&s->view)) : NULL;
    pthread_mutex_unlock(&g_lock);
    if (!s) return XDC_ERR_INVALID;
    *out = alias;
    return XDC_OK;
}

/* ---- queueing an op: translation and the hazard rule ---------------------------------------------- */

typedef struct {
    slot_t *slot;
    size_t off, ext;
} resolved;

static const char *access_word(int mode) { return (mode & STRICT_W) ? "writes" : "reads"; }

/* The part of argument r inside block b, as offsets from the block's start. */
static void block_part(const resolved *r, size_t b, uint32_t *lo, uint32_t *hi)
{
    size_t base = b << BLOCK_SHIFT, end = r->off + r->ext;
    *lo = (uint32_t)((r->off > base ? r->off : base) - base);
    *hi = (uint32_t)((end < base + BLOCK_BYTES ? end : base + BLOCK_BYTES) - base);
}

/* Checks one argument's byte range against the op's clock (vc of stream sid): refused when it overlaps
 * bytes written by another stream not in the clock, or (for a write) bytes read by one. */
static bool hazard_free(const strict_op *o, const strict_arg *a, const resolved *r, int sid, const uint64_t *vc,
                        char *msg, size_t cap)
{
    if (!r->slot || !r->ext) return true;
    bool w = (a->mode & STRICT_W) != 0;
    size_t b0 = r->off >> BLOCK_SHIFT, b1 = (r->off + r->ext - 1) >> BLOCK_SHIFT;
    for (size_t b = b0; b <= b1; b++) {
        const block_state *bs = &r->slot->blocks[b];
        uint32_t lo, hi;
        block_part(r, b, &lo, &hi);
        for (int k = 0; k < bs->n; k++) {
            const range_entry *e = &bs->e[k];
            if (e->hi <= lo || hi <= e->lo || e->stream == sid || vc[e->stream] >= e->seq) continue;
            if (!e->write && !w) continue;
            size_t base = b << BLOCK_SHIFT;
            size_t olo = base + (e->lo > lo ? e->lo : lo), ohi = base + (e->hi < hi ? e->hi : hi);
            if (e->write)
                snprintf(msg, cap,
                         "%s on stream %d %s argument %s (device buffer %p of %zu bytes, bytes [%zu, %zu)) last "
                         "written by %s on stream %d (op #%llu) with no event or host wait ordering them",
                         o->name, sid, access_word(a->mode), a->name, (void *)atomic_load(&r->slot->view),
                         r->slot->bytes, olo, ohi, e->op, e->stream, (unsigned long long)e->seq);
            else
                snprintf(msg, cap,
                         "%s on stream %d writes argument %s (device buffer %p of %zu bytes, bytes [%zu, %zu)) "
                         "still being read by stream %d (%s, op #%llu) with no event or host wait ordering them",
                         o->name, sid, a->name, (void *)atomic_load(&r->slot->view), r->slot->bytes, olo, ohi,
                         e->stream, e->op, (unsigned long long)e->seq);
            return false;
        }
    }
    return true;
}

/* Two entries of one stream become one covering both (the union of the ranges, the later sequence
 * number, a write if either was): every access ordered after it was ordered after both, so no hazard is
 * hidden; the price is a possible false report on the gap. Used only when a block's list is full. */
static void merge_into(range_entry *into, const range_entry *from)
{
    if (from->lo < into->lo) into->lo = from->lo;
    if (from->hi > into->hi) into->hi = from->hi;
    if (from->seq > into->seq) into->seq = from->seq, into->op = from->op;
    into->write = into->write || from->write;
}

static uint32_t gap(const range_entry *x, const range_entry *y)
{
    return x->hi <= y->lo ? y->lo - x->hi : y->hi <= x->lo ? x->lo - y->hi : 0;
}

/* Shrinks list t (n entries) to at most BLOCK_CAP by merging the closest pair of entries of one stream
 * (of one kind first). With BLOCK_CAP > MAX_STREAMS - 1 such a pair always exists. */
static int shrink(range_entry *t, int n)
{
    while (n > BLOCK_CAP) {
        int bi = -1, bj = -1;
        uint64_t best = UINT64_MAX;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                if (t[i].stream != t[j].stream) continue;
                uint64_t c = gap(&t[i], &t[j]) + (t[i].write != t[j].write ? (uint64_t)1 << 32 : 0);
                if (c < best) best = c, bi = i, bj = j;
            }
        merge_into(&t[bi], &t[bj]);
        t[bj] = t[--n];
    }
    return n;
}

/* Records the access (g_lock held, after hazard_free passed for every argument). Per block: a write
 * removes the bytes it covers from every entry (each overlapping entry is its own stream's or ordered
 * before it: what comes after must be ordered after this write, hence after them); a read removes them
 * from this stream's earlier reads. Then the new entry is added, joined to an adjacent entry of the same
 * op, and entries the host clock covers (every later enqueue is ordered after them) are dropped. */
static void mark(const strict_op *o, const strict_arg *a, const resolved *r, int sid, uint64_t seq)
{
    if (!r->slot || !r->ext) return;
    bool w = (a->mode & STRICT_W) != 0;
    range_entry t[2 * BLOCK_CAP + 1];
    size_t b0 = r->off >> BLOCK_SHIFT, b1 = (r->off + r->ext - 1) >> BLOCK_SHIFT;
    for (size_t b = b0; b <= b1; b++) {
        block_state *bs = &r->slot->blocks[b];
        uint32_t lo, hi;
        block_part(r, b, &lo, &hi);
        range_entry add = {.lo = lo, .hi = hi, .stream = (uint16_t)sid, .write = w, .seq = seq, .op = o->name};
        int n = 0;
        for (int k = 0; k < bs->n; k++) {
            range_entry e = bs->e[k];
            if (host_vc[e.stream] >= e.seq) continue; /* ordered before everything queued from now on */
            bool cut = e.lo < hi && lo < e.hi && (w || (e.stream == sid && !e.write));
            if (!cut) {
                if (e.stream == sid && e.seq == seq && e.write == w && (e.hi == add.lo || add.hi == e.lo)) {
                    merge_into(&add, &e); /* another argument of the same op, adjacent */
                    continue;
                }
                t[n++] = e;
                continue;
            }
            if (e.lo < lo) {
                t[n] = e;
                t[n++].hi = lo;
            }
            if (hi < e.hi) {
                t[n] = e;
                t[n++].lo = hi;
            }
        }
        t[n++] = add;
        n = shrink(t, n);
        memcpy(bs->e, t, (size_t)n * sizeof t[0]);
        bs->n = n;
    }
}

/* Translates argument a into *p (g_lock held). */
static bool translate(const strict_op *o, const strict_arg *a, void **p, resolved *r, char *msg, size_t cap)
{
    memset(r, 0, sizeof *r);
    *p = (void *)a->ptr;
    if (!a->ptr) {
        if ((a->mode & STRICT_OPTIONAL) || a->bytes == 0) return true;
        snprintf(msg, cap, "%s: argument %s is NULL", o->name, a->name);
        return false;
    }
    slot_t *s = find_slot(a->ptr);
    if (a->mode & STRICT_HOST) {
        if (!s) return true;
        snprintf(msg, cap, "%s: argument %s (%p) is cpu-strict device memory where host memory is required", o->name,
                 a->name, a->ptr);
        return false;
    }
    if (!s) {
        if (a->bytes == 0) return true;
        snprintf(msg, cap, "%s: argument %s (%p, %zu bytes) is not cpu-strict device memory (host memory?)", o->name,
                 a->name, a->ptr, a->bytes == STRICT_TO_END ? (size_t)0 : a->bytes);
        return false;
    }
    size_t off = (uintptr_t)a->ptr - atomic_load(&s->view);
    size_t ext = a->bytes == STRICT_TO_END ? s->bytes - off : a->bytes;
    if (ext > s->bytes - off) {
        snprintf(msg, cap, "%s: argument %s (%zu bytes at offset %zu) runs past the end of its allocation of %zu bytes",
                 o->name, a->name, ext, off, s->bytes);
        return false;
    }
    r->slot = s;
    r->off = off;
    r->ext = ext;
    *p = s->alias + off;
    return true;
}

/* ---- communication holds --------------------------------------------------------------------------- */

/* An operation of a communication library (an intra send or receive) reads or writes device memory from
 * its start until the host saw it complete: each hold is one access of a clock id of its own (ids
 * STREAM_IDS .. MAX_STREAMS - 1, one hold at a time each, so a release orders exactly that hold), which
 * the host clock takes in at the release. A stream op queued before that conflicts with it under the
 * hazard rule: rewriting a buffer a send still reads fails every run, not only when the send is slow. */
static bool hold_busy[MAX_STREAMS]; /* g_lock */

static void strict_comm_hold(const void *dev_ptr, size_t bytes, bool write, const char *what, uint64_t *token)
{
    *token = 0;
    pthread_mutex_lock(&g_lock);
    slot_t *sl = find_slot(dev_ptr);
    int id = 0;
    for (int i = STREAM_IDS; i < MAX_STREAMS && !id && sl && bytes; i++)
        if (!hold_busy[i]) id = i;
    if (id) { /* else host memory, or every hold id busy: not tracked */
        size_t off = (uintptr_t)dev_ptr - atomic_load(&sl->view);
        resolved r = {sl, off, bytes < sl->bytes - off ? bytes : sl->bytes - off};
        strict_op o = {.name = what};
        strict_arg a = {.ptr = dev_ptr, .name = "buffer", .bytes = r.ext, .mode = write ? STRICT_W : STRICT_R};
        hold_busy[id] = true;
        uint64_t seq = ++id_seq[id];
        mark(&o, &a, &r, id, seq);
        *token = (uint64_t)id << 56 | seq;
    }
    pthread_mutex_unlock(&g_lock);
}

static void strict_comm_release(uint64_t token)
{
    if (!token) return;
    int id = (int)(token >> 56);
    uint64_t seq = token & (((uint64_t)1 << 56) - 1);
    pthread_mutex_lock(&g_lock);
    if (host_vc[id] < seq) host_vc[id] = seq;
    hold_busy[id] = false;
    pthread_mutex_unlock(&g_lock);
}

static xdc_err_t run_copy(strict_op *o);
static xdc_err_t run_memset(strict_op *o);
static xdc_err_t run_stamp(strict_op *o);

/* The device rule for an op (a kernel; copies and memsets may cross devices): the calling thread is bound
 * to the stream's device and every device argument is that device's memory (g_lock held, after translate). */
static bool same_device(const strict_op *o, const strict_arg *args, const resolved *r, int n, const xdc_stream *s,
                        char *msg, size_t cap)
{
    if (o->fn == run_copy || o->fn == run_memset || o->fn == run_stamp) return true;
    if (s->dev != bound_dev) {
        snprintf(msg, cap, "%s launched on stream %d of device %d from a thread bound to device %d (set_device)",
                 o->name, s->id, s->dev, bound_dev);
        return false;
    }
    for (int k = 0; k < n; k++)
        if (r[k].slot && r[k].slot->dev != s->dev) {
            snprintf(msg, cap, "%s on stream %d of device %d: argument %s is memory of device %d", o->name, s->id,
                     s->dev, args[k].name, r[k].slot->dev);
            return false;
        }
    return true;
}

xdc_err_t strict_submit(strict_op *o, const strict_arg *args, int n, bool wait)
{
    xdc_stream *s = NULL;
    xdc_err_t err = resolve(&s);
    if (err != XDC_OK) return err;
    item *it = xdc_calloc(1, sizeof *it);
    if (!it) {
        pthread_mutex_lock(&g_lock);
        uint64_t at = id_seq[s->id] + 1;
        pthread_mutex_unlock(&g_lock);
        fail_stream(s->id, at, XDC_ERR_NOMEM, "%s: no memory for the queue item", o->name);
        return XDC_ERR_NOMEM;
    }
    it->op = *o;
    xdc_err_t result = XDC_OK;
    if (wait) it->result = &result;
    resolved r[STRICT_MAX_ARGS];
    char msg[512];
    uint64_t snap[MAX_STREAMS];

    pthread_mutex_lock(&g_lock);
    if ((err = sticky(s->id, NULL)) != XDC_OK) goto refuse;
    join(s->vc, host_vc);
    for (int k = 0; k < n; k++)
        if (!translate(o, &args[k], &it->op.p[k], &r[k], msg, sizeof msg)) {
            err = XDC_ERR_INVALID;
            goto failed;
        }
    if (!same_device(o, args, r, n, s, msg, sizeof msg)) {
        err = XDC_ERR_INVALID;
        goto failed;
    }
    for (int k = 0; k < n; k++)
        if (!hazard_free(o, &args[k], &r[k], s->id, s->vc, msg, sizeof msg)) {
            err = XDC_ERR_INVALID;
            goto failed;
        }
    uint64_t seq = ++id_seq[s->id];
    s->vc[s->id] = seq;
    it->seq = seq;
    for (int k = 0; k < n; k++) mark(o, &args[k], &r[k], s->id, seq);
    if (wait) memcpy(snap, s->vc, sizeof snap);
    push(s, it);
    pthread_mutex_unlock(&g_lock);
    if (!wait) return XDC_OK;
    wait_done(s->id, seq);
    pthread_mutex_lock(&g_lock);
    join(host_vc, snap);
    pthread_mutex_unlock(&g_lock);
    return result;

failed:
    fail_stream(s->id, id_seq[s->id] + 1, err, "%s", msg);
refuse:
    pthread_mutex_unlock(&g_lock);
    xdc_free(it);
    return err;
}

/* ---- copies ---------------------------------------------------------------------------------------- */

static xdc_err_t run_copy(strict_op *o)
{
    memcpy(o->p[0], o->p[1], o->z[0]);
    return XDC_OK;
}

static xdc_err_t run_memset(strict_op *o)
{
    memset(o->p[0], o->i[0], o->z[0]);
    return XDC_OK;
}

static xdc_err_t queue_copy(const char *name, void *dst, int dmode, const void *src, int smode, size_t bytes,
                            xdc_stream *s)
{
    xdc_stream *prev = current;
    if (s) {
        if (s->magic != STREAM_MAGIC) return XDC_ERR_INVALID;
        current = s;
    }
    strict_op o = {.name = name, .fn = run_copy, .z = {bytes}};
    strict_arg a[2] = {{dst, "dst", bytes, dmode}, {src, "src", bytes, smode}};
    xdc_stream *on = NULL;
    xdc_err_t err = resolve(&on);
    if (err == XDC_OK) err = injected(name, on);
    if (err == XDC_OK) err = bytes ? strict_submit(&o, a, 2, false) : strict_stream_error(NULL, NULL);
    current = prev;
    return err;
}

static xdc_err_t strict_copy_h2d(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    return queue_copy("copy_h2d", dst, STRICT_W, src, STRICT_R | STRICT_HOST, bytes, s);
}
static xdc_err_t strict_copy_d2h(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    return queue_copy("copy_d2h", dst, STRICT_W | STRICT_HOST, src, STRICT_R, bytes, s);
}
static xdc_err_t strict_copy_d2d(void *dst, const void *src, size_t bytes, xdc_stream *s)
{
    return queue_copy("copy_d2d", dst, STRICT_W, src, STRICT_R, bytes, s);
}

static xdc_err_t strict_memset(void *dst, int value, size_t bytes, xdc_stream *s)
{
    xdc_stream *prev = current;
    if (s) {
        if (s->magic != STREAM_MAGIC) return XDC_ERR_INVALID;
        current = s;
    }
    strict_op o = {.name = "memset", .fn = run_memset, .z = {bytes}, .i = {value}};
    strict_arg a[1] = {{dst, "dst", bytes, STRICT_W}};
    xdc_stream *on = NULL;
    xdc_err_t err = resolve(&on);
    if (err == XDC_OK) err = injected("memset", on);
    if (err == XDC_OK) err = bytes ? strict_submit(&o, a, 1, false) : strict_stream_error(NULL, NULL);
    current = prev;
    return err;
}

/* ---- events ---------------------------------------------------------------------------------------- */

static xdc_err_t strict_event_create(xdc_event **out)
{
    xdc_event *e = xdc_calloc(1, sizeof *e);
    if (!e) return XDC_ERR_NOMEM;
    *out = e;
    return XDC_OK;
}

static void strict_event_destroy(xdc_event *e) { xdc_free(e); }

static xdc_err_t strict_event_create_timed(xdc_event **out)
{
    XDC_CHECK(strict_event_create(out));
    (*out)->timed = true;
    return XDC_OK;
}

/* A timed record's stamp: an item of the stream (p[0] the event, no device arguments) that runs when the
 * stream reaches it. */
static xdc_err_t run_stamp(strict_op *o)
{
    atomic_store(&((xdc_event *)o->p[0])->t_ns, xdc_now_ns());
    return XDC_OK;
}

static xdc_err_t strict_event_record(xdc_event *e, xdc_stream *s)
{
    xdc_err_t err = resolve(&s);
    if (err == XDC_OK) err = injected("event_record", s); /* the event keeps its earlier capture, if any */
    if (err == XDC_OK && e->timed) {
        xdc_stream *prev = current;
        current = s;
        strict_op o = {.name = "event_record", .fn = run_stamp, .p = {e}};
        err = strict_submit(&o, NULL, 0, false);
        current = prev;
    }
    if (err != XDC_OK) return err;
    pthread_mutex_lock(&g_lock);
    join(s->vc, host_vc);
    e->recorded = true;
    e->id = s->id;
    e->seq = id_seq[s->id];
    memcpy(e->vc, s->vc, sizeof e->vc);
    pthread_mutex_unlock(&g_lock);
    return sticky(s->id, NULL);
}

static xdc_err_t strict_stream_wait_event(xdc_stream *s, xdc_event *e)
{
    xdc_err_t err = resolve(&s);
    if (err == XDC_OK) err = injected("stream_wait_event", s);
    if (err != XDC_OK) return err;
    item *it = xdc_calloc(1, sizeof *it);
    if (!it) return XDC_ERR_NOMEM;
    pthread_mutex_lock(&g_lock);
    if (!e->recorded || e->id == s->id) { /* same stream: already in order */
        pthread_mutex_unlock(&g_lock);
        xdc_free(it);
        return sticky(s->id, NULL);
    }
    join(s->vc, e->vc);
    join(s->vc, host_vc);
    it->is_wait = true;
    it->wait_id = e->id;
    it->wait_seq = e->seq;
    it->seq = ++id_seq[s->id];
    s->vc[s->id] = it->seq;
    push(s, it);
    pthread_mutex_unlock(&g_lock);
    return sticky(s->id, NULL);
}

/* What an event stands for, read once under the lock: whether it was recorded, on which stream at which
 * op, and the clock it carries (MAX_STREAMS entries). */
static bool event_snapshot(const xdc_event *e, int *id, uint64_t *seq, uint64_t snap[MAX_STREAMS])
{
    pthread_mutex_lock(&g_lock);
    bool rec = e->recorded;
    *id = e->id;
    *seq = e->seq;
    memcpy(snap, e->vc, MAX_STREAMS * sizeof snap[0]);
    pthread_mutex_unlock(&g_lock);
    return rec;
}

static xdc_err_t strict_event_sync(xdc_event *e)
{
    uint64_t snap[MAX_STREAMS], seq;
    int id;
    if (!event_snapshot(e, &id, &seq, snap)) return XDC_OK;
    wait_done(id, seq);
    pthread_mutex_lock(&g_lock);
    join(host_vc, snap);
    pthread_mutex_unlock(&g_lock);
    return sticky_upto(id, seq, NULL);
}

static xdc_err_t strict_event_query(xdc_event *e, bool *done)
{
    uint64_t snap[MAX_STREAMS], seq;
    int id;
    if (!event_snapshot(e, &id, &seq, snap)) {
        *done = true;
        return XDC_OK;
    }
    pthread_mutex_lock(&d_lock);
    bool d = id_done[id] >= seq;
    pthread_mutex_unlock(&d_lock);
    if (d) {
        pthread_mutex_lock(&g_lock);
        join(host_vc, snap);
        pthread_mutex_unlock(&g_lock);
    }
    *done = d;
    return sticky_upto(id, seq, NULL);
}

static xdc_err_t strict_event_elapsed(xdc_event *start, xdc_event *end, double *ms)
{
    if (!start->timed || !end->timed || !start->recorded || !end->recorded) return XDC_ERR_INVALID;
    XDC_CHECK(strict_event_sync(start));
    XDC_CHECK(strict_event_sync(end));
    *ms = ((double)atomic_load(&end->t_ns) - (double)atomic_load(&start->t_ns)) / 1e6;
    return XDC_OK;
}

const xdc_device_ops xdc_device_strict_ops = {
    .name = "cpu-strict",
    .mem_alloc = strict_mem_alloc,
    .mem_free = strict_mem_free,
    .host_alloc = strict_host_alloc,
    .host_free = strict_host_free,
    .stream_create = strict_stream_create,
    .stream_destroy = strict_stream_destroy,
    .stream_wrap = strict_stream_wrap,
    .stream_unwrap = strict_stream_unwrap,
    .stream_sync = strict_stream_sync,
    .stream_error = strict_stream_error,
    .set_stream = strict_set_stream,
    .get_stream = strict_get_stream,
    .set_device = strict_set_device,
    .get_device = strict_get_device,
    .copy_h2d = strict_copy_h2d,
    .copy_d2h = strict_copy_d2h,
    .copy_d2d = strict_copy_d2d,
    .memset = strict_memset,
    .event_create = strict_event_create,
    .event_destroy = strict_event_destroy,
    .event_create_timed = strict_event_create_timed,
    .event_elapsed = strict_event_elapsed,
    .event_record = strict_event_record,
    .stream_wait_event = strict_stream_wait_event,
    .event_sync = strict_event_sync,
    .event_query = strict_event_query,
    .comm_view = strict_comm_view,
    .comm_hold = strict_comm_hold,
    .comm_release = strict_comm_release,
};
