/*
 * sched.h - the step scheduler: which requests run, what each contributes to
 * the next forward step, admission with prefix hits, chunked prefill next to
 * decodes, and preemption when KV blocks run out. The engine (engine.c) runs
 * it around its forward pass and sampling; the cluster simulator (sim/) runs
 * the same code around a cost model, so what a simulated worker schedules is
 * what a real one would.
 *
 * A step:
 *
 *   sched_build     retire finished requests, rank the rest (priority desc,
 *                   then arrival), then fill the batch under the token
 *                   budget:
 *                     1. decode: one token for every running request whose
 *                        prompt is done;
 *                     2. prefill: chunks of running requests still in their
 *                        prompt (or recomputing after preemption), and
 *                        admissions of waiting ones while fewer than max_seqs
 *                        run, each chunk as large as the remaining budget
 *                        allows. Next to decodes the budget shrinks to what
 *                        keeps the step within prefill_step_ratio decode-only
 *                        steps, by the measured step costs (stepcost.h,
 *                        Sarathi-Serve's stall-free batching), except for a
 *                        prompt that outranks every decode.
 *                   The result is one chunk per request in the batch:
 *                   tokens [from, from + n) of its sequence, in batch order.
 *   (caller)        runs the chunks: the engine's forward pass and sampling,
 *                   or the simulator's cost model
 *   sched_advance   the chunks' positions are computed; newly completed
 *                   blocks are committed to the prefix index
 *   (caller)        appends each sampled token (sched_req.n_tokens++) and
 *                   ends requests with sched_finish
 *   sched_observe   the step's cost feeds the chunk limit
 *
 * Admission looks the request's full blocks up in the prefix cache
 * (kv/prefix.h) and attaches the hits; prefill starts after them. The block
 * holding the last known token is never attached: at least one token is
 * computed, to produce logits. Block ids come from the caller (ops.block_ids):
 * the engine hashes token contents, the simulator names blocks from a trace.
 *
 * KV blocks are reserved while the batch is built (a free block, else the
 * prefix cache's least recently used one is evicted). A request that cannot
 * get a block preempts the lowest-ranked running request outside the batch
 * (lowest priority, newest among equals) if that one ranks below it - a
 * decode token may preempt its own request, last. The victim's blocks are
 * released (its full blocks stay cached), it goes back to waiting, and on
 * readmission it attaches what is still cached and recomputes the rest.
 *
 *   add --> waiting --admit (prefix hit?)--> running --> finished --> retired
 *              ^                               |                  (next build)
 *              +----------preempted------------+
 *
 * Ranking uses an insertion sort: requests are kept in arrival order and most
 * share a priority, so the order is nearly sorted and a step costs O(n).
 *
 * Memory: the caller allocates each request (sched_req is embedded first in
 * its own request struct) and frees it in ops.retire; the scheduler owns its
 * arrays. Thread safety: one owner, like the engine.
 */
#ifndef INFERD_ENGINE_SCHED_H
#define INFERD_ENGINE_SCHED_H

#include "engine/stepcost.h"
#include "kv/pool.h"
#include "kv/prefix.h"

#include <stdbool.h>
#include <stdint.h>

enum sched_state { SCHED_WAITING, SCHED_RUNNING, SCHED_FINISHED };

struct sched_req {
    uint64_t id;             /* arrival order (ties in rank go to the lower id) */
    enum sched_state state;  /* lifecycle */
    int priority;            /* higher first */
    int n_prompt;            /* prompt length */
    int n_tokens;            /* prompt + generated */
    int n_computed;          /* positions whose K/V are in the cache */
    int max_tokens;          /* generation limit */
    bool admitted;           /* was admitted at least once */
    bool paused;             /* not scheduled (its KV stays) */
    bool held;               /* waits on a KV load, not admitted */
    double t_submit;         /* clock at submit (the caller's clock) */
    double queue_s;          /* submit -> first admission, seconds */
    int n_cached_prompt;     /* prompt tokens attached at first admission */
    struct kv_seq kv;        /* block table */
    struct kv_block_id *ids; /* ids of full blocks, first n_ids known (ops.block_ids fills) */
    int n_ids;               /* ids known */
    int n_committed;         /* leading blocks entered into (or taken from) the index */
    int batch_seq;           /* index in the current batch (its chunk), or -1 */
    int rank;                /* position in this step's priority order */
    uint64_t preempted_in;   /* step serial of the last preemption (0: never) */
};

