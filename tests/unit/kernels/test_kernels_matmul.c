/*
 * test_kernels_matmul.c - matmul and the attention vector ops at every ISA
 * level this CPU has.
 *
 *  - the scalar reference against an exact (double) dot product of the
 *    decoded operands, within a rounding bound (below);
 *  - every SIMD level against the scalar reference on random shapes (rows
 *    1..67, ragged k, n_tok 1..19, sub-ranges of rows, padded strides):
 *    bitwise equal, the design goal (kernels_impl.h), except bf16 weights at
 *    the AVX-512 level (vdpbf16ps rounds its own way), held to the rounding
 *    bound instead;
 *  - invariance at every level: n_tok = N equals N calls with n_tok = 1, a
 *    split row range equals the full one, a permuted batch permutes the
 *    output - all bitwise;
 *  - kv_dot / kv_accum / kv_store / dot_f32 / sum_sq_f32 likewise.
 *
 * Rounding bound: with u = 2^-24 and S = sum |w_i x_i| (for q4_K, q5_K the min
 * term counted separately), a chain of n float operations errs by at most
 * about n u S, so we allow 2 (n + 8) u S, n = k / 16 + 4 for 16-lane float
 * dots and 2 * blocks for the quantized chains. A lost or doubled element
 * costs ~ S / k, far above that for every k tested.
 */
#include "test.h"

#include "kern_test_util.h"
#include "kernels/kernels.h"
#include "kernels/quants.h"
#include "kernels/vecmath.h"

#define U 0x1p-24

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

#define SENTINEL 0x7fc0deadu

static float sentinel(void)
{
    float f;
    uint32_t u = SENTINEL;
    memcpy(&f, &u, 4);
    return f;
}

/* One random matmul problem. */
struct prob {
    enum dtype wt; /* weight type */
    int rows;      /* weight rows */
    int k;         /* row length */
    int n_tok;     /* activation rows */
    size_t wrb;    /* bytes per weight row (padded at random) */
    size_t xrb;    /* bytes per activation row (padded at random) */
    uint8_t *W;    /* (rows, wrb) */
    uint8_t *X;    /* (n_tok, xrb) quantized activations */
};

static void prob_init(struct prob *p, struct rng *r, enum dtype wt, int rows, int k, int n_tok)
{
    p->wt = wt;
    p->rows = rows;
    p->k = k;
    p->n_tok = n_tok;
    p->wrb = dtype_row_size(wt, k) + (size_t)rng_int(r, 3) * 2;
    p->xrb = kern_act_row_size(wt, k) + (size_t)rng_int(r, 3) * 4;
    p->W = calloc((size_t)rows, p->wrb);
    p->X = calloc((size_t)n_tok, p->xrb);
    float *row = malloc((size_t)k * sizeof(float));
    for (int i = 0; i < rows; i++) {
        fill_normal(r, row, k, 0.02f * (1 + rng_int(r, 8)));
        kern_quantize_row(wt, row, p->W + (size_t)i * p->wrb, k);
    }
    for (int t = 0; t < n_tok; t++) {
        fill_normal(r, row, k, 1.0f + (float)rng_int(r, 4));
        kern_quantize_act(wt, row, p->X + (size_t)t * p->xrb, k);
    }
    free(row);
}

static void prob_free(struct prob *p)
{
    free(p->W);
    free(p->X);
}

/* Exact dot of row r with token t, and S = sum |w x| (+ |offset x|). */
static double exact_dot(const struct prob *p, int r, int t, double *S)
{
    const void *w = p->W + (size_t)r * p->wrb, *x = p->X + (size_t)t * p->xrb;
    enum dtype at = kern_act_type(p->wt);
    double s = 0, a = 0;
    for (int e = 0; e < p->k; e++) {
        double off, we = decode_elem(p->wt, w, e, &off), xe = decode_elem(at, x, e, NULL);
        s += we * xe;
        a += (fabs(we) + off) * fabs(xe);
    }
    *S = a;
    return s;
}

static double chain_tol(enum dtype wt, int k, double S)
{
    double n = wt == DTYPE_F32 || wt == DTYPE_F16 || wt == DTYPE_BF16 ? k / 16.0 + 4
                                                                      : 2.0 * k / blck_of(wt);
    return 2.0 * (n + 8) * U * S + 1e-30;
}

static void run(const struct prob *p, int r0, int r1, int t0, int n, float *y, int ldy)
{
    kern_matmul(p->wt, p->W, p->wrb, p->k, r0, r1, p->X + (size_t)t0 * p->xrb, p->xrb, n, y, ldy);
}

static int pick_k(struct rng *r, enum dtype wt)
{
    static const int kq32[] = {32, 64, 32 * 7, 32 * 28, 32 * 45, 896};
    static const int kqk[] = {256, 512, 256 * 3, 256 * 5};
    static const int kf[] = {1, 7, 16, 17, 31, 33, 64, 100, 224, 250, 896, 1000};
    if (blck_of(wt) == 32) return kq32[rng_int(r, 6)];
    if (blck_of(wt) == 256) return kqk[rng_int(r, 4)];
    return kf[rng_int(r, 12)];
}

TEST(reference_close_to_exact)
{
    struct rng r = {31337};
    kern_set_isa(KERN_ISA_SCALAR);
    for (int ti = 0; ti < N_WTYPES; ti++) {
        enum dtype wt = all_wtypes[ti];
        for (int rep = 0; rep < 4; rep++) {
            struct prob p;
            prob_init(&p, &r, wt, 1 + rng_int(&r, 9), pick_k(&r, wt), 1 + rng_int(&r, 5));
            float *y = malloc((size_t)p.n_tok * p.rows * sizeof(float));
            run(&p, 0, p.rows, 0, p.n_tok, y, p.rows);
            int bad = 0;
            for (int t = 0; t < p.n_tok; t++)
                for (int i = 0; i < p.rows; i++) {
                    double S, e = exact_dot(&p, i, t, &S);
                    if (fabs(y[t * p.rows + i] - e) > chain_tol(wt, p.k, S)) bad++;
                }
            if (bad) fprintf(stderr, "  %s k=%d: %d off\n", dtype_info(wt)->name, p.k, bad);
            EXPECT_EQ_INT(bad, 0);
            free(y);
            prob_free(&p);
        }
    }
    kern_set_isa(kern_isa_max());
}

