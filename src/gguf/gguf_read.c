/*
 * gguf_read.c - the GGUF reader: map a file, validate all of it in one pass,
 * then answer lookups without ever failing on the file's contents.
 *
 * A GGUF file is untrusted input. The parser walks it front to back with one
 * cursor and checks every length and count against the bytes that remain
 * *before* it uses or allocates for them:
 *
 *   header      magic, version (2 or 3), n_tensors, n_kv
 *   metadata    n_kv x (key, type, value); arrays are flat (no arrays of arrays)
 *   tensor info n_tensors x (name, n_dims, ne[], type, offset)
 *   data        starts at the first multiple of general.alignment after the
 *               tensor infos; tensor i lives at [data + offset_i, +size_i)
 *
 * What is kept after open (all pointers point into the mapping):
 *
 *   gguf_file.kvs[]      key, type, and a pointer to the value bytes
 *   gguf_kv.strs[]       string arrays only: one pointer per element to its
 *                        u64 length prefix, so gguf_arr_str is O(1)
 *   gguf_file.tensors[]  the public struct gguf_tensor, data pointer resolved
 *   key_index, tensor_index  open-addressing hash tables (XXH3 of the name)
 *
 * Allocation never trusts a count. A count is rejected up front when it
 * exceeds (bytes left / smallest encoding of one element), which gives a
 * clearer message than the truncation it would cause; past that, tables grow
 * by doubling while entries are actually parsed (a string array's index starts
 * at its exact size, capped at 1M entries), so a forged count costs at most a
 * few bytes of memory per byte of file before the parser reports the end.
 * Open is one pass: a 150k-token vocabulary plus its merges (6 MB) opens in
 * about 7 ms.
 *
 * Error messages start with "gguf: ", name the field (key #3 'general.name',
 * tensor 'blk.0.attn_q.weight') and, for truncations, the offset and file size.
 * Names quoted in messages are escaped and cut at 64 bytes, so a hostile file
 * cannot put control characters on an operator's terminal.
 *
 * The format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
 * This code assumes a little-endian host, as the on-disk format is.
 */
#include "gguf/gguf.h"

#include "base/check.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF reader assumes little-endian");

#define GGUF_MAGIC            "GGUF"
#define GGUF_MAX_NAME         65535 /* longest key or tensor name we accept */
#define GGUF_MIN_KV_BYTES     13    /* u64 key len + 1 key byte + u32 type; value >= 0 more */
#define GGUF_MIN_TENSOR_BYTES 33    /* u64 len + 1 + u32 n_dims + u64 ne + u32 type + u64 off */

/* One metadata entry. The key comes first so the name index can treat
 * gguf_kv and gguf_tensor alike (both start with their name). */
struct gguf_kv {
    struct gguf_str key;       /* into the mapping; unique, no NUL bytes */
    enum gguf_vtype type;      /* value type */
    enum gguf_vtype elem_type; /* arrays: element type (never ARRAY); else == type */
    uint64_t n;                /* arrays: element count; scalars and strings: 1 */
    const uint8_t *val;        /* scalar bytes; string: its u64 length; array: first element */
    const uint8_t **strs;      /* string arrays: (n) pointers to each element's u64 length */
};

/* Open-addressing hash table from name to entry index. Slots hold index + 1
 * (0 = empty); capacity is a power of two at least twice the entry count. */
struct name_index {
    uint64_t *slots; /* (mask + 1) */
    size_t mask;     /* capacity - 1 */
    uint64_t seed;   /* hash seed, varies per open: crafted collisions cannot be planned */
};

struct gguf_file {
    const uint8_t *base;            /* the file's bytes (mapping or caller buffer) */
    size_t size;                    /* bytes */
    bool mapped;                    /* base was mmap'ed by gguf_open: munmap on close */
    uint32_t version;               /* 2 or 3 */
    size_t alignment;               /* general.alignment or 32; a power of two */
    size_t data_start;              /* offset of the data section (aligned) */
    int64_t n_kv;                   /* metadata entries */
    struct gguf_kv *kvs;            /* (n_kv) in file order */
    int64_t n_tensors;              /* tensors */
    struct gguf_tensor *tensors;    /* (n_tensors) in file order */
    struct name_index key_index;    /* key -> kvs index */
    struct name_index tensor_index; /* name -> tensors index */
};

/* Cursor and error context while parsing. */
struct parser {
    const uint8_t *base; /* file bytes */
    size_t size;         /* bytes */
    size_t pos;          /* next byte to read */
    struct err_msg *msg; /* where the error goes; may be NULL */
    char what[200];      /* the item being parsed: "key #3 'general.name'"; may be empty */
};

