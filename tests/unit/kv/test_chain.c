/*
 * test_chain.c - the tier chain (kv/chain.h) over real RAM and disk tiers:
 * loads return the leading run of blocks the tiers hold, verified and in
 * order, saying which tier served each; write policies route puts; a load
 * costlier than recomputing stops; expiry follows the injected clock; and
 * tier specifications, sizes, durations and TTL classes parse or fail with
 * a message.
 */
#include "test.h"

#include "base/err.h"
#include "kv/chain.h"
#include "kv/spec.h"
#include "kv/tiers.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t fake_now = 1700000000;

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return __atomic_load_n(&fake_now, __ATOMIC_SEQ_CST);
}

static struct kv_frame_layout layout(void)
{
    struct kv_frame_layout l = {.n_layer = 2, .layer_bytes = 64};
    for (int i = 0; i < 16; i++)
        l.fingerprint[i] = (uint8_t)(0xa0 + i);
    return l;
}

/* Frame k: id bytes all k, payload bytes k + position. */
static void frame_of(const struct kv_frame_layout *l, int k, uint8_t *out, uint8_t id[16])
{
    memset(id, k, 16);
    size_t n = kv_frame_bytes(l);
    for (size_t i = KV_FRAME_HEADER; i < n; i++)
        out[i] = (uint8_t)(k + i);
    kv_frame_seal(l, id, out);
}

/* Waits (bounded) for one finished load. */
static bool wait_load(struct kv_chain *c, struct kv_chain_load *out)
{
    for (int i = 0; i < 2000; i++) {
        if (kv_chain_poll(c, out, 1) == 1) return true;
        usleep(1000);
    }
    return false;
}

/* Waits until the put queue is empty (bounded). */
static void drain(struct kv_chain *c)
{
    struct kv_chain_stats s;
    for (int i = 0; i < 2000; i++) {
        kv_chain_snapshot(c, &s);
        if (s.queue_bytes == 0) break;
        usleep(1000);
    }
    usleep(2000); /* the last job's tier call */
}

static char dir[256];

TEST(load_takes_the_leading_run_across_tiers)
{
    struct kv_frame_layout l = layout();
    const size_t fb = kv_frame_bytes(&l);
    struct err_msg msg = {{0}};
    struct kv_chain_opts o = {.now = clock_fn};
    struct kv_chain *c;
    EXPECT_EQ_INT(kv_chain_new(&l, &o, &c, &msg), 0);
    struct kv_tier *ram, *disk;
    EXPECT_EQ_INT(kv_tier_ram_open(&l, 1 << 20, &(struct kv_tier_policy){0}, &ram, &msg), 0);
    snprintf(dir, sizeof(dir), "/tmp/inferd-test-chain-%d", (int)getpid());
    EXPECT_EQ_INT(
        kv_tier_disk_open(dir, &l, 1 << 20, &(struct kv_tier_policy){0}, fake_now, &disk, &msg), 0);
    struct kv_chain_tier_cfg back = {.write = KV_WRITE_BACK}, thru = {.write = KV_WRITE_THROUGH};
    EXPECT_EQ_INT(kv_chain_add(c, ram, &back, &msg), 0);
    EXPECT_EQ_INT(kv_chain_add(c, disk, &thru, &msg), 0);
    EXPECT_EQ_INT(kv_chain_start(c, &msg), 0);

    uint8_t *f = malloc(fb), ids[6][16];
    /* blocks 0, 1 evicted (RAM); 2, 3 stored (disk); 5 stored; 4 nowhere */
    for (int k = 0; k < 6; k++) {
        frame_of(&l, k, f, ids[k]);
        if (k == 4) continue;
        EXPECT(kv_chain_put(c, ids[k], f, fb, fake_now + 3600, k < 2, 10, k ? ids[k - 1] : NULL));
    }
    EXPECT(!kv_chain_put(c, ids[0], f, fb - 1, fake_now + 3600, true, 10, NULL)); /* wrong size */
    drain(c);
    kv_chain_load(c, 77, (const uint8_t(*)[16])ids, 6, 0, fake_now + 7200);
    struct kv_chain_load r;
    EXPECT(wait_load(c, &r));
    EXPECT_EQ_INT(r.tag, 77);
    EXPECT_EQ_INT(r.n_want, 6);
    EXPECT_EQ_INT(r.n_frames, 4); /* stops at block 4 */
    EXPECT_EQ_INT(r.by_tier[0], 2);
    EXPECT_EQ_INT(r.by_tier[1], 2);
    for (int k = 0; k < r.n_frames; k++) {
        frame_of(&l, k, f, ids[k]);
        EXPECT(memcmp(r.frames + fb * (size_t)k, f, fb) == 0);
    }
    kv_chain_load_free(&r);

    /* the cost rule: a tier that costs more per block than recomputing
     * one is not read */
    kv_chain_load(c, 78, (const uint8_t(*)[16])ids, 4, 1e-9, fake_now + 7200);
    EXPECT(wait_load(c, &r));
    EXPECT_EQ_INT(r.n_frames, 0);
    EXPECT(r.cost_stop);
    kv_chain_load_free(&r);

    /* expiry: past it, every tier misses */
    __atomic_store_n(&fake_now, fake_now + 2 * 86400, __ATOMIC_SEQ_CST);
    kv_chain_load(c, 79, (const uint8_t(*)[16])ids, 4, 0, fake_now + 60);
    EXPECT(wait_load(c, &r));
    EXPECT_EQ_INT(r.n_frames, 0);
    kv_chain_load_free(&r);
    struct kv_chain_stats s;
    kv_chain_snapshot(c, &s);
    EXPECT_EQ_INT(s.n_tiers, 2);
    EXPECT_EQ_INT(s.loads, 3);
    EXPECT_EQ_INT(s.loads_cost_stopped, 1);
    EXPECT(s.tiers[0].tier.hits >= 2 && s.tiers[1].tier.hits >= 2);
    free(f);
    kv_chain_free(c);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    EXPECT_EQ_INT(system(cmd), 0);
}

