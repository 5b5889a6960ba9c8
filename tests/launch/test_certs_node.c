/* test_certs_node.c — per-node identities: a node makes its own key and a certificate request, the CA
 * host checks and signs it, and the transport accepts the result; requests for another run, with a
 * malformed identity, altered after signing, with extra names or extensions or a key of the wrong kind
 * are refused by name; a revoked certificate is refused at the TLS handshake of the WAN transport and of
 * the rendezvous while an unrevoked one still connects (tests/e2e/test_certs_node_run.c: a run whose nodes
 * each hold only their own keys). */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "common/xdc_log.h"
#include "orchestrator/rdzv/orch_rdzv.h"
#include "wan/xdc_wan_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN     "testrun"
#define WAIT_MS 20000

/* A folder under the test's tmpdir (created); returns its path in a static slot of 8. */
static const char *tdir(const char *name)
{
    static char slots[8][512];
    static int next;
    char *p = slots[next++ % 8];
    snprintf(p, sizeof slots[0], "%s/%s", xdc_test_tmpdir(), name);
    mkdir(p, 0700);
    return p;
}

/* The CA in tmpdir/ca (run RUN), made once. */
static const char *ca_dir(void)
{
    const char *dir = tdir("ca");
    char pem[600];
    snprintf(pem, sizeof pem, "%s/ca.pem", dir);
    if (access(pem, F_OK) != 0) {
        xdc_wan_cert_opts o = {.dir = dir, .run = RUN, .days = 3650};
        xdc_diag d = {{0}};
        XDC_ASSERT_MSG(xdc_wan_cert_init_ca(&o, &d) == XDC_OK, "CA: %s", d.msg);
    }
    return dir;
}

/* Node side then CA side: REGION/RANK's key and request in tmpdir/NODE, signed into NODE/REGION-RANK.pem.
 * `out` gets the node's credentials (the CA certificate is the CA's public file). */
static void node_enroll(const char *node, const char *region, int rank, wan_test_node *out, xdc_wan_cert_issued *got)
{
    const char *ca = ca_dir(), *dir = tdir(node);
    xdc_wan_cert_opts o = {.dir = dir, .run = RUN, .region = region, .rank = rank, .days = 30, .host = "h1"};
    char csr[700];
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_cert_request(&o, csr, sizeof csr, out->key, sizeof out->key, &d) == XDC_OK, "request: %s",
                   d.msg);
    snprintf(out->cert, sizeof out->cert, "%s/%s-%d.pem", dir, region, rank);
    snprintf(out->ca, sizeof out->ca, "%s/ca.pem", ca);
    xdc_wan_cert_opts so = {.dir = ca, .days = 30};
    xdc_wan_cert_issued tmp;
    XDC_ASSERT_MSG(xdc_wan_cert_sign(&so, csr, out->cert, got ? got : &tmp, &d) == XDC_OK, "sign: %s", d.msg);
}

/* An engine for `node` that checks the CRL at `crl` (NULL: none). */
static xdc_wan_engine *engine_crl(const wan_test_node *node, const char *crl)
{
    xdc_wan_config cfg = wan_test_config(1, WAIT_MS);
    cfg.crl_path = crl;
    return wan_test_engine_cfg(node, &cfg);
}

