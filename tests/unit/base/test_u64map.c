/*
 * test_u64map.c - the tag map against a plain array model: puts, gets and
 * deletions in random order (deletion by backward shift must keep every
 * remaining key reachable), growth, and replacing a value.
 */
#include "test.h"

#include "base/u64map.h"

TEST(matches_model_under_random_ops)
{
    enum { N = 5000 };
    static void *model[N + 1]; /* key k -> value, NULL: absent */
    struct u64map m = {0};
    uint64_t st = 12345;
    for (int op = 0; op < 200000; op++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t k = 1 + (st >> 33) % N;
        int what = (int)((st >> 20) % 3);
        if (what == 0) {
            void *v = (void *)(uintptr_t)(op + 1);
            u64map_put(&m, k, v);
            model[k] = v;
        } else if (what == 1) {
            u64map_del(&m, k);
            model[k] = NULL;
        } else {
            EXPECT(u64map_get(&m, k) == model[k]);
        }
    }
    size_t n = 0;
    for (uint64_t k = 1; k <= N; k++) {
        EXPECT(u64map_get(&m, k) == model[k]);
        n += model[k] != NULL;
    }
    EXPECT_EQ_INT(m.n, n);
    EXPECT(u64map_get(&m, N + 7) == NULL);
    u64map_release(&m);
}

TEST(sequential_tags_clustered_deletes)
{
    /* The server's pattern: tags 1, 2, 3, ... live a while, then go. */
    struct u64map m = {0};
    for (uint64_t k = 1; k <= 3000; k++) {
        u64map_put(&m, k, (void *)(uintptr_t)k);
        if (k > 64) u64map_del(&m, k - 64);
    }
    for (uint64_t k = 1; k <= 3000; k++)
        EXPECT(u64map_get(&m, k) == (k > 3000 - 64 ? (void *)(uintptr_t)k : NULL));
    EXPECT_EQ_INT(m.n, 64);
    u64map_release(&m);
}

TEST_MAIN()
