/*
 * ir.c - the grammar builder and its lowering to a byte-level program.
 *
 * Front ends (ebnf.c, regex.c, schema.c) describe a language as rules of
 * alternatives of sequences of characters (code-point sets) and rule
 * references. Lowering (grammar__lower) then:
 *
 *   1. checks that every referenced rule is defined;
 *   2. finds the productive rules (those deriving some finite string) and
 *      drops alternatives that mention an unproductive one; a start rule that
 *      is unproductive matches nothing and is an error;
 *   3. rejects left recursion: a rule that can reach itself through nullable
 *      prefixes would make the automaton's closure push forever;
 *   4. turns every code-point set into UTF-8 byte sequences (surrogates
 *      D800-DFFF removed, they are not UTF-8): a set that is one sequence is
 *      inlined as BYTES elements, otherwise it becomes a helper rule with one
 *      alternative per sequence (all one-byte sequences merged into one);
 *   5. lays out the flat program and computes per-rule FOLLOW byte sets (what
 *      can be read right after a rule finishes, anywhere in the grammar) for
 *      the mask tables (mask.c).
 *
 * The UTF-8 split is the classic one (as in RE2 and Rust's regex-syntax):
 * cut a code point range at encoding-length boundaries, then where low bits
 * are not full, so that every piece is a product of byte ranges.
 *
 * Thread: a builder is used by one thread; the lowered grammar is immutable
 * except its mask tables (mask.c, under g->mu) and its refcount (atomic).
 */
#include "base/buf.h"
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- builder ---- */

void grammar__builder_init(struct grammar_builder *b, const struct grammar_limits *lim)
{
    memset(b, 0, sizeof(*b));
    grammar_limits_resolve(lim, &b->lim);
    grammar__meter_init(&b->meter, &b->lim);
    b->origin_cur = -1;
    b->over_rule = -1;
}

void grammar__builder_release(struct grammar_builder *b)
{
    for (int i = 0; i < b->n_rules; i++) {
        struct grammar_brule *r = &b->rules[i];
        for (int j = 0; j < r->n_init; j++)
            free(r->alts[j].e);
        free(r->alts);
        free(r->name);
    }
    free(b->rules);
    for (int i = 0; i < b->n_sets; i++)
        free(b->sets[i]);
    free(b->sets);
    free(b->set_n);
    for (int i = 0; i < b->n_origins; i++)
        free(b->origins[i]);
    free(b->origins);
    memset(b, 0, sizeof(*b));
}

int grammar__rule(struct grammar_builder *b, const char *name)
{
    if (b->n_rules >= b->lim.max_rules && !b->over) {
        b->over = GRAMMAR_OVER_RULES;
        b->over_rule = b->n_rules - 1;
    }
    grammar__charge(b, 4);
    if (b->over && b->n_rules > 0) {
        /* Keep going on a dummy rule so callers need no error path per
         * push; grammar__lower reports the bound. */
        return b->n_rules - 1;
    }
    if (b->n_rules == b->cap_rules) {
        b->cap_rules = b->cap_rules ? 2 * b->cap_rules : 64;
        b->rules = xrealloc(b->rules, sizeof(*b->rules) * (size_t)b->cap_rules);
    }
    struct grammar_brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof(*r));
    r->name = xstrdup(name);
    r->defined = true;
    r->rep_item = -1;
    r->rep_owner = -1;
    r->origin = b->origin_cur;
    return b->n_rules++;
}

void grammar__alt(struct grammar_builder *b, int r)
{
    struct grammar_brule *ru = &b->rules[r];
    if (ru->n_alts == ru->cap) {
        ru->cap = ru->cap ? 2 * ru->cap : 2;
        ru->alts = xrealloc(ru->alts, sizeof(*ru->alts) * (size_t)ru->cap);
    }
    struct grammar_balt *a = &ru->alts[ru->n_alts++];
    if (ru->n_alts <= ru->n_init) {
        /* a slot a front end gave back (n_alts lowered): keep its buffer */
        a->n = 0;
        return;
    }
    memset(a, 0, sizeof(*a));
    ru->n_init = ru->n_alts;
}

static void push(struct grammar_builder *b, int r, int kind, int arg)
{
    struct grammar_brule *ru = &b->rules[r];
    CHECK(ru->n_alts > 0);
    struct grammar_balt *a = &ru->alts[ru->n_alts - 1];
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 4;
        a->e = xrealloc(a->e, sizeof(*a->e) * (size_t)a->cap);
    }
    a->e[a->n++] = (struct grammar_belem){kind, arg};
    if (++b->n_elems > b->lim.max_elems && !b->over) {
        b->over = GRAMMAR_OVER_ELEMS;
        b->over_rule = r;
    }
    grammar__charge(b, 1);
}

void grammar__ref(struct grammar_builder *b, int r, int ref)
{
    push(b, r, GRAMMAR_B_REF, ref);
}

static int cmp_range(const void *a, const void *b)
{
    const struct grammar_cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int grammar__ranges_normalize(struct grammar_cprange *r, int n)
{
    if (n > 1) qsort(r, (size_t)n, sizeof(*r), cmp_range);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].lo > r[i].hi) continue;
        if (k > 0 && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi) r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    return k;
}

int grammar__ranges_negate(const struct grammar_cprange *r, int n, struct grammar_cprange *out)
{
    int k = 0;
    uint32_t next = 0;
    for (int i = 0; i < n; i++) {
        if (r[i].lo > next) out[k++] = (struct grammar_cprange){next, r[i].lo - 1};
        next = r[i].hi + 1;
    }
    if (next <= GRAMMAR_MAX_CP) out[k++] = (struct grammar_cprange){next, GRAMMAR_MAX_CP};
    return k;
}

