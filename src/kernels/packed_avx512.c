/*
 * packed_avx512.c - kern_matmul_packed at the AVX-512 level: the packed x16
 * panels of quants.h (q8_0, q4_0, q4_K, q6_K weights, packed once at load)
 * against up to 16 tokens in one pass.
 *
 * Rows in lanes: a zmm holds one int32 lane per weight row of a 16-row
 * panel, and a 64-byte group of the panel is dword g of all 16 rows, so one
 * vpdpbusd against token t's dword g (broadcast) adds four products to each
 * row's lane. No transpose, no shuffle tree: the layout is built for it.
 *
 *   for block b (32 elements, or a 256-element super-block):
 *     decode the block's weights once: 8 zmm per panel at a time (registers),
 *       the super-block's scales and mins with rows in lanes (L1)
 *     for token t (all T of the pass, accumulators in L1):
 *       exact block integer per row (vpdpbusd, then the sub-block scales)
 *       acc[t] = the canonical float chain (kernels_impl.h)
 *
 * Each weight byte is therefore read from memory once per call whatever T
 * (up to KERN_PACKED_ONE_PASS tokens), and a decode step of 16 tokens
 * streams the same bytes as a step of one. More tokens (prefill) go in
 * token blocks whose activations stay in L2, one pass per group of at most
 * 16 tokens over each pair of panels (which stays in L2 after the first).
 *
 * The integers, per type (q the unsigned quants as stored, x the token's
 * int8 quants; every step exact in int32, so any order gives the same):
 *
 *   q8_0  isum = -128 sum x + sum (q + 128) x      (stored +128: unsigned)
 *   q4_0  isum = -8 sum x + sum q x                (side bias / 16)
 *   q4_K  A = sum_j sc_j I_j, I_j = sum over sub-block j (32) of q x
 *         B = sum_j m_j (bsums[2j] + bsums[2j + 1])
 *   q6_K  A = sum_j sc_j (I_j - 32 bsums_j), sub-blocks j of 16
 *
 * vpdpbusd multiplies unsigned by signed bytes, which the stored quants and
 * the activations are. sc_j I_j is vpmulld against the row's scale (6-bit
 * unsigned for q4_K, int8 for q6_K): I_j reaches 17 bits, so no 16-bit
 * multiply (vpmaddwd) can take it whole, and one vpmulld per sub-block and
 * token costs less than splitting I_j into halves that would fit. The
 * activation-only terms come from a per-call prep of each token's block
 * sums: q4_K's B takes four vpdpwssd per token against (m_2i, m_2i+1) word
 * pairs and the pairs of sub-block sums; q6_K's -32 bsums_j seeds sub-block
 * j's vpdpbusd chain.
 *
 * Then the canonical chains, lane per row (kernels_impl.h):
 *   q8_0, q4_0, q6_K  acc = fma((float)isum, dw * dx, acc)
 *   q4_K              acc = fma((float)A, d * dx, acc); acc = fma((float)-B, dmin * dx, acc)
 * The integers are exact and the float chain runs in block order per
 * element, so the bits do not depend on T, the panels per pass, the row
 * range or the token grouping: they are kern_matmul's.
 *
 * Prefetch: the rows of a panel pair are one contiguous range, streamed
 * front to back; a near prefetch (PK_PF ahead, non-temporal: each weight
 * byte is used in one block and never again, and should not push the
 * tokens' activations out of L1) and, on a one-pass call (up to 16
 * tokens), a far one into L2 (PK_FAR ahead, on past the call's rows: a
 * decode thread's next piece of rows follows its current one). Over
 * prefill's token groups, which reread each panel pair from L2, the far
 * prefetch costs more than it brings. The measurements behind the distances
 * are in docs/benchmarks.md.
 *
 * Thread safety: pure; per-thread scratch (the K-quant prep) from
 * kern__scratch.
 */
#include "base/check.h"
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

#define PANEL       Q8X16_ROWS           /* rows per panel: one int32 / f32 lane each */
#define PK_GEMV_MAX KERN_PACKED_ONE_PASS /* token counts up to this take one pass */
#define PK_PF       2048                 /* near prefetch distance along a panel, bytes */
#define PK_FAR      (48 << 10)           /* far prefetch distance into L2, bytes */
#define L2_PK       (512 * 1024)         /* activation bytes a token block may keep */

_Static_assert(PK_GEMV_MAX == 16, "one kernel instance per token count below");

