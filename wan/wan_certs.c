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

#include <errno.h>
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

typedef enum { PEM_KEY, PEM_CERT, PEM_CSR, PEM_CRL } pem_kind;

/* Write one PEM object to a new file: O_EXCL refuses to clobber an existing CA, key or certificate and
 * O_NOFOLLOW to write through a symlink someone planted; keys are private to their owner (0600). */
static xdc_err_t write_pem(const char *path, pem_kind kind, const void *obj, xdc_diag *diag)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kind == PEM_KEY ? 0600 : 0644);
    if (fd < 0) {
        xdc_diag_set(diag, "%s: cannot create: %m%s", path, errno == EEXIST ? " (refusing to replace it)" : "");
        return XDC_ERR_IO;
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        xdc_diag_set(diag, "%s: %m", path);
        return XDC_ERR_IO;
    }
    int ok = 0;
    switch (kind) {
    case PEM_KEY: ok = PEM_write_PrivateKey(f, obj, NULL, NULL, 0, NULL, NULL); break;
    case PEM_CERT: ok = PEM_write_X509(f, obj); break;
    case PEM_CSR: ok = PEM_write_X509_REQ(f, obj); break;
    case PEM_CRL: ok = PEM_write_X509_CRL(f, obj); break;
    }
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

static xdc_err_t crl_write(const char *path, X509 *ca, EVP_PKEY *ca_key, X509_CRL *crl, xdc_diag *diag);

xdc_err_t xdc_wan_cert_init_ca(const xdc_wan_cert_opts *o, xdc_diag *diag)
{
    XDC_CHECK(check_opts(o, 0, diag));
    const char *run = o->run ? o->run : "run";
    char cert_path[1024], key_path[1024], crl_path[1024];
    snprintf(cert_path, sizeof cert_path, "%s/ca.pem", o->dir);
    snprintf(key_path, sizeof key_path, "%s/ca.key", o->dir);
    snprintf(crl_path, sizeof crl_path, "%s/crl.pem", o->dir);
    if (access(cert_path, F_OK) == 0 || access(key_path, F_OK) == 0 || access(crl_path, F_OK) == 0) {
        xdc_diag_set(diag, "%s: a CA already exists here; refusing to replace it", o->dir);
        return XDC_ERR_INVALID;
    }
    xdc_err_t rc = XDC_OK;
    X509 *x = NULL;
    X509_CRL *crl = NULL;
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
    XDC_CHECK_GOTO(write_pem(key_path, PEM_KEY, key, diag), rc, done);
    XDC_CHECK_GOTO(write_pem(cert_path, PEM_CERT, x, diag), rc, done);
    /* An empty revocation list from the start, handed out with ca.pem: a process that starts with a CRL
     * picks up every later revocation without a restart (xdc_wan_config.crl_path). */
    crl = X509_CRL_new();
    if (!crl || X509_CRL_set_version(crl, 1) != 1) {
        rc = XDC_ERR_NOMEM;
        goto done;
    }
    rc = crl_write(crl_path, x, key, crl, diag);
done:
    X509_CRL_free(crl);
    X509_free(x);
    EVP_PKEY_free(key);
    return rc;
}

/* The CA in DIR: its certificate, its run (the subject OU) and, when key is not NULL, its private key. A
 * missing or unreadable CA is a configuration problem of the CA host. */
