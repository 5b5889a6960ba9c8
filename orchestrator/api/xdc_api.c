/* xdc_api.c — libxdc (include/xdc.h): a user program as a member of a run. A communicator is a member
 * (orchestrator/member/orch_member.h: load, place, connect, comm engine, teardown), the worker's own
 * set-up without the model, on the CPU device: the caller's buffers are host memory. Each tag is one
 * xdc_sync on the comm engine, created at the tag's first use and kept (its codec contexts hold the
 * error-feedback residual); the teardown stops and frees them in the order docs/design.md gives. Outer
 * rounds are the worker's (orchestrator/worker/orch_outer.h), on a worker without a model. */
#include <xdc.h>

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "orchestrator/member/orch_member.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/worker/orch_outer.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct xdc_request {
    xdc_comm *comm;
    xdc_sync *sync; /* the tag's: its buckets, codec contexts and residual */
    size_t count;   /* fp32 elements, fixed at the tag's first use */
    int tag;
    int pending; /* a round was posted and not yet completed by test or wait */
};

/* A tag's DiLoCo outer state (orch_outer, the worker's own): the caller's parameter list is copied into
 * outer.local, one after the other, around each round. */
typedef struct api_outer {
    orch_outer outer;
    int n_params;
    size_t *counts; /* (n_params) fp32 elements of each parameter */
} api_outer;

/* xdc_comm_check_same: the value as CHECK_DIGITS 4-bit digits d, then their squares, fp32 ((2 * CHECK_DIGITS)
 * values), averaged with codec none (small integers: the mean is exact up to rounding far below the gap a
 * differing member makes). */
#define CHECK_DIGITS 16

/* The tags in use: (XDC_MAX_TAGS) by tag, NULL until first use, an all-reduce or an outer state; the syncs
 * of both, and of the check, in creation order (the teardown stops them in it). */
typedef struct api_tags {
    orch_member *m;
    orch_worker *outer_w; /* the outer rounds' worker without a model (orch_outer.h) */
    xdc_request *by_tag[XDC_MAX_TAGS];
    api_outer *outer[XDC_MAX_TAGS];
    xdc_sync *check; /* xdc_comm_check_same's, made at its first call */
    xdc_sync *order[XDC_MAX_TAGS + 1];
    int n;
} api_tags;

struct xdc_comm {
    orch_member *m;
    orch_worker *outer_w; /* orch_worker_bare_create: the outer rounds run on it */
    orch_member_opts opts;
    char topology[512], config[512], run_dir[512];
    api_tags tags;
    float check_buf[2 * CHECK_DIGITS]; /* xdc_comm_check_same's digits and squares */
    xdc_diag err;                      /* the last failed call's diagnostic */
};

static const orch_member_id *id_of(const xdc_comm *c) { return orch_member_identity(c->m); }

/* Every member of the region is a replica of the tag's values: the region's communicator, NULL alone. */
static xdc_intra_comm *region_replicas(const xdc_comm *c)
{
    xdc_intra_comm *rc = orch_member_region_comm(c->m);
    return xdc_intra_size(rc) > 1 ? rc : NULL;
}

static void tags_destroy(api_tags *t)
{
    xdc_sync_destroy(t->check);
    for (int i = 0; i < XDC_MAX_TAGS; i++) {
        if (t->by_tag[i]) xdc_sync_destroy(t->by_tag[i]->sync);
        xdc_free(t->by_tag[i]);
        api_outer *a = t->outer[i];
        if (!a) continue;
        orch_member_backend(t->m)->device->mem_free(a->outer.local);
        orch_outer_destroy(t->outer_w, &a->outer); /* its sync too */
        xdc_free(a->counts);
        xdc_free(a);
    }
    memset(t, 0, sizeof *t);
}

/* Tear down whatever xdc_comm_create set up (orch_member.h): stop every tag's sync, disconnect, destroy
 * the syncs, then the member (the sync engine, the rendezvous client, the WAN engine). */
static void close_comm(xdc_comm *c)
{
    for (int i = 0; i < c->tags.n; i++) xdc_sync_stop(c->tags.order[i]);
    orch_member_disconnect(c->m);
    tags_destroy(&c->tags);
    orch_worker_bare_destroy(c->outer_w);
    orch_member_destroy(c->m);
}

