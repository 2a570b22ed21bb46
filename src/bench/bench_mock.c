/*
 * bench_mock.c - the scripted server (see bench_mock.h for its behaviour).
 *
 * One struct stream per response in progress: a timer fires for the first
 * event and then every itl_ms; each firing writes one SSE event as an HTTP
 * chunk. If the client goes away, the connection's close callback frees the
 * stream and its timer. The prefix "cache" is a set of chained block hashes
 * (XXH3 of the parent hash and the block's token ids) that only grows.
 */
#include "bench/bench_mock.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/timeutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

struct mock {
    const struct bench_mock_opts *o;        /* options */
    struct event_base *base;                /* the loop */
    uint64_t *set;                          /* (cap) block hashes seen; 0 = empty slot */
    size_t n_set, cap;                      /* used / allocated (power of two) */
    int64_t n_requests;                     /* requests answered (for fail_every) */
    int64_t drafts, draft_tokens, accepted; /* speculation counters (/metrics) */
};

struct stream {
    struct mock *mk;                 /* server */
    struct evhttp_request *req;      /* response in progress */
    struct evhttp_connection *evcon; /* its connection (close callback) */
    struct event *timer;             /* next event */
    uint64_t prompt_hash;            /* seeds the output words */
    int32_t n_prompt, n_cached;      /* usage */
    int32_t n_out, next;             /* tokens to send, tokens sent */
    int32_t steps;                   /* speculation steps taken */
    int32_t n_events;                /* events sent */
    uint64_t first_ns;               /* when the first event is due (monotonic) */
    uint64_t armed_ns;               /* when the armed timer's event is due */
    bool chat;                       /* chat.completion.chunk shape */
    bool stream;                     /* SSE; false = one JSON body at the end */
    struct buf text;                 /* non-streamed: the whole output */
};

/* ---- prefix cache ---- */

static bool set_has(const struct mock *mk, uint64_t h, size_t *slot)
{
    size_t i = (size_t)(h >> 7) & (mk->cap - 1);
    while (mk->set[i] && mk->set[i] != h)
        i = (i + 1) & (mk->cap - 1);
    *slot = i;
    return mk->set[i] == h;
}

static void set_add(struct mock *mk, uint64_t h)
{
    if ((mk->n_set + 1) * 2 > mk->cap) {
        uint64_t *old = mk->set;
        size_t old_cap = mk->cap;
        mk->cap = mk->cap ? mk->cap * 2 : 4096;
        mk->set = xcalloc(mk->cap, sizeof(uint64_t));
        for (size_t i = 0; i < old_cap; i++)
            if (old[i]) {
                size_t s;
                set_has(mk, old[i], &s);
                mk->set[s] = old[i];
            }
        free(old);
    }
    size_t s;
    if (!set_has(mk, h, &s)) {
        mk->set[s] = h;
        mk->n_set++;
    }
}

/* Cached tokens of a prompt, then records all its whole blocks. */
static int32_t prefix_lookup(struct mock *mk, const int32_t *ids, int32_t n)
{
    int32_t B = mk->o->block_tokens, cached = 0;
    bool hit = true;
    uint64_t h = 0x1234;
    for (int32_t b = 0; (b + 1) * B <= n; b++) {
        h = XXH3_64bits_withSeed(ids + (size_t)b * (size_t)B, sizeof(int32_t) * (size_t)B, h);
        if (!h) h = 1;
        size_t s;
        if (hit && mk->cap && set_has(mk, h, &s))
            cached += B;
        else
            hit = false;
        set_add(mk, h);
    }
    return cached;
}

/* ---- requests ---- */

static void send_error(struct evhttp_request *req, int status, const char *msg)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"code\":null}}", msg,
                        status == 503 ? "server_error" : "invalid_request_error");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, status, status == 503 ? "Service Unavailable" : "Bad Request", b);
    evbuffer_free(b);
}

/* Words of a text as token ids (hash of each space-separated word). */
static void text_ids(const char *s, struct i32vec *out)
{
    while (*s) {
        while (*s == ' ')
            s++;
        const char *e = s;
        while (*e && *e != ' ')
            e++;
        if (e > s) i32vec_push(out, (int32_t)(XXH3_64bits(s, (size_t)(e - s)) & 0x7fffffff));
        s = e;
    }
}

