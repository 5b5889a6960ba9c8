/* wan_io_tls.c — the TLS 1.3 I/O layer of a WAN stream: an OpenSSL session that reads and writes
 * through the layer below (a BIO of its own calls that layer's read/write, so a fault layer could sit in
 * between), with OpenSSL's WANT_READ / WANT_WRITE mapped onto the stack's poll interest and every other
 * outcome explained by wan_tls_explain(). The server side first reads one byte: a TLS connection starts
 * with a handshake record, anything else is refused as a plaintext client. The peer's identity and the
 * revocation check read the session's certificate here too, so no other file of wan/ calls SSL_*. */
#include "wan/wan_io.h"

#include "common/xdc_alloc.h"
#include "wan/wan_tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <poll.h>
#include <pthread.h>
#include <stdio.h>

typedef struct wan_io_tls {
    wan_io io;
    SSL *ssl;
    int is_client;
    int checked;        /* server: the first byte was seen to open a TLS handshake record */
    int have_first;     /* that byte is read but not yet handed to OpenSSL */
    uint8_t first_byte; /* (1) byte */
} wan_io_tls;

#define TLS_CHUNK_MAX (1u << 30) /* SSL_read/SSL_write take an int length */

/* ---- the BIO that carries TLS records through the layer below --------------------------------------- */

static int bio_read(BIO *b, char *buf, int len)
{
    wan_io_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    if (t->have_first) {
        buf[0] = (char)t->first_byte;
        t->have_first = 0;
        return 1;
    }
    size_t n = 0;
    int r = t->io.lower->ops->read(t->io.lower, buf, (size_t)len, &n);
    if (r == WAN_IO_DONE) return (int)n;
    if (r == WAN_IO_AGAIN) BIO_set_retry_read(b);
    return -1;
}

static int bio_write(BIO *b, const char *buf, int len)
{
    wan_io_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    size_t n = 0;
    int r = t->io.lower->ops->write(t->io.lower, buf, (size_t)len, &n);
    if (r == WAN_IO_DONE) return (int)n;
    if (r == WAN_IO_AGAIN) BIO_set_retry_write(b);
    return -1;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b, (void)num, (void)ptr;
    return cmd == BIO_CTRL_FLUSH; /* writes go straight down: nothing to flush; nothing else supported */
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_method_init(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "xdc wan io");
    if (m && BIO_meth_set_read(m, bio_read) == 1 && BIO_meth_set_write(m, bio_write) == 1 &&
        BIO_meth_set_ctrl(m, bio_ctrl) == 1)
        bio_method = m; /* kept for the life of the process */
    else BIO_meth_free(m);
}

/* ---- the layer ------------------------------------------------------------------------------------- */

/* An SSL call returned rc <= 0: wait, or fail with the reason. The layer below names a failure it saw
 * itself (a reset, the end of the stream), unless OpenSSL refused a certificate, which says more. */
static int tls_result(wan_io_tls *t, int rc)
{
    wan_io_stack *stk = t->io.stk;
    int e = SSL_get_error(t->ssl, rc);
    if (e == SSL_ERROR_WANT_READ) {
        stk->want |= POLLIN;
        return WAN_IO_AGAIN;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        stk->want |= POLLOUT;
        return WAN_IO_AGAIN;
    }
    xdc_diag d;
    xdc_err_t err = wan_tls_explain(t->ssl, e, &d);
    if (err == XDC_ERR_AUTH) stk->err = XDC_OK; /* a refusal outranks the broken connection it caused */
    return wan_io_fail(stk, err, "%s", d.msg);
}

