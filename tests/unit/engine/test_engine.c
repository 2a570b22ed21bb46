/*
 * test_engine.c - the engine API (include/inferd/inferd.h) on a generated
 * tiny model: validation errors name the field, events arrive in order with
 * a finish event, cancellation frees KV blocks at once, max_tokens is
 * honoured, a request's tokens do not depend on the token budget, on other
 * requests or their priorities, when KV runs out the lowest-ranked request is
 * preempted and recomputed with unchanged output, a prefix-cache hit gives
 * the same tokens and logprobs as a miss, salts keep tenants apart, a full
 * waiting queue refuses with ERR_OVERLOADED, priorities order the work, and
 * exported blocks serve another engine.
 */
#include "engine_events.h"
#include "test.h"

#include "base/err.h"
#include "inferd/inferd.h"

#include <stdbool.h>
#include <unistd.h>

static inferd_model *model;

static const char *model_path(void)
{
    static char path[512];
    const char *bin = getenv("INFERD_BIN");
    if (!bin) {
        fprintf(stderr, "INFERD_BIN is not set (run through ctest)\n");
        exit(1);
    }
    snprintf(path, sizeof(path), "/tmp/inferd-test-engine-%d.gguf", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "'%s' model make --preset tiny --arch qwen2 --type q8_0 -o '%s' >/dev/null", bin,
             path);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot make the test model\n");
        exit(1);
    }
    return path;
}

static inferd_engine *engine(int budget, int kv_blocks)
{
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = 2;
    cfg.token_budget = budget;
    cfg.kv_blocks = kv_blocks;
    cfg.max_ctx = kv_blocks * 16 < 256 ? kv_blocks * 16 : 256;
    cfg.block_tokens = 16;
    inferd_engine *e = NULL;
    char err[256];
    EXPECT_EQ_INT(inferd_engine_new(model, &cfg, &e, err, sizeof(err)), 0);
    return e;
}

static uint64_t submit(inferd_engine *e, int n_prompt, int max_tokens, uint64_t seed)
{
    int32_t p[200];
    for (int i = 0; i < n_prompt; i++)
        p[i] = (int32_t)(1000 + 37 * i + seed);
    struct inferd_request r = {
        .prompt = p, .n_prompt = n_prompt, .max_tokens = max_tokens, .ignore_eos = true};
    inferd_sampling_default(&r.sampling);
    r.sampling.seed = seed;
    r.sampling.logprobs = true;
    uint64_t id = 0;
    char err[256];
    EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), 0);
    return id;
}

/* Runs to completion; collects request id's tokens and logprobs. */
static int run(inferd_engine *e, uint64_t id, int32_t *toks, float *lps, int *n_finish)
{
    int n = 0;
    *n_finish = 0;
    for (int guard = 0; guard < 10000; guard++) {
        int rc = inferd_engine_step(e);
        EXPECT(rc >= 0);
        struct inferd_event ev;
        while (inferd_poll(e, &ev)) {
            if (ev.request != id) continue;
            if (ev.token >= 0) {
                EXPECT_EQ_INT(ev.n_generated, n + 1);
                toks[n] = ev.token;
                lps[n++] = ev.logprob;
            }
            if (ev.finish != INFERD_FINISH_NONE) (*n_finish)++;
        }
        if (rc == 0) break;
    }
    return n;
}

TEST(validation_names_the_field)
{
    inferd_engine *e = engine(64, 64);
    char err[256];
    uint64_t id;
    int32_t p[3] = {1, 2, 999999999};
    struct inferd_request r = {.prompt = p, .n_prompt = 3, .max_tokens = 4};
    inferd_sampling_default(&r.sampling);
    EXPECT(inferd_submit(e, &r, &id, err, sizeof(err)) < 0);
    EXPECT(strstr(err, "prompt[2]") != NULL);
    p[2] = 3;
    r.max_tokens = 0;
    EXPECT(inferd_submit(e, &r, &id, err, sizeof(err)) < 0);
    EXPECT(strstr(err, "max_tokens") != NULL);
    r.max_tokens = 1000;
    EXPECT(inferd_submit(e, &r, &id, err, sizeof(err)) < 0);
    EXPECT(strstr(err, "context") != NULL);
    r.max_tokens = 4;
    r.sampling.top_p = 2.0f;
    EXPECT(inferd_submit(e, &r, &id, err, sizeof(err)) < 0);
    EXPECT(strstr(err, "top_p") != NULL);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_waiting + st.n_running, 0);
    inferd_engine_free(e);
}

TEST(max_tokens_and_one_finish)
{
    inferd_engine *e = engine(64, 64);
    uint64_t id = submit(e, 20, 9, 1);
    int32_t t[64];
    float lp[64];
    int nf;
    EXPECT_EQ_INT(run(e, id, t, lp, &nf), 9);
    EXPECT_EQ_INT(nf, 1);
    struct inferd_stats st;
    inferd_engine_step(e);
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.kv_blocks_used, 0);
    EXPECT_EQ_INT(st.n_generated_tokens, 9);
    EXPECT_EQ_INT(st.n_prompt_tokens, 20);
    inferd_engine_free(e);
}

TEST(tokens_independent_of_budget_and_company)
{
    int32_t ta[64], tb[64];
    float la[64], lb[64];
    int nf;
    inferd_engine *e = engine(256, 64);
    uint64_t id = submit(e, 50, 10, 7);
    EXPECT_EQ_INT(run(e, id, ta, la, &nf), 10);
    inferd_engine_free(e);

    e = engine(5, 64); /* prefill in chunks of 5, shared with two others */
    submit(e, 33, 6, 8);
    id = submit(e, 50, 10, 7);
    submit(e, 17, 12, 9);
    EXPECT_EQ_INT(run(e, id, tb, lb, &nf), 10);
    inferd_engine_free(e);
    EXPECT(memcmp(ta, tb, sizeof(int32_t) * 10) == 0);
    EXPECT(memcmp(la, lb, sizeof(float) * 10) == 0);
}

TEST(idle_steps_compute_nothing)
{
    /* A server steps whenever it wakes: an engine that never saw a request
     * (and one whose requests have all gone) computes nothing and stays
     * consistent. Under UBSan this also guards the empty-queue paths. */
    inferd_engine *e = engine(64, 64);
    EXPECT_EQ_INT(inferd_engine_step(e), 0);
    EXPECT_EQ_INT(inferd_engine_step(e), 0);
    uint64_t id = submit(e, 8, 2, 1);
    int guard = 0;
    struct inferd_event ev;
    bool done = false;
    while (!done && guard++ < 100) {
        EXPECT(inferd_engine_step(e) >= 0);
        while (inferd_poll(e, &ev))
            if (ev.request == id && ev.finish != INFERD_FINISH_NONE) done = true;
    }
    EXPECT(done);
    EXPECT_EQ_INT(inferd_engine_step(e), 0);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_waiting + st.n_running, 0);
    inferd_engine_free(e);
}

