/* test_api.c — libxdc (include/xdc.h, docs/api.md) as a user sees it: `make install PREFIX=tmp`, the
 * example program built against the installed copy with `pkg-config --cflags --libs xdc` and run by
 * `xdc launch --exec` over two emulated regions (every member ends with the same buffer, the exact mean
 * with codec none, within int8's error with int8); a non-blocking all-reduce whose wait runs out before
 * the other region posts (tests/api/nonblocking.c); the errors of xdc_comm_create, called in this
 * process; and the Python package (python/) pip-installed into a venv with the tree's libxdc.so built in,
 * its example run the same way, its errors raised as xdc.Error, and its wheel (`python -m build`). */
#include "tests/xdc_test.h"
#include "tests/e2e/test_orch_util.h"

#include <xdc.h>

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef XDC_TEST_SAN
#define XDC_TEST_SAN "" /* the Makefile passes SAN: programs built here use the library's sanitizers */
#endif

/* TMP/<name>.yaml: a run file for libxdc programs (the launcher reads the model and data keys; the program
 * the codec, bucket size, outer settings and timeouts). Returns its path in out. */
static void write_run(const char *name, const char *codec, char *out, size_t cap)
{
    char cwd[400], text[1024];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(out, cap, "%s/%s.yaml", xdc_test_tmpdir(), name);
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: /usr/share/games/fortunes\nmode: sync\npipeline_stages: 1\n"
             "codec: %s\nbucket_mb: 0.01\ndiloco: {outer_lr: 0.5, outer_momentum: 0.5}\n"
             "timeouts: {rendezvous: 120s, operation: 30s}\n",
             cwd, codec);
    xdc_test_write_file(out, text);
}

/* Install libxdc into TMP/prefix (once per test); returns the prefix. */
static const char *install_prefix(void)
{
    static char prefix[600];
    char cmd[4096], out[16384], bin[600];
    snprintf(prefix, sizeof prefix, "%s/prefix", xdc_test_tmpdir());
    snprintf(bin, sizeof bin, "%s", xdc_test_bin());
    char *slash = strrchr(bin, '/');
    if (slash) *slash = '\0';
    struct stat st;
    if (stat(prefix, &st) != 0) {
        snprintf(cmd, sizeof cmd, "make --no-print-directory -s install PREFIX=%s BUILD=%s SAN=%s", prefix,
                 slash ? bin : ".", XDC_TEST_SAN);
        int rc = xdc_test_run(cmd, out, sizeof out);
        XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    }
    return prefix;
}

/* Build `src` against the installed libxdc with pkg-config into TMP/<exe>. */
static void build_against_install(const char *src, const char *exe, char *path, size_t cap)
{
    const char *prefix = install_prefix();
    char cmd[4096], out[16384];
    snprintf(path, cap, "%s/%s", xdc_test_tmpdir(), exe);
    char san[128] = "";
    if (XDC_TEST_SAN[0]) snprintf(san, sizeof san, "-fsanitize=%s -fno-sanitize-recover=all", XDC_TEST_SAN);
    snprintf(cmd, sizeof cmd,
             "export PKG_CONFIG_PATH=%s/lib/pkgconfig; cc -std=c11 -Wall -Wextra -Werror %s %s -o %s "
             "$(pkg-config --cflags --libs xdc) -Wl,-rpath,$(pkg-config --variable=libdir xdc) -lm",
             prefix, san, src, path);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
}

/* Launch `prog` under `run` on `topo` into TMP/<name>, stopped after limit_s seconds; its output (launcher and
 * every member's log) in out. */
static int launch_exec_limit(const char *topo, const char *run, const char *name, const char *prog, int limit_s,
                             char *out, size_t cap)
{
    char cmd[4096], dir[600];
    snprintf(dir, sizeof dir, "%s/%s", xdc_test_tmpdir(), name);
    snprintf(cmd, sizeof cmd,
             "timeout %d %s launch -t %s -c %s --run-dir %s --exec -- %s; rc=$?; cat %s/logs/*.log; exit $rc", limit_s,
             xdc_test_bin(), topo, run, dir, prog, dir);
    return xdc_test_run(cmd, out, cap);
}

static int launch_exec(const char *topo, const char *run, const char *name, const char *prog, char *out, size_t cap)
{
    return launch_exec_limit(topo, run, name, prog, 120, out, cap);
}

/* Every member printed one line with its error and hash; all four hashes equal, every error <= tol. */
static void check_members(const char *out, int members, double tol)
{
    char hash0[32] = "";
    int n = 0;
    for (const char *p = out; (p = strstr(p, "allreduce: rank ")) != NULL; p++) {
        int rank, size;
        double err;
        char hash[32];
        XDC_ASSERT_MSG(sscanf(p,
                              "allreduce: rank %d of %d (region %*[^)]): %*d rounds of %*u values, max error %lf, "
                              "hash %31s",
                              &rank, &size, &err, hash) == 4,
                       "unparsed line: %.200s", p);
        XDC_ASSERT_EQ(size, members);
        XDC_ASSERT_MSG(err <= tol, "rank %d: max error %g > %g", rank, err, tol);
        if (!hash0[0]) snprintf(hash0, sizeof hash0, "%s", hash);
        XDC_ASSERT_MSG(strcmp(hash, hash0) == 0, "rank %d ends with hash %s, another with %s", rank, hash, hash0);
        n++;
    }
    XDC_ASSERT_MSG(n == members, "%d member lines, want %d:\n%s", n, members, out);
}

