/*
 * kernels_impl.h - what the kernel files share inside src/kernels/: the
 * per-ISA operation table that dispatch.c selects from, thread-local scratch,
 * exact scalar conversions, and the canonical per-element arithmetic.
 *
 * THE CANONICAL ARITHMETIC. Every ISA level computes each output element
 * with exactly the same sequence of IEEE operations, so results are bitwise
 * equal across levels (not only across tilings, which is what kernels.h
 * demands), with one documented exception, bf16 weights at the AVX-512 level
 * (vdpbf16ps, see kernels_avx512.c):
 *
 *  - quantized weights (q8_0, q4_0 with q8_0 activations; q4_K, q5_K, q6_K
 *    with q8_K activations): each block's integer dot product is computed
 *    exactly (int32; any instruction sequence gives the same integer), then
 *    one float chain per element in block order:
 *      q8_0, q4_0:  acc = fma((float)isum_b, dw_b * dx_b, acc)
 *      q6_K:        acc = fma((float)A_b, dw_b * dx_b, acc)
 *      q4_K, q5_K:  acc = fma((float)A_b, dw_b * dx_b, acc);
 *                   acc = fma((float)-B_b, dmin_b * dx_b, acc)
 *    where for q4_K, q5_K  A = sum_j sc_j * sum_{i in j} q_i x_i,  B = sum_j m_j * sum_{i in j} x_i
 *    and for q6_K    A = sum_j sc_j * sum_{i in j} q_i x_i - 32 * sum_j sc_j * bsums_j
 *    (q_i the unsigned quants). acc starts at +0.
 *  - float weights (f32, f16, and bf16 below AVX-512; activations f32): 16
 *    lanes, lane l = fma(w[i], x[i], lane l) for i = l, l + 16, ... over k
 *    rounded up to 16 with zeros; then the fixed tree kern__tree16.
 *  - kern_dot_f32, kern_sum_sq_f32: the same 16-lane scheme.
 *  - kern_kv_dot (K panel): four chains over the dimensions, chain r taking
 *    e = r, r + 4, r + 8, ... in order, c_r = fma(k[e], q[e], c_r) from +0;
 *    then (c_0 + c_1) + (c_2 + c_3). Rows sit in vector lanes, so no lane
 *    reduction is needed, and four chains per head keep the FMA units busy.
 *  - kern_kv_accum: out[i] = fma(w[j], v[j][i], out[i]) for j in order.
 *
 * The scalar level uses fmaf(), which is exact (correctly rounded) wherever
 * it runs, so it matches the hardware FMA of the SIMD levels bit for bit.
 */
#ifndef INFERD_KERNELS_IMPL_H
#define INFERD_KERNELS_IMPL_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One ISA level's implementations of the dispatched operations. The
 * signatures are kernels.h's. */
struct kern__ops {
    /* kern_matmul, arguments already checked, r0 < r1, n_tok > 0 */
    void (*matmul)(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                   const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy);
    /* kern_matmul_packed, arguments already checked, r0 < r1, n_tok > 0 */
    void (*matmul_packed)(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                          const void *xq, size_t x_row_bytes, const void *xs, size_t xs_row_bytes,
                          int n_tok, float *y, int ldy);
    /* kern_kv_dot, 0 < n_rows <= ld */
    void (*kv_dot)(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int d,
                   float *out);
    /* kern_kv_accum, n_rows > 0, d > 0 */
    void (*kv_accum)(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w, int d,
                     float *out);
    /* kern_kv_dot_heads, n_rows > 0, n_heads > 0; NULL: one kv_dot per head */
    void (*kv_dot_heads)(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int ldq,
                         int n_heads, int d, float *out, int ldo);
    /* kern_kv_accum_heads, n_rows > 0, n_heads > 0, d > 0; NULL: one kv_accum per head */
    void (*kv_accum_heads)(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w,
                           int ldw, int n_heads, int d, float *out, int ldo);
    /* kern_attend_heads, arguments checked, n > 0; NULL: the composition.
     * Over a bf16 cache q arrives as given: the op rounds it (kernels.h). */
    void (*attend_heads)(enum dtype kv, const void *k, const void *v, size_t block_stride,
                         const int32_t *ids, int ld, int n, const float *q, int ldq, int n_heads,
                         int d, float scale, float *scores, int lds, float *out, int ldo);
    void (*kv_store)(enum dtype kv, const float *x, void *y, int n); /* kern_kv_store */
    float (*dot_f32)(const float *a, const float *b, int n);         /* kern_dot_f32 */
    float (*sum_sq_f32)(const float *x, int n);                      /* kern_sum_sq_f32 */
    /* weight types whose packed matmul this level runs fast, KERN__BIT(t)
     * each: kern_pack_size is nonzero for these only (matmul_packed takes
     * every packed layout, the others through kern__matmul_packed_ref) */
    uint64_t packed;
};

