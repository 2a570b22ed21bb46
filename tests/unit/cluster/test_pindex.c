/*
 * test_pindex.c - the global prefix index (cluster/pindex.h): leading runs
 * across workers and tiers, idempotent stores and harmless evictions, the
 * sequence check (reordering within the window, duplicates, a lost event,
 * resync and snapshot), dropping a worker, ids freed with their last
 * holder, long holder lists, a large worker slot, and a randomized run
 * against a naive model (per worker a tier mask per id).
 */
#include "test.h"

#include "base/err.h"
#include "base/rng.h"
#include "cluster/pindex.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* The id of block i of chain c: 16 arbitrary-looking bytes. */
static void id_of(int c, int i, uint8_t id[16])
{
    uint64_t st = (uint64_t)c << 32 | (uint32_t)i;
    uint64_t a = rng_next(&st), b = rng_next(&st);
    memcpy(id, &a, 8);
    memcpy(id + 8, &b, 8);
}

/* Chain c's first n ids. */
static void chain(int c, int n, uint8_t (*ids)[16])
{
    for (int i = 0; i < n; i++)
        id_of(c, i, ids[i]);
}

static struct pidx_event ev(uint64_t seq, int kind, int tier, int c, int i)
{
    struct pidx_event e = {.seq = seq, .kind = (uint8_t)kind, .tier = (uint8_t)tier};
    id_of(c, i, e.id);
    return e;
}

/* Worker stream helper: applies the next event of worker w (seqs from 0)
 * and expects it applied. */
static uint64_t seqs[2048];

static void put(struct pidx *x, int w, int kind, int tier, int c, int i)
{
    struct pidx_event e = ev(seqs[w]++, kind, tier, c, i);
    EXPECT_EQ_INT(pidx_apply(x, w, &e), PIDX_APPLIED);
}

static void reset_seqs(void)
{
    memset(seqs, 0, sizeof(seqs));
}

TEST(leading_runs_across_workers)
{
    reset_seqs();
    struct pidx x;
    pidx_init(&x, 0);
    for (int i = 0; i < 6; i++)
        put(&x, 0, PIDX_STORED, 0, 7, i);
    for (int i = 0; i < 3; i++)
        put(&x, 1, PIDX_STORED, 0, 7, i);
    put(&x, 2, PIDX_STORED, 0, 7, 1);
    put(&x, 1, PIDX_STORED, 0, 7, 4); /* past a hole: no use */

    uint8_t ids[8][16];
    chain(7, 8, ids);
    struct pidx_hit hits[8];
    int n = pidx_match(&x, ids, 8, hits, 8);
    EXPECT_EQ_INT(n, 2);
    EXPECT_EQ_INT(hits[0].worker, 0);
    EXPECT_EQ_INT(hits[0].n_any, 6);
    EXPECT_EQ_INT(hits[0].n_pool, 6);
    EXPECT_EQ_INT(hits[1].worker, 1);
    EXPECT_EQ_INT(hits[1].n_any, 3);
    EXPECT_EQ_INT(hits[1].n_pool, 3);

    /* a prompt that starts at block 1: worker 2 holds its first block */
    n = pidx_match(&x, ids + 1, 7, hits, 8);
    EXPECT_EQ_INT(n, 3);
    EXPECT_EQ_INT(hits[0].n_any, 5);
    EXPECT_EQ_INT(hits[1].n_any, 2);
    EXPECT_EQ_INT(hits[2].worker, 2);
    EXPECT_EQ_INT(hits[2].n_any, 1);

    /* shorter prompts cap the run; another chain and no blocks match nothing */
    n = pidx_match(&x, ids, 2, hits, 8);
    EXPECT_EQ_INT(n, 2);
    EXPECT_EQ_INT(hits[0].n_any, 2);
    EXPECT_EQ_INT(hits[1].n_any, 2);
    uint8_t other[4][16];
    chain(8, 4, other);
    EXPECT_EQ_INT(pidx_match(&x, other, 4, hits, 8), 0);
    EXPECT_EQ_INT(pidx_match(&x, ids, 0, hits, 8), 0);

    /* cap below the hits: the count still, the lowest workers written */
    memset(hits, 0xee, sizeof(hits));
    EXPECT_EQ_INT(pidx_match(&x, ids, 8, hits, 1), 2);
    EXPECT_EQ_INT(hits[0].worker, 0);
    EXPECT_EQ_INT(hits[1].worker, (int)0xeeeeeeee);
    EXPECT_EQ_INT(pidx_match(&x, ids, 8, NULL, 0), 2);

    EXPECT_EQ_INT(x.stats.n_blocks, 6);
    EXPECT_EQ_INT(x.stats.n_holders, 6 + 3 + 1 + 1);
    EXPECT_EQ_INT(x.stats.n_applied, 11);
    EXPECT_EQ_INT(pidx_worker_blocks(&x, 1), 4);
    pidx_release(&x);
    EXPECT_EQ_INT(pidx_bytes(&x), 0);
}

