/*
 * worker.c - `inferd worker` (worker.h): the engine behind the cluster
 * protocol.
 *
 * Names: a peer names its requests by its own ids (SUBMIT request n); the
 * runner names them by tags this side picks, unique for the worker's life.
 * Each connection maps its peer's ids to tags (reqs), and the worker maps
 * tags back to the connection and id (tags -> struct live). A connection
 * that goes away leaves its lives behind with conn NULL: their requests are
 * cancelled, and the runner's final message for each frees it.
 *
 * KV transfer: a SUBMIT naming KV peers (prefill workers, first choice
 * first) goes to the runner as a pull (runner.h); when the runner says what
 * the pool lacks (KV_PULL), the worker asks the first peer for it,
 * prefill-only, through the KV link (kv_link.h: the transport), with the
 * tag as the request id there. The blocks go into the runner as they come.
 * A pull that ends badly (the peer lost, silent for 2.5 s, refused, an
 * ERROR) goes on with the next peer from the first block still missing;
 * KV_DONE, or no peer left, ends the wait (runner_kv_release): what did not
 * come is computed here, so the request's tokens are the same whichever
 * way it ends.
 * A prefill-only SUBMIT (from such a worker) runs with max_tokens 1; its
 * blocks go back as KV_BLOCK frames while the rest of the prompt computes,
 * then KV_DONE, and no TOKEN frame.
 */
#include "cluster/worker.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/u64map.h"
#include "cluster/conn.h"
#include "cluster/kv_link.h"
#include "cluster/members.h"
#include "inferd/inferd.h"
#include "node/runner.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <malloc.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct worker;

/* Bytes one read or write of a connection may move (libevent's default of
 * 16 KiB costs a loop turn per 16 KiB of a KV transfer). */
enum { KV_IO_BYTES = 4 << 20 };

struct wconn {
    struct worker *w;
    struct bufferevent *bev;
    struct wconn *prev, *next;       /* the worker's list */
    char peer[64];                   /* address, for logs */
    char peer_name[CL_MAX_NAME + 1]; /* from its HELLO */
    bool hello;                      /* its HELLO came (ours went back) */
    bool closing;                    /* closes once the output is written: nothing more is sent */
    bool doomed;                     /* a free is scheduled (close_soon) */
    struct u64map reqs;              /* peer request id -> tag */
    bool gateway;                    /* its HELLO says gateway: it gets our KV events */
    uint64_t kv_seq;                 /* KV events sent to it (their numbers run from 1) */
};

struct live {
    struct wconn *conn;           /* NULL once the connection is gone */
    uint64_t request;             /* the peer's id */
    uint32_t index;               /* next TOKEN index */
    char trace[CL_MAX_TRACE + 1]; /* its traceparent, for the log line */
    bool prefill;                 /* prefill-only: KV_BLOCK frames, then KV_DONE */
    uint32_t kv_sent;             /* prefill-only: KV_BLOCK frames sent */
    /* pull: its prompt's KV from prefill workers */
    char kv_peer[CL_MAX_NAME + 1]; /* their addresses, first choice first ("": no pull) */
    int kv_tries;                  /* of those, asked so far */
    char kv_from[80];              /* the one asked last */
    struct buf pull_frame;         /* the prefill-only SUBMIT, until the pull ends */
    bool pulling;                  /* a pull is under way on the link */
    double pull_t0;                /* monotonic seconds the pull began */
    uint32_t kv_got;               /* KV_BLOCK frames taken in */
    uint64_t kv_bytes;             /* their frame bytes */
    double kv_first;               /* monotonic seconds the first one came */
    int kv_held;                   /* leading blocks the pool held already */
    char kv_end[128];              /* how the pull ended, for the log line ("": none) */
    double kv_ms;                  /* how long it took */
    double kv_stream_ms;           /* from the first block to the end */
};

/* Worker counters for STATS (CL_STAT_KV_*). */
struct kv_counts {
    uint64_t blocks_in, blocks_out, pulls, pull_fallbacks;
};

struct worker {
    const struct worker_config *cfg;
    struct event_base *base;
    struct evconnlistener *lis;
    inferd_model *model;
    inferd_engine *engine;
    struct runner runner;
    bool runner_on;
    struct event *wake_ev, *stats_ev, *sig_int, *sig_term;
    struct u64map tags; /* tag -> struct live */
    uint64_t next_tag;
    struct wconn *conns;
    int n_conns;
    struct runner_msg *msgs;
    size_t cap_msgs;
    struct cl_hello me;           /* what our HELLO says */
    struct members *members;      /* Redis membership (NULL: none) */
    struct event *beat_ev;        /* its heartbeat */
    char addr[80];                /* HOST:PORT announced */
    char value[CL_MAX_NAME + 16]; /* "<role> <name>" announced */
    struct buf out;               /* encode scratch */
    struct kv_link *link;         /* KV pulls from prefill workers */
    struct kv_chain *chain;       /* KV tiers, or NULL */
    struct kv_counts kv;          /* transfer counters */
    struct u64map held;           /* folded id -> the id (16 bytes, heap) of each block in the
                                     pool: what a gateway connecting is told first */
    struct runner_kv_event *kvev; /* (cap_kvev) events taken from the runner */
    size_t cap_kvev;
    uint8_t *kvframe; /* (KV_EVENTS_PER_FRAME x CL_KV_EVENT_BYTES) encode scratch */
};

