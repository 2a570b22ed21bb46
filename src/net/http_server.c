/*
 * http_server.c - the listening side of the HTTP/1.1 connection layer:
 * binding, the connection caps, the accept back-off, drain and free, and
 * the small helpers every answer uses (request ids, the Date header, reason
 * phrases, the default error body). Contract in net/http.h; connections in
 * http_conn.c.
 *
 * Caps. Every accepted socket gets TCP_NODELAY (a stream writes one small
 * chunk per token; Nagle plus the client's delayed ACK would hold tokens up
 * to 40 ms) and is counted: beyond max_conns open connections it is
 * answered 503, beyond max_conns_per_client from its address 429, each with
 * a JSON body, Retry-After: 1 and Connection: close, and closed - through
 * the same connection code as any refusal (one write into an empty socket
 * buffer, then the lingering close), never blocking the loop. Refused
 * connections do not count against the caps, but at most max_conns of them
 * may be closing at once; past that a socket is closed unanswered. Per-client
 * counts live in a chained hash table keyed by the address (IPv4 or IPv6
 * bytes; port ignored), entries freed when their count drops to zero.
 *
 * Accept back-off. When accept() fails for want of descriptors or memory
 * (EMFILE, ENFILE, ENOBUFS, ENOMEM) the pending connection stays in the
 * kernel's backlog and the listening socket stays readable: retrying at once
 * would spin the loop at 100 % CPU. So the listener is disabled and retried
 * on a timer, 100 ms doubling to 1 s, with one log line when an episode
 * starts and one when it ends - never one per attempt. It ends when a round
 * of accepts drains the backlog without failing again (a round that accepts
 * a few and fails again is the same episode).
 * Existing connections are served all the while (they need no new
 * descriptors). Other accept errors are treated the same way.
 *
 * Thread: the loop thread only. Memory: the server object and the peer
 * table (process lifetime of the server); connections and requests as in
 * http_conn.c.
 */
#include "net/http_impl.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void http_config_default(struct http_config *c)
{
    *c = (struct http_config){
        .host = "127.0.0.1",
        .port = 8080,
        .max_conns = 4096,
        .max_conns_per_client = 64,
        .max_header_bytes = 64 * 1024,
        .max_body_bytes = 8 * 1024 * 1024,
        .header_timeout_ms = 10 * 1000,
        .body_timeout_ms = 60 * 1000,
        .idle_timeout_ms = 120 * 1000,
        .write_timeout_ms = 30 * 1000,
        .out_high_water = 256 * 1024,
    };
}

const char *http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 206:
        return "Partial Content";
    case 301:
        return "Moved Permanently";
    case 302:
        return "Found";
    case 304:
        return "Not Modified";
    case 307:
        return "Temporary Redirect";
    case 308:
        return "Permanent Redirect";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 406:
        return "Not Acceptable";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 410:
        return "Gone";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 416:
        return "Range Not Satisfiable";
    case 417:
        return "Expectation Failed";
    case 421:
        return "Misdirected Request";
    case 422:
        return "Unprocessable Content";
    case 426:
        return "Upgrade Required";
    case 428:
        return "Precondition Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    case 507:
        return "Insufficient Storage";
    default:
        return "";
    }
}

/* --------------------------------------------------------------- helpers */

void http__request_id(const char *client, char *out)
{
    if (client) {
        size_t n = strlen(client);
        bool ok = n >= 1 && n <= HTTP_REQUEST_ID_MAX;
        for (size_t i = 0; i < n && ok; i++)
            ok = client[i] > 0x20 && client[i] < 0x7f;
        if (ok) {
            memcpy(out, client, n + 1);
            return;
        }
    }
    uint8_t r[16];
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        /* Early boot without entropy: unique, if not unpredictable. */
        static uint64_t counter;
        uint64_t x = time_now_ns() ^ ((uint64_t)getpid() << 32) ^ ++counter;
        for (int i = 0; i < 16; i++) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
            r[i] = (uint8_t)((z ^ (z >> 27)) >> 56);
        }
    }
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[32] = '\0';
}

const char *http__date(struct http_server *s)
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    if ((long)now != s->date_sec || !s->date_text[0]) {
        struct tm tm;
        gmtime_r(&now, &tm);
        /* By hand: strftime's names follow the locale. */
        snprintf(s->date_text, sizeof(s->date_text), "%s, %02d %s %04d %02d:%02d:%02d GMT",
                 days[tm.tm_wday % 7], tm.tm_mday, months[tm.tm_mon % 12], tm.tm_year + 1900,
                 tm.tm_hour, tm.tm_min, tm.tm_sec);
        s->date_sec = (long)now;
    }
    return s->date_text;
}

