/* orch_steplog.h — the per-step record every worker writes into its run folder,
 * RUN/steps/<region>-<rank>.tsv, and its reader (`xdc report` draws from it).
 *
 * One tab-separated line per optimizer step after a header line:
 *   step elapsed_s step_s compute_s intra_s wan_exposed_s wan_tx_bytes val_loss
 * Times are seconds (elapsed_s since the training loop started on this worker), wan_tx_bytes is this
 * worker's cumulative WAN payload acknowledged by its peers, val_loss is "-" on steps without an
 * evaluation. Whatever a step spends outside compute, intra and exposed WAN (pipeline bubble, waits on
 * the other stage) is step_s minus those three. */
#ifndef ORCH_STEPLOG_H
#define ORCH_STEPLOG_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

#define ORCH_STEPLOG_HEADER "step\telapsed_s\tstep_s\tcompute_s\tintra_s\twan_exposed_s\twan_tx_bytes\tval_loss"

typedef struct orch_steplog_row {
    int64_t step;
    double elapsed_s, step_s, compute_s, intra_s, wan_exposed_s; /* seconds */
    uint64_t wan_tx_bytes;                                       /* cumulative, bytes */
    double val_loss;                                             /* NAN: no evaluation at this step */
} orch_steplog_row;

typedef struct orch_steplog orch_steplog;

/* Create `path` (its folder must exist) and write the header. */
xdc_err_t orch_steplog_open(const char *path, orch_steplog **out, xdc_diag *diag);
/* One line, buffered by stdio (no allocation). A write error shows up at close. */
void orch_steplog_append(orch_steplog *l, const orch_steplog_row *r);
/* Flush and close; XDC_ERR_IO when any write failed. NULL is a no-op. */
xdc_err_t orch_steplog_close(orch_steplog *l, xdc_diag *diag);

#define ORCH_STEPLOG_LINE_MAX 512         /* bytes of a line, newline excluded, plus its NUL */
#define ORCH_STEPLOG_FILE_MAX (256 << 20) /* bytes a reader accepts */

/* Parse a step log held in memory (`text`, `len` bytes, no NUL needed; `name` labels messages) into *rows
 * (*n of them; the caller frees *rows with xdc_free). XDC_ERR_CORRUPT (with name:line in diag) when it is
 * not a step log: a wrong header, a row without its eight fields, a negative or non-finite time. */
xdc_err_t orch_steplog_parse(const char *text, size_t len, const char *name, orch_steplog_row **rows, size_t *n,
                             xdc_diag *diag);
/* The same for a file: XDC_ERR_IO when it cannot be read, XDC_ERR_CORRUPT past ORCH_STEPLOG_FILE_MAX. */
xdc_err_t orch_steplog_read(const char *path, orch_steplog_row **rows, size_t *n, xdc_diag *diag);

#endif /* ORCH_STEPLOG_H */
