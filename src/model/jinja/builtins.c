/*
 * builtins.c - filters, tests, methods of str / list / dict, and the global
 * functions (range, namespace, dict, raise_exception, strftime_now).
 *
 * Semantics are Jinja2's and Python's (transformers renders with them):
 * capitalize lowers the rest, int() truncates, unique ignores case, round
 * rounds half to even at the requested digit, `length` of a string counts
 * code points. Case mapping is ASCII only.
 *
 * strftime_now formats the current time in UTC, or the time given by the
 * environment variable INFERD_TEMPLATE_NOW (seconds since the epoch), so
 * tests and comparisons against other renderers can pin the date.
 *
 * Filters and tests are found by name at parse time (an unknown name is a
 * parse error); map / select / reject look names up again at render time.
 */
#include "model/jinja/jinja_impl.h"

#include "base/check.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- argument helpers ---- */

/* The argument at position i or named name, or NULL. */
static const struct jv *arg(const struct call_args *a, uint32_t i, const char *name)
{
    if (i < a->n_pos) return &a->pos[i];
    for (uint32_t k = 0; k < a->n_kw; k++)
        if (!strcmp(a->kw_names[k], name)) return &a->kw[k];
    return NULL;
}

static bool arg_bool(const struct call_args *a, uint32_t i, const char *name, bool def)
{
    const struct jv *v = arg(a, i, name);
    return v ? jinja__truthy(v) : def;
}

static int64_t arg_int(struct render *r, const struct call_args *a, uint32_t i, const char *name,
                       int64_t def)
{
    const struct jv *v = arg(a, i, name);
    if (!v || v->kind == JV_NONE || v->kind == JV_UNDEF) return def;
    if (v->kind == JV_INT) return v->i;
    if (v->kind == JV_BOOL) return v->b;
    jinja__fail(r, r->line, "argument '%s' must be an integer, not '%s'", name,
                jinja__type_name(v));
}

/* A string argument, or NULL when absent / none. */
static const struct jv *arg_str(struct render *r, const struct call_args *a, uint32_t i,
                                const char *name)
{
    const struct jv *v = arg(a, i, name);
    if (!v || v->kind == JV_NONE || v->kind == JV_UNDEF) return NULL;
    if (v->kind != JV_STR)
        jinja__fail(r, r->line, "argument '%s' must be a string, not '%s'", name,
                    jinja__type_name(v));
    return v;
}

static struct jv need_str(struct render *r, const char *what, struct jv v)
{
    if (v.kind == JV_STR) return v;
    jinja__fail(r, r->line, "%s expects a string, got '%s'", what, jinja__type_name(&v));
}

static struct jv from_buf(struct render *r, struct buf *b)
{
    struct jv s = jinja__str_copy(r, b->data ? b->data : "", b->len);
    buf_release(b);
    return s;
}

/* ---- strings ---- */

/* Length of a Python whitespace character at s[i], or 0. */
static size_t space_len(const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c == 0xc2 && i + 1 < n &&
        ((unsigned char)s[i + 1] == 0x85 || (unsigned char)s[i + 1] == 0xa0))
        return 2;
    if (c == 0xe3 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        (unsigned char)s[i + 2] == 0x80)
        return 3;
    if (c == 0xe2 && i + 2 < n) {
        unsigned char b1 = (unsigned char)s[i + 1], b2 = (unsigned char)s[i + 2];
        if (b1 == 0x80 && ((b2 >= 0x80 && b2 <= 0x8a) || b2 == 0xa8 || b2 == 0xa9 || b2 == 0xaf))
            return 3;
        if (b1 == 0x81 && b2 == 0x9f) return 3;
    }
    if (c == 0xe1 && i + 2 < n && (unsigned char)s[i + 1] == 0x9a &&
        (unsigned char)s[i + 2] == 0x80)
        return 3;
    return 0;
}

/* Length of the whitespace character ending at s[end-1], or 0. */
static size_t space_len_back(const char *s, size_t end)
{
    for (size_t k = 1; k <= 3 && k <= end; k++)
        if (space_len(s, end, end - k) == k) return k;
    return 0;
}

static bool in_chars(const struct jv *chars, const char *s, size_t i, size_t *len)
{
    /* One code point of s at i against the code points of chars. */
    size_t l = 1;
    while (i + l < SIZE_MAX && ((unsigned char)s[i + l] & 0xc0) == 0x80)
        l++;
    for (size_t k = 0; k < chars->n;) {
        size_t m = 1;
        while (k + m < chars->n && ((unsigned char)chars->s[k + m] & 0xc0) == 0x80)
            m++;
        if (m == l && !memcmp(chars->s + k, s + i, l)) {
            *len = l;
            return true;
        }
        k += m;
    }
    return false;
}

static struct jv strip(struct jv s, const struct jv *chars, bool left, bool right)
{
    size_t a = 0, b = s.n;
    if (!chars) {
        size_t k;
        while (left && a < b && (k = space_len(s.s, b, a)))
            a += k;
        while (right && b > a && (k = space_len_back(s.s, b)))
            b -= k;
    } else {
        size_t k;
        while (left && a < b && in_chars(chars, s.s, a, &k))
            a += k;
        while (right && b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s.s[st] & 0xc0) == 0x80)
                st--;
            if (!in_chars(chars, s.s, st, &k)) break;
            b = st;
        }
    }
    return jinja__str(s.s + a, b - a);
}

static char up(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}

