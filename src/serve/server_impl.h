/*
 * server_impl.h - what the files of `inferd serve` share: the server, one
 * generation call, and the functions each file gives the others.
 *
 *   server.c   set-up (model, engine, store, threads, listener), signals,
 *              shutdown
 *   routes.c   the route table: method and path -> handler; CORS, auth,
 *              limits, 404 / 405; the endpoints that are not generation
 *   call.c     the life of one generation request (below)
 *   prep.c     request preparation on the prep threads: JSON decoding, the
 *              conversation (stored responses), chat template, tokenization,
 *              the forced tool-call grammar
 *
 * The life of a generation call, and on which thread each part runs:
 *
 *   loop:   route -> call_start: a struct call, a prep job
 *   prep:   decode, build messages, template, tokenize, checks (prep.c)
 *   loop:   call_prepared: an error answer, or one engine request per
 *           choice to the runner, each under a fresh tag
 *   runner: steps; events into its outbox; eventfd
 *   loop:   call_on_wake: each event to its call by tag -> api_pipe (the
 *           per-choice pipeline in src/api) -> http_stream_write (streams)
 *           or the choice's text; a full socket pauses the call's engine
 *           requests until it drains
 *   loop:   every choice ended -> call_finish: for a stored Responses
 *           answer a store job first (store thread), then the final bytes;
 *           metrics; the log line; the call is freed once the runner has
 *           sent the final message of every tag.
 *
 * Ownership: a call belongs to the loop thread, except for its `prep` part
 * while its prep job runs (the loop touches only `gone` then, and frees the
 * call when the job comes back). The runner only ever sees tags.
 */
#ifndef INFERD_SERVE_SERVER_IMPL_H
#define INFERD_SERVE_SERVER_IMPL_H

#include "api/api.h"
#include "api/pipeline.h"
#include "base/jobq.h"
#include "base/u64map.h"
#include "net/http.h"
#include "serve/metrics.h"
#include "cluster/remote.h"
#include "node/backend.h"
#include "node/runner.h"
#include "serve/serve.h"
#include "serve/store.h"

#include <stdbool.h>
#include <stdint.h>

struct event;
struct event_base;
struct chat_template;
struct tokenizer;

/* One engine request of a call. */
struct gen {
    struct call *call;   /* owner */
    uint64_t tag;        /* runner tag */
    int prompt;          /* index into the call's prompts */
    bool engine_open;    /* the runner has not sent its final message yet */
    uint64_t t_first_ns; /* first token */
    uint64_t t_last_ns;  /* latest token */
};

/* What a prep job produces for a call (written by the prep thread). */
struct call_prep {
    int rc;                           /* 0, or the error to answer */
    int64_t kv_ttl_s;                 /* the request's traffic class: its blocks' time to live */
    char kv_ttl_class[32];            /* and its name (for workers, which have their own table) */
    struct err_msg msg;               /* the error's message */
    struct i32vec *prompt_ids;        /* (n_prompts) tokenized prompts */
    int n_prompts;                    /* entries of prompt_ids */
    char **prompt_text;               /* (n_prompts) prompt text for echo, or NULL */
    json_t *history;                  /* Responses: the stored conversation continued, or NULL */
    bool parse_tools;                 /* the output is parsed for tool calls */
    inferd_compiled_grammar *grammar; /* the request's grammar compiled, or NULL (owned) */
};

struct call {
    struct server *srv;                     /* owner */
    struct http_request *req;               /* the HTTP request (ours until finished) */
    struct jobq_job job;                    /* the prep job, then the store job */
    bool job_out;                           /* a prep or store job holds the call */
    bool gone;                              /* the client went away */
    bool replied;                           /* the answer (or error) is complete or being stored */
    bool http_started;                      /* stream: status and headers sent */
    bool paused;                            /* the engine requests are paused: the socket is full */
    int retry_after_s;                      /* a refusal's retry hint from the backend (0: none) */
    const char *endpoint;                   /* route label for metrics */
    char method[16];                        /* the request's method, for the log line */
    char request_id[136];                   /* its x-request-id, for the log line */
    char trace_id[33];                      /* W3C trace id: the client's traceparent's,
                                               else its request id's (32 hex digits) */
    struct api_request r;                   /* decoded request */
    struct call_prep prep;                  /* the prep job's results */
    int kv_tier_blocks[KV_CHAIN_MAX_TIERS]; /* prompt blocks each KV tier served */
    struct api_pipe pipe;                   /* the output pipeline (after prep) */
    bool pipe_on;                           /* pipe was initialised */
    struct gen *gens;                       /* (pipe.out.n_choices) */
    char *store_resp;                       /* store job: the response JSON to store */
    char *store_conv;                       /* store job: the conversation JSON */
    int store_rc;                           /* store job: result */
    struct err_msg store_msg;               /* store job: error message */
    uint64_t t_start_ns;                    /* request received */
    int status;                             /* HTTP status sent */
    struct call *prev, *next;               /* the server's live calls */
};