static const char *const vtype_names[] = {
    [GGUF_VTYPE_UINT8] = "u8",    [GGUF_VTYPE_INT8] = "i8",    [GGUF_VTYPE_UINT16] = "u16",
    [GGUF_VTYPE_INT16] = "i16",   [GGUF_VTYPE_UINT32] = "u32", [GGUF_VTYPE_INT32] = "i32",
    [GGUF_VTYPE_FLOAT32] = "f32", [GGUF_VTYPE_BOOL] = "bool",  [GGUF_VTYPE_STRING] = "string",
    [GGUF_VTYPE_ARRAY] = "array", [GGUF_VTYPE_UINT64] = "u64", [GGUF_VTYPE_INT64] = "i64",
    [GGUF_VTYPE_FLOAT64] = "f64",
};

/* Encoded size of one element; 0 for string and array (variable). */
static const size_t vtype_sizes[] = {
    [GGUF_VTYPE_UINT8] = 1,   [GGUF_VTYPE_INT8] = 1,   [GGUF_VTYPE_UINT16] = 2,
    [GGUF_VTYPE_INT16] = 2,   [GGUF_VTYPE_UINT32] = 4, [GGUF_VTYPE_INT32] = 4,
    [GGUF_VTYPE_FLOAT32] = 4, [GGUF_VTYPE_BOOL] = 1,   [GGUF_VTYPE_STRING] = 0,
    [GGUF_VTYPE_ARRAY] = 0,   [GGUF_VTYPE_UINT64] = 8, [GGUF_VTYPE_INT64] = 8,
    [GGUF_VTYPE_FLOAT64] = 8,
};

#define GGUF_N_VTYPES ((uint32_t)ARRAY_LEN(vtype_names))

/* ggml type names, for messages about types we do not support. */
static const char *const ggml_type_names[] = {
    "f32",   "f16",        "q4_0",       "q4_1",       "q4_2",     "q4_3",     "q5_0",
    "q5_1",  "q8_0",       "q8_1",       "q2_k",       "q3_k",     "q4_k",     "q5_k",
    "q6_k",  "q8_k",       "iq2_xxs",    "iq2_xs",     "iq3_xxs",  "iq1_s",    "iq4_nl",
    "iq3_s", "iq2_s",      "iq4_xs",     "i8",         "i16",      "i32",      "i64",
    "f64",   "iq1_m",      "bf16",       "q4_0_4_4",   "q4_0_4_8", "q4_0_8_8", "tq1_0",
    "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8", "iq4_nl_8_8", "mxfp4",
};

static const char *vtype_name(uint32_t t)
{
    return t < GGUF_N_VTYPES ? vtype_names[t] : "unknown";
}

static const char *ggml_type_name(uint32_t t)
{
    return t < ARRAY_LEN(ggml_type_names) ? ggml_type_names[t] : "unknown";
}

/* Copies name into buf for a message: printable ASCII as is, anything else
 * as \xHH, at most 64 source bytes, "..." when cut. */
static const char *quote(char buf[static 300], const char *name, uint64_t len)
{
    size_t o = 0;
    uint64_t n = len < 64 ? len : 64;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, 5, "\\x%02x", c);
    }
    if (n < len) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = 0;
    return buf;
}

/* ---- parse errors ---- */