/* One request's part of a step: positions [from, from + n) of its sequence;
 * the last one produces logits when want. */
struct sched_chunk {
    struct sched_req *q; /* whose */
    int from, n;         /* positions */
    bool want;           /* from + n == q->n_tokens: the step samples q's next token */
};

struct sched_config {
    int token_budget;         /* tokens per step */
    int max_seqs;             /* running requests at most */
    int block_tokens;         /* positions per KV block */
    float prefill_step_ratio; /* > 1: chunk limit next to decodes; <= 0: off */
};

struct sched_ops {
    /* Makes q->ids hold the ids of its first n full blocks (n <= n_tokens /
     * block_tokens); called only when q->n_ids < n. */
    void (*block_ids)(void *ctx, struct sched_req *q, int n);
    /* Frees a finished request (its blocks are released already). */
    void (*retire)(void *ctx, struct sched_req *q);
    void *ctx;
};

/* Counters, all monotonic. */
struct sched_stats {
    uint64_t n_prefix_lookups;      /* admissions that looked the prefix cache up */
    uint64_t n_prefix_query_tokens; /* their known tokens */
    uint64_t n_prefix_hits;         /* lookups that attached a block */
    uint64_t n_prefix_hit_blocks;   /* blocks attached */
    uint64_t n_prefix_hit_tokens;   /* positions attached */
    uint64_t n_preempted;           /* preemptions */
    uint64_t n_prompt_tokens;       /* prompt positions computed (recomputation included) */
    uint64_t n_steps;               /* busy steps (sched_advance calls) */
};

struct sched {
    struct sched_config cfg;    /* as given */
    struct kv_pool *kv;         /* the blocks (not owned) */
    struct kv_prefix *prefix;   /* content index over kv, or NULL (no prefix cache) */
    struct sched_ops ops;       /* the caller's part */
    struct sched_req **reqs;    /* (n_reqs) live requests, arrival order */
    struct sched_req **order;   /* (n_reqs) this step's priority order */
    int n_reqs, cap_reqs;       /* count, allocated (both arrays) */
    int n_running;              /* requests in SCHED_RUNNING */
    uint64_t step_serial;       /* sched_build calls, idle ones included */
    struct sched_chunk *chunks; /* (max_seqs) this step's batch, first n_chunks */
    const struct kv_seq **seqs; /* (max_seqs) block table of each chunk's request */
    int n_chunks;               /* requests in the batch */
    int n_batch;                /* tokens in the batch */
    int n_decode;               /* of which decode tokens */
    int limit;                  /* this step's token limit next to decodes */
    struct stepcost cost;       /* measured step costs (sched_observe) */
    struct sched_stats stats;   /* counters */
};

void sched_init(struct sched *s, const struct sched_config *cfg, struct kv_pool *kv,
                struct kv_prefix *prefix, const struct sched_ops *ops);
/* Retires every request (ops.retire) and frees the arrays. */
void sched_release(struct sched *s);

/* Sets q up as a new waiting request of n_tokens known tokens, the first
 * n_prompt of them prompt; ids (room for the request's full blocks) is the
 * caller's array, freed by the caller. */
void sched_req_init(struct sched_req *q, uint64_t id, int n_prompt, int n_tokens, int max_tokens,
                    int priority, double t_submit, struct kv_block_id *ids);
/* Adds q (sched_req_init'ed) at the end of the arrival order. */
void sched_add(struct sched *s, struct sched_req *q);
/* Live requests in state st; waiting ones exclude held ones when
 * !with_held. */
int sched_count(const struct sched *s, enum sched_state st);
/* The live request with this id, or NULL. */
struct sched_req *sched_find(const struct sched *s, uint64_t id);

/* Builds the next step's batch into chunks; now is the caller's clock (queue
 * times). Returns the batch's tokens (0: nothing to run). */
int sched_build(struct sched *s, double now);
/* After the step ran: advances every chunk's computed positions and commits
 * completed blocks. */
void sched_advance(struct sched *s);
/* Ends q (running or waiting): its blocks are released now; it is retired at
 * the next sched_build. */
void sched_finish(struct sched *s, struct sched_req *q);
/* Records the step just run (the batch of the last sched_build) took
 * seconds. */
void sched_observe(struct sched *s, double seconds);

#endif
