/*
 * dispatch.c - picks one ISA level at start-up and routes every dispatched
 * kernel through its operation table; owns the thread-local scratch.
 *
 *   kern_init --CPUID--> highest level --INFERD_ISA (may only lower it)--> cur
 *   kern_matmul(...) -> cur->matmul(...)
 *
 * Levels: scalar (kernels_ref.c), avx2 (needs AVX2 + FMA + F16C), avxvnni
 * (avx2 + AVX-VNNI; the avx2 table with the int8 kernels that gain from
 * 256-bit vpdpbusd replaced, kernels_avxvnni.c; on AVX-512 VNNI CPUs
 * without AVX-VNNI the same kernels in their EVEX encoding, so the level can
 * be forced and tested there), avx512 (needs AVX-512 F/BW/VL/DQ + VNNI +
 * BF16). A CPU with AVX-512 F but without VNNI or BF16
 * runs avxvnni or avx2. __builtin_cpu_supports also checks that the OS saves
 * the wide register state (XGETBV), so a level we pick runs.
 *
 * Thread safety: kern_init runs once (pthread_once); the current table is an
 * atomic pointer, so kern_set_isa from a test is seen by later calls. Entry
 * points initialise lazily, so calling a kernel before kern_init is safe.
 */
#include "kernels/kernels.h"

#include "base/check.h"
#include "base/log.h"
#include "kernels/kernels_impl.h"
#include "kernels/vecmath.h"
#include "kernels/quants.h"

#include <errno.h>
#include <stdio.h>
#include <cpuid.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const isa_names[KERN_ISA_COUNT] = {"scalar", "avx2", "avxvnni", "avx512"};

static struct kern__ops ops_avxvnni; /* built by detect() */

static const struct kern__ops *const isa_ops[KERN_ISA_COUNT] = {
    &kern__ops_scalar,
    &kern__ops_avx2,
    &ops_avxvnni,
    &kern__ops_avx512,
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static enum kern_isa isa_max = KERN_ISA_SCALAR; /* set once by detect() */
static int isa_cur = -1;                        /* atomic; -1 before init */
static char env_error[160];                     /* set once by detect(), or empty */

/* The avx2 table with the delta's set members in their place. Without the
 * VEX form (vex false) the level's 256-bit vpdpbusd kernels run in their
 * AVX-512 VNNI encoding: a CPU without either never selects the level. */
static void build_avxvnni(bool vex)
{
    const struct kern__ops *d = &kern__ops_avxvnni_delta;
    struct kern__ops o = kern__ops_avx2;
#define OVERRIDE(f)                                                                                \
    if (d->f) o.f = d->f
    OVERRIDE(matmul);
    OVERRIDE(matmul_packed);
    OVERRIDE(kv_dot);
    OVERRIDE(kv_accum);
    OVERRIDE(kv_dot_heads);
    OVERRIDE(kv_accum_heads);
    OVERRIDE(attend_heads);
    OVERRIDE(kv_store);
    OVERRIDE(dot_f32);
    OVERRIDE(sum_sq_f32);
    OVERRIDE(packed);
#undef OVERRIDE
    if (!vex) o.matmul_packed = kern__matmul_packed_avxvnni_evex;
    ops_avxvnni = o;
}

static bool has_avxvnni_vex(void)
{
    unsigned a, b, c, d; /* CPUID leaf 7, sub-leaf 1, EAX bit 4 */
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

static enum kern_isa cpu_level(void)
{
    __builtin_cpu_init();
    /* f16c straight from CPUID leaf 1: not every compiler's
     * __builtin_cpu_supports knows the name. */
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c))
        return KERN_ISA_SCALAR;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bf16"))
        return KERN_ISA_AVX512;
    if (has_avxvnni_vex()) return KERN_ISA_AVXVNNI; /* VEX-encoded vpdpbusd */
    return KERN_ISA_AVX2;
}

int kern_isa_parse(const char *name)
{
    for (int i = 0; i < KERN_ISA_COUNT; i++)
        if (name && strcasecmp(name, isa_names[i]) == 0) return i;
    return -1;
}

