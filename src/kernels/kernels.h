/*
 * kernels.h - numeric kernels: weight formats, dot products, matmul, and the
 * few vector ops attention needs. One scalar reference implementation
 * (kernels_ref.c) defines every result; AVX2 and AVX-512 files override the
 * hot ones, chosen once at start-up from CPUID (kern_init). INFERD_ISA=scalar|
 * avx2|avxvnni|avx512 in the environment forces a level; naming one the CPU
 * lacks is an error the program reports at start-up (kern_isa_env_error).
 *
 * Block layouts are bit-compatible with GGUF (see quants.h).
 *
 * Activations: a matmul with weights of type wt first converts each input row
 * to kern_act_type(wt) (q8_0 for q8_0/q4_0, q8_K for q4_K/q5_K/q6_K, f32 for
 * f32/f16, bf16 for bf16) with kern_quantize_act. This is per token and
 * deterministic.
 *
 * INVARIANCE CONTRACT (the engine's bit-exactness rests on it): for a given
 * ISA level, every output element y[t][r] of kern_matmul is a fixed function
 * of weight row r and activation row t alone: bitwise identical whatever
 * n_tok, the row range [r0, r1), the position of t in the batch, and whatever
 * tiling the kernel uses inside. Tiled micro-kernels must therefore accumulate
 * each element in exactly the same order and with the same instructions as
 * the single-row path. The same holds for kern_kv_dot and kern_kv_accum per
 * output element (kern_kv_dot: whatever the row's column in the panel, the
 * number of rows or heads in the call).
 *
 * Results differ between ISA levels only by reduction order (tests bound it).
 * Thread safety: all functions are pure over their arguments.
 */
#ifndef INFERD_KERNELS_H
#define INFERD_KERNELS_H

#include "base/dtype.h"

#include <stddef.h>
#include <stdint.h>

/* Levels in increasing order: each needs what the one below needs.
 *   avx2     AVX2 + FMA + F16C (Haswell and later, AMD Zen 1-3)
 *   avxvnni  avx2 + AVX-VNNI: 256-bit vpdpbusd (Alder Lake and later parts
 *            without AVX-512, Zen 5 ...)
 *   avx512   AVX-512 F/BW/VL/DQ + VNNI + BF16 (Sapphire Rapids, Zen 4/5) */
enum kern_isa { KERN_ISA_SCALAR, KERN_ISA_AVX2, KERN_ISA_AVXVNNI, KERN_ISA_AVX512, KERN_ISA_COUNT };

/* Detects the CPU and selects the level; idempotent, thread safe after the
 * first call returns (call it at start-up). */
void kern_init(void);
enum kern_isa kern_isa(void);
const char *kern_isa_name(enum kern_isa isa);
/* Highest level this CPU supports. */
enum kern_isa kern_isa_max(void);
/* Forces a level (tests, benchmarks); returns 0 or -ENOTSUP if the CPU lacks it. */
int kern_set_isa(enum kern_isa isa);
/* NULL, or why INFERD_ISA could not be honoured ("INFERD_ISA='avx512': this
 * CPU supports scalar, avx2"): the level then stays the CPU's highest, and a
 * program should report the message and stop rather than measure or serve
 * on a level nobody asked for. */
const char *kern_isa_env_error(void);
/* Parses a level name (case-insensitive); -1 if it names none. */
int kern_isa_parse(const char *name);

/* ---- scalar conversions (exact IEEE; SIMD conversions give the same bits) ---- */
float kern_f16_to_f32(uint16_t h);
uint16_t kern_f32_to_f16(float f); /* round to nearest even */
float kern_bf16_to_f32(uint16_t h);
uint16_t kern_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* ---- weight formats ---- */
/* Reference quantization of one row of n floats into type t (any weight
 * type, incl. f32/f16/bf16). n must be a multiple of the block size. Used by
 * the model maker; matches the GGUF reference quantizers' block layout. */
void kern_quantize_row(enum dtype t, const float *x, void *y, int64_t n);
void kern_dequantize_row(enum dtype t, const void *x, float *y, int64_t n);

