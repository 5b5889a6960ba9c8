/* test_bench_gpu_cpu.c — bench/gpu/bench_gpu's modes run on the CPU backend with tiny sizes, so a wrong
 * argument, a crash or a missing figure shows here and not in the GPU window (tests/gpu/run.sh calls the
 * same modes on CUDA). Only the shape of the output is checked: every mode exits 0 and prints the key=value
 * lines run.sh picks up; the ops mode prints every op family and a sum of the ops that is not more than
 * the step it was measured in (both device times of the same events: on the CPU backend, host clock
 * readings taken after each op ran). */
#include "tests/xdc_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Runs bench_gpu (beside the xdc under test) with `args`; skips when it was not built. */
static int bench(const char *args, char *out, size_t cap)
{
    char dir[1024], bin[1100], cmd[2048];
    snprintf(dir, sizeof dir, "%s", xdc_test_bin());
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    snprintf(bin, sizeof bin, "%s/bench_gpu", slash ? dir : ".");
    if (access(bin, X_OK) != 0) xdc_test_skip("%s not built (make all builds it)", bin);
    snprintf(cmd, sizeof cmd, "'%s' %s", bin, args);
    int rc = xdc_test_run(cmd, out, cap);
    printf("$ bench_gpu %s\n%s", args, out);
    return rc;
}

XDC_TEST_T(bench_gpu_modes_run_on_the_cpu_backend, 60)
{
    char out[8192], cfg[512];
    xdc_test_src("examples/models/tiny.yaml", cfg, sizeof cfg);

    /* ops: every family, forward and backward, and the step total. */
    char args[1024];
    snprintf(args, sizeof args, "ops '%s' --steps 2 --backend cpu", cfg);
    XDC_ASSERT_EQ(bench(args, out, sizeof out), 0);
    const char *families[] = {"gemm",    "attention", "layernorm", "gelu", "softmax_ce",
                              "encoder", "residual",  "adamw",     "sumsq"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\ngpu_op %s ", families[i]);
        XDC_ASSERT_STR_CONTAINS(out, want);
    }
    XDC_ASSERT_STR_CONTAINS(out, "ops_per_step=50 "); /* 2 + 10·L forward + 4 + 10·L backward + 2, L = 2 */
    const char *sum = strstr(out, "ops_sum_ms=");
    double ops_ms = -1, step_ms = -1;
    XDC_ASSERT(sum && sscanf(sum, "ops_sum_ms=%lf step_ms=%lf", &ops_ms, &step_ms) == 2);
    XDC_ASSERT_MSG(ops_ms > 0 && ops_ms <= step_ms * 1.001 + 0.01, "ops %g ms, step %g ms", ops_ms, step_ms);

    /* gemm: the peak line, and the bf16 figure said to be absent rather than made up. */
    XDC_ASSERT_EQ(bench("gemm --size 48 --backend cpu", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "gpu_gemm peak_fp32_tflops=");
    XDC_ASSERT_STR_CONTAINS(out, "bf16=none");
    XDC_ASSERT_STR_CONTAINS(out, "gpu_gemm fp32 gpt2 lmhead ");

    /* codec and model: their last lines. */
    XDC_ASSERT_EQ(bench("codec --mib 1 --backend cpu", out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "gpu_codec memcpy_gbs=");
    XDC_ASSERT_STR_CONTAINS(out, "gpu_codec int4_gbs=");
    snprintf(args, sizeof args, "model '%s' --steps 1 --backend cpu", cfg);
    XDC_ASSERT_EQ(bench(args, out, sizeof out), 0);
    XDC_ASSERT_STR_CONTAINS(out, "gpu_model tokens_per_s=");

    /* The usage names every mode (run.sh asks it which modes exist); a wrong option is a usage error. */
    XDC_ASSERT_EQ(bench("", out, sizeof out), 64);
    XDC_ASSERT_STR_CONTAINS(out, "bench_gpu ops ");
    XDC_ASSERT_STR_CONTAINS(out, "bench_gpu gemm ");
    XDC_ASSERT_EQ(bench("gemm --sizes 48 --backend cpu", out, sizeof out), 64);
}
