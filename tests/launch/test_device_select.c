/* test_device_select.c — which device a region's workers run on (orchestrator/launch/orch_device.h,
 * docs/runtime.md "Devices"): the rule itself (override, topology, GPUs needed, the node check with a
 * fake registry) and the device words against the kernel registry's (tests/e2e/test_device_launch.c:
 * the same through `xdc launch|agent|worker`). */
#include "tests/xdc_test.h"
#include "tests/test_run_util.h"

#include "kernels/xdc_kernels.h"
#include "orchestrator/launch/orch_device.h"
#include "topology/xdc_topology.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TOPO "examples/topology/demo-2region.yaml"

static xdc_topology *load_topo(const char *path)
{
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    XDC_ASSERT_MSG(xdc_topology_load(path, &t, &errs) == XDC_OK, "cannot load %s", path);
    return t;
}

static int fake_visible;
static xdc_err_t fake_refusal = XDC_OK;
static int fake_cuda_devices(void) { return fake_visible; }
static xdc_err_t fake_kernels(orch_device d, xdc_diag *diag)
{
    if (d == ORCH_DEVICE_CPU || fake_refusal == XDC_OK) return XDC_OK;
    xdc_diag_set(diag, "fake registry says no to %s", orch_device_name(d));
    return fake_refusal;
}
static const orch_device_probe fake_probe = {.cuda_devices = fake_cuda_devices, .kernels = fake_kernels};

XDC_TEST(orch_device_names_are_the_kernel_registry)
{
    /* launch/ may not ask kernels/, so it keeps its own words; they must be the registry's. */
    const orch_device all[] = {ORCH_DEVICE_CPU, ORCH_DEVICE_CUDA, ORCH_DEVICE_CPU_STRICT};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        xdc_backend_kind k;
        XDC_ASSERT_OK(xdc_backend_parse(orch_device_name(all[i]), &k));
        XDC_ASSERT_EQ(k, all[i]);
        XDC_ASSERT_MSG(strcmp(xdc_backend_name(k), orch_device_name(all[i])) == 0, "%s vs %s", xdc_backend_name(k),
                       orch_device_name(all[i]));
        orch_device back;
        XDC_ASSERT_EQ(orch_device_parse(xdc_backend_name(k), &back), 0);
        XDC_ASSERT_EQ(back, all[i]);
    }
    orch_device d;
    XDC_ASSERT_EQ(orch_device_parse("gpu", &d), -1);
    XDC_ASSERT_EQ(orch_device_parse("topology", &d), -1);
}

