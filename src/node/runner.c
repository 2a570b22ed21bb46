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
#include "node/runner.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

const int runner_step_bounds[RUNNER_STEP_BUCKETS] = {1, 2, 4, 8, 16, 32, 64, 128, 512, 1 << 30};

enum cmd_kind { CMD_SUBMIT, CMD_CANCEL, CMD_PAUSE, CMD_RESUME, CMD_IMPORT, CMD_RELEASE };

/* How a submit's prompt blocks move (runner.h, KV transfer). */
enum submit_mode { SUBMIT_PLAIN, SUBMIT_PREFILL, SUBMIT_PULL };

struct runner_cmd {
    enum cmd_kind kind;        /* what to do */
    uint64_t tag;              /* request */
    struct inferd_request req; /* CMD_SUBMIT: prompt and logit_bias owned */
    int64_t ttl_s;             /* CMD_SUBMIT: its blocks' time to live (0: default) */
    enum submit_mode mode;     /* CMD_SUBMIT */
    int kv_skip;               /* CMD_SUBMIT prefill: leading blocks not to hand out */
    void *blob;                /* CMD_IMPORT: owned buffer holding the frame */
    const uint8_t *frame;      /* CMD_IMPORT: (frame_len) inside blob */
    size_t frame_len;          /* CMD_IMPORT */
};

/* What the tier side knows of a live request's prompt. */
struct kv_owner {
    int64_t ttl_s;                       /* its class's time to live */
    int n_ids;                           /* full prompt blocks */
    uint8_t (*ids)[16];                  /* (n_ids) their ids */
    int tier_blocks[KV_CHAIN_MAX_TIERS]; /* blocks each tier served it */
};

/* A prefill request's prompt blocks, handed out as they fill. */
struct kv_stream {
    int n;              /* blocks to hand out: full ones but the last token's */
    int next;           /* the first not handed out yet */
    uint8_t (*ids)[16]; /* (n) their ids */
};

struct live {
    uint64_t tag;         /* caller's name */
    uint64_t id;          /* engine's name */
    struct kv_owner *own; /* tiers on: its prompt's blocks, else NULL */
    struct kv_stream *st; /* prefill: its blocks to hand out, else NULL */
    bool held;            /* pull: waiting for runner_kv_release */
};

struct thread_state {
    struct live *live;           /* (n_live, cap_live) running tags */
    size_t n_live, cap_live;     /* fill / capacity */
    struct runner_msg *batch;    /* (n_batch, cap_batch) messages of this round */
    size_t n_batch, cap_batch;   /* fill / capacity */
    struct u64map imported;      /* folded ids of blocks just imported from a tier */
    struct runner_kv_event *pub; /* (n_pub, cap_pub) this round's pool events (kv_publish) */
    size_t n_pub, cap_pub;
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
    free((void *)c->req.cache_salt);
    free(c->blob);
}

/* A block id as a u64map key (non-zero). */
static uint64_t fold_id(const uint8_t id[16])
{
    uint64_t k;
    memcpy(&k, id + 8, 8);
    return k ? k : 1;
}

static int64_t owner_ttl(const struct runner *r, const struct kv_owner *o)
{
    return o && o->ttl_s > 0 ? o->ttl_s : r->kv.default_ttl_s;
}

static void owner_free(struct runner *r, struct kv_owner *o)
{
    if (!o) return;
    for (int i = 0; i < o->n_ids; i++)
        if (u64map_get(&r->kv.owners, fold_id(o->ids[i])) == o)
            u64map_del(&r->kv.owners, fold_id(o->ids[i]));
    free(o->ids);
    free(o);
}

/* Tiers on: names c's prompt blocks and decides whether to hold it for a
 * tier load (the pool lacks some of the blocks admission would attach). */