/* "scalar, avx2, ..." up to and including max */
static void level_list(enum kern_isa max, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i <= (int)max && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", isa_names[i]);
}

static void detect(void)
{
    isa_max = cpu_level();
    build_avxvnni(has_avxvnni_vex());
    enum kern_isa pick = isa_max;
    const char *env = getenv("INFERD_ISA");
    if (env && *env) {
        int want = kern_isa_parse(env);
        char have[64];
        level_list(isa_max, have, sizeof(have));
        if (want < 0)
            snprintf(env_error, sizeof(env_error),
                     "INFERD_ISA='%.32s' names no level (scalar, avx2, avxvnni, avx512)", env);
        else if (want > (int)isa_max)
            snprintf(env_error, sizeof(env_error), "INFERD_ISA='%.32s': this CPU supports %s only",
                     env, have);
        else
            pick = (enum kern_isa)want;
    }
    __atomic_store_n(&isa_cur, (int)pick, __ATOMIC_RELEASE);
}

const char *kern_isa_env_error(void)
{
    kern_init();
    return env_error[0] ? env_error : NULL;
}

void kern_init(void)
{
    pthread_once(&init_once, detect);
}

static const struct kern__ops *ops(void)
{
    int i = __atomic_load_n(&isa_cur, __ATOMIC_ACQUIRE);
    if (__builtin_expect(i < 0, 0)) {
        kern_init();
        i = __atomic_load_n(&isa_cur, __ATOMIC_ACQUIRE);
    }
    return isa_ops[i];
}

enum kern_isa kern_isa(void)
{
    kern_init();
    return (enum kern_isa)__atomic_load_n(&isa_cur, __ATOMIC_ACQUIRE);
}

enum kern_isa kern_isa_max(void)
{
    kern_init();
    return isa_max;
}

const char *kern_isa_name(enum kern_isa isa)
{
    return (unsigned)isa < KERN_ISA_COUNT ? isa_names[isa] : "unknown";
}

int kern_set_isa(enum kern_isa isa)
{
    kern_init();
    if ((unsigned)isa >= KERN_ISA_COUNT || isa > isa_max) return -ENOTSUP;
    __atomic_store_n(&isa_cur, (int)isa, __ATOMIC_RELEASE);
    return 0;
}

/* ---- dispatched entry points ---- */

void kern_matmul(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                 const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy)
{
    kern__matmul_check(wt, k, r0, r1, n_tok);
    if (r0 == r1 || n_tok == 0) return;
    ops()->matmul(wt, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
}

size_t kern_pack_size(enum dtype wt, int rows, int k)
{
    CHECK(rows >= 0 && k > 0);
    if ((unsigned)wt >= 64 || !(ops()->packed & KERN__BIT(wt))) return 0;
    return kern_packed_bytes(wt, rows, k);
}

void kern_matmul_packed(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                        const void *xq, size_t x_row_bytes, const void *xs, size_t xs_row_bytes,
                        int n_tok, float *y, int ldy)
{
    kern__matmul_check(wt, k, r0, r1, n_tok);
    CHECK(kern_packed_bytes(wt, rows, k) > 0 && r1 <= rows && r0 % Q8X16_ROWS == 0);
    if (r0 == r1 || n_tok == 0) return;
    ops()->matmul_packed(wt, P, rows, k, r0, r1, xq, x_row_bytes, xs, xs_row_bytes, n_tok, y, ldy);
}

/* ---- attention over the KV cache ----
 *
 * Over a bf16 cache the queries and the softmax weights are rounded to bf16
 * here, before any level sees them, so that every product is of two bf16
 * values - exact in f32 - and each level's f32 fma chain gives the bits of
 * the AVX-512 level's vdpbf16ps chain (kernels.h). */

/* rows x n floats of x (row stride ldx) rounded to bf16 into the slot, row
 * stride n; returns them */
static const float *round_bf16_rows(enum kern__slot slot, const float *x, size_t ldx, int rows,
                                    int n)
{
    float *y = kern__scratch(slot, sizeof(float) * (size_t)rows * (size_t)n);
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < n; i++)
            y[(size_t)r * n + i] = kern__round_bf16(x[(size_t)r * ldx + i]);
    return y;
}

