/* config_yaml.c — libyaml document loading and the table-driven field mapper behind every xdc config
 * file; the only file that includes <yaml.h>. Every libyaml node of a document gets one opaque
 * xdc_cfg_node (the node and its document), so callers walk mappings and sequences without the
 * document at hand. All numbers are parsed strictly (the whole scalar must be the number) and
 * bounds-checked. */
#include "config/xdc_config.h"

#include "common/xdc_alloc.h"
#include "common/xdc_parse.h"
#include "common/xdc_time.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#define XDC_CFG_MAX_FILE  (16u << 20) /* bytes; config files are small, a bigger one is a mistake */
#define XDC_CFG_MAX_DEPTH 64          /* nested mappings/sequences; xdc's deepest file uses 4 */

struct xdc_cfg_node {
    const yaml_node_t *y;
    const xdc_cfg_doc *doc;
};

struct xdc_cfg_doc {
    yaml_document_t doc;
    xdc_cfg_node *nodes; /* (n_nodes) one per libyaml node, in its id order (id = index + 1) */
    size_t n_nodes;
};

void xdc_cfg_errors_init(xdc_cfg_errors *e, const char *path)
{
    if (!e) return;
    memset(e, 0, sizeof *e);
    snprintf(e->path, sizeof e->path, "%s", path ? path : "<memory>");
}

static void error_vadd(xdc_cfg_errors *e, int line, int col, const char *fmt, va_list ap)
{
    if (!e) return;
    if (e->count >= XDC_CFG_MAX_ERRORS) {
        e->dropped++;
        return;
    }
    xdc_cfg_error *it = &e->items[e->count++];
    it->line = line;
    it->col = col;
    vsnprintf(it->msg, sizeof it->msg, fmt, ap);
}

void xdc_cfg_error_add(xdc_cfg_errors *e, int line, int col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vadd(e, line, col, fmt, ap);
    va_end(ap);
}

int xdc_cfg_node_line(const xdc_cfg_node *node) { return node ? (int)node->y->start_mark.line + 1 : 0; }
int xdc_cfg_node_col(const xdc_cfg_node *node) { return node ? (int)node->y->start_mark.column + 1 : 0; }

void xdc_cfg_error_at(xdc_cfg_errors *e, const xdc_cfg_node *node, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    error_vadd(e, xdc_cfg_node_line(node), xdc_cfg_node_col(node), fmt, ap);
    va_end(ap);
}

void xdc_cfg_errors_print(const xdc_cfg_errors *e, void *fp)
{
    FILE *f = fp;
    for (int i = 0; i < e->count; i++) {
        const xdc_cfg_error *it = &e->items[i];
        if (it->line > 0) fprintf(f, "%s:%d:%d: error: %s\n", e->path, it->line, it->col, it->msg);
        else fprintf(f, "%s: error: %s\n", e->path, it->msg);
    }
    if (e->dropped) fprintf(f, "%s: %d more errors not shown\n", e->path, e->dropped);
}

static void syntax_error(const yaml_parser_t *parser, xdc_cfg_errors *errs)
{
    const yaml_mark_t *m = parser->problem ? &parser->problem_mark : &parser->context_mark;
    xdc_cfg_error_add(errs, (int)m->line + 1, (int)m->column + 1, "YAML syntax: %s%s%s",
                      parser->problem ? parser->problem : "malformed document", parser->context ? " " : "",
                      parser->context ? parser->context : "");
}

/* A first pass over the event stream that refuses nesting deeper than XDC_CFG_MAX_DEPTH before the
 * document is built. libyaml's scanner revisits every open flow level on each token, so its cost grows
 * with depth times size; stopping at the cap keeps loading linear in the input. */