enum { KV_EVENTS_PER_FRAME = 4096 };

static uint64_t fold16(const uint8_t id[16])
{
    uint64_t a, b;
    memcpy(&a, id, 8);
    memcpy(&b, id + 8, 8);
    uint64_t k = a ^ (b * 0x9e3779b97f4a7c15ull);
    return k ? k : 1;
}

void worker_config_default(struct worker_config *c)
{
    *c = (struct worker_config){
        .host = "127.0.0.1", .role = CL_ROLE_MIXED, .max_conns = 256, .stats_ms = 250};
    node_tiers_default(&c->kv);
}

static const char *role_name(int r)
{
    return r == CL_ROLE_PREFILL   ? "prefill"
           : r == CL_ROLE_DECODE  ? "decode"
           : r == CL_ROLE_MIXED   ? "mixed"
           : r == CL_ROLE_GATEWAY ? "gateway"
                                  : "?";
}

/* Connections ------------------------------------------------------------------ */

static void send_msg(struct wconn *c, const struct cl_msg *m)
{
    struct worker *w = c->w;
    struct err_msg e = {{0}};
    if (c->closing) return;
    buf_clear(&w->out);
    if (cl_encode(m, &w->out, &e)) { /* a bug of this side: say so, send nothing */
        log_error("worker: %s frame not sent to %s: %s", cl_type_name(m->type), c->peer, e.text);
        return;
    }
    bufferevent_write(c->bev, w->out.data, w->out.len);
}

static void send_error(struct wconn *c, uint64_t request, int code, const char *text)
{
    struct cl_msg m = {.type = CL_ERROR};
    m.u.error.request = request;
    m.u.error.code = code < 0 ? code : ERR_INTERNAL;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "%s", text);
    send_msg(c, &m);
}

/* Sends ev[0..n) to gateway c, numbered on from its last. */
static void send_kv_events(struct wconn *c, const struct runner_kv_event *ev, size_t n)
{
    struct worker *w = c->w;
    if (!w->kvframe) w->kvframe = xmalloc((size_t)KV_EVENTS_PER_FRAME * CL_KV_EVENT_BYTES);
    for (size_t i = 0; i < n && !c->closing;) {
        size_t k = MIN(n - i, (size_t)KV_EVENTS_PER_FRAME);
        for (size_t j = 0; j < k; j++) {
            uint8_t *d = w->kvframe + j * CL_KV_EVENT_BYTES;
            d[0] = ev[i + j].stored ? 1 : 2;
            d[1] = 0; /* the engine's pool */
            memcpy(d + 2, ev[i + j].id, 16);
        }
        struct cl_msg m = {
            .type = CL_KV_EVENTS,
            .u.kv_events = {.seq = c->kv_seq + 1, .n = (uint32_t)k, .data = w->kvframe}};
        send_msg(c, &m);
        c->kv_seq += k;
        i += k;
    }
}

/* A gateway connected: what the pool holds, as stored events from 1. */
static void replay_kv(struct wconn *c)
{
    struct worker *w = c->w;
    size_t n = 0;
    if (w->held.n > w->cap_kvev) {
        w->cap_kvev = w->held.n;
        w->kvev = xrealloc(w->kvev, sizeof(*w->kvev) * w->cap_kvev);
    }
    for (size_t i = 0; i < w->held.cap; i++) {
        if (!w->held.slots[i].key) continue;
        w->kvev[n].stored = 1;
        memcpy(w->kvev[n++].id, w->held.slots[i].val, 16);
    }
    send_kv_events(c, w->kvev, n);
}

/* The pool's new KV events: into the held set, then to every gateway. */
static void publish_kv(struct worker *w)
{
    size_t n = runner_take_kv_events(&w->runner, &w->kvev, &w->cap_kvev);
    if (!n) return;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = fold16(w->kvev[i].id);
        uint8_t *id = u64map_get(&w->held, k);
        if (w->kvev[i].stored && !id) {
            id = xmalloc(16);
            memcpy(id, w->kvev[i].id, 16);
            u64map_put(&w->held, k, id);
        } else if (!w->kvev[i].stored && id) {
            free(id);
            u64map_del(&w->held, k);
        }
    }
    for (struct wconn *c = w->conns; c; c = c->next)
        if (c->hello && c->gateway) send_kv_events(c, w->kvev, n);
}

static void conn_free(struct wconn *c)
{
    struct worker *w = c->w;
    /* its requests: cancelled, their lives orphaned until the final message */
    for (size_t i = 0; i < c->reqs.cap; i++) {
        if (!c->reqs.slots[i].key) continue;
        uint64_t tag = (uint64_t)(uintptr_t)c->reqs.slots[i].val;
        struct live *l = u64map_get(&w->tags, tag);
        if (l) l->conn = NULL;
        runner_cancel(&w->runner, tag);
    }
    u64map_release(&c->reqs);
    bufferevent_free(c->bev);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    w->n_conns--;
    free(c);
}

