/*
 * test_stepcost.c - the step cost model (src/engine/stepcost.h): the fitted
 * line recovers a linear cost, the prefill limit keeps a mixed step within
 * the ratio, follows a change of the machine's costs, and falls back to the
 * whole budget when there is nothing to protect or nothing known.
 */
#include "test.h"

#include "engine/stepcost.h"

/* Feeds steps alternating between n_lo and n_hi tokens of a linear cost. */
static void feed(struct stepcost *c, int n_obs, int n_lo, int n_hi, double a, double b)
{
    for (int i = 0; i < n_obs; i++) {
        int n = i % 2 ? n_hi : n_lo;
        stepcost_observe(c, n, a + b * n, false);
    }
}

TEST(nothing_known_means_the_whole_budget)
{
    struct stepcost c;
    stepcost_init(&c);
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 2.0, 128), 128);
    /* one batch size only: no slope */
    for (int i = 0; i < 50; i++)
        stepcost_observe(&c, 8, 0.045, false);
    EXPECT(!c.fitted);
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 2.0, 128), 128);
}

TEST(fit_recovers_a_linear_cost)
{
    struct stepcost c;
    stepcost_init(&c);
    feed(&c, 40, 8, 40, 0.015, 0.004);
    EXPECT(c.fitted);
    EXPECT(fabs(c.a_s - 0.015) < 1e-9);
    EXPECT(fabs(c.b_s - 0.004) < 1e-9);
    EXPECT(fabs(stepcost_predict(&c, 100) - 0.415) < 1e-9);
}

TEST(limit_keeps_a_mixed_step_within_the_ratio)
{
    struct stepcost c;
    stepcost_init(&c);
    feed(&c, 40, 8, 40, 0.015, 0.004);
    /* decode step of 8: 0.047 s; twice that allows 8 + 0.047 / 0.004 = 19.75 */
    int n = stepcost_limit(&c, 8, 2.0, 128);
    EXPECT_EQ_INT(n, 19);
    EXPECT(stepcost_predict(&c, n) <= 2.0 * stepcost_predict(&c, 8) + 1e-12);
    EXPECT(stepcost_predict(&c, n + 1) > 2.0 * stepcost_predict(&c, 8));
    /* a looser ratio allows more, and the budget caps it */
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 3.0, 128), 8 + 23);
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 50.0, 128), 128);
    /* nobody decoding, or no bound: the budget */
    EXPECT_EQ_INT(stepcost_limit(&c, 0, 2.0, 128), 128);
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 1.0, 128), 128);
    /* a ratio barely above 1 still lets one prompt token through */
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 1.01, 128), 9);
    /* decodes filling the budget leave no room */
    EXPECT_EQ_INT(stepcost_limit(&c, 128, 2.0, 128), 128);
}

/* A few streams decode while most wait for their prompts: they are held to
 * the gap the full load gave them, so the chunk grows; a lone stream that
 * has always been alone keeps its own gap. */
TEST(limit_holds_to_the_usual_gap)
{
    struct stepcost c;
    stepcost_init(&c);
    feed(&c, 40, 8, 40, 0.015, 0.004);
    EXPECT(stepcost_usual_gap(&c) == 0);
    EXPECT_EQ_INT(stepcost_limit(&c, 2, 2.0, 512), 2 + 5); /* 0.023 / 0.004 */
    for (int i = 0; i < 200; i++)
        stepcost_observe(&c, 8, 0.047, true); /* 8 streams, decode only */
    EXPECT(fabs(stepcost_usual_gap(&c) - 0.047) < 1e-12);
    /* 2 decoding: the step may cost 2 x 0.047 s, 2 + 0.071 / 0.004 */
    EXPECT_EQ_INT(stepcost_limit(&c, 2, 2.0, 512), 2 + 17);
    /* 16 decoding costs more than the usual gap: its own cost bounds it */
    EXPECT_EQ_INT(stepcost_limit(&c, 16, 2.0, 512), 16 + 19);
    /* mixed steps do not move the usual gap */
    stepcost_observe(&c, 40, 0.175, false);
    EXPECT(fabs(stepcost_usual_gap(&c) - 0.047) < 1e-12);
}

TEST(limit_follows_a_change_of_costs)
{
    /* A faster small-batch kernel: the fixed part dominates, tokens are
     * cheap, so the same ratio allows a much larger chunk once the old
     * observations have decayed. */
    struct stepcost c;
    stepcost_init(&c);
    feed(&c, 40, 8, 40, 0.015, 0.004);
    int before = stepcost_limit(&c, 8, 2.0, 512);
    feed(&c, 400, 8, 60, 0.020, 0.001);
    int after = stepcost_limit(&c, 8, 2.0, 512);
    EXPECT_EQ_INT(before, 19);
    EXPECT(fabs(c.b_s - 0.001) < 1e-6);
    EXPECT(after >= 8 + 27 && after <= 8 + 28); /* 0.028 / 0.001 */
}

TEST(no_positive_slope_means_the_whole_budget)
{
    struct stepcost c;
    stepcost_init(&c);
    feed(&c, 40, 8, 40, 0.050, -0.0001);
    EXPECT(c.fitted);
    EXPECT_EQ_INT(stepcost_limit(&c, 8, 2.0, 256), 256);
    /* garbage timings are ignored */
    stepcost_observe(&c, 8, -1.0, true);
    stepcost_observe(&c, 8, NAN, true);
    EXPECT_EQ_INT(c.n_obs, 40);
}

TEST_MAIN()
