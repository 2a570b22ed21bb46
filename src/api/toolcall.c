/*
 * toolcall.c - the streaming tool-call parser (see toolcall.h).
 *
 * One byte at a time through a state machine; nothing looks ahead, so the
 * events cannot depend on where the pieces were cut. Text that is not yet
 * decided is held in three places: `pending` (a possible marker prefix in
 * content), `ws_hold` (whitespace at the start of the output or after a
 * call, dropped if a call follows or the output ends) and `raw` (the text
 * of a call not yet committed, given back as content on a fallback).
 *
 *   CONTENT --marker--> family body ---------------------------> CONTENT
 *              HERMES   obj  "</tool_call>"
 *              LLAMA3   obj
 *              MISTRAL  "[" obj ("," obj)* "]"
 *              DEEPSEEK ("<｜tool▁call▁begin｜>" TYPE "<｜tool▁sep｜>" NAME "\n```json"
 *                        args "```" "<｜tool▁call▁end｜>")+ "<｜tool▁calls▁end｜>"
 *   obj = { "name": N, "arguments" | "parameters": {...}, other members skipped }
 *
 * JSON inside calls goes through a small validating scanner (struct
 * toolcall_jscan): a value is complete when its last byte is read (a number
 * only when the byte after it arrives, which the scanner hands back).
 *
 * Thread: one owner per parser.
 */
#include "api/toolcall.h"

#include "base/check.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ families */

#define DS_CALLS_BEGIN                                                                             \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define DS_CALLS_END                                                                               \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN                                                                              \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define DS_CALL_END                                                                                \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define DS_SEP                                                                                     \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "sep\xef\xbd\x9c>"

static const char *const hermes_markers[] = {"<tool_call>", "</tool_call>", NULL};
static const char *const llama_markers[] = {"<|python_tag|>", NULL};
static const char *const deepseek_markers[] = {DS_CALLS_BEGIN, DS_CALLS_END, DS_CALL_BEGIN,
                                               DS_CALL_END,    DS_SEP,       NULL};
static const char *const mistral_markers[] = {"[TOOL_CALLS]", NULL};
static const char *const no_markers[] = {NULL};

const char *toolcall_family_name(enum toolcall_family f)
{
    switch (f) {
    case TOOLCALL_HERMES:
        return "hermes";
    case TOOLCALL_LLAMA3:
        return "llama3";
    case TOOLCALL_DEEPSEEK:
        return "deepseek";
    case TOOLCALL_MISTRAL:
        return "mistral";
    case TOOLCALL_NONE:
        break;
    }
    return "none";
}

const char *const *toolcall_family_markers(enum toolcall_family f)
{
    switch (f) {
    case TOOLCALL_HERMES:
        return hermes_markers;
    case TOOLCALL_LLAMA3:
        return llama_markers;
    case TOOLCALL_DEEPSEEK:
        return deepseek_markers;
    case TOOLCALL_MISTRAL:
        return mistral_markers;
    case TOOLCALL_NONE:
        break;
    }
    return no_markers;
}

enum toolcall_family toolcall_family_detect(bool (*has)(const char *text, void *ctx), void *ctx,
                                            const char *tmpl)
{
    if (has("[TOOL_CALLS]", ctx)) return TOOLCALL_MISTRAL;
    if (has(DS_CALLS_BEGIN, ctx)) return TOOLCALL_DEEPSEEK;
    if (has("<tool_call>", ctx)) return TOOLCALL_HERMES;
    if (has("<|python_tag|>", ctx) || has("<|start_header_id|>", ctx)) return TOOLCALL_LLAMA3;
    if (tmpl && strstr(tmpl, "<tool_call>")) return TOOLCALL_HERMES;
    return TOOLCALL_NONE;
}

