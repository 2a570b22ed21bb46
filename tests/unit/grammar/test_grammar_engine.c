/*
 * test_grammar_engine.c - structured output through the engine API on a
 * generated tiny qwen3 model (random weights, real tokenizer): generations
 * stay in the grammar and finish with STOP when it is complete, the reported
 * alternatives are tokens the mask allowed (logprobs of the masked
 * distribution), a bad grammar fails at submit with a message, and a request
 * with a grammar gives the same tokens alone and in a crowd. Grammars
 * compiled off the engine thread (inferd_grammar_compile, from two threads
 * at once on a model whose grammar vocabulary does not exist yet) give the
 * tokens a source compiled at submit gives; a grammar that runs past its
 * mask budget while generating fails its own request, naming the
 * construct, while the request next to it gives bitwise its output alone.
 */
#include "engine_events.h"
#include "test.h"

#include "base/check.h"

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "inferd/inferd.h"

#include <math.h>
#include <pthread.h>
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

/* Submits a request with grammar g (kind NONE: unconstrained). */
static int submit_g(inferd_engine *e, const struct inferd_grammar *g, uint64_t seed, int max_tokens,
                    uint64_t *id, char *err)
{
    int32_t prompt[3] = {11, 22, 33};
    struct inferd_request r = {.prompt = prompt, .n_prompt = 3, .max_tokens = max_tokens};
    inferd_sampling_default(&r.sampling);
    r.sampling.seed = seed;
    r.sampling.logprobs = true;
    r.sampling.n_logprobs = 5;
    r.grammar = *g;
    return inferd_submit(e, &r, id, err, 512);
}

static const char compile_src0[] =
    "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":0,"
    "\"maximum\":99},\"s\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"n\",\"s\"]}";

static const char *const compile_srcs[3] = {
    compile_src0,
    "{\"type\":\"array\",\"items\":{\"enum\":[\"red\",\"green\",\"blue\"]},\"maxItems\":4}",
    "{\"type\":\"object\",\"not\":{\"enum\":[1]}}", /* refused */
};

struct compile_job {
    inferd_model *m;                     /* the model both threads compile for */
    int first;                           /* this thread's own source (the other is shared) */
    inferd_compiled_grammar *out[20][2]; /* (rounds, 2) handles */
    int rc[20][2];                       /* and their results */
    char err[20][2][256];                /* and messages */
};

/* Compiles the shared source 0, its own source and the refused one, 20
 * rounds, as a server's preparation thread would. */
static void *compile_thread(void *arg)
{
    struct compile_job *j = arg;
    for (int k = 0; k < 20; k++)
        for (int i = 0; i < 2; i++) {
            int which = i == 0 ? (k % 2 ? j->first : 0) : 2;
            struct inferd_grammar g = {.kind = INFERD_GRAMMAR_JSON_SCHEMA,
                                       .source = compile_srcs[which],
                                       .len = strlen(compile_srcs[which])};
            j->out[k][i] = NULL;
            j->rc[k][i] = inferd_grammar_compile(j->m, &g, &j->out[k][i], j->err[k][i], 256);
        }
    return NULL;
}

