/*
 * kernels_avx512.c - the AVX-512 level (F/BW/VL/DQ + VNNI + BF16).
 *
 * QUANTIZED MATMUL: rows in lanes. A zmm holds one int32 lane per weight
 * row, 16 rows at a time (a "panel"); each lane runs the canonical float
 * chain of its row (kernels_impl.h), and each block's integer dot product
 * is exact however it is computed, so every path below gives the scalar
 * reference's bits, whatever the tile, chunking, token count or row range.
 *
 * Prefill (n_tok > GEMV_T): the panel's weights are repacked, a chunk of
 * blocks at a time, so that w[g] holds dword g (4 consecutive quants) of all
 * 16 rows, as bytes ready for vpdpbusd (a 16 x 8 dword transpose in three
 * rounds of permutes):
 *
 *   panel chunk (L1-sized)            activation (token t, broadcast)
 *   w[g] = | r0 g | r1 g | .. | r15 g |    x4 = | x_t g | x_t g | .. |
 *   I[t] = vpdpbusd(I[t], w[g], x4)     -> lane r: integer dot of row r, token t
 *
 * Two panels (32 rows) x up to 6 tokens form the register tile, so each
 * activation broadcast feeds two vpdpbusd and each weight load six.
 * vpdpbusd multiplies unsigned by signed bytes: q8_0 weights are stored +128
 * (xor 0x80) and the block's integer starts at -128 * sum(x); q4_0, q4_K,
 * q5_K and q6_K quants are unsigned already, their offsets folded in through
 * -8 * sum(x) or the q8_K block sums. q5_K shares q4_K's panel layout and
 * tiles (its quants, fifth bit included, are 0..31 where q4_K's are 0..15).
 *
 *   for token block (its activations stay in L2)
 *     for 32 rows: for chunk of blocks: repack 2 panels; for 6 tokens: tile
 *     (float accumulators wait in a small buffer between chunks)
 *
 * Decode (n_tok <= GEMV_T): no repack; the GGUF blocks are read in place and
 * a tree of in-lane shuffles folds per-row partial sums into rows-in-lanes
 * (see the decode section). Both paths prefetch the next panel's rows - a
 * contiguous range - spread evenly over the current panel's blocks: sixteen
 * interleaved row streams are more than the hardware prefetchers follow,
 * and short rows end before they ramp up.
 *
 * Packed weights (kern_pack, quants.h: q8_0, q4_0, q4_K, q6_K built once
 * at load) have their own kernels in packed_avx512.c, which the table at the
 * end of this file points to.
 *
 * FLOAT MATMUL (f32, f16, bf16 weights): lanes along k, 16 per element, the
 * canonical scheme; a 4-row x 6-token register tile shares each weight and
 * activation load. bf16 uses vdpbf16ps (pairs of bf16 products into one f32
 * lane, with the instruction's own rounding, DAZ and FTZ): the one place
 * where this level's bits differ from the scalar and AVX2 levels. Every bf16
 * path here uses the same instruction sequence, so invariance holds.
 *
 * Thread safety: pure; per-thread scratch from kern__scratch.
 */
#include "base/check.h"
#include "kernels/kernels_impl.h"
#include "kernels/vecmath.h"
#include "kernels/quants.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

#define PANEL   16 /* weight rows per panel: one int32/f32 lane each */
#define TILE_T  8  /* tokens per quantized register tile */
#define FTILE_R 4  /* weight rows per float register tile */
#define FTILE_T 6  /* tokens per float register tile */

#define L2_ACT  (2048 * 1024) /* activation bytes a quantized token block may keep */
#define L2_FACT (256 * 1024)  /* activation bytes a float token block may keep */

/* ---- small helpers ---- */

/* The canonical 16-lane reduction (kern__tree16) in registers. */
AI float hsum16(__m512 v)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

AI __m512i bcast32(const void *p)
{
    return _mm512_set1_epi32(kern__ld32(p));
}

/* ================= float weights ================= */

struct mmf {
    const char *W; /* weight rows */
    size_t wrb;    /* bytes per weight row */
    int k;         /* elements per row */
    int r1;        /* one past the last valid row (rows beyond are clamped) */
    const char *X; /* activation rows (f32, or bf16 for bf16 weights) */
    size_t xrb;    /* bytes per activation row */
    float *y;      /* output, y[t * ldy + r] */
    int ldy;       /* floats per output token row */
};

AI __m512 ldw16(int wt, const char *p, __mmask16 m, int masked)
{
    if (wt == DTYPE_F32) return masked ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
    return _mm512_cvtph_ps(masked ? _mm256_maskz_loadu_epi16(m, p)
                                  : _mm256_loadu_si256((const __m256i *)p));
}

/* FTILE_R rows from r x T tokens from t0; rows past r1 are computed on a
 * clamped row and not stored. */
AI void mmf_tile(const struct mmf *a, int r, int t0, const int wt, const int T)
{
    const char *w[FTILE_R];
    const char *x[FTILE_T];
    __m512 acc[FTILE_R][FTILE_T];
    for (int i = 0; i < FTILE_R; i++) {
        int rr = r + i < a->r1 ? r + i : a->r1 - 1;
        w[i] = a->W + (size_t)rr * a->wrb;
    }
    for (int t = 0; t < T; t++)
        x[t] = a->X + (size_t)(t0 + t) * a->xrb;
    /* the same column FTILE_R rows down: the next tile, which the hardware
     * prefetchers would only find late (short rows end before they ramp up) */
    const size_t pf = FTILE_R * a->wrb;
    for (int i = 0; i < FTILE_R; i++)
        for (int t = 0; t < T; t++)
            acc[i][t] = _mm512_setzero_ps();

    const int k = a->k;
    if (wt == DTYPE_BF16) {
        int e = 0;
        for (; e + 32 <= k; e += 32) {
            __m512i wv[FTILE_R];
            for (int i = 0; i < FTILE_R; i++) {
                wv[i] = _mm512_loadu_si512(w[i] + 2 * e);
                _mm_prefetch(w[i] + pf + 2 * e, _MM_HINT_T0);
            }
            for (int t = 0; t < T; t++) {
                __m512bh xv = (__m512bh)_mm512_loadu_si512(x[t] + 2 * e);
                for (int i = 0; i < FTILE_R; i++)
                    acc[i][t] = _mm512_dpbf16_ps(acc[i][t], (__m512bh)wv[i], xv);
            }
        }
        if (e < k) {
            __mmask32 m = (__mmask32)((1ull << (k - e)) - 1);
            __m512i wv[FTILE_R];
            for (int i = 0; i < FTILE_R; i++)
                wv[i] = _mm512_maskz_loadu_epi16(m, w[i] + 2 * e);
            for (int t = 0; t < T; t++) {
                __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x[t] + 2 * e);
                for (int i = 0; i < FTILE_R; i++)
                    acc[i][t] = _mm512_dpbf16_ps(acc[i][t], (__m512bh)wv[i], xv);
            }
        }
    } else {
        const int es = wt == DTYPE_F32 ? 4 : 2;
        int e = 0;
        for (; e + 16 <= k; e += 16) {
            __m512 wv[FTILE_R];
            for (int i = 0; i < FTILE_R; i++) {
                wv[i] = ldw16(wt, w[i] + es * e, 0, 0);
                _mm_prefetch(w[i] + pf + es * e, _MM_HINT_T0);
            }
            for (int t = 0; t < T; t++) {
                __m512 xv = _mm512_loadu_ps(x[t] + 4 * e);
                for (int i = 0; i < FTILE_R; i++)
                    acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
            }
        }
        if (e < k) {
            __mmask16 m = (__mmask16)((1u << (k - e)) - 1);
            __m512 wv[FTILE_R];
            for (int i = 0; i < FTILE_R; i++)
                wv[i] = ldw16(wt, w[i] + es * e, m, 1);
            for (int t = 0; t < T; t++) {
                __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + 4 * e);
                for (int i = 0; i < FTILE_R; i++)
                    acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
            }
        }
    }
    for (int i = 0; i < FTILE_R; i++) {
        if (r + i >= a->r1) break;
        for (int t = 0; t < T; t++)
            a->y[(size_t)(t0 + t) * a->ldy + r + i] = hsum16(acc[i][t]);
    }
}

#define DEF_MMF(name, wt, T)                                                                       \
    static __attribute__((noinline)) void name(const struct mmf *a, int r, int t0)                 \
    {                                                                                              \
        mmf_tile(a, r, t0, wt, T);                                                                 \
    }
