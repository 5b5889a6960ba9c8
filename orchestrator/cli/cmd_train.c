/* cmd_train.c — `xdc train --single`: trains the GPT of a model config in one process (the whole model as
 * one stage) on a text file, a token shard or a directory of text files. Progress lines while training;
 * the last line is `final val_loss=<x> params_xxh64=<hex> steps=<n>`, the same hash the distributed
 * runtime prints over all its stages. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_parse.h"
#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_rng.h"
#include "common/xdc_time.h"
#include "model/xdc_gpt.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_ckpt.h"
#include "model/xdc_data.h"
#include "model/xdc_model_config.h"

#include <errno.h>
#include <math.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct train_opts {
    const char *config, *data, *ckpt_dir, *backend;
    xdc_backend_kind kind;                 /* parsed from backend */
    long steps, threads, seed, ckpt_every; /* -1: not given */
    int resume;
} train_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: xdc train --single -c CONFIG.yaml --data FILE|DIR [--steps N] [--threads N] [--seed S]\n"
            "                 [--checkpoint-dir D [--checkpoint-every N] [--resume]] [--backend cpu|cuda|cpu-strict]\n"
            "  --steps N            stop after N optimizer steps in total (default: train.steps); the learning\n"
            "                       rate schedule always spans train.steps, so a run can stop and resume\n"
            "  --threads N          CPU threads for the matmuls (default: online CPUs); results are\n"
            "                       deterministic for a given seed and thread count\n"
            "  --seed S             overrides train.seed (init and data order)\n"
            "  --checkpoint-dir D   write D/stage-0.ckpt every --checkpoint-every steps and at the end\n"
            "  --resume             continue from D/stage-0.ckpt when it exists\n");
}

static int parse_long(const char *flag, const char *text, long lo, long hi, long *out)
{
    xdc_diag d;
    int64_t v;
    if (xdc_parse_i64(text, lo, hi, &v, &d) != XDC_OK) {
        fprintf(stderr, "xdc train: %s: %s\n", flag, d.msg);
        return XDC_EX_USAGE;
    }
    *out = (long)v;
    return 0;
}

static int parse_args(int argc, char **argv, train_opts *o)
{
    enum { O_DATA = 256, O_STEPS, O_THREADS, O_SEED, O_CKDIR, O_CKEVERY, O_RESUME, O_SINGLE, O_BACKEND };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},
        {"data", required_argument, NULL, O_DATA},
        {"steps", required_argument, NULL, O_STEPS},
        {"threads", required_argument, NULL, O_THREADS},
        {"seed", required_argument, NULL, O_SEED},
        {"checkpoint-dir", required_argument, NULL, O_CKDIR},
        {"checkpoint-every", required_argument, NULL, O_CKEVERY},
        {"resume", no_argument, NULL, O_RESUME},
        {"single", no_argument, NULL, O_SINGLE},
        {"backend", required_argument, NULL, O_BACKEND},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int single = 0, c, rc = 0;
    *o = (train_opts){.steps = -1, .threads = -1, .seed = -1, .ckpt_every = -1, .backend = "cpu"};
    optind = 1;
    while (rc == 0 && (c = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->config = optarg; break;
        case O_DATA: o->data = optarg; break;
        case O_STEPS: rc = parse_long("--steps", optarg, 0, 1000000000L, &o->steps); break;
        case O_THREADS: rc = parse_long("--threads", optarg, 1, 1024, &o->threads); break;
        case O_SEED: rc = parse_long("--seed", optarg, 0, 9000000000000000000L, &o->seed); break;
        case O_CKDIR: o->ckpt_dir = optarg; break;
        case O_CKEVERY: rc = parse_long("--checkpoint-every", optarg, 1, 1000000000L, &o->ckpt_every); break;
        case O_RESUME: o->resume = 1; break;
        case O_SINGLE: single = 1; break;
        case O_BACKEND: o->backend = optarg; break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return XDC_EX_USAGE;
        }
    }
    if (rc) return rc;
    const char *missing = !single      ? "--single (multi-process training runs through `xdc launch`)"
                          : !o->config ? "-c CONFIG"
                          : !o->data   ? "--data FILE"
                          : (o->resume || o->ckpt_every > 0) && !o->ckpt_dir ? "--checkpoint-dir"
                          : optind < argc                                    ? "nothing after the options"
                                                                             : NULL;
    if (missing) {
        fprintf(stderr, "xdc train: expected %s\n", missing);
        usage(stderr);
        return XDC_EX_USAGE;
    }
    if (xdc_backend_parse(o->backend, &o->kind) != XDC_OK) {
        fprintf(stderr, "xdc train: --backend must be cpu, cuda or cpu-strict, got '%s'\n", o->backend);
        return XDC_EX_USAGE;
    }
    return 0;
}

