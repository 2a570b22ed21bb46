/*
 * sched.c - see sched.h.
 */
#include "engine/sched.h"

#include "base/check.h"

#include <limits.h>
#include <string.h>

void sched_init(struct sched *s, const struct sched_config *cfg, struct kv_pool *kv,
                struct kv_prefix *prefix, const struct sched_ops *ops)
{
    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->kv = kv;
    s->prefix = prefix;
    s->ops = *ops;
    s->chunks = xmalloc(sizeof(*s->chunks) * (size_t)cfg->max_seqs);
    s->seqs = xmalloc(sizeof(*s->seqs) * (size_t)cfg->max_seqs);
    stepcost_init(&s->cost);
}

void sched_release(struct sched *s)
{
    for (int i = 0; i < s->n_reqs; i++) {
        kv_seq_release(s->kv, &s->reqs[i]->kv);
        s->ops.retire(s->ops.ctx, s->reqs[i]);
    }
    free(s->reqs);
    free(s->order);
    free(s->chunks);
    free(s->seqs);
    memset(s, 0, sizeof(*s));
}

void sched_req_init(struct sched_req *q, uint64_t id, int n_prompt, int n_tokens, int max_tokens,
                    int priority, double t_submit, struct kv_block_id *ids)
{
    memset(q, 0, sizeof(*q));
    q->id = id;
    q->state = SCHED_WAITING;
    q->priority = priority;
    q->n_prompt = n_prompt;
    q->n_tokens = n_tokens;
    q->max_tokens = max_tokens;
    q->t_submit = t_submit;
    q->ids = ids;
    q->batch_seq = -1;
}

void sched_add(struct sched *s, struct sched_req *q)
{
    if (s->n_reqs == s->cap_reqs) {
        s->cap_reqs = MAX(16, s->cap_reqs * 2);
        s->reqs = xrealloc(s->reqs, sizeof(*s->reqs) * (size_t)s->cap_reqs);
        s->order = xrealloc(s->order, sizeof(*s->order) * (size_t)s->cap_reqs);
    }
    s->reqs[s->n_reqs++] = q;
}

int sched_count(const struct sched *s, enum sched_state st)
{
    int n = 0;
    for (int i = 0; i < s->n_reqs; i++)
        n += s->reqs[i]->state == st;
    return n;
}

struct sched_req *sched_find(const struct sched *s, uint64_t id)
{
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i]->id == id) return s->reqs[i];
    return NULL;
}

/* Makes sure q->ids holds the ids of its first n full blocks. */
static void need_ids(struct sched *s, struct sched_req *q, int n)
{
    if (q->n_ids < n) s->ops.block_ids(s->ops.ctx, q, n);
    CHECK(q->n_ids >= n);
}

/* Enters q's newly completed blocks into the prefix index. */
static void commit_blocks(struct sched *s, struct sched_req *q)
{
    if (!s->prefix) return;
    int full = MIN(q->n_computed / s->cfg.block_tokens, q->kv.n_blocks);
    if (full <= q->n_committed) return;
    need_ids(s, q, full);
    kv_prefix_commit(s->prefix, &q->kv, q->ids, q->n_committed, full);
    q->n_committed = full;
}

/* Waiting -> running: attaches the cached blocks of q's known tokens, all
 * but the block holding the last one (it must be computed for logits).
 * Returns the blocks attached. */
static int admit(struct sched *s, struct sched_req *q)
{
    CHECK(q->state == SCHED_WAITING && q->kv.n_blocks == 0 && q->n_computed == 0);
    q->state = SCHED_RUNNING;
    s->n_running++;
    q->n_committed = 0;
    if (!s->prefix) return 0;
    const int n = (q->n_tokens - 1) / s->cfg.block_tokens;
    need_ids(s, q, n);
    int hit = kv_prefix_match(s->prefix, q->ids, n, &q->kv);
    q->n_computed = hit * s->cfg.block_tokens;
    q->n_committed = hit;
    return hit;
}

