/*
 * test_chain.c - the tier chain (kv/chain.h) over real RAM and disk tiers:
 * loads return the leading run of blocks the tiers hold, verified and in
 * order, saying which tier served each; write policies route puts; a load
 * costlier than recomputing stops; expiry follows the injected clock; and
 * tier specifications, sizes, durations and TTL classes parse or fail with
 * a message.
 */
#include "test.h"

#include "base/check.h"
#include "base/err.h"
#include "kv/chain.h"
#include "kv/spec.h"
#include "kv/tier_dir.h"
#include "kv/tiers.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
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

/* A started chain of a 1 MiB RAM tier (write-back) and a 1 MiB disk tier
 * at d (write-through). */
static struct kv_chain *ram_disk_chain(const char *d)
{
    struct kv_frame_layout l = layout();
    struct err_msg msg = {{0}};
    struct kv_chain_opts o = {.now = clock_fn};
    struct kv_chain *c;
    CHECK(kv_chain_new(&l, &o, &c, &msg) == 0);
    struct kv_tier *ram, *disk;
    CHECK(kv_tier_ram_open(&l, 1 << 20, &(struct kv_tier_policy){0}, &ram, &msg) == 0);
    CHECK(kv_tier_disk_open(d, &l, 1 << 20, &(struct kv_tier_policy){0}, fake_now, &disk, &msg) ==
          0);
    struct kv_chain_tier_cfg back = {.write = KV_WRITE_BACK}, thru = {.write = KV_WRITE_THROUGH};
    CHECK(kv_chain_add(c, ram, &back, &msg) == 0);
    CHECK(kv_chain_add(c, disk, &thru, &msg) == 0);
    CHECK(kv_chain_start(c, &msg) == 0);
    return c;
}

