/* xdc_api.c — libxdc (include/xdc.h): a user program as a member of a run. A communicator is a member
 * (orchestrator/member/orch_member.h: load, place, connect, comm engine, teardown), the worker's own
 * set-up without the model, on the CPU device: the caller's buffers are host memory. Each tag is one
 * xdc_sync on the comm engine, created at the tag's first use and kept (its codec contexts hold the
 * error-feedback residual); the teardown stops and frees them in the order docs/design.md gives. Outer
 * rounds are the member's (orchestrator/member/orch_outer.h), as the training worker's DiLoCo runs them.
 *
 * The device entry points (*_device) take device memory of the device table XDC_DEVICE names (cuda by
 * default) and the caller's stream: a device tag's sync, codec and outer state live on that device (only
 * encoded bytes in pinned host memory), its work runs on xdc's own streams, ordered after the caller's
 * stream by an event recorded there, and the caller's stream waits on xdc's completion event. */
#include <xdc.h>

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "orchestrator/member/orch_member.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "orchestrator/member/orch_outer.h"

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
    int pending;                /* a round was posted and not yet completed by test or wait */
    int device;                 /* the device entry points' ordinal the tag lives on; -1: host memory */
    const xdc_kern_backend *be; /* the device's table (device >= 0) */
    xdc_stream *caller;         /* device: the caller's stream of the round in flight (stream_wrap) */
};

/* A tag's DiLoCo outer state (orch_outer, as the worker's DiLoCo has): the caller's parameter list is copied
 * into outer.local, one after the other, around each round (on outer.stream, xdc's own, for a device tag;
 * outer.be is the device table that holds the state). */
typedef struct api_outer {
    orch_outer outer;
    int n_params;
    size_t *counts;          /* (n_params) fp32 elements of each parameter */
    char final_codec[32];    /* xdc_outer_last_round's codec ("": the tag's) */
    int rounds;              /* begun so far: xdc_outer_configure only before the first */
    int finished;            /* xdc_outer_last_round ran: no round after it */
    int device;              /* as xdc_request.device */
    xdc_event *ready, *done; /* device: the caller's stream before xdc's, xdc's before the caller's */
} api_outer;

/* xdc_comm_check_same: the value as CHECK_DIGITS 4-bit digits d, then their squares, fp32 ((2 * CHECK_DIGITS)
 * values), averaged with codec none (small integers: the mean is exact up to rounding far below the gap a
 * differing member makes). */
#define CHECK_DIGITS 16

/* The tags in use: (XDC_MAX_TAGS) by tag, NULL until first use, an all-reduce or an outer state; the syncs
 * of both, and of the check, in creation order (the teardown stops them in it). */
typedef struct api_tags {
    orch_member *m;
    xdc_request *by_tag[XDC_MAX_TAGS];
    api_outer *outer[XDC_MAX_TAGS];
    xdc_sync *check; /* xdc_comm_check_same's, made at its first call */
    xdc_sync *order[XDC_MAX_TAGS + 1];
    int n;
} api_tags;

