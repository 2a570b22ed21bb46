/*
 * remote.c - the remote backend (remote.h).
 *
 * Messages for the server are queued in out and announced on an eventfd,
 * exactly as the runner does, so the server drains both backends alike.
 */
#include "cluster/remote.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/u64map.h"
#include "cluster/conn.h"
#include "cluster/members.h"
#include "cluster/pindex.h"
#include "cluster/proto.h"
#include "inferd/inferd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum { MAX_WORKERS = 64 };
static const double silent_s = 2.5; /* no frame for this long: the worker is lost (checked
                                        every tick_ms: out of rotation within 3 s) */
enum { TICK_MS = 500 };

struct rworker {
    struct remote *r;
    char addr[80];           /* HOST:PORT, as listed */
    struct sockaddr_in sa;   /* resolved */
    struct bufferevent *bev; /* NULL while down */
    bool hello;              /* its HELLO came, with our model */
    bool logged_down;        /* the outage is in the log */
    double last_heard;       /* monotonic seconds of its last frame */
    struct cl_stats stats;   /* its last STATS */
    int sent;                /* requests of ours on it */
    char name[CL_MAX_NAME + 1];
    bool removed;            /* its Redis key is gone: not dialled, the slot is free */
    int role;                /* enum cl_role from its HELLO */
    int prefills;            /* requests of ours whose prompts it computes */
    double busy_mark;        /* its busy seconds (STATS) at the start of the balance window */
    uint8_t fingerprint[16]; /* its engine's, from HELLO (block ids depend on it) */
    uint32_t block_tokens;   /* its KV block size */
};

struct remote {
    struct node_backend base; /* first */
    struct event_base *evb;
    char model[CL_MAX_NAME + 1];
    struct rworker w[MAX_WORKERS];
    int n;
    struct event *tick;       /* reconnects, silence checks */
    struct u64map tags;       /* tag -> struct rreq */
    int local_prefill;        /* remote_route's bound */
    struct pol_config policy; /* remote_route's policy */
    uint64_t n_routed;        /* requests routed (round-robin's count) */
    int max_ctx;              /* the gateway's context length (prompts are bounded by it) */
    uint64_t n_resumed;       /* requests moved to another worker */
    uint64_t n_lost;          /* requests ended by a lost worker (none to move to, or too often) */
    uint64_t n_refused;       /* requests refused at once: they would miss their targets */
    double bal_t0;            /* start of the balance window (monotonic seconds; 0: none yet) */
    struct pidx index;        /* the workers' KV blocks, from their KV_EVENTS (pindex.h) */
    uint8_t (*ids)[16];       /* (cap_ids) a prompt's block ids, route's scratch */
    int cap_ids;
    struct pidx_hit *hits;    /* (MAX_WORKERS) pidx_match's */
    uint64_t n_routed_cached; /* prompt blocks the chosen worker held, over all requests */
    double balance[3];        /* per pool (prefill, decode, mixed): the last window's mean over
                                 max of its workers' busy time; -1: no figure yet */
    struct runner_msg *out;
    size_t n_out, cap_out;
    struct buf enc;          /* encode scratch */
    struct members *members; /* Redis membership, or NULL (a static list) */
};

/* A request of ours in flight. */
struct rreq {
    struct rworker *w;   /* the worker generating it */
    struct rworker *pre; /* the prefill worker computing its prompt, or NULL */
    struct buf frame;    /* its SUBMIT as first sent */
    int32_t *out;        /* (n_out, cap_out) the tokens it has output */
    int n_out, cap_out;
    int moves;      /* times it moved to another worker */
    bool cancelled; /* its caller cancelled it: not moved */
};

enum { MAX_MOVES = 3 }; /* a request that kills workers does not kill them all */

int remote_route(const struct pol_config *c, const struct pol_worker *w, int n,
                 const struct pol_request *q, int local_prefill, int *prefill)
{
    const unsigned gen = 1u << CL_ROLE_DECODE | 1u << CL_ROLE_MIXED;
    const unsigned pre = 1u << CL_ROLE_PREFILL;
    *prefill = -1;
    if (q->n_prompt > local_prefill) {
        int p = pol_pick_prefill(c, w, n, pre, q);
        int d = p >= 0 ? pol_pick_decode(c, w, n, gen, q) : -1;
        if (d >= 0) {
            *prefill = p;
            return d;
        }
    }
    int d = pol_pick_prefill(c, w, n, gen, q); /* it computes its own prompt */
    return d >= 0 ? d : pol_pick_prefill(c, w, n, ~0u, q);
}

/* Messages to the server ------------------------------------------------------------ */

