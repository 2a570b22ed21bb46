/*
 * jinja_impl.h - what the files of the Jinja interpreter share: the arena,
 * the value type, the AST, the render state.
 *
 *   lex.c      preprocessing (trim_blocks, lstrip_blocks) and tokens
 *   parse.c    tokens -> AST (nodes in the template's arena)
 *   value.c    values: JSON wrapping, truthiness, equality, str(), tojson
 *   eval.c     statements and expressions over a render state
 *   builtins.c filters, tests, methods of str/list/dict, global functions
 *
 * Values are 16 bytes and never own anything: strings point into the
 * template (literals), into the caller's JSON (input) or into the render
 * arena (computed). Lists and dicts come in two shapes: JSON-backed (the
 * caller's json_t, read in place, never copied: a render over a long chat
 * converts nothing up front) and native (built by the template, in the
 * arena). Every render allocation lives in one arena freed when the render
 * ends; render errors unwind with longjmp to jinja_render, which is safe
 * because nothing a render allocates lives outside the arena or the render
 * state's capture buffers, which jinja_render releases.
 *
 * Identifiers are interned at parse time: equal names have equal pointers,
 * so variable lookup compares pointers.
 */
#ifndef INFERD_MODEL_JINJA_IMPL_H
#define INFERD_MODEL_JINJA_IMPL_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits that keep a hostile template from taking the process down. */
#define JINJA_MAX_SOURCE     (1u << 20)   /* template bytes */
#define JINJA_MAX_DEPTH      128          /* parse nesting: blocks and expressions */
#define JINJA_MAX_CALL_DEPTH 64           /* macro / caller recursion at render */
#define JINJA_MAX_OUTPUT     (16u << 20)  /* bytes of output (and of any one string) */
#define JINJA_MAX_ITER       1000000      /* loop iterations (and range() items) per render */
#define JINJA_MAX_ARENA      (256u << 20) /* bytes a render may allocate */

/* ---- arena ---- */

struct jinja_arena_chunk;

struct jinja_arena {
    struct jinja_arena_chunk *head; /* newest chunk first; NULL when empty */
    char *ptr;                      /* next free byte in head */
    char *end;                      /* end of head */
    size_t total;                   /* bytes allocated in all chunks */
    size_t limit;                   /* total may not exceed this (0 = none) */
};

/* Returns n bytes aligned to 8, or NULL when the limit would be passed. */
void *jinja__arena_alloc(struct jinja_arena *a, size_t n);
void jinja__arena_release(struct jinja_arena *a);

/* ---- values ---- */

enum jv_kind {
    JV_UNDEF, /* undefined: missing variable or attribute */
    JV_NONE,  /* none / null */
    JV_BOOL,  /* b */
    JV_INT,   /* i */
    JV_FLOAT, /* f */
    JV_STR,   /* s, n bytes of UTF-8 */
    JV_LIST,  /* json (JSON-backed) or list (native) */
    JV_DICT,  /* json (JSON-backed) or dict (native, also namespaces) */
    JV_FUNC,  /* fn: a global function, macro, caller or bound method */
    JV_LOOP,  /* loop: the `loop` variable of a for */
};

#define JV_F_JSON      1 /* list/dict: backed by a json_t */
#define JV_F_NAMESPACE 2 /* dict: made by namespace(); attributes are assignable */
#define JV_F_SAFE      4 /* str: marked safe (no effect: autoescape is off) */

struct jlist;
struct jdict;
struct jfunc;
struct jloop;

struct jv {
    uint8_t kind;  /* enum jv_kind */
    uint8_t flags; /* JV_F_* */
    uint32_t n;    /* JV_STR: length in bytes */
    union {
        bool b;                 /* JV_BOOL */
        int64_t i;              /* JV_INT */
        double f;               /* JV_FLOAT */
        const char *s;          /* JV_STR: not NUL-terminated */
        json_t *json;           /* JV_LIST / JV_DICT with JV_F_JSON */
        struct jlist *list;     /* JV_LIST native */
        struct jdict *dict;     /* JV_DICT native */
        const struct jfunc *fn; /* JV_FUNC */
        struct jloop *loop;     /* JV_LOOP */
    };
};

