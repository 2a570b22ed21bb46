/*
 * runner.c - the engine thread (see runner.h).
 *
 * Loop: take the inbox, apply it (inferd_submit / inferd_cancel), run one
 * step, poll every event into a local batch, publish the batch and the stats
 * under the mutex, write the eventfd once if anything was published. When the
 * engine reports no work and the inbox is empty, sleep on the condition
 * variable. Cancellation reaches the engine before the next step, and the
 * engine frees the request's KV at that step boundary.
 *
 * The tag -> engine id map lives on the runner thread only (a small vector;
 * it holds the live requests, a few hundred at most).
 */
#include "serve/runner.h"

#include "base/check.h"
#include "base/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

const int runner_step_bounds[RUNNER_STEP_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 512, 1 << 30};

enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_PAUSE, CMD_RESUME };

struct runner_cmd {
    enum cmd_kind kind;        /* submit or cancel */
    uint64_t tag;              /* request */
    struct inferd_request req; /* CMD_SUBMIT: prompt and logit_bias owned */
};

struct live {
    uint64_t tag; /* caller's name */
    uint64_t id;  /* engine's name */
};

struct thread_state {
    struct live *live;         /* (n_live, cap_live) running tags */
    size_t n_live, cap_live;   /* fill / capacity */
    struct runner_msg *batch;  /* (n_batch, cap_batch) messages of this round */
    size_t n_batch, cap_batch; /* fill / capacity */
};

static struct runner_msg *batch_push(struct thread_state *t)
{
    if (t->n_batch == t->cap_batch) {
        t->cap_batch = t->cap_batch ? t->cap_batch * 2 : 64;
        t->batch = xrealloc(t->batch, sizeof(*t->batch) * t->cap_batch);
    }
    struct runner_msg *m = &t->batch[t->n_batch++];
    memset(m, 0, sizeof(*m));
    return m;
}

static void free_cmd(struct runner_cmd *c)
{
    free((void *)c->req.prompt);
    free((void *)c->req.sampling.logit_bias);
    free((void *)c->req.grammar.source);
}

static void apply(struct runner *r, struct thread_state *t, struct runner_cmd *c)
{
    if (c->kind != CMD_SUBMIT) {
        for (size_t i = 0; i < t->n_live; i++) {
            if (t->live[i].tag != c->tag) continue;
            if (c->kind == CMD_CANCEL)
                inferd_cancel(r->engine, t->live[i].id);
            else
                inferd_pause(r->engine, t->live[i].id, c->kind == CMD_PAUSE);
        }
        return;
    }
    uint64_t id;
    char err[256] = "";
    int rc = inferd_submit(r->engine, &c->req, &id, err, sizeof(err));
    if (rc) {
        struct runner_msg *m = batch_push(t);
        m->tag = c->tag;
        m->rc = rc;
        snprintf(m->err, sizeof(m->err), "%s", err);
        return;
    }
    if (t->n_live == t->cap_live) {
        t->cap_live = t->cap_live ? t->cap_live * 2 : 64;
        t->live = xrealloc(t->live, sizeof(*t->live) * t->cap_live);
    }
    t->live[t->n_live++] = (struct live){c->tag, id};
}

/* Engine events -> batch; a finish forgets the tag. */
static void collect(struct runner *r, struct thread_state *t)
{
    struct inferd_event ev;
    while (inferd_poll(r->engine, &ev)) {
        size_t i = 0;
        while (i < t->n_live && t->live[i].id != ev.request)
            i++;
        if (i == t->n_live) continue; /* already ended by a failed step */
        struct runner_msg *m = batch_push(t);
        m->tag = t->live[i].tag;
        m->ev = ev;
        if (ev.finish != INFERD_FINISH_NONE) t->live[i] = t->live[--t->n_live];
    }
}

static void wake_loop(struct runner *r)
{
    uint64_t one = 1;
    ssize_t n = write(r->wake_fd, &one, sizeof(one));
    (void)n; /* EAGAIN: the counter is already non-zero, the loop will wake */
}

