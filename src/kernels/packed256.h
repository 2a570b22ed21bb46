/*
 * packed256.h - the packed ("x16", quants.h) quantized matmul with 256-bit
 * vectors: one body, compiled three times.
 *
 *   packed_avx2.c            PK_VNNI 0: vpmaddubsw + vpmaddwd      (avx2 level)
 *   packed_avxvnni.c         PK_VNNI 1: VEX vpdpbusd               (avxvnni level, AVX-VNNI CPUs)
 *   packed_avxvnni_avx512.c  PK_VNNI 1: EVEX vpdpbusd on ymm       (avxvnni level, AVX-512 CPUs)
 *
 * The last is the same instruction in the AVX-512 VNNI encoding: it lets
 * the avxvnni level run (and be tested) on AVX-512 machines without the VEX
 * form, such as AMD Zen 4. Each includer defines PK_VNNI, PK_SUFFIX (the
 * name of the exported function's level) and, for PK_VNNI, PK_DPBUSD.
 *
 * ROWS IN LANES. A panel is 16 rows; a ymm holds one int32 lane for each of
 * 8 of them, so a panel is two halves (rows 0..7, 8..15) and every dword
 * group of the packed layout is two ymm, one per half. Each lane runs its
 * row's canonical chain (kernels_impl.h), so no horizontal sums are needed
 * and the results are the scalar reference's bits whatever the token
 * count, row range or grouping.
 *
 * ONE PASS. Up to 16 tokens run in one pass over each panel: per block,
 * the block's 16 rows are expanded once into an L1-resident record (below),
 * then every token's integer dot products and float chains run against it,
 * so each weight byte comes from memory once per call (a decode step, or a
 * batched step of up to 16 sequences). More tokens (prefill) run in groups
 * of at most 16 over token blocks whose activations stay in L2; each panel
 * (at most ~100 KB) is then reread from L2 by every group.
 *
 * THE RECORD: per block, for both halves, the quants as unsigned bytes in
 * element order (dword e4 = elements 4 e4 .. 4 e4 + 3, which is what one
 * activation dword broadcast multiplies) and the block's scales as vectors
 * in the form the integer sequence wants:
 *
 *   q8_0  avx2: q (signed, the stored q + 128 flipped back) and |q|: the
 *               vpsignb trick, |q| * (x with q's sign), keeps vpmaddubsw's
 *               int16 pairs at most 2 * 128 * 127 = 32512
 *         vnni: the stored q + 128 as is; the integer starts at the side's
 *               -128 * sum(x)
 *   q4_0        the nibbles; the integer starts at -8 * sum(x) (side / 16)
 *   q4_K        the nibbles; 8 sub-block scales, 4 min pairs
 *   q6_K        the 6-bit quants; 16 sub-block scales, 8 scale pairs for
 *               the -32 offset through the q8_K block sums
 *
 * INTEGER BOUNDS (avx2: vpmaddubsw pairs summed in int16 before vpmaddwd):
 * nibbles (q4_0, q4_K) pair <= 2 * 15 * 127 = 3810, eight summed 30480;
 * q6_K pair <= 2 * 63 * 127 = 16002, two summed 32004; all < 32768. The
 * scale products go through vpmaddwd (int16 pairs into int32) or, with
 * vpdpbusd's int32 sums, vpmulld; every total is far inside int32.
 */
#include "base/check.h"
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

#define PK_CAT2(a, b) a##b
#define PK_CAT(a, b)  PK_CAT2(a, b)
#define PK_FN(name)   PK_CAT(name, PK_SUFFIX)

#define PANEL    16           /* rows per panel */
#define PK_T     16           /* tokens per pass: KERN_PACKED_ONE_PASS */
#define PK_PF    4096         /* prefetch distance along the panel, bytes */
#define PK_L2ACT (256 * 1024) /* activation bytes a prefill token block may keep */

_Static_assert(PK_T == KERN_PACKED_ONE_PASS, "one pass covers the contract's token count");

/* Activation side data (kernels.h struct kern_q8_side). */
struct pk_side {
    float d;
    int32_t bias;
};

