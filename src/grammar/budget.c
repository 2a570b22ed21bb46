/*
 * budget.c - what a grammar may cost, and naming what costs too much.
 *
 * A grammar is external input, and the cost of using one is not its size:
 * `(a?b?){30}){30}`-shaped nesting keeps thousands of stacks alive at once
 * (each a mask table of its own), a chain of nullable rules makes a closure
 * long, and a cold mask walks the vocabulary trie once per stack context.
 * So every stage runs under bounds (struct grammar_limits), counted in work
 * units where the work happens and checked as it goes, never afterwards:
 *
 *   compile   builder rules and program elements, a meter of units
 *             (builder pushes, lowering passes, the dry run) and the
 *             thread's CPU time read every GRAMMAR_METER_CLOCK units
 *   step      one token's bytes through the matcher: closure units (a node
 *             visited or made), stacks per state, stack nodes held
 *   mask      one token mask: table walks (trie nodes, closures, states
 *             interned), ORs of tables, run-time checks of uncertain tokens
 *
 * A unit is roughly one hash-consed node or one trie node visited, or the
 * copy of 64 bytes when an array grows: 5-10 ns on the benchmark schemas,
 * up to ~25 ns on the slowest masks (docs/grammar.md, "Limits"). The mask
 * default, 2^22 units, is 20x the slowest mask of those schemas.
 *
 * Before a grammar is used, a dry run looks for states that are too big:
 * without a vocabulary (grammar__dry_run, part of every compile) the start
 * state's closure and a few byte steps along the byte most stacks read;
 * with one (grammar_probe, run by the compile cache) the start state's mask
 * and a few token steps, which also computes the grammar's first tables
 * off the engine thread. What only shows later fails the one matcher that
 * meets it (match.c, mask.c).
 *
 * Naming the construct: front ends give rules an origin (the regex
 * fragment and offset, the GBNF rule and line, the JSON Schema pointer).
 * A large set of stacks is charged to the outermost rule whose frames sit
 * at several positions across the stacks - where they fan out (the outer
 * repetition of ((a?b?){30}){30}; the opt_k rules of one bounded
 * repetition count as that repetition) - else to the rule their common
 * frame calls, else to the origin most of their leaves share (an enum of
 * thousands of strings).
 *
 * Thread: pure functions of their arguments; grammar_probe takes the
 * grammar's table lock like any matcher.
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- limits ---- */

void grammar_limits_default(struct grammar_limits *l)
{
    *l = (struct grammar_limits){
        .max_rules = 1 << 16,
        .max_elems = 1 << 20,
        .compile_work = (int64_t)1 << 26,
        .compile_cpu_ms = 1000,
        .max_stacks = 1 << 13,
        .max_nodes = 1 << 21,
        .step_work = (int64_t)1 << 21,
        .mask_work = (int64_t)1 << 22,
        .probe_steps = 8,
        .table_bytes = (int64_t)64 << 20,
    };
}

void grammar_limits_resolve(const struct grammar_limits *lim, struct grammar_limits *out)
{
    struct grammar_limits d;
    grammar_limits_default(&d);
    *out = d;
    if (!lim) return;
#define TAKE(f)                                                                                    \
    if (lim->f > 0) out->f = lim->f
    TAKE(max_rules);
    TAKE(max_elems);
    TAKE(compile_work);
    TAKE(compile_cpu_ms);
    TAKE(max_stacks);
    TAKE(max_nodes);
    TAKE(step_work);
    TAKE(mask_work);
    TAKE(table_bytes);
    TAKE(probe_steps);
#undef TAKE
    if (lim->probe_steps < 0) out->probe_steps = 0;
}

const struct grammar_limits *grammar_limits_of(const struct grammar *g)
{
    return &g->lim;
}

/* ---- the compile meter ---- */

static int64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void grammar__meter_init(struct grammar_meter *m, const struct grammar_limits *lim)
{
    memset(m, 0, sizeof(*m));
    m->max_work = lim->compile_work;
    m->next_clock = GRAMMAR_METER_CLOCK;
    m->cpu_start = cpu_ns();
    m->cpu_max = lim->compile_cpu_ms * 1000000;
}

bool grammar__meter_charge(struct grammar_meter *m, int64_t units)
{
    if (m->over) return false;
    m->work += units;
    if (m->work > m->max_work) {
        m->over = GRAMMAR_OVER_WORK;
        return false;
    }
    if (m->work >= m->next_clock) {
        m->next_clock = m->work + GRAMMAR_METER_CLOCK;
        if (cpu_ns() - m->cpu_start > m->cpu_max) {
            m->over = GRAMMAR_OVER_CPU;
            return false;
        }
    }
    return true;
}

