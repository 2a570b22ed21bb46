/*
 * dfa.c - the intersection of regexes, their lookaheads and length bounds as
 * one minimal DFA, emitted as a right-linear grammar (one rule per state).
 *
 * A JSON Schema string with both `format` and `pattern` (what zod emits for
 * emails, UUIDs, datetimes) must be in both languages; `minLength` and
 * `maxLength` cut them further. Each is regular, so their intersection is:
 *
 *   regex trees (regex.h) ──> NFAs (Thompson) ──> product subset construction
 *        lookahead bodies ──> their own DFAs      │ (threads carry lookahead
 *                                                 v  obligations)
 *                  Hopcroft minimization ──> × a character count (length
 *                                                 │ bounds), minimized again
 *                                                 v
 *                       rules: q ::= [chars] q' | ... | ""  (q accepting)
 *
 * Alphabet. Every character set of every regex is cut into classes: maximal
 * sets of code points that no set tells apart (surrogates are in none, they
 * are not characters). Automata read classes; the rules read the classes'
 * code points back (in JSON string spelling when asked).
 *
 * Product state. For each part (one regex), the set of its NFA threads; a
 * thread is an NFA state plus the lookaheads it still owes: pairs (lookahead,
 * state of that lookahead's DFA). Crossing (?=X) adds X's start state; each
 * character advances every owed DFA; an owed DFA that can no longer accept
 * kills the thread, one that accepts everything from here is discharged. A
 * thread accepts at the end when its NFA state is final and every DFA it owes
 * accepts. A lookahead's DFA is that of X·Σ* (X matches a prefix of the rest;
 * X's own `$` is an inner lookahead "nothing follows"), complemented for
 * (?!X). Lookaheads nest: a body's DFA is built by the same construction.
 *
 * Discharging by length. A bounded format (hostname: at most 253 characters
 * in its own structure) met with a counting lookahead (zod's (?=.{1,253}$))
 * would multiply the format's states by the count. But a thread's suffix is
 * no longer than Lmax (the longest string any part can still read, from the
 * NFA: infinite through a cycle) and made of the classes S that every part
 * can still read; an owed DFA in state q that accepts every string over S of
 * length up to Lmax can never fail, so it is discharged. U(q, S), the
 * largest such length, is the distance from q to a rejecting state over S,
 * minus one (a breadth-first search on the reversed DFA, cached per S).
 *
 * Length bounds. minLength/maxLength multiply the minimal DFA by a count of
 * characters (dfa_count): a table walk per state, no threads. A state stops
 * counting once the minimum is reached and its longest string to acceptance
 * cannot pass the maximum, so maxLength beside a shorter format is free.
 *
 * Budget: GRAMMAR_DFA_MAX_STATES states over all the DFAs of the subset
 * construction (before minimization), GRAMMAR_DFA_MAX_COUNTED of the length
 * product, DFA_MAX_NFA NFA states; beyond any, ERR_INVALID.
 *
 * References: Thompson's construction and the subset construction (Aho,
 * Sethi, Ullman); Hopcroft's minimization (1971), in the splitter-block form
 * over a refinable partition (Valmari, Lehtinen 2008). Lookaheads as
 * obligations follow the alternating-automaton reading of regex lookaround
 * (Morihata 2012; Berglund, van der Merwe 2021).
 *
 * Thread: pure function of its input; all memory is freed before returning.
 */
#include "grammar/dfa.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define DFA_MAX_NFA (1 << 17) /* NFA states of all parts and lookahead bodies */
#define DFA_INF     INT32_MAX /* an unbounded length */
#define DFA_DEAD    (-1)      /* an obligation set that killed its thread */

/* ---- growable int vector ---- */

struct ivec {
    int32_t *v; /* (n) */
    int n;      /* used */
    int cap;    /* allocated */
};

static void iv_push(struct ivec *a, int32_t x)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 16;
        a->v = xrealloc(a->v, sizeof(*a->v) * (size_t)a->cap);
    }
    a->v[a->n++] = x;
}

/* ---- interning of int arrays (obligation sets, product states, class sets) ---- */

struct intern {
    struct ivec pool; /* keys back to back */
    struct ivec off;  /* (n + 1) start of each key in pool */
    int32_t *slot;    /* (cap) ids, -1 empty */
    int cap;          /* power of two */
};

static int intern_n(const struct intern *t)
{
    return t->off.n ? t->off.n - 1 : 0;
}

static const int32_t *intern_key(const struct intern *t, int id, int *len)
{
    static const int32_t none[1];
    *len = t->off.v[id + 1] - t->off.v[id];
    return t->pool.v ? t->pool.v + t->off.v[id] : none;
}

static uint64_t hash_ints(const int32_t *k, int n)
{
    return XXH3_64bits(k, sizeof(*k) * (size_t)n);
}

/* The id of key[0..n), added if new (*added then true). */
static int intern_get(struct intern *t, const int32_t *key, int n, bool *added)
{
    if (!t->off.n) iv_push(&t->off, 0);
    if (2 * (intern_n(t) + 1) > t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        int32_t *slot = xmalloc(sizeof(*slot) * (size_t)cap);
        for (int i = 0; i < cap; i++)
            slot[i] = -1;
        for (int id = 0; id < intern_n(t); id++) {
            int len;
            const int32_t *k = intern_key(t, id, &len);
            uint64_t h = hash_ints(k, len) & (uint64_t)(cap - 1);
            while (slot[h] >= 0)
                h = (h + 1) & (uint64_t)(cap - 1);
            slot[h] = id;
        }
        free(t->slot);
        t->slot = slot;
        t->cap = cap;
    }
    uint64_t h = hash_ints(key, n) & (uint64_t)(t->cap - 1);
    for (; t->slot[h] >= 0; h = (h + 1) & (uint64_t)(t->cap - 1)) {
        int len;
        const int32_t *k = intern_key(t, t->slot[h], &len);
        if (len == n && !memcmp(k, key, sizeof(*k) * (size_t)n)) {
            if (added) *added = false;
            return t->slot[h];
        }
    }
    int id = intern_n(t);
    for (int i = 0; i < n; i++)
        iv_push(&t->pool, key[i]);
    iv_push(&t->off, t->pool.n);
    t->slot[h] = id;
    if (added) *added = true;
    return id;
}

