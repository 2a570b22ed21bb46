/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Opens the input with gguf_open_buffer; on success walks everything the
 * reader promises is safe: every key through its typed getter, every array
 * element (strings through gguf_arr_str), every tensor's first and last data
 * byte, and name lookups of keys and tensors. A crash, a sanitizer report or
 * an inconsistent answer (a lookup that does not find what was listed, data
 * outside the buffer) aborts.
 *
 * Build: cmake -DINFERD_FUZZ=ON -DCMAKE_C_COMPILER=clang, target fuzz_gguf.
 * ctest replays tests/fuzz/gguf/corpus/ through tests/fuzz/replay.c.
 */
#include "base/check.h"
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sums bytes so the compiler cannot drop the reads. */
static volatile uint64_t sink;

static void walk_array(const struct gguf_file *f, const char *key)
{
    enum gguf_vtype et;
    uint64_t n;
    const void *p;
    CHECK(gguf_get_arr(f, key, &et, &n, &p, NULL) == 0);
    if (et == GGUF_VTYPE_STRING) {
        CHECK(p == NULL);
        for (uint64_t i = 0; i < n; i++) {
            struct gguf_str s = gguf_arr_str(f, key, i);
            if (s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
        }
        return;
    }
    if (n) {
        static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        CHECK((unsigned)et < 13 && sizes[et] > 0);
        const uint8_t *b = p;
        sink += b[0] + b[n * sizes[et] - 1];
    }
}

static void walk_kv(const struct gguf_file *f, int64_t i)
{
    struct gguf_str k = gguf_key(f, i);
    char *key = xmalloc((size_t)k.len + 1);
    memcpy(key, k.ptr, (size_t)k.len);
    key[k.len] = 0;
    CHECK(strlen(key) == k.len); /* the reader rejects NUL in names */
    CHECK(gguf_find_key(f, key) == i);

    enum gguf_vtype t = gguf_kv_type(f, i);
    struct gguf_str s;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    bool b;
    switch (t) {
    case GGUF_VTYPE_STRING:
        CHECK(gguf_get_str(f, key, &s, NULL) == 0);
        if (s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
        break;
    case GGUF_VTYPE_ARRAY:
        walk_array(f, key);
        break;
    case GGUF_VTYPE_BOOL:
        CHECK(gguf_get_bool(f, key, &b, NULL) == 0);
        break;
    case GGUF_VTYPE_FLOAT32:
        CHECK(gguf_get_f32(f, key, &f32, NULL) == 0);
        CHECK(gguf_get_f64(f, key, &f64, NULL) == 0);
        break;
    case GGUF_VTYPE_FLOAT64:
        CHECK(gguf_get_f64(f, key, &f64, NULL) == 0);
        break;
    default: {
        /* Integers: at least one of the two wide getters succeeds. */
        int a = gguf_get_u64(f, key, &u64, NULL), c = gguf_get_i64(f, key, &i64, NULL);
        CHECK(a == 0 || c == 0);
        (void)gguf_get_u32(f, key, &u32, NULL);
        break;
    }
    }
    /* Wrong-type getters must fail cleanly, never crash. */
    if (t != GGUF_VTYPE_STRING) CHECK(gguf_get_str(f, key, &s, NULL) == ERR_FORMAT);
    if (t != GGUF_VTYPE_ARRAY) CHECK(gguf_get_arr(f, key, NULL, NULL, NULL, NULL) == ERR_FORMAT);
    free(key);
}

static void walk_tensor(const struct gguf_file *f, int64_t i, const uint8_t *buf, size_t size)
{
    const struct gguf_tensor *t = gguf_tensor(f, i);
    CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
    CHECK(t->size > 0);
    const uint8_t *d = t->data;
    CHECK(d >= buf && (size_t)(d - buf) <= size && t->size <= size - (size_t)(d - buf));
    sink += d[0] + d[t->size - 1];

    char *name = xmalloc((size_t)t->name.len + 1);
    memcpy(name, t->name.ptr, (size_t)t->name.len);
    name[t->name.len] = 0;
    CHECK(gguf_find_tensor(f, name) == t);
    free(name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gguf_file *f = NULL;
    struct err_msg m;
    m.text[0] = 0;
    int rc = gguf_open_buffer(data, size, &f, &m);
    if (rc) {
        CHECK(f == NULL);
        CHECK(rc == ERR_FORMAT || rc == ERR_UNSUPPORTED);
        CHECK(strncmp(m.text, "gguf: ", 6) == 0);
        return 0;
    }
    CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
    size_t a = gguf_alignment(f);
    CHECK(a && (a & (a - 1)) == 0);
    CHECK(gguf_file_size(f) == size);
    for (int64_t i = 0; i < gguf_n_kv(f); i++)
        walk_kv(f, i);
    for (int64_t i = 0; i < gguf_n_tensors(f); i++)
        walk_tensor(f, i, data, size);
    gguf_close(f);
    return 0;
}
