/* cmd_agent.c — `xdc agent`: the options of the node agent (orchestrator/launch/orch_agent.c) and its
 * exit code: a failed worker's (or --exec program's) own status, else the sysexits code of the error. */
#include "orchestrator/cli/xdc_cli.h"

#include "orchestrator/launch/orch_agent.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static int agent_usage(FILE *f)
{
    fprintf(
        f,
        "usage: xdc agent --topology FILE --config RUN.yaml --run-dir DIR [--region NAME] [--node N] [--host NAME]\n"
        "                 [--coordinator HOST:PORT] [--run-id ID] [--emulate-wan] [--resume]\n"
        "                 [--device cpu|cuda|cpu-strict] [--rdzv URL] [--etcd-cacert F --etcd-cert F --etcd-key F]\n"
        "                 [--cert-dir DIR] [--ca FILE] [--crl FILE] [--exec -- PROG [ARGS...]]\n"
        "  Starts this node's workers. Identity comes from the flags, then XDC_* variables, torchrun, Open MPI,\n"
        "  PMIx/PMI and Slurm (SLURM_NODEID, SLURM_JOB_NODELIST), then this host's place in the topology;\n"
        "  the log says which source gave each value.\n"
        "  --exec -- PROG ARGS  each worker slot runs PROG (a program on libxdc, docs/api.md) instead of\n"
        "            `xdc worker`, with the same environment contract plus XDC_TOPOLOGY XDC_CONFIG XDC_RUN_DIR\n"
        "            XDC_EMULATE_WAN XDC_CERT_DIR XDC_CA XDC_CRL; supervised and named as workers are\n"
        "  --device  run the workers on this device (default: XDC_DEVICE, else the topology: CUDA with NCCL\n"
        "            where gpus_per_node > 0, the CPU otherwise); the node's GPUs are checked before any starts\n"
        "  --cert-dir  this node's own keys and certificates, REGION-RANK.key and .pem for each of its workers\n"
        "            (`xdc certs request` here, `xdc certs sign` on the CA host); default XDC_CERT_DIR, else\n"
        "            RUN_DIR/certs. No other node's key and not the CA's key is needed.\n"
        "  --ca      the cluster CA certificate (default XDC_CA, else CERT_DIR/ca.pem)\n"
        "  --crl     the CA's revocation list (default XDC_CRL, else crl.pem beside the CA certificate if "
        "present)\n" XDC_CLI_RDZV_USAGE "  with etcd, --coordinator may be left out: etcd's HOST:PORT stands for it\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

/* 0 when the options are complete; else the exit code (-1: --help printed, exit 0). */
static int agent_parse(int argc, char **argv, orch_agent_opts *o)
{
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"run-dir", required_argument, NULL, 'd'},
                                         {"region", required_argument, NULL, 'r'},
                                         {"node", required_argument, NULL, 'n'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"coordinator", required_argument, NULL, 'k'},
                                         {"run-id", required_argument, NULL, 'i'},
                                         {"emulate-wan", no_argument, NULL, 'e'},
                                         {"resume", no_argument, NULL, 'R'},
                                         {"device", required_argument, NULL, 'D'},
                                         {"exec", no_argument, NULL, 'x'},
                                         {"help", no_argument, NULL, 'h'},
                                         XDC_CLI_RDZV_OPTIONS,
                                         XDC_CLI_CREDS_OPTIONS,
                                         {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    int c, exec = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:c:d:r:n:H:k:i:eRD:h", opts, NULL)) != -1) {
        if (xdc_cli_rdzv_flag(c, optarg, &o->rdzv) || xdc_cli_creds_flag(c, optarg, &o->creds)) continue;
        switch (c) {
        case 't': o->topology = optarg; break;
        case 'c': o->config = optarg; break;
        case 'd': o->run_dir = optarg; break;
        case 'r': o->id.value[ORCH_ID_REGION] = optarg; break;
        case 'n': o->id.value[ORCH_ID_NODE] = optarg; break;
        case 'H': o->id.value[ORCH_ID_HOST] = optarg; break;
        case 'k': o->id.value[ORCH_ID_COORDINATOR] = optarg; break;
        case 'i': o->id.value[ORCH_ID_RUN_ID] = optarg; break;
        case 'e': o->emulate_wan = 1; break;
        case 'R': o->resume = 1; break;
        case 'D': o->device = optarg; break;
        case 'x': exec = 1; break;
        case 'h': agent_usage(stdout); return -1;
        default: return agent_usage(stderr);
        }
    }
    if (!o->topology || !o->config || !o->run_dir) return agent_usage(stderr);
    if (xdc_cli_exec_tail("agent", exec, argc, argv, optind, &o->exec_argv) != 0) return agent_usage(stderr);
    o->probe = orch_member_device_probe();
    return xdc_cli_device_option("agent", o->device, NULL);
}

int xdc_cmd_agent(int argc, char **argv)
{
    orch_agent_opts o;
    int ex = agent_parse(argc, argv, &o);
    if (ex != 0) return ex < 0 ? XDC_EX_OK : ex;
    xdc_diag d = {{0}};
    int worker_exit = 0;
    xdc_err_t rc = orch_agent_run(&o, &worker_exit, &d);
    if (rc != XDC_OK && d.msg[0]) fprintf(stderr, "xdc agent: %s\n", d.msg);
    return xdc_cli_run_exit_code(rc, worker_exit);
}
