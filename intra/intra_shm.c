/* intra_shm.c — the CPU backend's shared-memory segment: POSIX shm_open + mmap, joining with a deadline,
 * the collective step barrier (per-rank step counters, spin briefly then sleep on a shared futex), and
 * liveness of peers from /proc (a SIGKILLed rank that is still an unreaped zombie counts as dead). */
#include "intra/intra_shm.h"

#include "common/xdc_time.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SLICE_MS 10 /* longest futex sleep between deadline and liveness checks */
/* Poll this long before sleeping on the futex: a futex wake-up costs tens of microseconds on a VM,
 * more than most steps take. The poll yields the core every few rounds, so when ranks outnumber cores
 * the rank being waited for gets to run (shorter spins when oversubscribed measured no better). */
#define SPIN_NS  100000

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }


void intra_futex_wait(_Atomic uint32_t *addr, uint32_t val, int timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, val, &ts, NULL, 0);
}

void intra_futex_wake(_Atomic uint32_t *addr)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void intra_shm_ring_bell(intra_shm *s, int rank)
{
    intra_shm_slot *sl = &s->slots[rank];
    atomic_fetch_add(&sl->bell, 1);
    if (atomic_load(&sl->sleeping)) intra_futex_wake(&sl->bell);
}

/* Field 22 (starttime) and the state of /proc/<pid>/stat; 0 when the process is gone. */
static int proc_stat(int pid, char *state, uint64_t *starttime)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
    if (!p || p[1] != ' ') return 0;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p) p++;
    }
    *starttime = p ? strtoull(p, NULL, 10) : 0;
    return 1;
}

int intra_shm_rank_alive(const intra_shm *s, int rank)
{
    const intra_shm_slot *sl = &s->slots[rank];
    int pid = atomic_load(&sl->pid);
    uint64_t want = atomic_load(&sl->starttime);
    if (pid <= 0 || want == 0) return 1; /* not (fully) joined yet: absent, not dead */
    char state = 0;
    uint64_t st = 0;
    if (!proc_stat(pid, &state, &st)) return 0;
    if (state == 'Z' || state == 'X') return 0;
    return st == want;
}

static void wake_all(intra_shm *s)
{
    atomic_fetch_add(&s->hdr->coll_bell, 1);
    if (atomic_load(&s->hdr->coll_waiters)) intra_futex_wake(&s->hdr->coll_bell);
    for (int r = 0; r < s->size; r++) intra_shm_ring_bell(s, r);
}

void intra_shm_abort(intra_shm *s, const char *msg)
{
    int32_t expect = 0;
    if (atomic_compare_exchange_strong(&s->hdr->abort_rank, &expect, -1)) {
        snprintf(s->hdr->abort_msg, sizeof s->hdr->abort_msg, "%s", msg);
        atomic_store(&s->hdr->abort_rank, s->rank + 1);
    }
    wake_all(s);
}

int intra_shm_aborted(const intra_shm *s, char *msg, size_t cap)
{
    int32_t who = atomic_load(&s->hdr->abort_rank);
    if (who <= 0 || who - 1 == s->rank) return 0;
    snprintf(msg, cap, "rank %d failed the group: %s", who - 1, s->hdr->abort_msg);
    return 1;
}

uint8_t *intra_shm_stage(const intra_shm *s, int rank, int half)
{
    return s->base + s->coll_off + ((size_t)rank * 2 + (size_t)half) * INTRA_SHM_CHUNK;
}

uint8_t *intra_shm_result(const intra_shm *s, int half)
{
    return s->base + s->coll_off + ((size_t)s->size * 2 + (size_t)half) * INTRA_SHM_CHUNK;
}

intra_shm_ring *intra_shm_ring_of(const intra_shm *s, int src, int dst)
{
    return (intra_shm_ring *)(s->base + s->ring_off + ((size_t)src * (size_t)s->size + (size_t)dst) * s->ring_stride);
}

