/*
 * tier_disk.c - the disk tier: one record file per block under a
 * directory this process owns, surviving restarts and kill -9 (tiers.h,
 * tier_dir.h for the layout).
 *
 *   index (tier_index.h, in memory)      DIR/3f/3fa9...e1  (header | frame)
 *   id -> {expires, stored, bytes}  <-->  one file per entry
 *
 * Ownership: DIR/lock is held with flock for the tier's lifetime (the
 * kernel drops it when the process dies, kill -9 included), so the index
 * is the truth about the directory: only this process adds or removes
 * records there. `inferd kv gc` may still remove files under a running
 * tier; a get then finds no file and forgets the block.
 *
 * Writes: a put writes header and frame to DIR/3f/.<hex>.tmp with one
 * io_uring writev, closes it and renames it over the final name, so a
 * record is complete under its name or absent. No fsync: a kill -9 loses
 * nothing the kernel has accepted, and after a power loss a torn record
 * fails its checks at the next open and is dropped; this is a cache, and
 * the shared tier is the one that publishes durably.
 *
 * Reads: every get reads the whole record and checks it (tier_dir.h:
 * kv_tier_dir_read); a file that fails is removed and counted corrupt.
 *
 * Failures: a put that cannot write (disk full, quota, file size limit,
 * read-only or vanished directory) turns the tier unwritable with one log
 * line; puts are refused (counted) until KV_TIER_RETRY_S seconds have
 * passed or a removal freed space, then the next put tries again and,
 * when it succeeds, the tier is writable again (one more log line). Gets
 * go on throughout.
 *
 * Thread: the chain's I/O thread.
 */
#include "kv/tier_index.h"
#include "kv/tiers.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct disk_tier {
    struct kv_tier base;             /* first: the common head */
    char dir[PATH_MAX];              /* the directory */
    struct kv_tier_io *io;           /* the ring */
    struct kv_tier_dir_reader rd;    /* read mode, O_DIRECT buffer */
    struct kv_tier_index ix;         /* id -> entry, recency order */
    struct kv_tier_stats st;         /* counters; gauges filled by disk_stats */
    size_t frame_bytes;              /* every frame's length */
    size_t rec_bytes;                /* header + frame: every file's length */
    int lock_fd;                     /* DIR/lock, flocked (-1: none) */
    int64_t retry_at;                /* unwritable: the first put that tries again */
    uint64_t fit_bytes;              /* what the filesystem held when it was full (0: not yet) */
    uint8_t made[32];                /* bit per fan-out subdirectory known to exist */
    struct kv_tier_dir_batch *batch; /* get_run's scratch */
};

static struct disk_tier *disk_of(struct kv_tier *t)
{
    CHECK(t->kind == KV_TIER_DISK);
    return (struct disk_tier *)t;
}

static void set_writable(struct disk_tier *d, bool ok, int err, int64_t now)
{
    if (!ok) d->retry_at = now + KV_TIER_RETRY_S;
    if (ok == d->st.writable) return;
    d->st.writable = ok;
    if (ok)
        log_info("kv tier disk '%s': writable again", d->dir);
    else
        log_warn("kv tier disk '%s': cannot write (%s); puts stop, retried every %d s", d->dir,
                 err_str(err), KV_TIER_RETRY_S);
}

/* Removes e's file and entry; counted as corrupt, expiration or eviction.
 * 0, or -errno when the file could not be removed (an unwritable
 * directory): a corrupt or expired entry leaves the index anyway (it is
 * never served; the file is left to the next start or `inferd kv gc`), a
 * sound one stays, still served, since its bytes still take the space. */
static int drop(struct disk_tier *d, struct kv_tier_entry *e, int64_t now, bool corrupt)
{
    bool dead = corrupt || e->expires < now;
    char path[PATH_MAX];
    kv_tier_dir_path(d->dir, e->id, path);
    int rc = unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
    if (rc && !dead) return rc;
    if (!rc) d->retry_at = 0; /* space freed: an unwritable tier may try again */
    if (corrupt)
        d->st.corrupt++;
    else if (e->expires < now)
        d->st.expirations++;
    else
        d->st.evictions++;
    if (dead)
        kv_tier_index_remove(&d->ix, e);
    else
        kv_tier_index_evict(&d->ix, e);
    return rc;
}

