/*
 * tiers.h - opening the RAM, disk and shared-directory tiers (each behind
 * the kv_tier_ops of tier.h; the chain, kv/chain.h, takes them from here).
 *
 *   RAM     tier_ram.c     frames in host memory; index + recency order
 *   disk    tier_disk.c    one record file per block under a directory this
 *                          process owns (flock); index rebuilt from the files
 *                          at open; io_uring reads and writes
 *   shared  tier_shared.c  one record file per block under a directory many
 *                          processes or machines mount; the filesystem is the
 *                          index; atomic publish (fsync, rename, fsync dir);
 *                          capacity and expiry by gc passes any process runs
 *
 * The directory layout, the checks and the garbage collection the disk and
 * shared tiers share are tier_dir.h's (docs/kv-tiers.md has the whole
 * picture).
 *
 * Capacity: bytes held, counting what the medium holds (RAM: frames; disk,
 * shared: record files). A put that needs room evicts the blocks the index
 * gives up first (kv_tier_index_victim); the shared tier has no index and
 * evicts in gc passes (earliest expiry first).
 *
 * Time: `now` is unix seconds from the caller (the chain's clock), so
 * tests advance time by passing a later value.
 *
 * Lifetime: each open returns a heap object that t->ops->close frees.
 * Thread safety: one thread at a time per tier (tier.h).
 */
#ifndef INFERD_KV_TIERS_H
#define INFERD_KV_TIERS_H

#include "base/err.h"
#include "kv/tier.h"
#include "kv/tier_index.h"
#include "kv/tier_dir.h"

#include <stdint.h>

/* Seconds a tier that could not write waits before it tries again (a
 * removal that frees space lets it try at once). */
#define KV_TIER_RETRY_S 10
/* Seconds between a shared tier's gc passes. */
#define KV_TIER_SHARED_GC_S 60
/* Age after which a temporary file in a shared directory is a crash's
 * leftover, not a publish in progress. */
#define KV_TIER_SHARED_TEMP_GRACE_S 900

/* A RAM tier of capacity_bytes (> 0) of frames of layout l, evicting by
 * policy (tier_index.h). Returns 0 or ERR_INVALID with a message. */
int kv_tier_ram_open(const struct kv_frame_layout *l, uint64_t capacity_bytes,
                     const struct kv_tier_policy *policy, struct kv_tier **out,
                     struct err_msg *msg);

/* A disk tier on dir (created if missing), capacity_bytes of record files
 * (0: half the filesystem's free space at open, plus what the tier holds
 * already). Takes dir/lock (flock) so that no other process runs a disk
 * tier there; rebuilds the index from the files: torn, corrupt, foreign
 * and expired records (by now) and temporary files are removed and counted
 * (corrupt, expirations), sound ones are indexed oldest first by their
 * modification time (a hit rewrites the header: the time of last use),
 * all as probation entries of policy (tier_index.h).
 * A directory that cannot be written opens read-only (writable false).
 * Returns 0, or a negative code with a message: dir cannot be made or read,
 * it is locked by another process, bad layout. */
int kv_tier_disk_open(const char *dir, const struct kv_frame_layout *l, uint64_t capacity_bytes,
                      const struct kv_tier_policy *policy, int64_t now, struct kv_tier **out,
                      struct err_msg *msg);

/* A shared tier on dir (created if missing) bounded at capacity_bytes of
 * record files (0: no bound but expiry). Runs a gc pass at open (which
 * also gives the first figures for used_bytes and n_blocks). Returns 0 or a
 * negative code with a message (dir cannot be made or read, bad layout). */
int kv_tier_shared_open(const char *dir, const struct kv_frame_layout *l, uint64_t capacity_bytes,
                        int64_t now, struct kv_tier **out, struct err_msg *msg);

/* How the disk or shared tier t reads records (tier_dir.h): cached (the
 * default), O_DIRECT or cold (page cache dropped around each read), for
 * measurements from the medium itself. Returns 0, or ERR_INVALID when t is
 * another kind. */
int kv_tier_set_read_mode(struct kv_tier *t, enum kv_tier_read_mode mode);

#endif
