/*
 * kernels_avx2.c - the AVX2 level (AVX2 + FMA + F16C), for x86 CPUs
 * without AVX-512 VNNI/BF16.
 *
 * Same canonical arithmetic as the scalar reference (kernels_impl.h), so
 * this level's results equal the reference bit for bit. Without VNNI the
 * integer dot products use vpmaddubsw (unsigned x signed bytes into int16
 * pairs) and vpmaddwd; the int16 pairs never saturate because
 *   q8_0:  |w| <= 128 (sign moved onto x with vpsignb), |x| <= 127
 *          -> |pair| <= 2 * 128 * 127 = 32512
 *   q4_0, q4_K: q <= 15 -> |pair| <= 3810;  q5_K: q <= 31 -> |pair| <= 7874;
 *   q6_K: q <= 63 -> |pair| <= 16002
 * (activation quants stay in [-127, 127], kernels_ref.c).
 *
 * Layout: lanes along k. For the quantized types one tile is 8 (row,
 * token) pairs - 8 rows x 1 token for decode, 4 rows x 2 tokens otherwise:
 * per block it computes 8 partial-sum vectors, folds them with one
 * transposing vphaddd tree into 8 exact integers (one lane each), and runs
 * the 8 canonical float chains side by side in one ymm. Float weights use
 * the canonical 16 lanes as two ymm (lanes 0..7 and 8..15) per element, in
 * streaming register tiles (see the float section); ragged tails go through
 * zero-padded copies, which is exactly the reference's zero padding.
 * Scalar f16 scales convert with F16C (the same bits as kern__f16_to_f32).
 *
 * Thread safety: pure; per-thread scratch from kern__scratch.
 */
#include "base/check.h"
#include "kernels/kernels_impl.h"
#include "kernels/vecmath.h"
#include "kernels/quants.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* ---- helpers ---- */