struct jlist {
    struct jv *items; /* (cap) */
    uint32_t n;       /* items used */
    uint32_t cap;     /* items allocated */
};

struct jdict_entry {
    struct jv key; /* JV_STR */
    struct jv val; /* the value */
};

struct jdict {
    struct jdict_entry *items; /* (cap), insertion order */
    uint32_t n;                /* entries used */
    uint32_t cap;              /* entries allocated */
};

struct jloop {
    int64_t index0;       /* current iteration, from 0 */
    int64_t length;       /* iterations in all */
    const struct jv *all; /* (length) the items iterated, for previtem/nextitem */
};

/* ---- AST ---- */

enum node_kind {
    /* statements */
    N_TEXT,         /* str: text */
    N_OUTPUT,       /* a: expression printed */
    N_IF,           /* a: test, body, alt (elif = an N_IF alone in alt) */
    N_FOR,          /* target, a: iterable, b: filter or NULL, body, alt: else body */
    N_SET,          /* target, a: value */
    N_SET_BLOCK,    /* target, body, b: filter chain applied to the body or NULL */
    N_MACRO,        /* name, args: params (N_NAME or N_KWARG with default), body */
    N_CALL_BLOCK,   /* a: the call (E_CALL), args: caller params, body */
    N_FILTER_BLOCK, /* a: filter chain over E_CAPTURE, body */
    N_BREAK,        /* - */
    N_CONTINUE,     /* - */
    N_DO,           /* a: expression evaluated, result dropped */
    /* expressions */
    E_LIT,     /* lit */
    E_NAME,    /* name */
    E_ATTR,    /* a.name */
    E_INDEX,   /* a[b] */
    E_SLICE,   /* a[b:c:d]; b, c, d may be NULL */
    E_CALL,    /* a(args) */
    E_FILTER,  /* a | name(args) */
    E_TEST,    /* a is [not] name(args); op = 1 when negated */
    E_NOT,     /* not a */
    E_NEG,     /* -a */
    E_POS,     /* +a */
    E_BINARY,  /* a op b */
    E_AND,     /* a and b */
    E_OR,      /* a or b */
    E_COND,    /* b if a else c (c may be NULL) */
    E_LIST,    /* [args] */
    E_TUPLE,   /* (args) */
    E_DICT,    /* {args: key, value, key, value...} */
    E_KWARG,   /* name=a, only inside args */
    E_CAPTURE, /* the text a filter block captured */
};

enum binop {
    OP_ADD,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOT_IN,
};

struct node {
    uint8_t kind;        /* enum node_kind */
    uint8_t op;          /* E_BINARY: enum binop; E_TEST: negated; E_FILTER/E_TEST: builtin */
    uint16_t builtin;    /* E_FILTER / E_TEST: index in the builtin table */
    uint32_t line;       /* template line (1-based) of the construct */
    struct node *a;      /* first operand / child */
    struct node *b;      /* second */
    struct node *c;      /* third */
    struct node *d;      /* fourth (slice step) */
    struct node *target; /* N_FOR / N_SET: E_NAME, E_TUPLE or E_ATTR */
    struct node **args;  /* (n_args) call arguments, list items, params */
    struct node **body;  /* (n_body) statements */
    struct node **alt;   /* (n_alt) else statements */
    const char *name;    /* interned identifier (NUL-terminated) */
    uint32_t n_args;     /* entries in args */
    uint32_t n_body;     /* entries in body */
    uint32_t n_alt;      /* entries in alt */
    struct jv lit;       /* E_LIT value; N_TEXT: the text (JV_STR) */
};

/* Interned names the evaluator compares by pointer. */
struct jinja_names {
    const char *loop;    /* "loop" */
    const char *caller;  /* "caller" */
    const char *kwargs;  /* "kwargs" */
    const char *varargs; /* "varargs" */
};

