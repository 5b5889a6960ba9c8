/* cli_device.c — `--device` for launch, agent and worker: the word (and XDC_DEVICE) checked before
 * anything starts, and the kernel registry's answers for the node check (orchestrator/launch/
 * orch_device.h), which launch/ may not ask itself. */
#include "orchestrator/cli/xdc_cli.h"

#include "kernels/xdc_kernels.h"

#include <stdio.h>

_Static_assert((int)ORCH_DEVICE_CPU == (int)XDC_BACKEND_CPU && (int)ORCH_DEVICE_CUDA == (int)XDC_BACKEND_CUDA &&
                   (int)ORCH_DEVICE_CPU_STRICT == (int)XDC_BACKEND_CPU_STRICT,
               "orch_device and xdc_backend_kind share their values");

static xdc_err_t registry_kernels(orch_device d, xdc_diag *diag)
{
    const xdc_kern_backend *be;
    return xdc_kern_backend_get((xdc_backend_kind)d, &be, diag);
}

static const orch_device_probe registry_probe = {.cuda_devices = xdc_kern_cuda_device_count,
                                                 .kernels = registry_kernels};

const orch_device_probe *xdc_cli_device_probe(void) { return &registry_probe; }

int xdc_cli_device_option(const char *cmd, const char *flag, const char **word)
{
    orch_device d;
    const char *source;
    xdc_diag diag = {{0}};
    if (orch_device_override(flag, &d, &source, &diag) != XDC_OK) {
        fprintf(stderr, "xdc %s: %s\n", cmd, diag.msg);
        return XDC_EX_USAGE;
    }
    if (word) *word = d == ORCH_DEVICE_TOPOLOGY ? NULL : orch_device_name(d);
    return 0;
}
