/* orch_doctor.h — `xdc doctor`, the pre-flight check of a node before a run (docs/runtime.md,
 * "Doctor"). How it reaches the far end: every region runs a probe server (`xdc doctor --serve`, an
 * orch_doctor_server) on its topology `wan_endpoint`, holding the region's rank-0 certificate; a node
 * checking itself dials every region its region links to, over the WAN transport itself (TLS 1.3, mutual
 * authentication, the link's streams), and measures each link with probe messages:
 * - reach:      a plain TCP connect to the endpoint (and the path MTU on that socket: IP_MTU after a
 *               connect with IP_MTU_DISCOVER = IP_PMTUDISC_DO);
 * - tls:        the WAN handshake, and the server's identity being REGION/0 of our run;
 * - rtt, clock: timestamped ping-pongs, NTP style (t1 sent, t2 received, t3 answered, t4 back): RTT is
 *               the smallest (t4 - t1) - (t3 - t2), the clock offset ((t2 - t1) + (t3 - t4)) / 2 of
 *               that sample;
 * - bandwidth:  three bounded transfers, each measured by the WAN engine's goodput (bytes over the time
 *               from send to acknowledgement): an estimate that errs only low, so the best one counts;
 * and then the node itself: GPUs against the topology (orch_device_check_node), ports the run will bind
 * (bind test), the rendezvous (a TLS handshake with the built-in coordinator's identity).
 * Each figure is judged against the topology (more than 2x off fails) and every failure says what to do.
 * orch_doctor_emulate runs the same checks on one machine through the WAN emulator's relays. */
#ifndef ORCH_DOCTOR_H
#define ORCH_DOCTOR_H

#include "common/xdc_err.h"
#include "orchestrator/launch/orch_device.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "topology/xdc_topology.h"

#include <stdint.h>
#include <stdio.h>

typedef struct orch_doctor_server orch_doctor_server;

/* Serve probes as region `region` (certificate CERTS/REGION-0.pem, key CERTS/REGION-0.key, CA
 * CERTS/ca.pem) on host:port (port 0: any free port; host NULL: every IPv4 address). A port in use is
 * XDC_ERR_IO naming it. Peers are served on threads of their own, at most 16 at a time. */
xdc_err_t orch_doctor_server_create(const char *certs_dir, const char *region, const char *host, int port,
                                    orch_doctor_server **out, xdc_diag *diag);
int orch_doctor_server_port(const orch_doctor_server *s);
/* Probe sessions served to their end so far. */
int orch_doctor_server_sessions(orch_doctor_server *s);
/* Stop: close every session and the listener. NULL: no-op. */
void orch_doctor_server_destroy(orch_doctor_server *s);

typedef enum { ORCH_DOCTOR_PASS = 0, ORCH_DOCTOR_FAIL = 1, ORCH_DOCTOR_SKIP = 2 } orch_doctor_verdict;

/* One line of the report. */
typedef struct orch_doctor_row {
    char check[16];    /* reach | tls | rtt | clock | bandwidth | mtu | gpus | ports | rendezvous */
    char subject[160]; /* "us-east->eu-west", "eu-west at 10.0.0.2:29500", "us-east/node1" */
    orch_doctor_verdict verdict;
    double measured, expected; /* in `unit`; expected 0 when the topology gives none */
    char unit[8];              /* "ms", "Mbit/s", "bytes", "" */
    char detail[384];
    char fix[256]; /* what to do about a failure; empty when it passed */
} orch_doctor_row;

/* The figures measured on one directional link (indexed like the topology's links). */
typedef struct orch_doctor_link {
    int measured;          /* 1 when the figures below come from this run */
    double rtt_ms;         /* smallest probe round trip */
    double bandwidth_gbps; /* 0 when the transfer did not finish */
    double clock_offset_ms;
    int mtu; /* path MTU, bytes */
} orch_doctor_link;

typedef struct orch_doctor_report {
    orch_doctor_row *rows; /* (n_rows) */
    int n_rows, cap_rows;
    orch_doctor_link *links; /* (n_links) as the topology's */
    int n_links;
} orch_doctor_report;

