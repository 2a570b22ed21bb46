/*
 * http_parse.c - one HTTP/1.1 request from bytes: the head through the
 * Node.js parser (libhttp-parser) under our own line discipline and framing
 * rules, the body through our own decoder. No sockets: http__parse_feed
 * takes any slice of the byte stream and says MORE / BODY / DONE / FAILED
 * (http_impl.h), so the connection and the fuzz target drive it alike.
 *
 *   bytes -> [line discipline] -> http_parser (request line, field syntax)
 *                                  -> callbacks: URL, fields, our counts
 *         -> head end: our rules (version, target, Host, CL / TE, Expect,
 *            size) -> framing -> [length | chunked decoder] -> DONE
 *
 * Why two layers over the head. http_parser checks token syntax well, but
 * several framing decisions are exactly where request smuggling lives and
 * its versions differ on them, so each is also ours (RFC 9112):
 *   - line endings: CR LF only; a bare CR or a bare LF anywhere in the head
 *     is a 400 (http_parser takes a bare LF as a line end);
 *   - obs-fold (a field line starting with SP / HT, also right after the
 *     request line): 400 (http_parser silently joins it);
 *   - Content-Length: one field, 1*DIGIT. A second one is refused even when
 *     identical (RFC 9112 6.3 permits either; no client we serve sends two);
 *   - Transfer-Encoding: one field whose value is exactly "chunked"; any
 *     other coding, a list ("gzip, chunked"), a repeat, TE in HTTP/1.0, or TE
 *     together with Content-Length: 400;
 *   - the body: after on_headers_complete we tell http_parser there is no
 *     body and decode it ourselves. Its chunk-extension state accepts any
 *     byte up to CR, bare LF included - the "chunk extension LF" smuggling
 *     class - so chunk-size lines are ours: hex digits, BWS, ';' extensions
 *     of visible bytes, CR LF; data; CR LF; trailers with the head's line
 *     rules (then dropped: nothing the owner reads comes from a trailer).
 * Host: HTTP/1.1 requires exactly one (RFC 9112 3.2); curl, undici / fetch,
 * Python's http.client and the official SDKs all send one, so a missing or
 * repeated Host is a 400; HTTP/1.0 needs none.
 * Versions: HTTP/1.0 and 1.1; "GET /" without a version (HTTP/0.9) is 400,
 * anything above 1.1 is 505. Targets: origin-form ("/...") only, "*" for
 * OPTIONS; no fragment. Expect: 100-continue (HTTP/1.1; ignored for 1.0 as
 * RFC 9110 10.1.1 says), anything else 417. Methods: whatever http_parser
 * knows (its table of 34) goes to the owner, who routes and answers 405;
 * a method outside it is a 400.
 *
 * Limits: head bytes (leading empty lines included) over max_header_bytes,
 * or more than HTTP_MAX_FIELDS fields: 431; trailers likewise on their own.
 * An announced Content-Length over max_body_bytes: 413 at the head's end,
 * before any body byte; a chunked body: 413 as soon as a chunk size would
 * take it past the limit. A chunk-size line over HTTP_CHUNK_LINE_MAX: 400.
 *
 * Memory: the head buffer (URL, then each name and value, NUL after each;
 * repeated names get their joined value appended at the head's end, so it
 * is fixed, and pointers into it stable, from then on) and the body buffer
 * belong to the parser until the connection moves them into the request.
 */
#include "net/http_impl.h"

#include "base/check.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool fail(struct http__parse *p, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail(struct http__parse *p, int status, const char *fmt, ...)
{
    if (p->state == HTTP__PS_FAILED) return false; /* the first reason stands */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof(p->why), fmt, ap);
    va_end(ap);
    p->status = status;
    p->state = HTTP__PS_FAILED;
    return false;
}

/* RFC 9110 5.6.2 tchar. */
static bool is_tchar(unsigned char c)
{
    if (isalnum(c)) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t';
}

/* Does the [s, s + n) text equal the lower-case word w, ignoring case? */
static bool word_is(const char *s, size_t n, const char *w)
{
    return strlen(w) == n && strncasecmp(s, w, n) == 0;
}

/* ------------------------------------------------- http_parser callbacks */

static struct http__field *field_last(struct http__parse *p)
{
    return p->n_fields ? &p->fields[p->n_fields - 1] : NULL;
}

/* The value of the last field is complete: NUL-terminate it without its
 * trailing OWS and apply what it means for framing. */
