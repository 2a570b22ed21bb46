/*
 * tier_redis.h - the Redis tier: block records (tier.h) as values in a real
 * Redis server, the TTL as the key's expiry.
 *
 * Keys: "inferd:kv:<engine fingerprint hex>:<block id hex>", so engines
 * with other fingerprints never see each other's blocks. A value is one
 * record: the 56-byte header, then the frame. put stores a block with
 * SET ... PX ttl NX; a block already held has its expiry raised instead
 * (header rewritten with SETRANGE, key expiry with PEXPIRE ... GT), so a
 * block lives for the longest TTL anyone gave it. get verifies the header,
 * its expiry against `now`, and the frame (kv_frame_check with the id asked
 * for); a zero-length, truncated, corrupt, foreign or mislabelled value is
 * a counted miss and is deleted.
 *
 * Outage: connect and command timeouts are short (100 ms, 250 ms). When
 * Redis is down every call is a fast miss: reconnects are tried with
 * exponential backoff (100 ms doubling to 5 s), not on every call;
 * writable is false meanwhile and the change is logged once each way.
 *
 * Capacity: Redis enforces memory with its own maxmemory policy; the bytes
 * this tier wrote are kept as an estimate (used_bytes) and the configured
 * capacity is reported, not enforced.
 */
#ifndef INFERD_KV_TIER_REDIS_H
#define INFERD_KV_TIER_REDIS_H

#include "base/err.h"
#include "kv/tier.h"

/* url: "redis://HOST:PORT[/DB]" or "unix:/PATH". Does not need Redis to be
 * up: an unreachable server is a tier with misses until it answers.
 * Returns 0, or ERR_INVALID for a bad URL, with a message. */
int kv_tier_redis_open(const char *url, const struct kv_frame_layout *l, uint64_t capacity_bytes,
                       int64_t now, struct kv_tier **out, struct err_msg *msg);

#endif
