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
 * pool per grammar with interned states and memoized transitions (one per
 * group of bytes the same leaves read), and "runs" decide whole subtrees of
 * plain text at once (below), so a walk inside free text visits the few
 * thousand trie nodes of tokens with quotes or backslashes, not all 274K.
 *
 * A bounded repetition's frames far from its end share a table (ir.c,
 * rep_canon): a frame with more than GRAMMAR_REP_CAP items left decides the
 * tokens of fewer characters as the frame with exactly that many does, so
 * such a context's table is that canonical table (its `base`) plus a walk
 * of the vocabulary's long-token trie for the rest:
 *
 *   key:   [char of x, opt_40 frame, string frame, ...]
 *   table: base = table([char of x, opt_16 frame, string frame, ...])
 *          + the tokens of >= 16 characters, walked from the key itself
 *
 * At run time, fill_mask ORs the tables of the state's stacks (and their
 * bases) and walks each uncertain token's bytes from the real state:
 *
 *   mask = OR(accept[key(s)] for s in stacks) | {t in uncertain: walk(state, t) ok}
 *          | EOG tokens if the state accepts
 *
 * Tables are computed lazily under the grammar's mutex and cached in the
 * grammar (at most GRAMMAR_MAX_TABLES and lim.table_bytes of them; beyond
 * that a table serves one mask), so every request compiled from the same
 * source reuses them.
 *
 * Budget: a mask's work units (budget.c) are charged as it goes - a trie
 * node visited, a leaf interned, a state's byte groups, a range of tokens
 * set, a table ORed, the closures of transitions and run-time checks - and a
 * table walk that runs past what is left of lim.mask_work stops at the next
 * trie node. Whatever it memoized meanwhile may be incomplete, so the walker
 * (a cache of states and transitions) is dropped and the table is not kept;
 * the mask fails, and with it the matcher, naming the construct. The lock
 * is thus held at most one budget's worth of work.
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
    if (pm->base_owned) grammar__posmask_free(pm->base);
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

/* Bits set in a mask of n words. Inline SWAR: the build targets plain
 * x86-64, where __builtin_popcountll is a library call per word. */
static int count_bits(const uint64_t *m, int n)
{
    int count = 0;
    for (int i = 0; i < n; i++) {
        uint64_t x = m[i];
        x -= (x >> 1) & 0x5555555555555555ull;
        x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
        x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0Full;
        count += (int)((x * 0x0101010101010101ull) >> 56);
    }
    return count;
}

/* Sets the bits of the tokens order[from, to); returns how many. */
static int set_range(uint64_t *bits, const struct grammar_trie *t, int from, int to)
{
    for (int k = from; k < to; k++)
        bits[t->order[k] >> 6] |= 1ull << (t->order[k] & 63);
    return to - from;
}

static void push_range(struct i32list *l, const struct grammar_trie *t, int from, int to)
{
    for (int k = from; k < to; k++)
        list_push(l, t->order[k]);
}

/* ---- table walks: interned states and byte-group transitions ----
 *
 * Every table walk of a grammar runs in one node pool (g->walker, under
 * g->mu), where automaton states are interned (a sorted leaf set plus flags
 * -> id) and each state's bytes fall into groups (bytes the same leaves
 * read lead to the same state: a 256-entry row of group numbers per state)
 * whose next states are computed once. Inside free text a state has a handful
 * of groups, and walks of neighbouring contexts (the n-th and (n+1)-th
 * character of a bounded string) meet the same states. The walker
 * is dropped and rebuilt when it grows past WALKER_MAX_NODES nodes or
 * WALKER_MAX_STATES states (recursive grammars can reach unboundedly many
 * stacks). */

#define WALKER_MAX_NODES  (1 << 22)
#define WALKER_MAX_STATES (1 << 18) /* ... or states (their byte-group rows are 256 bytes) */

/* Charged for growing an array to `bytes` (copied when it moves): the walk
 * that makes an array double pays for the copy, so a mask's units track
 * its time even when it inherits a large walker. */
#define GROW_UNITS(bytes) ((int64_t)(bytes) >> 6)

struct wstate {
    int64_t off;           /* first leaf in walker.leaves */
    int32_t n;             /* leaves */
    bool accept;           /* returned past the root */
    bool unknown;          /* returned into the unknown context */
    bool run_mb;           /* every non-ASCII character also leads to run_next */
    int16_t run_h;         /* characters of a run readable from here; -1 until computed */
    int32_t run_next;      /* state after one run character; -1 none, -2 until computed */
    int32_t row;           /* byte-group row in walker.cls, -1 until first stepped */
    int32_t succ_off;      /* first of its groups in walker.succ */
    int32_t run_end;       /* state after run_h characters, when every state of the run is
                              inside the key (none returned below it); else -1 */
    bool run_quiet;        /* this state and the middles of its multi-byte run characters
                              returned nothing below the key */
    uint64_t alive[4];     /* bytes some leaf reads (any other byte empties the state) */
    uint64_t run_ascii[2]; /* ASCII bytes that are run characters here */
    int32_t comp[GRAMMAR_U8_STATES - 1]; /* per mid-character decoding state u (from NEED1):
                              2 * the state after the continuation bytes u expects, + 1 if a
                              state on the way returned below the key; -1 when they do not
                              lead uniformly to one live state; -2 until computed */
};

