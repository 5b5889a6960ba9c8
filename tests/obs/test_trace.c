/* test_trace.c — orchestrator/orch_trace: events from two threads land on their lanes with metadata
 * naming the rank and lanes, an overflowing buffer still writes valid JSON with a dropped count, names
 * are escaped and cut on UTF-8 boundaries, and `xdc trace merge` joins per-rank files. */
#include "tests/xdc_test.h"

#include "orchestrator/obs/orch_trace.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *load_events(const char *path, json_t **root)
{
    json_error_t err;
    *root = json_load_file(path, 0, &err);
    XDC_ASSERT_MSG(*root != NULL, "%s:%d:%d: %s", path, err.line, err.column, err.text);
    json_t *ev = json_object_get(*root, "traceEvents");
    XDC_ASSERT(json_is_array(ev));
    return ev;
}

/* Count events with phase `ph` (and, when given, this name and tid). */
static int count_events(json_t *ev, const char *ph, const char *name, int tid)
{
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ph")), ph) != 0) continue;
        if (name && strcmp(json_string_value(json_object_get(e, "name")), name) != 0) continue;
        if (tid >= 0 && json_integer_value(json_object_get(e, "tid")) != tid) continue;
        n++;
    }
    return n;
}

/* The args.name of the metadata event `meta` for (pid, tid), or NULL. */
static const char *meta_name(json_t *ev, const char *meta, int pid, int tid)
{
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "M") != 0) continue;
        if (strcmp(json_string_value(json_object_get(e, "name")), meta) != 0) continue;
        if (json_integer_value(json_object_get(e, "pid")) != pid) continue;
        if (tid >= 0 && json_integer_value(json_object_get(e, "tid")) != tid) continue;
        return json_string_value(json_object_get(json_object_get(e, "args"), "name"));
    }
    return NULL;
}

typedef struct {
    orch_trace *t;
    orch_trace_lane lane;
    const char *name;
    int n;
} rec_arg;

static void *record(void *p)
{
    rec_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        uint64_t t0 = orch_trace_now_us(a->t);
        orch_trace_complete(a->t, a->lane, a->name, NULL, t0, 5, "bucket", i);
    }
    return NULL;
}

XDC_TEST(trace_two_threads_lanes_and_metadata)
{
    orch_trace *t = NULL;
    XDC_ASSERT_OK(orch_trace_create(3, "us-east/node1:3", 4096, &t));
    uint64_t before = orch_trace_now_us(t);
    rec_arg comp = {t, ORCH_LANE_COMPUTE, "backward", 1000}, comm = {t, ORCH_LANE_WAN_TX, "allreduce", 1000};
    pthread_t a, b;
    XDC_ASSERT_EQ(pthread_create(&a, NULL, record, &comp), 0);
    XDC_ASSERT_EQ(pthread_create(&b, NULL, record, &comm), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    orch_trace_instant(t, ORCH_LANE_WAN_RX, "reconnect", "wan", orch_trace_now_us(t));
    orch_trace_complete(t, ORCH_LANE_CODEC, "int8 \"enc\"\n", "codec", before, 12, NULL, 0);
    XDC_ASSERT_EQ(orch_trace_count(t), 2002);
    XDC_ASSERT_EQ(orch_trace_dropped(t), 0);

    char path[512];
    XDC_ASSERT_OK(orch_trace_write_dir(t, xdc_test_tmpdir(), path, sizeof path, NULL));
    XDC_ASSERT_STR_CONTAINS(path, "/trace-3.json");
    json_t *root;
    json_t *ev = load_events(path, &root);
    XDC_ASSERT_EQ(count_events(ev, "X", "backward", ORCH_LANE_COMPUTE + 1), 1000);
    XDC_ASSERT_EQ(count_events(ev, "X", "allreduce", ORCH_LANE_WAN_TX + 1), 1000);
    XDC_ASSERT_EQ(count_events(ev, "i", "reconnect", ORCH_LANE_WAN_RX + 1), 1);
    XDC_ASSERT_EQ(count_events(ev, "X", "int8 \"enc\"\n", ORCH_LANE_CODEC + 1), 1);
    XDC_ASSERT(strcmp(meta_name(ev, "process_name", 3, -1), "us-east/node1:3") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "thread_name", 3, ORCH_LANE_COMPUTE + 1), "compute") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "thread_name", 3, ORCH_LANE_INTRA + 1), "intra") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "thread_name", 3, ORCH_LANE_WAN_TX + 1), "wan_tx") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "thread_name", 3, ORCH_LANE_WAN_RX + 1), "wan_rx") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "thread_name", 3, ORCH_LANE_CODEC + 1), "codec") == 0);

    /* Every event of a thread keeps its argument, and timestamps sit on the wall-clock epoch. */
    long long arg_sum = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (strcmp(nm, "backward") != 0) continue;
        XDC_ASSERT_EQ(json_integer_value(json_object_get(e, "pid")), 3);
        XDC_ASSERT_EQ(json_integer_value(json_object_get(e, "dur")), 5);
        XDC_ASSERT(json_integer_value(json_object_get(e, "ts")) >= (json_int_t)before);
        arg_sum += json_integer_value(json_object_get(json_object_get(e, "args"), "bucket"));
    }
    XDC_ASSERT_EQ(arg_sum, 999LL * 1000 / 2);
    XDC_ASSERT(before > 1500000000ULL * 1000000ULL); /* after 2017 in Unix microseconds */
    XDC_ASSERT_EQ(json_integer_value(json_object_get(json_object_get(root, "otherData"), "dropped_events")), 0);
    json_decref(root);
    orch_trace_destroy(t);
    orch_trace_destroy(NULL);
}