static bool field_end(struct http__parse *p)
{
    struct http__field *f = field_last(p);
    if (!f) return true;
    if (p->cb_last == 1) { /* a name without any value callback: empty value */
        buf_putc(&p->head, '\0');
        f->value_off = (uint32_t)p->head.len;
        f->value_len = 0;
    }
    while (f->value_len && is_ws(p->head.data[f->value_off + f->value_len - 1]))
        f->value_len--;
    p->head.len = f->value_off + f->value_len;
    buf_putc(&p->head, '\0');
    p->cb_last = 0;

    const char *name = p->head.data + f->name_off;
    const char *v = p->head.data + f->value_off;
    size_t n = f->value_len;
    if (word_is(name, f->name_len, "content-length")) {
        if (++p->n_content_length > 1) return fail(p, 400, "more than one content-length header");
        uint64_t x = 0;
        if (n == 0 || n > 19) return fail(p, 400, "content-length: not a decimal number");
        for (size_t i = 0; i < n; i++) {
            if (v[i] < '0' || v[i] > '9')
                return fail(p, 400, "content-length: not a decimal number");
            x = x * 10 + (uint64_t)(v[i] - '0');
        }
        p->content_length = x;
    } else if (word_is(name, f->name_len, "transfer-encoding")) {
        p->n_transfer_encoding++;
        if (!word_is(v, n, "chunked")) p->te_chunked_only = false;
    } else if (word_is(name, f->name_len, "host")) {
        p->n_host++;
    } else if (word_is(name, f->name_len, "expect")) {
        if (word_is(v, n, "100-continue"))
            p->expect_continue = true;
        else
            p->expect_other = true;
    } else if (word_is(name, f->name_len, "connection")) {
        /* A comma-separated list of options (RFC 9110 7.6.1). */
        size_t i = 0;
        while (i < n) {
            while (i < n && (is_ws(v[i]) || v[i] == ','))
                i++;
            size_t s = i;
            while (i < n && v[i] != ',')
                i++;
            size_t e = i;
            while (e > s && is_ws(v[e - 1]))
                e--;
            if (word_is(v + s, e - s, "close")) p->conn_close = true;
            if (word_is(v + s, e - s, "keep-alive")) p->conn_keep_alive = true;
        }
    }
    return true;
}

static int cb_url(http_parser *hp, const char *at, size_t len)
{
    struct http__parse *p = hp->data;
    buf_append(&p->head, at, len);
    p->url_len += (uint32_t)len;
    return 0;
}

static int cb_header_field(http_parser *hp, const char *at, size_t len)
{
    struct http__parse *p = hp->data;
    if (p->cb_last != 1) { /* a new field */
        if (p->cb_last == 2 && !field_end(p)) return -1;
        /* feed_head refuses the line past the limit when it ends; until then
         * its bytes are not kept. */
        if (p->n_fields == HTTP_MAX_FIELDS) {
            p->cb_last = 3;
            return 0;
        }
        if (p->n_fields == p->cap_fields) {
            p->cap_fields = p->cap_fields ? p->cap_fields * 2 : 16;
            p->fields = xrealloc(p->fields, (size_t)p->cap_fields * sizeof(*p->fields));
        }
        struct http__field *f = &p->fields[p->n_fields++];
        memset(f, 0, sizeof(*f));
        f->name_off = (uint32_t)p->head.len;
        p->cb_last = 1;
    }
    if (p->cb_last == 3) return 0;
    buf_append(&p->head, at, len);
    field_last(p)->name_len += (uint32_t)len;
    return 0;
}

static int cb_header_value(http_parser *hp, const char *at, size_t len)
{
    struct http__parse *p = hp->data;
    if (p->cb_last == 3) return 0; /* a field past the limit */
    struct http__field *f = field_last(p);
    if (!f) return -1; /* a value before any name: http_parser never does this */
    if (p->cb_last == 1) {
        buf_putc(&p->head, '\0');
        f->value_off = (uint32_t)p->head.len;
        p->cb_last = 2;
    }
    buf_append(&p->head, at, len);
    f->value_len += (uint32_t)len;
    return 0;
}

static int cb_headers_complete(http_parser *hp)
{
    struct http__parse *p = hp->data;
    if ((p->cb_last == 1 || p->cb_last == 2) && !field_end(p)) return -1;
    p->headers_complete = true;
    /* 1: "no body" - we frame the body ourselves (see the file comment). */
    return 1;
}

