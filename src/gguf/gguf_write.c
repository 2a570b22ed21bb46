/*
 * gguf_write.c - the GGUF writer: collect metadata and tensors in memory,
 * then write one GGUF v3 file in a single sequential pass.
 *
 * Everything handed to the writer is copied, so callers may free their
 * buffers at once. The file is laid out as the reader expects it:
 *
 *   header | kvs in insertion order | tensor infos in insertion order
 *   | zero padding to 32 | tensor 0 data | pad to 32 | tensor 1 data | ...
 *
 * Tensor offsets are assigned at write time (each a multiple of 32 from the
 * data section start). The output goes to "<path>.tmp.XXXXXX" in the same
 * directory, is flushed and fsync'ed, then renamed over path, so a reader
 * never sees a half-written model and a crash leaves the old file intact.
 *
 * Used by `inferd model make` and the tests; single-threaded: one writer
 * belongs to one thread. Memory: process heap, freed by gguf_writer_free.
 */
#include "gguf/gguf.h"

#include "base/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF writer assumes little-endian");

#define GGUF_WRITE_ALIGNMENT 32

/* One pending metadata entry. */
struct writer_kv {
    char *key;                 /* NUL-terminated, owned */
    enum gguf_vtype type;      /* value type */
    enum gguf_vtype elem_type; /* arrays: element type */
    uint64_t n;                /* arrays: element count */
    uint8_t scalar[8];         /* scalar value, little-endian, vtype size bytes used */
    char *str;                 /* string value, owned (NUL-terminated copy) */
    void *arr;                 /* numeric arrays: (n) packed elements, owned */
    char **strs;               /* string arrays: (n) owned copies */
};

/* One pending tensor. */
struct writer_tensor {
    char *name;                /* owned */
    enum dtype type;           /* element type (supported) */
    int n_dims;                /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS]; /* elements per dim; unused = 1 */
    void *data;                /* (size) bytes, owned copy */
    size_t size;               /* bytes */
};

struct gguf_writer {
    struct writer_kv *kvs;         /* (n_kv) in insertion order */
    size_t n_kv, cap_kv;           /* used, allocated */
    struct writer_tensor *tensors; /* (n_tensors) in insertion order */
    size_t n_tensors, cap_tensors; /* used, allocated */
};

struct gguf_writer *gguf_writer_new(void)
{
    return xcalloc(1, sizeof(struct gguf_writer));
}

static void kv_clear(struct writer_kv *kv)
{
    free(kv->str);
    free(kv->arr);
    if (kv->strs)
        for (uint64_t i = 0; i < kv->n; i++)
            free(kv->strs[i]);
    free(kv->strs);
    kv->str = NULL;
    kv->arr = NULL;
    kv->strs = NULL;
    kv->n = 0;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        kv_clear(&w->kvs[i]);
        free(w->kvs[i].key);
    }
    free(w->kvs);
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w);
}

/* The entry for key, emptied for a new value (created at the end if new). */
static struct writer_kv *kv_slot(struct gguf_writer *w, const char *key, enum gguf_vtype type)
{
    CHECK(key && key[0] && strlen(key) <= 65535); /* what the reader accepts */
    struct writer_kv *kv = NULL;
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kvs[i].key, key) == 0) {
            kv = &w->kvs[i];
            kv_clear(kv);
            break;
        }
    if (!kv) {
        if (w->n_kv == w->cap_kv) {
            w->cap_kv = w->cap_kv ? 2 * w->cap_kv : 16;
            w->kvs = xrealloc(w->kvs, w->cap_kv * sizeof(*w->kvs));
        }
        kv = &w->kvs[w->n_kv++];
        *kv = (struct writer_kv){.key = xstrdup(key)};
    }
    kv->type = kv->elem_type = type;
    kv->n = 1;
    return kv;
}

void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    memcpy(kv_slot(w, key, GGUF_VTYPE_UINT32)->scalar, &v, 4);
}

void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    memcpy(kv_slot(w, key, GGUF_VTYPE_INT32)->scalar, &v, 4);
}

void gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
    memcpy(kv_slot(w, key, GGUF_VTYPE_UINT64)->scalar, &v, 8);
}

void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v)
{
    memcpy(kv_slot(w, key, GGUF_VTYPE_FLOAT32)->scalar, &v, 4);
}

void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v)
{
    kv_slot(w, key, GGUF_VTYPE_BOOL)->scalar[0] = v ? 1 : 0;
}

void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    CHECK(v);
    char *copy = xstrdup(v); /* before kv_slot: v may be the old value's buffer */
    kv_slot(w, key, GGUF_VTYPE_STRING)->str = copy;
}

