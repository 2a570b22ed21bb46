/*
 * bench_kernels.c - micro-benchmark of kern_matmul against this machine's
 * limits, measured in the same run.
 *
 *   decode  (n_tok = 1): weight bytes streamed per second over a plain
 *           AVX-512 read loop, both on 1 and on 2 threads (rows split in
 *           halves, as the engine does). Weights cycle through >= 256 MB of
 *           copies so they come from memory. Each trial runs the read loop
 *           and then the kernel; the figure is the median ratio over trials,
 *           which keeps a shared machine's load swings out of the ratio.
 *   prefill (n_tok = 512, one thread): multiply-adds per second against the
 *           peak of the instruction the type's kernel is built on (vpdpbusd
 *           for the quantized types, FMA for f32/f16, vdpbf16ps for bf16),
 *           counted as multiply-adds (one vpdpbusd zmm = 64).
 *
 *   packed  (q8_0, q4_0, q4_K, q5_K, q6_K packed at load, 1 thread): time per call
 *           at 1..512 tokens and its ratio to 1 token (weights from memory up
 *           to 64 tokens); 1 token's bytes/s against the read loop, 512
 *           tokens' multiply-adds/s against the vpdpbusd peak.
 *   attention (f16 and bf16 KV, 1 thread): one decode token's attention for a KV
 *           group of 7 query heads of width 64 (Qwen2.5-0.5B) over 1,536
 *           cached positions in 16-row blocks: one kv_dot / kv_accum call
 *           per head and block, the grouped per-block calls (kv_dot_heads /
 *           kv_accum_heads), and one kern_attend_heads call over the block
 *           table, as the engine runs it; multiply-adds per second against
 *           the FMA peak. Each sample times ATT_REPS calls: one read of the
 *           thread CPU clock costs ~1.5 us in a VM, a tenth of a call.
 *
 * Shapes are Qwen2.5-0.5B's FFN: 4864 x 896 (gate/up) and 896 x 4864 (down);
 * K-quants need k % 256 == 0, so their first shape is 4864 x 1024.
 * Times are thread CPU time, so time the scheduler hands to other processes
 * does not count (bandwidth contention still does). Not a test: figures
 * depend on the machine and its load. Built as build/release/bench_kernels
 * (it needs an AVX-512 machine to run).
 *   float   (f32, f16, bf16 weights, 1 thread): decode at 1..8 tokens a call
 *           (weights from memory) against the read loop, prefill at 16..512
 *           tokens against the FMA peak.
 *
 * Usage: bench_kernels [isa [trials [packed|attention|float]]]   (isa: scalar |
 *        avx2 | avxvnni | avx512; "packed" / "attention" / "float": that part only)
 */
#include "kernels/kernels.h"

#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BIG (256u << 20)

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* ---- instruction peaks, multiply-adds per second (12 independent chains) ---- */

