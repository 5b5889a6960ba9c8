/* test_orch_util.c — run files, launches and their results for the end-to-end runtime tests
 * (test_orch_util.h). */
#include "tests/e2e/test_orch_util.h"

#include "tests/xdc_test.h"

#include <dirent.h>
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
