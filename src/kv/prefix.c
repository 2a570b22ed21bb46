/*
 * prefix.c - see prefix.h. The index is a chained hash table threaded
 * through per-block arrays (bucket heads + hnext), so it never allocates
 * after init; the LRU is a doubly linked list threaded the same way.
 */
#include "kv/prefix.h"

#include "base/check.h"

#include <stdio.h>
#include <string.h>
#include <xxhash.h>

void kv_prefix_init(struct kv_prefix *px, struct kv_pool *p, const uint8_t fingerprint[16])
{
    CHECK(!p->prefix);
    memset(px, 0, sizeof(*px));
    const int n = p->cfg.n_blocks;
    px->pool = p;
    memcpy(px->fingerprint, fingerprint, 16);
    px->ids = xcalloc((size_t)n, sizeof(*px->ids));
    px->cached = xcalloc((size_t)n, sizeof(bool));
    uint32_t nb = 16;
    while (nb < (uint32_t)n * 2)
        nb *= 2;
    px->bucket_mask = nb - 1;
    px->bucket = xmalloc(sizeof(int32_t) * nb);
    for (uint32_t i = 0; i < nb; i++)
        px->bucket[i] = -1;
    px->hnext = xmalloc(sizeof(int32_t) * (size_t)n);
    px->prev = xmalloc(sizeof(int32_t) * (size_t)n);
    px->next = xmalloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        px->hnext[i] = px->prev[i] = px->next[i] = -1;
    px->lru_head = px->lru_tail = -1;
    px->scratch = xmalloc(48 + 4 * (size_t)p->cfg.block_tokens);
    p->prefix = px;
}

void kv_prefix_release(struct kv_prefix *px)
{
    if (!px->pool) return;
    struct kv_pool *p = px->pool;
    /* Parked blocks go back to the free list; referenced ones stay with
     * their sequences and return to it through kv_pool_unref. */
    for (int32_t b = px->lru_head; b >= 0; b = px->next[b])
        kv__pool_free(p, b);
    p->prefix = NULL;
    free(px->ids);
    free(px->cached);
    free(px->bucket);
    free(px->hnext);
    free(px->prev);
    free(px->next);
    free(px->events);
    free(px->scratch);
    memset(px, 0, sizeof(*px));
}

static void put_u64(uint8_t *d, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        d[i] = (uint8_t)(v >> (8 * i));
}

static struct kv_block_id from_xxh(XXH128_hash_t h)
{
    return (struct kv_block_id){.hi = h.high64, .lo = h.low64};
}

struct kv_block_id kv_prefix_extra_key(const char *salt, size_t len)
{
    if (!salt || len == 0) return (struct kv_block_id){0, 0};
    return from_xxh(XXH3_128bits(salt, len));
}

struct kv_block_id kv_block_id_compute(const uint8_t fingerprint[16], int block_tokens,
                                       const struct kv_block_id *parent,
                                       const struct kv_block_id *extra, const int32_t *tokens,
                                       uint8_t *scratch)
{
    /* Serialized little-endian, so ids are the same on any host. */
    uint8_t *d = scratch;
    memcpy(d, fingerprint, 16);
    put_u64(d + 16, parent ? parent->hi : 0);
    put_u64(d + 24, parent ? parent->lo : 0);
    put_u64(d + 32, extra->hi);
    put_u64(d + 40, extra->lo);
    for (int i = 0; i < block_tokens; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int k = 0; k < 4; k++)
            d[48 + 4 * i + k] = (uint8_t)(t >> (8 * k));
    }
    return from_xxh(XXH3_128bits(d, 48 + 4 * (size_t)block_tokens));
}

struct kv_block_id kv_prefix_block_id(struct kv_prefix *px, const struct kv_block_id *parent,
                                      const struct kv_block_id *extra, const int32_t *tokens)
{
    return kv_block_id_compute(px->fingerprint, px->pool->cfg.block_tokens, parent, extra, tokens,
                               px->scratch);
}