/* One record, the largest type's (q6_K); 32-byte aligned vectors. */
struct pk_rec {
    __m256i q[64][2];  /* quants, element-order dwords, two halves */
    __m256i a[8][2];   /* q8_0 avx2: |q| */
    __m256i sc[16][2]; /* sub-block scales (int16 pairs, or int32 for vnni) */
    __m256i sp[8][2];  /* q4_K: min pairs; q6_K: scale pairs */
    __m256 d[2];       /* f32 d per row */
    __m256 dmin[2];    /* q4_K: f32 dmin per row */
};

/* The tokens of a pass. */
struct pk_tok {
    const char *x;  /* token 0's activation row */
    size_t xrb;     /* bytes between activation rows */
    const char *xs; /* token 0's side data, or NULL */
    size_t xsrb;    /* bytes between side rows */
    int T;          /* tokens, 1..PK_T */
};

AI __m256i ld(const void *p)
{
    return _mm256_load_si256((const __m256i *)p);
}

AI __m256i bc32(const void *p)
{
    return _mm256_set1_epi32(kern__ld32(p));
}

/* 8 f16 scales -> f32 (vcvtph2ps: kern__f16_to_f32's bits) */
AI __m256 ld_f16x8(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* int32 lanes v (0 <= v < 32768) as the int16 pair (v, v) */
AI __m256i pair16(__m256i v)
{
    return _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

AI __m256i byte_of(__m256i v, int j)
{
    return _mm256_and_si256(_mm256_srli_epi32(v, 8 * j), _mm256_set1_epi32(0xff));
}

/* acc += u . x over each dword (u unsigned, x signed bytes): the exact sum
 * of four products per lane. */
AI __m256i dot4(__m256i acc, __m256i u, __m256i x)
{
#if PK_VNNI
    return PK_DPBUSD(acc, u, x);
#else
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1)));
#endif
}

/* ---- expanding one block of a panel into the record ---- */

static void rec_q8_0(struct pk_rec *R, const char *blk, const char *dsc)
{
    for (int g = 0; g < 8; g++)
        for (int h = 0; h < 2; h++) {
            __m256i u = ld(blk + 64 * g + 32 * h);
#if PK_VNNI
            R->q[g][h] = u;
#else
            __m256i s = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80));
            R->q[g][h] = s;
            R->a[g][h] = _mm256_abs_epi8(s);
#endif
        }
    for (int h = 0; h < 2; h++)
        R->d[h] = ld_f16x8(dsc + 16 * h);
}

static void rec_q4_0(struct pk_rec *R, const char *blk, const char *dsc)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int g = 0; g < 4; g++)
        for (int h = 0; h < 2; h++) {
            __m256i w = ld(blk + 64 * g + 32 * h);
            R->q[g][h] = _mm256_and_si256(w, m4);
            R->q[4 + g][h] = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        }
    for (int h = 0; h < 2; h++)
        R->d[h] = ld_f16x8(dsc + 16 * h);
}

/* Scale (or min) j of a q4_K block from the rows' three scale dwords. */
AI __m256i q4k_six(__m256i s0, __m256i s1, __m256i s2, int j, int min)
{
    const __m256i lo = min ? s1 : s0;
    if (j < 4) return _mm256_and_si256(byte_of(lo, j), _mm256_set1_epi32(63));
    __m256i b = byte_of(s2, j - 4);
    b = min ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(15));
    return _mm256_or_si256(b, _mm256_slli_epi32(_mm256_srli_epi32(byte_of(lo, j - 4), 6), 4));
}

/* The scale part of a q4_K or q5_K record (the one-token pass reads the
 * quants in place); the scale dwords sit at sb + so. */
static void rec_q4_K_scales(struct pk_rec *R, const char *sb, size_t so, const char *dsc)
{
    for (int h = 0; h < 2; h++) {
        const char *s = sb + so + 32 * h;
        __m256i s0 = ld(s), s1 = ld(s + 64), s2 = ld(s + 128);
        for (int j = 0; j < 8; j++) {
            __m256i v = q4k_six(s0, s1, s2, j, 0);
#if PK_VNNI
            R->sc[j][h] = v;
#else
            R->sc[j][h] = pair16(v);
#endif
        }
        for (int c = 0; c < 4; c++)
            R->sp[c][h] = _mm256_or_si256(q4k_six(s0, s1, s2, 2 * c, 1),
                                          _mm256_slli_epi32(q4k_six(s0, s1, s2, 2 * c + 1, 1), 16));
        R->d[h] = ld_f16x8(dsc + 16 * h);
        R->dmin[h] = ld_f16x8(dsc + 32 + 16 * h);
    }
}

