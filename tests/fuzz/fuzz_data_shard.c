/* fuzz_data_shard.c — the data loader's source parser (token shard header, byte fallback, vocabulary
 * check, window arithmetic) on arbitrary bytes; a loader that opens must serve a batch of each kind. */
#include "tests/fuzz/xdc_fuzz.h"

#include "model/xdc_data.h"

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
