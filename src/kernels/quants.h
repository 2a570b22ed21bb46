/*
 * quants.h - GGUF block layouts for the quantized weight types, and the
 * inline helpers every kernel file uses to read them.
 *
 * The structs are byte-for-byte the on-disk blocks of GGUF files written by
 * the wider GGUF ecosystem (ggml's "block_*" types); a row of n elements is
 * n / BLOCK consecutive blocks. Element order inside a block:
 *
 *   q8_0  (32)  x[i] = d * qs[i]
 *   q4_0  (32)  x[i] = d * ((qs[i] & 15) - 8),  x[i + 16] = d * ((qs[i] >> 4) - 8),  i < 16
 *   q4_K (256)  4 chunks of 64; chunk c uses qs[32c .. 32c + 31]:
 *                 x[64c + l]      = d * sc[2c]     * (qs[32c + l] & 15) - dmin * m[2c]
 *                 x[64c + 32 + l] = d * sc[2c + 1] * (qs[32c + l] >> 4) - dmin * m[2c + 1]
 *               (sc, m: 8 six-bit values packed in scales[12], see q4k_scale_min)
 *   q5_K (256)  q4_K's nibbles and scales plus a fifth bit from qh[32]; for
 *               sub-block j (elements 32j .. 32j + 31), l < 32:
 *                 q(32j + l) = (q4_K nibble of 32j + l) | ((qh[l] >> j) & 1) << 4   (0..31)
 *                 x[32j + l] = d * sc[j] * q(32j + l) - dmin * m[j]
 *   q6_K (256)  2 halves of 128; half h uses ql[64h ..], qh[32h ..], l < 32:
 *                 q(128h + l)      = (ql[64h + l]      & 15) | ((qh[32h + l] >> 0) & 3) << 4
 *                 q(128h + 32 + l) = (ql[64h + 32 + l] & 15) | ((qh[32h + l] >> 2) & 3) << 4
 *                 q(128h + 64 + l) = (ql[64h + l]      >> 4) | ((qh[32h + l] >> 4) & 3) << 4
 *                 q(128h + 96 + l) = (ql[64h + 32 + l] >> 4) | ((qh[32h + l] >> 6) & 3) << 4
 *               x[e] = d * scales[e / 16] * (q(e) - 32)
 *   q8_K (256)  activations only: x[i] = d * qs[i]; bsums[j] = sum of qs[16j .. 16j + 15]
 *
 * Scales are IEEE half precision (f16) except q8_K's f32 d. All multi-byte
 * fields are little-endian, which is what x86 loads give us directly.
 */
#ifndef INFERD_KERNELS_QUANTS_H
#define INFERD_KERNELS_QUANTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define QK4_0 32  /* elements per q4_0 block */
#define QK8_0 32  /* elements per q8_0 block */
#define QK_K  256 /* elements per K-quant super-block */

struct block_q4_0 {
    uint16_t d;     /* f16 scale */
    uint8_t qs[16]; /* nibbles: low = elements 0..15, high = 16..31, offset 8 */
};

struct block_q8_0 {
    uint16_t d;    /* f16 scale */
    int8_t qs[32]; /* signed quants, element order */
};

struct block_q4_K {
    uint16_t d;           /* f16 super-block scale of the sub-block scales */
    uint16_t dmin;        /* f16 super-block scale of the sub-block mins */
    uint8_t scales[12];   /* 8 six-bit scales and 8 six-bit mins, packed */
    uint8_t qs[QK_K / 2]; /* nibbles, see the layout above */
};

struct block_q5_K {
    uint16_t d;           /* f16 super-block scale of the sub-block scales */
    uint16_t dmin;        /* f16 super-block scale of the sub-block mins */
    uint8_t scales[12];   /* 8 six-bit scales and 8 six-bit mins, packed as in q4_K */
    uint8_t qh[QK_K / 8]; /* fifth bits: bit j of qh[l] belongs to element 32j + l */
    uint8_t qs[QK_K / 2]; /* low nibbles, laid out as q4_K's */
};

struct block_q6_K {
    uint8_t ql[QK_K / 2];     /* low 4 bits of the quants */
    uint8_t qh[QK_K / 4];     /* high 2 bits of the quants */
    int8_t scales[QK_K / 16]; /* signed 8-bit scale per 16 elements */
    uint16_t d;               /* f16 super-block scale */
};

