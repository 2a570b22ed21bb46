/*
 * tier_shared.c - the shared-directory tier (tiers.h): a directory many
 * processes or machines mount (CephFS, 3FS, Lustre, NFS).
 *
 * The filesystem is the index: has and get look at the file itself, so a
 * block another process published is a hit here at once, and one it
 * removed is a miss. Publishing is atomic: the record is written under a
 * temporary name unique to this host, process and write
 * (.HEX.HOST.PID.N.tmp), fsynced, renamed to its final name, and the
 * directory fsynced, so a reader sees a complete record or none. Capacity
 * and expiry are enforced by gc passes (tier_dir.h: earliest expiry
 * first), at open and then every KV_TIER_SHARED_GC_S seconds, by whichever
 * processes run one; two passes at once are harmless (each removal is of
 * the inode looked at).
 */
#include "kv/tier_dir.h"
#include "kv/tiers.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct shared_tier {
    struct kv_tier base;             /* first: the common head */
    char dir[PATH_MAX];              /* the directory */
    char host[64];                   /* this host's name, for temporary names */
    struct kv_tier_io *io;           /* the ring */
    struct kv_tier_dir_reader rd;    /* read mode, O_DIRECT buffer */
    struct kv_tier_stats st;         /* counters; gauges from the last gc pass and our puts */
    size_t frame_bytes;              /* every frame's length */
    uint64_t n_tmp;                  /* temporary names used */
    int64_t next_gc;                 /* unix seconds of the next gc pass */
    int64_t retry_at;                /* unwritable: the first put that tries again */
    struct kv_tier_dir_batch *batch; /* get_run's scratch */
};

static struct shared_tier *shared_of(struct kv_tier *t)
{
    CHECK(t->kind == KV_TIER_SHARED);
    return (struct shared_tier *)t;
}

static void set_writable(struct shared_tier *s, bool ok, int err, int64_t now)
{
    if (!ok) s->retry_at = now + KV_TIER_RETRY_S;
    if (ok == s->st.writable) return;
    s->st.writable = ok;
    if (ok)
        log_info("kv tier shared %s: writing again", s->dir);
    else
        log_warn("kv tier shared %s: cannot write (%s); serving what is there, retrying in %d s",
                 s->dir, strerror(-err), KV_TIER_RETRY_S);
}

