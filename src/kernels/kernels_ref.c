/*
 * kernels_ref.c - the scalar reference: conversions, quantizers and
 * dequantizers for every weight type, activation quantization, and the
 * scalar level of every dispatched operation.
 *
 * This file *defines* the numbers. The matmul here is one dot product per
 * output element written exactly as the canonical arithmetic in
 * kernels_impl.h says; the SIMD files must reproduce it bit for bit (the
 * unit tests compare them with ==). Nothing here is tuned for speed beyond
 * what keeps the tests quick.
 *
 * Quantizers (used by the test-model maker, never on the hot path):
 *   q8_0  d = amax / 127, q = round(x / d)
 *   q4_0  d = (value of largest magnitude) / -8, q = min(15, (int)(x / d + 8.5))
 *   q4_K  per 32: scale = (max - min) / 15 with min clamped to <= 0; the 8
 *         scales and 8 (negated) mins are quantized to 6 bits against the
 *         super-block's largest; quants use the rounded scales.
 *   q5_K  the same search with 31 in place of 15 (kquant_block).
 *   q6_K  per 16: scale = (value of largest magnitude) / -32; the 16 scales
 *         are quantized to int8 against the largest; quants use the rounded
 *         scales, clamped to [-32, 31].
 * Activations (kern_quantize_act): q8_0 and q8_K both use d = amax / 127, so
 * quants stay in [-127, 127] (the AVX2 sign trick needs -128 never to occur).
 *
 * Thread safety: pure functions.
 */
#include "kernels/kernels.h"

#include "base/check.h"
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include <math.h>
#include <string.h>

/* ---- conversions ---- */

float kern_f16_to_f32(uint16_t h)
{
    return kern__f16_to_f32(h);
}

uint16_t kern_f32_to_f16(float f)
{
    return kern__f32_to_f16(f);
}

float kern_bf16_to_f32(uint16_t h)
{
    return kern__bf16_to_f32(h);
}

uint16_t kern_f32_to_bf16(float f)
{
    return kern__f32_to_bf16(f);
}

/* ---- weight quantizers ---- */

static float amax_of(const float *x, int n)
{
    float a = 0.0f;
    for (int i = 0; i < n; i++)
        a = fmaxf(a, fabsf(x[i]));
    return a;
}

/* The element of largest magnitude (first one on ties), sign kept. */
static float signed_max_of(const float *x, int n)
{
    float a = 0.0f, m = 0.0f;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > a) {
            a = fabsf(x[i]);
            m = x[i];
        }
    }
    return m;
}

/* round(v) clamped to [lo, hi]; clamping in float first keeps NaN and huge
 * values away from the (undefined) float-to-int conversion: NaN gives lo. */
static int round_clamp(float v, int lo, int hi)
{
    v = fminf(fmaxf(v, (float)lo), (float)hi);
    return (int)roundf(v);
}

static void quantize_q8_0(const float *x, struct block_q8_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += QK8_0) {
        float d = amax_of(x, QK8_0) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kern__f32_to_f16(d);
        for (int i = 0; i < QK8_0; i++)
            y[b].qs[i] = (int8_t)round_clamp(x[i] * id, -127, 127);
    }
}

static void quantize_q4_0(const float *x, struct block_q4_0 *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += QK4_0) {
        float d = signed_max_of(x, QK4_0) / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = kern__f32_to_f16(d);
        for (int i = 0; i < 16; i++) {
            /* x * id lies in [-8, 8]; +8.5 and truncation round half up */
            int lo = (int)fminf(fmaxf(x[i] * id + 8.5f, 0.0f), 15.0f);
            int hi = (int)fminf(fmaxf(x[i + 16] * id + 8.5f, 0.0f), 15.0f);
            y[b].qs[i] = (uint8_t)(lo | hi << 4);
        }
    }
}

static void q4k_pack_scales(uint8_t s[12], const int sc[8], const int m[8])
{
    memset(s, 0, 12);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] & 63);
        s[j + 4] = (uint8_t)(m[j] & 63);
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
}

/* The search q4_K and q5_K share, for one super-block of x: quants 0..qmax
 * (15 or 31) into q in element order, the f16 d and dmin, the packed
 * six-bit scales and mins. */
