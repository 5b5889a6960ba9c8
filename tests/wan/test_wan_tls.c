/* test_wan_tls.c — mutual TLS of the WAN transport: certificates from `xdc certs` carry the identity,
 * and a peer with the wrong identity, another CA's certificate, an expired certificate, no certificate
 * or no TLS at all is refused with a reason; `openssl s_client` as an independent client negotiates
 * TLS 1.3 and is refused TLS 1.2. */
#include "tests/test_wan_util.h"
#include "tests/xdc_test.h"

#include "wan/wan_tls.h"
#include "wan/xdc_wan_certs.h"

#include <openssl/pem.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define WAIT_MS 20000

typedef struct {
    wan_test_node us;
    xdc_wan_engine *eng;
    xdc_wan_listener *lis;
    int port;
} tls_server;

static void server_start(tls_server *s)
{
    wan_test_issue("pki", "us", 0, 30, 0, &s->us);
    s->eng = wan_test_engine(&s->us, 1, WAIT_MS);
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(xdc_wan_listen(s->eng, "127.0.0.1", 0, &s->lis, &d));
    s->port = xdc_wan_listener_port(s->lis);
}

/* Wait (bounded, on the listener's condition variable) until the server recorded a refusal. */
static void expect_refusal(tls_server *s, const char *needle)
{
    xdc_diag d = {{0}};
    for (int i = 0; i < 400 && xdc_wan_listener_last_refusal(s->lis, &d) == 0; i++) {
        xdc_wan_peer *p = NULL;
        XDC_ASSERT_ERR(xdc_wan_accept(s->lis, 50, &p, NULL), XDC_ERR_TIMEOUT);
    }
    XDC_ASSERT_MSG(xdc_wan_listener_last_refusal(s->lis, &d) >= 1, "the server refused nothing");
    XDC_ASSERT_STR_CONTAINS(d.msg, needle);
}

/* A client with `node`'s credentials dials the server expecting us/expect_rank; returns its verdict. */
static xdc_err_t client_try(tls_server *s, const wan_test_node *node, int expect_rank, xdc_diag *d)
{
    xdc_wan_engine *eng = wan_test_engine(node, 1, WAIT_MS);
    xdc_wan_peer *p;
    XDC_ASSERT_OK(xdc_wan_connect(eng, "127.0.0.1", s->port, "us", expect_rank, &p, d));
    xdc_err_t rc = xdc_wan_peer_wait_ready(p, WAIT_MS, d);
    xdc_wan_engine_destroy(eng);
    return rc;
}