TEST(tiers_pool_run_and_any_run)
{
    reset_seqs();
    struct pidx x;
    pidx_init(&x, 0);
    put(&x, 0, PIDX_STORED, 0, 1, 0);
    put(&x, 0, PIDX_STORED, 0, 1, 1);
    put(&x, 0, PIDX_STORED, 1, 1, 2);
    put(&x, 0, PIDX_STORED, 3, 1, 3);
    put(&x, 0, PIDX_STORED, 0, 1, 4);
    put(&x, 1, PIDX_STORED, 2, 1, 0); /* only a lower tier */
    put(&x, 1, PIDX_STORED, 0, 1, 1);
    uint8_t ids[6][16];
    chain(1, 6, ids);
    struct pidx_hit hits[4];
    EXPECT_EQ_INT(pidx_match(&x, ids, 6, hits, 4), 2);
    EXPECT_EQ_INT(hits[0].n_any, 5);
    EXPECT_EQ_INT(hits[0].n_pool, 2);
    EXPECT_EQ_INT(hits[1].n_any, 2);
    EXPECT_EQ_INT(hits[1].n_pool, 0);

    /* block 2 copied up into the pool: the pool run reaches the tier-3 block */
    put(&x, 0, PIDX_STORED, 0, 1, 2);
    EXPECT_EQ_INT(pidx_match(&x, ids, 6, hits, 4), 2);
    EXPECT_EQ_INT(hits[0].n_pool, 3);
    /* leaving the lower tier keeps it held (in the pool) */
    put(&x, 0, PIDX_EVICTED, 1, 1, 2);
    EXPECT_EQ_INT(pidx_match(&x, ids, 6, hits, 4), 2);
    EXPECT_EQ_INT(hits[0].n_any, 5);
    EXPECT_EQ_INT(hits[0].n_pool, 3);
    /* leaving the pool too: the block is gone for worker 0 */
    put(&x, 0, PIDX_EVICTED, 0, 1, 2);
    EXPECT_EQ_INT(pidx_match(&x, ids, 6, hits, 4), 2);
    EXPECT_EQ_INT(hits[0].n_any, 2);
    EXPECT_EQ_INT(hits[0].n_pool, 2);
    EXPECT_EQ_INT(x.stats.n_holders, 4 + 2);
    pidx_release(&x);
}

TEST(evict_in_the_middle_shortens_the_run)
{
    reset_seqs();
    struct pidx x;
    pidx_init(&x, 0);
    for (int i = 0; i < 10; i++)
        put(&x, 3, PIDX_STORED, 0, 2, i);
    put(&x, 3, PIDX_EVICTED, 0, 2, 4);
    uint8_t ids[10][16];
    chain(2, 10, ids);
    struct pidx_hit h;
    EXPECT_EQ_INT(pidx_match(&x, ids, 10, &h, 1), 1);
    EXPECT_EQ_INT(h.worker, 3);
    EXPECT_EQ_INT(h.n_any, 4);
    put(&x, 3, PIDX_STORED, 0, 2, 4); /* recomputed */
    EXPECT_EQ_INT(pidx_match(&x, ids, 10, &h, 1), 1);
    EXPECT_EQ_INT(h.n_any, 10);
    put(&x, 3, PIDX_EVICTED, 0, 2, 0);
    EXPECT_EQ_INT(pidx_match(&x, ids, 10, &h, 1), 0);
    pidx_release(&x);
}