TEST(specs_sizes_durations_classes)
{
    struct kv_tier_spec t;
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(kv_tier_spec_parse("ram:8GiB", &t, &m), 0);
    EXPECT(t.kind == KV_TIER_RAM && t.bytes == 8ull << 30);
    EXPECT_EQ_INT(kv_tier_spec_parse("disk:/var/cache/x:100GiB", &t, &m), 0);
    EXPECT(t.kind == KV_TIER_DISK && !strcmp(t.path, "/var/cache/x") && t.bytes == 100ull << 30);
    EXPECT_EQ_INT(kv_tier_spec_parse("disk:/var/cache/x", &t, &m), 0);
    EXPECT(t.bytes == 0 && !strcmp(t.path, "/var/cache/x"));
    EXPECT_EQ_INT(kv_tier_spec_parse("shared:/mnt/kv:1.5TiB", &t, &m), 0);
    EXPECT(t.kind == KV_TIER_SHARED && t.bytes == (uint64_t)(1.5 * (1ull << 40)));
    EXPECT_EQ_INT(kv_tier_spec_parse("redis://127.0.0.1:6379/2", &t, &m), 0);
    EXPECT(t.kind == KV_TIER_REDIS && !strcmp(t.path, "redis://127.0.0.1:6379/2"));
    EXPECT_EQ_INT(kv_tier_spec_parse("redis+unix:///tmp/r.sock", &t, &m), 0);
    EXPECT(!strcmp(t.path, "unix:/tmp/r.sock"));
    const char *bad[] = {"ram:",
                         "ram:0",
                         "ram:8XB",
                         "shared:/x",
                         "shared:/x:0",
                         "disk:",
                         "redis://host",
                         "redis://:1",
                         "redis://h:99999",
                         "redis://h:1/x",
                         "redis+unix://rel",
                         "tape:/dev/st0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        m.text[0] = 0;
        EXPECT_EQ_INT(kv_tier_spec_parse(bad[i], &t, &m), ERR_INVALID);
        EXPECT(strstr(m.text, bad[i]) != NULL);
    }
    uint64_t b;
    EXPECT_EQ_INT(kv_parse_size("512MiB", &b, &m), 0);
    EXPECT(b == 512ull << 20);
    EXPECT_EQ_INT(kv_parse_size("-1G", &b, &m), ERR_INVALID);
    int64_t d;
    EXPECT_EQ_INT(kv_parse_duration("3d", &d, &m), 0);
    EXPECT_EQ_INT(d, 3 * 86400);
    EXPECT_EQ_INT(kv_parse_duration("90m", &d, &m), 0);
    EXPECT_EQ_INT(d, 5400);
    EXPECT_EQ_INT(kv_parse_duration("0s", &d, &m), ERR_INVALID);
    EXPECT_EQ_INT(kv_parse_duration("1w", &d, &m), ERR_INVALID);
    struct kv_ttl_classes c;
    kv_ttl_classes_default(&c);
    EXPECT_EQ_INT(c.c[kv_ttl_classes_find(&c, "agent", 5)].ttl_s, 3 * 86400);
    EXPECT_EQ_INT(c.c[c.dflt].ttl_s, 7 * 86400);
    EXPECT_EQ_INT(kv_ttl_classes_set(&c, "batch=12h", &m), 0);
    EXPECT_EQ_INT(c.c[kv_ttl_classes_find(&c, "batch", 5)].ttl_s, 12 * 3600);
    EXPECT_EQ_INT(kv_ttl_classes_set(&c, "chat=1d", &m), 0);
    EXPECT_EQ_INT(c.c[kv_ttl_classes_find(&c, "chat", 4)].ttl_s, 86400);
    EXPECT_EQ_INT(c.n, 3);
    EXPECT_EQ_INT(kv_ttl_classes_set(&c, "=1d", &m), ERR_INVALID);
    EXPECT_EQ_INT(kv_ttl_classes_set(&c, "a b=1d", &m), ERR_INVALID);
    EXPECT_EQ_INT(kv_ttl_classes_set(&c, "x=soon", &m), ERR_INVALID);
}

TEST_MAIN()