/* Bit j of each byte of the q5_K high-bit dwords qh, moved to bit 4. */
AI __m256i q5k_bit(__m256i qh, int j)
{
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1)), 4);
}

/* q4_K, or q5_K (q5: each quant's fifth bit from the qh dwords: element
 * dword 8j + g takes bit j of qh dword g). */
AI void rec_q45_K(struct pk_rec *R, const char *sb, const char *dsc, const int q5)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    /* packed group G = 8c + i: low nibbles are element dword 16c + i, high 16c + 8 + i */
    for (int G = 0; G < 32; G++)
        for (int h = 0; h < 2; h++) {
            const int c = G / 8, i = G % 8;
            __m256i w = ld(sb + 64 * G + 32 * h);
            __m256i lo = _mm256_and_si256(w, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
            if (q5) {
                __m256i qh = ld(sb + 2048 + 64 * i + 32 * h);
                lo = _mm256_or_si256(lo, q5k_bit(qh, 2 * c));
                hi = _mm256_or_si256(hi, q5k_bit(qh, 2 * c + 1));
            }
            R->q[16 * c + i][h] = lo;
            R->q[16 * c + 8 + i][h] = hi;
        }
    rec_q4_K_scales(R, sb, q5 ? 2560 : 2048, dsc);
}

static void rec_q6_K_scales(struct pk_rec *R, const char *sb, const char *dsc)
{
    for (int h = 0; h < 2; h++) {
        __m256i s[16];
        for (int j = 0; j < 16; j++)
            s[j] = _mm256_cvtepi8_epi32(
                _mm_loadl_epi64((const __m128i *)(sb + 3072 + 16 * j + 8 * h)));
        for (int j = 0; j < 16; j++) {
#if PK_VNNI
            R->sc[j][h] = s[j];
#else
            R->sc[j][h] = _mm256_or_si256(_mm256_and_si256(s[j], _mm256_set1_epi32(0xffff)),
                                          _mm256_slli_epi32(s[j], 16));
#endif
        }
        for (int m = 0; m < 8; m++)
            R->sp[m][h] = _mm256_or_si256(_mm256_and_si256(s[2 * m], _mm256_set1_epi32(0xffff)),
                                          _mm256_slli_epi32(s[2 * m + 1], 16));
        R->d[h] = ld_f16x8(dsc + 16 * h);
    }
}

static void rec_q6_K(struct pk_rec *R, const char *sb, const char *dsc)
{
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    rec_q6_K_scales(R, sb, dsc);
    for (int H = 0; H < 2; H++)
        for (int i = 0; i < 8; i++)
            for (int h = 0; h < 2; h++) {
                __m256i a = ld(sb + 64 * (16 * H + i) + 32 * h);
                __m256i b = ld(sb + 64 * (16 * H + 8 + i) + 32 * h);
                __m256i qh = ld(sb + 2048 + 64 * (8 * H + i) + 32 * h);
                __m256i *q = &R->q[32 * H + i][h];
                /* element dwords 32H + i, + 8, + 16, + 24 (two vectors per dword) */
                q[0] = _mm256_or_si256(_mm256_and_si256(a, m4),
                                       _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
                q[16] = _mm256_or_si256(_mm256_and_si256(b, m4),
                                        _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
                q[32] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                        _mm256_and_si256(qh, m30));
                q[48] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            }
}

/* ---- one token against one record: the integers, then the chains ---- */

AI void chain(__m256 *acc, __m256i isum, __m256 d, float dx)
{
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(dx)), *acc);
}