static char low(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

enum case_mode {
    CASE_UPPER,
    CASE_LOWER,
    CASE_CAPITALIZE,  /* first upper, rest lower */
    CASE_TITLE_PY,    /* str.title(): letter after a non-letter upper */
    CASE_TITLE_JINJA, /* |title: first char of words split at [-\s({[<] upper */
};

static struct jv map_case(struct render *r, struct jv s, enum case_mode m)
{
    char *o = jinja__alloc(r, s.n + 1);
    bool prev_alpha = false, word_start = true;
    for (uint32_t i = 0; i < s.n; i++) {
        char c = s.s[i];
        switch (m) {
        case CASE_UPPER:
            o[i] = up(c);
            break;
        case CASE_LOWER:
            o[i] = low(c);
            break;
        case CASE_CAPITALIZE:
            o[i] = i == 0 ? up(c) : low(c);
            break;
        case CASE_TITLE_PY:
            o[i] = prev_alpha ? low(c) : up(c);
            prev_alpha = is_alpha(c) || ((unsigned char)c >= 0x80);
            break;
        case CASE_TITLE_JINJA: {
            bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(' ||
                       c == '{' || c == '[' || c == '<' || c == '\v' || c == '\f';
            o[i] = sep ? c : word_start ? up(c) : low(c);
            word_start = sep;
            break;
        }
        }
    }
    o[s.n] = 0;
    return jinja__str(o, s.n);
}

static const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}

static struct jv str_replace(struct render *r, struct jv s, struct jv old, struct jv new_,
                             int64_t count)
{
    struct buf b = {0};
    if (old.n == 0) {
        /* Python inserts new before every code point and at the end. */
        size_t i = 0;
        while (count != 0 && i <= s.n) {
            buf_append(&b, new_.s, new_.n);
            if (count > 0) count--;
            if (i == s.n) {
                i++;
                break;
            }
            size_t j = i + 1;
            while (j < s.n && ((unsigned char)s.s[j] & 0xc0) == 0x80)
                j++;
            buf_append(&b, s.s + i, j - i);
            i = j;
        }
        if (i <= s.n) buf_append(&b, s.s + i, s.n - i);
        return from_buf(r, &b);
    }
    const char *p = s.s, *end = s.s + s.n;
    while (count != 0) {
        const char *hit = find_sub(p, (size_t)(end - p), old.s, old.n);
        if (!hit) break;
        buf_append(&b, p, (size_t)(hit - p));
        buf_append(&b, new_.s, new_.n);
        if (b.len > JINJA_MAX_OUTPUT) {
            buf_release(&b);
            jinja__fail(r, r->line, "string longer than %u bytes", JINJA_MAX_OUTPUT);
        }
        p = hit + old.n;
        if (count > 0) count--;
    }
    buf_append(&b, p, (size_t)(end - p));
    return from_buf(r, &b);
}

static struct jv str_split(struct render *r, struct jv s, const struct jv *sep, int64_t maxsplit)
{
    struct jv out = jinja__list_new(r, 4);
    if (!sep) {
        size_t i = 0, k;
        while (1) {
            while (i < s.n && (k = space_len(s.s, s.n, i)))
                i += k;
            if (i >= s.n) break;
            if (maxsplit == 0) {
                size_t e = s.n;
                while (e > i && (k = space_len_back(s.s, e)))
                    e -= k;
                jinja__list_push(r, &out, jinja__str(s.s + i, e - i));
                break;
            }
            size_t j = i;
            while (j < s.n && !space_len(s.s, s.n, j))
                j++;
            jinja__list_push(r, &out, jinja__str(s.s + i, j - i));
            if (maxsplit > 0) maxsplit--;
            i = j;
        }
        return out;
    }
    if (!sep->n) jinja__fail(r, r->line, "split: empty separator");
    const char *p = s.s, *end = s.s + s.n;
    while (maxsplit != 0) {
        const char *hit = find_sub(p, (size_t)(end - p), sep->s, sep->n);
        if (!hit) break;
        jinja__list_push(r, &out, jinja__str(p, (size_t)(hit - p)));
        p = hit + sep->n;
        if (maxsplit > 0) maxsplit--;
    }
    jinja__list_push(r, &out, jinja__str(p, (size_t)(end - p)));
    return out;
}

static bool affix_match(struct render *r, struct jv s, const struct jv *affix, bool prefix)
{
    if (affix->kind == JV_LIST) {
        struct jv *items;
        uint32_t n = jinja__iter(r, affix, &items);
        for (uint32_t i = 0; i < n; i++)
            if (affix_match(r, s, &items[i], prefix)) return true;
        return false;
    }
    if (affix->kind != JV_STR)
        jinja__fail(r, r->line, "%s: argument must be a string or a tuple of strings, not '%s'",
                    prefix ? "startswith" : "endswith", jinja__type_name(affix));
    if (affix->n > s.n) return false;
    return !memcmp(prefix ? s.s : s.s + s.n - affix->n, affix->s, affix->n);
}

static int64_t count_sub(struct jv s, struct jv sub)
{
    if (!sub.n) return (int64_t)jinja__utf8_count(s.s, s.n) + 1;
    int64_t c = 0;
    const char *p = s.s, *end = s.s + s.n, *hit;
    while ((hit = find_sub(p, (size_t)(end - p), sub.s, sub.n))) {
        c++;
        p = hit + sub.n;
    }
    return c;
}

/* ---- sorting (stable merge sort; the comparison may fail and unwind) ---- */

struct sort_ctx {
    struct render *r;    /* for errors */
    const char *attr;    /* sort key attribute path or NULL */
    bool by_value;       /* dictsort: compare item[1] */
    bool case_sensitive; /* string comparison */
    bool reverse;        /* descending */
};

static struct jv attr_path(struct render *r, struct jv item, const char *path);

static struct jv sort_key(const struct sort_ctx *c, const struct jv *v)
{
    if (c->attr) return attr_path(c->r, *v, c->attr);
    return *v;
}

static int sort_cmp(const struct sort_ctx *c, const struct jv *a, const struct jv *b)
{
    struct jv x = sort_key(c, a), y = sort_key(c, b);
    int d = jinja__compare(c->r, &x, &y, c->case_sensitive);
    return c->reverse ? -d : d;
}

static void merge_sort(const struct sort_ctx *c, struct jv *v, struct jv *tmp, uint32_t n)
{
    if (n < 2) return;
    uint32_t h = n / 2;
    merge_sort(c, v, tmp, h);
    merge_sort(c, v + h, tmp, n - h);
    uint32_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = sort_cmp(c, &v[j], &v[i]) < 0 ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof(*v));
}

static struct jv sorted(struct render *r, struct jv *items, uint32_t n, const struct sort_ctx *c)
{
    struct jv out = jinja__list_new(r, n);
    if (n) memcpy(out.list->items, items, n * sizeof(*items));
    out.list->n = n;
    struct jv *tmp = jinja__alloc(r, (n ? n : 1) * sizeof(*tmp));
    merge_sort(c, out.list->items, tmp, n);
    return out;
}

/* item.a.b (dict keys, list indices). */
static struct jv attr_path(struct render *r, struct jv item, const char *path)
{
    const char *p = path;
    while (1) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (item.kind == JV_DICT) {
            if (!jinja__dict_get(&item, p, len, &item)) return jinja__undef();
        } else if (item.kind == JV_LIST && len && p[0] >= '0' && p[0] <= '9') {
            size_t idx = (size_t)strtoull(p, NULL, 10);
            if (idx >= jinja__len(r, &item)) return jinja__undef();
            item = jinja__list_get(&item, idx);
        } else {
            return jinja__undef();
        }
        if (!dot) return item;
        p = dot + 1;
    }
}

/* ---- filters ---- */

typedef struct jv (*filter_fn)(struct render *r, const struct node *n, struct jv v,
                               struct call_args *a);

static struct jv f_abs(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    if (v.kind == JV_INT) {
        if (v.i == INT64_MIN) jinja__fail(r, r->line, "integer overflow");
        return jinja__int(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == JV_BOOL) return jinja__int(v.b);
    if (v.kind == JV_FLOAT) return jinja__float(fabs(v.f));
    jinja__fail(r, r->line, "abs: bad operand type '%s'", jinja__type_name(&v));
}

static struct jv f_attr(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    const struct jv *name = arg_str(r, a, 0, "name");
    if (!name) jinja__fail(r, r->line, "attr: missing attribute name");
    struct jv out;
    if (v.kind == JV_DICT && jinja__dict_get(&v, name->s, name->n, &out)) return out;
    return jinja__undef();
}

static struct jv f_capitalize(struct render *r, const struct node *n, struct jv v,
                              struct call_args *a)
{
    (void)n, (void)a;
    return map_case(r, jinja__to_str(r, &v), CASE_CAPITALIZE);
}

static struct jv f_lower(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    return map_case(r, jinja__to_str(r, &v), CASE_LOWER);
}

static struct jv f_upper(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    return map_case(r, jinja__to_str(r, &v), CASE_UPPER);
}

static struct jv f_title(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    return map_case(r, jinja__to_str(r, &v), CASE_TITLE_JINJA);
}

static struct jv f_length(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    if (v.kind == JV_UNDEF) return jinja__int(0);
    return jinja__int((int64_t)jinja__len(r, &v));
}

static struct jv f_default(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)r, (void)n;
    const struct jv *d = arg(a, 0, "default_value");
    bool boolean = arg_bool(a, 1, "boolean", false);
    if (v.kind == JV_UNDEF || (boolean && !jinja__truthy(&v))) return d ? *d : jinja__str("", 0);
    return v;
}

static struct jv f_escape(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    struct jv s = jinja__to_str(r, &v);
    struct buf b = {0};
    for (uint32_t i = 0; i < s.n; i++) {
        switch (s.s[i]) {
        case '&':
            buf_puts(&b, "&amp;");
            break;
        case '<':
            buf_puts(&b, "&lt;");
            break;
        case '>':
            buf_puts(&b, "&gt;");
            break;
        case '"':
            buf_puts(&b, "&#34;");
            break;
        case '\'':
            buf_puts(&b, "&#39;");
            break;
        default:
            buf_putc(&b, s.s[i]);
        }
    }
    return from_buf(r, &b);
}

static struct jv f_first(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    if (v.kind == JV_UNDEF) return v;
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    return cnt ? items[0] : jinja__undef();
}

static struct jv f_last(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    if (v.kind == JV_UNDEF) return v;
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    return cnt ? items[cnt - 1] : jinja__undef();
}

