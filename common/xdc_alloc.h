/* xdc_alloc.h — allocation wrappers. Every allocation in the project goes through these so a test can
 * make the Nth call fail (curl's torture idea) and walk each error path. xdc_free(NULL) is a no-op. */
#ifndef XDC_ALLOC_H
#define XDC_ALLOC_H

#include <stddef.h>

void *xdc_malloc(size_t size);
void *xdc_calloc(size_t n, size_t size);
void *xdc_realloc(void *p, size_t size);
/* Page-aligned (or `align`-aligned) allocation for DMA-able and vectorised buffers. */
void *xdc_aligned_alloc(size_t align, size_t size);
char *xdc_strdup(const char *s);
void xdc_free(void *p);

/* Fault injection: the `n`th allocation from now (1-based) and every one after it fails, until reset
 * with n = 0. Also read once from XDC_ALLOC_FAIL_AT at first use. */
void xdc_alloc_fail_at(long n);
/* Allocations made since the last xdc_alloc_fail_at() call (to size a torture loop). */
long xdc_alloc_count(void);

#endif /* XDC_ALLOC_H */