TEST(idempotent_store_and_harmless_evict)
{
    reset_seqs();
    struct pidx x;
    pidx_init(&x, 0);
    put(&x, 0, PIDX_STORED, 0, 3, 0);
    put(&x, 0, PIDX_STORED, 0, 3, 0);
    EXPECT_EQ_INT(x.stats.n_blocks, 1);
    EXPECT_EQ_INT(x.stats.n_holders, 1);
    put(&x, 0, PIDX_EVICTED, 0, 3, 9); /* never stored */
    put(&x, 1, PIDX_EVICTED, 0, 3, 0); /* held, but by another worker */
    put(&x, 0, PIDX_EVICTED, 2, 3, 0); /* held, but in another tier */
    EXPECT_EQ_INT(x.stats.n_blocks, 1);
    EXPECT_EQ_INT(x.stats.n_holders, 1);
    uint8_t ids[1][16];
    chain(3, 1, ids);
    struct pidx_hit h;
    EXPECT_EQ_INT(pidx_match(&x, ids, 1, &h, 1), 1);
    EXPECT_EQ_INT(h.worker, 0);
    EXPECT_EQ_INT(h.n_pool, 1);
    /* one eviction undoes the repeated store */
    put(&x, 0, PIDX_EVICTED, 0, 3, 0);
    EXPECT_EQ_INT(pidx_match(&x, ids, 1, &h, 1), 0);
    EXPECT_EQ_INT(x.stats.n_blocks, 0);
    EXPECT_EQ_INT(x.stats.n_holders, 0);
    pidx_release(&x);
}

/* The outcome of worker 0's events delivered in the given order. */
static void deliver(struct pidx *x, const struct pidx_event *evs, const int *order, int n,
                    const int *want)
{
    pidx_init(x, 0);
    for (int i = 0; i < n; i++)
        EXPECT_EQ_INT(pidx_apply(x, 0, &evs[order[i]]), want[i]);
}

TEST(reordered_events_apply_in_seq_order)
{
    /* in seq order: a stored, a evicted, b stored, a stored in tier 1 */
    struct pidx_event evs[5] = {ev(0, PIDX_STORED, 0, 4, 9), ev(1, PIDX_STORED, 0, 4, 0),
                                ev(2, PIDX_EVICTED, 0, 4, 0), ev(3, PIDX_STORED, 0, 4, 1),
                                ev(4, PIDX_STORED, 1, 4, 0)};
    struct pidx a, b;
    int in_order[5] = {0, 1, 2, 3, 4}, all_applied[5] = {0, 0, 0, 0, 0};
    deliver(&a, evs, in_order, 5, all_applied);
    int shuffled[5] = {0, 3, 2, 4, 1};
    int want[5] = {PIDX_APPLIED, PIDX_BUFFERED, PIDX_BUFFERED, PIDX_BUFFERED, PIDX_APPLIED};
    deliver(&b, evs, shuffled, 5, want);
    EXPECT_EQ_INT(b.stats.n_applied, 5);
    EXPECT_EQ_INT(b.stats.n_buffered, 3);

    uint8_t ids[2][16];
    chain(4, 2, ids);
    struct pidx_hit ha, hb;
    EXPECT_EQ_INT(pidx_match(&a, ids, 2, &ha, 1), 1);
    EXPECT_EQ_INT(pidx_match(&b, ids, 2, &hb, 1), 1);
    EXPECT_EQ_INT(ha.n_any, 2);
    EXPECT_EQ_INT(ha.n_pool, 0); /* block 0 is only in tier 1 now */
    EXPECT_EQ_INT(hb.n_any, ha.n_any);
    EXPECT_EQ_INT(hb.n_pool, ha.n_pool);
    EXPECT_EQ_INT(b.stats.n_holders, a.stats.n_holders);
    EXPECT_EQ_INT(b.stats.n_blocks, a.stats.n_blocks);
    pidx_release(&a);
    pidx_release(&b);
}

TEST(duplicates_are_stale)
{
    struct pidx x;
    pidx_init(&x, 0);
    struct pidx_event e5 = ev(5, PIDX_STORED, 0, 5, 0), e6 = ev(6, PIDX_STORED, 0, 5, 1);
    struct pidx_event e8 = ev(8, PIDX_EVICTED, 0, 5, 0), e7 = ev(7, PIDX_STORED, 0, 5, 2);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e5), PIDX_APPLIED); /* the stream starts at 5 */
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e5), PIDX_STALE);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e6), PIDX_APPLIED);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e8), PIDX_BUFFERED);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e8), PIDX_STALE); /* a second copy while held */
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e7), PIDX_APPLIED);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e8), PIDX_STALE);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e6), PIDX_STALE);
    struct pidx_event early = ev(1, PIDX_STORED, 0, 5, 0);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &early), PIDX_STALE);
    EXPECT_EQ_INT(x.stats.n_stale, 5);
    EXPECT_EQ_INT(x.stats.n_applied, 4); /* e8 once, from the buffer */
    EXPECT_EQ_INT(x.stats.n_holders, 2);
    pidx_release(&x);
}