void grammar__chars(struct grammar_builder *b, int r, const struct grammar_cprange *set, int n)
{
    /* Surrogates are not characters in UTF-8: cut them out here, so a set
     * of nothing but surrogates is empty (and its alternative dropped). */
    struct grammar_cprange *s = xmalloc(sizeof(*s) * (size_t)(2 * n + 1));
    int k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t lo = set[i].lo, hi = set[i].hi > GRAMMAR_MAX_CP ? GRAMMAR_MAX_CP : set[i].hi;
        if (lo > hi) continue;
        if (lo < 0xD800) s[k++] = (struct grammar_cprange){lo, hi < 0xD800 ? hi : 0xD7FF};
        if (hi > 0xDFFF) s[k++] = (struct grammar_cprange){lo > 0xE000 ? lo : 0xE000, hi};
    }
    n = grammar__ranges_normalize(s, k);
    /* Single characters repeat a lot (literals): share them. */
    for (int i = b->n_sets - 1; i >= 0 && i >= b->n_sets - 64; i--)
        if (b->set_n[i] == n && (n == 0 || memcmp(b->sets[i], s, sizeof(*s) * (size_t)n) == 0)) {
            free(s);
            push(b, r, GRAMMAR_B_CHARS, i);
            return;
        }
    if (b->n_sets == b->cap_sets) {
        b->cap_sets = b->cap_sets ? 2 * b->cap_sets : 64;
        b->sets = xrealloc(b->sets, sizeof(*b->sets) * (size_t)b->cap_sets);
        b->set_n = xrealloc(b->set_n, sizeof(*b->set_n) * (size_t)b->cap_sets);
    }
    b->sets[b->n_sets] = s;
    b->set_n[b->n_sets] = n;
    push(b, r, GRAMMAR_B_CHARS, b->n_sets++);
}

size_t grammar__utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || (size_t)len > n) return 0;
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return (size_t)len;
}

/* Literal text: an invalid byte decodes as itself (U+0080..U+00FF would
 * misrepresent it, but literals come from UTF-8 text the front ends accept;
 * anything else still gets a deterministic reading). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len = grammar__utf8_decode(s, n, cp);
    if (len) return len;
    *cp = s[0];
    return 1;
}

void grammar__lit(struct grammar_builder *b, int r, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_decode(u + i, n - i, &cp);
        struct grammar_cprange one = {cp, cp};
        grammar__chars(b, r, &one, 1);
    }
}

/* The rule a chain of one-reference wrappers (`( x )`, a rule `a ::= b`)
 * stands for: what a repetition's item really is. */
static int unwrap(const struct grammar_builder *b, int r)
{
    for (int hops = 0; hops < 16 && r >= 0 && r < b->n_rules; hops++) {
        const struct grammar_brule *ru = &b->rules[r];
        if (ru->rep_item >= 0 || ru->n_alts != 1 || ru->alts[0].n != 1 ||
            ru->alts[0].e[0].kind != GRAMMAR_B_REF)
            break;
        r = ru->alts[0].e[0].arg;
    }
    return r;
}

/* Folds a repetition of a repetition, (x{a,k}){min,max}, into one of x
 * where that is the same language, and returns the folded rule, or -1:
 *
 *   (x{a,})^j = x{a*j,}      so (x{a,}){min,max} = x{a*min,}  (min >= 1)
 *                            and (x{a,}){0,max}  = x*         (a <= 1, max >= 1)
 *   (x{0,k})^j = x{0,k*j}    so (x{0,k}){min,max} = x{0,k*max}, or x* when max is unbounded
 *
 * (the union over j of nested ranges). Without it, (.*){200}x has 200
 * nullable copies of .* alive at once - thousands of stacks per state, a
 * mask table for each - and ((a?){50}){50} 2,500; folded, both are a
 * single repetition with one or two stacks. Other shapes ((x{2}){1,2} is
 * x{2} or x{4}) are left as they are. */
static int repeat_fold(struct grammar_builder *b, const char *name, int item, int min, int max)
{
    if (max == 0) return -1;
    int t = unwrap(b, item);
    if (t < 0 || t >= b->n_rules || b->rules[t].rep_item < 0) return -1;
    int x = b->rules[t].rep_item, a = b->rules[t].rep_min, k = b->rules[t].rep_max;
    if (k == GRAMMAR_INF) {
        if (min >= 1 && (int64_t)a * min <= GRAMMAR_MAX_FOLDED)
            return grammar__repeat(b, name, x, a * min, GRAMMAR_INF);
        if (min == 0 && a <= 1) return grammar__repeat(b, name, x, 0, GRAMMAR_INF);
        return -1;
    }
    if (a != 0 || k == 0) return -1;
    if (max == GRAMMAR_INF) return grammar__repeat(b, name, x, 0, GRAMMAR_INF);
    if ((int64_t)k * max <= GRAMMAR_MAX_FOLDED) return grammar__repeat(b, name, x, 0, k * max);
    return -1;
}

int grammar__repeat(struct grammar_builder *b, const char *name, int item, int min, int max)
{
    char nm[160];
    int folded = repeat_fold(b, name, item, min, max);
    if (folded >= 0) return folded;
    int r = grammar__rule(b, name);
    if (max == GRAMMAR_INF) {
        /* star ::= item star | "" ; result ::= item{min} star */
        snprintf(nm, sizeof(nm), "%s-star", name);
        int star = grammar__rule(b, nm);
        if (!b->over) b->rules[star].rep_owner = r;
        grammar__alt(b, star);
        grammar__ref(b, star, item);
        grammar__ref(b, star, star);
        grammar__alt(b, star);
        grammar__alt(b, r);
        for (int i = 0; i < min; i++)
            grammar__ref(b, r, item);
        grammar__ref(b, r, star);
        goto out;
    }
    /* opt_k ::= item opt_{k-1} | "" (k optional items left); result ::= item{min} opt_{max-min}.
     * Nesting (rather than k flat alternatives) keeps the program linear in k. */
    int tail = -1;
    for (int k = 1; k <= max - min; k++) {
        snprintf(nm, sizeof(nm), "%s-opt%d", name, k);
        int o = grammar__rule(b, nm);
        if (!b->over) b->rules[o].rep_owner = r;
        grammar__alt(b, o);
        grammar__ref(b, o, item);
        if (tail >= 0) grammar__ref(b, o, tail);
        grammar__alt(b, o);
        b->rules[o].rep_left = k;
        b->rules[o].rep_next = tail;
        tail = o;
    }
    grammar__alt(b, r);
    for (int i = 0; i < min; i++)
        grammar__ref(b, r, item);
    if (tail >= 0) grammar__ref(b, r, tail);
out:
    /* A dummy rule past the rule limit must not become foldable. */
    if (!b->over) {
        b->rules[r].rep_item = item;
        b->rules[r].rep_min = min;
        b->rules[r].rep_max = max;
    }
    return r;
}

