/* orch_trace.c — the Chrome trace recorder of orch_trace.h: a preallocated event array filled through
 * an atomic slot counter (a slot is published by a release store of its `ready` flag, so the writer
 * never reads half an event), the JSON writer with metadata naming the rank and its lanes, and the
 * merge of per-rank files with jansson. */
#include "orchestrator/obs/orch_trace.h"

#include "common/xdc_alloc.h"
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    _Atomic int ready; /* 1 once every field below is written */
    char ph;           /* 'X' complete, 'i' instant */
    uint8_t lane;
    uint64_t ts_us, dur_us;
    int64_t arg;
    char arg_name[ORCH_TRACE_CAT_MAX]; /* "" when the event has no argument */
    char name[ORCH_TRACE_NAME_MAX];
    char cat[ORCH_TRACE_CAT_MAX];
} trace_event;

struct orch_trace {
    int rank;
    char process_name[128];
    uint64_t wall0_ns, mono0_ns; /* the same instant on both clocks: the trace epoch */
    trace_event *events;         /* (capacity) */
    size_t capacity;
    _Atomic size_t next; /* slots handed out; may run past capacity */
    _Atomic uint64_t dropped;
};

static const char *const lane_names[ORCH_LANE_COUNT] = {"compute", "intra", "wan_tx", "wan_rx", "codec"};

xdc_err_t orch_trace_create(int rank, const char *process_name, size_t capacity, orch_trace **out)
{
    *out = NULL;
    if (rank < 0 || !process_name) return XDC_ERR_INVALID;
    if (capacity == 0) capacity = ORCH_TRACE_DEFAULT_CAPACITY;
    if (capacity > SIZE_MAX / sizeof(trace_event)) return XDC_ERR_RANGE;
    orch_trace *t = xdc_calloc(1, sizeof *t);
    if (!t) return XDC_ERR_NOMEM;
    t->events = xdc_malloc(capacity * sizeof *t->events);
    if (!t->events) {
        xdc_free(t);
        return XDC_ERR_NOMEM;
    }
    /* Fault the pages in now: first touch costs ~3 ms per MiB here, which must not land on the training
     * loop's first steps. Zero also means "not ready" for every slot. */
    memset(t->events, 0, capacity * sizeof *t->events);
    t->capacity = capacity;
    t->rank = rank;
    snprintf(t->process_name, sizeof t->process_name, "%s", process_name);
    t->wall0_ns = xdc_wall_ns();
    t->mono0_ns = xdc_now_ns();
    atomic_init(&t->next, 0);
    atomic_init(&t->dropped, 0);
    *out = t;
    return XDC_OK;
}

void orch_trace_destroy(orch_trace *t)
{
    if (!t) return;
    xdc_free(t->events);
    xdc_free(t);
}

uint64_t orch_trace_now_us(const orch_trace *t)
{
    if (!t) return 0;
    return (t->wall0_ns + (xdc_now_ns() - t->mono0_ns)) / 1000;
}

/* Copy `src` into dst[cap], cutting at a UTF-8 character boundary so the JSON stays valid. */
static void copy_cut(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src ? src : "", cap);
    if (!src) src = "";
    if (n == cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80) n--; /* back to the lead byte */
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static trace_event *claim(orch_trace *t, orch_trace_lane lane)
{
    if (!t || (unsigned)lane >= ORCH_LANE_COUNT) return NULL;
    size_t i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
    if (i >= t->capacity) {
        atomic_fetch_add_explicit(&t->dropped, 1, memory_order_relaxed);
        return NULL;
    }
    return &t->events[i];
}

void orch_trace_complete(orch_trace *t, orch_trace_lane lane, const char *name, const char *cat, uint64_t start_us,
                         uint64_t dur_us, const char *arg_name, int64_t arg)
{
    trace_event *e = claim(t, lane);
    if (!e) return;
    e->ph = 'X';
    e->lane = (uint8_t)lane;
    e->ts_us = start_us;
    e->dur_us = dur_us;
    e->arg = arg;
    copy_cut(e->arg_name, sizeof e->arg_name, arg_name);
    copy_cut(e->name, sizeof e->name, name);
    copy_cut(e->cat, sizeof e->cat, cat);
    atomic_store_explicit(&e->ready, 1, memory_order_release);
}