struct grammar_walker {
    struct grammar_pool pool; /* stack nodes of all walks (its counters: the current walk's) */
    int big;                  /* the state with the most leaves interned by the current walk */
    int big_n;                /* its leaves */
    int32_t *leaves;          /* (n_leaves) leaf node ids of every state, concatenated */
    int64_t n_leaves, cap_leaves;
    struct wstate *states; /* (n_states) interned states */
    int n_states, cap_states;
    int32_t *shash;           /* (n_shash) state id + 1 by hash, 0 empty */
    int n_shash;              /* power of two */
    uint8_t *cls;             /* (n_rows, 256) byte -> group of a stepped state */
    int64_t n_rows, cap_rows; /* rows used / allocated */
    int32_t *succ;            /* (n_succ) next state of each group, -1 until computed */
    int64_t n_succ, cap_succ; /* entries used / allocated */
    int n_trans;              /* transitions computed (advances) */
    struct grammar_state tmp; /* advance output scratch */
};

void grammar__walker_free(struct grammar_walker *w)
{
    if (!w) return;
    grammar__pool_release(&w->pool);
    free(w->leaves);
    free(w->states);
    free(w->shash);
    free(w->cls);
    free(w->succ);
    free(w->tmp.leaf);
    free(w);
}

static struct grammar_walker *walker_new(void)
{
    struct grammar_walker *w = xcalloc(1, sizeof(*w));
    grammar__pool_init(&w->pool);
    w->n_shash = 1024;
    w->shash = xcalloc((size_t)w->n_shash, sizeof(int32_t));
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
static int intern(const struct grammar *g, struct grammar_walker *w, struct grammar_state *st)
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
        w->pool.units += GROW_UNITS(sizeof(*w->states) * (size_t)w->cap_states);
    }
    if (w->n_leaves + st->n > w->cap_leaves) {
        w->cap_leaves = MAX(2 * w->cap_leaves, w->n_leaves + st->n + 1024);
        w->leaves = xrealloc(w->leaves, sizeof(int32_t) * (size_t)w->cap_leaves);
        w->pool.units += GROW_UNITS(sizeof(int32_t) * (size_t)w->cap_leaves);
    }
    int id = w->n_states++;
    w->pool.units += 2 * (int64_t)st->n + 1;
    if (st->n > w->big_n) w->big_n = st->n, w->big = id;
    struct wstate *ns = &w->states[id];
    *ns = (struct wstate){.off = w->n_leaves,
                          .n = st->n,
                          .accept = st->accept,
                          .unknown = st->unknown,
                          .run_h = -1,
                          .run_next = -2,
                          .row = -1,
                          .run_end = -1};
    for (int k = 0; k < GRAMMAR_U8_STATES - 1; k++)
        ns->comp[k] = -2;
    for (int i = 0; i < st->n; i++)
        for (int k = 0; k < 4; k++)
            ns->alive[k] |= g->sets[g->elems[w->pool.pos[st->leaf[i]]].arg][k];
    if (st->n) memcpy(w->leaves + w->n_leaves, st->leaf, sizeof(int32_t) * (size_t)st->n);
    w->n_leaves += st->n;
    if (2 * w->n_states > w->n_shash) {
        w->n_shash *= 2;
        w->shash = xrealloc(w->shash, sizeof(int32_t) * (size_t)w->n_shash);
        w->pool.units += w->n_states;
        memset(w->shash, 0, sizeof(int32_t) * (size_t)w->n_shash);
        for (int i = 0; i < w->n_states; i++)
            shash_insert(w, i);
    } else {
        shash_insert(w, id);
    }
    return id;
}

/* Gives state sid its byte-group row: bytes read by the same leaves lead
 * to the same state, so a state has as many distinct transitions as groups
 * (a handful in free text) and each is computed once. */
static void make_row(const struct grammar *g, struct grammar_walker *w, int sid)
{
    const struct wstate *s = &w->states[sid];
    if (w->n_rows == w->cap_rows) {
        w->cap_rows = w->cap_rows ? 2 * w->cap_rows : 256;
        w->cls = xrealloc(w->cls, (size_t)w->cap_rows * 256);
        w->pool.units += GROW_UNITS((size_t)w->cap_rows * 256);
    }
    uint8_t *row = w->cls + w->n_rows * 256;
    int n_groups = 0;
    int64_t bits = 0;
    if (s->n <= 64) {
        uint64_t sig[256] = {0}, seen[256];
        const int32_t *leaf = w->leaves + s->off;
        for (int j = 0; j < s->n; j++) {
            const uint64_t *set = g->sets[g->elems[w->pool.pos[leaf[j]]].arg];
            for (int k = 0; k < 4; k++)
                for (uint64_t m = set[k]; m; m &= m - 1, bits++)
                    sig[k * 64 + __builtin_ctzll(m)] |= 1ull << j;
        }
        for (int c = 0; c < 256; c++) {
            int k = 0;
            while (k < n_groups && seen[k] != sig[c])
                k++;
            if (k == n_groups) seen[n_groups++] = sig[c];
            row[c] = (uint8_t)k;
        }
    } else {
        for (int c = 0; c < 256; c++)
            row[c] = (uint8_t)c;
        n_groups = 256;
    }
    w->pool.units += 16 + (bits >> 2) + (s->n <= 64 ? 16 * (int64_t)n_groups : 64);
    if (w->n_succ + n_groups > w->cap_succ) {
        w->cap_succ = MAX(2 * w->cap_succ, w->n_succ + n_groups + 1024);
        w->succ = xrealloc(w->succ, sizeof(int32_t) * (size_t)w->cap_succ);
        w->pool.units += GROW_UNITS(sizeof(int32_t) * (size_t)w->cap_succ);
    }
    for (int k = 0; k < n_groups; k++)
        w->succ[w->n_succ + k] = -1;
    w->states[sid].row = (int32_t)w->n_rows++;
    w->states[sid].succ_off = (int32_t)w->n_succ;
    w->n_succ += n_groups;
}