static int ensure_sub(struct disk_tier *d, const uint8_t id[16])
{
    if (d->made[id[0] >> 3] & (1u << (id[0] & 7))) return 0;
    char sub[PATH_MAX];
    kv_tier_dir_sub(d->dir, id, sub);
    int rc = kv_tier_dir_mkdirs(sub);
    if (!rc) d->made[id[0] >> 3] |= (uint8_t)(1u << (id[0] & 7));
    return rc;
}

/* Writes the record of id to a temporary name and renames it into place. */
static int write_record(struct disk_tier *d, const uint8_t id[16], const void *frame,
                        const struct kv_tier_record *r)
{
    int rc = ensure_sub(d, id);
    if (rc) {
        memset(d->made, 0, sizeof(d->made)); /* the directory may have gone: look again */
        return rc;
    }
    char path[PATH_MAX], tmp[PATH_MAX + 256], hex[33];
    kv_tier_id_hex(id, hex);
    kv_tier_dir_path(d->dir, id, path);
    snprintf(tmp, sizeof(tmp), "%s/%.2s/.%s.tmp", d->dir, hex, hex);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        rc = -errno;
        if (rc == -ENOENT) memset(d->made, 0, sizeof(d->made));
        return rc;
    }
    uint8_t head[KV_TIER_RECORD_HEADER];
    kv_tier_record_encode(r, head);
    struct iovec v[2] = {{head, sizeof(head)}, {(void *)frame, d->frame_bytes}};
    rc = kv_tier_io_write(d->io, fd, v, 2, 0);
    if (close(fd) && !rc) rc = -errno;
    if (!rc && rename(tmp, path)) rc = -errno;
    if (rc) unlink(tmp);
    return rc;
}

static int disk_put(struct kv_tier *t, const uint8_t id[16], const void *frame, size_t len,
                    int64_t expires, int64_t now, const uint8_t *parent)
{
    struct disk_tier *d = disk_of(t);
    struct err_msg m;
    if (len != d->frame_bytes || kv_frame_check(&t->layout, frame, len, id, NULL, &m)) {
        d->st.put_errors++;
        return ERR_INVALID;
    }
    struct kv_tier_entry *e = kv_tier_index_find(&d->ix, id);
    if (e && e->expires >= now) {
        kv_tier_index_used(&d->ix, e);
        kv_tier_index_chain(&d->ix, e, parent);
        if (expires <= e->expires) return 0;
        char path[PATH_MAX];
        kv_tier_dir_path(d->dir, id, path);
        int rc = kv_tier_dir_raise_expiry(d->io, path, id, expires, NULL);
        if (rc == 0) {
            e->expires = expires;
            return 0;
        }
        if (rc != ERR_NOT_FOUND && rc != ERR_FORMAT) { /* cannot write: the block stays */
            d->st.put_errors++;
            set_writable(d, false, rc, now);
            return rc;
        }
        /* the file is gone or unsound: write it again below */
        drop(d, e, now, rc == ERR_FORMAT);
    } else if (e) {
        drop(d, e, now, false);
    }
    if (!d->st.writable && now < d->retry_at) {
        d->st.put_errors++;
        return -EROFS;
    }
    if (d->rec_bytes > d->st.capacity_bytes) {
        d->st.put_errors++;
        return ERR_TOO_LARGE;
    }
    if (!kv_tier_index_admit(&d->ix, id)) {
        d->st.not_admitted++;
        return 0;
    }
    uint64_t limit = d->st.capacity_bytes;
    if (d->fit_bytes && d->fit_bytes < limit) limit = d->fit_bytes;
    while (d->ix.n && d->ix.used + d->rec_bytes > limit) {
        struct kv_tier_entry *v = kv_tier_index_victim_for(&d->ix, now, id, parent);
        if (!v) {
            d->st.not_admitted++;
            return 0;
        }
        int rc = drop(d, v, now, false);
        if (rc) { /* no room can be made: the directory turned unwritable */
            d->st.put_errors++;
            set_writable(d, false, rc, now);
            return rc;
        }
    }
    struct kv_tier_record r = {.expires = expires, .stored = now, .frame_len = d->frame_bytes};
    memcpy(r.id, id, 16);
    int rc = write_record(d, id, frame, &r);
    if (rc) {
        d->st.put_errors++;
        /* A full filesystem is a capacity the operator did not say: from
         * now on the tier keeps to what fitted, evicting to make room, so
         * the retry after KV_TIER_RETRY_S can succeed. */
        if ((rc == -ENOSPC || rc == -EDQUOT) && d->ix.used &&
            (!d->fit_bytes || d->ix.used < d->fit_bytes)) {
            d->fit_bytes = d->ix.used;
            log_warn("kv tier disk '%s': the filesystem is full; the tier keeps to %llu KiB",
                     d->dir, (unsigned long long)(d->fit_bytes >> 10));
        }
        set_writable(d, false, rc, now);
        return rc;
    }
    set_writable(d, true, 0, now);
    kv_tier_index_chain(&d->ix, kv_tier_index_add(&d->ix, id, d->rec_bytes, now, expires), parent);
    d->st.puts++;
    d->st.bytes_written += d->rec_bytes;
    return 0;
}

