/*
 * cmd_bench.c - `inferd bench`: replay a trace or a synthetic workload
 * against an OpenAI-compatible endpoint and report latency, throughput, SLO
 * goodput, prefix-cache hits, speculative acceptance, output quality and
 * cost; optionally as a rate / concurrency sweep with a search for the
 * highest rate meeting the SLOs. Also `inferd bench-mock` (hidden), the
 * scripted server the tests and the generator benchmark run against.
 *
 * One run ("point"):
 *   build workload (trace readers or synthetic) -> arrivals -> ideal hits
 *   -> scrape /metrics -> bench_client_run -> scrape /metrics
 *   -> bench_summary_compute -> outputs
 * Quality probes run once before the first point and once after the last.
 * Method, formulas and output fields: docs/bench.md.
 */
#include "cmd/args.h"
#include "cmd/cmd.h"

#include "base/check.h"
#include "bench/bench_client.h"
#include "bench/bench_metrics.h"
#include "bench/bench_mock.h"
#include "bench/bench_report.h"
#include "bench/bench_svg.h"
#include "bench/bench_trace.h"
#include "bench/bench_workload.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TRACES 64
#define MAX_SWEEP  64

struct trace_arg {
    enum bench_trace_format format; /* reader */
    const char *path;               /* file */
};

struct opts {
    struct bench_target target;          /* endpoint */
    struct trace_arg traces[MAX_TRACES]; /* --trace FORMAT:PATH */
    int n_traces;                        /* entries */
    bool sessions_timed;                 /* --trace-timing absolute */
    bool answer_words;                   /* --answer-words */
    double bucket_s;                     /* --bucket (< 0: format default) */
    struct bench_synth synth;            /* --synthetic ... */
    int32_t block_tokens;                /* synthetic block size */
    uint64_t seed;                       /* --seed */
    int32_t vocab_lo, vocab_hi;          /* --vocab */
    int32_t max_requests;                /* --max-requests */
    struct bench_arrivals arrivals;      /* --arrival ... */
    bool arrival_given;                  /* --arrival was given */
    int32_t concurrency;                 /* closed-loop concurrency */
    int32_t max_concurrency;             /* cap */
    struct bench_slo slo;                /* --slo-* */
    const char *metrics_path;            /* Prometheus path, NULL = none */
    int32_t n_probes;                    /* quality probes (0 = off) */
    int32_t probe_input, probe_output;   /* probe lengths */
    const char *reference;               /* --reference FILE */
    const char *save_reference;          /* --save-reference FILE */
    struct bench_prices prices;          /* --machine-usd-h ... */
    double sweep_rate[MAX_SWEEP];        /* --sweep-rate */
    int n_sweep_rate;
    int32_t sweep_conc[MAX_SWEEP]; /* --sweep-concurrency */
    int n_sweep_conc;
    double find_pct;             /* --find-max-rate PCT (0 = off) */
    double search_lo, search_hi; /* search bracket (req/s) */
    int search_steps;            /* bisection steps */
    double user_speed;           /* --user-speed target tok/s per user */
    const char *out_dir;         /* --out */
    bool json;                   /* summary JSON on stdout */
    bool progress;               /* progress line */
};

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: inferd bench [options]\n"
        "\n"
        "target:\n"
        "  --url URL              server (default http://127.0.0.1:8080)\n"
        "  --model NAME           model field (default 'default')\n"
        "  --api-key KEY          bearer token (default: $INFERD_API_KEY)\n"
        "  --text                 send text prompts instead of token ids\n"
        "  --chat                 use /v1/chat/completions (text)\n"
        "  --no-ignore-eos        do not ask the server to ignore end-of-sequence\n"
        "  --answer-words         bias answers to the text-mode words (logit_bias from the\n"
        "                         server's /tokenize): answers re-tokenize to the tokens\n"
        "                         generated, as a trained model's do (random weights)\n"
        "  --timeout S            per-request inactivity timeout (default 300)\n"
        "workload (one of):\n"
        "  --trace FMT:PATH       replay a trace, FMT = mooncake | azure | agentic (repeatable)\n"
        "  --trace-timing MODE    agentic: dependent (after previous + think time, default)\n"
        "                         or absolute (recorded timestamps)\n"
        "  --bucket S             timestamp resolution to spread over (default per format)\n"
        "  --synthetic SHAPE      plain | prefix | multiturn | agentic\n"
        "  --requests N           plain/prefix: requests (default 100)\n"
        "  --input DIST           input tokens per request or turn (default fixed:512)\n"
        "  --output DIST          output tokens (default fixed:128)\n"
        "                         DIST = N | fixed:N | uniform:LO:HI | normal:MEAN:SD |\n"
        "                         lognormal:MEAN:SD\n"
        "  --groups N --prefix-tokens N --users-per-group N   prefix sharing\n"
        "  --sessions N --turns N --think DIST(ms)            multiturn / agentic\n"
        "  --block-tokens N       synthetic block size (default 16)\n"
        "  --seed N               content and arrival seed (default 0)\n"
        "  --vocab LO:HI          token ids drawn from [LO, HI) (default 1000:30000)\n"
        "  --max-requests N       use only the first N requests\n"
        "arrivals:\n"
        "  --arrival KIND         trace | poisson | gamma | closed (default: trace for traces,\n"
        "                         poisson for synthetic with --rate, else closed)\n"
        "  --rate R               requests (sessions) per second\n"
        "  --burstiness B         gamma shape (1 = Poisson, < 1 burstier)\n"
        "  --time-scale F         trace replay speed factor (2 = twice as fast)\n"
        "  --concurrency N        closed loop with N in flight (default 16)\n"
        "  --max-concurrency N    cap for open-loop arrivals (client queue wait recorded)\n"
        "SLOs (milliseconds): --slo-ttft --slo-tpot --slo-itl-p99 --slo-e2e\n"
        "server counters:\n"
        "  --metrics-path P       Prometheus path scraped before/after (default /metrics;\n"
        "                         'none' to skip)\n"
        "quality:\n"
        "  --probes N             greedy probe prompts at start and end (default 0)\n"
        "  --probe-input N --probe-output N   probe lengths (default 32 / 32)\n"
        "  --reference FILE       compare probes to a saved reference\n"
        "  --save-reference FILE  save the start probes as the reference\n"
        "cost:\n"
        "  --machine-usd-h X --machines N --price-in X --price-cached X --price-out X\n"
        "                         (prices in USD per million tokens)\n"
        "sweeps:\n"
        "  --sweep-rate R1,R2,..  one run per rate\n"
        "  --sweep-concurrency N1,N2,..  one closed-loop run per concurrency\n"
        "  --find-max-rate PCT    bisection for the highest rate with PCT%% meeting the SLOs\n"
        "  --search-lo R --search-hi R --search-steps N   its bracket (default 0.5, 64, 7)\n"
        "  --user-speed S         throughput at S output tok/s per user (from sweep points)\n"
        "output:\n"
        "  --out DIR              summary.json, records.jsonl, cdf.svg (+ sweep.json, pareto.svg)\n"
        "  --json                 print the summary JSON instead of the table\n"
        "  --no-progress          no progress line\n");
}