static int perr(struct parser *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int perr(struct parser *p, int code, const char *fmt, ...)
{
    if (!p->msg) return code;
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (p->what[0]) return err_set(p->msg, code, "gguf: %s: %s", p->what, detail);
    return err_set(p->msg, code, "gguf: %s", detail);
}

static size_t left(const struct parser *p)
{
    return p->size - p->pos;
}

/* Fails unless n more bytes are available; field names what is being read. */
static int need(struct parser *p, uint64_t n, const char *field)
{
    if (n <= left(p)) return 0;
    return perr(p, ERR_FORMAT, "%s runs past end of file (offset %zu, file %zu bytes)", field,
                p->pos, p->size);
}

static int rd_u32(struct parser *p, const char *field, uint32_t *out)
{
    int rc = need(p, 4, field);
    if (rc) return rc;
    memcpy(out, p->base + p->pos, 4);
    p->pos += 4;
    return 0;
}

static int rd_u64(struct parser *p, const char *field, uint64_t *out)
{
    int rc = need(p, 8, field);
    if (rc) return rc;
    memcpy(out, p->base + p->pos, 8);
    p->pos += 8;
    return 0;
}

/* Reads a string (u64 length + bytes). field names it in messages ("name",
 * "string"); with idx >= 0 it reads "<field> #idx". Names are only formatted
 * on failure: this runs once per token of a 150k vocabulary. */
static int rd_str(struct parser *p, const char *field, int64_t idx, struct gguf_str *out)
{
    size_t at = p->pos;
    uint64_t len = 0;
    if (left(p) >= 8) memcpy(&len, p->base + p->pos, 8);
    if (left(p) < 8 || len > left(p) - 8) {
        char f[64];
        if (idx >= 0)
            snprintf(f, sizeof(f), "%s #%" PRId64, field, idx);
        else
            snprintf(f, sizeof(f), "%s", field);
        if (left(p) < 8)
            return perr(p, ERR_FORMAT,
                        "%s length runs past end of file (offset %zu, file %zu bytes)", f, at,
                        p->size);
        return perr(p, ERR_FORMAT,
                    "%s length %" PRIu64 " runs past end of file (offset %zu, file %zu bytes)", f,
                    len, at, p->size);
    }
    out->ptr = (const char *)p->base + at + 8;
    out->len = len;
    p->pos = at + 8 + len;
    return 0;
}

/* Grows *arr (elements of elsz bytes) to hold at least n, doubling; the
 * capacity follows entries actually parsed, never a count read from the file. */
static void grow(void **arr, size_t *cap, size_t n, size_t elsz)
{
    if (n <= *cap) return;
    size_t c = *cap ? *cap : 16;
    while (c < n)
        c *= 2;
    *arr = xrealloc(*arr, c * elsz);
    *cap = c;
}

/* ---- name index ---- */

/* items: array of structs whose first member is a struct gguf_str. */
static const struct gguf_str *item_name(const void *items, size_t stride, uint64_t i)
{
    return (const struct gguf_str *)((const char *)items + i * stride);
}

/* Slot index holding name, or -1 with *free_slot set to the insertion point. */
static int64_t index_find(const struct name_index *ix, const void *items, size_t stride,
                          const char *name, size_t len, size_t *free_slot)
{
    if (!ix->slots) return -1;
    size_t h = (size_t)XXH3_64bits_withSeed(name, len, ix->seed) & ix->mask;
    for (;; h = (h + 1) & ix->mask) {
        uint64_t s = ix->slots[h];
        if (!s) {
            if (free_slot) *free_slot = h;
            return -1;
        }
        const struct gguf_str *nm = item_name(items, stride, s - 1);
        if (nm->len == len && memcmp(nm->ptr, name, len) == 0) return (int64_t)(s - 1);
    }
}

/* Builds the index over n items; on a duplicate returns its pair. */
static bool index_build(struct name_index *ix, const void *items, size_t stride, uint64_t n,
                        uint64_t *dup_first, uint64_t *dup_second)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = xcalloc(cap, sizeof(*ix->slots));
    ix->mask = cap - 1;
    uintptr_t addr = (uintptr_t)ix; /* a heap address: differs between runs (ASLR) */
    ix->seed = XXH3_64bits(&addr, sizeof(addr));
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_str *nm = item_name(items, stride, i);
        size_t slot = 0;
        int64_t prev = index_find(ix, items, stride, nm->ptr, nm->len, &slot);
        if (prev >= 0) {
            *dup_first = (uint64_t)prev;
            *dup_second = i;
            return false;
        }
        ix->slots[slot] = i + 1;
    }
    return true;
}

/* ---- metadata ---- */

/* Reads a name (key or tensor name): non-empty, bounded, no NUL bytes (names
 * are looked up as C strings, so a NUL would make one unreachable). */
static int rd_name(struct parser *p, const char *field, struct gguf_str *out)
{
    int rc = rd_str(p, field, -1, out);
    if (rc) return rc;
    if (out->len == 0) return perr(p, ERR_FORMAT, "%s is empty", field);
    if (out->len > GGUF_MAX_NAME)
        return perr(p, ERR_FORMAT, "%s length %" PRIu64 " exceeds %d", field, out->len,
                    GGUF_MAX_NAME);
    if (memchr(out->ptr, 0, out->len)) return perr(p, ERR_FORMAT, "%s contains a NUL byte", field);
    return 0;
}

/* Bools are one byte, 0 or 1; in_array names the element in messages. */
static int check_bools(struct parser *p, const uint8_t *b, uint64_t n, bool in_array)
{
    for (uint64_t i = 0; i < n; i++) {
        if (b[i] <= 1) continue;
        if (!in_array) return perr(p, ERR_FORMAT, "bool value %u is not 0 or 1", b[i]);
        return perr(p, ERR_FORMAT, "bool element #%" PRIu64 " value %u is not 0 or 1", i, b[i]);
    }
    return 0;
}