TEST(cancel_frees_blocks)
{
    inferd_engine *e = engine(64, 64);
    uint64_t id = submit(e, 40, 50, 3);
    for (int i = 0; i < 3; i++)
        inferd_engine_step(e);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT(st.kv_blocks_used >= 3);
    inferd_cancel(e, id);
    inferd_engine_step(e);
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.kv_blocks_used, 0);
    bool cancelled = false;
    struct inferd_event ev;
    while (inferd_poll(e, &ev))
        if (ev.request == id && ev.finish == INFERD_FINISH_CANCELLED) cancelled = true;
    EXPECT(cancelled);
    inferd_engine_free(e);
}

TEST(pause_holds_a_request_and_changes_nothing)
{
    /* Alone: the reference tokens. */
    int32_t ref[40], got[40];
    float ref_lp[40], got_lp[40];
    int nf;
    inferd_engine *e = engine(64, 64);
    uint64_t id = submit(e, 30, 24, 9);
    int n_ref = run(e, id, ref, ref_lp, &nf);
    EXPECT_EQ_INT(n_ref, 24);
    inferd_engine_free(e);

    /* Paused after a few tokens: steps go on for the other request, this
     * one computes nothing and keeps its blocks; resumed, it ends with the
     * same tokens and logprobs bitwise. */
    e = engine(64, 64);
    id = submit(e, 30, 24, 9);
    uint64_t other = submit(e, 20, 200, 4);
    int n = 0;
    struct inferd_event ev;
    for (int s = 0; s < 6; s++) {
        inferd_engine_step(e);
        while (inferd_poll(e, &ev))
            if (ev.request == id && ev.token >= 0) {
                got[n] = ev.token;
                got_lp[n++] = ev.logprob;
            }
    }
    EXPECT(n > 0 && n < 24);
    EXPECT_EQ_INT(inferd_pause(e, id, true), 0);
    struct inferd_stats st0, st1;
    inferd_engine_stats(e, &st0);
    for (int s = 0; s < 10; s++) {
        EXPECT(inferd_engine_step(e) == 1); /* only the other request's token */
        while (inferd_poll(e, &ev))
            EXPECT(ev.request != id);
    }
    inferd_engine_stats(e, &st1);
    EXPECT(st1.kv_blocks_used >= st0.kv_blocks_used); /* the paused request kept its blocks */
    EXPECT_EQ_INT(st1.n_running, 2);
    EXPECT_EQ_INT(inferd_pause(e, id, false), 0);
    inferd_cancel(e, other);
    nf = 0;
    for (int guard = 0; guard < 1000 && !nf; guard++) {
        inferd_engine_step(e);
        while (inferd_poll(e, &ev)) {
            if (ev.request != id) continue;
            if (ev.token >= 0 && n < 40) {
                EXPECT_EQ_INT(ev.n_generated, n + 1);
                got[n] = ev.token;
                got_lp[n++] = ev.logprob;
            }
            nf += ev.finish != INFERD_FINISH_NONE;
        }
    }
    EXPECT_EQ_INT(n, n_ref);
    EXPECT_EQ_INT(nf, 1);
    for (int i = 0; i < n_ref && i < n; i++) {
        EXPECT_EQ_INT(got[i], ref[i]);
        EXPECT(memcmp(&got_lp[i], &ref_lp[i], sizeof(float)) == 0);
    }
    EXPECT_EQ_INT(inferd_pause(e, id, true), ERR_NOT_FOUND); /* finished */
    EXPECT_EQ_INT(inferd_pause(e, 987654, true), ERR_NOT_FOUND);
    inferd_engine_free(e);
}

TEST(preemption_keeps_output)
{
    /* 6 blocks of 16: room for one 40+40-token request at a time, so one is
     * preempted and recomputed; both still get all their tokens, the same
     * tokens and logprobs as when each runs alone. */
    int32_t alone[2][64], got[2][64];
    float lp_alone[2][64], lp_got[2][64];
    int nf;
    for (int k = 0; k < 2; k++) {
        inferd_engine *e = engine(64, 64);
        uint64_t id = submit(e, 40, 40, (uint64_t)k + 1);
        EXPECT_EQ_INT(run(e, id, alone[k], lp_alone[k], &nf), 40);
        inferd_engine_free(e);
    }
    inferd_engine *e = engine(64, 6);
    uint64_t ids[2] = {submit(e, 40, 40, 1), submit(e, 40, 40, 2)};
    int done = 0, n[2] = {0, 0};
    for (int guard = 0; guard < 1000 && done < 2; guard++) {
        EXPECT(inferd_engine_step(e) >= 0);
        struct inferd_event ev;
        while (inferd_poll(e, &ev)) {
            int k = ev.request == ids[0] ? 0 : 1;
            if (ev.token >= 0 && n[k] < 64) {
                got[k][n[k]] = ev.token;
                lp_got[k][n[k]++] = ev.logprob;
            }
            if (ev.finish != INFERD_FINISH_NONE) {
                EXPECT_EQ_INT(ev.finish, INFERD_FINISH_LENGTH);
                done++;
            }
        }
    }
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT(st.n_preempted >= 1);
    EXPECT_EQ_INT(done, 2);
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ_INT(n[k], 40);
        EXPECT(memcmp(alone[k], got[k], sizeof(int32_t) * 40) == 0);
        EXPECT(memcmp(lp_alone[k], lp_got[k], sizeof(float) * 40) == 0);
    }
    inferd_engine_free(e);
}

/* ---- scheduler and prefix cache ---- */

static inferd_engine *engine_cfg(const struct inferd_engine_config *over)
{
    struct inferd_engine_config cfg = *over;
    cfg.n_threads = 2;
    cfg.block_tokens = 16;
    if (!cfg.max_ctx) cfg.max_ctx = 256;
    inferd_engine *e = NULL;
    char err[256];
    EXPECT_EQ_INT(inferd_engine_new(model, &cfg, &e, err, sizeof(err)), 0);
    return e;
}

static struct inferd_engine_config cfg_of(int budget, int kv_blocks, int max_seqs)
{
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.token_budget = budget;
    cfg.kv_blocks = kv_blocks;
    cfg.max_seqs = max_seqs;
    cfg.max_ctx = kv_blocks * 16 < 256 ? kv_blocks * 16 : 256;
    return cfg;
}

