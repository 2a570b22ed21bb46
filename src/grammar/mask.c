/*
 * mask.c - which tokens may come next: tables per stack context plus a
 * run-time check of the few tokens whose fate lies deeper in the stack.
 *
 * The idea is XGrammar's adaptive token mask cache, keyed by context. A
 * matcher state is a set of stacks. Take the top K frames of a stack (K =
 * GRAMMAR_CTX_DEPTH; their positions are the key) and forget what lies below
 * (UNKNOWN), or keep "the stack ends here" (ROOT) when it is no deeper. For
 * each token, walking its bytes from that key either
 *
 *   - stays within the key's frames (or frames pushed above them) until the
 *     bytes run out: accepted, whatever lies below;
 *   - dies there: rejected, whatever lies below;
 *   - returns below the key with bytes left: "uncertain" - it depends on
 *     the frames that were cut off (only for stacks deeper than K).
 *
 * One walk of the vocabulary trie per key computes the accepted set (a
 * bitmap, or a list when short) and the uncertain list: common prefixes are
 * read once, and a subtree is cut as soon as no stack survives. An uncertain
 * token whose next byte cannot follow the deepest frame's rule anywhere in
 * the grammar (its FOLLOW set) is rejected outright. Walks share one node
 * pool per grammar with interned states and memoized transitions, so the
 * ~300K steps of a walk over a large vocabulary are mostly table lookups.
 *
 * At run time, fill_mask ORs the tables of the state's stacks and walks each
 * uncertain token's bytes from the real state:
 *
 *   mask = OR(accept[key(s)] for s in stacks) | {t in uncertain: walk(state, t) ok}
 *          | EOG tokens if the state accepts
 *
 * Tables are computed lazily under the grammar's mutex and cached in the
 * grammar (at most GRAMMAR_MAX_TABLES; beyond that a table serves one mask),
 * so every request compiled from the same source reuses them.
 *
 * Thread: any thread with its own matcher; the tables are shared.
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

void grammar__posmask_free(struct grammar_posmask *pm)
{
    if (!pm) return;
    free(pm->accept);
    free(pm->accept_list);
    free(pm->uncertain);
    free(pm);
}

struct i32list {
    int32_t *a; /* (n) */
    int n;      /* entries */
    int cap;    /* allocated */
};

static void list_push(struct i32list *l, int32_t x)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->a = xrealloc(l->a, sizeof(int32_t) * (size_t)l->cap);
    }
    l->a[l->n++] = x;
}

static void push_range(struct i32list *l, const struct grammar_vocab *v, int from, int to)
{
    for (int k = from; k < to; k++)
        list_push(l, v->order[k]);
}

/* ---- table walks: interned states and memoized transitions ----
 *
 * Every table walk of a grammar runs in one node pool (g->walker, under
 * g->mu), where automaton states are interned (a sorted leaf set plus flags
 * -> id) and each (state, byte) step is computed once. A walk over a 128K
 * vocabulary does ~300K steps, but inside free text almost all of them are
 * the same few transitions; and walks of neighbouring contexts (the n-th and
 * (n+1)-th character of a bounded string) meet the same states. The walker
 * is dropped and rebuilt when it grows past WALKER_MAX_NODES nodes (recursive
 * grammars can reach unboundedly many stacks). */

#define WALKER_MAX_NODES (1 << 22)

struct wstate {
    int64_t off;  /* first leaf in walker.leaves */
    int32_t n;    /* leaves */
    bool accept;  /* returned past the root */
    bool unknown; /* returned into the unknown context */
};

struct grammar_walker {
    struct grammar_pool pool; /* stack nodes of all walks */
    int32_t *leaves;          /* (n_leaves) leaf node ids of every state, concatenated */
    int64_t n_leaves, cap_leaves;
    struct wstate *states; /* (n_states) interned states */
    int n_states, cap_states;
    int32_t *shash;           /* (n_shash) state id + 1 by hash, 0 empty */
    int n_shash;              /* power of two */
    uint64_t *tkey;           /* (n_thash) transition key (state << 8 | byte) + 1, 0 empty */
    int32_t *tval;            /* (n_thash) next state */
    int n_thash;              /* power of two */
    int n_trans;              /* transitions stored */
    struct grammar_state tmp; /* advance output scratch */
};

void grammar__walker_free(struct grammar_walker *w)
{
    if (!w) return;
    grammar__pool_release(&w->pool);
    free(w->leaves);
    free(w->states);
    free(w->shash);
    free(w->tkey);
    free(w->tval);
    free(w->tmp.leaf);
    free(w);
}