static int parse_array(struct parser *p, struct gguf_kv *kv)
{
    uint32_t et;
    uint64_t n;
    int rc = rd_u32(p, "array element type", &et);
    if (rc) return rc;
    if (et >= GGUF_N_VTYPES) return perr(p, ERR_FORMAT, "array element type %u is unknown", et);
    if (et == GGUF_VTYPE_ARRAY)
        return perr(p, ERR_UNSUPPORTED, "arrays of arrays are not supported");
    size_t count_at = p->pos;
    if ((rc = rd_u64(p, "array count", &n))) return rc;
    kv->elem_type = (enum gguf_vtype)et;
    kv->n = n;
    kv->val = p->base + p->pos;

    size_t esize = et == GGUF_VTYPE_STRING ? 8 : vtype_sizes[et];
    if (n > left(p) / esize)
        return perr(p, ERR_FORMAT,
                    "array of %s count %" PRIu64
                    " is more than the %zu bytes left can hold (offset %zu, file %zu bytes)",
                    vtype_names[et], n, left(p), count_at, p->size);
    if (et != GGUF_VTYPE_STRING) {
        if (et == GGUF_VTYPE_BOOL && (rc = check_bools(p, p->base + p->pos, n, true))) return rc;
        p->pos += n * esize;
        return 0;
    }

    /* Exact size for any real vocabulary; a forged count past 1M entries
     * only grows as far as strings are actually present. */
    size_t cap = (size_t)MIN(n, (uint64_t)1 << 20);
    kv->strs = xmalloc(cap * sizeof(*kv->strs));
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_str s;
        grow((void **)&kv->strs, &cap, i + 1, sizeof(*kv->strs));
        kv->strs[i] = p->base + p->pos;
        if ((rc = rd_str(p, "string", (int64_t)i, &s))) return rc;
    }
    return 0;
}

static int parse_kv(struct parser *p, int64_t i, struct gguf_kv *kv)
{
    char q[300];
    uint32_t type;
    int rc;

    snprintf(p->what, sizeof(p->what), "key #%" PRId64, i);
    if ((rc = rd_name(p, "name", &kv->key))) return rc;
    snprintf(p->what, sizeof(p->what), "key #%" PRId64 " '%s'", i,
             quote(q, kv->key.ptr, kv->key.len));
    if ((rc = rd_u32(p, "value type", &type))) return rc;
    if (type >= GGUF_N_VTYPES) return perr(p, ERR_FORMAT, "value type %u is unknown", type);
    kv->type = kv->elem_type = (enum gguf_vtype)type;
    kv->n = 1;
    kv->val = p->base + p->pos;

    if (type == GGUF_VTYPE_ARRAY) return parse_array(p, kv);
    if (type == GGUF_VTYPE_STRING) {
        struct gguf_str s;
        return rd_str(p, "string", -1, &s);
    }
    if ((rc = need(p, vtype_sizes[type], "value"))) return rc;
    if (type == GGUF_VTYPE_BOOL && (rc = check_bools(p, p->base + p->pos, 1, false))) return rc;
    p->pos += vtype_sizes[type];
    return 0;
}

/* ---- tensors ---- */

static int parse_tensor(struct parser *p, const struct gguf_file *f, int64_t i,
                        struct gguf_tensor *t, uint64_t *offset)
{
    char q[300], field[16];
    uint32_t n_dims, type;
    int rc;

    snprintf(p->what, sizeof(p->what), "tensor #%" PRId64, i);
    if ((rc = rd_name(p, "name", &t->name))) return rc;
    snprintf(p->what, sizeof(p->what), "tensor '%s'", quote(q, t->name.ptr, t->name.len));
    if ((rc = rd_u32(p, "n_dims", &n_dims))) return rc;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return perr(p, ERR_FORMAT, "n_dims %u is out of range (1..%d)", n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;

    int64_t n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims) {
            snprintf(field, sizeof(field), "ne[%d]", d);
            if ((rc = rd_u64(p, field, &ne))) return rc;
            if (ne == 0) return perr(p, ERR_FORMAT, "ne[%d] is 0", d);
            if (ne > (uint64_t)INT64_MAX)
                return perr(p, ERR_FORMAT, "ne[%d] %" PRIu64 " is too large", d, ne);
        }
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elems, t->ne[d], &n_elems))
            return perr(p, ERR_FORMAT, "element count overflows at ne[%d] %" PRIu64, d, ne);
    }

    if ((rc = rd_u32(p, "type", &type))) return rc;
    if (!dtype_supported(type))
        return perr(p, ERR_UNSUPPORTED, "type %s (id %u) is not supported", ggml_type_name(type),
                    type);
    t->type = (enum dtype)type;
    const struct dtype_info *ti = dtype_info(type);
    if (t->ne[0] % ti->blck != 0)
        return perr(p, ERR_FORMAT, "ne[0] %" PRId64 " is not a multiple of the %s block size %d",
                    t->ne[0], ti->name, ti->blck);
    uint64_t row = (uint64_t)(t->ne[0] / ti->blck), size;
    if (__builtin_mul_overflow(row, (uint64_t)ti->type_size, &row) ||
        __builtin_mul_overflow(row, (uint64_t)(n_elems / t->ne[0]), &size) || size > SIZE_MAX)
        return perr(p, ERR_FORMAT, "data size overflows (%" PRId64 " elements of %s)", n_elems,
                    ti->name);
    t->size = (size_t)size;

    if ((rc = rd_u64(p, "offset", offset))) return rc;
    if (*offset % f->alignment != 0)
        return perr(p, ERR_FORMAT, "offset %" PRIu64 " is not a multiple of the alignment %zu",
                    *offset, f->alignment);
    return 0;
}

