/*
 * pool.h - the paged KV cache: a fixed arena of blocks, each holding the keys
 * and values of KV_BLOCK_TOKENS (configurable) consecutive positions of one
 * sequence for every layer, plus per-sequence block tables.
 *
 * Arena layout: one region per (layer, K or V, KV head), each holding that
 * head's panel of every block in block-id order:
 *
 *   [layer 0: K head 0 (block 0, block 1, ...) | K head 1 (...) | ...
 *             V head 0 (block 0, block 1, ...) | V head 1 (...) | ...]
 *   [layer 1: ...] ... [layer n_layer-1: ...]
 *
 * A head's keys inside a block are a K panel - dimension-major, position
 * e * block_tokens + j for dimension e of position j, what kern_kv_dot
 * reads - and its values a dense (block_tokens, head_dim) matrix for
 * kern_kv_accum. Elements are f16 (default), bf16 or f32. Attention reads
 * one (layer, head) region at a time, so a sequence whose blocks have
 * consecutive ids is read as one run of memory the hardware prefetchers
 * follow, not as a scatter of 2 KiB pieces; kv_seq_reserve hands a growing
 * sequence the id after its last block when it is free, and otherwise
 * starts a new run where it and the sequence before it have room to grow
 * (the first such free run, so the used part of the arena stays compact).
 * A block moves whole (a KV frame's payload) as kv_pool_read_block /
 * kv_pool_write_block order it: per layer, K of each head, then V of each.
 *
 * Blocks are refcounted: a sequence's table holds one reference per block.
 * A block whose count drops to zero returns to the free list - unless the
 * prefix cache (prefix.h) indexes it: then it parks on the cache's LRU list
 * and still counts as available, since kv_pool_alloc evicts the LRU head
 * when the free list is empty. So with a prefix cache attached:
 *
 *   n_blocks = referenced + on the LRU (cached, unreferenced) + free
 * *
 * Lifetime: the arena is process state, allocated once at engine creation.
 * Thread safety: owned by the engine thread; the forward pass only reads the
 * tables and writes the slots the engine reserved for it.
 */
#ifndef INFERD_KV_POOL_H
#define INFERD_KV_POOL_H

#include "base/dtype.h"
#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

#define KV_BLOCK_TOKENS_DEFAULT 16

struct kv_prefix;

struct kv_pool_config {
    int n_layer;      /* layers of the model */
    int n_kv_head;    /* key/value heads */
    int head_dim;     /* per-head dim */
    int block_tokens; /* positions per block */
    int n_blocks;     /* blocks in the arena */
    enum dtype dtype; /* DTYPE_F16, DTYPE_BF16 or DTYPE_F32 */
    bool no_data;     /* bookkeeping only, no arena (a simulated worker's pool): the layer
                         fields may be 0 and the block contents must never be touched */
};

struct kv_pool {
    struct kv_pool_config cfg; /* as given */
    size_t panel_bytes;        /* bytes of one head's K (or V) of one layer of one block */
    size_t half_bytes;         /* bytes of K (or V) of one layer of one block, all heads */
    size_t block_bytes;        /* bytes of one block, all layers */
    uint8_t *data;             /* (n_layer, 2, n_kv_head, n_blocks, panel_bytes) */
    int32_t *free_list;        /* stack of free block ids, (n_blocks) */
    int32_t *free_pos;         /* (n_blocks) index of each free block in free_list, or -1 */
    int n_free;                /* entries in free_list */
    int32_t *refs;             /* (n_blocks) reference counts */
    int32_t scan_from;         /* where the next search for a free run starts */
    struct kv_prefix *prefix;  /* index keeping unreferenced cached blocks, or NULL */
};

/* Allocates the arena. Errors: ERR_INVALID for a bad config, -ENOMEM. */
int kv_pool_init(struct kv_pool *p, const struct kv_pool_config *cfg, struct err_msg *msg);
void kv_pool_release(struct kv_pool *p);

/* Takes a free block with refcount 1 (evicting the prefix cache's least
 * recently used block if the free list is empty); ERR_NO_KV when none is
 * left. */
int kv_pool_alloc(struct kv_pool *p, int32_t *block);
void kv_pool_ref(struct kv_pool *p, int32_t block);
void kv_pool_unref(struct kv_pool *p, int32_t block);
/* Blocks kv_pool_alloc can still hand out: free + evictable cached ones. */
int kv_pool_n_available(const struct kv_pool *p);

/* Keys (head_dim, block_tokens) and values (block_tokens, head_dim) of one
 * head of one layer of one block. */
static inline void *kv_pool_k(const struct kv_pool *p, int32_t block, int layer, int head)
{
    return p->data + (((size_t)layer * 2 * p->cfg.n_kv_head + head) * p->cfg.n_blocks + block) *
                         p->panel_bytes;
}
static inline void *kv_pool_v(const struct kv_pool *p, int32_t block, int layer, int head)
{
    return p->data +
           ((((size_t)layer * 2 + 1) * p->cfg.n_kv_head + head) * p->cfg.n_blocks + block) *
               p->panel_bytes;
}
/* Copies block b out to / in from block_bytes of dst / src (the KV frame
 * payload order: per layer, K of each head, then V of each head). */
void kv_pool_read_block(const struct kv_pool *p, int32_t block, void *dst);
void kv_pool_write_block(struct kv_pool *p, int32_t block, const void *src);
/* Returns a block with refcount 0 to the free list (the pool and the prefix
 * cache's own use). */
void kv__pool_free(struct kv_pool *p, int32_t block);

/* A sequence's block table: block i holds positions [i*bt, (i+1)*bt). */
struct kv_seq {
    int32_t *blocks; /* (cap) block ids; first n_blocks valid */
    int n_blocks;    /* blocks held */
    int cap;         /* allocated entries of blocks */
};

/* Makes sure the table covers positions [0, n_pos), each new block the one
 * after the table's last block when that is free (see the layout above). On
 * ERR_NO_KV the table is unchanged. */
int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_pos);
/* Drops every block reference, last block first (so a cached chain's head
 * joins the LRU last), and frees the table memory. */
void kv_seq_release(struct kv_pool *p, struct kv_seq *s);

#endif
