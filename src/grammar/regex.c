/*
 * regex.c - regular expressions in the JSON Schema `pattern` dialect (the
 * ECMA-262 subset that JSON Schema recommends): the parser into the tree of
 * regex.h, and the direct emission of that tree into builder rules.
 *
 *   alternation a|b, groups (...), (?:...), (?<name>...), quantifiers * + ?
 *   {n} {n,} {n,m} (a trailing ? for laziness is accepted: same language),
 *   classes [...] [^...] with ranges, \d \w \s \D \W \S (also inside
 *   classes), . (any character but \n \r U+2028 U+2029), escapes \n \r \t \f
 *   \v \0 \xHH \uHHHH (a surrogate pair \uD83D\uDE00 is one character) and
 *   escaped punctuation, anchors ^ at the start of a top-level alternative,
 *   $ anywhere, lookaheads (?=...) and (?!...) (nested too).
 *
 * Not supported (ERR_INVALID naming the construct and its offset):
 * backreferences, lookbehind, word boundaries \b \B, ^ elsewhere, flags,
 * Unicode property escapes, control escapes \cX.
 *
 * Two uses:
 *   - GRAMMAR_REGEX: the output must match the whole regex (anchors optional);
 *   - a JSON Schema `pattern` (search semantics: a match anywhere in the
 *     string, so an unanchored side gets "any characters"), emitted in JSON
 *     string spelling: '"' as \", '\' as \\, control characters as \b \f \n
 *     \r \t or \u00XX (hex digits in either case), '/' raw or as \/. Other
 *     characters appear raw (UTF-8), which is what JSON serializers write.
 *
 * A regex without lookaheads or inner `$` becomes rules directly (a rule per
 * group, grammar__repeat for quantifiers, so bounded repetitions keep their
 * shared mask tables); one with them is determinized (dfa.c), since neither
 * has a rule form.
 *
 * Thread: pure function of its input.
 */
#include "grammar/regex.h"

#include "base/check.h"
#include "grammar/dfa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGEX_MAX_DEPTH 128

/* ---- parser ---- */

struct rx {
    const char *s;               /* pattern */
    size_t n;                    /* bytes (the end of the part being parsed) */
    size_t i;                    /* cursor */
    struct grammar_rx *out;      /* the tree */
    struct err_msg *msg;         /* error output */
    int err;                     /* first error */
    struct grammar_cprange *cls; /* class scratch */
    int cls_n;                   /* ranges in scratch */
    int cls_cap;                 /* allocated */
};

static int fail(struct rx *p, const char *what)
{
    if (!p->err)
        p->err = err_set(p->msg, ERR_INVALID, "regex '%.*s': %s at offset %zu", (int)MIN(p->n, 200),
                         p->s, what, p->i);
    return p->err;
}

static int node_new(struct rx *p, int kind, size_t offset)
{
    struct grammar_rx *x = p->out;
    if (x->n_nodes == x->cap_nodes) {
        x->cap_nodes = x->cap_nodes ? 2 * x->cap_nodes : 32;
        x->nodes = xrealloc(x->nodes, sizeof(*x->nodes) * (size_t)x->cap_nodes);
    }
    x->nodes[x->n_nodes] = (struct grammar_rxnode){.kind = kind,
                                                   .child = -1,
                                                   .next = -1,
                                                   .min = 1,
                                                   .max = 1,
                                                   .set = -1,
                                                   .offset = (int)offset};
    return x->n_nodes++;
}

/* Appends child c to the list of parent node `par`, whose last child is *last. */
static void node_link(struct rx *p, int par, int *last, int c)
{
    if (*last < 0)
        p->out->nodes[par].child = c;
    else
        p->out->nodes[*last].next = c;
    *last = c;
}

static void cls_add(struct rx *p, uint32_t lo, uint32_t hi)
{
    if (p->cls_n + 1 > p->cls_cap) {
        p->cls_cap = p->cls_cap ? 2 * p->cls_cap : 32;
        p->cls = xrealloc(p->cls, sizeof(*p->cls) * (size_t)p->cls_cap);
    }
    p->cls[p->cls_n++] = (struct grammar_cprange){lo, hi};
}