#define DEF_MMF_ALL(pfx, wt)                                                                       \
    DEF_MMF(pfx##1, wt, 1)                                                                         \
    DEF_MMF(pfx##2, wt, 2)                                                                         \
    DEF_MMF(pfx##3, wt, 3)                                                                         \
    DEF_MMF(pfx##4, wt, 4)                                                                         \
    DEF_MMF(pfx##5, wt, 5)                                                                         \
    DEF_MMF(pfx##6, wt, 6)                                                                         \
    static void (*const pfx##_fns[FTILE_T + 1])(const struct mmf *, int, int) = {                  \
        NULL, pfx##1, pfx##2, pfx##3, pfx##4, pfx##5, pfx##6};

DEF_MMF_ALL(mmf_f32_, DTYPE_F32)
DEF_MMF_ALL(mmf_f16_, DTYPE_F16)
DEF_MMF_ALL(mmf_bf16_, DTYPE_BF16)

static void matmul_float(enum dtype wt, const void *W, size_t wrb, int k, int r0, int r1,
                         const void *xq, size_t xrb, int n_tok, float *y, int ldy)
{
    struct mmf a = {W, wrb, k, r1, xq, xrb, y, ldy};
    void (*const *fns)(const struct mmf *, int, int) = wt == DTYPE_F32   ? mmf_f32__fns
                                                       : wt == DTYPE_F16 ? mmf_f16__fns
                                                                         : mmf_bf16__fns;
    int tb = kern__token_block(xrb, n_tok, FTILE_T, L2_FACT);
    for (int tb0 = 0; tb0 < n_tok; tb0 += tb) {
        int tb1 = tb0 + tb < n_tok ? tb0 + tb : n_tok;
        for (int r = r0; r < r1; r += FTILE_R)
            for (int t0 = tb0; t0 < tb1; t0 += FTILE_T) {
                int T = tb1 - t0 < FTILE_T ? tb1 - t0 : FTILE_T;
                fns[T](&a, r, t0);
            }
    }
}

/* ================= quantized weights: repack ================= */

/* Panel layouts (16 rows, lanes = rows). Sizes are multiples of 64 bytes so
 * consecutive blocks stay aligned. 32-element blocks (q8_0, q4_0) use the
 * packed q8_0 layout of quants.h for a chunk of nbc blocks: nbc blocks of
 * struct p32, then the nbc x 16 f16 row scales (q8_0 as stored, +128). */
struct p32 {             /* one 32-element block (q8_0, q4_0) */
    int32_t w[8][PANEL]; /* dword g of each row: 4 quants as unsigned bytes */
};

struct pq4k {             /* one q4_K or q5_K super-block */
    int32_t w[64][PANEL]; /* dword g: quants 4g .. 4g + 3, 0..15 (q5_K: 0..31) */
    int32_t sc[8][PANEL]; /* sub-block scale */
    int32_t mm[8][PANEL]; /* sub-block min, in both int16 halves */
    float d[PANEL];       /* super-block scale */
    float dmin[PANEL];    /* super-block min scale */
};

struct pq6k {              /* one q6_K super-block */
    int32_t w[64][PANEL];  /* dword g: quants 4g .. 4g + 3, 0..63 */
    int32_t sc[16][PANEL]; /* sub-block scale, sign-extended */
    int32_t scp[8][PANEL]; /* int16 pair (scale 2i, scale 2i + 1) */
    float d[PANEL];        /* super-block scale */
};

_Static_assert(sizeof(struct p32) % 64 == 0, "p32 alignment");
_Static_assert(sizeof(struct pq4k) % 64 == 0, "pq4k alignment");
_Static_assert(sizeof(struct pq6k) % 64 == 0, "pq6k alignment");

/* Permute tables of the 16-row transposes. Input z[i] of the 16 x 8 dword
 * transpose holds rows 2i and 2i + 1 (lane 8h + g = row 2i + h, dword g).
 * Round 1 makes, per quad of rows, lane 4g + rr for the dwords of one half;
 * round 2 makes, per octet of rows, lane 8gg + row for two dwords; round 3
 * (vshufi64x2) joins the two octets. Rows that arrive four to a register
 * (16-byte loads, lane 4rr + g) skip round 1 and use T2Q in round 2. */
static const int32_t T1[2][16] = {
    {0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27},
    {4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31},
};
static const int32_t T2[2][16] = {
    {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
    {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31},
};
static const int32_t T2Q[2][16] = {
    {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29},
    {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31},
};

struct tperm {
    __m512i t1a, t1b;   /* T1 */
    __m512i t2a, t2b;   /* T2 */
    __m512i t2qa, t2qb; /* T2Q */
};

AI struct tperm tperm_load(void)
{
    struct tperm t;
    t.t1a = _mm512_loadu_si512(T1[0]);
    t.t1b = _mm512_loadu_si512(T1[1]);
    t.t2a = _mm512_loadu_si512(T2[0]);
    t.t2b = _mm512_loadu_si512(T2[1]);
    t.t2qa = _mm512_loadu_si512(T2Q[0]);
    t.t2qb = _mm512_loadu_si512(T2Q[1]);
    return t;
}

/* Rounds 2 and 3 on one dword half: quads p[0..3] -> o[0..3] (lane = row). */
AI void transpose_r23(const __m512i p[4], const __m512i t2a, const __m512i t2b, __m512i o[4])
{
    __m512i s0a = _mm512_permutex2var_epi32(p[0], t2a, p[1]);
    __m512i s0b = _mm512_permutex2var_epi32(p[0], t2b, p[1]);
    __m512i s1a = _mm512_permutex2var_epi32(p[2], t2a, p[3]);
    __m512i s1b = _mm512_permutex2var_epi32(p[2], t2b, p[3]);
    o[0] = _mm512_shuffle_i64x2(s0a, s1a, 0x44);
    o[1] = _mm512_shuffle_i64x2(s0a, s1a, 0xee);
    o[2] = _mm512_shuffle_i64x2(s0b, s1b, 0x44);
    o[3] = _mm512_shuffle_i64x2(s0b, s1b, 0xee);
}

/* z[i]: rows 2i, 2i + 1, 8 dwords each -> o[g] (lane = row). */
AI void transpose16x8(const struct tperm *tp, const __m512i z[8], __m512i o[8])
{
    __m512i lo[4], hi[4];
    for (int q = 0; q < 4; q++) {
        lo[q] = _mm512_permutex2var_epi32(z[2 * q], tp->t1a, z[2 * q + 1]);
        hi[q] = _mm512_permutex2var_epi32(z[2 * q], tp->t1b, z[2 * q + 1]);
    }
    transpose_r23(lo, tp->t2a, tp->t2b, o);
    transpose_r23(hi, tp->t2a, tp->t2b, o + 4);
}

AI __m512i load2rows(const char *a, const char *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* 16 bytes at rp[r] + off for 16 rows, transposed: o[w] lane r = dword w. */
AI void load16x4(const struct tperm *tp, const char *const *rp, size_t off, __m512i o[4])
{
    __m512i p[4];
    for (int q = 0; q < 4; q++) {
        const char *const *r4 = rp + 4 * q;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r4[0] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r4[1] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r4[2] + off)), 2);
        p[q] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r4[3] + off)), 3);
    }
    transpose_r23(p, tp->t2qa, tp->t2qb, o);
}

/* 32 bytes at rp[r] + off for 16 rows, transposed: o[g] lane r = dword g. */
AI void load32x8(const struct tperm *tp, const char *const *rp, size_t off, __m512i o[8])
{
    __m512i z[8];
    for (int i = 0; i < 8; i++)
        z[i] = load2rows(rp[2 * i] + off, rp[2 * i + 1] + off);
    transpose16x8(tp, z, o);
}

/* The 16 f16 values at rp[r] + off, in row order. */
AI __m256i gather_f16_raw(const char *const *rp, size_t off)
{
    uint64_t q[4];
    for (int i = 0; i < 4; i++)
        q[i] = (uint64_t)kern__ld16(rp[4 * i] + off) |
               (uint64_t)kern__ld16(rp[4 * i + 1] + off) << 16 |
               (uint64_t)kern__ld16(rp[4 * i + 2] + off) << 32 |
               (uint64_t)kern__ld16(rp[4 * i + 3] + off) << 48;
    __m128i a = _mm_insert_epi64(_mm_cvtsi64_si128((long long)q[0]), (long long)q[1], 1);
    __m128i b = _mm_insert_epi64(_mm_cvtsi64_si128((long long)q[2]), (long long)q[3], 1);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}

/* The same 16 values as f32 lanes. Assembled in general registers: going
 * through a small array would stall on store forwarding. */
AI __m512 gather_f16(const char *const *rp, size_t off)
{
    return _mm512_cvtph_ps(gather_f16_raw(rp, off));
}

/* Software prefetch of the next panel, spread evenly over this panel's
 * blocks: the rows of a panel are one contiguous range, but sixteen
 * interleaved row streams are more than the hardware prefetchers follow,
 * and short rows end before they ramp up. */
struct pfetch {
    const char *base; /* next panel's first byte */
    size_t bytes;     /* its length (0: nothing to fetch) */
    size_t step;      /* bytes to fetch per block of this panel, multiple of 64 */
};

AI void pfetch_block(const struct pfetch *pf, int b)
{
    size_t lo = (size_t)b * pf->step, hi = lo + pf->step;
    if (hi > pf->bytes) hi = pf->bytes;
    for (size_t o = lo; o < hi; o += 64)
        _mm_prefetch(pf->base + o, _MM_HINT_T0);
}

AI __m512i bytes_u(__m512i v, int i, int mask)
{
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * i), _mm512_set1_epi32(mask));
}

static void repack_q8_0(const char *const *rp, int b0, int nbc, struct p32 *P,
                        const struct pfetch *pf)
{
    const struct tperm tp = tperm_load();
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    __m256i *sc = (__m256i *)(P + nbc);
    for (int b = 0; b < nbc; b++) {
        pfetch_block(pf, b0 + b);
        size_t off = (size_t)(b0 + b) * sizeof(struct block_q8_0);
        __m512i o[8];
        load32x8(&tp, rp, off + 2, o);
        for (int g = 0; g < 8; g++)
            _mm512_store_si512(P[b].w[g], _mm512_xor_si512(o[g], x80));
        _mm256_storeu_si256(sc + b, gather_f16_raw(rp, off));
    }
}

static void repack_q4_0(const char *const *rp, int b0, int nbc, struct p32 *P,
                        const struct pfetch *pf)
{
    const struct tperm tp = tperm_load();
    const __m512i m4 = _mm512_set1_epi8(15);
    __m256i *sc = (__m256i *)(P + nbc);
    for (int b = 0; b < nbc; b++) {
        pfetch_block(pf, b0 + b);
        size_t off = (size_t)(b0 + b) * sizeof(struct block_q4_0);
        __m512i o[4];
        load16x4(&tp, rp, off + 2, o);
        /* nibble split commutes with the transpose: low = elements 4g.., high = 16 + 4g.. */
        for (int g = 0; g < 4; g++) {
            _mm512_store_si512(P[b].w[g], _mm512_and_si512(o[g], m4));
            _mm512_store_si512(P[b].w[4 + g], _mm512_and_si512(_mm512_srli_epi16(o[g], 4), m4));
        }
        _mm256_storeu_si256(sc + b, gather_f16_raw(rp, off));
    }
}

/* q5_K's fifth bits: bytes of q plus 16 where bit j of the same byte of qh is set. */
AI __m512i q5k_or_hi(__m512i q, __m512i qh, __m512i bit)
{
    return _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qh, bit), q, _mm512_set1_epi8(16));
}

/* q4_K and q5_K (Q5 set) into the same panel layout: q5_K's quants, 0..31
 * with their fifth bit, take the place of q4_K's nibbles (vpdpbusd takes
 * either exactly), so both run the same tiles. */
AI void repack_kmin(const char *const *rp, int b0, int nbc, struct pq4k *P, const struct pfetch *pf,
                    const int Q5)
{
    const size_t wblock = Q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const size_t qs_off = Q5 ? offsetof(struct block_q5_K, qs) : offsetof(struct block_q4_K, qs);
    const struct tperm tp = tperm_load();
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int b = 0; b < nbc; b++) {
        pfetch_block(pf, b0 + b);
        size_t off = (size_t)(b0 + b) * wblock;
        /* qh dword g of each row: the fifth bits of elements 32 j + 4 g .. + 3, bit j */
        __m512i hb[8];
        if (Q5) load32x8(&tp, rp, off + offsetof(struct block_q5_K, qh), hb);
        for (int c = 0; c < 4; c++) {
            __m512i o[8];
            load32x8(&tp, rp, off + qs_off + 32 * (size_t)c, o);
            for (int g = 0; g < 8; g++) {
                __m512i lo = _mm512_and_si512(o[g], m4);
                __m512i hi = _mm512_and_si512(_mm512_srli_epi16(o[g], 4), m4);
                if (Q5) { /* sub-blocks 2c (low nibbles) and 2c + 1 (high) */
                    lo = q5k_or_hi(lo, hb[g], _mm512_set1_epi8((char)(1 << (2 * c))));
                    hi = q5k_or_hi(hi, hb[g], _mm512_set1_epi8((char)(2 << (2 * c))));
                }
                _mm512_store_si512(P[b].w[16 * c + g], lo);
                _mm512_store_si512(P[b].w[16 * c + 8 + g], hi);
            }
        }
        /* bytes 0..15 of the block: d | dmin, scales 0..3, 4..7, 8..11 */
        __m512i v[4];
        load16x4(&tp, rp, off, v);
        _mm512_store_ps(P[b].d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v[0])));
        _mm512_store_ps(P[b].dmin,
                        _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v[0], 16))));
        for (int j = 0; j < 4; j++) {
            __m512i sc = bytes_u(v[1], j, 63), m = bytes_u(v[2], j, 63);
            /* scale / min j + 4: low 4 bits in byte j of v[3], top 2 in bits 6..7 of byte j */
            __m512i sc4 =
                _mm512_or_si512(bytes_u(v[3], j, 15),
                                _mm512_slli_epi32(_mm512_srli_epi32(bytes_u(v[1], j, 255), 6), 4));
            __m512i m4v =
                _mm512_or_si512(_mm512_srli_epi32(bytes_u(v[3], j, 255), 4),
                                _mm512_slli_epi32(_mm512_srli_epi32(bytes_u(v[2], j, 255), 6), 4));
            _mm512_store_si512(P[b].sc[j], sc);
            _mm512_store_si512(P[b].sc[j + 4], sc4);
            _mm512_store_si512(P[b].mm[j], _mm512_or_si512(m, _mm512_slli_epi32(m, 16)));
            _mm512_store_si512(P[b].mm[j + 4], _mm512_or_si512(m4v, _mm512_slli_epi32(m4v, 16)));
        }
    }
}

static void repack_q4_K(const char *const *rp, int b0, int nbc, struct pq4k *P,
                        const struct pfetch *pf)
{
    repack_kmin(rp, b0, nbc, P, pf, 0);
}

static void repack_q5_K(const char *const *rp, int b0, int nbc, struct pq4k *P,
                        const struct pfetch *pf)
{
    repack_kmin(rp, b0, nbc, P, pf, 1);
}

static void repack_q6_K(const char *const *rp, int b0, int nbc, struct pq6k *P,
                        const struct pfetch *pf)
{
    const struct tperm tp = tperm_load();
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    for (int b = 0; b < nbc; b++) {
        pfetch_block(pf, b0 + b);
        size_t off = (size_t)(b0 + b) * sizeof(struct block_q6_K);
        for (int h = 0; h < 2; h++) {
            size_t lo = off + offsetof(struct block_q6_K, ql) + 64 * (size_t)h;
            size_t ho = off + offsetof(struct block_q6_K, qh) + 32 * (size_t)h;
            __m512i l[8], hb[8];
            int32_t(*w)[PANEL] = P[b].w + 32 * h;
            load32x8(&tp, rp, ho, hb);
            /* byte ops commute with the transpose; part p of the half takes
             * its high bits from bits 2p..2p+1 of qh */
            load32x8(&tp, rp, lo, l);
            for (int g = 0; g < 8; g++) {
                _mm512_store_si512(
                    w[g], _mm512_or_si512(_mm512_and_si512(l[g], m4),
                                          _mm512_and_si512(_mm512_slli_epi16(hb[g], 4), m30)));
                _mm512_store_si512(w[16 + g],
                                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l[g], 4), m4),
                                                   _mm512_and_si512(hb[g], m30)));
            }
            load32x8(&tp, rp, lo + 32, l);
            for (int g = 0; g < 8; g++) {
                _mm512_store_si512(
                    w[8 + g], _mm512_or_si512(_mm512_and_si512(l[g], m4),
                                              _mm512_and_si512(_mm512_slli_epi16(hb[g], 2), m30)));
                _mm512_store_si512(
                    w[24 + g], _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l[g], 4), m4),
                                               _mm512_and_si512(_mm512_srli_epi16(hb[g], 2), m30)));
            }
        }
        __m512i v[4];
        load16x4(&tp, rp, off + offsetof(struct block_q6_K, scales), v);
        for (int wd = 0; wd < 4; wd++) {
            for (int i = 0; i < 4; i++) /* sign-extend byte i */
                _mm512_store_si512(P[b].sc[4 * wd + i],
                                   _mm512_srai_epi32(_mm512_slli_epi32(v[wd], 24 - 8 * i), 24));
            /* int16 pairs (scale 2i, scale 2i + 1): lo16 holds bytes 0 and 2
             * sign-extended in its two words, hi16 bytes 1 and 3 */
            __m512i lo16 = _mm512_srai_epi16(_mm512_slli_epi16(v[wd], 8), 8);
            __m512i hi16 = _mm512_srai_epi16(v[wd], 8);
            _mm512_store_si512(
                P[b].scp[2 * wd],
                _mm512_mask_blend_epi16(0xaaaaaaaa, lo16, _mm512_slli_epi32(hi16, 16)));
            _mm512_store_si512(
                P[b].scp[2 * wd + 1],
                _mm512_mask_blend_epi16(0xaaaaaaaa, _mm512_srli_epi32(lo16, 16), hi16));
        }
        _mm512_store_ps(P[b].d, gather_f16(rp, off + offsetof(struct block_q6_K, d)));
    }
}

