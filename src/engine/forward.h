/*
 * forward.h - one batched forward pass of a llama / qwen2 / qwen3 model over
 * a batch that mixes sequences: prefill chunks and single decode tokens run
 * in the same call, each token attending to its own sequence's paged KV.
 *
 *   batch tokens  t0 t1 t2 t3 | t4 | t5 t6      (any order, any mix)
 *   seq           A  A  A  A  | B  | C  C
 *   pos           0  1  2  3  | 57 | 12 13
 *
 * The caller (the scheduler) reserves KV blocks covering every position in
 * the batch beforehand. The pass writes each token's K and V into its
 * sequence's block at its position, then attends over positions [0, pos] of
 * that sequence, reading everything - including this batch's own keys - from
 * the cache, so a token sees exactly the same rounded keys whether its
 * context was computed in this call or an earlier one.
 *
 * Bit-exact invariance: every per-token quantity is computed by one thread
 * with a fixed operation order; matmuls split output rows across threads
 * (kern_matmul's invariance contract); attention reduces over positions in
 * ascending order. Hence a token's logits do not depend on the batch
 * composition, the chunking of its prefill, or the thread count.
 *
 * Thread model: fwd_run is called by the engine thread and fans out over the
 * thread pool (one tpool_run per call, barriers between dependent ops).
 * Memory: fwd_ctx scratch is allocated once for max_tokens (engine lifetime).
 */
#ifndef INFERD_ENGINE_FORWARD_H
#define INFERD_ENGINE_FORWARD_H

#include "base/tpool.h"
#include "kv/pool.h"
#include "model/model.h"

#include <stdbool.h>
#include <stdint.h>

struct fwd_batch {
    int n_tokens;                     /* tokens in the batch, <= ctx max_tokens */
    const int32_t *tokens;            /* (n_tokens) token ids */
    const int32_t *pos;               /* (n_tokens) absolute positions */
    const int32_t *seq;               /* (n_tokens) index into seqs */
    const bool *want_logits;          /* (n_tokens) true: emit this token's logits */
    int n_seqs;                       /* sequences referenced */
    const struct kv_seq *const *seqs; /* (n_seqs) block tables */
};

struct fwd_ctx;

/* max_tokens: tokens per call; max_ctx: longest sequence (positions). */
int fwd_ctx_new(const struct model *m, struct kv_pool *kv, struct tpool *pool, int max_tokens,
                int max_ctx, struct fwd_ctx **out, struct err_msg *msg);
void fwd_ctx_free(struct fwd_ctx *c);

/* Runs the batch. logits receives one row of n_vocab floats per token with
 * want_logits set, in batch order: (n_out, n_vocab). Returns 0 or
 * ERR_INVALID (bad token id, position beyond max_ctx or beyond the reserved
 * blocks, batch too large) without touching the cache. */
int fwd_run(struct fwd_ctx *c, const struct fwd_batch *b, float *logits, struct err_msg *msg);

/* Bytes of weights one pass reads (for roofline figures). */
size_t fwd_weight_bytes(const struct model *m, bool with_output);

#endif
