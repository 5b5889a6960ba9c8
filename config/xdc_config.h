/* xdc_yaml.h — table-driven loading of YAML config files (topology, model, training) on libyaml's
 * document API, so every error can name file, line and column. A field table maps the keys of one
 * mapping onto a C struct: type, bounds, allowed words, required or not; unknown keys are errors.
 * Nested mappings and sequences are walked by the caller with the node helpers below. */
#ifndef XDC_CONFIG_H
#define XDC_CONFIG_H

#include "common/xdc_err.h"

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

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

void xdc_cfg_errors_init(xdc_cfg_errors *e, const char *path);
void xdc_cfg_error_add(xdc_cfg_errors *e, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Errors at a node's start mark (NULL node: no position). */
void xdc_cfg_error_at(xdc_cfg_errors *e, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "path:line:col: error: msg" lines to `f` (a FILE *). */
void xdc_cfg_errors_print(const xdc_cfg_errors *e, void *f);

typedef enum {
    XDC_YF_STRING,   /* char[size] */
    XDC_YF_INT,      /* int */
    XDC_YF_INT64,    /* int64_t */
    XDC_YF_DOUBLE,   /* double */
    XDC_YF_BOOL,     /* bool: true/false/yes/no/on/off */
    XDC_YF_DURATION, /* int64_t milliseconds: "30s", "250ms", bare number = seconds */
    XDC_YF_NODE,     /* const yaml_node_t *: any node, left for the caller to walk */
} xdc_yaml_type;

typedef struct xdc_yaml_field {
    const char *key;
    xdc_yaml_type type;
    size_t offset; /* offsetof(target struct, member) */
    size_t size;   /* XDC_YF_STRING: buffer size in bytes */
    bool required;
    double min, max;            /* numeric bounds, inclusive; both 0: unbounded */
    const char *const *choices; /* XDC_YF_STRING: NULL-terminated allowed words, or NULL */
} xdc_yaml_field;

typedef struct xdc_yaml xdc_yaml;

/* Parse one YAML document. Syntax errors go to `errs` with their position; XDC_ERR_CONFIG. */
xdc_err_t xdc_yaml_parse(const char *text, size_t len, xdc_yaml **out, xdc_cfg_errors *errs);
/* Read a whole config file (at most 16 MiB) into a NUL-terminated buffer freed with xdc_free. */
xdc_err_t xdc_yaml_read_file(const char *path, char **text, size_t *len, xdc_cfg_errors *errs);
/* Read a file (at most 16 MiB) and parse it; a missing file is XDC_ERR_CONFIG with the OS reason. */
xdc_err_t xdc_yaml_load_file(const char *path, xdc_yaml **out, xdc_cfg_errors *errs);
void xdc_yaml_destroy(xdc_yaml *y);

yaml_node_t *xdc_yaml_root(xdc_yaml *y);
yaml_node_t *xdc_yaml_node(xdc_yaml *y, int id);

/* Fill `target` from mapping `map` according to `fields` (n entries). Reports unknown keys, duplicate
 * keys, missing required keys, wrong types, out-of-range numbers and words not in `choices`. Returns
 * the number of errors added. Keys absent from the file leave the target member untouched (defaults). */
int xdc_yaml_map_fields(xdc_yaml *y, const yaml_node_t *map, const xdc_yaml_field *fields, size_t n, void *target,
                        xdc_cfg_errors *errs);

/* Sequence helpers: number of items and item i (NULL when `seq` is not a sequence). */
int xdc_yaml_seq_len(const yaml_node_t *seq);
yaml_node_t *xdc_yaml_seq_item(xdc_yaml *y, const yaml_node_t *seq, int i);
/* Scalar text of a node (NULL when not a scalar). */
const char *xdc_yaml_scalar(const yaml_node_t *node);

#endif /* XDC_CONFIG_H */