/* A CHARS node of the scratch class. */
static int chars_node(struct rx *p, size_t offset)
{
    struct grammar_rx *x = p->out;
    if (x->n_sets == x->cap_sets) {
        x->cap_sets = x->cap_sets ? 2 * x->cap_sets : 16;
        x->sets = xrealloc(x->sets, sizeof(*x->sets) * (size_t)x->cap_sets);
        x->set_n = xrealloc(x->set_n, sizeof(*x->set_n) * (size_t)x->cap_sets);
    }
    int n = grammar__ranges_normalize(p->cls, p->cls_n);
    x->sets[x->n_sets] = xmalloc(sizeof(struct grammar_cprange) * (size_t)(n ? n : 1));
    if (n) memcpy(x->sets[x->n_sets], p->cls, sizeof(struct grammar_cprange) * (size_t)n);
    x->set_n[x->n_sets] = n;
    int nd = node_new(p, GRAMMAR_RX_CHARS, offset);
    x->nodes[nd].set = x->n_sets++;
    return nd;
}

static const struct grammar_cprange DIGIT[] = {{'0', '9'}};
static const struct grammar_cprange WORD[] = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
/* ECMA-262 WhiteSpace + LineTerminator. */
static const struct grammar_cprange SPACE[] = {
    {0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

static void cls_add_set(struct rx *p, const struct grammar_cprange *r, int n, bool neg)
{
    if (!neg) {
        for (int k = 0; k < n; k++)
            cls_add(p, r[k].lo, r[k].hi);
        return;
    }
    struct grammar_cprange tmp[16];
    int k = grammar__ranges_negate(r, n, tmp);
    for (int j = 0; j < k; j++)
        cls_add(p, tmp[j].lo, tmp[j].hi);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool read_hex(struct rx *p, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
        if (h < 0) return fail(p, "bad hex escape"), false;
        v = v * 16 + (uint32_t)h;
        p->i++;
    }
    *out = v;
    return true;
}

/* A UTF-8 character of the pattern itself. */
static bool read_utf8(struct rx *p, uint32_t *cp)
{
    size_t len = grammar__utf8_decode((const unsigned char *)p->s + p->i, p->n - p->i, cp);
    if (!len) return fail(p, "invalid UTF-8"), false;
    p->i += len;
    return true;
}

/* After a backslash: adds a class escape to the scratch class (returns 1),
 * or gives the escaped character (returns 0), or fails (-1). in_class:
 * \b is backspace there. */
static int read_escape(struct rx *p, bool in_class, uint32_t *cp)
{
    size_t at = p->i - 1; /* the backslash: where failures point */
    if (p->i >= p->n) return fail(p, "pattern ends with '\\'"), -1;
    char e = p->s[p->i++];
    switch (e) {
    case 'd':
        cls_add_set(p, DIGIT, 1, false);
        return 1;
    case 'D':
        cls_add_set(p, DIGIT, 1, true);
        return 1;
    case 'w':
        cls_add_set(p, WORD, 4, false);
        return 1;
    case 'W':
        cls_add_set(p, WORD, 4, true);
        return 1;
    case 's':
        cls_add_set(p, SPACE, (int)ARRAY_LEN(SPACE), false);
        return 1;
    case 'S':
        cls_add_set(p, SPACE, (int)ARRAY_LEN(SPACE), true);
        return 1;
    case 'n':
        *cp = '\n';
        return 0;
    case 'r':
        *cp = '\r';
        return 0;
    case 't':
        *cp = '\t';
        return 0;
    case 'f':
        *cp = '\f';
        return 0;
    case 'v':
        *cp = '\v';
        return 0;
    case '0':
        *cp = 0;
        return 0;
    case 'b':
        if (in_class) {
            *cp = '\b';
            return 0;
        }
        p->i = at;
        return fail(p, "word boundary \\b is not supported"), -1;
    case 'B':
        p->i = at;
        return fail(p, "\\B is not supported"), -1;
    case 'x':
        return read_hex(p, 2, cp) ? 0 : -1;
    case 'u': {
        if (!read_hex(p, 4, cp)) return -1;
        /* A surrogate pair spelled as two escapes is one character. */
        if (*cp >= 0xD800 && *cp <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' &&
            p->s[p->i + 1] == 'u') {
            size_t save = p->i;
            p->i += 2;
            uint32_t lo;
            if (read_hex(p, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                return 0;
            }
            p->err = 0;
            p->i = save;
        }
        return 0;
    }
    case 'p':
    case 'P':
        p->i = at;
        return fail(p, "Unicode property escapes are not supported"), -1;
    case 'c':
        p->i = at;
        return fail(p, "control escapes \\c are not supported"), -1;
    case 'k':
        p->i = at;
        return fail(p, "named backreferences are not supported"), -1;
    default:
        if (e >= '1' && e <= '9') {
            p->i = at;
            return fail(p, "backreferences are not supported"), -1;
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
            p->i = at;
            return fail(p, "unknown escape"), -1;
        }
        p->i--;
        return read_utf8(p, cp) ? 0 : -1;
    }
}

static int parse_alts(struct rx *p, int depth);

static bool parse_class(struct rx *p)
{
    /* cursor after '[' */
    bool neg = p->i < p->n && p->s[p->i] == '^';
    if (neg) p->i++;
    p->cls_n = 0;
    while (p->i < p->n && p->s[p->i] != ']') {
        uint32_t lo, hi;
        if (p->s[p->i] == '\\') {
            p->i++;
            int k = read_escape(p, true, &lo);
            if (k < 0) return false;
            if (k == 1) continue;
        } else if (!read_utf8(p, &lo)) {
            return false;
        }
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                int k = read_escape(p, true, &hi);
                if (k < 0) return false;
                if (k == 1) {
                    /* [a-\d]: '-' is literal */
                    cls_add(p, lo, lo);
                    cls_add(p, '-', '-');
                    continue;
                }
            } else if (!read_utf8(p, &hi)) {
                return false;
            }
            if (hi < lo) return fail(p, "class range out of order"), false;
        }
        cls_add(p, lo, hi);
    }
    if (p->i >= p->n) return fail(p, "unterminated character class"), false;
    p->i++;
    if (neg) {
        int n = grammar__ranges_normalize(p->cls, p->cls_n);
        struct grammar_cprange *out = xmalloc(sizeof(*out) * (size_t)(n + 1));
        int k = grammar__ranges_negate(p->cls, n, out);
        p->cls_n = 0;
        for (int j = 0; j < k; j++)
            cls_add(p, out[j].lo, out[j].hi);
        free(out);
    }
    return true;
}

static int parse_bound(struct rx *p, int *out)
{
    long v = 0;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return -1;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > GRAMMAR_MAX_REPEAT) return fail(p, "repetition bound above 1000"), -2;
    }
    *out = (int)v;
    return 0;
}

