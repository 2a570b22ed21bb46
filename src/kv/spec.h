/*
 * spec.h - tier specifications as operators write them (`inferd serve
 * --kv-tier ...`), sizes with units, durations, and the traffic classes
 * that give blocks their time to live.
 *
 *   ram:SIZE                  host-memory tier
 *   disk:DIR[:SIZE]           files under DIR (SIZE: default fits the disk)
 *   shared:DIR:SIZE           a directory many processes or machines mount
 *   redis://HOST:PORT[/DB]    a Redis server
 *   redis+unix:///PATH        a Redis server on a Unix socket
 *
 * SIZE: a number with an optional unit, B, K/KB/KiB, M/MB/MiB, G/GB/GiB,
 * T/TB/TiB (all powers of 1024: the sizes of caches, not of disks on sale).
 * DURATION: a number with s, m, h or d.
 *
 * Traffic classes: a request names one (`cache_ttl_class`); a block lives
 * for the longest TTL of the classes that stored or hit it. Defaults:
 * agent 3 days, chat 7 days; `--kv-ttl CLASS=DURATION` adds or changes one.
 *
 * Pure functions: any thread.
 */
#ifndef INFERD_KV_SPEC_H
#define INFERD_KV_SPEC_H

#include "base/err.h"
#include "kv/tier.h"
#include "kv/tier_index.h"

#include <stdint.h>

struct kv_tier_spec {
    enum kv_tier_kind kind;       /* which tier */
    char path[1024];              /* disk, shared: the directory; redis: the URL for the tier */
    uint64_t bytes;               /* capacity (0 for disk: fit the disk; 0 for redis: unbounded) */
    struct kv_tier_policy policy; /* ram, disk: eviction and admission (tier_index.h) */
};

/* Parses one --kv-tier value. Returns 0 or ERR_INVALID with a message that
 * quotes it. */
int kv_tier_spec_parse(const char *s, struct kv_tier_spec *out, struct err_msg *msg);
/* "8GiB"-style sizes. Returns 0 or ERR_INVALID. */
int kv_parse_size(const char *s, uint64_t *out, struct err_msg *msg);
/* "3d"-style durations in seconds (> 0). Returns 0 or ERR_INVALID. */
int kv_parse_duration(const char *s, int64_t *out, struct err_msg *msg);

/* Opens the tier s names for frames of layout l (tier_open.c). Returns 0
 * or a negative code with a message naming the tier. */
int kv_tier_open(const struct kv_tier_spec *s, const struct kv_frame_layout *l, int64_t now,
                 struct kv_tier **out, struct err_msg *msg);

enum { KV_MAX_CLASSES = 16 };

struct kv_ttl_class {
    char name[32]; /* as requests name it */
    int64_t ttl_s; /* time to live in seconds */
};

struct kv_ttl_classes {
    struct kv_ttl_class c[KV_MAX_CLASSES]; /* (n) */
    int n;                                 /* entries */
    int dflt;                              /* index of the class of requests that name none */
};

/* agent 3 days, chat 7 days; default chat. */
void kv_ttl_classes_default(struct kv_ttl_classes *t);
/* Applies "CLASS=DURATION" (adds the class or changes its TTL). */
int kv_ttl_classes_set(struct kv_ttl_classes *t, const char *spec, struct err_msg *msg);
/* Index of the class named name (len bytes), or -1. */
int kv_ttl_classes_find(const struct kv_ttl_classes *t, const char *name, size_t len);

#endif