/* A prompt of n tokens: base tokens, differing from index `from` on by `alt`. */
static void prompt_of(int32_t *p, int n, int from, int alt)
{
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)(500 + 13 * i + (i >= from ? alt : 0));
}

static uint64_t submit_p(inferd_engine *e, const int32_t *p, int n, int max_tokens, uint64_t seed,
                         int priority, const char *salt)
{
    struct inferd_request r = {.prompt = p,
                               .n_prompt = n,
                               .max_tokens = max_tokens,
                               .ignore_eos = true,
                               .priority = priority,
                               .cache_salt = salt,
                               .cache_salt_len = salt ? strlen(salt) : 0};
    inferd_sampling_default(&r.sampling);
    r.sampling.seed = seed;
    r.sampling.logprobs = true;
    r.sampling.n_logprobs = 3;
    uint64_t id = 0;
    char err[256];
    EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), 0);
    return id;
}

struct result {
    int32_t toks[128]; /* generated tokens */
    float lps[128];    /* their logprobs */
    float top[128][3]; /* alternatives' logprobs */
    int n;             /* tokens seen */
    int finish;        /* finish reason */
    int n_prompt;      /* usage */
    int n_cached;      /* usage */
    int finish_rank;   /* 0 for the first request to finish, ... */
};

/* Steps until every request in ids finished; fills res[i] for ids[i]. */
static void run_many(inferd_engine *e, const uint64_t *ids, int n, struct result *res)
{
    memset(res, 0, sizeof(*res) * (size_t)n);
    int finished = 0;
    for (int guard = 0; guard < 20000 && finished < n; guard++) {
        EXPECT(inferd_engine_step(e) >= 0);
        struct inferd_event ev;
        while (inferd_poll(e, &ev)) {
            for (int k = 0; k < n; k++) {
                if (ev.request != ids[k]) continue;
                struct result *r = &res[k];
                if (ev.token >= 0 && r->n < 128) {
                    r->toks[r->n] = ev.token;
                    r->lps[r->n] = ev.logprob;
                    for (int j = 0; j < 3; j++)
                        r->top[r->n][j] = ev.top[j].logprob;
                    r->n++;
                }
                if (ev.finish != INFERD_FINISH_NONE) {
                    r->finish = ev.finish;
                    r->n_prompt = ev.n_prompt;
                    r->n_cached = ev.n_cached;
                    r->finish_rank = finished++;
                }
            }
        }
    }
    EXPECT_EQ_INT(finished, n);
}

static void run_one(inferd_engine *e, uint64_t id, struct result *res)
{
    run_many(e, &id, 1, res);
}

/* Tokens, logprobs and alternatives bitwise equal. */
static bool same_output(const struct result *a, const struct result *b)
{
    return a->n == b->n && a->n > 0 && memcmp(a->toks, b->toks, sizeof(int32_t) * a->n) == 0 &&
           memcmp(a->lps, b->lps, sizeof(float) * a->n) == 0 &&
           memcmp(a->top, b->top, sizeof(float) * 3 * a->n) == 0;
}

/* The output of a request alone in a fresh engine without a prefix cache. */
static void reference(const int32_t *p, int n, int max_tokens, uint64_t seed, struct result *res)
{
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    cfg.no_prefix_cache = true;
    inferd_engine *e = engine_cfg(&cfg);
    run_one(e, submit_p(e, p, n, max_tokens, seed, 0, NULL), res);
    inferd_engine_free(e);
}

static struct result res_a, res_b, ref_a;

/* Eight requests with every kind of sampling knob decode together; the rows
 * of a step are sampled on the engine's compute threads. One thread or two,
 * the events must be bitwise the same and come in the same order. */
TEST(sampling_on_one_or_two_threads_gives_the_same_events)
{
    enum { N = 8, MAX_EV = 1024 };
    static struct inferd_event evs[2][MAX_EV];
    int n_ev[2] = {0, 0};
    const struct inferd_logit_bias bias[3] = {{7, 100.0f}, {40, -100.0f}, {91, 2.5f}};
    for (int mode = 0; mode < 2; mode++) {
        struct inferd_engine_config cfg = cfg_of(64, 64, N);
        cfg.n_threads = mode + 1;
        inferd_engine *e = NULL;
        char err[256];
        EXPECT_EQ_INT(inferd_engine_new(model, &cfg, &e, err, sizeof(err)), 0);
        for (int k = 0; k < N; k++) {
            int32_t p[12];
            prompt_of(p, 12, 6, k);
            struct inferd_request r = {
                .prompt = p, .n_prompt = 12, .max_tokens = 24, .ignore_eos = true};
            inferd_sampling_default(&r.sampling);
            r.sampling.seed = 900 + (uint64_t)k;
            r.sampling.logprobs = k % 2 == 0;
            r.sampling.n_logprobs = k % 2 == 0 ? 1 + k : 0;
            r.sampling.temperature = (float[]){1.0f, 0.0f, 0.7f, 1.3f}[k % 4];
            if (k == 2) r.sampling.top_k = 20;
            if (k == 3) r.sampling.top_p = 0.8f;
            if (k == 4) r.sampling.min_p = 0.05f;
            if (k == 5) r.sampling.repetition_penalty = 1.3f;
            if (k == 6) r.sampling.presence_penalty = 0.5f, r.sampling.frequency_penalty = 0.3f;
            if (k == 7 || k == 4) r.sampling.logit_bias = bias, r.sampling.n_logit_bias = 3;
            uint64_t id;
            EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), 0);
        }
        int finished = 0;
        for (int guard = 0; guard < 1000 && finished < N; guard++) {
            EXPECT(inferd_engine_step(e) >= 0);
            struct inferd_event ev;
            while (inferd_poll(e, &ev)) {
                if (n_ev[mode] < MAX_EV) evs[mode][n_ev[mode]++] = ev;
                finished += ev.finish != INFERD_FINISH_NONE;
            }
        }
        EXPECT_EQ_INT(finished, N);
        inferd_engine_free(e);
    }
    EXPECT_EQ_INT(n_ev[0], N * 24);
    expect_same_events(evs[0], n_ev[0], evs[1], n_ev[1]);
}