XDC_TEST_T(api_example_installed_averages_across_two_regions, 180)
{
    char prog[700], src[600], run[700], cmdline[900];
    static char out[1 << 16];
    build_against_install(xdc_test_src("examples/api/allreduce.c", src, sizeof src), "allreduce", prog, sizeof prog);
    /* codec none: every value a multiple of 1/8, so the mean is exact on every member */
    write_run("none", "none", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "%s 20000 3 0", prog);
    int rc = launch_exec(TOPO, run, "none", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "4 members of 2 regions ran");
    check_members(out, 4, 0.0);
    /* int8 with error feedback: within the quantiser's step, still identical everywhere */
    write_run("int8", "int8", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "%s 5000 3 0.05", prog);
    rc = launch_exec(TOPO, run, "int8", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec (int8) exited %d:\n%s", rc, out);
    check_members(out, 4, 0.05);
    /* Regions of 2 and 1 members: each region weighs its members, so the mean is still over every member,
     * exactly (codec none). */
    char topo[700];
    snprintf(topo, sizeof topo, "%s/two-and-one.yaml", xdc_test_tmpdir());
    xdc_test_write_file(topo, "name: two-and-one\nregions:\n"
                              "  - {name: us-east, nodes: east-node1, gpus_per_node: 0, workers_per_node: 2, gpu: "
                              "{model: cpu, bf16_tflops: 0.05, memory_gib: 4}}\n"
                              "  - {name: eu-west, nodes: west-node1, gpus_per_node: 0, workers_per_node: 1, gpu: "
                              "{model: cpu, bf16_tflops: 0.05, memory_gib: 4}}\n"
                              "links:\n  - {from: us-east, to: eu-west, bandwidth_gbps: 1, rtt_ms: 2}\n");
    write_run("none", "none", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "%s 20000 3 0", prog);
    rc = launch_exec(topo, run, "unequal", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec (2 + 1 members) exited %d:\n%s", rc, out);
    check_members(out, 3, 0.0);
}

/* A member that fails is named by the launcher as a failed worker is: the program's exit status, its
 * member name, the run stopped. */
XDC_TEST_T(api_exec_failure_is_named, 120)
{
    char run[700], cmdline[900];
    static char out[1 << 16];
    write_run("fail", "none", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "/bin/sh -c 'exit 3'");
    int rc = launch_exec(TOPO, run, "fail", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 3, "launch --exec of a failing program exited %d, want its status 3:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "exited with status 3");
    /* no program: refused before anything starts */
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s launch -t %s -c %s --exec 2>&1", xdc_test_bin(), TOPO, run);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_EQ(rc, 64);
    XDC_ASSERT_STR_CONTAINS(out, "--exec -- PROG");
}

/* TMP/one-each.yaml, two regions of one member each (the demo topology with one worker per node). */
static void one_each(char *topo, size_t topo_cap)
{
    char text[2048];
    char *demo = xdc_test_read_file(TOPO, NULL);
    XDC_ASSERT(demo != NULL);
    snprintf(topo, topo_cap, "%s/one-each.yaml", xdc_test_tmpdir());
    size_t n = 0;
    for (const char *p = demo; *p && n + 2 < sizeof text; p++) {
        if (strncmp(p, "workers_per_node: 2", 19) == 0) {
            n += (size_t)snprintf(text + n, sizeof text - n, "workers_per_node: 1");
            p += 18;
        } else text[n++] = *p;
    }
    text[n] = '\0';
    free(demo);
    xdc_test_write_file(topo, text);
}

/* one_each, and the FIFO TMP/order.fifo that orders the two members (tests/api/nonblocking.c and .py). */
static void one_each_with_fifo(char *topo, size_t topo_cap, char *fifo, size_t fifo_cap)
{
    one_each(topo, topo_cap);
    snprintf(fifo, fifo_cap, "%s/order.fifo", xdc_test_tmpdir());
    XDC_ASSERT(mkfifo(fifo, 0600) == 0);
}

XDC_TEST_T(api_wait_deadline_times_out_then_completes, 120)
{
    char prog[700], src[600], run[700], cmdline[1600], fifo[700], topo[700];
    static char out[1 << 16];
    build_against_install(xdc_test_src("tests/api/nonblocking.c", src, sizeof src), "nonblocking", prog, sizeof prog);
    one_each_with_fifo(topo, sizeof topo, fifo, sizeof fifo);
    write_run("nb", "none", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "%s %s 3000", prog, fifo);
    int rc = launch_exec(topo, run, "nb", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "wait with 50 ms: deadline passed; the request is still pending (tag 7: not "
                                 "complete within 50 ms");
    XDC_ASSERT_STR_CONTAINS(out, "nonblocking: region 0: timeout then complete, mean ok");
    XDC_ASSERT_STR_CONTAINS(out, "nonblocking: region 1: timeout then complete, mean ok");
}

/* DiLoCo outer rounds over a parameter list (tests/api/outer.c): exact with codec none on 2 x 2 members. */
XDC_TEST_T(api_outer_rounds_take_the_nesterov_step_everywhere, 120)
{
    char prog[700], src[600], run[700];
    static char out[1 << 16];
    build_against_install(xdc_test_src("tests/api/outer.c", src, sizeof src), "outer", prog, sizeof prog);
    write_run("outer", "none", run, sizeof run);
    int rc = launch_exec(TOPO, run, "outer-run", prog, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec exited %d:\n%s", rc, out);
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof want, "outer: rank %d: 2 rounds exact (0.4921875)", r);
        XDC_ASSERT_STR_CONTAINS(out, want);
    }
}

/* Overlapped outer rounds with keep_unsent and the sparse codec against a serial reference of the same
 * schedule, bit for bit (tests/api/overlap.c), on one member per region; the inner steps between begin and
 * apply counted; the last round in int8 leaves one model. */
XDC_TEST_T(api_outer_overlapped_rounds_equal_the_serial_reference, 120)
{
    char prog[700], src[600], run[700], topo[700];
    static char out[1 << 16];
    build_against_install(xdc_test_src("tests/api/overlap.c", src, sizeof src), "overlap", prog, sizeof prog);
    one_each(topo, sizeof topo);
    write_run("overlap", "sparse:0.02:2", run, sizeof run);
    int rc = launch_exec(topo, run, "overlap-run", prog, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec exited %d:\n%s", rc, out);
    for (int r = 0; r < 2; r++) {
        char want[128];
        snprintf(want, sizeof want,
                 "overlap: rank %d: 3 rounds equal to the serial reference, 9 inner steps while a round was in flight",
                 r);
        XDC_ASSERT_STR_CONTAINS(out, want);
    }
}

/* xdc_comm_create's refusals, each with a diagnostic naming what is wrong. */
XDC_TEST(api_create_errors_name_the_problem)
{
    char err[1024], run[700], dir[700];
    xdc_comm *c = (xdc_comm *)1;
    XDC_ASSERT_EQ(xdc_api_version(), XDC_API_VERSION);
    XDC_ASSERT_STR_CONTAINS(xdc_status_string(XDC_STATUS_TIMEOUT), "deadline");
    XDC_ASSERT_STR_CONTAINS(xdc_status_string(99), "unknown");
    /* nothing given, nothing in the environment */
    unsetenv("XDC_TOPOLOGY");
    XDC_ASSERT_EQ(xdc_comm_create(NULL, &c, err, sizeof err), XDC_STATUS_CONFIG);
    XDC_ASSERT(c == NULL);
    XDC_ASSERT_STR_CONTAINS(err, "XDC_TOPOLOGY");
    /* options from a caller built against another layout */
    xdc_comm_options o = XDC_COMM_OPTIONS_INIT;
    o.struct_size = 4;
    XDC_ASSERT_EQ(xdc_comm_create(&o, &c, err, sizeof err), XDC_STATUS_INVALID);
    XDC_ASSERT_STR_CONTAINS(err, "XDC_COMM_OPTIONS_INIT");
    /* a topology file that is not there */
    write_run("err", "none", run, sizeof run);
    snprintf(dir, sizeof dir, "%s/run", xdc_test_tmpdir());
    o = (xdc_comm_options)XDC_COMM_OPTIONS_INIT;
    o.topology = "/nonexistent/topology.yaml";
    o.config = run;
    o.run_dir = dir;
    XDC_ASSERT_EQ(xdc_comm_create(&o, &c, err, sizeof err), XDC_STATUS_CONFIG);
    XDC_ASSERT_STR_CONTAINS(err, "/nonexistent/topology.yaml");
    /* good files, no identity: the environment contract is missing, and the diagnostic says which part */
    static const char *const contract[] = {"XDC_REGION",   "XDC_COORDINATOR", "XDC_RUN_ID",
                                           "RANK",         "WORLD_SIZE",      "LOCAL_RANK",
                                           "SLURM_PROCID", "SLURM_NODEID",    "OMPI_COMM_WORLD_RANK"};
    for (size_t i = 0; i < sizeof contract / sizeof contract[0]; i++) unsetenv(contract[i]);
    o.topology = TOPO;
    XDC_ASSERT_EQ(xdc_comm_create(&o, &c, err, sizeof err), XDC_STATUS_CONFIG);
    XDC_ASSERT(c == NULL);
    XDC_ASSERT_STR_CONTAINS(err, "identity and configuration failed");
    XDC_ASSERT_STR_CONTAINS(err, "XDC_REGION");
    printf("diagnostic: %s\n", err);
}

/* The venv with torch (XDC_TORCH_VENV, else the Makefile's default, which `make deps` creates): its
 * site-packages, for a .pth line in the test's venv. Skips the test when it does not import torch. */
static void torch_site(char *site, size_t cap)
{
    char venv[512], cmd[1200];
    const char *v = getenv("XDC_TORCH_VENV"), *home = getenv("HOME");
    if (v && *v) snprintf(venv, sizeof venv, "%s", v);
    else snprintf(venv, sizeof venv, "%s/.cache/xdc/torch-venv", home ? home : "/root");
    snprintf(cmd, sizeof cmd,
             "%s/bin/python -c 'import sysconfig, torch; print(sysconfig.get_paths()[\"purelib\"], end=\"\")' 2>&1",
             venv);
    if (xdc_test_run(cmd, site, cap) != 0)
        xdc_test_skip("no torch in the venv %s (make deps creates it; XDC_TORCH_VENV names another): %.300s", venv,
                      site);
}

/* The tree's libxdc.so (next to the xdc binary under test), as an absolute path: what the Python package's
 * build bundles (XDC_BUNDLE_LIB, python/setup.py) instead of compiling it again. */
static void built_libxdc(char *path, size_t cap)
{
    char bin[600];
    snprintf(bin, sizeof bin, "%s", xdc_test_bin());
    char *slash = strrchr(bin, '/');
    if (slash) *slash = '\0';
    char dir[PATH_MAX];
    XDC_ASSERT_MSG(realpath(slash ? bin : ".", dir) != NULL, "realpath of %s", bin);
    snprintf(path, cap, "%s/libxdc.so", dir);
    XDC_ASSERT_MSG(access(path, R_OK) == 0, "no %s (make all builds it)", path);
}

/* Skips the test unless /usr/bin/python3 can make venvs and build the package offline. In preload the
 * sanitizer runtimes python3 must load before libxdc.so under SAN (CPython's own allocations at exit are
 * not ours to report: no leak check there), "" without SAN. */
static void python_prereqs(char *preload, size_t cap)
{
    static char out[1 << 14];
    preload[0] = '\0';
    if (strstr(XDC_TEST_SAN, "address")) snprintf(preload, cap, "%s", " $(cc -print-file-name=libasan.so)");
    if (strstr(XDC_TEST_SAN, "undefined"))
        snprintf(preload + strlen(preload), cap - strlen(preload), "%s", " $(cc -print-file-name=libubsan.so)");
    if (XDC_TEST_SAN[0] && !preload[0])
        xdc_test_skip("libxdc.so is built with SAN=%s, whose runtime python3 cannot load", XDC_TEST_SAN);
    if (access("/usr/bin/python3", X_OK) != 0) xdc_test_skip("no /usr/bin/python3 (Debian package python3)");
    if (xdc_test_run("/usr/bin/python3 -c 'import ensurepip, setuptools, wheel' 2>&1", out, sizeof out) != 0)
        xdc_test_skip("python3 lacks venv, setuptools or wheel (Debian packages python3-venv, python3-setuptools, "
                      "python3-wheel): %s",
                      out);
    /* no way to the library but the package's own copy (this test's process and the members it launches) */
    unsetenv("XDC_LIB");
    unsetenv("PKG_CONFIG_PATH");
}

/* In py the shell words that run VENV/bin/python with preload (python_prereqs). */
static void venv_python(const char *venv, const char *preload, char *py, size_t cap)
{
    if (preload[0])
        snprintf(py, cap, "env \"LD_PRELOAD=%s\" ASAN_OPTIONS=detect_leaks=0 %s/bin/python", preload + 1, venv);
    else snprintf(py, cap, "%s/bin/python", venv);
}

/* The Python package (python/, docs/api.md "Python") in a fresh venv of TMP by one `pip install`, offline
 * over the system's setuptools, with the tree's libxdc.so bundled (built_libxdc); with_torch: the torch
 * venv's packages seen through a .pth file (torch_site). In py the shell words that run the venv's python
 * (venv_python). */
static void python_venv(char *py, size_t cap, int with_torch)
{
    char cmd[4096], src[600], lib[PATH_MAX + 16], preload[256], venv[600];
    static char out[1 << 14];
    python_prereqs(preload, sizeof preload);
    char site[1024] = "";
    if (with_torch) torch_site(site, sizeof site);
    built_libxdc(lib, sizeof lib);
    snprintf(venv, sizeof venv, "%s/venv", xdc_test_tmpdir());
    /* a copy of python/: pip writes its build/ and egg-info next to the sources */
    snprintf(cmd, sizeof cmd,
             "cp -r %1$s %2$s/pysrc && /usr/bin/python3 -m venv --system-site-packages %3$s && "
             "XDC_BUNDLE_LIB=%4$s %3$s/bin/pip install -q --no-index --no-build-isolation %2$s/pysrc 2>&1",
             xdc_test_src("python", src, sizeof src), xdc_test_tmpdir(), venv, lib);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    if (site[0]) { /* the venv's python is /usr/bin/python3's, as the torch venv's: the same site layout */
        snprintf(cmd, sizeof cmd, "%s/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'",
                 venv);
        char own[1024];
        XDC_ASSERT(xdc_test_run(cmd, own, sizeof own) == 0);
        own[strcspn(own, "\n")] = '\0';
        snprintf(cmd, sizeof cmd, "%s/xdc-torch-venv.pth", own);
        xdc_test_write_file(cmd, site);
    }
    venv_python(venv, preload, py, cap);
}

/* Run the Python program `script ARGS` (a path in the tree) on the venv's python (python_venv) in every slot
 * of topo under a run file TMP/<name>.yaml of `codec` (its path in run) into TMP/<name>; output in out. */
static int launch_python(const char *topo, const char *script, const char *args, const char *name, const char *codec,
                         int with_torch, char *run, size_t run_cap, char *out, size_t cap)
{
    char py[700], src[600], cmdline[1600];
    python_venv(py, sizeof py, with_torch);
    write_run(name, codec, run, run_cap);
    snprintf(cmdline, sizeof cmdline, "%s %s %s", py, xdc_test_src(script, src, sizeof src), args);
    /* 4 processes importing torch take seconds each on a quiet machine, minutes on a loaded one */
    return launch_exec_limit(topo, run, name, cmdline, with_torch ? 240 : 120, out, cap);
}

XDC_TEST_T(api_python_example_averages_across_two_regions, 180)
{
    char src[600], run[700], cmdline[1600];
    static char out[1 << 16];
    /* codec none: the exact mean on every member (rounds 1 and 2 through iallreduce and wait) */
    int rc = launch_python(TOPO, "examples/api/allreduce.py", "2000 3 0", "pynone", "none", 0, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec of the Python example exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "4 members of 2 regions ran");
    check_members(out, 4, 0.0);
    /* the C example with the same arguments ends with the same bytes */
    const char *h = strstr(out, ", hash ");
    XDC_ASSERT(h != NULL);
    char hash[40], prog[700];
    snprintf(hash, sizeof hash, "%.23s", h);
    build_against_install(xdc_test_src("examples/api/allreduce.c", src, sizeof src), "allreduce", prog, sizeof prog);
    snprintf(cmdline, sizeof cmdline, "%s 2000 3 0", prog);
    rc = launch_exec(TOPO, run, "cnone", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec of the C example exited %d:\n%s", rc, out);
    XDC_ASSERT_MSG(strstr(out, hash) != NULL, "the C example does not end with the Python one's%s:\n%s", hash, out);
}

/* tests/api/outer.py: outer rounds over a list of buffers, exact with codec none on 2 x 2 members, and the
 * binding's buffer checks (read-only, float64, a buffer held by a request in flight, a slice). */
XDC_TEST_T(api_python_outer_rounds_and_buffers, 180)
{
    char run[700];
    static char out[1 << 16];
    int rc = launch_python(TOPO, "tests/api/outer.py", "", "pyouter", "none", 0, run, sizeof run, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec of tests/api/outer.py exited %d:\n%s", rc, out);
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof want, "outer.py: rank %d: 2 rounds exact (0.4921875)", r);
        XDC_ASSERT_STR_CONTAINS(out, want);
    }
}

/* tests/api/nonblocking.py: Request.wait's deadline raises xdc.Timeout while the other region has not
 * posted (ordered by a FIFO, not by time), test() says pending, then both complete with the mean. */
XDC_TEST_T(api_python_wait_deadline_raises_timeout, 180)
{
    char run[700], fifo[700], topo[700], args[800];
    static char out[1 << 16];
    one_each_with_fifo(topo, sizeof topo, fifo, sizeof fifo);
    snprintf(args, sizeof args, "%s 3000", fifo);
    int rc = launch_python(topo, "tests/api/nonblocking.py", args, "pynb", "none", 0, run, sizeof run, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec of tests/api/nonblocking.py exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "nonblocking.py: region 0: wait with 50 ms: XDC_STATUS_TIMEOUT: tag 7: not complete "
                                 "within 50 ms");
    XDC_ASSERT_STR_CONTAINS(out, "nonblocking.py: region 0: timeout then complete, mean ok");
    XDC_ASSERT_STR_CONTAINS(out, "nonblocking.py: region 1: timeout then complete, mean ok");
}

/* A bad topology raises xdc.Error with the status name and the library's diagnostic (the example exits 1
 * with it); a library that is not there says where it was looked for. */
XDC_TEST_T(api_python_errors_raise_xdc_error, 120)
{
    char py[700], src[600], run[700], cmd[4096];
    static char out[1 << 14];
    python_venv(py, sizeof py, 0);
    write_run("pyerr", "none", run, sizeof run);
    snprintf(cmd, sizeof cmd,
             "XDC_TOPOLOGY=/nonexistent/topology.yaml XDC_CONFIG=%s XDC_RUN_DIR=%s/pyerr-run %s %s 10 1 0 2>&1", run,
             xdc_test_tmpdir(), py, xdc_test_src("examples/api/allreduce.py", src, sizeof src));
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 1, "the example with a bad topology exited %d, want 1:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "allreduce: XDC_STATUS_CONFIG: ");
    XDC_ASSERT_STR_CONTAINS(out, "/nonexistent/topology.yaml");
    /* the exception's fields, from options rather than the environment */
    snprintf(cmd, sizeof cmd,
             "%s -c 'import xdc\ntry:\n    xdc.Comm(topology=\"/nonexistent/topology.yaml\", config=\"%s\", "
             "run_dir=\"%s/pyerr-run\")\nexcept xdc.Error as e:\n    print(type(e).__name__, e.status, e.name, "
             "\"[\" + e.message + \"]\")' 2>&1",
             py, run, xdc_test_tmpdir());
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "Error 4 XDC_STATUS_CONFIG [");
    XDC_ASSERT_STR_CONTAINS(out, "/nonexistent/topology.yaml");
    /* XDC_LIB names a library that is not there: no other copy is tried, and the error says so */
    snprintf(cmd, sizeof cmd, "XDC_LIB=/nonexistent/libxdc.so %s -c 'import xdc; xdc.api_version()' 2>&1", py);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 1, "a missing XDC_LIB: exit %d, want 1:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "xdc.LibraryNotFound: XDC_STATUS_UNAVAILABLE: libxdc.so not found; tried $XDC_LIB: ");
    XDC_ASSERT_STR_CONTAINS(out, "/nonexistent/libxdc.so");
}

/* `python -m build python/` offline (sdist, then the wheel from it, bundling the tree's libxdc.so): the sdist
 * holds every file make needs for libxdc.so (a dry run of the build in it finds them all), and the wheel in
 * a fresh venv with nothing else gives a working `import xdc` on its own copy; XDC_LIB still overrides. */
XDC_TEST_T(api_python_wheel_bundles_libxdc, 120)
{
    char preload[256], lib[PATH_MAX + 16], src[600], cmd[4096], py[800], venv[600], want[800];
    static char out[1 << 14];
    python_prereqs(preload, sizeof preload);
    if (xdc_test_run("/usr/bin/python3 -c 'import build' 2>&1", out, sizeof out) != 0)
        xdc_test_skip("python3 lacks build (Debian package python3-build, in make deps): %s", out);
    built_libxdc(lib, sizeof lib);
    snprintf(
        cmd, sizeof cmd,
        "XDC_BUNDLE_LIB=%2$s /usr/bin/python3 -m build --no-isolation --outdir %1$s/dist %3$s 2>&1 && cd %1$s && "
        "mkdir sd && tar xzf dist/xdc-*.tar.gz -C sd && make -n -C sd/xdc-*/libxdc-src SAN= build/libxdc.so >/dev/null",
        xdc_test_tmpdir(), lib, xdc_test_src("python", src, sizeof src));
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    snprintf(venv, sizeof venv, "%s/wheel-venv", xdc_test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -m venv %1$s && %1$s/bin/pip install -q --no-index %2$s/dist/xdc-*-py3-none-linux_*.whl "
             "2>&1",
             venv, xdc_test_tmpdir());
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    venv_python(venv, preload, py, sizeof py);
    static const char probe[] =
        "-c 'import xdc; print(xdc.api_version(), xdc.status_string(8), xdc.library_path)' 2>&1";
    snprintf(cmd, sizeof cmd, "%s %s", py, probe);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    snprintf(want, sizeof want, "(%d, %d) ", XDC_API_VERSION_MAJOR, XDC_API_VERSION_MINOR);
    XDC_ASSERT_STR_CONTAINS(out, want);
    snprintf(want, sizeof want, "%s/lib/python3", venv);
    XDC_ASSERT_STR_CONTAINS(out, want);
    XDC_ASSERT_STR_CONTAINS(out, "/site-packages/xdc/libxdc.so");
    snprintf(cmd, sizeof cmd, "XDC_LIB=%s %s %s", lib, py, probe);
    rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "%s exited %d:\n%s", cmd, rc, out);
    XDC_ASSERT_STR_CONTAINS(out, lib);
}

/* docs/api.md shows the example programs as they are in examples/api/. */
XDC_TEST(api_doc_holds_the_example)
{
    char *doc = xdc_test_read_file("docs/api.md", NULL);
    XDC_ASSERT(doc != NULL);
    static const char *const examples[] = {"examples/api/allreduce.c", "examples/api/allreduce.py"};
    for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++) {
        char *ex = xdc_test_read_file(examples[i], NULL);
        XDC_ASSERT(ex != NULL);
        XDC_ASSERT_MSG(strstr(doc, ex) != NULL, "docs/api.md does not hold %s verbatim", examples[i]);
        free(ex);
    }
    free(doc);
}

