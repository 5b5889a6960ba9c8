/* test_orch_util.c — run files, launches and their results for the end-to-end runtime tests
 * (test_orch_util.h). */
#include "tests/e2e/test_orch_util.h"

#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_data.h"
#include "model/xdc_model_config.h"
#include "orchestrator/worker/orch_worker.h"

#include <dirent.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void e2e_need_corpus(void)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
}

/* A run file in the test's folder: the tiny model with 2 pipeline stages, 2 microbatches and the given
 * mode, steps, codec and extras (an `extra` that names its own model or microbatches replaces those). */
const char *e2e_write_run_pb(const char *name, const char *mode, int steps, const char *codec, int stages,
                             double bucket_mb, const char *extra)
{
    static char path[512];
    char cwd[400], text[2048];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    char model[512] = ""; /* an `extra` that names its own model replaces tiny.yaml */
    if (!(extra && strstr(extra, "model:")))
        snprintf(model, sizeof model, "model: %s/examples/models/tiny.yaml\n", cwd);
    snprintf(text, sizeof text,
             "%sdata: %s\nmode: %s\npipeline_stages: %d\n%s"
             "steps: %d\ncodec: %s\nbucket_mb: %g\nthreads: 1\n%s%s",
             model, DATA, mode, stages, extra && strstr(extra, "microbatches:") ? "" : "microbatches: 2\n", steps,
             codec, bucket_mb,
             extra && strstr(extra, "timeouts:") ? "" : "timeouts: {rendezvous: 30s, operation: 30s}\n",
             extra ? extra : "");
    xdc_test_write_file(path, text);
    return path;
}

const char *e2e_write_run_p(const char *name, const char *mode, int steps, const char *codec, int stages,
                            const char *extra)
{
    return e2e_write_run_pb(name, mode, steps, codec, stages, 0.05, extra);
}

const char *e2e_write_run(const char *name, const char *mode, int steps, const char *codec, const char *extra)
{
    return e2e_write_run_p(name, mode, steps, codec, 2, extra);
}

/* Run `xdc launch` to completion; returns its exit code, output in out. */
int e2e_launch(const char *run, const char *run_dir, const char *flags, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s %s", xdc_test_bin(), TOPO, run, run_dir,
             flags ? flags : "");
    return xdc_test_run(cmd, out, cap);
}

void e2e_final_field(const char *out, const char *key, char *val, size_t cap)
{
    const char *f = strstr(out, "final val_loss=");
    XDC_ASSERT_MSG(f != NULL, "no final line in:\n%s", out);
    const char *k = strstr(f, key);
    XDC_ASSERT_MSG(k != NULL, "no %s in the final line", key);
    k += strlen(key);
    size_t n = strcspn(k, " \n");
    snprintf(val, cap, "%.*s", (int)(n < cap ? n : cap - 1), k);
}

void e2e_resume_ends_on(const char *run, const char *run_dir, const char *want, char *out, size_t cap)
{
    char got[64];
    int rc = e2e_launch(run, run_dir, "--resume", out, cap);
    XDC_ASSERT_MSG(rc == 0, "the resume exited %d:\n%s", rc, out);
    e2e_final_field(out, "params_xxh64=", got, sizeof got);
    XDC_ASSERT_MSG(strcmp(got, want) == 0, "the resumed run ends at %s, the uninterrupted one at %s", got, want);
}

/* Launch into TMP/<name>, require success and return its params hash (and the run folder). */
void e2e_launch_hash(const char *run, const char *name, const char *flags, char *out, size_t cap, char *dir,
                     size_t dir_cap, char hash[64])
{
    snprintf(dir, dir_cap, "%s/%s", xdc_test_tmpdir(), name);
    int rc = e2e_launch(run, dir, flags, out, cap);
    XDC_ASSERT_MSG(rc == 0, "launch %s exited %d:\n%s", name, rc, out);
    e2e_final_field(out, "params_xxh64=", hash, 64);
}

/* The tiny model with `layers` (1-9) layers and `batch` (10-99) sequences per microbatch, written into
 * the test's folder; returns its path (a static buffer). */
