/* fuzz_ckpt.c — the checkpoint decoder (header fields, sizes, checksum, zstd payload) on arbitrary bytes,
 * restoring into a small stage (2 layers, width 8, vocab 16 — the shape the seed corpus was saved from). */
#include "tests/fuzz/xdc_fuzz.h"

#include "kernels/xdc_model_ops.h"
#include "model/xdc_ckpt.h"

extern const xdc_model_ops xdc_model_cpu_ops;

XDC_FUZZ_TARGET(ckpt)
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
        if (xdc_gpt_stage_create(&xdc_model_cpu_ops, &c, &stage, NULL) != 0) return 0;
    }
    xdc_ckpt_meta meta;
    xdc_ckpt_decode("fuzz", data, size, 0, stage, &meta, NULL);
    return 0;
}