static void intern_release(struct intern *t)
{
    free(t->pool.v);
    free(t->off.v);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

/* ---- automata ---- */

/* A DFA over the classes: partial (-1: no transition) or complete. */
struct dfa {
    int n;          /* states; 0 is the start */
    int32_t *trans; /* (n, k) next state, or -1 */
    uint8_t *acc;   /* (n) accepting */
};

static void dfa_release(struct dfa *d)
{
    free(d->trans);
    free(d->acc);
    memset(d, 0, sizeof(*d));
}

enum { NE_EPS, NE_CHARS, NE_LOOK };

struct nedge {
    int32_t from; /* source state */
    int32_t kind; /* NE_* */
    int32_t arg;  /* CHARS: global set; LOOK: lookahead */
    int32_t to;   /* target state */
};

/* A lookahead: the complete minimal DFA of its language (X·Σ*, or its
 * complement for (?!X); "the empty string" for an inner `$`). */
struct look {
    int rx, node;       /* its part and LOOK node (-1 for `$`) */
    struct dfa d;       /* complete, start 0 */
    uint8_t *dead;      /* (d.n) no accepting state reachable */
    uint8_t *univ;      /* (d.n) no rejecting state reachable: accepts everything */
    int32_t *rev_off;   /* (d.n + 1) reversed transitions of each state in rev */
    int32_t *rev;       /* (d.n * k) predecessor * k + class */
    struct ivec ucache; /* per class-set id: 1 + index into ctx.udist of its U array, 0 none */
};

/* A lookahead body's NFA, awaiting its DFA. */
struct pending {
    int look;  /* its id */
    int start; /* body NFA start */
    int final; /* body NFA final */
};

struct ctx {
    const struct grammar_lang_part *parts; /* the regexes */
    int n_parts;                           /* parts */
    struct err_msg *msg;                   /* error output */
    int err;                               /* first error */

    /* alphabet */
    uint32_t *iv_lo; /* (n_iv + 1) interval i is [iv_lo[i], iv_lo[i + 1]) */
    int32_t *iv_cls; /* (n_iv) class of each interval, -1 for surrogates */
    int n_iv;        /* intervals */
    int k;           /* classes */
    int w;           /* 64-bit words of a class bitset */
    int *set_base;   /* (n_parts) first global set of each part's regex */
    int n_gsets;     /* global sets: every regex's sets, then "any character" */
    uint64_t *gsets; /* (n_gsets, w) class bitset of each global set */
    int gset_any;    /* the global set of every character */

    /* NFA, all parts and lookahead bodies in one state space */
    struct ivec edges_raw; /* built edges, 4 ints each (struct nedge) */
    int n_nfa;             /* states */
    int32_t *e_off;        /* (n_nfa + 1) CSR offsets into e */
    struct nedge *e;       /* edges sorted by source */
    uint8_t *is_final;     /* (n_nfa) the final state of some part or body */
    int32_t *lmax;         /* (n_nfa) longest string to the final: -1 none, DFA_INF cycle */
    int32_t *scc_of;       /* (n_nfa) strongly connected component */
    uint64_t *scc_reach;   /* (n_scc, w) classes readable on the way to the final */

    /* lookaheads: 0 is `$` ("nothing follows") */
    struct look *looks; /* (n_looks) */
    int n_looks;        /* lookaheads */
    int cap_looks;      /* allocated */
    int32_t *look_of;   /* (total nodes of all regexes) lookahead of a LOOK node, -1 unbuilt */
    int *node_base;     /* (n_parts) first entry of each regex in look_of */
    int n_states_built; /* DFA states created so far (budget) */

    struct pending *pend; /* (n_pend) lookahead bodies to determinize, inner ones first */
    int n_pend;           /* entries */
    int cap_pend;         /* allocated */
    struct ivec finals;   /* final state of every part and body */

    struct intern osets; /* obligation sets: sorted (look, state) pairs */
    struct ivec ostep;   /* (n_osets * k) oset after a class, -2 unknown */
    struct intern csets; /* class sets S (bitsets) */
    struct ivec udist;   /* concatenated U arrays */
};

static int fail_states(struct ctx *x)
{
    if (!x->err)
        x->err = err_set(x->msg, ERR_INVALID, "the automaton needs more than %d states",
                         GRAMMAR_DFA_MAX_STATES);
    return x->err;
}

static bool bit(const uint64_t *s, int i)
{
    return (s[i >> 6] >> (i & 63)) & 1;
}

static void bit_set(uint64_t *s, int i)
{
    s[i >> 6] |= 1ull << (i & 63);
}

/* ---- alphabet ---- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Index of the interval starting at cp (cp is a boundary). */
static int iv_find(const struct ctx *x, uint32_t cp)
{
    int lo = 0, hi = x->n_iv - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (x->iv_lo[mid] <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void alphabet_build(struct ctx *x)
{
    struct ivec bounds = {0};
    x->set_base = xmalloc(sizeof(int) * (size_t)x->n_parts);
    int n_g = 0;
    for (int p = 0; p < x->n_parts; p++) {
        const struct grammar_rx *rx = x->parts[p].rx;
        x->set_base[p] = n_g;
        n_g += rx->n_sets;
        for (int s = 0; s < rx->n_sets; s++)
            for (int r = 0; r < rx->set_n[s]; r++) {
                iv_push(&bounds, (int32_t)rx->sets[s][r].lo);
                iv_push(&bounds, (int32_t)(rx->sets[s][r].hi + 1));
            }
    }
    x->gset_any = n_g++;
    x->n_gsets = n_g;
    iv_push(&bounds, 0);
    iv_push(&bounds, 0xD800);
    iv_push(&bounds, 0xE000);
    iv_push(&bounds, GRAMMAR_MAX_CP + 1);
    qsort(bounds.v, (size_t)bounds.n, sizeof(uint32_t), cmp_u32);
    int nb = 0;
    for (int i = 0; i < bounds.n; i++)
        if (!nb || bounds.v[i] != bounds.v[nb - 1]) bounds.v[nb++] = bounds.v[i];
    x->iv_lo = (uint32_t *)bounds.v;
    x->n_iv = nb - 1;

    /* Membership of every interval in every set, as rows of bits. */
    int wg = (n_g + 63) / 64;
    uint64_t *rows = xcalloc((size_t)x->n_iv * (size_t)wg, sizeof(uint64_t));
    for (int p = 0; p < x->n_parts; p++) {
        const struct grammar_rx *rx = x->parts[p].rx;
        for (int s = 0; s < rx->n_sets; s++)
            for (int r = 0; r < rx->set_n[s]; r++)
                for (int i = iv_find(x, rx->sets[s][r].lo);
                     i < x->n_iv && x->iv_lo[i] <= rx->sets[s][r].hi; i++)
                    bit_set(rows + (size_t)i * wg, x->set_base[p] + s);
    }
    x->iv_cls = xmalloc(sizeof(int32_t) * (size_t)x->n_iv);
    struct intern classes = {0};
    x->k = 0;
    for (int i = 0; i < x->n_iv; i++) {
        if (x->iv_lo[i] == 0xD800) {
            x->iv_cls[i] = -1;
            continue;
        }
        bool added;
        int c = intern_get(&classes, (const int32_t *)(rows + (size_t)i * wg), 2 * wg, &added);
        x->iv_cls[i] = c;
        if (added) x->k++;
    }
    intern_release(&classes);
    x->w = (x->k + 63) / 64;
    x->gsets = xcalloc((size_t)n_g * (size_t)x->w, sizeof(uint64_t));
    for (int i = 0; i < x->n_iv; i++) {
        int c = x->iv_cls[i];
        if (c < 0) continue;
        for (int g = 0; g < n_g - 1; g++)
            if (bit(rows + (size_t)i * wg, g)) bit_set(x->gsets + (size_t)g * x->w, c);
        bit_set(x->gsets + (size_t)x->gset_any * x->w, c);
    }
    free(rows);
}

/* ---- NFA ---- */

static int nfa_state(struct ctx *x)
{
    if (x->n_nfa >= DFA_MAX_NFA) {
        if (!x->err)
            x->err = err_set(x->msg, ERR_INVALID, "the regexes need more than %d automaton states",
                             DFA_MAX_NFA);
        return 0;
    }
    return x->n_nfa++;
}

static void nfa_edge(struct ctx *x, int from, int kind, int arg, int to)
{
    iv_push(&x->edges_raw, from);
    iv_push(&x->edges_raw, kind);
    iv_push(&x->edges_raw, arg);
    iv_push(&x->edges_raw, to);
}

static int look_of_node(struct ctx *x, int part, int node);

/* Thompson fragment of node nd of part p's regex: *s -> ... -> *t. */
static void nfa_frag(struct ctx *x, int p, int nd, int *s, int *t)
{
    const struct grammar_rx *rx = x->parts[p].rx;
    const struct grammar_rxnode *n = &rx->nodes[nd];
    *s = nfa_state(x);
    if (x->err) {
        *t = *s;
        return;
    }
    switch (n->kind) {
    case GRAMMAR_RX_CHARS:
        *t = nfa_state(x);
        nfa_edge(x, *s, NE_CHARS, x->set_base[p] + n->set, *t);
        break;
    case GRAMMAR_RX_CAT: {
        int cur = *s;
        for (int c = n->child; c >= 0 && !x->err; c = rx->nodes[c].next) {
            int a, b;
            nfa_frag(x, p, c, &a, &b);
            nfa_edge(x, cur, NE_EPS, 0, a);
            cur = b;
        }
        *t = cur;
        break;
    }
    case GRAMMAR_RX_ALT:
        *t = nfa_state(x);
        for (int c = n->child; c >= 0 && !x->err; c = rx->nodes[c].next) {
            int a, b;
            nfa_frag(x, p, c, &a, &b);
            nfa_edge(x, *s, NE_EPS, 0, a);
            nfa_edge(x, b, NE_EPS, 0, *t);
        }
        break;
    case GRAMMAR_RX_REPEAT: {
        int cur = *s;
        for (int i = 0; i < n->min && !x->err; i++) {
            int a, b;
            nfa_frag(x, p, n->child, &a, &b);
            nfa_edge(x, cur, NE_EPS, 0, a);
            cur = b;
        }
        *t = nfa_state(x);
        if (n->max == GRAMMAR_INF) {
            int a, b;
            nfa_frag(x, p, n->child, &a, &b);
            nfa_edge(x, cur, NE_EPS, 0, a);
            nfa_edge(x, b, NE_EPS, 0, cur);
            nfa_edge(x, cur, NE_EPS, 0, *t);
            break;
        }
        /* optional copies, each able to skip to the end: (x(x(x)?)?)? */
        for (int i = n->min; i < n->max && !x->err; i++) {
            int a, b;
            nfa_frag(x, p, n->child, &a, &b);
            nfa_edge(x, cur, NE_EPS, 0, a);
            nfa_edge(x, cur, NE_EPS, 0, *t);
            cur = b;
        }
        nfa_edge(x, cur, NE_EPS, 0, *t);
        break;
    }
    case GRAMMAR_RX_LOOK: {
        int j = look_of_node(x, p, nd);
        *t = nfa_state(x);
        nfa_edge(x, *s, NE_LOOK, j, *t);
        break;
    }
    case GRAMMAR_RX_END:
        *t = nfa_state(x);
        nfa_edge(x, *s, NE_LOOK, 0, *t);
        break;
    default:
        CHECK(!"unknown regex node");
    }
}

/* A state that reads any characters and returns to itself: Σ*. */
static int nfa_any_loop(struct ctx *x)
{
    int l = nfa_state(x);
    nfa_edge(x, l, NE_CHARS, x->gset_any, l);
    return l;
}

static struct look *look_new(struct ctx *x, int rx, int node)
{
    if (x->n_looks == x->cap_looks) {
        x->cap_looks = x->cap_looks ? 2 * x->cap_looks : 8;
        x->looks = xrealloc(x->looks, sizeof(*x->looks) * (size_t)x->cap_looks);
    }
    struct look *l = &x->looks[x->n_looks++];
    memset(l, 0, sizeof(*l));
    l->rx = rx;
    l->node = node;
    return l;
}

/* The lookahead of LOOK node nd of part p: its body NFA (X·Σ*) is built
 * once, however often the node is copied by a repetition; its id comes
 * after those of the lookaheads inside it. */
static int look_of_node(struct ctx *x, int p, int nd)
{
    int slot = x->node_base[p] + nd;
    if (x->look_of[slot] >= 0) return x->look_of[slot];
    const struct grammar_rxnode *n = &x->parts[p].rx->nodes[nd];
    int a, b;
    nfa_frag(x, p, n->child, &a, &b);
    int l = nfa_any_loop(x);
    nfa_edge(x, b, NE_EPS, 0, l);
    iv_push(&x->finals, l);
    int id = (int)(look_new(x, p, nd) - x->looks);
    x->look_of[slot] = id;
    if (x->n_pend == x->cap_pend) {
        x->cap_pend = x->cap_pend ? 2 * x->cap_pend : 8;
        x->pend = xrealloc(x->pend, sizeof(*x->pend) * (size_t)x->cap_pend);
    }
    x->pend[x->n_pend++] = (struct pending){.look = id, .start = a, .final = l};
    return id;
}

/* Edges by source (CSR), final flags. */
static void nfa_index(struct ctx *x)
{
    int n = x->n_nfa, ne = x->edges_raw.n / 4;
    x->e_off = xcalloc((size_t)n + 1, sizeof(int32_t));
    x->e = xmalloc(sizeof(struct nedge) * (size_t)(ne ? ne : 1));
    const int32_t *r = x->edges_raw.v;
    for (int i = 0; i < ne; i++)
        x->e_off[r[4 * i] + 1]++;
    for (int s = 0; s < n; s++)
        x->e_off[s + 1] += x->e_off[s];
    int32_t *cur = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    memcpy(cur, x->e_off, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < ne; i++)
        x->e[cur[r[4 * i]]++] = (struct nedge){
            .from = r[4 * i], .kind = r[4 * i + 1], .arg = r[4 * i + 2], .to = r[4 * i + 3]};
    free(cur);
    x->is_final = xcalloc((size_t)(n ? n : 1), 1);
    for (int i = 0; i < x->finals.n; i++)
        x->is_final[x->finals.v[i]] = 1;
}

/* Per NFA state: the longest string (in characters) that can still lead to
 * its final state, and the classes read on the way, from the strongly
 * connected components of the states that can reach a final (Tarjan's
 * algorithm, iterative; components come out sinks first). Lookaheads are
 * read as plain epsilon edges: they only remove strings, so both are upper
 * bounds. */
static void nfa_analyse(struct ctx *x)
{
    int n = x->n_nfa, w = x->w;
    int ne = x->e_off[n];
    /* co-reachability: reverse breadth-first search from the finals */
    int32_t *roff = xcalloc((size_t)n + 1, sizeof(int32_t));
    int32_t *rv = xmalloc(sizeof(int32_t) * (size_t)(ne ? ne : 1));
    for (int i = 0; i < ne; i++)
        roff[x->e[i].to + 1]++;
    for (int s = 0; s < n; s++)
        roff[s + 1] += roff[s];
    int32_t *cur = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    memcpy(cur, roff, sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < ne; i++)
        rv[cur[x->e[i].to]++] = x->e[i].from;
    uint8_t *co = xcalloc((size_t)(n ? n : 1), 1);
    int32_t *q = cur; /* reused as the queue */
    int qh = 0, qt = 0;
    for (int i = 0; i < x->finals.n; i++)
        if (!co[x->finals.v[i]]) co[x->finals.v[i]] = 1, q[qt++] = x->finals.v[i];
    while (qh < qt) {
        int t = q[qh++];
        for (int r = roff[t]; r < roff[t + 1]; r++)
            if (!co[rv[r]]) co[rv[r]] = 1, q[qt++] = rv[r];
    }
    free(roff);
    free(rv);
    free(cur);

    x->lmax = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    x->scc_of = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *idx = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *low = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *stk = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *cs = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *ci = xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    uint8_t *on = xcalloc((size_t)(n ? n : 1), 1);
    struct ivec scc_l = {0}; /* lmax per component */
    size_t reach_cap = 0;
    for (int s = 0; s < n; s++)
        idx[s] = -1, x->scc_of[s] = -1, x->lmax[s] = -1;
    int counter = 0, sp = 0, n_scc = 0;
    for (int root = 0; root < n; root++) {
        if (!co[root] || idx[root] >= 0) continue;
        int csp = 0;
        idx[root] = low[root] = counter++;
        stk[sp++] = root, on[root] = 1;
        cs[csp] = root, ci[csp++] = x->e_off[root];
        while (csp > 0) {
            int v = cs[csp - 1];
            if (ci[csp - 1] < x->e_off[v + 1]) {
                int u = x->e[ci[csp - 1]++].to;
                if (!co[u]) continue;
                if (idx[u] < 0) {
                    idx[u] = low[u] = counter++;
                    stk[sp++] = u, on[u] = 1;
                    cs[csp] = u, ci[csp++] = x->e_off[u];
                } else if (on[u] && idx[u] < low[v]) {
                    low[v] = idx[u];
                }
                continue;
            }
            csp--;
            if (csp > 0 && low[v] < low[cs[csp - 1]]) low[cs[csp - 1]] = low[v];
            if (low[v] != idx[v]) continue;
            /* v roots a component: pop it, then its length and classes */
            int id = n_scc++;
            int top = sp;
            do {
                int u = stk[--sp];
                on[u] = 0;
                x->scc_of[u] = id;
            } while (stk[sp] != v);
            if ((size_t)n_scc * (size_t)w > reach_cap) {
                reach_cap = reach_cap ? 2 * reach_cap : 64 * (size_t)w;
                x->scc_reach = xrealloc(x->scc_reach, sizeof(uint64_t) * reach_cap);
            }
            uint64_t *rc = x->scc_reach + (size_t)id * w;
            memset(rc, 0, sizeof(uint64_t) * (size_t)w);
            bool inf = false;
            int lm = -1;
            for (int m = sp; m < top; m++) {
                int u = stk[m];
                if (x->is_final[u]) lm = MAX(lm, 0);
                for (int e = x->e_off[u]; e < x->e_off[u + 1]; e++) {
                    const struct nedge *ed = &x->e[e];
                    if (!co[ed->to]) continue;
                    bool ch = ed->kind == NE_CHARS;
                    if (ch)
                        for (int i = 0; i < w; i++)
                            rc[i] |= x->gsets[(size_t)ed->arg * w + i];
                    int sc = x->scc_of[ed->to];
                    if (sc == id) {
                        if (ch) inf = true;
                        continue;
                    }
                    for (int i = 0; i < w; i++)
                        rc[i] |= x->scc_reach[(size_t)sc * w + i];
                    if (scc_l.v[sc] == DFA_INF)
                        inf = true;
                    else
                        lm = MAX(lm, scc_l.v[sc] + (ch ? 1 : 0));
                }
            }
            iv_push(&scc_l, inf ? DFA_INF : lm);
        }
    }
    for (int s = 0; s < n; s++)
        if (x->scc_of[s] >= 0) x->lmax[s] = scc_l.v[x->scc_of[s]];
    free(scc_l.v);
    free(idx);
    free(low);
    free(stk);
    free(cs);
    free(ci);
    free(on);
    free(co);
}

/* ---- complete DFAs: minimization, flags ---- */

/* Replaces the complete DFA d by its minimal equivalent (start 0):
 * Hopcroft's algorithm, each popped splitter block applied to every class. */
static void dfa_minimize(struct dfa *d, int k)
{
    int n = d->n;
    size_t nk = (size_t)n * (size_t)k;
    int32_t *roff = xcalloc(nk + 1, sizeof(int32_t));
    int32_t *rev = xmalloc(sizeof(int32_t) * (nk ? nk : 1));
    for (int s = 0; s < n; s++)
        for (int c = 0; c < k; c++)
            roff[(size_t)c * n + d->trans[(size_t)s * k + c] + 1]++;
    for (size_t i = 0; i < nk; i++)
        roff[i + 1] += roff[i];
    int32_t *cur = xmalloc(sizeof(int32_t) * (nk ? nk : 1));
    memcpy(cur, roff, sizeof(int32_t) * nk);
    for (int s = 0; s < n; s++)
        for (int c = 0; c < k; c++)
            rev[cur[(size_t)c * n + d->trans[(size_t)s * k + c]]++] = s;
    free(cur);

    int32_t *el = xmalloc(sizeof(int32_t) * (size_t)n), *loc = xmalloc(sizeof(int32_t) * (size_t)n);
    int32_t *blk = xmalloc(sizeof(int32_t) * (size_t)n),
            *first = xmalloc(sizeof(int32_t) * (size_t)n);
    int32_t *end = xmalloc(sizeof(int32_t) * (size_t)n),
            *marks = xcalloc((size_t)n, sizeof(int32_t));
    int32_t *wl = xmalloc(sizeof(int32_t) * (size_t)n),
            *touched = xmalloc(sizeof(int32_t) * (size_t)n);
    int32_t *snap = xmalloc(sizeof(int32_t) * (size_t)n);
    uint8_t *inw = xcalloc((size_t)n, 1);
    int m = 0, nb = 0, wn = 0;
    for (int s = 0; s < n; s++)
        if (d->acc[s]) el[m++] = s;
    int na = m;
    for (int s = 0; s < n; s++)
        if (!d->acc[s]) el[m++] = s;
    if (na > 0) first[nb] = 0, end[nb] = na, nb++;
    if (na < n) first[nb] = na, end[nb] = n, nb++;
    for (int b = 0; b < nb; b++) {
        for (int i = first[b]; i < end[b]; i++)
            blk[el[i]] = b, loc[el[i]] = i;
        wl[wn++] = b, inw[b] = 1;
    }
    while (wn > 0) {
        int B = wl[--wn];
        inw[B] = 0;
        int ns = end[B] - first[B];
        memcpy(snap, el + first[B], sizeof(int32_t) * (size_t)ns);
        for (int c = 0; c < k; c++) {
            int nt = 0;
            for (int i = 0; i < ns; i++) {
                size_t t = (size_t)c * n + (size_t)snap[i];
                for (int r = roff[t]; r < roff[t + 1]; r++) {
                    int p = rev[r], b = blk[p], mpos = first[b] + marks[b];
                    if (loc[p] < mpos) continue; /* marked already */
                    int o = el[mpos];
                    el[mpos] = p, el[loc[p]] = o;
                    loc[o] = loc[p], loc[p] = mpos;
                    if (marks[b]++ == 0) touched[nt++] = b;
                }
            }
            for (int i = 0; i < nt; i++) {
                int b = touched[i];
                if (marks[b] < end[b] - first[b]) {
                    int z = nb++;
                    first[z] = first[b], end[z] = first[b] + marks[b];
                    first[b] = end[z];
                    for (int j = first[z]; j < end[z]; j++)
                        blk[el[j]] = z;
                    if (inw[b] || end[z] - first[z] <= end[b] - first[b])
                        wl[wn++] = z, inw[z] = 1;
                    else
                        wl[wn++] = b, inw[b] = 1;
                }
                marks[b] = 0;
            }
        }
    }
    /* the start's block becomes 0 */
    int32_t *num = xmalloc(sizeof(int32_t) * (size_t)nb);
    for (int b = 0; b < nb; b++)
        num[b] = -1;
    int nn = 0;
    num[blk[0]] = nn++;
    for (int b = 0; b < nb; b++)
        if (num[b] < 0) num[b] = nn++;
    struct dfa o = {.n = nb};
    o.trans = xmalloc(sizeof(int32_t) * (size_t)nb * (size_t)k);
    o.acc = xmalloc((size_t)nb);
    for (int b = 0; b < nb; b++) {
        int rep = el[first[b]];
        o.acc[num[b]] = d->acc[rep];
        for (int c = 0; c < k; c++)
            o.trans[(size_t)num[b] * k + c] = num[blk[d->trans[(size_t)rep * k + c]]];
    }
    free(num);
    free(roff);
    free(rev);
    free(el);
    free(loc);
    free(blk);
    free(first);
    free(end);
    free(marks);
    free(wl);
    free(touched);
    free(snap);
    free(inw);
    dfa_release(d);
    *d = o;
}

/* Makes a partial DFA complete with a rejecting sink (always added). */
static void dfa_complete(struct dfa *d, int k)
{
    int n = d->n + 1;
    d->trans = xrealloc(d->trans, sizeof(int32_t) * (size_t)n * (size_t)k);
    d->acc = xrealloc(d->acc, (size_t)n);
    d->acc[n - 1] = 0;
    for (int c = 0; c < k; c++)
        d->trans[(size_t)(n - 1) * k + c] = n - 1;
    for (size_t i = 0; i < (size_t)(n - 1) * (size_t)k; i++)
        if (d->trans[i] < 0) d->trans[i] = n - 1;
    d->n = n;
}

/* Reversed transitions of a complete DFA: for each state, its (predecessor,
 * class) pairs as predecessor * k + class. */
static void dfa_reverse(const struct dfa *d, int k, int32_t **off_out, int32_t **rev_out)
{
    int n = d->n;
    size_t nk = (size_t)n * (size_t)k;
    int32_t *off = xcalloc((size_t)n + 1, sizeof(int32_t));
    int32_t *rev = xmalloc(sizeof(int32_t) * (nk ? nk : 1));
    for (size_t i = 0; i < nk; i++)
        off[d->trans[i] + 1]++;
    for (int s = 0; s < n; s++)
        off[s + 1] += off[s];
    int32_t *cur = xmalloc(sizeof(int32_t) * (size_t)n);
    memcpy(cur, off, sizeof(int32_t) * (size_t)n);
    for (size_t i = 0; i < nk; i++)
        rev[cur[d->trans[i]]++] = (int32_t)i;
    free(cur);
    *off_out = off;
    *rev_out = rev;
}

/* reach[q] = some state with acc == want is reachable from q. */
static void dfa_can_reach(const struct dfa *d, int k, const int32_t *off, const int32_t *rev,
                          bool want, uint8_t *reach)
{
    int32_t *q = xmalloc(sizeof(int32_t) * (size_t)d->n);
    int qh = 0, qt = 0;
    for (int s = 0; s < d->n; s++) {
        reach[s] = (d->acc[s] != 0) == want;
        if (reach[s]) q[qt++] = s;
    }
    while (qh < qt) {
        int t = q[qh++];
        for (int r = off[t]; r < off[t + 1]; r++) {
            int p = rev[r] / k;
            if (!reach[p]) reach[p] = 1, q[qt++] = p;
        }
    }
    free(q);
}

/* Finishes a lookahead from its partial DFA: complete, complemented for a
 * negative one, minimal, with its flags and reversed transitions. */
static void look_finish(struct ctx *x, struct look *l, struct dfa *d, bool negate)
{
    dfa_complete(d, x->k);
    if (negate)
        for (int s = 0; s < d->n; s++)
            d->acc[s] = !d->acc[s];
    dfa_minimize(d, x->k);
    l->d = *d;
    dfa_reverse(&l->d, x->k, &l->rev_off, &l->rev);
    uint8_t *r = xmalloc((size_t)l->d.n);
    l->dead = xmalloc((size_t)l->d.n);
    l->univ = xmalloc((size_t)l->d.n);
    dfa_can_reach(&l->d, x->k, l->rev_off, l->rev, true, r);
    for (int s = 0; s < l->d.n; s++)
        l->dead[s] = !r[s];
    dfa_can_reach(&l->d, x->k, l->rev_off, l->rev, false, r);
    for (int s = 0; s < l->d.n; s++)
        l->univ[s] = !r[s];
    free(r);
}

/* ---- obligations ---- */

static int oset_make(struct ctx *x, const int32_t *pairs, int n)
{
    int id = intern_get(&x->osets, pairs, 2 * n, NULL);
    while (x->ostep.n < (id + 1) * x->k)
        iv_push(&x->ostep, -2);
    return id;
}

static int cmp_pair(const void *a, const void *b)
{
    const int32_t *p = a, *q = b;
    if (p[0] != q[0]) return p[0] < q[0] ? -1 : 1;
    return p[1] < q[1] ? -1 : p[1] > q[1];
}

/* o plus lookahead j in state s: DFA_DEAD if that can never accept. */
static int oset_add(struct ctx *x, int o, int j, int s)
{
    const struct look *l = &x->looks[j];
    if (l->dead[s]) return DFA_DEAD;
    if (l->univ[s]) return o;
    int len;
    const int32_t *k = intern_key(&x->osets, o, &len);
    int32_t *buf = xmalloc(sizeof(int32_t) * (size_t)(len + 2));
    memcpy(buf, k, sizeof(int32_t) * (size_t)len);
    int n = len / 2;
    bool dup = false;
    for (int i = 0; i < n; i++)
        dup |= buf[2 * i] == j && buf[2 * i + 1] == s;
    if (!dup) {
        buf[2 * n] = j, buf[2 * n + 1] = s, n++;
        qsort(buf, (size_t)n, 2 * sizeof(int32_t), cmp_pair);
    }
    int id = oset_make(x, buf, n);
    free(buf);
    return id;
}

/* o after reading a character of class c. */
static int oset_step(struct ctx *x, int o, int c)
{
    int32_t memo = x->ostep.v[(size_t)o * x->k + c];
    if (memo != -2) return memo;
    int len;
    const int32_t *k = intern_key(&x->osets, o, &len);
    int32_t *buf = xmalloc(sizeof(int32_t) * (size_t)(len ? len : 1));
    int n = 0, r = 0;
    for (int i = 0; i < len / 2; i++) {
        const struct look *l = &x->looks[k[2 * i]];
        int s = l->d.trans[(size_t)k[2 * i + 1] * x->k + c];
        if (l->dead[s]) {
            r = DFA_DEAD;
            break;
        }
        if (l->univ[s]) continue;
        buf[2 * n] = k[2 * i], buf[2 * n + 1] = s, n++;
    }
    if (r != DFA_DEAD) {
        qsort(buf, (size_t)n, 2 * sizeof(int32_t), cmp_pair);
        /* dedupe: two instances of a lookahead may meet in one state */
        int m = 0;
        for (int i = 0; i < n; i++)
            if (!m || buf[2 * i] != buf[2 * (m - 1)] || buf[2 * i + 1] != buf[2 * (m - 1) + 1])
                buf[2 * m] = buf[2 * i], buf[2 * m + 1] = buf[2 * i + 1], m++;
        r = oset_make(x, buf, m);
    }
    free(buf);
    x->ostep.v[(size_t)o * x->k + c] = r;
    return r;
}

/* U(s, S) of lookahead j: the longest length up to which every string over
 * the classes of S is accepted from s (-1: s rejects; DFA_INF: no bound). */
static int look_u(struct ctx *x, int j, int sid, int s)
{
    struct look *l = &x->looks[j];
    while (l->ucache.n <= sid)
        iv_push(&l->ucache, 0);
    if (!l->ucache.v[sid]) {
        int len;
        const int32_t *key = intern_key(&x->csets, sid, &len);
        uint64_t *S = xmalloc(sizeof(uint64_t) * (size_t)x->w);
        memcpy(S, key, sizeof(uint64_t) * (size_t)x->w);
        int n = l->d.n, base = x->udist.n;
        for (int i = 0; i < n; i++)
            iv_push(&x->udist, -1);
        int32_t *dist = x->udist.v + base;
        int32_t *q = xmalloc(sizeof(int32_t) * (size_t)n);
        int qh = 0, qt = 0;
        for (int t = 0; t < n; t++)
            if (!l->d.acc[t]) dist[t] = 0, q[qt++] = t;
        while (qh < qt) {
            int t = q[qh++];
            for (int r = l->rev_off[t]; r < l->rev_off[t + 1]; r++) {
                int p = l->rev[r] / x->k, c = l->rev[r] % x->k;
                if (bit(S, c) && dist[p] < 0) dist[p] = dist[t] + 1, q[qt++] = p;
            }
        }
        free(q);
        free(S);
        l->ucache.v[sid] = base + 1;
    }
    int d = x->udist.v[l->ucache.v[sid] - 1 + s];
    return d < 0 ? DFA_INF : d - 1;
}

/* o without the lookaheads that accept every suffix the parts can still
 * read: at most lb characters of the classes S (id sid). */
static int oset_prune(struct ctx *x, int o, int sid, int lb)
{
    int len;
    const int32_t *k = intern_key(&x->osets, o, &len);
    if (!len) return o;
    int32_t *buf = xmalloc(sizeof(int32_t) * (size_t)len);
    memcpy(buf, k, sizeof(int32_t) * (size_t)len);
    int n = 0;
    for (int i = 0; i < len / 2; i++)
        if (look_u(x, buf[2 * i], sid, buf[2 * i + 1]) < lb)
            buf[2 * n] = buf[2 * i], buf[2 * n + 1] = buf[2 * i + 1], n++;
    int id = n == len / 2 ? o : oset_make(x, buf, n);
    free(buf);
    return id;
}

/* Obligation set a is a subset of b. */
static bool oset_sub(const struct ctx *x, int a, int b)
{
    int la, lb;
    const int32_t *ka = intern_key(&x->osets, a, &la), *kb = intern_key(&x->osets, b, &lb);
    int j = 0;
    for (int i = 0; i < la; i += 2) {
        while (j < lb && cmp_pair(kb + j, ka + i) < 0)
            j += 2;
        if (j >= lb || cmp_pair(kb + j, ka + i)) return false;
    }
    return true;
}

/* ---- subset construction ---- */

/* A visited set of (state, obligation set) pairs, cleared by generation. */
struct pset {
    uint64_t *key; /* (cap) */
    uint32_t *gen; /* (cap) generation of each slot */
    int cap;       /* power of two */
    int n;         /* entries this generation */
    uint32_t g;    /* current generation */
};

static void pset_clear(struct pset *p)
{
    p->g++;
    p->n = 0;
}

static bool pset_add(struct pset *p, uint64_t k)
{
    if (2 * (p->n + 1) > p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        uint64_t *key = xmalloc(sizeof(uint64_t) * (size_t)cap);
        uint32_t *gen = xcalloc((size_t)cap, sizeof(uint32_t));
        for (int i = 0; i < p->cap; i++)
            if (p->gen[i] == p->g) {
                uint64_t h = (XXH3_64bits(&p->key[i], 8)) & (uint64_t)(cap - 1);
                while (gen[h] == p->g)
                    h = (h + 1) & (uint64_t)(cap - 1);
                key[h] = p->key[i], gen[h] = p->g;
            }
        free(p->key);
        free(p->gen);
        p->key = key, p->gen = gen, p->cap = cap;
    }
    uint64_t h = XXH3_64bits(&k, 8) & (uint64_t)(p->cap - 1);
    for (; p->gen[h] == p->g; h = (h + 1) & (uint64_t)(p->cap - 1))
        if (p->key[h] == k) return false;
    p->key[h] = k, p->gen[h] = p->g, p->n++;
    return true;
}

struct det {
    struct ctx *x;        /* context */
    int n_comps;          /* parts being intersected */
    struct intern states; /* product states: per part, thread count then (state, oset) pairs */
    struct dfa out;       /* transitions so far */
    int cap_out;          /* rows allocated in out */
    struct ivec *next;    /* (n_comps) thread pairs being built */
    struct ivec stack;    /* closure work list */
    struct ivec key;      /* key scratch */
    struct pset seen;     /* closure visited set */
    uint64_t *sbuf;       /* (w) class set scratch */
};

/* Adds to out the threads reachable from (s, o) without reading: those at
 * states that read a character or are final and can still reach it. */
static void closure(struct det *dt, int s0, int o0, struct ivec *out)
{
    struct ctx *x = dt->x;
    dt->stack.n = 0;
    iv_push(&dt->stack, s0);
    iv_push(&dt->stack, o0);
    while (dt->stack.n) {
        int o = dt->stack.v[--dt->stack.n], s = dt->stack.v[--dt->stack.n];
        if (!pset_add(&dt->seen, (uint64_t)(uint32_t)s << 32 | (uint32_t)o)) continue;
        bool reads = false;
        for (int e = x->e_off[s]; e < x->e_off[s + 1]; e++) {
            const struct nedge *ed = &x->e[e];
            if (x->lmax[ed->to] < 0) continue;
            if (ed->kind == NE_CHARS) {
                reads = true;
            } else if (ed->kind == NE_EPS) {
                iv_push(&dt->stack, ed->to);
                iv_push(&dt->stack, o);
            } else {
                int o2 = oset_add(x, o, ed->arg, 0);
                if (o2 == DFA_DEAD) continue;
                iv_push(&dt->stack, ed->to);
                iv_push(&dt->stack, o2);
            }
        }
        if ((reads || x->is_final[s]) && x->lmax[s] >= 0) {
            iv_push(out, s);
            iv_push(out, o);
        }
    }
}

/* Interns the product state of the threads in dt->next (pruned, sorted,
 * deduplicated, subsumed threads removed): its id, -1 when some part has no
 * thread left, or an error. */
static int det_state(struct det *dt)
{
    struct ctx *x = dt->x;
    int w = x->w, lb = DFA_INF;
    for (int c = 0; c < dt->n_comps; c++) {
        struct ivec *t = &dt->next[c];
        if (!t->n) return -1;
        int lm = -1;
        for (int i = 0; i < t->n; i += 2)
            lm = MAX(lm, x->lmax[t->v[i]]);
        lb = MIN(lb, lm);
    }
    /* S: for each part the union of its threads' classes; their intersection */
    uint64_t *S = dt->sbuf, *U = dt->sbuf + w;
    for (int i = 0; i < w; i++)
        S[i] = ~0ull;
    for (int c = 0; c < dt->n_comps; c++) {
        struct ivec *t = &dt->next[c];
        memset(U, 0, sizeof(uint64_t) * (size_t)w);
        for (int i = 0; i < t->n; i += 2) {
            const uint64_t *r = x->scc_reach + (size_t)x->scc_of[t->v[i]] * w;
            for (int j = 0; j < w; j++)
                U[j] |= r[j];
        }
        for (int j = 0; j < w; j++)
            S[j] &= U[j];
    }
    int sid = lb == DFA_INF ? -1 : intern_get(&x->csets, (const int32_t *)S, 2 * w, NULL);
    dt->key.n = 0;
    bool acc = true;
    for (int c = 0; c < dt->n_comps; c++) {
        struct ivec *t = &dt->next[c];
        if (sid >= 0)
            for (int i = 0; i < t->n; i += 2)
                t->v[i + 1] = oset_prune(x, t->v[i + 1], sid, lb);
        int n = t->n / 2;
        qsort(t->v, (size_t)n, 2 * sizeof(int32_t), cmp_pair);
        /* drop duplicates, and a thread whose obligations include those of
         * another thread at the same state (it accepts less) */
        int m = 0;
        for (int i = 0; i < n; i++) {
            int s = t->v[2 * i], o = t->v[2 * i + 1];
            bool drop = false;
            for (int j = 0; j < n && !drop; j++)
                if (j != i && t->v[2 * j] == s && t->v[2 * j + 1] != o &&
                    oset_sub(x, t->v[2 * j + 1], o))
                    drop = true;
            if (m && t->v[2 * (m - 1)] == s && t->v[2 * (m - 1) + 1] == o) drop = true;
            if (!drop) t->v[2 * m] = s, t->v[2 * m + 1] = o, m++;
        }
        t->n = 2 * m;
        bool ca = false;
        for (int i = 0; i < m && !ca; i++) {
            if (!x->is_final[t->v[2 * i]]) continue;
            int len;
            const int32_t *k = intern_key(&x->osets, t->v[2 * i + 1], &len);
            bool all = true;
            for (int j = 0; j < len; j += 2)
                all &= x->looks[k[j]].d.acc[k[j + 1]] != 0;
            ca = all;
        }
        acc &= ca;
        iv_push(&dt->key, m);
        for (int i = 0; i < t->n; i++)
            iv_push(&dt->key, t->v[i]);
    }
    bool added;
    int id = intern_get(&dt->states, dt->key.v, dt->key.n, &added);
    if (!added) return id;
    if (++x->n_states_built > GRAMMAR_DFA_MAX_STATES) return fail_states(x);
    if (id >= dt->cap_out) {
        dt->cap_out = dt->cap_out ? 2 * dt->cap_out : 64;
        dt->out.trans = xrealloc(dt->out.trans, sizeof(int32_t) * (size_t)dt->cap_out * x->k);
        dt->out.acc = xrealloc(dt->out.acc, (size_t)dt->cap_out);
    }
    for (int c = 0; c < x->k; c++)
        dt->out.trans[(size_t)id * x->k + c] = -1;
    dt->out.acc[id] = acc;
    dt->out.n = id + 1;
    return id;
}

/* The partial DFA (start 0) of the intersection of the NFAs starts[i] ->
 * their finals. */
static int determinize(struct ctx *x, const int *starts, int n_comps, struct dfa *out)
{
    struct det dt = {.x = x, .n_comps = n_comps};
    dt.next = xcalloc((size_t)n_comps, sizeof(struct ivec));
    dt.sbuf = xmalloc(sizeof(uint64_t) * 2 * (size_t)x->w);
    int rc = 0;
    for (int c = 0; c < n_comps; c++) {
        pset_clear(&dt.seen);
        closure(&dt, starts[c], 0, &dt.next[c]);
    }
    int s0 = det_state(&dt);
    if (x->err) goto done;
    if (s0 < 0) {
        /* nothing matches: one rejecting state */
        dt.out.n = 1;
        dt.out.trans = xmalloc(sizeof(int32_t) * (size_t)x->k);
        dt.out.acc = xcalloc(1, 1);
        for (int c = 0; c < x->k; c++)
            dt.out.trans[c] = -1;
        goto done;
    }
    int32_t *cur = NULL;
    int cur_cap = 0;
    for (int st = 0; st < dt.out.n && !x->err; st++) {
        int len;
        const int32_t *k = intern_key(&dt.states, st, &len);
        if (len > cur_cap) cur_cap = len, cur = xrealloc(cur, sizeof(int32_t) * (size_t)len);
        memcpy(cur, k, sizeof(int32_t) * (size_t)len);
        for (int c = 0; c < x->k && !x->err; c++) {
            const int32_t *p = cur;
            bool live = true;
            for (int comp = 0; comp < n_comps && live; comp++) {
                struct ivec *nx = &dt.next[comp];
                nx->n = 0;
                pset_clear(&dt.seen);
                int m = *p++;
                for (int i = 0; i < m; i++, p += 2) {
                    int s = p[0], o = p[1];
                    for (int e = x->e_off[s]; e < x->e_off[s + 1]; e++) {
                        const struct nedge *ed = &x->e[e];
                        if (ed->kind != NE_CHARS || x->lmax[ed->to] < 0 ||
                            !bit(x->gsets + (size_t)ed->arg * x->w, c))
                            continue;
                        int o2 = oset_step(x, o, c);
                        if (o2 == DFA_DEAD) continue;
                        closure(&dt, ed->to, o2, nx);
                    }
                }
                live = nx->n > 0;
            }
            if (!live) continue;
            int t = det_state(&dt);
            if (t >= 0) dt.out.trans[(size_t)st * x->k + c] = t;
        }
    }
    free(cur);
done:
    rc = x->err;
    for (int c = 0; c < n_comps; c++)
        free(dt.next[c].v);
    free(dt.next);
    free(dt.sbuf);
    free(dt.stack.v);
    free(dt.key.v);
    free(dt.seen.key);
    free(dt.seen.gen);
    intern_release(&dt.states);
    if (rc) {
        dfa_release(&dt.out);
        return rc;
    }
    *out = dt.out;
    return 0;
}

/* ---- lookaheads built directly ---- */

/* `$` (id 0): accepts the empty string only. */
static void look_end(struct ctx *x)
{
    struct look *l = look_new(x, -1, -1);
    struct dfa d = {.n = 1};
    d.trans = xmalloc(sizeof(int32_t) * (size_t)x->k);
    d.acc = xmalloc(1);
    d.acc[0] = 1;
    for (int c = 0; c < x->k; c++)
        d.trans[c] = -1;
    look_finish(x, l, &d, false);
}

/* ---- length bounds ---- */

/* Longest string from each state to acceptance in the complete DFA d
 * (-1: none, DFA_INF: through a cycle), by Kahn's order on the live part:
 * a state is done once every live successor is. */
static void dfa_longest(const struct dfa *d, int k, const uint8_t *live, const int32_t *off,
                        const int32_t *rev, int32_t *lm)
{
    int n = d->n;
    int32_t *deg = xcalloc((size_t)n, sizeof(int32_t)), *q = xmalloc(sizeof(int32_t) * (size_t)n);
    int qh = 0, qt = 0;
    for (int s = 0; s < n; s++) {
        lm[s] = live[s] && d->acc[s] ? 0 : -1;
        if (!live[s]) continue;
        for (int c = 0; c < k; c++)
            deg[s] += live[d->trans[(size_t)s * k + c]];
        if (!deg[s]) q[qt++] = s;
    }
    while (qh < qt) {
        int t = q[qh++];
        for (int r = off[t]; r < off[t + 1]; r++) {
            int p = rev[r] / k;
            if (!live[p]) continue;
            if (lm[t] >= 0) lm[p] = MAX(lm[p], lm[t] + 1);
            if (--deg[p] == 0) q[qt++] = p;
        }
    }
    for (int s = 0; s < n; s++)
        if (live[s] && deg[s]) lm[s] = DFA_INF;
    free(deg);
    free(q);
}

/* The product of the complete minimal DFA d with a character count for
 * min..max (max GRAMMAR_INF: none). A state (q, c) forgets its count (c
 * becomes "free") once c >= min and no string from q can pass max, so a
 * format shorter than maxLength costs no states. At most
 * GRAMMAR_DFA_MAX_COUNTED states, else ERR_INVALID. */
static int dfa_count(struct ctx *x, const struct dfa *d, int min, int max, struct dfa *out)
{
    int k = x->k, n = d->n, rc = 0;
    int32_t *off, *rev;
    dfa_reverse(d, k, &off, &rev);
    uint8_t *live = xmalloc((size_t)n);
    int32_t *lm = xmalloc(sizeof(int32_t) * (size_t)n);
    dfa_can_reach(d, k, off, rev, true, live);
    dfa_longest(d, k, live, off, rev, lm);
    free(off);
    free(rev);
    const int32_t FREE = -1;
    struct intern ids = {0};
    struct dfa o = {0};
    int cap = 0;
    int32_t key[2] = {0, 0};
    if (min == 0 && (lm[0] != DFA_INF && lm[0] <= max)) key[1] = FREE;
    intern_get(&ids, key, 2, NULL);
    for (int st = 0; st < intern_n(&ids); st++) {
        int len;
        const int32_t *kk = intern_key(&ids, st, &len);
        int q = kk[0], c = kk[1];
        if (st >= cap) {
            cap = cap ? 2 * cap : 64;
            o.trans = xrealloc(o.trans, sizeof(int32_t) * (size_t)cap * (size_t)k);
            o.acc = xrealloc(o.acc, (size_t)cap);
        }
        o.n = st + 1;
        o.acc[st] = d->acc[q] && (c == FREE || c >= min);
        for (int ch = 0; ch < k; ch++) {
            int t = d->trans[(size_t)q * k + ch], c2 = c == FREE ? FREE : c + 1;
            o.trans[(size_t)st * k + ch] = -1;
            if (!live[t] || (c2 != FREE && max != GRAMMAR_INF && c2 > max)) continue;
            if (c2 != FREE && c2 >= min &&
                (max == GRAMMAR_INF || (lm[t] != DFA_INF && c2 + lm[t] <= max)))
                c2 = FREE;
            int32_t nk[2] = {t, c2};
            int id = intern_get(&ids, nk, 2, NULL);
            if (id >= GRAMMAR_DFA_MAX_COUNTED) {
                rc = err_set(x->msg, ERR_INVALID,
                             "the length bounds need more than %d automaton states",
                             GRAMMAR_DFA_MAX_COUNTED);
                goto out;
            }
            o.trans[(size_t)st * k + ch] = id;
        }
    }
out:
    intern_release(&ids);
    free(live);
    free(lm);
    if (rc) {
        dfa_release(&o);
        return rc;
    }
    *out = o;
    return 0;
}

/* ---- emission ---- */

struct esc_memo {
    uint64_t mask; /* ASCII characters with an escape spelling: controls, '"', '\', '/' */
    int rule;      /* the rule of their escapes */
};

/* Bit of an ASCII character that JSON may escape, or -1. */
static int esc_bit(uint32_t c)
{
    if (c < 0x20) return (int)c;
    if (c == '"') return 32;
    if (c == '\\') return 33;
    if (c == '/') return 34;
    return -1;
}

/* Rules for the live states of the complete minimal DFA d. */
static int dfa_emit(struct ctx *x, struct grammar_builder *b, const struct dfa *d, bool json)
{
    int k = x->k, n = d->n;
    int32_t *off, *rev;
    dfa_reverse(d, k, &off, &rev);
    uint8_t *live = xmalloc((size_t)n);
    dfa_can_reach(d, k, off, rev, true, live);
    free(off);
    free(rev);
    char nm[48];
    if (!live[0]) {
        free(live);
        return grammar__rule(b, "empty");
    }
    int32_t *rule = xmalloc(sizeof(int32_t) * (size_t)n);
    for (int q = 0; q < n; q++) {
        snprintf(nm, sizeof(nm), "dfa~%d", q);
        rule[q] = live[q] ? grammar__rule(b, nm) : -1;
    }
    /* the intervals of each class */
    int32_t *coff = xcalloc((size_t)k + 1, sizeof(int32_t));
    int32_t *civ = xmalloc(sizeof(int32_t) * (size_t)x->n_iv);
    for (int i = 0; i < x->n_iv; i++)
        if (x->iv_cls[i] >= 0) coff[x->iv_cls[i] + 1]++;
    for (int c = 0; c < k; c++)
        coff[c + 1] += coff[c];
    int32_t *cur = xmalloc(sizeof(int32_t) * (size_t)k);
    memcpy(cur, coff, sizeof(int32_t) * (size_t)k);
    for (int i = 0; i < x->n_iv; i++)
        if (x->iv_cls[i] >= 0) civ[cur[x->iv_cls[i]]++] = i;
    free(cur);

    struct grammar_cprange *rg = xmalloc(sizeof(*rg) * (size_t)(x->n_iv + 4));
    struct grammar_cprange *raw = xmalloc(sizeof(*raw) * (size_t)(x->n_iv + 8));
    uint8_t *done = xmalloc((size_t)k);
    struct esc_memo *memo = NULL;
    int n_memo = 0;
    for (int q = 0; q < n; q++) {
        if (!live[q]) continue;
        if (d->acc[q]) grammar__alt(b, rule[q]);
        memset(done, 0, (size_t)k);
        for (int c = 0; c < k; c++) {
            int t = d->trans[(size_t)q * k + c];
            if (done[c] || !live[t]) continue;
            /* every class leading to t, as one character set */
            int nr = 0;
            for (int c2 = c; c2 < k; c2++) {
                if (done[c2] || d->trans[(size_t)q * k + c2] != t) continue;
                done[c2] = 1;
                for (int i = coff[c2]; i < coff[c2 + 1]; i++)
                    rg[nr++] = (struct grammar_cprange){x->iv_lo[civ[i]], x->iv_lo[civ[i] + 1] - 1};
            }
            nr = grammar__ranges_normalize(rg, nr);
            if (!json) {
                grammar__alt(b, rule[q]);
                grammar__chars(b, rule[q], rg, nr);
                grammar__ref(b, rule[q], rule[t]);
                continue;
            }
            int nraw = grammar__json_raw(rg, nr, raw);
            if (nraw) {
                grammar__alt(b, rule[q]);
                grammar__chars(b, rule[q], raw, nraw);
                grammar__ref(b, rule[q], rule[t]);
            }
            uint64_t mask = 0;
            for (int i = 0; i < nr && rg[i].lo < 0x80; i++)
                for (uint32_t ch = rg[i].lo; ch <= rg[i].hi && ch < 0x80; ch++)
                    if (esc_bit(ch) >= 0) mask |= 1ull << esc_bit(ch);
            if (!mask) continue;
            int er = -1;
            for (int i = 0; i < n_memo; i++)
                if (memo[i].mask == mask) er = memo[i].rule;
            if (er < 0) {
                struct grammar_cprange sp[40];
                int ns = 0;
                for (uint32_t ch = 0; ch < 0x80; ch++)
                    if (esc_bit(ch) >= 0 && (mask >> esc_bit(ch) & 1))
                        sp[ns++] = (struct grammar_cprange){ch, ch};
                ns = grammar__ranges_normalize(sp, ns);
                er = grammar__rule(b, "dfa-escape");
                grammar__json_escapes(b, er, sp, ns);
                memo = xrealloc(memo, sizeof(*memo) * (size_t)(n_memo + 1));
                memo[n_memo++] = (struct esc_memo){mask, er};
            }
            grammar__alt(b, rule[q]);
            grammar__ref(b, rule[q], er);
            grammar__ref(b, rule[q], rule[t]);
        }
    }
    int root = rule[0];
    free(memo);
    free(done);
    free(rg);
    free(raw);
    free(coff);
    free(civ);
    free(rule);
    free(live);
    return root;
}

/* ---- entry ---- */

static void ctx_release(struct ctx *x)
{
    free(x->iv_lo);
    free(x->iv_cls);
    free(x->set_base);
    free(x->gsets);
    free(x->edges_raw.v);
    free(x->e_off);
    free(x->e);
    free(x->is_final);
    free(x->lmax);
    free(x->scc_of);
    free(x->scc_reach);
    for (int i = 0; i < x->n_looks; i++) {
        struct look *l = &x->looks[i];
        dfa_release(&l->d);
        free(l->dead);
        free(l->univ);
        free(l->rev_off);
        free(l->rev);
        free(l->ucache.v);
    }
    free(x->looks);
    free(x->look_of);
    free(x->node_base);
    free(x->pend);
    free(x->finals.v);
    intern_release(&x->osets);
    free(x->ostep.v);
    intern_release(&x->csets);
    free(x->udist.v);
}

int grammar__lang_build(struct grammar_builder *b, const struct grammar_lang_part *parts,
                        int n_parts, int min_len, int max_len, bool json, struct err_msg *msg)
{
    CHECK(n_parts > 0);
    struct ctx x = {.parts = parts, .n_parts = n_parts, .msg = msg};
    alphabet_build(&x);
    oset_make(&x, NULL, 0); /* id 0: no obligations */
    x.node_base = xmalloc(sizeof(int) * (size_t)n_parts);
    int n_nodes = 0;
    for (int p = 0; p < n_parts; p++) {
        x.node_base[p] = n_nodes;
        n_nodes += parts[p].rx->n_nodes;
    }
    x.look_of = xmalloc(sizeof(int32_t) * (size_t)(n_nodes ? n_nodes : 1));
    for (int i = 0; i < n_nodes; i++)
        x.look_of[i] = -1;
    look_end(&x);

    int *starts = xmalloc(sizeof(int) * (size_t)n_parts);
    for (int p = 0; p < n_parts && !x.err; p++) {
        const struct grammar_rx *rx = parts[p].rx;
        int s = starts[p] = nfa_state(&x), f = nfa_state(&x);
        iv_push(&x.finals, f);
        for (int t = 0; t < rx->n_tops && !x.err; t++) {
            const struct grammar_rxtop *top = &rx->tops[t];
            int a = s, bs, bt;
            if (parts[p].search && !top->start) {
                a = nfa_any_loop(&x);
                nfa_edge(&x, s, NE_EPS, 0, a);
            }
            nfa_frag(&x, p, top->node, &bs, &bt);
            nfa_edge(&x, a, NE_EPS, 0, bs);
            if (parts[p].search && !top->end) {
                int l = nfa_any_loop(&x);
                nfa_edge(&x, bt, NE_EPS, 0, l);
                bt = l;
            }
            nfa_edge(&x, bt, NE_EPS, 0, f);
        }
    }
    int rc = x.err;
    struct dfa d = {0};
    if (rc) goto out;
    nfa_index(&x);
    nfa_analyse(&x);
    for (int i = 0; i < x.n_pend; i++) {
        struct pending *pd = &x.pend[i];
        struct look *l = &x.looks[pd->look];
        bool negate = parts[l->rx].rx->nodes[l->node].negate;
        struct dfa ld;
        rc = determinize(&x, &pd->start, 1, &ld);
        if (rc) goto out;
        look_finish(&x, &x.looks[pd->look], &ld, negate);
    }
    rc = determinize(&x, starts, n_parts, &d);
    if (rc) goto out;
    dfa_complete(&d, x.k);
    dfa_minimize(&d, x.k);
    if (min_len > 0 || max_len != GRAMMAR_INF) {
        struct dfa dc;
        rc = dfa_count(&x, &d, min_len, max_len, &dc);
        if (rc) goto out;
        dfa_release(&d);
        d = dc;
        dfa_complete(&d, x.k);
        dfa_minimize(&d, x.k);
    }
    rc = dfa_emit(&x, b, &d, json);
out:
    dfa_release(&d);
    free(starts);
    ctx_release(&x);
    return rc;
}
