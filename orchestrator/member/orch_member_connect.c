/* orch_member_connect.c — a member's connections (orch_member.h): the WAN engine with the member's
 * credentials, the rendezvous client and the "joined" barrier, the intra communicators (region, pipeline
 * group, data-parallel group), the WAN peers (the same local rank in every other region, through the
 * emulator's relays when asked; with span the neighbouring stages across a region boundary), and the comm
 * engine with the run's WAN codec. */
#include "orchestrator/member/orch_member_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"
#include "scheduler/xdc_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

xdc_err_t orch_member_open_wan(orch_member *m, xdc_diag *diag)
{
    orch_creds creds;
    XDC_CHECK(orch_creds_resolve(&m->opts.creds, m->id.run_dir, &creds, diag));
    XDC_CHECK(orch_creds_member(&creds, m->id.run_id, m->id.region, m->id.lrank, diag));
    xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
    orch_creds_apply(&creds, &wc);
    wc.deadline_ms = m->cfg.timeouts.operation_ms;
    wc.streams = 1; /* the most any link of the topology asks for: one engine dials every peer */
    for (int i = 0; i < m->topo->n_links; i++)
        if (m->topo->links[i].streams > wc.streams) wc.streams = m->topo->links[i].streams;
    XDC_CHECK(xdc_wan_engine_create(&wc, &m->wan, diag));
    XDC_INFO(XDC_SUB_ORCH, "credentials: %s (folder from %s), CA %s, %s%s", creds.cert, creds.dir_from, creds.ca,
             creds.crl[0] ? "CRL " : "no CRL", creds.crl);
    const char *run = xdc_wan_engine_identity(m->wan)->run;
    if (strcmp(run, m->id.run_id) != 0) {
        xdc_diag_set(diag, "%s names run '%s', but this member is of run '%s'", creds.cert, run, m->id.run_id);
        return XDC_ERR_CONFIG;
    }
    XDC_CHECK(rdzv_client_open(&m->id.rdzv, m->wan, m->id.member, m->cfg.timeouts.rendezvous_ms, &m->rdzv, diag));
    rdzv_run_shape shape; /* the launcher's: etcd has no host to hold us to it, so we do */
    rdzv_quota quota;
    orch_run_config_rdzv_shape(&m->cfg, m->id.n_regions, &shape);
    rdzv_quota_for_run(&quota, &shape);
    rdzv_client_quota(m->rdzv, &quota);
    return XDC_OK;
}

/* Intra communicators: the region, then its split into pipeline groups (one per replica) and
 * data-parallel groups (one per stage). Rank 0 of the region makes the bootstrap id. */
static xdc_err_t open_intra(orch_member *m, xdc_diag *diag)
{
    char boot[XDC_INTRA_BOOTSTRAP_MAX];
    /* A rejoiner's earlier bootstrap is stale: the one of this return (orch_quorum.h). */
    rdzv_key key = m->rejoin ? rdzv_key_intra_after(m->id.region, m->left) : rdzv_key_intra(m->id.region);
    if (m->id.lrank == 0) {
        XDC_CHECK(xdc_intra_bootstrap_create(m->intra, boot, sizeof boot, diag));
        XDC_CHECK(rdzv_set(m->rdzv, key.s, boot, diag));
        /* The region's device, for the launcher's summary. */
        char desc[64];
        orch_device_describe(m->device, -1, desc, sizeof desc);
        XDC_CHECK(rdzv_set(m->rdzv, rdzv_key_device(m->id.region).s, desc, diag));
    } else {
        XDC_CHECK(rdzv_get(m->rdzv, key.s, m->cfg.timeouts.rendezvous_ms, boot, sizeof boot, diag));
    }
    xdc_intra_config ic = XDC_INTRA_CONFIG_INIT;
    ic.backend = m->intra;
    ic.device = m->cuda_device >= 0 ? m->cuda_device : 0;
    ic.rank = m->id.lrank;
    ic.size = m->id.lsize;
    ic.bootstrap = boot;
    ic.create_timeout_ms = m->cfg.timeouts.rendezvous_ms;
    ic.op_timeout_ms = m->cfg.timeouts.operation_ms;
    ic.dev_ops = m->be->device; /* activations and gradient buckets are device memory */
    XDC_CHECK(xdc_intra_create(&ic, &m->region_comm, diag));
    /* With span the region's workers are consecutive stages of the one pipeline. */
    XDC_CHECK(xdc_intra_split(m->region_comm, m->id.replica, m->id.span ? m->id.lrank : m->id.stage, &m->pp, diag));
    XDC_CHECK(xdc_intra_split(m->region_comm, m->id.span ? m->id.lrank : m->id.stage, m->id.replica, &m->dp, diag));
    return XDC_OK;
}