static xdc_err_t load_ca(const char *dir, X509 **cert, EVP_PKEY **key, char *run, size_t run_cap, xdc_diag *diag)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/ca.pem", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        xdc_diag_set(diag, "%s: %m (run `xdc certs init --dir %s` first)", path, dir);
        return XDC_ERR_CONFIG;
    }
    *cert = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!*cert) {
        openssl_fail(diag, path);
        return XDC_ERR_CONFIG;
    }
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(*cert), NID_organizationalUnitName, run, (int)run_cap) <= 0) {
        xdc_diag_set(diag, "%s: the CA names no run (no OU in its subject)", path);
        return XDC_ERR_CONFIG;
    }
    if (!key) return XDC_OK;
    snprintf(path, sizeof path, "%s/ca.key", dir);
    f = fopen(path, "r");
    if (!f) {
        xdc_diag_set(diag, "%s: %m (the CA's key lives only on the CA host)", path);
        return XDC_ERR_CONFIG;
    }
    *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    if (!*key) {
        openssl_fail(diag, path);
        return XDC_ERR_CONFIG;
    }
    if (X509_check_private_key(*cert, *key) != 1) {
        xdc_diag_set(diag, "%s does not belong to %s/ca.pem", path, dir);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

/* A node certificate for `key` naming `id` (CN "REGION/RANK", or "REGION/RANK@HOST" when host is not
 * empty), signed by the CA: CA:FALSE, TLS client and server, the SAN URI its only name. */
static X509 *node_cert_build(X509 *ca, EVP_PKEY *ca_key, EVP_PKEY *key, const xdc_wan_identity *id, const char *host,
                             const xdc_wan_cert_opts *o)
{
    char cn[200], san[256];
    snprintf(cn, sizeof cn, "%s/%d%s%s", id->region, id->rank, host && host[0] ? "@" : "", host ? host : "");
    snprintf(san, sizeof san, "URI:xdc://%s/%s/%d", id->run, id->region, id->rank);
    X509 *x = cert_new(key, o, cn, id->run);
    if (!x || X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
        !add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") ||
        !add_ext(x, ca, NID_key_usage, "critical,digitalSignature,keyAgreement") ||
        !add_ext(x, ca, NID_ext_key_usage, "serverAuth,clientAuth") || !add_ext(x, ca, NID_subject_alt_name, san) ||
        !add_ext(x, ca, NID_authority_key_identifier, "keyid:always") || X509_sign(x, ca_key, EVP_sha256()) <= 0) {
        X509_free(x);
        return NULL;
    }
    return x;
}

/* The identity of node options (run given), checked as a certificate would be. */
static xdc_err_t node_identity(const xdc_wan_cert_opts *o, xdc_wan_identity *id, xdc_diag *diag)
{
    XDC_CHECK(check_opts(o, 1, diag));
    char uri[256];
    snprintf(uri, sizeof uri, "xdc://%s/%s/%d", o->run, o->region, o->rank);
    return xdc_wan_identity_parse(uri, id, diag) == XDC_OK ? XDC_OK : XDC_ERR_INVALID;
}

xdc_err_t xdc_wan_cert_issue(const xdc_wan_cert_opts *o, char *cert_out, size_t cert_cap, char *key_out, size_t key_cap,
                             xdc_diag *diag)
{
    xdc_err_t rc;
    X509 *ca = NULL, *x = NULL;
    EVP_PKEY *ca_key = NULL, *key = NULL;
    char run[XDC_WAN_NAME_MAX];
    XDC_CHECK_GOTO(load_ca(o->dir, &ca, &ca_key, run, sizeof run, diag), rc, done);
    xdc_wan_cert_opts eff = *o;
    if (!eff.run) eff.run = run;
    xdc_wan_identity id;
    XDC_CHECK_GOTO(node_identity(&eff, &id, diag), rc, done);
    char cert_path[1024], key_path[1024];
    snprintf(cert_path, sizeof cert_path, "%s/%s-%d.pem", o->dir, o->region, o->rank);
    snprintf(key_path, sizeof key_path, "%s/%s-%d.key", o->dir, o->region, o->rank);
    key = EVP_EC_gen("P-256");
    if (!key) {
        rc = openssl_fail(diag, "EC P-256 key generation");
        goto done;
    }
    if (!(x = node_cert_build(ca, ca_key, key, &id, NULL, &eff))) {
        rc = openssl_fail(diag, "building the node certificate");
        goto done;
    }
    XDC_CHECK_GOTO(write_pem(key_path, PEM_KEY, key, diag), rc, done);
    XDC_CHECK_GOTO(write_pem(cert_path, PEM_CERT, x, diag), rc, done);
    if (cert_out) snprintf(cert_out, cert_cap, "%s", cert_path);
    if (key_out) snprintf(key_out, key_cap, "%s", key_path);
done:
    X509_free(ca);
    X509_free(x);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(key);
    return rc;
}

/* ---- per-node identities: request on the node, sign on the CA host ---------------------------------- */

xdc_err_t xdc_wan_cert_request(const xdc_wan_cert_opts *o, char *csr_out, size_t csr_cap, char *key_out, size_t key_cap,
                               xdc_diag *diag)
{
    if (!o->run) {
        xdc_diag_set(diag, "--run is required: the run the CA signs for");
        return XDC_ERR_INVALID;
    }
    xdc_wan_identity id;
    XDC_CHECK(node_identity(o, &id, diag));
    char host[256] = "";
    if (o->host) snprintf(host, sizeof host, "%s", o->host);
    else if (gethostname(host, sizeof host) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    if (host[0] && !wan_tls_valid_name(host, strlen(host))) {
        xdc_diag_set(diag, "host '%s' is not a name (letters, digits, - _ ., under %d characters)", host,
                     XDC_WAN_NAME_MAX);
        return XDC_ERR_INVALID;
    }
    char csr_path[1024], key_path[1024];
    snprintf(csr_path, sizeof csr_path, "%s/%s-%d.csr", o->dir, id.region, id.rank);
    snprintf(key_path, sizeof key_path, "%s/%s-%d.key", o->dir, id.region, id.rank);
    if (access(csr_path, F_OK) == 0) { /* before the key exists: a refusal leaves nothing behind */
        xdc_diag_set(diag, "%s already exists; refusing to replace it", csr_path);
        return XDC_ERR_IO;
    }
    xdc_err_t rc = XDC_OK;
    X509_REQ *req = X509_REQ_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    EVP_PKEY *key = EVP_EC_gen("P-256");
    char cn[200], san[256];
    snprintf(cn, sizeof cn, "%s/%d%s%s", id.region, id.rank, host[0] ? "@" : "", host);
    snprintf(san, sizeof san, "URI:xdc://%s/%s/%d", id.run, id.region, id.rank);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san);
    X509_NAME *name = req ? X509_REQ_get_subject_name(req) : NULL;
    if (!req || !exts || !key || !ext || !sk_X509_EXTENSION_push(exts, ext) ||
        !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *)"xdc", -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(name, "OU", MBSTRING_UTF8, (const unsigned char *)id.run, -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) ||
        X509_REQ_set_pubkey(req, key) != 1 || X509_REQ_add_extensions(req, exts) != 1 ||
        X509_REQ_sign(req, key, EVP_sha256()) <= 0) {
        if (ext && (!exts || sk_X509_EXTENSION_num(exts) == 0)) X509_EXTENSION_free(ext);
        rc = openssl_fail(diag, "building the certificate request");
        goto done;
    }
    XDC_CHECK_GOTO(write_pem(key_path, PEM_KEY, key, diag), rc, done);
    rc = write_pem(csr_path, PEM_CSR, req, diag);
    if (rc != XDC_OK) {
        unlink(key_path); /* the key this call just made, useless without its request */
        goto done;
    }
    if (csr_out) snprintf(csr_out, csr_cap, "%s", csr_path);
    if (key_out) snprintf(key_out, key_cap, "%s", key_path);
done:
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_REQ_free(req);
    EVP_PKEY_free(key);
    return rc;
}