uint8_t *intra_shm_ring_data(intra_shm_ring *ring) { return (uint8_t *)(ring + 1); }

/* Append "rank R (pid P, state)" for each rank whose `arrived` (join) or step is behind. */
static void describe_ranks(const intra_shm *s, int joining, uint64_t step, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (int r = 0; r < s->size && len < cap; r++) {
        const intra_shm_slot *sl = &s->slots[r];
        int behind = joining ? !atomic_load(&sl->arrived) : atomic_load(&sl->step) < step;
        if (!behind) continue;
        int pid = atomic_load(&sl->pid);
        int n = pid > 0 ? snprintf(out + len, cap - len, "%srank %d (pid %d, %s)", len ? ", " : "", r, pid,
                                   intra_shm_rank_alive(s, r) ? "alive" : "dead")
                        : snprintf(out + len, cap - len, "%srank %d (never joined)", len ? ", " : "", r);
        if (n < 0) break;
        len += (size_t)n;
    }
}

void intra_shm_describe_missing(const intra_shm *s, uint64_t step, char *out, size_t cap)
{
    describe_ranks(s, 0, step, out, cap);
    if (!out[0]) snprintf(out, cap, "every rank has arrived");
}

static int all_at(const intra_shm *s, int joining, uint64_t step)
{
    for (int r = 0; r < s->size; r++) {
        if (joining ? !atomic_load_explicit(&s->slots[r].arrived, memory_order_acquire)
                    : atomic_load_explicit(&s->slots[r].step, memory_order_acquire) < step)
            return 0;
    }
    return 1;
}

/* Wait until all ranks joined (joining) or reached `step`; checks deadline, abort and liveness. */
static xdc_err_t wait_all(intra_shm *s, int joining, uint64_t step, int64_t timeout_ms, const char *what, char *msg,
                          size_t cap)
{
    uint64_t spin_end = xdc_now_ns() + SPIN_NS;
    for (unsigned i = 0;; i++) {
        if (all_at(s, joining, step)) return XDC_OK;
        if (i % 16 == 15) {
            if (xdc_now_ns() > spin_end) break;
            sched_yield(); /* ranks may outnumber cores: let the one we wait for run */
        }
    }
    uint64_t deadline = xdc_deadline_ms(timeout_ms);
    char who[256];
    for (;;) {
        uint32_t seen = atomic_load(&s->hdr->coll_bell);
        if (all_at(s, joining, step)) return XDC_OK;
        if (intra_shm_aborted(s, msg, cap)) return XDC_ERR_PEER_LOST;
        if (atomic_load(&s->cancel)) {
            snprintf(msg, cap, "%s: communicator destroyed", what);
            return XDC_ERR_CLOSED;
        }
        for (int r = 0; r < s->size; r++) {
            int behind = joining ? !atomic_load(&s->slots[r].arrived) : atomic_load(&s->slots[r].step) < step;
            /* re-read the step after the liveness check: the rank may have arrived, passed and
             * exited between the two reads; a dead rank cannot arrive later */
            if (behind && !intra_shm_rank_alive(s, r) &&
                (joining ? !atomic_load(&s->slots[r].arrived) : atomic_load(&s->slots[r].step) < step)) {
                snprintf(msg, cap, "%s: rank %d (pid %d) died before arriving", what, r,
                         (int)atomic_load(&s->slots[r].pid));
                return XDC_ERR_PEER_LOST;
            }
        }
        if (xdc_deadline_passed(deadline)) {
            describe_ranks(s, joining, step, who, sizeof who);
            snprintf(msg, cap, "%s: %s did not arrive within %lld ms", what, who, (long long)timeout_ms);
            return XDC_ERR_TIMEOUT;
        }
        atomic_fetch_add(&s->hdr->coll_waiters, 1);
        int left = xdc_deadline_poll_ms(deadline);
        intra_futex_wait(&s->hdr->coll_bell, seen, left < SLICE_MS ? (left > 0 ? left : 1) : SLICE_MS);
        atomic_fetch_sub(&s->hdr->coll_waiters, 1);
    }
}

