/*
 * forward.c - the batched forward pass (see forward.h).
 *
 * One fwd_run = one tpool_run of fwd_worker on every thread. The worker walks
 * the ops below; a tpool_barrier separates ops whose inputs another thread
 * wrote. Per-token ops split tokens across threads, matmuls split output rows,
 * attention splits (token, head) pairs: never a reduction dimension.
 *
 *   embed -> for each layer:
 *     h = rmsnorm(x) * attn_norm            per token   } one split by token,
 *     act(h) for wq/wk/wv weight types       per token   } no barrier between
 *     q, k, v = W h                          rows
 *     bias, qk-norm, rope, store k/v in KV   per token
 *     attn = softmax(q k^T / sqrt(d)) v      (token, head)
 *     act(attn); o = Wo attn                 per token; rows
 *     x += o; h = rmsnorm(x) * ffn_norm; act(h)           per token
 *     g, u = Wgate h, Wup h                  rows
 *     g = silu(g) * u; act(g)                per token
 *     d = Wdown g                            rows
 *     x += d                                 per token
 *   out = rmsnorm(x[wanted]) * output_norm; logits = Wout out
 *
 * Shapes: T = tokens in the batch, E = n_embd, Q = n_head * head_dim,
 * KV = n_head_kv * head_dim, F = n_ff, V = n_vocab.
 */
#include "engine/forward.h"

#include "base/check.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { ACT_F32, ACT_BF16, ACT_Q8_0, ACT_Q8_K, ACT_COUNT };

/* What one split op has handed out (rows or tasks), alone on its cache
 * line: the owner of a row segment claims from it while another thread may
 * be stealing from it. */
struct op_counter {
    _Atomic int v;
    char pad[64 - sizeof(_Atomic int)];
};

struct fwd_ctx {
    const struct model *m;      /* weights, hyper-parameters */
    struct kv_pool *kv;         /* the paged cache */
    struct tpool *pool;         /* compute threads */
    int max_tokens;             /* batch capacity */
    int max_ctx;                /* longest sequence */
    float *x;                   /* (max_tokens, E) residual stream */
    float *h;                   /* (max_tokens, max(E, Q)) normed input / attention output */
    float *q;                   /* (max_tokens, Q) */
    float *k;                   /* (max_tokens, KV) */
    float *v;                   /* (max_tokens, KV) */
    float *o;                   /* (max_tokens, E) projection output */
    float *g;                   /* (max_tokens, F) gate, then silu(gate) * up */
    float *u;                   /* (max_tokens, F) up */
    float *rope;                /* (max_tokens, n_rot / 2, 2) cos, sin per token */
    float *scores;              /* (n_threads, group heads, scores_ld) attention scratch */
    int scores_ld;              /* floats per score row: max_ctx rounded up to 16 */
    uint8_t *act[ACT_COUNT];    /* (max_tokens, act row bytes of the widest input) per act type */
    size_t act_stride;          /* bytes between activation rows (any type) */
    int32_t *out_rows;          /* (max_tokens) batch index of each wanted token */
    uint64_t *by_ctx;           /* (max_tokens) batch tokens, longest context first (low half) */
    struct op_counter *op_next; /* (n_ops, n_seg) claimed rows or tasks of each split op */
    int n_ops;                  /* split ops per pass: 7 matmuls + attention a layer, output */
    int n_seg;                  /* counters per op: one per thread (row segments) */
    /* per-call state, set by fwd_run before fanning out */
    const struct fwd_batch *b; /* current batch */
    float *logits;             /* (n_out, V) */
    int n_out;                 /* wanted tokens */
};

static int act_index(enum dtype wt)
{
    switch (kern_act_type(wt)) {
    case DTYPE_F32:
        return ACT_F32;
    case DTYPE_BF16:
        return ACT_BF16;
    case DTYPE_Q8_0:
        return ACT_Q8_0;
    case DTYPE_Q8_K:
        return ACT_Q8_K;
    default:
        CHECK(!"unexpected activation type");
        return 0;
    }
}

size_t fwd_weight_bytes(const struct model *m, bool with_output)
{
    size_t n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *ts[] = {L->wq,     L->wk,   L->wv,    L->wo,
                                          L->w_gate, L->w_up, L->w_down};
        for (size_t i = 0; i < ARRAY_LEN(ts); i++)
            n += ts[i]->size;
    }
    if (with_output) n += m->output->size;
    return n;
}

