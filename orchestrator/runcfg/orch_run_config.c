/* orch_run_config.c — loading and checking the run file (see orch_run_config.h). */
#include "orchestrator/runcfg/orch_run_config.h"

#include "orchestrator/rdzv/orch_rdzv.h"

#include "compression/xdc_codec.h"

#include <errno.h>
#include <libgen.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const mode_words[] = {"sync", "diloco", "streaming", NULL};
static const char *const plan_words[] = {"auto", "off", NULL};
static const char *const ckpt_failure_words[] = {"stop", "continue", NULL};
static const char *const plan_compute_words[] = {"probe", "topology", NULL};
static const char *const overlap_words[] = {"delayed", "eager", NULL};

/* The file's keys land in one struct: the config itself plus the raw words and nested nodes. */
typedef struct {
    orch_run_config c;
    char model[512], data[512], mode[16], plan[16], plan_compute[16], ckpt_failure[16], overlap[16];
    const xdc_cfg_node *diloco, *streaming, *timeouts, *elastic, *sync, *slowdown, *replica_mb, *layer_ms;
} run_in;

#define RUN_FIELD(key, type, member, req, lo, hi)                                                 \
    {                                                                                             \
        key, type, offsetof(run_in, c.member), sizeof(((run_in *)0)->c.member), req, lo, hi, NULL \
    }

static const xdc_cfg_field top_fields[] = {
    {"model", XDC_CFG_STRING, offsetof(run_in, model), 512, true, 0, 0, NULL},
    {"data", XDC_CFG_STRING, offsetof(run_in, data), 512, true, 0, 0, NULL},
    {"mode", XDC_CFG_STRING, offsetof(run_in, mode), 16, false, 0, 0, mode_words},
    {"plan", XDC_CFG_STRING, offsetof(run_in, plan), 16, false, 0, 0, plan_words},
    {"plan_compute", XDC_CFG_STRING, offsetof(run_in, plan_compute), 16, false, 0, 0, plan_compute_words},
    {"diloco", XDC_CFG_NODE, offsetof(run_in, diloco), 0, false, 0, 0, NULL},
    {"streaming", XDC_CFG_NODE, offsetof(run_in, streaming), 0, false, 0, 0, NULL},
    {"timeouts", XDC_CFG_NODE, offsetof(run_in, timeouts), 0, false, 0, 0, NULL},
    {"elastic", XDC_CFG_NODE, offsetof(run_in, elastic), 0, false, 0, 0, NULL},
    {"sync", XDC_CFG_NODE, offsetof(run_in, sync), 0, false, 0, 0, NULL},
    RUN_FIELD("pipeline_stages", XDC_CFG_INT, pipeline_stages, false, 1, 64),
    RUN_FIELD("pipeline_chunks", XDC_CFG_INT, pipeline_chunks, false, 1, ORCH_MAX_CHUNKS),
    RUN_FIELD("span_regions", XDC_CFG_BOOL, span_regions, false, 0, 0),
    RUN_FIELD("activation_codec", XDC_CFG_STRING, activation_codec, false, 0, 0),
    RUN_FIELD("microbatches", XDC_CFG_INT, microbatches, false, 1, 1024),
    {"microbatches_per_replica", XDC_CFG_NODE, offsetof(run_in, replica_mb), 0, false, 0, 0, NULL},
    {"emulate_layer_ms", XDC_CFG_NODE, offsetof(run_in, layer_ms), 0, false, 0, 0, NULL},
    RUN_FIELD("batch_size", XDC_CFG_INT, batch_size, false, 1, 65536),
    RUN_FIELD("steps", XDC_CFG_INT, steps, false, 1, 100000000),
    RUN_FIELD("eval_interval", XDC_CFG_INT, eval_interval, false, 1, 100000000),
    RUN_FIELD("codec", XDC_CFG_STRING, codec, false, 0, 0),
    RUN_FIELD("zstd_level", XDC_CFG_INT, zstd_level, false, -1, 19),
    RUN_FIELD("bucket_mb", XDC_CFG_DOUBLE, bucket_mb, false, 0.001, 4096),
    RUN_FIELD("threads", XDC_CFG_INT, threads, false, 1, 256),
    RUN_FIELD("checkpoint_every", XDC_CFG_INT, checkpoint_every, false, 0, 100000000),
    {"checkpoint_failure", XDC_CFG_STRING, offsetof(run_in, ckpt_failure), 16, false, 0, 0, ckpt_failure_words},
    RUN_FIELD("metrics_port", XDC_CFG_INT, metrics_port, false, -1, 65535),
    RUN_FIELD("metrics_bind", XDC_CFG_STRING, metrics_bind, false, 0, 0),
    RUN_FIELD("rdzv", XDC_CFG_STRING, rdzv, false, 0, 0),
    RUN_FIELD("dump_params", XDC_CFG_BOOL, dump_params, false, 0, 0),
    RUN_FIELD("replan_every", XDC_CFG_INT, replan_every, false, 0, 100000000),
    RUN_FIELD("straggler_factor", XDC_CFG_DOUBLE, straggler_factor, false, 1.01, 1000),
};

