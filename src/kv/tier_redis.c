/*
 * tier_redis.c - the Redis tier (tier_redis.h).
 */
#include "kv/tier_redis.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "kv/redis_link.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct redis_tier {
    struct kv_tier base;     /* first: the tier contract */
    struct redis_link link;  /* the connection (100 ms connects, 250 ms commands) */
    char prefix[96];         /* key prefix: "inferd:kv:<fingerprint hex>:" */
    struct kv_tier_stats st; /* counters */
    size_t frame_bytes;      /* kv_frame_bytes(layout) */
    uint8_t *rec;            /* (KV_TIER_RECORD_HEADER + frame_bytes) record scratch */
};

/* A live connection, or false (fast) while down and before the next try. */
static bool connected(struct redis_tier *t)
{
    return redis_link_ctx(&t->link) != NULL;
}

static redisReply *cmd(struct redis_tier *t, int argc, const char **argv, const size_t *len)
{
    return redis_link_cmd(&t->link, argc, argv, len);
}

static void key_of(const struct redis_tier *t, const uint8_t id[16], char *key, size_t n)
{
    char hex[33];
    kv_tier_id_hex(id, hex);
    snprintf(key, n, "%s%s", t->prefix, hex);
}

static void del(struct redis_tier *t, const char *key)
{
    const char *argv[] = {"DEL", key};
    redisReply *r = cmd(t, 2, argv, NULL);
    if (r) freeReplyObject(r);
}

/* Raises a held block's expiry (header and key) to expires. 1: raised or
 * already later; 0: not held; -1: error. */
static int raise_expiry(struct redis_tier *t, const char *key, int64_t expires, int64_t now)
{
    const char *ga[] = {"GETRANGE", key, "0", "55"};
    redisReply *r = cmd(t, 4, ga, NULL);
    if (!r) return -1;
    struct kv_tier_record rec;
    struct err_msg m = {{0}};
    bool held = r->type == REDIS_REPLY_STRING && r->len == KV_TIER_RECORD_HEADER &&
                kv_tier_record_decode((const uint8_t *)r->str, &rec, &m) == 0;
    freeReplyObject(r);
    if (!held) return 0;
    if (rec.expires >= expires) return 1;
    rec.expires = expires;
    uint8_t hdr[KV_TIER_RECORD_HEADER];
    kv_tier_record_encode(&rec, hdr);
    const char *sa[] = {"SETRANGE", key, "0", (const char *)hdr};
    size_t sl[] = {8, strlen(key), 1, sizeof(hdr)};
    if ((r = cmd(t, 4, sa, sl))) freeReplyObject(r);
    char ms[32];
    snprintf(ms, sizeof(ms), "%lld", (long long)(expires - now) * 1000);
    const char *pa[] = {"PEXPIRE", key, ms, "GT"};
    if ((r = cmd(t, 4, pa, NULL))) freeReplyObject(r);
    return 1;
}

static int redis_put(struct kv_tier *base, const uint8_t id[16], const void *frame, size_t len,
                     int64_t expires, int64_t now, const uint8_t *parent)
{
    (void)parent; /* no eviction order of its own: expiry and gc (shared), Redis's own (redis) */
    struct redis_tier *t = (struct redis_tier *)base;
    if (len != t->frame_bytes || expires <= now) return ERR_INVALID;
    if (!connected(t)) {
        t->st.put_errors++;
        return ERR_UNAVAILABLE;
    }
    char key[160];
    key_of(t, id, key, sizeof(key));
    struct kv_tier_record rec = {.expires = expires, .stored = now, .frame_len = len};
    memcpy(rec.id, id, 16);
    kv_tier_record_encode(&rec, t->rec);
    memcpy(t->rec + KV_TIER_RECORD_HEADER, frame, len);
    char ms[32];
    snprintf(ms, sizeof(ms), "%lld", (long long)(expires - now) * 1000);
    const char *argv[] = {"SET", key, (const char *)t->rec, "PX", ms, "NX"};
    size_t argl[] = {3, strlen(key), KV_TIER_RECORD_HEADER + len, 2, strlen(ms), 2};
    redisReply *r = cmd(t, 6, argv, argl);
    if (!r) {
        t->st.put_errors++;
        return ERR_UNAVAILABLE;
    }
    int rc = 0;
    if (r->type == REDIS_REPLY_STATUS) {
        t->st.puts++;
        t->st.bytes_written += KV_TIER_RECORD_HEADER + len;
        t->st.used_bytes += KV_TIER_RECORD_HEADER + len;
        t->st.n_blocks++;
    } else if (r->type == REDIS_REPLY_NIL) {
        freeReplyObject(r);
        return raise_expiry(t, key, expires, now) < 0 ? ERR_UNAVAILABLE : 0;
    } else {
        /* e.g. OOM under maxmemory noeviction */
        t->st.put_errors++;
        rc = ERR_UNAVAILABLE;
    }
    freeReplyObject(r);
    return rc;
}

