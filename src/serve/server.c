/*
 * server.c - the HTTP API server: routes, the life of one request, shutdown.
 *
 * HTTP is libevent's evhttp: it parses HTTP/1.1 (keep-alive, chunked
 * bodies), enforces the body and header size limits and the connection
 * timeouts, and streams a reply in chunks (evhttp_send_reply_start / _chunk
 * / _end), which is all an SSE stream needs. Writing our own server on
 * bufferevents would buy nothing here. What evhttp lacks - a connection cap -
 * is replaced by a cap on requests in progress (503 + Retry-After).
 *
 * The path of one generation request (all on the loop thread except the
 * engine step):
 *   on_request     route; check auth and limits; decode the body into an
 *                  api_request (api.h); build each prompt (chat template +
 *                  tokenizer, or the client's text / token ids); check the
 *                  context length; submit one engine request per choice to
 *                  the runner, each under a fresh tag.
 *   runner thread  inferd_submit, steps, polls events into the outbox and
 *                  writes the eventfd.
 *   on_wake        drains the outbox; each message goes to its call by tag:
 *                  token -> incremental detokenizer -> stop-string hold-back
 *                  -> tool-call parser (requests with tools: content, calls
 *                  and argument pieces) -> SSE events (stream) or the
 *                  choice's text and calls; finish -> flush them all and end
 *                  the choice. A stop string ends the
 *                  choice at once and cancels its engine request.
 *   finish_call    when every choice has ended: the final events or the
 *                  whole JSON answer, the stored response, metrics, one log
 *                  line. The call itself lives until the runner has sent
 *                  the final message of each of its tags.
 * A client that goes away (evhttp's close callback) cancels every engine
 * request of its call; the engine frees their KV at its next step.
 *
 * Ownership: a call belongs to the loop thread; the runner only ever sees
 * tags. evhttp requests whose connection died are still ours: evhttp frees
 * them when we send the (discarded) reply, so every call ends with a send.
 */
#include "serve/serve.h"

#include "api/api.h"
#include "api/encode.h"
#include "api/stopstr.h"
#include "api/toolcall.h"
#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "gguf/gguf.h"
#include "inferd/inferd.h"
#include "model/chat_template.h"
#include "model/maker.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/metrics.h"
#include "serve/runner.h"
#include "serve/store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

/* One engine request of a call. */
struct gen {
    uint64_t tag;               /* runner tag */
    int prompt;                 /* index into the call's prompts */
    bool engine_open;           /* the runner has not sent its final message yet */
    bool done;                  /* the choice has ended (finish set) */
    struct tokenizer_stream ts; /* incremental detokenizer */
    struct stopstr ss;          /* stop-string hold-back */
    struct toolcall_parser tc;  /* tool calls out of the text (when the call parses them) */
    json_t *lp_pending;         /* logprob entries not yet sent (stream) */
    uint64_t t_first_ns;        /* first token */
    uint64_t t_last_ns;         /* latest token */
};

struct call {
    struct server *srv;         /* owner */
    struct evhttp_request *req; /* the HTTP request (ours until we send) */
    bool gone;                  /* the client went away */
    bool replied;               /* the answer (or error) was sent */
    bool started;               /* stream headers and start events sent */
    const char *endpoint;       /* route label for metrics */
    struct api_request r;       /* decoded request */
    struct api_out out;         /* results being built */
    struct gen *gens;           /* (out.n_choices) */
    struct i32vec *prompt_ids;  /* (n_prompts) tokenized prompts */
    int n_prompts;              /* entries of prompt_ids */
    char **prompt_text;         /* (n_prompts) prompt text for echo, or NULL */
    json_t *history;            /* Responses: stored conversation continued */
    bool parse_tools;           /* the output is parsed for tool calls */
    char **tool_names;          /* (n_tool_names) names of the request's tools (owned) */
    int n_tool_names;           /* entries of tool_names */
    uint64_t t_start_ns;        /* request received */
    int status;                 /* HTTP status sent */
    struct event *peer_ev;      /* watches the socket for the client leaving */
    struct call *prev, *next;   /* server's live calls */
};

struct server {
    const struct serve_config *cfg;   /* flags */
    struct event_base *base;          /* the loop */
    struct evhttp *http;              /* HTTP server */
    struct evhttp_bound_socket *sock; /* listening socket */
    struct event *wake_ev;            /* runner eventfd readable */
    struct event *sig_int, *sig_term; /* shutdown signals */
    struct event *deadline;           /* shutdown grace timer */
    inferd_model *model;              /* weights */
    inferd_engine *engine;            /* owned by the runner thread while it runs */
    struct runner runner;             /* engine thread */
    struct tokenizer *tok;            /* the model's tokenizer */
    struct chat_template *tmpl;       /* its chat template, or NULL */
    enum toolcall_family tool_family; /* how this model writes tool calls */
    int32_t tool_markers[8];          /* special tokens the detokenizer keeps for the parser */
    int n_tool_markers;               /* entries of tool_markers */
    struct store *store;              /* stored responses */
    struct metrics metrics;           /* counters */
    char model_name[256];             /* id in the API */
    bool demo;                        /* serving the random-weight demo model */
    int max_ctx;                      /* engine context length */
    int n_vocab;                      /* model vocabulary */
    int64_t created;                  /* start time, unix seconds */
    struct call *calls;               /* live calls (list head) */
    uint64_t next_tag;                /* runner tags */
    struct runner_msg *msgs;          /* (cap_msgs) drain buffer */
    size_t cap_msgs;                  /* capacity of msgs */
    bool stopping;                    /* shutting down: refuse new work */
    int n_unsent;                     /* answers handed to evhttp, not yet on the socket */
};

static const char demo_note[] =
    "random weights: this demo model produces meaningless text; serve a real model with "
    "`inferd serve -m FILE.gguf`";

/* ---------------------------------------------------------------- replies */

static void set_json_headers(struct evhttp_request *req)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 413:
        return "Payload Too Large";
    case 429:
        return "Too Many Requests";
    case 503:
        return "Service Unavailable";
    default:
        return status >= 500 ? "Internal Server Error" : "Error";
    }
}

static void send_json(struct evhttp_request *req, int status, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, s, strlen(s));
    evbuffer_add(b, "\n", 1);
    set_json_headers(req);
    evhttp_send_reply(req, status, reason(status), b);
    evbuffer_free(b);
    free(s);
    json_decref(v);
}

static const char *method_of(struct evhttp_request *req)
{
    switch (evhttp_request_get_command(req)) {
    case EVHTTP_REQ_GET:
        return "GET";
    case EVHTTP_REQ_POST:
        return "POST";
    case EVHTTP_REQ_DELETE:
        return "DELETE";
    default:
        return "?";
    }
}

/* The one log line of a request: method, path, status, tokens, time. */
static void log_request(const char *method, const char *path, int status, int n_prompt, int n_gen,
                        uint64_t t0, const char *note)
{
    log_info("%s %s %d prompt=%d gen=%d %.1fms%s", method, path, status, n_prompt, n_gen,
             (double)(time_now_ns() - t0) * 1e-6, note);
}

/* Retry-After for 429 / 503: the engine's estimate of its queue wait,
 * rounded up to whole seconds (at least 1). */
