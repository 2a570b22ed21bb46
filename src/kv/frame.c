/*
 * frame.c - the KV block frame codec (frame.h has the layout).
 *
 * The payload checksum is the one pass over every byte a frame costs
 * beyond its copy, on every tier load, import and export: it goes through
 * libxxhash's run-time dispatch (AVX2 or AVX-512 where the CPU has them,
 * about twice the plain build's SSE2 rate here). The value is XXH3-64
 * whichever code computes it.
 */
#include "kv/frame.h"

#include <string.h>
#include <xxhash.h>
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>

static const char frame_magic[8] = {'I', 'N', 'F', 'D', 'K', 'V', 'B', '1'};

static void put_u32(uint8_t *d, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        d[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *d, uint64_t v)
{
    put_u32(d, (uint32_t)v);
    put_u32(d + 4, (uint32_t)(v >> 32));
}

static uint32_t get_u32(const uint8_t *d)
{
    return (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
}

static uint64_t get_u64(const uint8_t *d)
{
    return (uint64_t)get_u32(d) | (uint64_t)get_u32(d + 4) << 32;
}

size_t kv_frame_bytes(const struct kv_frame_layout *l)
{
    return KV_FRAME_HEADER + (size_t)l->n_layer * l->layer_bytes;
}

void kv_frame_seal(const struct kv_frame_layout *l, const uint8_t id[16], uint8_t *out)
{
    memcpy(out, frame_magic, 8);
    memcpy(out + 8, l->fingerprint, 16);
    memcpy(out + 24, id, 16);
    put_u32(out + 40, l->n_layer);
    put_u32(out + 44, l->layer_bytes);
    put_u64(out + 48,
            XXH3_64bits_dispatch(out + KV_FRAME_HEADER, kv_frame_bytes(l) - KV_FRAME_HEADER));
}

int kv_frame_check(const struct kv_frame_layout *l, const void *buf, size_t len,
                   const uint8_t *want_id, uint8_t id_out[16], struct err_msg *msg)
{
    const uint8_t *d = buf;
    if (len < KV_FRAME_HEADER || memcmp(d, frame_magic, 8) != 0)
        return err_set(msg, ERR_FORMAT, "kv block frame: bad magic or %zu bytes is too short", len);
    if (memcmp(d + 8, l->fingerprint, 16) != 0)
        return err_set(msg, ERR_INVALID,
                       "kv block frame: engine fingerprint differs (another model, KV type, "
                       "block size or numerics version)");
    uint32_t n_layer = get_u32(d + 40), layer_bytes = get_u32(d + 44);
    if (n_layer != l->n_layer || layer_bytes != l->layer_bytes)
        return err_set(msg, ERR_INVALID,
                       "kv block frame: layout %u layers x %u bytes, expected %u x %u", n_layer,
                       layer_bytes, l->n_layer, l->layer_bytes);
    if (len != kv_frame_bytes(l))
        return err_set(msg, ERR_FORMAT, "kv block frame: %zu bytes, expected %zu", len,
                       kv_frame_bytes(l));
    if (XXH3_64bits_dispatch(d + KV_FRAME_HEADER, len - KV_FRAME_HEADER) != get_u64(d + 48))
        return err_set(msg, ERR_FORMAT, "kv block frame: checksum mismatch (corrupt block)");
    if (want_id && memcmp(d + 24, want_id, 16) != 0)
        return err_set(msg, ERR_INVALID,
                       "kv block frame: names another block than the one asked for");
    if (id_out) memcpy(id_out, d + 24, 16);
    return 0;
}