XDC_TEST(certs_node_request_sign_round_trip_and_transport_accepts)
{
    wan_test_node us, eu;
    xdc_wan_cert_issued got;
    node_enroll("node-us", "us", 0, &us, NULL);
    node_enroll("node-eu", "eu", 3, &eu, &got);
    XDC_ASSERT(strcmp(got.id.run, RUN) == 0 && strcmp(got.id.region, "eu") == 0 && got.id.rank == 3);
    XDC_ASSERT_MSG(strcmp(got.host, "h1") == 0, "got '%s'", got.host);
    XDC_ASSERT(strlen(got.serial) > 8);
    /* The key never left its folder and only its owner reads it; no CA key is anywhere but the CA's. */
    struct stat st;
    XDC_ASSERT(stat(eu.key, &st) == 0);
    XDC_ASSERT_EQ(st.st_mode & 0777, 0600);
    char path[700];
    snprintf(path, sizeof path, "%s/ca.key", tdir("node-eu"));
    XDC_ASSERT(access(path, F_OK) != 0);
    /* The transport takes the signed certificate: identities both ways. */
    xdc_wan_engine *se = engine_crl(&us, NULL), *ce = engine_crl(&eu, NULL);
    xdc_wan_listener *lis;
    xdc_wan_peer *cli, *srv;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &lis, &d));
    XDC_ASSERT_OK(xdc_wan_connect(ce, "127.0.0.1", xdc_wan_listener_port(lis), "us", 0, &cli, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(cli, WAIT_MS, &d) == XDC_OK, "ready: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_accept(lis, WAIT_MS, &srv, &d) == XDC_OK, "accept: %s", d.msg);
    XDC_ASSERT(strcmp(xdc_wan_peer_identity(srv)->region, "eu") == 0 && xdc_wan_peer_identity(srv)->rank == 3);
    xdc_wan_engine_destroy(ce);
    xdc_wan_engine_destroy(se);
    /* A second request for the same identity in the same folder, or one through a planted symlink, is
     * refused and the files stay as they were. */
    xdc_wan_cert_opts o = {.dir = tdir("node-eu"), .run = RUN, .region = "eu", .rank = 3, .days = 30};
    XDC_ASSERT_ERR(xdc_wan_cert_request(&o, NULL, 0, NULL, 0, &d), XDC_ERR_IO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "refusing to replace");
    char target[700], link[700];
    snprintf(target, sizeof target, "%s/victim", tdir("node-eu"));
    xdc_test_write_file(target, "precious\n");
    snprintf(link, sizeof link, "%s/eu-4.key", tdir("node-eu"));
    XDC_ASSERT(symlink(target, link) == 0);
    o.rank = 4;
    XDC_ASSERT_ERR(xdc_wan_cert_request(&o, NULL, 0, NULL, 0, &d), XDC_ERR_IO);
    char *text = xdc_test_read_file(target, NULL);
    XDC_ASSERT_MSG(text && strcmp(text, "precious\n") == 0, "got '%s'", text);
    free(text);
    snprintf(path, sizeof path, "%s/eu-4.csr", tdir("node-eu"));
    XDC_ASSERT(access(path, F_OK) != 0);
}

/* A request for xdc identity `san` (an OpenSSL subjectAltName value), optionally with one more requested
 * extension, signed by a fresh key on `curve`; written to tmpdir/bad/NAME.csr. */
static const char *make_csr(const char *name, const char *san, const char *extra_nid_value, int extra_nid,
                            const char *curve)
{
    static char path[600];
    snprintf(path, sizeof path, "%s/%s.csr", tdir("bad"), name);
    EVP_PKEY *key = EVP_EC_gen(curve);
    X509_REQ *req = X509_REQ_new();
    STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
    XDC_ASSERT(key && req && exts);
    XDC_ASSERT(sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, NID_subject_alt_name, san)) > 0);
    if (extra_nid_value)
        XDC_ASSERT(sk_X509_EXTENSION_push(exts, X509V3_EXT_conf_nid(NULL, NULL, extra_nid, extra_nid_value)) > 0);
    XDC_ASSERT(X509_REQ_set_pubkey(req, key) == 1 && X509_REQ_add_extensions(req, exts) == 1);
    XDC_ASSERT(X509_REQ_sign(req, key, EVP_sha256()) > 0);
    FILE *f = fopen(path, "w");
    XDC_ASSERT(f && PEM_write_X509_REQ(f, req) == 1);
    fclose(f);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    X509_REQ_free(req);
    EVP_PKEY_free(key);
    return path;
}