static void retry_after(struct server *s, struct evhttp_request *req)
{
    struct runner_stats rs;
    runner_get_stats(&s->runner, &rs);
    char v[24];
    snprintf(v, sizeof(v), "%d", (int)MIN(3600.0, MAX(1.0, rs.engine.est_queue_ms / 1000.0 + 1)));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", v);
}

/* An error answer in kind's schema, for requests that never reached a call. */
static void send_error(struct server *s, struct evhttp_request *req, const char *endpoint,
                       enum api_kind kind, int code, const char *message, const char *param,
                       uint64_t t0)
{
    int status = err_http_status(code);
    if (code == ERR_OVERLOADED || code == ERR_UNAVAILABLE || code == ERR_QUOTA) retry_after(s, req);
    metrics_request(&s->metrics, endpoint, status);
    char path[128];
    const char *uri = evhttp_request_get_uri(req);
    snprintf(path, sizeof(path), "%.*s", (int)strcspn(uri, "?#"), uri);
    log_request(method_of(req), path, status, 0, 0, t0, "");
    send_json(req, status, api_error_json(kind, code, message, param));
}

static void new_id(const char *prefix, char *out, size_t n)
{
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) r[0] = time_now_ns();
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)r[0],
             (unsigned long long)(r[1] & 0xffffffffu));
}

/* ------------------------------------------------------------ call life */

static void stop_watching(struct call *c);

static void call_free(struct call *c)
{
    struct server *s = c->srv;
    stop_watching(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    for (int i = 0; i < c->out.n_choices; i++) {
        tokenizer_stream_release(&c->gens[i].ts);
        stopstr_release(&c->gens[i].ss);
        toolcall_release(&c->gens[i].tc);
        for (int k = 0; k < c->out.choices[i].n_calls; k++) {
            free(c->out.choices[i].calls[k].name);
            buf_release(&c->out.choices[i].calls[k].args);
        }
        free(c->out.choices[i].calls);
        json_decref(c->gens[i].lp_pending);
        buf_release(&c->out.choices[i].text);
        json_decref(c->out.choices[i].logprobs);
    }
    for (int i = 0; i < c->n_prompts; i++) {
        i32vec_release(&c->prompt_ids[i]);
        if (c->prompt_text) free(c->prompt_text[i]);
    }
    free(c->prompt_text);
    free(c->prompt_ids);
    for (int k = 0; k < c->n_tool_names; k++)
        free(c->tool_names[k]);
    free(c->tool_names);
    free(c->gens);
    free(c->out.choices);
    json_decref(c->history);
    api_request_release(&c->r);
    free(c);
    s->metrics.open_requests--;
}

static bool call_engine_idle(const struct call *c)
{
    for (int i = 0; i < c->out.n_choices; i++)
        if (c->gens[i].engine_open) return false;
    return true;
}

static void stop_watching(struct call *c)
{
    if (c->peer_ev) event_free(c->peer_ev);
    c->peer_ev = NULL;
}

static void on_close(struct evhttp_connection *conn, void *arg)
{
    struct call *c = arg;
    stop_watching(c);
    if (c->replied || c->gone) return;
    c->gone = true;
    c->srv->metrics.cancelled++;
    for (int i = 0; i < c->out.n_choices; i++)
        if (c->gens[i].engine_open) runner_cancel(&c->srv->runner, c->gens[i].tag);
}

/* evhttp reads nothing while a request is being answered, so it would only
 * notice a client that left at the next write - never, for a non-streamed
 * answer that takes minutes. We watch the socket ourselves: end of file (or
 * an error) means the client is gone; bytes (a pipelined request) end the
 * watch, since they cannot be told apart from a live client. */
static void on_peer(evutil_socket_t fd, short what, void *arg)
{
    struct call *c = arg;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    stop_watching(c);
    if (n <= 0) on_close(NULL, c);
}

static void watch_peer(struct call *c)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return;
    c->peer_ev = event_new(c->srv->base, fd, EV_READ | EV_PERSIST, on_peer, c);
    event_add(c->peer_ev, NULL);
}

static void detach_close(struct call *c)
{
    stop_watching(c);
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    if (conn) evhttp_connection_set_closecb(conn, NULL, NULL);
}

static void send_chunk(struct call *c, struct buf *b)
{
    if (!b->len) return;
    if (!c->gone) {
        struct evbuffer *e = evbuffer_new();
        evbuffer_add(e, b->data, b->len);
        evhttp_send_reply_chunk(c->req, e);
        evbuffer_free(e);
    }
    buf_clear(b);
}

/* A stream writes one small chunk per token. With Nagle's algorithm on, a
 * chunk written while the previous one is not yet acknowledged waits for the
 * ACK, which a client may delay by up to 40 ms (Linux delayed ACK): tokens
 * would arrive in pairs, late. Streams go out as written. */