/* ================= quantized weights: tile kernels ================= */

/* Per (token, 32-block) side data for q8_0 activations. */
struct xq8 {
    float d;      /* activation scale */
    int32_t bias; /* -offset * sum of the block's quants */
};

struct qtile {
    const char *x[TILE_T];        /* activation block b0 of each token */
    const struct xq8 *pr[TILE_T]; /* q8_0: side data at block b0 of each token */
    const uint16_t *ds[2];        /* 32-blocks: f16 row scales of each panel, 16 a block */
    float *acc;                   /* (T, NP, 16) float accumulators, in/out */
};

/* The register tiles: NP panels (16 or 32 rows) x T tokens. Two panels
 * halve the activation broadcasts per vpdpbusd, which otherwise keep the
 * load ports busier than the dot-product units. */
#define TILE_T2  6 /* tokens per tile with two 32-block panels */
#define TILE_T2K 4 /* tokens per tile with two K-quant panels */

AI void tile_p32(const struct p32 *const *PP, int nbc, const struct qtile *q, const int NP,
                 const int T)
{
    __m512 acc[2][TILE_T];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            acc[p][t] = _mm512_load_ps(q->acc + PANEL * (NP * t + p));
    for (int b = 0; b < nbc; b++) {
        __m512i I[2][TILE_T];
        for (int t = 0; t < T; t++) {
            __m512i bias = _mm512_set1_epi32(q->pr[t][b].bias);
            for (int p = 0; p < NP; p++)
                I[p][t] = bias;
        }
        const size_t xo = (size_t)b * sizeof(struct block_q8_0) + 2;
        for (int g = 0; g < 8; g++) {
            __m512i w[2];
            for (int p = 0; p < NP; p++)
                w[p] = _mm512_load_si512(PP[p][b].w[g]);
            for (int t = 0; t < T; t++) {
                __m512i x = bcast32(q->x[t] + xo + 4 * g);
                for (int p = 0; p < NP; p++)
                    I[p][t] = _mm512_dpbusd_epi32(I[p][t], w[p], x);
            }
        }
        __m512 d[2];
        for (int p = 0; p < NP; p++)
            d[p] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q->ds[p] + PANEL * b)));
        for (int t = 0; t < T; t++) {
            __m512 dx = _mm512_set1_ps(q->pr[t][b].d);
            for (int p = 0; p < NP; p++)
                acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[p][t]), _mm512_mul_ps(d[p], dx),
                                            acc[p][t]);
        }
    }
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            _mm512_store_ps(q->acc + PANEL * (NP * t + p), acc[p][t]);
}

AI void tile_q4k(const struct pq4k *const *PP, int nbc, const struct qtile *q, const int NP,
                 const int T)
{
    __m512 acc[2][TILE_T];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            acc[p][t] = _mm512_load_ps(q->acc + PANEL * (NP * t + p));
    for (int b = 0; b < nbc; b++) {
        const struct block_q8_K *x[TILE_T];
        for (int t = 0; t < T; t++)
            x[t] = (const struct block_q8_K *)q->x[t] + b;
        __m512i A[2][TILE_T], I[2][TILE_T];
        for (int t = 0; t < T; t++)
            for (int p = 0; p < NP; p++)
                A[p][t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            for (int t = 0; t < T; t++)
                for (int p = 0; p < NP; p++)
                    I[p][t] = _mm512_setzero_si512();
            for (int g = 0; g < 8; g++) {
                __m512i w[2];
                for (int p = 0; p < NP; p++)
                    w[p] = _mm512_load_si512(PP[p][b].w[8 * j + g]);
                for (int t = 0; t < T; t++) {
                    __m512i xv = bcast32(x[t]->qs + 32 * j + 4 * g);
                    for (int p = 0; p < NP; p++)
                        I[p][t] = _mm512_dpbusd_epi32(I[p][t], w[p], xv);
                }
            }
            for (int p = 0; p < NP; p++) {
                __m512i sc = _mm512_load_si512(PP[p][b].sc[j]);
                for (int t = 0; t < T; t++)
                    A[p][t] = _mm512_add_epi32(A[p][t], _mm512_mullo_epi32(I[p][t], sc));
            }
        }
        for (int t = 0; t < T; t++)
            for (int p = 0; p < NP; p++)
                I[p][t] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i mm[2];
            for (int p = 0; p < NP; p++)
                mm[p] = _mm512_load_si512(PP[p][b].mm[j]);
            for (int t = 0; t < T; t++) {
                __m512i bs = bcast32(&x[t]->bsums[2 * j]);
                for (int p = 0; p < NP; p++)
                    I[p][t] = _mm512_dpwssd_epi32(I[p][t], mm[p], bs);
            }
        }
        for (int p = 0; p < NP; p++) {
            __m512 d = _mm512_load_ps(PP[p][b].d), dmin = _mm512_load_ps(PP[p][b].dmin);
            for (int t = 0; t < T; t++) {
                __m512 dx = _mm512_set1_ps(x[t]->d);
                acc[p][t] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[p][t]), _mm512_mul_ps(d, dx), acc[p][t]);
                acc[p][t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(I[p][t]), _mm512_mul_ps(dmin, dx),
                                             acc[p][t]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            _mm512_store_ps(q->acc + PANEL * (NP * t + p), acc[p][t]);
}

AI void tile_q6k(const struct pq6k *const *PP, int nbc, const struct qtile *q, const int NP,
                 const int T)
{
    __m512 acc[2][TILE_T];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            acc[p][t] = _mm512_load_ps(q->acc + PANEL * (NP * t + p));
    for (int b = 0; b < nbc; b++) {
        const struct block_q8_K *x[TILE_T];
        for (int t = 0; t < T; t++)
            x[t] = (const struct block_q8_K *)q->x[t] + b;
        __m512i A[2][TILE_T], I[2][TILE_T];
        for (int t = 0; t < T; t++)
            for (int p = 0; p < NP; p++)
                A[p][t] = _mm512_setzero_si512();
        for (int j = 0; j < 16; j++) {
            for (int t = 0; t < T; t++)
                for (int p = 0; p < NP; p++)
                    I[p][t] = _mm512_setzero_si512();
            for (int g = 0; g < 4; g++) {
                __m512i w[2];
                for (int p = 0; p < NP; p++)
                    w[p] = _mm512_load_si512(PP[p][b].w[4 * j + g]);
                for (int t = 0; t < T; t++) {
                    __m512i xv = bcast32(x[t]->qs + 16 * j + 4 * g);
                    for (int p = 0; p < NP; p++)
                        I[p][t] = _mm512_dpbusd_epi32(I[p][t], w[p], xv);
                }
            }
            for (int p = 0; p < NP; p++) {
                __m512i sc = _mm512_load_si512(PP[p][b].sc[j]);
                for (int t = 0; t < T; t++)
                    A[p][t] = _mm512_add_epi32(A[p][t], _mm512_mullo_epi32(I[p][t], sc));
            }
        }
        for (int t = 0; t < T; t++)
            for (int p = 0; p < NP; p++)
                I[p][t] = _mm512_setzero_si512();
        for (int i = 0; i < 8; i++) {
            __m512i sp[2];
            for (int p = 0; p < NP; p++)
                sp[p] = _mm512_load_si512(PP[p][b].scp[i]);
            for (int t = 0; t < T; t++) {
                __m512i bs = bcast32(&x[t]->bsums[2 * i]);
                for (int p = 0; p < NP; p++)
                    I[p][t] = _mm512_dpwssd_epi32(I[p][t], sp[p], bs);
            }
        }
        for (int p = 0; p < NP; p++) {
            __m512 d = _mm512_load_ps(PP[p][b].d);
            for (int t = 0; t < T; t++) {
                __m512i a = _mm512_sub_epi32(A[p][t], _mm512_slli_epi32(I[p][t], 5));
                __m512 sv = _mm512_mul_ps(d, _mm512_set1_ps(x[t]->d));
                acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), sv, acc[p][t]);
            }
        }
    }
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            _mm512_store_ps(q->acc + PANEL * (NP * t + p), acc[p][t]);
}

typedef void (*tile_fn)(const void *const *PP, int nbc, const struct qtile *q);

#define DEF_TILE(name, fn, ptype, NP, T)                                                           \
    static __attribute__((noinline)) void name(const void *const *PP, int nbc,                     \
                                               const struct qtile *q)                              \
    {                                                                                              \
        fn((const ptype *const *)PP, nbc, q, NP, T);                                               \
    }
