/*
 * test_bench_workload.c - length distributions, deterministic block tokens,
 * the ideal prefix-hit ratio (hand-computed), synthetic shapes and arrival
 * processes (means and burstiness from many draws).
 */
#include "test.h"

#include "base/buf.h"
#include "bench/bench_workload.h"

TEST(dist_parse_and_sample)
{
    struct bench_dist d;
    uint64_t rng = 1;
    EXPECT_EQ_INT(bench_dist_parse("x", "fixed:5", &d, NULL), 0);
    EXPECT_EQ_INT(bench_dist_sample(&d, &rng), 5);
    EXPECT_EQ_INT(bench_dist_parse("x", "7", &d, NULL), 0);
    EXPECT_EQ_INT(bench_dist_sample(&d, &rng), 7);
    EXPECT_EQ_INT(bench_dist_parse("x", "uniform:3:5", &d, NULL), 0);
    int seen[8] = {0};
    for (int i = 0; i < 300; i++) {
        int32_t v = bench_dist_sample(&d, &rng);
        EXPECT(v >= 3 && v <= 5);
        if (v >= 0 && v < 8) seen[v]++;
    }
    EXPECT(seen[3] > 50 && seen[4] > 50 && seen[5] > 50);
    EXPECT_EQ_INT(bench_dist_parse("x", "normal:100:0", &d, NULL), 0);
    EXPECT_EQ_INT(bench_dist_sample(&d, &rng), 100);
    EXPECT_EQ_INT(bench_dist_parse("x", "lognormal:200:100", &d, NULL), 0);
    double sum = 0, sq = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        double v = bench_dist_sample(&d, &rng);
        sum += v;
        sq += v * v;
    }
    double mean = sum / n, sd = sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 200, 5);
    EXPECT_NEAR(sd, 100, 8);
    struct err_msg m = {{0}};
    const char *bad[] = {"uniform:5:3", "foo", "normal:1", "fixed:-1", "fixed:3x", "lognormal:0:1"};
    for (size_t k = 0; k < 6; k++) {
        m.text[0] = 0;
        EXPECT_EQ_INT(bench_dist_parse("--input", bad[k], &d, &m), ERR_INVALID);
        EXPECT(strstr(m.text, "--input") != NULL);
    }
}

TEST(block_tokens_are_a_function_of_the_id)
{
    struct bench_workload w;
    bench_workload_init(&w, 4);
    uint64_t a[2] = {7, 9}, b[2] = {7, 8};
    struct bench_item x = {.n_input = 8, .n_output = 1, .blocks = a, .n_blocks = 2, .after = -1};
    struct bench_item y = {.n_input = 6, .n_output = 1, .blocks = b, .n_blocks = 2, .after = -1};
    bench_workload_add(&w, &x);
    bench_workload_add(&w, &y);
    struct i32vec tx = {0}, ty = {0};
    bench_item_tokens(&w, 0, &tx);
    bench_item_tokens(&w, 1, &ty);
    EXPECT_EQ_INT(tx.n, 8);
    EXPECT_EQ_INT(ty.n, 6);
    EXPECT(!memcmp(tx.v, ty.v, 4 * sizeof(int32_t))); /* block 7 shared */
    EXPECT(memcmp(tx.v + 4, ty.v + 4, 2 * sizeof(int32_t)) != 0);
    for (size_t i = 0; i < tx.n; i++)
        EXPECT(tx.v[i] >= w.vocab_lo && tx.v[i] < w.vocab_hi);
    /* a different seed gives different content */
    w.seed = 1;
    struct i32vec tz = {0};
    bench_item_tokens(&w, 0, &tz);
    EXPECT(memcmp(tx.v, tz.v, 8 * sizeof(int32_t)) != 0);
    /* text mode: one word per token */
    struct buf t = {0};
    bench_item_text(&w, 1, &t);
    int words = 0;
    for (size_t i = 0; i < t.len; i++)
        words += t.data[i] == ' ';
    EXPECT_EQ_INT(words, 6);
    buf_release(&t);
    i32vec_release(&tx), i32vec_release(&ty), i32vec_release(&tz);
    bench_workload_release(&w);
}