static struct kv_owner *kv_prepare(struct runner *r, struct runner_cmd *c, int *from, int *to)
{
    const int bt = r->kv.block_tokens;
    struct kv_owner *o = xcalloc(1, sizeof(*o));
    o->ttl_s = c->ttl_s;
    int n_full = c->req.n_prompt / bt;
    o->ids = xmalloc(16 * (size_t)MAX(n_full, 1));
    o->n_ids = inferd_kv_block_ids(r->kv.fingerprint, bt, c->req.cache_salt, c->req.cache_salt_len,
                                   c->req.prompt, c->req.n_prompt, o->ids, n_full);
    /* admission attaches all but the block holding the last prompt token */
    int usable = MIN(o->n_ids, (c->req.n_prompt - 1) / bt);
    *from = inferd_kv_cached_prefix(r->engine, (const uint8_t(*)[16])o->ids, usable);
    *to = usable;
    c->req.hold = *from < usable;
    return o;
}

static void stream_free(struct kv_stream *st)
{
    if (!st) return;
    free(st->ids);
    free(st);
}

static void apply(struct runner *r, struct thread_state *t, struct runner_cmd *c)
{
    if (c->kind != CMD_SUBMIT) {
        for (size_t i = 0; i < t->n_live; i++) {
            struct live *lv = &t->live[i];
            if (lv->tag != c->tag) continue;
            if (c->kind == CMD_CANCEL) {
                inferd_cancel(r->engine, lv->id);
            } else if (c->kind == CMD_IMPORT) {
                char err[256];
                int rc = lv->held
                             ? inferd_kv_import(r->engine, c->frame, c->frame_len, err, sizeof(err))
                             : 0;
                if (rc)
                    log_warn("kv transfer: a block not imported (it is computed): %s", err);
                else if (lv->held && r->kv.chain) /* its prefill worker stored it already */
                    u64map_put(&t->imported, fold_id(c->frame + 24), (void *)1);
            } else if (c->kind == CMD_RELEASE) {
                if (lv->held) inferd_kv_release_hold(r->engine, lv->id);
                lv->held = false;
            } else {
                inferd_pause(r->engine, lv->id, c->kind == CMD_PAUSE);
            }
        }
        return;
    }
    uint64_t id;
    char err[256] = "";
    int from = 0, to = 0;
    /* a pull takes its blocks from the prefill worker, which has tiers of its own */
    struct kv_owner *own = r->kv.chain && c->mode != SUBMIT_PULL && c->req.n_prompt > 0
                               ? kv_prepare(r, c, &from, &to)
                               : NULL;
    struct kv_stream *st = NULL;
    int held_blocks = -1; /* pull: leading blocks the pool holds, when it lacks some */
    if (c->mode != SUBMIT_PLAIN && r->kv.frame_bytes && c->req.n_prompt > 0) {
        const int bt = r->kv.block_tokens;
        int usable = (c->req.n_prompt - 1) / bt; /* admission attaches no more */
        uint8_t(*ids)[16] = xmalloc(16 * (size_t)MAX(usable, 1));
        usable =
            inferd_kv_block_ids(r->kv.fingerprint, bt, c->req.cache_salt, c->req.cache_salt_len,
                                c->req.prompt, c->req.n_prompt, ids, usable);
        if (c->mode == SUBMIT_PREFILL && usable > 0) {
            st = xcalloc(1, sizeof(*st));
            *st = (struct kv_stream){
                .n = usable, .next = MIN(MAX(c->kv_skip, 0), usable), .ids = ids};
            ids = NULL;
        } else if (c->mode == SUBMIT_PULL && usable > 0) {
            int have = inferd_kv_cached_prefix(r->engine, (const uint8_t(*)[16])ids, usable);
            if (have < usable) {
                c->req.hold = true;
                held_blocks = have;
            }
        }
        free(ids);
    }
    int rc = inferd_submit(r->engine, &c->req, &id, err, sizeof(err));
    if (rc) {
        struct runner_msg *m = batch_push(t);
        m->tag = c->tag;
        m->rc = rc;
        snprintf(m->err, sizeof(m->err), "%s", err);
        owner_free(r, own);
        stream_free(st);
        return;
    }
    if (t->n_live == t->cap_live) {
        t->cap_live = t->cap_live ? t->cap_live * 2 : 64;
        t->live = xrealloc(t->live, sizeof(*t->live) * t->cap_live);
    }
    t->live[t->n_live++] = (struct live){c->tag, id, own, st, held_blocks >= 0};
    if (held_blocks >= 0) {
        struct runner_msg *m = batch_push(t);
        m->tag = c->tag;
        m->kind = RUNNER_MSG_KV_PULL;
        m->kv_index = (uint32_t)held_blocks;
    }
    if (!own) return;
    for (int i = 0; i < own->n_ids; i++)
        u64map_put(&r->kv.owners, fold_id(own->ids[i]), own);
    if (c->req.hold) {
        /* Recomputing one block costs block_tokens tokens of a step. */
        double ms = r->stats.engine.step_ms_per_token * r->kv.block_tokens;
        kv_chain_load(r->kv.chain, id, (const uint8_t(*)[16])own->ids + from, to - from, ms,
                      kv_chain_now(r->kv.chain) + owner_ttl(r, own));
    }
}

