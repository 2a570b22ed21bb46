/*
 * value.c - the render arena and the value type's operations: reading the
 * caller's JSON in place, truthiness, length, equality and ordering (Python
 * rules: 1 == 1.0 == True, lists and dicts compare by content), str()
 * (Python's: True, None, ['a', 1], {'k': 'v'}; floats as repr), and tojson
 * exactly as Python's json.dumps(ensure_ascii=False) writes it (", " and
 * ": " separators; with indent, "," and newlines), which is what transformers
 * registers as the tojson filter.
 *
 * Strings are UTF-8 byte slices; lengths and indices the template sees count
 * code points, as Python does.
 */
#include "model/jinja/jinja_impl.h"

#include "base/check.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ---- */

struct jinja_arena_chunk {
    struct jinja_arena_chunk *next; /* older chunk */
    size_t size;                    /* bytes in data */
    char data[];                    /* the memory handed out */
};

#define ARENA_CHUNK (64u << 10)

void *jinja__arena_alloc(struct jinja_arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if ((size_t)(a->end - a->ptr) < n || !a->ptr) {
        size_t size = n > ARENA_CHUNK / 4 ? n : ARENA_CHUNK;
        if (a->limit && a->total + size > a->limit) return NULL;
        struct jinja_arena_chunk *c = xmalloc(sizeof(*c) + size);
        c->size = size;
        a->total += size;
        if (size != ARENA_CHUNK && a->head) {
            /* A big block gets its own chunk behind the current one, so the
             * current chunk's free space stays usable. */
            c->next = a->head->next;
            a->head->next = c;
            return c->data;
        }
        c->next = a->head;
        a->head = c;
        a->ptr = c->data;
        a->end = c->data + size;
    }
    void *p = a->ptr;
    a->ptr += n;
    return p;
}

