/*
 * store.c - stored responses in SQLite (see store.h).
 */
#include "serve/store.h"

#include "base/check.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct store {
    sqlite3 *db;       /* the connection */
    sqlite3_stmt *put; /* INSERT OR REPLACE */
    sqlite3_stmt *get; /* SELECT by id */
    sqlite3_stmt *del; /* DELETE by id */
};

static int db_fail(sqlite3 *db, struct err_msg *msg, const char *what)
{
    return err_set(msg, ERR_INTERNAL, "responses store: %s: %s", what, sqlite3_errmsg(db));
}

int store_open(const char *dir, struct store **out, struct err_msg *msg)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/responses.db", dir);
    struct store *s = xcalloc(1, sizeof(*s));
    int rc;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        rc = err_set(msg, ERR_INVALID, "cannot open '%s': %s", path,
                     s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 2000);
    const char *schema = "PRAGMA journal_mode=WAL;"
                         "PRAGMA synchronous=NORMAL;"
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
        sqlite3_prepare_v2(s->db, "SELECT response, conversation FROM responses WHERE id = ?", -1,
                           &s->get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(s->db, "DELETE FROM responses WHERE id = ?", -1, &s->del, NULL) !=
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

void store_close(struct store *s)
{
    if (!s) return;
    sqlite3_finalize(s->put);
    sqlite3_finalize(s->get);
    sqlite3_finalize(s->del);
    if (s->db) sqlite3_close(s->db);
    free(s);
}

int store_put(struct store *s, const char *id, const char *response, const char *conversation,
              struct err_msg *msg)
{
    sqlite3_reset(s->put);
    sqlite3_bind_text(s->put, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->put, 2, (sqlite3_int64)time(NULL));
    sqlite3_bind_text(s->put, 3, response, -1, SQLITE_STATIC);
    sqlite3_bind_text(s->put, 4, conversation, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s->put) == SQLITE_DONE ? 0 : db_fail(s->db, msg, "insert");
    sqlite3_reset(s->put);
    return rc;
}

int store_get(struct store *s, const char *id, char **response, char **conversation,
              struct err_msg *msg)
{
    sqlite3_reset(s->get);
    sqlite3_bind_text(s->get, 1, id, -1, SQLITE_STATIC);
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
    return rc;
}

int store_delete(struct store *s, const char *id, struct err_msg *msg)
{
    sqlite3_reset(s->del);
    sqlite3_bind_text(s->del, 1, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s->del) == SQLITE_DONE ? 0 : db_fail(s->db, msg, "delete");
    if (!rc && sqlite3_changes(s->db) == 0)
        rc = err_set(msg, ERR_NOT_FOUND, "no stored response with id '%.80s'", id);
    sqlite3_reset(s->del);
    return rc;
}