static bool parse_list(const char *opt, const char *s, double *out, int *n, double lo, double hi)
{
    *n = 0;
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_SWEEP) {
            fprintf(stderr, "inferd: %s: at most %d values\n", opt, MAX_SWEEP);
            free(copy);
            return false;
        }
        if (!arg_float(opt, tok, lo, hi, &out[(*n)++])) {
            free(copy);
            return false;
        }
    }
    free(copy);
    if (!*n) fprintf(stderr, "inferd: %s: empty list\n", opt);
    return *n > 0;
}

static bool parse_dist(const char *opt, const char *s, struct bench_dist *d)
{
    struct err_msg m = {{0}};
    if (bench_dist_parse(opt, s, d, &m)) {
        fprintf(stderr, "inferd: %s\n", m.text);
        return false;
    }
    return true;
}

/* Returns 0 ok, 2 usage error, -1 --help printed. */
static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    struct err_msg m = {{0}};
    CHECK(bench_target_parse_url(&o->target, "http://127.0.0.1:8080", &m) == 0);
    snprintf(o->target.model, sizeof(o->target.model), "default");
    const char *key = getenv("INFERD_API_KEY");
    if (key) snprintf(o->target.api_key, sizeof(o->target.api_key), "%s", key);
    o->target.ignore_eos = true;
    o->target.timeout_s = 300;
    o->bucket_s = -1;
    o->synth.shape = BENCH_SHAPE_PLAIN;
    o->synth.n_requests = 100;
    CHECK(!bench_dist_parse("input", "fixed:512", &o->synth.len_in, NULL));
    CHECK(!bench_dist_parse("output", "fixed:128", &o->synth.len_out, NULL));
    CHECK(!bench_dist_parse("think", "fixed:1000", &o->synth.think, NULL));
    o->synth.n_groups = 4;
    o->synth.users_per_group = 8;
    o->synth.prefix_tokens = 1024;
    o->synth.n_sessions = 8;
    o->synth.n_turns = 4;
    o->block_tokens = 16;
    o->vocab_lo = 1000;
    o->vocab_hi = 30000;
    o->arrivals.burstiness = 1;
    o->arrivals.time_scale = 1;
    o->concurrency = 16;
    o->metrics_path = "/metrics";
    o->probe_input = o->probe_output = 32;
    o->prices.machines = 1;
    o->search_lo = 0.5;
    o->search_hi = 64;
    o->search_steps = 7;
    o->progress = true;
    bool synthetic = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        double x;