void jinja__arena_release(struct jinja_arena *a)
{
    struct jinja_arena_chunk *c = a->head;
    while (c) {
        struct jinja_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->ptr = a->end = NULL;
    a->total = 0;
}

/* ---- constructors ---- */

struct jv jinja__str(const char *s, size_t n)
{
    struct jv v = {.kind = JV_STR, .n = (uint32_t)n};
    v.s = s;
    return v;
}

struct jv jinja__strz(const char *s)
{
    return jinja__str(s, strlen(s));
}

struct jv jinja__str_copy(struct render *r, const char *s, size_t n)
{
    if (n > JINJA_MAX_OUTPUT)
        jinja__fail(r, r->line, "string longer than %u bytes", JINJA_MAX_OUTPUT);
    char *c = jinja__alloc(r, n + 1);
    if (n) memcpy(c, s, n);
    c[n] = 0;
    return jinja__str(c, n);
}

struct jv jinja__int(int64_t i)
{
    struct jv v = {.kind = JV_INT};
    v.i = i;
    return v;
}

struct jv jinja__float(double f)
{
    struct jv v = {.kind = JV_FLOAT};
    v.f = f;
    return v;
}

struct jv jinja__bool(bool b)
{
    struct jv v = {.kind = JV_BOOL};
    v.b = b;
    return v;
}

struct jv jinja__none(void)
{
    return (struct jv){.kind = JV_NONE};
}

struct jv jinja__undef(void)
{
    return (struct jv){.kind = JV_UNDEF};
}

struct jv jinja__list_new(struct render *r, uint32_t cap)
{
    struct jlist *l = jinja__alloc(r, sizeof(*l));
    l->n = 0;
    l->cap = cap;
    l->items = cap ? jinja__alloc(r, cap * sizeof(struct jv)) : NULL;
    struct jv v = {.kind = JV_LIST};
    v.list = l;
    return v;
}

void jinja__list_push(struct render *r, struct jv *list, struct jv item)
{
    CHECK(list->kind == JV_LIST && !(list->flags & JV_F_JSON));
    struct jlist *l = list->list;
    if (l->n == l->cap) {
        if (l->cap >= JINJA_MAX_ITER)
            jinja__fail(r, r->line, "list longer than %d items", JINJA_MAX_ITER);
        uint32_t cap = l->cap ? l->cap * 2 : 4;
        struct jv *items = jinja__alloc(r, cap * sizeof(*items));
        if (l->n) memcpy(items, l->items, l->n * sizeof(*items));
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = item;
}

struct jv jinja__dict_new(struct render *r, uint32_t cap)
{
    struct jdict *d = jinja__alloc(r, sizeof(*d));
    d->n = 0;
    d->cap = cap;
    d->items = cap ? jinja__alloc(r, cap * sizeof(struct jdict_entry)) : NULL;
    struct jv v = {.kind = JV_DICT};
    v.dict = d;
    return v;
}

void jinja__dict_set(struct render *r, struct jv *dict, struct jv key, struct jv val)
{
    CHECK(dict->kind == JV_DICT && !(dict->flags & JV_F_JSON) && key.kind == JV_STR);
    struct jdict *d = dict->dict;
    for (uint32_t i = 0; i < d->n; i++) {
        if (d->items[i].key.n == key.n && !memcmp(d->items[i].key.s, key.s, key.n)) {
            d->items[i].val = val;
            return;
        }
    }
    if (d->n == d->cap) {
        if (d->cap >= JINJA_MAX_ITER)
            jinja__fail(r, r->line, "dict larger than %d items", JINJA_MAX_ITER);
        uint32_t cap = d->cap ? d->cap * 2 : 4;
        struct jdict_entry *items = jinja__alloc(r, cap * sizeof(*items));
        if (d->n) memcpy(items, d->items, d->n * sizeof(*items));
        d->items = items;
        d->cap = cap;
    }
    d->items[d->n].key = key;
    d->items[d->n++].val = val;
}

struct jv jinja__from_json(const json_t *j)
{
    struct jv v = {0};
    if (!j) return jinja__undef();
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        v.kind = JV_DICT;
        v.flags = JV_F_JSON;
        v.json = (json_t *)j;
        return v;
    case JSON_ARRAY:
        v.kind = JV_LIST;
        v.flags = JV_F_JSON;
        v.json = (json_t *)j;
        return v;
    case JSON_STRING:
        return jinja__str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jinja__int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return jinja__float(json_real_value(j));
    case JSON_TRUE:
        return jinja__bool(true);
    case JSON_FALSE:
        return jinja__bool(false);
    case JSON_NULL:
        return jinja__none();
    }
    return jinja__undef();
}

/* ---- inspection ---- */

size_t jinja__utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

bool jinja__truthy(const struct jv *v)
{
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v->b;
    case JV_INT:
        return v->i != 0;
    case JV_FLOAT:
        return v->f != 0;
    case JV_STR:
        return v->n > 0;
    case JV_LIST:
        return (v->flags & JV_F_JSON) ? json_array_size(v->json) > 0 : v->list->n > 0;
    case JV_DICT:
        return (v->flags & JV_F_JSON) ? json_object_size(v->json) > 0 : v->dict->n > 0;
    default:
        return true;
    }
}

const char *jinja__type_name(const struct jv *v)
{
    switch (v->kind) {
    case JV_UNDEF:
        return "undefined";
    case JV_NONE:
        return "none";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "string";
    case JV_LIST:
        return "list";
    case JV_DICT:
        return (v->flags & JV_F_NAMESPACE) ? "namespace" : "dict";
    case JV_FUNC:
        return "function";
    case JV_LOOP:
        return "loop";
    }
    return "?";
}

uint32_t jinja__dict_len(const struct jv *d)
{
    return (d->flags & JV_F_JSON) ? (uint32_t)json_object_size(d->json) : d->dict->n;
}

static uint32_t list_len(const struct jv *v)
{
    return (v->flags & JV_F_JSON) ? (uint32_t)json_array_size(v->json) : v->list->n;
}

size_t jinja__len(struct render *r, const struct jv *v)
{
    switch (v->kind) {
    case JV_STR:
        return jinja__utf8_count(v->s, v->n);
    case JV_LIST:
        return list_len(v);
    case JV_DICT:
        return jinja__dict_len(v);
    default:
        jinja__fail(r, r->line, "object of type '%s' has no length", jinja__type_name(v));
    }
}

struct jv jinja__list_get(const struct jv *v, size_t i)
{
    if (v->flags & JV_F_JSON) return jinja__from_json(json_array_get(v->json, i));
    return i < v->list->n ? v->list->items[i] : jinja__undef();
}

