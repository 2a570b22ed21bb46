/*
 * bench_client.c - see bench_client.h for the scheduling picture.
 *
 * Memory: one struct flight per in-flight request (freed when it ends), one
 * struct conn per connection ever opened (kept until the run ends, reused
 * LIFO while idle so warm connections serve first). Records are one array in
 * item order, filled as requests end.
 *
 * Send-time accuracy: the timer fires at the earliest due time; the callback
 * sends everything due by then (and re-arms). The lag between a request's
 * ready time and the moment it was handed to its connection is recorded per
 * request (bench_record.ready_s / send_s), so a run reports its own
 * generator error instead of hiding it in the server's latency.
 */
#include "bench/bench_client.h"

#include "base/check.h"
#include "base/timeutil.h"
#include "bench/bench_sse.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

int bench_target_parse_url(struct bench_target *t, const char *url, struct err_msg *m)
{
    const char *p = url;
    if (!strncmp(p, "http://", 7))
        p += 7;
    else if (strstr(p, "://"))
        return err_set(m, ERR_INVALID, "--url '%s': only http:// is supported", url);
    const char *slash = strchr(p, '/');
    const char *hp_end = slash ? slash : p + strlen(p);
    const char *colon = NULL;
    for (const char *q = p; q < hp_end; q++)
        if (*q == ':') colon = q;
    size_t host_len = (size_t)((colon ? colon : hp_end) - p);
    if (host_len == 0 || host_len >= sizeof(t->host))
        return err_set(m, ERR_INVALID, "--url '%s': missing or too long host", url);
    memcpy(t->host, p, host_len);
    t->host[host_len] = 0;
    t->port = 80;
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (end != hp_end || port < 1 || port > 65535)
            return err_set(m, ERR_INVALID, "--url '%s': bad port", url);
        t->port = (int)port;
    }
    t->base_path[0] = 0;
    if (slash) {
        size_t n = strlen(slash);
        while (n && slash[n - 1] == '/')
            n--;
        /* a URL ending in /v1 names the API root: we add /v1 ourselves */
        if (n >= 3 && !memcmp(slash + n - 3, "/v1", 3)) n -= 3;
        if (n >= sizeof(t->base_path)) return err_set(m, ERR_INVALID, "--url: path too long");
        memcpy(t->base_path, slash, n);
        t->base_path[n] = 0;
    }
    return 0;
}

struct client;

struct conn {
    struct evhttp_connection *evcon; /* keep-alive connection */
    struct conn *next_idle;          /* idle list link */
    struct conn *next_all;           /* every connection, for teardown */
};

struct flight {
    struct client *c;       /* owner */
    int32_t item;           /* workload item */
    struct conn *conn;      /* connection carrying it */
    struct bench_sse sse;   /* stream parser */
    double last_event_s;    /* time of the previous content event */
    bool json_body;         /* response is application/json, parsed at the end */
    struct buf body;        /* JSON body, or the start of an error body */
    int status;             /* HTTP status once headers arrived */
    char transport_err[64]; /* error callback text */
};

struct heap_ent {
    double due_s; /* when the item becomes due */
    int32_t item; /* workload item */
};

struct client {
    const struct bench_workload *w;   /* what to send */
    const struct bench_target *t;     /* where */
    const struct bench_run_opts *o;   /* how */
    struct event_base *base;          /* the loop */
    struct event *timer;              /* due-time timer */
    struct event *tick;               /* progress line */
    uint64_t t0_ns;                   /* run start */
    struct heap_ent *heap;            /* (n_heap) min-heap of due items */
    int32_t n_heap;                   /* entries */
    int32_t *ready;                   /* (w->n) FIFO ring of due items waiting for a slot */
    int32_t *follow_head;             /* (w->n) first item that waits for item i, -1 none */
    int32_t *follow_next;             /* (w->n) next item waiting for the same item, -1 end */
    int32_t ready_head, n_ready;      /* ring position and length */
    int32_t in_flight;                /* requests on the wire */
    int32_t n_sent, n_done, n_failed; /* progress */
    struct conn *idle;                /* idle connections */
    struct conn *all;                 /* every connection */
    struct bench_record *recs;        /* (w->n) in item order */
    char **texts;                     /* (w->n) kept texts or NULL */
    bool sessions;                    /* chat sessions: answers go back in later turns */
    char *model_json;                 /* JSON-encoded model name */
    struct buf body;                  /* scratch request body */
    struct i32vec toks;               /* scratch prompt tokens */
    bool progress;                    /* print a progress line */
};

