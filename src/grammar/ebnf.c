/*
 * ebnf.c - the GBNF dialect (llama.cpp's grammar files) into the builder.
 *
 *   grammar  ::= (rule | comment | blank)*
 *   rule     ::= name "::=" alts
 *   alts     ::= seq ("|" seq)*
 *   seq      ::= (item postfix?)*          ends at "|", ")", end, or "name ::="
 *   item     ::= "literal" | [class] | [^class] | . | name | "(" alts ")"
 *   postfix  ::= "*" | "+" | "?" | "{" m "}" | "{" m ",}" | "{" m "," n "}"
 *   name     ::= [a-zA-Z0-9_-]+            the start rule is `root`
 *   comment  ::= "#" to end of line
 *
 * Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \/ \xHH
 * \uHHHH \UHHHHHHHH. Literals and classes are UTF-8; `.` is any code point.
 * Every error names the line and column.
 *
 * A rule may be used before it is defined; a rule defined twice, a rule used
 * but never defined, and a missing `root` are errors. Groups and repeated
 * items become helper rules named after the rule they appear in.
 *
 * Thread: pure function of its input.
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EBNF_MAX_DEPTH 128 /* nesting of parentheses */

struct ebnf {
    const char *s;               /* source */
    size_t n;                    /* bytes */
    size_t i;                    /* cursor */
    struct grammar_builder *b;   /* output */
    struct err_msg *msg;         /* error output */
    int err;                     /* first error code, 0 if none */
    const char *cur_name;        /* rule being defined (helper rule names) */
    int n_helpers;               /* helper rules made so far */
    int spare;                   /* an emptied helper rule to reuse, or -1 */
    size_t line_at;              /* line_of's cursor: a byte offset ... */
    int line, col;               /* ... and its line and column */
    struct grammar_cprange *cls; /* class scratch */
    int cls_cap;                 /* allocated */
    struct ename *names;         /* (cap_names) open-addressed rule names, by hash */
    int n_names;                 /* entries */
    int cap_names;               /* power of two, or 0 */
};

/* A named rule: its name's place in the source and its index. */
struct ename {
    const char *s; /* name in the source; NULL: empty slot */
    size_t len;    /* bytes */
    int rule;      /* builder rule */
};

static int fail(struct ebnf *p, const char *what)
{
    if (p->err) return p->err;
    int line = 1, col = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) {
        if (p->s[k] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    p->err = err_set(p->msg, ERR_INVALID, "grammar: line %d, column %d: %s", line, col, what);
    return p->err;
}

/* Line and column of byte offset at (offsets asked for only grow, so the
 * count goes on from the last one). */
static void line_of(struct ebnf *p, size_t at, int *line, int *col)
{
    if (at < p->line_at) p->line_at = 0, p->line = p->col = 1;
    for (; p->line_at < at && p->line_at < p->n; p->line_at++) {
        if (p->s[p->line_at] == '\n')
            p->line++, p->col = 1;
        else
            p->col++;
    }
    *line = p->line;
    *col = p->col;
}

/* Names rule after the source text from start to the cursor, for budget
 * errors (budget.c). */
static void name_origin(struct ebnf *p, int rule, size_t start)
{
    struct grammar_builder *b = p->b;
    if (b->over || rule < 0 || rule >= b->n_rules) return;
    int line, col, n = (int)MIN(p->i - start, 60);
    line_of(p, start, &line, &col);
    b->rules[rule].origin =
        grammar__origin(b, "grammar: line %d, column %d: '%.*s%s' in rule '%s'", line, col, n,
                        p->s + start, p->i - start > 60 ? "..." : "", p->cur_name);
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static void skip_space(struct ebnf *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n')
                p->i++;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            p->i++;
        } else {
            break;
        }
    }
}

static size_t name_len(const struct ebnf *p, size_t at)
{
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k]))
        k++;
    return k - at;
}

/* Is the text at the cursor `name ::=` (the start of the next rule)? */
static bool at_rule_start(struct ebnf *p)
{
    size_t len = name_len(p, p->i);
    if (len == 0) return false;
    size_t k = p->i + len;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t'))
        k++;
    return k + 3 <= p->n && memcmp(p->s + k, "::=", 3) == 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads one (possibly escaped) UTF-8 character of a literal or class. */
static bool read_char(struct ebnf *p, uint32_t *cp)
{
    if (p->i >= p->n) return fail(p, "unexpected end of input"), false;
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (++p->i >= p->n) return fail(p, "unexpected end after '\\'"), false;
        char e = p->s[p->i++];
        int digits = 0;
        switch (e) {
        case 'n':
            *cp = '\n';
            return true;
        case 'r':
            *cp = '\r';
            return true;
        case 't':
            *cp = '\t';
            return true;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '/':
        case '^':
            *cp = (unsigned char)e;
            return true;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        default:
            p->i--;
            return fail(p, "unknown escape sequence"), false;
        }
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) return fail(p, "bad hex digit in escape"), false;
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v > GRAMMAR_MAX_CP) return fail(p, "code point above U+10FFFF"), false;
        *cp = v;
        return true;
    }
    size_t len = grammar__utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, cp);
    if (!len) return fail(p, "invalid UTF-8"), false;
    p->i += len;
    return true;
}