#define VAL()                                                                                      \
    do {                                                                                           \
        if (!(v = arg_value(argc, argv, &i))) return 2;                                            \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "--url")) {
            VAL();
            if (bench_target_parse_url(&o->target, v, &m)) {
                fprintf(stderr, "inferd: %s\n", m.text);
                return 2;
            }
        } else if (!strcmp(a, "--model")) {
            VAL();
            snprintf(o->target.model, sizeof(o->target.model), "%s", v);
        } else if (!strcmp(a, "--api-key")) {
            VAL();
            snprintf(o->target.api_key, sizeof(o->target.api_key), "%s", v);
        } else if (!strcmp(a, "--text")) {
            o->target.text = true;
        } else if (!strcmp(a, "--chat")) {
            o->target.chat = o->target.text = true;
        } else if (!strcmp(a, "--answer-words")) {
            o->answer_words = true;
        } else if (!strcmp(a, "--no-ignore-eos")) {
            o->target.ignore_eos = false;
        } else if (!strcmp(a, "--timeout")) {
            VAL();
            if (!arg_float(a, v, 1, 86400, &o->target.timeout_s)) return 2;
        } else if (!strcmp(a, "--trace")) {
            VAL();
            const char *colon = strchr(v, ':');
            char fmt[16] = {0};
            if (!colon || (size_t)(colon - v) >= sizeof(fmt) || !colon[1]) {
                fprintf(stderr, "inferd: --trace: expected FORMAT:PATH, got '%s'\n", v);
                return 2;
            }
            memcpy(fmt, v, (size_t)(colon - v));
            if (o->n_traces == MAX_TRACES) {
                fprintf(stderr, "inferd: --trace: at most %d files\n", MAX_TRACES);
                return 2;
            }
            struct trace_arg *t = &o->traces[o->n_traces++];
            if (!bench_trace_format_parse(fmt, &t->format)) {
                fprintf(stderr, "inferd: --trace: unknown format '%s' (mooncake, azure, agentic)\n",
                        fmt);
                return 2;
            }
            t->path = colon + 1;
        } else if (!strcmp(a, "--trace-timing")) {
            VAL();
            if (!strcmp(v, "absolute"))
                o->sessions_timed = true;
            else if (!strcmp(v, "dependent"))
                o->sessions_timed = false;
            else {
                fprintf(stderr, "inferd: --trace-timing: absolute or dependent\n");
                return 2;
            }
        } else if (!strcmp(a, "--bucket")) {
            VAL();
            if (!arg_float(a, v, 0, 3600, &o->bucket_s)) return 2;
        } else if (!strcmp(a, "--synthetic")) {
            VAL();
            synthetic = true;
            if (!strcmp(v, "plain"))
                o->synth.shape = BENCH_SHAPE_PLAIN;
            else if (!strcmp(v, "prefix"))
                o->synth.shape = BENCH_SHAPE_PREFIX;
            else if (!strcmp(v, "multiturn"))
                o->synth.shape = BENCH_SHAPE_MULTITURN;
            else if (!strcmp(v, "agentic"))
                o->synth.shape = BENCH_SHAPE_AGENTIC;
            else {
                fprintf(stderr, "inferd: --synthetic: plain, prefix, multiturn or agentic\n");
                return 2;
            }
        } else if (!strcmp(a, "--requests")) {
            VAL();
            if (!arg_int(a, v, 1, 10000000, &n)) return 2;
            o->synth.n_requests = (int32_t)n;
        } else if (!strcmp(a, "--input")) {
            VAL();
            if (!parse_dist(a, v, &o->synth.len_in)) return 2;
        } else if (!strcmp(a, "--output")) {
            VAL();
            if (!parse_dist(a, v, &o->synth.len_out)) return 2;
        } else if (!strcmp(a, "--think")) {
            VAL();
            if (!parse_dist(a, v, &o->synth.think)) return 2;
        } else if (!strcmp(a, "--groups") || !strcmp(a, "--prefix-tokens") ||
                   !strcmp(a, "--users-per-group") || !strcmp(a, "--sessions") ||
                   !strcmp(a, "--turns") || !strcmp(a, "--block-tokens") ||
                   !strcmp(a, "--max-requests") || !strcmp(a, "--concurrency") ||
                   !strcmp(a, "--max-concurrency") || !strcmp(a, "--probes") ||
                   !strcmp(a, "--probe-input") || !strcmp(a, "--probe-output") ||
                   !strcmp(a, "--machines") || !strcmp(a, "--search-steps")) {
            VAL();
            if (!arg_int(a, v, !strcmp(a, "--probes") || !strcmp(a, "--max-concurrency") ? 0 : 1,
                         10000000, &n))
                return 2;
            int32_t k = (int32_t)n;
            if (!strcmp(a, "--groups"))
                o->synth.n_groups = k;
            else if (!strcmp(a, "--prefix-tokens"))
                o->synth.prefix_tokens = k;
            else if (!strcmp(a, "--users-per-group"))
                o->synth.users_per_group = k;
            else if (!strcmp(a, "--sessions"))
                o->synth.n_sessions = k;
            else if (!strcmp(a, "--turns"))
                o->synth.n_turns = k;
            else if (!strcmp(a, "--block-tokens"))
                o->block_tokens = k;
            else if (!strcmp(a, "--max-requests"))
                o->max_requests = k;
            else if (!strcmp(a, "--concurrency"))
                o->concurrency = k;
            else if (!strcmp(a, "--max-concurrency"))
                o->max_concurrency = k;
            else if (!strcmp(a, "--probes"))
                o->n_probes = k;
            else if (!strcmp(a, "--probe-input"))
                o->probe_input = k;
            else if (!strcmp(a, "--probe-output"))
                o->probe_output = k;
            else if (!strcmp(a, "--machines"))
                o->prices.machines = k;
            else
                o->search_steps = k;
        } else if (!strcmp(a, "--seed")) {
            VAL();
            if (!arg_int(a, v, 0, (long)1 << 62, &n)) return 2;
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--vocab")) {
            VAL();
            long lo, hi;
            char lo_s[24] = {0};
            const char *colon = strchr(v, ':');
            if (!colon || (size_t)(colon - v) >= sizeof(lo_s)) {
                fprintf(stderr, "inferd: --vocab: expected LO:HI\n");
                return 2;
            }
            memcpy(lo_s, v, (size_t)(colon - v));
            if (!arg_int(a, lo_s, 0, INT32_MAX - 1, &lo) ||
                !arg_int(a, colon + 1, lo + 1, INT32_MAX, &hi))
                return 2;
            o->vocab_lo = (int32_t)lo;
            o->vocab_hi = (int32_t)hi;
        } else if (!strcmp(a, "--arrival")) {
            VAL();
            o->arrival_given = true;
            if (!strcmp(v, "trace"))
                o->arrivals.kind = BENCH_ARRIVAL_TRACE;
            else if (!strcmp(v, "poisson"))
                o->arrivals.kind = BENCH_ARRIVAL_POISSON;
            else if (!strcmp(v, "gamma"))
                o->arrivals.kind = BENCH_ARRIVAL_GAMMA;
            else if (!strcmp(v, "closed"))
                o->arrivals.kind = BENCH_ARRIVAL_CLOSED;
            else {
                fprintf(stderr, "inferd: --arrival: trace, poisson, gamma or closed\n");
                return 2;
            }
        } else if (!strcmp(a, "--rate") || !strcmp(a, "--burstiness") ||
                   !strcmp(a, "--time-scale") || !strcmp(a, "--slo-ttft") ||
                   !strcmp(a, "--slo-tpot") || !strcmp(a, "--slo-itl-p99") ||
                   !strcmp(a, "--slo-e2e") || !strcmp(a, "--machine-usd-h") ||
                   !strcmp(a, "--price-in") || !strcmp(a, "--price-cached") ||
                   !strcmp(a, "--price-out") || !strcmp(a, "--find-max-rate") ||
                   !strcmp(a, "--search-lo") || !strcmp(a, "--search-hi") ||
                   !strcmp(a, "--user-speed")) {
            VAL();
            if (!arg_float(a, v, 1e-9, 1e9, &x)) return 2;
            if (!strcmp(a, "--rate"))
                o->arrivals.rate = x;
            else if (!strcmp(a, "--burstiness"))
                o->arrivals.burstiness = x;
            else if (!strcmp(a, "--time-scale"))
                o->arrivals.time_scale = x;
            else if (!strcmp(a, "--slo-ttft"))
                o->slo.ttft_s = x * 1e-3;
            else if (!strcmp(a, "--slo-tpot"))
                o->slo.tpot_s = x * 1e-3;
            else if (!strcmp(a, "--slo-itl-p99"))
                o->slo.itl_p99_s = x * 1e-3;
            else if (!strcmp(a, "--slo-e2e"))
                o->slo.e2e_s = x * 1e-3;
            else if (!strcmp(a, "--machine-usd-h"))
                o->prices.machine_usd_h = x;
            else if (!strcmp(a, "--price-in"))
                o->prices.in_usd_m = x;
            else if (!strcmp(a, "--price-cached"))
                o->prices.cached_usd_m = x;
            else if (!strcmp(a, "--price-out"))
                o->prices.out_usd_m = x;
            else if (!strcmp(a, "--find-max-rate")) {
                if (x > 100) {
                    fprintf(stderr, "inferd: --find-max-rate: a percentage in (0, 100]\n");
                    return 2;
                }
                o->find_pct = x;
            } else if (!strcmp(a, "--search-lo"))
                o->search_lo = x;
            else if (!strcmp(a, "--search-hi"))
                o->search_hi = x;
            else
                o->user_speed = x;
        } else if (!strcmp(a, "--sweep-rate")) {
            VAL();
            if (!parse_list(a, v, o->sweep_rate, &o->n_sweep_rate, 1e-6, 1e9)) return 2;
        } else if (!strcmp(a, "--sweep-concurrency")) {
            VAL();
            double tmp[MAX_SWEEP];
            if (!parse_list(a, v, tmp, &o->n_sweep_conc, 1, 1e6)) return 2;
            for (int k = 0; k < o->n_sweep_conc; k++)
                o->sweep_conc[k] = (int32_t)tmp[k];
        } else if (!strcmp(a, "--metrics-path")) {
            VAL();
            o->metrics_path = strcmp(v, "none") ? v : NULL;
        } else if (!strcmp(a, "--reference")) {
            VAL();
            o->reference = v;
        } else if (!strcmp(a, "--save-reference")) {
            VAL();
            o->save_reference = v;
        } else if (!strcmp(a, "--out")) {
            VAL();
            o->out_dir = v;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--no-progress")) {
            o->progress = false;
        } else {
            fprintf(stderr, "inferd: bench: unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef VAL
    }
    if (o->n_traces && synthetic) {
        fprintf(stderr, "inferd: bench: --trace and --synthetic exclude each other\n");
        return 2;
    }
    if (!o->arrival_given) {
        if (o->n_traces)
            o->arrivals.kind = BENCH_ARRIVAL_TRACE;
        else if (o->arrivals.rate > 0)
            o->arrivals.kind = BENCH_ARRIVAL_POISSON;
        else
            o->arrivals.kind = BENCH_ARRIVAL_CLOSED;
    }
    if (o->arrivals.kind == BENCH_ARRIVAL_TRACE && !o->n_traces) {
        fprintf(stderr, "inferd: bench: --arrival trace needs --trace\n");
        return 2;
    }
    if ((o->arrivals.kind == BENCH_ARRIVAL_POISSON || o->arrivals.kind == BENCH_ARRIVAL_GAMMA) &&
        !(o->arrivals.rate > 0) && !o->n_sweep_rate && !o->find_pct) {
        fprintf(stderr, "inferd: bench: poisson / gamma arrivals need --rate\n");
        return 2;
    }
    if (o->find_pct &&
        !(o->slo.ttft_s > 0 || o->slo.tpot_s > 0 || o->slo.itl_p99_s > 0 || o->slo.e2e_s > 0)) {
        fprintf(stderr, "inferd: bench: --find-max-rate needs at least one --slo-* target\n");
        return 2;
    }
    if (o->find_pct && !(o->search_hi > o->search_lo)) {
        fprintf(stderr, "inferd: bench: --search-hi must exceed --search-lo\n");
        return 2;
    }
    if ((o->n_sweep_rate ? 1 : 0) + (o->n_sweep_conc ? 1 : 0) + (o->find_pct ? 1 : 0) > 1) {
        fprintf(stderr, "inferd: bench: choose one of --sweep-rate, --sweep-concurrency, "
                        "--find-max-rate\n");
        return 2;
    }
    if (o->user_speed > 0 && !o->n_sweep_rate && !o->n_sweep_conc) {
        fprintf(stderr, "inferd: bench: --user-speed needs a sweep\n");
        return 2;
    }
    return 0;
}

