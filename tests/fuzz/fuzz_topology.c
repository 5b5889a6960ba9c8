/* fuzz_topology.c — the topology parser on arbitrary bytes: it must return OK or CONFIG, never crash,
 * leak or read out of bounds, and a topology it accepts must pass its own invariants. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_alloc.h"
#include "topology/xdc_topology.h"

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
