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
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <dirent.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

xdc_err_t orch_model_alloc_boundary(orch_model *m, size_t *bytes)
{
    /* On the device: the stage reads x_in and dy_in there, and the intra communicator reaches all three
     * through the device's comm_view. */
    size_t one = (size_t)m->B * (size_t)m->T * (size_t)m->C * sizeof(float);
    bool first = xdc_gpt_stage_is_first(m->st), last = xdc_gpt_stage_is_last(m->st), ileave = m->chunks > 1;
    float **buf[] = {first && !ileave ? NULL : &m->x_in, last && !ileave ? NULL : &m->dy_in,
                     first || ileave ? NULL : &m->dx_out};
    *bytes = 0;
    for (size_t i = 0; i < sizeof buf / sizeof buf[0]; i++) {
        if (!buf[i]) continue;
        XDC_CHECK(m->be->device->mem_alloc((void **)buf[i], one));
        *bytes += one;
    }
    return XDC_OK;
}

/* This replica's microbatches per step and each region's total (the run file's microbatches_per_replica, else
 * microbatches for each);
 * *unequal when some replica of some region has another count. */
static xdc_err_t replica_microbatches(orch_worker *w, bool *unequal, xdc_diag *diag)
{
    int regions = w->id->span ? 1 : w->id->n_regions, region = w->id->span ? 0 : w->id->region_idx;
    XDC_CHECK(orch_run_config_replica_mb(w->cfg, w->id->replicas, regions, region, w->id->replica, &w->model.M, diag));
    *unequal = false;
    w->model.regions_differ = false;
    for (int r = 0; r < regions; r++) {
        w->model.region_mb[r] = 0;
        for (int i = 0; i < w->id->replicas[r]; i++) {
            int m;
            XDC_CHECK(orch_run_config_replica_mb(w->cfg, w->id->replicas, regions, r, i, &m, diag));
            w->model.region_mb[r] += m;
            *unequal |= m != w->model.M;
        }
        w->model.regions_differ |= w->model.region_mb[r] != w->model.region_mb[0];
    }
    w->model.M_region = w->model.region_mb[region];
    return XDC_OK;
}

/* pipeline_chunks > 1 where the run file allowed it (orch_run_config.c): what the topology decides. A pipeline
 * across regions needs a WAN link for the wrap-around from the last stage to the first. */
static xdc_err_t check_chunks(const orch_worker *w, xdc_diag *diag)
{
    int v = w->cfg->pipeline_chunks;
    if (!w->id->span) return XDC_OK; /* data-parallel replicas sync each chunk's gradients (orch_mode_sync.c) */
    /* Across regions the wrap-around from the last stage to the first crosses the WAN too. */
    int own;
    if (w->id->n_regions > 1 && !orch_member_span_wrap(w->member, &own)) {
        xdc_diag_set(diag,
                     "pipeline_chunks %d across regions needs a WAN link for the chunks' wrap-around from the last "
                     "stage (region %s) to the first (region %s): the topology must link the two, and the last "
                     "region needs 2 workers or more (or both regions one)",
                     v, w->topo->regions[w->id->n_regions - 1].name, w->topo->regions[0].name);
        return XDC_ERR_CONFIG;
    }
    /* The low-rank codec's rule is each cut's (open_link_codec). */
    return XDC_OK;
}

/* The worker's chunks (one, its stage, unless pipeline_chunks > 1), each with the slots its schedule holds
 * at most (xdc_model_shape_interleaved_inflight: 1F1B's bound for one chunk). */
static xdc_err_t open_chunks(orch_worker *w, xdc_diag *diag)
{
    const xdc_train_config *c = &w->cfg->train;
    int v = w->cfg->pipeline_chunks, P = w->id->n_stages, s = w->id->stage;
    if (v > 1) XDC_CHECK(check_chunks(w, diag));
    w->model.chunks = v;
    for (int k = 0; k < v; k++) {
        int slots = xdc_model_shape_interleaved_inflight(P, s, v, w->model.M, k);
        xdc_gpt_stage_config sc = {.model = c->model,
                                   .layer_begin = w->id->layer_begin,
                                   .layer_end = w->id->layer_end,
                                   .batch = c->batch_size,
                                   .seq_len = c->seq_len,
                                   .max_inflight = slots,
                                   /* delayed averaging: the sync holds one arena while backward fills the other */
                                   .grad_buffers = w->cfg->sync.delay_steps ? 2 : 1,
                                   .seed = (uint64_t)c->seed,
                                   .adamw = {(float)c->beta1, (float)c->beta2, (float)c->eps, (float)c->weight_decay}};
        if (v > 1) orch_stage_layers(c->model.n_layer, P * v, s + k * P, &sc.layer_begin, &sc.layer_end);
        XDC_CHECK(xdc_gpt_stage_create(w->model.be->model, &sc, &w->model.chunk[k], diag));
        if (v > 1)
            XDC_INFO(XDC_SUB_ORCH, "chunk %d/%d of stage %d: layers %d-%d, activation slots %d x %zu bytes", k, v, s,
                     sc.layer_begin, sc.layer_end - 1, slots, xdc_gpt_stage_slot_bytes(w->model.chunk[k]));
    }
    w->model.st = w->model.chunk[0];
    return XDC_OK;
}

