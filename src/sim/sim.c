/*
 * sim.c - see sim.h.
 */
#include "sim/sim.h"

#include "base/check.h"
#include "base/timeutil.h"
#include "cluster/pindex.h"
#include "cluster/proto.h"
#include "cluster/remote.h"
#include "engine/sched.h"
#include "kv/pool.h"
#include "kv/prefix.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void sim_config_default(struct sim_config *c)
{
    memset(c, 0, sizeof(*c));
    c->n_decode = 1;
    c->block_tokens = 16;
    c->local_prefill = 256;
    c->max_waiting = 256;
    c->bucket_window_s = 10;
    pol_config_default(&c->policy);
    sim_cost_default(&c->cost);
}

int sim_config_check(const struct sim_config *c, int trace_block_tokens, struct err_msg *m)
{
    if (c->n_decode < 1)
        return err_set(m, ERR_INVALID, "--decode: at least one decode (or mixed) worker");
    if (c->n_prefill < 0 || c->n_prefill + c->n_decode > 100000)
        return err_set(m, ERR_INVALID, "--prefill/--decode: 0..100000 workers");
    if (c->block_tokens < 1 || c->block_tokens > 4096)
        return err_set(m, ERR_INVALID, "--block-tokens: 1..4096");
    if (trace_block_tokens > 0 && trace_block_tokens % c->block_tokens)
        return err_set(m, ERR_INVALID,
                       "--block-tokens %d: the trace's blocks of %d tokens are not a multiple",
                       c->block_tokens, trace_block_tokens);
    if (c->cost.kv_tokens / c->block_tokens < 2)
        return err_set(m, ERR_INVALID, "kv_tokens %lld: a worker's pool holds under two blocks",
                       (long long)c->cost.kv_tokens);
    const char *why = NULL;
    if (!pol_slo_feasible(&c->slo, c->cost.fixed_ms, c->cost.decode_ms_per_token, &why))
        return err_set(m, ERR_INVALID, "--slo: %s (%.3g ms here)", why,
                       c->cost.fixed_ms + c->cost.decode_ms_per_token);
    if (c->admit && c->slo.ttft_ms <= 0 && c->slo.tpot_ms <= 0)
        return err_set(m, ERR_INVALID, "--admit needs a target (--slo-ttft or --slo-tpot)");
    return 0;
}

/* ---- state ---- */

enum ev_kind { EV_ARRIVE, EV_STEP, EV_PREFILLED };

struct event {
    double t;       /* seconds */
    uint64_t seq;   /* insertion order: ties */
    int kind;       /* ev_kind */
    int a;          /* item (ARRIVE), group (STEP) */
    struct sreq *r; /* PREFILLED: the decode-phase request */
};

struct sworker {
    int role;               /* enum cl_role */
    int group;              /* synchronised group */
    struct kv_pool kv;      /* bookkeeping only */
    struct kv_prefix px;    /* its prefix cache: the real LRU */
    struct sched sc;        /* the engine's scheduler */
    double step_ms;         /* this step's modelled time (0: idle) */
    double busy_ms;         /* summed */
    double prompt_ms;       /* summed over steps that computed prompt tokens */
    int pending;            /* requests routed here whose prompts are still computed elsewhere */
    int64_t pending_tokens; /* their prompt tokens (the gateway counts them, as it counts
                               what it sent: `sent` in cluster/remote.c) */
    struct pol_worker raw;  /* its own measured costs (the snapshot has its pool's) */
    uint64_t ev_seq;        /* KV events sent to the index */
};

struct sgroup {
    int first, n;    /* workers first .. first + n - 1 */
    bool stepping;   /* a STEP event is pending */
    double sum_mean; /* step balance: sum of mean member work */
    double sum_max;  /* and of the slowest's */
    double busy_ms;  /* its busy time (sum of step durations) */
    uint64_t steps;
};

/* A request on a worker. */
struct sreq {
    struct sched_req s;     /* first: the scheduler's pointer */
    int item;               /* workload index */
    int worker;             /* where it runs */
    int decode_worker;      /* prefill phase: where it continues (-1: it runs whole here) */
    int target;             /* tokens to generate */
    bool continued;         /* decode phase of a prompt computed elsewhere */
    int n_gen;              /* tokens generated (kept here, not in the item's stats: the
                               request's own cache lines are the ones a step touches) */
    double t_first, t_last; /* its first and latest token */
};

