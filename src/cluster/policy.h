/*
 * policy.h - where a request goes: pure functions over a snapshot of the
 * cluster (no I/O, no clock, no globals), so the gateway (remote.c) and a
 * simulator can call the same ones, and two gateways given the same
 * snapshot make the same decision.
 *
 * Policies (pol_kind):
 *   round-robin    the seq-th worker of the candidates, in index order
 *   least-loaded   fewest requests (running + waiting)
 *   cache-aware    most overlap_weight x cached blocks - requests (the
 *                  common open-source routers' cost)
 *   balanced       the shipped one. For a worker that computes the prompt:
 *                  the least of its backlog (queued prompt tokens) plus
 *                  (1 + weight) x this prompt's uncached tokens, both priced
 *                  by the worker's measured step costs: the prompt's own
 *                  finish, plus the capacity its compute takes from the
 *                  requests behind it - weight = work_weight + the prompts
 *                  like this one queued at the least busy worker (backlog /
 *                  the whole prompt's cost), the requests a recomputation
 *                  delays. That trades cache overlap against load by what
 *                  each costs, and more towards the cache as queues grow (a
 *                  greedy earliest finish sends a prompt away from its cache
 *                  whenever that worker is a little busier, and recomputes
 *                  it). Among the
 *                  workers within bucket_slack_ms of the earliest, the one
 *                  that computed least of this prompt's context-length bucket
 *                  over the caller's window (bucket_ms): each length class
 *                  spreads evenly, so the members of a synchronised group
 *                  step with similar work. For a worker that only decodes:
 *                  among those with KV room for the whole request (beside
 *                  what it holds and what its queued prompts will take), the
 *                  smallest decode step after adding it - fixed cost, one
 *                  token per request running or waiting, and the context the
 *                  step reads (the KV held and queued) - so request count and
 *                  KV length are weighed by what each costs a step.
 *
 * Admission (pol_estimate, pol_admit): the TTFT and TPOT a placement would
 * give, from the same costs - the prefill worker's backlog plus this prompt,
 * then a decode step of the decode worker with this request added (times
 * prefill_step_ratio while that worker also prefills, the bound its
 * scheduler keeps) - against the request's targets. A request that would
 * miss them is refused now, with the time after which the backlog that made
 * it miss has drained (Mooncake's early rejection), rather than queued into
 * a miss.
 *
 * Ties go to the lowest index. A worker is a candidate when up and of a role
 * in the mask. Cached blocks come from the caller (a prefix index); 0 when
 * it knows none, which makes cache-aware least-loaded.
 */
#ifndef INFERD_CLUSTER_POLICY_H
#define INFERD_CLUSTER_POLICY_H

#include <stdbool.h>
#include <stdint.h>

enum pol_kind { POL_ROUND_ROBIN, POL_LEAST_LOADED, POL_CACHE_AWARE, POL_BALANCED };

#define POL_MAX_BUCKETS 8 /* context-length buckets at most */

/* One worker as the policies see it. */
struct pol_worker {
    bool up;                           /* in rotation */
    int role;                          /* enum cl_role */
    int running, waiting;              /* its requests: last STATS + what was sent since */
    int64_t queued_tokens;             /* prompt tokens it still has to compute */
    int kv_used, kv_total;             /* KV blocks referenced / in its pool */
    double ms_fixed, ms_per_token;     /* its measured step cost a + b x tokens (0: not yet) */
    double ms_per_ctx_token;           /* decode step cost per context token read (0: default) */
    double ms_per_prompt_token;        /* measured prompt compute per token, every cost of the steps
                                          that computed it included (0: not yet; then the line) */
    int cached_blocks;                 /* this request's leading blocks it holds (0: unknown) */
    double bucket_ms[POL_MAX_BUCKETS]; /* prompt compute of each length bucket routed to it
                                          over the caller's window (balanced's spread) */
};

struct pol_request {
    int n_prompt;   /* tokens */
    int max_tokens; /* output bound */
    uint64_t seq;   /* the caller's count of requests so far (round-robin) */
};