AI void tok_q8_0(const struct pk_rec *R, const char *x, const struct pk_side *s, __m256 acc[2])
{
    for (int h = 0; h < 2; h++) {
#if PK_VNNI
        __m256i I0 = _mm256_set1_epi32(s->bias), I1 = _mm256_setzero_si256();
        for (int g = 0; g < 8; g += 2) {
            I0 = dot4(I0, R->q[g][h], bc32(x + 4 * g));
            I1 = dot4(I1, R->q[g + 1][h], bc32(x + 4 * g + 4));
        }
        chain(&acc[h], _mm256_add_epi32(I0, I1), R->d[h], s->d);
#else
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i I0 = _mm256_setzero_si256(), I1 = _mm256_setzero_si256();
        for (int g = 0; g < 8; g += 2) {
            __m256i p0 =
                _mm256_maddubs_epi16(R->a[g][h], _mm256_sign_epi8(bc32(x + 4 * g), R->q[g][h]));
            __m256i p1 = _mm256_maddubs_epi16(
                R->a[g + 1][h], _mm256_sign_epi8(bc32(x + 4 * g + 4), R->q[g + 1][h]));
            I0 = _mm256_add_epi32(I0, _mm256_madd_epi16(p0, ones));
            I1 = _mm256_add_epi32(I1, _mm256_madd_epi16(p1, ones));
        }
        chain(&acc[h], _mm256_add_epi32(I0, I1), R->d[h], s->d);
#endif
    }
}

AI void tok_q4_0(const struct pk_rec *R, const char *x, const struct pk_side *s, __m256 acc[2])
{
    const __m256i bias = _mm256_set1_epi32(s->bias / 16); /* -8 * sum(x), exact */
    for (int h = 0; h < 2; h++) {
#if PK_VNNI
        __m256i I0 = bias, I1 = _mm256_setzero_si256();
        for (int g = 0; g < 8; g += 2) {
            I0 = dot4(I0, R->q[g][h], bc32(x + 4 * g));
            I1 = dot4(I1, R->q[g + 1][h], bc32(x + 4 * g + 4));
        }
        chain(&acc[h], _mm256_add_epi32(I0, I1), R->d[h], s->d);
#else
        __m256i p = _mm256_maddubs_epi16(R->q[0][h], bc32(x));
        for (int g = 1; g < 8; g++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(R->q[g][h], bc32(x + 4 * g)));
        __m256i I = _mm256_add_epi32(bias, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        chain(&acc[h], I, R->d[h], s->d);
#endif
    }
}

/* The sum of the products of n element dwords from e0 at half h: int16
 * pairs (avx2; the caller keeps the bounds) or int32 (vnni). */
AI __m256i subn(const struct pk_rec *R, const int8_t *xq, int e0, int h, const int n)
{
#if PK_VNNI
    __m256i S0 = _mm256_setzero_si256(), S1 = _mm256_setzero_si256();
    for (int q = 0; q < n; q += 2) {
        S0 = dot4(S0, R->q[e0 + q][h], bc32(xq + 4 * (e0 + q)));
        S1 = dot4(S1, R->q[e0 + q + 1][h], bc32(xq + 4 * (e0 + q + 1)));
    }
    return _mm256_add_epi32(S0, S1);
#else
    __m256i p = _mm256_maddubs_epi16(R->q[e0][h], bc32(xq + 4 * e0));
    for (int q = 1; q < n; q++)
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(R->q[e0 + q][h], bc32(xq + 4 * (e0 + q))));
    return p;
#endif
}

/* The q4_K / q5_K mins' activation terms: bsp[c] = (sum of sub-block 2c's
 * x, of 2c + 1's) as int16 pairs, against the (m_2c, m_2c+1) min pairs. */
AI void q4k_bsum_pairs(const struct block_q8_K *x, __m256i bsp[4])
{
    for (int c = 0; c < 4; c++) {
        const int16_t *b = x->bsums + 4 * c;
        int lo = b[0] + b[1], hi = b[2] + b[3];
        bsp[c] = _mm256_set1_epi32((int32_t)((uint32_t)(uint16_t)lo | (uint32_t)hi << 16));
    }
}

/* q4_K or q5_K (q5): at avx2 a q5_K sub-block's 8 dwords go as two
 * int16 sums of 4 (pairs <= 2 * 31 * 127 = 7874, four 31496). */
