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
 * KV tiers (optional, kv/chain.h): before a prompt is submitted the runner
 * computes its block ids (inferd_kv_block_ids) and asks the engine how many
 * leading blocks its pool holds; when the tier chain may hold more, the
 * request is submitted held (waiting on a tier load, never blocking a step)
 * and a load goes to the chain's I/O thread. When the load is back, its
 * frames are imported into the pool and the hold released: the request then
 * attaches them as prefix hits and prefills only the rest. Blocks go the
 * other way through the engine's KV events (stored: write-through tiers)
 * and its pre-eviction hook (write-back tiers), with the expiry of the
 * traffic class of the request whose prompt holds them (else the default).
 *
 * KV transfer (prefill/decode disaggregation, cluster/worker.h): a request
 * submitted with runner_submit_prefill hands each full block of its prompt
 * to the event loop (a RUNNER_MSG_KV_BLOCK message with the block's frame)
 * as soon as the step that filled it is done, so the loop sends it on while
 * the next chunk computes. One submitted with runner_submit_pull waits
 * (held) for the blocks its pool lacks: a RUNNER_MSG_KV_PULL message says
 * how many leading blocks the pool holds, the loop feeds the others in with
 * runner_kv_import as they arrive and ends the wait with runner_kv_release,
 * and the request then attaches what came as prefix hits and computes only
 * the rest (what did not come, it computes: the output is the same).
 *
 * Stats: after each step the runner publishes an inferd_stats snapshot and
 * step counters under the same mutex, for /metrics and /health.
 */
#ifndef INFERD_NODE_RUNNER_H
#define INFERD_NODE_RUNNER_H

#include "base/err.h"
#include "base/u64map.h"
#include "inferd/inferd.h"
#include "kv/chain.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum runner_msg_kind {
    RUNNER_MSG_EVENT,    /* rc, err, ev, kv_tier_blocks */
    RUNNER_MSG_KV_BLOCK, /* a prompt block of a prefill request: kv_index, kv_frame */
    RUNNER_MSG_KV_PULL,  /* a pull request is held: kv_index = the leading blocks held */
};

