/*
 * test_http.c - the HTTP/1.1 connection layer (src/net/http*.c) against raw
 * sockets: an in-process server on 127.0.0.1:0 with a small owner (echo, a
 * streamed answer, a slow answer on a timer, a large stream for slow
 * readers), and clients that write exact bytes and parse what comes back
 * with http_parser in response mode.
 *
 * One thread: the test drives the server's event loop between its socket
 * steps (wait_fd / pump run event_base_loop until a client socket is
 * readable or a timer fires), so every interleaving is the one written
 * here. Time bounds are generous (the machine is shared); every wait is
 * bounded, and alarm() ends a run that hangs anyway.
 *
 * Covered: keep-alive and pipelining in order; HTTP/1.0; chunked streams;
 * smuggling and malformed heads (each a JSON 400 and a close, never a second
 * request); 431 / 413 (announced and chunked); Expect both ways and 417;
 * head and body deadlines (slowloris, while another client is served);
 * idle close; the connection cap (503) and the per-client cap (429); accept
 * back-off under a low RLIMIT_NOFILE (no spinning, one log line per
 * episode, serving on); half-close gets its answer; full close and reset
 * fire on_gone before the owner answers; a client that never reads blocks
 * the stream and times out; drain; HEAD; x-request-id; the error hook.
 */
#include "test.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/timeutil.h"
#include "net/http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <http_parser.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

TEST_MAIN()

__attribute__((constructor)) static void watchdog(void)
{
    /* The last resort against a hang: each wait below is bounded. */
    alarm(240);
    signal(SIGPIPE, SIG_IGN);
}

/* ------------------------------------------------------------ the loop */

static struct event_base *base;

static void loop_break(evutil_socket_t fd, short what, void *arg)
{
    event_base_loopbreak(base);
}

/* Runs the loop until fd (if >= 0) is readable or ms pass. */
static void wait_fd(int fd, int ms)
{
    struct event *t = evtimer_new(base, loop_break, NULL);
    struct event *r = fd >= 0 ? event_new(base, fd, EV_READ, loop_break, NULL) : NULL;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(t, &tv);
    if (r) event_add(r, NULL);
    event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
    event_free(t);
    if (r) event_free(r);
}

static void pump(int ms)
{
    wait_fd(-1, ms);
}

static double ms_since(uint64_t t0)
{
    return (double)(time_now_ns() - t0) * 1e-6;
}

/* Pumps until cond() or ms pass; returns cond(). */
static bool pump_until(bool (*cond)(void), int ms)
{
    uint64_t t0 = time_now_ns();
    while (!cond() && ms_since(t0) < ms)
        pump(5);
    return cond();
}

/* ----------------------------------------------------------- the owner */

struct owner {
    int n_requests;            /* on_request calls */
    int n_gone;                /* on_gone calls */
    int n_drain;               /* on_drain calls */
    int n_refusals;            /* on_refusal calls */
    int last_refusal;          /* its status */
    char last_why[256];        /* its reason */
    char last_refusal_id[160]; /* its request id */
    char last_id[160];         /* http_request_id of the last request */
    char last_method[16];      /* of the last request */
    char last_path[256];       /* of the last request */
    bool saw_blocked;          /* http_blocked said true */
    struct http_request *slow; /* a /slow request waiting for its timer */
    struct event *slow_timer;  /* answers it */
    bool slow_answered;        /* the timer fired */
    uint64_t gone_ns;          /* when on_gone ran */
    struct http_request *big;  /* a /big stream */
    size_t big_total;          /* bytes it should send */
    size_t big_sent;           /* bytes it wrote */
    char hook_path[256];       /* what the error hook was given */
    int hook_status;
};

static struct owner O;
static struct http_server *srv;
static struct http_hooks hooks;
static int port;

static void on_gone(struct http_request *req, void *arg)
{
    O.n_gone++;
    O.gone_ns = time_now_ns();
    if (req == O.big) {
        O.big = NULL;
        http_stream_end(req);
    }
}

static void big_pump(struct http_request *req)
{
    static char chunk[16384];
    memset(chunk, 'b', sizeof(chunk));
    while (O.big_sent < O.big_total) {
        if (http_blocked(req)) {
            O.saw_blocked = true;
            return;
        }
        size_t n = MIN(sizeof(chunk), O.big_total - O.big_sent);
        http_stream_write(req, chunk, n);
        O.big_sent += n;
    }
    O.big = NULL;
    http_stream_end(req);
}

static void on_drain(struct http_request *req, void *arg)
{
    O.n_drain++;
    if (req == O.big) big_pump(req);
}

static void slow_fire(evutil_socket_t fd, short what, void *arg)
{
    struct http_request *req = O.slow;
    O.slow = NULL;
    O.slow_answered = true;
    if (req) http_respond(req, 200, "text/plain", "slow done", 9);
}

static long query_num(struct http_request *req, const char *key, long dflt)
{
    const char *q = strstr(http_query(req), key);
    return q ? atol(q + strlen(key)) : dflt;
}

static void on_request(struct http_request *req, void *arg)
{
    O.n_requests++;
    snprintf(O.last_id, sizeof(O.last_id), "%s", http_request_id(req));
    snprintf(O.last_method, sizeof(O.last_method), "%s", http_method(req));
    snprintf(O.last_path, sizeof(O.last_path), "%s", http_path(req));
    http_set_hooks(req, on_gone, on_drain, NULL);
    const char *path = http_path(req);
    if (strcmp(path, "/hello") == 0) {
        http_add_header(req, "X-Owner", "yes");
        http_respond(req, 200, "text/plain", "hello", 5);
    } else if (strcmp(path, "/echo") == 0) {
        size_t len;
        const char *body = http_body(req, &len);
        http_respond(req, 200, "application/octet-stream", body, len);
    } else if (strcmp(path, "/id") == 0) {
        http_respond(req, 200, "text/plain", http_request_id(req), strlen(http_request_id(req)));
    } else if (strcmp(path, "/header") == 0) {
        const char *v = http_header(req, "x-probe");
        http_respond(req, 200, "text/plain", v ? v : "(none)", strlen(v ? v : "(none)"));
    } else if (strcmp(path, "/stream") == 0) {
        long n = query_num(req, "n=", 3);
        http_stream_start(req, 200, "text/event-stream");
        for (long i = 0; i < n; i++) {
            char line[32];
            int k = snprintf(line, sizeof(line), "chunk %ld\n", i);
            http_stream_write(req, line, (size_t)k);
        }
        http_stream_end(req);
    } else if (strcmp(path, "/slow") == 0) {
        CHECK(!O.slow);
        O.slow = req;
        long ms = query_num(req, "ms=", 200);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(O.slow_timer, &tv);
    } else if (strcmp(path, "/big") == 0) {
        O.big = req;
        O.big_total = (size_t)query_num(req, "total=", 256L << 20);
        O.big_sent = 0;
        http_stream_start(req, 200, "application/octet-stream");
        big_pump(req);
    } else if (strcmp(http_method(req), "OPTIONS") == 0) {
        http_add_header(req, "Allow", "GET, POST, OPTIONS");
        http_respond(req, 204, NULL, NULL, 0);
    } else {
        http_respond(req, 404, "application/json", "{\"error\":\"no route\"}", 20);
    }
}

