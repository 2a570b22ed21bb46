/*
 * test_tpool.c - the thread pool runs every thread exactly once per run,
 * barriers order phases, and splits cover ranges without overlap.
 */
#include "test.h"

#include "base/tpool.h"

#include <stdatomic.h>

struct job {
    _Atomic int calls; /* fn invocations */
    int seen[8];       /* per thread: ith recorded */
    int phase1[8];     /* written before the barrier */
    int sum_after[8];  /* read after it */
};

static void fn(void *arg, int ith, int nth)
{
    struct job *j = arg;
    atomic_fetch_add(&j->calls, 1);
    j->seen[ith] = ith + 100;
    j->phase1[ith] = ith + 1;
    extern struct tpool *test_pool;
    tpool_barrier(test_pool);
    int s = 0;
    for (int i = 0; i < nth; i++)
        s += j->phase1[i];
    j->sum_after[ith] = s;
    tpool_barrier(test_pool);
    j->phase1[ith] = 0;
}

struct tpool *test_pool;

TEST(runs_all_threads_with_barriers)
{
    for (int nth = 1; nth <= 4; nth++) {
        test_pool = tpool_new(nth);
        for (int rep = 0; rep < 200; rep++) {
            struct job j = {0};
            tpool_run(test_pool, fn, &j);
            EXPECT_EQ_INT(atomic_load(&j.calls), nth);
            for (int i = 0; i < nth; i++) {
                EXPECT_EQ_INT(j.seen[i], i + 100);
                EXPECT_EQ_INT(j.sum_after[i], nth * (nth + 1) / 2);
            }
        }
        tpool_free(test_pool);
    }
}

TEST(split_covers_range)
{
    for (int n = 0; n < 100; n++)
        for (int nth = 1; nth <= 5; nth++)
            for (int align = 1; align <= 16; align *= 4) {
                int next = 0;
                for (int i = 0; i < nth; i++) {
                    int lo, hi;
                    tpool_split(n, align, i, nth, &lo, &hi);
                    EXPECT_EQ_INT(lo, next);
                    EXPECT(hi >= lo);
                    EXPECT(lo % align == 0 || lo == n);
                    next = hi;
                }
                EXPECT_EQ_INT(next, n);
            }
}

TEST_MAIN()