/* The canonical 16-lane reduction over lanes lo (0..7) and hi (8..15). */
AI float hsum16(__m256 lo, __m256 hi)
{
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* p[l] (8 int32 partials each) -> lane l = sum of p[l]. */
AI __m256i tree8(const __m256i p[8])
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

AI __m256i load256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles then high nibbles. */
AI __m256i nibbles32(const void *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

/* 8 f32 values from 8 elements of a weight row of type wt. */
AI __m256 ld8(int wt, const char *p)
{
    if (wt == DTYPE_F32) return _mm256_loadu_ps((const float *)p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (wt == DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static size_t elem_size(int t)
{
    return t == DTYPE_F32 ? 4 : 2;
}

/* Elements [e, e + n) of a row (n < 16), as 16 floats padded with zeros. */
static void tail16(int t, const char *row, int e, int n, float out[16])
{
    for (int i = 0; i < 16; i++) {
        if (i >= n) {
            out[i] = 0.0f;
            continue;
        }
        const char *p = row + elem_size(t) * (size_t)(e + i);
        if (t == DTYPE_F32)
            out[i] = kern__ldf(p);
        else if (t == DTYPE_F16)
            out[i] = kern__f16_to_f32(kern__ld16(p));
        else
            out[i] = kern__bf16_to_f32(kern__ld16(p));
    }
}

/* ================= float weights =================
 *
 * The canonical 16 lanes of one output element (kernels_impl.h) are two ymm:
 * lanes 0..7 and 8..15. Activations are read as f32 rows whose length is a
 * multiple of 16, zero-padded (f32 activations in place when k is such a
 * multiple; bf16 activations, or a ragged k, converted once per call into
 * the PREP slot), so every product the reference pads with zeros is
 * fma(+0, +0, lane) here too and only weight rows end raggedly.
 *
 * One kernel for every token count: the weights stream through registers,
 * converted there (vcvtph2ps for f16, a 16-bit shift for bf16), in tiles of
 * R rows x T tokens sized to the 16 ymm: 4 x 1 for one token (8
 * accumulators), 3 x 2 for two and four, 2 x 3 otherwise (12 accumulators,
 * two weight vectors and one activation vector: 15). FMA latency times FMA
 * ports is 8 on Zen 4, so a tile needs at least 8 independent accumulators
 * to reach the FMA peak. Whichever operand is fewer stays in registers, and
 * no loaded vector is folded into several FMAs as a memory operand (in_reg):
 * a 2 x 3 step reads 10 vectors for 12 FMAs, so the loads are the limit.
 * More tokens run groups of at most 3 on the same 2 rows, which the first
 * group left in L1 (rows longer than FC_KC in ranges of about FC_KC
 * columns, the 16-lane sums waiting in the ACC slot between ranges), token
 * block after token block whose activations stay in L2 (L2_FX bytes):
 *
 *   for token block (L2_FX bytes of activations)
 *     for 2 rows: for range of columns
 *       for up to 3 tokens: tile over the range (the first group
 *                           prefetches the next 2 rows' share)
 *
 * Each tile's first group prefetches the next tile's rows (one contiguous
 * range, spread evenly over its steps, into L2): short rows end before the
 * hardware prefetchers ramp up, and interleaved row streams confuse them.
 * Converting a panel of weights to f32 once into an L1 buffer and reusing it
 * across the token tiles (k-chunked, the 16-lane sums carried between
 * chunks) measured slower at every batch size on Zen 4: the conversion is a
 * phase that waits on memory, where the streaming tiles overlap it, and the
 * chunked tiles' extra loads and stores cost more than vcvtph2ps
 * (docs/benchmarks.md).
 */

#define L2_FX (384 << 10) /* activation bytes a token block keeps in L2 */
#define FC_KC 1024        /* columns of a row range that several token groups share */

struct mmf {
    const char *W;  /* weight rows */
    size_t wrb;     /* bytes per weight row */
    int k;          /* elements per row */
    int r1;         /* one past the last valid row (rows beyond are clamped) */
    const float *X; /* activation rows as f32, a multiple of 16 long, zero-padded */
    size_t xs;      /* floats per activation row */
    float *y;       /* output, y[t * ldy + r] */
    int ldy;        /* floats per output token row */
};

/* v, pinned to a register: a loaded vector that feeds several FMAs must
 * not be folded into each of them as a memory operand (the loads, not the
 * FMAs, would then bound the tile). */
AI __m256 in_reg(__m256 v)
{
    __asm__("" : "+x"(v));
    return v;
}

/* acc[i][j][h] += w_i x_j over lanes 8h .. 8h + 7 of the 16 at element e,
 * R rows x T tokens. Whichever operand is fewer stays in registers while
 * the other streams through one: 2 R T + min(R, T) + 1 ymm. */
AI void mmf_step(__m256 acc[4][3][2], const int wt, const char *const *w, const float *const *x,
                 int e, const int R, const int T)
{
    const size_t es = elem_size(wt);
    for (int h = 0; h < 2; h++) {
        const int eh = e + 8 * h;
        if (R <= T) {
            __m256 wv[4];
            for (int i = 0; i < R; i++)
                wv[i] = in_reg(ld8(wt, w[i] + es * (size_t)eh));
            for (int j = 0; j < T; j++) {
                const __m256 xv = in_reg(_mm256_loadu_ps(x[j] + eh));
                for (int i = 0; i < R; i++)
                    acc[i][j][h] = _mm256_fmadd_ps(wv[i], xv, acc[i][j][h]);
            }
        } else {
            __m256 xv[3];
            for (int j = 0; j < T; j++)
                xv[j] = in_reg(_mm256_loadu_ps(x[j] + eh));
            for (int i = 0; i < R; i++) {
                const __m256 wv = in_reg(ld8(wt, w[i] + es * (size_t)eh));
                for (int j = 0; j < T; j++)
                    acc[i][j][h] = _mm256_fmadd_ps(wv, xv[j], acc[i][j][h]);
            }
        }
    }
}

/* The columns one streaming tile covers: [c0, c1) of every row, c0 a
 * multiple of 16 (c1 too unless it is k). A row cut in several ranges keeps
 * the 16-lane sums of each (row, token) in mem between them. */
struct mmf_cols {
    int c0, c1; /* the range */
    int first;  /* c0 == 0: the sums start at +0 */
    int last;   /* c1 == k: the sums go to y */
    float *mem; /* (tokens from tm0, 4 rows, 16) sums between ranges */
    int tm0;    /* the token at mem's start */
};

/* Streaming tile: rows r .. r + R - 1 (past r1: clamped, not stored) x
 * tokens t0 .. t0 + T - 1 over the columns of c; pf: prefetch the next
 * tile's rows. */
AI void mmf_stream(const struct mmf *a, int r, int t0, const int wt, const int R, const int T,
                   int pf, const struct mmf_cols *c)
{
    const size_t es = elem_size(wt);
    const char *w[4];
    const float *x[3];
    for (int i = 0; i < R; i++)
        w[i] = a->W + (size_t)(r + i < a->r1 ? r + i : a->r1 - 1) * a->wrb;
    for (int j = 0; j < T; j++)
        x[j] = a->X + (size_t)(t0 + j) * a->xs;
    __m256 acc[4][3][2];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < T; j++)
            for (int h = 0; h < 2; h++)
                acc[i][j][h] =
                    c->first
                        ? _mm256_setzero_ps()
                        : _mm256_load_ps(c->mem + ((size_t)(t0 + j - c->tm0) * 4 + (size_t)i) * 16 +
                                         8 * h);
    /* the next tile's R rows are one range as long as this tile's: R * 16
     * * es bytes of it per step, one sequential stream of prefetches into
     * L2 (into L1, long rows' lines would be evicted before their turn) */
    const char *next = a->W + (size_t)(r + R) * a->wrb;
    const int k = a->k, e1 = c->c1 < k ? c->c1 : k & ~15;
    for (int e = c->c0; e < e1; e += 16) {
        if (pf)
            for (int o = 0; o < R * 16 * (int)es; o += 64)
                _mm_prefetch(next + (size_t)R * es * (size_t)e + (size_t)o, _MM_HINT_T1);
        mmf_step(acc, wt, w, x, e, R, T);
    }
    if (c->last && e1 < k) { /* the row's last elements, zero-padded to 16 */
        float wpad[4][16];
        const char *wp[4];
        const float *xp[3];
        for (int i = 0; i < R; i++) {
            tail16(wt, w[i], e1, k - e1, wpad[i]);
            wp[i] = (const char *)wpad[i];
        }
        for (int j = 0; j < T; j++)
            xp[j] = x[j] + e1;
        mmf_step(acc, DTYPE_F32, wp, xp, 0, R, T);
    }
    for (int i = 0; i < R; i++)
        for (int j = 0; j < T; j++) {
            if (!c->last) {
                float *m = c->mem + ((size_t)(t0 + j - c->tm0) * 4 + (size_t)i) * 16;
                _mm256_store_ps(m, acc[i][j][0]);
                _mm256_store_ps(m + 8, acc[i][j][1]);
            } else if (r + i < a->r1) {
                a->y[(size_t)(t0 + j) * a->ldy + r + i] = hsum16(acc[i][j][0], acc[i][j][1]);
            }
        }
}

typedef void (*mmf_fn)(const struct mmf *a, int r, int t0, int pf, const struct mmf_cols *c);

#define DEF_MMF(name, wt, R, T)                                                                    \
    static __attribute__((noinline)) void name(const struct mmf *a, int r, int t0, int pf,         \
                                               const struct mmf_cols *c)                           \
    {                                                                                              \
        mmf_stream(a, r, t0, wt, R, T, pf, c);                                                     \
    }
#define DEF_MMF_ALL(pfx, wt)                                                                       \
    DEF_MMF(pfx##41, wt, 4, 1)                                                                     \
    DEF_MMF(pfx##32, wt, 3, 2)                                                                     \
    DEF_MMF(pfx##21, wt, 2, 1)                                                                     \
    DEF_MMF(pfx##22, wt, 2, 2)                                                                     \
    DEF_MMF(pfx##23, wt, 2, 3)                                                                     \
    static const mmf_fn pfx##fns[5] = {pfx##41, pfx##32, pfx##21, pfx##22, pfx##23};
DEF_MMF_ALL(mmf_f32_, DTYPE_F32)
DEF_MMF_ALL(mmf_f16_, DTYPE_F16)
DEF_MMF_ALL(mmf_bf16_, DTYPE_BF16)

/* One pass over rows [r0, r1) for tokens [t0, t0 + n_tok); mem: room for
 * the sums of n_tok tokens (struct mmf_cols). */
static void mmf_pass(const struct mmf *a, const mmf_fn *fns, int r0, int t0, int n_tok, float *mem)
{
    const int k = a->k;
    const struct mmf_cols whole = {0, k, 1, 1, mem, t0};
    if (n_tok <= 2) {
        const int R = n_tok == 1 ? 4 : 3;
        const mmf_fn fn = fns[n_tok - 1];
        for (int r = r0; r < a->r1; r += R)
            fn(a, r, t0, 1, &whole);
        return;
    }
    /* Several groups read the same rows: in ranges of about FC_KC columns,
     * so that a range of the rows stays in L1 while the groups go by. n_tok
     * == 4: two groups of 2 on 3 rows (12 accumulators, not 8); else groups
     * of near-equal size, at most 3 tokens each, on 2 rows. */
    const int R = n_tok == 4 ? 3 : 2, n_groups = n_tok == 4 ? 2 : (n_tok + 2) / 3;
    const int n_cols = (k + FC_KC - 1) / FC_KC;
    for (int r = r0; r < a->r1; r += R)
        for (int ci = 0; ci < n_cols; ci++) {
            const int c0 = (int)((int64_t)ci * k / n_cols) & ~15;
            const int c1 = ci + 1 == n_cols ? k : (int)((int64_t)(ci + 1) * k / n_cols) & ~15;
            const struct mmf_cols cols = {c0, c1, ci == 0, ci + 1 == n_cols, mem, t0};
            for (int g = 0; g < n_groups; g++) {
                const int g0 = g * n_tok / n_groups, T = (g + 1) * n_tok / n_groups - g0;
                fns[R == 3 ? 1 : 1 + T](a, r, t0 + g0, g == 0, &cols);
            }
        }
}

/* Passes over token blocks whose activations stay in L2. */
static void mmf_stream_blocks(const struct mmf *a, const mmf_fn *fns, int r0, int n_tok)
{
    size_t tb = L2_FX / (sizeof(float) * a->xs);
    tb = tb < 3 ? 3 : tb - tb % 3;
    const int TB = tb < (size_t)n_tok ? (int)tb : n_tok;
    float *mem = kern__scratch(KERN__SLOT_ACC, sizeof(float) * 4 * 16 * (size_t)TB);
    for (int t0 = 0; t0 < n_tok; t0 += TB)
        mmf_pass(a, fns, r0, t0, n_tok - t0 < TB ? n_tok - t0 : TB, mem);
}

/* The activations as f32 rows of a multiple of 16, zero-padded: in place
 * where they already are (*xs: floats per row). */
static const float *act_f32(int xt, const void *xq, size_t xrb, int k, int n_tok, size_t *xs)
{
    if (xt == DTYPE_F32 && k % 16 == 0 && xrb % sizeof(float) == 0 &&
        (uintptr_t)xq % sizeof(float) == 0) {
        *xs = xrb / sizeof(float);
        return xq;
    }
    const int k16 = (k + 15) & ~15;
    const size_t es = elem_size(xt);
    float *X = kern__scratch(KERN__SLOT_PREP, sizeof(float) * (size_t)k16 * (size_t)n_tok);
    for (int t = 0; t < n_tok; t++) {
        const char *row = (const char *)xq + (size_t)t * xrb;
        float *out = X + (size_t)t * k16;
        int e = 0;
        for (; e + 16 <= k; e += 16) {
            _mm256_store_ps(out + e, ld8(xt, row + es * (size_t)e));
            _mm256_store_ps(out + e + 8, ld8(xt, row + es * (size_t)(e + 8)));
        }
        if (e < k) tail16(xt, row, e, k - e, out + e);
    }
    *xs = (size_t)k16;
    return X;
}

static void matmul_float(enum dtype wt, const void *W, size_t wrb, int k, int r0, int r1,
                         const void *xq, size_t xrb, int n_tok, float *y, int ldy)
{
    size_t xs;
    const float *X = act_f32(wt == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32, xq, xrb, k, n_tok, &xs);
    const struct mmf a = {W, wrb, k, r1, X, xs, y, ldy};
    mmf_stream_blocks(&a,
                      wt == DTYPE_F32   ? mmf_f32_fns
                      : wt == DTYPE_F16 ? mmf_f16_fns
                                        : mmf_bf16_fns,
                      r0, n_tok);
}

/* ================= quantized weights ================= */

/* Activation side data for q8_0 activations: scale and -offset * sum(q). */
struct xq8 {
    float d;      /* activation scale */
    int32_t bias; /* -offset * sum of the block's quants */
};

struct mmq {
    const char *W;        /* weight rows */
    size_t wrb;           /* bytes per weight row */
    int nb;               /* blocks per row */
    int r1;               /* one past the last valid row */
    const char *X;        /* activation rows */
    size_t xrb;           /* bytes per activation row */
    const struct xq8 *pr; /* (n_tok, nb) q8_0 side data, or NULL */
    float *y;             /* output */
    int ldy;              /* floats per output token row */
};

/* A tile is QR rows x (8 / QR) tokens, QR = 8 (one token) or 4 (two); lane
 * l of the result vector is row l % QR, token l / QR. */
static inline float f16s(const void *p)
{
    return _cvtsh_ss(kern__ld16(p)); /* vcvtph2ps: the same bits as kern__f16_to_f32 */
}

/* dw of the QR rows, repeated for each token. */
AI __m256 spread_rows(const float *dw, const int QR)
{
    if (QR == 8) return _mm256_loadu_ps(dw);
    __m128 v = _mm_loadu_ps(dw);
    return _mm256_set_m128(v, v);
}

/* one value per token, repeated over the QR rows */
AI __m256 spread_toks(const float *v, const int QR)
{
    if (QR == 8) return _mm256_set1_ps(v[0]);
    return _mm256_set_m128(_mm_set1_ps(v[1]), _mm_set1_ps(v[0]));
}

AI __m256i spread_toks_i(const int32_t *v, const int QR)
{
    if (QR == 8) return _mm256_set1_epi32(v[0]);
    return _mm256_set_m128i(_mm_set1_epi32(v[1]), _mm_set1_epi32(v[0]));
}

AI void tile_ptrs(const struct mmq *a, int r, int t, int n_tok, const int QR, const char **w,
                  const char **x, int *tt)
{
    for (int i = 0; i < QR; i++) {
        int rr = r + i < a->r1 ? r + i : a->r1 - 1;
        w[i] = a->W + (size_t)rr * a->wrb;
    }
    for (int j = 0; j < 8 / QR; j++) {
        tt[j] = t + j < n_tok ? t + j : n_tok - 1;
        x[j] = a->X + (size_t)tt[j] * a->xrb;
    }
}

/* Stores the lanes of acc (rows and tokens past the end skipped). */
AI void tile_store(const struct mmq *a, int r, int t, int n_tok, __m256 acc, const int QR)
{
    float v[8];
    _mm256_storeu_ps(v, acc);
    for (int j = 0; j < 8 / QR && t + j < n_tok; j++)
        for (int i = 0; i < QR && r + i < a->r1; i++)
            a->y[(size_t)(t + j) * a->ldy + r + i] = v[QR * j + i];
}

AI void tile_q8_0(const struct mmq *a, int r, int t, int n_tok, const int QR)
{
    const int QT = 8 / QR;
    const char *w[8], *x[2];
    int tt[2];
    tile_ptrs(a, r, t, n_tok, QR, w, x, tt);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        const size_t off = (size_t)b * sizeof(struct block_q8_0);
        __m256i p[8], xv[2];
        float dw[8], dx[2];
        for (int j = 0; j < QT; j++) {
            xv[j] = load256(x[j] + off + 2);
            dx[j] = f16s(x[j] + off);
        }
        for (int i = 0; i < QR; i++) {
            __m256i wv = load256(w[i] + off + 2), aw = _mm256_abs_epi8(wv);
            dw[i] = f16s(w[i] + off);
            for (int j = 0; j < QT; j++)
                p[QR * j + i] =
                    _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[j], wv)), ones);
        }
        __m256 s = _mm256_mul_ps(spread_rows(dw, QR), spread_toks(dx, QR));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tree8(p)), s, acc);
    }
    tile_store(a, r, t, n_tok, acc, QR);
}

AI void tile_q4_0(const struct mmq *a, int r, int t, int n_tok, const int QR)
{
    const int QT = 8 / QR;
    const char *w[8], *x[2];
    int tt[2];
    tile_ptrs(a, r, t, n_tok, QR, w, x, tt);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        const size_t wo = (size_t)b * sizeof(struct block_q4_0);
        const size_t xo = (size_t)b * sizeof(struct block_q8_0);
        __m256i p[8], xv[2];
        float dw[8], dx[2];
        int32_t bias[2];
        for (int j = 0; j < QT; j++) {
            const struct xq8 *px = a->pr + (size_t)tt[j] * a->nb + b;
            xv[j] = load256(x[j] + xo + 2);
            dx[j] = px->d;
            bias[j] = px->bias;
        }
        for (int i = 0; i < QR; i++) {
            __m256i q = nibbles32(w[i] + wo + 2);
            dw[i] = f16s(w[i] + wo);
            for (int j = 0; j < QT; j++)
                p[QR * j + i] = _mm256_madd_epi16(_mm256_maddubs_epi16(q, xv[j]), ones);
        }
        __m256i isum = _mm256_add_epi32(tree8(p), spread_toks_i(bias, QR));
        __m256 s = _mm256_mul_ps(spread_rows(dw, QR), spread_toks(dx, QR));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc);
    }
    tile_store(a, r, t, n_tok, acc, QR);
}

/* The fifth bits of sub-block j of a q5_K block (bit j of each qh byte),
 * as 0 or 16 per byte. The 16-bit shifts move no bit across a byte boundary
 * into bit 4: left by 4 - j <= 4, right by j - 4 <= 3. */
AI __m256i q5k_hi(__m256i qh, int j)
{
    __m256i v = j < 4 ? _mm256_slli_epi16(qh, 4 - j) : _mm256_srli_epi16(qh, j - 4);
    return _mm256_and_si256(v, _mm256_set1_epi8(16));
}

/* q4_K and q5_K (Q5 set): the same scales, mins and nibbles, q5_K adding
 * the fifth bit of each quant from qh. */
AI void tile_kmin(const struct mmq *a, int r, int t, int n_tok, const int QR, const int Q5)
{
    const int QT = 8 / QR;
    const size_t wblock = Q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const size_t qs_off = Q5 ? offsetof(struct block_q5_K, qs) : offsetof(struct block_q4_K, qs);
    const char *w[8], *x[2];
    int tt[2];
    tile_ptrs(a, r, t, n_tok, QR, w, x, tt);
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        __m256i pa[8], pb[8];
        float dw[8], dm[8], dx[2];
        const struct block_q8_K *xb[2];
        for (int j = 0; j < QT; j++) {
            xb[j] = (const struct block_q8_K *)x[j] + b;
            dx[j] = xb[j]->d;
        }
        for (int i = 0; i < QR; i++) {
            /* d, dmin, scales: the same 16 bytes at the head of both blocks */
            const uint8_t *wb = (const uint8_t *)w[i] + (size_t)b * wblock, *qs = wb + qs_off;
            const uint64_t sc8 = q4k_scales8(wb + 4), m8 = q4k_mins8(wb + 4);
            const __m128i mv = _mm_cvtsi64_si128((long long)m8);
            /* (m0, m0, m1, m1, ..) as int16, against the 16 block sums */
            const __m256i mmv = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
            dw[i] = f16s(wb);
            dm[i] = f16s(wb + 2);
            __m256i q[8];
            for (int c = 0; c < 4; c++) {
                __m256i v = load256(qs + 32 * c);
                q[2 * c] = _mm256_and_si256(v, m4);
                q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            }
            if (Q5) {
                const __m256i qh = load256(wb + offsetof(struct block_q5_K, qh));
                for (int sb = 0; sb < 8; sb++)
                    q[sb] = _mm256_or_si256(q[sb], q5k_hi(qh, sb));
            }
            for (int j = 0; j < QT; j++) {
                __m256i sacc = _mm256_setzero_si256();
                for (int sb = 0; sb < 8; sb++) {
                    __m256i pr = _mm256_maddubs_epi16(q[sb], load256(xb[j]->qs + 32 * sb));
                    __m256i scv = _mm256_set1_epi16((short)((sc8 >> (8 * sb)) & 0xff));
                    sacc = _mm256_add_epi32(sacc, _mm256_madd_epi16(pr, scv));
                }
                pa[QR * j + i] = sacc;
                pb[QR * j + i] = _mm256_madd_epi16(mmv, load256(xb[j]->bsums));
            }
        }
        __m256 dxv = spread_toks(dx, QR);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tree8(pa)),
                              _mm256_mul_ps(spread_rows(dw, QR), dxv), acc);
        acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(tree8(pb)),
                               _mm256_mul_ps(spread_rows(dm, QR), dxv), acc);
    }
    tile_store(a, r, t, n_tok, acc, QR);
}

