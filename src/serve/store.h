/*
 * store.h - stored Responses API objects in SQLite (<data dir>/responses.db),
 * or in Redis, where every gateway behind one load balancer finds them.
 *
 * One table: id -> the response JSON as returned to the client, plus the
 * conversation so far (messages ending with this response's answer), which
 * is what previous_response_id continues. WAL mode; statements prepared once.
 *
 * Retention: a row older than the store's TTL is expired: reads do not see
 * it, and store_purge deletes it (the server runs it periodically). Rows
 * are written with synchronous=FULL: when store_put returns 0 the row is
 * durable.
 *
 * Redis (store_open_redis): one key per response, inferd:responses:<id>,
 * holding both texts in one value written by one SET with the TTL as its
 * expiry (so a response is never half there, and Redis drops expired ones:
 * store_purge has nothing to do). Durable as the Redis server is
 * configured to be (appendonly yes, appendfsync always: like SQLite's
 * FULL). Redis away: operations fail with ERR_UNAVAILABLE, and the link
 * reconnects with a backoff (kv/redis_link.h).
 *
 * Thread: any thread; operations are serialized by the store's mutex.
 * Calls block (an fsync per write): the server runs them on its store
 * thread and its preparation threads, never on the event loop.
 */
#ifndef INFERD_SERVE_STORE_H
#define INFERD_SERVE_STORE_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct store;

/* Opens or creates dir/responses.db. ttl_s: rows expire this long after they
 * were written (0: never). max_bytes: the most a row's response plus
 * conversation may take (0: no limit). */
int store_open(const char *dir, int64_t ttl_s, size_t max_bytes, struct store **out,
               struct err_msg *msg);
/* The same in the Redis at url (redis://HOST:PORT[/DB], unix:/PATH); the
 * server need not be up yet. ERR_INVALID for a malformed url. */
int store_open_redis(const char *url, int64_t ttl_s, size_t max_bytes, struct store **out,
                     struct err_msg *msg);
/* Closes the database cleanly (checkpoints the WAL). NULL is a no-op. */
void store_close(struct store *s);
/* ERR_TOO_LARGE beyond max_bytes (nothing is written). */
int store_put(struct store *s, const char *id, const char *response, const char *conversation,
              struct err_msg *msg);
/* *response / *conversation: heap strings (either pointer may be NULL if
 * not wanted). ERR_NOT_FOUND when there is no such id. */
int store_get(struct store *s, const char *id, char **response, char **conversation,
              struct err_msg *msg);
/* ERR_NOT_FOUND when there is no such id. */
int store_delete(struct store *s, const char *id, struct err_msg *msg);
/* Deletes expired rows; *n_removed says how many. */
int store_purge(struct store *s, int *n_removed, struct err_msg *msg);

#endif