int fwd_ctx_new(const struct model *m, struct kv_pool *kv, struct tpool *pool, int max_tokens,
                int max_ctx, struct fwd_ctx **out, struct err_msg *msg)
{
    const struct model_hparams *hp = &m->hp;
    if (max_tokens < 1 || max_ctx < 1)
        return err_set(msg, ERR_INVALID, "forward: max_tokens and max_ctx must be positive");
    if (kv->cfg.n_layer != hp->n_layer || kv->cfg.n_kv_head != hp->n_head_kv ||
        kv->cfg.head_dim != hp->head_dim)
        return err_set(msg, ERR_INVALID, "forward: kv cache shape does not match the model");
    struct fwd_ctx *c = xcalloc(1, sizeof(*c));
    c->m = m;
    c->kv = kv;
    c->pool = pool;
    c->max_tokens = max_tokens;
    c->max_ctx = max_ctx;
    size_t T = (size_t)max_tokens;
    int E = hp->n_embd, Q = hp->n_head * hp->head_dim, KV = hp->n_head_kv * hp->head_dim,
        F = hp->n_ff;
    int widest = MAX(MAX(E, Q), F);
    c->x = xaligned_alloc(sizeof(float) * T * (size_t)E);
    c->h = xaligned_alloc(sizeof(float) * T * (size_t)MAX(E, Q));
    c->q = xaligned_alloc(sizeof(float) * T * (size_t)Q);
    c->k = xaligned_alloc(sizeof(float) * T * (size_t)KV);
    c->v = xaligned_alloc(sizeof(float) * T * (size_t)KV);
    c->o = xaligned_alloc(sizeof(float) * T * (size_t)E);
    c->g = xaligned_alloc(sizeof(float) * T * (size_t)F);
    c->u = xaligned_alloc(sizeof(float) * T * (size_t)F);
    c->rope = xaligned_alloc(sizeof(float) * T * (size_t)hp->n_rot);
    /* one score row per head of a KV group, per thread */
    c->scores_ld = (max_ctx + 15) & ~15;
    c->scores = xaligned_alloc(sizeof(float) * (size_t)tpool_size(pool) * (size_t)c->scores_ld *
                               (size_t)(hp->n_head / hp->n_head_kv));
    /* f32 activations are the widest per element of every act type (q8_0
     * rows with their side data take 1.3 bytes an element). */
    c->act_stride = ((size_t)widest * sizeof(float) + 63) & ~(size_t)63;
    for (int i = 0; i < ACT_COUNT; i++)
        c->act[i] = xaligned_alloc(c->act_stride * T);
    c->out_rows = xmalloc(sizeof(int32_t) * T);
    c->by_ctx = xmalloc(sizeof(uint64_t) * T);
    c->n_ops = 8 * hp->n_layer + 1;
    c->n_seg = tpool_size(pool);
    size_t n_ctr = (size_t)c->n_ops * (size_t)c->n_seg;
    c->op_next = xaligned_alloc(n_ctr * sizeof(*c->op_next));
    memset(c->op_next, 0, n_ctr * sizeof(*c->op_next));
    *out = c;
    return 0;
}

void fwd_ctx_free(struct fwd_ctx *c)
{
    if (!c) return;
    free(c->x);
    free(c->h);
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->o);
    free(c->g);
    free(c->u);
    free(c->rope);
    free(c->scores);
    for (int i = 0; i < ACT_COUNT; i++)
        free(c->act[i]);
    free(c->out_rows);
    free(c->by_ctx);
    free((void *)c->op_next);
    free(c);
}

/* ---- per-token helpers (one thread owns a token row) ---- */

static void rmsnorm(const float *x, const float *w, float *y, int n, float eps)
{
    float ss = kern_sum_sq_f32(x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++)
        y[i] = (x[i] * scale) * w[i];
}

/* Rotates one head in place. cs holds (cos, sin) pairs for i < n_rot / 2. */
static void rope_head(float *x, const float *cs, int n_rot, bool neox)
{
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        float a = x[i0], b = x[i1];
        x[i0] = a * c - b * s;
        x[i1] = a * s + b * c;
    }
}

static void add_bias(float *x, const struct gguf_tensor *b, int n)
{
    if (!b) return;
    const float *bv = b->data;
    for (int i = 0; i < n; i++)
        x[i] += bv[i];
}