#define PEAK_LOOP(insn)                                                                            \
    do {                                                                                           \
        for (long i = 0; i < n; i++)                                                               \
            __asm__ volatile(insn                                                                  \
                             " %%zmm30, %%zmm31, %%zmm0\n" insn " %%zmm30, %%zmm31, %%zmm1\n" insn \
                             " %%zmm30, %%zmm31, %%zmm2\n" insn " %%zmm30, %%zmm31, %%zmm3\n" insn \
                             " %%zmm30, %%zmm31, %%zmm4\n" insn " %%zmm30, %%zmm31, %%zmm5\n" insn \
                             " %%zmm30, %%zmm31, %%zmm6\n" insn " %%zmm30, %%zmm31, %%zmm7\n" insn \
                             " %%zmm30, %%zmm31, %%zmm8\n" insn " %%zmm30, %%zmm31, %%zmm9\n" insn \
                             " %%zmm30, %%zmm31, %%zmm10\n" insn " %%zmm30, %%zmm31, %%zmm11\n" :: \
                                 : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", \
                                   "xmm8", "xmm9", "xmm10", "xmm11");                              \
    } while (0)

/* which: 0 zmm FMA, 1 zmm vpdpbusd, 2 zmm vdpbf16ps, 3 ymm FMA */
static double peak(int which)
{
    const long n = 20000000;
    __asm__ volatile("vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n"
                     "vpxor %%ymm14, %%ymm14, %%ymm14\n vpxor %%ymm15, %%ymm15, %%ymm15" ::
                         : "xmm14", "xmm15", "xmm30", "xmm31");
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = cpu_s();
        if (which == 3)
            for (long i = 0; i < n; i++)
                __asm__ volatile(
                    "vfmadd231ps %%ymm14, %%ymm15, %%ymm0\n vfmadd231ps %%ymm14, %%ymm15, %%ymm1\n"
                    "vfmadd231ps %%ymm14, %%ymm15, %%ymm2\n vfmadd231ps %%ymm14, %%ymm15, %%ymm3\n"
                    "vfmadd231ps %%ymm14, %%ymm15, %%ymm4\n vfmadd231ps %%ymm14, %%ymm15, %%ymm5\n"
                    "vfmadd231ps %%ymm14, %%ymm15, %%ymm6\n vfmadd231ps %%ymm14, %%ymm15, %%ymm7\n"
                    "vfmadd231ps %%ymm14, %%ymm15, %%ymm8\n vfmadd231ps %%ymm14, %%ymm15, %%ymm9\n"
                    "vfmadd231ps %%ymm14, %%ymm15, %%ymm10\n vfmadd231ps %%ymm14, %%ymm15, "
                    "%%ymm11\n" ::
                        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                          "xmm9", "xmm10", "xmm11");
        else if (which == 0)
            PEAK_LOOP("vfmadd231ps");
        else if (which == 1)
            PEAK_LOOP("vpdpbusd");
        else
            PEAK_LOOP("vdpbf16ps");
        double instr = 12.0 * n / (cpu_s() - t0);
        double macs = instr * (which == 0 ? 16 : which == 1 ? 64 : which == 3 ? 8 : 32);
        best = macs > best ? macs : best;
    }
    return best;
}

/* ---- two-thread runner: each thread times its own half ---- */

struct job {
    int kind;        /* 0: read loop, 1: matmul */
    const char *buf; /* read loop: this thread's part */
    size_t bytes;    /* read loop: its length */
    enum dtype wt;   /* matmul: weight type */
    char **w;        /* matmul: weight copies */
    int copies;      /* number of copies */
    size_t wrb;      /* bytes per weight row */
    int k;           /* row length */
    int r0, r1;      /* this thread's rows [r0, r1) */
    const void *x;   /* activations (n_tok rows) */
    int n_tok;       /* tokens per call */
    size_t xrb;      /* activation row bytes */
    float *y;        /* output */
    double secs;     /* measured thread CPU time */
};

static void *job_run(void *p)
{
    struct job *j = p;
    double t0 = cpu_s();
    if (j->kind == 0) {
        __m512i s = _mm512_setzero_si512();
        for (size_t i = 0; i + 256 <= j->bytes; i += 256) {
            s = _mm512_add_epi32(s, _mm512_load_si512(j->buf + i));
            s = _mm512_add_epi32(s, _mm512_load_si512(j->buf + i + 64));
            s = _mm512_add_epi32(s, _mm512_load_si512(j->buf + i + 128));
            s = _mm512_add_epi32(s, _mm512_load_si512(j->buf + i + 192));
        }
        volatile int sink = _mm512_reduce_add_epi32(s);
        (void)sink;
    } else {
        for (int c = 0; c < j->copies; c++)
            kern_matmul(j->wt, j->w[c], j->wrb, j->k, j->r0, j->r1, j->x, j->xrb, j->n_tok, j->y,
                        j->r1);
    }
    j->secs = cpu_s() - t0;
    return NULL;
}

/* Runs jobs[0..n) on n threads; returns the slowest thread's CPU time. */
static double run_jobs(struct job *jobs, int n)
{
    pthread_t th[2];
    for (int i = 1; i < n; i++)
        pthread_create(&th[i], NULL, job_run, &jobs[i]);
    job_run(&jobs[0]);
    for (int i = 1; i < n; i++)
        pthread_join(th[i], NULL);
    double m = 0;
    for (int i = 0; i < n; i++)
        m = jobs[i].secs > m ? jobs[i].secs : m;
    return m;
}

static char *rd_buf;

static double read_gbs(int nth)
{
    struct job jobs[2];
    for (int i = 0; i < nth; i++) {
        memset(&jobs[i], 0, sizeof(jobs[i]));
        jobs[i].buf = rd_buf + (size_t)i * (BIG / nth);
        jobs[i].bytes = BIG / nth;
    }
    return BIG / run_jobs(jobs, nth) / 1e9;
}

struct shape {
    int rows; /* weight rows */
    int k;    /* row length */
};

static void *make_weights(enum dtype wt, int rows, int k)
{
    size_t rb = dtype_row_size(wt, k);
    char *w = aligned_alloc(64, (rb * rows + 63) & ~(size_t)63);
    float *row = malloc(sizeof(float) * k);
    unsigned s = 1;
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < k; i++) {
            s = s * 1103515245u + 12345u;
            row[i] = ((int)(s >> 16 & 0x7fff) - 16384) / 16384.0f * 0.05f;
        }
        kern_quantize_row(wt, row, w + rb * r, k);
    }
    free(row);
    return w;
}

