/*
 * tier_index.c - id -> entry table, recency lists and ghost of the RAM and
 * disk tiers (tier_index.h).
 */
#include "kv/tier_index.h"

#include "base/check.h"

#include <stdlib.h>
#include <string.h>

static uint64_t slot_hash(const uint8_t id[16])
{
    uint64_t h;
    memcpy(&h, id, 8);
    return h;
}

void kv_tier_index_init(struct kv_tier_index *ix, const struct kv_tier_policy *p)
{
    memset(ix, 0, sizeof(*ix));
    ix->policy = p->evict;
    ix->admit = p->admit;
}

void kv_tier_index_set_capacity(struct kv_tier_index *ix, uint64_t capacity_bytes,
                                uint64_t entry_bytes, double protect_share)
{
    ix->protect_bytes = (uint64_t)((double)capacity_bytes * protect_share);
    if (ix->ghost_ring || ix->policy != KV_EVICT_SLRU || !entry_bytes) return;
    uint64_t n = capacity_bytes / entry_bytes * KV_TIER_GHOST_PER_ENTRY;
    if (n > (1u << 24)) n = 1u << 24; /* 16 M ids (0.8 GiB of ghost) at most */
    if (!n) return;
    ix->ghost_cap = n;
    ix->ghost_ring = xcalloc(n, sizeof(*ix->ghost_ring));
    size_t sc = 64;
    while (sc < 2 * n)
        sc *= 2;
    ix->ghost_slots_cap = sc;
    ix->ghost_slots = xcalloc(sc, sizeof(*ix->ghost_slots));
}

/* ---- table ---- */

static size_t find_slot(const struct kv_tier_index *ix, const uint8_t id[16])
{
    size_t mask = ix->cap - 1;
    for (size_t i = slot_hash(id) & mask;; i = (i + 1) & mask)
        if (!ix->slots[i] || memcmp(ix->slots[i]->id, id, 16) == 0) return i;
}

static void grow(struct kv_tier_index *ix)
{
    size_t old_cap = ix->cap;
    struct kv_tier_entry **old = ix->slots;
    ix->cap = old_cap ? 2 * old_cap : 64;
    ix->slots = xcalloc(ix->cap, sizeof(*ix->slots));
    for (size_t i = 0; i < old_cap; i++)
        if (old[i]) ix->slots[find_slot(ix, old[i]->id)] = old[i];
    free(old);
}

struct kv_tier_entry *kv_tier_index_find(const struct kv_tier_index *ix, const uint8_t id[16])
{
    if (!ix->cap) return NULL;
    return ix->slots[find_slot(ix, id)];
}

/* ---- lists ---- */

static struct kv_tier_list *list_of(struct kv_tier_index *ix, const struct kv_tier_entry *e)
{
    return e->protect ? &ix->protected_ : &ix->probation;
}