/* Where a q8_0 activation row of k elements keeps its side data. */
static size_t side_offset(int k)
{
    return (dtype_row_size(DTYPE_Q8_0, k) + 63) & ~(size_t)63;
}

/* Quantizes rows [t0, t1) of x (stride k floats) for each weight type in ws. */
static void prep_act(struct fwd_ctx *c, const float *x, int k, const struct gguf_tensor *const *ws,
                     int n_ws, int t0, int t1)
{
    bool done[ACT_COUNT] = {false};
    for (int i = 0; i < n_ws; i++) {
        int ai = act_index(ws[i]->type);
        if (done[ai]) continue;
        done[ai] = true;
        for (int t = t0; t < t1; t++) {
            uint8_t *row = c->act[ai] + (size_t)t * c->act_stride;
            kern_quantize_act(ws[i]->type, x + (size_t)t * k, row, k);
            /* the packed kernels' side data, once per row for every matmul */
            if (ai == ACT_Q8_0) kern_act_side(DTYPE_Q8_0, row, k, row + side_offset(k));
        }
    }
}

/* Rows [r0, r1) of y = W act for n_tok tokens; y has ldy floats per token. */
static void matmul_rows(const struct fwd_ctx *c, const struct gguf_tensor *w, const void *pk,
                        int n_tok, int r0, int r1, float *y, int ldy)
{
    const int rows = (int)w->ne[1], k = (int)w->ne[0];
    const void *act = c->act[act_index(w->type)];
    if (pk)
        kern_matmul_packed(w->type, pk, rows, k, r0, r1, act, c->act_stride,
                           (const uint8_t *)act + side_offset(k), c->act_stride, n_tok, y, ldy);
    else
        kern_matmul(w->type, w->data, dtype_row_size(w->type, k), k, r0, r1, act, c->act_stride,
                    n_tok, y, ldy);
}

/* Claims the next piece of row segment [s0, s1), whose counter holds the
 * rows handed out from s0: half of what is left, in multiples of grid.
 * False when the segment is used up. */
