/*
 * peak_avxvnni.c - the avxvnni level's int8 peak: 256-bit VEX vpdpbusd
 * (AVX-VNNI), four u8 x s8 products per int32 lane and instruction, over
 * independent accumulators enough to cover latency x throughput.
 */
#include "bench/peak.h"

#include <immintrin.h>

#ifndef PEAK_FN /* peak_avxvnni_avx512.c includes this file with the EVEX form */
#define PEAK_FN     peak__vnni_avxvnni
#define PEAK_DPBUSD _mm256_dpbusd_avx_epi32
#endif

static volatile long long sink_i;

#define CHAINS 12

double PEAK_FN(long iters)
{
    __m256i acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_setzero_si256();
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = PEAK_DPBUSD(acc[i], a, b);
    __m256i s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_epi32(s, acc[i]);
    sink_i = _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3);
    /* 8 lanes x 4 products x (mul + add) */
    return (double)iters * CHAINS * 8 * 4 * 2;
}
