/* test_ckpt.c — stage checkpoints: save → load → continue gives the parameters of a run that never
 * stopped; corruption (a flipped byte, truncation) and a checkpoint of another shape are refused with
 * the file named; saving leaves no temporary file behind. */
#include "tests/xdc_test.h"

#include "common/xdc_hash.h"
#include "common/xdc_rng.h"
#include "model/xdc_gpt.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

extern const xdc_model_ops xdc_model_cpu_ops;

static xdc_gpt_stage *make_stage(int begin, int end)
{
    xdc_gpt_stage_config c = {.model = {.n_layer = 2, .n_head = 2, .n_embd = 16, .max_seq_len = 8, .vocab_size = 32},
                              .layer_begin = begin,
                              .layer_end = end,
                              .batch = 2,
                              .seq_len = 8,
                              .max_inflight = 1,
                              .seed = 11,
                              .adamw = {0.9f, 0.95f, 1e-8f, 0.1f}};
    xdc_gpt_stage *s = NULL;
    XDC_ASSERT_OK(xdc_gpt_stage_create(&xdc_model_cpu_ops, &c, &s, NULL));
    return s;
}

static void train_steps(xdc_gpt_stage *s, int from, int to)
{
    for (int step = from; step < to; step++) {
        int32_t tok[16], tgt[16];
        xdc_rng r;
        xdc_rng_seed(&r, 500 + (uint64_t)step);
        for (int i = 0; i < 16; i++) tok[i] = (int32_t)xdc_rng_below(&r, 32), tgt[i] = (int32_t)xdc_rng_below(&r, 32);
        float loss;
        xdc_gpt_stage_zero_grad(s);
        XDC_ASSERT_OK(xdc_gpt_stage_forward(s, 0, tok, NULL, tgt, NULL, &loss));
        XDC_ASSERT_OK(xdc_gpt_stage_backward(s, 0, NULL, 1.0f, NULL));
        XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(s, 1e-2f, 1.0f));
    }
}

static uint64_t hash_of(xdc_gpt_stage *s)
{
    uint64_t h = 0;
    XDC_ASSERT_OK(xdc_gpt_params_xxh64(&s, 1, &h));
    return h;
}

XDC_TEST(ckpt_save_load_continue_matches_never_stopping)
{
    const char *dir = xdc_test_tmpdir();
    xdc_gpt_stage *straight = make_stage(0, 2), *first = make_stage(0, 2), *second = make_stage(0, 2);
    train_steps(straight, 0, 8);
    train_steps(first, 0, 4);
    xdc_rng rng;
    xdc_rng_seed(&rng, 99);
    xdc_rng_u64(&rng);
    xdc_ckpt_meta meta = {.stage = 0, .n_stages = 1, .step = 4, .data_pos = {2, 17}, .rng = rng}, back;
    XDC_ASSERT_OK(xdc_ckpt_save(dir, first, &meta, NULL));
    XDC_ASSERT_OK(xdc_ckpt_load(dir, 0, 100, second, &back, NULL));
    XDC_ASSERT(hash_of(second) == hash_of(first));
    XDC_ASSERT_EQ(back.step, 4);
    XDC_ASSERT_EQ(back.data_pos.epoch, 2);
    XDC_ASSERT_EQ(back.data_pos.batch, 17);
    XDC_ASSERT(memcmp(&back.rng, &rng, sizeof rng) == 0);
    train_steps(second, 4, 8); /* moments and the bias-correction step count came back too */
    XDC_ASSERT_MSG(hash_of(second) == hash_of(straight), "resumed run diverged from the uninterrupted one");
    char tmp[600];
    xdc_ckpt_path(dir, 0, tmp, sizeof tmp - 8);
    strcat(tmp, ".tmp");
    XDC_ASSERT(access(tmp, F_OK) != 0);
    XDC_ASSERT_OK(xdc_ckpt_save(dir, second, &meta, NULL)); /* over an existing file */
    xdc_gpt_stage_destroy(straight), xdc_gpt_stage_destroy(first), xdc_gpt_stage_destroy(second);
}

/* A rejoining region's inner optimizer state (orchestrator/worker/orch_rejoin.c) comes in slices, one from each
 * member: a stage given another's parameters and its AdamW moments slice by slice (with its step count)
 * continues bit for bit as that one does; without the moments (zeros, step 0: what a joiner had before) it
 * does not. A slice out of the arena is refused. */
