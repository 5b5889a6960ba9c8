/* orch_train.c — the worker's training loop: a 1F1B pipeline schedule over M microbatches per step (with
 * pipeline_chunks, Megatron's interleaved 1F1B over the stage's chunks),
 * the hierarchical gradient sync started the moment backward finishes and waited for only before the
 * optimizer needs it (orch_train_inner_step, which every mode's step calls; the modes are in
 * orch_mode_*.c; in an elastic run it also looks whether the worker was stopped), validation through the
 * pipeline, the re-plan check, progress lines and the final report. */
#include "orchestrator/worker/orch_worker.h"

#include "common/xdc_alloc.h"
#include "common/xdc_hash.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"
#include "orchestrator/rdzv/orch_rdzv_keys.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ORCH_PACE_STEPS 10 /* steps between looks at every region's pace (stragglers) */

static double now_s(void) { return (double)xdc_now_ns() / 1e9; }

static int is_first(const orch_worker *w) { return w->id->stage == 0; }
static int is_last(const orch_worker *w) { return w->id->stage == w->id->n_stages - 1; }

void orch_pipe_wire_counts(int stages, int stage, int microbatches, bool prev_wan, bool next_wan, int n[4])
{
    int before = stage > 0 ? xdc_model_shape_1f1b_inflight(stages, stage - 1, microbatches) : 0;
    int own = xdc_model_shape_1f1b_inflight(stages, stage, microbatches);
    n[0] = prev_wan ? before : 0;
    n[1] = next_wan ? own : 0;
    n[2] = next_wan ? own : 0;
    n[3] = prev_wan ? before : 0;
}

/* Encoded-activation buffer k (0 x, 1 dy, 2 y, 3 dx) of microbatch mb: microbatches take the kind's
 * wire_n[k] buffers in turn. NULL where that neighbour is in this region. */
static uint8_t *wire(const orch_worker *w, int k, int mb)
{
    if (!w->pipe.wire || !w->pipe.wire_n[k]) return NULL;
    size_t at = (size_t)(mb % w->pipe.wire_n[k]);
    for (int i = 0; i < k; i++) at += (size_t)w->pipe.wire_n[i];
    return w->pipe.wire + at * w->pipe.bound;
}

/* emulate_layer_ms: the forward (passes 1) or backward (passes 2) of `layers` layers begun at t0 lasts at least
 * passes × layers × the region's layer time; the rest is a sleep, which the caller counts as compute. */
static void compute_floor(const orch_worker *w, double t0, int layers, int passes)
{
    xdc_sleep_s(t0 + passes * layers * w->model.layer_s - now_s());
}

static void trace_span(orch_worker *w, const char *name, uint64_t t0, int mb)
{
    orch_trace_complete(w->tele.trace, ORCH_LANE_COMPUTE, name, "compute", t0, orch_trace_now_us(w->tele.trace) - t0,
                        "microbatch", mb);
}

/* Whether pipeline stage `stage` of this replica is in this worker's region: then transfers with it go
 * over the intra communicator. */
static int intra_neighbour(const orch_worker *w, int stage)
{
    int region, pp_rank;
    orch_pipe_locate(w, stage, &region, &pp_rank);
    return region == w->id->region_idx;
}

/* Post the receive of microbatch mb's input x (from the previous stage) or its output gradient dy (from
 * the next), if that neighbour is over the WAN (`wan`) or in this region (`!wan`).
 *
 * Both land in a buffer of one microbatch (x_in, dy_in), which the schedule never has two microbatches in:
 * an intra receive is posted in the schedule step after the one whose forward (x) or backward (dy) read
 * the buffer's previous microbatch, and that read ran (the stage's calls return synchronised); a WAN
 * receive, posted early, lands in its own wire buffer and is decoded into x_in or dy_in only when the
 * forward or backward waits for it. */
static xdc_err_t recv_x(orch_worker *w, int mb, int wan, xdc_diag *diag)
{
    size_t btc = (size_t)w->model.B * w->model.T * (size_t)w->model.C;
    if (is_first(w) || intra_neighbour(w, w->id->stage - 1) == wan) return XDC_OK;
    return orch_pipe_recv(w, w->id->stage - 1, w->model.x_in, btc, wire(w, 0, mb), &w->pipe.x_req[mb], diag);
}

static xdc_err_t recv_dy(orch_worker *w, int mb, int wan, xdc_diag *diag)
{
    size_t btc = (size_t)w->model.B * w->model.T * (size_t)w->model.C;
    if (is_last(w) || intra_neighbour(w, w->id->stage + 1) == wan) return XDC_OK;
    return orch_pipe_recv(w, w->id->stage + 1, w->model.dy_in, btc, wire(w, 1, mb), &w->pipe.dy_req[mb], diag);
}

static xdc_err_t forward_mb(orch_worker *w, int mb, float *loss_sum, xdc_diag *diag)
{
    size_t bt = (size_t)w->model.B * w->model.T, btc = bt * (size_t)w->model.C;
    /* x_in holds microbatch mb from here until the forward has copied it into the slot (recv_x). */
    if (!is_first(w)) XDC_CHECK(orch_pipe_wait(w, &w->pipe.x_req[mb], diag));
    /* From a WAN neighbour x(mb) is decoded and its wire buffer free for microbatch mb + wire_n[0]. */
    if (w->pipe.wire_n[0] && mb + w->pipe.wire_n[0] < w->model.M) XDC_CHECK(recv_x(w, mb + w->pipe.wire_n[0], 1, diag));
    /* 1F1B frees slot mb % slots with the backward of mb − slots; that microbatch's output may still be
     * on its way out of the slot. */
    int slot = xdc_gpt_stage_slot_of(w->model.st, mb), prev = mb - xdc_gpt_stage_slots(w->model.st);
    if (!is_last(w) && prev >= 0) XDC_CHECK(orch_pipe_wait(w, &w->pipe.y_req[prev], diag));
    const float *y = NULL;
    float loss = 0;
    double t0 = now_s();
    uint64_t u0 = orch_trace_now_us(w->tele.trace);
    XDC_CHECK(xdc_gpt_stage_forward(w->model.st, slot, w->model.tokens + mb * bt, w->model.x_in,
                                    w->model.targets + mb * bt, is_last(w) ? NULL : &y, &loss));
    compute_floor(w, t0, w->id->layer_end - w->id->layer_begin, 1);
    w->prog.t_compute += now_s() - t0;
    trace_span(w, "forward", u0, mb);
    if (is_last(w)) *loss_sum += loss;
    /* y stays valid in the slot until its next forward, which first waits for this send. */
    if (!is_last(w)) XDC_CHECK(orch_pipe_send(w, w->id->stage + 1, y, btc, wire(w, 2, mb), &w->pipe.y_req[mb], diag));
    return XDC_OK;
}

