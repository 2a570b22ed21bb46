/*
 * vecmath_avx512.c - AVX-512 bodies of vecmath.h; tails run the same vector
 * code under a mask, so every element takes one path.
 */
#include "kernels/vecmath.h"

#include <immintrin.h>
#include <math.h>

static inline __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(x, _mm512_set1_ps(88.7f));
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_set1_ps(0.0013888889f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.008333334f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.041666668f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.16666667f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    p = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    return _mm512_mask_mov_ps(p, under, _mm512_setzero_ps());
}

/*
 * exp16 of four vectors of y <= 0 (no NaN), in two halves so that a loop
 * can overlap the polynomial of one group with the argument reduction of
 * the next.
 * Same bits as exp16, for every such y (checked exhaustively):
 * min(y, 88.7) = y; y < -87.3 and max(y, -87.3) are an unsigned compare
 * and min of the bits; lanes below -87.3 get n = -1000, so p stays finite
 * and positive and p * 2^n underflows to +0, exp16's zero; elsewhere
 * p * 2^n is normal, so vscalefps equals adding n to the exponent field.
 * The loops are unrolled at every -O level, to keep f and n in registers.
 */
static inline __attribute__((always_inline)) void
exp64_reduce(const float *x, __m512 sc, __m512 vmax, __m512 f[4], __m512 n[4])
{
    const __m512i lo = _mm512_set1_epi32((int)0xc2ae999au); /* bits of -87.3f */
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
        __m512 y = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * u), sc), vmax);
        __mmask16 keep = _mm512_cmple_epu32_mask(_mm512_castps_si512(y), lo);
        y = _mm512_castsi512_ps(_mm512_min_epu32(_mm512_castps_si512(y), lo));
        n[u] = _mm512_mask_roundscale_ps(_mm512_set1_ps(-1000.0f), keep,
                                         _mm512_mul_ps(y, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        y = _mm512_fnmadd_ps(n[u], _mm512_set1_ps(0.693145751953125f), y);
        f[u] = _mm512_fnmadd_ps(n[u], _mm512_set1_ps(1.428606765330187e-06f), y);
    }
}

/* The polynomial and 2^n of exp64_reduce's f, n: stores the four vectors at
 * x and adds them to sum in order. */
static inline __attribute__((always_inline)) __m512 exp64_finish(float *x, const __m512 f[4],
                                                                 const __m512 n[4], __m512 sum)
{
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
        __m512 p = _mm512_set1_ps(0.0013888889f);
        p = _mm512_fmadd_ps(p, f[u], _mm512_set1_ps(0.008333334f));
        p = _mm512_fmadd_ps(p, f[u], _mm512_set1_ps(0.041666668f));
        p = _mm512_fmadd_ps(p, f[u], _mm512_set1_ps(0.16666667f));
        p = _mm512_fmadd_ps(p, f[u], _mm512_set1_ps(0.5f));
        p = _mm512_fmadd_ps(p, f[u], _mm512_set1_ps(1.0f));
        p = _mm512_fmadd_ps(p, f[u], _mm512_set1_ps(1.0f));
        p = _mm512_scalef_ps(p, n[u]);
        _mm512_storeu_ps(x + 16 * u, p);
        sum = _mm512_add_ps(sum, p);
    }
    return sum;
}

/* exp16's polynomial for e^f, highest power first (Horner). */
static const float exp_poly[7] = {0.0013888889f, 0.008333334f, 0.041666668f, 0.16666667f,
                                  0.5f,          1.0f,         1.0f};

/*
 * g / (1 + exp16(0 - g)) * u for one vector; same bits as that, for every g
 * and u (checked exhaustively over g, silu128 too). With a = 0 - g:
 * the clamp of a to [-87.3, 88.7] is that of -g, negated: xc = -a except
 * for g = +-0, where n, f are still +-0, p = 1 either way; n and f are then
 * rounded from the same exact values as exp16's, through the negated
 * constant and fnmsub. A NaN g turns into a clamped lane, as in exp16, and
 * the division returns g's NaN whatever the denominator. Lanes with
 * a < -87.3, where exp16 returns 0, keep a = -87.3: exp16(-87.3) < 2^-125,
 * and 1 + it is 1, as 1 + 0. Elsewhere p * 2^n is normal, so vscalefps
 * equals adding n to the exponent field.
 */
static inline __attribute__((always_inline)) __m512 silu16(__m512 x, __m512 y)
{
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.7f)), _mm512_set1_ps(87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(-1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmsub_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_set1_ps(exp_poly[0]);
#pragma GCC unroll 6
    for (int c = 1; c < 7; c++)
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(exp_poly[c]));
    p = _mm512_scalef_ps(p, n);
    return _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), p)), y);
}

/* silu16 of eight vectors at g, u, one step of the chain at a time across
 * the eight, so that the long chains overlap without relying on the
 * out-of-order window; stores the results at g. The loops are unrolled at
 * every -O level, to keep the vectors in registers. */