TEST(simd_matches_reference)
{
    struct rng r = {4242};
    int levels = 0;
    for (int isa = KERN_ISA_AVX2; isa <= (int)kern_isa_max(); isa++) {
        levels++;
        for (int ti = 0; ti < N_WTYPES; ti++) {
            enum dtype wt = all_wtypes[ti];
            /* vdpbf16ps rounds differently from fma: bounded, not bitwise */
            const int bitwise = !(isa == KERN_ISA_AVX512 && wt == DTYPE_BF16);
            double worst = 0;
            for (int rep = 0; rep < 10; rep++) {
                struct prob p;
                prob_init(&p, &r, wt, 1 + rng_int(&r, 67), pick_k(&r, wt), 1 + rng_int(&r, 19));
                int r0 = rng_int(&r, p.rows / 3 + 1), r1 = r0 + 1 + rng_int(&r, p.rows - r0);
                int ldy = p.rows + 3;
                size_t ny = (size_t)p.n_tok * ldy;
                float *y0 = malloc(ny * sizeof(float)), *y1 = malloc(ny * sizeof(float));
                for (size_t i = 0; i < ny; i++)
                    y0[i] = y1[i] = sentinel();
                kern_set_isa(KERN_ISA_SCALAR);
                run(&p, r0, r1, 0, p.n_tok, y0, ldy);
                kern_set_isa((enum kern_isa)isa);
                run(&p, r0, r1, 0, p.n_tok, y1, ldy);
                int bad = 0, touched = 0;
                for (int t = 0; t < p.n_tok; t++)
                    for (int i = 0; i < ldy; i++) {
                        float a = y0[(size_t)t * ldy + i], b = y1[(size_t)t * ldy + i];
                        if (i < r0 || i >= r1) {
                            touched += fbits(b) != SENTINEL;
                        } else if (bitwise) {
                            bad += fbits(a) != fbits(b);
                        } else {
                            double S;
                            exact_dot(&p, i, t, &S);
                            double d = fabs((double)a - b);
                            bad += d > 2 * chain_tol(wt, p.k, S);
                            if (S > 0) worst = fmax(worst, d / (U * S));
                        }
                    }
                if (bad || touched)
                    fprintf(stderr,
                            "  %s %s rows=%d [%d,%d) k=%d n_tok=%d: %d differ, %d outside\n",
                            kern_isa_name((enum kern_isa)isa), dtype_info(wt)->name, p.rows, r0, r1,
                            p.k, p.n_tok, bad, touched);
                EXPECT_EQ_INT(bad, 0);
                EXPECT_EQ_INT(touched, 0);
                free(y0);
                free(y1);
                prob_free(&p);
            }
            if (!bitwise)
                printf("  %s bf16: worst |simd - ref| = %.1f u S\n",
                       kern_isa_name((enum kern_isa)isa), worst);
        }
    }
    kern_set_isa(kern_isa_max());
    if (!levels) printf("  (no SIMD level on this CPU)\n");
}

static int same_bits(const float *a, const float *b, int n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

TEST(invariance_batch_split_order)
{
    struct rng r = {8080};
    for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
        kern_set_isa((enum kern_isa)isa);
        for (int ti = 0; ti < N_WTYPES; ti++) {
            enum dtype wt = all_wtypes[ti];
            const int rows = 53, N = 19;
            struct prob p;
            prob_init(&p, &r, wt, rows,
                      blck_of(wt) == 1 ? 203 : blck_of(wt) * (blck_of(wt) == 32 ? 9 : 2), N);
            float *full = malloc(sizeof(float) * rows * N), *y = malloc(sizeof(float) * rows * N);
            run(&p, 0, rows, 0, N, full, rows);
            int bad = 0;
            /* one token at a time */
            for (int t = 0; t < N; t++)
                run(&p, 0, rows, t, 1, y + t * rows, rows);
            bad += !same_bits(full, y, rows * N);
            /* 2, 3, 4 at a time (the decode kernels take up to 4 tokens) */
            for (int step = 2; step <= 4; step++) {
                for (int t = 0; t < N; t += step)
                    run(&p, 0, rows, t, t + step <= N ? step : N - t, y + t * rows, rows);
                bad += !same_bits(full, y, rows * N);
            }
            /* uneven token sub-batches */
            run(&p, 0, rows, 0, 7, y, rows);
            run(&p, 0, rows, 7, N - 7, y + 7 * rows, rows);
            bad += !same_bits(full, y, rows * N);
            /* split row ranges, off the panel grid */
            static const int cuts[] = {1, 5, 16, 17, 37, 52};
            for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
                run(&p, 0, cuts[c], 0, N, y, rows);
                run(&p, cuts[c], rows, 0, N, y, rows);
                bad += !same_bits(full, y, rows * N);
            }
            /* reversed batch order */
            uint8_t *rev = malloc((size_t)N * p.xrb);
            for (int t = 0; t < N; t++)
                memcpy(rev + (size_t)t * p.xrb, p.X + (size_t)(N - 1 - t) * p.xrb, p.xrb);
            kern_matmul(wt, p.W, p.wrb, p.k, 0, rows, rev, p.xrb, N, y, rows);
            for (int t = 0; t < N; t++)
                bad += !same_bits(full + t * rows, y + (N - 1 - t) * rows, rows);
            if (bad)
                fprintf(stderr, "  %s %s: %d variants differ\n", kern_isa_name((enum kern_isa)isa),
                        dtype_info(wt)->name, bad);
            EXPECT_EQ_INT(bad, 0);
            free(rev);
            free(full);
            free(y);
            prob_free(&p);
        }
    }
    kern_set_isa(kern_isa_max());
}

/* Every token count from 1 to 21 (the decode kernels' 1..4, the tiles' 1..8
 * tokens alone and past them, with one or two panels), for every quantized
 * type at every SIMD level: bitwise the scalar reference, over a row range
 * with ragged ends and a ragged last panel. */
TEST(quant_every_batch_size)
{
    struct rng r = {2718};
    const int N = 21, rows = 45, r0 = 3, r1 = 44;
    for (int ti = 0; ti < N_WTYPES; ti++) {
        const enum dtype wt = all_wtypes[ti];
        if (blck_of(wt) == 1) continue;
        struct prob p;
        prob_init(&p, &r, wt, rows, blck_of(wt) == QK_K ? 3 * QK_K : 7 * 32, N);
        float *ref = malloc(sizeof(float) * rows * N), *y = malloc(sizeof(float) * rows * N);
        int bad = 0;
        for (int n = 1; n <= N; n++) {
            const int t0 = N - n;
            for (int i = 0; i < rows * N; i++)
                ref[i] = y[i] = sentinel();
            kern_set_isa(KERN_ISA_SCALAR);
            run(&p, r0, r1, t0, n, ref, rows);
            for (int isa = KERN_ISA_AVX2; isa <= (int)kern_isa_max(); isa++) {
                kern_set_isa((enum kern_isa)isa);
                run(&p, r0, r1, t0, n, y, rows);
                if (!same_bits(ref, y, rows * N)) {
                    fprintf(stderr, "  %s %s n_tok=%d: differs\n",
                            kern_isa_name((enum kern_isa)isa), dtype_info(wt)->name, n);
                    bad++;
                }
            }
        }
        EXPECT_EQ_INT(bad, 0);
        free(ref);
        free(y);
        prob_free(&p);
    }
    kern_set_isa(kern_isa_max());
}