AI void tile_q6_K(const struct mmq *a, int r, int t, int n_tok, const int QR)
{
    const int QT = 8 / QR;
    const char *w[8], *x[2];
    int tt[2];
    tile_ptrs(a, r, t, n_tok, QR, w, x, tt);
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        __m256i pa[8];
        float dw[8], dx[2];
        const struct block_q8_K *xb[2];
        for (int j = 0; j < QT; j++) {
            xb[j] = (const struct block_q8_K *)x[j] + b;
            dx[j] = xb[j]->d;
        }
        for (int i = 0; i < QR; i++) {
            const struct block_q6_K *wb = (const struct block_q6_K *)w[i] + b;
            dw[i] = f16s(&wb->d);
            __m256i q[8], scp[8];
            for (int h = 0; h < 2; h++) {
                __m256i l0 = load256(wb->ql + 64 * h), l1 = load256(wb->ql + 64 * h + 32);
                __m256i hb = load256(wb->qh + 32 * h);
                q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
                q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                               _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
                q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                               _mm256_and_si256(hb, m30));
                q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
            }
            /* 32 quants of part p cover sub-blocks 2p and 2p + 1 */
            for (int pp = 0; pp < 8; pp++)
                scp[pp] = _mm256_set_m128i(_mm_set1_epi16(wb->scales[2 * pp + 1]),
                                           _mm_set1_epi16(wb->scales[2 * pp]));
            /* -32 * scale: the quants' -32 offset, through the block sums */
            __m256i nsc = _mm256_mullo_epi16(
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wb->scales)),
                _mm256_set1_epi16(-32));
            for (int j = 0; j < QT; j++) {
                __m256i sacc = _mm256_madd_epi16(nsc, load256(xb[j]->bsums));
                for (int pp = 0; pp < 8; pp++) {
                    __m256i pr = _mm256_maddubs_epi16(q[pp], load256(xb[j]->qs + 32 * pp));
                    sacc = _mm256_add_epi32(sacc, _mm256_madd_epi16(pr, scp[pp]));
                }
                pa[QR * j + i] = sacc;
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tree8(pa)),
                              _mm256_mul_ps(spread_rows(dw, QR), spread_toks(dx, QR)), acc);
    }
    tile_store(a, r, t, n_tok, acc, QR);
}

