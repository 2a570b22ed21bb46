/*
 * match.c - the pushdown automaton: stack nodes, closure, one byte at a time.
 *
 * A matcher state is a set of stacks (grammar_impl.h). Reading a byte keeps
 * the stacks whose top BYTES element contains it, moves each past that
 * element, and closes the result:
 *
 *   closure(pos, parent):
 *     BYTES  -> a leaf of the new state
 *     REF r  -> for each alternative a of r: closure(start(a), node(pos, parent))
 *     END    -> parent ROOT: the input may end here (accept)
 *               parent UNKNOWN: the rule returned into an unknown caller
 *               otherwise: closure(pos(parent) + 1, parent(parent))
 *
 * The closure is iterative (a worklist) so deep stacks cannot overflow the C
 * stack; each node is visited once per step (a generation stamp), which both
 * bounds the work and deduplicates leaves. Left recursion was rejected when
 * lowering, so the closure terminates - but a state can still hold
 * exponentially many stacks (nested nullable sequences), so the pool counts
 * work units (a node visited or made), leaves and nodes against bounds and
 * the closure stops where one is hit (p->over); its owner then throws the
 * incomplete result away (budget.c).
 *
 * Nodes are hash-consed (same pos and parent -> same id) in a pool that only
 * grows during a request; speculative walks (mask checks) roll the pool back
 * to a mark, removing their nodes from the hash chains newest first.
 *
 * A matcher runs under its grammar's limits: a token whose bytes run past a
 * bound fails the matcher for good, with a message naming the construct;
 * every later call refuses.
 *
 * Thread: a matcher (and its pool) belongs to one thread at a time.
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

void grammar__pool_init(struct grammar_pool *p)
{
    memset(p, 0, sizeof(*p));
    p->n_buckets = 1024;
    p->bucket = xmalloc(sizeof(int32_t) * (size_t)p->n_buckets);
    memset(p->bucket, 0xFF, sizeof(int32_t) * (size_t)p->n_buckets);
    p->gen = 1;
    grammar__pool_bound(p, INT64_MAX, INT32_MAX, INT32_MAX);
}

void grammar__pool_bound(struct grammar_pool *p, int64_t max_units, int max_leaves, int max_nodes)
{
    p->units = 0;
    p->max_units = max_units;
    p->max_leaves = max_leaves;
    p->max_nodes = max_nodes;
    p->over = GRAMMAR_POOL_OVER_NONE;
}

void grammar__pool_release(struct grammar_pool *p)
{
    free(p->pos);
    free(p->parent);
    free(p->next);
    free(p->stamp);
    free(p->bucket);
    free(p->work);
    memset(p, 0, sizeof(*p));
}

static inline uint32_t node_hash(int32_t pos, int32_t parent)
{
    uint64_t h = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static void rehash(struct grammar_pool *p)
{
    p->n_buckets *= 2;
    p->bucket = xrealloc(p->bucket, sizeof(int32_t) * (size_t)p->n_buckets);
    p->units += p->n; /* the rehash below is charged to who triggers it */
    memset(p->bucket, 0xFF, sizeof(int32_t) * (size_t)p->n_buckets);
    /* Insert oldest first so newer nodes stay at the chain heads (rollback
     * relies on it). */
    for (int i = 0; i < p->n; i++) {
        uint32_t b = node_hash(p->pos[i], p->parent[i]) & (uint32_t)(p->n_buckets - 1);
        p->next[i] = p->bucket[b];
        p->bucket[b] = i;
    }
}

int32_t grammar__node(struct grammar_pool *p, int32_t pos, int32_t parent)
{
    uint32_t b = node_hash(pos, parent) & (uint32_t)(p->n_buckets - 1);
    for (int32_t i = p->bucket[b]; i >= 0; i = p->next[i])
        if (p->pos[i] == pos && p->parent[i] == parent) return i;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->pos = xrealloc(p->pos, sizeof(int32_t) * (size_t)p->cap);
        p->parent = xrealloc(p->parent, sizeof(int32_t) * (size_t)p->cap);
        p->next = xrealloc(p->next, sizeof(int32_t) * (size_t)p->cap);
        p->stamp = xrealloc(p->stamp, sizeof(uint32_t) * (size_t)p->cap);
        p->units += p->cap >> 2;
    }
    int32_t i = p->n++;
    p->pos[i] = pos;
    p->parent[i] = parent;
    p->stamp[i] = 0;
    p->next[i] = p->bucket[b];
    p->bucket[b] = i;
    if (p->n > p->n_buckets) rehash(p);
    if (p->n > p->max_nodes && !p->over) p->over = GRAMMAR_POOL_OVER_NODES;
    return i;
}