static uint32_t bucket_of(const struct kv_prefix *px, const struct kv_block_id *id)
{
    /* Ids are uniform hashes already: any bits make a bucket. */
    return (uint32_t)id->lo & px->bucket_mask;
}

static bool same_id(const struct kv_block_id *a, const struct kv_block_id *b)
{
    return a->hi == b->hi && a->lo == b->lo;
}

bool kv_prefix_lookup(const struct kv_prefix *px, const struct kv_block_id *id, int32_t *block)
{
    for (int32_t b = px->bucket[bucket_of(px, id)]; b >= 0; b = px->hnext[b]) {
        if (same_id(&px->ids[b], id)) {
            if (block) *block = b;
            return true;
        }
    }
    return false;
}

static void emit(struct kv_prefix *px, enum kv_prefix_event_kind kind, const struct kv_block_id *id)
{
    if (!px->record_events) return;
    if (px->n_events == px->cap_events) {
        px->cap_events = MAX(64, px->cap_events * 2);
        px->events = xrealloc(px->events, sizeof(*px->events) * (size_t)px->cap_events);
    }
    px->events[px->n_events++] = (struct kv_prefix_event){.kind = kind, .id = *id};
}

int kv_prefix_take_events(struct kv_prefix *px, struct kv_prefix_event *out, int cap)
{
    int n = MIN(cap, px->n_events);
    if (n <= 0) return 0;
    memcpy(out, px->events, sizeof(*out) * (size_t)n);
    memmove(px->events, px->events + n, sizeof(*out) * (size_t)(px->n_events - n));
    px->n_events -= n;
    return n;
}

static void lru_unlink(struct kv_prefix *px, int32_t b)
{
    if (px->prev[b] >= 0)
        px->next[px->prev[b]] = px->next[b];
    else
        px->lru_head = px->next[b];
    if (px->next[b] >= 0)
        px->prev[px->next[b]] = px->prev[b];
    else
        px->lru_tail = px->prev[b];
    px->prev[b] = px->next[b] = -1;
    px->n_lru--;
}

void kv__prefix_park(struct kv_prefix *px, int32_t b)
{
    CHECK(px->cached[b] && px->pool->refs[b] == 0);
    px->prev[b] = px->lru_tail;
    px->next[b] = -1;
    if (px->lru_tail >= 0)
        px->next[px->lru_tail] = b;
    else
        px->lru_head = b;
    px->lru_tail = b;
    px->n_lru++;
}

int32_t kv__prefix_evict(struct kv_prefix *px)
{
    int32_t b = px->lru_head;
    if (b < 0) return -1;
    CHECK(px->cached[b] && px->pool->refs[b] == 0);
    if (px->evict_hook) px->evict_hook(px->evict_ctx, &px->ids[b]); /* still cached: exportable */
    lru_unlink(px, b);
    int32_t *link = &px->bucket[bucket_of(px, &px->ids[b])];
    while (*link != b) {
        CHECK(*link >= 0);
        link = &px->hnext[*link];
    }
    *link = px->hnext[b];
    px->hnext[b] = -1;
    px->cached[b] = false;
    px->n_cached--;
    px->n_evicted++;
    emit(px, KV_PREFIX_EVENT_EVICTED, &px->ids[b]);
    return b;
}

int kv_prefix_match(struct kv_prefix *px, const struct kv_block_id *ids, int n, struct kv_seq *s)
{
    CHECK(s->n_blocks == 0);
    struct kv_pool *p = px->pool;
    int i = 0;
    for (; i < n; i++) {
        int32_t b;
        if (!kv_prefix_lookup(px, &ids[i], &b)) break;
        if (p->refs[b] == 0) {
            lru_unlink(px, b);
            p->refs[b] = 1;
        } else {
            kv_pool_ref(p, b);
        }
        if (s->n_blocks == s->cap) {
            s->cap = MAX(8, s->cap * 2);
            s->blocks = xrealloc(s->blocks, sizeof(int32_t) * (size_t)s->cap);
        }
        s->blocks[s->n_blocks++] = b;
    }
    return i;
}

