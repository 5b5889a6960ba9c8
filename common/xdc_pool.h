/* xdc_pool.h — a fixed-size object pool: objects of one size are allocated once (xdc_calloc, so a fresh
 * object is zeroed), handed back with xdc_pool_put and reused by the next xdc_pool_get, and freed only
 * by xdc_pool_destroy. A reused object keeps the contents it had when it was put back (a caller that
 * caches something in it, such as a backend handle, finds it again); callers that want a clean object
 * clear it themselves. The pool keeps its links in a header in front of each object, so every byte of
 * the object belongs to the caller.
 *
 * Not thread-safe: the caller holds its own lock around every call (the WAN engine mutex, the intra
 * communicator lock). */
#ifndef XDC_POOL_H
#define XDC_POOL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xdc_pool_node xdc_pool_node;

typedef struct xdc_pool {
    size_t obj_size;
    xdc_pool_node *free; /* objects handed back, most recent first */
    xdc_pool_node *all;  /* every object allocated, for destroy and xdc_pool_each */
    size_t n_all, n_free;
} xdc_pool;

/* An empty pool of objects of obj_size bytes; allocates nothing. */
void xdc_pool_init(xdc_pool *pool, size_t obj_size);
/* A free object (the most recently put back), or a new zeroed one; NULL when out of memory. The object
 * is aligned for any type. */
void *xdc_pool_get(xdc_pool *pool);
/* Hand an object from this pool back for reuse. NULL: no-op. */
void xdc_pool_put(xdc_pool *pool, void *obj);
/* Call fn(obj, arg) on every object ever allocated by the pool, free or in use (before destroy: release
 * what the objects own). */
void xdc_pool_each(xdc_pool *pool, void (*fn)(void *obj, void *arg), void *arg);
/* Objects allocated so far, and how many of them are free. */
size_t xdc_pool_allocated(const xdc_pool *pool);
size_t xdc_pool_free_count(const xdc_pool *pool);
/* Free every object, in use or not, and leave the pool empty (it may be used again). */
void xdc_pool_destroy(xdc_pool *pool);

#ifdef __cplusplus
}
#endif

#endif /* XDC_POOL_H */