/* One call's packed matrix. */
struct pkq {
    const char *P;   /* packed matrix */
    size_t pb;       /* bytes per panel */
    int nb;          /* blocks (32-element) or super-blocks (256) per row */
    int r1;          /* one past the last row to store */
    const char *end; /* one past the matrix's last panel */
    bool far;        /* one pass over the rows: prefetch far ahead too (PK_FAR) */
};

/* The tokens of one pass: activation rows and their side data at fixed
 * strides, as the engine lays them out. */
struct pkx {
    const char *x;  /* token 0's activation row (q8_0 or q8_K blocks) */
    size_t xrb;     /* bytes between activation rows */
    const char *xs; /* token 0's side data: the caller's struct kern_q8_side
                     * per block (q8_0, q4_0), this call's prep (q4_K, q6_K) */
    size_t xsrb;    /* bytes between side data rows */
    float *y;       /* token 0's output row */
    int ldy;        /* floats between output rows */
};

AI __m512i bcast32(const void *p)
{
    return _mm512_set1_epi32(kern__ld32(p));
}

/* (m ? a : b) bit by bit */
AI __m512i select_bits(__m512i m, __m512i a, __m512i b)
{
    return _mm512_ternarylogic_epi32(m, a, b, 0xca);
}

/* Prefetches lines [lo, hi) (64 bytes each) from base on. */
AI void pf_nta(const char *base, int lo, int hi)
{
    for (int i = lo; i < hi; i++)
        _mm_prefetch(base + 64 * i, _MM_HINT_NTA);
}

AI void pf_l2(const char *base, int lo, int hi)
{
    for (int i = lo; i < hi; i++)
        _mm_prefetch(base + 64 * i, _MM_HINT_T2);
}

/* Where a pass's panels are, and how far its prefetches may run. */
struct pkpanels {
    const char *p[2];    /* the panels' first bytes */
    const char *end;     /* one past the last of them */
    bool more;           /* the call's rows go on past them */
    bool far;            /* prefetch PK_FAR ahead too (a one-pass call) */
    const char *far_end; /* the far prefetch stops here */
};

AI struct pkpanels pk_panels(const struct pkq *a, int r, const int NP)
{
    struct pkpanels s;
    for (int p = 0; p < NP; p++)
        s.p[p] = a->P + (size_t)(r / PANEL + p) * a->pb;
    s.end = s.p[NP - 1] + a->pb;
    s.more = r + NP * PANEL < a->r1;
    s.far = a->far;
    s.far_end = a->end;
    return s;
}

/* The near and far prefetches of lines [lo, hi) of the block at wp. */
AI void pk_prefetch(const struct pkpanels *s, const char *wp, int lo, int hi)
{
    if (wp + PK_PF < s->end || s->more) pf_nta(wp + PK_PF, lo, hi);
    if (s->far && wp + PK_FAR < s->far_end) pf_l2(wp + PK_FAR, lo, hi);
}

/* Stores the pass's accumulators: valid rows of each panel, T tokens. */
AI void pk_store(const struct pkq *a, const struct pkx *g, int r, const __m512 acc[][2],
                 const int NP, const int T)
{
    for (int p = 0; p < NP; p++) {
        const int rp = r + PANEL * p, nr = a->r1 - rp < PANEL ? a->r1 - rp : PANEL;
        const __mmask16 m = (__mmask16)((1u << nr) - 1);
        for (int t = 0; t < T; t++)
            _mm512_mask_storeu_ps(g->y + (size_t)t * g->ldy + rp, m, acc[t][p]);
    }
}

/* ================= 32-element blocks: q8_0, q4_0 ================= */

/* NP panels (16 or 32 rows) x T tokens (1..16), Q4: q4_0 weights, else q8_0.
 *
 *   for block b:   w[p][0..7] = the block's 8 dword groups of each panel   (registers)
 *     for token t: I[p] = bias_t + sum_q vpdpbusd(w[p][q], x_t dword q)
 *                  acc[t][p] = fma((float)I[p], dw[p] * dx_t, acc[t][p])
 *
 * A q8_0 block is 8 groups of 64 bytes; a q4_0 block 4, whose low nibbles
 * are elements 4g .. 4g + 3 (x dword g) and high ones 16 + 4g .. (x dword
 * 4 + g): split, they are the same 8 vectors. Two panels stream side by
 * side (more reads in flight, which lifts even T = 1) and share each
 * activation broadcast between two vpdpbusd. The token loop stays rolled,
 * with the accumulators in L1: fully unrolled, the 16-token body ran slower
 * (its size, not the registers, bounded it). With one panel and fewer than
 * four tokens, each integer is split into two dependency chains (latency);
 * otherwise the other chains hide it. */