TEST(lost_event_resyncs_until_snapshot)
{
    struct pidx x;
    pidx_init(&x, 4);
    struct pidx_event e;
    for (int i = 0; i < 3; i++) { /* worker 1: blocks 0..2, seqs 0..2 */
        e = ev((uint64_t)i, PIDX_STORED, 0, 6, i);
        EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_APPLIED);
    }
    e = ev(0, PIDX_STORED, 0, 6, 0); /* worker 0 holds block 0 too */
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    /* seq 3 never comes; 4..7 fill the window, 8 is past it */
    for (int s = 4; s <= 7; s++) {
        e = ev((uint64_t)s, PIDX_STORED, 0, 6, s);
        EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_BUFFERED);
    }
    EXPECT(!pidx_needs_resync(&x, 1));
    e = ev(8, PIDX_STORED, 0, 6, 8);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_RESYNC);
    EXPECT(pidx_needs_resync(&x, 1));
    EXPECT(!pidx_needs_resync(&x, 0));
    EXPECT_EQ_INT(x.stats.n_resyncs, 1);
    EXPECT_EQ_INT(pidx_worker_blocks(&x, 1), 0);
    EXPECT_EQ_INT(x.stats.n_blocks, 1); /* worker 0's block 0 */
    EXPECT_EQ_INT(x.stats.n_holders, 1);

    uint8_t ids[4][16];
    chain(6, 4, ids);
    struct pidx_hit hits[2];
    EXPECT_EQ_INT(pidx_match(&x, ids, 4, hits, 2), 1);
    EXPECT_EQ_INT(hits[0].worker, 0);

    /* ignored until the snapshot, even the missing event itself */
    e = ev(3, PIDX_STORED, 0, 6, 3);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_RESYNC);
    e = ev(9, PIDX_STORED, 0, 6, 0);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_RESYNC);
    EXPECT_EQ_INT(pidx_worker_blocks(&x, 1), 0);
    EXPECT_EQ_INT(x.stats.n_resyncs, 1);

    /* the snapshot as of seq 20: blocks 0..3, block 3 in tier 1 */
    uint8_t tiers[4] = {0, 0, 0, 1};
    EXPECT_EQ_INT(pidx_snapshot(&x, 1, 20, ids, tiers, 4), 0);
    EXPECT(!pidx_needs_resync(&x, 1));
    EXPECT_EQ_INT(pidx_match(&x, ids, 4, hits, 2), 2);
    EXPECT_EQ_INT(hits[1].worker, 1);
    EXPECT_EQ_INT(hits[1].n_any, 4);
    EXPECT_EQ_INT(hits[1].n_pool, 3);
    e = ev(20, PIDX_EVICTED, 0, 6, 0);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_STALE); /* covered by the snapshot */
    e = ev(21, PIDX_EVICTED, 0, 6, 1);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_APPLIED);
    EXPECT_EQ_INT(pidx_match(&x, ids, 4, hits, 2), 2);
    EXPECT_EQ_INT(hits[1].n_any, 1);
    pidx_release(&x);
}

