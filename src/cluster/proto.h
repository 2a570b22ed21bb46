/*
 * proto.h - the cluster's internal protocol: the frames a gateway and its
 * workers exchange over TCP, as bytes. Codec only: no sockets, no clock, no
 * state; any thread.
 *
 * A frame is a 16-byte header and a payload. All integers little-endian,
 * floats IEEE-754 binary32/64 in the same byte order:
 *
 *   0   4  magic "IFCP"
 *   4   1  version (CL_PROTO_VERSION; another is refused, not guessed at)
 *   5   1  type (enum cl_type)
 *   6   2  flags (none defined: must be 0)
 *   8   4  payload bytes (<= CL_MAX_PAYLOAD)
 *  12   4  reserved (must be 0)
 *
 * Payloads, by type (str16: u16 length + bytes; str32: u32 length +
 * bytes; strings hold no NUL byte, but for the cache salt, and have a
 * bound each):
 *
 *   HELLO     u8 role, u8[16] engine fingerprint, u32 block tokens, u32 KV
 *             frame bytes, u32 context length, str16 name, str16 model
 *   SUBMIT    u64 request, str16 traceparent, i32 priority, u32 max tokens,
 *             u8 flags (1 ignore_eos, 2 logprobs), u8 top logprobs,
 *             f32 temperature, i32 top_k, f32 top_p, f32 min_p,
 *             f32 repetition, f32 presence, f32 frequency penalty,
 *             u64 seed, u32 n + n x (i32 token, f32 bias) logit bias,
 *             u8 grammar kind, u8 has limits [+ the 11 limits, i32/i64 as
 *             in inferd_grammar_limits], str32 grammar source,
 *             str16 cache salt, str16 TTL class, u32 n + n x i32 prompt,
 *             u32 generated (the prompt's last tokens that are output
 *             already: a resumed request), str16 KV peers ("HOST:PORT,..."
 *             of the prefill workers the prompt's KV blocks come from, the
 *             first choice first, the rest if it fails; empty: none), u32
 *             KV skip (prefill-only: the leading blocks the
 *             asker holds already, not sent; the payload's last 4 bytes,
 *             so cl_submit_set_kv_skip can set it in an encoded frame)
 *   TOKEN     u64 request, u32 index, i32 token (-1: a finish alone),
 *             f32 logprob, u8 n + n x (i32, f32) top, u8 finish
 *             (enum inferd_finish); when finish != 0: u32 prompt,
 *             u32 cached, f64 queue seconds, u32 generated, i32 error,
 *             str16 message
 *   CANCEL    u64 request
 *   STATS     u32 running, u32 waiting, u32 loading, u32 KV blocks total,
 *             u32 used, u32 cached, f64 step ms fixed, f64 step ms per
 *             token, f64 tokens/s, u64 queued tokens, u64 finished, then
 *             CL_STAT_COUNTERS x u64 engine counters (CL_STAT_*), f64
 *             decode step seconds, f64 prompt step seconds
 *   KV_BLOCK  u64 request, u32 block index, then one KV block frame
 *             (kv/frame.h) to the end of the payload: its own header and
 *             checksum are checked where it is imported
 *   KV_DONE   u64 request, u32 blocks sent, u32 prompt tokens computed
 *   PING      u64 nonce          PONG  u64 nonce (the PING's)
 *   ERROR     u64 request (0: the connection), i32 code, str16 message
 *   BYE       empty: the sender closes after it
 *   PAUSE     u64 request, u8 paused (1: hold its steps, its KV kept: the
 *             caller's reader is slow; 0: go on)
 *   KV_EVENTS u64 sequence number of the first event, u32 n (<=
 *             CL_MAX_KV_EVENTS), n x (u8 kind (1 stored, 2 evicted), u8 tier
 *             (0: the engine's pool .. 3), u8[16] block id): a worker's KV
 *             blocks entering and leaving its caches, to a gateway. Numbered
 *             per connection from 1; the first events on a connection
 *             replay what the worker holds (all stored), so a gateway that
 *             connects, or reconnects, starts from the whole state
 *             (cluster/pindex.h)
 *
 * Every frame from a peer is external input: cl_decode checks the header,
 * every length against what is left, every count against its bound before
 * anything is allocated, every float for being finite and in range, every
 * enum, and that nothing trails; it refuses with ERR_PROTOCOL and a message
 * naming the field. A decoded message owns what it points to (cl_msg_free).
 */
