/*
 * test_gguf.c - GGUF writer -> reader round trips, and one test per
 * validation rule of the reader over hand-built hostile buffers.
 *
 * Hostile files are built byte by byte (gguf_build.h) and opened from an
 * exactly-sized heap copy, so under ASan any read past the end is caught.
 * Each failure test checks the error code and that the message names the
 * offending field.
 */
#include "test.h"

#include "gguf_build.h"

#include "base/dtype.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* ---- helpers ---- */

static char tmp_dir[256];

static const char *tmp_path(const char *name)
{
    static char path[512];
    if (!tmp_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof(tmp_dir), "%s/inferd-gguf-XXXXXX", t && t[0] ? t : "/tmp");
        CHECK(mkdtemp(tmp_dir));
    }
    snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);
    return path;
}

/* Opens the first n bytes of b from an exactly-sized heap copy. *copy must
 * be freed after gguf_close. */
static int open_prefix(const struct gbuf *b, size_t n, struct gguf_file **f, struct err_msg *m,
                       uint8_t **copy)
{
    *copy = xmalloc(n);
    if (n) memcpy(*copy, b->p, n);
    m->text[0] = 0;
    return gguf_open_buffer(*copy, n, f, m);
}

/* Expects opening b to fail with code and a message containing each of the
 * needles (NULL-terminated list). */
static void expect_fail_at(int line, const struct gbuf *b, int code, const char *needle1,
                           const char *needle2)
{
    struct gguf_file *f = (struct gguf_file *)1;
    struct err_msg m;
    uint8_t *copy;
    int rc = open_prefix(b, b->n, &f, &m, &copy);
    if (rc != code) {
        fprintf(stderr, "  line %d: rc %d (%s), expected %d (%s); message: %s\n", line, rc,
                err_str(rc), code, err_str(code), m.text);
        test_failures_in_case++;
    }
    if (f != NULL) {
        fprintf(stderr, "  line %d: handle not cleared on failure\n", line);
        test_failures_in_case++;
        if (rc == 0) gguf_close(f);
    }
    if (strncmp(m.text, "gguf: ", 6) != 0 || (needle1 && !strstr(m.text, needle1)) ||
        (needle2 && !strstr(m.text, needle2))) {
        fprintf(stderr, "  line %d: message '%s' lacks '%s' / '%s'\n", line, m.text,
                needle1 ? needle1 : "", needle2 ? needle2 : "");
        test_failures_in_case++;
    }
    free(copy);
}

#define EXPECT_FAIL(b, code, n1, n2) expect_fail_at(__LINE__, (b), (code), (n1), (n2))

/* A small valid v3 file: 4 keys, 2 tensors (f32 [8] at 0, q8_0 [32, 2] at 32). */
static void valid_file(struct gbuf *b)
{
    static const char *const toks[] = {"a", "bc", ""};
    gb_header(b, 3, 2, 4);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "general.alignment", 32);
    gb_kv_arr_str(b, "tokenizer.ggml.tokens", toks, 3);
    gb_key(b, "some.flag", GGUF_VTYPE_BOOL);
    gb_u8(b, 1);
    gb_tensor(b, "a", 1, (uint64_t[]){8}, DTYPE_F32, 0);
    gb_tensor(b, "b", 2, (uint64_t[]){32, 2}, DTYPE_Q8_0, 32);
    gb_pad(b, 32);
    gb_fill(b, 32, 1);
    gb_fill(b, 68, 2);
}

