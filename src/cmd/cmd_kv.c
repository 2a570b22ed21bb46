/*
 * cmd_kv.c - `inferd kv stat|ls|verify|gc DIR`: inspects and repairs the
 * directory of a disk or shared KV tier (kv/tier_dir.h has its layout and
 * the states a file can be in).
 *
 *   stat    files and bytes by state, blocks and bytes by layout, the
 *           expiry and stored-time range of the live blocks (--json)
 *   ls      one line per file: id, state, bytes, stored, expiry and the
 *           engine fingerprint's first digits (--json: JSON lines)
 *   verify  reads every record in full, the payload checksum too, which a
 *           scan does not read; exit 1 if any is corrupt; --repair removes
 *           the corrupt ones
 *   gc      kv_tier_dir_gc: expired, corrupt and stale temporary files go;
 *           with --max the records expiring first, down to --target
 *
 * What a block's layout is: the frame header's engine fingerprint, layer
 * count and bytes per layer. The block size in tokens is not in a record:
 * it is one of the inputs of the fingerprint, so two block sizes are two
 * fingerprints. A scan here classifies against no layout (every sound record
 * is ok or expired); stat and ls take --fingerprint to count the records
 * of other engines as foreign.
 *
 * Locking. The reading commands take no lock and run beside a server: each
 * file is seen as it is when looked at, and a file that goes between the
 * scan and a read (a server evicted it) is no error. The commands that
 * remove files (verify --repair, gc) take DIR/lock, the flock a disk tier
 * holds while it runs (tier_disk.c), without waiting, and keep it until
 * they are done, so no server indexes the directory while files vanish
 * from it; a lock that is held refuses them unless --force. A shared
 * tier's directory has no lock file: its servers expect any process to gc
 * it at any time (every removal is of the inode that was looked at).
 *
 * Exit status: 0; 1 when the directory cannot be read, is not a tier
 * directory or is in use, when verify found a corrupt record or could not
 * read one, or when a file could not be removed; 2 for a bad command line.
 *
 * Thread: main thread only (the option parser).
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "kv/spec.h"
#include "kv/tier.h"
#include "kv/tier_dir.h"
#include "kv/tiers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

enum { N_STATES = KV_TIER_FILE_TEMP + 1 };

static const char *const state_names[N_STATES] = {
    [KV_TIER_FILE_OK] = "ok",           [KV_TIER_FILE_EXPIRED] = "expired",
    [KV_TIER_FILE_FOREIGN] = "foreign", [KV_TIER_FILE_CORRUPT] = "corrupt",
    [KV_TIER_FILE_TEMP] = "temp",
};

/* Formatting --------------------------------------------------------------- */

/* "2026-01-31T12:00:00Z"; the number itself where no calendar date fits. */
static const char *fmt_time(int64_t t, char buf[static 32])
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!gmtime_r(&tt, &tm) || !strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, 32, "%" PRId64, t);
    return buf;
}

/* "12.5 MiB" */
static const char *fmt_bytes(uint64_t v, char buf[static 32])
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double x = (double)v;
    int u = 0;
    while (x >= 1024 && u < 4) {
        x /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, 32, "%" PRIu64 " B", v);
    else
        snprintf(buf, 32, "%.1f %s", x, units[u]);
    return buf;
}

/* s as a JSON string, quotes included. Bytes from 0x80 up pass as they are
 * (a path is bytes; one that is not UTF-8 stays what it is). */
static void put_json_str(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* "key":"ISO time" or "key":null */
static void put_json_time(const char *key, bool have, int64_t t)
{
    char b[32];
    printf("\"%s\":", key);
    if (have)
        printf("\"%s\"", fmt_time(t, b));
    else
        fputs("null", stdout);
}

/* A message of kv_tier_dir_read without its leading "'PATH': " (the
 * report names the path already). */
static const char *without_path(const char *msg, const char *path)
{
    size_t n = strlen(path);
    if (msg[0] == '\'' && !strncmp(msg + 1, path, n) && !strncmp(msg + 1 + n, "': ", 3))
        return msg + n + 4;
    return msg;
}

/* The directory --------------------------------------------------------------- */

/* The directory a command works on. */
struct kv_dir {
    char path[KV_TIER_DIR_MAX + 1]; /* DIR as given, without trailing slashes */
    char lock[PATH_MAX];            /* DIR/lock */
    bool has_lock;                  /* DIR/lock exists: a disk tier's directory */
    int lock_fd;                    /* DIR/lock while we hold its flock, or -1 */
};

/* "inferd NAME: MESSAGE" on stderr; returns CMD_EXIT_FAIL. */
static int fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inferd %s: ", name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CMD_EXIT_FAIL;
}