void kv_prefix_commit(struct kv_prefix *px, const struct kv_seq *s, const struct kv_block_id *ids,
                      int from, int n)
{
    CHECK(n <= s->n_blocks);
    for (int i = from; i < n; i++) {
        int32_t b = s->blocks[i];
        if (px->cached[b] || kv_prefix_lookup(px, &ids[i], NULL)) continue;
        CHECK(px->pool->refs[b] > 0);
        px->ids[b] = ids[i];
        px->cached[b] = true;
        uint32_t k = bucket_of(px, &ids[i]);
        px->hnext[b] = px->bucket[k];
        px->bucket[k] = b;
        px->n_cached++;
        px->n_stored++;
        emit(px, KV_PREFIX_EVENT_STORED, &ids[i]);
    }
}

void kv_block_id_to_bytes(const struct kv_block_id *id, uint8_t out[16])
{
    for (int k = 0; k < 8; k++) {
        out[k] = (uint8_t)(id->hi >> (56 - 8 * k));
        out[8 + k] = (uint8_t)(id->lo >> (56 - 8 * k));
    }
}

struct kv_block_id kv_block_id_from_bytes(const uint8_t in[16])
{
    struct kv_block_id id = {0, 0};
    for (int k = 0; k < 8; k++) {
        id.hi = id.hi << 8 | in[k];
        id.lo = id.lo << 8 | in[8 + k];
    }
    return id;
}

static struct kv_frame_layout frame_layout(const struct kv_prefix *px)
{
    struct kv_frame_layout l = {.n_layer = (uint32_t)px->pool->cfg.n_layer,
                                .layer_bytes = (uint32_t)(2 * px->pool->half_bytes)};
    memcpy(l.fingerprint, px->fingerprint, 16);
    return l;
}

size_t kv_prefix_frame_bytes(const struct kv_prefix *px)
{
    return KV_FRAME_HEADER + px->pool->block_bytes;
}

int kv_prefix_export(const struct kv_prefix *px, const struct kv_block_id *id, void *buf,
                     size_t cap)
{
    const struct kv_pool *p = px->pool;
    int32_t b;
    if (!kv_prefix_lookup(px, id, &b)) return ERR_NOT_FOUND;
    if (cap < kv_prefix_frame_bytes(px)) return ERR_INVALID;
    uint8_t *d = buf;
    struct kv_frame_layout l = frame_layout(px);
    uint8_t idb[16];
    kv_block_id_to_bytes(id, idb);
    kv_pool_read_block(p, b, d + KV_FRAME_HEADER);
    kv_frame_seal(&l, idb, d);
    return 0;
}

int kv_prefix_import(struct kv_prefix *px, const void *buf, size_t len, struct err_msg *msg)
{
    struct kv_pool *p = px->pool;
    const uint8_t *d = buf;
    struct kv_frame_layout l = frame_layout(px);
    int rc = kv_frame_check(&l, buf, len, NULL, NULL, msg);
    if (rc) return rc;
    struct kv_block_id id = kv_block_id_from_bytes(d + 24);
    if (kv_prefix_lookup(px, &id, NULL)) return 0;
    int32_t b;
    if (kv_prefix_adopt(px, &id, &b))
        return err_set(msg, ERR_NO_KV, "kv block frame: no free or evictable block");
    kv_pool_write_block(p, b, d + KV_FRAME_HEADER);
    return 0;
}

int kv_prefix_adopt(struct kv_prefix *px, const struct kv_block_id *id, int32_t *block)
{
    int32_t b;
    if (kv_prefix_lookup(px, id, &b)) {
        if (block) *block = b;
        return 1;
    }
    if (kv_pool_alloc(px->pool, &b)) return ERR_NO_KV;
    struct kv_seq one = {.blocks = &b, .n_blocks = 1, .cap = 1};
    kv_prefix_commit(px, &one, id, 0, 1);
    kv_pool_unref(px->pool, b); /* parks it on the LRU tail */
    if (block) *block = b;
    return 0;
}