bool jinja__dict_get(const struct jv *d, const char *key, size_t n, struct jv *out)
{
    if (d->flags & JV_F_JSON) {
        json_t *j = json_object_getn(d->json, key, n);
        if (!j) return false;
        *out = jinja__from_json(j);
        return true;
    }
    const struct jdict *dd = d->dict;
    for (uint32_t i = 0; i < dd->n; i++) {
        if (dd->items[i].key.n == n && !memcmp(dd->items[i].key.s, key, n)) {
            *out = dd->items[i].val;
            return true;
        }
    }
    return false;
}

/* Keys and values of a dict in insertion order (arrays in the arena). */
static uint32_t dict_items(struct render *r, const struct jv *d, struct jv **keys, struct jv **vals)
{
    uint32_t n = jinja__dict_len(d);
    *keys = jinja__alloc(r, (n ? n : 1) * sizeof(struct jv));
    if (vals) *vals = jinja__alloc(r, (n ? n : 1) * sizeof(struct jv));
    if (d->flags & JV_F_JSON) {
        const char *k;
        size_t klen;
        json_t *val;
        uint32_t i = 0;
        void *tmp;
        json_object_keylen_foreach_safe(d->json, tmp, k, klen, val)
        {
            (*keys)[i] = jinja__str(k, klen);
            if (vals) (*vals)[i] = jinja__from_json(val);
            i++;
        }
        return i;
    }
    for (uint32_t i = 0; i < n; i++) {
        (*keys)[i] = d->dict->items[i].key;
        if (vals) (*vals)[i] = d->dict->items[i].val;
    }
    return n;
}

void jinja__dict_entry(struct render *r, const struct jv *d, uint32_t i, struct jv *key,
                       struct jv *val)
{
    struct jv *keys, *vals;
    uint32_t n = dict_items(r, d, &keys, &vals);
    CHECK(i < n);
    *key = keys[i];
    *val = vals[i];
}

uint32_t jinja__iter(struct render *r, const struct jv *v, struct jv **items)
{
    switch (v->kind) {
    case JV_LIST: {
        uint32_t n = list_len(v);
        struct jv *a = jinja__alloc(r, (n ? n : 1) * sizeof(*a));
        if (v->flags & JV_F_JSON) {
            for (uint32_t i = 0; i < n; i++)
                a[i] = jinja__from_json(json_array_get(v->json, i));
        } else if (n) {
            memcpy(a, v->list->items, n * sizeof(*a));
        }
        *items = a;
        return n;
    }
    case JV_DICT:
        return dict_items(r, v, items, NULL);
    case JV_STR: {
        size_t n = jinja__utf8_count(v->s, v->n);
        struct jv *a = jinja__alloc(r, (n ? n : 1) * sizeof(*a));
        size_t k = 0;
        for (size_t i = 0; i < v->n;) {
            size_t j = i + 1;
            while (j < v->n && ((unsigned char)v->s[j] & 0xc0) == 0x80)
                j++;
            a[k++] = jinja__str(v->s + i, j - i);
            i = j;
        }
        *items = a;
        return (uint32_t)n;
    }
    default:
        jinja__fail(r, r->line, "'%s' object is not iterable", jinja__type_name(v));
    }
}

/* ---- equality and order ---- */

static bool is_num(const struct jv *v)
{
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}

static double num_val(const struct jv *v)
{
    return v->kind == JV_INT ? (double)v->i : v->kind == JV_FLOAT ? v->f : (double)v->b;
}

/* Containers nested deeper than this compare unequal (a list that holds
 * itself would otherwise recurse forever). */
#define EQUAL_MAX_DEPTH 256

static bool equal(const struct jv *a, const struct jv *b, int depth);

bool jinja__equal(const struct jv *a, const struct jv *b)
{
    return equal(a, b, 0);
}

