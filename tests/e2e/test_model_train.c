/* test_model_train.c — `xdc train --single` end to end: the tiny config on the Debian fortunes text
 * learns well below the unigram entropy of its validation bytes; stopping, checkpointing and resuming
 * ends on the same params_xxh64 as an uninterrupted run; config and usage errors exit 78 and 64 naming
 * the problem; a corrupt checkpoint stops a resume with exit 65 and the file named. */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <stdlib.h>

#define FORTUNES "/usr/share/games/fortunes"

/* A few fortunes files concatenated into tmpdir/corpus.txt (about 450 KB). */
static const char *make_corpus(void)
{
    static char path[512];
    char cmd[1200], out[256];
    snprintf(path, sizeof path, "%s/corpus.txt", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "cd " FORTUNES " 2>/dev/null && cat fortunes goedel kids humorists education food drugs computers > '%s'",
             path);
    if (xdc_test_run(cmd, out, sizeof out) != 0) xdc_test_skip("the fortunes package is not installed (" FORTUNES ")");
    return path;
}

/* Unigram entropy in nats of the last `frac` of the file's bytes: the split the loader validates on. */
static double val_unigram_entropy(const char *path, double frac)
{
    size_t len = 0;
    unsigned char *b = (unsigned char *)xdc_test_read_file(path, &len);
    XDC_ASSERT(b && len > 1000);
    size_t start = (size_t)((double)len * (1.0 - frac)), n = len - start;
    double counts[256] = {0}, h = 0;
    for (size_t i = start; i < len; i++) counts[b[i]]++;
    for (int i = 0; i < 256; i++)
        if (counts[i] > 0) h -= counts[i] / n * log(counts[i] / n);
    free(b);
    return h;
}

/* Parses the one final line; fails the test when it is missing or repeated. */
static void parse_final(const char *out, double *val_loss, char hash[17], long *steps)
{
    const char *f = strstr(out, "final val_loss=");
    XDC_ASSERT_MSG(f != NULL, "no final line in: %s", out);
    XDC_ASSERT_MSG(strstr(f + 1, "final val_loss=") == NULL, "two final lines");
    XDC_ASSERT_EQ(sscanf(f, "final val_loss=%lf params_xxh64=%16s steps=%ld", val_loss, hash, steps), 3);
    XDC_ASSERT_EQ(strlen(hash), 16);
}

static int run_train(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s train --single %s 2>&1", xdc_test_bin(), args);
    return xdc_test_run(cmd, out, cap);
}

XDC_TEST_T(model_train_single_beats_unigram_entropy, 180)
{
    const char *corpus = make_corpus();
    char cfg[512], args[1200];
    static char out[1 << 16];
    xdc_test_src("examples/models/tiny.yaml", cfg, sizeof cfg);
    snprintf(args, sizeof args, "-c %s --data %s --steps 300 --threads 2", cfg, corpus);
    int rc = run_train(args, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "exit %d: %s", rc, out);
    double vl, h = val_unigram_entropy(corpus, 0.1);
    char hash[17];
    long steps;
    parse_final(out, &vl, hash, &steps);
    XDC_ASSERT_EQ(steps, 300);
    XDC_ASSERT_STR_CONTAINS(out, "tokens/s");
    XDC_ASSERT_MSG(h > 2.5 && h < 4.0, "unigram entropy %.3f nats is not English-like", h);
    XDC_ASSERT_MSG(vl < h - 0.4, "val_loss %.4f is not well below the unigram entropy %.4f nats", vl, h);
}

XDC_TEST_T(model_train_single_on_cpu_strict_matches_cpu, 120)
{
    /* The single-process trainer on the strict device (memory the host cannot touch, ops on a stream
     * thread): the same ops in the same order, so the same parameters to the bit. */
    const char *corpus = make_corpus();
    char cfg[512], args[1200], hash[2][17];
    static char out[1 << 16];
    xdc_test_src("examples/models/tiny.yaml", cfg, sizeof cfg);
    static const char *const backends[2] = {"cpu", "cpu-strict"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "-c %s --data %s --steps 8 --threads 1 --backend %s", cfg, corpus, backends[i]);
        int rc = run_train(args, out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "--backend %s: exit %d: %s", backends[i], rc, out);
        double vl;
        long steps;
        parse_final(out, &vl, hash[i], &steps);
        XDC_ASSERT_EQ(steps, 8);
    }
    XDC_ASSERT_MSG(strcmp(hash[0], hash[1]) == 0, "cpu %s, cpu-strict %s", hash[0], hash[1]);
}