XDC_TEST(orch_device_flag_beats_env_beats_topology)
{
    orch_device d;
    const char *from;
    xdc_diag diag = {{0}};
    unsetenv("XDC_DEVICE");
    XDC_ASSERT_OK(orch_device_override(NULL, &d, &from, &diag));
    XDC_ASSERT_EQ(d, ORCH_DEVICE_TOPOLOGY);
    XDC_ASSERT_STR_CONTAINS(from, "topology");
    setenv("XDC_DEVICE", "cpu-strict", 1);
    XDC_ASSERT_OK(orch_device_override(NULL, &d, &from, &diag));
    XDC_ASSERT_EQ(d, ORCH_DEVICE_CPU_STRICT);
    XDC_ASSERT_STR_CONTAINS(from, "XDC_DEVICE");
    XDC_ASSERT_OK(orch_device_override("cuda", &d, &from, &diag));
    XDC_ASSERT_EQ(d, ORCH_DEVICE_CUDA);
    XDC_ASSERT_STR_CONTAINS(from, "--device");
    setenv("XDC_DEVICE", "bogus", 1);
    XDC_ASSERT_ERR(orch_device_override(NULL, &d, &from, &diag), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "XDC_DEVICE='bogus'");
    XDC_ASSERT_OK(orch_device_override("cpu", &d, &from, &diag)); /* the flag wins over a bad variable */
    XDC_ASSERT_EQ(d, ORCH_DEVICE_CPU);
    XDC_ASSERT_ERR(orch_device_override("tpu", &d, &from, &diag), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "--device 'tpu'");
    unsetenv("XDC_DEVICE");

    char src[256];
    xdc_topology *cpu = load_topo(xdc_test_src(TOPO, src, sizeof src)), *gpu = load_topo(test_write_gpu_topology(2));
    XDC_ASSERT_EQ(orch_device_of_region(ORCH_DEVICE_TOPOLOGY, cpu, 0), ORCH_DEVICE_CPU);
    XDC_ASSERT_EQ(orch_device_of_region(ORCH_DEVICE_TOPOLOGY, gpu, 1), ORCH_DEVICE_CUDA);
    XDC_ASSERT_EQ(orch_device_of_region(ORCH_DEVICE_CPU, gpu, 1), ORCH_DEVICE_CPU);
    XDC_ASSERT_EQ(orch_device_of_region(ORCH_DEVICE_CUDA, cpu, 0), ORCH_DEVICE_CUDA);
    XDC_ASSERT_EQ(orch_device_gpus_needed(ORCH_DEVICE_CUDA, gpu, 0), 2);
    XDC_ASSERT_EQ(orch_device_gpus_needed(ORCH_DEVICE_CUDA, cpu, 0), 2); /* one per worker */
    XDC_ASSERT_EQ(orch_device_gpus_needed(ORCH_DEVICE_CPU, gpu, 0), 0);
    XDC_ASSERT_EQ(orch_device_gpus_needed(ORCH_DEVICE_CPU_STRICT, gpu, 0), 0);
    XDC_ASSERT(orch_device_uses_nccl(ORCH_DEVICE_CUDA) && !orch_device_uses_nccl(ORCH_DEVICE_CPU) &&
               !orch_device_uses_nccl(ORCH_DEVICE_CPU_STRICT));
    char desc[64];
    orch_device_describe(ORCH_DEVICE_CUDA, 1, desc, sizeof desc);
    XDC_ASSERT_STR_CONTAINS(desc, "cuda:1 (NCCL intra)");
    orch_device_describe(ORCH_DEVICE_CPU, -1, desc, sizeof desc);
    XDC_ASSERT_STR_CONTAINS(desc, "cpu (shared-memory intra)");
    xdc_topology_destroy(cpu);
    xdc_topology_destroy(gpu);
}

XDC_TEST(orch_device_node_check_names_node_expected_and_found)
{
    xdc_topology *gpu = load_topo(test_write_gpu_topology(2));
    xdc_diag diag = {{0}};
    fake_visible = 1;
    fake_refusal = XDC_OK;
    XDC_ASSERT_ERR(orch_device_check_node(ORCH_DEVICE_CUDA, "the topology", gpu, 1, "west-node1", &fake_probe, &diag),
                   XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "node eu-west/west-node1");
    XDC_ASSERT_STR_CONTAINS(diag.msg, "expected 2 GPUs");
    XDC_ASSERT_STR_CONTAINS(diag.msg, "gpus_per_node: 2");
    XDC_ASSERT_STR_CONTAINS(diag.msg, "found 1 visible");
    fake_visible = 2;
    XDC_ASSERT_OK(orch_device_check_node(ORCH_DEVICE_CUDA, "the topology", gpu, 1, "west-node1", &fake_probe, &diag));
    XDC_ASSERT_OK(orch_device_check_node(ORCH_DEVICE_CPU, "--device", gpu, 1, "west-node1", &fake_probe, &diag));
    /* The registry's refusal passes through with its own error and message, the device and node named. */
    fake_refusal = XDC_ERR_UNSUPPORTED;
    XDC_ASSERT_ERR(orch_device_check_node(ORCH_DEVICE_CPU_STRICT, "--device", gpu, 0, "east-node1", &fake_probe, &diag),
                   XDC_ERR_UNSUPPORTED);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "node us-east/east-node1: device cpu-strict (from --device)");
    XDC_ASSERT_STR_CONTAINS(diag.msg, "fake registry says no to cpu-strict");
    fake_visible = 0; /* too few GPUs and a refusing registry: the count first, the registry's reason after */
    XDC_ASSERT_ERR(orch_device_check_node(ORCH_DEVICE_CUDA, "the topology", gpu, 0, "east-node1", &fake_probe, &diag),
                   XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(diag.msg, "found 0 visible CUDA devices: fake registry says no to cuda");
    XDC_ASSERT_OK(orch_device_check_node(ORCH_DEVICE_CUDA, "the topology", gpu, 0, "east-node1", NULL, &diag));
    xdc_topology_destroy(gpu);
}
