/* intra_shm.h — the shared-memory segment of one CPU-backend group: its layout (per-rank slots, the
 * collective staging buffers, one byte ring per directed rank pair), joining it, the step barrier the
 * collectives synchronise on, futex sleeping, peer liveness, and direct copies between the ranks'
 * address spaces. Private to intra/. */
#ifndef XDC_INTRA_SHM_H
#define XDC_INTRA_SHM_H

#include "common/xdc_err.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define INTRA_SHM_CHUNK \
    ((size_t)1          \
     << 17) /* bytes per rank per half of the collective staging area; small enough that a piece stays in L2 (measured: 128 KiB beats 1 MiB 4x at 4 ranks) */
#define INTRA_SHM_RING ((size_t)1 << 19) /* bytes of one directed p2p ring */

typedef struct intra_shm_slot {
    _Atomic int32_t pid;
    _Atomic int32_t arrived;
    _Atomic uint64_t starttime; /* /proc/<pid>/stat field 22, guards against pid reuse */
    _Atomic uint64_t step;      /* last collective step this rank arrived at */
    _Atomic uint64_t sig[2];    /* operation signature of the step, by step parity */
    _Atomic uint32_t bell;      /* p2p doorbell: bumped by anyone who gives this rank work */
    _Atomic uint32_t sleeping;  /* the rank's p2p thread is (about to be) in futex_wait on bell */
    _Atomic uint32_t direct;    /* INTRA_DIRECT_*: whether this rank can read and write every peer's memory */
    _Atomic uint64_t probe[2];  /* address and value of a word in this process peers read to test direct access */
    _Atomic uint64_t buf[2];    /* single-copy collectives: this rank's send and recv buffer addresses */
    /* ... and where each lies in a shared allocation (xdc_shared_alloc): its memfd's descriptor in this
     * process (-1: not shared), inode and byte offset. Peers map such a buffer and use it in place. */
    _Atomic int32_t shared_fd[2];
    _Atomic uint64_t shared_ino[2], shared_off[2];
} __attribute__((aligned(128))) intra_shm_slot;
_Static_assert(sizeof(intra_shm_slot) == 128, "a rank's slot is one 128-byte block (docs/intra.md)");

/* slot.direct: unknown until the rank joined, then whether process_vm_readv of every peer worked. */
enum { INTRA_DIRECT_UNKNOWN, INTRA_DIRECT_YES, INTRA_DIRECT_NO };

typedef struct intra_shm_hdr {
    _Atomic int32_t size;
    _Atomic uint32_t coll_bell; /* bumped on every step arrival; step waiters sleep on it */
    _Atomic uint32_t coll_waiters;
    _Atomic int32_t abort_rank; /* rank + 1 of the first rank that failed the group */
    char abort_msg[256];
} intra_shm_hdr;

typedef struct intra_shm_ring {
    _Atomic uint64_t head; /* bytes consumed, written by the receiver */
    char pad0[56];
    _Atomic uint64_t tail; /* bytes produced, written by the sender */
    char pad1[56];
} intra_shm_ring;

typedef struct intra_shm {
    char name[256];
    int rank, size;
    uint8_t *base;
    size_t bytes;
    intra_shm_hdr *hdr;
    intra_shm_slot *slots; /* (size,) */
    size_t coll_off, ring_off, ring_stride;
    _Atomic int cancel; /* set by the owner to make step waits return XDC_ERR_CLOSED */
    uint64_t probe;     /* random word peers read through process_vm_readv: the process at the pid is us */
} intra_shm;

/* Open or create the segment `name` and wait until all `size` ranks joined (timeout_ms < 0: forever). */
xdc_err_t intra_shm_join(intra_shm *s, const char *name, int rank, int size, int64_t timeout_ms, xdc_diag *diag);
void intra_shm_leave(intra_shm *s);

/* (INTRA_SHM_CHUNK,) bytes: staging buffer of `rank` for step parity `half`, and the shared result. */
uint8_t *intra_shm_stage(const intra_shm *s, int rank, int half);
uint8_t *intra_shm_result(const intra_shm *s, int half);
intra_shm_ring *intra_shm_ring_of(const intra_shm *s, int src, int dst);
uint8_t *intra_shm_ring_data(intra_shm_ring *ring); /* (INTRA_SHM_RING,) bytes */

/* Arrive at collective step `step` with signature `sig` and wait for every rank. Fails with
 * XDC_ERR_TIMEOUT after timeout_ms, XDC_ERR_PEER_LOST when a missing rank died or the group was
 * aborted, XDC_ERR_PROTO when ranks started different operations; msg names the rank(s). */
xdc_err_t intra_shm_step(intra_shm *s, uint64_t step, uint64_t sig, int64_t timeout_ms, const char *what, char *msg,
                         size_t cap);
/* "rank 2 (pid 77, alive), rank 3 (pid 78, dead)" for the ranks that have not arrived at `step`. */
void intra_shm_describe_missing(const intra_shm *s, uint64_t step, char *out, size_t cap);
/* 1 when the process of `rank` still runs (not exited, not a zombie, same start time). */
int intra_shm_rank_alive(const intra_shm *s, int rank);
/* Record this rank's failure for the others (first one wins) and wake everyone. */
void intra_shm_abort(intra_shm *s, const char *msg);
/* When the group was aborted by another rank: copy its message and return 1. */
int intra_shm_aborted(const intra_shm *s, char *msg, size_t cap);

/* 1 when every rank published INTRA_DIRECT_YES: collectives may then copy straight between the ranks'
 * own buffers (intra_shm_peer_copy). Read after a step every rank passed, so all ranks agree. */
int intra_shm_direct(const intra_shm *s);
/* Copy `bytes` between local memory and `remote` in the address space of `peer` (write: local -> peer)
 * with process_vm_readv/writev. msg names the peer and the errno on failure (XDC_ERR_PEER_LOST when the
 * peer's process is gone, XDC_ERR_IO otherwise). */
xdc_err_t intra_shm_peer_copy(const intra_shm *s, int peer, void *local, uint64_t remote, size_t bytes, int write,
                              char *msg, size_t cap);

/* Shared (cross-process) futex on a 32-bit word. wait returns when *addr != val, on wake, or after
 * timeout_ms. */
void intra_futex_wait(_Atomic uint32_t *addr, uint32_t val, int timeout_ms);
void intra_futex_wake(_Atomic uint32_t *addr);
/* Bump a doorbell and wake its sleeper if it sleeps. */
void intra_shm_ring_bell(intra_shm *s, int rank);

#endif /* XDC_INTRA_SHM_H */
