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

TEST(silu_element_independent_of_row_length)
{
    kern_init();
    uint64_t s = 3;
    float base[64], u[64];
    for (int i = 0; i < 64; i++)
        base[i] = (frand(&s) - 0.5f) * 10, u[i] = frand(&s);
    float full[64];
    memcpy(full, base, sizeof(full));
    kern_silu_mul(full, u, 64);
    for (int n = 1; n < 64; n++) {
        float part[64];
        memcpy(part, base, sizeof(part));
        kern_silu_mul(part, u, n);
        EXPECT(memcmp(part, full, sizeof(float) * (size_t)n) == 0);
    }
}

TEST_MAIN()