static void on_refusal(const char *peer, const char *request_id, int status, const char *why,
                       void *arg)
{
    O.n_refusals++;
    O.last_refusal = status;
    snprintf(O.last_why, sizeof(O.last_why), "%s", why);
    snprintf(O.last_refusal_id, sizeof(O.last_refusal_id), "%s", request_id);
}

static void hook_error_body(const char *path, int status, const char *message, struct buf *out,
                            void *arg)
{
    snprintf(O.hook_path, sizeof(O.hook_path), "%s", path);
    O.hook_status = status;
    json_t *v = json_pack("{s:s,s:{s:s,s:i}}", "type", "error", "error", "message", message,
                          "status", status);
    char *t = json_dumps(v, JSON_COMPACT);
    buf_puts(out, t);
    free(t);
    json_decref(v);
}

static struct http_config test_config(void)
{
    struct http_config c;
    http_config_default(&c);
    c.host = "127.0.0.1";
    c.port = 0;
    c.max_conns = 64;
    c.max_conns_per_client = 64;
    c.max_header_bytes = 8192;
    c.max_body_bytes = 65536;
    c.header_timeout_ms = 300;
    c.body_timeout_ms = 300;
    c.idle_timeout_ms = 800;
    c.write_timeout_ms = 300;
    c.out_high_water = 65536;
    return c;
}

static void server_start(const struct http_config *c)
{
    if (!base) base = event_base_new();
    memset(&O, 0, sizeof(O));
    O.slow_timer = evtimer_new(base, slow_fire, NULL);
    hooks = (struct http_hooks){.on_request = on_request, .on_refusal = on_refusal};
    struct err_msg msg = {{0}};
    CHECK(http_server_new(base, c, &hooks, &srv, &msg) == 0);
    port = http_server_port(srv);
    CHECK(port > 0);
}

static void server_stop(void)
{
    http_server_free(srv);
    srv = NULL;
    event_free(O.slow_timer);
    pump(10);
}

/* ---------------------------------------------------------- the client */

static int client_connect_from(const char *from)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (from) {
        struct sockaddr_in b = {.sin_family = AF_INET};
        inet_pton(AF_INET, from, &b.sin_addr);
        CHECK(bind(fd, (struct sockaddr *)&b, sizeof(b)) == 0);
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static int client_connect(void)
{
    return client_connect_from(NULL);
}

static void client_send(int fd, const void *data, size_t len)
{
    const char *p = data;
    uint64_t t0 = time_now_ns();
    while (len && ms_since(t0) < 5000) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN) {
            return;
        } else {
            pump(2);
        }
    }
}

static void client_puts(int fd, const char *s)
{
    client_send(fd, s, strlen(s));
}

/* What came back on a connection: responses (1xx included) in order. */
struct msg {
    int status;
    struct buf fields; /* "name: value\n" lines */
    struct buf body;
    bool chunked;
    bool done;
};

struct reply {
    struct msg m[8];
    int n;         /* messages started */
    int n_final;   /* complete non-1xx messages */
    unsigned head; /* bit i: final message i answers a HEAD (no body) */
    bool eof;      /* the server closed */
    bool reset;    /* ECONNRESET */
    bool bad;      /* the bytes did not parse as responses */
    http_parser hp;
    int field_state; /* 0 none, 1 name, 2 value */
};

static struct msg *cur(http_parser *hp)
{
    struct reply *r = hp->data;
    return &r->m[r->n - 1];
}

static int rcb_begin(http_parser *hp)
{
    struct reply *r = hp->data;
    if (r->n == 8) return -1;
    memset(&r->m[r->n++], 0, sizeof(struct msg));
    r->field_state = 0;
    return 0;
}

static int rcb_field(http_parser *hp, const char *at, size_t len)
{
    struct reply *r = hp->data;
    if (r->field_state == 2) buf_putc(&cur(hp)->fields, '\n');
    r->field_state = 1;
    buf_append(&cur(hp)->fields, at, len);
    return 0;
}

static int rcb_value(http_parser *hp, const char *at, size_t len)
{
    struct reply *r = hp->data;
    if (r->field_state == 1) buf_puts(&cur(hp)->fields, ": ");
    r->field_state = 2;
    buf_append(&cur(hp)->fields, at, len);
    return 0;
}

static int rcb_headers(http_parser *hp)
{
    struct reply *r = hp->data;
    struct msg *m = cur(hp);
    if (r->field_state == 2) buf_putc(&m->fields, '\n');
    m->status = (int)hp->status_code;
    m->chunked = (hp->flags & F_CHUNKED) != 0;
    if (m->status >= 200 && (r->head >> r->n_final & 1u)) return 1;
    return 0;
}

static int rcb_body(http_parser *hp, const char *at, size_t len)
{
    buf_append(&cur(hp)->body, at, len);
    return 0;
}

static int rcb_done(http_parser *hp)
{
    struct reply *r = hp->data;
    struct msg *m = cur(hp);
    m->done = true;
    if (m->status >= 200) r->n_final++;
    return 0;
}

static const http_parser_settings reply_settings = {
    .on_message_begin = rcb_begin,
    .on_header_field = rcb_field,
    .on_header_value = rcb_value,
    .on_headers_complete = rcb_headers,
    .on_body = rcb_body,
    .on_message_complete = rcb_done,
};

static void reply_init(struct reply *r)
{
    memset(r, 0, sizeof(*r));
    http_parser_init(&r->hp, HTTP_RESPONSE);
    r->hp.data = r;
}

