/*
 * chain.c - the tier chain and its I/O thread (chain.h).
 *
 * Queues: puts and loads are two FIFO lists behind one mutex; the I/O
 * thread takes every pending load before the next put. Finished loads go to
 * a third list that kv_chain_poll drains. The tiers are touched by the I/O
 * thread only; after each job it copies their stats into the published
 * snapshot.
 */
#include "kv/chain.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

struct put_job {
    struct put_job *next; /* FIFO link */
    uint8_t id[16];       /* block */
    int64_t expires;      /* unix seconds */
    bool evicting;        /* from the pre-eviction hook: write-back tiers */
    int prompt_blocks;    /* for admission */
    bool has_parent;      /* parent is set */
    uint8_t parent[16];   /* the block before it in its prompt */
    size_t len;           /* frame bytes */
    uint8_t frame[];      /* (len) */
};

struct load_job {
    struct load_job *next;    /* FIFO link */
    struct kv_chain_load res; /* filled by the I/O thread */
    uint8_t (*ids)[16];       /* (res.n_want) */
    double recompute_ms;      /* per block; <= 0: no limit */
    int64_t expires;          /* raise a hit's expiry to this */
    double t_queued;          /* seconds (monotonic) */
    size_t frames_cap;        /* bytes of res.frames */
};

struct chain_tier {
    struct kv_tier *tier;         /* owned */
    struct kv_chain_tier_cfg cfg; /* write policy, admission */
    double ms_per_block;          /* moving average of measured block loads (0: none) */
};

struct kv_chain {
    struct kv_frame_layout layout; /* frames moved */
    size_t frame_bytes;            /* kv_frame_bytes(layout) */
    struct kv_chain_opts opts;     /* clock, wake, bounds */
    struct chain_tier tiers[KV_CHAIN_MAX_TIERS];
    int n_tiers;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* new work or stop */
    bool stopping;
    struct put_job *put_head, *put_tail;
    struct load_job *load_head, *load_tail;
    struct load_job *done_head, *done_tail;
    uint8_t *spare;              /* a frames buffer kept for the next load (NULL: none) */
    size_t spare_cap;            /* its bytes */
    size_t queue_bytes;          /* frames in put jobs */
    struct kv_chain_stats stats; /* published after each job */
};

static int64_t wall_now(void *ctx)
{
    (void)ctx;
    return (int64_t)time(NULL);
}

int64_t kv_chain_now(const struct kv_chain *c)
{
    return c->opts.now(c->opts.now_ctx);
}

int kv_chain_n_tiers(const struct kv_chain *c)
{
    return c->n_tiers;
}

int kv_chain_new(const struct kv_frame_layout *l, const struct kv_chain_opts *o,
                 struct kv_chain **out, struct err_msg *msg)
{
    (void)msg;
    struct kv_chain *c = xcalloc(1, sizeof(*c));
    c->layout = *l;
    c->frame_bytes = kv_frame_bytes(l);
    if (o) c->opts = *o;
    if (!c->opts.now) c->opts.now = wall_now;
    if (!c->opts.max_queue_bytes) c->opts.max_queue_bytes = (size_t)256 << 20;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = c;
    return 0;
}

int kv_chain_add(struct kv_chain *c, struct kv_tier *t, const struct kv_chain_tier_cfg *cfg,
                 struct err_msg *msg)
{
    if (c->started) return err_set(msg, ERR_INVALID, "kv tiers: the chain is running already");
    if (c->n_tiers == KV_CHAIN_MAX_TIERS) {
        t->ops->close(t);
        return err_set(msg, ERR_INVALID, "kv tiers: at most %d tiers", KV_CHAIN_MAX_TIERS);
    }
    c->tiers[c->n_tiers++] = (struct chain_tier){.tier = t, .cfg = *cfg};
    return 0;
}

/* Copies every tier's counters into the published snapshot (lock held). */
static void publish(struct kv_chain *c)
{
    c->stats.n_tiers = c->n_tiers;
    for (int i = 0; i < c->n_tiers; i++) {
        struct kv_chain_tier_stats *s = &c->stats.tiers[i];
        snprintf(s->name, sizeof(s->name), "%s", c->tiers[i].tier->name);
        c->tiers[i].tier->ops->stats(c->tiers[i].tier, &s->tier);
        s->ms_per_block = c->tiers[i].ms_per_block;
    }
    c->stats.queue_bytes = c->queue_bytes;
}

static void run_put(struct kv_chain *c, struct put_job *j)
{
    const enum kv_write_policy want = j->evicting ? KV_WRITE_BACK : KV_WRITE_THROUGH;
    int64_t now = kv_chain_now(c);
    for (int i = 0; i < c->n_tiers; i++) {
        struct chain_tier *t = &c->tiers[i];
        if (t->cfg.write != want || j->prompt_blocks < t->cfg.min_prompt_blocks) continue;
        t->tier->ops->put(t->tier, j->id, j->frame, j->len, j->expires, now,
                          j->has_parent ? j->parent : NULL);
    }
}

