/*
 * schema.c - JSON Schema into the builder: the JSON texts a schema accepts.
 *
 * One rule per (sub)schema, built recursively; $ref targets get one rule
 * each, created before their body so recursive schemas close the loop. A
 * schema without "type" allows every JSON type, each under the keywords that
 * apply to it (JSON Schema semantics: {"minimum": 3} also accepts "abc").
 *
 * The grammar is exact for the supported keywords, with these documented
 * choices (docs/grammar.md has the full list):
 *   - whitespace between tokens: [ \t\n\r]{0,20} (enough for pretty printing
 *     ten levels deep, bounded so a random model cannot loop on it);
 *   - object members come in a canonical order: the properties in "properties"
 *     order (then required names not listed there), then additional members;
 *     optional properties may be left out; an additional member's key is any
 *     string except a declared name (spelled without escapes);
 *   - strings are written raw except '"', '\' and control characters, which
 *     need escapes; \uXXXX escapes are accepted in unconstrained strings;
 *   - numbers: at most 32 integer digits, 32 fraction digits, 4 exponent
 *     digits (bounded so generation ends);
 *   - oneOf is treated as anyOf (exclusivity is not enforced);
 *   - allOf is merged keyword by keyword when the members do not conflict;
 *   - not, if/then/else, multipleOf, min/maxProperties, dependentRequired,
 *     propertyNames and uniqueItems are rewritten into the keywords above
 *     where that is exact, and refused otherwise (rewrite()).
 * Anything else is an ERR_INVALID naming the keyword and its JSON pointer.
 *
 * Thread: pure function of its input.
 */
#include "base/check.h"
#include "grammar/dfa.h"
#include "grammar/grammar_impl.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_MAX_DEPTH    64 /* nesting of subschemas (refs excluded) */
#define SCHEMA_MAX_REFS     1024
#define SCHEMA_MAX_MULTIPLE 100 /* multipleOf: remainder automaton of k * 32 rules */

struct refmemo {
    char *ptr; /* JSON pointer text ("#/definitions/a") */
    int rule;  /* its rule */
};

struct sc {
    struct grammar_builder *b;                                    /* output */
    struct err_msg *msg;                                          /* error output */
    json_t *root;                                                 /* the document */
    struct refmemo *refs;                                         /* (n_refs) resolved $refs */
    int n_refs;                                                   /* entries */
    int depth;                                                    /* current nesting */
    int ws, value, string, number, integer, jchar, object, array; /* shared rules, -1 until made */
    int n_helpers;                                                /* helper counter */
    int digits_memo[34][34]; /* rule + 1 of [0-9]{min,max}; 0 until made */
};

enum {
    T_NULL = 1,
    T_BOOL = 2,
    T_INT = 4,
    T_NUM = 8,
    T_STR = 16,
    T_ARR = 32,
    T_OBJ = 64,
    T_ALL = 127
};

static int gen(struct sc *s, json_t *node, const char *path);

static int helper(struct sc *s, const char *what)
{
    char nm[96];
    snprintf(nm, sizeof(nm), "%s~%d", what, ++s->n_helpers);
    return grammar__rule(s->b, nm);
}

static void lit(struct sc *s, int r, const char *t)
{
    grammar__lit(s->b, r, t, strlen(t));
}

static void chars(struct sc *s, int r, uint32_t lo, uint32_t hi)
{
    struct grammar_cprange c = {lo, hi};
    grammar__chars(s->b, r, &c, 1);
}

static int rule_lit(struct sc *s, const char *t)
{
    int r = helper(s, "lit");
    grammar__alt(s->b, r);
    lit(s, r, t);
    return r;
}

static int rule_chars(struct sc *s, uint32_t lo, uint32_t hi)
{
    int r = helper(s, "chars");
    grammar__alt(s->b, r);
    chars(s, r, lo, hi);
    return r;
}

/* ---- shared JSON rules ---- */

static int ws(struct sc *s)
{
    if (s->ws < 0) {
        int c = helper(s, "ws-char");
        grammar__alt(s->b, c);
        struct grammar_cprange w[3] = {{'\t', '\n'}, {'\r', '\r'}, {' ', ' '}};
        grammar__chars(s->b, c, w, 3);
        s->ws = grammar__repeat(s->b, "ws", c, 0, 20);
    }
    return s->ws;
}

/* One character of a JSON string: raw or an escape. */
static int jchar(struct sc *s)
{
    if (s->jchar >= 0) return s->jchar;
    struct grammar_builder *b = s->b;
    int r = s->jchar = grammar__rule(b, "json-char");
    grammar__alt(b, r);
    struct grammar_cprange raw[2] = {{0x20, 0x21}, {0x23, 0x5B}};
    struct grammar_cprange raw2[2] = {{0x5D, GRAMMAR_MAX_CP}};
    struct grammar_cprange all[3] = {raw[0], raw[1], raw2[0]};
    grammar__chars(b, r, all, 3);
    grammar__alt(b, r);
    lit(s, r, "\\");
    struct grammar_cprange esc[8] = {{'"', '"'}, {'/', '/'}, {'\\', '\\'}, {'b', 'b'},
                                     {'f', 'f'}, {'n', 'n'}, {'r', 'r'},   {'t', 't'}};
    grammar__chars(b, r, esc, 8);
    grammar__alt(b, r);
    lit(s, r, "\\u");
    struct grammar_cprange hex[3] = {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
    for (int k = 0; k < 4; k++)
        grammar__chars(b, r, hex, 3);
    return r;
}

static int string_rule(struct sc *s, int min, int max)
{
    int r = helper(s, "string");
    grammar__alt(s->b, r);
    lit(s, r, "\"");
    grammar__ref(s->b, r, grammar__repeat(s->b, "string-chars", jchar(s), min, max));
    lit(s, r, "\"");
    return r;
}

static int digits(struct sc *s, int min, int max)
{
    CHECK(min >= 0 && min <= 33 && max >= 0 && max <= 33);
    int *slot = &s->digits_memo[min][max];
    if (!*slot) *slot = 1 + grammar__repeat(s->b, "digits", rule_chars(s, '0', '9'), min, max);
    return *slot - 1;
}

static int number_rule(struct sc *s, bool integer)
{
    int *slot = integer ? &s->integer : &s->number;
    if (*slot >= 0) return *slot;
    struct grammar_builder *b = s->b;
    int r = *slot = grammar__rule(b, integer ? "integer" : "number");
    int intpart = helper(s, "int-part");
    grammar__alt(b, intpart);
    lit(s, intpart, "0");
    grammar__alt(b, intpart);
    chars(s, intpart, '1', '9');
    grammar__ref(b, intpart, digits(s, 0, 31));
    int sign = grammar__repeat(b, "sign", rule_lit(s, "-"), 0, 1);
    grammar__alt(b, r);
    grammar__ref(b, r, sign);
    grammar__ref(b, r, intpart);
    if (!integer) {
        int frac = helper(s, "frac");
        grammar__alt(b, frac);
        lit(s, frac, ".");
        grammar__ref(b, frac, digits(s, 1, 32));
        int exp = helper(s, "exp");
        grammar__alt(b, exp);
        struct grammar_cprange e[2] = {{'E', 'E'}, {'e', 'e'}};
        grammar__chars(b, exp, e, 2);
        struct grammar_cprange pm[2] = {{'+', '+'}, {'-', '-'}};
        int pmr = helper(s, "exp-sign");
        grammar__alt(b, pmr);
        grammar__chars(b, pmr, pm, 2);
        grammar__ref(b, exp, grammar__repeat(b, "exp-sign", pmr, 0, 1));
        grammar__ref(b, exp, digits(s, 1, 4));
        grammar__ref(b, r, grammar__repeat(b, "frac", frac, 0, 1));
        grammar__ref(b, r, grammar__repeat(b, "exp", exp, 0, 1));
    }
    return r;
}

static int any_value(struct sc *s);

/* open ws (item (ws , ws item)* ws)? close */
static int list_rule(struct sc *s, const char *open, int item, const char *close)
{
    struct grammar_builder *b = s->b;
    int more = helper(s, "list-more");
    grammar__alt(b, more);
    grammar__ref(b, more, ws(s));
    lit(s, more, ",");
    grammar__ref(b, more, ws(s));
    grammar__ref(b, more, item);
    int r = helper(s, "list");
    grammar__alt(b, r);
    lit(s, r, open);
    grammar__ref(b, r, ws(s));
    grammar__ref(b, r, item);
    grammar__ref(b, r, grammar__repeat(b, "list-more", more, 0, GRAMMAR_INF));
    grammar__ref(b, r, ws(s));
    lit(s, r, close);
    grammar__alt(b, r);
    lit(s, r, open);
    grammar__ref(b, r, ws(s));
    lit(s, r, close);
    return r;
}

static int any_value(struct sc *s)
{
    if (s->value >= 0) return s->value;
    struct grammar_builder *b = s->b;
    int v = s->value = grammar__rule(b, "value");
    if (s->string < 0) s->string = string_rule(s, 0, GRAMMAR_INF);
    int member = grammar__rule(b, "member");
    grammar__alt(b, member);
    grammar__ref(b, member, s->string);
    grammar__ref(b, member, ws(s));
    lit(s, member, ":");
    grammar__ref(b, member, ws(s));
    grammar__ref(b, member, v);
    s->object = list_rule(s, "{", member, "}");
    s->array = list_rule(s, "[", v, "]");
    int alts[] = {s->object, s->array, s->string, number_rule(s, false)};
    for (size_t k = 0; k < ARRAY_LEN(alts); k++) {
        grammar__alt(b, v);
        grammar__ref(b, v, alts[k]);
    }
    const char *kw[] = {"true", "false", "null"};
    for (size_t k = 0; k < 3; k++) {
        grammar__alt(b, v);
        lit(s, v, kw[k]);
    }
    return v;
}

/* ---- helpers over the schema document ---- */

static int fail_kw(struct sc *s, const char *path, const char *kw, const char *why)
{
    return err_set(s->msg, ERR_INVALID, "json schema: %s/%s: %s", path, kw, why);
}

static bool is_annotation(const char *k)
{
    static const char *ann[] = {
        "title",      "description", "default",  "examples",         "$schema",
        "$id",        "id",          "$comment", "readOnly",         "writeOnly",
        "deprecated", "definitions", "$defs",    "contentMediaType", "contentEncoding"};
    for (size_t i = 0; i < ARRAY_LEN(ann); i++)
        if (strcmp(k, ann[i]) == 0) return true;
    return false;
}

static int type_bit(const char *t)
{
    static const struct {
        const char *name;
        int bit;
    } m[] = {{"null", T_NULL},  {"boolean", T_BOOL}, {"integer", T_INT}, {"number", T_NUM},
             {"string", T_STR}, {"array", T_ARR},    {"object", T_OBJ}};
    for (size_t i = 0; i < ARRAY_LEN(m); i++)
        if (strcmp(t, m[i].name) == 0) return m[i].bit;
    return 0;
}

static int types_of(struct sc *s, json_t *node, const char *path, int *out)
{
    json_t *t = json_object_get(node, "type");
    if (!t) {
        *out = T_ALL;
        return 0;
    }
    int set = 0;
    if (json_is_string(t)) {
        set = type_bit(json_string_value(t));
        if (!set) return fail_kw(s, path, "type", "unknown type name");
    } else if (json_is_array(t)) {
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x)
        {
            int bit = json_is_string(x) ? type_bit(json_string_value(x)) : 0;
            if (!bit) return fail_kw(s, path, "type", "unknown type name in array");
            set |= bit;
        }
    } else {
        return fail_kw(s, path, "type", "must be a string or an array of strings");
    }
    *out = set;
    return 0;
}