struct runner_msg {
    uint64_t tag;                           /* the caller's name for the request */
    enum runner_msg_kind kind;              /* what this message is */
    uint32_t kv_index;                      /* KV_BLOCK: block index; KV_PULL: blocks held */
    uint8_t *kv_frame;                      /* KV_BLOCK: (kv_frame_len) the block's frame,
                                               the receiver's to free() */
    size_t kv_frame_len;                    /* KV_BLOCK: bytes at kv_frame */
    int kv_tier_blocks[KV_CHAIN_MAX_TIERS]; /* on finish: prompt blocks each tier served */
    int rc;                                 /* submit result: 0, or the error (then ev is unused) */
    char err[256];                          /* submit error message */
    int retry_after_s;                      /* rc == ERR_OVERLOADED: when to try again (0: the
                                               caller's own estimate) */
    struct inferd_event ev;                 /* engine event (rc == 0) */
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

/* The tier side of a runner (runner_start_tiers). */
struct runner_kv {
    struct kv_chain *chain;  /* the tiers, or NULL; the caller's (outlives the runner) */
    uint8_t fingerprint[16]; /* the engine's, for block ids */
    int block_tokens;        /* the engine's */
    int64_t default_ttl_s;   /* expiry of blocks no live request names */
    size_t frame_bytes;      /* inferd_kv_frame_bytes */
    uint8_t *frame;          /* (frame_bytes) export scratch, runner thread */
    struct u64map owners;    /* folded block id -> struct kv_owner of a live request */
};

/* A KV block entering or leaving the engine's pool (runner_take_kv_events). */
struct runner_kv_event {
    uint8_t stored; /* 1 stored, 0 evicted */
    uint8_t id[16]; /* block id */
};

struct runner {
    inferd_engine *engine;       /* owned by the thread while it runs */
    pthread_t thread;            /* the runner thread */
    pthread_mutex_t mu;          /* guards everything below */
    pthread_cond_t cv;           /* signalled on new commands and on stop */
    struct runner_cmd *cmds;     /* (n_cmds, cap_cmds) inbox */
    size_t n_cmds, cap_cmds;     /* inbox fill / capacity */
    struct runner_msg *out;      /* (n_out, cap_out) outbox */
    size_t n_out, cap_out;       /* outbox fill / capacity */
    bool stopping;               /* runner_stop was called */
    bool started;                /* the thread exists */
    int wake_fd;                 /* eventfd the loop watches; written when out fills */
    struct runner_stats stats;   /* published after each step */
    bool kv_ready;               /* a tier load finished: poll the chain */
    struct runner_kv kv;         /* tiers (kv.chain NULL: none) */
    bool kv_publish;             /* keep the pool's KV events for runner_take_kv_events */
    struct runner_kv_event *pub; /* (n_pub, cap_pub) events not taken yet */
    size_t n_pub, cap_pub;
};

/* Starts the thread. Returns 0 or a negative errno with msg set. */
int runner_start(struct runner *r, inferd_engine *e, struct err_msg *msg);
/* The same with a tier chain (not started yet: the runner sets its wake
 * callback and starts it) whose blocks expire default_ttl_s after they are
 * stored unless a request's class says longer. The engine must have been
 * made with kv_events on and runner_kv_evict_hook as its pre-eviction hook
 * (context: r). publish_kv: keep the pool's KV events (the engine made with
 * kv_events on) for runner_take_kv_events; the loop is woken as they come. */
int runner_start_tiers(struct runner *r, inferd_engine *e, struct kv_chain *chain,
                       int64_t default_ttl_s, bool publish_kv, struct err_msg *msg);
/* For inferd_engine_config.kv_evict_hook: hands a block leaving the pool to
 * the write-back tiers. ctx: the runner. */
void runner_kv_evict_hook(void *ctx, const uint8_t id[16], const void *frame, size_t len);
/* For kv_chain_opts.wake: a tier load finished. ctx: the runner. */
void runner_kv_wake(void *ctx);
/* Stops the thread (pending requests are cancelled) and frees the boxes;
 * the engine stays the caller's. */
void runner_stop(struct runner *r);
/* Queues a copy of req (prompt and logit bias copied) under tag. */
void runner_submit(struct runner *r, uint64_t tag, const struct inferd_request *req);
/* The same for a request of a traffic class whose blocks live ttl_s
 * (0: the default). */
void runner_submit_ttl(struct runner *r, uint64_t tag, const struct inferd_request *req,
                       int64_t ttl_s);
/* Prefill for another engine: req (max_tokens 1: its token is not wanted)
 * computes as usual, and each full block of its prompt but the one holding
 * the last token, from block kv_skip on, comes out as a RUNNER_MSG_KV_BLOCK
 * message once it is in the pool; all of them before the request's final
 * event. Blocks the pool held already come out after its first step; with
 * tiers, blocks they hold are loaded first, as for any request. ttl_s: as
 * runner_submit_ttl. */
void runner_submit_prefill(struct runner *r, uint64_t tag, const struct inferd_request *req,
                           int64_t ttl_s, int kv_skip);
/* Submits req to take its prompt's blocks from another engine: when the
 * pool lacks some of those admission would attach, the request is queued
 * held and a RUNNER_MSG_KV_PULL message (kv_index: leading blocks held)
 * asks for the rest; else it runs at once and no KV_PULL comes. */
void runner_submit_pull(struct runner *r, uint64_t tag, const struct inferd_request *req,
                        int64_t ttl_s);
/* Imports a frame (frame[0..len), inside blob, a malloc'd buffer the runner
 * frees) for a held pull request; a bad frame is logged and skipped (its
 * block and those after it are computed). Unknown or released tags: the
 * frame is dropped. */
void runner_kv_import(struct runner *r, uint64_t tag, void *blob, const uint8_t *frame, size_t len);
/* Ends a pull request's wait: it is admitted with what came. */
void runner_kv_release(struct runner *r, uint64_t tag);
void runner_cancel(struct runner *r, uint64_t tag);
/* Pauses or resumes the tag's request (inferd_pause); unknown tags are
 * ignored. */
void runner_pause(struct runner *r, uint64_t tag, bool paused);
/* Moves every pending message into *msgs (a vector the caller reuses: *cap
 * grows as needed) and returns the count. Also clears the eventfd. */
size_t runner_drain(struct runner *r, struct runner_msg **msgs, size_t *cap);
void runner_get_stats(struct runner *r, struct runner_stats *s);
/* Moves the events kept since the last call into *v (a vector the caller
 * reuses) and returns their count, in the order they happened. */
size_t runner_take_kv_events(struct runner *r, struct runner_kv_event **v, size_t *cap);

#endif