/* Header + one f32 tensor info with the given fields + padding + data. */
static void one_tensor(struct gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes)
{
    gb_header(b, 3, 1, 0);
    gb_tensor(b, name, n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_fill(b, data_bytes, 3);
}

static bool str_eq(struct gguf_str s, const char *c)
{
    return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

/* ---- round trips through the writer ---- */

TEST(writer_roundtrip_metadata)
{
    struct err_msg m = {{0}};
    struct gguf_writer *w = gguf_writer_new();
    static const char *const strs[] = {"hello", "", "wörld", "<|endoftext|>"};
    const int32_t ints[] = {-5, 0, 7, INT32_MAX, INT32_MIN};
    const float floats[] = {1.5f, -0.0f, 3.25e-8f};

    gguf_writer_set_str(w, "general.name", "first");
    gguf_writer_set_u32(w, "a.u32", 4000000000u);
    gguf_writer_set_i32(w, "a.i32", -17);
    gguf_writer_set_u64(w, "a.u64", UINT64_MAX - 3);
    gguf_writer_set_f32(w, "a.f32", 0.1f);
    gguf_writer_set_bool(w, "a.bool", true);
    gguf_writer_set_bool(w, "a.false", false);
    gguf_writer_set_arr_str(w, "a.strs", strs, 4);
    gguf_writer_set_arr_i32(w, "a.ints", ints, 5);
    gguf_writer_set_arr_f32(w, "a.floats", floats, 3);
    gguf_writer_set_arr_i32(w, "a.empty", NULL, 0);
    gguf_writer_set_str(w, "general.name", "replaced"); /* keeps its first position */
    const char *path = tmp_path("meta.gguf");
    EXPECT_EQ_INT(gguf_writer_write(w, path, &m), 0);
    gguf_writer_free(w);

    struct gguf_file *f = NULL;
    int rc = gguf_open(path, &f, &m);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", m.text);
        return;
    }
    EXPECT_EQ_INT(gguf_version(f), 3);
    EXPECT_EQ_INT(gguf_alignment(f), 32);
    EXPECT_EQ_INT(gguf_n_kv(f), 11);
    EXPECT_EQ_INT(gguf_n_tensors(f), 0);
    EXPECT(str_eq(gguf_key(f, 0), "general.name"));
    EXPECT(str_eq(gguf_key(f, 10), "a.empty"));
    EXPECT_EQ_INT(gguf_find_key(f, "a.u64"), 3);
    EXPECT_EQ_INT(gguf_find_key(f, "a.u6"), -1);
    EXPECT_EQ_INT(gguf_kv_type(f, 4), GGUF_VTYPE_FLOAT32);

    struct gguf_str s;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool bv;
    EXPECT_EQ_INT(gguf_get_str(f, "general.name", &s, &m), 0);
    EXPECT(str_eq(s, "replaced"));
    EXPECT_EQ_INT(gguf_get_u32(f, "a.u32", &u32, &m), 0);
    EXPECT_EQ_INT(u32, 4000000000u);
    EXPECT_EQ_INT(gguf_get_i64(f, "a.i32", &i64, &m), 0);
    EXPECT_EQ_INT(i64, -17);
    EXPECT_EQ_INT(gguf_get_u64(f, "a.u64", &u64, &m), 0);
    EXPECT(u64 == UINT64_MAX - 3);
    EXPECT_EQ_INT(gguf_get_f32(f, "a.f32", &f32, &m), 0);
    EXPECT(f32 == 0.1f);
    EXPECT_EQ_INT(gguf_get_bool(f, "a.bool", &bv, &m), 0);
    EXPECT(bv);
    EXPECT_EQ_INT(gguf_get_bool(f, "a.false", &bv, &m), 0);
    EXPECT(!bv);

    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    EXPECT_EQ_INT(gguf_get_arr(f, "a.strs", &et, &n, &data, &m), 0);
    EXPECT_EQ_INT(et, GGUF_VTYPE_STRING);
    EXPECT_EQ_INT(n, 4);
    EXPECT(data == NULL);
    for (int i = 0; i < 4; i++)
        EXPECT(str_eq(gguf_arr_str(f, "a.strs", (uint64_t)i), strs[i]));
    EXPECT_EQ_INT(gguf_get_arr(f, "a.ints", &et, &n, &data, &m), 0);
    EXPECT_EQ_INT(et, GGUF_VTYPE_INT32);
    EXPECT_EQ_INT(n, 5);
    EXPECT(memcmp(data, ints, sizeof(ints)) == 0);
    EXPECT_EQ_INT(gguf_get_arr(f, "a.floats", &et, &n, &data, &m), 0);
    EXPECT_EQ_INT(et, GGUF_VTYPE_FLOAT32);
    EXPECT(n == 3 && memcmp(data, floats, sizeof(floats)) == 0);
    EXPECT_EQ_INT(gguf_get_arr(f, "a.empty", &et, &n, &data, &m), 0);
    EXPECT_EQ_INT(n, 0);

    /* Conversions and type errors. */
    EXPECT_EQ_INT(gguf_get_u32(f, "a.i32", &u32, &m), ERR_FORMAT);
    EXPECT(strstr(m.text, "a.i32") && strstr(m.text, "-17"));
    EXPECT_EQ_INT(gguf_get_u32(f, "a.u64", &u32, &m), ERR_FORMAT);
    EXPECT(strstr(m.text, "a.u64") && strstr(m.text, "u32"));
    EXPECT_EQ_INT(gguf_get_i64(f, "a.u64", &i64, &m), ERR_FORMAT);
    EXPECT_EQ_INT(gguf_get_i64(f, "a.u32", &i64, &m), 0);
    EXPECT_EQ_INT(i64, 4000000000LL);
    EXPECT_EQ_INT(gguf_get_u64(f, "a.u32", &u64, &m), 0);
    EXPECT_EQ_INT(u64, 4000000000LL);
    EXPECT_EQ_INT(gguf_get_str(f, "a.u32", &s, &m), ERR_FORMAT);
    EXPECT(strstr(m.text, "a.u32") && strstr(m.text, "u32") && strstr(m.text, "string"));
    EXPECT_EQ_INT(gguf_get_u32(f, "a.f32", &u32, &m), ERR_FORMAT);
    EXPECT_EQ_INT(gguf_get_f32(f, "a.u32", &f32, &m), ERR_FORMAT);
    EXPECT_EQ_INT(gguf_get_bool(f, "a.u32", &bv, &m), ERR_FORMAT);
    EXPECT_EQ_INT(gguf_get_arr(f, "a.u32", &et, &n, &data, &m), ERR_FORMAT);
    EXPECT_EQ_INT(gguf_get_u32(f, "a.ints", &u32, &m), ERR_FORMAT);
    EXPECT(strstr(m.text, "array of i32"));
    EXPECT_EQ_INT(gguf_get_u32(f, "missing.key", &u32, &m), -ENOENT);
    EXPECT(strstr(m.text, "missing.key"));
    EXPECT_EQ_INT(gguf_get_str(f, "missing.key", &s, NULL), -ENOENT);
    gguf_close(f);
    unlink(path);
}

/* Every value type, including the ones the writer does not produce. */
TEST(reader_every_value_type)
{
    struct gbuf b = {0};
    gb_header(&b, 2, 0, 14);
    gb_key(&b, "t.u8", GGUF_VTYPE_UINT8);
    gb_u8(&b, 200);
    gb_key(&b, "t.i8", GGUF_VTYPE_INT8);
    gb_u8(&b, (uint8_t)-100);
    gb_key(&b, "t.u16", GGUF_VTYPE_UINT16);
    gb_u16(&b, 65000);
    gb_key(&b, "t.i16", GGUF_VTYPE_INT16);
    gb_u16(&b, (uint16_t)-30000);
    gb_key(&b, "t.u32", GGUF_VTYPE_UINT32);
    gb_u32(&b, 7);
    gb_key(&b, "t.i32", GGUF_VTYPE_INT32);
    gb_u32(&b, (uint32_t)-7);
    gb_key(&b, "t.f32", GGUF_VTYPE_FLOAT32);
    float fv = -2.5f;
    gb_bytes(&b, &fv, 4);
    gb_key(&b, "t.bool", GGUF_VTYPE_BOOL);
    gb_u8(&b, 0);
    gb_kv_str(&b, "t.str", "x y");
    gb_key(&b, "t.u64", GGUF_VTYPE_UINT64);
    gb_u64(&b, 1ULL << 40);
    gb_key(&b, "t.i64", GGUF_VTYPE_INT64);
    gb_u64(&b, (uint64_t)INT64_MIN);
    gb_key(&b, "t.f64", GGUF_VTYPE_FLOAT64);
    double dv = 1e300;
    gb_bytes(&b, &dv, 8);
    gb_key(&b, "t.arr_u16", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_UINT16);
    gb_u64(&b, 3);
    gb_u16(&b, 1);
    gb_u16(&b, 2);
    gb_u16(&b, 3);
    gb_key(&b, "t.arr_bool", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_BOOL);
    gb_u64(&b, 2);
    gb_u8(&b, 1);
    gb_u8(&b, 0);

    struct gguf_file *f;
    struct err_msg m;
    uint8_t *copy;
    int rc = open_prefix(&b, b.n, &f, &m, &copy);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", m.text);
        goto out;
    }
    EXPECT_EQ_INT(gguf_version(f), 2);
    static const enum gguf_vtype want[] = {
        GGUF_VTYPE_UINT8,  GGUF_VTYPE_INT8,   GGUF_VTYPE_UINT16,  GGUF_VTYPE_INT16,
        GGUF_VTYPE_UINT32, GGUF_VTYPE_INT32,  GGUF_VTYPE_FLOAT32, GGUF_VTYPE_BOOL,
        GGUF_VTYPE_STRING, GGUF_VTYPE_UINT64, GGUF_VTYPE_INT64,   GGUF_VTYPE_FLOAT64,
        GGUF_VTYPE_ARRAY,  GGUF_VTYPE_ARRAY,
    };
    for (int i = 0; i < 14; i++)
        EXPECT_EQ_INT(gguf_kv_type(f, i), want[i]);
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    float f32;
    bool bv;
    struct gguf_str s;
    EXPECT(gguf_get_u32(f, "t.u8", &u32, &m) == 0 && u32 == 200);
    EXPECT(gguf_get_i64(f, "t.i8", &i64, &m) == 0 && i64 == -100);
    EXPECT(gguf_get_u32(f, "t.u16", &u32, &m) == 0 && u32 == 65000);
    EXPECT(gguf_get_i64(f, "t.i16", &i64, &m) == 0 && i64 == -30000);
    EXPECT(gguf_get_u32(f, "t.u32", &u32, &m) == 0 && u32 == 7);
    EXPECT(gguf_get_i64(f, "t.i32", &i64, &m) == 0 && i64 == -7);
    EXPECT(gguf_get_f32(f, "t.f32", &f32, &m) == 0 && f32 == -2.5f);
    EXPECT(gguf_get_bool(f, "t.bool", &bv, &m) == 0 && !bv);
    EXPECT(gguf_get_str(f, "t.str", &s, &m) == 0 && str_eq(s, "x y"));
    EXPECT(gguf_get_u64(f, "t.u64", &u64, &m) == 0 && u64 == 1ULL << 40);
    EXPECT(gguf_get_i64(f, "t.i64", &i64, &m) == 0 && i64 == INT64_MIN);
    EXPECT_EQ_INT(gguf_get_u64(f, "t.i64", &u64, &m), ERR_FORMAT);
    EXPECT_EQ_INT(gguf_get_f32(f, "t.f64", &f32, &m), ERR_FORMAT);
    EXPECT(strstr(m.text, "f64"));
    double f64;
    EXPECT(gguf_get_f64(f, "t.f64", &f64, &m) == 0 && f64 == 1e300);
    EXPECT(gguf_get_f64(f, "t.f32", &f64, &m) == 0 && f64 == -2.5);
    EXPECT_EQ_INT(gguf_get_f64(f, "t.u32", &f64, &m), ERR_FORMAT);
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    EXPECT_EQ_INT(gguf_get_arr(f, "t.arr_u16", &et, &n, &data, &m), 0);
    uint16_t u16s[3];
    memcpy(u16s, data, 6);
    EXPECT(et == GGUF_VTYPE_UINT16 && n == 3 && u16s[0] == 1 && u16s[2] == 3);
    EXPECT_EQ_INT(gguf_get_arr(f, "t.arr_bool", &et, &n, &data, &m), 0);
    EXPECT(et == GGUF_VTYPE_BOOL && n == 2 && ((const uint8_t *)data)[0] == 1);
    gguf_close(f);
out:
    free(copy);
    gb_free(&b);
}

