/*
 * vecmath.h - element-wise transcendental ops of the forward pass (SiLU
 * gating, attention softmax) with our own exp, so they vectorize.
 *
 * exp(x) = 2^n * e^f with n = round(x / ln 2) and f = x - n ln 2 (two-part
 * ln 2), e^f from a degree-6 polynomial on [-ln2/2, ln2/2]: relative error
 * ~2e-7, close to float rounding. Inputs below -87.3 give 0, above 88.7 are
 * clamped to 88.7.
 *
 * Every element is computed by the same instruction sequence whatever its
 * index (tails use masked or padded vector code), and sums run in a fixed
 * lane order: L interleaved partial sums, partial l adding the elements i
 * with i % L == l in index order, then the partials in order (L = 16 at the
 * scalar and AVX-512 levels, 8 at AVX2 and AVX-VNNI). So results depend only
 * on the inputs and n. Levels differ slightly (FMA in SIMD, separate mul/add
 * in the scalar reference); the AVX2 and AVX-512 elements agree.
 *
 * Thread safety: pure.
 */
#ifndef INFERD_KERNELS_VECMATH_H
#define INFERD_KERNELS_VECMATH_H

/* g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] */
void kern_silu_mul(float *g, const float *u, int n);

/* The weights of a softmax of scale * x, not yet normalized: x[i] becomes
 * exp(scale * x[i] - max_j scale * x[j]); returns their sum (a fixed lane
 * order per level), which the caller divides by once, after the weighted
 * sum, instead of scaling every weight. scale > 0. */
float kern_softmax_exp(float *x, int n, float scale);

/* ISA bodies, selected by kern_isa(). */
void kern__silu_mul_ref(float *g, const float *u, int n);
float kern__softmax_exp_ref(float *x, int n, float scale);
void kern__silu_mul_avx2(float *g, const float *u, int n);
float kern__softmax_exp_avx2(float *x, int n, float scale);
void kern__silu_mul_avx512(float *g, const float *u, int n);
float kern__softmax_exp_avx512(float *x, int n, float scale);

#endif
