/* wan_tls.h — private: OpenSSL contexts for the WAN transport (TLS 1.3 only, mutual authentication
 * against the cluster CA), identity extraction from certificates and readable refusal reasons. */
#ifndef XDC_WAN_TLS_H
#define XDC_WAN_TLS_H

#include "wan/xdc_wan.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <stdint.h>
#include <sys/stat.h>

/* The revocation list an engine checks (xdc_wan_config.crl_path): the file is looked at again once a
 * second, and a changed one that passes the checks replaces the contexts' trust store (a bad one is
 * logged and the old list kept). Used by the engine thread only. */
typedef struct wan_tls_crl {
    char path[512], ca_path[512]; /* "" path: no CRL */
    struct stat st;               /* of the file last loaded: device, inode, size, mtime */
    X509_CRL *crl;                /* the list in force */
    uint64_t next_check_ns;
} wan_tls_crl;

/* One SSL_CTX for each side, both loaded with our certificate, key and the CA, TLS 1.3 only, and
 * requiring a peer certificate. `self` receives the identity written in our certificate. */
xdc_err_t wan_tls_create(const xdc_wan_config *cfg, SSL_CTX **server, SSL_CTX **client, xdc_wan_identity *self,
                         wan_tls_crl *crl, xdc_diag *diag);
/* Look at the CRL file again when a second has passed since the last look: 1 when a changed list was
 * put in force (new handshakes use it; the caller cuts the live connections it lists), else 0. */
int wan_tls_crl_refresh(wan_tls_crl *c, SSL_CTX *server, SSL_CTX *client, uint64_t now_ns);
/* 1 when the list in force names this certificate. */
int wan_tls_crl_lists(const wan_tls_crl *c, X509 *cert);
void wan_tls_crl_free(wan_tls_crl *c);
/* Free both contexts and the revocation list (each may be NULL / empty). */
void wan_tls_destroy(SSL_CTX *server, SSL_CTX *client, wan_tls_crl *crl);
/* Fill buf with n bytes from OpenSSL's CSPRNG (session ids). */
xdc_err_t wan_tls_random(void *buf, size_t n);
/* The identity (SAN URI xdc://RUN/REGION/RANK) named by a certificate. */
xdc_err_t wan_tls_cert_identity(X509 *cert, xdc_wan_identity *out, xdc_diag *diag);
/* After a completed handshake: read the peer's identity and refuse (XDC_ERR_AUTH) when its run differs
 * from ours or, when expect_region is not NULL, its region/rank differ from the expectation. */
xdc_err_t wan_tls_check_peer(SSL *ssl, const xdc_wan_identity *self, const char *expect_region, int expect_rank,
                             xdc_wan_identity *peer, xdc_diag *diag);
/* Describe why an SSL call failed (certificate verification result, OpenSSL error queue, alerts) and
 * map it to XDC_ERR_AUTH (a certificate was refused) or XDC_ERR_TLS / XDC_ERR_CLOSED. Clears the
 * OpenSSL error queue of this thread. */
xdc_err_t wan_tls_explain(SSL *ssl, int ssl_err, xdc_diag *diag);
/* 1 when s[0..n) is a name an identity may hold: 1..XDC_WAN_NAME_MAX-1 of letters, digits, - _ . */
int wan_tls_valid_name(const char *s, size_t n);
/* Reason text for the OpenSSL error queue ("" when empty); clears it. */
void wan_tls_errq(char *buf, size_t cap);

#endif /* XDC_WAN_TLS_H */
