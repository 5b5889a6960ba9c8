/* cmd_report.c — `xdc report [-o DIR] RUN_DIR...`: PNG plots of one or several runs, drawn by gnuplot
 * from the step logs every worker wrote (RUN/steps/<region>-<rank>.tsv, orchestrator/obs/orch_steplog.h):
 *   loss_vs_time.png   validation loss against wall time (the slowest worker's clock at each step)
 *   loss_vs_bytes.png  validation loss against WAN bytes (every worker's payload summed), MB
 *   step_time.png      the mean step split into compute, bubble (the rest of the step: pipeline waits),
 *                      intra and exposed WAN, averaged over every worker and step; one bar per run
 * A run is labelled by its folder's name. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_alloc.h"
#include "common/xdc_err.h"
#include "orchestrator/obs/orch_steplog.h"

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int report_usage(FILE *f)
{
    fprintf(f, "usage: xdc report [-o DIR] RUN_DIR [RUN_DIR...]\n"
               "  Draw loss_vs_time.png, loss_vs_bytes.png and step_time.png into DIR (default: .) from the\n"
               "  step logs of each run folder (RUN_DIR/steps/*.tsv, written by every worker of `xdc launch`).\n"
               "  Needs gnuplot (Debian: gnuplot-nox). Exit 66 when a run folder or its step logs are missing,\n"
               "  65 when a step log is malformed, 69 without gnuplot, 74 when DIR cannot be written.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

/* One run, aggregated over its workers. */
typedef struct run_sum {
    char name[128];
    double compute, bubble, intra, wan; /* mean seconds per step and worker */
    double wan_mb;                      /* WAN payload of the whole run, MB */
} run_sum;

/* The folder's last path component, with characters gnuplot strings cannot hold replaced. */
static void run_name(const char *dir, char *out, size_t cap)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(out, cap, "%.*s", (int)(len - start), dir + start);
    for (char *c = out; *c; c++)
        if (*c == '"' || *c == '\\' || *c == '_') *c = *c == '_' ? '-' : '\'';
}

/* Read every step log of `dir`, write its validation points to `dat` (elapsed_s wan_MB val_loss) and its
 * step split to *sum. Returns an exit code; `why` says what went wrong. */