static void cls_push(struct ebnf *p, int *n, uint32_t lo, uint32_t hi)
{
    if (*n + 2 > p->cls_cap) {
        p->cls_cap = p->cls_cap ? 2 * p->cls_cap : 16;
        p->cls = xrealloc(p->cls, sizeof(*p->cls) * (size_t)p->cls_cap);
    }
    p->cls[(*n)++] = (struct grammar_cprange){lo, hi};
}

static int helper(struct ebnf *p, const char *kind)
{
    char nm[160];
    snprintf(nm, sizeof(nm), "%s~%s%d", p->cur_name, kind, ++p->n_helpers);
    if (p->spare >= 0) {
        /* Most items are inlined into their sequence, which leaves their
         * helper empty: reuse it rather than grow the rule count by one
         * per item. */
        int r = p->spare;
        p->spare = -1;
        free(p->b->rules[r].name);
        p->b->rules[r].name = xstrdup(nm);
        return r;
    }
    return grammar__rule(p->b, nm);
}

static uint64_t name_hash(const char *s, size_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

/* The rule called `name`, created (undefined) on first mention. Names are
 * looked up in a hash table: a grammar may have tens of thousands. */
static int find_rule(struct ebnf *p, const char *name, size_t len)
{
    if (2 * (p->n_names + 1) > p->cap_names) {
        int cap = p->cap_names ? 2 * p->cap_names : 256;
        struct ename *t = xcalloc((size_t)cap, sizeof(*t));
        for (int i = 0; i < p->cap_names; i++) {
            if (!p->names[i].s) continue;
            size_t k = name_hash(p->names[i].s, p->names[i].len) & (size_t)(cap - 1);
            while (t[k].s)
                k = (k + 1) & (size_t)(cap - 1);
            t[k] = p->names[i];
        }
        free(p->names);
        p->names = t;
        p->cap_names = cap;
    }
    size_t k = name_hash(name, len) & (size_t)(p->cap_names - 1);
    for (; p->names[k].s; k = (k + 1) & (size_t)(p->cap_names - 1))
        if (p->names[k].len == len && memcmp(p->names[k].s, name, len) == 0)
            return p->names[k].rule;
    char nm[160];
    snprintf(nm, sizeof(nm), "%.*s", (int)MIN(len, 150), name);
    int r = grammar__rule(p->b, nm);
    p->b->rules[r].defined = false;
    p->names[k] = (struct ename){name, len, r};
    p->n_names++;
    return r;
}

static void parse_alts(struct ebnf *p, int r, int depth);

static int parse_int(struct ebnf *p, int *out)
{
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
        return fail(p, "expected a number in {m,n}");
    long v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > GRAMMAR_MAX_REPEAT) return fail(p, "repetition bound above 1000");
    }
    *out = (int)v;
    return 0;
}

/* One item into rule r's current alternative; the item is first built as a
 * standalone rule when a postfix operator follows. */