static bool parse_number(const char *s, size_t n, bool want_int, int64_t *i, double *f)
{
    char tmp[128];
    /* Python accepts surrounding whitespace and '_' between digits. */
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    if (!n || n >= sizeof(tmp)) return false;
    size_t k = 0;
    for (size_t j = 0; j < n; j++) {
        if (s[j] == 'x' || s[j] == 'X' || s[j] == 'p' || s[j] == 'P') return false; /* no hex */
        if (s[j] != '_') tmp[k++] = s[j];
    }
    tmp[k] = 0;
    char *end;
    if (want_int) {
        long long x = strtoll(tmp, &end, 10);
        if (*end == 0 && end != tmp) {
            *i = x;
            return true;
        }
    }
    double d = strtod(tmp, &end);
    if (*end != 0 || end == tmp) return false;
    *f = d;
    if (want_int) {
        if (!isfinite(d) || fabs(d) > 9.2e18) return false;
        *i = (int64_t)d;
    }
    return true;
}

static struct jv f_int(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    int64_t def = arg_int(r, a, 0, "default", 0);
    switch (v.kind) {
    case JV_INT:
        return v;
    case JV_BOOL:
        return jinja__int(v.b);
    case JV_FLOAT:
        if (!isfinite(v.f) || fabs(v.f) > 9.2e18) return jinja__int(def);
        return jinja__int((int64_t)v.f);
    case JV_STR: {
        int64_t i;
        double f;
        if (parse_number(v.s, v.n, true, &i, &f)) return jinja__int(i);
        return jinja__int(def);
    }
    default:
        return jinja__int(def);
    }
}

static struct jv f_float(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)r;
    const struct jv *d = arg(a, 0, "default");
    double def = d && d->kind == JV_FLOAT ? d->f : d && d->kind == JV_INT ? (double)d->i : 0.0;
    switch (v.kind) {
    case JV_INT:
        return jinja__float((double)v.i);
    case JV_BOOL:
        return jinja__float(v.b);
    case JV_FLOAT:
        return v;
    case JV_STR: {
        int64_t i;
        double f;
        if (parse_number(v.s, v.n, false, &i, &f)) return jinja__float(f);
        return jinja__float(def);
    }
    default:
        return jinja__float(def);
    }
}

static struct jv f_indent(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    struct jv s = jinja__to_str(r, &v);
    const struct jv *w = arg(a, 0, "width");
    struct jv ind;
    if (w && w->kind == JV_STR) {
        ind = *w;
    } else {
        int64_t width = arg_int(r, a, 0, "width", 4);
        if (width < 0) width = 0;
        if (width > 1024) jinja__fail(r, r->line, "indent: width %" PRId64 " too large", width);
        char *sp = jinja__alloc(r, (size_t)width + 1);
        memset(sp, ' ', (size_t)width);
        ind = jinja__str(sp, (size_t)width);
    }
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    struct buf b = {0};
    if (first) buf_append(&b, ind.s, ind.n);
    const char *p = s.s, *end = s.s + s.n;
    bool line0 = true;
    while (1) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!line0) {
            buf_putc(&b, '\n');
            if (len || blank) buf_append(&b, ind.s, ind.n);
        }
        buf_append(&b, p, len);
        line0 = false;
        if (!nl) break;
        p = nl + 1;
        if (b.len > JINJA_MAX_OUTPUT) {
            buf_release(&b);
            jinja__fail(r, r->line, "string longer than %u bytes", JINJA_MAX_OUTPUT);
        }
    }
    return from_buf(r, &b);
}

static struct jv pair(struct render *r, struct jv k, struct jv v)
{
    struct jv p = jinja__list_new(r, 2);
    jinja__list_push(r, &p, k);
    jinja__list_push(r, &p, v);
    return p;
}

static struct jv f_items(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    if (v.kind == JV_UNDEF) return jinja__list_new(r, 0);
    if (v.kind != JV_DICT)
        jinja__fail(r, r->line, "items: expected a mapping, got '%s'", jinja__type_name(&v));
    struct jv *keys;
    uint32_t cnt = jinja__iter(r, &v, &keys);
    struct jv out = jinja__list_new(r, cnt);
    for (uint32_t i = 0; i < cnt; i++) {
        struct jv val;
        jinja__dict_get(&v, keys[i].s, keys[i].n, &val);
        jinja__list_push(r, &out, pair(r, keys[i], val));
    }
    return out;
}

static struct jv f_join(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    const struct jv *sep = arg_str(r, a, 0, "d");
    const struct jv *attr = arg_str(r, a, 1, "attribute");
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    struct buf b = {0};
    for (uint32_t i = 0; i < cnt; i++) {
        if (i && sep) buf_append(&b, sep->s, sep->n);
        struct jv x = items[i];
        if (attr) {
            char *path = jinja__alloc(r, attr->n + 1);
            memcpy(path, attr->s, attr->n);
            path[attr->n] = 0;
            x = attr_path(r, x, path);
        }
        jinja__stringify(r, &x, &b);
        if (b.len > JINJA_MAX_OUTPUT) {
            buf_release(&b);
            jinja__fail(r, r->line, "string longer than %u bytes", JINJA_MAX_OUTPUT);
        }
    }
    return from_buf(r, &b);
}

static struct jv f_list(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    if (v.kind == JV_UNDEF) return jinja__list_new(r, 0);
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    struct jv out = jinja__list_new(r, cnt);
    if (cnt) memcpy(out.list->items, items, cnt * sizeof(*items));
    out.list->n = cnt;
    return out;
}

static struct jv f_reverse(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    if (v.kind == JV_STR) {
        char *o = jinja__alloc(r, v.n + 1);
        size_t off = 0;
        for (uint32_t i = cnt; i > 0; i--) {
            memcpy(o + off, items[i - 1].s, items[i - 1].n);
            off += items[i - 1].n;
        }
        o[off] = 0;
        return jinja__str(o, off);
    }
    struct jv out = jinja__list_new(r, cnt);
    for (uint32_t i = cnt; i > 0; i--)
        jinja__list_push(r, &out, items[i - 1]);
    return out;
}

static const char *path_arg(struct render *r, const struct call_args *a, uint32_t i,
                            const char *name)
{
    const struct jv *v = arg(a, i, name);
    if (!v || v->kind == JV_NONE || v->kind == JV_UNDEF) return NULL;
    struct jv s = jinja__to_str(r, v);
    char *p = jinja__alloc(r, s.n + 1);
    memcpy(p, s.s, s.n);
    p[s.n] = 0;
    return p;
}

static struct jv f_sort(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    struct sort_ctx c = {.r = r,
                         .reverse = arg_bool(a, 0, "reverse", false),
                         .case_sensitive = arg_bool(a, 1, "case_sensitive", false),
                         .attr = path_arg(r, a, 2, "attribute")};
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    return sorted(r, items, cnt, &c);
}

static struct jv f_dictsort(struct render *r, const struct node *n, struct jv v,
                            struct call_args *a)
{
    (void)n;
    if (v.kind != JV_DICT)
        jinja__fail(r, r->line, "dictsort: expected a mapping, got '%s'", jinja__type_name(&v));
    struct jv items = f_items(r, n, v, a);
    const struct jv *by = arg_str(r, a, 1, "by");
    bool by_value = by && by->n == 5 && !memcmp(by->s, "value", 5);
    struct sort_ctx c = {.r = r,
                         .case_sensitive = arg_bool(a, 0, "case_sensitive", false),
                         .reverse = arg_bool(a, 2, "reverse", false),
                         .attr = by_value ? "1" : "0"};
    return sorted(r, items.list->items, items.list->n, &c);
}

static struct jv f_unique(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    bool cs = arg_bool(a, 0, "case_sensitive", false);
    const char *attr = path_arg(r, a, 1, "attribute");
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    struct jv out = jinja__list_new(r, cnt);
    for (uint32_t i = 0; i < cnt; i++) {
        struct jv ki = attr ? attr_path(r, items[i], attr) : items[i];
        if (!cs && ki.kind == JV_STR) ki = map_case(r, ki, CASE_LOWER);
        bool seen = false;
        for (uint32_t j = 0; j < out.list->n && !seen; j++) {
            struct jv kj = attr ? attr_path(r, out.list->items[j], attr) : out.list->items[j];
            if (!cs && kj.kind == JV_STR) kj = map_case(r, kj, CASE_LOWER);
            seen = jinja__equal(&ki, &kj);
        }
        if (!seen) jinja__list_push(r, &out, items[i]);
    }
    return out;
}