/* ---- lowering ---- */

struct byteseq {
    uint8_t lo[4]; /* first byte of each position */
    uint8_t hi[4]; /* last byte of each position */
    int n;         /* bytes */
};

struct seqlist {
    struct byteseq *s; /* (n) */
    int n;             /* sequences */
    int cap;           /* allocated */
};

static int utf8_len(uint32_t cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static void utf8_encode(uint32_t cp, uint8_t *o)
{
    switch (utf8_len(cp)) {
    case 1:
        o[0] = (uint8_t)cp;
        break;
    case 2:
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    case 3:
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        break;
    default:
        o[0] = (uint8_t)(0xF0 | (cp >> 18));
        o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    }
}

static void utf8_split(uint32_t lo, uint32_t hi, struct seqlist *out)
{
    static const uint32_t bounds[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && bounds[i] < hi) {
            utf8_split(lo, bounds[i], out);
            utf8_split(bounds[i] + 1, hi, out);
            return;
        }
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(lo, lo | m, out);
                utf8_split((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(lo, (hi & ~m) - 1, out);
                utf8_split(hi & ~m, hi, out);
                return;
            }
        }
    }
    if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 8;
        out->s = xrealloc(out->s, sizeof(*out->s) * (size_t)out->cap);
    }
    struct byteseq *s = &out->s[out->n++];
    s->n = n;
    utf8_encode(lo, s->lo);
    utf8_encode(hi, s->hi);
}

/* Byte sequences of a code-point set minus surrogates. */
static void charset_seqs(const struct grammar_cprange *r, int n, struct seqlist *out)
{
    out->n = 0;
    for (int i = 0; i < n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi > GRAMMAR_MAX_CP ? GRAMMAR_MAX_CP : r[i].hi;
        if (lo > hi) continue;
        if (lo < 0xD800 && hi >= 0xD800) {
            if (hi > 0xDFFF) utf8_split(0xE000, hi, out);
            hi = 0xD7FF;
        } else if (lo >= 0xD800 && lo <= 0xDFFF) {
            if (hi <= 0xDFFF) continue;
            lo = 0xE000;
        }
        utf8_split(lo, hi, out);
    }
}

struct setbuild {
    uint64_t (*sets)[4]; /* (n) distinct byte sets */
    int n;               /* sets */
    int cap;             /* allocated */
    int *hash;           /* (n_hash) set index + 1, 0 empty */
    int n_hash;          /* power of two */
};

static uint64_t set_hash(const uint64_t s[4])
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 4; i++)
        h = (h ^ s[i]) * 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static int set_intern(struct setbuild *sb, const uint64_t s[4])
{
    if (2 * (sb->n + 1) > sb->n_hash) {
        int nh = sb->n_hash ? 2 * sb->n_hash : 256;
        int *h = xcalloc((size_t)nh, sizeof(int));
        for (int i = 0; i < sb->n; i++) {
            size_t k = set_hash(sb->sets[i]) & (size_t)(nh - 1);
            while (h[k])
                k = (k + 1) & (size_t)(nh - 1);
            h[k] = i + 1;
        }
        free(sb->hash);
        sb->hash = h;
        sb->n_hash = nh;
    }
    size_t k = set_hash(s) & (size_t)(sb->n_hash - 1);
    while (sb->hash[k]) {
        if (memcmp(sb->sets[sb->hash[k] - 1], s, 32) == 0) return sb->hash[k] - 1;
        k = (k + 1) & (size_t)(sb->n_hash - 1);
    }
    if (sb->n == sb->cap) {
        sb->cap = sb->cap ? 2 * sb->cap : 64;
        sb->sets = xrealloc(sb->sets, sizeof(*sb->sets) * (size_t)sb->cap);
    }
    memcpy(sb->sets[sb->n], s, 32);
    sb->hash[k] = sb->n + 1;
    return sb->n++;
}

static int range_set(struct setbuild *sb, unsigned lo, unsigned hi)
{
    uint64_t s[4] = {0};
    for (unsigned c = lo; c <= hi; c++)
        s[c >> 6] |= 1ull << (c & 63);
    return set_intern(sb, s);
}

struct prog {
    struct grammar_elem *e; /* (n) */
    int n;                  /* elements */
    int cap;                /* allocated */
};

static void emit(struct prog *p, int kind, int arg)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->e = xrealloc(p->e, sizeof(*p->e) * (size_t)p->cap);
    }
    p->e[p->n++] = (struct grammar_elem){kind, arg};
}

/* ---- grammar analyses in linear time ----
 *
 * Productive, nullable, FIRST and FOLLOW are least fixpoints. Iterating
 * "until nothing changes" over every rule costs one pass per link of the
 * longest dependency chain, which is quadratic on a chain of 20,000 rules
 * (or 5,000 optional properties); so each is a worklist instead: a fact
 * (a rule became productive, a set grew) is pushed once and visits only the
 * places that depend on it. */

/* Occurrences of each rule in alternatives, by callee: for rule s, the
 * alternatives alt[off[s] .. off[s + 1]) each hold a reference to s (an
 * alternative referencing s twice is listed twice). */
struct occ {
    int *off; /* (n_rules + 1) */
    int *alt; /* (off[n_rules]) alternative indices */
};

static void occ_release(struct occ *o)
{
    free(o->off);
    free(o->alt);
}

