/*
 * test_prefix.c - the prefix cache over a small pool: block ids form a hash
 * chain (parent, tokens, fingerprint and salt all change them, nothing else
 * does), committed blocks are found again and attached by reference, released
 * chains park on the LRU tail block first and are evicted in that order when
 * the free list runs dry, duplicates are not indexed twice, events name
 * every stored and evicted block, and blocks export and import by id.
 */
#include "test.h"

#include "base/err.h"
#include "kv/pool.h"
#include "kv/prefix.h"

#define BT 4

static const uint8_t fp_a[16] = {1, 2, 3};
static const uint8_t fp_b[16] = {1, 2, 4};

static void mk(struct kv_pool *p, struct kv_prefix *px, int n_blocks, const uint8_t *fp)
{
    struct kv_pool_config c = {.n_layer = 1,
                               .n_kv_head = 1,
                               .head_dim = 4,
                               .block_tokens = BT,
                               .n_blocks = n_blocks,
                               .dtype = DTYPE_F32};
    EXPECT_EQ_INT(kv_pool_init(p, &c, NULL), 0);
    kv_prefix_init(px, p, fp);
}

static void done(struct kv_pool *p, struct kv_prefix *px)
{
    kv_prefix_release(px);
    EXPECT_EQ_INT(p->n_free, p->cfg.n_blocks); /* every block came back */
    kv_pool_release(p);
}

static bool same(struct kv_block_id a, struct kv_block_id b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

/* ids of n consecutive blocks of toks. */
static void chain(struct kv_prefix *px, const int32_t *toks, int n, struct kv_block_id extra,
                  struct kv_block_id *ids)
{
    for (int i = 0; i < n; i++)
        ids[i] = kv_prefix_block_id(px, i ? &ids[i - 1] : NULL, &extra, toks + i * BT);
}

TEST(ids_form_a_hash_chain)
{
    struct kv_pool p, q;
    struct kv_prefix px, qx;
    mk(&p, &px, 4, fp_a);
    mk(&q, &qx, 8, fp_a);
    struct kv_block_id none = kv_prefix_extra_key(NULL, 0), ids[3], again[3], other[3];
    EXPECT(same(none, kv_prefix_extra_key("", 0)));
    EXPECT(same(none, (struct kv_block_id){0, 0}));
    int32_t t[12] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    chain(&px, t, 3, none, ids);
    chain(&qx, t, 3, none, again); /* another pool, same fingerprint: same ids */
    for (int i = 0; i < 3; i++)
        EXPECT(same(ids[i], again[i]));
    EXPECT(!same(ids[0], ids[1]) && !same(ids[1], ids[2]));
    /* A change in block 0 changes every later id (the parent chain). */
    t[1] = 99;
    chain(&px, t, 3, none, other);
    for (int i = 0; i < 3; i++)
        EXPECT(!same(ids[i], other[i]));
    /* A change in block 2 leaves blocks 0 and 1 alone. */
    t[1] = 6;
    t[10] = 99;
    chain(&px, t, 3, none, other);
    EXPECT(same(ids[0], other[0]) && same(ids[1], other[1]) && !same(ids[2], other[2]));
    t[10] = 15;
    /* Salts and fingerprints separate everything. */
    struct kv_block_id sa = kv_prefix_extra_key("tenant-a", 8);
    struct kv_block_id sb = kv_prefix_extra_key("tenant-b", 8);
    EXPECT(!same(sa, sb) && !same(sa, none));
    chain(&px, t, 3, sa, other);
    EXPECT(!same(ids[0], other[0]));
    struct kv_block_id other_b[3];
    chain(&px, t, 3, sb, other_b);
    EXPECT(!same(other[0], other_b[0]));
    done(&q, &qx);
    mk(&q, &qx, 4, fp_b);
    chain(&qx, t, 3, none, other);
    EXPECT(!same(ids[0], other[0]));
    done(&q, &qx);
    done(&p, &px);
}

TEST(commit_match_and_refcounts)
{
    struct kv_pool p;
    struct kv_prefix px;
    mk(&p, &px, 6, fp_a);
    int32_t t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    struct kv_block_id ids[3];
    chain(&px, t, 3, kv_prefix_extra_key(NULL, 0), ids);
    struct kv_seq a = {0}, b = {0}, c = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &a, 12), 0);
    kv_prefix_commit(&px, &a, ids, 0, 2); /* blocks 0, 1 complete */
    EXPECT_EQ_INT(px.n_cached, 2);
    EXPECT(kv_prefix_lookup(&px, &ids[1], NULL));
    EXPECT(!kv_prefix_lookup(&px, &ids[2], NULL));
    /* Shared while a holds them: refcount 2, nothing moves to the LRU. */
    EXPECT_EQ_INT(kv_prefix_match(&px, ids, 3, &b), 2);
    EXPECT_EQ_INT(b.blocks[0], a.blocks[0]);
    EXPECT_EQ_INT(b.blocks[1], a.blocks[1]);
    EXPECT_EQ_INT(p.refs[a.blocks[0]], 2);
    kv_seq_release(&p, &a);
    EXPECT_EQ_INT(px.n_lru, 0);
    EXPECT_EQ_INT(p.n_free, 6 - 2); /* a's uncached block 2 went back */
    kv_seq_release(&p, &b);
    EXPECT_EQ_INT(px.n_lru, 2);
    EXPECT_EQ_INT(p.n_free, 4);
    EXPECT_EQ_INT(kv_pool_n_available(&p), 6);
    /* A hit takes parked blocks off the LRU. */
    EXPECT_EQ_INT(kv_prefix_match(&px, ids, 2, &c), 2);
    EXPECT_EQ_INT(px.n_lru, 0);
    EXPECT_EQ_INT(p.refs[c.blocks[0]], 1);
    /* A second sequence computing the same blocks does not index them
     * twice; its copies are freed on release. */
    struct kv_seq d = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &d, 8), 0);
    kv_prefix_commit(&px, &d, ids, 0, 2);
    EXPECT_EQ_INT(px.n_cached, 2);
    kv_seq_release(&p, &d);
    EXPECT_EQ_INT(p.n_free, 4);
    kv_seq_release(&p, &c);
    done(&p, &px);
}