/* Mean validation loss over the first n validation batches (slot 0, no backward). */
static xdc_err_t eval_loss(xdc_gpt_stage *s, xdc_data *d, int n, int32_t *in, int32_t *tgt, double *out)
{
    int avail = xdc_data_val_batches(d);
    if (n > avail) n = avail;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float loss;
        XDC_CHECK(xdc_data_val_batch(d, i, in, tgt));
        XDC_CHECK(xdc_gpt_stage_forward(s, 0, in, NULL, tgt, NULL, &loss));
        sum += loss;
    }
    *out = sum / n;
    return XDC_OK;
}

/* Exit code for a failure, after printing what failed. */
static int fail(const char *what, xdc_err_t rc, const xdc_diag *diag)
{
    fprintf(stderr, "xdc train: %s: %s%s%s\n", what, xdc_strerror(rc), diag && diag->msg[0] ? ": " : "",
            diag ? diag->msg : "");
    return xdc_cli_exit_code(rc);
}

typedef struct train_run {
    train_opts opt;
    xdc_train_config cfg;
    xdc_gpt_stage *stage;
    xdc_data *data;
    int32_t *in, *tgt; /* (B,T) host batch */
    xdc_rng rng;       /* the run's RNG: checkpointed so stochastic additions resume exactly */
    int64_t step;
} train_run;

static int save_checkpoint(train_run *r)
{
    xdc_diag d = {{0}};
    xdc_ckpt_meta meta = {
        .stage = 0, .n_stages = 1, .step = r->step, .data_pos = xdc_data_get_pos(r->data), .rng = r->rng};
    xdc_err_t rc = xdc_ckpt_save(r->opt.ckpt_dir, r->stage, &meta, &d);
    if (rc != XDC_OK) return fail("checkpoint", rc, &d);
    XDC_INFO(XDC_SUB_ORCH, "checkpoint at step %lld in %s", (long long)r->step, r->opt.ckpt_dir);
    return 0;
}

static int resume(train_run *r)
{
    char path[4096];
    xdc_ckpt_path(r->opt.ckpt_dir, 0, path, sizeof path);
    if (access(path, F_OK) != 0) {
        printf("no checkpoint at %s: starting from step 0\n", path);
        return 0;
    }
    xdc_diag d = {{0}};
    xdc_ckpt_meta meta;
    xdc_err_t rc = xdc_ckpt_load(r->opt.ckpt_dir, 0, r->cfg.steps, r->stage, &meta, &d);
    if (rc == XDC_OK && xdc_data_set_pos(r->data, meta.data_pos) != XDC_OK) {
        xdc_diag_set(&d, "%s: field data_batch is %llu; the data has %llu batches per epoch", path,
                     (unsigned long long)meta.data_pos.batch, (unsigned long long)xdc_data_batches_per_epoch(r->data));
        rc = XDC_ERR_CORRUPT;
    }
    if (rc != XDC_OK) return fail("resume", rc, &d);
    r->step = meta.step;
    r->rng = meta.rng;
    printf("resumed from %s at step %lld\n", path, (long long)r->step);
    return 0;
}

static int train_loop(train_run *r, int64_t stop)
{
    const xdc_train_config *c = &r->cfg;
    xdc_lr_schedule sch = {(float)c->lr, (float)c->min_lr_frac, c->warmup_steps, c->steps};
    double tokens_per_step = (double)c->batch_size * c->seq_len * c->microbatches;
    uint64_t t_last = xdc_now_ns();
    int64_t step_last = r->step;
    xdc_err_t rc = XDC_OK;
    while (r->step < stop) {
        xdc_gpt_stage_zero_grad(r->stage);
        double loss = 0.0;
        for (int mb = 0; mb < c->microbatches && rc == XDC_OK; mb++) {
            float l = 0.0f;
            rc = xdc_data_next_train(r->data, r->in, r->tgt);
            if (rc == XDC_OK) rc = xdc_gpt_stage_forward(r->stage, 0, r->in, NULL, r->tgt, NULL, &l);
            if (rc == XDC_OK) rc = xdc_gpt_stage_backward(r->stage, 0, NULL, 1.0f / (float)c->microbatches, NULL);
            loss += l / c->microbatches;
        }
        double sumsq = 0.0;
        if (rc == XDC_OK) rc = xdc_gpt_stage_grad_sumsq(r->stage, &sumsq);
        float lr = xdc_lr_at(&sch, (int)r->step);
        if (rc == XDC_OK)
            rc = xdc_gpt_stage_optimizer_step(r->stage, lr, xdc_gpt_clip_scale(sumsq, (float)c->grad_clip));
        if (rc != XDC_OK) return fail("training step", rc, NULL);
        r->step++;
        if (r->step % c->log_interval == 0 || r->step == stop) {
            uint64_t now = xdc_now_ns();
            double secs = (double)(now - t_last) / 1e9;
            printf("step %lld/%lld loss %.4f lr %.3e grad_norm %.3f tokens/s %.0f\n", (long long)r->step,
                   (long long)stop, loss, lr, sqrt(sumsq),
                   secs > 0 ? tokens_per_step * (double)(r->step - step_last) / secs : 0.0);
            fflush(stdout);
            t_last = now;
            step_last = r->step;
        }
        if (c->eval_interval > 0 && r->step % c->eval_interval == 0 && r->step != stop) {
            double vl;
            if ((rc = eval_loss(r->stage, r->data, c->eval_batches, r->in, r->tgt, &vl)) != XDC_OK)
                return fail("validation", rc, NULL);
            printf("step %lld val_loss %.4f\n", (long long)r->step, vl);
        }
        if (r->opt.ckpt_dir && r->opt.ckpt_every > 0 && r->step % r->opt.ckpt_every == 0 && r->step != stop) {
            int ex = save_checkpoint(r);
            if (ex) return ex;
        }
    }
    return 0;
}

