/* wan_certs.c — the cluster CA and node certificates behind `xdc certs` (OpenSSL API, EC P-256).
 * The CA's subject OU holds the run id; a node certificate names its identity in a SAN URI
 * xdc://RUN/REGION/RANK and is good for both TLS client and server authentication. */
#include "wan/wan_tls.h"
#include "wan/xdc_wan_certs.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static xdc_err_t openssl_fail(xdc_diag *diag, const char *what)
{
    char why[512];
    wan_tls_errq(why, sizeof why);
    xdc_diag_set(diag, "%s: %s", what, why[0] ? why : "OpenSSL failure");
    return XDC_ERR_INTERNAL;
}

static int add_ext(X509 *subject, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, subject, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext) return 0;
    int ok = X509_add_ext(subject, ext, -1);
    X509_EXTENSION_free(ext);
    return ok;
}

/* A fresh certificate body: version 3, random positive serial, validity window, subject, public key. */
static X509 *cert_new(EVP_PKEY *key, const xdc_wan_cert_opts *o, const char *cn, const char *ou)
{
    X509 *x = X509_new();
    unsigned char serial[16];
    if (!x || RAND_bytes(serial, sizeof serial) != 1) goto fail;
    serial[0] &= 0x7f;
    BIGNUM *bn = BN_bin2bn(serial, sizeof serial, NULL);
    int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
    BN_free(bn);
    if (!ok || X509_set_version(x, 2) != 1) goto fail;
    if (!X509_gmtime_adj(X509_getm_notBefore(x), (long)o->not_before_s)) goto fail;
    if (!X509_time_adj_ex(X509_getm_notAfter(x), o->days, (long)o->not_before_s, NULL)) goto fail;
    X509_NAME *name = X509_get_subject_name(x);
    if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"xdc", -1, -1, 0)) goto fail;
    if (!X509_NAME_add_entry_by_txt(name, "OU", MBSTRING_UTF8, (const unsigned char *)ou, -1, -1, 0)) goto fail;
    if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0)) goto fail;
    if (X509_set_pubkey(x, key) != 1) goto fail;
    return x;
fail:
    X509_free(x);
    return NULL;
}

