/*
 * sim.h - the tiers' eviction and admission policies (tier_index.h) run
 * over a request trace, for `inferd sim cache`.
 *
 * A trace is a list of requests, each a list of block ids in prompt order
 * (Mooncake's "hash_ids": equal ids, equal content; a prompt's blocks form
 * a chain, so a request reuses the leading blocks it shares with earlier
 * ones). Each request is replayed as a tier sees it:
 *
 *   1. lookup: its blocks in order while the index holds them (a prefix
 *      hit ends at the first miss: a later block is useless without it);
 *      each block found is a hit and is used (kv_tier_index_used)
 *   2. store: every block of the request, as the chain's write-through
 *      does after prefill: a held block is used again, a new one is
 *      offered to admission (kv_tier_index_admit) and, admitted, evicts
 *      victims (kv_tier_index_victim_for / _evict) until it fits, or is
 *      refused when the victim would be its own parent
 *
 * The hit ratio is hits / all blocks of all requests. Every block counts 1
 * against the capacity (a tier's blocks are all one frame size). The code
 * that decides is the tiers' own index, unchanged: a policy measured here
 * is the policy that runs.
 *
 * For comparison: the infinite cache (every block held forever: the
 * trace's ideal) and Belady's offline optimum at the same capacity (evict
 * the block used again farthest in the future; an upper bound for any
 * online policy, known to nothing that serves).
 *
 * Thread safety: none; the functions share nothing.
 */
#ifndef INFERD_KV_SIM_H
#define INFERD_KV_SIM_H

#include "base/err.h"
#include "kv/tier_index.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kv_sim_trace {
    uint64_t *ids;  /* every request's block ids, one after the other */
    size_t *start;  /* (n_req + 1) request i: ids[start[i] .. start[i+1]) */
    size_t n_req;   /* requests */
    size_t cap_req; /* allocated (start has cap_req + 1) */
    size_t n_ids;   /* entries of ids */
    size_t cap_ids; /* allocated */
};

/* Appends a request of n blocks. */
void kv_sim_trace_add(struct kv_sim_trace *t, const uint64_t *ids, size_t n);
void kv_sim_trace_release(struct kv_sim_trace *t);
/* Distinct block ids in t. */
uint64_t kv_sim_trace_distinct(const struct kv_sim_trace *t);

struct kv_sim_result {
    uint64_t blocks;     /* accesses: all blocks of all requests */
    uint64_t hits;       /* prefix hits */
    uint64_t capacity;   /* blocks held at most */
    uint64_t ghost_hits; /* index counters (tier_index.h) */
    uint64_t promotions;
    uint64_t demotions;
    uint64_t rejected;
};

/* Replays t through a tier index with policy p holding capacity blocks
 * (>= 1). prompt_order: as the chain runs the tiers (every put and touch
 * names its block's parent, the previous block of the prompt:
 * kv_tier_index_chain, kv_tier_index_victim_for); false: plain recency of
 * access, every block on its own. */
void kv_sim_policy(const struct kv_sim_trace *t, uint64_t capacity, const struct kv_tier_policy *p,
                   bool prompt_order, struct kv_sim_result *r);
/* The infinite cache. */
void kv_sim_ideal(const struct kv_sim_trace *t, struct kv_sim_result *r);
/* Belady's optimum at capacity blocks. */
void kv_sim_belady(const struct kv_sim_trace *t, uint64_t capacity, struct kv_sim_result *r);

#endif