struct block_q8_K {
    float d;                  /* f32 scale */
    int8_t qs[QK_K];          /* signed quants, element order */
    int16_t bsums[QK_K / 16]; /* sums of each 16 quants */
};

_Static_assert(sizeof(struct block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(struct block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(struct block_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(struct block_q5_K) == 176, "q5_K block size");
/* q4_K and q5_K open with the same 16 bytes (d, dmin, scales), which the
 * kernels of both read at the same offsets */
_Static_assert(offsetof(struct block_q5_K, scales) == 4 && offsetof(struct block_q4_K, scales) == 4,
               "q4_K / q5_K head");
_Static_assert(sizeof(struct block_q6_K) == 210, "q6_K block size");
_Static_assert(sizeof(struct block_q8_K) == 292, "q8_K block size");

/* PACKED LAYOUTS ("x16", kern_pack): the rows in panels of 16, built once
 * at load so that a matmul streams one contiguous range per panel and finds
 * every operand where a vector of 16 (or twice 8) row lanes wants it. Rows
 * are padded to a multiple of 16 with zero rows. The same bytes per row as
 * GGUF (plus padding to 64-byte boundaries), the same numbers: only the
 * order changes, and one layout serves every ISA level. "Dword g of row l"
 * below means bytes 4g .. 4g + 3 of that row's field; a group of 16 such
 * dwords (64 bytes, rows 0..15 in order) is one zmm, or two ymm of 8 rows.
 *
 * q8_0x16, nb = k / 32 blocks per row; panel p (rows 16p .. 16p + 15) at
 * p * q8x16_panel_bytes(nb):
 *   quants  at b * 512 + (16 g + l) * 4, g < 8: dword g of block b's qs of
 *           row l, each byte stored as qs + 128 (unsigned, for vpdpbusd)
 *   scales  at nb * 512 + (16 b + l) * 2: the f16 d of block b of row l
 *
 * q4_0x16, nb = k / 32; panel at p * q4x16_panel_bytes(nb):
 *   quants  at b * 256 + (16 g + l) * 4, g < 4: dword g of block b's qs of
 *           row l, unchanged (low nibble of byte i: element i; high: 16 + i)
 *   scales  at nb * 256 + (16 b + l) * 2: the f16 d of block b of row l
 *
 * q4_Kx16, nb = k / 256 super-blocks; panel at p * q4kx16_panel_bytes(nb);
 * super-block b's bytes at b * 2240:
 *   quants  at (16 g + l) * 4, g < 32: dword g of qs of row l, unchanged
 *           (so group g holds elements 64c + 4i + j in its low nibbles and
 *           64c + 32 + 4i + j in its high ones, c = g / 8, i = g % 8, j < 4)
 *   scales  at 2048 + (16 s + l) * 4, s < 3: dword s of scales[12] of row l
 *   and at nb * 2240 + 64 b + 2 l the f16 d of row l, at + 32 its f16 dmin.
 *
 * q5_Kx16, nb = k / 256; panel at p * q5kx16_panel_bytes(nb); super-block
 * b's bytes at b * 2752:
 *   quants  at (16 g + l) * 4, g < 32: dword g of qs of row l, as q4_Kx16
 *   qh      at 2048 + (16 g + l) * 4, g < 8: dword g of qh of row l (bit j
 *           of its byte i: the fifth bit of element 32 j + 4 g + i)
 *   scales  at 2560 + (16 s + l) * 4, s < 3: dword s of scales[12] of row l
 *   and at nb * 2752 + 64 b + 2 l the f16 d of row l, at + 32 its f16 dmin.
 *
 * q6_Kx16, nb = k / 256; panel at p * q6kx16_panel_bytes(nb); super-block
 * b's bytes at b * 3328:
 *   ql      at (16 g + l) * 4, g < 32: dword g of ql of row l
 *   qh      at 2048 + (16 g + l) * 4, g < 16: dword g of qh of row l
 *   scales  at 3072 + 16 j + l, j < 16: scales[j] of row l (int8)
 *   and at nb * 3328 + 32 b + 2 l the f16 d of row l.
 *
 * (Each trailing scale area is padded to 64 bytes.) */
#define Q8X16_ROWS 16 /* rows per x16 panel (every packed layout) */

static inline size_t quants__pad64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static inline size_t q8x16_panel_bytes(int nb)
{
    return (size_t)nb * 512 + quants__pad64((size_t)nb * 32);
}

static inline size_t q4x16_panel_bytes(int nb)
{
    return (size_t)nb * 256 + quants__pad64((size_t)nb * 32);
}

#define Q4KX16_SB 2240 /* bytes of one q4_Kx16 super-block before the d/dmin area */
#define Q5KX16_SB 2752 /* bytes of one q5_Kx16 super-block before the d/dmin area */
#define Q6KX16_SB 3328 /* bytes of one q6_Kx16 super-block before the d area */

static inline size_t q4kx16_panel_bytes(int nb)
{
    return (size_t)nb * (Q4KX16_SB + 64);
}

static inline size_t q5kx16_panel_bytes(int nb)
{
    return (size_t)nb * (Q5KX16_SB + 64);
}

static inline size_t q6kx16_panel_bytes(int nb)
{
    return (size_t)nb * Q6KX16_SB + quants__pad64((size_t)nb * 32);
}

/* Scale and min of sub-block j (0..7) of a q4_K block: the first four sit in
 * the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); the last four keep
 * their low 4 bits in bytes 8..11 and their top 2 bits in the spare top bits
 * of bytes 0..7. */
static inline void q4k_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The 8 six-bit scales (or mins) of a q4_K block as 8 bytes of a word, all
 * at once (the same packing as q4k_scale_min). */
static inline uint64_t q4k_scales8(const uint8_t *s)
{
    uint64_t lo8;
    uint32_t hi4;
    memcpy(&lo8, s, 8);
    memcpy(&hi4, s + 8, 4);
    uint32_t lo = (uint32_t)lo8 & 0x3f3f3f3fu;
    uint32_t hi = (hi4 & 0x0f0f0f0fu) | ((uint32_t)(lo8 >> 2) & 0x30303030u);
    return (uint64_t)lo | (uint64_t)hi << 32;
}

static inline uint64_t q4k_mins8(const uint8_t *s)
{
    uint64_t lo8;
    uint32_t hi4;
    memcpy(&lo8, s, 8);
    memcpy(&hi4, s + 8, 4);
    uint32_t lo = (uint32_t)(lo8 >> 32) & 0x3f3f3f3fu;
    uint32_t hi = ((hi4 >> 4) & 0x0f0f0f0fu) | ((uint32_t)(lo8 >> 34) & 0x30303030u);
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* Quant (0..63, before the -32 offset) of element e (0..255) of a q6_K block. */
static inline int q6k_quant(const struct block_q6_K *b, int e)
{
    int h = e / 128, r = e % 128, l = r % 32, part = r / 32;
    int lo = part & 1 ? b->ql[64 * h + 32 + l] : b->ql[64 * h + l];
    lo = part & 2 ? lo >> 4 : lo & 15;
    int hi = (b->qh[32 * h + l] >> (2 * part)) & 3;
    return lo | hi << 4;
}

/* Quant (0..15) of element e (0..255) of a q4_K block. */
static inline int q4k_quant(const struct block_q4_K *b, int e)
{
    int c = e / 64, r = e % 64;
    uint8_t v = b->qs[32 * c + r % 32];
    return r < 32 ? v & 15 : v >> 4;
}

/* Quant (0..31) of element e (0..255) of a q5_K block. */
static inline int q5k_quant(const struct block_q5_K *b, int e)
{
    int c = e / 64, r = e % 64;
    uint8_t v = b->qs[32 * c + r % 32];
    int lo = r < 32 ? v & 15 : v >> 4;
    return lo | ((b->qh[e % 32] >> (e / 32)) & 1) << 4;
}

/* Unaligned little-endian loads. */
static inline uint16_t kern__ld16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline int32_t kern__ld32(const void *p)
{
    int32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static inline float kern__ldf(const void *p)
{
    float v;
    memcpy(&v, p, sizeof(v));
    return v;
}

#endif