/* Resolves a local JSON pointer "#/a/b" (with ~0 ~1 and %xx unescaping). */
static json_t *resolve_pointer(json_t *root, const char *ref)
{
    if (ref[0] != '#') return NULL;
    json_t *cur = root;
    const char *p = ref + 1;
    while (*p) {
        if (*p != '/') return NULL;
        p++;
        char tok[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof(tok)) {
            if (p[0] == '~' && p[1] == '0')
                tok[k++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1')
                tok[k++] = '/', p += 2;
            else if (p[0] == '%' && p[1] && p[2]) {
                char h[3] = {p[1], p[2], 0};
                tok[k++] = (char)strtol(h, NULL, 16);
                p += 3;
            } else
                tok[k++] = *p++;
        }
        tok[k] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, tok);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(tok, &end, 10);
            if (*end || i < 0) return NULL;
            cur = json_array_get(cur, (size_t)i);
        } else
            return NULL;
        if (!cur) return NULL;
    }
    return cur;
}

static int gen_ref(struct sc *s, const char *ref, const char *path)
{
    for (int i = 0; i < s->n_refs; i++)
        if (strcmp(s->refs[i].ptr, ref) == 0) return s->refs[i].rule;
    if (s->n_refs >= SCHEMA_MAX_REFS) return fail_kw(s, path, "$ref", "too many references");
    json_t *target = resolve_pointer(s->root, ref);
    if (!target)
        return fail_kw(s, path, "$ref",
                       "not supported: only local references (#/...) that resolve");
    s->refs = xrealloc(s->refs, sizeof(*s->refs) * (size_t)(s->n_refs + 1));
    int r = grammar__rule(s->b, ref);
    s->refs[s->n_refs].ptr = xstrdup(ref);
    s->refs[s->n_refs++].rule = r;
    int saved = s->depth;
    s->depth = 0; /* refs restart the nesting count: recursion goes through the memo */
    int body = gen(s, target, ref);
    s->depth = saved;
    if (body < 0) return body;
    grammar__alt(s->b, r);
    grammar__ref(s->b, r, body);
    return r;
}

/* ---- constants ---- */

/* Grammar for one JSON value exactly (whitespace allowed between tokens;
 * integral numbers also as N.0). */
static int gen_const(struct sc *s, json_t *v)
{
    struct grammar_builder *b = s->b;
    int r = helper(s, "const");
    grammar__alt(b, r);
    if (json_is_object(v) || json_is_array(v)) {
        bool obj = json_is_object(v);
        lit(s, r, obj ? "{" : "[");
        grammar__ref(b, r, ws(s));
        size_t i = 0, n = obj ? json_object_size(v) : json_array_size(v);
        const char *key;
        json_t *x;
        void *it = obj ? json_object_iter(v) : NULL;
        for (i = 0; i < n; i++) {
            if (i > 0) {
                grammar__ref(b, r, ws(s));
                lit(s, r, ",");
                grammar__ref(b, r, ws(s));
            }
            if (obj) {
                key = json_object_iter_key(it);
                x = json_object_iter_value(it);
                json_t *ks = json_string(key);
                char *kt = json_dumps(ks, JSON_ENCODE_ANY);
                lit(s, r, kt);
                free(kt);
                json_decref(ks);
                grammar__ref(b, r, ws(s));
                lit(s, r, ":");
                grammar__ref(b, r, ws(s));
                it = json_object_iter_next(v, it);
            } else {
                x = json_array_get(v, i);
            }
            grammar__ref(b, r, gen_const(s, x));
        }
        if (n > 0) grammar__ref(b, r, ws(s));
        lit(s, r, obj ? "}" : "]");
        return r;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if (d == floor(d) && fabs(d) < 1e15) {
            char t[64];
            snprintf(t, sizeof(t), "%.0f", d);
            if (strcmp(t, "-0") == 0) snprintf(t, sizeof(t), "0");
            lit(s, r, t);
            grammar__alt(b, r);
            lit(s, r, t);
            lit(s, r, ".0");
            return r;
        }
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    lit(s, r, t);
    free(t);
    return r;
}

static int value_type(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOL;
    case JSON_INTEGER:
        return T_INT | T_NUM;
    case JSON_REAL:
        return json_real_value(v) == floor(json_real_value(v)) ? (T_INT | T_NUM) : T_NUM;
    case JSON_STRING:
        return T_STR;
    case JSON_ARRAY:
        return T_ARR;
    default:
        return T_OBJ;
    }
}

/* ---- numbers ---- */

/* Decimal strings of the same length n: lo <= x <= hi, digit by digit. */
static int same_len_range(struct sc *s, const char *lo, const char *hi, int n)
{
    struct grammar_builder *b = s->b;
    int r = helper(s, "range");
    if (n == 1) {
        grammar__alt(b, r);
        chars(s, r, (uint32_t)lo[0], (uint32_t)hi[0]);
        return r;
    }
    if (lo[0] == hi[0]) {
        grammar__alt(b, r);
        chars(s, r, (uint32_t)lo[0], (uint32_t)lo[0]);
        grammar__ref(b, r, same_len_range(s, lo + 1, hi + 1, n - 1));
        return r;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n);
    memset(zeros, '0', (size_t)n);
    bool lo_full = memcmp(lo + 1, zeros, (size_t)n - 1) == 0;
    bool hi_full = memcmp(hi + 1, nines, (size_t)n - 1) == 0;
    char first_mid = lo_full ? lo[0] : (char)(lo[0] + 1);
    char last_mid = hi_full ? hi[0] : (char)(hi[0] - 1);
    if (!lo_full) {
        grammar__alt(b, r);
        chars(s, r, (uint32_t)lo[0], (uint32_t)lo[0]);
        grammar__ref(b, r, same_len_range(s, lo + 1, nines, n - 1));
    }
    if (first_mid <= last_mid) {
        grammar__alt(b, r);
        chars(s, r, (uint32_t)first_mid, (uint32_t)last_mid);
        grammar__ref(b, r, digits(s, n - 1, n - 1));
    }
    if (!hi_full) {
        grammar__alt(b, r);
        chars(s, r, (uint32_t)hi[0], (uint32_t)hi[0]);
        grammar__ref(b, r, same_len_range(s, zeros, hi + 1, n - 1));
    }
    return r;
}

/* Natural numbers a..b without leading zeros (b < 0: unbounded). */
static int nat_range(struct sc *s, long long a, long long b)
{
    struct grammar_builder *g = s->b;
    int r = helper(s, "nat");
    char la[24], lb[24];
    int da = snprintf(la, sizeof(la), "%lld", a);
    long long top = b < 0 ? -1 : b;
    int db = b < 0 ? da : snprintf(lb, sizeof(lb), "%lld", b);
    for (int d = da; d <= db; d++) {
        long long lo = d == da ? a : 1;
        for (int k = 1; k < d && d != da; k++)
            lo *= 10;
        long long hi = 9;
        for (int k = 1; k < d; k++)
            hi = hi * 10 + 9;
        if (top >= 0 && hi > top) hi = top;
        if (lo > hi) continue;
        char sl[24], sh[24];
        snprintf(sl, sizeof(sl), "%lld", lo);
        snprintf(sh, sizeof(sh), "%lld", hi);
        grammar__alt(g, r);
        grammar__ref(g, r, same_len_range(s, sl, sh, d));
    }
    if (b < 0) {
        /* more digits than a: anything (up to the 32-digit cap) */
        grammar__alt(g, r);
        chars(s, r, '1', '9');
        grammar__ref(g, r, digits(s, da, da > 31 ? da : 31));
    }
    return r;
}

static bool get_bound(struct sc *s, json_t *node, const char *path, const char *kw, double *v,
                      bool *present, int *err)
{
    json_t *x = json_object_get(node, kw);
    *present = false;
    if (!x) return true;
    if (!json_is_number(x)) {
        *err = fail_kw(s, path, kw, "must be a number");
        return false;
    }
    *v = json_number_value(x);
    if (!isfinite(*v) || fabs(*v) > 9e17) {
        *err = fail_kw(s, path, kw, "bound out of the supported range (|x| <= 9e17)");
        return false;
    }
    *present = true;
    return true;
}

/* Integer (and integral-bounded number) bounds. */
static int bounds(struct sc *s, json_t *node, const char *path, bool *has_lo, double *lo,
                  bool *lo_ex, bool *has_hi, double *hi, bool *hi_ex)
{
    int err = 0;
    double v = 0;
    bool p;
    *has_lo = *has_hi = *lo_ex = *hi_ex = false;
    if (!get_bound(s, node, path, "minimum", lo, has_lo, &err)) return err;
    if (!get_bound(s, node, path, "maximum", hi, has_hi, &err)) return err;
    json_t *em = json_object_get(node, "exclusiveMinimum");
    json_t *eM = json_object_get(node, "exclusiveMaximum");
    if (em && json_is_boolean(em)) {
        if (json_is_true(em) && !*has_lo)
            return fail_kw(s, path, "exclusiveMinimum", "true needs \"minimum\"");
        *lo_ex = json_is_true(em);
    } else if (em) {
        if (!get_bound(s, node, path, "exclusiveMinimum", &v, &p, &err)) return err;
        if (!*has_lo || v >= *lo) *lo = v, *lo_ex = true, *has_lo = true;
    }
    if (eM && json_is_boolean(eM)) {
        if (json_is_true(eM) && !*has_hi)
            return fail_kw(s, path, "exclusiveMaximum", "true needs \"maximum\"");
        *hi_ex = json_is_true(eM);
    } else if (eM) {
        if (!get_bound(s, node, path, "exclusiveMaximum", &v, &p, &err)) return err;
        if (!*has_hi || v <= *hi) *hi = v, *hi_ex = true, *has_hi = true;
    }
    return 0;
}

/* Integers divisible by k, as a remainder automaton over the decimal digits:
 * rest(r, left) reads what follows a prefix whose value is r modulo k, with
 * at most `left` more digits (the 32-digit bound of every integer), and may
 * end only at remainder 0. -n is a multiple of k when n is. */