static int prompt_ids(json_t *body, struct i32vec *ids, bool *chat)
{
    json_t *p = json_object_get(body, "prompt");
    json_t *msgs = json_object_get(body, "messages");
    *chat = false;
    if (json_is_string(p)) {
        text_ids(json_string_value(p), ids);
    } else if (json_is_array(p)) {
        size_t k;
        json_t *v;
        json_array_foreach(p, k, v)
        {
            if (!json_is_integer(v)) return -1;
            i32vec_push(ids, (int32_t)json_integer_value(v));
        }
    } else if (json_is_array(msgs)) {
        *chat = true;
        size_t k;
        json_t *v;
        json_array_foreach(msgs, k, v)
        {
            json_t *c = json_object_get(v, "content");
            if (json_is_string(c)) text_ids(json_string_value(c), ids);
        }
    } else {
        return -1;
    }
    return ids->n ? 0 : -1;
}

static void word(const struct stream *st, int32_t j, struct buf *out)
{
    uint64_t h = st->prompt_hash ^ ((uint64_t)j * 0x9e3779b97f4a7c15ull);
    if (st->mk->o->perturb_from >= 0 && j >= st->mk->o->perturb_from) h ^= 0xabcdefull;
    h = XXH3_64bits(&h, sizeof(h));
    buf_printf(out, " w%u", (unsigned)(h % 1000));
}

/* Tokens in the event that starts at token index j. */
static int32_t event_tokens(const struct stream *st, int32_t j)
{
    if (j == 0 || st->mk->o->spec_k <= 0) return 1;
    return MIN(1 + st->mk->o->spec_accept, st->n_out - j);
}

static void stream_free(struct stream *st)
{
    if (st->evcon) evhttp_connection_set_closecb(st->evcon, NULL, NULL);
    event_free(st->timer);
    buf_release(&st->text);
    free(st);
}

static void usage_json(struct stream *st, struct buf *b)
{
    const struct bench_mock_opts *o = st->mk->o;
    buf_printf(b,
               "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
               "\"prompt_tokens_details\":{\"cached_tokens\":%d}",
               st->n_prompt, st->n_out, st->n_prompt + st->n_out, st->n_cached);
    if (o->spec_k > 0 && !o->spec_metrics_only)
        buf_printf(b,
                   ",\"completion_tokens_details\":{\"spec_drafts\":%d,\"spec_draft_tokens\":%d,"
                   "\"spec_accepted_tokens\":%d}",
                   st->steps, st->steps * o->spec_k, st->n_out - 1 - st->steps);
    buf_putc(b, '}');
}

/* Events never go out before they are due: tests bound latencies from
 * below by the script's delays. libevent adds a timeout to the loop's
 * cached time, as old as the loop's last wake-up, and may read a coarser
 * clock than time_now_ns, so the cache is refreshed here and a timer that
 * still fires early is armed again for the rest (on_stream_timer). */
static void arm(struct stream *st, uint64_t due_ns)
{
    st->armed_ns = due_ns;
    event_base_update_cache_time(event_get_base(st->timer));
    uint64_t now = time_now_ns();
    uint64_t wait = due_ns > now ? due_ns - now : 0;
    struct timeval tv = {(time_t)(wait / 1000000000ull),
                         (suseconds_t)(wait % 1000000000ull / 1000)};
    evtimer_add(st->timer, &tv);
}

static void on_close(struct evhttp_connection *evcon, void *arg)
{
    struct stream *st = arg;
    st->evcon = NULL;
    stream_free(st);
}

/* Appends the next event (and, after the last, usage and [DONE]) to ev;
 * returns true when it was the last. Output words need no JSON escaping. */
static bool next_event(struct stream *st, struct buf *ev)
{
    struct mock *mk = st->mk;
    const struct bench_mock_opts *o = mk->o;
    int32_t n = event_tokens(st, st->next);
    struct buf piece = {0};
    for (int32_t k = 0; k < n; k++)
        word(st, st->next + k, &piece);
    if (st->next > 0 && o->spec_k > 0) {
        st->steps++;
        mk->drafts++;
        mk->draft_tokens += o->spec_k;
        mk->accepted += n - 1;
    }
    st->next += n;
    st->n_events++;
    bool last = st->next >= st->n_out;
    if (!st->stream) {
        buf_append(&st->text, piece.data, piece.len);
    } else {
        if (st->chat)
            buf_printf(ev,
                       "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
                       "\"delta\":{\"content\":\"%s\"},\"finish_reason\":%s}]}\n\n",
                       buf_str(&piece), last ? "\"length\"" : "null");
        else
            buf_printf(ev,
                       "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
                       "\"text\":\"%s\",\"finish_reason\":%s}]}\n\n",
                       buf_str(&piece), last ? "\"length\"" : "null");
        if (last) {
            buf_puts(ev, "data: {\"choices\":[],");
            usage_json(st, ev);
            buf_puts(ev, "}\n\ndata: [DONE]\n\n");
        }
    }
    buf_release(&piece);
    return last;
}