static void *make_acts(enum dtype wt, int n_tok, int k, size_t *rb)
{
    *rb = kern_act_row_size(wt, k);
    char *x = aligned_alloc(64, (*rb * n_tok + 63) & ~(size_t)63);
    float *row = malloc(sizeof(float) * k);
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < k; i++)
            row[i] = (float)((i * 7 + t * 13) % 97 - 48) / 24.0f;
        kern_quantize_act(wt, row, x + *rb * t, k);
    }
    free(row);
    return x;
}

/* Median over trials of (kernel GB/s) / (read loop GB/s), nth threads,
 * n_tok tokens a call; *gbs gets the median kernel GB/s. */
static double bench_decode_n(enum dtype wt, struct shape sh, int nth, int n_tok, int trials,
                             double *gbs)
{
    const size_t wrb = dtype_row_size(wt, sh.k), bytes = wrb * sh.rows;
    char *w0 = make_weights(wt, sh.rows, sh.k);
    int copies = (int)(BIG / bytes) + 1;
    char **w = malloc(sizeof(char *) * copies);
    for (int i = 0; i < copies; i++) {
        w[i] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        memcpy(w[i], w0, bytes);
    }
    size_t xrb;
    void *x = make_acts(wt, n_tok, sh.k, &xrb);
    float *y = malloc(sizeof(float) * sh.rows * n_tok);
    double *ratio = malloc(sizeof(double) * trials), *g = malloc(sizeof(double) * trials);
    struct job jobs[2];
    for (int tr = 0; tr < trials; tr++) {
        double bw = read_gbs(nth);
        for (int i = 0; i < nth; i++) {
            memset(&jobs[i], 0, sizeof(jobs[i]));
            jobs[i] = (struct job){1, NULL, 0, wt, w, copies, wrb, sh.k, 0, 0, x, n_tok, xrb, y, 0};
            /* split on 16-row boundaries like the engine */
            int half = (sh.rows / 2 + 15) / 16 * 16;
            jobs[i].r0 = nth == 1 ? 0 : i == 0 ? 0 : half;
            jobs[i].r1 = nth == 1 ? sh.rows : i == 0 ? half : sh.rows;
        }
        g[tr] = (double)bytes * copies / run_jobs(jobs, nth) / 1e9;
        ratio[tr] = g[tr] / bw;
    }
    double r = median(ratio, trials);
    *gbs = median(g, trials);
    for (int i = 0; i < copies; i++)
        free(w[i]);
    free(w);
    free(w0);
    free(x);
    free(y);
    free(ratio);
    free(g);
    return r;
}

