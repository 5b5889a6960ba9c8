/* orch_metrics.c — the Prometheus registry of orch_metrics.h: families and series, lock-free counter and
 * gauge updates (a double's bits in an atomic word), histograms under a mutex per series so bucket
 * counts, sum and count stay consistent with each other, text exposition rendering, and the
 * libmicrohttpd server for GET /metrics. */
#include "orchestrator/obs/orch_metrics.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"

#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct orch_metric_series {
    orch_metric_family *family;
    char *labels;                /* rendered `a="x",b="y"` (const labels first); "" when none */
    _Atomic uint64_t value_bits; /* counter/gauge value as the bits of a double */
    pthread_mutex_t lock;        /* histograms: guards counts, sum, count */
    uint64_t *counts;            /* (n_buckets + 1) per-bucket, not cumulative; last is +Inf */
    double sum;
    uint64_t count;
    orch_metric_series *next;
};

struct orch_metric_family {
    orch_metrics *registry;
    char name[ORCH_METRICS_NAME_MAX];
    char *help;
    orch_metric_type type;
    int n_labels;
    char label_names[ORCH_METRICS_MAX_LABELS][ORCH_METRICS_NAME_MAX];
    double buckets[ORCH_METRICS_MAX_BUCKETS]; /* (n_buckets) upper bounds, increasing */
    int n_buckets;
    pthread_mutex_t lock; /* guards the series list */
    orch_metric_series *head, *tail;
    orch_metric_family *next;
};

struct orch_metrics {
    pthread_mutex_t lock; /* guards the family list */
    char *const_labels;   /* rendered const labels, "" when none */
    orch_metric_family *head, *tail;
};

struct orch_metrics_server {
    struct MHD_Daemon *daemon;
    orch_metrics *registry;
    int port;
};

/* Prometheus client libraries' default buckets, seconds. */
static const double default_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

/* ---- growable text buffer --------------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n) cap *= 2;
        char *np = xdc_realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

/* Append `s` escaped for a label value (\\, \", \n) or, with in_help, for a HELP line (\\, \n). */
static void sb_escaped(strbuf *b, const char *s, bool in_help)
{
    for (; *s; s++) {
        if (*s == '\\') sb_printf(b, "\\\\");
        else if (*s == '\n') sb_printf(b, "\\n");
        else if (*s == '"' && !in_help) sb_printf(b, "\\\"");
        else sb_printf(b, "%c", *s);
    }
}

/* Shortest "%g" text that reads back as the same double, with Prometheus' spellings of the specials. */
static void fmt_double(double v, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    snprintf(out, cap, "%.15g", v);
    if (strtod(out, NULL) != v) snprintf(out, cap, "%.17g", v);
}

/* ---- names and registry ----------------------------------------------------------------------- */

static bool valid_name(const char *s, bool allow_colon)
{
    if (!s || !*s || strlen(s) >= ORCH_METRICS_NAME_MAX) return false;
    for (const char *c = s; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || (allow_colon && *c == ':');
        bool digit = *c >= '0' && *c <= '9';
        if (!alpha && !(digit && c != s)) return false;
    }
    return true;
}

static bool valid_label_name(const char *s) { return valid_name(s, false) && strncmp(s, "__", 2) != 0; }

/* Render `names[i]="values[i]"` pairs, comma separated, after `prefix` (already rendered). NULL when
 * out of memory. */
static char *render_labels(const char *prefix, const char *const *names, const char *const *values, int n)
{
    strbuf b = {0};
    sb_printf(&b, "%s", prefix); /* allocates, so even "" comes back as a buffer */
    for (int i = 0; i < n; i++) {
        sb_printf(&b, "%s%s=\"", b.len ? "," : "", names[i]);
        sb_escaped(&b, values[i], false);
        sb_printf(&b, "\"");
    }
    if (!b.oom) return b.p;
    xdc_free(b.p);
    return NULL;
}