static void kv_dot_heads_op(enum dtype kv, const void *kt, int ld, int n_rows, const float *q,
                            int ldq, int n_heads, int d, float *out, int ldo)
{
    if (ops()->kv_dot_heads) {
        ops()->kv_dot_heads(kv, kt, ld, n_rows, q, ldq, n_heads, d, out, ldo);
        return;
    }
    for (int h = 0; h < n_heads; h++)
        ops()->kv_dot(kv, kt, ld, n_rows, q + (size_t)h * ldq, d, out + (size_t)h * ldo);
}

static void kv_accum_heads_op(enum dtype kv, const void *v, size_t stride, int n_rows,
                              const float *w, int ldw, int n_heads, int d, float *out, int ldo)
{
    if (ops()->kv_accum_heads) {
        ops()->kv_accum_heads(kv, v, stride, n_rows, w, ldw, n_heads, d, out, ldo);
        return;
    }
    for (int h = 0; h < n_heads; h++)
        ops()->kv_accum(kv, v, stride, n_rows, w + (size_t)h * ldw, d, out + (size_t)h * ldo);
}

void kern_kv_dot(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int d,
                 float *out)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n_rows >= 0 && n_rows <= ld && d >= 0);
    if (n_rows == 0) return;
    if (kv == DTYPE_BF16) q = round_bf16_rows(KERN__SLOT_KVQ, q, 0, 1, d);
    ops()->kv_dot(kv, kt, ld, n_rows, q, d, out);
}

void kern_kv_accum(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w, int d,
                   float *out)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n_rows >= 0 && d >= 0);
    if (n_rows == 0 || d == 0) return;
    if (kv == DTYPE_BF16) w = round_bf16_rows(KERN__SLOT_KVW, w, 0, 1, n_rows);
    ops()->kv_accum(kv, v, stride, n_rows, w, d, out);
}

void kern_kv_dot_heads(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int ldq,
                       int n_heads, int d, float *out, int ldo)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n_rows >= 0 && n_rows <= ld && d >= 0 && n_heads >= 0);
    if (n_rows == 0 || n_heads == 0) return;
    if (kv == DTYPE_BF16) {
        q = round_bf16_rows(KERN__SLOT_KVQ, q, (size_t)ldq, n_heads, d);
        ldq = d;
    }
    kv_dot_heads_op(kv, kt, ld, n_rows, q, ldq, n_heads, d, out, ldo);
}

void kern_kv_accum_heads(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w,
                         int ldw, int n_heads, int d, float *out, int ldo)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n_rows >= 0 && d >= 0 && n_heads >= 0);
    if (n_rows == 0 || d == 0 || n_heads == 0) return;
    if (kv == DTYPE_BF16) {
        w = round_bf16_rows(KERN__SLOT_KVW, w, (size_t)ldw, n_heads, n_rows);
        ldw = n_rows;
    }
    kv_accum_heads_op(kv, v, stride, n_rows, w, ldw, n_heads, d, out, ldo);
}

