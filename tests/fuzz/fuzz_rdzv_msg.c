/* fuzz_rdzv_msg.c — the rendezvous request parser (rdzv_request_parse) on untrusted bytes: any input is
 * refused with a reason or accepted as a request whose fields keep their bounds (lengths under their
 * caps and NUL-terminated, names printable, count and timeout in range), and an accepted request
 * encoded again with the fields its op takes parses back to the same request, so nothing is dropped or
 * reinterpreted. Input: one message, as a member would send it. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_hash.h"
#include "orchestrator/rdzv/orch_rdzv.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int bounded(const char *s, size_t cap, int spaces)
{
    size_t n = strnlen(s, cap);
    if (n == cap) return 0;
    for (size_t i = 0; spaces >= 0 && i < n; i++)
        if ((unsigned char)s[i] > 0x7e || (unsigned char)s[i] < (spaces ? 0x20 : 0x21)) return 0;
    return 1;
}

/* The request as a member's client would send it. */
static json_t *encode(const rdzv_request *q)
{
    static const char *const op[] = {"join", "set", "get", "barrier", "heartbeat"};
    json_t *o = json_pack("{s:s}", "op", op[q->op]);
    if (q->op == RDZV_OP_JOIN) json_object_set_new(o, "member", json_string(q->member));
    if (q->op == RDZV_OP_SET || q->op == RDZV_OP_GET || q->op == RDZV_OP_BARRIER)
        json_object_set_new(o, "key", json_string(q->key));
    if (q->op == RDZV_OP_SET) json_object_set_new(o, "value", json_string(q->value));
    if (q->op == RDZV_OP_BARRIER) json_object_set_new(o, "count", json_integer(q->count));
    if (q->op == RDZV_OP_GET || q->op == RDZV_OP_BARRIER)
        json_object_set_new(o, "timeout_ms", json_integer(q->timeout_ms));
    if (q->status[0]) json_object_set_new(o, "status", json_string(q->status));
    return o;
}

XDC_FUZZ_TARGET(rdzv_msg)
{
    static rdzv_request q, again; /* ~4.6 KB each: kept off the stack */
    static char buf[2 * RDZV_MSG_MAX];
    xdc_diag d;
    d.msg[0] = '\0';
    if (rdzv_request_parse(data, size, &q, &d) != XDC_OK) {
        if (d.msg[0] == '\0') __builtin_trap(); /* a refusal always says why */
        return 0;
    }
    if ((unsigned)q.op > RDZV_OP_HEARTBEAT || !bounded(q.member, sizeof q.member, 0) ||
        !bounded(q.key, sizeof q.key, 0) || !bounded(q.status, sizeof q.status, 1) ||
        !bounded(q.value, sizeof q.value, -1) || q.count < 0 || q.count > 1024 || q.timeout_ms < 0 ||
        q.timeout_ms > INT32_MAX)
        __builtin_trap();
    if ((q.op == RDZV_OP_SET || q.op == RDZV_OP_GET || q.op == RDZV_OP_BARRIER) && !q.key[0]) __builtin_trap();
    json_t *o = encode(&q);
    size_t n = o ? json_dumpb(o, buf, sizeof buf, JSON_COMPACT) : 0;
    json_decref(o);
    if (n == 0 || n > sizeof buf) __builtin_trap();
    /* The encoding of a request that fit may grow past the bound (escapes): then it need not parse. */
    if (rdzv_request_parse(buf, n, &again, &d) != XDC_OK) {
        if (n <= RDZV_MSG_MAX) __builtin_trap();
        return 0;
    }
    if (memcmp(&q, &again, sizeof q) != 0) __builtin_trap();
    return 0;
}

/* The request's op and fields (the value as its length and a hash). */
XDC_FUZZ_VERDICT(rdzv_msg)
{
    static rdzv_request q;
    xdc_diag d = {{0}};
    xdc_err_t rc = rdzv_request_parse(data, size, &q, &d);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", d.msg);
        return rc;
    }
    snprintf(summary, cap, "op=%d member=%s key=%s value=%zu/%08x status=%s count=%d timeout_ms=%lld", (int)q.op,
             q.member, q.key, strlen(q.value), (unsigned)xdc_xxh64(q.value, strlen(q.value), 0), q.status, q.count,
             (long long)q.timeout_ms);
    return XDC_OK;
}