void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                             uint64_t n)
{
    CHECK(n == 0 || v);
    char **copy = xmalloc((size_t)n * sizeof(*copy));
    for (uint64_t i = 0; i < n; i++) {
        CHECK(v[i]);
        copy[i] = xstrdup(v[i]);
    }
    struct writer_kv *kv = kv_slot(w, key, GGUF_VTYPE_ARRAY);
    kv->elem_type = GGUF_VTYPE_STRING;
    kv->n = n;
    kv->strs = copy;
}

static void set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype et, const void *v,
                    uint64_t n, size_t esize)
{
    CHECK(n == 0 || v);
    CHECK(n <= SIZE_MAX / esize);
    void *copy = xmalloc((size_t)n * esize);
    if (n) memcpy(copy, v, (size_t)n * esize);
    struct writer_kv *kv = kv_slot(w, key, GGUF_VTYPE_ARRAY);
    kv->elem_type = et;
    kv->n = n;
    kv->arr = copy;
}

void gguf_writer_set_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, uint64_t n)
{
    set_arr(w, key, GGUF_VTYPE_INT32, v, n, 4);
}

void gguf_writer_set_arr_f32(struct gguf_writer *w, const char *key, const float *v, uint64_t n)
{
    set_arr(w, key, GGUF_VTYPE_FLOAT32, v, n, 4);
}

int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum dtype type, int n_dims,
                           const int64_t *ne, const void *data, size_t size, struct err_msg *msg)
{
    if (!name || !name[0]) return err_set(msg, ERR_INVALID, "gguf writer: empty tensor name");
    if (strlen(name) > 65535)
        return err_set(msg, ERR_INVALID, "gguf writer: tensor name of %zu bytes is too long",
                       strlen(name));
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return err_set(msg, ERR_INVALID, "gguf writer: tensor '%s': n_dims %d out of range 1..%d",
                       name, n_dims, GGUF_MAX_DIMS);
    if (!dtype_supported((uint32_t)type))
        return err_set(msg, ERR_UNSUPPORTED, "gguf writer: tensor '%s': type id %d not supported",
                       name, (int)type);
    const struct dtype_info *ti = dtype_info((uint32_t)type);
    int64_t n_elems = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return err_set(msg, ERR_INVALID, "gguf writer: tensor '%s': ne[%d] %" PRId64 " <= 0",
                           name, d, ne[d]);
        if (__builtin_mul_overflow(n_elems, ne[d], &n_elems))
            return err_set(msg, ERR_INVALID, "gguf writer: tensor '%s': element count overflows",
                           name);
    }
    if (ne[0] % ti->blck)
        return err_set(msg, ERR_INVALID,
                       "gguf writer: tensor '%s': ne[0] %" PRId64
                       " is not a multiple of the %s block size %d",
                       name, ne[0], ti->name, ti->blck);
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)(n_elems / ti->blck), (uint64_t)ti->type_size, &want))
        return err_set(msg, ERR_INVALID, "gguf writer: tensor '%s': size overflows", name);
    if (want != size)
        return err_set(msg, ERR_INVALID,
                       "gguf writer: tensor '%s': size %zu bytes, expected %" PRIu64 " for %s",
                       name, size, want, ti->name);
    if (!data) return err_set(msg, ERR_INVALID, "gguf writer: tensor '%s': no data", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return err_set(msg, ERR_INVALID, "gguf writer: tensor '%s' added twice", name);

    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? 2 * w->cap_tensors : 16;
        w->tensors = xrealloc(w->tensors, w->cap_tensors * sizeof(*w->tensors));
    }
    struct writer_tensor *t = &w->tensors[w->n_tensors++];
    *t =
        (struct writer_tensor){.name = xstrdup(name), .type = type, .n_dims = n_dims, .size = size};
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->data = xmalloc(size);
    memcpy(t->data, data, size);
    return 0;
}

/* ---- output ---- */

/* Buffered output that counts bytes; write errors are sticky in the FILE and
 * checked once at the end. */
struct out {
    FILE *fp;     /* the temporary file */
    uint64_t pos; /* bytes written so far */
};

static void put(struct out *o, const void *p, size_t n)
{
    if (n) fwrite(p, 1, n, o->fp);
    o->pos += n;
}

static void put_u32(struct out *o, uint32_t v)
{
    put(o, &v, 4);
}

static void put_u64(struct out *o, uint64_t v)
{
    put(o, &v, 8);
}

static void put_str(struct out *o, const char *s)
{
    size_t n = strlen(s);
    put_u64(o, n);
    put(o, s, n);
}

static uint64_t pad_to(uint64_t n)
{
    return (n + GGUF_WRITE_ALIGNMENT - 1) / GGUF_WRITE_ALIGNMENT * GGUF_WRITE_ALIGNMENT;
}