TEST(ideal_hit_ratio_by_hand)
{
    struct bench_workload w;
    bench_workload_init(&w, 4);
    uint64_t a[2] = {1, 2}, b[3] = {1, 2, 3}, c[2] = {1, 3};
    struct bench_item items[3] = {
        {.n_input = 8, .n_output = 1, .blocks = a, .n_blocks = 2, .after = -1},
        {.n_input = 10, .n_output = 1, .blocks = b, .n_blocks = 3, .after = -1},
        {.n_input = 8, .n_output = 1, .blocks = c, .n_blocks = 2, .after = -1}};
    for (int i = 0; i < 3; i++)
        bench_workload_add(&w, &items[i]);
    int32_t cached[3];
    double r = bench_workload_ideal_hit(&w, cached);
    EXPECT_EQ_INT(cached[0], 0);
    EXPECT_EQ_INT(cached[1], 8);
    EXPECT_EQ_INT(cached[2], 6); /* block 3 was seen with 2 tokens only */
    EXPECT_NEAR(r, 14.0 / 26.0, 1e-12);
    bench_workload_release(&w);
}

TEST(synthetic_prefix_groups)
{
    struct bench_workload w;
    bench_workload_init(&w, 16);
    struct bench_synth s = {.shape = BENCH_SHAPE_PREFIX,
                            .n_requests = 8,
                            .n_groups = 2,
                            .users_per_group = 2,
                            .prefix_tokens = 32};
    EXPECT_EQ_INT(bench_dist_parse("i", "16", &s.len_in, NULL), 0);
    EXPECT_EQ_INT(bench_dist_parse("o", "4", &s.len_out, NULL), 0);
    EXPECT_EQ_INT(bench_workload_synth(&w, &s, NULL), 0);
    EXPECT_EQ_INT(w.n, 8);
    EXPECT_EQ_INT(w.items[0].n_input, 48);
    /* users 0,1 share group 0; 2,3 group 1; each group's first request misses */
    EXPECT_NEAR(bench_workload_ideal_hit(&w, NULL), 192.0 / 384.0, 1e-12);
    EXPECT(w.items[0].blocks[0] == w.items[1].blocks[0]);
    EXPECT(w.items[0].blocks[0] != w.items[2].blocks[0]);
    EXPECT(w.items[0].blocks[2] != w.items[1].blocks[2]);
    bench_workload_release(&w);
}

TEST(synthetic_multiturn_extends_context)
{
    struct bench_workload w;
    bench_workload_init(&w, 16);
    struct bench_synth s = {.shape = BENCH_SHAPE_MULTITURN, .n_sessions = 1, .n_turns = 3};
    EXPECT_EQ_INT(bench_dist_parse("i", "16", &s.len_in, NULL), 0);
    EXPECT_EQ_INT(bench_dist_parse("o", "10", &s.len_out, NULL), 0);
    EXPECT_EQ_INT(bench_dist_parse("t", "250", &s.think, NULL), 0);
    EXPECT_EQ_INT(bench_workload_synth(&w, &s, NULL), 0);
    EXPECT_EQ_INT(w.n, 3);
    EXPECT_EQ_INT(w.items[0].n_input, 16);
    EXPECT_EQ_INT(w.items[1].n_input, 48); /* 16 + answer 10 -> 16 + 16 new */
    EXPECT_EQ_INT(w.items[2].n_input, 80);
    EXPECT_EQ_INT(w.items[1].after, 0);
    EXPECT_EQ_INT(w.items[2].after, 1);
    EXPECT_NEAR(w.items[2].think_s, 0.25, 1e-12);
    EXPECT_NEAR(bench_workload_ideal_hit(&w, NULL), 64.0 / 144.0, 1e-12);
    bench_workload_release(&w);
}

