/*
 * test_quant_act.c - activation quantization (q8_0, q8_K) is bit-identical
 * at every ISA level, including ties at .5 after scaling, zero blocks, huge
 * and tiny magnitudes and NaN inputs.
 */
#include "test.h"

#include "base/check.h"
#include "base/dtype.h"
#include "kernels/kernels.h"

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f;
}

static void fill(float *x, int k, int pattern, uint64_t *s)
{
    for (int i = 0; i < k; i++) {
        switch (pattern) {
        case 0:
            x[i] = (frand(s) - 0.5f) * 8;
            break;
        case 1:
            x[i] = (float)((int)(frand(s) * 255) - 127) * 0.5f;
            break; /* .5 ties */
        case 2:
            x[i] = 0.0f;
            break;
        case 3:
            x[i] = (frand(s) - 0.5f) * 1e30f;
            break;
        case 4:
            x[i] = (frand(s) - 0.5f) * 1e-30f;
            break;
        case 5:
            x[i] = i % 37 == 5 ? NAN : frand(s) - 0.5f;
            break;
        }
    }
    if (pattern == 1) x[0] = 127.0f; /* amax = 127 -> id = 1: every .5 is a tie */
}

TEST(all_levels_bit_identical)
{
    kern_init();
    uint64_t s = 9;
    const enum dtype wts[] = {DTYPE_Q8_0, DTYPE_Q4_K};
    for (size_t w = 0; w < ARRAY_LEN(wts); w++) {
        for (int pattern = 0; pattern < 6; pattern++) {
            int k = 256 * 3;
            float x[256 * 3];
            fill(x, k, pattern, &s);
            size_t n = kern_act_row_size(wts[w], k);
            uint8_t ref[2048], got[2048];
            CHECK(n <= sizeof(ref));
            kern_set_isa(KERN_ISA_SCALAR);
            kern_quantize_act(wts[w], x, ref, k);
            for (int isa = KERN_ISA_AVX2; isa < KERN_ISA_COUNT; isa++) {
                if (kern_set_isa((enum kern_isa)isa)) continue;
                memset(got, 0xa5, sizeof(got));
                kern_quantize_act(wts[w], x, got, k);
                if (memcmp(ref, got, n)) {
                    fprintf(stderr, "  type %d pattern %d isa %d differs\n", (int)wts[w], pattern,
                            isa);
                    EXPECT(0);
                }
            }
        }
    }
    kern_set_isa(kern_isa_max());
}

TEST_MAIN()
