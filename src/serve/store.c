/*
 * store.c - stored responses in SQLite (see store.h).
 *
 * One connection, its statements prepared once, one mutex around every
 * operation: SQLite's own serialized mode would make each call safe but not
 * a reset-bind-step-reset sequence on a shared statement.
 */
#include "serve/store.h"

#include "base/check.h"
#include "kv/redis_link.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct store {
    pthread_mutex_t mu;       /* one operation at a time */
    sqlite3 *db;              /* the connection */
    sqlite3_stmt *put;        /* INSERT OR REPLACE */
    sqlite3_stmt *get;        /* SELECT by id, unexpired */
    sqlite3_stmt *del;        /* DELETE by id */
    sqlite3_stmt *purge;      /* DELETE expired */
    int64_t ttl_s;            /* retention; 0: forever */
    size_t max_bytes;         /* response + conversation bytes per row; 0: no limit */
    struct redis_link *redis; /* the Redis store (then db is NULL), or NULL */
};

/* Rows created before this are expired (INT64_MIN: none). */
static int64_t cutoff(const struct store *s)
{
    return s->ttl_s > 0 ? (int64_t)time(NULL) - s->ttl_s : INT64_MIN;
}

static int db_fail(sqlite3 *db, struct err_msg *msg, const char *what)
{
    return err_set(msg, ERR_INTERNAL, "responses store: %s: %s", what, sqlite3_errmsg(db));
}

int store_open(const char *dir, int64_t ttl_s, size_t max_bytes, struct store **out,
               struct err_msg *msg)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/responses.db", dir);
    struct store *s = xcalloc(1, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->ttl_s = ttl_s;
    s->max_bytes = max_bytes;
    int rc;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        rc = err_set(msg, ERR_INVALID, "cannot open '%s': %s", path,
                     s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 2000);
    /* synchronous=FULL: a row is on disk before store_put returns, and the
     * client is told a response is stored only after that. */
    const char *schema = "PRAGMA journal_mode=WAL;"
                         "PRAGMA synchronous=FULL;"
                         "CREATE TABLE IF NOT EXISTS responses ("
                         " id TEXT PRIMARY KEY,"
                         " created INTEGER NOT NULL,"
                         " response TEXT NOT NULL,"
                         " conversation TEXT NOT NULL);";
    if (sqlite3_exec(s->db, schema, NULL, NULL, NULL) != SQLITE_OK) {
        rc = db_fail(s->db, msg, "schema");
        goto fail;
    }
    if (sqlite3_prepare_v2(s->db,
                           "INSERT OR REPLACE INTO responses(id, created, response, "
                           "conversation) VALUES (?, ?, ?, ?)",
                           -1, &s->put, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db,
                           "SELECT response, conversation FROM responses WHERE id = ? AND "
                           "created >= ?",
                           -1, &s->get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db, "DELETE FROM responses WHERE id = ?", -1, &s->del, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(s->db, "DELETE FROM responses WHERE created < ?", -1, &s->purge, NULL) !=
            SQLITE_OK) {
        rc = db_fail(s->db, msg, "prepare");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    store_close(s);
    return rc;
}

/* Redis ---------------------------------------------------------------------------- */

static char *dup_n(const char *p, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, p, n);
    d[n] = 0;
    return d;
}

/* The value: "<response bytes>\n" + response + conversation. */
static void key_of(const char *id, char *key, size_t cap)
{
    snprintf(key, cap, "inferd:responses:%s", id);
}

static int redis_down(struct store *s, struct err_msg *msg)
{
    return err_set(msg, ERR_UNAVAILABLE, "responses store: redis %s is not answering",
                   redis_link_where(s->redis));
}

int store_open_redis(const char *url, int64_t ttl_s, size_t max_bytes, struct store **out,
                     struct err_msg *msg)
{
    struct store *s = xcalloc(1, sizeof(*s));
    s->redis = xcalloc(1, sizeof(*s->redis));
    struct err_msg e = {{0}};
    if (redis_link_init(s->redis, url, "responses store", 250, 2000, &e)) {
        free(s->redis);
        free(s);
        return err_set(msg, ERR_INVALID, "--store %s", e.text);
    }
    pthread_mutex_init(&s->mu, NULL);
    s->ttl_s = ttl_s;
    s->max_bytes = max_bytes;
    *out = s;
    return 0;
}

static int redis_put(struct store *s, const char *id, const char *response,
                     const char *conversation, struct err_msg *msg)
{
    char key[256], head[32], ttl[32];
    key_of(id, key, sizeof(key));
    size_t rl = strlen(response), cl = strlen(conversation);
    int hl = snprintf(head, sizeof(head), "%zu\n", rl);
    char *val = xmalloc((size_t)hl + rl + cl);
    memcpy(val, head, (size_t)hl);
    memcpy(val + hl, response, rl);
    memcpy(val + (size_t)hl + rl, conversation, cl);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)s->ttl_s);
    const char *argv[] = {"SET", key, val, "EX", ttl};
    size_t lens[] = {3, strlen(key), (size_t)hl + rl + cl, 2, strlen(ttl)};
    redisReply *r = redis_link_cmd(s->redis, s->ttl_s > 0 ? 5 : 3, argv, lens);
    free(val);
    int rc = !r ? redis_down(s, msg)
             : r->type == REDIS_REPLY_STATUS
                 ? 0
                 : err_set(msg, ERR_INTERNAL, "responses store: redis: %s",
                           r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply to SET");
    if (r) freeReplyObject(r);
    return rc;
}