#define DEF_TILE_ALL(pfx, fn, ptype)                                                               \
    DEF_TILE(pfx##1_1, fn, ptype, 1, 1)                                                            \
    DEF_TILE(pfx##1_2, fn, ptype, 1, 2)                                                            \
    DEF_TILE(pfx##1_3, fn, ptype, 1, 3)                                                            \
    DEF_TILE(pfx##1_4, fn, ptype, 1, 4)                                                            \
    DEF_TILE(pfx##1_5, fn, ptype, 1, 5)                                                            \
    DEF_TILE(pfx##1_6, fn, ptype, 1, 6)                                                            \
    DEF_TILE(pfx##1_7, fn, ptype, 1, 7)                                                            \
    DEF_TILE(pfx##1_8, fn, ptype, 1, 8)                                                            \
    DEF_TILE(pfx##2_1, fn, ptype, 2, 1)                                                            \
    DEF_TILE(pfx##2_2, fn, ptype, 2, 2)                                                            \
    DEF_TILE(pfx##2_3, fn, ptype, 2, 3)                                                            \
    DEF_TILE(pfx##2_4, fn, ptype, 2, 4)                                                            \
    DEF_TILE(pfx##2_5, fn, ptype, 2, 5)                                                            \
    DEF_TILE(pfx##2_6, fn, ptype, 2, 6)                                                            \
    static const tile_fn pfx##fns[3][TILE_T + 1] = {                                               \
        {NULL},                                                                                    \
        {NULL, pfx##1_1, pfx##1_2, pfx##1_3, pfx##1_4, pfx##1_5, pfx##1_6, pfx##1_7, pfx##1_8},    \
        {NULL, pfx##2_1, pfx##2_2, pfx##2_3, pfx##2_4, pfx##2_5, pfx##2_6, NULL, NULL}};

DEF_TILE_ALL(tile_p32_, tile_p32, struct p32)
DEF_TILE_ALL(tile_q4k_, tile_q4k, struct pq4k)
DEF_TILE_ALL(tile_q6k_, tile_q6k, struct pq6k)

/* ================= quantized weights: decode (few tokens) ================= */

/* With up to GEMV_T tokens a repack costs more than it saves, so the decode
 * kernels read the GGUF blocks in place: each row's block dot comes
 * out of vpdpbusd / vpmaddubsw as a vector of partial sums, and a tree of
 * in-lane shuffles folds 8 or 16 such vectors into one register holding the
 * exact block integer of each of the 16 rows. From there the float chain is
 * the canonical one, lane per row, so the bits equal the tiled path's. The
 * trees of q8_0 and q4_0 leave the rows in a fixed permuted lane order
 * (SIGMA8, SIGMA4), which the scale gather follows and the store undoes. */

#define GEMV_T 4 /* token counts up to this take the decode kernels */

struct qgemv {
    const char *W;                /* weight rows */
    size_t wrb;                   /* bytes per weight row */
    int nb;                       /* blocks per row */
    int r1;                       /* one past the last valid row */
    const char *x[GEMV_T];        /* activation row of each token */
    const struct xq8 *pr[GEMV_T]; /* q8_0 / q4_0: side data of each token's row */
    const int8_t *xk[GEMV_T];     /* q4_K: quants regrouped by sub-block pair, 256 a block */
    float *y[GEMV_T];             /* output row of each token */
};

static const int32_t SIGMA8[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
static const int32_t SIGMA8_INV[16] = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
static const int32_t SIGMA4[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

AI __m512i hadd32(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}

AI __m512i hadd64(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

AI __m512i hadd128(__m512i a, __m512i b)
{
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xdd));
}

/* v[r], r = 0..15, 16 partial sums each -> lane r = sum of v[r]. */
AI __m512i tree16(const __m512i v[16])
{
    __m512i q[8], r4[4];
    for (int j = 0; j < 8; j++)
        q[j] = hadd32(v[2 * j], v[2 * j + 1]);
    for (int k = 0; k < 4; k++)
        r4[k] = hadd64(q[2 * k], q[2 * k + 1]);
    return hadd128(hadd128(r4[0], r4[1]), hadd128(r4[2], r4[3]));
}

AI void gemv_rows(const struct qgemv *g, int r, const char *rp[PANEL])
{
    for (int i = 0; i < PANEL; i++) {
        int rr = r + i < g->r1 ? r + i : g->r1 - 1;
        rp[i] = g->W + (size_t)rr * g->wrb;
    }
}

AI struct pfetch gemv_pfetch(const struct qgemv *g, int r)
{
    struct pfetch pf = {g->W + (size_t)(r + PANEL) * g->wrb, 0, 0};
    if (r + PANEL < g->r1) pf.bytes = (size_t)MIN(PANEL, g->r1 - r - PANEL) * g->wrb;
    pf.step = (pf.bytes / (size_t)g->nb + 64) & ~(size_t)63;
    return pf;
}

/* Stores the valid rows of acc (lane l = row perm[l], or natural if NULL). */
AI void gemv_store(const struct qgemv *g, int r, int t, __m512 acc, const int32_t *inv)
{
    if (inv) acc = _mm512_permutexvar_ps(_mm512_loadu_si512(inv), acc);
    int nr = g->r1 - r < PANEL ? g->r1 - r : PANEL;
    _mm512_mask_storeu_ps(g->y[t] + r, (__mmask16)((1u << nr) - 1), acc);
}

AI void gemv_q8_0(const struct qgemv *g, int r, const int T)
{
    const char *rp[PANEL], *rs[PANEL];
    gemv_rows(g, r, rp);
    for (int l = 0; l < PANEL; l++)
        rs[l] = rp[SIGMA8[l]];
    const struct pfetch pf = gemv_pfetch(g, r);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    __m512 acc[GEMV_T];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < g->nb; b++) {
        pfetch_block(&pf, b);
        const size_t off = (size_t)b * sizeof(struct block_q8_0);
        __m512i z[8];
        for (int i = 0; i < 8; i++)
            z[i] = _mm512_xor_si512(load2rows(rp[2 * i] + off + 2, rp[2 * i + 1] + off + 2), x80);
        const __m512 dw = gather_f16(rs, off);
        for (int t = 0; t < T; t++) {
            const __m512i x =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(g->x[t] + off + 2)));
            __m512i p[8];
            for (int i = 0; i < 8; i++)
                p[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), z[i], x);
            __m512i s = hadd128(hadd64(hadd32(p[0], p[1]), hadd32(p[2], p[3])),
                                hadd64(hadd32(p[4], p[5]), hadd32(p[6], p[7])));
            s = _mm512_add_epi32(s, _mm512_set1_epi32(g->pr[t][b].bias));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(g->pr[t][b].d)), acc[t]);
        }
    }
    for (int t = 0; t < T; t++)
        gemv_store(g, r, t, acc[t], SIGMA8_INV);
}

AI __m512i load4rows16(const char *const *r4, size_t off)
{
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(r4[0] + off)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r4[1] + off)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r4[2] + off)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(r4[3] + off)), 3);
}

AI void gemv_q4_0(const struct qgemv *g, int r, const int T)
{
    const char *rp[PANEL], *rs[PANEL];
    gemv_rows(g, r, rp);
    for (int l = 0; l < PANEL; l++)
        rs[l] = rp[SIGMA4[l]];
    const struct pfetch pf = gemv_pfetch(g, r);
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[GEMV_T];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < g->nb; b++) {
        pfetch_block(&pf, b);
        const size_t off = (size_t)b * sizeof(struct block_q4_0);
        __m512i lo[4], hi[4];
        for (int q = 0; q < 4; q++) {
            __m512i v = load4rows16(rp + 4 * q, off + 2);
            lo[q] = _mm512_and_si512(v, m4);
            hi[q] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        const __m512 dw = gather_f16(rs, off);
        const size_t xo = (size_t)b * sizeof(struct block_q8_0) + 2;
        for (int t = 0; t < T; t++) {
            const __m512i xl =
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(g->x[t] + xo)));
            const __m512i xh =
                _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(g->x[t] + xo + 16)));
            __m512i p[4];
            for (int q = 0; q < 4; q++)
                p[q] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[q], xl),
                                           hi[q], xh);
            __m512i s = hadd64(hadd32(p[0], p[1]), hadd32(p[2], p[3]));
            s = _mm512_add_epi32(s, _mm512_set1_epi32(g->pr[t][b].bias));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(g->pr[t][b].d)), acc[t]);
        }
    }
    for (int t = 0; t < T; t++)
        gemv_store(g, r, t, acc[t], SIGMA4); /* SIGMA4 is its own inverse */
}

/* vpshufb controls: word lanes of 128-bit lanes 0-1 get scale a, 2-3 scale b
 * (from a qword of 8 scales repeated in every 128-bit lane). */
static const int8_t SC_PAIR_CTRL[4][64] = {
#define SCW(a) a, -128, a, -128, a, -128, a, -128, a, -128, a, -128, a, -128, a, -128
    {SCW(0), SCW(0), SCW(2), SCW(2)},
    {SCW(1), SCW(1), SCW(3), SCW(3)},
    {SCW(4), SCW(4), SCW(6), SCW(6)},
    {SCW(5), SCW(5), SCW(7), SCW(7)},
#undef SCW
};

/* q4_K and q5_K (Q5 set). Vector v of a block's quants holds sub-blocks
 * (0, 2), (1, 3), (4, 6), (5, 7) in its two halves (the activations are
 * regrouped to match, prep_q4_K_gemv); for q5_K the fifth bits of those
 * sub-blocks come from the block's 32 qh bytes, repeated in both halves.
 * vpmaddubsw's int16 pairs do not saturate: |pair| <= 2 * 31 * 127 = 7874. */
AI void gemv_kmin(const struct qgemv *g, int r, const int T, const int Q5)
{
    const size_t wblock = Q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const size_t qs_off = Q5 ? offsetof(struct block_q5_K, qs) : offsetof(struct block_q4_K, qs);
    const char *rp[PANEL];
    gemv_rows(g, r, rp);
    const struct pfetch pf = gemv_pfetch(g, r);
    const struct tperm tp = tperm_load();
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i ctrl[4], hsel[4];
    for (int v = 0; v < 4; v++) {
        const int j = (v & 1) + 4 * (v >> 1); /* sub-block of the low half */
        ctrl[v] = _mm512_loadu_si512(SC_PAIR_CTRL[v]);
        hsel[v] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << j)),
                                     _mm256_set1_epi8((char)(4 << j)), 1);
    }
    __m512 acc[GEMV_T];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < g->nb; b++) {
        pfetch_block(&pf, b);
        const size_t off = (size_t)b * wblock;
        __m512i part[GEMV_T][PANEL];
        for (int i = 0; i < PANEL; i++) {
            const uint8_t *blk = (const uint8_t *)rp[i] + off;
            const __m512i scb = _mm512_set1_epi64((long long)q4k_scales8(blk + 4));
            const __m512i q0 = _mm512_loadu_si512(blk + qs_off);
            const __m512i q1 = _mm512_loadu_si512(blk + qs_off + 64);
            __m512i q[4] = {
                _mm512_and_si512(q0, m4), _mm512_and_si512(_mm512_srli_epi16(q0, 4), m4),
                _mm512_and_si512(q1, m4), _mm512_and_si512(_mm512_srli_epi16(q1, 4), m4)};
            if (Q5) {
                const __m512i qh = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(blk + offsetof(struct block_q5_K, qh))));
                for (int v = 0; v < 4; v++)
                    q[v] = q5k_or_hi(q[v], qh, hsel[v]);
            }
            for (int t = 0; t < T; t++) {
                const int8_t *x = g->xk[t] + (size_t)b * QK_K;
                __m512i a = _mm512_setzero_si512();
                for (int v = 0; v < 4; v++)
                    a = _mm512_dpwssd_epi32(
                        a, _mm512_maddubs_epi16(q[v], _mm512_loadu_si512(x + 64 * v)),
                        _mm512_shuffle_epi8(scb, ctrl[v]));
                part[t][i] = a;
            }
        }
        /* d | dmin, scales 0..3, 4..7, 8..11 with rows in lanes, for the mins */
        __m512i v[4];
        load16x4(&tp, rp, off, v);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v[0]));
        const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v[0], 16)));
        __m512i mm[8];
        for (int j = 0; j < 4; j++) {
            __m512i m = bytes_u(v[2], j, 63);
            __m512i m4v =
                _mm512_or_si512(_mm512_srli_epi32(bytes_u(v[3], j, 255), 4),
                                _mm512_slli_epi32(_mm512_srli_epi32(bytes_u(v[2], j, 255), 6), 4));
            mm[j] = _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
            mm[j + 4] = _mm512_or_si512(m4v, _mm512_slli_epi32(m4v, 16));
        }
        for (int t = 0; t < T; t++) {
            const struct block_q8_K *xb = (const struct block_q8_K *)g->x[t] + b;
            __m512i bm = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++)
                bm = _mm512_dpwssd_epi32(bm, mm[j], bcast32(&xb->bsums[2 * j]));
            const __m512 dx = _mm512_set1_ps(xb->d);
            acc[t] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(tree16(part[t])), _mm512_mul_ps(d, dx), acc[t]);
            acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(bm), _mm512_mul_ps(dmin, dx), acc[t]);
        }
    }
    for (int t = 0; t < T; t++)
        gemv_store(g, r, t, acc[t], NULL);
}

/* vpermw indices: 128-bit lane c of vector v gets scale 4v + c. */
static const int16_t SC16_IDX[4][32] = {
#define SCI(j) j, j, j, j, j, j, j, j
    {SCI(0), SCI(1), SCI(2), SCI(3)},
    {SCI(4), SCI(5), SCI(6), SCI(7)},
    {SCI(8), SCI(9), SCI(10), SCI(11)},
    {SCI(12), SCI(13), SCI(14), SCI(15)},
#undef SCI
};

AI void gemv_q6_K(const struct qgemv *g, int r, const int T)
{
    const char *rp[PANEL];
    gemv_rows(g, r, rp);
    const struct pfetch pf = gemv_pfetch(g, r);
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    /* qh shifts: part 0 | part 1 take bits 0-1 | 2-3 to 4-5; parts 2 | 3 bits 4-5 | 6-7 */
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    __m512i idx[4];
    for (int v = 0; v < 4; v++)
        idx[v] = _mm512_loadu_si512(SC16_IDX[v]);
    __m512 acc[GEMV_T];
    for (int t = 0; t < T; t++)
        acc[t] = _mm512_setzero_ps();
    for (int b = 0; b < g->nb; b++) {
        pfetch_block(&pf, b);
        const size_t off = (size_t)b * sizeof(struct block_q6_K);
        __m512i part[GEMV_T][PANEL];
        for (int i = 0; i < PANEL; i++) {
            const uint8_t *blk = (const uint8_t *)rp[i] + off;
            const __m256i sc16 =
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
            const __m512i sc = _mm512_zextsi256_si512(sc16);
            /* -32 * scale: the -32 offset of the quants, through the block sums */
            const __m512i nsc = _mm512_zextsi256_si512(
                _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
            __m512i q[4];
            for (int h = 0; h < 2; h++) {
                const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
                const __m512i qh = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
                q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                           _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
                q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                               _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
            }
            __m512i scv[4];
            for (int v = 0; v < 4; v++)
                scv[v] = _mm512_permutexvar_epi16(idx[v], sc);
            for (int t = 0; t < T; t++) {
                const struct block_q8_K *xb = (const struct block_q8_K *)g->x[t] + b;
                __m512i a = _mm512_dpwssd_epi32(
                    _mm512_setzero_si512(), nsc,
                    _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)xb->bsums)));
                for (int v = 0; v < 4; v++)
                    a = _mm512_dpwssd_epi32(
                        a, _mm512_maddubs_epi16(q[v], _mm512_loadu_si512(xb->qs + 64 * v)), scv[v]);
                part[t][i] = a;
            }
        }
        const __m512 d = gather_f16(rp, off + offsetof(struct block_q6_K, d));
        for (int t = 0; t < T; t++) {
            const struct block_q8_K *xb = (const struct block_q8_K *)g->x[t] + b;
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tree16(part[t])),
                                     _mm512_mul_ps(d, _mm512_set1_ps(xb->d)), acc[t]);
        }
    }
    for (int t = 0; t < T; t++)
        gemv_store(g, r, t, acc[t], NULL);
}

