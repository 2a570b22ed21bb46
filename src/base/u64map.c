/*
 * u64map.c - open addressing with backward-shift deletion (u64map.h).
 */
#include "base/u64map.h"

#include "base/check.h"

#include <stdbool.h>
#include <stdlib.h>

/* Fibonacci hashing: the top bits of key * 2^64/phi spread sequential keys
 * (tags are sequential) over the whole table. */
static size_t slot_of(const struct u64map *m, uint64_t key)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (m->cap - 1);
}

static void grow(struct u64map *m)
{
    struct u64map old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->slots = xcalloc(m->cap, sizeof(*m->slots));
    m->n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].key) u64map_put(m, old.slots[i].key, old.slots[i].val);
    free(old.slots);
}

void u64map_put(struct u64map *m, uint64_t key, void *val)
{
    CHECK(key != 0);
    if ((m->n + 1) * 2 > m->cap) grow(m);
    size_t i = slot_of(m, key);
    while (m->slots[i].key && m->slots[i].key != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->slots[i].key) m->n++;
    m->slots[i].key = key;
    m->slots[i].val = val;
}

void *u64map_get(const struct u64map *m, uint64_t key)
{
    if (!m->cap || !key) return NULL;
    for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        if (m->slots[i].key == key) return m->slots[i].val;
        if (!m->slots[i].key) return NULL;
    }
}

void u64map_del(struct u64map *m, uint64_t key)
{
    if (!m->cap || !key) return;
    size_t i = slot_of(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key) return;
        i = (i + 1) & (m->cap - 1);
    }
    m->n--;
    /* Shift later members of the run back over the hole while their home
     * slot is not between the hole and them (cyclically). */
    size_t hole = i;
    for (size_t j = (i + 1) & (m->cap - 1); m->slots[j].key; j = (j + 1) & (m->cap - 1)) {
        size_t home = slot_of(m, m->slots[j].key);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        m->slots[hole] = m->slots[j];
        hole = j;
    }
    m->slots[hole].key = 0;
    m->slots[hole].val = NULL;
}

void u64map_release(struct u64map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}
