/*
 * eval.c - renders a parsed template: statements write to the current
 * output buffer, expressions return values. jinja_render is here.
 *
 * Scopes are one stack of (name, value) bindings with a frame index: a for
 * loop, a macro call and a call block push a frame; `set` writes into the
 * innermost frame; lookup walks the stack from the top, then the caller's
 * context object, then the global functions. Like @huggingface/jinja, a
 * macro body sees its call site's variables (the templates in use only read
 * globals and their own arguments, where lexical and dynamic scope agree).
 *
 * Captures ({% set x %}...{% endset %}, macro bodies, filter blocks) swap
 * the output buffer for one of a stack of reusable buffers.
 *
 * Errors: jinja__fail formats "template line N: ..." and longjmps to
 * jinja_render, which releases the arena and the capture buffers; nothing a
 * render allocates lives anywhere else. Limits (jinja_impl.h): output bytes,
 * loop iterations, macro recursion, arena bytes.
 */
#include "model/jinja/jinja.h"
#include "model/jinja/jinja_impl.h"

#include "base/check.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum flow {
    FLOW_NORMAL,
    FLOW_BREAK,
    FLOW_CONTINUE,
};

void jinja__fail(struct render *r, uint32_t line, const char *fmt, ...)
{
    char text[440];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    err_set(r->msg, ERR_INVALID, "template line %u: %s", line, text);
    longjmp(r->fail, 1);
}

void jinja__raise(struct render *r, const char *text, size_t len)
{
    if (len > 400) len = 400;
    err_set(r->msg, ERR_INVALID, "%.*s", (int)len, text);
    longjmp(r->fail, 1);
}

void *jinja__alloc(struct render *r, size_t n)
{
    void *p = jinja__arena_alloc(&r->arena, n);
    if (!p) jinja__fail(r, r->line, "render uses more than %u bytes of memory", JINJA_MAX_ARENA);
    return p;
}

/* ---- bindings ---- */

static void bind(struct render *r, const char *name, struct jv v)
{
    for (uint32_t i = r->n_vars; i > r->frame; i--) {
        if (r->vars[i - 1].name == name) {
            r->vars[i - 1].v = v;
            return;
        }
    }
    if (r->n_vars == r->cap_vars) {
        if (r->cap_vars >= 1u << 20) jinja__fail(r, r->line, "too many variables");
        r->cap_vars = r->cap_vars ? r->cap_vars * 2 : 64;
        r->vars = xrealloc(r->vars, r->cap_vars * sizeof(*r->vars));
    }
    r->vars[r->n_vars].name = name;
    r->vars[r->n_vars++].v = v;
}

/* n: E_NAME (its builtin field holds the global function id + 1). */
static struct jv lookup(struct render *r, const struct node *n)
{
    const char *name = n->name;
    for (uint32_t i = r->n_vars; i > 0; i--)
        if (r->vars[i - 1].name == name) return r->vars[i - 1].v;
    if (r->ctx) {
        json_t *j = json_object_get(r->ctx, name);
        if (j) return jinja__from_json(j);
    }
    if (n->builtin) return jinja__global_get(n->builtin - 1);
    return jinja__undef();
}

struct scope {
    uint32_t n_vars; /* bindings before the frame */
    uint32_t frame;  /* the enclosing frame */
};

static struct scope push_frame(struct render *r)
{
    struct scope s = {r->n_vars, r->frame};
    r->frame = r->n_vars;
    return s;
}

static void pop_frame(struct render *r, struct scope s)
{
    r->n_vars = s.n_vars;
    r->frame = s.frame;
}

/* ---- output ---- */

static void emit(struct render *r, const char *s, size_t n)
{
    if (r->out->len + n > JINJA_MAX_OUTPUT)
        jinja__fail(r, r->line, "output larger than %u bytes", JINJA_MAX_OUTPUT);
    buf_append(r->out, s, n);
}

static struct buf *capture_begin(struct render *r)
{
    if (r->capture_depth == r->n_captures) {
        r->captures = xrealloc(r->captures, (r->n_captures + 1) * sizeof(*r->captures));
        r->captures[r->n_captures] = xcalloc(1, sizeof(struct buf));
        r->n_captures++;
    }
    struct buf *saved = r->out;
    r->out = r->captures[r->capture_depth++];
    buf_clear(r->out);
    return saved;
}

static struct jv capture_end(struct render *r, struct buf *saved)
{
    struct buf *b = r->out;
    struct jv s = jinja__str_copy(r, b->data ? b->data : "", b->len);
    r->capture_depth--;
    r->out = saved;
    return s;
}

/* ---- expressions ---- */