TEST(prefix_hit_is_bitwise_a_miss)
{
    int32_t p[100];
    prompt_of(p, 50, 50, 0);
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    inferd_engine *e = engine_cfg(&cfg);
    struct inferd_stats st;

    /* First time: a miss. */
    reference(p, 50, 20, 11, &ref_a);
    run_one(e, submit_p(e, p, 50, 20, 11, 0, NULL), &res_a);
    EXPECT(same_output(&res_a, &ref_a));
    EXPECT_EQ_INT(res_a.n_prompt, 50);
    EXPECT_EQ_INT(res_a.n_cached, 0);
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.kv_blocks_used, 0);
    EXPECT(st.kv_blocks_cached >= 4); /* 50 + 19 computed positions: 4 full blocks */
    EXPECT_EQ_INT(st.kv_blocks_cached + st.kv_blocks_free, st.kv_blocks_total);

    /* Same prompt again: 3 of its blocks attached (positions 0..47), the
     * rest computed; output bitwise the same. */
    run_one(e, submit_p(e, p, 50, 20, 11, 0, NULL), &res_b);
    EXPECT(same_output(&res_b, &ref_a));
    EXPECT_EQ_INT(res_b.n_cached, 48);
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_prefix_hit_tokens, 48);
    EXPECT_EQ_INT(st.n_prefix_hits, 1);
    EXPECT_EQ_INT(st.n_prefix_lookups, 2);
    EXPECT_EQ_INT(st.n_prompt_tokens, 50 + 2);

    /* A shared 40-token prefix and a different tail: 2 blocks hit. */
    prompt_of(p, 60, 40, 7);
    reference(p, 60, 12, 5, &ref_a);
    run_one(e, submit_p(e, p, 60, 12, 5, 0, NULL), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 32);
    EXPECT(same_output(&res_b, &ref_a));

    /* Fully cached prompt (48 tokens = 3 full cached blocks): the block
     * with the last token is recomputed, 32 tokens come from the cache. */
    prompt_of(p, 48, 48, 0);
    reference(p, 48, 10, 3, &ref_a);
    run_one(e, submit_p(e, p, 48, 10, 3, 0, NULL), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 32);
    EXPECT(same_output(&res_b, &ref_a));

    /* A follow-up turn: the first prompt, its 20 generated tokens and 5
     * more. The blocks over generated tokens were cached too: 64 hit. */
    prompt_of(p, 50, 50, 0);
    memcpy(p + 50, res_a.toks, sizeof(int32_t) * 20);
    for (int i = 70; i < 75; i++)
        p[i] = 900 + i;
    reference(p, 75, 8, 9, &ref_a);
    run_one(e, submit_p(e, p, 75, 8, 9, 0, NULL), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 64);
    EXPECT(same_output(&res_b, &ref_a));
    inferd_engine_free(e);
}

TEST(cache_salt_separates_tenants)
{
    int32_t p[64];
    prompt_of(p, 40, 40, 0);
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    inferd_engine *e = engine_cfg(&cfg);
    run_one(e, submit_p(e, p, 40, 4, 1, 0, "tenant-a"), &res_a);
    EXPECT_EQ_INT(res_a.n_cached, 0);
    run_one(e, submit_p(e, p, 40, 4, 1, 0, "tenant-b"), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 0);
    run_one(e, submit_p(e, p, 40, 4, 1, 0, NULL), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 0);
    run_one(e, submit_p(e, p, 40, 4, 1, 0, "tenant-a"), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 32);
    EXPECT(same_output(&res_a, &res_b));
    inferd_engine_free(e);
}

TEST(block_ids_are_portable_and_events_name_them)
{
    /* Two engines of the same model store the same block ids for the same
     * prompt; a salt changes all of them. */
    int32_t p[64];
    prompt_of(p, 40, 40, 0);
    struct inferd_kv_event ev[2][16];
    int n[2];
    for (int k = 0; k < 2; k++) {
        struct inferd_engine_config cfg = cfg_of(64, 64, 8);
        cfg.kv_events = true;
        inferd_engine *e = engine_cfg(&cfg);
        run_one(e, submit_p(e, p, 40, 4, 1, 0, NULL), &res_a);
        n[k] = inferd_kv_events(e, ev[k], 16);
        struct inferd_stats st;
        inferd_engine_stats(e, &st);
        EXPECT_EQ_INT(n[k], (int)st.n_kv_stored);
        EXPECT_EQ_INT(inferd_kv_events(e, ev[k] + n[k], 16 - n[k]), 0);
        inferd_engine_free(e);
    }
    EXPECT_EQ_INT(n[0], 2); /* 40 + 3 computed positions: 2 full blocks */
    EXPECT_EQ_INT(n[1], 2);
    for (int i = 0; i < n[0] && i < n[1]; i++) {
        EXPECT(ev[0][i].kind == INFERD_KV_STORED);
        EXPECT(memcmp(ev[0][i].id, ev[1][i].id, 16) == 0);
    }
    EXPECT(memcmp(ev[0][0].id, ev[0][1].id, 16) != 0);

    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    cfg.kv_events = true;
    inferd_engine *e = engine_cfg(&cfg);
    run_one(e, submit_p(e, p, 40, 4, 1, 0, "salt"), &res_a);
    EXPECT_EQ_INT(inferd_kv_events(e, ev[1], 16), 2);
    EXPECT(memcmp(ev[0][0].id, ev[1][0].id, 16) != 0);
    inferd_engine_free(e);

    /* Another block size or KV type is another engine fingerprint. */
    uint8_t f0[16], f1[16], f2[16];
    cfg = cfg_of(64, 64, 8);
    e = engine_cfg(&cfg);
    inferd_engine_fingerprint(e, f0);
    inferd_engine_free(e);
    cfg.kv_type = INFERD_KV_F32;
    e = engine_cfg(&cfg);
    inferd_engine_fingerprint(e, f1);
    inferd_engine_free(e);
    inferd_engine_config_default(&cfg);
    cfg.kv_blocks = 64;
    cfg.max_ctx = 256;
    cfg.n_threads = 2;
    cfg.block_tokens = 32;
    e = NULL;
    char err[256];
    EXPECT_EQ_INT(inferd_engine_new(model, &cfg, &e, err, sizeof(err)), 0);
    inferd_engine_fingerprint(e, f2);
    inferd_engine_free(e);
    EXPECT(memcmp(f0, f1, 16) != 0 && memcmp(f0, f2, 16) != 0);
}