static xdc_err_t check_depth(const char *text, size_t len, xdc_cfg_errors *errs)
{
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return XDC_ERR_NOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    xdc_err_t rc = XDC_OK;
    int depth = 0;
    for (int end = 0; !end && rc == XDC_OK;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            syntax_error(&parser, errs);
            rc = XDC_ERR_CONFIG;
            break;
        }
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
            if (++depth > XDC_CFG_MAX_DEPTH) {
                xdc_cfg_error_add(errs, (int)ev.start_mark.line + 1, (int)ev.start_mark.column + 1,
                                  "nesting deeper than %d levels", XDC_CFG_MAX_DEPTH);
                rc = XDC_ERR_CONFIG;
            }
        } else if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        end = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

xdc_err_t xdc_cfg_parse(const char *text, size_t len, xdc_cfg_doc **out, xdc_cfg_errors *errs)
{
    *out = NULL;
    XDC_CHECK(check_depth(text, len, errs));
    xdc_cfg_doc *y = xdc_calloc(1, sizeof *y);
    if (!y) return XDC_ERR_NOMEM;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        xdc_free(y);
        return XDC_ERR_NOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &y->doc)) {
        syntax_error(&parser, errs);
        yaml_parser_delete(&parser);
        xdc_free(y);
        return XDC_ERR_CONFIG;
    }
    yaml_parser_delete(&parser);
    if (!yaml_document_get_root_node(&y->doc)) {
        xdc_cfg_error_add(errs, 1, 1, "the file is empty");
        xdc_cfg_destroy(y);
        return XDC_ERR_CONFIG;
    }
    y->n_nodes = (size_t)(y->doc.nodes.top - y->doc.nodes.start);
    y->nodes = xdc_calloc(y->n_nodes, sizeof *y->nodes);
    if (!y->nodes) {
        xdc_cfg_destroy(y);
        return XDC_ERR_NOMEM;
    }
    for (size_t i = 0; i < y->n_nodes; i++) y->nodes[i] = (xdc_cfg_node){.y = &y->doc.nodes.start[i], .doc = y};
    *out = y;
    return XDC_OK;
}

xdc_err_t xdc_cfg_read_file(const char *path, char **text, size_t *len, xdc_cfg_errors *errs)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        xdc_cfg_error_add(errs, 0, 0, "cannot open: %s", strerror(errno));
        return XDC_ERR_CONFIG;
    }
    char *buf = xdc_malloc(XDC_CFG_MAX_FILE + 1);
    if (!buf) {
        fclose(f);
        return XDC_ERR_NOMEM;
    }
    size_t n = fread(buf, 1, XDC_CFG_MAX_FILE + 1, f);
    int rerr = ferror(f);
    fclose(f);
    if (rerr || n > XDC_CFG_MAX_FILE) {
        if (rerr) xdc_cfg_error_add(errs, 0, 0, "read failed");
        else xdc_cfg_error_add(errs, 0, 0, "file is larger than %u MiB; not a config file?", XDC_CFG_MAX_FILE >> 20);
        xdc_free(buf);
        return XDC_ERR_CONFIG;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return XDC_OK;
}

xdc_err_t xdc_cfg_load_file(const char *path, xdc_cfg_doc **out, xdc_cfg_errors *errs)
{
    char *text;
    size_t len;
    *out = NULL;
    XDC_CHECK(xdc_cfg_read_file(path, &text, &len, errs));
    xdc_err_t rc = xdc_cfg_parse(text, len, out, errs);
    xdc_free(text);
    return rc;
}

void xdc_cfg_destroy(xdc_cfg_doc *y)
{
    if (!y) return;
    yaml_document_delete(&y->doc);
    xdc_free(y->nodes);
    xdc_free(y);
}

/* The node of libyaml id `id` in document d (ids are 1-based), NULL when out of range. */
static const xdc_cfg_node *node_of(const xdc_cfg_doc *d, int id)
{
    return id >= 1 && (size_t)id <= d->n_nodes ? &d->nodes[id - 1] : NULL;
}

const xdc_cfg_node *xdc_cfg_root(const xdc_cfg_doc *d) { return d && d->n_nodes ? &d->nodes[0] : NULL; }

