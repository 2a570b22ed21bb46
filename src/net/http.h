/*
 * http.h - the HTTP/1.1 connection layer: listening, connections, strict
 * request parsing, deadlines, caps and backpressure, on libevent
 * bufferevents with the Node.js parser (libhttp-parser) underneath.
 *
 * Why not evhttp: libevent 2.1's evhttp writes HTML error pages, has no cap
 * on connections, lets a client hold a connection with one byte a minute
 * (its timer is an idle timer, not a deadline), and does not refuse a second
 * Content-Length. This layer owns the wire; everything it refuses gets a
 * JSON body (through the owner's error hook) and the connection closed.
 *
 *   accept -> [caps] -> conn -> parse head (header deadline)
 *                              -> body (body deadline, size cap, 100-continue)
 *                              -> on_request(req)           one at a time;
 *                                   respond / stream ...     pipelined bytes
 *                              -> keep-alive idle timer      wait their turn
 *
 * Requests on one connection are answered in order, one at a time: bytes of
 * a pipelined next request are read (within the header bound) but parsed
 * only once the current answer is complete. A request is handed over whole
 * (head and body). The rules the layer enforces (RFC 9112 framing, limits,
 * deadlines, caps) are in http_parse.c, http_conn.c and http_server.c, and
 * in docs/architecture.md section 8.
 *
 * Ownership: a `struct http_request` belongs to the owner from on_request
 * until the owner finishes it (http_respond or http_stream_end). It stays
 * valid after its client went away (the on_gone hook says so); finishing it
 * then writes nothing and frees it. Every request handed over must be
 * finished exactly once.
 *
 * Thread: everything here runs on, and must be called from, the loop thread
 * of the event_base given to http_server_new. The owner's hooks may call any
 * request function and http_server_drain, but not http_server_free.
 *
 * Signals: a write to a reset socket raises SIGPIPE; http_server_new sets it
 * to SIG_IGN if it is still SIG_DFL.
 */
#ifndef INFERD_NET_HTTP_H
#define INFERD_NET_HTTP_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct http_server;
struct http_request;

struct http_config {
    const char *host;         /* listen address */
    int port;                 /* listen port (0: any free port; http_server_port says which) */
    int max_conns;            /* open connections; beyond: 503 and close (also the most refused
                                 connections being closed at once) */
    int max_conns_per_client; /* open connections from one address; beyond: 429 and close */
    size_t max_header_bytes;  /* request line + headers; beyond: 431 */
    size_t max_body_bytes;    /* body; beyond: 413 (before reading it when announced) */
    int header_timeout_ms;    /* the whole head must arrive within this, from its first byte */
    int body_timeout_ms;      /* the whole body must arrive within this, from the head's end */
    int idle_timeout_ms;      /* keep-alive: a connection with no request in progress closes */
    int write_timeout_ms;     /* queued output making no progress this long: the client is gone */
    size_t out_high_water;    /* queued output bytes from which http_blocked says true; a
                                 pipelined request waits while output is above it */
};

/* Fills the defaults: 127.0.0.1:8080, 4096 connections, 64 per client, 64 KiB
 * of headers, 8 MiB of body, 10 s / 60 s / 120 s / 30 s timeouts, 256 KiB of
 * output. */
void http_config_default(struct http_config *c);

/* The owner's hooks; arg is http_hooks.arg. */
struct http_hooks {
    void *arg;
    /* A whole request arrived. */
    void (*on_request)(struct http_request *req, void *arg);
    /* Fills out with the JSON body for an error the layer answers itself (a
     * malformed request, a limit, a timeout, a cap), in the schema the path's
     * API uses; path is "" while the request target is not known (a cap, a
     * malformed request line); status is the HTTP status, message says what
     * was wrong. NULL: {"error":{"message":...,"type":"invalid_request_error"}}. */
    void (*error_body)(const char *path, int status, const char *message, struct buf *out,
                       void *arg);
    /* One line for the log, every refusal by the layer (status and why);
     * request_id is the one its answer carries. */
    void (*on_refusal)(const char *peer, const char *request_id, int status, const char *why,
                       void *arg);
};

