/*
 * test_grammar_engine.c - structured output through the engine API on a
 * generated tiny qwen3 model (random weights, real tokenizer): generations
 * stay in the grammar and finish with STOP when it is complete, the reported
 * alternatives are tokens the mask allowed (logprobs of the masked
 * distribution), a bad grammar fails at submit with a message, and a request
 * with a grammar gives the same tokens alone and in a crowd.
 */
#include "engine_events.h"
#include "test.h"

#include "base/check.h"

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "inferd/inferd.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

static inferd_model *model;
static struct grammar_vocab *vocab;
static char path[512];

static void cleanup(void)
{
    grammar_vocab_free(vocab);
    inferd_model_free(model);
    unlink(path);
}

static void setup(void)
{
    if (model) return;
    const char *bin = getenv("INFERD_BIN");
    if (!bin) {
        fprintf(stderr, "INFERD_BIN is not set (run through ctest)\n");
        exit(1);
    }
    snprintf(path, sizeof(path), "/tmp/inferd-test-grammar-%d.gguf", (int)getpid());
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' model make --preset tiny --tokenizer qwen3 -o '%s' >/dev/null",
             bin, path);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot make the test model\n");
        exit(1);
    }
    char err[512];
    if (inferd_model_load(path, &model, err, sizeof(err))) {
        fprintf(stderr, "load: %s\n", err);
        exit(1);
    }
    struct gguf_file *f;
    struct err_msg m;
    if (gguf_open(path, &f, &m)) exit(1);
    int32_t eog[16];
    int n_eog = inferd_model_eog_tokens(model, eog, 16);
    if (grammar_vocab_from_gguf(f, inferd_model_n_vocab(model), eog, n_eog, &vocab, &m)) {
        fprintf(stderr, "vocab: %s\n", m.text);
        exit(1);
    }
    gguf_close(f);
    atexit(cleanup);
}

static bool inline_masks; /* engines made by engine() fill masks inline */
static int n_threads = 1; /* compute threads of engines made by engine() */

static inferd_engine *engine(void)
{
    setup();
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.grammar_inline = inline_masks;
    cfg.n_threads = n_threads;
    cfg.max_ctx = 512;
    cfg.max_seqs = 8;
    inferd_engine *e;
    char err[512];
    CHECK(inferd_engine_new(model, &cfg, &e, err, sizeof(err)) == 0);
    return e;
}

struct run {
    int32_t tokens[512]; /* generated */
    int n;               /* count */
    enum inferd_finish finish;
    struct inferd_event ev[512]; /* every token event */
};

static int submit(inferd_engine *e, enum inferd_grammar_kind kind, const char *src, uint64_t seed,
                  int max_tokens, uint64_t *id, char *err)
{
    int32_t prompt[3] = {11, 22, 33};
    struct inferd_request r = {.prompt = prompt, .n_prompt = 3, .max_tokens = max_tokens};
    inferd_sampling_default(&r.sampling);
    r.sampling.seed = seed;
    r.sampling.logprobs = true;
    r.sampling.n_logprobs = 5;
    r.grammar.kind = kind;
    r.grammar.source = src;
    r.grammar.len = strlen(src);
    return inferd_submit(e, &r, id, err, 512);
}

static void drain(inferd_engine *e, uint64_t id, struct run *out)
{
    memset(out, 0, sizeof(*out));
    for (int guard = 0; guard < 10000 && out->finish == INFERD_FINISH_NONE; guard++) {
        inferd_engine_step(e);
        struct inferd_event ev;
        while (inferd_poll(e, &ev)) {
            if (ev.request != id) continue;
            if (ev.token >= 0 && out->n < 512) {
                out->ev[out->n] = ev;
                out->tokens[out->n++] = ev.token;
            }
            if (ev.finish != INFERD_FINISH_NONE) out->finish = ev.finish;
        }
    }
}

/* Replays the run through a fresh matcher: every token and every reported
 * alternative must have been allowed at its step. */
