/* orch_rejoin.c — a region that left an elastic DiLoCo or streaming run comes back (docs/runtime.md,
 * "Rejoining"). Its restarted workers find their earlier process's WAN address in the store (the job is
 * running), skip the joined/start barriers, post outer/<region>/<rank> = join:<nonce> and wait for
 * rejoin/<nonce>: the step of the round the store host names them joining in
 * (orchestrator/elastic/orch_quorum.c). They dial that round's members; once the round's exchange is done
 * (DiLoCo: after the round; streaming: after its fragment landed, one step later, when nothing is on the
 * wire), each member accepts its joiner's connection in place of the dead process's peer, and rank k of the
 * lowest member region sends rank k of the joiner a header (the step, its data position, the xxh64 of each
 * buffer) then the global parameters and outer momentum. The joiner checks both hashes, sets local =
 * global, takes the step and the data position, and is a member from the next round on. The store's side of
 * the handshake (the request, the round that takes it, who to dial) is the round protocol's member half,
 * orchestrator/elastic/orch_elastic_member.c; this file moves the model state. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_hash.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/elastic/orch_elastic_member.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The header ahead of the state (host byte order: the hosts of a run share one architecture). */
enum { HDR_STEP, HDR_EPOCH, HDR_BATCH, HDR_PARAMS, HDR_HASH_GLOBAL, HDR_HASH_MOM, HDR_N };

xdc_err_t orch_rejoin_detect(orch_worker *w, xdc_diag *diag)
{
    if (!orch_quorum_elastic(w->cfg, w->id->n_regions)) return XDC_OK; /* sync and span runs: all or nothing */
    return orch_elastic_rejoin_detect(orch_member_rdzv(w->member), w->id->region, w->id->region_idx, w->id->lrank,
                                      w->cfg->timeouts.rendezvous_ms + w->cfg->elastic.grace_ms, &w->elastic.rejoin,
                                      &w->elastic.left, diag);
}

/* Complete a WAN request; the engine fails it when the peer is silent past the operation deadline. */
static xdc_err_t finish(xdc_wan_request *req, size_t *size, xdc_diag *diag)
{
    for (;;) {
        xdc_err_t rc = xdc_wan_wait(req, 1000, size, NULL, diag);
        if (rc != XDC_ERR_AGAIN) return rc;
    }
}

static xdc_err_t send_all(xdc_wan_peer *p, const void *buf, size_t len, xdc_diag *diag)
{
    xdc_wan_request *req;
    XDC_CHECK(xdc_wan_isend(p, XDC_WAN_BULK, buf, len, 0, len, &req));
    return finish(req, NULL, diag);
}

static xdc_err_t recv_all(xdc_wan_peer *p, void *buf, size_t len, xdc_diag *diag)
{
    xdc_wan_request *req;
    size_t got = 0;
    XDC_CHECK(xdc_wan_irecv(p, XDC_WAN_BULK, buf, len, &req));
    XDC_CHECK(finish(req, &got, diag));
    if (got != len) {
        xdc_diag_set(diag, "rejoin: a message of %zu bytes where %zu were due", got, len);
        return XDC_ERR_PROTO;
    }
    return XDC_OK;
}

/* Device buffer `dev` (n_params fp32) into the pinned staging o->host; *hash: its xxh64. */
static xdc_err_t stage_out(orch_worker *w, orch_outer *o, const float *dev, uint64_t *hash)
{
    const xdc_device_ops *d = w->model.be->device;
    size_t bytes = w->model.n_params * sizeof(float);
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    XDC_CHECK(d->copy_d2h(o->host, dev, bytes, s));
    XDC_CHECK(d->stream_sync(s));
    *hash = xdc_xxh64(o->host, bytes, 0);
    return XDC_OK;
}

/* Send joiner peer p the round's state: header, global parameters, momentum (one after the other through
 * the one staging buffer). A device failure is ours (an error); a joiner that does not take it is only
 * named: it misses the next round and is dropped again. */
