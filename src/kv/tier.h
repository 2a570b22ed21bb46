/*
 * tier.h - KV block tiers behind the engine pool: the contract every tier
 * implements (RAM, disk, shared directory, Redis), and the record a tier
 * keeps one block in.
 *
 * A tier stores block frames (kv/frame.h: the exact bytes inferd_kv_export
 * writes) under their block ids, bounded by a capacity in bytes. Nothing
 * here invents ids or re-encodes blocks: a frame goes in and the same bytes
 * come out, or a miss.
 *
 * Every tier except RAM keeps a block as one record:
 *
 *   0   8  magic "INFDKVT1"
 *   8   8  expires: unix seconds after which the block is a miss (int64)
 *  16   8  stored: unix seconds when first written (int64)
 *  24   8  frame length in bytes (uint64)
 *  32  16  block id (the frame's, repeated so a record names its block
 *          without parsing the frame)
 *  48   8  XXH3-64 of bytes 0..48 (a torn or flipped header is detected)
 *  56      the frame (its own header carries the engine fingerprint and an
 *          XXH3-64 of the payload)
 *
 * All integers little-endian. KV_TIER_RECORD_HEADER bytes precede the
 * frame; a tier that rewrites only the expiry (a hit extending a block's
 * life) rewrites these 56 bytes and nothing else.
 *
 * Verification: a get returns a frame only after kv_frame_check accepted
 * it against the tier's layout and the id asked for, and the record's
 * header checksum and expiry passed; anything else is a miss, counted in
 * corrupt (the record is dropped where the tier can drop it). A tier never
 * hands out bytes it did not verify.
 *
 * Time: every call that depends on time takes `now` (unix seconds) from the
 * caller, so tests advance the clock by passing a later value and the tier
 * code reads no clock of its own for expiry.
 *
 * Threads: a tier is used by one thread at a time (the tier chain's I/O
 * thread); implementations need no locks of their own, except where they
 * run helper threads themselves.
 *
 * Failures: a tier that cannot write (disk full, directory unwritable,
 * Redis down) returns an error from put, sets writable = false in its
 * stats and logs once per change of state; gets keep working where they
 * can. No tier failure is ever a request's failure: the chain treats every
 * error as a miss.
 */
#ifndef INFERD_KV_TIER_H
#define INFERD_KV_TIER_H

#include "base/err.h"
#include "kv/frame.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KV_TIER_RECORD_HEADER 56

enum kv_tier_kind { KV_TIER_RAM, KV_TIER_DISK, KV_TIER_SHARED, KV_TIER_REDIS };

/* Load latency histogram bucket upper bounds in milliseconds (last: +Inf). */
enum { KV_TIER_LAT_BUCKETS = 12 };
extern const double kv_tier_lat_bounds_ms[KV_TIER_LAT_BUCKETS];

struct kv_tier_stats {
    uint64_t hits;          /* gets that returned a verified frame */
    uint64_t misses;        /* gets that did not (absent, expired, corrupt, error) */
    uint64_t bytes_read;    /* frame bytes returned by hits */
    uint64_t bytes_written; /* record bytes written by puts */
    uint64_t puts;          /* frames stored */
    uint64_t put_errors;    /* puts that failed (full, unwritable, down) */
    uint64_t not_admitted;  /* puts the admission policy turned down (tier_index.h) */
    uint64_t evictions;     /* blocks dropped to make room (capacity) */
    uint64_t expirations;   /* blocks dropped or missed because their TTL passed */
    uint64_t corrupt;       /* records dropped as torn, corrupt, foreign or mislabelled */
    uint64_t lat_hist[KV_TIER_LAT_BUCKETS]; /* hit latencies (get call to verified frame) */
    double lat_sum_ms;                      /* sum of those latencies */
    uint64_t used_bytes;                    /* gauge: bytes held (records) */
    uint64_t capacity_bytes;                /* gauge: the bound */
    uint64_t n_blocks;                      /* gauge: blocks held */
    bool writable;                          /* gauge: puts are being accepted */
};

struct kv_tier;