static inline __attribute__((always_inline)) void silu128(float *g, const float *u)
{
    __m512 x[8], n[8], f[8], p[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        x[k] = _mm512_loadu_ps(g + 16 * k);
        f[k] = _mm512_min_ps(_mm512_max_ps(x[k], _mm512_set1_ps(-88.7f)), _mm512_set1_ps(87.3f));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        n[k] = _mm512_roundscale_ps(_mm512_mul_ps(f[k], _mm512_set1_ps(-1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        f[k] = _mm512_fnmsub_ps(n[k], _mm512_set1_ps(0.693145751953125f), f[k]);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        f[k] = _mm512_fnmadd_ps(n[k], _mm512_set1_ps(1.428606765330187e-06f), f[k]);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        p[k] = _mm512_set1_ps(exp_poly[0]);
#pragma GCC unroll 6
    for (int c = 1; c < 7; c++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++)
            p[k] = _mm512_fmadd_ps(p[k], f[k], _mm512_set1_ps(exp_poly[c]));
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        p[k] = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_scalef_ps(p[k], n[k]));
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        _mm512_storeu_ps(g + 16 * k,
                         _mm512_mul_ps(_mm512_div_ps(x[k], p[k]), _mm512_loadu_ps(u + 16 * k)));
}

void kern__silu_mul_avx512(float *g, const float *u, int n)
{
    int i = 0;
    for (; i + 128 <= n; i += 128)
        silu128(g + i, u + i);
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 r = silu16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(g + i, m, r);
    }
}

/* The exp pass from x + j on, one vector at a time, for any inputs; then
 * the lanes of sum, in order. */
static float softmax_exp_from(float *x, int j, int n, __m512 sc, __m512 vmax, __m512 sum)
{
    for (; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? 0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 v = exp16(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), sc), vmax));
        v = _mm512_maskz_mov_ps(m, v);
        _mm512_mask_storeu_ps(x + j, m, v);
        sum = _mm512_add_ps(sum, v);
    }
    float part[16], total = 0;
    _mm512_storeu_ps(part, sum);
    for (int l = 0; l < 16; l++)
        total += part[l];
    return total;
}

/* Any row, NaN included: the max folds the vectors in order, as a NaN
 * makes vmaxps depend on the order. */
static float softmax_exp_any(float *x, int n, float scale)
{
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
    if (i < n)
        mx = _mm512_mask_max_ps(mx, (__mmask16)((1u << (n - i)) - 1), mx,
                                _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), x + i));
    /* scale > 0 and rounding are monotone: max(scale * x) = scale * max(x) */
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx) * scale);
    return softmax_exp_from(x, 0, n, _mm512_set1_ps(scale), vmax, _mm512_setzero_ps());
}

float kern__softmax_exp_avx512(float *x, int n, float scale)
{
    /* The max in four chains, and whether every element is ordered. */
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    __mmask16 ord0 = 0xffff, ord1 = 0xffff;
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        __m512 c = _mm512_loadu_ps(x + i + 32), d = _mm512_loadu_ps(x + i + 48);
        ord0 = _mm512_mask_cmp_ps_mask(ord0, a, b, _CMP_ORD_Q);
        ord1 = _mm512_mask_cmp_ps_mask(ord1, c, d, _CMP_ORD_Q);
        m0 = _mm512_max_ps(m0, a);
        m1 = _mm512_max_ps(m1, b);
        m2 = _mm512_max_ps(m2, c);
        m3 = _mm512_max_ps(m3, d);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 a = _mm512_loadu_ps(x + i);
        ord0 = _mm512_mask_cmp_ps_mask(ord0, a, a, _CMP_ORD_Q);
        m0 = _mm512_max_ps(m0, a);
    }
    if (i < n) {
        __mmask16 t = (__mmask16)((1u << (n - i)) - 1);
        __m512 a = _mm512_maskz_loadu_ps(t, x + i);
        ord1 = _mm512_mask_cmp_ps_mask(ord1, a, a, _CMP_ORD_Q);
        m1 = _mm512_mask_max_ps(m1, t, m1, a);
    }
    m0 = _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3));
    float ms = _mm512_reduce_max_ps(m0) * scale;
    /* Without NaN, the max is that of softmax_exp_any (a zero max may differ
     * in sign, which changes no result); with scale > 0 and ms finite, every
     * y = scale * x - ms is then <= 0 and not NaN, as exp64_reduce needs.
     * The vectors still add to sum in order. */
    if ((__mmask16)(ord0 & ord1) != 0xffff || !(scale > 0) || !(ms - ms == 0))
        return softmax_exp_any(x, n, scale);
    const __m512 sc = _mm512_set1_ps(scale), vmax = _mm512_set1_ps(ms);
    __m512 sum = _mm512_setzero_ps();
    int j = 0;
    if (n >= 128) { /* software pipelined: reduce x + j + 64, finish x + j */
        __m512 f[4], e[4], fb[4], eb[4];
        exp64_reduce(x, sc, vmax, f, e);
        for (; j + 128 <= n; j += 64) {
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                fb[u] = f[u], eb[u] = e[u];
            exp64_reduce(x + j + 64, sc, vmax, f, e);
            sum = exp64_finish(x + j, fb, eb, sum);
        }
        sum = exp64_finish(x + j, f, e, sum);
        j += 64;
    }
    return softmax_exp_from(x, j, n, sc, vmax, sum);
}
