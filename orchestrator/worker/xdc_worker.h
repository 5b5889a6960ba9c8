/* xdc_worker.h — the worker runtime's entry point: one process runs one pipeline stage of one replica
 * in one region (docs/runtime.md), started by `xdc agent` with the environment contract set. The
 * command line (`xdc worker`, orchestrator/cli/cmd_worker.c) parses the options and maps the result to
 * an exit code. */
#ifndef XDC_WORKER_H
#define XDC_WORKER_H

#include "common/xdc_err.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/launch/orch_creds.h"

typedef struct xdc_worker_opts {
    const char *topology_path; /* topology file */
    const char *config_path;   /* run file */
    const char *run_dir;       /* the run folder (certificates, checkpoints, logs, traces) */
    int emulate_wan;           /* dial the other regions through the launcher's relays */
    int resume;                /* continue from the newest complete checkpoint */
    const char *device;        /* --device word (NULL: XDC_DEVICE, else the topology; docs/runtime.md) */
    rdzv_flags rdzv;        /* --rdzv (else XDC_RDZV, the run file's rdzv:, the built-in store) and etcd's TLS files */
    orch_creds_flags creds; /* --cert-dir --ca --crl (orch_creds.h: else XDC_*, else RUN_DIR/certs) */
} xdc_worker_opts;

/* Set up, train, report to the rendezvous and tear down. XDC_OK when the run completed; otherwise the
 * error, with what failed in diag. Errors in the topology or run file are printed to stderr (every one
 * with file:line:col) and return XDC_ERR_CONFIG, as does an identity the environment does not give. A
 * device word that names no device is XDC_ERR_INVALID; a node with fewer GPUs than its device needs is
 * XDC_ERR_UNAVAILABLE, and a device the kernel registry refuses returns the registry's error, both
 * before any set-up (orchestrator/launch/orch_device.h). */
xdc_err_t xdc_worker_run(const xdc_worker_opts *opts, xdc_diag *diag);

#endif /* XDC_WORKER_H */