void orch_trace_instant(orch_trace *t, orch_trace_lane lane, const char *name, const char *cat, uint64_t ts_us)
{
    trace_event *e = claim(t, lane);
    if (!e) return;
    e->ph = 'i';
    e->lane = (uint8_t)lane;
    e->ts_us = ts_us;
    e->dur_us = 0;
    e->arg_name[0] = '\0';
    copy_cut(e->name, sizeof e->name, name);
    copy_cut(e->cat, sizeof e->cat, cat);
    atomic_store_explicit(&e->ready, 1, memory_order_release);
}

size_t orch_trace_count(const orch_trace *t)
{
    size_t n = atomic_load_explicit(&((orch_trace *)t)->next, memory_order_relaxed);
    return n < t->capacity ? n : t->capacity;
}

uint64_t orch_trace_dropped(const orch_trace *t)
{
    return atomic_load_explicit(&((orch_trace *)t)->dropped, memory_order_relaxed);
}

/* ---- writing ---------------------------------------------------------------------------------- */

/* A JSON string literal: quotes, backslashes and control bytes escaped; other bytes as they are. */
static void put_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
    fputc('"', f);
}

static void put_metadata(FILE *f, const orch_trace *t)
{
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", t->rank);
    put_json_string(f, t->process_name);
    fprintf(f, "}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
            t->rank, t->rank);
    for (int l = 0; l < ORCH_LANE_COUNT; l++) {
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                t->rank, l + 1, lane_names[l]);
        fprintf(f,
                ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
                t->rank, l + 1, l);
    }
}

static void put_event(FILE *f, const orch_trace *t, const trace_event *e)
{
    /* tid = lane + 1: the lane's row under this rank's process */
    fprintf(f, ",\n{\"ph\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":%llu,", e->ph, t->rank, e->lane + 1,
            (unsigned long long)e->ts_us);
    if (e->ph == 'X') fprintf(f, "\"dur\":%llu,", (unsigned long long)e->dur_us);
    else fprintf(f, "\"s\":\"t\",");
    fprintf(f, "\"name\":");
    put_json_string(f, e->name);
    fprintf(f, ",\"cat\":");
    put_json_string(f, e->cat[0] ? e->cat : lane_names[e->lane]);
    if (e->arg_name[0]) {
        fprintf(f, ",\"args\":{");
        put_json_string(f, e->arg_name);
        fprintf(f, ":%lld}", (long long)e->arg);
    }
    fputc('}', f);
}

/* Write through `path`.tmp.<pid> and rename, so a crash mid-write leaves the old file or none. */
static FILE *open_tmp(const char *path, char *tmp, size_t cap, xdc_diag *diag)
{
    snprintf(tmp, cap, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) xdc_diag_set(diag, "trace: cannot create %s: %s", tmp, strerror(errno));
    return f;
}

static xdc_err_t close_and_publish(FILE *f, const char *tmp, const char *path, xdc_diag *diag)
{
    bool bad = fflush(f) != 0 || ferror(f);
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (!bad && rename(tmp, path) == 0) return XDC_OK;
    if (!bad) err = errno;
    xdc_diag_set(diag, "trace: cannot write %s: %s", path, strerror(err));
    unlink(tmp);
    return XDC_ERR_IO;
}

xdc_err_t orch_trace_write(orch_trace *t, const char *path, xdc_diag *diag)
{
    char tmp[4096];
    FILE *f = open_tmp(path, tmp, sizeof tmp, diag);
    if (!f) return XDC_ERR_IO;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    put_metadata(f, t);
    size_t n = orch_trace_count(t), written = 0;
    for (size_t i = 0; i < n; i++) {
        const trace_event *e = &t->events[i];
        if (!atomic_load_explicit(&e->ready, memory_order_acquire)) continue; /* still being recorded */
        put_event(f, t, e);
        written++;
    }
    uint64_t dropped = orch_trace_dropped(t) + (n - written);
    fprintf(f, "\n],\"otherData\":{\"rank\":%d,\"events\":%zu,\"dropped_events\":%llu}}\n", t->rank, written,
            (unsigned long long)dropped);
    XDC_CHECK(close_and_publish(f, tmp, path, diag));
    if (dropped)
        XDC_WARN(XDC_SUB_ORCH, "trace: %s: %llu events dropped (buffer of %zu full); raise the trace capacity", path,
                 (unsigned long long)dropped, t->capacity);
    return XDC_OK;
}

