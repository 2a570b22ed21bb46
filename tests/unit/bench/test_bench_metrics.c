/*
 * test_bench_metrics.c - bench figures against hand-computed values:
 * percentiles, per-request times, SLO attainment, request and token goodput,
 * cache hit ratios, speculative acceptance and the tau correction, cost.
 */
#include "test.h"

#include "bench/bench_metrics.h"

static struct bench_record rec(double send, double first, double end, int n_out, double gap,
                               int n_gaps)
{
    struct bench_record r = {.ok = true,
                             .status = 200,
                             .due_s = send,
                             .ready_s = send,
                             .send_s = send,
                             .first_s = first,
                             .end_s = end,
                             .n_output = n_out,
                             .n_events = n_gaps + 1,
                             .n_cached = -1,
                             .spec_drafts = -1,
                             .spec_draft_tok = -1,
                             .spec_accepted = -1};
    for (int i = 0; i < n_gaps; i++)
        bench_record_add_gap(&r, gap);
    return r;
}

TEST(percentiles_interpolate_between_ranks)
{
    double v[4] = {4, 1, 3, 2};
    struct bench_stats s;
    bench_stats_compute(v, 4, &s);
    EXPECT_NEAR(s.p50, 2.5, 1e-12);
    EXPECT_NEAR(s.p90, 3.7, 1e-12); /* rank 2.7 between 3 and 4 */
    EXPECT_NEAR(s.p99, 3.97, 1e-12);
    EXPECT_NEAR(s.mean, 2.5, 1e-12);
    EXPECT_NEAR(s.max, 4, 0);
    double one[1] = {7};
    bench_stats_compute(one, 1, &s);
    EXPECT_NEAR(s.p50, 7, 0);
    EXPECT_NEAR(s.p99, 7, 0);
    bench_stats_compute(NULL, 0, &s);
    EXPECT_EQ_INT(s.n, 0);
}

TEST(per_request_times)
{
    struct bench_record r = rec(1.0, 1.25, 2.25, 5, 0.25, 4);
    EXPECT_NEAR(bench_record_ttft(&r), 0.25, 1e-12);
    EXPECT_NEAR(bench_record_e2e(&r), 1.25, 1e-12);
    EXPECT_NEAR(bench_record_tpot(&r), 0.25, 1e-12); /* (2.25 - 1.25) / 4 */
    EXPECT_NEAR(bench_record_itl_p99(&r), 0.25, 1e-12);
    bench_record_release(&r);
    struct bench_record one = rec(0, 0.5, 0.5, 1, 0, 0);
    EXPECT(bench_record_tpot(&one) < 0); /* undefined for one token */
    EXPECT(bench_record_itl_p99(&one) < 0);
    bench_record_release(&one);
}

/* Three successes and one 503, the example worked out in the comments. */
static void example(struct bench_record r[4])
{
    r[0] = rec(0.0, 0.1, 0.5, 5, 0.1, 4);   /* TTFT .1  TPOT .1  E2E .5  */
    r[1] = rec(1.0, 1.3, 1.5, 3, 0.1, 2);   /* TTFT .3  TPOT .1  E2E .5  */
    r[2] = rec(2.0, 2.05, 2.85, 5, 0.2, 4); /* TTFT .05 TPOT .2  E2E .85 */
    r[3] = (struct bench_record){.status = 503,
                                 .send_s = 3.0,
                                 .due_s = 3.0,
                                 .ready_s = 3.0,
                                 .first_s = -1,
                                 .end_s = 3.01,
                                 .n_cached = -1};
    r[0].n_input = 100, r[0].n_cached = 50, r[0].ideal_cached = 60;
    r[1].n_input = 100, r[1].ideal_cached = 100; /* reports no cached tokens */
    r[2].n_input = 200, r[2].n_cached = 100, r[2].ideal_cached = 100;
    r[3].n_input = 50;
    r[0].spec_drafts = 2, r[0].spec_draft_tok = 6, r[0].spec_accepted = 2;
    r[2].spec_drafts = 2, r[2].spec_draft_tok = 6, r[2].spec_accepted = 2;
}