xdc_err_t orch_metrics_create(const char *const *const_names, const char *const *const_values, int n_const,
                              orch_metrics **out, xdc_diag *diag)
{
    *out = NULL;
    if (n_const < 0 || n_const > ORCH_METRICS_MAX_CONST) {
        xdc_diag_set(diag, "metrics: %d const labels (at most %d)", n_const, ORCH_METRICS_MAX_CONST);
        return XDC_ERR_INVALID;
    }
    for (int i = 0; i < n_const; i++) {
        if (!valid_label_name(const_names[i]) || !const_values[i]) {
            xdc_diag_set(diag, "metrics: invalid const label name '%s'", const_names[i] ? const_names[i] : "(null)");
            return XDC_ERR_INVALID;
        }
    }
    orch_metrics *m = xdc_calloc(1, sizeof *m);
    if (!m) return XDC_ERR_NOMEM;
    m->const_labels = render_labels("", const_names, const_values, n_const);
    if (!m->const_labels) {
        xdc_free(m);
        return XDC_ERR_NOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return XDC_OK;
}

static void series_free(orch_metric_series *s)
{
    if (s->counts) pthread_mutex_destroy(&s->lock);
    xdc_free(s->counts);
    xdc_free(s->labels);
    xdc_free(s);
}

void orch_metrics_destroy(orch_metrics *m)
{
    if (!m) return;
    for (orch_metric_family *f = m->head, *fn; f; f = fn) {
        fn = f->next;
        for (orch_metric_series *s = f->head, *sn; s; s = sn) {
            sn = s->next;
            series_free(s);
        }
        pthread_mutex_destroy(&f->lock);
        xdc_free(f->help);
        xdc_free(f);
    }
    pthread_mutex_destroy(&m->lock);
    xdc_free(m->const_labels);
    xdc_free(m);
}

/* Caller holds m->lock. */
static orch_metric_family *find_locked(orch_metrics *m, const char *name)
{
    orch_metric_family *f = m->head;
    while (f && strcmp(f->name, name) != 0) f = f->next;
    return f;
}

orch_metric_family *orch_metrics_find(orch_metrics *m, const char *name)
{
    pthread_mutex_lock(&m->lock);
    orch_metric_family *f = find_locked(m, name);
    pthread_mutex_unlock(&m->lock);
    return f;
}

static xdc_err_t check_family(const char *name, orch_metric_type type, const char *const *label_names, int n_labels,
                              const double *buckets, int n_buckets, xdc_diag *diag)
{
    if (!valid_name(name, true)) {
        xdc_diag_set(diag, "metrics: invalid metric name '%s'", name ? name : "(null)");
        return XDC_ERR_INVALID;
    }
    if (n_labels < 0 || n_labels > ORCH_METRICS_MAX_LABELS) {
        xdc_diag_set(diag, "metrics: %s: %d labels (at most %d)", name, n_labels, ORCH_METRICS_MAX_LABELS);
        return XDC_ERR_INVALID;
    }
    for (int i = 0; i < n_labels; i++) {
        if (!valid_label_name(label_names[i]) || (type == ORCH_METRIC_HISTOGRAM && !strcmp(label_names[i], "le"))) {
            xdc_diag_set(diag, "metrics: %s: invalid label name '%s'", name,
                         label_names[i] ? label_names[i] : "(null)");
            return XDC_ERR_INVALID;
        }
    }
    if (type != ORCH_METRIC_HISTOGRAM) return XDC_OK;
    if (n_buckets < 1 || n_buckets > ORCH_METRICS_MAX_BUCKETS) {
        xdc_diag_set(diag, "metrics: %s: %d buckets (1 to %d)", name, n_buckets, ORCH_METRICS_MAX_BUCKETS);
        return XDC_ERR_INVALID;
    }
    for (int i = 0; i < n_buckets; i++) {
        if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
            xdc_diag_set(diag, "metrics: %s: bucket bounds must be finite and strictly increasing (bucket %d)", name,
                         i);
            return XDC_ERR_INVALID;
        }
    }
    return XDC_OK;
}

xdc_err_t orch_metrics_register(orch_metrics *m, const char *name, const char *help, orch_metric_type type,
                                const char *const *label_names, int n_labels, const double *buckets, int n_buckets,
                                orch_metric_family **out, xdc_diag *diag)
{
    if (out) *out = NULL;
    if (type == ORCH_METRIC_HISTOGRAM && !buckets) {
        buckets = default_buckets;
        n_buckets = (int)(sizeof default_buckets / sizeof default_buckets[0]);
    }
    XDC_CHECK(check_family(name, type, label_names, n_labels, buckets, n_buckets, diag));
    orch_metric_family *f = xdc_calloc(1, sizeof *f);
    if (!f) return XDC_ERR_NOMEM;
    f->help = xdc_strdup(help ? help : "");
    if (!f->help) {
        xdc_free(f);
        return XDC_ERR_NOMEM;
    }
    f->registry = m;
    snprintf(f->name, sizeof f->name, "%s", name);
    f->type = type;
    f->n_labels = n_labels;
    for (int i = 0; i < n_labels; i++) snprintf(f->label_names[i], sizeof f->label_names[i], "%s", label_names[i]);
    if (type == ORCH_METRIC_HISTOGRAM) {
        memcpy(f->buckets, buckets, (size_t)n_buckets * sizeof *buckets);
        f->n_buckets = n_buckets;
    }
    pthread_mutex_init(&f->lock, NULL);

    pthread_mutex_lock(&m->lock);
    orch_metric_family *dup = find_locked(m, name);
    if (!dup) {
        if (m->tail) m->tail->next = f;
        else m->head = f;
        m->tail = f;
    }
    pthread_mutex_unlock(&m->lock);
    if (dup) {
        pthread_mutex_destroy(&f->lock);
        xdc_free(f->help);
        xdc_free(f);
        xdc_diag_set(diag, "metrics: '%s' registered twice", name);
        return XDC_ERR_INVALID;
    }
    /* A family without labels has exactly one series: create it now so it is exported as 0 before the
     * first update, which is what rate() and alerting on absence expect. */
    orch_metric_series *only = NULL;
    if (n_labels == 0) XDC_CHECK(orch_metrics_series(f, NULL, &only, diag));
    if (out) *out = f;
    return XDC_OK;
}