TEST(lru_evicts_chain_tail_first)
{
    struct kv_pool p;
    struct kv_prefix px;
    mk(&p, &px, 4, fp_a);
    px.record_events = true;
    int32_t t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    struct kv_block_id ids[3];
    chain(&px, t, 3, kv_prefix_extra_key(NULL, 0), ids);
    struct kv_seq a = {0}, b = {0}, c = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &a, 12), 0);
    int32_t blk[3] = {a.blocks[0], a.blocks[1], a.blocks[2]};
    kv_prefix_commit(&px, &a, ids, 0, 3);
    kv_seq_release(&p, &a);
    /* Released tail first: LRU head is the chain's last block. */
    EXPECT_EQ_INT(px.n_lru, 3);
    EXPECT_EQ_INT(px.lru_head, blk[2]);
    EXPECT_EQ_INT(px.lru_tail, blk[0]);
    EXPECT_EQ_INT(p.n_free, 1);
    /* Two blocks: the free one, then the LRU head (block 2 of the chain). */
    EXPECT_EQ_INT(kv_seq_reserve(&p, &b, 2 * BT), 0);
    EXPECT_EQ_INT(b.blocks[1], blk[2]);
    EXPECT(!kv_prefix_lookup(&px, &ids[2], NULL));
    EXPECT(kv_prefix_lookup(&px, &ids[1], NULL));
    /* Next eviction: block 1; block 0 (the shared head) lives longest. */
    EXPECT_EQ_INT(kv_seq_reserve(&p, &b, 3 * BT), 0);
    EXPECT_EQ_INT(b.blocks[2], blk[1]);
    EXPECT(kv_prefix_lookup(&px, &ids[0], NULL));
    /* The chain is now cut after block 0: a match stops there. */
    EXPECT_EQ_INT(kv_prefix_match(&px, ids, 3, &c), 1);
    EXPECT_EQ_INT(c.blocks[0], blk[0]);
    /* Nothing free or evictable left: the pool says so and rolls back. */
    struct kv_seq d = {0};
    EXPECT_EQ_INT(kv_pool_n_available(&p), 0);
    EXPECT_EQ_INT(kv_seq_reserve(&p, &d, 1), ERR_NO_KV);
    /* Events: 3 stored, then 2 evicted, in order, with their ids. */
    struct kv_prefix_event ev[8];
    EXPECT_EQ_INT(kv_prefix_take_events(&px, ev, 2), 2);
    EXPECT(ev[0].kind == KV_PREFIX_EVENT_STORED && same(ev[0].id, ids[0]));
    EXPECT(ev[1].kind == KV_PREFIX_EVENT_STORED && same(ev[1].id, ids[1]));
    EXPECT_EQ_INT(kv_prefix_take_events(&px, ev, 8), 3);
    EXPECT(ev[0].kind == KV_PREFIX_EVENT_STORED && same(ev[0].id, ids[2]));
    EXPECT(ev[1].kind == KV_PREFIX_EVENT_EVICTED && same(ev[1].id, ids[2]));
    EXPECT(ev[2].kind == KV_PREFIX_EVENT_EVICTED && same(ev[2].id, ids[1]));
    EXPECT_EQ_INT(kv_prefix_take_events(&px, ev, 8), 0);
    EXPECT_EQ_INT(px.n_evicted, 2);
    kv_seq_release(&p, &b);
    kv_seq_release(&p, &c);
    done(&p, &px);
}