#define DEF_GEMV(name, fn, T)                                                                      \
    static __attribute__((noinline)) void name(const struct qgemv *g, int r)                       \
    {                                                                                              \
        fn(g, r, T);                                                                               \
    }
DEF_GEMV(gemv_q8_0_1, gemv_q8_0, 1)
DEF_GEMV(gemv_q8_0_2, gemv_q8_0, 2)
DEF_GEMV(gemv_q8_0_3, gemv_q8_0, 3)
DEF_GEMV(gemv_q8_0_4, gemv_q8_0, 4)
DEF_GEMV(gemv_q4_0_1, gemv_q4_0, 1)
DEF_GEMV(gemv_q4_0_2, gemv_q4_0, 2)
DEF_GEMV(gemv_q4_0_3, gemv_q4_0, 3)
DEF_GEMV(gemv_q4_0_4, gemv_q4_0, 4)
#define DEF_GEMV_KMIN(name, Q5, T)                                                                 \
    static __attribute__((noinline)) void name(const struct qgemv *g, int r)                       \
    {                                                                                              \
        gemv_kmin(g, r, T, Q5);                                                                    \
    }
DEF_GEMV_KMIN(gemv_q4_K_1, 0, 1)
DEF_GEMV_KMIN(gemv_q4_K_2, 0, 2)
DEF_GEMV_KMIN(gemv_q4_K_3, 0, 3)
DEF_GEMV_KMIN(gemv_q4_K_4, 0, 4)
DEF_GEMV_KMIN(gemv_q5_K_1, 1, 1)
DEF_GEMV_KMIN(gemv_q5_K_2, 1, 2)
DEF_GEMV_KMIN(gemv_q5_K_3, 1, 3)
DEF_GEMV_KMIN(gemv_q5_K_4, 1, 4)
DEF_GEMV(gemv_q6_K_1, gemv_q6_K, 1)
DEF_GEMV(gemv_q6_K_2, gemv_q6_K, 2)
DEF_GEMV(gemv_q6_K_3, gemv_q6_K, 3)
DEF_GEMV(gemv_q6_K_4, gemv_q6_K, 4)

/* q4_K / q5_K decode activations: each block's quants regrouped as
 * [0..31 | 64..95], [32..63 | 96..127], [128..159 | 192..223], [160..191 | 224..255]
 * to line up with low / high nibbles of 64 bytes of q4_K (q5_K) quants. */
static void prep_q4_K_gemv(const char *xq, size_t xrb, int n_tok, int nb, int8_t *out)
{
    static const int order[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int t = 0; t < n_tok; t++)
        for (int b = 0; b < nb; b++) {
            const struct block_q8_K *x = (const struct block_q8_K *)(xq + (size_t)t * xrb) + b;
            int8_t *o = out + ((size_t)t * nb + b) * QK_K;
            for (int c = 0; c < 8; c++)
                memcpy(o + 32 * c, x->qs + 32 * order[c], 32);
        }
}

/* ================= quantized weights: driver ================= */

struct qtype {
    size_t wblock; /* bytes per weight block */
    int blck;      /* elements per block */
    size_t pblock; /* bytes per repacked panel block */
    int chunk;     /* blocks per repacked chunk */
    size_t xblock; /* bytes per activation block */
    int offset;    /* q8_0 / q4_0: weight offset folded into the bias */
    void (*repack)(const char *const *rp, int b0, int nbc, void *P, const struct pfetch *pf);
    const tile_fn (*tiles)[TILE_T + 1];                    /* [panels][tokens] */
    int t2;                                                /* most tokens per two-panel tile */
    void (*gemv[GEMV_T + 1])(const struct qgemv *, int r); /* by token count */
};

static void repack_q8_0_v(const char *const *rp, int b0, int nbc, void *P, const struct pfetch *pf)
{
    repack_q8_0(rp, b0, nbc, P, pf);
}
static void repack_q4_0_v(const char *const *rp, int b0, int nbc, void *P, const struct pfetch *pf)
{
    repack_q4_0(rp, b0, nbc, P, pf);
}
static void repack_q4_K_v(const char *const *rp, int b0, int nbc, void *P, const struct pfetch *pf)
{
    repack_q4_K(rp, b0, nbc, P, pf);
}
static void repack_q5_K_v(const char *const *rp, int b0, int nbc, void *P, const struct pfetch *pf)
{
    repack_q5_K(rp, b0, nbc, P, pf);
}
static void repack_q6_K_v(const char *const *rp, int b0, int nbc, void *P, const struct pfetch *pf)
{
    repack_q6_K(rp, b0, nbc, P, pf);
}

static const struct qtype qt_q8_0 = {sizeof(struct block_q8_0),
                                     QK8_0,
                                     sizeof(struct p32),
                                     16,
                                     sizeof(struct block_q8_0),
                                     128,
                                     repack_q8_0_v,
                                     tile_p32_fns,
                                     TILE_T2,
                                     {NULL, gemv_q8_0_1, gemv_q8_0_2, gemv_q8_0_3, gemv_q8_0_4}};
static const struct qtype qt_q4_0 = {sizeof(struct block_q4_0),
                                     QK4_0,
                                     sizeof(struct p32),
                                     16,
                                     sizeof(struct block_q8_0),
                                     8,
                                     repack_q4_0_v,
                                     tile_p32_fns,
                                     TILE_T2,
                                     {NULL, gemv_q4_0_1, gemv_q4_0_2, gemv_q4_0_3, gemv_q4_0_4}};
static const struct qtype qt_q4_K = {sizeof(struct block_q4_K),
                                     QK_K,
                                     sizeof(struct pq4k),
                                     2,
                                     sizeof(struct block_q8_K),
                                     0,
                                     repack_q4_K_v,
                                     tile_q4k_fns,
                                     TILE_T2K,
                                     {NULL, gemv_q4_K_1, gemv_q4_K_2, gemv_q4_K_3, gemv_q4_K_4}};
static const struct qtype qt_q5_K = {sizeof(struct block_q5_K),
                                     QK_K,
                                     sizeof(struct pq4k),
                                     2,
                                     sizeof(struct block_q8_K),
                                     0,
                                     repack_q5_K_v,
                                     tile_q4k_fns,
                                     TILE_T2K,
                                     {NULL, gemv_q5_K_1, gemv_q5_K_2, gemv_q5_K_3, gemv_q5_K_4}};
static const struct qtype qt_q6_K = {sizeof(struct block_q6_K),
                                     QK_K,
                                     sizeof(struct pq6k),
                                     2,
                                     sizeof(struct block_q8_K),
                                     0,
                                     repack_q6_K_v,
                                     tile_q6k_fns,
                                     TILE_T2K,
                                     {NULL, gemv_q6_K_1, gemv_q6_K_2, gemv_q6_K_3, gemv_q6_K_4}};

/* Scale and -offset * sum(quants) of every q8_0 activation block. */
static void prep_q8_0(const char *xq, size_t xrb, int n_tok, int nb, int offset, struct xq8 *pr)
{
    const __m256i ones = _mm256_set1_epi8(1);
    for (int t = 0; t < n_tok; t++) {
        const struct block_q8_0 *x = (const struct block_q8_0 *)(xq + (size_t)t * xrb);
        for (int b = 0; b < nb; b++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)x[b].qs);
            __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, v);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            pr[(size_t)t * nb + b].d = kern__f16_to_f32(x[b].d);
            pr[(size_t)t * nb + b].bias = -offset * _mm_cvtsi128_si32(s4);
        }
    }
}

void kern__act_side_q8_0_avx512(const void *xq, int k, void *side)
{
    _Static_assert(sizeof(struct xq8) == sizeof(struct kern_q8_side), "side data layout");
    prep_q8_0(xq, 0, 1, k / QK8_0, 128, side);
}

/* Writes a tile loop's accumulators - acc (nt, np * PANEL) - to the output
 * rows: nr_left = rows still to write from this panel pair on (only the
 * first np * PANEL count), y points at (token 0, row r). Vector stores, not
 * memcpy: a 64/128-byte memcpy per token went through rep movs, whose
 * start-up cost dominated. */
static void store_acc(const float *acc, int np, int nt, int nr_left, float *y, int ldy)
{
    const int nr = nr_left < np * PANEL ? nr_left : np * PANEL;
    const __mmask16 m0 = nr >= PANEL ? 0xffff : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 2 * PANEL ? 0xffff
                         : nr > PANEL    ? (__mmask16)((1u << (nr - PANEL)) - 1)
                                         : 0;
    for (int t = 0; t < nt; t++) {
        float *dst = y + (size_t)t * ldy;
        const float *src = acc + (size_t)t * np * PANEL;
        _mm512_mask_storeu_ps(dst, m0, _mm512_loadu_ps(src));
        if (m1) _mm512_mask_storeu_ps(dst + PANEL, m1, _mm512_loadu_ps(src + PANEL));
    }
}

static void matmul_quant(const struct qtype *qt, const void *W, size_t wrb, int k, int r0, int r1,
                         const void *xq, size_t xrb, int n_tok, float *y, int ldy)
{
    const int nb = k / qt->blck;
    struct xq8 *pr = NULL;
    if (qt->offset) {
        pr = kern__scratch(KERN__SLOT_PREP, (size_t)n_tok * nb * sizeof(*pr));
        prep_q8_0(xq, xrb, n_tok, nb, qt->offset, pr);
    }
    if (n_tok <= GEMV_T) {
        struct qgemv g = {(const char *)W, wrb, nb, r1, {NULL}, {NULL}, {NULL}, {NULL}};
        int8_t *xk = NULL;
        if (qt->tiles == tile_q4k_fns) { /* q4_K, q5_K */
            xk = kern__scratch(KERN__SLOT_PANEL, (size_t)n_tok * nb * QK_K);
            prep_q4_K_gemv(xq, xrb, n_tok, nb, xk);
        }
        for (int t = 0; t < n_tok; t++) {
            g.x[t] = (const char *)xq + (size_t)t * xrb;
            g.pr[t] = pr ? pr + (size_t)t * nb : NULL;
            g.xk[t] = xk ? xk + (size_t)t * nb * QK_K : NULL;
            g.y[t] = y + (size_t)t * ldy;
        }
        for (int r = r0; r < r1; r += PANEL)
            qt->gemv[n_tok](&g, r);
        return;
    }
    const int chunk = qt->chunk < nb ? qt->chunk : nb;
    /* 32-blocks keep their f16 scales after the chunk's quants */
    const size_t pstride =
        ((size_t)chunk * qt->pblock + (qt->offset ? 32 * (size_t)chunk : 0) + 63) & ~(size_t)63;
    char *panels = kern__scratch(KERN__SLOT_PANEL, 2 * pstride);
    const int tb = kern__token_block(xrb, n_tok, TILE_T, L2_ACT);
    float *acc = kern__scratch(KERN__SLOT_ACC, (size_t)tb * 2 * PANEL * sizeof(float));

    for (int tb0 = 0; tb0 < n_tok; tb0 += tb) {
        const int nt = tb0 + tb < n_tok ? tb : n_tok - tb0;
        /* two panels (32 rows) at a time while more than 16 rows remain */
        for (int r = r0; r < r1;) {
            const int np = r + PANEL < r1 ? 2 : 1;
            const int tmax = np == 2 ? qt->t2 : TILE_T;
            const char *rp[2][PANEL];
            struct pfetch pf[2];
            const void *pp[2];
            for (int p = 0; p < np; p++) {
                const int rb = r + PANEL * p;
                for (int i = 0; i < PANEL; i++) {
                    int rr = rb + i < r1 ? rb + i : r1 - 1;
                    rp[p][i] = (const char *)W + (size_t)rr * wrb;
                }
                const int rn = rb + np * PANEL; /* rows this panel prefetches */
                pf[p] = (struct pfetch){(const char *)W + (size_t)rn * wrb, 0, 0};
                if (rn < r1) pf[p].bytes = (size_t)MIN(PANEL, r1 - rn) * wrb;
                pf[p].step = (pf[p].bytes / (size_t)nb + 64) & ~(size_t)63;
                pp[p] = panels + (size_t)p * pstride;
            }
            memset(acc, 0, (size_t)nt * np * PANEL * sizeof(float));
            for (int b0 = 0; b0 < nb; b0 += chunk) {
                const int nbc = b0 + chunk < nb ? chunk : nb - b0;
                struct qtile q;
                for (int p = 0; p < np; p++) {
                    qt->repack(rp[p], b0, nbc, (void *)pp[p], &pf[p]);
                    q.ds[p] = (const uint16_t *)((const char *)pp[p] + (size_t)nbc * qt->pblock);
                }
                for (int t0 = 0; t0 < nt; t0 += tmax) {
                    const int T = nt - t0 < tmax ? nt - t0 : tmax;
                    for (int t = 0; t < T; t++) {
                        int tok = tb0 + t0 + t;
                        q.x[t] = (const char *)xq + (size_t)tok * xrb + (size_t)b0 * qt->xblock;
                        q.pr[t] = pr ? pr + (size_t)tok * nb + b0 : NULL;
                    }
                    q.acc = acc + (size_t)t0 * np * PANEL;
                    qt->tiles[np][T](pp, nbc, &q);
                }
            }
            store_acc(acc, np, nt, r1 - r, y + (size_t)tb0 * ldy + r, ldy);
            r += np * PANEL;
        }
    }
}