/* Tries to read {n}, {n,}, {n,m} at the cursor; a '{' that does not start a
 * valid quantifier is a literal (as in ECMA-262 Annex B). */
static int parse_braces(struct rx *p, int *min, int *max)
{
    size_t save = p->i;
    p->i++;
    int rc = parse_bound(p, min);
    if (rc == -2) return -1;
    if (rc < 0) goto literal;
    *max = *min;
    if (p->i < p->n && p->s[p->i] == ',') {
        p->i++;
        if (p->i < p->n && p->s[p->i] == '}')
            *max = GRAMMAR_INF;
        else {
            rc = parse_bound(p, max);
            if (rc == -2) return -1;
            if (rc < 0) goto literal;
        }
    }
    if (p->i >= p->n || p->s[p->i] != '}') goto literal;
    p->i++;
    if (*max != GRAMMAR_INF && *max < *min) return fail(p, "quantifier {n,m} with m < n"), -1;
    return 1;
literal:
    p->i = save;
    return 0;
}

/* A group after its '(': the node of its contents. */
static int parse_group(struct rx *p, int depth)
{
    size_t open = p->i - 1;
    if (depth >= REGEX_MAX_DEPTH) return fail(p, "groups nested too deeply"), -1;
    int look = -1;
    if (p->i < p->n && p->s[p->i] == '?') {
        char k = p->i + 1 < p->n ? p->s[p->i + 1] : 0;
        char k2 = p->i + 2 < p->n ? p->s[p->i + 2] : 0;
        if (k == ':') {
            p->i += 2;
        } else if (k == '=' || k == '!') {
            p->i += 2;
            look = node_new(p, GRAMMAR_RX_LOOK, open);
            p->out->nodes[look].negate = k == '!';
            p->out->has_look = true;
        } else if (k == '<' && (k2 == '=' || k2 == '!')) {
            p->i = open;
            return fail(p, "lookbehind assertions are not supported"), -1;
        } else if (k == '<') {
            p->i += 2;
            while (p->i < p->n && p->s[p->i] != '>')
                p->i++;
            if (p->i >= p->n) return fail(p, "unterminated group name"), -1;
            p->i++;
        } else {
            p->i = open;
            return fail(p, "unknown group construct '(?'"), -1;
        }
    }
    int body = parse_alts(p, depth + 1);
    if (p->err) return -1;
    if (p->i >= p->n || p->s[p->i] != ')') return fail(p, "expected ')'"), -1;
    p->i++;
    if (look < 0) return body;
    p->out->nodes[look].child = body;
    return look;
}

