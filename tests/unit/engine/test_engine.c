/*
 * test_engine.c - the engine API (include/inferd/inferd.h) on a generated
 * tiny model: validation errors name the field, events arrive in order with
 * a finish event, cancellation frees KV blocks, max_tokens is honoured, a
 * request's tokens do not depend on the token budget or on other requests,
 * and when KV runs out the newest request is preempted and recomputed with
 * unchanged output.
 */
#include "test.h"

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