/* ---- matmul ---- */
enum dtype kern_act_type(enum dtype wt);
size_t kern_act_row_size(enum dtype wt, int k);
void kern_quantize_act(enum dtype wt, const float *x, void *xq, int k);

/* y[t * ldy + r] = dot(W row r, activation row t) for r in [r0, r1),
 * t in [0, n_tok). W row r starts at (const char *)W + r * w_row_bytes;
 * activation row t at (const char *)xq + t * x_row_bytes. k is the row
 * length (multiple of the weight block size). See the invariance contract. */
void kern_matmul(enum dtype wt, const void *W, size_t w_row_bytes, int k, int r0, int r1,
                 const void *xq, size_t x_row_bytes, int n_tok, float *y, int ldy);

/* ---- packed weights (built once, at model load) ----
 * A layout of the same weights in which a matmul streams one contiguous
 * range per 16-row panel, with no per-call repacking (quants.h describes
 * each: q8_0, q4_0, q4_K, q5_K, q6_K). Results are bitwise those of kern_matmul on
 * the GGUF rows, at every ISA level (the arithmetic is the same; only where
 * the bytes sit changes). The layouts do not depend on the level: a matrix
 * packed at one level runs at any other, through the scalar reference where
 * a level has no packed kernel for the type (correct, not fast).
 * kern_pack_size is 0 where the current level has no packed kernel for the
 * type: callers then keep the GGUF rows. */
size_t kern_pack_size(enum dtype wt, int rows, int k);
/* Bytes of the packed layout of a (rows, k) matrix of type wt whatever the
 * level; 0 if the type has no packed layout (or k is not a whole number of
 * its blocks). */
size_t kern_packed_bytes(enum dtype wt, int rows, int k);
/* Packs rows [r0, r1) of W (r0 a multiple of 16; r1 <= rows, a multiple of
 * 16 or rows) into P, which holds kern_packed_bytes(wt, rows, k) bytes and
 * is 64-byte aligned. Disjoint row ranges may be packed by different threads. */
void kern_pack(enum dtype wt, const void *W, size_t w_row_bytes, int k, int rows, int r0, int r1,
               void *P);
/* The inverse: rows [r0, r1) of the packed P back as GGUF rows (row r at
 * (char *)W + (r - r0) * w_row_bytes), byte for byte what was packed. */
void kern_unpack(enum dtype wt, const void *P, int rows, int k, int r0, int r1, void *W,
                 size_t w_row_bytes);
/* Side data a packed matmul reads next to each activation row, computed once
 * per row (not once per matmul call): for q8_0 activations (q8_0 and q4_0
 * weights), per 32-block the f32 scale and -128 * the sum of the quants
 * (struct kern_q8_side; q4_0 kernels use bias / 16 = -8 * the sum, exact).
 * q8_K activations (the K-quants) carry their sums in the block already and
 * need none: kern_act_side_bytes is 0 for them. */
struct kern_q8_side {
    float d;      /* the block's scale as f32 */
    int32_t bias; /* -128 * sum of its quants */
};
size_t kern_act_side_bytes(enum dtype wt, int k);
void kern_act_side(enum dtype wt, const void *xq, int k, void *side);
/* kern_matmul over packed weights of a (rows, k) matrix; r0 must be a
 * multiple of 16. Activation row t's side data (kern_act_side) is at
 * (const char *)xs + t * xs_row_bytes (xs may be NULL where the side data
 * has no bytes). Same contract and same bits as kern_matmul. Up to
 * KERN_PACKED_ONE_PASS tokens, a call reads each weight byte once (one pass
 * for all the tokens), so it costs about what one token costs while memory
 * bound; row ranges of a multiple of 32 rows suit it best. */
#define KERN_PACKED_ONE_PASS 16
void kern_matmul_packed(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                        const void *xq, size_t x_row_bytes, const void *xs, size_t xs_row_bytes,
                        int n_tok, float *y, int ldy);

