/*
 * buf.h - growable byte buffer and int32 vector.
 *
 * struct buf is the one way text is built up in inferd: rendered chat
 * templates, detokenized output, JSON and SSE frames. It always keeps a NUL
 * after the last byte, so data can be handed to C string functions, but the
 * length is authoritative (the text may contain NUL bytes).
 *
 * struct i32vec holds token ids.
 *
 * Lifetime: caller-owned structs (zero-initialised = empty and valid);
 * buf_release / i32vec_release free the heap storage. Growth aborts on out of
 * memory (check.h). Thread safety: none; one owner at a time.
 */
#ifndef INFERD_BASE_BUF_H
#define INFERD_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct buf {
    char *data; /* (cap) bytes; data[len] == 0 once anything was appended */
    size_t len; /* bytes used, not counting the NUL */
    size_t cap; /* bytes allocated */
};

/* Makes room for at least n more bytes (plus the NUL). */
void buf_reserve(struct buf *b, size_t n);
void buf_append(struct buf *b, const void *p, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_putc(struct buf *b, char c);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap);
/* Sets len to 0 and keeps the storage. */
void buf_clear(struct buf *b);
/* Frees the storage and zeroes *b. */
void buf_release(struct buf *b);
/* Appends the whole file at path. Returns 0, or the negated errno of the
 * open or read (what was read stays appended). */
int buf_append_file(struct buf *b, const char *path);
/* Returns data (NUL-terminated, "" when empty); never NULL. */
const char *buf_str(const struct buf *b);

struct i32vec {
    int32_t *v; /* (cap) */
    size_t n;   /* elements used */
    size_t cap; /* elements allocated */
};

void i32vec_push(struct i32vec *a, int32_t x);
void i32vec_append(struct i32vec *a, const int32_t *x, size_t n);
void i32vec_release(struct i32vec *a);

#endif
