/* cli_rdzv.c — the rendezvous and credential options shared by launch, agent and worker (xdc_cli.h). */
#include "orchestrator/cli/xdc_cli.h"

int xdc_cli_rdzv_flag(int c, const char *arg, rdzv_flags *f)
{
    const char **slot[] = {&f->rdzv, &f->cacert, &f->cert, &f->key};
    if (c < XDC_CLI_RDZV_OPT || c > XDC_CLI_RDZV_OPT + 3) return 0;
    *slot[c - XDC_CLI_RDZV_OPT] = arg;
    return 1;
}

int xdc_cli_creds_flag(int c, const char *arg, orch_creds_flags *f)
{
    const char **slot[] = {&f->cert_dir, &f->ca, &f->crl};
    if (c < XDC_CLI_CREDS_OPT || c > XDC_CLI_CREDS_OPT + 2) return 0;
    *slot[c - XDC_CLI_CREDS_OPT] = arg;
    return 1;
}