static int multiple_rest(struct sc *s, int *memo, int k, int r, int left)
{
    int *slot = &memo[r * 32 + left];
    if (*slot) return *slot - 1;
    int rule = helper(s, "multiple");
    *slot = rule + 1;
    if (r == 0) grammar__alt(s->b, rule); /* may end here */
    if (left == 0) return rule;
    for (int d = 0; d < 10; d++) {
        int to = (10 * r + d) % k, lo = d;
        /* digits with the same next remainder share one alternative */
        bool first = true;
        for (int e = 0; e < d; e++)
            first &= (10 * r + e) % k != to;
        if (!first) continue;
        struct grammar_cprange set[10];
        int n = 0;
        for (int e = lo; e < 10; e++)
            if ((10 * r + e) % k == to) set[n++] = (struct grammar_cprange){'0' + e, '0' + e};
        int next = multiple_rest(s, memo, k, to, left - 1);
        grammar__alt(s->b, rule);
        grammar__chars(s->b, rule, set, n);
        grammar__ref(s->b, rule, next);
    }
    return rule;
}

static int multiple_rule(struct sc *s, int k)
{
    int *memo = xcalloc((size_t)k * 32, sizeof(int));
    int r = helper(s, "multiple-of");
    int sign = grammar__repeat(s->b, "sign", rule_lit(s, "-"), 0, 1);
    int body = helper(s, "multiple-body");
    grammar__alt(s->b, body);
    lit(s, body, "0");
    for (int d = 1; d <= 9; d++) {
        grammar__alt(s->b, body);
        chars(s, body, (uint32_t)('0' + d), (uint32_t)('0' + d));
        grammar__ref(s->b, body, multiple_rest(s, memo, k, d % k, 31));
    }
    grammar__alt(s->b, r);
    grammar__ref(s->b, r, sign);
    grammar__ref(s->b, r, body);
    free(memo);
    return r;
}

static int gen_integer(struct sc *s, json_t *node, const char *path)
{
    bool hl, hh, le, he;
    double lo = 0, hi = 0;
    int rc = bounds(s, node, path, &hl, &lo, &le, &hh, &hi, &he);
    if (rc) return rc;
    json_t *mul = json_object_get(node, "multipleOf");
    if (mul) { /* checked by rewrite(): an integer 2..SCHEMA_MAX_MULTIPLE, no bounds */
        CHECK(!hl && !hh);
        return multiple_rule(s, (int)json_number_value(mul));
    }
    if (!hl && !hh) return number_rule(s, true);
    long long a = 0, c = 0;
    if (hl) a = le ? (long long)floor(lo) + 1 : (long long)ceil(lo);
    if (hh) c = he ? (long long)ceil(hi) - 1 : (long long)floor(hi);
    struct grammar_builder *b = s->b;
    int r = helper(s, "int-range");
    /* negative part: -y with y in [max(1, -c), -a] */
    if (!hl || a < 0) {
        long long ylo = hh ? (c < 0 ? -c : 1) : 1;
        long long yhi = hl ? -a : -1;
        if (yhi < 0 || ylo <= yhi) {
            grammar__alt(b, r);
            lit(s, r, "-");
            grammar__ref(b, r, nat_range(s, ylo, yhi));
        }
    }
    /* non-negative part: [max(0, a), c] */
    if (!hh || c >= 0) {
        long long xlo = hl && a > 0 ? a : 0;
        long long xhi = hh ? c : -1;
        if (xhi < 0 || xlo <= xhi) {
            grammar__alt(b, r);
            grammar__ref(b, r, nat_range(s, xlo, xhi));
        }
    }
    return r;
}

/* A non-negative decimal bound: integer part and fraction digits (no
 * trailing zeros), from the shortest fixed-point spelling of the double. */
struct decbound {
    long long ip; /* integer part */
    char fr[24];  /* fraction digits, "" for an integer */
    bool ex;      /* exclusive */
};

static void decbound_of(double v, bool ex, struct decbound *d)
{
    char t[64];
    for (int p = 0; p <= 20; p++) {
        snprintf(t, sizeof(t), "%.*f", p, v);
        if (strtod(t, NULL) == v) break;
    }
    char *dot = strchr(t, '.');
    d->ip = strtoll(t, NULL, 10);
    d->fr[0] = 0;
    if (dot) {
        snprintf(d->fr, sizeof(d->fr), "%s", dot + 1);
        for (size_t n = strlen(d->fr); n > 0 && d->fr[n - 1] == '0'; n--)
            d->fr[n - 1] = 0;
    }
    d->ex = ex;
}

/* Whether fraction digit d decides both bounds at once (any tail follows). */
static bool free_digit(const char *lf, bool lx, const char *hf, bool hx, unsigned d)
{
    bool lo_free = !lf || (!*lf && (!lx || d > '0')) || (*lf && d > (unsigned char)*lf);
    bool hi_free = !hf || (*hf && d < (unsigned char)*hf);
    (void)hx;
    return lo_free && hi_free;
}

/* Fraction digit strings d (value 0.d) within bounds on the same integer
 * part: lower `lf` (d >= lf, or d > lf when lx; NULL: none) and upper `hf`
 * (d <= hf, or d < hf when hx; NULL: none), one digit at a time. allow_empty:
 * d may end here (always inside; at the top the caller handles "no
 * fraction"). Returns a rule, or -1 when nothing qualifies. */
static int frac_between(struct sc *s, const char *lf, bool lx, const char *hf, bool hx,
                        bool allow_empty, int depth)
{
    struct grammar_builder *b = s->b;
    if (!lf && !hf) return digits(s, allow_empty ? 0 : 1, 32);
    if (depth > 40) return -1;
    int r = helper(s, "frac-range");
    bool any = false;
    /* d ends: the rest is zero, so the value equals the digits so far */
    bool lo_ok_zero = !lf || (!*lf && !lx);
    bool hi_ok_zero = !hf || *hf || !hx;
    if (allow_empty && lo_ok_zero && hi_ok_zero) {
        grammar__alt(b, r);
        any = true;
    }
    for (unsigned d = '0'; d <= '9'; d++) {
        const char *nl = lf, *nh = hf;
        bool dead = false;
        if (lf) {
            unsigned c = *lf ? (unsigned char)*lf : '0';
            if (!*lf && lx) /* need a non-zero digit somewhere */
                nl = d > '0' ? NULL : lf;
            else if (!*lf)
                nl = NULL;
            else if (d > c)
                nl = NULL;
            else if (d == c)
                nl = lf + 1;
            else
                dead = true;
        }
        if (hf && !dead) {
            if (!*hf)
                dead = hx || d > '0'; /* only zeros may follow, and only for <= */
            else if (d < (unsigned char)*hf)
                nh = NULL;
            else if (d == (unsigned char)*hf)
                nh = hf + 1;
            else
                dead = true;
        }
        if (dead) continue;
        if (!nl && !nh) {
            /* decided: any tail; neighbouring decided digits share one alternative */
            unsigned e = d;
            while (e < '9' && free_digit(lf, lx, hf, hx, e + 1))
                e++;
            grammar__alt(b, r);
            chars(s, r, d, e);
            grammar__ref(b, r, digits(s, 0, 31));
            any = true;
            d = e;
            continue;
        }
        int rest = frac_between(s, nl, lx, nh, hx, true, depth + 1);
        if (rest < 0) continue;
        grammar__alt(b, r);
        chars(s, r, d, d);
        grammar__ref(b, r, rest);
        any = true;
    }
    return any ? r : -1;
}

/* Appends `sign ip` with a fraction part (or none) within the bounds as one
 * alternative of r; lo / hi NULL when that side does not constrain. */
static void int_then_frac(struct sc *s, int r, const char *sign, long long ip,
                          const struct decbound *lo, const struct decbound *hi)
{
    struct grammar_builder *b = s->b;
    const char *lf = lo ? lo->fr : NULL, *hf = hi ? hi->fr : NULL;
    bool lx = lo && lo->ex, hx = hi && hi->ex;
    if (lf && !*lf && !lx) lf = NULL; /* ">= n.0" constrains no fraction */
    bool none_ok = (!lf || (!*lf && !lx)) && (!hf || *hf || !hx);
    int fr = frac_between(s, lf, lx, hf, hx, false, 0);
    if (!none_ok && fr < 0) return;
    char t[24];
    snprintf(t, sizeof(t), "%lld", ip);
    int part = helper(s, "frac-part");
    if (none_ok) grammar__alt(b, part);
    if (fr >= 0) {
        grammar__alt(b, part);
        lit(s, part, ".");
        grammar__ref(b, part, fr);
    }
    grammar__alt(b, r);
    lit(s, r, sign);
    lit(s, r, t);
    grammar__ref(b, r, part);
}

/* One sign of a bounded decimal: magnitudes y above lo and (if has_hi) below
 * hi. With f = floor(y): f strictly between the integer parts takes any
 * fraction; f equal to lo's integer part needs a fraction above lo's; f
 * equal to hi's one below hi's; both when they are the same integer. */
static void dec_side(struct sc *s, int r, const char *sign, const struct decbound *lo, bool has_hi,
                     const struct decbound *hi)
{
    struct grammar_builder *b = s->b;
    if (has_hi && lo->ip == hi->ip) {
        int_then_frac(s, r, sign, lo->ip, lo, hi);
        return;
    }
    if (has_hi && lo->ip > hi->ip) return;
    long long a = lo->ip + 1, c = has_hi ? hi->ip - 1 : -1;
    if (!has_hi || (c >= 0 && a <= c)) {
        int frac = helper(s, "frac");
        grammar__alt(b, frac);
        lit(s, frac, ".");
        grammar__ref(b, frac, digits(s, 1, 32));
        grammar__alt(b, r);
        lit(s, r, sign);
        grammar__ref(b, r, nat_range(s, a, has_hi ? c : -1));
        grammar__ref(b, r, grammar__repeat(b, "frac", frac, 0, 1));
    }
    int_then_frac(s, r, sign, lo->ip, lo, NULL);
    if (has_hi) int_then_frac(s, r, sign, hi->ip, NULL, hi);
}

static int gen_number(struct sc *s, json_t *node, const char *path)
{
    bool hl, hh, le, he;
    double lo = 0, hi = 0;
    int rc = bounds(s, node, path, &hl, &lo, &le, &hh, &hi, &he);
    if (rc) return rc;
    json_t *mul = json_object_get(node, "multipleOf");
    if (mul) { /* an integral divisor (rewrite()): integers, written with an optional .0 */
        CHECK(!hl && !hh);
        int r = helper(s, "multiple-number");
        int frac = helper(s, "zero-fraction");
        grammar__alt(s->b, frac);
        lit(s, frac, ".");
        grammar__ref(s->b, frac, grammar__repeat(s->b, "zeros", rule_lit(s, "0"), 1, 32));
        grammar__alt(s->b, r);
        grammar__ref(s->b, r, multiple_rule(s, (int)json_number_value(mul)));
        grammar__ref(s->b, r, grammar__repeat(s->b, "zero-fraction", frac, 0, 1));
        return r;
    }
    if (!hl && !hh) return number_rule(s, false);
    if (hl && hh && (lo > hi || (lo == hi && (le || he)))) return grammar__rule(s->b, "empty");
    int r = helper(s, "num-range");
    struct decbound zero_in = {0, "", false}, zero_ex = {0, "", true}, L, H;
    /* x >= 0: y = x above max(lo, 0), below hi */
    if (!(hh && (hi < 0 || (hi == 0 && he)))) {
        if (hl && lo >= 0) decbound_of(lo, le, &L);
        if (hh) decbound_of(hi, he, &H);
        dec_side(s, r, "", hl && lo >= 0 ? &L : &zero_in, hh, &H);
    }
    /* x = -y < 0: y above -hi (or above 0), below -lo */
    if (!(hl && lo >= 0)) {
        if (hh && hi < 0) decbound_of(-hi, he, &H);
        if (hl) decbound_of(-lo, le, &L);
        dec_side(s, r, "-", hh && hi < 0 ? &H : &zero_ex, hl, &L);
    }
    return r;
}

