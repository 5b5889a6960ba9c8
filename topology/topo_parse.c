/* topo_parse.c — topology files: schema tables for regions and links, and the validation rules
 * (duplicate or unknown regions, self and duplicate links, disconnected region graph, duplicate hosts
 * after hostlist expansion, ranges). Every error names file, line and column. */
#include "topology/xdc_topology.h"

#include "common/xdc_alloc.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPO_MAX_HOSTS_PER_REGION 65536

static const char *const codec_words[] = {"auto", "none", "bf16", "int8", "int4", "topk", "sparse", NULL};

/* A link's activation_codec names one of the pipeline's activation codecs; their parameters (int8's block,
 * lowrank's ranks) are checked where the codec is built (compression/, orch_worker.c), a layer this one sits below. */
static bool act_codec_named(const char *s)
{
    static const char *const words[] = {"none", "bf16", "int8", "lowrank"};
    size_t n = strcspn(s, ":/");
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strlen(words[i]) == n && strncmp(s, words[i], n) == 0 && (!s[n] || i == 3 || (i == 2 && s[n] == ':')))
            return true;
    return false;
}

typedef struct {
    char name[XDC_NAME_MAX];
    const xdc_cfg_node *regions, *links;
} topo_top;

static const xdc_cfg_field top_fields[] = {
    {"name", XDC_CFG_STRING, offsetof(topo_top, name), XDC_NAME_MAX, true, 0, 0, NULL},
    {"regions", XDC_CFG_NODE, offsetof(topo_top, regions), 0, true, 0, 0, NULL},
    {"links", XDC_CFG_NODE, offsetof(topo_top, links), 0, false, 0, 0, NULL},
};

typedef struct {
    xdc_region r;
    const xdc_cfg_node *gpu, *intra;
} region_in;

static const xdc_cfg_field region_fields[] = {
    {"name", XDC_CFG_STRING, offsetof(region_in, r.name), XDC_NAME_MAX, true, 0, 0, NULL},
    {"nodes", XDC_CFG_STRING, offsetof(region_in, r.nodes_expr), 256, true, 0, 0, NULL},
    {"gpus_per_node", XDC_CFG_INT, offsetof(region_in, r.gpus_per_node), 0, true, 0, 64, NULL},
    {"workers_per_node", XDC_CFG_INT, offsetof(region_in, r.workers_per_node), 0, false, 1, 1024, NULL},
    {"gpu", XDC_CFG_NODE, offsetof(region_in, gpu), 0, true, 0, 0, NULL},
    {"intra", XDC_CFG_NODE, offsetof(region_in, intra), 0, false, 0, 0, NULL},
    {"wan_endpoint", XDC_CFG_STRING, offsetof(region_in, r.wan_endpoint), 256, false, 0, 0, NULL},
};

static const xdc_cfg_field gpu_fields[] = {
    {"model", XDC_CFG_STRING, offsetof(xdc_region, gpu_model), XDC_NAME_MAX, true, 0, 0, NULL},
    {"bf16_tflops", XDC_CFG_DOUBLE, offsetof(xdc_region, gpu_bf16_tflops), 0, true, 1e-6, 1e5, NULL},
    {"memory_gib", XDC_CFG_DOUBLE, offsetof(xdc_region, gpu_memory_gib), 0, true, 1e-3, 1e5, NULL},
};

static const xdc_cfg_field intra_fields[] = {
    {"bandwidth_gbps", XDC_CFG_DOUBLE, offsetof(xdc_region, intra_bandwidth_gbps), 0, true, 1e-3, 1e6, NULL},
    {"latency_us", XDC_CFG_DOUBLE, offsetof(xdc_region, intra_latency_us), 0, false, 0, 1e6, NULL},
};

typedef struct {
    xdc_link l;
    char from[XDC_NAME_MAX], to[XDC_NAME_MAX];
    bool symmetric;
    const xdc_cfg_node *node;
} link_in;