/* A queue of rule indices; each rule is in it at most once. */
struct rqueue {
    int *q;      /* (n_rules) ring */
    bool *in;    /* (n_rules) queued now */
    int head, n; /* first entry, entries */
    int cap;     /* n_rules */
};

static void rq_init(struct rqueue *q, int n_rules)
{
    q->cap = n_rules > 0 ? n_rules : 1;
    q->q = xmalloc(sizeof(int) * (size_t)q->cap);
    q->in = xcalloc((size_t)q->cap, 1);
    q->head = q->n = 0;
}

static void rq_release(struct rqueue *q)
{
    free(q->q);
    free(q->in);
}

static void rq_push(struct rqueue *q, int r)
{
    if (q->in[r]) return;
    q->in[r] = true;
    q->q[(q->head + q->n++) % q->cap] = r;
}

static int rq_pop(struct rqueue *q)
{
    int r = q->q[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    q->in[r] = false;
    return r;
}

/* Edges dst ⊇ src between per-rule byte sets, grouped by src. */
struct sedges {
    int *src, *dst; /* (n) collected pairs */
    int n, cap;     /* pairs, allocated */
};

static void sedge_add(struct sedges *e, int src, int dst)
{
    if (e->n == e->cap) {
        e->cap = e->cap ? 2 * e->cap : 256;
        e->src = xrealloc(e->src, sizeof(int) * (size_t)e->cap);
        e->dst = xrealloc(e->dst, sizeof(int) * (size_t)e->cap);
    }
    e->src[e->n] = src;
    e->dst[e->n++] = dst;
}

static bool set_or(uint64_t d[4], const uint64_t s[4])
{
    bool changed = false;
    for (int i = 0; i < 4; i++) {
        uint64_t v = d[i] | s[i];
        changed |= v != d[i];
        d[i] = v;
    }
    return changed;
}

/* Closes sets under the edges: afterwards set[dst] contains set[src] for
 * every edge. A rule is queued only when its set grew, which happens at
 * most 256 times. */
static void sets_propagate(uint64_t (*set)[4], int n_rules, struct sedges *e)
{
    int *off = xcalloc((size_t)n_rules + 1, sizeof(int));
    int *dst = xmalloc(sizeof(int) * (size_t)(e->n ? e->n : 1));
    for (int i = 0; i < e->n; i++)
        off[e->src[i] + 1]++;
    for (int r = 0; r < n_rules; r++)
        off[r + 1] += off[r];
    int *fill = xmalloc(sizeof(int) * (size_t)(n_rules ? n_rules : 1));
    memcpy(fill, off, sizeof(int) * (size_t)n_rules);
    for (int i = 0; i < e->n; i++)
        dst[fill[e->src[i]]++] = e->dst[i];
    free(fill);
    struct rqueue q;
    rq_init(&q, n_rules);
    for (int r = 0; r < n_rules; r++)
        if (off[r + 1] > off[r] && (set[r][0] | set[r][1] | set[r][2] | set[r][3])) rq_push(&q, r);
    while (q.n) {
        int s = rq_pop(&q);
        for (int k = off[s]; k < off[s + 1]; k++)
            if (set_or(set[dst[k]], set[s])) rq_push(&q, dst[k]);
    }
    rq_release(&q);
    free(off);
    free(dst);
}

/* FIRST bytes and nullability of the lowered program, then FOLLOW per rule. */
static void compute_follow(struct grammar *g)
{
    int R = g->n_rules, A = g->rule_alt0[R];
    bool *nullable = xcalloc((size_t)R, 1);
    uint64_t(*first)[4] = xcalloc((size_t)R, 32);
    g->follow = xcalloc((size_t)R, 32);

    /* Nullable: an alternative without bytes whose callees all are. pending[a]
     * counts its references to rules not yet known nullable (-1: it reads a
     * byte). */
    struct occ o = {xcalloc((size_t)R + 1, sizeof(int)), NULL};
    int *pending = xcalloc((size_t)(A ? A : 1), sizeof(int));
    for (int a = 0; a < A; a++)
        for (int pos = g->rule_alts[a]; g->elems[pos].kind != GRAMMAR_E_END; pos++) {
            if (g->elems[pos].kind == GRAMMAR_E_BYTES) {
                pending[a] = -1;
            } else {
                o.off[g->elems[pos].arg + 1]++;
                if (pending[a] >= 0) pending[a]++;
            }
        }
    for (int r = 0; r < R; r++)
        o.off[r + 1] += o.off[r];
    o.alt = xmalloc(sizeof(int) * (size_t)(o.off[R] ? o.off[R] : 1));
    int *fill = xmalloc(sizeof(int) * (size_t)(R ? R : 1));
    memcpy(fill, o.off, sizeof(int) * (size_t)R);
    for (int a = 0; a < A; a++)
        for (int pos = g->rule_alts[a]; g->elems[pos].kind != GRAMMAR_E_END; pos++)
            if (g->elems[pos].kind == GRAMMAR_E_REF) o.alt[fill[g->elems[pos].arg]++] = a;
    free(fill);
    struct rqueue q;
    rq_init(&q, R);
    for (int a = 0; a < A; a++) {
        int r = g->rule_of[g->rule_alts[a]];
        if (pending[a] == 0 && !nullable[r]) nullable[r] = true, rq_push(&q, r);
    }
    while (q.n) {
        int s = rq_pop(&q);
        for (int k = o.off[s]; k < o.off[s + 1]; k++) {
            int a = o.alt[k], r = g->rule_of[g->rule_alts[a]];
            if (pending[a] > 0 && --pending[a] == 0 && !nullable[r])
                nullable[r] = true, rq_push(&q, r);
        }
    }
    rq_release(&q);
    free(pending);
    occ_release(&o);

    /* FIRST: the bytes an alternative starts with, and first[s] ⊆ first[r]
     * for every callee s reached through nullable callees. */
    struct sedges e = {0};
    for (int a = 0; a < A; a++) {
        int r = g->rule_of[g->rule_alts[a]];
        for (int pos = g->rule_alts[a];; pos++) {
            struct grammar_elem el = g->elems[pos];
            if (el.kind == GRAMMAR_E_END) break;
            if (el.kind == GRAMMAR_E_BYTES) {
                set_or(first[r], g->sets[el.arg]);
                break;
            }
            sedge_add(&e, el.arg, r);
            if (!nullable[el.arg]) break;
        }
    }
    sets_propagate(first, R, &e);

    /* FOLLOW: each alternative right to left with the FIRST set of the
     * suffix after the current element; a callee whose suffix is nullable
     * also gets what follows the calling rule. */
    e.n = 0;
    for (int a = 0; a < A; a++) {
        int start = g->rule_alts[a], end = start;
        while (g->elems[end].kind != GRAMMAR_E_END)
            end++;
        int r = g->rule_of[start];
        uint64_t suf[4] = {0, 0, 0, 0};
        bool suf_null = true;
        for (int pos = end - 1; pos >= start; pos--) {
            struct grammar_elem el = g->elems[pos];
            if (el.kind == GRAMMAR_E_BYTES) {
                memcpy(suf, g->sets[el.arg], 32);
                suf_null = false;
                continue;
            }
            set_or(g->follow[el.arg], suf);
            if (suf_null) sedge_add(&e, r, el.arg);
            if (nullable[el.arg]) {
                set_or(suf, first[el.arg]);
            } else {
                memcpy(suf, first[el.arg], 32);
                suf_null = false;
            }
        }
    }
    sets_propagate(g->follow, R, &e);
    free(e.src);
    free(e.dst);
    free(nullable);
    free(first);
}

/* Productive rules (deriving some finite string) and nullable ones, over
 * the builder. An alternative is productive when its character sets are
 * non-empty and its callees productive; nullable when it has no characters
 * and its callees are nullable (nullable rules are productive). */
static void builder_prod_null(const struct grammar_builder *b, bool *prod, bool *null)
{
    int R = b->n_rules;
    int *alt0 = xmalloc(sizeof(int) * ((size_t)R + 1));
    alt0[0] = 0;
    for (int r = 0; r < R; r++)
        alt0[r + 1] = alt0[r] + b->rules[r].n_alts;
    int A = alt0[R];
    int *alt_rule = xmalloc(sizeof(int) * (size_t)(A ? A : 1));
    /* pend_p: references to rules not yet productive (-1: an empty set);
     * pend_n: references to rules not yet nullable (-1: a character). */
    int *pend_p = xcalloc((size_t)(A ? A : 1), sizeof(int));
    int *pend_n = xcalloc((size_t)(A ? A : 1), sizeof(int));
    struct occ o = {xcalloc((size_t)R + 1, sizeof(int)), NULL};
    for (int r = 0; r < R; r++)
        for (int j = 0; j < b->rules[r].n_alts; j++) {
            int a = alt0[r] + j;
            const struct grammar_balt *al = &b->rules[r].alts[j];
            alt_rule[a] = r;
            for (int i = 0; i < al->n; i++) {
                struct grammar_belem el = al->e[i];
                if (el.kind == GRAMMAR_B_CHARS) {
                    pend_n[a] = -1;
                    if (b->set_n[el.arg] == 0) pend_p[a] = -1;
                } else {
                    o.off[el.arg + 1]++;
                    if (pend_p[a] >= 0) pend_p[a]++;
                    if (pend_n[a] >= 0) pend_n[a]++;
                }
            }
        }
    for (int r = 0; r < R; r++)
        o.off[r + 1] += o.off[r];
    o.alt = xmalloc(sizeof(int) * (size_t)(o.off[R] ? o.off[R] : 1));
    int *fill = xmalloc(sizeof(int) * (size_t)(R ? R : 1));
    memcpy(fill, o.off, sizeof(int) * (size_t)R);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < b->rules[r].n_alts; j++) {
            const struct grammar_balt *al = &b->rules[r].alts[j];
            for (int i = 0; i < al->n; i++)
                if (al->e[i].kind == GRAMMAR_B_REF) o.alt[fill[al->e[i].arg]++] = alt0[r] + j;
        }
    free(fill);
    for (int pass = 0; pass < 2; pass++) {
        bool *flag = pass == 0 ? prod : null;
        int *pend = pass == 0 ? pend_p : pend_n;
        struct rqueue q;
        rq_init(&q, R);
        for (int a = 0; a < A; a++)
            if (pend[a] == 0 && !flag[alt_rule[a]])
                flag[alt_rule[a]] = true, rq_push(&q, alt_rule[a]);
        while (q.n) {
            int s = rq_pop(&q);
            for (int k = o.off[s]; k < o.off[s + 1]; k++) {
                int a = o.alt[k];
                if (pend[a] > 0 && --pend[a] == 0 && !flag[alt_rule[a]])
                    flag[alt_rule[a]] = true, rq_push(&q, alt_rule[a]);
            }
        }
        rq_release(&q);
    }
    occ_release(&o);
    free(pend_p);
    free(pend_n);
    free(alt_rule);
    free(alt0);
}