static xdc_err_t give_state(orch_worker *w, orch_outer *o, xdc_wan_peer *p)
{
    size_t bytes = w->model.n_params * sizeof(float);
    const xdc_wan_identity *id = xdc_wan_peer_identity(p);
    uint64_t hdr[HDR_N] = {[HDR_STEP] = (uint64_t)w->prog.step, [HDR_PARAMS] = w->model.n_params}, h;
    if (w->model.data) {
        xdc_data_pos pos = xdc_data_get_pos(w->model.data);
        hdr[HDR_EPOCH] = pos.epoch, hdr[HDR_BATCH] = pos.batch;
    }
    /* Both hashes go in the header, so momentum is hashed once for it and staged again to be sent. */
    XDC_CHECK(stage_out(w, o, o->mom, &hdr[HDR_HASH_MOM]));
    XDC_CHECK(stage_out(w, o, o->global, &hdr[HDR_HASH_GLOBAL]));
    xdc_diag d = {{0}};
    xdc_err_t rc = send_all(p, hdr, sizeof hdr, &d);
    if (rc == XDC_OK) rc = send_all(p, o->host, bytes, &d);
    if (rc == XDC_OK) {
        XDC_CHECK(stage_out(w, o, o->mom, &h));
        rc = send_all(p, o->host, bytes, &d);
    }
    if (rc == XDC_OK)
        XDC_INFO(XDC_SUB_ORCH, "round %lld: sent region %s rank %d the outer state (%zu parameters)",
                 (long long)w->prog.step, id->region, id->rank, w->model.n_params);
    else
        XDC_WARN(XDC_SUB_ORCH, "round %lld: region %s rank %d did not take the outer state (%s: %s)",
                 (long long)w->prog.step, id->region, id->rank, xdc_strerror(rc), d.msg);
    return XDC_OK;
}

xdc_err_t orch_rejoin_give(orch_worker *w, orch_outer *o)
{
    int n = w->id->n_regions, lowest = -1, want = 0;
    for (int r = 0; r < n; r++) {
        if (lowest < 0 && w->elastic.m.live[r]) lowest = r;
        want += w->elastic.m.joining[r];
    }
    /* Accept each joiner's connection (it dials once it read the round) in place of the dead process's peer. A
     * joiner that never comes or takes no state is not waited for again: it misses the next round and the
     * store host drops it, so every member agrees on the set all the same. */
    xdc_diag d = {{0}};
    while (want > 0) {
        xdc_wan_peer *p;
        xdc_err_t rc = xdc_wan_accept(orch_member_listener(w->member), w->cfg->timeouts.handshake_ms, &p, &d);
        if (rc != XDC_OK) {
            XDC_WARN(XDC_SUB_ORCH,
                     "round %lld: a rejoining region's rank %d did not connect (%s: %s); it will miss "
                     "the next round",
                     (long long)w->prog.step, w->id->lrank, xdc_strerror(rc), d.msg);
            break;
        }
        const xdc_wan_identity *id = xdc_wan_peer_identity(p);
        int r = xdc_topology_region_index(w->topo, id->region);
        if (r < 0 || r >= n || !w->elastic.m.joining[r] || id->rank != w->id->lrank) {
            XDC_WARN(XDC_SUB_ORCH,
                     "round %lld: unexpected WAN peer %s/%d (expected rank %d of a rejoining region); "
                     "closed",
                     (long long)w->prog.step, id->region, id->rank, w->id->lrank);
            xdc_wan_peer_destroy(p);
            continue;
        }
        xdc_wan_peer_destroy(
            orch_member_peers(w->member)[r]); /* the earlier process's: its sequence numbers died with it */
        orch_member_peers(w->member)[r] = p;
        w->elastic.m.joining[r] = 0;
        want--;
        if (w->id->region_idx == lowest) XDC_CHECK(give_state(w, o, p));
    }
    memset(w->elastic.m.joining, 0, sizeof w->elastic.m.joining);
    return XDC_OK;
}

/* Take buffer `dev` (n_params fp32) from peer p through the staging; XDC_ERR_CORRUPT when its xxh64 is not
 * `hash`. */
static xdc_err_t stage_in(orch_worker *w, orch_outer *o, xdc_wan_peer *p, float *dev, uint64_t hash, const char *what,
                          xdc_diag *diag)
{
    const xdc_device_ops *d = w->model.be->device;
    size_t bytes = w->model.n_params * sizeof(float);
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    XDC_CHECK(recv_all(p, o->host, bytes, diag));
    uint64_t got = xdc_xxh64(o->host, bytes, 0);
    if (got != hash) {
        xdc_diag_set(diag, "rejoin: the %s received hash to %016llx, the sender's is %016llx", what,
                     (unsigned long long)got, (unsigned long long)hash);
        return XDC_ERR_CORRUPT;
    }
    XDC_CHECK(d->copy_h2d(dev, o->host, bytes, s));
    return d->stream_sync(s);
}