/* Signing `csr` is refused with XDC_ERR_CORRUPT, the message holds `why`, and no certificate is written. */
static void sign_refused(const char *csr, const char *why)
{
    xdc_wan_cert_opts so = {.dir = ca_dir(), .days = 30};
    char out[700];
    snprintf(out, sizeof out, "%s.pem", csr);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(xdc_wan_cert_sign(&so, csr, out, NULL, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, why);
    XDC_ASSERT_STR_CONTAINS(d.msg, csr);
    XDC_ASSERT_MSG(access(out, F_OK) != 0, "a certificate was written for a refused request");
}

XDC_TEST(certs_node_sign_refuses_bad_requests)
{
    /* Another run: a well-formed request the CA must not sign. */
    xdc_wan_cert_opts o = {.dir = tdir("other"), .run = "otherrun", .region = "eu", .rank = 0, .days = 30};
    char csr[700];
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_cert_request(&o, csr, sizeof csr, NULL, 0, &d));
    sign_refused(csr, "it is for run 'otherrun'; this CA signs for run 'testrun'");
    sign_refused(make_csr("malformed", "URI:xdc://testrun/eu west/0", NULL, 0, "P-256"),
                 "is not xdc://RUN/REGION/RANK");
    sign_refused(make_csr("norank", "URI:xdc://testrun/eu/x", NULL, 0, "P-256"), "no valid rank");
    sign_refused(make_csr("dns", "URI:xdc://testrun/eu/0,DNS:evil.example", NULL, 0, "P-256"),
                 "its subjectAltName holds 2 names");
    sign_refused(make_csr("twouri", "URI:xdc://testrun/eu/0,URI:xdc://testrun/coordinator/0", NULL, 0, "P-256"),
                 "holds 2 names");
    sign_refused(make_csr("notauri", "DNS:eu.example", NULL, 0, "P-256"), "not a URI");
    sign_refused(make_csr("wantsca", "URI:xdc://testrun/eu/0", "critical,CA:TRUE", NID_basic_constraints, "P-256"),
                 "only subjectAltName is accepted");
    sign_refused(make_csr("curve", "URI:xdc://testrun/eu/0", NULL, 0, "P-521"), "P-256 or P-384");
    /* Altered after it was signed: the identity rewritten in place (same length), so it still parses. */
    const char *good = make_csr("tamper", "URI:xdc://testrun/eu/0", NULL, 0, "P-256");
    FILE *f = fopen(good, "r");
    X509_REQ *req = PEM_read_X509_REQ(f, NULL, NULL, NULL);
    fclose(f);
    unsigned char *der = NULL;
    int n = i2d_X509_REQ(req, &der);
    X509_REQ_free(req);
    XDC_ASSERT(n > 0);
    unsigned char *at = memmem(der, (size_t)n, "testrun/eu/0", 12);
    XDC_ASSERT(at != NULL);
    at[11] = '1';
    const unsigned char *p = der;
    req = d2i_X509_REQ(NULL, &p, n);
    OPENSSL_free(der);
    XDC_ASSERT(req != NULL);
    f = fopen(good, "w");
    XDC_ASSERT(PEM_write_X509_REQ(f, req) == 1);
    fclose(f);
    X509_REQ_free(req);
    sign_refused(good, "signature does not verify");
    /* The command names the problem and exits 65; a folder without a CA is 78. */
    char cmd[2000], out[4096];
    snprintf(cmd, sizeof cmd, "%s certs sign --dir %s --csr %s --out %s/x.pem", xdc_test_bin(), ca_dir(), good,
             tdir("bad"));
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 65);
    XDC_ASSERT_STR_CONTAINS(out, "refused: its signature does not verify");
    snprintf(cmd, sizeof cmd, "%s certs sign --dir %s --csr %s --out %s/y.pem", xdc_test_bin(), tdir("bad"), csr,
             tdir("bad"));
    XDC_ASSERT_EQ(xdc_test_run(cmd, out, sizeof out), 78);
    XDC_ASSERT_STR_CONTAINS(out, "ca.pem");
}

/* Revoke `cert`; the CRL path is returned. */
static const char *revoke_cert(const char *cert)
{
    static char crl[600];
    int already = -1;
    char serial[64];
    xdc_diag d = {{0}};
    XDC_ASSERT_MSG(xdc_wan_cert_revoke(ca_dir(), cert, NULL, &already, serial, sizeof serial, &d) == XDC_OK,
                   "revoke: %s", d.msg);
    XDC_ASSERT_EQ(already, 0);
    snprintf(crl, sizeof crl, "%s/crl.pem", ca_dir());
    return crl;
}

/* Wait (bounded, on the listener) until it has recorded a refusal; returns its text in d. */
static void await_refusal(xdc_wan_listener *lis, xdc_diag *d)
{
    for (int i = 0; i < 400 && xdc_wan_listener_last_refusal(lis, d) == 0; i++) {
        xdc_wan_peer *p = NULL;
        XDC_ASSERT_ERR(xdc_wan_accept(lis, 50, &p, NULL), XDC_ERR_TIMEOUT);
    }
    XDC_ASSERT_MSG(xdc_wan_listener_last_refusal(lis, d) >= 1, "the listener refused nothing");
}