void grammar__pool_rollback(struct grammar_pool *p, int mark)
{
    for (int i = p->n - 1; i >= mark; i--) {
        uint32_t b = node_hash(p->pos[i], p->parent[i]) & (uint32_t)(p->n_buckets - 1);
        CHECK(p->bucket[b] == i);
        p->bucket[b] = p->next[i];
    }
    if (mark < p->n) p->n = mark;
}

void grammar__state_reserve(struct grammar_state *st, int n)
{
    if (st->n + n <= st->cap) return;
    st->cap = MAX(2 * st->cap, st->n + n + 8);
    st->leaf = xrealloc(st->leaf, sizeof(int32_t) * (size_t)st->cap);
}

static void work_push(struct grammar_pool *p, int *n_work, int32_t node)
{
    if (p->stamp[node] == p->gen) return;
    p->stamp[node] = p->gen;
    if (*n_work == p->work_cap) {
        p->work_cap = p->work_cap ? 2 * p->work_cap : 64;
        p->work = xrealloc(p->work, sizeof(int32_t) * (size_t)p->work_cap);
    }
    p->work[(*n_work)++] = node;
}

void grammar__closure(const struct grammar *g, struct grammar_pool *p, int32_t pos, int32_t parent,
                      struct grammar_state *st)
{
    int n_work = 0;
    work_push(p, &n_work, grammar__node(p, pos, parent));
    while (n_work > 0 && !p->over) {
        int32_t n = p->work[--n_work];
        int32_t at = p->pos[n], par = p->parent[n];
        struct grammar_elem el = g->elems[at];
        if (++p->units > p->max_units) {
            p->over = GRAMMAR_POOL_OVER_WORK;
            break;
        }
        switch (el.kind) {
        case GRAMMAR_E_BYTES:
            if (st->n >= p->max_leaves) {
                p->over = GRAMMAR_POOL_OVER_STACKS;
                break;
            }
            grammar__state_reserve(st, 1);
            st->leaf[st->n++] = n;
            break;
        case GRAMMAR_E_REF: {
            /* A call in tail position returns straight to our parent (its
             * own return would only END and pop again): no frame, so right
             * recursion (x*, nested optionals) keeps the stack flat. */
            int32_t ret = g->elems[at + 1].kind == GRAMMAR_E_END ? par : n;
            p->units += g->rule_alt0[el.arg + 1] - g->rule_alt0[el.arg];
            /* Alternatives pushed last-first so they are visited in order;
             * the order only affects leaf order, never the set. */
            for (int a = g->rule_alt0[el.arg + 1] - 1; a >= g->rule_alt0[el.arg]; a--)
                work_push(p, &n_work, grammar__node(p, g->rule_alts[a], ret));
            break;
        }
        default:
            if (par == GRAMMAR_PARENT_ROOT)
                st->accept = true;
            else if (par == GRAMMAR_PARENT_UNKNW)
                st->unknown = true;
            else
                work_push(p, &n_work, grammar__node(p, p->pos[par] + 1, p->parent[par]));
        }
    }
}

void grammar__advance(const struct grammar *g, struct grammar_pool *p,
                      const struct grammar_state *in, unsigned byte, struct grammar_state *out)
{
    out->n = 0;
    out->accept = out->unknown = false;
    p->gen++;
    for (int i = 0; i < in->n && !p->over; i++) {
        int32_t n = in->leaf[i];
        int32_t at = p->pos[n];
        if (!grammar__set_has(g->sets[g->elems[at].arg], byte)) continue;
        grammar__closure(g, p, at + 1, p->parent[n], out);
    }
}