AI void tok_q45_K(const struct pk_rec *R, const struct block_q8_K *x, __m256 acc[2], const int q5)
{
    __m256i bsp[4];
    q4k_bsum_pairs(x, bsp);
    for (int h = 0; h < 2; h++) {
        __m256i A = _mm256_setzero_si256(), B = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
#if PK_VNNI
            A = _mm256_add_epi32(A, _mm256_mullo_epi32(subn(R, x->qs, 8 * j, h, 8), R->sc[j][h]));
#else
            if (q5) {
                A = _mm256_add_epi32(A,
                                     _mm256_madd_epi16(subn(R, x->qs, 8 * j, h, 4), R->sc[j][h]));
                A = _mm256_add_epi32(
                    A, _mm256_madd_epi16(subn(R, x->qs, 8 * j + 4, h, 4), R->sc[j][h]));
            } else {
                A = _mm256_add_epi32(A,
                                     _mm256_madd_epi16(subn(R, x->qs, 8 * j, h, 8), R->sc[j][h]));
            }
#endif
        }
        for (int c = 0; c < 4; c++)
            B = _mm256_add_epi32(B, _mm256_madd_epi16(R->sp[c][h], bsp[c]));
        chain(&acc[h], A, R->d[h], x->d);
        chain(&acc[h], _mm256_sub_epi32(_mm256_setzero_si256(), B), R->dmin[h], x->d);
    }
}

AI void tok_q6_K(const struct pk_rec *R, const struct block_q8_K *x, __m256 acc[2])
{
    __m256i bsp[8]; /* bsums 2m, 2m + 1 as int16 pairs: dword m of bsums */
    for (int m = 0; m < 8; m++)
        bsp[m] = bc32(x->bsums + 2 * m);
    for (int h = 0; h < 2; h++) {
        __m256i S = _mm256_setzero_si256(), O = _mm256_setzero_si256();
        for (int j = 0; j < 16; j++) {
            const int e0 = 4 * j;
#if PK_VNNI
            __m256i t = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++)
                t = dot4(t, R->q[e0 + q][h], bc32(x->qs + 4 * (e0 + q)));
            S = _mm256_add_epi32(S, _mm256_mullo_epi32(t, R->sc[j][h]));
#else
            __m256i p0 =
                _mm256_add_epi16(_mm256_maddubs_epi16(R->q[e0][h], bc32(x->qs + 4 * e0)),
                                 _mm256_maddubs_epi16(R->q[e0 + 1][h], bc32(x->qs + 4 * e0 + 4)));
            __m256i p1 =
                _mm256_add_epi16(_mm256_maddubs_epi16(R->q[e0 + 2][h], bc32(x->qs + 4 * e0 + 8)),
                                 _mm256_maddubs_epi16(R->q[e0 + 3][h], bc32(x->qs + 4 * e0 + 12)));
            S = _mm256_add_epi32(S, _mm256_add_epi32(_mm256_madd_epi16(p0, R->sc[j][h]),
                                                     _mm256_madd_epi16(p1, R->sc[j][h])));
#endif
        }
        for (int m = 0; m < 8; m++)
            O = _mm256_add_epi32(O, _mm256_madd_epi16(R->sp[m][h], bsp[m]));
        /* A = S - 32 * sum_j sc_j * bsums_j */
        chain(&acc[h], _mm256_sub_epi32(S, _mm256_slli_epi32(O, 5)), R->d[h], x->d);
    }
}

/* ---- the one-token pass: the quants read in place, no record ----
 * With one token the record costs more (its stores and reloads) than it
 * saves; each weight vector is expanded in registers as it is used. The
 * scale vectors still go through the record (few per block). q6_K keeps
 * the record at one token too: its expansion (three loads and a dozen
 * operations per four vectors) does not fit the registers in place, and
 * was measured slower that way. */