static struct jv eval(struct render *r, const struct node *n);
static enum flow exec_body(struct render *r, struct node *const *body, uint32_t n_body);

_Noreturn static void fail_undefined(struct render *r, const struct node *n)
{
    if (n->kind == E_NAME) jinja__fail(r, n->line, "'%s' is undefined", n->name);
    if (n->kind == E_ATTR) jinja__fail(r, n->line, "'%s' is undefined", n->name);
    jinja__fail(r, n->line, "value is undefined");
}

enum loop_field {
    LOOP_INDEX,
    LOOP_INDEX0,
    LOOP_FIRST,
    LOOP_LAST,
    LOOP_LENGTH,
    LOOP_REVINDEX,
    LOOP_REVINDEX0,
    LOOP_PREVITEM,
    LOOP_NEXTITEM,
    LOOP_DEPTH,
    LOOP_DEPTH0,
};

static const char *const loop_fields[] = {
    [LOOP_INDEX] = "index",         [LOOP_INDEX0] = "index0",     [LOOP_FIRST] = "first",
    [LOOP_LAST] = "last",           [LOOP_LENGTH] = "length",     [LOOP_REVINDEX] = "revindex",
    [LOOP_REVINDEX0] = "revindex0", [LOOP_PREVITEM] = "previtem", [LOOP_NEXTITEM] = "nextitem",
    [LOOP_DEPTH] = "depth",         [LOOP_DEPTH0] = "depth0",
};

int jinja__loop_field(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(loop_fields); i++)
        if (!strcmp(loop_fields[i], name)) return (int)i;
    return -1;
}

static struct jv loop_attr(const struct jloop *l, int field)
{
    switch ((enum loop_field)field) {
    case LOOP_INDEX:
        return jinja__int(l->index0 + 1);
    case LOOP_INDEX0:
        return jinja__int(l->index0);
    case LOOP_FIRST:
        return jinja__bool(l->index0 == 0);
    case LOOP_LAST:
        return jinja__bool(l->index0 == l->length - 1);
    case LOOP_LENGTH:
        return jinja__int(l->length);
    case LOOP_REVINDEX:
        return jinja__int(l->length - l->index0);
    case LOOP_REVINDEX0:
        return jinja__int(l->length - l->index0 - 1);
    case LOOP_PREVITEM:
        return l->index0 > 0 ? l->all[l->index0 - 1] : jinja__undef();
    case LOOP_NEXTITEM:
        return l->index0 + 1 < l->length ? l->all[l->index0 + 1] : jinja__undef();
    case LOOP_DEPTH:
        return jinja__int(1);
    case LOOP_DEPTH0:
        return jinja__int(0);
    }
    return jinja__undef();
}

/* obj.name (at: the E_ATTR node, with the name's loop field and whether it
 * names a method, resolved at parse time): a dict member, a loop field, or
 * a method of the type. */
static struct jv get_attr(struct render *r, const struct node *at, struct jv obj)
{
    if (obj.kind == JV_UNDEF) fail_undefined(r, at->a);
    if (obj.kind == JV_DICT) {
        struct jv v;
        if (jinja__dict_get(&obj, at->name, strlen(at->name), &v)) return v;
    }
    if (obj.kind == JV_LOOP)
        return at->builtin ? loop_attr(obj.loop, at->builtin - 1) : jinja__undef();
    if (!at->op) return jinja__undef();
    return jinja__method(r, obj, at->name);
}

/* Python index normalisation; false when out of range. */
static bool norm_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

/* Byte offset of code point k in s (k <= count). */
static size_t cp_offset(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    while (k && i < n) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xc0) == 0x80)
            i++;
        k--;
    }
    return i;
}

static struct jv get_item(struct render *r, const struct node *at, struct jv obj, struct jv key)
{
    switch (obj.kind) {
    case JV_UNDEF:
        fail_undefined(r, at->a);
    case JV_LIST:
        if (key.kind == JV_INT || key.kind == JV_BOOL) {
            size_t i, n = jinja__len(r, &obj);
            if (!norm_index(key.kind == JV_INT ? key.i : key.b, n, &i)) return jinja__undef();
            return jinja__list_get(&obj, i);
        }
        break;
    case JV_STR:
        if (key.kind == JV_INT) {
            size_t i, n = jinja__utf8_count(obj.s, obj.n);
            if (!norm_index(key.i, n, &i)) return jinja__undef();
            size_t a = cp_offset(obj.s, obj.n, i), b = cp_offset(obj.s, obj.n, i + 1);
            return jinja__str(obj.s + a, b - a);
        }
        break;
    case JV_DICT:
    case JV_LOOP:
        if (key.kind == JV_STR) {
            if (obj.kind == JV_DICT) {
                struct jv v;
                if (jinja__dict_get(&obj, key.s, key.n, &v)) return v;
                return jinja__undef();
            }
            char name[64];
            if (key.n >= sizeof(name) || memchr(key.s, 0, key.n)) return jinja__undef();
            memcpy(name, key.s, key.n);
            name[key.n] = 0;
            int field = jinja__loop_field(name);
            return field >= 0 ? loop_attr(obj.loop, field) : jinja__undef();
        }
        return jinja__undef();
    default:
        break;
    }
    if (key.kind == JV_STR) {
        char name[64];
        if (key.n >= sizeof(name) || memchr(key.s, 0, key.n)) return jinja__undef();
        memcpy(name, key.s, key.n);
        name[key.n] = 0;
        return jinja__method(r, obj, name);
    }
    return jinja__undef();
}