static bool is_sub_name(const char *s)
{
    for (int i = 0; i < 2; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return s[2] == 0;
}

/* Checks that dir is a tier directory: an empty one, or one with a lock
 * file or a fan-out subdirectory (tier_dir.h). 0, or 1 after an error line. */
static int dir_open(const char *name, const char *dir, struct kv_dir *d)
{
    memset(d, 0, sizeof(*d));
    d->lock_fd = -1;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    if (n > KV_TIER_DIR_MAX) return fail(name, "directory name too long: '%s'", dir);
    memcpy(d->path, dir, n);
    d->path[n] = 0;
    struct stat st;
    if (stat(d->path, &st))
        return fail(name, "cannot open tier directory '%s': %s", d->path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return fail(name, "'%s' is not a directory", d->path);
    DIR *dd = opendir(d->path);
    if (!dd) return fail(name, "cannot read directory '%s': %s", d->path, strerror(errno));
    bool empty = true, tier = false;
    struct dirent *e;
    while (!tier && (e = readdir(dd))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        empty = false;
        tier = !strcmp(e->d_name, "lock") || is_sub_name(e->d_name);
    }
    closedir(dd);
    if (!empty && !tier)
        return fail(name,
                    "'%s' is not a KV tier directory (no lock file, no record subdirectories "
                    "00..ff)",
                    d->path);
    snprintf(d->lock, sizeof(d->lock), "%s/lock", d->path);
    d->has_lock = lstat(d->lock, &st) == 0 && S_ISREG(st.st_mode);
    return 0;
}

static void dir_close(struct kv_dir *d)
{
    if (d->lock_fd >= 0) close(d->lock_fd); /* releases the flock */
    d->lock_fd = -1;
}

/* The process /proc/locks names as holding an flock on the file st
 * describes, or 0 (none, or /proc/locks cannot say). Reading it takes no
 * lock, so a server starting meanwhile is not disturbed. */
static long lock_holder(const struct stat *st)
{
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[256];
    long pid = 0;
    while (!pid && fgets(line, sizeof(line), f)) {
        /* "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's
         * line has "->" after the number */
        char kind[16];
        long p;
        unsigned maj, min;
        unsigned long long ino;
        if (strstr(line, "->")) continue;
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", kind, &p, &maj, &min, &ino) == 5 &&
            !strcmp(kind, "FLOCK") && maj == major(st->st_dev) && min == minor(st->st_dev) &&
            ino == (unsigned long long)st->st_ino)
            pid = p;
    }
    fclose(f);
    return pid;
}

/* The holder of DIR/lock by /proc/locks (0: none seen, or no lock file). */
static long dir_lock_holder(const struct kv_dir *d)
{
    struct stat st;
    if (!d->has_lock || stat(d->lock, &st)) return 0;
    return lock_holder(&st);
}

/* For a command that removes files: takes DIR/lock without waiting and
 * holds it until dir_close. 0, or 1 after an error line when a server holds
 * it (or it cannot be checked) and force is not set. */
static int dir_lock(const char *name, struct kv_dir *d, bool force)
{
    if (!d->has_lock) return 0; /* a shared tier's directory, or one no disk tier opened */
    int fd = open(d->lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        if (errno == ENOENT || force) return 0;
        return fail(name, "cannot open '%s' to see whether a server uses the directory: %s",
                    d->lock, strerror(errno));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        d->lock_fd = fd;
        return 0;
    }
    int err = errno;
    struct stat st;
    long pid = err == EWOULDBLOCK && !fstat(fd, &st) ? lock_holder(&st) : 0;
    close(fd);
    if (err != EWOULDBLOCK) {
        if (force) return 0;
        return fail(name, "cannot lock '%s': %s", d->lock, strerror(err));
    }
    char who[64] = "";
    if (pid > 0) snprintf(who, sizeof(who), "process %ld ", pid);
    if (force) {
        fprintf(stderr,
                "inferd %s: '%s' is in use by a running server (%sholds %s); going on "
                "(--force)\n",
                name, d->path, who, d->lock);
        return 0;
    }
    return fail(name, "'%s' is in use by a running server (%sholds %s): stop it, or pass --force",
                d->path, who, d->lock);
}

/* Scans d with fn; 0, fn's non-zero value, or 1 after an error line. */
static int dir_scan(const char *name, const struct kv_dir *d, struct kv_tier_io *io, int64_t now,
                    kv_tier_dir_fn fn, void *ctx)
{
    struct err_msg m = {{0}};
    int rc = kv_tier_dir_scan(io, d->path, NULL, now, fn, ctx, &m);
    if (rc < 0) return fail(name, "%s", m.text[0] ? m.text : err_str(rc));
    return rc;
}

/* dir_scan at the present time with an I/O context of its own. */
static int dir_scan_now(const char *name, const struct kv_dir *d, kv_tier_dir_fn fn, void *ctx)
{
    struct kv_tier_io *io = kv_tier_io_new();
    int rc = dir_scan(name, d, io, (int64_t)time(NULL), fn, ctx);
    kv_tier_io_free(io);
    return rc;
}

/* f's state, with records of another fingerprint than fp (NULL: any) as
 * FOREIGN; *why: what is wrong ("" when nothing). */
static enum kv_tier_file_state state_of(const struct kv_tier_file *f, const uint8_t *fp,
                                        const char **why)
{
    *why = f->why;
    bool sound = f->state == KV_TIER_FILE_OK || f->state == KV_TIER_FILE_EXPIRED;
    if (fp && sound && memcmp(f->layout.fingerprint, fp, 16) != 0) {
        *why = "another engine fingerprint";
        return KV_TIER_FILE_FOREIGN;
    }
    return f->state;
}

/* Options shared by the subcommands -------------------------------------------- */

static int set_size(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct err_msg inner = {{0}};
    int rc = kv_parse_size(val, dst, &inner);
    if (rc) return err_set(m, rc, "%s: %s", spelling, inner.text);
    if (*(uint64_t *)dst == 0)
        return err_set(m, ERR_INVALID, "%s: the size must be above 0", spelling);
    return 0;
}

static int set_duration(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct err_msg inner = {{0}};
    int rc = kv_parse_duration(val, dst, &inner);
    return rc ? err_set(m, rc, "%s: %s", spelling, inner.text) : 0;
}

/* --fingerprint HEX: dst is a struct fp_opt. */
struct fp_opt {
    uint8_t v[16]; /* the fingerprint */
    bool set;      /* given */
};

static int set_fingerprint(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct fp_opt *o = dst;
    if (!kv_tier_id_parse(val, o->v))
        return err_set(m, ERR_INVALID, "%s: expected 32 hex digits, got '%s'", spelling, val);
    o->set = true;
    return 0;
}

/* Parses a subcommand's command line; *dir: its one operand. Returns -1 to
 * go on, or the exit status. */
static int parse(const struct cmd_spec *spec, int argc, char **argv, const char **dir)
{
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (cmd_opt_operands_max(spec, argc, argv, argi, 1)) return CMD_EXIT_USAGE;
    if (argi == argc || !*argv[argi]) return cmd_usage_error(spec, "give the tier directory DIR");
    *dir = argv[argi];
    return -1;
}

/* Output that could not be written is a failure (a full disk, a closed pipe). */
static int finish(const char *name, int status)
{
    if (fflush(stdout) != 0) return fail(name, "cannot write output: %s", strerror(errno));
    return status;
}

/* stat ----------------------------------------------------------------------- */

struct layout_count {
    struct kv_frame_layout l; /* the layout */
    uint64_t n;               /* sound records of it (ok, expired, foreign) */
    uint64_t n_live;          /* of which ok */
    uint64_t bytes;           /* their file bytes */
};

struct stat_ctx {
    const uint8_t *fp;                /* --fingerprint, or NULL */
    uint64_t n[N_STATES];             /* files by state */
    uint64_t bytes[N_STATES];         /* their bytes */
    struct layout_count *layouts;     /* (n_layouts, cap) in the order first seen */
    size_t n_layouts, cap;            /* entries, allocated */
    int64_t expires_min, expires_max; /* of the live (ok) blocks, when n[OK] > 0 */
    int64_t stored_min, stored_max;   /* likewise */
};

static bool same_layout(const struct kv_frame_layout *a, const struct kv_frame_layout *b)
{
    return !memcmp(a->fingerprint, b->fingerprint, 16) && a->n_layer == b->n_layer &&
           a->layer_bytes == b->layer_bytes;
}

static struct layout_count *layout_slot(struct stat_ctx *c, const struct kv_frame_layout *l)
{
    for (size_t i = 0; i < c->n_layouts; i++)
        if (same_layout(&c->layouts[i].l, l)) return &c->layouts[i];
    if (c->n_layouts == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4;
        c->layouts = xrealloc(c->layouts, c->cap * sizeof(*c->layouts));
    }
    struct layout_count *s = &c->layouts[c->n_layouts++];
    *s = (struct layout_count){.l = *l};
    return s;
}

static int stat_file(void *ctx, const struct kv_tier_file *f)
{
    struct stat_ctx *c = ctx;
    const char *why;
    enum kv_tier_file_state s = state_of(f, c->fp, &why);
    c->n[s]++;
    c->bytes[s] += f->size;
    if (s == KV_TIER_FILE_CORRUPT || s == KV_TIER_FILE_TEMP) return 0;
    struct layout_count *lc = layout_slot(c, &f->layout);
    lc->n++;
    lc->bytes += f->size;
    if (s != KV_TIER_FILE_OK) return 0;
    lc->n_live++;
    const struct kv_tier_record *r = &f->rec;
    if (c->n[s] == 1) {
        c->expires_min = c->expires_max = r->expires;
        c->stored_min = c->stored_max = r->stored;
        return 0;
    }
    if (r->expires < c->expires_min) c->expires_min = r->expires;
    if (r->expires > c->expires_max) c->expires_max = r->expires;
    if (r->stored < c->stored_min) c->stored_min = r->stored;
    if (r->stored > c->stored_max) c->stored_max = r->stored;
    return 0;
}

static void stat_print_json(const struct kv_dir *d, const struct stat_ctx *c, long holder)
{
    uint64_t files = 0, bytes = 0;
    for (int s = 0; s < N_STATES; s++) {
        files += c->n[s];
        bytes += c->bytes[s];
    }
    fputs("{\"dir\":", stdout);
    put_json_str(d->path);
    if (holder > 0)
        printf(",\"lock_pid\":%ld", holder);
    else
        fputs(",\"lock_pid\":null", stdout);
    printf(",\"files\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"states\":{", files, bytes);
    for (int s = 0; s < N_STATES; s++)
        printf("%s\"%s\":{\"files\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", s ? "," : "",
               state_names[s], c->n[s], c->bytes[s]);
    fputs("},\"layouts\":[", stdout);
    for (size_t i = 0; i < c->n_layouts; i++) {
        const struct layout_count *lc = &c->layouts[i];
        char hex[33];
        kv_tier_id_hex(lc->l.fingerprint, hex);
        printf("%s{\"fingerprint\":\"%s\",\"n_layer\":%" PRIu32 ",\"layer_bytes\":%" PRIu32
               ",\"frame_bytes\":%zu,\"blocks\":%" PRIu64 ",\"live\":%" PRIu64 ",\"bytes\":%" PRIu64
               "}",
               i ? "," : "", hex, lc->l.n_layer, lc->l.layer_bytes, kv_frame_bytes(&lc->l), lc->n,
               lc->n_live, lc->bytes);
    }
    bool live = c->n[KV_TIER_FILE_OK] > 0;
    printf("],\"live\":{\"blocks\":%" PRIu64 ",", c->n[KV_TIER_FILE_OK]);
    put_json_time("expires_first", live, c->expires_min);
    putchar(',');
    put_json_time("expires_last", live, c->expires_max);
    putchar(',');
    put_json_time("stored_oldest", live, c->stored_min);
    putchar(',');
    put_json_time("stored_newest", live, c->stored_max);
    fputs("}}\n", stdout);
}

static void stat_print_text(const struct kv_dir *d, const struct stat_ctx *c, long holder)
{
    uint64_t files = 0, bytes = 0;
    for (int s = 0; s < N_STATES; s++) {
        files += c->n[s];
        bytes += c->bytes[s];
    }
    char b[32], t1[32], t2[32];
    printf("directory: %s\n", d->path);
    if (holder > 0) printf("in use by: process %ld (holds %s)\n", holder, d->lock);
    printf("files: %" PRIu64 ", %s\n", files, fmt_bytes(bytes, b));
    for (int s = 0; s < N_STATES; s++)
        printf("  %-8s %10" PRIu64 "  %s\n", state_names[s], c->n[s], fmt_bytes(c->bytes[s], b));
    printf("layouts: %zu\n", c->n_layouts);
    for (size_t i = 0; i < c->n_layouts; i++) {
        const struct layout_count *lc = &c->layouts[i];
        char hex[33];
        kv_tier_id_hex(lc->l.fingerprint, hex);
        printf("  %s  %" PRIu32 " layers x %" PRIu32 " bytes, frames of %zu bytes: %" PRIu64
               " blocks (%" PRIu64 " live), %s\n",
               hex, lc->l.n_layer, lc->l.layer_bytes, kv_frame_bytes(&lc->l), lc->n, lc->n_live,
               fmt_bytes(lc->bytes, b));
    }
    if (!c->n[KV_TIER_FILE_OK]) {
        printf("live blocks: none\n");
        return;
    }
    printf("live blocks: expiring %s .. %s\n", fmt_time(c->expires_min, t1),
           fmt_time(c->expires_max, t2));
    printf("             stored   %s .. %s\n", fmt_time(c->stored_min, t1),
           fmt_time(c->stored_max, t2));
}

static int kv_stat(int argc, char **argv)
{
    bool json = false;
    struct fp_opt fp = {0};
    const struct cmd_opt opts[] = {
        CMD_OPT_FLAG("json", 0, "one JSON object instead of text", &json),
        CMD_OPT_CALL("fingerprint", 0, "HEX",
                     "count records of other engine fingerprints as foreign\n"
                     "(32 hex digits, as stat lists them)",
                     set_fingerprint, &fp),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "kv stat",
        .synopsis = "DIR [options]",
        .about = "Counts the files of a KV tier directory by state (ok, expired, foreign,\n"
                 "corrupt, temp) and the records by layout, with the expiry and stored-time\n"
                 "range of the live blocks. Reads only the headers; safe beside a server.",
        .opts = opts,
    };
    const char *dir = NULL;
    int rc = parse(&spec, argc, argv, &dir);
    if (rc >= 0) return rc;
    struct kv_dir d;
    if (dir_open(spec.name, dir, &d)) return CMD_EXIT_FAIL;
    struct stat_ctx c = {.fp = fp.set ? fp.v : NULL};
    rc = dir_scan_now(spec.name, &d, stat_file, &c);
    if (!rc) {
        long holder = dir_lock_holder(&d);
        if (json)
            stat_print_json(&d, &c, holder);
        else
            stat_print_text(&d, &c, holder);
    }
    free(c.layouts);
    return finish(spec.name, rc ? CMD_EXIT_FAIL : CMD_EXIT_OK);
}

/* ls ------------------------------------------------------------------------- */

struct ls_ctx {
    const uint8_t *fp; /* --fingerprint, or NULL */
    bool json;         /* JSON lines */
};

static int ls_file(void *ctx, const struct kv_tier_file *f)
{
    const struct ls_ctx *c = ctx;
    const char *why;
    enum kv_tier_file_state s = state_of(f, c->fp, &why);
    char id[33], fp[33], stored[32], expires[32];
    if (s == KV_TIER_FILE_TEMP) {
        /* the id is in the temporary name: ".<32 hex>[...].tmp" */
        const char *name = strrchr(f->path, '/');
        snprintf(id, sizeof(id), "%.32s", name ? name + 2 : "");
    } else {
        kv_tier_id_hex(f->id, id);
    }
    bool sound = s != KV_TIER_FILE_CORRUPT && s != KV_TIER_FILE_TEMP;
    if (sound) {
        kv_tier_id_hex(f->layout.fingerprint, fp);
        fmt_time(f->rec.stored, stored);
        fmt_time(f->rec.expires, expires);
    }
    if (c->json) {
        printf("{\"id\":\"%s\",\"state\":\"%s\",\"bytes\":%" PRIu64 ",", id, state_names[s],
               f->size);
        put_json_time("stored", sound, f->rec.stored);
        putchar(',');
        put_json_time("expires", sound, f->rec.expires);
        if (sound)
            printf(",\"fingerprint\":\"%s\",\"n_layer\":%" PRIu32 ",\"layer_bytes\":%" PRIu32, fp,
                   f->layout.n_layer, f->layout.layer_bytes);
        fputs(",\"path\":", stdout);
        put_json_str(f->path);
        if (why[0]) {
            fputs(",\"why\":", stdout);
            put_json_str(why);
        }
        fputs("}\n", stdout);
        return 0;
    }
    printf("%s  %-7s  %10" PRIu64 "  %-20s  %-20s  %.8s%s%s\n", id, state_names[s], f->size,
           sound ? stored : "-", sound ? expires : "-", sound ? fp : "-", why[0] ? "  " : "", why);
    return 0;
}

static int kv_ls(int argc, char **argv)
{
    bool json = false;
    struct fp_opt fp = {0};
    const struct cmd_opt opts[] = {
        CMD_OPT_FLAG("json", 0, "one JSON object per file (JSON lines)", &json),
        CMD_OPT_CALL("fingerprint", 0, "HEX",
                     "show records of other engine fingerprints as foreign", set_fingerprint, &fp),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "kv ls",
        .synopsis = "DIR [options]",
        .about = "One line per file of a KV tier directory, in directory order:\n"
                 "  ID  STATE  BYTES  STORED  EXPIRES  FINGERPRINT (first 8 digits)  [WHY]\n"
                 "times in UTC (ISO 8601); '-' where a file has no sound header.",
        .opts = opts,
    };
    const char *dir = NULL;
    int rc = parse(&spec, argc, argv, &dir);
    if (rc >= 0) return rc;
    struct kv_dir d;
    if (dir_open(spec.name, dir, &d)) return CMD_EXIT_FAIL;
    struct ls_ctx c = {.fp = fp.set ? fp.v : NULL, .json = json};
    rc = dir_scan_now(spec.name, &d, ls_file, &c);
    return finish(spec.name, rc ? CMD_EXIT_FAIL : CMD_EXIT_OK);
}

/* verify --------------------------------------------------------------------- */

/* A corrupt record, to remove with --repair. */
struct bad_file {
    char *path; /* heap */
    dev_t dev;  /* with ino: the file found corrupt */
    ino_t ino;
};

struct verify_ctx {
    struct kv_tier_io *io;        /* the reads */
    struct kv_tier_dir_reader rd; /* cached reads */
    uint8_t *buf;                 /* (cap) one frame */
    size_t cap;                   /* bytes */
    uint64_t n_records;           /* records verified, corrupt ones included */
    uint64_t bytes;               /* their bytes */
    uint64_t n_expired;           /* sound but expired (gc removes them) */
    uint64_t n_temp;              /* temporary files (not records: skipped) */
    uint64_t n_gone;              /* removed by another process between scan and read */
    uint64_t n_errors;            /* could not be read (I/O error, permissions, memory) */
    struct bad_file *bad;         /* (n_bad, cap_bad) */
    size_t n_bad, cap_bad;        /* entries, allocated */
};

static void add_bad(struct verify_ctx *c, const char *path, dev_t dev, ino_t ino, const char *why)
{
    printf("corrupt  %s: %s\n", path, why);
    if (c->n_bad == c->cap_bad) {
        c->cap_bad = c->cap_bad ? 2 * c->cap_bad : 16;
        c->bad = xrealloc(c->bad, c->cap_bad * sizeof(*c->bad));
    }
    char *p = strdup(path);
    CHECK(p);
    c->bad[c->n_bad++] = (struct bad_file){.path = p, .dev = dev, .ino = ino};
}

static int verify_file(void *ctx, const struct kv_tier_file *f)
{
    struct verify_ctx *c = ctx;
    if (f->state == KV_TIER_FILE_TEMP) {
        c->n_temp++;
        return 0;
    }
    if (f->state == KV_TIER_FILE_CORRUPT) {
        c->n_records++;
        c->bytes += f->size;
        add_bad(c, f->path, f->dev, f->ino, f->why);
        return 0;
    }
    size_t need = kv_frame_bytes(&f->layout); /* the file has this size: the scan checked */
    if (need > c->cap) {
        free(c->buf);
        c->buf = malloc(need);
        c->cap = c->buf ? need : 0;
        if (!c->buf) {
            printf("error    %s: no memory for a frame of %zu bytes\n", f->path, need);
            c->n_errors++;
            return 0;
        }
    }
    struct err_msg m = {{0}};
    dev_t dev = f->dev;
    ino_t ino = f->ino;
    /* now = INT64_MIN: an expired record is read and checked in full too */
    enum kv_tier_read_result res = kv_tier_dir_read(&c->rd, c->io, f->path, &f->layout, f->id,
                                                    INT64_MIN, c->buf, NULL, &dev, &ino, &m);
    if (res == KV_TIER_READ_ABSENT) {
        c->n_gone++;
        return 0;
    }
    c->n_records++;
    c->bytes += f->size;
    if (res == KV_TIER_READ_CORRUPT) {
        add_bad(c, f->path, dev, ino, without_path(m.text, f->path));
    } else if (res == KV_TIER_READ_ERROR) {
        printf("error    %s: %s\n", f->path, without_path(m.text, f->path));
        c->n_errors++;
    } else if (f->state == KV_TIER_FILE_EXPIRED) {
        c->n_expired++;
    }
    return 0;
}

/* Removes the corrupt records found; prints what was done. 0 when every
 * one is gone, 1 when one could not be removed. */
static int repair(const char *name, struct verify_ctx *c)
{
    uint64_t removed = 0, replaced = 0, failed = 0;
    for (size_t i = 0; i < c->n_bad; i++) {
        int rc = kv_tier_dir_unlink(c->bad[i].path, c->bad[i].dev, c->bad[i].ino);
        if (rc == 0) {
            removed++;
        } else if (rc == 1) {
            replaced++; /* another process wrote the block again since */
        } else {
            fprintf(stderr, "inferd %s: cannot remove '%s': %s\n", name, c->bad[i].path,
                    err_str(rc));
            failed++;
        }
    }
    printf("removed %" PRIu64 " corrupt record%s", removed, removed == 1 ? "" : "s");
    if (replaced) printf(", %" PRIu64 " written again meanwhile (left alone)", replaced);
    if (failed) printf(", %" PRIu64 " could not be removed", failed);
    putchar('\n');
    return failed ? CMD_EXIT_FAIL : CMD_EXIT_OK;
}

static int kv_verify(int argc, char **argv)
{
    bool do_repair = false, force = false;
    const struct cmd_opt opts[] = {
        CMD_OPT_FLAG("repair", 0, "remove the corrupt records", &do_repair),
        CMD_OPT_FLAG("force", 0, "with --repair: go on while a server holds DIR/lock", &force),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "kv verify",
        .synopsis = "DIR [--repair [--force]]",
        .about =
            "Reads every record of a KV tier directory in full and checks it: the record\n"
            "header, its size and block id, the frame header and the payload checksum\n"
            "(expired records too). Prints one line per bad record with the reason, then a\n"
            "summary. Exit status 1 when a record is corrupt or cannot be read; with --repair\n"
            "the corrupt ones are removed and the status is 0 once they all are. --repair\n"
            "refuses a directory whose DIR/lock a running server holds.",
        .opts = opts,
    };
    const char *dir = NULL;
    int rc = parse(&spec, argc, argv, &dir);
    if (rc >= 0) return rc;
    if (force && !do_repair) return cmd_usage_error(&spec, "--force goes with --repair");
    struct kv_dir d;
    if (dir_open(spec.name, dir, &d)) return CMD_EXIT_FAIL;
    if (do_repair && dir_lock(spec.name, &d, force)) return CMD_EXIT_FAIL;
    struct verify_ctx c = {.io = kv_tier_io_new()};
    rc = dir_scan(spec.name, &d, c.io, (int64_t)time(NULL), verify_file, &c);
    int status = CMD_EXIT_FAIL;
    if (rc) goto out;
    char b[32];
    printf("verified %" PRIu64 " record%s (%s): %" PRIu64 " sound (%" PRIu64 " expired), %zu "
           "corrupt",
           c.n_records, c.n_records == 1 ? "" : "s", fmt_bytes(c.bytes, b),
           c.n_records - c.n_bad - c.n_errors, c.n_expired, c.n_bad);
    if (c.n_errors) printf(", %" PRIu64 " unreadable", c.n_errors);
    if (c.n_gone) printf("; %" PRIu64 " removed by another process meanwhile", c.n_gone);
    if (c.n_temp)
        printf("; %" PRIu64 " temporary file%s skipped", c.n_temp, c.n_temp == 1 ? "" : "s");
    putchar('\n');
    if (do_repair)
        status = repair(spec.name, &c);
    else
        status = c.n_bad ? CMD_EXIT_FAIL : CMD_EXIT_OK;
    if (c.n_errors) status = CMD_EXIT_FAIL;
out:
    for (size_t i = 0; i < c.n_bad; i++)
        free(c.bad[i].path);
    free(c.bad);
    free(c.buf);
    kv_tier_dir_reader_release(&c.rd);
    kv_tier_io_free(c.io);
    dir_close(&d);
    return finish(spec.name, status);
}

/* gc ------------------------------------------------------------------------- */

static int kv_gc(int argc, char **argv)
{
    uint64_t max = 0, target = 0;
    int64_t grace = KV_TIER_SHARED_TEMP_GRACE_S;
    bool force = false;
    const struct cmd_opt opts[] = {
        CMD_OPT_CALL("max", 0, "SIZE",
                     "when the live records hold more, evict those expiring first\n"
                     "(B, KiB, MiB, GiB, TiB)",
                     set_size, &max),
        CMD_OPT_CALL("target", 0, "SIZE", "evict down to this (default: --max)", set_size, &target),
        CMD_OPT_CALL("temp-grace", 0, "DURATION",
                     "temporary files older than this are a crash's leftovers\n"
                     "(s, m, h, d; default 15m)",
                     set_duration, &grace),
        CMD_OPT_FLAG("force", 0, "go on while a server holds DIR/lock", &force),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "kv gc",
        .synopsis = "DIR [--max SIZE [--target SIZE]] [options]",
        .about = "Removes a KV tier directory's expired and corrupt records (by their headers)\n"
                 "and stale temporary files; with --max, then the records expiring first until\n"
                 "the rest fit. Refuses a directory whose DIR/lock a running server holds.",
        .opts = opts,
    };
    const char *dir = NULL;
    int rc = parse(&spec, argc, argv, &dir);
    if (rc >= 0) return rc;
    if (target && !max) return cmd_usage_error(&spec, "--target goes with --max");
    if (target > max) return cmd_usage_error(&spec, "--target must not be above --max");
    struct kv_dir d;
    if (dir_open(spec.name, dir, &d)) return CMD_EXIT_FAIL;
    if (dir_lock(spec.name, &d, force)) return CMD_EXIT_FAIL;
    const struct kv_tier_gc_opts o = {
        .now = (int64_t)time(NULL),
        .max_bytes = max,
        .target_bytes = target,
        .temp_grace_s = grace,
    };
    struct kv_tier_gc_report r;
    struct err_msg m = {{0}};
    struct kv_tier_io *io = kv_tier_io_new();
    rc = kv_tier_dir_gc(io, d.path, &o, &r, &m);
    kv_tier_io_free(io);
    dir_close(&d);
    if (rc) return fail(spec.name, "%s", m.text[0] ? m.text : err_str(rc));
    char b1[32], b2[32];
    printf("removed: %" PRIu64 " expired, %" PRIu64 " corrupt, %" PRIu64
           " stale temporary, %" PRIu64 " evicted (%s)\n",
           r.expired, r.corrupt, r.temp, r.evicted, fmt_bytes(r.evicted_bytes, b1));
    printf("left: %" PRIu64 " blocks, %s", r.n_blocks, fmt_bytes(r.bytes, b2));
    if (max) printf(" (--max %s)", fmt_bytes(max, b1));
    putchar('\n');
    if (r.raced) printf("%" PRIu64 " written again meanwhile (left alone)\n", r.raced);
    int status = CMD_EXIT_OK;
    if (r.failed) {
        fprintf(stderr, "inferd %s: %" PRIu64 " files could not be removed\n", spec.name, r.failed);
        status = CMD_EXIT_FAIL;
    }
    return finish(spec.name, status);
}

/* Dispatch -------------------------------------------------------------------- */

static void kv_usage(FILE *out)
{
    fprintf(out, "usage: inferd kv <command> DIR [options]\n"
                 "\n"
                 "Inspects and repairs the directory of a disk or shared KV tier\n"
                 "(--kv-tier disk:DIR, shared:DIR:SIZE; docs/kv-tiers.md).\n"
                 "\n"
                 "commands:\n"
                 "  stat    files and bytes by state and layout; expiry range of the live blocks\n"
                 "  ls      one line per file: id, state, bytes, stored, expires, fingerprint\n"
                 "  verify  read every record in full; --repair removes the corrupt ones\n"
                 "  gc      remove expired, corrupt and stale temporary files; --max evicts\n"
                 "\n"
                 "stat, ls and verify run beside a server; verify --repair and gc refuse a\n"
                 "directory a server holds (DIR/lock) unless --force.\n"
                 "run 'inferd kv <command> --help' for a command's options.\n");
}

int cmd_kv(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } subs[] = {{"stat", kv_stat}, {"ls", kv_ls}, {"verify", kv_verify}, {"gc", kv_gc}};
    if (argc < 2) {
        kv_usage(stderr);
        return CMD_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        kv_usage(stdout);
        return CMD_EXIT_OK;
    }
    for (size_t i = 0; i < ARRAY_LEN(subs); i++)
        if (!strcmp(argv[1], subs[i].name)) return subs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "inferd kv: unknown command '%s' (stat, ls, verify, gc; see --help)\n",
            argv[1]);
    return CMD_EXIT_USAGE;
}
