/*
 * fuzz_cluster_proto.c - libFuzzer target for the cluster protocol
 * (cluster/proto.h): the bytes a worker or gateway reads from a peer.
 *
 * The input is a byte stream, framed as a connection frames it
 * (cl_frame_peek) and each whole frame decoded. A bad header ends the
 * stream, as it ends a connection; a refused frame must say why. A frame
 * that decodes must encode again to exactly its own bytes (the encoding is
 * canonical), so what one side accepts the other side could have sent. A
 * crash, a sanitizer report or a broken invariant aborts.
 *
 * Build: cmake -DINFERD_FUZZ=ON -DCMAKE_C_COMPILER=clang, target
 * fuzz_cluster_proto. ctest replays tests/fuzz/cluster_proto/corpus/ through
 * tests/fuzz/replay.c.
 */
#include "base/buf.h"
#include "base/check.h"
#include "cluster/proto.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        struct err_msg msg = {{0}};
        size_t flen = 0;
        int rc = cl_frame_peek(data + off, size - off, &flen, &msg);
        if (rc < 0) {
            CHECK(rc == ERR_PROTOCOL && msg.text[0]);
            break;
        }
        if (rc == 0) break; /* a frame cut short: the connection waits for more */
        CHECK(flen >= CL_HEADER && flen <= size - off);
        struct cl_msg m;
        rc = cl_decode(data + off, flen, &m, &msg);
        if (rc) {
            CHECK(rc == ERR_PROTOCOL && msg.text[0]);
        } else {
            struct buf b = {0};
            CHECK(cl_encode(&m, &b, &msg) == 0);
            CHECK(b.len == flen && memcmp(b.data, data + off, flen) == 0);
            buf_release(&b);
            cl_msg_free(&m);
        }
        off += flen;
    }
    return 0;
}