TEST(malformed_events_and_snapshots)
{
    struct pidx x;
    pidx_init(&x, 0);
    struct pidx_event e = ev(0, PIDX_STORED, 0, 9, 0);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    e = ev(1, PIDX_STORED, PIDX_TIERS, 9, 1);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_RESYNC);
    EXPECT_EQ_INT(x.stats.n_invalid, 1);
    EXPECT_EQ_INT(x.stats.n_blocks, 0);
    e = ev(0, 7, 0, 9, 0);
    EXPECT_EQ_INT(pidx_apply(&x, 2, &e), PIDX_RESYNC); /* an unknown kind */
    EXPECT(pidx_needs_resync(&x, 2));
    uint8_t ids[2][16];
    chain(9, 2, ids);
    uint8_t bad[2] = {0, 9};
    EXPECT_EQ_INT(pidx_snapshot(&x, 0, 5, ids, bad, 2), ERR_INVALID);
    EXPECT(pidx_needs_resync(&x, 0)); /* nothing changed */
    EXPECT_EQ_INT(x.stats.n_blocks, 0);
    uint8_t good[2] = {0, 0};
    EXPECT_EQ_INT(pidx_snapshot(&x, 0, 5, ids, good, 2), 0);
    EXPECT_EQ_INT(pidx_snapshot(&x, 2, 0, NULL, NULL, 0), 0); /* holds nothing yet */
    EXPECT(!pidx_needs_resync(&x, 2));
    EXPECT_EQ_INT(x.stats.n_blocks, 2);
    pidx_release(&x);
}

TEST(snapshot_replaces_and_keeps_later_held_events)
{
    struct pidx x;
    pidx_init(&x, 0);
    struct pidx_event e;
    for (int i = 0; i < 4; i++) {
        e = ev((uint64_t)i, PIDX_STORED, 0, 10, i);
        EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    }
    e = ev(6, PIDX_STORED, 0, 10, 0); /* covered by the snapshot below */
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_BUFFERED);
    e = ev(12, PIDX_STORED, 0, 11, 1); /* after it, contiguous once 11 arrives */
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_BUFFERED);
    /* as of seq 10 the worker holds chain 11's block 0 only */
    uint8_t ids[3][16];
    chain(11, 3, ids);
    uint8_t tiers[1] = {0};
    EXPECT_EQ_INT(pidx_snapshot(&x, 0, 10, ids, tiers, 1), 0);
    EXPECT_EQ_INT(x.stats.n_blocks, 1);
    EXPECT_EQ_INT(pidx_worker_blocks(&x, 0), 1);
    e = ev(11, PIDX_STORED, 0, 11, 2);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    struct pidx_hit h;
    EXPECT_EQ_INT(pidx_match(&x, ids, 3, &h, 1), 1);
    EXPECT_EQ_INT(h.n_any, 3); /* seq 12 (block 1) came out of the buffer */
    uint8_t old[1][16];
    chain(10, 1, old);
    EXPECT_EQ_INT(pidx_match(&x, old, 1, &h, 1), 0);
    pidx_release(&x);
}

TEST(snapshot_frees_the_ring_entries_it_covers)
{
    struct pidx x;
    pidx_init(&x, 4);
    struct pidx_event e;
    for (int i = 0; i < 4; i++) {
        e = ev((uint64_t)i, PIDX_STORED, 0, 17, i);
        EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    }
    e = ev(6, PIDX_STORED, 0, 17, 6);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_BUFFERED);
    e = ev(8, PIDX_STORED, 0, 17, 8); /* the snapshot's own seq */
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_BUFFERED);
    uint8_t ids[6][16];
    chain(17, 6, ids);
    uint8_t tiers[4] = {0, 0, 0, 0};
    EXPECT_EQ_INT(pidx_snapshot(&x, 0, 8, ids, tiers, 4), 0);
    /* 12 and 8 share a ring entry: it must be free again */
    e = ev(12, PIDX_STORED, 0, 17, 5);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_BUFFERED);
    e = ev(9, PIDX_STORED, 0, 17, 4);
    EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    struct pidx_hit h;
    EXPECT_EQ_INT(pidx_match(&x, ids, 6, &h, 1), 1);
    EXPECT_EQ_INT(h.n_any, 5);
    for (uint64_t s = 10; s <= 11; s++) {
        e = ev(s, PIDX_STORED, 1, 18, 0);
        EXPECT_EQ_INT(pidx_apply(&x, 0, &e), PIDX_APPLIED);
    }
    EXPECT_EQ_INT(pidx_match(&x, ids, 6, &h, 1), 1);
    EXPECT_EQ_INT(h.n_any, 6);
    EXPECT_EQ_INT(x.stats.n_blocks, 7); /* blocks 6 and 8 were never applied */
    pidx_release(&x);
}