AI void one_q8_0(const char *blk, const char *dsc, const char *x, const struct pk_side *s,
                 __m256 acc[2])
{
    for (int h = 0; h < 2; h++) {
#if PK_VNNI
        __m256i I0 = _mm256_set1_epi32(s->bias), I1 = _mm256_setzero_si256();
        for (int g = 0; g < 8; g += 2) {
            I0 = dot4(I0, ld(blk + 64 * g + 32 * h), bc32(x + 4 * g));
            I1 = dot4(I1, ld(blk + 64 * g + 64 + 32 * h), bc32(x + 4 * g + 4));
        }
#else
        const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
        __m256i I0 = _mm256_setzero_si256(), I1 = _mm256_setzero_si256();
        for (int g = 0; g < 8; g += 2) {
            __m256i s0 = _mm256_xor_si256(ld(blk + 64 * g + 32 * h), flip);
            __m256i s1 = _mm256_xor_si256(ld(blk + 64 * g + 64 + 32 * h), flip);
            __m256i p0 =
                _mm256_maddubs_epi16(_mm256_abs_epi8(s0), _mm256_sign_epi8(bc32(x + 4 * g), s0));
            __m256i p1 = _mm256_maddubs_epi16(_mm256_abs_epi8(s1),
                                              _mm256_sign_epi8(bc32(x + 4 * g + 4), s1));
            I0 = _mm256_add_epi32(I0, _mm256_madd_epi16(p0, ones));
            I1 = _mm256_add_epi32(I1, _mm256_madd_epi16(p1, ones));
        }
#endif
        chain(&acc[h], _mm256_add_epi32(I0, I1), ld_f16x8(dsc + 16 * h), s->d);
    }
}

AI void one_q4_0(const char *blk, const char *dsc, const char *x, const struct pk_side *s,
                 __m256 acc[2])
{
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i bias = _mm256_set1_epi32(s->bias / 16); /* -8 * sum(x), exact */
    for (int h = 0; h < 2; h++) {
#if PK_VNNI
        __m256i I0 = bias, I1 = _mm256_setzero_si256();
#else
        __m256i p = _mm256_setzero_si256();
#endif
        for (int g = 0; g < 4; g++) {
            __m256i w = ld(blk + 64 * g + 32 * h);
            __m256i lo = _mm256_and_si256(w, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
#if PK_VNNI
            I0 = dot4(I0, lo, bc32(x + 4 * g));
            I1 = dot4(I1, hi, bc32(x + 16 + 4 * g));
#else
            p = _mm256_add_epi16(p,
                                 _mm256_add_epi16(_mm256_maddubs_epi16(lo, bc32(x + 4 * g)),
                                                  _mm256_maddubs_epi16(hi, bc32(x + 16 + 4 * g))));
#endif
        }
#if PK_VNNI
        __m256i I = _mm256_add_epi32(I0, I1);
#else
        __m256i I = _mm256_add_epi32(bias, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
        chain(&acc[h], I, ld_f16x8(dsc + 16 * h), s->d);
    }
}

AI __m256i scale_mul(__m256i sum, __m256i sc)
{
#if PK_VNNI
    return _mm256_mullo_epi32(sum, sc);
#else
    return _mm256_madd_epi16(sum, sc);
#endif
}

/* acc += u . x into int16 pairs (avx2: caller keeps the bounds) or int32 */
AI __m256i dot4s(__m256i acc, __m256i u, __m256i x)
{
#if PK_VNNI
    return dot4(acc, u, x);
#else
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, x));
#endif
}