/* One atom and its quantifier. */
static int parse_atom(struct rx *p, int depth)
{
    size_t at = p->i;
    char c = p->s[p->i];
    int nd;
    if (c == '(') {
        p->i++;
        nd = parse_group(p, depth);
        if (nd < 0) return -1;
    } else if (c == '[') {
        p->i++;
        if (!parse_class(p)) return -1;
        nd = chars_node(p, at);
    } else if (c == '.') {
        p->i++;
        p->cls_n = 0;
        cls_add(p, 0, '\n' - 1);
        cls_add(p, '\n' + 1, '\r' - 1);
        cls_add(p, '\r' + 1, 0x2027);
        cls_add(p, 0x202A, GRAMMAR_MAX_CP);
        nd = chars_node(p, at);
    } else if (c == '\\') {
        p->i++;
        p->cls_n = 0;
        uint32_t cp;
        int k = read_escape(p, false, &cp);
        if (k < 0) return -1;
        if (k == 0) cls_add(p, cp, cp);
        nd = chars_node(p, at);
    } else if (c == '*' || c == '+' || c == '?') {
        return fail(p, "nothing to repeat"), -1;
    } else if (c == '^') {
        return fail(p, "anchors '^' are supported only at the start of a top-level alternative"),
               -1;
    } else if (c == '$') {
        p->i++;
        p->out->has_look = true;
        return node_new(p, GRAMMAR_RX_END, at);
    } else if (c == '{') {
        /* a '{' that is not a quantifier is a literal */
        p->i++;
        p->cls_n = 0;
        cls_add(p, '{', '{');
        return chars_node(p, at);
    } else {
        uint32_t cp;
        if (!read_utf8(p, &cp)) return -1;
        p->cls_n = 0;
        cls_add(p, cp, cp);
        nd = chars_node(p, at);
    }
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
            int q = parse_braces(p, &min, &max);
            if (q < 0) return -1;
        }
        if ((min != 1 || max != 1) && p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy */
        if (p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' ||
                            (p->s[p->i] == '?' && (min != 1 || max != 1))))
            return fail(p, "nothing to repeat"), -1;
    }
    /* groups and repetitions are what can blow up: their text names them in
     * budget errors (budget.c) */
    if (c == '(') p->out->nodes[nd].span = (int)(p->i - at);
    if (min == 1 && max == 1) return nd;
    int r = node_new(p, GRAMMAR_RX_REPEAT, at);
    p->out->nodes[r].child = nd;
    p->out->nodes[r].min = min;
    p->out->nodes[r].max = max;
    p->out->nodes[r].span = (int)(p->i - at);
    return r;
}

