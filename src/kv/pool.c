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
        cfg->n_layer < 1 || cfg->n_kv_head < 1 || cfg->head_dim < 1)
        return err_set(msg, ERR_INVALID, "kv cache: block size %d / %d blocks is out of range",
                       cfg->block_tokens, cfg->n_blocks);
    p->cfg = *cfg;
    p->half_bytes = (size_t)cfg->n_kv_head * cfg->block_tokens * cfg->head_dim *
                    dtype_info(cfg->dtype)->type_size;
    p->block_bytes = p->half_bytes * 2 * (size_t)cfg->n_layer;
    size_t total = p->block_bytes * (size_t)cfg->n_blocks;
    if (!(p->data = huge_alloc(total)))
        return err_set(msg, -ENOMEM, "kv cache: cannot allocate %zu bytes", total);
    p->free_list = xmalloc(sizeof(int32_t) * (size_t)cfg->n_blocks);
    p->refs = xcalloc((size_t)cfg->n_blocks, sizeof(int32_t));
    /* Pop order 0, 1, 2, ... so fresh pools hand out ascending ids. */
    for (int i = 0; i < cfg->n_blocks; i++)
        p->free_list[i] = cfg->n_blocks - 1 - i;
    p->n_free = cfg->n_blocks;
    return 0;
}

void kv_pool_release(struct kv_pool *p)
{
    CHECK(!p->prefix); /* kv_prefix_release first */
    free(p->data);
    free(p->free_list);
    free(p->refs);
    memset(p, 0, sizeof(*p));
}

int kv_pool_alloc(struct kv_pool *p, int32_t *block)
{
    int32_t b;
    if (p->n_free > 0)
        b = p->free_list[--p->n_free];
    else if (!p->prefix || (b = kv__prefix_evict(p->prefix)) < 0)
        return ERR_NO_KV;
    CHECK(p->refs[b] == 0);
    p->refs[b] = 1;
    *block = b;
    return 0;
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
        p->free_list[p->n_free++] = block;
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
    while (s->n_blocks < need)
        CHECK(kv_pool_alloc(p, &s->blocks[s->n_blocks++]) == 0);
    return 0;
}

void kv_seq_release(struct kv_pool *p, struct kv_seq *s)
{
    for (int i = s->n_blocks - 1; i >= 0; i--)
        kv_pool_unref(p, s->blocks[i]);
    free(s->blocks);
    memset(s, 0, sizeof(*s));
}
