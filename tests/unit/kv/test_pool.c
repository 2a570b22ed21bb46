/*
 * test_pool.c - KV block pool: allocation until exhaustion, refcounts, and
 * sequence tables that roll back cleanly when the pool runs dry.
 */
#include "test.h"

#include "base/err.h"
#include "kv/pool.h"

#include <string.h>

static struct kv_pool mk(int n_blocks)
{
    struct kv_pool p;
    struct kv_pool_config c = {.n_layer = 2,
                               .n_kv_head = 2,
                               .head_dim = 8,
                               .block_tokens = 4,
                               .n_blocks = n_blocks,
                               .dtype = DTYPE_F16};
    EXPECT_EQ_INT(kv_pool_init(&p, &c, NULL), 0);
    return p;
}

TEST(layout_and_exhaustion)
{
    struct kv_pool p = mk(3);
    EXPECT_EQ_INT(p.half_bytes, 2 * 4 * 8 * 2);
    EXPECT_EQ_INT(p.block_bytes, p.half_bytes * 2 * 2);
    int32_t a, b, c, d;
    EXPECT_EQ_INT(kv_pool_alloc(&p, &a), 0);
    EXPECT_EQ_INT(kv_pool_alloc(&p, &b), 0);
    EXPECT_EQ_INT(kv_pool_alloc(&p, &c), 0);
    EXPECT_EQ_INT(kv_pool_alloc(&p, &d), ERR_NO_KV);
    EXPECT_EQ_INT(p.panel_bytes, 4 * 8 * 2);
    /* (layer, K/V, head) regions of every block's panel, block ids in order */
    EXPECT((char *)kv_pool_k(&p, b, 0, 1) - (char *)kv_pool_k(&p, b, 0, 0) == 3 * 64);
    EXPECT((char *)kv_pool_k(&p, c, 0, 0) - (char *)kv_pool_k(&p, b, 0, 0) ==
           (c - b) * (long)p.panel_bytes);
    EXPECT((char *)kv_pool_v(&p, b, 1, 0) - (char *)kv_pool_k(&p, b, 1, 0) == 2 * 3 * 64);
    EXPECT((char *)kv_pool_k(&p, b, 1, 0) - (char *)kv_pool_k(&p, b, 0, 0) == 4 * 3 * 64);
    kv_pool_ref(&p, b);
    kv_pool_unref(&p, b);
    EXPECT_EQ_INT(p.n_free, 0);
    kv_pool_unref(&p, b);
    EXPECT_EQ_INT(p.n_free, 1);
    EXPECT_EQ_INT(kv_pool_alloc(&p, &d), 0);
    EXPECT_EQ_INT(d, b);
    kv_pool_release(&p);
}

TEST(block_copies_in_frame_order)
{
    struct kv_pool p = mk(3);
    uint8_t in[512], out[512] = {0};
    EXPECT_EQ_INT(p.block_bytes, 512);
    for (int i = 0; i < 512; i++)
        in[i] = (uint8_t)(i * 7 + 1);
    int32_t a, b;
    EXPECT_EQ_INT(kv_pool_alloc(&p, &a), 0);
    EXPECT_EQ_INT(kv_pool_alloc(&p, &b), 0);
    memset(kv_pool_k(&p, b, 0, 0), 0x5a, p.panel_bytes);
    kv_pool_write_block(&p, a, in);
    /* per layer: K head 0, K head 1, V head 0, V head 1 */
    EXPECT(memcmp(kv_pool_k(&p, a, 0, 1), in + 64, 64) == 0);
    EXPECT(memcmp(kv_pool_v(&p, a, 0, 0), in + 128, 64) == 0);
    EXPECT(memcmp(kv_pool_v(&p, a, 1, 1), in + 256 + 192, 64) == 0);
    kv_pool_read_block(&p, a, out);
    EXPECT(memcmp(in, out, sizeof(in)) == 0);
    EXPECT_EQ_INT(((uint8_t *)kv_pool_k(&p, b, 0, 0))[63], 0x5a); /* b untouched */
    kv_pool_release(&p);
}

/* Tables growing in turns keep consecutive block ids each: a new table
 * starts 32 blocks after the last block of the one before it while the
 * arena has the room, then in the middle of the longest free run. */
TEST(growing_tables_stay_consecutive)
{
    struct kv_pool p = mk(128);
    struct kv_seq s[3] = {{0}};
    for (int n = 1; n <= 10; n++)
        for (int i = 0; i < 3; i++)
            EXPECT_EQ_INT(kv_seq_reserve(&p, &s[i], 4 * n), 0);
    EXPECT_EQ_INT(s[0].blocks[0], 0);
    EXPECT_EQ_INT(s[1].blocks[0], 33);
    EXPECT_EQ_INT(s[2].blocks[0], 66);
    struct kv_seq u = {0}; /* 76..127 free: 52 blocks, under 32 + 32 */
    EXPECT_EQ_INT(kv_seq_reserve(&p, &u, 4), 0);
    EXPECT_EQ_INT(u.blocks[0], 76 + 52 / 2);
    kv_seq_release(&p, &u);
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ_INT(s[i].n_blocks, 10);
        for (int j = 1; j < 10; j++)
            EXPECT_EQ_INT(s[i].blocks[j], s[i].blocks[j - 1] + 1);
    }
    for (int i = 0; i < 3; i++)
        kv_seq_release(&p, &s[i]);
    EXPECT_EQ_INT(p.n_free, 128);
    kv_pool_release(&p);
}

TEST(seq_reserve_rolls_back)
{
    struct kv_pool p = mk(4);
    struct kv_seq s = {0}, t = {0};
    EXPECT_EQ_INT(kv_seq_reserve(&p, &s, 5), 0); /* 2 blocks */
    EXPECT_EQ_INT(s.n_blocks, 2);
    EXPECT_EQ_INT(kv_seq_reserve(&p, &s, 8), 0); /* still 2 */
    EXPECT_EQ_INT(s.n_blocks, 2);
    EXPECT_EQ_INT(kv_seq_reserve(&p, &t, 13), ERR_NO_KV); /* needs 4, 2 free */
    EXPECT_EQ_INT(t.n_blocks, 0);
    EXPECT_EQ_INT(p.n_free, 2);
    kv_seq_release(&p, &s);
    EXPECT_EQ_INT(p.n_free, 4);
    EXPECT_EQ_INT(kv_seq_reserve(&p, &t, 13), 0);
    kv_seq_release(&p, &t);
    kv_pool_release(&p);
}

TEST(bad_config)
{
    struct kv_pool p;
    struct kv_pool_config c = {.n_layer = 2,
                               .n_kv_head = 2,
                               .head_dim = 8,
                               .block_tokens = 0,
                               .n_blocks = 4,
                               .dtype = DTYPE_F16};
    EXPECT_EQ_INT(kv_pool_init(&p, &c, NULL), ERR_INVALID);
    c.block_tokens = 4;
    c.dtype = DTYPE_Q8_0;
    EXPECT_EQ_INT(kv_pool_init(&p, &c, NULL), ERR_INVALID);
}

TEST_MAIN()