static void free_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_free(arg);
}

/* Closes c once what it was sent is written; never frees it here, so a
 * caller that still holds c may look at c->closing. */
static void close_soon(struct wconn *c)
{
    c->closing = true;
    bufferevent_disable(c->bev, EV_READ);
    if (!c->doomed && evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        c->doomed = true;
        const struct timeval now = {0, 0};
        event_base_once(c->w->base, -1, EV_TIMEOUT, free_later, c, &now);
    }
}

/* A peer that broke the protocol: it hears why, then the connection closes. */
static void refuse(struct wconn *c, const char *why)
{
    log_warn("worker: connection from %s%s%s: %s; closing it", c->peer, c->peer_name[0] ? " " : "",
             c->peer_name, why);
    send_error(c, 0, ERR_PROTOCOL, why);
    close_soon(c);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct wconn *c = arg;
    if (c->closing && !c->doomed) conn_free(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct wconn *c = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (c->doomed) return; /* its free is on the way */
        log_info("worker: %s%s%s disconnected", c->peer, c->peer_name[0] ? " " : "", c->peer_name);
        conn_free(c);
    }
}

/* Requests ------------------------------------------------------------------------ */

static void on_submit(struct wconn *c, const struct cl_submit *s)
{
    struct worker *w = c->w;
    if (u64map_get(&c->reqs, s->request)) {
        char why[96];
        snprintf(why, sizeof(why), "SUBMIT of request %llu, which is still running",
                 (unsigned long long)s->request);
        refuse(c, why);
        return;
    }
    if (w->cfg->mock) {
        for (uint32_t i = 0; i < s->max_tokens; i++) {
            struct cl_msg m = {.type = CL_TOKEN};
            struct cl_token *t = &m.u.token;
            t->request = s->request;
            t->index = i;
            t->token = s->prompt[i % s->n_prompt];
            t->logprob = -1.0f;
            if (i + 1 == s->max_tokens) {
                t->finish = INFERD_FINISH_LENGTH;
                t->n_prompt = s->n_prompt;
                t->n_generated = s->max_tokens;
            }
            send_msg(c, &m);
        }
        return;
    }
    struct inferd_logit_bias *bias = NULL;
    if (s->n_logit_bias) {
        bias = xmalloc(sizeof(*bias) * s->n_logit_bias);
        for (uint32_t i = 0; i < s->n_logit_bias; i++)
            bias[i] = (struct inferd_logit_bias){s->bias_token[i], s->bias[i]};
    }
    struct inferd_grammar_limits lim;
    if (s->has_limits)
        lim = (struct inferd_grammar_limits){
            .max_rules = s->limits.max_rules,
            .max_elems = s->limits.max_elems,
            .compile_work = s->limits.compile_work,
            .compile_cpu_ms = s->limits.compile_cpu_ms,
            .max_stacks = s->limits.max_stacks,
            .max_nodes = s->limits.max_nodes,
            .step_work = s->limits.step_work,
            .mask_work = s->limits.mask_work,
            .probe_steps = s->limits.probe_steps,
            .table_bytes = s->limits.table_bytes,
        };
    struct inferd_request req = {
        .prompt = s->prompt,
        .n_prompt = (int)s->n_prompt,
        .max_tokens = (int)s->max_tokens,
        .ignore_eos = s->flags & CL_SUBMIT_IGNORE_EOS,
        .priority = s->priority,
        .cache_salt = s->cache_salt,
        .cache_salt_len = s->salt_len,
        .n_output = (int)s->n_generated,
        .grammar = {.kind = (enum inferd_grammar_kind)s->grammar_kind,
                    .source = s->grammar,
                    .len = s->grammar_len,
                    .limits = s->has_limits ? &lim : NULL},
    };
    inferd_sampling_default(&req.sampling);
    req.sampling.temperature = s->temperature;
    req.sampling.top_k = s->top_k;
    req.sampling.top_p = s->top_p;
    req.sampling.min_p = s->min_p;
    req.sampling.repetition_penalty = s->repetition_penalty;
    req.sampling.presence_penalty = s->presence_penalty;
    req.sampling.frequency_penalty = s->frequency_penalty;
    req.sampling.seed = s->seed;
    req.sampling.logprobs = s->flags & CL_SUBMIT_LOGPROBS;
    req.sampling.n_logprobs = s->n_logprobs;
    req.sampling.logit_bias = bias;
    req.sampling.n_logit_bias = (int)s->n_logit_bias;
    /* the TTL class by this worker's table (an unknown one: the default) */
    int k = s->ttl_class[0]
                ? kv_ttl_classes_find(&w->cfg->kv.ttl, s->ttl_class, strlen(s->ttl_class))
                : -1;
    int64_t ttl_s = k >= 0 ? w->cfg->kv.ttl.c[k].ttl_s : 0;
    uint64_t tag = ++w->next_tag;
    log_debug("worker: request %llu submitted: prompt=%u output=%u max_tokens=%u%s traceparent=%s",
              (unsigned long long)s->request, s->n_prompt, s->n_generated, s->max_tokens,
              s->flags & CL_SUBMIT_PREFILL ? " prefill-only" : "",
              s->traceparent[0] ? s->traceparent : "-");
    struct live *l = xcalloc(1, sizeof(*l));
    /* a resumed request's TOKEN indices go on from the output it has */
    *l = (struct live){.conn = c, .request = s->request, .index = s->n_generated};
    snprintf(l->trace, sizeof(l->trace), "%s", s->traceparent[0] ? s->traceparent : "-");
    u64map_put(&w->tags, tag, l);
    u64map_put(&c->reqs, s->request, (void *)(uintptr_t)tag);
    /* the runner copies the prompt, bias and grammar source */
    if (s->flags & CL_SUBMIT_PREFILL) {
        l->prefill = true;
        /* the prompt's KV is what is wanted: its token is never sent, so
         * nothing shapes it (no grammar, no resumed output) */
        req.max_tokens = 1;
        req.n_output = 0;
        req.grammar = (struct inferd_grammar){0};
        runner_submit_prefill(&w->runner, tag, &req, ttl_s, (int)s->kv_skip);
    } else if (s->kv_peer[0]) {
        /* the prefill worker's copy: the same request under our tag */
        struct cl_msg pm = {.type = CL_SUBMIT, .u.submit = *s};
        pm.u.submit.request = tag;
        pm.u.submit.flags |= CL_SUBMIT_PREFILL;
        pm.u.submit.max_tokens = 1;
        pm.u.submit.n_generated = 0;
        pm.u.submit.kv_peer[0] = 0;
        pm.u.submit.kv_skip = 0; /* set once the runner says what the pool holds */
        struct err_msg e = {{0}};
        snprintf(l->kv_peer, sizeof(l->kv_peer), "%s", s->kv_peer);
        if (cl_encode(&pm, &l->pull_frame, &e)) { /* cannot be: it decoded */
            log_error("worker: request %llu: %s", (unsigned long long)s->request, e.text);
            l->kv_peer[0] = 0;
        }
        runner_submit_pull(&w->runner, tag, &req, ttl_s);
    } else {
        runner_submit_ttl(&w->runner, tag, &req, ttl_s);
    }
    free(bias);
}

