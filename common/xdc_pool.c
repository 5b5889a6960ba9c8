/* xdc_pool.c — fixed-size object pool (see xdc_pool.h): a header with two links in front of each
 * object, a free list and a list of every object allocated. */
#include "common/xdc_pool.h"

#include "common/xdc_alloc.h"

#include <stdalign.h>
#include <stddef.h>

struct xdc_pool_node {
    xdc_pool_node *next_free; /* free list; meaningful only while the object is free */
    xdc_pool_node *next_all;  /* every object of the pool */
    int is_free;
};

/* The object follows its header at an offset that keeps it aligned for any type. */
#define NODE_BYTES ((sizeof(xdc_pool_node) + alignof(max_align_t) - 1) / alignof(max_align_t) * alignof(max_align_t))

static void *node_obj(xdc_pool_node *n) { return (char *)n + NODE_BYTES; }
static xdc_pool_node *obj_node(void *obj) { return (xdc_pool_node *)(void *)((char *)obj - NODE_BYTES); }

void xdc_pool_init(xdc_pool *pool, size_t obj_size)
{
    pool->obj_size = obj_size;
    pool->free = NULL;
    pool->all = NULL;
    pool->n_all = pool->n_free = 0;
}

void *xdc_pool_get(xdc_pool *pool)
{
    xdc_pool_node *n = pool->free;
    if (n) {
        pool->free = n->next_free;
        pool->n_free--;
    } else {
        n = xdc_calloc(1, NODE_BYTES + pool->obj_size);
        if (!n) return NULL;
        n->next_all = pool->all;
        pool->all = n;
        pool->n_all++;
    }
    n->next_free = NULL;
    n->is_free = 0;
    return node_obj(n);
}

void xdc_pool_put(xdc_pool *pool, void *obj)
{
    if (!obj) return;
    xdc_pool_node *n = obj_node(obj);
    if (n->is_free) return; /* put twice: the object is on the free list once */
    n->is_free = 1;
    n->next_free = pool->free;
    pool->free = n;
    pool->n_free++;
}

void xdc_pool_each(xdc_pool *pool, void (*fn)(void *obj, void *arg), void *arg)
{
    for (xdc_pool_node *n = pool->all; n; n = n->next_all) fn(node_obj(n), arg);
}

size_t xdc_pool_allocated(const xdc_pool *pool) { return pool->n_all; }
size_t xdc_pool_free_count(const xdc_pool *pool) { return pool->n_free; }

void xdc_pool_destroy(xdc_pool *pool)
{
    for (xdc_pool_node *n = pool->all, *nx; n; n = nx) {
        nx = n->next_all;
        xdc_free(n);
    }
    pool->free = pool->all = NULL;
    pool->n_all = pool->n_free = 0;
}