bool grammar__charge(struct grammar_builder *b, int64_t units)
{
    if (grammar__meter_charge(&b->meter, units)) return true;
    if (!b->over) {
        b->over = b->meter.over;
        b->over_rule = b->n_rules - 1;
    }
    return false;
}

int grammar__origin(struct grammar_builder *b, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (b->n_origins == b->cap_origins) {
        b->cap_origins = b->cap_origins ? 2 * b->cap_origins : 64;
        b->origins = xrealloc(b->origins, sizeof(char *) * (size_t)b->cap_origins);
    }
    char *o;
    if (b->origin_prefix) {
        size_t n = strlen(b->origin_prefix) + 2 + strlen(text) + 1;
        o = xmalloc(n);
        snprintf(o, n, "%s: %s", b->origin_prefix, text);
    } else {
        o = xstrdup(text);
    }
    b->origins[b->n_origins] = o;
    return b->n_origins++;
}

int grammar__over_error(const struct grammar_builder *b, struct err_msg *msg)
{
    const char *where = "";
    char at[480] = "";
    if (b->over_rule >= 0 && b->over_rule < b->n_rules) {
        const struct grammar_brule *r = &b->rules[b->over_rule];
        if (r->origin >= 0)
            snprintf(at, sizeof(at), "%s: ", b->origins[r->origin]);
        else
            snprintf(at, sizeof(at), "rule '%s': ", r->name);
        where = at;
    }
    switch (b->over) {
    case GRAMMAR_OVER_RULES:
        return err_set(msg, ERR_INVALID, "%sgrammar too large: more than %d rules (max_rules)",
                       where, b->lim.max_rules);
    case GRAMMAR_OVER_ELEMS:
        return err_set(msg, ERR_INVALID,
                       "%sgrammar too large: more than %d program elements (max_elems)", where,
                       b->lim.max_elems);
    case GRAMMAR_OVER_WORK:
        return err_set(msg, ERR_INVALID,
                       "%sgrammar too costly to compile: more than %lld work units "
                       "(compile_work)",
                       where, (long long)b->lim.compile_work);
    default:
        return err_set(msg, ERR_INVALID,
                       "%sgrammar too costly to compile: more than %lld ms of CPU "
                       "(compile_cpu_ms)",
                       where, (long long)b->lim.compile_cpu_ms);
    }
}

/* ---- naming the construct ---- */

#define BLAME_LEAVES 4096 /* stacks looked at */
#define BLAME_DEPTH  64   /* frames of each */

/* Stacks above each frame node: an open-addressed count per node id. */
struct nodecount {
    int32_t *node; /* (cap) node id, -1 empty */
    int32_t *n;    /* (cap) stacks through it */
    size_t cap;    /* power of two */
};

static void nc_add(struct nodecount *c, int32_t node)
{
    size_t k = ((uint32_t)node * 0x9E3779B1u) & (c->cap - 1);
    while (c->node[k] >= 0 && c->node[k] != node)
        k = (k + 1) & (c->cap - 1);
    c->node[k] = node;
    c->n[k]++;
}

