/*
 * bench_mock.h - a scripted OpenAI-compatible server for testing and
 * calibrating `inferd bench` (hidden subcommand `inferd bench-mock`).
 *
 * Everything it does is a deterministic function of the request and its
 * options, so tests can compute the expected figures by hand:
 *
 *   TTFT     = ttft_ms + prefill_us * uncached prompt tokens
 *   then one SSE event every itl_ms; an event carries 1 token, or with
 *   speculation (spec_k > 0) 1 + spec_accept tokens (the last one fewer):
 *       steps = ceil((n - 1) / (1 + a)), accepted = (n - 1) - steps,
 *       drafts = steps, draft_tokens = k * steps
 *   usage: prompt_tokens, completion_tokens = n (max_tokens),
 *          prompt_tokens_details.cached_tokens = leading whole blocks of
 *          block_tokens already seen (chained block hashes: an infinite
 *          prefix cache), completion_tokens_details.spec_* unless
 *          spec_metrics_only
 *   GET /metrics: inferd_spec_drafts_total, inferd_spec_draft_tokens_total,
 *          inferd_spec_accepted_tokens_total, inferd_requests_total
 *   output text: token j of a prompt is " w<h>" with h = hash(prompt, j) % 1000
 *          (so temperature-0 outputs repeat); perturb_from >= 0 changes every
 *          token from that index on (a quality regression to detect)
 *   every fail_every-th request is answered 503 with an OpenAI error body
 *
 * Prompts: "prompt" as token ids or text (words are its tokens), or chat
 * "messages" (the words of all contents). Non-streamed requests get one JSON
 * body after the whole generation time.
 *
 * Thread: one libevent loop; bench_mock_run returns on SIGINT / SIGTERM.
 */
#ifndef INFERD_BENCH_MOCK_H
#define INFERD_BENCH_MOCK_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

struct bench_mock_opts {
    const char *host;       /* bind address */
    int port;               /* 0 = any free port */
    const char *port_file;  /* write the bound port here (NULL: none) */
    double ttft_ms;         /* base time to first token */
    double prefill_us;      /* extra TTFT per uncached prompt token (microseconds) */
    double itl_ms;          /* gap between events */
    int32_t block_tokens;   /* prefix cache block size */
    int32_t spec_k;         /* draft tokens per step (0: no speculation) */
    int32_t spec_accept;    /* accepted tokens per step (<= spec_k) */
    bool spec_metrics_only; /* report speculation only through /metrics */
    int32_t fail_every;     /* every n-th request fails with 503 (0: never) */
    int32_t perturb_from;   /* output token index where outputs change (-1: never) */
    int backlog;            /* listen backlog */
};

void bench_mock_opts_default(struct bench_mock_opts *o);

/* Serves until SIGINT / SIGTERM; returns 0 or an error (bind failure). */
int bench_mock_run(const struct bench_mock_opts *o, struct err_msg *m);

#endif
