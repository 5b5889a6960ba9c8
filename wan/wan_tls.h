/* wan_tls.h — private: OpenSSL contexts for the WAN transport (TLS 1.3 only, mutual authentication
 * against the cluster CA), identity extraction from certificates and readable refusal reasons. */
#ifndef XDC_WAN_TLS_H
#define XDC_WAN_TLS_H

#include "wan/xdc_wan.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>

/* One SSL_CTX for each side, both loaded with our certificate, key and the CA, TLS 1.3 only, and
 * requiring a peer certificate. `self` receives the identity written in our certificate. */
xdc_err_t wan_tls_create(const xdc_wan_config *cfg, SSL_CTX **server, SSL_CTX **client, xdc_wan_identity *self,
                         xdc_diag *diag);
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
