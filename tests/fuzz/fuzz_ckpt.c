/* fuzz_ckpt.c — the checkpoint decoder (header fields, sizes, checksum, zstd payload) on arbitrary bytes,
 * restoring into a small stage (2 layers, width 8, vocab 16 — the shape the seed corpus was saved from). */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_ckpt.h"

#include <stdio.h>

extern const xdc_model_ops xdc_model_cpu_ops;

/* The stage checkpoints decode into (2 layers of a 8-wide model), created once. */
static xdc_gpt_stage *fuzz_stage(void)
{
    static xdc_gpt_stage *stage;
    if (!stage) {
        xdc_gpt_stage_config c = {.model = {.n_layer = 2, .n_head = 2, .n_embd = 8, .max_seq_len = 4, .vocab_size = 16},
                                  .layer_begin = 0,
                                  .layer_end = 2,
                                  .batch = 1,
                                  .seq_len = 4,
                                  .max_inflight = 1,
                                  .seed = 1,
                                  .adamw = {0.9f, 0.95f, 1e-8f, 0.0f}};
        if (xdc_gpt_stage_create(&xdc_model_cpu_ops, &c, &stage, NULL) != XDC_OK) return NULL;
    }
    return stage;
}

XDC_FUZZ_TARGET(ckpt)
{
    xdc_gpt_stage *stage = fuzz_stage();
    if (!stage) return 0;
    xdc_ckpt_meta meta;
    xdc_ckpt_decode("fuzz", data, size, 0, 1000, stage, &meta, NULL);
    return 0;
}

/* The metadata of an accepted checkpoint and a hash of the parameters it restored. */
XDC_FUZZ_VERDICT(ckpt)
{
    xdc_gpt_stage *stage = fuzz_stage();
    XDC_REQUIRE(stage != NULL, XDC_ERR_NOMEM);
    xdc_ckpt_meta meta;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_ckpt_decode("corpus", data, size, 0, 1000, stage, &meta, &d);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", d.msg);
        return rc;
    }
    snprintf(
        summary, cap, "stage=%d/%d step=%lld params_xxh3=%016llx", meta.stage, meta.n_stages, (long long)meta.step,
        (unsigned long long)xdc_xxh3(xdc_gpt_stage_params(stage), xdc_gpt_stage_num_params(stage) * sizeof(float)));
    return XDC_OK;
}