static bool opt_int(struct render *r, const struct node *n, const struct node *e, int64_t *out)
{
    if (!e) return false;
    struct jv v = eval(r, e);
    if (v.kind == JV_NONE || v.kind == JV_UNDEF) return false;
    if (v.kind != JV_INT && v.kind != JV_BOOL)
        jinja__fail(r, n->line, "slice indices must be integers, not '%s'", jinja__type_name(&v));
    *out = v.kind == JV_INT ? v.i : v.b;
    return true;
}

static struct jv eval_slice(struct render *r, const struct node *n)
{
    struct jv obj = eval(r, n->a);
    if (obj.kind == JV_UNDEF) fail_undefined(r, n->a);
    if (obj.kind != JV_LIST && obj.kind != JV_STR)
        jinja__fail(r, n->line, "cannot slice '%s'", jinja__type_name(&obj));
    int64_t start = 0, stop = 0, step = 1;
    bool has_start = opt_int(r, n, n->b, &start), has_stop = opt_int(r, n, n->c, &stop);
    if (opt_int(r, n, n->d, &step) && step == 0)
        jinja__fail(r, n->line, "slice step cannot be zero");
    int64_t len = (int64_t)jinja__len(r, &obj);
    /* Python's PySlice_AdjustIndices. */
    if (has_start) {
        if (start < 0)
            start += len, start = start < 0 ? (step < 0 ? -1 : 0) : start;
        else if (start >= len)
            start = step < 0 ? len - 1 : len;
    } else {
        start = step < 0 ? len - 1 : 0;
    }
    if (has_stop) {
        if (stop < 0)
            stop += len, stop = stop < 0 ? (step < 0 ? -1 : 0) : stop;
        else if (stop >= len)
            stop = step < 0 ? len - 1 : len;
    } else {
        stop = step < 0 ? -1 : len;
    }
    if (obj.kind == JV_LIST) {
        struct jv *items;
        jinja__iter(r, &obj, &items);
        struct jv out = jinja__list_new(r, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            jinja__list_push(r, &out, items[i]);
        return out;
    }
    /* Strings: ASCII slices in place; otherwise by code point. */
    bool ascii = true;
    for (uint32_t i = 0; i < obj.n && ascii; i++)
        ascii = (unsigned char)obj.s[i] < 0x80;
    if (ascii && step == 1)
        return jinja__str(obj.s + start, stop > start ? (size_t)(stop - start) : 0);
    struct jv *chars;
    jinja__iter(r, &obj, &chars);
    struct buf b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
        buf_append(&b, chars[i].s, chars[i].n);
    struct jv s = jinja__str_copy(r, b.data ? b.data : "", b.len);
    buf_release(&b);
    return s;
}

/* Evaluates call arguments: positional values, then keywords. */
static void eval_args(struct render *r, struct node *const *args, uint32_t n_args,
                      struct call_args *a)
{
    memset(a, 0, sizeof(*a));
    if (!n_args) return;
    a->pos = jinja__alloc(r, n_args * sizeof(struct jv));
    a->kw = jinja__alloc(r, n_args * sizeof(struct jv));
    a->kw_names = jinja__alloc(r, n_args * sizeof(char *));
    for (uint32_t i = 0; i < n_args; i++) {
        if (args[i]->kind == E_KWARG) {
            a->kw_names[a->n_kw] = args[i]->name;
            a->kw[a->n_kw++] = eval(r, args[i]->a);
        } else {
            a->pos[a->n_pos++] = eval(r, args[i]);
        }
    }
}

static struct jv call_macro(struct render *r, const struct node *call, const struct node *m,
                            struct call_args *a, const struct node *caller_block)
{
    if (r->call_depth >= JINJA_MAX_CALL_DEPTH)
        jinja__fail(r, call->line, "macro calls nested deeper than %d", JINJA_MAX_CALL_DEPTH);
    r->call_depth++;
    struct scope s = push_frame(r);
    bool *used = a->n_kw ? jinja__alloc(r, a->n_kw * sizeof(bool)) : NULL;
    if (used) memset(used, 0, a->n_kw * sizeof(bool));
    for (uint32_t i = 0; i < m->n_args; i++) {
        const struct node *p = m->args[i];
        const char *name = p->name;
        struct jv v = jinja__undef();
        bool set = false;
        if (i < a->n_pos) {
            v = a->pos[i];
            set = true;
        } else {
            for (uint32_t k = 0; k < a->n_kw; k++) {
                if (a->kw_names[k] == name || !strcmp(a->kw_names[k], name)) {
                    v = a->kw[k];
                    used[k] = true;
                    set = true;
                }
            }
        }
        if (!set && p->kind == E_KWARG) v = eval(r, p->a);
        bind(r, name, v);
    }
    struct jv varargs = jinja__list_new(r, 0);
    for (uint32_t i = m->n_args; i < a->n_pos; i++)
        jinja__list_push(r, &varargs, a->pos[i]);
    struct jv kwargs = jinja__dict_new(r, 0);
    for (uint32_t k = 0; k < a->n_kw; k++)
        if (!used[k]) jinja__dict_set(r, &kwargs, jinja__strz(a->kw_names[k]), a->kw[k]);
    bind(r, r->t->names.varargs, varargs);
    bind(r, r->t->names.kwargs, kwargs);
    if (caller_block) {
        struct jfunc *fn = jinja__alloc(r, sizeof(*fn));
        memset(fn, 0, sizeof(*fn));
        fn->kind = FN_CALLER;
        fn->node = caller_block;
        struct jv cv = {.kind = JV_FUNC};
        cv.fn = fn;
        bind(r, r->t->names.caller, cv);
    }
    struct buf *saved = capture_begin(r);
    exec_body(r, m->body, m->n_body);
    struct jv out = capture_end(r, saved);
    pop_frame(r, s);
    r->call_depth--;
    return out;
}

struct jv jinja__call_value(struct render *r, const struct node *n, struct jv fn,
                            struct call_args *a)
{
    if (fn.kind == JV_UNDEF) fail_undefined(r, n->a ? n->a : n);
    if (fn.kind != JV_FUNC)
        jinja__fail(r, n->line, "'%s' object is not callable", jinja__type_name(&fn));
    switch (fn.fn->kind) {
    case FN_MACRO:
        return call_macro(r, n, fn.fn->node, a, NULL);
    case FN_CALLER: /* the call block's params and body, like a macro's */
        return call_macro(r, n, fn.fn->node, a, NULL);
    default:
        return jinja__call_builtin(r, n, fn.fn, a);
    }
}

static struct jv arith(struct render *r, const struct node *n, struct jv x, struct jv y);

static struct jv eval(struct render *r, const struct node *n)
{
    r->line = n->line;
    switch (n->kind) {
    case E_LIT:
        return n->lit;
    case E_NAME:
        return lookup(r, n);
    case E_ATTR:
        return get_attr(r, n, eval(r, n->a));
    case E_INDEX: {
        struct jv obj = eval(r, n->a);
        struct jv key = eval(r, n->b);
        return get_item(r, n, obj, key);
    }
    case E_SLICE:
        return eval_slice(r, n);
    case E_CALL: {
        struct jv fn = eval(r, n->a);
        struct call_args a;
        eval_args(r, n->args, n->n_args, &a);
        r->line = n->line;
        return jinja__call_value(r, n, fn, &a);
    }
    case E_FILTER: {
        struct jv v = eval(r, n->a);
        struct call_args a;
        eval_args(r, n->args, n->n_args, &a);
        r->line = n->line;
        return jinja__apply_filter(r, n, n->builtin, v, &a);
    }
    case E_TEST: {
        struct jv v = eval(r, n->a);
        struct call_args a;
        eval_args(r, n->args, n->n_args, &a);
        r->line = n->line;
        bool t = jinja__apply_test(r, n, n->builtin, v, &a);
        return jinja__bool(n->op ? !t : t);
    }
    case E_NOT: {
        struct jv v = eval(r, n->a);
        return jinja__bool(!jinja__truthy(&v));
    }
    case E_NEG:
    case E_POS: {
        struct jv v = eval(r, n->a);
        r->line = n->line;
        if (v.kind == JV_BOOL) v = jinja__int(v.b);
        if (v.kind == JV_INT) {
            if (n->kind == E_NEG && v.i == INT64_MIN) jinja__fail(r, n->line, "integer overflow");
            return n->kind == E_NEG ? jinja__int(-v.i) : v;
        }
        if (v.kind == JV_FLOAT) return n->kind == E_NEG ? jinja__float(-v.f) : v;
        if (v.kind == JV_UNDEF) fail_undefined(r, n->a);
        jinja__fail(r, n->line, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+',
                    jinja__type_name(&v));
    }
    case E_BINARY: {
        struct jv x = eval(r, n->a);
        struct jv y = eval(r, n->b);
        r->line = n->line;
        return arith(r, n, x, y);
    }
    case E_AND: {
        struct jv x = eval(r, n->a);
        return jinja__truthy(&x) ? eval(r, n->b) : x;
    }
    case E_OR: {
        struct jv x = eval(r, n->a);
        return jinja__truthy(&x) ? x : eval(r, n->b);
    }
    case E_COND: {
        struct jv c = eval(r, n->a);
        if (jinja__truthy(&c)) return eval(r, n->b);
        return n->c ? eval(r, n->c) : jinja__undef();
    }
    case E_LIST:
    case E_TUPLE: {
        struct jv l = jinja__list_new(r, n->n_args);
        for (uint32_t i = 0; i < n->n_args; i++)
            jinja__list_push(r, &l, eval(r, n->args[i]));
        return l;
    }
    case E_DICT: {
        struct jv d = jinja__dict_new(r, n->n_args / 2);
        for (uint32_t i = 0; i + 1 < n->n_args; i += 2) {
            struct jv k = eval(r, n->args[i]);
            if (k.kind != JV_STR)
                jinja__fail(r, n->args[i]->line, "dict keys must be strings, not '%s'",
                            jinja__type_name(&k));
            jinja__dict_set(r, &d, k, eval(r, n->args[i + 1]));
        }
        return d;
    }
    case E_CAPTURE:
        return r->capture;
    case E_KWARG:
        jinja__fail(r, n->line, "keyword argument outside a call");
    default:
        CHECK(!"statement evaluated as an expression");
    }
    return jinja__undef();
}

static const char *const op_names[] = {
    [OP_ADD] = "+",       [OP_SUB] = "-", [OP_MUL] = "*",  [OP_DIV] = "/",
    [OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "**", [OP_CONCAT] = "~",
    [OP_EQ] = "==",       [OP_NE] = "!=", [OP_LT] = "<",   [OP_LE] = "<=",
    [OP_GT] = ">",        [OP_GE] = ">=", [OP_IN] = "in",  [OP_NOT_IN] = "not in",
};

_Noreturn static void bad_operands(struct render *r, const struct node *n, const struct jv *x,
                                   const struct jv *y)
{
    if (x->kind == JV_UNDEF) fail_undefined(r, n->a);
    if (y->kind == JV_UNDEF) fail_undefined(r, n->b);
    jinja__fail(r, n->line, "unsupported operand types for %s: '%s' and '%s'", op_names[n->op],
                jinja__type_name(x), jinja__type_name(y));
}

static bool contains(struct render *r, const struct node *n, const struct jv *item,
                     const struct jv *in)
{
    switch (in->kind) {
    case JV_STR:
        if (item->kind != JV_STR)
            jinja__fail(r, n->line, "'in <string>' requires a string as left operand, not '%s'",
                        jinja__type_name(item));
        if (!item->n) return true;
        if (item->n > in->n) return false;
        for (uint32_t i = 0; i + item->n <= in->n; i++)
            if (in->s[i] == item->s[0] && !memcmp(in->s + i, item->s, item->n)) return true;
        return false;
    case JV_LIST: {
        size_t len = jinja__len(r, in);
        for (size_t i = 0; i < len; i++) {
            struct jv x = jinja__list_get(in, i);
            if (jinja__equal(&x, item)) return true;
        }
        return false;
    }
    case JV_DICT: {
        if (item->kind != JV_STR) return false;
        struct jv v;
        return jinja__dict_get(in, item->s, item->n, &v);
    }
    case JV_UNDEF:
        return false; /* Undefined iterates as empty */
    default:
        jinja__fail(r, n->line, "argument of type '%s' is not iterable", jinja__type_name(in));
    }
}

static struct jv concat_str(struct render *r, const struct jv *x, const struct jv *y)
{
    size_t len = (size_t)x->n + y->n;
    if (len > JINJA_MAX_OUTPUT)
        jinja__fail(r, r->line, "string longer than %u bytes", JINJA_MAX_OUTPUT);
    char *s = jinja__alloc(r, len + 1);
    memcpy(s, x->s, x->n);
    memcpy(s + x->n, y->s, y->n);
    s[len] = 0;
    return jinja__str(s, len);
}

static struct jv arith(struct render *r, const struct node *n, struct jv x, struct jv y)
{
    switch ((enum binop)n->op) {
    case OP_EQ:
        return jinja__bool(jinja__equal(&x, &y));
    case OP_NE:
        return jinja__bool(!jinja__equal(&x, &y));
    case OP_LT:
        return jinja__bool(jinja__compare(r, &x, &y, true) < 0);
    case OP_LE:
        return jinja__bool(jinja__compare(r, &x, &y, true) <= 0);
    case OP_GT:
        return jinja__bool(jinja__compare(r, &x, &y, true) > 0);
    case OP_GE:
        return jinja__bool(jinja__compare(r, &x, &y, true) >= 0);
    case OP_IN:
        return jinja__bool(contains(r, n, &x, &y));
    case OP_NOT_IN:
        return jinja__bool(!contains(r, n, &x, &y));
    case OP_CONCAT: {
        struct jv a = jinja__to_str(r, &x), b = jinja__to_str(r, &y);
        return concat_str(r, &a, &b);
    }
    default:
        break;
    }
    bool xi = x.kind == JV_INT || x.kind == JV_BOOL, yi = y.kind == JV_INT || y.kind == JV_BOOL;
    bool xn = xi || x.kind == JV_FLOAT, yn = yi || y.kind == JV_FLOAT;
    if (xn && yn) {
        int64_t a = x.kind == JV_INT ? x.i : x.kind == JV_BOOL ? x.b : 0;
        int64_t b = y.kind == JV_INT ? y.i : y.kind == JV_BOOL ? y.b : 0;
        double fa = x.kind == JV_FLOAT ? x.f : (double)a, fb = y.kind == JV_FLOAT ? y.f : (double)b;
        bool ints = xi && yi;
        int64_t res;
        switch ((enum binop)n->op) {
        case OP_ADD:
            if (!ints) return jinja__float(fa + fb);
            if (__builtin_add_overflow(a, b, &res)) jinja__fail(r, n->line, "integer overflow");
            return jinja__int(res);
        case OP_SUB:
            if (!ints) return jinja__float(fa - fb);
            if (__builtin_sub_overflow(a, b, &res)) jinja__fail(r, n->line, "integer overflow");
            return jinja__int(res);
        case OP_MUL:
            if (!ints) return jinja__float(fa * fb);
            if (__builtin_mul_overflow(a, b, &res)) jinja__fail(r, n->line, "integer overflow");
            return jinja__int(res);
        case OP_DIV:
            if (fb == 0) jinja__fail(r, n->line, "division by zero");
            return jinja__float(fa / fb);
        case OP_FLOORDIV:
            if (fb == 0) jinja__fail(r, n->line, "integer division or modulo by zero");
            if (!ints) return jinja__float(floor(fa / fb));
            if (a == INT64_MIN && b == -1) jinja__fail(r, n->line, "integer overflow");
            res = a / b;
            if ((a % b != 0) && ((a < 0) != (b < 0))) res--;
            return jinja__int(res);
        case OP_MOD:
            if (fb == 0) jinja__fail(r, n->line, "integer division or modulo by zero");
            if (!ints) {
                double m = fmod(fa, fb);
                if (m != 0 && ((m < 0) != (fb < 0))) m += fb;
                return jinja__float(m);
            }
            if (b == -1) return jinja__int(0);
            res = a % b;
            if (res != 0 && ((res < 0) != (b < 0))) res += b;
            return jinja__int(res);
        case OP_POW:
            if (ints && b >= 0) {
                int64_t acc = 1;
                for (int64_t k = 0; k < b; k++) {
                    if (__builtin_mul_overflow(acc, a, &acc))
                        jinja__fail(r, n->line, "integer overflow");
                    if (acc == 0 || acc == 1) break;
                }
                return jinja__int(acc);
            }
            if (fa == 0 && fb < 0)
                jinja__fail(r, n->line, "0.0 cannot be raised to a negative power");
            return jinja__float(pow(fa, fb));
        default:
            break;
        }
    }
    if (n->op == OP_ADD && x.kind == JV_STR && y.kind == JV_STR) return concat_str(r, &x, &y);
    if (n->op == OP_ADD && x.kind == JV_LIST && y.kind == JV_LIST) {
        struct jv *a, *b;
        uint32_t na = jinja__iter(r, &x, &a), nb = jinja__iter(r, &y, &b);
        struct jv l = jinja__list_new(r, na + nb);
        for (uint32_t i = 0; i < na; i++)
            jinja__list_push(r, &l, a[i]);
        for (uint32_t i = 0; i < nb; i++)
            jinja__list_push(r, &l, b[i]);
        return l;
    }
    if (n->op == OP_MUL && ((x.kind == JV_STR || x.kind == JV_LIST) && yi)) {
        int64_t times = y.kind == JV_INT ? y.i : y.b;
        if (times < 0) times = 0;
        if (x.kind == JV_STR) {
            if ((uint64_t)times * x.n > JINJA_MAX_OUTPUT)
                jinja__fail(r, n->line, "string longer than %u bytes", JINJA_MAX_OUTPUT);
            size_t len = (size_t)times * x.n;
            char *s = jinja__alloc(r, len + 1);
            for (int64_t k = 0; k < times; k++)
                memcpy(s + (size_t)k * x.n, x.s, x.n);
            s[len] = 0;
            return jinja__str(s, len);
        }
        struct jv *a;
        uint32_t na = jinja__iter(r, &x, &a);
        if ((uint64_t)times * na > JINJA_MAX_ITER)
            jinja__fail(r, n->line, "list longer than %d items", JINJA_MAX_ITER);
        struct jv l = jinja__list_new(r, (uint32_t)(times * na));
        for (int64_t k = 0; k < times; k++)
            for (uint32_t i = 0; i < na; i++)
                jinja__list_push(r, &l, a[i]);
        return l;
    }
    bad_operands(r, n, &x, &y);
}

/* ---- statements ---- */

static void assign(struct render *r, const struct node *target, struct jv v)
{
    if (target->kind == E_NAME) {
        bind(r, target->name, v);
        return;
    }
    if (target->kind == E_ATTR) {
        struct jv ns = eval(r, target->a);
        if (ns.kind != JV_DICT || !(ns.flags & JV_F_NAMESPACE))
            jinja__fail(r, target->line,
                        "cannot assign attribute '%s' on a %s (only on a namespace)", target->name,
                        jinja__type_name(&ns));
        jinja__dict_set(r, &ns, jinja__strz(target->name), v);
        return;
    }
    CHECK(target->kind == E_TUPLE);
    if (v.kind != JV_LIST && v.kind != JV_STR && v.kind != JV_DICT)
        jinja__fail(r, target->line, "cannot unpack a %s into %u names", jinja__type_name(&v),
                    target->n_args);
    struct jv *items;
    uint32_t n = jinja__iter(r, &v, &items);
    if (n != target->n_args)
        jinja__fail(r, target->line, "too %s values to unpack (expected %u, got %u)",
                    n < target->n_args ? "few" : "many", target->n_args, n);
    for (uint32_t i = 0; i < n; i++)
        assign(r, target->args[i], items[i]);
}

static enum flow exec_for(struct render *r, const struct node *n)
{
    struct jv seq = eval(r, n->a);
    r->line = n->line;
    struct jv *items;
    uint32_t count;
    if (seq.kind == JV_UNDEF || seq.kind == JV_NONE) {
        if (seq.kind == JV_NONE) jinja__fail(r, n->line, "'none' object is not iterable");
        count = 0, items = NULL;
    } else {
        if (seq.kind != JV_LIST && seq.kind != JV_DICT && seq.kind != JV_STR)
            jinja__fail(r, n->line, "'%s' object is not iterable", jinja__type_name(&seq));
        count = jinja__iter(r, &seq, &items);
    }
    struct scope s = push_frame(r);
    if (n->b) {
        /* for x in xs if cond: filter first, so loop.length counts the kept items. */
        uint32_t kept = 0;
        for (uint32_t i = 0; i < count; i++) {
            if (++r->n_iter > JINJA_MAX_ITER)
                jinja__fail(r, n->line, "more than %d loop iterations", JINJA_MAX_ITER);
            assign(r, n->target, items[i]);
            struct jv c = eval(r, n->b);
            if (jinja__truthy(&c)) items[kept++] = items[i];
        }
        count = kept;
    }
    struct jloop *loop = jinja__alloc(r, sizeof(*loop));
    loop->length = count;
    loop->all = items;
    struct jv lv = {.kind = JV_LOOP};
    lv.loop = loop;
    for (uint32_t i = 0; i < count; i++) {
        if (++r->n_iter > JINJA_MAX_ITER)
            jinja__fail(r, n->line, "more than %d loop iterations", JINJA_MAX_ITER);
        loop->index0 = i;
        bind(r, r->t->names.loop, lv);
        assign(r, n->target, items[i]);
        enum flow f = exec_body(r, n->body, n->n_body);
        if (f == FLOW_BREAK) break;
    }
    if (count == 0 && n->n_alt) exec_body(r, n->alt, n->n_alt);
    pop_frame(r, s);
    return FLOW_NORMAL;
}

static void exec_output(struct render *r, const struct node *n)
{
    struct jv v = eval(r, n->a);
    r->line = n->line;
    if (v.kind == JV_STR) {
        emit(r, v.s, v.n);
    } else if (v.kind != JV_UNDEF) {
        size_t before = r->out->len;
        jinja__stringify(r, &v, r->out);
        if (r->out->len > JINJA_MAX_OUTPUT) {
            r->out->len = before;
            jinja__fail(r, n->line, "output larger than %u bytes", JINJA_MAX_OUTPUT);
        }
    }
}

static enum flow exec_stmt(struct render *r, const struct node *n)
{
    r->line = n->line;
    switch (n->kind) {
    case N_TEXT:
        emit(r, n->lit.s, n->lit.n);
        return FLOW_NORMAL;
    case N_OUTPUT:
        exec_output(r, n);
        return FLOW_NORMAL;
    case N_IF: {
        struct jv c = eval(r, n->a);
        if (jinja__truthy(&c)) return exec_body(r, n->body, n->n_body);
        return exec_body(r, n->alt, n->n_alt);
    }
    case N_FOR:
        return exec_for(r, n);
    case N_SET:
        assign(r, n->target, eval(r, n->a));
        return FLOW_NORMAL;
    case N_SET_BLOCK: {
        struct buf *saved = capture_begin(r);
        enum flow f = exec_body(r, n->body, n->n_body);
        struct jv v = capture_end(r, saved);
        if (n->b) {
            struct jv prev = r->capture;
            r->capture = v;
            v = eval(r, n->b);
            r->capture = prev;
        }
        assign(r, n->target, v);
        return f;
    }
    case N_MACRO: {
        struct jfunc *fn = jinja__alloc(r, sizeof(*fn));
        memset(fn, 0, sizeof(*fn));
        fn->kind = FN_MACRO;
        fn->node = n;
        struct jv v = {.kind = JV_FUNC};
        v.fn = fn;
        bind(r, n->name, v);
        return FLOW_NORMAL;
    }
    case N_CALL_BLOCK: {
        const struct node *call = n->a;
        struct jv fn = eval(r, call->a);
        struct call_args a;
        eval_args(r, call->args, call->n_args, &a);
        r->line = n->line;
        if (fn.kind != JV_FUNC || fn.fn->kind != FN_MACRO)
            jinja__fail(r, n->line, "'call' needs a macro, got %s", jinja__type_name(&fn));
        struct jv out = call_macro(r, call, fn.fn->node, &a, n);
        emit(r, out.s, out.n);
        return FLOW_NORMAL;
    }
    case N_FILTER_BLOCK: {
        struct buf *saved = capture_begin(r);
        exec_body(r, n->body, n->n_body);
        struct jv text = capture_end(r, saved);
        struct jv prev = r->capture;
        r->capture = text;
        struct jv v = eval(r, n->a);
        r->capture = prev;
        struct jv s = jinja__to_str(r, &v);
        emit(r, s.s, s.n);
        return FLOW_NORMAL;
    }
    case N_BREAK:
        return FLOW_BREAK;
    case N_CONTINUE:
        return FLOW_CONTINUE;
    case N_DO:
        eval(r, n->a);
        return FLOW_NORMAL;
    default:
        CHECK(!"expression executed as a statement");
    }
    return FLOW_NORMAL;
}

static enum flow exec_body(struct render *r, struct node *const *body, uint32_t n_body)
{
    if (++r->depth > JINJA_MAX_DEPTH + 2 * JINJA_MAX_CALL_DEPTH)
        jinja__fail(r, r->line, "blocks nested too deeply");
    for (uint32_t i = 0; i < n_body; i++) {
        enum flow f = exec_stmt(r, body[i]);
        if (f != FLOW_NORMAL) {
            r->depth--;
            return f;
        }
    }
    r->depth--;
    return FLOW_NORMAL;
}

int jinja_render(const struct jinja_template *t, const json_t *ctx, struct buf *out,
                 struct err_msg *msg)
{
    if (ctx && !json_is_object(ctx))
        return err_set(msg, ERR_INVALID, "template context: expected a JSON object");
    struct render *r = xcalloc(1, sizeof(*r));
    r->t = t;
    r->ctx = ctx;
    r->out = out;
    r->msg = msg;
    r->arena.limit = JINJA_MAX_ARENA;
    size_t start = out->len;
    int rc = 0;
    if (setjmp(r->fail)) {
        rc = ERR_INVALID;
        goto out_release;
    }
    exec_body(r, t->body, t->n_body);
    (void)start;
out_release:
    for (uint32_t i = 0; i < r->n_captures; i++) {
        buf_release(r->captures[i]);
        free(r->captures[i]);
    }
    free(r->captures);
    free(r->vars);
    jinja__arena_release(&r->arena);
    free(r);
    return rc;
}