static struct live *find_live(struct thread_state *t, uint64_t id)
{
    for (size_t i = 0; i < t->n_live; i++)
        if (t->live[i].id == id) return &t->live[i];
    return NULL;
}

/* Finished tier loads: their frames into the pool, the holds released. */
static void kv_loaded(struct runner *r, struct thread_state *t)
{
    struct kv_chain_load done[16];
    int n;
    while ((n = kv_chain_poll(r->kv.chain, done, (int)ARRAY_LEN(done))) > 0) {
        for (int k = 0; k < n; k++) {
            struct kv_chain_load *l = &done[k];
            struct live *lv = find_live(t, l->tag);
            if (lv) {
                int imported = 0;
                double t0 = time_now_s();
                for (int b = 0; b < l->n_frames; b++) {
                    const uint8_t *f = l->frames + r->kv.frame_bytes * (size_t)b;
                    char err[256];
                    int rc = inferd_kv_import(r->engine, f, r->kv.frame_bytes, err, sizeof(err));
                    if (rc) {
                        log_warn("kv tiers: import failed, the rest is recomputed: %s", err);
                        break;
                    }
                    u64map_put(&t->imported, fold_id(f + 24), (void *)1);
                    imported++;
                }
                for (int i = 0, left = imported; i < kv_chain_n_tiers(r->kv.chain); i++) {
                    int got = MIN(l->by_tier[i], left);
                    lv->own->tier_blocks[i] += got;
                    left -= got;
                }
                log_debug("kv tiers: request %llu: %d of %d blocks loaded in %.1f ms, imported in "
                          "%.1f ms%s",
                          (unsigned long long)l->tag, imported, l->n_want, l->ms,
                          (time_now_s() - t0) * 1e3,
                          l->cost_stop ? " (the rest is cheaper to recompute)" : "");
                inferd_kv_release_hold(r->engine, l->tag);
            }
            kv_chain_load_free(r->kv.chain, l);
        }
    }
}

/* The block before id in o's prompt; NULL for the first, or when id is
 * not o's (or no o). */
static const uint8_t *owner_parent(const struct kv_owner *o, const uint8_t id[16])
{
    for (int i = 1; o && i < o->n_ids; i++)
        if (!memcmp(o->ids[i], id, 16)) return o->ids[i - 1];
    return NULL;
}

/* Blocks that entered the prefix index -> write-through tiers. */
static void kv_stored(struct runner *r, struct thread_state *t)
{
    struct inferd_kv_event ev[64];
    int n;
    while ((n = inferd_kv_events(r->engine, ev, (int)ARRAY_LEN(ev))) > 0) {
        for (int i = 0; i < n && r->kv_publish; i++) {
            if (t->n_pub == t->cap_pub) {
                t->cap_pub = t->cap_pub ? 2 * t->cap_pub : 256;
                t->pub = xrealloc(t->pub, sizeof(*t->pub) * t->cap_pub);
            }
            struct runner_kv_event *p = &t->pub[t->n_pub++];
            p->stored = ev[i].kind == INFERD_KV_STORED;
            memcpy(p->id, ev[i].id, 16);
        }
        for (int i = 0; i < n && r->kv.chain; i++) {
            if (ev[i].kind != INFERD_KV_STORED) continue;
            uint64_t key = fold_id(ev[i].id);
            if (u64map_get(&t->imported, key)) {
                u64map_del(&t->imported, key); /* came from a tier: it is there already */
                continue;
            }
            if (inferd_kv_export(r->engine, ev[i].id, r->kv.frame, r->kv.frame_bytes)) continue;
            const struct kv_owner *o = u64map_get(&r->kv.owners, key);
            kv_chain_put(r->kv.chain, ev[i].id, r->kv.frame, r->kv.frame_bytes,
                         kv_chain_now(r->kv.chain) + owner_ttl(r, o), false, o ? o->n_ids : 0,
                         owner_parent(o, ev[i].id));
        }
    }
}

