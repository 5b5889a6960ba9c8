/* fuzz_data_shard.c — the data loader's source parser (token shard header, byte fallback, vocabulary
 * check, window arithmetic) on arbitrary bytes; a loader that opens must serve a batch of each kind. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "model/xdc_data.h"

#include <stdio.h>

XDC_FUZZ_TARGET(data_shard)
{
    xdc_data_config cfg = {
        .batch = 2, .seq_len = 4, .val_fraction = 0.25, .seed = 1, .rank = 1, .world = 2, .vocab_size = 300};
    xdc_data *d = NULL;
    if (xdc_data_open_bytes("fuzz", data, size, &cfg, &d, NULL) != 0) return 0;
    int32_t in[8], tgt[8];
    xdc_data_next_train(d, in, tgt);
    xdc_data_val_batch(d, xdc_data_val_batches(d) - 1, in, tgt);
    xdc_data_destroy(d);
    return 0;
}

/* The shard's token counts and a hash of its first training batch. */
XDC_FUZZ_VERDICT(data_shard)
{
    xdc_data_config cfg = {
        .batch = 2, .seq_len = 4, .val_fraction = 0.25, .seed = 1, .rank = 1, .world = 2, .vocab_size = 300};
    xdc_data *d = NULL;
    xdc_diag diag = {{0}};
    xdc_err_t rc = xdc_data_open_bytes("corpus", data, size, &cfg, &d, &diag);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", diag.msg);
        return rc;
    }
    int32_t in[8], tgt[8];
    rc = xdc_data_next_train(d, in, tgt);
    if (rc == XDC_OK)
        snprintf(summary, cap, "train=%zu val=%zu first_batch_xxh3=%016llx", xdc_data_train_tokens(d),
                 xdc_data_val_tokens(d), (unsigned long long)(xdc_xxh3(in, sizeof in) ^ xdc_xxh3(tgt, sizeof tgt)));
    xdc_data_destroy(d);
    return rc;
}
