/*
 * redis_link.h - one blocking connection to a Redis server that outlives
 * the server's outages: the URL forms operators write, fast connects and
 * command timeouts, reconnects spaced by a backoff (100 ms doubling to
 * 2 s), each outage logged once each way. Cluster membership and the
 * shared response store run on one each.
 *
 * URLs: redis://HOST:PORT[/DB]; unix:/ABSOLUTE/PATH or
 * redis+unix:///ABSOLUTE/PATH for a Unix socket.
 *
 * Thread: one at a time (the owner serializes its calls); a call blocks for
 * at most the timeouts.
 */
#ifndef INFERD_KV_REDIS_LINK_H
#define INFERD_KV_REDIS_LINK_H

#include "base/err.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>

struct redis_link {
    char host[256];  /* TCP host, or "" for a Unix socket */
    int port;        /* TCP port */
    char sock[1024]; /* socket path, or "" */
    int db;          /* SELECTed on every connect (0: none needed) */
    char what[32];   /* the owner, for log lines ("membership") */
    struct timeval connect_timeout, command_timeout;
    redisContext *c;          /* NULL while down */
    double next_try, backoff; /* reconnect spacing */
    bool logged_down;         /* the outage is in the log */
};

/* Parses url into l (no connection yet: Redis need not be up). what names
 * the owner in log lines. Returns 0, or ERR_INVALID with a message quoting
 * url and the forms it takes. */
int redis_link_init(struct redis_link *l, const char *url, const char *what, int connect_ms,
                    int command_ms, struct err_msg *msg);
/* Runs one command (argv[0..argc), lens NULL: NUL-terminated), connecting
 * first if need be. The reply (freeReplyObject it), or NULL while Redis is
 * down or the command failed on the wire (the link is then down until the
 * next try). An error reply is a reply. */
redisReply *redis_link_cmd(struct redis_link *l, int argc, const char **argv, const size_t *lens);
/* For pipelines: the connected context (connecting first if need be), or
 * NULL while down. */
redisContext *redis_link_ctx(struct redis_link *l);
/* The connection broke mid-pipeline: down until the next try. */
void redis_link_broken(struct redis_link *l);
/* "HOST:PORT" or the socket path, for messages. */
const char *redis_link_where(const struct redis_link *l);
void redis_link_close(struct redis_link *l);

#endif
