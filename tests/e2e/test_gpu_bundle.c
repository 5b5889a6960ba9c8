/* test_gpu_bundle.c — the GPU machine's bundle (tests/gpu/bundle.sh, what `make gpu-bundle` runs) and the
 * window's script (tests/gpu/run.sh), checked on a machine without a GPU.
 *
 * The bundle is made here from the build under test (the binaries beside XDC_BIN: with CUDA where nvcc
 * built them, CPU-only as in CI; make gpu-bundle packs its own x86-64-v3 tree with the same script), so
 * the test costs seconds, not a second build. Its closure must hold (every library each bundled binary
 * resolves is in the bundle or on the allowed list), and the bundled xdc must run `--help` and a CPU
 * `train --single` with every library file it loads (the loader's own record, LD_DEBUG=libs) from the
 * bundle or the allowed list. run.sh runs with a stub nvidia-smi that lists one H200 and no GPU behind it:
 * every step reaches a verdict and none is FAIL, --only is honoured, a short deadline turns steps into
 * "NOT RUN (deadline", and the summary and logs are written. */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Makes the bundle of the build under test in DIR/b; skips when patchelf is missing. Returns cuda 0|1. */
static int make_bundle(const char *dir)
{
#if defined(__SANITIZE_ADDRESS__)
    /* The bundle is the plain build's: a sanitizer build adds its runtime (libasan, libubsan: 53.5 MiB in
     * all, over the 40 MiB a window can carry) and never goes to the GPU machine. */
    xdc_test_skip("a sanitizer build is not bundled (the window carries the plain build)");
#endif
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd,
             "b=$(dirname '%s'); c=0; ldd \"$b/xdc\" 2>/dev/null | grep -q libcudart && c=1; "
             "bash tests/gpu/bundle.sh \"$b\" '%s/b' $c && echo cuda=$c",
             xdc_test_bin(), dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    if (rc == 69) xdc_test_skip("patchelf missing (Debian package patchelf; make deps installs it): %s", out);
    XDC_ASSERT_MSG(rc == 0, "bundle.sh: exit %d: %s", rc, out);
    printf("%s", out);
    return strstr(out, "cuda=1") != NULL;
}

XDC_TEST_T(gpu_bundle_closure_holds_and_its_xdc_trains_on_its_own_libraries, 120)
{
    const char *dir = xdc_test_tmpdir();
    int cuda = make_bundle(dir);
    printf("%s\n", cuda ? "the CUDA build's bundle (cuda=1): NCCL, cuBLAS and cudart come from this machine's toolkit"
                        : "CPU-only build (no nvcc, as in CI): the closure checked is the CPU-only build's");
    char cmd[4096], out[32768];
    /* The closure as env.sh leaves it: gzipped libraries unpacked beside, nothing else on the path. */
    snprintf(cmd, sizeof cmd,
             "env -u LD_LIBRARY_PATH XDC_BUNDLE_UNPACKED='%s/unpacked' bash -c '. %s/b/env.sh >/dev/null; "
             "bash %s/b/closure.sh %s/b'",
             dir, dir, dir, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "closure: exit %d:\n%s", rc, out);
    XDC_ASSERT_MSG(strstr(out, " 0 outside, 0 missing") != NULL, "%s", out);
    XDC_ASSERT(strstr(out, "\nbundle libyaml-0.so.2\n") != NULL || strncmp(out, "bundle libyaml-0.so.2\n", 22) == 0);
    XDC_ASSERT(strstr(out, "OUTSIDE") == NULL);

    /* The bundled xdc runs; every library file the loader opened is the bundle's or an allowed one. */
    snprintf(cmd, sizeof cmd,
             "env -u LD_LIBRARY_PATH XDC_BUNDLE_UNPACKED='%s/unpacked' bash -c '"
             ". %s/b/env.sh >/dev/null || exit 9; "
             "LD_DEBUG=libs LD_DEBUG_OUTPUT=%s/ld-help \"$XDC_BIN\" --help >/dev/null || exit 10; "
             "LD_DEBUG=libs LD_DEBUG_OUTPUT=%s/ld-train \"$XDC_BIN\" train --single -c %s/b/models/tiny.yaml "
             "--data \"$XDC_DATA\" --steps 3 --threads 1 --backend cpu | tail -1 || exit 11; "
             "n=0; for f in $(cat %s/ld-help.* %s/ld-train.* | awk \"/calling init:/ { print \\$NF }\" | sort -u); do "
             "case $(dirname $(readlink -f $f)) in \"$XDC_BUNDLE/lib\" | \"$XDC_BUNDLE_UNPACKED\") n=$((n + 1)) ;; "
             "*) bash %s/b/closure.sh --allowed $(basename $f) || echo OUTSIDE $f ;; esac; done; "
             "echo loaded_from_bundle=$n'",
             dir, dir, dir, dir, dir, dir, dir, dir);
    rc = xdc_test_run(cmd, out, sizeof out);
    printf("%s", out);
    XDC_ASSERT_MSG(rc == 0, "bundled xdc: exit %d:\n%s", rc, out);
    XDC_ASSERT_MSG(strstr(out, "final val_loss=") != NULL, "%s", out);
    XDC_ASSERT_MSG(strstr(out, "OUTSIDE") == NULL, "loaded from outside the bundle:\n%s", out);
    const char *n = strstr(out, "loaded_from_bundle=");
    XDC_ASSERT(n != NULL);
    XDC_ASSERT_MSG(atoi(n + 19) >= 10, "only %d library files from the bundle: %s", atoi(n + 19), out);
}

