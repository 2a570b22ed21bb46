/*
 * test_tier_redis.c - the Redis tier against a real redis-server that the
 * test starts on a Unix socket in a temporary directory and always stops by
 * its pid: frames round-trip bitwise; zero-length, truncated, flipped,
 * foreign and mislabelled values are counted misses, never bytes; expiry
 * follows `now` and sets the key's TTL; a stopped server makes every call a
 * fast miss; a restarted one serves again after the backoff.
 */
#include "test.h"

#include "base/err.h"
#include "base/timeutil.h"
#include "kv/tier_redis.h"

#include <hiredis/hiredis.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/inferd-test-redis-XXXXXX";
static char sock[300], url[320];
static pid_t redis_pid;

static void stop_redis(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = 0;
    }
}

static void cleanup(void)
{
    stop_redis();
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd)) {
    }
}

static bool start_redis(void)
{
    redis_pid = fork();
    if (redis_pid == 0) {
        int null = open("/dev/null", 1);
        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--unixsocket", sock, "--port", "0", "--save", "",
               "--appendonly", "no", "--dir", dir, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        redisContext *c = redisConnectUnix(sock);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return true;
        }
        if (c) redisFree(c);
        usleep(25000);
    }
    return false;
}

static struct kv_frame_layout layout(int fp)
{
    struct kv_frame_layout l = {.n_layer = 3, .layer_bytes = 128};
    for (int i = 0; i < 16; i++)
        l.fingerprint[i] = (uint8_t)(fp + i);
    return l;
}

static void frame_of(const struct kv_frame_layout *l, int k, uint8_t *out, uint8_t id[16])
{
    memset(id, k, 16);
    size_t n = kv_frame_bytes(l);
    for (size_t i = KV_FRAME_HEADER; i < n; i++)
        out[i] = (uint8_t)(k * 3 + i);
    kv_frame_seal(l, id, out);
}

/* Overwrites the value of block id (under layout l's prefix) with raw bytes,
 * through a plain connection. */