XDC_TEST(wan_certs_carry_identity_and_refuse_overwrite)
{
    wan_test_node n;
    wan_test_issue("pki", "eu-west", 7, 30, 0, &n);
    FILE *f = fopen(n.cert, "r");
    XDC_ASSERT(f != NULL);
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    XDC_ASSERT(x != NULL);
    xdc_wan_identity id;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(wan_tls_cert_identity(x, &id, &d));
    X509_free(x);
    XDC_ASSERT(strcmp(id.run, "testrun") == 0 && strcmp(id.region, "eu-west") == 0 && id.rank == 7);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/pki", xdc_test_tmpdir());
    xdc_wan_cert_opts o = {.dir = dir, .run = "testrun", .days = 10};
    XDC_ASSERT_ERR(xdc_wan_cert_init_ca(&o, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "already exists");
    o.region = "bad/region";
    XDC_ASSERT_ERR(xdc_wan_cert_issue(&o, NULL, 0, NULL, 0, &d), XDC_ERR_INVALID);
    XDC_ASSERT_ERR(xdc_wan_identity_parse("xdc://r/us/x", &id, &d), XDC_ERR_AUTH);
    XDC_ASSERT_ERR(xdc_wan_identity_parse("http://r/us/1", &id, &d), XDC_ERR_AUTH);
    XDC_ASSERT_OK(xdc_wan_identity_parse("xdc://r/us/12", &id, &d));
    XDC_ASSERT_EQ(id.rank, 12);
}

XDC_TEST(wan_tls_refuses_wrong_identity)
{
    tls_server s;
    server_start(&s);
    wan_test_node eu;
    wan_test_issue("pki", "eu", 0, 30, 0, &eu);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(client_try(&s, &eu, 5, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, "identity mismatch: expected us/5");
    XDC_ASSERT_STR_CONTAINS(d.msg, "xdc://testrun/us/0");
    XDC_ASSERT_OK(client_try(&s, &eu, 0, &d)); /* the right expectation passes */
    xdc_wan_engine_destroy(s.eng);
}

/* A client whose certificate comes from `pki` (validity `days` from `not_before_s`) is refused: both
 * sides say why. */
static void refused_client(const char *pki, int days, int64_t not_before_s, const char *client_says,
                           const char *server_says)
{
    tls_server s;
    server_start(&s);
    wan_test_node bad;
    wan_test_issue(pki, "eu", 1, days, not_before_s, &bad);
    xdc_diag d = {{0}};
    XDC_ASSERT_ERR(client_try(&s, &bad, 0, &d), XDC_ERR_AUTH);
    XDC_ASSERT_STR_CONTAINS(d.msg, client_says);
    expect_refusal(&s, server_says);
    xdc_wan_engine_destroy(s.eng);
}

XDC_TEST(wan_tls_refuses_other_ca) { refused_client("other-pki", 30, 0, "not issued by our cluster CA", "unknown ca"); }

XDC_TEST(wan_tls_refuses_expired_certificate)
{
    refused_client("pki", 1, -3 * 86400, "expired", "certificate has expired");
}

XDC_TEST(wan_tls_refuses_plaintext_client)
{
    tls_server s;
    server_start(&s);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons((uint16_t)s.port), .sin_addr.s_addr = htonl(0x7f000001)};
    XDC_ASSERT(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    const char req[] = "GET / HTTP/1.0\r\n\r\n";
    XDC_ASSERT_EQ(write(fd, req, sizeof req - 1), sizeof req - 1);
    expect_refusal(&s, "plaintext client");
    char buf[16];
    XDC_ASSERT(read(fd, buf, sizeof buf) <= 0); /* the server closed on us */
    close(fd);
    xdc_wan_engine_destroy(s.eng);
}

static int have_openssl_cli(void)
{
    char out[256];
    return xdc_test_run("openssl version", out, sizeof out) == 0;
}

XDC_TEST(wan_tls_s_client_without_certificate_is_refused)
{
    if (!have_openssl_cli()) xdc_test_skip("no openssl command-line tool");
    tls_server s;
    server_start(&s);
    char cmd[1024], out[8192];
    snprintf(cmd, sizeof cmd, "openssl s_client -connect 127.0.0.1:%d -CAfile %s -brief </dev/null 2>&1", s.port,
             s.us.ca);
    xdc_test_run(cmd, out, sizeof out);
    expect_refusal(&s, "no client certificate");
    xdc_wan_engine_destroy(s.eng);
}

XDC_TEST(wan_tls_s_client_negotiates_tls13_and_is_refused_tls12)
{
    if (!have_openssl_cli()) xdc_test_skip("no openssl command-line tool");
    tls_server s;
    server_start(&s);
    wan_test_node eu;
    wan_test_issue("pki", "eu", 0, 30, 0, &eu);
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd,
             "openssl s_client -connect 127.0.0.1:%d -CAfile %s -cert %s -key %s -brief </dev/null 2>&1", s.port, eu.ca,
             eu.cert, eu.key);
    xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_STR_CONTAINS(out, "Protocol version: TLSv1.3");
    XDC_ASSERT_STR_CONTAINS(out, "Verification: OK");
    snprintf(cmd, sizeof cmd,
             "openssl s_client -connect 127.0.0.1:%d -CAfile %s -cert %s -key %s -tls1_2 -brief </dev/null 2>&1",
             s.port, eu.ca, eu.cert, eu.key);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc != 0, "TLS 1.2 handshake was accepted: %s", out);
    XDC_ASSERT(strstr(out, "Protocol version: TLSv1.2") == NULL);
    expect_refusal(&s, "TLS 1.3");
    xdc_wan_engine_destroy(s.eng);
}