/* The STEP lines of a summary: count, and whether any is a failure. */
static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0) n++;
    return n;
}

static char *run_sh(const char *dir, const char *out_name, const char *args, int *rc)
{
    char cmd[2048], out[4096], path[1024];
    snprintf(cmd, sizeof cmd,
             "PATH='%s/stub':$PATH OUT='%s/%s' XDC_BUNDLE_UNPACKED='%s/unpacked' tests/gpu/run.sh --bundle '%s/b' %s",
             dir, dir, out_name, dir, dir, args);
    *rc = xdc_test_run(cmd, out, sizeof out);
    snprintf(path, sizeof path, "%s/%s/summary.txt", dir, out_name);
    char *s = xdc_test_read_file(path, NULL);
    XDC_ASSERT_MSG(s != NULL, "no summary.txt (exit %d): %s", *rc, out);
    printf("---- run.sh %s (exit %d)\n%s", args, *rc, s);
    return s;
}

XDC_TEST_T(gpu_run_sh_without_a_gpu_reaches_every_verdict_in_its_deadline, 170)
{
    const char *dir = xdc_test_tmpdir();
    make_bundle(dir);
    char path[1024], out[4096];
    snprintf(path, sizeof path, "%s/stub", dir);
    XDC_ASSERT(xdc_test_run((snprintf(out, sizeof out, "mkdir -p '%s'", path), out), out, sizeof out) == 0);
    snprintf(path, sizeof path, "%s/stub/nvidia-smi", dir);
    xdc_test_write_file(path, "#!/bin/sh\n# a stub: one H200 listed, none behind it\n"
                              "case \"$1\" in -L) echo 'GPU 0: NVIDIA H200 (UUID: GPU-stub-0)' ;;\n"
                              "*) echo 'name, driver_version'; echo 'NVIDIA H200, 580.00 (stub)' ;; esac\n");
    XDC_ASSERT(xdc_test_run((snprintf(out, sizeof out, "chmod +x '%s'", path), out), out, sizeof out) == 0);
    int n_steps = 0;
    XDC_ASSERT(xdc_test_run("tests/gpu/run.sh --list", out, sizeof out) == 0);
    n_steps = count_lines(out, "");
    XDC_ASSERT(n_steps >= 10);

    /* Every step, the whole window: each NOT TESTED (no GPU), the cheap ones rehearsed on the CPU. */
    int rc;
    char *s = run_sh(dir, "all", "--deadline 150", &rc);
    XDC_ASSERT_MSG(rc == 0, "exit %d", rc);
    XDC_ASSERT_MSG(count_lines(s, "STEP ") == n_steps, "%d STEP lines, %d steps", count_lines(s, "STEP "), n_steps);
    XDC_ASSERT(strstr(s, "FAIL") == NULL && strstr(s, "TIMEOUT") == NULL && strstr(s, " PASS") == NULL);
    XDC_ASSERT(strstr(s, "cpu rehearsal ok") != NULL);
    for (const char *p = s; (p = strstr(p, "STEP ")); p++) {
        const char *v = p + 5 + 18;
        XDC_ASSERT_MSG(strncmp(v, "NOT TESTED (", 12) == 0 || strncmp(v, "NOT AVAILABLE (", 15) == 0, "%.120s", p);
        int used = -1, budget = -1;
        const char *b = strchr(p, '[');
        XDC_ASSERT(b && sscanf(b, "[%ds of %ds]", &used, &budget) == 2);
        XDC_ASSERT_MSG(used <= budget + 6, "%.160s", p); /* timeout -k 5 */
    }
    XDC_ASSERT(strstr(s, "\nrun.sh: 0 passed, 0 failed") != NULL);
    snprintf(path, sizeof path, "%s/all/env.txt", dir);
    char *env = xdc_test_read_file(path, NULL);
    XDC_ASSERT(env && strstr(env, "GPU-stub-0") && strstr(env, "env: closure: "));
    free(env);
    snprintf(path, sizeof path, "%s/all/logs.tgz", dir);
    XDC_ASSERT(access(path, R_OK) == 0);
    free(s);

    /* --only: those steps and no other. */
    s = run_sh(dir, "only", "--only model-step,nccl", &rc);
    XDC_ASSERT(rc == 0);
    XDC_ASSERT(count_lines(s, "STEP ") == 2);
    XDC_ASSERT(strstr(s, "STEP model-step ") && strstr(s, "STEP nccl "));
    free(s);

    /* A deadline under the smallest budget: every step still gets a line, none runs. */
    s = run_sh(dir, "late", "--deadline 4 --only model-step,launch-span,sanitizer", &rc);
    XDC_ASSERT(rc == 0);
    XDC_ASSERT(count_lines(s, "STEP ") == 3);
    for (const char *p = s; (p = strstr(p, "STEP ")); p++) {
        const char *v = p + 5 + 18;
        XDC_ASSERT_MSG(strncmp(v, "NOT RUN (deadline", 17) == 0, "%.100s", p);
    }
    free(s);

    /* A wrong step name is a usage error, not a silent empty window. */
    XDC_ASSERT(xdc_test_run("tests/gpu/run.sh --only modelstep", out, sizeof out) == 64);
}