static double now_s(const struct client *c)
{
    return (double)(time_now_ns() - c->t0_ns) * 1e-9;
}

/* ---- due heap ---- */

/* Order: due time, then item index, so simultaneous items go in item order. */
static bool before(const struct heap_ent *a, double due, int32_t item)
{
    return a->due_s < due || (a->due_s == due && a->item < item);
}

static void heap_push(struct client *c, double due, int32_t item)
{
    int32_t i = c->n_heap++;
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (before(&c->heap[p], due, item)) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = (struct heap_ent){due, item};
}

static struct heap_ent heap_pop(struct client *c)
{
    struct heap_ent top = c->heap[0], last = c->heap[--c->n_heap];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        const struct heap_ent *mv = &last;
        if (l < c->n_heap && before(&c->heap[l], mv->due_s, mv->item)) m = l, mv = &c->heap[l];
        if (r < c->n_heap && before(&c->heap[r], mv->due_s, mv->item)) m = r;
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (c->n_heap) c->heap[i] = last;
    return top;
}

/* ---- requests ---- */

/* Appends text as a JSON string (answers are arbitrary text; bytes that are
 * not UTF-8 go as they are, the server reports them). */
static void put_json_string(struct buf *b, const char *text)
{
    json_t *s = json_string(text);
    if (!s) s = json_string_nocheck(text);
    char *enc = json_dumps(s, JSON_ENCODE_ANY);
    CHECK(enc);
    buf_puts(b, enc);
    free(enc);
    json_decref(s);
}

/* A chat-session turn as the conversation a chat client sends: the system
 * prompt (the session's shared prefix), then every earlier turn's user
 * message and the answer the server actually gave, then this turn's user
 * message. The answers are real, so a server that keeps a finished turn's
 * KV can serve the history from its cache. */
static void build_conversation(struct client *c, int32_t item)
{
    const struct bench_workload *w = c->w;
    const struct bench_item *it = &w->items[item];
    struct buf *b = &c->body;
    c->toks.n = 0; /* the turns of the session, newest first */
    for (int32_t j = item; j >= 0; j = w->items[j].after)
        i32vec_push(&c->toks, j);
    buf_puts(b, "\"messages\":[");
    if (it->n_sys_blocks > 0) {
        buf_puts(b, "{\"role\":\"system\",\"content\":\"");
        bench_item_range_text(w, item, 0, it->n_sys_blocks * w->block_tokens, b);
        buf_puts(b, "\"},");
    }
    for (size_t k = c->toks.n; k-- > 0;) {
        int32_t j = c->toks.v[k];
        const struct bench_item *t = &w->items[j];
        buf_puts(b, "{\"role\":\"user\",\"content\":\"");
        bench_item_range_text(w, j, t->user_block, t->n_user, b); /* words: no escaping */
        buf_puts(b, "\"}");
        if (j == item) break;
        buf_puts(b, ",{\"role\":\"assistant\",\"content\":");
        put_json_string(b, c->texts[j] ? c->texts[j] : "");
        buf_puts(b, "},");
    }
    buf_puts(b, "],");
}

