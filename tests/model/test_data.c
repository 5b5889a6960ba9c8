/* test_data.c — the GPT data loader: windows and next-token targets, per-epoch shuffling by seed that
 * covers every window once, disjoint rank shards, ranks of unequal microbatch counts reading one rank's
 * global steps, position save/restore, uint16 shards and their
 * validation, directory corpora, and too-small inputs. Shards whose token i is i make every window
 * identify itself by its first token. */
#include "tests/xdc_test.h"

#include "model/xdc_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { B = 2, T = 8 };

/* A shard of n tokens, token i = i (n < 65536); optional damage to the header count. */
static const char *write_shard(const char *name, int n, int count_delta)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", xdc_test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    int32_t header[256] = {20240520, 1, n + count_delta};
    fwrite(header, sizeof header, 1, f);
    for (int i = 0; i < n; i++) {
        uint16_t t = (uint16_t)i;
        fwrite(&t, 2, 1, f);
    }
    fclose(f);
    return path;
}

static xdc_data_config cfg(int rank, int world, uint64_t seed)
{
    return (xdc_data_config){
        .batch = B, .seq_len = T, .val_fraction = 0.2, .seed = seed, .rank = rank, .world = world, .vocab_size = 65536};
}

XDC_TEST(data_shard_windows_have_next_token_targets)
{
    const char *p = write_shard("a.bin", 1001, 0);
    xdc_data *d = NULL;
    xdc_data_config c = cfg(0, 1, 1);
    XDC_ASSERT_OK(xdc_data_open(p, &c, &d, NULL));
    XDC_ASSERT_EQ(xdc_data_train_tokens(d), 800);
    XDC_ASSERT_EQ(xdc_data_val_tokens(d), 201);
    XDC_ASSERT_EQ(xdc_data_batches_per_epoch(d), (799 / T) / B);
    int32_t in[B * T], tg[B * T];
    XDC_ASSERT_OK(xdc_data_next_train(d, in, tg));
    for (int b = 0; b < B; b++) {
        XDC_ASSERT(in[b * T] % T == 0);       /* windows start at multiples of T */
        XDC_ASSERT(in[b * T] + T + 1 <= 800); /* and stay in the train split */
        for (int t = 0; t < T; t++) {
            XDC_ASSERT_EQ(in[b * T + t], in[b * T] + t);
            XDC_ASSERT_EQ(tg[b * T + t], in[b * T + t] + 1);
        }
    }
    /* validation windows come from the last 20% and are the same every time */
    int32_t v1[B * T], v2[B * T], vt[B * T];
    XDC_ASSERT_OK(xdc_data_val_batch(d, 0, v1, vt));
    XDC_ASSERT_OK(xdc_data_val_batch(d, 0, v2, vt));
    XDC_ASSERT(memcmp(v1, v2, sizeof v1) == 0);
    XDC_ASSERT(v1[0] >= 800);
    XDC_ASSERT_ERR(xdc_data_val_batch(d, xdc_data_val_batches(d), v1, vt), XDC_ERR_RANGE);
    xdc_data_destroy(d);
}

XDC_TEST(data_epoch_visits_every_window_once_in_a_seeded_order)
{
    const char *p = write_shard("b.bin", 1001, 0);
    xdc_data *d1 = NULL, *d2 = NULL, *d3 = NULL;
    xdc_data_config c1 = cfg(0, 1, 7), c3 = cfg(0, 1, 8);
    XDC_ASSERT_OK(xdc_data_open(p, &c1, &d1, NULL));
    XDC_ASSERT_OK(xdc_data_open(p, &c1, &d2, NULL));
    XDC_ASSERT_OK(xdc_data_open(p, &c3, &d3, NULL));
    int nb = (int)xdc_data_batches_per_epoch(d1), seen[100] = {0}, differs = 0, in_order = 1;
    int32_t a[B * T], b[B * T], c[B * T], tg[B * T];
    for (int k = 0; k < nb; k++) {
        XDC_ASSERT_OK(xdc_data_next_train(d1, a, tg));
        XDC_ASSERT_OK(xdc_data_next_train(d2, b, tg));
        XDC_ASSERT_OK(xdc_data_next_train(d3, c, tg));
        XDC_ASSERT(memcmp(a, b, sizeof a) == 0);
        differs |= memcmp(a, c, sizeof a) != 0;
        for (int j = 0; j < B; j++) {
            seen[a[j * T] / T]++;
            if (a[j * T] != (k * B + j) * T) in_order = 0;
        }
    }
    XDC_ASSERT(differs);
    XDC_ASSERT(!in_order);
    int total = 0; /* nb*B of the 99 windows, none twice (the odd one out waits for another epoch) */
    for (int w = 0; w < 100; w++) {
        XDC_ASSERT(seen[w] <= 1);
        total += seen[w];
    }
    XDC_ASSERT_EQ(total, nb * B);
    XDC_ASSERT_EQ(xdc_data_get_pos(d1).epoch, 1);
    XDC_ASSERT_EQ(xdc_data_get_pos(d1).batch, 0);
    xdc_data_destroy(d1), xdc_data_destroy(d2), xdc_data_destroy(d3);
}

