/*
 * kern_test_util.h - shared helpers for the kernel unit tests: a seeded
 * random source, random weight/activation rows of any type, and an
 * independent double-precision decoding of every block format (written from
 * the layout description in quants.h, not from kernels_ref.c, so the two
 * check each other).
 */
#ifndef INFERD_TEST_KERN_UTIL_H
#define INFERD_TEST_KERN_UTIL_H

#include "kernels/kernels.h"
#include "kernels/quants.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct rng {
    uint64_t s; /* xorshift64* state, never 0 */
};

static inline uint64_t rng_next(struct rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n). */
static inline int rng_int(struct rng *r, int n)
{
    return (int)(rng_next(r) % (uint64_t)n);
}

/* Uniform in [-1, 1). */
static inline float rng_unit(struct rng *r)
{
    return (float)((double)(rng_next(r) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* Roughly normal (sum of 4 uniforms), scaled. */
static inline float rng_normal(struct rng *r, float scale)
{
    return scale * (rng_unit(r) + rng_unit(r) + rng_unit(r) + rng_unit(r)) * 0.866f;
}

static inline void fill_normal(struct rng *r, float *x, int n, float scale)
{
    for (int i = 0; i < n; i++)
        x[i] = rng_normal(r, scale);
}

static inline double h2d(uint16_t h)
{
    return (double)kern_f16_to_f32(h);
}

static inline int q4k_sc(const uint8_t *s, int j)
{
    return j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
}

static inline int q4k_m(const uint8_t *s, int j)
{
    return j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
}

/* Element e of a row of type t, decoded in double straight from the bytes.
 * For q4_K and q5_K, *offpart (if not NULL) gets |dmin * m| of the element. */
static inline double decode_elem(enum dtype t, const void *row, int e, double *offpart)
{
    const uint8_t *p = row;
    if (offpart) *offpart = 0.0;
    switch (t) {
    case DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * e, 4);
        return f;
    }
    case DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * e, 2);
        return h2d(h);
    }
    case DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * e, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case DTYPE_Q8_0: {
        const uint8_t *b = p + 34 * (e / 32);
        uint16_t d;
        memcpy(&d, b, 2);
        return h2d(d) * (int8_t)b[2 + e % 32];
    }
    case DTYPE_Q4_0: {
        const uint8_t *b = p + 18 * (e / 32);
        uint16_t d;
        memcpy(&d, b, 2);
        int i = e % 32;
        int q = i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4;
        return h2d(d) * (q - 8);
    }
    case DTYPE_Q4_K: {
        const uint8_t *b = p + 144 * (e / 256);
        uint16_t d, dmin;
        memcpy(&d, b, 2);
        memcpy(&dmin, b + 2, 2);
        const uint8_t *sc = b + 4, *qs = b + 16;
        int i = e % 256, c = i / 64, l = i % 32, hi = (i % 64) >= 32, j = i / 32;
        int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
        double off = h2d(dmin) * q4k_m(sc, j);
        if (offpart) *offpart = fabs(off);
        return h2d(d) * q4k_sc(sc, j) * q - off;
    }
    case DTYPE_Q5_K: {
        /* f16 d | f16 dmin | scales[12] | qh[32] | qs[128] */
        const uint8_t *b = p + 176 * (e / 256);
        uint16_t d, dmin;
        memcpy(&d, b, 2);
        memcpy(&dmin, b + 2, 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
        int i = e % 256, c = i / 64, l = i % 32, hi = (i % 64) >= 32, j = i / 32;
        int q = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
        q += (qh[l] >> j & 1) * 16;
        double off = h2d(dmin) * q4k_m(sc, j);
        if (offpart) *offpart = fabs(off);
        return h2d(d) * q4k_sc(sc, j) * q - off;
    }
    case DTYPE_Q6_K: {
        const uint8_t *b = p + 210 * (e / 256);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        uint16_t d;
        memcpy(&d, b + 208, 2);
        int i = e % 256, h = i / 128, r = i % 128, part = r / 32, l = r % 32;
        int low = ql[64 * h + 32 * (part & 1) + l];
        low = part >= 2 ? low >> 4 : low & 15;
        int q = low | ((qh[32 * h + l] >> (2 * part)) & 3) << 4;
        return h2d(d) * sc[i / 16] * (q - 32);
    }
    case DTYPE_Q8_K: {
        const uint8_t *b = p + 292 * (e / 256);
        float d;
        memcpy(&d, b, 4);
        return (double)d * (int8_t)b[4 + e % 256];
    }
    default:
        abort();
    }
}

static const enum dtype all_wtypes[] = {DTYPE_F32,  DTYPE_F16,  DTYPE_BF16, DTYPE_Q8_0,
                                        DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_Q6_K};
#define N_WTYPES ((int)(sizeof(all_wtypes) / sizeof(all_wtypes[0])))

static inline int blck_of(enum dtype t)
{
    return dtype_info((uint32_t)t)->blck;
}

#endif