TEST(compile_from_two_threads)
{
    setup();
    /* a second model object: its grammar vocabulary is built by whichever
     * thread comes first */
    inferd_model *m2;
    char err[512];
    CHECK(inferd_model_load(path, &m2, err, sizeof(err)) == 0);
    static struct compile_job jobs[2];
    pthread_t th[2];
    for (int t = 0; t < 2; t++) {
        jobs[t].m = m2;
        jobs[t].first = 1;
        CHECK(pthread_create(&th[t], NULL, compile_thread, &jobs[t]) == 0);
    }
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 20; k++) {
            EXPECT_EQ_INT(jobs[t].rc[k][0], 0);
            EXPECT_EQ_INT(jobs[t].rc[k][1], -10001); /* ERR_INVALID */
            EXPECT(strstr(jobs[t].err[k][1], "#/not") != NULL);
        }
    /* handles from either thread, and the source compiled at submit, give
     * the same tokens; a handle may be freed once submitted */
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = 1;
    cfg.max_ctx = 512;
    inferd_engine *e;
    CHECK(inferd_engine_new(m2, &cfg, &e, err, sizeof(err)) == 0);
    struct run runs[3];
    for (int i = 0; i < 3; i++) {
        struct inferd_grammar g = {.kind = INFERD_GRAMMAR_JSON_SCHEMA};
        if (i < 2)
            g.compiled = jobs[i].out[0][0];
        else
            g.source = compile_srcs[0], g.len = strlen(compile_srcs[0]);
        uint64_t id;
        EXPECT_EQ_INT(submit_g(e, &g, 41, 200, &id, err), 0);
        if (i < 2) {
            inferd_compiled_grammar_free(jobs[i].out[0][0]);
            jobs[i].out[0][0] = NULL;
        }
        drain(e, id, &runs[i]);
    }
    for (int i = 1; i < 3; i++) {
        EXPECT_EQ_INT(runs[i].finish, INFERD_FINISH_STOP);
        EXPECT_EQ_INT(runs[i].n, runs[0].n);
        EXPECT(memcmp(runs[i].tokens, runs[0].tokens, sizeof(int32_t) * (size_t)runs[0].n) == 0);
    }
    check_run(GRAMMAR_JSON_SCHEMA, compile_srcs[0], &runs[0]);
    inferd_engine_free(e);
    /* a handle is tied to its model's vocabulary */
    e = engine();
    struct inferd_grammar g = {.compiled = jobs[0].out[1][0]};
    uint64_t id;
    EXPECT_EQ_INT(submit_g(e, &g, 1, 10, &id, err), -10001);
    EXPECT(strstr(err, "compiled for another model") != NULL);
    inferd_engine_free(e);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 20; k++)
            inferd_compiled_grammar_free(jobs[t].out[k][0]);
    inferd_model_free(m2);
}

/* The digits take ten tokens (the tokenizer splits digits), past the
 * compile-time probe; then 1,800 stacks at once, a mask table each. */
TEST(grammar_budget_blowout_fails_alone)
{
    const struct inferd_grammar none = {0};
    struct inferd_grammar_limits lim = {.mask_work = 1 << 20};
    const struct inferd_grammar bad = {.kind = INFERD_GRAMMAR_REGEX,
                                       .source = "0123456789((a?b?){30}){30}",
                                       .len = strlen("0123456789((a?b?){30}){30}"),
                                       .limits = &lim};
    static struct inferd_event alone[64], both[128];
    int n_alone = 0, n_both = 0;
    char err[512];
    for (int pass = 0; pass < 2; pass++) {
        inferd_engine *e = engine();
        uint64_t ids[2], id_bad = 0;
        if (pass == 1) EXPECT_EQ_INT(submit_g(e, &bad, 3, 40, &id_bad, err), 0);
        EXPECT_EQ_INT(submit_g(e, &none, 9, 24, &ids[pass], err), 0);
        int finished = 0;
        struct inferd_event fail = {0};
        int n_bad_tokens = 0;
        for (int guard = 0; guard < 1000 && finished < 1 + pass; guard++) {
            inferd_engine_step(e);
            struct inferd_event ev;
            while (inferd_poll(e, &ev)) {
                finished += ev.finish != INFERD_FINISH_NONE;
                if (pass == 1 && ev.request == id_bad) {
                    n_bad_tokens += ev.token >= 0;
                    if (ev.finish != INFERD_FINISH_NONE) fail = ev;
                    continue;
                }
                if (pass == 0 && n_alone < 64) alone[n_alone++] = ev;
                if (pass == 1 && n_both < 128) both[n_both++] = ev;
            }
        }
        EXPECT_EQ_INT(finished, 1 + pass);
        if (pass == 1) {
            EXPECT_EQ_INT(fail.finish, INFERD_FINISH_ERROR);
            EXPECT_EQ_INT(fail.error, -10001); /* ERR_INVALID */
            EXPECT(strstr(fail.message, "regex fragment '((a?b?){30}){30}' at offset 10") != NULL);
            EXPECT(strstr(fail.message, "(mask_work") != NULL);
            EXPECT_EQ_INT(n_bad_tokens, 10); /* the digits, then the mask that ran out */
        }
        inferd_engine_free(e);
    }
    EXPECT(n_alone > 10 && alone[n_alone - 1].finish != INFERD_FINISH_NONE);
    expect_same_events(alone, n_alone, both, n_both);
}