/* Fills a buffer with reproducible pseudo-random bytes. */
static void fill_random(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

TEST(writer_roundtrip_tensors_every_dtype)
{
    static const enum dtype types[] = {DTYPE_F32,  DTYPE_F16,  DTYPE_BF16, DTYPE_Q8_0,
                                       DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
    enum { N_TYPES = sizeof(types) / sizeof(types[0]) };
    struct err_msg m = {{0}};
    struct gguf_writer *w = gguf_writer_new();
    uint8_t *bufs[N_TYPES + 1];
    size_t sizes[N_TYPES + 1];
    char names[N_TYPES + 1][32];
    int64_t shapes[N_TYPES + 1][4];
    int dims[N_TYPES + 1];

    gguf_writer_set_str(w, "general.architecture", "test");
    for (int i = 0; i < N_TYPES; i++) {
        const struct dtype_info *ti = dtype_info(types[i]);
        dims[i] = 1 + i % 4;
        int64_t ne[4] = {ti->blck * (1 + i % 3), 3, 2, 1 + i % 2};
        memcpy(shapes[i], ne, sizeof(ne));
        int64_t rows = 1;
        for (int d = 1; d < dims[i]; d++)
            rows *= ne[d];
        sizes[i] = dtype_row_size(types[i], ne[0]) * (size_t)rows;
        bufs[i] = xmalloc(sizes[i]);
        fill_random(bufs[i], sizes[i], (uint64_t)i + 1);
        snprintf(names[i], sizeof(names[i]), "blk.%d.%s", i, ti->name);
        EXPECT_EQ_INT(
            gguf_writer_add_tensor(w, names[i], types[i], dims[i], ne, bufs[i], sizes[i], &m), 0);
    }
    /* An odd-sized f16 tensor, so the next offset needs padding. */
    int k = N_TYPES;
    dims[k] = 1;
    memcpy(shapes[k], (int64_t[]){3, 1, 1, 1}, sizeof(shapes[k]));
    sizes[k] = 6;
    bufs[k] = xmalloc(6);
    fill_random(bufs[k], 6, 99);
    snprintf(names[k], sizeof(names[k]), "odd");
    EXPECT_EQ_INT(gguf_writer_add_tensor(w, "odd", DTYPE_F16, 1, shapes[k], bufs[k], 6, &m), 0);

    /* The writer refuses what the reader would refuse. */
    EXPECT_EQ_INT(gguf_writer_add_tensor(w, "odd", DTYPE_F16, 1, shapes[k], bufs[k], 6, &m),
                  ERR_INVALID);
    EXPECT(strstr(m.text, "'odd'"));
    EXPECT_EQ_INT(gguf_writer_add_tensor(w, "q", DTYPE_Q8_0, 1, (int64_t[]){33}, bufs[0], 34, &m),
                  ERR_INVALID);
    EXPECT(strstr(m.text, "block"));
    EXPECT_EQ_INT(gguf_writer_add_tensor(w, "s", DTYPE_F32, 1, (int64_t[]){2}, bufs[0], 9, &m),
                  ERR_INVALID);
    EXPECT_EQ_INT(gguf_writer_add_tensor(w, "k", DTYPE_Q8_K, 1, (int64_t[]){256}, bufs[0], 292, &m),
                  ERR_UNSUPPORTED);
    EXPECT_EQ_INT(gguf_writer_add_tensor(w, "z", DTYPE_F32, 5, shapes[0], bufs[0], 4, &m),
                  ERR_INVALID);

    const char *path = tmp_path("tensors.gguf");
    EXPECT_EQ_INT(gguf_writer_write(w, path, &m), 0);
    gguf_writer_free(w);

    struct gguf_file *f = NULL;
    int rc = gguf_open(path, &f, &m);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", m.text);
        goto out;
    }
    EXPECT_EQ_INT(gguf_n_tensors(f), N_TYPES + 1);
    for (int i = 0; i <= N_TYPES; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        EXPECT(gguf_find_tensor(f, names[i]) == t);
        EXPECT(str_eq(t->name, names[i]));
        EXPECT_EQ_INT(t->type, i < N_TYPES ? types[i] : DTYPE_F16);
        EXPECT_EQ_INT(t->n_dims, dims[i]);
        for (int d = 0; d < 4; d++)
            EXPECT_EQ_INT(t->ne[d], d < dims[i] ? shapes[i][d] : 1);
        EXPECT_EQ_INT(t->size, sizes[i]);
        EXPECT(memcmp(t->data, bufs[i], sizes[i]) == 0);
        /* The mapping is page-aligned, so data is aligned in memory too. */
        EXPECT_EQ_INT((uintptr_t)t->data % 32, 0);
    }
    EXPECT(gguf_find_tensor(f, "blk.0") == NULL);
    gguf_close(f);
out:
    for (int i = 0; i <= N_TYPES; i++)
        free(bufs[i]);
    unlink(path);
}

/* A tokenizer-sized string array: every element reachable in O(1). */
TEST(writer_roundtrip_large_string_array)
{
    enum { N = 150000 };
    char **strs = xmalloc(N * sizeof(*strs));
    for (int i = 0; i < N; i++) {
        char tmp[32];
        snprintf(tmp, sizeof(tmp), "tok%d", i * 31);
        strs[i] = xstrdup(tmp);
    }
    struct err_msg m;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)strs, N);
    const char *path = tmp_path("vocab.gguf");
    EXPECT_EQ_INT(gguf_writer_write(w, path, &m), 0);
    gguf_writer_free(w);
    struct gguf_file *f = NULL;
    EXPECT_EQ_INT(gguf_open(path, &f, &m), 0);
    if (f) {
        uint64_t n = 0;
        EXPECT_EQ_INT(gguf_get_arr(f, "tokenizer.ggml.tokens", NULL, &n, NULL, &m), 0);
        EXPECT_EQ_INT(n, N);
        int bad = 0;
        for (int i = N - 1; i >= 0; i--)
            bad += !str_eq(gguf_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)i), strs[i]);
        EXPECT_EQ_INT(bad, 0);
        gguf_close(f);
    }
    for (int i = 0; i < N; i++)
        free(strs[i]);
    free(strs);
    unlink(path);
}