/* ---- strings ---- */

/* The formats as regexes, each a subset of its RFC's language in which every
 * string is valid (docs/grammar.md#formats says where they are narrower). */
#define RX_DATE                                                                                    \
    "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29|[0-9]{4}-" \
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-"   \
    "(?:0[1-9]|1[0-9]|2[0-8]))"
#define RX_FRAC "(?:\\.[0-9]{1,9})?"
#define RX_TIME                                                                                    \
    "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" RX_FRAC                                           \
    "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
/* a leap second: 23:59:60 UTC only */
#define RX_LEAP  "23:59:60" RX_FRAC "(?:[Zz]|[+-]00:00)"
#define RX_OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#define RX_IPV4  RX_OCTET "(?:\\." RX_OCTET "){3}"
#define RX_H16   "[0-9A-Fa-f]{1,4}"
#define RX_LS32  "(?:" RX_H16 ":" RX_H16 "|" RX_IPV4 ")"
/* RFC 3986 IPv6address, alternative by alternative */
#define RX_IPV6                                                                                    \
    "(?:(?:" RX_H16 ":){6}" RX_LS32 "|::(?:" RX_H16 ":){5}" RX_LS32 "|(?:" RX_H16 ")?::(?:" RX_H16 \
    ":){4}" RX_LS32 "|(?:(?:" RX_H16 ":)?" RX_H16 ")?::(?:" RX_H16 ":){3}" RX_LS32                 \
    "|(?:(?:" RX_H16 ":){0,2}" RX_H16 ")?::(?:" RX_H16 ":){2}" RX_LS32 "|(?:(?:" RX_H16            \
    ":){0,3}" RX_H16 ")?::" RX_H16 ":" RX_LS32 "|(?:(?:" RX_H16 ":){0,4}" RX_H16 ")?::" RX_LS32    \
    "|(?:(?:" RX_H16 ":){0,5}" RX_H16 ")?::" RX_H16 "|(?:(?:" RX_H16 ":){0,6}" RX_H16 ")?::)"
/* a DNS label of 1 .. n + 2 letters, digits and hyphens, no hyphen first or last */
#define RX_LABEL(n) "[A-Za-z0-9](?:[A-Za-z0-9-]{0," #n "}[A-Za-z0-9])?"
#define RX_ATEXT    "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
/* RFC 3986 character classes: unreserved and sub-delims but '-' (last in
 * each class below) */
#define RX_URI_US "A-Za-z0-9._~!$&'()*+,;="
#define RX_PCT    "%[0-9A-Fa-f]{2}"
#define RX_PCHAR  "(?:[" RX_URI_US ":@-]|" RX_PCT ")"
#define RX_AUTHORITY                                                                               \
    "(?:(?:[" RX_URI_US ":-]|" RX_PCT ")*@)?(?:\\[(?:" RX_IPV6 "|[vV][0-9A-Fa-f]+\\.[" RX_URI_US   \
    ":-]+)\\]|(?:[" RX_URI_US "-]|" RX_PCT ")*)(?::[0-9]*)?"