static double bench_decode(enum dtype wt, struct shape sh, int nth, int trials, double *gbs)
{
    return bench_decode_n(wt, sh, nth, 1, trials, gbs);
}

/* Best prefill multiply-adds per second at n_tok tokens, one thread. */
static double bench_prefill(enum dtype wt, struct shape sh, int n_tok)
{
    size_t xrb;
    void *w = make_weights(wt, sh.rows, sh.k);
    void *x = make_acts(wt, n_tok, sh.k, &xrb);
    float *y = malloc(sizeof(float) * sh.rows * n_tok);
    size_t wrb = dtype_row_size(wt, sh.k);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = cpu_s();
        kern_matmul(wt, w, wrb, sh.k, 0, sh.rows, x, xrb, n_tok, y, sh.rows);
        double macs = (double)sh.rows * sh.k * n_tok / (cpu_s() - t0);
        best = macs > best ? macs : best;
    }
    free(w);
    free(x);
    free(y);
    return best;
}

/* Packed weights (kern_matmul_packed), one thread: the weights cycle through
 * >= 256 MB of packed copies, so they come from memory as in a decode step;
 * per batch size, the best of `trials` times per call and its ratio to one
 * token; one token's weight bytes per second against the read loop (bw,
 * 1 thread), and 512 tokens' multiply-adds per second against the
 * vpdpbusd peak (p_vnni). A memory-bound kernel that reads the weights once
 * per call costs about the same at 1 and at 16 tokens. */
static void bench_packed_batches(enum dtype wt, struct shape sh, int trials, double bw,
                                 double p_vnni)
{
    static const int toks[] = {1, 4, 8, 16, 32, 64, 512};
    const int n_max = 512;
    const size_t bytes = kern_pack_size(wt, sh.rows, sh.k);
    if (!bytes) return;
    char *w0 = make_weights(wt, sh.rows, sh.k);
    int copies = (int)(BIG / bytes) + 1;
    char **P = malloc(sizeof(char *) * copies);
    for (int i = 0; i < copies; i++) {
        P[i] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        kern_pack(wt, w0, dtype_row_size(wt, sh.k), sh.k, sh.rows, 0, sh.rows, P[i]);
    }
    size_t xrb;
    char *x = make_acts(wt, n_max, sh.k, &xrb);
    const size_t xsb = kern_act_side_bytes(wt, sh.k);
    char *xs = xsb ? malloc(xsb * n_max) : NULL;
    for (int t = 0; xsb && t < n_max; t++)
        kern_act_side(wt, x + xrb * t, sh.k, xs + xsb * t);
    float *y = malloc(sizeof(float) * sh.rows * n_max);
    double t1 = 0, t512 = 0;
    printf("packed %-4s %dx%d, 1 thread:", dtype_info(wt)->name, sh.rows, sh.k);
    for (size_t i = 0; i < sizeof(toks) / sizeof(toks[0]); i++) {
        const int n = toks[i];
        /* prefill-sized batches run on cache-resident weights: a few copies suffice */
        const int nc = n > 64 ? 2 : copies;
        double best = 1e30;
        for (int tr = 0; tr < trials; tr++) {
            double t0 = cpu_s();
            for (int c = 0; c < nc; c++)
                kern_matmul_packed(wt, P[c], sh.rows, sh.k, 0, sh.rows, x, xrb, xs, xsb, n, y,
                                   sh.rows);
            double dt = (cpu_s() - t0) / nc;
            best = dt < best ? dt : best;
        }
        if (n == 1) t1 = best;
        if (n == 512) t512 = best;
        printf(" | %d tok %.0f us %.2fx", n, best * 1e6, best / t1);
    }
    const double gbs = (double)dtype_row_size(wt, sh.k) * sh.rows / t1 / 1e9;
    const double macs = (double)sh.rows * sh.k * 512 / t512;
    printf(" | 1 tok %.1f GB/s %.0f%% of read, 512 tok %.1f GMAC/s %.0f%% of vpdpbusd\n", gbs,
           100 * gbs / bw, macs / 1e9, 100 * macs / p_vnni);
    for (int i = 0; i < copies; i++)
        free(P[i]);
    free(P);
    free(w0);
    free(x);
    free(xs);
    free(y);
}

