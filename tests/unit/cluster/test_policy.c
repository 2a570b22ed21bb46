/*
 * test_policy.c - the routing policies (cluster/policy.h) and the gateway's
 * route over them (remote_route) on hand-made snapshots: every rule, ties,
 * empty pools, a worker with no room, round-robin's order, and the same
 * snapshot giving the same answer.
 */
#include "test.h"

#include "cluster/policy.h"
#include "cluster/proto.h"
#include "cluster/remote.h"

#include <string.h>

static const unsigned all = ~0u;
static const unsigned gen = 1u << CL_ROLE_DECODE | 1u << CL_ROLE_MIXED;
static const unsigned pre = 1u << CL_ROLE_PREFILL;

static struct pol_worker worker(int role, int running, int waiting)
{
    return (struct pol_worker){.up = true,
                               .role = role,
                               .running = running,
                               .waiting = waiting,
                               .kv_total = 1000,
                               .ms_fixed = 10,
                               .ms_per_token = 1};
}

static struct pol_config cfg(enum pol_kind kind)
{
    struct pol_config c;
    pol_config_default(&c);
    c.kind = kind;
    return c;
}

TEST(empty_pools_and_roles)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_request q = {.n_prompt = 100, .max_tokens = 10};
    EXPECT_EQ_INT(pol_pick_prefill(&c, NULL, 0, all, &q), -1);
    struct pol_worker w[2] = {worker(CL_ROLE_DECODE, 0, 0), worker(CL_ROLE_DECODE, 0, 0)};
    w[0].up = false;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), -1); /* no prefill worker */
    EXPECT_EQ_INT(pol_pick_decode(&c, w, 2, gen, &q), 1);   /* the one up */
    w[1].up = false;
    for (int k = 0; k <= POL_BALANCED; k++) {
        c.kind = (enum pol_kind)k;
        EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, all, &q), -1);
        EXPECT_EQ_INT(pol_pick_decode(&c, w, 2, all, &q), -1);
    }
}

TEST(least_loaded_and_ties)
{
    struct pol_config c = cfg(POL_LEAST_LOADED);
    struct pol_request q = {.n_prompt = 10, .max_tokens = 10};
    struct pol_worker w[3] = {worker(CL_ROLE_MIXED, 2, 1), worker(CL_ROLE_MIXED, 1, 1),
                              worker(CL_ROLE_MIXED, 1, 1)};
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, all, &q), 1); /* a tie: the lower index */
    w[0].running = 0;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, all, &q), 0);
}

TEST(round_robin_cycles_over_candidates)
{
    struct pol_config c = cfg(POL_ROUND_ROBIN);
    struct pol_worker w[4] = {worker(CL_ROLE_MIXED, 9, 9), worker(CL_ROLE_PREFILL, 0, 0),
                              worker(CL_ROLE_MIXED, 0, 0), worker(CL_ROLE_MIXED, 0, 0)};
    w[3].up = false;
    int seen[4] = {0};
    for (uint64_t s = 0; s < 6; s++) {
        struct pol_request q = {.n_prompt = 10, .max_tokens = 1, .seq = s};
        int k = pol_pick_prefill(&c, w, 4, gen, &q);
        EXPECT(k == 0 || k == 2);
        seen[k]++;
        EXPECT_EQ_INT(k, s % 2 ? 2 : 0); /* load plays no part */
    }
    EXPECT_EQ_INT(seen[0], 3);
    EXPECT_EQ_INT(seen[2], 3);
}

TEST(cache_aware_trades_blocks_against_requests)
{
    struct pol_config c = cfg(POL_CACHE_AWARE);
    c.overlap_weight = 0.5;
    struct pol_request q = {.n_prompt = 200, .max_tokens = 10};
    struct pol_worker w[2] = {worker(CL_ROLE_MIXED, 1, 0), worker(CL_ROLE_MIXED, 4, 0)};
    w[1].cached_blocks = 4; /* worth 2 requests: 4 - 2 = 2 > 1 */
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, all, &q), 0);
    w[1].cached_blocks = 8; /* worth 4: 4 - 4 = 0 < 1 */
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, all, &q), 1);
}