/* ---- workload ---- */

static int build_workload(const struct opts *o, struct bench_workload *w, struct err_msg *m)
{
    int32_t B = o->block_tokens;
    if (o->n_traces) {
        B = 0;
        for (int k = 0; k < o->n_traces; k++) {
            int32_t b = bench_trace_block_tokens(o->traces[k].format);
            if (b && B && b != B)
                return err_set(m, ERR_INVALID,
                               "--trace: formats with different block sizes "
                               "(%d and %d) cannot be mixed",
                               B, b);
            if (b) B = b;
        }
        if (!B) B = 512;
    }
    bench_workload_init(w, B);
    w->seed = o->seed;
    w->vocab_lo = o->vocab_lo;
    w->vocab_hi = o->vocab_hi;
    if (o->n_traces) {
        for (int k = 0; k < o->n_traces; k++) {
            struct bench_trace_opts to = {.bucket_s = o->bucket_s,
                                          .seed = o->seed,
                                          .sessions_timed = o->sessions_timed,
                                          .file_no = k,
                                          .max_requests = o->max_requests};
            int rc = bench_trace_load(w, o->traces[k].format, o->traces[k].path, &to, m);
            if (rc) return rc;
        }
    } else {
        struct bench_synth s = o->synth;
        s.seed = o->seed;
        int rc = bench_workload_synth(w, &s, m);
        if (rc) return rc;
    }
    if (o->max_requests > 0) bench_workload_truncate(w, o->max_requests);
    return 0;
}

