/*
 * tpool.c - see tpool.h.
 *
 *   caller (ith 0)            worker 1..nth-1
 *   fn, ctx = ...             spin on gen (then sleep on cond)
 *   gen++ ----------------->  sees new gen, runs fn(ctx, ith, nth)
 *   runs fn(ctx, 0, nth)      n_done++
 *   waits n_done == nth-1 <-
 *
 * The barrier is sense-reversing: each arrival decrements a counter; the last
 * one resets it and flips the phase the others spin on.
 */
#include "base/tpool.h"

#include "base/check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SPIN_ROUNDS 200000 /* ~ a few ms of spinning before sleeping */

struct worker {
    struct tpool *pool; /* back pointer */
    int ith;            /* 1..nth-1 */
    pthread_t thread;   /* joined by tpool_free */
};

struct tpool {
    int nth;                        /* threads including the caller */
    struct worker *workers;         /* (nth - 1) */
    _Atomic unsigned gen;           /* bumped once per tpool_run */
    _Atomic int n_done;             /* workers finished with the current gen */
    _Atomic int n_sleeping;         /* workers blocked on cond */
    _Atomic bool stop;              /* set by tpool_free */
    tpool_fn fn;                    /* current job, valid while gen is current */
    void *ctx;                      /* argument to fn */
    _Atomic int barrier_left;       /* arrivals still expected */
    _Atomic unsigned barrier_phase; /* flips when a barrier opens */
    pthread_mutex_t mu;             /* guards sleeping on cond */
    pthread_cond_t cond;            /* signalled on new gen or stop */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waiting on a peer: spin briefly (the peer is usually microseconds away),
 * then yield the core. Pure spinning is a disaster when the machine is
 * oversubscribed: a waiter can burn a whole time slice while the thread it
 * waits for sits descheduled on the same core. */
static inline void wait_step(unsigned *spins)
{
    if (++*spins < 2000) {
        cpu_relax();
    } else {
        sched_yield();
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct tpool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&p->stop, memory_order_acquire)) {
            if (++spins < SPIN_ROUNDS) {
                if (spins % 1024 == 0)
                    sched_yield();
                else
                    cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cond, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, w->ith, p->nth);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
}

struct tpool *tpool_new(int n_threads)
{
    CHECK(n_threads >= 1);
    struct tpool *p = xcalloc(1, sizeof(*p));
    p->nth = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cond, NULL);
    atomic_store(&p->barrier_left, n_threads);
    p->workers = xcalloc((size_t)n_threads, sizeof(*p->workers));
    for (int i = 1; i < n_threads; i++) {
        struct worker *w = &p->workers[i - 1];
        w->pool = p;
        w->ith = i;
        CHECK(pthread_create(&w->thread, NULL, worker_main, w) == 0);
    }
    return p;
}

void tpool_free(struct tpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->nth; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p->workers);
    free(p);
}

int tpool_size(const struct tpool *p)
{
    return p->nth;
}

void tpool_run(struct tpool *p, tpool_fn fn, void *ctx)
{
    if (p->nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->nth);
    unsigned spins = 0;
    while (atomic_load_explicit(&p->n_done, memory_order_acquire) != p->nth - 1)
        wait_step(&spins);
}

void tpool_barrier(struct tpool *p)
{
    if (p->nth == 1) return;
    unsigned phase = atomic_load_explicit(&p->barrier_phase, memory_order_acquire);
    if (atomic_fetch_sub_explicit(&p->barrier_left, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&p->barrier_left, p->nth, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->barrier_phase, 1, memory_order_release);
        return;
    }
    unsigned spins = 0;
    while (atomic_load_explicit(&p->barrier_phase, memory_order_acquire) == phase)
        wait_step(&spins);
}

void tpool_split(int n, int align, int ith, int nth, int *lo, int *hi)
{
    if (align < 1) align = 1;
    int units = (n + align - 1) / align;
    int per = units / nth, rem = units % nth;
    int u0 = ith * per + (ith < rem ? ith : rem);
    int u1 = u0 + per + (ith < rem ? 1 : 0);
    *lo = MIN(n, u0 * align);
    *hi = MIN(n, u1 * align);
}
