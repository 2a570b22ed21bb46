/*
 * mask.c - which tokens may come next: per-position tables plus a run-time
 * check of the few tokens whose fate depends on the stack.
 *
 * The idea is XGrammar's adaptive token mask cache. A matcher state is a set
 * of stacks; each stack's top is a BYTES position pos inside some rule R.
 * For each token, walking its bytes from that top either
 *
 *   - stays inside R (or in rules R calls) until the bytes run out:
 *     accepted, whatever lies below R on the stack;
 *   - dies inside R: rejected, whatever lies below;
 *   - reaches the end of R with bytes left: the verdict depends on what
 *     follows R on this particular stack - "uncertain".
 *
 * So per position we precompute, once per grammar and vocabulary, the
 * accepted set (a bitmap, or a list when short) and the uncertain list, by
 * walking the vocabulary trie from the stack (pos, UNKNOWN): common prefixes
 * are read once, and a subtree is cut as soon as no stack survives. An
 * uncertain token whose next byte cannot follow R anywhere in the grammar
 * (R's FOLLOW set) is rejected outright, which keeps the uncertain lists
 * short (e.g. in a JSON string only tokens like `",` or `"}` remain).
 *
 * At run time, fill_mask ORs the accepted sets of the state's distinct top
 * positions and walks each uncertain token's bytes from the real state.
 *
 *   mask = OR(accept[pos] for pos in tops)  |  {t in uncertain[pos]: walk(state, t) ok}
 *          | EOG tokens if the state accepts
 *
 * Tables are computed lazily, under the grammar's mutex, the first time a
 * state has that position on top (grammar_precompute does all of them).
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

static struct grammar_posmask *compute(const struct grammar *g, const struct grammar_vocab *v,
                                       const int32_t *key, int n_key, bool root)
{
    struct grammar_pool pool;
    grammar__pool_init(&pool);
    int D = v->max_depth + 1;
    struct grammar_state *st = xcalloc((size_t)D, sizeof(*st));
    bool *unc = xcalloc((size_t)D, 1);
    struct i32list acc = {0}, un = {0};
    /* Returning below the key means the deepest frame's rule finished. */
    const uint64_t *follow = g->follow[g->rule_of[key[n_key - 1]]];

    int32_t parent = root ? GRAMMAR_PARENT_ROOT : GRAMMAR_PARENT_UNKNW;
    for (int i = n_key - 1; i >= 1; i--)
        parent = grammar__node(&pool, key[i], parent);
    pool.gen++;
    grammar__state_reserve(&st[0], 1);
    st[0].leaf[st[0].n++] = grammar__node(&pool, key[0], parent);
    for (int i = 1; i < v->n_nodes;) {
        int d = v->tn_depth[i];
        unsigned b = v->tn_byte[i];
        const struct grammar_state *in = &st[d - 1];
        struct grammar_state *o = &st[d];
        bool u = unc[d - 1] || (in->unknown && grammar__set_has(follow, b));
        if (in->n > 0)
            grammar__advance(g, &pool, in, b, o);
        else
            o->n = 0, o->accept = o->unknown = false;
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
    for (int d = 0; d < D; d++)
        free(st[d].leaf);
    free(st);
    free(unc);
    grammar__pool_release(&pool);
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