/* The marker that opens a call block in content. */
static const char *begin_marker(enum toolcall_family f)
{
    switch (f) {
    case TOOLCALL_HERMES:
        return "<tool_call>";
    case TOOLCALL_LLAMA3:
        return "<|python_tag|>";
    case TOOLCALL_DEEPSEEK:
        return DS_CALLS_BEGIN;
    case TOOLCALL_MISTRAL:
        return "[TOOL_CALLS]";
    case TOOLCALL_NONE:
        break;
    }
    return NULL;
}

/* ------------------------------------------------------- JSON scanner */

enum js_state {
    JS_VALUE,       /* a value starts (whitespace first) */
    JS_VALUE_OR_RB, /* after '[': a value or ']' */
    JS_KEY_OR_RC,   /* after '{': a key or '}' */
    JS_KEY,         /* after ',' in an object: a key */
    JS_COLON,       /* after a key */
    JS_AFTER,       /* after a member value: ',' or the container's close */
    JS_STR,         /* inside a string */
    JS_ESC,         /* after a backslash */
    JS_HEX,         /* \uXXXX digits; sub = digits left */
    JS_LIT,         /* true / false / null; sub = position */
    JS_NUM,         /* a number; sub = enum num_state */
    JS_DONE,        /* the top-level value is complete */
};