static xdc_err_t open_model_and_data(orch_worker *w, xdc_diag *diag)
{
    const xdc_train_config *c = &w->cfg->train;
    w->model.be->model->set_threads(w->cfg->threads);
    bool unequal;
    XDC_CHECK(replica_microbatches(w, &unequal, diag));
    double layer_ms;
    XDC_CHECK(orch_run_config_layer_ms(w->cfg, w->id->n_regions, w->id->region_idx, &layer_ms, diag));
    w->model.layer_s = layer_ms / 1e3;
    if (layer_ms > 0)
        XDC_INFO(XDC_SUB_ORCH,
                 "emulated device: a layer's forward takes at least %g ms a microbatch, its backward %g "
                 "(emulate_layer_ms)",
                 layer_ms, 2 * layer_ms);
    double slowdown[XDC_TOPO_MAX_REGIONS];
    XDC_CHECK(orch_run_config_slowdown(w->cfg, w->topo->n_regions, slowdown, diag));
    w->model.slowdown = slowdown[w->id->region_idx];
    XDC_CHECK(open_chunks(w, diag));
    w->model.n_params = xdc_gpt_stage_num_params(w->model.st);
    w->model.B = c->batch_size;
    w->model.T = c->seq_len;
    w->model.C = c->model.n_embd;
    /* Data on the stages that hold the embeddings (the first chunk) or the head (the last). */
    if (xdc_gpt_stage_is_first(w->model.st) || xdc_gpt_stage_is_last(w->model.chunk[w->model.chunks - 1])) {
        /* Every replica of every region reads its own shard; the stages of one replica read the same one.
         * Unequal replicas read their counts' share of each global step (xdc_data.h). */
        int world = w->id->replicas_all;
        int *counts = unequal ? xdc_malloc((size_t)world * sizeof *counts) : NULL, q = 0,
            regions = w->id->span ? 1 : w->id->n_regions;
        if (unequal && !counts) return XDC_ERR_NOMEM;
        for (int r = 0; counts && r < regions; r++) /* region by region */
            for (int i = 0; i < w->id->replicas[r]; i++)
                (void)orch_run_config_replica_mb(w->cfg, w->id->replicas, regions, r, i, &counts[q++],
                                                 NULL); /* checked */
        xdc_data_config dc = {.batch = c->batch_size,
                              .seq_len = c->seq_len,
                              .val_fraction = c->val_fraction,
                              .seed = (uint64_t)c->seed,
                              .rank = w->id->rep_first + w->id->replica,
                              .world = world,
                              .microbatches = counts,
                              .vocab_size = c->model.vocab_size};
        xdc_err_t rc = xdc_data_open(w->cfg->data_path, &dc, &w->model.data, diag);
        xdc_free(counts);
        XDC_CHECK(rc);
        dc.microbatches = NULL;
        dc.rank = 0;
        dc.world = 1;
        XDC_CHECK(xdc_data_open(w->cfg->data_path, &dc, &w->model.val, diag));
    }
    size_t bt = (size_t)w->model.B * (size_t)w->model.T, M = (size_t)w->model.M, boundary;
    w->model.tokens = xdc_malloc(M * bt * sizeof(int32_t));
    w->model.targets = xdc_malloc(M * bt * sizeof(int32_t));
    XDC_CHECK(orch_model_alloc_boundary(&w->model, &boundary));
    XDC_INFO(XDC_SUB_ORCH, "activation memory: slots %d x %zu bytes, pipeline boundary buffers %zu bytes",
             xdc_gpt_stage_slots(w->model.st), xdc_gpt_stage_slot_bytes(w->model.st), boundary);
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

/* The member's connections, with the elastic member client's look between the rendezvous and the
 * barriers: a restarted worker of a running elastic job (orch_rejoin_detect) passes no barrier and dials
 * nobody. */
static xdc_err_t connect(orch_worker *w, const char **what, xdc_diag *diag)
{
    *what = "WAN engine and rendezvous";
    XDC_CHECK(orch_member_open_wan(w->member, diag));
    XDC_CHECK(orch_rejoin_detect(w, diag));
    if (w->elastic.rejoin) orch_member_set_rejoin(w->member, w->elastic.left);
    return orch_member_connect(w->member, what, diag);
}

/* The region of the neighbour across link k of the stage (orch_pipe_link order). */
static int link_region(const orch_worker *w, int k)
{
    int s = w->id->stage, last = w->id->n_stages - 1, region, rank;
    int other = k == ORCH_PIPE_PREV ? s - 1 : k == ORCH_PIPE_NEXT ? s + 1 : s == 0 ? last : 0;
    orch_pipe_locate(w, other, &region, &rank);
    return region;
}

/* Link k's activation codec, named by its cut (orch_run_config_act_codec), and the bound it adds to the wire
 * buffers (they serve every link). The low-rank codec has a context for each direction, with the settings
 * for activations (what flows to the next stage) and for their gradients, and encodes from the host staging. */
static xdc_err_t open_link_codec(orch_worker *w, int k, xdc_diag *diag)
{
    orch_pipe_link *l = &w->pipe.link[k];
    int a = w->id->region_idx, b = link_region(w, k);
    const char *name;
    XDC_CHECK(orch_run_config_act_codec(w->cfg, w->topo, a, b, &name, diag));
    if (w->model.chunks > 1 && xdc_lowrank_named(name)) {
        xdc_diag_set(diag,
                     "pipeline_chunks %d with activation_codec %s on the cut %s - %s is not built: the low-rank codec "
                     "keeps a basis per direction of a link, and the chunks send activations and gradients both ways "
                     "over it",
                     w->model.chunks, name, w->topo->regions[a].name, w->topo->regions[b].name);
        return XDC_ERR_CONFIG;
    }
    XDC_INFO(XDC_SUB_ORCH, "activation codec %s on the cut %s - %s", name, w->topo->regions[a].name,
             w->topo->regions[b].name);
    size_t bound;
    if (xdc_lowrank_named(name)) {
        xdc_lowrank_cfg lc = {.cols = w->model.C, .rows = (size_t)w->model.B * w->model.T}, bc = lc;
        XDC_CHECK(xdc_lowrank_parse(name, &lc, &bc, diag));
        bool fwd = k == ORCH_PIPE_NEXT; /* activations go out to the next stage and come in from the previous */
        XDC_CHECK(xdc_lowrank_create(fwd ? &lc : &bc, &l->tx, diag));
        XDC_CHECK(xdc_lowrank_create(fwd ? &bc : &lc, &l->rx, diag));
        bound = xdc_lowrank_bound(l->tx, lc.rows);
        size_t rb = xdc_lowrank_bound(l->rx, lc.rows);
        if (rb > bound) bound = rb;
        l->codec_kind = ORCH_PIPE_LOWRANK;
        if (!w->pipe.lowrank_host)
            XDC_CHECK(w->model.be->device->host_alloc((void **)&w->pipe.lowrank_host, w->pipe.elems * sizeof(float)));
    } else {
        xdc_codec_cfg cc = XDC_CODEC_CFG_INIT;
        XDC_CHECK(xdc_codec_parse(name, &cc, diag));
        cc.n_elems = w->pipe.elems;
        cc.chunk_elems = w->pipe.elems;
        cc.error_feedback = false;
        cc.zstd_level = 0;        /* latency class: no entropy stage */
        cc.backend = w->model.be; /* it reads and writes the activations in device memory */
        l->codec_kind = cc.kind;
        XDC_CHECK(xdc_codec_create(&cc, &l->enc, diag));
        XDC_CHECK(xdc_codec_create(&cc, &l->dec, diag));
        bound = xdc_codec_bound(l->enc, w->pipe.elems);
    }
    if (bound > w->pipe.bound) w->pipe.bound = bound;
    return XDC_OK;
}

/* Activation codecs for stages that talk across the WAN, one per link (no error feedback: each tensor is used
 * once). */
static xdc_err_t open_pipe_codec(orch_worker *w, xdc_diag *diag)
{
    xdc_wan_peer *peer[ORCH_PIPE_LINKS] = {orch_member_prev_peer(w->member), orch_member_next_peer(w->member),
                                           orch_member_wrap_peer(w->member)};
    if (!peer[ORCH_PIPE_PREV] && !peer[ORCH_PIPE_NEXT] && !peer[ORCH_PIPE_WRAP]) return XDC_OK;
    w->pipe.elems = (size_t)w->model.B * w->model.T * (size_t)w->model.C;
    for (int k = 0; k < ORCH_PIPE_LINKS; k++)
        if ((w->pipe.link[k].peer = peer[k])) XDC_CHECK(open_link_codec(w, k, diag));
    orch_pipe_wire_counts(w->id->n_stages, w->id->stage, w->model.M, orch_member_prev_peer(w->member) != NULL,
                          orch_member_next_peer(w->member) != NULL, w->pipe.wire_n);
    /* Interleaved: each schedule step's transfers complete within it (orch_train.c): one buffer of each kind,
     * whichever of the ring's neighbours is across the WAN. */
    for (int k = 0; w->model.chunks > 1 && k < 4; k++) w->pipe.wire_n[k] = 1;
    size_t n = 0;
    for (int k = 0; k < 4; k++) n += (size_t)w->pipe.wire_n[k];
    XDC_INFO(XDC_SUB_ORCH, "activation wire buffers: %zu x %zu bytes (x %d, dy %d, y %d, dx %d)", n, w->pipe.bound,
             w->pipe.wire_n[0], w->pipe.wire_n[1], w->pipe.wire_n[2], w->pipe.wire_n[3]);
    w->pipe.wire = xdc_malloc(n * w->pipe.bound);
    return w->pipe.wire ? XDC_OK : XDC_ERR_NOMEM;
}

static const orch_mode_ops *mode_ops(orch_mode m)
{
    return m == ORCH_MODE_DILOCO      ? &orch_mode_diloco_ops
           : m == ORCH_MODE_STREAMING ? &orch_mode_streaming_ops
                                      : &orch_mode_sync_ops;
}

/* The comm thread, then the mode's syncs and buffers on it. */
static xdc_err_t open_sync(orch_worker *w, xdc_diag *diag)
{
    XDC_CHECK(orch_member_comm_engine(w->member, diag));
    w->mode = mode_ops(w->cfg->mode);
    return w->mode->setup(w, &w->mode_state, diag);
}

/* Tear down whatever was set up, in the order orch_member.h gives (the mode's syncs through w->mode). */
static void close_worker(orch_worker *w)
{
    /* Teardown order, and why:
     * 1. stop every sync: once xdc_sync_stop returns, the comm thread runs no job of it any more;
     * 2. destroy the intra communicators and close the WAN peers (the pipeline neighbours too): what a
     *    stopped round still has posted fails, and neither transport writes into a sync's buffers after that;
     * 3. destroy the syncs: they are the sync engine's clients (their jobs live in its queue, and a sync
     *    detaches from the engine when destroyed), so the engine must outlive them;
     * 4. destroy the sync engine: this joins the comm thread, whose jobs call into the WAN engine, so it
     *    must end before the WAN engine goes;
     * 5. the rendezvous client, then the WAN engine (it frees the peers and the listener): 4 and 5 are
     *    orch_member_destroy. */
    xdc_sync *syncs[ORCH_MAX_SYNCS];
    int n_syncs = orch_worker_syncs(w, syncs, ORCH_MAX_SYNCS);
    for (int i = 0; i < n_syncs; i++) xdc_sync_stop(syncs[i]);
    xdc_intra_destroy(w->comm.dp_wan);
    orch_rejoin_drain(w); /* a hand-over's sends complete before their peers close */
    orch_member_disconnect(w->member);
    if (w->mode) w->mode->destroy(w->mode_state); /* its syncs, then its buffers */
    orch_member_destroy(w->member);
    for (int k = 0; k < ORCH_PIPE_LINKS; k++) {
        xdc_codec_destroy(w->pipe.link[k].enc);
        xdc_codec_destroy(w->pipe.link[k].dec);
        xdc_lowrank_destroy(w->pipe.link[k].tx);
        xdc_lowrank_destroy(w->pipe.link[k].rx);
    }
    if (w->model.be) w->model.be->device->host_free(w->pipe.lowrank_host);
    for (int k = 0; k < w->model.chunks; k++) xdc_gpt_stage_destroy(w->model.chunk[k]);
    xdc_data_destroy(w->model.data);
    xdc_data_destroy(w->model.val);
    orch_trace_destroy(w->tele.trace);
    if (w->model.be) {
        void *dev_bufs[] = {w->model.x_in, w->model.dy_in, w->model.dx_out, w->pipe.scalars};
        for (size_t i = 0; i < sizeof dev_bufs / sizeof dev_bufs[0]; i++) w->model.be->device->mem_free(dev_bufs[i]);
    }
    void *bufs[] = {w->model.tokens, w->model.targets, w->pipe.wire,  w->pipe.x_req,
                    w->pipe.dy_req,  w->pipe.y_req,    w->pipe.dx_req};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) xdc_free(bufs[i]);
}

