/* test_run_util.c — run and topology files shared by the launch tests (test_run_util.h). */
#include "tests/test_run_util.h"

#include "tests/xdc_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

const char *test_write_gpu_topology(int gpus)
{
    static char path[512];
    char src[256],
        *text = xdc_test_read_file(xdc_test_src("examples/topology/demo-2region.yaml", src, sizeof src), NULL),
        out[8192];
    XDC_ASSERT(text != NULL);
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line && n < sizeof out - 200; line = strtok(NULL, "\n")) {
        if (strstr(line, "workers_per_node:")) continue;
        if (strstr(line, "gpus_per_node:"))
            n += (size_t)snprintf(out + n, sizeof out - n, "    gpus_per_node: %d\n", gpus);
        else n += (size_t)snprintf(out + n, sizeof out - n, "%s\n", line);
    }
    free(text);
    snprintf(path, sizeof path, "%s/gpus-%d.yaml", xdc_test_tmpdir(), gpus);
    xdc_test_write_file(path, out);
    return path;
}
