/* test_sync_threads.c — a streaming run's worker has the same small number of threads with 16 fragments
 * as with 4 (the worker logs its count once set up): the fragments share the worker's one sync engine
 * (tests/sync/test_sync.c checks the engine itself in one process). */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <unistd.h>

#define DATA "/usr/share/games/fortunes"
#define TOPO "examples/topology/demo-2region.yaml"

/* Launch a short streaming run with `fragments` fragments; the threads of every worker, read from the
 * line each worker logs once set up ("... N threads"). Returns the largest count over the workers. */
static int worker_threads(int fragments)
{
    char cwd[400], run[600], dir[600], text[1024], cmd[2048], out[16384];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(run, sizeof run, "%s/stream-%d.yaml", xdc_test_tmpdir(), fragments);
    snprintf(dir, sizeof dir, "%s/stream-%d", xdc_test_tmpdir(), fragments);
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: %s\nmode: streaming\npipeline_stages: 2\nmicrobatches: 2\n"
             "steps: 16\ncodec: int8\nbucket_mb: 0.05\nthreads: 1\ndiloco: {inner_steps: 16}\n"
             "streaming: {fragments: %d}\ntimeouts: {rendezvous: 30s, operation: 30s}\n",
             cwd, DATA, fragments);
    xdc_test_write_file(run, text);
    snprintf(cmd, sizeof cmd, "timeout 240 %s launch -t %s -c %s --run-dir %s", xdc_test_bin(), TOPO, run, dir);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "launch with %d fragments exited %d:\n%s", fragments, rc, out);
    snprintf(cmd, sizeof cmd, "grep -ho ' [0-9]* threads' %s/logs/*.log | sort -n | tail -1", dir);
    rc = xdc_test_run(cmd, out, sizeof out);
    int n = 0;
    XDC_ASSERT_MSG(rc == 0 && sscanf(out, " %d threads", &n) == 1, "no thread count in the worker logs: %s", out);
    return n;
}

XDC_TEST_T(sync_streaming_worker_threads_do_not_grow_with_fragments, 300)
{
    if (access(DATA, R_OK) != 0) xdc_test_skip("no corpus at %s (Debian package fortunes; `make deps`)", DATA);
    int four = worker_threads(4), sixteen = worker_threads(16);
    printf("worker threads: %d with 4 fragments, %d with 16\n", four, sixteen);
    XDC_ASSERT_MSG(four > 0 && four == sixteen, "%d threads with 4 fragments, %d with 16", four, sixteen);
    XDC_ASSERT_MSG(sixteen <= 12, "%d threads in a worker", sixteen);
}