static int load_run(const char *dir, const char *dat, run_sum *sum, char *why, size_t cap)
{
    struct stat sb;
    errno = 0;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(why, cap, "%s: not a run folder (%s)", dir, errno ? strerror(errno) : "not a directory");
        return XDC_EX_NOINPUT;
    }
    char pat[1200];
    snprintf(pat, sizeof pat, "%s/steps/*.tsv", dir);
    glob_t g;
    if (glob(pat, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        snprintf(why, cap, "%s: no step logs (steps/*.tsv); was it written by an xdc launch of this version?", dir);
        globfree(&g);
        return XDC_EX_NOINPUT;
    }
    int rc = XDC_EX_OK;
    size_t nw = g.gl_pathc, n = SIZE_MAX;
    orch_steplog_row **rows = xdc_calloc(nw, sizeof *rows);
    size_t *counts = xdc_calloc(nw, sizeof *counts);
    if (!rows || !counts) rc = XDC_EX_OSERR;
    for (size_t w = 0; rc == XDC_EX_OK && w < nw; w++) {
        xdc_diag d = {{0}};
        xdc_err_t e = orch_steplog_read(g.gl_pathv[w], &rows[w], &counts[w], &d);
        if (e != XDC_OK) {
            snprintf(why, cap, "%s", d.msg);
            rc = e == XDC_ERR_IO ? XDC_EX_NOINPUT : xdc_cli_exit_code(e);
        } else if (counts[w] == 0) {
            snprintf(why, cap, "%s: no steps recorded", g.gl_pathv[w]);
            rc = XDC_EX_DATAERR;
        }
        n = counts[w] < n ? counts[w] : n;
    }
    FILE *f = rc == XDC_EX_OK ? fopen(dat, "w") : NULL;
    if (rc == XDC_EX_OK && !f) {
        snprintf(why, cap, "%s: %s", dat, strerror(errno));
        rc = XDC_EX_IOERR;
    }
    memset(sum, 0, sizeof *sum);
    run_name(dir, sum->name, sizeof sum->name);
    for (size_t i = 0; rc == XDC_EX_OK && i < n; i++) {
        double elapsed = 0, val = NAN, mb = 0;
        for (size_t w = 0; w < nw; w++) {
            const orch_steplog_row *r = &rows[w][i];
            elapsed = r->elapsed_s > elapsed ? r->elapsed_s : elapsed;
            mb += (double)r->wan_tx_bytes / 1e6;
            if (!isnan(r->val_loss)) val = r->val_loss;
            double rest = r->step_s - r->compute_s - r->intra_s - r->wan_exposed_s;
            sum->compute += r->compute_s;
            sum->bubble += rest > 0 ? rest : 0;
            sum->intra += r->intra_s;
            sum->wan += r->wan_exposed_s;
        }
        if (!isnan(val)) fprintf(f, "%.4f %.6f %.4f\n", elapsed, mb, val);
        sum->wan_mb = mb;
    }
    if (f && fclose(f) != 0) {
        snprintf(why, cap, "%s: write failed", dat);
        rc = XDC_EX_IOERR;
    }
    double k = (double)n * (double)nw;
    if (rc == XDC_EX_OK) sum->compute /= k, sum->bubble /= k, sum->intra /= k, sum->wan /= k;
    for (size_t w = 0; rows && w < nw; w++) xdc_free(rows[w]);
    xdc_free(rows);
    xdc_free(counts);
    globfree(&g);
    return rc;
}

static void write_script(FILE *f, const char *out, const char *tmp, const run_sum *runs, int n)
{
    fprintf(f, "set terminal pngcairo size 900,560 noenhanced\nset grid\nset key top right\n");
    /* WAN bytes span orders of magnitude between modes: a log axis, on which a run without WAN traffic
     * (one region) has no place; points before a run's first send are left out the same way. */
    int any_wan = 0;
    for (int i = 0; i < n; i++) any_wan |= runs[i].wan_mb > 0;
    fprintf(f,
            "set output \"%s/loss_vs_time.png\"\nset xlabel \"wall time (s)\"\nset ylabel \"validation loss\"\nplot ",
            out);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\"%s/run%d.dat\" using 1:3 with linespoints title \"%s\"", i ? ", " : "", tmp, i, runs[i].name);
    fprintf(f, "\nset output \"%s/loss_vs_bytes.png\"\nset xlabel \"WAN bytes (MB%s)\"\n%splot ", out,
            any_wan ? ", log scale; runs without WAN traffic left out" : "", any_wan ? "set logscale x\n" : "");
    for (int i = 0, k = 0; i < n; i++) {
        if (any_wan && runs[i].wan_mb <= 0) continue;
        fprintf(f, "%s\"%s/run%d.dat\" using %s:3 with linespoints title \"%s\"", k++ ? ", " : "", tmp, i,
                any_wan ? "($2 > 0 ? $2 : NaN)" : "2", runs[i].name);
    }
    fprintf(f, "\n");
    fprintf(f,
            "unset logscale x\nset output \"%s/step_time.png\"\nset style data histograms\n"
            "set style histogram rowstacked\nset style fill solid 0.8 border -1\nset boxwidth 0.6\n"
            "set xlabel \"\"\nset ylabel \"seconds per step (mean over workers)\"\nset key outside right\n"
            "set xtics rotate by -30\n"
            "plot \"%s/split.dat\" using 2:xtic(1) title \"compute\", '' using 3 title \"bubble\", "
            "'' using 4 title \"intra\", '' using 5 title \"exposed WAN\"\n",
            out, tmp);
}

