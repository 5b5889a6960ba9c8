/* orch_creds.h — where a process of a run finds its TLS credentials: its own key and certificate
 * (REGION-RANK.key and REGION-RANK.pem, the names `xdc certs request` and `xdc certs issue` write) in a
 * certificate folder, the cluster CA certificate and, when there is one, the CA's revocation list. The
 * same rule for `xdc coordinator`, `xdc agent` and `xdc worker` (docs/security.md):
 *   folder: --cert-dir, else XDC_CERT_DIR, else RUN_DIR/certs (what `xdc launch` fills);
 *   CA:     --ca, else XDC_CA, else FOLDER/ca.pem;
 *   CRL:    --crl, else XDC_CRL, else crl.pem beside the CA certificate when that file exists.
 * A node needs only its own key: nothing here reads the CA's key or another member's. */
#ifndef ORCH_CREDS_H
#define ORCH_CREDS_H

#include "common/xdc_err.h"
#include "wan/xdc_wan.h"

typedef struct orch_creds_flags {
    const char *cert_dir, *ca, *crl; /* NULL: not given on the command line */
} orch_creds_flags;

typedef struct orch_creds {
    char dir[512], ca[512], crl[512]; /* crl "" when none */
    char cert[700], key[700];         /* the member's own, after orch_creds_member() */
    char dir_from[32];                /* what gave the folder: "--cert-dir", "XDC_CERT_DIR", "run folder" */
} orch_creds;

/* Resolve the folder, CA and CRL for a process of the run in run_dir (flags may be NULL). An explicit
 * CA or CRL that cannot be read is XDC_ERR_CONFIG naming it and where it came from. */
xdc_err_t orch_creds_resolve(const orch_creds_flags *f, const char *run_dir, orch_creds *c, xdc_diag *diag);

/* 1 when the flags or XDC_CERT_DIR / XDC_CA name the credentials; 0 when they default to RUN_DIR/certs,
 * which `xdc launch` and `xdc coordinator` then fill themselves (a CA and every member's key). */
int orch_creds_given(const orch_creds_flags *f);

/* The key and certificate of member region/rank of run `run` in the folder; XDC_ERR_CONFIG, naming the file, where it
 * came from and how to make it, when either cannot be read. A key that others may read is logged. */
xdc_err_t orch_creds_member(orch_creds *c, const char *run, const char *region, int rank, xdc_diag *diag);

/* Point a WAN configuration at the member's credentials (c must outlive the engine's creation). */
void orch_creds_apply(const orch_creds *c, xdc_wan_config *wc);

/* The flags that hand the resolved folder, CA and CRL to a child process (`xdc agent` -> `xdc worker`,
 * `xdc launch` -> `xdc agent`): up to ORCH_CREDS_ARGV entries written to argv; returns how many. */
#define ORCH_CREDS_ARGV 6
int orch_creds_argv(const orch_creds *c, char **argv);
/* The same as environment entries (XDC_CERT_DIR, XDC_CA, XDC_CRL), for a program that reads them there
 * (`xdc agent --exec`): up to ORCH_CREDS_ENV entries written to buf and pointed at from env; returns how
 * many. */
#define ORCH_CREDS_ENV     3
#define ORCH_CREDS_ENV_LEN 720
int orch_creds_env(const orch_creds *c, char (*buf)[ORCH_CREDS_ENV_LEN], const char **env);

#endif /* ORCH_CREDS_H */
