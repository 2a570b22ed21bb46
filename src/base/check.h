/*
 * check.h - always-on invariant checks.
 *
 * CHECK() guards invariants *inside* inferd: a failure is a bug, so it prints
 * where and aborts, in every build type. Never use it on external input (that
 * gets an error code, see err.h).
 */
#ifndef INFERD_BASE_CHECK_H
#define INFERD_BASE_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (__builtin_expect(!(cond), 0)) {                                                        \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b)    ((a) < (b) ? (a) : (b))
#define MAX(a, b)    ((a) > (b) ? (a) : (b))

/* Allocation that cannot fail quietly: out of memory on the process's own
 * bookkeeping is not recoverable, so these abort with a message. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* 64-byte aligned allocation for SIMD buffers; free with free(). */
void *xaligned_alloc(size_t n);
/* Large arrays the hot loops stream through (weights packed at load, the KV
 * cache): 2 MiB aligned and advised for transparent huge pages, so a pass
 * over them is not a TLB miss per 4 KiB (Debian's default THP mode is
 * "madvise"). Returns NULL when out of memory; free with free(). */
void *huge_alloc(size_t n);
void *xhuge_alloc(size_t n); /* huge_alloc that aborts when out of memory */
/* Backs n bytes from p (a huge_alloc block, not yet written) with memory
 * now, zero-filled, so that first writes later take no page faults.
 * Returns 0, or -1 (errno set) when the kernel cannot back them. */
int prefault(void *p, size_t n);

#endif