static void on_grads_ready(void *ctx, size_t from) { xdc_sync_mark_ready(ctx, from); }

static xdc_err_t backward_mb(orch_worker *w, int mb, xdc_sync *sync, xdc_diag *diag)
{
    size_t btc = (size_t)w->model.B * w->model.T * (size_t)w->model.C;
    if (!is_last(w)) XDC_CHECK(orch_pipe_wait(w, &w->pipe.dy_req[mb], diag));
    if (w->pipe.wire_n[1] && mb + w->pipe.wire_n[1] < w->model.M)
        XDC_CHECK(recv_dy(w, mb + w->pipe.wire_n[1], 1, diag));
    if (sync && mb == w->model.M - 1) {
        /* The last microbatch: each layer's gradients are final as its backward ends, and its buckets
         * start crossing the WAN while the earlier layers are still computing. */
        XDC_CHECK(xdc_sync_begin(sync, xdc_gpt_stage_grads(w->model.st)));
        xdc_gpt_stage_arm_grad_ready(w->model.st, on_grads_ready, sync);
    }
    const float *dx = NULL;
    double t0 = now_s();
    uint64_t u0 = orch_trace_now_us(w->tele.trace);
    XDC_CHECK(xdc_gpt_stage_backward(w->model.st, xdc_gpt_stage_slot_of(w->model.st, mb), w->model.dy_in,
                                     1.0f / (float)w->model.M, is_first(w) ? NULL : &dx));
    compute_floor(w, t0, w->id->layer_end - w->id->layer_begin, 2);
    w->prog.t_compute += now_s() - t0;
    trace_span(w, "backward", u0, mb);
    if (is_first(w)) return XDC_OK;
    /* dx lives only until the next backward; the send reads the copy in dx_out once it ran. dx_out holds
     * one microbatch: an intra send reads it until it completes, so the previous one must be done. Its
     * receive is posted already (in steady state in the group that sent us x of microbatch mb + warm-up,
     * in cool-down once the previous stage's backward of mb − 2 had our dx), so this waits for no later
     * posting. A WAN send encoded it before returning, into the wire buffer of mb − wire_n[3], whose
     * send must be done: the previous stage posted its receive already (it ran the backward of mb −
     * wire_n[3] before the forward of mb that sent us x(mb), and posts dy(j + wire_n[3]) as it decodes
     * dy(j)), so only the network holds it up. */
    int reuse = intra_neighbour(w, w->id->stage - 1) ? 1 : w->pipe.wire_n[3];
    if (mb >= reuse) XDC_CHECK(orch_pipe_wait(w, &w->pipe.dx_req[mb - reuse], diag));
    const xdc_device_ops *dev = w->model.be->device;
    xdc_stream *cs = xdc_gpt_stage_stream(w->model.st);
    XDC_CHECK(dev->copy_d2d(w->model.dx_out, dx, btc * sizeof(float), cs));
    XDC_CHECK(dev->stream_sync(cs));
    return orch_pipe_send(w, w->id->stage - 1, w->model.dx_out, btc, wire(w, 3, mb), &w->pipe.dx_req[mb], diag);
}

/* Close the schedule step's group: its intra sends and receives are issued together. */
static xdc_err_t group_end(orch_worker *w, xdc_err_t rc, xdc_diag *diag)
{
    xdc_err_t e = xdc_intra_group_end(orch_member_pp(w->member));
    if (rc == XDC_OK && e != XDC_OK)
        xdc_diag_set(diag, "pipeline transfer: issuing a schedule step's group: %s",
                     xdc_intra_error(orch_member_pp(w->member)));
    return rc != XDC_OK ? rc : e;
}

/* The run file's diloco.slowdown (any mode): a region of slowdown s pays (s − 1) times the pass's compute since
 * c0 again, as a sleep counted as compute (it stands for a slower device). It comes before the last gradient
 * bucket is marked ready, so the buckets already on the wire overlap it as they would a slower backward. */
static void slow_down(orch_worker *w, double c0)
{
    double extra = (w->model.slowdown - 1.0) * (w->prog.t_compute - c0);
    if (extra <= 0) return;
    xdc_sleep_s(extra);
    w->prog.t_compute += extra;
}

/* Interleaved 1F1B (pipeline_chunks v > 1). Neighbours in the ring of stages: the next stage takes this one's
 * outputs (the last stage's go to the first, into its next chunk), the previous sends inputs. */
static int ring_next(const orch_worker *w) { return (w->id->stage + 1) % w->id->n_stages; }
static int ring_prev(const orch_worker *w) { return (w->id->stage + w->id->n_stages - 1) % w->id->n_stages; }

/* One schedule step's transfers, one group waited for before the next compute, as Megatron's interleaved
 * schedule does (send_forward_backward_recv_forward_backward): send y (the step's forward output) to the
 * next stage and dx (its backward's input gradient) to the previous one, receive into x_in from the previous
 * and into dy_in from the next. In this order on every stage, a pair of stages that exchange two messages
 * each way (P = 2) matches them as sent, y with x and dx with dy, on the intra communicator and on the one
 * in-order WAN stream of a span over 2 regions alike (encoded through one wire buffer of each kind).
 * Completing each group before the next lets y and dx go straight from the chunk's slot and scratch, and
 * keeps one microbatch at most in x_in and in dy_in: a received input waits there until its forward, and the
 * steps never post a receive into a buffer still held (tests/model/test_ileave_order.c checks the steps of
 * every stage together; tests/e2e/test_ileave.c runs them under NCCL semantics). */
static xdc_err_t ileave_transfers(orch_worker *w, const float *y, const float *dx, bool recv_x, bool recv_dy,
                                  xdc_diag *diag)
{
    size_t btc = (size_t)w->model.B * w->model.T * (size_t)w->model.C;
    orch_pipe_req r[4];
    int n = 0;
    if (!y && !dx && !recv_x && !recv_dy) return XDC_OK;
    XDC_CHECK(xdc_intra_group_start(orch_member_pp(w->member)));
    xdc_err_t st = XDC_OK;
    if (y) st = orch_pipe_send(w, ring_next(w), y, btc, wire(w, 2, 0), &r[n++], diag);
    if (st == XDC_OK && dx) st = orch_pipe_send(w, ring_prev(w), dx, btc, wire(w, 3, 0), &r[n++], diag);
    if (st == XDC_OK && recv_x) st = orch_pipe_recv(w, ring_prev(w), w->model.x_in, btc, wire(w, 0, 0), &r[n++], diag);
    if (st == XDC_OK && recv_dy)
        st = orch_pipe_recv(w, ring_next(w), w->model.dy_in, btc, wire(w, 1, 0), &r[n++], diag);
    XDC_CHECK(group_end(w, st, diag));
    for (int i = 0; i < n; i++) XDC_CHECK(orch_pipe_wait(w, &r[i], diag));
    return XDC_OK;
}