static void matmul_avx512(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                          const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy)
{
    switch (wt) {
    case DTYPE_F32:
    case DTYPE_F16:
    case DTYPE_BF16:
        matmul_float(wt, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    case DTYPE_Q8_0:
        matmul_quant(&qt_q8_0, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    case DTYPE_Q4_0:
        matmul_quant(&qt_q4_0, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    case DTYPE_Q4_K:
        matmul_quant(&qt_q4_K, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    case DTYPE_Q5_K:
        matmul_quant(&qt_q5_K, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    case DTYPE_Q6_K:
        matmul_quant(&qt_q6_K, W, w_row_bytes, k, r0, r1, xq, x_row_bytes, n_tok, y, ldy);
        return;
    default:
        CHECK(!"kern_matmul: unsupported weight type");
    }
}

/* ================= KV cache and reductions ================= */

/* 16 KV elements from element e of a row, as f32 (masked lanes are 0). */
AI __m512 ldkv(int kv, const char *row, int e, __mmask16 m)
{
    if (kv == DTYPE_F32) return _mm512_maskz_loadu_ps(m, row + 4 * (size_t)e);
    __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * (size_t)e);
    if (kv == DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ldkv of 16 whole elements, unmasked */
AI __m512 ldkv16(int kv, const char *row, int e)
{
    if (kv == DTYPE_F32) return _mm512_loadu_ps(row + 4 * (size_t)e);
    __m256i h = _mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)e));
    if (kv == DTYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

AI void kv_accum_t(const int kv, const char *v, size_t stride, int n_rows, const float *w, int d,
                   float *out)
{
    for (int e = 0; e < d; e += 64) {
        __m512 o[4];
        __mmask16 m[4];
        for (int c = 0; c < 4; c++) {
            int left = d - e - 16 * c;
            m[c] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
            o[c] = _mm512_maskz_loadu_ps(m[c], out + e + 16 * c);
        }
        for (int j = 0; j < n_rows; j++) {
            __m512 wj = _mm512_set1_ps(w[j]);
            const char *row = v + (size_t)j * stride;
            for (int c = 0; c < 4; c++)
                if (m[c]) o[c] = _mm512_fmadd_ps(wj, ldkv(kv, row, e + 16 * c, m[c]), o[c]);
        }
        for (int c = 0; c < 4; c++)
            _mm512_mask_storeu_ps(out + e + 16 * c, m[c], o[c]);
    }
}

static void kv_accum_heads_avx512(enum dtype kv, const void *v, size_t stride, int n_rows,
                                  const float *w, int ldw, int n_heads, int d, float *out, int ldo);

static void kv_accum_avx512(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w,
                            int d, float *out)
{
    if (kv == DTYPE_F32)
        kv_accum_t(DTYPE_F32, v, stride, n_rows, w, d, out);
    else if (kv == DTYPE_F16)
        kv_accum_t(DTYPE_F16, v, stride, n_rows, w, d, out);
    else
        kv_accum_heads_avx512(kv, v, stride, n_rows, w, 0, 1, d, out, 0);
}

/* ---- attention: K panels and grouped-query heads ----
 *
 * kern_kv_dot over a K panel: rows sit in the 16 lanes, each dimension's
 * vector of keys is converted once and multiplied by every head's q[e]
 * (a broadcast), into four chains per head (kernels_impl.h); no lane
 * reduction. Up to KVH_DOT heads share each load: 4 x 7 accumulators and the
 * key vector fit the 32 registers. A single head is the same code with H = 1,
 * so the grouped call gives every head exactly its single-head bits.
 *
 * The weighted sum over V rows (row-major) converts each row once for up to
 * KVH_ACC heads; every output element is fma(w[j], v[j], out) in row order,
 * as kv_accum_t, so the bits equal one call per head.
 *
 * Both run over a block table in one call (struct kvrun), so one token's
 * attention (kern_attend_heads) holds its V accumulators in registers
 * across the whole context. */

/* Positions [0, n) of one KV head kept in blocks of bt: block i's data
 * (a K panel or V rows) at base + ids[i] * bstride. One block of n rows is
 * {ptr, 0, &zero_id, n, n}. */
struct kvrun {
    const char *base;
    size_t bstride;
    const int32_t *ids;
    int bt, n;
};
static const int32_t zero_id = 0;

#define KVH_DOT 7 /* heads sharing each K panel vector's load */
#define KVH_ACC 8 /* heads of one V pass (8 x 2 or 7 x 4 vectors in registers) */

/* One dimension e of a K panel into chain cr of every head. */
#define KVT_STEP(cr, e)                                                                            \
    do {                                                                                           \
        __m512 k_ = m == 0xffff ? ldkv16(kv, kt + (size_t)(e)*dim, 0)                              \
                                : ldkv(kv, kt + (size_t)(e)*dim, 0, m);                            \
        _Pragma("GCC unroll 8") for (int h = 0; h < H; h++) cr[h] =                                \
            _mm512_fmadd_ps(k_, _mm512_set1_ps(q[(size_t)h * ldq + (e)]), cr[h]);                  \
    } while (0)

/* Rows [0, 16) (lanes of mask m) of a K panel, H <= KVH_DOT heads. The head
 * loops are unrolled before GCC decides where the arrays live, so the 4 x H
 * accumulators stay in registers (not stored back on every dimension). */
AI void kvt_dot16_heads(const int kv, const char *kt, size_t dim, __mmask16 m, const float *q,
                        int ldq, const int H, int d, float *out, int ldo)
{
    __m512 c0[KVH_DOT], c1[KVH_DOT], c2[KVH_DOT], c3[KVH_DOT];
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++) c0[h] = c1[h] = c2[h] = c3[h] =
        _mm512_setzero_ps();
    int e = 0;
    for (; e + 4 <= d; e += 4) {
        KVT_STEP(c0, e);
        KVT_STEP(c1, e + 1);
        KVT_STEP(c2, e + 2);
        KVT_STEP(c3, e + 3);
    }
    if (e < d) KVT_STEP(c0, e); /* d % 4 dimensions left: chains 0, 1, 2 */
    if (e + 1 < d) KVT_STEP(c1, e + 1);
    if (e + 2 < d) KVT_STEP(c2, e + 2);
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++) _mm512_mask_storeu_ps(
        out + (size_t)h * ldo, m,
        _mm512_add_ps(_mm512_add_ps(c0[h], c1[h]), _mm512_add_ps(c2[h], c3[h])));
}

/* One case per head count 1..8 (8 also takes more), so that CALL(h) sees
 * the count as a constant and each instance keeps its accumulators in
 * registers. Shared by q.K and the V sum. */
#define HEADS_SWITCH(H, CALL)                                                                      \
    switch (H) {                                                                                   \
    case 1:                                                                                        \
        CALL(1);                                                                                   \
        break;                                                                                     \
    case 2:                                                                                        \
        CALL(2);                                                                                   \
        break;                                                                                     \
    case 3:                                                                                        \
        CALL(3);                                                                                   \
        break;                                                                                     \
    case 4:                                                                                        \
        CALL(4);                                                                                   \
        break;                                                                                     \
    case 5:                                                                                        \
        CALL(5);                                                                                   \
        break;                                                                                     \
    case 6:                                                                                        \
        CALL(6);                                                                                   \
        break;                                                                                     \
    case 7:                                                                                        \
        CALL(7);                                                                                   \
        break;                                                                                     \
    default:                                                                                       \
        CALL(8);                                                                                   \
        break;                                                                                     \
    }

/* q.K of H <= KVH_DOT heads over a run of K panels (r.bt elements a
 * dimension): out[h * ldo + p] for positions p in [0, r.n). */
AI void kvt_dot_run(const int kv, struct kvrun r, const float *q, int ldq, const int H, int d,
                    float *out, int ldo)
{
    const size_t es = kv == DTYPE_F32 ? 4 : 2, dim = (size_t)r.bt * es;
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *kt = r.base + (size_t)r.ids[i] * r.bstride;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        for (int j = 0; j < n_rows; j += 16) {
            const char *kj = kt + (size_t)j * es;
            float *oj = out + p0 + j;
            if (n_rows - j >= 16) /* a constant mask: full panels load unmasked */
                kvt_dot16_heads(kv, kj, dim, 0xffff, q, ldq, H, d, oj, ldo);
            else
                kvt_dot16_heads(kv, kj, dim, (__mmask16)((1u << (n_rows - j)) - 1), q, ldq, H, d,
                                oj, ldo);
        }
    }
}

/* One instance per head count, so that each keeps its accumulators in
 * registers; the callers never pass more than KVH_DOT heads. */
#define KVT_DOT_CALL(h) kvt_dot_run(kvt_, r, q, ldq, (h) < KVH_DOT ? (h) : KVH_DOT, d, out, ldo)

static __attribute__((noinline)) void kvt_dot_f16(struct kvrun r, const float *q, int ldq, int H,
                                                  int d, float *out, int ldo)
{
    const int kvt_ = DTYPE_F16;
    HEADS_SWITCH(H, KVT_DOT_CALL)
}

static __attribute__((noinline)) void kvt_dot_any(int kv, struct kvrun r, const float *q, int ldq,
                                                  int H, int d, float *out, int ldo)
{
    if (kv == DTYPE_F32) {
        const int kvt_ = DTYPE_F32;
        HEADS_SWITCH(H, KVT_DOT_CALL)
    } else {
        const int kvt_ = DTYPE_BF16;
        HEADS_SWITCH(H, KVT_DOT_CALL)
    }
}

/* ---- bf16 caches: two products per lane and instruction ----
 *
 * q and the weights are rounded to bf16 as they are packed (kvb_dot,
 * kvb_pack; vcvtneps2bf16 rounds as kern__round_bf16), so
 * a vdpbf16ps lane, which adds its odd (high) product and then its even
 * one, each exact, rounding after each, is two steps of an f32 fma chain.
 * The pairs are arranged so the chains are kern_kv_dot's and
 * kern_kv_accum's own:
 *
 *   q.K: dimensions e (high) and e + 4 (low) of 16 keys, one vpermt2w from
 *        two rows of the panel: chain c = e % 4 still takes c, c + 4, ... in
 *        order; the query pair is one broadcast dword.
 *   V:   rows j (high) and j + 1 (low) of 32 columns, vpunpck[lh]wd: lanes
 *        hold the columns out of order (4 of every 8 in each half), put
 *        back when the accumulators are stored. The weights are packed the
 *        same way, w[j + 1] in the low half of dword j / 2.
 *
 * A missing partner (a dimension past d, the row after the last) is a
 * zero times -0, which leaves any sum as it was. Per 2 dimensions (or rows)
 * and head this is one vdpbf16ps where the f32 path runs two fmas (and its
 * share of the conversions). */

#define KVB_MAX_D 512 /* head sizes the bf16 q.K packs on the stack */

/* word 2j: key j of the first table (dim e + 4), word 2j + 1: of the second (dim e) */
static const uint16_t kvb_kidx[32]
    __attribute__((aligned(64))) = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

#define KVB_DOT 4 /* heads of one bf16 q.K pass over a panel (4 x 4 chains in registers) */

/* acc + the pairs of k times the pair (dword) at p, broadcast. A separate
 * vpbroadcastd: vdpbf16ps with an embedded {1to16} broadcast runs slower
 * (measured on Zen 5). */
AI __m512 dpbf16_bcst(__m512 acc, __m512i k, const void *p)
{
    return _mm512_dpbf16_ps(acc, (__m512bh)k, (__m512bh)_mm512_set1_epi32(*(const int *)p));
}

/* dims e and e + 4 (zero past d, when tail) of the panel's 16 rows at kt,
 * mask m, as one vector of pairs */
#define KVB_PAIR(e, tail)                                                                          \
    ({                                                                                             \
        const char *p_ = kt + (size_t)(e)*dim;                                                     \
        __m256i a_ = m == 0xffff ? _mm256_loadu_si256((const __m256i *)p_)                         \
                                 : _mm256_maskz_loadu_epi16(m, p_);                                \
        __m256i b_ = (tail) && (e) + 4 >= d ? _mm256_setzero_si256()                               \
                     : m == 0xffff          ? _mm256_loadu_si256((const __m256i *)(p_ + 4 * dim))  \
                                            : _mm256_maskz_loadu_epi16(m, p_ + 4 * dim);                    \
        _mm512_permutex2var_epi16(_mm512_castsi256_si512(b_), kidx, _mm512_castsi256_si512(a_));   \
    })
#define KVB_STEP(cr, e, slot, tail)                                                                \
    do {                                                                                           \
        const __m512i k_ = KVB_PAIR(e, tail);                                                      \
        _Pragma("GCC unroll 4") for (int h = 0; h < H; h++) cr[h] =                                \
            dpbf16_bcst(cr[h], k_, qp + h * ldqp + (slot));                                        \
    } while (0)

/* kvt_dot16_heads over a bf16 panel for H <= KVB_DOT heads: qp holds each
 * head's query pairs (ldqp dwords a head; dword 4 g + c: dims 8 g + c high,
 * 8 g + c + 4 low). */
AI void kvb_dot16_heads(const char *kt, size_t dim, __mmask16 m, const uint32_t *qp, int ldqp,
                        const int H, int d, float *out, int ldo)
{
    const __m512i kidx = _mm512_load_si512(kvb_kidx);
    __m512 c0[KVB_DOT], c1[KVB_DOT], c2[KVB_DOT], c3[KVB_DOT];
    _Pragma("GCC unroll 4") for (int h = 0; h < H; h++) c0[h] = c1[h] = c2[h] = c3[h] =
        _mm512_setzero_ps();
    int e = 0, s = 0;
    for (; e + 8 <= d; e += 8, s += 4) {
        KVB_STEP(c0, e, s, 0);
        KVB_STEP(c1, e + 1, s + 1, 0);
        KVB_STEP(c2, e + 2, s + 2, 0);
        KVB_STEP(c3, e + 3, s + 3, 0);
    }
    if (e < d) KVB_STEP(c0, e, s, 1); /* d % 8 dimensions left */
    if (e + 1 < d) KVB_STEP(c1, e + 1, s + 1, 1);
    if (e + 2 < d) KVB_STEP(c2, e + 2, s + 2, 1);
    if (e + 3 < d) KVB_STEP(c3, e + 3, s + 3, 1);
    _Pragma("GCC unroll 4") for (int h = 0; h < H; h++) _mm512_mask_storeu_ps(
        out + (size_t)h * ldo, m,
        _mm512_add_ps(_mm512_add_ps(c0[h], c1[h]), _mm512_add_ps(c2[h], c3[h])));
}

/* The panel at kt for heads [0, H) in passes of at most KVB_DOT (the
 * panel stays in L1 between them). */
AI void kvb_dot16(const char *kt, size_t dim, __mmask16 m, const uint32_t *qp, int ldqp, int H,
                  int d, float *out, int ldo)
{
    for (int h0 = 0; h0 < H; h0 += KVB_DOT) {
        const uint32_t *qh = qp + (size_t)h0 * ldqp;
        float *oh = out + (size_t)h0 * ldo;
        switch (H - h0) {
        case 1:
            kvb_dot16_heads(kt, dim, m, qh, ldqp, 1, d, oh, ldo);
            break;
        case 2:
            kvb_dot16_heads(kt, dim, m, qh, ldqp, 2, d, oh, ldo);
            break;
        case 3:
            kvb_dot16_heads(kt, dim, m, qh, ldqp, 3, d, oh, ldo);
            break;
        default:
            kvb_dot16_heads(kt, dim, m, qh, ldqp, 4, d, oh, ldo);
            break;
        }
    }
}

/* H <= KVH_DOT heads (d <= KVB_MAX_D; q rounded to bf16 here, as
 * kern__round_bf16 does) over a run of bf16 K panels */
static __attribute__((noinline)) void kvb_dot(struct kvrun r, const float *q, int ldq, int H, int d,
                                              float *out, int ldo)
{
    uint32_t qp[KVH_DOT * KVB_MAX_D / 2];
    uint16_t qb[KVB_MAX_D + 8];
    const int ldqp = (d + 7) / 8 * 4;
    for (int h = 0; h < H; h++) {
        for (int e = 0; e < d; e += 16) {
            const __mmask16 m = d - e >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (d - e)) - 1);
            _mm256_storeu_si256(
                (__m256i *)(qb + e),
                (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, q + (size_t)h * ldq + e)));
        }
        for (int e0 = 0; e0 < d; e0 += 8)
            for (int c = 0; c < 4; c++) {
                const int e = e0 + c;
                uint32_t hi = e < d ? qb[e] : 0x8000u, lo = e + 4 < d ? qb[e + 4] : 0x8000u;
                qp[h * ldqp + e0 / 2 + c] = hi << 16 | lo;
            }
    }
    const size_t dim = (size_t)r.bt * 2;
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *kt = r.base + (size_t)r.ids[i] * r.bstride;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        for (int j = 0; j < n_rows; j += 16) {
            if (n_rows - j >= 16)
                kvb_dot16(kt + (size_t)j * 2, dim, 0xffff, qp, ldqp, H, d, out + p0 + j, ldo);
            else
                kvb_dot16(kt + (size_t)j * 2, dim, (__mmask16)((1u << (n_rows - j)) - 1), qp, ldqp,
                          H, d, out + p0 + j, ldo);
        }
    }
}