TEST(cancel_frees_blocks_in_the_same_step)
{
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    cfg.no_prefix_cache = true;
    inferd_engine *e = engine_cfg(&cfg);
    int32_t p[64];
    prompt_of(p, 40, 40, 0);
    uint64_t id = submit_p(e, p, 40, 50, 3, 0, NULL);
    uint64_t waiting = submit_p(e, p, 40, 50, 4, 0, NULL);
    for (int i = 0; i < 3; i++)
        inferd_engine_step(e);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT(st.kv_blocks_used >= 6);
    EXPECT_EQ_INT(inferd_cancel(e, id), 0);
    EXPECT_EQ_INT(inferd_cancel(e, waiting), 0);
    /* No step in between: the blocks are back already. */
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.kv_blocks_used, 0);
    EXPECT_EQ_INT(st.kv_blocks_free, st.kv_blocks_total);
    EXPECT_EQ_INT(st.n_running + st.n_waiting, 0);
    EXPECT_EQ_INT(st.n_cancelled, 2);
    int n_cancelled = 0;
    struct inferd_event ev;
    while (inferd_poll(e, &ev)) {
        if (ev.finish != INFERD_FINISH_CANCELLED) continue;
        n_cancelled++;
        EXPECT_EQ_INT(ev.n_prompt, 40);
    }
    EXPECT_EQ_INT(n_cancelled, 2);
    EXPECT_EQ_INT(inferd_cancel(e, id), ERR_NOT_FOUND);
    EXPECT_EQ_INT(inferd_cancel(e, 12345), ERR_NOT_FOUND);
    EXPECT_EQ_INT(inferd_engine_step(e), 0);
    inferd_engine_free(e);
}

TEST(full_queue_is_overloaded)
{
    struct inferd_engine_config cfg = cfg_of(64, 64, 1);
    cfg.max_waiting = 2;
    inferd_engine *e = engine_cfg(&cfg);
    int32_t p[64];
    prompt_of(p, 20, 20, 0);
    uint64_t ids[3];
    ids[0] = submit_p(e, p, 20, 6, 1, 0, NULL);
    ids[1] = submit_p(e, p, 20, 6, 2, 0, NULL);
    struct inferd_request r = {.prompt = p, .n_prompt = 20, .max_tokens = 6};
    inferd_sampling_default(&r.sampling);
    char err[256];
    uint64_t id;
    EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), ERR_OVERLOADED);
    EXPECT(strstr(err, "overloaded") != NULL);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_rejected, 1);
    EXPECT_EQ_INT(st.n_waiting, 2);
    EXPECT_EQ_INT(st.queued_tokens, 2 * (20 + 6));
    /* One step admits one request (max_seqs 1): room for one more. */
    EXPECT(inferd_engine_step(e) > 0);
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_running, 1);
    EXPECT_EQ_INT(st.n_waiting, 1);
    EXPECT(st.tokens_per_s > 0);
    EXPECT(st.est_queue_ms > 0); /* what a Retry-After is computed from */
    ids[2] = submit_p(e, p, 20, 6, 3, 0, NULL);
    struct result res[3];
    run_many(e, ids, 3, res);
    for (int k = 0; k < 3; k++)
        EXPECT_EQ_INT(res[k].n, 6);
    inferd_engine_free(e);
}

TEST(prompt_longer_than_context)
{
    struct inferd_engine_config cfg = cfg_of(64, 8, 4); /* max_ctx 128 */
    inferd_engine *e = engine_cfg(&cfg);
    int32_t p[200];
    prompt_of(p, 200, 200, 0);
    struct inferd_request r = {.prompt = p, .n_prompt = 130, .max_tokens = 1};
    inferd_sampling_default(&r.sampling);
    char err[256];
    uint64_t id;
    EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), ERR_TOO_LARGE);
    EXPECT(strstr(err, "prompt: 130 tokens") != NULL && strstr(err, "context length 128"));
    r.n_prompt = 100;
    r.max_tokens = 40;
    EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), ERR_TOO_LARGE);
    EXPECT(strstr(err, "max_tokens") != NULL);
    r.max_tokens = 28;
    EXPECT_EQ_INT(inferd_submit(e, &r, &id, err, sizeof(err)), 0);
    inferd_engine_free(e);
}

TEST(priority_orders_admission)
{
    /* One request runs at a time: the high-priority one goes first even
     * though it came last; equal priorities keep arrival order. */
    struct inferd_engine_config cfg = cfg_of(64, 64, 1);
    inferd_engine *e = engine_cfg(&cfg);
    int32_t p[64];
    prompt_of(p, 20, 20, 0);
    uint64_t ids[4] = {submit_p(e, p, 20, 4, 1, 0, NULL), submit_p(e, p, 20, 4, 2, 0, NULL),
                       submit_p(e, p, 20, 4, 3, 5, NULL), submit_p(e, p, 20, 4, 4, -1, NULL)};
    struct result res[4];
    run_many(e, ids, 4, res);
    EXPECT_EQ_INT(res[2].finish_rank, 0);
    EXPECT_EQ_INT(res[0].finish_rank, 1);
    EXPECT_EQ_INT(res[1].finish_rank, 2);
    EXPECT_EQ_INT(res[3].finish_rank, 3);
    inferd_engine_free(e);
}

TEST(priority_preempts_lower_and_keeps_outputs)
{
    /* 6 blocks of 16: a low-priority 40+40 request runs; a high-priority
     * one arrives, cannot get blocks and preempts it. The high one finishes
     * first; both give the tokens they give alone. */
    int32_t pl[64], ph[64];
    prompt_of(pl, 40, 0, 1);
    prompt_of(ph, 40, 0, 2);
    struct result ref_l, ref_h, res[2];
    reference(pl, 40, 40, 1, &ref_l);
    reference(ph, 40, 40, 2, &ref_h);
    struct inferd_engine_config cfg = cfg_of(64, 6, 8);
    inferd_engine *e = engine_cfg(&cfg);
    uint64_t ids[2];
    ids[0] = submit_p(e, pl, 40, 40, 1, 0, NULL);
    for (int i = 0; i < 5; i++)
        EXPECT(inferd_engine_step(e) > 0);
    ids[1] = submit_p(e, ph, 40, 40, 2, 3, NULL);
    run_many(e, ids, 2, res);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT(st.n_preempted >= 1);
    EXPECT_EQ_INT(res[1].finish_rank, 0);
    EXPECT(same_output(&res[0], &ref_l));
    EXPECT(same_output(&res[1], &ref_h));
    EXPECT_EQ_INT(res[0].finish, INFERD_FINISH_LENGTH);
    inferd_engine_free(e);
}