struct kv_tier_ops {
    /* Stores frame (len bytes, already a valid frame of the tier's layout)
     * under id with the given expiry. A block already held only has its
     * expiry raised to max(old, expires). May evict others to make room
     * (policy: kv/tier_index.h). parent: the id of the block before it in
     * its prompt (NULL: the first, or unknown), a hint for the eviction
     * order (a prompt's later blocks go before its earlier ones). Returns
     * 0, or a negative code (the block is then not stored). */
    int (*put)(struct kv_tier *t, const uint8_t id[16], const void *frame, size_t len,
               int64_t expires, int64_t now, const uint8_t *parent);
    /* Copies the verified frame of id into buf (cap >= the layout's frame
     * bytes). Returns the frame length, 0 on a miss (absent, expired,
     * corrupt: counted), or a negative code for an error (also a miss for
     * the caller). A hit counts as an access for the eviction policy. */
    ssize_t (*get)(struct kv_tier *t, const uint8_t id[16], void *buf, size_t cap, int64_t now);
    /* Whether id is held and unexpired, without reading the frame (the
     * index or a metadata probe). May be optimistic: a get can still miss. */
    bool (*has)(struct kv_tier *t, const uint8_t id[16], int64_t now);
    /* Raises the expiry of a held block to max(old, expires) and counts it
     * used for the eviction order, parent as for put; 0 or a negative code
     * (ERR_NOT_FOUND when not held). */
    int (*touch)(struct kv_tier *t, const uint8_t id[16], int64_t expires, int64_t now,
                 const uint8_t *parent);
    /* Loads the leading run of ids[0..n) that this tier holds, as get and
     * then touch would one by one (each frame verified, its expiry raised
     * to at least expires, counted used with the id before it as parent;
     * parent is the one before ids[0], NULL for none), but with as many
     * reads in flight as the medium allows: one io_uring submission for a
     * batch of files, one Redis pipeline. Frame i goes to
     * out + i * frame bytes. Returns how many leading ids were loaded
     * (0..n); it stops at the first it does not hold or cannot verify.
     * A batch's time is counted in the latency histogram shared out over
     * its blocks. */
    int (*get_run)(struct kv_tier *t, const uint8_t (*ids)[16], int n, uint8_t *out,
                   int64_t expires, int64_t now, const uint8_t *parent);
    void (*stats)(struct kv_tier *t, struct kv_tier_stats *out);
    /* Closes and frees t; held blocks persist where the medium does. */
    void (*close)(struct kv_tier *t);
};

/* Common head of every tier; implementations embed it first. */
struct kv_tier {
    const struct kv_tier_ops *ops; /* the implementation */
    enum kv_tier_kind kind;        /* which */
    char name[64];                 /* for logs and metrics: "ram", "disk", "shared", "redis" */
    struct kv_frame_layout layout; /* frames this tier accepts and serves */
};

/* Records ------------------------------------------------------------------ */

struct kv_tier_record {
    int64_t expires;    /* unix seconds */
    int64_t stored;     /* unix seconds */
    uint64_t frame_len; /* bytes of the frame after the header */
    uint8_t id[16];     /* block id */
};

/* Writes the 56-byte record header for r into out. */
void kv_tier_record_encode(const struct kv_tier_record *r, uint8_t out[KV_TIER_RECORD_HEADER]);
/* Parses and checks a record header (magic, checksum). Returns 0 or
 * ERR_FORMAT with a message. Expiry is the caller's to check. */
int kv_tier_record_decode(const uint8_t in[KV_TIER_RECORD_HEADER], struct kv_tier_record *r,
                          struct err_msg *msg);

/* Latency bookkeeping shared by implementations: adds one hit of ms. */
void kv_tier_stats_add_latency(struct kv_tier_stats *s, double ms);

/* get_run for a tier whose get is already as fast one at a time as in a
 * batch (RAM): get then touch for each id in turn. */
int kv_tier_get_run_each(struct kv_tier *t, const uint8_t (*ids)[16], int n, uint8_t *out,
                         int64_t expires, int64_t now, const uint8_t *parent);

/* Hex form of an id (32 lowercase digits + NUL), used for file and key names. */
void kv_tier_id_hex(const uint8_t id[16], char out[33]);
/* Parses 32 hex digits; false if s is not exactly that. */
bool kv_tier_id_parse(const char *s, uint8_t id[16]);

#endif