static void put_pad(struct out *o)
{
    static const uint8_t zeros[GGUF_WRITE_ALIGNMENT];
    put(o, zeros, (size_t)(pad_to(o->pos) - o->pos));
}

static void put_kv(struct out *o, const struct writer_kv *kv)
{
    put_str(o, kv->key);
    put_u32(o, kv->type);
    switch (kv->type) {
    case GGUF_VTYPE_STRING:
        put_str(o, kv->str);
        break;
    case GGUF_VTYPE_ARRAY:
        put_u32(o, kv->elem_type);
        put_u64(o, kv->n);
        if (kv->elem_type == GGUF_VTYPE_STRING) {
            for (uint64_t i = 0; i < kv->n; i++)
                put_str(o, kv->strs[i]);
        } else {
            put(o, kv->arr, (size_t)kv->n * 4); /* i32 and f32 only */
        }
        break;
    case GGUF_VTYPE_UINT64:
        put(o, kv->scalar, 8);
        break;
    case GGUF_VTYPE_BOOL:
        put(o, kv->scalar, 1);
        break;
    default:
        put(o, kv->scalar, 4);
        break; /* u32, i32, f32 */
    }
}

/* A caller may set general.alignment itself; it must then agree with ours. */
static int check_alignment_key(const struct gguf_writer *w, struct err_msg *msg)
{
    for (size_t i = 0; i < w->n_kv; i++) {
        const struct writer_kv *kv = &w->kvs[i];
        if (strcmp(kv->key, "general.alignment") != 0) continue;
        uint32_t a = 0;
        if (kv->type == GGUF_VTYPE_UINT32) memcpy(&a, kv->scalar, 4);
        if (a != GGUF_WRITE_ALIGNMENT)
            return err_set(msg, ERR_INVALID,
                           "gguf writer: key 'general.alignment' must be a u32 equal to %d "
                           "(the writer's alignment)",
                           GGUF_WRITE_ALIGNMENT);
    }
    return 0;
}

/* Writes the whole file to o; offsets are assigned in insertion order. */
static void put_file(struct out *o, const struct gguf_writer *w)
{
    put(o, "GGUF", 4);
    put_u32(o, 3);
    put_u64(o, w->n_tensors);
    put_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++)
        put_kv(o, &w->kvs[i]);
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct writer_tensor *t = &w->tensors[i];
        put_str(o, t->name);
        put_u32(o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++)
            put_u64(o, (uint64_t)t->ne[d]);
        put_u32(o, (uint32_t)t->type);
        put_u64(o, offset);
        offset = pad_to(offset + t->size);
    }
    /* The data section starts aligned in the file, so aligned offsets from
     * it are aligned in the file (and in a page-aligned mapping). */
    if (w->n_tensors) put_pad(o);
    for (size_t i = 0; i < w->n_tensors; i++) {
        put(o, w->tensors[i].data, w->tensors[i].size);
        if (i + 1 < w->n_tensors) put_pad(o);
    }
}

int gguf_writer_write(struct gguf_writer *w, const char *path, struct err_msg *msg)
{
    int rc = check_alignment_key(w, msg);
    if (rc) return rc;

    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 16);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = -errno;
        err_set(msg, rc, "cannot create '%s': %s", tmp, err_str(rc));
        goto err_free_tmp;
    }
    /* mkstemp makes 0600; a model file is ordinary data. */
    mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um) != 0) {
        rc = -errno;
        err_set(msg, rc, "cannot chmod '%s': %s", tmp, err_str(rc));
        close(fd);
        goto err_unlink;
    }
    struct out o = {.fp = fdopen(fd, "wb")};
    if (!o.fp) {
        rc = -errno;
        err_set(msg, rc, "cannot write '%s': %s", tmp, err_str(rc));
        close(fd);
        goto err_unlink;
    }

    put_file(&o, w);

    errno = 0;
    if (fflush(o.fp) != 0 || ferror(o.fp) || fsync(fileno(o.fp)) != 0) {
        rc = errno ? -errno : -EIO;
        err_set(msg, rc, "cannot write '%s': %s", tmp, err_str(rc));
        fclose(o.fp);
        goto err_unlink;
    }
    if (fclose(o.fp) != 0) {
        rc = -errno;
        err_set(msg, rc, "cannot write '%s': %s", tmp, err_str(rc));
        goto err_unlink;
    }
    if (rename(tmp, path) != 0) {
        rc = -errno;
        err_set(msg, rc, "cannot rename '%s' to '%s': %s", tmp, path, err_str(rc));
        goto err_unlink;
    }
    free(tmp);
    return 0;

err_unlink:
    unlink(tmp);
err_free_tmp:
    free(tmp);
    return rc;
}