/* q.K of n_heads heads over a run of K panels. */
static void kv_dot_run(enum dtype kv, struct kvrun r, const float *q, int ldq, int n_heads, int d,
                       float *out, int ldo)
{
    /* heads in near-equal groups of at most KVH_DOT (8 heads: 4 + 4, not 7 + 1) */
    const int n_groups = (n_heads + KVH_DOT - 1) / KVH_DOT;
    for (int g = 0; g < n_groups; g++) {
        int h0 = g * n_heads / n_groups, H = (g + 1) * n_heads / n_groups - h0;
        const float *qh = q + (size_t)h0 * ldq;
        float *oh = out + (size_t)h0 * ldo;
        if (kv == DTYPE_F16)
            kvt_dot_f16(r, qh, ldq, H, d, oh, ldo);
        else if (kv == DTYPE_BF16 && d <= KVB_MAX_D)
            kvb_dot(r, qh, ldq, H, d, oh, ldo);
        else
            kvt_dot_any(kv, r, qh, ldq, H, d, oh, ldo);
    }
}

static void kv_dot_heads_avx512(enum dtype kv, const void *kt, int ld, int n_rows, const float *q,
                                int ldq, int n_heads, int d, float *out, int ldo)
{
    const struct kvrun r = {kt, 0, &zero_id, ld, n_rows};
    kv_dot_run(kv, r, q, ldq, n_heads, d, out, ldo);
}

static void kv_dot_avx512(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int d,
                          float *out)
{
    kv_dot_heads_avx512(kv, kt, ld, n_rows, q, 0, 1, d, out, 0);
}

/* Columns [e, e + 16 NV) of H heads over the run's rows (V, row stride
 * `stride`), NV x H accumulators held in registers across every block:
 * each row is converted once for all H heads. The accumulators start from
 * out (acc_out) or from zero. `full`: all 16 NV columns exist (no masks),
 * else the masks cover a last slice narrower than that (a slice past d,
 * mask 0, computes zeros never stored). Up to 7 heads take 4 vectors (64
 * columns: 28 accumulators and the row's 4 vectors fill the 32 registers,
 * and each V row is read in one pass over the run), 8 heads 2 (two passes
 * of 32 columns); the bits are the same either way. A run read in two
 * column passes costs ~25 % more when the rows come from L3 or memory. */
AI void kv_acc_heads(const int kv, struct kvrun r, size_t stride, const float *w, int ldw,
                     const int H, const int NV, int e, const int full, const __mmask16 m[4],
                     int acc_out, float *out, int ldo)
{
    __m512 o0[KVH_ACC], o1[KVH_ACC], o2[KVH_ACC - 1], o3[KVH_ACC - 1];
#define KV_ACC_COLS(F)                                                                             \
    do {                                                                                           \
        F(o0, 0);                                                                                  \
        F(o1, 1);                                                                                  \
        if (NV == 4) {                                                                             \
            F(o2, 2);                                                                              \
            F(o3, 3);                                                                              \
        }                                                                                          \
    } while (0)
#define KV_ACC_LOAD(o, c)                                                                          \
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++) o[h] =                                     \
        !acc_out ? _mm512_setzero_ps()                                                             \
        : full   ? _mm512_loadu_ps(out + (size_t)h * ldo + e + 16 * (c))                           \
                 : _mm512_maskz_loadu_ps(m[c], out + (size_t)h * ldo + e + 16 * (c))
    KV_ACC_COLS(KV_ACC_LOAD);
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *vb = r.base + (size_t)r.ids[i] * r.bstride;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        const float *wb = w + p0;
        for (int j = 0; j < n_rows; j++) {
            const char *row = vb + (size_t)j * stride;
            __m512 vc[4];
            for (int c = 0; c < NV; c++)
                vc[c] = full ? ldkv16(kv, row, e + 16 * c) : ldkv(kv, row, e + 16 * c, m[c]);
            _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
            {
                __m512 wj = _mm512_set1_ps(wb[(size_t)h * ldw + j]);
                o0[h] = _mm512_fmadd_ps(wj, vc[0], o0[h]);
                o1[h] = _mm512_fmadd_ps(wj, vc[1], o1[h]);
                if (NV == 4) {
                    o2[h] = _mm512_fmadd_ps(wj, vc[2], o2[h]);
                    o3[h] = _mm512_fmadd_ps(wj, vc[3], o3[h]);
                }
            }
        }
    }
#define KV_ACC_STORE(o, c)                                                                         \
    _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)                                            \
    {                                                                                              \
        if (full)                                                                                  \
            _mm512_storeu_ps(out + (size_t)h * ldo + e + 16 * (c), o[h]);                          \
        else                                                                                       \
            _mm512_mask_storeu_ps(out + (size_t)h * ldo + e + 16 * (c), m[c], o[h]);               \
    }
    KV_ACC_COLS(KV_ACC_STORE);
#undef KV_ACC_COLS
#undef KV_ACC_LOAD
#undef KV_ACC_STORE
}

/* The V sum for kv type kvt_ and full_ (locals of the case below): up to
 * 7 heads over 64 columns, 8 over 32. */
#define KV_ACC_CALL(h)                                                                             \
    kv_acc_heads(kvt_, r, stride, w, ldw, h, (h) <= 7 ? 4 : 2, e, full_, m, acc_out, out, ldo)
#define KVH_ACC_CASE(kvt)                                                                          \
    do {                                                                                           \
        const int kvt_ = (kvt);                                                                    \
        if (m[H <= 7 ? 3 : 1] == 0xffff) {                                                         \
            const int full_ = 1;                                                                   \
            HEADS_SWITCH(H, KV_ACC_CALL)                                                           \
        } else {                                                                                   \
            const int full_ = 0;                                                                   \
            HEADS_SWITCH(H, KV_ACC_CALL)                                                           \
        }                                                                                          \
    } while (0)

static __attribute__((noinline)) void kv_acc_f16(struct kvrun r, size_t stride, const float *w,
                                                 int ldw, int H, int e, const __mmask16 m[4],
                                                 int acc_out, float *out, int ldo)
{
    KVH_ACC_CASE(DTYPE_F16);
}

static __attribute__((noinline)) void kv_acc_any(int kv, struct kvrun r, size_t stride,
                                                 const float *w, int ldw, int H, int e,
                                                 const __mmask16 m[4], int acc_out, float *out,
                                                 int ldo)
{
    if (kv == DTYPE_F32) {
        KVH_ACC_CASE(DTYPE_F32);
    } else {
        KVH_ACC_CASE(DTYPE_BF16);
    }
}

/* Lane l of the low (high) accumulator of a 32-column slice holds column
 * 8 (l / 4) + l % 4 (+ 4): the slice's natural halves X0 (columns 0-15) and
 * X1 (16-31) from the pair and back, each one vpermt2ps. */
static const int32_t kvb_lo_idx[16]
    __attribute__((aligned(64))) = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
static const int32_t kvb_hi_idx[16]
    __attribute__((aligned(64))) = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
static const int32_t kvb_x0_idx[16]
    __attribute__((aligned(64))) = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
static const int32_t kvb_x1_idx[16]
    __attribute__((aligned(64))) = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};

/* The bf16 V sum over a run for H <= KVH_ACC heads, columns [e, e + 64)
 * (m16: which of out's 16-column groups exist; all four: `full`): weights
 * packed by kvb_pack (dword j / 2 of head h at wp + h * ldwp elements holds
 * w[j] high, w[j + 1] low). Per block and 32-column slice, the slice's
 * 2 H accumulators come into registers from acc (pair order) and go back,
 * so each V row's two cache lines are read once and no register spills.
 * The run's blocks but the last have an even number of rows. */