xdc_cfg_kind xdc_cfg_node_kind(const xdc_cfg_node *node)
{
    if (!node) return XDC_CFG_ABSENT;
    switch (node->y->type) {
    case YAML_SCALAR_NODE: return XDC_CFG_SCALAR;
    case YAML_SEQUENCE_NODE: return XDC_CFG_SEQUENCE;
    case YAML_MAPPING_NODE: return XDC_CFG_MAPPING;
    default: return XDC_CFG_ABSENT;
    }
}

const char *xdc_cfg_scalar(const xdc_cfg_node *node)
{
    return node && node->y->type == YAML_SCALAR_NODE ? (const char *)node->y->data.scalar.value : NULL;
}

int xdc_cfg_seq_len(const xdc_cfg_node *seq)
{
    if (!seq || seq->y->type != YAML_SEQUENCE_NODE) return 0;
    return (int)(seq->y->data.sequence.items.top - seq->y->data.sequence.items.start);
}

const xdc_cfg_node *xdc_cfg_seq_item(const xdc_cfg_node *seq, int i)
{
    if (i < 0 || i >= xdc_cfg_seq_len(seq)) return NULL;
    return node_of(seq->doc, seq->y->data.sequence.items.start[i]);
}

const xdc_cfg_node *xdc_cfg_map_get(const xdc_cfg_node *map, const char *key)
{
    if (!map || map->y->type != YAML_MAPPING_NODE) return NULL;
    for (const yaml_node_pair_t *p = map->y->data.mapping.pairs.start; p < map->y->data.mapping.pairs.top; p++) {
        const char *k = xdc_cfg_scalar(node_of(map->doc, p->key));
        if (k && strcmp(k, key) == 0) return node_of(map->doc, p->value);
    }
    return NULL;
}

static const char *type_word(xdc_cfg_type t)
{
    switch (t) {
    case XDC_CFG_STRING: return "a string";
    case XDC_CFG_INT:
    case XDC_CFG_INT64: return "an integer";
    case XDC_CFG_DOUBLE: return "a number";
    case XDC_CFG_BOOL: return "true or false";
    case XDC_CFG_DURATION: return "a duration such as 30s or 250ms";
    case XDC_CFG_NODE: return "a value";
    }
    return "a value";
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = true, true;
        if (strcasecmp(s, no[i]) == 0) return *out = false, true;
    }
    return false;
}