xdc_err_t orch_member_dial(orch_member *m, int r, int rank, xdc_wan_peer **out, xdc_diag *diag)
{
    return orch_member_dial_unless(m, r, rank, NULL, NULL, out, diag);
}

xdc_err_t orch_member_dial_unless(orch_member *m, int r, int rank, int (*gone)(void *ctx, int r), void *ctx,
                                  xdc_wan_peer **out, xdc_diag *diag)
{
    char val[300];
    rdzv_key key = m->id.emulate_wan ? rdzv_key_relay(m->id.region_idx, r, rank) : rdzv_key_wan(r, rank);
    char who[XDC_NAME_MAX + 16], coord[300];
    snprintf(who, sizeof who, "%s rank %d", m->topo->regions[r].name, rank);
    snprintf(coord, sizeof coord, "the coordinator %s:%d, key %s", m->id.coord_host, m->id.coord_port, key.s);
    uint64_t since = xdc_wall_ns();
    xdc_err_t rc = rdzv_get(m->rdzv, key.s, m->cfg.timeouts.rendezvous_ms, val, sizeof val, diag);
    if (rc == XDC_ERR_TIMEOUT)
        orch_wait_expired(diag, "WAN address", who, coord, since, m->cfg.timeouts.rendezvous_ms, "rendezvous");
    XDC_CHECK(rc);
    char host[256];
    int port;
    if (orch_split_hostport(val, host, sizeof host, &port) != 0) {
        xdc_diag_set(diag, "rendezvous key %s = '%s' is not host:port", key.s, val);
        return XDC_ERR_PROTO;
    }
    since = xdc_wall_ns();
    XDC_CHECK(xdc_wan_connect(m->wan, host, port, m->topo->regions[r].name, rank, out, diag));
    /* Watched (gone), the peer is a member of a round we take part in: the run fails a member silent in a round
     * after timeouts.operation at most, so its handshake is waited for as long (a member stopped for 24 s, not
     * dropped, answers once continued; giving up at 15 s cost a joiner its return: bench-chaos). */
    int64_t limit_ms = m->cfg.timeouts.handshake_ms;
    const char *knob = "handshake";
    if (gone && m->cfg.timeouts.operation_ms > limit_ms) limit_ms = m->cfg.timeouts.operation_ms, knob = "operation";
    uint64_t deadline = xdc_deadline_ms(limit_ms);
    for (;;) {
        int wait_ms = xdc_deadline_poll_ms(deadline);
        if (gone && wait_ms > ORCH_MEMBER_DIAL_LOOK_MS) wait_ms = ORCH_MEMBER_DIAL_LOOK_MS;
        rc = xdc_wan_peer_wait_ready(*out, wait_ms, diag);
        if (rc != XDC_ERR_TIMEOUT || xdc_deadline_passed(deadline)) break;
        if (gone(ctx, r)) {
            xdc_diag_set(diag, "%s at %s left the run during our WAN handshake (%.1f s in); not waiting for it", who,
                         val, (double)(xdc_wall_ns() - since) / 1e9);
            return XDC_ERR_UNAVAILABLE;
        }
    }
    if (rc == XDC_ERR_TIMEOUT) orch_wait_expired(diag, "WAN handshake", who, val, since, limit_ms, knob);
    else if (rc != XDC_OK) xdc_diag_prefix(diag, "connecting to %s at %s", who, val);
    return rc;
}