typedef void (*mmq_fn)(const struct mmq *a, int r, int t, int n_tok);

#define DEF_MMQ(name, fn, QR)                                                                      \
    static __attribute__((noinline)) void name(const struct mmq *a, int r, int t, int n)           \
    {                                                                                              \
        fn(a, r, t, n, QR);                                                                        \
    }
DEF_MMQ(mmq_q8_0_8, tile_q8_0, 8)
DEF_MMQ(mmq_q8_0_4, tile_q8_0, 4)
DEF_MMQ(mmq_q4_0_8, tile_q4_0, 8)
DEF_MMQ(mmq_q4_0_4, tile_q4_0, 4)
#define DEF_MMQ_KMIN(name, Q5, QR)                                                                 \
    static __attribute__((noinline)) void name(const struct mmq *a, int r, int t, int n)           \
    {                                                                                              \
        tile_kmin(a, r, t, n, QR, Q5);                                                             \
    }
DEF_MMQ_KMIN(mmq_q4_K_8, 0, 8)
DEF_MMQ_KMIN(mmq_q4_K_4, 0, 4)
DEF_MMQ_KMIN(mmq_q5_K_8, 1, 8)
DEF_MMQ_KMIN(mmq_q5_K_4, 1, 4)
DEF_MMQ(mmq_q6_K_8, tile_q6_K, 8)
DEF_MMQ(mmq_q6_K_4, tile_q6_K, 4)