TEST(writer_rejects_other_alignment_and_bad_path)
{
    struct err_msg m;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 64);
    EXPECT_EQ_INT(gguf_writer_write(w, tmp_path("align.gguf"), &m), ERR_INVALID);
    EXPECT(strstr(m.text, "general.alignment"));
    gguf_writer_set_u32(w, "general.alignment", 32);
    EXPECT_EQ_INT(gguf_writer_write(w, "/nonexistent-dir/x.gguf", &m), -ENOENT);
    EXPECT(strstr(m.text, "/nonexistent-dir/x.gguf"));
    EXPECT_EQ_INT(gguf_writer_write(w, tmp_path("align.gguf"), &m), 0);
    gguf_writer_free(w);
    unlink(tmp_path("align.gguf"));
}

TEST(open_file_errors)
{
    struct gguf_file *f = NULL;
    struct err_msg m;
    EXPECT_EQ_INT(gguf_open("/nonexistent-dir/x.gguf", &f, &m), -ENOENT);
    EXPECT(f == NULL);
    EXPECT_EQ_INT(gguf_open("/", &f, &m), -EISDIR);
    const char *path = tmp_path("empty.gguf");
    FILE *fp = fopen(path, "wb");
    CHECK(fp);
    fclose(fp);
    EXPECT_EQ_INT(gguf_open(path, &f, &m), ERR_FORMAT);
    EXPECT(strstr(m.text, "too small"));
    unlink(path);
}