/* ---- server counters ---- */

static const char *const spec_names[2][3] = {
    {"inferd_spec_drafts_total", "inferd_spec_draft_tokens_total",
     "inferd_spec_accepted_tokens_total"},
    {"vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
     "vllm:spec_decode_num_accepted_tokens_total"}};

/* Reads the three counters (-1 where absent). */
static void scrape(const struct opts *o, double v[3])
{
    v[0] = v[1] = v[2] = -1;
    if (!o->metrics_path) return;
    struct buf b = {0};
    int status = 0;
    struct err_msg m = {{0}};
    if (bench_client_get(&o->target, o->metrics_path, &b, &status, &m) == 0 && status == 200) {
        for (int fam = 0; fam < 2; fam++) {
            bool all = true;
            double t[3];
            for (int k = 0; k < 3; k++)
                all = bench_prom_sum(buf_str(&b), spec_names[fam][k], &t[k]) && all;
            if (all) {
                memcpy(v, t, sizeof(t));
                break;
            }
        }
    }
    buf_release(&b);
}

/* ---- one run ---- */

struct point {
    char label[48];               /* "rate=4", "concurrency=8", "run" */
    double rate;                  /* requests/s asked (0 = n/a) */
    int32_t concurrency;          /* closed-loop concurrency (0 = n/a) */
    struct bench_summary summary; /* figures */
    struct bench_cost cost;       /* when prices were given */
    bool has_cost;                /* cost computed */
};

static int run_point(const struct opts *o, const struct bench_arrivals *arr, int32_t cap,
                     struct point *pt, bool write_records, struct err_msg *m)
{
    struct bench_workload w;
    int rc = build_workload(o, &w, m);
    if (rc) goto out_w;
    bench_workload_arrivals(&w, arr);
    int32_t *ideal = xmalloc(sizeof(int32_t) * (size_t)(w.n ? w.n : 1));
    bench_workload_ideal_hit(&w, ideal);
    double before[3], after[3];
    scrape(o, before);
    struct bench_run_opts ro = {.max_concurrency = cap,
                                .progress = o->progress,
                                .temperature = -1,
                                .seed = -1,
                                .ideal_cached = ideal};
    struct bench_record *recs = NULL;
    rc = bench_client_run(&w, &o->target, &ro, &recs, NULL, m);
    if (rc) goto out_ideal;
    scrape(o, after);
    struct bench_spec spec = {.drafts = -1, .draft_tokens = -1, .accepted = -1};
    if (before[0] >= 0 && after[0] >= 0) {
        spec.drafts = (int64_t)(after[0] - before[0]);
        spec.draft_tokens = (int64_t)(after[1] - before[1]);
        spec.accepted = (int64_t)(after[2] - before[2]);
    }
    bench_summary_compute(recs, (size_t)w.n, &o->slo, &spec, &pt->summary);
    if (o->prices.machine_usd_h > 0) {
        double hit = pt->summary.hit_server >= 0 ? pt->summary.hit_server : 0;
        bench_cost_compute(&o->prices, pt->summary.in_tok_s, pt->summary.out_tok_s, hit, &pt->cost);
        pt->has_cost = true;
    }
    if (o->out_dir) {
        char path[4096];
        if (write_records) {
            snprintf(path, sizeof(path), "%s/records%s%s.jsonl", o->out_dir,
                     strcmp(pt->label, "run") ? "-" : "",
                     strcmp(pt->label, "run") ? pt->label : "");
            if (!rc) rc = bench_report_records(path, recs, (size_t)w.n, m);
            snprintf(path, sizeof(path), "%s/cdf%s%s.svg", o->out_dir,
                     strcmp(pt->label, "run") ? "-" : "",
                     strcmp(pt->label, "run") ? pt->label : "");
            if (!rc) rc = bench_report_cdf_svg(path, recs, (size_t)w.n, m);
        }
    }
    for (int32_t i = 0; i < w.n; i++)
        bench_record_release(&recs[i]);
    free(recs);
out_ideal:
    free(ideal);
out_w:
    bench_workload_release(&w);
    return rc;
}

static json_t *point_json(const struct point *pt)
{
    json_t *j = bench_report_summary_json(&pt->summary, pt->has_cost ? &pt->cost : NULL);
    json_object_set_new(j, "label", json_string(pt->label));
    if (pt->rate > 0) json_object_set_new(j, "rate", json_real(pt->rate));
    if (pt->concurrency > 0) json_object_set_new(j, "concurrency", json_integer(pt->concurrency));
    return j;
}

/* ---- quality probes ---- */

static int run_probes(const struct opts *o, char ***texts, struct err_msg *m)
{
    struct bench_workload w;
    bench_workload_init(&w, o->probe_input);
    w.seed = o->seed ^ 0x9e0be5ull;
    w.vocab_lo = o->vocab_lo;
    w.vocab_hi = o->vocab_hi;
    for (int32_t k = 0; k < o->n_probes; k++) {
        /* probe ids live far from workload ids: never a cache hit on load data */
        uint64_t id = (1ull << 63) | (uint64_t)k;
        struct bench_item it = {.n_input = o->probe_input,
                                .n_output = o->probe_output,
                                .blocks = &id,
                                .n_blocks = 1,
                                .after = -1,
                                .session = -1};
        bench_workload_add(&w, &it);
    }
    struct bench_run_opts ro = {
        .max_concurrency = 4, .temperature = 0, .seed = 0, .keep_text = true};
    struct bench_record *recs = NULL;
    int rc = bench_client_run(&w, &o->target, &ro, &recs, texts, m);
    if (!rc) {
        for (int32_t i = 0; i < w.n; i++) {
            if (!recs[i].ok && !rc)
                rc = err_set(m, ERR_PROTOCOL, "quality probe %d failed: %s", i, recs[i].error);
            bench_record_release(&recs[i]);
        }
        free(recs);
    }
    bench_workload_release(&w);
    return rc;
}

