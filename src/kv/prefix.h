/*
 * prefix.h - the prefix cache: an index of KV blocks by content, so a request
 * whose prompt starts like an earlier one attaches those blocks instead of
 * recomputing them.
 *
 * Block ids are content addresses. A block holding positions
 * [i*bt, (i+1)*bt) of a sequence is named
 *
 *   id(i) = XXH3-128( engine fingerprint | id(i-1) | extra key | tokens of block i )
 *
 * with id(-1) = 0. The engine fingerprint covers the weights, the tokenizer,
 * the KV element type, the block size and the numerics version
 * (inferd_engine_fingerprint), so an id never names KV that another model,
 * precision or kernel version computed. The parent id makes a block's id
 * cover the whole prefix before it: equal ids mean equal tokens at equal
 * positions, hence (the forward pass being bit-exact) bitwise equal K and V.
 * The extra key is the hash of a per-request cache salt (tenant isolation;
 * zero without one); image hashes would join it. Only full blocks get ids.
 *
 *   chain:  [blk 0] <- [blk 1] <- [blk 2] <- [blk 3, partial: no id]
 *
 * The index maps id -> pool block for every block it holds ("cached"),
 * referenced by sequences or not. Cached blocks whose refcount is zero sit on
 * an LRU list instead of the pool's free list:
 *
 *   LRU head (evicted first) <-> ... <-> LRU tail (released last)
 *
 * A finished or preempted sequence releases its blocks tail first, so the
 * head of a chain - the part most prompts share - joins the LRU last and is
 * evicted last. When the pool's free list is empty, kv_pool_alloc evicts the
 * LRU head: the block leaves the index and is handed out as a fresh block.
 * A hit takes a block off the LRU (refcount 0 -> 1) or just adds a reference
 * if a running sequence holds it already; shared blocks are read-only, since
 * sequences only write positions past the blocks they attached.
 *
 * Invariants: a block is in at most one of {free list, LRU, referenced};
 * every LRU block is cached; no two cached blocks share an id.
 *
 * Events: when enabled, every block entering the index (stored) or leaving it
 * (evicted) is appended to an event list the engine drains; a global prefix
 * index across workers is built from these.
 *
 * Export / import: a cached block travels as one frame, in the format of
 * kv/frame.h (its codec): the seam tiers and prefill->decode transfer build
 * on.
 *
 * A frame is external input: import checks every field and the checksum and
 * refuses with a message naming what was wrong; a corrupt block is a miss,
 * never wrong output. The id itself cannot be checked against the bytes (it
 * names the tokens, which the frame does not carry): peers are trusted to
 * name blocks truthfully, as they are trusted to compute them.
 *
 * Lifetime: arrays sized for the pool at init, process lifetime. Thread
 * safety: owned by the engine thread, like the pool.
 * Reference: vLLM's automatic prefix caching (hash chains over full blocks,
 * an LRU of free cached blocks evicted tail-of-chain first).
 */
#ifndef INFERD_KV_PREFIX_H
#define INFERD_KV_PREFIX_H

#include "kv/frame.h"
#include "kv/pool.h"

#include <stdbool.h>
#include <stdint.h>

/* A content address: XXH3-128, high word first. */
struct kv_block_id {
    uint64_t hi; /* high 64 bits */
    uint64_t lo; /* low 64 bits */
};

enum kv_prefix_event_kind {
    KV_PREFIX_EVENT_STORED, /* block entered the index */
    KV_PREFIX_EVENT_EVICTED /* block left the index (its memory was reused) */
};

struct kv_prefix_event {
    enum kv_prefix_event_kind kind; /* what happened */
    struct kv_block_id id;          /* which block */
};

struct kv_prefix {
    struct kv_pool *pool;           /* the blocks indexed; pool->prefix points back */
    uint8_t fingerprint[16];        /* engine fingerprint hashed into every id */
    struct kv_block_id *ids;        /* (n_blocks) id of each cached block */
    bool *cached;                   /* (n_blocks) block is in the index */
    int32_t *bucket;                /* (bucket_mask + 1) first block of each chain, -1 */
    int32_t *hnext;                 /* (n_blocks) next block in the same bucket, -1 */
    uint32_t bucket_mask;           /* buckets - 1 (a power of two) */
    int32_t *prev, *next;           /* (n_blocks) LRU neighbours, -1 at the ends */
    int32_t lru_head;               /* least recently released cached block, -1 */
    int32_t lru_tail;               /* most recently released, -1 */
    int n_lru;                      /* blocks on the LRU (cached, refcount 0) */
    int n_cached;                   /* blocks in the index */
    uint64_t n_stored;              /* blocks ever entered */
    uint64_t n_evicted;             /* blocks ever evicted */
    bool record_events;             /* append to events */
    struct kv_prefix_event *events; /* (n_events) undrained events, oldest first */
    int n_events, cap_events;       /* count, allocated */
    uint8_t *scratch;               /* (48 + 4 * block_tokens) bytes hashed per block id */
    /* Called by kv__prefix_evict before a block leaves the index, while it
     * is still cached and its bytes intact (write-back tiers save it). */
    void (*evict_hook)(void *ctx, const struct kv_block_id *id);
    void *evict_ctx; /* for evict_hook */
};