/* KV pulls ----------------------------------------------------------------------------- */

static void pull_end(struct worker *w, uint64_t tag, struct live *l, const char *how)
{
    l->pulling = false;
    snprintf(l->kv_end, sizeof(l->kv_end), "%s", how);
    double now = time_now_s();
    l->kv_ms = (now - l->pull_t0) * 1e3;
    l->kv_stream_ms = l->kv_got ? (now - l->kv_first) * 1e3 : 0;
    if (strcmp(how, "done")) w->kv.pull_fallbacks++;
    buf_release(&l->pull_frame);
    runner_kv_release(&w->runner, tag);
}

/* Asks the next prefill worker on l's list for the blocks the pool still
 * lacks (they come in order: it holds the first kv_held + kv_got); with
 * none left, the request computes the rest here. why: what ended the last
 * try (NULL: there was none). */
static void pull_try(struct worker *w, uint64_t tag, struct live *l, const char *why)
{
    const char *p = l->kv_peer;
    for (int i = 0; i < l->kv_tries && p; i++)
        if ((p = strchr(p, ','))) p++;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        snprintf(l->kv_from, sizeof(l->kv_from), "%.*s", (int)(comma ? comma - p : 79), p);
        p = comma ? comma + 1 : NULL;
        l->kv_tries++;
        cl_submit_set_kv_skip((uint8_t *)l->pull_frame.data, l->pull_frame.len,
                              (uint32_t)l->kv_held + l->kv_got);
        struct err_msg e = {{0}};
        if (!w->link->ops->pull(w->link, l->kv_from, tag, l->pull_frame.data, l->pull_frame.len,
                                &e)) {
            l->pulling = true;
            if (why)
                log_info("worker: request %llu: asking prefill worker %s for blocks %d on",
                         (unsigned long long)l->request, l->kv_from, l->kv_held + (int)l->kv_got);
            return;
        }
        log_warn("worker: request %llu: prefill worker %s: %s", (unsigned long long)l->request,
                 l->kv_from, e.text);
        why = "peer not reachable";
    }
    char how[128];
    snprintf(how, sizeof(how), "fallback: %s", why ? why : "no prefill worker");
    log_warn("worker: request %llu: no prefill worker left (%s); computing the rest here",
             (unsigned long long)l->request, why ? why : "none named");
    pull_end(w, tag, l, how);
}

/* The runner holds l's request for the blocks its pool lacks (the first
 * `held` it has): ask a prefill worker for the rest. */
static void pull_start(struct worker *w, uint64_t tag, struct live *l, uint32_t held)
{
    l->kv_held = (int)held;
    l->pull_t0 = time_now_s();
    w->kv.pulls++;
    pull_try(w, tag, l, NULL);
}

