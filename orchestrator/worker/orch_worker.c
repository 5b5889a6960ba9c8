/* orch_worker.c — xdc_worker_run (xdc_worker.h): one process per pipeline stage of one replica in one
 * region, started by `xdc agent` (`xdc worker` parses its options in orchestrator/cli/cmd_worker.c).
 * Reads its identity from the environment contract, joins the rendezvous, creates the intra
 * communicators (region, pipeline group, data-parallel group) and the WAN peers (the same local rank in
 * every other region, through the emulator's relays when asked), then runs the training loop
 * (orch_train.c) and reports its result to the rendezvous. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "kernels/xdc_model_ops.h"
#include "orchestrator/control/orch_identity.h"
#include "orchestrator/control/orch_proc.h"
#include "orchestrator/worker/xdc_worker.h"

#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void orch_fragment_range(const orch_worker *w, int f, size_t *lo, size_t *hi)
{
    *lo = w->n_params * (size_t)f / (size_t)w->cfg.fragments;
    *hi = w->n_params * (size_t)(f + 1) / (size_t)w->cfg.fragments;
}

void orch_stage_layers(int n_layer, int n_stages, int s, int *begin, int *end)
{
    int base = n_layer / n_stages, extra = n_layer % n_stages;
    *begin = s * base + (s < extra ? s : extra);
    *end = *begin + base + (s < extra ? 1 : 0);
}

/* Identity from the environment contract that `xdc agent` set (orch_identity.h). */
static xdc_err_t read_identity(orch_worker *w, xdc_diag *diag)
{
    orch_identity id;
    XDC_CHECK(orch_identity_resolve(NULL, NULL, w->topo, ORCH_ID_REQUIRE_WORKER, &id, diag));
    snprintf(w->run_id, sizeof w->run_id, "%s", id.run_id);
    snprintf(w->region, sizeof w->region, "%s", id.region);
    snprintf(w->node, sizeof w->node, "%s", id.host);
    w->region_idx = id.region_index;
    w->n_regions = id.num_regions;
    w->lrank = id.rank;
    w->lsize = id.world_size;
    w->grank = id.global_rank;
    w->gsize = id.global_world_size;
    if (orch_split_hostport(id.coordinator, w->coord_host, sizeof w->coord_host, &w->coord_port) != 0) {
        xdc_diag_set(diag, "coordinator '%s' (%s) is not host:port", id.coordinator, id.source[ORCH_ID_COORDINATOR]);
        return XDC_ERR_CONFIG;
    }
    snprintf(w->member, sizeof w->member, "%s/%s:%d", w->region, w->node, w->lrank);
    return XDC_OK;
}

/* This stage's layers: the plan's partition when there is one, else an even split. */
static void stage_layers(orch_worker *w)
{
    if (w->cfg.n_split == w->n_stages) {
        w->layer_begin = w->cfg.stage_layer_begin[w->stage];
        w->layer_end = w->cfg.stage_layer_begin[w->stage + 1];
        return;
    }
    orch_stage_layers(w->cfg.train.model.n_layer, w->n_stages, w->stage, &w->layer_begin, &w->layer_end);
}

/* Check the identity against the topology and derive this worker's place in the layout. */
static xdc_err_t place(orch_worker *w, xdc_diag *diag)
{
    const xdc_topology *t = w->topo;
    int r = xdc_topology_region_index(t, w->region);
    if (r < 0 || r != w->region_idx || t->n_regions != w->n_regions) {
        xdc_diag_set(diag, "XDC_REGION=%s / XDC_REGION_INDEX=%d / XDC_NUM_REGIONS=%d do not match %s", w->region,
                     w->region_idx, w->n_regions, t->path);
        return XDC_ERR_CONFIG;
    }
    int workers = xdc_topology_region_workers(t, r);
    w->n_stages = w->cfg.pipeline_stages;
    if (w->cfg.span_regions) {
        /* One pipeline through every worker of every region, in region order: stage = global rank. */
        w->span = 1;
        if (w->n_stages != w->gsize || w->gsize > w->cfg.train.model.n_layer) {
            xdc_diag_set(diag,
                         "span_regions: pipeline_stages (%d) must equal the workers of all regions (%d) and not "
                         "exceed the model's %d layers",
                         w->n_stages, w->gsize, w->cfg.train.model.n_layer);
            return XDC_ERR_CONFIG;
        }
        w->stage = w->grank;
        w->replica = 0;
        w->n_replicas = 1;
        stage_layers(w);
        return XDC_OK;
    }
    if (w->lsize != workers || workers % w->n_stages != 0 || w->lrank < 0 || w->lrank >= workers) {
        xdc_diag_set(diag, "region %s has %d workers (WORLD_SIZE=%d), which %d pipeline stages must divide", w->region,
                     workers, w->lsize, w->n_stages);
        return XDC_ERR_CONFIG;
    }
    for (int o = 0; o < t->n_regions; o++)
        if (xdc_topology_region_workers(t, o) != workers) {
            xdc_diag_set(diag,
                         "regions %s and %s have different worker counts (%d vs %d); the hierarchical sync "
                         "pairs equal layouts",
                         w->region, t->regions[o].name, workers, xdc_topology_region_workers(t, o));
            return XDC_ERR_CONFIG;
        }
    w->n_replicas = workers / w->n_stages;
    w->stage = w->lrank % w->n_stages;
    w->replica = w->lrank / w->n_stages;
    stage_layers(w);
    return XDC_OK;
}