AI void gemv_pk_32(const struct pkq *a, const struct pkx *g, int r, const int Q4, const int NP,
                   const int T)
{
    const size_t qb = Q4 ? 256 : 512; /* quant bytes per block and panel */
    const struct pkpanels s = pk_panels(a, r, NP);
    const uint16_t *sc[2];
    for (int p = 0; p < NP; p++)
        sc[p] = (const uint16_t *)(s.p[p] + (size_t)a->nb * qb);
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[PK_GEMV_MAX][2];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            acc[t][p] = _mm512_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        __m512i w[2][8];
        __m512 dw[2];
        for (int p = 0; p < NP; p++) {
            const __m512i *wp = (const __m512i *)(s.p[p] + (size_t)b * qb);
            pk_prefetch(&s, (const char *)wp, 0, (int)(qb / 64));
            if ((b & 1) == 0)
                _mm_prefetch((const char *)(sc[p] + PANEL * b) + PK_PF / 8, _MM_HINT_T0);
            if (Q4)
                for (int q = 0; q < 4; q++) {
                    const __m512i v = _mm512_load_si512(wp + q);
                    w[p][q] = _mm512_and_si512(v, m4);
                    w[p][4 + q] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
            else
                for (int q = 0; q < 8; q++)
                    w[p][q] = _mm512_load_si512(wp + q);
            dw[p] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc[p] + PANEL * b)));
        }
        const char *xb = g->x + (size_t)b * sizeof(struct block_q8_0) + 2;
        const struct kern_q8_side *side = (const struct kern_q8_side *)g->xs + b;
#pragma GCC unroll 1
        for (int t = 0; t < T; t++) {
            const char *xt = xb + (size_t)t * g->xrb;
            const struct kern_q8_side *st =
                (const struct kern_q8_side *)((const char *)side + (size_t)t * g->xsrb);
            /* q4_0: bias / 16 = -8 * sum x, exact (bias is -128 * sum x) */
            const __m512i bias = Q4 ? _mm512_srai_epi32(_mm512_set1_epi32(st->bias), 4)
                                    : _mm512_set1_epi32(st->bias);
            __m512i I[2][2];
            for (int p = 0; p < NP; p++) {
                I[p][0] = bias;
                I[p][1] = _mm512_setzero_si512();
            }
            const int split = NP == 1 && T < 4;
            for (int q = 0; q < 8; q++) {
                const __m512i x = bcast32(xt + 4 * q);
                for (int p = 0; p < NP; p++)
                    I[p][split & q] = _mm512_dpbusd_epi32(I[p][split & q], w[p][q], x);
            }
            const __m512 dx = _mm512_set1_ps(st->d);
            for (int p = 0; p < NP; p++) {
                const __m512i i = split ? _mm512_add_epi32(I[p][0], I[p][1]) : I[p][0];
                acc[t][p] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(dw[p], dx), acc[t][p]);
            }
        }
    }
    pk_store(a, g, r, (const __m512(*)[2])acc, NP, T);
}

/* ================= q4_K ================= */

/* The super-block's 8 scales (sc[j], int32 lanes) and its mins as word
 * pairs (mp[i] = (m_2i, m_2i+1) in each lane) for the 16 rows of a panel,
 * from the three dwords of scales[12] (quants.h; q4k_scale_min's packing):
 * bytes j of lo hold sc_j / m_j for j < 4, of hi those of j + 4. */
