/*
 * jobq.h - a small pool of worker threads for work that must not run on an
 * event loop or inside an engine step: request preparation (JSON decoding,
 * chat templates, tokenization, grammar compilation) and store I/O.
 *
 *   owner thread                 workers (n)                 owner thread
 *   jobq_push(job) --> FIFO --> job->run(job) --> done list --> eventfd --> jobq_complete:
 *                                                                          job->done(job)
 *
 * A job is a caller-owned struct (embed struct jobq_job in your own and
 * recover it with container_of-style arithmetic): run() executes on a worker,
 * done() on the owner's thread when it calls jobq_complete after done_fd
 * became readable. Between push and done the job belongs to the queue; the
 * owner must not touch it. Jobs start in push order; with one worker they
 * also finish in that order (what a store needs: a write, then a read of
 * it).
 *
 * Workers run at a lower scheduling priority (nice) than the process, so
 * preparing one huge request takes CPU from the engine's compute threads
 * only when they leave some.
 *
 * Thread safety: jobq_push from any thread; jobq_complete and jobq_stop from
 * the owner's thread.
 */
#ifndef INFERD_BASE_JOBQ_H
#define INFERD_BASE_JOBQ_H

#include "base/err.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct jobq_job {
    void (*run)(struct jobq_job *j);  /* on a worker */
    void (*done)(struct jobq_job *j); /* on the owner's thread, after run */
    bool cancelled;                   /* set by jobq_stop for jobs never run (run skipped) */
    struct jobq_job *next;            /* queue link (the queue's) */
};

struct jobq {
    pthread_t *threads;    /* (n_threads) */
    int n_threads;         /* workers started */
    pthread_mutex_t mu;    /* guards everything below */
    pthread_cond_t cv;     /* a job was queued, or stop */
    struct jobq_job *head; /* pending FIFO: first */
    struct jobq_job *tail; /* pending FIFO: last */
    struct jobq_job *done; /* finished, not yet completed (any order) */
    int n_pending;         /* jobs queued and not started */
    int n_running;         /* jobs on a worker now */
    bool stopping;         /* workers exit when they see it */
    int done_fd;           /* eventfd: readable while done jobs wait */
    int nice;              /* added niceness of the workers */
};

/* Starts n_threads workers (at least 1) at the given added niceness.
 * Returns 0 or a negative errno with msg set. */
int jobq_start(struct jobq *q, int n_threads, int nice, struct err_msg *msg);
/* Queues a job. Any thread. */
void jobq_push(struct jobq *q, struct jobq_job *j);
/* Runs done() of every finished job. The owner's thread, when done_fd is
 * readable (or at any time: it returns 0 when none is finished). Returns the
 * number completed. */
int jobq_complete(struct jobq *q);
/* Jobs queued and not started, plus jobs running. Any thread. */
int jobq_backlog(struct jobq *q);
/* Stops the workers after the jobs they are running; jobs never started
 * complete with cancelled set (run skipped); every done() has run when this
 * returns. The owner's thread. */
void jobq_stop(struct jobq *q);

#endif
