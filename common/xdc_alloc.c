/* xdc_alloc.c — allocation wrappers with an "fail the Nth call" switch for error-path tests, and shared
 * allocations (a memfd each) that the CPU intra backend's peers map and use in place. */
#include "common/xdc_alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* ---- shared allocations -------------------------------------------------------------------------- */

#define XDC_SHARED_MAX 256 /* live shared allocations: the large buffers a worker communicates from */

typedef struct shared_region {
    unsigned char *base; /* NULL: free entry */
    size_t bytes;        /* mapped length, a whole number of pages */
    int fd;
    unsigned long long ino;
} shared_region;

static shared_region g_shared[XDC_SHARED_MAX];
static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry holding p (lock held), or NULL. */
static shared_region *shared_of(const void *p)
{
    for (int i = 0; i < XDC_SHARED_MAX; i++)
        if (g_shared[i].base && (const unsigned char *)p >= g_shared[i].base &&
            (const unsigned char *)p < g_shared[i].base + g_shared[i].bytes)
            return &g_shared[i];
    return NULL;
}

/* A zeroed memfd mapping of `bytes` (whole pages) in free entry e: 0, or -1 and nothing held. */
static int shared_map(shared_region *e, size_t bytes)
{
    int fd = memfd_create("xdc-shared", MFD_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)bytes) == 0 && fstat(fd, &st) == 0)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -1;
    }
    *e = (shared_region){p, bytes, fd, (unsigned long long)st.st_ino};
    return 0;
}

void *xdc_shared_alloc(size_t size)
{
    if (should_fail()) return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = ((size ? size : 1) + page - 1) / page * page;
    pthread_mutex_lock(&g_shared_lock);
    shared_region *e = NULL;
    for (int i = 0; i < XDC_SHARED_MAX && !e; i++)
        if (!g_shared[i].base) e = &g_shared[i];
    void *p = e && shared_map(e, bytes) == 0 ? e->base : NULL;
    pthread_mutex_unlock(&g_shared_lock);
    if (p) return p;
    if (posix_memalign(&p, page, bytes) != 0) return NULL; /* not shareable here: still memory */
    memset(p, 0, bytes);
    return p;
}

void xdc_shared_free(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&g_shared_lock);
    shared_region *e = shared_of(p), gone = e ? *e : (shared_region){0};
    if (e) e->base = NULL;
    pthread_mutex_unlock(&g_shared_lock);
    if (!gone.base) {
        free(p);
        return;
    }
    munmap(gone.base, gone.bytes);
    close(gone.fd);
}

int xdc_shared_find(const void *p, int *fd, unsigned long long *ino, unsigned long long *off)
{
    pthread_mutex_lock(&g_shared_lock);
    const shared_region *e = shared_of(p);
    if (e) *fd = e->fd, *ino = e->ino, *off = (unsigned long long)((const unsigned char *)p - e->base);
    pthread_mutex_unlock(&g_shared_lock);
    return e != NULL;
}