TEST(batch_composition_never_changes_tokens)
{
    /* The request of interest alone, then in a crowd of different
     * priorities and lengths, some sharing its prefix (cache hits), under a
     * small budget (chunked prefill) and a KV pool small enough to preempt;
     * same seed -> same tokens and logprobs. */
    int32_t p[64];
    prompt_of(p, 45, 45, 0);
    struct result ref_x;
    reference(p, 45, 30, 77, &ref_x);
    struct inferd_engine_config cfg = cfg_of(7, 8, 6);
    inferd_engine *e = engine_cfg(&cfg);
    uint64_t ids[7];
    int32_t q[6][64];
    for (int k = 0; k < 6; k++) {
        int n = 20 + 6 * k;
        prompt_of(q[k], n, k % 2 ? 33 : 0, k + 1); /* odd k share 33 tokens with p */
        ids[k] = submit_p(e, q[k], n, 10 + 3 * k, (uint64_t)k + 100, (k % 3) - 1, NULL);
    }
    ids[6] = submit_p(e, p, 45, 30, 77, 0, NULL);
    struct result res[7];
    run_many(e, ids, 7, res);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT(st.n_preempted >= 1);
    EXPECT(same_output(&res[6], &ref_x));
    for (int k = 0; k < 6; k++) {
        struct result alone;
        reference(q[k], 20 + 6 * k, 10 + 3 * k, (uint64_t)k + 100, &alone);
        EXPECT(same_output(&res[k], &alone));
    }
    EXPECT_EQ_INT(st.kv_blocks_used, 0);
    inferd_engine_free(e);
}

TEST(prefill_next_to_decodes_stays_within_the_step_limit)
{
    /* A request decodes; a long prompt arrives. Every step that carries
     * both holds at most the limit the measured step costs allow (here a
     * tight ratio, so the limit is below the budget once the cost line has a
     * slope), the prompt still completes in chunks, and neither output
     * differs from the request alone. The limit follows measured step
     * times, so on a host busy with other work one run can see every mixed
     * step's limit at the budget (a slow decode step inflates the usual
     * gap): the scenario runs up to three times, and the limit must have
     * bitten in one of them; the outputs are checked in every run. */
    int32_t pa[64], pb[200];
    prompt_of(pa, 40, 40, 0);
    prompt_of(pb, 200, 0, 7);
    struct result ref_pa, ref_pb;
    reference(pa, 40, 60, 5, &ref_pa);
    reference(pb, 200, 4, 6, &ref_pb);
    struct inferd_engine_config cfg = cfg_of(128, 64, 4);
    cfg.prefill_step_ratio = 1.05f;
    int below_budget = 0;
    for (int attempt = 0; attempt < 3 && below_budget == 0; attempt++) {
        inferd_engine *e = engine_cfg(&cfg);
        uint64_t ids[2];
        ids[0] = submit_p(e, pa, 40, 60, 5, 0, NULL);
        for (int k = 0; k < 10; k++)
            EXPECT(inferd_engine_step(e) > 0); /* prefill 40, then decodes of 1 */
        ids[1] = submit_p(e, pb, 200, 4, 6, 0, NULL);
        int mixed = 0;
        struct result res[2];
        memset(res, 0, sizeof(res));
        for (int guard = 0; guard < 1000; guard++) {
            int n = inferd_engine_step(e);
            EXPECT(n >= 0);
            if (n == 0) break;
            struct inferd_stats st;
            inferd_engine_stats(e, &st);
            EXPECT(st.last_step_tokens <= st.last_step_limit);
            EXPECT(st.last_step_limit <= 128);
            if (st.last_step_seqs == 2) mixed++;
            if (st.last_step_seqs == 2 && st.step_ms_per_token > 0) {
                /* 1.05 x a decode step leaves room for a few prompt tokens */
                below_budget += st.last_step_limit < 128;
            }
            struct inferd_event ev;
            while (inferd_poll(e, &ev))
                for (int k = 0; k < 2; k++)
                    if (ev.request == ids[k] && ev.token >= 0) {
                        res[k].toks[res[k].n] = ev.token;
                        res[k].lps[res[k].n] = ev.logprob;
                        for (int j = 0; j < 3; j++)
                            res[k].top[res[k].n][j] = ev.top[j].logprob;
                        res[k].n++;
                    }
        }
        /* the 200-token prompt took more than one mixed step */
        EXPECT(mixed >= 2);
        EXPECT(same_output(&res[0], &ref_pa));
        EXPECT(same_output(&res[1], &ref_pb));
        inferd_engine_free(e);
    }
    EXPECT(below_budget >= 1);
}

TEST(prefill_step_ratio_is_validated)
{
    struct inferd_engine_config cfg = cfg_of(64, 64, 4);
    cfg.prefill_step_ratio = 0.5f;
    inferd_engine *e = NULL;
    char err[256] = "";
    EXPECT_EQ_INT(inferd_engine_new(model, &cfg, &e, err, sizeof(err)), ERR_INVALID);
    EXPECT(strstr(err, "prefill_step_ratio") != NULL);
    cfg.prefill_step_ratio = -1; /* off */
    EXPECT_EQ_INT(inferd_engine_new(model, &cfg, &e, err, sizeof(err)), 0);
    inferd_engine_free(e);
}

TEST(max_seqs_limits_running)
{
    struct inferd_engine_config cfg = cfg_of(256, 64, 2);
    inferd_engine *e = engine_cfg(&cfg);
    int32_t p[64];
    prompt_of(p, 10, 10, 0);
    uint64_t ids[4];
    for (int k = 0; k < 4; k++)
        ids[k] = submit_p(e, p, 10, 5, (uint64_t)k, 0, NULL);
    EXPECT(inferd_engine_step(e) > 0);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_running, 2);
    EXPECT_EQ_INT(st.n_waiting, 2);
    EXPECT_EQ_INT(st.last_step_seqs, 2);
    EXPECT_EQ_INT(st.last_step_tokens, 20);
    struct result res[4];
    run_many(e, ids, 4, res);
    inferd_engine_free(e);
}

