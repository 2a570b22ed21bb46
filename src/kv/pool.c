/*
 * pool.c - see pool.h.
 */
#include "kv/pool.h"

#include "base/check.h"
#include "kv/prefix.h"

#include <errno.h>
#include <string.h>

int kv_pool_init(struct kv_pool *p, const struct kv_pool_config *cfg, struct err_msg *msg)
{
    memset(p, 0, sizeof(*p));
    if (cfg->dtype != DTYPE_F16 && cfg->dtype != DTYPE_BF16 && cfg->dtype != DTYPE_F32)
        return err_set(msg, ERR_INVALID, "kv cache type must be f16, bf16 or f32");
    if (cfg->block_tokens < 1 || cfg->block_tokens > 4096 || cfg->n_blocks < 1 ||
        (!cfg->no_data && (cfg->n_layer < 1 || cfg->n_kv_head < 1 || cfg->head_dim < 1)))
        return err_set(msg, ERR_INVALID, "kv cache: block size %d / %d blocks is out of range",
                       cfg->block_tokens, cfg->n_blocks);
    p->cfg = *cfg;
    p->panel_bytes = (size_t)cfg->block_tokens * cfg->head_dim * dtype_info(cfg->dtype)->type_size;
    p->half_bytes = p->panel_bytes * (size_t)cfg->n_kv_head;
    p->block_bytes = p->half_bytes * 2 * (size_t)cfg->n_layer;
    size_t total = p->block_bytes * (size_t)cfg->n_blocks;
    if (!cfg->no_data) {
        if (!(p->data = huge_alloc(total)))
            return err_set(msg, -ENOMEM, "kv cache: cannot allocate %zu bytes", total);
        /* The whole arena is backed now: a fresh server would otherwise take
         * its page faults (and the kernel's zeroing of each huge page) inside
         * decode steps, as new blocks are first written. */
        if (prefault(p->data, total)) {
            free(p->data);
            p->data = NULL;
            return err_set(msg, -ENOMEM, "kv cache: cannot back %zu bytes with memory", total);
        }
    }
    p->free_list = xmalloc(sizeof(int32_t) * (size_t)cfg->n_blocks);
    p->free_pos = xmalloc(sizeof(int32_t) * (size_t)cfg->n_blocks);
    p->refs = xcalloc((size_t)cfg->n_blocks, sizeof(int32_t));
    /* Pop order 0, 1, 2, ... so fresh pools hand out ascending ids. */
    for (int i = 0; i < cfg->n_blocks; i++) {
        p->free_list[i] = cfg->n_blocks - 1 - i;
        p->free_pos[cfg->n_blocks - 1 - i] = i;
    }
    p->n_free = cfg->n_blocks;
    return 0;
}

void kv_pool_release(struct kv_pool *p)
{
    CHECK(!p->prefix); /* kv_prefix_release first */
    free(p->data);
    free(p->free_list);
    free(p->free_pos);
    free(p->refs);
    memset(p, 0, sizeof(*p));
}

void kv__pool_free(struct kv_pool *p, int32_t block)
{
    CHECK(p->refs[block] == 0 && p->free_pos[block] < 0);
    p->free_pos[block] = p->n_free;
    p->free_list[p->n_free++] = block;
}

/* Takes free block b off the free list (the last entry moves into its slot). */
static void take_free(struct kv_pool *p, int32_t b)
{
    const int i = p->free_pos[b];
    const int32_t last = p->free_list[--p->n_free];
    p->free_list[i] = last;
    p->free_pos[last] = i;
    p->free_pos[b] = -1;
}

/* Takes block b (free, or evicted from the prefix cache) with refcount 1. */
static void claim(struct kv_pool *p, int32_t b)
{
    CHECK(p->refs[b] == 0);
    p->refs[b] = 1;
}

int kv_pool_alloc(struct kv_pool *p, int32_t *block)
{
    int32_t b;
    if (p->n_free > 0)
        take_free(p, b = p->free_list[p->n_free - 1]);
    else if (!p->prefix || (b = kv__prefix_evict(p->prefix)) < 0)
        return ERR_NO_KV;
    claim(p, b);
    *block = b;
    return 0;
}

#define RUN_ROOM 32 /* blocks of room a table starting a run leaves itself and the one before */

#define RUN_SCAN 1024 /* blocks a search for a free run looks at, at most */

