/* orch_member.c — a member of a run (orch_member.h): load (the run file, the topology, the identity from
 * the environment contract that `xdc agent` or `xdc launch --exec` set, `plan: auto`), place (the layout),
 * the device (orchestrator/launch/orch_device.h: chosen and checked before any set-up; libxdc: the CPU),
 * the sync configuration, failure reports, the end barrier and teardown. Its connections are in
 * orch_member_connect.c. */
#include "orchestrator/member/orch_member_priv.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "kernels/xdc_kernels.h"
#include "orchestrator/launch/orch_failure.h"
#include "orchestrator/launch/orch_identity.h"
#include "orchestrator/launch/orch_proc.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <stdio.h>
#include <string.h>

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
static xdc_err_t read_identity(orch_member *m, const orch_member_opts *o, xdc_diag *diag)
{
    orch_identity id;
    XDC_CHECK(orch_identity_resolve(NULL, NULL, m->topo, ORCH_ID_REQUIRE_WORKER, &id, diag));
    snprintf(m->id.run_id, sizeof m->id.run_id, "%s", id.run_id);
    snprintf(m->id.region, sizeof m->id.region, "%s", id.region);
    snprintf(m->id.node, sizeof m->id.node, "%s", id.host);
    m->id.region_idx = id.region_index;
    m->id.n_regions = id.num_regions;
    m->id.lrank = id.rank;
    m->id.lsize = id.world_size;
    m->id.local_rank = id.local_rank;
    m->id.grank = id.global_rank;
    m->id.gsize = id.global_world_size;
    if (orch_split_hostport(id.coordinator, m->id.coord_host, sizeof m->id.coord_host, &m->id.coord_port) != 0) {
        xdc_diag_set(diag, "coordinator '%s' (%s) is not host:port", id.coordinator, id.source[ORCH_ID_COORDINATOR]);
        return XDC_ERR_CONFIG;
    }
    snprintf(m->id.member, sizeof m->id.member, "%s/%s:%d", m->id.region, m->id.node, m->id.lrank);
    XDC_CHECK(rdzv_target_resolve(o->rdzv.rdzv, m->cfg.rdzv, m->id.run_id, &m->id.rdzv, diag));
    if (m->id.rdzv.kind == RDZV_BUILTIN) {
        snprintf(m->id.rdzv.host, sizeof m->id.rdzv.host, "%s", m->id.coord_host);
        m->id.rdzv.port = m->id.coord_port;
    }
    rdzv_flags_tls(&o->rdzv, &m->id.rdzv);
    return XDC_OK;
}

/* This stage's layers: the plan's partition when there is one, else an even split. */
static void stage_layers(orch_member *m)
{
    if (m->cfg.n_split == m->id.n_stages) {
        m->id.layer_begin = m->cfg.stage_layer_begin[m->id.stage];
        m->id.layer_end = m->cfg.stage_layer_begin[m->id.stage + 1];
        return;
    }
    orch_stage_layers(m->cfg.train.model.n_layer, m->id.n_stages, m->id.stage, &m->id.layer_begin, &m->id.layer_end);
}