/* ---- xdc.torch (python/xdc/torch.py; tests/api/torch_checks.py, examples/torch/train_gpt.py) ---------- */

/* The text after "<prefix>rank <r>: <what> " in out (the first such line), for r's line. */
static const char *rank_line(const char *out, const char *prefix, int r, const char *what)
{
    char key[160];
    snprintf(key, sizeof key, "%srank %d: %s ", prefix, r, what);
    const char *p = strstr(out, key);
    XDC_ASSERT_MSG(p != NULL, "no line \"%s\" in:\n%s", key, out);
    return p + strlen(key);
}

/* The word after "<prefix>rank R: <what> " is the same for every rank R of members. */
static void same_on_every_rank(const char *out, const char *prefix, const char *what, int members)
{
    char first[64] = "", word[64];
    for (int r = 0; r < members; r++) {
        XDC_ASSERT(sscanf(rank_line(out, prefix, r, what), "%63s", word) == 1);
        if (r == 0) snprintf(first, sizeof first, "%s", word);
        XDC_ASSERT_MSG(strcmp(word, first) == 0, "%s: rank %d has %s, rank 0 %s:\n%s", what, r, word, first, out);
    }
}

/* Tensors as buffers on two regions of one member: the exact mean in the tensor's memory, float64 and
 * non-contiguous tensors refused with TypeError, a request holding its tensor, Comm.stats() counting the
 * raw bytes of the rounds exactly (xdc_comm_get_stats). */
