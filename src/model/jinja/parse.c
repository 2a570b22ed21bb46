/*
 * parse.c - tokens -> AST; jinja_parse / jinja_free.
 *
 * Recursive descent over Jinja2's grammar (precedence low to high):
 *
 *   expr     := or ['if' or ['else' expr]]
 *   or       := and ('or' and)*          and := not ('and' not)*
 *   not      := 'not' not | compare
 *   compare  := concat (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') concat)*
 *   concat   := sum ('~' sum)*           sum := product (('+'|'-') product)*
 *   product  := pow (('*'|'/'|'//'|'%') pow)*
 *   pow      := unary ('**' unary)*
 *   unary    := ('-'|'+') unary | primary postfix* ('|' filter | 'is' test)*
 *
 * Every node is allocated from the template's arena; identifiers are
 * interned (equal names, equal pointers); filter and test names resolve to
 * builtin indices here, so an unknown filter is a parse error naming its
 * line. Nesting deeper than JINJA_MAX_DEPTH (blocks or expressions) is an
 * error, so hostile input cannot exhaust the C stack.
 */
#include "model/jinja/jinja.h"
#include "model/jinja/jinja_impl.h"

#include "base/check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct intern_slot {
    const char *s; /* NUL-terminated, arena; NULL = empty slot */
    uint32_t len;  /* bytes */
};

struct parser {
    struct jinja_template *t;  /* being built */
    struct tok *toks;          /* (n_toks) */
    size_t n_toks;             /* tokens */
    size_t pos;                /* next token */
    int depth;                 /* nesting now */
    struct intern_slot *names; /* (cap_names) open-addressing table */
    uint32_t n_names;          /* used slots */
    uint32_t cap_names;        /* power of two */
    struct err_msg *msg;       /* errors */
    jmp_buf fail;              /* parse errors unwind here */
};