/* Where a table starts a new run of block ids: in the first free run long
 * enough to leave RUN_ROOM blocks of growth to the table whose blocks end
 * just before it and RUN_ROOM to this one, so tables grow as long runs
 * while the used part of the arena stays compact (its memory is first
 * touched only as it fills); failing that, the middle of the longest free
 * run. -1 when no block is free. A pool larger than RUN_SCAN blocks is
 * searched RUN_SCAN blocks at a time, from the run the last search found
 * or where a fruitless one stopped, so a full, fragmented pool costs
 * O(RUN_SCAN) an allocation, not O(blocks); -1 also when a window has no
 * free block (the caller takes any). */
static int32_t new_run_start(struct kv_pool *p)
{
    int32_t best = -1, best_len = 0;
    const int32_t n = p->cfg.n_blocks;
    int32_t b = n > RUN_SCAN && p->scan_from < n ? p->scan_from : 0;
    const int32_t end = n > RUN_SCAN ? MIN(n, b + RUN_SCAN) : n;
    p->scan_from = end < n ? end : 0;
    for (; b < end;) {
        if (p->free_pos[b] < 0) {
            b++;
            continue;
        }
        int32_t e = b;
        while (e < n && p->free_pos[e] >= 0)
            e++;
        const int32_t before = b > 0 ? RUN_ROOM : 0;
        if (e - b >= before + RUN_ROOM) {
            if (n > RUN_SCAN) p->scan_from = b; /* the next search starts here */
            return b + before;
        }
        if (e - b > best_len) {
            best_len = e - b;
            best = b + (e - b) / 2;
        }
        b = e;
    }
    return best;
}

/* A block for the table after block `prev` (-1: none): prev + 1 when free,
 * otherwise the start of a new run, otherwise any. */
static int alloc_after(struct kv_pool *p, int32_t prev, int32_t *block)
{
    int32_t b = prev + 1;
    /* (a full pool has no run to find: the block comes from the LRU) */
    if (prev < 0 || b >= p->cfg.n_blocks || p->free_pos[b] < 0)
        b = p->n_free > 0 ? new_run_start(p) : -1;
    if (b < 0) return kv_pool_alloc(p, block);
    take_free(p, b);
    claim(p, b);
    *block = b;
    return 0;
}

void kv_pool_read_block(const struct kv_pool *p, int32_t block, void *dst)
{
    uint8_t *d = dst;
    for (int l = 0; l < p->cfg.n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < p->cfg.n_kv_head; h++, d += p->panel_bytes)
                memcpy(d, kv ? kv_pool_v(p, block, l, h) : kv_pool_k(p, block, l, h),
                       p->panel_bytes);
}

void kv_pool_write_block(struct kv_pool *p, int32_t block, const void *src)
{
    const uint8_t *s = src;
    for (int l = 0; l < p->cfg.n_layer; l++)
        for (int kv = 0; kv < 2; kv++)
            for (int h = 0; h < p->cfg.n_kv_head; h++, s += p->panel_bytes)
                memcpy(kv ? kv_pool_v(p, block, l, h) : kv_pool_k(p, block, l, h), s,
                       p->panel_bytes);
}

void kv_pool_ref(struct kv_pool *p, int32_t block)
{
    CHECK(block >= 0 && block < p->cfg.n_blocks && p->refs[block] > 0);
    p->refs[block]++;
}

void kv_pool_unref(struct kv_pool *p, int32_t block)
{
    CHECK(block >= 0 && block < p->cfg.n_blocks && p->refs[block] > 0);
    if (--p->refs[block] > 0) return;
    if (p->prefix && p->prefix->cached[block])
        kv__prefix_park(p->prefix, block);
    else
        kv__pool_free(p, block);
}

int kv_pool_n_available(const struct kv_pool *p)
{
    return p->n_free + (p->prefix ? p->prefix->n_lru : 0);
}

int kv_seq_reserve(struct kv_pool *p, struct kv_seq *s, int n_pos)
{
    int need = (n_pos + p->cfg.block_tokens - 1) / p->cfg.block_tokens;
    if (need <= s->n_blocks) return 0;
    if (need - s->n_blocks > kv_pool_n_available(p)) return ERR_NO_KV;
    if (need > s->cap) {
        s->cap = MAX(need, s->cap * 2);
        s->blocks = xrealloc(s->blocks, sizeof(int32_t) * (size_t)s->cap);
    }
    while (s->n_blocks < need) {
        const int32_t prev = s->n_blocks > 0 ? s->blocks[s->n_blocks - 1] : -1;
        CHECK(alloc_after(p, prev, &s->blocks[s->n_blocks++]) == 0);
    }
    return 0;
}

void kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
    for (int i = s->n_blocks - 1; i >= 0; i--)
        kv_pool_unref(p, s->blocks[i]);
    free(s->blocks);
    memset(s, 0, sizeof(*s));
}
