/*
 * cmd_sim_cluster.c - `inferd sim --trace FMT:PATH --prefill N --decode M
 * --policy P,...`: a trace replayed on a simulated cluster (sim/sim.h), once
 * per policy, the figures of each side by side; plots of the TTFT and TPOT
 * distributions with --svg.
 *
 * Scaling a trace to a cluster: --requests N repeats it (each copy in its
 * own block namespace) until it has N requests; --rate R compresses time so
 * requests arrive at R per second on average (--speed F: by a factor).
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "bench/bench_svg.h"
#include "bench/bench_trace.h"
#include "sim/sim.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_TRACES   64
#define MAX_POLICIES 4

struct opts {
    const char *trace[MAX_TRACES]; /* FMT:PATH */
    int n_trace;
    const char *policies; /* comma list */
    const char *cost;     /* table or bench-engine JSON */
    const char *svg_dir;
    long requests;
    double rate, speed;
    double slo_ttft, slo_tpot;
    int admit, json;
    long seed;
    struct sim_config c;
};

static int set_trace(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct opts *o = dst;
    if (o->n_trace == MAX_TRACES)
        return err_set(m, ERR_INVALID, "%s: at most %d traces", spelling, MAX_TRACES);
    o->trace[o->n_trace++] = val;
    return 0;
}

/* Loads FMT:PATH (agentic: a file or a directory of *.json) into w. */
static int load_one(struct bench_workload *w, const char *arg, int *file_no, long seed,
                    struct err_msg *m)
{
    const char *colon = strchr(arg, ':');
    char fmt[16] = {0};
    if (!colon || (size_t)(colon - arg) >= sizeof(fmt) || !colon[1])
        return err_set(m, ERR_INVALID, "--trace: expected FORMAT:PATH, got '%s'", arg);
    memcpy(fmt, arg, (size_t)(colon - arg));
    enum bench_trace_format f;
    if (!bench_trace_format_parse(fmt, &f))
        return err_set(m, ERR_INVALID, "--trace: unknown format '%s' (mooncake, azure, agentic)",
                       fmt);
    const char *path = colon + 1;
    struct stat sb;
    if (f == BENCH_TRACE_AGENTIC && !stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        struct dirent **names;
        int n = scandir(path, &names, NULL, alphasort);
        if (n < 0) return err_set(m, ERR_INVALID, "--trace: %s: cannot list the directory", path);
        int rc = 0, loaded = 0;
        for (int i = 0; i < n; i++) {
            size_t len = strlen(names[i]->d_name);
            if (!rc && len > 5 && !strcmp(names[i]->d_name + len - 5, ".json")) {
                char full[4096];
                snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name);
                struct bench_trace_opts to = {
                    .bucket_s = -1, .seed = (uint64_t)seed, .file_no = (*file_no)++};
                rc = bench_trace_load(w, f, full, &to, m);
                loaded++;
            }
            free(names[i]);
        }
        free(names);
        if (!rc && !loaded) return err_set(m, ERR_INVALID, "--trace: %s: no .json files", path);
        return rc;
    }
    struct bench_trace_opts to = {.bucket_s = -1, .seed = (uint64_t)seed, .file_no = (*file_no)++};
    return bench_trace_load(w, f, path, &to, m);
}

static int load(const struct opts *o, struct bench_workload *w, struct err_msg *m)
{
    int32_t B = 0;
    for (int k = 0; k < o->n_trace; k++) {
        char fmt[16] = {0};
        const char *colon = strchr(o->trace[k], ':');
        enum bench_trace_format f;
        if (colon && (size_t)(colon - o->trace[k]) < sizeof(fmt)) {
            memcpy(fmt, o->trace[k], (size_t)(colon - o->trace[k]));
            if (bench_trace_format_parse(fmt, &f) && bench_trace_block_tokens(f)) {
                int32_t b = bench_trace_block_tokens(f);
                if (B && b != B)
                    return err_set(m, ERR_INVALID,
                                   "--trace: formats with different block sizes (%d and %d)", B, b);
                B = b;
            }
        }
    }
    bench_workload_init(w, B ? B : o->c.block_tokens);
    w->seed = (uint64_t)o->seed;
    int file_no = 0;
    for (int k = 0; k < o->n_trace; k++) {
        int rc = load_one(w, o->trace[k], &file_no, o->seed, m);
        if (rc) return rc;
    }
    if (!w->n) return err_set(m, ERR_INVALID, "--trace: no requests");
    double span = 0;
    for (int32_t i = 0; i < w->n; i++)
        span = fmax(span, w->items[i].t_s);
    int32_t n0 = w->n;
    int copies = o->requests > n0 ? (int)((o->requests + n0 - 1) / n0) : 1;
    double speed = o->speed > 0 ? o->speed : 1;
    if (o->rate > 0) speed = span > 0 ? o->rate / (n0 / span) : 1;
    sim_workload_repeat(w, copies, speed);
    if (o->requests > 0 && w->n > o->requests) bench_workload_truncate(w, (int32_t)o->requests);
    return 0;
}

