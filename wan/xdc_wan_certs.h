/* xdc_wan_certs.h — identities and certificates of the WAN transport (`xdc certs`, the launcher):
 * parsing the identity a certificate names ("xdc://RUN/REGION/RANK", in its SAN URI), creating the
 * cluster CA and issuing node certificates signed by it. EC P-256 keys, PEM files, never overwritten.
 * Part of the wan/ library (wan/wan_certs.c); the transport itself is wan/xdc_wan.h. */
#ifndef XDC_WAN_CERTS_H
#define XDC_WAN_CERTS_H

#include "common/xdc_err.h"
#include "wan/xdc_wan.h"

#include <stddef.h>
#include <stdint.h>

/* Parse "xdc://RUN/REGION/RANK". */
xdc_err_t xdc_wan_identity_parse(const char *uri, xdc_wan_identity *out, xdc_diag *diag);

typedef struct xdc_wan_cert_opts {
    const char *dir;      /* holds ca.pem / ca.key; node files are written here too */
    const char *run;      /* run id written into the CA name and node SANs */
    const char *region;   /* node only */
    int rank;             /* node only */
    int days;             /* validity */
    int64_t not_before_s; /* start of validity relative to now (negative: in the past) */
} xdc_wan_cert_opts;

/* Create DIR/ca.pem and DIR/ca.key (EC P-256, self-signed, CA:TRUE). Refuses to overwrite. */
xdc_err_t xdc_wan_cert_init_ca(const xdc_wan_cert_opts *o, xdc_diag *diag);
/* Create DIR/REGION-RANK.pem and DIR/REGION-RANK.key signed by the CA in DIR; the run comes from the
 * CA when o->run is NULL. The paths written are returned in cert_out/key_out (may be NULL). */
xdc_err_t xdc_wan_cert_issue(const xdc_wan_cert_opts *o, char *cert_out, size_t cert_cap, char *key_out, size_t key_cap,
                             xdc_diag *diag);

#endif /* XDC_WAN_CERTS_H */
