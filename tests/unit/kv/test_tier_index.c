/*
 * test_tier_index.c - the tiers' index and policies (kv/tier_index.h) and
 * their replay over traces (kv/sim.h): the hash index holds what was added
 * through growth and removals; LRU and SLRU pick the victims they
 * document; the ghost recalls evicted ids; "seen" admission refuses first
 * offers; prompt order makes a prompt leave deepest block first and keeps
 * the start of a prompt longer than the tier; and the simulator's LRU,
 * Belady and infinite-cache figures match answers worked by hand.
 */
#include "test.h"

#include "kv/sim.h"
#include "kv/tier_index.h"

#include <string.h>

static const uint8_t *idn(int k)
{
    static uint8_t ids[8][16];
    static int next;
    uint8_t *id = ids[next++ % 8];
    memset(id, 0, 16);
    memcpy(id, &k, sizeof(k));
    id[8] = (uint8_t)(k * 37);
    return id;
}

static int key(const struct kv_tier_entry *e)
{
    int k;
    memcpy(&k, e->id, sizeof(k));
    return k;
}

/* Stores id k (1 byte) in prompt order under parent (-1: none), making room
 * as a tier does; whether it was stored. */
static bool store(struct kv_tier_index *ix, uint64_t cap, int k, int parent)
{
    const uint8_t *par = parent >= 0 ? idn(parent) : NULL;
    if (kv_tier_index_find(ix, idn(k))) return true;
    if (!kv_tier_index_admit(ix, idn(k))) return false;
    while (ix->used + 1 > cap) {
        struct kv_tier_entry *v = kv_tier_index_victim_for(ix, 0, idn(k), par);
        if (!v) return false;
        kv_tier_index_evict(ix, v);
    }
    kv_tier_index_chain(ix, kv_tier_index_add(ix, idn(k), 1, 0, 0), par);
    return true;
}

static struct kv_tier_index index_of(enum kv_evict_policy e, enum kv_admit_policy a, uint64_t cap)
{
    struct kv_tier_index ix;
    kv_tier_index_init(&ix, &(struct kv_tier_policy){.evict = e, .admit = a});
    kv_tier_index_set_capacity(&ix, cap, 1, 0.5);
    return ix;
}

TEST(index_finds_through_growth_and_removal)
{
    struct kv_tier_index ix = index_of(KV_EVICT_LRU, KV_ADMIT_ALL, 1 << 20);
    for (int k = 0; k < 5000; k++)
        kv_tier_index_add(&ix, idn(k), 2, 0, 0);
    EXPECT_EQ_INT(ix.n, 5000);
    EXPECT_EQ_INT(ix.used, 10000);
    for (int k = 0; k < 5000; k += 2)
        kv_tier_index_remove(&ix, kv_tier_index_find(&ix, idn(k)));
    int found = 0, wrong = 0;
    for (int k = 0; k < 5000; k++) {
        struct kv_tier_entry *e = kv_tier_index_find(&ix, idn(k));
        found += e != NULL;
        wrong += (e != NULL) != (k % 2 == 1) || (e && key(e) != k);
    }
    EXPECT_EQ_INT(found, 2500);
    EXPECT_EQ_INT(wrong, 0);
    int visited = 0;
    for (struct kv_tier_entry *e = kv_tier_index_first(&ix); e; e = kv_tier_index_next(&ix, e))
        visited++;
    EXPECT_EQ_INT(visited, 2500);
    kv_tier_index_release(&ix, NULL);
}

TEST(lru_evicts_the_least_recently_used)
{
    struct kv_tier_index ix = index_of(KV_EVICT_LRU, KV_ADMIT_ALL, 3);
    for (int k = 0; k < 3; k++)
        store(&ix, 3, k, -1);
    kv_tier_index_used(&ix, kv_tier_index_find(&ix, idn(0)));
    EXPECT_EQ_INT(key(kv_tier_index_victim(&ix, 0)), 1);
    store(&ix, 3, 3, -1);
    EXPECT(!kv_tier_index_find(&ix, idn(1)));
    EXPECT_EQ_INT(key(kv_tier_index_victim(&ix, 0)), 2);
    EXPECT_EQ_INT(ix.promotions, 0);
    kv_tier_index_release(&ix, NULL);
}

