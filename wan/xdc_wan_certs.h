/* xdc_wan_certs.h — identities and certificates of the WAN transport (`xdc certs`, the launcher):
 * parsing the identity a certificate names ("xdc://RUN/REGION/RANK", in its SAN URI), creating the
 * cluster CA, issuing node certificates signed by it, and the per-node path where no node holds another's
 * key: the node makes its key and a certificate request (CSR), the CA host checks and signs the CSR, and
 * revokes a certificate by adding its serial to the CA's CRL. EC P-256 keys, PEM files, never
 * overwritten (O_EXCL|O_NOFOLLOW; keys 0600). Part of the wan/ library (wan/wan_certs.c); the transport
 * itself is wan/xdc_wan.h. */
#ifndef XDC_WAN_CERTS_H
#define XDC_WAN_CERTS_H

#include "common/xdc_err.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

/* Parse "xdc://RUN/REGION/RANK". */
xdc_err_t xdc_wan_identity_parse(const char *uri, xdc_wan_identity *out, xdc_diag *diag);

typedef struct xdc_wan_cert_opts {
    const char *dir;      /* holds ca.pem / ca.key (request: the node's own folder); node files are written here */
    const char *run;      /* run id written into the CA name and node SANs */
    const char *region;   /* node only */
    int rank;             /* node only */
    const char *host;     /* request only: the host the node runs on, recorded in the CSR's and the
                           * certificate's CN (NULL: this machine's hostname); never used to authorize */
    int days;             /* validity */
    int64_t not_before_s; /* start of validity relative to now (negative: in the past) */
} xdc_wan_cert_opts;

/* Create DIR/ca.pem, DIR/ca.key (EC P-256, self-signed, CA:TRUE) and DIR/crl.pem, the CA's revocation list,
 * empty. Refuses to overwrite any of them. */
xdc_err_t xdc_wan_cert_init_ca(const xdc_wan_cert_opts *o, xdc_diag *diag);
/* Create DIR/REGION-RANK.pem and DIR/REGION-RANK.key signed by the CA in DIR; the run comes from the
 * CA when o->run is NULL. The paths written are returned in cert_out/key_out (may be NULL). */
xdc_err_t xdc_wan_cert_issue(const xdc_wan_cert_opts *o, char *cert_out, size_t cert_cap, char *key_out, size_t key_cap,
                             xdc_diag *diag);

/* Node side: create DIR/REGION-RANK.key (EC P-256, mode 0600) and DIR/REGION-RANK.csr, a request signed
 * by that key naming xdc://RUN/REGION/RANK (o->run is required: the node has no CA to read it from). Both
 * files must not exist yet. The paths written are returned in csr_out/key_out (may be NULL). */
xdc_err_t xdc_wan_cert_request(const xdc_wan_cert_opts *o, char *csr_out, size_t csr_cap, char *key_out, size_t key_cap,
                               xdc_diag *diag);

/* What xdc_wan_cert_sign issued. */
typedef struct xdc_wan_cert_issued {
    xdc_wan_identity id;
    char host[XDC_WAN_NAME_MAX]; /* from the request's CN; "" when it named none */
    char serial[64];             /* hex, as `xdc certs revoke --serial` takes it */
} xdc_wan_cert_issued;

/* CA side: check the request in csr_path and write the certificate to cert_path (must not exist), signed
 * by the CA in o->dir for o->days days. The request must carry a valid signature of its own key (EC P-256
 * or P-384, or RSA of 2048 bits or more), exactly one subjectAltName entry, the URI xdc://RUN/REGION/RANK
 * of the CA's run, no other requested extension, and a CN (if any) of "REGION/RANK" or "REGION/RANK@HOST"
 * naming the same identity. Nothing of the request but its key and identity enters the certificate.
 * XDC_ERR_CORRUPT for a refused request (diag names the problem); XDC_ERR_CONFIG when the CA cannot be
 * read; XDC_ERR_IO when a file cannot be read or written. */
xdc_err_t xdc_wan_cert_sign(const xdc_wan_cert_opts *o, const char *csr_path, const char *cert_path,
                            xdc_wan_cert_issued *out, xdc_diag *diag);

/* CA side: revoke the certificate in cert_path (which must be one the CA in dir issued) or, when cert_path
 * is NULL, the serial given in hex: add it to DIR/crl.pem (created when absent), re-signed with a higher
 * CRL number and valid until the CA expires. The file is replaced atomically (written beside it, renamed).
 * *already is set to 1 when the serial was revoked before (the CRL is then left as it was). The serial
 * revoked is returned in serial_out (may be NULL). */
xdc_err_t xdc_wan_cert_revoke(const char *dir, const char *cert_path, const char *serial_hex, int *already,
                              char *serial_out, size_t serial_cap, xdc_diag *diag);

#endif /* XDC_WAN_CERTS_H */
