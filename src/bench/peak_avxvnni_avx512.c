/*
 * peak_avxvnni_avx512.c - the avxvnni level's int8 peak on CPUs whose
 * 256-bit vpdpbusd is the AVX-512 VNNI (EVEX) form only (the level's
 * kernels run that form there, kernels/packed_avxvnni_avx512.c).
 */
#define PEAK_FN     peak__vnni_avxvnni_evex
#define PEAK_DPBUSD _mm256_dpbusd_epi32
#include "peak_avxvnni.c"