#define KERN__BIT(t) (UINT64_C(1) << (t))

extern const struct kern__ops kern__ops_scalar;
extern const struct kern__ops kern__ops_avx2;
extern const struct kern__ops kern__ops_avx512;
/* The avxvnni level is the avx2 level with these members replaced (those
 * that are set: non-NULL pointers, a nonzero packed mask); dispatch.c
 * builds its table at start-up. */
extern const struct kern__ops kern__ops_avxvnni_delta;

/* Thread-local scratch, one buffer per slot, 64-byte aligned, grown (never
 * shrunk) on demand: after warm-up the hot path allocates nothing. Contents
 * are undefined on return. Freed when the thread exits. */
enum kern__slot {
    KERN__SLOT_PREP,  /* per-call activation side data (scales, sums; f32 copies) */
    KERN__SLOT_PANEL, /* repacked weight panel; KV blocks as f32 (kernels_avx2.c) */
    KERN__SLOT_ACC,   /* float accumulators carried across panel or column chunks */
    KERN__SLOT_KVQ,   /* bf16 KV: queries rounded to bf16 (dispatch.c, attention ops) */
    KERN__SLOT_KVW,   /* bf16 KV: attention weights rounded to bf16 (dispatch.c) */
    KERN__SLOT_KVP,   /* bf16 KV: weights packed as bf16 pairs (kernels_avx512.c) */
    KERN__SLOT_COUNT,
};
void *kern__scratch(enum kern__slot slot, size_t bytes);

/* ---- exact scalar conversions (kernels.h documents the rounding) ---- */

static inline uint32_t kern__f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float kern__u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Same bits as vcvtph2ps: exact; a signalling NaN comes back quiet. */
static inline float kern__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return kern__u2f(sign | 0x7f800000 | mant << 13 | (mant ? 0x400000 : 0));
    if (exp != 0) return kern__u2f(sign | (exp + 112) << 23 | mant << 13);
    if (mant == 0) return kern__u2f(sign);
    /* subnormal: normalize; the value is mant * 2^-24 */
    uint32_t e = 113;
    while (!(mant & 0x400)) {
        mant <<= 1;
        e--;
    }
    return kern__u2f(sign | e << 23 | (mant & 0x3ff) << 13);
}

/* Same bits as vcvtps2ph with round-to-nearest-even: NaNs come back quiet
 * with the top 9 payload bits kept; overflow gives infinity. */