/* DFS colours for the left-recursion check. */
enum { WHITE, GREY, BLACK };

/* A rule on the left-recursion search's path, and where the scan of its
 * alternatives is. */
struct lframe {
    int rule; /* rule being scanned */
    int alt;  /* alternative */
    int elem; /* next element of it to look at; -1: check the alternative first */
};

/* Finds a rule that reaches itself through nullable prefixes, starting the
 * search at r: depth-first over the references an alternative starts with
 * (and those after nullable ones), on an explicit stack fr (room for every
 * rule: each is on the path at most once), since a chain of tens of
 * thousands of rules is legal input. Returns the rule on the cycle, or -1. */
static int left_rec_find(const struct grammar_builder *b, int r, const bool *prod, const bool *null,
                         uint8_t *colour, struct lframe *fr)
{
    int top = 0;
    fr[0] = (struct lframe){r, 0, -1};
    colour[r] = GREY;
    while (top >= 0) {
        struct lframe *f = &fr[top];
        const struct grammar_brule *ru = &b->rules[f->rule];
        if (f->alt >= ru->n_alts) {
            colour[f->rule] = BLACK;
            top--;
            continue;
        }
        const struct grammar_balt *al = &ru->alts[f->alt];
        if (f->elem < 0) {
            bool ok = true;
            for (int i = 0; i < al->n && ok; i++)
                if (al->e[i].kind == GRAMMAR_B_REF && !prod[al->e[i].arg]) ok = false;
            f->elem = 0;
            if (!ok) f->elem = al->n;
        }
        if (f->elem >= al->n || al->e[f->elem].kind != GRAMMAR_B_REF) {
            f->alt++;
            f->elem = -1;
            continue;
        }
        int s = al->e[f->elem].arg;
        if (null[s]) {
            f->elem++;
        } else {
            f->alt++;
            f->elem = -1;
        }
        if (colour[s] == GREY) return s;
        if (colour[s] == WHITE) {
            colour[s] = GREY;
            fr[++top] = (struct lframe){s, 0, -1};
        }
    }
    return -1;
}

