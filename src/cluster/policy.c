/*
 * policy.c - routing policies (policy.h).
 */
#include "cluster/policy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {
    [POL_ROUND_ROBIN] = "round-robin",
    [POL_LEAST_LOADED] = "least-loaded",
    [POL_CACHE_AWARE] = "cache-aware",
    [POL_BALANCED] = "balanced",
};

void pol_config_default(struct pol_config *c)
{
    *c = (struct pol_config){.kind = POL_BALANCED,
                             .block_tokens = 16,
                             .chunk_tokens = 512,
                             .overlap_weight = 1.0,
                             .dflt_ms_fixed = 20.0,
                             .dflt_ms_per_token = 1.0,
                             .dflt_ms_per_ctx_token = 0.001,
                             .n_buckets = 4,
                             .bucket_bounds = {1024, 4096, 16384},
                             .prefill_step_ratio = 2.0,
                             .work_weight = 3.0};
}

bool pol_kind_parse(const char *name, enum pol_kind *kind)
{
    for (int k = 0; k < (int)(sizeof(names) / sizeof(names[0])); k++)
        if (!strcmp(name, names[k])) {
            *kind = (enum pol_kind)k;
            return true;
        }
    return false;
}

const char *pol_kind_name(enum pol_kind kind)
{
    return kind >= POL_ROUND_ROBIN && kind <= POL_BALANCED ? names[kind] : "?";
}

static bool candidate(const struct pol_worker *w, unsigned roles)
{
    return w->up && w->role >= 0 && w->role < 32 && (roles & (1u << w->role));
}

/* Compute of t prompt tokens on w: a step's fixed cost per chunk, the
 * per-token cost for each token (the worker's measured line, else the
 * default one). */
static double tokens_ms(const struct pol_config *c, const struct pol_worker *w, int64_t t)
{
    if (t <= 0) return 0;
    if (w->ms_per_prompt_token > 0) return (double)t * w->ms_per_prompt_token;
    bool measured = w->ms_per_token > 0;
    double a = measured ? w->ms_fixed : c->dflt_ms_fixed;
    double b = measured ? w->ms_per_token : c->dflt_ms_per_token;
    int64_t chunk = c->chunk_tokens > 0 ? c->chunk_tokens : 512;
    return (double)((t + chunk - 1) / chunk) * (a > 0 ? a : 0) + (double)t * b;
}

double pol_prefill_ms(const struct pol_config *c, const struct pol_worker *w,
                      const struct pol_request *q)
{
    /* admission attaches all but the block holding the last prompt token */
    int usable =
        q->n_prompt > 0 ? (q->n_prompt - 1) / (c->block_tokens > 0 ? c->block_tokens : 16) : 0;
    int cached = w->cached_blocks < usable ? w->cached_blocks : usable;
    return tokens_ms(c, w, (int64_t)q->n_prompt - (int64_t)cached * c->block_tokens);
}

double pol_backlog_ms(const struct pol_config *c, const struct pol_worker *w)
{
    return tokens_ms(c, w, w->queued_tokens);
}

static long load_of(const struct pol_worker *w)
{
    return (long)w->running + w->waiting;
}

