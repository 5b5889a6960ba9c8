/* test_metrics.c — orchestrator/orch_metrics: exposition format (HELP/TYPE, label escaping, histogram
 * buckets), concurrent updates, name validation, and the HTTP endpoint fetched with libcurl and checked
 * by `promtool check metrics` when promtool is installed. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "orchestrator/obs/orch_metrics.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

XDC_TEST(metrics_render_counter_gauge_histogram_and_escaping)
{
    const char *cn[] = {"region", "host"}, *cv[] = {"us-east", "node\"1\\\n"};
    orch_metrics *m = NULL;
    XDC_ASSERT_OK(orch_metrics_create(cn, cv, 2, &m, NULL));
    orch_metric_family *req = NULL, *lat = NULL, *temp = NULL;
    const char *lab[] = {"peer"};
    const double b[] = {0.1, 1, 10};
    XDC_ASSERT_OK(orch_metrics_register(m, "t_requests_total", "Requests\\served\nso far.", ORCH_METRIC_COUNTER, lab, 1,
                                        NULL, 0, &req, NULL));
    XDC_ASSERT_OK(
        orch_metrics_register(m, "t_latency_seconds", "Latency.", ORCH_METRIC_HISTOGRAM, NULL, 0, b, 3, &lat, NULL));
    XDC_ASSERT_OK(orch_metrics_register(m, "t_temp", "Temperature.", ORCH_METRIC_GAUGE, NULL, 0, NULL, 0, &temp, NULL));

    orch_metric_series *eu = NULL, *eu2 = NULL, *ap = NULL, *h = NULL, *g = NULL;
    XDC_ASSERT_OK(orch_metrics_series(req, (const char *[]){"eu-west"}, &eu, NULL));
    XDC_ASSERT_OK(orch_metrics_series(req, (const char *[]){"eu-west"}, &eu2, NULL));
    XDC_ASSERT(eu == eu2); /* same labels, same series */
    XDC_ASSERT_OK(orch_metrics_series(req, (const char *[]){"ap-south"}, &ap, NULL));
    XDC_ASSERT_OK(orch_metrics_series(lat, NULL, &h, NULL));
    XDC_ASSERT_OK(orch_metrics_series(temp, NULL, &g, NULL));
    orch_metrics_add(eu, 3);
    orch_metrics_add(eu, 0.5);
    orch_metrics_add(eu, -7);  /* a counter never goes down */
    orch_metrics_set(eu, 100); /* not a gauge: ignored */
    orch_metrics_set(g, -2.25);
    orch_metrics_observe(h, 0.05);
    orch_metrics_observe(h, 0.1); /* le is inclusive */
    orch_metrics_observe(h, 5);
    orch_metrics_observe(h, 50);
    orch_metrics_observe(NULL, 1); /* no-op */
    XDC_ASSERT_NEAR(orch_metrics_value(eu), 3.5, 0);
    XDC_ASSERT_NEAR(orch_metrics_value(h), 55.15, 1e-12);

    char *text = NULL;
    size_t len = 0;
    XDC_ASSERT_OK(orch_metrics_render(m, &text, &len));
    XDC_ASSERT_EQ(strlen(text), len);
    XDC_ASSERT_STR_CONTAINS(text, "# HELP t_requests_total Requests\\\\served\\nso far.\n");
    XDC_ASSERT_STR_CONTAINS(text, "# TYPE t_requests_total counter\n");
    XDC_ASSERT_STR_CONTAINS(text,
                            "t_requests_total{region=\"us-east\",host=\"node\\\"1\\\\\\n\",peer=\"eu-west\"} 3.5\n");
    XDC_ASSERT_STR_CONTAINS(text, "peer=\"ap-south\"} 0\n");
    XDC_ASSERT_STR_CONTAINS(text, "# TYPE t_latency_seconds histogram\n");
    XDC_ASSERT_STR_CONTAINS(text, ",le=\"0.1\"} 2\n");
    XDC_ASSERT_STR_CONTAINS(text, ",le=\"1\"} 2\n");
    XDC_ASSERT_STR_CONTAINS(text, ",le=\"10\"} 3\n");
    XDC_ASSERT_STR_CONTAINS(text, ",le=\"+Inf\"} 4\n");
    XDC_ASSERT_STR_CONTAINS(text, "t_latency_seconds_sum{region=\"us-east\",host=\"node\\\"1\\\\\\n\"} 55.15\n");
    XDC_ASSERT_STR_CONTAINS(text, "t_latency_seconds_count{region=\"us-east\",host=\"node\\\"1\\\\\\n\"} 4\n");
    XDC_ASSERT_STR_CONTAINS(text, "\"} -2.25\n");
    /* families come out in registration order */
    XDC_ASSERT(strstr(text, "t_requests_total") < strstr(text, "t_latency_seconds"));
    XDC_ASSERT(strstr(text, "t_latency_seconds") < strstr(text, "t_temp"));
    xdc_free(text);
    orch_metrics_destroy(m);
    orch_metrics_destroy(NULL);
}

