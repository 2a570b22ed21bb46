/*
 * sim.c - policies over a trace (sim.h).
 */
#include "kv/sim.h"

#include "base/check.h"
#include "base/u64map.h"

#include <stdlib.h>
#include <string.h>

void kv_sim_trace_add(struct kv_sim_trace *t, const uint64_t *ids, size_t n)
{
    if (t->n_req + 1 >= t->cap_req) {
        t->cap_req = t->cap_req ? 2 * t->cap_req : 1024;
        t->start = xrealloc(t->start, (t->cap_req + 1) * sizeof(*t->start));
    }
    if (t->n_ids + n > t->cap_ids) {
        while (t->n_ids + n > t->cap_ids)
            t->cap_ids = t->cap_ids ? 2 * t->cap_ids : 1 << 16;
        t->ids = xrealloc(t->ids, t->cap_ids * sizeof(*t->ids));
    }
    if (!t->n_req) t->start[0] = 0;
    memcpy(t->ids + t->n_ids, ids, n * sizeof(*ids));
    t->n_ids += n;
    t->start[++t->n_req] = t->n_ids;
}

void kv_sim_trace_release(struct kv_sim_trace *t)
{
    free(t->ids);
    free(t->start);
    memset(t, 0, sizeof(*t));
}

/* u64map keys must be non-zero; trace ids start at 0. */
static uint64_t key_of(uint64_t id)
{
    return id + 1;
}

uint64_t kv_sim_trace_distinct(const struct kv_sim_trace *t)
{
    struct u64map m = {0};
    for (size_t i = 0; i < t->n_ids; i++)
        u64map_put(&m, key_of(t->ids[i]), (void *)1);
    uint64_t n = m.n;
    u64map_release(&m);
    return n;
}

/* A tier id for a trace id: the first 8 bytes (the index's hash) mixed
 * (splitmix64's finaliser), the last 8 the id itself. */
static void block_id(uint64_t v, uint8_t out[16])
{
    uint64_t z = v + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    memcpy(out, &z, 8);
    memcpy(out + 8, &v, 8);
}

void kv_sim_policy(const struct kv_sim_trace *t, uint64_t capacity, const struct kv_tier_policy *p,
                   bool prompt_order, struct kv_sim_result *r)
{
    CHECK(capacity >= 1);
    memset(r, 0, sizeof(*r));
    r->capacity = capacity;
    struct kv_tier_index ix;
    kv_tier_index_init(&ix, p);
    kv_tier_index_set_capacity(&ix, capacity, 1, KV_TIER_PROTECT_SHARE);
    uint8_t id[16], parent[16];
    for (size_t q = 0; q < t->n_req; q++) {
        const uint64_t *b = t->ids + t->start[q];
        size_t n = t->start[q + 1] - t->start[q], hit = 0;
        r->blocks += n;
        /* lookup, as the chain's load: each block up to the first miss is
         * got, then touched (with its parent) */
        struct kv_tier_entry *e;
        for (; hit < n; hit++) {
            block_id(b[hit], id);
            if (!(e = kv_tier_index_find(&ix, id))) break;
            kv_tier_index_used(&ix, e);
            if (hit && prompt_order) {
                block_id(b[hit - 1], parent);
                kv_tier_index_chain(&ix, e, parent);
            }
        }
        r->hits += hit;
        /* the rest is prefilled and written through, in order: tier puts */
        for (size_t i = hit; i < n; i++) {
            block_id(b[i], id);
            if (i) block_id(b[i - 1], parent);
            const uint8_t *par = i && prompt_order ? parent : NULL;
            if ((e = kv_tier_index_find(&ix, id))) {
                kv_tier_index_used(&ix, e);
                kv_tier_index_chain(&ix, e, par);
                continue;
            }
            if (!kv_tier_index_admit(&ix, id)) continue;
            bool room = true;
            while (room && ix.used + 1 > capacity) {
                struct kv_tier_entry *v = prompt_order ? kv_tier_index_victim_for(&ix, 0, id, par)
                                                       : kv_tier_index_victim(&ix, 0);
                if (v)
                    kv_tier_index_evict(&ix, v);
                else
                    room = false;
            }
            if (room) kv_tier_index_chain(&ix, kv_tier_index_add(&ix, id, 1, 0, 1), par);
        }
    }
    r->ghost_hits = ix.ghost_hits;
    r->promotions = ix.promotions;
    r->demotions = ix.demotions;
    r->rejected = ix.rejected + ix.cut;
    kv_tier_index_release(&ix, NULL);
}