/* The keys a CA signs: EC on P-256 or P-384, RSA of 2048 bits or more. */
static xdc_err_t check_key(EVP_PKEY *key, xdc_diag *diag)
{
    if (EVP_PKEY_get_base_id(key) == EVP_PKEY_EC) {
        char group[64] = "";
        size_t n = 0;
        EVP_PKEY_get_group_name(key, group, sizeof group, &n);
        if (strcmp(group, "prime256v1") == 0 || strcmp(group, "secp384r1") == 0) return XDC_OK;
        xdc_diag_set(diag, "its EC key is on curve '%s'; P-256 or P-384 is accepted", group[0] ? group : "unknown");
        return XDC_ERR_CORRUPT;
    }
    if (EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA) {
        if (EVP_PKEY_get_bits(key) >= 2048) return XDC_OK;
        xdc_diag_set(diag, "its RSA key has %d bits; at least 2048 are accepted", EVP_PKEY_get_bits(key));
        return XDC_ERR_CORRUPT;
    }
    xdc_diag_set(diag, "its key is of type '%s'; EC (P-256, P-384) or RSA (>= 2048 bits) is accepted",
                 OBJ_nid2sn(EVP_PKEY_get_base_id(key)));
    return XDC_ERR_CORRUPT;
}

/* The identity a request asks for: exactly one requested extension, subjectAltName, holding exactly one
 * name, the URI xdc://RUN/REGION/RANK of the CA's run. */
