/*
 * tier.c - what every tier shares: the record header codec, latency
 * bookkeeping and the hex form of block ids (tier.h).
 */
#include "kv/tier.h"

#include <string.h>
#include <xxhash.h>

const double kv_tier_lat_bounds_ms[KV_TIER_LAT_BUCKETS] = {0.1, 0.25, 0.5, 1,   2.5, 5,
                                                           10,  25,   50,  100, 250, 1e300};

static const char record_magic[8] = {'I', 'N', 'F', 'D', 'K', 'V', 'T', '1'};

static void put_u64(uint8_t *d, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        d[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *d)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | d[i];
    return v;
}

void kv_tier_record_encode(const struct kv_tier_record *r, uint8_t out[KV_TIER_RECORD_HEADER])
{
    memcpy(out, record_magic, 8);
    put_u64(out + 8, (uint64_t)r->expires);
    put_u64(out + 16, (uint64_t)r->stored);
    put_u64(out + 24, r->frame_len);
    memcpy(out + 32, r->id, 16);
    put_u64(out + 48, XXH3_64bits(out, 48));
}

int kv_tier_record_decode(const uint8_t in[KV_TIER_RECORD_HEADER], struct kv_tier_record *r,
                          struct err_msg *msg)
{
    if (memcmp(in, record_magic, 8) != 0)
        return err_set(msg, ERR_FORMAT, "kv tier record: bad magic");
    if (XXH3_64bits(in, 48) != get_u64(in + 48))
        return err_set(msg, ERR_FORMAT,
                       "kv tier record: header checksum mismatch (torn or corrupt)");
    r->expires = (int64_t)get_u64(in + 8);
    r->stored = (int64_t)get_u64(in + 16);
    r->frame_len = get_u64(in + 24);
    memcpy(r->id, in + 32, 16);
    return 0;
}

void kv_tier_stats_add_latency(struct kv_tier_stats *s, double ms)
{
    int b = 0;
    while (b < KV_TIER_LAT_BUCKETS - 1 && ms > kv_tier_lat_bounds_ms[b])
        b++;
    s->lat_hist[b]++;
    s->lat_sum_ms += ms;
}

int kv_tier_get_run_each(struct kv_tier *t, const uint8_t (*ids)[16], int n, uint8_t *out,
                         int64_t expires, int64_t now, const uint8_t *parent)
{
    const size_t fb = kv_frame_bytes(&t->layout);
    int i = 0;
    for (; i < n; i++) {
        if (t->ops->get(t, ids[i], out + fb * (size_t)i, fb, now) != (ssize_t)fb) break;
        t->ops->touch(t, ids[i], expires, now, i ? ids[i - 1] : parent);
    }
    return i;
}

void kv_tier_id_hex(const uint8_t id[16], char out[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[id[i] >> 4];
        out[2 * i + 1] = digits[id[i] & 15];
    }
    out[32] = 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool kv_tier_id_parse(const char *s, uint8_t id[16])
{
    if (strlen(s) != 32) return false;
    for (int i = 0; i < 16; i++) {
        int a = hex_digit(s[2 * i]), b = hex_digit(s[2 * i + 1]);
        if (a < 0 || b < 0) return false;
        id[i] = (uint8_t)(a << 4 | b);
    }
    return true;
}