static void list_unlink(struct kv_tier_list *l, struct kv_tier_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        l->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_insert_before(struct kv_tier_list *l, struct kv_tier_entry *at,
                               struct kv_tier_entry *e)
{
    e->next = at;
    e->prev = at->prev;
    if (at->prev)
        at->prev->next = e;
    else
        l->head = e;
    at->prev = e;
}

static void list_append(struct kv_tier_list *l, struct kv_tier_entry *e)
{
    e->prev = l->tail;
    e->next = NULL;
    if (l->tail)
        l->tail->next = e;
    else
        l->head = e;
    l->tail = e;
}

/* Moves e to the tail of protected (to_protect) or probation. */
static void place(struct kv_tier_index *ix, struct kv_tier_entry *e, bool to_protect)
{
    list_unlink(list_of(ix, e), e);
    if (e->protect) ix->prot_used -= e->bytes;
    e->protect = to_protect;
    if (to_protect) ix->prot_used += e->bytes;
    list_append(list_of(ix, e), e);
}

/* SLRU: protected beyond its bound gives its oldest back to probation. */
static void ghost_put(struct kv_tier_index *ix, const uint8_t id[16]);

static void rebalance(struct kv_tier_index *ix)
{
    while (ix->prot_used > ix->protect_bytes && ix->protected_.head) {
        place(ix, ix->protected_.head, false);
        ix->demotions++;
    }
}

/* ---- ghost ---- */

static size_t ghost_find(const struct kv_tier_index *ix, const uint8_t id[16])
{
    size_t mask = ix->ghost_slots_cap - 1;
    for (size_t i = slot_hash(id) & mask;; i = (i + 1) & mask)
        if (!ix->ghost_slots[i].full || memcmp(ix->ghost_slots[i].id, id, 16) == 0) return i;
}

static void ghost_delete_slot(struct kv_tier_index *ix, size_t i)
{
    size_t mask = ix->ghost_slots_cap - 1;
    ix->ghost_slots[i].full = false;
    for (size_t j = (i + 1) & mask; ix->ghost_slots[j].full; j = (j + 1) & mask) {
        size_t home = slot_hash(ix->ghost_slots[j].id) & mask;
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        ix->ghost_slots[i] = ix->ghost_slots[j];
        ix->ghost_slots[j].full = false;
        i = j;
    }
    ix->ghost_n--;
}

bool kv_tier_index_ghost_has(const struct kv_tier_index *ix, const uint8_t id[16])
{
    return ix->ghost_cap && ix->ghost_slots[ghost_find(ix, id)].full;
}

/* Takes id out of the ghost; whether it was there. */
static bool ghost_take(struct kv_tier_index *ix, const uint8_t id[16])
{
    if (!ix->ghost_cap) return false;
    size_t i = ghost_find(ix, id);
    if (!ix->ghost_slots[i].full) return false;
    ghost_delete_slot(ix, i);
    return true;
}

static void ghost_put(struct kv_tier_index *ix, const uint8_t id[16])
{
    if (!ix->ghost_cap) return;
    size_t pos = ix->ghost_next;
    /* The ring slot's old id leaves the ghost, if the set still has it
     * there (it may have left already, by a store, or been put again). */
    size_t old = ghost_find(ix, ix->ghost_ring[pos]);
    if (ix->ghost_slots[old].full && ix->ghost_slots[old].pos == pos) ghost_delete_slot(ix, old);
    size_t i = ghost_find(ix, id);
    if (ix->ghost_slots[i].full) ghost_delete_slot(ix, i), i = ghost_find(ix, id);
    memcpy(ix->ghost_ring[pos], id, 16);
    ix->ghost_slots[i] = (struct kv_tier_ghost_slot){.pos = (uint32_t)pos, .full = true};
    memcpy(ix->ghost_slots[i].id, id, 16);
    ix->ghost_n++;
    ix->ghost_next = (pos + 1) % ix->ghost_cap;
}

/* ---- operations ---- */

struct kv_tier_entry *kv_tier_index_add(struct kv_tier_index *ix, const uint8_t id[16],
                                        uint64_t bytes, int64_t stored, int64_t expires)
{
    if (2 * (ix->n + 1) > ix->cap) grow(ix);
    size_t i = find_slot(ix, id);
    CHECK(!ix->slots[i]);
    struct kv_tier_entry *e = xcalloc(1, sizeof(*e));
    memcpy(e->id, id, 16);
    e->bytes = bytes;
    e->stored = stored;
    e->expires = expires;
    ix->slots[i] = e;
    ix->n++;
    ix->used += bytes;
    bool recalled = ghost_take(ix, id);
    if (recalled) ix->ghost_hits++;
    e->protect = ix->policy == KV_EVICT_SLRU && recalled;
    if (e->protect) ix->prot_used += bytes;
    list_append(list_of(ix, e), e);
    if (e->protect) rebalance(ix);
    return e;
}

void kv_tier_index_remove(struct kv_tier_index *ix, struct kv_tier_entry *e)
{
    size_t mask = ix->cap - 1, i = find_slot(ix, e->id);
    CHECK(ix->slots[i] == e);
    ix->slots[i] = NULL;
    /* Backward shift: pull each later entry of the run into the hole when
     * its home slot does not lie cyclically in (hole, its slot]. */
    for (size_t j = (i + 1) & mask; ix->slots[j]; j = (j + 1) & mask) {
        size_t home = slot_hash(ix->slots[j]->id) & mask;
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        ix->slots[i] = ix->slots[j];
        ix->slots[j] = NULL;
        i = j;
    }
    ix->n--;
    ix->used -= e->bytes;
    if (e->protect) ix->prot_used -= e->bytes;
    list_unlink(list_of(ix, e), e);
    free(e);
}

void kv_tier_index_evict(struct kv_tier_index *ix, struct kv_tier_entry *e)
{
    ghost_put(ix, e->id);
    kv_tier_index_remove(ix, e);
}

void kv_tier_index_used(struct kv_tier_index *ix, struct kv_tier_entry *e)
{
    if (ix->policy == KV_EVICT_SLRU) {
        if (!e->protect) ix->promotions++;
        place(ix, e, true);
        rebalance(ix);
    } else if (ix->probation.tail != e) {
        place(ix, e, false);
    }
}

bool kv_tier_index_admit(struct kv_tier_index *ix, const uint8_t id[16])
{
    if (ix->admit == KV_ADMIT_ALL || !ix->ghost_cap || kv_tier_index_ghost_has(ix, id)) return true;
    ghost_put(ix, id);
    ix->rejected++;
    return false;
}

void kv_tier_index_chain(struct kv_tier_index *ix, struct kv_tier_entry *e, const uint8_t *parent)
{
    struct kv_tier_entry *p = parent ? kv_tier_index_find(ix, parent) : NULL;
    /* A block follows its parent down to probation (so a prompt's blocks
     * leave deepest first, whichever segment they were in), never up: a
     * new block under a protected parent has still to earn protection. */
    if (!p || p == e || (p->protect && !e->protect)) return;
    list_unlink(list_of(ix, e), e);
    if (e->protect && !p->protect) {
        ix->prot_used -= e->bytes;
        e->protect = false;
    }
    list_insert_before(list_of(ix, e), p, e);
}

struct kv_tier_entry *kv_tier_index_victim(struct kv_tier_index *ix, int64_t now)
{
    (void)now; /* expired blocks leave on access and by the tiers' sweeps */
    rebalance(ix);
    return ix->probation.head ? ix->probation.head : ix->protected_.head;
}

struct kv_tier_entry *kv_tier_index_victim_for(struct kv_tier_index *ix, int64_t now,
                                               const uint8_t id[16], const uint8_t *parent)
{
    struct kv_tier_entry *v = kv_tier_index_victim(ix, now);
    bool below_cut = parent && ix->cut_valid && memcmp(parent, ix->cut_id, 16) == 0;
    if (v && !below_cut && !(parent && memcmp(v->id, parent, 16) == 0)) return v;
    if (!v) return NULL;
    memcpy(ix->cut_id, id, 16);
    ix->cut_valid = true;
    ix->cut++;
    return NULL;
}

struct kv_tier_entry *kv_tier_index_first(const struct kv_tier_index *ix)
{
    return ix->probation.head ? ix->probation.head : ix->protected_.head;
}

struct kv_tier_entry *kv_tier_index_next(const struct kv_tier_index *ix,
                                         const struct kv_tier_entry *e)
{
    if (e->next) return e->next;
    return e->protect ? NULL : ix->protected_.head;
}

void kv_tier_index_release(struct kv_tier_index *ix, void (*free_data)(void *data))
{
    for (struct kv_tier_entry *e = kv_tier_index_first(ix), *n; e; e = n) {
        n = kv_tier_index_next(ix, e);
        if (free_data) free_data(e->data);
        free(e);
    }
    free(ix->slots);
    free(ix->ghost_ring);
    free(ix->ghost_slots);
    struct kv_tier_policy p = {.evict = ix->policy, .admit = ix->admit};
    kv_tier_index_init(ix, &p);
}

int kv_evict_policy_parse(const char *s, enum kv_evict_policy *out)
{
    if (!strcmp(s, "slru")) return *out = KV_EVICT_SLRU, 0;
    if (!strcmp(s, "lru")) return *out = KV_EVICT_LRU, 0;
    return -1;
}

const char *kv_evict_policy_name(enum kv_evict_policy p)
{
    return p == KV_EVICT_LRU ? "lru" : "slru";
}

int kv_admit_policy_parse(const char *s, enum kv_admit_policy *out)
{
    if (!strcmp(s, "all")) return *out = KV_ADMIT_ALL, 0;
    if (!strcmp(s, "seen")) return *out = KV_ADMIT_SEEN, 0;
    return -1;
}

const char *kv_admit_policy_name(enum kv_admit_policy p)
{
    return p == KV_ADMIT_SEEN ? "seen" : "all";
}