static struct jv minmax(struct render *r, struct jv v, struct call_args *a, bool want_max)
{
    struct sort_ctx c = {.r = r,
                         .case_sensitive = arg_bool(a, 0, "case_sensitive", false),
                         .attr = path_arg(r, a, 1, "attribute")};
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    if (!cnt) return jinja__undef();
    struct jv best = items[0];
    for (uint32_t i = 1; i < cnt; i++) {
        int d = sort_cmp(&c, &items[i], &best);
        if (want_max ? d > 0 : d < 0) best = items[i];
    }
    return best;
}

static struct jv f_max(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    return minmax(r, v, a, true);
}

static struct jv f_min(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    return minmax(r, v, a, false);
}

static struct jv f_sum(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    const char *attr = path_arg(r, a, 0, "attribute");
    const struct jv *start = arg(a, 1, "start");
    struct jv acc = start ? *start : jinja__int(0);
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    for (uint32_t i = 0; i < cnt; i++) {
        struct jv x = attr ? attr_path(r, items[i], attr) : items[i];
        bool xn = x.kind == JV_INT || x.kind == JV_FLOAT || x.kind == JV_BOOL;
        bool an = acc.kind == JV_INT || acc.kind == JV_FLOAT || acc.kind == JV_BOOL;
        if (!xn || !an) jinja__fail(r, r->line, "sum: cannot add '%s'", jinja__type_name(&x));
        if (acc.kind == JV_FLOAT || x.kind == JV_FLOAT) {
            double fa = acc.kind == JV_FLOAT ? acc.f : acc.kind == JV_INT ? (double)acc.i : acc.b;
            double fx = x.kind == JV_FLOAT ? x.f : x.kind == JV_INT ? (double)x.i : x.b;
            acc = jinja__float(fa + fx);
        } else {
            int64_t ia = acc.kind == JV_INT ? acc.i : acc.b, ix = x.kind == JV_INT ? x.i : x.b, res;
            if (__builtin_add_overflow(ia, ix, &res)) jinja__fail(r, r->line, "integer overflow");
            acc = jinja__int(res);
        }
    }
    return acc;
}

static struct jv f_replace(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    struct jv s = jinja__to_str(r, &v);
    const struct jv *old = arg_str(r, a, 0, "old"), *new_ = arg_str(r, a, 1, "new");
    if (!old || !new_) jinja__fail(r, r->line, "replace: needs the old and new strings");
    return str_replace(r, s, *old, *new_, arg_int(r, a, 2, "count", -1));
}

static struct jv f_round(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    int64_t prec = arg_int(r, a, 0, "precision", 0);
    const struct jv *method = arg_str(r, a, 1, "method");
    double f = v.kind == JV_FLOAT  ? v.f
               : v.kind == JV_INT  ? (double)v.i
               : v.kind == JV_BOOL ? v.b
                                   : NAN;
    if (isnan(f) && v.kind != JV_FLOAT)
        jinja__fail(r, r->line, "round: expected a number, got '%s'", jinja__type_name(&v));
    if (prec < -300 || prec > 300) jinja__fail(r, r->line, "round: precision out of range");
    if (method && !(method->n == 6 && !memcmp(method->s, "common", 6))) {
        double scale = pow(10, (double)prec);
        bool ceil_ = method->n == 4 && !memcmp(method->s, "ceil", 4);
        bool floor_ = method->n == 5 && !memcmp(method->s, "floor", 5);
        if (!ceil_ && !floor_)
            jinja__fail(r, r->line, "round: method must be common, ceil or floor");
        return jinja__float((ceil_ ? ceil(f * scale) : floor(f * scale)) / scale);
    }
    if (v.kind != JV_FLOAT) return jinja__float(f);
    if (!isfinite(f)) return v;
    /* Correctly rounded, half to even on the exact binary value (as Python). */
    char tmp[400];
    if (prec >= 0) {
        snprintf(tmp, sizeof(tmp), "%.*f", (int)prec, f);
        return jinja__float(strtod(tmp, NULL));
    }
    double scale = pow(10, (double)-prec);
    return jinja__float(nearbyint(f / scale) * scale);
}

static struct jv f_safe(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    struct jv s = jinja__to_str(r, &v);
    s.flags |= JV_F_SAFE;
    return s;
}

static struct jv f_string(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n, (void)a;
    return jinja__to_str(r, &v);
}

static struct jv f_trim(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    const struct jv *chars = arg_str(r, a, 0, "chars");
    return strip(jinja__to_str(r, &v), chars, true, true);
}

static struct jv f_tojson(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    struct tojson_opts o = {.indent = -1};
    const struct jv *ind = arg(a, 0, "indent");
    if (ind && ind->kind == JV_INT) {
        if (ind->i < 0 || ind->i > 64) jinja__fail(r, r->line, "tojson: indent out of range");
        o.indent = (int)ind->i;
    } else if (ind && ind->kind != JV_NONE && ind->kind != JV_UNDEF) {
        jinja__fail(r, r->line, "tojson: indent must be an integer");
    }
    o.ensure_ascii = arg_bool(a, 99, "ensure_ascii", false);
    o.sort_keys = arg_bool(a, 99, "sort_keys", false);
    const struct jv *sep = arg(a, 99, "separators");
    if (sep && sep->kind == JV_LIST) {
        if (jinja__len(r, sep) != 2) jinja__fail(r, r->line, "tojson: separators must be a pair");
        struct jv s0 = jinja__list_get(sep, 0), s1 = jinja__list_get(sep, 1);
        if (s0.kind != JV_STR || s1.kind != JV_STR)
            jinja__fail(r, r->line, "tojson: separators must be strings");
        o.item_sep = jinja__str_copy(r, s0.s, s0.n).s;
        o.key_sep = jinja__str_copy(r, s1.s, s1.n).s;
    }
    struct buf b = {0};
    jinja__tojson(r, &v, &o, &b, 0);
    return from_buf(r, &b);
}

static struct jv f_wordcount(struct render *r, const struct node *n, struct jv v,
                             struct call_args *a)
{
    (void)n, (void)a;
    struct jv s = jinja__to_str(r, &v);
    int64_t c = 0;
    bool in = false;
    for (uint32_t i = 0; i < s.n; i++) {
        char ch = s.s[i];
        bool w = is_alpha(ch) || (ch >= '0' && ch <= '9') || ch == '_' || (unsigned char)ch >= 0x80;
        if (w && !in) c++;
        in = w;
    }
    return jinja__int(c);
}

static struct jv f_center(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    struct jv s = jinja__to_str(r, &v);
    int64_t width = arg_int(r, a, 0, "width", 80);
    int64_t len = (int64_t)jinja__utf8_count(s.s, s.n);
    if (width > 4096) jinja__fail(r, r->line, "center: width too large");
    if (width <= len) return s;
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    struct buf b = {0};
    for (int64_t i = 0; i < left; i++)
        buf_putc(&b, ' ');
    buf_append(&b, s.s, s.n);
    for (int64_t i = 0; i < pad - left; i++)
        buf_putc(&b, ' ');
    return from_buf(r, &b);
}

/* select / reject / selectattr / rejectattr / map: item-wise with a named test or filter. */
static int find_test(struct render *r, const struct node *n, const struct jv *name);

static struct call_args shift_args(const struct call_args *a, uint32_t k)
{
    struct call_args s = *a;
    s.pos = a->n_pos > k ? a->pos + k : NULL;
    s.n_pos = a->n_pos > k ? a->n_pos - k : 0;
    return s;
}