static void poke(const struct kv_frame_layout *l, const uint8_t id[16], const void *v, size_t n)
{
    char fp[33], hex[33], key[128];
    kv_tier_id_hex(l->fingerprint, fp);
    kv_tier_id_hex(id, hex);
    snprintf(key, sizeof(key), "inferd:kv:%s:%s", fp, hex);
    redisContext *c = redisConnectUnix(sock);
    redisReply *r = redisCommand(c, "SET %s %b", key, v, n);
    EXPECT(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    redisFree(c);
}

static long long pttl(const struct kv_frame_layout *l, const uint8_t id[16])
{
    char fp[33], hex[33], key[128];
    kv_tier_id_hex(l->fingerprint, fp);
    kv_tier_id_hex(id, hex);
    snprintf(key, sizeof(key), "inferd:kv:%s:%s", fp, hex);
    redisContext *c = redisConnectUnix(sock);
    redisReply *r = redisCommand(c, "PTTL %s", key);
    long long v = r ? r->integer : -9;
    freeReplyObject(r);
    redisFree(c);
    return v;
}

TEST(redis_tier)
{
    struct kv_frame_layout l = layout(7);
    const size_t fb = kv_frame_bytes(&l);
    const int64_t now = 1700000000;
    struct err_msg m = {{0}};
    struct kv_tier *t;
    EXPECT_EQ_INT(kv_tier_redis_open("redis://nohost", &l, 0, now, &t, &m), ERR_INVALID);
    EXPECT_EQ_INT(kv_tier_redis_open("redis://h:0", &l, 0, now, &t, &m), ERR_INVALID);
    EXPECT_EQ_INT(kv_tier_redis_open("memcached://h:1", &l, 0, now, &t, &m), ERR_INVALID);
    EXPECT_EQ_INT(kv_tier_redis_open(url, &l, 1 << 20, now, &t, &m), 0);
    uint8_t *f = malloc(fb), *got = malloc(fb), id[16];

    /* round trip, bitwise; a second put of a held block only raises expiry */
    for (int k = 1; k <= 6; k++) {
        frame_of(&l, k, f, id);
        EXPECT_EQ_INT(t->ops->put(t, id, f, fb, now + 3600, now, NULL), 0);
    }
    for (int k = 1; k <= 6; k++) {
        frame_of(&l, k, f, id);
        EXPECT(t->ops->has(t, id, now));
        EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), (long long)fb);
        EXPECT(memcmp(got, f, fb) == 0);
    }
    frame_of(&l, 1, f, id);
    long long p1 = pttl(&l, id);
    EXPECT(p1 > 3590000 && p1 <= 3600000);
    EXPECT_EQ_INT(t->ops->put(t, id, f, fb, now + 7200, now, NULL), 0);
    EXPECT(pttl(&l, id) > 7190000);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now + 5000), (long long)fb); /* header raised too */

    /* bad values: each a counted miss, deleted */
    struct kv_tier_stats s0, s1;
    t->ops->stats(t, &s0);
    frame_of(&l, 2, f, id);
    poke(&l, id, "", 0);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
    EXPECT(!t->ops->has(t, id, now));
    frame_of(&l, 3, f, id);
    uint8_t *rec = malloc(KV_TIER_RECORD_HEADER + fb);
    struct kv_tier_record r = {.expires = now + 3600, .stored = now, .frame_len = fb};
    memcpy(r.id, id, 16);
    kv_tier_record_encode(&r, rec);
    memcpy(rec + KV_TIER_RECORD_HEADER, f, fb);
    poke(&l, id, rec, KV_TIER_RECORD_HEADER + fb / 2); /* truncated */
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
    rec[KV_TIER_RECORD_HEADER + fb - 1] ^= 1; /* flipped payload byte */
    poke(&l, id, rec, KV_TIER_RECORD_HEADER + fb);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
    rec[KV_TIER_RECORD_HEADER + fb - 1] ^= 1;
    rec[20] ^= 1; /* flipped header byte */
    poke(&l, id, rec, KV_TIER_RECORD_HEADER + fb);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
    rec[20] ^= 1;
    uint8_t other[16];
    frame_of(&l, 4, f, other); /* a sound record of block 4 under block 3's key */
    memcpy(rec + KV_TIER_RECORD_HEADER, f, fb);
    memcpy(r.id, other, 16);
    kv_tier_record_encode(&r, rec);
    poke(&l, id, rec, KV_TIER_RECORD_HEADER + fb);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
    struct kv_frame_layout foreign = layout(99);
    frame_of(&foreign, 3, f, id); /* another fingerprint's frame, our key */
    memcpy(rec + KV_TIER_RECORD_HEADER, f, fb);
    memcpy(r.id, id, 16);
    kv_tier_record_encode(&r, rec);
    poke(&l, id, rec, KV_TIER_RECORD_HEADER + fb);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
    t->ops->stats(t, &s1);
    EXPECT_EQ_INT(s1.corrupt - s0.corrupt, 6);
    EXPECT_EQ_INT(s1.hits, s0.hits);

    /* expiry by the caller's clock */
    frame_of(&l, 5, f, id);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now + 7200), 0);
    t->ops->stats(t, &s1);
    EXPECT(s1.expirations >= 1);
    EXPECT(!t->ops->has(t, id, now));

    /* get_run: one pipeline per 32 blocks, bitwise, stopping before a bad
     * value; the hits' expiries (header and key) raised */
    {
        enum { N = 40 };
        uint8_t ids[N][16], *out = malloc(fb * N);
        for (int k = 0; k < N; k++) {
            frame_of(&l, 100 + k, f, ids[k]);
            EXPECT_EQ_INT(t->ops->put(t, ids[k], f, fb, now + 3600, now, NULL), 0);
        }
        frame_of(&l, 100 + 35, f, ids[35]);
        struct kv_tier_record rr = {.expires = now + 3600, .stored = now, .frame_len = fb};
        memcpy(rr.id, ids[35], 16);
        kv_tier_record_encode(&rr, rec);
        memcpy(rec + KV_TIER_RECORD_HEADER, f, fb);
        rec[KV_TIER_RECORD_HEADER + fb - 1] ^= 1;
        poke(&l, ids[35], rec, KV_TIER_RECORD_HEADER + fb);
        t->ops->stats(t, &s0);
        EXPECT_EQ_INT(t->ops->get_run(t, (const uint8_t(*)[16])ids, N, out, now + 7200, now, NULL),
                      35);
        for (int k = 0; k < 35; k++) {
            frame_of(&l, 100 + k, f, ids[k]);
            EXPECT(memcmp(out + fb * (size_t)k, f, fb) == 0);
        }
        t->ops->stats(t, &s1);
        EXPECT_EQ_INT(s1.hits - s0.hits, 35);
        EXPECT_EQ_INT(s1.corrupt - s0.corrupt, 1);
        EXPECT(pttl(&l, ids[33]) > 7190000);
        EXPECT_EQ_INT(t->ops->get(t, ids[33], out, fb, now + 5000), (long long)fb);
        EXPECT_EQ_INT(
            t->ops->get_run(t, (const uint8_t(*)[16])ids + 36, N - 36, out, now + 60, now, NULL),
            N - 36);
        free(out);
    }

    /* Redis stopped: every call a fast miss, puts fail, writable false */
    stop_redis();
    frame_of(&l, 6, f, id);
    double t0 = time_now_s();
    for (int i = 0; i < 20; i++) {
        EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), 0);
        EXPECT(t->ops->put(t, id, f, fb, now + 60, now, NULL) < 0);
        EXPECT(!t->ops->has(t, id, now));
        EXPECT_EQ_INT(t->ops->get_run(t, (const uint8_t(*)[16])id, 1, got, now + 60, now, NULL), 0);
    }
    double dt = time_now_s() - t0;
    EXPECT(dt < 1.5); /* 60 calls: the reconnects are spaced by the backoff */
    t->ops->stats(t, &s1);
    EXPECT(!s1.writable);

    /* back on the same socket: puts and hits resume within the backoff */
    EXPECT(start_redis());
    bool back = false;
    for (int i = 0; i < 120 && !back; i++) {
        back = t->ops->put(t, id, f, fb, now + 60, now, NULL) == 0;
        if (!back) usleep(100000);
    }
    EXPECT(back);
    EXPECT_EQ_INT(t->ops->get(t, id, got, fb, now), (long long)fb);
    EXPECT(memcmp(got, f, fb) == 0);
    t->ops->stats(t, &s1);
    EXPECT(s1.writable);
    t->ops->close(t);
    free(f);
    free(got);
    free(rec);
}

__attribute__((constructor)) static void setup(void)
{
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
    snprintf(url, sizeof(url), "unix:%s", sock);
    atexit(cleanup);
    if (!start_redis()) {
        fprintf(stderr, "redis-server did not start (scripts/setup.sh installs it)\n");
        exit(1);
    }
}

TEST_MAIN()