#define ATT_REPS 20 /* calls per timed sample */

/* Seconds of thread CPU time for one token's attention over n positions
 * (mean of ATT_REPS calls); mode 0: per head and block, 1: grouped per
 * block, 2: kern_attend_heads over the block table (ids). */
static double attention_once(enum dtype kv, const uint16_t *K, const uint16_t *V, int n,
                             const float *q, float *sc, float *out, int H, int d, int mode,
                             const int32_t *ids)
{
    const size_t stride = (size_t)d * 2;
    double t0 = cpu_s();
    for (int rep = 0; rep < ATT_REPS; rep++) {
        if (mode == 2) {
            /* block i at K + ids[i] * 16 * d: the table is the identity */
            kern_attend_heads(kv, K, V, 16 * stride, ids, 16, n, q, d, H, d, 1.0f / 8.0f, sc, n,
                              out, d);
            continue;
        }
        for (int p0 = 0; p0 < n; p0 += 16) {
            int rows = n - p0 < 16 ? n - p0 : 16;
            const char *kb = (const char *)K + (size_t)p0 * stride; /* a 16-position K panel */
            if (mode == 1)
                kern_kv_dot_heads(kv, kb, 16, rows, q, d, H, d, sc + p0, n);
            else
                for (int h = 0; h < H; h++)
                    kern_kv_dot(kv, kb, 16, rows, q + (size_t)h * d, d, sc + (size_t)h * n + p0);
        }
        for (int h = 0; h < H; h++)
            for (int j = 0; j < n; j++)
                sc[(size_t)h * n + j] = 1.0f / (float)n; /* softmax stands apart from the reads */
        memset(out, 0, sizeof(float) * (size_t)H * d);
        for (int p0 = 0; p0 < n; p0 += 16) {
            int rows = n - p0 < 16 ? n - p0 : 16;
            const char *vb = (const char *)V + (size_t)p0 * stride;
            if (mode == 1)
                kern_kv_accum_heads(kv, vb, stride, rows, sc + p0, n, H, d, out, d);
            else
                for (int h = 0; h < H; h++)
                    kern_kv_accum(kv, vb, stride, rows, sc + (size_t)h * n + p0, d,
                                  out + (size_t)h * d);
        }
    }
    return (cpu_s() - t0) / ATT_REPS;
}