/* Admitted but not a block to be had: back to waiting, as if never tried. */
static void unadmit(struct sched *s, struct sched_req *q)
{
    CHECK(q->state == SCHED_RUNNING && q->kv.n_blocks == 0);
    q->state = SCHED_WAITING;
    q->n_computed = 0;
    s->n_running--;
}

/* Records an admission's lookup in the stats and the request's usage. */
static void count_admission(struct sched *s, struct sched_req *q, int hit, double now)
{
    const uint64_t bt = (uint64_t)s->cfg.block_tokens;
    if (s->prefix) {
        s->stats.n_prefix_lookups++;
        s->stats.n_prefix_query_tokens += (uint64_t)q->n_tokens;
        s->stats.n_prefix_hits += hit > 0;
        s->stats.n_prefix_hit_blocks += (uint64_t)hit;
        s->stats.n_prefix_hit_tokens += (uint64_t)hit * bt;
    }
    if (!q->admitted) {
        q->n_cached_prompt = (int)MIN((uint64_t)hit * bt, (uint64_t)q->n_prompt);
        q->queue_s = now - q->t_submit;
    }
    q->admitted = true;
}

/* Running -> waiting, dropping q's blocks (full ones stay cached). */
static void preempt(struct sched *s, struct sched_req *q)
{
    CHECK(q->state == SCHED_RUNNING && q->batch_seq < 0);
    commit_blocks(s, q);
    kv_seq_release(s->kv, &q->kv);
    q->n_computed = 0;
    q->n_committed = 0;
    q->state = SCHED_WAITING;
    q->preempted_in = s->step_serial;
    s->n_running--;
    s->stats.n_preempted++;
}

/* The preemption candidate: the lowest-ranked running request that holds
 * blocks and is not in the batch being built. NULL if none. */
static struct sched_req *pick_victim(struct sched *s)
{
    for (int i = s->n_reqs - 1; i >= 0; i--) {
        struct sched_req *q = s->order[i];
        if (q->state == SCHED_RUNNING && q->batch_seq < 0 && q->kv.n_blocks > 0) return q;
    }
    return NULL;
}

/* Adds positions [n_computed, n_computed + n) of q to the batch. Returns
 * false if KV blocks ran out. */
static bool batch_add(struct sched *s, struct sched_req *q, int n)
{
    int from = q->n_computed;
    if (kv_seq_reserve(s->kv, &q->kv, from + n)) return false;
    CHECK(q->batch_seq < 0 && s->n_chunks < s->cfg.max_seqs);
    q->batch_seq = s->n_chunks++;
    s->chunks[q->batch_seq] =
        (struct sched_chunk){.q = q, .from = from, .n = n, .want = from + n == q->n_tokens};
    s->seqs[q->batch_seq] = &q->kv;
    s->n_batch += n;
    return true;
}

/* batch_add, preempting lower-ranked requests while blocks are short. A
 * victim ranks below q or is q itself (then q is preempted and not added). */
static bool batch_add_preempting(struct sched *s, struct sched_req *q, int n)
{
    while (!batch_add(s, q, n)) {
        struct sched_req *victim = pick_victim(s);
        if (!victim || victim->rank < q->rank) return false;
        preempt(s, victim);
        if (victim == q) return false;
    }
    return true;
}

/* a before b: higher priority, then earlier arrival */
static bool ranks_before(const struct sched_req *a, const struct sched_req *b)
{
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->id < b->id;
}

/* Retires finished requests and ranks the rest into order. */
static void rank_requests(struct sched *s)
{
    int w = 0;
    for (int i = 0; i < s->n_reqs; i++) {
        struct sched_req *q = s->reqs[i];
        if (q->state == SCHED_FINISHED) {
            s->ops.retire(s->ops.ctx, q);
            continue;
        }
        q->batch_seq = -1;
        s->reqs[w++] = q;
    }
    s->n_reqs = w;
    for (int i = 0; i < s->n_reqs; i++) {
        struct sched_req *q = s->reqs[i];
        int j = i;
        for (; j > 0 && ranks_before(q, s->order[j - 1]); j--)
            s->order[j] = s->order[j - 1];
        s->order[j] = q;
    }
    for (int i = 0; i < s->n_reqs; i++)
        s->order[i]->rank = i;
}

