/*
 * pack.c - the packed ("x16") weight layouts of quants.h: their sizes, the
 * load-time packing and its inverse, the activation side data the packed
 * kernels read, and the scalar reference of kern_matmul_packed.
 *
 * Packing is a pure permutation of GGUF bytes (q8_0 also flips each quant's
 * top bit), so kern_unpack gives back the rows byte for byte, and the
 * reference is simply kern_matmul's reference over unpacked panels: the
 * packed results at every level are then checked against the very numbers
 * kern_matmul defines.
 *
 *   GGUF row l, block b:  | d | dword 0 | dword 1 | ... |
 *                                 |
 *   panel, block b:       | g0: r0 r1 .. r15 | g1: r0 .. r15 | ... | scales |
 *
 * Which thread: kern_pack runs at model load, possibly on several threads
 * over disjoint panels; the rest is pure over its arguments.
 */
#include "kernels/kernels.h"

#include "base/check.h"
#include "kernels/kernels_impl.h"
#include "kernels/quants.h"

#include <string.h>

/* One layout: how a GGUF block's fields map to a panel. */
struct layout {
    int qk;         /* elements per block */
    size_t blk;     /* GGUF bytes per block */
    size_t sb;      /* panel bytes per block before the trailing scale area */
    int n_fields;   /* dword-transposed fields of a block */
    struct {        /* one field, copied as 16-row groups of dwords */
        size_t src; /* byte offset in the GGUF block */
        size_t dst; /* byte offset in the panel's block */
        int n_dw;   /* dwords */
        uint32_t x; /* xor applied to each dword (q8_0: 0x80808080) */
    } f[3];
    size_t d_src[2]; /* GGUF offsets of the f16 scales (d, dmin), or SIZE_MAX */
    size_t d_step;   /* trailing area: bytes per block (d at +0, dmin at +32) */
    int n_bytes_j;   /* byte-transposed field (q6_K scales): count, or 0 */
    size_t j_src, j_dst;
};

static bool layout_of(enum dtype wt, struct layout *L)
{
    memset(L, 0, sizeof(*L));
    L->d_src[0] = L->d_src[1] = SIZE_MAX;
    switch (wt) {
    case DTYPE_Q8_0:
        *L = (struct layout){QK8_0,
                             sizeof(struct block_q8_0),
                             512,
                             1,
                             {{offsetof(struct block_q8_0, qs), 0, 8, 0x80808080u}},
                             {offsetof(struct block_q8_0, d), SIZE_MAX},
                             32,
                             0,
                             0,
                             0};
        return true;
    case DTYPE_Q4_0:
        *L = (struct layout){QK4_0,
                             sizeof(struct block_q4_0),
                             256,
                             1,
                             {{offsetof(struct block_q4_0, qs), 0, 4, 0}},
                             {offsetof(struct block_q4_0, d), SIZE_MAX},
                             32,
                             0,
                             0,
                             0};
        return true;
    case DTYPE_Q4_K:
        *L = (struct layout){QK_K,
                             sizeof(struct block_q4_K),
                             Q4KX16_SB,
                             2,
                             {{offsetof(struct block_q4_K, qs), 0, 32, 0},
                              {offsetof(struct block_q4_K, scales), 2048, 3, 0}},
                             {offsetof(struct block_q4_K, d), offsetof(struct block_q4_K, dmin)},
                             64,
                             0,
                             0,
                             0};
        return true;
    case DTYPE_Q5_K:
        *L = (struct layout){QK_K,
                             sizeof(struct block_q5_K),
                             Q5KX16_SB,
                             3,
                             {{offsetof(struct block_q5_K, qs), 0, 32, 0},
                              {offsetof(struct block_q5_K, qh), 2048, 8, 0},
                              {offsetof(struct block_q5_K, scales), 2560, 3, 0}},
                             {offsetof(struct block_q5_K, d), offsetof(struct block_q5_K, dmin)},
                             64,
                             0,
                             0,
                             0};
        return true;
    case DTYPE_Q6_K:
        *L = (struct layout){QK_K,
                             sizeof(struct block_q6_K),
                             Q6KX16_SB,
                             2,
                             {{offsetof(struct block_q6_K, ql), 0, 32, 0},
                              {offsetof(struct block_q6_K, qh), 2048, 16, 0}},
                             {offsetof(struct block_q6_K, d), SIZE_MAX},
                             32,
                             16,
                             offsetof(struct block_q6_K, scales),
                             3072};
        return true;
    default:
        return false;
    }
}

static size_t panel_bytes(const struct layout *L, int nb)
{
    return (size_t)nb * L->sb + quants__pad64((size_t)nb * L->d_step);
}

size_t kern_packed_bytes(enum dtype wt, int rows, int k)
{
    CHECK(rows >= 0 && k > 0);
    struct layout L;
    if (!layout_of(wt, &L) || k % L.qk) return 0;
    return (size_t)((rows + Q8X16_ROWS - 1) / Q8X16_ROWS) * panel_bytes(&L, k / L.qk);
}

