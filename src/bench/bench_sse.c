/*
 * bench_sse.c - see bench_sse.h. Bytes are cut into lines (LF, CRLF or CR
 * endings), lines into events, events into JSON; a line split across two
 * feeds waits in s->line.
 */
#include "bench/bench_sse.h"

#include "base/check.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

void bench_sse_init(struct bench_sse *s, bool keep_text)
{
    memset(s, 0, sizeof(*s));
    s->keep_text = keep_text;
    s->prompt_tokens = s->output_tokens = s->cached_tokens = -1;
    s->spec_drafts = s->spec_draft_tok = s->spec_accepted = -1;
}

void bench_sse_release(struct bench_sse *s)
{
    buf_release(&s->line);
    buf_release(&s->data);
    buf_release(&s->text);
}

static void fail(struct bench_sse *s, const char *what, const char *detail)
{
    if (s->failed) return;
    s->failed = true;
    snprintf(s->error, sizeof(s->error), "%s%s%.100s", what, detail ? ": " : "",
             detail ? detail : "");
}

static void take_int(json_t *obj, const char *key, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) *out = json_integer_value(v);
}

void bench_sse_usage(struct bench_sse *s, json_t *obj)
{
    json_t *u = json_object_get(obj, "usage");
    if (!json_is_object(u)) return;
    take_int(u, "prompt_tokens", &s->prompt_tokens);
    take_int(u, "completion_tokens", &s->output_tokens);
    json_t *pd = json_object_get(u, "prompt_tokens_details");
    if (json_is_object(pd)) take_int(pd, "cached_tokens", &s->cached_tokens);
    json_t *cd = json_object_get(u, "completion_tokens_details");
    if (json_is_object(cd)) {
        take_int(cd, "spec_drafts", &s->spec_drafts);
        take_int(cd, "spec_draft_tokens", &s->spec_draft_tok);
        take_int(cd, "spec_accepted_tokens", &s->spec_accepted);
    }
}

/* Non-empty string content of the first choice, or NULL. */
static const char *content_of(json_t *obj, size_t *len)
{
    json_t *ch = json_object_get(obj, "choices");
    json_t *c0 = json_is_array(ch) ? json_array_get(ch, 0) : NULL;
    if (!json_is_object(c0)) return NULL;
    json_t *t = json_object_get(c0, "text");
    if (!json_is_string(t)) {
        json_t *d = json_object_get(c0, "delta");
        if (!json_is_object(d)) return NULL;
        t = json_object_get(d, "content");
        if (!json_is_string(t) || !json_string_length(t))
            t = json_object_get(d, "reasoning_content");
    }
    if (!json_is_string(t) || !json_string_length(t)) return NULL;
    *len = json_string_length(t);
    return json_string_value(t);
}

/* Handles one complete event; returns 1 for a content event. */
static int dispatch(struct bench_sse *s)
{
    if (!s->data.len) return 0;
    const char *d = s->data.data;
    size_t n = s->data.len;
    int content = 0;
    if (n == 6 && !memcmp(d, "[DONE]", 6)) {
        s->done = true;
        goto out;
    }
    json_error_t je;
    json_t *o = json_loadb(d, n, 0, &je);
    if (!o || !json_is_object(o)) {
        fail(s, "malformed event JSON", o ? "not an object" : je.text);
        json_decref(o);
        goto out;
    }
    json_t *e = json_object_get(o, "error");
    if (e) {
        json_t *msg = json_is_object(e) ? json_object_get(e, "message") : e;
        fail(s, "server error in stream", json_is_string(msg) ? json_string_value(msg) : NULL);
    }
    size_t len = 0;
    const char *text = content_of(o, &len);
    if (text) {
        content = 1;
        s->n_content++;
        if (s->keep_text) buf_append(&s->text, text, len);
    }
    bench_sse_usage(s, o);
    json_decref(o);
out:
    buf_clear(&s->data);
    return content;
}

/* One complete line (no terminator). */
static int line(struct bench_sse *s, const char *p, size_t n)
{
    if (n == 0) return dispatch(s);
    if (p[0] == ':') return 0;
    const char *colon = memchr(p, ':', n);
    size_t name_len = colon ? (size_t)(colon - p) : n;
    if (name_len != 4 || memcmp(p, "data", 4)) return 0; /* event:, id:, retry: ignored */
    const char *v = colon ? colon + 1 : p + n;
    if (v < p + n && *v == ' ') v++;
    if (s->data.len + (size_t)(p + n - v) > BENCH_SSE_MAX_EVENT) {
        fail(s, "event too long", NULL);
        buf_release(&s->data);
        return 0;
    }
    if (s->data.len) buf_putc(&s->data, '\n');
    buf_append(&s->data, v, (size_t)(p + n - v));
    return 0;
}

int bench_sse_feed(struct bench_sse *s, const char *p, size_t n)
{
    int events = 0;
    const char *end = p + n;
    while (p < end) {
        /* the LF of a CRLF whose CR ended the previous feed */
        if (s->after_cr && *p == '\n') {
            s->after_cr = false;
            p++;
            continue;
        }
        s->after_cr = false;
        const char *e = p;
        while (e < end && *e != '\n' && *e != '\r')
            e++;
        if (e == end) {
            if (s->line.len + (size_t)(e - p) > BENCH_SSE_MAX_EVENT) {
                fail(s, "event too long", NULL);
                buf_release(&s->line);
                break;
            }
            buf_append(&s->line, p, (size_t)(e - p));
            break;
        }
        if (s->line.len) {
            buf_append(&s->line, p, (size_t)(e - p));
            events += line(s, s->line.data, s->line.len);
            buf_clear(&s->line);
        } else {
            events += line(s, p, (size_t)(e - p));
        }
        p = e + 1;
        if (*e == '\r') {
            if (p < end && *p == '\n')
                p++;
            else if (p == end)
                s->after_cr = true;
        }
    }
    return events;
}