static struct grammar_walker *walker_new(void)
{
    struct grammar_walker *w = xcalloc(1, sizeof(*w));
    grammar__pool_init(&w->pool);
    w->n_shash = 1024;
    w->shash = xcalloc((size_t)w->n_shash, sizeof(int32_t));
    w->n_thash = 4096;
    w->tkey = xcalloc((size_t)w->n_thash, sizeof(uint64_t));
    w->tval = xmalloc(sizeof(int32_t) * (size_t)w->n_thash);
    return w;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t state_hash(const int32_t *l, int n, bool accept, bool unknown)
{
    uint64_t h = 0xCBF29CE484222325ull ^ (uint64_t)(accept | unknown << 1);
    for (int i = 0; i < n; i++)
        h = (h ^ (uint32_t)l[i]) * 0x100000001B3ull;
    return h ^ (h >> 32);
}

static void shash_insert(struct grammar_walker *w, int id)
{
    const struct wstate *s = &w->states[id];
    size_t k =
        state_hash(w->leaves + s->off, s->n, s->accept, s->unknown) & (size_t)(w->n_shash - 1);
    while (w->shash[k])
        k = (k + 1) & (size_t)(w->n_shash - 1);
    w->shash[k] = id + 1;
}

/* Id of the state (st's leaves sorted in place). */
static int intern(struct grammar_walker *w, struct grammar_state *st)
{
    if (st->n > 1) qsort(st->leaf, (size_t)st->n, sizeof(int32_t), cmp_i32);
    uint64_t h = state_hash(st->leaf, st->n, st->accept, st->unknown);
    for (size_t k = h & (size_t)(w->n_shash - 1); w->shash[k];
         k = (k + 1) & (size_t)(w->n_shash - 1)) {
        const struct wstate *s = &w->states[w->shash[k] - 1];
        if (s->n == st->n && s->accept == st->accept && s->unknown == st->unknown &&
            (st->n == 0 ||
             memcmp(w->leaves + s->off, st->leaf, sizeof(int32_t) * (size_t)st->n) == 0))
            return w->shash[k] - 1;
    }
    if (w->n_states == w->cap_states) {
        w->cap_states = w->cap_states ? 2 * w->cap_states : 256;
        w->states = xrealloc(w->states, sizeof(*w->states) * (size_t)w->cap_states);
    }
    if (w->n_leaves + st->n > w->cap_leaves) {
        w->cap_leaves = MAX(2 * w->cap_leaves, w->n_leaves + st->n + 1024);
        w->leaves = xrealloc(w->leaves, sizeof(int32_t) * (size_t)w->cap_leaves);
    }
    int id = w->n_states++;
    w->states[id] = (struct wstate){w->n_leaves, st->n, st->accept, st->unknown};
    if (st->n) memcpy(w->leaves + w->n_leaves, st->leaf, sizeof(int32_t) * (size_t)st->n);
    w->n_leaves += st->n;
    if (2 * w->n_states > w->n_shash) {
        w->n_shash *= 2;
        w->shash = xrealloc(w->shash, sizeof(int32_t) * (size_t)w->n_shash);
        memset(w->shash, 0, sizeof(int32_t) * (size_t)w->n_shash);
        for (int i = 0; i < w->n_states; i++)
            shash_insert(w, i);
    } else {
        shash_insert(w, id);
    }
    return id;
}

static void thash_put(struct grammar_walker *w, uint64_t key, int32_t val)
{
    size_t k = (key * 0x9E3779B97F4A7C15ull >> 20) & (size_t)(w->n_thash - 1);
    while (w->tkey[k])
        k = (k + 1) & (size_t)(w->n_thash - 1);
    w->tkey[k] = key + 1;
    w->tval[k] = val;
}

/* The state after reading byte b in state sid. */
static int step(const struct grammar *g, struct grammar_walker *w, int sid, unsigned b)
{
    uint64_t key = (uint64_t)sid << 8 | b;
    for (size_t k = (key * 0x9E3779B97F4A7C15ull >> 20) & (size_t)(w->n_thash - 1); w->tkey[k];
         k = (k + 1) & (size_t)(w->n_thash - 1))
        if (w->tkey[k] == key + 1) return w->tval[k];
    const struct wstate *s = &w->states[sid];
    struct grammar_state in = {.leaf = w->leaves + s->off, .n = s->n, .cap = s->n};
    grammar__advance(g, &w->pool, &in, b, &w->tmp);
    int next = intern(w, &w->tmp);
    if (2 * (w->n_trans + 1) > w->n_thash) {
        int old = w->n_thash;
        uint64_t *ok = w->tkey;
        int32_t *ov = w->tval;
        w->n_thash *= 2;
        w->tkey = xcalloc((size_t)w->n_thash, sizeof(uint64_t));
        w->tval = xmalloc(sizeof(int32_t) * (size_t)w->n_thash);
        for (int i = 0; i < old; i++)
            if (ok[i]) thash_put(w, ok[i] - 1, ov[i]);
        free(ok);
        free(ov);
    }
    thash_put(w, key, next);
    w->n_trans++;
    return next;
}

static struct grammar_posmask *compute(struct grammar *g, const struct grammar_vocab *v,
                                       const int32_t *key, int n_key, bool root)
{
    if (g->walker && g->walker->pool.n > WALKER_MAX_NODES) {
        grammar__walker_free(g->walker);
        g->walker = NULL;
    }
    if (!g->walker) g->walker = walker_new();
    struct grammar_walker *w = g->walker;
    int D = v->max_depth + 1;
    int *sd = xmalloc(sizeof(int) * (size_t)D);
    bool *unc = xcalloc((size_t)D, 1);
    struct i32list acc = {0}, un = {0};
    /* Returning below the key means the deepest frame's rule finished. */
    const uint64_t *follow = g->follow[g->rule_of[key[n_key - 1]]];

    int32_t parent = root ? GRAMMAR_PARENT_ROOT : GRAMMAR_PARENT_UNKNW;
    for (int i = n_key - 1; i >= 1; i--)
        parent = grammar__node(&w->pool, key[i], parent);
    struct grammar_state st0 = {0};
    grammar__state_reserve(&st0, 1);
    st0.leaf[st0.n++] = grammar__node(&w->pool, key[0], parent);
    sd[0] = intern(w, &st0);
    free(st0.leaf);
    for (int i = 1; i < v->n_nodes;) {
        int d = v->tn_depth[i];
        unsigned b = v->tn_byte[i];
        const struct wstate *in = &w->states[sd[d - 1]];
        bool u = unc[d - 1] || (in->unknown && grammar__set_has(follow, b));
        int o_id = step(g, w, sd[d - 1], b);
        sd[d] = o_id;
        const struct wstate *o = &w->states[o_id];
        unc[d] = u;
        int t0 = v->tn_first[i], nt = v->tn_ntok[i];
        if (o->n > 0 || o->unknown || o->accept)
            push_range(&acc, v, t0, t0 + nt);
        else if (u)
            push_range(&un, v, t0, t0 + nt);
        if (o->n == 0 && !o->unknown) {
            /* No stack lives inside the frame and none just returned: the
             * deeper tokens all are uncertain (a return happened before) or
             * all rejected. (A state that just returned goes one level
             * deeper, where each child's byte is checked against FOLLOW.) */
            if (u) push_range(&un, v, t0 + nt, v->tn_last[i]);
            i = v->tn_end[i];
            continue;
        }
        i++;
    }
    struct grammar_posmask *pm = xcalloc(1, sizeof(*pm));
    int words = (v->n_vocab + 63) / 64;
    pm->n_accept = acc.n;
    if ((size_t)acc.n * 4 < (size_t)words * 8) {
        pm->accept_list = acc.a;
        acc.a = NULL;
    } else {
        pm->accept = xcalloc((size_t)words, 8);
        for (int k = 0; k < acc.n; k++)
            pm->accept[acc.a[k] >> 6] |= 1ull << (acc.a[k] & 63);
    }
    pm->uncertain = un.a;
    pm->n_uncertain = un.n;
    free(acc.a);
    free(sd);
    free(unc);
    return pm;
}

static uint64_t key_hash(const int32_t *key, int n, bool root)
{
    uint64_t h = root ? 0x51ED27B4C3A9E1F3ull : 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)key[i];
        h *= 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    return h ? h : 1;
}