/* The member's views (orch_worker.h) and its device, on w. */
static void attach(orch_worker *w, orch_member *m)
{
    w->member = m;
    w->id = orch_member_identity(m);
    w->topo = orch_member_topology(m);
    w->cfg = orch_member_config(m);
    w->planned = orch_member_planned(m);
    w->model.be = orch_member_backend(m);
}

/* The member's options from the worker's. */
static orch_member_opts member_opts(const xdc_worker_opts *o)
{
    return (orch_member_opts){.topology_path = o->topology_path,
                              .config_path = o->config_path,
                              .run_dir = o->run_dir,
                              .emulate_wan = o->emulate_wan,
                              .resume = o->resume,
                              .rdzv = o->rdzv,
                              .creds = o->creds};
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

xdc_err_t xdc_worker_run(const xdc_worker_opts *o, xdc_diag *diag)
{
    orch_worker w = {0};
    w.elastic.started = xdc_now_ns();
    xdc_diag d = {{0}};
    orch_member_opts mo = member_opts(o);
    orch_member *m;
    xdc_err_t rc = orch_member_create(&mo, &m, &d);
    if (rc != XDC_OK) {
        if (diag) *diag = d;
        return rc;
    }
    attach(&w, m);
    if (orch_trace_create(w.id->grank, w.id->member, ORCH_TRACE_DEFAULT_CAPACITY, &w.tele.trace) != XDC_OK)
        XDC_WARN(XDC_SUB_ORCH, "no memory for the trace buffer; tracing off");
    const char *what = "layout";
    rc = orch_member_place(m, &d);
    if (rc == XDC_OK) what = "device", rc = orch_member_choose_device(m, o->device, &d);
    if (rc == XDC_OK) {
        w.model.be = orch_member_backend(m);
        what = "model and data", rc = open_model_and_data(&w, &d);
    }
    if (rc == XDC_OK) rc = connect(&w, &what, &d);
    if (rc == XDC_OK) what = "activation codec", rc = open_pipe_codec(&w, &d);
    if (rc == XDC_OK) what = "comm engine", rc = open_sync(&w, &d);
    if (rc == XDC_OK) what = "metrics", rc = orch_observe_start(&w, &d);
    if (rc == XDC_OK && !w.elastic.rejoin)
        what = "start barrier",
        rc = rdzv_barrier(orch_member_rdzv(m), RDZV_BARRIER_START, w.id->gsize, w.cfg->timeouts.rendezvous_ms, &d);
    if (rc == XDC_OK) {
        XDC_INFO(XDC_SUB_ORCH, "stage %d/%d (layers %d-%d, %zu params) of replica %d/%d, %s mode, %d threads",
                 w.id->stage, w.id->n_stages, w.id->layer_begin, w.id->layer_end - 1, w.model.n_params, w.id->replica,
                 w.id->n_replicas, orch_mode_name(w.cfg->mode), count_threads());
        what = "training";
        rc = orch_train_run(&w, &d);
        if (rc == XDC_OK) XDC_INFO(XDC_SUB_ORCH, "training done, %d threads", count_threads());
        /* A wait during training ends at the operation timeout (the WAN engine's peer deadline, a store
         * get or barrier); the layer below names whom it waited for, this adds since when and the key. */
        if (rc == XDC_ERR_TIMEOUT) time_out_hint(&d, w.cfg->timeouts.operation_ms);
    }
    orch_observe_finish(&w);
    if (w.tele.trace) {
        char dir[600], path[700];
        xdc_diag td = {{0}};
        snprintf(dir, sizeof dir, "%s/traces", w.id->run_dir);
        if (orch_mkdirs(dir, 0755, &td) != XDC_OK ||
            orch_trace_write_dir(w.tele.trace, dir, path, sizeof path, &td) != XDC_OK)
            XDC_WARN(XDC_SUB_ORCH, "trace not written: %s", td.msg);
    }
    if (rc != XDC_OK) orch_member_report_failure(m, what, rc, d.msg);
    close_worker(&w);
    if (rc != XDC_OK) xdc_diag_set(diag, "%s failed: %s", what, d.msg);
    return rc;
}
