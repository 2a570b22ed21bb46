/*
 * http_conn.c - one HTTP/1.1 connection over a libevent bufferevent: its
 * phases and deadlines, the request handed to the owner, the answer's
 * framing and backpressure (contract in net/http.h; parsing in
 * http_parse.c).
 *
 * A connection is always in one phase, and its one timer means what the
 * phase says:
 *
 *   WAIT     no byte of the next request yet     fresh: header_timeout_ms,
 *            (fresh, or after an answer)         later: idle_timeout_ms;
 *                                                 then closed without a word
 *   HEAD     a head is arriving                  header_timeout_ms from its
 *                                                 first byte: 408, close
 *   BODY     its body is arriving                body_timeout_ms from the
 *                                                 head's end: 408, close
 *   OWNER    handed over, being answered         none (the owner's time); after
 *                                                 the peer's EOF: the gone-check
 *   CLOSING  our last bytes are flushing         none (write timeout applies)
 *   LINGER   write side shut, input dropped      HTTP_LINGER_MS, then close
 *
 *   WAIT -> HEAD -> [BODY] -> OWNER -> WAIT (keep-alive) | CLOSING -> LINGER
 *                 \-> refused: CLOSING (error answer, Connection: close)
 *
 * These are deadlines, not idle timers: a client trickling a byte a second
 * still meets the head deadline. Output that makes no progress for
 * write_timeout_ms is the bufferevent's write timeout (reset on every
 * successful write, running only while output is queued): the client is
 * gone.
 *
 * Reading goes on in every phase, bounded: the input buffer's high-water
 * mark is max_header_bytes, so pipelined bytes wait in it (up to a head's
 * worth, then reading stops) while a request is answered, and are parsed
 * only once its answer is complete and the output is below the high-water
 * mark. Answers therefore go out one at a time, in order.
 *
 * EOF. A read EOF means the client shut its write side - either half (it
 * still reads: it must get its answer) or wholly (close(): it is gone).
 * Both look alike until we write: a fully closed peer answers data with a
 * RST. A streamed answer writes often, so the RST comes soon. A long
 * non-streamed answer writes nothing until it is done, so after an EOF in
 * OWNER with nothing of the answer written yet, the connection writes an
 * interim "HTTP/1.1 100 Continue" (HTTP/1.1 clients must accept unexpected
 * 1xx answers, RFC 9110 15.2; an HTTP/1.0 client gets none, as RFC 9110
 * forbids, and a vanished one is noticed when the answer is written). A RST
 * arriving after a FIN does not make recv() fail (Linux reports the EOF
 * first), so the check reads the TCP state (TCP_INFO: CLOSE once reset) on
 * a timer, 5 ms doubling to 500 ms: on_gone fires within about a round trip
 * plus the interval, while the owner is still working; a half-closed client
 * stays in CLOSE_WAIT and gets its answer, then the connection closes. The
 * other cases are plain: a read error (reset) or a write error is gone at
 * once; an EOF in WAIT / HEAD / BODY ends the connection after what is
 * queued (pipelined requests already complete are still answered).
 *
 * Closing. When the layer ends a connection that may still carry unread
 * input (a refusal, a Connection: close answer, draining), closing at once
 * would make the kernel answer that input with a RST, which can destroy our
 * answer in the client's buffer before it is read. So after the last byte
 * is flushed the socket is shut for writing, and input is read and dropped
 * until the client's EOF, HTTP_LINGER_MS or HTTP_LINGER_BYTES (nginx's
 * lingering close).
 *
 * Reentrancy: owner calls (respond, stream, add_header) only queue output
 * and change the phase; anything that may free the connection runs from its
 * own libevent callbacks (the resume event carries deferred work), so no
 * owner hook ever returns to a freed connection. on_gone runs after the
 * connection is freed, with the request detached.
 *
 * Memory: a connection holds its parser (head <= max_header_bytes, body <=
 * max_body_bytes, both moved into the request when it is handed over) and
 * its input (<= max_header_bytes plus one read); output is the owner's,
 * bounded by the owner stopping while http_blocked says so. A request lives
 * from hand-over until finished (http_respond / http_stream_end), or until
 * http_server_free; it outlives its connection when the client goes.
 */
