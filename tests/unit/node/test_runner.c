/*
 * test_runner.c - the engine runner thread: every submitted tag gets its
 * tokens in order and exactly one final message (finish event or submit
 * error); cancels end requests early and free their KV; the eventfd wakes a
 * waiting consumer; stopping with live requests returns.
 */
#include "test.h"

#include "base/check.h"
#include "node/runner.h"

#include <poll.h>
#include <unistd.h>

static inferd_model *model;

static void load_model(void)
{
    const char *bin = getenv("INFERD_BIN");
    if (!bin) {
        fprintf(stderr, "INFERD_BIN is not set (run through ctest)\n");
        exit(1);
    }
    char path[512], cmd[2048], err[256];
    snprintf(path, sizeof(path), "/tmp/inferd-test-runner-%d.gguf", (int)getpid());
    snprintf(cmd, sizeof(cmd),
             "'%s' model make --preset tiny --arch qwen2 --type q8_0 --layers 1 -o '%s' "
             ">/dev/null",
             bin, path);
    if (system(cmd) != 0 || inferd_model_load(path, &model, err, sizeof(err)) != 0) {
        fprintf(stderr, "cannot make the test model: %s\n", err);
        exit(1);
    }
    unlink(path);
}

static inferd_engine *engine(void)
{
    if (!model) load_model();
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = 1;
    cfg.max_ctx = 256;
    cfg.max_seqs = 8;
    inferd_engine *e;
    char err[256];
    CHECK(inferd_engine_new(model, &cfg, &e, err, sizeof(err)) == 0);
    return e;
}

struct seen {
    int tokens;                /* token events */
    int finals;                /* final messages */
    int rc;                    /* submit error */
    enum inferd_finish finish; /* of the final event */
};

/* Drains until every tag in [1, n] has its final message (or 20 s pass). */
static void drain_all(struct runner *r, struct seen *seen, int n)
{
    struct runner_msg *msgs = NULL;
    size_t cap = 0;
    for (int spins = 0; spins < 2000; spins++) {
        struct pollfd p = {.fd = r->wake_fd, .events = POLLIN};
        poll(&p, 1, 10);
        size_t k = runner_drain(r, &msgs, &cap);
        for (size_t i = 0; i < k; i++) {
            struct runner_msg *m = &msgs[i];
            CHECK(m->tag >= 1 && (int)m->tag <= n);
            struct seen *s = &seen[m->tag];
            EXPECT_EQ_INT(s->finals, 0); /* nothing after the final message */
            if (m->rc) {
                s->rc = m->rc;
                s->finals++;
                continue;
            }
            if (m->ev.token >= 0) s->tokens++;
            if (m->ev.finish != INFERD_FINISH_NONE) {
                s->finals++;
                s->finish = m->ev.finish;
            }
        }
        int done = 0;
        for (int t = 1; t <= n; t++)
            done += seen[t].finals > 0;
        if (done == n) break;
    }
    free(msgs);
}

TEST(tokens_and_one_final_per_tag)
{
    inferd_engine *e = engine();
    struct runner r;
    EXPECT_EQ_INT(runner_start(&r, e, NULL), 0);
    int32_t prompt[] = {1, 2, 3, 4, 5};
    struct seen seen[6] = {{0}};
    for (int t = 1; t <= 4; t++) {
        struct inferd_request q = {
            .prompt = prompt, .n_prompt = 5, .max_tokens = 3 + t, .ignore_eos = true};
        inferd_sampling_default(&q.sampling);
        runner_submit(&r, (uint64_t)t, &q);
    }
    int32_t bad[] = {-7};
    struct inferd_request q = {.prompt = bad, .n_prompt = 1, .max_tokens = 2};
    inferd_sampling_default(&q.sampling);
    runner_submit(&r, 5, &q);
    drain_all(&r, seen, 5);
    for (int t = 1; t <= 4; t++) {
        EXPECT_EQ_INT(seen[t].finals, 1);
        EXPECT_EQ_INT(seen[t].tokens, 3 + t);
        EXPECT_EQ_INT(seen[t].finish, INFERD_FINISH_LENGTH);
    }
    EXPECT_EQ_INT(seen[5].finals, 1);
    EXPECT_EQ_INT(seen[5].rc, ERR_INVALID);
    struct runner_stats st;
    runner_get_stats(&r, &st);
    EXPECT(st.n_steps > 0);
    EXPECT_EQ_INT(st.engine.n_running, 0);
    runner_stop(&r);
    inferd_engine_free(e);
}

TEST(cancel_ends_early_and_frees_kv)
{
    inferd_engine *e = engine();
    struct runner r;
    EXPECT_EQ_INT(runner_start(&r, e, NULL), 0);
    int32_t prompt[] = {1, 2, 3};
    struct inferd_request q = {
        .prompt = prompt, .n_prompt = 3, .max_tokens = 200, .ignore_eos = true};
    inferd_sampling_default(&q.sampling);
    runner_submit(&r, 1, &q);
    runner_cancel(&r, 1);
    runner_cancel(&r, 99); /* unknown tags are ignored */
    struct seen seen[2] = {{0}};
    drain_all(&r, seen, 1);
    EXPECT_EQ_INT(seen[1].finals, 1);
    EXPECT_EQ_INT(seen[1].finish, INFERD_FINISH_CANCELLED);
    EXPECT(seen[1].tokens < 200);
    struct runner_stats st;
    runner_get_stats(&r, &st);
    EXPECT_EQ_INT(st.engine.kv_blocks_used, 0);
    runner_stop(&r);
    inferd_engine_free(e);
}

TEST(stop_with_live_requests)
{
    inferd_engine *e = engine();
    struct runner r;
    EXPECT_EQ_INT(runner_start(&r, e, NULL), 0);
    int32_t prompt[] = {1, 2, 3};
    struct inferd_request q = {
        .prompt = prompt, .n_prompt = 3, .max_tokens = 250, .ignore_eos = true};
    inferd_sampling_default(&q.sampling);
    for (int t = 1; t <= 3; t++)
        runner_submit(&r, (uint64_t)t, &q);
    runner_stop(&r); /* cancels them and joins */
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    EXPECT_EQ_INT(st.n_running + st.n_waiting, 0);
    inferd_engine_free(e);
}

TEST_MAIN()
