/*
 * quant_act_avx512.c - AVX-512 activation quantization (q8_0 and q8_K),
 * bit-identical to the scalar reference in kernels_ref.c:
 *
 *   d = amax / 127 (one IEEE division), id = 1 / d (0 if d == 0),
 *   q = round_half_away(clamp(x * id, -127, 127))
 *
 * amax is a max (exact, order-free; NaN inputs are skipped as fmaxf does),
 * x * id is one rounded multiply in both, and round-half-away-from-zero is
 * done exactly as trunc(v + copysign(h, v)), h the float just below 0.5:
 * the sum rounds to a value >= the next integer only when v is at least
 * halfway there (checked against t = trunc(v) + sign(v) if |v - t| >= 0.5
 * for every f32 bit pattern, NaN and infinities included).
 *
 * q8_0 handles 16 blocks at a time: their abs-maxes are reduced into one
 * vector, so both divisions and the f16 conversion of d are vector
 * instructions (IEEE division is the same in every lane; VCVTPS2PH with
 * round-to-nearest-even equals kern__f32_to_f16 for every non-negative f32,
 * also checked exhaustively) instead of a serial chain per block.
 */
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include <immintrin.h>

/* round_half_away(clamp(v, -127, 127)) as int32; NaN gives -127, as
 * fmaxf(v, -127) does. */
static inline __m512i round_clamp127(__m512 v)
{
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    /* copysign(0x1.fffffep-2f, v): (v & sign) | h */
    __m512i h = _mm512_ternarylogic_epi32(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN),
                                          _mm512_set1_epi32(0x3effffff), 0xEA);
    v = _mm512_add_round_ps(v, _mm512_castsi512_ps(h),
                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_max_ps(v, lo); /* NaN -> lo, as fmaxf(v, lo) */
    v = _mm512_min_ps(v, hi);
    return _mm512_cvttps_epi32(v);
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
    return _mm512_cvtepi32_epi8(round_clamp127(_mm512_mul_ps(_mm512_loadu_ps(x), vid)));
}

/* Lane-wise max of |x| over one block's two vectors, starting from 0. NaN
 * elements are skipped (max_ps returns its second operand when either is
 * NaN), so the result holds no NaN. */
static inline __m512 absmax32(const float *x)
{
    __m512 a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)), _mm512_setzero_ps());
    return _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16)), a);
}

/* n (1..16) q8_0 blocks. The per-block maxes are NaN-free, so the
 * transposing reduction below may combine them in any order. */
static inline void quantize_q8_0_x16(const float *x, struct block_q8_0 *y, int n)
{
    __m512 m[16];
    for (int b = 0; b < 16; b++)
        m[b] = b < n ? absmax32(x + QK8_0 * b) : _mm512_setzero_ps();
    /* after this, 256-bit half h of m[j] holds block 2j + h */
    for (int j = 0; j < 8; j++)
        m[j] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * j], m[2 * j + 1], 0x44),
                             _mm512_shuffle_f32x4(m[2 * j], m[2 * j + 1], 0xee));
    /* 128-bit lane l of m[j] holds block 4j + l */
    for (int j = 0; j < 4; j++)
        m[j] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * j], m[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(m[2 * j], m[2 * j + 1], 0xdd));
    /* lane l, elements 2e..2e+1 of m[j] hold block 8j + 4e + l */
    for (int j = 0; j < 2; j++)
        m[j] = _mm512_max_ps(_mm512_shuffle_ps(m[2 * j], m[2 * j + 1], 0x44),
                             _mm512_shuffle_ps(m[2 * j], m[2 * j + 1], 0xee));
    /* element 4l + e holds block 4e + l */
    __m512 amax =
        _mm512_max_ps(_mm512_shuffle_ps(m[0], m[1], 0x88), _mm512_shuffle_ps(m[0], m[1], 0xdd));
    amax = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), amax);

    __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ),
                                    _mm512_set1_ps(1.0f), d);
    float ids[16];
    uint16_t ds[16];
    _mm512_storeu_ps(ids, id);
    _mm256_storeu_si256((__m256i *)ds,
                        _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (int b = 0; b < n; b++, x += QK8_0) {
        __m512 vid = _mm512_set1_ps(ids[b]);
        y[b].d = ds[b];
        _mm_storeu_si128((__m128i *)y[b].qs, quant16(x, vid));
        _mm_storeu_si128((__m128i *)(y[b].qs + 16), quant16(x + 16, vid));
    }
}

void kern__quantize_q8_0_avx512(const float *x, void *out, int k)
{
    struct block_q8_0 *y = out;
    int nb = k / QK8_0, b = 0;
    for (; b + 16 <= nb; b += 16)
        quantize_q8_0_x16(x + QK8_0 * b, y + b, 16);
    if (b < nb) quantize_q8_0_x16(x + QK8_0 * b, y + b, nb - b);
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
