/*
 * regex.c - regular expressions in the JSON Schema `pattern` dialect (the
 * ECMA-262 subset that JSON Schema recommends) into the builder.
 *
 *   alternation a|b, groups (...), (?:...), (?<name>...), quantifiers * + ?
 *   {n} {n,} {n,m} (a trailing ? for laziness is accepted: same language),
 *   classes [...] [^...] with ranges, \d \w \s \D \W \S (also inside
 *   classes), . (any character but \n \r U+2028 U+2029), escapes \n \r \t \f
 *   \v \0 \xHH \uHHHH (a surrogate pair \uD83D\uDE00 is one character) and
 *   escaped punctuation, anchors ^ and $ at the start / end of a top-level
 *   alternative.
 *
 * Not supported (ERR_INVALID naming the construct): backreferences, lookaround,
 * word boundaries \b \B, anchors elsewhere, flags, Unicode property escapes.
 *
 * Two uses:
 *   - GRAMMAR_REGEX: the output must match the whole regex (anchors optional);
 *   - a JSON Schema `pattern` (search semantics: a match anywhere in the
 *     string, so an unanchored side gets "any characters"), emitted in JSON
 *     string spelling: '"' as \", '\' as \\, control characters as \b \f \n
 *     \r \t or \u00XX (hex digits in either case), '/' raw or as \/. Other
 *     characters appear raw (UTF-8), which is what JSON serializers write.
 *
 * Thread: pure function of its input.
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REGEX_MAX_DEPTH 128

struct rx {
    const char *s;               /* pattern */
    size_t n;                    /* bytes */
    size_t i;                    /* cursor */
    struct grammar_builder *b;   /* output */
    struct err_msg *msg;         /* error output */
    int err;                     /* first error */
    bool json;                   /* emit characters in JSON string spelling */
    int n_helpers;               /* helper rule counter */
    struct grammar_cprange *cls; /* class scratch */
    int cls_n;                   /* ranges in scratch */
    int cls_cap;                 /* allocated */
    const char *outer;           /* origin of the schema around a pattern, or NULL */
};

static int fail(struct rx *p, const char *what)
{
    if (!p->err)
        p->err = err_set(p->msg, ERR_INVALID, "regex '%.*s': %s at offset %zu", (int)MIN(p->n, 200),
                         p->s, what, p->i);
    return p->err;
}

static int helper(struct rx *p)
{
    char nm[48];
    snprintf(nm, sizeof(nm), "regex~%d", ++p->n_helpers);
    return grammar__rule(p->b, nm);
}

static void cls_add(struct rx *p, uint32_t lo, uint32_t hi)
{
    if (p->cls_n + 1 > p->cls_cap) {
        p->cls_cap = p->cls_cap ? 2 * p->cls_cap : 32;
        p->cls = xrealloc(p->cls, sizeof(*p->cls) * (size_t)p->cls_cap);
    }
    p->cls[p->cls_n++] = (struct grammar_cprange){lo, hi};
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
        return fail(p, "word boundary \\b is not supported"), -1;
    case 'B':
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
        return fail(p, "Unicode property escapes are not supported"), -1;
    case 'c':
        return fail(p, "control escapes \\c are not supported"), -1;
    case 'k':
        return fail(p, "named backreferences are not supported"), -1;
    default:
        if (e >= '1' && e <= '9') return fail(p, "backreferences are not supported"), -1;
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return fail(p, "unknown escape"), -1;
        p->i--;
        return read_utf8(p, cp) ? 0 : -1;
    }
}

/* Pushes one character drawn from ranges r (normalized in place) onto rule
 * `into`, in plain or JSON string spelling. */