TEST(load_takes_the_leading_run_across_tiers)
{
    struct kv_frame_layout l = layout();
    const size_t fb = kv_frame_bytes(&l);
    snprintf(dir, sizeof(dir), "/tmp/inferd-test-chain-%d", (int)getpid());
    struct kv_chain *c = ram_disk_chain(dir);

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
    kv_chain_load_free(c, &r);

    /* the cost rule: a tier that costs more per block than recomputing
     * one is not read */
    kv_chain_load(c, 78, (const uint8_t(*)[16])ids, 4, 1e-9, fake_now + 7200);
    EXPECT(wait_load(c, &r));
    EXPECT_EQ_INT(r.n_frames, 0);
    EXPECT(r.cost_stop);
    kv_chain_load_free(c, &r);

    /* expiry: past it, every tier misses */
    __atomic_store_n(&fake_now, fake_now + 2 * 86400, __ATOMIC_SEQ_CST);
    kv_chain_load(c, 79, (const uint8_t(*)[16])ids, 4, 0, fake_now + 60);
    EXPECT(wait_load(c, &r));
    EXPECT_EQ_INT(r.n_frames, 0);
    kv_chain_load_free(c, &r);
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

/* Flips one payload byte of id's record under dir (disk and shared layout). */
static void corrupt_record(const char *d, const uint8_t id[16])
{
    char path[PATH_MAX];
    kv_tier_dir_path(d, id, path);
    FILE *fp = fopen(path, "r+b");
    EXPECT(fp != NULL);
    if (!fp) return;
    fseek(fp, KV_TIER_RECORD_HEADER + KV_FRAME_HEADER + 10, SEEK_SET);
    int ch = fgetc(fp);
    fseek(fp, KV_TIER_RECORD_HEADER + KV_FRAME_HEADER + 10, SEEK_SET);
    fputc(ch ^ 0x40, fp);
    fclose(fp);
}

/* get_run over a directory tier holding blocks 1..100 with block 81's
 * record corrupt: two batches and part of a third, bitwise, stopping
 * before 81; the hits' expiries raised on disk. */
static void check_dir_get_run(struct kv_tier *t, const char *d)
{
    const struct kv_frame_layout l = t->layout;
    const size_t fb = kv_frame_bytes(&l);
    const int64_t now = 1700000000;
    enum { N = 100 };
    uint8_t ids[N][16], *f = malloc(fb), *out = malloc(fb * N);
    for (int k = 0; k < N; k++) {
        frame_of(&l, k + 1, f, ids[k]);
        EXPECT_EQ_INT(t->ops->put(t, ids[k], f, fb, now + 3600, now, k ? ids[k - 1] : NULL), 0);
    }
    corrupt_record(d, ids[80]);
    struct kv_tier_stats s0, s1;
    t->ops->stats(t, &s0);
    EXPECT_EQ_INT(t->ops->get_run(t, (const uint8_t(*)[16])ids, N, out, now + 7200, now, NULL), 80);
    for (int k = 0; k < 80; k++) {
        frame_of(&l, k + 1, f, ids[k]);
        EXPECT(memcmp(out + fb * (size_t)k, f, fb) == 0);
    }
    t->ops->stats(t, &s1);
    EXPECT_EQ_INT(s1.hits - s0.hits, 80);
    EXPECT_EQ_INT(s1.corrupt - s0.corrupt, 1);
    /* the expiry of a hit was raised in its record */
    char path[PATH_MAX];
    kv_tier_dir_path(d, ids[5], path);
    struct kv_tier_dir_reader rd = {0};
    struct kv_tier_io *io = kv_tier_io_new();
    struct kv_tier_dir_want w = {.path = path, .id = ids[5], .buf = f};
    kv_tier_dir_read_many(&rd, io, &l, now, &w, 1);
    EXPECT_EQ_INT(w.res, KV_TIER_READ_HIT);
    EXPECT_EQ_INT(w.rec.expires, now + 7200);
    /* the corrupt record is gone; the rest still loads, from its own start */
    kv_tier_dir_path(d, ids[80], path);
    EXPECT(access(path, F_OK) != 0);
    EXPECT_EQ_INT(
        t->ops->get_run(t, (const uint8_t(*)[16])ids + 81, N - 81, out, now + 60, now, ids[80]),
        N - 81);
    frame_of(&l, N, f, ids[N - 1]);
    EXPECT(memcmp(out + fb * (size_t)(N - 82), f, fb) == 0);
    /* past their expiry, nothing */
    EXPECT_EQ_INT(t->ops->get_run(t, (const uint8_t(*)[16])ids, 10, out, 0, now + 8000, NULL), 0);
    kv_tier_io_free(io);
    kv_tier_dir_reader_release(&rd);
    free(out);
    free(f);
}

TEST(get_run_batches_reads_and_stops_at_a_bad_record)
{
    struct kv_frame_layout l = layout();
    struct err_msg msg = {{0}};
    char d[300], cmd[400];
    snprintf(d, sizeof(d), "/tmp/inferd-test-getrun-%d", (int)getpid());
    struct kv_tier *t;
    EXPECT_EQ_INT(
        kv_tier_disk_open(d, &l, 1 << 20, &(struct kv_tier_policy){0}, 1700000000, &t, &msg), 0);
    check_dir_get_run(t, d);
    t->ops->close(t);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    EXPECT_EQ_INT(system(cmd), 0);
    EXPECT_EQ_INT(kv_tier_shared_open(d, &l, 1 << 20, 1700000000, &t, &msg), 0);
    check_dir_get_run(t, d);
    t->ops->close(t);
    EXPECT_EQ_INT(system(cmd), 0);
}

/* A load whose blocks sit in two tiers takes each from the first that holds
 * it, in runs: RAM holds block 3, disk all six. */
TEST(load_switches_tiers_inside_a_run)
{
    struct kv_frame_layout l = layout();
    const size_t fb = kv_frame_bytes(&l);
    char d[300];
    snprintf(d, sizeof(d), "/tmp/inferd-test-chain2-%d", (int)getpid());
    struct kv_chain *c = ram_disk_chain(d);
    uint8_t *f = malloc(fb), ids[6][16];
    for (int k = 0; k < 6; k++) {
        frame_of(&l, 20 + k, f, ids[k]);
        EXPECT(kv_chain_put(c, ids[k], f, fb, fake_now + 3600, false, 10, k ? ids[k - 1] : NULL));
        if (k == 3) EXPECT(kv_chain_put(c, ids[k], f, fb, fake_now + 3600, true, 10, ids[2]));
    }
    drain(c);
    struct kv_chain_load r;
    for (int round = 0; round < 2; round++) { /* the second reuses the first's buffer */
        kv_chain_load(c, 90 + round, (const uint8_t(*)[16])ids, 6, 0, fake_now + 7200);
        EXPECT(wait_load(c, &r));
        EXPECT_EQ_INT(r.n_frames, 6);
        EXPECT_EQ_INT(r.by_tier[0], 1);
        EXPECT_EQ_INT(r.by_tier[1], 5);
        for (int k = 0; k < 6; k++) {
            frame_of(&l, 20 + k, f, ids[k]);
            EXPECT(memcmp(r.frames + fb * (size_t)k, f, fb) == 0);
        }
        kv_chain_load_free(c, &r);
    }
    free(f);
    kv_chain_free(c);
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
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