/* ---- matcher ---- */

struct grammar_matcher {
    struct grammar *g;             /* referenced */
    const struct grammar_vocab *v; /* may be NULL (bytes only) */
    struct grammar_pool pool;      /* stack nodes of this request */
    struct grammar_state cur;      /* current state */
    struct grammar_state tmp[2];   /* scratch states for walks */
    bool terminated;               /* an end-of-generation token was accepted */
    int err;                       /* 0, or why the matcher failed (ERR_INVALID) */
    char *err_text;                /* its message; owned */
    int64_t last_work;             /* units of the last accept / allows / fill_mask */
};

/* Bounds for one step (a token's bytes, or one run-time check). */
static void step_bound(struct grammar_matcher *m)
{
    const struct grammar_limits *l = &m->g->lim;
    grammar__pool_bound(&m->pool, l->step_work, l->max_stacks, l->max_nodes);
}

void grammar__matcher_fail(struct grammar_matcher *m, const struct err_msg *msg)
{
    if (m->err) return;
    m->err = ERR_INVALID;
    m->err_text = xstrdup(msg->text);
}

/* Fails m for the bound its pool hit while making st (what the stacks
 * are charged to: st's leaves). */
static void fail_over(struct grammar_matcher *m, const struct grammar_state *st)
{
    struct grammar_work wk = {.over = m->pool.over,
                              .blame = grammar__blame(m->g, &m->pool, st->leaf, st->n),
                              .n_stacks = st->n};
    grammar__matcher_fail_work(m, &wk, false);
}

void grammar__matcher_fail_work(struct grammar_matcher *m, const struct grammar_work *wk, bool mask)
{
    char what[200];
    grammar__over_what(m->g, wk->over, wk->n_stacks, mask, what, sizeof(what));
    struct err_msg msg;
    grammar__blame_error(m->g, wk->blame, &msg, "%s", what);
    grammar__matcher_fail(m, &msg);
}

struct grammar_matcher *grammar_matcher_new(struct grammar *g, const struct grammar_vocab *v)
{
    struct grammar_matcher *m = xcalloc(1, sizeof(*m));
    m->g = grammar_ref(g);
    m->v = v;
    grammar__pool_init(&m->pool);
    step_bound(m);
    m->pool.gen++;
    for (int a = g->rule_alt0[g->root]; a < g->rule_alt0[g->root + 1] && !m->pool.over; a++)
        grammar__closure(g, &m->pool, g->rule_alts[a], GRAMMAR_PARENT_ROOT, &m->cur);
    m->last_work = m->pool.units;
    if (m->pool.over) {
        fail_over(m, &m->cur);
        m->cur.n = 0;
        m->cur.accept = false;
    }
    return m;
}

void grammar_matcher_free(struct grammar_matcher *m)
{
    if (!m) return;
    grammar_unref(m->g);
    grammar__pool_release(&m->pool);
    free(m->cur.leaf);
    free(m->tmp[0].leaf);
    free(m->tmp[1].leaf);
    free(m->err_text);
    free(m);
}

static void state_copy(struct grammar_state *d, const struct grammar_state *s)
{
    d->n = 0;
    grammar__state_reserve(d, s->n);
    if (s->n) memcpy(d->leaf, s->leaf, sizeof(int32_t) * (size_t)s->n);
    d->n = s->n;
    d->accept = s->accept;
    d->unknown = s->unknown;
}

/* Walks bytes from the current state without committing; returns the final
 * state (one of m->tmp) or NULL if some byte is rejected or a bound is hit
 * (m->pool.over; *over_st then is the state being made). */
static struct grammar_state *walk(struct grammar_matcher *m, const unsigned char *b, size_t n,
                                  const struct grammar_state **over_st)
{
    const struct grammar_state *in = &m->cur;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        struct grammar_state *o = &m->tmp[k];
        grammar__advance(m->g, &m->pool, in, b[i], o);
        if (m->pool.over) {
            *over_st = o;
            return NULL;
        }
        if (o->n == 0 && !(o->accept && i + 1 == n)) return NULL;
        in = o;
        k ^= 1;
    }
    return n ? &m->tmp[k ^ 1] : NULL;
}