static void check_run(enum grammar_kind kind, const char *src, const struct run *r)
{
    struct grammar *g;
    struct err_msg m;
    CHECK(grammar_compile(kind, src, strlen(src), &g, &m) == 0);
    struct grammar_matcher *mt = grammar_matcher_new(g, vocab);
    uint64_t *mask = malloc(sizeof(uint64_t) * (size_t)((grammar_vocab_n(vocab) + 63) / 64));
    int bad = 0;
    for (int i = 0; i < r->n; i++) {
        grammar_matcher_fill_mask(mt, mask);
        for (int k = 0; k < r->ev[i].n_top; k++) {
            int32_t t = r->ev[i].top[k].token;
            if (!((mask[t >> 6] >> (t & 63)) & 1)) bad++;
        }
        /* logprobs are of the masked distribution: the best allowed token's
         * mass cannot be below 1 / (allowed count) */
        if (!grammar_matcher_accept_token(mt, r->tokens[i])) {
            bad++;
            break;
        }
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT(grammar_matcher_is_terminated(mt) || grammar_matcher_is_accepting(mt));
    free(mask);
    grammar_matcher_free(mt);
    grammar_unref(g);
}

TEST(schema_generations_complete_and_valid)
{
    const char *s =
        "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,"
        "\"maximum\":9},\"b\":{\"type\":\"boolean\"}},\"required\":[\"n\",\"b\"],"
        "\"additionalProperties\":false}";
    inferd_engine *e = engine();
    for (uint64_t seed = 1; seed <= 4; seed++) {
        uint64_t id;
        char err[512];
        EXPECT_EQ_INT(submit(e, INFERD_GRAMMAR_JSON_SCHEMA, s, seed, 300, &id, err), 0);
        struct run r;
        drain(e, id, &r);
        EXPECT_EQ_INT(r.finish, INFERD_FINISH_STOP);
        check_run(GRAMMAR_JSON_SCHEMA, s, &r);
        /* the masked distribution: the chosen token's probability is a share
         * of the allowed tokens only, and the top alternative's logprob is
         * the largest */
        for (int i = 0; i < r.n; i++)
            if (r.ev[i].n_top > 0) EXPECT(r.ev[i].top[0].logprob >= r.ev[i].logprob);
    }
    inferd_engine_free(e);
}

TEST(complete_grammar_stops_without_eos)
{
    inferd_engine *e = engine();
    uint64_t id;
    char err[512];
    EXPECT_EQ_INT(submit(e, INFERD_GRAMMAR_EBNF, "root ::= \"a\"", 5, 50, &id, err), 0);
    struct run r;
    drain(e, id, &r);
    EXPECT_EQ_INT(r.finish, INFERD_FINISH_STOP);
    EXPECT_EQ_INT(r.n, 1);
    uint32_t len;
    const char *b = grammar_vocab_bytes(vocab, r.tokens[0], &len);
    EXPECT(len == 1 && b[0] == 'a');
    /* exactly one token allowed: its masked logprob is 0 */
    EXPECT_NEAR(r.ev[0].logprob, 0.0, 1e-6);
    inferd_engine_free(e);
}

TEST(bad_grammar_fails_at_submit)
{
    inferd_engine *e = engine();
    uint64_t id;
    char err[512] = {0};
    int rc = submit(e, INFERD_GRAMMAR_JSON_SCHEMA, "{\"type\":\"object\",\"not\":{\"enum\":[1]}}",
                    1, 10, &id, err);
    EXPECT(rc != 0);
    EXPECT(strstr(err, "#/not") != NULL);
    rc = submit(e, INFERD_GRAMMAR_EBNF, "root ::= (", 1, 10, &id, err);
    EXPECT(rc != 0);
    EXPECT(strstr(err, "grammar") != NULL);
    inferd_engine_free(e);
}

TEST(same_tokens_alone_and_in_a_crowd)
{
    const char *re = "[a-z]{2,6}(-[0-9]{1,3}){1,3}";
    inferd_engine *e = engine();
    uint64_t id;
    char err[512];
    EXPECT_EQ_INT(submit(e, INFERD_GRAMMAR_REGEX, re, 77, 100, &id, err), 0);
    struct run alone;
    drain(e, id, &alone);
    inferd_engine_free(e);
    e = engine();
    uint64_t others[3];
    for (int i = 0; i < 3; i++)
        EXPECT_EQ_INT(
            submit(e, INFERD_GRAMMAR_JSON_OBJECT, "", 100 + (uint64_t)i, 60, &others[i], err), 0);
    EXPECT_EQ_INT(submit(e, INFERD_GRAMMAR_REGEX, re, 77, 100, &id, err), 0);
    struct run crowd;
    drain(e, id, &crowd);
    EXPECT_EQ_INT(alone.finish, INFERD_FINISH_STOP);
    EXPECT_EQ_INT(crowd.n, alone.n);
    EXPECT(memcmp(crowd.tokens, alone.tokens, sizeof(int32_t) * (size_t)alone.n) == 0);
    for (int i = 0; i < alone.n && i < crowd.n; i++)
        EXPECT(memcmp(&crowd.ev[i].logprob, &alone.ev[i].logprob, sizeof(float)) == 0);
    check_run(GRAMMAR_REGEX, re, &alone);
    inferd_engine_free(e);
}

/* Masks filled by the helper thread during the forward and inline after it,
 * and rows sampled on one compute thread or spread over two, give bitwise
 * the same events in the same order, for requests sampling together. */
TEST(same_output_with_and_without_overlap_or_threads)
{
    static const struct {
        enum inferd_grammar_kind kind;
        const char *src;
    } reqs[4] = {
        {INFERD_GRAMMAR_JSON_OBJECT, ""},
        {INFERD_GRAMMAR_REGEX, "[a-z]{2,6}(-[0-9]{1,3}){1,3}"},
        {INFERD_GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\",\"maxLength\":12},"
         "\"k\":{\"type\":\"integer\",\"multipleOf\":3}},\"required\":[\"n\",\"k\"]}"},
        {INFERD_GRAMMAR_EBNF, "root ::= (\"yes\" | \"no\") (\",\" [0-9]{1,3}){0,3}"},
    };
    static struct inferd_event evs[3][4096];
    int n_ev[3] = {0, 0, 0};
    for (int mode = 0; mode < 3; mode++) {
        inline_masks = mode == 1;
        n_threads = mode == 2 ? 2 : 1;
        inferd_engine *e = engine();
        uint64_t ids[4];
        char err[512];
        for (int i = 0; i < 4; i++)
            EXPECT_EQ_INT(submit(e, reqs[i].kind, reqs[i].src, 500 + (uint64_t)i, 80, &ids[i], err),
                          0);
        int finished = 0;
        for (int guard = 0; guard < 1000 && finished < 4; guard++) {
            inferd_engine_step(e);
            struct inferd_event ev;
            while (inferd_poll(e, &ev)) {
                if (n_ev[mode] < 4096) evs[mode][n_ev[mode]++] = ev;
                finished += ev.finish != INFERD_FINISH_NONE;
            }
        }
        EXPECT_EQ_INT(finished, 4);
        inferd_engine_free(e);
    }
    inline_masks = false;
    n_threads = 1;
    EXPECT(n_ev[0] > 20);
    for (int mode = 1; mode < 3; mode++)
        expect_same_events(evs[0], n_ev[0], evs[mode], n_ev[mode]);
}

TEST_MAIN()