static bool equal(const struct jv *a, const struct jv *b, int depth)
{
    if (depth > EQUAL_MAX_DEPTH) return false;
    if (is_num(a) && is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) {
            int64_t x = a->kind == JV_INT ? a->i : a->b, y = b->kind == JV_INT ? b->i : b->b;
            return x == y;
        }
        return num_val(a) == num_val(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a->n == b->n && !memcmp(a->s, b->s, a->n);
    case JV_LIST: {
        uint32_t n = list_len(a);
        if (n != list_len(b)) return false;
        if ((a->flags & JV_F_JSON) && (b->flags & JV_F_JSON) && a->json == b->json) return true;
        for (uint32_t i = 0; i < n; i++) {
            struct jv x = jinja__list_get(a, i), y = jinja__list_get(b, i);
            if (!equal(&x, &y, depth + 1)) return false;
        }
        return true;
    }
    case JV_DICT: {
        if ((a->flags & JV_F_JSON) && (b->flags & JV_F_JSON)) {
            if (a->json == b->json) return true;
            return json_equal(a->json, b->json);
        }
        if ((a->flags & JV_F_NAMESPACE) || (b->flags & JV_F_NAMESPACE)) return a->dict == b->dict;
        uint32_t n = jinja__dict_len(a);
        if (n != jinja__dict_len(b)) return false;
        /* Native dicts are small; walk a's entries and look each up in b. */
        if (!(a->flags & JV_F_JSON)) {
            for (uint32_t i = 0; i < n; i++) {
                struct jv y;
                const struct jdict_entry *e = &a->dict->items[i];
                if (!jinja__dict_get(b, e->key.s, e->key.n, &y) || !equal(&e->val, &y, depth + 1))
                    return false;
            }
            return true;
        }
        for (uint32_t i = 0; i < n; i++) {
            struct jv y;
            const struct jdict_entry *e = &b->dict->items[i];
            if (!jinja__dict_get(a, e->key.s, e->key.n, &y) || !equal(&e->val, &y, depth + 1))
                return false;
        }
        return true;
    }
    case JV_FUNC:
        return a->fn == b->fn;
    case JV_LOOP:
        return a->loop == b->loop;
    default:
        return false;
    }
}

