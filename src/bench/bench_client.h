/*
 * bench_client.h - the load generator: sends a workload's requests to an
 * OpenAI-compatible endpoint at their due times and times every streamed
 * event.
 *
 * One thread, one libevent loop (a precise timer: timerfd on Linux), one
 * HTTP/1.1 connection per in-flight request (idle connections are kept alive
 * and reused). Scheduling:
 *
 *   due heap (min t) --timer--> ready FIFO --slot free--> send --> events ... end
 *        ^                                                               |
 *        +----------- follow-up item: due = end + think_s <--------------+
 *
 * Requests stream (`stream: true`, `stream_options.include_usage`): the
 * client parses SSE as it arrives (bench_sse.h) and stamps each content event
 * with the monotonic clock. A JSON (non-streamed) 200 answer is accepted too:
 * all its tokens then arrive at once.
 *
 * Prompts: token ids through /v1/completions ("prompt": [ids]) by default,
 * so a server sees exactly the trace's blocks; with text mode the words of
 * bench_item_text, to /v1/completions ("prompt": "...") or, with chat, to
 * /v1/chat/completions as one user message. Chat sessions (synthetic
 * multiturn / agentic with chat) go as the conversation a chat client sends:
 * a system message (the shared prefix), each earlier turn's user message and
 * the server's real answer to it (kept from its stream), then the new user
 * message. The history's length then depends on the server's answers (and
 * its tokenizer): usage.prompt_tokens is what counts.
 *
 * The client raises the soft open-file limit to the hard limit at start
 * (setrlimit), since every open stream is a socket.
 *
 * Thread safety: a run owns its event base; run one at a time per thread.
 */
#ifndef INFERD_BENCH_CLIENT_H
#define INFERD_BENCH_CLIENT_H

#include "base/buf.h"
#include "base/err.h"
#include "bench/bench_metrics.h"
#include "bench/bench_workload.h"

#include <stdbool.h>

struct bench_target {
    char host[256];        /* server host name or address */
    int port;              /* TCP port */
    char base_path[256];   /* prefix before /v1/... ("" for none) */
    char model[256];       /* "model" field sent */
    char api_key[256];     /* bearer token, "" none */
    bool chat;             /* /v1/chat/completions instead of /v1/completions (implies text) */
    bool text;             /* send text instead of token ids */
    bool ignore_eos;       /* add "ignore_eos": true so outputs have the asked length */
    double timeout_s;      /* per-request inactivity timeout */
    char logit_bias[4096]; /* JSON object sent as "logit_bias" in every request, "" none */
};

/* "http://host:port[/base]" -> t (host, port, base_path); ERR_INVALID. */
int bench_target_parse_url(struct bench_target *t, const char *url, struct err_msg *m);

struct bench_run_opts {
    int32_t max_concurrency;     /* in-flight cap; 0 = none */
    bool progress;               /* a progress line on stderr (when it is a terminal) */
    double temperature;          /* < 0: not sent (server default) */
    int64_t seed;                /* < 0: not sent */
    bool keep_text;              /* keep each response's text (quality probes) */
    const int32_t *ideal_cached; /* (w->n) ideal cached tokens per item, or NULL */
};

/* Sends every item of w; *recs receives w->n records in item order (caller
 * frees each with bench_record_release, then the array; texts (keep_text) in
 * texts[i], caller frees, when texts is non-NULL). Returns 0, or an error when
 * the run could not start (bad address, event loop setup). Request failures
 * are records, not errors. */
int bench_client_run(const struct bench_workload *w, const struct bench_target *t,
                     const struct bench_run_opts *o, struct bench_record **recs, char ***texts,
                     struct err_msg *m);

/* GET base_path + path; the body lands in out (status in *status). */
int bench_client_get(const struct bench_target *t, const char *path, struct buf *out, int *status,
                     struct err_msg *m);

/* POST a JSON body to base_path + path; the answer lands in out. */
int bench_client_post(const struct bench_target *t, const char *path, const char *body,
                      struct buf *out, int *status, struct err_msg *m);

/* Asks the server (POST /tokenize, as inferd and vLLM serve it) for the token
 * ids of the text-mode words (bench_token_word) and sets t->logit_bias to
 * +100 on each: answers then consist of those words, each one token, so an
 * answer's text tokenizes back to exactly the tokens generated - what a
 * trained model's answers do, and random weights' do not. ERR_PROTOCOL when
 * the server cannot tokenize or a word is not one token. */
int bench_target_answer_words(struct bench_target *t, struct err_msg *m);

/* Sum over all series of Prometheus counter `name` in a text exposition
 * (lines "name{labels} value" or "name value"); false when absent. */
bool bench_prom_sum(const char *text, const char *name, double *out);

#endif
