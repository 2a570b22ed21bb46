/*
 * fuzz_http.c - libFuzzer target for the HTTP/1.1 request parser
 * (http__parse_feed in src/net/http_parse.c): the bytes any client can send
 * on a connection, without sockets.
 *
 * The input is one connection's byte stream: requests are parsed one after
 * another (pipelining) until the bytes run out, one is refused, or 64 were
 * parsed. The stream is parsed twice, whole and cut into pieces of 1..16
 * bytes whose sizes come from the input itself, and the two transcripts
 * (every request's method, target, version, fields and body; the refusal's
 * status and reason) must be equal: the outcome never depends on how TCP
 * cut the bytes. Every complete request must hold the parser's promises:
 * an origin-form target (or "*" for OPTIONS), a body within the limit and
 * of the announced length, at most HTTP_MAX_FIELDS fields with token names
 * and values free of CR, LF and NUL, and http__parse_field finding each
 * field. A refusal has a 4xx / 5xx status and a reason. A crash, a sanitizer
 * report or a broken invariant aborts.
 *
 * Build: cmake -DINFERD_FUZZ=ON -DCMAKE_C_COMPILER=clang, target fuzz_http.
 * ctest replays tests/fuzz/http/corpus/ through tests/fuzz/replay.c.
 */
#include "base/check.h"
#include "net/http_impl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_HEADER 2048
#define FUZZ_MAX_BODY   4096

static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Appends one complete request to the transcript, checking it. */
static void request_check(const struct http__parse *p, struct buf *t)
{
    CHECK(p->method && p->path && p->query);
    CHECK(p->path[0] == '/' || (strcmp(p->path, "*") == 0 && strcmp(p->method, "OPTIONS") == 0));
    CHECK(!strchr(p->path, '#') && !strchr(p->query, '#'));
    CHECK(p->http_minor == 0 || p->http_minor == 1);
    CHECK(p->body.len <= FUZZ_MAX_BODY);
    CHECK(p->head_bytes <= FUZZ_MAX_HEADER);
    if (p->framing == HTTP__FRAMING_LENGTH) CHECK(p->body.len == p->content_length);
    if (p->framing == HTTP__FRAMING_NONE) CHECK(p->body.len == 0);
    CHECK(p->n_fields <= HTTP_MAX_FIELDS);
    if (p->http_minor == 1) CHECK(http__parse_field(p, "host") != NULL);
    buf_printf(t, "%s %s ? %s 1.%d ka=%d fr=%d\n", p->method, p->path, p->query, p->http_minor,
               p->keep_alive, (int)p->framing);
    for (int i = 0; i < p->n_fields; i++) {
        const struct http__field *f = &p->fields[i];
        if (f->merged) continue;
        CHECK(f->name_len > 0 && strlen(f->name) == f->name_len);
        for (size_t k = 0; k < f->name_len; k++)
            CHECK(is_tchar((unsigned char)f->name[k]));
        CHECK(strlen(f->value) == f->value_len);
        CHECK(!strchr(f->value, '\r') && !strchr(f->value, '\n'));
        CHECK(http__parse_field(p, f->name) == f->value);
        buf_printf(t, "  %s: %s\n", f->name, f->value);
    }
    buf_printf(t, "  body %zu:", p->body.len);
    buf_append(t, p->body.data ? p->body.data : "", p->body.len);
    buf_putc(t, '\n');
}

/* Parses the stream, whole (cut == false) or in pieces; the transcript
 * goes to t. */
static void stream_parse(const uint8_t *data, size_t size, bool cut, struct buf *t)
{
    struct http__parse p;
    http__parse_init(&p, FUZZ_MAX_HEADER, FUZZ_MAX_BODY);
    size_t pos = 0;
    int n_requests = 0;
    size_t steps = 0;
    while (n_requests < 64) {
        CHECK(++steps <= 2 * size + 8);
        size_t piece = size - pos;
        if (cut && piece) {
            size_t k = 1 + data[(pos * 7 + 3) % size] % 16;
            if (k < piece) piece = k;
        }
        enum http__parse_result res;
        size_t n = http__parse_feed(&p, (const char *)data + pos, piece, &res);
        CHECK(n <= piece);
        if (res == HTTP__PARSE_MORE) CHECK(n == piece);
        pos += n;
        if (res == HTTP__PARSE_DONE) {
            request_check(&p, t);
            http__parse_reset(&p);
            n_requests++;
            continue;
        }
        if (res == HTTP__PARSE_FAILED) {
            CHECK(p.status >= 400 && p.status <= 599 && p.why[0]);
            /* Not where: a reason found in a callback may be found a few
             * bytes earlier when a read ends mid-field. */
            buf_printf(t, "refused %d %s\n", p.status, p.why);
            break;
        }
        if (pos == size) {
            buf_printf(t, "more (idle %d)\n", http__parse_idle(&p));
            break;
        }
    }
    http__parse_release(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct buf whole = {0}, pieces = {0};
    stream_parse(data, size, false, &whole);
    stream_parse(data, size, true, &pieces);
    if (whole.len != pieces.len || memcmp(whole.data, pieces.data, whole.len) != 0) {
        fprintf(stderr, "whole:\n%s\npieces:\n%s\n", buf_str(&whole), buf_str(&pieces));
        abort();
    }
    buf_release(&whole);
    buf_release(&pieces);
    return 0;
}
