/*
 * kv_link_tcp.c - KV pulls over the cluster protocol on TCP (kv_link.h).
 *
 * One struct peer per prefill worker address: a bufferevent for the dial
 * and for writes (SUBMIT, CANCEL, PING, HELLO), and our own read event on
 * the same socket. A bufferevent reads 4 KiB per loop turn, which would
 * cost a turn per 4 KiB of KV; this reads what the socket has, each frame
 * straight into a buffer of its size, which then goes up as the block.
 */
#include "cluster/kv_link.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/u64map.h"
#include "cluster/conn.h"

#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static const double silent_s = 2.5; /* no frame for this long: the peer is lost */

struct tcp_link;

struct peer {
    struct tcp_link *l;
    struct peer *next;
    char addr[80];           /* HOST:PORT as asked for */
    struct sockaddr_in sa;   /* resolved */
    struct bufferevent *bev; /* dial and writes; NULL while down */
    struct event *rd;        /* reads */
    bool hello;              /* its HELLO came, with our engine */
    double last_heard;       /* monotonic seconds of its last frame */
    struct u64map pulls;     /* tag -> (void *)1: pulls waiting on it */
    uint8_t head[CL_HEADER]; /* the frame being read: its header, */
    size_t head_have;
    uint8_t *frame; /* then the whole frame (frame_len), or NULL */
    size_t frame_len, frame_have;
};

struct tcp_link {
    struct kv_link base; /* first */
    struct event_base *evb;
    struct cl_hello me;  /* our HELLO; its engine is what a peer must match */
    struct peer *peers;  /* every address asked for */
    struct u64map where; /* tag -> struct peer * */
    struct buf out;      /* encode scratch */
};

static void send_frame(struct peer *p, const struct cl_msg *m)
{
    struct err_msg e = {{0}};
    buf_clear(&p->l->out);
    if (p->bev && !cl_encode(m, &p->l->out, &e))
        bufferevent_write(p->bev, p->l->out.data, p->l->out.len);
}

/* Ends one pull: out of the maps, then the callback (which may pull again,
 * on this link: nothing here is touched after it). */
static void end_pull(struct tcp_link *l, struct peer *p, uint64_t tag, const char *why)
{
    u64map_del(&p->pulls, tag);
    u64map_del(&l->where, tag);
    l->base.cb.end(l->base.cb.ctx, tag, why);
}

/* The peer is gone: the connection closes, and every pull on it ends. */
static void peer_down(struct peer *p, const char *why)
{
    if (p->pulls.n || p->hello)
        log_warn("kv link: prefill worker %s: %s (%zu pulls waiting on it)", p->addr, why,
                 p->pulls.n);
    if (p->rd) event_free(p->rd);
    p->rd = NULL;
    if (p->bev) bufferevent_free(p->bev);
    p->bev = NULL;
    p->hello = false;
    free(p->frame);
    p->frame = NULL;
    p->head_have = 0;
    char text[200];
    snprintf(text, sizeof(text), "peer lost: %s", why);
    /* the pulls of this connection, taken first: an end may pull again, on
     * another peer or on this address anew, and that pull is not ours */
    size_t n = 0;
    uint64_t *tags = xmalloc(sizeof(*tags) * (p->pulls.n + 1));
    for (size_t i = 0; i < p->pulls.cap; i++)
        if (p->pulls.slots[i].key) tags[n++] = p->pulls.slots[i].key;
    for (size_t i = 0; i < n; i++)
        end_pull(p->l, p, tags[i], text);
    free(tags);
}

