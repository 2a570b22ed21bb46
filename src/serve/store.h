/*
 * store.h - stored Responses API objects in SQLite (<data dir>/responses.db).
 *
 * One table: id -> the response JSON as returned to the client, plus the
 * conversation so far (messages ending with this response's answer), which
 * is what previous_response_id continues. WAL mode; statements prepared once.
 *
 * Thread: the event-loop thread only (the connection is not shared). Calls
 * are synchronous; rows are small, a few hundred microseconds at most.
 */
#ifndef INFERD_SERVE_STORE_H
#define INFERD_SERVE_STORE_H

#include "base/err.h"

#include <stdbool.h>

struct store;

/* Opens or creates dir/responses.db. */
int store_open(const char *dir, struct store **out, struct err_msg *msg);
/* Closes the database cleanly (checkpoints the WAL). NULL is a no-op. */
void store_close(struct store *s);
int store_put(struct store *s, const char *id, const char *response, const char *conversation,
              struct err_msg *msg);
/* *response / *conversation: heap strings (either pointer may be NULL if
 * not wanted). ERR_NOT_FOUND when there is no such id. */
int store_get(struct store *s, const char *id, char **response, char **conversation,
              struct err_msg *msg);
/* ERR_NOT_FOUND when there is no such id. */
int store_delete(struct store *s, const char *id, struct err_msg *msg);

#endif