static void prep_q8_0(const char *xq, size_t xrb, int n_tok, int nb, int offset, struct xq8 *pr)
{
    for (int t = 0; t < n_tok; t++) {
        const struct block_q8_0 *x = (const struct block_q8_0 *)(xq + (size_t)t * xrb);
        for (int b = 0; b < nb; b++) {
            int s = 0;
            for (int i = 0; i < QK8_0; i++)
                s += x[b].qs[i];
            pr[(size_t)t * nb + b].d = f16s(&x[b].d);
            pr[(size_t)t * nb + b].bias = -offset * s;
        }
    }
}

static void matmul_avx2(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                        const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy)
{
    /* one token: 8 rows a tile; more: 4 rows x 2 tokens */
    const int one = n_tok == 1;
    mmq_fn tile;
    int blck;
    switch (wt) {
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
        matmul_float(wt, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    case DTYPE_Q8_0:
        tile = one ? mmq_q8_0_8 : mmq_q8_0_4;
        blck = QK8_0;
        break;
    case DTYPE_Q4_0:
        tile = one ? mmq_q4_0_8 : mmq_q4_0_4;
        blck = QK4_0;
        break;
    case DTYPE_Q4_K:
        tile = one ? mmq_q4_K_8 : mmq_q4_K_4;
        blck = QK_K;
        break;
    case DTYPE_Q5_K:
        tile = one ? mmq_q5_K_8 : mmq_q5_K_4;
        blck = QK_K;
        break;
    case DTYPE_Q6_K:
        tile = one ? mmq_q6_K_8 : mmq_q6_K_4;
        blck = QK_K;
        break;
    default:
        CHECK(!"kern_matmul: unsupported weight type");
        return;
    }
    struct mmq a = {W, w_row_bytes, k / blck, r1, xq, x_row_bytes, NULL, y, ldy};
    if (wt == DTYPE_Q4_0) {
        struct xq8 *pr = kern__scratch(KERN__SLOT_PREP, (size_t)n_tok * a.nb * sizeof(*pr));
        prep_q8_0(xq, x_row_bytes, n_tok, a.nb, 8, pr);
        a.pr = pr;
    }
    const int QR = one ? 8 : 4, QT = one ? 1 : 2;
    for (int tb = 0; tb < n_tok; tb += 32) {
        int n = tb + 32 < n_tok ? tb + 32 : n_tok;
        for (int r = r0; r < r1; r += QR)
            for (int t = tb; t < n; t += QT)
                tile(&a, r, t, n);
    }
}

/* ================= KV cache and reductions ================= */

/* Round to nearest even like kern__f32_to_bf16, 8 at a time. */
AI __m128i f32_to_bf16_8(__m256 x)
{
    __m256i u = _mm256_castps_si256(x);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
    __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    /* abs(u) > 0x7f800000 as signed compare: both sides are non-negative */
    __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                       _mm256_set1_epi32(0x7f800000));
    r = _mm256_blendv_epi8(r, nan, isnan);
    /* values are < 0x10000: packus keeps them; fix the 128-bit lane order */
    __m256i packed = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

/* kern__round_bf16 of 8 floats: a zero or subnormal becomes a zero of its
 * sign, anything else the nearest bf16 (ties to even; NaN stays NaN). */
AI __m256 round_bf16_8(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i b = _mm256_slli_epi32(_mm256_cvtepu16_epi32(f32_to_bf16_8(x)), 16);
    const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)),
                                            _mm256_setzero_si256());
    const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32((int)0x80000000u));
    return _mm256_castsi256_ps(_mm256_blendv_epi8(b, sign, tiny));
}

/* rows x n floats of x (row stride ldx) through round_bf16_8 into y (row
 * stride n) */
static void round_bf16_rows(const float *x, size_t ldx, int rows, int n, float *y)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * ldx;
        float *yr = y + (size_t)r * n;
        int i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(yr + i, round_bf16_8(_mm256_loadu_ps(xr + i)));
        for (; i < n; i++)
            yr[i] = kern__round_bf16(xr[i]);
    }
}

/* ---- attention: K panels, V rows, grouped-query heads ----
 *
 * q.K over a K panel (kernels.h): keys of one dimension are one vector of
 * rows, 8 to a ymm, converted once and multiplied by each head's q[e] (a
 * broadcast) into four chains per head and row; no lane reduction. FMA
 * latency x ports = 8 chains keep the FMA units busy: one head runs 16 rows
 * (2 x 4 chains), two or three heads 8 rows (up to 12 chains, the key
 * vector and a broadcast: 14 of the 16 ymm; loads, not FMAs, are the limit).
 *
 * The weighted sum over V rows (row-major) keeps C column vectors of H
 * heads in registers: 8 columns of one head, 4 of two or three (H C + H
 * broadcasts + one V vector <= 16 ymm), each V vector converted once for
 * the H heads. Every output element is fma(w[j], v[j][i], out[i]) in row
 * order whatever the grouping, so the bits are kern_kv_accum's.
 *
 * Both run over a block table in one call (struct kvrun): kern_attend_heads
 * computes every block's q.K, the softmax weights, then the V sums over
 * runs of blocks small enough to stay in L1 while the head groups and
 * column slices go by. */

/* Positions [0, n) of one KV head kept in blocks of bt: block i's data (a
 * K panel or V rows) at base + ids[i] * bstride. One block of n rows is
 * {ptr, 0, &zero_id, n, n}. */
struct kvrun {
    const char *base;   /* first block's data */
    size_t bstride;     /* bytes between blocks of the arena */
    const int32_t *ids; /* block i is at base + ids[i] * bstride */
    int bt;             /* positions a block */
    int n;              /* positions in the run */
};
static const int32_t zero_id = 0;

#define KV2_HEADS 3 /* heads of one q.K or V pass */

/* n (at most 8) 16-bit or f32 elements at p as 8 floats, zero past n;
 * reads nothing past element n - 1 (nothing at all for n <= 0). */
