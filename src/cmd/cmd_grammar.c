/*
 * cmd_grammar.c - `inferd grammar`: structured output from the command line.
 *
 *   inferd grammar check  GRAMMAR [--dump]        compile, report size or the error
 *   inferd grammar gen    -m MODEL GRAMMAR [...]  constrained generations, one JSON
 *                                                 line each: {"finish","text","tokens"}
 *   inferd grammar bench  -m MODEL GRAMMAR [...]  compile time and mask latency
 *
 *   GRAMMAR: --ebnf FILE | --regex RE | --json-schema FILE | --json-object
 *
 * `gen` runs the real engine (inferd_submit with a grammar) and prints each
 * output's text decoded from the grammar vocabulary's token bytes; the
 * random-model test suite feeds these lines to a JSON Schema validator. Up to
 * --parallel generations (default 64) run at once, so each engine step is one
 * forward for all of them (the output layer's weights read once per step);
 * the next are submitted as earlier ones finish, so --count may be any size.
 * Generation k's prompt and seed depend only on (k, --seed), and the engine
 * is bit-exact under batching, so its text does not depend on --parallel. It also prints the decode
 * rate (tokens per second of decode-only steps) to stderr; --unconstrained runs the same requests
 * without the grammar and --inline-masks without the mask overlap, for
 * comparison (docs/benchmarks.md). `bench` drives a matcher directly over the model's
 * vocabulary: random walks through the grammar, timing every mask; it reports
 * cold figures (mask tables computed as their contexts first appear) and warm
 * ones (the same walks again, every table cached).
 */
#include "base/buf.h"
#include "base/check.h"
#include "base/timeutil.h"
#include "cmd/cmd.h"
#include "cmd/opt.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "inferd/inferd.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *read_file(const char *path, size_t *len)
{
    struct buf b = {0};
    if (buf_append_file(&b, path)) {
        buf_release(&b);
        return NULL;
    }
    *len = b.len;
    buf_putc(&b, 0);
    return b.data;
}

struct gopts {
    enum grammar_kind kind; /* 0 until given */
    char *src;              /* grammar text (owned) */
    size_t len;             /* bytes */
    const char *model;      /* -m */
    long count, max_tokens, seed, threads, walks, steps;
    long parallel; /* gen: generations running at once (0: 64) */
    double temp;
    bool dump, json, verify;
    bool inline_masks;         /* gen: masks after the forward (engine grammar_inline) */
    bool unconstrained;        /* gen: the same requests without the grammar (a baseline) */
    struct grammar_limits lim; /* --mask-work, --step-work, --max-stacks (0: defaults) */
};

/* GRAMMAR options: each replaces the grammar given before it. */
static int set_file(struct gopts *o, enum grammar_kind kind, const char *spelling, const char *val,
                    struct err_msg *m)
{
    size_t len;
    char *src = read_file(val, &len);
    if (!src) return err_set(m, ERR_INVALID, "%s: cannot read '%s'", spelling, val);
    free(o->src);
    o->kind = kind;
    o->src = src;
    o->len = len;
    return 0;
}

static int set_ebnf(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    return set_file(dst, GRAMMAR_EBNF, spelling, val, m);
}

static int set_json_schema(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    return set_file(dst, GRAMMAR_JSON_SCHEMA, spelling, val, m);
}

static int set_regex(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct gopts *o = dst;
    free(o->src);
    o->kind = GRAMMAR_REGEX;
    o->src = xstrdup(val);
    o->len = strlen(val);
    return 0;
}

static int set_json_object(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct gopts *o = dst;
    free(o->src);
    o->kind = GRAMMAR_JSON_OBJECT;
    o->src = NULL;
    o->len = 0;
    return 0;
}

#define GRAMMAR_OPTS(o)                                                                            \
    CMD_OPT_CALL("ebnf", 0, "FILE", "GBNF grammar", set_ebnf, o),                                  \
        CMD_OPT_CALL("regex", 0, "RE", "regular expression", set_regex, o),                        \
        CMD_OPT_CALL("json-schema", 0, "FILE", "JSON Schema", set_json_schema, o),                 \
        CMD_OPT_CALL0("json-object", 0, "any JSON object", set_json_object, o)