static const http_parser_settings parser_settings = {
    .on_url = cb_url,
    .on_header_field = cb_header_field,
    .on_header_value = cb_header_value,
    .on_headers_complete = cb_headers_complete,
};

/* ------------------------------------------------------------- the head */

static pthread_once_t parser_limit_once = PTHREAD_ONCE_INIT;

/* http_parser's own header-size limit (80 KiB, process-wide) would cut a
 * head our configured limit allows; ours is checked first, so lift its. */
static void parser_limit_lift(void)
{
    http_parser_set_max_header_size(UINT32_MAX / 2);
}

void http__parse_init(struct http__parse *p, size_t max_header_bytes, size_t max_body_bytes)
{
    pthread_once(&parser_limit_once, parser_limit_lift);
    memset(p, 0, sizeof(*p));
    p->max_header_bytes = max_header_bytes;
    p->max_body_bytes = max_body_bytes;
    http__parse_reset(p);
}

void http__parse_release(struct http__parse *p)
{
    buf_release(&p->head);
    buf_release(&p->body);
    free(p->fields);
    p->fields = NULL;
    p->cap_fields = p->n_fields = 0;
}

void http__parse_reset(struct http__parse *p)
{
    size_t mh = p->max_header_bytes, mb = p->max_body_bytes;
    struct buf head = p->head, body = p->body;
    struct http__field *fields = p->fields;
    int cap = p->cap_fields;
    memset(p, 0, sizeof(*p));
    p->max_header_bytes = mh;
    p->max_body_bytes = mb;
    /* Keep the storage for the next request (a keep-alive connection parses
     * many); a request that was handed over took its buffers already. */
    p->head = head;
    buf_clear(&p->head);
    p->body = body;
    buf_clear(&p->body);
    p->fields = fields;
    p->cap_fields = cap;
    p->te_chunked_only = true;
    http_parser_init(&p->hp, HTTP_REQUEST);
    p->hp.data = p;
}

/* Maps an http_parser error to our status and reason; ours, set in a
 * callback, stands. */
static bool fail_parser(struct http__parse *p)
{
    if (p->state == HTTP__PS_FAILED) return false;
    enum http_errno e = HTTP_PARSER_ERRNO(&p->hp);
    switch (e) {
    case HPE_HEADER_OVERFLOW:
        return fail(p, 431, "request head over the parser's limit");
    case HPE_INVALID_METHOD:
        return fail(p, 400, "request line: unknown method");
    case HPE_INVALID_URL:
    case HPE_INVALID_HOST:
    case HPE_INVALID_PORT:
    case HPE_INVALID_PATH:
    case HPE_INVALID_QUERY_STRING:
    case HPE_INVALID_FRAGMENT:
        return fail(p, 400, "request line: invalid request target");
    case HPE_INVALID_VERSION:
        return fail(p, 400, "request line: invalid http version");
    case HPE_INVALID_HEADER_TOKEN:
        return fail(p, 400, "invalid character in a header field");
    case HPE_INVALID_CONTENT_LENGTH:
        return fail(p, 400, "content-length: not a decimal number");
    case HPE_UNEXPECTED_CONTENT_LENGTH: {
        /* Raised at a second Content-Length's value, or at the head's end
         * when Transfer-Encoding came too. */
        const struct http__field *f = field_last(p);
        if (f && p->n_content_length &&
            word_is(p->head.data + f->name_off, f->name_len, "content-length"))
            return fail(p, 400, "more than one content-length header");
        return fail(p, 400, "content-length with transfer-encoding");
    }
    default:
        return fail(p, 400, "malformed request head (%s)", http_errno_description(e));
    }
}

/* The request line (len bytes with its CR LF) ended: its shape, version,
 * method, target. */