static void reply_release(struct reply *r)
{
    for (int i = 0; i < r->n; i++) {
        buf_release(&r->m[i].fields);
        buf_release(&r->m[i].body);
    }
}

/* Has r what reply_read waits for? */
static bool reply_enough(const struct reply *r, int finals)
{
    if (finals < 0) return false;
    if (finals == 0) return r->n > 0 && r->m[r->n - 1].done;
    return r->n_final >= finals;
}

/* Reads until `finals` complete final answers (0: any complete answer, 1xx
 * included; < 0: until the server closes), or ms pass. */
static void reply_read(int fd, struct reply *r, int finals, int ms)
{
    uint64_t t0 = time_now_ns();
    while (!reply_enough(r, finals) && !r->eof && !r->reset && !r->bad) {
        char b[65536];
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n > 0) {
            size_t k = http_parser_execute(&r->hp, &reply_settings, b, (size_t)n);
            if (k != (size_t)n || HTTP_PARSER_ERRNO(&r->hp) != HPE_OK) r->bad = true;
            continue;
        }
        if (n == 0) {
            r->eof = true;
            http_parser_execute(&r->hp, &reply_settings, NULL, 0);
            break;
        }
        if (errno == ECONNRESET) {
            r->reset = true;
            break;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) break;
        double left = ms - ms_since(t0);
        if (left <= 0) break;
        wait_fd(fd, (int)MIN(left, 50) + 1);
    }
}

/* The value of a field of m (case-insensitive), in out; NULL if absent. */
static const char *msg_field(const struct msg *m, const char *name, char *out, size_t cap)
{
    const char *s = buf_str(&m->fields);
    size_t n = strlen(name);
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len > n + 1 && strncasecmp(s, name, n) == 0 && s[n] == ':') {
            const char *v = s + n + 1;
            while (*v == ' ')
                v++;
            size_t vl = (size_t)(s + len - v);
            snprintf(out, cap, "%.*s", (int)vl, v);
            return out;
        }
        s = e ? e + 1 : s + len;
    }
    return NULL;
}

static bool has_field(const struct msg *m, const char *name, const char *value)
{
    char v[512];
    if (!msg_field(m, name, v, sizeof(v))) return false;
    return !value || strcasecmp(v, value) == 0;
}

/* A layer error: JSON {"error":{"message": "...", ...}}, closed, with the
 * headers every answer carries. */
static bool is_json_error(const struct msg *m)
{
    json_error_t e;
    json_t *v = json_loadb(m->body.data ? m->body.data : "", m->body.len, 0, &e);
    json_t *err = v ? json_object_get(v, "error") : NULL;
    bool ok = err && json_is_string(json_object_get(err, "message")) &&
              json_is_string(json_object_get(err, "type"));
    json_decref(v);
    return ok;
}

static bool is_hex32(const char *s)
{
    if (strlen(s) != 32) return false;
    for (int i = 0; i < 32; i++)
        if (!strchr("0123456789abcdef", s[i])) return false;
    return true;
}

/* One request on a fresh connection; the reply read until the close (or
 * ms). */
static void exchange(const char *req, struct reply *r, int ms)
{
    reply_init(r);
    int fd = client_connect();
    CHECK(fd >= 0);
    client_puts(fd, req);
    reply_read(fd, r, -1, ms);
    close(fd);
}

static bool no_conns(void)
{
    return http_server_n_conns(srv) == 0;
}

static bool one_gone(void)
{
    return O.n_gone >= 1;
}

static bool no_requests(void)
{
    return http_server_n_requests(srv) == 0;
}

static bool slow_pending(void)
{
    return O.slow != NULL;
}

static int want_conns;

static bool conns_are(void)
{
    return http_server_n_conns(srv) == want_conns;
}

/* Pumps until the server has n connections open (or ms pass). */
static bool wait_conns(int n, int ms)
{
    want_conns = n;
    return pump_until(conns_are, ms);
}

/* ------------------------------------------------------------- tests */

TEST(test_keepalive_pipelining)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    /* Two requests in one write: answered in order, one at a time. */
    client_puts(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                    "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world");
    struct reply r;
    reply_init(&r);
    reply_read(fd, &r, 2, 2000);
    EXPECT_EQ_INT(r.n_final, 2);
    EXPECT(!r.eof);
    EXPECT_EQ_INT(r.m[0].status, 200);
    EXPECT(r.m[0].body.len == 5 && memcmp(r.m[0].body.data, "hello", 5) == 0);
    EXPECT(has_field(&r.m[0], "content-length", "5"));
    EXPECT(has_field(&r.m[0], "x-owner", "yes"));
    EXPECT(has_field(&r.m[0], "date", NULL));
    EXPECT(!has_field(&r.m[0], "connection", NULL));
    char id[200];
    EXPECT(msg_field(&r.m[0], "x-request-id", id, sizeof(id)) && is_hex32(id));
    EXPECT_EQ_INT(r.m[1].status, 200);
    EXPECT(r.m[1].body.len == 11 && memcmp(r.m[1].body.data, "hello world", 11) == 0);
    reply_release(&r);
    /* The connection is still usable; a chunked body arrives whole. */
    client_puts(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "3;ext=1\r\nabc\r\n4\r\ndefg\r\n0\r\nX-Trailer: t\r\n\r\n");
    reply_init(&r);
    reply_read(fd, &r, 1, 2000);
    EXPECT_EQ_INT(r.m[0].status, 200);
    EXPECT(r.m[0].body.len == 7 && memcmp(r.m[0].body.data, "abcdefg", 7) == 0);
    reply_release(&r);
    EXPECT_EQ_INT(http_server_n_conns(srv), 1);
    EXPECT_EQ_INT(http_server_n_requests(srv), 0);
    EXPECT_EQ_INT(O.n_requests, 3);
    /* Connection: close is honoured. */
    client_puts(fd, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    reply_init(&r);
    reply_read(fd, &r, -1, 2000);
    EXPECT(r.n_final == 1 && r.eof);
    EXPECT(has_field(&r.m[0], "connection", "close"));
    reply_release(&r);
    close(fd);
    EXPECT(pump_until(no_conns, 2000));
    server_stop();
}

