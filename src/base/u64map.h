/*
 * u64map.h - a hash map from non-zero 64-bit keys to pointers: open
 * addressing, linear probing, deletion by backward shift (no tombstones), so
 * a lookup probes at most the run its key hashes into. Grows at 1/2 load.
 *
 * Used where a hot path names objects by number: the server finds a call by
 * its engine request's tag for every token event.
 *
 * Lifetime: caller-owned struct (zero-initialised = empty); u64map_release
 * frees the table. Thread safety: none; one owner.
 */
#ifndef INFERD_BASE_U64MAP_H
#define INFERD_BASE_U64MAP_H

#include <stddef.h>
#include <stdint.h>

struct u64map_slot {
    uint64_t key; /* 0: empty */
    void *val;    /* the value */
};

struct u64map {
    struct u64map_slot *slots; /* (cap) */
    size_t cap;                /* a power of two, or 0 */
    size_t n;                  /* keys present */
};

/* Sets key (non-zero) to val, replacing an earlier value. */
void u64map_put(struct u64map *m, uint64_t key, void *val);
/* The value, or NULL. */
void *u64map_get(const struct u64map *m, uint64_t key);
/* Removes key if present. */
void u64map_del(struct u64map *m, uint64_t key);
void u64map_release(struct u64map *m);

#endif
