/*
 * bench_stall.c - what one hostile grammar costs the streams next to it.
 *
 *   bench_grammar_stall MODEL [--streams 8] [--tokens 60] [--at 20] [--threads 2]
 *                       [--regex RE | --ebnf FILE | --json-schema FILE] [--precompile]
 *                       [--warm]
 *
 * Runs `--streams` unconstrained requests in one engine and, once they have
 * decoded `--at` tokens, submits one request with the grammar: as a source
 * (compiled at submit, on the engine thread) or, with --precompile, compiled
 * first by inferd_grammar_compile on another thread and submitted as a
 * handle. Every step is timed on the wall clock from the caller's side, which
 * is the gap between two tokens of every stream decoding in it (the streams
 * all decode in every step). Prints the gaps before the grammar arrived and
 * after (median, p99, max), the time inferd_submit took, and how the grammar
 * request ended. Without a grammar option it is the baseline. --warm builds
 * the model's grammar vocabulary before the streams start (as a server
 * would at load, by compiling any grammar), so that its one-time cost
 * (~150 ms for a 151K vocabulary) is not in the figures.
 *
 * A benchmark, not a test: figures depend on the machine (docs/benchmarks.md).
 * Built against the public API only, so the same file measures older builds
 * (-DSTALL_NO_COMPILE_API where inferd_grammar_compile does not exist).
 */
#include "inferd/inferd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summary(const char *what, double *v, int n)
{
    if (n == 0) {
        printf("%s: none\n", what);
        return;
    }
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    printf("%s: %d gaps, median %.2f ms, p99 %.2f ms, max %.2f ms\n", what, n, v[n / 2] * 1e3,
           v[(int)((n - 1) * 0.99)] * 1e3, v[n - 1] * 1e3);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(s);
        return NULL;
    }
    fclose(f);
    s[n] = 0;
    *len = (size_t)n;
    return s;
}

#ifndef STALL_NO_COMPILE_API
struct compile_arg {
    inferd_model *m;              /* model */
    struct inferd_grammar g;      /* what to compile */
    inferd_compiled_grammar *out; /* the handle */
    int rc;                       /* result */
    char err[512];                /* message */
    double s;                     /* seconds it took */
    int done;                     /* set (release) when finished */
};

