/*
 * fuzz_bench_input.c - libFuzzer target for what `inferd bench` reads from
 * outside: trace files (Mooncake JSONL, Azure CSV, agentic JSON) and the
 * server's SSE stream.
 *
 * The first byte picks the reader (0-2: a trace format, 3: SSE fed in pieces
 * whose sizes come from the data itself). A parsed trace must satisfy the
 * workload invariants (block counts match lengths, dependencies point back),
 * and rendering its prompts must stay in the vocabulary; SSE counters must
 * stay consistent. A crash, a sanitizer report or a broken invariant aborts.
 *
 * Build: cmake -DINFERD_FUZZ=ON -DCMAKE_C_COMPILER=clang, target
 * fuzz_bench_input. ctest replays corpus/ through tests/fuzz/replay.c.
 */
#include "base/check.h"
#include "bench/bench_sse.h"
#include "bench/bench_trace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void trace(enum bench_trace_format f, const char *p, size_t n)
{
    struct bench_workload w;
    bench_workload_init(&w, f == BENCH_TRACE_AGENTIC ? 64 : 512);
    struct bench_trace_opts o = {.bucket_s = -1, .seed = 1, .max_requests = 64};
    struct err_msg m = {{0}};
    int rc = bench_trace_parse(&w, f, "fuzz", p, n, &o, &m);
    CHECK(rc == 0 ? w.n > 0 : (w.n == 0 && m.text[0]));
    for (int32_t i = 0; i < w.n; i++) {
        const struct bench_item *it = &w.items[i];
        CHECK(it->n_input >= 1 && it->n_output >= 1 && it->t_s >= 0);
        CHECK(it->n_blocks == (it->n_input + w.block_tokens - 1) / w.block_tokens);
        CHECK(it->after < i);
    }
    if (w.n) {
        struct i32vec t = {0};
        bench_item_tokens(&w, 0, &t);
        CHECK((int32_t)t.n == w.items[0].n_input);
        for (size_t k = 0; k < t.n; k++)
            CHECK(t.v[k] >= w.vocab_lo && t.v[k] < w.vocab_hi);
        i32vec_release(&t);
        double r = bench_workload_ideal_hit(&w, NULL);
        CHECK(r >= 0 && r <= 1);
    }
    bench_workload_release(&w);
}

static void sse(const uint8_t *p, size_t n)
{
    struct bench_sse s;
    bench_sse_init(&s, true);
    int events = 0;
    size_t i = 0;
    while (i < n) {
        size_t piece = 1 + p[i] % 17;
        if (piece > n - i) piece = n - i;
        events += bench_sse_feed(&s, (const char *)p + i, piece);
        i += piece;
    }
    CHECK(events == s.n_content && events >= 0);
    bench_sse_release(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int kind = data[0] % 4;
    if (kind == 3)
        sse(data + 1, size - 1);
    else
        trace((enum bench_trace_format)kind, (const char *)data + 1, size - 1);
    return 0;
}
