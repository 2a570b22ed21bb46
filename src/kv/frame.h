/*
 * frame.h - the KV block frame codec: one cached block as bytes, the one
 * format that the prefix cache exports and imports, the tiers store and
 * (later) workers transfer. All integers little-endian:
 *
 *   0   8  magic "INFDKVB1"
 *   8  16  engine fingerprint          (must equal the reader's)
 *  24  16  block id                    (kv_block_id_to_bytes form)
 *  40   4  n_layer                     (must equal the reader's)
 *  44   4  bytes per layer: K then V   (must equal the reader's)
 *  48   8  XXH3-64 of the payload
 *  56      payload: n_layer x (K | V), the block exactly as kv/pool.h lays it out
 *
 * A frame is external input wherever it comes from: kv_frame_check looks at
 * every field and the checksum and refuses with a message naming what was
 * wrong. The block id cannot be checked against the payload (it names the
 * tokens, which the frame does not carry); a reader that asked for an id
 * checks that the frame names that id.
 *
 * Pure functions, no state: any thread.
 */
#ifndef INFERD_KV_FRAME_H
#define INFERD_KV_FRAME_H

#include "base/err.h"

#include <stddef.h>
#include <stdint.h>

#define KV_FRAME_HEADER 56

/* What a reader accepts: frames of one engine fingerprint and block shape. */
struct kv_frame_layout {
    uint8_t fingerprint[16]; /* inferd_engine_fingerprint */
    uint32_t n_layer;        /* layers */
    uint32_t layer_bytes;    /* bytes per layer per block, K and V together */
};

/* Bytes of one frame of this layout. */
size_t kv_frame_bytes(const struct kv_frame_layout *l);

/* Writes the header for payload (n_layer * layer_bytes bytes at
 * out + KV_FRAME_HEADER, already in place) of block id: magic, layout,
 * checksum. */
void kv_frame_seal(const struct kv_frame_layout *l, const uint8_t id[16], uint8_t *out);

/* Checks a frame of len bytes against layout l and, when want_id is not
 * NULL, that it names that block. Returns 0, ERR_FORMAT (bad magic, size,
 * checksum) or ERR_INVALID (another fingerprint or layout, another id),
 * with a message. On success *id_out (may be NULL) receives the frame's id. */
int kv_frame_check(const struct kv_frame_layout *l, const void *buf, size_t len,
                   const uint8_t *want_id, uint8_t id_out[16], struct err_msg *msg);

#endif