/* Fills g->rep_canon. A bounded repetition item{0,n} is a chain of rules
 * opt_k ::= item opt_{k-1} | "" (grammar__repeat); a stack inside the item
 * has one frame at opt_k's `item` reference. Such a frame with k >
 * GRAMMAR_REP_CAP maps to the frame of opt_CAP of the same chain: a token
 * that starts at most CAP - 1 characters meets at most CAP - 1 further
 * items (each non-empty item starts with a character of its own), so its
 * verdict is the same for every k >= CAP, and the tables of all those
 * positions share their short tokens (mask.c). The chain's layout is
 * checked; anything else keeps its own position. */
static void rep_canon(struct grammar *g, const struct grammar_builder *b)
{
    g->rep_canon = xmalloc(sizeof(int32_t) * (size_t)(g->n_elems ? g->n_elems : 1));
    for (int p = 0; p < g->n_elems; p++)
        g->rep_canon[p] = p;
    /* cap[r]: the chain's opt_CAP below opt_k = r, or -1. opt_{k-1} is made
     * before opt_k (a smaller index), so one pass in index order fills it
     * (walking each chain from every opt_k was quadratic in its length). */
    int *cap = xmalloc(sizeof(int) * (size_t)(b->n_rules ? b->n_rules : 1));
    for (int r = 0; r < b->n_rules; r++) {
        const struct grammar_brule *ru = &b->rules[r];
        int nx = ru->rep_next;
        cap[r] = ru->rep_left == GRAMMAR_REP_CAP ? r
                 : ru->rep_left > GRAMMAR_REP_CAP && nx >= 0 && nx < r &&
                         b->rules[nx].rep_left == ru->rep_left - 1
                     ? cap[nx]
                     : -1;
    }
    for (int r = 0; r < b->n_rules; r++) {
        if (b->rules[r].rep_left <= GRAMMAR_REP_CAP) continue;
        int c = cap[r];
        if (c < 0) continue;
        if (g->rule_alt0[r] == g->rule_alt0[r + 1] || g->rule_alt0[c] == g->rule_alt0[c + 1])
            continue;
        int pr = g->rule_alts[g->rule_alt0[r]], pc = g->rule_alts[g->rule_alt0[c]];
        const struct grammar_elem *er = &g->elems[pr], *ec = &g->elems[pc];
        if (er[0].kind != GRAMMAR_E_REF || ec[0].kind != GRAMMAR_E_REF || er[0].arg != ec[0].arg ||
            er[1].kind != GRAMMAR_E_REF || er[1].arg != b->rules[r].rep_next ||
            ec[1].kind != GRAMMAR_E_REF || ec[1].arg != b->rules[c].rep_next ||
            er[2].kind != GRAMMAR_E_END || ec[2].kind != GRAMMAR_E_END)
            continue;
        g->rep_canon[pr] = pc;
    }
    free(cap);
}