/* Tensor ordering by data offset, for the overlap check. */
struct span {
    uint64_t offset; /* from the data section start */
    int64_t i;       /* tensor index */
};

static int span_cmp(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Checks every tensor's data lies inside the file and no two overlap, then
 * resolves data pointers. offsets: (n_tensors). */
static int place_tensors(struct parser *p, struct gguf_file *f, const uint64_t *offsets)
{
    char q[300], q2[300];
    size_t data_bytes = f->data_start <= f->size ? f->size - f->data_start : 0;
    int rc = 0;
    p->what[0] = 0;

    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (offsets[i] > data_bytes || t->size > data_bytes - offsets[i])
            return perr(p, ERR_FORMAT,
                        "tensor '%s': data [offset %" PRIu64
                        ", %zu bytes] runs past end of file (data section starts at %zu, "
                        "file %zu bytes)",
                        quote(q, t->name.ptr, t->name.len), offsets[i], t->size, f->data_start,
                        f->size);
    }

    struct span *spans = xmalloc((size_t)f->n_tensors * sizeof(*spans) + 1);
    for (int64_t i = 0; i < f->n_tensors; i++)
        spans[i] = (struct span){offsets[i], i};
    qsort(spans, (size_t)f->n_tensors, sizeof(*spans), span_cmp);
    for (int64_t k = 1; k < f->n_tensors; k++) {
        const struct gguf_tensor *a = &f->tensors[spans[k - 1].i], *b = &f->tensors[spans[k].i];
        if (spans[k - 1].offset + a->size > spans[k].offset) {
            rc = perr(p, ERR_FORMAT,
                      "tensor '%s': data [offset %" PRIu64 ", %zu bytes] overlaps tensor "
                      "'%s' [offset %" PRIu64 ", %zu bytes]",
                      quote(q, b->name.ptr, b->name.len), spans[k].offset, b->size,
                      quote(q2, a->name.ptr, a->name.len), spans[k - 1].offset, a->size);
            goto out_free_spans;
        }
    }
    for (int64_t i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->base + f->data_start + offsets[i];
out_free_spans:
    free(spans);
    return rc;
}

/* general.alignment: optional; a u32 power of two. */
static int read_alignment(struct parser *p, struct gguf_file *f)
{
    int64_t i = gguf_find_key(f, "general.alignment");
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (i < 0) return 0;
    const struct gguf_kv *kv = &f->kvs[i];
    snprintf(p->what, sizeof(p->what), "key #%" PRId64 " 'general.alignment'", i);
    if (kv->type != GGUF_VTYPE_UINT32)
        return perr(p, ERR_FORMAT, "has type %s, expected u32", vtype_name(kv->type));
    uint32_t a;
    memcpy(&a, kv->val, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return perr(p, ERR_FORMAT, "value %u is not a power of two", a);
    f->alignment = a;
    return 0;
}

static int parse_header(struct parser *p, struct gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv)
{
    char q[300];
    int rc;
    if (p->size < 4)
        return perr(p, ERR_FORMAT, "file is %zu bytes, too small for a GGUF header", p->size);
    if (memcmp(p->base, GGUF_MAGIC, 4) != 0)
        return perr(p, ERR_FORMAT, "not a GGUF file (magic '%s', expected 'GGUF')",
                    quote(q, (const char *)p->base, 4));
    p->pos = 4;
    if ((rc = rd_u32(p, "version", &f->version))) return rc;
    if (f->version == 0x02000000 || f->version == 0x03000000)
        return perr(p, ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    if (f->version != 2 && f->version != 3)
        return perr(p, ERR_UNSUPPORTED, "GGUF version %u is not supported (only 2 and 3)",
                    f->version);
    if ((rc = rd_u64(p, "n_tensors", n_tensors))) return rc;
    if ((rc = rd_u64(p, "n_kv", n_kv))) return rc;
    if (*n_kv > left(p) / GGUF_MIN_KV_BYTES)
        return perr(p, ERR_FORMAT,
                    "n_kv %" PRIu64 " is more than the %zu bytes left can hold "
                    "(offset 16, file %zu bytes)",
                    *n_kv, left(p), p->size);
    if (*n_tensors > left(p) / GGUF_MIN_TENSOR_BYTES)
        return perr(p, ERR_FORMAT,
                    "n_tensors %" PRIu64 " is more than the %zu bytes left can hold "
                    "(offset 8, file %zu bytes)",
                    *n_tensors, left(p), p->size);
    return 0;
}

static int parse(struct gguf_file *f, struct err_msg *msg)
{
    struct parser p = {.base = f->base, .size = f->size, .msg = msg};
    uint64_t n_tensors = 0, n_kv = 0, a = 0, b = 0;
    uint64_t *offsets = NULL;
    size_t cap = 0;
    char q[300];
    int rc;

    if ((rc = parse_header(&p, f, &n_tensors, &n_kv))) return rc;

    for (uint64_t i = 0; i < n_kv; i++) {
        grow((void **)&f->kvs, &cap, i + 1, sizeof(*f->kvs));
        f->kvs[i] = (struct gguf_kv){0};
        f->n_kv = (int64_t)i + 1; /* so close frees a half-parsed entry */
        if ((rc = parse_kv(&p, (int64_t)i, &f->kvs[i]))) return rc;
    }
    p.what[0] = 0;
    if (!index_build(&f->key_index, f->kvs, sizeof(*f->kvs), n_kv, &a, &b))
        return perr(&p, ERR_FORMAT, "key #%" PRIu64 " '%s' duplicates key #%" PRIu64, b,
                    quote(q, f->kvs[b].key.ptr, f->kvs[b].key.len), a);
    if ((rc = read_alignment(&p, f))) return rc;

    p.what[0] = 0;
    if (n_tensors > left(&p) / GGUF_MIN_TENSOR_BYTES)
        return perr(&p, ERR_FORMAT,
                    "n_tensors %" PRIu64 " is more than the %zu bytes left after the metadata "
                    "can hold (offset %zu, file %zu bytes)",
                    n_tensors, left(&p), p.pos, p.size);
    cap = 0;
    size_t ocap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        grow((void **)&f->tensors, &cap, i + 1, sizeof(*f->tensors));
        grow((void **)&offsets, &ocap, i + 1, sizeof(*offsets));
        f->tensors[i] = (struct gguf_tensor){0};
        if ((rc = parse_tensor(&p, f, (int64_t)i, &f->tensors[i], &offsets[i])))
            goto out_free_offsets;
        f->n_tensors = (int64_t)i + 1;
    }
    p.what[0] = 0;
    if (!index_build(&f->tensor_index, f->tensors, sizeof(*f->tensors), n_tensors, &a, &b)) {
        rc = perr(&p, ERR_FORMAT, "tensor #%" PRIu64 " '%s' duplicates tensor #%" PRIu64, b,
                  quote(q, f->tensors[b].name.ptr, f->tensors[b].name.len), a);
        goto out_free_offsets;
    }

    /* p.pos < size <= SIZE_MAX - alignment in practice; guard anyway. */
    if (p.pos > SIZE_MAX - f->alignment) {
        rc = perr(&p, ERR_FORMAT, "data section offset overflows");
        goto out_free_offsets;
    }
    f->data_start = (p.pos + f->alignment - 1) & ~(f->alignment - 1);
    rc = place_tensors(&p, f, offsets);
out_free_offsets:
    free(offsets);
    return rc;
}

/* ---- open / close ---- */

static int open_common(const void *buf, size_t size, bool mapped, struct gguf_file **out,
                       struct err_msg *msg)
{
    struct gguf_file *f = xcalloc(1, sizeof(*f));
    f->base = buf;
    f->size = size;
    f->mapped = mapped;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    int rc = parse(f, msg);
    if (rc) {
        gguf_close(f);
        *out = NULL;
        return rc;
    }
    *out = f;
    return 0;
}

int gguf_open_buffer(const void *buf, size_t size, struct gguf_file **out, struct err_msg *msg)
{
    static const uint8_t empty[1];
    return open_common(size ? buf : empty, size, false, out, msg);
}

int gguf_open(const char *path, struct gguf_file **out, struct err_msg *msg)
{
    struct stat st;
    void *map;
    int rc;

    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        return err_set(msg, rc, "gguf: cannot open: %s", err_str(rc));
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        err_set(msg, rc, "gguf: cannot stat: %s", err_str(rc));
        goto err_close_fd;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = err_set(msg, -EISDIR, "gguf: is a directory");
        goto err_close_fd;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(msg, ERR_INVALID, "gguf: not a regular file");
        goto err_close_fd;
    }
    if (st.st_size == 0) {
        close(fd);
        return gguf_open_buffer(NULL, 0, out, msg);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = err_set(msg, ERR_TOO_LARGE, "gguf: file is too large to map");
        goto err_close_fd;
    }
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        err_set(msg, rc, "gguf: cannot map %lld bytes: %s", (long long)st.st_size, err_str(rc));
        goto err_close_fd;
    }
    close(fd); /* the mapping keeps the file */
    return open_common(map, (size_t)st.st_size, true, out, msg);

err_close_fd:
    close(fd);
    return rc;
}

