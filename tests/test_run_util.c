/* test_run_util.c — run files shared by the end-to-end tests (test_run_util.h). */
#include "tests/test_run_util.h"

#include "tests/xdc_test.h"

#include <stdio.h>
#include <unistd.h>

const char *test_write_tiny_run(const char *name, int steps)
{
    static char path[512];
    char cwd[400], text[1024];
    if (!getcwd(cwd, sizeof cwd)) XDC_FAIL("getcwd");
    snprintf(path, sizeof path, "%s/%s.yaml", xdc_test_tmpdir(), name);
    snprintf(text, sizeof text,
             "model: %s/examples/models/tiny.yaml\ndata: /usr/share/games/fortunes\nmode: sync\npipeline_stages: 2\n"
             "microbatches: 2\nsteps: %d\ncodec: int8\nbucket_mb: 0.05\nthreads: 1\n"
             "timeouts: {rendezvous: 30s, operation: 30s}\n",
             cwd, steps);
    xdc_test_write_file(path, text);
    return path;
}