enum num_state { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

enum js_result {
    JR_MORE,  /* consumed; the value goes on */
    JR_DONE,  /* consumed; the top-level value is complete */
    JR_AGAIN, /* not consumed: a top-level number ended before this byte */
    JR_ERR,   /* not JSON */
};

static bool is_ws(int c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void js_init(struct toolcall_jscan *j)
{
    memset(j, 0, sizeof(*j));
    j->st = JS_VALUE;
}

static int js_value_end(struct toolcall_jscan *j)
{
    if (j->depth == 0) {
        j->st = JS_DONE;
        return JR_DONE;
    }
    j->st = JS_AFTER;
    return JR_MORE;
}

static int js_open(struct toolcall_jscan *j, char c)
{
    if (j->depth == TOOLCALL_MAX_DEPTH) return JR_ERR;
    j->stack[j->depth++] = c;
    j->st = c == '{' ? JS_KEY_OR_RC : JS_VALUE_OR_RB;
    return JR_MORE;
}

static int js_feed(struct toolcall_jscan *j, unsigned char c)
{
    switch (j->st) {
    case JS_VALUE:
    case JS_VALUE_OR_RB:
        if (is_ws(c)) return JR_MORE;
        if (c == ']' && j->st == JS_VALUE_OR_RB) {
            j->depth--;
            return js_value_end(j);
        }
        if (c == '{' || c == '[') return js_open(j, (char)c);
        if (c == '"') {
            j->st = JS_STR;
            j->key = false;
            return JR_MORE;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            j->st = JS_NUM;
            j->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
            return JR_MORE;
        }
        if (c == 't' || c == 'f' || c == 'n') {
            j->lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
            j->sub = 1;
            j->st = JS_LIT;
            return JR_MORE;
        }
        return JR_ERR;
    case JS_KEY_OR_RC:
    case JS_KEY:
        if (is_ws(c)) return JR_MORE;
        if (c == '}' && j->st == JS_KEY_OR_RC) {
            j->depth--;
            return js_value_end(j);
        }
        if (c != '"') return JR_ERR;
        j->st = JS_STR;
        j->key = true;
        return JR_MORE;
    case JS_COLON:
        if (is_ws(c)) return JR_MORE;
        if (c != ':') return JR_ERR;
        j->st = JS_VALUE;
        return JR_MORE;
    case JS_AFTER: {
        if (is_ws(c)) return JR_MORE;
        char top = j->stack[j->depth - 1];
        if (c == ',') {
            j->st = top == '{' ? JS_KEY : JS_VALUE;
            return JR_MORE;
        }
        if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
            j->depth--;
            return js_value_end(j);
        }
        return JR_ERR;
    }
    case JS_STR:
        if (c == '"') {
            if (j->key) {
                j->st = JS_COLON;
                return JR_MORE;
            }
            return js_value_end(j);
        }
        if (c == '\\') j->st = JS_ESC;
        return c < 0x20 ? JR_ERR : JR_MORE;
    case JS_ESC:
        if (c == 'u') {
            j->st = JS_HEX;
            j->sub = 4;
            return JR_MORE;
        }
        if (!strchr("\"\\/bfnrt", c) || c == 0) return JR_ERR;
        j->st = JS_STR;
        return JR_MORE;
    case JS_HEX:
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return JR_ERR;
        if (--j->sub == 0) j->st = JS_STR;
        return JR_MORE;
    case JS_LIT:
        if (c != (unsigned char)j->lit[j->sub]) return JR_ERR;
        if (j->lit[++j->sub] == 0) return js_value_end(j);
        return JR_MORE;
    case JS_NUM: {
        bool digit = c >= '0' && c <= '9';
        switch (j->sub) {
        case N_MINUS:
            if (!digit) return JR_ERR;
            j->sub = c == '0' ? N_ZERO : N_INT;
            return JR_MORE;
        case N_ZERO:
        case N_INT:
            if (digit && j->sub == N_INT) return JR_MORE;
            if (c == '.') {
                j->sub = N_DOT;
                return JR_MORE;
            }
            if (c == 'e' || c == 'E') {
                j->sub = N_E;
                return JR_MORE;
            }
            break;
        case N_DOT:
            if (!digit) return JR_ERR;
            j->sub = N_FRAC;
            return JR_MORE;
        case N_FRAC:
            if (digit) return JR_MORE;
            if (c == 'e' || c == 'E') {
                j->sub = N_E;
                return JR_MORE;
            }
            break;
        case N_E:
            if (c == '+' || c == '-') {
                j->sub = N_ESIGN;
                return JR_MORE;
            }
            if (!digit) return JR_ERR;
            j->sub = N_EXP;
            return JR_MORE;
        case N_ESIGN:
            if (!digit) return JR_ERR;
            j->sub = N_EXP;
            return JR_MORE;
        case N_EXP:
            if (digit) return JR_MORE;
            break;
        }
        /* A complete number followed by a byte that is not part of it
         * (a leading zero followed by a digit is not JSON either). */
        if (digit) return JR_ERR;
        if (j->depth == 0) {
            j->st = JS_DONE;
            return JR_AGAIN;
        }
        j->st = JS_AFTER;
        return js_feed(j, c);
    }
    case JS_DONE:
        break;
    }
    return JR_ERR;
}

/* ------------------------------------------------------------- parser */

enum state {
    ST_CONTENT,       /* plain text; watching for the marker */
    ST_LIT,           /* whitespace, then lit (or lit2) */
    ST_OBJ_OPEN,      /* whitespace, then '{' of a call object */
    ST_OBJ_KEY_OR_RC, /* after '{': a key or '}' */
    ST_OBJ_KEY_NEXT,  /* after ',': a key */
    ST_OBJ_KEY,       /* inside a key */
    ST_OBJ_KEY_ESC,   /* after a backslash in a key */
    ST_OBJ_COLON,     /* after a key */
    ST_OBJ_VALUE,     /* a member value starts */
    ST_OBJ_NAME,      /* inside the name string */
    ST_OBJ_AFTER,     /* after a member: ',' or '}' */
    ST_ARGS,          /* inside the arguments object */
    ST_SKIP,          /* inside a member value we do not use */
    ST_MS_OPEN,       /* Mistral: whitespace, then '[' */
    ST_MS_NEXT,       /* Mistral: after a call object: ',' or ']' */
    ST_DS_TYPE,       /* DeepSeek: the call type, up to <｜tool▁sep｜> */
    ST_DS_NAME,       /* DeepSeek: the name, up to '\n' */
    ST_DS_ARGS_OPEN,  /* DeepSeek: whitespace, then '{' */
    ST_DS_FENCE_DONE, /* pseudo state: DeepSeek's closing fence was read */
    ST_END_CALL,      /* pseudo state: the call is complete */
    ST_END_BLOCK,     /* pseudo state: the call block is complete */
};

enum key_kind { KEY_OTHER, KEY_NAME, KEY_ARGS };

static void step(struct toolcall_parser *p, unsigned char c);

void toolcall_init(struct toolcall_parser *p, enum toolcall_family fam, char *const *names,
                   int n_names, const char *id_prefix, uint64_t id_seed)
{
    memset(p, 0, sizeof(*p));
    p->fam = fam;
    p->names = names;
    p->n_names = n_names;
    snprintf(p->id_prefix, sizeof(p->id_prefix), "%s", id_prefix ? id_prefix : "");
    p->id_state = id_seed;
    p->st = ST_CONTENT;
    p->at_start = true;
}

void toolcall_release(struct toolcall_parser *p)
{
    buf_release(&p->pending);
    buf_release(&p->ws_hold);
    buf_release(&p->raw);
    buf_release(&p->key);
    buf_release(&p->args_buf);
    buf_release(&p->text);
    free(p->ev);
    free(p->ids);
    memset(p, 0, sizeof(*p));
}

/* Events keep their text as offsets into p->text until the feed ends
 * (the buffer may move); ids likewise index p->ids. */
static void add_ev(struct toolcall_parser *p, enum toolcall_ev_kind kind, int index, const char *s,
                   size_t n)
{
    if ((kind == TOOLCALL_EV_CONTENT || kind == TOOLCALL_EV_ARGS) && n == 0) return;
    if (p->n_ev > 0) {
        struct toolcall_ev *last = &p->ev[p->n_ev - 1];
        if (last->kind == kind && last->index == index &&
            (kind == TOOLCALL_EV_CONTENT || kind == TOOLCALL_EV_ARGS)) {
            /* Its text is the tail of p->text (the NUL goes). */
            p->text.len--;
            buf_append(&p->text, s, n);
            buf_putc(&p->text, 0);
            last->len += n;
            return;
        }
    }
    if (p->n_ev == p->cap_ev) {
        p->cap_ev = p->cap_ev ? 2 * p->cap_ev : 16;
        p->ev = xrealloc(p->ev, sizeof(*p->ev) * (size_t)p->cap_ev);
    }
    struct toolcall_ev *e = &p->ev[p->n_ev++];
    e->kind = kind;
    e->index = index;
    e->text = (const char *)(uintptr_t)p->text.len;
    e->len = n;
    e->id = NULL;
    buf_append(&p->text, s, n);
    buf_putc(&p->text, 0);
}

static void emit_content(struct toolcall_parser *p, const char *s, size_t n)
{
    if (n == 0) return;
    if (p->ws_hold.len) {
        add_ev(p, TOOLCALL_EV_CONTENT, 0, p->ws_hold.data, p->ws_hold.len);
        buf_clear(&p->ws_hold);
    }
    add_ev(p, TOOLCALL_EV_CONTENT, 0, s, n);
    p->after_call = false;
}

static void make_id(struct toolcall_parser *p, char *out, size_t cap)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    int n = p->fam == TOOLCALL_MISTRAL ? 9 : 24; /* Mistral's template wants 9 */
    size_t k = 0;
    if (p->fam != TOOLCALL_MISTRAL)
        for (const char *s = p->id_prefix; *s && k + 1 < cap; s++)
            out[k++] = *s;
    for (int i = 0; i < n && k + 1 < cap; i++) {
        /* splitmix64 */
        uint64_t z = (p->id_state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        out[k++] = alnum[z % 62];
    }
    out[k] = 0;
}

static void commit(struct toolcall_parser *p)
{
    p->committed = true;
    p->ids = xrealloc(p->ids, sizeof(*p->ids) * (size_t)(p->n_calls + 1));
    make_id(p, p->ids[p->n_calls], sizeof(p->ids[0]));
    add_ev(p, TOOLCALL_EV_START, p->n_calls, p->name, strlen(p->name));
    buf_clear(&p->ws_hold);
    buf_clear(&p->raw);
}

static void reset_call(struct toolcall_parser *p)
{
    p->has_name = false;
    p->committed = false;
    p->args_done = false;
    p->name[0] = 0;
    buf_clear(&p->args_buf);
    buf_clear(&p->raw);
    buf_clear(&p->key);
}

static void end_call(struct toolcall_parser *p)
{
    if (p->committed) {
        add_ev(p, TOOLCALL_EV_END, p->n_calls, "", 0);
        p->n_calls++;
    }
    reset_call(p);
}

/* Back to content after a malformed call: an uncommitted call's text
 * becomes content; a committed one ends where it is. The byte c that did
 * not fit (not consumed yet, but already appended to raw) is then read as
 * content. */
static void fail(struct toolcall_parser *p, unsigned char c)
{
    if (p->committed) {
        end_call(p);
    } else {
        CHECK(p->raw.len > 0);
        p->raw.len--;
        emit_content(p, p->raw.data, p->raw.len);
        reset_call(p);
    }
    p->st = ST_CONTENT;
    step(p, c);
}

static bool known_name(const struct toolcall_parser *p, const char *s, size_t n)
{
    for (int i = 0; i < p->n_names; i++)
        if (strlen(p->names[i]) == n && !memcmp(p->names[i], s, n)) return true;
    return false;
}

static void expect(struct toolcall_parser *p, const char *lit, int after)
{
    p->st = ST_LIT;
    p->lit = lit;
    p->lit2 = NULL;
    p->lit_pos = 0;
    p->after = after;
}

static void block_done(struct toolcall_parser *p)
{
    end_call(p);
    p->st = ST_CONTENT;
    p->after_call = true;
}

/* Where a family goes after a call object's closing brace. */
static void obj_done(struct toolcall_parser *p)
{
    switch (p->fam) {
    case TOOLCALL_HERMES:
        expect(p, "</tool_call>", ST_END_BLOCK);
        break;
    case TOOLCALL_MISTRAL:
        end_call(p);
        p->st = ST_MS_NEXT;
        break;
    default:
        block_done(p);
        break;
    }
}

/* Enters the family's call block right after its marker. */
static void begin_block(struct toolcall_parser *p)
{
    switch (p->fam) {
    case TOOLCALL_MISTRAL:
        p->st = ST_MS_OPEN;
        break;
    case TOOLCALL_DEEPSEEK:
        expect(p, DS_CALL_BEGIN, ST_DS_TYPE);
        break;
    default:
        p->st = ST_OBJ_OPEN;
        break;
    }
}

static void args_byte(struct toolcall_parser *p, unsigned char c)
{
    if (p->committed)
        add_ev(p, TOOLCALL_EV_ARGS, p->n_calls, (const char *)&c, 1);
    else
        buf_putc(&p->args_buf, (char)c);
}

static void content_byte(struct toolcall_parser *p, unsigned char c)
{
    /* A bare call as the whole answer: Llama's JSON object, Mistral's
     * array. "[" may also start Mistral's marker, so the byte after it
     * decides: '{' or whitespace is the array. */
    if (p->bare_maybe) {
        p->bare_maybe = false;
        if (c == '{' || is_ws(c)) {
            buf_clear(&p->raw);
            buf_append(&p->raw, p->pending.data, p->pending.len);
            buf_clear(&p->pending);
            p->st = ST_OBJ_OPEN;
            step(p, c);
            return;
        }
    }
    if (p->at_start) {
        if (is_ws(c)) {
            buf_putc(&p->ws_hold, (char)c);
            return;
        }
        p->at_start = false;
        if (p->fam == TOOLCALL_LLAMA3 && c == '{') {
            buf_putc(&p->raw, (char)c);
            p->st = ST_OBJ_KEY_OR_RC;
            return;
        }
        p->bare_maybe = p->fam == TOOLCALL_MISTRAL && c == '[';
    }
    if (p->after_call && p->pending.len == 0 && is_ws(c)) {
        buf_putc(&p->ws_hold, (char)c);
        return;
    }
    const char *m = begin_marker(p->fam);
    size_t mlen = strlen(m);
    buf_putc(&p->pending, (char)c);
    if (p->pending.len == mlen && !memcmp(p->pending.data, m, mlen)) {
        buf_clear(&p->pending);
        buf_clear(&p->raw);
        buf_append(&p->raw, m, mlen);
        begin_block(p);
        return;
    }
    /* Keep the longest suffix that can still grow into the marker. */
    size_t k = 0;
    while (k < p->pending.len && memcmp(p->pending.data + k, m, p->pending.len - k))
        k++;
    if (k) {
        emit_content(p, p->pending.data, k);
        memmove(p->pending.data, p->pending.data + k, p->pending.len - k);
        p->pending.len -= k;
        p->pending.data[p->pending.len] = 0;
    }
}

static void step(struct toolcall_parser *p, unsigned char c)
{
    if (p->st == ST_CONTENT) {
        content_byte(p, c);
        return;
    }
    buf_putc(&p->raw, (char)c);
    switch (p->st) {
    case ST_LIT: {
        if (p->lit_pos == 0 && is_ws(c)) return;
        const char *a = p->lit && (unsigned char)p->lit[p->lit_pos] == c ? p->lit : NULL;
        const char *b = p->lit2 && (unsigned char)p->lit2[p->lit_pos] == c ? p->lit2 : NULL;
        if (!a && !b) {
            fail(p, c);
            return;
        }
        p->lit = a;
        p->lit2 = b;
        p->lit_pos++;
        int next = -1;
        if (a && !a[p->lit_pos]) next = p->after;
        if (b && !b[p->lit_pos]) next = p->after2;
        if (next < 0) return;
        if (next == ST_DS_FENCE_DONE) {
            expect(p, DS_CALL_END, ST_END_CALL);
        } else if (next == ST_END_CALL) {
            end_call(p);
            /* DeepSeek: another call, or the end of the block. */
            p->st = ST_LIT;
            p->lit = DS_CALL_BEGIN;
            p->after = ST_DS_TYPE;
            p->lit2 = DS_CALLS_END;
            p->after2 = ST_END_BLOCK;
            p->lit_pos = 0;
        } else if (next == ST_END_BLOCK) {
            block_done(p);
        } else {
            p->st = next;
            buf_clear(&p->key);
        }
        return;
    }
    case ST_OBJ_OPEN:
        if (is_ws(c)) return;
        if (c != '{') break;
        p->st = ST_OBJ_KEY_OR_RC;
        return;
    case ST_OBJ_KEY_OR_RC:
    case ST_OBJ_KEY_NEXT:
        if (is_ws(c)) return;
        if (c == '"') {
            buf_clear(&p->key);
            p->st = ST_OBJ_KEY;
            return;
        }
        if (c == '}' && p->st == ST_OBJ_KEY_OR_RC) break; /* no name */
        break;
    case ST_OBJ_KEY:
        if (c == '"') {
            const char *k = buf_str(&p->key);
            p->key_kind = !strcmp(k, "name")                                    ? KEY_NAME
                          : !strcmp(k, "arguments") || !strcmp(k, "parameters") ? KEY_ARGS
                                                                                : KEY_OTHER;
            p->st = ST_OBJ_COLON;
            return;
        }
        if (c < 0x20 || p->key.len >= TOOLCALL_MAX_NAME) break;
        buf_putc(&p->key, (char)c);
        if (c == '\\') p->st = ST_OBJ_KEY_ESC;
        return;
    case ST_OBJ_KEY_ESC:
        if (c < 0x20) break;
        buf_putc(&p->key, (char)c); /* an escaped key never equals a plain one */
        p->st = ST_OBJ_KEY;
        return;
    case ST_OBJ_COLON:
        if (is_ws(c)) return;
        if (c != ':') break;
        p->st = ST_OBJ_VALUE;
        return;
    case ST_OBJ_VALUE:
        if (is_ws(c)) return;
        if (p->key_kind == KEY_NAME && !p->has_name) {
            if (c != '"') break;
            buf_clear(&p->key);
            p->st = ST_OBJ_NAME;
            return;
        }
        js_init(&p->js);
        if (p->key_kind == KEY_ARGS && !p->args_done) {
            if (c != '{') break; /* arguments must be an object */
            if (p->has_name) commit(p);
            js_feed(&p->js, c);
            args_byte(p, c);
            p->st = ST_ARGS;
            return;
        }
        if (js_feed(&p->js, c) == JR_ERR) break;
        p->st = p->js.st == JS_DONE ? ST_OBJ_AFTER : ST_SKIP;
        return;
    case ST_OBJ_NAME:
        if (c == '"') {
            if (!known_name(p, p->key.data ? p->key.data : "", p->key.len)) break;
            memcpy(p->name, p->key.data, p->key.len);
            p->name[p->key.len] = 0;
            p->has_name = true;
            if (p->args_done) {
                commit(p);
                add_ev(p, TOOLCALL_EV_ARGS, p->n_calls, p->args_buf.data, p->args_buf.len);
            }
            p->st = ST_OBJ_AFTER;
            return;
        }
        /* Tool names are plain identifiers: an escape or a control
         * character means this is not a call to one of them. */
        if (c == '\\' || c < 0x20 || p->key.len + 1 >= TOOLCALL_MAX_NAME) break;
        buf_putc(&p->key, (char)c);
        return;
    case ST_OBJ_AFTER:
        if (is_ws(c)) return;
        if (c == ',') {
            p->st = ST_OBJ_KEY_NEXT;
            return;
        }
        if (c != '}' || !p->has_name) break;
        if (!p->committed) commit(p);
        if (!p->args_done) add_ev(p, TOOLCALL_EV_ARGS, p->n_calls, "{}", 2);
        obj_done(p);
        return;
    case ST_ARGS: {
        int r = js_feed(&p->js, c);
        if (r == JR_ERR) break;
        args_byte(p, c);
        if (r == JR_DONE) {
            p->args_done = true;
            if (p->fam == TOOLCALL_DEEPSEEK)
                expect(p, "```", ST_DS_FENCE_DONE);
            else
                p->st = ST_OBJ_AFTER;
        }
        return;
    }
    case ST_SKIP: {
        int r = js_feed(&p->js, c);
        if (r == JR_ERR) break;
        if (r == JR_MORE) return;
        p->st = ST_OBJ_AFTER;
        if (r == JR_AGAIN) {
            p->raw.len--;
            step(p, c);
        }
        return;
    }
    case ST_MS_OPEN:
        if (is_ws(c)) return;
        if (c != '[') break;
        p->st = ST_OBJ_OPEN;
        return;
    case ST_MS_NEXT:
        if (is_ws(c)) return;
        if (c == ',') {
            p->st = ST_OBJ_OPEN;
            return;
        }
        if (c != ']') break;
        block_done(p);
        return;
    case ST_DS_TYPE: {
        static const char sep[] = DS_SEP;
        if (p->key.len >= 64 + sizeof(sep)) break;
        buf_putc(&p->key, (char)c);
        size_t n = sizeof(sep) - 1;
        if (p->key.len >= n && !memcmp(p->key.data + p->key.len - n, sep, n)) {
            buf_clear(&p->key);
            p->st = ST_DS_NAME;
        }
        return;
    }
    case ST_DS_NAME:
        if (c == '\n') {
            if (!known_name(p, p->key.data ? p->key.data : "", p->key.len)) break;
            memcpy(p->name, p->key.data, p->key.len);
            p->name[p->key.len] = 0;
            p->has_name = true;
            expect(p, "```json", ST_DS_ARGS_OPEN);
            return;
        }
        if (c < 0x20 || p->key.len + 1 >= TOOLCALL_MAX_NAME) break;
        buf_putc(&p->key, (char)c);
        return;
    case ST_DS_ARGS_OPEN:
        if (is_ws(c)) return;
        if (c != '{') break;
        commit(p);
        js_init(&p->js);
        js_feed(&p->js, c);
        args_byte(p, c);
        p->st = ST_ARGS;
        return;
    }
    /* Every `break` above: the byte does not fit the call. */
    fail(p, c);
}

static void finish_events(struct toolcall_parser *p)
{
    for (int i = 0; i < p->n_ev; i++) {
        struct toolcall_ev *e = &p->ev[i];
        e->text = p->text.data + (uintptr_t)e->text;
        if (e->kind == TOOLCALL_EV_START) e->id = p->ids[e->index];
    }
}

int toolcall_feed(struct toolcall_parser *p, const char *text, size_t len)
{
    p->n_ev = 0;
    buf_clear(&p->text);
    for (size_t i = 0; i < len; i++)
        step(p, (unsigned char)text[i]);
    finish_events(p);
    return p->n_ev;
}

int toolcall_finish(struct toolcall_parser *p)
{
    p->n_ev = 0;
    buf_clear(&p->text);
    if (p->st == ST_CONTENT) {
        emit_content(p, p->pending.data, p->pending.len);
        buf_clear(&p->pending);
    } else if (p->committed) {
        end_call(p); /* cut short inside a call: it ends with what was read */
    } else {
        emit_content(p, p->raw.data, p->raw.len);
        reset_call(p);
    }
    p->st = ST_CONTENT;
    buf_clear(&p->ws_hold);
    finish_events(p);
    return p->n_ev;
}

/* ------------------------------------------------------ forced calls */

int toolcall_grammar(enum toolcall_family fam, const json_t *tools, const char *name,
                     struct buf *out, struct err_msg *msg)
{
    if (fam == TOOLCALL_NONE)
        return err_set(msg, ERR_INVALID,
                       "tool_choice: this model has no known tool-call format, so a call cannot "
                       "be forced");
    json_t *alts = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        const json_t *fn = json_object_get(t, "function");
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (!n || (name && strcmp(n, name))) continue;
        json_t *params = json_object_get(fn, "parameters");
        json_t *schema =
            json_is_object(params) ? json_incref(params) : json_pack("{s:s}", "type", "object");
        char label[TOOLCALL_MAX_NAME + 32];
        snprintf(label, sizeof(label), "tools[%zu] '%.*s'", i, TOOLCALL_MAX_NAME, n);
        json_t *jname = json_string(n);
        char *qn = json_dumps(jname, JSON_ENCODE_ANY);
        json_decref(jname);
        struct buf head = {0};
        const char *tail;
        switch (fam) {
        case TOOLCALL_HERMES:
            buf_printf(&head, "<tool_call>\n{\"name\": %s, \"arguments\": ", qn);
            tail = "}\n</tool_call>";
            break;
        case TOOLCALL_LLAMA3:
            buf_printf(&head, "{\"name\": %s, \"parameters\": ", qn);
            tail = "}";
            break;
        case TOOLCALL_MISTRAL:
            buf_printf(&head, "[{\"name\": %s, \"arguments\": ", qn);
            tail = "}]";
            break;
        default:
            buf_printf(&head, "%s%sfunction%s%s\n```json\n", DS_CALLS_BEGIN, DS_CALL_BEGIN, DS_SEP,
                       n);
            tail = "\n```" DS_CALL_END DS_CALLS_END;
            break;
        }
        free(qn);
        json_array_append_new(alts, json_pack("[s,{s:o,s:s},s]", buf_str(&head), "schema", schema,
                                              "label", label, tail));
        buf_release(&head);
    }
    if (json_array_size(alts) == 0) {
        json_decref(alts);
        return err_set(msg, ERR_INVALID, "tool_choice: no tool named '%.64s'", name ? name : "");
    }
    char *s = json_dumps(alts, JSON_COMPACT);
    buf_puts(out, s);
    free(s);
    json_decref(alts);
    return 0;
}