static const xdc_cfg_field link_fields[] = {
    {"from", XDC_CFG_STRING, offsetof(link_in, from), XDC_NAME_MAX, true, 0, 0, NULL},
    {"to", XDC_CFG_STRING, offsetof(link_in, to), XDC_NAME_MAX, true, 0, 0, NULL},
    {"bandwidth_gbps", XDC_CFG_DOUBLE, offsetof(link_in, l.bandwidth_gbps), 0, true, 1e-6, 1e5, NULL},
    {"rtt_ms", XDC_CFG_DOUBLE, offsetof(link_in, l.rtt_ms), 0, true, 0, 10000, NULL},
    {"jitter_ms", XDC_CFG_DOUBLE, offsetof(link_in, l.jitter_ms), 0, false, 0, 10000, NULL},
    /* loss is checked by hand: the rule is 0 <= loss < 100, an open bound the table cannot say. */
    {"loss_pct", XDC_CFG_DOUBLE, offsetof(link_in, l.loss_pct), 0, false, 0, 0, NULL},
    {"mtu", XDC_CFG_INT, offsetof(link_in, l.mtu), 0, false, 576, 65535, NULL},
    {"cost_usd_per_gb", XDC_CFG_DOUBLE, offsetof(link_in, l.cost_usd_per_gb), 0, false, 0, 1000, NULL},
    {"streams", XDC_CFG_INT, offsetof(link_in, l.streams), 0, false, 1, 64, NULL},
    {"tls", XDC_CFG_BOOL, offsetof(link_in, l.tls), 0, false, 0, 0, NULL},
    {"codec", XDC_CFG_STRING, offsetof(link_in, l.codec), 16, false, 0, 0, codec_words},
    {"activation_codec", XDC_CFG_STRING, offsetof(link_in, l.act_codec), 32, false, 0, 0, NULL},
    {"symmetric", XDC_CFG_BOOL, offsetof(link_in, symmetric), 0, false, 0, 0, NULL},
};

#define N_FIELDS(t) (sizeof(t) / sizeof((t)[0]))

/* Where an error about `key` of mapping `map` points: its value, or the mapping itself when absent. */
static const xdc_cfg_node *value_node(const xdc_cfg_node *map, const char *key)
{
    const xdc_cfg_node *v = xdc_cfg_map_get(map, key);
    return v ? v : map;
}

static bool has_key(const xdc_cfg_node *map, const char *key) { return xdc_cfg_map_get(map, key) != NULL; }

static int find_region(const xdc_region *r, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].name, name) == 0) return i;
    return -1;
}

