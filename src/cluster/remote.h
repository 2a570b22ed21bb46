/*
 * remote.h - the remote backend (node/backend.h): a gateway's generation
 * requests go to workers (worker.h) over the cluster protocol.
 *
 * Workers come from a static list ("HOST:PORT,HOST:PORT") or from Redis
 * membership (members.h: keys that expire unless renewed), or both. Each gets one
 * connection on the server's event loop: HELLO both ways, then SUBMIT /
 * CANCEL out and TOKEN / ERROR / STATS in. A worker is in rotation while its
 * connection is up and it has said HELLO with the gateway's model; one that
 * is down is tried again every half second. The request tag is the SUBMIT's id.
 *
 * Routing: remote_pick, a pure function over a snapshot of the workers
 * (least loaded: running + waiting as the last STATS said, plus what this
 * gateway sent since; ties to the lowest index), so the balancing policy can
 * be replaced without touching the transport.
 *
 * Failures: no worker in rotation is a submit error (ERR_UNAVAILABLE, "no
 * worker available"); a worker lost with requests on it ends each with an
 * INFERD_FINISH_ERROR event (ERR_UNAVAILABLE) once its connection drops or
 * goes silent for 2.5 s (no STATS, no PONG to the PING sent every half
 * second): out of rotation within 3 s. Requests are not moved to another
 * worker yet (migration is not built).
 *
 * Not yet: several gateways sharing request state, pause (a slow
 * client does not pause the worker: TCP flow control does), KV TTL classes.
 */
#ifndef INFERD_CLUSTER_REMOTE_H
#define INFERD_CLUSTER_REMOTE_H

#include "base/err.h"
#include "node/backend.h"

#include <stdbool.h>
#include <stdint.h>

struct event_base;
struct remote;

/* One worker as the policy sees it. */
struct remote_worker_view {
    bool up;     /* connected, HELLO done, same model */
    int running; /* from its last STATS */
    int waiting; /* from its last STATS */
    int sent;    /* requests this gateway has on it */
};

/* The index of the worker a new request goes to, or -1 when none is up. */
int remote_pick(const struct remote_worker_view *w, int n);

/* Connects to the workers of list (comma-separated HOST:PORT; may be NULL)
 * and, with redis (a URL, members.h; may be NULL), to those announced
 * there for model, on base. model: the model name a worker's HELLO must
 * carry (its file name). Returns 0 (workers that are not up yet join when
 * they answer; Redis need not be up) or ERR_INVALID for a malformed list or
 * URL, with a message. */
int remote_new(struct event_base *base, const char *list, const char *redis, const char *model,
               struct remote **out, struct err_msg *msg);
/* The same check of a list without connecting (for the command line). */
int remote_check_list(const char *list, struct err_msg *msg);
struct node_backend *remote_backend(struct remote *r);
/* Workers in rotation now. */
int remote_n_up(const struct remote *r);
void remote_free(struct remote *r);

#endif