static bool claim_rows(struct op_counter *ctr, int s0, int s1, int grid, int *r0, int *r1)
{
    int done = atomic_load_explicit(&ctr->v, memory_order_relaxed);
    for (;;) {
        const int left = s1 - s0 - done;
        if (left <= 0) return false;
        int n = (left / 2 + grid - 1) / grid * grid;
        n = MIN(MAX(n, grid), left);
        if (atomic_compare_exchange_weak_explicit(&ctr->v, &done, done + n, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *r0 = s0 + done;
            *r1 = s0 + done + n;
            return true;
        }
    }
}

/* This thread's share of y = W act for n_tok tokens; y has ldy floats per
 * token. A thread slowed by the memory system or the OS must not hold the
 * others at the next barrier, so rows are claimed, not assigned. Which
 * thread computes a row does not change its bits (kern_matmul's contract).
 * *op numbers the split ops of the pass; every thread calls them in the
 * same order. */
static void matmul(struct fwd_ctx *c, const struct gguf_tensor *w, const void *pk, int n_tok,
                   float *y, int ldy, int *op, int ith, int nth)
{
    const int rows = (int)w->ne[1];
    CHECK(*op < c->n_ops);
    struct op_counter *ctr = &c->op_next[(size_t)(*op)++ * c->n_seg];
    if (n_tok == 0) return;
    if (nth == 1) {
        matmul_rows(c, w, pk, n_tok, 0, rows, y, ldy);
        return;
    }
    /* Whole 16-row panels on GGUF rows, pairs of panels on packed weights
     * (their kernel streams two side by side). */
    const int grid = pk ? 32 : 16;
    int r0, r1;
    if (n_tok <= 4 || (pk && n_tok <= KERN_PACKED_ONE_PASS)) {
        /* Decode (a few tokens, memory bound; on packed weights up to
         * KERN_PACKED_ONE_PASS tokens, which read each weight once): one
         * contiguous segment of rows per thread. Its owner claims half of
         * what is left of it at a time, so its rows stream in order and the
         * prefetchers keep going from piece to piece; a thread done with
         * its own segment takes pieces of the others'. Against pieces of
         * one shared counter, which interleave the threads' rows, steps of
         * 1 and 8 tokens are ~5 % faster. */
        for (int i = 0; i < nth; i++) {
            const int seg = (ith + i) % nth;
            int s0, s1;
            tpool_split(rows, grid, seg, nth, &s0, &s1);
            while (claim_rows(&ctr[seg], s0, s1, grid, &r0, &r1))
                matmul_rows(c, w, pk, n_tok, r0, r1, y, ldy);
        }
        return;
    }
    /* Prefill: ~2 grabs per thread on GGUF rows, because every kern_matmul
     * call prepares all the tokens' activation side data again; ~4 on
     * packed weights, whose side data was prepared once per token. */
    const int per_thread = pk ? 4 : 2;
    const int chunk = MAX(grid, (rows / (nth * per_thread) + grid - 1) / grid * grid);
    for (;;) {
        r0 = atomic_fetch_add_explicit(&ctr->v, chunk, memory_order_relaxed);
        if (r0 >= rows) return;
        matmul_rows(c, w, pk, n_tok, r0, MIN(rows, r0 + chunk), y, ldy);
    }
}

#define ATTEND_MAX_HEADS KERN_ATTEND_MAX_HEADS /* query heads of one attend() call */

/* Attention of token t for query heads [h0, h0 + nh) of one KV group, over
 * positions [0, pos] of its sequence, in one kern_attend_heads call over
 * the sequence's block table. The group's heads read each K and V block
 * together, which gives every head the bits it would get alone, so how
 * heads are grouped into tasks changes nothing. */
static void attend(struct fwd_ctx *c, int layer, int t, int h0, int nh, float *scores)
{
    const struct model_hparams *hp = &c->m->hp;
    const struct kv_pool *kv = c->kv;
    const int hd = hp->head_dim, bt = kv->cfg.block_tokens, lds = c->scores_ld;
    const int kvh = h0 / (hp->n_head / hp->n_head_kv);
    const struct kv_seq *s = c->b->seqs[c->b->seq[t]];
    const int n_ctx = c->b->pos[t] + 1;
    const float *q = c->q + (size_t)t * hp->n_head * hd + (size_t)h0 * hd;
    const float scale = 1.0f / sqrtf((float)hd);

    /* Blocks with consecutive ids are adjacent in the pool (one region per
     * layer and head), so most of a sequence reads as one run that the
     * hardware prefetchers follow. Software prefetch of the K panel two
     * blocks ahead and of each block's V rows, which the old block-major
     * layout needed, now only stalled on full miss queues: without it an
     * 8-stream step at ~1,500 positions is ~5 % faster. */
    CHECK(nh <= KERN_ATTEND_MAX_HEADS);
    float *out = c->h + (size_t)t * hp->n_head * hd + (size_t)h0 * hd;
    kern_attend_heads(kv->cfg.dtype, kv_pool_k(kv, 0, layer, kvh), kv_pool_v(kv, 0, layer, kvh),
                      kv->panel_bytes, s->blocks, bt, n_ctx, q, hd, nh, hd, scale, scores, lds, out,
                      hd);
}

/* Bias, qk-norm, rope for token t's q and k; stores k and v into the cache. */
static void qkv_post(struct fwd_ctx *c, const struct model_layer *L, int layer, int t)
{
    const struct model_hparams *hp = &c->m->hp;
    const int hd = hp->head_dim, Q = hp->n_head * hd, KV = hp->n_head_kv * hd;
    float *q = c->q + (size_t)t * Q, *k = c->k + (size_t)t * KV, *v = c->v + (size_t)t * KV;
    add_bias(q, L->bq, Q);
    add_bias(k, L->bk, KV);
    add_bias(v, L->bv, KV);
    const float *cs = c->rope + (size_t)t * hp->n_rot;
    for (int h = 0; h < hp->n_head; h++) {
        if (L->q_norm) rmsnorm(q + h * hd, L->q_norm->data, q + h * hd, hd, hp->rms_eps);
        rope_head(q + h * hd, cs, hp->n_rot, hp->rope_neox);
    }
    for (int h = 0; h < hp->n_head_kv; h++) {
        if (L->k_norm) rmsnorm(k + h * hd, L->k_norm->data, k + h * hd, hd, hp->rms_eps);
        rope_head(k + h * hd, cs, hp->n_rot, hp->rope_neox);
    }
    const struct kv_pool *kv = c->kv;
    const int bt = kv->cfg.block_tokens, pos = c->b->pos[t];
    const struct kv_seq *s = c->b->seqs[c->b->seq[t]];
    const int32_t blk = s->blocks[pos / bt];
    const size_t elt = dtype_info(kv->cfg.dtype)->type_size;
    for (int h = 0; h < hp->n_head_kv; h++) {
        kern_kv_store_col(kv->cfg.dtype, k + h * hd, kv_pool_k(kv, blk, layer, h), bt, pos % bt,
                          hd);
        kern_kv_store(kv->cfg.dtype, v + h * hd,
                      (uint8_t *)kv_pool_v(kv, blk, layer, h) + (size_t)(pos % bt) * hd * elt, hd);
    }
}

static void fwd_worker(void *arg, int ith, int nth)
{
    struct fwd_ctx *c = arg;
    const struct model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const struct fwd_batch *b = c->b;
    const int T = b->n_tokens, E = hp->n_embd, hd = hp->head_dim;
    const int Q = hp->n_head * hd, KV = hp->n_head_kv * hd, F = hp->n_ff;
    const int G = hp->n_head / hp->n_head_kv; /* query heads per KV head */
    int t0, t1, op = 0;
    tpool_split(T, 1, ith, nth, &t0, &t1);

    /* Embeddings and per-token rope tables. */
    const size_t emb_row = dtype_row_size(m->tok_embd->type, E);
    for (int t = t0; t < t1; t++) {
        kern_dequantize_row(m->tok_embd->type,
                            (const uint8_t *)m->tok_embd->data + (size_t)b->tokens[t] * emb_row,
                            c->x + (size_t)t * E, E);
        float *cs = c->rope + (size_t)t * hp->n_rot;
        for (int i = 0; i < hp->n_rot / 2; i++) {
            /* Double precision: the angle grows with the position, float loses it. */
            double freq = pow((double)hp->rope_theta, -2.0 * i / (double)hp->n_rot);
            double ang = (double)b->pos[t] * freq;
            cs[2 * i] = (float)cos(ang);
            cs[2 * i + 1] = (float)sin(ang);
        }
    }

    for (int il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *qkv[3] = {L->wq, L->wk, L->wv};
        for (int t = t0; t < t1; t++)
            rmsnorm(c->x + (size_t)t * E, L->attn_norm->data, c->h + (size_t)t * E, E, hp->rms_eps);
        prep_act(c, c->h, E, qkv, 3, t0, t1);
        tpool_barrier(c->pool);

        matmul(c, L->wq, L->pk_wq, T, c->q, Q, &op, ith, nth);
        matmul(c, L->wk, L->pk_wk, T, c->k, KV, &op, ith, nth);
        matmul(c, L->wv, L->pk_wv, T, c->v, KV, &op, ith, nth);
        tpool_barrier(c->pool);

        for (int t = t0; t < t1; t++)
            qkv_post(c, L, il, t);
        tpool_barrier(c->pool);

        /* (token, KV group, part of the group) tasks from a counter: in a
         * prefill chunk later tokens attend over longer contexts, so a
         * static split would hand one thread most of the work; tokens go
         * longest context first (by_ctx). Groups are cut into parts only
         * when there are too few to share out (or over ATTEND_MAX_HEADS).
         * Which thread runs a task, and how a group is cut, do not change
         * bits. */
        float *scores = c->scores + (size_t)ith * c->scores_ld * (size_t)G;
        _Atomic int *next = &c->op_next[(size_t)op++ * c->n_seg].v;
        const int n_groups = T * hp->n_head_kv;
        const int parts = MAX(n_groups >= 2 * nth ? 1 : MIN(G, (2 * nth + n_groups - 1) / n_groups),
                              (G + ATTEND_MAX_HEADS - 1) / ATTEND_MAX_HEADS);
        const int n_tasks = n_groups * parts, grab = MAX(1, n_tasks / (nth * 16));
        for (;;) {
            int a0 = atomic_fetch_add_explicit(next, grab, memory_order_relaxed);
            if (a0 >= n_tasks) break;
            for (int a = a0; a < MIN(n_tasks, a0 + grab); a++) {
                int g = a / parts, part = a % parts;
                int lo = part * G / parts, hi = (part + 1) * G / parts;
                int t = (int)(uint32_t)c->by_ctx[g / hp->n_head_kv];
                int h0 = (g % hp->n_head_kv) * G + lo;
                attend(c, il, t, h0, hi - lo, scores);
            }
        }
        tpool_barrier(c->pool);

        prep_act(c, c->h, Q, &L->wo, 1, t0, t1);
        tpool_barrier(c->pool);
        matmul(c, L->wo, L->pk_wo, T, c->o, E, &op, ith, nth);
        tpool_barrier(c->pool);

        const struct gguf_tensor *gu[2] = {L->w_gate, L->w_up};
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * E, *o = c->o + (size_t)t * E;
            for (int i = 0; i < E; i++)
                x[i] += o[i];
            rmsnorm(x, L->ffn_norm->data, c->h + (size_t)t * E, E, hp->rms_eps);
        }
        prep_act(c, c->h, E, gu, 2, t0, t1);
        tpool_barrier(c->pool);
        matmul(c, L->w_gate, L->pk_gate, T, c->g, F, &op, ith, nth);
        matmul(c, L->w_up, L->pk_up, T, c->u, F, &op, ith, nth);
        tpool_barrier(c->pool);

        for (int t = t0; t < t1; t++)
            kern_silu_mul(c->g + (size_t)t * F, c->u + (size_t)t * F, F);
        prep_act(c, c->g, F, &L->w_down, 1, t0, t1);
        tpool_barrier(c->pool);
        matmul(c, L->w_down, L->pk_down, T, c->o, E, &op, ith, nth);
        tpool_barrier(c->pool);

        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * E, *o = c->o + (size_t)t * E;
            for (int i = 0; i < E; i++)
                x[i] += o[i];
        }
    }

    /* Final norm of the wanted tokens, compacted into h rows [0, n_out).
     * A wanted token's residual row may belong to another thread's split. */
    tpool_barrier(c->pool);
    int o0, o1;
    tpool_split(c->n_out, 1, ith, nth, &o0, &o1);
    for (int j = o0; j < o1; j++)
        rmsnorm(c->x + (size_t)c->out_rows[j] * E, m->out_norm->data, c->h + (size_t)j * E, E,
                hp->rms_eps);
    prep_act(c, c->h, E, &m->output, 1, o0, o1);
    tpool_barrier(c->pool);
    matmul(c, m->output, m->pk_output, c->n_out, c->logits, hp->n_vocab, &op, ith, nth);
}