/* Exact-match rate and first divergence (byte offset, -1 equal) of b vs a. */
static json_t *compare_texts(char **a, char **b, int32_t n)
{
    json_t *div = json_array();
    int32_t same = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *x = a[i] ? a[i] : "", *y = b[i] ? b[i] : "";
        if (!strcmp(x, y)) {
            same++;
            json_array_append_new(div, json_integer(-1));
            continue;
        }
        size_t p = 0;
        while (x[p] && x[p] == y[p])
            p++;
        json_array_append_new(div, json_integer((json_int_t)p));
    }
    return json_pack("{s:f,s:i,s:i,s:o}", "exact_match", n ? (double)same / n : 1.0, "matched",
                     same, "probes", n, "first_divergence", div);
}

static int load_reference(const struct opts *o, char ***texts, struct err_msg *m)
{
    json_error_t je;
    json_t *r = json_load_file(o->reference, 0, &je);
    if (!r)
        return err_set(m, ERR_FORMAT, "%s: line %d: bad JSON: %s", o->reference, je.line, je.text);
    int rc = 0;
    json_t *t = json_object_get(r, "texts");
    json_t *pi = json_object_get(r, "probe_input"), *po = json_object_get(r, "probe_output");
    json_t *sd = json_object_get(r, "seed");
    if (!json_is_array(t) || (int32_t)json_array_size(t) != o->n_probes || !json_is_integer(pi) ||
        json_integer_value(pi) != o->probe_input || !json_is_integer(po) ||
        json_integer_value(po) != o->probe_output || !json_is_integer(sd) ||
        (uint64_t)json_integer_value(sd) != o->seed) {
        rc = err_set(m, ERR_FORMAT,
                     "%s: reference was made with other probe settings (needs texts[%d], "
                     "probe_input %d, probe_output %d, seed %llu)",
                     o->reference, o->n_probes, o->probe_input, o->probe_output,
                     (unsigned long long)o->seed);
        goto out;
    }
    *texts = xcalloc((size_t)o->n_probes, sizeof(char *));
    for (int32_t i = 0; i < o->n_probes; i++) {
        json_t *s = json_array_get(t, (size_t)i);
        if (!json_is_string(s)) {
            rc = err_set(m, ERR_FORMAT, "%s: texts[%d] must be a string", o->reference, i);
            goto out;
        }
        (*texts)[i] = xstrdup(json_string_value(s));
    }
out:
    json_decref(r);
    return rc;
}

static void free_texts(char **t, int32_t n)
{
    if (!t) return;
    for (int32_t i = 0; i < n; i++)
        free(t[i]);
    free(t);
}

/* ---- sweeps ---- */

/* Non-dominated points (higher speed and higher throughput are better),
 * sorted by speed ascending; returns the count. */
static int pareto(const double *speed, const double *tput, int n, int *idx)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        bool dominated = false;
        for (int j = 0; j < n && !dominated; j++)
            dominated = j != i && speed[j] >= speed[i] && tput[j] >= tput[i] &&
                        (speed[j] > speed[i] || tput[j] > tput[i]);
        if (!dominated && isfinite(speed[i])) idx[k++] = i;
    }
    for (int a = 0; a < k; a++)
        for (int b = a + 1; b < k; b++)
            if (speed[idx[b]] < speed[idx[a]]) {
                int t = idx[a];
                idx[a] = idx[b];
                idx[b] = t;
            }
    return k;
}

/* Throughput on the frontier at per-user speed `target`, linear between the
 * neighbouring frontier points; NAN when no point is that fast. */
static double tput_at_speed(const double *speed, const double *tput, const int *front, int k,
                            double target)
{
    if (!k || speed[front[k - 1]] < target) return NAN;
    for (int i = 0; i < k; i++) {
        if (speed[front[i]] < target) continue;
        if (i == 0) return tput[front[0]];
        double s0 = speed[front[i - 1]], s1 = speed[front[i]];
        double t0 = tput[front[i - 1]], t1 = tput[front[i]];
        return t0 + (t1 - t0) * (target - s0) / (s1 - s0);
    }
    return NAN;
}

static int write_sweep(const struct opts *o, struct point *pts, int n, json_t *root,
                       struct err_msg *m)
{
    double *speed = xmalloc(sizeof(double) * (size_t)n),
           *tput = xmalloc(sizeof(double) * (size_t)n);
    int *front = xmalloc(sizeof(int) * (size_t)n);
    int machines = o->prices.machines > 0 ? o->prices.machines : 1;
    for (int i = 0; i < n; i++) {
        speed[i] = pts[i].summary.speed.p50;
        tput[i] = pts[i].summary.out_tok_s / machines;
    }
    int k = pareto(speed, tput, n, front);
    json_t *fr = json_array();
    for (int i = 0; i < k; i++)
        json_array_append_new(fr, json_string(pts[front[i]].label));
    json_object_set_new(root, "pareto_front", fr);
    if (o->user_speed > 0) {
        double t = tput_at_speed(speed, tput, front, k, o->user_speed);
        json_object_set_new(root, "user_speed_target", json_real(o->user_speed));
        json_object_set_new(root, "throughput_at_user_speed",
                            isfinite(t) ? json_real(t) : json_null());
        if (!o->json) {
            if (isfinite(t))
                printf("throughput at %.1f tok/s per user: %.1f output tok/s per machine\n",
                       o->user_speed, t);
            else
                printf("no sweep point reached %.1f tok/s per user\n", o->user_speed);
        }
    }
    int rc = 0;
    if (o->out_dir) {
        double *fx = xmalloc(sizeof(double) * (size_t)(k ? k : 1));
        double *fy = xmalloc(sizeof(double) * (size_t)(k ? k : 1));
        for (int i = 0; i < k; i++)
            fx[i] = speed[front[i]], fy[i] = tput[front[i]];
        struct bench_svg_series se[2] = {
            {.name = "sweep points", .x = speed, .y = tput, .n = (size_t)n, .points = true},
            {.name = "Pareto front", .x = fx, .y = fy, .n = (size_t)k, .line = true}};
        struct bench_svg_plot p = {.title = "throughput per machine vs speed per user",
                                   .xlabel = "output tokens/s per user (p50)",
                                   .ylabel = "output tokens/s per machine",
                                   .series = se,
                                   .n_series = 2};
        char path[4096];
        snprintf(path, sizeof(path), "%s/pareto.svg", o->out_dir);
        rc = bench_svg_write(&p, path, m);
        free(fx);
        free(fy);
    }
    free(speed);
    free(tput);
    free(front);
    return rc;
}