static struct jv select_impl(struct render *r, const struct node *n, struct jv v,
                             struct call_args *a, bool by_attr, bool keep)
{
    const char *attr = NULL;
    uint32_t k = 0;
    if (by_attr) {
        attr = path_arg(r, a, 0, "attribute");
        if (!attr) jinja__fail(r, r->line, "%s: missing attribute", n->name);
        k = 1;
    }
    const struct jv *test = a->n_pos > k ? &a->pos[k] : NULL;
    int tid = test ? find_test(r, n, test) : -1;
    struct call_args rest = shift_args(a, k + 1);
    rest.n_kw = 0;
    struct jv *items;
    uint32_t cnt = v.kind == JV_UNDEF ? 0 : jinja__iter(r, &v, &items);
    struct jv out = jinja__list_new(r, cnt);
    for (uint32_t i = 0; i < cnt; i++) {
        struct jv x = attr ? attr_path(r, items[i], attr) : items[i];
        bool t = tid >= 0 ? jinja__apply_test(r, n, tid, x, &rest) : jinja__truthy(&x);
        if (t == keep) jinja__list_push(r, &out, items[i]);
    }
    return out;
}

static struct jv f_select(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    return select_impl(r, n, v, a, false, true);
}

static struct jv f_reject(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    return select_impl(r, n, v, a, false, false);
}

static struct jv f_selectattr(struct render *r, const struct node *n, struct jv v,
                              struct call_args *a)
{
    return select_impl(r, n, v, a, true, true);
}

static struct jv f_rejectattr(struct render *r, const struct node *n, struct jv v,
                              struct call_args *a)
{
    return select_impl(r, n, v, a, true, false);
}

static struct jv f_map(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    struct jv *items;
    uint32_t cnt = v.kind == JV_UNDEF ? 0 : jinja__iter(r, &v, &items);
    struct jv out = jinja__list_new(r, cnt);
    const char *attr = NULL;
    const struct jv *def = NULL;
    for (uint32_t k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw_names[k], "attribute")) attr = path_arg(r, a, 99, "attribute");
        if (!strcmp(a->kw_names[k], "default")) def = &a->kw[k];
    }
    if (attr) {
        for (uint32_t i = 0; i < cnt; i++) {
            struct jv x = attr_path(r, items[i], attr);
            if (x.kind == JV_UNDEF && def) x = *def;
            jinja__list_push(r, &out, x);
        }
        return out;
    }
    if (!a->n_pos || a->pos[0].kind != JV_STR)
        jinja__fail(r, r->line, "map: needs a filter name or attribute=");
    char name[64];
    if (a->pos[0].n >= sizeof(name)) jinja__fail(r, r->line, "map: unknown filter");
    memcpy(name, a->pos[0].s, a->pos[0].n);
    name[a->pos[0].n] = 0;
    int b = jinja__builtin_find(BUILTIN_FILTER, name);
    if (b < 0) jinja__fail(r, r->line, "map: unknown filter '%s'", name);
    struct call_args rest = shift_args(a, 1);
    for (uint32_t i = 0; i < cnt; i++)
        jinja__list_push(r, &out, jinja__apply_filter(r, n, b, items[i], &rest));
    return out;
}

static struct jv f_batch(struct render *r, const struct node *n, struct jv v, struct call_args *a)
{
    (void)n;
    int64_t size = arg_int(r, a, 0, "linecount", 1);
    if (size <= 0) jinja__fail(r, r->line, "batch: size must be positive");
    const struct jv *fill = arg(a, 1, "fill_with");
    struct jv *items;
    uint32_t cnt = jinja__iter(r, &v, &items);
    struct jv out = jinja__list_new(r, 0);
    struct jv cur = jinja__list_new(r, 0);
    for (uint32_t i = 0; i < cnt; i++) {
        jinja__list_push(r, &cur, items[i]);
        if ((int64_t)cur.list->n == size) {
            jinja__list_push(r, &out, cur);
            cur = jinja__list_new(r, 0);
        }
    }
    if (cur.list->n) {
        while (fill && (int64_t)cur.list->n < size)
            jinja__list_push(r, &cur, *fill);
        jinja__list_push(r, &out, cur);
    }
    return out;
}

struct filter_def {
    const char *name; /* as written in templates */
    filter_fn fn;     /* implementation */
};

static const struct filter_def filters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

/* ---- tests ---- */

typedef bool (*test_fn)(struct render *r, struct jv v, struct call_args *a);

static const struct jv *test_arg(struct render *r, struct call_args *a, const char *test)
{
    const struct jv *x = arg(a, 0, "other");
    if (!x) jinja__fail(r, r->line, "test '%s' needs an argument", test);
    return x;
}

static bool t_defined(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind != JV_UNDEF;
}

static bool t_undefined(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_UNDEF;
}

static bool t_none(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_NONE;
}

static bool t_boolean(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_BOOL;
}

static bool t_true(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_BOOL && v.b;
}

static bool t_false(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_BOOL && !v.b;
}

static bool t_integer(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_INT;
}

static bool t_float(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_FLOAT;
}

