/*
 * backend.c - the local backend: the runner's calls behind backend.h.
 */
#include "node/backend.h"

static struct runner *runner_of(struct node_backend *b)
{
    return ((struct node_local *)b)->r;
}

static void local_submit(struct node_backend *b, uint64_t tag, const struct inferd_request *req,
                         int64_t ttl_s, const char *ttl_class, const char *traceparent,
                         const struct node_targets *targets)
{
    (void)targets;     /* no prediction here: max_waiting refuses */
    (void)ttl_class;   /* ttl_s says it all here */
    (void)traceparent; /* the server's own log line carries the request's id */
    runner_submit_ttl(runner_of(b), tag, req, ttl_s);
}

static void local_cancel(struct node_backend *b, uint64_t tag)
{
    runner_cancel(runner_of(b), tag);
}

static void local_pause(struct node_backend *b, uint64_t tag, bool paused)
{
    runner_pause(runner_of(b), tag, paused);
}

static size_t local_drain(struct node_backend *b, struct runner_msg **msgs, size_t *cap)
{
    return runner_drain(runner_of(b), msgs, cap);
}

static void local_stats(struct node_backend *b, struct runner_stats *s)
{
    runner_get_stats(runner_of(b), s);
}

static const struct node_backend_ops local_ops = {
    .submit = local_submit,
    .cancel = local_cancel,
    .pause = local_pause,
    .drain = local_drain,
    .stats = local_stats,
};

void node_backend_local(struct node_local *l, struct runner *r)
{
    l->base = (struct node_backend){.ops = &local_ops, .wake_fd = r->wake_fd};
    l->r = r;
}