XDC_TEST(trace_overflow_counts_drops_and_stays_valid_json)
{
    orch_trace *t = NULL;
    XDC_ASSERT_OK(orch_trace_create(0, "eu-west/n0:0", 8, &t));
    /* 3-byte UTF-8 characters around the name cut: the cut may not split one. */
    char longname[128] = "";
    for (int i = 0; i < 30; i++) strcat(longname, "\xe2\x82\xac"); /* U+20AC */
    for (int i = 0; i < 20; i++) orch_trace_complete(t, ORCH_LANE_INTRA, longname, "intra", 100 + i, 1, NULL, 0);
    orch_trace_complete(t, (orch_trace_lane)99, "bad lane", NULL, 1, 1, NULL, 0); /* ignored */
    XDC_ASSERT_EQ(orch_trace_count(t), 8);
    XDC_ASSERT_EQ(orch_trace_dropped(t), 12);
    char path[512];
    snprintf(path, sizeof path, "%s/t.json", xdc_test_tmpdir());
    XDC_ASSERT_OK(orch_trace_write(t, path, NULL));
    json_t *root;
    json_t *ev = load_events(path, &root);
    XDC_ASSERT_EQ(count_events(ev, "X", NULL, -1), 8);
    const char *nm = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        if (json_integer_value(json_object_get(e, "ts")) == 100) nm = json_string_value(json_object_get(e, "name"));
    }
    XDC_ASSERT(nm != NULL);
    XDC_ASSERT_EQ(strlen(nm) % 3, 0);
    XDC_ASSERT(strlen(nm) < ORCH_TRACE_NAME_MAX);
    XDC_ASSERT_EQ(json_integer_value(json_object_get(json_object_get(root, "otherData"), "dropped_events")), 12);
    json_decref(root);
    orch_trace_destroy(t);

    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_trace_create(0, "x", 4, &t));
    XDC_ASSERT_ERR(orch_trace_write(t, "/nonexistent-dir/t.json", &d), XDC_ERR_IO);
    XDC_ASSERT_STR_CONTAINS(d.msg, "/nonexistent-dir/t.json");
    orch_trace_destroy(t);
}