static inline uint16_t kern__f32_to_f16(float f)
{
    uint32_t u = kern__f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    u &= 0x7fffffff;
    if (u > 0x7f800000) return sign | 0x7e00 | (uint16_t)((u >> 13) & 0x3ff);
    if (u >= 0x477ff000) return sign | 0x7c00; /* >= 65520 rounds to infinity */
    if (u >= 0x38800000) {                     /* normal in f16 */
        uint32_t r = u - 0x38000000;           /* rebias the exponent: 127 -> 15 */
        uint32_t h = r >> 13, rem = r & 0x1fff;
        if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
        return sign | (uint16_t)h;
    }
    if (u < 0x33000000) return sign; /* at most 2^-25: rounds to zero */
    uint32_t e = u >> 23, m = (u & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - e; /* value in units of 2^-24 is m >> shift */
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return sign | (uint16_t)h;
}

static inline float kern__bf16_to_f32(uint16_t h)
{
    return kern__u2f((uint32_t)h << 16);
}

/* Round to nearest even; a NaN stays a (quiet) NaN. */
static inline uint16_t kern__f32_to_bf16(float f)
{
    uint32_t u = kern__f2u(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* The bf16 value nearest f (ties to even) as a float; a subnormal becomes
 * a zero of its sign, a NaN a quiet NaN: what vcvtneps2bf16 gives. Queries
 * and attention weights over a bf16 KV cache go through it (kernels.h). */
static inline float kern__round_bf16(float f)
{
    uint32_t u = kern__f2u(f);
    if ((u & 0x7f800000) == 0) return kern__u2f(u & 0x80000000);
    return kern__bf16_to_f32(kern__f32_to_bf16(f));
}

/* The canonical 16-lane reduction: halves folded onto each other. */
static inline float kern__tree16(const float l[16])
{
    float a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)
        a[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++)
        b[i] = a[i] + a[i + 4];
    for (int i = 0; i < 2; i++)
        c[i] = b[i] + b[i + 2];
    return c[0] + c[1];
}

/* Tokens per block whose activations take about `budget` bytes, a multiple
 * of `multiple` (or all n_tok). Quantized kernels read one activation byte
 * per 16-32 multiply-adds and take blocks as large as the repack cost wants;
 * float tiles read one f32 per 4 FMAs, so their activations must stay in L2
 * (1 MiB on Zen 4, with the weight rows): 2 MiB float blocks ran from L3 at
 * ~50 % of the FMA peak, 256 KiB at ~75 %. */
static inline int kern__token_block(size_t x_row_bytes, int n_tok, int multiple, size_t budget)
{
    size_t tb = budget / (x_row_bytes ? x_row_bytes : 1);
    if (tb < (size_t)multiple) tb = (size_t)multiple;
    tb -= tb % (size_t)multiple;
    return tb >= (size_t)n_tok ? n_tok : (int)tb;
}

/* kern_matmul_packed at the AVX-512 level (packed_avx512.c): every packed
 * layout, the types without a kernel there through kern__matmul_packed_ref. */
void kern__matmul_packed_avx512(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                                const void *xq, size_t xrb, const void *xs, size_t xsrb, int n_tok,
                                float *y, int ldy);

/* AVX-512 activation quantizers (quant_act_avx512.c), bit-identical to the
 * reference; kern_quantize_act calls them at that level. */
void kern__quantize_q8_0_avx512(const float *x, void *out, int k);
void kern__quantize_q8_K_avx512(const float *x, void *out, int k);
/* kern_act_side for q8_0 rows at the AVX-512 level (integer sums: exact). */
void kern__act_side_q8_0_avx512(const void *xq, int k, void *side);

/* Scalar reference pieces the SIMD files fall back to for odd cases. */
void kern__matmul_ref(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                      const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy);

void kern__matmul_packed_ref(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                             const void *xq, size_t x_row_bytes, const void *xs,
                             size_t xs_row_bytes, int n_tok, float *y, int ldy);

/* The packed matmul with 256-bit vectors (packed256.h), one per encoding:
 * avx2 (vpmaddubsw + vpmaddwd), avxvnni (VEX vpdpbusd) and avxvnni_evex
 * (the same on AVX-512 VNNI CPUs without AVX-VNNI). Same signature as
 * struct kern__ops's matmul_packed. */
#define KERN__PACKED256_TYPES                                                                      \
    (KERN__BIT(DTYPE_Q8_0) | KERN__BIT(DTYPE_Q4_0) | KERN__BIT(DTYPE_Q4_K) |                       \
     KERN__BIT(DTYPE_Q5_K) | KERN__BIT(DTYPE_Q6_K))
void kern__matmul_packed_avx2(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                              const void *xq, size_t x_row_bytes, const void *xs,
                              size_t xs_row_bytes, int n_tok, float *y, int ldy);
void kern__matmul_packed_avxvnni(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                                 const void *xq, size_t x_row_bytes, const void *xs,
                                 size_t xs_row_bytes, int n_tok, float *y, int ldy);
void kern__matmul_packed_avxvnni_evex(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                                      const void *xq, size_t x_row_bytes, const void *xs,
                                      size_t xs_row_bytes, int n_tok, float *y, int ldy);

/* Checks kern_matmul's arguments (internal invariants: abort on violation). */
void kern__matmul_check(enum dtype wt, int k, int r0, int r1, int n_tok);

#endif