_Noreturn static void perr(struct parser *p, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void perr(struct parser *p, uint32_t line, const char *fmt, ...)
{
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    err_set(p->msg, ERR_INVALID, "template line %u: %s", line, text);
    longjmp(p->fail, 1);
}

static void *palloc(struct parser *p, size_t n)
{
    void *m = jinja__arena_alloc(&p->t->arena, n);
    if (!m) perr(p, 0, "template too large");
    memset(m, 0, n);
    return m;
}

static uint32_t hash_name(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static const char *intern(struct parser *p, const char *s, size_t n)
{
    if (p->n_names * 2 >= p->cap_names) {
        uint32_t cap = p->cap_names ? p->cap_names * 2 : 64;
        struct intern_slot *slots = xcalloc(cap, sizeof(*slots));
        for (uint32_t i = 0; i < p->cap_names; i++) {
            if (!p->names[i].s) continue;
            uint32_t h = hash_name(p->names[i].s, p->names[i].len) & (cap - 1);
            while (slots[h].s)
                h = (h + 1) & (cap - 1);
            slots[h] = p->names[i];
        }
        free(p->names);
        p->names = slots;
        p->cap_names = cap;
    }
    uint32_t h = hash_name(s, n) & (p->cap_names - 1);
    while (p->names[h].s) {
        if (p->names[h].len == n && !memcmp(p->names[h].s, s, n)) return p->names[h].s;
        h = (h + 1) & (p->cap_names - 1);
    }
    char *c = palloc(p, n + 1);
    memcpy(c, s, n);
    p->names[h].s = c;
    p->names[h].len = (uint32_t)n;
    p->n_names++;
    return c;
}

/* ---- token helpers ---- */

static struct tok *peek(struct parser *p)
{
    return &p->toks[p->pos];
}

static struct tok *peek_at(struct parser *p, size_t k)
{
    size_t i = p->pos + k;
    return &p->toks[i < p->n_toks ? i : p->n_toks - 1];
}

static struct tok *next(struct parser *p)
{
    struct tok *t = &p->toks[p->pos];
    if (t->kind != T_EOF) p->pos++;
    return t;
}

static bool tok_is_op(const struct tok *t, const char *op)
{
    return t->kind == T_OP && t->len == strlen(op) && !memcmp(t->text, op, t->len);
}

static bool tok_is_name(const struct tok *t, const char *name)
{
    return t->kind == T_NAME && t->len == strlen(name) && !memcmp(t->text, name, t->len);
}

static bool accept_op(struct parser *p, const char *op)
{
    if (!tok_is_op(peek(p), op)) return false;
    p->pos++;
    return true;
}

static bool accept_name(struct parser *p, const char *name)
{
    if (!tok_is_name(peek(p), name)) return false;
    p->pos++;
    return true;
}

static const char *tok_desc(const struct tok *t, char *buf, size_t n)
{
    switch (t->kind) {
    case T_EOF:
        return "end of template";
    case T_TEXT:
        return "text";
    case T_OPEN_EXPR:
        return "'{{'";
    case T_CLOSE_EXPR:
        return "'}}'";
    case T_OPEN_STMT:
        return "'{%'";
    case T_CLOSE_STMT:
        return "'%}'";
    case T_STRING:
        return "a string";
    case T_INT:
    case T_FLOAT:
        return "a number";
    default:
        snprintf(buf, n, "'%.*s'", (int)MIN(t->len, 40u), t->text);
        return buf;
    }
}

static void expect_op(struct parser *p, const char *op, const char *where)
{
    if (accept_op(p, op)) return;
    char b[64];
    perr(p, peek(p)->line, "expected '%s' %s, got %s", op, where, tok_desc(peek(p), b, sizeof(b)));
}

static const char *expect_ident(struct parser *p, const char *what)
{
    struct tok *t = peek(p);
    if (t->kind != T_NAME) {
        char b[64];
        perr(p, t->line, "expected %s, got %s", what, tok_desc(t, b, sizeof(b)));
    }
    p->pos++;
    return intern(p, t->text, t->len);
}

static void expect_close_stmt(struct parser *p, const char *stmt)
{
    if (peek(p)->kind == T_CLOSE_STMT) {
        p->pos++;
        return;
    }
    char b[64];
    perr(p, peek(p)->line, "expected '%%}' to end '%s', got %s", stmt,
         tok_desc(peek(p), b, sizeof(b)));
}

static struct node *mk(struct parser *p, enum node_kind kind, uint32_t line)
{
    struct node *n = palloc(p, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

struct nodevec {
    struct node **v; /* (cap) */
    uint32_t n;      /* used */
    uint32_t cap;    /* allocated */
};

/* Vectors grow inside the arena (old storage is abandoned there), so a
 * parse error that unwinds leaks nothing. */
static void nv_push(struct parser *p, struct nodevec *v, struct node *n)
{
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 4;
        struct node **nv = palloc(p, cap * sizeof(*nv));
        if (v->n) memcpy(nv, v->v, v->n * sizeof(*nv));
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = n;
}

static struct node **nv_finish(struct parser *p, struct nodevec *v, uint32_t *n)
{
    (void)p;
    *n = v->n;
    struct node **out = v->v;
    memset(v, 0, sizeof(*v));
    return out;
}

static void enter(struct parser *p)
{
    if (++p->depth > JINJA_MAX_DEPTH)
        perr(p, peek(p)->line, "nesting deeper than %d", JINJA_MAX_DEPTH);
}

static void leave(struct parser *p)
{
    p->depth--;
}

/* ---- expressions ---- */

static struct node *parse_expr(struct parser *p);
static struct node *parse_or(struct parser *p);
static struct node *parse_unary(struct parser *p, bool with_filter);

/* Arguments inside ( ... ) after the '(' was consumed; keywords as E_KWARG. */
static struct node **parse_args(struct parser *p, uint32_t *n_args)
{
    struct nodevec v = {0};
    while (!accept_op(p, ")")) {
        if (v.n) expect_op(p, ",", "between arguments");
        if (accept_op(p, ")")) break;
        struct tok *t = peek(p);
        if (t->kind == T_NAME && tok_is_op(peek_at(p, 1), "=")) {
            struct node *kw = mk(p, E_KWARG, t->line);
            kw->name = intern(p, t->text, t->len);
            p->pos += 2;
            kw->a = parse_expr(p);
            nv_push(p, &v, kw);
        } else {
            nv_push(p, &v, parse_expr(p));
        }
    }
    return nv_finish(p, &v, n_args);
}

static struct node *parse_primary(struct parser *p)
{
    struct tok *t = next(p);
    struct node *n;
    enter(p);
    switch (t->kind) {
    case T_NAME:
        if (tok_is_name(t, "true") || tok_is_name(t, "True")) {
            n = mk(p, E_LIT, t->line);
            n->lit = jinja__bool(true);
        } else if (tok_is_name(t, "false") || tok_is_name(t, "False")) {
            n = mk(p, E_LIT, t->line);
            n->lit = jinja__bool(false);
        } else if (tok_is_name(t, "none") || tok_is_name(t, "None")) {
            n = mk(p, E_LIT, t->line);
            n->lit = jinja__none();
        } else {
            n = mk(p, E_NAME, t->line);
            n->name = intern(p, t->text, t->len);
            n->builtin = (uint16_t)(jinja__global_find(n->name) + 1);
        }
        break;
    case T_STRING: {
        /* Adjacent literals concatenate, as in Python. */
        size_t total = t->len, k = p->pos;
        while (p->toks[k].kind == T_STRING)
            total += p->toks[k++].len;
        char *s = palloc(p, total + 1);
        memcpy(s, t->text, t->len);
        size_t off = t->len;
        while (peek(p)->kind == T_STRING) {
            struct tok *u = next(p);
            memcpy(s + off, u->text, u->len);
            off += u->len;
        }
        n = mk(p, E_LIT, t->line);
        n->lit = jinja__str(s, total);
        break;
    }
    case T_INT:
        n = mk(p, E_LIT, t->line);
        n->lit = jinja__int(t->i);
        break;
    case T_FLOAT:
        n = mk(p, E_LIT, t->line);
        n->lit = jinja__float(t->f);
        break;
    case T_OP:
        if (tok_is_op(t, "(")) {
            if (accept_op(p, ")")) {
                n = mk(p, E_TUPLE, t->line);
                break;
            }
            struct node *e = parse_expr(p);
            if (tok_is_op(peek(p), ",")) {
                struct nodevec v = {0};
                nv_push(p, &v, e);
                while (accept_op(p, ",")) {
                    if (tok_is_op(peek(p), ")")) break;
                    nv_push(p, &v, parse_expr(p));
                }
                n = mk(p, E_TUPLE, t->line);
                n->args = nv_finish(p, &v, &n->n_args);
            } else {
                n = e;
            }
            expect_op(p, ")", "to close '('");
            break;
        }
        if (tok_is_op(t, "[")) {
            struct nodevec v = {0};
            while (!accept_op(p, "]")) {
                if (v.n) expect_op(p, ",", "between list items");
                if (accept_op(p, "]")) break;
                nv_push(p, &v, parse_expr(p));
            }
            n = mk(p, E_LIST, t->line);
            n->args = nv_finish(p, &v, &n->n_args);
            break;
        }
        if (tok_is_op(t, "{")) {
            struct nodevec v = {0};
            while (!accept_op(p, "}")) {
                if (v.n) expect_op(p, ",", "between dict items");
                if (accept_op(p, "}")) break;
                nv_push(p, &v, parse_expr(p));
                expect_op(p, ":", "between key and value");
                nv_push(p, &v, parse_expr(p));
            }
            n = mk(p, E_DICT, t->line);
            n->args = nv_finish(p, &v, &n->n_args);
            break;
        }
        /* fallthrough */
    default: {
        char b[64];
        perr(p, t->line, "unexpected %s in expression", tok_desc(t, b, sizeof(b)));
    }
    }
    leave(p);
    return n;
}

static struct node *parse_postfix(struct parser *p, struct node *n)
{
    while (1) {
        struct tok *t = peek(p);
        if (tok_is_op(t, ".")) {
            p->pos++;
            struct tok *a = next(p);
            if (a->kind == T_NAME) {
                struct node *m = mk(p, E_ATTR, t->line);
                m->a = n;
                m->name = intern(p, a->text, a->len);
                m->builtin = (uint16_t)(jinja__loop_field(m->name) + 1);
                m->op = jinja__method_exists(m->name);
                n = m;
            } else if (a->kind == T_INT) {
                struct node *m = mk(p, E_INDEX, t->line);
                m->a = n;
                m->b = mk(p, E_LIT, t->line);
                m->b->lit = jinja__int(a->i);
                n = m;
            } else {
                char b[64];
                perr(p, a->line, "expected a name after '.', got %s", tok_desc(a, b, sizeof(b)));
            }
        } else if (tok_is_op(t, "[")) {
            p->pos++;
            struct node *parts[3] = {NULL, NULL, NULL};
            int n_colons = 0;
            while (1) {
                if (tok_is_op(peek(p), "]")) break;
                if (tok_is_op(peek(p), ":")) {
                    if (++n_colons > 2) perr(p, peek(p)->line, "too many ':' in subscript");
                    p->pos++;
                    continue;
                }
                if (parts[n_colons]) perr(p, peek(p)->line, "expected ':' or ']' in subscript");
                parts[n_colons] = parse_expr(p);
            }
            expect_op(p, "]", "to close '['");
            struct node *m;
            if (n_colons == 0) {
                if (!parts[0]) perr(p, t->line, "empty subscript");
                m = mk(p, E_INDEX, t->line);
                m->b = parts[0];
            } else {
                m = mk(p, E_SLICE, t->line);
                m->b = parts[0];
                m->c = parts[1];
                m->d = parts[2];
            }
            m->a = n;
            n = m;
        } else if (tok_is_op(t, "(")) {
            p->pos++;
            struct node *m = mk(p, E_CALL, t->line);
            m->a = n;
            m->args = parse_args(p, &m->n_args);
            n = m;
        } else {
            return n;
        }
    }
}

static bool starts_test_arg(const struct tok *t)
{
    if (t->kind == T_STRING || t->kind == T_INT || t->kind == T_FLOAT) return true;
    if (t->kind == T_NAME) {
        static const char *const stop[] = {"else", "or", "and", "if", "is", "in", "not"};
        for (size_t i = 0; i < ARRAY_LEN(stop); i++)
            if (tok_is_name(t, stop[i])) return false;
        return true;
    }
    return tok_is_op(t, "[") || tok_is_op(t, "{");
}

/* '|' name [(args)] chains and 'is' [not] name [arg | (args)]. */
static struct node *parse_filters(struct parser *p, struct node *n)
{
    while (1) {
        struct tok *t = peek(p);
        if (tok_is_op(t, "|")) {
            p->pos++;
            struct tok *nt = peek(p);
            const char *name = expect_ident(p, "a filter name after '|'");
            int b = jinja__builtin_find(BUILTIN_FILTER, name);
            if (b < 0) perr(p, nt->line, "unknown filter '%s'", name);
            struct node *m = mk(p, E_FILTER, nt->line);
            m->a = n;
            m->name = name;
            m->builtin = (uint16_t)b;
            if (accept_op(p, "(")) m->args = parse_args(p, &m->n_args);
            n = m;
        } else if (tok_is_name(t, "is")) {
            p->pos++;
            bool neg = accept_name(p, "not");
            struct tok *nt = peek(p);
            const char *name;
            /* none / true / false are tests as well as literals. */
            if (nt->kind == T_NAME)
                name = intern(p, nt->text, nt->len), p->pos++;
            else
                name = expect_ident(p, "a test name after 'is'");
            int b = jinja__builtin_find(BUILTIN_TEST, name);
            if (b < 0) perr(p, nt->line, "unknown test '%s'", name);
            struct node *m = mk(p, E_TEST, nt->line);
            m->a = n;
            m->op = neg;
            m->name = name;
            m->builtin = (uint16_t)b;
            if (accept_op(p, "(")) {
                m->args = parse_args(p, &m->n_args);
            } else if (starts_test_arg(peek(p))) {
                m->args = palloc(p, sizeof(*m->args));
                m->args[0] = parse_postfix(p, parse_primary(p));
                m->n_args = 1;
            }
            n = m;
        } else if (tok_is_op(t, "(")) {
            p->pos++;
            struct node *m = mk(p, E_CALL, t->line);
            m->a = n;
            m->args = parse_args(p, &m->n_args);
            n = m;
        } else {
            return n;
        }
    }
}

static struct node *parse_unary(struct parser *p, bool with_filter)
{
    struct tok *t = peek(p);
    struct node *n;
    enter(p);
    if (tok_is_op(t, "-") || tok_is_op(t, "+")) {
        p->pos++;
        n = mk(p, tok_is_op(t, "-") ? E_NEG : E_POS, t->line);
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filters(p, n);
    leave(p);
    return n;
}

static struct node *binary(struct parser *p, enum binop op, uint32_t line, struct node *a,
                           struct node *b)
{
    struct node *n = mk(p, E_BINARY, line);
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static struct node *parse_pow(struct parser *p)
{
    struct node *n = parse_unary(p, true);
    while (tok_is_op(peek(p), "**")) {
        uint32_t line = next(p)->line;
        n = binary(p, OP_POW, line, n, parse_unary(p, true));
    }
    return n;
}

/* One precedence level of left-associative operators: a table of the
 * level's operator tokens (ending with NULL text). */
struct binop_tok {
    const char *text; /* operator token, NULL ends the table */
    enum binop op;    /* what it builds */
};

/* The op of t in table, or -1. */
static int binop_of(const struct tok *t, const struct binop_tok *table)
{
    for (; table->text; table++)
        if (tok_is_op(t, table->text)) return (int)table->op;
    return -1;
}

/* operand (op operand)* for the operators of one level, left to right. */
static struct node *parse_level(struct parser *p, const struct binop_tok *table,
                                struct node *(*operand)(struct parser *))
{
    struct node *n = operand(p);
    int op;
    while ((op = binop_of(peek(p), table)) >= 0) {
        uint32_t line = next(p)->line;
        n = binary(p, (enum binop)op, line, n, operand(p));
    }
    return n;
}

static struct node *parse_product(struct parser *p)
{
    static const struct binop_tok ops[] = {
        {"*", OP_MUL}, {"/", OP_DIV}, {"//", OP_FLOORDIV}, {"%", OP_MOD}, {NULL, 0}};
    return parse_level(p, ops, parse_pow);
}

static struct node *parse_sum(struct parser *p)
{
    static const struct binop_tok ops[] = {{"+", OP_ADD}, {"-", OP_SUB}, {NULL, 0}};
    return parse_level(p, ops, parse_product);
}

static struct node *parse_concat(struct parser *p)
{
    static const struct binop_tok ops[] = {{"~", OP_CONCAT}, {NULL, 0}};
    return parse_level(p, ops, parse_sum);
}

static struct node *parse_compare(struct parser *p)
{
    struct node *n = parse_concat(p);
    while (1) {
        static const struct binop_tok ops[] = {{"==", OP_EQ}, {"!=", OP_NE}, {"<", OP_LT},
                                               {"<=", OP_LE}, {">", OP_GT},  {">=", OP_GE},
                                               {NULL, 0}};
        struct tok *t = peek(p);
        int op = binop_of(t, ops);
        if (op < 0 && tok_is_name(t, "in")) op = OP_IN;
        if (op < 0 && tok_is_name(t, "not") && tok_is_name(peek_at(p, 1), "in")) {
            op = OP_NOT_IN;
            p->pos++;
        }
        if (op < 0) return n;
        p->pos++;
        n = binary(p, (enum binop)op, t->line, n, parse_concat(p));
    }
}

static struct node *parse_not(struct parser *p)
{
    struct tok *t = peek(p);
    if (tok_is_name(t, "not")) {
        p->pos++;
        enter(p);
        struct node *n = mk(p, E_NOT, t->line);
        n->a = parse_not(p);
        leave(p);
        return n;
    }
    return parse_compare(p);
}

static struct node *parse_and(struct parser *p)
{
    struct node *n = parse_not(p);
    while (tok_is_name(peek(p), "and")) {
        struct node *m = mk(p, E_AND, next(p)->line);
        m->a = n;
        m->b = parse_not(p);
        n = m;
    }
    return n;
}

static struct node *parse_or(struct parser *p)
{
    struct node *n = parse_and(p);
    while (tok_is_name(peek(p), "or")) {
        struct node *m = mk(p, E_OR, next(p)->line);
        m->a = n;
        m->b = parse_and(p);
        n = m;
    }
    return n;
}

static struct node *parse_expr(struct parser *p)
{
    enter(p);
    struct node *n = parse_or(p);
    while (tok_is_name(peek(p), "if")) {
        struct node *m = mk(p, E_COND, next(p)->line);
        m->b = n;
        m->a = parse_or(p);
        if (accept_name(p, "else")) m->c = parse_expr(p);
        n = m;
    }
    leave(p);
    return n;
}

/* An expression, or a bare tuple "a, b" (set values). */
static struct node *parse_tuple_expr(struct parser *p)
{
    struct node *n = parse_expr(p);
    if (!tok_is_op(peek(p), ",")) return n;
    struct nodevec v = {0};
    nv_push(p, &v, n);
    uint32_t line = n->line;
    while (accept_op(p, ",")) {
        if (peek(p)->kind == T_CLOSE_STMT || peek(p)->kind == T_CLOSE_EXPR) break;
        nv_push(p, &v, parse_expr(p));
    }
    struct node *t = mk(p, E_TUPLE, line);
    t->args = nv_finish(p, &v, &t->n_args);
    return t;
}

/* Assignment target: name, name.attr, or names separated by commas. */
static struct node *parse_target(struct parser *p, bool allow_attr)
{
    struct tok *t = peek(p);
    bool paren = accept_op(p, "(");
    struct nodevec v = {0};
    do {
        struct tok *nt = peek(p);
        struct node *n = mk(p, E_NAME, nt->line);
        n->name = expect_ident(p, "a variable name");
        if (allow_attr && !paren && v.n == 0 && tok_is_op(peek(p), ".")) {
            p->pos++;
            struct node *m = mk(p, E_ATTR, nt->line);
            m->a = n;
            m->name = expect_ident(p, "an attribute name");
            return m;
        }
        nv_push(p, &v, n);
    } while (accept_op(p, ","));
    if (paren) expect_op(p, ")", "to close '('");
    if (v.n == 1) {
        return v.v[0];
    }
    struct node *tup = mk(p, E_TUPLE, t->line);
    tup->args = nv_finish(p, &v, &tup->n_args);
    return tup;
}

/* ---- statements ---- */

/* Parses statements until {% name %} for one of ends; returns that name's
 * index with the name consumed (the rest of the tag is the caller's). */
static int parse_body(struct parser *p, const char *const *ends, int n_ends, struct nodevec *out,
                      const char *block, uint32_t block_line);

static void parse_macro_params(struct parser *p, struct node *n)
{
    struct nodevec v = {0};
    expect_op(p, "(", "after the macro name");
    while (!accept_op(p, ")")) {
        if (v.n) expect_op(p, ",", "between parameters");
        struct tok *t = peek(p);
        const char *name = expect_ident(p, "a parameter name");
        if (accept_op(p, "=")) {
            struct node *kw = mk(p, E_KWARG, t->line);
            kw->name = name;
            kw->a = parse_expr(p);
            nv_push(p, &v, kw);
        } else {
            struct node *nm = mk(p, E_NAME, t->line);
            nm->name = name;
            nv_push(p, &v, nm);
        }
    }
    n->args = nv_finish(p, &v, &n->n_args);
}

/* A filter chain "name(args) | name ..." applied to an E_CAPTURE. */
static struct node *parse_filter_chain(struct parser *p, uint32_t line)
{
    struct node *n = mk(p, E_CAPTURE, line);
    do {
        struct tok *nt = peek(p);
        const char *name = expect_ident(p, "a filter name");
        int b = jinja__builtin_find(BUILTIN_FILTER, name);
        if (b < 0) perr(p, nt->line, "unknown filter '%s'", name);
        struct node *m = mk(p, E_FILTER, nt->line);
        m->a = n;
        m->name = name;
        m->builtin = (uint16_t)b;
        if (accept_op(p, "(")) m->args = parse_args(p, &m->n_args);
        n = m;
    } while (accept_op(p, "|"));
    return n;
}

static struct node *parse_stmt(struct parser *p)
{
    struct tok *kw = peek(p);
    uint32_t line = kw->line;
    if (kw->kind != T_NAME) {
        char b[64];
        perr(p, line, "expected a statement name after '{%%', got %s", tok_desc(kw, b, sizeof(b)));
    }
    p->pos++;
    enter(p);
    struct node *n;
    if (tok_is_name(kw, "if")) {
        n = mk(p, N_IF, line);
        n->a = parse_expr(p);
        expect_close_stmt(p, "if");
        struct node *cur = n;
        while (1) {
            static const char *const ends[] = {"elif", "else", "endif"};
            struct nodevec body = {0};
            int e = parse_body(p, ends, 3, &body, "if", line);
            cur->body = nv_finish(p, &body, &cur->n_body);
            if (e == 0) {
                struct node *elif = mk(p, N_IF, p->toks[p->pos - 1].line);
                elif->a = parse_expr(p);
                expect_close_stmt(p, "elif");
                cur->alt = palloc(p, sizeof(*cur->alt));
                cur->alt[0] = elif;
                cur->n_alt = 1;
                cur = elif;
                continue;
            }
            if (e == 1) {
                expect_close_stmt(p, "else");
                static const char *const ends2[] = {"endif"};
                struct nodevec alt = {0};
                parse_body(p, ends2, 1, &alt, "if", line);
                cur->alt = nv_finish(p, &alt, &cur->n_alt);
            }
            expect_close_stmt(p, "endif");
            break;
        }
    } else if (tok_is_name(kw, "for")) {
        n = mk(p, N_FOR, line);
        n->target = parse_target(p, false);
        if (!accept_name(p, "in")) perr(p, peek(p)->line, "expected 'in' in 'for'");
        n->a = parse_or(p);
        if (accept_name(p, "if")) n->b = parse_or(p);
        accept_name(p, "recursive");
        expect_close_stmt(p, "for");
        static const char *const ends[] = {"else", "endfor"};
        struct nodevec body = {0};
        int e = parse_body(p, ends, 2, &body, "for", line);
        n->body = nv_finish(p, &body, &n->n_body);
        if (e == 0) {
            expect_close_stmt(p, "else");
            static const char *const ends2[] = {"endfor"};
            struct nodevec alt = {0};
            parse_body(p, ends2, 1, &alt, "for", line);
            n->alt = nv_finish(p, &alt, &n->n_alt);
        }
        expect_close_stmt(p, "endfor");
    } else if (tok_is_name(kw, "set")) {
        struct node *target = parse_target(p, true);
        if (accept_op(p, "=")) {
            n = mk(p, N_SET, line);
            n->target = target;
            n->a = parse_tuple_expr(p);
            expect_close_stmt(p, "set");
        } else {
            n = mk(p, N_SET_BLOCK, line);
            n->target = target;
            if (accept_op(p, "|")) n->b = parse_filter_chain(p, line);
            expect_close_stmt(p, "set");
            static const char *const ends[] = {"endset"};
            struct nodevec body = {0};
            parse_body(p, ends, 1, &body, "set", line);
            n->body = nv_finish(p, &body, &n->n_body);
            expect_close_stmt(p, "endset");
        }
    } else if (tok_is_name(kw, "macro")) {
        n = mk(p, N_MACRO, line);
        n->name = expect_ident(p, "a macro name");
        parse_macro_params(p, n);
        expect_close_stmt(p, "macro");
        static const char *const ends[] = {"endmacro"};
        struct nodevec body = {0};
        parse_body(p, ends, 1, &body, "macro", line);
        n->body = nv_finish(p, &body, &n->n_body);
        if (peek(p)->kind == T_NAME) p->pos++;
        expect_close_stmt(p, "endmacro");
    } else if (tok_is_name(kw, "call")) {
        n = mk(p, N_CALL_BLOCK, line);
        if (tok_is_op(peek(p), "(")) {
            struct node tmp = {0};
            parse_macro_params(p, &tmp);
            n->args = tmp.args;
            n->n_args = tmp.n_args;
        }
        n->a = parse_expr(p);
        if (n->a->kind != E_CALL) perr(p, line, "'call' expects a macro call");
        expect_close_stmt(p, "call");
        static const char *const ends[] = {"endcall"};
        struct nodevec body = {0};
        parse_body(p, ends, 1, &body, "call", line);
        n->body = nv_finish(p, &body, &n->n_body);
        expect_close_stmt(p, "endcall");
    } else if (tok_is_name(kw, "filter")) {
        n = mk(p, N_FILTER_BLOCK, line);
        n->a = parse_filter_chain(p, line);
        expect_close_stmt(p, "filter");
        static const char *const ends[] = {"endfilter"};
        struct nodevec body = {0};
        parse_body(p, ends, 1, &body, "filter", line);
        n->body = nv_finish(p, &body, &n->n_body);
        expect_close_stmt(p, "endfilter");
    } else if (tok_is_name(kw, "break") || tok_is_name(kw, "continue")) {
        n = mk(p, tok_is_name(kw, "break") ? N_BREAK : N_CONTINUE, line);
        expect_close_stmt(p, tok_is_name(kw, "break") ? "break" : "continue");
    } else if (tok_is_name(kw, "do")) {
        n = mk(p, N_DO, line);
        n->a = parse_tuple_expr(p);
        expect_close_stmt(p, "do");
    } else {
        perr(p, line, "unknown statement '%.*s'", (int)MIN(kw->len, 40u), kw->text);
    }
    leave(p);
    return n;
}

static int parse_body(struct parser *p, const char *const *ends, int n_ends, struct nodevec *out,
                      const char *block, uint32_t block_line)
{
    while (1) {
        struct tok *t = peek(p);
        switch (t->kind) {
        case T_EOF:
            if (!block) return -1;
            perr(p, block_line, "'%s' block is never closed (expected '{%% %s %%}')", block,
                 ends[n_ends - 1]);
        case T_TEXT: {
            struct node *n = mk(p, N_TEXT, t->line);
            n->lit = jinja__str(t->text, t->len);
            nv_push(p, out, n);
            p->pos++;
            break;
        }
        case T_OPEN_EXPR: {
            p->pos++;
            struct node *n = mk(p, N_OUTPUT, t->line);
            n->a = parse_tuple_expr(p);
            if (peek(p)->kind != T_CLOSE_EXPR) {
                char b[64];
                perr(p, peek(p)->line, "expected '}}', got %s", tok_desc(peek(p), b, sizeof(b)));
            }
            p->pos++;
            nv_push(p, out, n);
            break;
        }
        case T_OPEN_STMT: {
            struct tok *kw = peek_at(p, 1);
            for (int i = 0; i < n_ends; i++) {
                if (tok_is_name(kw, ends[i])) {
                    p->pos += 2;
                    return i;
                }
            }
            if (kw->kind == T_NAME && kw->len > 3 &&
                (!memcmp(kw->text, "end", 3) || tok_is_name(kw, "else") ||
                 tok_is_name(kw, "elif"))) {
                if (block)
                    perr(p, kw->line, "unexpected '%.*s' inside '%s' (opened on line %u)",
                         (int)MIN(kw->len, 40u), kw->text, block, block_line);
                perr(p, kw->line, "unexpected '%.*s' outside any block", (int)MIN(kw->len, 40u),
                     kw->text);
            }
            if (tok_is_name(kw, "else") || tok_is_name(kw, "elif"))
                perr(p, kw->line, "unexpected '%.*s'", (int)kw->len, kw->text);
            p->pos++;
            nv_push(p, out, parse_stmt(p));
            break;
        }
        default: {
            char b[64];
            perr(p, t->line, "unexpected %s", tok_desc(t, b, sizeof(b)));
        }
        }
    }
}

int jinja_parse(const char *src, size_t len, struct jinja_template **out, struct err_msg *msg)
{
    *out = NULL;
    if (len > JINJA_MAX_SOURCE)
        return err_set(msg, ERR_TOO_LARGE, "template: %zu bytes, more than the %u allowed", len,
                       JINJA_MAX_SOURCE);
    struct jinja_template *t = xcalloc(1, sizeof(*t));
    t->arena.limit = JINJA_MAX_ARENA;
    struct tokvec toks = {0};
    int rc = jinja__lex(src, len, &t->arena, &toks, msg);
    if (rc) goto err_free;
    struct parser p = {.t = t, .toks = toks.v, .n_toks = toks.n, .msg = msg};
    if (setjmp(p.fail)) {
        free(p.names);
        rc = ERR_INVALID;
        goto err_free;
    }
    t->names.loop = intern(&p, "loop", 4);
    t->names.caller = intern(&p, "caller", 6);
    t->names.kwargs = intern(&p, "kwargs", 6);
    t->names.varargs = intern(&p, "varargs", 7);
    struct nodevec body = {0};
    parse_body(&p, NULL, 0, &body, NULL, 0);
    t->body = nv_finish(&p, &body, &t->n_body);
    free(p.names);
    free(toks.v);
    *out = t;
    return 0;
err_free:
    free(toks.v);
    jinja_free(t);
    return rc;
}

void jinja_free(struct jinja_template *t)
{
    if (!t) return;
    jinja__arena_release(&t->arena);
    free(t);
}