static xdc_err_t request_identity(X509_REQ *req, const char *ca_run, xdc_wan_identity *id, xdc_diag *diag)
{
    STACK_OF(X509_EXTENSION) *exts = X509_REQ_get_extensions(req);
    GENERAL_NAMES *names = NULL;
    xdc_err_t rc = XDC_ERR_CORRUPT;
    int n_ext = exts ? sk_X509_EXTENSION_num(exts) : 0;
    for (int i = 0; i < n_ext; i++) {
        int nid = OBJ_obj2nid(X509_EXTENSION_get_object(sk_X509_EXTENSION_value(exts, i)));
        if (nid != NID_subject_alt_name) {
            xdc_diag_set(diag, "it requests the extension '%s'; only subjectAltName is accepted",
                         nid == NID_undef ? "unknown" : OBJ_nid2ln(nid));
            goto done;
        }
    }
    if (n_ext != 1) {
        xdc_diag_set(diag, "it carries %d subjectAltName extensions; exactly one is accepted", n_ext);
        goto done;
    }
    names = X509V3_EXT_d2i(sk_X509_EXTENSION_value(exts, 0));
    if (!names || sk_GENERAL_NAME_num(names) != 1) {
        xdc_diag_set(diag, "its subjectAltName holds %d names; exactly one, the URI xdc://RUN/REGION/RANK, is accepted",
                     names ? sk_GENERAL_NAME_num(names) : 0);
        goto done;
    }
    const GENERAL_NAME *gn = sk_GENERAL_NAME_value(names, 0);
    if (gn->type != GEN_URI) {
        xdc_diag_set(diag, "its subjectAltName is not a URI; xdc://RUN/REGION/RANK is accepted");
        goto done;
    }
    int len = ASN1_STRING_length(gn->d.uniformResourceIdentifier);
    const unsigned char *data = ASN1_STRING_get0_data(gn->d.uniformResourceIdentifier);
    char uri[256];
    if (len <= 0 || (size_t)len >= sizeof uri || memchr(data, '\0', (size_t)len)) {
        xdc_diag_set(diag, "its subjectAltName URI is empty, over %zu bytes or holds a NUL", sizeof uri - 1);
        goto done;
    }
    memcpy(uri, data, (size_t)len);
    uri[len] = '\0';
    if (xdc_wan_identity_parse(uri, id, diag) != XDC_OK) goto done;
    if (strcmp(id->run, ca_run) != 0) {
        xdc_diag_set(diag, "it is for run '%s'; this CA signs for run '%s'", id->run, ca_run);
        goto done;
    }
    rc = XDC_OK;
done:
    GENERAL_NAMES_free(names);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    return rc;
}

