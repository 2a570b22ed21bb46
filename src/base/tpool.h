/*
 * tpool.h - a persistent compute thread pool with a cheap barrier.
 *
 * The engine thread calls tpool_run(pool, fn, ctx): fn(ctx, ith, nth) runs on
 * all nth threads at once, the caller being thread 0, and tpool_run returns
 * when every thread has returned from fn. Inside fn, tpool_barrier() lines all
 * threads up (a forward pass uses one between dependent ops).
 *
 * Hand-off is a generation counter that workers spin on (with a pause
 * instruction) for a short while before sleeping on a condition variable, so
 * back-to-back runs - one per layer op - cost well under a microsecond, while
 * an idle pool costs no CPU.
 *
 * Work split rule for bit-exact invariance: partition by output rows, never
 * by the reduction dimension, so a result never depends on nth.
 *
 * Thread safety: one caller thread at a time per pool.
 * Lifetime: process or engine; tpool_free joins the workers.
 */
#ifndef INFERD_BASE_TPOOL_H
#define INFERD_BASE_TPOOL_H

struct tpool;

typedef void (*tpool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 counts the caller; n_threads - 1 workers are started. */
struct tpool *tpool_new(int n_threads);
void tpool_free(struct tpool *pool);
int tpool_size(const struct tpool *pool);

void tpool_run(struct tpool *pool, tpool_fn fn, void *ctx);

/* Only from inside fn, called by all nth threads. */
void tpool_barrier(struct tpool *pool);

/* Rows [*lo, *hi) of n for thread ith of nth, rounded to multiples of align
 * (the last thread takes the remainder). */
void tpool_split(int n, int align, int ith, int nth, int *lo, int *hi);

#endif