/* Checks a GET reply for id: 1 with the frame copied to buf (cap bytes)
 * and *rec filled, or 0 for a miss (counted; a bad or expired value is
 * deleted). Frees nothing. */
static int take_value(struct redis_tier *t, const redisReply *r, const uint8_t id[16], void *buf,
                      size_t cap, int64_t now, struct kv_tier_record *rec)
{
    if (r->type != REDIS_REPLY_STRING) {
        t->st.misses++;
        return 0;
    }
    char key[160];
    struct err_msg m = {{0}};
    const uint8_t *v = (const uint8_t *)r->str;
    bool sound = r->len >= KV_TIER_RECORD_HEADER && kv_tier_record_decode(v, rec, &m) == 0 &&
                 memcmp(rec->id, id, 16) == 0 && rec->frame_len == r->len - KV_TIER_RECORD_HEADER &&
                 rec->frame_len <= cap;
    if (sound && rec->expires <= now) {
        t->st.expirations++;
        t->st.misses++;
        key_of(t, id, key, sizeof(key));
        del(t, key);
        return 0;
    }
    /* copied first, checked where it lands: the bytes handed out are the
     * bytes verified */
    if (sound) memcpy(buf, v + KV_TIER_RECORD_HEADER, rec->frame_len);
    if (!sound || kv_frame_check(&t->base.layout, buf, rec->frame_len, id, NULL, &m) != 0) {
        t->st.corrupt++;
        t->st.misses++;
        key_of(t, id, key, sizeof(key));
        del(t, key);
        return 0;
    }
    t->st.hits++;
    t->st.bytes_read += rec->frame_len;
    return 1;
}

static ssize_t redis_get(struct kv_tier *base, const uint8_t id[16], void *buf, size_t cap,
                         int64_t now)
{
    struct redis_tier *t = (struct redis_tier *)base;
    double t0 = time_now_s();
    char key[160];
    key_of(t, id, key, sizeof(key));
    const char *argv[] = {"GET", key};
    redisReply *r = cmd(t, 2, argv, NULL);
    if (!r) {
        t->st.misses++;
        return 0;
    }
    struct kv_tier_record rec;
    int ok = take_value(t, r, id, buf, cap, now, &rec);
    freeReplyObject(r);
    if (!ok) return 0;
    kv_tier_stats_add_latency(&t->st, (time_now_s() - t0) * 1e3);
    return (ssize_t)rec.frame_len;
}

/* Replies to the n commands last appended; false (connection marked down,
 * r[] freed) when they did not all come. */
static bool replies(struct redis_tier *t, redisReply **r, int n)
{
    for (int i = 0; i < n; i++) {
        void *x = NULL;
        if (redisGetReply(t->link.c, &x) != REDIS_OK || !x) {
            for (int k = 0; k < i; k++)
                freeReplyObject(r[k]);
            redis_link_broken(&t->link);
            return false;
        }
        r[i] = x;
    }
    return true;
}

enum { REDIS_PIPELINE = 32 };

/* A pipeline of GETs per batch, then one of SETRANGE + PEXPIRE for the
 * hits whose expiry rises. */