void gguf_close(struct gguf_file *f)
{
    if (!f) return;
    for (int64_t i = 0; i < f->n_kv; i++)
        free(f->kvs[i].strs);
    free(f->kvs);
    free(f->tensors);
    free(f->key_index.slots);
    free(f->tensor_index.slots);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

void gguf_release_pages(const struct gguf_file *f, const void *p, size_t n)
{
    if (!f->mapped || n == 0) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
    CHECK((const uint8_t *)p >= f->base && (const uint8_t *)p + n <= f->base + f->size);
    /* a read-only private file mapping: dropping pages loses nothing */
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

uint32_t gguf_version(const struct gguf_file *f)
{
    return f->version;
}

size_t gguf_alignment(const struct gguf_file *f)
{
    return f->alignment;
}

size_t gguf_file_size(const struct gguf_file *f)
{
    return f->size;
}

/* ---- metadata accessors ---- */

int64_t gguf_n_kv(const struct gguf_file *f)
{
    return f->n_kv;
}

int64_t gguf_find_key(const struct gguf_file *f, const char *key)
{
    return index_find(&f->key_index, f->kvs, sizeof(*f->kvs), key, strlen(key), NULL);
}

struct gguf_str gguf_key(const struct gguf_file *f, int64_t i)
{
    CHECK(i >= 0 && i < f->n_kv);
    return f->kvs[i].key;
}

enum gguf_vtype gguf_kv_type(const struct gguf_file *f, int64_t i)
{
    CHECK(i >= 0 && i < f->n_kv);
    return f->kvs[i].type;
}

/* Finds key; -ENOENT (message set) if absent. */
static int lookup(const struct gguf_file *f, const char *key, const struct gguf_kv **kv,
                  struct err_msg *msg)
{
    int64_t i = gguf_find_key(f, key);
    if (i < 0) return err_set(msg, -ENOENT, "gguf: key '%s' not found", key);
    *kv = &f->kvs[i];
    return 0;
}

static int wrong_type(const struct gguf_kv *kv, const char *key, const char *expected,
                      struct err_msg *msg)
{
    if (kv->type == GGUF_VTYPE_ARRAY)
        return err_set(msg, ERR_FORMAT, "gguf: key '%s' is an array of %s, expected %s", key,
                       vtype_name(kv->elem_type), expected);
    return err_set(msg, ERR_FORMAT, "gguf: key '%s' has type %s, expected %s", key,
                   vtype_name(kv->type), expected);
}

/* Integer value of kv as (negative, magnitude-or-value). Returns false if
 * kv is not an integer type. *neg is set only for signed types < 0, then
 * *sv holds the value; otherwise *uv holds it. */
static bool int_value(const struct gguf_kv *kv, bool *neg, int64_t *sv, uint64_t *uv)
{
    const uint8_t *v = kv->val;
    int64_t s = 0;
    *neg = false;
    switch (kv->type) {
    case GGUF_VTYPE_UINT8:
        *uv = v[0];
        return true;
    case GGUF_VTYPE_UINT16: {
        uint16_t x;
        memcpy(&x, v, 2);
        *uv = x;
        return true;
    }
    case GGUF_VTYPE_UINT32: {
        uint32_t x;
        memcpy(&x, v, 4);
        *uv = x;
        return true;
    }
    case GGUF_VTYPE_UINT64:
        memcpy(uv, v, 8);
        return true;
    case GGUF_VTYPE_INT8:
        s = (int8_t)v[0];
        break;
    case GGUF_VTYPE_INT16: {
        int16_t x;
        memcpy(&x, v, 2);
        s = x;
        break;
    }
    case GGUF_VTYPE_INT32: {
        int32_t x;
        memcpy(&x, v, 4);
        s = x;
        break;
    }
    case GGUF_VTYPE_INT64:
        memcpy(&s, v, 8);
        break;
    default:
        return false;
    }
    *neg = s < 0;
    *sv = s;
    *uv = (uint64_t)s;
    return true;
}

static int get_int(const struct gguf_file *f, const char *key, bool want_signed, uint64_t umax,
                   int64_t *sout, uint64_t *uout, const char *tname, struct err_msg *msg)
{
    const struct gguf_kv *kv = NULL;
    bool neg;
    int64_t sv = 0;
    uint64_t uv = 0;
    int rc = lookup(f, key, &kv, msg);
    if (rc) return rc;
    if (!int_value(kv, &neg, &sv, &uv)) return wrong_type(kv, key, "an integer", msg);
    if (neg && !want_signed)
        return err_set(msg, ERR_FORMAT, "gguf: key '%s': value %" PRId64 " does not fit in %s", key,
                       sv, tname);
    if (!neg && uv > umax)
        return err_set(msg, ERR_FORMAT, "gguf: key '%s': value %" PRIu64 " does not fit in %s", key,
                       uv, tname);
    if (sout) *sout = neg ? sv : (int64_t)uv;
    if (uout) *uout = uv;
    return 0;
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct err_msg *msg)
{
    uint64_t v;
    int rc = get_int(f, key, false, UINT32_MAX, NULL, &v, "u32", msg);
    if (!rc) *out = (uint32_t)v;
    return rc;
}

int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out, struct err_msg *msg)
{
    return get_int(f, key, false, UINT64_MAX, NULL, out, "u64", msg);
}

int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out, struct err_msg *msg)
{
    return get_int(f, key, true, INT64_MAX, out, NULL, "i64", msg);
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct err_msg *msg)
{
    const struct gguf_kv *kv = NULL;
    int rc = lookup(f, key, &kv, msg);
    if (rc) return rc;
    if (kv->type != GGUF_VTYPE_FLOAT32) return wrong_type(kv, key, "f32", msg);
    memcpy(out, kv->val, 4);
    return 0;
}

