/* orch_agent.h — the node agent behind `xdc agent` (option parsing lives in orchestrator/cli/cmd_agent.c):
 * work out which node of which region this is, start one `xdc worker` (or, with --exec, the user's
 * program on libxdc) per worker slot with the environment contract, and supervise them (orch_proc.h). */
#ifndef ORCH_AGENT_H
#define ORCH_AGENT_H

#include "common/xdc_err.h"
#include "orchestrator/launch/orch_creds.h"
#include "orchestrator/launch/orch_device.h"
#include "orchestrator/launch/orch_identity.h"
#include "orchestrator/rdzv/orch_rdzv.h"

typedef struct orch_agent_opts {
    const char *topology, *config, *run_dir; /* required */
    int emulate_wan, resume;                 /* passed on to the workers */
    orch_identity_flags id;                  /* --region --node --host --coordinator --run-id */
    const char *device;                      /* --device word (NULL: XDC_DEVICE, else the topology) */
    const orch_device_probe *probe;          /* the kernel registry's answers (NULL: no node check) */
    orch_creds_flags creds;                  /* --cert-dir --ca --crl: this node's own credentials */
    rdzv_flags rdzv; /* --rdzv (else XDC_RDZV, the run file's rdzv:) and etcd's TLS files; passed on */
    /* --exec -- PROG ARGS: each worker slot runs this program (NULL-terminated argv, [0] the program) instead
     * of `xdc worker`, with the environment contract and XDC_TOPOLOGY XDC_CONFIG XDC_RUN_DIR
     * XDC_EMULATE_WAN XDC_CERT_DIR XDC_CA XDC_CRL XDC_RDZV (libxdc reads them; docs/api.md).
     * NULL: `xdc worker`. */
    char *const *exec_argv;
} orch_agent_opts;

/* Set up and supervise this node's workers until they end. XDC_OK when every worker exited 0;
 * XDC_ERR_CONFIG for a topology, run file, rendezvous value (neither builtin nor etcd://), identity,
 * credentials (a worker's key or certificate, the CA or CRL missing) or worker-environment problem (with
 * etcd and no coordinator given, etcd's HOST:PORT stands for it) (topology errors are printed
 * to stderr, the rest is in diag); XDC_ERR_INVALID for a device word that names no device; before any
 * worker starts, the device check (orch_device_check_node: XDC_ERR_UNAVAILABLE when the node sees fewer
 * GPUs than it needs, the registry's refusal of the device); XDC_ERR_UNAVAILABLE when a worker cannot
 * start; XDC_ERR_PEER_LOST
 * when a worker failed, *worker_exit its exit status (0 when a signal ended it); XDC_ERR_INTERRUPTED
 * after SIGINT/SIGTERM. A failure also leaves RUN_DIR/failed-<region>-<node> for the launcher. */
xdc_err_t orch_agent_run(const orch_agent_opts *o, int *worker_exit, xdc_diag *diag);

#endif /* ORCH_AGENT_H */
