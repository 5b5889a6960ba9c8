/* cmd_worker.c — `xdc worker`: option parsing for the worker runtime (orchestrator/worker/xdc_worker.h),
 * started by `xdc agent`, one per worker slot; the runtime's error becomes the exit code. */
#include "orchestrator/cli/xdc_cli.h"

#include "orchestrator/worker/xdc_worker.h"

#include <getopt.h>
#include <stdio.h>

static int worker_usage(FILE *f)
{
    fprintf(f, "usage: xdc worker --topology FILE --config RUN.yaml --run-dir DIR [--emulate-wan] [--resume]\n"
               "                  [--device cpu|cuda|cpu-strict] [--cert-dir DIR] [--ca FILE] [--crl FILE]\n"
               "                  [--rdzv URL] [--etcd-cacert F --etcd-cert F --etcd-key F]\n"
               "  Started by `xdc agent`, one per worker slot; reads its identity from the environment contract\n"
               "  (RANK, WORLD_SIZE, LOCAL_RANK, XDC_REGION, XDC_REGION_INDEX, XDC_NUM_REGIONS, XDC_GLOBAL_RANK,\n"
               "  XDC_GLOBAL_WORLD_SIZE, XDC_RUN_ID, XDC_COORDINATOR, XDC_HOST, ...; see docs/observability.md).\n"
               "  --device: as for `xdc agent` (default XDC_DEVICE, else the topology); on CUDA, LOCAL_RANK picks\n"
               "  the GPU among the visible ones (CUDA_VISIBLE_DEVICES).\n"
               "  --cert-dir, --ca, --crl: its key and certificate (DIR/REGION-RANK.key, .pem), the CA certificate\n"
               "  and revocation list, as for `xdc agent` (default XDC_CERT_DIR, XDC_CA, XDC_CRL, else "
               "RUN/certs).\n" XDC_CLI_RDZV_USAGE);
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

int xdc_cmd_worker(int argc, char **argv)
{
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"run-dir", required_argument, NULL, 'd'},
                                         {"emulate-wan", no_argument, NULL, 'e'},
                                         {"resume", no_argument, NULL, 'r'},
                                         {"device", required_argument, NULL, 'D'},
                                         {"help", no_argument, NULL, 'h'},
                                         XDC_CLI_RDZV_OPTIONS,
                                         XDC_CLI_CREDS_OPTIONS,
                                         {NULL, 0, NULL, 0}};
    xdc_worker_opts o = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:c:d:erD:h", opts, NULL)) != -1) {
        if (xdc_cli_rdzv_flag(c, optarg, &o.rdzv) || xdc_cli_creds_flag(c, optarg, &o.creds)) continue;
        switch (c) {
        case 't': o.topology_path = optarg; break;
        case 'c': o.config_path = optarg; break;
        case 'd': o.run_dir = optarg; break;
        case 'e': o.emulate_wan = 1; break;
        case 'r': o.resume = 1; break;
        case 'D': o.device = optarg; break;
        case 'h': return worker_usage(stdout);
        default: return worker_usage(stderr);
        }
    }
    if (!o.topology_path || !o.config_path || !o.run_dir || !o.run_dir[0] || optind != argc)
        return worker_usage(stderr);
    int ex = xdc_cli_device_option("worker", o.device, NULL);
    if (ex != 0) return ex;
    xdc_diag d = {{0}};
    xdc_err_t rc = xdc_worker_run(&o, &d);
    if (rc != XDC_OK && d.msg[0]) fprintf(stderr, "xdc worker: %s\n", d.msg);
    return xdc_cli_exit_code(rc);
}
