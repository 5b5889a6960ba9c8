/* xdc_config.h — table-driven loading of YAML config files (topology, model, run) behind opaque nodes,
 * so every error can name file, line and column and no caller sees the YAML library (libyaml stays
 * inside config/config_yaml.c). A field table maps the keys of one mapping onto a C struct: type,
 * bounds, allowed words, required or not; unknown keys are errors. Nested mappings and sequences are
 * walked by the caller with the node functions below. Nodes belong to their document and stay valid
 * until xdc_cfg_destroy. */
#ifndef XDC_CONFIG_H
#define XDC_CONFIG_H

#include "common/xdc_err.h"

#include <stdbool.h>
#include <stddef.h>
/* Not needed here: <yaml.h> used to bring it in, and orchestrator/worker/orch_observe.c still relies on
 * that (getenv). Drop it once that file includes <stdlib.h> itself. */
#include <stdlib.h>

#define XDC_CFG_MAX_ERRORS 32

typedef struct xdc_cfg_error {
    int line, col; /* 1-based; 0 when the error has no position (e.g. a missing file) */
    char msg[256];
} xdc_cfg_error;

/* Every error found in one file, in the order found. */
typedef struct xdc_cfg_errors {
    char path[512];
    xdc_cfg_error items[XDC_CFG_MAX_ERRORS];
    int count;   /* stored */
    int dropped; /* found beyond XDC_CFG_MAX_ERRORS */
} xdc_cfg_errors;

/* One parsed YAML document, and a node inside it (a scalar, a sequence or a mapping). */
typedef struct xdc_cfg_doc xdc_cfg_doc;
typedef struct xdc_cfg_node xdc_cfg_node;

void xdc_cfg_errors_init(xdc_cfg_errors *e, const char *path);
void xdc_cfg_error_add(xdc_cfg_errors *e, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Errors at a node's start (NULL node: no position). */
void xdc_cfg_error_at(xdc_cfg_errors *e, const xdc_cfg_node *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "path:line:col: error: msg" lines to `f` (a FILE *). */
void xdc_cfg_errors_print(const xdc_cfg_errors *e, void *f);

typedef enum {
    XDC_CFG_STRING,   /* char[size] */
    XDC_CFG_INT,      /* int */
    XDC_CFG_INT64,    /* int64_t */
    XDC_CFG_DOUBLE,   /* double */
    XDC_CFG_BOOL,     /* bool: true/false/yes/no/on/off */
    XDC_CFG_DURATION, /* int64_t milliseconds: "30s", "250ms", bare number = seconds */
    XDC_CFG_NODE,     /* const xdc_cfg_node *: any node, left for the caller to walk */
} xdc_cfg_type;

typedef struct xdc_cfg_field {
    const char *key;
    xdc_cfg_type type;
    size_t offset; /* offsetof(target struct, member) */
    size_t size;   /* XDC_CFG_STRING: buffer size in bytes */
    bool required;
    double min, max;            /* numeric bounds, inclusive; both 0: unbounded */
    const char *const *choices; /* XDC_CFG_STRING: NULL-terminated allowed words, or NULL */
} xdc_cfg_field;

/* Parse one YAML document. Syntax errors go to `errs` with their position; XDC_ERR_CONFIG. */
xdc_err_t xdc_cfg_parse(const char *text, size_t len, xdc_cfg_doc **out, xdc_cfg_errors *errs);
/* Read a whole config file (at most 16 MiB) into a NUL-terminated buffer freed with xdc_free. */
xdc_err_t xdc_cfg_read_file(const char *path, char **text, size_t *len, xdc_cfg_errors *errs);
/* Read a file (at most 16 MiB) and parse it; a missing file is XDC_ERR_CONFIG with the OS reason. */
xdc_err_t xdc_cfg_load_file(const char *path, xdc_cfg_doc **out, xdc_cfg_errors *errs);
void xdc_cfg_destroy(xdc_cfg_doc *d);

const xdc_cfg_node *xdc_cfg_root(const xdc_cfg_doc *d);

typedef enum {
    XDC_CFG_ABSENT = 0, /* a NULL node */
    XDC_CFG_SCALAR,
    XDC_CFG_SEQUENCE,
    XDC_CFG_MAPPING,
} xdc_cfg_kind;

xdc_cfg_kind xdc_cfg_node_kind(const xdc_cfg_node *node);
/* 1-based line and column where the node starts; 0 for a NULL node. */
int xdc_cfg_node_line(const xdc_cfg_node *node);
int xdc_cfg_node_col(const xdc_cfg_node *node);

/* Fill `target` from mapping `map` according to `fields` (n entries). Reports unknown keys, duplicate
 * keys, missing required keys, wrong types, out-of-range numbers and words not in `choices`. Returns
 * the number of errors added. Keys absent from the file leave the target member untouched (defaults). */
int xdc_cfg_map_fields(const xdc_cfg_node *map, const xdc_cfg_field *fields, size_t n, void *target,
                       xdc_cfg_errors *errs);
/* The value of `key` in mapping `map` (the first one when the key repeats); NULL when the key is absent
 * or `map` is not a mapping. */
const xdc_cfg_node *xdc_cfg_map_get(const xdc_cfg_node *map, const char *key);

/* Sequence helpers: number of items (0 when `seq` is not a sequence) and item i (NULL out of range). */
int xdc_cfg_seq_len(const xdc_cfg_node *seq);
const xdc_cfg_node *xdc_cfg_seq_item(const xdc_cfg_node *seq, int i);
/* Scalar text of a node (NULL when not a scalar). */
const char *xdc_cfg_scalar(const xdc_cfg_node *node);

#endif /* XDC_CONFIG_H */