void http__error_body(struct http_server *s, const char *path, int status, const char *why,
                      struct buf *out)
{
    if (s->hooks->error_body) {
        s->hooks->error_body(path, status, why, out, s->hooks->arg);
        return;
    }
    json_t *v =
        json_pack("{s:{s:s,s:s}}", "error", "message", why, "type", "invalid_request_error");
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    if (text)
        buf_puts(out, text);
    else
        buf_puts(
            out,
            "{\"error\":{\"message\":\"request refused\",\"type\":\"invalid_request_error\"}}");
    free(text);
    json_decref(v);
}

/* ------------------------------------------------------ per-client counts */

static void peer_key(const struct sockaddr *sa, uint8_t addr[16], uint8_t *family)
{
    memset(addr, 0, 16);
    *family = (uint8_t)sa->sa_family;
    if (sa->sa_family == AF_INET)
        memcpy(addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    else if (sa->sa_family == AF_INET6)
        memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

static uint32_t peer_hash(const uint8_t addr[16], uint8_t family)
{
    /* FNV-1a: the table is small and the key fixed-size. */
    uint32_t h = 2166136261u ^ family;
    for (int i = 0; i < 16; i++)
        h = (h ^ addr[i]) * 16777619u;
    return h;
}

static struct http__peer *peer_find(struct http_server *s, const uint8_t addr[16], uint8_t family,
                                    bool add)
{
    struct http__peer **slot = &s->peers[peer_hash(addr, family) & s->peer_mask];
    for (struct http__peer *e = *slot; e; e = e->next)
        if (e->family == family && memcmp(e->addr, addr, 16) == 0) return e;
    if (!add) return NULL;
    struct http__peer *e = xcalloc(1, sizeof(*e));
    memcpy(e->addr, addr, 16);
    e->family = family;
    e->next = *slot;
    *slot = e;
    return e;
}

void http__server_forget(struct http_server *s, struct http__peer *counted, bool refused)
{
    if (refused) {
        s->n_refusing--;
        return;
    }
    s->n_admitted--;
    if (counted && --counted->n_conns == 0) {
        struct http__peer **slot =
            &s->peers[peer_hash(counted->addr, counted->family) & s->peer_mask];
        while (*slot != counted)
            slot = &(*slot)->next;
        *slot = counted->next;
        free(counted);
    }
}

/* -------------------------------------------------------------- accepting */

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
                      int socklen, void *arg)
{
    struct http_server *s = arg;
    if (s->accept_paused_ns) {
        /* The episode ends if this round of accepts ends without another
         * failure (checked once the listener's callback returns). */
        s->accept_failed_again = false;
        event_active(s->accept_settle, 0, 0);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char peer[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, peer, sizeof(peer));
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, peer, sizeof(peer));
    uint8_t addr[16], family;
    peer_key(sa, addr, &family);

    int status = 0;
    char why[128];
    struct http__peer *counted = NULL;
    if (s->n_admitted >= s->cfg.max_conns) {
        status = 503;
        snprintf(why, sizeof(why), "connection limit reached (%d open)", s->cfg.max_conns);
    } else {
        struct http__peer *e = peer_find(s, addr, family, false);
        if (e && e->n_conns >= s->cfg.max_conns_per_client) {
            status = 429;
            snprintf(why, sizeof(why), "connection limit per client reached (%d open from %s)",
                     e->n_conns, peer);
        }
    }
    if (status) {
        if (s->n_refusing >= s->cfg.max_conns) {
            char id[HTTP_REQUEST_ID_MAX + 1];
            http__request_id(NULL, id);
            evutil_closesocket(fd);
            if (s->hooks->on_refusal)
                s->hooks->on_refusal(peer, id, status, "connection limit: closed unanswered",
                                     s->hooks->arg);
            return;
        }
        s->n_refusing++;
    } else {
        counted = peer_find(s, addr, family, true);
        counted->n_conns++;
        s->n_admitted++;
    }
    if (!http__conn_new(s, fd, peer, counted, status, why)) {
        http__server_forget(s, counted, status != 0);
        evutil_closesocket(fd);
    }
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
    struct http_server *s = arg;
    int e = EVUTIL_SOCKET_ERROR();
    evconnlistener_disable(lev);
    if (!s->accept_paused_ns) {
        s->accept_paused_ns = time_now_ns();
        s->accept_retry_ms = 100;
        log_warn("http: cannot accept connections: %s; pausing accepts (retrying from 100 ms up "
                 "to every 1 s)",
                 strerror(e));
    } else {
        s->accept_retry_ms = MIN(s->accept_retry_ms * 2, 1000);
    }
    s->accept_failures++;
    s->accept_failed_again = true;
    struct timeval tv = {s->accept_retry_ms / 1000, (s->accept_retry_ms % 1000) * 1000};
    evtimer_add(s->accept_retry, &tv);
}

static void accept_settle_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    if (!s->accept_paused_ns || s->accept_failed_again) return;
    log_info("http: accepting connections again after %.1f s (%d attempts failed)",
             (double)(time_now_ns() - s->accept_paused_ns) * 1e-9, s->accept_failures);
    s->accept_paused_ns = 0;
    s->accept_failures = 0;
}