static void kquant_block(const float *x, int qmax, uint8_t q[QK_K], uint16_t *d16, uint16_t *dmin16,
                         uint8_t scales[12])
{
    float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *s = x + 32 * j;
        float lo = s[0], hi = s[0];
        for (int i = 1; i < 32; i++) {
            lo = fminf(lo, s[i]);
            hi = fmaxf(hi, s[i]);
        }
        if (lo > 0.0f) lo = 0.0f;
        scale[j] = (hi - lo) / (float)qmax;
        mins[j] = -lo;
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, mins[j]);
    }
    float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    *d16 = kern__f32_to_f16(d);
    *dmin16 = kern__f32_to_f16(dmin);
    float dq = kern__f16_to_f32(*d16), dminq = kern__f16_to_f32(*dmin16);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = dq > 0.0f ? round_clamp(scale[j] / dq, 0, 63) : 0;
        m[j] = dminq > 0.0f ? round_clamp(mins[j] / dminq, 0, 63) : 0;
    }
    q4k_pack_scales(scales, sc, m);
    for (int j = 0; j < 8; j++) {
        float step = dq * (float)sc[j], off = dminq * (float)m[j];
        for (int i = 0; i < 32; i++) {
            float v = step > 0.0f ? (x[32 * j + i] + off) / step : 0.0f;
            q[32 * j + i] = (uint8_t)round_clamp(v, 0, qmax);
        }
    }
}

/* The low nibbles of q (element order, 0..31) in q4_K's order. */
static void kquant_pack_nibbles(const uint8_t q[QK_K], uint8_t qs[QK_K / 2])
{
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 15) | (q[64 * c + 32 + l] & 15) << 4);
}

static void quantize_q4_K(const float *x, struct block_q4_K *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        uint8_t q[QK_K];
        kquant_block(x, 15, q, &y[b].d, &y[b].dmin, y[b].scales);
        kquant_pack_nibbles(q, y[b].qs);
    }
}

static void quantize_q5_K(const float *x, struct block_q5_K *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        uint8_t q[QK_K];
        kquant_block(x, 31, q, &y[b].d, &y[b].dmin, y[b].scales);
        kquant_pack_nibbles(q, y[b].qs);
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int e = 0; e < QK_K; e++)
            y[b].qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    }
}

static void quantize_q6_K(const float *x, struct block_q6_K *y, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++, x += QK_K) {
        float scale[16], max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < 16; j++) {
            scale[j] = signed_max_of(x + 16 * j, 16) / -32.0f;
            if (fabsf(scale[j]) > max_abs) {
                max_abs = fabsf(scale[j]);
                max_scale = scale[j];
            }
        }
        float d = max_scale / -128.0f;
        y[b].d = kern__f32_to_f16(d);
        float dq = kern__f16_to_f32(y[b].d);
        uint8_t q[QK_K];
        for (int j = 0; j < 16; j++) {
            int sc = dq != 0.0f ? round_clamp(scale[j] / dq, -128, 127) : 0;
            y[b].scales[j] = (int8_t)sc;
            float step = dq * (float)sc;
            for (int i = 0; i < 16; i++) {
                float v = step != 0.0f ? x[16 * j + i] / step : 0.0f;
                q[16 * j + i] = (uint8_t)(round_clamp(v, -32, 31) + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            const uint8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                int q1 = qq[l], q2 = qq[32 + l], q3 = qq[64 + l], q4 = qq[96 + l];
                y[b].ql[64 * h + l] = (uint8_t)((q1 & 15) | (q3 & 15) << 4);
                y[b].ql[64 * h + 32 + l] = (uint8_t)((q2 & 15) | (q4 & 15) << 4);
                y[b].qh[32 * h + l] =
                    (uint8_t)(q1 >> 4 | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    }
}

static void check_row(enum dtype t, int64_t n)
{
    const struct dtype_info *ti = dtype_info((uint32_t)t);
    CHECK(ti->name != NULL);
    CHECK(n >= 0 && n % ti->blck == 0);
}

void kern_quantize_row(enum dtype t, const float *x, void *y, int64_t n)
{
    check_row(t, n);
    switch (t) {
    case DTYPE_F32:
        memcpy(y, x, (size_t)n * sizeof(float));
        return;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)y)[i] = kern__f32_to_f16(x[i]);
        return;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)y)[i] = kern__f32_to_bf16(x[i]);
        return;
    case DTYPE_Q8_0:
        quantize_q8_0(x, y, n / QK8_0);
        return;
    case DTYPE_Q4_0:
        quantize_q4_0(x, y, n / QK4_0);
        return;
    case DTYPE_Q4_K:
        quantize_q4_K(x, y, n / QK_K);
        return;
    case DTYPE_Q5_K:
        quantize_q5_K(x, y, n / QK_K);
        return;
    case DTYPE_Q6_K:
        quantize_q6_K(x, y, n / QK_K);
        return;
    case DTYPE_Q8_K:
        kern_quantize_act(DTYPE_Q4_K, x, y, (int)n);
        return;
    default:
        CHECK(!"kern_quantize_row: unsupported type");
    }
}