XDC_TEST(metrics_rejects_bad_names_labels_buckets_and_duplicates)
{
    orch_metrics *m = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_metrics_create(NULL, NULL, 0, &m, NULL));
    XDC_ASSERT_ERR(orch_metrics_register(m, "9lives", "", ORCH_METRIC_GAUGE, NULL, 0, NULL, 0, NULL, &d),
                   XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "invalid metric name '9lives'");
    XDC_ASSERT_ERR(orch_metrics_register(m, "a-b", "", ORCH_METRIC_GAUGE, NULL, 0, NULL, 0, NULL, &d), XDC_ERR_INVALID);
    const char *le[] = {"le"}, *reserved[] = {"__x"};
    XDC_ASSERT_ERR(orch_metrics_register(m, "h", "", ORCH_METRIC_HISTOGRAM, le, 1, NULL, 0, NULL, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "invalid label name 'le'");
    XDC_ASSERT_ERR(orch_metrics_register(m, "g", "", ORCH_METRIC_GAUGE, reserved, 1, NULL, 0, NULL, &d),
                   XDC_ERR_INVALID);
    const double dec[] = {1, 0.5};
    XDC_ASSERT_ERR(orch_metrics_register(m, "h2", "", ORCH_METRIC_HISTOGRAM, NULL, 0, dec, 2, NULL, &d),
                   XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "strictly increasing");
    orch_metrics_std std;
    XDC_ASSERT_OK(orch_metrics_register_std(m, &std, NULL));
    XDC_ASSERT(orch_metrics_find(m, ORCH_M_WAN_GOODPUT) == std.wan_goodput);
    XDC_ASSERT_ERR(orch_metrics_register(m, ORCH_M_LOSS, "", ORCH_METRIC_GAUGE, NULL, 0, NULL, 0, NULL, &d),
                   XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "registered twice");
    orch_metric_series *s = NULL;
    XDC_ASSERT_ERR(orch_metrics_series(std.wan_rtt, NULL, &s, &d), XDC_ERR_INVALID);
    XDC_ASSERT_STR_CONTAINS(d.msg, "label peer needs a value");
    orch_metrics_destroy(m);
}

typedef struct {
    orch_metric_series *ctr, *hist;
    int n;
} hammer_arg;

static void *hammer(void *p)
{
    hammer_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        orch_metrics_add(a->ctr, 1);
        orch_metrics_observe(a->hist, (i % 4) * 0.5);
    }
    return NULL;
}

XDC_TEST(metrics_concurrent_updates_lose_nothing)
{
    orch_metrics *m = NULL;
    orch_metrics_std std;
    XDC_ASSERT_OK(orch_metrics_create(NULL, NULL, 0, &m, NULL));
    XDC_ASSERT_OK(orch_metrics_register_std(m, &std, NULL));
    hammer_arg a = {.n = 100000};
    XDC_ASSERT_OK(orch_metrics_series(std.tokens_total, NULL, &a.ctr, NULL));
    XDC_ASSERT_OK(orch_metrics_series(std.step_seconds, NULL, &a.hist, NULL));
    pthread_t th[4];
    for (int i = 0; i < 4; i++) XDC_ASSERT_EQ(pthread_create(&th[i], NULL, hammer, &a), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    XDC_ASSERT_NEAR(orch_metrics_value(a.ctr), 400000, 0);
    XDC_ASSERT_NEAR(orch_metrics_value(a.hist), 4 * 25000 * (0 + 0.5 + 1 + 1.5), 1e-6);
    char *text = NULL;
    XDC_ASSERT_OK(orch_metrics_render(m, &text, NULL));
    XDC_ASSERT_STR_CONTAINS(text, "xdc_step_seconds_count 400000\n");
    XDC_ASSERT_STR_CONTAINS(text, "xdc_step_seconds_bucket{le=\"0.5\"} 200000\n");
    XDC_ASSERT_STR_CONTAINS(text, "xdc_step_seconds_bucket{le=\"+Inf\"} 400000\n");
    XDC_ASSERT_STR_CONTAINS(text, "xdc_tokens_total 400000\n");
    xdc_free(text);
    orch_metrics_destroy(m);
}

typedef struct {
    char *p;
    size_t len;
} fetch_buf;

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    fetch_buf *b = user;
    char *np = realloc(b->p, b->len + size * n + 1);
    if (!np) return 0;
    memcpy(np + b->len, data, size * n);
    b->p = np;
    b->len += size * n;
    b->p[b->len] = '\0';
    return size * n;
}

/* GET url; returns the HTTP status (or -1) and the body in *body (malloc'd). */
static long http_get(const char *url, char **body)
{
    fetch_buf b = {0};
    CURL *c = curl_easy_init();
    if (!c) return -1;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    long code = -1;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    *body = b.p;
    return code;
}

