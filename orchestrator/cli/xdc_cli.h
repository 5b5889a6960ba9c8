/* xdc_cli.h — subcommand table entries and the sysexits codes commands return. */
#ifndef XDC_CLI_H
#define XDC_CLI_H

/* sysexits(3) */
enum {
    XDC_EX_OK = 0,
    XDC_EX_USAGE = 64,
    XDC_EX_DATAERR = 65,
    XDC_EX_NOINPUT = 66,
    XDC_EX_UNAVAILABLE = 69,
    XDC_EX_SOFTWARE = 70,
    XDC_EX_IOERR = 74,
    XDC_EX_TEMPFAIL = 75,
    XDC_EX_CONFIG = 78,
};

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
int xdc_cmd_certs(int argc, char **argv);
int xdc_cmd_wan(int argc, char **argv);
int xdc_cmd_wanemu(int argc, char **argv);
int xdc_cmd_plan(int argc, char **argv);
int xdc_cmd_simulate(int argc, char **argv);

#endif /* XDC_CLI_H */