static void accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct http_server *s = arg;
    if (s->listener) evconnlistener_enable(s->listener);
}

/* ------------------------------------------------------------- lifecycle */

static int listen_socket(const struct http_config *cfg, int *out, struct err_msg *msg)
{
    char port[16];
    snprintf(port, sizeof(port), "%d", cfg->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai != 0)
        return err_set(msg, ERR_INVALID, "cannot listen on '%s': %s", cfg->host, gai_strerror(gai));
    int rc = -EADDRNOTAVAIL;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd =
            socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            rc = -errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
            *out = fd;
            freeaddrinfo(ai);
            return 0;
        }
        rc = -errno;
        close(fd);
    }
    freeaddrinfo(ai);
    return err_set(msg, rc, "cannot listen on %s:%d: %s", cfg->host, cfg->port, strerror(-rc));
}

static int config_check(const struct http_config *c, struct err_msg *msg)
{
    if (!c->host) return err_set(msg, ERR_INVALID, "http: no listen address");
    if (c->port < 0 || c->port > 65535)
        return err_set(msg, ERR_INVALID, "http: port %d out of range", c->port);
    if (c->max_conns < 1 || c->max_conns_per_client < 1)
        return err_set(msg, ERR_INVALID, "http: connection limits must be at least 1");
    if (c->max_header_bytes < 256 || c->max_header_bytes > (1u << 30))
        return err_set(msg, ERR_INVALID, "http: max_header_bytes must be 256 .. 1 GiB");
    if (c->max_body_bytes > ((size_t)1 << 40))
        return err_set(msg, ERR_INVALID, "http: max_body_bytes must be at most 1 TiB");
    if (c->header_timeout_ms < 1 || c->body_timeout_ms < 1 || c->idle_timeout_ms < 1 ||
        c->write_timeout_ms < 1)
        return err_set(msg, ERR_INVALID, "http: timeouts must be at least 1 ms");
    if (c->out_high_water < 2)
        return err_set(msg, ERR_INVALID, "http: out_high_water must be at least 2 bytes");
    return 0;
}

int http_server_new(struct event_base *base, const struct http_config *cfg,
                    const struct http_hooks *hooks, struct http_server **out, struct err_msg *msg)
{
    int rc = config_check(cfg, msg);
    if (rc) return rc;
    CHECK(hooks && hooks->on_request);
    /* A write to a reset socket raises SIGPIPE, which kills by default;
     * bufferevents write with writev, which has no MSG_NOSIGNAL. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

    int fd = -1;
    rc = listen_socket(cfg, &fd, msg);
    if (rc) return rc;
    struct http_server *s = xcalloc(1, sizeof(*s));
    s->base = base;
    s->cfg = *cfg;
    s->cfg.host = NULL; /* read above only; the caller's string need not live on */
    s->hooks = hooks;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    /* Backlog 0: the socket listens already. */
    s->listener = evconnlistener_new(base, accept_cb, s, LEV_OPT_CLOSE_ON_FREE, 0, fd);
    if (!s->listener) {
        close(fd);
        free(s);
        return err_set(msg, -ENOMEM, "cannot listen on %s:%d: libevent failed", cfg->host,
                       cfg->port);
    }
    evconnlistener_set_error_cb(s->listener, accept_error_cb);
    s->accept_retry = evtimer_new(base, accept_retry_cb, s);
    s->accept_settle = event_new(base, -1, 0, accept_settle_cb, s);
    CHECK(s->accept_retry && s->accept_settle);
    uint32_t buckets = 64;
    while (buckets < (uint32_t)cfg->max_conns * 2 && buckets < (1u << 16))
        buckets *= 2;
    s->peers = xcalloc(buckets, sizeof(*s->peers));
    s->peer_mask = buckets - 1;
    *out = s;
    return 0;
}

int http_server_port(const struct http_server *s)
{
    return s->port;
}

int http_server_n_conns(const struct http_server *s)
{
    return s->n_admitted + s->n_refusing;
}

int http_server_n_requests(const struct http_server *s)
{
    return s->n_requests;
}

void http_server_drain(struct http_server *s)
{
    s->draining = true;
    if (s->listener) {
        evconnlistener_free(s->listener);
        s->listener = NULL;
    }
    evtimer_del(s->accept_retry);
    event_del(s->accept_settle);
    for (struct http_conn *c = s->conns; c; c = http__conn_next(c))
        http__conn_drain(c);
}

void http_server_free(struct http_server *s)
{
    if (!s) return;
    if (s->listener) evconnlistener_free(s->listener);
    s->listener = NULL;
    s->draining = true;
    while (s->conns)
        http__conn_close(s->conns);
    http__request_free_all(s);
    event_free(s->accept_retry);
    event_free(s->accept_settle);
    for (uint32_t i = 0; i <= s->peer_mask; i++) {
        while (s->peers[i]) {
            struct http__peer *e = s->peers[i];
            s->peers[i] = e->next;
            free(e);
        }
    }
    free(s->peers);
    free(s);
}