/* Float weights at every level, every batch size the kernels tile
 * differently: 1..25 tokens (one-token, two-token and grouped tiles, the
 * 4-token case, token blocks split at k = 4099), k with and without a
 * 16-lane tail and past one column range (1031, 2055, 4099), row counts off
 * every tile height and row ranges that start off the tile grid; bitwise
 * against the scalar reference (bf16 at AVX-512 excepted, see
 * simd_matches_reference), nothing written outside the range. */
TEST(float_every_batch_size)
{
    struct rng r = {5150};
    static const enum dtype types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    static const int ks[] = {1, 15, 16, 17, 100, 1000, 1031, 2055, 4099};
    static const int rows_[] = {1, 3, 5, 13};
    int cases = 0;
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
        for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
            for (size_t ri = 0; ri < sizeof(rows_) / sizeof(rows_[0]); ri++) {
                const enum dtype wt = types[ti];
                const int rows = rows_[ri], N = 25;
                struct prob p;
                prob_init(&p, &r, wt, rows, ks[ki], N);
                const int ldy = rows + 2;
                float *y0 = malloc(sizeof(float) * (size_t)N * ldy);
                float *y1 = malloc(sizeof(float) * (size_t)N * ldy);
                int bad = 0;
                for (int n = 1; n <= N; n++) {
                    const int r0 = rows > 1 ? n % 2 : 0; /* odd starts too */
                    for (int i = 0; i < N * ldy; i++)
                        y0[i] = y1[i] = sentinel();
                    kern_set_isa(KERN_ISA_SCALAR);
                    run(&p, r0, rows, 0, n, y0, ldy);
                    for (int isa = KERN_ISA_AVX2; isa <= (int)kern_isa_max(); isa++) {
                        if (isa == KERN_ISA_AVX512 && wt == DTYPE_BF16) continue;
                        kern_set_isa((enum kern_isa)isa);
                        for (int i = 0; i < N * ldy; i++)
                            y1[i] = sentinel();
                        run(&p, r0, rows, 0, n, y1, ldy);
                        if (!same_bits(y0, y1, N * ldy)) {
                            fprintf(stderr, "  %s %s k=%d rows [%d,%d) n_tok=%d differ\n",
                                    kern_isa_name((enum kern_isa)isa), dtype_info(wt)->name, p.k,
                                    r0, rows, n);
                            bad++;
                        }
                        cases++;
                    }
                }
                EXPECT_EQ_INT(bad, 0);
                free(y0);
                free(y1);
                prob_free(&p);
            }
    kern_set_isa(kern_isa_max());
    if (kern_isa_max() >= KERN_ISA_AVX2) EXPECT(cases > 0);
}

/* A prefill-sized batch goes through the token-blocked, chunked path. */
TEST(invariance_large_batch)
{
    struct rng r = {99991};
    static const enum dtype types[] = {DTYPE_Q8_0, DTYPE_Q4_K, DTYPE_Q5_K, DTYPE_F16, DTYPE_BF16};
    for (int isa = KERN_ISA_AVX2; isa <= (int)kern_isa_max(); isa++) {
        kern_set_isa((enum kern_isa)isa);
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
            struct prob p;
            prob_init(&p, &r, types[ti], 35, blck_of(types[ti]) == 256 ? 256 * 19 : 4864, 300);
            float *full = malloc(sizeof(float) * 35 * 300), *y = malloc(sizeof(float) * 35);
            run(&p, 0, 35, 0, 300, full, 35);
            int bad = 0;
            for (int t = 0; t < 300; t += 37) {
                run(&p, 0, 35, t, 1, y, 35);
                bad += !same_bits(full + t * 35, y, 35);
            }
            EXPECT_EQ_INT(bad, 0);
            free(full);
            free(y);
            prob_free(&p);
        }
    }
    kern_set_isa(kern_isa_max());
}

/* The types with a packed layout (quants.h), and shapes for them. */
static const enum dtype packed_types[] = {DTYPE_Q8_0, DTYPE_Q4_0, DTYPE_Q4_K, DTYPE_Q5_K,
                                          DTYPE_Q6_K};
#define N_PACKED (int)(sizeof(packed_types) / sizeof(packed_types[0]))

/* A packed copy of p's weights, 64-byte aligned, packed in two row ranges
 * as threads would. */
static void *pack_prob(const struct prob *p)
{
    size_t bytes = kern_packed_bytes(p->wt, p->rows, p->k);
    EXPECT(bytes > 0);
    void *P = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    int cut = p->rows > 16 ? 16 : p->rows;
    kern_pack(p->wt, p->W, p->wrb, p->k, p->rows, 0, cut, P);
    if (cut < p->rows) kern_pack(p->wt, p->W, p->wrb, p->k, p->rows, cut, p->rows, P);
    return P;
}

/* Side data rows (kern_act_side) for p's tokens, stride *xsb (never NULL,
 * even where the type has none). */
static uint8_t *side_prob(const struct prob *p, size_t *xsb)
{
    *xsb = kern_act_side_bytes(p->wt, p->k) + 8;
    uint8_t *XS = calloc((size_t)p->n_tok, *xsb);
    for (int t = 0; t < p->n_tok; t++)
        kern_act_side(p->wt, p->X + (size_t)t * p->xrb, p->k, XS + (size_t)t * *xsb);
    return XS;
}

/* Packing is a permutation: unpacking gives the GGUF rows back byte for
 * byte, and the sizes are what quants.h says. */
