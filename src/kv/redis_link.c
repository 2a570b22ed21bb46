/*
 * redis_link.c - a Redis connection that outlives outages (redis_link.h).
 */
#include "kv/redis_link.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int redis_link_init(struct redis_link *l, const char *url, const char *what, int connect_ms,
                    int command_ms, struct err_msg *msg)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->what, sizeof(l->what), "%s", what);
    l->connect_timeout = (struct timeval){connect_ms / 1000, (connect_ms % 1000) * 1000};
    l->command_timeout = (struct timeval){command_ms / 1000, (command_ms % 1000) * 1000};
    const char *p = NULL;
    if (!strncmp(url, "unix:", 5) && url[5] == '/')
        p = url + 5;
    else if (!strncmp(url, "redis+unix://", 13) && url[13] == '/')
        p = url + 13;
    if (p) {
        if (strlen(p) >= sizeof(l->sock)) goto bad;
        snprintf(l->sock, sizeof(l->sock), "%s", p);
        return 0;
    }
    if (strncmp(url, "redis://", 8)) goto bad;
    const char *h = url + 8, *slash = strchr(h, '/');
    const char *hp_end = slash ? slash : h + strlen(h);
    const char *colon = NULL;
    for (const char *q = h; q < hp_end; q++)
        if (*q == ':') colon = q;
    if (!colon || colon == h || (size_t)(colon - h) >= sizeof(l->host) || colon + 1 == hp_end)
        goto bad;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (end != hp_end || port < 1 || port > 65535) goto bad;
    if (slash) {
        long db = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || db < 0 || db > 1 << 20) goto bad;
        l->db = (int)db;
    }
    snprintf(l->host, sizeof(l->host), "%.*s", (int)(colon - h), h);
    l->port = (int)port;
    return 0;
bad:
    return err_set(msg, ERR_INVALID,
                   "'%s': expected redis://HOST:PORT[/DB], unix:/PATH or redis+unix:///PATH", url);
}

const char *redis_link_where(const struct redis_link *l)
{
    return l->sock[0] ? l->sock : l->host;
}

static void mark_down(struct redis_link *l, const char *why)
{
    if (l->c) redisFree(l->c);
    l->c = NULL;
    l->backoff = l->backoff > 0 ? MIN(l->backoff * 2, 2.0) : 0.1;
    l->next_try = time_now_s() + l->backoff;
    if (!l->logged_down)
        log_warn("%s: redis %s: %s; retrying with backoff", l->what, redis_link_where(l), why);
    l->logged_down = true;
}

static bool connected(struct redis_link *l)
{
    if (l->c) return true;
    if (time_now_s() < l->next_try) return false;
    redisContext *c = l->sock[0] ? redisConnectUnixWithTimeout(l->sock, l->connect_timeout)
                                 : redisConnectWithTimeout(l->host, l->port, l->connect_timeout);
    if (!c || c->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        mark_down(l, why);
        return false;
    }
    redisSetTimeout(c, l->command_timeout);
    if (l->db) {
        redisReply *r = redisCommand(c, "SELECT %d", l->db);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        char why[160];
        snprintf(why, sizeof(why), "SELECT %d: %s", l->db,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : "failed");
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            mark_down(l, why);
            return false;
        }
    }
    l->c = c;
    l->backoff = 0;
    if (l->logged_down) log_info("%s: redis %s: connected again", l->what, redis_link_where(l));
    l->logged_down = false;
    return true;
}

redisReply *redis_link_cmd(struct redis_link *l, int argc, const char **argv, const size_t *lens)
{
    if (!connected(l)) return NULL;
    redisReply *r = redisCommandArgv(l->c, argc, argv, lens);
    if (!r) {
        char why[160];
        snprintf(why, sizeof(why), "%s", l->c->errstr[0] ? l->c->errstr : "connection lost");
        mark_down(l, why);
    }
    return r;
}

redisContext *redis_link_ctx(struct redis_link *l)
{
    return connected(l) ? l->c : NULL;
}

void redis_link_broken(struct redis_link *l)
{
    char why[160];
    snprintf(why, sizeof(why), "%s", l->c && l->c->errstr[0] ? l->c->errstr : "connection lost");
    mark_down(l, why);
}

void redis_link_close(struct redis_link *l)
{
    if (l->c) redisFree(l->c);
    l->c = NULL;
}
