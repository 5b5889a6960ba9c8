/* orch_trace.h — a per-rank recorder of Chrome trace events (the JSON "Trace Event Format" Perfetto and
 * chrome://tracing read), and the merge of several ranks' files into one.
 *
 * Each rank records complete ("X") and instant ("i") events on fixed lanes (compute, intra, wan_tx,
 * wan_rx, codec) into an array allocated up front: recording is one atomic increment and a copy into
 * the slot, from any thread, with no allocation. When the array is full later events are counted as
 * dropped, not stored. orch_trace_write() emits `{"traceEvents": [...]}` with pid = global rank and
 * process/thread name metadata, so Perfetto shows "us-east/node1:0" with one named row per lane.
 *
 * Timestamps are microseconds on a wall-clock-based epoch (the Unix epoch, advanced by the monotonic
 * clock after creation), so the traces of different processes on synchronised hosts line up. */
#ifndef ORCH_TRACE_H
#define ORCH_TRACE_H

#include "common/xdc_err.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ORCH_LANE_COMPUTE = 0,
    ORCH_LANE_INTRA,
    ORCH_LANE_WAN_TX,
    ORCH_LANE_WAN_RX,
    ORCH_LANE_CODEC,
    ORCH_LANE_COUNT,
} orch_trace_lane;

#define ORCH_TRACE_NAME_MAX         48    /* bytes of an event name kept, NUL included; longer names are cut */
#define ORCH_TRACE_CAT_MAX          16    /* bytes of a category kept, NUL included */
#define ORCH_TRACE_DEFAULT_CAPACITY 65536 /* events; about 7 MiB (112 bytes each) */

typedef struct orch_trace orch_trace;

/* A recorder for `rank` (the pid in the file) named `process_name` ("us-east/node1:0"), holding at
 * most `capacity` events (0 = ORCH_TRACE_DEFAULT_CAPACITY). The buffer is touched here, not on the
 * first events. */
xdc_err_t orch_trace_create(int rank, const char *process_name, size_t capacity, orch_trace **out);
void orch_trace_destroy(orch_trace *t);

/* Now on the trace clock, microseconds. */
uint64_t orch_trace_now_us(const orch_trace *t);

/* Record a span [start_us, start_us + dur_us) on `lane`. `name` and `cat` are copied (cut to the sizes
 * above); `arg_name` (may be NULL) adds {"arg_name": arg} to the event, e.g. bytes or a bucket index.
 * Thread-safe; NULL `t` is a no-op so tracing can be switched off by passing no recorder. */
void orch_trace_complete(orch_trace *t, orch_trace_lane lane, const char *name, const char *cat, uint64_t start_us,
                         uint64_t dur_us, const char *arg_name, int64_t arg);
/* Record a point in time on `lane` (a reconnect, a checkpoint). */
void orch_trace_instant(orch_trace *t, orch_trace_lane lane, const char *name, const char *cat, uint64_t ts_us);

/* Events recorded and events dropped because the buffer was full. */
size_t orch_trace_count(const orch_trace *t);
uint64_t orch_trace_dropped(const orch_trace *t);

/* Write the trace as JSON to `path` (through a temporary file renamed into place, so a reader never
 * sees half a file). The file is valid JSON whatever was dropped; "otherData" carries rank, events and
 * dropped_events. Call after the recording threads stopped; events still being written are left out. */
xdc_err_t orch_trace_write(orch_trace *t, const char *path, xdc_diag *diag);
/* The same to `dir`/trace-<rank>.json; `path_out` (may be NULL) receives the path. */
xdc_err_t orch_trace_write_dir(orch_trace *t, const char *dir, char *path_out, size_t cap, xdc_diag *diag);

/* Merge Chrome trace files (each `{"traceEvents": [...]}` or a bare event array) into one at
 * `out_path`: all events in input order, dropped_events summed. Errors name the file (and line:col for
 * bad JSON): XDC_ERR_IO for unreadable files, XDC_ERR_CORRUPT for bad JSON or a bad shape. */
xdc_err_t orch_trace_merge(const char *out_path, const char *const *in_paths, int n_in, xdc_diag *diag);

#endif /* ORCH_TRACE_H */