/* Forward number k of the interleaved order; *y: its output for the next virtual stage (NULL after the
 * model's last chunk, which adds its microbatch's loss to *loss_sum). */
/* Layers of this stage's chunk c: part s + c·P of the P·v-way split (emulate_layer_ms times each chunk by them). */
static int chunk_layers(const orch_worker *w, int c)
{
    int b, e, P = w->id->n_stages;
    orch_stage_layers(w->cfg->train.model.n_layer, P * w->model.chunks, w->id->stage + c * P, &b, &e);
    return e - b;
}

static xdc_err_t ileave_forward(orch_worker *w, int k, float *loss_sum, const float **y)
{
    size_t bt = (size_t)w->model.B * w->model.T;
    int c, mb;
    xdc_model_shape_interleaved_op(w->id->n_stages, w->model.chunks, k, 1, &c, &mb);
    xdc_gpt_stage *st = w->model.chunk[c];
    bool last = xdc_gpt_stage_is_last(st);
    float loss = 0;
    double t0 = now_s();
    uint64_t u0 = orch_trace_now_us(w->tele.trace);
    *y = NULL;
    XDC_CHECK(xdc_gpt_stage_forward(st, xdc_gpt_stage_slot_of(st, mb), w->model.tokens + mb * bt, w->model.x_in,
                                    w->model.targets + mb * bt, last ? NULL : y, &loss));
    compute_floor(w, t0, chunk_layers(w, c), 1);
    w->prog.t_compute += now_s() - t0;
    trace_span(w, "forward", u0, mb);
    if (last) *loss_sum += loss;
    return XDC_OK;
}

/* Backward number k; *dx: its input gradient for the previous virtual stage (NULL at the model's first chunk).
 * With `sync`, a chunk's last microbatch starts that chunk's gradient sync (w->model.chunk_sync), layer by
 * layer as the backward finishes them, as the non-interleaved pass does for its one arena. */
static xdc_err_t ileave_backward(orch_worker *w, int k, bool sync, const float **dx)
{
    int c, mb;
    xdc_model_shape_interleaved_op(w->id->n_stages, w->model.chunks, k, 0, &c, &mb);
    xdc_gpt_stage *st = w->model.chunk[c];
    if (sync && mb == w->model.M - 1) {
        XDC_CHECK(xdc_sync_begin(w->model.chunk_sync[c], xdc_gpt_stage_grads(st)));
        xdc_gpt_stage_arm_grad_ready(st, on_grads_ready, w->model.chunk_sync[c]);
    }
    double t0 = now_s();
    uint64_t u0 = orch_trace_now_us(w->tele.trace);
    *dx = NULL;
    XDC_CHECK(xdc_gpt_stage_backward(st, xdc_gpt_stage_slot_of(st, mb), w->model.dy_in, 1.0f / (float)w->model.M,
                                     xdc_gpt_stage_is_first(st) ? NULL : dx));
    compute_floor(w, t0, chunk_layers(w, c), 2);
    w->prog.t_compute += now_s() - t0;
    trace_span(w, "backward", u0, mb);
    if (sync && mb == w->model.M - 1) xdc_sync_mark_ready(w->model.chunk_sync[c], 0); /* the whole arena */
    return XDC_OK;
}

/* Megatron-LM's interleaved 1F1B over M·v microbatch-chunks (Narayanan et al. 2021), step by step as
 * xdc_model_shape_interleaved_step gives them: warm-up forwards, then one forward and one backward per step,
 * then the cool-down's backwards, each step's transfers after its compute; the caller waits for the chunks'
 * gradient syncs. */
static xdc_err_t ileave_pass(orch_worker *w, xdc_sync *sync, float *loss_sum, xdc_diag *diag)
{
    int M = w->model.M, P = w->id->n_stages, s = w->id->stage, v = w->model.chunks;
    int n = xdc_model_shape_interleaved_steps(P, s, v, M);
    for (int i = 0; i < n; i++) {
        xdc_ileave_step op;
        const float *y = NULL, *dx = NULL;
        xdc_model_shape_interleaved_step(P, s, v, M, i, &op);
        if (op.forward >= 0) XDC_CHECK(ileave_forward(w, op.forward, loss_sum, &y));
        if (op.backward >= 0) XDC_CHECK(ileave_backward(w, op.backward, sync != NULL, &dx));
        XDC_CHECK(ileave_transfers(w, y, dx, op.recv_x, op.recv_dy, diag));
    }
    return XDC_OK;
}

/* One pipeline pass of M microbatches with gradients accumulated; the gradient sync of `sync` (NULL: none)
 * starts during the last microbatch's backward, layer by layer. *loss = mean loss over the microbatches
 * (last stage only).
 *
 * Transfers follow Megatron's non-interleaved 1F1B: each schedule step's intra sends and receives are one
 * group (recv x | forward, send y | forward, send y + recv dy | backward, send dx + recv next x), so the
 * step also works where the communicator's operations run in start order, as on NCCL (docs/intra.md).
 * Receives from a WAN neighbour are posted ahead instead, a window of wire_n of them from the start of the
 * step, each decode posting the next: a WAN stream waits for a message's receive to be posted
 * (docs/wan.md), and the sender is never further ahead than the window (docs/runtime.md). */