#ifndef INFERD_CLUSTER_PROTO_H
#define INFERD_CLUSTER_PROTO_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    CL_PROTO_VERSION = 1,
    CL_HEADER = 16,
    CL_MAX_PAYLOAD = 64 << 20,   /* bytes: a KV frame of the largest models fits */
    CL_MAX_PROMPT = 4 << 20,     /* tokens */
    CL_MAX_LOGIT_BIAS = 1 << 20, /* entries */
    CL_MAX_GRAMMAR = 4 << 20,    /* bytes of grammar source */
    CL_MAX_TOP = 20,             /* top logprobs per token */
    CL_MAX_NAME = 255,           /* bytes of a name, model, message, peer address */
    CL_MAX_TRACE = 128,          /* bytes of a traceparent */
    CL_MAX_SALT = 1024,          /* bytes of a cache salt */
    CL_MAX_CLASS = 64,           /* bytes of a TTL class name */
    CL_MAX_KV_EVENTS = 1 << 16,  /* events in one KV_EVENTS frame */
    CL_KV_EVENT_BYTES = 18,      /* kind, tier, id */
};

enum cl_type {
    CL_HELLO = 1,
    CL_SUBMIT = 2,
    CL_TOKEN = 3,
    CL_CANCEL = 4,
    CL_STATS = 5,
    CL_KV_BLOCK = 6,
    CL_KV_DONE = 7,
    CL_PING = 8,
    CL_PONG = 9,
    CL_ERROR = 10,
    CL_BYE = 11,
    CL_PAUSE = 12,
    CL_KV_EVENTS = 13,
    CL_TYPE_LAST = CL_KV_EVENTS,
};

enum cl_role { CL_ROLE_PREFILL = 1, CL_ROLE_DECODE = 2, CL_ROLE_MIXED = 3, CL_ROLE_GATEWAY = 4 };

/* Submit flags. */
enum {
    CL_SUBMIT_IGNORE_EOS = 1,
    CL_SUBMIT_LOGPROBS = 2,
    /* Prefill only: compute the prompt and stream its full blocks (all but
     * the one holding the last token, from block KV skip on) back on this
     * connection as KV_BLOCK frames, each as soon as the step that filled
     * it is done, then KV_DONE; no TOKEN frames. */
    CL_SUBMIT_PREFILL = 4,
};

struct cl_hello {
    uint8_t role;                /* enum cl_role */
    uint8_t fingerprint[16];     /* inferd_engine_fingerprint (zero from a gateway) */
    uint32_t block_tokens;       /* KV block size in tokens (0 from a gateway) */
    uint32_t frame_bytes;        /* KV block frame bytes (0 from a gateway) */
    uint32_t max_ctx;            /* tokens per request, prompt + output (0 from a gateway) */
    char name[CL_MAX_NAME + 1];  /* the sender's name for logs */
    char model[CL_MAX_NAME + 1]; /* the model it serves ("" from a gateway) */
};

struct cl_grammar_limits { /* inferd_grammar_limits, field for field */
    int32_t max_rules, max_elems;
    int64_t compile_work, compile_cpu_ms;
    int32_t max_stacks, max_nodes;
    int64_t step_work, mask_work;
    int32_t probe_steps;
    int64_t table_bytes;
};

struct cl_submit {
    uint64_t request;                   /* the sender's id, unique on the connection */
    char traceparent[CL_MAX_TRACE + 1]; /* W3C trace context ("" when none) */
    int32_t priority;
    uint32_t max_tokens; /* >= 1 */
    uint8_t flags;       /* CL_SUBMIT_* */
    uint8_t n_logprobs;  /* 0..20; > 0 needs CL_SUBMIT_LOGPROBS */
    float temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    uint64_t seed;
    uint32_t n_logit_bias;
    int32_t *bias_token;  /* (n_logit_bias) */
    float *bias;          /* (n_logit_bias) */
    uint8_t grammar_kind; /* enum inferd_grammar_kind */
    bool has_limits;
    struct cl_grammar_limits limits;
    char *grammar; /* (grammar_len) source, NUL-terminated; NULL when empty */
    uint32_t grammar_len;
    char *cache_salt; /* (salt_len) bytes, any (NUL too); NULL when empty */
    uint16_t salt_len;
    char ttl_class[CL_MAX_CLASS + 1]; /* "" for the server's default */
    uint32_t n_prompt;                /* 1..CL_MAX_PROMPT */
    int32_t *prompt;                  /* (n_prompt) token ids, >= 0 */
    uint32_t n_generated;             /* <= n_prompt - 1 */
    char kv_peer[CL_MAX_NAME + 1];    /* its prefill workers, "HOST:PORT,..." ("" none) */
    uint32_t kv_skip;                 /* CL_SUBMIT_PREFILL: leading blocks not to send */
};

struct cl_token {
    uint64_t request;
    uint32_t index; /* of the token in the output, from 0 */
    int32_t token;  /* -1 on a finish alone */
    float logprob;
    uint8_t n_top; /* 0..CL_MAX_TOP */
    int32_t top_token[CL_MAX_TOP];
    float top_logprob[CL_MAX_TOP];
    uint8_t finish; /* enum inferd_finish; the rest only when != 0 */
    uint32_t n_prompt, n_cached, n_generated;
    double queue_s;
    int32_t error;
    char message[CL_MAX_NAME + 1];
};