static void print_row(const char *policy, const struct sim_result *r)
{
    printf("%-13s %8llu %6llu %6llu %9.0f %9.0f %7.1f %7.1f %7.1f %8.2f %9.0f %8.2f %9.0f %5.1f%% "
           "%6.1f%% %6.1f%% %6.1f%% %7llu\n",
           policy, (unsigned long long)r->n_served, (unsigned long long)r->n_rejected,
           (unsigned long long)r->n_overloaded, r->ttft_ms[0], r->ttft_ms[2], r->tpot_ms[0],
           r->tpot_ms[2], r->itl_ms[2], r->throughput_rps, r->output_tps, r->goodput_rps,
           r->token_goodput_tps, 100 * r->hit_ratio,
           r->prefill.n_workers ? 100 * r->prefill.step_balance : 100.0,
           100 * r->decode.step_balance, 100 * r->decode.offline_ratio,
           (unsigned long long)r->n_preempted);
}

static void print_json(const char *policy, const struct sim_result *r, bool last)
{
    printf("{\"policy\":\"%s\",\"requests\":%llu,\"served\":%llu,\"rejected\":%llu,"
           "\"overloaded\":%llu,\"good\":%llu,\"span_s\":%.3f,"
           "\"ttft_ms\":{\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f},"
           "\"tpot_ms\":{\"mean\":%.3f,\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f},"
           "\"itl_ms\":{\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f},"
           "\"throughput_rps\":%.4f,\"output_tps\":%.2f,\"goodput_rps\":%.4f,"
           "\"token_goodput_tps\":%.2f,\"hit_ratio\":%.4f,\"ideal_hit\":%.4f,"
           "\"kv_moved_gb\":%.3f,\"preempted\":%llu,"
           "\"prefill\":{\"workers\":%d,\"step_balance\":%.4f,\"offline_ratio\":%.4f,"
           "\"busy_s\":%.3f},"
           "\"decode\":{\"workers\":%d,\"step_balance\":%.4f,\"offline_ratio\":%.4f,"
           "\"busy_s\":%.3f},"
           "\"events\":%llu,\"wall_s\":%.3f}%s\n",
           policy, (unsigned long long)r->n_requests, (unsigned long long)r->n_served,
           (unsigned long long)r->n_rejected, (unsigned long long)r->n_overloaded,
           (unsigned long long)r->n_good, r->span_s, r->ttft_mean_ms, r->ttft_ms[0], r->ttft_ms[1],
           r->ttft_ms[2], r->tpot_mean_ms, r->tpot_ms[0], r->tpot_ms[1], r->tpot_ms[2],
           r->itl_ms[0], r->itl_ms[1], r->itl_ms[2], r->throughput_rps, r->output_tps,
           r->goodput_rps, r->token_goodput_tps, r->hit_ratio, r->ideal_hit, r->kv_moved_gb,
           (unsigned long long)r->n_preempted, r->prefill.n_workers, r->prefill.step_balance,
           r->prefill.offline_ratio, r->prefill.busy_s, r->decode.n_workers, r->decode.step_balance,
           r->decode.offline_ratio, r->decode.busy_s, (unsigned long long)r->n_events, r->wall_s,
           last ? "" : ",");
}

/* CDF plots of TTFT and TPOT, a series per policy. */
static int write_svgs(const char *dir, char names[][24], const struct sim_result *r, int n,
                      struct err_msg *m)
{
    const char *what[2] = {"TTFT", "TPOT"};
    for (int k = 0; k < 2; k++) {
        struct bench_svg_series series[MAX_POLICIES];
        double *ys[MAX_POLICIES] = {0}, *xs[MAX_POLICIES] = {0};
        for (int p = 0; p < n; p++) {
            const double *v = k ? r[p].tpot_sorted : r[p].ttft_sorted;
            size_t cnt = k ? r[p].n_tpot : r[p].n_ttft;
            /* at most 500 points a curve */
            size_t pts = cnt < 500 ? cnt : 500;
            xs[p] = xmalloc(sizeof(double) * (pts + 1));
            ys[p] = xmalloc(sizeof(double) * (pts + 1));
            for (size_t i = 0; i < pts; i++) {
                size_t j = pts > 1 ? i * (cnt - 1) / (pts - 1) : 0;
                xs[p][i] = v[j];
                ys[p][i] = cnt ? (double)(j + 1) / (double)cnt : 0;
            }
            series[p] = (struct bench_svg_series){
                .name = names[p], .x = xs[p], .y = ys[p], .n = pts, .line = true};
        }
        char title[64], xl[32], path[4096];
        snprintf(title, sizeof(title), "%s distribution by policy (simulated)", what[k]);
        snprintf(xl, sizeof(xl), "%s (ms)", what[k]);
        struct bench_svg_plot plot = {.title = title,
                                      .xlabel = xl,
                                      .ylabel = "share of requests",
                                      .series = series,
                                      .n_series = n};
        snprintf(path, sizeof(path), "%s/sim_%s_cdf.svg", dir, k ? "tpot" : "ttft");
        int rc = bench_svg_write(&plot, path, m);
        for (int p = 0; p < n; p++) {
            free(xs[p]);
            free(ys[p]);
        }
        if (rc) return rc;
    }
    return 0;
}