xdc_err_t orch_train_pass(orch_worker *w, xdc_sync *sync, float *loss, xdc_diag *diag)
{
    double c0 = w->prog.t_compute;
    size_t bt = (size_t)w->model.B * w->model.T;
    int M = w->model.M, P = w->id->n_stages, s = w->id->stage;
    xdc_intra_comm *pp = orch_member_pp(w->member);
    for (int k = 0; k < w->model.chunks; k++) xdc_gpt_stage_zero_grad(w->model.chunk[k]);
    if (w->model.data)
        for (int mb = 0; mb < M; mb++)
            XDC_CHECK(xdc_data_next_train(w->model.data, w->model.tokens + mb * bt, w->model.targets + mb * bt));
    float loss_sum = 0;
    if (w->model.chunks > 1) {
        XDC_CHECK(ileave_pass(w, sync, &loss_sum, diag));
        slow_down(w, c0);
        for (int k = 0; sync && k < w->model.chunks; k++)
            XDC_CHECK(orch_train_wait_sync(w, w->model.chunk_sync[k], diag));
        *loss = loss_sum / (float)M;
        return XDC_OK;
    }
    /* The first wire_n receives from a WAN neighbour; each decode posts the next (forward_mb, backward_mb). */
    for (int mb = 0; mb < w->pipe.wire_n[0]; mb++) XDC_CHECK(recv_x(w, mb, 1, diag));
    for (int mb = 0; mb < w->pipe.wire_n[1]; mb++) XDC_CHECK(recv_dy(w, mb, 1, diag));
    int warm = P - s - 1 < M ? P - s - 1 : M, f = 0, b = 0;
    xdc_err_t st;
    for (; f < warm; f++) {
        XDC_CHECK(xdc_intra_group_start(pp));
        XDC_CHECK(group_end(w, recv_x(w, f, 0, diag), diag));
        XDC_CHECK(xdc_intra_group_start(pp));
        XDC_CHECK(group_end(w, forward_mb(w, f, &loss_sum, diag), diag));
    }
    if (f < M) {
        XDC_CHECK(xdc_intra_group_start(pp));
        XDC_CHECK(group_end(w, recv_x(w, f, 0, diag), diag));
    }
    for (; f < M; f++, b++) {
        XDC_CHECK(xdc_intra_group_start(pp));
        st = forward_mb(w, f, &loss_sum, diag);
        if (st == XDC_OK) st = recv_dy(w, b, 0, diag);
        XDC_CHECK(group_end(w, st, diag));
        XDC_CHECK(xdc_intra_group_start(pp));
        st = backward_mb(w, b, sync, diag);
        if (st == XDC_OK && f + 1 < M) st = recv_x(w, f + 1, 0, diag);
        XDC_CHECK(group_end(w, st, diag));
    }
    for (; b < M; b++) {
        XDC_CHECK(xdc_intra_group_start(pp));
        XDC_CHECK(group_end(w, recv_dy(w, b, 0, diag), diag));
        XDC_CHECK(xdc_intra_group_start(pp));
        XDC_CHECK(group_end(w, backward_mb(w, b, sync, diag), diag));
    }
    slow_down(w, c0);
    if (sync) xdc_sync_mark_ready(sync, 0);
    /* Sends must land before their buffers are reused next step; this overlaps the gradient sync. */
    for (int mb = 0; mb < M; mb++) {
        XDC_CHECK(orch_pipe_wait(w, &w->pipe.y_req[mb], diag));
        XDC_CHECK(orch_pipe_wait(w, &w->pipe.dx_req[mb], diag));
    }
    *loss = loss_sum / (float)M;
    return sync ? orch_train_wait_sync(w, sync, diag) : XDC_OK;
}

xdc_err_t orch_train_update(orch_worker *w, float *loss, int64_t lr_step, xdc_diag *diag)
{
    double sumsq = 0;
    for (int k = 0; k < w->model.chunks; k++) XDC_CHECK(xdc_gpt_stage_grad_sumsq(w->model.chunk[k], &sumsq));
    float v[2] = {(float)sumsq, *loss};
    XDC_CHECK(orch_pipe_allreduce_sum(w, v, 2, diag));
    *loss = v[1];
    const xdc_train_config *c = &w->cfg->train;
    xdc_lr_schedule sch = {(float)c->lr, (float)c->min_lr_frac, c->warmup_steps, c->steps};
    double t0 = now_s();
    for (int k = 0; k < w->model.chunks; k++)
        XDC_CHECK(xdc_gpt_stage_optimizer_step(w->model.chunk[k], xdc_lr_at(&sch, (int)lr_step),
                                               xdc_gpt_clip_scale(v[0], (float)c->grad_clip)));
    w->prog.t_compute += now_s() - t0;
    return XDC_OK;
}

/* Train while waiting: a round whose regions arrive together is decided within a tick of the host's, so a member
 * trains while it waits once the decision took twice its usual inner step, and not before TRAIN_WAITING_AFTER_S. */
#define TRAIN_WAITING_AFTER_S 0.2

xdc_err_t orch_train_inner_step(orch_worker *w, xdc_sync *grad_sync, float *loss, xdc_diag *diag)
{
    if (w->elastic.take && !orch_rejoin_trains(w)) return orch_rejoin_pass(w, loss); /* its state on its way */
    XDC_CHECK(orch_train_pass(w, grad_sync, loss, diag));
    XDC_CHECK(orch_train_update(w, loss, w->prog.step, diag));
    w->prog.step++;
    if (w->elastic.take) w->elastic.m.taking_ran++; /* from its snapshot, said in its arrivals */
    XDC_CHECK(orch_elastic_look(w, &w->elastic.inner_end_ns, &w->elastic.inner_gap_s, diag)); /* stopped meanwhile? */
    if (w->elastic.m.busy) w->elastic.m.busy_after_s = fmax(TRAIN_WAITING_AFTER_S, 2 * w->elastic.inner_gap_s);
    return XDC_OK;
}

/* One inner step while the round's decision is not in (orch_elastic_member's busy; ctx: the worker). The run's step
 * stays the round's: the step's learning rate is its last inner step's. */
static xdc_err_t train_waiting(void *ctx, xdc_diag *diag)
{
    orch_worker *w = ctx;
    double t0 = now_s();
    float loss;
    XDC_CHECK(orch_train_pass(w, w->elastic.waiting_grad, &loss, diag));
    XDC_CHECK(orch_train_update(w, &loss, w->prog.step - 1, diag));
    w->elastic.waiting_run++;
    w->elastic.waiting_s += now_s() - t0;
    return orch_elastic_look(w, &w->elastic.inner_end_ns, &w->elastic.inner_gap_s, diag); /* stopped meanwhile? */
}

void orch_train_while_waiting(orch_worker *w, xdc_sync *grad)
{
    if (!w->elastic.m.ran) return;
    w->elastic.waiting_grad = grad;
    w->elastic.m.busy = train_waiting; /* one worker a region (xdc launch refuses more) */
    w->elastic.m.busy_ctx = w;
    w->elastic.m.busy_after_s = TRAIN_WAITING_AFTER_S; /* until its first inner step says its pace */
}