#include "net/http_impl.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

enum http_conn_phase {
    HTTP_CONN_WAIT,    /* between requests */
    HTTP_CONN_HEAD,    /* a head is arriving */
    HTTP_CONN_BODY,    /* a body is arriving */
    HTTP_CONN_OWNER,   /* handed over, not finished */
    HTTP_CONN_CLOSING, /* the last answer is flushing */
    HTTP_CONN_LINGER,  /* write side shut, input dropped */
};

struct http_conn {
    struct http_server *srv;
    struct http_conn *prev, *next; /* srv->conns */
    struct bufferevent *bev;       /* owns the socket (closed on free) */
    int fd;                        /* the socket */
    struct event *timer;           /* the phase's deadline (file comment) */
    struct event *resume;          /* deferred work: the next request, closing */
    enum http_conn_phase phase;    /* where it is (file comment) */
    struct http__parse parse;      /* the request arriving */
    struct http_request *req;      /* handed over and unfinished, or NULL */
    struct http__peer *counted;    /* the per-client count it holds (NULL: refused) */
    char peer[INET6_ADDRSTRLEN];   /* client address as text */
    uint64_t t_head_ns;            /* first byte of the current head */
    int n_served;                  /* answers completed */
    int check_ms;                  /* the gone-check's next interval (after EOF) */
    size_t lingered;               /* input bytes dropped while lingering */
    bool peer_eof;                 /* the client shut its write side */
    bool keep_alive;               /* another request may follow the current one */
    bool out_high;                 /* output reached out_high_water since it last drained */
    bool refused;                  /* a connection over a cap (503 / 429) */
    bool probed;                   /* the interim 100 Continue was written after EOF */
};

struct http_request {
    struct http_server *srv;
    struct http_conn *conn;                   /* NULL once the client is gone */
    struct http_request *prev, *next;         /* srv->requests */
    struct buf head;                          /* target, names and values (http_parse.c) */
    struct http__field *fields;               /* (n_fields), pointing into head */
    int n_fields;                             /* entries, repeats merged into the first */
    struct buf body;                          /* (body.len) bytes, NUL after */
    const char *method;                       /* static */
    const char *path;                         /* in head */
    const char *query;                        /* in head */
    int http_minor;                           /* 0 or 1 */
    bool is_head;                             /* HEAD: headers only */
    bool gone;                                /* the client went away first */
    bool started;                             /* the status line is written */
    bool streaming;                           /* http_stream_start was called */
    bool chunked;                             /* the stream is chunked (HTTP/1.1) */
    bool no_body;                             /* HEAD, 204 or 304: framing headers but no body */
    char request_id[HTTP_REQUEST_ID_MAX + 1]; /* the client's or ours */
    char peer[INET6_ADDRSTRLEN];              /* client address as text */
    uint64_t t_start_ns;                      /* first byte of its head */
    void (*on_gone)(struct http_request *, void *);  /* the owner's, or NULL */
    void (*on_drain)(struct http_request *, void *); /* the owner's, or NULL */
    void *hook_arg;                                  /* for both */
    struct buf out_headers;                          /* the owner's "Name: value\r\n" lines */
};

static void conn_parse(struct http_conn *c);

/* ---------------------------------------------------------------- helpers */

static void timer_arm(struct http_conn *c, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(c->timer, &tv);
}

static size_t out_len(struct http_conn *c)
{
    return evbuffer_get_length(bufferevent_get_output(c->bev));
}

static void out_noted(struct http_conn *c)
{
    if (out_len(c) >= c->srv->cfg.out_high_water) c->out_high = true;
}

static void resume_soon(struct http_conn *c)
{
    event_active(c->resume, 0, 0);
}