int grammar__blame(const struct grammar *g, const struct grammar_pool *p, const int32_t *leaves,
                   int n)
{
    if (n <= 0) return -1;
    int nl = MIN(n, BLAME_LEAVES);
    struct nodecount nc = {0};
    nc.cap = 1024;
    while (nc.cap < 2 * (size_t)nl * BLAME_DEPTH)
        nc.cap *= 2;
    nc.node = xmalloc(sizeof(int32_t) * nc.cap);
    nc.n = xcalloc(nc.cap, sizeof(int32_t));
    memset(nc.node, 0xFF, sizeof(int32_t) * nc.cap);
    /* Per rule, over the frames that two or more stacks pass through (a
     * frame with one stack above it is no fan-out): the first position
     * seen, whether a second distinct one was, and how far from its leaf a
     * frame of it sat. */
    int32_t *first_pos = xmalloc(sizeof(int32_t) * (size_t)g->n_rules);
    uint8_t *multi = xcalloc((size_t)g->n_rules, 1);
    int16_t *far = xcalloc((size_t)g->n_rules, sizeof(int16_t));
    for (int r = 0; r < g->n_rules; r++)
        first_pos[r] = -1;
    for (int i = 0; i < nl; i++) {
        int32_t node = p->parent[leaves[i]];
        for (int d = 1; node >= 0 && d <= BLAME_DEPTH; d++, node = p->parent[node])
            nc_add(&nc, node);
    }
    for (int i = 0; i < nl; i++) {
        int32_t node = p->parent[leaves[i]];
        for (int d = 1; node >= 0 && d <= BLAME_DEPTH; d++, node = p->parent[node]) {
            size_t k = ((uint32_t)node * 0x9E3779B1u) & (nc.cap - 1);
            while (nc.node[k] != node)
                k = (k + 1) & (nc.cap - 1);
            if (nc.n[k] < 2) continue;
            int32_t pos = p->pos[node];
            int r = g->rule_of[pos];
            /* the opt_k rules of one bounded repetition are one construct */
            if (g->rule_owner[r] >= 0) r = g->rule_owner[r];
            if (first_pos[r] < 0)
                first_pos[r] = pos;
            else if (first_pos[r] != pos)
                multi[r] = 1;
            if (d > far[r]) far[r] = (int16_t)d;
        }
    }
    int best = -1;
    for (int r = 0; r < g->n_rules; r++)
        if (multi[r] && (best < 0 || far[r] > far[best])) best = r;
    free(first_pos);
    free(multi);
    free(far);
    free(nc.node);
    free(nc.n);
    if (best >= 0) return best;
    /* No rule fans out across frames: the stacks part at their leaves (the
     * alternatives of one rule, an enum's strings). Charge the rule their
     * deepest common frame calls. */
    int32_t chain[BLAME_DEPTH];
    int n_chain = 0;
    for (int32_t node = p->parent[leaves[0]]; node >= 0 && n_chain < BLAME_DEPTH;
         node = p->parent[node])
        chain[n_chain++] = node;
    int common = 0; /* chain[common..] is common to every stack seen so far */
    for (int i = 1; i < nl && common < n_chain; i++) {
        int k = n_chain;
        for (int32_t node = p->parent[leaves[i]], d = 0;
             node >= 0 && d < BLAME_DEPTH && k == n_chain; node = p->parent[node], d++)
            for (int j = common; j < n_chain; j++)
                if (chain[j] == node) {
                    k = j;
                    break;
                }
        common = k;
    }
    if (common < n_chain) return g->elems[p->pos[chain[common]]].arg;
    /* No frame either (the stacks are leaves of a table walk's context):
     * the rule of the leaves whose origin most of them share. */
    int best_rule = -1, best_n = 0, cur_n = 0, cur_o = -2;
    for (int i = 0; i < nl; i++) {
        int r = g->rule_of[p->pos[leaves[i]]], o = g->rule_origin[r];
        if (o < 0) continue;
        if (o == cur_o) {
            cur_n++;
        } else {
            cur_o = o;
            cur_n = 1;
        }
        if (cur_n > best_n) best_n = cur_n, best_rule = r;
    }
    return best_rule >= 0 ? best_rule : g->root;
}

