/*
 * quant_act_avx512.c - AVX-512 activation quantization (q8_0 and q8_K),
 * bit-identical to the scalar reference in kernels_ref.c:
 *
 *   d = amax / 127 (one IEEE division), id = 1 / d (0 if d == 0),
 *   q = round_half_away(clamp(x * id, -127, 127))
 *
 * amax is a max (exact, order-free; NaN inputs are skipped as fmaxf does),
 * x * id is one rounded multiply in both, and round-half-away-from-zero is
 * done exactly: t = trunc(v); q = t + sign(v) if |v - t| >= 0.5 (v - t is
 * exact for |v| < 2^23).
 */
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include <immintrin.h>

static inline __m512 round_clamp127(__m512 v)
{
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    v = _mm512_max_ps(v, lo); /* NaN -> lo, as fmaxf(v, lo) */
    v = _mm512_min_ps(v, hi);
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f),
                              _mm512_and_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32(INT32_MIN))));
    return _mm512_mask_add_ps(t, up, t, one);
}

static inline float amax16(const float *x, int n16)
{
    __m512 a = _mm512_setzero_ps();
    for (int i = 0; i < n16; i++)
        a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)), a);
    return _mm512_reduce_max_ps(a);
}

static inline __m128i quant16(const float *x, __m512 vid)
{
    __m512 v = round_clamp127(_mm512_mul_ps(_mm512_loadu_ps(x), vid));
    return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v));
}

void kern__quantize_q8_0_avx512(const float *x, void *out, int k)
{
    struct block_q8_0 *y = out;
    for (int b = 0; b < k / QK8_0; b++, x += QK8_0) {
        float d = amax16(x, 2) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kern__f32_to_f16(d);
        __m512 vid = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)y[b].qs, quant16(x, vid));
        _mm_storeu_si128((__m128i *)(y[b].qs + 16), quant16(x + 16, vid));
    }
}

void kern__quantize_q8_K_avx512(const float *x, void *out, int k)
{
    struct block_q8_K *y = out;
    for (int b = 0; b < k / QK_K; b++, x += QK_K) {
        float d = amax16(x, 16) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = d;
        __m512 vid = _mm512_set1_ps(id);
        for (int j = 0; j < 16; j++) {
            __m128i q = quant16(x + 16 * j, vid);
            _mm_storeu_si128((__m128i *)(y[b].qs + 16 * j), q);
            /* sum of 16 int8: sign-extend to 16-bit lanes and reduce */
            __m256i w = _mm256_cvtepi8_epi16(q);
            __m128i s = _mm_add_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            s = _mm_add_epi16(s, _mm_unpackhi_epi64(s, s));
            s = _mm_add_epi16(s, _mm_shuffle_epi32(s, 0x55));
            s = _mm_add_epi16(s, _mm_shufflelo_epi16(s, 0x55));
            y[b].bsums[j] = (int16_t)_mm_extract_epi16(s, 0);
        }
    }
}