static bool request_line_done(struct http__parse *p, size_t len)
{
    int major = p->hp.http_major, minor = p->hp.http_minor;
    if (major == 0) return fail(p, 400, "request line: no http version (http/0.9)");
    const char *method = http_method_str((enum http_method)p->hp.method);
    /* Exactly "METHOD SP target SP HTTP/x.y CR LF" (RFC 9112 3): this parser
     * build skips repeated spaces and does not check the "HTTP/" letters. */
    char want[24];
    snprintf(want, sizeof(want), " HTTP/%d.%d\r\n", major, minor);
    if (major > 9 || minor > 9 || len != strlen(method) + 1 + p->url_len + 11 ||
        memcmp(p->rl_tail, want, 11) != 0)
        return fail(p, 400, "request line: malformed (expected 'METHOD /target HTTP/1.1')");
    if (major > 1 || minor > 1)
        return fail(p, 505, "http version %d.%d is not supported (1.0 and 1.1 are)", major, minor);
    p->http_minor = minor;
    p->method = method;
    /* The URL is all the head holds so far. */
    if (p->head.len != p->url_len) return fail(p, 400, "request line: malformed");
    buf_putc(&p->head, '\0');
    const char *u = p->head.data;
    if (p->url_len == 0) return fail(p, 400, "request line: no request target");
    if (strcmp(u, "*") == 0) {
        if (p->hp.method != HTTP_OPTIONS)
            return fail(p, 400, "request target '*' is only for OPTIONS");
    } else if (u[0] != '/') {
        return fail(p, 400, "request target must be a path starting with '/' (origin-form)");
    }
    if (memchr(u, '#', p->url_len)) return fail(p, 400, "request target has a fragment ('#')");
    char *q = memchr(p->head.data, '?', p->url_len);
    if (q) *q = '\0';
    p->query_off = q ? (uint32_t)(q - p->head.data) + 1 : p->url_len;
    p->target_ok = true;
    return true;
}

/* Joins repeated names into their first entry (RFC 9110 5.3) and points
 * the table into the head, which is fixed from here on. The appends may move
 * the buffer, so pointers come last. At most HTTP_MAX_FIELDS fields: the
 * quadratic scan is bounded. */
static void fields_finish(struct http__parse *p)
{
    for (int i = 0; i < p->n_fields; i++) {
        struct http__field *f = &p->fields[i];
        if (f->merged) continue;
        bool repeated = false;
        for (int j = i + 1; j < p->n_fields; j++) {
            struct http__field *g = &p->fields[j];
            if (g->merged || g->name_len != f->name_len ||
                strncasecmp(p->head.data + f->name_off, p->head.data + g->name_off, f->name_len) !=
                    0)
                continue;
            /* Reserve first: the source of each copy is this buffer. */
            if (!repeated) {
                size_t start = p->head.len;
                buf_reserve(&p->head, f->value_len);
                buf_append(&p->head, p->head.data + f->value_off, f->value_len);
                f->value_off = (uint32_t)start;
                repeated = true;
            }
            buf_reserve(&p->head, 2 + (size_t)g->value_len);
            buf_puts(&p->head, ", ");
            buf_append(&p->head, p->head.data + g->value_off, g->value_len);
            f->value_len = (uint32_t)(p->head.len - f->value_off);
            g->merged = true;
        }
        if (repeated) buf_putc(&p->head, '\0');
    }
    for (int i = 0; i < p->n_fields; i++) {
        p->fields[i].name = p->head.data + p->fields[i].name_off;
        p->fields[i].value = p->head.data + p->fields[i].value_off;
    }
    p->path = p->head.data;
    p->query = p->head.data + p->query_off;
}

/* The head is complete: the field table, then our framing rules. */
static bool head_done(struct http__parse *p)
{
    if (!p->headers_complete || !p->target_ok) return fail(p, 400, "malformed request head");
    fields_finish(p);
    if (p->http_minor == 1 && p->n_host == 0) return fail(p, 400, "missing host header");
    if (p->n_host > 1) return fail(p, 400, "more than one host header");
    if (p->n_transfer_encoding) {
        if (p->http_minor == 0) return fail(p, 400, "transfer-encoding in an http/1.0 request");
        if (p->n_transfer_encoding > 1)
            return fail(p, 400, "more than one transfer-encoding header");
        if (!p->te_chunked_only)
            return fail(p, 400, "transfer-encoding: only 'chunked' is supported");
        if (p->n_content_length) return fail(p, 400, "content-length with transfer-encoding");
        p->framing = HTTP__FRAMING_CHUNKED;
    } else if (p->content_length > 0) {
        p->framing = HTTP__FRAMING_LENGTH;
    }
    if (p->http_minor == 0) p->expect_continue = false, p->expect_other = false;
    if (p->expect_other) return fail(p, 417, "expect: only 100-continue is supported");
    if (p->framing == HTTP__FRAMING_LENGTH && p->content_length > p->max_body_bytes)
        return fail(p, 413, "body of %" PRIu64 " bytes is over the limit of %zu", p->content_length,
                    p->max_body_bytes);
    p->keep_alive = p->http_minor == 1 ? !p->conn_close : p->conn_keep_alive && !p->conn_close;
    if (p->framing == HTTP__FRAMING_NONE) p->expect_continue = false;

    switch (p->framing) {
    case HTTP__FRAMING_NONE:
        p->state = HTTP__PS_DONE;
        break;
    case HTTP__FRAMING_LENGTH:
        p->left = p->content_length;
        buf_reserve(&p->body, (size_t)p->content_length);
        p->state = HTTP__PS_BODY_LENGTH;
        break;
    case HTTP__FRAMING_CHUNKED:
        p->state = HTTP__PS_CHUNK_SIZE;
        break;
    }
    return true;
}

