/* xdc_alloc.c — allocation wrappers with an "fail the Nth call" switch for error-path tests. */
#include "common/xdc_alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_long g_count;   /* allocations since the last arm */
static atomic_long g_fail_at; /* 0: never fail; else the first failing call number */
static atomic_int g_env_read;

static int should_fail(void)
{
    if (!atomic_exchange(&g_env_read, 1)) {
        const char *v = getenv("XDC_ALLOC_FAIL_AT");
        if (v && *v) atomic_store(&g_fail_at, strtol(v, NULL, 10));
    }
    long n = atomic_fetch_add(&g_count, 1) + 1;
    long at = atomic_load(&g_fail_at);
    return at > 0 && n >= at;
}

void xdc_alloc_fail_at(long n)
{
    atomic_store(&g_env_read, 1);
    atomic_store(&g_count, 0);
    atomic_store(&g_fail_at, n);
}

long xdc_alloc_count(void) { return atomic_load(&g_count); }

void *xdc_malloc(size_t size)
{
    if (should_fail()) return NULL;
    return malloc(size ? size : 1);
}

void *xdc_calloc(size_t n, size_t size)
{
    if (should_fail()) return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *xdc_realloc(void *p, size_t size)
{
    if (should_fail()) return NULL;
    return realloc(p, size ? size : 1);
}

void *xdc_aligned_alloc(size_t align, size_t size)
{
    if (should_fail()) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1) != 0) return NULL;
    return p;
}

char *xdc_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = xdc_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void xdc_free(void *p) { free(p); }