/* Accept one peer and check it is region r's rank `rank` (r < 0: any lower region, same rank). */
static xdc_err_t accept_peer(orch_member *m, int r, int rank, xdc_wan_peer **out, int *from, xdc_diag *diag)
{
    uint64_t since = xdc_wall_ns();
    xdc_err_t rc = xdc_wan_accept(m->lis, m->cfg.timeouts.rendezvous_ms, out, diag);
    if (rc != XDC_OK) {
        char who[XDC_NAME_MAX + 32], where[64];
        snprintf(who, sizeof who, "rank %d of %s", rank, r >= 0 ? m->topo->regions[r].name : "a lower region");
        snprintf(where, sizeof where, "our WAN port %d", xdc_wan_listener_port(m->lis));
        if (rc == XDC_ERR_TIMEOUT)
            orch_wait_expired(diag, "WAN accept", who, where, since, m->cfg.timeouts.rendezvous_ms, "rendezvous");
        else xdc_diag_prefix(diag, "waiting for %s to connect", who);
        return rc;
    }
    const xdc_wan_identity *id = xdc_wan_peer_identity(*out);
    *from = xdc_topology_region_index(m->topo, id->region);
    if (*from < 0 || *from >= m->id.region_idx || id->rank != rank || (r >= 0 && *from != r)) {
        xdc_diag_set(diag, "unexpected WAN peer %s/%d (expected rank %d of %s)", id->region, id->rank, rank,
                     r >= 0 ? m->topo->regions[r].name : "a lower region");
        return XDC_ERR_AUTH;
    }
    return XDC_OK;
}

/* WAN peers. Sync/DiLoCo: the same local rank in every linked region (the others' shards come relayed along
 * m->route), for the replicas that are WAN lanes (the fewest replicas of any region: the same ranks everywhere). Span: the neighbouring stages on the other side of a region boundary. The lower region dials,
 * the higher accepts. */
static xdc_err_t open_peers(orch_member *m, xdc_diag *diag)
{
    size_t n = (size_t)m->id.n_regions;
    m->peers = xdc_calloc(n, sizeof *m->peers);
    m->route = xdc_calloc(n * n, sizeof *m->route);
    if (!m->peers || !m->route) return XDC_ERR_NOMEM;
    if (m->id.n_regions < 2) return XDC_OK;
    XDC_CHECK(xdc_topology_routes(m->topo, NULL, m->route));
    char val[300];
    /* Local runs advertise loopback (XDC_ADVERTISE_HOST, set by xdc launch); across hosts, the node name. */
    const char *adv = getenv("XDC_ADVERTISE_HOST");
    if (!adv || !*adv) adv = m->id.node;
    XDC_CHECK(xdc_wan_listen(m->wan, strcmp(adv, "127.0.0.1") == 0 ? "127.0.0.1" : NULL, 0, &m->lis, diag));
    snprintf(val, sizeof val, "%s:%d", adv, xdc_wan_listener_port(m->lis));
    XDC_CHECK(rdzv_set(m->rdzv, rdzv_key_wan(m->id.region_idx, m->id.lrank).s, val, diag));
    if (m->rejoin) return XDC_OK; /* it dials the members of the round that takes it back */
    if (m->id.span) {
        int from;
        if (m->id.lrank == m->id.lsize - 1 && m->id.region_idx < m->id.n_regions - 1)
            XDC_CHECK(orch_member_dial(m, m->id.region_idx + 1, 0, &m->next_peer, diag));
        if (m->id.lrank == 0 && m->id.region_idx > 0)
            XDC_CHECK(accept_peer(m, m->id.region_idx - 1,
                                  xdc_topology_region_workers(m->topo, m->id.region_idx - 1) - 1, &m->prev_peer, &from,
                                  diag));
        /* The chunks' wrap-around: the first stage dials the last (which accepts no other peer). */
        int own, last = m->id.n_regions - 1;
        if (m->cfg.pipeline_chunks > 1 && orch_member_span_wrap(m, &own) && own) {
            if (m->id.region_idx == 0 && m->id.lrank == 0)
                XDC_CHECK(
                    orch_member_dial(m, last, xdc_topology_region_workers(m->topo, last) - 1, &m->wrap_peer, diag));
            if (m->id.region_idx == last && m->id.lrank == m->id.lsize - 1)
                XDC_CHECK(accept_peer(m, 0, 0, &m->wrap_peer, &from, diag));
        }
        return XDC_OK;
    }
    if (m->id.replica >= m->id.lanes)
        return XDC_OK; /* no WAN lane: its region's lanes exchange for it (xdc_sync_cfg.lanes) */
    ;
    int lower = 0; /* linked regions below this one: they dial */
    for (int r = 0; r < m->id.n_regions; r++)
        if (r != m->id.region_idx && xdc_topology_link(m->topo, m->id.region_idx, r)) {
            if (r > m->id.region_idx) XDC_CHECK(orch_member_dial(m, r, m->id.lrank, &m->peers[r], diag));
            else lower++;
        }
    for (int i = 0; i < lower; i++) {
        xdc_wan_peer *p;
        int r;
        XDC_CHECK(accept_peer(m, -1, m->id.lrank, &p, &r, diag));
        if (m->peers[r] || !xdc_topology_link(m->topo, r, m->id.region_idx)) {
            xdc_diag_set(diag, "region %s connected twice or without a link", m->topo->regions[r].name);
            return XDC_ERR_AUTH;
        }
        m->peers[r] = p;
    }
    return XDC_OK;
}