static struct runner_msg *push(struct remote *r, uint64_t tag)
{
    if (r->n_out == r->cap_out) {
        r->cap_out = r->cap_out ? 2 * r->cap_out : 64;
        r->out = xrealloc(r->out, r->cap_out * sizeof(*r->out));
    }
    struct runner_msg *m = &r->out[r->n_out++];
    memset(m, 0, sizeof(*m));
    m->tag = tag;
    uint64_t one = 1;
    if (write(r->base.wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        log_warn("remote: eventfd: %s", strerror(errno));
    return m;
}

static void submit_error(struct remote *r, uint64_t tag, int code, const char *why)
{
    struct runner_msg *m = push(r, tag);
    m->rc = code;
    snprintf(m->err, sizeof(m->err), "%s", why);
}

/* A request of ours ended: the counts of the workers it was on drop. */
static void ended(struct remote *r, uint64_t tag, struct rreq *q)
{
    if (q->pre) q->pre->prefills--;
    q->w->sent--;
    u64map_del(&r->tags, tag);
    buf_release(&q->frame);
    free(q->out);
    free(q);
}

static void lost(struct remote *r, uint64_t tag, struct rreq *q, const char *text)
{
    struct runner_msg *m = push(r, tag);
    m->ev.request = tag;
    m->ev.token = -1;
    m->ev.finish = INFERD_FINISH_ERROR;
    m->ev.error = ERR_UNAVAILABLE;
    snprintf(m->ev.message, sizeof(m->ev.message), "%s", text);
    r->n_lost += !q->cancelled;
    ended(r, tag, q);
}

static int route(struct remote *r, const int32_t *prompt, int n_prompt, const char *salt,
                 size_t salt_len, int max_tokens, int *pf, const struct node_targets *t,
                 int *retry_s, struct pol_estimate *est);
static void kv_peers(struct remote *r, int pf, char *out, size_t cap);
static bool send_frame(struct rworker *w, const struct buf *b);

/* q's worker is gone: q goes on on another from the tokens it has output
 * (its prompt + them, n_generated = their count: the worker continues at
 * the next position, with the same seed, penalties and grammar state), so
 * the caller's stream has every token once. False when it cannot move. */
static bool move(struct remote *r, uint64_t tag, struct rreq *q)
{
    if (q->cancelled || q->moves >= MAX_MOVES) return false;
    struct cl_msg m;
    struct err_msg e = {{0}};
    if (cl_decode((const uint8_t *)q->frame.data, q->frame.len, &m, &e)) return false;
    struct cl_submit *s = &m.u.submit;
    bool ok = false;
    if ((uint32_t)q->n_out < s->max_tokens && s->n_prompt + (uint32_t)q->n_out <= CL_MAX_PROMPT) {
        s->prompt = xrealloc(s->prompt, sizeof(int32_t) * (s->n_prompt + (size_t)q->n_out));
        if (q->n_out) memcpy(s->prompt + s->n_prompt, q->out, sizeof(int32_t) * (size_t)q->n_out);
        s->n_prompt += (uint32_t)q->n_out;
        s->n_generated = (uint32_t)q->n_out;
        int pf = -1, retry; /* a move is never refused: it was admitted */
        struct pol_estimate est;
        int k = route(r, s->prompt, (int)s->n_prompt, s->cache_salt, s->salt_len,
                      (int)(s->max_tokens - s->n_generated), &pf, NULL, &retry, &est);
        kv_peers(r, pf, s->kv_peer, sizeof(s->kv_peer));
        buf_clear(&r->enc);
        if (k >= 0 && !cl_encode(&m, &r->enc, &e) && send_frame(&r->w[k], &r->enc)) {
            struct rworker *from = q->w;
            from->sent--;
            if (q->pre) q->pre->prefills--;
            q->w = &r->w[k];
            q->w->sent++;
            q->pre = pf >= 0 ? &r->w[pf] : NULL;
            if (q->pre) q->pre->prefills++;
            q->moves++;
            r->n_resumed++;
            log_info("remote: request %llu moved from %s to %s after %d output tokens",
                     (unsigned long long)tag, from->addr, q->w->addr, q->n_out);
            ok = true;
        }
    }
    cl_msg_free(&m);
    return ok;
}

/* w is gone: every request it generated moves to another worker, or ends
 * with an error event; prompts it computed for others are computed by
 * their decode workers (worker.h). */
static void fail_all(struct rworker *w, const char *why)
{
    struct remote *r = w->r;
    uint64_t *tags = NULL;
    size_t n = 0;
    for (size_t i = 0; i < r->tags.cap; i++) {
        struct rreq *q = r->tags.slots[i].key ? r->tags.slots[i].val : NULL;
        if (q && q->pre == w) {
            q->pre = NULL;
            w->prefills--;
        }
        if (q && q->w == w) {
            tags = xrealloc(tags, sizeof(*tags) * (n + 1));
            tags[n++] = r->tags.slots[i].key;
        }
    }
    for (size_t i = 0; i < n; i++) { /* moves change the map: by tag, not by slot */
        struct rreq *q = u64map_get(&r->tags, tags[i]);
        if (!move(r, tags[i], q)) {
            char text[256];
            snprintf(text, sizeof(text), "worker %s lost: %s", w->addr, why);
            lost(r, tags[i], q, text);
        }
    }
    free(tags);
}

/* Connections ---------------------------------------------------------------------------- */

static void down(struct rworker *w, const char *why)
{
    if (w->bev) bufferevent_free(w->bev);
    w->bev = NULL;
    w->hello = false;
    pidx_drop_worker(&w->r->index, (int)(w - w->r->w)); /* a reconnect replays its state */
    if (!w->logged_down) log_warn("remote: worker %s: %s; out of rotation", w->addr, why);
    w->logged_down = true;
    fail_all(w, why);
}

static bool send_frame(struct rworker *w, const struct buf *b)
{
    return w->bev && bufferevent_write(w->bev, b->data, b->len) == 0;
}

static bool send_msg(struct rworker *w, const struct cl_msg *m)
{
    struct err_msg e = {{0}};
    buf_clear(&w->r->enc);
    if (cl_encode(m, &w->r->enc, &e)) {
        log_error("remote: %s frame to %s not sent: %s", cl_type_name(m->type), w->addr, e.text);
        return false;
    }
    return bufferevent_write(w->bev, w->r->enc.data, w->r->enc.len) == 0;
}

static void on_token(struct rworker *w, const struct cl_token *t)
{
    struct remote *r = w->r;
    struct rreq *q = u64map_get(&r->tags, t->request);
    if (!q || q->w != w) return; /* not ours, or ended already, or moved */
    if (t->token >= 0) {
        if (q->n_out == q->cap_out) {
            q->cap_out = q->cap_out ? 2 * q->cap_out : 64;
            q->out = xrealloc(q->out, sizeof(*q->out) * (size_t)q->cap_out);
        }
        q->out[q->n_out++] = t->token;
    }
    struct runner_msg *m = push(r, t->request);
    struct inferd_event *ev = &m->ev;
    ev->request = t->request;
    ev->token = t->token;
    ev->logprob = t->logprob;
    ev->n_top = t->n_top;
    for (int k = 0; k < t->n_top; k++)
        ev->top[k] = (struct inferd_token_logprob){t->top_token[k], t->top_logprob[k]};
    ev->finish = (enum inferd_finish)t->finish;
    ev->n_generated = (int)t->index + (t->token >= 0);
    if (t->finish) {
        ev->n_prompt = (int)t->n_prompt;
        ev->n_cached = (int)t->n_cached;
        ev->queue_s = t->queue_s;
        ev->n_generated = (int)t->n_generated;
        ev->error = t->error;
        snprintf(ev->message, sizeof(ev->message), "%s", t->message);
        ended(r, t->request, q);
    }
}

static void on_frame(struct rworker *w, const struct cl_msg *m)
{
    struct remote *r = w->r;
    switch (m->type) {
    case CL_HELLO:
        if (strcmp(m->u.hello.model, r->model) != 0) {
            char why[CL_MAX_NAME * 2 + 64];
            snprintf(why, sizeof(why), "serves '%s', not '%s': refused", m->u.hello.model,
                     r->model);
            down(w, why);
            return;
        }
        w->hello = true;
        w->logged_down = false;
        w->role = m->u.hello.role;
        memcpy(w->fingerprint, m->u.hello.fingerprint, 16);
        w->block_tokens = m->u.hello.block_tokens;
        pidx_drop_worker(&r->index, (int)(w - r->w)); /* its KV_EVENTS start anew */
        if (m->u.hello.block_tokens) r->policy.block_tokens = (int)m->u.hello.block_tokens;
        if (m->u.hello.max_ctx && (int64_t)m->u.hello.max_ctx < r->max_ctx)
            log_warn("remote: worker %s serves a context of %u tokens, this gateway bounds "
                     "requests by %d: longer ones fail on it (give the gateway --ctx %u)",
                     w->addr, m->u.hello.max_ctx, r->max_ctx, m->u.hello.max_ctx);
        snprintf(w->name, sizeof(w->name), "%s", m->u.hello.name);
        log_info("remote: worker %s (%s, %s) in rotation", w->addr, w->name,
                 w->role == CL_ROLE_PREFILL  ? "prefill"
                 : w->role == CL_ROLE_DECODE ? "decode"
                                             : "mixed");
        return;
    case CL_STATS:
        w->stats = m->u.stats;
        return;
    case CL_KV_EVENTS: {
        const struct cl_kv_events *e = &m->u.kv_events;
        if (pidx_needs_resync(&r->index, (int)(w - r->w))) return; /* logged once */
        for (uint32_t i = 0; i < e->n; i++) {
            struct pidx_event pe = {.seq = e->seq + i};
            int kind, tier;
            cl_kv_event_at(e, i, &kind, &tier, pe.id);
            pe.kind = kind == 1 ? PIDX_STORED : PIDX_EVICTED;
            pe.tier = (uint8_t)tier;
            if (pidx_apply(&r->index, (int)(w - r->w), &pe) == PIDX_RESYNC) {
                /* numbered per connection over TCP: a gap is a bug of the
                 * peer; its blocks count as unknown until it reconnects */
                log_warn("remote: worker %s: KV events out of sequence at %llu; its cache "
                         "is unknown until it reconnects",
                         w->addr, (unsigned long long)pe.seq);
                break;
            }
        }
        return;
    }
    case CL_TOKEN:
        on_token(w, &m->u.token);
        return;
    case CL_ERROR: {
        struct rreq *q = m->u.error.request ? u64map_get(&r->tags, m->u.error.request) : NULL;
        if (q && q->w == w) {
            ended(r, m->u.error.request, q);
            submit_error(r, m->u.error.request, m->u.error.code, m->u.error.message);
        } else if (!m->u.error.request) {
            log_warn("remote: worker %s says: %s", w->addr, m->u.error.message);
        }
        return;
    }
    case CL_PING: {
        struct cl_msg pong = {.type = CL_PONG, .u.nonce = m->u.nonce};
        send_msg(w, &pong);
        return;
    }
    case CL_PONG:
        return;
    case CL_BYE:
        down(w, "it said BYE");
        return;
    default: {
        char why[64];
        snprintf(why, sizeof(why), "it sent a %s frame", cl_type_name(m->type));
        down(w, why);
        return;
    }
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct rworker *w = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    w->last_heard = time_now_s();
    while (w->bev) {
        struct cl_msg m;
        struct err_msg e = {{0}};
        size_t len = 0;
        int rc = cl_evbuffer_next(in, &m, &len, &e);
        if (rc < 0) down(w, e.text);
        if (rc <= 0) return;
        evbuffer_drain(in, len); /* nothing here keeps a KV_BLOCK's bytes */
        on_frame(w, &m);         /* may take w down (w->bev NULL): the loop ends */
        cl_msg_free(&m);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct rworker *w = arg;
    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        setsockopt(bufferevent_getfd(w->bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        w->last_heard = time_now_s();
        struct cl_msg m = {.type = CL_HELLO};
        m.u.hello.role = CL_ROLE_GATEWAY;
        snprintf(m.u.hello.name, sizeof(m.u.hello.name), "gateway");
        send_msg(w, &m);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        down(w, what & BEV_EVENT_EOF ? "connection closed" : "connection failed");
}

static void dial(struct rworker *w)
{
    w->bev = bufferevent_socket_new(w->r->evb, -1, BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(w->bev, on_read, NULL, on_event, w);
    bufferevent_enable(w->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(w->bev, (struct sockaddr *)&w->sa, sizeof(w->sa)) < 0)
        down(w, "cannot connect");
}

static int parse_list(const char *list, struct rworker *w, int *n, struct err_msg *msg);

/* Redis membership: workers whose key appeared join, those whose key is
 * gone leave (their requests fail over as for a lost connection). */
static void reconcile(struct remote *r)
{
    char addrs[MEMBERS_MAX][80];
    int n = members_list(r->members, addrs, MEMBERS_MAX);
    if (n < 0) return; /* Redis away: keep who we know */
    for (int i = 0; i < r->n; i++) {
        struct rworker *w = &r->w[i];
        if (w->removed) continue;
        bool listed = false;
        for (int k = 0; k < n && !listed; k++)
            listed = !strcmp(addrs[k], w->addr);
        if (listed) continue;
        if (w->bev || !w->logged_down)
            log_info("remote: worker %s left (its key expired)", w->addr);
        w->logged_down = true; /* no "out of rotation" line on top */
        down(w, "left");
        w->removed = true;
    }
    for (int k = 0; k < n; k++) {
        int free_slot = -1;
        bool known = false;
        for (int i = 0; i < r->n && !known; i++) {
            if (!r->w[i].removed && !strcmp(r->w[i].addr, addrs[k])) known = true;
            if (r->w[i].removed && free_slot < 0) free_slot = i;
        }
        if (known) continue;
        if (free_slot < 0 && r->n == MAX_WORKERS) continue;
        struct rworker one;
        int got;
        struct err_msg e = {{0}};
        if (parse_list(addrs[k], &one, &got, &e)) {
            log_warn("remote: ignoring a member key: %s", e.text);
            continue;
        }
        int i = free_slot >= 0 ? free_slot : r->n++;
        r->w[i] = (struct rworker){.r = r, .sa = one.sa};
        snprintf(r->w[i].addr, sizeof(r->w[i].addr), "%s", one.addr);
        log_info("remote: worker %s joined", r->w[i].addr);
        dial(&r->w[i]);
    }
}

enum { BALANCE_WINDOW_S = 5 };

/* Balance efficiency, live: over each window, per pool, the mean over the
 * max of its workers' busy seconds (engine step time, from STATS) - the
 * share of its time a group of them stepping in lockstep would compute
 * rather than wait for the busiest (docs/cluster.md, "Balance"). A pool
 * with nothing to do keeps its last figure. */
static void balance_window(struct remote *r, double now)
{
    if (r->bal_t0 > 0 && now - r->bal_t0 < BALANCE_WINDOW_S) return;
    double sum[3] = {0}, max[3] = {0};
    int n[3] = {0};
    for (int i = 0; i < r->n; i++) {
        struct rworker *w = &r->w[i];
        double busy = w->stats.decode_step_s + w->stats.prompt_step_s;
        double d = busy - w->busy_mark;
        w->busy_mark = busy;
        if (r->bal_t0 <= 0 || w->removed || !w->hello || w->role < CL_ROLE_PREFILL ||
            w->role > CL_ROLE_MIXED || d < 0)
            continue;
        int k = w->role - CL_ROLE_PREFILL;
        n[k]++;
        sum[k] += d;
        if (d > max[k]) max[k] = d;
    }
    for (int k = 0; k < 3; k++)
        if (n[k] && max[k] > 0) r->balance[k] = sum[k] / n[k] / max[k];
    r->bal_t0 = now;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct remote *r = arg;
    double now = time_now_s();
    balance_window(r, now);
    if (r->members) reconcile(r);
    for (int i = 0; i < r->n; i++) {
        struct rworker *w = &r->w[i];
        if (w->removed) continue;
        if (!w->bev) {
            dial(w);
        } else if (w->hello && now - w->last_heard > silent_s) {
            down(w, "silent for 2.5 s");
        } else if (w->hello) {
            struct cl_msg ping = {.type = CL_PING, .u.nonce = (uint64_t)(now * 1e3)};
            send_msg(w, &ping);
        }
    }
}

/* The backend ---------------------------------------------------------------------------- */

static struct remote *remote_of(struct node_backend *b)
{
    return (struct remote *)b;
}

static void r_submit(struct node_backend *b, uint64_t tag, const struct inferd_request *q,
                     int64_t ttl_s, const char *ttl_class, const char *traceparent,
                     const struct node_targets *t)
{
    (void)ttl_s; /* the workers have their own classes: the name goes */
    struct remote *r = remote_of(b);
    int pf = -1, retry = 0;
    struct pol_estimate est = {0};
    int k = route(r, q->prompt, q->n_prompt, q->cache_salt, q->cache_salt_len, q->max_tokens, &pf,
                  t, &retry, &est);
    if (k < 0) {
        submit_error(r, tag, ERR_UNAVAILABLE, "no worker available");
        return;
    }
    if (retry > 0) { /* early rejection: it would miss its targets */
        r->n_refused++;
        char why[200];
        if (t->ttft_ms > 0 && est.ttft_ms > t->ttft_ms)
            snprintf(why, sizeof(why),
                     "overloaded: the time to first token would be about %.0f ms, over the "
                     "%.0f ms target",
                     est.ttft_ms, t->ttft_ms);
        else
            snprintf(why, sizeof(why),
                     "overloaded: the time per output token would be about %.0f ms, over the "
                     "%.0f ms target",
                     est.tpot_ms, t->tpot_ms);
        submit_error(r, tag, ERR_OVERLOADED, why);
        r->out[r->n_out - 1].retry_after_s = retry;
        return;
    }
    struct rworker *w = &r->w[k];
    struct cl_msg m = {.type = CL_SUBMIT};
    struct cl_submit *s = &m.u.submit;
    s->request = tag;
    snprintf(s->traceparent, sizeof(s->traceparent), "%s", traceparent ? traceparent : "");
    s->priority = q->priority;
    s->max_tokens = (uint32_t)MAX(q->max_tokens, 0);
    s->flags = (uint8_t)((q->ignore_eos ? CL_SUBMIT_IGNORE_EOS : 0) |
                         (q->sampling.logprobs ? CL_SUBMIT_LOGPROBS : 0));
    s->n_logprobs = (uint8_t)MIN(MAX(q->sampling.n_logprobs, 0), 255);
    s->temperature = q->sampling.temperature;
    s->top_k = q->sampling.top_k;
    s->top_p = q->sampling.top_p;
    s->min_p = q->sampling.min_p;
    s->repetition_penalty = q->sampling.repetition_penalty;
    s->presence_penalty = q->sampling.presence_penalty;
    s->frequency_penalty = q->sampling.frequency_penalty;
    s->seed = q->sampling.seed;
    int32_t *bt = NULL;
    float *bv = NULL;
    if (q->sampling.n_logit_bias > 0) {
        s->n_logit_bias = (uint32_t)q->sampling.n_logit_bias;
        bt = xmalloc(sizeof(*bt) * s->n_logit_bias);
        bv = xmalloc(sizeof(*bv) * s->n_logit_bias);
        for (uint32_t i = 0; i < s->n_logit_bias; i++) {
            bt[i] = q->sampling.logit_bias[i].token;
            bv[i] = q->sampling.logit_bias[i].bias;
        }
        s->bias_token = bt;
        s->bias = bv;
    }
    s->grammar_kind = (uint8_t)q->grammar.kind;
    s->grammar = (char *)q->grammar.source;
    s->grammar_len = q->grammar.source ? (uint32_t)q->grammar.len : 0;
    s->cache_salt = (char *)q->cache_salt;
    s->salt_len = (uint16_t)MIN(q->cache_salt_len, (size_t)CL_MAX_SALT);
    s->n_prompt = (uint32_t)MAX(q->n_prompt, 0);
    s->prompt = (int32_t *)q->prompt;
    snprintf(s->ttl_class, sizeof(s->ttl_class), "%s", ttl_class ? ttl_class : "");
    kv_peers(r, pf, s->kv_peer, sizeof(s->kv_peer));
    struct err_msg e = {{0}};
    buf_clear(&r->enc);
    int rc = cl_encode(&m, &r->enc, &e);
    free(bt);
    free(bv);
    if (rc) { /* the same checks the engine makes, as its error */
        submit_error(r, tag, ERR_INVALID, e.text + (strncmp(e.text, "encode: ", 8) ? 0 : 8));
        return;
    }
    if (!send_frame(w, &r->enc)) {
        submit_error(r, tag, ERR_UNAVAILABLE, "the worker's connection failed");
        return;
    }
    struct rreq *rq = xcalloc(1, sizeof(*rq));
    rq->w = w;
    buf_append(&rq->frame, r->enc.data, r->enc.len); /* what a move starts from */
    w->sent++;
    if (pf >= 0) {
        rq->pre = &r->w[pf];
        rq->pre->prefills++;
    }
    u64map_put(&r->tags, tag, rq);
}

/* The SUBMIT's KV peers: the chosen prefill worker pf (-1: none, "") and
 * the other prefill workers up, least loaded first, for the decode worker
 * to go on with if pf fails (as many as the field holds, at most 4). */
static void kv_peers(struct remote *r, int pf, char *out, size_t cap)
{
    out[0] = 0;
    if (pf < 0) return;
    size_t at = (size_t)snprintf(out, cap, "%s", r->w[pf].addr);
    bool used[MAX_WORKERS] = {false};
    used[pf] = true;
    for (int k = 1; k < 4; k++) {
        int best = -1;
        long best_load = 0;
        for (int i = 0; i < r->n; i++) {
            const struct rworker *w = &r->w[i];
            if (used[i] || w->removed || !w->bev || !w->hello || w->role != CL_ROLE_PREFILL)
                continue;
            long load = (long)w->stats.running + w->stats.waiting + w->sent + w->prefills;
            if (best < 0 || load < best_load) best = i, best_load = load;
        }
        if (best < 0 || at + strlen(r->w[best].addr) + 2 > cap) break;
        used[best] = true;
        at += (size_t)snprintf(out + at, cap - at, ",%s", r->w[best].addr);
    }
}

/* The snapshot the policy routes on, and its choice (remote_route); with
 * targets, the admission check (pol_admit) of that choice: *retry_s > 0
 * when it would miss them, est its prediction. */
/* Each worker's leading run of the prompt's blocks, from the index, into
 * v[].cached_blocks (workers whose engines name blocks otherwise: 0). */
static void cached_runs(struct remote *r, struct pol_worker *v, const int32_t *prompt, int n_prompt,
                        const char *salt, size_t salt_len)
{
    const struct rworker *ref = NULL;
    for (int i = 0; i < r->n && !ref; i++)
        if (v[i].up && r->w[i].block_tokens) ref = &r->w[i];
    if (!ref || !prompt || n_prompt <= 0) return;
    int n = n_prompt / (int)ref->block_tokens;
    if (n <= 0) return;
    if (n > r->cap_ids) {
        r->cap_ids = n;
        r->ids = xrealloc(r->ids, sizeof(*r->ids) * (size_t)n);
    }
    n = inferd_kv_block_ids(ref->fingerprint, (int)ref->block_tokens, salt, salt_len, prompt,
                            n_prompt, r->ids, n);
    if (n <= 0) return;
    if (!r->hits) r->hits = xmalloc(sizeof(*r->hits) * MAX_WORKERS);
    int k = pidx_match(&r->index, (const uint8_t(*)[16])r->ids, n, r->hits, MAX_WORKERS);
    for (int h = 0; h < k && h < MAX_WORKERS; h++) {
        int i = r->hits[h].worker;
        if (i < r->n && !memcmp(r->w[i].fingerprint, ref->fingerprint, 16) &&
            r->w[i].block_tokens == ref->block_tokens)
            v[i].cached_blocks = r->hits[h].n_pool;
    }
}

static int route(struct remote *r, const int32_t *prompt, int n_prompt, const char *salt,
                 size_t salt_len, int max_tokens, int *pf, const struct node_targets *t,
                 int *retry_s, struct pol_estimate *est)
{
    struct pol_worker v[MAX_WORKERS];
    for (int i = 0; i < r->n; i++) {
        const struct rworker *w = &r->w[i];
        const struct cl_stats *st = &w->stats;
        /* what this gateway has on it counts as waiting: its STATS may not
         * show it yet */
        v[i] = (struct pol_worker){.up = !w->removed && w->bev && w->hello,
                                   .role = w->role,
                                   .running = (int)st->running,
                                   .waiting = (int)st->waiting + w->sent + w->prefills,
                                   .queued_tokens = (int64_t)st->queued_tokens,
                                   .kv_used = (int)st->kv_blocks_used,
                                   .kv_total = (int)st->kv_blocks_total,
                                   .ms_fixed = st->step_ms_fixed,
                                   .ms_per_token = st->step_ms_per_token};
        uint64_t pt = st->counter[CL_STAT_PROMPT_TOKENS];
        v[i].ms_per_prompt_token = pt ? 1e3 * st->prompt_step_s / (double)pt : 0;
    }
    /* one cost line per role: one worker's noisy fit steers nothing */
    pol_pool_costs(v, r->n);
    cached_runs(r, v, prompt, n_prompt, salt, salt_len);
    struct pol_request q = {.n_prompt = n_prompt, .max_tokens = max_tokens, .seq = r->n_routed++};
    int k = remote_route(&r->policy, v, r->n, &q, r->local_prefill, pf);
    if (k >= 0) r->n_routed_cached += (uint64_t)v[*pf >= 0 ? *pf : k].cached_blocks;
    *retry_s = 0;
    if (k >= 0 && t && (t->ttft_ms > 0 || t->tpot_ms > 0)) {
        pol_estimate(&r->policy, *pf >= 0 ? &v[*pf] : NULL, &v[k], &q, est);
        const struct pol_slo slo = {.ttft_ms = t->ttft_ms, .tpot_ms = t->tpot_ms};
        *retry_s = pol_admit(&slo, est);
    }
    return k;
}

static void r_cancel(struct node_backend *b, uint64_t tag)
{
    struct remote *r = remote_of(b);
    struct rreq *q = u64map_get(&r->tags, tag);
    if (!q) return;
    q->cancelled = true;
    if (!q->w->bev) return;
    struct cl_msg m = {.type = CL_CANCEL, .u.request = tag};
    send_msg(q->w, &m);
}

/* A slow reader: its request's steps wait on its worker, KV kept (the
 * same as inferd_pause in one process). A moved request is not paused on
 * its new worker: its reader's next pause call is. */
static void r_pause(struct node_backend *b, uint64_t tag, bool paused)
{
    struct remote *r = remote_of(b);
    struct rreq *q = u64map_get(&r->tags, tag);
    if (!q || !q->w->bev) return;
    struct cl_msg m = {.type = CL_PAUSE, .u.pause = {.request = tag, .paused = paused}};
    send_msg(q->w, &m);
}

static size_t r_drain(struct node_backend *b, struct runner_msg **msgs, size_t *cap)
{
    struct remote *r = remote_of(b);
    uint64_t v;
    if (read(r->base.wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_warn("remote: eventfd: %s", strerror(errno));
    size_t n = r->n_out;
    if (*cap < n) {
        *cap = n;
        *msgs = xrealloc(*msgs, n * sizeof(**msgs));
    }
    if (n) memcpy(*msgs, r->out, n * sizeof(*r->out));
    r->n_out = 0;
    return n;
}

static void r_stats(struct node_backend *b, struct runner_stats *s)
{
    struct remote *r = remote_of(b);
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < r->n; i++) {
        const struct rworker *w = &r->w[i];
        if (!w->hello) continue;
        s->engine.n_running += (int)w->stats.running;
        s->engine.n_waiting += (int)w->stats.waiting;
        s->engine.n_loading += (int)w->stats.loading;
        s->engine.kv_blocks_total += (int)w->stats.kv_blocks_total;
        s->engine.kv_blocks_used += (int)w->stats.kv_blocks_used;
        s->engine.kv_blocks_cached += (int)w->stats.kv_blocks_cached;
        s->engine.tokens_per_s += w->stats.tokens_per_s;
        s->engine.queued_tokens += (int64_t)w->stats.queued_tokens;
        s->engine.n_finished += w->stats.finished;
        const uint64_t *k = w->stats.counter;
        s->engine.n_steps += k[CL_STAT_STEPS];
        s->engine.n_decode_steps += k[CL_STAT_DECODE_STEPS];
        s->engine.n_decode_step_tokens += k[CL_STAT_DECODE_STEP_TOKENS];
        s->engine.n_prompt_steps += k[CL_STAT_PROMPT_STEPS];
        s->engine.n_prompt_tokens += k[CL_STAT_PROMPT_TOKENS];
        s->engine.n_cached_tokens += k[CL_STAT_CACHED_TOKENS];
        s->engine.n_generated_tokens += k[CL_STAT_GENERATED_TOKENS];
        s->engine.n_submitted += k[CL_STAT_SUBMITTED];
        s->engine.n_rejected += k[CL_STAT_REJECTED];
        s->engine.n_cancelled += k[CL_STAT_CANCELLED];
        s->engine.n_preempted += k[CL_STAT_PREEMPTED];
        s->engine.n_prefix_query_tokens += k[CL_STAT_PREFIX_QUERY_TOKENS];
        s->engine.n_prefix_hit_tokens += k[CL_STAT_PREFIX_HIT_TOKENS];
        s->engine.decode_step_s += w->stats.decode_step_s;
        s->engine.prompt_step_s += w->stats.prompt_step_s;
        s->n_steps += k[CL_STAT_STEPS];
    }
    if (s->engine.tokens_per_s > 0)
        s->engine.est_queue_ms = (double)s->engine.queued_tokens / s->engine.tokens_per_s * 1e3;
}

static const struct node_backend_ops remote_ops = {
    .submit = r_submit, .cancel = r_cancel, .pause = r_pause, .drain = r_drain, .stats = r_stats};

/* Parses list into w[0..*n): 0, or ERR_INVALID with a message. */
static int parse_list(const char *list, struct rworker *w, int *n, struct err_msg *msg)
{
    *n = 0;
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (!len || len >= sizeof(w->addr) || *n == MAX_WORKERS)
            return err_set(msg, ERR_INVALID,
                           "--workers: '%.*s': expected HOST:PORT,... (at most %d workers)",
                           (int)MIN(len, (size_t)60), p, MAX_WORKERS);
        struct sockaddr_in sa;
        if (!cl_parse_addr(p, len, &sa))
            return err_set(msg, ERR_INVALID,
                           "--workers: '%.*s': expected an IPv4 HOST:PORT (port 1-65535)", (int)len,
                           p);
        if (w) {
            w[*n].sa = sa;
            snprintf(w[*n].addr, sizeof(w[*n].addr), "%.*s", (int)len, p);
        }
        (*n)++;
        p = end ? end + 1 : p + len;
    }
    if (!*n) return err_set(msg, ERR_INVALID, "--workers: no worker named");
    return 0;
}

int remote_check_list(const char *list, struct err_msg *msg)
{
    int n;
    return parse_list(list, NULL, &n, msg);
}

int remote_new(struct event_base *base, const char *list, const char *redis, const char *model,
               struct remote **out, struct err_msg *msg)
{
    struct remote *r = xcalloc(1, sizeof(*r));
    r->evb = base;
    r->local_prefill = 256;
    pol_config_default(&r->policy);
    for (int k = 0; k < 3; k++)
        r->balance[k] = -1;
    snprintf(r->model, sizeof(r->model), "%s", model);
    int rc = list ? parse_list(list, r->w, &r->n, msg) : 0;
    if (!rc && redis) rc = members_open(redis, model, &r->members, msg);
    if (rc) {
        free(r);
        return rc;
    }
    for (int i = 0; i < r->n; i++)
        r->w[i].r = r;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        free(r);
        return err_set(msg, -errno, "eventfd: %s", strerror(errno));
    }
    r->base = (struct node_backend){.ops = &remote_ops, .wake_fd = fd};
    for (int i = 0; i < r->n; i++)
        dial(&r->w[i]);
    r->tick = event_new(base, -1, EV_PERSIST, on_tick, r);
    struct timeval every = {0, TICK_MS * 1000};
    event_add(r->tick, &every);
    if (r->members) reconcile(r);
    *out = r;
    return 0;
}

struct node_backend *remote_backend(struct remote *r)
{
    return &r->base;
}

void remote_set_local_prefill(struct remote *r, int n_tokens)
{
    r->local_prefill = n_tokens;
}

void remote_set_policy(struct remote *r, enum pol_kind kind)
{
    r->policy.kind = kind;
}

void remote_set_max_ctx(struct remote *r, int max_ctx)
{
    r->max_ctx = max_ctx;
}

void remote_render_metrics(const struct remote *r, struct buf *out)
{
    static const char *const pool[] = {"prefill", "decode", "mixed"};
    struct {
        unsigned long long up, running, waiting, used, total, q, hit, k[4];
    } p[3] = {{0}};
    for (int i = 0; i < r->n; i++) {
        const struct rworker *w = &r->w[i];
        if (w->removed || !w->bev || !w->hello || w->role < CL_ROLE_PREFILL ||
            w->role > CL_ROLE_MIXED)
            continue;
        int k = w->role - CL_ROLE_PREFILL;
        p[k].up++;
        p[k].running += w->stats.running;
        p[k].waiting += w->stats.waiting;
        p[k].used += w->stats.kv_blocks_used;
        p[k].total += w->stats.kv_blocks_total;
        p[k].q += w->stats.counter[CL_STAT_PREFIX_QUERY_TOKENS];
        p[k].hit += w->stats.counter[CL_STAT_PREFIX_HIT_TOKENS];
        for (int c = 0; c < 4; c++)
            p[k].k[c] += w->stats.counter[CL_STAT_KV_BLOCKS_SENT + c];
    }
    static const struct {
        const char *name, *type, *help;
    } series[] = {
        {"inferd_pool_workers", "gauge", "Workers of a pool in rotation."},
        {"inferd_pool_requests_running", "gauge", "Sequences running on a pool's workers."},
        {"inferd_pool_requests_waiting", "gauge", "Sequences waiting on a pool's workers."},
        {"inferd_pool_kv_blocks_used", "gauge", "KV blocks referenced on a pool's workers."},
        {"inferd_pool_kv_blocks_total", "gauge", "KV blocks of a pool's workers."},
        {"inferd_pool_prefix_cache_hit_ratio", "gauge",
         "Prompt positions found in a pool's prefix caches / looked up."},
        {"inferd_pool_kv_blocks_sent_total", "counter",
         "KV blocks a pool's workers sent for prefill-only requests."},
        {"inferd_pool_kv_blocks_received_total", "counter",
         "KV blocks a pool's workers took in from prefill workers."},
        {"inferd_pool_kv_pulls_total", "counter",
         "Requests whose prompt KV a pool's workers asked of a prefill worker."},
        {"inferd_pool_kv_pull_fallbacks_total", "counter",
         "Of those, ended without all the blocks (prefill worker lost, silent, refused): "
         "the rest computed by the decode worker."},
    };
    buf_printf(out,
               "# HELP inferd_cluster_requests_moved_total Requests that went on on another "
               "worker after theirs was lost, from the tokens they had output.\n"
               "# TYPE inferd_cluster_requests_moved_total counter\n"
               "inferd_cluster_requests_moved_total %llu\n"
               "# HELP inferd_cluster_requests_lost_total Requests ended with an error because "
               "their worker was lost and none could take them on.\n"
               "# TYPE inferd_cluster_requests_lost_total counter\n"
               "inferd_cluster_requests_lost_total %llu\n"
               "# HELP inferd_cluster_requests_refused_total Requests refused at arrival (429) "
               "because the predicted latency of their best placement missed their targets.\n"
               "# TYPE inferd_cluster_requests_refused_total counter\n"
               "inferd_cluster_requests_refused_total %llu\n",
               (unsigned long long)r->n_resumed, (unsigned long long)r->n_lost,
               (unsigned long long)r->n_refused);
    buf_printf(out,
               "# HELP inferd_pool_balance_efficiency Over the last %d s, the mean over the "
               "max of a pool's workers' busy time (1: evenly loaded).\n"
               "# TYPE inferd_pool_balance_efficiency gauge\n",
               BALANCE_WINDOW_S);
    for (int k = 0; k < 3; k++)
        if (r->balance[k] >= 0)
            buf_printf(out, "inferd_pool_balance_efficiency{pool=\"%s\"} %.4f\n", pool[k],
                       r->balance[k]);
    const struct pidx_stats *x = &r->index.stats;
    buf_printf(out,
               "# HELP inferd_cluster_prefix_index_blocks Distinct KV blocks the gateway's "
               "prefix index knows a worker to hold.\n"
               "# TYPE inferd_cluster_prefix_index_blocks gauge\n"
               "inferd_cluster_prefix_index_blocks %llu\n"
               "# HELP inferd_cluster_prefix_index_holders (block, worker) pairs in the index.\n"
               "# TYPE inferd_cluster_prefix_index_holders gauge\n"
               "inferd_cluster_prefix_index_holders %llu\n"
               "# HELP inferd_cluster_prefix_index_events_total Workers' KV events applied to "
               "the index.\n"
               "# TYPE inferd_cluster_prefix_index_events_total counter\n"
               "inferd_cluster_prefix_index_events_total %llu\n"
               "# HELP inferd_cluster_prefix_index_resyncs_total Workers whose event stream had "
               "a gap: their blocks unknown until they reconnect.\n"
               "# TYPE inferd_cluster_prefix_index_resyncs_total counter\n"
               "inferd_cluster_prefix_index_resyncs_total %llu\n"
               "# HELP inferd_cluster_routed_cached_blocks_total Prompt blocks the chosen worker "
               "held, by the index, summed over routed requests.\n"
               "# TYPE inferd_cluster_routed_cached_blocks_total counter\n"
               "inferd_cluster_routed_cached_blocks_total %llu\n",
               (unsigned long long)x->n_blocks, (unsigned long long)x->n_holders,
               (unsigned long long)x->n_applied, (unsigned long long)x->n_resyncs,
               (unsigned long long)r->n_routed_cached);
    for (size_t s = 0; s < ARRAY_LEN(series); s++) {
        buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", series[s].name, series[s].help,
                   series[s].name, series[s].type);
        for (int k = 0; k < 3; k++) {
            unsigned long long v[] = {p[k].up, p[k].running, p[k].waiting, p[k].used, p[k].total,
                                      0,       p[k].k[0],    p[k].k[1],    p[k].k[2], p[k].k[3]};
            if (s == 5)
                buf_printf(out, "%s{pool=\"%s\"} %.6f\n", series[s].name, pool[k],
                           p[k].q ? (double)p[k].hit / (double)p[k].q : 0.0);
            else
                buf_printf(out, "%s{pool=\"%s\"} %llu\n", series[s].name, pool[k], v[s]);
        }
    }
}

int remote_n_up(const struct remote *r)
{
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += !r->w[i].removed && r->w[i].bev && r->w[i].hello;
    return n;
}

void remote_free(struct remote *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++)
        if (r->w[i].bev) bufferevent_free(r->w[i].bev);
    if (r->tick) event_free(r->tick);
    members_close(r->members);
    close(r->base.wake_fd);
    for (size_t i = 0; i < r->tags.cap; i++) {
        struct rreq *q = r->tags.slots[i].key ? r->tags.slots[i].val : NULL;
        if (!q) continue;
        buf_release(&q->frame);
        free(q->out);
        free(q);
    }
    u64map_release(&r->tags);
    free(r->out);
    buf_release(&r->enc);
    pidx_release(&r->index);
    free(r->ids);
    free(r->hits);
    free(r);
}
