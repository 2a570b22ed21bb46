/*
 * buf.c - growable byte buffer and int32 vector (see buf.h). Capacity
 * doubles, so appending n bytes one at a time costs O(n) in all.
 */
#include "base/buf.h"

#include "base/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void buf_reserve(struct buf *b, size_t n)
{
    size_t need = b->len + n + 1;
    if (need <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void buf_append(struct buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

void buf_puts(struct buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}

void buf_putc(struct buf *b, char c)
{
    buf_append(b, &c, 1);
}

void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    CHECK(n >= 0);
    if ((size_t)n < sizeof(small)) {
        buf_append(b, small, (size_t)n);
    } else {
        buf_reserve(b, (size_t)n);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void buf_clear(struct buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = 0;
}

void buf_release(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int buf_append_file(struct buf *b, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -errno;
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        buf_append(b, tmp, n);
    int rc = ferror(f) ? -EIO : 0;
    fclose(f);
    return rc;
}

const char *buf_str(const struct buf *b)
{
    return b->data ? b->data : "";
}

void i32vec_push(struct i32vec *a, int32_t x)
{
    i32vec_append(a, &x, 1);
}

void i32vec_append(struct i32vec *a, const int32_t *x, size_t n)
{
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n)
            cap *= 2;
        a->v = xrealloc(a->v, cap * sizeof(*a->v));
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, x, n * sizeof(*x));
    a->n += n;
}

void i32vec_release(struct i32vec *a)
{
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}
