/*
 * packed_avxvnni_avx512.c - the avxvnni level's packed quantized matmul
 * (packed256.h) with the same 256-bit vpdpbusd in its AVX-512 VNNI (EVEX)
 * encoding, for CPUs with AVX-512 but without AVX-VNNI (AMD Zen 4): the
 * level then runs, and is tested, there too. Only ymm registers are used.
 */
#define PK_VNNI            1
#define PK_SUFFIX          avxvnni_evex
#define PK_DPBUSD(a, u, x) _mm256_dpbusd_epi32(a, u, x)
#include "kernels/packed256.h"