XDC_TEST(certs_node_revoked_certificate_is_refused_at_the_wan_handshake)
{
    wan_test_node us, good, bad;
    xdc_wan_cert_issued bad_got;
    node_enroll("node-us", "us", 0, &us, NULL);
    node_enroll("node-eu", "eu", 0, &good, NULL);
    node_enroll("node-eu", "eu", 1, &bad, &bad_got);
    const char *crl = revoke_cert(bad.cert);
    /* Revoking again leaves the CRL alone and says so; a serial given by hand works the same way. */
    int already = 0;
    char serial[64];
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_cert_revoke(ca_dir(), NULL, bad_got.serial, &already, serial, sizeof serial, &d));
    XDC_ASSERT_EQ(already, 1);
    XDC_ASSERT_MSG(strcmp(serial, bad_got.serial) == 0, "got '%s'", serial);
    XDC_ASSERT_ERR(xdc_wan_cert_revoke(ca_dir(), NULL, "12zz", &already, NULL, 0, &d), XDC_ERR_INVALID);
    char log[600];
    snprintf(log, sizeof log, "%s/wan.log", xdc_test_tmpdir());
    FILE *logf = fopen(log, "w");
    XDC_ASSERT(logf != NULL);
    setvbuf(logf, NULL, _IONBF, 0);
    xdc_log_set_stream(logf);
    xdc_wan_engine *se = engine_crl(&us, crl);
    xdc_wan_listener *lis;
    XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &lis, &d));
    int port = xdc_wan_listener_port(lis);
    /* The revoked client: refused at the handshake, both sides say why. */
    xdc_wan_engine *be = engine_crl(&bad, NULL);
    xdc_wan_peer *p;
    XDC_ASSERT_OK(xdc_wan_connect(be, "127.0.0.1", port, "us", 0, &p, &d));
    XDC_ASSERT_ERR(xdc_wan_peer_wait_ready(p, WAIT_MS, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "certificate revoked");
    await_refusal(lis, &d);
    XDC_ASSERT_STR_CONTAINS(d.msg, "certificate revoked");
    XDC_ASSERT_STR_CONTAINS(d.msg, "xdc://testrun/eu/1 serial "); /* which key to act on */
    XDC_ASSERT_STR_CONTAINS(d.msg, bad_got.serial);
    xdc_wan_engine_destroy(be);
    /* The unrevoked one still connects. */
    xdc_wan_engine *ge = engine_crl(&good, crl);
    XDC_ASSERT_OK(xdc_wan_connect(ge, "127.0.0.1", port, "us", 0, &p, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(p, WAIT_MS, &d) == XDC_OK, "unrevoked: %s", d.msg);
    xdc_wan_engine_destroy(ge);
    xdc_wan_engine_destroy(se);
    /* The other way: a client with the CRL refuses a revoked server. */
    se = engine_crl(&bad, NULL);
    XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &lis, &d));
    ge = engine_crl(&good, crl);
    XDC_ASSERT_OK(xdc_wan_connect(ge, "127.0.0.1", xdc_wan_listener_port(lis), "eu", 1, &p, &d));
    XDC_ASSERT_ERR(xdc_wan_peer_wait_ready(p, WAIT_MS, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "certificate revoked");
    xdc_wan_engine_destroy(ge);
    xdc_wan_engine_destroy(se);
    xdc_log_set_stream(NULL);
    fclose(logf);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "refused connection from 127.0.0.1");
    XDC_ASSERT_STR_CONTAINS(text, "certificate revoked");
    free(text);
}

/* Dial `lis` as `node` (engine `eng`) expecting us/0; returns both ends once up. */
static void connect_pair(xdc_wan_engine *eng, xdc_wan_listener *lis, xdc_wan_peer **cli, xdc_wan_peer **srv)
{
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_connect(eng, "127.0.0.1", xdc_wan_listener_port(lis), "us", 0, cli, &d));
    XDC_ASSERT_MSG(xdc_wan_peer_wait_ready(*cli, WAIT_MS, &d) == XDC_OK, "ready: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_accept(lis, WAIT_MS, srv, &d) == XDC_OK, "accept: %s", d.msg);
}

/* One message from a to b must arrive whole. */
static void exchange(xdc_wan_peer *a, xdc_wan_peer *b)
{
    char buf[16];
    xdc_wan_request *rr, *sr;
    size_t n = 0;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_irecv(b, XDC_WAN_LATENCY, buf, sizeof buf, &rr));
    XDC_ASSERT_OK(xdc_wan_isend(a, XDC_WAN_LATENCY, "still here", 10, 0, 10, &sr));
    XDC_ASSERT_MSG(xdc_wan_wait(sr, WAIT_MS, NULL, NULL, &d) == XDC_OK, "send: %s", d.msg);
    XDC_ASSERT_MSG(xdc_wan_wait(rr, WAIT_MS, &n, NULL, &d) == XDC_OK, "recv: %s", d.msg);
    XDC_ASSERT(n == 10 && memcmp(buf, "still here", 10) == 0);
}