int gguf_get_f64(const struct gguf_file *f, const char *key, double *out, struct err_msg *msg)
{
    const struct gguf_kv *kv = NULL;
    int rc = lookup(f, key, &kv, msg);
    if (rc) return rc;
    if (kv->type == GGUF_VTYPE_FLOAT32) {
        float v;
        memcpy(&v, kv->val, 4);
        *out = v;
        return 0;
    }
    if (kv->type != GGUF_VTYPE_FLOAT64) return wrong_type(kv, key, "f64", msg);
    memcpy(out, kv->val, 8);
    return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct err_msg *msg)
{
    const struct gguf_kv *kv = NULL;
    int rc = lookup(f, key, &kv, msg);
    if (rc) return rc;
    if (kv->type != GGUF_VTYPE_BOOL) return wrong_type(kv, key, "bool", msg);
    *out = kv->val[0] != 0;
    return 0;
}

int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out,
                 struct err_msg *msg)
{
    const struct gguf_kv *kv = NULL;
    int rc = lookup(f, key, &kv, msg);
    if (rc) return rc;
    if (kv->type != GGUF_VTYPE_STRING) return wrong_type(kv, key, "string", msg);
    memcpy(&out->len, kv->val, 8);
    out->ptr = (const char *)kv->val + 8;
    return 0;
}