static void bench_attention_kv(enum dtype kv, double p_fma, int trials)
{
    const int n = 1536, H = 7, d = 64;
    uint16_t *K = malloc(sizeof(uint16_t) * n * d), *V = malloc(sizeof(uint16_t) * n * d);
    float *q = malloc(sizeof(float) * H * d), *sc = malloc(sizeof(float) * H * n);
    float *out = malloc(sizeof(float) * H * d), row[64];
    for (int j = 0; j < n; j++) {
        for (int e = 0; e < d; e++)
            row[e] = (float)((j * 31 + e * 7) % 97) / 97.0f - 0.5f;
        kern_kv_store_col(kv, row, K + (size_t)(j / 16) * 16 * d, 16, j % 16, d);
        kern_kv_store(kv, row, V + (size_t)j * d, d);
    }
    for (int i = 0; i < H * d; i++)
        q[i] = (float)(i % 13) / 13.0f;
    int32_t ids[1536 / 16];
    for (int i = 0; i < n / 16; i++)
        ids[i] = i;
    const double macs = 2.0 * n * H * d; /* q.K and w.V */
    static const char *const names[3] = {"per head", "grouped", "attend_heads"};
    printf("attention %s KV, %d positions, %d heads x %d, 1 thread:", dtype_info(kv)->name, n, H,
           d);
    for (int mode = 0; mode < 3; mode++) {
        double best = 1e30;
        for (int tr = 0; tr < trials * 4; tr++) {
            double dt = attention_once(kv, K, V, n, q, sc, out, H, d, mode, ids);
            best = dt < best ? dt : best;
        }
        printf(" | %s %.1f us %.1f GMAC/s %.0f%% of fma", names[mode], best * 1e6,
               macs / best / 1e9, 100 * macs / best / p_fma);
    }
    printf("\n");
    free(K);
    free(V);
    free(q);
    free(sc);
    free(out);
}

static void bench_attention(double p_fma, int trials)
{
    bench_attention_kv(DTYPE_F16, p_fma, trials);
    bench_attention_kv(DTYPE_BF16, p_fma, trials);
}

/* Float weights only (f32, f16, bf16), 1 thread: decode at 1..8 tokens
 * (GB/s of weights from memory, share of the read loop; 1 token also on 2
 * threads) and prefill at 16..512 tokens (share of the FMA peak). */
static void bench_float(double p_fma, int trials)
{
    static const enum dtype types[] = {DTYPE_F16, DTYPE_BF16, DTYPE_F32};
    static const int dtoks[] = {1, 2, 3, 4, 6, 8};
    static const int ptoks[] = {16, 64, 512};
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        const enum dtype wt = types[ti];
        struct shape shapes[2] = {{4864, 896}, {896, 4864}};
        for (int s = 0; s < 2; s++) {
            printf("%-4s %4dx%-4d decode:", dtype_info(wt)->name, shapes[s].rows, shapes[s].k);
            for (size_t i = 0; i < sizeof(dtoks) / sizeof(dtoks[0]); i++) {
                double g, r = bench_decode_n(wt, shapes[s], 1, dtoks[i], trials, &g);
                printf(" %d:%.1f GB/s %.0f%%", dtoks[i], g, 100 * r);
                fflush(stdout);
            }
            double g2, r2 = bench_decode_n(wt, shapes[s], 2, 1, trials, &g2);
            printf(" | 2 thr 1:%.1f GB/s %.0f%%\n", g2, 100 * r2);
            printf("%-4s %4dx%-4d prefill:", dtype_info(wt)->name, shapes[s].rows, shapes[s].k);
            for (size_t i = 0; i < sizeof(ptoks) / sizeof(ptoks[0]); i++) {
                double p = bench_prefill(wt, shapes[s], ptoks[i]);
                printf(" %d:%.1f GMAC/s %.0f%%", ptoks[i], p / 1e9, 100 * p / p_fma);
                fflush(stdout);
            }
            printf("\n");
        }
    }
}

