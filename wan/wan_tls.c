/* wan_tls.c — TLS 1.3-only OpenSSL contexts with mutual authentication, certificate identities
 * (SAN URI xdc://RUN/REGION/RANK) and refusal reasons a human can act on. */
#include "wan/wan_tls.h"

#include "wan/xdc_wan_certs.h"
#include "common/xdc_log.h"
#include "common/xdc_parse.h"

#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wan_tls_errq(char *buf, size_t cap)
{
    buf[0] = '\0';
    unsigned long e;
    size_t used = 0;
    const char *data;
    int flags;
    while ((e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) != 0) {
        char one[256];
        ERR_error_string_n(e, one, sizeof one);
        /* Keep the reason part: "error:0A000412:SSL routines::sslv3 alert bad certificate", and the text
         * attached to it (verify_note's: which certificate was refused). */
        const char *reason = strrchr(one, ':');
        reason = reason ? reason + 1 : one;
        int text = (flags & ERR_TXT_STRING) && data && data[0];
        int n = snprintf(buf + used, cap - used, "%s%s%s%s", used ? "; " : "", reason, text ? ": " : "",
                         text ? data : "");
        if (n < 0 || (size_t)n >= cap - used) break;
        used += (size_t)n;
    }
}

int wan_tls_valid_name(const char *s, size_t n)
{
    if (n == 0 || n >= XDC_WAN_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return 0;
    }
    return 1;
}

xdc_err_t xdc_wan_identity_parse(const char *uri, xdc_wan_identity *out, xdc_diag *diag)
{
    static const char prefix[] = "xdc://";
    if (!uri || strncmp(uri, prefix, sizeof prefix - 1) != 0) {
        xdc_diag_set(diag, "identity '%s' does not start with %s", uri ? uri : "(null)", prefix);
        return XDC_ERR_AUTH;
    }
    const char *run = uri + sizeof prefix - 1;
    const char *s1 = strchr(run, '/');
    const char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
    if (!s1 || !s2 || !wan_tls_valid_name(run, (size_t)(s1 - run)) ||
        !wan_tls_valid_name(s1 + 1, (size_t)(s2 - s1 - 1))) {
        xdc_diag_set(diag, "identity '%s' is not xdc://RUN/REGION/RANK (names: letters, digits, - _ .)", uri);
        return XDC_ERR_AUTH;
    }
    int rank;
    if (xdc_parse_int(s2 + 1, 0, 1000000, &rank, NULL) != XDC_OK) {
        xdc_diag_set(diag, "identity '%s' has no valid rank (0..1000000)", uri);
        return XDC_ERR_AUTH;
    }
    memset(out, 0, sizeof *out);
    memcpy(out->run, run, (size_t)(s1 - run));
    memcpy(out->region, s1 + 1, (size_t)(s2 - s1 - 1));
    out->rank = rank;
    return XDC_OK;
}

xdc_err_t wan_tls_cert_identity(X509 *cert, xdc_wan_identity *out, xdc_diag *diag)
{
    GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    xdc_err_t rc = XDC_ERR_AUTH;
    xdc_diag_set(diag, "certificate has no SAN URI xdc://RUN/REGION/RANK");
    for (int i = 0; names && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *gn = sk_GENERAL_NAME_value(names, i);
        if (gn->type != GEN_URI) continue;
        const unsigned char *data = ASN1_STRING_get0_data(gn->d.uniformResourceIdentifier);
        int len = ASN1_STRING_length(gn->d.uniformResourceIdentifier);
        if (len <= 0 || len > 255 || strncmp((const char *)data, "xdc://", 6) != 0) continue;
        char uri[256];
        memcpy(uri, data, (size_t)len);
        uri[len] = '\0';
        rc = xdc_wan_identity_parse(uri, out, diag);
        break;
    }
    GENERAL_NAMES_free(names);
    return rc;
}

/* The CRL in cfg->crl_path, checked to be the cluster CA's (signature, issuer) and current, so that a wrong
 * or stale file is a configuration error at start instead of every handshake failing later. */