/* Serve a registry with the standard families and a few updates over HTTP; returns GET /metrics' body
 * (malloc'd) after checking that another path is a 404. */
static char *served_exposition(void)
{
    const char *cn[] = {"region", "host", "rank"}, *cv[] = {"us-east", "node1", "0"};
    orch_metrics *m = NULL;
    orch_metrics_std std;
    XDC_ASSERT_OK(orch_metrics_create(cn, cv, 3, &m, NULL));
    XDC_ASSERT_OK(orch_metrics_register_std(m, &std, NULL));
    orch_metric_series *step = NULL, *st = NULL, *loss = NULL, *tx = NULL, *rtt = NULL;
    XDC_ASSERT_OK(orch_metrics_series(std.step_total, NULL, &step, NULL));
    XDC_ASSERT_OK(orch_metrics_series(std.step_seconds, NULL, &st, NULL));
    XDC_ASSERT_OK(orch_metrics_series(std.loss, NULL, &loss, NULL));
    XDC_ASSERT_OK(orch_metrics_series(std.wan_tx_bytes, (const char *[]){"eu-west"}, &tx, NULL));
    XDC_ASSERT_OK(orch_metrics_series(std.wan_rtt, (const char *[]){"eu-west"}, &rtt, NULL));

    orch_metrics_server *srv = NULL;
    XDC_ASSERT_OK(orch_metrics_server_start(m, "127.0.0.1", 0, &srv, NULL));
    int port = orch_metrics_server_port(srv);
    XDC_ASSERT(port > 0 && port < 65536);
    for (int i = 0; i < 3; i++) {
        orch_metrics_add(step, 1);
        orch_metrics_observe(st, 0.2 + i);
        orch_metrics_set(loss, 4.0 - i);
        orch_metrics_add(tx, 1 << 20);
    }
    orch_metrics_set(rtt, 0.04);

    char url[128], *body = NULL, *other = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d/metrics", port);
    XDC_ASSERT_EQ(http_get(url, &body), 200);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/other", port);
    XDC_ASSERT_EQ(http_get(url, &other), 404);
    free(other);
    orch_metrics_server_stop(srv);
    orch_metrics_server_stop(NULL);
    orch_metrics_destroy(m);
    return body;
}

XDC_TEST(metrics_http_endpoint_serves_the_series)
{
    char *body = served_exposition();
    XDC_ASSERT_STR_CONTAINS(body, "xdc_step_total{region=\"us-east\",host=\"node1\",rank=\"0\"} 3\n");
    XDC_ASSERT_STR_CONTAINS(body, "xdc_loss{region=\"us-east\",host=\"node1\",rank=\"0\"} 2\n");
    XDC_ASSERT_STR_CONTAINS(body,
                            "xdc_wan_tx_bytes_total{region=\"us-east\",host=\"node1\",rank=\"0\",peer=\"eu-west\"} "
                            "3145728\n");
    XDC_ASSERT_STR_CONTAINS(body, "xdc_wan_rtt_seconds{region=\"us-east\",host=\"node1\",rank=\"0\",peer=\"eu-west\"} "
                                  "0.04\n");
    XDC_ASSERT_STR_CONTAINS(body,
                            "xdc_step_seconds_bucket{region=\"us-east\",host=\"node1\",rank=\"0\",le=\"2.5\"} 3\n");
    XDC_ASSERT_STR_CONTAINS(body, "# TYPE xdc_wan_goodput_bps gauge\n");
    free(body);
}

XDC_TEST(metrics_http_exposition_passes_promtool)
{
    char path[512], cmd[700], out[4096];
    if (xdc_test_run("command -v promtool", out, sizeof out) != 0)
        xdc_test_skip("promtool not installed (Debian package prometheus; `make deps`)");
    char *body = served_exposition();
    snprintf(path, sizeof path, "%s/metrics.txt", xdc_test_tmpdir());
    xdc_test_write_file(path, body);
    free(body);
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s'", path);
    int rc = xdc_test_run(cmd, out, sizeof out);
    XDC_ASSERT_MSG(rc == 0, "promtool check metrics failed (%d): %s", rc, out);
}

XDC_TEST(metrics_server_reports_a_busy_port)
{
    orch_metrics *m = NULL;
    orch_metrics_server *a = NULL, *b = NULL;
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_metrics_create(NULL, NULL, 0, &m, NULL));
    XDC_ASSERT_OK(orch_metrics_server_start(m, "127.0.0.1", 0, &a, NULL));
    XDC_ASSERT_ERR(orch_metrics_server_start(m, "127.0.0.1", orch_metrics_server_port(a), &b, &d), XDC_ERR_UNAVAILABLE);
    XDC_ASSERT_STR_CONTAINS(d.msg, "cannot serve on 127.0.0.1:");
    XDC_ASSERT_ERR(orch_metrics_server_start(m, NULL, 70000, &b, &d), XDC_ERR_INVALID);
    orch_metrics_server_stop(a);
    orch_metrics_destroy(m);
}