/* The run file, the topology, the identity, the plan (orch_member_create). */
static xdc_err_t load(orch_member *m, const orch_member_opts *o, xdc_diag *diag)
{
    snprintf(m->id.run_dir, sizeof m->id.run_dir, "%s", o->run_dir);
    m->id.emulate_wan = o->emulate_wan;
    m->id.resume = o->resume;
    xdc_cfg_errors errs;
    if (xdc_topology_load(o->topology_path, &m->topo, &errs) != XDC_OK ||
        orch_run_config_load(o->config_path, &m->cfg, &errs) != XDC_OK) {
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
    orch_run_config_scale_timeouts(&m->cfg, m->topo);
    xdc_diag d = {{0}};
    if (read_identity(m, o, &d) != XDC_OK) {
        if (diag) *diag = d;
        return XDC_ERR_CONFIG; /* whatever the cause: the environment contract does not hold */
    }
    if (m->cfg.plan_auto) XDC_CHECK(orch_plan_apply(&m->cfg, m->topo, &m->planned, diag));
    xdc_log_set_identity(m->id.region, m->id.node, m->id.lrank);
    return XDC_OK;
}

xdc_err_t orch_member_create(const orch_member_opts *o, orch_member **out, xdc_diag *diag)
{
    *out = NULL;
    orch_member *m = xdc_calloc(1, sizeof *m);
    if (!m) return XDC_ERR_NOMEM;
    m->opts = *o;
    m->cuda_device = -1;
    xdc_err_t rc = load(m, o, diag);
    if (rc != XDC_OK) {
        orch_member_destroy(m);
        return rc;
    }
    *out = m;
    return XDC_OK;
}

xdc_err_t orch_member_place(orch_member *m, xdc_diag *diag)
{
    const xdc_topology *t = m->topo;
    int r = xdc_topology_region_index(t, m->id.region);
    if (r < 0 || r != m->id.region_idx || t->n_regions != m->id.n_regions) {
        xdc_diag_set(diag, "XDC_REGION=%s / XDC_REGION_INDEX=%d / XDC_NUM_REGIONS=%d do not match %s", m->id.region,
                     m->id.region_idx, m->id.n_regions, t->path);
        return XDC_ERR_CONFIG;
    }
    int workers = xdc_topology_region_workers(t, r);
    m->id.n_stages = m->cfg.pipeline_stages;
    XDC_CHECK(orch_run_config_check_layout(&m->cfg, t, diag));
    if (m->cfg.span_regions) {
        /* One pipeline through every worker of every region, in region order: stage = global rank. */
        m->id.span = 1;
        if (m->id.gsize != xdc_topology_total_workers(t)) {
            xdc_diag_set(diag, "span_regions: XDC_GLOBAL_WORLD_SIZE=%d but topology %s has %d workers", m->id.gsize,
                         t->path, xdc_topology_total_workers(t));
            return XDC_ERR_CONFIG;
        }
        m->id.stage = m->id.grank;
        m->id.replica = m->id.rep_first = 0;
        m->id.n_replicas = m->id.lanes = m->id.replicas_all = m->id.replicas[0] = 1;
        stage_layers(m);
        return XDC_OK;
    }
    /* Every region runs the same stages (checked above); their replica counts may differ (xdc_sync_cfg.lanes). */
    m->id.lanes = m->id.rep_first = m->id.replicas_all = 0;
    for (int o = 0; o < t->n_regions; o++) {
        m->id.replicas[o] = xdc_topology_region_workers(t, o) / m->id.n_stages;
        if (!m->id.lanes || m->id.replicas[o] < m->id.lanes) m->id.lanes = m->id.replicas[o];
        if (o < r) m->id.rep_first += m->id.replicas[o];
        m->id.replicas_all += m->id.replicas[o];
    }
    if (m->id.lsize != workers || m->id.lrank < 0 || m->id.lrank >= workers) {
        xdc_diag_set(diag, "region %s has %d workers (WORLD_SIZE=%d), which %d pipeline stages must divide",
                     m->id.region, workers, m->id.lsize, m->id.n_stages);
        return XDC_ERR_CONFIG;
    }
    m->id.n_replicas = workers / m->id.n_stages;
    m->id.stage = m->id.lrank % m->id.n_stages;
    m->id.replica = m->id.lrank / m->id.n_stages;
    stage_layers(m);
    return XDC_OK;
}

/* The kernel registry's answers for the device checks (orch_device.h), which launch/ may not ask itself. */
static xdc_err_t registry_kernels(orch_device d, xdc_diag *diag)
{
    const xdc_kern_backend *be;
    return xdc_kern_backend_get((xdc_backend_kind)d, &be, diag);
}
static const orch_device_probe registry_probe = {.cuda_devices = xdc_kern_cuda_device_count,
                                                 .kernels = registry_kernels};

const orch_device_probe *orch_member_device_probe(void) { return &registry_probe; }

/* The device (orch_device.h: --device, else XDC_DEVICE, else the topology), checked on this node before
 * anything is set up: a visible GPU, kernels the registry gives; on CUDA, LOCAL_RANK mod the visible GPUs
 * picks the GPU (a Slurm task with --gpus-per-task=1 sees one). One log line names it. */
xdc_err_t orch_member_choose_device(orch_member *m, const char *flag, xdc_diag *diag)
{
    orch_device over;
    const char *from;
    XDC_CHECK(orch_device_override(flag, &over, &from, diag));
    orch_device d = orch_device_of_region(over, m->topo, m->id.region_idx);
    XDC_CHECK(orch_device_check_worker(d, from, m->topo, m->id.region_idx, m->id.node, &registry_probe, diag));
    XDC_CHECK(xdc_kern_backend_get((xdc_backend_kind)d, &m->be, diag));
    m->device = d;
    m->intra = orch_device_uses_nccl(d) ? XDC_INTRA_NCCL : XDC_INTRA_CPU;
    m->cuda_device = d == ORCH_DEVICE_CUDA ? orch_device_cuda_ordinal(m->id.local_rank, xdc_kern_cuda_device_count())
                                           : -1;
    if (m->cuda_device >= 0 && m->be->device->set_device(m->cuda_device) != XDC_OK) {
        /* this thread's: the model stage's memory and kernels land there; other threads bind their own */
        xdc_diag_set(diag, "node %s/%s: cannot bind GPU %d", m->id.region, m->id.node, m->cuda_device);
        return XDC_ERR_CUDA;
    }
    char desc[64];
    orch_device_describe(d, m->cuda_device, desc, sizeof desc);
    XDC_INFO(XDC_SUB_ORCH, "device %s (from %s)", desc, from);
    return XDC_OK;
}

xdc_err_t orch_member_use_host(orch_member *m, xdc_diag *diag)
{
    XDC_CHECK(xdc_kern_backend_get(XDC_BACKEND_CPU, &m->be, diag));
    m->device = ORCH_DEVICE_CPU;
    m->intra = XDC_INTRA_CPU;
    m->cuda_device = -1;
    return XDC_OK;
}

void orch_member_sync_cfg(const orch_member *m, int across_regions, xdc_sync_cfg *out)
{
    *out = (xdc_sync_cfg){.bucket_elems = (size_t)(m->cfg.bucket_mb * 1048576.0 / sizeof(float)),
                          .dp = xdc_intra_size(m->dp) > 1 ? m->dp : NULL,
                          .peers = m->peers,
                          .route = m->route,
                          .n_regions = m->id.n_regions,
                          .my_region = m->id.region_idx,
                          .lanes = m->id.lanes,
                          .codec = m->codec_cfg};
    if (out->bucket_elems == 0) out->bucket_elems = 1;
    if (!across_regions || m->id.span) {
        out->n_regions = 1;
        out->my_region = 0;
        out->peers = NULL;
        out->route = NULL;
    }
}

xdc_err_t orch_member_weigh_regions(const orch_member *m, xdc_sync *s, const int *units, xdc_diag *diag)
{
    float w[XDC_TOPO_MAX_REGIONS];
    int differ = 0;
    for (int r = 0; r < m->id.n_regions; r++) {
        w[r] = (float)units[r]; /* exact: integers far below 2^24 */
        differ |= units[r] != units[0];
    }
    return differ && !m->id.span && m->id.n_regions > 1 ? xdc_sync_set_weights(s, w, diag) : XDC_OK;
}

void orch_member_report_failure(orch_member *m, const char *what, xdc_err_t rc, const char *msg)
{
    XDC_ERROR(XDC_SUB_ORCH, "%s failed: %s: %s", what, xdc_strerror(rc), msg);
    if (!m || !m->rdzv) return;
    char text[900], val[1024];
    snprintf(text, sizeof text, "%s failed: %s: %s", what, xdc_strerror(rc), msg);
    orch_failure_format(rc, text, val, sizeof val);
    xdc_diag ignore;
    rdzv_set(m->rdzv, rdzv_key_failed(m->id.member).s, val, &ignore);
}

xdc_err_t orch_member_end_barrier(orch_member *m, xdc_diag *diag)
{
    XDC_CHECK(rdzv_barrier(m->rdzv, RDZV_BARRIER_DONE, m->id.gsize, m->cfg.timeouts.operation_ms, diag));
    return m->id.grank == 0 ? rdzv_set(m->rdzv, RDZV_KEY_FINISHED, "1", diag) : XDC_OK;
}


void orch_member_disconnect(orch_member *m)
{
    if (!m) return;
    xdc_intra_destroy(m->dp);
    xdc_intra_destroy(m->pp);
    xdc_intra_destroy(m->region_comm);
    m->dp = m->pp = m->region_comm = NULL;
    for (int r = 0; m->peers && r < m->id.n_regions; r++) {
        xdc_wan_peer_close(m->peers[r]);
        m->peers[r] = NULL;
    }
    /* With BYE, as every peer: left to the engine's destroy, the pipeline neighbours' streams would just
     * end, and the other side would log each one as down ("connection closed by the peer"). */
    xdc_wan_peer_close(m->prev_peer);
    xdc_wan_peer_close(m->next_peer);
    xdc_wan_peer_close(m->wrap_peer);
    m->prev_peer = m->next_peer = m->wrap_peer = NULL;
}

void orch_member_destroy(orch_member *m)
{
    if (!m) return;
    orch_member_disconnect(m);
    xdc_sync_engine_destroy(m->sync_eng);
    rdzv_client_destroy(m->rdzv);
    xdc_wan_engine_destroy(m->wan); /* closes the other peers and the listener */
    xdc_free(m->peers);
    xdc_free(m->route);
    xdc_topology_destroy(m->topo);
    xdc_free(m);
}

const orch_member_id *orch_member_identity(const orch_member *m) { return &m->id; }
xdc_topology *orch_member_topology(const orch_member *m) { return m->topo; }
orch_run_config *orch_member_config(orch_member *m) { return &m->cfg; }
orch_planned *orch_member_planned(orch_member *m) { return &m->planned; }
const xdc_kern_backend *orch_member_backend(const orch_member *m) { return m->be; }
rdzv_client *orch_member_rdzv(const orch_member *m) { return m->rdzv; }
xdc_wan_engine *orch_member_wan(const orch_member *m) { return m->wan; }
xdc_wan_listener *orch_member_listener(const orch_member *m) { return m->lis; }
xdc_wan_peer **orch_member_peers(const orch_member *m) { return m->peers; }
xdc_wan_peer *orch_member_prev_peer(const orch_member *m) { return m->prev_peer; }
xdc_wan_peer *orch_member_next_peer(const orch_member *m) { return m->next_peer; }
xdc_wan_peer *orch_member_wrap_peer(const orch_member *m) { return m->wrap_peer; }

int orch_member_span_wrap(const orch_member *m, int *own)
{
    int n = m->id.n_regions, last = xdc_topology_region_workers(m->topo, n - 1);
    *own = 0;
    if (n == 2 && last == 1 && xdc_topology_region_workers(m->topo, 0) == 1) return 1;
    *own = 1;
    return last >= 2 && xdc_topology_link(m->topo, 0, n - 1) != NULL;
}
xdc_intra_comm *orch_member_region_comm(const orch_member *m) { return m->region_comm; }
xdc_intra_comm *orch_member_pp(const orch_member *m) { return m->pp; }
xdc_intra_comm *orch_member_dp(const orch_member *m) { return m->dp; }
xdc_sync_engine *orch_member_sync_engine(const orch_member *m) { return m->sync_eng; }
const xdc_codec_cfg *orch_member_codec(const orch_member *m) { return &m->codec_cfg; }
void orch_member_set_codec(orch_member *m, const xdc_codec_cfg *cc) { m->codec_cfg = *cc; }