void kern_dequantize_row(enum dtype t, const void *x, float *y, int64_t n)
{
    check_row(t, n);
    switch (t) {
    case DTYPE_F32:
        memcpy(y, x, (size_t)n * sizeof(float));
        return;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++)
            y[i] = kern__f16_to_f32(kern__ld16((const uint16_t *)x + i));
        return;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            y[i] = kern__bf16_to_f32(kern__ld16((const uint16_t *)x + i));
        return;
    case DTYPE_Q8_0:
        for (int64_t b = 0; b < n / QK8_0; b++) {
            const struct block_q8_0 *blk = (const struct block_q8_0 *)x + b;
            float d = kern__f16_to_f32(blk->d);
            for (int i = 0; i < QK8_0; i++)
                y[b * QK8_0 + i] = d * (float)blk->qs[i];
        }
        return;
    case DTYPE_Q4_0:
        for (int64_t b = 0; b < n / QK4_0; b++) {
            const struct block_q4_0 *blk = (const struct block_q4_0 *)x + b;
            float d = kern__f16_to_f32(blk->d);
            for (int i = 0; i < 16; i++) {
                y[b * QK4_0 + i] = d * (float)((blk->qs[i] & 15) - 8);
                y[b * QK4_0 + i + 16] = d * (float)((blk->qs[i] >> 4) - 8);
            }
        }
        return;
    case DTYPE_Q4_K:
    case DTYPE_Q5_K: { /* same head (d, dmin, scales); only the quant read differs */
        const bool q5 = t == DTYPE_Q5_K;
        const size_t bs = q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
        for (int64_t b = 0; b < n / QK_K; b++) {
            const void *wb = (const char *)x + (size_t)b * bs;
            const struct block_q4_K *blk = wb;
            float d = kern__f16_to_f32(blk->d), dmin = kern__f16_to_f32(blk->dmin);
            for (int j = 0; j < 8; j++) {
                int sc, m;
                q4k_scale_min(blk->scales, j, &sc, &m);
                float step = d * (float)sc, off = dmin * (float)m;
                for (int i = 0; i < 32; i++) {
                    const int e = 32 * j + i;
                    y[b * QK_K + e] =
                        step * (float)(q5 ? q5k_quant(wb, e) : q4k_quant(wb, e)) - off;
                }
            }
        }
        return;
    }
    case DTYPE_Q6_K:
        for (int64_t b = 0; b < n / QK_K; b++) {
            const struct block_q6_K *blk = (const struct block_q6_K *)x + b;
            float d = kern__f16_to_f32(blk->d);
            for (int e = 0; e < QK_K; e++)
                y[b * QK_K + e] = d * (float)blk->scales[e / 16] * (float)(q6k_quant(blk, e) - 32);
        }
        return;
    case DTYPE_Q8_K:
        for (int64_t b = 0; b < n / QK_K; b++) {
            const struct block_q8_K *blk = (const struct block_q8_K *)x + b;
            for (int i = 0; i < QK_K; i++)
                y[b * QK_K + i] = blk->d * (float)blk->qs[i];
        }
        return;
    default:
        CHECK(!"kern_dequantize_row: unsupported type");
    }
}

/* ---- activations ---- */

enum dtype kern_act_type(enum dtype wt)
{
    switch (wt) {
    case DTYPE_Q8_0:
    case DTYPE_Q4_0:
        return DTYPE_Q8_0;
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K:
        return DTYPE_Q8_K;
    case DTYPE_BF16:
        return DTYPE_BF16;
    case DTYPE_F32:
    case DTYPE_F16:
        return DTYPE_F32;
    default:
        CHECK(!"kern_act_type: unsupported weight type");
        return DTYPE_F32;
    }
}

size_t kern_act_row_size(enum dtype wt, int k)
{
    return dtype_row_size(kern_act_type(wt), k);
}

