/*
 * tier_dir.c - names, scans, checked reads and garbage collection of a
 * directory of block records (tier_dir.h).
 */
#define _GNU_SOURCE /* O_DIRECT */
#include "kv/tier_dir.h"

#include "base/check.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { DIRECT_ALIGN = 4096 };

static uint32_t get_u32(const uint8_t *d)
{
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}

void kv_tier_dir_sub(const char *dir, const uint8_t id[16], char *out)
{
    char hex[33];
    kv_tier_id_hex(id, hex);
    snprintf(out, PATH_MAX, "%s/%.2s", dir, hex);
}

void kv_tier_dir_path(const char *dir, const uint8_t id[16], char *out)
{
    char hex[33];
    kv_tier_id_hex(id, hex);
    snprintf(out, PATH_MAX, "%s/%.2s/%s", dir, hex, hex);
}

int kv_tier_dir_mkdirs(const char *path)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = 0;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -errno;
        *s = '/';
    }
    if (mkdir(p, 0755) && errno != EEXIST) return -errno;
    struct stat st;
    if (stat(p, &st)) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int kv_tier_dir_unlink(const char *path, dev_t dev, ino_t ino)
{
    struct stat st;
    if (lstat(path, &st)) return errno == ENOENT ? 0 : -errno;
    if (st.st_dev != dev || st.st_ino != ino) return 1;
    if (unlink(path)) return errno == ENOENT ? 0 : -errno;
    return 0;
}

/* Checks --------------------------------------------------------------------- */

/* Sets f's state to s, with why formatted; returns s. */
static enum kv_tier_file_state mark(struct kv_tier_file *f, enum kv_tier_file_state s,
                                    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static enum kv_tier_file_state mark(struct kv_tier_file *f, enum kv_tier_file_state s,
                                    const char *fmt, ...)
{
    f->state = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->why, sizeof(f->why), fmt, ap);
    va_end(ap);
    return s;
}

enum kv_tier_file_state kv_tier_dir_check_head(const uint8_t *head, size_t n,
                                               const struct kv_frame_layout *want, int64_t now,
                                               struct kv_tier_file *f)
{
    struct err_msg m = {{0}};
    f->why[0] = 0;
    if (n < KV_TIER_DIR_HEAD || f->size < KV_TIER_DIR_HEAD)
        return mark(f, KV_TIER_FILE_CORRUPT, "truncated: %llu bytes", (unsigned long long)f->size);
    if (kv_tier_record_decode(head, &f->rec, &m))
        return mark(f, KV_TIER_FILE_CORRUPT, "%s", m.text);
    if (memcmp(f->rec.id, f->id, 16) != 0) {
        char hex[33];
        kv_tier_id_hex(f->rec.id, hex);
        return mark(f, KV_TIER_FILE_CORRUPT, "the record names another block (%s)", hex);
    }
    if (f->size - KV_TIER_RECORD_HEADER != f->rec.frame_len)
        return mark(f, KV_TIER_FILE_CORRUPT, "%llu bytes, the record says %llu + %d",
                    (unsigned long long)f->size, (unsigned long long)f->rec.frame_len,
                    KV_TIER_RECORD_HEADER);
    /* The frame's header, read by the offsets of frame.h's table: the
     * checksum over the payload is kv_frame_check's, on a full read. */
    const uint8_t *fh = head + KV_TIER_RECORD_HEADER;
    if (memcmp(fh, "INFDKVB1", 8) != 0) return mark(f, KV_TIER_FILE_CORRUPT, "bad frame magic");
    if (memcmp(fh + 24, f->id, 16) != 0)
        return mark(f, KV_TIER_FILE_CORRUPT, "the frame names another block");
    memcpy(f->layout.fingerprint, fh + 8, 16);
    f->layout.n_layer = get_u32(fh + 40);
    f->layout.layer_bytes = get_u32(fh + 44);
    uint64_t payload = (uint64_t)f->layout.n_layer * f->layout.layer_bytes;
    if (KV_FRAME_HEADER + payload != f->rec.frame_len)
        return mark(f, KV_TIER_FILE_CORRUPT, "a frame of %u layers x %u bytes is not %llu bytes",
                    f->layout.n_layer, f->layout.layer_bytes, (unsigned long long)f->rec.frame_len);
    if (want && (memcmp(want->fingerprint, f->layout.fingerprint, 16) != 0 ||
                 want->n_layer != f->layout.n_layer || want->layer_bytes != f->layout.layer_bytes))
        return mark(f, KV_TIER_FILE_FOREIGN,
                    "another engine fingerprint or layout (%u layers x %u bytes)",
                    f->layout.n_layer, f->layout.layer_bytes);
    if (f->rec.expires < now) return mark(f, KV_TIER_FILE_EXPIRED, "expired");
    return mark(f, KV_TIER_FILE_OK, "%s", "");
}