TEST(exported_blocks_serve_another_engine)
{
    /* Engine A computes a prompt; its stored blocks travel as frames to a
     * fresh engine B, where the same prompt hits them and gives the output
     * it gives computed from scratch. */
    int32_t p[64];
    prompt_of(p, 50, 50, 0);
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    cfg.kv_events = true;
    inferd_engine *a = engine_cfg(&cfg), *b = engine_cfg(&cfg);
    run_one(a, submit_p(a, p, 50, 4, 21, 0, NULL), &res_a);
    struct inferd_kv_event ev[16];
    int n = inferd_kv_events(a, ev, 16);
    EXPECT_EQ_INT(n, 3); /* 50 + 3 computed positions: 3 full blocks */
    size_t len = inferd_kv_frame_bytes(a);
    EXPECT(len > 56);
    uint8_t *frame = malloc(len);
    char err[256];
    for (int i = 0; i < n; i++) {
        EXPECT_EQ_INT(inferd_kv_export(a, ev[i].id, frame, len), 0);
        EXPECT_EQ_INT(inferd_kv_import(b, frame, len, err, sizeof(err)), 0);
    }
    EXPECT_EQ_INT(inferd_kv_export(a, ev[0].id, frame, len - 1), ERR_INVALID);
    uint8_t unknown[16] = {0};
    EXPECT_EQ_INT(inferd_kv_export(a, unknown, frame, len), ERR_NOT_FOUND);
    struct inferd_stats st;
    inferd_engine_stats(b, &st);
    EXPECT_EQ_INT(st.kv_blocks_cached, 3);
    EXPECT_EQ_INT(st.n_kv_stored, 3);
    reference(p, 50, 4, 21, &ref_a);
    run_one(b, submit_p(b, p, 50, 4, 21, 0, NULL), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 48);
    EXPECT(same_output(&res_b, &ref_a));
    EXPECT(same_output(&res_a, &ref_a));

    /* Frames are external input: corruption and mismatches are refused. */
    EXPECT_EQ_INT(inferd_kv_export(a, ev[1].id, frame, len), 0);
    frame[len - 1] ^= 1;
    EXPECT_EQ_INT(inferd_kv_import(b, frame, len, err, sizeof(err)), ERR_FORMAT);
    EXPECT(strstr(err, "checksum") != NULL);
    EXPECT_EQ_INT(inferd_kv_import(b, frame, 20, err, sizeof(err)), ERR_FORMAT);
    frame[len - 1] ^= 1;
    EXPECT_EQ_INT(inferd_kv_import(b, frame, len - 2, err, sizeof(err)), ERR_FORMAT);
    cfg.kv_type = INFERD_KV_F32;
    inferd_engine *c = engine_cfg(&cfg);
    EXPECT_EQ_INT(inferd_kv_import(c, frame, len, err, sizeof(err)), ERR_INVALID);
    EXPECT(strstr(err, "fingerprint") != NULL);
    inferd_engine_free(c);
    free(frame);
    inferd_engine_free(a);
    inferd_engine_free(b);
}

TEST(stress_small_pool_priorities_cancels)
{
    /* Twelve requests sharing prefixes, random priorities, a pool of 10
     * blocks, chunked prefill, two cancellations: the engine never stalls,
     * every other request gives what it gives in a roomy engine without a
     * prefix cache, and all blocks come back. */
    enum { N = 12 };
    static int32_t pr[N][80];
    int np[N], mt[N], prio[N];
    uint64_t rng = 42;
    for (int k = 0; k < N; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        np[k] = 10 + (int)(rng >> 33) % 60;
        mt[k] = 4 + (int)(rng >> 40) % 30;
        prio[k] = (int)(rng >> 50) % 3;
        prompt_of(pr[k], np[k], (int)(rng >> 20) % 64, k + 1);
    }
    struct result big[N], small[N];
    struct inferd_engine_config cfg = cfg_of(64, 80, N);
    cfg.no_prefix_cache = true;
    inferd_engine *e = engine_cfg(&cfg);
    uint64_t ids[N];
    for (int k = 0; k < N; k++)
        ids[k] = submit_p(e, pr[k], np[k], mt[k], (uint64_t)k, 0, NULL);
    run_many(e, ids, N, big);
    inferd_engine_free(e);

    cfg = cfg_of(16, 10, 4); /* max_ctx 160 */
    e = engine_cfg(&cfg);
    for (int k = 0; k < N; k++)
        ids[k] = submit_p(e, pr[k], np[k], mt[k], (uint64_t)k, prio[k], NULL);
    memset(small, 0, sizeof(small));
    int finished = 0, stalls = 0;
    for (int step = 0; step < 20000 && finished < N; step++) {
        if (step == 5) EXPECT_EQ_INT(inferd_cancel(e, ids[3]), 0);
        if (step == 40) inferd_cancel(e, ids[8]); /* may have finished */
        int rc = inferd_engine_step(e);
        EXPECT(rc >= 0);
        struct inferd_event ev;
        int n_ev = 0;
        while (inferd_poll(e, &ev)) {
            n_ev++;
            int k = (int)(ev.request - ids[0]);
            EXPECT(k >= 0 && k < N);
            struct result *r = &small[k];
            if (ev.token >= 0 && r->n < 128) {
                r->toks[r->n] = ev.token;
                r->lps[r->n] = ev.logprob;
                for (int j = 0; j < 3; j++)
                    r->top[r->n][j] = ev.top[j].logprob;
                r->n++;
            }
            if (ev.finish != INFERD_FINISH_NONE) {
                r->finish = ev.finish;
                finished++;
            }
        }
        stalls += rc == 0 && n_ev == 0;
    }
    EXPECT_EQ_INT(finished, N);
    EXPECT_EQ_INT(stalls, 0);
    EXPECT_EQ_INT(small[3].finish, INFERD_FINISH_CANCELLED);
    for (int k = 0; k < N; k++) {
        if (small[k].finish == INFERD_FINISH_CANCELLED) {
            EXPECT(small[k].n <= big[k].n);
            EXPECT(memcmp(small[k].toks, big[k].toks, sizeof(int32_t) * small[k].n) == 0);
            continue;
        }
        EXPECT(same_output(&small[k], &big[k]));
    }
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT(st.n_preempted >= 1);
    EXPECT(st.n_prefix_hit_blocks >= 1);
    EXPECT_EQ_INT(st.kv_blocks_used, 0);
    EXPECT_EQ_INT(st.kv_blocks_used + st.kv_blocks_cached + st.kv_blocks_free, 10);
    EXPECT_EQ_INT(st.n_finished, N);
    inferd_engine_free(e);
}