void orch_member_set_rejoin(orch_member *m, int left)
{
    m->rejoin = 1;
    m->left = left;
}

xdc_err_t orch_member_connect(orch_member *m, const char **what, xdc_diag *diag)
{
    *what = "WAN engine and rendezvous";
    /* Everyone present before anything else waits on anyone: a missing member is named here. A restarted
     * member of a running elastic job skips the barriers the others passed long ago. */
    if (!m->rejoin)
        XDC_CHECK(rdzv_barrier(m->rdzv, RDZV_BARRIER_JOINED, m->id.gsize, m->cfg.timeouts.rendezvous_ms, diag));
    *what = "intra-region communicators";
    XDC_CHECK(open_intra(m, diag));
    *what = "WAN peers";
    return open_peers(m, diag);
}

/* The WAN codec, one for the whole run so every region encodes alike: the run file's, or with "link"
 * the lossiest codec any link of the topology names (xdc_plan_codec_of_links); zstd at the
 * level the slowest link calls for. Every worker computes the same answer from the same files. */
static xdc_err_t codec_config(const orch_member *m, xdc_codec_cfg *cc, xdc_diag *diag)
{
    xdc_codec_cfg d = XDC_CODEC_CFG_INIT;
    *cc = d;
    const char *name = m->cfg.codec;
    double slowest = 100; /* Gbit/s */
    for (int i = 0; i < m->topo->n_links; i++)
        if (m->topo->links[i].bandwidth_gbps < slowest) slowest = m->topo->links[i].bandwidth_gbps;
    if (strcmp(name, "link") == 0) name = xdc_plan_codec_of_links(m->topo);
    if (strcmp(name, "auto") == 0) name = "int8";
    XDC_CHECK(xdc_codec_parse(name, cc, diag));
    cc->zstd_level = m->cfg.zstd_level >= 0 ? m->cfg.zstd_level : xdc_codec_zstd_level_for_link(slowest);
    return XDC_OK;
}

xdc_err_t orch_member_comm_engine(orch_member *m, xdc_diag *diag)
{
    XDC_CHECK(codec_config(m, &m->codec_cfg, diag));
    return xdc_sync_engine_create(&m->sync_eng, diag);
}
