/* orch_worker.c — xdc_worker_run (xdc_worker.h): one process per pipeline stage of one replica in one
 * region, started by `xdc agent` (`xdc worker` parses its options in orchestrator/cli/cmd_worker.c).
 * Reads its identity from the environment contract, joins the rendezvous, creates the intra
 * communicators (region, pipeline group, data-parallel group) and the WAN peers (the same local rank in
 * every other region, through the emulator's relays when asked), then runs the training loop
 * (orch_train.c) and reports its result to the rendezvous. Its device (CPU, CUDA, cpu-strict) follows
 * orchestrator/launch/orch_device.h: chosen and checked before any set-up. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "kernels/xdc_kernels.h"
#include "kernels/xdc_model_ops.h"
#include "model/xdc_model_shape.h"
#include "orchestrator/launch/orch_failure.h"
#include "orchestrator/launch/orch_identity.h"
#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/worker/xdc_worker.h"

#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef XDC_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

_Static_assert((int)ORCH_DEVICE_CPU == (int)XDC_BACKEND_CPU && (int)ORCH_DEVICE_CUDA == (int)XDC_BACKEND_CUDA &&
                   (int)ORCH_DEVICE_CPU_STRICT == (int)XDC_BACKEND_CPU_STRICT,
               "orch_device and xdc_backend_kind share their values");

void orch_stage_layers(int n_layer, int n_stages, int s, int *begin, int *end)
{
    int base = n_layer / n_stages, extra = n_layer % n_stages;
    *begin = s * base + (s < extra ? s : extra);
    *end = *begin + base + (s < extra ? 1 : 0);
}

/* Identity from the environment contract that `xdc agent` set (orch_identity.h), and the rendezvous
 * store: --rdzv, XDC_RDZV, the run file's rdzv:, else the built-in store at XDC_COORDINATOR. */
static xdc_err_t read_identity(orch_worker *w, const xdc_worker_opts *o, xdc_diag *diag)
{
    orch_identity id;
    XDC_CHECK(orch_identity_resolve(NULL, NULL, w->topo, ORCH_ID_REQUIRE_WORKER, &id, diag));
    snprintf(w->id.run_id, sizeof w->id.run_id, "%s", id.run_id);
    snprintf(w->id.region, sizeof w->id.region, "%s", id.region);
    snprintf(w->id.node, sizeof w->id.node, "%s", id.host);
    w->id.region_idx = id.region_index;
    w->id.n_regions = id.num_regions;
    w->id.lrank = id.rank;
    w->id.lsize = id.world_size;
    w->id.local_rank = id.local_rank;
    w->id.grank = id.global_rank;
    w->id.gsize = id.global_world_size;
    if (orch_split_hostport(id.coordinator, w->id.coord_host, sizeof w->id.coord_host, &w->id.coord_port) != 0) {
        xdc_diag_set(diag, "coordinator '%s' (%s) is not host:port", id.coordinator, id.source[ORCH_ID_COORDINATOR]);
        return XDC_ERR_CONFIG;
    }
    snprintf(w->id.member, sizeof w->id.member, "%s/%s:%d", w->id.region, w->id.node, w->id.lrank);
    XDC_CHECK(rdzv_target_resolve(o->rdzv.rdzv, w->cfg.rdzv, w->id.run_id, &w->id.rdzv, diag));
    if (w->id.rdzv.kind == RDZV_BUILTIN) {
        snprintf(w->id.rdzv.host, sizeof w->id.rdzv.host, "%s", w->id.coord_host);
        w->id.rdzv.port = w->id.coord_port;
    }
    rdzv_flags_tls(&o->rdzv, &w->id.rdzv);
    return XDC_OK;
}

/* This stage's layers: the plan's partition when there is one, else an even split. */
static void stage_layers(orch_worker *w)
{
    if (w->cfg.n_split == w->id.n_stages) {
        w->id.layer_begin = w->cfg.stage_layer_begin[w->id.stage];
        w->id.layer_end = w->cfg.stage_layer_begin[w->id.stage + 1];
        return;
    }
    orch_stage_layers(w->cfg.train.model.n_layer, w->id.n_stages, w->id.stage, &w->id.layer_begin, &w->id.layer_end);
}