/* No default: a code added to common/xdc_err.h without its public value here is a -Wswitch error. */
static int status_of(xdc_err_t e)
{
    switch (e) {
    case XDC_OK: return XDC_SUCCESS;
    case XDC_ERR_INVALID: return XDC_STATUS_INVALID;
    case XDC_ERR_NOMEM: return XDC_STATUS_NOMEM;
    case XDC_ERR_IO: return XDC_STATUS_IO;
    case XDC_ERR_CONFIG: return XDC_STATUS_CONFIG;
    case XDC_ERR_PROTO: return XDC_STATUS_PROTOCOL;
    case XDC_ERR_CORRUPT: return XDC_STATUS_CORRUPT;
    case XDC_ERR_RANGE: return XDC_STATUS_RANGE;
    case XDC_ERR_TIMEOUT: return XDC_STATUS_TIMEOUT;
    case XDC_ERR_AGAIN: return XDC_STATUS_IN_PROGRESS;
    case XDC_ERR_CLOSED: return XDC_STATUS_CLOSED;
    case XDC_ERR_UNAVAILABLE: return XDC_STATUS_UNAVAILABLE;
    case XDC_ERR_PEER_LOST: return XDC_STATUS_PEER_LOST;
    case XDC_ERR_TLS: return XDC_STATUS_TLS;
    case XDC_ERR_AUTH: return XDC_STATUS_AUTH;
    case XDC_ERR_UNSUPPORTED: return XDC_STATUS_UNSUPPORTED;
    case XDC_ERR_CUDA:
    case XDC_ERR_NCCL: return XDC_STATUS_DEVICE;
    case XDC_ERR_INTERNAL: return XDC_STATUS_INTERNAL;
    case XDC_ERR_INTERRUPTED: return XDC_STATUS_INTERRUPTED;
    }
    return XDC_STATUS_INTERNAL;
}

const char *xdc_status_string(int status)
{
    static const char *const text[] = {
        [XDC_SUCCESS] = "success",
        [XDC_STATUS_INVALID] = "invalid argument or call out of order",
        [XDC_STATUS_NOMEM] = "out of memory",
        [XDC_STATUS_IO] = "I/O error",
        [XDC_STATUS_CONFIG] = "invalid configuration or identity",
        [XDC_STATUS_PROTOCOL] = "protocol error",
        [XDC_STATUS_CORRUPT] = "data corrupt (checksum or format)",
        [XDC_STATUS_RANGE] = "value out of range",
        [XDC_STATUS_TIMEOUT] = "deadline passed; the request is still pending",
        [XDC_STATUS_IN_PROGRESS] = "in progress",
        [XDC_STATUS_CLOSED] = "closed",
        [XDC_STATUS_UNAVAILABLE] = "peer or resource unavailable",
        [XDC_STATUS_PEER_LOST] = "peer failed",
        [XDC_STATUS_TLS] = "TLS failure",
        [XDC_STATUS_AUTH] = "peer authentication refused",
        [XDC_STATUS_UNSUPPORTED] = "not supported",
        [XDC_STATUS_DEVICE] = "CUDA or NCCL error",
        [XDC_STATUS_INTERNAL] = "internal error",
        [XDC_STATUS_INTERRUPTED] = "interrupted by a signal",
    };
    return status >= 0 && status < (int)(sizeof text / sizeof text[0]) ? text[status] : "unknown status";
}

int xdc_api_version(void) { return XDC_API_VERSION; }

/* A failed call: its diagnostic on the communicator, its public status. */
static int fail(xdc_comm *c, xdc_err_t rc, const xdc_diag *d)
{
    c->err = *d;
    return status_of(rc);
}

/* opts->field, else the variable the launcher sets; "" when neither. */
static xdc_err_t option_path(const char *given, const char *var, const char *what, char *out, size_t cap,
                             xdc_diag *diag)
{
    const char *v = given ? given : getenv(var);
    if (!v || !*v) {
        xdc_diag_set(diag,
                     "no %s: give it in xdc_comm_options or set %s (xdc launch --exec and xdc agent --exec set it)",
                     what, var);
        return XDC_ERR_CONFIG;
    }
    snprintf(out, cap, "%s", v);
    return XDC_OK;
}

