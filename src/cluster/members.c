/*
 * members.c - cluster membership in Redis (members.h).
 */
#include "cluster/members.h"

#include "base/check.h"
#include "kv/redis_link.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PREFIX_MAX = 320 };

struct members {
    struct redis_link link;  /* 100 ms connects, 250 ms commands */
    char prefix[PREFIX_MAX]; /* "inferd:workers:<model>:" */
};

static redisReply *cmd(struct members *m, int argc, const char **argv)
{
    return redis_link_cmd(&m->link, argc, argv, NULL);
}

int members_open(const char *url, const char *model, struct members **out, struct err_msg *msg)
{
    struct members *m = xcalloc(1, sizeof(*m));
    struct err_msg e = {{0}};
    if (redis_link_init(&m->link, url, "membership", 100, 250, &e)) {
        free(m);
        return err_set(msg, ERR_INVALID, "--redis %s", e.text);
    }
    if (strlen(model) + 20 >= sizeof(m->prefix)) {
        free(m);
        return err_set(msg, ERR_INVALID, "--redis: model name too long for a key");
    }
    snprintf(m->prefix, sizeof(m->prefix), "inferd:workers:%s:", model);
    *out = m;
    return 0;
}

void members_close(struct members *m)
{
    if (!m) return;
    redis_link_close(&m->link);
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