/* The state after reading byte b in state sid. */
static int step(const struct grammar *g, struct grammar_walker *w, int sid, unsigned b)
{
    if (w->states[sid].row < 0) make_row(g, w, sid);
    const struct wstate *s = &w->states[sid];
    int64_t at = s->succ_off + w->cls[(int64_t)s->row * 256 + b];
    if (w->succ[at] >= 0) return w->succ[at];
    struct grammar_state in = {.leaf = w->leaves + s->off, .n = s->n, .cap = s->n};
    grammar__advance(g, &w->pool, &in, b, &w->tmp);
    int next = intern(g, w, &w->tmp);
    w->succ[at] = next;
    w->n_trans++;
    return next;
}

/* ---- runs: whole subtrees of plain text at once ----
 *
 * Inside free text (a JSON string, a bounded string's n-th character) most
 * of the vocabulary is accepted, and a walk that visits every trie node pays
 * ~160K steps per context. A run skips that: for a walker state s, its *run
 * characters* are a set C(s) of characters (a set of ASCII bytes, plus
 * optionally every non-ASCII character) that all lead, through states with
 * live stacks, to one state next(s) that has live stacks itself; its *run
 * height* h(s) is how many such characters in a row are certainly alive:
 *
 *   h(s) = 0                          no run characters, or next(s) is empty
 *   h(s) = 1 + h(t), t = next(s)      when C(t) contains C(s)
 *   h(s) = 1                          otherwise
 *
 * (capped at the longest token; a cycle of states means any length). By
 * induction every string of at most h(s) characters of C(s) - the last one
 * possibly cut short - leaves some stack alive after each byte. So at a trie
 * node whose path ends a character, with state s, if everything below is
 * well-formed UTF-8 over C(s) and starts at most h(s) characters (the
 * vocabulary's per-node summary, vocab.c), every token in the subtree is
 * accepted: one range push instead of a walk. Run characters are found from
 * the leaves' byte sets: bytes that the same leaves read give the same
 * successor, so the ASCII run is the largest group of ASCII bytes read by the
 * same leaves, and each UTF-8 sequence class (Unicode table 3-7) is checked
 * by stepping one representative through ranges every leaf reads wholly or
 * not at all. Profiles are memoized per state, so the n-th character of a
 * bounded string and the (n+1)-th share them. */

#define RUN_MAX_LEAVES 64 /* states with more leaves get no run */
#define RUN_MIN_TOKENS 4  /* smaller subtrees are walked: cheaper than a profile */

