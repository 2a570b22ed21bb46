/*
 * packed_avxvnni.c - the avxvnni level's packed quantized matmul
 * (packed256.h) with VEX vpdpbusd (AVX-VNNI).
 */
#define PK_VNNI            1
#define PK_SUFFIX          avxvnni
#define PK_DPBUSD(a, u, x) _mm256_dpbusd_avx_epi32(a, u, x)
#include "kernels/packed256.h"
