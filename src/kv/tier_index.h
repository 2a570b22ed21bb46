/*
 * tier_index.h - the in-memory index of a tier that owns its medium (RAM,
 * disk): block id -> entry, the bytes held, and the order in which blocks
 * are given up when the tier is full (the eviction policy).
 *
 *   slots   open addressing by the id's first 8 bytes (ids are XXH3-128
 *           outputs: already uniform), linear probing, deletion by backward
 *           shift (no tombstones); grows at 1/2 load
 *   lists   two recency lists, head = least recently used:
 *             probation  blocks stored once and not used since
 *             protected  blocks used again (a hit, a second store), or
 *                        stored again after an eviction the ghost recalls
 *   ghost   the ids of the last evicted blocks (no data: 16 bytes each), a
 *           FIFO of ghost_cap ids
 *
 *   probation head (victim) <-> ... <-> tail     stored once
 *   protected head (demoted) <-> ... <-> tail    used again
 *
 * Policies (kv_evict_policy):
 *
 *   SLRU  segmented LRU with a ghost history. A new block enters probation;
 *         a hit moves it to protected's tail. Protected holds at most
 *         protect_bytes: beyond that its head is demoted to probation's tail
 *         (one more chance, not an eviction). The victim is probation's
 *         head (protected's when probation is empty). An evicted block's id
 *         goes to the ghost; a block stored again while the ghost recalls
 *         it was reused after leaving, so it enters protected directly.
 *         Most blocks are never used twice (one-off prompts); these pass
 *         through probation without pushing out the blocks that are.
 *   LRU   one recency list (protected unused): the victim is the least
 *         recently stored or used block. The baseline `inferd sim cache`
 *         compares against.
 *
 * Eviction goes through kv_tier_index_victim (the policy picks) and
 * kv_tier_index_evict (the ghost remembers); kv_tier_index_remove takes an
 * entry out without the ghost (corrupt, expired, deleted).
 *
 * Invariants: every entry is in slots and on exactly one list; used is the
 * sum of the entries' bytes, prot_used that of the protected ones; every
 * ghost id is in ghost_slots exactly once, at the ring position it holds.
 *
 * Lifetime: caller-owned struct, set up by kv_tier_index_init and
 * kv_tier_index_set_capacity (a zero-initialised one is an empty SLRU
 * index with no protected room and no ghost: plain LRU in effect); entries are
 * heap objects owned by the index, freed by kv_tier_index_remove and
 * kv_tier_index_release. Thread safety: none; the tier's one user.
 */
#ifndef INFERD_KV_TIER_INDEX_H
#define INFERD_KV_TIER_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kv_evict_policy {
    KV_EVICT_SLRU, /* segmented LRU + ghost (the default) */
    KV_EVICT_LRU,  /* plain recency */
};

/* Which new blocks a tier stores at all (kv_tier_index_admit). */
enum kv_admit_policy {
    KV_ADMIT_ALL,  /* every block offered */
    KV_ADMIT_SEEN, /* only a block offered before: the first offer only puts
                      its id in the ghost (a "doorkeeper"); one-off blocks
                      never take room (needs a ghost: SLRU) */
};

/* A tier's policies, as flags set them (zero: SLRU, admit all). */
struct kv_tier_policy {
    enum kv_evict_policy evict;
    enum kv_admit_policy admit;
};

struct kv_tier_entry {
    uint8_t id[16];             /* block id */
    bool protect;               /* on the protected list */
    int64_t expires;            /* unix seconds: a miss after this */
    int64_t stored;             /* unix seconds: first written */
    uint64_t bytes;             /* counted against the capacity */
    struct kv_tier_entry *prev; /* its list, towards the head */
    struct kv_tier_entry *next; /* its list, towards the tail */
    void *data;                 /* the tier's (RAM: the frame); freed by the tier */
};

struct kv_tier_list {
    struct kv_tier_entry *head; /* least recently used */
    struct kv_tier_entry *tail; /* most recently used */
};

struct kv_tier_ghost_slot {
    uint8_t id[16];
    uint32_t pos; /* its place in the ring */
    bool full;
};

struct kv_tier_index {
    enum kv_evict_policy policy;
    enum kv_admit_policy admit;
    struct kv_tier_entry **slots; /* (cap), NULL: empty */
    size_t cap;                   /* a power of two, or 0 */
    size_t n;                     /* entries */
    uint64_t used;                /* sum of the entries' bytes */
    uint64_t prot_used;           /* of the protected entries */
    uint64_t protect_bytes;       /* SLRU: protected's bound */
    struct kv_tier_list probation;
    struct kv_tier_list protected_;
    /* ghost: ring (ghost_cap ids, oldest at ghost_next once full) + set */
    uint8_t (*ghost_ring)[16];
    size_t ghost_cap, ghost_n, ghost_next;
    struct kv_tier_ghost_slot *ghost_slots; /* (ghost_slots_cap) */
    size_t ghost_slots_cap;                 /* a power of two >= 2 ghost_cap */
    /* counters for `inferd sim cache` and the tiers' logs */
    uint64_t ghost_hits; /* stores of ids the ghost recalled */
    uint64_t promotions; /* probation -> protected */
    uint64_t demotions;  /* protected -> probation */
    uint64_t rejected;   /* offers kv_tier_index_admit turned down */
    uint64_t cut;        /* stores kv_tier_index_victim_for turned down */
    uint8_t cut_id[16];  /* the last id so turned down */
    bool cut_valid;
};