/* The request's CN, when it has one, must be "REGION/RANK" or "REGION/RANK@HOST" for the same identity;
 * host receives HOST ("" when none). */
static xdc_err_t request_host(X509_REQ *req, const xdc_wan_identity *id, char *host, size_t cap, xdc_diag *diag)
{
    host[0] = '\0';
    char cn[256];
    int n = X509_NAME_get_text_by_NID(X509_REQ_get_subject_name(req), NID_commonName, cn, sizeof cn);
    if (n <= 0) return XDC_OK;
    char want[160];
    int w = snprintf(want, sizeof want, "%s/%d", id->region, id->rank);
    if ((size_t)n < strlen(cn) || strncmp(cn, want, (size_t)w) != 0 || (cn[w] != '\0' && cn[w] != '@') ||
        (cn[w] == '@' && !wan_tls_valid_name(cn + w + 1, strlen(cn + w + 1)))) {
        xdc_diag_set(diag, "its subject CN does not match its identity %s (\"%s\" or \"%s@HOST\" is accepted)", want,
                     want, want);
        return XDC_ERR_CORRUPT;
    }
    if (cn[w] == '@') snprintf(host, cap, "%s", cn + w + 1);
    return XDC_OK;
}

static void hex_of_serial(const ASN1_INTEGER *serial, char *out, size_t cap)
{
    BIGNUM *bn = ASN1_INTEGER_to_BN(serial, NULL);
    char *hex = bn ? BN_bn2hex(bn) : NULL;
    snprintf(out, cap, "%s", hex ? hex : "?");
    OPENSSL_free(hex);
    BN_free(bn);
}

xdc_err_t xdc_wan_cert_sign(const xdc_wan_cert_opts *o, const char *csr_path, const char *cert_path,
                            xdc_wan_cert_issued *out, xdc_diag *diag)
{
    xdc_err_t rc;
    X509 *ca = NULL, *x = NULL;
    EVP_PKEY *ca_key = NULL;
    X509_REQ *req = NULL;
    char run[XDC_WAN_NAME_MAX];
    xdc_wan_cert_issued got;
    memset(&got, 0, sizeof got);
    xdc_wan_cert_opts eff = *o;
    eff.run = "ca"; /* only the validity is checked here; the run is the CA's */
    XDC_CHECK_GOTO(check_opts(&eff, 0, diag), rc, done);
    XDC_CHECK_GOTO(load_ca(o->dir, &ca, &ca_key, run, sizeof run, diag), rc, done);
    FILE *f = fopen(csr_path, "r");
    if (!f) {
        xdc_diag_set(diag, "%s: %m", csr_path);
        rc = XDC_ERR_IO;
        goto done;
    }
    req = PEM_read_X509_REQ(f, NULL, NULL, NULL);
    fclose(f);
    rc = XDC_ERR_CORRUPT;
    EVP_PKEY *key = req ? X509_REQ_get0_pubkey(req) : NULL;
    if (!req || !key) {
        openssl_fail(diag, "not a PEM certificate request");
    } else if (X509_REQ_verify(req, key) != 1) {
        openssl_fail(diag, "its signature does not verify with its own key (altered after it was made?)");
    } else if (check_key(key, diag) == XDC_OK && request_identity(req, run, &got.id, diag) == XDC_OK &&
               request_host(req, &got.id, got.host, sizeof got.host, diag) == XDC_OK) {
        rc = XDC_OK;
    }
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "%s: refused", csr_path);
        goto done;
    }
    if (!(x = node_cert_build(ca, ca_key, key, &got.id, got.host, &eff))) {
        rc = openssl_fail(diag, "building the node certificate");
        goto done;
    }
    XDC_CHECK_GOTO(write_pem(cert_path, PEM_CERT, x, diag), rc, done);
    hex_of_serial(X509_get0_serialNumber(x), got.serial, sizeof got.serial);
    if (out) *out = got;
done:
    X509_REQ_free(req);
    X509_free(ca);
    X509_free(x);
    EVP_PKEY_free(ca_key);
    return rc;
}