/* The first violation of the line discipline in a run of head bytes (up to
 * and including its LF, if it has one): keeps the earliest position. */
struct violation {
    size_t at;       /* position in the run of the byte that shows it */
    int status;      /* 0: none */
    const char *why; /* static */
};

static void violation_note(struct violation *v, size_t at, int status, const char *why)
{
    if (!v->status || at < v->at) *v = (struct violation){at, status, why};
}

static void discipline_check(struct http__parse *p, const char *r, size_t run, bool lf,
                             struct violation *v)
{
    size_t text_len = lf ? run - 1 : run;
    if (run == 0) return;
    if (p->prev_cr && r[0] != '\n') violation_note(v, 0, 400, "bare cr in the request head");
    /* A CR only right before the LF (or as the run's last byte, its LF
     * still to come); the byte after it is the violation.
     * Checked before the rest, so that at one position the reason is the
     * same whether the CR ended the previous read or not. */
    const char *cr = memchr(r, '\r', text_len);
    if (cr && cr != r + text_len - 1)
        violation_note(v, (size_t)(cr - r) + 1, 400, "bare cr in the request head");
    bool line_start = p->line_len == 0;
    if (line_start && p->seen_request_line && is_ws(r[0]))
        violation_note(v, 0, 400, "obsolete line folding (a header line starting with whitespace)");
    /* A field name: tchars up to ':' (RFC 9112 5.1: no whitespace before
     * the colon; this parser build takes a space as a token character).
     * A value: no control characters but HT (it does not check a value's
     * first byte). */
    if (p->seen_request_line && line_start) {
        p->in_name = r[0] != '\r';
        p->in_value = false;
    }
    size_t j = 0;
    for (; p->in_name && j < run; j++) {
        unsigned char c = (unsigned char)r[j];
        if (c == ':') {
            if (p->line_len + j == 0) violation_note(v, j, 400, "empty header field name");
            p->in_name = false;
            p->in_value = true;
        } else if (c == '\r' || c == '\n') {
            violation_note(v, j, 400, "header line without ':'");
            break;
        } else if (!is_tchar(c)) {
            violation_note(v, j, 400, "invalid character in a header field name");
            break;
        }
    }
    for (; p->in_value && j < text_len; j++) {
        unsigned char c = (unsigned char)r[j];
        if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
            violation_note(v, j, 400, "control character in a header value");
            break;
        }
    }
    if (lf && !(run >= 2 ? r[run - 2] == '\r' : p->prev_cr))
        violation_note(v, run - 1, 400, "bare lf in the request head (lines end with cr lf)");
}

/* Keeps the last bytes of the request line (its " HTTP/x.y\r\n"). */
static void tail_keep(struct http__parse *p, const char *r, size_t k)
{
    size_t n = sizeof(p->rl_tail);
    if (k >= n) {
        memcpy(p->rl_tail, r + k - n, n);
    } else {
        memmove(p->rl_tail, p->rl_tail + k, n - k);
        memcpy(p->rl_tail + n - k, r, k);
    }
}

/* Head bytes: runs up to and including the next LF go through the line
 * discipline, then to http_parser; a completed line may end the request line
 * or the head. A violation stops the run at the byte that shows it:
 * http_parser gets the bytes before it (and reports its own error if it
 * finds one there), so the reason does not depend on how the bytes were cut
 * into reads. Returns the bytes consumed. */