struct jinja_template {
    struct jinja_arena arena; /* the AST, literals, interned names */
    struct node **body;       /* (n_body) top-level statements */
    uint32_t n_body;          /* entries in body */
    struct jinja_names names; /* interned special names */
};

/* ---- lexer ---- */

enum tok_kind {
    T_EOF,
    T_TEXT,       /* raw text between tags */
    T_OPEN_EXPR,  /* {{ */
    T_CLOSE_EXPR, /* }} */
    T_OPEN_STMT,  /* {% */
    T_CLOSE_STMT, /* %} */
    T_NAME,       /* identifier or keyword */
    T_STRING,     /* string literal, escapes decoded */
    T_INT,        /* integer literal */
    T_FLOAT,      /* float literal */
    T_OP,         /* punctuation / operator, in text */
};

struct tok {
    uint8_t kind;     /* enum tok_kind */
    uint32_t line;    /* template line */
    const char *text; /* T_TEXT / T_NAME / T_STRING / T_OP: bytes (arena); not NUL-terminated */
    uint32_t len;     /* bytes in text */
    int64_t i;        /* T_INT */
    double f;         /* T_FLOAT */
};

struct tokvec {
    struct tok *v; /* (cap) */
    size_t n;      /* used */
    size_t cap;    /* allocated */
};

/* Tokenizes src; strings live in arena. ERR_INVALID with "template line N: ...". */
int jinja__lex(const char *src, size_t len, struct jinja_arena *arena, struct tokvec *out,
               struct err_msg *msg);

/* ---- builtins (builtins.c) ---- */

enum builtin_kind {
    BUILTIN_FILTER,
    BUILTIN_TEST,
};

/* Index of the named filter or test, or -1. */
int jinja__builtin_find(enum builtin_kind kind, const char *name);

/* ---- render state (eval.c) ---- */

struct binding {
    const char *name; /* interned */
    struct jv v;      /* its value */
};

struct render {
    const struct jinja_template *t; /* the template */
    const json_t *ctx;              /* globals from the caller (object) or NULL */
    struct jinja_arena arena;       /* every value made during the render */
    struct buf *out;                /* where output goes now (capture swaps it) */
    struct binding *vars;           /* (cap_vars) binding stack */
    uint32_t n_vars;                /* bindings used */
    uint32_t cap_vars;              /* bindings allocated */
    uint32_t frame;                 /* first binding of the innermost scope */
    uint32_t call_depth;            /* macro calls in progress */
    uint32_t depth;                 /* eval recursion depth */
    uint64_t n_iter;                /* loop iterations so far */
    struct buf **captures;          /* (n_captures) capture buffers, reused by depth */
    uint32_t n_captures;            /* capture buffers allocated */
    uint32_t capture_depth;         /* capture buffers in use */
    uint32_t line;                  /* line of the construct being evaluated */
    struct jv capture;              /* E_CAPTURE: text of the filter block being filtered */
    struct err_msg *msg;            /* where a render error goes */
    jmp_buf fail;                   /* unwinds to jinja_render on error */
};

