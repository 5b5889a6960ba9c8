/* cmd_launch.c — `xdc launch` and `xdc coordinator`: their options (the launcher itself is
 * orchestrator/launch/orch_launch.c) and their exit code: a failed agent's own status, else the
 * sysexits code of the error. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_parse.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/launch/orch_launch.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int launch_usage(FILE *f)
{
    fprintf(
        f,
        "usage: xdc launch -t TOPOLOGY.yaml -c RUN.yaml [--run-dir DIR] [--run-id ID] "
        "[--emulate-wan|--no-emulate-wan]\n"
        "                  [--outage DURATION@START[:in-flight][,...]]... [--resume] [--log-format text|json] "
        "[--device "
        "cpu|cuda|cpu-strict]\n"
        "                  [--rdzv builtin|etcd://HOST:PORT[/PREFIX]] [--etcd-cacert F --etcd-cert F --etcd-key F]\n"
        "                  [--max-restarts N] [--chaos SEED[:RATE[:KINDS]]] [--exec -- PROG [ARGS...]]\n"
        "       xdc coordinator -t TOPOLOGY.yaml -c RUN.yaml --run-dir DIR --host ADDR [--port P] [--run-id ID]\n"
        "                       [--cert-dir DIR] [--ca FILE] [--crl FILE] [--standby] [--decider-ttl S]\n"
        "  coordinator: host the rendezvous on ADDR:P (no default address; 0.0.0.0 is every interface, port\n"
        "  29400) for agents started elsewhere (Slurm, ssh) and wait for the run to end. With --cert-dir it\n"
        "  uses DIR/coordinator-0.pem and .key and makes no keys: each node brings its own (xdc certs request\n"
        "  + sign; docs/security.md). Without, it makes a CA and every member's key in RUN_DIR/certs, which\n"
        "  the nodes must then share.\n"
        "  --standby        (etcd) join a live run's store as it is and take over deciding its rounds should\n"
        "                   the coordinator deciding them go (docs/runtime.md, Who decides)\n"
        "  --decider-ttl S  (etcd) the deciding role's lease: a holder silent this long is replaced (default 10)\n"
        "  Runs every region of the topology on this machine: rendezvous, WAN emulator (default when all\n"
        "  regions are local), one agent per node, one worker per slot. Ends with\n"
        "  final val_loss=<x> params_xxh64=<hex> steps=<n> wan_bytes=<n> exposed_wan_pct=<x>\n"
        "    exposed_wan_pct_max=<x> compute_util=<x> compute_util_min=<x>   (mean and worst over every worker)\n"
        "  --outage 5s@10s  cut every emulated link for 5 s, 10 s after its relay opened; repeat the flag or\n"
        "                   give a list (3s@10s,12s@40s) for several outages (at most 16); 5s@10s:in-flight\n"
        "                   waits from then for a transfer on its way (16 KiB or more) and cuts it\n"
        "  --degrade-links F  emulated links carry F x the topology's bandwidth (rehearse a degraded WAN)\n"
        "  --resume         continue from the newest complete checkpoint in the run folder\n"
        "  --max-restarts N elastic DiLoCo/streaming: start a region that left the run again (its agents), at\n"
        "                   most N times per region; it rejoins at an outer round (docs/runtime.md, Rejoining)\n"
        "  --chaos SEED[:RATE[:KINDS]]  inject a seeded random fault schedule (the same seed, the same faults at\n"
        "                   the same steps): RATE faults per region per 100 steps (default 1); KINDS a comma list of\n"
        "                   kill-worker kill-agent stall link-down link-slow kill-donor kill-pair kill-etcd\n"
        "                   kill-decider (default: every kind the run allows; kill-etcd: the members whose pid files\n"
        "                   XDC_CHAOS_ETCD_PIDS lists; kill-decider: the round decider, this launch or a standby\n"
        "                   coordinator XDC_CHAOS_DECIDER_PIDS lists); one line per fault and per recovery\n"
        "                   (docs/runtime.md, Chaos)\n"
        "  --exec -- PROG ARGS  every worker slot runs PROG (a program on libxdc, docs/api.md) instead of\n"
        "                   `xdc worker`; it ends with a line naming how many members exited 0\n"
        "  --device D       run every region's workers on D (default: XDC_DEVICE, else the topology: CUDA\n"
        "                   with NCCL inside a region with gpus_per_node > 0, the CPU with shared memory\n"
        "                   where it is 0); passed on to the agents and by them to the workers\n"
        "  --cert-dir DIR --ca FILE --crl FILE  credentials (default XDC_CERT_DIR, XDC_CA, XDC_CRL): the\n"
        "                   rendezvous uses DIR/coordinator-0.*, and the agents get the same flags\n" XDC_CLI_RDZV_USAGE
        "            with etcd the launcher hosts no store (and the coordinator needs no --host): it reads and\n"
        "            writes the run's keys in etcd\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

/* One option with an argument that needs checking; 0 or the exit code. */
static int launch_option(int c, const char *arg, orch_launch_opts *o)
{
    if (c == 'g') {
        char *end;
        o->degrade = strtod(arg, &end);
        if (*end || !(o->degrade > 0 && o->degrade <= 1)) {
            fprintf(stderr, "xdc launch: --degrade-links wants a fraction in (0, 1], got '%s'\n", arg);
            return XDC_EX_USAGE;
        }
    } else if (c == 'p') {
        xdc_diag d;
        if (xdc_parse_int(arg, 0, 65535, &o->port, &d) != XDC_OK) {
            fprintf(stderr, "xdc launch: --port: %s\n", d.msg);
            return XDC_EX_USAGE;
        }
    } else if (c == 'R') {
        xdc_diag d;
        if (xdc_parse_int(arg, 0, 1000, &o->max_restarts, &d) != XDC_OK) {
            fprintf(stderr, "xdc launch: --max-restarts: %s\n", d.msg);
            return XDC_EX_USAGE;
        }
    } else if (c == 'T') {
        xdc_diag d;
        if (xdc_parse_int(arg, 1, 3600, &o->decider_ttl_s, &d) != XDC_OK) {
            fprintf(stderr, "xdc launch: --decider-ttl: %s\n", d.msg);
            return XDC_EX_USAGE;
        }
    } else if (c == 'K') {
        xdc_diag d = {{0}};
        if (orch_chaos_spec_parse(arg, &o->chaos, &d) != XDC_OK) {
            fprintf(stderr, "xdc launch: --chaos: %s\n", d.msg);
            return XDC_EX_USAGE;
        }
    } else if (c == 'o') {
        xdc_diag d = {{0}};
        if (xdc_wan_outages_parse(arg, o->outages, &o->n_outages, &d) != XDC_OK) {
            fprintf(stderr, "xdc launch: --outage: %s\n", d.msg);
            return XDC_EX_USAGE;
        }
    }
    return 0;
}