static void gc_pass(struct shared_tier *s, int64_t now)
{
    struct kv_tier_gc_opts o = {.now = now,
                                .layout = &s->base.layout,
                                .max_bytes = s->st.capacity_bytes,
                                .target_bytes = s->st.capacity_bytes - s->st.capacity_bytes / 10,
                                .temp_grace_s = KV_TIER_SHARED_TEMP_GRACE_S};
    struct kv_tier_gc_report r = {0};
    struct err_msg m = {{0}};
    if (kv_tier_dir_gc(s->io, s->dir, &o, &r, &m)) {
        log_warn("kv tier shared %s: gc: %s", s->dir, m.text);
    } else {
        s->st.n_blocks = r.n_blocks;
        s->st.used_bytes = r.bytes;
        s->st.expirations += r.expired;
        s->st.corrupt += r.corrupt;
        s->st.evictions += r.evicted;
    }
    s->next_gc = now + KV_TIER_SHARED_GC_S;
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

/* Publishes the record of id: temporary name, fsync, rename, fsync dir. */
static int publish(struct shared_tier *s, const uint8_t id[16], const void *frame,
                   const struct kv_tier_record *r)
{
    char sub[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX + 256], hex[33];
    kv_tier_dir_sub(s->dir, id, sub);
    int rc = kv_tier_dir_mkdirs(sub);
    if (rc) return rc;
    kv_tier_id_hex(id, hex);
    kv_tier_dir_path(s->dir, id, path);
    snprintf(tmp, sizeof(tmp), "%s/.%s.%s.%d.%llu.tmp", sub, hex, s->host, (int)getpid(),
             (unsigned long long)++s->n_tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return -errno;
    uint8_t head[KV_TIER_RECORD_HEADER];
    kv_tier_record_encode(r, head);
    struct iovec v[2] = {{head, sizeof(head)}, {(void *)frame, s->frame_bytes}};
    rc = kv_tier_io_write(s->io, fd, v, 2, 0);
    if (!rc) rc = kv_tier_io_fsync(s->io, fd);
    if (close(fd) && !rc) rc = -errno;
    if (!rc && rename(tmp, path)) rc = -errno;
    if (rc) {
        unlink(tmp);
        return rc;
    }
    fsync_dir(sub); /* the rename made durable; a failure here loses nothing visible */
    return 0;
}

static int shared_put(struct kv_tier *t, const uint8_t id[16], const void *frame, size_t len,
                      int64_t expires, int64_t now, const uint8_t *parent)
{
    (void)parent; /* no eviction order of its own: expiry and gc (shared), Redis's own (redis) */
    struct shared_tier *s = shared_of(t);
    struct err_msg m;
    if (len != s->frame_bytes || kv_frame_check(&t->layout, frame, len, id, NULL, &m)) {
        s->st.put_errors++;
        return ERR_INVALID;
    }
    if (now >= s->next_gc) gc_pass(s, now);
    char path[PATH_MAX];
    kv_tier_dir_path(s->dir, id, path);
    /* held already (by us or another process): raise its expiry only */
    int rc = kv_tier_dir_raise_expiry(s->io, path, id, expires, NULL);
    if (rc == 0) return 0;
    if (!s->st.writable && now < s->retry_at) {
        s->st.put_errors++;
        return -EROFS;
    }
    struct kv_tier_record r = {.expires = expires, .stored = now, .frame_len = s->frame_bytes};
    memcpy(r.id, id, 16);
    rc = publish(s, id, frame, &r);
    if (rc) {
        s->st.put_errors++;
        set_writable(s, false, rc, now);
        return rc;
    }
    set_writable(s, true, 0, now);
    s->st.puts++;
    s->st.bytes_written += KV_TIER_RECORD_HEADER + s->frame_bytes;
    s->st.used_bytes += KV_TIER_RECORD_HEADER + s->frame_bytes;
    s->st.n_blocks++;
    return 0;
}

/* Counts a read that gave no frame, and removes a corrupt file. */
static void not_read(struct shared_tier *s, const struct kv_tier_dir_want *w)
{
    switch (w->res) {
    case KV_TIER_READ_HIT:
        return;
    case KV_TIER_READ_EXPIRED:
        s->st.expirations++;
        break;
    case KV_TIER_READ_CORRUPT:
        s->st.corrupt++;
        log_warn("kv tier shared %s: dropped %s: %s", s->dir, w->path, w->msg.text);
        kv_tier_dir_unlink(w->path, w->dev, w->ino);
        break;
    case KV_TIER_READ_ERROR:
        log_warn("kv tier shared %s: %s", s->dir, w->msg.text);
        break;
    case KV_TIER_READ_ABSENT:
        break;
    }
    s->st.misses++;
}

static void hit(struct shared_tier *s, double ms)
{
    s->st.hits++;
    s->st.bytes_read += s->frame_bytes;
    kv_tier_stats_add_latency(&s->st, ms);
}

static ssize_t shared_get(struct kv_tier *t, const uint8_t id[16], void *buf, size_t cap,
                          int64_t now)
{
    struct shared_tier *s = shared_of(t);
    if (cap < s->frame_bytes) return ERR_INVALID;
    double t0 = time_now_s();
    char path[PATH_MAX];
    kv_tier_dir_path(s->dir, id, path);
    struct kv_tier_dir_want w = {.path = path, .id = id, .buf = buf};
    kv_tier_dir_read_many(&s->rd, s->io, &t->layout, now, &w, 1);
    if (w.res != KV_TIER_READ_HIT) {
        not_read(s, &w);
        return 0;
    }
    hit(s, (time_now_s() - t0) * 1e3);
    return (ssize_t)s->frame_bytes;
}

/* The filesystem is the index: a batch reads the next files that may be
 * there and keeps the leading ones that were. */
static int shared_get_run(struct kv_tier *t, const uint8_t (*ids)[16], int n, uint8_t *out,
                          int64_t expires, int64_t now, const uint8_t *parent)
{
    (void)parent;
    struct shared_tier *s = shared_of(t);
    struct kv_tier_dir_batch *b = s->batch;
    int done = 0;
    while (done < n) {
        int m = MIN(n - done, KV_TIER_IO_DEPTH);
        for (int k = 0; k < m; k++) {
            kv_tier_dir_path(s->dir, ids[done + k], b->path[k]);
            b->w[k] = (struct kv_tier_dir_want){.path = b->path[k],
                                                .id = ids[done + k],
                                                .buf = out + s->frame_bytes * (size_t)(done + k)};
        }
        double t0 = time_now_s();
        kv_tier_dir_read_many(&s->rd, s->io, &t->layout, now, b->w, m);
        int k = 0;
        while (k < m && b->w[k].res == KV_TIER_READ_HIT)
            k++;
        double ms = (time_now_s() - t0) * 1e3 / MAX(k, 1);
        for (int i = 0; i < k; i++) {
            hit(s, ms);
            if (expires > b->w[i].rec.expires)
                kv_tier_dir_raise_expiry(s->io, b->path[i], ids[done + i], expires, NULL);
        }
        if (k < m && b->w[k].res != KV_TIER_READ_ABSENT) not_read(s, &b->w[k]);
        done += k;
        if (k < m) break;
    }
    return done;
}

static bool shared_has(struct kv_tier *t, const uint8_t id[16], int64_t now)
{
    struct shared_tier *s = shared_of(t);
    (void)now;
    char path[PATH_MAX];
    kv_tier_dir_path(s->dir, id, path);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
           (uint64_t)st.st_size == KV_TIER_RECORD_HEADER + s->frame_bytes;
}

static int shared_touch(struct kv_tier *t, const uint8_t id[16], int64_t expires, int64_t now,
                        const uint8_t *parent)
{
    (void)parent;
    struct shared_tier *s = shared_of(t);
    (void)now;
    char path[PATH_MAX];
    kv_tier_dir_path(s->dir, id, path);
    return kv_tier_dir_raise_expiry(s->io, path, id, expires, NULL);
}

static void shared_stats(struct kv_tier *t, struct kv_tier_stats *out)
{
    *out = shared_of(t)->st;
}

static void shared_close(struct kv_tier *t)
{
    struct shared_tier *s = shared_of(t);
    kv_tier_dir_reader_release(&s->rd);
    kv_tier_io_free(s->io);
    free(s->batch);
    free(s);
}

static const struct kv_tier_ops shared_ops = {.put = shared_put,
                                              .get = shared_get,
                                              .get_run = shared_get_run,
                                              .has = shared_has,
                                              .touch = shared_touch,
                                              .stats = shared_stats,
                                              .close = shared_close};

int kv__tier_shared_read_mode(struct kv_tier *t, enum kv_tier_read_mode mode)
{
    shared_of(t)->rd.mode = mode;
    return 0;
}

int kv_tier_shared_open(const char *dir, const struct kv_frame_layout *l, uint64_t capacity_bytes,
                        int64_t now, struct kv_tier **out, struct err_msg *msg)
{
    if (strlen(dir) >= KV_TIER_DIR_MAX)
        return err_set(msg, ERR_INVALID, "shared tier '%s': the directory name is too long", dir);
    int rc = kv_tier_dir_mkdirs(dir);
    if (rc) return err_set(msg, rc, "shared tier '%s': %s", dir, strerror(-rc));
    struct shared_tier *s = xcalloc(1, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "%s", dir);
    if (gethostname(s->host, sizeof(s->host) - 1)) snprintf(s->host, sizeof(s->host), "host");
    for (char *c = s->host; *c; c++)
        if (*c == '/' || *c == '.') *c = '_';
    s->base.ops = &shared_ops;
    s->base.kind = KV_TIER_SHARED;
    snprintf(s->base.name, sizeof(s->base.name), "shared");
    s->base.layout = *l;
    s->frame_bytes = kv_frame_bytes(l);
    s->io = kv_tier_io_new();
    s->batch = xmalloc(sizeof(*s->batch));
    s->st.capacity_bytes = capacity_bytes;
    s->st.writable = true;
    gc_pass(s, now);
    *out = &s->base;
    return 0;
}
