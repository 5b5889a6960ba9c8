/* orch_pipe.c — point-to-point transfers between neighbouring pipeline stages, wherever they live: over
 * the intra communicator when both stages are in one region, over the WAN latency class when the
 * pipeline crosses a region boundary. Activations and activation gradients crossing the WAN go through
 * the activation codec of their cut's link (bf16 or int8 with scales, or the low-rank codec with a basis per
 * direction of the link, run on the host; no error feedback: each tensor is used once); small
 * control messages (loss, gradient norm, the parameter-hash state) travel raw, to an in-region neighbour
 * from a device row (orch_pipe_*_small). Intra sends and receives
 * started inside an intra group (xdc_intra_group_start on orch_member_pp(w->member), as the 1F1B loop of orch_train.c
 * does per schedule step) are issued at its end; WAN ones are posted at once. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_time.h"

#include <stdio.h>
#include <string.h>

#define PIPE_RAW_CODEC 0xff /* codec byte of an uncompressed control message */

void orch_pipe_locate(const orch_worker *w, int stage, int *region, int *pp_rank)
{
    if (!w->id->span) {
        *region = w->id->region_idx;
        *pp_rank = stage;
        return;
    }
    int base = 0, r = 0;
    while (r < w->topo->n_regions - 1 && stage >= base + xdc_topology_region_workers(w->topo, r))
        base += xdc_topology_region_workers(w->topo, r++);
    *region = r;
    *pp_rank = stage - base;
}

/* The WAN link to neighbouring stage `stage`: the interleaved schedule's wrap-around between the last stage and
 * the first has a link of its own where it is not the span's one link (orch_member_span_wrap). */
static orch_pipe_link *neighbour_link(orch_worker *w, int stage)
{
    int s = w->id->stage, last = w->id->n_stages - 1;
    if (w->pipe.link[ORCH_PIPE_WRAP].peer && ((s == 0 && stage == last) || (s == last && stage == 0)))
        return &w->pipe.link[ORCH_PIPE_WRAP];
    return &w->pipe.link[stage < s ? ORCH_PIPE_PREV : ORCH_PIPE_NEXT];
}

/* The low-rank codec on the host: the device activation (B*T*C fp32) copied out and encoded with ctx. */
static xdc_err_t lowrank_encode(orch_worker *w, xdc_lowrank *ctx, const float *buf, uint8_t *wire, size_t *len,
                                xdc_diag *diag)
{
    const xdc_device_ops *dev = w->model.be->device;
    XDC_CHECK(dev->copy_d2h(w->pipe.lowrank_host, buf, w->pipe.elems * sizeof(float), NULL));
    XDC_CHECK(dev->stream_sync(NULL));
    return xdc_lowrank_encode(ctx, w->pipe.lowrank_host, w->pipe.elems / (size_t)w->model.C, wire, w->pipe.bound, len,
                              diag);
}

/* Decoded on the host into the staging, then copied to r->dst, by the receiving context of the link r came by. */
static xdc_err_t lowrank_decode(orch_worker *w, const orch_pipe_req *r, size_t len, xdc_diag *diag)
{
    XDC_CHECK(xdc_lowrank_decode(r->link->rx, r->wire, len, w->pipe.lowrank_host, r->n / (size_t)w->model.C, diag));
    return w->model.be->device->copy_h2d(r->dst, w->pipe.lowrank_host, r->n * sizeof(float), NULL);
}

xdc_err_t orch_pipe_send(orch_worker *w, int to_stage, const float *buf, size_t n, uint8_t *wire, orch_pipe_req *r,
                         xdc_diag *diag)
{
    int region, rank;
    orch_pipe_locate(w, to_stage, &region, &rank);
    memset(r, 0, sizeof *r);
    if (region == w->id->region_idx)
        return xdc_intra_send(orch_member_pp(w->member), buf, n, XDC_INTRA_F32, rank, &r->ir);
    orch_pipe_link *l = neighbour_link(w, to_stage);
    xdc_wan_peer *p = l->peer;
    if (n != w->pipe.elems || !wire)
        return xdc_wan_isend(p, XDC_WAN_LATENCY, buf, n * sizeof(float), PIPE_RAW_CODEC, n * sizeof(float), &r->wr);
    uint64_t t0 = orch_trace_now_us(w->tele.trace);
    size_t len;
    if (l->codec_kind == ORCH_PIPE_LOWRANK) XDC_CHECK(lowrank_encode(w, l->tx, buf, wire, &len, diag));
    else XDC_CHECK(xdc_codec_encode(l->enc, buf, n, wire, w->pipe.bound, &len, diag));
    orch_trace_complete(w->tele.trace, ORCH_LANE_CODEC, "encode activation", "codec", t0,
                        orch_trace_now_us(w->tele.trace) - t0, "bytes", (double)len);
    w->pipe.tx_bytes += len;
    w->pipe.raw_bytes += n * sizeof(float);
    return xdc_wan_isend(p, XDC_WAN_LATENCY, wire, len, (uint8_t)l->codec_kind, n * sizeof(float), &r->wr);
}