TEST(pack_unpack_round_trip)
{
    struct rng r = {4242};
    for (int ti = 0; ti < N_PACKED; ti++) {
        const enum dtype wt = packed_types[ti];
        const int qk = blck_of(wt);
        for (int rows = 1; rows <= 40; rows += 13) {
            struct prob p;
            prob_init(&p, &r, wt, rows, qk * (1 + rng_int(&r, 3)), 1);
            void *P = pack_prob(&p);
            const size_t rb = dtype_row_size(wt, p.k);
            uint8_t *back = malloc((size_t)rows * rb);
            kern_unpack(wt, P, rows, p.k, 0, rows, back, rb);
            int bad = 0;
            for (int i = 0; i < rows; i++)
                bad += memcmp(back + (size_t)i * rb, p.W + (size_t)i * p.wrb, rb) != 0;
            EXPECT_EQ_INT(bad, 0);
            /* the same bytes per row as GGUF, padded to 16 rows and 64-byte areas */
            const size_t bytes = kern_packed_bytes(wt, rows, p.k), panels = (rows + 15) / 16;
            EXPECT(bytes % 64 == 0 && bytes >= panels * 16 * rb &&
                   bytes <= panels * (16 * rb + 128));
            free(back);
            free(P);
            prob_free(&p);
        }
    }
    EXPECT(kern_packed_bytes(DTYPE_F16, 16, 256) == 0);
    EXPECT(kern_packed_bytes(DTYPE_Q4_K, 16, 96) == 0);
    EXPECT(kern_pack_size(DTYPE_F16, 16, 256) == 0);
}

/* Packed weights (kern_pack) give kern_matmul's bits at every level, for
 * every packed type, decode-sized and prefill-sized batches, whole and split
 * row ranges (on the 16-row grid), and padded last panels. A level without a
 * packed kernel for a type runs it through the reference: the same bits. */
TEST(packed_matches_rows)
{
    struct rng r = {5151};
    static const int shapes[][3] = {/* rows, k (in 32-blocks), n_tok */
                                    {16, 1, 1},   {37, 2, 1},     {53, 28, 2}, {64, 9, 3},
                                    {100, 28, 4}, {35, 152, 300}, {48, 7, 5},  {21, 45, 13},
                                    {80, 28, 64}, {7, 1, 9},      {130, 6, 33}};
    for (int ti = 0; ti < N_PACKED; ti++) {
        const enum dtype wt = packed_types[ti];
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            struct prob p;
            /* K-quants: whole super-blocks, as near the shape's k as they go */
            int k = 32 * shapes[si][1];
            if (blck_of(wt) == QK_K) k = (k + QK_K - 1) / QK_K * QK_K;
            kern_set_isa(kern_isa_max());
            prob_init(&p, &r, wt, shapes[si][0], k, shapes[si][2]);
            const int rows = p.rows, N = p.n_tok;
            void *P = pack_prob(&p);
            size_t xsb;
            uint8_t *XS = side_prob(&p, &xsb);
            /* the side data is integer sums and exact conversions: same bytes at every level */
            for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
                kern_set_isa((enum kern_isa)isa);
                uint8_t side[sizeof(struct kern_q8_side) * 4864 / 32 + 8];
                for (int t = 0; t < N; t++) {
                    kern_act_side(wt, p.X + (size_t)t * p.xrb, p.k, side);
                    EXPECT(memcmp(side, XS + (size_t)t * xsb, xsb - 8) == 0);
                }
            }
            float *ref = malloc(sizeof(float) * rows * N), *y = malloc(sizeof(float) * rows * N);
            kern_set_isa(KERN_ISA_SCALAR);
            run(&p, 0, rows, 0, N, ref, rows);
            int bad = 0;
            for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
                kern_set_isa((enum kern_isa)isa);
                const int before = bad;
                for (size_t i = 0; i < (size_t)rows * N; i++)
                    y[i] = sentinel();
                kern_matmul_packed(wt, P, rows, p.k, 0, rows, p.X, p.xrb, XS, xsb, N, y, rows);
                bad += !same_bits(ref, y, rows * N);
                /* row ranges on the panel grid, one token at a time */
                for (int t = 0; t < N; t += 1 + N / 5) {
                    for (int r0 = 0; r0 < rows; r0 += 32) {
                        int r1 = r0 + 32 < rows ? r0 + 32 : rows;
                        kern_matmul_packed(wt, P, rows, p.k, r0, r1, p.X + (size_t)t * p.xrb, p.xrb,
                                           XS + (size_t)t * xsb, xsb, 1, y + (size_t)t * rows,
                                           rows);
                    }
                    bad += !same_bits(ref + (size_t)t * rows, y + (size_t)t * rows, rows);
                }
                if (bad > before)
                    fprintf(stderr, "  %s packed %s rows=%d k=%d n_tok=%d: differs\n",
                            kern_isa_name((enum kern_isa)isa), dtype_info(wt)->name, rows, p.k, N);
            }
            EXPECT_EQ_INT(bad, 0);
            free(P);
            free(XS);
            free(ref);
            free(y);
            prob_free(&p);
        }
    }
    kern_set_isa(kern_isa_max());
}

/* ---- KV ops and reductions ---- */

/* Every small-batch size the one-pass packed kernels take (1..16 tokens,
 * and 17, past them), any slice of the batch, row ranges that start on an
 * odd panel and end in a padded one, at every level and for every packed
 * type: each (row, token) element equals the 1-token result bitwise,
 * whatever shares its pass, and that equals kern_matmul's. */