static const uint8_t utf8_class[8][4][2] = {
    {{0xC2, 0xDF}, {0x80, 0xBF}},
    {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
    {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
    {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
};
static const int utf8_class_len[8] = {2, 3, 3, 3, 3, 4, 4, 4};

/* Every leaf of state sid reads all of [lo, hi] or none of it, and some leaf
 * reads it. */
static bool range_uniform(const struct grammar *g, struct grammar_walker *w, int sid, unsigned lo,
                          unsigned hi)
{
    const struct wstate *s = &w->states[sid];
    bool any = false;
    w->pool.units += 1 + ((int64_t)s->n * (hi - lo + 1) >> 4);
    for (int j = 0; j < s->n; j++) {
        const uint64_t *set = g->sets[g->elems[w->pool.pos[w->leaves[s->off + j]]].arg];
        bool first = grammar__set_has(set, lo);
        for (unsigned b = lo + 1; b <= hi; b++)
            if (grammar__set_has(set, b) != first) return false;
        any |= first;
    }
    return any;
}

/* Fills run_next, run_ascii and run_mb of state sid (once). */
static void run_profile(const struct grammar *g, struct grammar_walker *w, int sid)
{
    struct wstate *s = &w->states[sid];
    if (s->run_next != -2) return;
    s->run_next = -1;
    if (s->n == 0 || s->n > RUN_MAX_LEAVES) return;
    /* Group ASCII bytes by the leaves that read them. */
    uint64_t sig[128] = {0};
    for (int j = 0; j < s->n; j++) {
        const uint64_t *set = g->sets[g->elems[w->pool.pos[w->leaves[s->off + j]]].arg];
        for (unsigned b = 0; b < 128; b++)
            if (grammar__set_has(set, b)) sig[b] |= 1ull << j;
    }
    /* The largest group; ties go to the group of the smallest byte. */
    uint64_t gsig[128];
    int gcnt[128], gfirst[128], n_g = 0, best = -1, best_n = 0;
    for (unsigned b = 0; b < 128; b++) {
        if (!sig[b]) continue;
        int k = 0;
        while (k < n_g && gsig[k] != sig[b])
            k++;
        if (k == n_g) gsig[n_g] = sig[b], gcnt[n_g] = 0, gfirst[n_g++] = (int)b;
        gcnt[k]++;
    }
    for (int k = 0; k < n_g; k++)
        if (gcnt[k] > best_n) best = gfirst[k], best_n = gcnt[k];
    w->pool.units += 8 + 8 * (int64_t)s->n + 8 * (int64_t)n_g;
    if (best < 0) return;
    uint64_t ascii[2] = {0, 0};
    for (unsigned b = 0; b < 128; b++)
        if (sig[b] == sig[best]) ascii[b >> 6] |= 1ull << (b & 63);
    int t = step(g, w, sid, (unsigned)best); /* may move w->states */
    if (w->states[t].n == 0) return;
    bool mb = true, quiet = !w->states[sid].unknown;
    for (int c = 0; c < 8 && mb; c++) {
        int cur = sid;
        for (int k = 0; k < utf8_class_len[c] && mb; k++) {
            unsigned lo = utf8_class[c][k][0], hi = utf8_class[c][k][1];
            if (!range_uniform(g, w, cur, lo, hi)) {
                mb = false;
                break;
            }
            cur = step(g, w, cur, lo);
            if (w->states[cur].n == 0) mb = false;
            quiet &= !w->states[cur].unknown;
        }
        if (mb && cur != t) mb = false;
    }
    s = &w->states[sid];
    s->run_next = t;
    s->run_ascii[0] = ascii[0];
    s->run_ascii[1] = ascii[1];
    s->run_mb = mb;
    s->run_quiet = quiet;
}

static bool run_covers(const struct wstate *outer, const struct wstate *inner)
{
    return (outer->run_ascii[0] & inner->run_ascii[0]) == inner->run_ascii[0] &&
           (outer->run_ascii[1] & inner->run_ascii[1]) == inner->run_ascii[1] &&
           (outer->run_mb || !inner->run_mb);
}

/* h(sid) (see above), computed along the chain of next states; also the
 * state the chain ends in (run_end). */
static int run_height(const struct grammar *g, struct grammar_walker *w, int sid, int cap)
{
    int chain_small[64], *chain = chain_small, n_chain = 0, cap_chain = 64;
    int cur = sid, val, end;
    for (;;) {
        run_profile(g, w, cur);
        struct wstate *c = &w->states[cur];
        if (c->run_h >= 0) {
            val = c->run_h;
            end = c->run_end;
            break;
        }
        if (c->run_next < 0) {
            c->run_h = 0;
            c->run_end = c->unknown ? -1 : cur;
            val = 0;
            end = c->run_end;
            break;
        }
        bool cycle = false;
        for (int j = 0; j < n_chain && !cycle; j++)
            cycle = chain[j] == cur;
        if (cycle) {
            /* A cycle of states whose run characters contain each other's
             * reads runs of any length. */
            val = cap;
            end = -1;
            break;
        }
        if (n_chain >= cap) {
            /* A chain as long as the cap is longer than any token: that
             * much is known of its first state only (the others may end
             * soon after the cut), so only that one is recorded. */
            struct wstate *first = &w->states[sid];
            first->run_h = (int16_t)cap;
            first->run_end = -1;
            n_chain = 0;
            break;
        }
        if (n_chain == cap_chain) {
            cap_chain *= 2;
            int *grown = xmalloc(sizeof(int) * (size_t)cap_chain);
            memcpy(grown, chain, sizeof(int) * (size_t)n_chain);
            if (chain != chain_small) free(chain);
            chain = grown;
        }
        chain[n_chain++] = cur;
        int t = c->run_next;
        run_profile(g, w, t);
        if (w->states[t].run_next < 0 || !run_covers(&w->states[t], &w->states[cur])) {
            /* The run stops at t (what t reads is checked by the caller). */
            val = 0;
            end = w->states[t].unknown ? -1 : t;
            break;
        }
        cur = t;
    }
    for (int j = n_chain - 1; j >= 0; j--) {
        struct wstate *c = &w->states[chain[j]];
        val = MIN(cap, val + 1);
        if (!c->run_quiet) end = -1;
        c->run_h = (int16_t)val;
        c->run_end = end;
    }
    if (chain != chain_small) free(chain);
    return w->states[sid].run_h;
}

/* ---- completions: a run that starts inside a character ----
 *
 * A table for the middle of a character (the previous token ended after a
 * lead byte) walks tokens that begin with continuation bytes: a run cannot
 * apply until the character is complete, and below each completing node
 * there may be little. But when the continuation bytes still due lead
 * uniformly (each range of Unicode table 3-7 read wholly by the same leaves)
 * to one state y, every string that first finishes the character reaches y,
 * so a subtree whose strings are well-formed from that decoding state (the
 * vocabulary's tn_wf) is decided by the run of y, in one step as well. */

static const uint8_t u8_cont[GRAMMAR_U8_STATES][3][2] = {
    [GRAMMAR_U8_NEED1] = {{0x80, 0xBF}},
    [GRAMMAR_U8_NEED2] = {{0x80, 0xBF}, {0x80, 0xBF}},
    [GRAMMAR_U8_NEED3] = {{0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    [GRAMMAR_U8_AFTER_E0] = {{0xA0, 0xBF}, {0x80, 0xBF}},
    [GRAMMAR_U8_AFTER_ED] = {{0x80, 0x9F}, {0x80, 0xBF}},
    [GRAMMAR_U8_AFTER_F0] = {{0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
    [GRAMMAR_U8_AFTER_F4] = {{0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}},
};
static const int u8_cont_len[GRAMMAR_U8_STATES] = {0, 1, 2, 3, 2, 2, 3, 3};

/* The state that state sid reaches once the character is finished, for
 * the first decoding state in wf (mid-character states only) whose
 * continuation bytes lead there uniformly through live states; -1 if none.
 * *quiet: neither sid nor a state on the way returned below the key. */
static int complete(const struct grammar *g, struct grammar_walker *w, int sid, unsigned wf,
                    bool *quiet)
{
    for (int u = GRAMMAR_U8_NEED1; u < GRAMMAR_U8_STATES; u++) {
        if (!(wf >> u & 1)) continue;
        int c = w->states[sid].comp[u - 1];
        if (c == -2) {
            int cur = sid;
            bool noisy = w->states[sid].unknown;
            for (int k = 0; k < u8_cont_len[u] && cur >= 0; k++) {
                unsigned lo = u8_cont[u][k][0], hi = u8_cont[u][k][1];
                if (!range_uniform(g, w, cur, lo, hi)) {
                    cur = -1;
                    break;
                }
                cur = step(g, w, cur, lo); /* may move w->states */
                if (w->states[cur].n == 0)
                    cur = -1;
                else
                    noisy |= w->states[cur].unknown;
            }
            c = cur < 0 ? -1 : 2 * cur + noisy;
            w->states[sid].comp[u - 1] = c;
        }
        if (c >= 0) {
            *quiet = !(c & 1);
            return c >> 1;
        }
    }
    return -1;
}

enum run_verdict {
    RUN_NONE, /* walk the subtree */
    RUN_ALL,  /* every token below is accepted */
    RUN_UPTO, /* tokens starting at most *h characters below are accepted, the rest rejected */
};

/* What a run from state sid says about the tokens below trie node nd (and
 * at it; its tokens end at index last of order). u: a stack already
 * returned below the key on the way to nd (rejected tokens would be
 * uncertain, so only RUN_ALL applies). When the strings
 * below start inside a character, the run is the one of the state that
 * finishes it (complete()). A subtree with characters outside the run is
 * still decided when the state reads none of the bytes that start them: a
 * run of height 0, which keeps only the tokens that end before them. */
static enum run_verdict run_verdict(const struct grammar *g, struct grammar_walker *w,
                                    const struct grammar_vocab *v, int sid,
                                    const struct grammar_tnode *nd, int last, bool u, int *h)
{
    if (last - nd->first < RUN_MIN_TOKENS) return RUN_NONE;
    bool quiet = true;
    if (!(nd->wf & (1u << GRAMMAR_U8_BOUNDARY))) {
        sid = complete(g, w, sid, nd->wf, &quiet);
        if (sid < 0) return RUN_NONE;
    }
    const uint64_t *sub = nd->sub_ascii;
    run_profile(g, w, sid);
    const struct wstate *s = &w->states[sid];
    int end;
    if ((sub[0] & ~s->run_ascii[0]) || (sub[1] & ~s->run_ascii[1]) || (nd->sub_mb && !s->run_mb)) {
        *h = 0;
        end = s->unknown ? -1 : sid;
    } else {
        *h = run_height(g, w, sid, MIN(v->max_depth, INT16_MAX));
        if (*h >= nd->chars) return RUN_ALL;
        end = w->states[sid].run_end;
    }
    if (u || !quiet || end < 0) return RUN_NONE;
    /* After h characters the run ends in state e; a longer token dies on the
     * first byte of its next character if e reads none of those bytes. */
    const uint64_t *alive = w->states[end].alive;
    if ((alive[0] & sub[0]) || (alive[1] & sub[1])) return RUN_NONE;
    if (nd->sub_mb) /* lead bytes C2-F4 */
        for (unsigned b = 0xC2; b <= 0xF4; b++)
            if (grammar__set_has(alive, b)) return RUN_NONE;
    return RUN_UPTO;
}

/* Charged for setting or listing a range of tokens (cheap per token). */
#define RANGE_UNITS(n) ((int64_t)(n) >> 2)

/* The verdicts of the tokens of trie t in a context, or NULL when the walk
 * ran past wk's budget (wk->over, blame, n_stacks set; the walker dropped). */
static struct grammar_posmask *compute(struct grammar *g, const struct grammar_vocab *v,
                                       const struct grammar_trie *t, const int32_t *key, int n_key,
                                       bool root, struct grammar_work *wk)
{
    /* A walker small next to the budget: growing one of its arrays (a
     * rehash of every node, a copy of every leaf) is charged to the walk
     * that triggers it, and must not overshoot the bound by much (an
     * eighth, at most). */
    struct grammar_walker *old = g->walker;
    if (old && (old->pool.n > MIN(WALKER_MAX_NODES, g->lim.mask_work / 16) ||
                old->n_states > MIN(WALKER_MAX_STATES, g->lim.mask_work / 64) ||
                old->n_leaves > g->lim.mask_work / 8)) {
        grammar__walker_free(g->walker);
        g->walker = NULL;
    }
    if (!g->walker) g->walker = walker_new();
    struct grammar_walker *w = g->walker;
    grammar__pool_bound(&w->pool, wk->max - wk->used, g->lim.max_stacks,
                        w->pool.n + g->lim.max_nodes);
    w->big = -1;
    w->big_n = 0;
    /* Depth-first over the trie with an explicit stack: one frame per node
     * whose children are being scanned. */
    struct frame {
        int32_t next;  /* next child to visit */
        int32_t end;   /* one past the last child */
        int32_t sid;   /* walker state at the node */
        int32_t chars; /* characters started on the path to the node */
        int32_t last;  /* one past the node's last token (in order) */
        bool unc;      /* a stack returned below the key on the way (tokens are
                          uncertain rather than rejected) */
    } *fr = xmalloc(sizeof(*fr) * (size_t)(v->max_depth + 1));
    struct i32list un = {0};
    int words = (v->n_vocab + 63) / 64, n_acc = 0;
    uint64_t *acc = xcalloc((size_t)words, 8); /* accepted tokens, straight into a bitmap */
    /* Returning below the key means the deepest frame's rule finished. */
    const uint64_t *follow = g->follow[g->rule_of[key[n_key - 1]]];
    const struct grammar_tnode *tn = t->tn;

    int32_t parent = root ? GRAMMAR_PARENT_ROOT : GRAMMAR_PARENT_UNKNW;
    for (int i = n_key - 1; i >= 1; i--)
        parent = grammar__node(&w->pool, key[i], parent);
    struct grammar_state st0 = {0};
    grammar__state_reserve(&st0, 1);
    st0.leaf[st0.n++] = grammar__node(&w->pool, key[0], parent);
    fr[0] = (struct frame){tn[0].kids, tn[0].kids + tn[0].n_kids, intern(g, w, &st0), 0, t->n_order,
                           false};
    free(st0.leaf);
    for (int top = 0; top >= 0;) {
        struct frame *f = &fr[top];
        if (f->next == f->end) {
            top--;
            continue;
        }
        if (++w->pool.units > w->pool.max_units && !w->pool.over)
            w->pool.over = GRAMMAR_POOL_OVER_WORK;
        if (w->pool.over) break;
        const struct grammar_tnode *nd = &tn[f->next++];
        int last = f->next < f->end ? tn[f->next].first : f->last;
        unsigned b = nd->byte;
        int chars = f->chars + ((b & 0xC0) != 0x80);
        const struct wstate *in = &w->states[f->sid];
        bool u = f->unc || (in->unknown && grammar__set_has(follow, b));
        if (!grammar__set_has(in->alive, b)) {
            /* No leaf reads b: the state after it is empty (no stack, no
             * return), so the subtree is rejected or uncertain as a whole. */
            if (u) {
                push_range(&un, t, nd->first, last);
                w->pool.units += RANGE_UNITS(last - nd->first);
            }
            continue;
        }
        int o_id = step(g, w, f->sid, b);
        if (nd->n_kids && w->states[o_id].n > 0) {
            int h = 0;
            enum run_verdict rv = run_verdict(g, w, v, o_id, nd, last, u, &h);
            if (rv != RUN_NONE) w->pool.units += RANGE_UNITS(last - nd->first);
            if (rv == RUN_ALL) n_acc += set_range(acc, t, nd->first, last);
            if (rv == RUN_UPTO) {
                int most = chars + h;
                for (int k = nd->first; k < last; k++) { /* branch-free: ~half pass */
                    uint64_t in_run = t->ord_starts[k] <= most;
                    acc[t->order[k] >> 6] |= in_run << (t->order[k] & 63);
                    n_acc += (int)in_run;
                }
            }
            if (rv != RUN_NONE) continue;
        }
        /* tokens ending at nd: order[first, t1) */
        int t1 = nd->n_here < UINT8_MAX ? nd->first + nd->n_here
                 : nd->n_kids           ? tn[nd->kids].first
                                        : last;
        const struct wstate *o = &w->states[o_id];
        if (o->n > 0 || o->unknown || o->accept)
            n_acc += set_range(acc, t, nd->first, t1);
        else if (u)
            push_range(&un, t, nd->first, t1);
        if (o->n == 0 && !o->unknown) {
            /* No stack lives inside the frame and none just returned: the
             * deeper tokens all are uncertain (a return happened before) or
             * all rejected. (A state that just returned goes one level
             * deeper, where each child's byte is checked against FOLLOW.) */
            if (u) {
                push_range(&un, t, t1, last);
                w->pool.units += RANGE_UNITS(last - t1);
            }
            continue;
        }
        if (nd->n_kids)
            fr[++top] = (struct frame){nd->kids, nd->kids + nd->n_kids, o_id, chars, last, u};
    }
    if (w->pool.over) {
        /* Stopped early: what it memoized may be incomplete. */
        const int32_t *leaf = w->tmp.leaf;
        int n_leaf = w->tmp.n;
        if (w->big >= 0 && w->big_n > n_leaf) {
            leaf = w->leaves + w->states[w->big].off;
            n_leaf = w->big_n;
        }
        wk->over = w->pool.over;
        wk->blame = grammar__blame(g, &w->pool, leaf, n_leaf);
        wk->n_stacks = n_leaf;
        wk->used += w->pool.units;
        grammar__walker_free(g->walker);
        g->walker = NULL;
        free(fr);
        free(acc);
        free(un.a);
        return NULL;
    }
    wk->used += w->pool.units + RANGE_UNITS(words);
    struct grammar_posmask *pm = xcalloc(1, sizeof(*pm));
    pm->n_accept = n_acc;
    if ((size_t)n_acc * 4 < (size_t)words * 8) {
        /* Few tokens: a list ORs faster than a bitmap. */
        pm->accept_list = xmalloc(sizeof(int32_t) * (size_t)(n_acc ? n_acc : 1));
        int k = 0;
        for (int wd = 0; wd < words; wd++)
            for (uint64_t m = acc[wd]; m; m &= m - 1)
                pm->accept_list[k++] = wd * 64 + __builtin_ctzll(m);
        CHECK(k == n_acc);
        free(acc);
    } else {
        pm->accept = acc;
    }
    pm->uncertain = un.a;
    pm->n_uncertain = un.n;
    free(fr);
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

/* The cached table of a context, or NULL (under g->mu). */
static struct grammar_posmask *lookup(struct grammar *g, const int32_t *key, int n_key, bool root,
                                      uint64_t h)
{
    if (!g->cap_tabs) return NULL;
    for (size_t k = h & (size_t)(g->cap_tabs - 1); g->tabs[k].hash;
         k = (k + 1) & (size_t)(g->cap_tabs - 1)) {
        struct grammar_ctxtab *t = &g->tabs[k];
        if (t->hash == h && t->n_key == n_key && t->root == root &&
            memcmp(t->key, key, sizeof(int32_t) * (size_t)n_key) == 0)
            return t->pm;
    }
    return NULL;
}

static int64_t posmask_bytes(const struct grammar_posmask *pm, int words)
{
    return (int64_t)sizeof(*pm) + (pm->accept ? 8 * (int64_t)words : 4 * (int64_t)pm->n_accept) +
           4 * (int64_t)pm->n_uncertain;
}

/* Caches pm under its context; false when the cache is full (the caller
 * keeps ownership). Under g->mu. */
static bool insert(struct grammar *g, const int32_t *key, int n_key, bool root, uint64_t h,
                   struct grammar_posmask *pm)
{
    /* Bounded memory: beyond the caps a table serves one mask only. */
    int64_t bytes = posmask_bytes(pm, (g->vocab->n_vocab + 63) / 64) + 4 * (int64_t)n_key;
    if (g->n_tabs >= GRAMMAR_MAX_TABLES || g->tab_bytes + bytes > g->lim.table_bytes) return false;
    g->tab_bytes += bytes;
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
    return true;
}

struct grammar_posmask *grammar__table(struct grammar *g, const struct grammar_vocab *v,
                                       const int32_t *key, int n_key, bool root, bool *owned,
                                       struct grammar_work *wk)
{
    CHECK(n_key >= 1 && key[0] >= 0 && key[0] < g->n_elems &&
          g->elems[key[0]].kind == GRAMMAR_E_BYTES);
    uint64_t h = key_hash(key, n_key, root);
    *owned = false;
    pthread_mutex_lock(&g->mu);
    if (!g->vocab) g->vocab = v;
    CHECK(g->vocab == v);
    struct grammar_posmask *pm = lookup(g, key, n_key, root, h);
    if (pm) goto out_unlock;
    /* Frames of bounded repetitions far from their end: the tokens of
     * fewer than GRAMMAR_REP_CAP characters have the verdicts they have in
     * the canonical context (ir.c, rep_canon), so its table serves them and
     * this one walks the long-token trie for the others. */
    int32_t ck[GRAMMAR_CTX_DEPTH];
    bool canon = false;
    for (int i = 0; i < n_key; i++) {
        ck[i] = g->rep_canon[key[i]];
        canon |= ck[i] != key[i];
    }
    struct grammar_posmask *base = NULL;
    bool base_owned = false;
    if (canon) {
        uint64_t hc = key_hash(ck, n_key, root);
        base = lookup(g, ck, n_key, root, hc);
        if (!base) {
            base = compute(g, v, &v->trie, ck, n_key, root, wk);
            if (!base) goto out_unlock;
            g->n_builds++;
            base_owned = !insert(g, ck, n_key, root, hc, base);
        }
    }
    pm = compute(g, v, canon ? &v->long_trie : &v->trie, key, n_key, root, wk);
    if (!pm) {
        if (base_owned) grammar__posmask_free(base);
        goto out_unlock;
    }
    pm->base = base;
    pm->base_owned = base_owned;
    g->n_builds++;
    *owned = !insert(g, key, n_key, root, h, pm);
out_unlock:
    pthread_mutex_unlock(&g->mu);
    return pm;
}

/* Fails the mask for wk's bound: mask all zero, the matcher failed. */
static int mask_fail(struct grammar_matcher *m, struct grammar_work *wk, uint64_t *mask, int words)
{
    memset(mask, 0, sizeof(uint64_t) * (size_t)words);
    grammar__matcher_fail_work(m, wk, true);
    grammar__matcher_set_work(m, wk->used);
    return ERR_INVALID;
}

int grammar_matcher_fill_mask(struct grammar_matcher *m, uint64_t *mask)
{
    struct grammar *g = grammar__matcher_grammar(m);
    const struct grammar_vocab *v = grammar__matcher_vocab(m);
    CHECK(v);
    int words = (v->n_vocab + 63) / 64;
    memset(mask, 0, sizeof(uint64_t) * (size_t)words);
    grammar__matcher_set_work(m, 0);
    int err = grammar_matcher_error(m, NULL);
    if (err) return err;
    if (grammar_matcher_is_terminated(m)) return 0;
    const struct grammar_state *st = grammar__matcher_state(m);
    struct grammar_pool *pool = grammar__matcher_pool(m);
    struct grammar_work wk = {.max = g->lim.mask_work, .blame = -1};
    int32_t key[GRAMMAR_CTX_DEPTH];
    bool any_uncertain = false;
    int rc = 0;
    /* Leaves with equal top frames share one table; leaves are few, and
     * equal stacks are equal nodes, so the only duplicates are stacks that
     * differ below the key: the table lookup dedups those. */
    struct grammar_posmask *tabs_small[16], **tabs = tabs_small;
    bool owned_small[16], *owned = owned_small;
    if (st->n > 16) {
        tabs = xmalloc(sizeof(*tabs) * (size_t)st->n);
        owned = xmalloc(sizeof(bool) * (size_t)st->n);
    }
    int n_tabs = 0;
    for (int i = 0; i < st->n; i++) {
        int n_key = 0;
        int32_t node = st->leaf[i];
        while (node >= 0 && n_key < GRAMMAR_CTX_DEPTH) {
            key[n_key++] = pool->pos[node];
            node = pool->parent[node];
        }
        wk.used += 1 + n_key / 4;
        tabs[i] = grammar__table(g, v, key, n_key, node == GRAMMAR_PARENT_ROOT, &owned[i], &wk);
        if (!tabs[i]) {
            /* Many stacks each with a table of its own cost more than one
             * walk's large state: charge the bigger of the two. */
            if (st->n >= wk.n_stacks) {
                wk.blame = grammar__blame(g, pool, st->leaf, st->n);
                wk.n_stacks = st->n;
            }
            rc = mask_fail(m, &wk, mask, words);
            goto out_free;
        }
        n_tabs = i + 1;
        for (const struct grammar_posmask *pm = tabs[i]; pm; pm = pm->base) {
            /* Locals: the stores into mask could alias the table's fields,
             * which would reload them every iteration. */
            const uint64_t *acc = pm->accept;
            const int32_t *list = pm->accept_list;
            int n_acc = pm->n_accept;
            if (acc) {
                for (int w = 0; w < words; w++)
                    mask[w] |= acc[w];
                wk.used += words >> 3;
            } else {
                for (int j = 0; j < n_acc; j++)
                    mask[list[j] >> 6] |= 1ull << (list[j] & 63);
                wk.used += n_acc >> 2;
            }
            any_uncertain |= pm->n_uncertain > 0;
        }
        if (wk.used > wk.max) {
            /* ORing this many tables is the cost: charge the stacks. */
            wk.over = GRAMMAR_POOL_OVER_WORK;
            wk.blame = grammar__blame(g, pool, st->leaf, st->n);
            wk.n_stacks = st->n;
            rc = mask_fail(m, &wk, mask, words);
            goto out_free;
        }
    }
    for (int i = 0; i < st->n && any_uncertain; i++)
        for (const struct grammar_posmask *pm = tabs[i]; pm; pm = pm->base)
            for (int j = 0; j < pm->n_uncertain; j++) {
                int32_t t = pm->uncertain[j];
                if ((mask[t >> 6] >> (t & 63)) & 1) continue;
                grammar__pool_bound(pool, wk.max - wk.used, g->lim.max_stacks, g->lim.max_nodes);
                bool ok =
                    grammar__matcher_try(m, v->bytes + v->off[t], v->off[t + 1] - v->off[t], &wk);
                wk.used += pool->units + 1;
                if (wk.over) {
                    rc = mask_fail(m, &wk, mask, words);
                    goto out_free;
                }
                if (ok) mask[t >> 6] |= 1ull << (t & 63);
            }
    if (st->accept)
        for (int k = 0; k < v->n_eog; k++)
            mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    rc = count_bits(mask, words);
    grammar__matcher_set_work(m, wk.used);
out_free:
    for (int i = 0; i < n_tabs; i++)
        if (owned[i]) grammar__posmask_free(tabs[i]);
    if (tabs != tabs_small) {
        free(tabs);
        free(owned);
    }
    return rc;
}

void grammar_table_stats(struct grammar *g, int *n_cached, uint64_t *n_built)
{
    pthread_mutex_lock(&g->mu);
    *n_cached = g->n_tabs;
    *n_built = g->n_builds;
    pthread_mutex_unlock(&g->mu);
}