static int ascii_lower(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

static int compare(struct render *r, const struct jv *a, const struct jv *b, bool case_sensitive,
                   int depth);

int jinja__compare(struct render *r, const struct jv *a, const struct jv *b, bool case_sensitive)
{
    return compare(r, a, b, case_sensitive, 0);
}

static int compare(struct render *r, const struct jv *a, const struct jv *b, bool case_sensitive,
                   int depth)
{
    if (depth > EQUAL_MAX_DEPTH) jinja__fail(r, r->line, "values nested too deeply to compare");
    if (is_num(a) && is_num(b)) {
        if (a->kind == JV_INT && b->kind == JV_INT) return (a->i > b->i) - (a->i < b->i);
        double x = num_val(a), y = num_val(b);
        return (x > y) - (x < y);
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t n = MIN(a->n, b->n);
        for (size_t i = 0; i < n; i++) {
            int x = (unsigned char)a->s[i], y = (unsigned char)b->s[i];
            if (!case_sensitive) x = ascii_lower(x), y = ascii_lower(y);
            if (x != y) return x < y ? -1 : 1;
        }
        return (a->n > b->n) - (a->n < b->n);
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST) {
        uint32_t na = list_len(a), nb = list_len(b);
        for (uint32_t i = 0; i < na && i < nb; i++) {
            struct jv x = jinja__list_get(a, i), y = jinja__list_get(b, i);
            int c = compare(r, &x, &y, case_sensitive, depth + 1);
            if (c) return c;
        }
        return (na > nb) - (na < nb);
    }
    jinja__fail(r, r->line, "cannot compare '%s' with '%s'", jinja__type_name(a),
                jinja__type_name(b));
}

/* ---- str() ---- */

void jinja__float_repr(double f, struct buf *out)
{
    if (isnan(f)) {
        buf_puts(out, "nan");
        return;
    }
    if (isinf(f)) {
        buf_puts(out, f < 0 ? "-inf" : "inf");
        return;
    }
    /* Shortest digits that read back as f, then Python's layout: fixed
     * for 1e-4 <= |f| < 1e16 (always with a '.'), else d.ddde+XX. */
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    char digits[24];
    int nd = 0, exp10;
    const char *p = tmp;
    bool neg = false;
    if (*p == '-') neg = true, p++;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    if (neg) buf_putc(out, '-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            buf_puts(out, "0.");
            for (int i = 0; i < -exp10 - 1; i++)
                buf_putc(out, '0');
            buf_append(out, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp10; i++)
                buf_putc(out, i < nd ? digits[i] : '0');
            buf_putc(out, '.');
            if (nd > exp10 + 1)
                buf_append(out, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else
                buf_putc(out, '0');
        }
    } else {
        buf_putc(out, digits[0]);
        if (nd > 1) {
            buf_putc(out, '.');
            buf_append(out, digits + 1, (size_t)(nd - 1));
        }
        buf_printf(out, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    }
}

/* Python repr() of a string. */
static void str_repr(const char *s, size_t n, struct buf *out)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    buf_putc(out, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == (unsigned char)q || c == '\\') {
            buf_putc(out, '\\');
            buf_putc(out, (char)c);
        } else if (c == '\n') {
            buf_puts(out, "\\n");
        } else if (c == '\r') {
            buf_puts(out, "\\r");
        } else if (c == '\t') {
            buf_puts(out, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            buf_printf(out, "\\x%02x", c);
        } else {
            buf_putc(out, (char)c);
        }
    }
    buf_putc(out, q);
}

static void repr(struct render *r, const struct jv *v, struct buf *out, int depth);

static void repr_items(struct render *r, const struct jv *v, struct buf *out, int depth)
{
    if (depth > JINJA_MAX_DEPTH) jinja__fail(r, r->line, "value nested too deeply to print");
    if (v->kind == JV_LIST) {
        buf_putc(out, '[');
        uint32_t n = list_len(v);
        for (uint32_t i = 0; i < n; i++) {
            if (i) buf_puts(out, ", ");
            struct jv x = jinja__list_get(v, i);
            repr(r, &x, out, depth + 1);
        }
        buf_putc(out, ']');
        return;
    }
    struct jv *keys, *vals;
    uint32_t n = dict_items(r, v, &keys, &vals);
    if (v->flags & JV_F_NAMESPACE) buf_puts(out, "<Namespace ");
    buf_putc(out, '{');
    for (uint32_t i = 0; i < n; i++) {
        if (i) buf_puts(out, ", ");
        str_repr(keys[i].s, keys[i].n, out);
        buf_puts(out, ": ");
        repr(r, &vals[i], out, depth + 1);
    }
    buf_putc(out, '}');
    if (v->flags & JV_F_NAMESPACE) buf_putc(out, '>');
}

static void repr(struct render *r, const struct jv *v, struct buf *out, int depth)
{
    if (v->kind == JV_STR)
        str_repr(v->s, v->n, out);
    else if (v->kind == JV_LIST || v->kind == JV_DICT)
        repr_items(r, v, out, depth);
    else
        jinja__stringify(r, v, out);
}

void jinja__stringify(struct render *r, const struct jv *v, struct buf *out)
{
    switch (v->kind) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        buf_puts(out, "None");
        return;
    case JV_BOOL:
        buf_puts(out, v->b ? "True" : "False");
        return;
    case JV_INT:
        buf_printf(out, "%" PRId64, v->i);
        return;
    case JV_FLOAT:
        jinja__float_repr(v->f, out);
        return;
    case JV_STR:
        buf_append(out, v->s, v->n);
        return;
    case JV_LIST:
    case JV_DICT:
        repr_items(r, v, out, 0);
        return;
    case JV_FUNC:
        buf_puts(out, "<function>");
        return;
    case JV_LOOP:
        buf_puts(out, "<LoopContext>");
        return;
    }
}

struct jv jinja__to_str(struct render *r, const struct jv *v)
{
    if (v->kind == JV_STR) return *v;
    if (v->kind == JV_UNDEF) return jinja__str("", 0);
    struct buf b = {0};
    jinja__stringify(r, v, &b);
    struct jv s = jinja__str_copy(r, b.data ? b.data : "", b.len);
    buf_release(&b);
    return s;
}

/* ---- tojson ---- */