xdc_err_t orch_train_eval(orch_worker *w, double *loss, xdc_diag *diag)
{
    size_t bt = (size_t)w->model.B * w->model.T, btc = bt * (size_t)w->model.C;
    int n = w->cfg->train.eval_batches;
    if (w->model.val && n > xdc_data_val_batches(w->model.val)) n = xdc_data_val_batches(w->model.val);
    /* Only the first and last stage hold data; agree on the batch count through the pipeline. */
    float cnt[1] = {w->model.val && is_first(w) ? (float)n : 0};
    XDC_CHECK(orch_pipe_allreduce_sum(w, cnt, 1, diag));
    n = (int)cnt[0];
    float sum = 0;
    for (int i = 0; i < n; i++) {
        orch_pipe_req req;
        if (w->model.val) XDC_CHECK(xdc_data_val_batch(w->model.val, i, w->model.tokens, w->model.targets));
        /* Through the chunks in the model's order: chunk k takes its input from the previous stage (the
         * last stage's chunk k − 1 for the first stage) and hands its output on around the ring. */
        for (int k = 0; k < w->model.chunks; k++) {
            xdc_gpt_stage *st = w->model.chunk[k];
            bool first = xdc_gpt_stage_is_first(st), last = xdc_gpt_stage_is_last(st);
            if (!first) {
                XDC_CHECK(orch_pipe_recv(w, ring_prev(w), w->model.x_in, btc, wire(w, 0, 0), &req, diag));
                XDC_CHECK(orch_pipe_wait(w, &req, diag));
            }
            const float *y = NULL;
            float l = 0;
            /* Evaluation is the device computing, like a training step's passes: it counts as compute, so the
             * run's compute utilisation says how long the device waited, not how often it evaluated. */
            double t0 = now_s();
            uint64_t u0 = orch_trace_now_us(w->tele.trace);
            XDC_CHECK(
                xdc_gpt_stage_forward(st, 0, w->model.tokens, w->model.x_in, w->model.targets, last ? NULL : &y, &l));
            w->prog.t_compute += now_s() - t0;
            trace_span(w, "eval forward", u0, i);
            if (!last) {
                XDC_CHECK(orch_pipe_send(w, ring_next(w), y, btc, wire(w, 2, 0), &req, diag));
                XDC_CHECK(orch_pipe_wait(w, &req, diag));
            }
            sum += l;
        }
    }
    float v[1] = {is_last(w) ? sum : 0};
    XDC_CHECK(orch_pipe_allreduce_sum(w, v, 1, diag));
    *loss = n ? v[0] / (float)n : 0;
    return XDC_OK;
}

/* params_xxh64 over every chunk in the model's order: each continues the hash state of the one before, on the
 * previous stage (the last stage's previous chunk for the first stage). */
static xdc_err_t hash_params(orch_worker *w, uint64_t *out, xdc_diag *diag)
{
    float blob[XDC_HASH_STATE_BYTES / sizeof(float)]; /* the hash state as bytes */
    xdc_hash_state *h = xdc_hash64_create(0);
    if (!h) return XDC_ERR_NOMEM;
    xdc_err_t rc = XDC_OK;
    orch_pipe_req req;
    int n = (int)(XDC_HASH_STATE_BYTES / sizeof(float)), below = ring_prev(w), above = ring_next(w);
    for (int k = 0; rc == XDC_OK && k < w->model.chunks; k++) {
        xdc_gpt_stage *st = w->model.chunk[k];
        if (!xdc_gpt_stage_is_first(st)) {
            rc = orch_pipe_recv_small(w, below, blob, n, 0, &req, diag);
            if (rc == XDC_OK) rc = orch_pipe_wait_small(w, below, blob, n, 0, &req, diag);
            if (rc == XDC_OK) xdc_hash64_import(h, blob);
        }
        if (rc == XDC_OK) rc = xdc_gpt_stage_hash_update(st, h);
        if (rc == XDC_OK && !xdc_gpt_stage_is_last(st)) {
            xdc_hash64_export(h, blob);
            rc = orch_pipe_send_small(w, above, blob, n, 1, &req, diag);
            if (rc == XDC_OK) rc = orch_pipe_wait_small(w, above, NULL, n, 1, &req, diag);
        }
    }
    *out = xdc_hash64_digest(h);
    xdc_hash64_destroy(h);
    return rc;
}

/* Raw fp32 parameter arena of chunk k of this stage, for tests that compare runs element by element: file
 * params-stage-S.f32 with S its virtual stage (the stage itself with one chunk). */
static xdc_err_t dump_params(orch_worker *w, int k, xdc_diag *diag)
{
    char path[700];
    int vs = w->id->stage + k * w->id->n_stages;
    xdc_gpt_stage *st = w->model.chunk[k];
    size_t np = xdc_gpt_stage_num_params(st);
    snprintf(path, sizeof path, "%s/params-stage-%d.f32", w->id->run_dir, vs);
    /* The arena is device memory: download it first. */
    const xdc_device_ops *dev = w->model.be->device;
    xdc_stream *cs = xdc_gpt_stage_stream(st);
    float *host = xdc_malloc(np * sizeof(float));
    if (!host) return XDC_ERR_NOMEM;
    xdc_err_t rc = dev->copy_d2h(host, xdc_gpt_stage_params(st), np * sizeof(float), cs);
    if (rc == XDC_OK) rc = dev->stream_sync(cs);
    if (rc != XDC_OK) {
        xdc_free(host);
        xdc_diag_set(diag, "downloading the parameters of stage %d for %s", vs, path);
        return rc;
    }
    FILE *f = fopen(path, "wb");
    size_t n = f ? fwrite(host, sizeof(float), np, f) : 0;
    if (f) fclose(f);
    xdc_free(host);
    if (n != np) {
        xdc_diag_set(diag, "cannot write %s", path);
        return XDC_ERR_IO;
    }
    return XDC_OK;
}

/* This worker's WAN bytes: *tx sent (relayed shards included), *raw the fp32 they stand for, and *relay (NULL:
 * not wanted) the part of *tx that was other regions' shards it forwarded (xdc_sync_cfg.route). */
static void wan_totals(orch_worker *w, uint64_t *tx, uint64_t *raw, uint64_t *relay)
{
    *tx = w->pipe.tx_bytes;
    *raw = w->pipe.raw_bytes;
    if (relay) *relay = 0;
    xdc_sync *syncs[ORCH_MAX_SYNCS];
    int n = orch_worker_syncs(w, syncs, ORCH_MAX_SYNCS);
    for (int i = 0; i < n; i++) {
        xdc_sync_stats st;
        xdc_sync_get_stats(syncs[i], &st);
        *tx += st.wan_tx_bytes;
        *raw += st.wan_raw_bytes;
        if (relay) *relay += st.wan_relay_bytes;
    }
}

static int reporter(const orch_worker *w) { return w->id->region_idx == 0 && w->id->lrank == 0; }

/* The slowest incoming link of this worker over the last re-plan window, as measured against the
 * topology: *ratio = goodput / planned bandwidth of the link with the lowest ratio, *gbps its goodput
 * (bytes received / seconds they were arriving, xdc_wan_stats.rx_busy_seconds), *planned its planned
 * bandwidth; *ratio = 0 when no link delivered anything in the window (DiLoCo between outer rounds). */