AI __m256 ld8_n(const int kv, const char *p, int n)
{
    if (n == 8) return ld8(kv, p);
    if (n <= 0) return _mm256_setzero_ps();
    static const int32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const __m256i lanes = _mm256_loadu_si256((const __m256i *)idx);
    if (kv == DTYPE_F32)
        return _mm256_maskload_ps((const float *)p,
                                  _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes));
    /* whole dwords by mask, an odd last element on its own */
    __m128i h =
        _mm_maskload_epi32((const int *)p, _mm_cmpgt_epi32(_mm_set1_epi32(n / 2),
                                                           _mm_loadu_si128((const __m128i *)idx)));
    if (n & 1) {
        const __m128i at =
            _mm_cmpeq_epi16(_mm_set1_epi16((short)(n - 1)), _mm_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7));
        h = _mm_blendv_epi8(h, _mm_set1_epi16((short)kern__ld16(p + 2 * (size_t)(n - 1))), at);
    }
    if (kv == DTYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* n (1..8) lanes of v to p */
AI void st8_n(float *p, __m256 v, int n)
{
    if (n == 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    static const int32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    _mm256_maskstore_ps(
        p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_loadu_si256((const __m256i *)idx)), v);
}

/* One dimension e of a K panel into chain cr of every head and slab. */
#define KV2_DOT_STEP(cr, e)                                                                        \
    do {                                                                                           \
        const char *p_ = kt + (size_t)(e)*dim;                                                     \
        __m256 k_[2];                                                                              \
        _Pragma("GCC unroll 8") for (int s_ = 0; s_ < S; s_++) k_[s_] =                            \
            full ? ld8(kv, p_ + 8 * es * (size_t)s_)                                               \
                 : ld8_n(kv, p_ + 8 * es * (size_t)s_, n - 8 * s_);                                \
        _Pragma("GCC unroll 8") for (int h_ = 0; h_ < H; h_++)                                     \
        {                                                                                          \
            const __m256 q_ = _mm256_broadcast_ss(q + (size_t)h_ * ldq + (e));                     \
            _Pragma("GCC unroll 8") for (int s_ = 0; s_ < S; s_++) c[h_][s_][cr] =                 \
                _mm256_fmadd_ps(k_[s_], q_, c[h_][s_][cr]);                                        \
        }                                                                                          \
    } while (0)

/* q.K of H heads for rows [0, n) of a K panel (n <= 8 S; full: n == 8 S),
 * S slabs of 8 rows: out[h * ldo + j]. */
AI void kv2_dot_rows(const int kv, const char *kt, size_t dim, int n, const int full,
                     const float *q, int ldq, const int H, const int S, int d, float *out, int ldo)
{
    const size_t es = elem_size(kv);
    __m256 c[KV2_HEADS][2][4];
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
        _Pragma("GCC unroll 8") for (int s = 0; s < S; s++)
            _Pragma("GCC unroll 8") for (int r = 0; r < 4; r++) c[h][s][r] = _mm256_setzero_ps();
    int e = 0;
    for (; e + 4 <= d; e += 4) {
        KV2_DOT_STEP(0, e);
        KV2_DOT_STEP(1, e + 1);
        KV2_DOT_STEP(2, e + 2);
        KV2_DOT_STEP(3, e + 3);
    }
    if (e < d) KV2_DOT_STEP(0, e); /* d % 4 dimensions left: chains 0, 1, 2 */
    if (e + 1 < d) KV2_DOT_STEP(1, e + 1);
    if (e + 2 < d) KV2_DOT_STEP(2, e + 2);
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
        _Pragma("GCC unroll 8") for (int s = 0; s < S; s++)
    {
        if (8 * s >= n) break;
        const __m256 v = _mm256_add_ps(_mm256_add_ps(c[h][s][0], c[h][s][1]),
                                       _mm256_add_ps(c[h][s][2], c[h][s][3]));
        if (full)
            _mm256_storeu_ps(out + (size_t)h * ldo + 8 * s, v);
        else
            st8_n(out + (size_t)h * ldo + 8 * s, v, n - 8 * s < 8 ? n - 8 * s : 8);
    }
}

/* q.K of H heads (H <= KV2_HEADS) over a run of K panels: out[h * ldo +
 * p] for positions p in [0, r.n). One head takes 16 rows at a time. */
AI void kv2_dot_run(const int kv, struct kvrun r, const float *q, int ldq, const int H, int d,
                    float *out, int ldo)
{
    const size_t es = elem_size(kv), dim = (size_t)r.bt * es;
    const int S = H == 1 ? 2 : 1, W = 8 * S;
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *kt = r.base + (size_t)r.ids[i] * r.bstride;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        for (int j = 0; j < n_rows; j += W) {
            const char *kj = kt + (size_t)j * es;
            float *oj = out + p0 + j;
            if (n_rows - j >= W) /* a constant: full slabs load unmasked */
                kv2_dot_rows(kv, kj, dim, W, 1, q, ldq, H, S, d, oj, ldo);
            else
                kv2_dot_rows(kv, kj, dim, n_rows - j, 0, q, ldq, H, S, d, oj, ldo);
        }
    }
}

#define DEF_KV2_DOT(name, kv)                                                                      \
    static __attribute__((noinline)) void name(struct kvrun r, const float *q, int ldq, int H,     \
                                               int d, float *out, int ldo)                         \
    {                                                                                              \
        if (H == 1)                                                                                \
            kv2_dot_run(kv, r, q, ldq, 1, d, out, ldo);                                            \
        else if (H == 2)                                                                           \
            kv2_dot_run(kv, r, q, ldq, 2, d, out, ldo);                                            \
        else                                                                                       \
            kv2_dot_run(kv, r, q, ldq, 3, d, out, ldo);                                            \
    }
DEF_KV2_DOT(kv2_dot_f32, DTYPE_F32)
DEF_KV2_DOT(kv2_dot_f16, DTYPE_F16)
DEF_KV2_DOT(kv2_dot_bf16, DTYPE_BF16)

/* q.K of n_heads heads over a run, in near-equal groups of at most
 * KV2_HEADS (7: 3 + 2 + 2). */
static void kv2_dot(enum dtype kv, struct kvrun r, const float *q, int ldq, int n_heads, int d,
                    float *out, int ldo)
{
    const int n_groups = (n_heads + KV2_HEADS - 1) / KV2_HEADS;
    for (int g = 0; g < n_groups; g++) {
        const int h0 = g * n_heads / n_groups, H = (g + 1) * n_heads / n_groups - h0;
        const float *qh = q + (size_t)h0 * ldq;
        float *oh = out + (size_t)h0 * ldo;
        if (kv == DTYPE_F16)
            kv2_dot_f16(r, qh, ldq, H, d, oh, ldo);
        else if (kv == DTYPE_BF16)
            kv2_dot_bf16(r, qh, ldq, H, d, oh, ldo);
        else
            kv2_dot_f32(r, qh, ldq, H, d, oh, ldo);
    }
}

/* The V sum of H heads for columns [e, e + 8 C) (the last vector n_last
 * columns wide, 1..8) over a run: out[h * ldo + i] (acc_out: on top of
 * what out holds, else from +0) += w[h * ldw + p] v[p][i] for the run's
 * positions p in order. */
AI void kv2_acc_cols(const int kv, struct kvrun r, size_t stride, const float *w, int ldw,
                     const int H, const int C, int e, const int full, int n_last, int acc_out,
                     float *out, int ldo)
{
    const size_t es = elem_size(kv);
    __m256 o[KV2_HEADS][8];
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
        _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
    {
        const float *p = out + (size_t)h * ldo + e + 8 * c;
        o[h][c] = !acc_out            ? _mm256_setzero_ps()
                  : full || c + 1 < C ? _mm256_loadu_ps(p)
                                      : ld8_n(DTYPE_F32, (const char *)p, n_last);
    }
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *vb = r.base + (size_t)r.ids[i] * r.bstride + es * (size_t)e;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        const float *wb = w + p0;
        for (int j = 0; j < n_rows; j++) {
            const char *row = vb + (size_t)j * stride;
            __m256 wj[KV2_HEADS];
            _Pragma("GCC unroll 8") for (int h = 0; h < H; h++) wj[h] =
                _mm256_broadcast_ss(wb + (size_t)h * ldw + j);
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
            {
                const __m256 v = full || c + 1 < C ? ld8(kv, row + 8 * es * (size_t)c)
                                                   : ld8_n(kv, row + 8 * es * (size_t)c, n_last);
                _Pragma("GCC unroll 8") for (int h = 0; h < H; h++) o[h][c] =
                    _mm256_fmadd_ps(wj[h], H > 1 ? in_reg(v) : v, o[h][c]);
            }
        }
    }
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
        _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) if (full || c + 1 < C)
            _mm256_storeu_ps(out + (size_t)h * ldo + e + 8 * c, o[h][c]);
    else st8_n(out + (size_t)h * ldo + e + 8 * c, o[h][c], n_last);
}

