/* xdc_log.c — logger implementation: one formatted line per call, written with a single fwrite under a
 * lock so lines from threads never interleave. */
#include "common/xdc_log.h"
#include "common/xdc_time.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static struct {
    xdc_log_level level;
    unsigned subsys;
    xdc_log_format format;
    char region[64];
    char host[64];
    int rank;
    FILE *stream;
    pthread_mutex_t lock;
} g_log = {XDC_LOG_INFO, XDC_SUB_ALL, XDC_LOG_TEXT, "-", "-", -1, NULL, PTHREAD_MUTEX_INITIALIZER};

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};
static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
    {"common", XDC_SUB_COMMON}, {"topo", XDC_SUB_TOPO}, {"kern", XDC_SUB_KERN},
    {"comp", XDC_SUB_COMP},     {"wan", XDC_SUB_WAN},   {"intra", XDC_SUB_INTRA},
    {"orch", XDC_SUB_ORCH},     {"test", XDC_SUB_TEST}, {"all", XDC_SUB_ALL},
};

void xdc_log_set_level(xdc_log_level level) { g_log.level = level; }
void xdc_log_set_subsys(unsigned mask) { g_log.subsys = mask; }
void xdc_log_set_format(xdc_log_format fmt) { g_log.format = fmt; }
void xdc_log_set_stream(FILE *f) { g_log.stream = f; }

void xdc_log_set_identity(const char *region, const char *host, int rank)
{
    pthread_mutex_lock(&g_log.lock);
    snprintf(g_log.region, sizeof g_log.region, "%s", region ? region : "-");
    snprintf(g_log.host, sizeof g_log.host, "%s", host ? host : "-");
    g_log.rank = rank;
    pthread_mutex_unlock(&g_log.lock);
}

bool xdc_log_parse_level(const char *text, xdc_log_level *out)
{
    if (!text) return false;
    for (int i = 0; i <= XDC_LOG_TRACE; i++) {
        if (strcasecmp(text, level_names[i]) == 0 || (text[0] == '0' + i && text[1] == '\0')) {
            *out = (xdc_log_level)i;
            return true;
        }
    }
    return false;
}

bool xdc_log_parse_subsys(const char *text, unsigned *out)
{
    if (!text || !*text) return false;
    char *end;
    unsigned long v = strtoul(text, &end, 0);
    if (*end == '\0') {
        *out = (unsigned)v;
        return true;
    }
    unsigned mask = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++) {
            if (strlen(subsys_names[i].name) == n && strncasecmp(p, subsys_names[i].name, n) == 0) {
                mask |= subsys_names[i].bit;
                found = true;
            }
        }
        if (!found) return false;
        p += n;
        if (*p == ',') p++;
    }
    *out = mask;
    return true;
}

void xdc_log_init_from_env(void)
{
    const char *v;
    if ((v = getenv("XDC_LOG_LEVEL")) && *v) {
        xdc_log_level l;
        if (xdc_log_parse_level(v, &l)) g_log.level = l;
        else XDC_WARN(XDC_SUB_COMMON, "XDC_LOG_LEVEL=%s names no level (error|warn|info|debug|trace); ignored", v);
    }
    if ((v = getenv("XDC_LOG_SUBSYS")) && *v) {
        unsigned m;
        if (xdc_log_parse_subsys(v, &m)) g_log.subsys = m;
        else XDC_WARN(XDC_SUB_COMMON, "XDC_LOG_SUBSYS=%s has an unknown subsystem; ignored", v);
    }
    if ((v = getenv("XDC_LOG_FORMAT")) && *v) {
        if (strcasecmp(v, "json") == 0) g_log.format = XDC_LOG_JSON;
        else if (strcasecmp(v, "text") == 0) g_log.format = XDC_LOG_TEXT;
        else XDC_WARN(XDC_SUB_COMMON, "XDC_LOG_FORMAT=%s is neither text nor json; ignored", v);
    }
}

bool xdc_log_enabled(xdc_log_level level, unsigned subsys)
{
    return level <= g_log.level && (level == XDC_LOG_ERROR || (subsys & g_log.subsys) != 0);
}

static const char *subsys_name(unsigned subsys)
{
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
        if (subsys_names[i].bit == subsys) return subsys_names[i].name;
    return "all";
}

/* Append `s` to out[*n..cap) as the inside of a JSON string. */
static void json_escape(char *out, size_t cap, size_t *n, const char *s)
{
    for (; *s && *n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[(*n)++] = '\\';
            out[(*n)++] = (char)c;
        } else if (c < 0x20) {
            *n += (size_t)snprintf(out + *n, cap - *n, "\\u%04x", c);
        } else {
            out[(*n)++] = (char)c;
        }
    }
    out[*n] = '\0';
}

void xdc_log_write(xdc_log_level level, unsigned subsys, const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    double t = (double)xdc_wall_ns() / 1e9;

    char out[4096];
    size_t n = 0;
    pthread_mutex_lock(&g_log.lock);
    if (g_log.format == XDC_LOG_JSON) {
        n = (size_t)snprintf(out, sizeof out, "{\"ts\":%.6f,\"level\":\"%s\",\"subsys\":\"%s\",\"region\":\"", t,
                             level_names[level], subsys_name(subsys));
        json_escape(out, sizeof out, &n, g_log.region);
        n += (size_t)snprintf(out + n, sizeof out - n, "\",\"host\":\"");
        json_escape(out, sizeof out, &n, g_log.host);
        n += (size_t)snprintf(out + n, sizeof out - n, "\",\"rank\":%d,\"src\":\"%s:%d\",\"msg\":\"", g_log.rank, base,
                              line);
        json_escape(out, sizeof out, &n, msg);
        if (n + 3 < sizeof out) {
            out[n++] = '"';
            out[n++] = '}';
            out[n++] = '\n';
        }
    } else {
        char rank[16] = "";
        if (g_log.rank >= 0) snprintf(rank, sizeof rank, ":%d", g_log.rank);
        char where[96] = "";
        if (level >= XDC_LOG_DEBUG) snprintf(where, sizeof where, "%s:%d: ", base, line);
        int w = snprintf(out, sizeof out, "[%s/%s%s] %-5s %s%s\n", g_log.region, g_log.host, rank, level_names[level],
                         where, msg);
        n = w < 0 ? 0 : (size_t)w >= sizeof out ? sizeof out - 1 : (size_t)w;
        if (n == sizeof out - 1) out[n - 1] = '\n';
    }
    FILE *f = g_log.stream ? g_log.stream : stderr;
    fwrite(out, 1, n, f);
    fflush(f);
    pthread_mutex_unlock(&g_log.lock);
}