xdc_err_t orch_pipe_recv(orch_worker *w, int from_stage, float *buf, size_t n, uint8_t *wire, orch_pipe_req *r,
                         xdc_diag *diag)
{
    (void)diag;
    int region, rank;
    orch_pipe_locate(w, from_stage, &region, &rank);
    memset(r, 0, sizeof *r);
    r->dst = buf;
    r->n = n;
    if (region == w->id->region_idx)
        return xdc_intra_recv(orch_member_pp(w->member), buf, n, XDC_INTRA_F32, rank, &r->ir);
    r->wire = n == w->pipe.elems && wire ? wire : NULL;
    r->link = neighbour_link(w, from_stage);
    r->peer = r->link->peer;
    if (r->wire) return xdc_wan_irecv(r->peer, XDC_WAN_LATENCY, wire, w->pipe.bound, &r->wr);
    return xdc_wan_irecv(r->peer, XDC_WAN_LATENCY, buf, n * sizeof(float), &r->wr);
}

xdc_err_t orch_pipe_wait(orch_worker *w, orch_pipe_req *r, xdc_diag *diag)
{
    xdc_err_t rc = XDC_OK;
    uint64_t t0 = orch_trace_now_us(w->tele.trace);
    double s0 = (double)xdc_now_ns() / 1e9;
    uint64_t since = xdc_wall_ns();
    if (r->ir) {
        rc = xdc_intra_wait(r->ir, -1, diag);
        r->ir = NULL;
        w->prog.t_intra += (double)xdc_now_ns() / 1e9 - s0;
        orch_trace_complete(w->tele.trace, ORCH_LANE_INTRA, "pipeline transfer", "intra", t0,
                            orch_trace_now_us(w->tele.trace) - t0, NULL, 0);
    } else if (r->wr) {
        size_t len = 0;
        uint8_t codec = 0;
        rc = xdc_wan_wait(r->wr, w->cfg->timeouts.operation_ms, &len, &codec, diag);
        if (rc == XDC_ERR_AGAIN) { /* still posted after the operation timeout: give it up */
            const xdc_wan_identity *id = xdc_wan_peer_identity(r->peer);
            char who[XDC_WAN_NAME_MAX + 16], where[2 * XDC_WAN_NAME_MAX + 16];
            snprintf(who, sizeof who, "%s rank %d", id->region, id->rank);
            snprintf(where, sizeof where, "WAN link %s->%s", r->dst ? id->region : w->id->region,
                     r->dst ? w->id->region : id->region);
            xdc_wan_request_cancel(r->wr);
            orch_wait_expired(diag, r->dst ? "pipeline receive" : "pipeline send", who, where, since,
                              w->cfg->timeouts.operation_ms, "operation");
            rc = XDC_ERR_TIMEOUT;
        }
        r->wr = NULL;
        w->prog.t_wan_exposed += (double)xdc_now_ns() / 1e9 - s0;
        orch_trace_complete(w->tele.trace, r->dst ? ORCH_LANE_WAN_RX : ORCH_LANE_WAN_TX, "pipeline transfer", "wan", t0,
                            orch_trace_now_us(w->tele.trace) - t0, "bytes", (double)len);
        if (rc == XDC_OK && r->dst && r->wire && codec != (uint8_t)r->link->codec_kind) {
            xdc_diag_set(diag, "activation with codec %u where %u was expected (messages out of order?)", codec,
                         (unsigned)r->link->codec_kind);
            rc = XDC_ERR_PROTO;
        } else if (rc == XDC_OK && r->dst && r->wire) {
            rc = r->link->codec_kind == ORCH_PIPE_LOWRANK
                     ? lowrank_decode(w, r, len, diag)
                     : xdc_codec_decode(r->link->dec, r->wire, len, r->dst, r->n, XDC_CODEC_WRITE, diag);
            /* The decode's copy into device memory is queued on this thread's stream: the stage's
             * stream reads it next, and the wire buffer is reused. */
            if (rc == XDC_OK) rc = w->model.be->device->stream_sync(NULL);
        } else if (rc == XDC_OK && r->dst && (codec != PIPE_RAW_CODEC || len != r->n * sizeof(float))) {
            xdc_diag_set(diag, "control message of %zu bytes (codec %u), expected %zu raw", len, codec,
                         r->n * sizeof(float));
            rc = XDC_ERR_PROTO;
        }
    }
    if (rc != XDC_OK) xdc_diag_prefix(diag, "pipeline transfer");
    return rc;
}

/* Row `row` of the device scalar staging (w->pipe.scalars). */
static float *scalar_row(const orch_worker *w, int row) { return w->pipe.scalars + row * ORCH_PIPE_MAX_SCALARS; }