int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                 uint64_t *n, const void **data, struct err_msg *msg)
{
    const struct gguf_kv *kv = NULL;
    int rc = lookup(f, key, &kv, msg);
    if (rc) return rc;
    if (kv->type != GGUF_VTYPE_ARRAY) return wrong_type(kv, key, "an array", msg);
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = kv->elem_type == GGUF_VTYPE_STRING ? NULL : kv->val;
    return 0;
}

struct gguf_str gguf_arr_str(const struct gguf_file *f, const char *key, uint64_t i)
{
    int64_t k = gguf_find_key(f, key);
    CHECK(k >= 0);
    return gguf_arr_str_at(f, k, i);
}

struct gguf_str gguf_arr_str_at(const struct gguf_file *f, int64_t k, uint64_t i)
{
    CHECK(k >= 0 && k < gguf_n_kv(f));
    const struct gguf_kv *kv = &f->kvs[k];
    CHECK(kv->type == GGUF_VTYPE_ARRAY && kv->elem_type == GGUF_VTYPE_STRING);
    CHECK(i < kv->n);
    struct gguf_str s;
    memcpy(&s.len, kv->strs[i], 8);
    s.ptr = (const char *)kv->strs[i] + 8;
    return s;
}

/* ---- tensors ---- */

int64_t gguf_n_tensors(const struct gguf_file *f)
{
    return f->n_tensors;
}

const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, int64_t i)
{
    CHECK(i >= 0 && i < f->n_tensors);
    return &f->tensors[i];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
    int64_t i =
        index_find(&f->tensor_index, f->tensors, sizeof(*f->tensors), name, strlen(name), NULL);
    return i < 0 ? NULL : &f->tensors[i];
}