static void on_stream_timer(evutil_socket_t fd, short what, void *arg)
{
    struct stream *st = arg;
    const struct bench_mock_opts *o = st->mk->o;
    if (time_now_ns() < st->armed_ns) {
        arm(st, st->armed_ns);
        return;
    }
    /* every event already due goes out in one write: a mock that fell behind
     * (or itl 0) catches up in one system call instead of one per event */
    struct buf ev = {0};
    bool last;
    uint64_t due;
    do {
        last = next_event(st, &ev);
        /* event k is due at first + k * itl: lateness of one does not shift
         * the rest */
        due = st->first_ns + (uint64_t)((double)st->n_events * o->itl_ms * 1e6);
    } while (!last && due <= time_now_ns());
    if (st->stream) {
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, ev.data, ev.len);
        evhttp_send_reply_chunk(st->req, b);
        evbuffer_free(b);
    }
    buf_release(&ev);
    if (!last) {
        arm(st, due);
        return;
    }
    /* a reply to a "Connection: close" request closes the connection inside
     * the send call: detach first so the close callback cannot free st */
    if (st->evcon) evhttp_connection_set_closecb(st->evcon, NULL, NULL);
    st->evcon = NULL;
    if (st->stream) {
        evhttp_send_reply_end(st->req);
    } else {
        struct buf body = {0};
        json_t *js = json_stringn(st->text.data ? st->text.data : "", st->text.len);
        char *enc = json_dumps(js, JSON_ENCODE_ANY);
        if (st->chat)
            buf_printf(&body,
                       "{\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
                       "{\"role\":\"assistant\",\"content\":%s},\"finish_reason\":\"length\"}],",
                       enc);
        else
            buf_printf(&body,
                       "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":%s,"
                       "\"finish_reason\":\"length\"}],",
                       enc);
        free(enc);
        json_decref(js);
        usage_json(st, &body);
        buf_putc(&body, '}');
        struct evbuffer *b = evbuffer_new();
        evbuffer_add(b, body.data, body.len);
        evhttp_add_header(evhttp_request_get_output_headers(st->req), "Content-Type",
                          "application/json");
        evhttp_send_reply(st->req, 200, "OK", b);
        evbuffer_free(b);
        buf_release(&body);
    }
    stream_free(st);
}