XDC_TEST(certs_node_revoking_cuts_a_live_connection_and_refuses_its_return)
{
    wan_test_node us, good, bad;
    node_enroll("node-us", "us", 0, &us, NULL);
    node_enroll("node-eu", "eu", 0, &good, NULL);
    node_enroll("node-eu", "eu", 1, &bad, NULL);
    /* The server reads the CA's own crl.pem, as a coordinator on the CA host would; it starts with an
     * unrelated serial in it. */
    int already;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_cert_revoke(ca_dir(), NULL, "01", &already, NULL, 0, &d));
    char crl[600];
    snprintf(crl, sizeof crl, "%s/crl.pem", ca_dir());
    xdc_wan_engine *se = engine_crl(&us, crl), *ge = engine_crl(&good, NULL), *be = engine_crl(&bad, NULL);
    xdc_wan_listener *lis;
    XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &lis, &d));
    xdc_wan_peer *gc, *gs, *bc, *bs;
    connect_pair(ge, lis, &gc, &gs);
    connect_pair(be, lis, &bc, &bs);
    exchange(bc, bs);
    /* Revoked while connected: the server cuts that connection on its own (it looks at the file once a
     * second), and the client's attempt to come back is refused at the handshake. */
    char buf[16];
    xdc_wan_request *srv_rx, *cli_rx;
    XDC_ASSERT_OK(xdc_wan_irecv(bs, XDC_WAN_LATENCY, buf, sizeof buf, &srv_rx));
    XDC_ASSERT_OK(xdc_wan_irecv(bc, XDC_WAN_LATENCY, buf, sizeof buf, &cli_rx));
    revoke_cert(bad.cert);
    XDC_ASSERT_ERR(xdc_wan_wait(srv_rx, WAIT_MS, NULL, NULL, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "certificate revoked");
    XDC_ASSERT_STR_CONTAINS(d.msg, "connection cut");
    XDC_ASSERT_ERR(xdc_wan_wait(cli_rx, WAIT_MS, NULL, NULL, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "certificate revoked");
    /* The other member is untouched, both ways. */
    exchange(gc, gs);
    exchange(gs, gc);
    xdc_wan_engine_destroy(be);
    xdc_wan_engine_destroy(ge);
    xdc_wan_engine_destroy(se);
}

/* Other refusals of a peer's own certificate name it too: an expired client's (in the listener's
 * refusal), and a server's of another CA (in the dialling side's error; the client refuses first). */
XDC_TEST(certs_node_refusals_name_the_refused_certificate)
{
    wan_test_node us, expired, foreign;
    wan_test_issue("pki", "us", 0, 30, 0, &us);
    wan_test_issue("pki", "eu", 5, 1, -3 * 86400, &expired);
    wan_test_issue("other-pki", "eu", 6, 30, 0, &foreign);
    const wan_test_node *bad[] = {&expired, &foreign};
    for (int i = 0; i < 2; i++) {
        xdc_wan_engine *se = engine_crl(&us, NULL), *ce = engine_crl(bad[i], NULL);
        xdc_wan_listener *lis;
        xdc_wan_peer *p;
        xdc_diag d = {{0}}, ld = {{0}};
        XDC_ASSERT_OK(xdc_wan_listen(se, "127.0.0.1", 0, &lis, &d));
        XDC_ASSERT_OK(xdc_wan_connect(ce, "127.0.0.1", xdc_wan_listener_port(lis), "us", 0, &p, &d));
        XDC_ASSERT_ERR(xdc_wan_peer_wait_ready(p, WAIT_MS, &d), XDC_ERR_AUTH);
        await_refusal(lis, &ld);
        const char *msg = i == 0 ? ld.msg : d.msg;
        XDC_ASSERT_STR_CONTAINS(msg, i == 0 ? "certificate has expired" : "not issued by our cluster CA");
        XDC_ASSERT_STR_CONTAINS(msg, i == 0 ? "xdc://testrun/eu/5 serial " : "xdc://testrun/us/0 serial ");
        xdc_wan_engine_destroy(ce);
        xdc_wan_engine_destroy(se);
    }
}

XDC_TEST(certs_node_revoked_member_is_refused_by_the_rendezvous)
{
    static const char *const names[] = {"us/h1:0", "us/h1:1"};
    wan_test_node coord, m0, m1;
    node_enroll("node-coord", RDZV_SERVER_REGION, 0, &coord, NULL);
    node_enroll("node-us", "us", 0, &m0, NULL);
    node_enroll("node-us", "us", 1, &m1, NULL);
    const char *crl = revoke_cert(m1.cert);
    char log[600];
    snprintf(log, sizeof log, "%s/rdzv.log", xdc_test_tmpdir());
    FILE *logf = fopen(log, "w");
    XDC_ASSERT(logf != NULL);
    setvbuf(logf, NULL, _IONBF, 0);
    xdc_log_set_stream(logf);
    xdc_wan_engine *se = engine_crl(&coord, crl), *e0 = engine_crl(&m0, crl), *e1 = engine_crl(&m1, NULL);
    rdzv_server *srv;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(rdzv_server_create(se, "127.0.0.1", 0, names, 2, &srv, &d));
    int port = rdzv_server_port(srv);
    rdzv_client *c1 = NULL, *c0 = NULL;
    XDC_ASSERT_ERR(rdzv_client_create(e1, "127.0.0.1", port, names[1], 10000, &c1, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "certificate revoked");
    XDC_ASSERT_MSG(rdzv_client_create(e0, "127.0.0.1", port, names[0], 10000, &c0, &d) == XDC_OK, "member 0: %s",
                   d.msg);
    XDC_ASSERT_OK(rdzv_set(c0, "wan/0/0", "127.0.0.1:1", &d));
    rdzv_member_state ms;
    XDC_ASSERT_EQ(rdzv_server_member(srv, 1, &ms), 0);
    XDC_ASSERT_EQ(ms.joined, 0);
    rdzv_client_destroy(c0);
    rdzv_server_destroy(srv);
    xdc_wan_engine_destroy(e0);
    xdc_wan_engine_destroy(e1);
    xdc_wan_engine_destroy(se);
    xdc_log_set_stream(NULL);
    fclose(logf);
    char *text = xdc_test_read_file(log, NULL);
    XDC_ASSERT_STR_CONTAINS(text, "certificate revoked");
    free(text);
}

XDC_TEST(certs_node_crl_of_another_ca_or_garbage_is_a_config_error)
{
    wan_test_node us, other;
    node_enroll("node-us", "us", 0, &us, NULL);
    wan_test_issue("other-pki", "us", 0, 30, 0, &other);
    int already;
    char crl[700];
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_cert_revoke(tdir("other-pki"), other.cert, NULL, &already, NULL, 0, &d));
    snprintf(crl, sizeof crl, "%s/crl.pem", tdir("other-pki"));
    xdc_wan_config cfg = wan_test_config(1, WAIT_MS);
    cfg.cert_path = us.cert;
    cfg.key_path = us.key;
    cfg.ca_path = us.ca;
    cfg.crl_path = crl;
    xdc_wan_engine *eng = NULL;
    XDC_ASSERT_ERR(xdc_wan_engine_create(&cfg, &eng, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "not issued by the cluster CA");
    XDC_ASSERT_STR_CONTAINS(d.msg, crl);
    snprintf(crl, sizeof crl, "%s/garbage.pem", tdir("bad"));
    xdc_test_write_file(crl, "not a CRL\n");
    cfg.crl_path = crl;
    XDC_ASSERT_ERR(xdc_wan_engine_create(&cfg, &eng, &d), XDC_ERR_CONFIG);
    XDC_ASSERT_STR_CONTAINS(d.msg, "not a PEM CRL");
    /* A revoke on a CA whose crl.pem is not its own refuses to touch it. */
    snprintf(crl, sizeof crl, "%s/crl.pem", ca_dir());
    xdc_test_write_file(crl, "not a CRL\n");
    XDC_ASSERT_ERR(xdc_wan_cert_revoke(ca_dir(), us.cert, NULL, &already, NULL, 0, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "is not a CRL this CA signed");
    char *text = xdc_test_read_file(crl, NULL);
    XDC_ASSERT_MSG(text && strcmp(text, "not a CRL\n") == 0, "got '%s'", text);
    free(text);
}