AI void q4k_scales_x16(const char *sb, __m512i sc[8], __m512i mp[4])
{
    const __m512i v0 = _mm512_load_si512(sb + 2048), v1 = _mm512_load_si512(sb + 2048 + 64),
                  v2 = _mm512_load_si512(sb + 2048 + 128);
    const __m512i m6 = _mm512_set1_epi8(63), m4 = _mm512_set1_epi8(15),
                  m30 = _mm512_set1_epi8(0x30);
    const __m512i sc_lo = _mm512_and_si512(v0, m6), m_lo = _mm512_and_si512(v1, m6);
    const __m512i sc_hi = select_bits(m4, v2, _mm512_and_si512(_mm512_srli_epi32(v0, 2), m30));
    const __m512i m_hi =
        select_bits(m4, _mm512_srli_epi32(v2, 4), _mm512_and_si512(_mm512_srli_epi32(v1, 2), m30));
    for (int j = 0; j < 4; j++) {
        /* byte j of each dword to the dword's low byte, the rest zero */
        const __m512i ctl =
            _mm512_set4_epi32((int)(0x80808000u | (12 + j)), (int)(0x80808000u | (8 + j)),
                              (int)(0x80808000u | (4 + j)), (int)(0x80808000u | j));
        sc[j] = _mm512_shuffle_epi8(sc_lo, ctl);
        sc[4 + j] = _mm512_shuffle_epi8(sc_hi, ctl);
    }
    for (int i = 0; i < 2; i++) {
        /* bytes 2i, 2i + 1 of each dword to its two words */
        const int c = 2 * i;
        const __m512i ctl = _mm512_set4_epi32((int)(0x80008000u | (12 + c + 1) << 16 | (12 + c)),
                                              (int)(0x80008000u | (8 + c + 1) << 16 | (8 + c)),
                                              (int)(0x80008000u | (4 + c + 1) << 16 | (4 + c)),
                                              (int)(0x80008000u | (c + 1) << 16 | c));
        mp[i] = _mm512_shuffle_epi8(m_lo, ctl);
        mp[2 + i] = _mm512_shuffle_epi8(m_hi, ctl);
    }
}

/* Per call, per token and super-block: the sums of sub-blocks 0..7 as int16
 * (bsums[2j] + bsums[2j + 1], at most 4064 in magnitude), 16 bytes. */
#define Q4K_PREP 16

static void prep_q4_K(const char *xq, size_t xrb, int n_tok, int nb, char *out)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < n_tok; t++)
        for (int b = 0; b < nb; b++) {
            const struct block_q8_K *x = (const struct block_q8_K *)(xq + (size_t)t * xrb) + b;
            const __m256i s =
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)x->bsums), ones);
            const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(s, s), 0x08);
            _mm_storeu_si128((__m128i *)(out + ((size_t)t * nb + b) * Q4K_PREP),
                             _mm256_castsi256_si128(w));
        }
}

/* Sub-block j for NT tokens (1 or 2) from xt on: A[u][p] += sc[p] *
 * (the sub-block's integer of token u, panel p). Two tokens per step give
 * the core four independent vpdpbusd chains to interleave (2 panels), where
 * one token's two chains of eight left it waiting on their latency; with
 * one panel and one token (split) the chain is cut in two. */
AI void q4k_subblock(const __m512i w[2][8], const __m512i sc[2], const char *xt, size_t xrb,
                     __m512i A[][2], const int NP, const int NT, const int split)
{
    __m512i I[4][2][2]; /* [token][panel][chain] */
    for (int u = 0; u < NT; u++)
        for (int p = 0; p < NP; p++)
            I[u][p][0] = I[u][p][1] = _mm512_setzero_si512();
    for (int i = 0; i < 8; i++)
        for (int u = 0; u < NT; u++) {
            const __m512i x = bcast32(xt + (size_t)u * xrb + 4 * i);
            for (int p = 0; p < NP; p++)
                I[u][p][split & i] = _mm512_dpbusd_epi32(I[u][p][split & i], w[p][i], x);
        }
    for (int u = 0; u < NT; u++)
        for (int p = 0; p < NP; p++) {
            const __m512i i = split ? _mm512_add_epi32(I[u][p][0], I[u][p][1]) : I[u][p][0];
            A[u][p] = _mm512_add_epi32(A[u][p], _mm512_mullo_epi32(i, sc[p]));
        }
}

/* NP panels x T tokens over q4_K super-blocks (2240 bytes per panel):
 *
 *   per super-block:  sc[8], mp[4], d, dmin of each panel        (L1)
 *     for sub-block j: w[p][0..7] = nibbles of groups 8(j/2) .. + 7  (registers)
 *       for token t:  A[t][p] += vpmulld(sum_i vpdpbusd(w[p][i], x_t dword 8j + i),
 *                                        sc[j][p])            (two tokens a step)
 *     for token t:    B = sum_i vpdpwssd(mp[i][p], (S_2i, S_2i+1) of t)
 *                     acc[t][p] = fma((float)A, d * dx, acc); fma((float)-B, dmin * dx, acc)
 *
 * Group g of a super-block holds elements 64c + 4i + j of sub-block 2c in
 * its low nibbles and those of sub-block 2c + 1 in its high ones (c = g / 8,
 * i = g % 8), so sub-block j is eight vectors from one pass of nibble
 * masks over groups 8(j/2) .. + 7. */