static void parse_regions(const xdc_cfg_node *seq, xdc_topology *t, xdc_cfg_errors *errs)
{
    int n = xdc_cfg_seq_len(seq);
    if (xdc_cfg_node_kind(seq) != XDC_CFG_SEQUENCE || n == 0) {
        xdc_cfg_error_at(errs, seq, "regions: expected a non-empty list of regions");
        return;
    }
    if (n > XDC_TOPO_MAX_REGIONS) {
        xdc_cfg_error_at(errs, seq, "regions: %d regions, at most %d are supported", n, XDC_TOPO_MAX_REGIONS);
        return;
    }
    t->regions = xdc_calloc((size_t)n, sizeof *t->regions);
    if (!t->regions) return;
    for (int i = 0; i < n; i++) {
        const xdc_cfg_node *item = xdc_cfg_seq_item(seq, i);
        region_in in = {0};
        in.r.intra_bandwidth_gbps = 100.0;
        in.r.intra_latency_us = 5.0;
        int bad = xdc_cfg_map_fields(item, region_fields, N_FIELDS(region_fields), &in, errs);
        if (in.gpu) bad += xdc_cfg_map_fields(in.gpu, gpu_fields, N_FIELDS(gpu_fields), &in.r, errs);
        if (in.intra) bad += xdc_cfg_map_fields(in.intra, intra_fields, N_FIELDS(intra_fields), &in.r, errs);
        in.r.line = xdc_cfg_node_line(item);
        in.r.col = xdc_cfg_node_col(item);
        if (in.r.name[0] && find_region(t->regions, t->n_regions, in.r.name) >= 0) {
            int first = find_region(t->regions, t->n_regions, in.r.name);
            xdc_cfg_error_at(errs, value_node(item, "name"), "duplicate region '%s' (first declared at line %d)",
                             in.r.name, t->regions[first].line);
            bad++;
        }
        if (!has_key(item, "workers_per_node")) {
            if (in.r.gpus_per_node == 0 && has_key(item, "gpus_per_node")) {
                xdc_cfg_error_at(errs, item, "region '%s': workers_per_node is required when gpus_per_node is 0",
                                 in.r.name);
                bad++;
            }
            in.r.workers_per_node = in.r.gpus_per_node;
        } else if (in.r.gpus_per_node > 0 && in.r.workers_per_node != in.r.gpus_per_node) {
            xdc_cfg_error_at(errs, value_node(item, "workers_per_node"),
                             "region '%s': workers_per_node (%d) must equal gpus_per_node (%d) on GPU nodes", in.r.name,
                             in.r.workers_per_node, in.r.gpus_per_node);
            bad++;
        }
        if (in.r.nodes_expr[0]) {
            xdc_diag d = {{0}};
            if (xdc_hostlist_expand(in.r.nodes_expr, TOPO_MAX_HOSTS_PER_REGION, &in.r.hosts, &in.r.n_hosts, &d) !=
                XDC_OK) {
                xdc_cfg_error_at(errs, value_node(item, "nodes"), "nodes: %s", d.msg);
                bad++;
            }
        }
        t->regions[t->n_regions++] = in.r; /* kept even when bad, so later rules still see the name */
        (void)bad;
    }
}