static void stream_nodelay(struct call *c)
{
    struct evhttp_connection *conn = evhttp_request_get_connection(c->req);
    struct bufferevent *bev = conn ? evhttp_connection_get_bufferevent(conn) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    int one = 1;
    if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void stream_begin(struct call *c)
{
    if (c->started) return;
    c->started = true;
    stream_nodelay(c);
    struct evkeyvalq *h = evhttp_request_get_output_headers(c->req);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_send_reply_start(c->req, 200, "OK");
    struct buf b = {0};
    api_stream_start(&c->out, &b);
    send_chunk(c, &b);
    buf_release(&b);
}

static void maybe_exit(struct server *s);

/* The last byte of a call's answer reached the socket. */
static void on_sent(struct evhttp_request *req, void *arg)
{
    struct server *s = arg;
    s->n_unsent--;
    if (s->stopping) maybe_exit(s);
}

/* Ends the HTTP exchange of a call whose choices all ended (or failed). */
static void finish_call(struct call *c, int err_code, const char *err_text)
{
    struct server *s = c->srv;
    if (c->replied) return;
    c->replied = true;
    detach_close(c);
    if (!c->gone) {
        s->n_unsent++;
        evhttp_request_set_on_complete_cb(c->req, on_sent, s);
    }
    int n_gen = api_out_completion_tokens(&c->out);
    if (err_code) /* the other choices of a failed call are of no use */
        for (int i = 0; i < c->out.n_choices; i++)
            if (c->gens[i].engine_open) runner_cancel(&s->runner, c->gens[i].tag);
    if (err_code && !c->started) {
        c->status = err_http_status(err_code);
        if (err_code == ERR_OVERLOADED) retry_after(s, c->req);
        json_t *e = api_error_json(c->r.kind, err_code, err_text, NULL);
        send_json(c->req, c->status, e);
    } else if (c->r.stream) {
        struct buf b = {0};
        if (err_code)
            api_stream_error(&c->out, err_code, err_text, &b);
        else
            api_stream_end(&c->out, &b);
        send_chunk(c, &b);
        buf_release(&b);
        evhttp_send_reply_end(c->req);
        c->status = 200;
    } else {
        c->status = 200;
        send_json(c->req, 200, api_response(&c->out));
    }
    if (!err_code && c->r.kind == API_RESPONSES && c->r.store && s->store) {
        json_t *resp = api_response(&c->out);
        json_t *conv = api_responses_conversation(&c->out, c->history);
        char *rs = json_dumps(resp, JSON_COMPACT), *cs = json_dumps(conv, JSON_COMPACT);
        struct err_msg msg = {{0}};
        if (store_put(s->store, c->out.id, rs, cs, &msg)) log_error("%s", msg.text);
        free(rs);
        free(cs);
        json_decref(resp);
        json_decref(conv);
    }
    uint64_t now = time_now_ns();
    if (!err_code) {
        metrics_observe(&s->metrics.e2e, (double)(now - c->t_start_ns) * 1e-9);
        for (int i = 0; i < c->out.n_choices; i++) {
            const struct gen *g = &c->gens[i];
            int n = c->out.choices[i].n_tokens;
            if (n > 1 && g->t_last_ns > g->t_first_ns)
                metrics_observe(&s->metrics.tpot,
                                (double)(g->t_last_ns - g->t_first_ns) * 1e-9 / (n - 1));
        }
    }
    s->metrics.prompt_tokens += (uint64_t)c->out.n_prompt_tokens;
    s->metrics.cached_tokens += (uint64_t)c->out.n_cached_tokens;
    s->metrics.generated_tokens += (uint64_t)n_gen;
    metrics_request(&s->metrics, c->endpoint, c->gone ? 499 : c->status);
    log_request("POST", c->endpoint, c->gone ? 499 : c->status, c->out.n_prompt_tokens, n_gen,
                c->t_start_ns, c->gone ? " (client gone)" : "");
}

static bool all_done(const struct call *c)
{
    for (int i = 0; i < c->out.n_choices; i++)
        if (!c->gens[i].done) return false;
    return true;
}

/* Sends content text (after the stop-string check and the tool-call parser). */
static void emit_content(struct call *c, int i, const char *text, size_t len)
{
    struct api_choice *ch = &c->out.choices[i];
    struct gen *g = &c->gens[i];
    if (!len) return;
    buf_append(&ch->text, text, len);
    if (c->r.stream) {
        stream_begin(c);
        struct buf b = {0};
        api_stream_delta(&c->out, i, text, len, g->lp_pending, &b);
        json_decref(g->lp_pending);
        g->lp_pending = NULL;
        send_chunk(c, &b);
        buf_release(&b);
    }
}

/* The parser's events for choice i: content, and calls into the choice. */
static void tool_events(struct call *c, int i, int n)
{
    struct gen *g = &c->gens[i];
    struct api_choice *ch = &c->out.choices[i];
    for (int k = 0; k < n; k++) {
        const struct toolcall_ev *e = &g->tc.ev[k];
        if (e->kind == TOOLCALL_EV_CONTENT) {
            emit_content(c, i, e->text, e->len);
            continue;
        }
        struct buf b = {0};
        if (c->r.stream) stream_begin(c);
        if (e->kind == TOOLCALL_EV_START) {
            CHECK(e->index == ch->n_calls);
            ch->calls = xrealloc(ch->calls, sizeof(*ch->calls) * (size_t)(ch->n_calls + 1));
            struct api_toolcall *t = &ch->calls[ch->n_calls++];
            memset(t, 0, sizeof(*t));
            snprintf(t->id, sizeof(t->id), "%s", e->id);
            t->name = xstrdup(e->text);
            if (c->r.stream) api_stream_tool_start(&c->out, i, e->index, &b);
        } else if (e->kind == TOOLCALL_EV_ARGS) {
            buf_append(&ch->calls[e->index].args, e->text, e->len);
            if (c->r.stream) api_stream_tool_args(&c->out, i, e->index, e->text, e->len, &b);
        } else if (c->r.stream) {
            api_stream_tool_end(&c->out, i, e->index, &b);
        }
        send_chunk(c, &b);
        buf_release(&b);
    }
}

/* Text that passed the stop-string check: through the tool-call parser
 * when the call has one. */
static void emit_text(struct call *c, int i, const char *text, size_t len)
{
    if (!c->parse_tools) {
        emit_content(c, i, text, len);
        return;
    }
    if (len) tool_events(c, i, toolcall_feed(&c->gens[i].tc, text, len));
}

static void end_choice(struct call *c, int i, enum api_finish why)
{
    struct gen *g = &c->gens[i];
    if (g->done) return;
    g->done = true;
    c->out.choices[i].finish = why;
    if (c->r.stream && !c->gone) {
        stream_begin(c);
        struct buf b = {0};
        if (g->lp_pending) { /* entries of held-back text that never came */
            api_stream_delta(&c->out, i, "", 0, g->lp_pending, &b);
            json_decref(g->lp_pending);
            g->lp_pending = NULL;
        }
        api_stream_choice_end(&c->out, i, &b);
        send_chunk(c, &b);
        buf_release(&b);
    }
}

static void token_text(struct server *s, int32_t id, char *out, size_t n)
{
    struct buf b = {0};
    if (tokenizer_decode(s->tok, &id, 1, false, &b, NULL) == 0)
        snprintf(out, n, "%s", buf_str(&b));
    else
        snprintf(out, n, "<%d>", id);
    buf_release(&b);
}

static void add_logprobs(struct call *c, int i, const struct inferd_event *ev)
{
    struct server *s = c->srv;
    char text[256], top_text[20][256];
    struct api_top tops[20];
    token_text(s, ev->token, text, sizeof(text));
    int n_top = MIN(ev->n_top, c->r.top_logprobs);
    for (int k = 0; k < n_top; k++) {
        token_text(s, ev->top[k].token, top_text[k], sizeof(top_text[k]));
        tops[k].text = top_text[k];
        tops[k].logprob = ev->top[k].logprob;
    }
    size_t off = c->out.choices[i].text.len;
    if (c->r.stream)
        api_logprob_append(c->r.kind, &c->gens[i].lp_pending, text, ev->logprob, tops, n_top, off);
    else
        api_logprob_append(c->r.kind, &c->out.choices[i].logprobs, text, ev->logprob, tops, n_top,
                           off);
}

static void feed(struct call *c, int i, const char *text, size_t len)
{
    struct gen *g = &c->gens[i];
    struct buf safe = {0};
    int hit = stopstr_feed(&g->ss, text, len, &safe);
    emit_text(c, i, safe.data ? safe.data : "", safe.len);
    buf_release(&safe);
    if (hit >= 0) {
        if (c->parse_tools) tool_events(c, i, toolcall_finish(&g->tc));
        c->out.choices[i].stop_index = hit;
        end_choice(c, i, API_FINISH_STOP_SEQ);
        if (g->engine_open) runner_cancel(&c->srv->runner, g->tag);
    }
}

static void on_message(struct server *s, struct call *c, int i, const struct runner_msg *m)
{
    struct gen *g = &c->gens[i];
    struct api_choice *ch = &c->out.choices[i];
    const struct inferd_event *ev = &m->ev;
    bool final = m->rc != 0 || ev->finish != INFERD_FINISH_NONE;
    if (final) g->engine_open = false;
    if (c->replied) return; /* answered already (an error, or shutdown): bookkeeping only */
    if (m->rc) {
        if (!g->done) {
            g->done = true;
            ch->finish = API_FINISH_ERROR;
            finish_call(c, m->rc, m->err);
        }
        return;
    }
    if (!g->done && !c->gone && ev->token >= 0) {
        uint64_t now = time_now_ns();
        if (!g->t_first_ns) {
            g->t_first_ns = now;
            if (i == 0) metrics_observe(&s->metrics.ttft, (double)(now - c->t_start_ns) * 1e-9);
        }
        g->t_last_ns = now;
        ch->n_tokens = ev->n_generated;
        bool eog = ev->finish == INFERD_FINISH_STOP && tokenizer_is_eog(s->tok, ev->token);
        /* With the parser on, the stream keeps special tokens so that the
         * family's markers reach it; every other special token is skipped
         * here, as the stream would otherwise. */
        if (c->parse_tools && !eog && tokenizer_is_special(s->tok, ev->token)) {
            bool marker = false;
            for (int k = 0; k < s->n_tool_markers; k++)
                marker |= s->tool_markers[k] == ev->token;
            if (!marker) {
                if (c->r.logprobs) add_logprobs(c, i, ev);
                eog = true; /* nothing to decode */
            }
        }
        if (!eog) {
            if (c->r.logprobs) add_logprobs(c, i, ev);
            struct buf piece = {0};
            struct err_msg msg = {{0}};
            if (tokenizer_stream_push(s->tok, &g->ts, ev->token, &piece, &msg) == 0)
                feed(c, i, piece.data ? piece.data : "", piece.len);
            buf_release(&piece);
        }
    }
    if (final && g->prompt * c->r.n == i) c->out.n_cached_tokens += ev->n_cached;
    if (final) metrics_observe(&s->metrics.queue, ev->queue_s);
    if (final && !g->done) {
        struct buf tail = {0};
        tokenizer_stream_flush(s->tok, &g->ts, &tail);
        feed(c, i, tail.data ? tail.data : "", tail.len);
        buf_release(&tail);
        if (!g->done) {
            struct buf rest = {0};
            stopstr_flush(&g->ss, &rest);
            emit_text(c, i, rest.data ? rest.data : "", rest.len);
            buf_release(&rest);
            if (c->parse_tools) tool_events(c, i, toolcall_finish(&g->tc));
        }
        switch (ev->finish) {
        case INFERD_FINISH_STOP:
            end_choice(c, i, API_FINISH_EOG);
            break;
        case INFERD_FINISH_LENGTH:
            end_choice(c, i, API_FINISH_LENGTH);
            break;
        default:
            end_choice(c, i, API_FINISH_ERROR);
            if (!c->replied && !c->gone)
                finish_call(c, ev->error ? ev->error : ERR_UNAVAILABLE,
                            ev->finish == INFERD_FINISH_CANCELLED
                                ? "the request was cancelled: the server is shutting down"
                                : "the engine failed this request");
            break;
        }
    }
}

static struct call *find_tag(struct server *s, uint64_t tag, int *idx)
{
    for (struct call *c = s->calls; c; c = c->next)
        for (int i = 0; i < c->out.n_choices; i++)
            if (c->gens[i].tag == tag) {
                *idx = i;
                return c;
            }
    return NULL;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    size_t n = runner_drain(&s->runner, &s->msgs, &s->cap_msgs);
    for (size_t k = 0; k < n; k++) {
        int i;
        struct call *c = find_tag(s, s->msgs[k].tag, &i);
        if (!c) continue;
        on_message(s, c, i, &s->msgs[k]);
        if (c->gone) {
            /* Wait for every cancellation to land, then hand the request
             * back to evhttp (which frees it) and forget the call. */
            if (!call_engine_idle(c)) continue;
            finish_call(c, ERR_CANCELLED, "client went away");
        } else if (!c->replied && all_done(c)) {
            finish_call(c, 0, NULL);
        }
        if (c->replied && call_engine_idle(c)) call_free(c);
    }
    if (s->stopping) maybe_exit(s);
}

/* --------------------------------------------------------- prompt build */

static int build_messages(struct server *s, struct call *c, struct err_msg *msg)
{
    struct api_request *r = &c->r;
    if (r->kind != API_RESPONSES) return 0;
    json_t *msgs = json_array();
    if (r->instructions)
        json_array_append_new(msgs,
                              json_pack("{s:s,s:s}", "role", "system", "content", r->instructions));
    if (r->previous_response_id) {
        char *conv = NULL;
        if (!s->store) {
            json_decref(msgs);
            return err_set(msg, ERR_NOT_FOUND, "previous_response_id: no response store");
        }
        int rc = store_get(s->store, r->previous_response_id, NULL, &conv, msg);
        if (rc) {
            json_decref(msgs);
            snprintf(r->bad_param, sizeof(r->bad_param), "previous_response_id");
            return rc;
        }
        c->history = json_loads(conv, 0, NULL);
        free(conv);
        if (!json_is_array(c->history)) {
            json_decref(msgs);
            return err_set(msg, ERR_INTERNAL, "stored conversation of '%s' is unreadable",
                           r->previous_response_id);
        }
        json_array_extend(msgs, c->history);
    }
    json_array_extend(msgs, r->input_items);
    r->messages = msgs;
    return 0;
}

static int tokenize_prompts(struct server *s, struct call *c, struct err_msg *msg)
{
    struct api_request *r = &c->r;
    if (r->messages) {
        if (!s->tmpl)
            return err_set(msg, ERR_INVALID,
                           "messages: the model has no chat template; use /v1/completions");
        struct buf text = {0};
        int rc = chat_template_apply(s->tmpl, r->messages, r->tools, true, NULL, &text, msg);
        if (rc) {
            buf_release(&text);
            return rc;
        }
        c->n_prompts = 1;
        c->prompt_ids = xcalloc(1, sizeof(*c->prompt_ids));
        tokenizer_encode(s->tok, buf_str(&text), text.len, TOKENIZER_PARSE_SPECIAL,
                         &c->prompt_ids[0]);
        buf_release(&text);
    } else {
        c->n_prompts = r->n_prompts;
        c->prompt_ids = xcalloc((size_t)r->n_prompts, sizeof(*c->prompt_ids));
        if (r->echo) c->prompt_text = xcalloc((size_t)r->n_prompts, sizeof(char *));
        for (int p = 0; p < r->n_prompts; p++) {
            const struct api_prompt *ap = &r->prompts[p];
            if (ap->text)
                tokenizer_encode(s->tok, ap->text, strlen(ap->text),
                                 TOKENIZER_ADD_SPECIAL | TOKENIZER_PARSE_SPECIAL,
                                 &c->prompt_ids[p]);
            else
                i32vec_append(&c->prompt_ids[p], ap->ids.v, ap->ids.n);
            for (size_t k = 0; k < c->prompt_ids[p].n; k++) {
                int32_t id = c->prompt_ids[p].v[k];
                if (id < 0 || id >= s->n_vocab) {
                    snprintf(r->bad_param, sizeof(r->bad_param), "prompt");
                    return err_set(msg, ERR_INVALID,
                                   "prompt[%d][%zu]: token id %d is out of range [0, %d)", p, k, id,
                                   s->n_vocab);
                }
            }
            if (r->echo) {
                struct buf t = {0};
                if (ap->text)
                    buf_puts(&t, ap->text);
                else
                    tokenizer_decode(s->tok, ap->ids.v, ap->ids.n, false, &t, NULL);
                c->prompt_text[p] = xstrdup(buf_str(&t));
                buf_release(&t);
            }
        }
    }
    for (int p = 0; p < c->n_prompts; p++) {
        int n = (int)c->prompt_ids[p].n;
        if (n == 0) {
            snprintf(r->bad_param, sizeof(r->bad_param), "prompt");
            return err_set(msg, ERR_INVALID, "prompt: encodes to no tokens");
        }
        if (n >= s->max_ctx)
            return err_set(msg, ERR_TOO_LARGE,
                           "this model's context length is %d tokens; the prompt has %d",
                           s->max_ctx, n);
        if (r->max_tokens && n + r->max_tokens > s->max_ctx)
            return err_set(msg, ERR_TOO_LARGE,
                           "this model's context length is %d tokens; the prompt (%d) + "
                           "max_tokens (%d) exceed it",
                           s->max_ctx, n, r->max_tokens);
    }
    for (int b = 0; b < r->n_bias; b++)
        if (r->bias[b].token >= s->n_vocab) {
            snprintf(r->bad_param, sizeof(r->bad_param), "logit_bias");
            return err_set(msg, ERR_INVALID, "logit_bias: token %d is out of range [0, %d)",
                           r->bias[b].token, s->n_vocab);
        }
    return 0;
}

/* Tool calls: which output is parsed, and the grammar of a forced call. */
static int setup_tools(struct server *s, struct call *c, struct err_msg *msg)
{
    struct api_request *r = &c->r;
    if (!r->tools || r->kind == API_COMPLETION) return 0;
    if (r->tool_choice == API_TOOL_CHOICE_REQUIRED || r->tool_choice == API_TOOL_CHOICE_NAMED) {
        struct buf g = {0};
        int rc = toolcall_grammar(s->tool_family, r->tools,
                                  r->tool_choice == API_TOOL_CHOICE_NAMED ? r->tool_name : NULL, &g,
                                  msg);
        if (rc) {
            snprintf(r->bad_param, sizeof(r->bad_param), "tool_choice");
            buf_release(&g);
            return rc;
        }
        r->grammar_kind = INFERD_GRAMMAR_SEQUENCE;
        r->grammar_src = xstrdup(buf_str(&g));
        buf_release(&g);
    }
    if (r->tool_choice == API_TOOL_CHOICE_NONE || s->tool_family == TOOLCALL_NONE) return 0;
    c->parse_tools = true;
    c->out.lazy_blocks = true;
    c->tool_names = xcalloc(json_array_size(r->tools), sizeof(char *));
    size_t i;
    const json_t *t;
    json_array_foreach(r->tools, i, t)
    {
        const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        c->tool_names[c->n_tool_names++] = xstrdup(n ? n : "");
    }
    return 0;
}

static void start_generation(struct server *s, struct call *c)
{
    struct api_request *r = &c->r;
    int n_choices = c->n_prompts * r->n;
    c->out.n_choices = n_choices;
    c->out.choices = xcalloc((size_t)n_choices, sizeof(*c->out.choices));
    c->gens = xcalloc((size_t)n_choices, sizeof(*c->gens));
    uint64_t seed = r->sp.seed;
    if (!r->has_seed && getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
        seed = time_now_ns();
    for (int p = 0; p < c->n_prompts; p++)
        c->out.n_prompt_tokens += (int)c->prompt_ids[p].n;
    for (int i = 0; i < n_choices; i++) {
        struct gen *g = &c->gens[i];
        g->prompt = i / r->n;
        g->tag = ++s->next_tag;
        g->engine_open = true;
        tokenizer_stream_init(&g->ts, !c->parse_tools);
        stopstr_init(&g->ss, r->stop, r->n_stop);
        if (c->parse_tools) {
            uint64_t id_seed = 0;
            if (getrandom(&id_seed, sizeof(id_seed), 0) != (ssize_t)sizeof(id_seed))
                id_seed = time_now_ns() + (uint64_t)i;
            toolcall_init(&g->tc, s->tool_family, c->tool_names, c->n_tool_names,
                          r->kind == API_MESSAGES ? "toolu_" : "call_", id_seed);
        }
        if (c->prompt_text) buf_puts(&c->out.choices[i].text, c->prompt_text[g->prompt]);
        const struct i32vec *ids = &c->prompt_ids[g->prompt];
        struct inferd_request q = {0};
        q.prompt = ids->v;
        q.n_prompt = (int)ids->n;
        q.max_tokens = r->max_tokens ? r->max_tokens : s->max_ctx - (int)ids->n;
        q.priority = r->priority;
        q.sampling = r->sp;
        q.sampling.seed = seed + (uint64_t)(i % r->n);
        q.sampling.logprobs = r->logprobs;
        q.sampling.n_logprobs = r->logprobs ? r->top_logprobs : 0;
        q.grammar.kind = r->grammar_kind;
        q.grammar.source = r->grammar_src;
        q.grammar.len = r->grammar_src ? strlen(r->grammar_src) : 0;
        runner_submit(&s->runner, g->tag, &q);
    }
    if (c->r.stream && c->prompt_text) {
        /* echo: the prompt text goes first */
        stream_begin(c);
        for (int i = 0; i < n_choices; i++) {
            struct buf b = {0};
            const char *t = c->prompt_text[c->gens[i].prompt];
            api_stream_delta(&c->out, i, t, strlen(t), NULL, &b);
            send_chunk(c, &b);
            buf_release(&b);
        }
    }
}

/* ------------------------------------------------------------ endpoints */

static bool authorized(struct server *s, struct evhttp_request *req)
{
    if (!s->cfg->api_key) return true;
    struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    const char *auth = evhttp_find_header(h, "Authorization");
    const char *key = evhttp_find_header(h, "x-api-key");
    if (key && !strcmp(key, s->cfg->api_key)) return true;
    return auth && !strncmp(auth, "Bearer ", 7) && !strcmp(auth + 7, s->cfg->api_key);
}

static bool model_ok(struct server *s, const char *name)
{
    return !*name || !strcmp(name, s->model_name);
}

static char *body_of(struct evhttp_request *req, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    return (char *)evbuffer_pullup(in, -1);
}

static void handle_generate(struct server *s, struct evhttp_request *req, const char *endpoint,
                            enum api_kind kind, uint64_t t0)
{
    size_t len;
    char *body = body_of(req, &len);
    struct err_msg msg = {{0}};
    struct call *c = xcalloc(1, sizeof(*c));
    c->srv = s;
    c->req = req;
    c->endpoint = endpoint;
    c->t_start_ns = t0;
    int rc;
    switch (kind) {
    case API_CHAT:
        rc = openai_chat_decode(body ? body : "", len, &c->r, &msg);
        break;
    case API_COMPLETION:
        rc = openai_completion_decode(body ? body : "", len, &c->r, &msg);
        break;
    case API_RESPONSES:
        rc = responses_decode(body ? body : "", len, &c->r, &msg);
        break;
    default:
        rc = anthropic_decode(body ? body : "", len, &c->r, &msg);
        break;
    }
    c->r.kind = kind;
    if (!rc && !model_ok(s, c->r.model)) {
        snprintf(c->r.bad_param, sizeof(c->r.bad_param), "model");
        rc = err_set(&msg, ERR_NOT_FOUND, "model '%s' does not exist; this server serves '%s'",
                     c->r.model, s->model_name);
    }
    if (!rc) rc = build_messages(s, c, &msg);
    if (!rc) rc = setup_tools(s, c, &msg);
    if (!rc) rc = tokenize_prompts(s, c, &msg);
    if (!rc && c->r.n * c->n_prompts > API_MAX_PROMPTS)
        rc = err_set(&msg, ERR_INVALID, "n x prompts: at most %d sequences per request",
                     API_MAX_PROMPTS);
    if (rc) {
        send_error(s, req, endpoint, kind, rc, msg.text[0] ? msg.text : err_str(rc), c->r.bad_param,
                   t0);
        for (int i = 0; i < c->n_prompts; i++) {
            i32vec_release(&c->prompt_ids[i]);
            if (c->prompt_text) free(c->prompt_text[i]);
        }
        free(c->prompt_text);
        free(c->prompt_ids);
        for (int k = 0; k < c->n_tool_names; k++)
            free(c->tool_names[k]);
        free(c->tool_names);
        json_decref(c->history);
        api_request_release(&c->r);
        free(c);
        return;
    }
    c->out.req = &c->r;
    c->out.model = s->model_name;
    c->out.created = (int64_t)time(NULL);
    new_id(kind == API_CHAT         ? "chatcmpl-"
           : kind == API_COMPLETION ? "cmpl-"
           : kind == API_RESPONSES  ? "resp_"
                                    : "msg_",
           c->out.id, sizeof(c->out.id));
    c->next = s->calls;
    if (s->calls) s->calls->prev = c;
    s->calls = c;
    s->metrics.open_requests++;
    struct evhttp_connection *conn = evhttp_request_get_connection(req);
    if (conn) evhttp_connection_set_closecb(conn, on_close, c);
    watch_peer(c);
    start_generation(s, c);
}

static void handle_models(struct server *s, struct evhttp_request *req)
{
    json_t *m =
        json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->model_name, "object", "model", "created",
                  (json_int_t)s->created, "owned_by", "inferd", "context_length", s->max_ctx);
    if (s->demo) json_object_set_new(m, "description", json_string(demo_note));
    send_json(req, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", m));
}

static void handle_health(struct server *s, struct evhttp_request *req)
{
    struct runner_stats rs;
    runner_get_stats(&s->runner, &rs);
    send_json(req, s->stopping ? 503 : 200,
              json_pack("{s:s,s:s,s:i,s:i,s:i,s:i}", "status", s->stopping ? "stopping" : "ok",
                        "model", s->model_name, "running", rs.engine.n_running, "waiting",
                        rs.engine.n_waiting, "kv_blocks_used", rs.engine.kv_blocks_used,
                        "kv_blocks_total", rs.engine.kv_blocks_total));
}

static void handle_metrics(struct server *s, struct evhttp_request *req)
{
    struct runner_stats rs;
    runner_get_stats(&s->runner, &rs);
    struct buf b = {0};
    metrics_render(&s->metrics, &rs, &b);
    struct evbuffer *e = evbuffer_new();
    evbuffer_add(e, b.data, b.len);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", e);
    evbuffer_free(e);
    buf_release(&b);
}

/* Returns 0 and sends, or an error code with msg / param for the caller. */
static int handle_tokenize(struct server *s, struct evhttp_request *req, bool count_only,
                           enum api_kind kind, struct api_request *r, struct err_msg *msg)
{
    size_t len;
    char *body = body_of(req, &len);
    struct i32vec ids = {0};
    int rc;
    if (kind == API_MESSAGES) {
        if ((rc = anthropic_count_decode(body ? body : "", len, r, msg))) return rc;
        if (!model_ok(s, r->model))
            return err_set(msg, ERR_NOT_FOUND, "model '%s' does not exist; this server serves '%s'",
                           r->model, s->model_name);
    } else {
        json_t *root;
        if ((rc = api_parse_body(body ? body : "", len, &root, r, msg))) return rc;
        const json_t *msgs = json_object_get(root, "messages");
        if (msgs) {
            /* Reuse the chat decoder's validation for a messages array. */
            json_t *wrap = json_pack("{s:O}", "messages", msgs);
            char *w = json_dumps(wrap, JSON_COMPACT);
            rc = openai_chat_decode(w, strlen(w), r, msg);
            free(w);
            json_decref(wrap);
        } else {
            const json_t *t = json_object_get(root, "prompt");
            if (!t) t = json_object_get(root, "text");
            if (!json_is_string(t)) {
                rc = api_fail(r, msg, "prompt", "expected a string (or 'messages')");
            } else {
                bool add = true;
                rc = api_get_bool(root, "add_special", &add, r, msg);
                if (!rc)
                    tokenizer_encode(s->tok, json_string_value(t), json_string_length(t),
                                     (add ? TOKENIZER_ADD_SPECIAL : 0) | TOKENIZER_PARSE_SPECIAL,
                                     &ids);
            }
        }
        json_decref(root);
        if (rc) return rc;
    }
    if (r->messages) {
        if (!s->tmpl) return err_set(msg, ERR_INVALID, "messages: the model has no chat template");
        struct buf text = {0};
        rc = chat_template_apply(s->tmpl, r->messages, r->tools, true, NULL, &text, msg);
        if (!rc) tokenizer_encode(s->tok, buf_str(&text), text.len, TOKENIZER_PARSE_SPECIAL, &ids);
        buf_release(&text);
        if (rc) return rc;
    }
    json_t *out;
    if (count_only) {
        out = json_pack("{s:i}", "input_tokens", (int)ids.n);
    } else {
        json_t *a = json_array();
        for (size_t i = 0; i < ids.n; i++)
            json_array_append_new(a, json_integer(ids.v[i]));
        out = json_pack("{s:o,s:i,s:i}", "tokens", a, "count", (int)ids.n, "max_model_len",
                        s->max_ctx);
    }
    i32vec_release(&ids);
    send_json(req, 200, out);
    return 0;
}

static int handle_detokenize(struct server *s, struct evhttp_request *req, struct api_request *r,
                             struct err_msg *msg)
{
    size_t len;
    char *body = body_of(req, &len);
    json_t *root;
    int rc = api_parse_body(body ? body : "", len, &root, r, msg);
    if (rc) return rc;
    const json_t *t = json_object_get(root, "tokens");
    struct i32vec ids = {0};
    if (!json_is_array(t)) rc = api_fail(r, msg, "tokens", "expected an array of token ids");
    size_t i;
    const json_t *v;
    if (!rc) json_array_foreach(t, i, v)
        {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= s->n_vocab) {
                char p[48];
                snprintf(p, sizeof(p), "tokens[%zu]", i);
                rc = api_fail(r, msg, p, "expected a token id in [0, %d)", s->n_vocab);
                break;
            }
            i32vec_push(&ids, (int32_t)json_integer_value(v));
        }
    json_decref(root);
    if (!rc) {
        struct buf text = {0};
        rc = tokenizer_decode(s->tok, ids.v, ids.n, false, &text, msg);
        if (!rc) {
            json_t *sv = json_stringn(text.data ? text.data : "", text.len);
            send_json(req, 200, json_pack("{s:o}", "text", sv ? sv : json_string("")));
        }
        buf_release(&text);
    }
    i32vec_release(&ids);
    return rc;
}

static void handle_stored(struct server *s, struct evhttp_request *req, const char *id, uint64_t t0)
{
    struct err_msg msg = {{0}};
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    if (!s->store) {
        send_error(s, req, "/v1/responses/{id}", API_RESPONSES, ERR_NOT_FOUND,
                   "responses are not stored on this server", NULL, t0);
        return;
    }
    int rc;
    if (cmd == EVHTTP_REQ_DELETE) {
        rc = store_delete(s->store, id, &msg);
        if (!rc)
            send_json(
                req, 200,
                json_pack("{s:s,s:s,s:b}", "id", id, "object", "response.deleted", "deleted", 1));
    } else {
        char *resp = NULL;
        rc = store_get(s->store, id, &resp, NULL, &msg);
        if (!rc) {
            json_t *v = json_loads(resp, 0, NULL);
            free(resp);
            if (!v)
                rc = err_set(&msg, ERR_INTERNAL, "stored response '%s' is unreadable", id);
            else
                send_json(req, 200, v);
        }
    }
    if (rc) {
        send_error(s, req, "/v1/responses/{id}", API_RESPONSES, rc, msg.text, NULL, t0);
        return;
    }
    metrics_request(&s->metrics, "/v1/responses/{id}", 200);
    log_request(cmd == EVHTTP_REQ_DELETE ? "DELETE" : "GET", "/v1/responses/{id}", 200, 0, 0, t0,
                "");
}

static void on_request(struct evhttp_request *req, void *arg)
{
    struct server *s = arg;
    uint64_t t0 = time_now_ns();
    char path[256];
    const char *uri = evhttp_request_get_uri(req);
    size_t plen = strcspn(uri, "?#");
    snprintf(path, sizeof(path), "%.*s", (int)MIN(plen, sizeof(path) - 1), uri);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool post = cmd == EVHTTP_REQ_POST, get = cmd == EVHTTP_REQ_GET;
    const char *method = method_of(req);
    enum api_kind kind = !strncmp(path, "/v1/messages", 12) ? API_MESSAGES : API_CHAT;

    /* Operational endpoints answer while stopping and without a key. */
    if (get && !strcmp(path, "/health")) {
        handle_health(s, req);
        log_debug("GET /health %d %.1fms", s->stopping ? 503 : 200,
                  (double)(time_now_ns() - t0) * 1e-6);
        return;
    }
    if (get && !strcmp(path, "/metrics")) {
        handle_metrics(s, req);
        log_debug("GET /metrics 200 %.1fms", (double)(time_now_ns() - t0) * 1e-6);
        return;
    }
    if (s->stopping) {
        send_error(s, req, "other", kind, ERR_UNAVAILABLE, "the server is shutting down", NULL, t0);
        return;
    }
    if (!authorized(s, req)) {
        send_error(s, req, "other", kind, ERR_UNAUTHORIZED,
                   "missing or invalid API key (Authorization: Bearer KEY or x-api-key)", NULL, t0);
        return;
    }
    if (s->metrics.open_requests >= s->cfg->max_open && post) {
        send_error(s, req, "other", kind, ERR_UNAVAILABLE,
                   "too many requests in progress; retry shortly", NULL, t0);
        return;
    }
    if (post && !strcmp(path, "/v1/chat/completions")) {
        handle_generate(s, req, "/v1/chat/completions", API_CHAT, t0);
        return;
    }
    if (post && !strcmp(path, "/v1/completions")) {
        handle_generate(s, req, "/v1/completions", API_COMPLETION, t0);
        return;
    }
    if (post && !strcmp(path, "/v1/responses")) {
        handle_generate(s, req, "/v1/responses", API_RESPONSES, t0);
        return;
    }
    if (post && !strcmp(path, "/v1/messages")) {
        handle_generate(s, req, "/v1/messages", API_MESSAGES, t0);
        return;
    }
    if (get && !strcmp(path, "/v1/models")) {
        handle_models(s, req);
        metrics_request(&s->metrics, "/v1/models", 200);
        log_request(method, path, 200, 0, 0, t0, "");
        return;
    }
    if ((get || cmd == EVHTTP_REQ_DELETE) && !strncmp(path, "/v1/responses/", 14) && path[14] &&
        !strchr(path + 14, '/')) {
        handle_stored(s, req, path + 14, t0);
        return;
    }
    const char *ep = NULL;
    if (post && !strcmp(path, "/v1/messages/count_tokens")) ep = "/v1/messages/count_tokens";
    if (post && !strcmp(path, "/tokenize")) ep = "/tokenize";
    if (post && !strcmp(path, "/detokenize")) ep = "/detokenize";
    if (ep) {
        struct api_request r = {0};
        struct err_msg msg = {{0}};
        int rc = ep[1] == 'd' ? handle_detokenize(s, req, &r, &msg)
                              : handle_tokenize(s, req, ep[1] == 'v', kind, &r, &msg);
        if (rc)
            send_error(s, req, ep, kind, rc, msg.text[0] ? msg.text : err_str(rc), r.bad_param, t0);
        else {
            metrics_request(&s->metrics, ep, 200);
            log_request(method, path, 200, 0, 0, t0, "");
        }
        api_request_release(&r);
        return;
    }
    char text[320];
    snprintf(text, sizeof(text), "no route for %s %.200s",
             post  ? "POST"
             : get ? "GET"
                   : "this",
             path);
    send_error(s, req, "other", kind, ERR_NOT_FOUND, text, NULL, t0);
}

/* ------------------------------------------------------------- shutdown */

static void maybe_exit(struct server *s)
{
    if (!s->calls && s->n_unsent == 0) event_base_loopexit(s->base, NULL);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    log_warn("shutdown: %s", "grace period over, failing the requests still in flight");
    for (struct call *c = s->calls; c; c = c->next) {
        for (int i = 0; i < c->out.n_choices; i++)
            if (c->gens[i].engine_open) runner_cancel(&s->runner, c->gens[i].tag);
        finish_call(c, ERR_UNAVAILABLE, "the server is shutting down");
    }
    /* The error answers and events still have to reach their sockets:
     * maybe_exit ends the loop once they have (and the cancellations have
     * come back); a second at most. */
    struct timeval tv = {1, 0};
    event_base_loopexit(s->base, &tv);
    maybe_exit(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    if (s->stopping) {
        log_warn("second signal: %s", "stopping now");
        on_deadline(-1, 0, s);
        return;
    }
    log_info("%s: finishing in-flight requests, then stopping", strsignal((int)sig));
    s->stopping = true;
    if (s->sock) {
        evhttp_del_accept_socket(s->http, s->sock);
        s->sock = NULL;
    }
    struct timeval tv = {s->cfg->shutdown_timeout_s, 0};
    s->deadline = evtimer_new(s->base, on_deadline, s);
    evtimer_add(s->deadline, &tv);
    maybe_exit(s);
}

/* --------------------------------------------------------------- set-up */

void serve_config_default(struct serve_config *c)
{
    memset(c, 0, sizeof(*c));
    c->host = "127.0.0.1";
    c->port = 8080;
    c->data_dir = "./inferd-data";
    c->max_seqs = 64;
    c->kv_type = INFERD_KV_F16;
    c->max_queue = 256;
    c->max_open = 1024;
    c->max_body = 8u << 20;
    c->max_headers = 64u << 10;
    c->idle_timeout_s = 120;
    c->shutdown_timeout_s = 30;
}

static int make_demo(const struct serve_config *cfg, char *path, size_t n, struct err_msg *msg)
{
    char dir[PATH_MAX - 64];
    snprintf(dir, sizeof(dir), "%.3900s/models", cfg->data_dir);
    mkdir(dir, 0755);
    snprintf(path, n, "%s/demo-tiny-qwen3-q8_0.gguf", dir);
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    char tok_dir[PATH_MAX];
    int rc = maker_tokenizer_dir("qwen3", MODEL_ARCH_QWEN3, "/proc/self/exe", tok_dir,
                                 sizeof(tok_dir), msg);
    if (rc) return rc;
    log_info("no model given: making the demo model %s - %s", path, demo_note);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    struct maker_opts o = {.preset = "tiny",
                           .arch = MODEL_ARCH_QWEN3,
                           .type = DTYPE_Q8_0,
                           .tokenizer_dir = tok_dir,
                           .tied = -1,
                           .seed = 1,
                           .n_threads = 2,
                           .out_path = tmp};
    if ((rc = maker_make(&o, NULL, msg))) return rc;
    if (rename(tmp, path)) return err_set(msg, -errno, "rename '%s': %s", tmp, strerror(errno));
    return 0;
}

/* The marker is one token of the vocabulary. */
static bool has_token(const char *text, void *ctx)
{
    struct server *s = ctx;
    struct i32vec ids = {0};
    tokenizer_encode(s->tok, text, strlen(text), TOKENIZER_PARSE_SPECIAL, &ids);
    bool one = ids.n == 1;
    i32vec_release(&ids);
    return one;
}

/* How this model writes tool calls, and which special tokens carry it. */
static void detect_tools(struct server *s)
{
    s->tool_family = toolcall_family_detect(has_token, s, tokenizer_chat_template(s->tok));
    for (const char *const *m = toolcall_family_markers(s->tool_family); *m; m++) {
        struct i32vec ids = {0};
        tokenizer_encode(s->tok, *m, strlen(*m), TOKENIZER_PARSE_SPECIAL, &ids);
        if (ids.n == 1 && tokenizer_is_special(s->tok, ids.v[0]) &&
            s->n_tool_markers < (int)ARRAY_LEN(s->tool_markers))
            s->tool_markers[s->n_tool_markers++] = ids.v[0];
        i32vec_release(&ids);
    }
    log_info("tool calls: %s format (%d special marker tokens)",
             toolcall_family_name(s->tool_family), s->n_tool_markers);
}

static int load(struct server *s, const struct serve_config *cfg, struct err_msg *msg)
{
    char path[PATH_MAX];
    int rc;
    if (mkdir(cfg->data_dir, 0755) && errno != EEXIST)
        return err_set(msg, -errno, "data dir '%s': %s", cfg->data_dir, strerror(errno));
    if (cfg->model_path) {
        snprintf(path, sizeof(path), "%s", cfg->model_path);
    } else {
        s->demo = true;
        if ((rc = make_demo(cfg, path, sizeof(path), msg))) return rc;
    }
    if (cfg->model_name) {
        snprintf(s->model_name, sizeof(s->model_name), "%s", cfg->model_name);
    } else if (s->demo) {
        snprintf(s->model_name, sizeof(s->model_name), "inferd-demo-random");
    } else {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        size_t l = strlen(b);
        if (l > 5 && !strcmp(b + l - 5, ".gguf")) l -= 5;
        snprintf(s->model_name, sizeof(s->model_name), "%.*s", (int)MIN(l, 200), b);
    }
    char err[512] = "";
    if ((rc = inferd_model_load(path, &s->model, err, sizeof(err))))
        return err_set(msg, rc, "model '%s': %s", path, err);
    struct gguf_file *f;
    if ((rc = gguf_open(path, &f, msg))) return rc;
    rc = tokenizer_new_gguf(f, &s->tok, msg);
    gguf_close(f);
    if (rc) return rc;
    const char *src = tokenizer_chat_template(s->tok);
    if (src) {
        if ((rc = chat_template_new(src, tokenizer_bos_text(s->tok), tokenizer_eos_text(s->tok),
                                    &s->tmpl, msg)))
            log_warn("chat template unusable (%s): chat endpoints will answer 400", msg->text);
    }
    detect_tools(s);
    s->n_vocab = inferd_model_n_vocab(s->model);
    struct inferd_engine_config ec;
    inferd_engine_config_default(&ec);
    ec.n_threads = cfg->n_threads;
    ec.max_ctx = cfg->max_ctx;
    ec.max_seqs = cfg->max_seqs;
    ec.kv_blocks = cfg->kv_blocks;
    ec.kv_type = cfg->kv_type;
    ec.token_budget = cfg->token_budget;
    ec.prefill_step_ratio = cfg->prefill_step_ratio;
    ec.max_waiting = cfg->max_queue;
    if ((rc = inferd_engine_new(s->model, &ec, &s->engine, err, sizeof(err))))
        return err_set(msg, rc, "engine: %s", err);
    int train = inferd_model_n_ctx_train(s->model);
    s->max_ctx = cfg->max_ctx ? cfg->max_ctx : MIN(train, 4096);
    if ((rc = store_open(cfg->data_dir, &s->store, msg))) return rc;
    return runner_start(&s->runner, s->engine, msg);
}

static void unload(struct server *s)
{
    runner_stop(&s->runner);
    while (s->calls)
        call_free(s->calls);
    if (s->engine) inferd_engine_free(s->engine);
    if (s->model) inferd_model_free(s->model);
    if (s->tmpl) chat_template_free(s->tmpl);
    if (s->tok) tokenizer_free(s->tok);
    store_close(s->store);
    free(s->msgs);
}

int serve_run(const struct serve_config *cfg, struct err_msg *msg)
{
    struct server s = {0};
    s.cfg = cfg;
    s.created = (int64_t)time(NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = load(&s, cfg, msg);
    if (rc) {
        unload(&s);
        return rc;
    }
    if (s.demo)
        log_info("serving '%s' - %s", s.model_name, demo_note);
    else
        log_info("serving '%s' from %s", s.model_name, cfg->model_path);
    s.base = event_base_new();
    s.http = evhttp_new(s.base);
    evhttp_set_max_body_size(s.http, (ev_ssize_t)cfg->max_body);
    evhttp_set_max_headers_size(s.http, (ev_ssize_t)cfg->max_headers);
    evhttp_set_timeout(s.http, cfg->idle_timeout_s);
    evhttp_set_allowed_methods(s.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_DELETE);
    evhttp_set_gencb(s.http, on_request, &s);
    s.sock = evhttp_bind_socket_with_handle(s.http, cfg->host, (ev_uint16_t)cfg->port);
    if (!s.sock) {
        rc = err_set(msg, -EADDRINUSE, "cannot listen on %s:%d", cfg->host, cfg->port);
        goto out;
    }
    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof(ss);
    int port = cfg->port;
    if (getsockname(evhttp_bound_socket_get_fd(s.sock), (struct sockaddr *)&ss, &sl) == 0)
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    s.wake_ev = event_new(s.base, s.runner.wake_fd, EV_READ | EV_PERSIST, on_wake, &s);
    event_add(s.wake_ev, NULL);
    s.sig_int = evsignal_new(s.base, SIGINT, on_signal, &s);
    s.sig_term = evsignal_new(s.base, SIGTERM, on_signal, &s);
    event_add(s.sig_int, NULL);
    event_add(s.sig_term, NULL);
    log_info("listening on http://%s:%d (model context %d tokens, data dir %s)", cfg->host, port,
             s.max_ctx, cfg->data_dir);
    if (cfg->port_file) {
        FILE *pf = fopen(cfg->port_file, "w");
        if (pf) {
            fprintf(pf, "%d\n", port);
            fclose(pf);
        }
    }
    event_base_dispatch(s.base);
    log_info("stopped: %s", "closing the engine and the store");
out:
    if (s.deadline) event_free(s.deadline);
    if (s.wake_ev) event_free(s.wake_ev);
    if (s.sig_int) event_free(s.sig_int);
    if (s.sig_term) event_free(s.sig_term);
    evhttp_free(s.http);
    unload(&s);
    event_base_free(s.base);
    return rc;
}