AI void gemv_pk_q4_K(const struct pkq *a, const struct pkx *g, int r, const int NP, const int T)
{
    const struct pkpanels s = pk_panels(a, r, NP);
    const int lines = Q4KX16_SB / 64; /* 35 */
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[PK_GEMV_MAX][2];
    __m512i A[PK_GEMV_MAX][2];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            acc[t][p] = _mm512_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        __m512i sc[2][8], mp[2][4];
        __m512 d[2], dmin[2];
        for (int p = 0; p < NP; p++) {
            const char *sb = s.p[p] + (size_t)b * Q4KX16_SB;
            const char *dd = s.p[p] + (size_t)a->nb * Q4KX16_SB + 64 * (size_t)b;
            _mm_prefetch(dd + 2 * 64, _MM_HINT_T0);
            q4k_scales_x16(sb, sc[p], mp[p]);
            d[p] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dd));
            dmin[p] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(dd + 32)));
        }
        const char *xb = g->x + (size_t)b * sizeof(struct block_q8_K);
        for (int t = 0; t < T; t++)
            for (int p = 0; p < NP; p++)
                A[t][p] = _mm512_setzero_si512();
        for (int j = 0; j < 8; j++) {
            __m512i w[2][8];
            for (int p = 0; p < NP; p++) {
                const char *sb = s.p[p] + (size_t)b * Q4KX16_SB;
                pk_prefetch(&s, sb, 5 * j, 5 * j + 5 < lines ? 5 * j + 5 : lines);
                const __m512i *wp = (const __m512i *)(sb + 512 * (j / 2));
                for (int i = 0; i < 8; i++) {
                    const __m512i v = _mm512_load_si512(wp + i);
                    w[p][i] = _mm512_and_si512(j & 1 ? _mm512_srli_epi16(v, 4) : v, m4);
                }
            }
            const char *xj = xb + offsetof(struct block_q8_K, qs) + 32 * j;
            const __m512i scj[2] = {sc[0][j], sc[NP - 1][j]};
#pragma GCC unroll 1
            for (int t = 0; t + 4 <= T; t += 4)
                q4k_subblock(w, scj, xj + (size_t)t * g->xrb, g->xrb, A + t, NP, 4, 0);
            if (T % 4)
                q4k_subblock(w, scj, xj + (size_t)(T - T % 4) * g->xrb, g->xrb, A + T - T % 4, NP,
                             T % 4, NP == 1 && T < 2);
        }
#pragma GCC unroll 1
        for (int t = 0; t < T; t++) {
            const char *xt = xb + (size_t)t * g->xrb;
            const char *pt = g->xs + (size_t)t * g->xsrb + (size_t)b * Q4K_PREP;
            const __m512 dx = _mm512_set1_ps(kern__ldf(xt));
            for (int p = 0; p < NP; p++) {
                __m512i B = _mm512_setzero_si512();
                for (int i = 0; i < 4; i++)
                    B = _mm512_dpwssd_epi32(B, mp[p][i], bcast32(pt + 4 * i));
                acc[t][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[t][p]), _mm512_mul_ps(d[p], dx),
                                            acc[t][p]);
                acc[t][p] =
                    _mm512_fnmadd_ps(_mm512_cvtepi32_ps(B), _mm512_mul_ps(dmin[p], dx), acc[t][p]);
            }
        }
    }
    pk_store(a, g, r, (const __m512(*)[2])acc, NP, T);
}

/* ================= q6_K ================= */

/* Per call, per token and super-block: -32 * bsums[j] as int32, 64 bytes. */
#define Q6K_PREP 64

static void prep_q6_K(const char *xq, size_t xrb, int n_tok, int nb, char *out)
{
    for (int t = 0; t < n_tok; t++)
        for (int b = 0; b < nb; b++) {
            const struct block_q8_K *x = (const struct block_q8_K *)(xq + (size_t)t * xrb) + b;
            const __m512i s = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)x->bsums));
            _mm512_store_si512(out + ((size_t)t * nb + b) * Q6K_PREP,
                               _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 5)));
        }
}

