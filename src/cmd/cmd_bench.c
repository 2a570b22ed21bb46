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
#include "cmd/cmd.h"
#include "cmd/opt.h"

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

/* "R1,R2,..": up to MAX_SWEEP numbers in [lo, hi]. */
static int parse_list(const char *opt, const char *s, double *out, int *n, double lo, double hi,
                      struct err_msg *m)
{
    *n = 0;
    char *copy = xstrdup(s), *save = NULL;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(tok, &end);
        if (*n == MAX_SWEEP)
            rc = err_set(m, ERR_INVALID, "%s: at most %d values", opt, MAX_SWEEP);
        else if (end == tok || *end || !(v >= lo && v <= hi))
            rc = err_set(m, ERR_INVALID, "%s: expected numbers in [%g, %g], got '%s'", opt, lo, hi,
                         tok);
        else
            out[(*n)++] = v;
    }
    free(copy);
    if (!rc && !*n) rc = err_set(m, ERR_INVALID, "%s: empty list", opt);
    return rc;
}

static int set_url(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    return bench_target_parse_url(dst, val, m);
}

static int set_chat(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct bench_target *t = dst;
    t->chat = t->text = true;
    return 0;
}

/* --trace FORMAT:PATH, repeatable. */
static int set_trace(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct opts *o = dst;
    const char *colon = strchr(val, ':');
    char fmt[16] = {0};
    if (!colon || (size_t)(colon - val) >= sizeof(fmt) || !colon[1])
        return err_set(m, ERR_INVALID, "%s: expected FORMAT:PATH, got '%s'", spelling, val);
    memcpy(fmt, val, (size_t)(colon - val));
    if (o->n_traces == MAX_TRACES)
        return err_set(m, ERR_INVALID, "%s: at most %d files", spelling, MAX_TRACES);
    struct trace_arg *t = &o->traces[o->n_traces];
    if (!bench_trace_format_parse(fmt, &t->format))
        return err_set(m, ERR_INVALID, "%s: unknown format '%s' (mooncake, azure, agentic)",
                       spelling, fmt);
    t->path = colon + 1;
    o->n_traces++;
    return 0;
}

static int set_dist(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    return bench_dist_parse(spelling, val, dst, m);
}

/* --vocab LO:HI, token ids drawn from [LO, HI). */
static int set_vocab(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct opts *o = dst;
    char *end;
    errno = 0;
    long long lo = strtoll(val, &end, 10), hi = -1;
    if (!errno && end != val && *end == ':') {
        const char *h = end + 1;
        hi = strtoll(h, &end, 10);
        if (errno || end == h || *end) hi = -1;
    }
    if (lo < 0 || lo > INT32_MAX - 1 || hi <= lo || hi > INT32_MAX)
        return err_set(m, ERR_INVALID, "%s: expected LO:HI with 0 <= LO < HI <= %d, got '%s'",
                       spelling, INT32_MAX, val);
    o->vocab_lo = (int32_t)lo;
    o->vocab_hi = (int32_t)hi;
    return 0;
}

static int set_sweep_rate(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct opts *o = dst;
    return parse_list(spelling, val, o->sweep_rate, &o->n_sweep_rate, 1e-6, 1e9, m);
}

static int set_sweep_conc(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct opts *o = dst;
    double tmp[MAX_SWEEP];
    int rc = parse_list(spelling, val, tmp, &o->n_sweep_conc, 1, 1e6, m);
    for (int k = 0; !rc && k < o->n_sweep_conc; k++)
        o->sweep_conc[k] = (int32_t)tmp[k];
    return rc;
}

static const struct cmd_choice trace_timings[] = {{"dependent", 0}, {"absolute", 1}, {NULL, 0}};
static const struct cmd_choice shapes[] = {{"plain", BENCH_SHAPE_PLAIN},
                                           {"prefix", BENCH_SHAPE_PREFIX},
                                           {"multiturn", BENCH_SHAPE_MULTITURN},
                                           {"agentic", BENCH_SHAPE_AGENTIC},
                                           {NULL, 0}};
static const struct cmd_choice arrival_kinds[] = {{"trace", BENCH_ARRIVAL_TRACE},
                                                  {"poisson", BENCH_ARRIVAL_POISSON},
                                                  {"gamma", BENCH_ARRIVAL_GAMMA},
                                                  {"closed", BENCH_ARRIVAL_CLOSED},
                                                  {NULL, 0}};