static const xdc_cfg_field diloco_fields[] = {
    RUN_FIELD("inner_steps", XDC_CFG_INT, diloco.inner_steps, false, 1, 100000),
    RUN_FIELD("outer_lr", XDC_CFG_DOUBLE, diloco.outer_lr, false, 1e-6, 10),
    RUN_FIELD("outer_momentum", XDC_CFG_DOUBLE, diloco.outer_momentum, false, 0, 0.999),
    RUN_FIELD("keep_unsent", XDC_CFG_BOOL, diloco.keep_unsent, false, 0, 0),
    RUN_FIELD("final_codec", XDC_CFG_STRING, diloco.final_codec, false, 0, 0),
    RUN_FIELD("nobody_waits", XDC_CFG_BOOL, diloco.nobody_waits, false, 0, 0),
    RUN_FIELD("train_while_waiting", XDC_CFG_BOOL, diloco.train_while_waiting, false, 0, 0),
    {"slowdown", XDC_CFG_NODE, offsetof(run_in, slowdown), 0, false, 0, 0, NULL},
    RUN_FIELD("overlap_steps", XDC_CFG_INT, diloco.overlap_steps, false, 0, 100000),
    {"overlap", XDC_CFG_STRING, offsetof(run_in, overlap), 16, false, 0, 0, overlap_words},
};

static const xdc_cfg_field streaming_fields[] = {
    RUN_FIELD("fragments", XDC_CFG_INT, streaming.fragments, false, 1, 1024),
};

static const xdc_cfg_field sync_fields[] = {
    RUN_FIELD("delay_steps", XDC_CFG_INT, sync.delay_steps, false, 0, 1),
};

static const xdc_cfg_field timeout_fields[] = {
    RUN_FIELD("rendezvous", XDC_CFG_DURATION, timeouts.rendezvous_ms, false, 100, 86400000),
    RUN_FIELD("operation", XDC_CFG_DURATION, timeouts.operation_ms, false, 100, 86400000),
    RUN_FIELD("handshake", XDC_CFG_DURATION, timeouts.handshake_ms, false, 100, 86400000),
    RUN_FIELD("heartbeat", XDC_CFG_DURATION, timeouts.heartbeat_ms, false, 100, 86400000),
};

static const xdc_cfg_field elastic_fields[] = {
    RUN_FIELD("min_regions", XDC_CFG_INT, elastic.min_regions, false, 1, 256),
    RUN_FIELD("grace", XDC_CFG_DURATION, elastic.grace_ms, false, 1, 86400000),
    RUN_FIELD("grace_min", XDC_CFG_DURATION, elastic.grace_min_ms, false, 1, 86400000),
};

#define N(t) (sizeof(t) / sizeof((t)[0]))

const char *orch_mode_name(orch_mode m) { return mode_words[m]; }