/* ---- validation rules over hostile buffers ---- */

TEST(valid_small_file_opens)
{
    struct gbuf b = {0};
    valid_file(&b);
    struct gguf_file *f;
    struct err_msg m;
    uint8_t *copy;
    int rc = open_prefix(&b, b.n, &f, &m, &copy);
    EXPECT_EQ_INT(rc, 0);
    if (!rc) {
        EXPECT(str_eq(gguf_arr_str(f, "tokenizer.ggml.tokens", 1), "bc"));
        EXPECT(str_eq(gguf_arr_str(f, "tokenizer.ggml.tokens", 2), ""));
        const struct gguf_tensor *t = gguf_find_tensor(f, "b");
        EXPECT(t && t->size == 68 && (const uint8_t *)t->data == copy + b.n - 68);
        gguf_close(f);
    } else {
        fprintf(stderr, "  %s\n", m.text);
    }
    free(copy);
    gb_free(&b);
}

TEST(every_truncation_fails_cleanly)
{
    struct gbuf b = {0};
    valid_file(&b);
    int wrong = 0;
    for (size_t n = 0; n < b.n; n++) {
        struct gguf_file *f = (struct gguf_file *)1;
        struct err_msg m;
        uint8_t *copy;
        int rc = open_prefix(&b, n, &f, &m, &copy);
        if (rc != ERR_FORMAT || f != NULL || strncmp(m.text, "gguf: ", 6) != 0) {
            if (wrong++ < 5) fprintf(stderr, "  prefix %zu: rc %d, message '%s'\n", n, rc, m.text);
            if (rc == 0) gguf_close(f);
        }
        free(copy);
    }
    EXPECT_EQ_INT(wrong, 0);
    /* Spot-check one message: cut inside the first key's name. */
    struct gbuf cut = {0};
    gb_header(&cut, 3, 0, 1);
    gb_u64(&cut, 20);
    gb_bytes(&cut, "general", 7);
    EXPECT_FAIL(&cut, ERR_FORMAT, "key #0: name length 20 runs past end of file (offset 24", NULL);
    gb_free(&cut);
    gb_free(&b);
}