#define KV_TIER_GHOST_PER_ENTRY 4   /* ghost ids per entry that fits */
#define KV_TIER_PROTECT_SHARE   0.7 /* SLRU: protected's share of the capacity */

/* Sets up an empty index with the given policies. */
void kv_tier_index_init(struct kv_tier_index *ix, const struct kv_tier_policy *p);
/* Tells the policy the tier's bound: protected's bound is protect_share
 * of capacity_bytes; the ghost (allocated once, on the first call with a
 * non-zero entry_bytes) holds KV_TIER_GHOST_PER_ENTRY ids per entry of
 * entry_bytes that fits. */
void kv_tier_index_set_capacity(struct kv_tier_index *ix, uint64_t capacity_bytes,
                                uint64_t entry_bytes, double protect_share);

/* The entry of id, or NULL. */
struct kv_tier_entry *kv_tier_index_find(const struct kv_tier_index *ix, const uint8_t id[16]);
/* Adds a new entry for id (not present: a bug otherwise): at probation's
 * tail, or protected's when the ghost recalls id (SLRU). */
struct kv_tier_entry *kv_tier_index_add(struct kv_tier_index *ix, const uint8_t id[16],
                                        uint64_t bytes, int64_t stored, int64_t expires);
/* Removes and frees e (its data is the caller's to free first). */
void kv_tier_index_remove(struct kv_tier_index *ix, struct kv_tier_entry *e);
/* As kv_tier_index_remove, for an eviction: the ghost remembers e's id. */
void kv_tier_index_evict(struct kv_tier_index *ix, struct kv_tier_entry *e);
/* A hit (or a store of a block held): e moves to protected's tail (LRU:
 * the list's tail). */
void kv_tier_index_used(struct kv_tier_index *ix, struct kv_tier_entry *e);
/* Whether a block not held should be stored (the admission policy);
 * SEEN remembers a turned-down id in the ghost. */
bool kv_tier_index_admit(struct kv_tier_index *ix, const uint8_t id[16]);
/* The prompt-order hint: e (just added or used) is the block after parent
 * in its prompt. When parent is held on the same list, e goes just before
 * it instead of at the tail, so a prompt stored or used in order ends with
 * its first block most recent and its last block nearest eviction: a
 * prompt longer than the tier keeps its leading blocks (the only ones a
 * later lookup can hit, as a hit ends at the first missing block) instead
 * of its trailing ones. parent NULL: no hint (e stays at the tail). */
void kv_tier_index_chain(struct kv_tier_index *ix, struct kv_tier_entry *e, const uint8_t *parent);
/* The entry to give up next to make room, or NULL when empty. */
struct kv_tier_entry *kv_tier_index_victim(struct kv_tier_index *ix, int64_t now);
/* The victim to make room for storing id, whose prompt's previous block is
 * parent (NULL: none), or NULL when id is not worth the room: the victim
 * would be parent itself, or parent was refused so (a prompt longer than
 * the tier keeps its start, which a later request can hit, not its end,
 * which it cannot without the start). Counts the refusals in cut. */
struct kv_tier_entry *kv_tier_index_victim_for(struct kv_tier_index *ix, int64_t now,
                                               const uint8_t id[16], const uint8_t *parent);
/* Whether the ghost holds id. */
bool kv_tier_index_ghost_has(const struct kv_tier_index *ix, const uint8_t id[16]);
/* Visits every entry, probation first, each list from its head. */
struct kv_tier_entry *kv_tier_index_first(const struct kv_tier_index *ix);
struct kv_tier_entry *kv_tier_index_next(const struct kv_tier_index *ix,
                                         const struct kv_tier_entry *e);
/* Frees every entry (data first, through free_data when not NULL), the
 * table and the ghost; ix is empty afterwards (policy kept). */
void kv_tier_index_release(struct kv_tier_index *ix, void (*free_data)(void *data));

/* Parses "slru" or "lru"; -1 otherwise. */
int kv_evict_policy_parse(const char *s, enum kv_evict_policy *out);
const char *kv_evict_policy_name(enum kv_evict_policy p);
/* Parses "all" or "seen"; -1 otherwise. */
int kv_admit_policy_parse(const char *s, enum kv_admit_policy *out);
const char *kv_admit_policy_name(enum kv_admit_policy p);

#endif