struct xdc_comm {
    orch_member *m;
    const xdc_kern_backend *dev_be; /* the device entry points' table (XDC_DEVICE; at the first call) */
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

/* Regions of different sizes: each region weighs as many members as it has, so the mean is over every member. */
static xdc_err_t weigh_members(const xdc_comm *c, xdc_sync *s, xdc_diag *diag)
{
    return orch_member_weigh_regions(c->m, s, id_of(c)->replicas, diag);
}

static void tags_destroy(api_tags *t)
{
    xdc_sync_destroy(t->check);
    for (int i = 0; i < XDC_MAX_TAGS; i++) {
        xdc_request *r = t->by_tag[i];
        if (r) xdc_sync_destroy(r->sync);
        if (r && r->be) r->be->device->stream_unwrap(r->caller);
        xdc_free(r);
        api_outer *a = t->outer[i];
        if (!a) continue;
        if (a->outer.be) { /* what outer_init got to */
            const xdc_device_ops *dev = a->outer.be->device;
            xdc_stream *own = a->outer.stream;
            dev->mem_free(a->outer.local);
            orch_outer_destroy(&a->outer); /* its sync too */
            dev->stream_destroy(own);      /* NULL (host): a no-op */
            dev->event_destroy(a->ready);
            dev->event_destroy(a->done);
        }
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
    if (rc == XDC_OK) {
        c->tags.m = c->m;
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

/* ---- device scope -------------------------------------------------------------------------------------- */

/* A device call's scope: the device table (XDC_DEVICE, cuda by default, found at the first device call), the
 * calling thread bound to `device` for the call (its own binding back at the end: the caller's framework keeps
 * its current device), and the caller's stream wrapped (stream_wrap) when `stream` is not DEV_NO_STREAM. */
typedef struct api_dev {
    const xdc_kern_backend *be;
    int prev;           /* the calling thread's device before the call */
    xdc_stream *caller; /* the caller's stream; NULL until wrapped */
} api_dev;

#define DEV_NO_STREAM ((void *)-1) /* device_enter: bind only */

static xdc_err_t device_enter(xdc_comm *c, int device, void *stream, api_dev *d, xdc_diag *diag)
{
    if (!c->dev_be) {
        const char *word = getenv("XDC_DEVICE");
        xdc_backend_kind kind = XDC_BACKEND_CUDA;
        if (word && *word && xdc_backend_parse(word, &kind) != XDC_OK) {
            xdc_diag_set(diag, "XDC_DEVICE='%s' is not a device (cuda, cpu-strict or cpu)", word);
            return XDC_ERR_CONFIG;
        }
        XDC_CHECK(xdc_kern_backend_get(kind, &c->dev_be, diag));
    }
    const xdc_device_ops *dev = c->dev_be->device;
    *d = (api_dev){.be = c->dev_be};
    XDC_CHECK(dev->get_device(&d->prev));
    if (dev->set_device(device) != XDC_OK) {
        xdc_diag_set(diag, "%s device %d: no such device", c->dev_be->name, device);
        return XDC_ERR_INVALID;
    }
    xdc_err_t rc = stream == DEV_NO_STREAM ? XDC_OK : dev->stream_wrap(stream, &d->caller);
    if (rc != XDC_OK) {
        xdc_diag_set(diag, "%s device %d: the caller's stream %p is not one of it", c->dev_be->name, device, stream);
        (void)dev->set_device(d->prev);
    }
    return rc;
}

/* The end of device_enter's scope (its wrapped stream released unless the caller took it: NULL); nothing
 * after outer_enter's host scope. */
static void device_leave(api_dev *d)
{
    if (!d->be) return;
    d->be->device->stream_unwrap(d->caller);
    (void)d->be->device->set_device(d->prev);
}

/* Work queued on `after` from now on runs after the work queued on `before` so far (ev recorded there). */
static xdc_err_t order(const xdc_device_ops *dev, xdc_event *ev, xdc_stream *before, xdc_stream *after)
{
    XDC_CHECK(dev->event_record(ev, before));
    return dev->stream_wait_event(after, ev);
}

/* A device tag's buffers are device memory the member's region communicator (host shared memory) cannot
 * read: with replicas in the region, refused. */
static xdc_err_t device_alone(xdc_comm *c, const xdc_kern_backend *be, int tag, xdc_diag *diag)
{
    if (!be || be->kind == orch_member_backend(c->m)->kind || !region_replicas(c)) return XDC_OK;
    xdc_diag_set(diag,
                 "tag %d: %s device memory with %d members in this region: the region's communicator is host shared "
                 "memory (device buffers take one member per region for now)",
                 tag, be->name, xdc_intra_size(orch_member_region_comm(c->m)));
    return XDC_ERR_UNSUPPORTED;
}

/* ---- all-reduce ---------------------------------------------------------------------------------------- */

/* The tag's state, created at its first use (the only allocation of an all-reduce), on `be` device `device`
 * (be NULL, device -1: host memory); later calls must name the same place. */
static xdc_err_t tag_state(xdc_comm *c, int tag, size_t count, const xdc_kern_backend *be, int device,
                           xdc_request **out, xdc_diag *diag)
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
        if (r->device != device) {
            xdc_diag_set(diag, "tag %d lives on %s %d; this call passes %s %d (fixed at the tag's first use)", tag,
                         r->device < 0 ? "host" : "device", r->device, device < 0 ? "host" : "device", device);
            return XDC_ERR_INVALID;
        }
        *out = r;
        return XDC_OK;
    }
    XDC_CHECK(device_alone(c, be, tag, diag));
    r = xdc_calloc(1, sizeof *r);
    if (!r) return XDC_ERR_NOMEM;
    xdc_sync_cfg sc;
    orch_member_sync_cfg(c->m, 1, &sc);
    sc.n_elems = count;
    sc.dp = region_replicas(c); /* every member a replica */
    sc.name = "libxdc";
    sc.backend = be; /* the codec runs there too; compute NULL: the calling thread's current stream */
    xdc_err_t rc = xdc_sync_create(orch_member_sync_engine(c->m), &sc, &r->sync, diag); /* on the bound device */
    if (rc == XDC_OK && (rc = weigh_members(c, r->sync, diag)) != XDC_OK) xdc_sync_destroy(r->sync);
    if (rc != XDC_OK) {
        xdc_free(r);
        return rc;
    }
    r->comm = c;
    r->count = count;
    r->tag = tag;
    r->device = device;
    r->be = be;
    c->tags.by_tag[tag] = r;
    c->tags.order[c->tags.n++] = r->sync;
    *out = r;
    return XDC_OK;
}

/* Post the round on r: the whole buffer final once the work queued so far on `caller` ran (device: the
 * calling thread's current stream made `caller` for the mark, so the ready event is recorded there). */
static xdc_err_t post(xdc_request *r, float *buf, xdc_stream *caller, xdc_diag *diag)
{
    if (r->pending) {
        xdc_diag_set(diag, "tag %d: the round posted before is not complete (wait for its request first)", r->tag);
        return XDC_ERR_INVALID;
    }
    if (xdc_sync_begin(r->sync, buf) != XDC_OK) {
        xdc_diag_set(diag, "tag %d: the communicator takes no more rounds (it was stopped)", r->tag);
        return XDC_ERR_CLOSED;
    }
    const xdc_device_ops *dev = r->be ? r->be->device : NULL;
    xdc_stream *prev = NULL;
    xdc_err_t rc = dev ? dev->get_stream(&prev) : XDC_OK;
    if (rc == XDC_OK && dev) rc = dev->set_stream(caller);
    xdc_sync_mark_ready(r->sync, 0); /* the whole buffer is final: the comm thread starts at once */
    if (dev) (void)dev->set_stream(prev);
    r->pending = 1;
    return rc;
}

int xdc_iallreduce(xdc_comm *c, int tag, float *buf, size_t count, xdc_request **req)
{
    if (!c || !req || !buf) return XDC_STATUS_INVALID;
    *req = NULL;
    xdc_diag d = {{0}};
    xdc_request *r;
    xdc_err_t rc = tag_state(c, tag, count, NULL, -1, &r, &d);
    if (rc == XDC_OK) rc = post(r, buf, NULL, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    *req = r;
    return XDC_SUCCESS;
}

int xdc_iallreduce_device(xdc_comm *c, int tag, float *buf, size_t count, int device, void *stream, xdc_request **req)
{
    if (!c || !req || !buf) return XDC_STATUS_INVALID;
    *req = NULL;
    xdc_diag d = {{0}};
    api_dev dv;
    xdc_request *r;
    xdc_err_t rc = device_enter(c, device, stream, &dv, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    rc = tag_state(c, tag, count, dv.be, device, &r, &d);
    if (rc == XDC_OK) rc = post(r, buf, dv.caller, &d);
    if (rc == XDC_OK) {
        r->caller = dv.caller; /* held until the round completed: the result is ordered before it then */
        dv.caller = NULL;
    }
    device_leave(&dv);
    if (rc != XDC_OK) return fail(c, rc, &d);
    *req = r;
    return XDC_SUCCESS;
}

/* xdc_sync_wait on r; a device round's completion event made a wait of the caller's stream (its current
 * stream for the call, on the tag's device). */
static xdc_err_t wait_round(xdc_request *r, int64_t timeout_ms, xdc_diag *diag)
{
    if (!r->be) return xdc_sync_wait(r->sync, timeout_ms, diag);
    const xdc_device_ops *dev = r->be->device;
    int prev_dev = 0;
    xdc_stream *prev = NULL;
    XDC_CHECK(dev->get_device(&prev_dev));
    xdc_err_t rc = dev->set_device(r->device);
    if (rc == XDC_OK) rc = dev->get_stream(&prev);
    if (rc == XDC_OK) rc = dev->set_stream(r->caller);
    if (rc == XDC_OK) {
        rc = xdc_sync_wait(r->sync, timeout_ms, diag);
        (void)dev->set_stream(prev);
    }
    (void)dev->set_device(prev_dev);
    return rc;
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
    xdc_err_t rc = wait_round(r, timeout_ms, &d);
    if (rc == XDC_ERR_AGAIN) {
        if (not_yet == XDC_STATUS_IN_PROGRESS) return not_yet; /* a look, not a failure */
        xdc_diag_set(&d, "tag %d: not complete within %lld ms (still in flight)", r->tag, (long long)timeout_ms);
        c->err = d;
        return not_yet;
    }
    r->pending = 0;
    if (r->be) r->be->device->stream_unwrap(r->caller);
    r->caller = NULL;
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

int xdc_allreduce_device(xdc_comm *c, int tag, float *buf, size_t count, int device, void *stream)
{
    xdc_request *r;
    int st = xdc_iallreduce_device(c, tag, buf, count, device, stream, &r);
    return st == XDC_SUCCESS ? xdc_request_wait(r, -1) : st;
}

/* ---- outer rounds -------------------------------------------------------------------------------------- */

/* The caller's parameters into the staging (to_local) or back, queued on the outer stream (host: at once). */
static xdc_err_t outer_copy(api_outer *a, float *const *params, int to_local)
{
    const xdc_device_ops *dev = a->outer.be->device;
    size_t off = 0;
    for (int i = 0; i < a->n_params; i++) {
        size_t bytes = a->counts[i] * sizeof(float);
        float *local = a->outer.local + off;
        XDC_CHECK(dev->copy_d2d(to_local ? local : params[i], to_local ? params[i] : local, bytes, a->outer.stream));
        off += a->counts[i];
    }
    return XDC_OK;
}

/* A call's (or the set-up's) work on a device tag ordered between the caller's stream and xdc's: `before`
 * the caller's work so far, then (!before) the caller's later work after xdc's. Host tags: nothing. */
static xdc_err_t outer_order(api_outer *a, xdc_stream *caller, int before)
{
    if (a->device < 0) return XDC_OK;
    const xdc_device_ops *dev = a->outer.be->device;
    return before ? order(dev, a->ready, caller, a->outer.stream) : order(dev, a->done, a->outer.stream, caller);
}

/* dv NULL: host memory on the member's device; else the outer state on dv's device (orch_outer_open honours
 * outer.be), with a stream and events of its own made on the bound device. */
static xdc_err_t outer_init(xdc_comm *c, int tag, int n_params, float *const *params, const size_t *counts,
                            const api_dev *dv, int device, xdc_diag *diag)
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
    if (dv) XDC_CHECK(device_alone(c, dv->be, tag, diag));
    api_outer *a = xdc_calloc(1, sizeof *a);
    if (!a) return XDC_ERR_NOMEM;
    c->tags.outer[tag] = a; /* from here on tags_destroy frees whatever was made */
    a->counts = xdc_malloc((size_t)n_params * sizeof *a->counts);
    if (!a->counts) return XDC_ERR_NOMEM;
    memcpy(a->counts, counts, (size_t)n_params * sizeof *counts);
    a->n_params = n_params;
    a->outer.n = n;
    a->device = device;
    a->outer.be = dv ? dv->be : orch_member_backend(c->m);
    const xdc_device_ops *dev = a->outer.be->device;
    if (dv) {
        XDC_CHECK(dev->stream_create(&a->outer.stream));
        XDC_CHECK(dev->event_create(&a->ready));
        XDC_CHECK(dev->event_create(&a->done));
    }
    XDC_CHECK(dev->mem_alloc((void **)&a->outer.local, n * sizeof(float)));
    xdc_stream *caller = dv ? dv->caller : NULL;
    XDC_CHECK(outer_order(a, caller, 1));
    XDC_CHECK(outer_copy(a, params, 1)); /* the start of the first inner phase: global = these */
    xdc_sync_cfg sc;
    orch_member_sync_cfg(c->m, 1, &sc);
    sc.dp = region_replicas(c);
    sc.name = "pseudo-gradients";
    XDC_CHECK(orch_outer_open(c->m, &a->outer, &sc, diag));
    c->tags.order[c->tags.n++] = a->outer.sync;
    XDC_CHECK(weigh_members(c, a->outer.sync, diag));
    return outer_order(a, caller, 0); /* the caller overwrites its parameters only after they were read */
}

int xdc_outer_init(xdc_comm *c, int tag, int n_params, float *const *params, const size_t *counts)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    xdc_err_t rc = outer_init(c, tag, n_params, params, counts, NULL, -1, &d);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

int xdc_outer_init_device(xdc_comm *c, int tag, int n_params, float *const *params, const size_t *counts, int device,
                          void *stream)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    api_dev dv;
    xdc_err_t rc = device_enter(c, device, stream, &dv, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    rc = outer_init(c, tag, n_params, params, counts, &dv, device, &d);
    device_leave(&dv);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

/* The tag's outer state, or NULL with diag set (no outer rounds on it, or finished by its last round). */
static api_outer *outer_of(xdc_comm *c, int tag, xdc_diag *diag)
{
    api_outer *a = tag >= 0 && tag < XDC_MAX_TAGS ? c->tags.outer[tag] : NULL;
    if (!a || !a->outer.sync) xdc_diag_set(diag, "tag %d: no outer rounds set up on it (xdc_outer_init first)", tag);
    else if (a->finished) xdc_diag_set(diag, "tag %d: its last round ran (xdc_outer_last_round)", tag);
    else return a;
    return NULL;
}

/* The scope of a call on a's state: a device tag's device bound and `stream` wrapped (device_enter); a host
 * tag's nothing (dv->be NULL). */
static xdc_err_t outer_enter(xdc_comm *c, const api_outer *a, void *stream, api_dev *dv, xdc_diag *diag)
{
    *dv = (api_dev){0};
    return a->device < 0 ? XDC_OK : device_enter(c, a->device, stream, dv, diag);
}

typedef enum { OUTER_ROUND, OUTER_LAST, OUTER_BEGIN, OUTER_APPLY } outer_op;

/* The last round: the final codec, and with keep_unsent the plain mean (orch_outer.h: mean). */
static xdc_err_t last_round(xdc_comm *c, api_outer *a, xdc_diag *diag)
{
    if (a->outer.begun_at >= 0) {
        xdc_diag_set(diag, "a round is in flight (xdc_outer_apply first)");
        return XDC_ERR_INVALID;
    }
    if (a->final_codec[0]) {
        xdc_codec_cfg cc = *orch_member_codec(c->m);
        XDC_CHECK(xdc_codec_parse(a->final_codec, &cc, diag));
        XDC_CHECK(xdc_sync_set_codec(a->outer.sync, &cc, diag));
    }
    a->outer.mean = a->outer.keep_unsent;
    a->finished = 1;
    return orch_outer_round(&a->outer, a->rounds, diag);
}

/* op on the tag's state over the caller's parameters (host: xdc_outer_<op>, device: xdc_outer_<op>_device with
 * the caller's stream): ordered after the caller's stream, into the staging, the member's outer round
 * (orchestrator/member/orch_outer.h), back (begin leaves the parameters as they are), the caller's stream
 * ordered after it. */
static int outer_call(xdc_comm *c, int tag, float *const *params, outer_op op, bool device, void *stream)
{
    if (!c) return XDC_STATUS_INVALID;
    static const char *const what_op[] = {"outer round", "last outer round", "outer begin", "outer apply"};
    static const char *const fn_op[] = {"round", "last_round", "begin", "apply"};
    xdc_diag d = {{0}};
    api_outer *a = outer_of(c, tag, &d);
    if (!a) return fail(c, XDC_ERR_INVALID, &d);
    if ((a->device >= 0) != device) {
        xdc_diag_set(&d, "tag %d holds %s parameters (set up by xdc_outer_init%s): call xdc_outer_%s%s", tag,
                     device ? "host" : "device", device ? "" : "_device", fn_op[op], device ? "" : "_device");
        return fail(c, XDC_ERR_INVALID, &d);
    }
    for (int i = 0; params && i < a->n_params; i++)
        if (!params[i]) params = NULL;
    if (!params) {
        xdc_diag_set(&d, "tag %d: no parameters, or one of them NULL", tag);
        return fail(c, XDC_ERR_INVALID, &d);
    }
    api_dev dv;
    xdc_err_t rc = outer_enter(c, a, stream, &dv, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    rc = outer_order(a, dv.caller, 1);
    if (rc == XDC_OK) rc = outer_copy(a, params, 1);
    if (rc == XDC_OK) switch (op) {
        case OUTER_ROUND: rc = orch_outer_round(&a->outer, a->rounds++, &d); break;
        case OUTER_LAST: rc = last_round(c, a, &d); break;
        case OUTER_BEGIN:
            rc = orch_outer_begin(&a->outer, a->outer.sync, 0, a->outer.n, a->rounds++, ORCH_OUTER_DELAYED, &d);
            break;
        case OUTER_APPLY: rc = orch_outer_apply(&a->outer, a->outer.sync, 0, a->outer.n, &d); break;
        }
    if (rc == XDC_OK && op != OUTER_BEGIN) rc = outer_copy(a, params, 0);
    if (rc == XDC_OK) rc = outer_order(a, dv.caller, 0);
    device_leave(&dv);
    if (rc != XDC_OK) {
        char what[48];
        snprintf(what, sizeof what, "%s of tag %d", what_op[op], tag);
        if (rc != XDC_ERR_INVALID) orch_member_report_failure(c->m, what, rc, d.msg);
        xdc_diag_prefix(&d, "%s", what);
        return fail(c, rc, &d);
    }
    return XDC_SUCCESS;
}

/* pseudo, mean, Nesterov step, local = global */
int xdc_outer_round(xdc_comm *c, int tag, float *const *params)
{
    return outer_call(c, tag, params, OUTER_ROUND, false, NULL);
}
int xdc_outer_last_round(xdc_comm *c, int tag, float *const *params)
{
    return outer_call(c, tag, params, OUTER_LAST, false, NULL);
}
int xdc_outer_begin(xdc_comm *c, int tag, float *const *params)
{
    return outer_call(c, tag, params, OUTER_BEGIN, false, NULL);
}
int xdc_outer_apply(xdc_comm *c, int tag, float *const *params)
{
    return outer_call(c, tag, params, OUTER_APPLY, false, NULL);
}
int xdc_outer_round_device(xdc_comm *c, int tag, float *const *params, void *stream)
{
    return outer_call(c, tag, params, OUTER_ROUND, true, stream);
}
int xdc_outer_last_round_device(xdc_comm *c, int tag, float *const *params, void *stream)
{
    return outer_call(c, tag, params, OUTER_LAST, true, stream);
}
int xdc_outer_begin_device(xdc_comm *c, int tag, float *const *params, void *stream)
{
    return outer_call(c, tag, params, OUTER_BEGIN, true, stream);
}
int xdc_outer_apply_device(xdc_comm *c, int tag, float *const *params, void *stream)
{
    return outer_call(c, tag, params, OUTER_APPLY, true, stream);
}

static xdc_err_t outer_configure(xdc_comm *c, int tag, const xdc_outer_options *o, xdc_diag *diag)
{
    api_outer *a = outer_of(c, tag, diag);
    if (!a) return XDC_ERR_INVALID;
    if (!o || o->struct_size < sizeof *o) {
        xdc_diag_set(diag, "xdc_outer_configure: %s (initialise the struct with XDC_OUTER_OPTIONS_INIT)",
                     o ? "struct_size too small" : "opts is NULL");
        return XDC_ERR_INVALID;
    }
    if (a->rounds) {
        xdc_diag_set(diag, "tag %d: configured after its first round", tag);
        return XDC_ERR_INVALID;
    }
    if (o->keep_unsent && region_replicas(c)) {
        xdc_diag_set(diag,
                     "tag %d: keep_unsent needs one member per region (a replica's codec keeps only its "
                     "shard's residual)",
                     tag);
        return XDC_ERR_INVALID;
    }
    const char *fc = o->final_codec ? o->final_codec : orch_member_config(c->m)->diloco.final_codec;
    xdc_codec_cfg cc = *orch_member_codec(c->m);
    if (fc[0] && xdc_codec_parse(fc, &cc, diag) != XDC_OK) return XDC_ERR_INVALID;
    if (strlen(fc) >= sizeof a->final_codec) {
        xdc_diag_set(diag, "final codec '%s' is too long", fc);
        return XDC_ERR_INVALID;
    }
    snprintf(a->final_codec, sizeof a->final_codec, "%s", fc);
    a->outer.keep_unsent = o->keep_unsent != 0;
    return XDC_OK;
}

int xdc_outer_configure(xdc_comm *c, int tag, const xdc_outer_options *opts)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    xdc_err_t rc = outer_configure(c, tag, opts, &d);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

/* The tag's outer state if it may be read or written now (between rounds, the buffers given: residual only
 * when the codec keeps one, *nr elements), else NULL. */
static api_outer *state_of(xdc_comm *c, int tag, const float *global, const float *mom, const float *residual,
                           size_t *nr, xdc_diag *diag)
{
    api_outer *a = outer_of(c, tag, diag);
    *nr = a ? xdc_sync_residual_elems(a->outer.sync) : 0;
    if (a && a->outer.begun_at >= 0) xdc_diag_set(diag, "tag %d: a round is in flight (xdc_outer_apply first)", tag);
    else if (a && (!global || !mom || (*nr && !residual)))
        xdc_diag_set(diag, "tag %d: global, momentum (and with a residual, residual) are needed", tag);
    else return a;
    return NULL;
}

/* The tag's outer state to the caller's host buffers (save) or from them, on the tag's device. */
static xdc_err_t state_copy(xdc_comm *c, int tag, float *global, float *mom, float *residual, int save, xdc_diag *diag)
{
    size_t nr;
    api_outer *a = state_of(c, tag, global, mom, residual, &nr, diag);
    if (!a) return XDC_ERR_INVALID;
    api_dev dv;
    XDC_CHECK(outer_enter(c, a, DEV_NO_STREAM, &dv, diag));
    orch_outer *o = &a->outer;
    xdc_err_t rc = save ? orch_outer_get(o, ORCH_OUTER_GLOBAL, global) : orch_outer_set(o, ORCH_OUTER_GLOBAL, global);
    if (rc == XDC_OK)
        rc = save ? orch_outer_get(o, ORCH_OUTER_MOMENTUM, mom) : orch_outer_set(o, ORCH_OUTER_MOMENTUM, mom);
    if (rc == XDC_OK && nr)
        rc = save ? xdc_sync_residual_get(o->sync, residual, nr, diag)
                  : xdc_sync_residual_set(o->sync, residual, nr, diag);
    device_leave(&dv);
    return rc;
}

int xdc_outer_state_size(xdc_comm *c, int tag, size_t *n_params, size_t *n_residual)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    api_outer *a = outer_of(c, tag, &d);
    if (!a || !n_params || !n_residual) {
        if (a) xdc_diag_set(&d, "xdc_outer_state_size: n_params and n_residual are needed");
        return fail(c, XDC_ERR_INVALID, &d);
    }
    *n_params = a->outer.n;
    *n_residual = xdc_sync_residual_elems(a->outer.sync);
    return XDC_SUCCESS;
}

int xdc_outer_get_state(xdc_comm *c, int tag, float *global, float *momentum, float *residual)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    xdc_err_t rc = state_copy(c, tag, global, momentum, residual, 1, &d);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

int xdc_outer_set_state(xdc_comm *c, int tag, const float *global, const float *momentum, const float *residual)
{
    if (!c) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    /* read only: save is 0 */
    xdc_err_t rc = state_copy(c, tag, (float *)global, (float *)momentum, (float *)residual, 0, &d);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

/* ---- device memory for programs without a runtime of their own ---------------------------------------- */

int xdc_device_alloc(xdc_comm *c, int device, size_t bytes, void **out)
{
    if (!c || !out) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    api_dev dv;
    xdc_err_t rc = device_enter(c, device, DEV_NO_STREAM, &dv, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    rc = dv.be->device->mem_alloc(out, bytes);
    device_leave(&dv);
    if (rc != XDC_OK) xdc_diag_set(&d, "%s device %d: cannot allocate %zu bytes", dv.be->name, device, bytes);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
}

void xdc_device_free(xdc_comm *c, void *p)
{
    if (c && c->dev_be) c->dev_be->device->mem_free(p);
}

int xdc_device_copy(xdc_comm *c, int device, void *dst, const void *src, size_t bytes, int to_device, void *stream)
{
    if (!c || !dst || !src) return XDC_STATUS_INVALID;
    xdc_diag d = {{0}};
    api_dev dv;
    xdc_err_t rc = device_enter(c, device, stream, &dv, &d);
    if (rc != XDC_OK) return fail(c, rc, &d);
    const xdc_device_ops *dev = dv.be->device;
    rc = to_device ? dev->copy_h2d(dst, src, bytes, dv.caller) : dev->copy_d2h(dst, src, bytes, dv.caller);
    if (rc == XDC_OK) rc = dev->stream_sync(dv.caller);
    if (rc != XDC_OK) (void)dev->stream_error(dv.caller, &d);
    device_leave(&dv);
    return rc == XDC_OK ? XDC_SUCCESS : fail(c, rc, &d);
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
    return weigh_members(c, c->tags.check, diag);
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