static void peer_frame(struct peer *p, const struct cl_msg *m, uint8_t **blob)
{
    struct tcp_link *l = p->l;
    if (!p->hello && m->type != CL_HELLO) {
        char why[64];
        snprintf(why, sizeof(why), "a %s frame before HELLO", cl_type_name(m->type));
        peer_down(p, why);
        return;
    }
    switch (m->type) {
    case CL_HELLO:
        if (p->hello || memcmp(m->u.hello.fingerprint, l->me.fingerprint, 16) ||
            m->u.hello.frame_bytes != l->me.frame_bytes ||
            m->u.hello.block_tokens != l->me.block_tokens) {
            peer_down(p, p->hello ? "a second HELLO"
                                  : "another engine fingerprint (model, KV type or block size): "
                                    "refused");
            return;
        }
        p->hello = true;
        log_info("kv link: prefill worker %s (%s) connected", p->addr, m->u.hello.name);
        return;
    case CL_KV_BLOCK:
        if (!u64map_get(&p->pulls, m->u.kv_block.request)) return; /* one that ended */
        l->base.cb.block(l->base.cb.ctx, m->u.kv_block.request, *blob, m->u.kv_block.frame,
                         m->u.kv_block.frame_len);
        *blob = NULL; /* the callee's now */
        return;
    case CL_KV_DONE:
        if (u64map_get(&p->pulls, m->u.kv_done.request)) end_pull(l, p, m->u.kv_done.request, NULL);
        return;
    case CL_ERROR:
        if (m->u.error.request && u64map_get(&p->pulls, m->u.error.request)) {
            char why[CL_MAX_NAME + 32];
            snprintf(why, sizeof(why), "peer error: %s", m->u.error.message);
            end_pull(l, p, m->u.error.request, why);
        } else if (!m->u.error.request) {
            log_warn("kv link: prefill worker %s says: %s", p->addr, m->u.error.message);
        }
        return;
    case CL_PING: {
        struct cl_msg pong = {.type = CL_PONG, .u.nonce = m->u.nonce};
        send_frame(p, &pong);
        return;
    }
    case CL_STATS:
    case CL_PONG:
        return;
    default: {
        char why[64];
        snprintf(why, sizeof(why), "it sent a %s frame", cl_type_name(m->type));
        peer_down(p, why);
        return;
    }
    }
}

/* One whole frame in p->frame: decoded and acted on. */
static void peer_take(struct peer *p)
{
    uint8_t *blob = p->frame;
    size_t len = p->frame_len;
    p->frame = NULL;
    p->head_have = 0;
    struct cl_msg m;
    struct err_msg e = {{0}};
    if (cl_decode(blob, len, &m, &e)) {
        free(blob);
        peer_down(p, e.text);
        return;
    }
    peer_frame(p, &m, &blob); /* may take p down */
    cl_msg_free(&m);
    free(blob);
}

static void peer_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct peer *p = arg;
    p->last_heard = time_now_s();
    while (p->rd) {
        ssize_t n;
        if (!p->frame)
            n = recv(fd, p->head + p->head_have, CL_HEADER - p->head_have, 0);
        else
            n = recv(fd, p->frame + p->frame_have, p->frame_len - p->frame_have, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) {
            peer_down(p, n == 0 ? "connection closed" : strerror(errno));
            return;
        }
        if (!p->frame) {
            if ((p->head_have += (size_t)n) < CL_HEADER) continue;
            size_t flen = 0;
            struct err_msg e = {{0}};
            if (cl_frame_peek(p->head, CL_HEADER, &flen, &e) < 0) {
                peer_down(p, e.text);
                return;
            }
            p->frame = xmalloc(flen);
            memcpy(p->frame, p->head, CL_HEADER);
            p->frame_len = flen;
            p->frame_have = CL_HEADER;
        } else {
            p->frame_have += (size_t)n;
        }
        if (p->frame_have == p->frame_len) peer_take(p);
    }
}

static void peer_event(struct bufferevent *bev, short what, void *arg)
{
    struct peer *p = arg;
    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        p->last_heard = time_now_s();
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        peer_down(p, what & BEV_EVENT_EOF ? "connection closed" : "connection failed");
}

/* The connection to the prefill worker at addr, dialled if need be; NULL
 * with a message when addr is not an address or the dial failed at once. */