/* A verified read of e: counted, used; with touch, chained after parent
 * and its expiry raised to expires. */
static void hit(struct disk_tier *d, struct kv_tier_entry *e, const uint8_t *parent, bool touch,
                int64_t expires, int64_t now, double ms)
{
    kv_tier_index_used(&d->ix, e);
    d->st.hits++;
    d->st.bytes_read += d->frame_bytes;
    kv_tier_stats_add_latency(&d->st, ms);
    if (!touch) return;
    kv_tier_index_chain(&d->ix, e, parent);
    if (expires <= e->expires) return;
    char path[PATH_MAX];
    kv_tier_dir_path(d->dir, e->id, path);
    int rc = kv_tier_dir_raise_expiry(d->io, path, e->id, expires, NULL);
    if (rc == 0)
        e->expires = expires;
    else if (rc == ERR_NOT_FOUND || rc == ERR_FORMAT)
        drop(d, e, now, rc == ERR_FORMAT);
}

/* A read of e that gave no frame (w->res is not HIT): the index follows
 * what the file turned out to be. */
static void not_read(struct disk_tier *d, struct kv_tier_entry *e, const struct kv_tier_dir_want *w,
                     int64_t now)
{
    switch (w->res) {
    case KV_TIER_READ_HIT:
        break;
    case KV_TIER_READ_ABSENT: /* removed under us (kv gc, an operator) */
        kv_tier_index_remove(&d->ix, e);
        break;
    case KV_TIER_READ_EXPIRED:
        e->expires = w->rec.expires;
        drop(d, e, now, false);
        break;
    case KV_TIER_READ_CORRUPT:
        log_warn("kv tier disk: block dropped: %s", w->msg.text);
        drop(d, e, now, true);
        break;
    case KV_TIER_READ_ERROR: /* an I/O error: keep the file, a later read may work */
        log_warn("kv tier disk: %s", w->msg.text);
        break;
    }
}

static ssize_t disk_get(struct kv_tier *t, const uint8_t id[16], void *buf, size_t cap, int64_t now)
{
    struct disk_tier *d = disk_of(t);
    double t0 = time_now_s();
    struct kv_tier_entry *e = kv_tier_index_find(&d->ix, id);
    if (!e || cap < d->frame_bytes) goto miss;
    if (e->expires < now) {
        drop(d, e, now, false);
        goto miss;
    }
    char path[PATH_MAX];
    kv_tier_dir_path(d->dir, id, path);
    struct kv_tier_dir_want w = {.path = path, .id = id, .buf = buf};
    kv_tier_dir_read_many(&d->rd, d->io, &t->layout, now, &w, 1);
    if (w.res == KV_TIER_READ_HIT) {
        hit(d, e, NULL, false, 0, now, (time_now_s() - t0) * 1e3);
        return (ssize_t)d->frame_bytes;
    }
    not_read(d, e, &w, now);
miss:
    d->st.misses++;
    return 0;
}

static int disk_get_run(struct kv_tier *t, const uint8_t (*ids)[16], int n, uint8_t *out,
                        int64_t expires, int64_t now, const uint8_t *parent)
{
    struct disk_tier *d = disk_of(t);
    struct kv_tier_dir_batch *b = d->batch;
    int done = 0;
    while (done < n) {
        /* the next batch: leading ids the index holds, unexpired */
        struct kv_tier_entry *e[KV_TIER_IO_DEPTH];
        int m = 0;
        while (m < KV_TIER_IO_DEPTH && done + m < n) {
            const uint8_t *id = ids[done + m];
            struct kv_tier_entry *x = kv_tier_index_find(&d->ix, id);
            if (!x) break;
            if (x->expires < now) {
                drop(d, x, now, false);
                break;
            }
            kv_tier_dir_path(d->dir, id, b->path[m]);
            b->w[m] = (struct kv_tier_dir_want){
                .path = b->path[m], .id = id, .buf = out + d->frame_bytes * (size_t)(done + m)};
            e[m++] = x;
        }
        if (!m) break;
        double t0 = time_now_s();
        kv_tier_dir_read_many(&d->rd, d->io, &t->layout, now, b->w, m);
        double ms = (time_now_s() - t0) * 1e3 / m;
        int k = 0;
        for (; k < m && b->w[k].res == KV_TIER_READ_HIT; k++)
            hit(d, e[k], done + k ? ids[done + k - 1] : parent, true, expires, now, ms);
        if (k < m) {
            not_read(d, e[k], &b->w[k], now);
            d->st.misses++;
        }
        done += k;
        if (k < m) break;
    }
    return done;
}