enum { ST_PENDING, ST_RUNNING, ST_DONE, ST_REJECTED, ST_OVERLOADED };

struct itemstat {
    double t_arrive, t_first, t_last; /* seconds */
    int32_t n_gen;                    /* tokens generated */
    int32_t n_cached;                 /* prompt tokens attached where the prompt was computed */
    uint8_t state;
};

#define ITL_BUCKETS 1800 /* log-spaced, 1 us .. 1000 s, 200 per decade */

struct sim {
    const struct sim_config *c;
    const struct bench_workload *w;
    int bt; /* block tokens */
    int n_workers;
    struct sworker *ws;      /* (n_workers): decode/mixed first, then prefill */
    struct pol_worker *snap; /* (n_workers) the gateway's snapshot */
    struct sgroup *gs;
    int n_groups;
    struct pidx index; /* global prefix index */
    struct event *heap;
    size_t n_heap, cap_heap;
    uint64_t seq;
    double now;
    struct itemstat *st;   /* (w->n) */
    int32_t *follow_start; /* (w->n + 1) followers of item i: follow[start[i] .. start[i+1]) */
    int32_t *follow;
    int32_t *roots; /* root items by due time */
    int32_t n_roots, next_root;
    uint64_t n_routed;
    uint64_t itl[ITL_BUCKETS];
    uint64_t n_itl;
    double kv_bytes;
    uint8_t (*idbuf)[16]; /* match scratch */
    int cap_idbuf;
    struct pidx_hit *hits;
    int cap_hits;
    uint64_t n_events;
    double bucket_t0;         /* time of the buckets' scale 1 */
    struct pol_worker *costs; /* (n_workers) pol_pool_costs scratch */
    double costs_t;           /* when the snapshot's costs were pooled (< 0: never) */
};

/* ---- the event heap ---- */