static bool t_number(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

static bool t_string(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_STR;
}

static bool t_mapping(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_DICT && !(v.flags & JV_F_NAMESPACE);
}

static bool t_iterable(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF;
}

static bool t_sequence(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_STR || v.kind == JV_LIST ||
           (v.kind == JV_DICT && !(v.flags & JV_F_NAMESPACE));
}

static bool t_callable(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_FUNC;
}

static bool t_eq(struct render *r, struct jv v, struct call_args *a)
{
    return jinja__equal(&v, test_arg(r, a, "eq"));
}

static bool t_ne(struct render *r, struct jv v, struct call_args *a)
{
    return !jinja__equal(&v, test_arg(r, a, "ne"));
}

static bool t_lt(struct render *r, struct jv v, struct call_args *a)
{
    return jinja__compare(r, &v, test_arg(r, a, "lt"), true) < 0;
}

static bool t_le(struct render *r, struct jv v, struct call_args *a)
{
    return jinja__compare(r, &v, test_arg(r, a, "le"), true) <= 0;
}

static bool t_gt(struct render *r, struct jv v, struct call_args *a)
{
    return jinja__compare(r, &v, test_arg(r, a, "gt"), true) > 0;
}

static bool t_ge(struct render *r, struct jv v, struct call_args *a)
{
    return jinja__compare(r, &v, test_arg(r, a, "ge"), true) >= 0;
}

static bool t_sameas(struct render *r, struct jv v, struct call_args *a)
{
    const struct jv *o = test_arg(r, a, "sameas");
    if (v.kind != o->kind) return false;
    switch (v.kind) {
    case JV_NONE:
    case JV_UNDEF:
        return true;
    case JV_BOOL:
        return v.b == o->b;
    case JV_INT:
        return v.i == o->i;
    case JV_LIST:
    case JV_DICT:
        return v.json == o->json;
    default:
        return jinja__equal(&v, o);
    }
}

static int64_t need_int(struct render *r, struct jv v, const char *test)
{
    if (v.kind == JV_INT) return v.i;
    if (v.kind == JV_BOOL) return v.b;
    jinja__fail(r, r->line, "test '%s' needs an integer, got '%s'", test, jinja__type_name(&v));
}

static bool t_odd(struct render *r, struct jv v, struct call_args *a)
{
    (void)a;
    return need_int(r, v, "odd") % 2 != 0;
}

static bool t_even(struct render *r, struct jv v, struct call_args *a)
{
    (void)a;
    return need_int(r, v, "even") % 2 == 0;
}

static bool t_divisibleby(struct render *r, struct jv v, struct call_args *a)
{
    int64_t d = need_int(r, *test_arg(r, a, "divisibleby"), "divisibleby");
    if (d == 0) jinja__fail(r, r->line, "divisibleby: division by zero");
    if (d == -1) return true;
    return need_int(r, v, "divisibleby") % d == 0;
}

static bool t_in(struct render *r, struct jv v, struct call_args *a)
{
    const struct jv *seq = test_arg(r, a, "in");
    if (seq->kind == JV_STR) {
        if (v.kind != JV_STR) jinja__fail(r, r->line, "test 'in' a string needs a string");
        return find_sub(seq->s, seq->n, v.s, v.n) != NULL;
    }
    if (seq->kind == JV_DICT) {
        struct jv tmp;
        return v.kind == JV_STR && jinja__dict_get(seq, v.s, v.n, &tmp);
    }
    if (seq->kind != JV_LIST)
        jinja__fail(r, r->line, "test 'in' needs a container, got '%s'", jinja__type_name(seq));
    size_t n = jinja__len(r, seq);
    for (size_t i = 0; i < n; i++) {
        struct jv x = jinja__list_get(seq, i);
        if (jinja__equal(&x, &v)) return true;
    }
    return false;
}

static bool t_lower(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    if (v.kind != JV_STR) return false;
    bool cased = false;
    for (uint32_t i = 0; i < v.n; i++) {
        if (v.s[i] >= 'A' && v.s[i] <= 'Z') return false;
        if (v.s[i] >= 'a' && v.s[i] <= 'z') cased = true;
    }
    return cased;
}

static bool t_upper(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    if (v.kind != JV_STR) return false;
    bool cased = false;
    for (uint32_t i = 0; i < v.n; i++) {
        if (v.s[i] >= 'a' && v.s[i] <= 'z') return false;
        if (v.s[i] >= 'A' && v.s[i] <= 'Z') cased = true;
    }
    return cased;
}

static bool t_escaped(struct render *r, struct jv v, struct call_args *a)
{
    (void)r, (void)a;
    return v.kind == JV_STR && (v.flags & JV_F_SAFE);
}

struct test_def {
    const char *name; /* as written after 'is' */
    test_fn fn;       /* implementation */
};

static const struct test_def tests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

int jinja__builtin_find(enum builtin_kind kind, const char *name)
{
    if (kind == BUILTIN_FILTER) {
        for (size_t i = 0; i < ARRAY_LEN(filters); i++)
            if (!strcmp(filters[i].name, name)) return (int)i;
    } else {
        for (size_t i = 0; i < ARRAY_LEN(tests); i++)
            if (!strcmp(tests[i].name, name)) return (int)i;
    }
    return -1;
}

struct jv jinja__apply_filter(struct render *r, const struct node *n, int builtin, struct jv v,
                              struct call_args *a)
{
    CHECK(builtin >= 0 && (size_t)builtin < ARRAY_LEN(filters));
    return filters[builtin].fn(r, n, v, a);
}

bool jinja__apply_test(struct render *r, const struct node *n, int builtin, struct jv v,
                       struct call_args *a)
{
    (void)n;
    CHECK(builtin >= 0 && (size_t)builtin < ARRAY_LEN(tests));
    return tests[builtin].fn(r, v, a);
}

static int find_test(struct render *r, const struct node *n, const struct jv *name)
{
    char buf[64];
    if (name->kind != JV_STR || name->n >= sizeof(buf))
        jinja__fail(r, r->line, "%s: test name must be a string", n->name);
    memcpy(buf, name->s, name->n);
    buf[name->n] = 0;
    int b = jinja__builtin_find(BUILTIN_TEST, buf);
    if (b < 0) jinja__fail(r, r->line, "%s: unknown test '%s'", n->name, buf);
    return b;
}

/* ---- methods ---- */

enum method_id {
    M_STRIP,
    M_LSTRIP,
    M_RSTRIP,
    M_SPLIT,
    M_RSPLIT,
    M_STARTSWITH,
    M_ENDSWITH,
    M_REPLACE,
    M_UPPER,
    M_LOWER,
    M_TITLE,
    M_CAPITALIZE,
    M_FIND,
    M_COUNT,
    M_JOIN,
    M_ISDIGIT,
    M_ISALPHA,
    M_ISSPACE,
    M_SPLITLINES,
    M_REMOVEPREFIX,
    M_REMOVESUFFIX,
    M_FORMAT,
    M_APPEND,
    M_EXTEND,
    M_POP,
    M_INDEX,
    M_INSERT,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_GET,
    M_UPDATE,
    M_COPY,
};

struct method_def {
    const char *name; /* method name */
    uint8_t kind;     /* enum jv_kind of the receiver */
    uint16_t id;      /* enum method_id */
};

static const struct method_def methods[] = {
    {"strip", JV_STR, M_STRIP},
    {"lstrip", JV_STR, M_LSTRIP},
    {"rstrip", JV_STR, M_RSTRIP},
    {"split", JV_STR, M_SPLIT},
    {"rsplit", JV_STR, M_RSPLIT},
    {"startswith", JV_STR, M_STARTSWITH},
    {"endswith", JV_STR, M_ENDSWITH},
    {"replace", JV_STR, M_REPLACE},
    {"upper", JV_STR, M_UPPER},
    {"lower", JV_STR, M_LOWER},
    {"title", JV_STR, M_TITLE},
    {"capitalize", JV_STR, M_CAPITALIZE},
    {"find", JV_STR, M_FIND},
    {"count", JV_STR, M_COUNT},
    {"join", JV_STR, M_JOIN},
    {"isdigit", JV_STR, M_ISDIGIT},
    {"isalpha", JV_STR, M_ISALPHA},
    {"isspace", JV_STR, M_ISSPACE},
    {"splitlines", JV_STR, M_SPLITLINES},
    {"removeprefix", JV_STR, M_REMOVEPREFIX},
    {"removesuffix", JV_STR, M_REMOVESUFFIX},
    {"format", JV_STR, M_FORMAT},
    {"append", JV_LIST, M_APPEND},
    {"extend", JV_LIST, M_EXTEND},
    {"pop", JV_LIST, M_POP},
    {"index", JV_LIST, M_INDEX},
    {"insert", JV_LIST, M_INSERT},
    {"count", JV_LIST, M_COUNT},
    {"items", JV_DICT, M_ITEMS},
    {"keys", JV_DICT, M_KEYS},
    {"values", JV_DICT, M_VALUES},
    {"get", JV_DICT, M_GET},
    {"update", JV_DICT, M_UPDATE},
    {"copy", JV_DICT, M_COPY},
    {"pop", JV_DICT, M_POP},
};

bool jinja__method_exists(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(methods); i++)
        if (!strcmp(methods[i].name, name)) return true;
    return false;
}

struct jv jinja__method(struct render *r, struct jv obj, const char *name)
{
    if (obj.kind == JV_DICT && (obj.flags & JV_F_NAMESPACE)) return jinja__undef();
    for (size_t i = 0; i < ARRAY_LEN(methods); i++) {
        if (methods[i].kind != obj.kind || strcmp(methods[i].name, name)) continue;
        struct jfunc *fn = jinja__alloc(r, sizeof(*fn));
        memset(fn, 0, sizeof(*fn));
        fn->kind = FN_METHOD;
        fn->id = methods[i].id;
        fn->self = obj;
        struct jv v = {.kind = JV_FUNC};
        v.fn = fn;
        return v;
    }
    return jinja__undef();
}

/* A native copy of a list, so append/pop can change it. */
static struct jlist *mutable_list(struct render *r, struct jv *self)
{
    if (self->flags & JV_F_JSON)
        jinja__fail(r, r->line, "cannot modify a list that came from the input");
    return self->list;
}

static struct jv str_format(struct render *r, struct jv fmt, struct call_args *a)
{
    /* "{}" / "{0}" / "{name}" replacement fields, as str.format for plain fields. */
    struct buf b = {0};
    uint32_t auto_idx = 0;
    for (uint32_t i = 0; i < fmt.n; i++) {
        char c = fmt.s[i];
        if ((c == '{' || c == '}') && i + 1 < fmt.n && fmt.s[i + 1] == c) {
            buf_putc(&b, c);
            i++;
            continue;
        }
        if (c != '{') {
            buf_putc(&b, c);
            continue;
        }
        uint32_t j = i + 1;
        while (j < fmt.n && fmt.s[j] != '}')
            j++;
        if (j >= fmt.n) {
            buf_release(&b);
            jinja__fail(r, r->line, "format: single '{' in format string");
        }
        const struct jv *v = NULL;
        if (j == i + 1) {
            v = auto_idx < a->n_pos ? &a->pos[auto_idx] : NULL;
            auto_idx++;
        } else if (fmt.s[i + 1] >= '0' && fmt.s[i + 1] <= '9') {
            uint32_t k = (uint32_t)strtoul(fmt.s + i + 1, NULL, 10);
            v = k < a->n_pos ? &a->pos[k] : NULL;
        } else {
            for (uint32_t k = 0; k < a->n_kw; k++)
                if (strlen(a->kw_names[k]) == j - i - 1 &&
                    !memcmp(a->kw_names[k], fmt.s + i + 1, j - i - 1))
                    v = &a->kw[k];
        }
        if (!v) {
            buf_release(&b);
            jinja__fail(r, r->line, "format: no value for field '%.*s'", (int)(j - i - 1),
                        fmt.s + i + 1);
        }
        jinja__stringify(r, v, &b);
        i = j;
    }
    return from_buf(r, &b);
}