static void request_free(struct http_request *req)
{
    struct http_server *s = req->srv;
    if (req->prev)
        req->prev->next = req->next;
    else
        s->requests = req->next;
    if (req->next) req->next->prev = req->prev;
    s->n_requests--;
    buf_release(&req->head);
    buf_release(&req->body);
    buf_release(&req->out_headers);
    free(req->fields);
    free(req);
}

void http__request_free_all(struct http_server *s)
{
    while (s->requests)
        request_free(s->requests);
}

/* The status line and headers of an answer. length < 0: no Content-Length
 * (chunked, close-delimited or a status without a body). */
static void head_format(struct http_server *s, struct buf *b, int status, const char *content_type,
                        const struct buf *extra, bool chunked, long long length,
                        const char *request_id, bool close, bool http10)
{
    buf_printf(b, "HTTP/1.1 %d %s\r\n", status, http_reason(status));
    if (content_type) buf_printf(b, "Content-Type: %s\r\n", content_type);
    if (extra && extra->len) buf_append(b, extra->data, extra->len);
    if (chunked) buf_puts(b, "Transfer-Encoding: chunked\r\n");
    if (length >= 0) buf_printf(b, "Content-Length: %lld\r\n", length);
    buf_printf(b, "Date: %s\r\nx-request-id: %s\r\n", http__date(s), request_id);
    if (close)
        buf_puts(b, "Connection: close\r\n");
    else if (http10)
        buf_puts(b, "Connection: keep-alive\r\n");
    buf_puts(b, "\r\n");
}

/* ------------------------------------------------------------- closing */

void http__conn_close(struct http_conn *c)
{
    struct http_server *s = c->srv;
    struct http_request *req = c->req;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    http__server_forget(s, c->counted, c->refused);
    event_free(c->timer);
    event_free(c->resume);
    bufferevent_free(c->bev);
    http__parse_release(&c->parse);
    free(c);
    if (req) {
        req->conn = NULL;
        req->gone = true;
        if (req->on_gone) req->on_gone(req, req->hook_arg);
    }
}