static void handle_metrics(struct mock *mk, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b,
                        "# TYPE inferd_requests_total counter\n"
                        "inferd_requests_total %lld\n"
                        "# TYPE inferd_spec_drafts_total counter\n"
                        "inferd_spec_drafts_total{model=\"mock\"} %lld\n"
                        "# TYPE inferd_spec_draft_tokens_total counter\n"
                        "inferd_spec_draft_tokens_total{model=\"mock\"} %lld\n"
                        "# TYPE inferd_spec_accepted_tokens_total counter\n"
                        "inferd_spec_accepted_tokens_total{model=\"mock\"} %lld\n",
                        (long long)mk->n_requests, (long long)mk->drafts,
                        (long long)mk->draft_tokens, (long long)mk->accepted);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                      "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void handle(struct evhttp_request *req, void *arg)
{
    struct mock *mk = arg;
    const struct bench_mock_opts *o = mk->o;
    const char *uri = evhttp_request_get_uri(req);
    if (!strcmp(uri, "/metrics")) {
        handle_metrics(mk, req);
        return;
    }
    if (strcmp(uri, "/v1/completions") && strcmp(uri, "/v1/chat/completions")) {
        send_error(req, 404, "no such endpoint");
        return;
    }
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
        send_error(req, 400, "POST expected");
        return;
    }
    mk->n_requests++;
    if (o->fail_every > 0 && mk->n_requests % o->fail_every == 0) {
        send_error(req, 503, "overloaded (scripted failure)");
        return;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    json_error_t je;
    json_t *body = json_loadb((const char *)evbuffer_pullup(in, -1), len, 0, &je);
    struct i32vec ids = {0};
    bool chat;
    json_t *mt = body ? json_object_get(body, "max_tokens") : NULL;
    if (!mt && body) mt = json_object_get(body, "max_completion_tokens");
    if (!json_is_object(body) || prompt_ids(body, &ids, &chat) || !json_is_integer(mt) ||
        json_integer_value(mt) < 1 || json_integer_value(mt) > 1000000) {
        json_decref(body);
        i32vec_release(&ids);
        send_error(req, 400, "bad request: need prompt or messages and max_tokens >= 1");
        return;
    }
    struct stream *st = xcalloc(1, sizeof(*st));
    st->mk = mk;
    st->req = req;
    st->chat = chat;
    st->stream = json_is_true(json_object_get(body, "stream"));
    st->n_out = (int32_t)json_integer_value(mt);
    st->n_prompt = (int32_t)ids.n;
    st->n_cached = prefix_lookup(mk, ids.v, (int32_t)ids.n);
    st->prompt_hash = XXH3_64bits(ids.v, sizeof(int32_t) * ids.n);
    json_decref(body);
    i32vec_release(&ids);
    st->timer = evtimer_new(mk->base, on_stream_timer, st);
    st->evcon = evhttp_request_get_connection(req);
    evhttp_connection_set_closecb(st->evcon, on_close, st);
    if (st->stream) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        evhttp_add_header(h, "Content-Type", "text/event-stream");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        evhttp_send_reply_start(req, 200, "OK");
    }
    double first_ms = o->ttft_ms + o->prefill_us * 1e-3 * (st->n_prompt - st->n_cached);
    st->first_ns = time_now_ns() + (uint64_t)(first_ms * 1e6);
    arm(st, st->first_ns);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    event_base_loopbreak(arg);
}

void bench_mock_opts_default(struct bench_mock_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->ttft_ms = 20;
    o->itl_ms = 5;
    o->block_tokens = 16;
    o->perturb_from = -1;
    o->backlog = 8192;
}

int bench_mock_run(const struct bench_mock_opts *o, struct err_msg *m)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (o->block_tokens < 1) return err_set(m, ERR_INVALID, "--block-tokens must be >= 1");
    if (o->spec_k > 0 && (o->spec_accept < 0 || o->spec_accept > o->spec_k))
        return err_set(m, ERR_INVALID, "--spec-accept must be in [0, --spec-k]");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host, &sa.sin_addr) != 1)
        return err_set(m, ERR_INVALID, "--host '%s': not an IPv4 address", o->host);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return err_set(m, -errno, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* accepted sockets inherit it: each SSE event leaves at once (no Nagle
     * delay waiting for the client's delayed ACK) */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, o->backlog)) {
        int e = errno;
        close(fd);
        return err_set(m, -e, "cannot listen on %s:%d: %s", o->host, o->port, strerror(e));
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    int port = ntohs(sa.sin_port);

    struct mock mk = {.o = o};
    /* millisecond timers (epoll_wait's timeout, rounded up; arm() keeps
     * them from firing early): a precise timerfd would cost a system call
     * per stream event */
    mk.base = event_base_new();
    struct evhttp *http = evhttp_new(mk.base);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);
    evhttp_set_gencb(http, handle, &mk);
    evhttp_set_timeout(http, 600);
    if (!evhttp_accept_socket_with_handle(http, fd)) {
        close(fd);
        evhttp_free(http);
        event_base_free(mk.base);
        return err_set(m, ERR_INTERNAL, "cannot serve on the listening socket");
    }
    if (o->port_file) {
        FILE *f = fopen(o->port_file, "w");
        if (f) {
            fprintf(f, "%d\n", port);
            fclose(f);
        }
    }
    fprintf(stderr, "bench-mock: listening on %s:%d\n", o->host, port);
    struct event *si = evsignal_new(mk.base, SIGINT, on_signal, mk.base);
    struct event *st = evsignal_new(mk.base, SIGTERM, on_signal, mk.base);
    event_add(si, NULL);
    event_add(st, NULL);
    signal(SIGPIPE, SIG_IGN);
    event_base_dispatch(mk.base);
    event_free(si);
    event_free(st);
    evhttp_free(http);
    event_base_free(mk.base);
    free(mk.set);
    return 0;
}