static void json_str(const char *s, size_t n, bool ascii, struct buf *out)
{
    buf_putc(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            esc = tmp;
        } else if (c >= 0x80 && ascii) {
            /* Decode one code point; invalid bytes become U+FFFD. */
            uint32_t cp = 0xfffd;
            size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            if (len > 1 && i + len <= n) {
                cp = c & (0x3f >> (len - 1));
                for (size_t k = 1; k < len; k++)
                    cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
            } else {
                len = 1;
            }
            buf_append(out, s + i - run, run);
            run = 0;
            if (cp >= 0x10000) {
                cp -= 0x10000;
                buf_printf(out, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                buf_printf(out, "\\u%04x", cp);
            }
            i += len - 1;
            continue;
        }
        if (esc) {
            buf_append(out, s + i - run, run);
            run = 0;
            buf_puts(out, esc);
        } else {
            run++;
        }
    }
    buf_append(out, s + n - run, run);
    buf_putc(out, '"');
}

static void newline_indent(struct buf *out, int indent, int depth)
{
    buf_putc(out, '\n');
    for (int i = 0; i < indent * depth; i++)
        buf_putc(out, ' ');
}

static int key_cmp(const void *a, const void *b)
{
    const struct jv *x = a, *y = b;
    size_t n = MIN(x->n, y->n);
    int c = memcmp(x->s, y->s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

void jinja__tojson(struct render *r, const struct jv *v, const struct tojson_opts *o,
                   struct buf *out, int depth)
{
    if (depth > JINJA_MAX_DEPTH) jinja__fail(r, r->line, "value nested too deeply for tojson");
    if (out->len > JINJA_MAX_OUTPUT)
        jinja__fail(r, r->line, "tojson output larger than %u bytes", JINJA_MAX_OUTPUT);
    const char *item_sep = o->item_sep ? o->item_sep : o->indent >= 0 ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE:
        buf_puts(out, "null");
        return;
    case JV_BOOL:
        buf_puts(out, v->b ? "true" : "false");
        return;
    case JV_INT:
        buf_printf(out, "%" PRId64, v->i);
        return;
    case JV_FLOAT:
        if (isnan(v->f))
            buf_puts(out, "NaN");
        else if (isinf(v->f))
            buf_puts(out, v->f < 0 ? "-Infinity" : "Infinity");
        else
            jinja__float_repr(v->f, out);
        return;
    case JV_STR:
        json_str(v->s, v->n, o->ensure_ascii, out);
        return;
    case JV_LIST: {
        uint32_t n = list_len(v);
        if (!n) {
            buf_puts(out, "[]");
            return;
        }
        buf_putc(out, '[');
        for (uint32_t i = 0; i < n; i++) {
            if (i) buf_puts(out, item_sep);
            if (o->indent >= 0) newline_indent(out, o->indent, depth + 1);
            struct jv x = jinja__list_get(v, i);
            jinja__tojson(r, &x, o, out, depth + 1);
        }
        if (o->indent >= 0) newline_indent(out, o->indent, depth);
        buf_putc(out, ']');
        return;
    }
    case JV_DICT: {
        struct jv *keys, *vals;
        uint32_t n = dict_items(r, v, &keys, &vals);
        if (!n) {
            buf_puts(out, "{}");
            return;
        }
        uint32_t *order = jinja__alloc(r, n * sizeof(*order));
        for (uint32_t i = 0; i < n; i++)
            order[i] = i;
        if (o->sort_keys) {
            /* Sort (key, index) pairs: keys are unique, so the order is total. */
            struct jv *sorted = jinja__alloc(r, n * sizeof(*sorted));
            memcpy(sorted, keys, n * sizeof(*sorted));
            qsort(sorted, n, sizeof(*sorted), key_cmp);
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t k = 0; k < n; k++)
                    if (keys[k].s == sorted[i].s && keys[k].n == sorted[i].n) order[i] = k;
        }
        buf_putc(out, '{');
        for (uint32_t i = 0; i < n; i++) {
            if (i) buf_puts(out, item_sep);
            if (o->indent >= 0) newline_indent(out, o->indent, depth + 1);
            json_str(keys[order[i]].s, keys[order[i]].n, o->ensure_ascii, out);
            buf_puts(out, key_sep);
            jinja__tojson(r, &vals[order[i]], o, out, depth + 1);
        }
        if (o->indent >= 0) newline_indent(out, o->indent, depth);
        buf_putc(out, '}');
        return;
    }
    default:
        jinja__fail(r, r->line, "object of type '%s' is not JSON serializable",
                    jinja__type_name(v));
    }
}
