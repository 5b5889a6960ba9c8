/* test_certs_node_run.c — per-node identities end to end (tests/launch/test_certs_node.c checks the
 * requests, signatures and revocations in one process): a 2-region run whose coordinator and agents each
 * hold only their own keys (separate folders, no ca.key anywhere but the CA's) trains to the end. */
#include "tests/xdc_test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DATA "/usr/share/games/fortunes"
#define TOPO "examples/topology/demo-2region.yaml"

/* The names of the files in `dir` ending in `.key`, space-separated, sorted by readdir order. */
static void keys_in(const char *dir, char *out, size_t cap)
{
    out[0] = '\0';
    DIR *d = opendir(dir);
    XDC_ASSERT(d != NULL);
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".key") == 0) {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "%s ", e->d_name);
        }
    }
    closedir(d);
}

XDC_TEST_T(certs_node_run_with_only_own_keys_on_each_node, 180)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
    char cwd[400], run[600], text[1024], cmd[6000], out[16384], log[700];
    XDC_ASSERT(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(run, sizeof run, "%s/run.yaml", xdc_test_tmpdir());
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: sync\npipeline_stages: 2\nmicrobatches: 2\n"
             "steps: 4\ncodec: int8\nbucket_mb: 0.05\nthreads: 1\ntimeouts: {rendezvous: 30s, operation: 30s}\n",
             cwd, DATA);
    xdc_test_write_file(run, text);
    /* Enrolment as the docs describe it, with the commands: the CA host makes the CA; each host (the
     * coordinator's and each region's node) makes its own keys and requests; the CA host signs them; each
     * host gets its certificates, the CA certificate and the CA's (empty) CRL back. Nothing else is copied. */
    const char *t = xdc_test_tmpdir();
    snprintf(cmd, sizeof cmd,
             "set -e; x=%1$s; t=%2$s; mkdir -p $t/cahost $t/coord/certs $t/us/certs $t/eu/certs; "
             "$x certs init --dir $t/cahost --run node-run >/dev/null; "
             "$x certs request --dir $t/coord/certs --run node-run --region coordinator --rank 0 >/dev/null; "
             "for k in 0 1; do "
             "  $x certs request --dir $t/us/certs --run node-run --region us-east --rank $k --host east-node1 "
             "    >/dev/null; "
             "  $x certs request --dir $t/eu/certs --run node-run --region eu-west --rank $k --host west-node1 "
             "    >/dev/null; done; "
             "for f in $t/coord/certs/*.csr $t/us/certs/*.csr $t/eu/certs/*.csr; do "
             "  $x certs sign --dir $t/cahost --csr $f --out ${f%%.csr}.pem >/dev/null; done; "
             "for h in coord us eu; do cp $t/cahost/ca.pem $t/cahost/crl.pem $t/$h/certs/; done",
             xdc_test_bin(), t);
    XDC_ASSERT_MSG(xdc_test_run(cmd, out, sizeof out) == 0, "enrolment failed:\n%s", out);
    char keys[512], dir[600];
    snprintf(dir, sizeof dir, "%s/us/certs", t);
    keys_in(dir, keys, sizeof keys);
    XDC_ASSERT_MSG(strstr(keys, "us-east-0.key") && strstr(keys, "us-east-1.key") && !strstr(keys, "ca.key") &&
                       !strstr(keys, "eu-west") && !strstr(keys, "coordinator"),
                   "us node holds: %s", keys);
    /* An agent pointed at a folder without its keys says which file and how to make it (exit 78). */
    snprintf(cmd, sizeof cmd,
             "%s agent -t %s -c %s --run-dir %s/eu/run --region us-east --node 0 --coordinator 127.0.0.1:1 "
             "--run-id node-run --cert-dir %s/eu/certs",
             xdc_test_bin(), TOPO, run, t, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "no key for us-east/0");
    XDC_ASSERT_STR_CONTAINS(out, "xdc certs request --dir");
    XDC_ASSERT_STR_CONTAINS(out, "--run node-run --region us-east --rank 0");
    /* A coordinator told another run id than its certificate's stops and says which. */
    snprintf(cmd, sizeof cmd,
             "%s coordinator -t %s -c %s --run-dir %s/coord/run --host 127.0.0.1 --port 0 --run-id other "
             "--cert-dir %s/coord/certs",
             xdc_test_bin(), TOPO, run, t, t);
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "names run 'node-run', but this run is 'other'");
    /* The coordinator with its own key only; each agent with its own folder and run folder. */
    snprintf(log, sizeof log, "%s/coord.log", t);
    pid_t p = fork();
    if (p == 0) {
        char rd[600], cd[600];
        snprintf(rd, sizeof rd, "%s/coord/run", t);
        snprintf(cd, sizeof cd, "%s/coord/certs", t);
        if (!freopen(log, "w", stdout)) _exit(127);
        dup2(1, 2);
        execl(xdc_test_bin(), xdc_test_bin(), "coordinator", "-t", TOPO, "-c", run, "--run-dir", rd, "--host",
              "127.0.0.1", "--port", "0", "--run-id", "node-run", "--cert-dir", cd, (char *)NULL);
        _exit(127);
    }
    char *coord = NULL;
    for (int i = 0; i < 400 && !coord; i++) {
        char *txt = xdc_test_read_file(log, NULL);
        char *at = txt ? strstr(txt, "--coordinator ") : NULL;
        if (at) coord = strndup(at + strlen("--coordinator "), strcspn(at + strlen("--coordinator "), " \n"));
        free(txt);
        if (!coord) nanosleep(&(struct timespec){0, 25 * 1000000L}, NULL);
    }
    XDC_ASSERT_MSG(coord != NULL, "the coordinator did not start");
    snprintf(cmd, sizeof cmd,
             "export XDC_ADVERTISE_HOST=127.0.0.1; x=%1$s; t=%4$s; "
             "timeout 120 $x agent -t %2$s -c %3$s --run-dir $t/us/run --region us-east --node 0 --coordinator %5$s "
             "--run-id node-run --cert-dir $t/us/certs & p=$!; "
             "XDC_CERT_DIR=$t/eu/certs timeout 120 $x agent -t %2$s -c %3$s --run-dir $t/eu/run --region eu-west "
             "--node 0 --coordinator %5$s --run-id node-run; "
             "a=$?; wait $p; b=$?; exit $((a + b))",
             xdc_test_bin(), TOPO, run, t, coord);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "agents exited %d:\n%s", rc, out);
    XDC_ASSERT_STR_CONTAINS(out, "from XDC_CERT_DIR");
    XDC_ASSERT_STR_CONTAINS(out, "eu/certs/crl.pem"); /* beside the CA certificate: checked */
    int status;
    XDC_ASSERT(waitpid(p, &status, 0) == p);
    XDC_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "coordinator exited with status 0x%x", status);
    char *txt = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(txt, "final val_loss=");
    free(txt);
    free(coord);
    /* Nobody made keys in a run folder. */
    snprintf(dir, sizeof dir, "%s/coord/run/certs", t);
    XDC_ASSERT(access(dir, F_OK) != 0);
    snprintf(dir, sizeof dir, "%s/us/run/certs", t);
    XDC_ASSERT(access(dir, F_OK) != 0);
}
