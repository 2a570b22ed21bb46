/*
 * tier_index.c - id -> entry table and recency list of the RAM and disk
 * tiers (tier_index.h).
 */
#include "kv/tier_index.h"

#include "base/check.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t slot_hash(const uint8_t id[16])
{
    uint64_t h;
    memcpy(&h, id, 8);
    return h;
}

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

static void list_unlink(struct kv_tier_index *ix, struct kv_tier_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        ix->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        ix->tail = e->prev;
    e->prev = e->next = NULL;
}

static void list_append(struct kv_tier_index *ix, struct kv_tier_entry *e)
{
    e->prev = ix->tail;
    e->next = NULL;
    if (ix->tail)
        ix->tail->next = e;
    else
        ix->head = e;
    ix->tail = e;
}

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
    list_append(ix, e);
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
    list_unlink(ix, e);
    free(e);
}

void kv_tier_index_used(struct kv_tier_index *ix, struct kv_tier_entry *e)
{
    if (ix->tail == e) return;
    list_unlink(ix, e);
    list_append(ix, e);
}

struct kv_tier_entry *kv_tier_index_victim(struct kv_tier_index *ix, int64_t now)
{
    (void)now; /* plain recency; the policy module will weigh more */
    return ix->head;
}

void kv_tier_index_release(struct kv_tier_index *ix, void (*free_data)(void *data))
{
    for (struct kv_tier_entry *e = ix->head, *n; e; e = n) {
        n = e->next;
        if (free_data) free_data(e->data);
        free(e);
    }
    free(ix->slots);
    memset(ix, 0, sizeof(*ix));
}