static const struct {
    const char *name;
    const char *re;
} FORMATS[] = {
    {"date", "^(?:" RX_DATE ")$"},
    {"time", "^(?:" RX_TIME "|" RX_LEAP ")$"},
    {"date-time", "^(?:(?:" RX_DATE ")[Tt]" RX_TIME "|[0-9]{4}-(?:06-30|12-31)[Tt]" RX_LEAP ")$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    /* RFC 5321: a dot-atom local part of at most 64 characters; a domain of
     * two labels of up to 63 characters, three of up to 63, 63, 61, or four
     * of up to 46, so the address fits in 254 (a path's 256 less <>) */
    {"email", "^(?=[^@]{1,64}@)" RX_ATEXT "+(?:\\." RX_ATEXT
              "+)*@(?:" RX_LABEL(61) "\\." RX_LABEL(61) "(?:\\." RX_LABEL(59) ")?|" RX_LABEL(
                  44) "\\." RX_LABEL(44) "\\." RX_LABEL(44) "\\." RX_LABEL(44) ")$"},
    /* RFC 1123: one to four labels, at most 253 characters (a fourth label
     * has at most 61) */
    {"hostname",
     "^" RX_LABEL(61) "(?:\\." RX_LABEL(61) "(?:\\." RX_LABEL(61) "(?:\\." RX_LABEL(59) ")?)?)?$"},
    {"ipv4", "^" RX_IPV4 "$"},
    {"ipv6", "^" RX_IPV6 "$"},
    /* RFC 3986 URI: scheme ":" hier-part [ "?" query ] [ "#" fragment ] */
    {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:(?://" RX_AUTHORITY "(?:/" RX_PCHAR "*)*|/(?:" RX_PCHAR
            "+(?:/" RX_PCHAR "*)*)?|" RX_PCHAR "+(?:/" RX_PCHAR "*)*)?(?:\\?(?:" RX_PCHAR
            "|[/?])*)?(?:#(?:" RX_PCHAR "|[/?])*)?$"},
};

static const char *format_regex(const char *f)
{
    for (size_t i = 0; i < ARRAY_LEN(FORMATS); i++)
        if (!strcmp(FORMATS[i].name, f)) return FORMATS[i].re;
    return NULL;
}

/* A string under pattern, format and length bounds: the regex's rules when
 * it is alone and has no lookahead (bounded repetitions keep their shared
 * mask tables), else the minimal DFA of the intersection (dfa.c). */
static int gen_string(struct sc *s, json_t *node, const char *path)
{
    json_t *mn = json_object_get(node, "minLength"), *mx = json_object_get(node, "maxLength");
    json_t *pat = json_object_get(node, "pattern"), *fmt = json_object_get(node, "format");
    long long min = 0, max = GRAMMAR_INF;
    if (mn) {
        if (!json_is_number(mn) || json_number_value(mn) < 0 ||
            json_number_value(mn) != floor(json_number_value(mn)))
            return fail_kw(s, path, "minLength", "must be a non-negative integer");
        min = (long long)json_number_value(mn);
    }
    if (mx) {
        if (!json_is_number(mx) || json_number_value(mx) < 0 ||
            json_number_value(mx) != floor(json_number_value(mx)))
            return fail_kw(s, path, "maxLength", "must be a non-negative integer");
        max = (long long)json_number_value(mx);
    }
    if (min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT)
        return fail_kw(s, path, min > GRAMMAR_MAX_REPEAT ? "minLength" : "maxLength",
                       "length bounds above 1000 are not supported");
    if (max != GRAMMAR_INF && max < min) return grammar__rule(s->b, "empty"); /* no strings */
    const char *fre = NULL;
    if (fmt) {
        if (!json_is_string(fmt)) return fail_kw(s, path, "format", "must be a string");
        fre = format_regex(json_string_value(fmt));
        /* An unknown format next to a pattern (zod's cuid, ulid, nanoid,
         * base64, e164, ... always come with one): the pattern alone
         * constrains, as JSON Schema treats format as an annotation. Alone,
         * an unknown format could let anything through: refused. */
        if (!fre && !(pat && json_is_string(pat)))
            return fail_kw(s, path, "format",
                           "unsupported format (date, time, date-time, uuid, email, hostname, "
                           "ipv4, ipv6, uri; any other only together with a pattern)");
    }
    if (pat && !json_is_string(pat)) return fail_kw(s, path, "pattern", "must be a string");
    if (!fre && !pat) {
        if (min == 0 && max == GRAMMAR_INF) {
            if (s->string < 0) s->string = string_rule(s, 0, GRAMMAR_INF);
            return s->string;
        }
        return string_rule(s, (int)min, (int)max);
    }
    struct grammar_rx rx[2];
    struct grammar_lang_part parts[2];
    int n = 0, rc = 0;
    struct err_msg m2;
    if (fre) {
        rc = grammar__rx_parse(&rx[n], fre, strlen(fre), &m2);
        CHECK(rc == 0); /* our own regexes */
        parts[n] = (struct grammar_lang_part){.rx = &rx[n], .search = true};
        n++;
    }
    if (pat) {
        const char *p = json_string_value(pat);
        rc = grammar__rx_parse(&rx[n], p, json_string_length(pat), &m2);
        if (rc) {
            rc = err_set(s->msg, rc, "json schema: %s/pattern: %s", path, m2.text);
            goto out;
        }
        parts[n] = (struct grammar_lang_part){.rx = &rx[n], .search = true};
        n++;
    }
    int body;
    if (n == 1 && !mn && !mx && !rx[0].has_look) {
        body = grammar__rx_emit(s->b, &rx[0], true, true);
    } else {
        body = grammar__lang_build(s->b, parts, n, (int)min, (int)max, true, &m2);
        if (body < 0) {
            rc = err_set(s->msg, body, "json schema: %s/%s: %s (%s%s%s)", path,
                         pat ? "pattern" : "format", m2.text,
                         pat && fre ? "pattern and format"
                         : pat      ? "pattern"
                                    : "format",
                         mn || mx ? " with " : "",
                         mn && mx ? "minLength and maxLength"
                         : mn     ? "minLength"
                         : mx     ? "maxLength"
                                  : "");
            goto out;
        }
    }
    int r = helper(s, "pattern-string");
    grammar__alt(s->b, r);
    lit(s, r, "\"");
    grammar__ref(s->b, r, body);
    lit(s, r, "\"");
    rc = r;
out:
    for (int i = 0; i < n; i++)
        grammar__rx_release(&rx[i]);
    return rc;
}

/* ---- arrays ---- */

static int gen_array(struct sc *s, json_t *node, const char *path)
{
    struct grammar_builder *b = s->b;
    char sub[1024];
    json_t *items = json_object_get(node, "items"), *prefix = json_object_get(node, "prefixItems");
    json_t *addl = json_object_get(node, "additionalItems");
    json_t *mn = json_object_get(node, "minItems"), *mx = json_object_get(node, "maxItems");
    json_t *uniq = json_object_get(node, "uniqueItems");
    /* uniqueItems: true is exact only where an array has at most one item */
    if (uniq && !json_is_false(uniq) &&
        !(json_is_true(uniq) && json_is_number(mx) && json_number_value(mx) <= 1))
        return fail_kw(s, path, "uniqueItems", "not supported (only false, or maxItems <= 1)");
    long long min = 0, max = -1;
    if (mn) {
        if (!json_is_number(mn) || json_number_value(mn) < 0 ||
            json_number_value(mn) != floor(json_number_value(mn)))
            return fail_kw(s, path, "minItems", "must be a non-negative integer");
        min = (long long)json_number_value(mn);
    }
    if (mx) {
        if (!json_is_number(mx) || json_number_value(mx) < 0 ||
            json_number_value(mx) != floor(json_number_value(mx)))
            return fail_kw(s, path, "maxItems", "must be a non-negative integer");
        max = (long long)json_number_value(mx);
    }
    if (min > GRAMMAR_MAX_REPEAT || max > GRAMMAR_MAX_REPEAT)
        return fail_kw(s, path, "maxItems", "item count bounds above 1000 are not supported");
    if (max >= 0 && max < min) return grammar__rule(b, "empty");
    /* Tuple part: prefixItems, or draft-4 "items": [...]; then the rest. */
    json_t *tuple = prefix ? prefix : (json_is_array(items) ? items : NULL);
    const char *tuple_kw = prefix ? "prefixItems" : "items";
    json_t *rest = prefix ? items : (json_is_array(items) ? addl : items);
    const char *rest_kw = prefix ? "items" : (json_is_array(items) ? "additionalItems" : "items");
    if (prefix && addl)
        return fail_kw(s, path, "additionalItems", "not supported with prefixItems");
    if (tuple && !json_is_array(tuple)) return fail_kw(s, path, tuple_kw, "must be an array");
    int n_tuple = tuple ? (int)json_array_size(tuple) : 0;
    int *tr = xmalloc(sizeof(int) * (size_t)(n_tuple + 1));
    for (int i = 0; i < n_tuple; i++) {
        snprintf(sub, sizeof(sub), "%s/%s/%d", path, tuple_kw, i);
        tr[i] = gen(s, json_array_get(tuple, (size_t)i), sub);
        if (tr[i] < 0) {
            int e = tr[i];
            free(tr);
            return e;
        }
    }
    int rest_rule;
    snprintf(sub, sizeof(sub), "%s/%s", path, rest_kw);
    if (!rest || json_is_true(rest))
        rest_rule = any_value(s);
    else {
        rest_rule = gen(s, rest, sub);
        if (rest_rule < 0) {
            free(tr);
            return rest_rule;
        }
    }
    /* Element i (0-based) is tr[i] for i < n_tuple, else rest. The array has
     * k elements, min <= k <= max. seq_i = "what may follow once i elements
     * are written": seq_i ::= ws "," ws elem_i seq_{i+1} | "" (if i >= min).
     * Beyond the tuple, the tail repeats rest with bounds. */
    int r = helper(s, "array");
    /* tail after n_tuple elements, each preceded by a comma */
    int comma_rest = helper(s, "comma-item");
    grammar__alt(b, comma_rest);
    grammar__ref(b, comma_rest, ws(s));
    lit(s, comma_rest, ",");
    grammar__ref(b, comma_rest, ws(s));
    grammar__ref(b, comma_rest, rest_rule);
    long long tail_min = min > n_tuple ? min - n_tuple : 0;
    long long tail_max = max < 0 ? GRAMMAR_INF : (max > n_tuple ? max - n_tuple : 0);
    /* seq[i] for i = n_tuple down to 1 */
    int next = -1; /* seq_{i+1} */
    for (int i = n_tuple; i >= 1; i--) {
        int q = helper(s, "array-seq");
        if (i == n_tuple) {
            grammar__alt(b, q);
            if (tail_max != 0)
                grammar__ref(
                    b, q,
                    grammar__repeat(b, "array-tail", comma_rest, (int)tail_min, (int)tail_max));
        } else {
            if (max < 0 || i < max) {
                grammar__alt(b, q);
                grammar__ref(b, q, ws(s));
                lit(s, q, ",");
                grammar__ref(b, q, ws(s));
                grammar__ref(b, q, tr[i]);
                grammar__ref(b, q, next);
            }
            if (i >= min) grammar__alt(b, q);
        }
        next = q;
    }
    /* first element: tuple[0] + seq_1, or rest + tail when no tuple */
    if (min == 0) {
        grammar__alt(b, r);
        lit(s, r, "[");
        grammar__ref(b, r, ws(s));
        lit(s, r, "]");
    }
    if (max != 0) {
        grammar__alt(b, r);
        lit(s, r, "[");
        grammar__ref(b, r, ws(s));
        if (n_tuple > 0) {
            grammar__ref(b, r, tr[0]);
            grammar__ref(b, r, next);
        } else {
            grammar__ref(b, r, rest_rule);
            long long tmin = min > 1 ? min - 1 : 0, tmax = max < 0 ? GRAMMAR_INF : max - 1;
            if (tmax != 0)
                grammar__ref(b, r,
                             grammar__repeat(b, "array-tail", comma_rest, (int)tmin, (int)tmax));
        }
        grammar__ref(b, r, ws(s));
        lit(s, r, "]");
    }
    free(tr);
    return r;
}

/* ---- objects ---- */

/* A JSON string (quoted) that is none of the names (spelled raw). Trie
 * states: at node n, the next character either ends the string (if n is not
 * a name), follows a child, or leaves the names behind (free state). */
struct ktrie {
    uint32_t *ch; /* (n) character on the edge into the node */
    int *parent;  /* (n) */
    bool *word;   /* (n) a name ends here */
    int *kid;     /* (n) first child, -1 none */
    int *last;    /* (n) last child, -1 none */
    int *sib;     /* (n) next sibling in creation order, -1 none */
    int n;        /* nodes (0 = root) */
};

static int key_except(struct sc *s, const char *const *names, int n_names)
{
    struct grammar_builder *b = s->b;
    struct ktrie t = {0};
    int cap = 1;
    for (int i = 0; i < n_names; i++)
        cap += (int)strlen(names[i]);
    t.ch = xmalloc(sizeof(uint32_t) * (size_t)cap);
    t.parent = xmalloc(sizeof(int) * (size_t)cap);
    t.word = xcalloc((size_t)cap, 1);
    t.kid = xmalloc(sizeof(int) * (size_t)cap);
    t.last = xmalloc(sizeof(int) * (size_t)cap);
    t.sib = xmalloc(sizeof(int) * (size_t)cap);
    t.n = 1;
    t.parent[0] = -1;
    t.kid[0] = t.last[0] = t.sib[0] = -1;
    for (int i = 0; i < n_names; i++) {
        int cur = 0;
        const unsigned char *p = (const unsigned char *)names[i];
        size_t len = strlen(names[i]);
        for (size_t k = 0; k < len;) {
            uint32_t cp = p[k];
            int l = cp < 0x80 ? 1 : (cp >> 5) == 6 ? 2 : (cp >> 4) == 14 ? 3 : 4;
            if (l > 1) {
                cp &= (l == 2 ? 0x1F : l == 3 ? 0x0F : 0x07);
                for (int j = 1; j < l && k + (size_t)j < len; j++)
                    cp = (cp << 6) | (p[k + (size_t)j] & 0x3F);
            }
            k += (size_t)l;
            int found = -1;
            for (int c = t.kid[cur]; c >= 0 && found < 0; c = t.sib[c])
                if (t.ch[c] == cp) found = c;
            if (found < 0) {
                found = t.n++;
                t.parent[found] = cur;
                t.ch[found] = cp;
                t.kid[found] = t.last[found] = t.sib[found] = -1;
                if (t.last[cur] >= 0)
                    t.sib[t.last[cur]] = found;
                else
                    t.kid[cur] = found;
                t.last[cur] = found;
            }
            cur = found;
        }
        t.word[cur] = true;
    }
    /* free state: json-char* '"' */
    int fr = helper(s, "key-free");
    grammar__alt(b, fr);
    grammar__ref(b, fr, grammar__repeat(b, "key-chars", jchar(s), 0, GRAMMAR_INF));
    lit(s, fr, "\"");
    int *rule = xmalloc(sizeof(int) * (size_t)t.n);
    for (int i = 0; i < t.n; i++)
        rule[i] = helper(s, "key-state");
    struct grammar_cprange *other = xmalloc(sizeof(*other) * (size_t)(2 * t.n + 8));
    struct grammar_cprange *neg = xmalloc(sizeof(*neg) * (size_t)(2 * t.n + 8));
    for (int i = 0; i < t.n; i++) {
        int r = rule[i];
        if (!t.word[i]) {
            grammar__alt(b, r);
            lit(s, r, "\"");
        }
        int n_other = 0;
        other[n_other++] = (struct grammar_cprange){0, 0x1F};
        other[n_other++] = (struct grammar_cprange){'"', '"'};
        other[n_other++] = (struct grammar_cprange){'\\', '\\'};
        for (int c = t.kid[i]; c >= 0; c = t.sib[c]) {
            grammar__alt(b, r);
            chars(s, r, t.ch[c], t.ch[c]);
            grammar__ref(b, r, rule[c]);
            other[n_other++] = (struct grammar_cprange){t.ch[c], t.ch[c]};
        }
        n_other = grammar__ranges_normalize(other, n_other);
        int nn = grammar__ranges_negate(other, n_other, neg);
        grammar__alt(b, r);
        grammar__chars(b, r, neg, nn);
        grammar__ref(b, r, fr);
        /* escapes leave the names behind too */
        grammar__alt(b, r);
        lit(s, r, "\\");
        struct grammar_cprange esc[8] = {{'"', '"'}, {'/', '/'}, {'\\', '\\'}, {'b', 'b'},
                                         {'f', 'f'}, {'n', 'n'}, {'r', 'r'},   {'t', 't'}};
        grammar__chars(b, r, esc, 8);
        grammar__ref(b, r, fr);
        grammar__alt(b, r);
        lit(s, r, "\\u");
        struct grammar_cprange hex[3] = {{'0', '9'}, {'A', 'F'}, {'a', 'f'}};
        for (int k = 0; k < 4; k++)
            grammar__chars(b, r, hex, 3);
        grammar__ref(b, r, fr);
    }
    int r = helper(s, "key");
    grammar__alt(b, r);
    lit(s, r, "\"");
    grammar__ref(b, r, rule[0]);
    free(other);
    free(neg);
    free(rule);
    free(t.ch);
    free(t.parent);
    free(t.word);
    free(t.kid);
    free(t.last);
    free(t.sib);
    return r;
}

static int gen_object(struct sc *s, json_t *node, const char *path)
{
    struct grammar_builder *b = s->b;
    char sub[1024];
    json_t *props = json_object_get(node, "properties"), *req = json_object_get(node, "required");
    json_t *addl = json_object_get(node, "additionalProperties");
    if (props && !json_is_object(props)) return fail_kw(s, path, "properties", "must be an object");
    if (req && !json_is_array(req)) return fail_kw(s, path, "required", "must be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return fail_kw(s, path, "additionalProperties", "must be a boolean or a schema");
    /* Members in canonical order. */
    size_t n_props = props ? json_object_size(props) : 0, n_req = req ? json_array_size(req) : 0;
    size_t cap = n_props + n_req + 1;
    const char **names = xmalloc(sizeof(char *) * cap);
    json_t **schemas = xmalloc(sizeof(json_t *) * cap);
    bool *required = xcalloc(cap, 1);
    int n = 0, rc = 0;
    const char *key;
    json_t *val;
    if (props) {
        json_object_foreach(props, key, val)
        {
            names[n] = key;
            schemas[n++] = val;
        }
    }
    /* name -> member index, so that thousands of required names are not
     * each compared with every declared one */
    json_t *index = json_object();
    for (int k = 0; k < n; k++)
        json_object_set_new(index, names[k], json_integer(k));
    for (size_t i = 0; i < n_req; i++) {
        json_t *x = json_array_get(req, i);
        if (!json_is_string(x)) {
            rc = fail_kw(s, path, "required", "must be an array of strings");
            json_decref(index);
            goto out;
        }
        json_t *at = json_object_get(index, json_string_value(x));
        int k = at ? (int)json_integer_value(at) : n;
        if (k == n) {
            json_object_set_new(index, json_string_value(x), json_integer(k));
            names[n] = json_string_value(x);
            schemas[n++] = NULL; /* any value */
        }
        required[k] = true;
    }
    json_decref(index);
    /* value rule of each member: "name" ws : ws value */
    int *kv = xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        int vr;
        if (schemas[i]) {
            snprintf(sub, sizeof(sub), "%s/properties/%s", path, names[i]);
            vr = gen(s, schemas[i], sub);
            if (vr < 0) {
                rc = vr;
                free(kv);
                goto out;
            }
        } else {
            vr = any_value(s);
        }
        kv[i] = helper(s, "member");
        grammar__alt(b, kv[i]);
        json_t *ks = json_string(names[i]);
        char *kt = json_dumps(ks, JSON_ENCODE_ANY);
        lit(s, kv[i], kt);
        free(kt);
        json_decref(ks);
        grammar__ref(b, kv[i], ws(s));
        lit(s, kv[i], ":");
        grammar__ref(b, kv[i], ws(s));
        grammar__ref(b, kv[i], vr);
    }
    /* additional members */
    int extra = -1;
    if (!addl || !json_is_false(addl)) {
        int vr = any_value(s);
        if (addl && json_is_object(addl)) {
            snprintf(sub, sizeof(sub), "%s/additionalProperties", path);
            vr = gen(s, addl, sub);
            if (vr < 0) {
                rc = vr;
                free(kv);
                goto out;
            }
        }
        extra = helper(s, "extra-member");
        grammar__alt(b, extra);
        grammar__ref(b, extra, key_except(s, names, n));
        grammar__ref(b, extra, ws(s));
        lit(s, extra, ":");
        grammar__ref(b, extra, ws(s));
        grammar__ref(b, extra, vr);
    }
    /* S_i: members i.. after at least one was written (each after a comma);
     * T_i: members i.. with none written yet. */
    int comma_extra = -1;
    if (extra >= 0) {
        comma_extra = helper(s, "comma-extra");
        grammar__alt(b, comma_extra);
        grammar__ref(b, comma_extra, ws(s));
        lit(s, comma_extra, ",");
        grammar__ref(b, comma_extra, ws(s));
        grammar__ref(b, comma_extra, extra);
    }
    int S = helper(s, "members-after"), T = helper(s, "members-first");
    grammar__alt(b, S);
    if (extra >= 0) grammar__ref(b, S, grammar__repeat(b, "extras", comma_extra, 0, GRAMMAR_INF));
    grammar__alt(b, T);
    if (extra >= 0) {
        grammar__alt(b, T);
        grammar__ref(b, T, extra);
        grammar__ref(b, T, grammar__repeat(b, "extras", comma_extra, 0, GRAMMAR_INF));
    }
    for (int i = n - 1; i >= 0; i--) {
        int S2 = helper(s, "members-after"), T2 = helper(s, "members-first");
        grammar__alt(b, S2);
        grammar__ref(b, S2, ws(s));
        lit(s, S2, ",");
        grammar__ref(b, S2, ws(s));
        grammar__ref(b, S2, kv[i]);
        grammar__ref(b, S2, S);
        if (!required[i]) {
            grammar__alt(b, S2);
            grammar__ref(b, S2, S);
        }
        grammar__alt(b, T2);
        grammar__ref(b, T2, kv[i]);
        grammar__ref(b, T2, S);
        if (!required[i]) {
            grammar__alt(b, T2);
            grammar__ref(b, T2, T);
        }
        S = S2;
        T = T2;
    }
    free(kv);
    rc = helper(s, "object");
    grammar__alt(b, rc);
    lit(s, rc, "{");
    grammar__ref(b, rc, ws(s));
    grammar__ref(b, rc, T);
    grammar__ref(b, rc, ws(s));
    lit(s, rc, "}");
out:
    free(names);
    free(schemas);
    free(required);
    return rc;
}

/* ---- combining ---- */

static json_t *follow_refs(struct sc *s, json_t *node, const char *path, int *err)
{
    for (int hops = 0; json_is_object(node) && json_object_get(node, "$ref"); hops++) {
        json_t *ref = json_object_get(node, "$ref");
        if (hops > 32 || !json_is_string(ref)) {
            *err = fail_kw(s, path, "$ref", "reference chain too long or not a string");
            return NULL;
        }
        node = resolve_pointer(s->root, json_string_value(ref));
        if (!node) {
            *err = fail_kw(s, path, "$ref",
                           "not supported: only local references (#/...) that resolve");
            return NULL;
        }
    }
    return node;
}

/* Merges src's keywords into dst (allOf). */
static int merge_into(struct sc *s, json_t *dst, json_t *src, const char *path, int depth)
{
    int err = 0;
    if (depth > 16) return fail_kw(s, path, "allOf", "nested too deeply");
    src = follow_refs(s, src, path, &err);
    if (!src) return err;
    if (json_is_true(src)) return 0;
    if (json_is_false(src)) {
        json_object_set_new(dst, "not-satisfiable", json_true());
        return 0;
    }
    if (!json_is_object(src)) return fail_kw(s, path, "allOf", "members must be schemas");
    const char *k;
    json_t *v;
    json_object_foreach(src, k, v)
    {
        if (strcmp(k, "allOf") == 0) {
            size_t i;
            json_t *x;
            if (!json_is_array(v)) return fail_kw(s, path, "allOf", "must be an array");
            json_array_foreach(v, i, x)
            {
                int rc = merge_into(s, dst, x, path, depth + 1);
                if (rc) return rc;
            }
            continue;
        }
        if (is_annotation(k)) continue;
        json_t *d = json_object_get(dst, k);
        if (!d) {
            json_object_set(dst, k, v);
            continue;
        }
        if (json_equal(d, v)) continue;
        if (strcmp(k, "properties") == 0 && json_is_object(d) && json_is_object(v)) {
            json_t *np = json_deep_copy(d);
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv)
            {
                json_t *old = json_object_get(np, pk);
                if (!old)
                    json_object_set(np, pk, pv);
                else
                    json_object_set_new(np, pk, json_pack("{s:[O,O]}", "allOf", old, pv));
            }
            json_object_set_new(dst, k, np);
        } else if (strcmp(k, "required") == 0 && json_is_array(d) && json_is_array(v)) {
            json_t *nr = json_copy(d);
            size_t i;
            json_t *x;
            json_array_foreach(v, i, x) json_array_append(nr, x);
            json_object_set_new(dst, k, nr);
        } else if (json_is_number(d) && json_is_number(v) &&
                   (strncmp(k, "min", 3) == 0 || strncmp(k, "max", 3) == 0)) {
            double a = json_number_value(d), c = json_number_value(v);
            bool take_max = strncmp(k, "min", 3) == 0;
            json_object_set(dst, k, (take_max ? c > a : c < a) ? v : d);
        } else if (strcmp(k, "type") == 0) {
            int ta = 0, tb = 0;
            json_t *tmp1 = json_pack("{s:O}", "type", d), *tmp2 = json_pack("{s:O}", "type", v);
            int rc = types_of(s, tmp1, path, &ta);
            if (!rc) rc = types_of(s, tmp2, path, &tb);
            json_decref(tmp1);
            json_decref(tmp2);
            if (rc) return rc;
            if (ta & T_NUM) ta |= T_INT;
            if (tb & T_NUM) tb |= T_INT;
            int t = ta & tb;
            json_t *arr = json_array();
            static const char *nm[] = {"null",   "boolean", "integer", "number",
                                       "string", "array",   "object"};
            /* number & integer is integer: drop "number" unless both allow it */
            if (!((ta & T_NUM) && (tb & T_NUM))) t &= ~T_NUM;
            for (int i = 0; i < 7; i++)
                if (t & (1 << i)) json_array_append_new(arr, json_string(nm[i]));
            json_object_set_new(dst, "type", arr);
        } else {
            return fail_kw(s, path, k, "allOf members disagree on this keyword (cannot combine)");
        }
    }
    return 0;
}

/* additionalProperties of one allOf member also judges the properties the
 * other members declare; merging would hide that, so it is refused. */
static int check_allof_additional(struct sc *s, json_t *node, const char *path)
{
    json_t *all = json_object_get(node, "allOf");
    size_t n = json_array_size(all), i, j;
    int err = 0;
    for (i = 0; i <= n; i++) {
        json_t *x = i < n ? follow_refs(s, json_array_get(all, i), path, &err) : node;
        if (!x) return err;
        json_t *ap = json_is_object(x) ? json_object_get(x, "additionalProperties") : NULL;
        if (!ap || json_is_true(ap)) continue;
        json_t *own = json_object_get(x, "properties");
        for (j = 0; j <= n; j++) {
            if (j == i) continue;
            json_t *y = j < n ? follow_refs(s, json_array_get(all, j), path, &err) : node;
            if (!y) return err;
            json_t *props = json_is_object(y) ? json_object_get(y, "properties") : NULL;
            json_t *req = json_is_object(y) ? json_object_get(y, "required") : NULL;
            const char *k;
            json_t *v;
            size_t r;
            bool outside = false;
            if (json_is_object(props))
                json_object_foreach(props, k, v) outside |= !json_object_get(own, k);
            if (json_is_array(req))
                json_array_foreach(req, r, v) outside |=
                    json_is_string(v) && !json_object_get(own, json_string_value(v));
            if (outside)
                return fail_kw(s, path, "allOf",
                               "additionalProperties in one member with properties declared in "
                               "another is not supported");
        }
    }
    return 0;
}

/* ---- keywords exact only in some cases ----
 *
 * rewrite() turns them into keywords the generator knows, where that is
 * exact, and refuses the rest (ERR_INVALID, "not supported", with why):
 *   not: false / true / {} / a schema of only "type" (the complement of the
 *     types; not integer-but-number, which needs "numbers with a fraction");
 *   minProperties: at most the number of required names (always true);
 *   maxProperties: at least every name that can occur, when
 *     additionalProperties is false; 0 (only {});
 *   dependentRequired / draft-4 dependencies with name arrays: a trigger that
 *     cannot occur, dependents already required, or a required trigger (its
 *     dependents become required);
 *   propertyNames: true, false (only {}), or a schema when
 *     additionalProperties is false: declared names that fail it are
 *     dropped (a failing required name leaves no valid object);
 *   multipleOf: an integer k up to SCHEMA_MAX_MULTIPLE, no bounds: integral
 *     multiples of k (a remainder automaton; numbers may add a ".0" fraction
 *     and, like bounded numbers, have no exponent).
 * Keywords about objects or integers are dropped when the schema's types
 * exclude objects or integers (they constrain nothing then). */

static bool name_in(json_t *arr, const char *name)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i,
                       x) if (json_is_string(x) && !strcmp(json_string_value(x), name)) return true;
    return false;
}