/* A list of 1 to `max` numbers in [lo, hi] (integers when `integer`) at `seq`, for key `key` (the errors name
 * it, and `what` says what each entry is for); its length, or 0 with the errors added. */
static int parse_list(const xdc_cfg_node *seq, const char *key, const char *what, double lo, double hi, bool integer,
                      double *out, int max, xdc_cfg_errors *errs)
{
    int n = xdc_cfg_seq_len(seq);
    if (xdc_cfg_node_kind(seq) != XDC_CFG_SEQUENCE || n < 1 || n > max) {
        xdc_cfg_error_at(errs, seq, "%s: a list of 1 to %d numbers (one per %s) expected", key, max, what);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const char *text = xdc_cfg_scalar(xdc_cfg_seq_item(seq, i));
        char *end = NULL;
        double v = text ? strtod(text, &end) : 0;
        if (!text || end == text || *end || !(v >= lo && v <= hi) || (integer && v != (double)(int)v)) {
            xdc_cfg_error_at(errs, xdc_cfg_seq_item(seq, i), "%s[%d]: %s in [%g, %g] expected", key, i,
                             integer ? "an integer" : "a number", lo, hi);
            return 0;
        }
        out[i] = v;
    }
    return n;
}

/* microbatches_per_replica: integers in [1, 1024], one per data-parallel replica. */
static int parse_replica_microbatches(const xdc_cfg_node *seq, orch_run_config *c, xdc_cfg_errors *errs)
{
    double v[ORCH_MAX_REPLICA_MB];
    c->n_replica_mb = parse_list(seq, "microbatches_per_replica", "replica", 1, 1024, true, v, ORCH_MAX_REPLICA_MB,
                                 errs);
    for (int i = 0; i < c->n_replica_mb; i++) c->replica_mb[i] = (int)v[i];
    return c->n_replica_mb == 0;
}

xdc_err_t orch_run_config_replica_mb(const orch_run_config *c, const int *replicas, int n_regions, int region,
                                     int replica, int *out, xdc_diag *diag)
{
    int n = c->n_replica_mb, all = 0, first = 0, equal = 1;
    for (int r = 0; r < n_regions; r++) {
        all += replicas[r];
        first += r < region ? replicas[r] : 0;
        equal &= replicas[r] == replicas[0];
    }
    int per_region = equal && n == replicas[region];
    if (n && !per_region && n != all) {
        if (equal)
            xdc_diag_set(diag,
                         "microbatches_per_replica in %s has %d entries; the run has %d replicas per region (one list "
                         "for every region) and %d in all (one entry each, region by region)",
                         c->path, n, replicas[region], all);
        else
            xdc_diag_set(diag,
                         "microbatches_per_replica in %s has %d entries; the run's regions differ in replicas, so one "
                         "entry for each of its %d replicas, region by region",
                         c->path, n, all);
        return XDC_ERR_CONFIG;
    }
    *out = !n ? c->train.microbatches : c->replica_mb[per_region ? replica : first + replica];
    return XDC_OK;
}

xdc_err_t orch_run_config_slowdown(const orch_run_config *c, int n_regions, double *out, xdc_diag *diag)
{
    if (c->diloco.n_slowdown && c->diloco.n_slowdown != n_regions) {
        xdc_diag_set(diag, "diloco.slowdown in %s has %d entries; the topology has %d regions", c->path,
                     c->diloco.n_slowdown, n_regions);
        return XDC_ERR_CONFIG;
    }
    for (int r = 0; r < n_regions; r++) out[r] = c->diloco.n_slowdown ? c->diloco.slowdown[r] : 1.0;
    return XDC_OK;
}

xdc_err_t orch_run_config_layer_ms(const orch_run_config *c, int n_regions, int region, double *ms, xdc_diag *diag)
{
    int n = c->n_layer_ms;
    if (n > 1 && n != n_regions) {
        xdc_diag_set(diag, "emulate_layer_ms in %s has %d entries; the topology has %d regions (or give one for all)",
                     c->path, n, n_regions);
        return XDC_ERR_CONFIG;
    }
    *ms = !n ? 0 : c->layer_ms[n == 1 ? 0 : region];
    return XDC_OK;
}