static void tabs_grow(struct grammar *g)
{
    int cap = g->cap_tabs ? 2 * g->cap_tabs : 256;
    struct grammar_ctxtab *t = xcalloc((size_t)cap, sizeof(*t));
    for (int i = 0; i < g->cap_tabs; i++) {
        if (!g->tabs[i].hash) continue;
        size_t k = g->tabs[i].hash & (size_t)(cap - 1);
        while (t[k].hash)
            k = (k + 1) & (size_t)(cap - 1);
        t[k] = g->tabs[i];
    }
    free(g->tabs);
    g->tabs = t;
    g->cap_tabs = cap;
}

struct grammar_posmask *grammar__table(struct grammar *g, const struct grammar_vocab *v,
                                       const int32_t *key, int n_key, bool root, bool *owned)
{
    CHECK(n_key >= 1 && key[0] >= 0 && key[0] < g->n_elems &&
          g->elems[key[0]].kind == GRAMMAR_E_BYTES);
    uint64_t h = key_hash(key, n_key, root);
    *owned = false;
    pthread_mutex_lock(&g->mu);
    if (!g->vocab) g->vocab = v;
    CHECK(g->vocab == v);
    if (g->cap_tabs) {
        for (size_t k = h & (size_t)(g->cap_tabs - 1); g->tabs[k].hash;
             k = (k + 1) & (size_t)(g->cap_tabs - 1)) {
            struct grammar_ctxtab *t = &g->tabs[k];
            if (t->hash == h && t->n_key == n_key && t->root == root &&
                memcmp(t->key, key, sizeof(int32_t) * (size_t)n_key) == 0) {
                pthread_mutex_unlock(&g->mu);
                return t->pm;
            }
        }
    }
    struct grammar_posmask *pm = compute(g, v, key, n_key, root);
    g->n_builds++;
    if (g->n_tabs >= GRAMMAR_MAX_TABLES) {
        /* Bounded memory: beyond the cap a table serves one mask only. */
        *owned = true;
    } else {
        if (2 * (g->n_tabs + 1) > g->cap_tabs) tabs_grow(g);
        size_t k = h & (size_t)(g->cap_tabs - 1);
        while (g->tabs[k].hash)
            k = (k + 1) & (size_t)(g->cap_tabs - 1);
        struct grammar_ctxtab *t = &g->tabs[k];
        t->hash = h;
        t->key = xmalloc(sizeof(int32_t) * (size_t)n_key);
        memcpy(t->key, key, sizeof(int32_t) * (size_t)n_key);
        t->n_key = n_key;
        t->root = root;
        t->pm = pm;
        g->n_tabs++;
    }
    pthread_mutex_unlock(&g->mu);
    return pm;
}