void kern_attend_heads(enum dtype kv, const void *k, const void *v, size_t block_stride,
                       const int32_t *ids, int ld, int n, const float *q, int ldq, int n_heads,
                       int d, float scale, float *scores, int lds, float *out, int ldo)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n > 0 && ld > 0 && lds >= n && d > 0 && n_heads > 0 && n_heads <= KERN_ATTEND_MAX_HEADS &&
          scale > 0);
    if (ops()->attend_heads) { /* rounds q and its weights itself */
        ops()->attend_heads(kv, k, v, block_stride, ids, ld, n, q, ldq, n_heads, d, scale, scores,
                            lds, out, ldo);
        return;
    }
    if (kv == DTYPE_BF16) {
        q = round_bf16_rows(KERN__SLOT_KVQ, q, (size_t)ldq, n_heads, d);
        ldq = d;
    }
    const size_t row = (size_t)d * dtype_info(kv)->type_size;
    for (int p0 = 0, i = 0; p0 < n; p0 += ld, i++)
        kv_dot_heads_op(kv, (const char *)k + (size_t)ids[i] * block_stride, ld,
                        n - p0 < ld ? n - p0 : ld, q, ldq, n_heads, d, scores + p0, lds);
    float total[KERN_ATTEND_MAX_HEADS];
    for (int h = 0; h < n_heads; h++) {
        float *sh = scores + (size_t)h * lds;
        total[h] = kern_softmax_exp(sh, n, scale);
        if (kv == DTYPE_BF16)
            for (int j = 0; j < n; j++)
                sh[j] = kern__round_bf16(sh[j]);
        memset(out + (size_t)h * ldo, 0, sizeof(float) * (size_t)d);
    }
    for (int p0 = 0, i = 0; p0 < n; p0 += ld, i++)
        kv_accum_heads_op(kv, (const char *)v + (size_t)ids[i] * block_stride, row,
                          n - p0 < ld ? n - p0 : ld, scores + p0, lds, n_heads, d, out, ldo);
    for (int h = 0; h < n_heads; h++) {
        const float inv = 1.0f / total[h];
        for (int i = 0; i < d; i++)
            out[(size_t)h * ldo + i] *= inv;
    }
}

void kern_kv_store(enum dtype kv, const float *x, void *y, int n)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n >= 0);
    ops()->kv_store(kv, x, y, n);
}

void kern_kv_store_col(enum dtype kv, const float *x, void *kt, int ld, int j, int n)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    CHECK(n >= 0 && j >= 0 && j < ld);
    /* converted as a row (the same bits), then spread down the column */
    const size_t es = kv == DTYPE_F32 ? 4 : 2;
    uint8_t conv[64 * 4];
    for (int e0 = 0; e0 < n; e0 += 64) {
        int m = n - e0 < 64 ? n - e0 : 64;
        ops()->kv_store(kv, x + e0, conv, m);
        uint8_t *col = (uint8_t *)kt + ((size_t)e0 * (size_t)ld + (size_t)j) * es;
        for (int e = 0; e < m; e++)
            memcpy(col + (size_t)e * (size_t)ld * es, conv + (size_t)e * es, es);
    }
}

float kern_dot_f32(const float *a, const float *b, int n)
{
    CHECK(n >= 0);
    return ops()->dot_f32(a, b, n);
}

float kern_sum_sq_f32(const float *x, int n)
{
    CHECK(n >= 0);
    return ops()->sum_sq_f32(x, n);
}

/* ---- thread-local scratch ---- */

struct scratch {
    void *buf[KERN__SLOT_COUNT];  /* 64-byte aligned, or NULL */
    size_t cap[KERN__SLOT_COUNT]; /* bytes usable at buf[i] */
};

static __thread struct scratch tls_scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *p)
{
    struct scratch *s = p;
    for (int i = 0; i < KERN__SLOT_COUNT; i++) {
        free(s->buf[i]);
        s->buf[i] = NULL;
        s->cap[i] = 0;
    }
}

static void scratch_key_init(void)
{
    CHECK(pthread_key_create(&scratch_key, scratch_free) == 0);
}

void *kern__scratch(enum kern__slot slot, size_t bytes)
{
    struct scratch *s = &tls_scratch;
    if (__builtin_expect(bytes <= s->cap[slot], 1)) return s->buf[slot];
    pthread_once(&scratch_once, scratch_key_init);
    pthread_setspecific(scratch_key, s);
    free(s->buf[slot]);
    /* headroom so a slowly growing batch does not reallocate every call */
    size_t cap = (bytes + bytes / 4 + 4095) & ~(size_t)4095;
    s->buf[slot] = xaligned_alloc(cap);
    s->cap[slot] = cap;
    return s->buf[slot];
}