static size_t feed_head(struct http__parse *p, const char *d, size_t n)
{
    size_t i = 0;
    while (i < n && p->state == HTTP__PS_HEAD) {
        const char *r = d + i;
        const char *lf = memchr(r, '\n', n - i);
        size_t run = lf ? (size_t)(lf - r) + 1 : n - i;
        struct violation v = {0};
        size_t room = p->max_header_bytes - p->head_bytes;
        if (run > room) {
            run = room;
            lf = NULL;
            violation_note(&v, room, 431, "request head over the limit");
        }
        p->head_started = true;
        discipline_check(p, r, run, lf != NULL, &v);
        size_t at = v.status ? v.at : run;
        /* Never 0 bytes: that tells http_parser the stream ended. */
        size_t k = at ? http_parser_execute(&p->hp, &parser_settings, r, at) : 0;
        if (!p->seen_request_line) tail_keep(p, r, k);
        p->head_bytes += k;
        p->line_len += k;
        if (HTTP_PARSER_ERRNO(&p->hp) != HPE_OK) {
            fail_parser(p);
            return i + k;
        }
        if (k != at) {
            fail(p, 400, "malformed request head");
            return i + k;
        }
        if (v.status == 431) {
            fail(p, 431, "request head over %zu bytes", p->max_header_bytes);
            return i + k;
        }
        if (v.status) {
            fail(p, v.status, "%s", v.why);
            return i + k;
        }
        p->prev_cr = !lf && run && r[run - 1] == '\r';
        i += run;
        if (!lf) continue;
        size_t line = p->line_len;
        p->line_len = 0;
        p->prev_cr = false;
        if (line == 2) {
            /* An empty line: before the request line it is ignored (RFC
             * 9112 2.2), after it the head ends. */
            if (p->seen_request_line) head_done(p);
            continue;
        }
        if (!p->seen_request_line) {
            p->seen_request_line = true;
            request_line_done(p, line);
        } else if (++p->n_lines > HTTP_MAX_FIELDS) {
            fail(p, 431, "more than %d header fields", HTTP_MAX_FIELDS);
        }
    }
    return i;
}

/* ------------------------------------------------------------- the body */