/* Names that can occur as members when additionalProperties is false:
 * declared properties and required names. -1 when any name can occur. */
static int names_possible(json_t *n)
{
    if (!json_is_false(json_object_get(n, "additionalProperties"))) return -1;
    json_t *props = json_object_get(n, "properties"), *req = json_object_get(n, "required");
    int count = (int)json_object_size(props);
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x)
    {
        bool dup = false;
        for (size_t j = 0; j < i; j++)
            dup |= json_equal(json_array_get(req, j), x);
        if (json_is_string(x) && !json_object_get(props, json_string_value(x)) && !dup) count++;
    }
    return count;
}

static void only_empty_object(json_t *n)
{
    json_object_set_new(n, "properties", json_object());
    json_object_set_new(n, "additionalProperties", json_false());
    json_object_del(n, "required");
}

/* Drops object (or, with T_INT, integer) from n's types. */
static void drop_types(json_t *n, int types, int drop)
{
    static const char *nm[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    int t = types & ~drop;
    json_t *arr = json_array();
    for (int i = 0; i < 7; i++)
        if (t & (1 << i)) json_array_append_new(arr, json_string(nm[i]));
    json_object_set_new(n, "type", arr);
}

/* The JSON text of name matches schema sch (compiled on its own). */
static int name_matches(struct sc *s, json_t *sch, const char *name, const char *path, bool *ok)
{
    char *text = json_dumps(sch, JSON_ENCODE_ANY | JSON_COMPACT);
    json_t *js = json_string(name);
    char *lit_text = json_dumps(js, JSON_ENCODE_ANY);
    json_decref(js);
    struct grammar *g;
    struct err_msg m = {{0}};
    int rc = grammar_compile(GRAMMAR_JSON_SCHEMA, text, strlen(text), &g, &m);
    free(text);
    if (rc) {
        free(lit_text);
        return fail_kw(s, path, "propertyNames",
                       "not supported for this schema (it must compile "
                       "on its own, without $ref)");
    }
    struct grammar_matcher *mt = grammar_matcher_new(g, NULL);
    *ok = grammar_matcher_accept_bytes(mt, lit_text, strlen(lit_text)) &&
          grammar_matcher_is_accepting(mt);
    grammar_matcher_free(mt);
    grammar_unref(g);
    free(lit_text);
    return 0;
}

static int rewrite_not(struct sc *s, json_t *n, const char *path, int *types, bool *nothing)
{
    json_t *no = json_object_get(n, "not");
    if (!no) return 0;
    if (json_is_false(no)) {
        json_object_del(n, "not");
        return 0;
    }
    if (json_is_true(no) || (json_is_object(no) && json_object_size(no) == 0)) {
        *nothing = true;
        return 0;
    }
    const char *k;
    json_t *v;
    bool only_type = json_is_object(no) && json_object_get(no, "type");
    if (only_type)
        json_object_foreach(no, k, v) only_type &= !strcmp(k, "type") || is_annotation(k);
    if (!only_type)
        return fail_kw(s, path, "not",
                       "not supported here (only true, false, {} and {\"type\": ...})");
    int nt, rc = types_of(s, no, path, &nt);
    if (rc) return rc;
    if ((nt & T_INT) && !(nt & T_NUM) && (*types & T_NUM))
        return fail_kw(s, path, "not", "not supported: integers excluded from numbers");
    if (nt & T_NUM) nt |= T_INT;
    drop_types(n, *types, nt);
    *types &= ~nt;
    json_object_del(n, "not");
    if (!*types) *nothing = true;
    return 0;
}

static int rewrite_deps(struct sc *s, json_t *n, const char *path, const char *kw)
{
    json_t *deps = json_object_get(n, kw);
    if (!deps) return 0;
    if (!json_is_object(deps)) return fail_kw(s, path, kw, "must be an object");
    json_t *req = json_object_get(n, "required");
    json_t *nreq = json_is_array(req) ? json_copy(req) : json_array();
    bool possible_any = names_possible(n) < 0;
    json_t *props = json_object_get(n, "properties");
    const char *a;
    json_t *list;
    json_object_foreach(deps, a, list)
    {
        if (!json_is_array(list)) {
            json_decref(nreq);
            return fail_kw(s, path, kw, "not supported with a schema (only arrays of names)");
        }
        bool can_occur = possible_any || json_object_get(props, a) || name_in(nreq, a);
        if (!can_occur) continue;
        bool trigger_required = name_in(nreq, a);
        size_t i;
        json_t *x;
        json_array_foreach(list, i, x)
        {
            if (!json_is_string(x)) {
                json_decref(nreq);
                return fail_kw(s, path, kw, "must list property names");
            }
            if (name_in(nreq, json_string_value(x))) continue;
            if (!trigger_required) {
                json_decref(nreq);
                return fail_kw(s, path, kw,
                               "not supported: an optional property requiring another optional "
                               "one");
            }
            json_array_append(nreq, x);
        }
    }
    json_object_set_new(n, "required", nreq);
    json_object_del(n, kw);
    return 0;
}

static int rewrite_objects(struct sc *s, json_t *n, const char *path, int *types, bool *nothing)
{
    json_t *req = json_object_get(n, "required");
    int n_req = 0;
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x)
    {
        bool dup = false;
        for (size_t j = 0; j < i; j++)
            dup |= json_equal(json_array_get(req, j), x);
        n_req += !dup;
    }
    json_t *mn = json_object_get(n, "minProperties"), *mx = json_object_get(n, "maxProperties");
    if (mn) {
        if (!json_is_number(mn) || json_number_value(mn) < 0)
            return fail_kw(s, path, "minProperties", "must be a non-negative integer");
        if (json_number_value(mn) > n_req)
            return fail_kw(s, path, "minProperties",
                           "not supported above the number of required properties");
        json_object_del(n, "minProperties");
    }
    if (mx) {
        if (!json_is_number(mx) || json_number_value(mx) < 0)
            return fail_kw(s, path, "maxProperties", "must be a non-negative integer");
        double m = json_number_value(mx);
        int possible = names_possible(n);
        if (m < 1 && n_req > 0) {
            drop_types(n, *types, T_OBJ);
            *types &= ~T_OBJ;
        } else if (m < 1) {
            only_empty_object(n);
        } else if (possible < 0 || possible > m) {
            return fail_kw(s, path, "maxProperties",
                           "not supported unless additionalProperties is false and no more "
                           "names can occur");
        }
        json_object_del(n, "maxProperties");
    }
    int rc = rewrite_deps(s, n, path, "dependentRequired");
    if (!rc) rc = rewrite_deps(s, n, path, "dependencies");
    if (rc) return rc;
    json_t *pn = json_object_get(n, "propertyNames");
    if (pn && !json_is_true(pn)) {
        if (json_is_false(pn)) {
            if (n_req > 0) {
                drop_types(n, *types, T_OBJ);
                *types &= ~T_OBJ;
            } else {
                only_empty_object(n);
            }
        } else if (names_possible(n) < 0) {
            return fail_kw(s, path, "propertyNames",
                           "not supported unless additionalProperties is false");
        } else {
            json_t *props = json_object_get(n, "properties");
            json_t *np = json_is_object(props) ? json_copy(props) : json_object();
            const char *k;
            json_t *v;
            bool obj_ok = true;
            json_object_foreach(props, k, v)
            {
                bool ok;
                if ((rc = name_matches(s, pn, k, path, &ok))) break;
                if (!ok) json_object_del(np, k);
            }
            json_array_foreach(req, i, x)
            {
                bool ok = true;
                if (!rc && json_is_string(x))
                    rc = name_matches(s, pn, json_string_value(x), path, &ok);
                obj_ok &= ok;
            }
            if (rc) {
                json_decref(np);
                return rc;
            }
            json_object_set_new(n, "properties", np);
            if (!obj_ok) {
                drop_types(n, *types, T_OBJ);
                *types &= ~T_OBJ;
            }
        }
    }
    json_object_del(n, "propertyNames");
    if (!*types) *nothing = true;
    return 0;
}