int main(int argc, char **argv)
{
    kern_init();
    if (argc > 1) {
        for (int i = 0; i < KERN_ISA_COUNT; i++)
            if (strcmp(argv[1], kern_isa_name((enum kern_isa)i)) == 0)
                kern_set_isa((enum kern_isa)i);
    }
    const int trials = argc > 2 ? atoi(argv[2]) : 9;
    const int packed_only = argc > 3 && strcmp(argv[3], "packed") == 0;
    const int attention_only = argc > 3 && strcmp(argv[3], "attention") == 0;
    const int float_only = argc > 3 && strcmp(argv[3], "float") == 0;
    if (attention_only) {
        /* the FMA at the level's width: ymm below AVX-512 */
        bench_attention(kern_isa() < KERN_ISA_AVX512 ? peak(3) : peak(0), trials);
        return 0;
    }
    rd_buf = aligned_alloc(64, BIG);
    memset(rd_buf, 1, BIG);
    printf("isa %s\n", kern_isa_name(kern_isa()));
    double bw1[9], bw2[9];
    for (int i = 0; i < 9; i++) {
        bw1[i] = read_gbs(1);
        bw2[i] = read_gbs(2);
    }
    double p_fma = peak(0), p_vnni = peak(1), p_bf16 = peak(2);
    if (float_only) {
        /* the FMA at the level's width: ymm below AVX-512 */
        const double p_lvl = kern_isa() < KERN_ISA_AVX512 ? peak(3) : p_fma;
        printf("read loop (median): %.1f GB/s 1 thread; fma peak (%s) %.1f G multiply-adds/s\n",
               median(bw1, 9), kern_isa() < KERN_ISA_AVX512 ? "ymm" : "zmm", p_lvl / 1e9);
        bench_float(p_lvl, trials);
        return 0;
    }
    printf("read loop (median): %.1f GB/s 1 thread, %.1f GB/s 2 threads\n", median(bw1, 9),
           median(bw2, 9));
    printf("peaks, G multiply-adds/s per core: fma %.1f (%.0f GFLOP/s), vpdpbusd %.1f, vdpbf16ps "
           "%.1f\n",
           p_fma / 1e9, 2 * p_fma / 1e9, p_vnni / 1e9, p_bf16 / 1e9);
    static const enum dtype types[] = {DTYPE_Q8_0, DTYPE_F16,  DTYPE_Q4_0, DTYPE_Q4_K,
                                       DTYPE_Q6_K, DTYPE_BF16, DTYPE_F32};
    const size_t n_types = packed_only ? 0 : sizeof(types) / sizeof(types[0]);
    if (n_types)
        printf("%-5s %-10s | %-22s | %-22s | %s\n", "type", "shape", "decode 1 thread",
               "decode 2 threads", "prefill 512 tok, 1 thread");
    for (size_t ti = 0; ti < n_types; ti++) {
        enum dtype wt = types[ti];
        int kq = dtype_info(wt)->blck == 256;
        struct shape shapes[2] = {{4864, kq ? 1024 : 896}, {896, 4864}};
        double pk = wt == DTYPE_F32 || wt == DTYPE_F16 ? p_fma : wt == DTYPE_BF16 ? p_bf16 : p_vnni;
        for (int s = 0; s < 2; s++) {
            double g1, g2;
            double r1 = bench_decode(wt, shapes[s], 1, trials, &g1);
            double r2 = bench_decode(wt, shapes[s], 2, trials, &g2);
            double p = bench_prefill(wt, shapes[s], 512);
            char sd[32];
            snprintf(sd, sizeof sd, "%dx%d", shapes[s].rows, shapes[s].k);
            printf("%-5s %-10s | %5.1f GB/s %4.0f%% of bw | %5.1f GB/s %4.0f%% of bw | %6.1f "
                   "GMAC/s %3.0f%% of peak\n",
                   dtype_info(wt)->name, sd, g1, 100 * r1, g2, 100 * r2, p / 1e9, 100 * p / pk);
            fflush(stdout);
        }
    }
    if (!packed_only) bench_attention(p_fma, trials);
    static const enum dtype ptypes[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof(ptypes) / sizeof(ptypes[0]); ti++) {
        const int kq = dtype_info(ptypes[ti])->blck == 256;
        struct shape pshapes[3] = {{4864, kq ? 1024 : 896}, {896, 4864}, {896, kq ? 1024 : 896}};
        for (int s = 0; s < 3; s++) {
            bench_packed_batches(ptypes[ti], pshapes[s], trials, median(bw1, 9), p_vnni);
            fflush(stdout);
        }
    }
    free(rd_buf);
    return 0;
}
