/* orch_launch.h — the launcher behind `xdc launch` and `xdc coordinator` (option parsing lives in
 * orchestrator/cli/cmd_launch.c): set up a run (run folder, certificates, the rendezvous store, the
 * emulated WAN), start one `xdc agent` per node (not as the coordinator) and supervise the run
 * (orch_proc.h) to its summary line. */
#ifndef ORCH_LAUNCH_H
#define ORCH_LAUNCH_H

#include "common/xdc_err.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "topology/xdc_topology.h"
#include "orchestrator/launch/orch_chaos.h"
#include "orchestrator/launch/orch_creds.h"
#include "wan/emu/xdc_wan_emu.h"

#include <stdint.h>

typedef struct orch_launch_opts {
    const char *topology, *config; /* required */
    const char *run_id;            /* NULL: run-<unix time>-<pid> */
    const char *run_dir;           /* NULL: runs/<run-id>; required for the coordinator */
    int emulate;                   /* -1: decide (yes when every region is on this host) */
    const char *host;              /* rendezvous bind address */
    int port;                      /* rendezvous port (0: any) */
    int coordinator;               /* `xdc coordinator`: host the store, start no agents */
    int resume;
    xdc_wan_outage outages[XDC_WAN_MAX_OUTAGES]; /* cut every emulated link on this schedule (from its relay's start) */
    int n_outages;
    double degrade;     /* emulated links run at this fraction of the topology's bandwidth */
    const char *device; /* --device word for every region (NULL: XDC_DEVICE, else the topology); passed to agents */
    rdzv_flags rdzv;    /* --rdzv (else XDC_RDZV, the run file's rdzv:, the built-in store) and etcd's TLS files */
    /* --cert-dir --ca --crl (orch_creds.h). Not given: the launcher makes a CA and every member's key in
     * RUN_DIR/certs (one machine, or a run folder shared by the nodes). Given: it makes none and uses
     * coordinator-0.pem/.key from the folder; each agent brings its own (the launcher's agents get these). */
    orch_creds_flags creds;
    /* --exec -- PROG ARGS (NULL-terminated, [0] the program): the agents run it in every worker slot instead
     * of `xdc worker` (orch_agent.h); the run ends with a line counting the members instead of the training
     * summary. NULL: `xdc worker`. */
    char *const *exec_argv;
    /* --max-restarts N (`xdc launch`, elastic runs): a region that left the run has its agents started again,
     * at most N times per region, and rejoins at an outer round. 0: a region that left stays out. */
    int max_restarts;
    /* The round decider's role (orch_decider.h, etcd): --standby (`xdc coordinator`): join a live run's store
     * as it is and stand by for the role; --decider-ttl S: its lease (0: RDZV_ETCD_TTL_S). */
    int standby, decider_ttl_s;
    orch_chaos_spec chaos; /* --chaos SEED[:RATE[:KINDS]] (`xdc launch`): inject faults (orch_chaos.h); .on 0: none */
} orch_launch_opts;

/* The emulator's model of topology link `l` (rate, RTT, jitter, loss; draws seeded by `seed`): what the
 * launcher's relays, `xdc wan-emu` and `xdc doctor --emulate` carry a link through. */
void orch_link_model(const xdc_link *l, uint64_t seed, xdc_wan_link_model *m);

/* The defaults of `xdc launch` (coordinator 0) or `xdc coordinator` (1): bind 127.0.0.1:any or
 * 0.0.0.0:29400, emulation decided, full bandwidth. */
void orch_launch_opts_default(orch_launch_opts *o, int coordinator);

/* Run to the end. XDC_OK after a successful run (its summary printed); XDC_ERR_CONFIG for the topology
 * or run file (errors printed to stderr); a planner or set-up error with diag saying which step;
 * XDC_ERR_UNAVAILABLE when members never joined; when a member failed, the error of the member blamed
 * for it (orch_failure.h: its own report's error, XDC_ERR_TIMEOUT when it stopped answering) with
 * *agent_exit 0, or, for a worker its agent saw end and with nobody to blame, XDC_ERR_PEER_LOST and
 * *agent_exit the failed agent's exit status (0 when a signal ended it) (the coordinator:
 * XDC_ERR_UNAVAILABLE);
 * XDC_ERR_INTERRUPTED after SIGINT/SIGTERM. Failures are reported on stderr as they happen. */
xdc_err_t orch_launch_run(const orch_launch_opts *o, int *agent_exit, xdc_diag *diag);

#endif /* ORCH_LAUNCH_H */