static int parse_seq(struct rx *p, int depth)
{
    int cat = node_new(p, GRAMMAR_RX_CAT, p->i), last = -1;
    while (!p->err && p->i < p->n) {
        char c = p->s[p->i];
        if (c == '|' || c == ')') break;
        int a = parse_atom(p, depth);
        if (a < 0) return -1;
        node_link(p, cat, &last, a);
    }
    return p->err ? -1 : cat;
}

static int parse_alts(struct rx *p, int depth)
{
    int first = parse_seq(p, depth);
    if (first < 0 || p->i >= p->n || p->s[p->i] != '|') return first;
    int alt = node_new(p, GRAMMAR_RX_ALT, p->i), last = -1;
    node_link(p, alt, &last, first);
    while (!p->err && p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        int s = parse_seq(p, depth);
        if (s < 0) return -1;
        node_link(p, alt, &last, s);
    }
    return p->err ? -1 : alt;
}

void grammar__rx_release(struct grammar_rx *rx)
{
    for (int i = 0; i < rx->n_sets; i++)
        free(rx->sets[i]);
    free(rx->sets);
    free(rx->set_n);
    free(rx->nodes);
    free(rx->tops);
    memset(rx, 0, sizeof(*rx));
}

int grammar__rx_parse(struct grammar_rx *rx, const char *src, size_t len, struct err_msg *msg)
{
    memset(rx, 0, sizeof(*rx));
    rx->src = src;
    rx->len = len;
    struct rx p = {.s = src, .n = len, .out = rx, .msg = msg};
    /* Top-level alternatives are parsed one by one so each can carry its own
     * anchors. */
    for (;;) {
        bool anchored_start = false, anchored_end = false;
        if (p.i < p.n && p.s[p.i] == '^') {
            anchored_start = true;
            p.i++;
        }
        /* find the end of this top-level alternative */
        size_t end = p.i;
        int d = 0;
        bool in_cls = false;
        for (; end < p.n; end++) {
            char c = p.s[end];
            if (c == '\\') {
                end++;
                continue;
            }
            if (in_cls) {
                if (c == ']') in_cls = false;
                continue;
            }
            if (c == '[')
                in_cls = true;
            else if (c == '(')
                d++;
            else if (c == ')')
                d--;
            else if (c == '|' && d == 0)
                break;
        }
        if (end > p.n) end = p.n; /* a trailing backslash stepped past the end */
        size_t stop = end;
        if (stop > p.i && p.s[stop - 1] == '$') {
            /* an escaped \$ is a literal */
            size_t bs = 0;
            for (size_t k = stop - 1; k > p.i && p.s[k - 1] == '\\'; k--)
                bs++;
            if (bs % 2 == 0) {
                anchored_end = true;
                stop--;
            }
        }
        size_t save_n = p.n;
        p.n = stop;
        size_t body_start = p.i;
        int body = parse_alts(&p, 0);
        if (body >= 0) {
            rx->nodes[body].offset = (int)body_start;
            rx->nodes[body].span = (int)(p.i - body_start);
        }
        if (!p.err && p.i < p.n)
            fail(&p, p.s[p.i] == ')' ? "unbalanced ')'" : "unexpected character");
        p.n = save_n;
        if (p.err) break;
        if (rx->n_tops == rx->cap_tops) {
            rx->cap_tops = rx->cap_tops ? 2 * rx->cap_tops : 4;
            rx->tops = xrealloc(rx->tops, sizeof(*rx->tops) * (size_t)rx->cap_tops);
        }
        rx->tops[rx->n_tops++] =
            (struct grammar_rxtop){.node = body, .start = anchored_start, .end = anchored_end};
        p.i = end;
        if (p.i >= p.n) break;
        p.i++; /* '|' */
    }
    free(p.cls);
    if (p.err) {
        grammar__rx_release(rx);
        return p.err;
    }
    return 0;
}

/* ---- JSON string spelling ---- */