static void slowest_link(orch_worker *w, double *ratio, double *gbps, double *planned)
{
    *ratio = *gbps = *planned = 0;
    for (int r = 0; r < w->id->n_regions; r++) {
        if (r == w->id->region_idx || !orch_member_peers(w->member) || !orch_member_peers(w->member)[r]) continue;
        xdc_wan_stats st;
        xdc_wan_peer_stats(orch_member_peers(w->member)[r], &st);
        double bytes = (double)(st.rx_payload_bytes - w->replan_rx0[r]), secs = st.rx_busy_seconds - w->replan_busy0[r];
        w->replan_rx0[r] = st.rx_payload_bytes;
        w->replan_busy0[r] = st.rx_busy_seconds;
        const xdc_link *l = xdc_topology_link(w->topo, r, w->id->region_idx);
        if (!(bytes > 0 && secs > 0 && l && l->bandwidth_gbps > 0)) continue;
        double g = bytes * 8 / secs / 1e9, q = g / l->bandwidth_gbps;
        if (*ratio == 0 || q < *ratio) *ratio = q, *gbps = g, *planned = l->bandwidth_gbps;
    }
}

/* Re-plan the WAN side when a link is measured far below the plan: every region's rank 0 measures the
 * links into it over the last window (slowest_link) and posts the result as replan/link/<region> (one
 * key per region, overwritten: the store holds a bounded number of keys); region 0's rank 0 takes the
 * slowest of its own and the latest each region posted (this check's, or the previous one's when that
 * region has not reached this step yet) and, when it moves less than half its planned bandwidth,
 * asks the planner for the codec and period that fit that rate. Only a slow link counts: the measure can
 * read fast (bytes that had arrived before their receive was posted read in no time), never slow, so a
 * late peer's compute never looks like a slow link. The decision goes through the rendezvous as
 * replan/<step> so every worker of every region switches at the same step. */
static xdc_err_t replan(orch_worker *w, xdc_diag *diag)
{
    xdc_sync *sync = w->mode->replan_sync(w->mode_state);
    if (!sync) return XDC_OK;
    char val[256];
    double ratio = 0, measured = 0, planned = 0;
    if (w->id->lrank == 0) slowest_link(w, &ratio, &measured, &planned);
    if (w->id->lrank == 0 && !reporter(w)) {
        snprintf(val, sizeof val, "%.9g %.9g %.9g", ratio, measured, planned);
        XDC_CHECK(rdzv_set(orch_member_rdzv(w->member), rdzv_key_replan_link(w->id->region_idx).s, val, diag));
    }
    rdzv_key key = rdzv_key_replan((long long)w->prog.step);
    if (reporter(w)) {
        for (int r = 1; r < w->id->n_regions; r++) {
            char rv[128];
            double q, g, p;
            XDC_CHECK(rdzv_get(orch_member_rdzv(w->member), rdzv_key_replan_link(r).s, w->cfg->timeouts.operation_ms,
                               rv, sizeof rv, diag));
            if (sscanf(rv, "%lf %lf %lf", &q, &g, &p) == 3 && q > 0 && (ratio == 0 || q < ratio))
                ratio = q, measured = g, planned = p;
        }
        XDC_INFO(XDC_SUB_ORCH, "re-plan check at step %lld: slowest link moved %.4f Gbit/s of %.4f planned (x%.2f)",
                 (long long)w->prog.step, measured, planned, ratio);
        snprintf(val, sizeof val, "-");
        if (ratio > 0 && ratio < 0.5) {
            xdc_plan next;
            xdc_diag pd = {{0}};
            if (xdc_plan_replan_wan(w->topo, &w->planned->m, &w->planned->b, &w->planned->o, &w->planned->plan,
                                    measured, &next, &pd) == XDC_OK &&
                (strcmp(next.codec, w->planned->plan.codec) != 0 || next.inner_steps != w->planned->plan.inner_steps))
                snprintf(val, sizeof val, "%s %d %.4f %.4f", next.codec, next.inner_steps, measured, planned);
        }
        XDC_CHECK(rdzv_set(orch_member_rdzv(w->member), key.s, val, diag));
    } else {
        XDC_CHECK(rdzv_get(orch_member_rdzv(w->member), key.s, w->cfg->timeouts.operation_ms, val, sizeof val, diag));
    }
    char codec[32];
    int period;
    if (sscanf(val, "%31s %d %lf %lf", codec, &period, &measured, &planned) != 4) return XDC_OK;
    XDC_INFO(XDC_SUB_ORCH,
             "re-plan at step %lld: measured WAN goodput %.3f Gbit/s against %.3f planned: codec %s -> %s, "
             "period %d -> %d",
             (long long)w->prog.step, measured, planned, w->planned->plan.codec, codec, w->cfg->diloco.inner_steps,
             period > 0 ? period : w->cfg->diloco.inner_steps);
    if (reporter(w))
        printf("step %5lld  re-plan: goodput %.3f Gbit/s vs %.3f planned: codec %s -> %s\n", (long long)w->prog.step,
               measured, planned, w->planned->plan.codec, codec);
    return orch_train_switch_wan(w, codec, period, diag);
}

void orch_pace_slowdowns(const double *pace, int n, double *slowdown)
{
    for (int r = 0; r < n; r++) {
        double others[XDC_TOPO_MAX_REGIONS];
        int k = 0;
        for (int q = 0; q < n && q < XDC_TOPO_MAX_REGIONS; q++)
            if (q != r && pace[q] > 0) {
                int i = k++;
                for (; i > 0 && others[i - 1] > pace[q]; i--) others[i] = others[i - 1]; /* kept sorted */
                others[i] = pace[q];
            }
        double median = k ? (k % 2 ? others[k / 2] : 0.5 * (others[k / 2 - 1] + others[k / 2])) : 0;
        slowdown[r] = pace[r] > 0 && median > 0 ? pace[r] / median : 0;
    }
}

/* The microbatches a step of the run trains on: every region's (with `live`, of the regions an elastic run has
 * now), each its replicas' (regions may differ in replicas); a span pipeline is one model over all of them. */
static double run_microbatches(const orch_worker *w, bool live)
{
    double mb = 0;
    for (int r = 0; r < (w->id->span ? 1 : w->id->n_regions); r++)
        if (!live || !w->elastic.on || w->elastic.m.live[r]) mb += w->model.region_mb[r];
    return mb;
}

/* The run's result (the launcher's final line): "<val_loss> <params_xxh64> <steps> <tokens/s>", and in an
 * elastic run the regions it covers, the last round's quorum ("011"). Tokens/s count the regions that
 * trained (a span pipeline is one model over all of them). */