/* 0 when the options are complete; else the exit code (-1: --help printed, exit 0). */
static int launch_parse(int argc, char **argv, int coordinator, orch_launch_opts *o, const char **log_format)
{
    static const struct option opts[] = {{"topology", required_argument, NULL, 't'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"run-dir", required_argument, NULL, 'd'},
                                         {"run-id", required_argument, NULL, 'i'},
                                         {"emulate-wan", no_argument, NULL, 'e'},
                                         {"no-emulate-wan", no_argument, NULL, 'E'},
                                         {"outage", required_argument, NULL, 'o'},
                                         {"resume", no_argument, NULL, 'r'},
                                         {"log-format", required_argument, NULL, 'l'},
                                         {"host", required_argument, NULL, 'H'},
                                         {"port", required_argument, NULL, 'p'},
                                         {"degrade-links", required_argument, NULL, 'g'},
                                         {"device", required_argument, NULL, 'D'},
                                         {"exec", no_argument, NULL, 'x'},
                                         {"max-restarts", required_argument, NULL, 'R'},
                                         {"standby", no_argument, NULL, 'S'},
                                         {"decider-ttl", required_argument, NULL, 'T'},
                                         {"chaos", required_argument, NULL, 'K'},
                                         {"help", no_argument, NULL, 'h'},
                                         XDC_CLI_RDZV_OPTIONS,
                                         XDC_CLI_CREDS_OPTIONS,
                                         {NULL, 0, NULL, 0}};
    orch_launch_opts_default(o, coordinator);
    *log_format = NULL;
    int c, ex, exec = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:c:d:i:eEo:rl:H:p:g:D:h", opts, NULL)) != -1) {
        if (xdc_cli_rdzv_flag(c, optarg, &o->rdzv) || xdc_cli_creds_flag(c, optarg, &o->creds)) continue;
        switch (c) {
        case 't': o->topology = optarg; break;
        case 'c': o->config = optarg; break;
        case 'd': o->run_dir = optarg; break;
        case 'i': o->run_id = optarg; break;
        case 'e': o->emulate = 1; break;
        case 'E': o->emulate = 0; break;
        case 'r': o->resume = 1; break;
        case 'l': *log_format = optarg; break;
        case 'H': o->host = optarg; break;
        case 'D': o->device = optarg; break;
        case 'x': exec = 1; break;
        case 'S': o->standby = 1; break;
        case 'g':
        case 'T':
        case 'p':
        case 'R':
        case 'K':
        case 'o':
            if ((ex = launch_option(c, optarg, o)) != 0) return ex;
            break;
        case 'h': launch_usage(stdout); return -1;
        default: return launch_usage(stderr);
        }
    }
    if (!o->topology || !o->config || (coordinator && !o->run_dir)) return launch_usage(stderr);
    if (!coordinator && o->standby) {
        fprintf(stderr, "xdc launch: --standby is `xdc coordinator`'s: a launch starts its run's agents\n");
        return XDC_EX_USAGE;
    }
    if (coordinator && o->chaos.on) {
        fprintf(stderr, "xdc coordinator: --chaos: the coordinator starts no agents to inject faults into; use xdc "
                        "launch\n");
        return XDC_EX_USAGE;
    }
    if (coordinator && o->max_restarts) {
        fprintf(stderr, "xdc coordinator: --max-restarts: the coordinator starts no agents; restart a region's agent "
                        "where it ran (by hand, Slurm, systemd) and it rejoins\n");
        return XDC_EX_USAGE;
    }
    if (xdc_cli_exec_tail(coordinator ? "coordinator" : "launch", exec && !coordinator, argc, argv, optind,
                          &o->exec_argv) != 0)
        return launch_usage(stderr);
    /* the flag, else XDC_DEVICE: one word for every region, checked before anything starts */
    return xdc_cli_device_option(coordinator ? "coordinator" : "launch", o->device, &o->device);
}