/* Copies n scalars between host and a device row, waited for (a few bytes, once per step). */
static xdc_err_t scalars_copy(const orch_worker *w, float *dst, const float *src, int n, bool up)
{
    const xdc_device_ops *dev = w->model.be->device;
    size_t bytes = (size_t)n * sizeof(float);
    XDC_CHECK(up ? dev->copy_h2d(dst, src, bytes, NULL) : dev->copy_d2h(dst, src, bytes, NULL));
    return dev->stream_sync(NULL);
}

static bool in_region(const orch_worker *w, int stage)
{
    int region, rank;
    orch_pipe_locate(w, stage, &region, &rank);
    return region == w->id->region_idx;
}

xdc_err_t orch_pipe_send_small(orch_worker *w, int to, const float *v, int n, int row, orch_pipe_req *r, xdc_diag *diag)
{
    if (n > ORCH_PIPE_MAX_SCALARS) return XDC_ERR_RANGE;
    if (!in_region(w, to)) return orch_pipe_send(w, to, v, (size_t)n, NULL, r, diag);
    XDC_CHECK(scalars_copy(w, scalar_row(w, row), v, n, true));
    return orch_pipe_send(w, to, scalar_row(w, row), (size_t)n, NULL, r, diag);
}

xdc_err_t orch_pipe_recv_small(orch_worker *w, int from, float *v, int n, int row, orch_pipe_req *r, xdc_diag *diag)
{
    if (n > ORCH_PIPE_MAX_SCALARS) return XDC_ERR_RANGE;
    return orch_pipe_recv(w, from, in_region(w, from) ? scalar_row(w, row) : v, (size_t)n, NULL, r, diag);
}

xdc_err_t orch_pipe_wait_small(orch_worker *w, int peer, float *v, int n, int row, orch_pipe_req *r, xdc_diag *diag)
{
    XDC_CHECK(orch_pipe_wait(w, r, diag));
    return v && in_region(w, peer) ? scalars_copy(w, v, scalar_row(w, row), n, false) : XDC_OK;
}

/* Sum n floats over every stage of this replica: an intra all-reduce inside one region; across regions
 * a pass up the chain of stages (each adds its own) and the total back down. Device rows: 0 the
 * all-reduce, or the chain's receive from below and send down; 1 the send up; 2 the total from above. */
xdc_err_t orch_pipe_allreduce_sum(orch_worker *w, float *v, int n, xdc_diag *diag)
{
    orch_pipe_req r;
    if (n > ORCH_PIPE_MAX_SCALARS) return XDC_ERR_RANGE;
    if (!w->id->span) {
        XDC_CHECK(scalars_copy(w, scalar_row(w, 0), v, n, true));
        XDC_CHECK(xdc_intra_all_reduce(orch_member_pp(w->member), scalar_row(w, 0), scalar_row(w, 0), (size_t)n,
                                       XDC_INTRA_F32, XDC_INTRA_SUM, &r.ir));
        r.wr = NULL;
        XDC_CHECK(orch_pipe_wait(w, &r, diag));
        return scalars_copy(w, v, scalar_row(w, 0), n, false);
    }
    float part[ORCH_PIPE_MAX_SCALARS];
    int below = w->id->stage - 1, above = w->id->stage + 1;
    if (w->id->stage > 0) {
        XDC_CHECK(orch_pipe_recv_small(w, below, part, n, 0, &r, diag));
        XDC_CHECK(orch_pipe_wait_small(w, below, part, n, 0, &r, diag));
        for (int i = 0; i < n; i++) v[i] += part[i];
    }
    if (above < w->id->n_stages) {
        /* Post the receive of the total before waiting for our send: over the WAN a reply with no posted
         * receive would hold up the acknowledgement of that send (docs/wan.md); within a region the two
         * are one group, as NCCL needs. */
        orch_pipe_req back;
        memcpy(part, v, (size_t)n * sizeof(float));
        XDC_CHECK(xdc_intra_group_start(orch_member_pp(w->member)));
        xdc_err_t rc = orch_pipe_send_small(w, above, part, n, 1, &r, diag);
        if (rc == XDC_OK) rc = orch_pipe_recv_small(w, above, v, n, 2, &back, diag);
        xdc_err_t e = xdc_intra_group_end(orch_member_pp(w->member));
        XDC_CHECK(rc);
        XDC_CHECK(e);
        XDC_CHECK(orch_pipe_wait_small(w, above, NULL, n, 1, &r, diag));
        XDC_CHECK(orch_pipe_wait_small(w, above, v, n, 2, &back, diag));
    }
    if (w->id->stage > 0) {
        XDC_CHECK(orch_pipe_send_small(w, below, v, n, 0, &r, diag));
        XDC_CHECK(orch_pipe_wait_small(w, below, NULL, n, 0, &r, diag));
    }
    return XDC_OK;
}