static bool ev_before(const struct event *a, const struct event *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(struct sim *s, double t, int kind, int a, struct sreq *r)
{
    if (s->n_heap == s->cap_heap) {
        s->cap_heap = s->cap_heap ? 2 * s->cap_heap : 1024;
        s->heap = xrealloc(s->heap, s->cap_heap * sizeof(*s->heap));
    }
    struct event e = {.t = t, .seq = s->seq++, .kind = kind, .a = a, .r = r};
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_before(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
}

static struct event pop(struct sim *s)
{
    struct event top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct event *mv = &last;
        if (l < n && ev_before(&s->heap[l], mv)) m = l, mv = &s->heap[l];
        if (r < n && ev_before(&s->heap[r], mv)) m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* ---- block ids ---- */

/* A bijective 64-bit mixer (splitmix64's finaliser): block ids must look
 * uniform, as content hashes do (the prefix cache buckets by their bits). */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Engine block i of item `item`: inside the prompt, (trace block id, index
 * within it), so equal trace ids give equal blocks; past the prompt, the
 * item's own. */
static struct kv_block_id block_id(const struct sim *s, int item, int i)
{
    const struct bench_item *it = &s->w->items[item];
    const int bt = s->bt, tb = s->w->block_tokens > 0 ? s->w->block_tokens : bt;
    int64_t pos = (int64_t)i * bt;
    if (pos + bt <= it->n_input) {
        int k = (int)(pos / tb);
        CHECK(k < it->n_blocks);
        uint64_t sub = (uint64_t)(pos % tb) / bt;
        return (struct kv_block_id){.hi = it->blocks[k],
                                    .lo = mix64(it->blocks[k] ^ mix64(sub + 1))};
    }
    uint64_t own = 0xa5a5a5a5a5a5a5a5ull ^ (uint64_t)item;
    return (struct kv_block_id){.hi = own, .lo = mix64(own ^ mix64((uint64_t)i | 1ull << 63))};
}

static void sq_block_ids(void *ctx, struct sched_req *q, int n)
{
    struct sim *s = ctx;
    struct sreq *r = (struct sreq *)q;
    for (; q->n_ids < n; q->n_ids++)
        q->ids[q->n_ids] = block_id(s, r->item, q->n_ids);
}

static void sq_retire(void *ctx, struct sched_req *q)
{
    (void)ctx;
    free(q->ids);
    free(q);
}

static struct sreq *sreq_new(struct sim *s, int item, int worker, int max_tokens, int target)
{
    const struct bench_item *it = &s->w->items[item];
    struct sreq *r = xcalloc(1, sizeof(*r));
    int n_ids = (it->n_input + max_tokens) / s->bt + 1;
    sched_req_init(&r->s, ++s->seq, it->n_input, it->n_input, max_tokens, 0, s->now,
                   xmalloc(sizeof(struct kv_block_id) * (size_t)n_ids));
    r->item = item;
    r->worker = worker;
    r->decode_worker = -1;
    r->target = target;
    return r;
}

/* ---- the snapshot and the index ---- */

/* Feeds w's KV events to the index and refreshes its snapshot entry. */
static void refresh(struct sim *s, int wi)
{
    struct sworker *w = &s->ws[wi];
    struct kv_prefix_event ev[256];
    int k;
    while ((k = kv_prefix_take_events(&w->px, ev, (int)ARRAY_LEN(ev))) > 0) {
        for (int i = 0; i < k; i++) {
            struct pidx_event pe = {.seq = ++w->ev_seq,
                                    .kind = ev[i].kind == KV_PREFIX_EVENT_STORED ? PIDX_STORED
                                                                                 : PIDX_EVICTED,
                                    .tier = 0};
            kv_block_id_to_bytes(&ev[i].id, pe.id);
            pidx_apply(&s->index, wi, &pe);
        }
    }
    struct pol_worker *p = &s->snap[wi];
    const struct sched *sc = &w->sc;
    int waiting = 0;
    int64_t queued = 0;
    for (int i = 0; i < sc->n_reqs; i++) {
        const struct sched_req *q = sc->reqs[i];
        if (q->state == SCHED_FINISHED) continue;
        waiting += q->state == SCHED_WAITING;
        if (q->n_computed < q->n_prompt) queued += q->n_prompt - q->n_computed;
    }
    p->running = sc->n_running;
    p->waiting = waiting + w->pending;
    p->queued_tokens = queued + w->pending_tokens;
    p->kv_total = w->kv.cfg.n_blocks;
    p->kv_used = w->kv.cfg.n_blocks - w->kv.n_free - w->px.n_lru;
    w->raw.role = p->role;
    w->raw.ms_fixed = sc->cost.fitted ? 1e3 * sc->cost.a_s : 0;
    w->raw.ms_per_token = sc->cost.fitted ? 1e3 * sc->cost.b_s : 0;
    w->raw.ms_per_prompt_token =
        sc->stats.n_prompt_tokens ? w->prompt_ms / (double)sc->stats.n_prompt_tokens : 0;
}

/* The snapshot's costs: each role's medians of its workers' measured ones
 * (pol_pool_costs, as the gateway does), refreshed every 100 ms. */
static void pool_costs(struct sim *s)
{
    if (s->costs_t >= 0 && s->now - s->costs_t < 0.1) return;
    s->costs_t = s->now;
    for (int i = 0; i < s->n_workers; i++)
        s->costs[i] = s->ws[i].raw;
    pol_pool_costs(s->costs, s->n_workers);
    for (int i = 0; i < s->n_workers; i++) {
        s->snap[i].ms_fixed = s->costs[i].ms_fixed;
        s->snap[i].ms_per_token = s->costs[i].ms_per_token;
        s->snap[i].ms_per_prompt_token = s->costs[i].ms_per_prompt_token;
    }
}

/* The per-bucket compute decays with the window's time constant. Rather
 * than decaying every worker's values at every arrival, they are kept
 * scaled by e^((t - bucket_t0) / window): the policy only compares workers
 * at one instant, where a common factor changes no order. The scale is
 * folded back into the values before it grows large. Returns the factor
 * an amount added now takes. */
static double bucket_scale(struct sim *s)
{
    const double win = s->c->bucket_window_s > 0 ? s->c->bucket_window_s : 10;
    double x = (s->now - s->bucket_t0) / win;
    if (x > 300) {
        double f = exp(-x);
        for (int i = 0; i < s->n_workers; i++)
            for (int b = 0; b < POL_MAX_BUCKETS; b++)
                s->snap[i].bucket_ms[b] *= f;
        s->bucket_t0 = s->now;
        x = 0;
    }
    return exp(x);
}

/* ---- workers ---- */

static void wake(struct sim *s, int wi)
{
    struct sgroup *g = &s->gs[s->ws[wi].group];
    if (!g->stepping) {
        g->stepping = true;
        push(s, s->now, EV_STEP, s->ws[wi].group, NULL);
    }
}

/* Submits r to its worker unless the worker's queue is full. */
static bool submit(struct sim *s, struct sreq *r)
{
    struct sworker *w = &s->ws[r->worker];
    /* the engine's own queue bound (max_waiting): what waits there, not what is on its way */
    if (s->snap[r->worker].waiting - w->pending >= s->c->max_waiting) {
        sq_retire(s, &r->s);
        return false;
    }
    sched_add(&w->sc, &r->s);
    s->snap[r->worker].waiting++;
    s->snap[r->worker].queued_tokens += r->s.n_prompt;
    wake(s, r->worker);
    return true;
}

static void record_token(struct sim *s, struct sreq *st)
{
    if (st->n_gen == 0) {
        st->t_first = s->now;
    } else {
        double gap_ms = (s->now - st->t_last) * 1e3;
        int b = gap_ms <= 1e-3 ? 0 : (int)(200 * log10(gap_ms / 1e-3));
        s->itl[b < 0 ? 0 : b >= ITL_BUCKETS ? ITL_BUCKETS - 1 : b]++;
        s->n_itl++;
    }
    st->t_last = s->now;
    st->n_gen++;
}

static void arrive(struct sim *s, int item);

/* The item is over (served or refused): its follow-ups become due. */
static void release_followers(struct sim *s, int item)
{
    for (int32_t k = s->follow_start[item]; k < s->follow_start[item + 1]; k++) {
        int f = s->follow[k];
        push(s, s->now + s->w->items[f].think_s, EV_ARRIVE, f, NULL);
    }
}

/* A prefill worker finished r's prompt: the KV leaves for the decode
 * worker. */
static void prefilled(struct sim *s, struct sreq *r)
{
    const struct bench_item *it = &s->w->items[r->item];
    const struct sim_cost *c = &s->c->cost;
    int n_full = it->n_input / s->bt;
    double bytes = (double)n_full * s->bt * c->kv_bytes_per_token;
    /* blocks stream as their chunks finish: what remains after the last
     * chunk is at most that chunk's share, unless the link is slower than
     * the prefill */
    double start = r->s.t_submit + r->s.queue_s;
    double last = (double)MIN(c->token_budget, it->n_input) * c->kv_bytes_per_token;
    double link = c->link_gbs * 1e9;
    double t = fmax(s->now + last / link, start + bytes / link) + c->link_ms * 1e-3;
    s->kv_bytes += bytes;
    struct sreq *d = sreq_new(s, r->item, r->decode_worker, r->target, r->target);
    d->continued = true;
    sq_block_ids(s, &d->s, n_full);
    push(s, t, EV_PREFILLED, 0, d);
}

/* The KV of d's prompt reached its decode worker: entered into its pool,
 * then d is submitted there. */
static void kv_arrived(struct sim *s, struct sreq *d)
{
    struct sworker *w = &s->ws[d->worker];
    const int n_full = s->w->items[d->item].n_input / s->bt;
    w->pending--;
    w->pending_tokens -= s->w->items[d->item].n_input;
    for (int i = 0; i < n_full; i++)
        if (kv_prefix_adopt(&w->px, &d->s.ids[i], NULL) < 0) break;
    struct itemstat *st = &s->st[d->item];
    if (!submit(s, d)) {
        st->state = ST_OVERLOADED;
        release_followers(s, d->item);
    }
    refresh(s, d->worker);
}

static void group_step(struct sim *s, int gi)
{
    struct sgroup *g = &s->gs[gi];
    double max = 0, sum = 0;
    for (int k = 0; k < g->n; k++) {
        struct sworker *w = &s->ws[g->first + k];
        int n = sched_build(&w->sc, s->now);
        w->step_ms = n ? sim_cost_step_ms(&s->c->cost, &w->sc) : 0;
        sum += w->step_ms;
        max = fmax(max, w->step_ms);
        /* admissions moved blocks: the index and the snapshot follow */
        refresh(s, g->first + k);
    }
    if (max <= 0) {
        g->stepping = false;
        return;
    }
    g->sum_mean += sum / g->n;
    g->sum_max += max;
    g->busy_ms += max;
    g->steps++;
    push(s, s->now + max * 1e-3, EV_STEP, -1 - gi, NULL);
}

/* The group's step ended: every member's tokens are out. */
static void group_done(struct sim *s, int gi)
{
    struct sgroup *g = &s->gs[gi];
    for (int k = 0; k < g->n; k++) {
        int wi = g->first + k;
        struct sworker *w = &s->ws[wi];
        if (w->step_ms <= 0) continue;
        struct sched *sc = &w->sc;
        sched_advance(sc);
        for (int j = 0; j < sc->n_chunks; j++) {
            if (!sc->chunks[j].want) continue;
            struct sreq *r = (struct sreq *)sc->chunks[j].q;
            if (r->decode_worker >= 0) { /* prefill only: the prompt is done */
                s->st[r->item].n_cached = r->s.n_cached_prompt;
                prefilled(s, r);
                sched_finish(sc, &r->s);
                continue;
            }
            r->s.n_tokens++;
            record_token(s, r);
            if (r->s.n_tokens - r->s.n_prompt >= r->target) {
                struct itemstat *st = &s->st[r->item];
                if (!r->continued) st->n_cached = r->s.n_cached_prompt;
                st->n_gen = r->n_gen;
                st->t_first = r->t_first;
                st->t_last = r->t_last;
                st->state = ST_DONE;
                sched_finish(sc, &r->s);
                release_followers(s, r->item);
            }
        }
        sched_observe(sc, w->step_ms * 1e-3);
        w->busy_ms += w->step_ms;
        if (sc->n_decode < sc->n_batch) w->prompt_ms += w->step_ms;
        refresh(s, wi);
    }
    group_step(s, gi);
}

/* ---- the gateway ---- */

static void arrive(struct sim *s, int item)
{
    const struct bench_item *it = &s->w->items[item];
    struct itemstat *st = &s->st[item];
    st->t_arrive = s->now;
    st->state = ST_RUNNING;
    /* the prompt's cached leading blocks per worker, from the index */
    int n_full = it->n_input / s->bt;
    if (n_full > s->cap_idbuf) {
        s->cap_idbuf = n_full * 2;
        s->idbuf = xrealloc(s->idbuf, sizeof(*s->idbuf) * (size_t)s->cap_idbuf);
    }
    for (int i = 0; i < n_full; i++) {
        struct kv_block_id id = block_id(s, item, i);
        kv_block_id_to_bytes(&id, s->idbuf[i]);
    }
    if (s->cap_hits < s->n_workers) {
        s->cap_hits = s->n_workers;
        s->hits = xrealloc(s->hits, sizeof(*s->hits) * (size_t)s->cap_hits);
    }
    int n_hits =
        n_full ? pidx_match(&s->index, (const uint8_t(*)[16])s->idbuf, n_full, s->hits, s->cap_hits)
               : 0;
    n_hits = MIN(n_hits, s->cap_hits);
    pool_costs(s);
    for (int h = 0; h < n_hits; h++)
        s->snap[s->hits[h].worker].cached_blocks = s->hits[h].n_pool;
    struct pol_request q = {
        .n_prompt = it->n_input, .max_tokens = it->n_output, .seq = s->n_routed++};
    int pf = -1;
    int d = remote_route(&s->c->policy, s->snap, s->n_workers, &q, s->c->local_prefill, &pf);
    struct pol_estimate est;
    bool refused = false;
    if (d >= 0 && s->c->admit) {
        pol_estimate(&s->c->policy, pf >= 0 ? &s->snap[pf] : NULL, &s->snap[d], &q, &est);
        refused = pol_admit(&s->c->slo, &est) != 0;
    }
    if (d >= 0 && !refused) {
        int at = pf >= 0 ? pf : d;
        s->snap[at].bucket_ms[pol_bucket(&s->c->policy, it->n_input)] +=
            pol_prefill_ms(&s->c->policy, &s->snap[at], &q) * bucket_scale(s);
    }
    for (int h = 0; h < n_hits; h++)
        s->snap[s->hits[h].worker].cached_blocks = 0;
    if (d < 0 || refused) {
        st->state = ST_REJECTED;
        release_followers(s, item);
        return;
    }
    struct sreq *r = pf >= 0 ? sreq_new(s, item, pf, 1, it->n_output)
                             : sreq_new(s, item, d, it->n_output, it->n_output);
    if (pf >= 0) r->decode_worker = d;
    if (!submit(s, r)) {
        st->state = ST_OVERLOADED;
        release_followers(s, item);
    } else if (pf >= 0) {
        s->ws[d].pending++;
        s->ws[d].pending_tokens += it->n_input;
        refresh(s, d);
    }
}

/* ---- setup and results ---- */

struct due {
    double t;  /* due time */
    int32_t i; /* item */
};

static int by_due(const void *a, const void *b)
{
    const struct due *x = a, *y = b;
    return x->t < y->t ? -1 : x->t > y->t ? 1 : (x->i > y->i) - (x->i < y->i);
}

static int init_worker(struct sim *s, struct sworker *w, int role, struct err_msg *m)
{
    const struct sim_cost *c = &s->c->cost;
    w->role = role;
    struct kv_pool_config kc = {.block_tokens = s->bt,
                                .n_blocks = (int)MIN(c->kv_tokens / s->bt, INT32_MAX / 2),
                                .dtype = DTYPE_F16,
                                .no_data = true};
    int rc = kv_pool_init(&w->kv, &kc, m);
    if (rc) return rc;
    static const uint8_t fp[16] = {'i', 'n', 'f', 'e', 'r', 'd', '-', 's', 'i', 'm'};
    kv_prefix_init(&w->px, &w->kv, fp);
    w->px.record_events = true;
    struct sched_config scfg = {.token_budget = c->token_budget,
                                .max_seqs = c->max_seqs,
                                .block_tokens = s->bt,
                                .prefill_step_ratio = 2.0f};
    struct sched_ops ops = {.block_ids = sq_block_ids, .retire = sq_retire, .ctx = s};
    sched_init(&w->sc, &scfg, &w->kv, &w->px, &ops);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    if (!n) return 0;
    size_t k = (size_t)ceil(p * (double)n) - (p > 0);
    return v[k < n ? k : n - 1];
}

static void itl_pcts(const struct sim *s, double out[3])
{
    const double ps[3] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        out[k] = 0;
        if (!s->n_itl) continue;
        uint64_t want = (uint64_t)ceil(ps[k] * (double)s->n_itl), acc = 0;
        for (int b = 0; b < ITL_BUCKETS; b++) {
            acc += s->itl[b];
            if (acc >= want) {
                out[k] = 1e-3 * pow(10, (b + 0.5) / 200.0); /* bucket middle */
                break;
            }
        }
    }
}

static void pool_result(const struct sim *s, int role_lo, int role_hi, struct sim_pool_result *p)
{
    memset(p, 0, sizeof(*p));
    double sum_mean = 0, sum_max = 0, max_busy = 0, work = 0;
    for (int gi = 0; gi < s->n_groups; gi++) {
        const struct sgroup *g = &s->gs[gi];
        int role = s->ws[g->first].role;
        if (role < role_lo || role > role_hi) continue;
        p->n_workers += g->n;
        sum_mean += g->sum_mean;
        sum_max += g->sum_max;
        max_busy = fmax(max_busy, g->busy_ms);
        p->n_steps += g->steps;
        for (int k = 0; k < g->n; k++)
            work += s->ws[g->first + k].busy_ms;
    }
    p->busy_s = work * 1e-3;
    p->step_balance = sum_max > 0 ? sum_mean / sum_max : 1;
    p->offline_ratio = max_busy > 0 && p->n_workers ? work / p->n_workers / max_busy : 1;
}

static void results(struct sim *s, struct sim_result *o)
{
    const struct bench_workload *w = s->w;
    double t0 = INFINITY, t1 = 0, prompt = 0, cached = 0, out_tokens = 0, good_tokens = 0;
    o->ttft_sorted = xmalloc(sizeof(double) * (size_t)(w->n + 1));
    o->tpot_sorted = xmalloc(sizeof(double) * (size_t)(w->n + 1));
    for (int32_t i = 0; i < w->n; i++) {
        const struct itemstat *st = &s->st[i];
        if (st->state == ST_PENDING) continue;
        o->n_requests++;
        t0 = fmin(t0, st->t_arrive);
        o->n_rejected += st->state == ST_REJECTED;
        o->n_overloaded += st->state == ST_OVERLOADED;
        if (st->state != ST_DONE) continue;
        o->n_served++;
        t1 = fmax(t1, st->t_last);
        prompt += w->items[i].n_input;
        cached += st->n_cached;
        out_tokens += st->n_gen;
        double ttft = (st->t_first - st->t_arrive) * 1e3;
        double tpot = st->n_gen > 1 ? (st->t_last - st->t_first) * 1e3 / (st->n_gen - 1) : 0;
        o->ttft_sorted[o->n_ttft++] = ttft;
        if (st->n_gen > 1) o->tpot_sorted[o->n_tpot++] = tpot;
        bool good = (s->c->slo.ttft_ms <= 0 || ttft <= s->c->slo.ttft_ms) &&
                    (s->c->slo.tpot_ms <= 0 || tpot <= s->c->slo.tpot_ms);
        if (good) o->n_good++, good_tokens += st->n_gen;
    }
    double st = 0, sp = 0;
    for (size_t i = 0; i < o->n_ttft; i++)
        st += o->ttft_sorted[i];
    for (size_t i = 0; i < o->n_tpot; i++)
        sp += o->tpot_sorted[i];
    o->ttft_mean_ms = o->n_ttft ? st / (double)o->n_ttft : 0;
    o->tpot_mean_ms = o->n_tpot ? sp / (double)o->n_tpot : 0;
    qsort(o->ttft_sorted, o->n_ttft, sizeof(double), cmp_double);
    qsort(o->tpot_sorted, o->n_tpot, sizeof(double), cmp_double);
    const double ps[3] = {0.5, 0.9, 0.99};
    for (int k = 0; k < 3; k++) {
        o->ttft_ms[k] = pct(o->ttft_sorted, o->n_ttft, ps[k]);
        o->tpot_ms[k] = pct(o->tpot_sorted, o->n_tpot, ps[k]);
    }
    itl_pcts(s, o->itl_ms);
    o->span_s = t1 > t0 ? t1 - t0 : 0;
    if (o->span_s > 0) {
        o->throughput_rps = (double)o->n_served / o->span_s;
        o->output_tps = out_tokens / o->span_s;
        o->goodput_rps = (double)o->n_good / o->span_s;
        o->token_goodput_tps = good_tokens / o->span_s;
    }
    o->hit_ratio = prompt > 0 ? cached / prompt : 0;
    o->kv_moved_gb = s->kv_bytes * 1e-9;
    for (int i = 0; i < s->n_workers; i++)
        o->n_preempted += s->ws[i].sc.stats.n_preempted;
    pool_result(s, CL_ROLE_PREFILL, CL_ROLE_PREFILL, &o->prefill);
    pool_result(s, CL_ROLE_DECODE, CL_ROLE_MIXED, &o->decode);
}

static void groups(struct sim *s, int first, int n, int size)
{
    if (size <= 0 || size > n) size = n;
    for (int k = 0; k < n; k += size) {
        struct sgroup *g = &s->gs[s->n_groups];
        g->first = first + k;
        g->n = MIN(size, n - k);
        for (int i = 0; i < g->n; i++)
            s->ws[g->first + i].group = s->n_groups;
        s->n_groups++;
    }
}

int sim_run(const struct sim_config *c, const struct bench_workload *w, struct sim_result *out,
            struct err_msg *m)
{
    memset(out, 0, sizeof(*out));
    int rc = sim_config_check(c, w->block_tokens, m);
    if (rc) return rc;
    double wall0 = time_now_s();
    struct sim s = {.c = c, .w = w, .bt = c->block_tokens};
    s.n_workers = c->n_decode + c->n_prefill;
    s.ws = xcalloc((size_t)s.n_workers, sizeof(*s.ws));
    s.snap = xcalloc((size_t)s.n_workers, sizeof(*s.snap));
    s.gs = xcalloc((size_t)s.n_workers, sizeof(*s.gs));
    s.costs = xcalloc((size_t)s.n_workers, sizeof(*s.costs));
    s.costs_t = -1;
    pidx_init(&s.index, 0);
    int n_init = 0;
    for (int i = 0; i < s.n_workers; i++, n_init++) {
        int role =
            i < c->n_decode ? (c->n_prefill ? CL_ROLE_DECODE : CL_ROLE_MIXED) : CL_ROLE_PREFILL;
        if ((rc = init_worker(&s, &s.ws[i], role, m))) goto out;
        s.snap[i] = (struct pol_worker){.up = true, .role = role};
        s.snap[i].ms_per_ctx_token = c->cost.ctx_ms_per_ktoken * 1e-3;
        s.snap[i].kv_total = s.ws[i].kv.cfg.n_blocks;
    }
    groups(&s, 0, c->n_decode, c->dp_group);
    groups(&s, c->n_decode, c->n_prefill, c->dp_group);

    /* items: roots by due time, followers by predecessor */
    s.st = xcalloc((size_t)w->n + 1, sizeof(*s.st));
    s.follow_start = xcalloc((size_t)w->n + 2, sizeof(int32_t));
    s.follow = xmalloc(sizeof(int32_t) * (size_t)(w->n + 1));
    s.roots = xmalloc(sizeof(int32_t) * (size_t)(w->n + 1));
    for (int32_t i = 0; i < w->n; i++) {
        int32_t a = w->items[i].after;
        if (a >= 0 && a < w->n)
            s.follow_start[a + 1]++;
        else
            s.roots[s.n_roots++] = i;
    }
    for (int32_t i = 0; i < w->n; i++)
        s.follow_start[i + 1] += s.follow_start[i];
    {
        int32_t *fill = xcalloc((size_t)w->n + 1, sizeof(int32_t));
        for (int32_t i = 0; i < w->n; i++) {
            int32_t a = w->items[i].after;
            if (a >= 0 && a < w->n) s.follow[s.follow_start[a] + fill[a]++] = i;
        }
        free(fill);
    }
    {
        struct due *d = xmalloc(sizeof(*d) * (size_t)(s.n_roots + 1));
        for (int32_t k = 0; k < s.n_roots; k++)
            d[k] = (struct due){.t = w->items[s.roots[k]].t_s, .i = s.roots[k]};
        qsort(d, (size_t)s.n_roots, sizeof(*d), by_due);
        for (int32_t k = 0; k < s.n_roots; k++)
            s.roots[k] = d[k].i;
        free(d);
    }

    /* the loop: the next root arrival is always in the heap */
    if (s.n_roots) push(&s, w->items[s.roots[0]].t_s, EV_ARRIVE, s.roots[s.next_root++], NULL);
    while (s.n_heap) {
        struct event e = pop(&s);
        s.now = e.t;
        s.n_events++;
        if (e.kind == EV_ARRIVE) {
            bool root = w->items[e.a].after < 0 || w->items[e.a].after >= w->n;
            if (root && s.next_root < s.n_roots) {
                int32_t nx = s.roots[s.next_root++];
                push(&s, fmax(w->items[nx].t_s, s.now), EV_ARRIVE, nx, NULL);
            }
            arrive(&s, e.a);
        } else if (e.kind == EV_STEP) {
            if (e.a >= 0)
                group_step(&s, e.a);
            else
                group_done(&s, -1 - e.a);
        } else {
            kv_arrived(&s, e.r);
        }
    }
    results(&s, out);
    out->n_events = s.n_events;
    out->wall_s = time_now_s() - wall0;
    rc = 0;
out:
    for (int i = 0; i < n_init; i++) {
        sched_release(&s.ws[i].sc);
        kv_prefix_release(&s.ws[i].px);
        kv_pool_release(&s.ws[i].kv);
    }
    pidx_release(&s.index);
    free(s.ws);
    free(s.snap);
    free(s.gs);
    free(s.costs);
    free(s.heap);
    free(s.st);
    free(s.follow_start);
    free(s.follow);
    free(s.roots);
    free(s.idbuf);
    free(s.hits);
    if (rc) sim_result_release(out);
    return rc;
}

void sim_result_release(struct sim_result *r)
{
    free(r->ttft_sorted);
    free(r->tpot_sorted);
    r->ttft_sorted = r->tpot_sorted = NULL;
    r->n_ttft = r->n_tpot = 0;
}

void sim_workload_repeat(struct bench_workload *w, int copies, double speed)
{
    const int32_t n = w->n;
    double span = 0;
    for (int32_t i = 0; i < n; i++)
        span = fmax(span, w->items[i].t_s);
    span += n > 1 ? span / (n - 1) : 1; /* the next copy starts one mean gap after */
    for (int k = 1; k < copies; k++) {
        uint64_t key = (uint64_t)k * 0x9e3779b97f4a7c15ull;
        for (int32_t i = 0; i < n; i++) {
            struct bench_item it = w->items[i];
            uint64_t *b = xmalloc(sizeof(uint64_t) * (size_t)(it.n_blocks ? it.n_blocks : 1));
            for (int32_t j = 0; j < it.n_blocks; j++)
                b[j] = it.blocks[j] ^ key;
            it.blocks = b;
            it.t_s += k * span;
            if (it.after >= 0) it.after += k * n;
            if (it.session >= 0) it.session += k * (1 << 20);
            bench_workload_add(w, &it);
            free(b);
        }
    }
    if (speed > 0 && speed != 1)
        for (int32_t i = 0; i < w->n; i++) {
            w->items[i].t_s /= speed;
            w->items[i].think_s /= speed;
        }
}