/* Everything queued is on the socket: close, or linger first. */
static void conn_flushed(struct http_conn *c)
{
    if (c->phase != HTTP_CONN_CLOSING) return;
    if (c->peer_eof) {
        http__conn_close(c);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    c->phase = HTTP_CONN_LINGER;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    c->lingered = evbuffer_get_length(in);
    evbuffer_drain(in, c->lingered);
    bufferevent_enable(c->bev, EV_READ);
    timer_arm(c, HTTP_LINGER_MS);
}

static void conn_closing(struct http_conn *c)
{
    c->phase = HTTP_CONN_CLOSING;
    c->keep_alive = false;
    evtimer_del(c->timer);
    resume_soon(c); /* the output may be flushed already */
}

/* The layer answers itself (a malformed request, a limit, a timeout, a cap)
 * and closes. */
static void conn_refuse(struct http_conn *c, int status, const char *why)
{
    struct http_server *s = c->srv;
    struct http__parse *p = &c->parse;
    char id[HTTP_REQUEST_ID_MAX + 1];
    http__request_id(http__parse_field(p, "x-request-id"), id);
    const char *path = p->target_ok ? p->head.data : "";
    bool is_head = p->method && p->hp.method == HTTP_HEAD;
    struct buf body = {0}, b = {0};
    http__error_body(s, path, status, why, &body);
    struct buf extra = {0};
    if (status == 503 || status == 429) buf_puts(&extra, "Retry-After: 1\r\n");
    head_format(s, &b, status, "application/json", &extra, false, (long long)body.len, id, true,
                false);
    if (!is_head) buf_append(&b, body.data, body.len);
    bufferevent_write(c->bev, b.data, b.len);
    buf_release(&b);
    buf_release(&body);
    buf_release(&extra);
    conn_closing(c);
    if (s->hooks->on_refusal) s->hooks->on_refusal(c->peer, id, status, why, s->hooks->arg);
}

/* --------------------------------------------------------- the request */

static void conn_hand_over(struct http_conn *c)
{
    struct http_server *s = c->srv;
    struct http__parse *p = &c->parse;
    struct http_request *req = xcalloc(1, sizeof(*req));
    req->srv = s;
    req->conn = c;
    http__request_id(http__parse_field(p, "x-request-id"), req->request_id);
    req->head = p->head;
    req->fields = p->fields;
    req->n_fields = p->n_fields;
    req->body = p->body;
    if (!req->body.data) buf_append(&req->body, "", 0); /* http_body's NUL */
    req->method = p->method;
    req->path = p->path;
    req->query = p->query;
    req->http_minor = p->http_minor;
    req->is_head = p->hp.method == HTTP_HEAD;
    memcpy(req->peer, c->peer, sizeof(req->peer));
    req->t_start_ns = c->t_head_ns;
    c->keep_alive = p->keep_alive && !s->draining;
    p->head = (struct buf){0};
    p->body = (struct buf){0};
    p->fields = NULL;
    p->cap_fields = p->n_fields = 0;
    http__parse_reset(p);

    req->next = s->requests;
    if (s->requests) s->requests->prev = req;
    s->requests = req;
    s->n_requests++;
    c->req = req;
    c->phase = HTTP_CONN_OWNER;
    c->probed = false;
    evtimer_del(c->timer);
    s->hooks->on_request(req, s->hooks->arg);
}

/* The current answer is complete (queued): the next request, or closing. */
static void conn_answer_done(struct http_conn *c, bool close)
{
    c->req = NULL;
    c->n_served++;
    if (close || !c->keep_alive) {
        conn_closing(c);
        return;
    }
    c->phase = HTTP_CONN_WAIT;
    timer_arm(c, c->srv->cfg.idle_timeout_ms);
    resume_soon(c);
}

/* Nothing more will arrive and no request is in progress. */
static void conn_input_ended(struct http_conn *c)
{
    if (c->phase == HTTP_CONN_WAIT && out_len(c) == 0) {
        http__conn_close(c);
        return;
    }
    /* An unfinished head or body is dropped; what is queued goes out. */
    conn_closing(c);
}

/* Parses what the input holds, while the phase reads requests. */
static void conn_parse(struct http_conn *c)
{
    struct http_server *s = c->srv;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    while (c->phase == HTTP_CONN_WAIT || c->phase == HTTP_CONN_HEAD || c->phase == HTTP_CONN_BODY) {
        /* A pipelined request waits until the client reads what it has. */
        if (c->phase == HTTP_CONN_WAIT && out_len(c) >= s->cfg.out_high_water) return;
        if (evbuffer_get_length(in) == 0) break;
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1 || v.iov_len == 0) {
            /* An empty first chain: make a prefix contiguous. */
            v.iov_len = MIN(evbuffer_get_length(in), (size_t)65536);
            v.iov_base = evbuffer_pullup(in, (ev_ssize_t)v.iov_len);
            if (!v.iov_base) break;
        }
        enum http__parse_result res;
        size_t n = http__parse_feed(&c->parse, v.iov_base, v.iov_len, &res);
        evbuffer_drain(in, n);
        if (c->phase == HTTP_CONN_WAIT && !http__parse_idle(&c->parse)) {
            c->phase = HTTP_CONN_HEAD;
            c->t_head_ns = time_now_ns();
            timer_arm(c, s->cfg.header_timeout_ms);
        }
        switch (res) {
        case HTTP__PARSE_MORE:
            break;
        case HTTP__PARSE_BODY:
            c->phase = HTTP_CONN_BODY;
            timer_arm(c, s->cfg.body_timeout_ms);
            /* A client that waits for it; one that sent body bytes already
             * did not wait (RFC 9110 10.1.1 lets us omit it then). */
            if (c->parse.expect_continue && evbuffer_get_length(in) == 0) {
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                bufferevent_write(c->bev, cont, sizeof(cont) - 1);
            }
            break;
        case HTTP__PARSE_DONE:
            conn_hand_over(c);
            return;
        case HTTP__PARSE_FAILED:
            conn_refuse(c, c->parse.status, c->parse.why);
            return;
        }
    }
    if (c->peer_eof &&
        (c->phase == HTTP_CONN_WAIT || c->phase == HTTP_CONN_HEAD || c->phase == HTTP_CONN_BODY))
        conn_input_ended(c);
}