/* The caller's options (NULL: the defaults), checked for size and version. */
static xdc_err_t read_options(const xdc_comm_options *opts, xdc_comm *c, xdc_diag *diag)
{
    xdc_comm_options o = XDC_COMM_OPTIONS_INIT;
    if (opts) {
        if (opts->struct_size < offsetof(xdc_comm_options, emulate_wan) + sizeof(int) ||
            opts->api_version >> 16 != XDC_API_VERSION_MAJOR) {
            xdc_diag_set(diag,
                         "xdc_comm_options of size %u for API version %u.%u: this library is %d.%d (initialise "
                         "the options with XDC_COMM_OPTIONS_INIT)",
                         opts->struct_size, opts->api_version >> 16, opts->api_version & 0xffff, XDC_API_VERSION_MAJOR,
                         XDC_API_VERSION_MINOR);
            return XDC_ERR_INVALID;
        }
        memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
    }
    XDC_CHECK(option_path(o.topology, "XDC_TOPOLOGY", "topology file", c->topology, sizeof c->topology, diag));
    XDC_CHECK(option_path(o.config, "XDC_CONFIG", "run file", c->config, sizeof c->config, diag));
    XDC_CHECK(option_path(o.run_dir, "XDC_RUN_DIR", "run folder", c->run_dir, sizeof c->run_dir, diag));
    const char *emu = getenv("XDC_EMULATE_WAN");
    c->opts = (orch_member_opts){.topology_path = c->topology,
                                 .config_path = c->config,
                                 .run_dir = c->run_dir,
                                 .emulate_wan = o.emulate_wan >= 0 ? o.emulate_wan : emu && strcmp(emu, "1") == 0};
    return XDC_OK;
}

int xdc_comm_create(const xdc_comm_options *opts, xdc_comm **out, char *err, size_t err_cap)
{
    if (err && err_cap) err[0] = '\0';
    if (!out) {
        if (err && err_cap) snprintf(err, err_cap, "xdc_comm_create: out is NULL");
        return XDC_STATUS_INVALID;
    }
    *out = NULL;
    xdc_comm *c = xdc_calloc(1, sizeof *c);
    if (!c) return XDC_STATUS_NOMEM;
    xdc_diag d = {{0}};
    const char *what = "options";
    xdc_err_t rc = read_options(opts, c, &d);
    if (rc == XDC_OK) what = "identity and configuration", rc = orch_member_create(&c->opts, &c->m, &d);
    if (rc == XDC_OK) what = "layout", rc = orch_member_place(c->m, &d);
    if (rc == XDC_OK) what = "device", rc = orch_member_use_host(c->m, &d);
    if (rc == XDC_OK) what = "WAN engine and rendezvous", rc = orch_member_open_wan(c->m, &d);
    if (rc == XDC_OK) rc = orch_member_connect(c->m, &what, &d);
    if (rc == XDC_OK) what = "comm engine", rc = orch_member_comm_engine(c->m, &d);
    if (rc == XDC_OK) rc = orch_worker_bare_create(c->m, &c->outer_w);
    if (rc == XDC_OK) {
        c->tags.m = c->m;
        c->tags.outer_w = c->outer_w;
        what = "start barrier";
        rc = rdzv_barrier(orch_member_rdzv(c->m), RDZV_BARRIER_START, id_of(c)->gsize,
                          orch_member_config(c->m)->timeouts.rendezvous_ms, &d);
    }
    if (rc != XDC_OK) {
        orch_member_report_failure(c->m, what, rc, d.msg);
        if (err && err_cap) snprintf(err, err_cap, "%s failed: %s", what, d.msg);
        close_comm(c);
        xdc_free(c);
        return status_of(rc);
    }
    XDC_INFO(XDC_SUB_ORCH, "libxdc %d.%d: member %s, global rank %d of %d, region %d of %d, codec %s",
             XDC_API_VERSION_MAJOR, XDC_API_VERSION_MINOR, id_of(c)->member, id_of(c)->grank, id_of(c)->gsize,
             id_of(c)->region_idx, id_of(c)->n_regions, orch_member_config(c->m)->codec);
    *out = c;
    return XDC_SUCCESS;
}

int xdc_comm_finalize(xdc_comm *c)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    xdc_err_t rc = orch_member_end_barrier(c->m, &d);
    if (rc != XDC_OK) xdc_diag_prefix(&d, "finalize");
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

void xdc_comm_destroy(xdc_comm *c)
{
    if (!c) return;
    close_comm(c);
    xdc_free(c);
}

