/* topo_json.c — the normalized topology as JSON (jansson): every default filled in, hostlists expanded,
 * symmetric links written out in both directions. What `xdc topo check --json` prints. */
#include "topology/xdc_topology.h"

#include "common/xdc_alloc.h"

#include <jansson.h>
#include <string.h>

static json_t *region_json(const xdc_topology *t, int r)
{
    const xdc_region *g = &t->regions[r];
    json_t *hosts = json_array();
    for (int h = 0; h < g->n_hosts; h++) json_array_append_new(hosts, json_string(g->hosts[h]));
    return json_pack("{s:s, s:s, s:o, s:i, s:i, s:i, s:{s:s, s:f, s:f}, s:{s:f, s:f}, s:s}", "name", g->name, "nodes",
                     g->nodes_expr, "hosts", hosts, "gpus_per_node", g->gpus_per_node, "workers_per_node",
                     g->workers_per_node, "workers", xdc_topology_region_workers(t, r), "gpu", "model", g->gpu_model,
                     "bf16_tflops", g->gpu_bf16_tflops, "memory_gib", g->gpu_memory_gib, "intra", "bandwidth_gbps",
                     g->intra_bandwidth_gbps, "latency_us", g->intra_latency_us, "wan_endpoint", g->wan_endpoint);
}

static json_t *link_json(const xdc_topology *t, const xdc_link *l)
{
    /* activation_codec: "" where the link leaves the cut to the run file */
    return json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:i, s:f, s:i, s:b, s:s, s:s}", "from", t->regions[l->from].name,
                     "to", t->regions[l->to].name, "bandwidth_gbps", l->bandwidth_gbps, "rtt_ms", l->rtt_ms,
                     "jitter_ms", l->jitter_ms, "loss_pct", l->loss_pct, "mtu", l->mtu, "cost_usd_per_gb",
                     l->cost_usd_per_gb, "streams", l->streams, "tls", l->tls, "codec", l->codec, "activation_codec",
                     l->act_codec);
}

xdc_err_t xdc_topology_to_json(const xdc_topology *t, char **out)
{
    *out = NULL;
    json_t *regions = json_array(), *links = json_array();
    for (int r = 0; r < t->n_regions; r++) json_array_append_new(regions, region_json(t, r));
    for (int i = 0; i < t->n_links; i++) json_array_append_new(links, link_json(t, &t->links[i]));
    json_t *root = json_pack("{s:s, s:s, s:i, s:o, s:o}", "name", t->name, "path", t->path, "workers",
                             xdc_topology_total_workers(t), "regions", regions, "links", links);
    if (!root) return XDC_ERR_NOMEM;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!text) return XDC_ERR_NOMEM;
    /* Hand back memory the caller frees with xdc_free, whatever allocator jansson was built with. */
    *out = xdc_strdup(text);
    free(text);
    return *out ? XDC_OK : XDC_ERR_NOMEM;
}