/* Binds and listens. Returns 0, or an error (-EADDRINUSE, ERR_INVALID for a
 * bad config or address, ...) with msg set. The config is copied (host is
 * read here only); the hooks struct must outlive the server. */
int http_server_new(struct event_base *base, const struct http_config *cfg,
                    const struct http_hooks *hooks, struct http_server **out, struct err_msg *msg);
/* The port actually bound. */
int http_server_port(const struct http_server *s);
/* Stops accepting; idle keep-alive connections close at once, busy ones after
 * their answer (no keep-alive from now on). */
void http_server_drain(struct http_server *s);
/* Connections open now (refused ones still closing included), and requests
 * handed over and not yet finished. */
int http_server_n_conns(const struct http_server *s);
int http_server_n_requests(const struct http_server *s);
/* Closes every connection. Requests not yet finished must not be used after
 * this; their on_gone hooks run first (and may finish them). */
void http_server_free(struct http_server *s);

/* --------------------------------------------------------- the request */

/* Method, path (without query), query (after '?', or "") and the HTTP minor
 * version, valid until the request is finished. */
const char *http_method(const struct http_request *req); /* "GET", "POST", ... */
const char *http_path(const struct http_request *req);   /* "/v1/models", percent-decoded no */
const char *http_query(const struct http_request *req);
bool http_is_head(const struct http_request *req);
/* The value of a header (case-insensitive name), or NULL; a header sent more
 * than once gives its values joined by ", ". */
const char *http_header(const struct http_request *req, const char *name);
/* The body (NUL-terminated for convenience; len is authoritative). */
const char *http_body(const struct http_request *req, size_t *len);
/* The request id: the client's x-request-id when it is 1..128 visible ASCII
 * bytes (0x21..0x7e), else a fresh one (32 hex digits from getrandom). Every
 * response carries it as x-request-id. */
const char *http_request_id(const struct http_request *req);
/* The client's address as text ("127.0.0.1"). */
const char *http_peer(const struct http_request *req);
/* Nanoseconds (time_now_ns) when the head's first byte arrived (for a
 * pipelined request: when its turn came, as its bytes waited unread). */
uint64_t http_t_start_ns(const struct http_request *req);

/* Hooks for one request, set by the owner; arg is theirs.
 *   on_gone   the client went away (connection reset or closed, write timeout)
 *             before the answer was finished; nothing more will reach it. A
 *             client that only shut down its write side after sending the
 *             request is not gone: it still gets its answer.
 *   on_drain  queued output fell below half the high-water mark after
 *             reaching it (when http_blocked would have said true). */
void http_set_hooks(struct http_request *req, void (*on_gone)(struct http_request *, void *),
                    void (*on_drain)(struct http_request *, void *), void *arg);
bool http_gone(const struct http_request *req);

/* ---------------------------------------------------------- the answer */

/* Adds a response header (before the answer starts). Content-Length,
 * Transfer-Encoding, Connection, Date and x-request-id are the layer's; a
 * name that is one of them or not a token, or a value with CR, LF or other
 * control bytes, is dropped with a warning. */
void http_add_header(struct http_request *req, const char *name, const char *value);
/* The whole answer (status 200..999; Content-Length added, except for 204;
 * no body for 204 and 304); finishes the request. HEAD: the headers only,
 * with the Content-Length the body would have. */
void http_respond(struct http_request *req, int status, const char *content_type, const void *body,
                  size_t len);
/* A streamed answer: status line and headers now (chunked for HTTP/1.1,
 * close-delimited for 1.0), then any number of writes, then the end, which
 * finishes the request. Writes are queued whatever http_blocked says; the
 * owner is expected to stop producing while it is true. HEAD: the headers a
 * GET gets, and no body (writes are dropped). */
void http_stream_start(struct http_request *req, int status, const char *content_type);
void http_stream_write(struct http_request *req, const void *data, size_t len);
void http_stream_end(struct http_request *req);
/* Queued output is at or above the high-water mark (false once gone). */
bool http_blocked(const struct http_request *req);

/* Reason phrase of a status ("Not Found"). */
const char *http_reason(int status);

#endif