static void emit_chars(struct rx *p, int into, struct grammar_cprange *r, int n)
{
    struct grammar_builder *b = p->b;
    n = grammar__ranges_normalize(r, n);
    if (!p->json) {
        grammar__chars(b, into, r, n);
        return;
    }
    /* raw: the set minus controls, '"' and '\'. */
    struct grammar_cprange *raw = xmalloc(sizeof(*raw) * (size_t)(4 * n + 4));
    int k = 0;
    static const struct grammar_cprange cut[] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (int i = 0; i < n; i++) {
        uint32_t lo = r[i].lo, hi = r[i].hi;
        /* subtract each cut range (sorted, disjoint) */
        for (int c = 0; c < 3 && lo <= hi; c++) {
            if (cut[c].hi < lo || cut[c].lo > hi) continue;
            if (cut[c].lo > lo) raw[k++] = (struct grammar_cprange){lo, cut[c].lo - 1};
            lo = cut[c].hi + 1;
        }
        if (lo <= hi) raw[k++] = (struct grammar_cprange){lo, hi};
    }
    int h = helper(p);
    if (k > 0) {
        grammar__alt(b, h);
        grammar__chars(b, h, raw, k);
    }
    free(raw);
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
                grammar__alt(b, h);
                grammar__lit(b, h, esc, strlen(esc));
            }
            if (c < 0x20) {
                /* \u00XX, hex digits in either case */
                grammar__alt(b, h);
                grammar__lit(b, h, "\\u00", 4);
                struct grammar_cprange d1[2] = {{'0' + (c >> 4), '0' + (c >> 4)}};
                grammar__chars(b, h, d1, 1);
                unsigned lo4 = c & 15;
                struct grammar_cprange d2[2];
                int nd = 0;
                if (lo4 < 10)
                    d2[nd++] = (struct grammar_cprange){'0' + lo4, '0' + lo4};
                else {
                    d2[nd++] = (struct grammar_cprange){'A' + lo4 - 10, 'A' + lo4 - 10};
                    d2[nd++] = (struct grammar_cprange){'a' + lo4 - 10, 'a' + lo4 - 10};
                }
                grammar__chars(b, h, d2, nd);
            }
            if (c == 0x7F) break;
        }
    grammar__ref(b, into, h);
}

static void parse_alts(struct rx *p, int r, int depth);

/* Names rule after the pattern text from start to the cursor, for budget
 * errors (budget.c): the fragment and its offset. */
static void name_origin(struct rx *p, int rule, size_t start)
{
    struct grammar_builder *b = p->b;
    if (b->over || rule < 0 || rule >= b->n_rules) return;
    int n = (int)MIN(p->i - start, 60);
    const char *more = p->i - start > 60 ? "..." : "";
    b->rules[rule].origin = p->outer
                                ? grammar__origin(b, "%s: pattern fragment '%.*s%s' at offset %zu",
                                                  p->outer, n, p->s + start, more, start)
                                : grammar__origin(b, "regex fragment '%.*s%s' at offset %zu", n,
                                                  p->s + start, more, start);
}

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