static xdc_err_t open_model_and_data(orch_worker *w, xdc_diag *diag)
{
    const xdc_train_config *c = &w->cfg.train;
    XDC_CHECK(xdc_kern_backend_get(XDC_BACKEND_CPU, &w->be, diag));
    w->be->model->set_threads(w->cfg.threads);
    xdc_gpt_stage_config sc = {.model = c->model,
                               .layer_begin = w->layer_begin,
                               .layer_end = w->layer_end,
                               .batch = c->batch_size,
                               .seq_len = c->seq_len,
                               .max_inflight = c->microbatches,
                               .seed = (uint64_t)c->seed,
                               .adamw = {(float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay}};
    XDC_CHECK(xdc_gpt_stage_create(w->be->model, &sc, &w->st, diag));
    w->n_params = xdc_gpt_stage_num_params(w->st);
    w->B = c->batch_size;
    w->T = c->seq_len;
    w->C = c->model.n_embd;
    w->M = c->microbatches;
    if (xdc_gpt_stage_is_first(w->st) || xdc_gpt_stage_is_last(w->st)) {
        /* Every replica of every region reads its own shard; the stages of one replica read the same one. */
        xdc_data_config dc = {.batch = c->batch_size,
                              .seq_len = c->seq_len,
                              .val_fraction = c->val_fraction,
                              .seed = (uint64_t)c->seed,
                              .rank = w->span ? 0 : w->region_idx * w->n_replicas + w->replica,
                              .world = w->span ? 1 : w->n_regions * w->n_replicas,
                              .vocab_size = c->model.vocab_size};
        XDC_CHECK(xdc_data_open(w->cfg.data_path, &dc, &w->data, diag));
        dc.rank = 0;
        dc.world = 1;
        XDC_CHECK(xdc_data_open(w->cfg.data_path, &dc, &w->val, diag));
    }
    size_t bt = (size_t)w->B * (size_t)w->T, btc = bt * (size_t)w->C, M = (size_t)w->M;
    w->tokens = xdc_malloc(M * bt * sizeof(int32_t));
    w->targets = xdc_malloc(M * bt * sizeof(int32_t));
    w->x_in = xdc_malloc(M * btc * sizeof(float));
    w->dy_in = xdc_malloc(M * btc * sizeof(float));
    w->dx_out = xdc_malloc(M * btc * sizeof(float));
    w->x_req = xdc_calloc(M, sizeof *w->x_req);
    w->dy_req = xdc_calloc(M, sizeof *w->dy_req);
    w->y_req = xdc_calloc(M, sizeof *w->y_req);
    w->dx_req = xdc_calloc(M, sizeof *w->dx_req);
    if (!w->tokens || !w->targets || !w->x_in || !w->dy_in || !w->dx_out || !w->x_req || !w->dy_req || !w->y_req ||
        !w->dx_req)
        return XDC_ERR_NOMEM;
    if (w->cfg.mode != ORCH_MODE_SYNC) {
        w->global_params = xdc_malloc(w->n_params * sizeof(float));
        w->outer_mom = xdc_calloc(w->n_params, sizeof(float));
        w->pseudo = xdc_malloc(w->n_params * sizeof(float));
        w->snapshot = xdc_malloc(w->n_params * sizeof(float));
        if (!w->global_params || !w->outer_mom || !w->pseudo || !w->snapshot) return XDC_ERR_NOMEM;
        memcpy(w->global_params, xdc_gpt_stage_params(w->st), w->n_params * sizeof(float));
    }
    return XDC_OK;
}

static xdc_err_t open_wan(orch_worker *w, xdc_diag *diag)
{
    char cert[700], key[700], ca[700];
    snprintf(cert, sizeof cert, "%s/certs/%s-%d.pem", w->run_dir, w->region, w->lrank);
    snprintf(key, sizeof key, "%s/certs/%s-%d.key", w->run_dir, w->region, w->lrank);
    snprintf(ca, sizeof ca, "%s/certs/ca.pem", w->run_dir);
    xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
    wc.cert_path = cert;
    wc.key_path = key;
    wc.ca_path = ca;
    wc.deadline_ms = w->cfg.op_timeout_ms;
    wc.streams = 1; /* the most any link of the topology asks for: one engine dials every peer */
    for (int i = 0; i < w->topo->n_links; i++)
        if (w->topo->links[i].streams > wc.streams) wc.streams = w->topo->links[i].streams;
    XDC_CHECK(xdc_wan_engine_create(&wc, &w->wan, diag));
    XDC_CHECK(rdzv_client_create(w->wan, w->coord_host, w->coord_port, w->member, w->cfg.rendezvous_timeout_ms,
                                 &w->rdzv, diag));
    /* Everyone present before anything else waits on anyone: a missing member is named here. */
    return rdzv_barrier(w->rdzv, "joined", w->gsize, w->cfg.rendezvous_timeout_ms, diag);
}

/* Intra communicators: the region, then its split into pipeline groups (one per replica) and
 * data-parallel groups (one per stage). Rank 0 of the region makes the bootstrap id. */
static xdc_err_t open_intra(orch_worker *w, xdc_diag *diag)
{
    char key[160], boot[XDC_INTRA_BOOTSTRAP_MAX];
    snprintf(key, sizeof key, "intra/%s", w->region);
    if (w->lrank == 0) {
        XDC_CHECK(xdc_intra_bootstrap_create(XDC_INTRA_CPU, boot, sizeof boot, diag));
        XDC_CHECK(rdzv_set(w->rdzv, key, boot, diag));
    } else {
        XDC_CHECK(rdzv_get(w->rdzv, key, w->cfg.rendezvous_timeout_ms, boot, sizeof boot, diag));
    }
    xdc_intra_config ic = XDC_INTRA_CONFIG_INIT;
    ic.rank = w->lrank;
    ic.size = w->lsize;
    ic.bootstrap = boot;
    ic.create_timeout_ms = w->cfg.rendezvous_timeout_ms;
    ic.op_timeout_ms = w->cfg.op_timeout_ms;
    XDC_CHECK(xdc_intra_create(&ic, &w->region_comm, diag));
    /* With span the region's workers are consecutive stages of the one pipeline. */
    XDC_CHECK(xdc_intra_split(w->region_comm, w->replica, w->span ? w->lrank : w->stage, &w->pp, diag));
    XDC_CHECK(xdc_intra_split(w->region_comm, w->span ? w->lrank : w->stage, w->replica, &w->dp, diag));
    return XDC_OK;
}

/* Dial region r's rank `rank` (directly, or through the launcher's relay for link my_region -> r). */
static xdc_err_t dial(orch_worker *w, int r, int rank, xdc_wan_peer **out, xdc_diag *diag)
{
    char key[200], val[300];
    if (w->emulate_wan) snprintf(key, sizeof key, "relay/%d/%d/%d", w->region_idx, r, rank);
    else snprintf(key, sizeof key, "wan/%d/%d", r, rank);
    XDC_CHECK(rdzv_get(w->rdzv, key, w->cfg.rendezvous_timeout_ms, val, sizeof val, diag));
    char host[256];
    int port;
    if (orch_split_hostport(val, host, sizeof host, &port) != 0) {
        xdc_diag_set(diag, "rendezvous key %s = '%s' is not host:port", key, val);
        return XDC_ERR_PROTO;
    }
    XDC_CHECK(xdc_wan_connect(w->wan, host, port, w->topo->regions[r].name, rank, out, diag));
    xdc_err_t rc = xdc_wan_peer_wait_ready(*out, w->cfg.rendezvous_timeout_ms, diag);
    if (rc != XDC_OK) xdc_diag_prefix(diag, "connecting to %s rank %d", w->topo->regions[r].name, rank);
    return rc;
}

/* Accept one peer and check it is region r's rank `rank` (r < 0: any lower region, same rank). */
static xdc_err_t accept_peer(orch_worker *w, int r, int rank, xdc_wan_peer **out, int *from, xdc_diag *diag)
{
    xdc_err_t rc = xdc_wan_accept(w->lis, w->cfg.rendezvous_timeout_ms, out, diag);
    if (rc != XDC_OK) {
        xdc_diag_prefix(diag, "waiting for a lower region to connect");
        return rc;
    }
    const xdc_wan_identity *id = xdc_wan_peer_identity(*out);
    *from = xdc_topology_region_index(w->topo, id->region);
    if (*from < 0 || *from >= w->region_idx || id->rank != rank || (r >= 0 && *from != r)) {
        xdc_diag_set(diag, "unexpected WAN peer %s/%d (expected rank %d of %s)", id->region, id->rank, rank,
                     r >= 0 ? w->topo->regions[r].name : "a lower region");
        return XDC_ERR_AUTH;
    }
    return XDC_OK;
}

/* WAN peers. Sync/DiLoCo: the same local rank in every other region. Span: the neighbouring stages on
 * the other side of a region boundary. The lower region dials, the higher accepts. */
static xdc_err_t open_peers(orch_worker *w, xdc_diag *diag)
{
    w->peers = xdc_calloc((size_t)w->n_regions, sizeof *w->peers);
    if (!w->peers) return XDC_ERR_NOMEM;
    if (w->n_regions < 2) return XDC_OK;
    char key[200], val[300];
    /* Local runs advertise loopback (XDC_ADVERTISE_HOST, set by xdc launch); across hosts, the node name. */
    const char *adv = getenv("XDC_ADVERTISE_HOST");
    if (!adv || !*adv) adv = w->node;
    XDC_CHECK(xdc_wan_listen(w->wan, strcmp(adv, "127.0.0.1") == 0 ? "127.0.0.1" : NULL, 0, &w->lis, diag));
    snprintf(key, sizeof key, "wan/%d/%d", w->region_idx, w->lrank);
    snprintf(val, sizeof val, "%s:%d", adv, xdc_wan_listener_port(w->lis));
    XDC_CHECK(rdzv_set(w->rdzv, key, val, diag));
    if (w->span) {
        int from;
        if (w->lrank == w->lsize - 1 && w->region_idx < w->n_regions - 1)
            XDC_CHECK(dial(w, w->region_idx + 1, 0, &w->next_peer, diag));
        if (w->lrank == 0 && w->region_idx > 0)
            XDC_CHECK(accept_peer(w, w->region_idx - 1, xdc_topology_region_workers(w->topo, w->region_idx - 1) - 1,
                                  &w->prev_peer, &from, diag));
        return XDC_OK;
    }
    for (int r = w->region_idx + 1; r < w->n_regions; r++) XDC_CHECK(dial(w, r, w->lrank, &w->peers[r], diag));
    for (int n = 0; n < w->region_idx; n++) {
        xdc_wan_peer *p;
        int r;
        XDC_CHECK(accept_peer(w, -1, w->lrank, &p, &r, diag));
        if (w->peers[r]) {
            xdc_diag_set(diag, "region %s connected twice", w->topo->regions[r].name);
            return XDC_ERR_AUTH;
        }
        w->peers[r] = p;
    }
    return XDC_OK;
}

/* Activation codec for stages that talk across the WAN (no error feedback: each tensor is used once). */
static xdc_err_t open_pipe_codec(orch_worker *w, xdc_diag *diag)
{
    if (!w->prev_peer && !w->next_peer) return XDC_OK;
    xdc_codec_cfg cc = XDC_CODEC_CFG_INIT;
    XDC_CHECK(xdc_codec_parse(w->cfg.activation_codec, &cc, diag));
    w->pipe_elems = (size_t)w->B * w->T * (size_t)w->C;
    cc.n_elems = w->pipe_elems;
    cc.chunk_elems = w->pipe_elems;
    cc.error_feedback = false;
    cc.zstd_level = 0; /* latency class: no entropy stage */
    w->pipe_codec_kind = cc.kind;
    XDC_CHECK(xdc_codec_create(&cc, &w->pipe_enc, diag));
    XDC_CHECK(xdc_codec_create(&cc, &w->pipe_dec, diag));
    w->pipe_bound = xdc_codec_bound(w->pipe_enc, w->pipe_elems);
    w->wire = xdc_malloc(4 * (size_t)w->M * w->pipe_bound);
    return w->wire ? XDC_OK : XDC_ERR_NOMEM;
}

/* The WAN codec, one for the whole run so every region encodes alike: the run file's, or with "link"
 * the most compressing codec any link of the topology names ("auto" counting as int8); zstd at the
 * level the slowest link calls for. Every worker computes the same answer from the same files. */
static xdc_err_t codec_config(orch_worker *w, xdc_codec_cfg *cc, xdc_diag *diag)
{
    static const char *const strength[] = {"none", "bf16", "int8", "int4", "topk"}; /* weakest first */
    xdc_codec_cfg d = XDC_CODEC_CFG_INIT;
    *cc = d;
    const char *name = w->cfg.codec;
    double slowest = 100; /* Gbit/s */
    int best = -1;
    for (int i = 0; i < w->topo->n_links; i++) {
        const xdc_link *l = &w->topo->links[i];
        const char *c = strcmp(l->codec, "auto") == 0 ? "int8" : l->codec;
        for (int k = 0; k < 5; k++)
            if (strcmp(c, strength[k]) == 0 && k > best) best = k;
        if (l->bandwidth_gbps < slowest) slowest = l->bandwidth_gbps;
    }
    if (strcmp(name, "link") == 0) name = best >= 0 ? strength[best] : "none";
    if (strcmp(name, "auto") == 0) name = "int8";
    XDC_CHECK(xdc_codec_parse(name, cc, diag));
    cc->zstd_level = w->cfg.zstd_level >= 0 ? w->cfg.zstd_level : xdc_codec_zstd_level_for_link(slowest);
    return XDC_OK;
}

/* The comm thread's timeline: each bucket phase of every sync on the worker's trace lanes. */
static void sync_trace(void *ctx, const char *sync_name, xdc_sync_phase phase, uint64_t start_ns, uint64_t dur_ns,
                       size_t bytes)
{
    orch_worker *w = ctx;
    static const char *const what[] = {"reduce-scatter", "encode+send", "wait+decode", "all-gather"};
    static const orch_trace_lane lane[] = {ORCH_LANE_INTRA, ORCH_LANE_CODEC, ORCH_LANE_WAN_RX, ORCH_LANE_INTRA};
    if (!w->trace) return;
    uint64_t now_us = orch_trace_now_us(w->trace), ago_us = (xdc_now_ns() - start_ns) / 1000;
    char name[ORCH_TRACE_NAME_MAX];
    snprintf(name, sizeof name, "%s %s", sync_name, what[phase]);
    orch_trace_complete(w->trace, lane[phase], name,
                        phase == XDC_SYNC_PHASE_REDUCE_SCATTER || phase == XDC_SYNC_PHASE_ALL_GATHER ? "intra" : "wan",
                        now_us > ago_us ? now_us - ago_us : 0, dur_ns / 1000, "bytes", (double)bytes);
}

static xdc_err_t open_sync(orch_worker *w, xdc_diag *diag)
{
    xdc_sync_cfg sc = {.n_elems = w->n_params,
                       .bucket_elems = (size_t)(w->cfg.bucket_mb * 1048576.0 / sizeof(float)),
                       .dp = xdc_intra_size(w->dp) > 1 ? w->dp : NULL,
                       .peers = w->peers,
                       .n_regions = w->n_regions,
                       .my_region = w->region_idx,
                       .name = "gradients",
                       .trace = sync_trace,
                       .trace_ctx = w};
    if (sc.bucket_elems == 0) sc.bucket_elems = 1;
    XDC_CHECK(codec_config(w, &sc.codec, diag));
    XDC_CHECK(xdc_sync_engine_create(&w->sync_eng, diag));
    w->codec_cfg = sc.codec;
    if (w->span) { /* each stage exists once: nothing to average */
        sc.n_regions = 1;
        sc.my_region = 0;
        sc.peers = NULL;
    }
    if (w->cfg.mode == ORCH_MODE_SYNC) return xdc_sync_create(w->sync_eng, &sc, &w->grad_sync, diag);
    /* DiLoCo and streaming: inner steps sync over the region's replicas only, with no codec. */
    xdc_sync_cfg inner = sc;
    inner.n_regions = 1;
    inner.my_region = 0;
    inner.peers = NULL;
    XDC_CHECK(xdc_sync_create(w->sync_eng, &inner, &w->grad_sync, diag));
    sc.name = "pseudo-gradients";
    if (w->cfg.mode == ORCH_MODE_STREAMING && sc.dp) {
        /* Fragment syncs run while the next inner step's gradient sync uses the replicas' communicator;
         * collectives of two threads on one communicator would interleave differently on different
         * replicas, so the fragments get a communicator of their own. */
        XDC_CHECK(xdc_intra_split(w->dp, 0, w->replica, &w->dp_wan, diag));
        sc.dp = w->dp_wan;
    }
    XDC_CHECK(xdc_sync_create(w->sync_eng, &sc, &w->outer_sync, diag)); /* diloco rounds; streaming's final agreement */
    if (w->cfg.mode == ORCH_MODE_DILOCO) return XDC_OK;
    int F = w->cfg.fragments;
    if ((size_t)F > w->n_params) {
        xdc_diag_set(diag, "streaming.fragments (%d) exceeds this stage's %zu parameters", F, w->n_params);
        return XDC_ERR_CONFIG;
    }
    w->frag_sync = xdc_calloc((size_t)F, sizeof *w->frag_sync);
    if (!w->frag_sync) return XDC_ERR_NOMEM;
    for (int f = 0; f < F; f++) {
        size_t lo, hi;
        orch_fragment_range(w, f, &lo, &hi);
        sc.n_elems = hi - lo;
        sc.name = "fragment";
        XDC_CHECK(xdc_sync_create(w->sync_eng, &sc, &w->frag_sync[f], diag));
    }
    return XDC_OK;
}

int orch_worker_syncs(const orch_worker *w, xdc_sync **out, int cap)
{
    int n = 0;
    if (w->grad_sync && n < cap) out[n++] = w->grad_sync;
    if (w->outer_sync && n < cap) out[n++] = w->outer_sync;
    for (int f = 0; w->frag_sync && f < w->cfg.fragments && n < cap; f++)
        if (w->frag_sync[f]) out[n++] = w->frag_sync[f];
    return n;
}

static void worker_close(orch_worker *w)
{
    /* Stop the syncs first: once xdc_sync_stop returns, the comm thread no longer works for them. Then
     * the transports their rounds may still have requests posted with: the intra communicators, and the
     * WAN peers (closing a peer fails its pending requests, so the WAN engine stops writing into sync
     * buffers). Then destroy the syncs (the sync engine's clients: their jobs sit in its queue, so they go
     * before it), the sync engine (its thread calls into the WAN engine, so it
     * must be joined before that is destroyed), and last the WAN engine. */
    xdc_sync *syncs[ORCH_MAX_SYNCS];
    int n_syncs = orch_worker_syncs(w, syncs, ORCH_MAX_SYNCS);
    for (int i = 0; i < n_syncs; i++) xdc_sync_stop(syncs[i]);
    xdc_intra_destroy(w->dp_wan);
    xdc_intra_destroy(w->dp);
    xdc_intra_destroy(w->pp);
    xdc_intra_destroy(w->region_comm);
    for (int r = 0; w->peers && r < w->n_regions; r++) xdc_wan_peer_close(w->peers[r]);
    for (int i = 0; i < n_syncs; i++) xdc_sync_destroy(syncs[i]);
    xdc_sync_engine_destroy(w->sync_eng);
    rdzv_client_destroy(w->rdzv);
    xdc_wan_engine_destroy(w->wan); /* closes the other peers and the listener */
    xdc_free(w->frag_sync);
    xdc_codec_destroy(w->pipe_enc);
    xdc_codec_destroy(w->pipe_dec);
    xdc_free(w->peers);
    xdc_gpt_stage_destroy(w->st);
    xdc_data_destroy(w->data);
    xdc_data_destroy(w->val);
    xdc_topology_destroy(w->topo);
    orch_trace_destroy(w->trace);
    void *bufs[] = {w->tokens, w->targets, w->x_in,   w->dy_in,         w->dx_out,    w->wire,   w->x_req,
                    w->dy_req, w->y_req,   w->dx_req, w->global_params, w->outer_mom, w->pseudo, w->snapshot};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) xdc_free(bufs[i]);
}

