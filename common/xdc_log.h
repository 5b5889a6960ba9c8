/* xdc_log.h — the one logger: levels, a subsystem mask, a "region/host:rank" prefix and optional JSON
 * Lines output. The level is checked before any formatting (XDC_LOG* macros), so disabled debug lines
 * cost one load and a compare. Configured once per process from flags or XDC_LOG_* variables. */
#ifndef XDC_LOG_H
#define XDC_LOG_H

#include <stdbool.h>
#include <stdio.h>

typedef enum {
    XDC_LOG_ERROR = 0,
    XDC_LOG_WARN = 1,
    XDC_LOG_INFO = 2,
    XDC_LOG_DEBUG = 3,
    XDC_LOG_TRACE = 4,
} xdc_log_level;

/* Subsystem bits; XDC_LOG_SUBSYS="wan,intra" or a number selects them. */
enum {
    XDC_SUB_COMMON = 1u << 0,
    XDC_SUB_TOPO = 1u << 1,
    XDC_SUB_KERN = 1u << 2,
    XDC_SUB_COMP = 1u << 3,
    XDC_SUB_WAN = 1u << 4,
    XDC_SUB_INTRA = 1u << 5,
    XDC_SUB_ORCH = 1u << 6,
    XDC_SUB_TEST = 1u << 7,
    XDC_SUB_ALL = 0xffffffffu,
};

typedef enum { XDC_LOG_TEXT = 0, XDC_LOG_JSON = 1 } xdc_log_format;

/* Process-wide logger settings (configuration, not error state). */
void xdc_log_set_level(xdc_log_level level);
void xdc_log_set_subsys(unsigned mask);
void xdc_log_set_format(xdc_log_format fmt);
/* Identity shown in the prefix: region/host:rank. NULL region or host keeps "-"; rank < 0 hides it. */
void xdc_log_set_identity(const char *region, const char *host, int rank);
/* Write to this stream instead of stderr (not closed by the logger). NULL restores stderr. */
void xdc_log_set_stream(FILE *f);

/* Parse "error|warn|info|debug|trace" (or 0..4). Returns false when the text names no level. */
bool xdc_log_parse_level(const char *text, xdc_log_level *out);
/* Parse a comma list of subsystem names ("wan,intra", "all") or a number. */
bool xdc_log_parse_subsys(const char *text, unsigned *out);
/* Read XDC_LOG_LEVEL, XDC_LOG_SUBSYS and XDC_LOG_FORMAT (text|json); unknown values are ignored with a
 * warning naming the variable. */
void xdc_log_init_from_env(void);

bool xdc_log_enabled(xdc_log_level level, unsigned subsys);
void xdc_log_write(xdc_log_level level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define XDC_LOG(level, subsys, ...)                                                                                \
    do {                                                                                                           \
        if (xdc_log_enabled((level), (subsys))) xdc_log_write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)
#define XDC_ERROR(subsys, ...) XDC_LOG(XDC_LOG_ERROR, subsys, __VA_ARGS__)
#define XDC_WARN(subsys, ...)  XDC_LOG(XDC_LOG_WARN, subsys, __VA_ARGS__)
#define XDC_INFO(subsys, ...)  XDC_LOG(XDC_LOG_INFO, subsys, __VA_ARGS__)
#define XDC_DEBUG(subsys, ...) XDC_LOG(XDC_LOG_DEBUG, subsys, __VA_ARGS__)
#define XDC_TRACE(subsys, ...) XDC_LOG(XDC_LOG_TRACE, subsys, __VA_ARGS__)

#endif /* XDC_LOG_H */