bool orch_quorum_elastic(const orch_run_config *c, int n_regions)
{
    /* Sync mode's rounds are its steps; delayed averaging keeps a round open across the step boundary where a
     * region would leave or rejoin, so it stays all or nothing. */
    bool sync = c->mode == ORCH_MODE_SYNC && c->elastic.set && !c->sync.delay_steps;
    return (c->mode == ORCH_MODE_DILOCO || c->mode == ORCH_MODE_STREAMING || sync) && !c->span_regions && n_regions > 1;
}

int orch_quorum_min(const orch_run_config *c, int n_regions)
{
    return c->elastic.min_regions ? c->elastic.min_regions : n_regions / 2 + 1;
}

long long orch_quorum_last_round(const orch_run_config *c)
{
    return c->mode == ORCH_MODE_SYNC ? (long long)c->train.steps - 1 : (long long)c->train.steps;
}

bool orch_quorum_joins_in_round(const orch_run_config *c)
{
    return c->mode == ORCH_MODE_DILOCO && !c->diloco.overlap_steps && !c->diloco.nobody_waits;
}

bool orch_quorum_trains_in_exchange(const orch_run_config *c)
{
    return c->mode == ORCH_MODE_STREAMING && c->diloco.train_while_waiting;
}

int64_t orch_quorum_exchange_silent_ms(const orch_run_config *c)
{
    int64_t hb = c->timeouts.heartbeat_ms;
    return orch_quorum_trains_in_exchange(c) && c->elastic.grace_ms > hb ? c->elastic.grace_ms : hb;
}

void orch_run_config_rdzv_shape(const orch_run_config *c, int n_regions, rdzv_run_shape *out)
{
    long steps = c->train.steps > 0 ? c->train.steps : 0;
    *out = (rdzv_run_shape){0};
    if (orch_quorum_elastic(c, n_regions)) {
        long period = c->mode == ORCH_MODE_SYNC || c->plan_auto || c->diloco.inner_steps < 1 ? 1
                                                                                             : c->diloco.inner_steps;
        long per = 1;
        if (c->mode == ORCH_MODE_STREAMING && c->streaming.fragments > 1)
            per = c->streaming.fragments < period ? c->streaming.fragments : period;
        out->rejoins = (steps * per + period - 1) / period + 1;
    }
    if (c->plan_auto && c->replan_every > 0 && n_regions > 1 && !c->span_regions)
        out->replans = steps / c->replan_every;
}

/* Relative paths in the run file are relative to the run file's folder. */
static void resolve(const char *run_path, const char *rel, char *out, size_t cap)
{
    if (rel[0] == '/') {
        snprintf(out, cap, "%s", rel);
        return;
    }
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", run_path);
    snprintf(out, cap, "%s/%s", dirname(tmp), rel);
}

void orch_run_config_outer_defaults(orch_run_config *c)
{
    bool sparse = strncmp(c->codec, "sparse", 6) == 0;
    if (!c->diloco.outer_lr_set) c->diloco.outer_lr = sparse ? 1.0 : 0.7;
    if (!c->diloco.outer_momentum_set) c->diloco.outer_momentum = sparse ? 0.5 : 0.9;
}

/* pipeline_chunks > 1: what the interleaved schedule needs and what it is built for so far (docs/runtime.md,
 * "Interleaved 1F1B": the chunks' arenas are in no checkpoint, rejoin, delayed round or re-plan); the worker
 * refuses a pipeline across regions whose wrap-around has no WAN link once it knows the topology. */