/* Threads of this process (/proc/self/task), for the set-up log line; -1 when unknown. */
static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

xdc_err_t xdc_worker_run(const xdc_worker_opts *o, xdc_diag *diag)
{
    orch_worker w;
    memset(&w, 0, sizeof w);
    snprintf(w.run_dir, sizeof w.run_dir, "%s", o->run_dir);
    w.emulate_wan = o->emulate_wan;
    w.resume = o->resume;
    const char *topo_path = o->topology_path, *cfg_path = o->config_path;
    xdc_diag d = {{0}};
    xdc_cfg_errors errs;
    if (xdc_topology_load(topo_path, &w.topo, &errs) != XDC_OK ||
        orch_run_config_load(cfg_path, &w.cfg, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        worker_close(&w);
        xdc_diag_set(diag, "%s or %s: configuration errors (above)", topo_path, cfg_path);
        return XDC_ERR_CONFIG;
    }
    xdc_err_t rc = read_identity(&w, &d);
    if (rc != XDC_OK) {
        worker_close(&w);
        if (diag) *diag = d;
        return XDC_ERR_CONFIG; /* whatever the cause: the environment contract does not hold */
    }
    if (w.cfg.plan_auto && (rc = orch_plan_apply(&w.cfg, w.topo, &w.planned, &d)) != XDC_OK) {
        worker_close(&w);
        if (diag) *diag = d;
        return rc;
    }
    xdc_log_set_identity(w.region, w.node, w.lrank);
    if (orch_trace_create(w.grank, w.member, ORCH_TRACE_DEFAULT_CAPACITY, &w.trace) != XDC_OK)
        XDC_WARN(XDC_SUB_ORCH, "no memory for the trace buffer; tracing off");
    const char *what = "layout";
    rc = place(&w, &d);
    if (rc == XDC_OK) what = "model and data", rc = open_model_and_data(&w, &d);
    if (rc == XDC_OK) what = "WAN engine and rendezvous", rc = open_wan(&w, &d);
    if (rc == XDC_OK) what = "intra-region communicators", rc = open_intra(&w, &d);
    if (rc == XDC_OK) what = "WAN peers", rc = open_peers(&w, &d);
    if (rc == XDC_OK) what = "activation codec", rc = open_pipe_codec(&w, &d);
    if (rc == XDC_OK) what = "comm engine", rc = open_sync(&w, &d);
    if (rc == XDC_OK) what = "metrics", rc = orch_observe_start(&w, &d);
    if (rc == XDC_OK)
        what = "start barrier", rc = rdzv_barrier(w.rdzv, "start", w.gsize, w.cfg.rendezvous_timeout_ms, &d);
    if (rc == XDC_OK) {
        XDC_INFO(XDC_SUB_ORCH, "stage %d/%d (layers %d-%d, %zu params) of replica %d/%d, %s mode, %d threads", w.stage,
                 w.n_stages, w.layer_begin, w.layer_end - 1, w.n_params, w.replica, w.n_replicas,
                 orch_mode_name(w.cfg.mode), count_threads());
        what = "training";
        rc = orch_train_run(&w, &d);
        if (rc == XDC_OK) XDC_INFO(XDC_SUB_ORCH, "training done, %d threads", count_threads());
    }
    orch_observe_finish(&w);
    if (w.trace) {
        char dir[600], path[700];
        xdc_diag td = {{0}};
        snprintf(dir, sizeof dir, "%s/traces", w.run_dir);
        mkdir(dir, 0755);
        if (orch_trace_write_dir(w.trace, dir, path, sizeof path, &td) != XDC_OK)
            XDC_WARN(XDC_SUB_ORCH, "trace not written: %s", td.msg);
    }
    if (rc != XDC_OK) {
        XDC_ERROR(XDC_SUB_ORCH, "%s failed: %s: %s", what, xdc_strerror(rc), d.msg);
        if (w.rdzv) {
            char key[200], val[1024];
            snprintf(key, sizeof key, "failed/%s", w.member);
            snprintf(val, sizeof val, "%s: %s: %s", what, xdc_strerror(rc), d.msg);
            xdc_diag ignore;
            rdzv_set(w.rdzv, key, val, &ignore);
        }
    }
    worker_close(&w);
    if (rc != XDC_OK) xdc_diag_set(diag, "%s failed: %s", what, d.msg);
    return rc;
}