/* ---- attention over a KV cache block (kv: f32, f16 or bf16) ----
 *
 * Keys are kept by dimension ("K panel"): within a block, the key of row j
 * (a position) at dimension e is element e * ld + j, so the same dimension
 * of consecutive rows is one vector and a dot product needs no horizontal
 * reduction. Values stay row-major (row j's d elements contiguous), which is
 * what the weighted sum wants.
 *
 * Over a bf16 cache every query element and every attention weight (w
 * below, and the softmax weights of kern_attend_heads) is first rounded to
 * bf16 (nearest, ties to even; a subnormal to a zero of its sign), as
 * attention kernels over bf16 caches do: each product is then of two bf16
 * values, exact in f32, and the AVX-512 level computes two of them per lane
 * and instruction (vdpbf16ps) with the bits of the f32 fma chains below.
 * The levels agree bitwise unless a cached K or V element is subnormal
 * (vdpbf16ps reads it as zero) or a partial sum is (it flushes it).
 *
 * out[j] = dot(K row j, q) for j in [0, n_rows), n_rows <= ld; K row j is
 * column j of the panel kt (element size of kv; ld elements a dimension).
 * Four chains: chain c = fma over dimensions c, c + 4, c + 8, ... in order;
 * out[j] = (c0 + c1) + (c2 + c3). */
void kern_kv_dot(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int d,
                 float *out);
/* out[i] += w[j] * V[j][i] for j = 0, 1, ..., n_rows - 1 in that order. */
void kern_kv_accum(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w, int d,
                   float *out);
/* Several query heads over the same K panel (grouped-query attention):
 * out[h * ldo + j] = dot(K row j, q + h * ldq) for h in [0, n_heads), each
 * element bitwise what kern_kv_dot gives; K is read once for all heads. */
void kern_kv_dot_heads(enum dtype kv, const void *kt, int ld, int n_rows, const float *q, int ldq,
                       int n_heads, int d, float *out, int ldo);
/* out[h * ldo + i] += w[h * ldw + j] * V[j][i] for each head h, j in order:
 * each element bitwise what kern_kv_accum gives; V is read once. */
void kern_kv_accum_heads(enum dtype kv, const void *v, size_t stride, int n_rows, const float *w,
                         int ldw, int n_heads, int d, float *out, int ldo);
/* One query token's attention for n_heads heads that share one KV head,
 * over n cached positions kept in blocks of ld positions: block i's K panel
 * (as above, ld elements a dimension) at k + ids[i] * block_stride, its V
 * rows (d elements each, row-major) at v + ids[i] * block_stride. For head
 * h (query q + h * ldq):
 *   out[h * ldo + i] = sum_j w_j V[j][i] / sum_j w_j,
 *   w_j = exp(scale * q.K_j - max_j' scale * q.K_j').
 * Bitwise what this composition gives: kern_kv_dot_heads per block into
 * scores (n_heads rows of lds >= n floats, scratch), kern_softmax_exp per
 * head, kern_kv_accum_heads per block into zeroed out, then each head's row
 * times 1.0f / its sum. n_heads <= KERN_ATTEND_MAX_HEADS. */
#define KERN_ATTEND_MAX_HEADS 64
void kern_attend_heads(enum dtype kv, const void *k, const void *v, size_t block_stride,
                       const int32_t *ids, int ld, int n, const float *q, int ldq, int n_heads,
                       int d, float scale, float *scores, int lds, float *out, int ldo);
/* Stores one key (n floats) as column j of a K panel of ld elements a
 * dimension: element e goes to e * ld + j, converted as kern_kv_store. */
void kern_kv_store_col(enum dtype kv, const float *x, void *kt, int ld, int j, int n);
/* Stores n floats into the KV format. */
void kern_kv_store(enum dtype kv, const float *x, void *y, int n);

/* ---- small fixed-order reductions ---- */
float kern_dot_f32(const float *a, const float *b, int n);
float kern_sum_sq_f32(const float *x, int n);

#endif