/* NP panels x T tokens over q6_K super-blocks (3328 bytes per panel):
 *
 *   per super-block:    sc[16] (int32 lanes), d of each panel              (L1)
 *     for step u (8):   wa[p][0..3], wb[p][0..3] = quants of sub-blocks ja, jb (registers)
 *       for token t:    Ia = -32 bsums_ja + sum_i vpdpbusd(wa[p][i], x_t dword 4 ja + i)
 *                       A[t][p] += vpmulld(Ia, sc[ja]) + vpmulld(Ib, sc[jb])
 *     for token t:      acc[t][p] = fma((float)A, d * dx, acc)
 *
 * Step u = 4h + 2pp + hi of half h takes ql groups 16h + 8pp + 4hi .. + 3
 * and qh groups 8h + 4hi .. + 3: the low nibbles of ql with qh bits 2pp,
 * 2pp + 1 are part pp of the half (elements 128h + 32pp + 4i + j), the high
 * nibbles with qh bits 2pp + 4, 2pp + 5 part 2 + pp; four groups are one
 * sub-block of 16 (ja = 8h + 2pp + hi, jb = ja + 4). Masking qh (shifted by
 * 2pp) with 0x33 first leaves both parts' high bits where one select each
 * puts them. */
AI void gemv_pk_q6_K(const struct pkq *a, const struct pkx *g, int r, const int NP, const int T)
{
    const struct pkpanels s = pk_panels(a, r, NP);
    const int lines = Q6KX16_SB / 64; /* 52 */
    const __m512i m4 = _mm512_set1_epi8(15), m33 = _mm512_set1_epi8(0x33);
    __m512 acc[PK_GEMV_MAX][2];
    __m512i A[PK_GEMV_MAX][2];
    for (int t = 0; t < T; t++)
        for (int p = 0; p < NP; p++)
            acc[t][p] = _mm512_setzero_ps();
    for (int b = 0; b < a->nb; b++) {
        __m512i sc[2][16];
        __m512 d[2];
        for (int p = 0; p < NP; p++) {
            const char *sb = s.p[p] + (size_t)b * Q6KX16_SB;
            const char *dd = s.p[p] + (size_t)a->nb * Q6KX16_SB + 32 * (size_t)b;
            if ((b & 1) == 0) _mm_prefetch(dd + 4 * 32, _MM_HINT_T0);
            for (int j = 0; j < 16; j++)
                sc[p][j] =
                    _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)(sb + 3072 + 16 * j)));
            d[p] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dd));
        }
        const char *xb = g->x + (size_t)b * sizeof(struct block_q8_K);
        for (int t = 0; t < T; t++)
            for (int p = 0; p < NP; p++)
                A[t][p] = _mm512_setzero_si512();
        for (int u = 0; u < 8; u++) {
            const int h = u / 4, pp = (u / 2) & 1, hi = u & 1;
            const int ja = 8 * h + 2 * pp + hi, jb = ja + 4;
            __m512i wa[2][4], wb[2][4];
            for (int p = 0; p < NP; p++) {
                const char *sb = s.p[p] + (size_t)b * Q6KX16_SB;
                pk_prefetch(&s, sb, 7 * u, 7 * u + 7 < lines ? 7 * u + 7 : lines);
                const __m512i *ql = (const __m512i *)sb + 16 * h + 8 * pp + 4 * hi;
                const __m512i *qh = (const __m512i *)(sb + 2048) + 8 * h + 4 * hi;
                for (int i = 0; i < 4; i++) {
                    const __m512i l = _mm512_load_si512(ql + i);
                    __m512i hb = _mm512_load_si512(qh + i);
                    hb = _mm512_and_si512(pp ? _mm512_srli_epi32(hb, 2) : hb, m33);
                    wa[p][i] = select_bits(m4, l, _mm512_slli_epi32(hb, 4));
                    wb[p][i] = select_bits(m4, _mm512_srli_epi32(l, 4), hb);
                }
            }
            const char *xa = xb + offsetof(struct block_q8_K, qs) + 16 * ja;
#pragma GCC unroll 1
            for (int t = 0; t < T; t++) {
                const char *xt = xa + (size_t)t * g->xrb;
                const char *pt = g->xs + (size_t)t * g->xsrb + (size_t)b * Q6K_PREP;
                const __m512i ba = bcast32(pt + 4 * ja), bb = bcast32(pt + 4 * jb);
                __m512i Ia[2], Ib[2];
                for (int p = 0; p < NP; p++) {
                    Ia[p] = ba;
                    Ib[p] = bb;
                }
                for (int i = 0; i < 4; i++) {
                    const __m512i x0 = bcast32(xt + 4 * i), x1 = bcast32(xt + 64 + 4 * i);
                    for (int p = 0; p < NP; p++) {
                        Ia[p] = _mm512_dpbusd_epi32(Ia[p], wa[p][i], x0);
                        Ib[p] = _mm512_dpbusd_epi32(Ib[p], wb[p][i], x1);
                    }
                }
                for (int p = 0; p < NP; p++) {
                    const __m512i m = _mm512_add_epi32(_mm512_mullo_epi32(Ia[p], sc[p][ja]),
                                                       _mm512_mullo_epi32(Ib[p], sc[p][jb]));
                    A[t][p] = _mm512_add_epi32(A[t][p], m);
                }
            }
        }