XDC_TEST(data_ranks_see_disjoint_windows)
{
    const char *p = write_shard("c.bin", 2001, 0);
    enum { W = 3 };
    xdc_data *d[W];
    int seen[400] = {0};
    for (int r = 0; r < W; r++) {
        xdc_data_config c = cfg(r, W, 5);
        XDC_ASSERT_OK(xdc_data_open(p, &c, &d[r], NULL));
    }
    int nb = (int)xdc_data_batches_per_epoch(d[0]);
    XDC_ASSERT_EQ(nb, (1599 / T) / (B * W));
    int32_t in[B * T], tg[B * T];
    for (int k = 0; k < nb; k++)
        for (int r = 0; r < W; r++) {
            XDC_ASSERT_OK(xdc_data_next_train(d[r], in, tg));
            for (int j = 0; j < B; j++) seen[in[j * T] / T]++;
        }
    for (int w = 0; w < 400; w++) XDC_ASSERT(seen[w] <= 1);
    for (int r = 0; r < W; r++) xdc_data_destroy(d[r]);
}

/* Ranks reading 3, 1 and 2 microbatches per step read, step by step, the windows one rank reading 6 per step
 * reads (the equal split's global batch), each once; an epoch is whole steps, so all of them start the next
 * epoch together (the single rank, whose epoch is 79 batches, not 13 steps of 6, is compared within the first). */
XDC_TEST(data_unequal_ranks_read_the_single_ranks_steps)
{
    const char *p = write_shard("u.bin", 2001, 0);
    enum { W = 3, M = 6 };
    const int counts[W] = {3, 1, 2};
    xdc_data *d[W], *one = NULL;
    for (int r = 0; r < W; r++) {
        xdc_data_config c = cfg(r, W, 9);
        c.microbatches = counts;
        XDC_ASSERT_OK(xdc_data_open(p, &c, &d[r], NULL));
        XDC_ASSERT_EQ((int)xdc_data_batches_per_epoch(d[r]), (1599 / T) / (B * M) * counts[r]);
    }
    xdc_data_config c1 = cfg(0, 1, 9);
    XDC_ASSERT_OK(xdc_data_open(p, &c1, &one, NULL));
    int steps = (int)xdc_data_batches_per_epoch(d[0]) / counts[0], seen[400];
    int32_t in[B * T], tg[B * T];
    for (int s = 0; s < steps; s++) {
        memset(seen, 0, sizeof seen);
        for (int k = 0; k < M; k++) {
            XDC_ASSERT_OK(xdc_data_next_train(one, in, tg));
            for (int j = 0; j < B; j++) seen[in[j * T] / T]++;
        }
        for (int r = 0; r < W; r++)
            for (int k = 0; k < counts[r]; k++) {
                XDC_ASSERT_OK(xdc_data_next_train(d[r], in, tg));
                for (int j = 0; j < B; j++) seen[in[j * T] / T]--;
            }
        for (int w = 0; w < 400; w++) XDC_ASSERT_MSG(seen[w] == 0, "step %d: window %d off by %d", s, w, seen[w]);
    }
    for (int r = 0; r < W; r++) {
        xdc_data_pos pos = xdc_data_get_pos(d[r]);
        XDC_ASSERT_MSG(pos.epoch == 1 && pos.batch == 0, "rank %d after one epoch of steps: epoch %llu batch %llu", r,
                       (unsigned long long)pos.epoch, (unsigned long long)pos.batch);
    }
    for (int r = 0; r < W; r++) xdc_data_destroy(d[r]);
    xdc_data_destroy(one);
}