/* A resumed request (prompt + its first k output tokens, n_output = k) on
 * another engine goes on with exactly the tokens, logprobs and alternatives
 * of the uninterrupted run: positions, penalties and the grammar's state
 * continue where they were. */
static int submit_resume(inferd_engine *e, const char *schema, const int32_t *out, int k,
                         int max_tokens, uint64_t *id, char *err)
{
    int32_t prompt[3 + 512] = {11, 22, 33};
    if (k) memcpy(prompt + 3, out, sizeof(int32_t) * (size_t)k);
    struct inferd_request r = {
        .prompt = prompt, .n_prompt = 3 + k, .max_tokens = max_tokens, .n_output = k};
    inferd_sampling_default(&r.sampling);
    r.sampling.seed = 19;
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.presence_penalty = 0.6f;
    r.sampling.frequency_penalty = 0.3f;
    r.sampling.repetition_penalty = 1.2f;
    r.sampling.logprobs = true;
    r.sampling.n_logprobs = 5;
    r.grammar.kind = schema ? INFERD_GRAMMAR_JSON_SCHEMA : INFERD_GRAMMAR_NONE;
    r.grammar.source = schema;
    r.grammar.len = schema ? strlen(schema) : 0;
    return inferd_submit(e, &r, id, err, 512);
}

TEST(a_resumed_request_goes_on_bitwise)
{
    char err[512];
    uint64_t id;
    for (int with_grammar = 0; with_grammar < 2; with_grammar++) {
        const char *schema = with_grammar ? compile_src0 : NULL;
        inferd_engine *e = engine();
        EXPECT_EQ_INT(submit_resume(e, schema, NULL, 0, 120, &id, err), 0);
        struct run whole;
        drain(e, id, &whole);
        inferd_engine_free(e);
        EXPECT(whole.n >= 4);
        int cuts[3] = {1, whole.n / 2, whole.n - 1};
        for (int c = 0; c < 3; c++) {
            int k = cuts[c];
            e = engine();
            EXPECT_EQ_INT(submit_resume(e, schema, whole.tokens, k, 120, &id, err), 0);
            struct run rest;
            drain(e, id, &rest);
            inferd_engine_free(e);
            EXPECT_EQ_INT(rest.finish, whole.finish);
            EXPECT_EQ_INT(rest.n, whole.n - k);
            for (int i = 0; i < rest.n && k + i < whole.n; i++) {
                const struct inferd_event *a = &rest.ev[i], *b = &whole.ev[k + i];
                EXPECT_EQ_INT(a->token, b->token);
                EXPECT(memcmp(&a->logprob, &b->logprob, sizeof(float)) == 0);
                EXPECT_EQ_INT(a->n_top, b->n_top);
                EXPECT(memcmp(a->top, b->top, sizeof(a->top[0]) * (size_t)a->n_top) == 0);
                EXPECT_EQ_INT(a->n_generated, b->n_generated); /* counts the resumed ones */
            }
        }
    }
    /* what a resume may not be */
    inferd_engine *e = engine();
    int32_t out[4] = {1, 2, 3, 4};
    EXPECT_EQ_INT(submit_resume(e, NULL, out, 4, 4, &id, err), ERR_INVALID); /* all of max */
    EXPECT(strstr(err, "n_output") != NULL);
    int32_t brace = -1, tok[8];
    /* a token the schema cannot start with: the first that is not '{' or space */
    for (int32_t t = 0; t < 400 && brace < 0; t++) {
        tok[0] = t;
        if (submit_resume(e, compile_src0, tok, 1, 10, &id, err) == ERR_INVALID &&
            strstr(err, "resumed output: token 0"))
            brace = t;
        else
            inferd_cancel(e, id);
    }
    EXPECT(brace >= 0);
    EXPECT(strstr(err, "is not allowed by the grammar") != NULL);
    inferd_engine_free(e);
}

TEST_MAIN()