/* ---- revocation ----------------------------------------------------------------------------------- */

/* The serial to revoke: the certificate's (which must be this CA's) or the hex text's. */
static xdc_err_t revoke_serial(X509 *ca, const char *cert_path, const char *serial_hex, ASN1_INTEGER **out,
                               xdc_diag *diag)
{
    BIGNUM *bn = NULL;
    if (cert_path) {
        FILE *f = fopen(cert_path, "r");
        if (!f) {
            xdc_diag_set(diag, "%s: %m", cert_path);
            return XDC_ERR_IO;
        }
        X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
        fclose(f);
        if (!x) {
            openssl_fail(diag, cert_path);
            return XDC_ERR_CORRUPT;
        }
        int ours = X509_check_issued(ca, x) == X509_V_OK && X509_verify(x, X509_get0_pubkey(ca)) == 1;
        if (ours) *out = ASN1_INTEGER_dup(X509_get0_serialNumber(x));
        X509_free(x);
        if (!ours) {
            ERR_clear_error();
            xdc_diag_set(diag, "%s was not issued by this CA", cert_path);
            return XDC_ERR_CORRUPT;
        }
    } else {
        size_t n = strlen(serial_hex);
        int hex = n > 0 && n <= 40 && strspn(serial_hex, "0123456789abcdefABCDEF") == n;
        if (!hex || !BN_hex2bn(&bn, serial_hex) || BN_is_zero(bn)) {
            BN_free(bn);
            xdc_diag_set(diag, "serial '%s' is not 1 to 40 hex digits naming a non-zero number", serial_hex);
            return XDC_ERR_INVALID;
        }
        *out = BN_to_ASN1_INTEGER(bn, NULL);
        BN_free(bn);
    }
    return *out ? XDC_OK : XDC_ERR_NOMEM;
}

/* The CA's current CRL (DIR/crl.pem, checked against the CA), or a new empty one when there is none. */
static xdc_err_t crl_load(const char *path, X509 *ca, X509_CRL **out, xdc_diag *diag)
{
    FILE *f = fopen(path, "r");
    if (!f && errno == ENOENT) {
        *out = X509_CRL_new();
        return *out && X509_CRL_set_version(*out, 1) == 1 ? XDC_OK : XDC_ERR_NOMEM;
    }
    if (!f) {
        xdc_diag_set(diag, "%s: %m", path);
        return XDC_ERR_IO;
    }
    *out = PEM_read_X509_CRL(f, NULL, NULL, NULL);
    fclose(f);
    if (!*out || X509_CRL_verify(*out, X509_get0_pubkey(ca)) != 1) {
        openssl_fail(diag, path);
        xdc_diag_prefix(diag, "%s is not a CRL this CA signed; move it away and revoke again", path);
        return XDC_ERR_CORRUPT;
    }
    return XDC_OK;
}

/* The next CRL number: one more than the current one (0 for a new CRL). */
static int crl_bump_number(X509_CRL *crl)
{
    ASN1_INTEGER *cur = X509_CRL_get_ext_d2i(crl, NID_crl_number, NULL, NULL);
    long next = cur ? ASN1_INTEGER_get(cur) + 1 : 0;
    ASN1_INTEGER_free(cur);
    ASN1_INTEGER *num = ASN1_INTEGER_new();
    int idx = X509_CRL_get_ext_by_NID(crl, NID_crl_number, -1);
    if (idx >= 0) X509_EXTENSION_free(X509_CRL_delete_ext(crl, idx));
    int ok = num && ASN1_INTEGER_set(num, next) == 1 && X509_CRL_add1_ext_i2d(crl, NID_crl_number, num, 0, 0) == 1;
    ASN1_INTEGER_free(num);
    return ok;
}