XDC_TEST(data_position_restores_the_same_stream)
{
    const char *p = write_shard("d.bin", 1001, 0);
    xdc_data *a = NULL, *b = NULL;
    xdc_data_config c = cfg(0, 1, 3);
    XDC_ASSERT_OK(xdc_data_open(p, &c, &a, NULL));
    XDC_ASSERT_OK(xdc_data_open(p, &c, &b, NULL));
    int32_t x[B * T], y[B * T], tg[B * T];
    int nb = (int)xdc_data_batches_per_epoch(a);
    for (int k = 0; k < nb + 3; k++) XDC_ASSERT_OK(xdc_data_next_train(a, x, tg)); /* into epoch 1 */
    xdc_data_pos pos = xdc_data_get_pos(a);
    XDC_ASSERT_EQ(pos.epoch, 1);
    XDC_ASSERT_OK(xdc_data_set_pos(b, pos));
    for (int k = 0; k < nb; k++) { /* across the next epoch boundary too */
        XDC_ASSERT_OK(xdc_data_next_train(a, x, tg));
        XDC_ASSERT_OK(xdc_data_next_train(b, y, tg));
        XDC_ASSERT(memcmp(x, y, sizeof x) == 0);
    }
    XDC_ASSERT_ERR(xdc_data_set_pos(b, (xdc_data_pos){0, (uint64_t)nb}), XDC_ERR_RANGE);
    xdc_data_destroy(a), xdc_data_destroy(b);
}

XDC_TEST(data_rejects_bad_shards_and_small_inputs_naming_the_file)
{
    xdc_diag dg = {{0}};
    xdc_data *d = NULL;
    xdc_data_config c = cfg(0, 1, 1);
    const char *p = write_shard("bad.bin", 500, 3);
    XDC_ASSERT_ERR(xdc_data_open(p, &c, &d, &dg), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(dg.msg, "bad.bin");
    XDC_ASSERT_STR_CONTAINS(dg.msg, "shard header");
    p = write_shard("vocab.bin", 500, 0);
    c.vocab_size = 256; /* tokens up to 499 */
    XDC_ASSERT_ERR(xdc_data_open(p, &c, &d, &dg), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(dg.msg, "outside the vocabulary");
    c = cfg(0, 1, 1);
    p = write_shard("small.bin", 30, 0);
    XDC_ASSERT_ERR(xdc_data_open(p, &c, &d, &dg), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(dg.msg, "small.bin");
    XDC_ASSERT_ERR(xdc_data_open("/nonexistent/x.txt", &c, &d, &dg), XDC_ERR_IO);
    XDC_ASSERT_STR_CONTAINS(dg.msg, "/nonexistent/x.txt");
    c.rank = 1; /* world 1 */
    XDC_ASSERT_ERR(xdc_data_open(p, &c, &d, &dg), XDC_ERR_INVALID);
}

XDC_TEST(data_directory_concatenates_text_files_and_skips_indexes)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/corpus", xdc_test_tmpdir());
    mkdir(dir, 0755);
    char text[400];
    memset(text, 'a', sizeof text);
    text[sizeof text - 1] = 0;
    snprintf(path, sizeof path, "%s/one", dir);
    xdc_test_write_file(path, text);
    memset(text, 'b', sizeof text - 1);
    snprintf(path, sizeof path, "%s/two", dir);
    xdc_test_write_file(path, text);
    snprintf(path, sizeof path, "%s/one.dat", dir);
    xdc_test_write_file(path, "\x01\x02 index bytes");
    char link[600];
    snprintf(link, sizeof link, "%s/one.u8", dir);
    XDC_ASSERT(symlink("one", link) == 0);
    xdc_data *d = NULL;
    xdc_data_config c = {
        .batch = 2, .seq_len = 16, .val_fraction = 0.5, .seed = 1, .rank = 0, .world = 1, .vocab_size = 256};
    XDC_ASSERT_OK(xdc_data_open(dir, &c, &d, NULL));
    XDC_ASSERT_EQ(xdc_data_train_tokens(d) + xdc_data_val_tokens(d), 798);
    const uint16_t *val = xdc_data_val_view(d);
    XDC_ASSERT_EQ(val[0], 'b'); /* "one" then "two", in name order */
    XDC_ASSERT_EQ(val[-1], 'a');
    xdc_data_destroy(d);
}