static int tls_handshake(wan_io *io)
{
    wan_io_tls *t = (wan_io_tls *)io;
    int r = io->lower->ops->handshake(io->lower);
    if (r != WAN_IO_DONE) return r;
    if (!t->is_client && !t->checked) {
        /* A TLS connection starts with a handshake record (content type 22); anything else is a plaintext
         * or foreign client, refused with a reason instead of an opaque TLS error. */
        size_t n = 0;
        r = io->lower->ops->read(io->lower, &t->first_byte, 1, &n);
        if (r == WAN_IO_AGAIN) return r;
        if (r == WAN_IO_FAILED) {
            snprintf(io->stk->why, sizeof io->stk->why, "closed before the TLS handshake");
            return r;
        }
        if (t->first_byte != 0x16)
            return wan_io_fail(io->stk, XDC_ERR_AUTH,
                               "plaintext client: first byte 0x%02x is not a TLS handshake record", t->first_byte);
        t->checked = t->have_first = 1;
    }
    int rc = SSL_do_handshake(t->ssl);
    return rc == 1 ? WAN_IO_DONE : tls_result(t, rc);
}

static int tls_read(wan_io *io, void *buf, size_t len, size_t *n)
{
    wan_io_tls *t = (wan_io_tls *)io;
    *n = 0;
    int rc = SSL_read(t->ssl, buf, (int)(len > TLS_CHUNK_MAX ? TLS_CHUNK_MAX : len));
    if (rc <= 0) return tls_result(t, rc);
    *n = (size_t)rc;
    return WAN_IO_DONE;
}

static int tls_write(wan_io *io, const void *buf, size_t len, size_t *n)
{
    wan_io_tls *t = (wan_io_tls *)io;
    *n = 0;
    int rc = SSL_write(t->ssl, buf, (int)(len > TLS_CHUNK_MAX ? TLS_CHUNK_MAX : len));
    if (rc <= 0) return tls_result(t, rc);
    *n = (size_t)rc;
    return WAN_IO_DONE;
}

/* No close_notify: a WAN connection ends with the protocol's BYE, and a close_notify the peer never
 * reads would only add to the unread input of its close. */
static void tls_shutdown(wan_io *io, int abortive) { io->lower->ops->shutdown(io->lower, abortive); }

static void tls_close(wan_io *io)
{
    wan_io_tls *t = (wan_io_tls *)io;
    SSL_free(t->ssl); /* and its BIO */
    xdc_free(t);
}

static const wan_io_ops tls_ops = {
    .name = "tls",
    .handshake = tls_handshake,
    .read = tls_read,
    .write = tls_write,
    .shutdown = tls_shutdown,
    .close = tls_close,
};

xdc_err_t wan_io_tls_push(wan_io_stack *stk, void *ssl_ctx, int is_client)
{
    pthread_once(&bio_once, bio_method_init);
    if (!bio_method) return XDC_ERR_TLS;
    wan_io_tls *t = xdc_calloc(1, sizeof *t);
    if (!t) return XDC_ERR_NOMEM;
    t->ssl = SSL_new(ssl_ctx);
    BIO *bio = t->ssl ? BIO_new(bio_method) : NULL;
    if (!bio) {
        SSL_free(t->ssl);
        xdc_free(t);
        ERR_clear_error();
        return XDC_ERR_TLS;
    }
    BIO_set_data(bio, t);
    BIO_set_init(bio, 1);
    SSL_set_bio(t->ssl, bio, bio);
    if (is_client) SSL_set_connect_state(t->ssl);
    else SSL_set_accept_state(t->ssl);
    t->is_client = is_client;
    wan_io_push(stk, &t->io, &tls_ops);
    return XDC_OK;
}

static SSL *stack_ssl(const wan_io_stack *stk)
{
    const wan_io_tls *t = (const wan_io_tls *)wan_io_find(stk, &tls_ops);
    return t ? t->ssl : NULL;
}

xdc_err_t wan_io_tls_check_peer(const wan_io_stack *stk, const xdc_wan_identity *self, const char *expect_region,
                                int expect_rank, xdc_wan_identity *peer, xdc_diag *diag)
{
    SSL *ssl = stack_ssl(stk);
    if (!ssl) {
        xdc_diag_set(diag, "no TLS session");
        return XDC_ERR_AUTH;
    }
    return wan_tls_check_peer(ssl, self, expect_region, expect_rank, peer, diag);
}

int wan_io_tls_revoked(const wan_io_stack *stk, const void *crl)
{
    SSL *ssl = stack_ssl(stk);
    return ssl && wan_tls_crl_lists(crl, SSL_get0_peer_certificate(ssl));
}