/* After the client's EOF while its request is being answered: make a fully
 * closed peer show itself (file comment). */
static void conn_check_start(struct http_conn *c)
{
    if (!c->req->started && c->req->http_minor == 1 && !c->probed) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        bufferevent_write(c->bev, cont, sizeof(cont) - 1);
        c->probed = true;
    }
    c->check_ms = 5;
    timer_arm(c, c->check_ms);
}

/* Has the peer reset the connection? */
static bool conn_reset(struct http_conn *c)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err != 0) return true;
    if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE)
        return true;
    return false;
}

/* ---------------------------------------------------- libevent callbacks */

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    if (c->phase == HTTP_CONN_LINGER) {
        struct evbuffer *in = bufferevent_get_input(bev);
        size_t n = evbuffer_get_length(in);
        evbuffer_drain(in, n);
        c->lingered += n;
        if (c->lingered > HTTP_LINGER_BYTES) http__conn_close(c);
        return;
    }
    conn_parse(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
    struct http_conn *c = arg;
    struct http_server *s = c->srv;
    if (c->out_high && out_len(c) < s->cfg.out_high_water / 2) {
        c->out_high = false;
        struct http_request *req = c->req;
        if (req && req->on_drain) req->on_drain(req, req->hook_arg);
    }
    if (out_len(c) == 0 && c->phase == HTTP_CONN_CLOSING) {
        conn_flushed(c);
        return;
    }
    if (c->phase == HTTP_CONN_WAIT) conn_parse(c);
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct http_conn *c = arg;
    if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) && !(what & BEV_EVENT_ERROR)) {
        c->peer_eof = true;
        switch (c->phase) {
        case HTTP_CONN_WAIT:
        case HTTP_CONN_HEAD:
        case HTTP_CONN_BODY:
            conn_parse(c);
            break;
        case HTTP_CONN_OWNER:
            conn_check_start(c);
            break;
        case HTTP_CONN_CLOSING:
            if (out_len(c) == 0) conn_flushed(c);
            break;
        case HTTP_CONN_LINGER:
            http__conn_close(c);
            break;
        }
        return;
    }
    /* A reset, a failed write, or output stuck for write_timeout_ms. */
    http__conn_close(c);
}

static void conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    struct http_server *s = c->srv;
    char why[96];
    switch (c->phase) {
    case HTTP_CONN_WAIT:
        /* An answer still flowing out at its own pace is not idleness. */
        if (out_len(c) > 0) {
            timer_arm(c, s->cfg.idle_timeout_ms);
            return;
        }
        http__conn_close(c);
        break;
    case HTTP_CONN_HEAD:
        snprintf(why, sizeof(why), "request head not complete within %d ms",
                 s->cfg.header_timeout_ms);
        conn_refuse(c, 408, why);
        break;
    case HTTP_CONN_BODY:
        snprintf(why, sizeof(why), "request body not complete within %d ms",
                 s->cfg.body_timeout_ms);
        conn_refuse(c, 408, why);
        break;
    case HTTP_CONN_OWNER:
        if (conn_reset(c)) {
            http__conn_close(c);
            return;
        }
        c->check_ms = c->check_ms * 2 > 500 ? 500 : c->check_ms * 2;
        timer_arm(c, c->check_ms);
        break;
    case HTTP_CONN_CLOSING:
        break;
    case HTTP_CONN_LINGER:
        http__conn_close(c);
        break;
    }
}

static void conn_resume_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    if (c->phase == HTTP_CONN_CLOSING) {
        if (out_len(c) == 0) conn_flushed(c);
        return;
    }
    if (c->phase == HTTP_CONN_WAIT) conn_parse(c);
}

