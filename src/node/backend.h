/*
 * backend.h - where the API server's generation requests go: the engine in
 * this process (its runner thread), or engines in other processes (the
 * cluster's workers, cluster/remote.h). Both take the same requests and give
 * the same messages (struct runner_msg: every tag gets its tokens in order
 * and exactly one final message), so the API front door has one code path
 * whichever runs the engine.
 *
 * The server calls a backend from its event-loop thread only, and drains it
 * when wake_fd is readable.
 */
#ifndef INFERD_NODE_BACKEND_H
#define INFERD_NODE_BACKEND_H

#include "node/runner.h"

struct node_backend;

/* A request's latency targets (0: none). */
struct node_targets {
    double ttft_ms; /* time to the first token */
    double tpot_ms; /* time per output token after it */
};

struct node_backend_ops {
    /* Queues req (copied) under tag; its blocks live ttl_s (0: the default),
     * the TTL of the traffic class named ttl_class ("" none; a remote engine
     * looks the name up in its own table). traceparent: the request's W3C
     * trace context ("00-<trace>-<span>-01"), carried to a remote engine and
     * into its logs. targets (may be NULL): a backend that predicts latency
     * (the gateway's, cluster/remote.h) refuses a request that would miss
     * them at once, ERR_OVERLOADED with runner_msg.retry_after_s; the local
     * one does not predict, and its queue bound (max_waiting) is what
     * refuses. */
    void (*submit)(struct node_backend *b, uint64_t tag, const struct inferd_request *req,
                   int64_t ttl_s, const char *ttl_class, const char *traceparent,
                   const struct node_targets *targets);
    void (*cancel)(struct node_backend *b, uint64_t tag);
    /* Pauses or resumes a tag's request (a backend that cannot: ignored). */
    void (*pause)(struct node_backend *b, uint64_t tag, bool paused);
    /* As runner_drain. */
    size_t (*drain)(struct node_backend *b, struct runner_msg **msgs, size_t *cap);
    /* As runner_get_stats (a remote backend: the sum over its engines). */
    void (*stats)(struct node_backend *b, struct runner_stats *s);
};

struct node_backend {
    const struct node_backend_ops *ops;
    int wake_fd; /* readable when messages wait */
};

/* The backend of a started runner (it stays the caller's). */
struct node_local {
    struct node_backend base; /* first */
    struct runner *r;
};
void node_backend_local(struct node_local *l, struct runner *r);

#endif