TEST(drop_worker_forgets_blocks_and_stream)
{
    struct pidx x;
    pidx_init(&x, 0);
    struct pidx_event e;
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 5; i++) {
            e = ev((uint64_t)(100 + i), PIDX_STORED, 0, 12, i);
            EXPECT_EQ_INT(pidx_apply(&x, w, &e), PIDX_APPLIED);
        }
    e = ev(107, PIDX_STORED, 0, 12, 7);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_BUFFERED);
    pidx_drop_worker(&x, 1);
    pidx_drop_worker(&x, 1);   /* twice: nothing more */
    pidx_drop_worker(&x, 999); /* never seen */
    EXPECT_EQ_INT(pidx_worker_blocks(&x, 1), 0);
    EXPECT_EQ_INT(x.stats.n_holders, 10);
    EXPECT_EQ_INT(x.stats.n_blocks, 5);
    uint8_t ids[5][16];
    chain(12, 5, ids);
    struct pidx_hit hits[3];
    EXPECT_EQ_INT(pidx_match(&x, ids, 5, hits, 3), 2);
    EXPECT_EQ_INT(hits[0].worker, 0);
    EXPECT_EQ_INT(hits[1].worker, 2);
    /* a restarted worker numbers from anywhere */
    e = ev(0, PIDX_STORED, 0, 12, 0);
    EXPECT_EQ_INT(pidx_apply(&x, 1, &e), PIDX_APPLIED);
    EXPECT_EQ_INT(pidx_match(&x, ids, 5, hits, 3), 3);
    EXPECT_EQ_INT(hits[1].worker, 1);
    EXPECT_EQ_INT(hits[1].n_any, 1);
    for (int w = 0; w < 3; w++)
        pidx_drop_worker(&x, w);
    EXPECT_EQ_INT(x.stats.n_blocks, 0);
    EXPECT_EQ_INT(x.stats.n_holders, 0);
    pidx_release(&x);
}

TEST(ids_leave_with_their_last_holder)
{
    reset_seqs();
    struct pidx x;
    pidx_init(&x, 0);
    /* 200k blocks through, never more than 64 held at once */
    for (int i = 0; i < 200000; i++) {
        put(&x, i % 4, PIDX_STORED, i % 3, 13, i);
        if (i >= 64) put(&x, (i - 64) % 4, PIDX_EVICTED, (i - 64) % 3, 13, i - 64);
    }
    EXPECT_EQ_INT(x.stats.n_blocks, 64);
    EXPECT_EQ_INT(x.stats.n_holders, 64);
    EXPECT(x.cap <= 128);
    /* two holders of one id: it stays until both leave */
    put(&x, 0, PIDX_STORED, 0, 14, 0);
    put(&x, 1, PIDX_STORED, 0, 14, 0);
    put(&x, 0, PIDX_EVICTED, 0, 14, 0);
    EXPECT_EQ_INT(x.stats.n_blocks, 65);
    put(&x, 1, PIDX_EVICTED, 0, 14, 0);
    EXPECT_EQ_INT(x.stats.n_blocks, 64);
    pidx_release(&x);
}

TEST(many_holders_spill_and_shrink)
{
    reset_seqs();
    struct pidx x;
    pidx_init(&x, 0);
    enum { W = 700 };
    /* every worker holds block 0; every other one block 1; every third
     * worker 2; those divisible by 6 in tier 0 throughout */
    for (int w = W - 1; w >= 0; w--) { /* descending: inserts at the front */
        put(&x, w, PIDX_STORED, w % 6 ? 1 : 0, 15, 0);
        if (w % 2 == 0) put(&x, w, PIDX_STORED, w % 6 ? 1 : 0, 15, 1);
        if (w % 6 == 0) put(&x, w, PIDX_STORED, 0, 15, 2);
    }
    EXPECT(x.stats.n_spill > 0);
    uint8_t ids[4][16];
    chain(15, 4, ids);
    struct pidx_hit *hits = calloc(W, sizeof(*hits));
    EXPECT_EQ_INT(pidx_match(&x, ids, 4, hits, W), W);
    int bad = 0;
    for (int w = 0; w < W; w++) {
        int any = w % 6 == 0 ? 3 : w % 2 == 0 ? 2 : 1;
        int pool = w % 6 == 0 ? 3 : 0;
        bad += hits[w].worker != w || hits[w].n_any != any || hits[w].n_pool != pool;
    }
    EXPECT_EQ_INT(bad, 0);
    /* a small cap with more than the stack's worth of holders */
    struct pidx_hit few[2];
    EXPECT_EQ_INT(pidx_match(&x, ids, 4, few, 2), W);
    EXPECT_EQ_INT(few[1].worker, 1);
    EXPECT_EQ_INT(few[1].n_any, 1);
    /* a query from block 2: only the workers holding it */
    EXPECT_EQ_INT(pidx_match(&x, ids + 2, 2, hits, W), (W + 5) / 6);
    EXPECT_EQ_INT(hits[1].worker, 6);
    /* back down through the spill arrays to inline lists */
    for (int w = 0; w < W; w++)
        if (w != 5 && w != 300) put(&x, w, PIDX_EVICTED, w % 6 ? 1 : 0, 15, 0);
    EXPECT_EQ_INT(pidx_match(&x, ids, 4, hits, W), 2);
    EXPECT_EQ_INT(hits[0].worker, 5);
    EXPECT_EQ_INT(hits[1].worker, 300);
    EXPECT_EQ_INT(hits[1].n_any, 3);
    free(hits);
    for (int w = 0; w < W; w++)
        pidx_drop_worker(&x, w);
    EXPECT_EQ_INT(x.stats.n_spill, 0);
    EXPECT_EQ_INT(x.stats.n_holders, 0);
    pidx_release(&x);
}