TEST(bad_magic)
{
    struct gbuf b = {0};
    valid_file(&b);
    memcpy(b.p, "GGML", 4);
    EXPECT_FAIL(&b, ERR_FORMAT, "magic 'GGML'", NULL);
    gb_free(&b);
}

TEST(bad_version)
{
    struct gbuf b = {0};
    valid_file(&b);
    uint32_t v = 1;
    memcpy(b.p + 4, &v, 4);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "version 1", NULL);
    v = 4;
    memcpy(b.p + 4, &v, 4);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "version 4", NULL);
    v = 0x03000000;
    memcpy(b.p + 4, &v, 4);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "big-endian", NULL);
    gb_free(&b);
}

TEST(huge_counts)
{
    struct gbuf b = {0};
    valid_file(&b);
    uint64_t v = UINT64_MAX;
    memcpy(b.p + 16, &v, 8);
    EXPECT_FAIL(&b, ERR_FORMAT, "n_kv 18446744073709551615", NULL);
    v = 4;
    memcpy(b.p + 16, &v, 8);
    v = 1ULL << 40;
    memcpy(b.p + 8, &v, 8);
    EXPECT_FAIL(&b, ERR_FORMAT, "n_tensors 1099511627776", NULL);
    gb_free(&b);

    /* n_tensors small enough for the header check, too big for what is left
     * after the metadata. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 3, 1);
    gb_kv_str(&b, "k", "0123456789012345678901234567890123456789012345678901234567890123456789");
    gb_tensor(&b, "t", 1, (uint64_t[]){1}, DTYPE_F32, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "n_tensors 3", "after the metadata");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "general.name", "x");
    gb_key(&b, "big.array", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_UINT64);
    gb_u64(&b, UINT64_MAX / 4);
    gb_u64(&b, 1);
    EXPECT_FAIL(&b, ERR_FORMAT, "key #1 'big.array'", "count 4611686018427387903");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "tokenizer.ggml.tokens", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_STRING);
    gb_u64(&b, 1000);
    gb_str(&b, "a");
    EXPECT_FAIL(&b, ERR_FORMAT, "'tokenizer.ggml.tokens'", "count 1000");
    gb_free(&b);

    /* A count that fits but whose strings do not: names the element. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "tokenizer.ggml.tokens", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_STRING);
    gb_u64(&b, 3);
    gb_str(&b, "a");
    gb_u64(&b, 1000);
    gb_fill(&b, 40, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "'tokenizer.ggml.tokens'", "string #1 length 1000");
    gb_free(&b);
}

TEST(huge_string_lengths)
{
    struct gbuf b = {0};
    gb_header(&b, 3, 0, 4);
    gb_kv_str(&b, "a", "x");
    gb_kv_str(&b, "b", "x");
    gb_kv_str(&b, "c", "x");
    gb_key(&b, "general.name", GGUF_VTYPE_STRING);
    gb_u64(&b, UINT64_MAX);
    gb_fill(&b, 40, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "key #3 'general.name': string length 18446744073709551615",
                "runs past end of file");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 2);
    gb_kv_str(&b, "a", "x");
    gb_u64(&b, 1ULL << 62);
    gb_fill(&b, 40, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "key #1: name length 4611686018427387904", NULL);
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 1, 0);
    gb_u64(&b, 1000);
    gb_fill(&b, 40, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor #0: name length 1000", NULL);
    gb_free(&b);
}

TEST(bad_names)
{
    struct gbuf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "", "x");
    EXPECT_FAIL(&b, ERR_FORMAT, "key #0: name is empty", NULL);
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, 3);
    gb_bytes(&b, "a\0b", 3);
    gb_u32(&b, GGUF_VTYPE_UINT8);
    gb_u8(&b, 1);
    EXPECT_FAIL(&b, ERR_FORMAT, "key #0", "NUL");
    gb_free(&b);

    /* Control characters are escaped in messages. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "evil\x1b[2J", 99);
    gb_u8(&b, 1);
    EXPECT_FAIL(&b, ERR_FORMAT, "'evil\\x1b[2J'", "value type 99");
    gb_free(&b);

    b = (struct gbuf){0};
    one_tensor(&b, "", 1, (uint64_t[]){8}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor #0: name is empty", NULL);
    gb_free(&b);
}

TEST(bad_type_ids)
{
    struct gbuf b = {0};
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "ok", 1);
    gb_key(&b, "general.bad", 13);
    gb_u32(&b, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "key #1 'general.bad'", "value type 13");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "arr", GGUF_VTYPE_ARRAY);
    gb_u32(&b, 0xffffffffu);
    gb_u64(&b, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "'arr'", "element type 4294967295");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "nested", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_ARRAY);
    gb_u64(&b, 1);
    gb_u32(&b, GGUF_VTYPE_UINT8);
    gb_u64(&b, 0);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "'nested'", "arrays of arrays");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "flag", GGUF_VTYPE_BOOL);
    gb_u8(&b, 2);
    EXPECT_FAIL(&b, ERR_FORMAT, "'flag'", "bool value 2");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "flags", GGUF_VTYPE_ARRAY);
    gb_u32(&b, GGUF_VTYPE_BOOL);
    gb_u64(&b, 3);
    gb_bytes(&b, "\1\0\7", 3);
    EXPECT_FAIL(&b, ERR_FORMAT, "'flags'", "element #2 value 7");
    gb_free(&b);

    /* Tensor types: unknown id, and ggml types no kernel level runs (the
     * q5_0/q5_1 pair, the K-quants below q4_K, the i-quants, ternary and
     * mxfp4), each named with the tensor; then q8_k, activations only. */
    b = (struct gbuf){0};
    one_tensor(&b, "blk.0.ffn_up.weight", 1, (uint64_t[]){256}, 99, 0, 1024);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "tensor 'blk.0.ffn_up.weight'", "id 99");
    gb_free(&b);
    static const struct {
        uint32_t id;
        const char *name;
    } unsupported[] = {{3, "q4_1"},    {6, "q5_0"},   {7, "q5_1"},     {9, "q8_1"},
                       {10, "q2_k"},   {11, "q3_k"},  {16, "iq2_xxs"}, {19, "iq1_s"},
                       {20, "iq4_nl"}, {21, "iq3_s"}, {23, "iq4_xs"},  {29, "iq1_m"},
                       {34, "tq1_0"},  {35, "tq2_0"}, {39, "mxfp4"}};
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        char want[64];
        snprintf(want, sizeof(want), "tensor 'blk.1.attn_q.weight': type %s (id %u)",
                 unsupported[i].name, unsupported[i].id);
        b = (struct gbuf){0};
        one_tensor(&b, "blk.1.attn_q.weight", 2, (uint64_t[]){256, 2}, unsupported[i].id, 0, 1024);
        EXPECT_FAIL(&b, ERR_UNSUPPORTED, want, "not supported");
        gb_free(&b);
    }
    b = (struct gbuf){0};
    one_tensor(&b, "w", 1, (uint64_t[]){256}, DTYPE_Q8_K, 0, 1024);
    EXPECT_FAIL(&b, ERR_UNSUPPORTED, "tensor 'w'", "id 15");
    gb_free(&b);
}