TEST(packed_every_batch_size)
{
    struct rng r = {7331};
    static const int shapes[][2] = {/* rows, k */ {83, 256}, {48, 896}};
    const int N = 17;
    for (int ti = 0; ti < N_PACKED; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            const enum dtype wt = packed_types[ti];
            int k = shapes[si][1];
            if (blck_of(wt) == QK_K) k = (k + QK_K - 1) / QK_K * QK_K;
            kern_set_isa(kern_isa_max());
            struct prob p;
            prob_init(&p, &r, wt, shapes[si][0], k, N);
            const int rows = p.rows;
            void *P = pack_prob(&p);
            size_t xsb;
            uint8_t *XS = side_prob(&p, &xsb);
            float *one = malloc(sizeof(float) * rows * N), *y = malloc(sizeof(float) * rows * N);
            float *ref = malloc(sizeof(float) * rows * N);
            kern_set_isa(KERN_ISA_SCALAR);
            run(&p, 0, rows, 0, N, ref, rows);
            for (int isa = KERN_ISA_AVX2; isa <= (int)kern_isa_max(); isa++) {
                kern_set_isa((enum kern_isa)isa);
                for (int t = 0; t < N; t++)
                    kern_matmul_packed(wt, P, rows, p.k, 0, rows, p.X + (size_t)t * p.xrb, p.xrb,
                                       XS + (size_t)t * xsb, xsb, 1, one + (size_t)t * rows, rows);
                EXPECT(same_bits(ref, one, rows * N));
                const int ranges[][2] = {{0, rows}, {16, rows}, {16, 48}, {32, rows}, {0, 16}};
                int bad = 0;
                for (int n = 1; n <= N; n++)
                    for (size_t ri = 0; ri < sizeof(ranges) / sizeof(ranges[0]); ri++) {
                        const int before = bad, t0 = N - n, r0 = ranges[ri][0],
                                  r1 = ranges[ri][1] < rows ? ranges[ri][1] : rows;
                        for (size_t i = 0; i < (size_t)rows * N; i++)
                            y[i] = sentinel();
                        kern_matmul_packed(wt, P, rows, p.k, r0, r1, p.X + (size_t)t0 * p.xrb,
                                           p.xrb, XS + (size_t)t0 * xsb, xsb, n, y, rows);
                        for (int t = 0; t < n; t++) {
                            const float *want = one + (size_t)(t0 + t) * rows,
                                        *got = y + (size_t)t * rows;
                            bad += !same_bits(want + r0, got + r0, r1 - r0);
                            /* nothing outside [r0, r1) is written */
                            for (int i = 0; i < rows; i++)
                                bad += (i < r0 || i >= r1) && fbits(got[i]) != SENTINEL;
                        }
                        if (bad > before)
                            fprintf(stderr,
                                    "  %s packed %s rows=%d k=%d n_tok=%d rows [%d, %d): differs\n",
                                    kern_isa_name((enum kern_isa)isa), dtype_info(wt)->name, rows,
                                    p.k, n, r0, r1);
                    }
                EXPECT_EQ_INT(bad, 0);
            }
            free(P);
            free(XS);
            free(one);
            free(y);
            free(ref);
            prob_free(&p);
        }
    kern_set_isa(kern_isa_max());
}

/* Bytes of a block that hold its f16 / f32 scales (kept as quantized, so
 * no infinity or NaN), the rest free for any bit pattern. */
static void scale_bytes(enum dtype t, size_t *off, size_t *len)
{
    *off = 0;
    *len = t == DTYPE_Q4_K || t == DTYPE_Q8_K ? 4 : 2;
    if (t == DTYPE_Q6_K) *off = offsetof(struct block_q6_K, d);
}

/* Overwrites every block of row (k elements of type t) but its scales with
 * random bytes; q8_K's bsums are then recomputed from its quants. Activation
 * rows (q8_0, q8_K) keep their quants in [-127, 127], the range the
 * activation quantizers produce and the contract the avx2 level's vpsignb
 * sequence relies on (kernels_avx2.c). */
static void scramble_row(struct rng *r, enum dtype t, uint8_t *row, int k, bool act)
{
    const size_t bs = dtype_row_size(t, blck_of(t));
    size_t off, len;
    scale_bytes(t, &off, &len);
    for (int b = 0; b < k / blck_of(t); b++) {
        uint8_t *blk = row + (size_t)b * bs;
        for (size_t i = 0; i < bs; i++)
            if (i < off || i >= off + len) {
                blk[i] = (uint8_t)rng_next(r);
                if (act && blk[i] == 0x80) blk[i] = 0x81;
            }
        if (t == DTYPE_Q8_K) {
            struct block_q8_K *x = (struct block_q8_K *)blk;
            for (int j = 0; j < QK_K / 16; j++) {
                int sum = 0;
                for (int i = 0; i < 16; i++)
                    sum += x->qs[16 * j + i];
                x->bsums[j] = (int16_t)sum;
            }
        }
    }
}

/* Token groups past one pass (18..40 tokens: two or three groups per panel
 * pair) and the extremes of every field: half the weight rows and half the
 * tokens carry random bytes in place of their quants and sub-block scales
 * (q6_K scales of -128, q4_K six-bit scales and mins of 63, activations of
 * -127 and weights of -128), which no quantizer writes. Each n-token call over the last n
 * tokens equals kern_matmul's reference bitwise, at every level. */
TEST(packed_token_groups_and_extremes)
{
    struct rng r = {9090};
    static const int shapes[][2] = {/* rows, k */ {53, 512}, {32, 224}};
    const int N = 40;
    for (int ti = 0; ti < N_PACKED; ti++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            const enum dtype wt = packed_types[ti];
            int k = shapes[si][1];
            if (blck_of(wt) == QK_K) k = (k + QK_K - 1) / QK_K * QK_K;
            kern_set_isa(kern_isa_max());
            struct prob p;
            prob_init(&p, &r, wt, shapes[si][0], k, N);
            const int rows = p.rows;
            for (int i = 0; i < rows; i += 2)
                scramble_row(&r, wt, p.W + (size_t)i * p.wrb, k, false);
            for (int t = 1; t < N; t += 2)
                scramble_row(&r, kern_act_type(wt), p.X + (size_t)t * p.xrb, k, true);
            void *P = pack_prob(&p);
            size_t xsb;
            uint8_t *XS = side_prob(&p, &xsb);
            float *ref = malloc(sizeof(float) * rows * N), *y = malloc(sizeof(float) * rows * N);
            kern_set_isa(KERN_ISA_SCALAR);
            run(&p, 0, rows, 0, N, ref, rows);
            for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
                kern_set_isa((enum kern_isa)isa);
                int bad = 0;
                for (int n = 1; n <= N; n++) {
                    const int t0 = N - n, before = bad;
                    kern_matmul_packed(wt, P, rows, p.k, 0, rows, p.X + (size_t)t0 * p.xrb, p.xrb,
                                       XS + (size_t)t0 * xsb, xsb, n, y, rows);
                    bad += !same_bits(ref + (size_t)t0 * rows, y, rows * n);
                    if (bad > before)
                        fprintf(stderr, "  %s packed %s rows=%d k=%d n_tok=%d: differs\n",
                                kern_isa_name((enum kern_isa)isa), dtype_info(wt)->name, rows, p.k,
                                n);
                }
                EXPECT_EQ_INT(bad, 0);
            }
            free(P);
            free(XS);
            free(ref);
            free(y);
            prob_free(&p);
        }
    kern_set_isa(kern_isa_max());
}