static void *compile_main(void *p)
{
    struct compile_arg *a = p;
    double t0 = now_s();
    a->rc = inferd_grammar_compile(a->m, &a->g, &a->out, a->err, sizeof(a->err));
    a->s = now_s() - t0;
    __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
    return NULL;
}
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: %s MODEL [--streams N] [--tokens N] [--at N] [--threads N] "
                "[--regex RE | --ebnf FILE | --json-schema FILE] [--precompile]\n",
                argv[0]);
        return 2;
    }
    int streams = 8, tokens = 60, at = 20, threads = 2;
    bool precompile = false, warm = false;
    struct inferd_grammar g = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--precompile") || !strcmp(a, "--warm")) {
            *(!strcmp(a, "--warm") ? &warm : &precompile) = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "missing value for %s\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--streams"))
            streams = atoi(v);
        else if (!strcmp(a, "--tokens"))
            tokens = atoi(v);
        else if (!strcmp(a, "--at"))
            at = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--regex")) {
            g.kind = INFERD_GRAMMAR_REGEX;
            g.source = v;
            g.len = strlen(v);
        } else if (!strcmp(a, "--ebnf") || !strcmp(a, "--json-schema")) {
            g.kind = !strcmp(a, "--ebnf") ? INFERD_GRAMMAR_EBNF : INFERD_GRAMMAR_JSON_SCHEMA;
            if (!(g.source = read_file(v, &g.len))) {
                fprintf(stderr, "cannot read %s\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (streams < 1 || streams > 64 || tokens < at + 2 || at < 2) {
        fprintf(stderr, "bad --streams / --tokens / --at\n");
        return 2;
    }
    char err[512];
    inferd_model *m;
    if (inferd_model_load(argv[1], &m, err, sizeof(err))) {
        fprintf(stderr, "load: %s\n", err);
        return 1;
    }
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = threads;
    cfg.max_seqs = streams + 1;
    cfg.max_ctx = tokens + 64;
    inferd_engine *e;
    if (inferd_engine_new(m, &cfg, &e, err, sizeof(err))) {
        fprintf(stderr, "engine: %s\n", err);
        return 1;
    }
#ifndef STALL_NO_COMPILE_API
    if (warm) {
        struct inferd_grammar any = {.kind = INFERD_GRAMMAR_JSON_OBJECT};
        inferd_compiled_grammar *h = NULL;
        double t0 = now_s();
        if (inferd_grammar_compile(m, &any, &h, err, sizeof(err))) {
            fprintf(stderr, "warm: %s\n", err);
            return 1;
        }
        printf("grammar vocabulary built (with a json_object grammar) in %.1f ms\n",
               (now_s() - t0) * 1e3);
        inferd_compiled_grammar_free(h);
    }
#else
    (void)warm;
#endif
    int32_t prompt[4];
    uint64_t ids[65];
    for (int s = 0; s < streams; s++) {
        for (int k = 0; k < 4; k++)
            prompt[k] = 100 + 37 * s + 11 * k;
        struct inferd_request r = {.prompt = prompt, .n_prompt = 4, .max_tokens = tokens};
        inferd_sampling_default(&r.sampling);
        r.sampling.seed = (uint64_t)s + 1;
        r.ignore_eos = true;
        if (inferd_submit(e, &r, &ids[s], err, sizeof(err))) {
            fprintf(stderr, "submit: %s\n", err);
            return 1;
        }
    }
    double *before = malloc(sizeof(double) * (size_t)(tokens + 8));
    double *after = malloc(sizeof(double) * (size_t)(tokens + 8));
    int n_before = 0, n_after = 0, done = 0, decoded = 0, n_grammar_tokens = 0;
    bool submitted = !g.kind;
    uint64_t gid = 0;
    double submit_s = 0, last = 0;
    struct inferd_event fin = {0};
#ifndef STALL_NO_COMPILE_API
    static struct compile_arg ca;
    pthread_t th;
    bool compiling = false;
#endif
    for (int guard = 0; guard < 100000 && done < streams; guard++) {
        if (!submitted && decoded >= at) {
            struct inferd_request r = {.prompt = prompt, .n_prompt = 4, .max_tokens = 64};
            inferd_sampling_default(&r.sampling);
            r.sampling.seed = 99;
            r.grammar = g;
            int rc = 0;
            bool ready = true;
#ifndef STALL_NO_COMPILE_API
            if (precompile) {
                /* the server's way: another thread compiles while the
                 * engine keeps stepping; submit the handle once it is ready */
                if (!compiling) {
                    ca = (struct compile_arg){.m = m, .g = g};
                    pthread_create(&th, NULL, compile_main, &ca);
                    compiling = true;
                }
                ready = __atomic_load_n(&ca.done, __ATOMIC_ACQUIRE);
                if (ready) {
                    pthread_join(th, NULL);
                    printf("inferd_grammar_compile on another thread: %.2f ms, %s\n", ca.s * 1e3,
                           ca.rc ? ca.err : "ok");
                    rc = ca.rc;
                    r.grammar.compiled = ca.out;
                    if (rc) snprintf(err, sizeof(err), "refused by inferd_grammar_compile");
                }
            }
#else
            (void)precompile;
#endif
            if (ready) {
                double t0 = now_s();
                if (!rc) rc = inferd_submit(e, &r, &gid, err, sizeof(err));
                submit_s = now_s() - t0;
                printf("grammar request: inferd_submit %.2f ms: %s\n", submit_s * 1e3,
                       rc ? err : "queued");
                if (rc) gid = 0;
                submitted = true;
            }
        }
        int n = inferd_engine_step(e);
        double t = now_s();
        if (n < 0) {
            fprintf(stderr, "step failed\n");
            return 1;
        }
        struct inferd_event ev;
        bool any = false;
        while (inferd_poll(e, &ev)) {
            if (gid && ev.request == gid) {
                n_grammar_tokens += ev.token >= 0;
                if (ev.finish != INFERD_FINISH_NONE) fin = ev;
                continue;
            }
            if (ev.request == ids[0] && ev.token >= 0) any = true;
            if (ev.finish != INFERD_FINISH_NONE) done++;
        }
        if (any) {
            decoded++;
            if (decoded > 2) {
                double gap = t - last;
                if (!g.kind || decoded <= at)
                    before[n_before++] = gap;
                else
                    after[n_after++] = gap;
            }
            last = t;
        }
    }
    summary("gaps between tokens before the grammar", before, n_before);
    summary(g.kind ? "gaps between tokens after it" : "(no grammar)", after, n_after);
    if (gid)
        printf("grammar request: %d tokens, finish %s%s%s\n", n_grammar_tokens,
               fin.finish == INFERD_FINISH_ERROR    ? "error"
               : fin.finish == INFERD_FINISH_STOP   ? "stop"
               : fin.finish == INFERD_FINISH_LENGTH ? "length"
                                                    : "none",
               fin.finish == INFERD_FINISH_ERROR ? ": " : "",
#ifndef STALL_NO_COMPILE_API
               fin.message
#else
               ""
#endif
        );
    inferd_engine_free(e);
#ifndef STALL_NO_COMPILE_API
    inferd_compiled_grammar_free(ca.out);
#endif
    inferd_model_free(m);
    free(before);
    free(after);
    return 0;
}