/* Frames buffers are mapped with their pages populated in one call:
 * filling a fresh 48 MiB buffer page by page costs 12,288 faults, several
 * times the copy itself. NULL when the memory is not there. */
static uint8_t *buf_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                   -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void buf_free(uint8_t *p, size_t bytes)
{
    if (p) munmap(p, bytes);
}

/* A frames buffer of at least bytes: the spare one when it is large enough
 * (its pages are mapped already), else a new one; NULL if none can be had. */
static uint8_t *take_buffer(struct kv_chain *c, size_t bytes, size_t *cap)
{
    pthread_mutex_lock(&c->mu);
    uint8_t *p = NULL;
    if (c->spare && c->spare_cap >= bytes) {
        p = c->spare;
        *cap = c->spare_cap;
        c->spare = NULL;
        c->spare_cap = 0;
    }
    pthread_mutex_unlock(&c->mu);
    if (!p) {
        p = buf_alloc(bytes);
        *cap = p ? bytes : 0;
    }
    return p;
}

/* Whether a tier before tier i holds id (then it serves it, not i). */
static bool faster_has(struct kv_chain *c, int i, const uint8_t id[16], int64_t now)
{
    for (int k = 0; k < i; k++)
        if (c->tiers[k].tier->ops->has(c->tiers[k].tier, id, now)) return true;
    return false;
}

/* Each id from the first tier that holds it, in runs: a tier serves the
 * ids from here up to the next one a faster tier holds, in one get_run. */
static void run_load(struct kv_chain *c, struct load_job *j)
{
    struct kv_chain_load *r = &j->res;
    int b = 0;
    while (b < r->n_want) {
        int64_t now = kv_chain_now(c);
        int got = 0, i = 0;
        for (; i < c->n_tiers && !got; i++) {
            struct chain_tier *t = &c->tiers[i];
            if (!t->tier->ops->has(t->tier, j->ids[b], now)) continue;
            if (j->recompute_ms > 0 && t->ms_per_block > j->recompute_ms) {
                r->cost_stop = true;
                goto out;
            }
            if (!r->frames) { /* the first block found: now a buffer is worth having */
                const size_t want = c->frame_bytes * (size_t)r->n_want;
                r->frames = take_buffer(c, want, &j->frames_cap);
                if (!r->frames) {
                    log_warn("kv tiers: no memory for a load of %d blocks; they are recomputed",
                             r->n_want);
                    goto out;
                }
            }
            int end = b + 1;
            while (end < r->n_want && !faster_has(c, i, j->ids[end], now))
                end++;
            double t0 = time_now_s();
            got = t->tier->ops->get_run(t->tier, (const uint8_t(*)[16])j->ids + b, end - b,
                                        r->frames + c->frame_bytes * (size_t)b, j->expires, now,
                                        b ? j->ids[b - 1] : NULL);
            if (!got) continue; /* a miss after all: the next tier */
            double ms = (time_now_s() - t0) * 1e3 / got;
            t->ms_per_block = t->ms_per_block > 0 ? 0.9 * t->ms_per_block + 0.1 * ms : ms;
            r->by_tier[i] += got;
        }
        if (!got) break;
        r->n_frames += got;
        b += got;
    }
out:
    r->ms = (time_now_s() - j->t_queued) * 1e3;
}