static struct jv call_method(struct render *r, const struct jfunc *fn, struct call_args *a)
{
    struct jv self = fn->self;
    switch ((enum method_id)fn->id) {
    case M_STRIP:
        return strip(self, arg_str(r, a, 0, "chars"), true, true);
    case M_LSTRIP:
        return strip(self, arg_str(r, a, 0, "chars"), true, false);
    case M_RSTRIP:
        return strip(self, arg_str(r, a, 0, "chars"), false, true);
    case M_SPLIT:
        return str_split(r, self, arg_str(r, a, 0, "sep"), arg_int(r, a, 1, "maxsplit", -1));
    case M_RSPLIT: {
        const struct jv *sep = arg_str(r, a, 0, "sep");
        int64_t maxsplit = arg_int(r, a, 1, "maxsplit", -1);
        if (maxsplit < 0 || !sep) return str_split(r, self, sep, maxsplit);
        if (!sep->n) jinja__fail(r, r->line, "rsplit: empty separator");
        /* Split from the right, then reverse. */
        struct jv parts = jinja__list_new(r, 4);
        const char *end = self.s + self.n;
        while (maxsplit-- > 0) {
            const char *hit = NULL;
            for (const char *p = end - sep->n; p >= self.s; p--)
                if (!memcmp(p, sep->s, sep->n)) {
                    hit = p;
                    break;
                }
            if (!hit) break;
            jinja__list_push(r, &parts, jinja__str(hit + sep->n, (size_t)(end - hit - sep->n)));
            end = hit;
        }
        jinja__list_push(r, &parts, jinja__str(self.s, (size_t)(end - self.s)));
        struct jv out = jinja__list_new(r, parts.list->n);
        for (uint32_t i = parts.list->n; i > 0; i--)
            jinja__list_push(r, &out, parts.list->items[i - 1]);
        return out;
    }
    case M_STARTSWITH:
    case M_ENDSWITH: {
        const struct jv *x = arg(a, 0, "prefix");
        if (!x) jinja__fail(r, r->line, "startswith/endswith: missing argument");
        return jinja__bool(affix_match(r, self, x, fn->id == M_STARTSWITH));
    }
    case M_REPLACE: {
        const struct jv *old = arg_str(r, a, 0, "old"), *new_ = arg_str(r, a, 1, "new");
        if (!old || !new_) jinja__fail(r, r->line, "replace: needs the old and new strings");
        return str_replace(r, self, *old, *new_, arg_int(r, a, 2, "count", -1));
    }
    case M_UPPER:
        return map_case(r, self, CASE_UPPER);
    case M_LOWER:
        return map_case(r, self, CASE_LOWER);
    case M_TITLE:
        return map_case(r, self, CASE_TITLE_PY);
    case M_CAPITALIZE:
        return map_case(r, self, CASE_CAPITALIZE);
    case M_FIND: {
        const struct jv *sub = arg_str(r, a, 0, "sub");
        if (!sub) jinja__fail(r, r->line, "find: missing argument");
        const char *hit = find_sub(self.s, self.n, sub->s, sub->n);
        return jinja__int(hit ? (int64_t)jinja__utf8_count(self.s, (size_t)(hit - self.s)) : -1);
    }
    case M_COUNT: {
        const struct jv *x = arg(a, 0, "x");
        if (!x) jinja__fail(r, r->line, "count: missing argument");
        if (self.kind == JV_STR) return jinja__int(count_sub(self, need_str(r, "count", *x)));
        int64_t c = 0;
        size_t n = jinja__len(r, &self);
        for (size_t i = 0; i < n; i++) {
            struct jv y = jinja__list_get(&self, i);
            c += jinja__equal(&y, x);
        }
        return jinja__int(c);
    }
    case M_JOIN: {
        const struct jv *it = arg(a, 0, "iterable");
        if (!it) jinja__fail(r, r->line, "join: missing argument");
        struct jv *items;
        uint32_t n = jinja__iter(r, it, &items);
        struct buf b = {0};
        for (uint32_t i = 0; i < n; i++) {
            if (items[i].kind != JV_STR) {
                buf_release(&b);
                jinja__fail(r, r->line, "join: item %u is a %s, not a string", i,
                            jinja__type_name(&items[i]));
            }
            if (i) buf_append(&b, self.s, self.n);
            buf_append(&b, items[i].s, items[i].n);
        }
        return from_buf(r, &b);
    }
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISSPACE: {
        if (!self.n) return jinja__bool(false);
        for (uint32_t i = 0; i < self.n; i++) {
            char c = self.s[i];
            bool ok = fn->id == M_ISDIGIT   ? (c >= '0' && c <= '9')
                      : fn->id == M_ISALPHA ? is_alpha(c)
                                            : space_len(self.s, self.n, i) == 1;
            if (!ok) return jinja__bool(false);
        }
        return jinja__bool(true);
    }
    case M_SPLITLINES: {
        struct jv out = jinja__list_new(r, 4);
        const char *p = self.s, *end = self.s + self.n;
        while (p < end) {
            const char *e = p;
            while (e < end && *e != '\n' && *e != '\r')
                e++;
            jinja__list_push(r, &out, jinja__str(p, (size_t)(e - p)));
            if (e < end && *e == '\r' && e + 1 < end && e[1] == '\n') e++;
            p = e + 1;
        }
        return out;
    }
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        const struct jv *x = arg_str(r, a, 0, "prefix");
        if (!x) jinja__fail(r, r->line, "removeprefix/removesuffix: missing argument");
        if (!affix_match(r, self, x, fn->id == M_REMOVEPREFIX)) return self;
        return fn->id == M_REMOVEPREFIX ? jinja__str(self.s + x->n, self.n - x->n)
                                        : jinja__str(self.s, self.n - x->n);
    }
    case M_FORMAT:
        return str_format(r, self, a);
    case M_APPEND: {
        const struct jv *x = arg(a, 0, "item");
        if (!x) jinja__fail(r, r->line, "append: missing argument");
        mutable_list(r, &self);
        jinja__list_push(r, &self, *x);
        return jinja__none();
    }
    case M_EXTEND: {
        const struct jv *x = arg(a, 0, "iterable");
        if (!x) jinja__fail(r, r->line, "extend: missing argument");
        mutable_list(r, &self);
        struct jv *items;
        uint32_t n = jinja__iter(r, x, &items);
        for (uint32_t i = 0; i < n; i++)
            jinja__list_push(r, &self, items[i]);
        return jinja__none();
    }
    case M_INSERT: {
        struct jlist *l = mutable_list(r, &self);
        int64_t at = arg_int(r, a, 0, "index", 0);
        const struct jv *x = arg(a, 1, "item");
        if (!x) jinja__fail(r, r->line, "insert: missing argument");
        if (at < 0) at += l->n;
        if (at < 0) at = 0;
        if (at > (int64_t)l->n) at = l->n;
        jinja__list_push(r, &self, *x);
        memmove(l->items + at + 1, l->items + at, (l->n - 1 - (size_t)at) * sizeof(struct jv));
        l->items[at] = *x;
        return jinja__none();
    }
    case M_POP: {
        if (self.kind == JV_DICT) {
            const struct jv *k = arg_str(r, a, 0, "key");
            if (!k) jinja__fail(r, r->line, "pop: missing key");
            if (self.flags & JV_F_JSON)
                jinja__fail(r, r->line, "cannot modify a dict that came from the input");
            struct jdict *d = self.dict;
            for (uint32_t i = 0; i < d->n; i++) {
                if (d->items[i].key.n == k->n && !memcmp(d->items[i].key.s, k->s, k->n)) {
                    struct jv v = d->items[i].val;
                    memmove(d->items + i, d->items + i + 1, (d->n - i - 1) * sizeof(*d->items));
                    d->n--;
                    return v;
                }
            }
            const struct jv *def = arg(a, 1, "default");
            if (def) return *def;
            jinja__fail(r, r->line, "pop: key not found");
        }
        struct jlist *l = mutable_list(r, &self);
        int64_t at = arg_int(r, a, 0, "index", -1);
        if (at < 0) at += l->n;
        if (at < 0 || at >= (int64_t)l->n) jinja__fail(r, r->line, "pop index out of range");
        struct jv v = l->items[at];
        memmove(l->items + at, l->items + at + 1, (l->n - (size_t)at - 1) * sizeof(struct jv));
        l->n--;
        return v;
    }
    case M_INDEX: {
        const struct jv *x = arg(a, 0, "x");
        if (!x) jinja__fail(r, r->line, "index: missing argument");
        size_t n = jinja__len(r, &self);
        for (size_t i = 0; i < n; i++) {
            struct jv y = jinja__list_get(&self, i);
            if (jinja__equal(&y, x)) return jinja__int((int64_t)i);
        }
        jinja__fail(r, r->line, "index: value is not in the list");
    }
    case M_ITEMS:
        return f_items(r, NULL, self, a);
    case M_KEYS:
        return f_list(r, NULL, self, a);
    case M_VALUES: {
        struct jv *keys;
        uint32_t n = jinja__iter(r, &self, &keys);
        struct jv out = jinja__list_new(r, n);
        for (uint32_t i = 0; i < n; i++) {
            struct jv v;
            jinja__dict_get(&self, keys[i].s, keys[i].n, &v);
            jinja__list_push(r, &out, v);
        }
        return out;
    }
    case M_GET: {
        const struct jv *k = arg(a, 0, "key");
        if (!k) jinja__fail(r, r->line, "get: missing key");
        struct jv v;
        if (k->kind == JV_STR && jinja__dict_get(&self, k->s, k->n, &v)) return v;
        const struct jv *def = arg(a, 1, "default");
        return def ? *def : jinja__none();
    }
    case M_UPDATE: {
        if (self.flags & JV_F_JSON)
            jinja__fail(r, r->line, "cannot modify a dict that came from the input");
        for (uint32_t p = 0; p < a->n_pos; p++) {
            if (a->pos[p].kind != JV_DICT) jinja__fail(r, r->line, "update: expected a mapping");
            struct jv *keys;
            uint32_t n = jinja__iter(r, &a->pos[p], &keys);
            for (uint32_t i = 0; i < n; i++) {
                struct jv v;
                jinja__dict_get(&a->pos[p], keys[i].s, keys[i].n, &v);
                jinja__dict_set(r, &self, keys[i], v);
            }
        }
        for (uint32_t k = 0; k < a->n_kw; k++)
            jinja__dict_set(r, &self, jinja__strz(a->kw_names[k]), a->kw[k]);
        return jinja__none();
    }
    case M_COPY: {
        struct jv *keys;
        uint32_t n = jinja__iter(r, &self, &keys);
        struct jv out = jinja__dict_new(r, n);
        for (uint32_t i = 0; i < n; i++) {
            struct jv v;
            jinja__dict_get(&self, keys[i].s, keys[i].n, &v);
            jinja__dict_set(r, &out, keys[i], v);
        }
        return out;
    }
    }
    CHECK(!"unknown method");
    return jinja__undef();
}

