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

/* Memory other processes of this user may map: intra's single-copy collectives reduce straight in a
 * peer's buffer instead of copying it through the kernel. Page-aligned and zeroed; a memfd of its own,
 * mapped shared. Where memfds are refused, or XDC_SHARED_MAX allocations are live, it is an ordinary
 * aligned allocation (xdc_shared_find then says no). Free with xdc_shared_free. */
void *xdc_shared_alloc(size_t size);
void xdc_shared_free(void *p);
/* When p lies in a live shared allocation of this process: the memfd's descriptor and inode number (a
 * peer opens /proc/<pid>/fd/<fd> and checks the inode) and p's byte offset in it. 0 otherwise. */
int xdc_shared_find(const void *p, int *fd, unsigned long long *ino, unsigned long long *off);

/* Fault injection: the `n`th allocation from now (1-based) and every one after it fails, until reset
 * with n = 0. Also read once from XDC_ALLOC_FAIL_AT at first use. */
void xdc_alloc_fail_at(long n);
/* Allocations made since the last xdc_alloc_fail_at() call (to size a torture loop). */
long xdc_alloc_count(void);

#endif /* XDC_ALLOC_H */