TEST(large_worker_slot)
{
    reset_seqs();
    struct pidx x = {0}; /* zero-initialised works as pidx_init(&x, 0) */
    put(&x, 1500, PIDX_STORED, 0, 16, 0);
    put(&x, 1500, PIDX_STORED, 0, 16, 1);
    put(&x, 3, PIDX_STORED, 0, 16, 0);
    EXPECT(x.n_workers > 1500);
    uint8_t ids[2][16];
    chain(16, 2, ids);
    struct pidx_hit hits[2];
    EXPECT_EQ_INT(pidx_match(&x, ids, 2, hits, 2), 2);
    EXPECT_EQ_INT(hits[0].worker, 3);
    EXPECT_EQ_INT(hits[1].worker, 1500);
    EXPECT_EQ_INT(hits[1].n_any, 2);
    EXPECT(!pidx_needs_resync(&x, 100000));
    EXPECT_EQ_INT(pidx_worker_blocks(&x, 1500), 2);
    EXPECT(pidx_bytes(&x) > 1500 * 16);
    pidx_release(&x);
}

/* The naive model: per worker and id a tier mask. */
enum { RW = 20, RC = 6, RL = 24 }; /* workers, chains, blocks per chain */
struct model {
    uint8_t mask[RW][RC][RL]; /* tier mask of each worker's block (chain, position) */
};

static void model_apply(struct model *m, int w, const struct pidx_event *e, int c, int i)
{
    if (e->kind == PIDX_STORED)
        m->mask[w][c][i] |= (uint8_t)(1u << e->tier);
    else
        m->mask[w][c][i] &= (uint8_t) ~(1u << e->tier);
}

static void model_check(const struct pidx *x, const struct model *m, uint64_t *rng)
{
    int c = (int)(rng_next(rng) % RC), from = (int)(rng_next(rng) % 4);
    int n = 1 + (int)(rng_next(rng) % (RL - from));
    uint8_t ids[RL][16];
    for (int i = 0; i < n; i++)
        id_of(c, from + i, ids[i]);
    struct pidx_hit hits[RW], want[RW];
    int n_want = 0;
    for (int w = 0; w < RW; w++) {
        int any = 0, pool = 0;
        while (any < n && m->mask[w][c][from + any])
            any++;
        while (pool < n && (m->mask[w][c][from + pool] & 1))
            pool++;
        if (any) want[n_want++] = (struct pidx_hit){.worker = w, .n_any = any, .n_pool = pool};
    }
    int got = pidx_match(x, ids, n, hits, RW);
    EXPECT_EQ_INT(got, n_want);
    for (int i = 0; i < got && i < n_want; i++)
        if (hits[i].worker != want[i].worker || hits[i].n_any != want[i].n_any ||
            hits[i].n_pool != want[i].n_pool) {
            EXPECT_EQ_INT(hits[i].worker, want[i].worker);
            EXPECT_EQ_INT(hits[i].n_any, want[i].n_any);
            EXPECT_EQ_INT(hits[i].n_pool, want[i].n_pool);
            return;
        }
    uint64_t blocks = 0, held = 0;
    for (int cc = 0; cc < RC; cc++)
        for (int i = 0; i < RL; i++) {
            bool any = false;
            for (int w = 0; w < RW; w++) {
                held += m->mask[w][cc][i] != 0;
                any |= m->mask[w][cc][i] != 0;
            }
            blocks += any;
        }
    EXPECT_EQ_INT(x->stats.n_blocks, blocks);
    EXPECT_EQ_INT(x->stats.n_holders, held);
}

