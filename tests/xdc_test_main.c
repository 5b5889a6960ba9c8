/* xdc_test_main.c — the test runner. Forks each registered test into its own process group, captures
 * its output to a file, enforces its timeout (killing the whole group, so a test's own workers go too),
 * and reads the verdict from a pipe: pass (with its assertion count), fail (with a message) or skip
 * (with a reason). Ends with exactly one line "N passed, N failed, N skipped".
 *
 * Up to -j N tests run at once (at most --e2e-jobs M of them end-to-end), unit tests first, then the
 * end-to-end tier (a test's tier is its folder, xdc_test.h). A serial test runs alone: it starts when
 * nothing runs, and nothing starts while it runs; the tests behind it go first meanwhile, so the serial
 * tests of a run end up one after another once the parallel ones are done.
 *
 * usage: xdc_tests [-v] [-l] [-j N] [--e2e-jobs M] [--tier unit|e2e] [substring...]
 *        (XDC_TEST_FILTER also selects by substring) */
#include "tests/xdc_test.h"
#include "kernels/xdc_model_ops.h"

#include "common/xdc_time.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef XDC_BIN_PATH
#define XDC_BIN_PATH "build/xdc"
#endif

/* A test's timeout is a watchdog for a hung test, not a speed limit. AddressSanitizer builds run the
 * same work 2-5x slower (TLS handshakes most of all), so their watchdog waits 4x as long. */
#ifdef __SANITIZE_ADDRESS__
#define TIMEOUT_SCALE 4
#else
#define TIMEOUT_SCALE 1
#endif

typedef struct {
    const char *name;
    xdc_test_fn fn;
    int timeout_s;
    const char *file;
    xdc_test_tier tier;
    int serial;
    int seq; /* registration order */
} test_case;

static const char *const TIER_NAMES[] = {[XDC_TIER_UNIT] = "unit", [XDC_TIER_E2E] = "e2e"};

static test_case *g_tests;
static int g_n_tests, g_cap_tests;

/* Child-side state. */
static int g_verdict_fd = -1;
static long g_assertions;
static char g_tmpdir[256];

void xdc_test_register(const char *name, xdc_test_fn fn, int timeout_s, const char *file, unsigned flags)
{
    if (g_n_tests == g_cap_tests) {
        g_cap_tests = g_cap_tests ? 2 * g_cap_tests : 64;
        g_tests = realloc(g_tests, (size_t)g_cap_tests * sizeof *g_tests);
        if (!g_tests) abort(); /* registration runs before main; nothing to recover */
    }
    xdc_test_tier tier = strstr(file, "tests/e2e/") ? XDC_TIER_E2E : XDC_TIER_UNIT;
    g_tests[g_n_tests] = (test_case){name, fn, timeout_s, file, tier, (flags & XDC_TEST_SERIAL_FLAG) != 0, g_n_tests};
    g_n_tests++;
}

static void verdict(char kind, const char *msg)
{
    char buf[2048];
    int n = snprintf(buf, sizeof buf, "%c%s", kind, msg);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1;
    if (g_verdict_fd >= 0 && write(g_verdict_fd, buf, (size_t)n) < 0) _exit(3);
}

void xdc_test_count_assertion(void) { g_assertions++; }

/* The verdict holds the message's first 1800 bytes; the test's log (whose tail the runner prints) the whole
 * of it, so a long output quoted by an assertion keeps its end, where a failure's cause usually is. */
void xdc_test_fail_at(const char *file, int line, const char *fmt, ...)
{
    char msg[1800], full[2000];
    va_list ap, whole;
    va_start(ap, fmt);
    va_copy(whole, ap);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s:%d: %s", file, line, msg);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, whole);
    va_end(whole);
    fputc('\n', stderr);
    verdict('F', full);
    _exit(1);
}

