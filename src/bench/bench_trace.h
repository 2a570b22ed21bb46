/*
 * bench_trace.h - trace readers: turn a recorded request log into workload
 * items (bench_workload.h).
 *
 *   mooncake : JSONL, {"timestamp" ms, "input_length", "output_length",
 *              "hash_ids": ids of 512-token blocks}      (Mooncake FAST'25)
 *   azure    : CSV with header TIMESTAMP,ContextTokens,GeneratedTokens,
 *              "2023-11-16 18:17:03.9799600"; no prefix information
 *              (Azure LLM inference trace 2023)
 *   agentic  : one JSON object per conversation: block_size (64), requests
 *              [{t s, in, out, hash_ids, think_time s, ...}]
 *              (kv-cache-tester agentic coding traces)
 *
 * Block ids: each file is its own id namespace (file number in the high bits),
 * so ids that are only meaningful inside one file never collide with another
 * file's; blocks a trace does not name (Azure, or a trailing partial block
 * without an id) get fresh ids that nothing else shares.
 *
 * Timestamps recorded with coarse resolution (Mooncake: whole milliseconds,
 * agentic: whole seconds) put many requests on one instant; each is moved to
 * t + u * bucket with u uniform in [0, 1) drawn from (seed, line), so a replay
 * is deterministic and no burst is invented.
 *
 * Errors: ERR_FORMAT (or the negated errno of the open), with a message that
 * names the file and the line (JSONL, CSV) or the request index (agentic JSON)
 * and the field. Nothing from the file is trusted before it is checked.
 */
#ifndef INFERD_BENCH_TRACE_H
#define INFERD_BENCH_TRACE_H

#include "bench/bench_workload.h"

#include <stdbool.h>

enum bench_trace_format {
    BENCH_TRACE_MOONCAKE,
    BENCH_TRACE_AZURE,
    BENCH_TRACE_AGENTIC,
};

struct bench_trace_opts {
    double bucket_s;      /* timestamp resolution to spread over; < 0 = the format's own */
    uint64_t seed;        /* spreading draws */
    bool sessions_timed;  /* agentic: send at recorded t instead of after the previous
                             request finished + think_time */
    int32_t file_no;      /* id namespace and session number base of this file */
    int32_t max_requests; /* stop after this many requests (<= 0: all) */
};

/* "mooncake" | "azure" | "agentic" -> *f; false when unknown. */
bool bench_trace_format_parse(const char *s, enum bench_trace_format *f);
/* The block size a format's ids describe (512, 0 = none (azure), 64). */
int32_t bench_trace_block_tokens(enum bench_trace_format f);

/* Appends the requests of `path` to w (whose block_tokens must equal the
 * format's, azure: any). Returns 0 or an error code with m set. */
int bench_trace_load(struct bench_workload *w, enum bench_trace_format f, const char *path,
                     const struct bench_trace_opts *o, struct err_msg *m);

/* The same, reading from memory (fuzzing, tests); `name` appears in messages. */
int bench_trace_parse(struct bench_workload *w, enum bench_trace_format f, const char *name,
                      const char *data, size_t len, const struct bench_trace_opts *o,
                      struct err_msg *m);

#endif
