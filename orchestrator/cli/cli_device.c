/* cli_device.c — `--device` for launch, agent and worker: the word (and XDC_DEVICE) checked before
 * anything starts. */
#include "orchestrator/cli/xdc_cli.h"

#include <stdio.h>

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