#pragma GCC unroll 1
        for (int t = 0; t < T; t++) {
            const __m512 dx = _mm512_set1_ps(kern__ldf(xb + (size_t)t * g->xrb));
            for (int p = 0; p < NP; p++)
                acc[t][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A[t][p]), _mm512_mul_ps(d[p], dx),
                                            acc[t][p]);
        }
    }
    pk_store(a, g, r, (const __m512(*)[2])acc, NP, T);
}

/* ================= instances and the driver ================= */

typedef void (*gemv_pk_fn)(const struct pkq *, const struct pkx *, int);

#define DEF_PK(name, call, T)                                                                      \
    static __attribute__((noinline)) void name##_1_##T(const struct pkq *a, const struct pkx *g,   \
                                                       int r)                                      \
    {                                                                                              \
        call(1, T);                                                                                \
    }                                                                                              \
    static __attribute__((noinline)) void name##_2_##T(const struct pkq *a, const struct pkx *g,   \
                                                       int r)                                      \
    {                                                                                              \
        call(2, T);                                                                                \
    }
#define DEF_PK_ALL(name, call)                                                                     \
    DEF_PK(name, call, 1)                                                                          \
    DEF_PK(name, call, 2)                                                                          \
    DEF_PK(name, call, 3)                                                                          \
    DEF_PK(name, call, 4)                                                                          \
    DEF_PK(name, call, 5)                                                                          \
    DEF_PK(name, call, 6)                                                                          \
    DEF_PK(name, call, 7)                                                                          \
    DEF_PK(name, call, 8)                                                                          \
    DEF_PK(name, call, 9)                                                                          \
    DEF_PK(name, call, 10)                                                                         \
    DEF_PK(name, call, 11)                                                                         \
    DEF_PK(name, call, 12)                                                                         \
    DEF_PK(name, call, 13)                                                                         \
    DEF_PK(name, call, 14)                                                                         \
    DEF_PK(name, call, 15)                                                                         \
    DEF_PK(name, call, 16)
#define PK_ROW(name, NP)                                                                           \
    {                                                                                              \
        NULL, name##_##NP##_1, name##_##NP##_2, name##_##NP##_3, name##_##NP##_4, name##_##NP##_5, \
            name##_##NP##_6, name##_##NP##_7, name##_##NP##_8, name##_##NP##_9, name##_##NP##_10,  \
            name##_##NP##_11, name##_##NP##_12, name##_##NP##_13, name##_##NP##_14,                \
            name##_##NP##_15, name##_##NP##_16                                                     \
    }
#define PK_TABLE(name)                                                                             \
    static const gemv_pk_fn name##_fns[3][PK_GEMV_MAX + 1] = {                                     \
        {NULL}, PK_ROW(name, 1), PK_ROW(name, 2)};

#define CALL_Q8_0(NP, T) gemv_pk_32(a, g, r, 0, NP, T)
#define CALL_Q4_0(NP, T) gemv_pk_32(a, g, r, 1, NP, T)
#define CALL_Q4_K(NP, T) gemv_pk_q4_K(a, g, r, NP, T)
#define CALL_Q6_K(NP, T) gemv_pk_q6_K(a, g, r, NP, T)
DEF_PK_ALL(pk_q8_0, CALL_Q8_0)
DEF_PK_ALL(pk_q4_0, CALL_Q4_0)
DEF_PK_ALL(pk_q4_K, CALL_Q4_K)
DEF_PK_ALL(pk_q6_K, CALL_Q6_K)
PK_TABLE(pk_q8_0)
PK_TABLE(pk_q4_0)
PK_TABLE(pk_q4_K)
PK_TABLE(pk_q6_K)

