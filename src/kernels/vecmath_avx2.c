/*
 * vecmath_avx2.c - AVX2 bodies of vecmath.h. AVX2 has no lane masks for
 * arithmetic, so tails are copied into a padded 8-wide buffer and run
 * through the same vector code. The loops take four vectors a step, so the
 * long exp and division chains of one overlap the others' (the sums still
 * add the vectors in order); the softmax max runs in four vector chains
 * unless the row holds a NaN.
 */
#include "kernels/vecmath.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(88.7f));
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    f = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), f);
    __m256 p = _mm256_set1_ps(0.0013888889f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.008333334f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.041666668f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.16666667f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_andnot_ps(under, p);
}

static inline __m256 silu_mul8(__m256 x, __m256 y)
{
    __m256 ex = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)), y);
}

void kern__silu_mul_avx2(float *g, const float *u, int n)
{
    int i = 0;
    /* four independent vectors a step: the divisions and exp chains of one
     * overlap the others' */
    for (; i + 32 <= n; i += 32) {
        __m256 r[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            r[k] = silu_mul8(_mm256_loadu_ps(g + i + 8 * k), _mm256_loadu_ps(u + i + 8 * k));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(g + i + 8 * k, r[k]);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        float a[8] = {0}, b[8] = {0};
        memcpy(a, g + i, sizeof(float) * (size_t)(n - i));
        memcpy(b, u + i, sizeof(float) * (size_t)(n - i));
        _mm256_storeu_ps(a, silu_mul8(_mm256_loadu_ps(a), _mm256_loadu_ps(b)));
        memcpy(g + i, a, sizeof(float) * (size_t)(n - i));
    }
}

/* max_i x[i] as the loop `mx = x[i] > mx ? x[i] : mx` from -inf gives it
 * (a NaN never taken): in four vector chains when no element is NaN (the
 * value is then the same, a zero's sign aside, which changes no result:
 * exp of either zero is 1), else that loop. */
static float max_of(const float *x, int n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    __m256 ord = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
        ord = _mm256_and_ps(
            ord, _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_ORD_Q), _mm256_cmp_ps(c, d, _CMP_ORD_Q)));
        m0 = _mm256_max_ps(m0, a);
        m1 = _mm256_max_ps(m1, b);
        m2 = _mm256_max_ps(m2, c);
        m3 = _mm256_max_ps(m3, d);
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        ord = _mm256_and_ps(ord, _mm256_cmp_ps(a, a, _CMP_ORD_Q));
        m0 = _mm256_max_ps(m0, a);
    }
    float mx = -INFINITY;
    if (_mm256_movemask_ps(ord) != 0xff) {
        for (int j = 0; j < n; j++)
            mx = x[j] > mx ? x[j] : mx;
        return mx;
    }
    float part[8];
    _mm256_storeu_ps(part, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    for (int l = 0; l < 8; l++)
        mx = part[l] > mx ? part[l] : mx;
    for (; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

float kern__softmax_exp_avx2(float *x, int n, float scale)
{
    const float mx = max_of(x, n);
    const __m256 vmax = _mm256_set1_ps(mx * scale), sc = _mm256_set1_ps(scale);
    __m256 sum = _mm256_setzero_ps();
    int i = 0;
    /* four vectors a step, so their exp chains overlap; added to sum in
     * order, as one at a time would */
    for (; i + 32 <= n; i += 32) {
        __m256 v[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            v[k] = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * k), sc), vmax));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            _mm256_storeu_ps(x + i + 8 * k, v[k]);
            sum = _mm256_add_ps(sum, v[k]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sc), vmax));
        _mm256_storeu_ps(x + i, v);
        sum = _mm256_add_ps(sum, v);
    }
    if (i < n) {
        float a[8];
        for (int j = 0; j < 8; j++)
            a[j] = i + j < n ? x[i + j] : -INFINITY;
        __m256 v = exp8(_mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(a), sc), vmax));
        _mm256_storeu_ps(a, v);
        memcpy(x + i, a, sizeof(float) * (size_t)(n - i));
        sum = _mm256_add_ps(sum, v);
    }
    float part[8], total = 0;
    _mm256_storeu_ps(part, sum);
    for (int j = 0; j < 8; j++)
        total += part[j];
    return total;
}