struct server {
    const struct serve_config *cfg;   /* flags */
    struct kv_chain *kv_chain;        /* the KV tiers behind the engine pool, or NULL */
    struct event_base *base;          /* the loop */
    struct http_server *http;         /* the connection layer */
    struct http_hooks hooks;          /* its hooks (point here) */
    struct event *wake_ev;            /* runner eventfd readable */
    struct event *prep_ev;            /* prep jobs done */
    struct event *store_ev;           /* store jobs done */
    struct event *purge_ev;           /* periodic store purge */
    struct event *sig_int, *sig_term; /* shutdown signals */
    struct event *deadline;           /* shutdown grace timer */
    struct event *exit_ev;            /* shutdown: polls for the last call to go */
    struct jobq prep;                 /* preparation threads */
    struct jobq storeq;               /* the store thread */
    bool prep_on, store_on;           /* the queues were started */
    inferd_model *model;              /* weights */
    inferd_engine *engine;            /* owned by the runner thread while it runs */
    struct runner runner;             /* engine thread (not started in a gateway) */
    struct node_local local;          /* the runner as a backend */
    struct remote *remote;            /* a gateway's workers, or NULL */
    struct node_backend *be;          /* where generation requests go: &local.base or remote's */
    struct tokenizer *tok;            /* the model's tokenizer */
    struct chat_template *tmpl;       /* its chat template, or NULL */
    struct api_pipe_model pm;         /* the model as the pipeline sees it */
    int32_t tool_markers[8];          /* special tokens the detokenizer keeps for the parser */
    struct store *store;              /* stored responses */
    struct metrics metrics;           /* counters */
    char model_name[256];             /* id in the API */
    bool demo;                        /* serving the random-weight demo model */
    int max_ctx;                      /* engine context length */
    int n_vocab;                      /* model vocabulary */
    size_t max_token_bytes;           /* the longest token's text */
    size_t max_prompt_bytes;          /* text beyond this cannot fit max_ctx (see prep.c) */
    int64_t created;                  /* start time, unix seconds */
    char own_origins[4][96];          /* origins of the server's own pages */
    struct call *calls;               /* live calls (list head) */
    struct u64map tags;               /* runner tag -> struct call * */
    uint64_t next_tag;                /* runner tags */
    struct runner_msg *msgs;          /* (cap_msgs) drain buffer */
    size_t cap_msgs;                  /* capacity of msgs */
    int port;                         /* bound port */
    bool stopping;                    /* shutting down: refuse new work */
    int n_side_jobs;                  /* prep / store jobs out that belong to no call */
};

extern const char serve_demo_note[];

/* routes.c */
void serve_on_request(struct http_request *req, void *arg);
void serve_error_body(const char *path, int status, const char *message, struct buf *out,
                      void *arg);
void serve_on_refusal(const char *peer, const char *request_id, int status, const char *why,
                      void *arg);
/* An error answer in kind's schema; metrics and the log line (which says
 * why). */
void serve_send_error(struct server *s, struct http_request *req, const char *endpoint,
                      enum api_kind kind, int code, const char *message, const char *param);
void serve_send_json(struct server *s, struct http_request *req, int status, json_t *v);
void serve_retry_after(struct server *s, struct http_request *req);
void serve_log_request(struct http_request *req, const char *endpoint, int status, int n_prompt,
                       int n_gen, const char *note);
/* The same line from copies, once the request itself is finished (freed). */
void serve_log_line(const char *method, const char *request_id, uint64_t t_start_ns,
                    const char *endpoint, int status, int n_prompt, int n_gen, const char *note);

/* call.c */
void call_start(struct server *s, struct http_request *req, const char *endpoint,
                enum api_kind kind);
void call_on_wake(struct server *s);
/* Shutdown: fails every call still in flight. */
void call_fail_all(struct server *s, int code, const char *message);
/* Teardown only (the runner stopped, the connections closed): frees a call
 * whatever still refers to it. */
void call_free_now(struct call *c);

/* prep.c: runs on a prep thread; fills c->r and c->prep. */
void prep_generation(struct server *s, struct call *c, const char *body, size_t len,
                     enum api_kind kind);

/* server.c */
void serve_maybe_exit(struct server *s);

#endif