/* Formats "template line N: ..." into the render's message and unwinds. */
_Noreturn void jinja__fail(struct render *r, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, for the raise_exception text (no line prefix, as transformers shows it). */
_Noreturn void jinja__raise(struct render *r, const char *text, size_t len);

void *jinja__alloc(struct render *r, size_t n);

/* Values (value.c). */
struct jv jinja__from_json(const json_t *j);
struct jv jinja__str(const char *s, size_t n);
struct jv jinja__strz(const char *s);
struct jv jinja__str_copy(struct render *r, const char *s, size_t n);
struct jv jinja__int(int64_t i);
struct jv jinja__float(double f);
struct jv jinja__bool(bool b);
struct jv jinja__none(void);
struct jv jinja__undef(void);
struct jv jinja__list_new(struct render *r, uint32_t cap);
void jinja__list_push(struct render *r, struct jv *list, struct jv item);
struct jv jinja__dict_new(struct render *r, uint32_t cap);
void jinja__dict_set(struct render *r, struct jv *dict, struct jv key, struct jv val);

bool jinja__truthy(const struct jv *v);
const char *jinja__type_name(const struct jv *v);
size_t jinja__len(struct render *r, const struct jv *v);
/* Items of a list (or characters of a string, keys of a dict) as an array. */
uint32_t jinja__iter(struct render *r, const struct jv *v, struct jv **items);
struct jv jinja__list_get(const struct jv *v, size_t i);
/* Dict lookup by key; false when absent. */
bool jinja__dict_get(const struct jv *d, const char *key, size_t n, struct jv *out);
uint32_t jinja__dict_len(const struct jv *d);
/* i-th entry of a dict in insertion order. */
void jinja__dict_entry(struct render *r, const struct jv *d, uint32_t i, struct jv *key,
                       struct jv *val);
bool jinja__equal(const struct jv *a, const struct jv *b);
/* -1/0/1, fails on incomparable types. */
int jinja__compare(struct render *r, const struct jv *a, const struct jv *b, bool case_sensitive);
/* Python str(v) appended to out. */
void jinja__stringify(struct render *r, const struct jv *v, struct buf *out);
/* str(v) as a value (no copy when v is already a string). */
struct jv jinja__to_str(struct render *r, const struct jv *v);

struct tojson_opts {
    int indent;           /* < 0: none */
    bool sort_keys;       /* sort dict keys */
    bool ensure_ascii;    /* \uXXXX for non-ASCII */
    const char *item_sep; /* NULL: ", " (or "," with indent) */
    const char *key_sep;  /* NULL: ": " */
};
void jinja__tojson(struct render *r, const struct jv *v, const struct tojson_opts *o,
                   struct buf *out, int depth);
void jinja__float_repr(double f, struct buf *out);

/* Code points in s[0..n). */
size_t jinja__utf8_count(const char *s, size_t n);

/* Builtins (builtins.c). args: positional then keyword values (names in kw). */
struct call_args {
    struct jv *pos;        /* (n_pos) positional values */
    uint32_t n_pos;        /* positional count */
    struct jv *kw;         /* (n_kw) keyword values */
    const char **kw_names; /* (n_kw) interned or literal names */
    uint32_t n_kw;         /* keyword count */
};

struct jv jinja__apply_filter(struct render *r, const struct node *n, int builtin, struct jv v,
                              struct call_args *a);
bool jinja__apply_test(struct render *r, const struct node *n, int builtin, struct jv v,
                       struct call_args *a);
/* obj.name as a bound method, or undefined when the type has none. */
struct jv jinja__method(struct render *r, struct jv obj, const char *name);
/* Calls a global function or bound method (not macros). */
struct jv jinja__call_builtin(struct render *r, const struct node *n, const struct jfunc *fn,
                              struct call_args *a);
/* Global functions (range, namespace, dict, raise_exception, strftime_now):
 * the id of a name or -1 (parse time), the function for an id (render). */
int jinja__global_find(const char *name);
struct jv jinja__global_get(int id);
/* Whether some type has a method of this name (parse time). */
bool jinja__method_exists(const char *name);
/* Index of a loop.* field name, or -1 (eval.c). */
int jinja__loop_field(const char *name);

enum jfunc_kind {
    FN_GLOBAL, /* global function: id */
    FN_METHOD, /* bound method: self, id */
    FN_MACRO,  /* macro: node */
    FN_CALLER, /* caller() of a call block: node, frame */
};

struct jfunc {
    uint8_t kind;            /* enum jfunc_kind */
    uint16_t id;             /* FN_GLOBAL / FN_METHOD: which */
    struct jv self;          /* FN_METHOD: receiver */
    const struct node *node; /* FN_MACRO: N_MACRO; FN_CALLER: N_CALL_BLOCK */
};

/* eval.c, for builtins that call back (caller(), map to a filter). */
struct jv jinja__call_value(struct render *r, const struct node *n, struct jv fn,
                            struct call_args *a);

#endif
