/* topo_write.c — a loaded topology written back as a topology file (YAML) that xdc_topology_load reads
 * again: every default filled in and every link written per direction (`symmetric: false`), so a
 * caller may change one direction's figures (what `xdc doctor --write-topology` does with measured
 * ones) and the file says exactly that. Comments of the original are not kept. */
#include "topology/xdc_topology.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* A double-quoted YAML scalar: backslash and quote escaped (names and host lists hold nothing else). */
static void put_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void put_region(FILE *f, const xdc_region *g)
{
    fprintf(f, "  - name: ");
    put_str(f, g->name);
    fprintf(f, "\n    nodes: ");
    put_str(f, g->nodes_expr);
    fprintf(f, "\n    gpus_per_node: %d\n    workers_per_node: %d\n    gpu: {model: ", g->gpus_per_node,
            g->workers_per_node);
    put_str(f, g->gpu_model);
    fprintf(f, ", bf16_tflops: %.9g, memory_gib: %.9g}\n", g->gpu_bf16_tflops, g->gpu_memory_gib);
    fprintf(f, "    intra: {bandwidth_gbps: %.9g, latency_us: %.9g}\n", g->intra_bandwidth_gbps, g->intra_latency_us);
    if (g->wan_endpoint[0]) {
        fprintf(f, "    wan_endpoint: ");
        put_str(f, g->wan_endpoint);
        fputc('\n', f);
    }
}

static void put_link(FILE *f, const xdc_topology *t, const xdc_link *l)
{
    fprintf(f, "  - from: ");
    put_str(f, t->regions[l->from].name);
    fprintf(f, "\n    to: ");
    put_str(f, t->regions[l->to].name);
    fprintf(
        f,
        "\n    symmetric: false\n    bandwidth_gbps: %.9g\n    rtt_ms: %.9g\n    jitter_ms: %.9g\n    loss_pct: %.9g\n"
        "    mtu: %d\n    cost_usd_per_gb: %.9g\n    streams: %d\n    tls: true\n    codec: %s\n",
        l->bandwidth_gbps, l->rtt_ms, l->jitter_ms, l->loss_pct, l->mtu, l->cost_usd_per_gb, l->streams, l->codec);
    if (l->act_codec[0]) fprintf(f, "    activation_codec: %s\n", l->act_codec);
}

xdc_err_t xdc_topology_write(const xdc_topology *t, const char *header, const char *path, xdc_diag *diag)
{
    FILE *f = fopen(path, "wx"); /* never over an existing file: it may be the topology itself */
    if (!f) {
        xdc_diag_set(diag, "cannot create %s: %s", path, strerror(errno));
        return XDC_ERR_IO;
    }
    if (header) {
        for (const char *s = header; *s;) {
            const char *nl = strchr(s, '\n');
            size_t n = nl ? (size_t)(nl - s) : strlen(s);
            fprintf(f, "# %.*s\n", (int)n, s);
            s += n + (nl != NULL);
        }
    }
    fprintf(f, "name: ");
    put_str(f, t->name);
    fprintf(f, "\nregions:\n");
    for (int r = 0; r < t->n_regions; r++) put_region(f, &t->regions[r]);
    if (t->n_links) fprintf(f, "links:\n");
    for (int i = 0; i < t->n_links; i++) put_link(f, t, &t->links[i]);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        xdc_diag_set(diag, "cannot write %s: %s", path, strerror(errno));
        return XDC_ERR_IO;
    }
    return XDC_OK;
}