TEST(test_http10)
{
    struct http_config c = test_config();
    server_start(&c);
    struct reply r;
    /* No keep-alive unless asked. */
    exchange("GET /hello HTTP/1.0\r\n\r\n", &r, 2000);
    EXPECT(r.n_final == 1 && r.eof);
    EXPECT_EQ_INT(r.m[0].status, 200);
    EXPECT(has_field(&r.m[0], "connection", "close"));
    reply_release(&r);
    /* Asked: kept, and said so. */
    int fd = client_connect();
    client_puts(fd, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    reply_init(&r);
    reply_read(fd, &r, 1, 2000);
    EXPECT(r.n_final == 1 && !r.eof);
    EXPECT(has_field(&r.m[0], "connection", "keep-alive"));
    reply_release(&r);
    /* A streamed answer is close-delimited: no chunked coding on 1.0. */
    client_puts(fd, "GET /stream?n=3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    reply_init(&r);
    reply_read(fd, &r, -1, 2000);
    EXPECT(r.n_final == 1 && r.eof);
    EXPECT(!r.m[0].chunked && !has_field(&r.m[0], "transfer-encoding", NULL));
    EXPECT(has_field(&r.m[0], "connection", "close"));
    EXPECT(r.m[0].body.len == 24 &&
           memcmp(r.m[0].body.data, "chunk 0\nchunk 1\nchunk 2\n", 24) == 0);
    reply_release(&r);
    close(fd);
    server_stop();
}

TEST(test_stream_chunked)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    client_puts(
        fd, "GET /stream?n=5 HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    struct reply r;
    reply_init(&r);
    reply_read(fd, &r, 2, 2000);
    EXPECT_EQ_INT(r.n_final, 2);
    EXPECT(r.m[0].chunked && !has_field(&r.m[0], "content-length", NULL));
    EXPECT(r.m[0].body.len == 40 && memcmp(r.m[0].body.data + 32, "chunk 4\n", 8) == 0);
    EXPECT(has_field(&r.m[0], "x-request-id", NULL) && has_field(&r.m[0], "date", NULL));
    EXPECT(r.m[1].body.len == 5);
    EXPECT(!r.eof);
    reply_release(&r);
    close(fd);
    server_stop();
}

/* A request the layer must refuse: status, a JSON error body, the headers
 * every answer has, Connection: close, the close - and nothing handed
 * over, whatever followed the bad part. */
static void expect_refused(const char *req, int status, const char *why_part)
{
    int n0 = O.n_requests, r0 = O.n_refusals;
    struct reply r;
    exchange(req, &r, 3000);
    bool ok = r.n_final == 1 && r.m[0].status == status && r.eof && is_json_error(&r.m[0]) &&
              has_field(&r.m[0], "connection", "close") &&
              has_field(&r.m[0], "x-request-id", NULL) && has_field(&r.m[0], "date", NULL) &&
              has_field(&r.m[0], "content-length", NULL) && O.n_requests == n0 &&
              O.n_refusals == r0 + 1 && O.last_refusal == status &&
              (!why_part || strstr(O.last_why, why_part));
    if (!ok) {
        fprintf(stderr,
                "  request %.60s...: %d answers, status %d (want %d), eof %d, json %d, "
                "handed over %d, refusal %d '%s'\n",
                req, r.n_final, r.n ? r.m[0].status : 0, status, r.eof,
                r.n ? is_json_error(&r.m[0]) : 0, O.n_requests - n0, O.last_refusal, O.last_why);
        test_failures_in_case++;
    }
    reply_release(&r);
}

TEST(test_smuggling_and_malformed)
{
    struct http_config c = test_config();
    server_start(&c);
    /* Each would make a second request of the tail on a lenient parser. */
    const char *tail = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    char req[1024];
    snprintf(
        req, sizeof(req),
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc%s",
        tail);
    expect_refused(req, 400, "content-length");
    snprintf(
        req, sizeof(req),
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 40\r\n\r\nabc%s",
        tail);
    expect_refused(req, 400, "content-length");
    snprintf(req, sizeof(req),
             "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: "
             "chunked\r\n\r\n0\r\n\r\n%s",
             tail);
    expect_refused(req, 400, "transfer-encoding");
    snprintf(req, sizeof(req),
             "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: "
             "5\r\n\r\n0\r\n\r\n%s",
             tail);
    expect_refused(req, 400, "transfer-encoding");
    expect_refused(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400,
        "chunked");
    expect_refused(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400,
        "chunked");
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n", 400,
                   "chunked");
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                   400, "transfer-encoding");
    expect_refused("POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
                   "http/1.0");
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
                   400, "field name");
    /* Chunked framing. */
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                   400, "chunk size");
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
                   400, "chunk size");
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "2;\nxx\r\n0\r\n\r\n",
                   400, "chunk extension");
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "3\r\nabcdef\r\n0\r\n\r\n",
                   400, "chunk data");
    expect_refused(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n", 400,
        "chunk size");
    /* Line discipline. */
    expect_refused("GET /hello HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\n\r\n", 400, "folding");
    expect_refused("GET /hello HTTP/1.1\r\n Host: x\r\n\r\n", 400, "folding");
    expect_refused("GET /hello HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n", 400, "bare cr");
    expect_refused("GET /hello HTTP/1.1\nHost: x\n\n", 400, "bare lf");
    expect_refused("GET /hello HTTP/1.1\r\nHost: x\r\nX-A:\x01z\r\n\r\n", 400, "control");
    expect_refused("GET /hello HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400, "field name");
    /* Request lines, versions, targets, Host. */
    expect_refused("GET  /hello HTTP/1.1\r\nHost: x\r\n\r\n", 400, "request line");
    expect_refused("GET /hello HXXP/1.1\r\nHost: x\r\n\r\n", 400, "request line");
    expect_refused("BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n", 400, "method");
    expect_refused("NONSENSE\r\n\r\n", 400, NULL);
    expect_refused("GET /hello\r\n\r\n", 400, "0.9");
    expect_refused("GET /hello HTTP/2.0\r\nHost: x\r\n\r\n", 505, "version");
    expect_refused("GET /hello HTTP/1.2\r\nHost: x\r\n\r\n", 505, "version");
    expect_refused("GET http://example.com/hello HTTP/1.1\r\nHost: x\r\n\r\n", 400, "origin-form");
    expect_refused("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "origin");
    expect_refused("GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400, "OPTIONS");
    expect_refused("GET /a#b HTTP/1.1\r\nHost: x\r\n\r\n", 400, "fragment");
    expect_refused("GET /hello HTTP/1.1\r\n\r\n", 400, "host");
    expect_refused("GET /hello HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "host");
    EXPECT_EQ_INT(O.n_requests, 0);
    /* HTTP/1.0 needs no Host; OPTIONS * reaches the owner. */
    struct reply r;
    exchange("GET /hello HTTP/1.0\r\n\r\n", &r, 2000);
    EXPECT_EQ_INT(r.m[0].status, 200);
    reply_release(&r);
    exchange("OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r, 2000);
    EXPECT_EQ_INT(r.m[0].status, 204);
    EXPECT(has_field(&r.m[0], "allow", NULL) && !has_field(&r.m[0], "content-length", NULL));
    EXPECT_EQ_INT(O.n_requests, 2);
    EXPECT(strcmp(O.last_method, "OPTIONS") == 0 && strcmp(O.last_path, "*") == 0);
    reply_release(&r);
    /* Any method the parser knows goes to the owner (who routes). */
    exchange("PUT /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
             &r, 2000);
    EXPECT_EQ_INT(r.m[0].status, 404);
    reply_release(&r);
    server_stop();
}

TEST(test_limits)
{
    struct http_config c = test_config();
    server_start(&c);
    char *big = malloc(20000);
    int n = snprintf(big, 20000, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(big + n, 'a', 10000);
    strcpy(big + n + 10000, "\r\n\r\n");
    expect_refused(big, 431, "head");
    struct buf many = {0};
    buf_puts(&many, "GET /hello HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 300; i++)
        buf_puts(&many, "a:\r\n");
    buf_puts(&many, "\r\n");
    expect_refused(buf_str(&many), 431, "fields");
    buf_release(&many);
    /* An announced body over the limit is refused before any of it: the
     * head alone gets the answer. */
    expect_refused("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n", 413, "body");
    /* A chunked one as soon as it passes the limit. */
    struct buf ch = {0};
    buf_puts(&ch, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 3; i++) {
        buf_puts(&ch, "8000\r\n");
        for (int k = 0; k < 0x8000; k++)
            buf_putc(&ch, 'c');
        buf_puts(&ch, "\r\n");
    }
    buf_puts(&ch, "0\r\n\r\n");
    expect_refused(buf_str(&ch), 413, "chunked");
    buf_release(&ch);
    /* At the limits themselves: accepted. */
    struct buf ok = {0};
    buf_puts(
        &ok,
        "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 65536\r\n\r\n");
    for (int k = 0; k < 65536; k++)
        buf_putc(&ok, 'd');
    struct reply r;
    exchange(buf_str(&ok), &r, 3000);
    EXPECT(r.n_final == 1 && r.m[0].status == 200 && r.m[0].body.len == 65536);
    reply_release(&r);
    buf_release(&ok);
    free(big);
    server_stop();
}

TEST(test_expect_continue)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    client_puts(
        fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
    struct reply r;
    reply_init(&r);
    reply_read(fd, &r, 0, 1000); /* the interim answer, before any body byte */
    EXPECT(r.n == 1 && r.m[0].done && r.m[0].status == 100);
    client_puts(fd, "body");
    reply_read(fd, &r, 1, 2000);
    EXPECT(r.n_final == 1 && r.m[1].status == 200 && r.m[1].body.len == 4);
    reply_release(&r);
    close(fd);
    /* Too large: the 413 at once, no 100. */
    reply_init(&r);
    fd = client_connect();
    client_puts(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: "
                    "1000000\r\n\r\n");
    reply_read(fd, &r, -1, 2000);
    EXPECT(r.n == 1 && r.n_final == 1 && r.m[0].status == 413 && r.eof && is_json_error(&r.m[0]));
    reply_release(&r);
    close(fd);
    expect_refused(
        "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: the-moon\r\nContent-Length: 4\r\n\r\nbody", 417,
        "expect");
    server_stop();
}

TEST(test_slowloris)
{
    struct http_config c = test_config();
    server_start(&c);
    const char *req = "GET /hello HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    int slow = client_connect();
    uint64_t t0 = time_now_ns();
    struct reply r, other;
    reply_init(&r);
    double served_ms = -1;
    /* One byte every 40 ms, forever: a deadline, not an idle timer, ends it. */
    for (size_t i = 0; ms_since(t0) < 3000 && !r.eof && !r.n; i++) {
        char b = i < strlen(req) ? req[i] : 'z';
        send(slow, &b, 1, MSG_NOSIGNAL);
        if (i == 3) {
            /* Another client is served meanwhile. */
            exchange("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &other, 1000);
            EXPECT(other.n_final == 1 && other.m[0].status == 200);
            served_ms = ms_since(t0);
            reply_release(&other);
        }
        wait_fd(slow, 40);
        reply_read(slow, &r, 0, 1);
    }
    reply_read(slow, &r, -1, 1000);
    double ms = ms_since(t0);
    EXPECT(r.n_final == 1 && r.m[0].status == 408 && r.eof && is_json_error(&r.m[0]));
    EXPECT(ms > 250 && ms < 1500);
    EXPECT(served_ms >= 0 && served_ms < ms); /* while the slow client was still on */
    EXPECT_EQ_INT(O.last_refusal, 408);
    reply_release(&r);
    close(slow);
    /* Saying nothing at all: closed at the same deadline, without a word. */
    int mute = client_connect();
    t0 = time_now_ns();
    reply_init(&r);
    reply_read(mute, &r, -1, 2000);
    ms = ms_since(t0);
    EXPECT(r.eof && r.n == 0 && ms > 250 && ms < 1500);
    reply_release(&r);
    close(mute);
    server_stop();
}

TEST(test_body_deadline_and_idle)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    client_puts(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
    uint64_t t0 = time_now_ns();
    struct reply r;
    reply_init(&r);
    while (ms_since(t0) < 3000 && !r.eof && !r.n) {
        send(fd, "b", 1, MSG_NOSIGNAL);
        wait_fd(fd, 40);
        reply_read(fd, &r, 0, 1);
    }
    reply_read(fd, &r, -1, 1000);
    double ms = ms_since(t0);
    EXPECT(r.n_final == 1 && r.m[0].status == 408 && r.eof && is_json_error(&r.m[0]));
    EXPECT(strstr(O.last_why, "body") != NULL);
    EXPECT(ms > 250 && ms < 1500);
    reply_release(&r);
    close(fd);
    /* Keep-alive idle: closed after idle_timeout_ms, silently. */
    fd = client_connect();
    client_puts(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    reply_init(&r);
    reply_read(fd, &r, 1, 1000);
    t0 = time_now_ns();
    reply_read(fd, &r, -1, 3000);
    ms = ms_since(t0);
    EXPECT(r.n_final == 1 && r.n == 1 && r.eof);
    EXPECT(ms > 700 && ms < 2500);
    reply_release(&r);
    close(fd);
    server_stop();
}

TEST(test_connection_caps)
{
    struct http_config c = test_config();
    c.max_conns = 3;
    c.idle_timeout_ms = 5000;
    server_start(&c);
    int fds[3];
    struct reply r;
    for (int i = 0; i < 3; i++) {
        fds[i] = client_connect();
        client_puts(fds[i], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        reply_init(&r);
        reply_read(fds[i], &r, 1, 1000);
        EXPECT_EQ_INT(r.m[0].status, 200);
        reply_release(&r);
    }
    EXPECT_EQ_INT(http_server_n_conns(srv), 3);
    /* The fourth: accepted, answered 503 at once, closed. */
    exchange("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n", &r, 2000);
    EXPECT(r.n_final == 1 && r.m[0].status == 503 && r.eof && is_json_error(&r.m[0]));
    EXPECT(has_field(&r.m[0], "connection", "close") && has_field(&r.m[0], "retry-after", "1"));
    EXPECT(has_field(&r.m[0], "x-request-id", NULL));
    EXPECT(O.last_refusal == 503 && strstr(O.last_why, "limit"));
    reply_release(&r);
    EXPECT_EQ_INT(O.n_requests, 3);
    /* Room again once one closes. */
    close(fds[0]);
    EXPECT(wait_conns(2, 2000));
    exchange("GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r, 2000);
    EXPECT(r.n_final == 1 && r.m[0].status == 200);
    reply_release(&r);
    close(fds[1]);
    close(fds[2]);
    server_stop();
}

TEST(test_per_client_cap)
{
    struct http_config c = test_config();
    c.max_conns = 10;
    c.max_conns_per_client = 2;
    c.idle_timeout_ms = 5000;
    server_start(&c);
    int a = client_connect(), b = client_connect();
    EXPECT(wait_conns(2, 1000));
    struct reply r;
    reply_init(&r);
    int third = client_connect();
    reply_read(third, &r, -1, 2000);
    EXPECT(r.n_final == 1 && r.m[0].status == 429 && r.eof && is_json_error(&r.m[0]));
    EXPECT(has_field(&r.m[0], "connection", "close") && has_field(&r.m[0], "retry-after", "1"));
    EXPECT(O.last_refusal == 429 && strstr(O.last_why, "127.0.0.1"));
    reply_release(&r);
    close(third);
    /* Another address is another client (all of 127/8 is loopback). */
    int other = client_connect_from("127.0.0.2");
    client_puts(other, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    reply_init(&r);
    reply_read(other, &r, -1, 2000);
    EXPECT(r.n_final == 1 && r.m[0].status == 200);
    reply_release(&r);
    close(other);
    /* And the first client has room again once one of its own closes. */
    close(a);
    EXPECT(wait_conns(1, 2000));
    int again = client_connect();
    client_puts(again, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    reply_init(&r);
    reply_read(again, &r, -1, 2000);
    EXPECT(r.n_final == 1 && r.m[0].status == 200);
    reply_release(&r);
    close(again);
    close(b);
    server_stop();
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
           (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6;
}

/* The descriptor limit that leaves exactly n numbers free (the open ones
 * may have holes below them, and a shell may hold a high one). */
static rlim_t limit_leaving(int n)
{
    static bool used[65536];
    memset(used, 0, sizeof(used));
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd >= 0 && fd < 65536) used[fd] = true;
    }
    if (d) closedir(d);
    int fd = 0;
    for (int free_seen = 0; fd < 65536; fd++)
        if (!used[fd] && ++free_seen == n) break;
    return (rlim_t)fd + 1;
}

static int count_lines_with(FILE *f, const char *needle)
{
    fflush(f);
    rewind(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        if (strstr(line, needle)) n++;
    return n;
}

static FILE *episode_log;

static bool episode_ended(void)
{
    fflush(stderr);
    bool ended = count_lines_with(episode_log, "accepting connections again") > 0;
    fseek(episode_log, 0, SEEK_END);
    return ended;
}

TEST(test_accept_backoff_emfile)
{
    struct http_config c = test_config();
    c.idle_timeout_ms = 10000;
    c.header_timeout_ms = 10000;
    server_start(&c);
    /* Two clients served before the descriptors run out. */
    int first[2];
    struct reply r;
    for (int i = 0; i < 2; i++) {
        first[i] = client_connect();
        client_puts(first[i], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
        reply_init(&r);
        reply_read(first[i], &r, 1, 1000);
        EXPECT_EQ_INT(r.m[0].status, 200);
        reply_release(&r);
    }
    /* The server's log lines go to a file for the episode. */
    FILE *log = tmpfile();
    fcntl(fileno(log), F_SETFL, O_APPEND); /* reading it must not move the writes */
    int saved_err = dup(2);
    fflush(stderr);
    dup2(fileno(log), 2);
    struct rlimit old;
    getrlimit(RLIMIT_NOFILE, &old);
    struct rlimit low = {limit_leaving(8), old.rlim_max};
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    /* Connect (the kernel completes it from the backlog) until socket()
     * itself fails: nothing is left for accept(). */
    int pend[16], n_pend = 0;
    while (n_pend < 16) {
        int fd = client_connect();
        if (fd < 0) break;
        pend[n_pend++] = fd;
    }
    EXPECT(n_pend >= 3);
    double cpu0 = cpu_s();
    pump(1000);
    double cpu = cpu_s() - cpu0;
    /* Paused, not spinning on accept(): a spinning loop burns ~1 s here. */
    EXPECT(cpu < 0.25);
    EXPECT_EQ_INT(http_server_n_conns(srv), 2);
    /* Still serving the connections it has. */
    client_puts(first[0], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    reply_init(&r);
    reply_read(first[0], &r, 1, 1000);
    EXPECT(r.n_final == 1 && r.m[0].status == 200);
    reply_release(&r);
    /* Descriptors free again (the newest pending clients give up): the
     * oldest pending ones are accepted within a retry and served. */
    for (int i = n_pend - 3; i < n_pend; i++)
        close(pend[i]);
    n_pend -= 3;
    client_puts(pend[0], "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    reply_init(&r);
    reply_read(pend[0], &r, 1, 3000);
    EXPECT(r.n_final == 1 && r.m[0].status == 200);
    reply_release(&r);
    for (int i = 0; i < n_pend; i++)
        close(pend[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    /* The backlog drains at the next retry (at most 1 s): the episode ends. */
    episode_log = log;
    pump_until(episode_ended, 2500);
    fflush(stderr);
    dup2(saved_err, 2);
    close(saved_err);
    /* One line when the episode starts, one when it ends: not one per try. */
    int paused = count_lines_with(log, "pausing accepts");
    int resumed = count_lines_with(log, "accepting connections again");
    EXPECT_EQ_INT(paused, 1);
    EXPECT_EQ_INT(resumed, 1);
    if (paused != 1 || resumed != 1) {
        rewind(log);
        char line[1024];
        while (fgets(line, sizeof(line), log))
            fprintf(stderr, "  log: %s", line);
    }
    fclose(log);
    close(first[0]);
    close(first[1]);
    server_stop();
}

TEST(test_half_close_gets_answer)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    client_puts(fd, "GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT(pump_until(slow_pending, 1000));
    shutdown(fd, SHUT_WR);
    struct reply r;
    reply_init(&r);
    reply_read(fd, &r, -1, 3000);
    /* An interim 100 (the gone-check), then the whole answer, then the
     * close; the owner never heard on_gone. */
    EXPECT(r.eof && r.n_final == 1);
    EXPECT(r.n == 2 && r.m[0].status == 100);
    EXPECT(r.m[r.n - 1].status == 200 && r.m[r.n - 1].body.len == 9);
    EXPECT_EQ_INT(O.n_gone, 0);
    EXPECT(O.slow_answered);
    reply_release(&r);
    close(fd);
    EXPECT(wait_conns(0, 1000));
    server_stop();
}

TEST(test_full_close_fires_on_gone)
{
    struct http_config c = test_config();
    server_start(&c);
    /* close(): a FIN like a half-close, but the interim 100 meets a RST. */
    int fd = client_connect();
    client_puts(fd, "GET /slow?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT(pump_until(slow_pending, 1000));
    uint64_t t0 = time_now_ns();
    close(fd);
    EXPECT(pump_until(one_gone, 1200));
    EXPECT(O.n_gone == 1 && !O.slow_answered);
    EXPECT((double)(O.gone_ns - t0) * 1e-6 < 1000);
    EXPECT_EQ_INT(http_server_n_conns(srv), 0);
    EXPECT_EQ_INT(http_server_n_requests(srv), 1);
    /* The owner still finishes it: nothing is written, it is freed. */
    EXPECT(pump_until(no_requests, 3000));
    EXPECT(O.slow_answered);
    /* A reset (SO_LINGER 0) is gone at once. */
    O.n_gone = 0;
    O.slow_answered = false;
    fd = client_connect();
    client_puts(fd, "GET /slow?ms=1500 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT(pump_until(slow_pending, 1000));
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    EXPECT(pump_until(one_gone, 1000));
    EXPECT(!O.slow_answered);
    EXPECT(pump_until(no_requests, 3000));
    server_stop();
}

TEST(test_slow_reader_blocks_and_times_out)
{
    struct http_config c = test_config();
    server_start(&c);
    /* A client that reads everything: on_drain keeps the stream going. */
    int fd = client_connect();
    client_puts(fd, "GET /big?total=3000000 HTTP/1.1\r\nHost: x\r\n\r\n");
    struct reply r;
    reply_init(&r);
    reply_read(fd, &r, 1, 5000);
    EXPECT(r.n_final == 1 && r.m[0].body.len == 3000000);
    EXPECT(O.n_drain > 0 && O.n_gone == 0);
    reply_release(&r);
    close(fd);
    /* One that never reads: the stream blocks (the owner stops writing),
     * and output stuck for write_timeout_ms means it is gone. */
    O.n_drain = 0;
    O.saw_blocked = false;
    int lazy = socket(AF_INET, SOCK_STREAM, 0);
    int small = 4096;
    setsockopt(lazy, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(connect(lazy, (struct sockaddr *)&a, sizeof(a)) == 0);
    client_puts(lazy, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT(pump_until(one_gone, 5000));
    EXPECT(O.saw_blocked);
    /* Bounded: what the owner wrote is the kernel's buffers plus about
     * the high-water mark, not the 256 MiB it would have sent. */
    EXPECT(O.big_sent < (16u << 20));
    EXPECT(wait_conns(0, 1000));
    close(lazy);
    server_stop();
}

TEST(test_head)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    /* The GET after it parses only if the HEAD answer has no body. */
    client_puts(fd,
                "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
                "HEAD /stream?n=4 HTTP/1.1\r\nHost: x\r\n\r\nGET /id HTTP/1.1\r\nHost: x\r\n\r\n");
    struct reply r;
    reply_init(&r);
    r.head = 1u | 4u;
    reply_read(fd, &r, 4, 2000);
    EXPECT_EQ_INT(r.n_final, 4);
    EXPECT(r.m[0].status == 200 && has_field(&r.m[0], "content-length", "5") &&
           r.m[0].body.len == 0);
    EXPECT(r.m[1].status == 200 && r.m[1].body.len == 5);
    EXPECT(r.m[2].status == 200 && r.m[2].body.len == 0);
    EXPECT(r.m[3].status == 200 && r.m[3].body.len == 32);
    EXPECT(!r.bad && !r.eof);
    reply_release(&r);
    /* Nothing stray after the HEAD answers. */
    char b;
    EXPECT(recv(fd, &b, 1, MSG_DONTWAIT) < 0 && errno == EAGAIN);
    close(fd);
    server_stop();
}

TEST(test_request_id)
{
    struct http_config c = test_config();
    server_start(&c);
    struct reply r;
    char id[200];
    exchange(
        "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: my-id_123.abc\r\nConnection: close\r\n\r\n",
        &r, 2000);
    EXPECT(msg_field(&r.m[0], "x-request-id", id, sizeof(id)) && strcmp(id, "my-id_123.abc") == 0);
    EXPECT(r.m[0].body.len == 13 && memcmp(r.m[0].body.data, "my-id_123.abc", 13) == 0);
    reply_release(&r);
    /* Not 1..128 visible bytes: a fresh one. */
    exchange("GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: has space\r\nConnection: close\r\n\r\n",
             &r, 2000);
    EXPECT(msg_field(&r.m[0], "x-request-id", id, sizeof(id)) && is_hex32(id));
    EXPECT(strcmp(O.last_id, id) == 0);
    reply_release(&r);
    char req[512], longid[140];
    memset(longid, 'q', 129);
    longid[129] = '\0';
    snprintf(req, sizeof(req),
             "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n",
             longid);
    exchange(req, &r, 2000);
    EXPECT(msg_field(&r.m[0], "x-request-id", id, sizeof(id)) && is_hex32(id));
    reply_release(&r);
    longid[128] = '\0';
    snprintf(req, sizeof(req),
             "GET /id HTTP/1.1\r\nHost: x\r\nX-Request-Id: %s\r\nConnection: close\r\n\r\n",
             longid);
    exchange(req, &r, 2000);
    EXPECT(msg_field(&r.m[0], "x-request-id", id, sizeof(id)) && strcmp(id, longid) == 0);
    reply_release(&r);
    /* Two requests get two ids. */
    char first[200];
    exchange("GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r, 2000);
    msg_field(&r.m[0], "x-request-id", first, sizeof(first));
    reply_release(&r);
    exchange("GET /id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r, 2000);
    EXPECT(msg_field(&r.m[0], "x-request-id", id, sizeof(id)) && is_hex32(id) &&
           strcmp(id, first) != 0);
    reply_release(&r);
    /* A refusal after a complete head echoes the client's id, to the log too. */
    exchange("POST /echo HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-one\r\nContent-Length: "
             "99999999\r\n\r\n",
             &r, 2000);
    EXPECT(r.m[0].status == 413 && msg_field(&r.m[0], "x-request-id", id, sizeof(id)) &&
           strcmp(id, "big-one") == 0);
    EXPECT(strcmp(O.last_refusal_id, "big-one") == 0);
    reply_release(&r);
    /* Repeated fields reach the owner joined. */
    exchange("GET /header HTTP/1.1\r\nHost: x\r\nX-Probe: a\r\nx-probe:  b  \r\nConnection: "
             "close\r\n\r\n",
             &r, 2000);
    EXPECT(r.m[0].body.len == 4 && memcmp(r.m[0].body.data, "a, b", 4) == 0);
    reply_release(&r);
    server_stop();
}

TEST(test_drain)
{
    struct http_config c = test_config();
    c.idle_timeout_ms = 5000;
    server_start(&c);
    struct reply r;
    int idle = client_connect();
    client_puts(idle, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    reply_init(&r);
    reply_read(idle, &r, 1, 1000);
    EXPECT_EQ_INT(r.m[0].status, 200);
    reply_release(&r);
    int busy = client_connect();
    client_puts(busy, "GET /slow?ms=300 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT(pump_until(slow_pending, 1000));
    http_server_drain(srv);
    /* The idle one closes now. */
    reply_init(&r);
    uint64_t t0 = time_now_ns();
    reply_read(idle, &r, -1, 2000);
    EXPECT(r.eof && r.n == 0 && ms_since(t0) < 250);
    reply_release(&r);
    close(idle);
    /* New connections are refused by the kernel: nothing listens. */
    EXPECT(client_connect() < 0);
    /* The busy one gets its answer, marked as the last, then the close. */
    reply_init(&r);
    reply_read(busy, &r, -1, 2000);
    EXPECT(r.eof && r.n_final == 1 && r.m[0].status == 200);
    EXPECT(has_field(&r.m[0], "connection", "close"));
    reply_release(&r);
    close(busy);
    EXPECT(wait_conns(0, 2000));
    server_stop();
}

TEST(test_free_runs_on_gone)
{
    struct http_config c = test_config();
    server_start(&c);
    int fd = client_connect();
    client_puts(fd, "GET /slow?ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT(pump_until(slow_pending, 1000));
    struct http_request *pending = O.slow;
    EXPECT_EQ_INT(http_server_n_requests(srv), 1);
    http_server_free(srv);
    srv = NULL;
    EXPECT_EQ_INT(O.n_gone, 1);
    (void)pending; /* freed with the server: not to be used */
    O.slow = NULL;
    evtimer_del(O.slow_timer);
    struct reply r;
    reply_init(&r);
    reply_read(fd, &r, -1, 1000);
    EXPECT(r.eof || r.reset);
    reply_release(&r);
    close(fd);
    event_free(O.slow_timer);
}

TEST(test_error_hook)
{
    struct http_config c = test_config();
    server_start(&c);
    hooks.error_body = hook_error_body;
    struct reply r;
    exchange("POST /v1/messages?beta=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 9999999\r\n\r\n", &r,
             2000);
    EXPECT(r.m[0].status == 413 && strcmp(O.hook_path, "/v1/messages") == 0 &&
           O.hook_status == 413);
    json_error_t e;
    json_t *v = json_loadb(r.m[0].body.data, r.m[0].body.len, 0, &e);
    EXPECT(v && json_is_string(json_object_get(v, "type")));
    json_decref(v);
    reply_release(&r);
    /* Before a target is known the path is "". */
    exchange("\x16\x03\x01 hello\r\n\r\n", &r, 2000);
    EXPECT(r.m[0].status == 400 && O.hook_path[0] == '\0');
    reply_release(&r);
    hooks.error_body = NULL;
    server_stop();
}

TEST(test_config_errors)
{
    if (!base) base = event_base_new();
    struct http_config c = test_config();
    struct http_hooks h = {.on_request = on_request};
    struct http_server *s;
    struct err_msg msg = {{0}};
    c.max_conns = 0;
    EXPECT(http_server_new(base, &c, &h, &s, &msg) != 0 && msg.text[0]);
    c = test_config();
    server_start(&c);
    c.port = port; /* taken */
    msg.text[0] = '\0';
    EXPECT_EQ_INT(http_server_new(base, &c, &h, &s, &msg), -EADDRINUSE);
    EXPECT(strstr(msg.text, "cannot listen") != NULL);
    server_stop();
}