static void build_body(struct client *c, int32_t item)
{
    const struct bench_item *it = &c->w->items[item];
    struct buf *b = &c->body;
    buf_clear(b);
    buf_printf(b, "{\"model\":%s,", c->model_json);
    if (c->t->chat && it->n_user > 0) {
        build_conversation(c, item);
    } else if (c->t->chat) {
        buf_puts(b, "\"messages\":[{\"role\":\"user\",\"content\":\"");
        bench_item_text(c->w, item, b); /* words need no JSON escaping */
        buf_puts(b, "\"}],");
    } else if (c->t->text) {
        buf_puts(b, "\"prompt\":\"");
        bench_item_text(c->w, item, b);
        buf_puts(b, "\",");
    } else {
        c->toks.n = 0;
        bench_item_tokens(c->w, item, &c->toks);
        /* long prompts (Mooncake: ~10k ids) make this the hot loop: digits by
         * hand, no printf */
        buf_reserve(b, c->toks.n * 12 + 16);
        buf_puts(b, "\"prompt\":[");
        char *q = b->data + b->len;
        for (size_t k = 0; k < c->toks.n; k++) {
            uint32_t v = (uint32_t)c->toks.v[k];
            char digits[10];
            int nd = 0;
            do {
                digits[nd++] = (char)('0' + v % 10);
                v /= 10;
            } while (v);
            if (k) *q++ = ',';
            while (nd)
                *q++ = digits[--nd];
        }
        b->len = (size_t)(q - b->data);
        b->data[b->len] = 0;
        buf_puts(b, "],");
    }
    buf_printf(b, "\"max_tokens\":%d,\"stream\":true,\"stream_options\":{\"include_usage\":true}",
               it->n_output);
    if (c->t->ignore_eos) buf_puts(b, ",\"ignore_eos\":true");
    if (c->o->temperature >= 0) buf_printf(b, ",\"temperature\":%g", c->o->temperature);
    if (c->o->seed >= 0) buf_printf(b, ",\"seed\":%lld", (long long)c->o->seed);
    if (c->t->logit_bias[0]) buf_printf(b, ",\"logit_bias\":%s", c->t->logit_bias);
    buf_putc(b, '}');
}

static void flight_free(struct flight *f)
{
    bench_sse_release(&f->sse);
    buf_release(&f->body);
    free(f);
}

static void kick(struct client *c)
{
    event_active(c->timer, EV_TIMEOUT, 0);
}

static void on_error(enum evhttp_request_error e, void *arg)
{
    struct flight *f = arg;
    static const char *const names[] = {"timeout",   "connection closed (eof)", "connect failed",
                                        "cancelled", "invalid header",          "body too large"};
    const char *what = (unsigned)e < ARRAY_LEN(names) ? names[e] : "transport error";
    snprintf(f->transport_err, sizeof(f->transport_err), "%s", what);
}

static int on_headers(struct evhttp_request *req, void *arg)
{
    struct flight *f = arg;
    f->status = evhttp_request_get_response_code(req);
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    f->json_body = f->status == 200 && ct && !strncmp(ct, "application/json", 16);
    return 0;
}

static void on_chunk(struct evhttp_request *req, void *arg)
{
    struct flight *f = arg;
    struct client *c = f->c;
    double now = now_s(c);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    int n_vec = evbuffer_peek(in, -1, NULL, NULL, 0);
    struct evbuffer_iovec vec_small[8], *vec = vec_small;
    if (n_vec > 8) vec = xmalloc(sizeof(*vec) * (size_t)n_vec);
    evbuffer_peek(in, -1, NULL, vec, n_vec);
    for (int k = 0; k < n_vec; k++) {
        if (f->status != 200 || f->json_body) {
            /* error bodies: keep the start for the message; JSON: all */
            size_t cap = f->json_body ? BENCH_SSE_MAX_EVENT : 200;
            size_t room = cap - MIN(cap, f->body.len);
            buf_append(&f->body, vec[k].iov_base, MIN(room, vec[k].iov_len));
            continue;
        }
        int events = bench_sse_feed(&f->sse, vec[k].iov_base, vec[k].iov_len);
        if (!events) continue;
        struct bench_record *r = &c->recs[f->item];
        if (r->first_s < 0) {
            r->first_s = now;
            events--;
        } else {
            bench_record_add_gap(r, now - f->last_event_s);
            events--;
        }
        /* several events in one read arrived together: zero gaps */
        for (; events > 0; events--)
            bench_record_add_gap(r, 0);
        f->last_event_s = now;
    }
    if (vec != vec_small) free(vec);
}

static void finish_json(struct flight *f, struct bench_record *r, double now)
{
    json_error_t je;
    json_t *o = json_loadb(f->body.data ? f->body.data : "", f->body.len, 0, &je);
    if (!json_is_object(o)) {
        snprintf(r->error, sizeof(r->error), "malformed JSON response: %.80s", je.text);
        r->ok = false;
        json_decref(o);
        return;
    }
    bench_sse_usage(&f->sse, o);
    json_t *ch = json_object_get(o, "choices"), *c0 = json_array_get(ch, 0);
    json_t *t = json_object_get(c0, "text");
    if (!t) t = json_object_get(json_object_get(c0, "message"), "content");
    if (json_is_string(t) && json_string_length(t)) {
        r->first_s = now;
        f->sse.n_content = 1;
        if (f->sse.keep_text) buf_append(&f->sse.text, json_string_value(t), json_string_length(t));
    }
    json_decref(o);
}