static bool disk_has(struct kv_tier *t, const uint8_t id[16], int64_t now)
{
    struct kv_tier_entry *e = kv_tier_index_find(&disk_of(t)->ix, id);
    return e && e->expires >= now;
}

static int disk_touch(struct kv_tier *t, const uint8_t id[16], int64_t expires, int64_t now,
                      const uint8_t *parent)
{
    struct disk_tier *d = disk_of(t);
    struct kv_tier_entry *e = kv_tier_index_find(&d->ix, id);
    if (!e || e->expires < now) return ERR_NOT_FOUND;
    kv_tier_index_used(&d->ix, e);
    kv_tier_index_chain(&d->ix, e, parent);
    if (expires <= e->expires) return 0;
    char path[PATH_MAX];
    kv_tier_dir_path(d->dir, id, path);
    int rc = kv_tier_dir_raise_expiry(d->io, path, id, expires, NULL);
    if (rc == 0)
        e->expires = expires;
    else if (rc == ERR_NOT_FOUND || rc == ERR_FORMAT)
        drop(d, e, now, rc == ERR_FORMAT);
    return rc;
}

static void disk_stats(struct kv_tier *t, struct kv_tier_stats *out)
{
    struct disk_tier *d = disk_of(t);
    *out = d->st;
    out->used_bytes = d->ix.used;
    out->n_blocks = d->ix.n;
}

static void disk_close(struct kv_tier *t)
{
    struct disk_tier *d = disk_of(t);
    kv_tier_index_release(&d->ix, NULL);
    kv_tier_dir_reader_release(&d->rd);
    kv_tier_io_free(d->io);
    if (d->lock_fd >= 0) close(d->lock_fd); /* releases the flock */
    free(d->batch);
    free(d);
}

static const struct kv_tier_ops disk_ops = {
    .put = disk_put,
    .get = disk_get,
    .get_run = disk_get_run,
    .has = disk_has,
    .touch = disk_touch,
    .stats = disk_stats,
    .close = disk_close,
};

int kv_tier_set_read_mode(struct kv_tier *t, enum kv_tier_read_mode mode)
{
    if (t->kind == KV_TIER_SHARED) return kv__tier_shared_read_mode(t, mode);
    if (t->kind != KV_TIER_DISK) return ERR_INVALID;
    disk_of(t)->rd.mode = mode;
    return 0;
}

/* Rebuild ---------------------------------------------------------------------- */

struct found {
    uint8_t id[16];  /* block */
    int64_t expires; /* from its header */
    int64_t stored;  /* from its header */
    int64_t mtime;   /* recency order */
};

struct rebuild {
    struct disk_tier *d;
    struct found *v; /* (n, cap) sound live records */
    size_t n, cap;
    uint64_t corrupt, expired, temp; /* files removed */
};

static int rebuild_file(void *ctx, const struct kv_tier_file *f)
{
    struct rebuild *b = ctx;
    switch (f->state) {
    case KV_TIER_FILE_OK:
        if (b->n == b->cap) {
            b->cap = b->cap ? 2 * b->cap : 1024;
            b->v = xrealloc(b->v, b->cap * sizeof(*b->v));
        }
        struct found *x = &b->v[b->n++];
        memcpy(x->id, f->id, 16);
        x->expires = f->rec.expires;
        x->stored = f->rec.stored;
        x->mtime = f->mtime;
        return 0;
    case KV_TIER_FILE_TEMP: /* the lock is ours: a write a crash interrupted */
        b->temp += unlink(f->path) == 0;
        return 0;
    case KV_TIER_FILE_EXPIRED:
        b->expired++;
        break;
    case KV_TIER_FILE_CORRUPT:
    case KV_TIER_FILE_FOREIGN:
        b->corrupt++;
        log_debug("kv tier disk: '%s' dropped: %s", f->path, f->why);
        break;
    }
    unlink(f->path); /* a read-only directory keeps it; it is not indexed either way */
    return 0;
}

