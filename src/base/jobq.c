/*
 * jobq.c - worker threads with a pending FIFO and a done list (jobq.h).
 *
 * The done list is pushed by workers and swapped out whole by the owner, so
 * one wake-up of the owner's loop completes every job that finished since
 * the last one; the eventfd is a counter, read (and so cleared) by
 * jobq_complete before it takes the list: a job finishing after the read
 * writes the counter again and is completed on the next wake-up.
 */
#define _GNU_SOURCE
#include "base/jobq.h"

#include "base/check.h"

#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *worker(void *arg)
{
    struct jobq *q = arg;
    if (q->nice > 0) {
        /* Linux applies PRIO_PROCESS to the calling thread when given its
         * thread id: this thread alone gets the lower priority. */
        pid_t tid = (pid_t)syscall(SYS_gettid);
        errno = 0;
        int cur = getpriority(PRIO_PROCESS, (id_t)tid);
        if (errno == 0) setpriority(PRIO_PROCESS, (id_t)tid, MIN(19, cur + q->nice));
    }
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stopping)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stopping) break;
        struct jobq_job *j = q->head;
        q->head = j->next;
        if (!q->head) q->tail = NULL;
        q->n_pending--;
        q->n_running++;
        pthread_mutex_unlock(&q->mu);
        j->run(j);
        pthread_mutex_lock(&q->mu);
        q->n_running--;
        j->next = q->done;
        q->done = j;
        uint64_t one = 1;
        ssize_t n = write(q->done_fd, &one, sizeof(one));
        (void)n; /* EAGAIN: the counter is non-zero already */
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

int jobq_start(struct jobq *q, int n_threads, int nice, struct err_msg *msg)
{
    memset(q, 0, sizeof(*q));
    q->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->done_fd < 0) return err_set(msg, -errno, "eventfd: %s", strerror(errno));
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->nice = nice;
    n_threads = MAX(1, n_threads);
    q->threads = xcalloc((size_t)n_threads, sizeof(*q->threads));
    for (int i = 0; i < n_threads; i++) {
        int rc = pthread_create(&q->threads[i], NULL, worker, q);
        if (rc) {
            jobq_stop(q);
            return err_set(msg, -rc, "cannot start a worker thread: %s", strerror(rc));
        }
        q->n_threads++;
    }
    return 0;
}

void jobq_push(struct jobq *q, struct jobq_job *j)
{
    j->next = NULL;
    j->cancelled = false;
    pthread_mutex_lock(&q->mu);
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->n_pending++;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int jobq_complete(struct jobq *q)
{
    uint64_t v;
    ssize_t n = read(q->done_fd, &v, sizeof(v));
    (void)n; /* EAGAIN: nothing signalled; the list may still hold jobs */
    pthread_mutex_lock(&q->mu);
    struct jobq_job *list = q->done;
    q->done = NULL;
    pthread_mutex_unlock(&q->mu);
    /* The list is newest first: reverse it so done() runs in finish order. */
    struct jobq_job *rev = NULL;
    while (list) {
        struct jobq_job *next = list->next;
        list->next = rev;
        rev = list;
        list = next;
    }
    int count = 0;
    while (rev) {
        struct jobq_job *next = rev->next;
        rev->done(rev);
        rev = next;
        count++;
    }
    return count;
}

int jobq_backlog(struct jobq *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->n_pending + q->n_running;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void jobq_stop(struct jobq *q)
{
    if (!q->threads) return;
    pthread_mutex_lock(&q->mu);
    q->stopping = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < q->n_threads; i++)
        pthread_join(q->threads[i], NULL);
    free(q->threads);
    q->threads = NULL;
    jobq_complete(q);
    struct jobq_job *j = q->head;
    q->head = q->tail = NULL;
    while (j) {
        struct jobq_job *next = j->next;
        j->cancelled = true;
        j->done(j);
        j = next;
    }
    close(q->done_fd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}