TEST(summary_matches_hand_computation)
{
    struct bench_record r[4];
    example(r);
    struct bench_slo slo = {.ttft_s = 0.2, .tpot_s = 0.15};
    struct bench_summary s;
    bench_summary_compute(r, 4, &slo, NULL, &s);
    EXPECT_EQ_INT(s.n_total, 4);
    EXPECT_EQ_INT(s.n_ok, 3);
    EXPECT_NEAR(s.duration_s, 3.01, 1e-12);
    EXPECT_EQ_INT(s.peak_in_flight, 1);   /* one after another */
    EXPECT_NEAR(s.send_rate, 1.0, 1e-12); /* sends at 0, 1, 2, 3 */
    EXPECT_NEAR(s.req_s, 3 / 3.01, 1e-12);
    EXPECT_NEAR(s.out_tok_s, 13 / 3.01, 1e-12);
    EXPECT_NEAR(s.in_tok_s, 400 / 3.01, 1e-12);
    /* TTFT {.05, .1, .3} */
    EXPECT_NEAR(s.ttft.mean, 0.15, 1e-12);
    EXPECT_NEAR(s.ttft.p50, 0.1, 1e-12);
    EXPECT_NEAR(s.ttft.p90, 0.26, 1e-12);
    EXPECT_NEAR(s.ttft.p99, 0.296, 1e-12);
    EXPECT_NEAR(s.ttft.max, 0.3, 1e-12);
    /* ITL pooled: six gaps of .1, four of .2 */
    EXPECT_EQ_INT(s.itl.n, 10);
    EXPECT_NEAR(s.itl.mean, 0.14, 1e-12);
    EXPECT_NEAR(s.itl.p50, 0.1, 1e-12);
    EXPECT_NEAR(s.itl.p90, 0.2, 1e-12);
    EXPECT_NEAR(s.tpot.p50, 0.1, 1e-12);
    EXPECT_NEAR(s.e2e.p50, 0.5, 1e-12);
    EXPECT_NEAR(s.speed.p50, 10, 1e-9); /* 1 / TPOT */
    /* only r[0] meets TTFT <= .2 and TPOT <= .15 */
    EXPECT_EQ_INT(s.n_slo_met, 1);
    EXPECT_NEAR(s.slo_attainment, 0.25, 1e-12);
    EXPECT_NEAR(s.goodput_req_s, 1 / 3.01, 1e-12);
    EXPECT_NEAR(s.goodput_tok_s, 5 / 3.01, 1e-12);
    /* hit ratios over the requests that reported cached tokens */
    EXPECT_EQ_INT(s.prompt_tokens, 300);
    EXPECT_EQ_INT(s.cached_tokens, 150);
    EXPECT_NEAR(s.hit_server, 0.5, 1e-12);
    EXPECT_NEAR(s.hit_ideal, 160.0 / 300.0, 1e-12);
    /* errors */
    EXPECT_NEAR(s.error_rate, 0.25, 1e-12);
    EXPECT_EQ_INT(s.n_error_kinds, 1);
    EXPECT_EQ_INT(s.errors[0].status, 503);
    EXPECT_EQ_INT(s.errors[0].n, 1);
    /* speculation from per-request fields: 4 drafts, 12 draft tokens, 4 accepted */
    EXPECT(s.spec.known);
    EXPECT_NEAR(s.spec.acceptance, 1.0 / 3.0, 1e-12);
    EXPECT_NEAR(s.spec.tau, 2.0, 1e-12);
    EXPECT_NEAR(s.spec.k_mean, 3.0, 1e-12);
    EXPECT_NEAR(s.spec.decode_tok_s, 2.0 * 4 / 3.01, 1e-12);
    EXPECT_NEAR(s.spec.all_accepted_tok_s, 4.0 * 4 / 3.01, 1e-12);
    for (int i = 0; i < 4; i++)
        bench_record_release(&r[i]);
}

TEST(slo_targets_combine)
{
    struct bench_record r[4];
    example(r);
    struct bench_summary s;
    struct bench_slo e2e = {.e2e_s = 0.6};
    bench_summary_compute(r, 4, &e2e, NULL, &s);
    EXPECT_EQ_INT(s.n_slo_met, 2); /* r0, r1 */
    EXPECT_NEAR(s.goodput_tok_s, 8 / 3.01, 1e-12);
    struct bench_slo itl = {.itl_p99_s = 0.15};
    bench_summary_compute(r, 4, &itl, NULL, &s);
    EXPECT_EQ_INT(s.n_slo_met, 2); /* r2's gaps are .2 */
    r[1].send_s = 0.2;             /* now overlaps r[0] */
    r[2].send_s = 0.5;             /* starts exactly when r[0] ends: not counted together */
    bench_summary_compute(r, 4, &e2e, NULL, &s);
    EXPECT_EQ_INT(s.peak_in_flight, 2);
    struct bench_slo none = {0};
    bench_summary_compute(r, 4, &none, NULL, &s);
    EXPECT_EQ_INT(s.n_slo_met, 3); /* no target: every success counts, failures never */
    EXPECT(!s.slo_set);
    for (int i = 0; i < 4; i++)
        bench_record_release(&r[i]);
}

TEST(spec_from_server_counters_when_requests_report_none)
{
    struct bench_record r[1] = {rec(0, 0.5, 2.5, 11, 0.2, 10)};
    struct bench_spec prom = {.drafts = 5, .draft_tokens = 20, .accepted = 5};
    struct bench_summary s;
    struct bench_slo slo = {0};
    bench_summary_compute(r, 1, &slo, &prom, &s);
    EXPECT(s.spec.known);
    EXPECT_NEAR(s.spec.acceptance, 0.25, 1e-12);
    EXPECT_NEAR(s.spec.tau, 2.0, 1e-12);
    EXPECT_NEAR(s.spec.steps_per_s, 5 / 2.5, 1e-12);
    EXPECT_NEAR(s.spec.decode_tok_s, 4.0, 1e-12);        /* = (drafts + accepted) / duration */
    EXPECT_NEAR(s.spec.all_accepted_tok_s, 10.0, 1e-12); /* 2 steps/s * (1 + 4) */
    struct bench_spec unknown = {.drafts = -1, .draft_tokens = -1, .accepted = -1};
    bench_summary_compute(r, 1, &slo, &unknown, &s);
    EXPECT(!s.spec.known);
    bench_record_release(&r[0]);
}

TEST(cost_and_revenue)
{
    struct bench_prices p = {
        .machine_usd_h = 2, .machines = 2, .in_usd_m = 1.0, .cached_usd_m = 0.1, .out_usd_m = 2.0};
    struct bench_cost c;
    bench_cost_compute(&p, 4000, 1000, 0.5, &c);
    EXPECT_NEAR(c.usd_per_m_out, 4.0 / 3600 / 1000 * 1e6, 1e-9);
    EXPECT_NEAR(c.usd_per_m_tokens, 4.0 / 3600 / 5000 * 1e6, 1e-9);
    EXPECT_NEAR(c.revenue_usd_h, 15.12, 1e-9);
    EXPECT_NEAR(c.margin_usd_h, 11.12, 1e-9);
    EXPECT_NEAR(c.revenue_at[0], 21.6, 1e-9);
    EXPECT_NEAR(c.revenue_at[4], 8.64, 1e-9);
    EXPECT_NEAR(c.revenue_at[2], 15.12, 1e-9);
}

TEST_MAIN()