XDC_TEST_T(api_torch_tensors_and_stats, 300)
{
    char run[700], topo[700];
    static char out[1 << 16];
    one_each(topo, sizeof topo);
    int rc = launch_python(topo, "tests/api/torch_checks.py", "tensors", "tt", "none", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "torch_checks.py tensors exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "torch_checks: tensors: rank 0: ok");
    XDC_ASSERT_STR_CONTAINS(out, "torch_checks: tensors: rank 1: ok");
}

/* xdc.torch.DiLoCo on 2 x 2 members, codec none: the same parameters everywhere at the start and after each
 * of the 8 outer rounds (hashes compared across members), the loss at most half its start on every member. */
XDC_TEST_T(api_torch_diloco_same_parameters_everywhere, 300)
{
    char run[700];
    static char out[1 << 17];
    int rc = launch_python(TOPO, "tests/api/torch_checks.py", "diloco", "td", "none", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "torch_checks.py diloco exited %d:\n%s", rc, out);
    same_on_every_rank(out, "torch_checks: diloco: ", "start", 4);
    for (int k = 1; k <= 8; k++) {
        char what[32];
        snprintf(what, sizeof what, "round %d hash", k);
        same_on_every_rank(out, "torch_checks: diloco: ", what, 4);
    }
    for (int r = 0; r < 4; r++)
        XDC_ASSERT(strncmp(rank_line(out, "torch_checks: diloco: ", r, "ok,"), "8 rounds", 8) == 0);
}

/* xdc.torch.DiLoCo(overlap=2, keep_unsent, final_codec int8) on one member per region with the sparse
 * codec: the global parameters after each applied round and the model after flush the same on both members,
 * the inner steps in flight counted, state_dict / load_state_dict round-tripping (tests/api/torch_checks.py). */
XDC_TEST_T(api_torch_diloco_overlap_keep_unsent_and_state, 300)
{
    char run[700], topo[700];
    static char out[1 << 16];
    one_each(topo, sizeof topo);
    int rc = launch_python(topo, "tests/api/torch_checks.py", "overlap", "to", "sparse:0.05:2", 1, run, sizeof run, out,
                           sizeof out);
    size_t len = strlen(out);
    XDC_ASSERT_MSG(rc == 0, "torch_checks.py overlap exited %d, its output ending:\n%s", rc,
                   out + (len > 3000 ? len - 3000 : 0));
    for (int step = 7; step <= 27; step += 5) {
        char what[32];
        snprintf(what, sizeof what, "step %d global", step);
        same_on_every_rank(out, "torch_checks: overlap: ", what, 2);
    }
    same_on_every_rank(out, "torch_checks: overlap: ", "flushed", 2);
    XDC_ASSERT_STR_CONTAINS(out, "torch_checks: overlap: rank 0: flushed");
}

/* DiLoCo's start check (xdc_comm_check_same) on 2 x 2 members with int8: one member seeded otherwise makes
 * every member raise xdc.Error XDC_STATUS_CORRUPT; check_same passes equal values and refuses unequal ones. */
XDC_TEST_T(api_torch_diloco_refuses_different_starts, 300)
{
    char run[700];
    static char out[1 << 16];
    int rc = launch_python(TOPO, "tests/api/torch_checks.py", "mismatch", "tm", "int8", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "torch_checks.py mismatch exited %d:\n%s", rc, out);
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof want, "torch_checks: mismatch: rank %d: ok", r);
        XDC_ASSERT_STR_CONTAINS(out, want);
        XDC_ASSERT(strncmp(rank_line(out, "torch_checks: mismatch: ", r, "refused:"), "xdc.torch.DiLoCo: ", 18) == 0);
    }
}

