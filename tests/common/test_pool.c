/* test_pool.c — common/xdc_pool: objects are allocated once and reused (most recent first), a fresh
 * object is zeroed and aligned, a reused one keeps its contents, put twice is harmless, each() visits
 * every object, destroy frees them all (ASan/LSan builds see a leak otherwise), and an allocation
 * failure comes back as NULL without disturbing the pool. */
#include "tests/xdc_test.h"

#include "common/xdc_alloc.h"
#include "common/xdc_pool.h"

#include <stdalign.h>
#include <stdint.h>

typedef struct {
    double d;
    uint64_t tag;
    char bytes[37];
} pool_obj;

static void count_each(void *obj, void *arg)
{
    (void)obj;
    (*(int *)arg)++;
}

XDC_TEST(pool_reuses_objects_and_allocates_each_once)
{
    xdc_pool pool;
    xdc_pool_init(&pool, sizeof(pool_obj));
    XDC_ASSERT_EQ(xdc_pool_allocated(&pool), 0);
    pool_obj *o[8];
    for (int i = 0; i < 8; i++) {
        o[i] = xdc_pool_get(&pool);
        XDC_ASSERT(o[i] != NULL);
        XDC_ASSERT_EQ((uintptr_t)o[i] % alignof(max_align_t), 0);
        XDC_ASSERT_EQ(o[i]->tag, 0); /* fresh: zeroed */
        for (int j = 0; j < i; j++) XDC_ASSERT(o[i] != o[j]);
        o[i]->tag = 100 + (uint64_t)i;
        for (size_t k = 0; k < sizeof o[i]->bytes; k++) o[i]->bytes[k] = (char)i; /* whole object is ours */
    }
    XDC_ASSERT_EQ(xdc_pool_allocated(&pool), 8);
    XDC_ASSERT_EQ(xdc_pool_free_count(&pool), 0);
    xdc_pool_put(&pool, o[2]);
    xdc_pool_put(&pool, o[5]);
    xdc_pool_put(&pool, o[5]); /* twice: listed once */
    xdc_pool_put(&pool, NULL);
    XDC_ASSERT_EQ(xdc_pool_free_count(&pool), 2);
    pool_obj *a = xdc_pool_get(&pool), *b = xdc_pool_get(&pool);
    XDC_ASSERT(a == o[5]); /* most recently put back first */
    XDC_ASSERT(b == o[2]);
    XDC_ASSERT_EQ(a->tag, 105); /* reused: contents kept */
    XDC_ASSERT_EQ(a->bytes[36], 5);
    XDC_ASSERT_EQ(xdc_pool_allocated(&pool), 8);
    XDC_ASSERT_EQ(xdc_pool_free_count(&pool), 0);
    /* Churn: get/put many times allocates nothing more. */
    for (int i = 0; i < 1000; i++) {
        pool_obj *x = xdc_pool_get(&pool);
        XDC_ASSERT(x != NULL);
        xdc_pool_put(&pool, x);
    }
    XDC_ASSERT_EQ(xdc_pool_allocated(&pool), 9);
    xdc_pool_put(&pool, o[0]);
    int n = 0;
    xdc_pool_each(&pool, count_each, &n); /* free and in use alike */
    XDC_ASSERT_EQ(n, 9);
    xdc_pool_destroy(&pool);
    XDC_ASSERT_EQ(xdc_pool_allocated(&pool), 0);
    XDC_ASSERT(xdc_pool_get(&pool) != NULL); /* usable again after destroy */
    xdc_pool_destroy(&pool);
}

XDC_TEST(pool_allocation_failure_returns_null_and_keeps_the_pool)
{
    xdc_pool pool;
    xdc_pool_init(&pool, 24);
    void *a = xdc_pool_get(&pool);
    XDC_ASSERT(a != NULL);
    xdc_alloc_fail_at(1);
    XDC_ASSERT(xdc_pool_get(&pool) == NULL); /* nothing free: needs an allocation, which fails */
    xdc_pool_put(&pool, a);
    XDC_ASSERT(xdc_pool_get(&pool) == a); /* a free object needs no allocation */
    xdc_alloc_fail_at(0);
    XDC_ASSERT_EQ(xdc_pool_allocated(&pool), 1);
    xdc_pool_destroy(&pool);
}