static xdc_err_t crl_read(const char *crl_path, const char *ca_path, X509_CRL **out, struct stat *st, xdc_diag *diag)
{
    char why[512];
    X509 *ca = NULL;
    FILE *f = fopen(crl_path, "r");
    if (!f || fstat(fileno(f), st) != 0) {
        xdc_diag_set(diag, "TLS credentials: CRL %s: %s", crl_path, strerror(errno));
        if (f) fclose(f);
        return XDC_ERR_CONFIG;
    }
    *out = PEM_read_X509_CRL(f, NULL, NULL, NULL);
    fclose(f);
    if ((f = fopen(ca_path, "r")) != NULL) {
        ca = PEM_read_X509(f, NULL, NULL, NULL);
        fclose(f);
    }
    const char *bad = NULL;
    if (!*out) bad = "not a PEM CRL";
    else if (!ca) bad = "the CA certificate cannot be read to check it";
    else if (X509_NAME_cmp(X509_CRL_get_issuer(*out), X509_get_subject_name(ca)) != 0 ||
             X509_CRL_verify(*out, X509_get0_pubkey(ca)) != 1)
        bad = "not issued by the cluster CA";
    else if (X509_CRL_get0_nextUpdate(*out) && X509_cmp_current_time(X509_CRL_get0_nextUpdate(*out)) < 0)
        bad = "expired (its next update is past); revoke again on the CA host to renew it";
    X509_free(ca);
    if (!bad) return XDC_OK;
    wan_tls_errq(why, sizeof why);
    xdc_diag_set(diag, "TLS credentials: CRL %s: %s%s%s", crl_path, bad, why[0] ? ": " : "", why);
    X509_CRL_free(*out);
    *out = NULL;
    return XDC_ERR_CONFIG;
}

/* Verification callback: when the peer's chain is refused, say whose it is (the identity and serial of
 * its own certificate, whichever link failed) in the error queue, where wan_tls_explain() finds it, so
 * the refusal names the key to act on. Verification stops at the first refusal: one note per handshake. */
static int verify_note(int ok, X509_STORE_CTX *store)
{
    if (ok) return ok;
    X509 *cert = X509_STORE_CTX_get0_cert(store);
    xdc_wan_identity id;
    char serial[64] = "?";
    BIGNUM *bn = cert ? ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL) : NULL;
    char *hex = bn ? BN_bn2hex(bn) : NULL;
    if (hex) snprintf(serial, sizeof serial, "%s", hex);
    OPENSSL_free(hex);
    BN_free(bn);
    if (cert && wan_tls_cert_identity(cert, &id, NULL) == XDC_OK)
        ERR_raise_data(ERR_LIB_X509, X509_R_CERTIFICATE_VERIFICATION_FAILED, "xdc://%s/%s/%d serial %s", id.run,
                       id.region, id.rank, serial);
    else ERR_raise_data(ERR_LIB_X509, X509_R_CERTIFICATE_VERIFICATION_FAILED, "serial %s", serial);
    return ok;
}

/* A trust store: the cluster CA and, when crl is not NULL, its CRL checked for every peer's certificate
 * (a listed one fails verification with "certificate revoked"). */
static X509_STORE *store_new(const char *ca_path, X509_CRL *crl)
{
    X509_STORE *st = X509_STORE_new();
    if (!st || X509_STORE_load_file(st, ca_path) != 1 ||
        (crl && (X509_STORE_add_crl(st, crl) != 1 || X509_STORE_set_flags(st, X509_V_FLAG_CRL_CHECK) != 1))) {
        X509_STORE_free(st);
        return NULL;
    }
    return st;
}