static int cmp_str_ptr(const void *a, const void *b)
{
    const char *const *x = a, *const *y = b;
    int c = strcmp(x[0], y[0]);
    return c ? c : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Duplicate hosts across or within regions. Entries are (host, region-name) pointer pairs, sorted. */
static void check_duplicate_hosts(const xdc_cfg_node *seq, const xdc_topology *t, xdc_cfg_errors *errs)
{
    size_t total = 0;
    for (int i = 0; i < t->n_regions; i++) total += (size_t)t->regions[i].n_hosts;
    if (total < 2) return;
    const char **pairs = xdc_malloc(total * 2 * sizeof *pairs); /* (total, 2): host, region name */
    if (!pairs) return;
    size_t k = 0;
    for (int i = 0; i < t->n_regions; i++)
        for (int h = 0; h < t->regions[i].n_hosts; h++) {
            pairs[2 * k] = t->regions[i].hosts[h];
            pairs[2 * k + 1] = t->regions[i].name;
            k++;
        }
    qsort(pairs, total, 2 * sizeof *pairs, cmp_str_ptr);
    int reported = 0;
    for (size_t i = 1; i < total && reported < 4; i++) {
        if (strcmp(pairs[2 * i], pairs[2 * i - 2]) != 0) continue;
        int r = find_region(t->regions, t->n_regions, pairs[2 * i + 1]);
        const xdc_cfg_node *item = xdc_cfg_seq_item(seq, r);
        if (strcmp(pairs[2 * i + 1], pairs[2 * i - 1]) == 0)
            xdc_cfg_error_at(errs, value_node(item, "nodes"), "host '%s' appears twice in region '%s'", pairs[2 * i],
                             pairs[2 * i + 1]);
        else
            xdc_cfg_error_at(errs, value_node(item, "nodes"), "host '%s' is in both region '%s' and region '%s'",
                             pairs[2 * i], pairs[2 * i - 1], pairs[2 * i + 1]);
        reported++;
    }
    xdc_free(pairs);
}

static int find_link(const xdc_link *l, int n, int from, int to)
{
    for (int i = 0; i < n; i++)
        if (l[i].from == from && l[i].to == to) return i;
    return -1;
}

static void parse_links(const xdc_cfg_node *seq, xdc_topology *t, xdc_cfg_errors *errs)
{
    int n = xdc_cfg_seq_len(seq);
    if (seq && xdc_cfg_node_kind(seq) != XDC_CFG_SEQUENCE) {
        xdc_cfg_error_at(errs, seq, "links: expected a list of links");
        return;
    }
    if (n == 0) return;
    link_in *in = xdc_calloc((size_t)n, sizeof *in);
    t->links = xdc_calloc((size_t)n * 2, sizeof *t->links);
    if (!in || !t->links) {
        xdc_free(in);
        return;
    }
    int n_in = 0;
    for (int i = 0; i < n; i++) {
        const xdc_cfg_node *item = xdc_cfg_seq_item(seq, i);
        link_in li = {0};
        li.l.mtu = 1500;
        li.l.streams = 4;
        li.l.tls = true;
        li.symmetric = true;
        snprintf(li.l.codec, sizeof li.l.codec, "auto");
        li.node = item;
        if (xdc_cfg_map_fields(item, link_fields, N_FIELDS(link_fields), &li, errs) != 0) continue;
        if (!li.l.tls) {
            /* docs/config.md, "Links": the key stays so files can say so, but only true is accepted. */
            xdc_cfg_error_at(errs, value_node(item, "tls"),
                             "tls: false is not supported: WAN links are always TLS 1.3 with mutual authentication, "
                             "because cross-datacenter traffic crosses networks xdc does not control (a plain TCP "
                             "transport is a future option); write tls: true or leave the key out");
            continue;
        }
        li.l.line = xdc_cfg_node_line(item);
        li.l.col = xdc_cfg_node_col(item);
        if (li.l.act_codec[0] && !act_codec_named(li.l.act_codec)) {
            xdc_cfg_error_at(errs, value_node(item, "activation_codec"),
                             "link %s -> %s: activation_codec '%s' is not one of none, bf16, int8[:BLOCK], "
                             "lowrank[:...]",
                             li.from, li.to, li.l.act_codec);
            continue;
        }
        if (li.l.loss_pct < 0 || li.l.loss_pct >= 100) {
            xdc_cfg_error_at(errs, value_node(item, "loss_pct"), "loss_pct: %g is out of range (0 <= loss_pct < 100)",
                             li.l.loss_pct);
            continue;
        }
        li.l.from = find_region(t->regions, t->n_regions, li.from);
        li.l.to = find_region(t->regions, t->n_regions, li.to);
        bool ok = true;
        if (li.l.from < 0) {
            xdc_cfg_error_at(errs, value_node(item, "from"), "link from unknown region '%s'", li.from);
            ok = false;
        }
        if (li.l.to < 0) {
            xdc_cfg_error_at(errs, value_node(item, "to"), "link to unknown region '%s'", li.to);
            ok = false;
        }
        if (ok && li.l.from == li.l.to) {
            xdc_cfg_error_at(errs, item, "link from region '%s' to itself", li.from);
            ok = false;
        }
        if (ok && find_link(t->links, t->n_links, li.l.from, li.l.to) >= 0) {
            int prev = find_link(t->links, t->n_links, li.l.from, li.l.to);
            xdc_cfg_error_at(errs, item, "duplicate link %s -> %s (first declared at line %d)", li.from, li.to,
                             t->links[prev].line);
            ok = false;
        }
        if (!ok) continue;
        t->links[t->n_links++] = li.l;
        in[n_in++] = li;
    }
    /* Mirror symmetric links whose reverse direction was not written out explicitly. */
    for (int i = 0; i < n_in; i++) {
        if (!in[i].symmetric || find_link(t->links, t->n_links, in[i].l.to, in[i].l.from) >= 0) continue;
        xdc_link rev = in[i].l;
        rev.from = in[i].l.to;
        rev.to = in[i].l.from;
        t->links[t->n_links++] = rev;
    }
    xdc_free(in);
}

/* Every region must reach every other one, following links in either direction. */
static void check_connected(const xdc_cfg_node *seq, const xdc_topology *t, xdc_cfg_errors *errs)
{
    if (t->n_regions < 2) return;
    int *seen = xdc_calloc((size_t)t->n_regions, sizeof *seen),
        *queue = xdc_malloc((size_t)t->n_regions * sizeof *queue);
    if (!seen || !queue) goto out;
    int head = 0, tail = 0;
    seen[0] = 1;
    queue[tail++] = 0;
    while (head < tail) {
        int r = queue[head++];
        for (int i = 0; i < t->n_links; i++) {
            int o = t->links[i].from == r ? t->links[i].to : t->links[i].to == r ? t->links[i].from : -1;
            if (o >= 0 && !seen[o]) {
                seen[o] = 1;
                queue[tail++] = o;
            }
        }
    }
    for (int r = 0; r < t->n_regions; r++)
        if (!seen[r])
            xdc_cfg_error_at(errs, xdc_cfg_seq_item(seq, r),
                             "region '%s' is not connected to region '%s' by any chain of links", t->regions[r].name,
                             t->regions[0].name);
out:
    xdc_free(seen);
    xdc_free(queue);
}

xdc_err_t xdc_topology_parse(const char *text, size_t len, const char *name, xdc_topology **out, xdc_cfg_errors *errs)
{
    *out = NULL;
    xdc_cfg_errors local;
    if (!errs) errs = &local;
    xdc_cfg_errors_init(errs, name);
    xdc_cfg_doc *doc;
    XDC_CHECK(xdc_cfg_parse(text, len, &doc, errs));
    xdc_topology *t = xdc_calloc(1, sizeof *t);
    if (!t) {
        xdc_cfg_destroy(doc);
        return XDC_ERR_NOMEM;
    }
    snprintf(t->path, sizeof t->path, "%s", name ? name : "<memory>");
    topo_top top = {0};
    const xdc_cfg_node *root = xdc_cfg_root(doc);
    int before = errs->count;
    xdc_cfg_map_fields(root, top_fields, N_FIELDS(top_fields), &top, errs);
    snprintf(t->name, sizeof t->name, "%s", top.name);
    if (top.regions) {
        parse_regions(top.regions, t, errs);
        check_duplicate_hosts(top.regions, t, errs);
        if (top.links) parse_links(top.links, t, errs);
        if (errs->count == before) check_connected(top.regions, t, errs);
    }
    xdc_cfg_destroy(doc);
    if (errs->count > 0 || errs->dropped > 0) {
        xdc_topology_destroy(t);
        return XDC_ERR_CONFIG;
    }
    *out = t;
    return XDC_OK;
}

xdc_err_t xdc_topology_load(const char *path, xdc_topology **out, xdc_cfg_errors *errs)
{
    *out = NULL;
    xdc_cfg_errors local;
    if (!errs) errs = &local;
    xdc_cfg_errors_init(errs, path);
    char *text;
    size_t len;
    XDC_CHECK(xdc_cfg_read_file(path, &text, &len, errs));
    xdc_err_t rc = xdc_topology_parse(text, len, path, out, errs);
    xdc_free(text);
    return rc;
}

void xdc_topology_destroy(xdc_topology *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_regions; i++) xdc_hostlist_free(t->regions[i].hosts, t->regions[i].n_hosts);
    xdc_free(t->regions);
    xdc_free(t->links);
    xdc_free(t);
}

int xdc_topology_region_index(const xdc_topology *t, const char *name)
{
    return find_region(t->regions, t->n_regions, name);
}

const xdc_link *xdc_topology_link(const xdc_topology *t, int from, int to)
{
    int i = find_link(t->links, t->n_links, from, to);
    return i < 0 ? NULL : &t->links[i];
}

int xdc_topology_region_workers(const xdc_topology *t, int region)
{
    return t->regions[region].n_hosts * t->regions[region].workers_per_node;
}

int xdc_topology_first_worker(const xdc_topology *t, int region)
{
    int n = 0;
    for (int r = 0; r < region; r++) n += xdc_topology_region_workers(t, r);
    return n;
}

int xdc_topology_total_workers(const xdc_topology *t) { return xdc_topology_first_worker(t, t->n_regions); }
