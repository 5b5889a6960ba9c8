/* cmd_doctor.c — `xdc doctor`: the pre-flight check of a node (orchestrator/doctor/orch_doctor.h), the
 * probe server every region runs for it (`--serve`), and the one-machine mode through the emulator's
 * relays (`--emulate`). Exit 0 only when every check passed; 69 when one failed. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_alloc.h"
#include "common/xdc_parse.h"
#include "common/xdc_time.h"
#include "orchestrator/doctor/orch_doctor.h"
#include "orchestrator/runcfg/orch_run_config.h"
#include "wan/xdc_wan_certs.h"

#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DOCTOR_MAX_STOPPED 16
#define DOCTOR_MAX_PORTS   64

static int doctor_usage(FILE *f)
{
    fprintf(f, "usage: xdc doctor -t TOPO --certs DIR [--region R] [-c RUN] [--json] [--write-topology FILE]\n"
               "                  [--endpoint REGION=HOST:PORT]... [--rdzv HOST:PORT|etcd://...] [--etcd-cacert F "
               "--etcd-cert F --etcd-key F] [--port P]...\n"
               "                  [--node N] [--device D] [--pings N] [--probe-seconds S] [--probe-bytes N]\n"
               "       xdc doctor --serve -t TOPO --certs DIR --region R [--listen HOST:PORT (0: any)] [--duration S]\n"
               "       xdc doctor --emulate -t TOPO --certs DIR [--emulate-links TOPO2] [--stop REGION]... [...]\n"
               "  Checks this node of region R (--region, else XDC_REGION) before a run: every region its region\n"
               "  links to reachable at its wan_endpoint (or --endpoint), the TLS handshake and identity, RTT,\n"
               "  clock offset, bandwidth and path MTU per link against the topology (more than 2x off fails),\n"
               "  this node's GPUs, the ports the run binds (metrics ports of -c RUN for node N, --port) and the\n"
               "  rendezvous (--rdzv, else XDC_RDZV, else XDC_COORDINATOR). Far ends run `xdc doctor --serve`\n"
               "  on their wan_endpoint with DIR/REGION-0.pem (xdc certs). --emulate checks every region on this\n"
               "  machine through relays carrying TOPO2's links (default TOPO's), creating DIR's certificates\n"
               "  when it has none; --stop R leaves region R's server down. Exit 0: all passed; 69: a check failed.\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

typedef struct doctor_cli {
    const char *topo, *run, *certs, *region, *write_topo, *listen, *emulate_links, *device;
    rdzv_flags rdzv; /* --rdzv and etcd TLS files */
    int serve, emulate, json, node;
    double duration;
    const char *endpoint_arg[XDC_TOPO_MAX_REGIONS];
    int n_endpoint_arg;
    const char *stopped[DOCTOR_MAX_STOPPED];
    int n_stopped;
    int ports[DOCTOR_MAX_PORTS];
    const char *owners[DOCTOR_MAX_PORTS];
    char owner_text[DOCTOR_MAX_PORTS][48];
    int n_ports;
    orch_doctor_opts o;
} doctor_cli;

static int bad_flag(const char *flag, const xdc_diag *d)
{
    fprintf(stderr, "xdc doctor: %s: %s\n", flag, d->msg);
    return XDC_EX_USAGE;
}

