/* cli_probe.c — the compute probe a run's plan is calibrated with (docs/planner.md, "Compute speed"): before
 * `plan: auto` plans under `xdc launch`, and before `xdc plan -c` / `xdc simulate -c` plan a run file, time one
 * training step of the run's model (forward, backward, AdamW) on the run's device with its threads (xdc_gpt_probe),
 * turn it into FLOP/s (xdc_plan_probe_flops) and put that in ORCH_PLAN_PROBE_ENV with this host's cores, which the
 * launcher's agents and workers inherit: every process of the run plans with the one figure (orch_plan_apply reads
 * it). */
#include "orchestrator/cli/xdc_cli.h"

#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_gpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROBE_PASSES     5
#define PROBE_FILE       "plan-probe" /* in the run folder: the figure a resumed run plans with again */
/* Parameters of the largest model timed whole (about 1.6 GB of weights, gradients and AdamW state in fp32) */
#define PROBE_MAX_PARAMS 100000000

int xdc_cli_plan_probe(const char *cmd, const orch_run_config *c, const xdc_topology *t, const char *device_word,
                       const char *resume_dir)
{
    if (!orch_plan_wants_probe(c) || getenv(ORCH_PLAN_PROBE_ENV)) return XDC_EX_OK; /* the topology's, or given */
    char path[1100], figure[64];
    FILE *f = resume_dir ? (snprintf(path, sizeof path, "%s/%s", resume_dir, PROBE_FILE), fopen(path, "r")) : NULL;
    if (f) { /* a resumed run plans as it did when it started */
        int ok = fgets(figure, sizeof figure, f) != NULL;
        fclose(f);
        figure[strcspn(figure, "\n")] = '\0';
        if (ok) {
            setenv(ORCH_PLAN_PROBE_ENV, figure, 1);
            fprintf(stderr, "xdc %s: compute probe: the run's own figure from %s (%s)\n", cmd, path, figure);
            return XDC_EX_OK;
        }
    }
    orch_device over;
    xdc_diag d = {{0}};
    if (orch_device_override(device_word, &over, NULL, &d) != XDC_OK) {
        fprintf(stderr, "xdc %s: %s\n", cmd, d.msg);
        return XDC_EX_USAGE;
    }
    orch_device dev = orch_device_of_region(over, t, 0);
    const xdc_kern_backend *be;
    size_t params = xdc_gpt_config_num_params(&c->train.model);
    if (params > PROBE_MAX_PARAMS || xdc_kern_backend_get((xdc_backend_kind)dev, &be, &d) != XDC_OK) {
        /* planning for a machine this is not (no such device here, or a model its one process would not hold) */
        fprintf(stderr, "xdc %s: no compute probe (%s): the topology's compute model\n", cmd,
                params > PROBE_MAX_PARAMS ? "the whole model is too large to time in one process here" : d.msg);
        return XDC_EX_OK;
    }
    be->model->set_threads(c->threads);
    double s = 0;
    xdc_err_t rc = xdc_gpt_probe(be->model, &c->train.model, c->train.batch_size, c->train.seq_len, PROBE_PASSES, &s,
                                 &d);
    if (rc != XDC_OK) {
        fprintf(stderr, "xdc %s: compute probe on %s: %s\n", cmd, orch_device_name(dev),
                d.msg[0] ? d.msg : xdc_strerror(rc));
        return xdc_cli_exit_code(rc);
    }
    xdc_model_shape m;
    const xdc_gpt_config *g = &c->train.model;
    xdc_model_shape_gpt(g->n_layer, g->n_head, g->n_embd, g->max_seq_len, g->vocab_size, &m);
    double flops = xdc_plan_probe_flops(t, &m, (double)c->train.batch_size * c->train.seq_len, c->train.seq_len, s);
    /* Every worker of the run on this host (`xdc launch` starts them all here): on the CPU they share its cores. */
    long cores = dev == ORCH_DEVICE_CUDA ? 0 : sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(figure, sizeof figure, "%.17g %ld", flops, cores > 0 ? cores : 0);
    setenv(ORCH_PLAN_PROBE_ENV, figure, 1);
    fprintf(stderr,
            "xdc %s: compute probe: a training step of %dx%d tokens (forward, backward, AdamW) in %.4f s (median of "
            "%d) on %s, %d thread%s: "
            "%.3g GFLOP/s a worker alone; %ld cores shared by the run's workers (%s=\"%s\")\n",
            cmd, c->train.batch_size, c->train.seq_len, s, PROBE_PASSES, orch_device_name(dev), c->threads,
            c->threads == 1 ? "" : "s", flops / 1e9, cores > 0 ? cores : 0, ORCH_PLAN_PROBE_ENV, figure);
    return XDC_EX_OK;
}
