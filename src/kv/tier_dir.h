/*
 * tier_dir.h - a directory of block records: what the disk tier, the
 * shared tier and `inferd kv` have in common.
 *
 * One file per block, holding one record (tier.h: the 56-byte record
 * header, then the frame), named by the id's 32 hex digits and fanned out
 * into 256 subdirectories by its first two:
 *
 *   DIR/
 *     lock                          the disk tier's (flock: one owner)
 *     3f/
 *       3fa9...e1                   a record: the block 3fa9...e1
 *       .3fa9...e1.tmp              a disk tier's write in progress
 *       .3fa9...e1.HOST.PID.N.tmp   a shared tier's publish in progress
 *
 * A record only ever appears under its final name complete: it is written
 * under a temporary name (a dot, ".tmp" at the end) and renamed, so a crash
 * leaves at worst a temporary file, which the next scan removes. Anything
 * else in the directory is left alone (a tier pointed at a directory with
 * other files in it never deletes them).
 *
 * Checks, cheapest first. A scan reads each record's first 112 bytes (the
 * record header and the frame header) and classifies the file:
 *
 *   CORRUPT  shorter than both headers; bad record magic or checksum; the
 *            record names another block than the file name; the file size
 *            is not header + frame length; bad frame magic; the frame
 *            names another block or its layout gives another length
 *   FOREIGN  a sound record of another layout (fingerprint, shape) than
 *            the one asked for
 *   EXPIRED  sound, and its expiry is before now
 *   OK       sound and live
 *
 * The payload checksum is checked by kv_tier_dir_read (every get) and by
 * `inferd kv verify`, not by scans: a scan of a full disk reads 112 bytes
 * per block, not the disk.
 *
 * Removal races (the shared tier: another process may publish a block
 * again between our look and our unlink): a file is unlinked only if the
 * name still refers to the inode that was looked at. A race that is lost
 * costs a miss, never a wrong byte.
 *
 * Thread safety: none of its own; the tier's thread, or the command.
 */
#ifndef INFERD_KV_TIER_DIR_H
#define INFERD_KV_TIER_DIR_H

#include "base/err.h"
#include "kv/frame.h"
#include "kv/tier.h"
#include "kv/tier_io.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define KV_TIER_DIR_HEAD (KV_TIER_RECORD_HEADER + KV_FRAME_HEADER) /* bytes a scan reads */
/* Longest directory name a tier takes (room for "/3f/.<hex>.HOST.PID.N.tmp"). */
#define KV_TIER_DIR_MAX (PATH_MAX - 192)

enum kv_tier_file_state {
    KV_TIER_FILE_OK,      /* a sound, live record */
    KV_TIER_FILE_EXPIRED, /* sound, expiry passed */
    KV_TIER_FILE_FOREIGN, /* sound, another layout than asked for */
    KV_TIER_FILE_CORRUPT, /* torn, flipped, mislabelled: never to be served */
    KV_TIER_FILE_TEMP,    /* a temporary name: a write in progress or left by a crash */
};

/* One file a scan found. */
struct kv_tier_file {
    enum kv_tier_file_state state; /* what it is */
    uint8_t id[16];                /* the block its name names (not TEMP) */
    struct kv_tier_record rec;     /* its record header (OK, EXPIRED, FOREIGN) */
    struct kv_frame_layout layout; /* its frame's layout (OK, EXPIRED, FOREIGN) */
    uint64_t size;                 /* file bytes */
    int64_t mtime;                 /* last modification, unix seconds */
    dev_t dev;                     /* with ino: the file looked at */
    ino_t ino;                     /* (for kv_tier_dir_unlink) */
    char path[PATH_MAX];           /* DIR/3f/NAME */
    char why[200];                 /* CORRUPT, FOREIGN: what is wrong */
};

/* Called for each file found; a non-zero return stops the scan and is
 * returned by it. */
typedef int (*kv_tier_dir_fn)(void *ctx, const struct kv_tier_file *f);

/* Visits every record and temporary file under dir (in directory order),
 * reading headers in batches through io. want: the layout to classify
 * against (NULL: any layout is OK; the caller compares f->layout). Returns
 * 0, the callback's non-zero value, or a negative code with a message
 * (dir cannot be read). Subdirectories that cannot be read are skipped. */
int kv_tier_dir_scan(struct kv_tier_io *io, const char *dir, const struct kv_frame_layout *want,
                     int64_t now, kv_tier_dir_fn fn, void *ctx, struct err_msg *msg);

/* Classifies a record file from its first n bytes (head, n <= 112), its
 * size and the id its name gives (f->size, f->id); fills f's state, rec,
 * layout and why, and returns the state. */
enum kv_tier_file_state kv_tier_dir_check_head(const uint8_t *head, size_t n,
                                               const struct kv_frame_layout *want, int64_t now,
                                               struct kv_tier_file *f);

/* DIR/3f/<hex> into out (PATH_MAX). */
void kv_tier_dir_path(const char *dir, const uint8_t id[16], char *out);
/* DIR/3f into out (PATH_MAX). */
void kv_tier_dir_sub(const char *dir, const uint8_t id[16], char *out);
/* mkdir -p of path; 0 or a negated errno. */
int kv_tier_dir_mkdirs(const char *path);
/* Unlinks path if it still is (dev, ino). 0 (removed, or gone already),
 * 1 (another file has the name now: left alone), or a negated errno. */
int kv_tier_dir_unlink(const char *path, dev_t dev, ino_t ino);

