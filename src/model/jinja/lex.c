/*
 * lex.c - template source -> tokens.
 *
 * First the source is preprocessed the way transformers configures Jinja
 * (and the way @huggingface/jinja reproduces it), in this order:
 *
 *   1. one trailing newline is dropped (keep_trailing_newline=False);
 *   2. lstrip_blocks: spaces and tabs from a line start up to a "{%" or
 *      "{#" are removed;
 *   3. trim_blocks: the newline right after "%}" / "#}" (and "-}") goes;
 *   4. {% generation %} / {% endgeneration %} markers are removed with the
 *      whitespace around them unless the marker has '-' on that side (they
 *      only mark assistant text for training masks).
 *
 * Every preprocessed byte remembers its original line, so errors name lines
 * of the template as written. Then tokens: text between tags; inside
 * {{ }} / {% %} names, literals and operators. {%- / -%} (and {{- -}},
 * {#- -#}) strip whitespace on that side. Comments vanish; {% raw %} text is
 * taken verbatim.
 *
 * Parse time only; token text lives in the template's arena.
 */
#include "model/jinja/jinja_impl.h"

#include "base/check.h"

#include <stdlib.h>
#include <string.h>

struct pp {
    char *s;        /* (n) text */
    uint32_t *line; /* (n) original line of each byte */
    size_t n;       /* bytes */
};

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void pp_free(struct pp *p)
{
    free(p->s);
    free(p->line);
}

static void pp_alloc(struct pp *p, size_t n)
{
    p->s = xmalloc(n + 1);
    p->line = xmalloc((n + 1) * sizeof(uint32_t));
    p->n = 0;
}

static void pp_put(struct pp *p, char c, uint32_t line)
{
    p->s[p->n] = c;
    p->line[p->n++] = line;
}

/* lstrip_blocks: drop [ \t]* at a line start when "{%", "{#" or "{-" follows. */
static void pass_lstrip(const struct pp *in, struct pp *out)
{
    pp_alloc(out, in->n);
    size_t i = 0;
    while (i < in->n) {
        if (i == 0 || in->s[i - 1] == '\n') {
            size_t j = i;
            while (j < in->n && (in->s[j] == ' ' || in->s[j] == '\t'))
                j++;
            if (j + 1 < in->n && in->s[j] == '{' &&
                (in->s[j + 1] == '%' || in->s[j + 1] == '#' || in->s[j + 1] == '-'))
                i = j;
        }
        if (i < in->n) {
            pp_put(out, in->s[i], in->line[i]);
            i++;
        }
    }
}

/* trim_blocks: drop the newline right after "%}", "#}" or "-}". */
static void pass_trim(const struct pp *in, struct pp *out)
{
    pp_alloc(out, in->n);
    size_t i = 0;
    while (i < in->n) {
        char c = in->s[i];
        if ((c == '%' || c == '#' || c == '-') && i + 2 < in->n && in->s[i + 1] == '}' &&
            in->s[i + 2] == '\n') {
            pp_put(out, c, in->line[i]);
            pp_put(out, '}', in->line[i + 1]);
            i += 3;
            continue;
        }
        pp_put(out, c, in->line[i]);
        i++;
    }
}

/* If a generation marker starts at s[i] ("{%"), returns its end (after "%}")
 * and whether it strips left / right; else 0. */
static size_t generation_tag(const struct pp *in, size_t i, bool *lstrip, bool *rstrip)
{
    size_t j = i + 2;
    *lstrip = *rstrip = false;
    if (j < in->n && in->s[j] == '-') *lstrip = true, j++;
    while (j < in->n && is_space(in->s[j]))
        j++;
    if (j + 3 <= in->n && !memcmp(in->s + j, "end", 3)) j += 3;
    if (j + 10 > in->n || memcmp(in->s + j, "generation", 10)) return 0;
    j += 10;
    while (j < in->n && is_space(in->s[j]))
        j++;
    if (j < in->n && in->s[j] == '-') *rstrip = true, j++;
    if (j + 2 > in->n || in->s[j] != '%' || in->s[j + 1] != '}') return 0;
    return j + 2;
}