const char *xdc_comm_last_error(const xdc_comm *c) { return c ? c->err.msg : "no communicator"; }
int xdc_comm_rank(const xdc_comm *c) { return c ? id_of(c)->grank : -1; }
int xdc_comm_size(const xdc_comm *c) { return c ? id_of(c)->gsize : -1; }
int xdc_comm_region(const xdc_comm *c) { return c ? id_of(c)->region_idx : -1; }
int xdc_comm_num_regions(const xdc_comm *c) { return c ? id_of(c)->n_regions : -1; }
const char *xdc_comm_region_name(const xdc_comm *c) { return c ? id_of(c)->region : ""; }
int xdc_comm_region_rank(const xdc_comm *c) { return c ? id_of(c)->lrank : -1; }
int xdc_comm_region_size(const xdc_comm *c) { return c ? id_of(c)->lsize : -1; }

/* The tag's state, created at its first use (the only allocation of an all-reduce). */
static xdc_err_t tag_state(xdc_comm *c, int tag, size_t count, xdc_request **out, xdc_diag *diag)
{
    if (tag < 0 || tag >= XDC_MAX_TAGS || count == 0) {
        xdc_diag_set(diag, "tag %d, count %zu: a tag is 0..%d and a count at least 1", tag, count, XDC_MAX_TAGS - 1);
        return XDC_ERR_INVALID;
    }
    if (c->tags.outer[tag]) {
        xdc_diag_set(diag, "tag %d holds outer rounds (xdc_outer_init), not an all-reduce", tag);
        return XDC_ERR_INVALID;
    }
    xdc_request *r = c->tags.by_tag[tag];
    if (r) {
        if (r->count != count) {
            xdc_diag_set(diag,
                         "tag %d holds %zu values; this call passes %zu (a tag's count is fixed at its first use)", tag,
                         r->count, count);
            return XDC_ERR_INVALID;
        }
        *out = r;
        return XDC_OK;
    }
    r = xdc_calloc(1, sizeof *r);
    if (!r) return XDC_ERR_NOMEM;
    xdc_sync_cfg sc;
    orch_member_sync_cfg(c->m, 1, &sc);
    sc.n_elems = count;
    sc.dp = region_replicas(c); /* every member a replica */
    sc.name = "libxdc";
    xdc_err_t rc = xdc_sync_create(orch_member_sync_engine(c->m), &sc, &r->sync, diag);
    if (rc != XDC_OK) {
        xdc_free(r);
        return rc;
    }
    r->comm = c;
    r->count = count;
    r->tag = tag;
    c->tags.by_tag[tag] = r;
    c->tags.order[c->tags.n++] = r->sync;
    *out = r;
    return XDC_OK;
}

