/* orch_creds.c — a process's TLS credentials: its own key and certificate, the cluster CA and the CRL
 * (the lookup order is in orch_creds.h). */
#include "orchestrator/launch/orch_creds.h"

#include "common/xdc_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The flag's value, else the variable's; *from names which ("" when neither). */
static const char *pick(const char *flag_value, const char *flag, const char *var, const char **from)
{
    const char *env = getenv(var);
    *from = flag_value ? flag : env && env[0] ? var : "";
    return flag_value ? flag_value : env && env[0] ? env : NULL;
}

static xdc_err_t readable(const char *path, const char *what, const char *from, xdc_diag *diag)
{
    if (access(path, R_OK) == 0) return XDC_OK;
    xdc_diag_set(diag, "%s %s (from %s): %s", what, path, from, strerror(errno));
    return XDC_ERR_CONFIG;
}

int orch_creds_given(const orch_creds_flags *f)
{
    const char *from;
    return pick(f ? f->cert_dir : NULL, "--cert-dir", "XDC_CERT_DIR", &from) != NULL ||
           pick(f ? f->ca : NULL, "--ca", "XDC_CA", &from) != NULL;
}

xdc_err_t orch_creds_resolve(const orch_creds_flags *f, const char *run_dir, orch_creds *c, xdc_diag *diag)
{
    static const orch_creds_flags none = {0};
    if (!f) f = &none;
    memset(c, 0, sizeof *c);
    const char *from;
    const char *dir = pick(f->cert_dir, "--cert-dir", "XDC_CERT_DIR", &from);
    if (dir) snprintf(c->dir, sizeof c->dir, "%s", dir);
    else snprintf(c->dir, sizeof c->dir, "%s/certs", run_dir);
    snprintf(c->dir_from, sizeof c->dir_from, "%s", dir ? from : "run folder");
    const char *ca = pick(f->ca, "--ca", "XDC_CA", &from);
    if (ca) snprintf(c->ca, sizeof c->ca, "%s", ca);
    else snprintf(c->ca, sizeof c->ca, "%s/ca.pem", c->dir);
    XDC_CHECK(readable(c->ca, "CA certificate", ca ? from : c->dir_from, diag));
    const char *crl = pick(f->crl, "--crl", "XDC_CRL", &from);
    if (crl) {
        snprintf(c->crl, sizeof c->crl, "%s", crl);
        return readable(c->crl, "CRL", from, diag);
    }
    /* crl.pem beside the CA certificate: where `xdc certs revoke` writes it on the CA host, and where an
     * operator copying it to a node puts it next to the CA certificate. */
    const char *slash = strrchr(c->ca, '/');
    int n = slash ? (int)(slash - c->ca) : 1;
    snprintf(c->crl, sizeof c->crl, "%.*s/crl.pem", n, slash ? c->ca : ".");
    if (access(c->crl, F_OK) != 0) c->crl[0] = '\0';
    return XDC_OK;
}

xdc_err_t orch_creds_member(orch_creds *c, const char *run, const char *region, int rank, xdc_diag *diag)
{
    snprintf(c->cert, sizeof c->cert, "%s/%s-%d.pem", c->dir, region, rank);
    snprintf(c->key, sizeof c->key, "%s/%s-%d.key", c->dir, region, rank);
    const char *what = "key";
    xdc_err_t rc = readable(c->key, "key", c->dir_from, diag);
    if (rc == XDC_OK) what = "certificate", rc = readable(c->cert, "certificate", c->dir_from, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "no %s for %s/%d", what, region, rank);
        size_t len = strlen(diag ? diag->msg : "");
        if (diag && len < sizeof diag->msg)
            snprintf(diag->msg + len, sizeof diag->msg - len,
                     " (make it on this node with `xdc certs request --dir %s --run %s --region %s --rank %d`, and "
                     "have the CA host sign the request with `xdc certs sign`)",
                     c->dir, run, region, rank);
        return rc;
    }
    struct stat st;
    if (stat(c->key, &st) == 0 && (st.st_mode & 077))
        XDC_WARN(XDC_SUB_ORCH, "key %s can be read by others (mode %03o); it should be 0600", c->key,
                 (unsigned)(st.st_mode & 0777));
    return XDC_OK;
}

void orch_creds_apply(const orch_creds *c, xdc_wan_config *wc)
{
    wc->cert_path = c->cert;
    wc->key_path = c->key;
    wc->ca_path = c->ca;
    wc->crl_path = c->crl[0] ? c->crl : NULL;
}

int orch_creds_argv(const orch_creds *c, char **argv)
{
    int n = 0;
    argv[n++] = "--cert-dir";
    argv[n++] = (char *)c->dir;
    argv[n++] = "--ca";
    argv[n++] = (char *)c->ca;
    if (c->crl[0]) {
        argv[n++] = "--crl";
        argv[n++] = (char *)c->crl;
    }
    return n;
}

int orch_creds_env(const orch_creds *c, char (*buf)[ORCH_CREDS_ENV_LEN], const char **env)
{
    int n = 0;
    snprintf(buf[n], ORCH_CREDS_ENV_LEN, "XDC_CERT_DIR=%s", c->dir);
    env[n] = buf[n];
    n++;
    snprintf(buf[n], ORCH_CREDS_ENV_LEN, "XDC_CA=%s", c->ca);
    env[n] = buf[n];
    n++;
    if (c->crl[0]) {
        snprintf(buf[n], ORCH_CREDS_ENV_LEN, "XDC_CRL=%s", c->crl);
        env[n] = buf[n];
        n++;
    }
    return n;
}
