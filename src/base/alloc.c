/*
 * alloc.c - the x* allocators from check.h: abort on out-of-memory.
 */
#include "base/check.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

static void oom(size_t n)
{
    fprintf(stderr, "out of memory allocating %zu bytes\n", n);
    abort();
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) oom(n);
    return p;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

void *xaligned_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (n + 63) & ~(size_t)63)) oom(n);
    return p;
}

void *huge_alloc(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    if (n < huge) {
        void *p = NULL;
        return posix_memalign(&p, 64, (n + 63) & ~(size_t)63) ? NULL : p;
    }
    size_t rounded = (n + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, rounded)) return NULL;
    /* advice only: kernels without THP keep 4 KiB pages */
    (void)madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}

int prefault(void *p, size_t n)
{
    if (!n) return 0;
#ifdef MADV_POPULATE_WRITE
    /* the kernel zero-fills every page (huge ones where advised) without a
     * fault per page; whole pages only, so the unaligned edges are written */
    const size_t page = 4096;
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (b > a) {
        if (madvise((void *)a, b - a, MADV_POPULATE_WRITE) == 0) {
            memset(p, 0, a - (uintptr_t)p);
            memset((void *)b, 0, (uintptr_t)p + n - b);
            return 0;
        }
        if (errno != EINVAL) return -1; /* EINVAL: a kernel without it */
    }
#endif
    memset(p, 0, n); /* touch every page */
    return 0;
}

void *xhuge_alloc(size_t n)
{
    void *p = huge_alloc(n);
    if (!p) oom(n);
    return p;
}