struct http_conn *http__conn_new(struct http_server *s, int fd, const char *peer,
                                 struct http__peer *counted, int refuse_status,
                                 const char *refuse_why)
{
    struct bufferevent *bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return NULL;
    struct http_conn *c = xcalloc(1, sizeof(*c));
    c->srv = s;
    c->bev = bev;
    c->fd = fd;
    c->counted = counted;
    c->refused = refuse_status != 0;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    c->timer = evtimer_new(s->base, conn_timer_cb, c);
    c->resume = event_new(s->base, -1, 0, conn_resume_cb, c);
    CHECK(c->timer && c->resume);
    http__parse_init(&c->parse, s->cfg.max_header_bytes, s->cfg.max_body_bytes);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;

    bufferevent_setcb(bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
    bufferevent_setwatermark(bev, EV_READ, 0, s->cfg.max_header_bytes);
    /* The write callback runs at or below the low mark: just below half. */
    size_t half = s->cfg.out_high_water / 2;
    bufferevent_setwatermark(bev, EV_WRITE, half ? half - 1 : 0, 0);
    struct timeval wt = {s->cfg.write_timeout_ms / 1000, (s->cfg.write_timeout_ms % 1000) * 1000};
    bufferevent_set_timeouts(bev, NULL, &wt);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    c->keep_alive = true;
    c->phase = HTTP_CONN_WAIT;
    if (refuse_status) {
        conn_refuse(c, refuse_status, refuse_why);
    } else {
        /* A fresh connection gets the head deadline for its first byte too:
         * connecting and saying nothing is the cheapest way to hold one. */
        timer_arm(c, s->cfg.header_timeout_ms);
    }
    return c;
}

struct http_conn *http__conn_next(struct http_conn *c)
{
    return c->next;
}

void http__conn_drain(struct http_conn *c)
{
    c->keep_alive = false;
    if (c->phase == HTTP_CONN_WAIT) conn_closing(c);
}

/* ----------------------------------------------------- public: request */

const char *http_method(const struct http_request *req)
{
    return req->method;
}

const char *http_path(const struct http_request *req)
{
    return req->path;
}

const char *http_query(const struct http_request *req)
{
    return req->query;
}

bool http_is_head(const struct http_request *req)
{
    return req->is_head;
}

const char *http_header(const struct http_request *req, const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; i < req->n_fields; i++) {
        const struct http__field *f = &req->fields[i];
        if (!f->merged && f->name_len == n && strncasecmp(f->name, name, n) == 0) return f->value;
    }
    return NULL;
}

const char *http_body(const struct http_request *req, size_t *len)
{
    if (len) *len = req->body.len;
    return req->body.data;
}

const char *http_request_id(const struct http_request *req)
{
    return req->request_id;
}

const char *http_peer(const struct http_request *req)
{
    return req->peer;
}

uint64_t http_t_start_ns(const struct http_request *req)
{
    return req->t_start_ns;
}

void http_set_hooks(struct http_request *req, void (*on_gone)(struct http_request *, void *),
                    void (*on_drain)(struct http_request *, void *), void *arg)
{
    req->on_gone = on_gone;
    req->on_drain = on_drain;
    req->hook_arg = arg;
}

bool http_gone(const struct http_request *req)
{
    return req->gone;
}

/* ------------------------------------------------------ public: answer */

static const char *const layer_headers[] = {"content-length", "transfer-encoding", "connection",
                                            "date", "x-request-id"};

void http_add_header(struct http_request *req, const char *name, const char *value)
{
    CHECK(!req->started);
    if (req->gone) return;
    bool ok = name[0] != '\0';
    for (const char *p = name; *p && ok; p++)
        ok = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
             strchr("!#$%&'*+-.^_`|~", *p);
    for (const unsigned char *p = (const unsigned char *)value; *p && ok; p++)
        ok = *p == '\t' || (*p >= 0x20 && *p != 0x7f);
    if (!ok) {
        log_warn("http: response header '%s' dropped: invalid name or value", name);
        return;
    }
    for (size_t i = 0; i < ARRAY_LEN(layer_headers); i++) {
        if (strcasecmp(name, layer_headers[i]) == 0) {
            log_warn("http: response header '%s' dropped: the layer sets it", name);
            return;
        }
    }
    buf_printf(&req->out_headers, "%s: %s\r\n", name, value);
}