/* if/then/else where the condition is exact: if true / false picks a
 * branch; if {"type": T} splits the types: anyOf[{type: T} & then,
 * {type: not T} & else]. *out gets the schema to generate instead. */
static int rewrite_if(struct sc *s, json_t *n, const char *path, int types, json_t **out)
{
    json_t *cond = json_object_get(n, "if");
    json_t *then_s = json_object_get(n, "then"), *else_s = json_object_get(n, "else");
    json_t *base = json_copy(n);
    json_object_del(base, "if");
    json_object_del(base, "then");
    json_object_del(base, "else");
    then_s = then_s ? json_incref(then_s) : json_true();
    else_s = else_s ? json_incref(else_s) : json_true();
    int rc = 0;
    *out = NULL;
    if (!cond) { /* then / else without if are ignored */
        *out = json_incref(base);
    } else if (json_is_true(cond) || json_is_false(cond)) {
        *out = json_pack("{s:[O,O]}", "allOf", base, json_is_true(cond) ? then_s : else_s);
    } else {
        const char *k;
        json_t *v;
        bool only_type = json_is_object(cond) && json_object_get(cond, "type");
        if (only_type)
            json_object_foreach(cond, k, v) only_type &= !strcmp(k, "type") || is_annotation(k);
        int ct = 0;
        if (!only_type)
            rc =
                fail_kw(s, path, "if", "not supported here (only true, false and {\"type\": ...})");
        if (!rc) rc = types_of(s, cond, path, &ct);
        if (!rc && (ct & T_INT) && !(ct & T_NUM) && (types & T_NUM))
            rc = fail_kw(s, path, "if", "not supported: integers split from numbers");
        if (!rc && (json_object_get(base, "anyOf") || json_object_get(base, "oneOf")))
            rc = fail_kw(s, path, "if", "not supported together with anyOf or oneOf");
        if (!rc) {
            if (ct & T_NUM) ct |= T_INT;
            json_t *yes = json_object(), *no = json_object();
            drop_types(yes, types, ~ct & T_ALL);
            drop_types(no, types, ct);
            *out = json_pack("{s:[{s:[O,o,O]},{s:[O,o,O]}]}", "anyOf", "allOf", base, yes, then_s,
                             "allOf", base, no, else_s);
        }
    }
    json_decref(base);
    json_decref(then_s);
    json_decref(else_s);
    return rc;
}

