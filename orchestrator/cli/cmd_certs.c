/* cmd_certs.c — `xdc certs init|issue|request|sign|revoke`: the cluster CA, node certificates whose SAN URI
 * xdc://RUN/REGION/RANK is the identity the WAN transport checks, and the per-node path where each node
 * makes its own key (request), the CA host signs its request (sign) and can revoke it (revoke). */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_parse.h"

#include "wan/xdc_wan_certs.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static int certs_usage(FILE *f)
{
    fprintf(f, "usage: xdc certs init    --dir D [--run ID] [--days N]\n"
               "       xdc certs issue   --dir D --region R --rank N [--run ID] [--days N]\n"
               "       xdc certs request --dir D --run ID --region R --rank N [--host H]\n"
               "       xdc certs sign    --dir CA_DIR --csr FILE --out CERT [--days N]\n"
               "       xdc certs revoke  --dir CA_DIR (--cert FILE | --serial HEX)\n"
               "  init     create D/ca.pem, D/ca.key (EC P-256 CA) and D/crl.pem (empty); never replaces them\n"
               "  issue    create D/R-N.pem and D/R-N.key signed by the CA in D, naming xdc://RUN/R/N (RUN defaults\n"
               "           to the CA's run); the key is made on the CA host: for `xdc launch` on one machine\n"
               "  request  on the node: create its own key D/R-N.key (mode 0600, never leaves the node) and the\n"
               "           request D/R-N.csr naming xdc://ID/R/N; H (default: this host's name) is recorded in the CN\n"
               "  sign     on the CA host: check the request (its signature, one SAN URI of the CA's run, no other\n"
               "           extension, an accepted key) and write the certificate to CERT; prints its serial\n"
               "  revoke   on the CA host: add the certificate's serial to CA_DIR/crl.pem (created when absent);\n"
               "           copy crl.pem to the nodes (--crl, XDC_CRL) so that new handshakes refuse it\n"
               "  --days defaults to 365 (CA: 3650). A refused request exits 65, a missing or unreadable CA 78.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

typedef enum { CERTS_INIT, CERTS_ISSUE, CERTS_REQUEST, CERTS_SIGN, CERTS_REVOKE, CERTS_N } certs_cmd;
static const char *const CERTS_NAMES[CERTS_N] = {"init", "issue", "request", "sign", "revoke"};

typedef struct {
    xdc_wan_cert_opts o;
    const char *csr, *out, *cert, *serial;
} certs_args;

/* What each subcommand needs beyond --dir; NULL when complete. */
static const char *certs_missing(certs_cmd cmd, const certs_args *a)
{
    switch (cmd) {
    case CERTS_INIT: return NULL;
    case CERTS_ISSUE: return a->o.region && a->o.rank >= 0 ? NULL : "--region and --rank are required";
    case CERTS_REQUEST:
        return a->o.region && a->o.rank >= 0 && a->o.run ? NULL : "--run, --region and --rank are required";
    case CERTS_SIGN: return a->csr && a->out ? NULL : "--csr and --out are required";
    case CERTS_REVOKE: return (!a->cert) != (!a->serial) ? NULL : "exactly one of --cert and --serial is required";
    case CERTS_N: break;
    }
    return "unknown subcommand";
}

static xdc_err_t certs_do(certs_cmd cmd, certs_args *a, xdc_diag *d)
{
    char p1[1024], p2[1024];
    xdc_err_t rc = XDC_ERR_INVALID;
    switch (cmd) {
    case CERTS_INIT:
        if ((rc = xdc_wan_cert_init_ca(&a->o, d)) == XDC_OK)
            printf("created %s/ca.pem, ca.key and crl.pem (run %s)\n", a->o.dir, a->o.run ? a->o.run : "run");
        break;
    case CERTS_ISSUE:
        if ((rc = xdc_wan_cert_issue(&a->o, p1, sizeof p1, p2, sizeof p2, d)) == XDC_OK)
            printf("created %s and %s for %s/%d\n", p1, p2, a->o.region, a->o.rank);
        break;
    case CERTS_REQUEST:
        if ((rc = xdc_wan_cert_request(&a->o, p1, sizeof p1, p2, sizeof p2, d)) == XDC_OK)
            printf("created %s (keep it here) and %s (send it to the CA host: xdc certs sign --csr)\n", p2, p1);
        break;
    case CERTS_SIGN: {
        xdc_wan_cert_issued got;
        if ((rc = xdc_wan_cert_sign(&a->o, a->csr, a->out, &got, d)) == XDC_OK)
            printf("signed %s: xdc://%s/%s/%d%s%s, serial %s, %d days\n", a->out, got.id.run, got.id.region,
                   got.id.rank, got.host[0] ? " requested from host " : "", got.host, got.serial, a->o.days);
        break;
    }
    case CERTS_REVOKE: {
        int already = 0;
        if ((rc = xdc_wan_cert_revoke(a->o.dir, a->cert, a->serial, &already, p1, sizeof p1, d)) == XDC_OK)
            printf("%s serial %s in %s/crl.pem\n", already ? "already revoked:" : "revoked", p1, a->o.dir);
        break;
    }
    case CERTS_N: break;
    }
    return rc;
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
    certs_cmd cmd = CERTS_INIT;
    while (cmd < CERTS_N && strcmp(argv[1], CERTS_NAMES[cmd]) != 0) cmd++;
    if (cmd == CERTS_N) {
        fprintf(stderr, "xdc certs: unknown subcommand '%s'\n", argv[1]);
        return certs_usage(stderr);
    }
    static const struct option opts[] = {
        {"dir", required_argument, NULL, 'd'},    {"run", required_argument, NULL, 'r'},
        {"region", required_argument, NULL, 'g'}, {"rank", required_argument, NULL, 'k'},
        {"days", required_argument, NULL, 'n'},   {"host", required_argument, NULL, 'H'},
        {"csr", required_argument, NULL, 'q'},    {"out", required_argument, NULL, 'o'},
        {"cert", required_argument, NULL, 'c'},   {"serial", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
    };
    certs_args a = {.o = {.days = cmd == CERTS_INIT ? 3650 : 365, .rank = -1}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': a.o.dir = optarg; break;
        case 'r': a.o.run = optarg; break;
        case 'g': a.o.region = optarg; break;
        case 'H': a.o.host = optarg; break;
        case 'q': a.csr = optarg; break;
        case 'o': a.out = optarg; break;
        case 'c': a.cert = optarg; break;
        case 's': a.serial = optarg; break;
        case 'k':
            if (parse_int("--rank", optarg, 0, 1000000, &a.o.rank)) return XDC_EX_USAGE;
            break;
        case 'n':
            if (parse_int("--days", optarg, 1, 36500, &a.o.days)) return XDC_EX_USAGE;
            break;
        case 'h': return certs_usage(stdout);
        default: return certs_usage(stderr);
        }
    }
    const char *missing = optind != argc - 1 ? "unexpected argument"
                          : !a.o.dir         ? "--dir is required"
                                             : certs_missing(cmd, &a);
    if (missing) {
        fprintf(stderr, "xdc certs %s: %s\n", argv[1], missing);
        return XDC_EX_USAGE;
    }
    xdc_diag d = {{0}};
    xdc_err_t rc = certs_do(cmd, &a, &d);
    if (rc != XDC_OK) {
        fprintf(stderr, "xdc certs %s: %s\n", argv[1], d.msg[0] ? d.msg : xdc_strerror(rc));
        return xdc_cli_exit_code(rc);
    }
    return XDC_EX_OK;
}
