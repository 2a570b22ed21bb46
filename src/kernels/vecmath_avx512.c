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

void kern__silu_mul_avx512(float *g, const float *u, int n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(m, g + i), y = _mm512_maskz_loadu_ps(m, u + i);
        __m512 ex = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        __m512 r = _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, ex)), y);
        _mm512_mask_storeu_ps(g + i, m, r);
    }
}

float kern__softmax_exp_avx512(float *x, int n, float scale)
{
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        mx = _mm512_max_ps(mx, _mm512_loadu_ps(x + i));
    if (i < n)
        mx = _mm512_mask_max_ps(mx, (__mmask16)((1u << (n - i)) - 1), mx,
                                _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), x + i));
    /* scale > 0 and rounding are monotone: max(scale * x) = scale * max(x) */
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx) * scale);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
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