static void parse_atom(struct rx *p, int r, int depth)
{
    struct grammar_builder *b = p->b;
    size_t start = p->i;
    int item = helper(p);
    grammar__alt(b, item);
    char c = p->s[p->i];
    if (c == '(') {
        if (depth >= REGEX_MAX_DEPTH) {
            fail(p, "groups nested too deeply");
            return;
        }
        p->i++;
        if (p->i < p->n && p->s[p->i] == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':') {
                p->i += 2;
            } else if (p->i + 2 < p->n && p->s[p->i + 1] == '<' && p->s[p->i + 2] != '=' &&
                       p->s[p->i + 2] != '!') {
                p->i += 2;
                while (p->i < p->n && p->s[p->i] != '>')
                    p->i++;
                if (p->i >= p->n) {
                    fail(p, "unterminated group name");
                    return;
                }
                p->i++;
            } else {
                fail(p, "lookaround assertions are not supported");
                return;
            }
        }
        b->rules[item].n_alts = 0;
        parse_alts(p, item, depth + 1);
        if (p->err) return;
        if (p->i >= p->n || p->s[p->i] != ')') {
            fail(p, "expected ')'");
            return;
        }
        p->i++;
    } else if (c == '[') {
        p->i++;
        if (!parse_class(p)) return;
        emit_chars(p, item, p->cls, p->cls_n);
    } else if (c == '.') {
        p->i++;
        p->cls_n = 0;
        cls_add(p, 0, '\n' - 1);
        cls_add(p, '\n' + 1, '\r' - 1);
        cls_add(p, '\r' + 1, 0x2027);
        cls_add(p, 0x202A, GRAMMAR_MAX_CP);
        emit_chars(p, item, p->cls, p->cls_n);
    } else if (c == '\\') {
        p->i++;
        p->cls_n = 0;
        uint32_t cp;
        int k = read_escape(p, false, &cp);
        if (k < 0) return;
        if (k == 0) cls_add(p, cp, cp);
        emit_chars(p, item, p->cls, p->cls_n);
    } else if (c == '*' || c == '+' || c == '?') {
        fail(p, "nothing to repeat");
        return;
    } else if (c == '^' || c == '$') {
        fail(p, "anchors are supported only at the start or end of the pattern");
        return;
    } else {
        uint32_t cp;
        if (!read_utf8(p, &cp)) return;
        p->cls_n = 0;
        cls_add(p, cp, cp);
        emit_chars(p, item, p->cls, p->cls_n);
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
            if (q < 0) return;
        }
        if ((min != 1 || max != 1) && p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy */
        if (p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' ||
                            (p->s[p->i] == '?' && (min != 1 || max != 1)))) {
            fail(p, "nothing to repeat");
            return;
        }
    }
    /* groups and repetitions are what can blow up: name them */
    if (c == '(') name_origin(p, item, start);
    if (min == 1 && max == 1) {
        grammar__ref(b, r, item);
        return;
    }
    int rep = grammar__repeat(b, b->rules[item].name, item, min, max);
    name_origin(p, rep, start);
    grammar__ref(b, r, rep);
}

static void parse_seq(struct rx *p, int r, int depth)
{
    grammar__alt(p->b, r);
    while (!p->err && p->i < p->n) {
        char c = p->s[p->i];
        if (c == '|' || c == ')') return;
        if (c == '{') {
            /* a '{' that is not a quantifier is a literal */
            int item = helper(p);
            grammar__alt(p->b, item);
            p->i++;
            grammar__lit(p->b, item, "{", 1);
            grammar__ref(p->b, r, item);
            continue;
        }
        parse_atom(p, r, depth);
    }
}

static void parse_alts(struct rx *p, int r, int depth)
{
    parse_seq(p, r, depth);
    while (!p->err && p->i < p->n && p->s[p->i] == '|') {
        p->i++;
        parse_seq(p, r, depth);
    }
}

int grammar__regex_build(struct grammar_builder *b, const char *src, size_t len, bool json_string,
                         bool search, struct err_msg *msg)
{
    struct rx p = {.s = src, .n = len, .b = b, .msg = msg, .json = json_string};
    if (b->origin_cur >= 0) p.outer = b->origins[b->origin_cur];
    int root = grammar__rule(b, json_string ? "pattern" : "root");
    /* Top-level alternatives are parsed one by one so each can carry its own
     * anchors. */
    int any = -1;
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
        int body = helper(&p);
        size_t body_start = p.i;
        parse_alts(&p, body, 0);
        name_origin(&p, body, body_start);
        if (!p.err && p.i < p.n)
            fail(&p, p.s[p.i] == ')' ? "unbalanced ')'" : "unexpected character");
        p.n = save_n;
        if (p.err) break;
        p.i = end;
        if (search && (!anchored_start || !anchored_end) && any < 0) {
            struct grammar_cprange all = {0, GRAMMAR_MAX_CP};
            int ch = helper(&p);
            grammar__alt(b, ch);
            emit_chars(&p, ch, &all, 1);
            any = grammar__repeat(b, "any-chars", ch, 0, GRAMMAR_INF);
        }
        grammar__alt(b, root);
        if (search && !anchored_start) grammar__ref(b, root, any);
        grammar__ref(b, root, body);
        if (search && !anchored_end) grammar__ref(b, root, any);
        if (p.i >= p.n) break;
        p.i++; /* '|' */
    }
    free(p.cls);
    if (p.err) return p.err;
    return root;
}