int grammar__json_raw(const struct grammar_cprange *r, int n, struct grammar_cprange *out)
{
    static const struct grammar_cprange cut[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    int k = 0;
    for (int i = 0; i < n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi;
        /* subtract each cut range (sorted, disjoint) */
        for (int c = 0; c < 3 && lo <= hi; c++) {
            if (cut[c].hi < lo || cut[c].lo > hi) continue;
            if (cut[c].lo > lo) out[k++] = (struct grammar_cprange){lo, cut[c].lo - 1};
            lo = cut[c].hi + 1;
        }
        if (lo <= hi) out[k++] = (struct grammar_cprange){lo, hi};
    }
    return k;
}

void grammar__json_escapes(struct grammar_builder *b, int rule, const struct grammar_cprange *r,
                           int n)
{
    for (int i = 0; i < n; i++)
        for (uint32_t c = r[i].lo; c <= r[i].hi && c < 0x80; c++) {
            const char *esc = NULL;
            switch (c) {
            case '"':
                esc = "\\\"";
                break;
            case '\\':
                esc = "\\\\";
                break;
            case '/':
                esc = "\\/";
                break;
            case '\b':
                esc = "\\b";
                break;
            case '\f':
                esc = "\\f";
                break;
            case '\n':
                esc = "\\n";
                break;
            case '\r':
                esc = "\\r";
                break;
            case '\t':
                esc = "\\t";
                break;
            default:
                break;
            }
            if (esc) {
                grammar__alt(b, rule);
                grammar__lit(b, rule, esc, strlen(esc));
            }
            if (c < 0x20) {
                /* \u00XX, hex digits in either case */
                grammar__alt(b, rule);
                grammar__lit(b, rule, "\\u00", 4);
                struct grammar_cprange d1[2] = {{'0' + (c >> 4), '0' + (c >> 4)}};
                grammar__chars(b, rule, d1, 1);
                unsigned lo4 = c & 15;
                struct grammar_cprange d2[2];
                int nd = 0;
                if (lo4 < 10)
                    d2[nd++] = (struct grammar_cprange){'0' + lo4, '0' + lo4};
                else {
                    d2[nd++] = (struct grammar_cprange){'A' + lo4 - 10, 'A' + lo4 - 10};
                    d2[nd++] = (struct grammar_cprange){'a' + lo4 - 10, 'a' + lo4 - 10};
                }
                grammar__chars(b, rule, d2, nd);
            }
            if (c == 0x7F) break;
        }
}

/* ---- direct emission ---- */

struct emit {
    struct grammar_builder *b;   /* output */
    const struct grammar_rx *rx; /* the tree */
    bool json;                   /* characters in JSON string spelling */
    int n_helpers;               /* helper rule counter */
};

static int helper(struct emit *e)
{
    char nm[48];
    snprintf(nm, sizeof(nm), "regex~%d", ++e->n_helpers);
    return grammar__rule(e->b, nm);
}

/* Names rule after the pattern text of node nd, for budget errors
 * (budget.c): the fragment and its offset, inside the schema's pointer when
 * the pattern is a JSON Schema's. */
static void name_origin(struct emit *e, int rule, int nd)
{
    struct grammar_builder *b = e->b;
    const struct grammar_rxnode *x = &e->rx->nodes[nd];
    if (b->over || rule < 0 || rule >= b->n_rules || x->span <= 0) return;
    int n = MIN(x->span, 60);
    const char *more = x->span > 60 ? "..." : "";
    const char *frag = e->rx->src + x->offset;
    b->rules[rule].origin =
        b->origin_cur >= 0
            ? grammar__origin(b, "%s: pattern fragment '%.*s%s' at offset %d",
                              b->origins[b->origin_cur], n, frag, more, x->offset)
            : grammar__origin(b, "regex fragment '%.*s%s' at offset %d", n, frag, more, x->offset);
}

/* Pushes one character of set r[0..n) (normalized) onto the current
 * alternative of `into`, in plain or JSON string spelling. */
static void emit_chars(struct emit *e, int into, const struct grammar_cprange *r, int n)
{
    struct grammar_builder *b = e->b;
    if (!e->json) {
        grammar__chars(b, into, r, n);
        return;
    }
    struct grammar_cprange *raw = xmalloc(sizeof(*raw) * (size_t)(n + 4));
    int k = grammar__json_raw(r, n, raw);
    int h = helper(e);
    if (k > 0) {
        grammar__alt(b, h);
        grammar__chars(b, h, raw, k);
    }
    free(raw);
    grammar__json_escapes(b, h, r, n);
    grammar__ref(b, into, h);
}

static void emit_node(struct emit *e, int nd, int into);

/* The alternatives of node nd as alternatives of rule r. */
static void fill_rule(struct emit *e, int nd, int r)
{
    const struct grammar_rxnode *x = &e->rx->nodes[nd];
    if (x->kind == GRAMMAR_RX_ALT) {
        for (int c = x->child; c >= 0; c = e->rx->nodes[c].next) {
            grammar__alt(e->b, r);
            emit_node(e, c, r);
        }
        return;
    }
    grammar__alt(e->b, r);
    emit_node(e, nd, r);
}

static void emit_node(struct emit *e, int nd, int into)
{
    const struct grammar_rxnode *x = &e->rx->nodes[nd];
    switch (x->kind) {
    case GRAMMAR_RX_CHARS:
        emit_chars(e, into, e->rx->sets[x->set], e->rx->set_n[x->set]);
        break;
    case GRAMMAR_RX_CAT:
        for (int c = x->child; c >= 0; c = e->rx->nodes[c].next)
            emit_node(e, c, into);
        break;
    case GRAMMAR_RX_ALT: {
        int h = helper(e);
        fill_rule(e, nd, h);
        name_origin(e, h, nd);
        grammar__ref(e->b, into, h);
        break;
    }
    case GRAMMAR_RX_REPEAT: {
        int item = helper(e);
        fill_rule(e, x->child, item);
        name_origin(e, item, x->child);
        int rep = grammar__repeat(e->b, e->b->rules[item].name, item, x->min, x->max);
        name_origin(e, rep, nd);
        grammar__ref(e->b, into, rep);
        break;
    }
    default:
        CHECK(!"lookahead and inner '$' have no rule form");
    }
}

int grammar__rx_emit(struct grammar_builder *b, const struct grammar_rx *rx, bool json_string,
                     bool search)
{
    struct emit e = {.b = b, .rx = rx, .json = json_string};
    int root = grammar__rule(b, json_string ? "pattern" : "root");
    int any = -1;
    for (int t = 0; t < rx->n_tops; t++) {
        const struct grammar_rxtop *top = &rx->tops[t];
        if (search && (!top->start || !top->end) && any < 0) {
            struct grammar_cprange all = {0, GRAMMAR_MAX_CP};
            int ch = helper(&e);
            grammar__alt(b, ch);
            emit_chars(&e, ch, &all, 1);
            any = grammar__repeat(b, "any-chars", ch, 0, GRAMMAR_INF);
        }
        int body = helper(&e);
        fill_rule(&e, top->node, body);
        name_origin(&e, body, top->node);
        grammar__alt(b, root);
        if (search && !top->start) grammar__ref(b, root, any);
        grammar__ref(b, root, body);
        if (search && !top->end) grammar__ref(b, root, any);
    }
    return root;
}

int grammar__regex_build(struct grammar_builder *b, const char *src, size_t len, bool json_string,
                         bool search, struct err_msg *msg)
{
    struct grammar_rx rx;
    int rc = grammar__rx_parse(&rx, src, len, msg);
    if (rc) return rc;
    if (rx.has_look) {
        struct grammar_lang_part part = {.rx = &rx, .search = search};
        struct err_msg m2;
        rc = grammar__lang_build(b, &part, 1, 0, GRAMMAR_INF, json_string, &m2);
        if (rc < 0) err_set(msg, rc, "regex '%.*s': %s", (int)MIN(len, 200), src, m2.text);
    } else {
        rc = grammar__rx_emit(b, &rx, json_string, search);
    }
    grammar__rx_release(&rx);
    return rc;
}