int xdc_iallreduce(xdc_comm *c, int tag, float *buf, size_t count, xdc_request **req)
{
    if (!c || !req || !buf) return XDC_STATUS_INVALID;
    *req = NULL;
    xdc_diag d = {{0}};
    xdc_request *r;
    xdc_err_t rc = tag_state(c, tag, count, &r, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    if (r->pending) {
        xdc_diag_set(&d, "tag %d: the round posted before is not complete (wait for its request first)", tag);
        return fail(c, XDC_ERR_INVALID, &d);
    }
    if ((rc = xdc_sync_begin(r->sync, buf)) != XDC_OK) {
        xdc_diag_set(&d, "tag %d: the communicator takes no more rounds (it was stopped)", tag);
        return fail(c, rc, &d);
    }
    xdc_sync_mark_ready(r->sync, 0); /* the whole buffer is final: the comm thread starts at once */
    r->pending = 1;
    *req = r;
    return XDC_SUCCESS;
}

/* Complete r within timeout_ms, or say `not_yet` (the round goes on). */
static int settle(xdc_request *r, int64_t timeout_ms, int not_yet)
{
    if (!r) return XDC_STATUS_INVALID;
    xdc_comm *c = r->comm;
    xdc_diag d = {{0}};
    if (!r->pending) {
        xdc_diag_set(&d, "tag %d: no round in flight (its request completed before)", r->tag);
        return fail(c, XDC_ERR_INVALID, &d);
    }
    xdc_err_t rc = xdc_sync_wait(r->sync, timeout_ms, &d);
    if (rc == XDC_ERR_AGAIN) {
        if (not_yet == XDC_STATUS_IN_PROGRESS) return not_yet; /* a look, not a failure */
        xdc_diag_set(&d, "tag %d: not complete within %lld ms (still in flight)", r->tag, (long long)timeout_ms);
        c->err = d;
        return not_yet;
    }
    r->pending = 0;
    if (rc == XDC_OK) return XDC_SUCCESS;
    char what[32];
    snprintf(what, sizeof what, "all-reduce of tag %d", r->tag);
    orch_member_report_failure(c->m, what, rc, d.msg);
    xdc_diag_prefix(&d, "%s", what);
    return fail(c, rc, &d);
}

int xdc_request_wait(xdc_request *r, int64_t timeout_ms) { return settle(r, timeout_ms, XDC_STATUS_TIMEOUT); }
int xdc_request_test(xdc_request *r) { return settle(r, 0, XDC_STATUS_IN_PROGRESS); }

int xdc_allreduce(xdc_comm *c, int tag, float *buf, size_t count)
{
    xdc_request *r;
    int st = xdc_iallreduce(c, tag, buf, count, &r);
    return st == XDC_SUCCESS ? xdc_request_wait(r, -1) : st;
}

/* The caller's parameters into the staging (to_local) or back. */
static void outer_copy(api_outer *a, float *const *params, int to_local)
{
    size_t off = 0;
    for (int i = 0; i < a->n_params; i++) {
        size_t bytes = a->counts[i] * sizeof(float);
        if (to_local) memcpy(a->outer.local + off, params[i], bytes);
        else memcpy(params[i], a->outer.local + off, bytes);
        off += a->counts[i];
    }
}

static xdc_err_t outer_init(xdc_comm *c, int tag, int n_params, float *const *params, const size_t *counts,
                            xdc_diag *diag)
{
    if (tag < 0 || tag >= XDC_MAX_TAGS || n_params < 1 || !params || !counts) {
        xdc_diag_set(diag, "tag %d, %d parameters: a tag is 0..%d, and at least one parameter with its count", tag,
                     n_params, XDC_MAX_TAGS - 1);
        return XDC_ERR_INVALID;
    }
    if (c->tags.outer[tag] || c->tags.by_tag[tag]) {
        xdc_diag_set(diag, "tag %d is in use already (outer rounds are set up once per tag)", tag);
        return XDC_ERR_INVALID;
    }
    size_t n = 0;
    for (int i = 0; i < n_params; i++) {
        if (!params[i] || counts[i] == 0) {
            xdc_diag_set(diag, "parameter %d: no buffer or a count of 0", i);
            return XDC_ERR_INVALID;
        }
        n += counts[i];
    }
    api_outer *a = xdc_calloc(1, sizeof *a);
    if (!a) return XDC_ERR_NOMEM;
    c->tags.outer[tag] = a; /* from here on tags_destroy frees whatever was made */
    a->counts = xdc_malloc((size_t)n_params * sizeof *a->counts);
    if (!a->counts) return XDC_ERR_NOMEM;
    memcpy(a->counts, counts, (size_t)n_params * sizeof *counts);
    a->n_params = n_params;
    a->outer.n = n;
    XDC_CHECK(orch_member_backend(c->m)->device->mem_alloc((void **)&a->outer.local, n * sizeof(float)));
    outer_copy(a, params, 1); /* the start of the first inner phase: global = these */
    xdc_intra_comm *dp = region_replicas(c);
    XDC_CHECK(orch_outer_open(c->outer_w, &a->outer, dp, diag));
    c->tags.order[c->tags.n++] = a->outer.sync;
    return XDC_OK;
}

int xdc_outer_init(xdc_comm *c, int tag, int n_params, float *const *params, const size_t *counts)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    xdc_err_t rc = outer_init(c, tag, n_params, params, counts, &d);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

int xdc_outer_round(xdc_comm *c, int tag, float *const *params)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    api_outer *a = tag >= 0 && tag < XDC_MAX_TAGS ? c->tags.outer[tag] : NULL;
    if (!a || !a->outer.sync || !params) {
        xdc_diag_set(&d, "tag %d: no outer rounds set up on it (xdc_outer_init first), or no parameters", tag);
        return fail(c, XDC_ERR_INVALID, &d);
    }
    for (int i = 0; i < a->n_params; i++)
        if (!params[i]) {
            xdc_diag_set(&d, "tag %d: parameter %d is NULL", tag, i);
            return fail(c, XDC_ERR_INVALID, &d);
        }
    outer_copy(a, params, 1);
    xdc_err_t rc = orch_outer_round(c->outer_w, &a->outer, &d); /* pseudo, mean, Nesterov step, local = global */
    if (rc != XDC_OK) {
        char what[32];
        snprintf(what, sizeof what, "outer round of tag %d", tag);
        orch_member_report_failure(c->m, what, rc, d.msg);
        xdc_diag_prefix(&d, "%s", what);
        return fail(c, rc, &d);
    }
    outer_copy(a, params, 0);
    return XDC_SUCCESS;
}