xdc_err_t intra_shm_step(intra_shm *s, uint64_t step, uint64_t sig, int64_t timeout_ms, const char *what, char *msg,
                         size_t cap)
{
    intra_shm_slot *me = &s->slots[s->rank];
    atomic_store_explicit(&me->sig[step & 1], sig, memory_order_relaxed);
    atomic_store_explicit(&me->step, step, memory_order_release);
    atomic_fetch_add(&s->hdr->coll_bell, 1);
    if (atomic_load(&s->hdr->coll_waiters)) intra_futex_wake(&s->hdr->coll_bell);
    xdc_err_t rc = wait_all(s, 0, step, timeout_ms, what, msg, cap);
    if (rc != XDC_OK) return rc;
    /* A rank may already be one step further, but it writes sig[(step + 1) & 1], not ours. */
    for (int r = 0; r < s->size; r++) {
        if (atomic_load_explicit(&s->slots[r].sig[step & 1], memory_order_relaxed) != sig) {
            snprintf(msg, cap,
                     "%s: rank %d started a different collective (other operation, size or type) "
                     "than rank %d at this point",
                     what, r, s->rank);
            return XDC_ERR_PROTO;
        }
    }
    return XDC_OK;
}

int intra_shm_direct(const intra_shm *s)
{
    for (int r = 0; r < s->size; r++)
        if (atomic_load(&s->slots[r].direct) != INTRA_DIRECT_YES) return 0;
    return 1;
}

xdc_err_t intra_shm_peer_copy(const intra_shm *s, int peer, void *local, uint64_t remote, size_t bytes, int write,
                              char *msg, size_t cap)
{
    pid_t pid = (pid_t)atomic_load(&s->slots[peer].pid);
    size_t done = 0;
    while (done < bytes) {
        struct iovec l = {(uint8_t *)local + done, bytes - done},
                     r = {(void *)(uintptr_t)(remote + done), bytes - done};
        ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0) {
            int e = n < 0 ? errno : EFAULT;
            snprintf(msg, cap, "%s %zu bytes %s rank %d (pid %d): %s", write ? "writing" : "reading", bytes - done,
                     write ? "to" : "from", peer, (int)pid, strerror(e));
            return e == ESRCH ? XDC_ERR_PEER_LOST : XDC_ERR_IO;
        }
        done += (size_t)n;
    }
    return XDC_OK;
}

/* Whether this rank reads every peer's probe word (process_vm_readv fails under a seccomp profile
 * without it, or where ptrace access between the ranks is denied; a random value also rules out a
 * different process at the same pid, as in another pid namespace). XDC_INTRA_SINGLE_COPY=0 turns direct
 * copies off. */
static uint32_t probe_peers(const intra_shm *s)
{
    const char *env = getenv("XDC_INTRA_SINGLE_COPY");
    if (env && env[0] == '0') return INTRA_DIRECT_NO;
    char msg[160];
    for (int r = 0; r < s->size; r++) {
        uint64_t v = 0;
        if (r != s->rank && (intra_shm_peer_copy(s, r, &v, atomic_load(&s->slots[r].probe[0]), sizeof v, 0, msg,
                                                 sizeof msg) != XDC_OK ||
                             v != atomic_load(&s->slots[r].probe[1])))
            return INTRA_DIRECT_NO;
    }
    return INTRA_DIRECT_YES;
}