AI void one_q45_K(struct pk_rec *R, const char *sb, const char *dsc, const struct block_q8_K *x,
                  __m256 acc[2], const int q5)
{
    rec_q4_K_scales(R, sb, q5 ? 2560 : 2048, dsc);
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i bsp[4];
    q4k_bsum_pairs(x, bsp);
    for (int h = 0; h < 2; h++) {
        __m256i A = _mm256_setzero_si256(), B = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            /* avx2 q5_K: the int16 sums flushed every 4 dwords (see tok_q45_K) */
            const int run = q5 && !PK_VNNI ? 4 : 8;
            for (int i0 = 0; i0 < 8; i0 += run) {
                __m256i plo = _mm256_setzero_si256(), phi = _mm256_setzero_si256();
                for (int i = i0; i < i0 + run; i++) {
                    __m256i w = ld(sb + 64 * (8 * c + i) + 32 * h);
                    __m256i lo = _mm256_and_si256(w, m4);
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
                    if (q5) {
                        __m256i qh = ld(sb + 2048 + 64 * i + 32 * h);
                        lo = _mm256_or_si256(lo, q5k_bit(qh, 2 * c));
                        hi = _mm256_or_si256(hi, q5k_bit(qh, 2 * c + 1));
                    }
                    plo = dot4s(plo, lo, bc32(x->qs + 4 * (16 * c + i)));
                    phi = dot4s(phi, hi, bc32(x->qs + 4 * (16 * c + 8 + i)));
                }
                A = _mm256_add_epi32(A, _mm256_add_epi32(scale_mul(plo, R->sc[2 * c][h]),
                                                         scale_mul(phi, R->sc[2 * c + 1][h])));
            }
            B = _mm256_add_epi32(B, _mm256_madd_epi16(R->sp[c][h], bsp[c]));
        }
        chain(&acc[h], A, R->d[h], x->d);
        chain(&acc[h], _mm256_sub_epi32(_mm256_setzero_si256(), B), R->dmin[h], x->d);
    }
}

/* ---- one pass: one panel, up to PK_T tokens ---- */

struct pk_mat {
    enum dtype wt;
    const char *P;   /* packed matrix */
    const char *end; /* one past its last panel (prefetches run on into the next panel) */
    size_t pb;       /* bytes per panel */
    size_t sb;       /* panel bytes per block before the scale area */
    size_t dstep;    /* scale-area bytes per block */
    size_t xblk;     /* activation bytes per block */
    int nb;          /* blocks per row */
    int r1;          /* one past the last row to store */
};

static void pass(const struct pk_mat *m, struct pk_rec *R, int panel, const struct pk_tok *tk,
                 float *y, int ldy)
{
    const char *pp = m->P + (size_t)panel * m->pb, *area = pp + (size_t)m->nb * m->sb;
    __m256 acc[PK_T][2];
    for (int t = 0; t < tk->T; t++)
        acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int b = 0; b < m->nb; b++) {
        const char *blk = pp + (size_t)b * m->sb, *dsc = area + (size_t)b * m->dstep;
        for (size_t o = 0; o < m->sb; o += 64)
            if (blk + PK_PF + o < m->end) _mm_prefetch(blk + PK_PF + o, _MM_HINT_T0);
        const char *xb = tk->x + (size_t)b * m->xblk;
        const char *sd = tk->xs ? tk->xs + (size_t)b * sizeof(struct pk_side) : NULL;
        if (tk->T == 1 && m->wt != DTYPE_Q6_K) {
            const struct pk_side *st = (const struct pk_side *)sd;
            switch (m->wt) {
            case DTYPE_Q8_0:
                one_q8_0(blk, dsc, xb + 2, st, acc[0]);
                break;
            case DTYPE_Q4_0:
                one_q4_0(blk, dsc, xb + 2, st, acc[0]);
                break;
            case DTYPE_Q4_K:
                one_q45_K(R, blk, dsc, (const struct block_q8_K *)xb, acc[0], 0);
                break;
            default: /* q5_K */
                one_q45_K(R, blk, dsc, (const struct block_q8_K *)xb, acc[0], 1);
                break;
            }
            continue;
        }
        switch (m->wt) {
        case DTYPE_Q8_0:
            rec_q8_0(R, blk, dsc);
            break;
        case DTYPE_Q4_0:
            rec_q4_0(R, blk, dsc);
            break;
        case DTYPE_Q4_K:
            rec_q45_K(R, blk, dsc, 0);
            break;
        case DTYPE_Q5_K:
            rec_q45_K(R, blk, dsc, 1);
            break;
        default:
            rec_q6_K(R, blk, dsc);
            break;
        }
#pragma GCC unroll 1
        for (int t = 0; t < tk->T; t++) {
            const char *xt = xb + (size_t)t * tk->xrb;
            const struct pk_side *st =
                sd ? (const struct pk_side *)(sd + (size_t)t * tk->xsrb) : NULL;
            switch (m->wt) {
            case DTYPE_Q8_0:
                tok_q8_0(R, xt + 2, st, acc[t]);
                break;
            case DTYPE_Q4_0:
                tok_q4_0(R, xt + 2, st, acc[t]);
                break;
            case DTYPE_Q4_K:
                tok_q45_K(R, (const struct block_q8_K *)xt, acc[t], 0);
                break;
            case DTYPE_Q5_K:
                tok_q45_K(R, (const struct block_q8_K *)xt, acc[t], 1);
                break;
            default:
                tok_q6_K(R, (const struct block_q8_K *)xt, acc[t]);
                break;
            }
        }
    }
    const int r = panel * PANEL, nr = m->r1 - r < PANEL ? m->r1 - r : PANEL;
    for (int t = 0; t < tk->T; t++) {
        float *yt = y + (size_t)t * ldy + r;
        if (nr == PANEL) {
            _mm256_storeu_ps(yt, acc[t][0]);
            _mm256_storeu_ps(yt + 8, acc[t][1]);
        } else {
            float v[PANEL];
            _mm256_storeu_ps(v, acc[t][0]);
            _mm256_storeu_ps(v + 8, acc[t][1]);
            memcpy(yt, v, sizeof(float) * (size_t)nr);
        }
    }
}

