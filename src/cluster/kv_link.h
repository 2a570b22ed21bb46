/*
 * kv_link.h - the transport under a KV pull (worker.h): how a decode worker
 * asks a prefill worker for a prompt's KV blocks and takes them in.
 *
 * The worker hands the link a prefill-only SUBMIT frame (proto.h, its
 * request id the worker's tag) and the prefill worker's address; the link
 * delivers each block frame as it arrives (block) and then the end of the
 * pull (end: done, or why not: the peer lost, silent, refused, an error).
 * Nothing above the link knows how the bytes travel: the runner and the
 * engine see frames only (runner_kv_import). kv_link_tcp_new is the
 * cluster protocol over TCP; another transport (RDMA through UCX, say)
 * implements the same ops.
 *
 * Thread: the worker's event loop, which the link runs on.
 */
#ifndef INFERD_CLUSTER_KV_LINK_H
#define INFERD_CLUSTER_KV_LINK_H

#include "base/err.h"
#include "cluster/proto.h"

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct kv_link;

struct kv_link_cb {
    void *ctx;
    /* A block of tag's prompt: frame[0..len) inside blob, a malloc'd buffer
     * the callee owns from now on. */
    void (*block)(void *ctx, uint64_t tag, uint8_t *blob, const uint8_t *frame, size_t len);
    /* tag's pull is over: why NULL when the peer sent all it had (KV_DONE),
     * else what went wrong. No more calls for tag after it. */
    void (*end)(void *ctx, uint64_t tag, const char *why);
};

struct kv_link_ops {
    /* Asks the prefill worker at addr for tag's blocks with the SUBMIT
     * frame submit[0..len). 0, or an error with a message (no callbacks for
     * tag come then): addr is not an address, the dial failed at once. */
    int (*pull)(struct kv_link *l, const char *addr, uint64_t tag, const void *submit, size_t len,
                struct err_msg *msg);
    /* Stops tag's pull (the request ended): no more callbacks for it. */
    void (*cancel)(struct kv_link *l, uint64_t tag);
    /* Called every few hundred ms: silence checks, keep-alives. */
    void (*tick)(struct kv_link *l);
    void (*free)(struct kv_link *l);
};

struct kv_link {
    const struct kv_link_ops *ops;
    struct kv_link_cb cb;
};

/* The TCP link: one connection per prefill worker, dialled on first use,
 * HELLO both ways (me: this worker's; a peer whose engine fingerprint,
 * block size or frame size differs is refused), frames read straight from
 * the socket into buffers of their size, a peer silent for 2.5 s lost. */
struct kv_link *kv_link_tcp_new(struct event_base *base, const struct cl_hello *me,
                                const struct kv_link_cb *cb);

#endif