TEST(bad_dims)
{
    struct gbuf b = {0};
    one_tensor(&b, "t", 0, (uint64_t[]){8}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "n_dims 0");
    gb_free(&b);
    b = (struct gbuf){0};
    one_tensor(&b, "t", 5, (uint64_t[]){8, 1, 1, 1}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "n_dims 5");
    gb_free(&b);
    b = (struct gbuf){0};
    one_tensor(&b, "t", 2, (uint64_t[]){8, 0}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "ne[1] is 0");
    gb_free(&b);
    b = (struct gbuf){0};
    one_tensor(&b, "t", 1, (uint64_t[]){1ULL << 63}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "ne[0] 9223372036854775808 is too large");
    gb_free(&b);
    b = (struct gbuf){0};
    one_tensor(&b, "t", 3, (uint64_t[]){1ULL << 32, 1ULL << 20, 1ULL << 20}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "element count overflows");
    gb_free(&b);
    /* Element count fits in int64, byte size does not. */
    b = (struct gbuf){0};
    one_tensor(&b, "t", 2, (uint64_t[]){1ULL << 32, 1ULL << 30}, DTYPE_F32, 0, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "size overflows");
    gb_free(&b);
    b = (struct gbuf){0};
    one_tensor(&b, "blk.3.attn_k.weight", 2, (uint64_t[]){48, 2}, DTYPE_Q8_0, 0, 128);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 'blk.3.attn_k.weight'",
                "ne[0] 48 is not a multiple of the q8_0 block size 32");
    gb_free(&b);
    b = (struct gbuf){0};
    one_tensor(&b, "t", 1, (uint64_t[]){128}, DTYPE_Q4_K, 0, 256);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "block size 256");
    gb_free(&b);
}

