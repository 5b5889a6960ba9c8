/* orch_metrics.h — a small Prometheus metrics registry (counters, gauges, fixed-bucket histograms with
 * labels) rendered in the text exposition format (version 0.0.4), and an HTTP server (libmicrohttpd)
 * that serves it on GET /metrics.
 *
 * Families are registered once; each label combination is a series created on first use. Callers on
 * the hot path look a series up once and keep the handle: updates are then one atomic operation
 * (counters, gauges) or one uncontended mutex (histograms), with no allocation and no lookup. */
#ifndef ORCH_METRICS_H
#define ORCH_METRICS_H

#include "common/xdc_err.h"

#include <stddef.h>

/* Names the runtime publishes (docs/observability.md describes each one). Times are seconds, sizes
 * bytes, rates bits per second, as Prometheus base units want. */
#define ORCH_M_STEP_TOTAL          "xdc_step_total"                  /* counter: optimizer steps done */
#define ORCH_M_STEP_SECONDS        "xdc_step_seconds"                /* histogram: wall time of one step */
#define ORCH_M_COMPUTE_SECONDS     "xdc_compute_seconds_total"       /* counter: forward/backward/optimizer */
#define ORCH_M_INTRA_SECONDS       "xdc_intra_seconds_total"         /* counter: exposed intra-region comm */
#define ORCH_M_WAN_EXPOSED_SECONDS "xdc_wan_exposed_seconds_total"   /* counter: WAN time compute waited */
#define ORCH_M_LOSS                "xdc_loss"                        /* gauge: last training loss */
#define ORCH_M_TOKENS_TOTAL        "xdc_tokens_total"                /* counter: tokens trained on */
#define ORCH_M_WAN_TX_BYTES        "xdc_wan_tx_bytes_total"          /* counter{peer}: bytes on the wire */
#define ORCH_M_WAN_RAW_BYTES       "xdc_wan_raw_bytes_total"         /* counter{peer}: bytes before codec */
#define ORCH_M_WAN_RTT             "xdc_wan_rtt_seconds"             /* gauge{peer}: smoothed RTT */
#define ORCH_M_WAN_GOODPUT         "xdc_wan_goodput_bps"             /* gauge{peer}: payload bits/s */
#define ORCH_M_WAN_RECONNECTS      "xdc_wan_reconnects_total"        /* counter{peer}: reconnections */
#define ORCH_M_WAN_RETRANSMITS     "xdc_wan_retransmit_frames_total" /* counter{peer}: DATA frames resent */
#define ORCH_M_REGION_SLOWDOWN     "xdc_region_slowdown_ratio"       /* gauge{peer}: compute/step vs the others */

#define ORCH_METRICS_MAX_LABELS  4   /* label names per family, const labels not counted */
#define ORCH_METRICS_MAX_CONST   4   /* registry-wide labels (region, host, ...) */
#define ORCH_METRICS_MAX_BUCKETS 32  /* histogram upper bounds, +Inf implied */
#define ORCH_METRICS_NAME_MAX    96  /* bytes of a metric or label name */
#define ORCH_METRICS_VALUE_MAX   128 /* bytes of a label value */

typedef enum {
    ORCH_METRIC_COUNTER,
    ORCH_METRIC_GAUGE,
    ORCH_METRIC_HISTOGRAM,
} orch_metric_type;

typedef struct orch_metrics orch_metrics;               /* the registry */
typedef struct orch_metric_family orch_metric_family;   /* one name, type and label schema */
typedef struct orch_metric_series orch_metric_series;   /* one label combination: what gets updated */
typedef struct orch_metrics_server orch_metrics_server; /* the HTTP endpoint */

/* A registry. `const_names`/`const_values` (n_const entries, may be 0) are labels added to every
 * series, e.g. region and host of the agent. */
xdc_err_t orch_metrics_create(const char *const *const_names, const char *const *const_values, int n_const,
                              orch_metrics **out, xdc_diag *diag);
void orch_metrics_destroy(orch_metrics *m);

/* Register a family. Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and
 * not start with "__"; histograms may not use the label "le". `buckets` (n_buckets, strictly
 * increasing finite upper bounds, histograms only; NULL selects Prometheus' defaults, 5 ms to 10 s). Registering a
 * name twice is XDC_ERR_INVALID. */
xdc_err_t orch_metrics_register(orch_metrics *m, const char *name, const char *help, orch_metric_type type,
                                const char *const *label_names, int n_labels, const double *buckets, int n_buckets,
                                orch_metric_family **out, xdc_diag *diag);
/* The family registered under `name`, or NULL. */
orch_metric_family *orch_metrics_find(orch_metrics *m, const char *name);

/* The series for these label values (one per label name of the family, in order), created on first
 * call. The handle stays valid until the registry is destroyed. Thread-safe. */
xdc_err_t orch_metrics_series(orch_metric_family *f, const char *const *label_values, orch_metric_series **out,
                              xdc_diag *diag);

/* Hot-path updates; all thread-safe and allocation-free. A NULL series is ignored so optional metrics
 * need no branches at call sites. Calls that do not fit the series type (observe on a counter) and
 * negative counter increments are ignored: a counter never goes down. */
void orch_metrics_add(orch_metric_series *s, double v);     /* counter or gauge */
void orch_metrics_set(orch_metric_series *s, double v);     /* gauge */
void orch_metrics_observe(orch_metric_series *s, double v); /* histogram */
/* Current value of a counter or gauge (histograms: the sum), for progress lines and tests. */
double orch_metrics_value(const orch_metric_series *s);

/* Render every family in the text exposition format into a NUL-terminated buffer the caller frees
 * with xdc_free. `*len` (may be NULL) receives its length in bytes. */
xdc_err_t orch_metrics_render(orch_metrics *m, char **out, size_t *len);

/* Register the xdc_* families above with their help texts (peer-labelled ones take label "peer").
 * Step-time buckets span 10 ms to 10 min. */
typedef struct orch_metrics_std {
    orch_metric_family *step_total, *step_seconds, *compute_seconds, *intra_seconds, *wan_exposed_seconds;
    orch_metric_family *loss, *tokens_total;
    orch_metric_family *wan_tx_bytes, *wan_raw_bytes, *wan_rtt, *wan_goodput, *wan_reconnects,
        *wan_retransmits;                /* {peer} */
    orch_metric_family *region_slowdown; /* {peer}: every region, this one included */
} orch_metrics_std;
xdc_err_t orch_metrics_register_std(orch_metrics *m, orch_metrics_std *out, xdc_diag *diag);

/* Serve GET (and HEAD) /metrics on `bind_host` (an IPv4/IPv6 literal or name; NULL = 127.0.0.1: the
 * endpoint has no authentication, so other hosts reach it only where a bind address is given)
 * and `port` (0 = any free port; orch_metrics_server_port says which). Other paths get 404, other
 * methods 405. The server renders on its own thread; the registry must outlive it. */
xdc_err_t orch_metrics_server_start(orch_metrics *m, const char *bind_host, int port, orch_metrics_server **out,
                                    xdc_diag *diag);
int orch_metrics_server_port(const orch_metrics_server *srv);
/* Stop serving and free the server; NULL is a no-op. */
void orch_metrics_server_stop(orch_metrics_server *srv);

#endif /* ORCH_METRICS_H */
