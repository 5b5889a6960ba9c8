/* cmd_topo.c — `xdc topo check FILE [--json]` (placeholder until topology/ lands). */
#include "orchestrator/xdc_cli.h"

int xdc_cmd_topo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return XDC_EX_SOFTWARE;
}