typedef struct orch_doctor_opts {
    const xdc_topology *topo;
    int region;            /* this node's region (index) */
    const char *certs_dir; /* CERTS/REGION-0.{pem,key}, CERTS/ca.pem */
    /* Where region r's probe server is: endpoints[r] "HOST:PORT", or NULL for its topology wan_endpoint. */
    const char *const *endpoints;
    int node_checks;                    /* also check this node (GPUs, ports, rendezvous), not only its links */
    orch_device device;                 /* ORCH_DEVICE_TOPOLOGY unless overridden */
    const orch_device_probe *gpu_probe; /* NULL: GPUs skipped */
    const int *ports;                   /* (n_ports) ports the run binds on this node */
    const char *const *port_owners;     /* (n_ports) what binds each ("metrics of worker 1", "--port") */
    int n_ports;
    const char *rdzv;         /* "HOST:PORT" of the built-in coordinator, "etcd://..." or NULL (skipped) */
    rdzv_flags etcd_tls;      /* etcd: --etcd-cacert/--etcd-cert/--etcd-key (NULL: plain HTTP) */
    int64_t handshake_ms;     /* a handshake (TCP connect, TLS) that takes longer fails */
    int pings;                /* probe round trips per link (>= 1) */
    double probe_seconds;     /* bandwidth transfer sized to take this long at the topology's rate */
    uint64_t probe_bytes_max; /* and never more than this many bytes */
} orch_doctor_opts;

#define ORCH_DOCTOR_OPTS_INIT                                                                                \
    {                                                                                                        \
        .topo = NULL, .region = 0, .certs_dir = NULL, .endpoints = NULL, .node_checks = 1,                   \
        .device = ORCH_DEVICE_TOPOLOGY, .gpu_probe = NULL, .ports = NULL, .port_owners = NULL, .n_ports = 0, \
        .rdzv = NULL, .etcd_tls = {.rdzv = NULL}, .handshake_ms = 15000, .pings = 10, .probe_seconds = 1.0,  \
        .probe_bytes_max = 64u << 20,                                                                        \
    }

/* An empty report for `t` (one orch_doctor_link per topology link). */
xdc_err_t orch_doctor_report_create(const xdc_topology *t, orch_doctor_report **out);
void orch_doctor_report_destroy(orch_doctor_report *r);
/* 1 when no row failed. */
int orch_doctor_report_passed(const orch_doctor_report *r);
/* The first failed row whose check is `check` (NULL: any check), or NULL. */
const orch_doctor_row *orch_doctor_report_find(const orch_doctor_report *r, const char *check,
                                               orch_doctor_verdict verdict);

/* Run every check of node `o->region` and its links into `rep`. Failed checks are rows, not errors:
 * an error return (XDC_ERR_NOMEM, a credential that does not load) means the doctor itself could not run. */
xdc_err_t orch_doctor_run(const orch_doctor_opts *o, orch_doctor_report *rep, xdc_diag *diag);

/* One machine: a probe server per region on 127.0.0.1 and, for every link of o->topo, a relay carrying
 * the same link of `emulated` (another topology with the same regions and links, whose figures stand
 * for the real network; o->topo itself when NULL), then orch_doctor_run from every region in turn
 * (node checks once, for o->region). `stopped` (may be NULL): names of regions whose server is not
 * started, as if their node were down. */
xdc_err_t orch_doctor_emulate(const orch_doctor_opts *o, const xdc_topology *emulated, const char *const *stopped,
                              int n_stopped, orch_doctor_report *rep, xdc_diag *diag);

/* ---- output (orch_doctor_report.c) ---------------------------------------------------------------- */

/* The table, then every failure with what to do about it. */
void orch_doctor_report_print(const orch_doctor_report *r, FILE *f);
/* {"passed": bool, "checks": [{check, subject, verdict, measured, expected, unit, detail, fix}],
 *  "links": [{from, to, measured, rtt_ms, bandwidth_gbps, clock_offset_ms, mtu}]}; xdc_free the text. */
xdc_err_t orch_doctor_report_json(const orch_doctor_report *r, const xdc_topology *t, char **out);
/* A copy of `t` at `path` whose measured links carry the measured RTT, bandwidth and MTU. */
xdc_err_t orch_doctor_write_topology(const orch_doctor_report *r, const xdc_topology *t, const char *path,
                                     xdc_diag *diag);

#endif /* ORCH_DOCTOR_H */