/* Indexes the blocks of pool p (which must have no cached blocks yet) and
 * links p to it. fingerprint: 16 bytes (see above). */
void kv_prefix_init(struct kv_prefix *px, struct kv_pool *p, const uint8_t fingerprint[16]);
/* Unlinks the pool and frees the index; cached unreferenced blocks go back to
 * the pool's free list. */
void kv_prefix_release(struct kv_prefix *px);

/* The extra key of a request: XXH3-128 of its cache salt, or zero for none
 * (NULL or empty salt). */
struct kv_block_id kv_prefix_extra_key(const char *salt, size_t len);

/* Id of the block with these block_tokens tokens after parent (NULL: the
 * first block) under an engine fingerprint: the one definition of a block
 * id. scratch: 48 + 4 * block_tokens bytes. Pure: the same inputs give the
 * same id in any process. */
struct kv_block_id kv_block_id_compute(const uint8_t fingerprint[16], int block_tokens,
                                       const struct kv_block_id *parent,
                                       const struct kv_block_id *extra, const int32_t *tokens,
                                       uint8_t *scratch);
/* kv_block_id_compute with px's fingerprint, block size and scratch. */
struct kv_block_id kv_prefix_block_id(struct kv_prefix *px, const struct kv_block_id *parent,
                                      const struct kv_block_id *extra, const int32_t *tokens);

/* Attaches to the empty table s the longest run of cached blocks named by
 * ids[0..n): each gains a reference (leaving the LRU if it was on it).
 * Returns the number of blocks attached. */
int kv_prefix_match(struct kv_prefix *px, const struct kv_block_id *ids, int n, struct kv_seq *s);

/* Enters blocks [from, n) of s, fully computed, under ids[from..n). A block
 * already cached, or whose id names another cached block (two sequences
 * computed the same prefix), is left out. */
void kv_prefix_commit(struct kv_prefix *px, const struct kv_seq *s, const struct kv_block_id *ids,
                      int from, int n);

/* Whether a block with this id is cached; *block receives it (may be NULL). */
bool kv_prefix_lookup(const struct kv_prefix *px, const struct kv_block_id *id, int32_t *block);

/* Moves up to cap pending events to out, oldest first; returns how many. */
int kv_prefix_take_events(struct kv_prefix *px, struct kv_prefix_event *out, int cap);

/* The 16-byte form of an id used outside the process: hi then lo, each
 * big-endian. */
void kv_block_id_to_bytes(const struct kv_block_id *id, uint8_t out[16]);
struct kv_block_id kv_block_id_from_bytes(const uint8_t in[16]);

/* Bytes of one exported block frame. */
size_t kv_prefix_frame_bytes(const struct kv_prefix *px);
/* Writes the cached block named id as a frame into buf (cap bytes).
 * Returns 0, ERR_NOT_FOUND (not cached) or ERR_INVALID (cap too small). */
int kv_prefix_export(const struct kv_prefix *px, const struct kv_block_id *id, void *buf,
                     size_t cap);
/* Enters the block in a frame into the index (on the LRU tail, unreferenced,
 * as if a sequence had released it), taking a free or evicted block.
 * Returns 0 (also if the id was cached already), ERR_FORMAT (bad magic,
 * size or checksum), ERR_INVALID (another fingerprint or layout) or
 * ERR_NO_KV (every block referenced), with a message. */
int kv_prefix_import(struct kv_prefix *px, const void *buf, size_t len, struct err_msg *msg);
/* Enters id into the index as a cached, unreferenced block (the LRU's most
 * recent end) and gives its block number: import's bookkeeping, without the
 * contents (the caller writes them, or a simulated pool has none). Returns 0,
 * 1 when the id was cached already (block: that one), or ERR_NO_KV. */
int kv_prefix_adopt(struct kv_prefix *px, const struct kv_block_id *id, int32_t *block);

/* Used by pool.c: a cached block's refcount reached zero -> LRU tail. */
void kv__prefix_park(struct kv_prefix *px, int32_t block);
/* Used by pool.c: evicts the LRU head (removing it from the index) and
 * returns it, refcount 0; -1 when the LRU is empty. */
int32_t kv__prefix_evict(struct kv_prefix *px);

#endif