/* One case per column count 1..CMAX, so each instance keeps its
 * accumulators in registers. */
#define KV2_ACC_C(kv, H, CMAX)                                                                     \
    switch (C) {                                                                                   \
    case 1:                                                                                        \
        kv2_acc_cols(kv, r, stride, w, ldw, H, 1, e, full_, n_last, acc_out, out, ldo);            \
        break;                                                                                     \
    case 2:                                                                                        \
        kv2_acc_cols(kv, r, stride, w, ldw, H, 2, e, full_, n_last, acc_out, out, ldo);            \
        break;                                                                                     \
    case 3:                                                                                        \
        kv2_acc_cols(kv, r, stride, w, ldw, H, 3, e, full_, n_last, acc_out, out, ldo);            \
        break;                                                                                     \
    case 4:                                                                                        \
        kv2_acc_cols(kv, r, stride, w, ldw, H, 4, e, full_, n_last, acc_out, out, ldo);            \
        break;                                                                                     \
    default:                                                                                       \
        if (CMAX > 4) switch (C) {                                                                 \
            case 5:                                                                                \
                kv2_acc_cols(kv, r, stride, w, ldw, H, 5, e, full_, n_last, acc_out, out, ldo);    \
                break;                                                                             \
            case 6:                                                                                \
                kv2_acc_cols(kv, r, stride, w, ldw, H, 6, e, full_, n_last, acc_out, out, ldo);    \
                break;                                                                             \
            case 7:                                                                                \
                kv2_acc_cols(kv, r, stride, w, ldw, H, 7, e, full_, n_last, acc_out, out, ldo);    \
                break;                                                                             \
            default:                                                                               \
                kv2_acc_cols(kv, r, stride, w, ldw, H, 8, e, full_, n_last, acc_out, out, ldo);    \
                break;                                                                             \
            }                                                                                      \
    }

#define KV2_ACC_H(kv)                                                                              \
    if (H == 1) {                                                                                  \
        KV2_ACC_C(kv, 1, 8)                                                                        \
    } else if (H == 2) {                                                                           \
        KV2_ACC_C(kv, 2, 4)                                                                        \
    } else {                                                                                       \
        KV2_ACC_C(kv, 3, 4)                                                                        \
    }

#define DEF_KV2_ACC(name, kv)                                                                      \
    static __attribute__((noinline)) void name(struct kvrun r, size_t stride, const float *w,      \
                                               int ldw, int H, int C, int e, int n_last,           \
                                               int acc_out, float *out, int ldo)                   \
    {                                                                                              \
        if (n_last == 8) {                                                                         \
            const int full_ = 1;                                                                   \
            KV2_ACC_H(kv)                                                                          \
        } else {                                                                                   \
            const int full_ = 0;                                                                   \
            KV2_ACC_H(kv)                                                                          \
        }                                                                                          \
    }
DEF_KV2_ACC(kv2_acc_f32, DTYPE_F32)
DEF_KV2_ACC(kv2_acc_f16, DTYPE_F16)
DEF_KV2_ACC(kv2_acc_bf16, DTYPE_BF16)

/* The V sum of n_heads heads over a run (acc_out: on top of out, else
 * overwriting it): heads in near-equal groups of at most KV2_HEADS, columns
 * in slices of 8 vectors (one head) or 4. */
static void kv2_acc(enum dtype kv, struct kvrun r, size_t stride, const float *w, int ldw,
                    int n_heads, int d, int acc_out, float *out, int ldo)
{
    const int n_groups = (n_heads + KV2_HEADS - 1) / KV2_HEADS, n_vec = (d + 7) / 8;
    for (int g = 0; g < n_groups; g++) {
        const int h0 = g * n_heads / n_groups, H = (g + 1) * n_heads / n_groups - h0;
        const int cmax = H == 1 ? 8 : 4;
        const float *wh = w + (size_t)h0 * ldw;
        float *oh = out + (size_t)h0 * ldo;
        for (int v0 = 0; v0 < n_vec; v0 += cmax) {
            const int C = n_vec - v0 < cmax ? n_vec - v0 : cmax;
            const int n_last = v0 + C < n_vec ? 8 : d - 8 * (n_vec - 1);
            if (kv == DTYPE_F16)
                kv2_acc_f16(r, stride, wh, ldw, H, C, 8 * v0, n_last, acc_out, oh, ldo);
            else if (kv == DTYPE_BF16)
                kv2_acc_bf16(r, stride, wh, ldw, H, C, 8 * v0, n_last, acc_out, oh, ldo);
            else
                kv2_acc_f32(r, stride, wh, ldw, H, C, 8 * v0, n_last, acc_out, oh, ldo);
        }
    }
}

/* n elements at src (16-bit kv) as f32 at dst */
AI void kv_to_f32_t(const int kv, const char *src, int n, float *dst)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, ld8(kv, src + 2 * (size_t)i));
    if (i < n) st8_n(dst + i, ld8_n(kv, src + 2 * (size_t)i, n - i), n - i);
}

AI void kv_to_f32(enum dtype kv, const char *src, int n, float *dst)
{
    if (kv == DTYPE_F16)
        kv_to_f32_t(DTYPE_F16, src, n, dst);
    else
        kv_to_f32_t(DTYPE_BF16, src, n, dst);
}

/* Several head groups read each key or value: convert each block to f32
 * once (into the PANEL slot) rather than once per group. */
static int kv2_convert(enum dtype kv, int n_heads)
{
    return kv != DTYPE_F32 && n_heads > KV2_HEADS;
}

/* kv2_dot over a run, each block's panel converted once where that pays. */
static void kv2_dot_blocks(enum dtype kv, struct kvrun r, const float *q, int ldq, int n_heads,
                           int d, float *out, int ldo)
{
    if (!kv2_convert(kv, n_heads)) {
        kv2_dot(kv, r, q, ldq, n_heads, d, out, ldo);
        return;
    }
    float *panel = kern__scratch(KERN__SLOT_PANEL, sizeof(float) * (size_t)d * (size_t)r.bt);
    const size_t dim = 2 * (size_t)r.bt;
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *kt = r.base + (size_t)r.ids[i] * r.bstride;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        if (n_rows == r.bt) /* the whole panel: one range */
            kv_to_f32(kv, kt, d * r.bt, panel);
        else
            for (int e = 0; e < d; e++)
                kv_to_f32(kv, kt + (size_t)e * dim, n_rows, panel + (size_t)e * r.bt);
        const struct kvrun one = {(const char *)panel, 0, &zero_id, r.bt, n_rows};
        kv2_dot(DTYPE_F32, one, q, ldq, n_heads, d, out + p0, ldo);
    }
}