static void parse_item(struct ebnf *p, int r, int depth)
{
    struct grammar_builder *b = p->b;
    size_t start = p->i;
    char c = p->s[p->i];
    int item = helper(p, "item"); /* standalone form of the item */
    grammar__alt(b, item);
    if (c == '"') {
        p->i++;
        while (!p->err && p->i < p->n && p->s[p->i] != '"') {
            uint32_t cp;
            if (!read_char(p, &cp)) return;
            struct grammar_cprange one = {cp, cp};
            grammar__chars(b, item, &one, 1);
        }
        if (p->i >= p->n) {
            fail(p, "unterminated string literal");
            return;
        }
        p->i++;
    } else if (c == '[') {
        p->i++;
        bool neg = p->i < p->n && p->s[p->i] == '^';
        if (neg) p->i++;
        int n = 0;
        while (!p->err && p->i < p->n && p->s[p->i] != ']') {
            uint32_t lo, hi;
            if (!read_char(p, &lo)) return;
            hi = lo;
            if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                p->i++;
                if (!read_char(p, &hi)) return;
                if (hi < lo) {
                    fail(p, "character range out of order");
                    return;
                }
            }
            cls_push(p, &n, lo, hi);
        }
        if (p->i >= p->n) {
            fail(p, "unterminated character class");
            return;
        }
        p->i++;
        n = grammar__ranges_normalize(p->cls, n);
        if (neg) {
            struct grammar_cprange *neg_r = xmalloc(sizeof(*neg_r) * (size_t)(n + 1));
            int k = grammar__ranges_negate(p->cls, n, neg_r);
            grammar__chars(b, item, neg_r, k);
            free(neg_r);
        } else {
            grammar__chars(b, item, p->cls, n);
        }
    } else if (c == '.') {
        p->i++;
        struct grammar_cprange any = {0, GRAMMAR_MAX_CP};
        grammar__chars(b, item, &any, 1);
    } else if (c == '(') {
        if (depth >= EBNF_MAX_DEPTH) {
            fail(p, "parentheses nested too deeply");
            return;
        }
        p->i++;
        /* The group's alternatives replace the empty one opened above. */
        b->rules[item].n_alts = 0;
        parse_alts(p, item, depth + 1);
        if (p->err) return;
        skip_space(p);
        if (p->i >= p->n || p->s[p->i] != ')') {
            fail(p, "expected ')'");
            return;
        }
        p->i++;
    } else if (is_name_char(c)) {
        size_t len = name_len(p, p->i);
        grammar__ref(b, item, find_rule(p, p->s + p->i, len));
        p->i += len;
    } else {
        fail(p, "expected a literal, class, rule name or group");
        return;
    }
    /* Postfix operators (possibly several: x?* is fine if odd). */
    int min = 1, max = 1;
    if (p->i < p->n) {
        char o = p->s[p->i];
        if (o == '*')
            min = 0, max = GRAMMAR_INF, p->i++;
        else if (o == '+')
            min = 1, max = GRAMMAR_INF, p->i++;
        else if (o == '?')
            min = 0, max = 1, p->i++;
        else if (o == '{') {
            p->i++;
            if (parse_int(p, &min)) return;
            max = min;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                if (p->i < p->n && p->s[p->i] == '}')
                    max = GRAMMAR_INF;
                else if (parse_int(p, &max))
                    return;
            }
            if (p->i >= p->n || p->s[p->i] != '}') {
                fail(p, "expected '}'");
                return;
            }
            p->i++;
            if (max != GRAMMAR_INF && max < min) {
                fail(p, "repetition {m,n} with n < m");
                return;
            }
        }
    }
    if (min == 1 && max == 1) {
        struct grammar_brule *it = &b->rules[item];
        if (it->n_alts != 1) {
            name_origin(p, item, start); /* a group of several alternatives */
            grammar__ref(b, r, item);
            return;
        }
        /* One alternative: inline it and leave the helper empty (an empty
         * rule derives nothing and is dropped when lowering). */
        struct grammar_balt a = it->alts[0];
        it->alts[0] = (struct grammar_balt){0}; /* its buffer is freed below */
        it->n_alts = 0;
        for (int k = 0; k < a.n; k++)
            if (a.e[k].kind == GRAMMAR_B_REF)
                grammar__ref(b, r, a.e[k].arg);
            else
                grammar__chars(b, r, b->sets[a.e[k].arg], b->set_n[a.e[k].arg]);
        free(a.e);
        p->spare = item;
        return;
    }
    int rep = grammar__repeat(b, b->rules[item].name, item, min, max);
    name_origin(p, rep, start);
    if (c == '(') name_origin(p, item, start);
    grammar__ref(b, r, rep);
}

static void parse_seq(struct ebnf *p, int r, int depth)
{
    grammar__alt(p->b, r);
    for (;;) {
        skip_space(p);
        if (p->err || p->i >= p->n) return;
        char c = p->s[p->i];
        if (c == '|' || c == ')') return;
        if (at_rule_start(p)) return;
        parse_item(p, r, depth);
    }
}

static void parse_alts(struct ebnf *p, int r, int depth)
{
    parse_seq(p, r, depth);
    while (!p->err) {
        skip_space(p);
        if (p->i >= p->n || p->s[p->i] != '|') return;
        p->i++;
        parse_seq(p, r, depth);
    }
}

int grammar__ebnf_build(struct grammar_builder *b, const char *src, size_t len, struct err_msg *msg)
{
    struct ebnf p = {.s = src, .n = len, .b = b, .msg = msg, .spare = -1};
    for (;;) {
        skip_space(&p);
        if (p.i >= p.n) break;
        size_t nl = name_len(&p, p.i);
        if (nl == 0 || !at_rule_start(&p)) {
            fail(&p, "expected a rule: name ::= ...");
            break;
        }
        int r = find_rule(&p, p.s + p.i, nl);
        if (b->rules[r].defined) {
            fail(&p, "rule defined twice");
            break;
        }
        b->rules[r].defined = true;
        p.cur_name = b->rules[r].name;
        int line, col;
        line_of(&p, p.i, &line, &col);
        b->rules[r].origin = grammar__origin(b, "grammar: rule '%s' (line %d)", p.cur_name, line);
        p.i += nl;
        skip_space(&p);
        p.i += 3; /* ::= */
        parse_alts(&p, r, 0);
        if (p.err) break;
        skip_space(&p);
        if (p.i < p.n && p.s[p.i] == ')') {
            fail(&p, "unbalanced ')'");
            break;
        }
    }
    free(p.cls);
    free(p.names);
    if (p.err) return p.err;
    if (b->over) return grammar__over_error(b, msg);
    for (int r = 0; r < b->n_rules; r++)
        if (strcmp(b->rules[r].name, "root") == 0 && b->rules[r].defined) return r;
    return err_set(msg, ERR_INVALID, "grammar: no 'root' rule");
}