XDC_TEST(model_moments_in_slices_continue_as_the_giver_does)
{
    xdc_gpt_stage *giver = make_stage(0, 2), *taker = make_stage(0, 2), *bare = make_stage(0, 2);
    train_steps(giver, 0, 4);
    size_t n = xdc_gpt_stage_num_params(giver), cut[3] = {0, n / 3, n};
    float *p = calloc(n, sizeof *p), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v),
          *zero = calloc(n, sizeof *zero);
    XDC_ASSERT(p && m && v && zero);
    int64_t t = 0, got = 0;
    XDC_ASSERT_OK(xdc_gpt_stage_state_get(giver, p, m, v, &t));
    XDC_ASSERT_EQ(t, 4);
    XDC_ASSERT_OK(xdc_gpt_stage_state_set(taker, p, zero, zero, 0));
    XDC_ASSERT_OK(xdc_gpt_stage_state_set(bare, p, zero, zero, 0));
    for (int k = 0; k < 2; k++) { /* each slice from the giver's arena, as a member stages it */
        size_t lo = cut[k], hi = cut[k + 1];
        float *sm = calloc(hi - lo, sizeof *sm), *sv = calloc(hi - lo, sizeof *sv);
        XDC_ASSERT_OK(xdc_gpt_stage_moments_get(giver, lo, hi, sm, sv, &got));
        XDC_ASSERT(got == 4 && memcmp(sm, m + lo, (hi - lo) * sizeof *sm) == 0);
        XDC_ASSERT_OK(xdc_gpt_stage_moments_set(taker, lo, hi, sm, sv, got));
        free(sm), free(sv);
    }
    XDC_ASSERT_ERR(xdc_gpt_stage_moments_get(giver, n / 2, n + 1, m, v, &got), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_gpt_stage_moments_set(taker, 0, 1, m, v, -1), XDC_ERR_INVALID);
    train_steps(giver, 4, 8), train_steps(taker, 4, 8), train_steps(bare, 4, 8);
    XDC_ASSERT_MSG(hash_of(taker) == hash_of(giver), "the taker diverged from the giver");
    XDC_ASSERT_MSG(hash_of(bare) != hash_of(giver), "zero moments made no difference");
    free(p), free(m), free(v), free(zero);
    xdc_gpt_stage_destroy(giver), xdc_gpt_stage_destroy(taker), xdc_gpt_stage_destroy(bare);
}

