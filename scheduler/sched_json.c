/* topo_plan_json.c — a plan set as JSON (jansson): the chosen plan with its stages, predictions and
 * layout, then the runners-up with why each lost. What `xdc plan --json` prints. */
#include "scheduler/xdc_plan.h"

#include "common/xdc_alloc.h"

#include <jansson.h>
#include <string.h>

static json_t *plan_json(const xdc_topology *t, const xdc_plan *p)
{
    json_t *stages = json_array(), *replicas = json_object(), *cuts = json_array();
    for (int i = 0; i < p->stages; i++) {
        const xdc_plan_stage *s = &p->stage[i];
        json_array_append_new(stages, json_pack("{s:s, s:i, s:i, s:f, s:f, s:i, s:f, s:f}", "region",
                                                s->region >= 0 ? t->regions[s->region].name : "*", "layer_begin",
                                                s->layer_begin, "layer_end", s->layer_end, "params", s->params,
                                                "memory_gib", s->mem_gib, "inflight", s->inflight, "activation_bytes",
                                                s->act_bytes, "boundary_bytes", s->boundary_bytes));
    }
    for (int r = 0; r < t->n_regions; r++)
        if (p->replicas[r] > 0) json_object_set_new(replicas, t->regions[r].name, json_integer(p->replicas[r]));
    for (int i = 0; p->mode == XDC_PLAN_PIPELINE && i + 1 < p->n_chain; i++)
        json_array_append_new(cuts, json_pack("{s:s, s:s, s:i}", "from", t->regions[p->chain[i]].name, "to",
                                              t->regions[p->chain[i + 1]].name, "first_layer_after", p->cut_layer[i]));
    json_t *j = json_pack(
        "{s:s, s:i, s:i, s:o, s:o, s:o, s:i, s:i, s:i, s:f, s:s, s:i, s:i, s:b, s:s, s:f, s:i, s:i,"
        " s:{s:f, s:f, s:f, s:f, s:f}, s:f, s:f, s:f, s:f, s:f, s:s}",
        "mode", xdc_plan_mode_name(p->mode), "stages", p->stages, "chunks", p->chunks, "replicas", replicas,
        "stage_layout", stages, "wan_cuts", cuts, "microbatches", p->microbatches, "micro_batch", p->micro_batch,
        "seq_len", p->seq_len, "bucket_mb", p->bucket_mb, "codec", p->codec, "inner_steps", p->inner_steps, "fragments",
        p->fragments, "keep_unsent", p->keep_unsent, "final_codec", p->final_codec, "outer_lr", p->outer_lr,
        "delay_steps", p->delay_steps, "fidelity", p->fidelity, "predicted_s", "step", p->t_step, "compute",
        p->t_compute, "intra", p->t_intra, "exposed_wan", p->t_wan_exposed, "bubble", p->t_bubble, "tokens_per_step",
        p->tokens, "tokens_per_s", p->tokens / p->t_step, "wan_bytes_per_step", p->wan_bytes, "egress_usd_per_step",
        p->egress_usd, "memory_gib_max", p->mem_gib_max, "why", p->why);
    /* Unequal replicas only (xdc_plan.replica_mb): microbatches per replica of each taking-part region. */
    json_t *split = json_object();
    for (int r = 0; r < t->n_regions; r++)
        if (p->replicas[r] > 0 && p->replica_mb[r] > 0)
            json_object_set_new(split, t->regions[r].name, json_integer(p->replica_mb[r]));
    if (j && json_object_size(split)) json_object_set_new(j, "microbatches_per_replica", split);
    else json_decref(split);
    /* DiLoCo only: overlapped rounds, and nobody waits with each taking-part region's inner steps per round. */
    if (j && p->mode == XDC_PLAN_DILOCO) {
        json_t *steps = json_object();
        for (int r = 0; r < t->n_regions; r++)
            if (p->nobody_waits && p->replicas[r] > 0)
                json_object_set_new(steps, t->regions[r].name, json_integer(p->round_steps[r]));
        json_object_set_new(j, "overlap_steps", json_integer(p->overlap_steps));
        json_object_set_new(j, "nobody_waits", json_boolean(p->nobody_waits));
        json_object_set_new(j, "round_steps", steps);
    }
    return j;
}

static json_t *link_codecs_json(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan_opts *o,
                                const xdc_plan *p)
{
    json_t *a = json_array();
    for (int i = 0; i < t->n_links; i++) {
        char codec[16];
        double sec;
        const xdc_link *l = &t->links[i];
        xdc_plan_link_codec(t, m, p, &o->calib, l->from, l->to, o->tolerance, codec, &sec);
        if (codec[0])
            json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:f}", "from", t->regions[l->from].name, "to",
                                               t->regions[l->to].name, "codec", codec, "seconds_per_round", sec));
    }
    return a;
}

xdc_err_t xdc_plan_to_json(const xdc_topology *t, const xdc_model_shape *m, const xdc_plan_opts *o,
                           const xdc_plan_set *s, int max_alt, char **out)
{
    *out = NULL;
    json_t *alts = json_array(), *best = plan_json(t, &s->best);
    for (int i = 1; i < s->n_cands && i <= max_alt; i++) json_array_append_new(alts, plan_json(t, &s->cands[i]));
    json_object_set_new(best, "link_codecs", link_codecs_json(t, m, o, &s->best));
    json_t *root = json_pack("{s:s, s:o, s:o, s:i, s:i, s:s}", "topology", t->path, "plan", best, "runners_up", alts,
                             "candidates_evaluated", s->n_evaluated, "candidates_rejected", s->n_rejected,
                             "most_common_rejection", s->reject_reason);
    if (!root) return XDC_ERR_NOMEM;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return XDC_ERR_NOMEM;
    size_t n = strlen(text);
    *out = xdc_malloc(n + 1);
    if (*out) memcpy(*out, text, n + 1);
    free(text);
    return *out ? XDC_OK : XDC_ERR_NOMEM;
}