struct pol_config {
    enum pol_kind kind;
    int block_tokens;             /* tokens per KV block */
    int chunk_tokens;             /* prefill tokens per step (the engine's token budget) */
    double overlap_weight;        /* cache-aware: a cached block against requests of load */
    double dflt_ms_fixed;         /* the step cost of a worker not measured yet */
    double dflt_ms_per_token;     /* likewise per token */
    double dflt_ms_per_ctx_token; /* likewise per context token a decode step reads */
    int n_buckets;                /* context-length buckets, 1..POL_MAX_BUCKETS */
    int bucket_bounds[POL_MAX_BUCKETS - 1]; /* (n_buckets - 1) ascending: bucket k holds prompts
                                               of at most bucket_bounds[k] tokens */
    double bucket_slack_ms;    /* prefill finishes this close count as equal (0: the fixed cost) */
    double prefill_step_ratio; /* decode steps next to prefill cost at most this factor */
    double work_weight;        /* balanced prefill: the compute a placement adds counts 1 + this
                                  (its own wait) + this (the capacity it takes from others) */
};

/* What a placement would give a request. */
struct pol_estimate {
    double ttft_ms; /* until its first token */
    double tpot_ms; /* per output token after it */
};

/* A request's targets (0: none). */
struct pol_slo {
    double ttft_ms;
    double tpot_ms;
};

/* balanced, 16-token blocks, 512-token chunks, overlap weight 1, a default
 * cost of 20 ms + 1 ms per token + 1 us per context token, buckets at 1k, 4k
 * and 16k tokens, prefill_step_ratio 2, work_weight 3. */
void pol_config_default(struct pol_config *c);
/* "round-robin", "least-loaded", "cache-aware", "balanced" -> *kind;
 * false for another name. */
bool pol_kind_parse(const char *name, enum pol_kind *kind);
const char *pol_kind_name(enum pol_kind kind);

/* Milliseconds w needs for q's uncached prompt tokens / its own backlog. */
double pol_prefill_ms(const struct pol_config *c, const struct pol_worker *w,
                      const struct pol_request *q);
double pol_backlog_ms(const struct pol_config *c, const struct pol_worker *w);

/* The worker (index into w[0..n)) that computes q's prompt, among the
 * candidates whose role bit (1 << role) is in roles; -1 when none. */
int pol_pick_prefill(const struct pol_config *c, const struct pol_worker *w, int n, unsigned roles,
                     const struct pol_request *q);
/* The worker that decodes q when another computed its prompt; -1 when
 * none. */
int pol_pick_decode(const struct pol_config *c, const struct pol_worker *w, int n, unsigned roles,
                    const struct pol_request *q);

/* Makes the cost figures of each role's workers that role's medians (over
 * the workers whose figures are sane: a line with a >= 0 and b > 0, a
 * prompt cost > 0), so that the noise of one worker's measurement does not
 * steer the policy: workers of one role run one model on one kind of
 * hardware. In place, O(n log n). */
void pol_pool_costs(struct pol_worker *w, int n);

/* q's context-length bucket, 0..n_buckets-1. */
int pol_bucket(const struct pol_config *c, int n_prompt);
/* The decode step of w with one more request of ctx_tokens context, ms. */
double pol_decode_step_ms(const struct pol_config *c, const struct pol_worker *w,
                          int64_t ctx_tokens);
/* The TTFT and TPOT of q computed by pre (NULL: by dec itself) and decoded
 * by dec. */
void pol_estimate(const struct pol_config *c, const struct pol_worker *pre,
                  const struct pol_worker *dec, const struct pol_request *q,
                  struct pol_estimate *out);
/* 0 when e meets slo; otherwise the seconds (>= 1) to wait before trying
 * again: the TTFT overshoot rounded up, or 1 for a TPOT miss. */
int pol_admit(const struct pol_slo *slo, const struct pol_estimate *e);
/* Checks targets against what one step costs at least (ms_fixed + one
 * token): false with *why set when no placement can meet them. */
bool pol_slo_feasible(const struct pol_slo *slo, double ms_fixed, double ms_per_token,
                      const char **why);

#endif
