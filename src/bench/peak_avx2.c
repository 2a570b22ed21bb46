/*
 * peak_avx2.c - AVX2 peak loops: FP32 FMA, the int8 dot product of the avx2
 * kernels (vpmaddubsw + vpmaddwd + vpaddd: 32 byte products into 8 int32
 * lanes), and the streaming read used for memory bandwidth (256-bit loads
 * are enough to saturate memory).
 */
#include "bench/peak.h"

#include <immintrin.h>

static volatile float sink_f;
static volatile long long sink_i;

#define CHAINS 12

double peak__fma_avx2(long iters)
{
    __m256 acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_set1_ps((float)i * 1e-3f);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    sink_f = out[0] + out[7];
    return (double)iters * CHAINS * 8 * 2;
}

/* The avx2 kernels' int8 step: u8 x s8 pairs into int16 (vpmaddubsw), int16
 * pairs into int32 against ones (vpmaddwd), accumulated (vpaddd). The three
 * go to different ports on most cores, so independent chains overlap them
 * as the kernels do. */
double peak__int8_avx2(long iters)
{
    __m256i acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_setzero_si256();
    const __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    __m256i b = _mm256_set1_epi8(-2);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++) {
            /* b is "new" for every chain: the products cannot be shared
             * between chains or hoisted out of the loop */
            __asm__ volatile("" : "+x"(b));
            acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
        }
    __m256i s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_epi32(s, acc[i]);
    sink_i = _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3);
    /* 32 byte products x (mul + add) */
    return (double)iters * CHAINS * 32 * 2;
}

double peak__read_avx2(const void *buf, size_t bytes)
{
    const __m256i *p = buf;
    size_t n = bytes / 32;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(p + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(p + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(p + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(p + i + 3));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    sink_i = _mm256_extract_epi64(a0, 0);
    return (double)bytes;
}