/* Scans ---------------------------------------------------------------------- */

static bool is_hex_lower(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* ".<32 hex>[.anything].tmp" */
static bool is_temp_name(const char *name)
{
    size_t n = strlen(name);
    return n >= 37 && name[0] == '.' && is_hex_lower(name + 1, 32) && name[33] == '.' &&
           strcmp(name + n - 4, ".tmp") == 0;
}

struct scan {
    struct kv_tier_io *io;
    const struct kv_frame_layout *want;
    int64_t now;
    kv_tier_dir_fn fn;
    void *ctx;
    int n;                                             /* files in the batch */
    struct kv_tier_file *files;                        /* (KV_TIER_IO_DEPTH) */
    int fds[KV_TIER_IO_DEPTH];                         /* open files of the batch */
    uint8_t heads[KV_TIER_IO_DEPTH][KV_TIER_DIR_HEAD]; /* their first bytes */
};

static void fill_stat(struct kv_tier_file *f, const struct stat *st)
{
    f->size = (uint64_t)st->st_size;
    f->mtime = (int64_t)st->st_mtime;
    f->dev = st->st_dev;
    f->ino = st->st_ino;
}

/* Reads the batch's headers, hands each file to the callback. */
static int flush(struct scan *s)
{
    void *bufs[KV_TIER_IO_DEPTH];
    ssize_t res[KV_TIER_IO_DEPTH];
    for (int i = 0; i < s->n; i++)
        bufs[i] = s->heads[i];
    kv_tier_io_read_many(s->io, s->n, s->fds, bufs, KV_TIER_DIR_HEAD, res);
    int rc = 0;
    for (int i = 0; i < s->n; i++) {
        close(s->fds[i]);
        struct kv_tier_file *f = &s->files[i];
        if (res[i] < 0)
            mark(f, KV_TIER_FILE_CORRUPT, "cannot read: %s", strerror((int)-res[i]));
        else
            kv_tier_dir_check_head(s->heads[i], (size_t)res[i], s->want, s->now, f);
        if (!rc) rc = s->fn(s->ctx, f);
    }
    s->n = 0;
    return rc;
}

static int scan_sub(struct scan *s, const char *dir, const char *sub)
{
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (!d) return 0; /* unreadable or gone: nothing of ours to see */
    int dfd = dirfd(d), rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        const char *name = e->d_name;
        bool temp = is_temp_name(name);
        bool record = !temp && strlen(name) == 32 && is_hex_lower(name, 32);
        if (!temp && !record) continue;
        struct kv_tier_file *f = &s->files[s->n];
        memset(f, 0, offsetof(struct kv_tier_file, path));
        if (snprintf(f->path, sizeof(f->path), "%s/%s", path, name) >= (int)sizeof(f->path))
            continue; /* cannot be one of ours: names are short and dir is bounded */
        f->why[0] = 0;
        if (temp) {
            struct stat st;
            if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode)) continue;
            fill_stat(f, &st);
            f->state = KV_TIER_FILE_TEMP;
            rc = s->fn(s->ctx, f);
            continue;
        }
        kv_tier_id_parse(name, f->id);
        int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        struct stat st;
        if (fd < 0) {
            if (errno == ENOENT) continue; /* removed since readdir */
            int err = errno;
            if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW)) continue;
            if (!S_ISREG(st.st_mode)) continue;
            fill_stat(f, &st);
            mark(f, KV_TIER_FILE_CORRUPT, "cannot open: %s", strerror(err));
            rc = s->fn(s->ctx, f);
            continue;
        }
        if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
            close(fd);
            continue;
        }
        fill_stat(f, &st);
        if (memcmp(name, sub, 2) != 0) {
            /* a record name in another fan-out directory: no lookup finds it */
            close(fd);
            mark(f, KV_TIER_FILE_CORRUPT, "in the wrong subdirectory");
            rc = s->fn(s->ctx, f);
            continue;
        }
        s->fds[s->n++] = fd;
        if (s->n == KV_TIER_IO_DEPTH) rc = flush(s);
    }
    if (!rc && s->n) rc = flush(s);
    for (int i = 0; i < s->n; i++) /* stopped early */
        close(s->fds[i]);
    s->n = 0;
    closedir(d);
    return rc;
}

