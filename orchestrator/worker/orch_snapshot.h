/* orch_snapshot.h — a worker's snapshot of its last outer round (streaming: fragment round, once it landed), in
 * a local file (docs/runtime.md, "Rejoining"): what a restarted worker of an elastic DiLoCo or streaming run
 * rejoins from, taking only the rounds it missed. The file is an xdc_ckpt blob (model/xdc_ckpt.h: header, XXH64
 * checksum, zstd frame, written to NAME.tmp and renamed over the last one, so a process killed mid-write leaves
 * the previous snapshot whole) of one buffer: orch_snapshot_meta, then the global parameters, the outer momentum
 * and the AdamW moments m and v (n fp32 each). A snapshot loads only whole, of a model of n parameters, and with
 * its global parameters hashing to the meta's hash. */
#ifndef ORCH_SNAPSHOT_H
#define ORCH_SNAPSHOT_H

#include "common/xdc_err.h"
#include "model/xdc_ckpt.h"

#include <stddef.h>
#include <stdint.h>

#define ORCH_SNAPSHOT_FILE "outer-round.snap"

#define ORCH_SNAP_HISTORY 256 /* the rounds' hashes a member keeps and its snapshot carries (orch_warm_chain) */

/* A round's global parameters' hash after its outer step. */
typedef struct {
    int64_t round;
    uint64_t hash;
} orch_round_hash;

typedef struct orch_snapshot_meta {
    uint64_t n;     /* parameters of the stage */
    int64_t round;  /* the outer round's step (its decision's) */
    int64_t step;   /* the worker's step when it was taken (the round's, or overlap_steps / streaming's 1 later) */
    int64_t adam_t; /* AdamW steps taken */
    uint64_t epoch, batch; /* data position */
    uint64_t hash;         /* xxh64 of the global parameters (n fp32) */
    /* the hashes of the last rounds its member kept, oldest first, this one's the newest: the worker restarted
     * from the snapshot knows them again, so as a donor it can still tell a later joiner whose snapshot is of
     * one of those rounds that it holds this run's model (orch_warm_chain) */
    uint64_t n_hist;
    orch_round_hash hist[ORCH_SNAP_HISTORY];
} orch_snapshot_meta;

enum { ORCH_SNAP_GLOBAL, ORCH_SNAP_MOM, ORCH_SNAP_M, ORCH_SNAP_V, ORCH_SNAP_PARTS };

/* Bytes of a snapshot buffer of n parameters (the meta, then the parts), and its meta and parts in buf. */
size_t orch_snapshot_bytes(size_t n);
void orch_snapshot_parts(void *buf, size_t n, orch_snapshot_meta **meta, float *part[ORCH_SNAP_PARTS]);
/* Write buf (orch_snapshot_bytes(n), meta filled in) as `dir`/ORCH_SNAPSHOT_FILE, as opt says. */
xdc_err_t orch_snapshot_save(const char *dir, const void *buf, size_t n, const xdc_ckpt_blob_opt *opt, xdc_diag *diag);
/* Read `dir`/ORCH_SNAPSHOT_FILE into buf: XDC_ERR_IO when there is none, XDC_ERR_CONFIG when it holds another
 * model, XDC_ERR_CORRUPT on a bad checksum or global parameters that do not hash to its meta's hash. */
xdc_err_t orch_snapshot_load(const char *dir, void *buf, size_t n, xdc_diag *diag);

#endif /* ORCH_SNAPSHOT_H */