static int cmp_u64(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return (a > b) - (a < b);
}

int fwd_run(struct fwd_ctx *c, const struct fwd_batch *b, float *logits, struct err_msg *msg)
{
    const struct model_hparams *hp = &c->m->hp;
    if (b->n_tokens < 1 || b->n_tokens > c->max_tokens)
        return err_set(msg, ERR_INVALID, "forward: batch of %d tokens (capacity %d)", b->n_tokens,
                       c->max_tokens);
    int n_out = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= hp->n_vocab)
            return err_set(msg, ERR_INVALID, "token id %d is out of range (vocabulary %d)",
                           b->tokens[t], hp->n_vocab);
        if (b->pos[t] < 0 || b->pos[t] >= c->max_ctx)
            return err_set(msg, ERR_INVALID, "position %d is beyond the context (%d)", b->pos[t],
                           c->max_ctx);
        if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
            return err_set(msg, ERR_INVALID, "token %d names sequence %d of %d", t, b->seq[t],
                           b->n_seqs);
        const struct kv_seq *s = b->seqs[b->seq[t]];
        if (b->pos[t] >= s->n_blocks * c->kv->cfg.block_tokens)
            return err_set(msg, ERR_INVALID, "position %d has no KV block reserved", b->pos[t]);
        if (b->want_logits[t]) c->out_rows[n_out++] = t;
    }
    /* Attention tasks longest context first: the last tasks taken are the
     * short ones, so the threads reach the barrier after it closer together. */
    for (int t = 0; t < b->n_tokens; t++)
        c->by_ctx[t] = (uint64_t)(uint32_t)(INT32_MAX - b->pos[t]) << 32 | (uint32_t)t;
    qsort(c->by_ctx, (size_t)b->n_tokens, sizeof(uint64_t), cmp_u64);
    c->b = b;
    c->logits = logits;
    c->n_out = n_out;
    for (int i = 0; i < c->n_ops * c->n_seg; i++)
        atomic_store_explicit(&c->op_next[i].v, 0, memory_order_relaxed);
    tpool_run(c->pool, fwd_worker, c);
    c->b = NULL;
    return 0;
}