static xdc_err_t ctx_new(const xdc_wan_config *cfg, X509_CRL *crl, int server, SSL_CTX **out, xdc_diag *diag)
{
    char why[512];
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    if (!ctx) {
        wan_tls_errq(why, sizeof why);
        xdc_diag_set(diag, "SSL_CTX_new: %s", why);
        return XDC_ERR_TLS;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    /* Partial writes let a non-blocking SSL_write hand back progress instead of retrying whole frames. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_num_tickets(ctx, 0);
    const char *what = cfg->cert_path;
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert_path) != 1) goto bad;
    what = cfg->key_path;
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->key_path, SSL_FILETYPE_PEM) != 1) goto bad;
    if (SSL_CTX_check_private_key(ctx) != 1) goto bad;
    what = cfg->ca_path;
    X509_STORE *store = store_new(cfg->ca_path, crl);
    if (!store) goto bad;
    SSL_CTX_set_cert_store(ctx, store);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (server ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), verify_note);
    *out = ctx;
    return XDC_OK;
bad:
    wan_tls_errq(why, sizeof why);
    xdc_diag_set(diag, "TLS credentials: %s: %s", what, why);
    SSL_CTX_free(ctx);
    return XDC_ERR_CONFIG;
}

xdc_err_t wan_tls_create(const xdc_wan_config *cfg, SSL_CTX **server, SSL_CTX **client, xdc_wan_identity *self,
                         wan_tls_crl *crl_state, xdc_diag *diag)
{
    if (!cfg->cert_path || !cfg->key_path || !cfg->ca_path) {
        xdc_diag_set(diag, "TLS credentials: certificate, key and CA paths are all required");
        return XDC_ERR_CONFIG;
    }
    SSL_CTX *s = NULL, *c = NULL;
    X509_CRL *crl = NULL;
    xdc_err_t rc;
    memset(crl_state, 0, sizeof *crl_state);
    if (cfg->crl_path) {
        if (snprintf(crl_state->path, sizeof crl_state->path, "%s", cfg->crl_path) >= (int)sizeof crl_state->path ||
            snprintf(crl_state->ca_path, sizeof crl_state->ca_path, "%s", cfg->ca_path) >=
                (int)sizeof crl_state->ca_path) {
            xdc_diag_set(diag, "TLS credentials: CRL or CA path longer than %zu bytes", sizeof crl_state->path - 1);
            return XDC_ERR_CONFIG;
        }
        XDC_CHECK(crl_read(cfg->crl_path, cfg->ca_path, &crl, &crl_state->st, diag));
    }
    XDC_CHECK_GOTO(ctx_new(cfg, crl, 1, &s, diag), rc, fail);
    XDC_CHECK_GOTO(ctx_new(cfg, crl, 0, &c, diag), rc, fail);
    rc = wan_tls_cert_identity(SSL_CTX_get0_certificate(s), self, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "our certificate %s", cfg->cert_path);
        rc = XDC_ERR_CONFIG;
        goto fail;
    }
    crl_state->crl = crl; /* each store holds a reference of its own too */
    *server = s;
    *client = c;
    return XDC_OK;
fail:
    X509_CRL_free(crl);
    SSL_CTX_free(s);
    SSL_CTX_free(c);
    return rc;
}

int wan_tls_crl_refresh(wan_tls_crl *c, SSL_CTX *server, SSL_CTX *client, uint64_t now_ns)
{
    if (!c->path[0] || now_ns < c->next_check_ns) return 0;
    c->next_check_ns = now_ns + 1000000000ull;
    struct stat st;
    if (stat(c->path, &st) != 0) {
        XDC_WARN(XDC_SUB_WAN, "CRL %s: %s; the list loaded before stays in force", c->path, strerror(errno));
        c->next_check_ns = now_ns + 60 * 1000000000ull; /* say it once a minute, not every second */
        return 0;
    }
    if (st.st_dev == c->st.st_dev && st.st_ino == c->st.st_ino && st.st_size == c->st.st_size &&
        st.st_mtim.tv_sec == c->st.st_mtim.tv_sec && st.st_mtim.tv_nsec == c->st.st_mtim.tv_nsec)
        return 0;
    X509_CRL *crl = NULL;
    xdc_diag d = {{0}};
    X509_STORE *ss = NULL, *cs = NULL;
    if (crl_read(c->path, c->ca_path, &crl, &st, &d) != XDC_OK || !(ss = store_new(c->ca_path, crl)) ||
        !(cs = store_new(c->ca_path, crl))) {
        XDC_WARN(XDC_SUB_WAN, "new CRL not used, the one loaded before stays in force: %s",
                 d.msg[0] ? d.msg : "cannot build a trust store");
        X509_STORE_free(ss);
        X509_CRL_free(crl);
        c->st = st; /* this version of the file was judged; look again when it changes */
        return 0;
    }
    /* Only the engine thread makes SSL objects and verifies chains, so nothing uses the old stores past
     * this point; SSL_CTX_set_cert_store frees them. */
    SSL_CTX_set_cert_store(server, ss);
    SSL_CTX_set_cert_store(client, cs);
    X509_CRL_free(c->crl);
    c->crl = crl;
    c->st = st;
    const STACK_OF(X509_REVOKED) *list = X509_CRL_get_REVOKED(crl);
    XDC_INFO(XDC_SUB_WAN, "CRL %s reloaded: %d certificates revoked", c->path, list ? sk_X509_REVOKED_num(list) : 0);
    return 1;
}

int wan_tls_crl_lists(const wan_tls_crl *c, X509 *cert)
{
    X509_REVOKED *rev = NULL;
    return c->crl && cert && X509_CRL_get0_by_cert(c->crl, &rev, cert) == 1;
}

void wan_tls_crl_free(wan_tls_crl *c) { X509_CRL_free(c->crl), c->crl = NULL; }

void wan_tls_destroy(SSL_CTX *server, SSL_CTX *client, wan_tls_crl *crl)
{
    SSL_CTX_free(server);
    SSL_CTX_free(client);
    wan_tls_crl_free(crl);
}

xdc_err_t wan_tls_random(void *buf, size_t n) { return RAND_bytes(buf, (int)n) == 1 ? XDC_OK : XDC_ERR_TLS; }

xdc_err_t wan_tls_check_peer(SSL *ssl, const xdc_wan_identity *self, const char *expect_region, int expect_rank,
                             xdc_wan_identity *peer, xdc_diag *diag)
{
    X509 *cert = SSL_get0_peer_certificate(ssl);
    if (!cert) {
        xdc_diag_set(diag, "peer presented no certificate");
        return XDC_ERR_AUTH;
    }
    XDC_CHECK(wan_tls_cert_identity(cert, peer, diag));
    if (strcmp(peer->run, self->run) != 0) {
        xdc_diag_set(diag, "peer xdc://%s/%s/%d belongs to run '%s', not to our run '%s'", peer->run, peer->region,
                     peer->rank, peer->run, self->run);
        return XDC_ERR_AUTH;
    }
    if (expect_region && (strcmp(peer->region, expect_region) != 0 || peer->rank != expect_rank)) {
        xdc_diag_set(diag, "identity mismatch: expected %s/%d, the certificate names xdc://%s/%s/%d", expect_region,
                     expect_rank, peer->run, peer->region, peer->rank);
        return XDC_ERR_AUTH;
    }
    return XDC_OK;
}

xdc_err_t wan_tls_explain(SSL *ssl, int ssl_err, xdc_diag *diag)
{
    int saved_errno = errno;
    char why[512];
    wan_tls_errq(why, sizeof why);
    long vr = SSL_get_verify_result(ssl);
    if (vr != X509_V_OK) {
        int other_ca = vr == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
                       vr == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN || vr == X509_V_ERR_CERT_SIGNATURE_FAILURE ||
                       vr == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE || vr == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT;
        xdc_diag_set(diag, "peer certificate refused: %s%s (%s)", X509_verify_cert_error_string(vr),
                     other_ca ? ": not issued by our cluster CA" : "", why[0] ? why : "verification failed");
        return XDC_ERR_AUTH;
    }
    if (strstr(why, "peer did not return a certificate")) {
        xdc_diag_set(diag, "peer presented no client certificate (%s)", why);
        return XDC_ERR_AUTH;
    }
    if (strstr(why, "alert")) {
        /* The other side refused us: its alert says why (unknown ca, certificate expired/required...). */
        xdc_diag_set(diag, "the peer refused the handshake: %s", why);
        return XDC_ERR_AUTH;
    }
    if (strstr(why, "wrong version number") || strstr(why, "http request") || strstr(why, "unsupported protocol")) {
        xdc_diag_set(diag, "not a TLS 1.3 handshake (plaintext or old-TLS client?): %s", why);
        return XDC_ERR_AUTH;
    }
    if (ssl_err == SSL_ERROR_ZERO_RETURN || (ssl_err == SSL_ERROR_SYSCALL && !why[0])) {
        xdc_diag_set(diag, "connection closed by the peer%s%s", saved_errno ? ": " : "",
                     saved_errno ? strerror(saved_errno) : "");
        return XDC_ERR_CLOSED;
    }
    xdc_diag_set(diag, "TLS error %d: %s", ssl_err, why[0] ? why : "(no detail)");
    return XDC_ERR_TLS;
}
