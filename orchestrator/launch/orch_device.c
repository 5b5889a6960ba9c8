/* orch_device.c — the device rule of orch_device.h: the override (flag, then XDC_DEVICE), the region's
 * device from the topology, the node and worker checks (enough visible GPUs, a device the kernel registry
 * gives), and which visible GPU a worker takes. */
#include "orchestrator/launch/orch_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const device_words[] = {
    [ORCH_DEVICE_CPU] = "cpu", [ORCH_DEVICE_CUDA] = "cuda", [ORCH_DEVICE_CPU_STRICT] = "cpu-strict"};
#define N_WORDS ((int)(sizeof device_words / sizeof device_words[0]))

const char *orch_device_name(orch_device d)
{
    if (d == ORCH_DEVICE_TOPOLOGY) return "topology";
    return (int)d >= 0 && (int)d < N_WORDS ? device_words[d] : "?";
}

int orch_device_parse(const char *word, orch_device *out)
{
    for (int k = 0; word && k < N_WORDS; k++)
        if (strcmp(word, device_words[k]) == 0) {
            *out = (orch_device)k;
            return 0;
        }
    return -1;
}

xdc_err_t orch_device_override(const char *flag, orch_device *out, const char **source, xdc_diag *diag)
{
    const char *word = flag, *from = "--device";
    if (!word) {
        word = getenv("XDC_DEVICE");
        from = "XDC_DEVICE";
        if (word && !*word) word = NULL;
    }
    if (source) *source = word ? from : "the topology";
    *out = ORCH_DEVICE_TOPOLOGY;
    if (!word) return XDC_OK;
    if (orch_device_parse(word, out) != 0) {
        xdc_diag_set(diag, "%s%s'%s' is not a device (cpu, cuda or cpu-strict)", from, flag ? " " : "=", word);
        return XDC_ERR_INVALID;
    }
    return XDC_OK;
}

orch_device orch_device_of_region(orch_device override, const xdc_topology *t, int r)
{
    if (override != ORCH_DEVICE_TOPOLOGY) return override;
    return t->regions[r].gpus_per_node > 0 ? ORCH_DEVICE_CUDA : ORCH_DEVICE_CPU;
}

int orch_device_uses_nccl(orch_device d) { return d == ORCH_DEVICE_CUDA; }

int orch_device_gpus_needed(orch_device d, const xdc_topology *t, int r)
{
    return d == ORCH_DEVICE_CUDA ? t->regions[r].workers_per_node : 0;
}

int orch_device_cuda_ordinal(int local_rank, int visible)
{
    if (visible <= 0 || local_rank < 0) return -1;
    return local_rank % visible;
}

/* The node check with `least` GPUs enough (need for a node, 1 for a worker); messages name `need`. */
static xdc_err_t check_gpus(orch_device d, const char *source, const xdc_topology *t, int r, const char *host,
                            const orch_device_probe *probe, int worker, xdc_diag *diag)
{
    if (!probe) return XDC_OK;
    const xdc_region *g = &t->regions[r];
    xdc_diag why = {{0}};
    xdc_err_t krc = probe->kernels(d, &why);
    int need = orch_device_gpus_needed(d, t, r);
    if (need > 0) {
        int found = probe->cuda_devices();
        if (found < (worker ? 1 : need)) {
            char from[96], vis[160] = "";
            if (g->gpus_per_node > 0)
                snprintf(from, sizeof from, "gpus_per_node: %d in the topology", g->gpus_per_node);
            else snprintf(from, sizeof from, "one per worker, %d per node, from %s", g->workers_per_node, source);
            const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
            if (cvd) snprintf(vis, sizeof vis, " with CUDA_VISIBLE_DEVICES=%s", cvd);
            xdc_diag_set(diag, "node %s/%s: device cuda expected %d GPUs (%s), found %d visible CUDA devices%s%s%s",
                         g->name, host, need, from, found, vis, krc != XDC_OK && why.msg[0] ? ": " : "",
                         krc != XDC_OK ? why.msg : "");
            return XDC_ERR_UNAVAILABLE;
        }
    }
    if (krc != XDC_OK) {
        xdc_diag_set(diag, "node %s/%s: device %s (from %s): %s", g->name, host, orch_device_name(d), source,
                     why.msg[0] ? why.msg : xdc_strerror(krc));
        return krc;
    }
    return XDC_OK;
}

xdc_err_t orch_device_check_node(orch_device d, const char *source, const xdc_topology *t, int r, const char *host,
                                 const orch_device_probe *probe, xdc_diag *diag)
{
    return check_gpus(d, source, t, r, host, probe, 0, diag);
}

xdc_err_t orch_device_check_worker(orch_device d, const char *source, const xdc_topology *t, int r, const char *host,
                                   const orch_device_probe *probe, xdc_diag *diag)
{
    return check_gpus(d, source, t, r, host, probe, 1, diag);
}

void orch_device_describe(orch_device d, int ordinal, char *buf, size_t cap)
{
    if (d == ORCH_DEVICE_CUDA && ordinal >= 0) snprintf(buf, cap, "cuda:%d (NCCL intra)", ordinal);
    else snprintf(buf, cap, "%s (%s intra)", orch_device_name(d), orch_device_uses_nccl(d) ? "NCCL" : "shared-memory");
}