static const enum dtype kv_types[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

/* x rounded to bf16 as the kernels round queries and weights over a bf16
 * cache (the test values are never subnormal) */
static float round_bf16(float x)
{
    return kern_bf16_to_f32(kern_f32_to_bf16(x));
}

/* Names a failing KV case on stderr; returns its failure count. */
static int kv_failures(enum dtype kv, int d, int n, int bad)
{
    if (bad) fprintf(stderr, "  %s d=%d n=%d: %d failures\n", dtype_info(kv)->name, d, n, bad);
    return bad;
}

TEST(kv_dot_and_accum)
{
    struct rng r = {606};
    static const int ds[] = {1, 3, 5, 16, 17, 64, 100, 128, 129};
    static const int ns[] = {1, 3, 4, 9, 16, 31, 48};
    for (int ki = 0; ki < 3; ki++) {
        enum dtype kv = kv_types[ki];
        size_t es = kv == DTYPE_F32 ? 4 : 2;
        for (size_t di = 0; di < sizeof(ds) / sizeof(ds[0]); di++)
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
                int d = ds[di], n = ns[ni], ld = n + 3;
                size_t stride = (size_t)d * es + 6;
                /* the same keys as a K panel (KT) and as rows (V, for the sum) */
                uint8_t *KT = calloc((size_t)d * (size_t)ld, es);
                uint8_t *V = calloc((size_t)n, stride);
                float *tmp = malloc(sizeof(float) * d), *q = malloc(sizeof(float) * d);
                float *w = malloc(sizeof(float) * n), *o0 = malloc(sizeof(float) * n);
                float *o1 = malloc(sizeof(float) * n), *init = malloc(sizeof(float) * d);
                float *a0 = malloc(sizeof(float) * d), *a1 = malloc(sizeof(float) * d);
                for (int j = 0; j < n; j++) {
                    fill_normal(&r, tmp, d, 1.0f);
                    kern_kv_store_col(kv, tmp, KT, ld, j, d);
                    kern_kv_store(kv, tmp, V + (size_t)j * stride, d);
                    w[j] = fabsf(rng_unit(&r));
                }
                fill_normal(&r, q, d, 1.0f);
                fill_normal(&r, init, d, 1.0f);
                int bad = 0;
                kern_set_isa(KERN_ISA_SCALAR);
                kern_kv_dot(kv, KT, ld, n, q, d, o0);
                memcpy(a0, init, sizeof(float) * d);
                kern_kv_accum(kv, V, stride, n, w, d, a0);
                /* reference against exact (over a bf16 cache, of q and w
                 * rounded to bf16: kernels.h); the panel holds the rows' values */
                for (int j = 0; j < n; j++) {
                    double s = 0, S = 0;
                    for (int e = 0; e < d; e++) {
                        double ke = decode_elem(kv, KT, e * ld + j, NULL);
                        double qe = kv == DTYPE_BF16 ? round_bf16(q[e]) : q[e];
                        bad += fbits((float)ke) !=
                               fbits((float)decode_elem(kv, V + (size_t)j * stride, e, NULL));
                        s += ke * qe;
                        S += fabs(ke * qe);
                    }
                    bad += fabs(o0[j] - s) > 2 * (d / 4.0 + 12) * U * S + 1e-30;
                }
                for (int e = 0; e < d; e++) {
                    double s = init[e], S = fabs(init[e]);
                    for (int j = 0; j < n; j++) {
                        double ve = decode_elem(kv, V + (size_t)j * stride, e, NULL);
                        double wj = kv == DTYPE_BF16 ? round_bf16(w[j]) : w[j];
                        s += wj * ve;
                        S += fabs(wj * ve);
                    }
                    bad += fabs(a0[e] - s) > 2 * (n + 8) * U * S + 1e-30;
                }
                for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
                    kern_set_isa((enum kern_isa)isa);
                    kern_kv_dot(kv, KT, ld, n, q, d, o1);
                    bad += !same_bits(o0, o1, n);
                    /* each row alone, in the first lane, gives the same bits */
                    for (int j = 0; j < n; j++) {
                        float one;
                        kern_kv_dot(kv, KT + (size_t)j * es, ld, 1, q, d, &one);
                        bad += fbits(one) != fbits(o0[j]);
                    }
                    /* and so do the rows from j on, at other lanes */
                    int from = n / 3;
                    kern_kv_dot(kv, KT + (size_t)from * es, ld, n - from, q, d, o1);
                    bad += !same_bits(o0 + from, o1, n - from);
                    memcpy(a1, init, sizeof(float) * d);
                    kern_kv_accum(kv, V, stride, n, w, d, a1);
                    bad += !same_bits(a0, a1, d);
                    /* rows in two calls give the same bits */
                    int cut = n / 2;
                    memcpy(a1, init, sizeof(float) * d);
                    kern_kv_accum(kv, V, stride, cut, w, d, a1);
                    kern_kv_accum(kv, V + (size_t)cut * stride, stride, n - cut, w + cut, d, a1);
                    bad += !same_bits(a0, a1, d);
                }
                EXPECT_EQ_INT(kv_failures(kv, d, n, bad), 0);
                free(KT);
                free(V);
                free(tmp);
                free(q);
                free(w);
                free(o0);
                free(o1);
                free(init);
                free(a0);
                free(a1);
            }
    }
    kern_set_isa(kern_isa_max());
}

/* The grouped-head forms equal one single-head call per head, bitwise, at
 * every level (strided q, w and outputs; head counts around the kernels'
 * register groups; widths with and without 16-lane tails). */