void xdc_test_skip(const char *fmt, ...)
{
    char msg[1800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    verdict('S', msg);
    _exit(77);
}

const char *xdc_test_tmpdir(void) { return g_tmpdir; }

const char *xdc_test_src(const char *rel, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", rel);
    return buf;
}

const char *xdc_test_bin(void)
{
    const char *v = getenv("XDC_BIN");
    return v && *v ? v : XDC_BIN_PATH;
}

int xdc_test_run(const char *cmd, char *out, size_t cap)
{
    char *full;
    if (asprintf(&full, "( %s ) 2>&1", cmd) < 0) return -1;
    FILE *p = popen(full, "r");
    free(full);
    if (!p) return -1;
    size_t n = 0;
    if (out && cap) {
        size_t r;
        while (n + 1 < cap && (r = fread(out + n, 1, cap - 1 - n, p)) > 0) n += r;
        out[n] = '\0';
    }
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    if (st < 0) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

char *xdc_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

void xdc_test_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f) XDC_FAIL("cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* ---- parent side ------------------------------------------------------------------------------ */

typedef struct {
    int idx;
    pid_t pid;
    int fd;             /* verdict pipe, read end */
    char out_path[300]; /* captured stdout+stderr */
    char tmp[256];
    uint64_t start_ns, deadline_ns;
    char verdict[2048];
    size_t vlen;
    int timed_out;
} running;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void print_tail(const char *path, int lines)
{
    size_t len;
    char *text = xdc_test_read_file(path, &len);
    if (!text) return;
    int seen = 0;
    size_t i = len;
    while (i > 0 && seen <= lines) {
        i--;
        if (text[i] == '\n') seen++;
    }
    if (seen > lines) i++;
    fprintf(stdout, "    | %s", "");
    for (size_t k = i; k < len; k++) {
        fputc(text[k], stdout);
        if (text[k] == '\n' && k + 1 < len) fputs("    | ", stdout);
    }
    if (len && text[len - 1] != '\n') fputc('\n', stdout);
    free(text);
}

static void start_test(running *r, int idx, const char *outdir)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
        perror("pipe");
        exit(70);
    }
    r->idx = idx;
    r->vlen = 0;
    r->timed_out = 0;
    snprintf(r->out_path, sizeof r->out_path, "%s/%s.log", outdir, g_tests[idx].name);
    snprintf(r->tmp, sizeof r->tmp, "%s/tmp-%s-XXXXXX", outdir, g_tests[idx].name);
    if (!mkdtemp(r->tmp)) {
        perror("mkdtemp");
        exit(70);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(70);
    }
    if (pid == 0) {
        setpgid(0, 0);
        close(p[0]);
        g_verdict_fd = p[1];
        int fd = open(r->out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        snprintf(g_tmpdir, sizeof g_tmpdir, "%s", r->tmp);
        g_assertions = 0;
        g_tests[idx].fn();
        char msg[64];
        snprintf(msg, sizeof msg, "%ld", g_assertions);
        verdict('P', msg);
        fflush(NULL);
        _exit(0);
    }
    setpgid(pid, pid);
    close(p[1]);
    r->pid = pid;
    r->fd = p[0];
    r->start_ns = xdc_now_ns();
    r->deadline_ns = r->start_ns + (uint64_t)g_tests[idx].timeout_s * TIMEOUT_SCALE * 1000000000ull;
}

static int g_pass, g_fail, g_skip, g_verbose;

static void finish_test(running *r, int status)
{
    const test_case *t = &g_tests[r->idx];
    double secs = (double)(xdc_now_ns() - r->start_ns) / 1e9;
    r->verdict[r->vlen] = '\0';
    char kind = r->vlen ? r->verdict[0] : '?';
    const char *msg = r->vlen ? r->verdict + 1 : "";
    int failed = 0;
    if (r->timed_out) {
        printf("FAIL %-44s timed out after %d s\n", t->name, t->timeout_s * TIMEOUT_SCALE);
        failed = 1;
    } else if (WIFSIGNALED(status)) {
        printf("FAIL %-44s killed by signal %d (%s)\n", t->name, WTERMSIG(status), strsignal(WTERMSIG(status)));
        failed = 1;
    } else if (kind == 'S') {
        printf("SKIP %-44s %s\n", t->name, msg);
        g_skip++;
    } else if (kind == 'F') {
        printf("FAIL %-44s %s\n", t->name, msg);
        failed = 1;
    } else if (kind == 'P' && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        if (atol(msg) == 0) {
            printf("FAIL %-44s made no assertion\n", t->name);
            failed = 1;
        } else {
            printf("PASS %-44s %6.2fs  (%s assertions)\n", t->name, secs, msg);
            g_pass++;
        }
    } else {
        printf("FAIL %-44s exited with status %d without a verdict\n", t->name,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        failed = 1;
    }
    if (failed) {
        g_fail++;
        printf("     (%s; output in %s)\n", t->file, r->out_path);
        print_tail(r->out_path, 30);
    } else if (g_verbose) {
        print_tail(r->out_path, 1000);
    }
    /* XDC_TEST_KEEP=1 keeps a failed test's folder (its runs' logs, stores, snapshots) for a post-mortem */
    if (failed && getenv("XDC_TEST_KEEP")) printf("     (its folder kept: %s)\n", r->tmp);
    else nftw(r->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    fflush(stdout);
}

static int g_tier = -1; /* --tier: that tier's tests only; -1: both */

static int selected(const test_case *t, int argc, char **argv, int first)
{
    if (g_tier >= 0 && (int)t->tier != g_tier) return 0;
    const char *env = getenv("XDC_TEST_FILTER");
    if (env && *env && !strstr(t->name, env)) return 0;
    if (first >= argc) return 1;
    for (int i = first; i < argc; i++)
        if (strstr(t->name, argv[i])) return 1;
    return 0;
}

/* Unit tests first (quick: a failure shows early), then the end-to-end tier; by file, and within a file
 * in registration order (constructors run in link order, so seq keeps a file's own order). */
static int by_tier_file_order(const void *a, const void *b)
{
    const test_case *x = a, *y = b;
    if (x->tier != y->tier) return x->tier < y->tier ? -1 : 1;
    int c = strcmp(x->file, y->file);
    if (c) return c;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* XDC_TEST_SCHED_LOG=FILE: the runner appends "start NAME" and "end NAME" as it starts and reaps tests,
 * so a test of the runner can check the order (test_harness.c: no two serial tests overlap). */
static FILE *g_sched_log;

static void sched_note(const char *what, const test_case *t)
{
    if (!g_sched_log) return;
    fprintf(g_sched_log, "%s %s\n", what, t->name);
    fflush(g_sched_log);
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [-v] [-l] [-j N] [--e2e-jobs M] [--tier unit|e2e] [substring...]\n", argv0);
}

/* The queue index of the next test that may start now, or -1: not started, within the end-to-end limit;
 * nothing while a serial test runs, and a serial test only when nothing runs. Tests behind one that must
 * wait may go first. */
static int next_startable(const int *queue, const char *started, int nq, int from, int active, int serial_running,
                          int e2e_room)
{
    if (serial_running) return -1;
    for (int q = from; q < nq; q++) {
        const test_case *t = &g_tests[queue[q]];
        if (started[q] || (t->serial && active) || (t->tier == XDC_TIER_E2E && !e2e_room)) continue;
        return q;
    }
    return -1;
}

int main(int argc, char **argv)
{
    xdc_model_cpu_fit_blas(argv); /* first: it may start the program again */
    int jobs = 1, e2e_jobs = 0, list = 0, first = 1;
    while (first < argc && argv[first][0] == '-') {
        const char *a = argv[first];
        if (strcmp(a, "-v") == 0) g_verbose = 1;
        else if (strcmp(a, "-l") == 0) list = 1;
        else if (strcmp(a, "-j") == 0 && first + 1 < argc) jobs = atoi(argv[++first]);
        else if (strcmp(a, "--e2e-jobs") == 0 && first + 1 < argc) e2e_jobs = atoi(argv[++first]);
        else if (strcmp(a, "--tier") == 0 && first + 1 < argc) {
            const char *name = argv[++first];
            g_tier = strcmp(name, "unit") == 0 ? XDC_TIER_UNIT : strcmp(name, "e2e") == 0 ? XDC_TIER_E2E : -2;
            if (g_tier == -2) {
                fprintf(stderr, "%s: --tier: '%s' is not unit or e2e\n", argv[0], name);
                return 64;
            }
        } else {
            usage(argv[0]);
            return 64;
        }
        first++;
    }
    if (jobs < 1) jobs = 1;
    if (jobs > 64) jobs = 64; /* the poll set below */
    if (e2e_jobs < 1 || e2e_jobs > jobs) e2e_jobs = jobs;
    qsort(g_tests, (size_t)g_n_tests, sizeof *g_tests, by_tier_file_order);
    int *queue = calloc((size_t)g_n_tests + 1, sizeof *queue), nq = 0;
    if (!queue) return 70;
    for (int i = 0; i < g_n_tests; i++)
        if (selected(&g_tests[i], argc, argv, first)) queue[nq++] = i;
    /* A filter that names no test is a typo, not a pass: say so and fail, so a CI step that runs
     * `xdc_tests wan_tsl` cannot go green on zero tests. */
    if (nq == 0) {
        fprintf(stderr, "%s: no test matches the filter (-l lists the tests)\n", argv[0]);
        printf("0 passed, 0 failed\n");
        free(queue); /* a sanitizer build's leak check would end the process with its own status */
        return 1;
    }
    if (list) {
        for (int q = 0; q < nq; q++) {
            const test_case *t = &g_tests[queue[q]];
            printf("%s\t%s\t%s%s\n", t->name, t->file, TIER_NAMES[t->tier], t->serial ? "\tserial" : "");
        }
        free(queue);
        return 0;
    }
    const char *sched = getenv("XDC_TEST_SCHED_LOG");
    if (sched && *sched && !(g_sched_log = fopen(sched, "a"))) {
        perror(sched);
        free(queue);
        return 70;
    }
    signal(SIGPIPE, SIG_IGN);
    char outdir[] = "/tmp/xdc-tests-XXXXXX";
    if (!mkdtemp(outdir)) {
        perror("mkdtemp");
        return 70;
    }
    running *slots = calloc((size_t)jobs, sizeof *slots);
    char *started = calloc((size_t)nq, 1);
    if (!slots || !started) return 70;
    int done_prefix = 0, active = 0, e2e_active = 0, serial_running = 0;
    for (;;) {
        while (done_prefix < nq && started[done_prefix]) done_prefix++;
        while (active < jobs) {
            int q = next_startable(queue, started, nq, done_prefix, active, serial_running, e2e_active < e2e_jobs);
            if (q < 0) break;
            const test_case *t = &g_tests[queue[q]];
            for (int s = 0; s < jobs; s++)
                if (slots[s].pid == 0) {
                    sched_note("start", t);
                    start_test(&slots[s], queue[q], outdir);
                    break;
                }
            started[q] = 1;
            active++;
            e2e_active += t->tier == XDC_TIER_E2E;
            serial_running += t->serial;
        }
        if (active == 0) break;
        struct pollfd pfd[64];
        int np = 0, map[64];
        for (int s = 0; s < jobs; s++)
            if (slots[s].pid && slots[s].fd >= 0) {
                pfd[np] = (struct pollfd){.fd = slots[s].fd, .events = POLLIN};
                map[np++] = s;
            }
        poll(pfd, (nfds_t)np, 10);
        for (int i = 0; i < np; i++) {
            running *r = &slots[map[i]];
            if (pfd[i].revents & (POLLIN | POLLHUP)) {
                ssize_t n = read(r->fd, r->verdict + r->vlen, sizeof r->verdict - 1 - r->vlen);
                if (n > 0) r->vlen += (size_t)n;
                else {
                    close(r->fd);
                    r->fd = -1;
                }
            }
        }
        for (int s = 0; s < jobs; s++) {
            running *r = &slots[s];
            if (!r->pid) continue;
            int status;
            pid_t w = waitpid(r->pid, &status, WNOHANG);
            if (w == 0 && xdc_now_ns() > r->deadline_ns) {
                r->timed_out = 1;
                kill(-r->pid, SIGKILL);
                w = waitpid(r->pid, &status, 0);
            }
            if (w == r->pid) {
                /* Take the stragglers of its group down, then drain the rest of the verdict (the pipe
                 * is non-blocking: a worker that escaped the group cannot stall the runner). */
                kill(-r->pid, SIGKILL);
                if (r->fd >= 0) {
                    ssize_t n;
                    while ((n = read(r->fd, r->verdict + r->vlen, sizeof r->verdict - 1 - r->vlen)) > 0)
                        r->vlen += (size_t)n;
                    close(r->fd);
                    r->fd = -1;
                }
                const test_case *t = &g_tests[r->idx];
                finish_test(r, status);
                sched_note("end", t);
                r->pid = 0;
                active--;
                e2e_active -= t->tier == XDC_TIER_E2E;
                serial_running -= t->serial;
            }
        }
    }
    free(slots);
    free(started);
    free(queue);
    if (g_sched_log) fclose(g_sched_log);
    if (g_fail == 0) nftw(outdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("%d passed, %d failed, %d skipped\n", g_pass, g_fail, g_skip);
    return g_fail ? 1 : 0;
}