int kv_tier_dir_scan(struct kv_tier_io *io, const char *dir, const struct kv_frame_layout *want,
                     int64_t now, kv_tier_dir_fn fn, void *ctx, struct err_msg *msg)
{
    DIR *d = opendir(dir);
    if (!d) return err_set(msg, -errno, "cannot read directory '%s': %s", dir, strerror(errno));
    struct scan *s = xcalloc(1, sizeof(*s));
    *s = (struct scan){.io = io, .want = want, .now = now, .fn = fn, .ctx = ctx};
    s->files = xcalloc(KV_TIER_IO_DEPTH, sizeof(*s->files));
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (strlen(e->d_name) != 2 || !is_hex_lower(e->d_name, 2)) continue;
        rc = scan_sub(s, dir, e->d_name);
    }
    closedir(d);
    free(s->files);
    free(s);
    return rc;
}

/* Checked reads -------------------------------------------------------------- */

void kv_tier_dir_reader_release(struct kv_tier_dir_reader *rd)
{
    free(rd->direct_buf);
    rd->direct_buf = NULL;
    rd->direct_cap = 0;
}

/* Opens w's file (O_DIRECT when *direct; false after a refusal) and checks
 * its kind and size: 0 with *fd_out set, or -1 with w->res set (ABSENT,
 * CORRUPT, ERROR). */