void kern_quantize_act(enum dtype wt, const float *x, void *xq, int k)
{
    enum dtype at = kern_act_type(wt);
    check_row(at, k);
    switch (at) {
    case DTYPE_F32:
        memcpy(xq, x, (size_t)k * sizeof(float));
        return;
    case DTYPE_BF16:
        for (int i = 0; i < k; i++)
            ((uint16_t *)xq)[i] = kern__f32_to_bf16(x[i]);
        return;
    case DTYPE_Q8_0:
        if (kern_isa() == KERN_ISA_AVX512) {
            kern__quantize_q8_0_avx512(x, xq, k);
            return;
        }
        quantize_q8_0(x, xq, k / QK8_0);
        return;
    case DTYPE_Q8_K:
        if (kern_isa() == KERN_ISA_AVX512) {
            kern__quantize_q8_K_avx512(x, xq, k);
            return;
        }
        for (int b = 0; b < k / QK_K; b++, x += QK_K) {
            struct block_q8_K *y = (struct block_q8_K *)xq + b;
            float d = amax_of(x, QK_K) / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            y->d = d;
            for (int j = 0; j < 16; j++) {
                int sum = 0;
                for (int i = 0; i < 16; i++) {
                    int q = round_clamp(x[16 * j + i] * id, -127, 127);
                    y->qs[16 * j + i] = (int8_t)q;
                    sum += q;
                }
                y->bsums[j] = (int16_t)sum;
            }
        }
        return;
    default:
        CHECK(!"kern_quantize_act: bad activation type");
    }
}

/* ---- canonical per-element dot products ---- */

static float dot_q8_0(const struct block_q8_0 *w, const struct block_q8_0 *x, int nb)
{
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int i = 0; i < QK8_0; i++)
            isum += w[b].qs[i] * x[b].qs[i];
        float s = kern__f16_to_f32(w[b].d) * kern__f16_to_f32(x[b].d);
        acc = fmaf((float)isum, s, acc);
    }
    return acc;
}

static float dot_q4_0(const struct block_q4_0 *w, const struct block_q8_0 *x, int nb)
{
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int isum = 0;
        for (int i = 0; i < 16; i++) {
            isum += ((w[b].qs[i] & 15) - 8) * x[b].qs[i];
            isum += ((w[b].qs[i] >> 4) - 8) * x[b].qs[i + 16];
        }
        float s = kern__f16_to_f32(w[b].d) * kern__f16_to_f32(x[b].d);
        acc = fmaf((float)isum, s, acc);
    }
    return acc;
}

/* q4_K, or q5_K (q5): the two blocks share their head (d, dmin, scales),
 * and the chain; only the quants differ. */
static float dot_q45_K(const void *w, const struct block_q8_K *x, int nb, bool q5)
{
    const size_t bs = q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        const void *wb = (const char *)w + (size_t)b * bs;
        const struct block_q4_K *head = wb; /* d, dmin, scales: same offsets in q5_K */
        int32_t A = 0, B = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m, isum = 0;
            q4k_scale_min(head->scales, j, &sc, &m);
            for (int i = 0; i < 32; i++) {
                const int e = 32 * j + i;
                isum += (q5 ? q5k_quant(wb, e) : q4k_quant(wb, e)) * x[b].qs[e];
            }
            A += sc * isum;
            B += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
        }
        float dx = x[b].d;
        acc = fmaf((float)A, kern__f16_to_f32(head->d) * dx, acc);
        acc = fmaf((float)-B, kern__f16_to_f32(head->dmin) * dx, acc);
    }
    return acc;
}

static float dot_q6_K(const struct block_q6_K *w, const struct block_q8_K *x, int nb)
{
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        int32_t A = 0, C = 0;
        for (int j = 0; j < 16; j++) {
            int isum = 0;
            for (int i = 0; i < 16; i++)
                isum += q6k_quant(&w[b], 16 * j + i) * x[b].qs[16 * j + i];
            A += w[b].scales[j] * isum;
            C += w[b].scales[j] * x[b].bsums[j];
        }
        A -= 32 * C;
        acc = fmaf((float)A, kern__f16_to_f32(w[b].d) * x[b].d, acc);
    }
    return acc;
}

/* 16-lane canonical dot of a weight row (f32, f16 or bf16 elements) with an
 * f32 vector. */
static float dot_float(enum dtype wt, const void *w, const float *x, int k)
{
    float lane[16] = {0};
    int k16 = (k + 15) / 16 * 16;
    for (int i = 0; i < k16; i++) {
        float wi = 0.0f, xi = 0.0f;
        if (i < k) {
            xi = x[i];
            if (wt == DTYPE_F32)
                wi = kern__ldf((const float *)w + i);
            else if (wt == DTYPE_F16)
                wi = kern__f16_to_f32(kern__ld16((const uint16_t *)w + i));
            else
                wi = kern__bf16_to_f32(kern__ld16((const uint16_t *)w + i));
        }
        lane[i % 16] = fmaf(wi, xi, lane[i % 16]);
    }
    return kern__tree16(lane);
}