TEST(uncached_blocks_still_free_normally)
{
    struct kv_pool p;
    struct kv_prefix px;
    mk(&p, &px, 3, fp_a);
    struct kv_seq a = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &a, 3 * BT), 0);
    EXPECT_EQ_INT(kv_pool_n_available(&p), 0);
    kv_seq_release(&p, &a);
    EXPECT_EQ_INT(px.n_lru, 0);
    EXPECT_EQ_INT(p.n_free, 3);
    done(&p, &px);
}

TEST(export_import_round_trip)
{
    struct kv_pool p, q;
    struct kv_prefix px, qx;
    mk(&p, &px, 3, fp_a);
    mk(&q, &qx, 2, fp_a);
    int32_t t[4] = {1, 2, 3, 4};
    struct kv_block_id id = kv_prefix_block_id(&px, NULL, &(struct kv_block_id){0, 0}, t);
    struct kv_seq a = {0}, b = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &a, BT), 0);
    float k[256 / sizeof(float)], kq[256 / sizeof(float)];
    EXPECT(p.block_bytes <= sizeof(k));
    for (size_t i = 0; i < p.block_bytes / sizeof(float); i++)
        k[i] = (float)i * 0.5f;
    kv_pool_write_block(&p, a.blocks[0], k);
    uint8_t frame[KV_FRAME_HEADER + 256], back[KV_FRAME_HEADER + 256];
    size_t len = kv_prefix_frame_bytes(&px);
    EXPECT_EQ_INT(len, KV_FRAME_HEADER + p.block_bytes);
    EXPECT(len <= sizeof(frame));
    EXPECT_EQ_INT(kv_prefix_export(&px, &id, frame, len), ERR_NOT_FOUND);
    kv_prefix_commit(&px, &a, &id, 0, 1);
    EXPECT_EQ_INT(kv_prefix_export(&px, &id, frame, len), 0);
    struct err_msg msg = {{0}};
    EXPECT_EQ_INT(kv_prefix_import(&qx, frame, len, &msg), 0);
    EXPECT_EQ_INT(kv_prefix_import(&qx, frame, len, &msg), 0); /* already there */
    EXPECT_EQ_INT(qx.n_cached, 1);
    EXPECT_EQ_INT(qx.n_lru, 1);
    EXPECT_EQ_INT(kv_prefix_match(&qx, &id, 1, &b), 1);
    kv_pool_read_block(&q, b.blocks[0], kq);
    EXPECT(memcmp(kq, k, p.block_bytes) == 0);
    EXPECT_EQ_INT(kv_prefix_export(&qx, &id, back, len), 0);
    EXPECT(memcmp(frame, back, len) == 0);
    /* Every block of q referenced: a new block has nowhere to go. */
    struct kv_seq c = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&q, &c, BT), 0);
    t[0] = 9;
    struct kv_block_id id2 = kv_prefix_block_id(&px, NULL, &(struct kv_block_id){0, 0}, t);
    struct kv_seq a2 = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &a2, BT), 0);
    kv_prefix_commit(&px, &a2, &id2, 0, 1);
    EXPECT_EQ_INT(kv_prefix_export(&px, &id2, frame, len), 0);
    EXPECT_EQ_INT(kv_prefix_import(&qx, frame, len, &msg), ERR_NO_KV);
    /* Another fingerprint is refused, naming it. */
    struct kv_pool r;
    struct kv_prefix rx;
    mk(&r, &rx, 2, fp_b);
    EXPECT_EQ_INT(kv_prefix_import(&rx, frame, len, &msg), ERR_INVALID);
    EXPECT(strstr(msg.text, "fingerprint") != NULL);
    done(&r, &rx);
    kv_seq_release(&p, &a);
    kv_seq_release(&p, &a2);
    kv_seq_release(&q, &b);
    kv_seq_release(&q, &c);
    done(&q, &qx);
    done(&p, &px);
}

TEST_MAIN()