/* The link: a block of a pull, into the runner. */
static void on_pull_block(void *ctx, uint64_t tag, uint8_t *blob, const uint8_t *frame, size_t len)
{
    struct worker *w = ctx;
    struct live *l = u64map_get(&w->tags, tag);
    if (!l || !l->pulling) {
        free(blob);
        return;
    }
    runner_kv_import(&w->runner, tag, blob, frame, len);
    if (!l->kv_got++) l->kv_first = time_now_s();
    l->kv_bytes += len;
    w->kv.blocks_in++;
}

/* The link: a pull is over (why NULL: all came), or the next peer is asked. */
static void on_pull_end(void *ctx, uint64_t tag, const char *why)
{
    struct worker *w = ctx;
    struct live *l = u64map_get(&w->tags, tag);
    if (!l || !l->pulling) return;
    l->pulling = false;
    if (!why) {
        pull_end(w, tag, l, "done");
        return;
    }
    log_warn("worker: request %llu: prefill worker %s: %s", (unsigned long long)l->request,
             l->kv_from, why);
    pull_try(w, tag, l, why);
}

/* A request that ended while it waited: the prefill worker stops too. */
static void pull_cancel(struct worker *w, uint64_t tag, struct live *l)
{
    if (!l->pulling) return;
    w->link->ops->cancel(w->link, tag);
    l->pulling = false;
    snprintf(l->kv_end, sizeof(l->kv_end), "cancelled");
}

static void send_stats(struct wconn *c)
{
    struct runner_stats rs = {0};
    if (c->w->runner_on) runner_get_stats(&c->w->runner, &rs);
    const struct inferd_stats *e = &rs.engine;
    struct cl_msg m = {.type = CL_STATS};
    m.u.stats = (struct cl_stats){
        .running = (uint32_t)e->n_running,
        .waiting = (uint32_t)e->n_waiting,
        .loading = (uint32_t)e->n_loading,
        .kv_blocks_total = (uint32_t)e->kv_blocks_total,
        .kv_blocks_used = (uint32_t)e->kv_blocks_used,
        .kv_blocks_cached = (uint32_t)e->kv_blocks_cached,
        /* a fitted cost model's fixed part can come out below 0 */
        .step_ms_fixed = e->step_ms_fixed > 0 ? e->step_ms_fixed : 0,
        .step_ms_per_token = e->step_ms_per_token > 0 ? e->step_ms_per_token : 0,
        .tokens_per_s = e->tokens_per_s > 0 ? e->tokens_per_s : 0,
        .queued_tokens = (uint64_t)(e->queued_tokens > 0 ? e->queued_tokens : 0),
        .finished = e->n_finished,
        .counter = {[CL_STAT_STEPS] = e->n_steps,
                    [CL_STAT_DECODE_STEPS] = e->n_decode_steps,
                    [CL_STAT_DECODE_STEP_TOKENS] = e->n_decode_step_tokens,
                    [CL_STAT_PROMPT_STEPS] = e->n_prompt_steps,
                    [CL_STAT_PROMPT_TOKENS] = e->n_prompt_tokens,
                    [CL_STAT_CACHED_TOKENS] = e->n_cached_tokens,
                    [CL_STAT_GENERATED_TOKENS] = e->n_generated_tokens,
                    [CL_STAT_SUBMITTED] = e->n_submitted,
                    [CL_STAT_REJECTED] = e->n_rejected,
                    [CL_STAT_CANCELLED] = e->n_cancelled,
                    [CL_STAT_PREEMPTED] = e->n_preempted,
                    [CL_STAT_PREFIX_QUERY_TOKENS] = e->n_prefix_query_tokens,
                    [CL_STAT_PREFIX_HIT_TOKENS] = e->n_prefix_hit_tokens,
                    [CL_STAT_KV_BLOCKS_SENT] = c->w->kv.blocks_out,
                    [CL_STAT_KV_BLOCKS_RECEIVED] = c->w->kv.blocks_in,
                    [CL_STAT_KV_PULLS] = c->w->kv.pulls,
                    [CL_STAT_KV_PULL_FALLBACKS] = c->w->kv.pull_fallbacks},
        .decode_step_s = e->decode_step_s > 0 ? e->decode_step_s : 0,
        .prompt_step_s = e->prompt_step_s > 0 ? e->prompt_step_s : 0,
    };
    send_msg(c, &m);
}