static float dot_bf16(const uint16_t *w, const uint16_t *x, int k)
{
    float lane[16] = {0};
    int k16 = (k + 15) / 16 * 16;
    for (int i = 0; i < k16; i++) {
        float wi = 0.0f, xi = 0.0f;
        if (i < k) {
            wi = kern__bf16_to_f32(kern__ld16(w + i));
            xi = kern__bf16_to_f32(kern__ld16(x + i));
        }
        lane[i % 16] = fmaf(wi, xi, lane[i % 16]);
    }
    return kern__tree16(lane);
}

void kern__matmul_check(enum dtype wt, int k, int r0, int r1, int n_tok)
{
    const struct dtype_info *ti = dtype_info((uint32_t)wt);
    CHECK(ti->name != NULL && wt != DTYPE_Q8_K);
    CHECK(k > 0 && k % ti->blck == 0);
    CHECK(0 <= r0 && r0 <= r1 && n_tok >= 0);
}

void kern__matmul_ref(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                      const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy)
{
    kern__matmul_check(wt, k, r0, r1, n_tok);
    for (int t = 0; t < n_tok; t++) {
        const void *x = (const char *)xq + (size_t)t * x_row_bytes;
        for (int r = r0; r < r1; r++) {
            const void *w = (const char *)W + (size_t)r * w_row_bytes;
            float v;
            switch (wt) {
            case DTYPE_Q8_0:
                v = dot_q8_0(w, x, k / QK8_0);
                break;
            case DTYPE_Q4_0:
                v = dot_q4_0(w, x, k / QK4_0);
                break;
            case DTYPE_Q4_K:
                v = dot_q45_K(w, x, k / QK_K, false);
                break;
            case DTYPE_Q5_K:
                v = dot_q45_K(w, x, k / QK_K, true);
                break;
            case DTYPE_Q6_K:
                v = dot_q6_K(w, x, k / QK_K);
                break;
            case DTYPE_BF16:
                v = dot_bf16(w, x, k);
                break;
            case DTYPE_F32:
            case DTYPE_F16:
                v = dot_float(wt, w, x, k);
                break;
            default:
                CHECK(!"kern_matmul: unsupported weight type");
                return;
            }
            y[(size_t)t * ldy + r] = v;
        }
    }
}

/* ---- KV cache and small reductions ---- */

static float kv_elem(enum dtype kv, const void *row, int i)
{
    switch (kv) {
    case DTYPE_F32:
        return kern__ldf((const float *)row + i);
    case DTYPE_F16:
        return kern__f16_to_f32(kern__ld16((const uint16_t *)row + i));
    case DTYPE_BF16:
        return kern__bf16_to_f32(kern__ld16((const uint16_t *)row + i));
    default:
        CHECK(!"kv: unsupported cache type");
        return 0.0f;
    }
}

static void kv_dot_ref(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int d,
                       float *out)
{
    CHECK(kv == DTYPE_F32 || kv == DTYPE_F16 || kv == DTYPE_BF16);
    for (int j = 0; j < n_rows; j++) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int e = 0; e < d; e++)
            c[e % 4] = fmaf(kv_elem(kv, kt, e * ld + j), q[e], c[e % 4]);
        out[j] = (c[0] + c[1]) + (c[2] + c[3]);
    }
}

static void kv_accum_ref(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w,
                         int d, float *out)
{
    for (int j = 0; j < n_rows; j++) {
        const void *row = (const char *)v + (size_t)j * stride;
        for (int i = 0; i < d; i++)
            out[i] = fmaf(w[j], kv_elem(kv, row, i), out[i]);
    }
}

static void kv_store_ref(enum dtype kv, const float *x, void *y, int n)
{
    switch (kv) {
    case DTYPE_F32:
        memcpy(y, x, (size_t)n * sizeof(float));
        return;
    case DTYPE_F16:
        for (int i = 0; i < n; i++)
            ((uint16_t *)y)[i] = kern__f32_to_f16(x[i]);
        return;
    case DTYPE_BF16:
        for (int i = 0; i < n; i++)
            ((uint16_t *)y)[i] = kern__f32_to_bf16(x[i]);
        return;
    default:
        CHECK(!"kern_kv_store: unsupported cache type");
    }
}

static float dot_f32_ref(const float *a, const float *b, int n)
{
    return dot_float(DTYPE_F32, a, b, n);
}

static float sum_sq_f32_ref(const float *x, int n)
{
    return dot_float(DTYPE_F32, x, x, n);
}

const struct kern__ops kern__ops_scalar = {
    .matmul = kern__matmul_ref,
    .matmul_packed = kern__matmul_packed_ref,
    .kv_dot = kv_dot_ref,
    .kv_accum = kv_accum_ref,
    .kv_store = kv_store_ref,
    .dot_f32 = dot_f32_ref,
    .sum_sq_f32 = sum_sq_f32_ref,
};