xdc_err_t intra_shm_join(intra_shm *s, const char *name, int rank, int size, int64_t timeout_ms, xdc_diag *diag)
{
    memset(s, 0, sizeof *s);
    if (strlen(name) >= sizeof s->name || name[0] != '/' || strchr(name + 1, '/')) {
        xdc_diag_set(diag, "intra cpu: bad shared-memory name \"%s\" (want /name, < 255 bytes)", name);
        return XDC_ERR_CONFIG;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rank = rank;
    s->size = size;
    size_t hdr_bytes = align_up(sizeof(intra_shm_hdr), 128) + (size_t)size * sizeof(intra_shm_slot);
    s->coll_off = align_up(hdr_bytes, 4096);
    s->ring_off = s->coll_off + ((size_t)size * 2 + 2) * INTRA_SHM_CHUNK;
    s->ring_stride = sizeof(intra_shm_ring) + INTRA_SHM_RING;
    s->bytes = s->ring_off + (size_t)size * (size_t)size * s->ring_stride;

    int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        xdc_diag_set(diag, "intra cpu: shm_open %s: %s", name, strerror(errno));
        return XDC_ERR_IO;
    }
    struct stat st;
    /* Every rank truncates to the same size, so the order of the calls does not matter. */
    if (fstat(fd, &st) != 0 || ((size_t)st.st_size < s->bytes && ftruncate(fd, (off_t)s->bytes) != 0)) {
        xdc_diag_set(diag, "intra cpu: sizing %s to %zu bytes: %s", name, s->bytes, strerror(errno));
        close(fd);
        shm_unlink(name);
        return XDC_ERR_IO;
    }
    void *base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        xdc_diag_set(diag, "intra cpu: mmap %s (%zu bytes): %s", name, s->bytes, strerror(errno));
        shm_unlink(name);
        return XDC_ERR_IO;
    }
    s->base = base;
    s->hdr = (intra_shm_hdr *)base;
    s->slots = (intra_shm_slot *)(s->base + align_up(sizeof(intra_shm_hdr), 128));

    xdc_err_t rc = XDC_ERR_CONFIG;
    int32_t expect = 0;
    if (!atomic_compare_exchange_strong(&s->hdr->size, &expect, size) && expect != size) {
        xdc_diag_set(diag, "intra cpu: rank %d joined %s with size %d, but the group has size %d", rank, name, size,
                     (int)expect);
        goto fail;
    }
    expect = 0;
    intra_shm_slot *me = &s->slots[rank];
    if (!atomic_compare_exchange_strong(&me->pid, &expect, (int32_t)getpid())) {
        xdc_diag_set(diag, "intra cpu: rank %d of %s already joined by pid %d", rank, name, (int)expect);
        goto fail;
    }
    char state;
    uint64_t start = 0;
    proc_stat(getpid(), &state, &start);
    atomic_store(&me->starttime, start);
    if (getrandom(&s->probe, sizeof s->probe, 0) != (ssize_t)sizeof s->probe) s->probe = xdc_now_ns();
    atomic_store(&me->probe[0], (uint64_t)(uintptr_t)&s->probe);
    atomic_store(&me->probe[1], s->probe);
    atomic_store_explicit(&me->arrived, 1, memory_order_release);
    atomic_fetch_add(&s->hdr->coll_bell, 1);
    intra_futex_wake(&s->hdr->coll_bell);

    char msg[384];
    rc = wait_all(s, 1, 0, timeout_ms, "joining the group", msg, sizeof msg);
    if (rc != XDC_OK) {
        xdc_diag_set(diag, "intra cpu: rank %d/%d on %s: %s", rank, size, name, msg);
        goto fail;
    }
    /* published before this rank's first collective step, so every rank reads it after that step */
    atomic_store(&me->direct, probe_peers(s));
    if (rank == 0) shm_unlink(name); /* everyone has it mapped; nothing is left behind on a crash */
    return XDC_OK;
fail:
    munmap(s->base, s->bytes);
    shm_unlink(name);
    s->base = NULL;
    return rc;
}

void intra_shm_leave(intra_shm *s)
{
    if (s->base) munmap(s->base, s->bytes);
    s->base = NULL;
}
