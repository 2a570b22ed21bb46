/*
 * tier_ram.c - the RAM tier: block frames in host memory, beyond the
 * engine's attention pool (tiers.h).
 *
 *   index (tier_index.h)          heap
 *   id -> entry {expires, stored,  ---->  frame bytes (kv_frame_bytes)
 *                bytes, data} ----'
 *
 * Each entry owns one heap copy of its frame; capacity counts frame bytes.
 * No record header: the fields a record would carry live in the entry.
 * Frames are checked (kv_frame_check) when they come in and again when
 * they go out, so a bit flipped in memory is a counted miss rather than
 * wrong output.
 *
 * Memory: a frame copy that cannot be allocated fails its put (counted),
 * never the process. Thread: the chain's I/O thread.
 */
#include "kv/tier_index.h"
#include "kv/tiers.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ram_tier {
    struct kv_tier base;     /* first: the common head */
    struct kv_tier_index ix; /* id -> entry; entry->data: the frame */
    struct kv_tier_stats st; /* counters; gauges filled by ram_stats */
    size_t frame_bytes;      /* every frame's length */
};

static struct ram_tier *ram_of(struct kv_tier *t)
{
    CHECK(t->kind == KV_TIER_RAM);
    return (struct ram_tier *)t;
}

/* Drops e: an expiration when its TTL passed, else an eviction. */
static void drop(struct ram_tier *r, struct kv_tier_entry *e, int64_t now, bool corrupt)
{
    if (corrupt)
        r->st.corrupt++;
    else if (e->expires < now)
        r->st.expirations++;
    else
        r->st.evictions++;
    free(e->data);
    if (corrupt || e->expires < now)
        kv_tier_index_remove(&r->ix, e);
    else
        kv_tier_index_evict(&r->ix, e);
}

static int ram_put(struct kv_tier *t, const uint8_t id[16], const void *frame, size_t len,
                   int64_t expires, int64_t now, const uint8_t *parent)
{
    struct ram_tier *r = ram_of(t);
    struct err_msg m;
    if (len != r->frame_bytes || kv_frame_check(&t->layout, frame, len, id, NULL, &m)) {
        r->st.put_errors++;
        return ERR_INVALID;
    }
    struct kv_tier_entry *e = kv_tier_index_find(&r->ix, id);
    if (e) {
        if (expires > e->expires) e->expires = expires;
        kv_tier_index_used(&r->ix, e);
        kv_tier_index_chain(&r->ix, e, parent);
        return 0;
    }
    if (len > r->st.capacity_bytes) {
        r->st.put_errors++;
        return ERR_TOO_LARGE;
    }
    if (!kv_tier_index_admit(&r->ix, id)) {
        r->st.not_admitted++;
        return 0;
    }
    while (r->ix.used + len > r->st.capacity_bytes) {
        struct kv_tier_entry *v = kv_tier_index_victim_for(&r->ix, now, id, parent);
        if (!v) {
            r->st.not_admitted++;
            return 0;
        }
        drop(r, v, now, false);
    }
    void *copy = malloc(len);
    if (!copy) {
        r->st.put_errors++;
        return -ENOMEM;
    }
    memcpy(copy, frame, len);
    e = kv_tier_index_add(&r->ix, id, len, now, expires);
    kv_tier_index_chain(&r->ix, e, parent);
    e->data = copy;
    r->st.puts++;
    r->st.bytes_written += len;
    return 0;
}

static ssize_t ram_get(struct kv_tier *t, const uint8_t id[16], void *buf, size_t cap, int64_t now)
{
    struct ram_tier *r = ram_of(t);
    double t0 = time_now_s();
    struct kv_tier_entry *e = kv_tier_index_find(&r->ix, id);
    if (!e || cap < r->frame_bytes) goto miss;
    if (e->expires < now) {
        drop(r, e, now, false);
        goto miss;
    }
    /* copied first, checked where it lands (one pass over memory the
     * cache still holds): the bytes handed out are the bytes verified */
    memcpy(buf, e->data, r->frame_bytes);
    struct err_msg m;
    if (kv_frame_check(&t->layout, buf, r->frame_bytes, id, NULL, &m)) {
        log_warn("kv tier %s: block dropped: %s", t->name, m.text);
        drop(r, e, now, true);
        goto miss;
    }
    kv_tier_index_used(&r->ix, e);
    r->st.hits++;
    r->st.bytes_read += r->frame_bytes;
    kv_tier_stats_add_latency(&r->st, (time_now_s() - t0) * 1e3);
    return (ssize_t)r->frame_bytes;
miss:
    r->st.misses++;
    return 0;
}

static bool ram_has(struct kv_tier *t, const uint8_t id[16], int64_t now)
{
    struct kv_tier_entry *e = kv_tier_index_find(&ram_of(t)->ix, id);
    return e && e->expires >= now;
}

static int ram_touch(struct kv_tier *t, const uint8_t id[16], int64_t expires, int64_t now,
                     const uint8_t *parent)
{
    struct kv_tier_entry *e = kv_tier_index_find(&ram_of(t)->ix, id);
    if (!e || e->expires < now) return ERR_NOT_FOUND;
    if (expires > e->expires) e->expires = expires;
    kv_tier_index_used(&ram_of(t)->ix, e);
    kv_tier_index_chain(&ram_of(t)->ix, e, parent);
    return 0;
}

static void ram_stats(struct kv_tier *t, struct kv_tier_stats *out)
{
    struct ram_tier *r = ram_of(t);
    *out = r->st;
    out->used_bytes = r->ix.used;
    out->n_blocks = r->ix.n;
}

static void ram_close(struct kv_tier *t)
{
    struct ram_tier *r = ram_of(t);
    kv_tier_index_release(&r->ix, free);
    free(r);
}

static const struct kv_tier_ops ram_ops = {
    .put = ram_put,
    .get = ram_get,
    .get_run = kv_tier_get_run_each,
    .has = ram_has,
    .touch = ram_touch,
    .stats = ram_stats,
    .close = ram_close,
};

int kv_tier_ram_open(const struct kv_frame_layout *l, uint64_t capacity_bytes,
                     const struct kv_tier_policy *policy, struct kv_tier **out, struct err_msg *msg)
{
    if (!l->n_layer || !l->layer_bytes)
        return err_set(msg, ERR_INVALID, "kv tier ram: empty frame layout");
    if (!capacity_bytes) return err_set(msg, ERR_INVALID, "kv tier ram: capacity must be > 0");
    struct ram_tier *r = xcalloc(1, sizeof(*r));
    r->base = (struct kv_tier){.ops = &ram_ops, .kind = KV_TIER_RAM, .layout = *l};
    snprintf(r->base.name, sizeof(r->base.name), "ram");
    r->frame_bytes = kv_frame_bytes(l);
    r->st.capacity_bytes = capacity_bytes;
    r->st.writable = true;
    kv_tier_index_init(&r->ix, policy);
    kv_tier_index_set_capacity(&r->ix, capacity_bytes, r->frame_bytes, KV_TIER_PROTECT_SHARE);
    *out = &r->base;
    return 0;
}