xdc_err_t orch_worker_place(orch_worker *w, xdc_diag *diag)
{
    const xdc_topology *t = w->topo;
    int r = xdc_topology_region_index(t, w->id.region);
    if (r < 0 || r != w->id.region_idx || t->n_regions != w->id.n_regions) {
        xdc_diag_set(diag, "XDC_REGION=%s / XDC_REGION_INDEX=%d / XDC_NUM_REGIONS=%d do not match %s", w->id.region,
                     w->id.region_idx, w->id.n_regions, t->path);
        return XDC_ERR_CONFIG;
    }
    int workers = xdc_topology_region_workers(t, r);
    w->id.n_stages = w->cfg.pipeline_stages;
    if (w->cfg.span_regions) {
        /* One pipeline through every worker of every region, in region order: stage = global rank. */
        w->id.span = 1;
        if (w->id.n_stages != w->id.gsize || w->id.gsize > w->cfg.train.model.n_layer) {
            xdc_diag_set(diag,
                         "span_regions: pipeline_stages (%d) must equal the workers of all regions (%d) and not "
                         "exceed the model's %d layers",
                         w->id.n_stages, w->id.gsize, w->cfg.train.model.n_layer);
            return XDC_ERR_CONFIG;
        }
        w->id.stage = w->id.grank;
        w->id.replica = 0;
        w->id.n_replicas = 1;
        stage_layers(w);
        return XDC_OK;
    }
    if (w->id.lsize != workers || workers % w->id.n_stages != 0 || w->id.lrank < 0 || w->id.lrank >= workers) {
        xdc_diag_set(diag, "region %s has %d workers (WORLD_SIZE=%d), which %d pipeline stages must divide",
                     w->id.region, workers, w->id.lsize, w->id.n_stages);
        return XDC_ERR_CONFIG;
    }
    for (int o = 0; o < t->n_regions; o++)
        if (xdc_topology_region_workers(t, o) != workers) {
            xdc_diag_set(diag,
                         "regions %s and %s have different worker counts (%d vs %d); the hierarchical sync "
                         "pairs equal layouts",
                         w->id.region, t->regions[o].name, workers, xdc_topology_region_workers(t, o));
            return XDC_ERR_CONFIG;
        }
    w->id.n_replicas = workers / w->id.n_stages;
    w->id.stage = w->id.lrank % w->id.n_stages;
    w->id.replica = w->id.lrank / w->id.n_stages;
    stage_layers(w);
    return XDC_OK;
}

/* The registry's answers for the node check (orch_device_check_node). */
static xdc_err_t registry_kernels(orch_device d, xdc_diag *diag)
{
    const xdc_kern_backend *be;
    return xdc_kern_backend_get((xdc_backend_kind)d, &be, diag);
}
static const orch_device_probe registry_probe = {.cuda_devices = xdc_kern_cuda_device_count,
                                                 .kernels = registry_kernels};

/* Make `ordinal` this thread's CUDA device; the model stage's memory and kernels land there. (Other
 * threads set it for themselves: the NCCL backend before each operation.) */
static xdc_err_t set_cuda_device(int ordinal, xdc_diag *diag)
{
#ifdef XDC_HAVE_CUDA
    cudaError_t e = cudaSetDevice(ordinal);
    if (e != cudaSuccess) {
        xdc_diag_set(diag, "cudaSetDevice(%d): %s", ordinal, cudaGetErrorString(e));
        return XDC_ERR_CUDA;
    }
#else
    (void)ordinal;
    (void)diag; /* unreachable: the registry refuses CUDA in a build without it */
#endif
    return XDC_OK;
}

/* The device (orch_device.h: --device, else XDC_DEVICE, else the topology), checked on this node before
 * anything is set up: enough visible GPUs, kernels the registry gives; on CUDA, LOCAL_RANK picks the GPU
 * among the visible ones. One log line names it. */
static xdc_err_t choose_device(orch_worker *w, const char *flag, xdc_diag *diag)
{
    orch_device over;
    const char *from;
    XDC_CHECK(orch_device_override(flag, &over, &from, diag));
    orch_device d = orch_device_of_region(over, w->topo, w->id.region_idx);
    XDC_CHECK(orch_device_check_node(d, from, w->topo, w->id.region_idx, w->id.node, &registry_probe, diag));
    XDC_CHECK(xdc_kern_backend_get((xdc_backend_kind)d, &w->model.be, diag));
    w->model.device = d;
    w->model.intra = orch_device_uses_nccl(d) ? XDC_INTRA_NCCL : XDC_INTRA_CPU;
    w->model.cuda_device = d == ORCH_DEVICE_CUDA ? w->id.local_rank : -1;
    if (w->model.cuda_device >= 0) {
        int visible = xdc_kern_cuda_device_count();
        if (w->model.cuda_device >= visible) {
            xdc_diag_set(diag, "node %s/%s: LOCAL_RANK=%d picks GPU %d, found %d visible CUDA devices", w->id.region,
                         w->id.node, w->id.local_rank, w->model.cuda_device, visible);
            return XDC_ERR_UNAVAILABLE;
        }
        XDC_CHECK(set_cuda_device(w->model.cuda_device, diag));
    }
    char desc[64];
    orch_device_describe(d, w->model.cuda_device, desc, sizeof desc);
    XDC_INFO(XDC_SUB_ORCH, "device %s (from %s)", desc, from);
    return XDC_OK;
}