int grammar__blame_error(const struct grammar *g, int rule, struct err_msg *msg, const char *fmt,
                         ...)
{
    char what[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (rule >= 0 && rule < g->n_rules && g->rule_origin[rule] >= 0)
        return err_set(msg, ERR_INVALID, "%s: %s", g->origins[g->rule_origin[rule]], what);
    if (rule >= 0 && rule < g->n_rules)
        return err_set(msg, ERR_INVALID, "%s: rule '%s': %s", grammar_kind_name(g->kind),
                       g->rule_names[rule], what);
    return err_set(msg, ERR_INVALID, "%s: %s", grammar_kind_name(g->kind), what);
}

void grammar__over_what(const struct grammar *g, int over, int n_stacks, bool mask, char *buf,
                        size_t len)
{
    switch (over) {
    case GRAMMAR_POOL_OVER_STACKS:
        snprintf(buf, len, "too ambiguous: more than %d stacks alive at once (max_stacks)",
                 g->lim.max_stacks);
        break;
    case GRAMMAR_POOL_OVER_NODES:
        snprintf(buf, len, "too deep: more than %d stack nodes (max_nodes)", g->lim.max_nodes);
        break;
    default:
        if (mask)
            snprintf(buf, len,
                     "too costly: a token mask needs more than %lld work units (mask_work; %d "
                     "stacks)",
                     (long long)g->lim.mask_work, n_stacks);
        else
            snprintf(buf, len,
                     "too costly: a step needs more than %lld work units (step_work; %d stacks)",
                     (long long)g->lim.step_work, n_stacks);
    }
}

/* ---- dry runs ---- */

/* The byte the most leaves of st read (ties: the lowest), or -1. */
static int busiest_byte(const struct grammar *g, const struct grammar_pool *p,
                        const struct grammar_state *st)
{
    int count[256] = {0};
    for (int i = 0; i < st->n; i++) {
        const uint64_t *set = g->sets[g->elems[p->pos[st->leaf[i]]].arg];
        for (int k = 0; k < 4; k++)
            for (uint64_t m = set[k]; m; m &= m - 1)
                count[k * 64 + __builtin_ctzll(m)]++;
    }
    int best = -1;
    for (int c = 0; c < 256; c++)
        if (count[c] > 0 && (best < 0 || count[c] > count[best])) best = c;
    return best;
}

static void path_text(const unsigned char *path, int n, char *buf, size_t len)
{
    size_t k = 0;
    for (int i = 0; i < n && k + 5 < len; i++) {
        unsigned c = path[i];
        if (c >= 0x20 && c < 0x7F && c != '\'' && c != '\\')
            buf[k++] = (char)c;
        else
            k += (size_t)snprintf(buf + k, len - k, "\\x%02X", c);
    }
    buf[k] = 0;
}

int grammar__dry_run(struct grammar *g, struct grammar_meter *meter, struct err_msg *msg)
{
    struct grammar_pool p;
    grammar__pool_init(&p);
    struct grammar_state st[2] = {{0}, {0}};
    unsigned char path[64];
    int n_path = 0, cur = 0, rc = 0;
    grammar__pool_bound(&p, g->lim.step_work, g->lim.max_stacks, g->lim.max_nodes);
    p.gen++;
    for (int a = g->rule_alt0[g->root]; a < g->rule_alt0[g->root + 1] && !p.over; a++)
        grammar__closure(g, &p, g->rule_alts[a], GRAMMAR_PARENT_ROOT, &st[0]);
    for (int step = 0;; step++) {
        bool metered = grammar__meter_charge(meter, p.units + st[cur].n);
        if (p.over) {
            char what[200], after[160] = "";
            grammar__over_what(g, p.over, st[cur].n, false, what, sizeof(what));
            if (n_path) {
                char t[130];
                path_text(path, n_path, t, sizeof(t));
                snprintf(after, sizeof(after), " after the input '%s'", t);
            }
            int blame = grammar__blame(g, &p, st[cur].leaf, st[cur].n);
            rc = grammar__blame_error(g, blame, msg, "%s%s", what, after);
            break;
        }
        if (!metered) {
            rc = ERR_INVALID; /* the caller reports the meter */
            break;
        }
        if (step >= g->lim.probe_steps || st[cur].n == 0) break;
        int b = busiest_byte(g, &p, &st[cur]);
        if (b < 0) break;
        if (n_path < (int)sizeof(path)) path[n_path++] = (unsigned char)b;
        grammar__pool_bound(&p, g->lim.step_work, g->lim.max_stacks, g->lim.max_nodes);
        grammar__advance(g, &p, &st[cur], (unsigned)b, &st[cur ^ 1]);
        cur ^= 1;
    }
    free(st[0].leaf);
    free(st[1].leaf);
    grammar__pool_release(&p);
    return rc;
}

int grammar_probe(struct grammar *g, const struct grammar_vocab *v, struct err_msg *msg)
{
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    int words = (v->n_vocab + 63) / 64, rc = 0;
    uint64_t *mask = xmalloc(sizeof(uint64_t) * (size_t)words);
    for (int step = 0; step <= g->lim.probe_steps; step++) {
        int n = grammar_matcher_fill_mask(m, mask);
        if (n <= 0) break;
        /* the allowed token with the most bytes: it goes deepest */
        int32_t best = -1;
        uint64_t best_len = 0;
        for (int w = 0; w < words; w++)
            for (uint64_t bits = mask[w]; bits; bits &= bits - 1) {
                int32_t t = w * 64 + __builtin_ctzll(bits);
                uint64_t len = v->off[t + 1] - v->off[t];
                if (v->cls[t] == GRAMMAR_TOKEN_NORMAL && len > best_len) best = t, best_len = len;
            }
        if (best < 0) break;
        if (!grammar_matcher_accept_token(m, best)) {
            /* the mask allowed it: only a budget can refuse it */
            CHECK(grammar_matcher_error(m, NULL) != 0);
            break;
        }
        if (grammar_matcher_is_terminated(m)) break;
    }
    const char *text;
    if ((rc = grammar_matcher_error(m, &text))) err_set(msg, rc, "%s", text);
    free(mask);
    grammar_matcher_free(m);
    return rc;
}
