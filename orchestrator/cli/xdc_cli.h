/* xdc_cli.h — subcommand table entries, the sysexits codes commands return and the one mapping from
 * xdc_err_t to them (cli_exit.c). */
#ifndef XDC_CLI_H
#define XDC_CLI_H

#include "common/xdc_err.h"
#include "orchestrator/launch/orch_device.h"
#include "orchestrator/member/orch_member.h"
#include "orchestrator/launch/orch_creds.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "orchestrator/runcfg/orch_run_config.h"

/* sysexits(3) */
enum {
    XDC_EX_OK = 0,
    XDC_EX_USAGE = 64,
    XDC_EX_DATAERR = 65,
    XDC_EX_NOINPUT = 66,
    XDC_EX_UNAVAILABLE = 69,
    XDC_EX_SOFTWARE = 70,
    XDC_EX_OSERR = 71,
    XDC_EX_IOERR = 74,
    XDC_EX_TEMPFAIL = 75,
    XDC_EX_PROTOCOL = 76,
    XDC_EX_NOPERM = 77,
    XDC_EX_CONFIG = 78,
};

/* The exit code for an error (0 for XDC_OK); 70 for a value outside the table. */
int xdc_cli_exit_code(xdc_err_t err);
/* A supervised run's exit code: a failed child's own exit status (child_exit > 0) passes through as is,
 * else the error's code. */
int xdc_cli_run_exit_code(xdc_err_t err, int child_exit);
/* cli_exec.c. After getopt: with `exec` (the --exec flag), the program and its arguments after "--" into
 * *out (argv + optind); without, no operand may be left. 0, or XDC_EX_USAGE (with --exec and no
 * "-- PROG", a line on stderr naming the form). */
int xdc_cli_exec_tail(const char *cmd, int exec, int argc, char **argv, int optind_now, char *const **out);
/* cli_device.c. `--device` of launch, agent and worker: the flag, else XDC_DEVICE, checked; *word (word may be
 * NULL) is the override's device word (NULL: the topology decides). 0, or XDC_EX_USAGE with the bad word named on
 * stderr ("xdc CMD: --device 'x' is not a device ..."). */
int xdc_cli_device_option(const char *cmd, const char *flag, const char **word);
/* cli_rdzv.c. The rendezvous options of launch, agent and worker: add XDC_CLI_RDZV_OPTIONS to the
 * command's getopt_long table and hand each option to xdc_cli_rdzv_flag, which returns 1 when it took it. */
#define XDC_CLI_RDZV_OPT 0x1000 /* getopt codes XDC_CLI_RDZV_OPT .. +3, out of the way of short options */
#define XDC_CLI_RDZV_OPTIONS                                            \
    {"rdzv", required_argument, NULL, XDC_CLI_RDZV_OPT},                \
        {"etcd-cacert", required_argument, NULL, XDC_CLI_RDZV_OPT + 1}, \
        {"etcd-cert", required_argument, NULL, XDC_CLI_RDZV_OPT + 2},   \
    {                                                                   \
        "etcd-key", required_argument, NULL, XDC_CLI_RDZV_OPT + 3       \
    }
/* The credential options of launch, coordinator, agent and worker (--cert-dir, --ca, --crl; orch_creds.h):
 * add XDC_CLI_CREDS_OPTIONS to the table and hand each option to xdc_cli_creds_flag. */
#define XDC_CLI_CREDS_OPT (XDC_CLI_RDZV_OPT + 4) /* getopt codes XDC_CLI_CREDS_OPT .. +2 */
#define XDC_CLI_CREDS_OPTIONS                                                                                         \
    {"cert-dir", required_argument, NULL, XDC_CLI_CREDS_OPT}, {"ca", required_argument, NULL, XDC_CLI_CREDS_OPT + 1}, \
    {                                                                                                                 \
        "crl", required_argument, NULL, XDC_CLI_CREDS_OPT + 2                                                         \
    }
#define XDC_CLI_RDZV_USAGE                                                                                      \
    "  --rdzv builtin|etcd://HOST:PORT[/PREFIX]  the rendezvous store (default XDC_RDZV, else the run file's\n" \
    "            rdzv:, else the built-in store); --etcd-cacert/--etcd-cert/--etcd-key FILE: TLS to etcd\n"
int xdc_cli_rdzv_flag(int c, const char *arg, rdzv_flags *f);
/* cli_probe.c. The compute probe a run file's plan is calibrated with (docs/planner.md, "Compute speed"): unless the
 * run file says plan_compute: topology or ORCH_PLAN_PROBE_ENV is set already, time the run's model on the device
 * region 0 runs on (device_word: --device, NULL: XDC_DEVICE, else the topology) and set ORCH_PLAN_PROBE_ENV, with a
 * line on stderr; resume_dir (a resumed run's folder, else NULL): take the figure the run started with from it. 0, or
 * a sysexits code with the reason on stderr. */
int xdc_cli_plan_probe(const char *cmd, const orch_run_config *c, const xdc_topology *t, const char *device_word,
                       const char *resume_dir);
int xdc_cli_creds_flag(int c, const char *arg, orch_creds_flags *f);

typedef struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} xdc_command;

int xdc_cmd_topo(int argc, char **argv);
int xdc_cmd_launch(int argc, char **argv);
int xdc_cmd_agent(int argc, char **argv);
int xdc_cmd_coordinator(int argc, char **argv);
int xdc_cmd_worker(int argc, char **argv);
int xdc_cmd_train(int argc, char **argv);
int xdc_cmd_trace(int argc, char **argv);
int xdc_cmd_report(int argc, char **argv);
int xdc_cmd_certs(int argc, char **argv);
int xdc_cmd_wan(int argc, char **argv);
int xdc_cmd_wanemu(int argc, char **argv);
int xdc_cmd_plan(int argc, char **argv);
int xdc_cmd_simulate(int argc, char **argv);
int xdc_cmd_doctor(int argc, char **argv);

#endif /* XDC_CLI_H */