/* One packed type: its layout's sizes and its kernels. */
struct pktype {
    int qk;                        /* elements per block */
    size_t (*panel_bytes)(int nb); /* quants.h */
    size_t x_block;                /* activation bytes a pass reads per block */
    size_t prep;                   /* per-call prep bytes per block and token, or 0 */
    void (*prep_rows)(const char *xq, size_t xrb, int n_tok, int nb, char *out);
    const gemv_pk_fn (*fns)[PK_GEMV_MAX + 1]; /* [panels][tokens] */
};

static const struct pktype pk_q8_0 = {
    QK8_0, q8x16_panel_bytes, sizeof(struct block_q8_0) + sizeof(struct kern_q8_side), 0,
    NULL,  pk_q8_0_fns};
static const struct pktype pk_q4_0 = {
    QK4_0, q4x16_panel_bytes, sizeof(struct block_q8_0) + sizeof(struct kern_q8_side), 0,
    NULL,  pk_q4_0_fns};
static const struct pktype pk_q4_K = {QK_K,     q4kx16_panel_bytes, sizeof(struct block_q8_K),
                                      Q4K_PREP, prep_q4_K,          pk_q4_K_fns};
static const struct pktype pk_q6_K = {QK_K,     q6kx16_panel_bytes, sizeof(struct block_q8_K),
                                      Q6K_PREP, prep_q6_K,          pk_q6_K_fns};

void kern__matmul_packed_avx512(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                                const void *xq, size_t xrb, const void *xs, size_t xsrb, int n_tok,
                                float *y, int ldy)
{
    const struct pktype *pt = wt == DTYPE_Q8_0   ? &pk_q8_0
                              : wt == DTYPE_Q4_0 ? &pk_q4_0
                              : wt == DTYPE_Q4_K ? &pk_q4_K
                              : wt == DTYPE_Q6_K ? &pk_q6_K
                                                 : NULL;
    if (!pt) { /* a layout this level has no kernel for */
        kern__matmul_packed_ref(wt, P, rows, k, r0, r1, xq, xrb, xs, xsrb, n_tok, y, ldy);
        return;
    }
    const int nb = k / pt->qk;
    const size_t pb = pt->panel_bytes(nb);
    const struct pkq a = {(const char *)P,
                          pb,
                          nb,
                          r1,
                          (const char *)P + (size_t)((rows + PANEL - 1) / PANEL) * pb,
                          n_tok <= PK_GEMV_MAX};
    /* Up to 16 tokens: one pass over each pair of panels. More (prefill,
     * large batches): token blocks whose activations (the bytes read, not
     * the row stride, which in the engine is much wider) stay in L2, and per
     * pair of panels (in L2 after the first pass) one pass per group of at
     * most 16 tokens, the groups as even as they go. */
    const size_t x_bytes = (size_t)nb * (pt->x_block + pt->prep);
    const int tb =
        n_tok <= PK_GEMV_MAX ? n_tok : kern__token_block(x_bytes, n_tok, PK_GEMV_MAX, L2_PK);
    char *prep = pt->prep ? kern__scratch(KERN__SLOT_PREP, (size_t)tb * nb * pt->prep) : NULL;
    const size_t srb = prep ? (size_t)nb * pt->prep : xsrb; /* side data row stride */
    for (int tb0 = 0; tb0 < n_tok; tb0 += tb) {
        const int nt = tb0 + tb < n_tok ? tb : n_tok - tb0;
        const char *x0 = (const char *)xq + (size_t)tb0 * xrb, *s0 = prep;
        if (prep)
            pt->prep_rows(x0, xrb, nt, nb, prep);
        else
            s0 = (const char *)xs + (size_t)tb0 * xsrb;
        const int ng = (nt + PK_GEMV_MAX - 1) / PK_GEMV_MAX;
        for (int r = r0; r < r1;) {
            const int np = r + PANEL < r1 ? 2 : 1;
            for (int i = 0, t0 = 0; i < ng; i++) {
                const int T = (nt - t0) / (ng - i);
                const struct pkx g = {x0 + (size_t)t0 * xrb,        xrb, s0 + (size_t)t0 * srb, srb,
                                      y + (size_t)(tb0 + t0) * ldy, ldy};
                pt->fns[np][T](&a, &g, r);
                t0 += T;
            }
            r += np * PANEL;
        }
    }
}
