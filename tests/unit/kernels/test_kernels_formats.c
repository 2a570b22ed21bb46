/*
 * test_kernels_formats.c - conversions and block formats: f16/bf16 exact
 * conversions (exhaustive where the space allows), SIMD conversions equal
 * the scalar ones, hand-built blocks decode to hand-computed values (pins
 * the GGUF element order), quantize -> dequantize error bounds.
 */
#include "test.h"

#include "kern_test_util.h"
#include "kernels/kernels.h"

#include <unistd.h>

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int is_f16_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

TEST(f16_round_trip_all_65536)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_f16_to_f32((uint16_t)h);
        uint16_t back = kern_f32_to_f16(f);
        if (is_f16_nan((uint16_t)h)) {
            if (!isnan(f) || !is_f16_nan(back)) bad++;
        } else if (back != h) {
            bad++;
        }
    }
    EXPECT_EQ_INT(bad, 0);
}

TEST(f16_values)
{
    EXPECT_EQ_INT(kern_f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ_INT(kern_f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ_INT(kern_f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ_INT(kern_f32_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ_INT(kern_f32_to_f16(65520.0f), 0x7c00); /* tie goes to even = inf */
    EXPECT_EQ_INT(kern_f32_to_f16(INFINITY), 0x7c00);
    EXPECT_EQ_INT(kern_f32_to_f16(-INFINITY), 0xfc00);
    EXPECT_EQ_INT(kern_f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ_INT(kern_f32_to_f16(0x1p-24f), 0x0001);        /* smallest subnormal */
    EXPECT_EQ_INT(kern_f32_to_f16(0x1p-25f), 0x0000);        /* tie to even: 0 */
    EXPECT_EQ_INT(kern_f32_to_f16(0x1.8p-25f), 0x0001);      /* above the tie */
    EXPECT_EQ_INT(kern_f32_to_f16(0x1.8p-24f), 0x0002);      /* 1.5 ulp: tie to even 2 */
    EXPECT_EQ_INT(kern_f32_to_f16(0x1p-14f), 0x0400);        /* smallest normal */
    EXPECT_EQ_INT(kern_f32_to_f16(0x1.ffcp-15f), 0x0400);    /* subnormal rounding up */
    EXPECT_EQ_INT(kern_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    EXPECT_EQ_INT(kern_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie to even */
    EXPECT_EQ_INT(kern_f32_to_f16(1.0f + 0x1.01p-11f), 0x3c01);
    EXPECT(is_f16_nan(kern_f32_to_f16(NAN)));
    EXPECT(is_f16_nan(kern_f32_to_f16(u2f(0x7f800001)))); /* payload only in low bits */
    EXPECT(kern_f16_to_f32(0x0001) == 0x1p-24f);
    EXPECT(kern_f16_to_f32(0x7bff) == 65504.0f);
    EXPECT(isinf(kern_f16_to_f32(0xfc00)) && kern_f16_to_f32(0xfc00) < 0);
    EXPECT(isnan(kern_f16_to_f32(0x7e00)));
}

/* Nearest-even property on random floats: no other f16 is closer, and a
 * tie picks the even one. Independent of how the conversion is written. */
TEST(f16_nearest_random)
{
    struct rng r = {12345};
    int bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)rng_next(&r);
        /* concentrate on the f16 range */
        u = (u & 0x80000000) | (0x33000000 + (u & 0x7fffffff) % (0x47800000 - 0x33000000));
        float f = u2f(u);
        uint16_t h = kern_f32_to_f16(f);
        if ((h & 0x7fff) >= 0x7c00) { /* overflow: only for |f| >= 65520 */
            if (fabsf(f) < 65520.0f) bad++;
            continue;
        }
        double e = fabs((double)f - (double)kern_f16_to_f32(h));
        uint16_t up = (uint16_t)(h + 1), dn = (uint16_t)(h - 1);
        double eu =
            (up & 0x7fff) < 0x7c00 ? fabs((double)f - (double)kern_f16_to_f32(up)) : INFINITY;
        double ed = (h & 0x7fff) ? fabs((double)f - (double)kern_f16_to_f32(dn)) : INFINITY;
        if (e > eu || e > ed) bad++;
        if ((e == eu || e == ed) && (h & 1)) bad++;
    }
    EXPECT_EQ_INT(bad, 0);
}

TEST(bf16_values)
{
    EXPECT_EQ_INT(kern_f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ_INT(kern_f32_to_bf16(u2f(0x3f808000)), 0x3f80); /* tie, even stays */
    EXPECT_EQ_INT(kern_f32_to_bf16(u2f(0x3f818000)), 0x3f82); /* tie, odd rounds up */
    EXPECT_EQ_INT(kern_f32_to_bf16(u2f(0x3f808001)), 0x3f81);
    EXPECT_EQ_INT(kern_f32_to_bf16(u2f(0x3f807fff)), 0x3f80);
    EXPECT_EQ_INT(kern_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80); /* FLT_MAX rounds to inf */
    EXPECT_EQ_INT(kern_f32_to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ_INT(kern_f32_to_bf16(-INFINITY), 0xff80);
    EXPECT_EQ_INT(kern_f32_to_bf16(u2f(0x00018000)), 0x0002); /* subnormals round, not flush */
    uint16_t n = kern_f32_to_bf16(u2f(0x7f800001));           /* NaN whose payload is in low bits */
    EXPECT((n & 0x7f80) == 0x7f80 && (n & 0x7f));
    EXPECT(isnan(kern_bf16_to_f32(kern_f32_to_bf16(NAN))));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kern_bf16_to_f32((uint16_t)h);
        if (f2u(f) != h << 16) bad++;
        if (!isnan(f) && kern_f32_to_bf16(f) != h) bad++;
    }
    EXPECT_EQ_INT(bad, 0);
}

/* kern_kv_store at every level must give the scalar conversion's bits. */
TEST(simd_conversions_match_scalar)
{
    struct rng r = {777};
    enum { N = 4099 };
    float *x = malloc(N * sizeof(float));
    uint16_t *y = malloc(N * sizeof(uint16_t));
    enum kern_isa saved = kern_isa();
    for (int round = 0; round < 64; round++) {
        for (int i = 0; i < N; i++) {
            uint32_t u = (uint32_t)rng_next(&r);
            if (round % 4 == 1)
                u = (u & 0x807fffff) | (0x33000000 + (u % 0x14800000)); /* f16 range */
            if (round % 4 == 2) u &= 0x807fffff;                        /* subnormal */
            if (i % 97 == 0) u = 0x7f800000 | (u & 0x807fffff);         /* inf/nan */
            x[i] = u2f(u);
        }
        for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
            EXPECT_EQ_INT(kern_set_isa((enum kern_isa)isa), 0);
            int n = N - round; /* ragged lengths */
            kern_kv_store(DTYPE_F16, x, y, n);
            int bad = 0;
            for (int i = 0; i < n; i++)
                bad += y[i] != kern_f32_to_f16(x[i]);
            kern_kv_store(DTYPE_BF16, x, y, n);
            for (int i = 0; i < n; i++)
                bad += y[i] != kern_f32_to_bf16(x[i]);
            if (bad)
                fprintf(stderr, "  isa %s: %d mismatches\n", kern_isa_name((enum kern_isa)isa),
                        bad);
            EXPECT_EQ_INT(bad, 0);
        }
    }
    kern_set_isa(saved);
    free(x);
    free(y);
}

/* ---- layout pins: hand-built blocks ---- */

TEST(q4_0_layout)
{
    struct block_q4_0 b;
    b.d = kern_f32_to_f16(1.0f);
    for (int i = 0; i < 16; i++)
        b.qs[i] = (uint8_t)(i | (15 - i) << 4);
    float y[32];
    kern_dequantize_row(DTYPE_Q4_0, &b, y, 32);
    for (int i = 0; i < 16; i++) {
        EXPECT(y[i] == (float)(i - 8));      /* low nibbles: elements 0..15 */
        EXPECT(y[16 + i] == (float)(7 - i)); /* high nibbles: elements 16..31 */
    }
    /* and the quantizer writes that order: max-magnitude -16 gives d = 2 */
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 16);
    kern_quantize_row(DTYPE_Q4_0, x, &b, 32);
    EXPECT(kern_f16_to_f32(b.d) == 2.0f);
    /* q = trunc(x / 2 + 8.5) clamped to 15; qs[i] = q(i) | q(i + 16) << 4 */
    EXPECT_EQ_INT(b.qs[0], 0x80);  /* x = -16 -> 0,  x = 0 -> 8 */
    EXPECT_EQ_INT(b.qs[1], 0x91);  /* x = -15 -> 1,  x = 1 -> 9 */
    EXPECT_EQ_INT(b.qs[15], 0xf8); /* x = -1 -> 8,   x = 15 -> 16, clamped to 15 */
}

TEST(q8_0_layout)
{
    struct block_q8_0 b;
    b.d = kern_f32_to_f16(0.5f);
    for (int i = 0; i < 32; i++)
        b.qs[i] = (int8_t)(i * 7 - 100);
    float y[32];
    kern_dequantize_row(DTYPE_Q8_0, &b, y, 32);
    for (int i = 0; i < 32; i++)
        EXPECT(y[i] == 0.5f * (float)(i * 7 - 100));
    float x[32];
    for (int i = 0; i < 32; i++)
        x[i] = (float)(i - 10) * 0.25f;
    kern_quantize_row(DTYPE_Q8_0, x, &b, 32);
    EXPECT_EQ_INT(b.qs[31], 127); /* amax 5.25 -> 127 */
    EXPECT_EQ_INT(b.qs[10], 0);
    EXPECT(fabsf(kern_f16_to_f32(b.d) - 5.25f / 127.0f) <= 5.25f / 127.0f * 0x1p-11f);
}

TEST(q4_K_layout)
{
    struct block_q4_K b;
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = 10 + 7 * j; /* 10..59: the high 2 bits matter for j >= 4 */
        m[j] = 60 - 5 * j;
    }
    /* packing spelled out from the format: bytes 0..3 scales (low 6 bits) with
     * the top 2 bits of scales 4..7 above; bytes 4..7 mins likewise; bytes
     * 8..11 low nibbles of scales 4..7 and mins 4..7 */
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        b.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    b.d = kern_f32_to_f16(0.5f);
    b.dmin = kern_f32_to_f16(0.25f);
    for (int i = 0; i < 128; i++)
        b.qs[i] = (uint8_t)(i * 37 + 11);
    float y[256];
    kern_dequantize_row(DTYPE_Q4_K, &b, y, 256);
    int bad = 0;
    for (int e = 0; e < 256; e++) {
        int c = e / 64, l = e % 32, j = e / 32;
        int q = (e % 64) < 32 ? b.qs[32 * c + l] & 15 : b.qs[32 * c + l] >> 4;
        float want = 0.5f * (float)(sc[j] * q) - 0.25f * (float)m[j];
        if (y[e] != want) bad++;
    }
    EXPECT_EQ_INT(bad, 0);
    /* two elements by hand: e = 70 is chunk 1, low nibble of qs[38], sub-block 2 */
    EXPECT(y[70] == 0.5f * 24.0f * (float)(((38 * 37 + 11) & 255) & 15) - 0.25f * 50.0f);
    /* e = 250: chunk 3, high nibble of qs[96 + 26], sub-block 7 */
    EXPECT(y[250] == 0.5f * 59.0f * (float)(((122 * 37 + 11) & 255) >> 4) - 0.25f * 25.0f);
}

TEST(q5_K_layout)
{
    struct block_q5_K b;
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = 12 + 6 * j; /* 12..54: the high 2 bits matter for j >= 4 */
        m[j] = 57 - 4 * j;
    }
    /* the scales packed as q4_K's, spelled out again */
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        b.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    b.d = kern_f32_to_f16(0.25f);
    b.dmin = kern_f32_to_f16(0.5f);
    for (int i = 0; i < 128; i++)
        b.qs[i] = (uint8_t)(i * 29 + 5);
    for (int i = 0; i < 32; i++)
        b.qh[i] = (uint8_t)(i * 53 + 17);
    float y[256];
    kern_dequantize_row(DTYPE_Q5_K, &b, y, 256);
    int bad = 0, high = 0;
    for (int e = 0; e < 256; e++) {
        int c = e / 64, l = e % 32, j = e / 32;
        int q = (e % 64) < 32 ? b.qs[32 * c + l] & 15 : b.qs[32 * c + l] >> 4;
        q |= (b.qh[l] >> j & 1) << 4;
        high += q >= 16;
        float want = 0.25f * (float)(sc[j] * q) - 0.5f * (float)m[j];
        if (y[e] != want) bad++;
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT(high > 64 && high < 192); /* the fifth bits are exercised both ways */
    /* by hand: e = 70 is chunk 1, low nibble of qs[38], sub-block 2: bit 2 of qh[6] */
    int q70 = (((38 * 29 + 5) & 255) & 15) | (((6 * 53 + 17) & 255) >> 2 & 1) << 4;
    EXPECT(y[70] == 0.25f * 24.0f * (float)q70 - 0.5f * 49.0f);
    /* e = 250: chunk 3, high nibble of qs[96 + 26], sub-block 7: bit 7 of qh[26] */
    int q250 = (((122 * 29 + 5) & 255) >> 4) | (((26 * 53 + 17) & 255) >> 7) << 4;
    EXPECT(y[250] == 0.25f * 54.0f * (float)q250 - 0.5f * 29.0f);
}

TEST(q6_K_layout)
{
    struct block_q6_K b;
    for (int i = 0; i < 128; i++)
        b.ql[i] = (uint8_t)(i * 5 + 3);
    for (int i = 0; i < 64; i++)
        b.qh[i] = (uint8_t)(i * 11 + 7);
    for (int j = 0; j < 16; j++)
        b.scales[j] = (int8_t)(j * 9 - 70);
    b.d = kern_f32_to_f16(0.125f);
    float y[256];
    kern_dequantize_row(DTYPE_Q6_K, &b, y, 256);
    int bad = 0;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *ql = b.ql + 64 * h, qh = b.qh[32 * h + l];
            int q[4] = {(ql[l] & 15) | (qh & 3) << 4, (ql[l + 32] & 15) | ((qh >> 2) & 3) << 4,
                        (ql[l] >> 4) | ((qh >> 4) & 3) << 4,
                        (ql[l + 32] >> 4) | ((qh >> 6) & 3) << 4};
            for (int p = 0; p < 4; p++) {
                int e = 128 * h + 32 * p + l;
                float want = 0.125f * (float)b.scales[e / 16] * (float)(q[p] - 32);
                if (y[e] != want) bad++;
            }
        }
    EXPECT_EQ_INT(bad, 0);
    /* element 200: half 1, part 2, l = 8: ql[72] >> 4 with qh[40] bits 4..5 */
    int q200 = (b.ql[72] >> 4) | ((b.qh[40] >> 4) & 3) << 4;
    EXPECT(y[200] == 0.125f * (float)b.scales[12] * (float)(q200 - 32));
}

/* kern_dequantize_row agrees with the test's own double decoding. */
TEST(dequantize_matches_independent_decode)
{
    struct rng r = {99};
    enum { K = 1024 };
    float x[K], y[K];
    static uint8_t buf[K * 4];
    for (int ti = 0; ti < N_WTYPES; ti++) {
        enum dtype t = all_wtypes[ti];
        fill_normal(&r, x, K, 0.7f);
        kern_quantize_row(t, x, buf, K);
        kern_dequantize_row(t, buf, y, K);
        int bad = 0;
        for (int e = 0; e < K; e++) {
            double off, v = decode_elem(t, buf, e, &off);
            /* float dequantization rounds at most twice */
            if (fabs((double)y[e] - v) > 3e-7 * (fabs(v) + off)) bad++;
        }
        if (bad) fprintf(stderr, "  %s: %d elements differ\n", dtype_info(t)->name, bad);
        EXPECT_EQ_INT(bad, 0);
    }
}

/* quantize -> dequantize error bounds per type, per block. */
TEST(quantize_error_bounds)
{
    struct rng r = {2024};
    enum { K = 256 * 64 };
    float *x = malloc(K * sizeof(float)), *y = malloc(K * sizeof(float));
    uint8_t *buf = malloc(K * 4);
    for (int ti = 0; ti < N_WTYPES; ti++) {
        enum dtype t = all_wtypes[ti];
        for (int i = 0; i < K; i++)
            x[i] = rng_normal(&r, 1.0f) * (1.0f + (float)(i / 256 % 7));
        kern_quantize_row(t, x, buf, K);
        kern_dequantize_row(t, buf, y, K);
        double se = 0, sx = 0;
        int bad = 0;
        for (int b = 0; b < K / 32; b++) {
            double amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fmax(amax, fabs(x[32 * b + i]));
            for (int i = 0; i < 32; i++) {
                double e = fabs((double)x[32 * b + i] - y[32 * b + i]);
                se += e * e;
                sx += (double)x[32 * b + i] * x[32 * b + i];
                /* worst-case bounds relative to the 32-element block maximum:
                 *   f32 exact; f16/bf16 half an ulp; q8_0 half a step (amax / 254)
                 *   plus the f16 rounding of d; q4_0 one step (amax / 8: the
                 *   max-magnitude's opposite end clamps at +7); q4_K, q5_K and
                 *   q6_K one step of the sub-block scale after 6- / 8-bit scale
                 *   quantization, generous because the super-block shares d. */
                double lim = t == DTYPE_F32    ? 0.0
                             : t == DTYPE_F16  ? fabs(x[32 * b + i]) * 0x1p-11
                             : t == DTYPE_BF16 ? fabs(x[32 * b + i]) * 0x1p-8
                             : t == DTYPE_Q8_0 ? amax * (0.5 / 127 + 0x1p-10)
                             : t == DTYPE_Q4_0 ? amax * (1.0 / 8 + 0x1p-9)
                             : t == DTYPE_Q4_K ? amax * 0.20
                             : t == DTYPE_Q5_K ? amax * 0.10
                                               : amax * 0.06;
                if (e > lim * 1.0001) bad++;
            }
        }
        double rel = sqrt(se / sx);
        /* RMS relative error ceilings (measured values ~ half of these) */
        double rel_lim = t == DTYPE_F32    ? 0.0
                         : t == DTYPE_F16  ? 3e-4
                         : t == DTYPE_BF16 ? 2.5e-3
                         : t == DTYPE_Q8_0 ? 0.01
                         : t == DTYPE_Q4_0 ? 0.15
                         : t == DTYPE_Q4_K ? 0.12
                         : t == DTYPE_Q5_K ? 0.06
                                           : 0.03;
        if (bad || rel > rel_lim)
            fprintf(stderr, "  %s: %d over the bound, rms rel %.5f\n", dtype_info(t)->name, bad,
                    rel);
        EXPECT_EQ_INT(bad, 0);
        EXPECT(rel <= rel_lim);
    }
    free(x);
    free(y);
    free(buf);
}

TEST(quantize_act_formats)
{
    struct rng r = {5};
    enum { K = 512 };
    float x[K];
    fill_normal(&r, x, K, 3.0f);
    x[17] = -10.0f; /* the block maximum, negative */
    static struct block_q8_K qk[K / 256];
    kern_quantize_act(DTYPE_Q4_K, x, qk, K);
    EXPECT_EQ_INT(kern_act_type(DTYPE_Q6_K), DTYPE_Q8_K);
    EXPECT_EQ_INT(kern_act_row_size(DTYPE_Q4_K, K), 2 * sizeof(struct block_q8_K));
    EXPECT_EQ_INT(qk[0].qs[17], -127);
    int bad = 0;
    for (int b = 0; b < K / 256; b++) {
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += qk[b].qs[16 * j + i];
            bad += s != qk[b].bsums[j];
        }
        for (int i = 0; i < 256; i++) {
            bad += qk[b].qs[i] < -127;
            bad += fabsf(qk[b].d * qk[b].qs[i] - x[256 * b + i]) > qk[b].d * 0.5001f;
        }
    }
    EXPECT_EQ_INT(bad, 0);
    static struct block_q8_0 q8[K / 32];
    kern_quantize_act(DTYPE_Q4_0, x, q8, K);
    EXPECT_EQ_INT(kern_act_row_size(DTYPE_Q8_0, K), K / 32 * 34);
    EXPECT_EQ_INT(q8[0].qs[17], -127);
    uint16_t bf[K];
    kern_quantize_act(DTYPE_BF16, x, bf, K);
    for (int i = 0; i < K; i++)
        bad += bf[i] != kern_f32_to_bf16(x[i]);
    EXPECT_EQ_INT(bad, 0);
}

/* A child process started by the INFERD_ISA test prints its level. */
__attribute__((constructor)) static void isa_child(void)
{
    if (!getenv("KERN_TEST_ISA_CHILD")) return;
    kern_init();
    printf("%s%s\n", kern_isa_name(kern_isa()), kern_isa_env_error() ? " error" : "");
    fflush(stdout);
    _Exit(0);
}

static int child_isa(const char *env_value, char *out, size_t n)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "KERN_TEST_ISA_CHILD=1 INFERD_ISA=%s /proc/%d/exe 2>/dev/null",
             env_value, (int)getpid());
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    if (!fgets(out, (int)n, p)) out[0] = 0;
    out[strcspn(out, "\n")] = 0;
    return pclose(p);
}