static void pass_generation(const struct pp *in, struct pp *out)
{
    pp_alloc(out, in->n);
    size_t i = 0;
    while (i < in->n) {
        /* A whitespace run followed by a marker: decide for the whole run. */
        size_t j = i;
        while (j < in->n && is_space(in->s[j]))
            j++;
        bool ls, rs;
        size_t end;
        if (j + 1 < in->n && in->s[j] == '{' && in->s[j + 1] == '%' &&
            (end = generation_tag(in, j, &ls, &rs))) {
            if (!ls)
                for (size_t k = i; k < j; k++)
                    pp_put(out, in->s[k], in->line[k]);
            size_t k = end;
            while (k < in->n && is_space(in->s[k]))
                k++;
            if (!rs)
                for (size_t m = end; m < k; m++)
                    pp_put(out, in->s[m], in->line[m]);
            i = k;
            continue;
        }
        if (j == i) j = i + 1;
        for (size_t k = i; k < j; k++)
            pp_put(out, in->s[k], in->line[k]);
        i = j;
    }
}

static void preprocess(const char *src, size_t len, struct pp *out)
{
    struct pp a, b;
    pp_alloc(&a, len);
    uint32_t line = 1;
    for (size_t i = 0; i < len; i++) {
        pp_put(&a, src[i], line);
        if (src[i] == '\n') line++;
    }
    if (a.n && a.s[a.n - 1] == '\n') a.n--;
    pass_lstrip(&a, &b);
    pp_free(&a);
    pass_trim(&b, &a);
    pp_free(&b);
    pass_generation(&a, out);
    pp_free(&a);
    out->s[out->n] = 0;
}

struct lexer {
    struct pp pp;              /* preprocessed source */
    size_t pos;                /* next byte */
    struct jinja_arena *arena; /* token text */
    struct tokvec *out;        /* tokens */
    struct err_msg *msg;       /* errors */
};

static uint32_t cur_line(const struct lexer *lx)
{
    if (lx->pp.n == 0) return 1;
    return lx->pp.line[lx->pos < lx->pp.n ? lx->pos : lx->pp.n - 1];
}

static struct tok *push(struct lexer *lx, enum tok_kind kind, uint32_t line)
{
    struct tokvec *v = lx->out;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->v = xrealloc(v->v, v->cap * sizeof(*v->v));
    }
    struct tok *t = &v->v[v->n++];
    memset(t, 0, sizeof(*t));
    t->kind = kind;
    t->line = line;
    return t;
}

