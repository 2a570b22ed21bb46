/*
 * peak.c - see peak.h. Every measurement runs on all pool threads at once
 * (each thread its own chains or its own slice of the buffer) and takes the
 * best of a few repetitions, the usual way to read a hardware limit.
 */
#include "bench/peak.h"

#include "base/check.h"
#include "base/timeutil.h"

#include <cpuid.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

enum peak_kind {
    PEAK_READ,
    PEAK_FMA512,
    PEAK_BF16,
    PEAK_VNNI,
    PEAK_FMA256,
    PEAK_INT8_256,
    PEAK_VNNI256,
    PEAK_VNNI256_EVEX
};

struct peak_job {
    enum peak_kind kind; /* what to run */
    const uint8_t *buf;  /* read buffer */
    size_t bytes;        /* its size */
    long iters;          /* rounds for arithmetic loops */
    bool avx512;         /* read with 512-bit loads */
    double work[256];    /* per thread: bytes or ops done */
};

/* The arithmetic peak loops, by kind. */
static double (*const arith[])(long iters) = {
    [PEAK_FMA512] = peak__fma_avx512,
    [PEAK_BF16] = peak__bf16_avx512,
    [PEAK_VNNI] = peak__vnni_avx512,
    [PEAK_FMA256] = peak__fma_avx2,
    [PEAK_INT8_256] = peak__int8_avx2,
    [PEAK_VNNI256] = peak__vnni_avxvnni,
    [PEAK_VNNI256_EVEX] = peak__vnni_avxvnni_evex,
};

static void peak_worker(void *arg, int ith, int nth)
{
    struct peak_job *j = arg;
    switch (j->kind) {
    case PEAK_READ: {
        int lo, hi;
        int n_pages = (int)(j->bytes / 4096);
        tpool_split(n_pages, 1, ith, nth, &lo, &hi);
        const uint8_t *b = j->buf + (size_t)lo * 4096;
        size_t n = (size_t)(hi - lo) * 4096;
        j->work[ith] = j->avx512 ? peak__read_avx512(b, n) : peak__read_avx2(b, n);
        break;
    }
    default:
        j->work[ith] = arith[j->kind](j->iters);
        break;
    }
}

static double best_rate(struct tpool *pool, struct peak_job *j, int reps)
{
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = time_now_s();
        tpool_run(pool, peak_worker, j);
        double dt = time_now_s() - t0, work = 0;
        for (int i = 0; i < tpool_size(pool); i++)
            work += j->work[i];
        if (work / dt > best) best = work / dt;
    }
    return best * 1e-9;
}

double peak_read_gbs(struct tpool *pool, const void *buf, size_t bytes, int reps)
{
    struct peak_job j = {0};
    j.kind = PEAK_READ;
    j.buf = buf;
    j.bytes = bytes;
    j.avx512 = __builtin_cpu_supports("avx512f");
    return best_rate(pool, &j, reps);
}

void *peak_read_buffer(size_t bytes)
{
    uint8_t *buf = xaligned_alloc(bytes);
    /* Huge pages where the kernel allows: TLB misses would otherwise make
     * the figure vary from run to run. */
    madvise(buf, bytes, MADV_HUGEPAGE);
    memset(buf, 1, bytes);
    return buf;
}

/* AVX-VNNI: CPUID leaf 7, sub-leaf 1, EAX bit 4 (as the kernels detect it) */
static bool has_avxvnni(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}

void peak_measure(struct tpool *pool, enum peak_level level, struct peak *out)
{
    memset(out, 0, sizeof(*out));
    out->fma_insn = out->int8_insn = "";
    CHECK(tpool_size(pool) <= 256);
    struct peak_job j = {0};
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    if (__builtin_cpu_supports("avx2")) {
        /* 1 GiB: far beyond any cache, so this is DRAM. */
        void *buf = peak_read_buffer((size_t)1 << 30);
        out->read_gbs = peak_read_gbs(pool, buf, (size_t)1 << 30, 6);
        free(buf);
    }
    j.iters = 4000000;
    /* a level the CPU lacks measures the best the CPU has */
    if (level == PEAK_LEVEL_AVX512 && !(avx512 && __builtin_cpu_supports("avx512vnni")))
        level = PEAK_LEVEL_AVXVNNI;
    /* the avxvnni kernels run EVEX-encoded where only AVX-512 VNNI has the instruction */
    const bool evex = !has_avxvnni() && __builtin_cpu_supports("avx512vnni") &&
                      __builtin_cpu_supports("avx512vl");
    if (level == PEAK_LEVEL_AVXVNNI && !(avx2 && (has_avxvnni() || evex))) level = PEAK_LEVEL_AVX2;
    if (!avx2) return;
    if (level == PEAK_LEVEL_AVX512) {
        j.kind = PEAK_FMA512;
        out->fma_gflops = best_rate(pool, &j, 3);
        out->fma_insn = "zmm vfmadd231ps";
        if (__builtin_cpu_supports("avx512bf16")) {
            j.kind = PEAK_BF16;
            out->bf16_gflops = best_rate(pool, &j, 3);
        }
        j.kind = PEAK_VNNI;
        out->int8_gops = best_rate(pool, &j, 3);
        out->int8_insn = "zmm vpdpbusd";
        return;
    }
    /* the scalar level is judged by what the CPU could do with AVX2 */
    j.kind = PEAK_FMA256;
    out->fma_gflops = best_rate(pool, &j, 3);
    out->fma_insn = "ymm vfmadd231ps";
    if (level == PEAK_LEVEL_AVXVNNI) {
        j.kind = evex ? PEAK_VNNI256_EVEX : PEAK_VNNI256;
        out->int8_insn = evex ? "ymm vpdpbusd (EVEX)" : "ymm vpdpbusd";
    } else {
        j.kind = PEAK_INT8_256;
        out->int8_insn = "ymm vpmaddubsw+vpmaddwd+vpaddd";
    }
    out->int8_gops = best_rate(pool, &j, 3);
}
