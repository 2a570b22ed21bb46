/*
 * pindex.h - the cluster's global prefix index: which worker holds which KV
 * block, built from the workers' KV event streams, asked per request how many
 * of the prompt's leading blocks each worker holds (pol_worker.cached_blocks).
 *
 * Every worker's engine names its KV blocks by content (kv/prefix.h: a hash
 * chain, id(i) covers blocks 0..i) and emits, in order, STORED(id, tier) when
 * a block enters one of its cache tiers and EVICTED(id, tier) when it leaves.
 * The gateway (or a simulator) feeds all workers' events into one pidx. Since
 * block i is only usable after blocks 0..i-1, a match counts the *leading
 * run* of a prompt's ids a worker holds:
 *
 *   prompt ids   b0  b1  b2  b3  b4  b5
 *   worker 0     x   x   x   x   x   x     n_any 6
 *   worker 1     x   x   x   .   x         n_any 3 (b4 alone is useless)
 *   worker 2     .   x                     not a hit (no b0)
 *
 * Tiers: bit t of a holder's tier mask says the block is in tier t; tier 0 is
 * the engine's own pool (attach at no cost), 1.. the worker's lower tiers
 * (RAM, disk, shared: a copy up first). A hit reports both the run held in
 * any tier (n_any) and the run held wholly in tier 0 (n_pool <= n_any).
 *
 * The table. Open addressing keyed by the id's 16 bytes, linear probing,
 * deletion by backward shift (no tombstones, as base/u64map.h), grown at 3/4
 * load. A slot is 32 bytes; its holders - (worker << 4 | tier mask) words,
 * sorted by worker - live in the slot while there are at most PIDX_INLINE of
 * them and spill to a heap array beyond:
 *
 *   slot  [ id: 16 bytes ][ n ][ holder ][ holder ][ holder ]     n <= 3
 *         [ id: 16 bytes ][ n ][  cap   ][ -> holders (cap)  ]    n > 3
 *   n == 0: the slot is empty
 *
 * An id whose last holder leaves is deleted, so memory follows what the
 * workers hold now, not the churn behind it.
 *
 * Each worker's stream is checked by its sequence numbers, as a TCP receiver
 * checks bytes against a receive window:
 *
 *   no state    the first event (after init, pidx_drop_worker) starts the
 *               stream at its own seq; a snapshot starts it at seq + 1
 *   seq < next  PIDX_STALE: a duplicate or a late copy of something applied
 *               or superseded; dropped
 *   seq == next PIDX_APPLIED; then the buffered events that became
 *               contiguous are applied in seq order
 *   next < seq <= next + window
 *               PIDX_BUFFERED: held (a second copy is PIDX_STALE) until the
 *               gap before it fills
 *   seq > next + window, or a malformed event (kind or tier out of range)
 *               PIDX_RESYNC: the missing event is declared lost, so what the
 *               index has for the worker can be wrong: its entries and buffer
 *               are dropped and it needs a snapshot. Until pidx_snapshot every
 *               event of the worker is ignored (PIDX_RESYNC again).
 *
 * The window is a span of seqs, not a count: an event more than window seqs
 * past the missing one means the worker moved on that far, so the gap has
 * had its chance (on in-order arrival after a lost event, the window fills
 * with exactly window held events and the next one resyncs). A snapshot must
 * reach the index before the worker's events after it (in-stream, as the
 * worker sends it); events ignored while waiting for it are not replayed.
 *
 * Costs: pidx_apply is a hash lookup and a short sorted-list edit, amortised
 * O(1) (O(holders of the id) in the list). pidx_match is one lookup per
 * leading block plus a merge of the still-running workers with the block's
 * holders: proportional to the holders of the matched blocks, never to the
 * number of workers. Forgetting a worker (pidx_drop_worker, a resync, a
 * snapshot over earlier state) scans the table once, stopping when its last
 * entry is gone: O(slots), rare (a worker joins, leaves or loses events).
 *
 * Memory: 32 bytes per slot, the table between 3/8 and 3/4 full, so 43 to
 * 85 bytes per distinct id with up to 3 holders; each holder beyond 3 of an
 * id takes 4 to 8 bytes of its spill array (capacity doubles, halves at 1/4).
 * Per worker slot 32 bytes, plus window x 32 bytes of reorder buffer once it
 * has had to hold an event. Lifetime:
 * caller-owned struct (zero-initialised = pidx_init(x, 0)), the table and the
 * buffers on the heap until pidx_release.
 *
 * No I/O, no clock, no globals: the same events give the same index and the
 * same answers. Thread safety: none; one owner (the gateway's event-loop
 * thread, or the simulator).
 *
 * Reference: the KV-event indexers of NVIDIA Dynamo's KV-aware router and
 * llm-d's KV cache manager (block hash -> workers holding it, fed by the
 * engines' stored / removed events).
 */
#ifndef INFERD_CLUSTER_PINDEX_H
#define INFERD_CLUSTER_PINDEX_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PIDX_TIERS          4   /* tier 0 = the engine's pool, 1.. the worker's lower tiers */
#define PIDX_INLINE         3   /* holders kept in the slot before spilling */
#define PIDX_WINDOW_DEFAULT 256 /* reorder window when pidx_init is given <= 0 */
#define PIDX_MAX_WORKER     0x0fffffff /* largest worker slot (28 bits beside the tier mask) */

