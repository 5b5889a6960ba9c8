/* cmd_topo.c — `xdc topo check FILE [--json|--hosts]`: validate a topology file and print a readable
 * summary (regions, nodes, workers, aggregate TFLOP/s, link matrix), the normalized JSON, one line per
 * node for launch scripts, or every error as file:line:col (exit 78). */
#include "orchestrator/cli/xdc_cli.h"

#include "common/xdc_alloc.h"
#include "topology/xdc_topology.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void print_summary(const xdc_topology *t)
{
    int nodes = 0, gpus = 0;
    double tflops = 0;
    for (int r = 0; r < t->n_regions; r++) {
        const xdc_region *g = &t->regions[r];
        nodes += g->n_hosts;
        gpus += g->n_hosts * g->gpus_per_node;
        tflops += xdc_topology_region_workers(t, r) * g->gpu_bf16_tflops;
    }
    printf("topology %s (%s)\n", t->name, t->path);
    printf("  %d regions, %d nodes, %d workers, %d GPUs, %.1f TFLOP/s bf16 in aggregate\n\n", t->n_regions, nodes,
           xdc_topology_total_workers(t), gpus, tflops);
    printf("  %-16s %6s %9s %8s  %-14s %9s %8s %10s  %s\n", "region", "nodes", "gpus/node", "workers", "device",
           "TFLOP/s", "mem GiB", "intra Gb/s", "wan endpoint");
    for (int r = 0; r < t->n_regions; r++) {
        const xdc_region *g = &t->regions[r];
        printf("  %-16s %6d %9d %8d  %-14s %9g %8g %10g  %s\n", g->name, g->n_hosts, g->gpus_per_node,
               xdc_topology_region_workers(t, r), g->gpu_model, g->gpu_bf16_tflops, g->gpu_memory_gib,
               g->intra_bandwidth_gbps, g->wan_endpoint[0] ? g->wan_endpoint : "-");
    }
    if (t->n_regions < 2) return;
    printf("\n  links: bandwidth Gbit/s / RTT ms (row = from, column = to)\n  %-16s", "");
    for (int c = 0; c < t->n_regions; c++) printf(" %16s", t->regions[c].name);
    printf("\n");
    for (int r = 0; r < t->n_regions; r++) {
        printf("  %-16s", t->regions[r].name);
        for (int c = 0; c < t->n_regions; c++) {
            const xdc_link *l = xdc_topology_link(t, r, c);
            char cell[32];
            if (r == c) snprintf(cell, sizeof cell, "-");
            else if (!l) snprintf(cell, sizeof cell, "(none)");
            else snprintf(cell, sizeof cell, "%g/%g", l->bandwidth_gbps, l->rtt_ms);
            printf(" %16s", cell);
        }
        printf("\n");
    }
    printf("\n  %-28s %7s %7s %8s %6s %5s %6s %10s\n", "link", "jitter", "loss%", "streams", "tls", "mtu", "codec",
           "$/GB");
    for (int i = 0; i < t->n_links; i++) {
        const xdc_link *l = &t->links[i];
        char name[64];
        snprintf(name, sizeof name, "%s -> %s", t->regions[l->from].name, t->regions[l->to].name);
        printf("  %-28s %7g %7g %8d %6s %5d %6s %10.3f\n", name, l->jitter_ms, l->loss_pct, l->streams,
               l->tls ? "on" : "off", l->mtu, l->codec, l->cost_usd_per_gb);
    }
}

static int topo_usage(FILE *f)
{
    fprintf(f, "usage: xdc topo check FILE [--json|--hosts]\n"
               "  Validate a topology file; print a summary, or with --json the normalized topology, or with\n"
               "  --hosts one line per node, `REGION NODE HOST` (node = its index in the region), for launch scripts.\n"
               "  Errors are printed as FILE:LINE:COL: error: ... and exit with 78 (EX_CONFIG).\n");
    return f == stdout ? XDC_EX_OK : XDC_EX_USAGE;
}

int xdc_cmd_topo(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "check") != 0) {
        if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) return topo_usage(stdout);
        return topo_usage(stderr);
    }
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'}, {"hosts", no_argument, NULL, 'H'}, {"help", no_argument, NULL, 'h'}, {0}};
    int json = 0, hosts = 0, c;
    optind = 1;
    while ((c = getopt_long(argc - 1, argv + 1, "jh", opts, NULL)) != -1) {
        if (c == 'j') json = 1;
        else if (c == 'H') hosts = 1;
        else if (c == 'h') return topo_usage(stdout);
        else return topo_usage(stderr);
    }
    if (optind != argc - 2 || (json && hosts)) return topo_usage(stderr);
    const char *path = argv[optind + 1];
    xdc_cfg_errors errs;
    xdc_topology *t;
    xdc_err_t rc = xdc_topology_load(path, &t, &errs);
    if (rc != XDC_OK) {
        xdc_cfg_errors_print(&errs, stderr);
        if (errs.count == 0) fprintf(stderr, "%s: error: %s\n", path, xdc_strerror(rc));
        return XDC_EX_CONFIG;
    }
    if (json) {
        char *text;
        rc = xdc_topology_to_json(t, &text);
        if (rc == XDC_OK) printf("%s\n", text);
        xdc_free(text);
    } else if (hosts) {
        for (int r = 0; r < t->n_regions; r++)
            for (int i = 0; i < t->regions[r].n_hosts; i++)
                printf("%s %d %s\n", t->regions[r].name, i, t->regions[r].hosts[i]);
    } else {
        print_summary(t);
    }
    xdc_topology_destroy(t);
    return rc == XDC_OK ? XDC_EX_OK : XDC_EX_SOFTWARE;
}
