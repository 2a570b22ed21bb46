/*
 * tier_io.c - io_uring requests of the directory tiers (tier_io.h).
 */
#include "kv/tier_io.h"

#include "base/check.h"
#include "base/log.h"

#include <errno.h>
#include <liburing.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kv_tier_io {
    struct io_uring ring; /* valid when uring */
    bool uring;           /* false: preadv/pwritev/fsync */
};

struct kv_tier_io *kv_tier_io_new(void)
{
    struct kv_tier_io *io = xcalloc(1, sizeof(*io));
    int rc = io_uring_queue_init(KV_TIER_IO_DEPTH, &io->ring, 0);
    io->uring = rc == 0;
    if (rc) {
        static bool said;
        if (!said)
            log_warn("kv tiers: io_uring unavailable (%s); file tiers use preadv/pwritev",
                     strerror(-rc));
        said = true;
    }
    return io;
}

void kv_tier_io_free(struct kv_tier_io *io)
{
    if (!io) return;
    if (io->uring) io_uring_queue_exit(&io->ring);
    free(io);
}

bool kv_tier_io_uring(const struct kv_tier_io *io)
{
    return io->uring;
}

/* Submits the one prepared request and returns its result. */
static int run_one(struct kv_tier_io *io)
{
    int rc = io_uring_submit(&io->ring);
    if (rc < 0) return rc;
    struct io_uring_cqe *cqe;
    do
        rc = io_uring_wait_cqe(&io->ring, &cqe);
    while (rc == -EINTR);
    if (rc < 0) return rc;
    int res = cqe->res;
    io_uring_cqe_seen(&io->ring, cqe);
    return res;
}

/* Drops done bytes from the front of v[0..*n). */
static void advance(struct iovec *v, int *n, size_t done)
{
    int i = 0;
    while (i < *n && done >= v[i].iov_len)
        done -= v[i++].iov_len;
    memmove(v, v + i, (size_t)(*n - i) * sizeof(*v));
    *n -= i;
    if (*n) {
        v[0].iov_base = (uint8_t *)v[0].iov_base + done;
        v[0].iov_len -= done;
    }
}

ssize_t kv_tier_io_read(struct kv_tier_io *io, int fd, const struct iovec *iov, int n, off_t off)
{
    CHECK(n >= 1 && n <= 4);
    struct iovec v[4];
    memcpy(v, iov, (size_t)n * sizeof(*v));
    ssize_t total = 0;
    while (n > 0) {
        ssize_t r;
        if (io->uring) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
            io_uring_prep_readv(sqe, fd, v, (unsigned)n, (uint64_t)off);
            r = run_one(io);
        } else {
            r = preadv(fd, v, n, off);
            if (r < 0) r = -errno;
        }
        if (r == -EINTR || r == -EAGAIN) continue;
        if (r < 0) return r;
        if (r == 0) break; /* end of file */
        total += r;
        off += r;
        advance(v, &n, (size_t)r);
    }
    return total;
}

int kv_tier_io_write(struct kv_tier_io *io, int fd, const struct iovec *iov, int n, off_t off)
{
    CHECK(n >= 1 && n <= 4);
    struct iovec v[4];
    memcpy(v, iov, (size_t)n * sizeof(*v));
    while (n > 0) {
        ssize_t r;
        if (io->uring) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
            io_uring_prep_writev(sqe, fd, v, (unsigned)n, (uint64_t)off);
            r = run_one(io);
        } else {
            r = pwritev(fd, v, n, off);
            if (r < 0) r = -errno;
        }
        if (r == -EINTR || r == -EAGAIN) continue;
        if (r < 0) return (int)r;
        if (r == 0) return -EIO; /* no progress and no error: do not spin */
        off += r;
        advance(v, &n, (size_t)r);
    }
    return 0;
}

int kv_tier_io_fsync(struct kv_tier_io *io, int fd)
{
    if (!io->uring) return fsync(fd) ? -errno : 0;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
    io_uring_prep_fsync(sqe, fd, 0);
    return run_one(io);
}

void kv_tier_io_readv_many(struct kv_tier_io *io, int n, const int *fds, const struct iovec *iov,
                           int niov, ssize_t *res)
{
    CHECK(n >= 0 && n <= KV_TIER_IO_DEPTH && niov >= 1 && niov <= 4);
    if (!io->uring) {
        for (int i = 0; i < n; i++)
            res[i] = kv_tier_io_read(io, fds[i], iov + (size_t)i * niov, niov, 0);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        io_uring_prep_readv(sqe, fds[i], iov + (size_t)i * niov, (unsigned)niov, 0);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
        res[i] = -EIO;
    }
    int submitted = 0;
    while (submitted < n) {
        int rc = io_uring_submit(&io->ring);
        if (rc == -EINTR) continue;
        if (rc <= 0) break;
        submitted += rc;
    }
    for (int got = 0; got < submitted; got++) {
        struct io_uring_cqe *cqe;
        int rc;
        do
            rc = io_uring_wait_cqe(&io->ring, &cqe);
        while (rc == -EINTR);
        if (rc < 0) break;
        res[io_uring_cqe_get_data64(cqe)] = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
    }
    /* A short read (a signal, a pipe-like file) is finished one by one;
     * end of file stays short. */
    for (int i = 0; i < n; i++) {
        const struct iovec *v = iov + (size_t)i * niov;
        if (res[i] >= 0) {
            size_t want = 0;
            for (int k = 0; k < niov; k++)
                want += v[k].iov_len;
            if ((size_t)res[i] >= want) continue;
            struct iovec rest[4];
            memcpy(rest, v, (size_t)niov * sizeof(*v));
            int left = niov;
            advance(rest, &left, (size_t)res[i]);
            ssize_t more = kv_tier_io_read(io, fds[i], rest, left, res[i]);
            res[i] = more < 0 ? more : res[i] + more;
        } else if (res[i] == -EINTR || res[i] == -EAGAIN) {
            res[i] = kv_tier_io_read(io, fds[i], v, niov, 0);
        }
    }
}

void kv_tier_io_read_many(struct kv_tier_io *io, int n, const int *fds, void *const *bufs,
                          size_t len, ssize_t *res)
{
    CHECK(n >= 0 && n <= KV_TIER_IO_DEPTH);
    struct iovec v[KV_TIER_IO_DEPTH];
    for (int i = 0; i < n; i++)
        v[i] = (struct iovec){bufs[i], len};
    kv_tier_io_readv_many(io, n, fds, v, 1, res);
}
