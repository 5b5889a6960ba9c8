/* orch_identity.h — who this process is in a run: a node's identity for `xdc agent` (region, node index
 * and count within the region, host, run id, coordinator) and a worker's ranks, resolved from explicit
 * flags, then XDC_* variables, then torchrun, Open MPI, PMIx/PMI and Slurm variables, then the topology
 * (this host's place in its region's node list). Every value remembers which flag or variable supplied
 * it, for the log line and for error messages.
 *
 * The inverse, orch_identity_worker_env(), builds the environment contract of DESIGN.md for one worker
 * slot: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT XDC_RUN_ID XDC_REGION
 * XDC_REGION_INDEX XDC_NUM_REGIONS XDC_GLOBAL_RANK XDC_GLOBAL_WORLD_SIZE XDC_COORDINATOR, plus
 * XDC_NODE_RANK, XDC_NUM_NODES and XDC_HOST (the node's name in the topology). A worker that resolves
 * its identity from that environment gets the same values back. */
#ifndef ORCH_IDENTITY_H
#define ORCH_IDENTITY_H

#include "common/xdc_err.h"
#include "topology/xdc_topology.h"

#include <stddef.h>

typedef enum {
    /* node level: what an agent needs */
    ORCH_ID_RUN_ID = 0,
    ORCH_ID_REGION,
    ORCH_ID_REGION_INDEX,
    ORCH_ID_NUM_REGIONS,
    ORCH_ID_NODE,      /* index of this node within its region */
    ORCH_ID_NUM_NODES, /* nodes in the region */
    ORCH_ID_HOST,
    ORCH_ID_COORDINATOR, /* host:port of the rendezvous */
    /* worker level: what the environment contract gives a worker */
    ORCH_ID_RANK,       /* within the region */
    ORCH_ID_WORLD_SIZE, /* workers in the region */
    ORCH_ID_LOCAL_RANK,
    ORCH_ID_LOCAL_WORLD_SIZE,
    ORCH_ID_GLOBAL_RANK,
    ORCH_ID_GLOBAL_WORLD_SIZE,
    ORCH_ID_MASTER_ADDR,
    ORCH_ID_MASTER_PORT,
    ORCH_ID_FIELD_COUNT
} orch_identity_field;

#define ORCH_ID_BIT(f) (1u << (f))
/* What `xdc agent` cannot start without. */
#define ORCH_ID_REQUIRE_AGENT                                                                \
    (ORCH_ID_BIT(ORCH_ID_RUN_ID) | ORCH_ID_BIT(ORCH_ID_REGION) | ORCH_ID_BIT(ORCH_ID_NODE) | \
     ORCH_ID_BIT(ORCH_ID_NUM_NODES) | ORCH_ID_BIT(ORCH_ID_HOST) | ORCH_ID_BIT(ORCH_ID_COORDINATOR))
/* What a worker needs on top. */
#define ORCH_ID_REQUIRE_WORKER                                                                                       \
    (ORCH_ID_REQUIRE_AGENT | ORCH_ID_BIT(ORCH_ID_RANK) | ORCH_ID_BIT(ORCH_ID_WORLD_SIZE) |                           \
     ORCH_ID_BIT(ORCH_ID_LOCAL_RANK) | ORCH_ID_BIT(ORCH_ID_LOCAL_WORLD_SIZE) | ORCH_ID_BIT(ORCH_ID_GLOBAL_RANK) |    \
     ORCH_ID_BIT(ORCH_ID_GLOBAL_WORLD_SIZE) | ORCH_ID_BIT(ORCH_ID_REGION_INDEX) | ORCH_ID_BIT(ORCH_ID_NUM_REGIONS) | \
     ORCH_ID_BIT(ORCH_ID_MASTER_ADDR) | ORCH_ID_BIT(ORCH_ID_MASTER_PORT))

/* Explicit values, as text from the command line; NULL = not given. Only node-level fields have flags
 * (--run-id --region --region-index --num-regions --node --nodes --host --coordinator). */
typedef struct orch_identity_flags {
    const char *value[ORCH_ID_FIELD_COUNT];
} orch_identity_flags;

typedef struct orch_identity {
    char run_id[64];
    char region[XDC_NAME_MAX];
    char host[256];
    char coordinator[256];
    char master_addr[256];
    /* -1 when not known */
    int region_index, num_regions, node, num_nodes;
    int rank, world_size, local_rank, local_world_size, global_rank, global_world_size, master_port;
    /* What supplied each field ("--node", "SLURM_NODEID", "WORLD_SIZE/LOCAL_WORLD_SIZE", "topology",
     * "gethostname()"); "" when the field is unknown. */
    char source[ORCH_ID_FIELD_COUNT][64];
} orch_identity;

/* Resolve an identity. `flags` may be NULL; `envp` is a NULL-terminated KEY=VALUE array (NULL = the
 * process environment); `topo` (may be NULL) lets the host's place in the topology fill what the
 * environment leaves out and is checked against what it says. Fields in `required` (ORCH_ID_BIT mask)
 * that no source supplies are XDC_ERR_CONFIG, with diag naming each missing field and every flag and
 * variable looked at; values that are not numbers, out of range or contradicting the topology are
 * XDC_ERR_CONFIG naming their source. When sources disagree the first in precedence order wins; a
 * flag or XDC_* value overriding a different value elsewhere is logged as a warning. */
xdc_err_t orch_identity_resolve(const orch_identity_flags *flags, const char *const *envp, const xdc_topology *topo,
                                unsigned required, orch_identity *out, xdc_diag *diag);

/* One line for the log: "region=us-east (XDC_REGION) node=3/16 (SLURM_NODEID, SLURM_NNODES) ...".
 * Unknown fields are left out. */
void orch_identity_describe(const orch_identity *id, char *buf, size_t cap);

/* Field name ("node") and its flag ("--node", NULL for worker-level fields). */
const char *orch_identity_field_name(orch_identity_field f);
const char *orch_identity_flag_name(orch_identity_field f);

/* The environment of worker `slot` (0 <= slot < workers_per_node of the node's region) on node `id`
 * (region, node, run_id and coordinator must be known): `base_env` (NULL-terminated, may be NULL)
 * without any variable of the contract, then the contract. MASTER_ADDR is `master_addr`, or the
 * region's first host when NULL; MASTER_PORT is `master_port` (1-65535). Errors (region not in the
 * topology, node or slot out of range) are XDC_ERR_CONFIG with diag. Free with orch_identity_env_free. */
xdc_err_t orch_identity_worker_env(const orch_identity *id, const xdc_topology *topo, int slot, const char *master_addr,
                                   int master_port, const char *const *base_env, char ***envp_out, xdc_diag *diag);
void orch_identity_env_free(char **envp);

#endif /* ORCH_IDENTITY_H */