/* Run gnuplot on `script`; an exit code. */
static int run_gnuplot(const char *script, char *why, size_t cap)
{
    pid_t pid;
    char *argv[] = {"gnuplot", (char *)script, NULL};
    int e = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (e != 0) {
        snprintf(why, cap, "cannot run gnuplot: %s (Debian: apt-get install gnuplot-nox)", strerror(e));
        return XDC_EX_UNAVAILABLE;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            snprintf(why, cap, "waiting for gnuplot: %s", strerror(errno));
            return XDC_EX_OSERR;
        }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return XDC_EX_OK;
    snprintf(why, cap, "gnuplot failed (status %d); script %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, script);
    return XDC_EX_SOFTWARE;
}

int xdc_cmd_report(int argc, char **argv)
{
    const char *out = ".";
    int first = 1;
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return report_usage(stdout);
    if (argc >= 3 && strcmp(argv[1], "-o") == 0) out = argv[2], first = 3;
    if (first >= argc || argv[first][0] == '-') return report_usage(stderr);
    int n = argc - first;
    char tmp[] = "/tmp/xdc-report-XXXXXX", path[600], why[1200] = "";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "xdc: report: cannot create a scratch folder: %s\n", strerror(errno));
        return XDC_EX_IOERR;
    }
    run_sum *runs = xdc_calloc((size_t)n, sizeof *runs);
    int rc = runs ? XDC_EX_OK : XDC_EX_OSERR;
    for (int i = 0; rc == XDC_EX_OK && i < n; i++) {
        snprintf(path, sizeof path, "%s/run%d.dat", tmp, i);
        rc = load_run(argv[first + i], path, &runs[i], why, sizeof why);
    }
    struct stat sb;
    if (rc == XDC_EX_OK && (stat(out, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(out, W_OK) != 0)) {
        snprintf(why, sizeof why, "%s: not a writable folder", out);
        rc = XDC_EX_IOERR;
    }
    FILE *f = NULL;
    if (rc == XDC_EX_OK) {
        snprintf(path, sizeof path, "%s/split.dat", tmp);
        f = fopen(path, "w");
        for (int i = 0; f && i < n; i++)
            fprintf(f, "\"%s\" %.6f %.6f %.6f %.6f\n", runs[i].name, runs[i].compute, runs[i].bubble, runs[i].intra,
                    runs[i].wan);
        if (!f || fclose(f) != 0) snprintf(why, sizeof why, "%s: write failed", path), rc = XDC_EX_IOERR;
    }
    if (rc == XDC_EX_OK) {
        snprintf(path, sizeof path, "%s/plot.gp", tmp);
        f = fopen(path, "w");
        if (f) write_script(f, out, tmp, runs, n);
        if (!f || fclose(f) != 0) snprintf(why, sizeof why, "%s: write failed", path), rc = XDC_EX_IOERR;
    }
    if (rc == XDC_EX_OK) rc = run_gnuplot(path, why, sizeof why);
    if (rc == XDC_EX_OK)
        printf("wrote %s/loss_vs_time.png %s/loss_vs_bytes.png %s/step_time.png (%d runs)\n", out, out, out, n);
    else fprintf(stderr, "xdc: report: %s\n", why);
    xdc_free(runs);
    /* keep the scratch folder when gnuplot failed, so its script can be read */
    if (rc != XDC_EX_SOFTWARE) {
        char cmdrm[700];
        for (int i = 0; i < n; i++) snprintf(cmdrm, sizeof cmdrm, "%s/run%d.dat", tmp, i), unlink(cmdrm);
        snprintf(cmdrm, sizeof cmdrm, "%s/split.dat", tmp), unlink(cmdrm);
        snprintf(cmdrm, sizeof cmdrm, "%s/plot.gp", tmp), unlink(cmdrm);
        rmdir(tmp);
    }
    return rc;
}
