/* xdc_topology.h — the topology file: regions (nodes as Slurm hostlists, GPUs, intra fabric, WAN
 * endpoint) and directional links between them. One file drives the planner, the launcher and the WAN
 * emulator. The loaded topology is read-only and its layout is public: callers index the arrays. */
#ifndef XDC_TOPOLOGY_H
#define XDC_TOPOLOGY_H

#include "common/xdc_err.h"
#include "config/xdc_config.h"

#include <stdbool.h>
#include <stddef.h>

#define XDC_NAME_MAX         64
#define XDC_TOPO_MAX_REGIONS 256

typedef struct xdc_region {
    char name[XDC_NAME_MAX];
    char nodes_expr[256]; /* as written: "gpu-use1-[001-016]" */
    char **hosts;         /* (n_hosts) expanded host names */
    int n_hosts;
    int gpus_per_node;    /* 0: CPU workers only */
    int workers_per_node; /* worker processes per node; defaults to gpus_per_node */
    char gpu_model[XDC_NAME_MAX];
    double gpu_bf16_tflops; /* per worker, dense bf16 TFLOP/s */
    double gpu_memory_gib;  /* per worker */
    double intra_bandwidth_gbps;
    double intra_latency_us;
    char wan_endpoint[256]; /* "host:port" other regions dial; empty when not set */
    int line, col;          /* where the region was declared */
} xdc_region;

typedef struct xdc_link {
    int from, to; /* region indices; one entry per direction */
    double bandwidth_gbps;
    double rtt_ms;
    double jitter_ms;
    double loss_pct;        /* [0, 100) */
    int mtu;                /* bytes */
    double cost_usd_per_gb; /* egress cost from `from` */
    int streams;            /* TCP streams per peer pair */
    bool tls;               /* always true: WAN links are TLS 1.3; `tls: false` is refused (docs/config.md) */
    char codec[16];         /* none|bf16|int8|int4|topk|auto: gradients crossing the link */
    /* activations of a pipeline cut over the link (span_regions): none|bf16|int8[:block]|lowrank[...]; "" the
     * run file's activation_codec (orch_run_config_act_codec: the cut's codec, either direction's entry) */
    char act_codec[32];
    int line, col;
} xdc_link;

typedef struct xdc_topology {
    char path[512]; /* file it came from ("<memory>" for a buffer) */
    char name[XDC_NAME_MAX];
    xdc_region *regions; /* (n_regions) */
    int n_regions;
    xdc_link *links; /* (n_links) directional; symmetric links appear twice */
    int n_links;
} xdc_topology;

/* Load and validate a topology file. On a syntax or rule error returns XDC_ERR_CONFIG with every error
 * found in `errs` (may be NULL); `*out` is set only on success. */
xdc_err_t xdc_topology_load(const char *path, xdc_topology **out, xdc_cfg_errors *errs);
/* The same from a buffer; `name` is used as the file name in messages. */
xdc_err_t xdc_topology_parse(const char *text, size_t len, const char *name, xdc_topology **out, xdc_cfg_errors *errs);
void xdc_topology_destroy(xdc_topology *t);


int xdc_topology_region_index(const xdc_topology *t, const char *name);
/* The directional link from -> to, or NULL when the regions are not directly linked. */
const xdc_link *xdc_topology_link(const xdc_topology *t, int from, int to);
/* The routes of the cross-region exchange over the links that exist (a star, a chain, any connected graph)
 * among the regions in `in` (n_regions, 1 = taking part; NULL: all): parent (n_regions * n_regions, written)
 * gets, at [src * n_regions + dst], the region dst receives src's data from: src itself over a direct link,
 * else a region of `in` that relays it (one hop nearer src along a tree of fewest hops per source, the widest
 * last link breaking ties); -1 at dst == src and wherever src or dst is not in `in`. Deterministic: every
 * process computes the same routes. XDC_ERR_CONFIG when the regions of `in` are not connected among
 * themselves (validation refuses such files for all regions), XDC_ERR_NOMEM. */
xdc_err_t xdc_topology_routes(const xdc_topology *t, const unsigned char *in, int *parent);
/* How many links src's data crosses to reach dst along `parent` (xdc_topology_routes); 0 at dst == src. */
int xdc_topology_route_hops(const xdc_topology *t, const int *parent, int src, int dst);
/* Total workers (nodes x workers_per_node) in a region, and in the whole topology. */
int xdc_topology_region_workers(const xdc_topology *t, int region);
/* The global rank of region `region`'s first worker: the workers of the regions before it, in topology order. */
int xdc_topology_first_worker(const xdc_topology *t, int region);
int xdc_topology_total_workers(const xdc_topology *t);

/* Write `t` as a topology file at `path` (created; an existing file is refused: XDC_ERR_IO naming it), every
 * default filled in and each link per direction (`symmetric: false`); `header` (may be NULL) becomes
 * comment lines at the top. xdc_topology_load reads it back to the same figures. topo_write.c. */
xdc_err_t xdc_topology_write(const xdc_topology *t, const char *header, const char *path, xdc_diag *diag);

/* Normalized topology as a JSON text (jansson); caller frees with xdc_free. */
xdc_err_t xdc_topology_to_json(const xdc_topology *t, char **out);

/* Expand a Slurm hostlist ("a[01-03,7],b" -> a01 a02 a03 a7 b). At most `max_hosts` names; more is
 * XDC_ERR_RANGE. `*hosts` is an array of strings freed with xdc_hostlist_free. */
xdc_err_t xdc_hostlist_expand(const char *expr, size_t max_hosts, char ***hosts, int *n_hosts, xdc_diag *diag);
void xdc_hostlist_free(char **hosts, int n_hosts);

#endif /* XDC_TOPOLOGY_H */