void kv_sim_ideal(const struct kv_sim_trace *t, struct kv_sim_result *r)
{
    memset(r, 0, sizeof(*r));
    struct u64map seen = {0};
    for (size_t q = 0; q < t->n_req; q++) {
        const uint64_t *b = t->ids + t->start[q];
        size_t n = t->start[q + 1] - t->start[q];
        r->blocks += n;
        for (size_t i = 0; i < n && u64map_get(&seen, key_of(b[i])); i++)
            r->hits++;
        for (size_t i = 0; i < n; i++)
            u64map_put(&seen, key_of(b[i]), (void *)1);
    }
    r->capacity = seen.n;
    u64map_release(&seen);
}

/* Belady: a max-heap of (next use, id), stale entries skipped on pop. */
struct use {
    uint64_t next; /* access position of the next use (UINT64_MAX: none) */
    uint64_t id;
};

static void heap_push(struct use *h, size_t *n, struct use u)
{
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2].next < u.next) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = u;
}

static struct use heap_pop(struct use *h, size_t *n)
{
    struct use top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1].next > h[c].next) c++;
        if (h[c].next <= last.next) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

void kv_sim_belady(const struct kv_sim_trace *t, uint64_t capacity, struct kv_sim_result *r)
{
    memset(r, 0, sizeof(*r));
    r->capacity = capacity;
    uint64_t *next = xmalloc((t->n_ids ? t->n_ids : 1) * sizeof(*next));
    struct u64map at = {0}; /* id -> position + 1 of its next access, going backwards */
    for (size_t i = t->n_ids; i-- > 0;) {
        uintptr_t v = (uintptr_t)u64map_get(&at, key_of(t->ids[i]));
        next[i] = v ? (uint64_t)v - 1 : UINT64_MAX;
        u64map_put(&at, key_of(t->ids[i]), (void *)(uintptr_t)(i + 1));
    }
    u64map_release(&at);
    /* held: id -> its next use + 1 (as it was when last pushed) */
    struct u64map held = {0};
    size_t hn = 0, hcap = 1024;
    struct use *heap = xmalloc(hcap * sizeof(*heap));
    for (size_t q = 0; q < t->n_req; q++) {
        size_t s = t->start[q], n = t->start[q + 1] - s;
        r->blocks += n;
        for (size_t i = 0; i < n && u64map_get(&held, key_of(t->ids[s + i])); i++)
            r->hits++;
        for (size_t i = 0; i < n; i++) {
            uint64_t id = t->ids[s + i], nx = next[s + i];
            u64map_put(&held, key_of(id), (void *)(uintptr_t)(nx == UINT64_MAX ? 0 : nx + 1));
            if (!u64map_get(&held, key_of(id))) /* never used again: not worth holding */
                u64map_del(&held, key_of(id));
            else {
                if (hn == hcap) heap = xrealloc(heap, (hcap *= 2) * sizeof(*heap));
                heap_push(heap, &hn, (struct use){.next = nx, .id = id});
            }
            while (held.n > capacity) {
                struct use u = heap_pop(heap, &hn);
                uintptr_t v = (uintptr_t)u64map_get(&held, key_of(u.id));
                if (v && (uint64_t)v - 1 == u.next) u64map_del(&held, key_of(u.id));
            }
        }
    }
    free(heap);
    free(next);
    u64map_release(&held);
}
