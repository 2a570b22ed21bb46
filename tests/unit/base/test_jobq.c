/*
 * test_jobq.c - worker jobs: every job runs once on a worker and completes
 * on the owner's thread; one worker keeps push order; stop completes the
 * jobs never started with `cancelled`; the done fd wakes a poll.
 */
#include "test.h"

#include "base/jobq.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct tjob {
    struct jobq_job job; /* first: the test casts */
    int index;           /* push order */
    pthread_t ran_on;    /* worker that ran it */
    int *done_order;     /* where done() records */
    int *n_done;         /* completions so far */
    int sleep_us;        /* run time */
};

static _Atomic int n_ran, n_started;

static void tjob_run(struct jobq_job *j)
{
    struct tjob *t = (struct tjob *)j;
    atomic_fetch_add(&n_started, 1);
    t->ran_on = pthread_self();
    if (t->sleep_us) usleep((useconds_t)t->sleep_us);
    atomic_fetch_add(&n_ran, 1);
}

static void tjob_done(struct jobq_job *j)
{
    struct tjob *t = (struct tjob *)j;
    t->done_order[(*t->n_done)++] = j->cancelled ? -1 - t->index : t->index;
}

static void drain(struct jobq *q, int *n_done, int want)
{
    for (int spins = 0; *n_done < want && spins < 5000; spins++) {
        struct pollfd p = {.fd = q->done_fd, .events = POLLIN};
        poll(&p, 1, 10);
        jobq_complete(q);
    }
}

/* Pushes n jobs recording into order / n_done; job i sleeps sleep_us(i). */
static void push_jobs(struct jobq *q, struct tjob *jobs, int n, int *order, int *n_done,
                      int (*sleep_us)(int i))
{
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct tjob){.job = {.run = tjob_run, .done = tjob_done},
                                .index = i,
                                .done_order = order,
                                .n_done = n_done,
                                .sleep_us = sleep_us ? sleep_us(i) : 0};
        jobq_push(q, &jobs[i].job);
    }
}

static int every_seventh_sleeps(int i)
{
    return i % 7 == 0 ? 200 : 0;
}

static int all_sleep(int i)
{
    return 20000;
}

TEST(every_job_runs_once_off_thread)
{
    enum { N = 300 };
    static struct tjob jobs[N];
    static int order[N];
    int n_done = 0;
    struct jobq q;
    struct err_msg msg = {{0}};
    EXPECT_EQ_INT(jobq_start(&q, 3, 5, &msg), 0);
    atomic_store(&n_ran, 0);
    push_jobs(&q, jobs, N, order, &n_done, NULL);
    drain(&q, &n_done, N);
    EXPECT_EQ_INT(n_done, N);
    EXPECT_EQ_INT(atomic_load(&n_ran), N);
    static char seen[N];
    memset(seen, 0, sizeof(seen));
    for (int i = 0; i < N; i++) {
        EXPECT(order[i] >= 0 && order[i] < N);
        if (order[i] >= 0 && order[i] < N) seen[order[i]]++;
        EXPECT(!pthread_equal(jobs[i].ran_on, pthread_self()));
    }
    for (int i = 0; i < N; i++)
        EXPECT_EQ_INT(seen[i], 1);
    EXPECT_EQ_INT(jobq_backlog(&q), 0);
    jobq_stop(&q);
}

TEST(one_worker_keeps_order)
{
    enum { N = 100 };
    static struct tjob jobs[N];
    static int order[N];
    int n_done = 0;
    struct jobq q;
    EXPECT_EQ_INT(jobq_start(&q, 1, 0, NULL), 0);
    push_jobs(&q, jobs, N, order, &n_done, every_seventh_sleeps);
    drain(&q, &n_done, N);
    EXPECT_EQ_INT(n_done, N);
    for (int i = 0; i < N; i++)
        EXPECT_EQ_INT(order[i], i);
    jobq_stop(&q);
}

TEST(stop_cancels_jobs_never_started)
{
    enum { N = 20 };
    static struct tjob jobs[N];
    static int order[N];
    int n_done = 0;
    struct jobq q;
    EXPECT_EQ_INT(jobq_start(&q, 1, 0, NULL), 0);
    const int started = atomic_load(&n_started);
    push_jobs(&q, jobs, N, order, &n_done, all_sleep);
    /* until the worker is inside job 0 (a loaded host may take a while to
     * schedule it; bounded at 5 s) */
    for (int spins = 0; atomic_load(&n_started) == started && spins < 5000; spins++)
        usleep(1000);
    jobq_stop(&q);
    EXPECT_EQ_INT(n_done, N);
    int ran = 0, cancelled = 0;
    for (int i = 0; i < N; i++)
        order[i] >= 0 ? ran++ : cancelled++;
    EXPECT(ran >= 1);
    EXPECT(cancelled >= 1);
    EXPECT_EQ_INT(ran + cancelled, N);
}

TEST_MAIN()