static void print_point(const struct opts *o, const struct point *pt)
{
    if (o->json) return;
    if (strcmp(pt->label, "run")) printf("== %s\n", pt->label);
    bench_report_text(stdout, &pt->summary, pt->has_cost ? &pt->cost : NULL);
    fflush(stdout);
}

int cmd_bench(int argc, char **argv)
{
    static struct opts o; /* large; static keeps it off the stack */
    int prc = parse(argc, argv, &o);
    if (prc) return prc < 0 ? 0 : prc;
    signal(SIGPIPE, SIG_IGN);
    struct err_msg m = {{0}};
    int rc = 0;
    if (o.out_dir && mkdir(o.out_dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "inferd: cannot create '%s': %s\n", o.out_dir, strerror(errno));
        return 1;
    }
    if (o.answer_words && (rc = bench_target_answer_words(&o.target, &m))) goto fail;
    /* load the workload once up front: trace errors surface before any traffic */
    {
        struct bench_workload w;
        rc = build_workload(&o, &w, &m);
        bench_workload_release(&w);
        if (rc) goto fail;
    }
    char **ref = NULL, **q_start = NULL, **q_end = NULL;
    if (o.reference && !o.n_probes) {
        fprintf(stderr, "inferd: bench: --reference needs --probes N\n");
        return 2;
    }
    if (o.reference && (rc = load_reference(&o, &ref, &m))) goto fail;
    if (o.n_probes && (rc = run_probes(&o, &q_start, &m))) goto fail_q;

    json_t *root = json_object();
    struct point *pts = NULL;
    int n_pts = 0;
    if (o.n_sweep_rate || o.n_sweep_conc) {
        int n = o.n_sweep_rate ? o.n_sweep_rate : o.n_sweep_conc;
        pts = xcalloc((size_t)n, sizeof(*pts));
        for (int i = 0; i < n && !rc; i++) {
            struct point *pt = &pts[n_pts++];
            struct bench_arrivals a = o.arrivals;
            a.seed = o.seed;
            int32_t cap = o.max_concurrency;
            if (o.n_sweep_rate) {
                if (a.kind == BENCH_ARRIVAL_CLOSED || a.kind == BENCH_ARRIVAL_TRACE)
                    a.kind = BENCH_ARRIVAL_POISSON;
                a.rate = o.sweep_rate[i];
                pt->rate = a.rate;
                snprintf(pt->label, sizeof(pt->label), "rate=%g", a.rate);
            } else {
                a.kind = BENCH_ARRIVAL_CLOSED;
                cap = o.sweep_conc[i];
                pt->concurrency = cap;
                snprintf(pt->label, sizeof(pt->label), "concurrency=%d", cap);
            }
            rc = run_point(&o, &a, cap, pt, true, &m);
            if (!rc) print_point(&o, pt);
        }
    } else if (o.find_pct) {
        /* bisection on the rate: attainment falls as load rises */
        int n = o.search_steps + 2;
        pts = xcalloc((size_t)n, sizeof(*pts));
        double lo = o.search_lo, hi = o.search_hi, best = 0;
        for (int step = 0; step < n && !rc; step++) {
            double rate = step == 0 ? lo : step == 1 ? hi : 0.5 * (lo + hi);
            struct point *pt = &pts[n_pts++];
            struct bench_arrivals a = o.arrivals;
            a.seed = o.seed;
            if (a.kind != BENCH_ARRIVAL_GAMMA) a.kind = BENCH_ARRIVAL_POISSON;
            a.rate = rate;
            pt->rate = rate;
            snprintf(pt->label, sizeof(pt->label), "rate=%g", rate);
            rc = run_point(&o, &a, o.max_concurrency, pt, false, &m);
            if (rc) break;
            print_point(&o, pt);
            bool meets = pt->summary.slo_attainment * 100 >= o.find_pct;
            if (step == 0 && !meets) break; /* even the lowest rate misses */
            if (step == 1 && meets) {
                best = hi; /* the bracket's top already meets the SLOs */
                break;
            }
            if (meets && rate > best) best = rate;
            if (step >= 2) {
                if (meets)
                    lo = rate;
                else
                    hi = rate;
            }
            if (step == 0) best = rate;
        }
        json_object_set_new(root, "target_attainment_pct", json_real(o.find_pct));
        json_object_set_new(root, "max_rate", best > 0 ? json_real(best) : json_null());
        if (!o.json && !rc) {
            if (best > 0)
                printf("max rate with %.1f%% of requests meeting the SLOs: %.3f req/s "
                       "(bracket [%g, %g])\n",
                       o.find_pct, best, o.search_lo, o.search_hi);
            else
                printf("even %g req/s misses %.1f%% SLO attainment\n", o.search_lo, o.find_pct);
        }
    } else {
        pts = xcalloc(1, sizeof(*pts));
        struct point *pt = &pts[n_pts++];
        struct bench_arrivals a = o.arrivals;
        a.seed = o.seed;
        int32_t cap = o.max_concurrency;
        if (a.kind == BENCH_ARRIVAL_CLOSED) {
            cap = o.concurrency;
            pt->concurrency = cap;
        }
        pt->rate = a.kind == BENCH_ARRIVAL_POISSON || a.kind == BENCH_ARRIVAL_GAMMA ? a.rate : 0;
        snprintf(pt->label, sizeof(pt->label), "run");
        rc = run_point(&o, &a, cap, pt, true, &m);
        if (!rc) print_point(&o, pt);
    }
    if (rc) goto fail_root;

    if (n_pts == 1 && !o.find_pct) {
        json_t *s = point_json(&pts[0]);
        json_object_update(root, s);
        json_decref(s);
    } else {
        json_t *arr = json_array();
        for (int i = 0; i < n_pts; i++)
            json_array_append_new(arr, point_json(&pts[i]));
        json_object_set_new(root, "points", arr);
        if (o.n_sweep_rate || o.n_sweep_conc) rc = write_sweep(&o, pts, n_pts, root, &m);
        if (rc) goto fail_root;
    }

    if (o.n_probes) {
        if ((rc = run_probes(&o, &q_end, &m))) goto fail_root;
        json_t *q = json_object();
        json_object_set_new(q, "start_vs_end", compare_texts(q_start, q_end, o.n_probes));
        if (ref) {
            json_object_set_new(q, "start_vs_reference", compare_texts(ref, q_start, o.n_probes));
            json_object_set_new(q, "end_vs_reference", compare_texts(ref, q_end, o.n_probes));
        }
        if (!o.json) {
            json_t *se = json_object_get(q, "start_vs_end");
            printf("quality           %d probes: start vs end exact match %.3f", o.n_probes,
                   json_real_value(json_object_get(se, "exact_match")));
            if (ref)
                printf(", end vs reference %.3f",
                       json_real_value(
                           json_object_get(json_object_get(q, "end_vs_reference"), "exact_match")));
            printf("\n");
        }
        json_object_set_new(root, "quality", q);
        if (o.save_reference) {
            json_t *texts = json_array();
            for (int32_t i = 0; i < o.n_probes; i++)
                json_array_append_new(texts, json_string(q_start[i] ? q_start[i] : ""));
            json_t *r = json_pack("{s:i,s:i,s:I,s:s,s:o}", "probe_input", o.probe_input,
                                  "probe_output", o.probe_output, "seed", (json_int_t)o.seed,
                                  "model", o.target.model, "texts", texts);
            rc = bench_report_write_json(o.save_reference, r, &m);
            json_decref(r);
            if (rc) goto fail_root;
        }
    }
    if (o.out_dir) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", o.out_dir, n_pts > 1 ? "sweep.json" : "summary.json");
        if ((rc = bench_report_write_json(path, root, &m))) goto fail_root;
    }
    if (o.json) {
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
        puts(s);
        free(s);
    }
