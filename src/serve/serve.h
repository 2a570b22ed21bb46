/*
 * serve.h - `inferd serve`: the HTTP API server in one process.
 *
 * Threads: the caller's thread runs the libevent loop (the connection layer
 * src/net/http.h, routing, detokenization, stop strings, encoding); prep
 * threads decode, render and tokenize requests; one store thread writes
 * stored responses (SQLite); the runner thread (runner.h) owns the engine;
 * the engine's compute pool works inside each step. server_impl.h has the
 * path of one request.
 */
#ifndef INFERD_SERVE_SERVE_H
#define INFERD_SERVE_SERVE_H

#include "base/err.h"
#include "inferd/inferd.h"
#include "kv/chain.h"
#include "kv/spec.h"
#include "node/tiers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct serve_config {
    const char *host;            /* listen address */
    int port;                    /* listen port (0: any free port, printed) */
    const char *data_dir;        /* stored responses, the demo model */
    const char *model_path;      /* GGUF to serve; NULL: the demo model in data_dir */
    const char *model_name;      /* name in the API; NULL: file name without .gguf */
    const char *api_key;         /* required bearer key, or NULL for none */
    const char *workers;         /* gateway: "HOST:PORT,..." of the workers that run the
                                    engine (cluster/remote.h); NULL: the engine runs here */
    const char *redis;           /* gateway: the workers announced in this Redis (URL,
                                    cluster/members.h), with or besides workers */
    int local_prefill;           /* gateway: prompts of at most this many tokens are prefilled
                                    by their decode worker (remote_route) */
    const char *policy;          /* gateway: routing policy by name (cluster/policy.h; NULL:
                                    balanced) */
    int n_threads;               /* engine compute threads (0: all cores) */
    int max_ctx;                 /* context length per request (0: min(trained, 4096)) */
    int max_seqs;                /* sequences running at once in the engine */
    int kv_blocks;               /* KV pool blocks (0: fit max_ctx * max_seqs) */
    enum inferd_kv_type kv_type; /* KV cache element type (default f16) */
    int token_budget;            /* tokens per engine step (0: the engine's default, 512) */
    float prefill_step_ratio;    /* mixed step cost bound in decode steps (0: engine default 2;
                                    < 0: off) */
    int max_queue;               /* waiting sequences before 429 */
    int max_open;                /* HTTP requests in progress before 503 */
    int max_conns;               /* open connections before 503 */
    int max_conns_per_client;    /* open connections from one address before 429 */
    size_t max_body;             /* request body bytes */
    size_t max_headers;          /* request header bytes */
    int header_timeout_s;        /* the whole request head must arrive within this */
    int body_timeout_s;          /* the whole body within this after the head */
    int idle_timeout_s;          /* keep-alive: a connection with no request closes after this */
    int write_timeout_s;         /* a client that reads nothing for this long is gone */
    size_t stream_buffer;        /* output bytes queued to a client before its stream pauses */
    const char *cors_origins;    /* comma-separated web origins allowed besides the server's own
                                    ("*": any), or NULL */
    int prep_threads;            /* request preparation threads (0: 2) */
    const char *store_url;       /* stored responses in this Redis (serve/store.h; NULL: SQLite
                                    in data_dir) */
    int64_t store_ttl_s;         /* stored responses expire after this (0: never) */
    size_t store_max_bytes;      /* the most one stored response (with its conversation) takes */
    int shutdown_timeout_s;      /* grace for in-flight requests on SIGINT/SIGTERM */
    const char *port_file;       /* write the bound port here once listening (tests) */
    /* KV tiers behind the engine pool and the traffic classes (node/tiers.h);
     * none listed: a disk tier in data_dir/kv sized to fit the disk */
    struct node_tiers kv;
    int kv_ttl_endpoint[4]; /* per api_kind: class of requests naming none (-1: kv.ttl.dflt) */
    double slo_ttft_ms[4];  /* gateway, per api_kind: TTFT target (0: none), early rejection */
    double slo_tpot_ms[4];  /* likewise TPOT */
};

void serve_config_default(struct serve_config *c);

/* Loads the model (making the demo model first if needed), listens, and
 * serves until SIGINT / SIGTERM. Returns 0 after a clean shutdown, or an
 * error with msg set. */
int serve_run(const struct serve_config *c, struct err_msg *msg);

#endif
