/* cmd_certs.c — `xdc certs init|issue`: the cluster CA and per-node certificates whose SAN URI
 * xdc://RUN/REGION/RANK is the identity the WAN transport checks. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_parse.h"

#include "wan/xdc_wan_certs.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int certs_usage(FILE *f)
{
    fprintf(f, "usage: xdc certs init  --dir D [--run ID] [--days N]\n"
               "       xdc certs issue --dir D --region R --rank N [--run ID] [--days N]\n"
               "  init   create D/ca.pem and D/ca.key (EC P-256 cluster CA; refuses to replace one)\n"
               "  issue  create D/R-N.pem and D/R-N.key signed by the CA in D, naming xdc://RUN/R/N\n"
               "         (RUN defaults to the CA's run). --days defaults to 365 (CA: 3650).\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

static int parse_int(const char *flag, const char *text, long lo, long hi, int *out)
{
    xdc_diag d;
    if (xdc_parse_int(text, (int)lo, (int)hi, out, &d) != XDC_OK) {
        fprintf(stderr, "xdc certs: %s: %s\n", flag, d.msg);
        return -1;
    }
    return 0;
}

int xdc_cmd_certs(int argc, char **argv)
{
    if (argc < 2) return certs_usage(stderr);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return certs_usage(stdout);
    int init = strcmp(argv[1], "init") == 0;
    if (!init && strcmp(argv[1], "issue") != 0) {
        fprintf(stderr, "xdc certs: unknown subcommand '%s'\n", argv[1]);
        return certs_usage(stderr);
    }
    static const struct option opts[] = {
        {"dir", required_argument, NULL, 'd'},
        {"run", required_argument, NULL, 'r'},
        {"region", required_argument, NULL, 'g'},
        {"rank", required_argument, NULL, 'k'},
        {"days", required_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    xdc_wan_cert_opts o = {.days = init ? 3650 : 365, .rank = -1};
    int c;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': o.dir = optarg; break;
        case 'r': o.run = optarg; break;
        case 'g': o.region = optarg; break;
        case 'k':
            if (parse_int("--rank", optarg, 0, 1000000, &o.rank)) return XDC_EX_USAGE;
            break;
        case 'n':
            if (parse_int("--days", optarg, 1, 36500, &o.days)) return XDC_EX_USAGE;
            break;
        case 'h': return certs_usage(stdout);
        default: return certs_usage(stderr);
        }
    }
    if (optind != argc - 1 || !o.dir || (!init && (!o.region || o.rank < 0))) {
        fprintf(stderr, "xdc certs %s: %s\n", argv[1],
                !o.dir ? "--dir is required"
                : init ? "unexpected argument"
                       : "--region and --rank are required");
        return XDC_EX_USAGE;
    }
    xdc_diag d = {{0}};
    xdc_err_t rc;
    if (init) {
        rc = xdc_wan_cert_init_ca(&o, &d);
        if (rc == XDC_OK) printf("created %s/ca.pem and %s/ca.key (run %s)\n", o.dir, o.dir, o.run ? o.run : "run");
    } else {
        char cert[1024], key[1024];
        rc = xdc_wan_cert_issue(&o, cert, sizeof cert, key, sizeof key, &d);
        if (rc == XDC_OK) printf("created %s and %s for %s/%d\n", cert, key, o.region, o.rank);
    }
    if (rc != XDC_OK) {
        fprintf(stderr, "xdc certs %s: %s\n", argv[1], d.msg[0] ? d.msg : xdc_strerror(rc));
        return xdc_cli_exit_code(rc);
    }
    return XDC_EX_OK;
}
