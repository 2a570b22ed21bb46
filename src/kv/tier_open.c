/*
 * tier_open.c - opening a tier from its specification (spec.h): the one
 * place that knows every tier's constructor.
 */
#include "kv/spec.h"
#include "kv/tier_redis.h"
#include "kv/tiers.h"

int kv_tier_open(const struct kv_tier_spec *s, const struct kv_frame_layout *l, int64_t now,
                 struct kv_tier **out, struct err_msg *msg)
{
    switch (s->kind) {
    case KV_TIER_RAM:
        return kv_tier_ram_open(l, s->bytes, &s->policy, out, msg);
    case KV_TIER_DISK:
        return kv_tier_disk_open(s->path, l, s->bytes, &s->policy, now, out, msg);
    case KV_TIER_SHARED:
        return kv_tier_shared_open(s->path, l, s->bytes, now, out, msg);
    case KV_TIER_REDIS:
        return kv_tier_redis_open(s->path, l, s->bytes, now, out, msg);
    }
    return err_set(msg, ERR_INVALID, "kv tier: unknown kind %d", (int)s->kind);
}