static void *thread_main(void *arg)
{
    struct runner *r = arg;
    struct thread_state t = {0};
    struct runner_cmd *cmds = NULL;
    size_t n_cmds = 0, cap_cmds = 0;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        /* Swap the inbox for our (empty) vector. */
        struct runner_cmd *tmp = r->cmds;
        size_t tmp_cap = r->cap_cmds;
        n_cmds = r->n_cmds;
        r->cmds = cmds;
        r->cap_cmds = cap_cmds;
        r->n_cmds = 0;
        cmds = tmp;
        cap_cmds = tmp_cap;
        bool stopping = r->stopping;
        pthread_mutex_unlock(&r->mu);

        for (size_t i = 0; i < n_cmds; i++) {
            apply(r, &t, &cmds[i]);
            free_cmd(&cmds[i]);
        }
        if (stopping)
            for (size_t i = 0; i < t.n_live; i++)
                inferd_cancel(r->engine, t.live[i].id);
        /* No live request: nothing to step (finished ones hold no KV). */
        int n = t.n_live > 0 ? inferd_engine_step(r->engine) : 0;
        if (n < 0) {
            /* A failing step is a bug or resource exhaustion the engine could
             * not resolve: end every live request with an error rather than
             * spin on it. */
            log_error("engine step failed: %s", err_str(n));
            for (size_t i = 0; i < t.n_live; i++) {
                struct runner_msg *m = batch_push(&t);
                m->tag = t.live[i].tag;
                m->ev.request = t.live[i].id;
                m->ev.token = -1;
                m->ev.finish = INFERD_FINISH_ERROR;
                m->ev.error = n;
                inferd_cancel(r->engine, t.live[i].id);
            }
            t.n_live = 0;
        }
        collect(r, &t);
        struct inferd_stats es;
        inferd_engine_stats(r->engine, &es);

        pthread_mutex_lock(&r->mu);
        r->stats.engine = es;
        if (n > 0) {
            int b = 0;
            while (n > runner_step_bounds[b])
                b++;
            r->stats.step_hist[b]++;
            r->stats.step_tokens += (uint64_t)n;
            r->stats.n_steps++;
        }
        if (t.n_batch) {
            if (r->n_out + t.n_batch > r->cap_out) {
                r->cap_out = MAX(r->cap_out * 2, r->n_out + t.n_batch);
                r->out = xrealloc(r->out, sizeof(*r->out) * r->cap_out);
            }
            memcpy(r->out + r->n_out, t.batch, sizeof(*t.batch) * t.n_batch);
            r->n_out += t.n_batch;
            t.n_batch = 0;
            wake_loop(r);
        }
        bool busy = es.n_waiting + es.n_running > 0;
        if (stopping && !busy && t.n_live == 0) break;
        if (r->n_cmds == 0 && !r->stopping) {
            if (!busy) {
                pthread_cond_wait(&r->cv, &r->mu);
            } else if (n <= 0) {
                /* Work exists but nothing could run (e.g. waiting for KV):
                 * do not spin. */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 1000000;
                if (ts.tv_nsec >= 1000000000) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
    free(cmds);
    free(t.live);
    free(t.batch);
    return NULL;
}

int runner_start(struct runner *r, inferd_engine *e, struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    r->engine = e;
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->wake_fd < 0) return err_set(msg, -errno, "eventfd: %s", strerror(errno));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int rc = pthread_create(&r->thread, NULL, thread_main, r);
    if (rc) {
        close(r->wake_fd);
        return err_set(msg, -rc, "engine thread: %s", strerror(rc));
    }
    r->started = true;
    return 0;
}

void runner_stop(struct runner *r)
{
    if (!r->started) return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    for (size_t i = 0; i < r->n_cmds; i++)
        free_cmd(&r->cmds[i]);
    free(r->cmds);
    free(r->out);
    close(r->wake_fd);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    r->started = false;
}

static void push_cmd(struct runner *r, const struct runner_cmd *c)
{
    pthread_mutex_lock(&r->mu);
    if (r->n_cmds == r->cap_cmds) {
        r->cap_cmds = r->cap_cmds ? r->cap_cmds * 2 : 64;
        r->cmds = xrealloc(r->cmds, sizeof(*r->cmds) * r->cap_cmds);
    }
    r->cmds[r->n_cmds++] = *c;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void runner_submit(struct runner *r, uint64_t tag, const struct inferd_request *req)
{
    struct runner_cmd c = {.kind = CMD_SUBMIT, .tag = tag, .req = *req};
    int32_t *p = xmalloc(sizeof(int32_t) * (size_t)MAX(req->n_prompt, 1));
    if (req->n_prompt > 0) memcpy(p, req->prompt, sizeof(int32_t) * (size_t)req->n_prompt);
    c.req.prompt = p;
    struct inferd_logit_bias *b = NULL;
    if (req->sampling.n_logit_bias > 0) {
        b = xmalloc(sizeof(*b) * (size_t)req->sampling.n_logit_bias);
        memcpy(b, req->sampling.logit_bias, sizeof(*b) * (size_t)req->sampling.n_logit_bias);
    }
    c.req.sampling.logit_bias = b;
    if (req->grammar.source) {
        char *g = xmalloc(req->grammar.len + 1);
        memcpy(g, req->grammar.source, req->grammar.len);
        g[req->grammar.len] = 0;
        c.req.grammar.source = g;
    }
    push_cmd(r, &c);
}

void runner_cancel(struct runner *r, uint64_t tag)
{
    struct runner_cmd c = {.kind = CMD_CANCEL, .tag = tag};
    push_cmd(r, &c);
}

void runner_pause(struct runner *r, uint64_t tag, bool paused)
{
    struct runner_cmd c = {.kind = paused ? CMD_PAUSE : CMD_RESUME, .tag = tag};
    push_cmd(r, &c);
}

size_t runner_drain(struct runner *r, struct runner_msg **msgs, size_t *cap)
{
    uint64_t v;
    ssize_t rd = read(r->wake_fd, &v, sizeof(v));
    (void)rd; /* EAGAIN when nothing was signalled */
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_out;
    if (n > *cap) {
        *cap = MAX(n, *cap * 2);
        *msgs = xrealloc(*msgs, sizeof(**msgs) * *cap);
    }
    if (n) memcpy(*msgs, r->out, sizeof(*r->out) * n);
    r->n_out = 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void runner_get_stats(struct runner *r, struct runner_stats *s)
{
    pthread_mutex_lock(&r->mu);
    *s = r->stats;
    pthread_mutex_unlock(&r->mu);
}