/* The engine counters a STATS frame carries after its gauges, in this
 * order (inferd_stats' fields of the same names). */
enum {
    CL_STAT_STEPS,
    CL_STAT_DECODE_STEPS,
    CL_STAT_DECODE_STEP_TOKENS,
    CL_STAT_PROMPT_STEPS,
    CL_STAT_PROMPT_TOKENS,
    CL_STAT_CACHED_TOKENS,
    CL_STAT_GENERATED_TOKENS,
    CL_STAT_SUBMITTED,
    CL_STAT_REJECTED,
    CL_STAT_CANCELLED,
    CL_STAT_PREEMPTED,
    CL_STAT_PREFIX_QUERY_TOKENS,
    CL_STAT_PREFIX_HIT_TOKENS,
    /* the worker's KV transfer (not the engine's) */
    CL_STAT_KV_BLOCKS_SENT,     /* KV_BLOCK frames sent for prefill-only requests */
    CL_STAT_KV_BLOCKS_RECEIVED, /* KV_BLOCK frames taken in for pulls */
    CL_STAT_KV_PULLS,           /* requests whose KV was asked of a prefill worker */
    CL_STAT_KV_PULL_FALLBACKS,  /* of those, ended otherwise than by KV_DONE (the rest
                                   computed here) */
    CL_STAT_COUNTERS
};

struct cl_stats {
    uint32_t running, waiting, loading;
    uint32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached;
    double step_ms_fixed, step_ms_per_token, tokens_per_s;
    uint64_t queued_tokens, finished;
    uint64_t counter[CL_STAT_COUNTERS];  /* CL_STAT_*, since the engine started */
    double decode_step_s, prompt_step_s; /* seconds spent in those steps */
};

struct cl_kv_block {
    uint64_t request;
    uint32_t index;       /* block index in the prompt */
    const uint8_t *frame; /* (frame_len) into the decoded payload: valid while it is */
    size_t frame_len;
};

struct cl_kv_done {
    uint64_t request;
    uint32_t n_blocks;   /* KV_BLOCK frames sent for it */
    uint32_t n_computed; /* prompt tokens the sender computed or attached */
};

struct cl_pause {
    uint64_t request;
    uint8_t paused; /* 0 or 1 */
};

struct cl_kv_events {
    uint64_t seq;        /* the first event's number */
    uint32_t n;          /* events */
    const uint8_t *data; /* (n x CL_KV_EVENT_BYTES) into the decoded frame (or the encoder's
                            input): valid while it is */
};

/* Event i of e: kind (1 stored, 2 evicted), tier, id. */
void cl_kv_event_at(const struct cl_kv_events *e, uint32_t i, int *kind, int *tier, uint8_t id[16]);

struct cl_error {
    uint64_t request; /* 0: about the connection */
    int32_t code;     /* an ERR_* code */
    char message[CL_MAX_NAME + 1];
};

struct cl_msg {
    enum cl_type type;
    union {
        struct cl_hello hello;
        struct cl_submit submit;
        struct cl_token token;
        uint64_t request; /* CANCEL */
        struct cl_stats stats;
        struct cl_kv_block kv_block;
        struct cl_kv_done kv_done;
        uint64_t nonce; /* PING, PONG */
        struct cl_error error;
        struct cl_pause pause;
        struct cl_kv_events kv_events;
    } u;
};

/* Reading a byte stream: whether buf[0..n) starts with a whole frame.
 * Returns 1 when it does, 0 when more bytes are needed, or ERR_PROTOCOL
 * with a message when the header is bad (the connection must close:
 * nothing after it can be framed). *frame_len is the frame's bytes (header
 * + payload) once the header is in, else 0. */
int cl_frame_peek(const uint8_t *buf, size_t n, size_t *frame_len, struct err_msg *msg);

/* Decodes one whole frame (cl_frame_peek said its length). Returns 0 with
 * *m filled (cl_msg_free releases it; a KV_BLOCK points into buf), or
 * ERR_PROTOCOL with a message naming the field, *m then holding nothing. */
int cl_decode(const uint8_t *buf, size_t len, struct cl_msg *m, struct err_msg *msg);
void cl_msg_free(struct cl_msg *m);

/* Appends m as one frame to out. Returns 0, or ERR_INVALID with a message
 * when m is not one a peer would accept (the same checks as cl_decode):
 * nothing is appended then. */
int cl_encode(const struct cl_msg *m, struct buf *out, struct err_msg *msg);

/* Sets the KV skip of an encoded SUBMIT frame (frame[0..len), as
 * cl_encode wrote it) in place. */
void cl_submit_set_kv_skip(uint8_t *frame, size_t len, uint32_t skip);

/* The type's name ("SUBMIT"), or "?" for none. */
const char *cl_type_name(int type);

#endif