static char *copy_text(struct lexer *lx, const char *s, size_t n)
{
    char *p = jinja__arena_alloc(lx->arena, n + 1);
    CHECK(p);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* {%- / {{- / {#-: the text just before loses its trailing whitespace. */
static void strip_prev_text(struct lexer *lx)
{
    struct tokvec *v = lx->out;
    if (!v->n || v->v[v->n - 1].kind != T_TEXT) return;
    struct tok *t = &v->v[v->n - 1];
    while (t->len && is_space(t->text[t->len - 1]))
        t->len--;
    if (!t->len) v->n--;
}

static void skip_space(struct lexer *lx)
{
    while (lx->pos < lx->pp.n && is_space(lx->pp.s[lx->pos]))
        lx->pos++;
}

static int lex_error(struct lexer *lx, uint32_t line, const char *what)
{
    return err_set(lx->msg, ERR_INVALID, "template line %u: %s", line, what);
}

static void put_utf8(struct buf *b, uint32_t cp)
{
    if (cp < 0x80) {
        buf_putc(b, (char)cp);
    } else if (cp < 0x800) {
        buf_putc(b, (char)(0xc0 | (cp >> 6)));
        buf_putc(b, (char)(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
        buf_putc(b, (char)(0xe0 | (cp >> 12)));
        buf_putc(b, (char)(0x80 | ((cp >> 6) & 0x3f)));
        buf_putc(b, (char)(0x80 | (cp & 0x3f)));
    } else {
        buf_putc(b, (char)(0xf0 | (cp >> 18)));
        buf_putc(b, (char)(0x80 | ((cp >> 12) & 0x3f)));
        buf_putc(b, (char)(0x80 | ((cp >> 6) & 0x3f)));
        buf_putc(b, (char)(0x80 | (cp & 0x3f)));
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal at pos (the quote); Python escapes. */
static int lex_string(struct lexer *lx)
{
    uint32_t line = cur_line(lx);
    char q = lx->pp.s[lx->pos++];
    struct buf b = {0};
    const char *s = lx->pp.s;
    while (1) {
        if (lx->pos >= lx->pp.n) {
            buf_release(&b);
            return lex_error(lx, line, "unterminated string literal");
        }
        char c = s[lx->pos++];
        if (c == q) break;
        if (c != '\\') {
            buf_putc(&b, c);
            continue;
        }
        if (lx->pos >= lx->pp.n) continue;
        char e = s[lx->pos++];
        switch (e) {
        case 'n':
            buf_putc(&b, '\n');
            break;
        case 't':
            buf_putc(&b, '\t');
            break;
        case 'r':
            buf_putc(&b, '\r');
            break;
        case 'b':
            buf_putc(&b, '\b');
            break;
        case 'f':
            buf_putc(&b, '\f');
            break;
        case 'v':
            buf_putc(&b, '\v');
            break;
        case '0':
            buf_putc(&b, '\0');
            break;
        case '\\':
            buf_putc(&b, '\\');
            break;
        case '\'':
            buf_putc(&b, '\'');
            break;
        case '"':
            buf_putc(&b, '"');
            break;
        case '\n':
            break;
        case 'x':
        case 'u':
        case 'U': {
            int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            for (int k = 0; k < nd; k++) {
                int h = lx->pos < lx->pp.n ? hexval(s[lx->pos]) : -1;
                if (h < 0) {
                    buf_release(&b);
                    return lex_error(lx, line, "bad \\x / \\u escape in string literal");
                }
                cp = cp * 16 + (uint32_t)h;
                lx->pos++;
            }
            if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) cp = 0xfffd;
            put_utf8(&b, cp);
            break;
        }
        default:
            /* Python keeps unknown escapes as written. */
            buf_putc(&b, '\\');
            buf_putc(&b, e);
        }
    }
    struct tok *t = push(lx, T_STRING, line);
    t->text = copy_text(lx, b.data ? b.data : "", b.len);
    t->len = (uint32_t)b.len;
    buf_release(&b);
    return 0;
}

static const char *const ops2[] = {"**", "//", "==", "!=", "<=", ">="};
static const char ops1[] = "()[]{},.:|+-*/%~<>=";

/* Tokens of one {{ }} or {% %} tag, up to and including its close. */
static int lex_tag(struct lexer *lx, bool is_expr)
{
    const char *s = lx->pp.s;
    int braces = 0;
    uint32_t open_line = cur_line(lx);
    bool first = true;
    while (1) {
        while (lx->pos < lx->pp.n && is_space(s[lx->pos]))
            lx->pos++;
        if (lx->pos >= lx->pp.n)
            return lex_error(lx, open_line,
                             is_expr ? "'{{' without a closing '}}'"
                                     : "'{%' without a closing '%}'");
        size_t p = lx->pos;
        uint32_t line = cur_line(lx);
        char close = is_expr ? '}' : '%';
        bool strip = s[p] == '-' && p + 2 < lx->pp.n + 1 && s[p + 1] == close && s[p + 2] == '}';
        if ((s[p] == close && p + 1 < lx->pp.n && s[p + 1] == '}' && braces == 0) ||
            (strip && braces == 0)) {
            push(lx, is_expr ? T_CLOSE_EXPR : T_CLOSE_STMT, line);
            lx->pos += strip ? 3 : 2;
            if (strip) skip_space(lx);
            return 0;
        }
        char c = s[p];
        if (c == '\'' || c == '"') {
            int rc = lex_string(lx);
            if (rc) return rc;
        } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            size_t e = p;
            while (e < lx->pp.n && ((s[e] >= 'a' && s[e] <= 'z') || (s[e] >= 'A' && s[e] <= 'Z') ||
                                    (s[e] >= '0' && s[e] <= '9') || s[e] == '_'))
                e++;
            struct tok *t = push(lx, T_NAME, line);
            t->text = copy_text(lx, s + p, e - p);
            t->len = (uint32_t)(e - p);
            lx->pos = e;
            /* {% raw %}: everything up to {% endraw %} is text. */
            if (first && !is_expr && t->len == 3 && !memcmp(t->text, "raw", 3)) {
                lx->out->n--;
                while (lx->pos < lx->pp.n && is_space(s[lx->pos]))
                    lx->pos++;
                bool rstrip = false;
                if (lx->pos < lx->pp.n && s[lx->pos] == '-') rstrip = true, lx->pos++;
                if (lx->pos + 1 >= lx->pp.n || s[lx->pos] != '%' || s[lx->pos + 1] != '}')
                    return lex_error(lx, line, "expected '%}' after 'raw'");
                lx->pos += 2;
                lx->out->n--; /* the {% token */
                if (rstrip) skip_space(lx);
                size_t start = lx->pos;
                const char *end = NULL;
                for (size_t k = start; k + 1 < lx->pp.n; k++) {
                    if (s[k] != '{' || s[k + 1] != '%') continue;
                    size_t m = k + 2;
                    if (m < lx->pp.n && s[m] == '-') m++;
                    while (m < lx->pp.n && is_space(s[m]))
                        m++;
                    if (m + 6 <= lx->pp.n && !memcmp(s + m, "endraw", 6)) {
                        end = s + k;
                        bool lstrip = s[k + 2] == '-';
                        m += 6;
                        while (m < lx->pp.n && is_space(s[m]))
                            m++;
                        bool rs2 = false;
                        if (m < lx->pp.n && s[m] == '-') rs2 = true, m++;
                        if (m + 1 >= lx->pp.n || s[m] != '%' || s[m + 1] != '}')
                            return lex_error(lx, cur_line(lx), "bad {% endraw %}");
                        size_t tl = (size_t)(end - (s + start));
                        if (lstrip)
                            while (tl && is_space(s[start + tl - 1]))
                                tl--;
                        if (tl) {
                            struct tok *tt = push(lx, T_TEXT, line);
                            tt->text = copy_text(lx, s + start, tl);
                            tt->len = (uint32_t)tl;
                        }
                        lx->pos = m + 2;
                        if (rs2) skip_space(lx);
                        return 0;
                    }
                }
                return lex_error(lx, line, "{% raw %} without {% endraw %}");
            }
        } else if (c >= '0' && c <= '9') {
            size_t e = p;
            while (e < lx->pp.n && ((s[e] >= '0' && s[e] <= '9') || s[e] == '_'))
                e++;
            bool is_float = false;
            if (e + 1 < lx->pp.n && s[e] == '.' && s[e + 1] >= '0' && s[e + 1] <= '9') {
                is_float = true;
                e++;
                while (e < lx->pp.n && s[e] >= '0' && s[e] <= '9')
                    e++;
            }
            if (e < lx->pp.n && (s[e] == 'e' || s[e] == 'E')) {
                size_t m = e + 1;
                if (m < lx->pp.n && (s[m] == '+' || s[m] == '-')) m++;
                if (m < lx->pp.n && s[m] >= '0' && s[m] <= '9') {
                    is_float = true;
                    e = m;
                    while (e < lx->pp.n && s[e] >= '0' && s[e] <= '9')
                        e++;
                }
            }
            char tmp[64];
            size_t k = 0;
            for (size_t q = p; q < e && k < sizeof(tmp) - 1; q++)
                if (s[q] != '_') tmp[k++] = s[q];
            tmp[k] = 0;
            if (e - p >= sizeof(tmp) - 1) return lex_error(lx, line, "number literal too long");
            struct tok *t = push(lx, is_float ? T_FLOAT : T_INT, line);
            if (is_float) {
                t->f = strtod(tmp, NULL);
            } else {
                char *endp;
                unsigned long long u = strtoull(tmp, &endp, 10);
                if (u > (unsigned long long)INT64_MAX)
                    return lex_error(lx, line, "integer literal too large");
                t->i = (int64_t)u;
            }
            lx->pos = e;
        } else {
            size_t oplen = 0;
            for (size_t k = 0; k < ARRAY_LEN(ops2); k++)
                if (p + 1 < lx->pp.n && s[p] == ops2[k][0] && s[p + 1] == ops2[k][1]) oplen = 2;
            if (!oplen && strchr(ops1, c) && c) oplen = 1;
            if (!oplen) {
                char what[64];
                if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7f)
                    snprintf(what, sizeof(what), "unexpected character '%c'", c);
                else
                    snprintf(what, sizeof(what), "unexpected byte 0x%02x", (unsigned char)c);
                return lex_error(lx, line, what);
            }
            if (c == '{') braces++;
            if (c == '}') braces--;
            struct tok *t = push(lx, T_OP, line);
            t->text = copy_text(lx, s + p, oplen);
            t->len = (uint32_t)oplen;
            lx->pos += oplen;
        }
        first = false;
    }
}

int jinja__lex(const char *src, size_t len, struct jinja_arena *arena, struct tokvec *out,
               struct err_msg *msg)
{
    struct lexer lx = {.arena = arena, .out = out, .msg = msg};
    preprocess(src, len, &lx.pp);
    const char *s = lx.pp.s;
    int rc = 0;
    while (lx.pos < lx.pp.n) {
        size_t p = lx.pos;
        /* Text up to the next tag. */
        size_t e = p;
        while (e < lx.pp.n && !(s[e] == '{' && e + 1 < lx.pp.n &&
                                (s[e + 1] == '{' || s[e + 1] == '%' || s[e + 1] == '#')))
            e++;
        if (e > p) {
            struct tok *t = push(&lx, T_TEXT, lx.pp.line[p]);
            t->text = copy_text(&lx, s + p, e - p);
            t->len = (uint32_t)(e - p);
            lx.pos = e;
            continue;
        }
        uint32_t line = lx.pp.line[p];
        bool strip = p + 2 < lx.pp.n && s[p + 2] == '-';
        if (s[p + 1] == '#') {
            size_t k = p + 2;
            while (k + 1 < lx.pp.n && !(s[k] == '#' && s[k + 1] == '}'))
                k++;
            if (k + 1 >= lx.pp.n) {
                rc = lex_error(&lx, line, "'{#' without a closing '#}'");
                goto out;
            }
            if (strip) strip_prev_text(&lx);
            bool strip_after = k > p + 2 && s[k - 1] == '-';
            lx.pos = k + 2;
            if (strip_after) skip_space(&lx);
            continue;
        }
        bool is_expr = s[p + 1] == '{';
        if (strip) strip_prev_text(&lx);
        push(&lx, is_expr ? T_OPEN_EXPR : T_OPEN_STMT, line);
        lx.pos = p + 2 + (strip ? 1 : 0);
        /* {%+ disables lstrip for this tag; it was already applied, accept it. */
        if (!strip && lx.pos < lx.pp.n && s[lx.pos] == '+') lx.pos++;
        rc = lex_tag(&lx, is_expr);
        if (rc) goto out;
    }
    push(&lx, T_EOF, cur_line(&lx));
out:
    pp_free(&lx.pp);
    return rc;
}