int sched_build(struct sched *s, double now)
{
    s->step_serial++;
    s->n_chunks = s->n_batch = 0;
    rank_requests(s);
    const int budget = s->cfg.token_budget;
    /* Decode tokens first: one per running request with exactly one token
     * not yet in the cache. */
    int top_decode_priority = INT_MIN; /* highest priority decoding in this step */
    for (int i = 0; i < s->n_reqs && s->n_batch < budget; i++) {
        struct sched_req *q = s->order[i];
        if (q->state != SCHED_RUNNING || q->paused || q->n_tokens - q->n_computed != 1) continue;
        if (batch_add_preempting(s, q, 1))
            top_decode_priority = MAX(top_decode_priority, q->priority);
    }
    /* Then prompt chunks (and recomputation after preemption) and
     * admissions, in priority order. A request that cannot get its blocks
     * stops the pass, so later ones do not overtake it. Next to decodes the
     * step holds only as many tokens as keep it within prefill_step_ratio
     * decode-only steps (stepcost.h); alone, prefill fills the budget. The
     * bound protects streams at least as important as the prompt: a prompt
     * of higher priority than every decode is not slowed for them. */
    s->n_decode = s->n_batch;
    s->limit = s->cfg.prefill_step_ratio > 0
                   ? stepcost_limit(&s->cost, s->n_batch, s->cfg.prefill_step_ratio, budget)
                   : budget;
    for (int i = 0; i < s->n_reqs && s->n_batch < budget; i++) {
        struct sched_req *q = s->order[i];
        const int cap = q->priority > top_decode_priority ? budget : s->limit;
        if (s->n_batch >= cap) break; /* the rest rank no higher: same cap */
        if (q->batch_seq >= 0 || q->state == SCHED_FINISHED || q->paused || q->held) continue;
        int hit = -1; /* blocks attached if q is admitted now */
        if (q->state == SCHED_WAITING) {
            /* A request preempted in this step waits for the next one:
             * readmitting it now would only take back what was freed. */
            if (s->n_running >= s->cfg.max_seqs || q->preempted_in == s->step_serial) continue;
            hit = admit(s, q);
        } else if (q->n_tokens - q->n_computed == 1) {
            continue; /* decoding: handled above (or out of budget) */
        }
        int n = MIN(q->n_tokens - q->n_computed, cap - s->n_batch);
        bool added = batch_add_preempting(s, q, n);
        if (hit >= 0 && q->state == SCHED_RUNNING && q->kv.n_blocks == 0)
            unadmit(s, q);
        else if (hit >= 0)
            count_admission(s, q, hit, now);
        if (!added) break;
    }
    return s->n_batch;
}

void sched_advance(struct sched *s)
{
    s->stats.n_steps++;
    for (int j = 0; j < s->n_chunks; j++) {
        struct sched_req *q = s->chunks[j].q;
        if (q->n_computed < q->n_prompt)
            s->stats.n_prompt_tokens += (uint64_t)MIN(s->chunks[j].n, q->n_prompt - q->n_computed);
        q->n_computed += s->chunks[j].n;
    }
    for (int j = 0; j < s->n_chunks; j++)
        commit_blocks(s, s->chunks[j].q);
}

void sched_finish(struct sched *s, struct sched_req *q)
{
    if (q->state == SCHED_RUNNING) s->n_running--;
    q->state = SCHED_FINISHED;
    kv_seq_release(s->kv, &q->kv);
}

void sched_observe(struct sched *s, double seconds)
{
    if (s->n_batch > 0) stepcost_observe(&s->cost, s->n_batch, seconds, s->n_decode == s->n_batch);
}
