/*
 * gguf_build.h - byte-level GGUF builder for tests: writes any field with
 * any value, valid or not, so tests (and the fuzz corpus generator) can make
 * hostile files that the real writer refuses to produce.
 *
 * A gbuf is a growable byte buffer; every gb_* call appends little-endian
 * bytes. Nothing here validates: that is the point.
 */
#ifndef INFERD_TEST_GGUF_BUILD_H
#define INFERD_TEST_GGUF_BUILD_H

#include "base/check.h"
#include "gguf/gguf.h"

#include <stdint.h>
#include <string.h>

struct gbuf {
    uint8_t *p; /* (cap) bytes, n used */
    size_t n;   /* bytes written */
    size_t cap; /* bytes allocated */
};

static inline void gb_bytes(struct gbuf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n)
            c *= 2;
        b->p = xrealloc(b->p, c);
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

static inline void gb_u8(struct gbuf *b, uint8_t v)
{
    gb_bytes(b, &v, 1);
}

static inline void gb_u16(struct gbuf *b, uint16_t v)
{
    gb_bytes(b, &v, 2);
}

static inline void gb_u32(struct gbuf *b, uint32_t v)
{
    gb_bytes(b, &v, 4);
}

static inline void gb_u64(struct gbuf *b, uint64_t v)
{
    gb_bytes(b, &v, 8);
}

/* A string with its real length. */
static inline void gb_str(struct gbuf *b, const char *s)
{
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

static inline void gb_header(struct gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

/* Key name + value type; the caller appends the value. */
static inline void gb_key(struct gbuf *b, const char *key, uint32_t type)
{
    gb_str(b, key);
    gb_u32(b, type);
}

static inline void gb_kv_u32(struct gbuf *b, const char *key, uint32_t v)
{
    gb_key(b, key, GGUF_VTYPE_UINT32);
    gb_u32(b, v);
}

static inline void gb_kv_str(struct gbuf *b, const char *key, const char *v)
{
    gb_key(b, key, GGUF_VTYPE_STRING);
    gb_str(b, v);
}

static inline void gb_kv_arr_str(struct gbuf *b, const char *key, const char *const *v, size_t n)
{
    gb_key(b, key, GGUF_VTYPE_ARRAY);
    gb_u32(b, GGUF_VTYPE_STRING);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++)
        gb_str(b, v[i]);
}

/* One tensor info; ne has n_dims entries (n_dims may be out of range: then
 * min(n_dims, 4) entries are written). */
static inline void gb_tensor(struct gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                             uint32_t type, uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims && d < 4; d++)
        gb_u64(b, ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

/* Zero bytes up to the next multiple of align. */
static inline void gb_pad(struct gbuf *b, size_t align)
{
    while (b->n % align)
        gb_u8(b, 0);
}

/* n bytes of a recognizable pattern (tensor data). */
static inline void gb_fill(struct gbuf *b, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        gb_u8(b, (uint8_t)(seed + i * 7));
}

static inline void gb_free(struct gbuf *b)
{
    free(b->p);
    *b = (struct gbuf){0};
}

#endif