static struct peer *peer_get(struct tcp_link *l, const char *addr, int *rc, struct err_msg *msg)
{
    struct peer *p = l->peers;
    while (p && strcmp(p->addr, addr))
        p = p->next;
    if (!p) {
        struct sockaddr_in sa;
        if (!cl_parse_addr(addr, strlen(addr), &sa)) {
            *rc = err_set(msg, ERR_INVALID, "'%.80s' is not an IPv4 HOST:PORT", addr);
            return NULL;
        }
        p = xcalloc(1, sizeof(*p));
        *p = (struct peer){.l = l, .next = l->peers, .sa = sa};
        snprintf(p->addr, sizeof(p->addr), "%s", addr);
        l->peers = p;
    }
    if (p->bev) return p;
    p->bev = bufferevent_socket_new(l->evb, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(p->bev, NULL, NULL, peer_event, p);
    bufferevent_enable(p->bev, EV_WRITE); /* reads are p->rd's */
    p->last_heard = time_now_s();         /* a dial that hangs counts as silence */
    if (bufferevent_socket_connect(p->bev, (struct sockaddr *)&p->sa, sizeof(p->sa)) < 0) {
        peer_down(p, "cannot connect");
        *rc = err_set(msg, ERR_UNAVAILABLE, "%s: cannot connect", addr);
        return NULL;
    }
    p->rd = event_new(l->evb, bufferevent_getfd(p->bev), EV_READ | EV_PERSIST, peer_read, p);
    event_add(p->rd, NULL);
    struct cl_msg hello = {.type = CL_HELLO, .u.hello = l->me};
    send_frame(p, &hello);
    return p;
}

static struct tcp_link *tcp_of(struct kv_link *kl)
{
    return (struct tcp_link *)kl;
}

static int t_pull(struct kv_link *kl, const char *addr, uint64_t tag, const void *submit,
                  size_t len, struct err_msg *msg)
{
    struct tcp_link *l = tcp_of(kl);
    int rc = 0;
    struct peer *p = peer_get(l, addr, &rc, msg);
    if (!p) return rc;
    bufferevent_write(p->bev, submit, len);
    u64map_put(&p->pulls, tag, (void *)1);
    u64map_put(&l->where, tag, p);
    return 0;
}

static void t_cancel(struct kv_link *kl, uint64_t tag)
{
    struct tcp_link *l = tcp_of(kl);
    struct peer *p = u64map_get(&l->where, tag);
    if (!p) return;
    u64map_del(&p->pulls, tag);
    u64map_del(&l->where, tag);
    struct cl_msg m = {.type = CL_CANCEL, .u.request = tag};
    send_frame(p, &m);
}

static void t_tick(struct kv_link *kl)
{
    struct tcp_link *l = tcp_of(kl);
    double now = time_now_s();
    for (struct peer *p = l->peers; p; p = p->next) {
        if (!p->bev) continue;
        if (now - p->last_heard > silent_s) {
            peer_down(p, "silent for 2.5 s");
        } else if (p->hello) {
            struct cl_msg ping = {.type = CL_PING, .u.nonce = (uint64_t)(now * 1e3)};
            send_frame(p, &ping);
        }
    }
}

static void t_free(struct kv_link *kl)
{
    struct tcp_link *l = tcp_of(kl);
    if (!l) return;
    while (l->peers) {
        struct peer *p = l->peers;
        l->peers = p->next;
        if (p->rd) event_free(p->rd);
        if (p->bev) bufferevent_free(p->bev);
        u64map_release(&p->pulls);
        free(p->frame);
        free(p);
    }
    u64map_release(&l->where);
    buf_release(&l->out);
    free(l);
}

static const struct kv_link_ops tcp_ops = {
    .pull = t_pull, .cancel = t_cancel, .tick = t_tick, .free = t_free};

struct kv_link *kv_link_tcp_new(struct event_base *base, const struct cl_hello *me,
                                const struct kv_link_cb *cb)
{
    struct tcp_link *l = xcalloc(1, sizeof(*l));
    l->base = (struct kv_link){.ops = &tcp_ops, .cb = *cb};
    l->evb = base;
    l->me = *me;
    return &l->base;
}