static int open_record(struct kv_tier_dir_reader *rd, struct kv_tier_dir_want *w, bool *direct,
                       bool cold, size_t rec_bytes, int *fd_out)
{
    int fd = open(w->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (*direct ? O_DIRECT : 0));
    if (fd < 0 && *direct && errno == EINVAL) {
        rd->no_direct = true; /* tmpfs and some network filesystems: read cold instead */
        *direct = false;
        cold = true;
        fd = open(w->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    if (fd < 0) {
        int e = errno;
        w->res = e == ENOENT  ? KV_TIER_READ_ABSENT
                 : e == ELOOP ? KV_TIER_READ_CORRUPT
                              : KV_TIER_READ_ERROR;
        if (e != ENOENT) err_set(&w->msg, -e, "cannot open '%s': %s", w->path, strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st)) {
        err_set(&w->msg, -errno, "cannot stat '%s': %s", w->path, strerror(errno));
        w->res = KV_TIER_READ_ERROR;
        close(fd);
        return -1;
    }
    w->dev = st.st_dev;
    w->ino = st.st_ino;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != rec_bytes) {
        err_set(&w->msg, ERR_FORMAT, "'%s': %lld bytes, a record of this layout has %zu", w->path,
                (long long)st.st_size, rec_bytes);
        w->res = KV_TIER_READ_CORRUPT;
        close(fd);
        return -1;
    }
    if (cold) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    *fd_out = fd;
    return 0;
}

/* Checks what was read of w (n bytes: header in head, frame in w->buf). */
static void check_record(const struct kv_frame_layout *l, int64_t now, struct kv_tier_dir_want *w,
                         const uint8_t *head, ssize_t n, size_t rec_bytes)
{
    const size_t frame_bytes = rec_bytes - KV_TIER_RECORD_HEADER;
    w->res = KV_TIER_READ_CORRUPT;
    if (n < 0) {
        err_set(&w->msg, (int)n, "cannot read '%s': %s", w->path, strerror((int)-n));
        w->res = KV_TIER_READ_ERROR;
        return;
    }
    if (n != (ssize_t)rec_bytes) {
        err_set(&w->msg, ERR_FORMAT, "'%s': read %zd of %zu bytes", w->path, n, rec_bytes);
        return;
    }
    if (kv_tier_record_decode(head, &w->rec, &w->msg)) return;
    if (memcmp(w->rec.id, w->id, 16) != 0 || w->rec.frame_len != frame_bytes) {
        err_set(&w->msg, ERR_FORMAT, "'%s': the record names another block or length", w->path);
        return;
    }
    if (w->rec.expires < now) {
        w->res = KV_TIER_READ_EXPIRED;
        return;
    }
    if (kv_frame_check(l, w->buf, frame_bytes, w->id, NULL, &w->msg)) return;
    w->res = KV_TIER_READ_HIT;
}

void kv_tier_dir_read_many(struct kv_tier_dir_reader *rd, struct kv_tier_io *io,
                           const struct kv_frame_layout *l, int64_t now, struct kv_tier_dir_want *w,
                           int n)
{
    CHECK(n >= 0 && n <= KV_TIER_IO_DEPTH);
    const size_t frame_bytes = kv_frame_bytes(l);
    const size_t rec_bytes = KV_TIER_RECORD_HEADER + frame_bytes;
    const size_t cap = (rec_bytes + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    bool direct = rd->mode == KV_TIER_READ_DIRECT && !rd->no_direct;
    bool cold = rd->mode == KV_TIER_READ_COLD || (rd->mode == KV_TIER_READ_DIRECT && !direct);
    if (direct && rd->direct_cap < cap * (size_t)n) {
        free(rd->direct_buf);
        rd->direct_buf = aligned_alloc(DIRECT_ALIGN, cap * (size_t)n);
        rd->direct_cap = rd->direct_buf ? cap * (size_t)n : 0;
        if (!rd->direct_buf) direct = false, cold = true; /* read through the cache instead */
    }
    int fds[KV_TIER_IO_DEPTH], slot[KV_TIER_IO_DEPTH], m = 0;
    bool is_direct[KV_TIER_IO_DEPTH];
    uint8_t head[KV_TIER_IO_DEPTH][KV_TIER_RECORD_HEADER];
    struct iovec iov[KV_TIER_IO_DEPTH][2];
    for (int i = 0; i < n; i++) {
        w[i].msg.text[0] = 0;
        bool d = direct && !rd->no_direct;
        if (open_record(rd, &w[i], &d, cold, rec_bytes, &fds[m])) continue;
        is_direct[m] = d;
        if (d) {
            iov[m][0] = (struct iovec){rd->direct_buf + cap * (size_t)m, cap};
            iov[m][1] = (struct iovec){head[m], 0};
        } else {
            iov[m][0] = (struct iovec){head[m], KV_TIER_RECORD_HEADER};
            iov[m][1] = (struct iovec){w[i].buf, frame_bytes};
        }
        slot[m++] = i;
    }
    /* O_DIRECT wants one aligned buffer per file; the empty second iovec
     * is harmless for readv */
    ssize_t got[KV_TIER_IO_DEPTH];
    kv_tier_io_readv_many(io, m, fds, &iov[0][0], 2, got);
    for (int k = 0; k < m; k++) {
        struct kv_tier_dir_want *x = &w[slot[k]];
        bool dcold = cold || (direct && !is_direct[k]);
        if (dcold) posix_fadvise(fds[k], 0, 0, POSIX_FADV_DONTNEED);
        close(fds[k]);
        ssize_t r = got[k];
        if (is_direct[k] && r == (ssize_t)rec_bytes) {
            const uint8_t *src = iov[k][0].iov_base;
            memcpy(head[k], src, KV_TIER_RECORD_HEADER);
            memcpy(x->buf, src + KV_TIER_RECORD_HEADER, frame_bytes);
        }
        check_record(l, now, x, head[k], r, rec_bytes);
    }
}

enum kv_tier_read_result kv_tier_dir_read(struct kv_tier_dir_reader *rd, struct kv_tier_io *io,
                                          const char *path, const struct kv_frame_layout *l,
                                          const uint8_t id[16], int64_t now, void *buf,
                                          struct kv_tier_record *rec, dev_t *dev, ino_t *ino,
                                          struct err_msg *msg)
{
    struct kv_tier_dir_want w = {.path = path, .id = id, .buf = buf};
    kv_tier_dir_read_many(rd, io, l, now, &w, 1);
    if (rec && (w.res == KV_TIER_READ_HIT || w.res == KV_TIER_READ_EXPIRED)) *rec = w.rec;
    *dev = w.dev;
    *ino = w.ino;
    if (msg) *msg = w.msg;
    return w.res;
}

int kv_tier_dir_raise_expiry(struct kv_tier_io *io, const char *path, const uint8_t id[16],
                             int64_t expires, int64_t *old_expires)
{
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return errno == ENOENT ? ERR_NOT_FOUND : -errno;
    uint8_t head[KV_TIER_RECORD_HEADER];
    struct iovec v = {head, sizeof(head)};
    ssize_t n = kv_tier_io_read(io, fd, &v, 1, 0);
    int rc = n < 0 ? (int)n : 0;
    struct kv_tier_record r;
    if (!rc && (n != (ssize_t)sizeof(head) || kv_tier_record_decode(head, &r, NULL) ||
                memcmp(r.id, id, 16) != 0))
        rc = ERR_FORMAT;
    if (!rc && old_expires) *old_expires = r.expires;
    if (!rc && expires > r.expires) {
        r.expires = expires;
        kv_tier_record_encode(&r, head);
        rc = kv_tier_io_write(io, fd, &v, 1, 0);
    }
    close(fd);
    return rc;
}

/* Garbage collection ---------------------------------------------------------- */

struct gc_block {
    uint8_t id[16];  /* its name */
    int64_t expires; /* eviction order */
    uint64_t size;   /* file bytes */
    dev_t dev;       /* the file looked at */
    ino_t ino;
};

struct gc {
    const struct kv_tier_gc_opts *o;
    struct kv_tier_gc_report *r;
    struct gc_block *v; /* (n, cap) sound live records */
    size_t n, cap;
};

/* Counts a removal attempt's outcome into *done on success. */
static void removed(struct gc *g, const struct kv_tier_file *f, uint64_t *done)
{
    int rc = kv_tier_dir_unlink(f->path, f->dev, f->ino);
    if (rc == 0)
        (*done)++;
    else if (rc == 1)
        g->r->raced++;
    else
        g->r->failed++;
}

static int gc_file(void *ctx, const struct kv_tier_file *f)
{
    struct gc *g = ctx;
    switch (f->state) {
    case KV_TIER_FILE_TEMP:
        if (f->mtime + g->o->temp_grace_s < g->o->now) removed(g, f, &g->r->temp);
        break;
    case KV_TIER_FILE_CORRUPT:
        removed(g, f, &g->r->corrupt);
        break;
    case KV_TIER_FILE_EXPIRED:
        removed(g, f, &g->r->expired);
        break;
    case KV_TIER_FILE_FOREIGN:
    case KV_TIER_FILE_OK:
        if (f->state == KV_TIER_FILE_FOREIGN) g->r->foreign++;
        if (g->n == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 256;
            g->v = xrealloc(g->v, g->cap * sizeof(*g->v));
        }
        struct gc_block *b = &g->v[g->n++];
        memcpy(b->id, f->id, 16);
        b->expires = f->rec.expires;
        b->size = f->size;
        b->dev = f->dev;
        b->ino = f->ino;
        g->r->n_blocks++;
        g->r->bytes += f->size;
        break;
    }
    return 0;
}

static int by_expiry(const void *a, const void *b)
{
    const struct gc_block *x = a, *y = b;
    if (x->expires != y->expires) return x->expires < y->expires ? -1 : 1;
    return memcmp(x->id, y->id, 16);
}

int kv_tier_dir_gc(struct kv_tier_io *io, const char *dir, const struct kv_tier_gc_opts *o,
                   struct kv_tier_gc_report *r, struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    struct gc g = {.o = o, .r = r};
    int rc = kv_tier_dir_scan(io, dir, o->layout, o->now, gc_file, &g, msg);
    if (rc) goto out;
    uint64_t target =
        o->target_bytes && o->target_bytes < o->max_bytes ? o->target_bytes : o->max_bytes;
    if (o->max_bytes && r->bytes > o->max_bytes) {
        qsort(g.v, g.n, sizeof(*g.v), by_expiry);
        char path[PATH_MAX];
        for (size_t i = 0; i < g.n && r->bytes > target; i++) {
            kv_tier_dir_path(dir, g.v[i].id, path);
            int u = kv_tier_dir_unlink(path, g.v[i].dev, g.v[i].ino);
            if (u == 1) {
                r->raced++;
                continue;
            }
            if (u < 0) {
                r->failed++;
                continue;
            }
            r->evicted++;
            r->evicted_bytes += g.v[i].size;
            r->bytes -= g.v[i].size;
            r->n_blocks--;
        }
    }
out:
    free(g.v);
    return rc;
}
