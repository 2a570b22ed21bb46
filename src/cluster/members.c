/*
 * members.c - cluster membership in Redis (members.h).
 */
#include "cluster/members.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PREFIX_MAX = 320 };

struct members {
    char host[256]; /* TCP host, or "" for a Unix socket */
    int port;
    char sock[1024];
    char prefix[PREFIX_MAX];  /* "inferd:workers:<model>:" */
    redisContext *c;          /* NULL while down */
    double next_try, backoff; /* reconnect spacing */
    bool logged_down;
};

static const struct timeval connect_timeout = {0, 100000}, command_timeout = {0, 250000};

static const char *where(const struct members *m)
{
    return m->sock[0] ? m->sock : m->host;
}

static void mark_down(struct members *m, const char *why)
{
    if (m->c) redisFree(m->c);
    m->c = NULL;
    m->backoff = m->backoff > 0 ? MIN(m->backoff * 2, 2.0) : 0.1;
    m->next_try = time_now_s() + m->backoff;
    if (!m->logged_down) log_warn("membership: redis %s: %s; retrying with backoff", where(m), why);
    m->logged_down = true;
}

static bool connected(struct members *m)
{
    if (m->c) return true;
    if (time_now_s() < m->next_try) return false;
    redisContext *c = m->sock[0] ? redisConnectUnixWithTimeout(m->sock, connect_timeout)
                                 : redisConnectWithTimeout(m->host, m->port, connect_timeout);
    if (!c || c->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        mark_down(m, why);
        return false;
    }
    redisSetTimeout(c, command_timeout);
    m->c = c;
    m->backoff = 0;
    if (m->logged_down) log_info("membership: redis %s: connected again", where(m));
    m->logged_down = false;
    return true;
}

static redisReply *cmd(struct members *m, int argc, const char **argv)
{
    if (!connected(m)) return NULL;
    redisReply *r = redisCommandArgv(m->c, argc, argv, NULL);
    if (!r) {
        char why[160];
        snprintf(why, sizeof(why), "%s", m->c->errstr[0] ? m->c->errstr : "connection lost");
        mark_down(m, why);
    }
    return r;
}

int members_open(const char *url, const char *model, struct members **out, struct err_msg *msg)
{
    struct members *m = xcalloc(1, sizeof(*m));
    if (!strncmp(url, "unix:", 5)) {
        const char *p = url + 5;
        if (*p != '/' || strlen(p) >= sizeof(m->sock)) goto bad;
        snprintf(m->sock, sizeof(m->sock), "%s", p);
    } else if (!strncmp(url, "redis://", 8)) {
        const char *h = url + 8, *colon = strrchr(h, ':');
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == h || (size_t)(colon - h) >= sizeof(m->host) || !colon[1] || *end ||
            port < 1 || port > 65535)
            goto bad;
        snprintf(m->host, sizeof(m->host), "%.*s", (int)(colon - h), h);
        m->port = (int)port;
    } else {
        goto bad;
    }
    if (strlen(model) + 20 >= sizeof(m->prefix)) {
        free(m);
        return err_set(msg, ERR_INVALID, "--redis: model name too long for a key");
    }
    snprintf(m->prefix, sizeof(m->prefix), "inferd:workers:%s:", model);
    *out = m;
    return 0;
bad:
    free(m);
    return err_set(msg, ERR_INVALID, "--redis '%s': expected redis://HOST:PORT or unix:/PATH", url);
}

void members_close(struct members *m)
{
    if (!m) return;
    if (m->c) redisFree(m->c);
    free(m);
}

void members_announce(struct members *m, const char *addr, const char *value)
{
    char key[PREFIX_MAX + 80], ttl[24];
    snprintf(key, sizeof(key), "%s%s", m->prefix, addr);
    snprintf(ttl, sizeof(ttl), "%d", MEMBERS_TTL_MS);
    const char *argv[] = {"SET", key, value, "PX", ttl};
    redisReply *r = cmd(m, 5, argv);
    if (r) freeReplyObject(r);
}

void members_withdraw(struct members *m, const char *addr)
{
    char key[PREFIX_MAX + 80];
    snprintf(key, sizeof(key), "%s%s", m->prefix, addr);
    const char *argv[] = {"DEL", key};
    redisReply *r = cmd(m, 2, argv);
    if (r) freeReplyObject(r);
}

int members_list(struct members *m, char (*addrs)[80], int cap)
{
    char pattern[PREFIX_MAX + 4], cursor[32] = "0";
    snprintf(pattern, sizeof(pattern), "%s*", m->prefix);
    const size_t pl = strlen(m->prefix);
    int n = 0;
    for (int rounds = 0; rounds < 1000; rounds++) {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        redisReply *r = cmd(m, 6, argv);
        if (!r) return -1;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements && n < cap; i++) {
            const redisReply *k = keys->element[i];
            if (k->type != REDIS_REPLY_STRING || k->len <= pl || k->len - pl >= 80) continue;
            snprintf(addrs[n++], 80, "%s", k->str + pl);
        }
        freeReplyObject(r);
        if (!strcmp(cursor, "0")) break;
    }
    return n;
}