int grammar__lower(struct grammar_builder *b, int root, struct grammar **out, struct err_msg *msg)
{
    int rc = 0;
    if (b->over) return grammar__over_error(b, msg);
    int R = b->n_rules;
    /* Every pass below is linear in the builder's size, which the builder
     * bounds; charging it up front keeps the meter honest. */
    if (!grammar__charge(b, 8 * (int64_t)(b->n_elems + R))) return grammar__over_error(b, msg);
    for (int r = 0; r < R; r++)
        if (!b->rules[r].defined)
            return err_set(msg, ERR_INVALID, "rule '%s' is used but not defined", b->rules[r].name);

    /* Productive rules and nullable rules (over productive alternatives). */
    bool *prod = xcalloc((size_t)R, 1), *null = xcalloc((size_t)R, 1);
    builder_prod_null(b, prod, null);
    if (!prod[root]) {
        rc = err_set(msg, ERR_INVALID, "grammar matches no input (rule '%s' never completes)",
                     b->rules[root].name);
        goto out_free_flags;
    }
    uint8_t *colour = xcalloc((size_t)R, 1);
    struct lframe *lstack = xmalloc(sizeof(*lstack) * (size_t)(R ? R : 1));
    int cycle = -1;
    for (int r = 0; r < R && cycle < 0; r++)
        if (prod[r] && colour[r] == WHITE) cycle = left_rec_find(b, r, prod, null, colour, lstack);
    free(lstack);
    free(colour);
    if (cycle >= 0) {
        rc = err_set(msg, ERR_INVALID,
                     "rule '%s' is left-recursive (reaches itself without reading input)",
                     b->rules[cycle].name);
        goto out_free_flags;
    }

    /* Layout. Rules 0..R-1 keep their builder index; helper rules for
     * multi-sequence charsets follow. */
    struct grammar *g = xcalloc(1, sizeof(*g));
    g->refs = 1;
    pthread_mutex_init(&g->mu, NULL);
    g->root = root;
    struct setbuild sb = {0};
    struct prog p = {0};
    int *cs_rule = xmalloc(sizeof(int) * (size_t)(b->n_sets ? b->n_sets : 1));
    for (int i = 0; i < b->n_sets; i++)
        cs_rule[i] = -1;
    struct seqlist sl = {0};
    /* alternative starts per rule, gathered as (rule, start) then grouped */
    int n_alt = 0, cap_alt = 256;
    int *alt_rule = xmalloc(sizeof(int) * (size_t)cap_alt),
        *alt_pos = xmalloc(sizeof(int) * (size_t)cap_alt);
    int n_rules = R;
    int cap_names = R + 16;
    char **names = xmalloc(sizeof(char *) * (size_t)cap_names);
    for (int r = 0; r < R; r++)
        names[r] = xstrdup(b->rules[r].name);

#define ADD_ALT(rule_, pos_)                                                                       \
    do {                                                                                           \
        if (n_alt == cap_alt) {                                                                    \
            cap_alt *= 2;                                                                          \
            alt_rule = xrealloc(alt_rule, sizeof(int) * (size_t)cap_alt);                          \
            alt_pos = xrealloc(alt_pos, sizeof(int) * (size_t)cap_alt);                            \
        }                                                                                          \
        alt_rule[n_alt] = (rule_);                                                                 \
        alt_pos[n_alt++] = (pos_);                                                                 \
    } while (0)

    for (int r = 0; r < R; r++) {
        const struct grammar_brule *ru = &b->rules[r];
        if (!prod[r]) continue;
        for (int a = 0; a < ru->n_alts; a++) {
            const struct grammar_balt *al = &ru->alts[a];
            bool ok = true;
            for (int i = 0; i < al->n; i++) {
                struct grammar_belem el = al->e[i];
                if (el.kind == GRAMMAR_B_REF ? !prod[el.arg] : b->set_n[el.arg] == 0) ok = false;
            }
            if (!ok) continue;
            ADD_ALT(r, p.n);
            for (int i = 0; i < al->n; i++) {
                struct grammar_belem el = al->e[i];
                if (el.kind == GRAMMAR_B_REF) {
                    emit(&p, GRAMMAR_E_REF, el.arg);
                    continue;
                }
                if (cs_rule[el.arg] >= 0) {
                    emit(&p, GRAMMAR_E_REF, cs_rule[el.arg]);
                    continue;
                }
                charset_seqs(b->sets[el.arg], b->set_n[el.arg], &sl);
                CHECK(sl.n > 0);
                if (sl.n == 1) {
                    for (int k = 0; k < sl.s[0].n; k++)
                        emit(&p, GRAMMAR_E_BYTES, range_set(&sb, sl.s[0].lo[k], sl.s[0].hi[k]));
                    continue;
                }
                /* Helper rule; its alternatives are laid out after all
                 * builder rules (below), so remember the charset. */
                if (n_rules == cap_names) {
                    cap_names *= 2;
                    names = xrealloc(names, sizeof(char *) * (size_t)cap_names);
                }
                char nm[64];
                snprintf(nm, sizeof(nm), "char-class-%d", el.arg);
                names[n_rules] = xstrdup(nm);
                cs_rule[el.arg] = n_rules++;
                emit(&p, GRAMMAR_E_REF, cs_rule[el.arg]);
            }
            emit(&p, GRAMMAR_E_END, r);
        }
    }
    for (int c = 0; c < b->n_sets; c++) {
        if (cs_rule[c] < 0) continue;
        int hr = cs_rule[c];
        charset_seqs(b->sets[c], b->set_n[c], &sl);
        uint64_t one[4] = {0};
        bool any_one = false;
        for (int s = 0; s < sl.n; s++) {
            if (sl.s[s].n != 1) continue;
            for (unsigned x = sl.s[s].lo[0]; x <= sl.s[s].hi[0]; x++)
                one[x >> 6] |= 1ull << (x & 63);
            any_one = true;
        }
        if (any_one) {
            ADD_ALT(hr, p.n);
            emit(&p, GRAMMAR_E_BYTES, set_intern(&sb, one));
            emit(&p, GRAMMAR_E_END, hr);
        }
        for (int s = 0; s < sl.n; s++) {
            if (sl.s[s].n == 1) continue;
            ADD_ALT(hr, p.n);
            for (int k = 0; k < sl.s[s].n; k++)
                emit(&p, GRAMMAR_E_BYTES, range_set(&sb, sl.s[s].lo[k], sl.s[s].hi[k]));
            emit(&p, GRAMMAR_E_END, hr);
        }
    }
#undef ADD_ALT
    free(sl.s);
    free(cs_rule);

    g->elems = p.e;
    g->n_elems = p.n;
    g->n_rules = n_rules;
    g->rule_names = names;
    g->sets = sb.sets;
    g->n_sets = sb.n;
    free(sb.hash);
    /* Group alternatives by rule, keeping their order inside a rule. */
    g->rule_alt0 = xcalloc((size_t)n_rules + 1, sizeof(int));
    for (int i = 0; i < n_alt; i++)
        g->rule_alt0[alt_rule[i] + 1]++;
    for (int r = 0; r < n_rules; r++)
        g->rule_alt0[r + 1] += g->rule_alt0[r];
    g->rule_alts = xmalloc(sizeof(int) * (size_t)(n_alt ? n_alt : 1));
    int *fill = xmalloc(sizeof(int) * (size_t)n_rules);
    memcpy(fill, g->rule_alt0, sizeof(int) * (size_t)n_rules);
    for (int i = 0; i < n_alt; i++)
        g->rule_alts[fill[alt_rule[i]]++] = alt_pos[i];
    free(fill);
    free(alt_rule);
    free(alt_pos);
    g->rule_of = xmalloc(sizeof(int) * (size_t)(p.n ? p.n : 1));
    for (int r = 0; r < n_rules; r++)
        for (int a = g->rule_alt0[r]; a < g->rule_alt0[r + 1]; a++)
            for (int pos = g->rule_alts[a];; pos++) {
                g->rule_of[pos] = r;
                if (g->elems[pos].kind == GRAMMAR_E_END) break;
            }
    compute_follow(g);
    rep_canon(g, b);
    g->lim = b->lim;
    g->rule_origin = xmalloc(sizeof(int) * (size_t)(n_rules ? n_rules : 1));
    g->rule_owner = xmalloc(sizeof(int) * (size_t)(n_rules ? n_rules : 1));
    for (int r = 0; r < n_rules; r++) {
        g->rule_origin[r] = r < R ? b->rules[r].origin : -1;
        g->rule_owner[r] = r < R ? b->rules[r].rep_owner : -1;
    }
    g->origins = b->origins;
    g->n_origins = b->n_origins;
    b->origins = NULL;
    b->n_origins = b->cap_origins = 0;
    *out = g;
out_free_flags:
    free(prod);
    free(null);
    return rc;
}