/* *out: a rewritten copy of node (owned by the caller), or NULL when node
 * needs none. */
static int rewrite(struct sc *s, json_t *node, const char *path, json_t **out)
{
    static const char *kws[] = {"not",
                                "minProperties",
                                "maxProperties",
                                "propertyNames",
                                "dependentRequired",
                                "dependencies",
                                "multipleOf",
                                "if",
                                "then",
                                "else"};
    *out = NULL;
    bool any = false;
    for (size_t i = 0; i < ARRAY_LEN(kws); i++)
        any |= json_object_get(node, kws[i]) != NULL;
    if (!any) return 0;
    json_t *n = json_copy(node);
    int types, rc = types_of(s, n, path, &types);
    bool nothing = false;
    if (!rc &&
        (json_object_get(n, "if") || json_object_get(n, "then") || json_object_get(n, "else"))) {
        json_t *alt = NULL;
        rc = rewrite_if(s, n, path, types, &alt);
        json_decref(n);
        *out = alt; /* generated afresh: its members are rewritten in turn */
        return rc;
    }
    if (!rc) rc = rewrite_not(s, n, path, &types, &nothing);
    if (!rc && !nothing) {
        if (types & T_OBJ) {
            rc = rewrite_objects(s, n, path, &types, &nothing);
        } else {
            static const char *obj_kws[] = {"minProperties", "maxProperties", "propertyNames",
                                            "dependentRequired", "dependencies"};
            for (size_t i = 0; i < ARRAY_LEN(obj_kws); i++)
                json_object_del(n, obj_kws[i]);
        }
    }
    json_t *mul = json_object_get(n, "multipleOf");
    if (!rc && !nothing && mul) {
        double k = json_is_number(mul) ? json_number_value(mul) : 0;
        if (!(k > 0)) {
            rc = fail_kw(s, path, "multipleOf", "must be a number above 0");
        } else if (!(types & (T_INT | T_NUM))) {
            json_object_del(n, "multipleOf");
        } else if (k != floor(k) || k > SCHEMA_MAX_MULTIPLE) {
            rc =
                fail_kw(s, path, "multipleOf", "not supported (only an integer divisor up to 100)");
        } else if (json_object_get(n, "minimum") || json_object_get(n, "maximum") ||
                   json_object_get(n, "exclusiveMinimum") ||
                   json_object_get(n, "exclusiveMaximum")) {
            rc = fail_kw(s, path, "multipleOf", "not supported together with bounds");
        } else if (k == 1) {
            json_object_del(n, "multipleOf");
        }
    }
    if (rc) {
        json_decref(n);
        return rc;
    }
    if (nothing) {
        json_decref(n);
        n = json_pack("{s:b}", "not-satisfiable", 1);
    }
    *out = n;
    return 0;
}

static const char *SUPPORTED[] = {"type",
                                  "enum",
                                  "const",
                                  "properties",
                                  "required",
                                  "additionalProperties",
                                  "items",
                                  "prefixItems",
                                  "additionalItems",
                                  "minItems",
                                  "maxItems",
                                  "uniqueItems",
                                  "anyOf",
                                  "oneOf",
                                  "allOf",
                                  "$ref",
                                  "format",
                                  "minLength",
                                  "maxLength",
                                  "pattern",
                                  "minimum",
                                  "maximum",
                                  "exclusiveMinimum",
                                  "exclusiveMaximum",
                                  "not",
                                  "multipleOf",
                                  "minProperties",
                                  "maxProperties",
                                  "dependentRequired",
                                  "dependencies",
                                  "propertyNames",
                                  "if",
                                  "then",
                                  "else",
                                  "not-satisfiable"};

static int gen(struct sc *s, json_t *node, const char *path)
{
    struct grammar_builder *b = s->b;
    char sub[1024];
    if (json_is_true(node)) return any_value(s);
    if (json_is_false(node)) return grammar__rule(b, "false");
    if (!json_is_object(node))
        return err_set(s->msg, ERR_INVALID,
                       "json schema: %s: a schema must be an object or boolean",
                       path[0] ? path : "#");
    /* Past a compile bound the rest would only be thrown away. */
    if (b->over) return grammar__over_error(b, s->msg);
    if (++s->depth > SCHEMA_MAX_DEPTH) {
        s->depth--;
        return err_set(s->msg, ERR_INVALID,
                       "json schema: nested too deeply (more than %d levels) at %s",
                       SCHEMA_MAX_DEPTH, path);
    }
    int origin = b->origin_cur; /* rules made below come from this subschema */
    b->origin_cur = grammar__origin(b, "json schema: %s", path);
    int rc = 0;
    json_t *own = NULL; /* node rewritten by rewrite() */
    json_t *ref = json_object_get(node, "$ref");
    if (ref) {
        /* draft 4-7: keywords next to $ref are ignored by the spec */
        rc = json_is_string(ref) ? gen_ref(s, json_string_value(ref), path)
                                 : fail_kw(s, path, "$ref", "must be a string");
        goto out;
    }
    const char *k;
    json_t *v;
    json_object_foreach(node, k, v)
    {
        bool ok = is_annotation(k);
        for (size_t i = 0; i < ARRAY_LEN(SUPPORTED) && !ok; i++)
            ok = strcmp(k, SUPPORTED[i]) == 0;
        if (!ok) {
            rc = fail_kw(s, path, k, "unsupported keyword");
            goto out;
        }
    }
    if (json_object_get(node, "not-satisfiable")) {
        rc = grammar__rule(b, "false");
        goto out;
    }
    json_t *all = json_object_get(node, "allOf");
    if (all) {
        if (!json_is_array(all)) {
            rc = fail_kw(s, path, "allOf", "must be an array");
            goto out;
        }
        if ((rc = check_allof_additional(s, node, path))) goto out;
        json_t *m = json_object();
        rc = merge_into(s, m, node, path, 0);
        if (!rc) {
            snprintf(sub, sizeof(sub), "%s/allOf", path);
            rc = gen(s, m, sub);
        }
        json_decref(m);
        goto out;
    }
    json_t *any = json_object_get(node, "anyOf");
    const char *any_kw = "anyOf";
    if (!any) any = json_object_get(node, "oneOf"), any_kw = "oneOf";
    if (json_object_get(node, "anyOf") && json_object_get(node, "oneOf")) {
        rc = fail_kw(s, path, "oneOf", "anyOf together with oneOf is not supported");
        goto out;
    }
    if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) {
            rc = fail_kw(s, path, any_kw, "must be a non-empty array");
            goto out;
        }
        /* siblings distribute over the alternatives: {A, anyOf:[x,y]} = anyOf[{A}&x, {A}&y] */
        json_t *base = json_deep_copy(node);
        json_object_del(base, any_kw);
        int r = helper(s, any_kw);
        size_t i;
        json_t *x;
        json_array_foreach(any, i, x)
        {
            snprintf(sub, sizeof(sub), "%s/%s/%zu", path, any_kw, i);
            int ar;
            if (json_object_size(base) == 0) {
                ar = gen(s, x, sub);
            } else {
                json_t *m = json_pack("{s:[O,O]}", "allOf", base, x);
                ar = gen(s, m, sub);
                json_decref(m);
            }
            if (ar < 0) {
                rc = ar;
                json_decref(base);
                goto out;
            }
            grammar__alt(b, r);
            grammar__ref(b, r, ar);
        }
        json_decref(base);
        rc = r;
        goto out;
    }
    if ((rc = rewrite(s, node, path, &own))) goto out;
    if (own && (json_object_get(own, "allOf") || json_object_get(own, "anyOf"))) {
        rc = gen(s, own, path); /* if/then/else became a combinator */
        goto out;
    }
    if (own) {
        node = own;
        if (json_object_get(node, "not-satisfiable")) {
            rc = grammar__rule(b, "false");
            goto out;
        }
    }
    int types;
    if ((rc = types_of(s, node, path, &types))) goto out;
    json_t *en = json_object_get(node, "enum"), *cn = json_object_get(node, "const");
    if (en || cn) {
        if (en && !json_is_array(en)) {
            rc = fail_kw(s, path, "enum", "must be an array");
            goto out;
        }
        int r = helper(s, "enum");
        json_t *vals = en ? json_incref(en) : json_pack("[O]", cn);
        size_t i;
        json_t *x;
        json_array_foreach(vals, i, x)
        {
            if (en && cn && !json_equal(x, cn)) continue;
            int vt = value_type(x);
            if (!(vt & types) && !((vt & T_INT) && (types & T_NUM))) continue;
            grammar__alt(b, r);
            grammar__ref(b, r, gen_const(s, x));
        }
        json_decref(vals);
        rc = r;
        goto out;
    }
    if (types & T_NUM) types &= ~T_INT;
    int r = helper(s, "schema");
    for (int bit = 1; bit <= T_OBJ; bit <<= 1) {
        if (!(types & bit)) continue;
        int tr;
        switch (bit) {
        case T_NULL:
            tr = rule_lit(s, "null");
            break;
        case T_BOOL:
            tr = helper(s, "boolean");
            grammar__alt(b, tr);
            lit(s, tr, "true");
            grammar__alt(b, tr);
            lit(s, tr, "false");
            break;
        case T_INT:
            tr = gen_integer(s, node, path);
            break;
        case T_NUM:
            tr = gen_number(s, node, path);
            break;
        case T_STR:
            tr = gen_string(s, node, path);
            break;
        case T_ARR:
            tr = gen_array(s, node, path);
            break;
        default:
            tr = gen_object(s, node, path);
            break;
        }
        if (tr < 0) {
            rc = tr;
            goto out;
        }
        grammar__alt(b, r);
        grammar__ref(b, r, tr);
    }
    rc = r;
out:
    json_decref(own);
    s->depth--;
    b->origin_cur = origin;
    return rc;
}

int grammar__schema_build(struct grammar_builder *b, const char *src, size_t len, bool any_object,
                          struct err_msg *msg)
{
    struct sc s = {.b = b, .msg = msg};
    s.ws = s.value = s.string = s.number = s.integer = s.jchar = s.object = s.array = -1;
    int root = grammar__rule(b, "root");
    if (any_object) {
        any_value(&s);
        grammar__alt(b, root);
        grammar__ref(b, root, ws(&s));
        grammar__ref(b, root, s.object);
        grammar__ref(b, root, ws(&s));
        return root;
    }
    json_error_t jerr;
    json_t *doc = json_loadb(src, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return err_set(msg, ERR_INVALID, "json schema: not valid JSON: %s (line %d, column %d)",
                       jerr.text, jerr.line, jerr.column);
    s.root = doc;
    int body = gen(&s, doc, "#");
    for (int i = 0; i < s.n_refs; i++)
        free(s.refs[i].ptr);
    free(s.refs);
    json_decref(doc);
    if (body < 0) return body;
    /* Leading and trailing whitespace are allowed around the value. */
    grammar__alt(b, root);
    grammar__ref(b, root, ws(&s));
    grammar__ref(b, root, body);
    grammar__ref(b, root, ws(&s));
    return root;
}