/* The pure block ids are the ids the engine gives the same blocks. */
TEST(pure_block_ids_equal_the_engine_ids)
{
    int32_t p[80];
    prompt_of(p, 70, 70, 0);
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    cfg.kv_events = true;
    for (int salted = 0; salted < 2; salted++) {
        const char *salt = salted ? "tenant-a" : NULL;
        inferd_engine *e = engine_cfg(&cfg);
        run_one(e, submit_p(e, p, 70, 4, 3, 0, salt), &res_a);
        struct inferd_kv_event ev[16];
        int n = inferd_kv_events(e, ev, 16);
        EXPECT_EQ_INT(n, 4); /* 73 computed positions: 4 full blocks */
        uint8_t fp[16], ids[8][16];
        inferd_engine_fingerprint(e, fp);
        EXPECT_EQ_INT(inferd_engine_block_tokens(e), 16);
        int k = inferd_kv_block_ids(fp, 16, salt, salt ? strlen(salt) : 0, p, 70, ids, 8);
        EXPECT_EQ_INT(k, 4);
        for (int i = 0; i < k && i < n; i++)
            EXPECT(memcmp(ids[i], ev[i].id, 16) == 0);
        EXPECT_EQ_INT(inferd_kv_cached_prefix(e, (const uint8_t(*)[16])ids, k), 4);
        ids[2][0] ^= 1; /* the probe stops at the first block not held */
        EXPECT_EQ_INT(inferd_kv_cached_prefix(e, (const uint8_t(*)[16])ids, k), 2);
        EXPECT_EQ_INT(inferd_kv_block_ids(fp, 16, NULL, 0, p, 70, ids, 2), 2);
        EXPECT_EQ_INT(inferd_kv_block_ids(fp, 0, NULL, 0, p, 70, ids, 2), ERR_INVALID);
        inferd_engine_free(e);
    }
}

struct evicted {
    int n;               /* frames seen */
    uint8_t ids[64][16]; /* their ids */
    uint8_t *frames[64]; /* copies */
    size_t len;          /* frame bytes */
};

static void keep_evicted(void *ctx, const uint8_t id[16], const void *frame, size_t len)
{
    struct evicted *v = ctx;
    if (v->n == 64) return;
    memcpy(v->ids[v->n], id, 16);
    v->frames[v->n] = malloc(len);
    memcpy(v->frames[v->n], frame, len);
    v->len = len;
    v->n++;
}

/* The pre-eviction hook sees every evicted block with its intact frame:
 * imported into a fresh engine, the frames serve the prompt bitwise as a
 * recompute. */
TEST(evict_hook_saves_blocks_before_reuse)
{
    static struct evicted v;
    int32_t p[80], q[80];
    prompt_of(p, 70, 70, 0);
    prompt_of(q, 70, 0, 7);
    struct inferd_engine_config cfg = cfg_of(64, 8, 8); /* 8 blocks: q evicts p */
    cfg.kv_evict_hook = keep_evicted;
    cfg.kv_evict_ctx = &v;
    inferd_engine *e = engine_cfg(&cfg);
    run_one(e, submit_p(e, p, 70, 4, 9, 0, NULL), &res_a);
    EXPECT_EQ_INT(v.n, 0);
    run_one(e, submit_p(e, q, 70, 4, 9, 0, NULL), &res_b);
    run_one(e, submit_p(e, q, 70, 4, 10, 0, "x"), &res_b);
    run_one(e, submit_p(e, q, 70, 4, 10, 0, "y"), &res_b);
    EXPECT(v.n >= 4);
    uint8_t fp[16], ids[8][16];
    inferd_engine_fingerprint(e, fp);
    inferd_kv_block_ids(fp, 16, NULL, 0, p, 70, ids, 8);
    struct inferd_engine_config cfg2 = cfg_of(64, 64, 8);
    inferd_engine *f = engine_cfg(&cfg2);
    int found = 0;
    char err[256];
    for (int i = 0; i < v.n; i++) {
        EXPECT_EQ_INT(inferd_kv_import(f, v.frames[i], v.len, err, sizeof(err)), 0);
        for (int k = 0; k < 4; k++)
            found += memcmp(v.ids[i], ids[k], 16) == 0;
        free(v.frames[i]);
    }
    EXPECT_EQ_INT(found, 4);
    reference(p, 70, 4, 9, &ref_a);
    run_one(f, submit_p(f, p, 70, 4, 9, 0, NULL), &res_b);
    EXPECT_EQ_INT(res_b.n_cached, 64);
    EXPECT(same_output(&res_b, &ref_a));
    EXPECT(same_output(&res_a, &ref_a));
    inferd_engine_free(e);
    inferd_engine_free(f);
}

/* A held request computes nothing while another runs to its end; released,
 * it gives what it gives unheld. Cancel works while held. */
TEST(held_request_waits_and_changes_nothing)
{
    int32_t p[80], q[80];
    prompt_of(p, 40, 40, 0);
    prompt_of(q, 40, 0, 5);
    struct inferd_engine_config cfg = cfg_of(64, 64, 8);
    inferd_engine *e = engine_cfg(&cfg);
    struct inferd_request r = {
        .prompt = p, .n_prompt = 40, .max_tokens = 6, .ignore_eos = true, .hold = true};
    inferd_sampling_default(&r.sampling);
    r.sampling.seed = 4;
    r.sampling.logprobs = true;
    r.sampling.n_logprobs = 3;
    uint64_t held = 0, gone = 0;
    char err[256];
    EXPECT_EQ_INT(inferd_submit(e, &r, &held, err, sizeof(err)), 0);
    EXPECT_EQ_INT(inferd_submit(e, &r, &gone, err, sizeof(err)), 0);
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_loading, 2);
    EXPECT_EQ_INT(st.n_waiting, 0);
    run_one(e, submit_p(e, q, 40, 6, 4, 0, NULL), &res_b);
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_loading, 2);
    EXPECT_EQ_INT(st.n_running, 0);
    EXPECT_EQ_INT(inferd_engine_step(e), 0); /* held: nothing to compute */
    EXPECT_EQ_INT(inferd_cancel(e, gone), 0);
    EXPECT_EQ_INT(inferd_kv_release_hold(e, gone), ERR_NOT_FOUND);
    EXPECT_EQ_INT(inferd_kv_release_hold(e, held), 0);
    run_one(e, held, &res_a);
    reference(p, 40, 6, 4, &ref_a);
    EXPECT(same_output(&res_a, &ref_a));
    EXPECT_EQ_INT(inferd_kv_release_hold(e, 999999), ERR_NOT_FOUND);
    inferd_engine_free(e);
}

TEST(load_cleanup)
{
    inferd_model_free(model);
    model = NULL;
    char err[256];
    inferd_model *m;
    EXPECT(inferd_model_load("/nonexistent/x.gguf", &m, err, sizeof(err)) < 0);
    EXPECT(strstr(err, "No such file") != NULL || strstr(err, "no such file") != NULL);
}

__attribute__((constructor)) static void setup(void)
{
    const char *path = model_path();
    char err[256];
    if (inferd_model_load(path, &model, err, sizeof(err))) {
        fprintf(stderr, "cannot load %s: %s\n", path, err);
        exit(1);
    }
    unlink(path); /* the mapping stays valid */
}

TEST_MAIN()