static int redis_get(struct store *s, const char *id, char **response, char **conversation,
                     struct err_msg *msg)
{
    char key[256];
    key_of(id, key, sizeof(key));
    const char *argv[] = {"GET", key};
    redisReply *r = redis_link_cmd(s->redis, 2, argv, NULL);
    if (!r) return redis_down(s, msg);
    int rc = 0;
    char *nl = r->type == REDIS_REPLY_STRING ? memchr(r->str, '\n', r->len) : NULL;
    size_t rl = nl ? strtoull(r->str, NULL, 10) : 0, off = nl ? (size_t)(nl - r->str) + 1 : 0;
    if (r->type == REDIS_REPLY_NIL) {
        rc = err_set(msg, ERR_NOT_FOUND, "no stored response with id '%.80s'", id);
    } else if (!nl || off + rl > r->len) {
        rc = err_set(msg, ERR_INTERNAL, "responses store: redis: key '%.80s' is not a response",
                     key);
    } else {
        if (response) *response = dup_n(r->str + off, rl);
        if (conversation) *conversation = dup_n(r->str + off + rl, r->len - off - rl);
    }
    freeReplyObject(r);
    return rc;
}

static int redis_delete(struct store *s, const char *id, struct err_msg *msg)
{
    char key[256];
    key_of(id, key, sizeof(key));
    const char *argv[] = {"DEL", key};
    redisReply *r = redis_link_cmd(s->redis, 2, argv, NULL);
    if (!r) return redis_down(s, msg);
    int rc = r->type != REDIS_REPLY_INTEGER
                 ? err_set(msg, ERR_INTERNAL, "responses store: redis: unexpected reply to DEL")
             : r->integer == 0
                 ? err_set(msg, ERR_NOT_FOUND, "no stored response with id '%.80s'", id)
                 : 0;
    freeReplyObject(r);
    return rc;
}

void store_close(struct store *s)
{
    if (!s) return;
    if (s->redis) {
        redis_link_close(s->redis);
        free(s->redis);
    }
    sqlite3_finalize(s->put);
    sqlite3_finalize(s->get);
    sqlite3_finalize(s->del);
    sqlite3_finalize(s->purge);
    if (s->db) sqlite3_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int store_put(struct store *s, const char *id, const char *response, const char *conversation,
              struct err_msg *msg)
{
    size_t bytes = strlen(response) + strlen(conversation);
    if (s->max_bytes && bytes > s->max_bytes)
        return err_set(msg, ERR_TOO_LARGE,
                       "the response and its conversation take %zu bytes; this server stores at "
                       "most %zu per response (store: false keeps it unstored)",
                       bytes, s->max_bytes);
    pthread_mutex_lock(&s->mu);
    if (s->redis) {
        int rc = redis_put(s, id, response, conversation, msg);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    sqlite3_reset(s->put);
    sqlite3_bind_text(s->put, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->put, 2, (sqlite3_int64)time(NULL));
    sqlite3_bind_text(s->put, 3, response, -1, SQLITE_STATIC);
    sqlite3_bind_text(s->put, 4, conversation, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s->put) == SQLITE_DONE ? 0 : db_fail(s->db, msg, "insert");
    sqlite3_reset(s->put);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_get(struct store *s, const char *id, char **response, char **conversation,
              struct err_msg *msg)
{
    pthread_mutex_lock(&s->mu);
    if (s->redis) {
        int rc = redis_get(s, id, response, conversation, msg);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    sqlite3_reset(s->get);
    sqlite3_bind_text(s->get, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->get, 2, (sqlite3_int64)cutoff(s));
    int st = sqlite3_step(s->get), rc = 0;
    if (st == SQLITE_ROW) {
        if (response) *response = xstrdup((const char *)sqlite3_column_text(s->get, 0));
        if (conversation) *conversation = xstrdup((const char *)sqlite3_column_text(s->get, 1));
    } else if (st == SQLITE_DONE) {
        rc = err_set(msg, ERR_NOT_FOUND, "no stored response with id '%.80s'", id);
    } else {
        rc = db_fail(s->db, msg, "select");
    }
    sqlite3_reset(s->get);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_delete(struct store *s, const char *id, struct err_msg *msg)
{
    pthread_mutex_lock(&s->mu);
    if (s->redis) {
        int rc = redis_delete(s, id, msg);
        pthread_mutex_unlock(&s->mu);
        return rc;
    }
    sqlite3_reset(s->del);
    sqlite3_bind_text(s->del, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s->del) == SQLITE_DONE ? 0 : db_fail(s->db, msg, "delete");
    if (!rc && sqlite3_changes(s->db) == 0)
        rc = err_set(msg, ERR_NOT_FOUND, "no stored response with id '%.80s'", id);
    sqlite3_reset(s->del);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int store_purge(struct store *s, int *n_removed, struct err_msg *msg)
{
    *n_removed = 0;
    if (s->ttl_s <= 0 || s->redis) return 0; /* Redis expires its keys itself */
    pthread_mutex_lock(&s->mu);
    sqlite3_reset(s->purge);
    sqlite3_bind_int64(s->purge, 1, (sqlite3_int64)cutoff(s));
    int rc = sqlite3_step(s->purge) == SQLITE_DONE ? 0 : db_fail(s->db, msg, "purge");
    if (!rc) *n_removed = sqlite3_changes(s->db);
    sqlite3_reset(s->purge);
    pthread_mutex_unlock(&s->mu);
    return rc;
}