/* Streaming with H = 4, F = 2 on 2 x 2 members: fragment 0 synced after steps 2 and 6, fragment 1 after 4
 * and 8 (torch_checks.py checks the schedule); after each, the synced fragment is the same on every member
 * and the other is not (each member trained it on its own batches since its last round). */
XDC_TEST_T(api_torch_fragments_sync_on_schedule, 300)
{
    char run[700];
    static char out[1 << 17];
    int rc = launch_python(TOPO, "tests/api/torch_checks.py", "fragments", "tf", "none", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "torch_checks.py fragments exited %d:\n%s", rc, out);
    for (int step = 2; step <= 8; step += 2) {
        int synced = step % 4 == 2 ? 0 : 1;
        char what[64], hash[4][2][32];
        snprintf(what, sizeof what, "step %d synced %d: f0", step, synced);
        int differ = 0;
        for (int r = 0; r < 4; r++) {
            XDC_ASSERT(sscanf(rank_line(out, "torch_checks: fragments: ", r, what), "%31s f1 %31s", hash[r][0],
                              hash[r][1]) == 2);
            XDC_ASSERT_MSG(strcmp(hash[r][synced], hash[0][synced]) == 0,
                           "step %d: synced fragment %d differs between rank %d and rank 0:\n%s", step, synced, r, out);
            differ |= strcmp(hash[r][1 - synced], hash[0][1 - synced]) != 0;
        }
        XDC_ASSERT_MSG(differ, "step %d: fragment %d, not synced, is the same on every member:\n%s", step, 1 - synced,
                       out);
    }
}