static void *io_main(void *arg)
{
    struct kv_chain *c = arg;
    if (c->opts.staging_bytes) { /* before the first load needs it, off the engine's path */
        size_t n = MIN(c->opts.staging_bytes, KV_CHAIN_SPARE_MAX);
        uint8_t *p = buf_alloc(n);
        pthread_mutex_lock(&c->mu);
        if (p && !c->spare) {
            c->spare = p;
            c->spare_cap = n;
            p = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        buf_free(p, n);
    }
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->load_head) {
            struct load_job *j = c->load_head;
            c->load_head = j->next;
            if (!c->load_head) c->load_tail = NULL;
            bool stopping = c->stopping;
            pthread_mutex_unlock(&c->mu);
            if (!stopping) run_load(c, j);
            pthread_mutex_lock(&c->mu);
            j->next = NULL;
            if (c->done_tail)
                c->done_tail->next = j;
            else
                c->done_head = j;
            c->done_tail = j;
            c->stats.loads++;
            c->stats.loads_cost_stopped += j->res.cost_stop;
            publish(c);
            pthread_mutex_unlock(&c->mu);
            if (c->opts.wake) c->opts.wake(c->opts.wake_ctx);
            pthread_mutex_lock(&c->mu);
            continue;
        }
        if (c->put_head) {
            struct put_job *j = c->put_head;
            c->put_head = j->next;
            if (!c->put_head) c->put_tail = NULL;
            pthread_mutex_unlock(&c->mu);
            run_put(c, j);
            pthread_mutex_lock(&c->mu);
            c->queue_bytes -= j->len;
            free(j);
            publish(c);
            continue;
        }
        if (c->stopping) break;
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int kv_chain_start(struct kv_chain *c, struct err_msg *msg)
{
    pthread_mutex_lock(&c->mu);
    publish(c);
    pthread_mutex_unlock(&c->mu);
    int rc = pthread_create(&c->thread, NULL, io_main, c);
    if (rc) return err_set(msg, -rc, "kv tiers: I/O thread: %s", strerror(rc));
    c->started = true;
    return 0;
}

void kv_chain_free(struct kv_chain *c)
{
    if (!c) return;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = true;
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    for (struct put_job *j = c->put_head, *n; j; j = n) {
        n = j->next;
        free(j);
    }
    for (struct load_job *j = c->load_head, *n; j; j = n) {
        n = j->next;
        free(j->ids);
        free(j);
    }
    for (struct load_job *j = c->done_head, *n; j; j = n) {
        n = j->next;
        buf_free(j->res.frames, j->frames_cap);
        free(j->ids);
        free(j);
    }
    buf_free(c->spare, c->spare_cap);
    for (int i = 0; i < c->n_tiers; i++)
        c->tiers[i].tier->ops->close(c->tiers[i].tier);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

bool kv_chain_put(struct kv_chain *c, const uint8_t id[16], const void *frame, size_t len,
                  int64_t expires, bool evicting, int prompt_blocks, const uint8_t *parent)
{
    const enum kv_write_policy want = evicting ? KV_WRITE_BACK : KV_WRITE_THROUGH;
    bool wanted = false;
    for (int i = 0; i < c->n_tiers; i++)
        wanted |=
            c->tiers[i].cfg.write == want && prompt_blocks >= c->tiers[i].cfg.min_prompt_blocks;
    if (!wanted || len != c->frame_bytes) return false;
    pthread_mutex_lock(&c->mu);
    if (c->queue_bytes + len > c->opts.max_queue_bytes) {
        c->stats.puts_dropped++;
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    c->queue_bytes += len;
    pthread_mutex_unlock(&c->mu);
    struct put_job *j = xmalloc(sizeof(*j) + len);
    memcpy(j->id, id, 16);
    j->expires = expires;
    j->evicting = evicting;
    j->prompt_blocks = prompt_blocks;
    j->has_parent = parent != NULL;
    if (parent) memcpy(j->parent, parent, 16);
    j->len = len;
    j->next = NULL;
    memcpy(j->frame, frame, len);
    pthread_mutex_lock(&c->mu);
    if (c->put_tail)
        c->put_tail->next = j;
    else
        c->put_head = j;
    c->put_tail = j;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return true;
}

void kv_chain_load(struct kv_chain *c, uint64_t tag, const uint8_t (*ids)[16], int n,
                   double recompute_ms_per_block, int64_t expires)
{
    struct load_job *j = xcalloc(1, sizeof(*j));
    j->res.tag = tag;
    j->res.n_want = MAX(n, 0);
    j->ids = xmalloc(16 * (size_t)MAX(n, 1));
    if (n > 0) memcpy(j->ids, ids, 16 * (size_t)n);
    j->recompute_ms = recompute_ms_per_block;
    j->expires = expires;
    j->t_queued = time_now_s();
    pthread_mutex_lock(&c->mu);
    if (c->load_tail)
        c->load_tail->next = j;
    else
        c->load_head = j;
    c->load_tail = j;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int kv_chain_poll(struct kv_chain *c, struct kv_chain_load *out, int cap)
{
    int n = 0;
    pthread_mutex_lock(&c->mu);
    while (n < cap && c->done_head) {
        struct load_job *j = c->done_head;
        c->done_head = j->next;
        if (!c->done_head) c->done_tail = NULL;
        out[n] = j->res;
        out[n++].frames_cap = j->frames_cap;
        free(j->ids);
        free(j);
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

void kv_chain_load_free(struct kv_chain *c, struct kv_chain_load *l)
{
    uint8_t *old = l->frames;
    size_t old_cap = l->frames_cap;
    pthread_mutex_lock(&c->mu);
    if (old && old_cap <= KV_CHAIN_SPARE_MAX && old_cap > c->spare_cap) {
        uint8_t *keep = old;
        old = c->spare;
        old_cap = c->spare_cap;
        c->spare = keep;
        c->spare_cap = l->frames_cap;
    }
    pthread_mutex_unlock(&c->mu);
    buf_free(old, old_cap);
    l->frames = NULL;
    l->frames_cap = 0;
}

void kv_chain_snapshot(struct kv_chain *c, struct kv_chain_stats *s)
{
    pthread_mutex_lock(&c->mu);
    *s = c->stats;
    s->queue_bytes = c->queue_bytes;
    pthread_mutex_unlock(&c->mu);
}