/* Copies one row's block b between GGUF (g) and its panel (p, lane l). */
static void move_block(const struct layout *L, uint8_t *g, uint8_t *p, int nb, int b, int l,
                       bool to_panel)
{
    uint8_t *pb = p + (size_t)b * L->sb;
    for (int i = 0; i < L->n_fields; i++)
        for (int w = 0; w < L->f[i].n_dw; w++) {
            uint8_t *src = g + L->f[i].src + 4 * (size_t)w;
            uint8_t *dst = pb + L->f[i].dst + (size_t)(16 * w + l) * 4;
            uint32_t v;
            memcpy(&v, to_panel ? src : dst, 4);
            v ^= L->f[i].x;
            memcpy(to_panel ? dst : src, &v, 4);
        }
    for (int j = 0; j < L->n_bytes_j; j++) {
        uint8_t *src = g + L->j_src + j, *dst = pb + L->j_dst + 16 * j + l;
        if (to_panel)
            *dst = *src;
        else
            *src = *dst;
    }
    uint8_t *area = p + (size_t)nb * L->sb + (size_t)b * L->d_step;
    for (int i = 0; i < 2; i++) {
        if (L->d_src[i] == SIZE_MAX) continue;
        uint8_t *src = g + L->d_src[i], *dst = area + 32 * i + 2 * l;
        memcpy(to_panel ? dst : src, to_panel ? src : dst, 2);
    }
}

void kern_pack(enum dtype wt, const void *W, size_t w_row_bytes, int k, int rows, int r0, int r1,
               void *P)
{
    struct layout L;
    CHECK(layout_of(wt, &L) && k > 0 && k % L.qk == 0);
    CHECK(0 <= r0 && r0 <= r1 && r1 <= rows && r0 % Q8X16_ROWS == 0);
    CHECK(r1 % Q8X16_ROWS == 0 || r1 == rows);
    const int nb = k / L.qk;
    const size_t pb = panel_bytes(&L, nb);
    for (int p0 = r0; p0 < r1; p0 += Q8X16_ROWS) {
        uint8_t *panel = (uint8_t *)P + (size_t)(p0 / Q8X16_ROWS) * pb;
        memset(panel, 0, pb);
        for (int l = 0; l < Q8X16_ROWS && p0 + l < rows; l++) { /* padding rows stay zero */
            uint8_t *row = (uint8_t *)W + (size_t)(p0 + l) * w_row_bytes;
            for (int b = 0; b < nb; b++)
                move_block(&L, row + (size_t)b * L.blk, panel, nb, b, l, true);
        }
    }
}

void kern_unpack(enum dtype wt, const void *P, int rows, int k, int r0, int r1, void *W,
                 size_t w_row_bytes)
{
    struct layout L;
    CHECK(layout_of(wt, &L) && k > 0 && k % L.qk == 0);
    CHECK(0 <= r0 && r0 <= r1 && r1 <= rows);
    const int nb = k / L.qk;
    const size_t pb = panel_bytes(&L, nb);
    for (int r = r0; r < r1; r++) {
        uint8_t *panel = (uint8_t *)P + (size_t)(r / Q8X16_ROWS) * pb;
        uint8_t *row = (uint8_t *)W + (size_t)(r - r0) * w_row_bytes;
        for (int b = 0; b < nb; b++)
            move_block(&L, row + (size_t)b * L.blk, panel, nb, b, r % Q8X16_ROWS, false);
    }
}

size_t kern_act_side_bytes(enum dtype wt, int k)
{
    if (kern_act_type(wt) != DTYPE_Q8_0) return 0;
    CHECK(k % QK8_0 == 0);
    return (size_t)(k / QK8_0) * sizeof(struct kern_q8_side);
}

void kern_act_side(enum dtype wt, const void *xq, int k, void *side)
{
    if (kern_act_type(wt) != DTYPE_Q8_0) return;
    CHECK(k % QK8_0 == 0);
    if (kern_isa() == KERN_ISA_AVX512) {
        kern__act_side_q8_0_avx512(xq, k, side);
        return;
    }
    const struct block_q8_0 *x = xq;
    struct kern_q8_side *s = side;
    for (int b = 0; b < k / QK8_0; b++) {
        int sum = 0;
        for (int i = 0; i < QK8_0; i++)
            sum += x[b].qs[i];
        s[b].d = kern__f16_to_f32(x[b].d);
        s[b].bias = -128 * sum;
    }
}

/* The reference reads the quantized activation rows alone (xs is the SIMD
 * levels' shortcut to the same numbers): each panel back to GGUF rows, then
 * kern_matmul's reference. */
void kern__matmul_packed_ref(enum dtype wt, const void *P, int rows, int k, int r0, int r1,
                             const void *xq, size_t x_row_bytes, const void *xs,
                             size_t xs_row_bytes, int n_tok, float *y, int ldy)
{
    (void)xs;
    (void)xs_row_bytes;
    const size_t wrb = dtype_row_size(wt, k);
    uint8_t *W = kern__scratch(KERN__SLOT_PANEL, wrb * Q8X16_ROWS);
    for (int p0 = r0; p0 < r1; p0 += Q8X16_ROWS) {
        const int p1 = p0 + Q8X16_ROWS < r1 ? p0 + Q8X16_ROWS : r1;
        kern_unpack(wt, P, rows, k, p0, p1, W, wrb);
        /* rows of W are numbered from p0: so are the output's columns */
        kern__matmul_ref(wt, W, wrb, k, 0, p1 - p0, xq, x_row_bytes, n_tok, y + p0, ldy);
    }
}