/* ---- global functions ---- */

enum global_id {
    G_RANGE,
    G_NAMESPACE,
    G_DICT,
    G_RAISE,
    G_STRFTIME,
};

static const struct jfunc globals[] = {
    [G_RANGE] = {.kind = FN_GLOBAL, .id = G_RANGE},
    [G_NAMESPACE] = {.kind = FN_GLOBAL, .id = G_NAMESPACE},
    [G_DICT] = {.kind = FN_GLOBAL, .id = G_DICT},
    [G_RAISE] = {.kind = FN_GLOBAL, .id = G_RAISE},
    [G_STRFTIME] = {.kind = FN_GLOBAL, .id = G_STRFTIME},
};

static const struct {
    const char *name; /* global name */
    int id;           /* enum global_id */
} global_names[] = {
    {"range", G_RANGE},           {"namespace", G_NAMESPACE},   {"dict", G_DICT},
    {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME},
};

int jinja__global_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(global_names); i++)
        if (!strcmp(global_names[i].name, name)) return global_names[i].id;
    return -1;
}

struct jv jinja__global_get(int id)
{
    CHECK(id >= 0 && (size_t)id < ARRAY_LEN(globals));
    struct jv v = {.kind = JV_FUNC};
    v.fn = &globals[id];
    return v;
}

static struct jv g_range(struct render *r, struct call_args *a)
{
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = arg_int(r, a, 0, "stop", 0);
    } else if (a->n_pos == 2 || a->n_pos == 3) {
        start = arg_int(r, a, 0, "start", 0);
        stop = arg_int(r, a, 1, "stop", 0);
        step = arg_int(r, a, 2, "step", 1);
    } else {
        jinja__fail(r, r->line, "range expects 1 to 3 arguments, got %u", a->n_pos);
    }
    if (step == 0) jinja__fail(r, r->line, "range() step must not be zero");
    struct jv out = jinja__list_new(r, 0);
    uint64_t count = 0;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (++count > JINJA_MAX_ITER)
            jinja__fail(r, r->line, "range() longer than %d items", JINJA_MAX_ITER);
        jinja__list_push(r, &out, jinja__int(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return out;
}

static struct jv g_namespace(struct render *r, struct call_args *a, bool ns)
{
    struct jv d = jinja__dict_new(r, a->n_kw + 4);
    if (ns) d.flags |= JV_F_NAMESPACE;
    for (uint32_t p = 0; p < a->n_pos; p++) {
        if (a->pos[p].kind != JV_DICT)
            jinja__fail(r, r->line, "%s() expects a mapping, got '%s'", ns ? "namespace" : "dict",
                        jinja__type_name(&a->pos[p]));
        struct jv *keys;
        uint32_t n = jinja__iter(r, &a->pos[p], &keys);
        for (uint32_t i = 0; i < n; i++) {
            struct jv v;
            jinja__dict_get(&a->pos[p], keys[i].s, keys[i].n, &v);
            jinja__dict_set(r, &d, keys[i], v);
        }
    }
    for (uint32_t k = 0; k < a->n_kw; k++)
        jinja__dict_set(r, &d, jinja__strz(a->kw_names[k]), a->kw[k]);
    return d;
}

static struct jv g_strftime(struct render *r, struct call_args *a)
{
    const struct jv *fmt = arg_str(r, a, 0, "format");
    if (!fmt) jinja__fail(r, r->line, "strftime_now expects a format string");
    time_t now = time(NULL);
    const char *fixed = getenv("INFERD_TEMPLATE_NOW");
    if (fixed && *fixed) now = (time_t)strtoll(fixed, NULL, 10);
    struct tm tm;
    gmtime_r(&now, &tm);
    char f[256], out[512];
    if (fmt->n >= sizeof(f)) jinja__fail(r, r->line, "strftime_now: format too long");
    memcpy(f, fmt->s, fmt->n);
    f[fmt->n] = 0;
    size_t len = strftime(out, sizeof(out), f, &tm);
    return jinja__str_copy(r, out, len);
}

struct jv jinja__call_builtin(struct render *r, const struct node *n, const struct jfunc *fn,
                              struct call_args *a)
{
    (void)n;
    if (fn->kind == FN_METHOD) return call_method(r, fn, a);
    switch ((enum global_id)fn->id) {
    case G_RANGE:
        return g_range(r, a);
    case G_NAMESPACE:
        return g_namespace(r, a, true);
    case G_DICT:
        return g_namespace(r, a, false);
    case G_RAISE: {
        const struct jv *m = arg(a, 0, "message");
        struct jv s = m ? jinja__to_str(r, m) : jinja__strz("raise_exception called");
        jinja__raise(r, s.s, s.n);
    }
    case G_STRFTIME:
        return g_strftime(r, a);
    }
    CHECK(!"unknown global");
    return jinja__undef();
}