XDC_TEST(ckpt_corruption_and_mismatch_are_refused_naming_the_file)
{
    const char *dir = xdc_test_tmpdir();
    xdc_gpt_stage *s = make_stage(0, 2), *other = make_stage(1, 2);
    xdc_ckpt_meta meta = {.stage = 0, .n_stages = 1, .step = 1}, back;
    XDC_ASSERT_OK(xdc_ckpt_save(dir, s, &meta, NULL));
    char path[600];
    xdc_ckpt_path(dir, 0, path, sizeof path);
    size_t len = 0;
    char *orig = xdc_test_read_file(path, &len);
    XDC_ASSERT(orig && len > 200);
    xdc_diag d = {{0}};

    /* a flipped byte in the compressed payload */
    FILE *f = fopen(path, "r+b");
    fseek(f, (long)len - 10, SEEK_SET);
    fputc(orig[len - 10] ^ 0x40, f);
    fclose(f);
    XDC_ASSERT_ERR(xdc_ckpt_load(dir, 0, 100, s, &back, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, path);
    XDC_ASSERT_STR_CONTAINS(d.msg, "checksum mismatch");

    /* a flipped byte in the header (the step) */
    f = fopen(path, "wb");
    fwrite(orig, 1, len, f);
    fclose(f);
    f = fopen(path, "r+b");
    fseek(f, 32, SEEK_SET);
    fputc(orig[32] ^ 1, f);
    fclose(f);
    XDC_ASSERT_ERR(xdc_ckpt_load(dir, 0, 100, s, &back, &d), XDC_ERR_CORRUPT);

    /* truncated */
    XDC_ASSERT(truncate(path, (off_t)len / 2) == 0);
    XDC_ASSERT_ERR(xdc_ckpt_load(dir, 0, 100, s, &back, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, path);

    /* intact again, but loaded into a stage of another shape */
    f = fopen(path, "wb");
    fwrite(orig, 1, len, f);
    fclose(f);
    XDC_ASSERT_ERR(xdc_ckpt_load(dir, 0, 100, other, &back, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, path);
    XDC_ASSERT_OK(xdc_ckpt_load(dir, 0, 100, s, &back, &d));
    /* missing */
    XDC_ASSERT_ERR(xdc_ckpt_load(dir, 3, 100, s, &back, &d), XDC_ERR_IO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "stage-3.ckpt");
    free(orig);
    xdc_gpt_stage_destroy(s), xdc_gpt_stage_destroy(other);
}

/* Overwrite the u64 at header offset `off` of a checkpoint image and seal it with a fresh checksum (XXH64
 * over the header with its checksum field zeroed, then the payload), as a forger with the format would. */
static void forge_u64(char *img, size_t len, size_t off, uint64_t v)
{
    memcpy(img + off, &v, 8);
    memset(img + 112, 0, 8);
    xdc_hash_state *st = xdc_hash64_create(0);
    xdc_hash64_update(st, img, len);
    uint64_t sum = xdc_hash64_digest(st);
    xdc_hash64_destroy(st);
    memcpy(img + 112, &sum, 8);
}

/* Each header field is checked against the run even when the checksum holds, and the message names the
 * file, the field and what differs (before: step -5 resumed "at step -5", 2^62 trained nothing, and a
 * size mismatch read "stage 0 with 136960 parameters; this run has stage 0 with 136960"). */
XDC_TEST(ckpt_header_fields_are_checked_naming_the_field)
{
    const char *dir = xdc_test_tmpdir();
    xdc_gpt_stage *s = make_stage(0, 2), *other = make_stage(1, 2);
    char path[600], want[800];
    xdc_ckpt_path(dir, 0, path, sizeof path);
    xdc_diag d = {{0}};
    xdc_ckpt_meta back;
    static const struct {
        int64_t step;
        const char *text;
    } steps[] = {{-5, "field step is -5, outside this run's steps 0..100"},
                 {INT64_C(1) << 62, "field step is 4611686018427387904, outside this run's steps 0..100"}};
    for (size_t i = 0; i < 2; i++) {
        xdc_ckpt_meta meta = {.stage = 0, .n_stages = 1, .step = steps[i].step};
        XDC_ASSERT_OK(xdc_ckpt_save(dir, s, &meta, NULL));
        XDC_ASSERT_ERR(xdc_ckpt_load(dir, 0, 100, s, &back, &d), XDC_ERR_CONFIG);
        snprintf(want, sizeof want, "%s: %s", path, steps[i].text);
        XDC_ASSERT_STR_CONTAINS(d.msg, want);
    }
    xdc_ckpt_meta meta = {.stage = 0, .n_stages = 1, .step = 100};
    XDC_ASSERT_OK(xdc_ckpt_save(dir, s, &meta, NULL));
    XDC_ASSERT_OK(xdc_ckpt_load(dir, 0, 100, s, &back, &d)); /* the last step is within the run */
    size_t len = 0, n = xdc_gpt_stage_num_params(s);
    char *img = xdc_test_read_file(path, &len);
    XDC_ASSERT(img != NULL);
    XDC_ASSERT_ERR(xdc_ckpt_decode(path, (const uint8_t *)img, len, 0, 100, other, &back, &d), XDC_ERR_CONFIG);
    snprintf(want, sizeof want, "%s: field num_params is %zu; stage 0 of this run's model has %zu parameters", path, n,
             xdc_gpt_stage_num_params(other));
    XDC_ASSERT_STR_CONTAINS(d.msg, want);
    XDC_ASSERT_ERR(xdc_ckpt_decode(path, (const uint8_t *)img, len, 1, 100, s, &back, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "field stage is 0; this run loads stage 1");
    forge_u64(img, len, 96, 3 * n * sizeof(float) + 4); /* raw_bytes */
    XDC_ASSERT_ERR(xdc_ckpt_decode(path, (const uint8_t *)img, len, 0, 100, s, &back, &d), XDC_ERR_CORRUPT);
    snprintf(want, sizeof want, "field raw_bytes is %zu; %zu parameters make %zu", 3 * n * sizeof(float) + 4, n,
             3 * n * sizeof(float));
    XDC_ASSERT_STR_CONTAINS(d.msg, want);
    forge_u64(img, len, 96, 3 * n * sizeof(float));
    forge_u64(img, len, 40, (uint64_t)-1); /* adam_t */
    XDC_ASSERT_ERR(xdc_ckpt_decode(path, (const uint8_t *)img, len, 0, 100, s, &back, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "field adam_t is -1");
    forge_u64(img, len, 40, 0);
    forge_u64(img, len, 16, UINT64_C(1) << 32); /* n_stages 0, reserved 1 */
    XDC_ASSERT_ERR(xdc_ckpt_decode(path, (const uint8_t *)img, len, 0, 100, s, &back, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "field n_stages is 0, which does not hold stage 0");
    free(img);
    xdc_gpt_stage_destroy(s), xdc_gpt_stage_destroy(other);
}

/* A symbolic link planted at the temp name is replaced, never written through; a checkpoint directory
 * that is itself a link is refused with the reason. */
XDC_TEST(ckpt_save_does_not_follow_links)
{
    const char *t = xdc_test_tmpdir();
    char dir[600], victim[600], tmp[700], link_dir[600];
    snprintf(dir, sizeof dir, "%s/ck", t);
    snprintf(victim, sizeof victim, "%s/victim", t);
    XDC_ASSERT(mkdir(dir, 0755) == 0);
    xdc_test_write_file(victim, "precious\n");
    xdc_ckpt_path(dir, 0, tmp, sizeof tmp - 8);
    strcat(tmp, ".tmp");
    XDC_ASSERT(symlink(victim, tmp) == 0);
    xdc_gpt_stage *s = make_stage(0, 2);
    xdc_ckpt_meta meta = {.stage = 0, .n_stages = 1, .step = 3}, back;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_ckpt_save(dir, s, &meta, &d));
    char *v = xdc_test_read_file(victim, NULL);
    XDC_ASSERT(v && strcmp(v, "precious\n") == 0);
    free(v);
    XDC_ASSERT(access(tmp, F_OK) != 0);
    XDC_ASSERT_OK(xdc_ckpt_load(dir, 0, 10, s, &back, &d));
    snprintf(link_dir, sizeof link_dir, "%s/ck-link", t);
    XDC_ASSERT(symlink(dir, link_dir) == 0);
    XDC_ASSERT_ERR(xdc_ckpt_save(link_dir, s, &meta, &d), XDC_ERR_IO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "it must be a directory, not a symbolic link");
    xdc_gpt_stage_destroy(s);
}