static int run(train_run *r)
{
    const xdc_train_config *c = &r->cfg;
    const xdc_kern_backend *be = NULL;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_kern_backend_get(r->opt.kind, &be, &d);
    if (rc != XDC_OK) return fail("backend", rc, &d);
    long threads = r->opt.threads > 0 ? r->opt.threads : sysconf(_SC_NPROCESSORS_ONLN);
    be->model->set_threads((int)threads);

    xdc_data_config dc = {.batch = c->batch_size,
                          .seq_len = c->seq_len,
                          .val_fraction = c->val_fraction,
                          .seed = (uint64_t)c->seed,
                          .rank = 0,
                          .world = 1,
                          .vocab_size = c->model.vocab_size};
    if ((rc = xdc_data_open(r->opt.data, &dc, &r->data, &d)) != XDC_OK)
        return fail("data", rc == XDC_ERR_INVALID ? XDC_ERR_RANGE : rc, &d);
    xdc_gpt_stage_config sc = {.model = c->model,
                               .layer_begin = 0,
                               .layer_end = c->model.n_layer,
                               .batch = c->batch_size,
                               .seq_len = c->seq_len,
                               .max_inflight = 1,
                               .seed = (uint64_t)c->seed,
                               .adamw = {(float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay}};
    if ((rc = xdc_gpt_stage_create(be->model, &sc, &r->stage, &d)) != XDC_OK) return fail("model", rc, &d);
    size_t bt = (size_t)c->batch_size * (size_t)c->seq_len;
    r->in = xdc_malloc(bt * sizeof(int32_t));
    r->tgt = xdc_malloc(bt * sizeof(int32_t));
    if (!r->in || !r->tgt) return fail("batch buffers", XDC_ERR_NOMEM, NULL);
    xdc_rng_seed(&r->rng, (uint64_t)c->seed);

    printf("model: %d layers, %d heads, width %d, context %d, vocab %d: %zu parameters; backend %s, %ld threads\n",
           c->model.n_layer, c->model.n_head, c->model.n_embd, c->model.max_seq_len, c->model.vocab_size,
           xdc_gpt_stage_num_params(r->stage), be->name, threads);
    printf("data: %s: %zu train tokens, %zu validation tokens, %llu batches per epoch\n", r->opt.data,
           xdc_data_train_tokens(r->data), xdc_data_val_tokens(r->data),
           (unsigned long long)xdc_data_batches_per_epoch(r->data));
    int ex = r->opt.resume ? resume(r) : 0;
    int64_t stop = r->opt.steps >= 0 ? r->opt.steps : c->steps;
    if (!ex) ex = train_loop(r, stop);
    if (!ex && r->opt.ckpt_dir) ex = save_checkpoint(r);
    if (ex) return ex;

    double vl;
    uint64_t hash;
    if ((rc = eval_loss(r->stage, r->data, c->eval_batches, r->in, r->tgt, &vl)) != XDC_OK)
        return fail("validation", rc, NULL);
    if ((rc = xdc_gpt_params_xxh64(&r->stage, 1, &hash)) != XDC_OK) return fail("hash", rc, NULL);
    printf("final val_loss=%.4f params_xxh64=%016llx steps=%lld\n", vl, (unsigned long long)hash, (long long)r->step);
    return 0;
}

int xdc_cmd_train(int argc, char **argv)
{
    train_run r = {0};
    int ex = parse_args(argc, argv, &r.opt);
    if (ex) return ex < 0 ? 0 : ex;
    xdc_cfg_errors errs;
    xdc_cfg_errors_init(&errs, r.opt.config);
    if (xdc_model_config_load(r.opt.config, &r.cfg, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        return XDC_EX_CONFIG;
    }
    if (r.opt.seed >= 0) r.cfg.seed = r.opt.seed;
    if (r.opt.ckpt_dir && mkdir(r.opt.ckpt_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "xdc train: cannot create %s: %s\n", r.opt.ckpt_dir, strerror(errno));
        return XDC_EX_IOERR;
    }
    ex = run(&r);
    xdc_free(r.in);
    xdc_free(r.tgt);
    xdc_gpt_stage_destroy(r.stage);
    xdc_data_destroy(r.data);
    return ex;
}
