/*
 * worker.h - `inferd worker`: an engine node of a cluster. It loads a
 * model, runs the engine on the runner thread (node/runner.h, the loop
 * `inferd serve` runs too) and speaks the cluster protocol (proto.h) over
 * TCP to whoever connects, a gateway in the first place:
 *
 *   peer                       worker
 *   HELLO (role, name)  --->
 *                       <---   HELLO (role, engine fingerprint, block
 *                              tokens, frame bytes, model)
 *   SUBMIT (request n)  --->   runner_submit
 *                       <---   TOKEN n ... TOKEN n (finish), or ERROR n
 *   CANCEL n            --->   runner_cancel (a TOKEN n with finish
 *                              CANCELLED ends it)
 *   PING                --->
 *                       <---   PONG
 *                       <---   STATS, every stats_ms, to each peer
 *   BYE / close         --->   the connection's requests are cancelled
 *
 * Events: one libevent loop owns the connections; the runner's eventfd wakes
 * it and one drain turns a step's events into TOKEN frames. A frame that
 * fails to decode, or one that does not belong (anything before HELLO, a
 * second SUBMIT of a live id), closes that connection with a logged reason
 * and an ERROR frame; nothing else is touched.
 *
 * Roles are the gateway's routing: any worker takes whole requests, pulls
 * (a SUBMIT naming a KV peer: its prompt's blocks come from that prefill
 * worker) and prefill-only requests (its blocks go back as KV_BLOCK
 * frames); worker.c has the hand-off. A SUBMIT with generated > 0 resumes a
 * request moved from a lost worker (inferd_request.n_output). KV tiers
 * (--kv-tier, none by default) sit behind the pool as in `inferd serve`; a
 * SUBMIT's TTL class is looked up in this worker's classes (an unknown one:
 * the default). Grammars compile on the runner thread at submit.
 *
 * Mock mode (--mock): the model file is only named in HELLO, no engine
 * runs, and a SUBMIT is answered in the same loop turn; the gateway's own
 * overhead is then what a client measures.
 */
#ifndef INFERD_CLUSTER_WORKER_H
#define INFERD_CLUSTER_WORKER_H

#include "base/err.h"
#include "cluster/proto.h"
#include "node/tiers.h"

struct worker_config {
    const char *model_path; /* GGUF file (required) */
    const char *name;       /* in HELLO and the logs (NULL: ROLE-PORT) */
    const char *host;       /* listen address (default 127.0.0.1) */
    int port;               /* listen port (0: any free one) */
    const char *port_file;  /* the bound port is written there (NULL: none) */
    enum cl_role role;      /* prefill, decode or mixed (default mixed) */
    int n_threads;          /* engine compute threads (0: all cores) */
    int max_ctx;            /* context per request (0: min(trained, 4096)) */
    int max_seqs;           /* sequences at once (0: the engine's default) */
    int kv_blocks;          /* KV pool blocks (0: fit max_ctx x max_seqs) */
    int max_queue;          /* requests waiting before a SUBMIT is refused
                               (ERR_OVERLOADED; 0: the engine's default) */
    int max_conns;          /* connections at once (default 256) */
    int stats_ms;           /* STATS frame period (default 250) */
    const char *redis;      /* announce this worker there (members.h; NULL: don't) */
    struct node_tiers kv;   /* KV tiers behind the engine pool (none by default: give a
                               shared one to every worker of a pool) and the traffic classes
                               that a SUBMIT's TTL class names */
    bool mock;              /* no engine: every SUBMIT is answered at once with max_tokens
                               tokens (the prompt's, cycled) and LENGTH, for measuring what
                               a gateway costs on its own */
};

void worker_config_default(struct worker_config *c);

/* Runs until SIGINT or SIGTERM. Returns 0, or an error with a message
 * (model, engine, listen address). */
int worker_run(const struct worker_config *c, struct err_msg *msg);

#endif
