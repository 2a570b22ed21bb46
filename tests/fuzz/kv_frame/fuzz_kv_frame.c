/*
 * fuzz_kv_frame.c - libFuzzer target for KV block frames (kv_prefix_import),
 * the bytes a peer or a storage tier hands the engine.
 *
 * The input is imported into a small pool whose layout and fingerprint are
 * fixed below (the corpus holds frames made for it). An import either fails
 * with an error code and a message, or enters the block: then the id must be
 * cached, and exporting it must give back exactly the input. The pool's
 * accounting must hold either way. A crash, a sanitizer report or a broken
 * invariant aborts.
 *
 * Build: cmake -DINFERD_FUZZ=ON -DCMAKE_C_COMPILER=clang, target fuzz_kv_frame.
 * ctest replays tests/fuzz/kv_frame/corpus/ through tests/fuzz/replay.c.
 */
#include "base/check.h"
#include "kv/pool.h"
#include "kv/prefix.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The fuzz pool: 2 layers, 1 head of 4, blocks of 4 positions, f16 (frames
 * of 56 + 128 bytes), 3 blocks; fingerprint 0x01 0x02 ... 0x10. */
static const uint8_t fuzz_fp[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kv_pool p;
    struct kv_prefix px;
    struct kv_pool_config c = {.n_layer = 2,
                               .n_kv_head = 1,
                               .head_dim = 4,
                               .block_tokens = 4,
                               .n_blocks = 3,
                               .dtype = DTYPE_F16};
    CHECK(kv_pool_init(&p, &c, NULL) == 0);
    kv_prefix_init(&px, &p, fuzz_fp);
    struct err_msg msg = {{0}};
    /* Twice: the second import of a valid frame is a no-op. */
    for (int round = 0; round < 2; round++) {
        int rc = kv_prefix_import(&px, data, size, &msg);
        if (rc) {
            CHECK(rc < 0 && msg.text[0]);
            CHECK(px.n_cached == 0);
            break;
        }
        CHECK(size == kv_prefix_frame_bytes(&px) && size >= KV_FRAME_HEADER);
        struct kv_block_id id = kv_block_id_from_bytes(data + 24);
        CHECK(kv_prefix_lookup(&px, &id, NULL));
        CHECK(px.n_cached == 1 && px.n_lru == 1);
        uint8_t *out = malloc(size);
        CHECK(out);
        CHECK(kv_prefix_export(&px, &id, out, size) == 0);
        CHECK(memcmp(out, data, size) == 0);
        free(out);
    }
    CHECK(p.n_free + px.n_lru == c.n_blocks);
    kv_prefix_release(&px);
    CHECK(p.n_free == c.n_blocks);
    kv_pool_release(&p);
    return 0;
}
