/* orch_device.h — which device a region's workers run on (docs/runtime.md, "Devices"). The topology
 * decides: a region with gpus_per_node > 0 runs CUDA kernels with NCCL inside the region, one with 0 runs
 * CPU kernels with the shared-memory intra backend. `--device cpu|cuda|cpu-strict` (launch, agent,
 * worker) and XDC_DEVICE override it for every region: the flag beats the variable beats the topology,
 * and the launcher passes its choice to the agents, the agents to the workers.
 *
 * launch/ may not call kernels/ (docs/design.md), so the device words here mirror the kernel
 * registry's (xdc_backend_name; test orch_device_names_are_the_kernel_registry) and what only the
 * registry knows (visible GPUs, whether it gives a device's kernels) comes in through an
 * orch_device_probe filled by a layer that may ask it (cli/, worker/). */
#ifndef ORCH_DEVICE_H
#define ORCH_DEVICE_H

#include "common/xdc_err.h"
#include "topology/xdc_topology.h"

#include <stddef.h>

typedef enum {
    ORCH_DEVICE_TOPOLOGY = -1, /* no override: the topology decides */
    /* the same values as xdc_backend_kind (kernels/xdc_kernels.h) */
    ORCH_DEVICE_CPU = 0,
    ORCH_DEVICE_CUDA = 1,
    ORCH_DEVICE_CPU_STRICT = 2,
} orch_device;

/* "cpu", "cuda", "cpu-strict"; "topology" for ORCH_DEVICE_TOPOLOGY. */
const char *orch_device_name(orch_device d);
/* A device word -> the device; -1 for any other word (ORCH_DEVICE_TOPOLOGY is not a word). */
int orch_device_parse(const char *word, orch_device *out);

/* The override: `flag` (NULL: not given), else XDC_DEVICE (unset or empty: none), else
 * ORCH_DEVICE_TOPOLOGY. A word that names no device is XDC_ERR_INVALID (a usage error, exit 64) with
 * diag naming the word and where it came from. *source (may be NULL): "--device", "XDC_DEVICE" or
 * "the topology". */
xdc_err_t orch_device_override(const char *flag, orch_device *out, const char **source, xdc_diag *diag);

/* The device of region r's workers: the override, else CUDA when gpus_per_node > 0, else CPU. */
orch_device orch_device_of_region(orch_device override, const xdc_topology *t, int r);
/* NCCL inside the region (CUDA) rather than the shared-memory backend (CPU, cpu-strict). */
int orch_device_uses_nccl(orch_device d);
/* GPUs each node of region r must see to run on d: one per worker (LOCAL_RANK picks it) on CUDA, so
 * gpus_per_node when the topology gives it and workers_per_node under `--device cuda` on a CPU region;
 * 0 on the CPU devices. */
int orch_device_gpus_needed(orch_device d, const xdc_topology *t, int r);

/* What the kernel registry says, asked by a layer that may (orchestrator/cli/cli_device.c, the worker). */
typedef struct orch_device_probe {
    int (*cuda_devices)(void); /* CUDA devices visible to this process (xdc_kern_cuda_device_count) */
    /* XDC_OK when the registry gives d's kernels; else its error, diag its message */
    xdc_err_t (*kernels)(orch_device d, xdc_diag *diag);
} orch_device_probe;

/* The check a node makes before anything trains on it (the agent before starting its workers, each
 * worker before set-up), for node `host` of region r running on d (`source`: where d came from).
 * XDC_ERR_UNAVAILABLE (exit 69) when the node sees fewer CUDA devices than it needs, naming the node,
 * expected and found ("node us-east/gpu-001: device cuda expected 2 GPUs (gpus_per_node: 2 in the
 * topology), found 0 visible CUDA devices (...)"), with the registry's reason when it has one; the
 * registry's own refusal of d (cpu-strict before that device is built: XDC_ERR_UNSUPPORTED) with its
 * message, prefixed by the device and the node. A NULL probe checks nothing. */
xdc_err_t orch_device_check_node(orch_device d, const char *source, const xdc_topology *t, int r, const char *host,
                                 const orch_device_probe *probe, xdc_diag *diag);

/* The CUDA ordinal of the worker with LOCAL_RANK `local_rank` on a node where this process sees `visible`
 * CUDA devices: local_rank when it sees enough, else local_rank mod visible: under Slurm
 * `--gpus-per-task=1` each task sees only its own GPU, as ordinal 0, and several workers that see fewer
 * GPUs than they are share them round-robin. -1 when visible <= 0 or local_rank < 0. */
int orch_device_cuda_ordinal(int local_rank, int visible);

/* The check a worker makes for itself (the node check is the agent's): as orch_device_check_node, except
 * that on CUDA one visible GPU is enough (orch_device_cuda_ordinal picks it); the message when none is
 * visible is the node check's. */
xdc_err_t orch_device_check_worker(orch_device d, const char *source, const xdc_topology *t, int r, const char *host,
                                   const orch_device_probe *probe, xdc_diag *diag);

/* One phrase for logs and the summary: "cuda:0 (NCCL intra)" (ordinal >= 0), "cuda (NCCL intra)",
 * "cpu (shared-memory intra)", "cpu-strict (shared-memory intra)". */
void orch_device_describe(orch_device d, int ordinal, char *buf, size_t cap);

#endif /* ORCH_DEVICE_H */