/* What `torch_checks.py ddp` on 2 x 2 members (codec none) printed: every gradient is the exact mean over
 * the members, for 3 iterations (across DDP's bucket rebuild), with at least two buckets; the gloo group is
 * the region's (rank and size), and every socket a member opened for it ends in a member of its own region. */
static void check_ddp(const char *out)
{
    for (int r = 0; r < 4; r++) {
        char want[80];
        snprintf(want, sizeof want, "torch_checks: ddp: rank %d: ok, exact mean over 4 members", r);
        XDC_ASSERT_STR_CONTAINS(out, want);
        /* its first line: the sockets (ranks 0 and 1 are us-east, 2 and 3 eu-west); the region in brackets, as
         * torchrun may splice another rank's output right after it */
        snprintf(want, sizeof want, "torch_checks: ddp: rank %d: ", r);
        const char *line = strstr(out, want);
        int n = 0;
        char region[32] = "";
        XDC_ASSERT_MSG(
            line && sscanf(line + strlen(want), "%d gloo sockets, every peer in region [%31[^]]]", &n, region) == 2,
            "rank %d: no line on its gloo sockets:\n%s", r, out);
        XDC_ASSERT(n >= 1);
        XDC_ASSERT_MSG(strcmp(region, r < 2 ? "us-east" : "eu-west") == 0, "rank %d: peers in region %s", r, region);
    }
}

