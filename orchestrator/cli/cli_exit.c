/* cli_exit.c — the one place an xdc_err_t becomes the sysexits(3) code a command ends with. Below cli/,
 * code returns xdc_err_t; only commands speak exit codes. */
#include "orchestrator/cli/xdc_cli.h"

/* No default: a code added to common/xdc_err.h without an exit code here is a -Wswitch error. */
int xdc_cli_exit_code(xdc_err_t err)
{
    switch (err) {
    case XDC_OK: return XDC_EX_OK;
    case XDC_ERR_INVALID: return XDC_EX_USAGE;
    case XDC_ERR_NOMEM: return XDC_EX_OSERR;
    case XDC_ERR_IO: return XDC_EX_IOERR;
    case XDC_ERR_CONFIG: return XDC_EX_CONFIG;
    case XDC_ERR_PROTO: return XDC_EX_PROTOCOL;
    case XDC_ERR_CORRUPT:
    case XDC_ERR_RANGE: return XDC_EX_DATAERR;
    case XDC_ERR_TIMEOUT:
    case XDC_ERR_AGAIN:
    case XDC_ERR_INTERRUPTED: return XDC_EX_TEMPFAIL;
    case XDC_ERR_CLOSED:
    case XDC_ERR_UNAVAILABLE:
    case XDC_ERR_PEER_LOST:
    case XDC_ERR_TLS:
    case XDC_ERR_UNSUPPORTED: return XDC_EX_UNAVAILABLE;
    case XDC_ERR_AUTH: return XDC_EX_NOPERM;
    case XDC_ERR_CUDA:
    case XDC_ERR_NCCL:
    case XDC_ERR_INTERNAL: return XDC_EX_SOFTWARE;
    }
    return XDC_EX_SOFTWARE;
}

int xdc_cli_run_exit_code(xdc_err_t err, int child_exit)
{
    return err != XDC_OK && child_exit > 0 ? child_exit : xdc_cli_exit_code(err);
}