xdc_err_t orch_metrics_series(orch_metric_family *f, const char *const *label_values, orch_metric_series **out,
                              xdc_diag *diag)
{
    *out = NULL;
    for (int i = 0; i < f->n_labels; i++) {
        if (!label_values || !label_values[i] || strlen(label_values[i]) >= ORCH_METRICS_VALUE_MAX) {
            xdc_diag_set(diag, "metrics: %s: label %s needs a value shorter than %d bytes", f->name, f->label_names[i],
                         ORCH_METRICS_VALUE_MAX);
            return XDC_ERR_INVALID;
        }
    }
    const char *names[ORCH_METRICS_MAX_LABELS];
    for (int i = 0; i < f->n_labels; i++) names[i] = f->label_names[i];
    char *labels = render_labels(f->registry->const_labels, names, label_values, f->n_labels);
    if (!labels) return XDC_ERR_NOMEM;

    pthread_mutex_lock(&f->lock);
    orch_metric_series *s = f->head;
    while (s && strcmp(s->labels, labels) != 0) s = s->next;
    if (s) {
        pthread_mutex_unlock(&f->lock);
        xdc_free(labels);
        *out = s;
        return XDC_OK;
    }
    s = xdc_calloc(1, sizeof *s);
    if (s && f->type == ORCH_METRIC_HISTOGRAM) {
        s->counts = xdc_calloc((size_t)f->n_buckets + 1, sizeof *s->counts);
        if (!s->counts) {
            xdc_free(s);
            s = NULL;
        } else {
            pthread_mutex_init(&s->lock, NULL);
        }
    }
    if (!s) {
        pthread_mutex_unlock(&f->lock);
        xdc_free(labels);
        return XDC_ERR_NOMEM;
    }
    s->family = f;
    s->labels = labels;
    atomic_init(&s->value_bits, 0); /* the bits of +0.0 */
    if (f->tail) f->tail->next = s;
    else f->head = s;
    f->tail = s;
    pthread_mutex_unlock(&f->lock);
    *out = s;
    return XDC_OK;
}

/* ---- hot-path updates ------------------------------------------------------------------------- */

