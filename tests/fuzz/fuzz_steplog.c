/* fuzz_steplog.c — the step-log reader (RUN/steps/<region>-<rank>.tsv, orchestrator/obs/orch_steplog.h) on arbitrary
 * bytes: it returns OK or CORRUPT, never crashes or reads out of bounds, and the rows it accepts hold
 * finite, non-negative times. */
#include "tests/fuzz/xdc_fuzz.h"

#include "common/xdc_alloc.h"
#include "orchestrator/obs/orch_steplog.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

XDC_FUZZ_TARGET(steplog)
{
    orch_steplog_row *rows = NULL;
    size_t n = 0;
    xdc_err_t rc = orch_steplog_parse((const char *)data, size, "fuzz.tsv", &rows, &n, NULL);
    if (rc == XDC_OK) {
        for (size_t i = 0; i < n; i++)
            if (!(rows[i].step_s >= 0 && isfinite(rows[i].elapsed_s)) || rows[i].step < 0) abort();
    } else if (rc != XDC_ERR_CORRUPT && rc != XDC_ERR_NOMEM) {
        abort();
    }
    xdc_free(rows);
    return 0;
}

/* Rows, validation points and the last row's step and WAN bytes of an accepted log; the message of a
 * refused one. */
XDC_FUZZ_VERDICT(steplog)
{
    orch_steplog_row *rows = NULL;
    size_t n = 0;
    xdc_diag d = {{0}};
    xdc_err_t rc = orch_steplog_parse((const char *)data, size, "corpus.tsv", &rows, &n, &d);
    if (rc != XDC_OK) {
        snprintf(summary, cap, "%s", d.msg);
        return rc;
    }
    int vals = 0;
    for (size_t i = 0; i < n; i++) vals += !isnan(rows[i].val_loss);
    snprintf(summary, cap, "rows=%zu vals=%d last_step=%lld last_bytes=%llu", n, vals,
             n ? (long long)rows[n - 1].step : -1LL, n ? (unsigned long long)rows[n - 1].wan_tx_bytes : 0ULL);
    xdc_free(rows);
    return XDC_OK;
}