void runner_kv_evict_hook(void *ctx, const uint8_t id[16], const void *frame, size_t len)
{
    struct runner *r = ctx;
    if (!r->kv.chain) return;
    const struct kv_owner *o = u64map_get(&r->kv.owners, fold_id(id));
    kv_chain_put(r->kv.chain, id, frame, len, kv_chain_now(r->kv.chain) + owner_ttl(r, o), true,
                 o ? o->n_ids : 0, owner_parent(o, id));
}

void runner_kv_wake(void *ctx)
{
    struct runner *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->kv_ready = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Prefill requests: the blocks that filled since the last step, out as
 * frames (before collect, so that they precede the request's finish and
 * are exported while the request still holds them). */
static void kv_stream_out(struct runner *r, struct thread_state *t)
{
    for (size_t i = 0; i < t->n_live; i++) {
        struct kv_stream *st = t->live[i].st;
        if (!st || st->next == st->n) continue;
        int have = inferd_kv_cached_prefix(r->engine, (const uint8_t(*)[16])st->ids, st->n);
        for (; st->next < have; st->next++) {
            uint8_t *f = xmalloc(r->kv.frame_bytes);
            if (inferd_kv_export(r->engine, st->ids[st->next], f, r->kv.frame_bytes)) {
                free(f); /* cannot be: cached_prefix said it is held */
                break;
            }
            struct runner_msg *m = batch_push(t);
            m->tag = t->live[i].tag;
            m->kind = RUNNER_MSG_KV_BLOCK;
            m->kv_index = (uint32_t)st->next;
            m->kv_frame = f;
            m->kv_frame_len = r->kv.frame_bytes;
        }
    }
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
        if (ev.finish != INFERD_FINISH_NONE) {
            if (t->live[i].own) {
                memcpy(m->kv_tier_blocks, t->live[i].own->tier_blocks, sizeof(m->kv_tier_blocks));
                owner_free(r, t->live[i].own);
            }
            stream_free(t->live[i].st);
            t->live[i] = t->live[--t->n_live];
        }
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
        bool kv_ready = r->kv_ready;
        r->kv_ready = false;
        pthread_mutex_unlock(&r->mu);

        for (size_t i = 0; i < n_cmds; i++) {
            apply(r, &t, &cmds[i]);
            free_cmd(&cmds[i]);
        }
        if (kv_ready) kv_loaded(r, &t);
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
        kv_stream_out(r, &t);
        collect(r, &t);
        kv_stored(r, &t);
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
        if (t.n_pub) {
            if (r->n_pub + t.n_pub > r->cap_pub) {
                r->cap_pub = MAX(r->cap_pub * 2, r->n_pub + t.n_pub);
                r->pub = xrealloc(r->pub, sizeof(*r->pub) * r->cap_pub);
            }
            memcpy(r->pub + r->n_pub, t.pub, sizeof(*t.pub) * t.n_pub);
            r->n_pub += t.n_pub;
            t.n_pub = 0;
            if (!t.n_batch) wake_loop(r);
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
        if (r->n_cmds == 0 && !r->stopping && !r->kv_ready) {
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
    for (size_t i = 0; i < t.n_live; i++) {
        owner_free(r, t.live[i].own);
        stream_free(t.live[i].st);
    }
    free(cmds);
    free(t.live);
    free(t.batch);
    free(t.pub);
    u64map_release(&t.imported);
    return NULL;
}

int runner_start(struct runner *r, inferd_engine *e, struct err_msg *msg)
{
    return runner_start_tiers(r, e, NULL, 0, false, msg);
}

int runner_start_tiers(struct runner *r, inferd_engine *e, struct kv_chain *chain,
                       int64_t default_ttl_s, bool publish_kv, struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    r->kv_publish = publish_kv;
    r->engine = e;
    /* block ids and frames: tiers and KV transfer */
    inferd_engine_fingerprint(e, r->kv.fingerprint);
    r->kv.block_tokens = inferd_engine_block_tokens(e);
    r->kv.frame_bytes = inferd_kv_frame_bytes(e);
    if (chain) {
        r->kv.chain = chain;
        r->kv.default_ttl_s = default_ttl_s;
        r->kv.frame = xmalloc(MAX(r->kv.frame_bytes, 1));
    }
    r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (r->wake_fd < 0) return err_set(msg, -errno, "eventfd: %s", strerror(errno));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int rc;
    if (chain && (rc = kv_chain_start(chain, msg))) {
        close(r->wake_fd);
        free(r->kv.frame);
        return rc;
    }
    rc = pthread_create(&r->thread, NULL, thread_main, r);
    if (rc) {
        close(r->wake_fd);
        free(r->kv.frame);
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
    for (size_t i = 0; i < r->n_out; i++)
        free(r->out[i].kv_frame);
    free(r->out);
    free(r->pub);
    free(r->kv.frame);
    u64map_release(&r->kv.owners);
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
    /* the thread waits only on an empty inbox: one signal wakes it for all */
    if (r->n_cmds++ == 0) pthread_cond_signal(&r->cv);
    r->cmds[r->n_cmds - 1] = *c;
    pthread_mutex_unlock(&r->mu);
}

size_t runner_take_kv_events(struct runner *r, struct runner_kv_event **v, size_t *cap)
{
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_pub;
    if (n > *cap) {
        *cap = MAX(n, 2 * *cap);
        *v = xrealloc(*v, sizeof(**v) * *cap);
    }
    if (n) memcpy(*v, r->pub, sizeof(**v) * n);
    r->n_pub = 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

void runner_submit(struct runner *r, uint64_t tag, const struct inferd_request *req)
{
    runner_submit_ttl(r, tag, req, 0);
}

static void submit_cmd(struct runner *r, uint64_t tag, const struct inferd_request *req,
                       int64_t ttl_s, enum submit_mode mode, int kv_skip)
{
    struct runner_cmd c = {.kind = CMD_SUBMIT,
                           .tag = tag,
                           .req = *req,
                           .ttl_s = ttl_s,
                           .mode = mode,
                           .kv_skip = kv_skip};
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
    c.req.cache_salt = NULL;
    if (req->cache_salt_len > 0) {
        char *salt = xmalloc(req->cache_salt_len);
        memcpy(salt, req->cache_salt, req->cache_salt_len);
        c.req.cache_salt = salt;
    }
    push_cmd(r, &c);
}

void runner_submit_ttl(struct runner *r, uint64_t tag, const struct inferd_request *req,
                       int64_t ttl_s)
{
    submit_cmd(r, tag, req, ttl_s, SUBMIT_PLAIN, 0);
}

void runner_submit_prefill(struct runner *r, uint64_t tag, const struct inferd_request *req,
                           int64_t ttl_s, int kv_skip)
{
    submit_cmd(r, tag, req, ttl_s, SUBMIT_PREFILL, kv_skip);
}

void runner_submit_pull(struct runner *r, uint64_t tag, const struct inferd_request *req,
                        int64_t ttl_s)
{
    submit_cmd(r, tag, req, ttl_s, SUBMIT_PULL, 0);
}

void runner_kv_import(struct runner *r, uint64_t tag, void *blob, const uint8_t *frame, size_t len)
{
    struct runner_cmd c = {
        .kind = CMD_IMPORT, .tag = tag, .blob = blob, .frame = frame, .frame_len = len};
    push_cmd(r, &c);
}

void runner_kv_release(struct runner *r, uint64_t tag)
{
    struct runner_cmd c = {.kind = CMD_RELEASE, .tag = tag};
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