static uint64_t bits_of(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static double double_of(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

void orch_metrics_add(orch_metric_series *s, double v)
{
    if (!s || s->family->type == ORCH_METRIC_HISTOGRAM) return;
    if (s->family->type == ORCH_METRIC_COUNTER && !(v >= 0)) return;
    uint64_t old = atomic_load_explicit(&s->value_bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&s->value_bits, &old, bits_of(double_of(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

void orch_metrics_set(orch_metric_series *s, double v)
{
    if (!s || s->family->type != ORCH_METRIC_GAUGE) return;
    atomic_store_explicit(&s->value_bits, bits_of(v), memory_order_relaxed);
}

void orch_metrics_observe(orch_metric_series *s, double v)
{
    if (!s || s->family->type != ORCH_METRIC_HISTOGRAM || isnan(v)) return;
    const orch_metric_family *f = s->family;
    int b = 0;
    while (b < f->n_buckets && v > f->buckets[b]) b++; /* le: the first bound >= v; n_buckets = +Inf */
    pthread_mutex_lock(&s->lock);
    s->counts[b]++;
    s->sum += v;
    s->count++;
    pthread_mutex_unlock(&s->lock);
}

double orch_metrics_value(const orch_metric_series *s)
{
    if (!s) return 0;
    if (s->family->type != ORCH_METRIC_HISTOGRAM)
        return double_of(atomic_load_explicit(&s->value_bits, memory_order_relaxed));
    pthread_mutex_lock((pthread_mutex_t *)&s->lock);
    double sum = s->sum;
    pthread_mutex_unlock((pthread_mutex_t *)&s->lock);
    return sum;
}

/* ---- exposition ------------------------------------------------------------------------------- */

/* `name{labels,extra}` with the braces left out when both are empty. */
static void sb_sample_name(strbuf *b, const char *name, const char *suffix, const char *labels, const char *extra)
{
    sb_printf(b, "%s%s", name, suffix);
    if (!*labels && !extra) return;
    sb_printf(b, "{%s%s%s}", labels, *labels && extra ? "," : "", extra ? extra : "");
}

static void render_histogram(strbuf *b, const orch_metric_family *f, orch_metric_series *s)
{
    uint64_t counts[ORCH_METRICS_MAX_BUCKETS + 1];
    pthread_mutex_lock(&s->lock);
    memcpy(counts, s->counts, ((size_t)f->n_buckets + 1) * sizeof *counts);
    double sum = s->sum;
    uint64_t count = s->count;
    pthread_mutex_unlock(&s->lock);

    uint64_t cum = 0;
    char num[40], le[64];
    for (int i = 0; i <= f->n_buckets; i++) {
        cum += counts[i];
        fmt_double(i < f->n_buckets ? f->buckets[i] : INFINITY, num, sizeof num);
        snprintf(le, sizeof le, "le=\"%s\"", num);
        sb_sample_name(b, f->name, "_bucket", s->labels, le);
        sb_printf(b, " %llu\n", (unsigned long long)cum);
    }
    fmt_double(sum, num, sizeof num);
    sb_sample_name(b, f->name, "_sum", s->labels, NULL);
    sb_printf(b, " %s\n", num);
    sb_sample_name(b, f->name, "_count", s->labels, NULL);
    sb_printf(b, " %llu\n", (unsigned long long)count);
}

static const char *type_name(orch_metric_type t)
{
    return t == ORCH_METRIC_COUNTER ? "counter" : t == ORCH_METRIC_GAUGE ? "gauge" : "histogram";
}

xdc_err_t orch_metrics_render(orch_metrics *m, char **out, size_t *len)
{
    *out = NULL;
    strbuf b = {0};
    sb_printf(&b, "%s", ""); /* an empty registry still renders a valid (empty) document */
    pthread_mutex_lock(&m->lock);
    for (orch_metric_family *f = m->head; f; f = f->next) {
        sb_printf(&b, "# HELP %s ", f->name);
        sb_escaped(&b, f->help, true);
        sb_printf(&b, "\n# TYPE %s %s\n", f->name, type_name(f->type));
        pthread_mutex_lock(&f->lock);
        for (orch_metric_series *s = f->head; s; s = s->next) {
            if (f->type == ORCH_METRIC_HISTOGRAM) {
                render_histogram(&b, f, s);
                continue;
            }
            char num[40];
            fmt_double(orch_metrics_value(s), num, sizeof num);
            sb_sample_name(&b, f->name, "", s->labels, NULL);
            sb_printf(&b, " %s\n", num);
        }
        pthread_mutex_unlock(&f->lock);
    }
    pthread_mutex_unlock(&m->lock);
    if (b.oom) {
        xdc_free(b.p);
        return XDC_ERR_NOMEM;
    }
    *out = b.p;
    if (len) *len = b.len;
    return XDC_OK;
}

/* ---- the standard xdc families ---------------------------------------------------------------- */

xdc_err_t orch_metrics_register_std(orch_metrics *m, orch_metrics_std *o, xdc_diag *diag)
{
    static const double step_buckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
    const char *peer[] = {"peer"};
    const int nsb = (int)(sizeof step_buckets / sizeof step_buckets[0]);
    const orch_metric_type C = ORCH_METRIC_COUNTER, G = ORCH_METRIC_GAUGE;
    memset(o, 0, sizeof *o);
#define REG(field, name, help, type, labels, n) \
    XDC_CHECK(orch_metrics_register(m, name, help, type, labels, n, NULL, 0, &o->field, diag))
    REG(step_total, ORCH_M_STEP_TOTAL, "Optimizer steps completed.", C, NULL, 0);
    XDC_CHECK(orch_metrics_register(m, ORCH_M_STEP_SECONDS, "Wall time of one training step in seconds.",
                                    ORCH_METRIC_HISTOGRAM, NULL, 0, step_buckets, nsb, &o->step_seconds, diag));
    REG(compute_seconds, ORCH_M_COMPUTE_SECONDS, "Seconds spent in forward, backward and optimizer.", C, NULL, 0);
    REG(intra_seconds, ORCH_M_INTRA_SECONDS, "Seconds compute waited on intra-region communication.", C, NULL, 0);
    REG(wan_exposed_seconds, ORCH_M_WAN_EXPOSED_SECONDS, "Seconds compute waited on WAN synchronisation.", C, NULL, 0);
    REG(loss, ORCH_M_LOSS, "Training loss of the last step.", G, NULL, 0);
    REG(tokens_total, ORCH_M_TOKENS_TOTAL, "Tokens trained on.", C, NULL, 0);
    REG(wan_tx_bytes, ORCH_M_WAN_TX_BYTES, "Bytes sent to a peer region on the wire (after codec).", C, peer, 1);
    REG(wan_raw_bytes, ORCH_M_WAN_RAW_BYTES, "Bytes handed to the WAN for a peer region before the codec.", C, peer, 1);
    REG(wan_rtt, ORCH_M_WAN_RTT, "Smoothed round-trip time to a peer region in seconds.", G, peer, 1);
    REG(wan_goodput, ORCH_M_WAN_GOODPUT, "Payload throughput to a peer region in bits per second.", G, peer, 1);
    REG(wan_reconnects, ORCH_M_WAN_RECONNECTS, "Reconnections of WAN streams to a peer region.", C, peer, 1);
    REG(wan_retransmits, ORCH_M_WAN_RETRANSMITS, "DATA frames sent again to a peer region after a stream broke.", C,
        peer, 1);
    REG(region_slowdown, ORCH_M_REGION_SLOWDOWN,
        "A region's compute seconds per step over the last window over the median of the other regions' (the same "
        "rank in each); above the run's straggler_factor the region is reported as a straggler.",
        G, peer, 1);
#undef REG
    return XDC_OK;
}

/* ---- HTTP ------------------------------------------------------------------------------------- */

static enum MHD_Result queue_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls)
{
    (void)version;
    (void)upload_data;
    (void)req_cls;
    orch_metrics_server *srv = cls;
    if (*upload_data_size) return MHD_NO; /* /metrics takes no body */
    bool head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (strcmp(url, "/metrics") != 0) return queue_text(conn, MHD_HTTP_NOT_FOUND, "not found; try /metrics\n");
    if (!head && strcmp(method, MHD_HTTP_METHOD_GET) != 0)
        return queue_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");

    char *body = NULL;
    size_t len = 0;
    if (orch_metrics_render(srv->registry, &body, &len) != XDC_OK)
        return queue_text(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback(len, body, xdc_free);
    if (!r) {
        xdc_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

xdc_err_t orch_metrics_server_start(orch_metrics *m, const char *bind_host, int port, orch_metrics_server **out,
                                    xdc_diag *diag)
{
    *out = NULL;
    if (port < 0 || port > 65535) {
        xdc_diag_set(diag, "metrics: port %d out of range 0-65535", port);
        return XDC_ERR_INVALID;
    }
    orch_metrics_server *srv = xdc_calloc(1, sizeof *srv);
    if (!srv) return XDC_ERR_NOMEM;
    srv->registry = m;

    if (!bind_host) bind_host = "127.0.0.1";
    struct addrinfo *ai = NULL, hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%d", port);
    int gai = getaddrinfo(bind_host, portstr, &hints, &ai);
    if (gai != 0) {
        xdc_diag_set(diag, "metrics: cannot resolve bind address '%s': %s", bind_host, gai_strerror(gai));
        xdc_free(srv);
        return XDC_ERR_UNAVAILABLE;
    }
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    errno = 0;
    srv->daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR,
                                   ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    int err = errno;
    freeaddrinfo(ai);
    if (!srv->daemon) {
        xdc_diag_set(diag, "metrics: cannot serve on %s:%d: %s", bind_host, port,
                     err ? strerror(err) : "libmicrohttpd refused to start");
        xdc_free(srv);
        return XDC_ERR_UNAVAILABLE;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv->daemon, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = info ? info->port : port;
    XDC_INFO(XDC_SUB_ORCH, "metrics: serving http://%s:%d/metrics", bind_host, srv->port);
    *out = srv;
    return XDC_OK;
}

int orch_metrics_server_port(const orch_metrics_server *srv) { return srv->port; }

void orch_metrics_server_stop(orch_metrics_server *srv)
{
    if (!srv) return;
    MHD_stop_daemon(srv->daemon);
    xdc_free(srv);
}
