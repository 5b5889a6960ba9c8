/* xdc_main.c — the `xdc` command: a table of subcommands, one row each, dispatched by name.
 * Each command lives in its own orchestrator/cmd_*.c file and returns a sysexits code. */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_log.h"
#include "kernels/xdc_model_ops.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static const xdc_command commands[] = {
    {"launch", "run every region of a topology on this machine", xdc_cmd_launch},
    {"coordinator", "host the rendezvous for agents launched elsewhere", xdc_cmd_coordinator},
    {"agent", "start and watch this node's workers (one per node, from a launch script)", xdc_cmd_agent},
    {"worker", "one pipeline stage of one replica (started by xdc agent)", xdc_cmd_worker},
    {"topo", "check and print topology files", xdc_cmd_topo},
    {"plan", "choose stages, replicas, mode, codec and period for a topology and model", xdc_cmd_plan},
    {"simulate", "replay a plan's schedule as a discrete-event model (any scale)", xdc_cmd_simulate},
    {"train", "train the GPT in one process (--single)", xdc_cmd_train},
    {"trace", "merge per-rank Chrome trace files", xdc_cmd_trace},
    {"report", "plot runs: loss against wall time and WAN bytes, the step-time split (PNG, gnuplot)", xdc_cmd_report},
    {"certs", "create the cluster CA and node certificates", xdc_cmd_certs},
    {"wan", "iperf3-like TLS transfer over the WAN transport (listen|send)", xdc_cmd_wan},
    {"doctor", "pre-flight check of a node: peers, TLS, RTT, bandwidth, MTU, clocks, GPUs, ports, rendezvous",
     xdc_cmd_doctor},
    {"wan-emu", "emulate a topology's WAN links with userspace relays (--check measures them)", xdc_cmd_wanemu},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: xdc <command> [options]   (xdc <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    xdc_model_cpu_fit_blas(argv); /* first: it may start the program again */
    xdc_log_init_from_env();
    /* A peer that vanishes mid-write must cost a socket an EPIPE, never the process its life (every
     * command: the rendezvous, the WAN engine and the metrics server all write to sockets). */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return XDC_EX_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "xdc: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return XDC_EX_USAGE;
}
