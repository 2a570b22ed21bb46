/*
 * test_vecmath.c - SiLU gating and softmax: every ISA level against libm
 * (accuracy) and against the scalar reference (agreement), over ragged n;
 * and per-element independence of the position in the row.
 */
#include "test.h"

#include "base/check.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f;
}

static const enum kern_isa levels[] = {KERN_ISA_SCALAR, KERN_ISA_AVX2, KERN_ISA_AVXVNNI,
                                       KERN_ISA_AVX512};

TEST(silu_mul_matches_libm)
{
    kern_init();
    uint64_t s = 1;
    for (size_t l = 0; l < ARRAY_LEN(levels); l++) {
        if (kern_set_isa(levels[l])) continue;
        for (int n = 1; n <= 70; n++) {
            float g[70], u[70], want[70];
            for (int i = 0; i < n; i++) {
                g[i] = (frand(&s) - 0.5f) * 40;
                u[i] = (frand(&s) - 0.5f) * 4;
                want[i] = (float)((double)g[i] / (1 + exp(-(double)g[i])) * u[i]);
            }
            if (n == 70) g[3] = -200.0f, want[3] = -0.0f; /* exp overflow side */
            kern_silu_mul(g, u, n);
            for (int i = 0; i < n; i++)
                EXPECT_NEAR(g[i], want[i], 1e-6 + 2e-6 * fabs(want[i]));
        }
    }
    kern_set_isa(kern_isa_max());
}

TEST(softmax_matches_libm_and_sums_to_one)
{
    kern_init();
    uint64_t s = 2;
    for (size_t l = 0; l < ARRAY_LEN(levels); l++) {
        if (kern_set_isa(levels[l])) continue;
        for (int n = 1; n <= 100; n += 3) {
            float x[100];
            double want[100], mx = -1e30, sum = 0;
            for (int i = 0; i < n; i++) {
                x[i] = (frand(&s) - 0.5f) * 30;
                mx = fmax(mx, (double)x[i] * 0.125);
            }
            for (int i = 0; i < n; i++)
                sum += want[i] = exp((double)x[i] * 0.125 - mx);
            float total = kern_softmax_exp(x, n, 0.125f);
            double got_sum = 0;
            for (int i = 0; i < n; i++) {
                EXPECT_NEAR(x[i], want[i], 1e-6 * want[i] + 1e-30);
                EXPECT_NEAR(x[i] / total, want[i] / sum, 1e-6);
                got_sum += x[i];
            }
            EXPECT_NEAR(total, got_sum, 1e-5 * got_sum);
            EXPECT_NEAR(got_sum / total, 1.0, 1e-5);
        }
    }
    kern_set_isa(kern_isa_max());
}

/* At every level each element's bits depend on its value alone, not on
 * where it sits in the row (the unrolled loops, single vectors and tails
 * run the same instructions). */
TEST(silu_element_independent_of_row_length)
{
    kern_init();
    uint64_t s = 3;
    float base[200], u[200];
    for (int i = 0; i < 200; i++)
        base[i] = (frand(&s) - 0.5f) * 10, u[i] = frand(&s);
    for (size_t l = 0; l < ARRAY_LEN(levels); l++) {
        if (kern_set_isa(levels[l])) continue;
        float full[200];
        memcpy(full, base, sizeof(full));
        kern_silu_mul(full, u, 200);
        for (int n = 1; n < 200; n += n < 40 ? 1 : 13) {
            float part[200];
            memcpy(part, base + 200 - n, sizeof(float) * (size_t)n);
            kern_silu_mul(part, u + 200 - n, n); /* the same elements at other offsets */
            EXPECT(memcmp(part, full + 200 - n, sizeof(float) * (size_t)n) == 0);
        }
    }
    kern_set_isa(kern_isa_max());
}

/* kern_softmax_exp at every level: element i is exp(scale x_i - scale max)
 * whatever its position (the same bits as in a row of x_i and the max
 * alone), and the sum adds the weights in L interleaved partial sums, each
 * in index order, then the partials in order (L = 8 at avx2 and avxvnni, 16
 * at scalar and avx512: vecmath.h). */
TEST(softmax_element_and_sum_order)
{
    kern_init();
    uint64_t s = 4;
    for (size_t l = 0; l < ARRAY_LEN(levels); l++) {
        if (kern_set_isa(levels[l])) continue;
        const int L = levels[l] == KERN_ISA_AVX2 || levels[l] == KERN_ISA_AVXVNNI ? 8 : 16;
        for (int n = 1; n <= 300; n += n < 70 ? 1 : 23) {
            float x[300], y[300];
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) {
                x[i] = (frand(&s) - 0.5f) * 40;
                mx = x[i] > mx ? x[i] : mx;
            }
            memcpy(y, x, sizeof(float) * (size_t)n);
            const float total = kern_softmax_exp(y, n, 0.3f);
            int bad = 0;
            float part[16] = {0}, want = 0;
            for (int i = 0; i < n; i++) {
                float two[2] = {x[i], mx};
                kern_softmax_exp(two, 2, 0.3f);
                bad += memcmp(&two[0], &y[i], sizeof(float)) != 0;
                part[i % L] += y[i];
            }
            for (int i = 0; i < L; i++)
                want += part[i];
            EXPECT_EQ_INT(bad, 0);
            EXPECT(memcmp(&want, &total, sizeof(float)) == 0);
        }
    }
    kern_set_isa(kern_isa_max());
}

/* The AVX2 and AVX-512 levels compute the same elements (vecmath.h). */
TEST(avx2_and_avx512_elements_agree)
{
    kern_init();
    if (kern_isa_max() < KERN_ISA_AVX512) {
        printf("  (no AVX-512 on this CPU)\n");
        return;
    }
    uint64_t s = 5;
    int bad = 0;
    for (int n = 1; n <= 400; n += n < 40 ? 1 : 37) {
        float g[400], u[400], a[400], b[400];
        for (int i = 0; i < n; i++)
            g[i] = (frand(&s) - 0.5f) * 60, u[i] = frand(&s) - 0.5f;
        const enum kern_isa two[2] = {KERN_ISA_AVX2, KERN_ISA_AVX512};
        float *out[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            kern_set_isa(two[k]);
            memcpy(out[k], g, sizeof(float) * (size_t)n);
            kern_silu_mul(out[k], u, n);
        }
        bad += memcmp(a, b, sizeof(float) * (size_t)n) != 0;
        for (int k = 0; k < 2; k++) {
            kern_set_isa(two[k]);
            memcpy(out[k], g, sizeof(float) * (size_t)n);
            kern_softmax_exp(out[k], n, 0.2f);
        }
        bad += memcmp(a, b, sizeof(float) * (size_t)n) != 0;
    }
    EXPECT_EQ_INT(bad, 0);
    kern_set_isa(kern_isa_max());
}

TEST_MAIN()