static void on_done(struct evhttp_request *req, void *arg)
{
    struct flight *f = arg;
    struct client *c = f->c;
    double now = now_s(c);
    struct bench_record *r = &c->recs[f->item];
    const struct bench_item *it = &c->w->items[f->item];
    r->end_s = now;
    r->status = req ? evhttp_request_get_response_code(req) : 0;
    if (r->status == 200 && f->json_body) {
        r->ok = true;
        finish_json(f, r, now);
    } else if (r->status == 200) {
        r->ok = !f->sse.failed && f->sse.done;
        if (f->sse.failed)
            snprintf(r->error, sizeof(r->error), "%.110s", f->sse.error);
        else if (!f->sse.done)
            snprintf(r->error, sizeof(r->error), "stream ended without [DONE]");
    } else if (r->status == 0) {
        snprintf(r->error, sizeof(r->error), "%s",
                 f->transport_err[0] ? f->transport_err : "no response");
    } else {
        snprintf(r->error, sizeof(r->error), "HTTP %d: %.90s", r->status, buf_str(&f->body));
        for (char *p = r->error; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    if (r->ok && r->first_s < 0 && it->n_output > 0) {
        r->ok = false;
        snprintf(r->error, sizeof(r->error), "no content in the response");
    }
    r->n_events = f->sse.n_content;
    r->n_output = f->sse.output_tokens >= 0 ? (int32_t)f->sse.output_tokens : f->sse.n_content;
    r->n_input = f->sse.prompt_tokens >= 0 ? (int32_t)f->sse.prompt_tokens : it->n_input;
    r->n_cached = f->sse.cached_tokens >= 0 ? (int32_t)f->sse.cached_tokens : -1;
    r->spec_drafts = f->sse.spec_drafts;
    r->spec_draft_tok = f->sse.spec_draft_tok;
    r->spec_accepted = f->sse.spec_accepted;
    if (c->texts && f->sse.text.len)
        c->texts[f->item] = xstrdup(buf_str(&f->sse.text));
    else if (c->texts)
        c->texts[f->item] = xstrdup("");
    if (!r->ok) c->n_failed++;

    /* the connection is idle again (a failed one reconnects on next use) */
    f->conn->next_idle = c->idle;
    c->idle = f->conn;
    c->in_flight--;
    c->n_done++;
    for (int32_t k = c->follow_head[f->item]; k >= 0; k = c->follow_next[k])
        heap_push(c, now + c->w->items[k].think_s, k);
    flight_free(f);
    kick(c);
}

static struct conn *get_conn(struct client *c)
{
    if (c->idle) {
        struct conn *k = c->idle;
        c->idle = k->next_idle;
        return k;
    }
    struct conn *k = xcalloc(1, sizeof(*k));
    k->evcon = evhttp_connection_base_new(c->base, NULL, c->t->host, (unsigned short)c->t->port);
    CHECK(k->evcon);
    evhttp_connection_set_timeout(k->evcon, (int)(c->t->timeout_s + 0.5));
    k->next_all = c->all;
    c->all = k;
    return k;
}

static void send_item(struct client *c, int32_t item, double due, double ready)
{
    struct bench_record *r = &c->recs[item];
    r->item = item;
    r->due_s = due;
    r->ready_s = ready;
    r->first_s = -1;
    r->ideal_cached = c->o->ideal_cached ? c->o->ideal_cached[item] : 0;
    struct flight *f = xcalloc(1, sizeof(*f));
    f->c = c;
    f->item = item;
    bench_sse_init(&f->sse, c->o->keep_text || c->sessions);
    f->conn = get_conn(c);
    build_body(c, item);
    struct evhttp_request *req = evhttp_request_new(on_done, f);
    evhttp_request_set_chunked_cb(req, on_chunk);
    evhttp_request_set_header_cb(req, on_headers);
    evhttp_request_set_error_cb(req, on_error);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    char host[300];
    snprintf(host, sizeof(host), "%s:%d", c->t->host, c->t->port);
    evhttp_add_header(h, "Host", host);
    evhttp_add_header(h, "Content-Type", "application/json");
    evhttp_add_header(h, "Accept", "text/event-stream");
    if (c->t->api_key[0]) {
        char auth[300];
        snprintf(auth, sizeof(auth), "Bearer %s", c->t->api_key);
        evhttp_add_header(h, "Authorization", auth);
    }
    evbuffer_add(evhttp_request_get_output_buffer(req), c->body.data, c->body.len);
    char path[320];
    snprintf(path, sizeof(path), "%s/v1/%s", c->t->base_path,
             c->t->chat ? "chat/completions" : "completions");
    c->in_flight++;
    c->n_sent++;
    r->send_s = now_s(c);
    r->end_s = -1;
    int rc = evhttp_make_request(f->conn->evcon, req, EVHTTP_REQ_POST, path);
    /* small requests leave at once (a new connection has its socket now) */
    struct bufferevent *bev = evhttp_connection_get_bufferevent(f->conn->evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    if (rc != 0) {
        /* a synchronous connect failure may already have run on_done */
        if (r->end_s >= 0) return;
        r->end_s = now_s(c);
        snprintf(r->error, sizeof(r->error), "could not start the request");
        c->n_failed++;
        c->in_flight--;
        c->n_done++;
        f->conn->next_idle = c->idle;
        c->idle = f->conn;
        flight_free(f);
    }
}

static bool slot_free(const struct client *c)
{
    return c->o->max_concurrency <= 0 || c->in_flight < c->o->max_concurrency;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    double now = now_s(c);
    /* everything due (within 20 us: not worth another wake-up) joins the FIFO */
    while (c->n_heap && c->heap[0].due_s <= now + 20e-6) {
        struct heap_ent e = heap_pop(c);
        int32_t pos = (c->ready_head + c->n_ready) % c->w->n;
        c->ready[pos] = e.item;
        c->recs[e.item].due_s = e.due_s;
        c->recs[e.item].ready_s = e.due_s;
        c->n_ready++;
    }
    while (c->n_ready && slot_free(c)) {
        int32_t item = c->ready[c->ready_head];
        c->ready_head = (c->ready_head + 1) % c->w->n;
        c->n_ready--;
        /* ready_s < 0: it waited for a slot, which freed just now */
        double ready = c->recs[item].ready_s < 0 ? now_s(c) : c->recs[item].due_s;
        send_item(c, item, c->recs[item].due_s, ready);
    }
    for (int32_t k = 0; k < c->n_ready; k++)
        c->recs[c->ready[(c->ready_head + k) % c->w->n]].ready_s = -1;
    if (c->n_done == c->w->n) {
        event_base_loopbreak(c->base);
        return;
    }
    if (c->n_heap) {
        double wait = c->heap[0].due_s - now_s(c);
        if (wait < 0) wait = 0;
        struct timeval tv = {(time_t)wait, (suseconds_t)((wait - (double)(time_t)wait) * 1e6)};
        evtimer_add(c->timer, &tv);
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct client *c = arg;
    fprintf(stderr, "\r  %6.1fs  sent %d/%d  done %d  in flight %d  waiting %d  failed %d   ",
            now_s(c), c->n_sent, c->w->n, c->n_done, c->in_flight, c->n_ready, c->n_failed);
    fflush(stderr);
}

static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int bench_client_run(const struct bench_workload *w, const struct bench_target *t,
                     const struct bench_run_opts *o, struct bench_record **recs, char ***texts,
                     struct err_msg *m)
{
    *recs = NULL;
    if (texts) *texts = NULL;
    if (w->n == 0) return err_set(m, ERR_INVALID, "the workload has no requests");
    raise_fd_limit();
    struct event_config *cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct client c = {.w = w, .t = t, .o = o};
    c.base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (!c.base) return err_set(m, ERR_INTERNAL, "cannot create the event loop");
    json_t *mj = json_string(t->model);
    c.model_json = json_dumps(mj, JSON_ENCODE_ANY);
    json_decref(mj);
    CHECK(c.model_json);
    c.heap = xmalloc(sizeof(*c.heap) * (size_t)w->n);
    c.ready = xmalloc(sizeof(int32_t) * (size_t)w->n);
    c.recs = xcalloc((size_t)w->n, sizeof(*c.recs));
    c.follow_head = xmalloc(sizeof(int32_t) * (size_t)w->n);
    c.follow_next = xmalloc(sizeof(int32_t) * (size_t)w->n);
    for (int32_t i = w->n - 1; i >= 0; i--) {
        c.follow_head[i] = -1;
        c.follow_next[i] = -1;
    }
    for (int32_t i = w->n - 1; i >= 0; i--)
        if (w->items[i].after >= 0) {
            c.follow_next[i] = c.follow_head[w->items[i].after];
            c.follow_head[w->items[i].after] = i;
        }
    /* chat sessions send earlier answers back: keep every answer */
    for (int32_t i = 0; i < w->n; i++)
        c.sessions |= t->chat && w->items[i].n_user > 0 && w->items[i].after >= 0;
    if (texts || c.sessions) c.texts = xcalloc((size_t)w->n, sizeof(char *));
    for (int32_t i = 0; i < w->n; i++) {
        c.recs[i].item = i;
        c.recs[i].first_s = -1;
        c.recs[i].n_cached = -1;
        c.recs[i].spec_drafts = c.recs[i].spec_draft_tok = c.recs[i].spec_accepted = -1;
        if (w->items[i].after < 0) heap_push(&c, w->items[i].t_s, i);
    }
    /* two priorities: the due-time timer runs before pending socket reads in
     * the same loop iteration, so a busy loop delays sends as little as it can */
    event_base_priority_init(c.base, 2);
    c.timer = evtimer_new(c.base, on_timer, &c);
    event_priority_set(c.timer, 0);
    c.progress = o->progress && isatty(STDERR_FILENO);
    if (c.progress) {
        c.tick = event_new(c.base, -1, EV_PERSIST, on_tick, &c);
        struct timeval half = {0, 500000};
        event_add(c.tick, &half);
    }
    c.t0_ns = time_now_ns();
    kick(&c);
    event_base_dispatch(c.base);
    if (c.progress) {
        on_tick(-1, 0, &c);
        fputc('\n', stderr);
        event_free(c.tick);
    }
    CHECK(c.n_done == w->n);
    for (struct conn *k = c.all, *next; k; k = next) {
        next = k->next_all;
        evhttp_connection_free(k->evcon);
        free(k);
    }
    event_free(c.timer);
    event_base_free(c.base);
    free(c.heap);
    free(c.ready);
    free(c.follow_head);
    free(c.follow_next);
    free(c.model_json);
    buf_release(&c.body);
    i32vec_release(&c.toks);
    *recs = c.recs;
    if (texts) {
        *texts = c.texts;
    } else if (c.texts) {
        for (int32_t i = 0; i < w->n; i++)
            free(c.texts[i]);
        free(c.texts);
    }
    return 0;
}

/* ---- one-off GET (Prometheus scrape) ---- */

struct get_state {
    struct event_base *base; /* loop to stop when the answer is in */
    struct buf *out;         /* body destination */
    int status;              /* response status, 0 none */
};

static void on_get_done(struct evhttp_request *req, void *arg)
{
    struct get_state *g = arg;
    if (req) {
        g->status = evhttp_request_get_response_code(req);
        struct evbuffer *in = evhttp_request_get_input_buffer(req);
        size_t n = evbuffer_get_length(in);
        buf_reserve(g->out, n);
        evbuffer_remove(in, g->out->data + g->out->len, n);
        g->out->len += n;
        g->out->data[g->out->len] = 0;
    }
    /* the kept-alive connection would hold the loop open */
    event_base_loopbreak(g->base);
}

static int http_call(const struct bench_target *t, enum evhttp_cmd_type cmd, const char *path,
                     const char *body, struct buf *out, int *status, struct err_msg *m)
{
    struct event_base *base = event_base_new();
    if (!base) return err_set(m, ERR_INTERNAL, "cannot create the event loop");
    struct evhttp_connection *evcon =
        evhttp_connection_base_new(base, NULL, t->host, (unsigned short)t->port);
    evhttp_connection_set_timeout(evcon, 10);
    struct get_state g = {.base = base, .out = out};
    struct evhttp_request *req = evhttp_request_new(on_get_done, &g);
    char host[300], full[512];
    snprintf(host, sizeof(host), "%s:%d", t->host, t->port);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Host", host);
    if (body) {
        evhttp_add_header(h, "Content-Type", "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    }
    snprintf(full, sizeof(full), "%s%s", t->base_path, path);
    int rc = 0;
    if (evhttp_make_request(evcon, req, cmd, full) == 0) event_base_dispatch(base);
    evhttp_connection_free(evcon);
    event_base_free(base);
    *status = g.status;
    if (!g.status)
        rc = err_set(m, -ECONNREFUSED, "%s %s from %s: no response", body ? "POST" : "GET", full,
                     host);
    return rc;
}

int bench_client_get(const struct bench_target *t, const char *path, struct buf *out, int *status,
                     struct err_msg *m)
{
    return http_call(t, EVHTTP_REQ_GET, path, NULL, out, status, m);
}

int bench_client_post(const struct bench_target *t, const char *path, const char *body,
                      struct buf *out, int *status, struct err_msg *m)
{
    return http_call(t, EVHTTP_REQ_POST, path, body, out, status, m);
}

int bench_target_answer_words(struct bench_target *t, struct err_msg *m)
{
    struct buf text = {0}, out = {0};
    for (int32_t i = 0; i < BENCH_N_WORDS; i++)
        buf_puts(&text, bench_token_word(i));
    /* inferd spells it add_special, vLLM add_special_tokens */
    json_t *req = json_pack("{s:s,s:s,s:b,s:b}", "model", t->model, "prompt", buf_str(&text),
                            "add_special", 0, "add_special_tokens", 0);
    char *body = json_dumps(req, 0);
    json_decref(req);
    CHECK(body);
    int status = 0;
    int rc = bench_client_post(t, "/tokenize", body, &out, &status, m);
    free(body);
    buf_release(&text);
    if (rc) goto out;
    json_t *o = json_loadb(out.data ? out.data : "", out.len, 0, NULL);
    json_t *toks = json_object_get(o, "tokens");
    if (status != 200 || !json_is_array(toks) || json_array_size(toks) != BENCH_N_WORDS) {
        rc = err_set(m, ERR_PROTOCOL,
                     "--answer-words: POST /tokenize gave HTTP %d and %d tokens for %d words "
                     "(the server must tokenize, and each word be one token)",
                     status, json_is_array(toks) ? (int)json_array_size(toks) : -1, BENCH_N_WORDS);
        json_decref(o);
        goto out;
    }
    struct buf bias = {0};
    buf_putc(&bias, '{');
    for (size_t i = 0; i < BENCH_N_WORDS; i++) {
        json_t *v = json_array_get(toks, i);
        if (!json_is_integer(v)) {
            rc = err_set(m, ERR_PROTOCOL, "--answer-words: /tokenize: tokens[%zu] is not an id", i);
            break;
        }
        buf_printf(&bias, "%s\"%lld\":100", i ? "," : "", (long long)json_integer_value(v));
    }
    buf_putc(&bias, '}');
    if (!rc && bias.len >= sizeof(t->logit_bias))
        rc = err_set(m, ERR_PROTOCOL, "--answer-words: logit_bias too long");
    if (!rc) snprintf(t->logit_bias, sizeof(t->logit_bias), "%s", buf_str(&bias));
    buf_release(&bias);
    json_decref(o);
out:
    buf_release(&out);
    return rc;
}

bool bench_prom_sum(const char *text, const char *name, double *out)
{
    size_t nl = strlen(name);
    bool found = false;
    double sum = 0;
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        if (!strncmp(p, name, nl) && (p[nl] == ' ' || p[nl] == '{')) {
            const char *v = p + nl;
            if (*v == '{') {
                /* label values may contain '}' only escaped; find the closing one */
                const char *close = strchr(v, '}');
                v = close && (!eol || close < eol) ? close + 1 : NULL;
            }
            if (v) {
                char *end;
                double x = strtod(v, &end);
                if (end != v) {
                    sum += x;
                    found = true;
                }
            }
        }
        p = eol ? eol + 1 : NULL;
    }
    if (found) *out = sum;
    return found;
}