TEST(kv_heads_equal_single_head_calls)
{
    struct rng r = {707};
    static const int ds[] = {5, 16, 17, 64, 100, 128, 129};
    static const int ns[] = {1, 15, 16, 17, 33};
    static const int hs[] = {1, 2, 3, 4, 5, 7, 8, 9, 14};
    for (int ki = 0; ki < 3; ki++) {
        enum dtype kv = kv_types[ki];
        size_t es = kv == DTYPE_F32 ? 4 : 2;
        for (size_t di = 0; di < sizeof(ds) / sizeof(ds[0]); di++)
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
                int d = ds[di], n = ns[ni], H = 14, ld = n + 2;
                size_t stride = (size_t)d * es + 10;
                int ldq = d + 3, ldw = n + 5, ldo = d + 1, lds = n + 2;
                uint8_t *KT = calloc((size_t)d * (size_t)ld, es);
                uint8_t *V = calloc((size_t)n, stride);
                /* one allocation, cut into tmp, q, w, s0, s1, a0, a1 */
                float *all =
                    malloc(sizeof(float) * (size_t)(d + (ldq + ldw + 2 * lds + 2 * ldo) * H));
                float *tmp = all, *q = tmp + d, *w = q + ldq * H, *s0 = w + ldw * H;
                float *s1 = s0 + lds * H, *a0 = s1 + lds * H, *a1 = a0 + ldo * H;
                for (int j = 0; j < n; j++) {
                    fill_normal(&r, tmp, d, 1.0f);
                    kern_kv_store_col(kv, tmp, KT, ld, j, d);
                    fill_normal(&r, tmp, d, 1.0f);
                    kern_kv_store(kv, tmp, V + (size_t)j * stride, d);
                }
                fill_normal(&r, q, ldq * H, 1.0f);
                for (int i = 0; i < ldw * H; i++)
                    w[i] = fabsf(rng_unit(&r));
                int bad = 0;
                for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
                    kern_set_isa((enum kern_isa)isa);
                    for (size_t hi = 0; hi < sizeof(hs) / sizeof(hs[0]); hi++) {
                        int nh = hs[hi];
                        for (int i = 0; i < lds * H; i++)
                            s0[i] = s1[i] = sentinel();
                        fill_normal(&r, a0, ldo * H, 1.0f);
                        memcpy(a1, a0, sizeof(float) * (size_t)ldo * H);
                        for (int h = 0; h < nh; h++) {
                            kern_kv_dot(kv, KT, ld, n, q + (size_t)h * ldq, d,
                                        s0 + (size_t)h * lds);
                            kern_kv_accum(kv, V, stride, n, w + (size_t)h * ldw, d,
                                          a0 + (size_t)h * ldo);
                        }
                        kern_kv_dot_heads(kv, KT, ld, n, q, ldq, nh, d, s1, lds);
                        kern_kv_accum_heads(kv, V, stride, n, w, ldw, nh, d, a1, ldo);
                        /* padding and heads past nh untouched, like the single calls */
                        bad += !same_bits(s0, s1, lds * H);
                        bad += !same_bits(a0, a1, ldo * H);
                    }
                }
                EXPECT_EQ_INT(kv_failures(kv, d, n, bad), 0);
                free(KT);
                free(V);
                free(all);
            }
    }
    kern_set_isa(kern_isa_max());
}

/* One token's attention over a block table (kern_attend_heads) equals, at
 * every level and bitwise, the per-block calls it stands for: q.K per
 * block, the softmax weights per head, the V sum per block into zeroed
 * rows, each head's row times 1 / its sum. Blocks sit out of order in a
 * shared arena; contexts end inside, at and past a block's end; head
 * counts around the register groups. */
TEST(attend_heads_equals_per_block_calls)
{
    struct rng r = {909};
    static const int ds[] = {16, 64, 100, 520}; /* 520: past the bf16 kernel's packed q */
    static const int lds_[] = {15, 16, 32};
    static const int ns[] = {1, 15, 16, 17, 100, 300};
    static const int hs[] = {1, 3, 7, 8, 9, 14};
    enum { N_BLOCKS = 24 };
    for (int ki = 0; ki < 3; ki++) {
        enum dtype kv = kv_types[ki];
        size_t es = kv == DTYPE_F32 ? 4 : 2;
        for (size_t di = 0; di < sizeof(ds) / sizeof(ds[0]); di++)
            for (size_t li = 0; li < sizeof(lds_) / sizeof(lds_[0]); li++) {
                const int d = ds[di], ld = lds_[li], H = 14;
                const size_t bstride = (size_t)d * ld * es + 64;
                uint8_t *K = calloc(N_BLOCKS, bstride), *V = calloc(N_BLOCKS, bstride);
                int32_t ids[N_BLOCKS];
                for (int i = 0; i < N_BLOCKS; i++)
                    ids[i] = (i * 7 + 3) % N_BLOCKS; /* a permutation */
                float tmp[520];
                for (int b = 0; b < N_BLOCKS; b++)
                    for (int j = 0; j < ld; j++) {
                        fill_normal(&r, tmp, d, 1.0f);
                        kern_kv_store_col(kv, tmp, K + (size_t)b * bstride, ld, j, d);
                        fill_normal(&r, tmp, d, 1.0f);
                        kern_kv_store(kv, tmp, V + (size_t)b * bstride + (size_t)j * d * es, d);
                    }
                const int ldq = d + 3, ldo = d + 1, lds = N_BLOCKS * ld + 5;
                float *q = malloc(sizeof(float) * (size_t)ldq * H);
                float *s0 = malloc(sizeof(float) * (size_t)lds * H);
                float *s1 = malloc(sizeof(float) * (size_t)lds * H);
                float *a0 = malloc(sizeof(float) * (size_t)ldo * H);
                float *a1 = malloc(sizeof(float) * (size_t)ldo * H);
                fill_normal(&r, q, ldq * H, 1.0f);
                int bad = 0, checked = 0;
                for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
                    kern_set_isa((enum kern_isa)isa);
                    for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                        for (size_t hi = 0; hi < sizeof(hs) / sizeof(hs[0]); hi++) {
                            const int n = ns[ni], nh = hs[hi];
                            if (n > N_BLOCKS * ld) continue;
                            const float scale = 0.125f;
                            for (int i = 0; i < ldo * H; i++)
                                a0[i] = a1[i] = sentinel();
                            for (int p0 = 0, i = 0; p0 < n; p0 += ld, i++)
                                kern_kv_dot_heads(kv, K + (size_t)ids[i] * bstride, ld,
                                                  n - p0 < ld ? n - p0 : ld, q, ldq, nh, d, s0 + p0,
                                                  lds);
                            float total[14];
                            for (int h = 0; h < nh; h++) {
                                total[h] = kern_softmax_exp(s0 + (size_t)h * lds, n, scale);
                                memset(a0 + (size_t)h * ldo, 0, sizeof(float) * (size_t)d);
                            }
                            for (int p0 = 0, i = 0; p0 < n; p0 += ld, i++)
                                kern_kv_accum_heads(kv, V + (size_t)ids[i] * bstride, d * es,
                                                    n - p0 < ld ? n - p0 : ld, s0 + p0, lds, nh, d,
                                                    a0, ldo);
                            for (int h = 0; h < nh; h++) {
                                const float inv = 1.0f / total[h];
                                for (int i = 0; i < d; i++)
                                    a0[(size_t)h * ldo + i] *= inv;
                            }
                            kern_attend_heads(kv, K, V, bstride, ids, ld, n, q, ldq, nh, d, scale,
                                              s1, lds, a1, ldo);
                            /* outputs, and the padding and heads past nh untouched */
                            bad += !same_bits(a0, a1, ldo * H);
                            checked++;
                        }
                }
                EXPECT(checked > 0);
                EXPECT_EQ_INT(kv_failures(kv, d, ld, bad), 0);
                free(K);
                free(V);
                free(q);
                free(s0);
                free(s1);
                free(a0);
                free(a1);
            }
    }
    kern_set_isa(kern_isa_max());
}