TEST(agentic_turns_name_their_messages)
{
    /* chat sessions split each prompt into the system prompt (shared
     * blocks) and each turn's new user input; answers sit between */
    struct bench_workload w;
    bench_workload_init(&w, 16);
    struct bench_synth s = {
        .shape = BENCH_SHAPE_AGENTIC, .n_sessions = 1, .n_turns = 2, .prefix_tokens = 32};
    EXPECT_EQ_INT(bench_dist_parse("i", "8", &s.len_in, NULL), 0);
    EXPECT_EQ_INT(bench_dist_parse("o", "5", &s.len_out, NULL), 0);
    EXPECT_EQ_INT(bench_dist_parse("t", "1", &s.think, NULL), 0);
    EXPECT_EQ_INT(bench_workload_synth(&w, &s, NULL), 0);
    EXPECT_EQ_INT(w.n, 2);
    EXPECT_EQ_INT(w.items[0].n_sys_blocks, 2);
    EXPECT_EQ_INT(w.items[0].user_block, 2);
    EXPECT_EQ_INT(w.items[0].n_user, 8);
    /* shared 2 blocks, turn 0's input (1 block), its answer (1 block), then turn 1 */
    EXPECT_EQ_INT(w.items[1].n_sys_blocks, 2);
    EXPECT_EQ_INT(w.items[1].user_block, 4);
    EXPECT_EQ_INT(w.items[1].n_user, 8);
    struct buf all = {0}, part = {0};
    bench_item_text(&w, 1, &all);
    bench_item_range_text(&w, 1, 4, 8, &part);
    /* the user text is the last 8 words of the whole prompt's text */
    EXPECT(part.len > 0 && part.len < all.len);
    EXPECT(memcmp(all.data + all.len - part.len, part.data, part.len) == 0);
    int words = 0;
    for (size_t i = 0; i < part.len; i++)
        words += part.data[i] == ' ';
    EXPECT_EQ_INT(words, 8);
    buf_release(&all);
    buf_release(&part);
    bench_workload_release(&w);
}

static void plain(struct bench_workload *w, int n)
{
    bench_workload_init(w, 16);
    struct bench_synth s = {.shape = BENCH_SHAPE_PLAIN, .n_requests = n};
    bench_dist_parse("i", "16", &s.len_in, NULL);
    bench_dist_parse("o", "4", &s.len_out, NULL);
    EXPECT_EQ_INT(bench_workload_synth(w, &s, NULL), 0);
}

static void gaps(const struct bench_workload *w, double *mean, double *cv)
{
    double sum = 0, sq = 0;
    int n = w->n - 1;
    for (int i = 1; i < w->n; i++) {
        double g = w->items[i].t_s - w->items[i - 1].t_s;
        EXPECT(g >= 0);
        sum += g;
        sq += g * g;
    }
    *mean = sum / n;
    *cv = sqrt(sq / n - *mean * *mean) / *mean;
}

TEST(arrival_processes)
{
    struct bench_workload w;
    double mean, cv;
    plain(&w, 20001);
    struct bench_arrivals a = {.kind = BENCH_ARRIVAL_POISSON, .rate = 10, .seed = 3};
    bench_workload_arrivals(&w, &a);
    EXPECT_NEAR(w.items[0].t_s, 0, 0);
    gaps(&w, &mean, &cv);
    EXPECT_NEAR(mean, 0.1, 0.004);
    EXPECT_NEAR(cv, 1.0, 0.04);
    bench_workload_release(&w);

    plain(&w, 20001);
    struct bench_arrivals g = {.kind = BENCH_ARRIVAL_GAMMA, .rate = 10, .burstiness = 0.25};
    bench_workload_arrivals(&w, &g);
    gaps(&w, &mean, &cv);
    EXPECT_NEAR(mean, 0.1, 0.008);
    EXPECT_NEAR(cv, 2.0, 0.15); /* CV = 1 / sqrt(shape) */
    bench_workload_release(&w);

    plain(&w, 5);
    struct bench_arrivals c = {.kind = BENCH_ARRIVAL_CLOSED};
    bench_workload_arrivals(&w, &c);
    for (int i = 0; i < 5; i++)
        EXPECT_NEAR(w.items[i].t_s, 0, 0);
    for (int i = 0; i < 5; i++)
        w.items[i].t_s = i, w.items[i].think_s = 1;
    struct bench_arrivals t = {.kind = BENCH_ARRIVAL_TRACE, .time_scale = 2};
    bench_workload_arrivals(&w, &t);
    EXPECT_NEAR(w.items[3].t_s, 1.5, 1e-12);
    EXPECT_NEAR(w.items[3].think_s, 0.5, 1e-12);
    bench_workload_release(&w);
}

TEST_MAIN()