static xdc_err_t check_chunks(const orch_run_config *c, xdc_cfg_errors *errs)
{
    int v = c->pipeline_chunks, P = c->pipeline_stages, M = c->train.microbatches;
    if (P < 2 || P * v > c->train.model.n_layer) {
        xdc_cfg_error_add(errs, 0, 0,
                          "pipeline_chunks %d needs pipeline_stages of at least 2 (it is %d) and pipeline_stages x "
                          "pipeline_chunks (%d) at most the model's %d layers",
                          v, P, P * v, c->train.model.n_layer);
        return XDC_ERR_CONFIG;
    }
    if (M % P) {
        xdc_cfg_error_add(errs, 0, 0,
                          "pipeline_chunks %d needs microbatches (%d) a multiple of pipeline_stages (%d): the "
                          "interleaved schedule takes the microbatches in groups of one per stage",
                          v, M, P);
        return XDC_ERR_CONFIG;
    }
    if (c->mode != ORCH_MODE_SYNC || c->sync.delay_steps || c->elastic.set || c->checkpoint_every || c->plan_auto ||
        c->n_replica_mb) {
        xdc_cfg_error_add(errs, 0, 0,
                          "pipeline_chunks %d is built for mode sync without sync.delay_steps, elastic:, "
                          "checkpoint_every, plan: auto or microbatches_per_replica",
                          v);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

xdc_err_t orch_run_config_check_layout(const orch_run_config *c, const xdc_topology *t, xdc_diag *diag)
{
    int stages = c->pipeline_stages, total = xdc_topology_total_workers(t);
    if (c->span_regions) {
        if (stages == total && total <= c->train.model.n_layer) return XDC_OK;
        xdc_diag_set(diag,
                     "span_regions: pipeline_stages (%d) must equal the workers of all regions (%d) and not exceed the "
                     "model's %d layers",
                     stages, total, c->train.model.n_layer);
        return XDC_ERR_CONFIG;
    }
    for (int r = 0; r < t->n_regions; r++) {
        int w = xdc_topology_region_workers(t, r);
        if (w > 0 && w % stages == 0) continue;
        xdc_diag_set(diag,
                     "region %s has %d workers, which the %d pipeline stages must divide: every region runs the same "
                     "stages (a different stage count per region cannot run)",
                     t->regions[r].name, w, stages);
        return XDC_ERR_CONFIG;
    }
    return XDC_OK;
}

xdc_err_t orch_run_config_check(const orch_run_config *c, bool planned, xdc_cfg_errors *errs)
{
    if (c->mode == ORCH_MODE_STREAMING && c->streaming.fragments > c->diloco.inner_steps) {
        xdc_cfg_error_add(errs, 0, 0,
                          "streaming.fragments (%d) must not exceed diloco.inner_steps (%d): each fragment "
                          "needs its own step of the period",
                          c->streaming.fragments, c->diloco.inner_steps);
        return XDC_ERR_CONFIG;
    }
    if ((c->diloco.keep_unsent || c->diloco.final_codec[0]) && c->mode != ORCH_MODE_DILOCO) {
        xdc_cfg_error_add(errs, 0, 0, "diloco.%s needs mode diloco (this run's mode is %s)",
                          c->diloco.keep_unsent ? "keep_unsent" : "final_codec", mode_words[c->mode]);
        return XDC_ERR_CONFIG;
    }
    /* plan: auto without a mode: the planner keeps to DiLoCo where the file sets these (orch_plan.c) */
    bool mode_open = c->plan_auto && !c->mode_set && !planned;
    if (c->diloco.nobody_waits && c->mode != ORCH_MODE_DILOCO && !mode_open) {
        xdc_cfg_error_add(errs, 0, 0, "diloco.nobody_waits needs mode diloco (this run's mode is %s)",
                          mode_words[c->mode]);
        return XDC_ERR_CONFIG;
    }
    /* Its steps run in the wait for a round's decision, before the round's pseudo-gradient is taken: DiLoCo's
     * rounds at once or streaming's fragments (the planner does not choose it) */
    if (c->diloco.train_while_waiting &&
        ((c->mode != ORCH_MODE_DILOCO && c->mode != ORCH_MODE_STREAMING) || c->diloco.overlap_steps || c->plan_auto)) {
        xdc_cfg_error_add(errs, 0, 0,
                          "diloco.train_while_waiting needs mode diloco with its rounds at once (no "
                          "diloco.overlap_steps) or streaming, and no plan: auto (this run: mode %s, overlap_steps "
                          "%d%s)",
                          mode_words[c->mode], c->diloco.overlap_steps, c->plan_auto ? ", plan: auto" : "");
        return XDC_ERR_CONFIG;
    }
    if (c->diloco.overlap_steps && c->mode != ORCH_MODE_DILOCO && !mode_open) {
        xdc_cfg_error_add(errs, 0, 0,
                          "diloco.overlap_steps needs mode diloco (this run's mode is %s; streaming's fragments "
                          "are always applied one step after they leave)",
                          mode_words[c->mode]);
        return XDC_ERR_CONFIG;
    }
    const orch_diloco_config *dc = &c->diloco;
    /* eager is how DiLoCo's overlapped rounds begin (under plan: auto, where the planner overlaps them); a streaming
     * fragment's round is a slice of the state, which the estimate does not take */
    if (dc->eager && !mode_open && (c->mode != ORCH_MODE_DILOCO || (!dc->overlap_steps && !c->plan_auto))) {
        xdc_cfg_error_add(errs, 0, 0,
                          "diloco.overlap: eager needs DiLoCo's overlapped rounds: mode diloco with "
                          "diloco.overlap_steps (this run's mode is %s, overlap_steps %d)",
                          mode_words[c->mode], dc->overlap_steps);
        return XDC_ERR_CONFIG;
    }
    /* With plan: auto the planner sets the period: checked once it has (orch_plan_apply), and a re-plan keeps a
     * plan with overlapped rounds as it is (xdc_plan_replan_wan). */
    if (dc->overlap_steps && (!c->plan_auto || planned) &&
        (dc->overlap_steps > dc->inner_steps || c->checkpoint_every % dc->inner_steps != 0)) {
        xdc_cfg_error_add(errs, 0, 0,
                          "diloco.overlap_steps %d needs at most diloco.inner_steps (%d) and checkpoint_every a "
                          "multiple of it (it is %d): a round in flight is in no checkpoint",
                          dc->overlap_steps, dc->inner_steps, c->checkpoint_every);
        return XDC_ERR_CONFIG;
    }
    if (c->n_replica_mb &&
        (c->mode != ORCH_MODE_SYNC || c->span_regions || c->elastic.set || (c->plan_auto && !planned))) {
        xdc_cfg_error_add(errs, 0, 0,
                          "microbatches_per_replica needs mode sync without span_regions, elastic: or plan: auto "
                          "(the planner then chooses the split)");
        return XDC_ERR_CONFIG;
    }
    if (c->span_regions && c->mode != ORCH_MODE_SYNC) {
        xdc_cfg_error_add(errs, 0, 0, "span_regions needs mode sync (a pipeline across regions has one replica)");
        return XDC_ERR_CONFIG;
    }
    if (c->pipeline_stages > c->train.model.n_layer) {
        xdc_cfg_error_add(errs, 0, 0, "pipeline_stages (%d) exceeds the model's %d layers", c->pipeline_stages,
                          c->train.model.n_layer);
        return XDC_ERR_CONFIG;
    }
    if (c->pipeline_chunks > 1) XDC_CHECK(check_chunks(c, errs));
    return XDC_OK;
}

xdc_err_t orch_run_config_load(const char *path, orch_run_config *out, xdc_cfg_errors *errs)
{
    run_in in;
    memset(&in, 0, sizeof in);
    orch_run_config *c = &in.c;
    snprintf(c->path, sizeof c->path, "%s", path);
    snprintf(c->codec, sizeof c->codec, "link");
    snprintf(c->activation_codec, sizeof c->activation_codec, "bf16");
    c->pipeline_chunks = 1;
    c->zstd_level = -1;
    c->bucket_mb = 1.0;
    c->threads = 1;
    c->diloco.inner_steps = 20;
    c->diloco.outer_lr = c->diloco.outer_momentum = -1; /* unset until orch_run_config_outer_defaults */
    c->streaming.fragments = 4;
    /* -1: unset, so the file's own values are told apart from the defaults filled in below */
    c->timeouts.handshake_ms = c->timeouts.rendezvous_ms = c->timeouts.operation_ms = c->timeouts.heartbeat_ms = -1;
    c->metrics_port = -1;
    snprintf(c->metrics_bind, sizeof c->metrics_bind, "127.0.0.1"); /* unauthenticated HTTP: this host only */
    c->replan_every = 50;
    c->straggler_factor = 2.0;
    c->elastic.grace_ms = 60000;
    xdc_cfg_errors_init(errs, path);
    xdc_cfg_doc *doc;
    XDC_CHECK(xdc_cfg_load_file(path, &doc, errs));
    int bad = xdc_cfg_map_fields(xdc_cfg_root(doc), top_fields, N(top_fields), &in, errs);
    if (in.diloco) bad += xdc_cfg_map_fields(in.diloco, diloco_fields, N(diloco_fields), &in, errs);
    if (in.slowdown) {
        c->diloco.n_slowdown = parse_list(in.slowdown, "diloco.slowdown", "region", 1, 1000, false, c->diloco.slowdown,
                                          ORCH_MAX_SLOWDOWN, errs);
        bad += c->diloco.n_slowdown == 0;
    }
    if (in.replica_mb) bad += parse_replica_microbatches(in.replica_mb, c, errs);
    if (in.layer_ms) {
        c->n_layer_ms = parse_list(in.layer_ms, "emulate_layer_ms", "region", 0, 60000, false, c->layer_ms,
                                   ORCH_MAX_SLOWDOWN, errs);
        bad += c->n_layer_ms == 0;
    }
    if (in.streaming) bad += xdc_cfg_map_fields(in.streaming, streaming_fields, N(streaming_fields), &in, errs);
    if (in.elastic) bad += xdc_cfg_map_fields(in.elastic, elastic_fields, N(elastic_fields), &in, errs);
    c->elastic.set = in.elastic != NULL;
    if (in.sync) bad += xdc_cfg_map_fields(in.sync, sync_fields, N(sync_fields), &in, errs);
    if (in.timeouts) bad += xdc_cfg_map_fields(in.timeouts, timeout_fields, N(timeout_fields), &in, errs);
    rdzv_target rt; /* the store's URL checked here, where its line and column are known */
    xdc_diag rd = {{0}};
    if (!bad && c->rdzv[0] && rdzv_target_parse(c->rdzv, "run", &rt, &rd) != XDC_OK) {
        xdc_cfg_error_at(errs, xdc_cfg_map_get(xdc_cfg_root(doc), "rdzv"), "rdzv: %s", rd.msg);
        bad++;
    }
    xdc_codec_cfg fc = XDC_CODEC_CFG_INIT; /* the final round's codec, checked where its position is known */
    if (!bad && c->diloco.final_codec[0] && xdc_codec_parse(c->diloco.final_codec, &fc, &rd) != XDC_OK) {
        xdc_cfg_error_at(errs, xdc_cfg_map_get(in.diloco, "final_codec"), "diloco.final_codec: %s", rd.msg);
        bad++;
    }
    /* Delayed averaging is sync mode's, and a checkpoint would miss the average in flight at its step. */
    const char *mode_word = in.mode[0] ? in.mode : "sync";
    if (!bad && c->sync.delay_steps && strcmp(mode_word, "sync") != 0) {
        xdc_cfg_error_at(errs, xdc_cfg_map_get(in.sync, "delay_steps"),
                         "sync.delay_steps needs mode sync (this run's mode is %s)", mode_word);
        bad++;
    }
    if (!bad && c->sync.delay_steps && c->checkpoint_every) {
        xdc_cfg_error_at(errs, xdc_cfg_map_get(in.sync, "delay_steps"),
                         "sync.delay_steps %d and checkpoint_every %d cannot be combined: at every step boundary a "
                         "gradient average is still crossing the WAN, and a checkpoint does not hold it",
                         c->sync.delay_steps, c->checkpoint_every);
        bad++;
    }
    xdc_cfg_destroy(doc);
    if (bad) return XDC_ERR_CONFIG;
    c->checkpoint_continue = strcmp(in.ckpt_failure, "continue") == 0; /* default (unset): stop */
    c->timeouts.set = (c->timeouts.handshake_ms >= 0 ? ORCH_TIMEOUT_HANDSHAKE : 0u) |
                      (c->timeouts.rendezvous_ms >= 0 ? ORCH_TIMEOUT_RENDEZVOUS : 0u) |
                      (c->timeouts.operation_ms >= 0 ? ORCH_TIMEOUT_OPERATION : 0u) |
                      (c->timeouts.heartbeat_ms >= 0 ? ORCH_TIMEOUT_HEARTBEAT : 0u);
    orch_run_config_scale_timeouts(c, NULL);
    for (int m = 0; in.mode[0] && mode_words[m]; m++)
        if (strcmp(in.mode, mode_words[m]) == 0) c->mode = (orch_mode)m;
    c->mode_set = in.mode[0] != 0;
    c->diloco.eager = strcmp(in.overlap, "eager") == 0; /* default (unset): delayed */
    c->diloco.outer_lr_set = c->diloco.outer_lr >= 0;
    c->diloco.outer_momentum_set = c->diloco.outer_momentum >= 0;
    orch_run_config_outer_defaults(c);
    c->stages_set = c->pipeline_stages != 0;
    if (!c->stages_set) c->pipeline_stages = 1;
    c->plan_auto = strcmp(in.plan, "auto") == 0;
    c->plan_compute_topology = strcmp(in.plan_compute, "topology") == 0;
    resolve(path, in.model, c->model_path, sizeof c->model_path);
    resolve(path, in.data, c->data_path, sizeof c->data_path);
    if (xdc_model_config_load(c->model_path, &c->train, errs) != XDC_OK) return XDC_ERR_CONFIG;
    xdc_cfg_errors_init(errs, path);
    if (c->microbatches) c->train.microbatches = c->microbatches;
    if (c->batch_size) c->train.batch_size = c->batch_size;
    if (c->steps) c->train.steps = c->steps;
    if (c->eval_interval) c->train.eval_interval = c->eval_interval;
    c->microbatches = c->train.microbatches;
    c->steps = c->train.steps;
    XDC_CHECK(orch_run_config_check(c, false, errs));
    *out = *c;
    return XDC_OK;
}

/* One folder: made, or already a folder. */
static int mkdir_one(const char *path, int mode)
{
    struct stat sb;
    if (mkdir(path, (mode_t)mode) == 0) return 0;
    int err = errno;
    if (err == EEXIST && stat(path, &sb) == 0) return S_ISDIR(sb.st_mode) ? 0 : ENOTDIR;
    return err;
}

xdc_err_t orch_mkdirs(const char *path, int mode, xdc_diag *diag)
{
    char tmp[1024];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        xdc_diag_set(diag, "folder path longer than %zu bytes: %.64s...", sizeof tmp - 1, path);
        return XDC_ERR_RANGE;
    }
    int err = 0;
    char *p = tmp + 1;
    for (; *p && !err; p++) {
        if (*p != '/') continue;
        *p = '\0';
        err = mkdir_one(tmp, mode); /* on failure tmp stays cut at the parent that failed */
        if (!err) *p = '/';
    }
    if (!err) err = mkdir_one(tmp, mode);
    if (err) {
        xdc_diag_set(diag, "cannot create folder %s: %s", tmp, strerror(err));
        return XDC_ERR_IO;
    }
    return XDC_OK;
}
