/* fuzz_topology.c — the topology parser on arbitrary bytes: it must return OK or CONFIG, never crash,
 * leak or read out of bounds, and a topology it accepts must pass its own invariants. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_alloc.h"
#include "topology/xdc_topology.h"

#include <stdio.h>
#include <stdlib.h>

XDC_FUZZ_TARGET(topology)
{
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    xdc_err_t rc = xdc_topology_parse((const char *)data, size, "fuzz.yaml", &t, &errs);
    if (rc == XDC_OK) {
        /* Invariants of an accepted topology. */
        if (t->n_regions < 1) abort();
        for (int i = 0; i < t->n_links; i++)
            if (t->links[i].from == t->links[i].to || t->links[i].from < 0 || t->links[i].to >= t->n_regions) abort();
        char *json = NULL;
        if (xdc_topology_to_json(t, &json) == XDC_OK) xdc_free(json);
        xdc_topology_destroy(t);
    } else if (rc != XDC_ERR_CONFIG && rc != XDC_ERR_NOMEM) {
        abort();
    }
    return 0;
}

/* Regions and links of an accepted file; the first error (line:col: message) of a refused one. */
XDC_FUZZ_VERDICT(topology)
{
    xdc_topology *t = NULL;
    xdc_cfg_errors errs;
    xdc_err_t rc = xdc_topology_parse((const char *)data, size, "corpus.yaml", &t, &errs);
    if (rc != XDC_OK) {
        if (errs.count > 0)
            snprintf(summary, cap, "%d errors, first %d:%d: %s", errs.count, errs.items[0].line, errs.items[0].col,
                     errs.items[0].msg);
        return rc;
    }
    int n = snprintf(summary, cap, "regions=%d links=%d:", t->n_regions, t->n_links);
    for (int r = 0; r < t->n_regions && n > 0 && (size_t)n < cap; r++)
        n += snprintf(summary + n, cap - (size_t)n, " %s", t->regions[r].name);
    xdc_topology_destroy(t);
    return XDC_OK;
}
