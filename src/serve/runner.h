/*
 * runner.h - the engine runner: one thread that owns an inferd_engine and
 * exchanges messages with the event loop.
 *
 * The engine is single-owner (inferd.h): every call on it comes from the
 * runner thread. The event loop never touches the engine; it sends commands
 * (submit, cancel) into the runner's inbox and takes results (submit errors
 * and engine events) from its outbox. Both boxes are vectors behind one
 * mutex; the runner sleeps on a condition variable when the engine is idle
 * and its inbox empty, and wakes the event loop by writing an eventfd that
 * the loop watches (runner_fd). The loop then drains the whole outbox in one
 * go, so a step's worth of tokens costs one wake-up.
 *
 * Requests are named by a caller tag (the event loop's choice, unique while
 * the request lives); the runner maps tags to engine ids on its own thread.
 * Every submitted tag gets exactly one final message: a submit error, or an
 * engine event with finish != NONE (cancelled requests included), after
 * which the tag is forgotten.
 *
 * Stats: after each step the runner publishes an inferd_stats snapshot and
 * step counters under the same mutex, for /metrics and /health.
 */
#ifndef INFERD_SERVE_RUNNER_H
#define INFERD_SERVE_RUNNER_H

#include "base/err.h"
#include "inferd/inferd.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct runner_msg {
    uint64_t tag;           /* the caller's name for the request */
    int rc;                 /* submit result: 0, or the error (then ev is unused) */
    char err[256];          /* submit error message */
    struct inferd_event ev; /* engine event (rc == 0) */
};

struct runner_cmd;

/* Step batch sizes (tokens per forward step) are counted in these buckets. */
enum { RUNNER_STEP_BUCKETS = 10 };
extern const int runner_step_bounds[RUNNER_STEP_BUCKETS]; /* upper bounds, last = +Inf */

struct runner_stats {
    struct inferd_stats engine;              /* snapshot after the last step */
    uint64_t step_hist[RUNNER_STEP_BUCKETS]; /* steps by tokens computed */
    uint64_t step_tokens;                    /* sum of tokens over steps */
    uint64_t n_steps;                        /* non-idle steps */
};

struct runner {
    inferd_engine *engine;     /* owned by the thread while it runs */
    pthread_t thread;          /* the runner thread */
    pthread_mutex_t mu;        /* guards everything below */
    pthread_cond_t cv;         /* signalled on new commands and on stop */
    struct runner_cmd *cmds;   /* (n_cmds, cap_cmds) inbox */
    size_t n_cmds, cap_cmds;   /* inbox fill / capacity */
    struct runner_msg *out;    /* (n_out, cap_out) outbox */
    size_t n_out, cap_out;     /* outbox fill / capacity */
    bool stopping;             /* runner_stop was called */
    bool started;              /* the thread exists */
    int wake_fd;               /* eventfd the loop watches; written when out fills */
    struct runner_stats stats; /* published after each step */
};

/* Starts the thread. Returns 0 or a negative errno with msg set. */
int runner_start(struct runner *r, inferd_engine *e, struct err_msg *msg);
/* Stops the thread (pending requests are cancelled) and frees the boxes;
 * the engine stays the caller's. */
void runner_stop(struct runner *r);
/* Queues a copy of req (prompt and logit bias copied) under tag. */
void runner_submit(struct runner *r, uint64_t tag, const struct inferd_request *req);
void runner_cancel(struct runner *r, uint64_t tag);
/* Pauses or resumes the tag's request (inferd_pause); unknown tags are
 * ignored. */
void runner_pause(struct runner *r, uint64_t tag, bool paused);
/* Moves every pending message into *msgs (a vector the caller reuses: *cap
 * grows as needed) and returns the count. Also clears the eventfd. */
size_t runner_drain(struct runner *r, struct runner_msg **msgs, size_t *cap);
void runner_get_stats(struct runner *r, struct runner_stats *s);

#endif