static void write_rank(int rank, const char *region, const char *path, int n)
{
    orch_trace *t = NULL;
    char name[64];
    snprintf(name, sizeof name, "%s/host:%d", region, rank);
    XDC_ASSERT_OK(orch_trace_create(rank, name, (size_t)n - 1, &t));
    for (int i = 0; i < n; i++)
        orch_trace_complete(t, ORCH_LANE_COMPUTE, "forward", NULL, 1000 + (uint64_t)i, 3, NULL, 0);
    XDC_ASSERT_OK(orch_trace_write(t, path, NULL));
    orch_trace_destroy(t);
}

XDC_TEST(trace_merge_joins_ranks_via_cli)
{
    char a[512], b[512], out[512], cmd[2048], text[4096];
    const char *dir = xdc_test_tmpdir();
    snprintf(a, sizeof a, "%s/trace-0.json", dir);
    snprintf(b, sizeof b, "%s/trace-1.json", dir);
    snprintf(out, sizeof out, "%s/merged.json", dir);
    write_rank(0, "us-east", a, 5); /* 4 kept, 1 dropped */
    write_rank(1, "eu-west", b, 7); /* 6 kept, 1 dropped */

    snprintf(cmd, sizeof cmd, "%s trace merge %s %s %s", xdc_test_bin(), out, a, b);
    int rc = xdc_test_run(cmd, text, sizeof text);
    XDC_ASSERT_MSG(rc == 0, "%s -> %d: %s", cmd, rc, text);
    json_t *root;
    json_t *ev = load_events(out, &root);
    XDC_ASSERT_EQ(count_events(ev, "X", "forward", -1), 10);
    XDC_ASSERT(strcmp(meta_name(ev, "process_name", 0, -1), "us-east/host:0") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "process_name", 1, -1), "eu-west/host:1") == 0);
    XDC_ASSERT(strcmp(meta_name(ev, "thread_name", 1, ORCH_LANE_WAN_RX + 1), "wan_rx") == 0);
    json_t *other = json_object_get(root, "otherData");
    XDC_ASSERT_EQ(json_integer_value(json_object_get(other, "dropped_events")), 2);
    XDC_ASSERT_EQ(json_integer_value(json_object_get(other, "merged_files")), 2);
    json_decref(root);

    /* A bare event array is a valid input too; bad inputs name the file and exit with sysexits. */
    char bare[512], bad[512], shape[512];
    snprintf(bare, sizeof bare, "%s/bare.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    snprintf(shape, sizeof shape, "%s/shape.json", dir);
    xdc_test_write_file(bare, "[{\"ph\":\"X\",\"pid\":9,\"tid\":1,\"ts\":5,\"dur\":1,\"name\":\"x\"}]");
    xdc_test_write_file(bad, "{\"traceEvents\": [\n  {\"ph\": }\n]}");
    xdc_test_write_file(shape, "{\"events\": []}");
    xdc_diag d = {{0}};
    XDC_ASSERT_OK(orch_trace_merge(out, (const char *[]){a, bare}, 2, &d));
    ev = load_events(out, &root);
    XDC_ASSERT_EQ(count_events(ev, "X", NULL, -1), 5);
    json_decref(root);
    XDC_ASSERT_ERR(orch_trace_merge(out, (const char *[]){a, bad}, 2, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "bad.json:2:");
    XDC_ASSERT_ERR(orch_trace_merge(out, (const char *[]){shape}, 1, &d), XDC_ERR_CORRUPT);
    XDC_ASSERT_STR_CONTAINS(d.msg, "traceEvents");

    snprintf(cmd, sizeof cmd, "%s trace merge %s %s %s/missing.json", xdc_test_bin(), out, a, dir);
    XDC_ASSERT_EQ(xdc_test_run(cmd, text, sizeof text), 66);
    XDC_ASSERT_STR_CONTAINS(text, "missing.json");
    snprintf(cmd, sizeof cmd, "%s trace merge %s %s", xdc_test_bin(), out, bad);
    XDC_ASSERT_EQ(xdc_test_run(cmd, text, sizeof text), 65);
    snprintf(cmd, sizeof cmd, "%s trace merge %s", xdc_test_bin(), out);
    XDC_ASSERT_EQ(xdc_test_run(cmd, text, sizeof text), 64);
}