static int hex_val(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void chunk_line_start(struct http__parse *p)
{
    p->chunk_size = 0;
    p->chunk_line = 0;
    p->chunk_digits = false;
    p->chunk_ext = false;
    p->state = HTTP__PS_CHUNK_SIZE;
}

/* One byte of a trailer section (field lines with the head's line rules,
 * then an empty line). */
static void trailer_byte(struct http__parse *p, unsigned char c)
{
    if (++p->trailer_bytes > p->max_header_bytes) {
        fail(p, 431, "trailer section over %zu bytes", p->max_header_bytes);
        return;
    }
    if (p->prev_cr) {
        if (c != '\n') {
            fail(p, 400, "bare cr in the trailer section");
            return;
        }
        p->prev_cr = false;
        if (p->trailer_line_state == 0) {
            p->state = HTTP__PS_DONE;
            return;
        }
        if (p->trailer_line_state == 1) {
            fail(p, 400, "trailer field without ':'");
            return;
        }
        p->trailer_line_state = 0;
        return;
    }
    if (c == '\r') {
        p->prev_cr = true;
        return;
    }
    if (c == '\n') {
        fail(p, 400, "bare lf in the trailer section (lines end with cr lf)");
        return;
    }
    switch (p->trailer_line_state) {
    case 0:
        if (is_ws((char)c)) {
            fail(p, 400, "obsolete line folding in the trailer section");
            return;
        }
        if (!is_tchar(c)) {
            fail(p, 400, "invalid character in a trailer field name");
            return;
        }
        p->trailer_line_state = 1;
        break;
    case 1:
        if (c == ':')
            p->trailer_line_state = 2;
        else if (!is_tchar(c))
            fail(p, 400, "invalid character in a trailer field name");
        break;
    default:
        if (c != '\t' && (c < 0x20 || c == 0x7f)) fail(p, 400, "control character in a trailer");
        break;
    }
}

/* Chunked framing, one state at a time; chunk data is copied in runs.
 * Returns the bytes consumed. */
static size_t feed_chunked(struct http__parse *p, const char *d, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)d[i];
        switch (p->state) {
        case HTTP__PS_CHUNK_DATA: {
            size_t k = n - i;
            if (k > p->left) k = (size_t)p->left;
            buf_append(&p->body, d + i, k);
            p->left -= k;
            i += k;
            if (p->left == 0) p->state = HTTP__PS_CHUNK_CR;
            continue;
        }
        case HTTP__PS_CHUNK_SIZE:
        case HTTP__PS_CHUNK_EXT:
            if (++p->chunk_line > HTTP_CHUNK_LINE_MAX) {
                fail(p, 400, "chunk-size line over %d bytes", HTTP_CHUNK_LINE_MAX);
                return i;
            }
            if (c == '\r') {
                if (!p->chunk_digits) {
                    fail(p, 400, "chunk size: expected a hex digit");
                    return i;
                }
                p->state = HTTP__PS_CHUNK_LF;
            } else if (p->state == HTTP__PS_CHUNK_SIZE && hex_val(c) >= 0) {
                p->chunk_size = p->chunk_size * 16 + (uint64_t)hex_val(c);
                p->chunk_digits = true;
                /* Before it can overflow: the limit is far below 2^60. */
                if (p->chunk_size > p->max_body_bytes - p->body.len) {
                    fail(p, 413, "chunked body over the limit of %zu bytes", p->max_body_bytes);
                    return i;
                }
            } else if (!p->chunk_digits) {
                fail(p, 400, "chunk size: expected a hex digit");
                return i;
            } else if (!p->chunk_ext) {
                /* BWS, then ';' starts the extensions (RFC 9112 7.1.1). */
                if (c == ';')
                    p->chunk_ext = true;
                else if (!is_ws((char)c)) {
                    fail(p, 400, "chunk size: invalid character");
                    return i;
                }
                p->state = HTTP__PS_CHUNK_EXT;
            } else if (c != '\t' && (c < 0x20 || c == 0x7f)) {
                fail(p, 400, "control character in a chunk extension");
                return i;
            }
            break;
        case HTTP__PS_CHUNK_LF:
            if (c != '\n') {
                fail(p, 400, "chunk-size line: cr without lf");
                return i;
            }
            if (p->chunk_size == 0) {
                p->state = HTTP__PS_TRAILER;
                p->prev_cr = false;
                p->trailer_line_state = 0;
                p->trailer_bytes = 0;
            } else {
                p->left = p->chunk_size;
                p->state = HTTP__PS_CHUNK_DATA;
            }
            break;
        case HTTP__PS_CHUNK_CR:
            if (c != '\r') {
                fail(p, 400, "chunk data: no cr lf after %" PRIu64 " bytes", p->chunk_size);
                return i;
            }
            p->state = HTTP__PS_CHUNK_DLF;
            break;
        case HTTP__PS_CHUNK_DLF:
            if (c != '\n') {
                fail(p, 400, "chunk data: no cr lf after %" PRIu64 " bytes", p->chunk_size);
                return i;
            }
            chunk_line_start(p);
            break;
        case HTTP__PS_TRAILER:
            trailer_byte(p, c);
            if (p->state == HTTP__PS_FAILED) return i;
            break;
        default:
            return i;
        }
        i++;
        if (p->state == HTTP__PS_DONE) return i;
    }
    return i;
}

size_t http__parse_feed(struct http__parse *p, const char *data, size_t len,
                        enum http__parse_result *res)
{
    size_t used = 0;
    while (used < len || p->state == HTTP__PS_DONE || p->state == HTTP__PS_FAILED) {
        switch (p->state) {
        case HTTP__PS_DONE:
            *res = HTTP__PARSE_DONE;
            return used;
        case HTTP__PS_FAILED:
            *res = HTTP__PARSE_FAILED;
            return used;
        case HTTP__PS_HEAD:
            used += feed_head(p, data + used, len - used);
            if (p->state != HTTP__PS_HEAD && p->state != HTTP__PS_DONE &&
                p->state != HTTP__PS_FAILED) {
                *res = HTTP__PARSE_BODY;
                return used;
            }
            break;
        case HTTP__PS_BODY_LENGTH: {
            size_t k = len - used;
            if (k > p->left) k = (size_t)p->left;
            buf_append(&p->body, data + used, k);
            p->left -= k;
            used += k;
            if (p->left == 0) p->state = HTTP__PS_DONE;
            break;
        }
        default:
            used += feed_chunked(p, data + used, len - used);
            break;
        }
    }
    *res = HTTP__PARSE_MORE;
    return used;
}

const char *http__parse_field(const struct http__parse *p, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < p->n_fields; i++) {
        const struct http__field *f = &p->fields[i];
        if (!f->merged && f->name && f->name_len == n && strncasecmp(f->name, name, n) == 0)
            return f->value;
    }
    return NULL;
}