fail_root:
    json_decref(root);
    free(pts);
fail_q:
    free_texts(ref, o.n_probes);
    free_texts(q_start, o.n_probes);
    free_texts(q_end, o.n_probes);
fail:
    if (rc) {
        fprintf(stderr, "inferd: bench: %s\n", m.text[0] ? m.text : err_str(rc));
        return 1;
    }
    return 0;
}

int cmd_bench_mock(int argc, char **argv)
{
    struct bench_mock_opts o;
    bench_mock_opts_default(&o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        double x;
        if (!strcmp(a, "--spec-metrics-only")) {
            o.spec_metrics_only = true;
            continue;
        }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "--host"))
            o.host = v;
        else if (!strcmp(a, "--port-file"))
            o.port_file = v;
        else if (!strcmp(a, "--port") || !strcmp(a, "--block-tokens") || !strcmp(a, "--spec-k") ||
                 !strcmp(a, "--spec-accept") || !strcmp(a, "--fail-every") ||
                 !strcmp(a, "--perturb-from") || !strcmp(a, "--backlog")) {
            if (!arg_int(a, v, !strcmp(a, "--perturb-from") ? -1 : 0, 1000000, &n)) return 2;
            if (!strcmp(a, "--port"))
                o.port = (int)n;
            else if (!strcmp(a, "--block-tokens"))
                o.block_tokens = (int32_t)n;
            else if (!strcmp(a, "--spec-k"))
                o.spec_k = (int32_t)n;
            else if (!strcmp(a, "--spec-accept"))
                o.spec_accept = (int32_t)n;
            else if (!strcmp(a, "--fail-every"))
                o.fail_every = (int32_t)n;
            else if (!strcmp(a, "--perturb-from"))
                o.perturb_from = (int32_t)n;
            else
                o.backlog = (int)n;
        } else if (!strcmp(a, "--ttft-ms") || !strcmp(a, "--itl-ms") ||
                   !strcmp(a, "--prefill-us")) {
            if (!arg_float(a, v, 0, 1e7, &x)) return 2;
            if (!strcmp(a, "--ttft-ms"))
                o.ttft_ms = x;
            else if (!strcmp(a, "--itl-ms"))
                o.itl_ms = x;
            else
                o.prefill_us = x;
        } else {
            fprintf(stderr,
                    "usage: inferd bench-mock [--host A] [--port P] [--port-file F] [--ttft-ms X]\n"
                    "         [--itl-ms X] [--prefill-us X] [--block-tokens N] [--spec-k K]\n"
                    "         [--spec-accept A] [--spec-metrics-only] [--fail-every N]\n"
                    "         [--perturb-from J] [--backlog N]\n");
            return 2;
        }
    }
    struct err_msg m = {{0}};
    if (bench_mock_run(&o, &m)) {
        fprintf(stderr, "inferd: bench-mock: %s\n", m.text);
        return 1;
    }
    return 0;
}