/* Over a bf16 cache kern_attend_heads rounds q as the composition does
 * (kern_kv_dot's rounding in dispatch.c): subnormals to a zero of their
 * sign, ties to even. Keys of 2^126 make what rounding does to subnormal q
 * elements (2^-127: 0.5 in the score) visible in the softmax weights, hence
 * in the output; keys of 1 do the same for ties. */
TEST(attend_heads_rounds_q_over_bf16)
{
    enum { D = 16 };
    static const uint32_t qbits[2][D] = {
        {0x00400000u, 0x80200000u, 0x00200000u, 0x003fffffu, 0x80000000u, 0x00000000u, 0x00010000u,
         0x80008000u, 0x00400000u, 0x00600000u, 0x00000001u, 0x80000001u, 0x00408000u, 0x00418000u,
         0x007f8000u, 0x00000000u},
        {0x3f808000u, 0x3f818000u, 0xbf818000u, 0x3e808000u, 0x3f828000u, 0x3f838000u, 0x3f848000u,
         0x3f858000u, 0x3f808001u, 0x3f807fffu, 0x3f868000u, 0x3f878000u, 0x3f888000u, 0x3f898000u,
         0x3f8a8000u, 0x3f8b8000u}};
    static const float kval[2] = {0x1p126f, 1.0f};
    const int32_t id = 0;
    int bad = 0;
    for (int c = 0; c < 2; c++) {
        float q[D], kv0[D], zero[D] = {0}, ones[D];
        memcpy(q, qbits[c], sizeof(q));
        for (int e = 0; e < D; e++) {
            kv0[e] = kval[c];
            ones[e] = 1.0f;
        }
        uint16_t K[D * 2], V[2 * D];
        kern_kv_store_col(DTYPE_BF16, kv0, K, 2, 0, D); /* position 0 against 1: zero keys */
        kern_kv_store_col(DTYPE_BF16, zero, K, 2, 1, D);
        kern_kv_store(DTYPE_BF16, ones, V, D);
        kern_kv_store(DTYPE_BF16, zero, V + D, D);
        for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
            kern_set_isa((enum kern_isa)isa);
            float s0[2], s1[2], a0[D], a1[D];
            kern_kv_dot(DTYPE_BF16, K, 2, 2, q, D, s0);
            const float total = kern_softmax_exp(s0, 2, 1.0f);
            memset(a0, 0, sizeof(a0));
            kern_kv_accum(DTYPE_BF16, V, D * 2, 2, s0, D, a0);
            for (int i = 0; i < D; i++)
                a0[i] *= 1.0f / total;
            kern_attend_heads(DTYPE_BF16, K, V, 0, &id, 2, 2, q, D, 1, D, 1.0f, s1, 2, a1, D);
            bad += !same_bits(a0, a1, D);
        }
    }
    EXPECT_EQ_INT(bad, 0);
    kern_set_isa(kern_isa_max());
}

TEST(kv_store_round_trip)
{
    struct rng r = {1};
    float x[133], y[133];
    uint8_t buf[134 * 4];
    fill_normal(&r, x, 133, 10.0f);
    for (int isa = 0; isa <= (int)kern_isa_max(); isa++) {
        kern_set_isa((enum kern_isa)isa);
        for (int ki = 0; ki < 3; ki++) {
            for (int n = 0; n <= 133; n += 19) {
                memset(buf, 0xab, sizeof buf);
                kern_kv_store(kv_types[ki], x, buf, n);
                kern_dequantize_row(kv_types[ki], buf, y, n);
                int bad = 0;
                for (int i = 0; i < n; i++) {
                    float want = kv_types[ki] == DTYPE_F32 ? x[i]
                                 : kv_types[ki] == DTYPE_F16
                                     ? kern_f16_to_f32(kern_f32_to_f16(x[i]))
                                     : kern_bf16_to_f32(kern_f32_to_bf16(x[i]));
                    bad += fbits(y[i]) != fbits(want);
                }
                size_t es = kv_types[ki] == DTYPE_F32 ? 4 : 2;
                bad += buf[es * (size_t)n] != 0xab; /* nothing written past n */
                /* as column 2 of a panel of 3 columns: the same elements,
                 * every other byte untouched */
                uint8_t col[133 * 3 * 4];
                memset(col, 0xab, sizeof col);
                kern_kv_store_col(kv_types[ki], x, col, 3, 2, n);
                for (size_t b = 0; b < sizeof col; b++) {
                    size_t el = b / es;
                    if (el % 3 == 2 && el / 3 < (size_t)n)
                        bad += col[b] != buf[(el / 3) * es + b % es];
                    else
                        bad += col[b] != 0xab;
                }
                EXPECT_EQ_INT(bad, 0);
            }
        }
    }
    kern_set_isa(kern_isa_max());
}

TEST(dot_and_sum_sq)
{
    struct rng r = {77};
    static const int ns[] = {0, 1, 15, 16, 17, 100, 1000, 4097};
    for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
        int n = ns[ni];
        float *a = malloc(sizeof(float) * (n + 1)), *b = malloc(sizeof(float) * (n + 1));
        fill_normal(&r, a, n, 1.0f);
        fill_normal(&r, b, n, 2.0f);
        kern_set_isa(KERN_ISA_SCALAR);
        float d0 = kern_dot_f32(a, b, n), s0 = kern_sum_sq_f32(a, n);
        double de = 0, dS = 0, se = 0;
        for (int i = 0; i < n; i++) {
            de += (double)a[i] * b[i];
            dS += fabs((double)a[i] * b[i]);
            se += (double)a[i] * a[i];
        }
        EXPECT(fabs(d0 - de) <= 2 * (n / 16.0 + 12) * U * dS + 1e-30);
        EXPECT(fabs(s0 - se) <= 2 * (n / 16.0 + 12) * U * se + 1e-30);
        for (int isa = 1; isa <= (int)kern_isa_max(); isa++) {
            kern_set_isa((enum kern_isa)isa);
            EXPECT_EQ_INT(fbits(kern_dot_f32(a, b, n)), fbits(d0));
            EXPECT_EQ_INT(fbits(kern_sum_sq_f32(a, n)), fbits(s0));
        }
        free(a);
        free(b);
    }
    kern_set_isa(kern_isa_max());
}

TEST_MAIN()