TEST(bad_offsets)
{
    struct gbuf b = {0};
    one_tensor(&b, "t", 1, (uint64_t[]){8}, DTYPE_F32, 16, 64);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "offset 16 is not a multiple of the alignment 32");
    gb_free(&b);

    b = (struct gbuf){0};
    one_tensor(&b, "blk.0.attn_q.weight", 1, (uint64_t[]){8}, DTYPE_F32, 0, 31);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 'blk.0.attn_q.weight': data [offset 0, 32 bytes]",
                "runs past end of file");
    gb_free(&b);

    b = (struct gbuf){0};
    one_tensor(&b, "t", 1, (uint64_t[]){8}, DTYPE_F32, UINT64_MAX - 31, 64);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 't'", "runs past end of file");
    gb_free(&b);

    /* Overlap: b starts inside a. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, (uint64_t[]){16}, DTYPE_F32, 32);
    gb_tensor(&b, "b", 1, (uint64_t[]){8}, DTYPE_F32, 64);
    gb_pad(&b, 32);
    gb_fill(&b, 128, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 'b': data [offset 64, 32 bytes] overlaps tensor 'a'", NULL);
    gb_free(&b);

    /* Same offset. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, (uint64_t[]){8}, DTYPE_F32, 0);
    gb_tensor(&b, "b", 1, (uint64_t[]){8}, DTYPE_F32, 0);
    gb_pad(&b, 32);
    gb_fill(&b, 64, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "overlaps", NULL);
    gb_free(&b);

    /* Adjacent tensors in reverse offset order are fine. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, (uint64_t[]){8}, DTYPE_F32, 32);
    gb_tensor(&b, "b", 1, (uint64_t[]){8}, DTYPE_F32, 0);
    gb_pad(&b, 32);
    gb_fill(&b, 64, 0);
    struct gguf_file *f;
    struct err_msg m;
    uint8_t *copy;
    EXPECT_EQ_INT(open_prefix(&b, b.n, &f, &m, &copy), 0);
    if (f) gguf_close(f);
    free(copy);
    gb_free(&b);
}

TEST(duplicate_names)
{
    struct gbuf b = {0};
    gb_header(&b, 3, 0, 3);
    gb_kv_str(&b, "general.name", "a");
    gb_kv_u32(&b, "x", 1);
    gb_kv_str(&b, "general.name", "b");
    EXPECT_FAIL(&b, ERR_FORMAT, "key #2 'general.name' duplicates key #0", NULL);
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "w", 1, (uint64_t[]){8}, DTYPE_F32, 0);
    gb_tensor(&b, "w", 1, (uint64_t[]){8}, DTYPE_F32, 32);
    gb_pad(&b, 32);
    gb_fill(&b, 64, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor #1 'w' duplicates tensor #0", NULL);
    gb_free(&b);
}

TEST(alignment_key)
{
    struct gbuf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.alignment", GGUF_VTYPE_UINT64);
    gb_u64(&b, 32);
    EXPECT_FAIL(&b, ERR_FORMAT, "'general.alignment'", "type u64, expected u32");
    gb_free(&b);

    static const uint32_t bad[] = {0, 48, 0xffffffffu};
    for (int i = 0; i < 3; i++) {
        b = (struct gbuf){0};
        gb_header(&b, 3, 0, 1);
        gb_kv_u32(&b, "general.alignment", bad[i]);
        char want[64];
        snprintf(want, sizeof(want), "value %u is not a power of two", bad[i]);
        EXPECT_FAIL(&b, ERR_FORMAT, "'general.alignment'", want);
        gb_free(&b);
    }

    /* Alignment 64: data section and offsets follow it. */
    b = (struct gbuf){0};
    gb_header(&b, 3, 2, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_tensor(&b, "a", 1, (uint64_t[]){4}, DTYPE_F32, 0);
    gb_tensor(&b, "b", 1, (uint64_t[]){4}, DTYPE_F32, 32);
    gb_pad(&b, 64);
    gb_fill(&b, 80, 0);
    EXPECT_FAIL(&b, ERR_FORMAT, "tensor 'b'", "alignment 64");
    gb_free(&b);

    b = (struct gbuf){0};
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    gb_tensor(&b, "a", 1, (uint64_t[]){4}, DTYPE_F32, 64);
    gb_pad(&b, 64);
    size_t data_start = b.n;
    gb_fill(&b, 80, 0);
    struct gguf_file *f;
    struct err_msg m;
    uint8_t *copy;
    EXPECT_EQ_INT(open_prefix(&b, b.n, &f, &m, &copy), 0);
    if (f) {
        EXPECT_EQ_INT(gguf_alignment(f), 64);
        EXPECT((const uint8_t *)gguf_tensor(f, 0)->data == copy + data_start + 64);
        gguf_close(f);
    }
    free(copy);
    gb_free(&b);
}

/* Zero tensors: the file may end right after the metadata, unpadded. */
TEST(metadata_only_file)
{
    struct gbuf b = {0};
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.name", "abc");
    struct gguf_file *f;
    struct err_msg m;
    uint8_t *copy;
    EXPECT_EQ_INT(open_prefix(&b, b.n, &f, &m, &copy), 0);
    if (f) {
        EXPECT_EQ_INT(gguf_n_kv(f), 1);
        EXPECT_EQ_INT(gguf_file_size(f), b.n);
        gguf_close(f);
    }
    free(copy);
    gb_free(&b);
}

/* Random single-byte corruption of a valid file: must never crash, and any
 * success must still give consistent tensors. Deterministic seed. */
TEST(random_corruption_never_crashes)
{
    struct gbuf b = {0};
    valid_file(&b);
    uint64_t x = 12345;
    int ok = 0, failed = 0;
    for (int iter = 0; iter < 20000; iter++) {
        uint8_t *copy = xmalloc(b.n);
        memcpy(copy, b.p, b.n);
        for (int k = 0; k < 1 + iter % 3; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            copy[(x >> 8) % b.n] = (uint8_t)(x >> 40);
        }
        struct gguf_file *f = NULL;
        struct err_msg m;
        int rc = gguf_open_buffer(copy, b.n, &f, &m);
        if (rc == 0) {
            ok++;
            for (int64_t i = 0; i < gguf_n_tensors(f); i++) {
                const struct gguf_tensor *t = gguf_tensor(f, i);
                const uint8_t *d = t->data;
                if (!(d >= copy && d + t->size <= copy + b.n)) failed++;
            }
            gguf_close(f);
        } else if (rc != ERR_FORMAT && rc != ERR_UNSUPPORTED) {
            failed++;
        }
        free(copy);
    }
    EXPECT_EQ_INT(failed, 0);
    EXPECT(ok > 0);
    gb_free(&b);
}

TEST(cleanup_tmp_dir)
{
    if (tmp_dir[0]) EXPECT_EQ_INT(rmdir(tmp_dir), 0);
}

TEST_MAIN()