int xdc_comm_get_stats(xdc_comm *c, xdc_comm_stats *out)
{
    if (!c) return XDC_STATUS_INVALID;
    if (!out || out->struct_size < sizeof(uint32_t)) {
        xdc_diag d = {{0}};
        xdc_diag_set(&d, "xdc_comm_get_stats: %s (initialise the struct with XDC_COMM_STATS_INIT)",
                     out ? "struct_size is 0" : "out is NULL");
        return fail(c, XDC_ERR_INVALID, &d);
    }
    xdc_comm_stats s = {.struct_size = out->struct_size};
    xdc_wan_peer **peers = orch_member_peers(c->m);
    for (int r = 0; r < id_of(c)->n_regions && peers; r++) {
        if (!peers[r]) continue; /* this member's own region */
        xdc_wan_stats st;
        xdc_wan_peer_stats(peers[r], &st);
        s.wan_tx_bytes += st.tx_payload_bytes;
        s.wan_rx_bytes += st.rx_payload_bytes;
        s.wan_raw_bytes += st.tx_raw_bytes;
        s.wan_wire_bytes += st.tx_wire_bytes;
    }
    /* a caller built against an older, smaller struct gets the fields it knows */
    memcpy(out, &s, out->struct_size < sizeof s ? out->struct_size : sizeof s);
    return XDC_SUCCESS;
}

/* The check's sync: codec none and no error feedback, whatever the run file says, so the mean is exact. */
static xdc_err_t check_sync(xdc_comm *c, xdc_diag *diag)
{
    if (c->tags.check) return XDC_OK;
    xdc_sync_cfg sc;
    orch_member_sync_cfg(c->m, 1, &sc);
    sc.n_elems = 2 * CHECK_DIGITS;
    sc.dp = region_replicas(c);
    sc.name = "libxdc check";
    sc.codec.kind = XDC_CODEC_NONE;
    sc.codec.error_feedback = false;
    XDC_CHECK(xdc_sync_create(orch_member_sync_engine(c->m), &sc, &c->tags.check, diag));
    c->tags.order[c->tags.n++] = c->tags.check;
    return XDC_OK;
}

/* Every member's value equal: then each digit's mean m is this member's digit and the mean of the squares
 * minus m^2 (the digits' variance) is 0. The mean weighs each member at least w = 1 / (regions x members),
 * so with a member whose digit differs (by 1 or more) either m is off this member's digit by more than w / 4,
 * or every differing digit is at least 3/4 from m and the variance at least w / 2. Rounding (values <= 225)
 * stays far below w / 4 for any run of fewer than some 10^4 regions x members. */
static xdc_err_t check_same(xdc_comm *c, uint64_t value, xdc_diag *diag)
{
    XDC_CHECK(check_sync(c, diag));
    for (int i = 0; i < CHECK_DIGITS; i++) {
        float d = (float)((value >> (4 * i)) & 15);
        c->check_buf[i] = d;
        c->check_buf[CHECK_DIGITS + i] = d * d;
    }
    xdc_err_t rc = xdc_sync_begin(c->tags.check, c->check_buf);
    if (rc != XDC_OK) {
        xdc_diag_set(diag, "check_same: the communicator takes no more rounds (it was stopped)");
        return rc;
    }
    xdc_sync_mark_ready(c->tags.check, 0);
    XDC_CHECK(xdc_sync_wait(c->tags.check, -1, diag));
    double tol = 0.25 / ((double)id_of(c)->n_regions * id_of(c)->gsize);
    for (int i = 0; i < CHECK_DIGITS; i++) {
        double d = (double)((value >> (4 * i)) & 15), m = c->check_buf[i];
        if (fabs(m - d) > tol || c->check_buf[CHECK_DIGITS + i] - m * m > tol) {
            xdc_diag_set(diag,
                         "check_same: the members passed different values (this one %016llx; 4-bit digit %d: "
                         "mean %.6g, mean square %.6g)",
                         (unsigned long long)value, i, c->check_buf[i], c->check_buf[CHECK_DIGITS + i]);
            return XDC_ERR_CORRUPT;
        }
    }
    return XDC_OK;
}

int xdc_comm_check_same(xdc_comm *c, uint64_t value)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    xdc_err_t rc = check_same(c, value, &d);
    if (rc != XDC_OK && rc != XDC_ERR_CORRUPT) orch_member_report_failure(c->m, "check_same", rc, d.msg);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}