xdc_err_t orch_model_alloc_boundary(orch_model *m, size_t *bytes)
{
    /* On the device: the stage reads x_in and dy_in there, and the intra communicator reaches all three
     * through the device's comm_view. */
    size_t one = (size_t)m->B * (size_t)m->T * (size_t)m->C * sizeof(float);
    bool first = xdc_gpt_stage_is_first(m->st), last = xdc_gpt_stage_is_last(m->st);
    float **buf[] = {first ? NULL : &m->x_in, last ? NULL : &m->dy_in, first ? NULL : &m->dx_out};
    *bytes = 0;
    for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++) {
        if (!buf[i]) continue;
        XDC_CHECK(m->be->device->mem_alloc((void **)buf[i], one));
        *bytes += one;
    }
    return XDC_OK;
}

static xdc_err_t open_model_and_data(orch_worker *w, xdc_diag *diag)
{
    const xdc_train_config *c = &w->cfg.train;
    w->model.be->model->set_threads(w->cfg.threads);
    int slots = xdc_model_shape_1f1b_inflight(w->id.n_stages, w->id.stage, c->microbatches); /* 1F1B's bound */
    xdc_gpt_stage_config sc = {.model = c->model,
                               .layer_begin = w->id.layer_begin,
                               .layer_end = w->id.layer_end,
                               .batch = c->batch_size,
                               .seq_len = c->seq_len,
                               .max_inflight = slots,
                               /* delayed averaging: the sync holds one arena while backward fills the other */
                               .grad_buffers = w->cfg.sync.delay_steps ? 2 : 1,
                               .seed = (uint64_t)c->seed,
                               .adamw = {(float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay}};
    XDC_CHECK(xdc_gpt_stage_create(w->model.be->model, &sc, &w->model.st, diag));
    w->model.n_params = xdc_gpt_stage_num_params(w->model.st);
    w->model.B = c->batch_size;
    w->model.T = c->seq_len;
    w->model.C = c->model.n_embd;
    w->model.M = c->microbatches;
    if (xdc_gpt_stage_is_first(w->model.st) || xdc_gpt_stage_is_last(w->model.st)) {
        /* Every replica of every region reads its own shard; the stages of one replica read the same one. */
        xdc_data_config dc = {.batch = c->batch_size,
                              .seq_len = c->seq_len,
                              .val_fraction = c->val_fraction,
                              .seed = (uint64_t)c->seed,
                              .rank = w->id.span ? 0 : w->id.region_idx * w->id.n_replicas + w->id.replica,
                              .world = w->id.span ? 1 : w->id.n_regions * w->id.n_replicas,
                              .vocab_size = c->model.vocab_size};
        XDC_CHECK(xdc_data_open(w->cfg.data_path, &dc, &w->model.data, diag));
        dc.rank = 0;
        dc.world = 1;
        XDC_CHECK(xdc_data_open(w->cfg.data_path, &dc, &w->model.val, diag));
    }
    size_t bt = (size_t)w->model.B * (size_t)w->model.T, M = (size_t)w->model.M, boundary;
    w->model.tokens = xdc_malloc(M * bt * sizeof(int32_t));
    w->model.targets = xdc_malloc(M * bt * sizeof(int32_t));
    XDC_CHECK(orch_model_alloc_boundary(&w->model, &boundary));
    XDC_INFO(XDC_SUB_ORCH, "activation memory: slots %d x %zu bytes, pipeline boundary buffers %zu bytes", slots,
             xdc_gpt_stage_slot_bytes(w->model.st), boundary);
    const xdc_device_ops *dev = w->model.be->device;
    XDC_CHECK(dev->mem_alloc((void **)&w->pipe.scalars, ORCH_PIPE_SCALAR_ROWS * ORCH_PIPE_MAX_SCALARS * sizeof(float)));
    w->pipe.x_req = xdc_calloc(M, sizeof *w->pipe.x_req);
    w->pipe.dy_req = xdc_calloc(M, sizeof *w->pipe.dy_req);
    w->pipe.y_req = xdc_calloc(M, sizeof *w->pipe.y_req);
    w->pipe.dx_req = xdc_calloc(M, sizeof *w->pipe.dx_req);
    if (!w->model.tokens || !w->model.targets || !w->pipe.x_req || !w->pipe.dy_req || !w->pipe.y_req || !w->pipe.dx_req)
        return XDC_ERR_NOMEM;
    return XDC_OK;
}

static xdc_err_t open_wan(orch_worker *w, xdc_diag *diag)
{
    orch_creds creds;
    XDC_CHECK(orch_creds_resolve(w->creds, w->id.run_dir, &creds, diag));
    XDC_CHECK(orch_creds_member(&creds, w->id.run_id, w->id.region, w->id.lrank, diag));
    xdc_wan_config wc = XDC_WAN_CONFIG_INIT;
    orch_creds_apply(&creds, &wc);
    wc.deadline_ms = w->cfg.timeouts.operation_ms;
    wc.streams = 1; /* the most any link of the topology asks for: one engine dials every peer */
    for (int i = 0; i < w->topo->n_links; i++)
        if (w->topo->links[i].streams > wc.streams) wc.streams = w->topo->links[i].streams;
    XDC_CHECK(xdc_wan_engine_create(&wc, &w->comm.wan, diag));
    XDC_INFO(XDC_SUB_ORCH, "credentials: %s (folder from %s), CA %s, %s%s", creds.cert, creds.dir_from, creds.ca,
             creds.crl[0] ? "CRL " : "no CRL", creds.crl);
    const char *run = xdc_wan_engine_identity(w->comm.wan)->run;
    if (strcmp(run, w->id.run_id) != 0) {
        xdc_diag_set(diag, "%s names run '%s', but this worker is of run '%s'", creds.cert, run, w->id.run_id);
        return XDC_ERR_CONFIG;
    }
    XDC_CHECK(
        rdzv_client_open(&w->id.rdzv, w->comm.wan, w->id.member, w->cfg.timeouts.rendezvous_ms, &w->comm.rdzv, diag));
    rdzv_run_shape shape; /* the launcher's: etcd has no host to hold us to it, so we do */
    rdzv_quota quota;
    orch_run_config_rdzv_shape(&w->cfg, w->id.n_regions, &shape);
    rdzv_quota_for_run(&quota, &shape);
    rdzv_client_quota(w->comm.rdzv, &quota);
    /* A restarted worker of a running elastic job skips the barriers the others passed long ago. */
    XDC_CHECK(orch_rejoin_detect(w, diag));
    if (w->elastic.rejoin) return XDC_OK;
    /* Everyone present before anything else waits on anyone: a missing member is named here. */
    return rdzv_barrier(w->comm.rdzv, "joined", w->id.gsize, w->cfg.timeouts.rendezvous_ms, diag);
}

/* Intra communicators: the region, then its split into pipeline groups (one per replica) and
 * data-parallel groups (one per stage). Rank 0 of the region makes the bootstrap id. */
static xdc_err_t open_intra(orch_worker *w, xdc_diag *diag)
{
    char key[160], boot[XDC_INTRA_BOOTSTRAP_MAX];
    snprintf(key, sizeof key, "intra/%s", w->id.region);
    if (w->elastic.rejoin) /* the earlier bootstrap is stale: the one of this return (orch_quorum.h) */
        snprintf(key, sizeof key, "intra/%s/%d", w->id.region, w->elastic.left);
    if (w->id.lrank == 0) {
        XDC_CHECK(xdc_intra_bootstrap_create(w->model.intra, boot, sizeof boot, diag));
        XDC_CHECK(rdzv_set(w->comm.rdzv, key, boot, diag));
        /* The region's device, for the launcher's summary. */
        char dkey[160], desc[64];
        snprintf(dkey, sizeof dkey, "device/%s", w->id.region);
        orch_device_describe(w->model.device, -1, desc, sizeof desc);
        XDC_CHECK(rdzv_set(w->comm.rdzv, dkey, desc, diag));
    } else {
        XDC_CHECK(rdzv_get(w->comm.rdzv, key, w->cfg.timeouts.rendezvous_ms, boot, sizeof boot, diag));
    }
    xdc_intra_config ic = XDC_INTRA_CONFIG_INIT;
    ic.backend = w->model.intra;
    ic.device = w->model.cuda_device >= 0 ? w->model.cuda_device : 0;
    ic.rank = w->id.lrank;
    ic.size = w->id.lsize;
    ic.bootstrap = boot;
    ic.create_timeout_ms = w->cfg.timeouts.rendezvous_ms;
    ic.op_timeout_ms = w->cfg.timeouts.operation_ms;
    ic.dev_ops = w->model.be->device; /* activations and gradient buckets are device memory */
    XDC_CHECK(xdc_intra_create(&ic, &w->comm.region_comm, diag));
    /* With span the region's workers are consecutive stages of the one pipeline. */
    XDC_CHECK(
        xdc_intra_split(w->comm.region_comm, w->id.replica, w->id.span ? w->id.lrank : w->id.stage, &w->comm.pp, diag));
    XDC_CHECK(
        xdc_intra_split(w->comm.region_comm, w->id.span ? w->id.lrank : w->id.stage, w->id.replica, &w->comm.dp, diag));
    return XDC_OK;
}

xdc_err_t orch_worker_dial(orch_worker *w, int r, int rank, xdc_wan_peer **out, xdc_diag *diag)
{
    char key[200], val[300];
    if (w->id.emulate_wan) snprintf(key, sizeof key, "relay/%d/%d/%d", w->id.region_idx, r, rank);
    else snprintf(key, sizeof key, "wan/%d/%d", r, rank);
    char who[XDC_NAME_MAX + 16], coord[300];
    snprintf(who, sizeof who, "%s rank %d", w->topo->regions[r].name, rank);
    snprintf(coord, sizeof coord, "the coordinator %s:%d, key %s", w->id.coord_host, w->id.coord_port, key);
    uint64_t since = xdc_wall_ns();
    xdc_err_t rc = rdzv_get(w->comm.rdzv, key, w->cfg.timeouts.rendezvous_ms, val, sizeof val, diag);
    if (rc == XDC_ERR_TIMEOUT)
        orch_wait_expired(diag, "WAN address", who, coord, since, w->cfg.timeouts.rendezvous_ms, "rendezvous");
    XDC_CHECK(rc);
    char host[256];
    int port;
    if (orch_split_hostport(val, host, sizeof host, &port) != 0) {
        xdc_diag_set(diag, "rendezvous key %s = '%s' is not host:port", key, val);
        return XDC_ERR_PROTO;
    }
    since = xdc_wall_ns();
    XDC_CHECK(xdc_wan_connect(w->comm.wan, host, port, w->topo->regions[r].name, rank, out, diag));
    rc = xdc_wan_peer_wait_ready(*out, w->cfg.timeouts.handshake_ms, diag);
    if (rc == XDC_ERR_TIMEOUT)
        orch_wait_expired(diag, "WAN handshake", who, val, since, w->cfg.timeouts.handshake_ms, "handshake");
    else if (rc != XDC_OK) xdc_diag_prefix(diag, "connecting to %s at %s", who, val);
    return rc;
}

/* Accept one peer and check it is region r's rank `rank` (r < 0: any lower region, same rank). */
static xdc_err_t accept_peer(orch_worker *w, int r, int rank, xdc_wan_peer **out, int *from, xdc_diag *diag)
{
    uint64_t since = xdc_wall_ns();
    xdc_err_t rc = xdc_wan_accept(w->comm.lis, w->cfg.timeouts.rendezvous_ms, out, diag);
    if (rc != XDC_OK) {
        char who[XDC_NAME_MAX + 32], where[64];
        snprintf(who, sizeof who, "rank %d of %s", rank, r >= 0 ? w->topo->regions[r].name : "a lower region");
        snprintf(where, sizeof where, "our WAN port %d", xdc_wan_listener_port(w->comm.lis));
        if (rc == XDC_ERR_TIMEOUT)
            orch_wait_expired(diag, "WAN accept", who, where, since, w->cfg.timeouts.rendezvous_ms, "rendezvous");
        else xdc_diag_prefix(diag, "waiting for %s to connect", who);
        return rc;
    }
    const xdc_wan_identity *id = xdc_wan_peer_identity(*out);
    *from = xdc_topology_region_index(w->topo, id->region);
    if (*from < 0 || *from >= w->id.region_idx || id->rank != rank || (r >= 0 && *from != r)) {
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
    w->comm.peers = xdc_calloc((size_t)w->id.n_regions, sizeof *w->comm.peers);
    if (!w->comm.peers) return XDC_ERR_NOMEM;
    if (w->id.n_regions < 2) return XDC_OK;
    char key[200], val[300];
    /* Local runs advertise loopback (XDC_ADVERTISE_HOST, set by xdc launch); across hosts, the node name. */
    const char *adv = getenv("XDC_ADVERTISE_HOST");
    if (!adv || !*adv) adv = w->id.node;
    XDC_CHECK(xdc_wan_listen(w->comm.wan, strcmp(adv, "127.0.0.1") == 0 ? "127.0.0.1" : NULL, 0, &w->comm.lis, diag));
    snprintf(key, sizeof key, "wan/%d/%d", w->id.region_idx, w->id.lrank);
    snprintf(val, sizeof val, "%s:%d", adv, xdc_wan_listener_port(w->comm.lis));
    XDC_CHECK(rdzv_set(w->comm.rdzv, key, val, diag));
    if (w->elastic.rejoin) return XDC_OK; /* it dials the members of the round that takes it back */
    if (w->id.span) {
        int from;
        if (w->id.lrank == w->id.lsize - 1 && w->id.region_idx < w->id.n_regions - 1)
            XDC_CHECK(orch_worker_dial(w, w->id.region_idx + 1, 0, &w->comm.next_peer, diag));
        if (w->id.lrank == 0 && w->id.region_idx > 0)
            XDC_CHECK(accept_peer(w, w->id.region_idx - 1,
                                  xdc_topology_region_workers(w->topo, w->id.region_idx - 1) - 1, &w->comm.prev_peer,
                                  &from, diag));
        return XDC_OK;
    }
    for (int r = w->id.region_idx + 1; r < w->id.n_regions; r++)
        XDC_CHECK(orch_worker_dial(w, r, w->id.lrank, &w->comm.peers[r], diag));
    for (int n = 0; n < w->id.region_idx; n++) {
        xdc_wan_peer *p;
        int r;
        XDC_CHECK(accept_peer(w, -1, w->id.lrank, &p, &r, diag));
        if (w->comm.peers[r]) {
            xdc_diag_set(diag, "region %s connected twice", w->topo->regions[r].name);
            return XDC_ERR_AUTH;
        }
        w->comm.peers[r] = p;
    }
    return XDC_OK;
}

xdc_err_t orch_worker_connect(orch_worker *w, const char **what, xdc_diag *diag)
{
    *what = "WAN engine and rendezvous";
    XDC_CHECK(open_wan(w, diag));
    *what = "intra-region communicators";
    XDC_CHECK(open_intra(w, diag));
    *what = "WAN peers";
    return open_peers(w, diag);
}

/* Activation codec for stages that talk across the WAN (no error feedback: each tensor is used once). */
static xdc_err_t open_pipe_codec(orch_worker *w, xdc_diag *diag)
{
    if (!w->comm.prev_peer && !w->comm.next_peer) return XDC_OK;
    xdc_codec_cfg cc = XDC_CODEC_CFG_INIT;
    XDC_CHECK(xdc_codec_parse(w->cfg.activation_codec, &cc, diag));
    w->pipe.elems = (size_t)w->model.B * w->model.T * (size_t)w->model.C;
    cc.n_elems = w->pipe.elems;
    cc.chunk_elems = w->pipe.elems;
    cc.error_feedback = false;
    cc.zstd_level = 0;        /* latency class: no entropy stage */
    cc.backend = w->model.be; /* it reads and writes the activations in device memory */
    w->pipe.codec_kind = cc.kind;
    XDC_CHECK(xdc_codec_create(&cc, &w->pipe.enc, diag));
    XDC_CHECK(xdc_codec_create(&cc, &w->pipe.dec, diag));
    w->pipe.bound = xdc_codec_bound(w->pipe.enc, w->pipe.elems);
    w->pipe.wire = xdc_malloc(4 * (size_t)w->model.M * w->pipe.bound);
    return w->pipe.wire ? XDC_OK : XDC_ERR_NOMEM;
}

/* The WAN codec, one for the whole run so every region encodes alike: the run file's, or with "link"
 * the lossiest codec any link of the topology names (xdc_plan_codec_of_links); zstd at the
 * level the slowest link calls for. Every worker computes the same answer from the same files. */
static xdc_err_t codec_config(orch_worker *w, xdc_codec_cfg *cc, xdc_diag *diag)
{
    xdc_codec_cfg d = XDC_CODEC_CFG_INIT;
    *cc = d;
    const char *name = w->cfg.codec;
    double slowest = 100; /* Gbit/s */
    for (int i = 0; i < w->topo->n_links; i++)
        if (w->topo->links[i].bandwidth_gbps < slowest) slowest = w->topo->links[i].bandwidth_gbps;
    if (strcmp(name, "link") == 0) name = xdc_plan_codec_of_links(w->topo);
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
    if (!w->tele.trace) return;
    uint64_t now_us = orch_trace_now_us(w->tele.trace), ago_us = (xdc_now_ns() - start_ns) / 1000;
    char name[ORCH_TRACE_NAME_MAX];
    snprintf(name, sizeof name, "%s %s", sync_name, what[phase]);
    orch_trace_complete(w->tele.trace, lane[phase], name,
                        phase == XDC_SYNC_PHASE_REDUCE_SCATTER || phase == XDC_SYNC_PHASE_ALL_GATHER ? "intra" : "wan",
                        now_us > ago_us ? now_us - ago_us : 0, dur_ns / 1000, "bytes", (double)bytes);
}

void orch_worker_sync_cfg(orch_worker *w, int across_regions, xdc_sync_cfg *out)
{
    *out = (xdc_sync_cfg){.n_elems = w->model.n_params,
                          .bucket_elems = (size_t)(w->cfg.bucket_mb * 1048576.0 / sizeof(float)),
                          .dp = xdc_intra_size(w->comm.dp) > 1 ? w->comm.dp : NULL,
                          .peers = w->comm.peers,
                          .n_regions = w->id.n_regions,
                          .my_region = w->id.region_idx,
                          .codec = w->comm.codec_cfg,
                          .name = "gradients",
                          .trace = sync_trace,
                          .trace_ctx = w};
    if (out->bucket_elems == 0) out->bucket_elems = 1;
    if (!across_regions || w->id.span) {
        out->n_regions = 1;
        out->my_region = 0;
        out->peers = NULL;
    }
}

static const orch_mode_ops *mode_ops(orch_mode m)
{
    return m == ORCH_MODE_DILOCO      ? &orch_mode_diloco_ops
           : m == ORCH_MODE_STREAMING ? &orch_mode_streaming_ops
                                      : &orch_mode_sync_ops;
}

xdc_err_t orch_worker_comm_engine(orch_worker *w, xdc_diag *diag)
{
    XDC_CHECK(codec_config(w, &w->comm.codec_cfg, diag));
    return xdc_sync_engine_create(&w->comm.sync_eng, diag);
}

/* The comm thread, then the mode's syncs and buffers on it. */
static xdc_err_t open_sync(orch_worker *w, xdc_diag *diag)
{
    XDC_CHECK(orch_worker_comm_engine(w, diag));
    w->mode = mode_ops(w->cfg.mode);
    return w->mode->setup(w, &w->mode_state, diag);
}

int orch_worker_syncs(const orch_worker *w, xdc_sync **out, int cap)
{
    return w->mode && w->mode_state ? w->mode->syncs(w->mode_state, out, cap) : 0;
}

void orch_worker_close(orch_worker *w)
{
    /* Teardown order, and why:
     * 1. stop every sync: once xdc_sync_stop returns, the comm thread runs no job of it any more;
     * 2. destroy the intra communicators and close the WAN peers (the pipeline neighbours too): what a
     *    stopped round still has posted fails, and neither transport writes into a sync's buffers after that;
     * 3. destroy the syncs: they are the sync engine's clients (their jobs live in its queue, and a sync
     *    detaches from the engine when destroyed), so the engine must outlive them;
     * 4. destroy the sync engine: this joins the comm thread, whose jobs call into the WAN engine, so it
     *    must end before the WAN engine goes;
     * 5. the rendezvous client, then the WAN engine (it frees the peers and the listener). */
    xdc_sync *syncs[ORCH_MAX_SYNCS];
    int n_syncs = orch_worker_syncs(w, syncs, ORCH_MAX_SYNCS);
    for (int i = 0; i < n_syncs; i++) xdc_sync_stop(syncs[i]);
    xdc_intra_destroy(w->comm.dp_wan);
    xdc_intra_destroy(w->comm.dp);
    xdc_intra_destroy(w->comm.pp);
    xdc_intra_destroy(w->comm.region_comm);
    for (int r = 0; w->comm.peers && r < w->id.n_regions; r++) xdc_wan_peer_close(w->comm.peers[r]);
    /* With BYE, as every peer: left to the engine's destroy, the pipeline neighbours' streams would just
     * end, and the other side would log each one as down ("unexpected eof"). */
    xdc_wan_peer_close(w->comm.prev_peer);
    xdc_wan_peer_close(w->comm.next_peer);
    if (w->mode) w->mode->destroy(w->mode_state); /* its syncs, then its buffers */
    xdc_sync_engine_destroy(w->comm.sync_eng);
    rdzv_client_destroy(w->comm.rdzv);
    xdc_wan_engine_destroy(w->comm.wan); /* closes the other peers and the listener */
    xdc_codec_destroy(w->pipe.enc);
    xdc_codec_destroy(w->pipe.dec);
    xdc_free(w->comm.peers);
    xdc_gpt_stage_destroy(w->model.st);
    xdc_data_destroy(w->model.data);
    xdc_data_destroy(w->model.val);
    xdc_topology_destroy(w->topo);
    orch_trace_destroy(w->tele.trace);
    if (w->model.be) {
        void *dev_bufs[] = {w->model.x_in, w->model.dy_in, w->model.dx_out, w->pipe.scalars};
        for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++) w->model.be->device->mem_free(dev_bufs[i]);
    }
    void *bufs[] = {w->model.tokens, w->model.targets, w->pipe.wire,  w->pipe.x_req,
                    w->pipe.dy_req,  w->pipe.y_req,    w->pipe.dx_req};
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

/* Append to a TIMEOUT's message when the wait began (now less the timeout, UTC) and the run file's key. */
static void time_out_hint(xdc_diag *d, int64_t timeout_ms)
{
    time_t since = (time_t)((xdc_wall_ns() / XDC_NS_PER_MS - (uint64_t)timeout_ms) / 1000);
    struct tm tm;
    char at[16];
    gmtime_r(&since, &tm);
    strftime(at, sizeof at, "%H:%M:%S", &tm);
    size_t len = strlen(d->msg);
    snprintf(d->msg + len, sizeof d->msg - len, " (waiting since %s UTC; timeouts.operation = %lld ms in the run file)",
             at, (long long)timeout_ms);
}

xdc_err_t orch_worker_load(orch_worker *w, const xdc_worker_opts *o, xdc_diag *diag)
{
    memset(w, 0, sizeof *w);
    w->elastic.started = xdc_now_ns();
    snprintf(w->id.run_dir, sizeof w->id.run_dir, "%s", o->run_dir);
    w->id.emulate_wan = o->emulate_wan;
    w->id.resume = o->resume;
    w->creds = &o->creds;
    xdc_cfg_errors errs;
    if (xdc_topology_load(o->topology_path, &w->topo, &errs) != XDC_OK ||
        orch_run_config_load(o->config_path, &w->cfg, &errs) != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        const xdc_cfg_error *e = &errs.items[0]; /* the first, named; every one printed */
        if (errs.count > 0 && e->line > 0)
            xdc_diag_set(diag, "%s:%d:%d: %s (%d errors in all, printed above)", errs.path, e->line, e->col, e->msg,
                         errs.count + errs.dropped);
        else if (errs.count > 0)
            xdc_diag_set(diag, "%s: %s (%d errors in all, printed above)", errs.path, e->msg,
                         errs.count + errs.dropped);
        else xdc_diag_set(diag, "%s or %s: configuration errors (above)", o->topology_path, o->config_path);
        return XDC_ERR_CONFIG;
    }
    orch_run_config_scale_timeouts(&w->cfg, w->topo);
    xdc_diag d = {{0}};
    if (read_identity(w, o, &d) != XDC_OK) {
        if (diag) *diag = d;
        return XDC_ERR_CONFIG; /* whatever the cause: the environment contract does not hold */
    }
    if (w->cfg.plan_auto) XDC_CHECK(orch_plan_apply(&w->cfg, w->topo, &w->planned, diag));
    xdc_log_set_identity(w->id.region, w->id.node, w->id.lrank);
    return XDC_OK;
}

void orch_worker_report_failure(orch_worker *w, const char *what, xdc_err_t rc, const char *msg)
{
    XDC_ERROR(XDC_SUB_ORCH, "%s failed: %s: %s", what, xdc_strerror(rc), msg);
    if (!w->comm.rdzv) return;
    char key[200], text[900], val[1024];
    snprintf(key, sizeof key, "failed/%s", w->id.member);
    snprintf(text, sizeof text, "%s failed: %s: %s", what, xdc_strerror(rc), msg);
    orch_failure_format(rc, text, val, sizeof val);
    xdc_diag ignore;
    rdzv_set(w->comm.rdzv, key, val, &ignore);
}

xdc_err_t orch_worker_end_barrier(orch_worker *w, xdc_diag *diag)
{
    XDC_CHECK(rdzv_barrier(w->comm.rdzv, "done", w->id.gsize, w->cfg.timeouts.operation_ms, diag));
    return w->id.grank == 0 ? rdzv_set(w->comm.rdzv, "finished", "1", diag) : XDC_OK;
}

xdc_err_t xdc_worker_run(const xdc_worker_opts *o, xdc_diag *diag)
{
    orch_worker w;
    xdc_diag d = {{0}};
    xdc_err_t rc = orch_worker_load(&w, o, &d);
    if (rc != XDC_OK) {
        orch_worker_close(&w);
        if (diag) *diag = d;
        return rc;
    }
    if (orch_trace_create(w.id.grank, w.id.member, ORCH_TRACE_DEFAULT_CAPACITY, &w.tele.trace) != XDC_OK)
        XDC_WARN(XDC_SUB_ORCH, "no memory for the trace buffer; tracing off");
    const char *what = "layout";
    rc = orch_worker_place(&w, &d);
    if (rc == XDC_OK) what = "device", rc = choose_device(&w, o->device, &d);
    if (rc == XDC_OK) what = "model and data", rc = open_model_and_data(&w, &d);
    if (rc == XDC_OK) rc = orch_worker_connect(&w, &what, &d);
    if (rc == XDC_OK) what = "activation codec", rc = open_pipe_codec(&w, &d);
    if (rc == XDC_OK) what = "comm engine", rc = open_sync(&w, &d);
    if (rc == XDC_OK) what = "metrics", rc = orch_observe_start(&w, &d);
    if (rc == XDC_OK && !w.elastic.rejoin)
        what = "start barrier", rc = rdzv_barrier(w.comm.rdzv, "start", w.id.gsize, w.cfg.timeouts.rendezvous_ms, &d);
    if (rc == XDC_OK) {
        XDC_INFO(XDC_SUB_ORCH, "stage %d/%d (layers %d-%d, %zu params) of replica %d/%d, %s mode, %d threads",
                 w.id.stage, w.id.n_stages, w.id.layer_begin, w.id.layer_end - 1, w.model.n_params, w.id.replica,
                 w.id.n_replicas, orch_mode_name(w.cfg.mode), count_threads());
        what = "training";
        rc = orch_train_run(&w, &d);
        if (rc == XDC_OK) XDC_INFO(XDC_SUB_ORCH, "training done, %d threads", count_threads());
        /* A wait during training ends at the operation timeout (the WAN engine's peer deadline, a store
         * get or barrier); the layer below names whom it waited for, this adds since when and the key. */
        if (rc == XDC_ERR_TIMEOUT) time_out_hint(&d, w.cfg.timeouts.operation_ms);
    }
    orch_observe_finish(&w);
    if (w.tele.trace) {
        char dir[600], path[700];
        xdc_diag td = {{0}};
        snprintf(dir, sizeof dir, "%s/traces", w.id.run_dir);
        if (orch_mkdirs(dir, 0755, &td) != XDC_OK ||
            orch_trace_write_dir(w.tele.trace, dir, path, sizeof path, &td) != XDC_OK)
            XDC_WARN(XDC_SUB_ORCH, "trace not written: %s", td.msg);
    }
    if (rc != XDC_OK) orch_worker_report_failure(&w, what, rc, d.msg);
    orch_worker_close(&w);
    if (rc != XDC_OK) xdc_diag_set(diag, "%s failed: %s", what, d.msg);
    return rc;
}
