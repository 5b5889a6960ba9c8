/* orch_manifest.h — the MANIFEST of a run checkpoint (RUN/ckpt/step-NNNNNNNN/MANIFEST): written last by
 * global rank 0 once every worker's files of that step are in place, so a step folder without one is
 * incomplete and ignored. It says which run layout took the checkpoint (workers, mode, codec, topology
 * hash), so `--resume` can refuse a checkpoint of another layout, and carries the run-wide state a resumed
 * run needs beyond the workers' own files: the WAN codec and DiLoCo period in use (a `plan: auto` run may
 * have re-planned them).
 *
 * Format: one JSON object, {"step": 10, "workers": 4, "mode": "sync", "codec": "int8:128",
 * "topology": "<xxh64 hex of the normalized topology>", "run": "<run id>", "wan_codec": "int8",
 * "period": 0}. */
#ifndef ORCH_MANIFEST_H
#define ORCH_MANIFEST_H

#include "common/xdc_err.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "topology/xdc_topology.h"

#include <stdint.h>

typedef struct orch_manifest {
    int64_t step;
    int workers;
    char mode[16];
    char codec[32];     /* the run's WAN codec as the run file (or the planner) set it, canonical text */
    char topology[17];  /* xxh64 of xdc_topology_to_json, 16 hex digits */
    char run[64];       /* run id (informational: a resume may get a new one) */
    char wan_codec[32]; /* the codec in use at the checkpoint (after re-plans) */
    int period;         /* the DiLoCo period in use at the checkpoint */
} orch_manifest;

/* What a checkpoint of this run must say: workers, mode, codec and topology hash from the run file and
 * topology (step, run, wan_codec and period are left zero/empty). */
xdc_err_t orch_manifest_expect(const orch_run_config *c, const xdc_topology *t, orch_manifest *out, xdc_diag *diag);
/* Write RUN/ckpt/step-NNNNNNNN/MANIFEST (temp file created afresh, fsync, rename). XDC_ERR_IO naming the
 * path and errno. */
xdc_err_t orch_manifest_write(const char *run_dir, const orch_manifest *m, xdc_diag *diag);
/* The newest step of RUN/ckpt with a MANIFEST, or -1. */
int64_t orch_manifest_newest(const char *run_dir);
/* Read the MANIFEST of `step`: XDC_ERR_IO when it cannot be read, XDC_ERR_CORRUPT (path and field named)
 * when it does not parse. */
xdc_err_t orch_manifest_read(const char *run_dir, int64_t step, orch_manifest *out, xdc_diag *diag);
/* XDC_ERR_CONFIG when `found` (read from `run_dir`'s checkpoint) was taken by another layout than `want`:
 * diag names the MANIFEST, the field, its value and this run's. */
xdc_err_t orch_manifest_check(const char *run_dir, const orch_manifest *found, const orch_manifest *want,
                              xdc_diag *diag);

#endif /* ORCH_MANIFEST_H */
