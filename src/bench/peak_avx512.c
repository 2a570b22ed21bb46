/*
 * peak_avx512.c - AVX-512 arithmetic peak loops: 16 independent
 * accumulators per instruction type, enough to cover latency x throughput on
 * current cores. The result is folded into a volatile sink so the compiler
 * keeps the work.
 */
#include "bench/peak.h"

#include <immintrin.h>

static volatile float sink_f;
static volatile int sink_i;

#define CHAINS 16

double peak__fma_avx512(long iters)
{
    __m512 acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i * 1e-3f);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, acc[i]);
    sink_f = _mm512_reduce_add_ps(s);
    return (double)iters * CHAINS * 16 * 2;
}

double peak__bf16_avx512(long iters)
{
    __m512 acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_setzero_ps();
    const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3400);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, acc[i]);
    sink_f = _mm512_reduce_add_ps(s);
    /* 16 lanes x 2 products x (mul + add) */
    return (double)iters * CHAINS * 16 * 2 * 2;
}

double peak__vnni_avx512(long iters)
{
    __m512i acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_setzero_si512();
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    __m512i s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_epi32(s, acc[i]);
    sink_i = _mm512_reduce_add_epi32(s);
    /* 16 lanes x 4 products x (mul + add) */
    return (double)iters * CHAINS * 16 * 4 * 2;
}

static volatile long long sink_rd;

double peak__read_avx512(const void *buf, size_t bytes)
{
    const __m512i *p = buf;
    size_t n = bytes / 64;
    __m512i a[8];
    for (int i = 0; i < 8; i++)
        a[i] = _mm512_setzero_si512();
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_add_epi64(a[j], _mm512_load_si512(p + i + j));
    for (int j = 1; j < 8; j++)
        a[0] = _mm512_add_epi64(a[0], a[j]);
    sink_rd = _mm512_reduce_add_epi64(a[0]);
    return (double)bytes;
}