/* The simple policies, shared by both picks. */
static int pick_simple(const struct pol_config *c, const struct pol_worker *w, int n,
                       unsigned roles, const struct pol_request *q)
{
    if (c->kind == POL_ROUND_ROBIN) {
        int count = 0;
        for (int i = 0; i < n; i++)
            count += candidate(&w[i], roles);
        if (!count) return -1;
        int k = (int)(q->seq % (uint64_t)count);
        for (int i = 0; i < n; i++)
            if (candidate(&w[i], roles) && k-- == 0) return i;
        return -1;
    }
    int best = -1;
    double best_score = 0;
    for (int i = 0; i < n; i++) {
        if (!candidate(&w[i], roles)) continue;
        /* lower is better */
        double score = c->kind == POL_CACHE_AWARE
                           ? (double)load_of(&w[i]) - c->overlap_weight * w[i].cached_blocks
                           : (double)load_of(&w[i]);
        if (best < 0 || score < best_score) best = i, best_score = score;
    }
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void pol_pool_costs(struct pol_worker *w, int n)
{
    if (n <= 0) return;
    double *a = malloc(sizeof(double) * 3 * (size_t)n), *b = a + n, *p = b + n;
    if (!a) return;    /* the measured figures stay as they are */
    unsigned done = 0; /* roles done */
    for (int first = 0; first < n; first++) {
        const int role = w[first].role;
        if (role < 0 || role >= 32 || (done & 1u << role)) continue;
        done |= 1u << role;
        int na = 0, np = 0;
        for (int i = first; i < n; i++) {
            if (w[i].role != role) continue;
            if (w[i].ms_fixed >= 0 && w[i].ms_per_token > 0) {
                a[na] = w[i].ms_fixed;
                b[na++] = w[i].ms_per_token;
            }
            if (w[i].ms_per_prompt_token > 0) p[np++] = w[i].ms_per_prompt_token;
        }
        double ma = median(a, na), mb = median(b, na), mp = median(p, np);
        for (int i = first; i < n; i++) {
            if (w[i].role != role) continue;
            w[i].ms_fixed = ma;
            w[i].ms_per_token = mb;
            w[i].ms_per_prompt_token = mp;
        }
    }
    free(a);
}

int pol_bucket(const struct pol_config *c, int n_prompt)
{
    int k = 0;
    int n = c->n_buckets < 1 ? 1 : c->n_buckets > POL_MAX_BUCKETS ? POL_MAX_BUCKETS : c->n_buckets;
    while (k < n - 1 && n_prompt > c->bucket_bounds[k])
        k++;
    return k;
}

int pol_pick_prefill(const struct pol_config *c, const struct pol_worker *w, int n, unsigned roles,
                     const struct pol_request *q)
{
    if (c->kind != POL_BALANCED) return pick_simple(c, w, n, roles, q);
    /* the weight of the compute a placement adds: work_weight, and as many
     * more as prompts like this one wait ahead at the least busy worker (the
     * requests a recomputation would delay) */
    double least = 0, full = 0;
    int any = 0;
    for (int i = 0; i < n; i++) {
        if (!candidate(&w[i], roles)) continue;
        double bl = pol_backlog_ms(c, &w[i]);
        if (!any++ || bl < least) least = bl, full = tokens_ms(c, &w[i], q->n_prompt);
    }
    if (!any) return -1;
    const double weight = c->work_weight + (full > 0 ? least / full : 0);
    /* the earliest finish first, then within the slack the least of this
     * bucket's recent compute */
    double earliest = 0;
    any = 0;
    for (int i = 0; i < n; i++) {
        if (!candidate(&w[i], roles)) continue;
        double ms = pol_backlog_ms(c, &w[i]) + (1 + weight) * pol_prefill_ms(c, &w[i], q);
        if (!any++ || ms < earliest) earliest = ms;
    }
    const int b = pol_bucket(c, q->n_prompt);
    int best = -1;
    double best_ms = 0, best_bucket = 0;
    long best_load = 0;
    for (int i = 0; i < n; i++) {
        if (!candidate(&w[i], roles)) continue;
        double ms = pol_backlog_ms(c, &w[i]) + (1 + weight) * pol_prefill_ms(c, &w[i], q);
        double slack = c->bucket_slack_ms > 0  ? c->bucket_slack_ms
                       : w[i].ms_per_token > 0 ? w[i].ms_fixed
                                               : c->dflt_ms_fixed;
        if (ms > earliest + (slack > 0 ? slack : 0)) continue; /* (a fitted line's a may be < 0) */
        double bucket = w[i].bucket_ms[b];
        long load = load_of(&w[i]);
        bool better =
            best < 0 || bucket < best_bucket ||
            (bucket == best_bucket && (ms < best_ms || (ms == best_ms && load < best_load)));
        if (better) best = i, best_ms = ms, best_bucket = bucket, best_load = load;
    }
    return best;
}

double pol_decode_step_ms(const struct pol_config *c, const struct pol_worker *w,
                          int64_t ctx_tokens)
{
    bool measured = w->ms_per_token > 0;
    double a = measured ? w->ms_fixed : c->dflt_ms_fixed;
    double b = measured ? w->ms_per_token : c->dflt_ms_per_token;
    double k = w->ms_per_ctx_token > 0 ? w->ms_per_ctx_token : c->dflt_ms_per_ctx_token;
    const int bt = c->block_tokens > 0 ? c->block_tokens : 16;
    /* the requests waiting will decode in the same steps, their prompts
     * (queued_tokens) becoming context read by each */
    double ctx = (double)w->kv_used * bt + (double)w->queued_tokens + (double)ctx_tokens;
    return (a > 0 ? a : 0) + b * (double)(w->running + w->waiting + 1) + k * ctx;
}

int pol_pick_decode(const struct pol_config *c, const struct pol_worker *w, int n, unsigned roles,
                    const struct pol_request *q)
{
    if (c->kind != POL_BALANCED) return pick_simple(c, w, n, roles, q);
    const int bt = c->block_tokens > 0 ? c->block_tokens : 16;
    const int need = (q->n_prompt + q->max_tokens + bt - 1) / bt;
    int best = -1;
    bool best_fits = false;
    double best_ms = 0, best_frac = 0;
    for (int i = 0; i < n; i++) {
        if (!candidate(&w[i], roles)) continue;
        /* a worker whose pool lacks room for the whole request is chosen
         * only when none has room (it would preempt); among those, the
         * least full */
        int64_t held = (int64_t)w[i].kv_used + (w[i].queued_tokens + bt - 1) / bt;
        bool fits = w[i].kv_total <= 0 || w[i].kv_total - held >= need;
        double frac = w[i].kv_total > 0 ? (double)(held + need) / w[i].kv_total : 0;
        double ms = pol_decode_step_ms(c, &w[i], q->n_prompt);
        bool better =
            best < 0 || (fits && !best_fits) ||
            (fits == best_fits && (fits ? ms < best_ms || (ms == best_ms && frac < best_frac)
                                        : frac < best_frac || (frac == best_frac && ms < best_ms)));
        if (better) best = i, best_fits = fits, best_frac = frac, best_ms = ms;
    }
    return best;
}

void pol_estimate(const struct pol_config *c, const struct pol_worker *pre,
                  const struct pol_worker *dec, const struct pol_request *q,
                  struct pol_estimate *out)
{
    const struct pol_worker *p = pre ? pre : dec;
    /* the prompt waits for the backlog, then computes; a remote prefill's
     * KV arrives as it is computed and the decode worker computes the tail
     * in a step of its own */
    out->ttft_ms = pol_backlog_ms(c, p) + pol_prefill_ms(c, p, q);
    double step = pol_decode_step_ms(c, dec, q->n_prompt);
    if (pre) out->ttft_ms += step;
    /* decodes next to prompts cost up to prefill_step_ratio steps (the
     * scheduler's bound, engine/stepcost.h) */
    bool mixed = dec->queued_tokens > 0 || (!pre && q->n_prompt > 0);
    double ratio = c->prefill_step_ratio > 1 ? c->prefill_step_ratio : 1;
    out->tpot_ms = mixed && dec->queued_tokens > 0 ? step * ratio : step;
}

int pol_admit(const struct pol_slo *slo, const struct pol_estimate *e)
{
    if (slo->ttft_ms > 0 && e->ttft_ms > slo->ttft_ms) {
        double s = ceil((e->ttft_ms - slo->ttft_ms) / 1000.0);
        return s < 1 ? 1 : s > 3600 ? 3600 : (int)s;
    }
    if (slo->tpot_ms > 0 && e->tpot_ms > slo->tpot_ms) return 1;
    return 0;
}

bool pol_slo_feasible(const struct pol_slo *slo, double ms_fixed, double ms_per_token,
                      const char **why)
{
    double one = ms_fixed + ms_per_token;
    if (slo->ttft_ms < 0 || slo->tpot_ms < 0) {
        *why = "a target is negative";
        return false;
    }
    if (slo->tpot_ms > 0 && slo->tpot_ms < one) {
        *why = "the TPOT target is below one decode step";
        return false;
    }
    if (slo->ttft_ms > 0 && slo->ttft_ms < one) {
        *why = "the TTFT target is below one step";
        return false;
    }
    return true;
}