int cmd_sim_cluster(int argc, char **argv)
{
    struct opts o = {.policies = "balanced", .seed = 1};
    sim_config_default(&o.c);
    const struct cmd_opt opts[] = {
        CMD_OPT_HEADING("workload:"),
        CMD_OPT_CALL("trace", 't', "FMT:PATH",
                     "a trace, FMT = mooncake | azure | agentic (a file, or\n"
                     "a directory of them); repeatable",
                     set_trace, &o),
        CMD_OPT_INT("requests", 'n', "N", "repeat the trace until it has N requests (then cut)",
                    &o.requests, 0, 100000000),
        CMD_OPT_FLOAT("rate", 0, "R", "compress time to R arrivals per second on average", &o.rate,
                      0, 1e9),
        CMD_OPT_FLOAT("speed", 0, "F", "compress time by F (2 = twice as fast)", &o.speed, 0, 1e9),
        CMD_OPT_INT("seed", 0, "S", "spreading draws of coarse timestamps (default 1)", &o.seed, 0,
                    INT32_MAX),
        CMD_OPT_HEADING("cluster:"),
        CMD_OPT_INT("prefill", 'p', "N",
                    "prefill workers (default 0: the decode workers are mixed)", &o.c.n_prefill, 0,
                    100000),
        CMD_OPT_INT("decode", 'd', "M", "decode (or mixed) workers (default 1)", &o.c.n_decode, 0,
                    100000),
        CMD_OPT_INT("dp-group", 0, "G",
                    "workers per synchronised data-parallel group (default 0:\n"
                    "each pool is one group; 1: every worker steps alone)",
                    &o.c.dp_group, 0, 100000),
        CMD_OPT_STR("cost", 'c', "FILE",
                    "step costs: a table, or inferd bench-engine --json output\n"
                    "(docs/sim.md; default: a 0.5B-class model on 2 cores)",
                    &o.cost),
        CMD_OPT_INT("block-tokens", 0, "N", "KV block size (default 16; divides the trace's)",
                    &o.c.block_tokens, 1, 4096),
        CMD_OPT_INT("local-prefill", 0, "N",
                    "disaggregated: prompts this short stay on the decode\n"
                    "worker (default 256)",
                    &o.c.local_prefill, 0, INT32_MAX),
        CMD_OPT_INT("max-waiting", 0, "N", "a worker's waiting requests at most (default 256)",
                    &o.c.max_waiting, 1, 1 << 20),
        CMD_OPT_HEADING("routing and targets:"),
        CMD_OPT_STR("policy", 0, "P,..",
                    "round-robin | least-loaded | cache-aware | balanced, or\n"
                    "several to compare (default balanced)",
                    &o.policies),
        CMD_OPT_FLOAT("slo-ttft", 0, "MS", "TTFT target, ms (goodput; admission)", &o.slo_ttft, 0,
                      1e9),
        CMD_OPT_FLOAT("slo-tpot", 0, "MS", "TPOT target, ms", &o.slo_tpot, 0, 1e9),
        CMD_OPT_FLAG("admit", 0, "refuse at arrival what would miss the targets (429)", &o.admit),
        CMD_OPT_FLOAT("work-weight", 0, "W",
                      "balanced: weight of the compute a placement takes from\n"
                      "the others, beside its own wait (default 3)",
                      &o.c.policy.work_weight, 0, 1000),
        CMD_OPT_HEADING("output:"),
        CMD_OPT_FLAG("json", 0, "a JSON array, one object per policy", &o.json),
        CMD_OPT_STR("svg", 0, "DIR", "write TTFT and TPOT CDF plots there", &o.svg_dir),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "sim",
        .synopsis = "--trace FMT:PATH [--prefill N] --decode M [--policy P,..] [options]\n"
                    "       inferd sim cache TRACE... (the KV tiers' eviction policies)",
        .opts = opts};
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (argi < argc) return cmd_usage_error(&spec, "unexpected argument '%s'", argv[argi]);
    if (!o.n_trace) return cmd_usage_error(&spec, "give a trace (--trace FMT:PATH)");
    if (o.rate > 0 && o.speed > 0)
        return cmd_usage_error(&spec, "--rate and --speed exclude each other");
    struct err_msg m = {{0}};
    if (o.cost && sim_cost_load(o.cost, &o.c.cost, &m)) {
        fprintf(stderr, "inferd sim: --cost %s\n", m.text);
        return CMD_EXIT_USAGE;
    }
    o.c.slo = (struct pol_slo){.ttft_ms = o.slo_ttft, .tpot_ms = o.slo_tpot};
    o.c.admit = o.admit;
    o.c.policy.block_tokens = o.c.block_tokens;
    o.c.policy.chunk_tokens = o.c.cost.token_budget;
    o.c.policy.dflt_ms_fixed = o.c.cost.fixed_ms;
    o.c.policy.dflt_ms_per_token = o.c.cost.prefill_ms_per_token;
    o.c.policy.dflt_ms_per_ctx_token = o.c.cost.ctx_ms_per_ktoken * 1e-3;
    /* the policies to compare */
    enum pol_kind kinds[MAX_POLICIES];
    char names[MAX_POLICIES][24];
    int n_pol = 0;
    for (const char *p = o.policies; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n_pol == MAX_POLICIES || len >= sizeof(names[0]))
            return cmd_usage_error(&spec, "--policy: at most %d names", MAX_POLICIES);
        memcpy(names[n_pol], p, len);
        names[n_pol][len] = 0;
        if (!pol_kind_parse(names[n_pol], &kinds[n_pol]))
            return cmd_usage_error(&spec,
                                   "--policy: unknown '%s' (round-robin, least-loaded, "
                                   "cache-aware, balanced)",
                                   names[n_pol]);
        n_pol++;
        p += len + (e != NULL);
    }
    if (!n_pol) return cmd_usage_error(&spec, "--policy: give a name");
    struct bench_workload w;
    if (load(&o, &w, &m)) {
        fprintf(stderr, "inferd sim: %s\n", m.text);
        bench_workload_release(&w);
        return CMD_EXIT_USAGE;
    }
    if (sim_config_check(&o.c, w.block_tokens, &m)) {
        fprintf(stderr, "inferd sim: %s\n", m.text);
        bench_workload_release(&w);
        return CMD_EXIT_USAGE;
    }
    struct sim_result res[MAX_POLICIES];
    memset(res, 0, sizeof(res));
    int rc = 0;
    if (!o.json) {
        printf("trace: %d requests; cluster: %d prefill + %d %s workers, %s groups; costs: %s "
               "(%s)\n",
               w.n, o.c.n_prefill, o.c.n_decode, o.c.n_prefill ? "decode" : "mixed",
               o.c.dp_group ? "fixed-size" : "pool-wide", o.c.cost.name, o.c.cost.source);
        if (o.slo_ttft > 0 || o.slo_tpot > 0)
            printf("targets: TTFT %.0f ms, TPOT %.0f ms%s\n", o.slo_ttft, o.slo_tpot,
                   o.admit ? ", early rejection on" : "");
        printf("%-13s %8s %6s %6s %9s %9s %7s %7s %7s %8s %9s %8s %9s %6s %7s %7s %7s %7s\n",
               "policy", "served", "429", "full", "TTFT p50", "TTFT p99", "TPOT50", "TPOT99",
               "ITL99", "req/s", "tok/s", "good r/s", "good t/s", "hit", "pf-bal", "dec-bal",
               "offline", "preempt");
    } else {
        printf("[\n");
    }
    const double ideal = bench_workload_ideal_hit(&w, NULL);
    for (int p = 0; p < n_pol; p++) {
        struct sim_config c = o.c;
        c.policy.kind = kinds[p];
        if ((rc = sim_run(&c, &w, &res[p], &m))) {
            fprintf(stderr, "inferd sim: %s\n", m.text);
            break;
        }
        res[p].ideal_hit = ideal;
        if (o.json)
            print_json(names[p], &res[p], p == n_pol - 1);
        else
            print_row(names[p], &res[p]);
        fflush(stdout);
    }
    if (o.json) printf("]\n");
    double wall = 0;
    for (int p = 0; p < n_pol; p++)
        wall += res[p].wall_s;
    if (!rc && !o.json)
        printf("(ms; hit: prompt tokens from cache where computed, ideal %.1f%%; pf-bal/dec-bal: "
               "step balance of the prefill/decode pool; offline: decode pool against an evenly "
               "spread run; %d policies in %.1f s)\n",
               100 * res[0].ideal_hit, n_pol, wall);
    if (!rc && o.svg_dir && write_svgs(o.svg_dir, names, res, n_pol, &m)) {
        fprintf(stderr, "inferd sim: --svg: %s\n", m.text);
        rc = 1;
    }
    for (int p = 0; p < n_pol; p++)
        sim_result_release(&res[p]);
    bench_workload_release(&w);
    return rc ? 1 : 0;
}