int grammar_matcher_fill_mask(struct grammar_matcher *m, uint64_t *mask)
{
    struct grammar *g = grammar__matcher_grammar(m);
    const struct grammar_vocab *v = grammar__matcher_vocab(m);
    CHECK(v);
    int words = (v->n_vocab + 63) / 64;
    memset(mask, 0, sizeof(uint64_t) * (size_t)words);
    if (grammar_matcher_is_terminated(m)) return 0;
    const struct grammar_state *st = grammar__matcher_state(m);
    const struct grammar_pool *pool = grammar__matcher_pool(m);
    int32_t key[GRAMMAR_CTX_DEPTH];
    bool any_uncertain = false;
    /* Leaves with equal top frames share one table; leaves are few, and
     * equal stacks are equal nodes, so the only duplicates are stacks that
     * differ below the key: the table lookup dedups those. */
    struct grammar_posmask *tabs_small[16], **tabs = tabs_small;
    bool owned_small[16], *owned = owned_small;
    if (st->n > 16) {
        tabs = xmalloc(sizeof(*tabs) * (size_t)st->n);
        owned = xmalloc(sizeof(bool) * (size_t)st->n);
    }
    for (int i = 0; i < st->n; i++) {
        int n_key = 0;
        int32_t node = st->leaf[i];
        while (node >= 0 && n_key < GRAMMAR_CTX_DEPTH) {
            key[n_key++] = pool->pos[node];
            node = pool->parent[node];
        }
        tabs[i] = grammar__table(g, v, key, n_key, node == GRAMMAR_PARENT_ROOT, &owned[i]);
        const struct grammar_posmask *pm = tabs[i];
        if (pm->accept)
            for (int w = 0; w < words; w++)
                mask[w] |= pm->accept[w];
        else
            for (int j = 0; j < pm->n_accept; j++)
                mask[pm->accept_list[j] >> 6] |= 1ull << (pm->accept_list[j] & 63);
        any_uncertain |= pm->n_uncertain > 0;
    }
    for (int i = 0; i < st->n && any_uncertain; i++) {
        const struct grammar_posmask *pm = tabs[i];
        for (int j = 0; j < pm->n_uncertain; j++) {
            int32_t t = pm->uncertain[j];
            if ((mask[t >> 6] >> (t & 63)) & 1) continue;
            if (grammar__matcher_try(m, v->bytes + v->off[t], v->off[t + 1] - v->off[t]))
                mask[t >> 6] |= 1ull << (t & 63);
        }
    }
    for (int i = 0; i < st->n; i++)
        if (owned[i]) grammar__posmask_free(tabs[i]);
    if (tabs != tabs_small) {
        free(tabs);
        free(owned);
    }
    if (st->accept)
        for (int k = 0; k < v->n_eog; k++)
            mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    int count = 0;
    for (int w = 0; w < words; w++)
        count += __builtin_popcountll(mask[w]);
    return count;
}

void grammar_table_stats(struct grammar *g, int *n_cached, uint64_t *n_built)
{
    pthread_mutex_lock(&g->mu);
    *n_cached = g->n_tabs;
    *n_built = g->n_builds;
    pthread_mutex_unlock(&g->mu);
}
