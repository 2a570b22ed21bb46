/*
 * peak.h - this machine's physical limits, measured in the same run as the
 * figures they judge: memory read bandwidth and the arithmetic peaks of the
 * instructions the kernels use (FP32 FMA, BF16 dot, int8 VNNI dot).
 *
 * Each peak runs many independent accumulator chains so latency hides and
 * the figure is the throughput limit; each takes ~0.2 s per thread count.
 * Thread safety: call from one thread; it fans out on the given pool.
 */
#ifndef INFERD_BENCH_PEAK_H
#define INFERD_BENCH_PEAK_H

#include "base/tpool.h"

#include <stddef.h>

/* The kernel level whose instructions are measured (numbered as the
 * kernels' enum kern_isa, which this layer does not see). */
enum peak_level { PEAK_LEVEL_SCALAR, PEAK_LEVEL_AVX2, PEAK_LEVEL_AVXVNNI, PEAK_LEVEL_AVX512 };

struct peak {
    double read_gbs;       /* memory read bandwidth, GB/s (1e9 bytes) */
    double fma_gflops;     /* FP32 FMA at the level's width, GFLOP/s (2 per lane-op) */
    double bf16_gflops;    /* BF16 dot (vdpbf16ps), GFLOP/s; 0 below the avx512 level */
    double int8_gops;      /* the level's int8 dot sequence, GOP/s; 0 if none */
    const char *fma_insn;  /* what fma_gflops timed ("ymm vfmadd231ps") */
    const char *int8_insn; /* what int8_gops timed ("ymm vpmaddubsw+vpmaddwd"), or "" */
};

/* Measures the limits of `level` with every thread of pool. A level above
 * what the CPU has measures what the CPU has (the caller forced nothing). */
void peak_measure(struct tpool *pool, enum peak_level level, struct peak *out);

/* A read-bandwidth probe to run right next to a measurement: a buffer made
 * once (free with free()), read best-of-reps on every pool thread. GB/s. */
void *peak_read_buffer(size_t bytes);
double peak_read_gbs(struct tpool *pool, const void *buf, size_t bytes, int reps);

/* ISA bodies (peak_avx512.c / peak_avx2.c): operations done in `iters`
 * rounds; return 0 when the ISA is missing. */
double peak__fma_avx512(long iters);
double peak__bf16_avx512(long iters);
double peak__vnni_avx512(long iters);
double peak__fma_avx2(long iters);
double peak__int8_avx2(long iters);
double peak__vnni_avxvnni(long iters);
double peak__vnni_avxvnni_evex(long iters); /* the same, AVX-512 VNNI encoding */
double peak__read_avx2(const void *buf, size_t bytes);
double peak__read_avx512(const void *buf, size_t bytes);

#endif
