/*
 * tier_index.h - the in-memory index of a tier that owns its medium (RAM,
 * disk): block id -> entry, the bytes held, and the order in which blocks
 * are given up when the tier is full.
 *
 *   slots   open addressing by the id's first 8 bytes (ids are XXH3-128
 *           outputs: already uniform), linear probing, deletion by backward
 *           shift (no tombstones); grows at 1/2 load
 *   order   a recency list: head = least recently used (evicted first),
 *           tail = most recently stored or hit
 *
 *   head (victim) <-> ... <-> tail (last used)
 *
 * Eviction goes through one function, kv_tier_index_victim, which picks the
 * recency list's head: the seam where the eviction policy (kv/policy.h)
 * takes over. A victim whose TTL has passed counts as an expiration, any
 * other as an eviction (the tier's counters).
 *
 * Invariants: every entry is in slots and on the list exactly once; used
 * is the sum of the entries' bytes.
 *
 * Lifetime: caller-owned struct (zero-initialised = empty); entries are
 * heap objects owned by the index, freed by kv_tier_index_remove and
 * kv_tier_index_release. Thread safety: none; the tier's one user.
 */
#ifndef INFERD_KV_TIER_INDEX_H
#define INFERD_KV_TIER_INDEX_H

#include <stddef.h>
#include <stdint.h>

struct kv_tier_entry {
    uint8_t id[16];             /* block id */
    int64_t expires;            /* unix seconds: a miss after this */
    int64_t stored;             /* unix seconds: first written */
    uint64_t bytes;             /* counted against the capacity */
    struct kv_tier_entry *prev; /* recency list, towards the head */
    struct kv_tier_entry *next; /* recency list, towards the tail */
    void *data;                 /* the tier's (RAM: the frame); freed by the tier */
};

struct kv_tier_index {
    struct kv_tier_entry **slots; /* (cap), NULL: empty */
    size_t cap;                   /* a power of two, or 0 */
    size_t n;                     /* entries */
    uint64_t used;                /* sum of the entries' bytes */
    struct kv_tier_entry *head;   /* least recently used */
    struct kv_tier_entry *tail;   /* most recently used */
};

/* The entry of id, or NULL. */
struct kv_tier_entry *kv_tier_index_find(const struct kv_tier_index *ix, const uint8_t id[16]);
/* Adds a new entry for id (not present: a bug otherwise) at the recent end. */
struct kv_tier_entry *kv_tier_index_add(struct kv_tier_index *ix, const uint8_t id[16],
                                        uint64_t bytes, int64_t stored, int64_t expires);
/* Removes and frees e (its data is the caller's to free first). */
void kv_tier_index_remove(struct kv_tier_index *ix, struct kv_tier_entry *e);
/* A hit: e becomes the most recently used. */
void kv_tier_index_used(struct kv_tier_index *ix, struct kv_tier_entry *e);
/* The entry to give up next to make room (the least recently used), or
 * NULL when empty. */
struct kv_tier_entry *kv_tier_index_victim(struct kv_tier_index *ix, int64_t now);
/* Frees every entry (data first, through free_data when not NULL) and the
 * table; ix is empty afterwards. */
void kv_tier_index_release(struct kv_tier_index *ix, void (*free_data)(void *data));

#endif