TEST(balanced_prefill_prices_overlap_and_backlog)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_request q = {.n_prompt = 1000, .max_tokens = 10};
    struct pol_worker w[2] = {worker(CL_ROLE_PREFILL, 0, 0), worker(CL_ROLE_PREFILL, 0, 0)};
    /* the same cost line; worker 1 holds 50 blocks (800 tokens) of the prompt */
    w[1].cached_blocks = 50;
    EXPECT(pol_prefill_ms(&c, &w[1], &q) < pol_prefill_ms(&c, &w[0], &q));
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), 1);
    /* until its backlog costs more than the overlap saves: 800 tokens x 1 ms
     * for the prompt's own finish, x (1 + work_weight) with the capacity */
    w[1].queued_tokens = 1200;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), 1); /* 1200 + 4 x 200 < 4 x 1000 */
    w[1].queued_tokens = 3300;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), 0);
    c.work_weight = 0; /* the greedy earliest finish */
    w[1].queued_tokens = 700;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), 1);
    w[1].queued_tokens = 1200;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), 0);
    /* a faster worker (its measured cost) takes a longer backlog */
    w[0].queued_tokens = 1000;
    w[1].cached_blocks = 0;
    w[1].queued_tokens = 1000;
    w[1].ms_per_token = 0.25;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 2, pre, &q), 1);
    /* at most the blocks admission attaches count: all but the last token's */
    struct pol_worker all_cached = worker(CL_ROLE_PREFILL, 0, 0);
    all_cached.cached_blocks = 1000;
    struct pol_request whole = {.n_prompt = 64, .max_tokens = 1};
    EXPECT(pol_prefill_ms(&c, &all_cached, &whole) > 0); /* the last block is computed */
    /* a worker not measured yet is priced by the default line */
    struct pol_worker fresh = worker(CL_ROLE_PREFILL, 0, 0);
    fresh.ms_per_token = 0;
    fresh.ms_fixed = 0;
    EXPECT(pol_prefill_ms(&c, &fresh, &whole) ==
           c.dflt_ms_fixed + 64 * c.dflt_ms_per_token); /* one chunk */
}

TEST(balanced_decode_by_kv_with_room)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_request q = {.n_prompt = 160, .max_tokens = 160}; /* 20 blocks */
    struct pol_worker w[3] = {worker(CL_ROLE_DECODE, 1, 0), worker(CL_ROLE_DECODE, 5, 0),
                              worker(CL_ROLE_DECODE, 0, 0)};
    w[0].kv_used = 600;
    w[1].kv_used = 100; /* more requests, less KV: chosen */
    w[2].kv_used = 990; /* no room for 20 blocks */
    EXPECT_EQ_INT(pol_pick_decode(&c, w, 3, gen, &q), 1);
    w[1].kv_used = 600; /* a tie on KV: fewer requests */
    EXPECT_EQ_INT(pol_pick_decode(&c, w, 3, gen, &q), 0);
    w[0].kv_used = w[1].kv_used = 995; /* nobody has room: the least full */
    EXPECT_EQ_INT(pol_pick_decode(&c, w, 3, gen, &q), 2);
}