static xdc_err_t write_pem(const char *path, EVP_PKEY *key, X509 *cert, xdc_diag *diag)
{
    /* Keys are private to their owner; O_EXCL refuses to clobber an existing CA or node key. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, key ? 0600 : 0644);
    if (fd < 0) {
        xdc_diag_set(diag, "%s: cannot create: %m", path);
        return XDC_ERR_IO;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        xdc_diag_set(diag, "%s: %m", path);
        return XDC_ERR_IO;
    }
    int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, cert);
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        xdc_diag_set(diag, "%s: write failed", path);
        return XDC_ERR_IO;
    }
    return XDC_OK;
}

static xdc_err_t check_opts(const xdc_wan_cert_opts *o, int node, xdc_diag *diag)
{
    if (!o->dir || !o->dir[0]) {
        xdc_diag_set(diag, "certificate directory is required (--dir)");
        return XDC_ERR_INVALID;
    }
    if (o->days < 1 || o->days > 36500) {
        xdc_diag_set(diag, "validity of %d days is out of range (1..36500)", o->days);
        return XDC_ERR_INVALID;
    }
    char uri[256];
    snprintf(uri, sizeof uri, "xdc://%s/%s/%d", o->run ? o->run : "run", node ? (o->region ? o->region : "") : "ca",
             node ? o->rank : 0);
    xdc_wan_identity id;
    return xdc_wan_identity_parse(uri, &id, diag) == XDC_OK ? XDC_OK : XDC_ERR_INVALID;
}

xdc_err_t xdc_wan_cert_init_ca(const xdc_wan_cert_opts *o, xdc_diag *diag)
{
    XDC_CHECK(check_opts(o, 0, diag));
    const char *run = o->run ? o->run : "run";
    char cert_path[1024], key_path[1024];
    snprintf(cert_path, sizeof cert_path, "%s/ca.pem", o->dir);
    snprintf(key_path, sizeof key_path, "%s/ca.key", o->dir);
    if (access(cert_path, F_OK) == 0 || access(key_path, F_OK) == 0) {
        xdc_diag_set(diag, "%s: a CA already exists here; refusing to replace it", o->dir);
        return XDC_ERR_INVALID;
    }
    xdc_err_t rc = XDC_OK;
    X509 *x = NULL;
    EVP_PKEY *key = EVP_EC_gen("P-256");
    if (!key) return openssl_fail(diag, "EC P-256 key generation");
    char cn[128];
    snprintf(cn, sizeof cn, "xdc cluster CA %s", run);
    x = cert_new(key, o, cn, run);
    if (!x || X509_set_issuer_name(x, X509_get_subject_name(x)) != 1 ||
        !add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") ||
        !add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        !add_ext(x, x, NID_subject_key_identifier, "hash") || X509_sign(x, key, EVP_sha256()) <= 0) {
        rc = openssl_fail(diag, "building the CA certificate");
        goto done;
    }
    XDC_CHECK_GOTO(write_pem(key_path, key, NULL, diag), rc, done);
    XDC_CHECK_GOTO(write_pem(cert_path, NULL, x, diag), rc, done);
done:
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

static xdc_err_t load_ca(const char *dir, X509 **cert, EVP_PKEY **key, xdc_diag *diag)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        xdc_diag_set(diag, "%s: %m (run `xdc certs init --dir %s` first)", path, dir);
        return XDC_ERR_IO;
    }
    *cert = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!*cert) return openssl_fail(diag, path);
    snprintf(path, sizeof path, "%s/ca.key", dir);
    f = fopen(path, "r");
    if (!f) {
        xdc_diag_set(diag, "%s: %m", path);
        return XDC_ERR_IO;
    }
    *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    if (!*key) return openssl_fail(diag, path);
    return XDC_OK;
}

xdc_err_t xdc_wan_cert_issue(const xdc_wan_cert_opts *o, char *cert_out, size_t cert_cap, char *key_out, size_t key_cap,
                             xdc_diag *diag)
{
    xdc_err_t rc;
    X509 *ca = NULL, *x = NULL;
    EVP_PKEY *ca_key = NULL, *key = NULL;
    XDC_CHECK_GOTO(load_ca(o->dir, &ca, &ca_key, diag), rc, done);
    char run[XDC_WAN_NAME_MAX] = "run";
    if (o->run) {
        snprintf(run, sizeof run, "%s", o->run);
    } else {
        X509_NAME_get_text_by_NID(X509_get_subject_name(ca), NID_organizationalUnitName, run, sizeof run);
    }
    xdc_wan_cert_opts eff = *o;
    eff.run = run;
    XDC_CHECK_GOTO(check_opts(&eff, 1, diag), rc, done);
    char cn[160], san[256], cert_path[1024], key_path[1024];
    snprintf(cn, sizeof cn, "%s/%d", o->region, o->rank);
    snprintf(san, sizeof san, "URI:xdc://%s/%s/%d", run, o->region, o->rank);
    snprintf(cert_path, sizeof cert_path, "%s/%s-%d.pem", o->dir, o->region, o->rank);
    snprintf(key_path, sizeof key_path, "%s/%s-%d.key", o->dir, o->region, o->rank);
    key = EVP_EC_gen("P-256");
    if (!key) {
        rc = openssl_fail(diag, "EC P-256 key generation");
        goto done;
    }
    x = cert_new(key, &eff, cn, run);
    if (!x || X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
        !add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") ||
        !add_ext(x, ca, NID_key_usage, "critical,digitalSignature,keyAgreement") ||
        !add_ext(x, ca, NID_ext_key_usage, "serverAuth,clientAuth") || !add_ext(x, ca, NID_subject_alt_name, san) ||
        !add_ext(x, ca, NID_authority_key_identifier, "keyid:always") || X509_sign(x, ca_key, EVP_sha256()) <= 0) {
        rc = openssl_fail(diag, "building the node certificate");
        goto done;
    }
    XDC_CHECK_GOTO(write_pem(key_path, key, NULL, diag), rc, done);
    XDC_CHECK_GOTO(write_pem(cert_path, NULL, x, diag), rc, done);
    if (cert_out) snprintf(cert_out, cert_cap, "%s", cert_path);
    if (key_out) snprintf(key_out, key_cap, "%s", key_path);
done:
    X509_free(ca);
    X509_free(x);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(key);
    return rc;
}