/* One decoded frame from c. */
static void on_frame(struct wconn *c, const struct cl_msg *m)
{
    struct worker *w = c->w;
    if (!c->hello && m->type != CL_HELLO) {
        char why[96];
        snprintf(why, sizeof(why), "%s before HELLO", cl_type_name(m->type));
        refuse(c, why);
        return;
    }
    switch (m->type) {
    case CL_HELLO: {
        if (c->hello) {
            refuse(c, "a second HELLO");
            return;
        }
        c->hello = true;
        snprintf(c->peer_name, sizeof(c->peer_name), "%s", m->u.hello.name);
        log_info("worker: %s %s connected from %s", role_name(m->u.hello.role), c->peer_name,
                 c->peer);
        struct cl_msg me = {.type = CL_HELLO, .u.hello = w->me};
        send_msg(c, &me);
        send_stats(c);
        if (m->u.hello.role == CL_ROLE_GATEWAY) {
            c->gateway = true;
            replay_kv(c);
        }
        return;
    }
    case CL_SUBMIT:
        on_submit(c, &m->u.submit);
        return;
    case CL_CANCEL: {
        uint64_t tag = (uint64_t)(uintptr_t)u64map_get(&c->reqs, m->u.request);
        if (tag) runner_cancel(&w->runner, tag); /* one already finished: nothing to do */
        return;
    }
    case CL_PING: {
        struct cl_msg pong = {.type = CL_PONG, .u.nonce = m->u.nonce};
        send_msg(c, &pong);
        return;
    }
    case CL_STATS:
        send_stats(c); /* a peer's snapshot is news to no one: it asks for ours */
        return;
    case CL_PONG:
        return;
    case CL_ERROR:
        log_warn("worker: %s says: %s", c->peer, m->u.error.message);
        return;
    case CL_BYE:
        close_soon(c);
        return;
    case CL_PAUSE: {
        uint64_t tag = (uint64_t)(uintptr_t)u64map_get(&c->reqs, m->u.pause.request);
        if (tag) runner_pause(&w->runner, tag, m->u.pause.paused);
        return;
    }
    case CL_TOKEN:
    case CL_KV_BLOCK:
    case CL_KV_DONE:
    case CL_KV_EVENTS: {
        char why[96];
        snprintf(why, sizeof(why), "%s frames are not taken by a %s worker", cl_type_name(m->type),
                 role_name(w->cfg->role));
        refuse(c, why);
        return;
    }
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct wconn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (!c->closing) {
        struct cl_msg m;
        struct err_msg e = {{0}};
        size_t len = 0;
        int rc = cl_evbuffer_next(in, &m, &len, &e);
        if (rc < 0) refuse(c, e.text);
        if (rc <= 0) return;
        on_frame(c, &m); /* may close c, never frees it */
        cl_msg_free(&m);
        evbuffer_drain(in, len);
    }
}

static void on_accept(struct evconnlistener *lis, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    (void)lis;
    (void)salen;
    struct worker *w = arg;
    if (w->n_conns >= w->cfg->max_conns) {
        log_warn("worker: %d connections open already; one more refused", w->n_conns);
        evutil_closesocket(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct wconn *c = xcalloc(1, sizeof(*c));
    c->w = w;
    c->bev = bufferevent_socket_new(w->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
        snprintf(c->peer, sizeof(c->peer), "%s:%d", a, ntohs(in->sin_port));
    } else {
        snprintf(c->peer, sizeof(c->peer), "a peer");
    }
    c->next = w->conns;
    if (w->conns) w->conns->prev = c;
    w->conns = c;
    w->n_conns++;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_set_max_single_write(c->bev, KV_IO_BYTES); /* KV_BLOCK frames to a peer */
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* Engine events --------------------------------------------------------------------- */

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    publish_kv(w);
    size_t n = runner_drain(&w->runner, &w->msgs, &w->cap_msgs);
    for (size_t i = 0; i < n; i++) {
        const struct runner_msg *r = &w->msgs[i];
        struct live *l = u64map_get(&w->tags, r->tag);
        if (r->kind == RUNNER_MSG_KV_BLOCK) {
            if (l && l->conn && !l->conn->closing) {
                cl_evbuffer_add_kv_block(bufferevent_get_output(l->conn->bev), l->request,
                                         r->kv_index, r->kv_frame, r->kv_frame_len);
                l->kv_sent++;
                w->kv.blocks_out++;
            } else {
                free(r->kv_frame);
            }
            continue;
        }
        if (!l) continue;
        if (r->kind == RUNNER_MSG_KV_PULL) {
            pull_start(w, r->tag, l, r->kv_index);
            continue;
        }
        bool last = r->rc || r->ev.finish != INFERD_FINISH_NONE;
        if (l->conn && r->rc) {
            send_error(l->conn, l->request, r->rc, r->err);
        } else if (l->conn && l->prefill) {
            const struct inferd_event *ev = &r->ev;
            if (ev->finish == INFERD_FINISH_STOP || ev->finish == INFERD_FINISH_LENGTH) {
                struct cl_msg m = {.type = CL_KV_DONE};
                m.u.kv_done = (struct cl_kv_done){.request = l->request,
                                                  .n_blocks = l->kv_sent,
                                                  .n_computed = (uint32_t)MAX(ev->n_prompt, 0)};
                send_msg(l->conn, &m);
            } else if (ev->finish != INFERD_FINISH_NONE) {
                send_error(l->conn, l->request,
                           ev->finish == INFERD_FINISH_CANCELLED ? ERR_CANCELLED : ev->error,
                           ev->finish == INFERD_FINISH_CANCELLED ? "cancelled" : ev->message);
            }
        } else if (l->conn) {
            const struct inferd_event *ev = &r->ev;
            struct cl_msg m = {.type = CL_TOKEN};
            struct cl_token *t = &m.u.token;
            t->request = l->request;
            t->index = ev->token >= 0 ? l->index++ : l->index;
            t->token = ev->token;
            t->logprob = ev->logprob;
            t->n_top = (uint8_t)MIN(MAX(ev->n_top, 0), CL_MAX_TOP);
            for (int k = 0; k < t->n_top; k++) {
                t->top_token[k] = ev->top[k].token;
                t->top_logprob[k] = ev->top[k].logprob;
            }
            t->finish = (uint8_t)ev->finish;
            if (ev->finish != INFERD_FINISH_NONE) {
                t->n_prompt = (uint32_t)MAX(ev->n_prompt, 0);
                t->n_cached = (uint32_t)MIN(MAX(ev->n_cached, 0), ev->n_prompt);
                t->queue_s = ev->queue_s > 0 ? ev->queue_s : 0;
                t->n_generated = (uint32_t)MAX(ev->n_generated, 0);
                t->error = ev->error;
                snprintf(t->message, sizeof(t->message), "%s", ev->message);
            }
            send_msg(l->conn, &m);
        }
        if (last) {
            static const char *const fin[] = {"none", "stop", "length", "cancelled", "error"};
            pull_cancel(w, r->tag, l);
            char kv[CL_MAX_NAME + 128] = "";
            if (l->prefill)
                snprintf(kv, sizeof(kv), " prefill kv_sent=%u", l->kv_sent);
            else if (l->kv_end[0])
                snprintf(kv, sizeof(kv),
                         " kv_from=%s kv_held=%d kv_got=%u kv_bytes=%llu kv_ms=%.1f "
                         "kv_stream_ms=%.2f kv=%s",
                         l->kv_from, l->kv_held, l->kv_got, (unsigned long long)l->kv_bytes,
                         l->kv_ms, l->kv_stream_ms, l->kv_end);
            if (r->rc)
                log_info("worker: request %llu refused: %s traceparent=%s",
                         (unsigned long long)l->request, r->err, l->trace);
            else
                log_info("worker: request %llu %s prompt=%d cached=%d gen=%d%s traceparent=%s",
                         (unsigned long long)l->request, fin[r->ev.finish % 5], r->ev.n_prompt,
                         r->ev.n_cached, r->ev.n_generated, kv, l->trace);
            if (l->conn) u64map_del(&l->conn->reqs, l->request);
            u64map_del(&w->tags, r->tag);
            buf_release(&l->pull_frame);
            free(l);
        }
    }
}

static void on_stats(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    for (struct wconn *c = w->conns; c; c = c->next)
        if (c->hello && !c->closing) send_stats(c);
    if (w->link) w->link->ops->tick(w->link);
}

static void on_beat(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct worker *w = arg;
    members_announce(w->members, w->addr, w->value);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct worker *w = arg;
    log_info("worker: signal %d: stopping", (int)sig);
    event_base_loopbreak(w->base);
}

/* Setup ------------------------------------------------------------------------------ */

static int load(struct worker *w, const struct worker_config *cfg, struct err_msg *msg)
{
    char err[512];
    const char *base = strrchr(cfg->model_path, '/');
    snprintf(w->me.model, sizeof(w->me.model), "%s", base ? base + 1 : cfg->model_path);
    w->me.role = (uint8_t)cfg->role;
    if (cfg->mock) { /* the runner exists for its eventfd and empty stats only */
        w->runner.wake_fd = -1;
        return 0;
    }
    int rc = inferd_model_load(cfg->model_path, &w->model, err, sizeof(err));
    if (rc) return err_set(msg, rc, "model '%s': %s", cfg->model_path, err);
    struct inferd_engine_config ec;
    inferd_engine_config_default(&ec);
    ec.n_threads = cfg->n_threads;
    int train = inferd_model_n_ctx_train(w->model);
    ec.max_ctx = cfg->max_ctx ? cfg->max_ctx : MIN(train > 0 ? train : 4096, 4096);
    if (cfg->max_seqs) ec.max_seqs = cfg->max_seqs;
    ec.kv_blocks = cfg->kv_blocks;
    if (cfg->max_queue) ec.max_waiting = cfg->max_queue;
    bool tiers = !cfg->kv.off && cfg->kv.n > 0;
    ec.kv_events = true; /* drained by the runner: the gateways' prefix index, tiers */
    if (tiers) {
        if (node_tiers_write_back(&cfg->kv)) {
            ec.kv_evict_hook = runner_kv_evict_hook;
            ec.kv_evict_ctx = &w->runner;
        }
    }
    if ((rc = inferd_engine_new(w->model, &ec, &w->engine, err, sizeof(err))))
        return err_set(msg, rc, "engine: %s", err);
    inferd_engine_fingerprint(w->engine, w->me.fingerprint);
    w->me.block_tokens = (uint32_t)inferd_engine_block_tokens(w->engine);
    w->me.frame_bytes = (uint32_t)inferd_kv_frame_bytes(w->engine);
    w->me.max_ctx = (uint32_t)ec.max_ctx;
    if ((rc = node_tiers_open(&cfg->kv, NULL, w->engine, ec.max_ctx, &w->runner, &w->chain, msg)))
        return rc;
    if ((rc = runner_start_tiers(&w->runner, w->engine, w->chain,
                                 cfg->kv.ttl.c[cfg->kv.ttl.dflt].ttl_s, true, msg)))
        return rc;
    w->runner_on = true;
    return 0;
}

static int listen_on(struct worker *w, const struct worker_config *cfg, int *port,
                     struct err_msg *msg)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    if (inet_pton(AF_INET, cfg->host, &sa.sin_addr) != 1)
        return err_set(msg, ERR_INVALID, "--listen: '%s' is not an IPv4 address", cfg->host);
    w->lis =
        evconnlistener_new_bind(w->base, on_accept, w, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                128, (struct sockaddr *)&sa, sizeof(sa));
    if (!w->lis)
        return err_set(msg, -errno, "--listen %s:%d: %s", cfg->host, cfg->port, strerror(errno));
    struct sockaddr_in got;
    socklen_t gl = sizeof(got);
    getsockname(evconnlistener_get_fd(w->lis), (struct sockaddr *)&got, &gl);
    *port = ntohs(got.sin_port);
    return 0;
}

int worker_run(const struct worker_config *cfg, struct err_msg *msg)
{
    struct worker w = {.cfg = cfg};
    signal(SIGPIPE, SIG_IGN);
    /* KV frames (a few hundred KiB each) come and go by the hundred: keep
     * them on the heap, reused, rather than a fresh mapping each whose pages
     * fault in as the socket fills them. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    int rc = 0, port = 0;
    if (!cfg->model_path) {
        rc = err_set(msg, ERR_INVALID, "a model is needed (-m FILE)");
        goto out;
    }
    if ((rc = load(&w, cfg, msg))) goto out;
    w.base = event_base_new();
    if ((rc = listen_on(&w, cfg, &port, msg))) goto out;
    const struct kv_link_cb cb = {.ctx = &w, .block = on_pull_block, .end = on_pull_end};
    w.link = kv_link_tcp_new(w.base, &w.me, &cb);
    if (cfg->name)
        snprintf(w.me.name, sizeof(w.me.name), "%s", cfg->name);
    else
        snprintf(w.me.name, sizeof(w.me.name), "%s-%d", role_name(cfg->role), port);
    if (w.runner_on)
        w.wake_ev = event_new(w.base, w.runner.wake_fd, EV_READ | EV_PERSIST, on_wake, &w);
    w.stats_ev = event_new(w.base, -1, EV_PERSIST, on_stats, &w);
    w.sig_int = evsignal_new(w.base, SIGINT, on_signal, &w);
    w.sig_term = evsignal_new(w.base, SIGTERM, on_signal, &w);
    struct timeval every = {cfg->stats_ms / 1000, (cfg->stats_ms % 1000) * 1000};
    if (w.wake_ev) event_add(w.wake_ev, NULL);
    event_add(w.stats_ev, &every);
    event_add(w.sig_int, NULL);
    event_add(w.sig_term, NULL);
    if (cfg->redis) {
        if ((rc = members_open(cfg->redis, w.me.model, &w.members, msg))) goto out;
        snprintf(w.addr, sizeof(w.addr), "%s:%d", cfg->host, port);
        snprintf(w.value, sizeof(w.value), "%s %s", role_name(cfg->role), w.me.name);
        members_announce(w.members, w.addr, w.value);
        w.beat_ev = event_new(w.base, -1, EV_PERSIST, on_beat, &w);
        struct timeval beat = {0, MEMBERS_BEAT_MS * 1000};
        event_add(w.beat_ev, &beat);
    }
    log_info("worker %s (%s) serving '%s'%s on %s:%d", w.me.name, role_name(cfg->role), w.me.model,
             cfg->mock ? " as a mock (no engine)" : "", cfg->host, port);
    if (cfg->port_file) {
        FILE *pf = fopen(cfg->port_file, "w");
        if (pf) {
            fprintf(pf, "%d\n", port);
            fclose(pf);
        }
    }
    event_base_dispatch(w.base);
out:
    if (w.members) {
        members_withdraw(w.members, w.addr); /* out of rotation now, not at expiry */
        members_close(w.members);
    }
    if (w.beat_ev) event_free(w.beat_ev);
    while (w.conns)
        conn_free(w.conns);
    if (w.link) w.link->ops->free(w.link);
    if (w.runner_on) runner_stop(&w.runner);
    kv_chain_free(w.chain); /* after the runner: it used the chain to the end */
    for (size_t i = 0; i < w.tags.cap; i++) {
        if (!w.tags.slots[i].key) continue;
        struct live *l = w.tags.slots[i].val;
        buf_release(&l->pull_frame);
        free(l);
    }
    u64map_release(&w.tags);
    for (size_t i = 0; i < w.held.cap; i++)
        free(w.held.slots[i].val);
    u64map_release(&w.held);
    free(w.kvev);
    free(w.kvframe);
    struct event *evs[] = {w.wake_ev, w.stats_ev, w.sig_int, w.sig_term};
    for (size_t i = 0; i < ARRAY_LEN(evs); i++)
        if (evs[i]) event_free(evs[i]);
    if (w.lis) evconnlistener_free(w.lis);
    if (w.base) event_base_free(w.base);
    if (w.engine) inferd_engine_free(w.engine);
    if (w.model) inferd_model_free(w.model);
    free(w.msgs);
    buf_release(&w.out);
    return rc;
}