xdc_err_t orch_trace_write_dir(orch_trace *t, const char *dir, char *path_out, size_t cap, xdc_diag *diag)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/trace-%d.json", dir, t->rank);
    if (n < 0 || (size_t)n >= sizeof path) {
        xdc_diag_set(diag, "trace: directory name too long: %s", dir);
        return XDC_ERR_INVALID;
    }
    XDC_CHECK(orch_trace_write(t, path, diag));
    if (path_out) snprintf(path_out, cap, "%s", path);
    return XDC_OK;
}

/* ---- merging ---------------------------------------------------------------------------------- */

/* Append the events of one input to `all`; add its dropped count to *dropped. `owner` maps each pid
 * named by process_name metadata to the file that named it, to warn when two files claim one rank. */
static xdc_err_t merge_one(const char *path, int index, json_t *all, json_t *owner, json_int_t *dropped, xdc_diag *diag)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        bool open_failed = json_error_code(&jerr) == json_error_cannot_open_file;
        if (open_failed) xdc_diag_set(diag, "trace merge: cannot read %s: %s", path, jerr.text);
        else xdc_diag_set(diag, "trace merge: %s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return open_failed ? XDC_ERR_IO : XDC_ERR_CORRUPT;
    }
    json_t *events = json_is_array(root) ? root : json_object_get(root, "traceEvents");
    if (!json_is_array(events)) {
        xdc_diag_set(diag, "trace merge: %s: neither an event array nor an object with a traceEvents array", path);
        json_decref(root);
        return XDC_ERR_CORRUPT;
    }
    json_t *other = json_is_object(root) ? json_object_get(root, "otherData") : NULL;
    json_t *d = other ? json_object_get(other, "dropped_events") : NULL;
    if (json_is_integer(d)) *dropped += json_integer_value(d);

    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        if (!json_is_object(e)) {
            xdc_diag_set(diag, "trace merge: %s: traceEvents[%zu] is not an object", path, i);
            json_decref(root);
            return XDC_ERR_CORRUPT;
        }
        json_t *pid = json_object_get(e, "pid");
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (json_is_integer(pid) && nm && strcmp(nm, "process_name") == 0) {
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)json_integer_value(pid));
            json_t *prev = json_object_get(owner, key);
            if (prev && json_integer_value(prev) != index)
                XDC_WARN(XDC_SUB_ORCH, "trace merge: pid %s appears in input %lld and in %s; their rows will mix", key,
                         (long long)json_integer_value(prev) + 1, path);
            else json_object_set_new(owner, key, json_integer(index));
        }
        if (json_array_append(all, e) != 0) {
            json_decref(root);
            return XDC_ERR_NOMEM;
        }
    }
    json_decref(root);
    return XDC_OK;
}

xdc_err_t orch_trace_merge(const char *out_path, const char *const *in_paths, int n_in, xdc_diag *diag)
{
    xdc_err_t rc = XDC_OK;
    json_int_t dropped = 0;
    json_t *all = json_array(), *owner = json_object(), *root = NULL;
    if (!all || !owner) {
        rc = XDC_ERR_NOMEM;
        goto fail;
    }
    for (int i = 0; i < n_in; i++) XDC_CHECK_GOTO(merge_one(in_paths[i], i, all, owner, &dropped, diag), rc, fail);
    root = json_pack("{s:s, s:O, s:{s:i, s:I}}", "displayTimeUnit", "ms", "traceEvents", all, "otherData",
                     "merged_files", n_in, "dropped_events", dropped);
    if (!root) {
        rc = XDC_ERR_NOMEM;
        goto fail;
    }
    char tmp[4096];
    FILE *f = open_tmp(out_path, tmp, sizeof tmp, diag);
    if (!f) {
        rc = XDC_ERR_IO;
        goto fail;
    }
    if (json_dumpf(root, f, JSON_COMPACT) != 0) {
        fclose(f);
        unlink(tmp);
        xdc_diag_set(diag, "trace merge: cannot write %s", tmp);
        rc = XDC_ERR_IO;
        goto fail;
    }
    fputc('\n', f);
    XDC_CHECK_GOTO(close_and_publish(f, tmp, out_path, diag), rc, fail);
fail:
    json_decref(root);
    json_decref(owner);
    json_decref(all);
    return rc;
}