XDC_TEST_T(api_torch_ddp_hook_gives_the_exact_mean, 300)
{
    char run[700];
    static char out[1 << 16];
    int rc = launch_python(TOPO, "tests/api/torch_checks.py", "ddp", "tddp", "none", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "torch_checks.py ddp exited %d:\n%s", rc, out);
    check_ddp(out);
}

/* The same DDP check with each region's members started by torchrun (python -m torch.distributed.run
 * --standalone, 2 processes) instead of `xdc launch`: `xdc coordinator`, and per region only XDC_* for the
 * cross-region part (topology, run file, run folder, coordinator, run id, region, host); torchrun gives
 * RANK, WORLD_SIZE, LOCAL_RANK and its store, which the gloo group uses (env://). */
XDC_TEST_T(api_torch_torchrun_members_like_agent_exec, 300)
{
    char py[700], run[700], dir[700], log[700], src[600], cmd[4096];
    static char out[1 << 17];
    python_venv(py, sizeof py, 1);
    write_run("ttr", "none", run, sizeof run);
    snprintf(dir, sizeof dir, "%s/ttr", xdc_test_tmpdir());
    snprintf(log, sizeof log, "%s/coord.log", xdc_test_tmpdir());
    pid_t coord_pid;
    char *coord = e2e_start_coordinator(run, dir, log, "ttr-test", &coord_pid);
    char cwd[400];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1 XDC_TOPOLOGY=%1$s/%2$s XDC_CONFIG=%3$s XDC_RUN_DIR=%4$s "
             "XDC_COORDINATOR=%5$s XDC_RUN_ID=ttr-test; members() { export XDC_REGION=$1 XDC_HOST=$2; timeout 240 "
             "%6$s -m torch.distributed.run --standalone --nproc-per-node 2 %7$s ddp; }; "
             "(members us-east east-node1) > %8$s/us-east.out 2>&1 & p=$!; "
             "(members eu-west west-node1) > %8$s/eu-west.out 2>&1; a=$?; wait $p; b=$?; "
             "cat %8$s/us-east.out %8$s/eu-west.out; exit $((a + b))",
             cwd, TOPO, run, dir, coord, py, xdc_test_src("tests/api/torch_checks.py", src, sizeof src),
             xdc_test_tmpdir());
    int rc = xdc_test_run(cmd, out, sizeof out);
    kill(coord_pid, SIGTERM); /* it ends by itself once the members are gone; not before, if they failed */
    waitpid(coord_pid, NULL, 0);
    free(coord);
    XDC_ASSERT_MSG(rc == 0, "the torchrun members exited %d:\n%s", rc, out);
    check_ddp(out);
}

/* examples/torch/train_gpt.py on 2 x 2 members with int8 (args): the validation loss ends at least `margin`
 * below its start, every member ends with the same parameters, and WAN bytes were sent (fewer than the fp32
 * bytes they stand for). */
