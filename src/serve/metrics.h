/*
 * metrics.h - the server's Prometheus metrics (GET /metrics, text format
 * 0.0.4).
 *
 * Counters and histograms are updated by the event-loop thread as requests
 * finish; engine gauges (running / waiting sequences, KV blocks, step batch
 * sizes, preemptions) come from the runner's stats snapshot at render time.
 * Names follow Prometheus conventions: inferd_ prefix, _total counters,
 * _seconds histograms with cumulative le buckets.
 *
 * Thread: the event-loop thread only.
 */
#ifndef INFERD_SERVE_METRICS_H
#define INFERD_SERVE_METRICS_H

#include "base/buf.h"
#include "kv/chain.h"
#include "node/runner.h"

#include <stdint.h>

enum { METRICS_BUCKETS = 14, METRICS_MAX_SERIES = 128 };

struct metrics_hist {
    uint64_t counts[METRICS_BUCKETS]; /* per bucket (not cumulative); last = +Inf */
    double sum;                       /* sum of observations */
    uint64_t n;                       /* observations */
};

struct metrics_series {
    char endpoint[40]; /* route label, e.g. "/v1/chat/completions" */
    int status;        /* HTTP status */
    uint64_t n;        /* requests */
};

struct metrics {
    struct metrics_series req[METRICS_MAX_SERIES]; /* requests by endpoint and status */
    int n_req;                                     /* entries of req */
    struct metrics_hist ttft;                      /* time to first token */
    struct metrics_hist tpot;                      /* time per output token after the first */
    struct metrics_hist e2e;                       /* request latency, generation requests */
    struct metrics_hist queue;                     /* engine queue time: submit -> admission */
    uint64_t prompt_tokens;                        /* prompt tokens of finished requests */
    uint64_t cached_tokens;                        /* of those, served from the prefix cache */
    uint64_t generated_tokens;                     /* tokens generated */
    uint64_t cancelled;                            /* requests ended by client disconnect */
    int open_requests;                             /* HTTP requests being served now */
    uint64_t tier_blocks[KV_CHAIN_MAX_TIERS];      /* prompt blocks each KV tier served */
};

void metrics_request(struct metrics *m, const char *endpoint, int status);
void metrics_observe(struct metrics_hist *h, double seconds);
void metrics_render(const struct metrics *m, const struct runner_stats *rs, struct buf *out);
/* The KV tiers' series, labelled by tier name. */
void metrics_render_tiers(const struct metrics *m, const struct kv_chain_stats *ks,
                          struct buf *out);

#endif