#define GRAMMAR_SYNOPSIS "GRAMMAR: --ebnf FILE | --regex RE | --json-schema FILE | --json-object\n"

static void grammar_usage(FILE *out)
{
    fprintf(
        out,
        "usage: inferd grammar check GRAMMAR [--dump]\n"
        "       inferd grammar gen -m MODEL GRAMMAR [--count N] [--parallel N] [-n MAX_TOKENS]\n"
        "                          [--seed S] [--temp T] [--threads N] [--inline-masks]\n"
        "                          [--unconstrained]\n"
        "       inferd grammar bench -m MODEL GRAMMAR [--walks N] [--steps N] [--json]\n"
        "                            [--verify]\n" GRAMMAR_SYNOPSIS
        "run 'inferd grammar check|gen|bench --help' for a subcommand's options.\n");
}

/* check -m MODEL: the path a server takes (inferd_grammar_compile: compile,
 * dry runs and the probe over the model's vocabulary, through its cache). */
static int check_model(struct gopts *o)
{
    char err[512];
    inferd_model *model;
    if (inferd_model_load(o->model, &model, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot load model '%s': %s\n", o->model, err);
        return 1;
    }
    struct inferd_grammar_limits lim = {.mask_work = o->lim.mask_work,
                                        .step_work = o->lim.step_work,
                                        .max_stacks = o->lim.max_stacks};
    struct inferd_grammar gr = {
        .kind = (enum inferd_grammar_kind)o->kind, .source = o->src, .len = o->len, .limits = &lim};
    inferd_compiled_grammar *cg = NULL;
    double t0 = time_now_s();
    int rc = inferd_grammar_compile(model, &gr, &cg, err, sizeof(err));
    double t1 = time_now_s();
    if (rc)
        fprintf(stderr, "inferd: grammar: %s\n", err);
    else
        printf("ok: %s grammar, compiled and probed over the model's vocabulary in %.3f ms (the "
               "vocabulary built on first use included)\n",
               grammar_kind_name(o->kind), (t1 - t0) * 1e3);
    inferd_compiled_grammar_free(cg);
    inferd_model_free(model);
    return rc ? 1 : 0;
}

static int check(struct gopts *o)
{
    if (o->model) return check_model(o);
    struct err_msg m = {{0}};
    struct grammar *g;
    double t0 = time_now_s();
    int rc = grammar_compile_limits(o->kind, o->src, o->len, &o->lim, &g, &m);
    double t1 = time_now_s();
    if (rc) {
        fprintf(stderr, "inferd: grammar: %s\n", m.text);
        return 1;
    }
    struct buf b = {0};
    grammar_dump(g, &b);
    if (o->dump) fwrite(b.data, 1, b.len, stdout);
    int rules = 0;
    for (size_t i = 0; i < b.len; i++)
        rules += b.data[i] == '\n';
    printf("ok: %s grammar, %d rules, compiled in %.3f ms\n", grammar_kind_name(o->kind), rules,
           (t1 - t0) * 1e3);
    buf_release(&b);
    grammar_unref(g);
    return 0;
}

/* Loads the model and its grammar vocabulary (bytes of every token + trie);
 * *vocab_s = seconds the vocabulary took. Returns 0, or 1 with a message
 * printed and nothing left open. */
static int open_model(const char *path, inferd_model **model, struct grammar_vocab **v,
                      double *vocab_s)
{
    char err[512];
    if (inferd_model_load(path, model, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot load model '%s': %s\n", path, err);
        return 1;
    }
    double t0 = time_now_s();
    struct gguf_file *f;
    struct err_msg m = {{0}};
    *v = NULL;
    if (gguf_open(path, &f, &m) == 0) {
        int32_t eog[16];
        int n_eog = inferd_model_eog_tokens(*model, eog, 16);
        grammar_vocab_from_gguf(f, inferd_model_n_vocab(*model), eog, n_eog, v, &m);
        gguf_close(f);
    }
    *vocab_s = time_now_s() - t0;
    if (*v) return 0;
    fprintf(stderr, "inferd: grammar: %s\n", m.text);
    inferd_model_free(*model);
    return 1;
}

/* Submits generation k of `gen`: a 4-token prompt and a seed that depend
 * only on (k, --seed). Returns 0, or 1 with the engine's message printed. */
static int gen_submit(inferd_engine *e, const struct gopts *o, long k, int n_vocab, int max_tokens,
                      uint64_t *id)
{
    char err[512];
    int32_t prompt[4];
    for (int i = 0; i < 4; i++)
        prompt[i] = (int32_t)((k * 7919 + (long)i * 104729 + o->seed) % n_vocab);
    struct inferd_request r = {.prompt = prompt, .n_prompt = 4, .max_tokens = max_tokens};
    inferd_sampling_default(&r.sampling);
    r.sampling.temperature = o->temp > 0 ? (float)o->temp : 1.0f;
    r.sampling.seed = (uint64_t)o->seed * 1000003u + (uint64_t)k;
    if (!o->unconstrained) {
        r.grammar.kind = (enum inferd_grammar_kind)o->kind;
        r.grammar.source = o->src;
        r.grammar.len = o->len;
    }
    if (inferd_submit(e, &r, id, err, sizeof(err))) {
        fprintf(stderr, "inferd: grammar gen: %s\n", err);
        return 1;
    }
    return 0;
}

static int gen(struct gopts *o)
{
    inferd_model *model;
    struct grammar_vocab *v;
    double vocab_s;
    if (open_model(o->model, &model, &v, &vocab_s)) return 1;
    int rc = 1;
    char err[512];
    long count = o->count ? o->count : 1, max_tokens = o->max_tokens ? o->max_tokens : 256;
    long parallel = MIN(count, o->parallel ? o->parallel : 64);
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = (int)o->threads;
    cfg.grammar_inline = o->inline_masks;
    cfg.max_seqs = (int)parallel;
    cfg.max_ctx = (int)max_tokens + 8;
    inferd_engine *e;
    if (inferd_engine_new(model, &cfg, &e, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot create engine: %s\n", err);
        goto out_vocab;
    }
    int n_vocab = inferd_model_n_vocab(model);
    struct buf *text = xcalloc((size_t)count, sizeof(struct buf));
    int *n_tok = xcalloc((size_t)count, sizeof(int));
    uint64_t *ids = xcalloc((size_t)count, sizeof(uint64_t));
    long submitted = 0, finished = 0, decode_tokens = 0;
    double decode_s = 0;
    while (finished < count) {
        /* top up to `parallel` running: the engine takes them into the next
         * step (more would only wait, and the wait queue is bounded) */
        for (; submitted < count && submitted - finished < parallel; submitted++)
            if (gen_submit(e, o, submitted, n_vocab, (int)max_tokens, &ids[submitted]))
                goto out_engine;
        double t0 = time_now_s();
        int n = inferd_engine_step(e);
        double dt = time_now_s() - t0;
        struct inferd_stats st;
        inferd_engine_stats(e, &st);
        /* decode-only steps (one token per sequence): the decode rate */
        if (n > 0 && st.last_step_tokens == st.last_step_seqs) {
            decode_s += dt;
            decode_tokens += n;
        }
        if (n < 0) {
            fprintf(stderr, "inferd: step failed: %s\n", inferd_strerror(n));
            goto out_engine;
        }
        struct inferd_event ev;
        while (inferd_poll(e, &ev)) {
            /* ids are given in submit order, one apart */
            long k = (long)(ev.request - ids[0]);
            CHECK(k >= 0 && k < submitted && ids[k] == ev.request);
            if (ev.token >= 0) {
                n_tok[k]++;
                uint32_t len;
                const char *b = grammar_vocab_bytes(v, ev.token, &len);
                if (!grammar_vocab_is_eog(v, ev.token)) buf_append(&text[k], b, len);
            }
            if (ev.finish == INFERD_FINISH_NONE) continue;
            finished++;
            const char *why = ev.finish == INFERD_FINISH_STOP     ? "stop"
                              : ev.finish == INFERD_FINISH_LENGTH ? "length"
                                                                  : "error";
            json_t *line =
                json_pack("{s:i,s:s,s:s%,s:i}", "index", (int)k, "finish", why, "text",
                          text[k].data ? text[k].data : "", text[k].len, "tokens", n_tok[k]);
            char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
            if (s)
                printf("%s\n", s);
            else /* not UTF-8: cannot happen for JSON grammars; report it */
                printf("{\"index\":%ld,\"finish\":\"%s\",\"invalid_utf8\":true}\n", k, why);
            free(s);
            json_decref(line);
        }
        if (n == 0 && finished < count) {
            fprintf(stderr, "inferd: grammar gen: the engine stalled\n");
            goto out_engine;
        }
    }
    struct inferd_stats st;
    inferd_engine_stats(e, &st);
    fprintf(stderr,
            "decode: %ld tokens in %.3f s of decode-only steps, %.2f tokens/s; masks outside the "
            "forward %.2f ms in all (%s)\n",
            decode_tokens, decode_s, decode_s > 0 ? (double)decode_tokens / decode_s : 0.0,
            st.grammar_mask_s * 1e3,
            o->unconstrained  ? "unconstrained"
            : o->inline_masks ? "masks inline"
                              : "masks during the forward");
    rc = 0;
out_engine:
    for (long k = 0; k < count; k++)
        buf_release(&text[k]);
    free(text);
    free(n_tok);
    free(ids);
    inferd_engine_free(e);
out_vocab:
    grammar_vocab_free(v);
    inferd_model_free(model);
    return rc;
}

/* Thread CPU seconds: mask and compile times are measured on the thread's
 * CPU clock, so that a busy machine (other processes taking the cores) does
 * not show up as mask latency; wall-clock totals are printed next to them. */
static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stat_out {
    double mean_us; /* mean mask time */
    double p50_us;  /* median */
    double p99_us;  /* 99th percentile */
    double max_us;  /* worst */
    long n;         /* masks timed */
};

static void summarize(double *t, long n, struct stat_out *s)
{
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += t[i];
    s->n = n;
    s->mean_us = n ? sum / (double)n * 1e6 : 0;
    s->p50_us = n ? t[n / 2] * 1e6 : 0;
    s->p99_us = n ? t[(long)((double)(n - 1) * 0.99)] * 1e6 : 0;
    s->max_us = n ? t[n - 1] * 1e6 : 0;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Work units of the masks of a pass (grammar budgets, budget.c). */
struct work_out {
    double units;  /* sum over masks */
    double max;    /* largest */
    long n_failed; /* walks stopped by a budget */
};

/* Prints a walk's budget error (once per pass). */
static void walk_failed(struct grammar_matcher *m, struct work_out *wo, long s)
{
    const char *text;
    grammar_matcher_error(m, &text);
    if (wo->n_failed++ == 0)
        fprintf(stderr, "inferd: grammar bench: walk stopped at step %ld: %s\n", s, text);
}

/* Random walks: each step fills a mask (timed) and takes a random allowed
 * token. Returns the number of masks timed into t. */
static long walks(struct grammar *g, struct grammar_vocab *v, long n_walks, long n_steps,
                  uint64_t seed, bool verify, double *t, long *n_done, struct work_out *wo)
{
    int n_vocab = grammar_vocab_n(v);
    uint64_t *mask = xmalloc(sizeof(uint64_t) * (size_t)((n_vocab + 63) / 64));
    int32_t *allowed = xmalloc(sizeof(int32_t) * (size_t)n_vocab);
    long n = 0;
    *n_done = 0;
    for (long w = 0; w < n_walks; w++) {
        struct grammar_matcher *m = grammar_matcher_new(g, v);
        for (long s = 0; s < n_steps; s++) {
            double t0 = cpu_now_s();
            int cnt = grammar_matcher_fill_mask(m, mask);
            t[n++] = cpu_now_s() - t0;
            double units = (double)grammar_matcher_last_work(m);
            wo->units += units;
            wo->max = MAX(wo->max, units);
            if (cnt < 0) {
                walk_failed(m, wo, s);
                break;
            }
            /* --verify: every token against a byte walk from the state */
            for (int i = 0; verify && i < n_vocab; i++) {
                bool in_mask = (mask[i >> 6] >> (i & 63)) & 1;
                if (in_mask != grammar_matcher_allows(m, i)) {
                    uint32_t len;
                    const char *b = grammar_vocab_bytes(v, i, &len);
                    fprintf(stderr, "inferd: grammar bench: mask %s token %d '%.*s' at step %ld\n",
                            in_mask ? "allows rejected" : "forbids accepted", i, (int)len, b, s);
                    exit(1);
                }
            }
            if (cnt == 0) break;
            int k = 0;
            for (int i = 0; i < n_vocab; i++)
                if ((mask[i >> 6] >> (i & 63)) & 1) allowed[k++] = i;
            /* Prefer ending when possible half of the time, so walks
             * complete and cover the whole grammar. */
            int32_t tok = allowed[splitmix(&seed) % (uint64_t)k];
            if (!grammar_matcher_accept_token(m, tok)) {
                CHECK(grammar_matcher_error(m, NULL)); /* only a budget refuses an allowed token */
                walk_failed(m, wo, s);
                break;
            }
            if (grammar_matcher_is_terminated(m)) {
                (*n_done)++;
                break;
            }
        }
        grammar_matcher_free(m);
    }
    free(mask);
    free(allowed);
    return n;
}

static int bench(struct gopts *o)
{
    inferd_model *model;
    struct grammar_vocab *v;
    double vocab_s;
    if (open_model(o->model, &model, &v, &vocab_s)) return 1;
    int rc = 1;
    struct err_msg m = {{0}};
    struct grammar *g = NULL;
    /* compile: best of 5 fresh compiles (parse + lower + dry run, no mask tables) */
    double compile_s = 1e9;
    for (int i = 0; i < 5; i++) {
        double t0 = cpu_now_s();
        if (grammar_compile_limits(o->kind, o->src, o->len, &o->lim, &g, &m)) {
            fprintf(stderr, "inferd: grammar: %s\n", m.text);
            goto out_vocab;
        }
        double t1 = cpu_now_s();
        compile_s = MIN(compile_s, t1 - t0);
        if (i < 4) grammar_unref(g);
    }
    long n_walks = o->walks ? o->walks : 20, n_steps = o->steps ? o->steps : 400;
    double *tc = xmalloc(sizeof(double) * (size_t)(n_walks * n_steps + 1));
    double *tw = xmalloc(sizeof(double) * (size_t)(n_walks * n_steps + 1));
    long done_c, done_w;
    struct work_out wc = {0}, ww = {0};
    /* cold: tables are computed as contexts first appear; warm: the same
     * walks again (every table cached) */
    double t0 = time_now_s(), c0 = cpu_now_s();
    long nc = walks(g, v, n_walks, n_steps, 1, o->verify, tc, &done_c, &wc);
    double t1 = time_now_s(), c1 = cpu_now_s();
    long nw = walks(g, v, n_walks, n_steps, 1, false, tw, &done_w, &ww);
    double mask_cpu_s = 0;
    for (long i = 0; i < nc; i++)
        mask_cpu_s += tc[i];
    struct stat_out sc, sw;
    summarize(tc, nc, &sc);
    summarize(tw, nw, &sw);
    int n_tabs;
    uint64_t n_built;
    grammar_table_stats(g, &n_tabs, &n_built);
    if (o->json) {
        printf("{\"vocab\":%d,\"vocab_build_ms\":%.3f,\"compile_ms\":%.3f,\"tables\":%d,"
               "\"clock\":\"thread_cpu\",\"cold\":{\"masks\":%ld,\"total_cpu_ms\":%.1f,\"mean_us\":"
               "%.2f,\"p50_us\":%.2f,"
               "\"p99_us\":%.2f,\"max_us\":%.2f,\"walks_completed\":%ld},"
               "\"warm\":{\"masks\":%ld,\"mean_us\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
               "\"max_us\":%.2f,\"walks_completed\":%ld},"
               "\"work\":{\"cold_mean_units\":%.0f,\"cold_max_units\":%.0f,\"cold_ns_per_unit\":"
               "%.2f,\"warm_mean_units\":%.0f,\"mask_work_limit\":%lld,\"walks_stopped\":%ld}}\n",
               grammar_vocab_n(v), vocab_s * 1e3, compile_s * 1e3, n_tabs, sc.n, (c1 - c0) * 1e3,
               sc.mean_us, sc.p50_us, sc.p99_us, sc.max_us, done_c, sw.n, sw.mean_us, sw.p50_us,
               sw.p99_us, sw.max_us, done_w, nc ? wc.units / (double)nc : 0, wc.max,
               wc.units > 0 ? mask_cpu_s * 1e9 / wc.units : 0, nw ? ww.units / (double)nw : 0,
               (long long)grammar_limits_of(g)->mask_work, wc.n_failed);
    } else {
        printf("vocabulary: %d tokens, bytes + trie built in %.1f ms\n", grammar_vocab_n(v),
               vocab_s * 1e3);
        printf("compile (parse + lower): %.3f ms\n", compile_s * 1e3);
        printf("times are thread CPU time\n");
        printf("cold masks (%d context tables computed on first use, %.1f ms CPU, %.1f ms wall): "
               "%ld masks, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us; %ld/%ld walks "
               "completed\n",
               n_tabs, (c1 - c0) * 1e3, (t1 - t0) * 1e3, sc.n, sc.mean_us, sc.p50_us, sc.p99_us,
               sc.max_us, done_c, n_walks);
        printf("warm masks: %ld masks, mean %.1f us, p50 %.1f us, p99 %.1f us, max %.1f us; "
               "%ld/%ld walks completed\n",
               sw.n, sw.mean_us, sw.p50_us, sw.p99_us, sw.max_us, done_w, n_walks);
        printf("mask work: cold mean %.0f units, max %.0f (budget %lld), %.2f ns/unit; warm "
               "mean %.0f; %ld walks stopped by a budget\n",
               nc ? wc.units / (double)nc : 0, wc.max, (long long)grammar_limits_of(g)->mask_work,
               wc.units > 0 ? mask_cpu_s * 1e9 / wc.units : 0, nw ? ww.units / (double)nw : 0,
               wc.n_failed);
    }
    free(tc);
    free(tw);
    grammar_unref(g);
    rc = 0;
out_vocab:
    grammar_vocab_free(v);
    inferd_model_free(model);
    return rc;
}

int cmd_grammar(int argc, char **argv)
{
    if (argc < 2) {
        grammar_usage(stderr);
        return CMD_EXIT_USAGE;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "-h") || !strcmp(sub, "--help")) {
        grammar_usage(stdout);
        return CMD_EXIT_OK;
    }
    if (strcmp(sub, "check") && strcmp(sub, "gen") && strcmp(sub, "bench")) {
        fprintf(stderr, "inferd grammar: unknown subcommand '%s'\n", sub);
        grammar_usage(stderr);
        return CMD_EXIT_USAGE;
    }
    struct gopts o = {0};
#define BUDGET_OPTS(o)                                                                             \
    CMD_OPT_INT("mask-work", 0, "N", "work units one mask may cost (default: the engine's)",       \
                &(o)->lim.mask_work, 1, 1L << 62),                                                 \
        CMD_OPT_INT("step-work", 0, "N", "work units one token may cost the matcher",              \
                    &(o)->lim.step_work, 1, 1L << 62),                                             \
        CMD_OPT_INT("max-stacks", 0, "N", "stacks alive in one matcher state",                     \
                    &(o)->lim.max_stacks, 1, 1 << 30)
    const struct cmd_opt check_opts[] = {
        GRAMMAR_OPTS(&o),
        CMD_OPT_FLAG("dump", 0, "print the compiled rules", &o.dump),
        CMD_OPT_STR("model", 'm', "FILE",
                    "compile as the server does: with the dry runs and the\nprobe over this "
                    "model's vocabulary",
                    &o.model),
        BUDGET_OPTS(&o),
        CMD_OPT_END,
    };
    const struct cmd_opt gen_opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model (required)", &o.model),
        GRAMMAR_OPTS(&o),
        CMD_OPT_INT("count", 0, "N", "generations (default 1)", &o.count, 1, 100000),
        CMD_OPT_INT("parallel", 0, "N", "generations running at once (default 64)", &o.parallel, 1,
                    4096),
        CMD_OPT_INT("max-tokens", 'n', "N", "tokens per generation (default 256)", &o.max_tokens, 1,
                    1 << 20),
        CMD_OPT_INT("seed", 0, "S", "prompts and sampling seeds derive from it (default 0)",
                    &o.seed, 0, 1L << 62),
        CMD_OPT_FLOAT("temp", 0, "T", "temperature (default 1)", &o.temp, 0, 100),
        CMD_OPT_INT("threads", 0, "N", "compute threads (default: all cores)", &o.threads, 1, 256),
        CMD_OPT_FLAG("inline-masks", 0, "fill masks after the forward, not during it",
                     &o.inline_masks),
        CMD_OPT_FLAG("unconstrained", 0, "the same requests without the grammar (a baseline)",
                     &o.unconstrained),
        CMD_OPT_END,
    };
    const struct cmd_opt bench_opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model (required)", &o.model),
        GRAMMAR_OPTS(&o),
        CMD_OPT_INT("walks", 0, "N", "random walks through the grammar (default 20)", &o.walks, 1,
                    100000),
        CMD_OPT_INT("steps", 0, "N", "masks per walk at most (default 400)", &o.steps, 1, 1000000),
        CMD_OPT_FLAG("json", 0, "print the figures as one JSON object", &o.json),
        CMD_OPT_FLAG("verify", 0, "check every mask against a byte walk of every token", &o.verify),
        BUDGET_OPTS(&o),
        CMD_OPT_END,
    };
    struct cmd_spec spec = {.epilog = GRAMMAR_SYNOPSIS};
    if (!strcmp(sub, "check")) {
        spec.name = "grammar check";
        spec.synopsis = "GRAMMAR [--dump] [-m MODEL]";
        spec.about = "Compiles the grammar; prints its size or the error.";
        spec.opts = check_opts;
    } else if (!strcmp(sub, "gen")) {
        spec.name = "grammar gen";
        spec.synopsis = "-m MODEL GRAMMAR [options]";
        spec.about = "Constrained generations through the engine, one JSON line each:\n"
                     "{\"index\", \"finish\", \"text\", \"tokens\"}.";
        spec.opts = gen_opts;
    } else {
        spec.name = "grammar bench";
        spec.synopsis = "-m MODEL GRAMMAR [options]";
        spec.about = "Compile time and mask latency over the model's vocabulary.";
        spec.opts = bench_opts;
    }
    int argi, rc = CMD_EXIT_USAGE;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc - 1, argv + 1, &argi);
    if (r != CMD_OPT_OK) {
        rc = cmd_opt_exit(r);
        goto out;
    }
    if (cmd_opt_operands_max(&spec, argc - 1, argv + 1, argi, 0)) goto out;
    if (!o.kind) {
        cmd_usage_error(&spec, "give one of --ebnf, --regex, --json-schema, --json-object");
        goto out;
    }
    if (spec.opts != check_opts && !o.model) {
        cmd_usage_error(&spec, "-m MODEL is required");
        goto out;
    }
    if (!o.src) o.src = xstrdup("");
    if (spec.opts == check_opts)
        rc = check(&o);
    else if (spec.opts == gen_opts)
        rc = gen(&o);
    else
        rc = bench(&o);
out:
    free(o.src);
    return rc;
}
