/*
 * vecmath.c - scalar reference of vecmath.h and the dispatch by kern_isa().
 */
#include "kernels/vecmath.h"

#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Polynomial for e^f, f in [-ln2/2, ln2/2] (Taylor coefficients up to f^6). */
#define EXP_C2 0.5f
#define EXP_C3 0.16666667f
#define EXP_C4 0.041666668f
#define EXP_C5 0.008333334f
#define EXP_C6 0.0013888889f
#define LN2_HI 0.693145751953125f
#define LN2_LO 1.428606765330187e-06f
#define LOG2E  1.44269504088896341f

static float exp_ref(float x)
{
    if (x < -87.3f) return 0.0f;
    if (x > 88.7f) x = 88.7f;
    float n = rintf(x * LOG2E);
    float f = (x - n * LN2_HI) - n * LN2_LO;
    float p = EXP_C6;
    p = p * f + EXP_C5;
    p = p * f + EXP_C4;
    p = p * f + EXP_C3;
    p = p * f + EXP_C2;
    p = p * f + 1.0f;
    p = p * f + 1.0f;
    int32_t bits;
    memcpy(&bits, &p, 4);
    bits += (int32_t)((uint32_t)(int32_t)n << 23);
    memcpy(&p, &bits, 4);
    return p;
}

void kern__silu_mul_ref(float *g, const float *u, int n)
{
    for (int i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + exp_ref(-g[i])) * u[i];
}

float kern__softmax_exp_ref(float *x, int n, float scale)
{
    /* scale > 0 and rounding are monotone: max(scale * x) = scale * max(x).
     * 16 interleaved partial sums, like the AVX-512 lanes; the reference
     * keeps the same structure so tails are not special. */
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    mx *= scale;
    float part[16] = {0};
    for (int i = 0; i < n; i++) {
        x[i] = exp_ref(x[i] * scale - mx);
        part[i % 16] += x[i];
    }
    float sum = 0;
    for (int i = 0; i < 16; i++)
        sum += part[i];
    return sum;
}

/* One row per ISA level, indexed by kern_isa(). */
static const struct {
    void (*silu_mul)(float *g, const float *u, int n);
    float (*softmax_exp)(float *x, int n, float scale);
} ops[KERN_ISA_COUNT] = {
    [KERN_ISA_SCALAR] = {kern__silu_mul_ref, kern__softmax_exp_ref},
    [KERN_ISA_AVX2] = {kern__silu_mul_avx2, kern__softmax_exp_avx2},
    [KERN_ISA_AVXVNNI] = {kern__silu_mul_avx2, kern__softmax_exp_avx2},
    [KERN_ISA_AVX512] = {kern__silu_mul_avx512, kern__softmax_exp_avx512},
};

void kern_silu_mul(float *g, const float *u, int n)
{
    ops[kern_isa()].silu_mul(g, u, n);
}

float kern_softmax_exp(float *x, int n, float scale)
{
    return ops[kern_isa()].softmax_exp(x, n, scale);
}