enum pidx_kind {
    PIDX_STORED, /* the block entered the tier */
    PIDX_EVICTED /* the block left the tier */
};

/* One KV event of one worker, as its stream carries it. */
struct pidx_event {
    uint64_t seq;   /* the worker's event number: consecutive, one stream per worker */
    uint8_t kind;   /* enum pidx_kind */
    uint8_t tier;   /* 0 .. PIDX_TIERS-1 */
    uint8_t id[16]; /* the block id, kv_block_id_to_bytes form */
};

enum pidx_apply_result {
    PIDX_APPLIED,  /* in order: applied (and any buffered events it made contiguous) */
    PIDX_STALE,    /* seq already applied, superseded or buffered: dropped */
    PIDX_BUFFERED, /* ahead of a gap: held in the reorder window */
    PIDX_RESYNC    /* gap lost or stream malformed: the worker needs a snapshot */
};

/* Counters for /metrics. The first two are gauges, the rest only grow. */
struct pidx_stats {
    uint64_t n_blocks;   /* distinct ids with at least one holder */
    uint64_t n_holders;  /* (worker, id) entries, whatever the tiers */
    uint64_t n_applied;  /* events applied, directly or from the buffer */
    uint64_t n_stale;    /* events dropped as PIDX_STALE */
    uint64_t n_buffered; /* events held for a gap (PIDX_BUFFERED) */
    uint64_t n_resyncs;  /* times a worker was declared out of sync */
    uint64_t n_invalid;  /* malformed events (each also a resync) */
    uint64_t n_spill;    /* bytes in holder spill arrays */
};

struct pidx_slot;   /* pindex.c: one table slot */
struct pidx_worker; /* pindex.c: one worker's stream state */

struct pidx {
    struct pidx_slot *slots;     /* (cap) the table; NULL while empty */
    size_t cap;                  /* slots, a power of two, or 0 */
    struct pidx_worker *workers; /* (n_workers) state per worker slot */
    int n_workers;               /* worker slots allocated (doubling past the largest seen) */
    int window;                  /* reorder window in seqs; <= 0: PIDX_WINDOW_DEFAULT */
    struct pidx_stats stats;     /* counters (read them directly) */
};

/* An empty index whose workers' streams may run up to reorder_window seqs
 * ahead of a missing event (<= 0: PIDX_WINDOW_DEFAULT). */
void pidx_init(struct pidx *x, int reorder_window);
/* Frees the table, the spill arrays and the worker states; x is then empty
 * (pidx_init's state with the same window). */
void pidx_release(struct pidx *x);

/* Worker slots are small non-negative ints chosen by the caller (the index
 * in its worker table), at most PIDX_MAX_WORKER: a slot out of range is a
 * caller bug and aborts. The index grows to fit the largest one seen. */

/* Feeds one event of worker's stream (see the top of this file). ev is
 * external input: a kind or tier out of range resyncs the worker, it never
 * aborts. Returns an enum pidx_apply_result; on PIDX_RESYNC the caller asks
 * the worker for a snapshot. ev is copied if buffered. */
int pidx_apply(struct pidx *x, int worker, const struct pidx_event *ev);

/* Replaces what the index has for worker by a snapshot: the n blocks ids[i]
 * it holds in tier tiers[i] (a block in several tiers appears once per tier)
 * as of its event seq, so its next event is seq + 1. Clears needs_resync.
 * Buffered events the snapshot covers (seq and before) are dropped, later
 * ones stay and are applied once contiguous. ids and tiers are external
 * input, read and not kept. Returns 0, or ERR_INVALID (a tier out of range:
 * nothing changed). */
int pidx_snapshot(struct pidx *x, int worker, uint64_t seq, const uint8_t (*ids)[16],
                  const uint8_t *tiers, int n);

/* The worker is gone: forgets its entries, its buffer and its stream state,
 * so its next event (a restarted worker numbering from anywhere) starts a
 * new stream. */
void pidx_drop_worker(struct pidx *x, int worker);

/* Whether worker lost events and waits for a snapshot. */
bool pidx_needs_resync(const struct pidx *x, int worker);
/* Entries (ids) the index has for worker. */
uint64_t pidx_worker_blocks(const struct pidx *x, int worker);

/* A worker holding the first block of a prompt. */
struct pidx_hit {
    int worker; /* its slot */
    int n_any;  /* leading blocks it holds, each in some tier (>= 1) */
    int n_pool; /* leading blocks it holds all in tier 0 (<= n_any) */
};

/* For a prompt's block ids[0..n) in order: every worker holding ids[0],
 * with the length of the leading run it holds (struct pidx_hit). Writes the
 * first min(cap, result) hits to out, sorted by worker ascending, and
 * returns how many workers hold ids[0] (may exceed cap). Costs what the
 * matched blocks' holders add up to (see above); allocates only when more
 * than 256 workers hold ids[0]. */
int pidx_match(const struct pidx *x, const uint8_t (*ids)[16], int n, struct pidx_hit *out,
               int cap);

/* Bytes the index has allocated: table, spill arrays, worker states and
 * reorder buffers. */
size_t pidx_bytes(const struct pidx *x);

#endif