void PK_FN(kern__matmul_packed_)(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                                 const void *xq, size_t xrb, const void *xs, size_t xsrb, int n_tok,
                                 float *y, int ldy)
{
    struct pk_mat m = {wt, P, NULL, 0, 0, 32, 0, 0, r1};
    switch (wt) {
    case DTYPE_Q8_0:
        m.nb = k / QK8_0;
        m.sb = 512;
        m.xblk = sizeof(struct block_q8_0);
        break;
    case DTYPE_Q4_0:
        m.nb = k / QK4_0;
        m.sb = 256;
        m.xblk = sizeof(struct block_q8_0);
        break;
    case DTYPE_Q4_K:
    case DTYPE_Q5_K:
    case DTYPE_Q6_K:
        m.nb = k / QK_K;
        m.sb = wt == DTYPE_Q4_K ? Q4KX16_SB : wt == DTYPE_Q5_K ? Q5KX16_SB : Q6KX16_SB;
        m.dstep = wt == DTYPE_Q6_K ? 32 : 64; /* d, or d and dmin */
        m.xblk = sizeof(struct block_q8_K);
        break;
    default: /* a layout this level has no kernel for */
        kern__matmul_packed_ref(wt, P, rows, k, r0, r1, xq, xrb, xs, xsrb, n_tok, y, ldy);
        return;
    }
    m.pb = kern_packed_bytes(wt, PANEL, k);
    m.end = (const char *)P + (size_t)((rows + PANEL - 1) / PANEL) * m.pb;
    const bool side = kern_act_side_bytes(wt, k) > 0;
    struct pk_rec *R = kern__scratch(KERN__SLOT_PANEL, sizeof(struct pk_rec));
    /* token blocks whose activations stay in L2, then groups of at most
     * PK_T tokens, as even as they go, over each panel */
    const size_t x_bytes = (size_t)m.nb * (m.xblk + (side ? sizeof(struct pk_side) : 0));
    size_t tbz = PK_L2ACT / x_bytes;
    tbz = tbz < PK_T ? PK_T : tbz - tbz % PK_T;
    const int tb = n_tok <= PK_T || tbz >= (size_t)n_tok ? n_tok : (int)tbz;
    for (int tb0 = 0; tb0 < n_tok; tb0 += tb) {
        const int nt = tb0 + tb < n_tok ? tb : n_tok - tb0;
        const int ng = (nt + PK_T - 1) / PK_T;
        for (int p = r0 / PANEL; p * PANEL < r1; p++)
            for (int i = 0, t0 = tb0; i < ng; i++) {
                const struct pk_tok tk = {(const char *)xq + (size_t)t0 * xrb, xrb,
                                          side ? (const char *)xs + (size_t)t0 * xsrb : NULL, xsrb,
                                          (tb0 + nt - t0) / (ng - i)};
                pass(&m, R, p, &tk, y + (size_t)t0 * ldy, ldy);
                t0 += tk.T;
            }
    }
}