/* 0 when the options are complete; else the exit code (-1: --help printed). */
static int doctor_parse(int argc, char **argv, doctor_cli *c)
{
    static const struct option opts[] = {
        {"topology", required_argument, NULL, 't'},
        {"config", required_argument, NULL, 'c'},
        {"certs", required_argument, NULL, 'C'},
        {"region", required_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"write-topology", required_argument, NULL, 'w'},
        {"endpoint", required_argument, NULL, 'e'},
        {"port", required_argument, NULL, 'p'},
        {"node", required_argument, NULL, 'n'},
        {"device", required_argument, NULL, 'd'},
        {"pings", required_argument, NULL, 'P'},
        {"probe-seconds", required_argument, NULL, 's'},
        {"probe-bytes", required_argument, NULL, 'b'},
        {"serve", no_argument, NULL, 'S'},
        {"listen", required_argument, NULL, 'l'},
        {"duration", required_argument, NULL, 'D'},
        {"emulate", no_argument, NULL, 'E'},
        {"emulate-links", required_argument, NULL, 'L'},
        {"stop", required_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'},
        XDC_CLI_RDZV_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    int ch, v;
    int64_t i64;
    xdc_diag d = {{0}};
    optind = 1;
    while ((ch = getopt_long(argc, argv, "t:c:h", opts, NULL)) != -1) {
        if (xdc_cli_rdzv_flag(ch, optarg, &c->rdzv)) continue;
        switch (ch) {
        case 't': c->topo = optarg; break;
        case 'c': c->run = optarg; break;
        case 'C': c->certs = optarg; break;
        case 'r': c->region = optarg; break;
        case 'j': c->json = 1; break;
        case 'w': c->write_topo = optarg; break;
        case 'd': c->device = optarg; break;
        case 'S': c->serve = 1; break;
        case 'l': c->listen = optarg; break;
        case 'E': c->emulate = 1; break;
        case 'L': c->emulate_links = optarg; break;
        case 'e':
            if (c->n_endpoint_arg == XDC_TOPO_MAX_REGIONS || !strchr(optarg, '=')) {
                fprintf(stderr, "xdc doctor: --endpoint takes REGION=HOST:PORT, got '%s'\n", optarg);
                return XDC_EX_USAGE;
            }
            c->endpoint_arg[c->n_endpoint_arg++] = optarg;
            break;
        case 'x':
            if (c->n_stopped == DOCTOR_MAX_STOPPED) {
                fprintf(stderr, "xdc doctor: at most %d --stop\n", DOCTOR_MAX_STOPPED);
                return XDC_EX_USAGE;
            }
            c->stopped[c->n_stopped++] = optarg;
            break;
        case 'p':
            if (c->n_ports == DOCTOR_MAX_PORTS) {
                fprintf(stderr, "xdc doctor: at most %d ports\n", DOCTOR_MAX_PORTS);
                return XDC_EX_USAGE;
            }
            if (xdc_parse_int(optarg, 1, 65535, &c->ports[c->n_ports], &d) != XDC_OK) return bad_flag("--port", &d);
            c->owners[c->n_ports++] = "--port";
            break;
        case 'n':
            if (xdc_parse_int(optarg, 0, 1000000, &c->node, &d) != XDC_OK) return bad_flag("--node", &d);
            break;
        case 'P':
            if (xdc_parse_int(optarg, 1, 1000, &c->o.pings, &d) != XDC_OK) return bad_flag("--pings", &d);
            break;
        case 'b':
            if (xdc_parse_int(optarg, 65536, 1 << 30, &v, &d) != XDC_OK) return bad_flag("--probe-bytes", &d);
            c->o.probe_bytes_max = (uint64_t)v;
            break;
        case 's':
        case 'D':
            if (xdc_parse_duration_ms(optarg, &i64) != 0 || i64 <= 0) {
                fprintf(stderr, "xdc doctor: %s '%s' is not a duration (e.g. 1.5s, 500ms)\n",
                        ch == 's' ? "--probe-seconds" : "--duration", optarg);
                return XDC_EX_USAGE;
            }
            if (ch == 's') c->o.probe_seconds = (double)i64 / 1000.0;
            else c->duration = (double)i64 / 1000.0;
            break;
        case 'h': doctor_usage(stdout); return -1;
        default: return doctor_usage(stderr);
        }
    }
    if (optind != argc) {
        fprintf(stderr, "xdc doctor: unexpected argument '%s'\n", argv[optind]);
        return XDC_EX_USAGE;
    }
    if (!c->topo || !c->certs) {
        fprintf(stderr, "xdc doctor: -t TOPO and --certs DIR are required\n");
        return XDC_EX_USAGE;
    }
    const char *misplaced = c->serve && c->emulate ? "--serve and --emulate exclude each other"
                            : !c->emulate && (c->n_stopped || c->emulate_links)
                                ? "--stop and --emulate-links need --emulate"
                            : !c->serve && (c->listen || c->duration > 0) ? "--listen and --duration need --serve"
                                                                          : NULL;
    if (misplaced) {
        fprintf(stderr, "xdc doctor: %s\n", misplaced);
        return XDC_EX_USAGE;
    }
    if (!c->region) c->region = getenv("XDC_REGION");
    if (!c->rdzv.rdzv) c->rdzv.rdzv = getenv("XDC_RDZV");
    if (!c->rdzv.rdzv || !c->rdzv.rdzv[0]) c->rdzv.rdzv = getenv("XDC_COORDINATOR");
    if (c->rdzv.rdzv && !c->rdzv.rdzv[0]) c->rdzv.rdzv = NULL;
    return 0;
}

/* The region index of a name; usage error naming the flag when the topology has no such region. */
static int region_arg(const xdc_topology *t, const char *flag, const char *name, int *out)
{
    *out = name ? xdc_topology_region_index(t, name) : -1;
    if (*out >= 0) return 0;
    fprintf(stderr, "xdc doctor: %s: %s%s%s\n", flag,
            name ? "no region '" : "which region is this node? (--region, or ", name ? name : "XDC_REGION)",
            name ? "' in the topology" : "");
    return XDC_EX_USAGE;
}

/* --serve: answer probes until killed (or --duration). */
static int doctor_serve(const doctor_cli *c, const xdc_topology *t)
{
    int r;
    int rc = region_arg(t, "--region", c->region, &r);
    if (rc) return rc;
    const char *ep = c->listen ? c->listen : t->regions[r].wan_endpoint;
    char host[256];
    int port;
    xdc_diag d = {{0}};
    size_t len = strlen(ep);
    if (c->listen && len > 2 && strcmp(ep + len - 2, ":0") == 0) { /* any free port: the line below names it */
        snprintf(host, sizeof host, "%.*s", (int)(len - 2), ep);
        port = 0;
    } else if (xdc_parse_host_port(ep, host, sizeof host, &port, &d) != XDC_OK) {
        fprintf(stderr, "xdc doctor --serve: %s: %s (set wan_endpoint of region %s, or --listen HOST:PORT)\n",
                c->listen ? "--listen" : "wan_endpoint", d.msg, t->regions[r].name);
        return XDC_EX_USAGE;
    }
    orch_doctor_server *s = NULL;
    /* Listen on every address: the endpoint's host is how others reach us, which NAT may rewrite. */
    xdc_err_t e = orch_doctor_server_create(c->certs, t->regions[r].name, c->listen ? host : NULL, port, &s, &d);
    if (e != XDC_OK) {
        fprintf(stderr, "xdc doctor --serve: %s\n", d.msg);
        return xdc_cli_exit_code(e);
    }
    fprintf(stderr, "xdc doctor --serve: region %s answering probes on port %d\n", t->regions[r].name,
            orch_doctor_server_port(s));
    /* No state to save: the default action of SIGINT/SIGTERM ends the server. */
    uint64_t deadline = c->duration > 0 ? xdc_deadline_ms((int64_t)(c->duration * 1000)) : XDC_DEADLINE_NEVER;
    while (!xdc_deadline_passed(deadline)) poll(NULL, 0, xdc_deadline_poll_ms(deadline));
    orch_doctor_server_destroy(s);
    return XDC_EX_OK;
}

/* --emulate with a certificate folder that has no CA yet: make one (run "doctor") and REGION-0 of each
 * region. */
static xdc_err_t emulate_certs(const char *dir, const xdc_topology *t, xdc_diag *d)
{
    char ca[600];
    struct stat st;
    snprintf(ca, sizeof ca, "%s/ca.pem", dir);
    if (stat(ca, &st) == 0) return XDC_OK;
    mkdir(dir, 0700);
    xdc_wan_cert_opts co = {.dir = dir, .run = "doctor", .days = 2};
    XDC_CHECK(xdc_wan_cert_init_ca(&co, d));
    for (int r = 0; r < t->n_regions; r++) {
        co.region = t->regions[r].name;
        co.rank = 0;
        XDC_CHECK(xdc_wan_cert_issue(&co, NULL, 0, NULL, 0, d));
    }
    return XDC_OK;
}

/* The run file: its timeouts (scaled from the topology) and the metrics ports node `node` binds. */
static int doctor_run_file(doctor_cli *c, const xdc_topology *t, int region)
{
    orch_run_config run;
    memset(&run, 0, sizeof run);
    if (c->run) {
        xdc_cfg_errors errs;
        if (orch_run_config_load(c->run, &run, &errs) != XDC_OK) {
            xdc_cfg_errors_print(&errs, stderr);
            return XDC_EX_CONFIG;
        }
    }
    orch_run_config_scale_timeouts(&run, t);
    c->o.handshake_ms = run.timeouts.handshake_ms;
    if (!c->run || run.metrics_port <= 0) return 0;
    int base = xdc_topology_first_worker(t, region), wpn = t->regions[region].workers_per_node;
    for (int k = 0; k < wpn && c->n_ports < DOCTOR_MAX_PORTS; k++) {
        int grank = base + c->node * wpn + k;
        if (run.metrics_port + grank > 65535) break; /* the run refuses such a range itself */
        c->ports[c->n_ports] = run.metrics_port + grank;
        snprintf(c->owner_text[c->n_ports], sizeof c->owner_text[0], "metrics of global rank %d", grank);
        c->owners[c->n_ports] = c->owner_text[c->n_ports];
        c->n_ports++;
    }
    return 0;
}

static int doctor_output(const doctor_cli *c, const orch_doctor_report *rep, const xdc_topology *t)
{
    if (c->json) {
        char *text = NULL;
        if (orch_doctor_report_json(rep, t, &text) != XDC_OK) return XDC_EX_SOFTWARE;
        printf("%s\n", text);
        xdc_free(text);
    } else {
        orch_doctor_report_print(rep, stdout);
    }
    if (c->write_topo) {
        xdc_diag d = {{0}};
        xdc_err_t e = orch_doctor_write_topology(rep, t, c->write_topo, &d);
        if (e != XDC_OK) {
            fprintf(stderr, "xdc doctor: --write-topology: %s\n", d.msg);
            return xdc_cli_exit_code(e);
        }
    }
    return orch_doctor_report_passed(rep) ? XDC_EX_OK : XDC_EX_UNAVAILABLE;
}

static int doctor_check(doctor_cli *c, const xdc_topology *t)
{
    int region = 0, rc;
    if (!c->emulate || c->region) {
        rc = region_arg(t, "--region", c->region, &region);
        if (rc) return rc;
    }
    const char *eps[XDC_TOPO_MAX_REGIONS] = {NULL};
    for (int i = 0; i < c->n_endpoint_arg; i++) {
        char name[XDC_NAME_MAX];
        const char *eq = strchr(c->endpoint_arg[i], '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - c->endpoint_arg[i]), c->endpoint_arg[i]);
        int r;
        if ((rc = region_arg(t, "--endpoint", name, &r))) return rc;
        eps[r] = eq + 1;
    }
    for (int i = 0; i < c->n_stopped; i++) {
        int r;
        if ((rc = region_arg(t, "--stop", c->stopped[i], &r))) return rc;
    }
    if (c->write_topo && access(c->write_topo, F_OK) == 0) { /* refused before minutes of probes, not after */
        fprintf(stderr, "xdc doctor: --write-topology: %s exists; give a new file (it may be the topology itself)\n",
                c->write_topo);
        return XDC_EX_IOERR;
    }
    if ((rc = doctor_run_file(c, t, region))) return rc;
    xdc_diag d = {{0}};
    orch_device dev;
    if (orch_device_override(c->device, &dev, NULL, &d) != XDC_OK) return bad_flag("--device", &d);
    c->o.topo = t;
    c->o.region = region;
    c->o.certs_dir = c->certs;
    c->o.endpoints = eps;
    c->o.device = dev;
    c->o.gpu_probe = orch_member_device_probe();
    c->o.ports = c->ports;
    c->o.port_owners = c->owners;
    c->o.n_ports = c->n_ports;
    c->o.rdzv = c->rdzv.rdzv;
    c->o.etcd_tls = c->rdzv;
    xdc_topology *emu = NULL;
    orch_doctor_report *rep = NULL;
    xdc_err_t e = orch_doctor_report_create(t, &rep);
    if (e == XDC_OK && c->emulate) {
        xdc_cfg_errors errs;
        if (c->emulate_links && xdc_topology_load(c->emulate_links, &emu, &errs) != XDC_OK) {
            xdc_cfg_errors_print(&errs, stderr);
            orch_doctor_report_destroy(rep);
            return XDC_EX_CONFIG;
        }
        e = emulate_certs(c->certs, t, &d);
        if (e == XDC_OK) e = orch_doctor_emulate(&c->o, emu, c->stopped, c->n_stopped, rep, &d);
    } else if (e == XDC_OK) {
        e = orch_doctor_run(&c->o, rep, &d);
    }
    rc = e == XDC_OK ? doctor_output(c, rep, t) : XDC_EX_OK;
    if (e != XDC_OK) {
        fprintf(stderr, "xdc doctor: %s\n", d.msg[0] ? d.msg : xdc_strerror(e));
        rc = xdc_cli_exit_code(e);
    }
    orch_doctor_report_destroy(rep);
    xdc_topology_destroy(emu);
    return rc;
}

int xdc_cmd_doctor(int argc, char **argv)
{
    doctor_cli *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_EX_SOFTWARE;
    c->o = (orch_doctor_opts)ORCH_DOCTOR_OPTS_INIT;
    int rc = doctor_parse(argc, argv, c);
    if (rc != 0) {
        xdc_free(c);
        return rc < 0 ? XDC_EX_OK : rc;
    }
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    if (xdc_topology_load(c->topo, &t, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        xdc_free(c);
        return XDC_EX_CONFIG;
    }
    rc = c->serve ? doctor_serve(c, t) : doctor_check(c, t);
    xdc_topology_destroy(t);
    xdc_free(c);
    return rc;
}