const char *e2e_write_tiny(int layers, int batch)
{
    static char path[600];
    char *text = xdc_test_read_file("examples/models/tiny.yaml", NULL);
    char *l = text ? strstr(text, "layers: 2") : NULL, *b = text ? strstr(text, "batch_size: 16") : NULL;
    XDC_ASSERT(l && b && layers >= 1 && layers <= 9 && batch >= 10 && batch <= 99);
    l[8] = (char)('0' + layers);
    b[12] = (char)('0' + batch / 10);
    b[13] = (char)('0' + batch % 10);
    snprintf(path, sizeof path, "%s/tiny-%d-%d.yaml", xdc_test_tmpdir(), layers, batch);
    xdc_test_write_file(path, text);
    free(text);
    return path;
}

/* Start `xdc coordinator` for `run` (output in log) and return its address once it listens (bounded
 * wait); *pid receives its process. The caller frees the address. */
char *e2e_start_coordinator(const char *run, const char *dir, const char *log, const char *run_id, pid_t *pid)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "coordinator", "-t", TOPO, "-c", run, "--run-dir", dir, "--host",
              "127.0.0.1", "--port", "0", "--run-id", run_id, (char *)NULL);
        _exit(127);
    }
    *pid = p;
    char *coord = NULL;
    for (int i = 0; i < 400 && !coord; i++) {
        char *text = xdc_test_read_file(log, NULL);
        char *at = text ? strstr(text, "--coordinator ") : NULL;
        if (at) coord = strndup(at + strlen("--coordinator "), strcspn(at + strlen("--coordinator "), " \n"));
        free(text);
        if (!coord) nanosleep(&(struct timespec){0, 25 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(coord != NULL, "the coordinator did not start");
    return coord;
}

/* Print the lines of `path` that say what went wrong or who left and came back (kept in the test's output
 * when it fails: the run folder is removed). */
static void print_story(const char *path)
{
    char *text = xdc_test_read_file(path, NULL);
    static const char *const words[] = {"error",   "failed", "dropped",     "rejoin", "took the state",
                                        "did not", "exited", "waiting for", "warn",   "quorum"};
    printf("---- %s\n", path);
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
            if (strstr(line, words[k])) {
                printf("%s\n", line);
                break;
            }
    free(text);
    fflush(stdout); /* a failed assertion ends the test process without flushing */
}

void e2e_print_stories(const char *dir, const char *host_log, const char *agents, const char *again)
{
    if (host_log) print_story(host_log);
    if (agents) print_story(agents);
    if (again) print_story(again);
    char pattern[800];
    glob_t g;
    snprintf(pattern, sizeof pattern, "%s/logs/*.log", dir);
    if (glob(pattern, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) print_story(g.gl_pathv[i]);
    globfree(&g);
}

char *e2e_region_log(const char *dir, const char *region)
{
    char pattern[800];
    snprintf(pattern, sizeof pattern, "%s/logs/%s-*-0.log", dir, region);
    glob_t g;
    XDC_ASSERT_MSG(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1, "not one log matches %s", pattern);
    char *text = xdc_test_read_file(g.gl_pathv[0], NULL);
    XDC_ASSERT_MSG(text != NULL, "cannot read %s", g.gl_pathv[0]);
    globfree(&g);
    return text;
}

/* The params_xxh64 every worker logged as its region's final parameters (at most 8, into hash[][17]); how
 * many. */
int e2e_final_hashes(const char *dir, char hash[][17], int cap)
{
    char logs[700], path[1000];
    snprintf(logs, sizeof logs, "%s/logs", dir);
    DIR *d = opendir(logs);
    XDC_ASSERT_MSG(d != NULL, "no logs in %s", logs);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < cap;) {
        if (!strstr(e->d_name, ".log")) continue;
        snprintf(path, sizeof path, "%s/%s", logs, e->d_name);
        char *text = xdc_test_read_file(path, NULL);
        const char *h = text ? strstr(text, "final parameters of region ") : NULL;
        if (h && (h = strstr(h, "params_xxh64="))) snprintf(hash[n++], 17, "%.16s", h + strlen("params_xxh64="));
        free(text);
    }
    closedir(d);
    return n;
}

static float *read_f32(const char *path, size_t *n)
{
    size_t bytes;
    float *p = (float *)xdc_test_read_file(path, &bytes);
    XDC_ASSERT_MSG(p != NULL, "cannot read %s", path);
    *n = bytes / sizeof(float);
    return p;
}

/* Clip the averaged gradients avg[0..P) (the gradient norm summed over stages in float, as the pipeline's
 * scalar sum does) and take the AdamW step at the learning rate of step lr_step on every stage. */
static void reference_update(xdc_gpt_stage **st, int P, float *const *avg, const size_t *np, const xdc_train_config *c,
                             int lr_step)
{
    xdc_lr_schedule sch = {(float)c->lr, (float)c->min_lr_frac, c->warmup_steps, c->steps};
    float sumsq = 0;
    for (int s = 0; s < P; s++) {
        memcpy(xdc_gpt_stage_grads(st[s]), avg[s], np[s] * 4);
        double ss = 0;
        XDC_ASSERT_OK(xdc_gpt_stage_grad_sumsq(st[s], &ss));
        sumsq += (float)ss;
    }
    float scale = xdc_gpt_clip_scale(sumsq, (float)c->grad_clip);
    for (int s = 0; s < P; s++) XDC_ASSERT_OK(xdc_gpt_stage_optimizer_step(st[s], xdc_lr_at(&sch, lr_step), scale));
}

void e2e_reference_run(int steps, int M, const char *model, int R, int D, int P, int delay, const uint8_t *present,
                       xdc_gpt_stage **st)
{
    xdc_train_config c;
    xdc_cfg_errors errs;
    XDC_ASSERT_OK(xdc_model_config_load(model, &c, &errs));
    c.steps = steps; /* the run's steps replace the model file's, and the learning-rate schedule spans them */
    const xdc_kern_backend *be;
    XDC_ASSERT_OK(xdc_kern_backend_get(XDC_BACKEND_CPU, &be, NULL));
    be->model->set_threads(1);
    int Q = R * D;
    xdc_data *data[8];
    XDC_ASSERT(Q <= 8 && P <= E2E_MAX_STAGES);
    for (int q = 0; q < Q; q++) {
        xdc_data_config dc = {.batch = c.batch_size,
                              .seq_len = c.seq_len,
                              .val_fraction = c.val_fraction,
                              .seed = (uint64_t)c.seed,
                              .rank = q,
                              .world = Q,
                              .vocab_size = c.model.vocab_size};
        XDC_ASSERT_OK(xdc_data_open(DATA, &dc, &data[q], NULL));
    }
    size_t np[E2E_MAX_STAGES], btc = (size_t)c.batch_size * c.seq_len * c.model.n_embd,
                               bt = (size_t)c.batch_size * c.seq_len;
    float *reg[E2E_MAX_STAGES], *tot[E2E_MAX_STAGES],
        *prev[E2E_MAX_STAGES]; /* (np[s]) fp32: one replica's sum, the regions' sum, the delayed average */
    for (int s = 0; s < P; s++) {
        xdc_gpt_stage_config sc = {.model = c.model,
                                   .batch = c.batch_size,
                                   .seq_len = c.seq_len,
                                   .max_inflight = M,
                                   .seed = (uint64_t)c.seed,
                                   .adamw = {(float)c.beta1, (float)c.beta2, (float)c.eps, (float)c.weight_decay}};
        orch_stage_layers(c.model.n_layer, P, s, &sc.layer_begin, &sc.layer_end);
        XDC_ASSERT_OK(xdc_gpt_stage_create(be->model, &sc, &st[s], NULL));
        np[s] = xdc_gpt_stage_num_params(st[s]);
        reg[s] = xdc_malloc(np[s] * 4);
        tot[s] = xdc_malloc(np[s] * 4);
        prev[s] = xdc_malloc(np[s] * 4);
    }
    int32_t *tok = xdc_malloc(bt * 4), *tgt = xdc_malloc(bt * 4);
    float *act = xdc_malloc(btc * 4), *dy = xdc_malloc(btc * 4);
    for (int step = 0; step < steps; step++) {
        const uint8_t *in = present ? present + (size_t)step * R : NULL, *was = in && step ? in - R : NULL;
        int n_in = 0, stayed = 0;
        while (was && stayed < R && !(was[stayed] && in[stayed])) stayed++;
        xdc_data_pos ref[8]; /* (D) the position of a region that stayed, before this step's batch */
        for (int d = 0; was && stayed < R && d < D; d++) ref[d] = xdc_data_get_pos(data[stayed * D + d]);
        for (int s = 0; s < P; s++) memset(tot[s], 0, np[s] * 4);
        for (int r = 0; r < R; r++) {
            if (in && !in[r]) continue; /* out of the run at this step: its shard is not read */
            n_in++;
            /* Back in the run: its shard continues at the data position of the regions that stayed, as a
             * rejoining region takes theirs. */
            for (int d = 0; was && !was[r] && stayed < R && d < D; d++)
                XDC_ASSERT_OK(xdc_data_set_pos(data[r * D + d], ref[d]));
            for (int d = 0; d < D; d++) {
                for (int s = 0; s < P; s++) xdc_gpt_stage_zero_grad(st[s]);
                for (int mb = 0; mb < M; mb++) {
                    const float *y = NULL, *dx = NULL;
                    float loss;
                    XDC_ASSERT_OK(xdc_data_next_train(data[r * D + d], tok, tgt));
                    for (int s = 0; s < P; s++) {
                        XDC_ASSERT_OK(
                            xdc_gpt_stage_forward(st[s], mb, tok, s ? act : NULL, tgt, s < P - 1 ? &y : NULL, &loss));
                        if (s < P - 1) memcpy(act, y, btc * 4);
                    }
                    for (int s = P - 1; s >= 0; s--) {
                        XDC_ASSERT_OK(
                            xdc_gpt_stage_backward(st[s], mb, s < P - 1 ? dy : NULL, 1.0f / (float)M, s ? &dx : NULL));
                        if (s) memcpy(dy, dx, btc * 4);
                    }
                }
                for (int s = 0; s < P; s++) {
                    const float *g = xdc_gpt_stage_grads(st[s]);
                    for (size_t i = 0; i < np[s]; i++) reg[s][i] = d ? reg[s][i] + g[i] : g[i];
                }
            }
            for (int s = 0; s < P; s++)
                for (size_t i = 0; i < np[s]; i++) tot[s][i] += D > 1 ? reg[s][i] * (1.0f / (float)D) : reg[s][i];
        }
        for (int s = 0; s < P; s++)
            for (size_t i = 0; i < np[s]; i++) tot[s][i] *= 1.0f / (float)n_in;
        if (!delay) {
            reference_update(st, P, tot, np, &c, step);
            continue;
        }
        if (step > 0) reference_update(st, P, prev, np, &c, step - 1);
        for (int s = 0; s < P; s++) { /* this step's average waits for the next step */
            float *t = prev[s];
            prev[s] = tot[s], tot[s] = t;
        }
    }
    if (delay) reference_update(st, P, prev, np, &c, steps - 1);
    for (int s = 0; s < P; s++) {
        xdc_free(reg[s]);
        xdc_free(tot[s]);
        xdc_free(prev[s]);
    }
    xdc_free(tok);
    xdc_free(tgt);
    xdc_free(act);
    xdc_free(dy);
    for (int q = 0; q < Q; q++) xdc_data_destroy(data[q]);
}

double e2e_params_max_diff(const char *dir, int P, xdc_gpt_stage **st)
{
    double max_diff = 0;
    for (int s = 0; s < P; s++) {
        char path[700];
        snprintf(path, sizeof path, "%s/params-stage-%d.f32", dir, s);
        size_t n;
        float *got = read_f32(path, &n);
        XDC_ASSERT_EQ(n, xdc_gpt_stage_num_params(st[s]));
        const float *want = xdc_gpt_stage_params(st[s]);
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)got[i] - want[i]);
            if (d > max_diff) max_diff = d;
        }
        free(got);
    }
    return max_diff;
}
