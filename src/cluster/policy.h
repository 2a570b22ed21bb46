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
 *                  the earliest finish of this prefill, its backlog (queued
 *                  prompt tokens) plus this prompt's uncached tokens, both
 *                  priced by the worker's measured step costs, which trades
 *                  cache overlap against load by what each costs. For a
 *                  worker that only decodes: the least KV held after this
 *                  request among those with room for it, then fewer requests.
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

/* One worker as the policies see it. */
struct pol_worker {
    bool up;                       /* in rotation */
    int role;                      /* enum cl_role */
    int running, waiting;          /* its requests: last STATS + what was sent since */
    int64_t queued_tokens;         /* prompt tokens it still has to compute */
    int kv_used, kv_total;         /* KV blocks referenced / in its pool */
    double ms_fixed, ms_per_token; /* its measured step cost a + b x tokens (0: not yet) */
    int cached_blocks;             /* this request's leading blocks it holds (0: unknown) */
};

struct pol_request {
    int n_prompt;   /* tokens */
    int max_tokens; /* output bound */
    uint64_t seq;   /* the caller's count of requests so far (round-robin) */
};

struct pol_config {
    enum pol_kind kind;
    int block_tokens;         /* tokens per KV block */
    int chunk_tokens;         /* prefill tokens per step (the engine's token budget) */
    double overlap_weight;    /* cache-aware: a cached block against requests of load */
    double dflt_ms_fixed;     /* the step cost of a worker not measured yet */
    double dflt_ms_per_token; /* likewise per token */
};

/* balanced, 16-token blocks, 512-token chunks, overlap weight 1, and a
 * default cost of 20 ms + 1 ms per token. */
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

#endif
