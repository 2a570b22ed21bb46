/*
 * gguf.h - GGUF file reader (mmap, validated) and writer.
 *
 * Layout of a GGUF v2/v3 file (little-endian):
 *
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset, offset % alignment == 0
 *
 * string = u64 len | bytes (no NUL). array = u32 elem_type | u64 n | elems.
 *
 * Reader: gguf_open() maps the file read-only and validates *everything*
 * before returning: every length and count against the bytes left, every type
 * id, string and array bounds, tensor dims (1..4, each > 0, product without
 * overflow, multiple of the type's block), tensor offset alignment, data range
 * inside the file and no overlap between tensors, duplicate keys and tensor
 * names. Also: names (keys, tensor names) are 1..65535 bytes without NUL
 * bytes (so every name can be looked up as a C string), bools are 0 or 1,
 * general.alignment is a u32 power of two. A bad file gives ERR_FORMAT; a
 * valid file we cannot read gives ERR_UNSUPPORTED (GGUF v1, big-endian files,
 * arrays of arrays, tensor types outside dtype_supported()). The message
 * starts with "gguf: " and names the field, e.g.
 *   "gguf: tensor 'blk.0.attn_q.weight': data [offset 4096, 1048576 bytes] runs past end of file
 *    (data section starts at 800, file 5000 bytes)".
 * gguf_open() also returns negated errno (-ENOENT, -EISDIR, ...) for a file
 * it cannot open or map. After a successful open, accessors cannot fail on
 * the file's contents. Open is one pass over the metadata (tensor data is not
 * touched), so opening a multi-GB model costs what its vocabulary costs.
 *
 * Lifetime: the mapping and every pointer handed out (strings, tensor data)
 * live until gguf_close(). Strings are NOT NUL-terminated: use the length.
 * Thread safety: a gguf_file is immutable after open; any thread may read it.
 */
#ifndef INFERD_GGUF_H
#define INFERD_GGUF_H

#include "base/dtype.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_VTYPE_UINT8 = 0,
    GGUF_VTYPE_INT8 = 1,
    GGUF_VTYPE_UINT16 = 2,
    GGUF_VTYPE_INT16 = 3,
    GGUF_VTYPE_UINT32 = 4,
    GGUF_VTYPE_INT32 = 5,
    GGUF_VTYPE_FLOAT32 = 6,
    GGUF_VTYPE_BOOL = 7,
    GGUF_VTYPE_STRING = 8,
    GGUF_VTYPE_ARRAY = 9,
    GGUF_VTYPE_UINT64 = 10,
    GGUF_VTYPE_INT64 = 11,
    GGUF_VTYPE_FLOAT64 = 12,
};

#define GGUF_MAX_DIMS          4
#define GGUF_DEFAULT_ALIGNMENT 32

struct gguf_str {
    const char *ptr; /* into the mapping; not NUL-terminated */
    uint64_t len;    /* bytes */
};

struct gguf_tensor {
    struct gguf_str name;      /* tensor name */
    int n_dims;                /* 1..4 */
    int64_t ne[GGUF_MAX_DIMS]; /* elements per dim, ne[0] innermost (row length); unused = 1 */
    enum dtype type;           /* element type (supported types only) */
    const void *data;          /* into the mapping */
    size_t size;               /* bytes */
};

struct gguf_file;

/* Opens and validates path. On success *out owns the mapping. On failure
 * returns a negative code and fills msg (if non-NULL). */
int gguf_open(const char *path, struct gguf_file **out, struct err_msg *msg);
/* Same over a caller-owned buffer (no copy; buf must outlive the handle).
 * Used by the fuzz target and by tests. */
int gguf_open_buffer(const void *buf, size_t size, struct gguf_file **out, struct err_msg *msg);
void gguf_close(struct gguf_file *f);
/* Tells the kernel that the mapped bytes [p, p + n) of f (tensor data) are
 * not needed for now: the whole pages inside the range leave this process's
 * resident set; a later read faults them back in from the file (they stay in
 * the page cache while memory allows). No-op for gguf_open_buffer handles. */
void gguf_release_pages(const struct gguf_file *f, const void *p, size_t n);

uint32_t gguf_version(const struct gguf_file *f);
size_t gguf_alignment(const struct gguf_file *f);
size_t gguf_file_size(const struct gguf_file *f);

/* ---- key/value metadata ---- */
int64_t gguf_n_kv(const struct gguf_file *f);
/* Index of key, or -1. */
int64_t gguf_find_key(const struct gguf_file *f, const char *key);
struct gguf_str gguf_key(const struct gguf_file *f, int64_t i);
enum gguf_vtype gguf_kv_type(const struct gguf_file *f, int64_t i);

/* Typed lookups by key name. Each returns 0, -ENOENT if the key is absent or
 * ERR_FORMAT if it has another type (message in msg names key and types).
 * Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out, struct err_msg *msg);
int gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out, struct err_msg *msg);
int gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out, struct err_msg *msg);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *out, struct err_msg *msg);
/* Accepts f64 and f32 (widened exactly). */
int gguf_get_f64(const struct gguf_file *f, const char *key, double *out, struct err_msg *msg);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out, struct err_msg *msg);
int gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out,
                 struct err_msg *msg);

/* Arrays. gguf_get_arr returns the element type and count; numeric arrays
 * (and bool arrays, one byte each) also give a pointer to the packed
 * little-endian elements (may be unaligned: read with memcpy). String arrays:
 * *data is NULL; use gguf_arr_str. Any out-parameter may be NULL. */
int gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                 uint64_t *n, const void **data, struct err_msg *msg);
/* i-th string of a string array (bounds-checked by CHECK: i < n). O(1): the
 * reader indexes string arrays at open time. */
struct gguf_str gguf_arr_str(const struct gguf_file *f, const char *key, uint64_t i);
/* Same by key index (gguf_find_key), for loops over large arrays: no name
 * lookup per element. */
struct gguf_str gguf_arr_str_at(const struct gguf_file *f, int64_t key_index, uint64_t i);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, int64_t i);
/* NULL if absent. */
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* ---- writer ----
 * Collects metadata and tensors in memory (tensor data is copied), then
 * writes a GGUF v3 file with alignment 32. Keys keep insertion order; setting
 * an existing key replaces its value. */
struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(struct gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Arrays: elements are copied. */
void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                             uint64_t n);
void gguf_writer_set_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_writer_set_arr_f32(struct gguf_writer *w, const char *key, const float *v, uint64_t n);
/* ne[0] is the row length. size must equal the type's size for ne. */
int gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum dtype type, int n_dims,
                           const int64_t *ne, const void *data, size_t size, struct err_msg *msg);
/* Writes to path (through a temporary file + rename). */
int gguf_writer_write(struct gguf_writer *w, const char *path, struct err_msg *msg);

#endif