static void train_gpt(const char *name, const char *args, double margin)
{
    char run[700];
    static char out[1 << 17];
    int rc = launch_python(TOPO, "examples/torch/train_gpt.py", args, name, "int8", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "train_gpt.py %s exited %d:\n%s", args, rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "4 members of 2 regions ran");
    double v0, v1;
    const char *p = strstr(out, "train_gpt: val loss ");
    XDC_ASSERT_MSG(p && sscanf(p, "train_gpt: val loss %lf -> %lf", &v0, &v1) == 2, "no validation loss:\n%s", out);
    XDC_ASSERT_MSG(v1 < v0 - margin, "validation loss %.4f -> %.4f: not %.2f lower:\n%s", v0, v1, margin, out);
    same_on_every_rank(out, "train_gpt: ", "start hash", 4);
    same_on_every_rank(out, "train_gpt: ", "end hash", 4);
    unsigned long long tx, rx, raw;
    p = strstr(rank_line(out, "train_gpt: ", 0, "end hash"), "WAN bytes sent ");
    XDC_ASSERT(p && sscanf(p, "WAN bytes sent %llu received %llu (fp32 %llu)", &tx, &rx, &raw) == 3);
    XDC_ASSERT_MSG(tx > 0 && rx > 0 && tx < raw, "WAN bytes sent %llu received %llu of fp32 %llu", tx, rx, raw);
    printf("train_gpt.py %s: val loss %.4f -> %.4f, rank 0 sent %llu WAN bytes (fp32 %llu)\n", args, v0, v1, tx, raw);
}

XDC_TEST_T(api_torch_example_diloco_loss_falls, 300) { train_gpt("tgd", "--steps 60 --sync-every 10", 1.5); }

XDC_TEST_T(api_torch_example_ddp_loss_falls, 300) { train_gpt("tgs", "--ddp --steps 30", 1.5); }

/* tests/api/device.c: the device entry points on cpu-strict memory (the host cannot touch it), one member per
 * region: outer rounds and an all-reduce exact with codec none, a host call on a device tag refused; with two
 * members per region, device calls refused (XDC_STATUS_UNSUPPORTED). */
XDC_TEST_T(api_device_entry_points_on_strict_memory, 120)
{
    char prog[700], src[600], run[700], topo[700], cmdline[900];
    static char out[1 << 16];
    build_against_install(xdc_test_src("tests/api/device.c", src, sizeof src), "device", prog, sizeof prog);
    one_each(topo, sizeof topo);
    write_run("dev", "none", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "env XDC_DEVICE=cpu-strict %s", prog);
    int rc = launch_exec(topo, run, "dev-run", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec exited %d:\n%s", rc, out);
    for (int r = 0; r < 2; r++) {
        char want[80];
        snprintf(want, sizeof want, "device: rank %d: 2 rounds exact (0.6953125), mean exact", r);
        XDC_ASSERT_STR_CONTAINS(out, want);
    }
    /* int8: the codec (and its error feedback) on the device, the same results on both members */
    write_run("dev8", "int8", run, sizeof run);
    snprintf(cmdline, sizeof cmdline, "env XDC_DEVICE=cpu-strict %s lossy", prog);
    rc = launch_exec(topo, run, "dev-int8", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec (int8) exited %d:\n%s", rc, out);
    same_on_every_rank(out, "device: ", "lossy within 0.05, hash", 2);
    /* 2 x 2 members: the region's communicator is host shared memory, so device buffers are refused */
    snprintf(cmdline, sizeof cmdline, "env XDC_DEVICE=cpu-strict %s replicas", prog);
    rc = launch_exec(TOPO, run, "dev-replicas", cmdline, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch --exec (replicas) exited %d:\n%s", rc, out);
    for (int r = 0; r < 4; r++) {
        char want[80];
        snprintf(want, sizeof want, "device: rank %d: refused", r);
        XDC_ASSERT_STR_CONTAINS(out, want);
    }
}

/* tests/api/device_checks.py shim: xdc.torch.DiLoCo over shim objects whose __cuda_array_interface__ points
 * at cpu-strict device memory, one member per region: libxdc's device path (streams, events, the codec on the
 * device, pinned staging) gives the exact outer step and the same parameters everywhere, overlapped (overlap=1:
 * xdc_outer_begin/apply/last_round_device) too, with state_dict() of the device state; an all-reduce of
 * device memory the exact mean; parameter lists on two devices refused naming the tensors. */
XDC_TEST_T(api_torch_device_path_on_strict_memory, 300)
{
    char run[700], topo[700];
    static char out[1 << 16];
    one_each(topo, sizeof topo);
    int rc = launch_python(topo, "tests/api/device_checks.py", "shim", "tds", "none", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "device_checks.py shim exited %d:\n%s", rc, out);
    same_on_every_rank(out, "device_checks: shim: ", "ok, 2 rounds exact (0.6953125), mean exact, hash", 2);
}

/* tests/api/device_checks.py host: DiLoCo with offload=True over float32 CPU tensors and over bfloat16 CPU
 * tensors, one member per region: the same parameters on every member after the last round. */
XDC_TEST_T(api_torch_offload_and_bf16_same_parameters, 300)
{
    char run[700], topo[700];
    static char out[1 << 16];
    one_each(topo, sizeof topo);
    int rc = launch_python(topo, "tests/api/device_checks.py", "host", "tdh", "none", 1, run, sizeof run, out,
                           sizeof out);
    XDC_ASSERT_MSG(rc == 0, "device_checks.py host exited %d:\n%s", rc, out);
    same_on_every_rank(out, "device_checks: host: ", "offload hash", 2);
    same_on_every_rank(out, "device_checks: host: ", "bf16 hash", 2);
    XDC_ASSERT_STR_CONTAINS(out, "device_checks: host: rank 1: ok");
}