bool grammar_matcher_accept_bytes(struct grammar_matcher *m, const void *bytes, size_t n)
{
    m->last_work = 0;
    if (m->terminated || m->err) return false;
    if (n == 0) return true;
    int mark = m->pool.n;
    const struct grammar_state *over_st = NULL;
    step_bound(m);
    struct grammar_state *st = walk(m, bytes, n, &over_st);
    m->last_work = m->pool.units;
    if (!st) {
        if (over_st) fail_over(m, over_st);
        grammar__pool_rollback(&m->pool, mark);
        return false;
    }
    state_copy(&m->cur, st);
    return true;
}

/* Tests bytes without changing anything but the pool's counters (the
 * caller bounds them). A bound hit is reported in wk (over, blame,
 * n_stacks; the answer is then false). */
bool grammar__matcher_try(struct grammar_matcher *m, const void *bytes, size_t n,
                          struct grammar_work *wk)
{
    int mark = m->pool.n;
    const struct grammar_state *over_st = NULL;
    bool ok = walk(m, bytes, n, &over_st) != NULL;
    if (over_st) {
        wk->over = m->pool.over;
        wk->blame = grammar__blame(m->g, &m->pool, over_st->leaf, over_st->n);
        wk->n_stacks = over_st->n;
    }
    grammar__pool_rollback(&m->pool, mark);
    return ok;
}

bool grammar_matcher_accept_token(struct grammar_matcher *m, int32_t token)
{
    CHECK(m->v);
    m->last_work = 0;
    if (m->terminated || m->err || token < 0 || token >= m->v->n_vocab) return false;
    if (grammar_vocab_is_eog(m->v, token)) {
        if (!m->cur.accept) return false;
        m->terminated = true;
        return true;
    }
    if (m->v->cls[token] != GRAMMAR_TOKEN_NORMAL) return false;
    uint64_t o = m->v->off[token], e = m->v->off[token + 1];
    if (e == o) return false;
    return grammar_matcher_accept_bytes(m, m->v->bytes + o, e - o);
}

bool grammar_matcher_allows(struct grammar_matcher *m, int32_t token)
{
    CHECK(m->v);
    m->last_work = 0;
    if (m->terminated || m->err || token < 0 || token >= m->v->n_vocab) return false;
    if (grammar_vocab_is_eog(m->v, token)) return m->cur.accept;
    if (m->v->cls[token] != GRAMMAR_TOKEN_NORMAL) return false;
    uint64_t o = m->v->off[token], e = m->v->off[token + 1];
    if (e == o) return false;
    struct grammar_work wk = {.blame = -1};
    step_bound(m);
    bool ok = grammar__matcher_try(m, m->v->bytes + o, e - o, &wk);
    m->last_work = m->pool.units;
    if (wk.over) grammar__matcher_fail_work(m, &wk, false);
    return ok;
}

bool grammar_matcher_is_accepting(const struct grammar_matcher *m)
{
    return !m->terminated && !m->err && m->cur.accept;
}

bool grammar_matcher_can_continue(const struct grammar_matcher *m)
{
    return !m->terminated && !m->err && m->cur.n > 0;
}

int grammar_matcher_error(const struct grammar_matcher *m, const char **text)
{
    if (text) *text = m->err ? m->err_text : NULL;
    return m->err;
}

int64_t grammar_matcher_last_work(const struct grammar_matcher *m)
{
    return m->last_work;
}

void grammar__matcher_set_work(struct grammar_matcher *m, int64_t units)
{
    m->last_work = units;
}

bool grammar_matcher_is_terminated(const struct grammar_matcher *m)
{
    return m->terminated;
}

struct grammar_state *grammar__matcher_state(struct grammar_matcher *m)
{
    return &m->cur;
}
struct grammar_pool *grammar__matcher_pool(struct grammar_matcher *m)
{
    return &m->pool;
}
struct grammar *grammar__matcher_grammar(struct grammar_matcher *m)
{
    return m->g;
}
const struct grammar_vocab *grammar__matcher_vocab(struct grammar_matcher *m)
{
    return m->v;
}