TEST(the_gateway_routes_by_the_policy)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_worker w[3] = {worker(CL_ROLE_PREFILL, 0, 0), worker(CL_ROLE_DECODE, 0, 0),
                              worker(CL_ROLE_DECODE, 0, 0)};
    w[1].kv_used = 500;
    struct pol_request longp = {.n_prompt = 2000, .max_tokens = 16};
    int pf = 7;
    EXPECT_EQ_INT(remote_route(&c, w, 3, &longp, 256, &pf), 2);
    EXPECT_EQ_INT(pf, 0);
    /* a short prompt is prefilled where it decodes */
    struct pol_request shortp = {.n_prompt = 100, .max_tokens = 16};
    w[2].queued_tokens = 5000;
    EXPECT_EQ_INT(remote_route(&c, w, 3, &shortp, 256, &pf), 1); /* least backlog */
    EXPECT_EQ_INT(pf, -1);
    /* no prefill worker: the decode worker prefills the long one too */
    w[0].up = false;
    EXPECT_EQ_INT(remote_route(&c, w, 3, &longp, 256, &pf), 1);
    EXPECT_EQ_INT(pf, -1);
    /* only prefill workers: they run whole requests */
    struct pol_worker p[2] = {worker(CL_ROLE_PREFILL, 3, 0), worker(CL_ROLE_PREFILL, 0, 0)};
    EXPECT_EQ_INT(remote_route(&c, p, 2, &longp, 256, &pf), 1);
    EXPECT_EQ_INT(pf, -1);
    /* two gateways, one snapshot: one answer */
    struct pol_worker copy[3];
    memcpy(copy, w, sizeof(w));
    int pf2 = 0;
    EXPECT_EQ_INT(remote_route(&c, copy, 3, &longp, 256, &pf2),
                  remote_route(&c, w, 3, &longp, 256, &pf));
    EXPECT_EQ_INT(pf2, pf);
}

TEST(buckets_by_context_length)
{
    struct pol_config c = cfg(POL_BALANCED);
    EXPECT_EQ_INT(pol_bucket(&c, 1), 0);
    EXPECT_EQ_INT(pol_bucket(&c, 1024), 0);
    EXPECT_EQ_INT(pol_bucket(&c, 1025), 1);
    EXPECT_EQ_INT(pol_bucket(&c, 16384), 2);
    EXPECT_EQ_INT(pol_bucket(&c, 1 << 20), 3);
    c.n_buckets = 1; /* one bucket: everything in it */
    EXPECT_EQ_INT(pol_bucket(&c, 1 << 20), 0);
}

TEST(balanced_prefill_spreads_each_bucket)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_request q = {.n_prompt = 5000, .max_tokens = 8}; /* bucket 2 */
    struct pol_worker w[3] = {worker(CL_ROLE_PREFILL, 0, 0), worker(CL_ROLE_PREFILL, 0, 0),
                              worker(CL_ROLE_PREFILL, 0, 0)};
    /* equal finish times: the one that computed least of this bucket */
    w[0].bucket_ms[2] = 300;
    w[1].bucket_ms[2] = 100;
    w[2].bucket_ms[2] = 200;
    w[1].bucket_ms[0] = 1e9; /* another bucket's work does not count */
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, pre, &q), 1);
    /* a backlog past the slack (by default one fixed cost, 10 ms) loses */
    w[1].queued_tokens = 5; /* 1 chunk + 5 ms later */
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, pre, &q), 2);
    /* within it the bucket still decides */
    c.bucket_slack_ms = 20;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, pre, &q), 1);
    /* past it, the earlier finish wins */
    w[1].queued_tokens = 50;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, pre, &q), 2);
    /* an explicit slack */
    c.bucket_slack_ms = 1000;
    EXPECT_EQ_INT(pol_pick_prefill(&c, w, 3, pre, &q), 1);
}

TEST(decode_step_weighs_requests_and_context)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_worker w = worker(CL_ROLE_DECODE, 3, 0);
    w.kv_used = 100;           /* 1,600 tokens */
    w.ms_per_ctx_token = 0.01; /* measured */
    /* 10 fixed + 4 requests x 1 + (1600 + 400) x 0.01 */
    EXPECT_NEAR(pol_decode_step_ms(&c, &w, 400), 10 + 4 + 20, 1e-9);
    w.ms_per_ctx_token = 0; /* unknown: the default */
    EXPECT_NEAR(pol_decode_step_ms(&c, &w, 400), 10 + 4 + 2000 * c.dflt_ms_per_ctx_token, 1e-9);
    /* many short requests against few long ones: the cheaper step */
    struct pol_request q = {.n_prompt = 100, .max_tokens = 10};
    struct pol_worker v[2] = {worker(CL_ROLE_DECODE, 20, 0), worker(CL_ROLE_DECODE, 2, 0)};
    v[0].ms_per_ctx_token = v[1].ms_per_ctx_token = 0.01;
    v[0].kv_used = 40;  /* 20 short: 10 + 21 + 6.4 + 1 */
    v[1].kv_used = 400; /* 2 long:   10 + 3 + 64 + 1 */
    EXPECT_EQ_INT(pol_pick_decode(&c, v, 2, gen, &q), 0);
    v[0].running = 90; /* 10 + 91 + ... */
    EXPECT_EQ_INT(pol_pick_decode(&c, v, 2, gen, &q), 1);
}

