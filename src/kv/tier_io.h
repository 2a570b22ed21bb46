/*
 * tier_io.h - file reads and writes of the directory tiers (disk, shared)
 * through io_uring.
 *
 * One ring per tier, used by the tier's one thread. A call submits its
 * requests and waits for their completions, so from the caller's view it is
 * a plain read or write; what the ring buys is that a request for many
 * files goes to the kernel at once (kv_tier_io_read_many: a directory scan
 * reads every file's header in batches of KV_TIER_IO_DEPTH), and that the
 * data path has no extra copy or thread.
 *
 * Short transfers are resumed until the whole range is done: a read stops
 * early only at end of file, a write never (an error instead). Where the
 * kernel refuses io_uring (a seccomp profile in a container, an old
 * kernel), the same calls use preadv/pwritev/fsync and say so once in the
 * log: the tier works either way.
 *
 * Errors: negated errno. Lifetime: kv_tier_io_new/_free, heap object.
 * Thread safety: one thread at a time.
 */
#ifndef INFERD_KV_TIER_IO_H
#define INFERD_KV_TIER_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

enum { KV_TIER_IO_DEPTH = 64 };

struct kv_tier_io;

/* A ring (or the fallback when the kernel has none for us). Never fails. */
struct kv_tier_io *kv_tier_io_new(void);
void kv_tier_io_free(struct kv_tier_io *io);
/* Whether requests go through io_uring (false: the preadv fallback). */
bool kv_tier_io_uring(const struct kv_tier_io *io);

/* Reads into iov[0..n) (n <= 4) from offset off until the iovecs are full
 * or the file ends. Returns the bytes read or a negated errno. */
ssize_t kv_tier_io_read(struct kv_tier_io *io, int fd, const struct iovec *iov, int n, off_t off);
/* Writes iov[0..n) (n <= 4) at off, all of it. Returns 0 or a negated errno. */
int kv_tier_io_write(struct kv_tier_io *io, int fd, const struct iovec *iov, int n, off_t off);
/* fsync(fd) (data and metadata). Returns 0 or a negated errno. */
int kv_tier_io_fsync(struct kv_tier_io *io, int fd);
/* Reads len bytes at offset 0 of each fds[i] into bufs[i], all at once;
 * res[i] = bytes read (short at end of file) or a negated errno. n <=
 * KV_TIER_IO_DEPTH. */
/* The same with niov (1..4) iovecs per file: file i reads into
 * iov[i * niov .. i * niov + niov) from offset 0. */
void kv_tier_io_readv_many(struct kv_tier_io *io, int n, const int *fds, const struct iovec *iov,
                           int niov, ssize_t *res);
void kv_tier_io_read_many(struct kv_tier_io *io, int n, const int *fds, void *const *bufs,
                          size_t len, ssize_t *res);

#endif