/* A `plan: auto` run's compute probe (cli_probe.c), before the launcher plans: its agents and workers inherit the
 * figure. The files are loaded again by the launcher, which reports their errors. */
static int probe_compute(const orch_launch_opts *o)
{
    static orch_run_config c; /* large; one launch loads one */
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    int ex = XDC_EX_OK;
    if (xdc_topology_load(o->topology, &t, &errs) == XDC_OK && orch_run_config_load(o->config, &c, &errs) == XDC_OK &&
        c.plan_auto)
        ex = xdc_cli_plan_probe("launch", &c, t, o->device, o->resume ? o->run_dir : NULL);
    xdc_topology_destroy(t);
    return ex;
}

static int run_launch(int argc, char **argv, int coordinator)
{
    const char *cmd = coordinator ? "coordinator" : "launch", *log_format;
    orch_launch_opts o;
    int ex = launch_parse(argc, argv, coordinator, &o, &log_format);
    if (ex != 0) return ex < 0 ? XDC_EX_OK : ex;
    if (log_format) {
        if (strcmp(log_format, "json") != 0 && strcmp(log_format, "text") != 0) {
            fprintf(stderr, "xdc launch: --log-format must be text or json\n");
            return XDC_EX_USAGE;
        }
        setenv("XDC_LOG_FORMAT", log_format, 1); /* inherited by agents and workers */
        xdc_log_set_format(strcmp(log_format, "json") == 0 ? XDC_LOG_JSON : XDC_LOG_TEXT);
    }
    if (!coordinator && (ex = probe_compute(&o)) != 0) return ex;
    xdc_diag d = {{0}};
    int agent_exit = 0;
    xdc_err_t rc = orch_launch_run(&o, &agent_exit, &d);
    if (rc != XDC_OK && d.msg[0]) fprintf(stderr, "xdc %s: %s\n", cmd, d.msg);
    return xdc_cli_run_exit_code(rc, agent_exit);
}

int xdc_cmd_launch(int argc, char **argv) { return run_launch(argc, argv, 0); }

int xdc_cmd_coordinator(int argc, char **argv) { return run_launch(argc, argv, 1); }