xdc_err_t orch_rejoin_take(orch_worker *w, orch_outer *o, int lag, xdc_diag *diag)
{
    uint8_t in_round[XDC_TOPO_MAX_REGIONS];
    int lowest;
    long long at;
    w->elastic.rejoin_t0 = xdc_now_ns();
    XDC_CHECK(orch_elastic_rejoin_ask(&w->elastic.m, w->id->member,
                                      w->cfg->timeouts.rendezvous_ms + w->cfg->timeouts.operation_ms, &at, in_round,
                                      &lowest, diag));
    for (int r = 0; r < w->id->n_regions; r++)
        if (in_round[r])
            XDC_CHECK(orch_member_dial(w->member, r, w->id->lrank, &orch_member_peers(w->member)[r], diag));
    /* The run's last round is the finish's: its state is handed over at once. */
    long long want = at < w->cfg->train.steps ? at + lag : at;
    uint64_t hdr[HDR_N];
    xdc_wan_peer *from = orch_member_peers(w->member)[lowest];
    XDC_CHECK(recv_all(from, hdr, sizeof hdr, diag));
    if (hdr[HDR_PARAMS] != w->model.n_params || hdr[HDR_STEP] != (uint64_t)want) {
        xdc_diag_set(diag, "rejoin: %s sent the state of step %llu with %llu parameters; expected step %lld, %zu",
                     w->topo->regions[lowest].name, (unsigned long long)hdr[HDR_STEP],
                     (unsigned long long)hdr[HDR_PARAMS], want, w->model.n_params);
        return XDC_ERR_PROTO;
    }
    XDC_CHECK(stage_in(w, o, from, o->global, hdr[HDR_HASH_GLOBAL], "global parameters", diag));
    XDC_CHECK(stage_in(w, o, from, o->mom, hdr[HDR_HASH_MOM], "outer momentum", diag));
    const xdc_device_ops *d = w->model.be->device;
    xdc_stream *s = xdc_gpt_stage_stream(w->model.st);
    XDC_CHECK(d->copy_d2d(xdc_gpt_stage_params(w->model.st), o->global, w->model.n_params * sizeof(float), s));
    XDC_CHECK(d->stream_sync(s));
    if (w->model.data &&
        xdc_data_set_pos(w->model.data, (xdc_data_pos){.epoch = hdr[HDR_EPOCH], .batch = hdr[HDR_BATCH]}) != XDC_OK) {
        xdc_diag_set(diag, "rejoin: %s's data position (epoch %llu, batch %llu) is not one of our shard",
                     w->topo->regions[lowest].name, (unsigned long long)hdr[HDR_EPOCH],
                     (unsigned long long)hdr[HDR_BATCH]);
        return XDC_ERR_PROTO;
    }
    w->prog.step = (int64_t)hdr[HDR_STEP];
    w->elastic.rejoin_round = at;
    XDC_WARN(XDC_SUB_ORCH,
             "region %s took the state of round %lld (step %lld) from %s (global parameters %016llx and momentum "
             "%016llx, hashes checked) %.2f s after its rejoin request; a member from the next round",
             w->id->region, at, want, w->topo->regions[lowest].name, (unsigned long long)hdr[HDR_HASH_GLOBAL],
             (unsigned long long)hdr[HDR_HASH_MOM], (double)(xdc_now_ns() - w->elastic.rejoin_t0) / 1e9);
    return XDC_OK;
}

void orch_rejoin_member(orch_worker *w, int64_t round)
{
    if (!w->elastic.rejoin || w->elastic.rejoin_round < 0) return;
    uint64_t now = xdc_now_ns();
    XDC_WARN(XDC_SUB_ORCH,
             "region %s rejoined at round %lld (%.2f s after its rejoin request, %.2f s after this worker started; "
             "state of round %lld)",
             w->id->region, (long long)round, (double)(now - w->elastic.rejoin_t0) / 1e9,
             (double)(now - w->elastic.started) / 1e9, (long long)w->elastic.rejoin_round);
    w->elastic.rejoin_round = -1;
}