TEST(slru_keeps_used_blocks_through_a_scan)
{
    /* capacity 8, protected at most 4: blocks 0 and 1 are used, then 20
     * one-off blocks pass through probation */
    struct kv_tier_index ix = index_of(KV_EVICT_SLRU, KV_ADMIT_ALL, 8);
    store(&ix, 8, 0, -1);
    store(&ix, 8, 1, -1);
    kv_tier_index_used(&ix, kv_tier_index_find(&ix, idn(0)));
    kv_tier_index_used(&ix, kv_tier_index_find(&ix, idn(1)));
    EXPECT_EQ_INT(ix.promotions, 2);
    for (int k = 100; k < 120; k++)
        store(&ix, 8, k, -1);
    EXPECT(kv_tier_index_find(&ix, idn(0)) != NULL);
    EXPECT(kv_tier_index_find(&ix, idn(1)) != NULL);
    EXPECT(!kv_tier_index_find(&ix, idn(100)));
    EXPECT_EQ_INT(ix.n, 8);
    /* plain LRU loses both */
    struct kv_tier_index lru = index_of(KV_EVICT_LRU, KV_ADMIT_ALL, 8);
    store(&lru, 8, 0, -1);
    store(&lru, 8, 1, -1);
    kv_tier_index_used(&lru, kv_tier_index_find(&lru, idn(0)));
    kv_tier_index_used(&lru, kv_tier_index_find(&lru, idn(1)));
    for (int k = 100; k < 120; k++)
        store(&lru, 8, k, -1);
    EXPECT(!kv_tier_index_find(&lru, idn(0)));
    kv_tier_index_release(&ix, NULL);
    kv_tier_index_release(&lru, NULL);
}

TEST(slru_protected_bound_demotes_its_oldest)
{
    struct kv_tier_index ix = index_of(KV_EVICT_SLRU, KV_ADMIT_ALL, 8);
    for (int k = 0; k < 6; k++)
        store(&ix, 8, k, -1);
    for (int k = 0; k < 6; k++)
        kv_tier_index_used(&ix, kv_tier_index_find(&ix, idn(k)));
    EXPECT_EQ_INT(ix.prot_used, 4);
    EXPECT_EQ_INT(ix.demotions, 2);
    /* demoted 0 then 1 went to probation's tail: they are the victims */
    EXPECT_EQ_INT(key(kv_tier_index_victim(&ix, 0)), 0);
    kv_tier_index_release(&ix, NULL);
}

TEST(ghost_recalls_an_evicted_block_into_protected)
{
    struct kv_tier_index ix = index_of(KV_EVICT_SLRU, KV_ADMIT_ALL, 2);
    store(&ix, 2, 0, -1);
    store(&ix, 2, 1, -1);
    store(&ix, 2, 2, -1); /* evicts 0 */
    EXPECT(!kv_tier_index_find(&ix, idn(0)));
    EXPECT(kv_tier_index_ghost_has(&ix, idn(0)));
    store(&ix, 2, 0, -1);
    struct kv_tier_entry *e = kv_tier_index_find(&ix, idn(0));
    EXPECT(e && e->protect);
    EXPECT_EQ_INT(ix.ghost_hits, 1);
    EXPECT(!kv_tier_index_ghost_has(&ix, idn(0)));
    /* the ghost is a bounded FIFO: 4 ids per entry of capacity 2 */
    for (int k = 10; k < 30; k++)
        store(&ix, 2, k, -1);
    EXPECT(ix.ghost_n <= 8);
    EXPECT(!kv_tier_index_ghost_has(&ix, idn(1)));
    kv_tier_index_release(&ix, NULL);
}

TEST(seen_admission_refuses_first_offers)
{
    struct kv_tier_index ix = index_of(KV_EVICT_SLRU, KV_ADMIT_SEEN, 4);
    EXPECT(!store(&ix, 4, 7, -1));
    EXPECT_EQ_INT(ix.rejected, 1);
    EXPECT(!kv_tier_index_find(&ix, idn(7)));
    EXPECT(store(&ix, 4, 7, -1));
    EXPECT(kv_tier_index_find(&ix, idn(7)) != NULL);
    kv_tier_index_release(&ix, NULL);
}

TEST(prompt_order_leaves_deepest_first_and_keeps_the_start)
{
    /* a prompt of 6 blocks into a tier of 4: blocks 0..3 stay, 4 and 5 are
     * refused (their parent would be the victim); the victim order is
     * deepest first */
    struct kv_tier_index ix = index_of(KV_EVICT_LRU, KV_ADMIT_ALL, 4);
    int stored = 0;
    for (int k = 0; k < 6; k++)
        stored += store(&ix, 4, k, k ? k - 1 : -1);
    EXPECT_EQ_INT(stored, 4);
    EXPECT_EQ_INT(ix.cut, 2);
    for (int k = 0; k < 4; k++)
        EXPECT(kv_tier_index_find(&ix, idn(k)) != NULL);
    EXPECT_EQ_INT(key(kv_tier_index_victim(&ix, 0)), 3);
    /* an unrelated block makes room by the deepest block, not the root */
    EXPECT(store(&ix, 4, 50, -1));
    EXPECT(!kv_tier_index_find(&ix, idn(3)));
    EXPECT(kv_tier_index_find(&ix, idn(0)) != NULL);
    kv_tier_index_release(&ix, NULL);
}