/* How kv_tier_dir_read reads a record. */
enum kv_tier_read_mode {
    KV_TIER_READ_CACHED, /* through the page cache */
    KV_TIER_READ_DIRECT, /* O_DIRECT (where the filesystem refuses it: as COLD) */
    KV_TIER_READ_COLD,   /* posix_fadvise(DONTNEED) before and after: from the device */
};

/* A reader's settings and its aligned buffer for O_DIRECT. Caller-owned:
 * zero-initialised = cached reads; kv_tier_dir_reader_release frees. */
struct kv_tier_dir_reader {
    enum kv_tier_read_mode mode; /* see above */
    bool no_direct;              /* the filesystem refused O_DIRECT once */
    uint8_t *direct_buf;         /* (direct_cap) 4096-aligned, for O_DIRECT */
    size_t direct_cap;           /* bytes */
};
void kv_tier_dir_reader_release(struct kv_tier_dir_reader *rd);

enum kv_tier_read_result {
    KV_TIER_READ_HIT,     /* buf holds the verified frame */
    KV_TIER_READ_ABSENT,  /* no such file */
    KV_TIER_READ_EXPIRED, /* sound, expiry passed */
    KV_TIER_READ_CORRUPT, /* anything else wrong with the file (msg says what) */
    KV_TIER_READ_ERROR,   /* an I/O error reading it (msg) */
};

/* Reads path (the record of id) and checks it fully: record header, its
 * id, size and expiry, then kv_frame_check against l and id. On HIT buf
 * (cap >= kv_frame_bytes(l)) holds the frame; rec (may be NULL) receives
 * the header on HIT and EXPIRED; *dev, *ino the file read (for an unlink
 * of a CORRUPT one). */
enum kv_tier_read_result kv_tier_dir_read(struct kv_tier_dir_reader *rd, struct kv_tier_io *io,
                                          const char *path, const struct kv_frame_layout *l,
                                          const uint8_t id[16], int64_t now, void *buf,
                                          struct kv_tier_record *rec, dev_t *dev, ino_t *ino,
                                          struct err_msg *msg);

/* One record of a batched read: path and id in, the rest out. */
struct kv_tier_dir_want {
    const char *path;             /* the record of id */
    const uint8_t *id;            /* the block asked for */
    void *buf;                    /* (kv_frame_bytes) the frame on HIT */
    enum kv_tier_read_result res; /* as kv_tier_dir_read returns */
    struct kv_tier_record rec;    /* the header on HIT and EXPIRED */
    dev_t dev;                    /* the file read (for an unlink of a CORRUPT one) */
    ino_t ino;
    struct err_msg msg; /* what was wrong, where res says so */
};

/* kv_tier_dir_read of w[0..n) (n <= KV_TIER_IO_DEPTH) at once: every file
 * opened, then every read in one io_uring submission, then every check. */
void kv_tier_dir_read_many(struct kv_tier_dir_reader *rd, struct kv_tier_io *io,
                           const struct kv_frame_layout *l, int64_t now, struct kv_tier_dir_want *w,
                           int n);

/* Scratch for one batch: the wants and their paths (heap: it is large). */
struct kv_tier_dir_batch {
    struct kv_tier_dir_want w[KV_TIER_IO_DEPTH];
    char path[KV_TIER_IO_DEPTH][PATH_MAX];
};

/* Rewrites the 56-byte record header of path in place with expiry
 * max(old, expires) (a hit or a put extending a block's life). Returns 0
 * (also when nothing was to raise), ERR_NOT_FOUND (no such file),
 * ERR_FORMAT (the header there is not a sound one of id), or a negated
 * errno. *old_expires (may be NULL) receives what the header said. */
int kv_tier_dir_raise_expiry(struct kv_tier_io *io, const char *path, const uint8_t id[16],
                             int64_t expires, int64_t *old_expires);

/* Garbage collection of a directory. */
struct kv_tier_gc_opts {
    int64_t now;                          /* unix seconds */
    const struct kv_frame_layout *layout; /* NULL: any layout is sound */
    uint64_t max_bytes;                   /* 0: no bound; else evict when above it */
    uint64_t target_bytes;                /* evict down to this (<= max_bytes; 0: max_bytes) */
    int64_t temp_grace_s;                 /* temporary files older than this are removed */
};

struct kv_tier_gc_report {
    uint64_t n_blocks;      /* sound live records left (any layout) */
    uint64_t bytes;         /* their bytes */
    uint64_t expired;       /* removed: expiry passed */
    uint64_t corrupt;       /* removed: corrupt */
    uint64_t temp;          /* removed: stale temporary files */
    uint64_t evicted;       /* removed to fit max_bytes, earliest expiry first */
    uint64_t evicted_bytes; /* their bytes */
    uint64_t foreign;       /* left: records of another layout (counted in n_blocks) */
    uint64_t raced;         /* left: replaced by another process while we looked */
    uint64_t failed;        /* could not be removed (read-only directory...) */
};

/* Removes expired, corrupt and stale temporary files, then (max_bytes)
 * the records expiring first until the live bytes fit target_bytes. Any
 * number of processes may run it on one directory at once: each removal
 * is of the inode looked at, and a file already gone counts for nobody.
 * Returns 0, or a negative code with a message (dir cannot be read). */
int kv_tier_dir_gc(struct kv_tier_io *io, const char *dir, const struct kv_tier_gc_opts *o,
                   struct kv_tier_gc_report *r, struct err_msg *msg);

/* Inside the module: kv_tier_set_read_mode (tier_disk.c) for a shared tier. */
struct kv_tier;
int kv__tier_shared_read_mode(struct kv_tier *t, enum kv_tier_read_mode mode);

#endif
