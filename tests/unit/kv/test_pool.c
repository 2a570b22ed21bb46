/*
 * test_pool.c - KV block pool: allocation until exhaustion, refcounts, and
 * sequence tables that roll back cleanly when the pool runs dry.
 */
#include "test.h"

#include "base/err.h"
#include "kv/pool.h"

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
    EXPECT((char *)kv_pool_v(&p, b, 1) - (char *)kv_pool_k(&p, b, 1) == (long)p.half_bytes);
    kv_pool_ref(&p, b);
    kv_pool_unref(&p, b);
    EXPECT_EQ_INT(p.n_free, 0);
    kv_pool_unref(&p, b);
    EXPECT_EQ_INT(p.n_free, 1);
    EXPECT_EQ_INT(kv_pool_alloc(&p, &d), 0);
    EXPECT_EQ_INT(d, b);
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