static xdc_err_t post_result(orch_worker *w, uint64_t hash, double wall, xdc_diag *diag)
{
    char mask[XDC_TOPO_MAX_REGIONS + 1] = "", val[96 + XDC_TOPO_MAX_REGIONS];
    for (int r = 0; w->elastic.on && r < w->id->n_regions; r++) mask[r] = w->elastic.m.live[r] ? '1' : '0';
    snprintf(val, sizeof val, "%.4f %016llx %lld %.3f%s%s", w->prog.val_loss, (unsigned long long)hash,
             (long long)w->prog.step, (double)w->prog.step * w->model.B * w->model.T * run_microbatches(w, true) / wall,
             mask[0] ? " " : "", mask);
    return rdzv_set(orch_member_rdzv(w->member), RDZV_KEY_RESULT, val, diag);
}

/* This worker's stats/<region>/<rank> value: WAN bytes sent and their fp32 size, cumulative step,
 * compute, intra and exposed WAN seconds, steps done, wall seconds, and the seconds of inner steps run while
 * rounds or exchanges waited (train while waiting: in the compute, but no step of the run). Written as the run
 * goes (pace) and at its end (the launcher's summary reads the last one). */
static void stats_value(orch_worker *w, double wall, char *val, size_t cap)
{
    uint64_t tx, raw;
    wan_totals(w, &tx, &raw, NULL);
    snprintf(val, cap, "%llu %llu %.6f %.6f %.6f %.6f %lld %.6f %.6f", (unsigned long long)tx, (unsigned long long)raw,
             w->prog.t_step, w->prog.t_compute, w->prog.t_intra, w->prog.t_wan_exposed, (long long)w->prog.step, wall,
             w->elastic.waiting_s);
}

/* Region r's (the same rank's) cumulative compute seconds of its run's steps (not those of steps run while rounds
 * waited, which are no step of the run) and steps: 1, or 0 when it posted none yet. */
static int region_times(orch_worker *w, int r, double *comp, int64_t *step, xdc_diag *diag)
{
    char val[512];
    if (r == w->id->region_idx) {
        *comp = w->prog.t_compute - w->elastic.waiting_s, *step = w->prog.step;
        return 1;
    }
    unsigned long long tx, raw;
    double t_step, t_intra, t_wan, waiting;
    long long st;
    if (rdzv_try_get(orch_member_rdzv(w->member), rdzv_key_stats(r, w->id->lrank).s, val, sizeof val, diag) != XDC_OK ||
        sscanf(val, "%llu %llu %lf %lf %lf %lf %lld %*f %lf", &tx, &raw, &t_step, comp, &t_intra, &t_wan, &st,
               &waiting) != 8)
        return 0;
    *comp -= waiting;
    *step = st;
    return 1;
}

/* Stragglers. Each worker posts its stats, then reads the same rank's of every other region (without
 * waiting: a region not heard from yet is left unknown); a region's pace is its compute seconds per step
 * since the previous look (at the first look that sees it, since the start), and its slowdown that pace over the median of the other regions' paces. A
 * region slower than straggler_factor times the others is logged (and shown in the progress line and
 * xdc_region_slowdown_ratio by the callers). Compute, not step time: in sync mode every region's step
 * takes as long as the slowest's, the straggler's compute is what differs. */
static xdc_err_t pace(orch_worker *w, double wall, xdc_diag *diag)
{
    char val[512];
    stats_value(w, wall, val, sizeof val);
    XDC_CHECK(rdzv_set(orch_member_rdzv(w->member), rdzv_key_stats(w->id->region_idx, w->id->lrank).s, val, diag));
    orch_progress *g = &w->prog;
    int n = w->id->n_regions;
    for (int r = 0; r < n; r++) {
        double comp;
        int64_t step;
        xdc_diag ignore;
        if (!region_times(w, r, &comp, &step, &ignore)) continue;
        if (step > g->pace_step0[r] && g->pace_step0[r] > 0)
            g->pace[r] = (comp - g->pace_comp0[r]) / (double)(step - g->pace_step0[r]);
        else if (g->pace[r] == 0 && step > 0)
            g->pace[r] = comp / (double)step; /* first sight: its mean so far, so one look already tells */
        g->pace_comp0[r] = comp, g->pace_step0[r] = step;
    }
    orch_pace_slowdowns(g->pace, n, g->slowdown);
    for (int r = 0; r < n; r++)
        if (g->slowdown[r] > w->cfg->straggler_factor && reporter(w))
            XDC_WARN(XDC_SUB_ORCH,
                     "region %s is a straggler at step %lld: %.4f s of compute per step, x%.2f the other regions' "
                     "median (straggler_factor %g)",
                     w->topo->regions[r].name, (long long)g->step, g->pace[r], g->slowdown[r],
                     w->cfg->straggler_factor);
    return XDC_OK;
}

/* "  | straggler eu-west x2.71" for each region slower than straggler_factor, into out ("" when none). */
static void stragglers(const orch_worker *w, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < w->id->n_regions && len < cap; r++)
        if (w->prog.slowdown[r] > w->cfg->straggler_factor)
            len += (size_t)snprintf(out + len, cap - len, "  | straggler %s x%.2f", w->topo->regions[r].name,
                                    w->prog.slowdown[r]);
}

static void progress_line(orch_worker *w, float loss, double step_s, double comp, double intra, double wan)
{
    uint64_t tx, raw;
    wan_totals(w, &tx, &raw, NULL);
    double tokens = (double)w->model.B * w->model.T * run_microbatches(w, false);
    double goodput = 0;
    for (int r = 0; r < w->id->n_regions; r++)
        if (orch_member_peers(w->member) && orch_member_peers(w->member)[r]) {
            xdc_wan_stats st;
            xdc_wan_peer_stats(orch_member_peers(w->member)[r], &st);
            goodput += st.goodput_gbps;
        }
    char slow[256];
    stragglers(w, slow, sizeof slow);
    printf("step %5lld/%d  loss %.4f  tok/s %7.0f  step %.3fs = compute %.3f + intra %.3f + exposed wan %.3f"
           "  | wan %.2f MB (x%.1f) goodput %.3f Gb/s%s\n",
           (long long)w->prog.step, w->cfg->train.steps, loss, tokens / step_s, step_s, comp, intra, wan,
           (double)tx / 1e6, tx ? (double)raw / (double)tx : 0.0, goodput, slow);
    fflush(stdout);
}

/* Complete a step-log row with the time and this worker's WAN bytes so far, and write it. */
static void step_row(orch_worker *w, orch_steplog_row *row, double run_t0)
{
    uint64_t raw;
    wan_totals(w, &row->wan_tx_bytes, &raw, NULL);
    row->elapsed_s = now_s() - run_t0;
    orch_steplog_append(w->tele.steps, row);
}