TEST(isa_selection)
{
    kern_init();
    enum kern_isa max = kern_isa_max();
    EXPECT(kern_isa() <= max);
    EXPECT_EQ_INT(kern_set_isa(KERN_ISA_SCALAR), 0);
    EXPECT_EQ_INT(kern_isa(), KERN_ISA_SCALAR);
    if (max < KERN_ISA_AVX512) EXPECT(kern_set_isa(KERN_ISA_AVX512) < 0);
    EXPECT(kern_set_isa(KERN_ISA_COUNT) < 0);
    EXPECT_EQ_INT(kern_set_isa(max), 0);
    EXPECT(strcmp(kern_isa_name(KERN_ISA_AVX2), "avx2") == 0);

    char got[64];
    EXPECT_EQ_INT(child_isa("scalar", got, sizeof got), 0);
    EXPECT(strcmp(got, "scalar") == 0);
    /* unknown, or above the CPU: the max, and an error for the program to report */
    char want[64];
    snprintf(want, sizeof want, "%s error", kern_isa_name(max));
    EXPECT_EQ_INT(child_isa("bogus", got, sizeof got), 0);
    EXPECT(strcmp(got, want) == 0);
    if (max < KERN_ISA_AVX512) {
        EXPECT_EQ_INT(child_isa("avx512", got, sizeof got), 0);
        EXPECT(strcmp(got, want) == 0);
    }
    EXPECT_EQ_INT(child_isa("AVX2", got, sizeof got), 0);
    EXPECT(strcmp(got, max >= KERN_ISA_AVX2 ? "avx2" : want) == 0);
    if (max >= KERN_ISA_AVXVNNI) {
        EXPECT_EQ_INT(child_isa("avxvnni", got, sizeof got), 0);
        EXPECT(strcmp(got, "avxvnni") == 0);
    }
    EXPECT_EQ_INT(kern_isa_parse("AvxVnni"), KERN_ISA_AVXVNNI);
    EXPECT_EQ_INT(kern_isa_parse("avx1"), -1);
}

TEST_MAIN()
