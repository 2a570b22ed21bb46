/*
 * bench_sse.h - incremental parser of an OpenAI streaming response
 * (text/event-stream) as the bench client receives it, in arbitrary pieces.
 *
 *   data: {"choices":[{"index":0,"text":"Hi"}]}\n\n          content event
 *   data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n       (chat form)
 *   data: {"choices":[],"usage":{"prompt_tokens":..,
 *          "completion_tokens":..,
 *          "prompt_tokens_details":{"cached_tokens":..},
 *          "completion_tokens_details":{"spec_drafts":..,
 *             "spec_draft_tokens":..,"spec_accepted_tokens":..}}}\n\n
 *   data: [DONE]\n\n
 *
 * An event is the data lines up to a blank line (WHATWG "server-sent
 * events"); comment lines (":...") and other fields are ignored. A content
 * event is one whose first choice carries non-empty text (or delta content /
 * reasoning content): each one is a token arrival for TTFT and ITL, even
 * when a server packs several tokens into it. Usage is taken from whichever
 * event carries it. An {"error":{...}} object mid-stream ends the request as
 * failed. Malformed JSON marks the stream broken; it never crashes.
 *
 * Lifetime: caller-owned; bench_sse_release frees the buffers. One stream per
 * parser; single-threaded.
 */
#ifndef INFERD_BENCH_SSE_H
#define INFERD_BENCH_SSE_H

#include "base/buf.h"

#include <stdbool.h>
#include <stdint.h>

/* Longest line or event accepted (a server that never ends a line must not
 * exhaust memory): beyond it the stream is marked failed and dropped. */
#define BENCH_SSE_MAX_EVENT (16u << 20)

struct bench_sse {
    struct buf line;        /* partial line carried to the next feed */
    struct buf data;        /* data lines of the event being read */
    bool keep_text;         /* append content to text (quality probes) */
    struct buf text;        /* concatenated content when keep_text */
    int32_t n_content;      /* content events so far */
    int64_t prompt_tokens;  /* usage.prompt_tokens, -1 unknown */
    int64_t output_tokens;  /* usage.completion_tokens, -1 unknown */
    int64_t cached_tokens;  /* usage.prompt_tokens_details.cached_tokens, -1 unknown */
    int64_t spec_drafts;    /* completion_tokens_details.spec_drafts, -1 unknown */
    int64_t spec_draft_tok; /* completion_tokens_details.spec_draft_tokens, -1 unknown */
    int64_t spec_accepted;  /* completion_tokens_details.spec_accepted_tokens, -1 unknown */
    bool after_cr;          /* the last byte fed was a CR line end */
    bool done;              /* [DONE] seen */
    bool failed;            /* an error object or malformed data was seen */
    char error[160];        /* what failed, when failed */
};

void bench_sse_init(struct bench_sse *s, bool keep_text);
void bench_sse_release(struct bench_sse *s);

/* Consumes n bytes; returns the number of content events completed by them. */
int bench_sse_feed(struct bench_sse *s, const char *p, size_t n);

/* Reads usage fields from a parsed response or chunk object (also used for
 * non-streamed JSON bodies): fills the -1 fields it finds. */
struct json_t;
void bench_sse_usage(struct bench_sse *s, struct json_t *obj);

#endif