/* Strict number: the whole scalar, finite. */
static bool parse_number(const char *s, double *out)
{
    if (!*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool out_of_bounds(const xdc_cfg_field *f, double v)
{
    return (f->min != 0 || f->max != 0) && (v < f->min || v > f->max);
}

static void bounds_error(xdc_cfg_errors *errs, const xdc_cfg_node *node, const xdc_cfg_field *f, const char *text)
{
    xdc_cfg_error_at(errs, node, "%s: %s is out of range [%g, %g]", f->key, text, f->min, f->max);
}

/* Store one scalar into the target; returns false (with an error added) on a bad value. */
static bool store_field(const xdc_cfg_node *node, const xdc_cfg_field *f, void *target, xdc_cfg_errors *errs)
{
    char *dst = (char *)target + f->offset;
    if (f->type == XDC_CFG_NODE) {
        *(const xdc_cfg_node **)dst = node;
        return true;
    }
    const char *s = xdc_cfg_scalar(node);
    if (!s) {
        xdc_cfg_error_at(errs, node, "%s: expected %s, found a %s", f->key, type_word(f->type),
                         xdc_cfg_node_kind(node) == XDC_CFG_MAPPING ? "mapping" : "list");
        return false;
    }
    double v;
    switch (f->type) {
    case XDC_CFG_STRING:
        if (strlen(s) >= f->size) {
            xdc_cfg_error_at(errs, node, "%s: value is longer than %zu characters", f->key, f->size - 1);
            return false;
        }
        if (f->choices) {
            bool ok = false;
            for (const char *const *c = f->choices; *c; c++) ok = ok || strcmp(*c, s) == 0;
            if (!ok) {
                char list[200] = "";
                for (const char *const *c = f->choices; *c; c++)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", c == f->choices ? "" : ", ", *c);
                xdc_cfg_error_at(errs, node, "%s: '%s' is not one of: %s", f->key, s, list);
                return false;
            }
        }
        memcpy(dst, s, strlen(s) + 1);
        return true;
    case XDC_CFG_INT:
    case XDC_CFG_INT64: {
        int64_t i;
        if (xdc_parse_i64(s, INT64_MIN, INT64_MAX, &i, NULL) != XDC_OK) {
            xdc_cfg_error_at(errs, node, "%s: expected %s, found '%s'", f->key, type_word(f->type), s);
            return false;
        }
        if (out_of_bounds(f, (double)i) || (f->type == XDC_CFG_INT && (i > INT32_MAX || i < INT32_MIN))) {
            bounds_error(errs, node, f, s);
            return false;
        }
        if (f->type == XDC_CFG_INT) *(int *)dst = (int)i;
        else *(int64_t *)dst = i;
        return true;
    }
    case XDC_CFG_DOUBLE:
        if (!parse_number(s, &v)) {
            xdc_cfg_error_at(errs, node, "%s: expected a number, found '%s'", f->key, s);
            return false;
        }
        if (out_of_bounds(f, v)) {
            bounds_error(errs, node, f, s);
            return false;
        }
        *(double *)dst = v;
        return true;
    case XDC_CFG_BOOL:
        if (!parse_bool(s, (bool *)dst)) {
            xdc_cfg_error_at(errs, node, "%s: expected true or false, found '%s'", f->key, s);
            return false;
        }
        return true;
    case XDC_CFG_DURATION: {
        int64_t ms;
        if (xdc_parse_duration_ms(s, &ms) != 0) {
            xdc_cfg_error_at(errs, node, "%s: expected a duration such as 30s or 250ms, found '%s'", f->key, s);
            return false;
        }
        if (out_of_bounds(f, (double)ms)) {
            bounds_error(errs, node, f, s);
            return false;
        }
        *(int64_t *)dst = ms;
        return true;
    }
    case XDC_CFG_NODE: break;
    }
    return false;
}

int xdc_cfg_map_fields(const xdc_cfg_node *map, const xdc_cfg_field *fields, size_t n, void *target,
                       xdc_cfg_errors *errs)
{
    int errors = 0;
    if (!map || map->y->type != YAML_MAPPING_NODE) {
        xdc_cfg_error_at(errs, map, "expected a mapping of key: value");
        return 1;
    }
    /* Which fields were seen, to find duplicates and missing required keys. */
    const xdc_cfg_node *seen[64] = {0};
    if (n > 64) n = 64;
    for (const yaml_node_pair_t *p = map->y->data.mapping.pairs.start; p < map->y->data.mapping.pairs.top; p++) {
        const xdc_cfg_node *k = node_of(map->doc, p->key), *v = node_of(map->doc, p->value);
        const char *key = xdc_cfg_scalar(k);
        if (!key) {
            xdc_cfg_error_at(errs, k, "keys must be plain words");
            errors++;
            continue;
        }
        size_t i = 0;
        while (i < n && strcmp(fields[i].key, key) != 0) i++;
        if (i == n) {
            char list[256] = "";
            for (size_t j = 0; j < n; j++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", fields[j].key);
            xdc_cfg_error_at(errs, k, "unknown key '%s' (expected one of: %s)", key, list);
            errors++;
            continue;
        }
        if (seen[i]) {
            xdc_cfg_error_at(errs, k, "duplicate key '%s' (first set at line %d)", key, xdc_cfg_node_line(seen[i]));
            errors++;
            continue;
        }
        seen[i] = k;
        if (!store_field(v, &fields[i], target, errs)) errors++;
    }
    for (size_t i = 0; i < n; i++)
        if (fields[i].required && !seen[i]) {
            xdc_cfg_error_at(errs, map, "missing required key '%s'", fields[i].key);
            errors++;
        }
    return errors;
}
