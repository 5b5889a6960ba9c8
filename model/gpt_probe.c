/* gpt_probe.c — the compute probe (xdc_gpt_probe): the time one training step of a whole model takes on a
 * backend (forward, backward, the gradient norm and the AdamW step, as a worker's step runs them), what the
 * planner calibrates its compute model with before `plan: auto` plans (docs/planner.md, "Compute speed"). */
#include "model/xdc_gpt.h"

#include "common/xdc_alloc.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"

#include <stdlib.h>

#define PROBE_MAX_PASSES 16
#define PROBE_LR         1e-4f /* small: the random-token steps leave the weights near their initialisation */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

xdc_err_t xdc_gpt_probe(const xdc_model_ops *ops, const xdc_gpt_config *cfg, int batch, int seq_len, int passes,
                        double *seconds, xdc_diag *diag)
{
    if (passes < 1 || passes > PROBE_MAX_PASSES) {
        xdc_diag_set(diag, "probe: %d passes (1..%d)", passes, PROBE_MAX_PASSES);
        return XDC_ERR_INVALID;
    }
    xdc_gpt_stage_config sc = {.model = *cfg,
                               .layer_begin = 0,
                               .layer_end = cfg->n_layer,
                               .batch = batch,
                               .seq_len = seq_len,
                               .max_inflight = 1,
                               .seed = 1,
                               .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
    xdc_gpt_stage *s = NULL;
    XDC_CHECK(xdc_gpt_stage_create(ops, &sc, &s, diag));
    size_t n = (size_t)batch * seq_len;
    int32_t *tok = xdc_malloc(n * sizeof *tok), *tgt = xdc_malloc(n * sizeof *tgt); /* (batch, seq_len) ids */
    xdc_err_t rc = tok && tgt ? XDC_OK : XDC_ERR_NOMEM;
    xdc_rng r;
    xdc_rng_seed(&r, 2);
    for (size_t i = 0; tok && tgt && i < n; i++) {
        tok[i] = (int32_t)xdc_rng_below(&r, (uint64_t)cfg->vocab_size);
        tgt[i] = (int32_t)xdc_rng_below(&r, (uint64_t)cfg->vocab_size);
    }
    double t[PROBE_MAX_PASSES]; /* (passes) seconds */
    /* One step first, untimed: it touches the arenas and the kernels' scratch for the first time. */
    for (int i = -1; rc == XDC_OK && i < passes; i++) {
        float loss;
        uint64_t t0 = xdc_now_ns();
        double sumsq = 0;
        rc = xdc_gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss);
        if (rc == XDC_OK) rc = xdc_gpt_stage_backward(s, 0, NULL, 1.0f, NULL);
        if (rc == XDC_OK) rc = xdc_gpt_stage_grad_sumsq(s, &sumsq);
        /* The optimizer is a step's compute as the passes are: ~7 % of gpt1m's on a CPU core (3.7 + 0.7 ms of 66). */
        if (rc == XDC_OK) rc = xdc_gpt_stage_optimizer_step(s, PROBE_LR, xdc_gpt_clip_scale(sumsq, 1.0f));
        if (i >= 0) t[i] = (double)(xdc_now_ns() - t0) / 1e9;
    }
    if (rc == XDC_OK) { /* the median: a step that lost its core to another process does not set it */
        qsort(t, (size_t)passes, sizeof t[0], cmp_double);
        *seconds = passes % 2 ? t[passes / 2] : (t[passes / 2 - 1] + t[passes / 2]) / 2;
    } else if (diag && !diag->msg[0]) {
        xdc_diag_set(diag, "probe: %s", xdc_strerror(rc));
    }
    xdc_free(tok);
    xdc_free(tgt);
    xdc_gpt_stage_destroy(s);
    return rc;
}