/* Returns 0 ok, 2 usage error (printed), -1 --help printed. */
static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    struct err_msg m = {{0}};
    CHECK(bench_target_parse_url(&o->target, "http://127.0.0.1:8080", &m) == 0);
    const char *key = getenv("INFERD_API_KEY"), *model = "default";
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
    int shape = -1, arrival = -1;     /* -1: not given */
    double slo_ms[4] = {0, 0, 0, 0};  /* ttft, tpot, itl p99, e2e */
    const double hi = 1e9, lo = 1e-9; /* every rate, factor, time and price */
    const int64_t big = 10000000;     /* every count */
    const struct cmd_opt opts[] = {
        CMD_OPT_HEADING("target:"),
        CMD_OPT_CALL("url", 0, "URL", "server (default http://127.0.0.1:8080)", set_url,
                     &o->target),
        CMD_OPT_STR("model", 0, "NAME", "model field (default 'default')", &model),
        CMD_OPT_STR("api-key", 0, "KEY", "bearer token (default: $INFERD_API_KEY)", &key),
        CMD_OPT_FLAG("text", 0, "send text prompts instead of token ids", &o->target.text),
        CMD_OPT_CALL0("chat", 0, "use /v1/chat/completions (text)", set_chat, &o->target),
        CMD_OPT_SET("no-ignore-eos", 0, "do not ask the server to ignore end-of-sequence",
                    &o->target.ignore_eos, false),
        CMD_OPT_FLAG("answer-words", 0,
                     "bias answers to the text-mode words (logit_bias from the\n"
                     "server's /tokenize): answers re-tokenize to the tokens\n"
                     "generated, as a trained model's do (random weights)",
                     &o->answer_words),
        CMD_OPT_FLOAT("timeout", 0, "S", "per-request inactivity timeout (default 300)",
                      &o->target.timeout_s, 1, 86400),
        CMD_OPT_HEADING("workload (one of):"),
        CMD_OPT_CALL("trace", 0, "FMT:PATH",
                     "replay a trace, FMT = mooncake | azure | agentic (repeatable)", set_trace, o),
        CMD_OPT_ENUM("trace-timing", 0, "MODE",
                     "agentic: dependent (after previous + think time, default)\n"
                     "or absolute (recorded timestamps)",
                     &o->sessions_timed, trace_timings),
        CMD_OPT_FLOAT("bucket", 0, "S", "timestamp resolution to spread over (default per format)",
                      &o->bucket_s, 0, 3600),
        CMD_OPT_ENUM("synthetic", 0, "SHAPE", "plain | prefix | multiturn | agentic", &shape,
                     shapes),
        CMD_OPT_INT("requests", 0, "N", "plain/prefix: requests (default 100)",
                    &o->synth.n_requests, 1, big),
        CMD_OPT_CALL("input", 0, "DIST", "input tokens per request or turn (default fixed:512)",
                     set_dist, &o->synth.len_in),
        CMD_OPT_CALL("output", 0, "DIST", "output tokens (default fixed:128)", set_dist,
                     &o->synth.len_out),
        CMD_OPT_INT("groups", 0, "N", "prefix: distinct system prompts (default 4)",
                    &o->synth.n_groups, 1, big),
        CMD_OPT_INT("prefix-tokens", 0, "N", "prefix: system prompt length (default 1024)",
                    &o->synth.prefix_tokens, 1, big),
        CMD_OPT_INT("users-per-group", 0, "N", "prefix: users per system prompt (default 8)",
                    &o->synth.users_per_group, 1, big),
        CMD_OPT_INT("sessions", 0, "N", "multiturn / agentic: sessions (default 8)",
                    &o->synth.n_sessions, 1, big),
        CMD_OPT_INT("turns", 0, "N", "multiturn / agentic: turns per session (default 4)",
                    &o->synth.n_turns, 1, big),
        CMD_OPT_CALL("think", 0, "DIST", "multiturn / agentic: think time in ms (default 1000)",
                     set_dist, &o->synth.think),
        CMD_OPT_INT("block-tokens", 0, "N", "synthetic block size (default 16)", &o->block_tokens,
                    1, big),
        CMD_OPT_INT("seed", 0, "N", "content and arrival seed (default 0)", &o->seed, 0,
                    (int64_t)1 << 62),
        CMD_OPT_CALL("vocab", 0, "LO:HI", "token ids drawn from [LO, HI) (default 1000:30000)",
                     set_vocab, o),
        CMD_OPT_INT("max-requests", 0, "N", "use only the first N requests", &o->max_requests, 1,
                    big),
        CMD_OPT_HEADING("arrivals:"),
        CMD_OPT_ENUM("arrival", 0, "KIND",
                     "trace | poisson | gamma | closed (default: trace for traces,\n"
                     "poisson for synthetic with --rate, else closed)",
                     &arrival, arrival_kinds),
        CMD_OPT_FLOAT("rate", 0, "R", "requests (sessions) per second", &o->arrivals.rate, lo, hi),
        CMD_OPT_FLOAT("burstiness", 0, "B", "gamma shape (1 = Poisson, < 1 burstier)",
                      &o->arrivals.burstiness, lo, hi),
        CMD_OPT_FLOAT("time-scale", 0, "F", "trace replay speed factor (2 = twice as fast)",
                      &o->arrivals.time_scale, lo, hi),
        CMD_OPT_INT("concurrency", 0, "N", "closed loop with N in flight (default 16)",
                    &o->concurrency, 1, big),
        CMD_OPT_INT("max-concurrency", 0, "N",
                    "cap for open-loop arrivals (client queue wait recorded)", &o->max_concurrency,
                    0, big),
        CMD_OPT_HEADING("SLOs (milliseconds):"),
        CMD_OPT_FLOAT("slo-ttft", 0, "MS", "time to first token", &slo_ms[0], lo, hi),
        CMD_OPT_FLOAT("slo-tpot", 0, "MS", "time per output token", &slo_ms[1], lo, hi),
        CMD_OPT_FLOAT("slo-itl-p99", 0, "MS", "the request's p99 inter-token latency", &slo_ms[2],
                      lo, hi),
        CMD_OPT_FLOAT("slo-e2e", 0, "MS", "end to end", &slo_ms[3], lo, hi),
        CMD_OPT_HEADING("server counters:"),
        CMD_OPT_STR("metrics-path", 0, "P",
                    "Prometheus path scraped before/after (default /metrics;\n"
                    "'none' to skip)",
                    &o->metrics_path),
        CMD_OPT_HEADING("quality:"),
        CMD_OPT_INT("probes", 0, "N", "greedy probe prompts at start and end (default 0)",
                    &o->n_probes, 0, big),
        CMD_OPT_INT("probe-input", 0, "N", "probe prompt length (default 32)", &o->probe_input, 1,
                    big),
        CMD_OPT_INT("probe-output", 0, "N", "probe output length (default 32)", &o->probe_output, 1,
                    big),
        CMD_OPT_STR("reference", 0, "FILE", "compare probes to a saved reference", &o->reference),
        CMD_OPT_STR("save-reference", 0, "FILE", "save the start probes as the reference",
                    &o->save_reference),
        CMD_OPT_HEADING("cost (prices in USD per million tokens):"),
        CMD_OPT_FLOAT("machine-usd-h", 0, "X", "machine cost per hour", &o->prices.machine_usd_h,
                      lo, hi),
        CMD_OPT_INT("machines", 0, "N", "machines behind the endpoint (default 1)",
                    &o->prices.machines, 1, big),
        CMD_OPT_FLOAT("price-in", 0, "X", "uncached input tokens", &o->prices.in_usd_m, lo, hi),
        CMD_OPT_FLOAT("price-cached", 0, "X", "cached input tokens", &o->prices.cached_usd_m, lo,
                      hi),
        CMD_OPT_FLOAT("price-out", 0, "X", "output tokens", &o->prices.out_usd_m, lo, hi),
        CMD_OPT_HEADING("sweeps:"),
        CMD_OPT_CALL("sweep-rate", 0, "R1,R2,..", "one run per rate", set_sweep_rate, o),
        CMD_OPT_CALL("sweep-concurrency", 0, "N1,N2,..", "one closed-loop run per concurrency",
                     set_sweep_conc, o),
        CMD_OPT_FLOAT("find-max-rate", 0, "PCT",
                      "bisection for the highest rate with PCT% meeting the SLOs", &o->find_pct, lo,
                      100),
        CMD_OPT_FLOAT("search-lo", 0, "R", "its bracket's low end (default 0.5)", &o->search_lo, lo,
                      hi),
        CMD_OPT_FLOAT("search-hi", 0, "R", "its bracket's high end (default 64)", &o->search_hi, lo,
                      hi),
        CMD_OPT_INT("search-steps", 0, "N", "its bisection steps (default 7)", &o->search_steps, 1,
                    big),
        CMD_OPT_FLOAT("user-speed", 0, "S",
                      "throughput at S output tok/s per user (from sweep points)", &o->user_speed,
                      lo, hi),
        CMD_OPT_HEADING("output:"),
        CMD_OPT_STR("out", 0, "DIR",
                    "summary.json, records.jsonl, cdf.svg (+ sweep.json, pareto.svg)", &o->out_dir),
        CMD_OPT_FLAG("json", 0, "print the summary JSON instead of the table", &o->json),
        CMD_OPT_SET("no-progress", 0, "no progress line", &o->progress, false),
        CMD_OPT_HEADING("other:"),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "bench",
        .synopsis = "[options]",
        .epilog = "DIST = N | fixed:N | uniform:LO:HI | normal:MEAN:SD | lognormal:MEAN:SD\n"
                  "Method and output fields: docs/bench.md.\n",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return r == CMD_OPT_HELP ? -1 : CMD_EXIT_USAGE;
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    snprintf(o->target.model, sizeof(o->target.model), "%s", model);
    if (key) snprintf(o->target.api_key, sizeof(o->target.api_key), "%s", key);
    if (o->metrics_path && !strcmp(o->metrics_path, "none")) o->metrics_path = NULL;
    if (shape >= 0) o->synth.shape = (enum bench_shape)shape;
    if (arrival >= 0) o->arrivals.kind = (enum bench_arrival)arrival;
    o->arrival_given = arrival >= 0;
    o->slo.ttft_s = slo_ms[0] * 1e-3;
    o->slo.tpot_s = slo_ms[1] * 1e-3;
    o->slo.itl_p99_s = slo_ms[2] * 1e-3;
    o->slo.e2e_s = slo_ms[3] * 1e-3;
    const bool synthetic = shape >= 0;
    if (o->n_traces && synthetic)
        return cmd_usage_error(&spec, "--trace and --synthetic exclude each other");
    if (!o->arrival_given) {
        if (o->n_traces)
            o->arrivals.kind = BENCH_ARRIVAL_TRACE;
        else if (o->arrivals.rate > 0)
            o->arrivals.kind = BENCH_ARRIVAL_POISSON;
        else
            o->arrivals.kind = BENCH_ARRIVAL_CLOSED;
    }
    if (o->arrivals.kind == BENCH_ARRIVAL_TRACE && !o->n_traces)
        return cmd_usage_error(&spec, "--arrival trace needs --trace");
    if ((o->arrivals.kind == BENCH_ARRIVAL_POISSON || o->arrivals.kind == BENCH_ARRIVAL_GAMMA) &&
        !(o->arrivals.rate > 0) && !o->n_sweep_rate && !o->find_pct)
        return cmd_usage_error(&spec, "poisson / gamma arrivals need --rate");
    if (o->find_pct &&
        !(o->slo.ttft_s > 0 || o->slo.tpot_s > 0 || o->slo.itl_p99_s > 0 || o->slo.e2e_s > 0))
        return cmd_usage_error(&spec, "--find-max-rate needs at least one --slo-* target");
    if (o->find_pct && !(o->search_hi > o->search_lo))
        return cmd_usage_error(&spec, "--search-hi must exceed --search-lo");
    if ((o->n_sweep_rate ? 1 : 0) + (o->n_sweep_conc ? 1 : 0) + (o->find_pct ? 1 : 0) > 1)
        return cmd_usage_error(&spec,
                               "choose one of --sweep-rate, --sweep-concurrency, --find-max-rate");
    if (o->reference && !o->n_probes) return cmd_usage_error(&spec, "--reference needs --probes N");
    if (o->user_speed > 0 && !o->n_sweep_rate && !o->n_sweep_conc)
        return cmd_usage_error(&spec, "--user-speed needs a sweep");
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
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("host", 0, "A", "listen address", &o.host),
        CMD_OPT_INT("port", 0, "P", "listen port (0: any free port)", &o.port, 0, 65535),
        CMD_OPT_STR("port-file", 0, "F", "write the bound port there", &o.port_file),
        CMD_OPT_FLOAT("ttft-ms", 0, "X", "time to the first token", &o.ttft_ms, 0, 1e7),
        CMD_OPT_FLOAT("itl-ms", 0, "X", "time between tokens", &o.itl_ms, 0, 1e7),
        CMD_OPT_FLOAT("prefill-us", 0, "X", "extra time per uncached prompt token", &o.prefill_us,
                      0, 1e7),
        CMD_OPT_INT("block-tokens", 0, "N", "prefix-cache block size", &o.block_tokens, 0, 1000000),
        CMD_OPT_INT("spec-k", 0, "K", "draft tokens per speculative step", &o.spec_k, 0, 1000000),
        CMD_OPT_INT("spec-accept", 0, "A", "draft tokens accepted per step", &o.spec_accept, 0,
                    1000000),
        CMD_OPT_FLAG("spec-metrics-only", 0, "report speculation in /metrics only",
                     &o.spec_metrics_only),
        CMD_OPT_INT("fail-every", 0, "N", "answer every Nth request with 503", &o.fail_every, 0,
                    1000000),
        CMD_OPT_INT("perturb-from", 0, "J", "change outputs from token J on (-1: never)",
                    &o.perturb_from, -1, 1000000),
        CMD_OPT_INT("backlog", 0, "N", "listen backlog", &o.backlog, 0, 1000000),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "bench-mock",
        .synopsis = "[options]",
        .about = "The scripted server the bench tests run against (docs/bench.md).",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    struct err_msg m = {{0}};
    if (bench_mock_run(&o, &m)) {
        fprintf(stderr, "inferd: bench-mock: %s\n", m.text);
        return CMD_EXIT_FAIL;
    }
    return CMD_EXIT_OK;
}