/* Sign `crl` as the CA's next CRL (issuer, this update now, next update when the CA expires, CRL number
 * one higher) and put it at `path`: written beside it and renamed over it, so a reader sees the old CRL or
 * the new one, whole. A temporary file left by a crashed revoke is refused by write_pem (O_EXCL), named. */
static xdc_err_t crl_write(const char *path, X509 *ca, EVP_PKEY *ca_key, X509_CRL *crl, xdc_diag *diag)
{
    ASN1_TIME *now = X509_gmtime_adj(NULL, 0);
    /* Valid until the CA itself expires: a run never meets a stale CRL, which would refuse every peer. */
    int ok = now && X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca)) == 1 &&
             X509_CRL_set1_lastUpdate(crl, now) == 1 && X509_CRL_set1_nextUpdate(crl, X509_get0_notAfter(ca)) == 1 &&
             crl_bump_number(crl) && X509_CRL_sort(crl) == 1 && X509_CRL_sign(crl, ca_key, EVP_sha256()) > 0;
    ASN1_TIME_free(now);
    if (!ok) return openssl_fail(diag, "signing the CRL");
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    XDC_CHECK(write_pem(tmp, PEM_CRL, crl, diag));
    if (rename(tmp, path) != 0) {
        xdc_diag_set(diag, "%s -> %s: %m", tmp, path);
        unlink(tmp);
        return XDC_ERR_IO;
    }
    return XDC_OK;
}

xdc_err_t xdc_wan_cert_revoke(const char *dir, const char *cert_path, const char *serial_hex, int *already,
                              char *serial_out, size_t serial_cap, xdc_diag *diag)
{
    *already = 0;
    if (!dir || !dir[0] || (!cert_path) == (!serial_hex)) {
        xdc_diag_set(diag, "revoke needs the CA directory and either a certificate or a serial");
        return XDC_ERR_INVALID;
    }
    xdc_err_t rc;
    X509 *ca = NULL;
    EVP_PKEY *ca_key = NULL;
    X509_CRL *crl = NULL;
    ASN1_INTEGER *serial = NULL;
    X509_REVOKED *rev = NULL;
    ASN1_TIME *now = NULL;
    char run[XDC_WAN_NAME_MAX], path[1024];
    XDC_CHECK_GOTO(load_ca(dir, &ca, &ca_key, run, sizeof run, diag), rc, done);
    XDC_CHECK_GOTO(revoke_serial(ca, cert_path, serial_hex, &serial, diag), rc, done);
    if (serial_out) hex_of_serial(serial, serial_out, serial_cap);
    snprintf(path, sizeof path, "%s/crl.pem", dir);
    XDC_CHECK_GOTO(crl_load(path, ca, &crl, diag), rc, done);
    STACK_OF(X509_REVOKED) *list = X509_CRL_get_REVOKED(crl);
    for (int i = 0; list && i < sk_X509_REVOKED_num(list); i++)
        if (ASN1_INTEGER_cmp(X509_REVOKED_get0_serialNumber(sk_X509_REVOKED_value(list, i)), serial) == 0) {
            *already = 1;
            rc = XDC_OK;
            goto done;
        }
    rc = XDC_ERR_INTERNAL;
    now = X509_gmtime_adj(NULL, 0);
    rev = X509_REVOKED_new();
    /* Valid until the CA itself expires: a run never meets a stale CRL, which would refuse every peer. */
    if (!now || !rev || X509_REVOKED_set_serialNumber(rev, serial) != 1 ||
        X509_REVOKED_set_revocationDate(rev, now) != 1 || X509_CRL_add0_revoked(crl, rev) != 1) {
        openssl_fail(diag, "adding the serial to the CRL");
        goto done;
    }
    rev = NULL; /* the CRL owns it */
    rc = crl_write(path, ca, ca_key, crl, diag);
done:
    ASN1_TIME_free(now);
    X509_REVOKED_free(rev);
    ASN1_INTEGER_free(serial);
    X509_CRL_free(crl);
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    return rc;
}