static int by_mtime(const void *a, const void *b)
{
    const struct found *x = a, *y = b;
    if (x->mtime != y->mtime) return x->mtime < y->mtime ? -1 : 1;
    return memcmp(x->id, y->id, 16);
}

/* Takes DIR/lock: 0, or a negative code with a message. A directory where
 * the lock file cannot be made is read-only: then no other disk tier can
 * write there either, and the tier goes on without the lock. */
static int take_lock(struct disk_tier *d, struct err_msg *msg)
{
    char path[PATH_MAX + 8];
    snprintf(path, sizeof(path), "%s/lock", d->dir);
    d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (d->lock_fd < 0) d->lock_fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (d->lock_fd < 0) return 0;
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) == 0) return 0;
    int err = errno;
    close(d->lock_fd);
    d->lock_fd = -1;
    if (err == EWOULDBLOCK)
        return err_set(msg, ERR_UNAVAILABLE,
                       "kv tier disk '%s': in use by another process (a directory many "
                       "processes use is a shared tier)",
                       d->dir);
    return err_set(msg, -err, "kv tier disk '%s': cannot lock: %s", d->dir, strerror(err));
}

int kv_tier_disk_open(const char *dir, const struct kv_frame_layout *l, uint64_t capacity_bytes,
                      const struct kv_tier_policy *policy, int64_t now, struct kv_tier **out,
                      struct err_msg *msg)
{
    if (!l->n_layer || !l->layer_bytes)
        return err_set(msg, ERR_INVALID, "kv tier disk: empty frame layout");
    if (!*dir || strlen(dir) > KV_TIER_DIR_MAX)
        return err_set(msg, ERR_INVALID, "kv tier disk: directory name empty or too long");
    int rc = kv_tier_dir_mkdirs(dir);
    if (rc)
        return err_set(msg, rc, "kv tier disk: cannot make directory '%s': %s", dir, err_str(rc));
    struct disk_tier *d = xcalloc(1, sizeof(*d));
    d->base = (struct kv_tier){.ops = &disk_ops, .kind = KV_TIER_DISK, .layout = *l};
    snprintf(d->base.name, sizeof(d->base.name), "disk");
    snprintf(d->dir, sizeof(d->dir), "%s", dir);
    d->frame_bytes = kv_frame_bytes(l);
    d->rec_bytes = KV_TIER_RECORD_HEADER + d->frame_bytes;
    d->st.writable = true;
    d->batch = xmalloc(sizeof(*d->batch));
    kv_tier_index_init(&d->ix, policy);
    rc = take_lock(d, msg);
    if (rc) goto err_free;
    d->io = kv_tier_io_new();

    struct rebuild b = {.d = d};
    rc = kv_tier_dir_scan(d->io, dir, l, now, rebuild_file, &b, msg);
    if (rc) goto err_free_found;
    if (b.n) qsort(b.v, b.n, sizeof(*b.v), by_mtime);
    for (size_t i = 0; i < b.n; i++)
        kv_tier_index_add(&d->ix, b.v[i].id, d->rec_bytes, b.v[i].stored, b.v[i].expires);
    free(b.v);
    d->st.corrupt = b.corrupt;
    d->st.expirations = b.expired;

    if (!capacity_bytes) {
        struct statvfs vfs;
        uint64_t avail = statvfs(dir, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
        capacity_bytes = d->ix.used + avail / 2;
    }
    d->st.capacity_bytes = capacity_bytes;
    kv_tier_index_set_capacity(&d->ix, capacity_bytes, d->rec_bytes, KV_TIER_PROTECT_SHARE);
    while (d->ix.used > capacity_bytes)
        if (drop(d, kv_tier_index_victim(&d->ix, now), now, false)) break;
    if (access(dir, W_OK)) set_writable(d, false, -errno, now);
    log_info("kv tier disk '%s': %zu blocks indexed (%llu of %llu MiB); removed %llu corrupt, "
             "%llu expired, %llu temporary files; %s",
             dir, d->ix.n, (unsigned long long)(d->ix.used >> 20),
             (unsigned long long)(capacity_bytes >> 20), (unsigned long long)b.corrupt,
             (unsigned long long)b.expired, (unsigned long long)b.temp,
             kv_tier_io_uring(d->io) ? "io_uring" : "preadv/pwritev");
    *out = &d->base;
    return 0;

err_free_found:
    free(b.v);
    kv_tier_io_free(d->io);
    if (d->lock_fd >= 0) close(d->lock_fd);
err_free:
    free(d->batch);
    free(d);
    return rc;
}