/* ---- compiled grammar ---- */

const char *grammar_kind_name(enum grammar_kind kind)
{
    switch (kind) {
    case GRAMMAR_EBNF:
        return "ebnf";
    case GRAMMAR_REGEX:
        return "regex";
    case GRAMMAR_JSON_SCHEMA:
        return "json_schema";
    case GRAMMAR_JSON_OBJECT:
        return "json_object";
    case GRAMMAR_SEQUENCE:
        return "sequence";
    }
    return "?";
}

int grammar_compile(enum grammar_kind kind, const char *src, size_t len, struct grammar **out,
                    struct err_msg *msg)
{
    return grammar_compile_limits(kind, src, len, NULL, out, msg);
}

int grammar_compile_limits(enum grammar_kind kind, const char *src, size_t len,
                           const struct grammar_limits *lim, struct grammar **out,
                           struct err_msg *msg)
{
    struct grammar_builder b;
    grammar__builder_init(&b, lim);
    int root;
    switch (kind) {
    case GRAMMAR_EBNF:
        root = grammar__ebnf_build(&b, src, len, msg);
        break;
    case GRAMMAR_REGEX:
        root = grammar__regex_build(&b, src, len, false, false, msg);
        break;
    case GRAMMAR_JSON_SCHEMA:
        root = grammar__schema_build(&b, src, len, false, msg);
        break;
    case GRAMMAR_JSON_OBJECT:
        root = grammar__schema_build(&b, "{}", 2, true, msg);
        break;
    case GRAMMAR_SEQUENCE:
        root = grammar__seq_build(&b, src, len, msg);
        break;
    default:
        root = err_set(msg, ERR_INVALID, "unknown grammar kind %d", (int)kind);
    }
    /* A bound hit while building leaves a grammar cut short: that, not
     * whatever the front end made of it, is the error. */
    int rc = b.over     ? grammar__over_error(&b, msg)
             : root < 0 ? root
                        : grammar__lower(&b, root, out, msg);
    if (rc == 0) {
        (*out)->kind = kind;
        rc = grammar__dry_run(*out, &b.meter, msg);
        if (rc && b.meter.over) {
            b.over = b.meter.over;
            b.over_rule = -1;
            rc = grammar__over_error(&b, msg);
        }
        if (rc) {
            grammar_unref(*out);
            *out = NULL;
        }
    }
    grammar__builder_release(&b);
    return rc;
}

struct grammar *grammar_ref(struct grammar *g)
{
    __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void grammar_unref(struct grammar *g)
{
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    for (int i = 0; i < g->cap_tabs; i++)
        if (g->tabs[i].hash) {
            grammar__posmask_free(g->tabs[i].pm);
            free(g->tabs[i].key);
        }
    free(g->tabs);
    grammar__walker_free(g->walker);
    pthread_mutex_destroy(&g->mu);
    for (int r = 0; r < g->n_rules; r++)
        free(g->rule_names[r]);
    free(g->rule_names);
    free(g->elems);
    free(g->rule_alts);
    free(g->rule_alt0);
    free(g->sets);
    free(g->rule_of);
    free(g->follow);
    free(g->rep_canon);
    for (int i = 0; i < g->n_origins; i++)
        free(g->origins[i]);
    free(g->origins);
    free(g->rule_origin);
    free(g->rule_owner);
    free(g);
}

static void dump_set(const uint64_t s[4], struct buf *out)
{
    buf_putc(out, '[');
    for (unsigned c = 0; c < 256;) {
        if (!grammar__set_has(s, c)) {
            c++;
            continue;
        }
        unsigned e = c;
        while (e + 1 < 256 && grammar__set_has(s, e + 1))
            e++;
        if (c > 0x20 && c < 0x7F && c != ']' && c != '\\' && c != '-')
            buf_putc(out, (char)c);
        else
            buf_printf(out, "\\x%02X", c);
        if (e > c) {
            buf_putc(out, '-');
            if (e > 0x20 && e < 0x7F && e != ']' && e != '\\' && e != '-')
                buf_putc(out, (char)e);
            else
                buf_printf(out, "\\x%02X", e);
        }
        c = e + 1;
    }
    buf_putc(out, ']');
}

void grammar_dump(const struct grammar *g, struct buf *out)
{
    for (int r = 0; r < g->n_rules; r++) {
        buf_printf(out, "%s ::=", g->rule_names[r]);
        for (int a = g->rule_alt0[r]; a < g->rule_alt0[r + 1]; a++) {
            if (a > g->rule_alt0[r]) buf_puts(out, " |");
            for (int pos = g->rule_alts[a]; g->elems[pos].kind != GRAMMAR_E_END; pos++) {
                buf_putc(out, ' ');
                if (g->elems[pos].kind == GRAMMAR_E_REF)
                    buf_puts(out, g->rule_names[g->elems[pos].arg]);
                else
                    dump_set(g->sets[g->elems[pos].arg], out);
            }
        }
        buf_putc(out, '\n');
    }
}