static int redis_get_run(struct kv_tier *base, const uint8_t (*ids)[16], int n, uint8_t *out,
                         int64_t expires, int64_t now, const uint8_t *parent)
{
    (void)parent;
    struct redis_tier *t = (struct redis_tier *)base;
    int done = 0;
    while (done < n && connected(t)) {
        int m = MIN(n - done, REDIS_PIPELINE);
        char key[REDIS_PIPELINE][160];
        double t0 = time_now_s();
        for (int k = 0; k < m; k++) {
            key_of(t, ids[done + k], key[k], sizeof(key[k]));
            const char *argv[] = {"GET", key[k]};
            redisAppendCommandArgv(t->link.c, 2, argv, NULL);
        }
        redisReply *r[REDIS_PIPELINE];
        if (!replies(t, r, m)) break;
        int k = 0;
        struct kv_tier_record rec[REDIS_PIPELINE];
        for (; k < m; k++)
            if (!take_value(t, r[k], ids[done + k], out + t->frame_bytes * (size_t)(done + k),
                            t->frame_bytes, now, &rec[k]))
                break;
        for (int i = 0; i < m; i++)
            freeReplyObject(r[i]);
        double ms = (time_now_s() - t0) * 1e3 / MAX(k, 1);
        for (int i = 0; i < k; i++)
            kv_tier_stats_add_latency(&t->st, ms);
        /* raise the expiries that need it, from the headers just read */
        int raised = 0;
        for (int i = 0; i < k && t->link.c; i++) {
            if (rec[i].expires >= expires) continue;
            rec[i].expires = expires;
            uint8_t hdr[KV_TIER_RECORD_HEADER];
            kv_tier_record_encode(&rec[i], hdr);
            const char *sa[] = {"SETRANGE", key[i], "0", (const char *)hdr};
            size_t sl[] = {8, strlen(key[i]), 1, sizeof(hdr)};
            redisAppendCommandArgv(t->link.c, 4, sa, sl);
            char ms_s[32];
            snprintf(ms_s, sizeof(ms_s), "%lld", (long long)(expires - now) * 1000);
            const char *pa[] = {"PEXPIRE", key[i], ms_s, "GT"};
            redisAppendCommandArgv(t->link.c, 4, pa, NULL);
            raised += 2;
        }
        for (int i = 0; i < raised; i += REDIS_PIPELINE) {
            int c = MIN(raised - i, REDIS_PIPELINE);
            if (!replies(t, r, c)) break;
            for (int j = 0; j < c; j++)
                freeReplyObject(r[j]);
        }
        done += k;
        if (k < m) break;
    }
    return done;
}

static bool redis_has(struct kv_tier *base, const uint8_t id[16], int64_t now)
{
    struct redis_tier *t = (struct redis_tier *)base;
    (void)now;
    char key[160];
    key_of(t, id, key, sizeof(key));
    const char *argv[] = {"EXISTS", key};
    redisReply *r = cmd(t, 2, argv, NULL);
    bool yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r) freeReplyObject(r);
    return yes;
}

static int redis_touch(struct kv_tier *base, const uint8_t id[16], int64_t expires, int64_t now,
                       const uint8_t *parent)
{
    (void)parent;
    struct redis_tier *t = (struct redis_tier *)base;
    if (expires <= now) return 0;
    char key[160];
    key_of(t, id, key, sizeof(key));
    int rc = raise_expiry(t, key, expires, now);
    return rc < 0 ? ERR_UNAVAILABLE : rc == 0 ? ERR_NOT_FOUND : 0;
}

static void redis_stats(struct kv_tier *base, struct kv_tier_stats *out)
{
    struct redis_tier *t = (struct redis_tier *)base;
    /* a down server is seen as such once its retry time has come */
    t->st.writable = connected(t);
    *out = t->st;
}

static void redis_close(struct kv_tier *base)
{
    struct redis_tier *t = (struct redis_tier *)base;
    redis_link_close(&t->link);
    free(t->rec);
    free(t);
}

static const struct kv_tier_ops redis_ops = {.put = redis_put,
                                             .get_run = redis_get_run,
                                             .get = redis_get,
                                             .has = redis_has,
                                             .touch = redis_touch,
                                             .stats = redis_stats,
                                             .close = redis_close};

int kv_tier_redis_open(const char *url, const struct kv_frame_layout *l, uint64_t capacity_bytes,
                       int64_t now, struct kv_tier **out, struct err_msg *msg)
{
    (void)now;
    struct redis_tier *t = xcalloc(1, sizeof(*t));
    struct err_msg e = {{0}};
    if (redis_link_init(&t->link, url, "kv tier redis", 100, 250, &e)) {
        free(t);
        return err_set(msg, ERR_INVALID, "redis tier %s", e.text);
    }
    t->base.ops = &redis_ops;
    t->base.kind = KV_TIER_REDIS;
    snprintf(t->base.name, sizeof(t->base.name), "redis");
    t->base.layout = *l;
    char fp[33];
    kv_tier_id_hex(l->fingerprint, fp);
    snprintf(t->prefix, sizeof(t->prefix), "inferd:kv:%s:", fp);
    t->frame_bytes = kv_frame_bytes(l);
    t->rec = xmalloc(KV_TIER_RECORD_HEADER + t->frame_bytes);
    t->st.capacity_bytes = capacity_bytes;
    t->st.writable = true;
    connected(t); /* a first try now; down is fine */
    *out = &t->base;
    return 0;
}