TEST(prompt_order_under_slru_follows_the_parent_down)
{
    struct kv_tier_index ix = index_of(KV_EVICT_SLRU, KV_ADMIT_ALL, 8);
    store(&ix, 8, 0, -1);
    store(&ix, 8, 1, 0);
    kv_tier_index_used(&ix, kv_tier_index_find(&ix, idn(1))); /* 1 protected, 0 not */
    EXPECT(kv_tier_index_find(&ix, idn(1))->protect);
    kv_tier_index_chain(&ix, kv_tier_index_find(&ix, idn(1)), idn(0));
    struct kv_tier_entry *e = kv_tier_index_find(&ix, idn(1));
    EXPECT(!e->protect);
    EXPECT_EQ_INT(ix.prot_used, 0);
    EXPECT_EQ_INT(key(kv_tier_index_victim(&ix, 0)), 1);
    /* a new block under a protected parent stays in probation */
    kv_tier_index_used(&ix, kv_tier_index_find(&ix, idn(0)));
    store(&ix, 8, 2, 0);
    EXPECT(!kv_tier_index_find(&ix, idn(2))->protect);
    kv_tier_index_release(&ix, NULL);
}

TEST(policy_names_parse)
{
    enum kv_evict_policy e;
    enum kv_admit_policy a;
    EXPECT_EQ_INT(kv_evict_policy_parse("lru", &e), 0);
    EXPECT_EQ_INT(e, KV_EVICT_LRU);
    EXPECT_EQ_INT(kv_evict_policy_parse("slru", &e), 0);
    EXPECT_EQ_INT(e, KV_EVICT_SLRU);
    EXPECT(kv_evict_policy_parse("lfu", &e) != 0);
    EXPECT(kv_evict_policy_parse("", &e) != 0);
    EXPECT_EQ_INT(kv_admit_policy_parse("seen", &a), 0);
    EXPECT_EQ_INT(a, KV_ADMIT_SEEN);
    EXPECT(kv_admit_policy_parse("sometimes", &a) != 0);
    EXPECT(strcmp(kv_evict_policy_name(KV_EVICT_SLRU), "slru") == 0);
}

static void add(struct kv_sim_trace *t, const uint64_t *ids, size_t n)
{
    kv_sim_trace_add(t, ids, n);
}

TEST(sim_matches_worked_answers)
{
    /* requests: [1 2 3] [1 2 4] [5 6] [1 2 3] [5 6 7] */
    struct kv_sim_trace t = {0};
    add(&t, (uint64_t[]){1, 2, 3}, 3);
    add(&t, (uint64_t[]){1, 2, 4}, 3);
    add(&t, (uint64_t[]){5, 6}, 2);
    add(&t, (uint64_t[]){1, 2, 3}, 3);
    add(&t, (uint64_t[]){5, 6, 7}, 3);
    EXPECT_EQ_INT(kv_sim_trace_distinct(&t), 7);
    struct kv_sim_result r;
    kv_sim_ideal(&t, &r);
    EXPECT_EQ_INT(r.blocks, 14);
    EXPECT_EQ_INT(r.hits, 2 + 3 + 2); /* 1 2 | 1 2 3 | 5 6 */
    /* infinite capacity: every policy is the ideal */
    struct kv_tier_policy p = {.evict = KV_EVICT_LRU};
    kv_sim_policy(&t, 100, &p, false, &r);
    EXPECT_EQ_INT(r.hits, 7);
    kv_sim_belady(&t, 100, &r);
    EXPECT_EQ_INT(r.hits, 7);
    /* capacity 3, plain LRU by hand:
     *   [1 2 3] miss 3, hold 1 2 3
     *   [1 2 4] hits 1 2; store 4 evicts 3: hold 1 2 4
     *   [5 6]   store 5 6 evicts 1 2: hold 4 5 6
     *   [1 2 3] miss; hold 1 2 3
     *   [5 6 7] miss; hold 5 6 7               -> 2 hits */
    kv_sim_policy(&t, 3, &p, false, &r);
    EXPECT_EQ_INT(r.hits, 2);
    /* Belady at 3 by hand: it never holds 4 or 7 (not used again); at
     * [5 6] it evicts 5 and 6 themselves (used after 1 2 3): the hits are
     * 1 2 | 1 2 3 */
    kv_sim_belady(&t, 3, &r);
    EXPECT_EQ_INT(r.hits, 5);
    kv_sim_trace_release(&t);
}

TEST(sim_belady_bounds_every_policy_on_a_random_trace)
{
    struct kv_sim_trace t = {0};
    uint64_t s = 12345, ids[40];
    for (int q = 0; q < 400; q++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t root = (s >> 33) % 30, n = 1 + (s >> 20) % 40;
        for (uint64_t i = 0; i < n; i++)
            ids[i] = root * 1000 + i;
        add(&t, ids, n);
    }
    struct kv_sim_result ideal, bel, pol;
    kv_sim_ideal(&t, &ideal);
    for (uint64_t cap = 10; cap <= 400; cap *= 2) {
        kv_sim_belady(&t, cap, &bel);
        EXPECT(bel.hits <= ideal.hits);
        for (int e = 0; e < 2; e++)
            for (int order = 0; order < 2; order++) {
                struct kv_tier_policy p = {.evict = e ? KV_EVICT_LRU : KV_EVICT_SLRU};
                kv_sim_policy(&t, cap, &p, order, &pol);
                EXPECT(pol.hits <= bel.hits);
            }
    }
    kv_sim_trace_release(&t);
}

TEST_MAIN()