/* kv2_acc over a run, converted a run of blocks at a time where that
 * pays: runs of whole blocks of about KV2_RUN_BYTES (as f32), which the
 * head groups and column slices read from L1. */
#define KV2_RUN_BYTES (16 << 10)
static void kv2_acc_blocks(enum dtype kv, struct kvrun r, size_t stride, const float *w, int ldw,
                           int n_heads, int d, int acc_out, float *out, int ldo)
{
    if (!kv2_convert(kv, n_heads)) {
        kv2_acc(kv, r, stride, w, ldw, n_heads, d, acc_out, out, ldo);
        return;
    }
    const size_t per = KV2_RUN_BYTES / (sizeof(float) * (size_t)d * (size_t)r.bt);
    const int bpr = per ? (int)per : 1; /* blocks a run */
    float *vf = kern__scratch(KERN__SLOT_PANEL, sizeof(float) * (size_t)d * r.bt * (size_t)bpr);
    for (int i0 = 0; i0 * r.bt < r.n; i0 += bpr) {
        const int p0 = i0 * r.bt;
        int m = 0; /* rows of the run */
        for (int i = i0; i < i0 + bpr && i * r.bt < r.n; i++) {
            const char *vb = r.base + (size_t)r.ids[i] * r.bstride;
            const int n_rows = r.n - i * r.bt < r.bt ? r.n - i * r.bt : r.bt;
            if (stride == 2 * (size_t)d) { /* the block's rows: one range */
                kv_to_f32(kv, vb, n_rows * d, vf + (size_t)m * d);
                m += n_rows;
            } else {
                for (int j = 0; j < n_rows; j++, m++)
                    kv_to_f32(kv, vb + (size_t)j * stride, d, vf + (size_t)m * d);
            }
        }
        const struct kvrun one = {(const char *)vf, 0, &zero_id, m, m};
        kv2_acc(DTYPE_F32, one, sizeof(float) * (size_t)d, w + p0, ldw, n_heads, d,
                acc_out || i0 > 0, out, ldo);
    }
}

static void kv_dot_heads_avx2(enum dtype kv, const void *kt, int ld, int n_rows, const float *q,
                              int ldq, int n_heads, int d, float *out, int ldo)
{
    const struct kvrun r = {kt, 0, &zero_id, ld, n_rows};
    kv2_dot_blocks(kv, r, q, ldq, n_heads, d, out, ldo);
}

static void kv_dot_avx2(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int d,
                        float *out)
{
    const struct kvrun r = {kt, 0, &zero_id, ld, n_rows};
    kv2_dot(kv, r, q, 0, 1, d, out, 0);
}

static void kv_accum_heads_avx2(enum dtype kv, const void *v, size_t stride, int n_rows,
                                const float *w, int ldw, int n_heads, int d, float *out, int ldo)
{
    const struct kvrun r = {v, 0, &zero_id, n_rows, n_rows};
    kv2_acc_blocks(kv, r, stride, w, ldw, n_heads, d, 1, out, ldo);
}

static void kv_accum_avx2(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w,
                          int d, float *out)
{
    const struct kvrun r = {v, 0, &zero_id, n_rows, n_rows};
    kv2_acc(kv, r, stride, w, 0, 1, d, 1, out, 0);
}

/* kern_attend_heads: q.K over every block, the softmax weights (this
 * level's kern_softmax_exp), then the V sums with their accumulators in
 * registers across a run of blocks. Each step is the per-block kernels'
 * own arithmetic, so the bits are the composition's (dispatch.c). */
static void attend_heads_avx2(enum dtype kv, const void *k, const void *v, size_t block_stride,
                              const int32_t *ids, int ld, int n, const float *q, int ldq,
                              int n_heads, int d, float scale, float *scores, int lds, float *out,
                              int ldo)
{
    if (kv == DTYPE_BF16) {
        float *qr = kern__scratch(KERN__SLOT_KVQ, sizeof(float) * (size_t)n_heads * d);
        round_bf16_rows(q, (size_t)ldq, n_heads, d, qr);
        q = qr;
        ldq = d;
    }
    const struct kvrun rk = {k, block_stride, ids, ld, n}, rv = {v, block_stride, ids, ld, n};
    kv2_dot_blocks(kv, rk, q, ldq, n_heads, d, scores, lds);
    float total[KERN_ATTEND_MAX_HEADS];
    for (int h = 0; h < n_heads; h++) {
        float *sh = scores + (size_t)h * lds;
        total[h] = kern__softmax_exp_avx2(sh, n, scale);
        if (kv == DTYPE_BF16) round_bf16_rows(sh, 0, 1, n, sh);
    }
    kv2_acc_blocks(kv, rv, (size_t)d * elem_size(kv), scores, lds, n_heads, d, 0, out, ldo);
    for (int h = 0; h < n_heads; h++) {
        const __m256 inv = _mm256_set1_ps(1.0f / total[h]);
        float *oh = out + (size_t)h * ldo;
        int i = 0;
        for (; i + 8 <= d; i += 8)
            _mm256_storeu_ps(oh + i, _mm256_mul_ps(_mm256_loadu_ps(oh + i), inv));
        for (; i < d; i++)
            oh[i] *= 1.0f / total[h];
    }
}

static void kv_store_avx2(enum dtype kv, const float *x, void *y, int n)
{
    int i = 0;
    if (kv == DTYPE_F32) {
        memcpy(y, x, (size_t)n * sizeof(float));
        return;
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = kv == DTYPE_F16
                        ? _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                        : f32_to_bf16_8(v);
        _mm_storeu_si128((__m128i *)((uint16_t *)y + i), h);
    }
    for (; i < n; i++)
        ((uint16_t *)y)[i] = kv == DTYPE_F16 ? kern__f32_to_f16(x[i]) : kern__f32_to_bf16(x[i]);
}

static float dot_f32_avx2(const float *a, const float *b, int n)
{
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    if (i < n) {
        float at[16], bt[16];
        tail16(DTYPE_F32, (const char *)a, i, n - i, at);
        tail16(DTYPE_F32, (const char *)b, i, n - i, bt);
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(at), _mm256_loadu_ps(bt), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(at + 8), _mm256_loadu_ps(bt + 8), hi);
    }
    return hsum16(lo, hi);
}

static float sum_sq_f32_avx2(const float *x, int n)
{
    return dot_f32_avx2(x, x, n);
}

const struct kern__ops kern__ops_avx2 = {
    .matmul = matmul_avx2,
    .matmul_packed = kern__matmul_packed_avx2,
    .packed = KERN__PACKED256_TYPES,
    .kv_dot = kv_dot_avx2,
    .kv_accum = kv_accum_avx2,
    .kv_dot_heads = kv_dot_heads_avx2,
    .kv_accum_heads = kv_accum_heads_avx2,
    .attend_heads = attend_heads_avx2,
    .kv_store = kv_store_avx2,
    .dot_f32 = dot_f32_avx2,
    .sum_sq_f32 = sum_sq_f32_avx2,
};