xdc_err_t orch_train_run(orch_worker *w, xdc_diag *diag)
{
    const xdc_train_config *c = &w->cfg->train;
    if (w->id->resume && !w->elastic.rejoin) XDC_CHECK(orch_checkpoint_resume(w, diag));
    if (w->elastic.rejoin) XDC_CHECK(w->mode->rejoin(w, w->mode_state, diag));         /* the running job's state */
    if (w->elastic.rejoin && w->elastic.rejoin_round == RDZV_ROUND_END) return XDC_OK; /* not needed: no model */
    double run_t0 = now_s();
    orch_steplog_row last = {.step = w->prog.step, .val_loss = NAN};
    while (w->prog.step < c->steps) {
        double t0 = now_s(), c0 = w->prog.t_compute, i0 = w->prog.t_intra, x0 = w->prog.t_wan_exposed;
        float loss = 0;
        XDC_CHECK(w->mode->step(w, w->mode_state, &loss, diag)); /* advances w->prog.step */
        double dt = now_s() - t0;
        w->prog.t_step += dt;
        w->prog.last_loss = loss;
        orch_observe_step(w, dt, w->prog.t_compute - c0, w->prog.t_intra - i0, w->prog.t_wan_exposed - x0, loss);
        if (reporter(w) && (w->prog.step % c->log_interval == 0 || w->prog.step == c->steps))
            progress_line(w, loss, dt, w->prog.t_compute - c0, w->prog.t_intra - i0, w->prog.t_wan_exposed - x0);
        orch_steplog_row row = {.step = w->prog.step,
                                .step_s = dt,
                                .compute_s = w->prog.t_compute - c0,
                                .intra_s = w->prog.t_intra - i0,
                                .wan_exposed_s = w->prog.t_wan_exposed - x0,
                                .val_loss = NAN};
        /* A joiner whose state is on its way holds no model of the run's yet: its loss would be a fresh one's. */
        if (c->eval_interval > 0 && w->prog.step % c->eval_interval == 0 && w->prog.step < c->steps &&
            !w->elastic.take) {
            double vl;
            XDC_CHECK(orch_train_eval(w, &vl, diag));
            row.val_loss = vl;
            if (reporter(w)) {
                printf("step %5lld  val_loss %.4f  elapsed %.2fs\n", (long long)w->prog.step, vl, now_s() - run_t0);
                fflush(stdout);
            }
        }
        /* The last step's row waits for the final evaluation below. */
        if (w->prog.step < c->steps) step_row(w, &row, run_t0);
        else last = row;
        /* After an elastic run lost a region, what waits for every member (the checkpoint barrier, the
         * re-plan's reports) would wait for it: the survivors (who all hold the same quorum) skip them, and
         * while a region that came back is still taking its state (its outer state is not the run's yet). */
        int whole = !w->elastic.on || (w->elastic.m.n_live == w->id->n_regions &&
                                       !memchr(w->elastic.m.catching_up, 1, (size_t)w->id->n_regions));
        if (whole && w->cfg->plan_auto && w->cfg->replan_every > 0 && w->id->n_regions > 1 && !w->id->span &&
            w->prog.step % w->cfg->replan_every == 0 && w->prog.step < c->steps)
            XDC_CHECK(replan(w, diag));
        /* After the re-plan: the checkpoint holds the codec and period the next step runs with. */
        if (orch_checkpoint_due(w) && whole) XDC_CHECK(orch_checkpoint_save(w, diag));
        char status[64];
        snprintf(status, sizeof status, "step %lld", (long long)w->prog.step);
        if (w->prog.step % 10 == 0) rdzv_heartbeat(orch_member_rdzv(w->member), status, diag);
        if (w->prog.step % ORCH_PACE_STEPS == 0 && w->id->n_regions > 1 && !w->id->span && w->prog.step < c->steps)
            XDC_CHECK(pace(w, now_s() - run_t0, diag));
    }
    /* DiLoCo-style modes end on agreed global parameters, so every region reports the same model. */
    XDC_CHECK(w->mode->finish(w, w->mode_state, diag));
    XDC_CHECK(orch_train_eval(w, &w->prog.val_loss, diag));
    if (reporter(w))
        printf("step %5lld  val_loss %.4f  elapsed %.2fs\n", (long long)w->prog.step, w->prog.val_loss,
               now_s() - run_t0);
    last.val_loss = w->prog.val_loss;
    step_row(w, &last, run_t0);
    uint64_t hash = 0;
    XDC_CHECK(hash_params(w, &hash, diag));
    if (w->id->replica == 0 && is_last(w)) /* each region's model, for comparing regions (the result has one) */
        XDC_INFO(XDC_SUB_ORCH, "final parameters of region %s: params_xxh64=%016llx", w->id->region,
                 (unsigned long long)hash);
    uint64_t tx, raw, relay; /* relayed: a region's forwards for regions without a direct link, in wan_tx too */
    wan_totals(w, &tx, &raw, &relay);
    XDC_INFO(XDC_SUB_ORCH, "WAN bytes of region %s rank %d: wan_tx_bytes=%llu relayed_bytes=%llu", w->id->region,
             w->id->lrank, (unsigned long long)tx, (unsigned long long)relay);
    if (w->cfg->dump_params && (w->id->span || w->id->region_idx == 0) && w->id->replica == 0)
        for (int k = 0; k < w->model.chunks; k++) XDC_CHECK(dump_params(w, k, diag));
    double wall = now_s() - run_t0;
    char val[512];
    /* The result first: a coordinator takes every worker's stats as the end of the run. */
    if (!w->elastic.on && (w->id->span || w->id->region_idx == 0) && w->id->replica == 0 && is_last(w))
        XDC_CHECK(post_result(w, hash, wall, diag));
    stats_value(w, wall, val, sizeof val);
    XDC_CHECK(rdzv_set(orch_member_rdzv(w->member), rdzv_key_stats(w->id->region_idx, w->id->lrank).s, val, diag));
    /* Nobody leaves before everyone reported: a departing peer would look like a failure. Then global rank
     * 0 says the run is over, so a coordinator knows it may close the store. An elastic run ends with a
     * last quorum round instead (the barrier counts every member, those of the regions that left too), and
     * its result comes after it, from the lowest region in that round: region 0 may have left, and the
     * members all hold the same parameters. That round's decision tells the store's host the run is over. */
    if (w->elastic.on) {
        XDC_CHECK(orch_elastic_agree(w, RDZV_ROUND_END, diag));
        int first = 0;
        while (!w->elastic.m.live[first]) first++; /* our own region is in: orch_elastic_agree checked */
        return first == w->id->region_idx && w->id->replica == 0 && is_last(w) ? post_result(w, hash, wall, diag)
                                                                               : XDC_OK;
    }
    return orch_member_end_barrier(w->member, diag);
}