AI void kvb_acc_heads(struct kvrun r, size_t stride, const uint16_t *wp, int ldwp, const int H,
                      int e, const int full, const __mmask16 m16[4], int acc_out, float *out,
                      int ldo)
{
    float acc[KVH_ACC][4][16] __attribute__((aligned(64)));
    const int n_slices = full || m16[2] ? 2 : 1;
    const __m512i ilo = _mm512_load_si512(kvb_lo_idx), ihi = _mm512_load_si512(kvb_hi_idx);
    for (int h = 0; h < H; h++)
        for (int s = 0; s < n_slices; s++) {
            const float *o = out + (size_t)h * ldo + e + 32 * s;
            __m512 x0 = _mm512_setzero_ps(), x1 = x0;
            if (acc_out) {
                x0 = full ? _mm512_loadu_ps(o) : _mm512_maskz_loadu_ps(m16[2 * s], o);
                x1 = full ? _mm512_loadu_ps(o + 16) : _mm512_maskz_loadu_ps(m16[2 * s + 1], o + 16);
            }
            _mm512_store_ps(acc[h][2 * s], _mm512_permutex2var_ps(x0, ilo, x1));
            _mm512_store_ps(acc[h][2 * s + 1], _mm512_permutex2var_ps(x0, ihi, x1));
        }
    for (int p0 = 0, i = 0; p0 < r.n; p0 += r.bt, i++) {
        const char *vb = r.base + (size_t)r.ids[i] * r.bstride + 2 * (size_t)e;
        const int n_rows = r.n - p0 < r.bt ? r.n - p0 : r.bt;
        for (int s = 0; s < n_slices; s++) {
            const __mmask32 m =
                full ? ~(__mmask32)0 : (__mmask32)m16[2 * s] | (__mmask32)m16[2 * s + 1] << 16;
            __m512 lo[KVH_ACC], hi[KVH_ACC];
            _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
            {
                lo[h] = _mm512_load_ps(acc[h][2 * s]);
                hi[h] = _mm512_load_ps(acc[h][2 * s + 1]);
            }
            for (int j = 0; j < n_rows; j += 2) {
                const char *ra = vb + (size_t)j * stride + 64 * s;
                const uint16_t *wb = wp + p0 + j;
                __m512i a = full ? _mm512_loadu_si512(ra) : _mm512_maskz_loadu_epi16(m, ra);
                __m512i b = j + 1 >= n_rows ? _mm512_setzero_si512()
                            : full          ? _mm512_loadu_si512(ra + stride)
                                            : _mm512_maskz_loadu_epi16(m, ra + stride);
                const __m512i pl = _mm512_unpacklo_epi16(b, a), ph = _mm512_unpackhi_epi16(b, a);
                _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
                {
                    lo[h] = dpbf16_bcst(lo[h], pl, wb + (size_t)h * ldwp);
                    hi[h] = dpbf16_bcst(hi[h], ph, wb + (size_t)h * ldwp);
                }
            }
            _Pragma("GCC unroll 8") for (int h = 0; h < H; h++)
            {
                _mm512_store_ps(acc[h][2 * s], lo[h]);
                _mm512_store_ps(acc[h][2 * s + 1], hi[h]);
            }
        }
    }
    const __m512i ix0 = _mm512_load_si512(kvb_x0_idx), ix1 = _mm512_load_si512(kvb_x1_idx);
    for (int h = 0; h < H; h++)
        for (int s = 0; s < n_slices; s++) {
            const __m512 lo = _mm512_load_ps(acc[h][2 * s]), hi = _mm512_load_ps(acc[h][2 * s + 1]);
            float *o = out + (size_t)h * ldo + e + 32 * s;
            const __m512 x0 = _mm512_permutex2var_ps(lo, ix0, hi);
            const __m512 x1 = _mm512_permutex2var_ps(lo, ix1, hi);
            if (full) {
                _mm512_storeu_ps(o, x0);
                _mm512_storeu_ps(o + 16, x1);
            } else {
                _mm512_mask_storeu_ps(o, m16[2 * s], x0);
                _mm512_mask_storeu_ps(o + 16, m16[2 * s + 1], x1);
            }
        }
}

#define KVB_ACC_CALL(h) kvb_acc_heads(r, stride, wp, ldwp, h, e, full_, m16, acc_out, out, ldo)

static __attribute__((noinline)) void kvb_acc(struct kvrun r, size_t stride, const uint16_t *wp,
                                              int ldwp, int H, int e, int full,
                                              const __mmask16 m16[4], int acc_out, float *out,
                                              int ldo)
{
    if (full) {
        const int full_ = 1;
        HEADS_SWITCH(H, KVB_ACC_CALL)
    } else {
        const int full_ = 0;
        HEADS_SWITCH(H, KVB_ACC_CALL)
    }
}

/* Packs rows [0, n) of n_heads rows of weights (each already a bf16 value)
 * for kvb_acc: head h's at wp + h * ldwp, w[j] at element j ^ 1, and a -0
 * partner for an odd last row. ldwp >= n rounded up to even. */
static void kvb_pack(const float *w, int ldw, int n_heads, int n, uint16_t *wp, int ldwp)
{
    for (int h = 0; h < n_heads; h++) {
        const float *wh = w + (size_t)h * ldw;
        uint16_t *ph = wp + (size_t)h * ldwp;
        for (int j = 0; j < n; j += 16) {
            const int k = n - j >= 16 ? 16 : n - j;
            __m256i b = (__m256i)_mm512_cvtneps_pbh(
                _mm512_maskz_loadu_ps((__mmask16)((1u << k) - 1), wh + j));
            /* whole dwords: an odd last row's partner (a zero lane) is set below */
            _mm256_mask_storeu_epi16(ph + j, (__mmask16)((1u << ((k + 1) & ~1)) - 1),
                                     _mm256_rol_epi32(b, 16));
        }
        if (n & 1) ph[n - 1] = 0x8000; /* row n - 1's partner (low half of its dword) */
    }
}

/* The weighted V sum of n_heads heads over a run, into out (acc_out: on top
 * of what out holds; else out is overwritten). */
static void kv_acc_run(enum dtype kv, struct kvrun r, size_t stride, const float *w, int ldw,
                       int n_heads, int d, int acc_out, float *out, int ldo)
{
    if (kv == DTYPE_BF16 && (r.bt % 2 == 0 || r.n <= r.bt)) {
        const int ldwp = (r.n + 2) & ~1;
        uint16_t *wp = kern__scratch(KERN__SLOT_KVP, sizeof(uint16_t) * (size_t)ldwp * n_heads);
        kvb_pack(w, ldw, n_heads, r.n, wp, ldwp);
        const int n_groups = (n_heads + KVH_ACC - 1) / KVH_ACC;
        for (int g = 0; g < n_groups; g++) {
            int h0 = g * n_heads / n_groups, H = (g + 1) * n_heads / n_groups - h0;
            const uint16_t *wh = wp + (size_t)h0 * ldwp;
            float *oh = out + (size_t)h0 * ldo;
            for (int e = 0; e < d; e += 64) {
                __mmask16 m16[4];
                for (int c = 0; c < 4; c++) {
                    int left = d - e - 16 * c;
                    m16[c] = left <= 0    ? 0
                             : left >= 16 ? (__mmask16)0xffff
                                          : (__mmask16)((1u << left) - 1);
                }
                kvb_acc(r, stride, wh, ldwp, H, e, m16[3] == 0xffff, m16, acc_out, oh, ldo);
            }
        }
        return;
    }
    /* heads in near-equal groups of at most KVH_ACC; a group's width is 64
     * columns up to 7 heads, else 32 */
    const int n_groups = (n_heads + KVH_ACC - 1) / KVH_ACC;
    for (int g = 0; g < n_groups; g++) {
        int h0 = g * n_heads / n_groups, H = (g + 1) * n_heads / n_groups - h0;
        const int width = H <= 7 ? 64 : 32;
        const float *wh = w + (size_t)h0 * ldw;
        float *oh = out + (size_t)h0 * ldo;
        for (int e = 0; e < d; e += width) {
            __mmask16 m[4];
            for (int c = 0; c < 4; c++) {
                int left = d - e - 16 * c;
                m[c] = 16 * c >= width || left <= 0 ? 0
                       : left >= 16                 ? (__mmask16)0xffff
                                                    : (__mmask16)((1u << left) - 1);
            }
            if (kv == DTYPE_F16)
                kv_acc_f16(r, stride, wh, ldw, H, e, m, acc_out, oh, ldo);
            else
                kv_acc_any(kv, r, stride, wh, ldw, H, e, m, acc_out, oh, ldo);
        }
    }
}

static void kv_accum_heads_avx512(enum dtype kv, const void *v, size_t stride, int n_rows,
                                  const float *w, int ldw, int n_heads, int d, float *out, int ldo)
{
    const struct kvrun r = {v, 0, &zero_id, n_rows, n_rows};
    kv_acc_run(kv, r, stride, w, ldw, n_heads, d, 1, out, ldo);
}

/* kern_attend_heads in one pass per phase: q.K over every block, the
 * softmax weights, then the V sum with its accumulators in registers
 * across all the blocks (stored once, not once per block). Each step is
 * the per-block kernels' own code, so the bits are the composition's. */
static void attend_heads_avx512(enum dtype kv, const void *k, const void *v, size_t block_stride,
                                const int32_t *ids, int ld, int n, const float *q, int ldq,
                                int n_heads, int d, float scale, float *scores, int lds, float *out,
                                int ldo)
{
    const size_t es = kv == DTYPE_F32 ? 4 : 2;
    const struct kvrun rk = {k, block_stride, ids, ld, n}, rv = {v, block_stride, ids, ld, n};
    if (kv == DTYPE_BF16 && d > KVB_MAX_D) { /* the f32 path: round q here */
        float *qr = kern__scratch(KERN__SLOT_KVQ, sizeof(float) * (size_t)n_heads * d);
        for (int h = 0; h < n_heads; h++)
            for (int i = 0; i < d; i++)
                qr[(size_t)h * d + i] = kern__round_bf16(q[(size_t)h * ldq + i]);
        q = qr;
        ldq = d;
    }
    kv_dot_run(kv, rk, q, ldq, n_heads, d, scores, lds);
    float total[KERN_ATTEND_MAX_HEADS];
    for (int h = 0; h < n_heads; h++)
        total[h] = kern__softmax_exp_avx512(scores + (size_t)h * lds, n, scale);
    if (kv == DTYPE_BF16 && ld % 2 && n > ld) /* the f32 path: round the weights here */
        for (int h = 0; h < n_heads; h++)
            for (int j = 0; j < n; j++)
                scores[(size_t)h * lds + j] = kern__round_bf16(scores[(size_t)h * lds + j]);
    kv_acc_run(kv, rv, (size_t)d * es, scores, lds, n_heads, d, 0, out, ldo);
    for (int h = 0; h < n_heads; h++) {
        const __m512 inv = _mm512_set1_ps(1.0f / total[h]);
        float *oh = out + (size_t)h * ldo;
        for (int i = 0; i < d; i += 16) {
            __mmask16 m = d - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (d - i)) - 1);
            _mm512_mask_storeu_ps(oh + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, oh + i), inv));
        }
    }
}

/* Round to nearest even like kern__f32_to_bf16 (vcvtneps2bf16 flushes
 * subnormals, so it is not used). */
AI __m256i f32_to_bf16_16(__m512 x)
{
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), odd), 16);
    __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                              _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, isnan, nan));
}

static void kv_store_avx512(enum dtype kv, const float *x, void *y, int n)
{
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        if (kv == DTYPE_F32)
            _mm512_mask_storeu_ps((float *)y + i, m, v);
        else if (kv == DTYPE_F16)
            _mm256_mask_storeu_epi16(
                (uint16_t *)y + i, m,
                _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        else
            _mm256_mask_storeu_epi16((uint16_t *)y + i, m, f32_to_bf16_16(v));
    }
}

static float dot_f32_avx512(const float *a, const float *b, int n)
{
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        acc =
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
    }
    return hsum16(acc);
}

static float sum_sq_f32_avx512(const float *x, int n)
{
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    return hsum16(acc);
}

const struct kern__ops kern__ops_avx512 = {
    .matmul = matmul_avx512,
    .matmul_packed = kern__matmul_packed_avx512, /* packed_avx512.c */
    .packed = KERN__BIT(DTYPE_Q8_0) | KERN__BIT(DTYPE_Q4_0) | KERN__BIT(DTYPE_Q4_K) |
              KERN__BIT(DTYPE_Q6_K),
    .kv_dot = kv_dot_avx512,
    .kv_accum = kv_accum_avx512,
    .kv_dot_heads = kv_dot_heads_avx512,
    .kv_accum_heads = kv_accum_heads_avx512,
    .attend_heads = attend_heads_avx512,
    .kv_store = kv_store_avx512,
    .dot_f32 = dot_f32_avx512,
    .sum_sq_f32 = sum_sq_f32_avx512,
};
