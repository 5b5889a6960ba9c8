/* topo_route.c — the routes of the cross-region exchange over the links that exist (xdc_topology_routes):
 * per source region, a tree of fewest hops, each region's parent the linked region one hop nearer the
 * source whose link to it is the widest (then the lowest index). Every process computes the same trees
 * from the same file, so the relays agree without a message. */
#include "topology/xdc_topology.h"

#include "common/xdc_alloc.h"

#include <string.h>

xdc_err_t xdc_topology_routes(const xdc_topology *t, const unsigned char *in, int *parent)
{
    int n = t->n_regions;
    int *hops = xdc_malloc((size_t)n * sizeof *hops), *queue = xdc_malloc((size_t)n * sizeof *queue);
    xdc_err_t rc = hops && queue ? XDC_OK : XDC_ERR_NOMEM;
    int n_in = 0;
    for (int d = 0; d < n; d++) n_in += !in || in[d];
    for (int s = 0; s < n && rc == XDC_OK; s++) {
        int *par = parent + (size_t)s * (size_t)n;
        for (int d = 0; d < n; d++) hops[d] = -1, par[d] = -1;
        if (in && !in[s]) continue;
        int head = 0, tail = 0;
        hops[s] = 0;
        queue[tail++] = s;
        while (head < tail) { /* breadth first: a region's hop count is final when it is queued */
            int r = queue[head++];
            for (int i = 0; i < t->n_links; i++) {
                const xdc_link *l = &t->links[i];
                int d = l->to;
                if (l->from != r || (in && !in[d]) || (hops[d] >= 0 && hops[d] <= hops[r])) continue;
                if (hops[d] < 0) {
                    hops[d] = hops[r] + 1;
                    queue[tail++] = d;
                    par[d] = r;
                } else if (l->bandwidth_gbps > xdc_topology_link(t, par[d], d)->bandwidth_gbps ||
                           (l->bandwidth_gbps == xdc_topology_link(t, par[d], d)->bandwidth_gbps && r < par[d])) {
                    par[d] = r; /* as few hops, a wider last link (then the lower index) */
                }
            }
        }
        if (tail < n_in) rc = XDC_ERR_CONFIG;
    }
    xdc_free(hops);
    xdc_free(queue);
    return rc;
}

int xdc_topology_route_hops(const xdc_topology *t, const int *parent, int src, int dst)
{
    int h = 0;
    for (int d = dst; d != src; d = parent[(size_t)src * (size_t)t->n_regions + (size_t)d]) h++;
    return h;
}