void http_respond(struct http_request *req, int status, const char *content_type, const void *body,
                  size_t len)
{
    CHECK(!req->started && status >= 200 && status <= 999);
    struct http_conn *c = req->conn;
    if (!c) {
        request_free(req);
        return;
    }
    req->started = true;
    /* 204 and 304 carry no body (RFC 9110 6.4.1); 204 no Content-Length. */
    bool no_body = status == 204 || status == 304;
    struct buf b = {0};
    head_format(c->srv, &b, status, content_type, &req->out_headers, false,
                no_body ? -1 : (long long)len, req->request_id, !c->keep_alive,
                req->http_minor == 0);
    if (!no_body && !req->is_head) buf_append(&b, body, len);
    bufferevent_write(c->bev, b.data, b.len);
    buf_release(&b);
    out_noted(c);
    conn_answer_done(c, false);
    request_free(req);
}

void http_stream_start(struct http_request *req, int status, const char *content_type)
{
    CHECK(!req->started && status >= 200 && status <= 999);
    req->started = true;
    req->streaming = true;
    struct http_conn *c = req->conn;
    if (!c) return;
    bool no_status_body = status == 204 || status == 304;
    req->no_body = req->is_head || no_status_body;
    req->chunked = req->http_minor == 1 && !no_status_body;
    /* HTTP/1.0 has no chunked coding: the body ends where the connection
     * does (a HEAD answer has no body to delimit). */
    if (req->http_minor == 0 && !req->no_body) c->keep_alive = false;
    /* The kernel's send buffer would otherwise grow (autotuning) to several
     * MiB per connection while a client reads nothing: a stream's bytes in
     * flight are bounded by our queue plus this, so a stalled reader is
     * noticed (http_blocked) after a known amount, and a thousand of them
     * cannot pin gigabytes of socket memory. Tokens need little: at 10,000
     * tokens/s of 200 bytes, 10 ms of round trip holds 20 KB. */
    int sndbuf = (int)MIN(c->srv->cfg.out_high_water, (size_t)(4u << 20));
    if (sndbuf > 0)
        setsockopt(bufferevent_getfd(c->bev), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    struct buf b = {0};
    head_format(c->srv, &b, status, content_type, &req->out_headers, req->chunked, -1,
                req->request_id, !c->keep_alive, req->http_minor == 0);
    bufferevent_write(c->bev, b.data, b.len);
    buf_release(&b);
    out_noted(c);
}

void http_stream_write(struct http_request *req, const void *data, size_t len)
{
    CHECK(req->streaming);
    struct http_conn *c = req->conn;
    if (!c || len == 0 || req->no_body) return;
    if (req->chunked) {
        char line[24];
        int n = snprintf(line, sizeof(line), "%zx\r\n", len);
        bufferevent_write(c->bev, line, (size_t)n);
        bufferevent_write(c->bev, data, len);
        bufferevent_write(c->bev, "\r\n", 2);
    } else {
        bufferevent_write(c->bev, data, len);
    }
    out_noted(c);
}

void http_stream_end(struct http_request *req)
{
    CHECK(req->streaming);
    struct http_conn *c = req->conn;
    if (c) {
        if (req->chunked && !req->no_body) bufferevent_write(c->bev, "0\r\n\r\n", 5);
        out_noted(c);
        conn_answer_done(c, false);
    }
    request_free(req);
}

bool http_blocked(const struct http_request *req)
{
    struct http_conn *c = req->conn;
    return c && out_len(c) >= c->srv->cfg.out_high_water;
}