XDC_TEST_T(model_train_resume_matches_uninterrupted_run, 120)
{
    const char *corpus = make_corpus();
    const char *dir = xdc_test_tmpdir();
    char cfg[600], args[1600], ck[600];
    static char out[1 << 16];
    snprintf(cfg, sizeof cfg, "%s/small.yaml", dir);
    xdc_test_write_file(cfg, "model: {layers: 2, heads: 2, width: 32, context: 32}\n"
                             "train: {batch_size: 4, seq_len: 32, microbatches: 2, steps: 30, warmup_steps: 5,\n"
                             "        lr: 0.003, eval_interval: 0, eval_batches: 2, log_interval: 10}\n");
    snprintf(ck, sizeof ck, "%s/ck", dir);
    double v1, v2;
    char h1[17], h2[17];
    long s1, s2;
    snprintf(args, sizeof args, "-c %s --data %s --threads 1", cfg, corpus);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 0);
    parse_final(out, &v1, h1, &s1);
    snprintf(args, sizeof args, "-c %s --data %s --threads 1 --steps 12 --checkpoint-dir %s --checkpoint-every 5", cfg,
             corpus, ck);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 0);
    parse_final(out, &v2, h2, &s2);
    XDC_ASSERT_EQ(s2, 12);
    XDC_ASSERT(strcmp(h1, h2) != 0);
    snprintf(args, sizeof args, "-c %s --data %s --threads 1 --checkpoint-dir %s --resume", cfg, corpus, ck);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "resumed from");
    XDC_ASSERT_STR_CONTAINS(out, "at step 12");
    parse_final(out, &v2, h2, &s2);
    XDC_ASSERT_EQ(s2, 30);
    XDC_ASSERT_MSG(strcmp(h1, h2) == 0, "resumed %s vs uninterrupted %s", h2, h1);
    XDC_ASSERT(v1 == v2);

    /* corrupt the checkpoint: the resume stops, naming the file */
    char path[700];
    snprintf(path, sizeof path, "%s/stage-0.ckpt", ck);
    FILE *f = fopen(path, "r+b");
    XDC_ASSERT(f != NULL);
    fseek(f, 300, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 300, SEEK_SET);
    fputc(c ^ 0xff, f);
    fclose(f);
    int rc = run_train(args, out, sizeof out);
    XDC_ASSERT_MSG(rc == 65, "exit %d: %s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, path);
    XDC_ASSERT_STR_CONTAINS(out, "checksum mismatch");

    /* the seed is what makes the run: another seed, another model */
    snprintf(args, sizeof args, "-c %s --data %s --threads 1 --steps 30 --seed 7", cfg, corpus);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 0);
    parse_final(out, &v2, h2, &s2);
    XDC_ASSERT(strcmp(h1, h2) != 0);
}

XDC_TEST(model_train_config_and_usage_errors_exit_with_sysexits)
{
    const char *dir = xdc_test_tmpdir();
    char cfg[600], args[1400];
    static char out[1 << 14];
    snprintf(cfg, sizeof cfg, "%s/bad.yaml", dir);
    xdc_test_write_file(cfg, "model:\n  layers: 2\n  heads: 4\n  widht: 64\n  context: 64\ntrain:\n  lr: 0.001\n");
    snprintf(args, sizeof args, "-c %s --data /dev/null", cfg);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "bad.yaml:4:3");
    XDC_ASSERT_STR_CONTAINS(out, "unknown key 'widht'");
    xdc_test_write_file(cfg,
                        "model: {layers: 2, heads: 4, width: 64, context: 64}\ntrain:\n  lr: 0.001\n  steps: -5\n");
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "bad.yaml:4:");
    xdc_test_write_file(cfg, "model: {layers: 2, heads: 3, width: 64, context: 64}\ntrain: {lr: 0.001}\n");
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "multiple of heads");
    xdc_test_write_file(cfg, "model: {layers: 2, heads: 4, width: 64, context: 32}\ntrain: {seq_len: 64}\n");
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "exceeds the model context");

    char good[512];
    xdc_test_src("examples/models/tiny.yaml", good, sizeof good);
    snprintf(args, sizeof args, "-c %s", good);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "--data");
    snprintf(args, sizeof args, "-c %s --data /dev/null --threads zero", good);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 64);
    snprintf(args, sizeof args, "-c %s --data %s/missing.txt", good, dir);
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 74);
    XDC_ASSERT_STR_CONTAINS(out, "missing.txt");
    snprintf(args, sizeof args, "-c %s --data /dev/null", good); /* empty: too little data */
    XDC_ASSERT_EQ(run_train(args, out, sizeof out), 65);
}