TEST(random_events_match_a_naive_model)
{
    static struct model m;
    memset(&m, 0, sizeof(m));
    struct pidx x;
    pidx_init(&x, 16);
    uint64_t rng = 42, next[RW] = {0};
    bool fresh[RW]; /* no stream yet: its first delivered event starts one */
    for (int w = 0; w < RW; w++)
        fresh[w] = true;
    int events = 0, batches = 0;
    while (events < 50000) {
        int w = (int)(rng_next(&rng) % RW);
        uint64_t r = rng_next(&rng) % 1000;
        if (r < 3) { /* the worker goes and comes back numbering from elsewhere */
            pidx_drop_worker(&x, w);
            memset(m.mask[w], 0, sizeof(m.mask[w]));
            next[w] = rng_next(&rng) % 1000;
            fresh[w] = true;
            continue;
        }
        if (r < 6) { /* a snapshot of what it holds */
            uint8_t ids[RC * RL * PIDX_TIERS][16], tiers[RC * RL * PIDX_TIERS];
            int n = 0;
            for (int c = 0; c < RC; c++)
                for (int i = 0; i < RL; i++)
                    for (int t = 0; t < PIDX_TIERS; t++)
                        if (m.mask[w][c][i] >> t & 1) {
                            id_of(c, i, ids[n]);
                            tiers[n++] = (uint8_t)t;
                        }
            next[w] += rng_next(&rng) % 50; /* events it had before were not delivered */
            EXPECT_EQ_INT(pidx_snapshot(&x, w, next[w] - 1, ids, tiers, n), 0);
            fresh[w] = false;
            continue;
        }
        /* a batch of consecutive events, delivered shuffled, some twice */
        struct pidx_event b[12];
        int cs[12], is[12], n = 1 + (int)(rng_next(&rng) % 8), nd = n;
        for (int k = 0; k < n; k++) {
            cs[k] = (int)(rng_next(&rng) % RC);
            /* most events touch the first blocks, as shared prefixes do */
            is[k] = (int)(rng_next(&rng) % (rng_next(&rng) % 2 ? 6 : RL));
            int kind = rng_next(&rng) % 5 < 3 ? PIDX_STORED : PIDX_EVICTED;
            int tier = rng_next(&rng) % 3 ? 0 : (int)(rng_next(&rng) % PIDX_TIERS);
            b[k] = ev(next[w] + (uint64_t)k, kind, tier, cs[k], is[k]);
            model_apply(&m, w, &b[k], cs[k], is[k]);
        }
        next[w] += (uint64_t)n;
        while (nd < 12 && rng_next(&rng) % 4 == 0) {
            b[nd] = b[rng_next(&rng) % n];
            nd++;
        }
        for (int k = nd - 1; k > 0; k--) {
            int j = (int)(rng_next(&rng) % (uint64_t)(k + 1));
            struct pidx_event t = b[k];
            b[k] = b[j];
            b[j] = t;
        }
        for (int k = 1; fresh[w] && k < nd; k++)
            if (b[k].seq < b[0].seq) {
                struct pidx_event t = b[0];
                b[0] = b[k];
                b[k] = t;
            }
        fresh[w] = false;
        for (int k = 0; k < nd; k++) {
            int res = pidx_apply(&x, w, &b[k]);
            EXPECT(res == PIDX_APPLIED || res == PIDX_BUFFERED || res == PIDX_STALE);
        }
        events += n;
        if (++batches % 4 == 0) model_check(&x, &m, &rng);
    }
    for (int q = 0; q < 200; q++)
        model_check(&x, &m, &rng);
    EXPECT_EQ_INT(x.stats.n_resyncs, 0);
    EXPECT(x.stats.n_buffered > 1000);
    EXPECT(x.stats.n_stale > 1000);
    pidx_release(&x);
}

TEST_MAIN()