TEST(admission_refuses_what_would_miss_and_nothing_else)
{
    struct pol_config c = cfg(POL_BALANCED);
    struct pol_worker d = worker(CL_ROLE_MIXED, 0, 0);
    struct pol_request q = {.n_prompt = 100, .max_tokens = 10};
    struct pol_estimate e;
    pol_estimate(&c, NULL, &d, &q, &e);
    /* an idle worker: one chunk (10 ms) + 100 tokens (100 ms); a step of 10 +
     * 1 + context */
    EXPECT_NEAR(e.ttft_ms, 110, 1e-9);
    EXPECT_NEAR(e.tpot_ms, 11 + 100 * c.dflt_ms_per_ctx_token, 1e-9);
    struct pol_slo slo = {.ttft_ms = 110, .tpot_ms = 12};
    EXPECT_EQ_INT(pol_admit(&slo, &e), 0); /* exactly on target: admitted */
    slo.ttft_ms = 109.9;
    EXPECT_EQ_INT(pol_admit(&slo, &e), 1); /* just over: refused, retry in 1 s */
    /* a backlog of 2,500 tokens: 5 chunks + 2,500 ms more */
    d.queued_tokens = 2500;
    slo.ttft_ms = 500;
    pol_estimate(&c, NULL, &d, &q, &e);
    EXPECT_NEAR(e.ttft_ms, 110 + 50 + 2500, 1e-9);
    EXPECT_EQ_INT(pol_admit(&slo, &e), 3); /* 2,160 ms over: 3 s */
    /* decodes next to that prefill run at most ratio x slower */
    EXPECT_NEAR(e.tpot_ms, 2 * (11 + 2600 * c.dflt_ms_per_ctx_token), 1e-9); /* queued: context */
    slo = (struct pol_slo){.tpot_ms = 20};
    EXPECT_EQ_INT(pol_admit(&slo, &e), 1);
    slo.tpot_ms = 30;
    EXPECT_EQ_INT(pol_admit(&slo, &e), 0);
    /* no targets: everything admitted */
    slo = (struct pol_slo){0};
    EXPECT_EQ_INT(pol_admit(&slo, &e), 0);
    /* a remote prefill adds the decode worker's tail step */
    struct pol_worker p = worker(CL_ROLE_PREFILL, 0, 0);
    d.queued_tokens = 0;
    pol_estimate(&c, &p, &d, &q, &e);
    EXPECT_NEAR(e.ttft_ms, 110 + 11 + 100 * c.dflt_ms_per_ctx_token, 1e-9);
    /* targets below one step are refused as a configuration */
    const char *why = NULL;
    slo = (struct pol_slo){.ttft_ms = 1000, .tpot_ms = 5};
    EXPECT(!pol_slo_feasible(&slo, 10, 1, &why) && why && strstr(why, "TPOT"));
    slo.tpot_ms = 11;
    EXPECT(pol_slo_feasible(&slo, 10, 1, &why));
}

TEST(names)
{
    enum pol_kind k;
    EXPECT(pol_kind_parse("cache-aware", &k) && k == POL_CACHE_AWARE);
    EXPECT(!pol_kind_parse("random", &k));
    EXPECT(strcmp(pol_kind_name(POL_BALANCED), "balanced") == 0);
}

TEST_MAIN()
