/*
 * inferd.h - the embeddable engine API.
 *
 * A model is loaded once (weights stay memory-mapped) and shared by engines.
 * An engine owns a paged KV cache with a prefix cache, a compute thread pool
 * and a scheduler. Callers submit requests (token ids + sampling parameters,
 * priority, cache salt) and receive events (one per generated token, then a
 * finish event carrying the usage) by polling.
 *
 * Driving: inferd_engine_step() runs one scheduler step - one batched forward
 * over up to token_budget tokens that mixes decode tokens of running requests
 * with prefill chunks of waiting ones - on the calling thread (plus the
 * engine's compute threads).
 *
 * Thread model: single owner. Every call on one engine (submit, step, poll,
 * cancel, stats, kv events) must come from one thread at a time - in a server,
 * the engine thread, to which other threads hand requests and cancellations
 * through queues of their own. Nothing here locks. Models are read-only after
 * load and may be shared by engines on different threads; the exception is
 * their grammar state (vocabulary and compile cache, built on first use and
 * locked inside), which is why inferd_grammar_compile may run on any thread,
 * e.g. a server's preparation threads. A model outlives its engines and the
 * grammars compiled for it.
 *
 * Scheduling: each step first gives one decode token to every running request
 * whose prompt is done, then prefill chunks in priority order (higher
 * inferd_request.priority first, ties by arrival), admitting waiting requests
 * while fewer than max_seqs run. When a request needs a KV block and none is
 * free or evictable, the running request with the lowest priority, newest
 * among equals, is preempted: its blocks are released and it recomputes later
 * (mostly from the prefix cache) with unchanged output. At most max_waiting
 * requests wait; beyond that inferd_submit fails with ERR_OVERLOADED and
 * inferd_stats.est_queue_ms suggests when to retry.
 *
 * Prefix cache: full KV blocks are named by content (see
 * inferd_engine_fingerprint) and kept after their request ends, until the
 * pool needs the memory (LRU). A request whose prompt starts with cached
 * blocks attaches them and computes only the rest; its finish event reports
 * how many prompt tokens came from the cache. Requests with different
 * cache_salt values never share blocks.
 *
 * Errors: functions return 0 or a negative code (see inferd_strerror); those
 * that take a char *err buffer also write a message there. Codes used here
 * (src/base/err.h maps each to an HTTP status and API error types):
 * ERR_INVALID (-10001, bad field), ERR_FORMAT (-10002, malformed KV frame),
 * ERR_NO_KV (-10004, no KV block to be had), ERR_OVERLOADED (-10005, waiting
 * queue full: retry later), ERR_NOT_FOUND (-10007, unknown request or block
 * id), ERR_TOO_LARGE (-10008, prompt beyond the context length), -ENOMEM.
 *
 * Bit-exactness: a request's tokens and logprobs do not depend on the other
 * requests in the engine, their priorities, the budget/chunking, n_threads,
 * preemption, or whether its prompt came from the prefix cache.
 */
#ifndef INFERD_INFERD_H
#define INFERD_INFERD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct inferd_model inferd_model;
typedef struct inferd_engine inferd_engine;
typedef struct inferd_compiled_grammar inferd_compiled_grammar;

const char *inferd_strerror(int code);

/* ---- models ---- */
int inferd_model_load(const char *path, inferd_model **out, char *err, size_t err_len);
void inferd_model_free(inferd_model *m);
int inferd_model_n_vocab(const inferd_model *m);
int inferd_model_n_ctx_train(const inferd_model *m);
/* Token ids that end generation (eos, eot, ...); returns the count written (<= cap). */
int inferd_model_eog_tokens(const inferd_model *m, int32_t *ids, int cap);

/* ---- engines ---- */
enum inferd_kv_type { INFERD_KV_F16, INFERD_KV_BF16, INFERD_KV_F32 };

struct inferd_engine_config {
    int n_threads;    /* compute threads incl. the caller (0: all cores) */
    int kv_blocks;    /* KV blocks in the pool (0: fit max_ctx * max_seqs) */
    int block_tokens; /* positions per KV block (0: 16) */
    int token_budget; /* tokens per forward step (0: 512) */
    /* A step that prefills next to decoding requests costs at most this many
     * decode-only steps, by the engine's own measured step costs: the
     * prefill chunk shrinks to fit (0: 2; < 0: off, chunks fill the budget;
     * else must be > 1). Bounds the inter-token gap prefill adds. */
    float prefill_step_ratio;
    int max_seqs;    /* running requests at once (0: 64) */
    int max_waiting; /* queued requests before ERR_OVERLOADED (0: max(256, 4 max_seqs)) */
    int max_ctx;     /* longest request in positions (0: min(trained, 4096)) */
    enum inferd_kv_type kv_type; /* KV element type */
    bool no_prefix_cache;        /* true: never reuse KV across requests */
    bool kv_events;              /* true: record block stored/evicted events (drain them!) */
    bool grammar_inline;         /* true: fill grammar masks after the forward on the calling thread
                                    (default: on a helper thread while the forward runs; same output) */
    /* Pre-eviction hook (write-back KV tiers): called on the engine's thread,
     * inside the step that needs the memory, just before a cached block is
     * evicted from the prefix cache, with its frame (exactly the bytes
     * inferd_kv_export writes, in a buffer the engine owns and reuses: copy
     * what you keep). It must not call into the engine. NULL: none. */
    void (*kv_evict_hook)(void *ctx, const uint8_t id[16], const void *frame, size_t len);
    void *kv_evict_ctx; /* passed to kv_evict_hook */
};

void inferd_engine_config_default(struct inferd_engine_config *cfg);
/* The engine keeps a pointer to m: free the engine first. */
int inferd_engine_new(inferd_model *m, const struct inferd_engine_config *cfg, inferd_engine **out,
                      char *err, size_t err_len);
void inferd_engine_free(inferd_engine *e);
/* The 16 bytes hashed into every KV block id: XXH3-128 over the model
 * fingerprint (weights, hyper-parameters, tokenizer), the KV element type,
 * the block size and the numerics version. Engines with equal fingerprints
 * compute bitwise equal KV for equal token prefixes. */
void inferd_engine_fingerprint(const inferd_engine *e, uint8_t out[16]);

/* ---- requests ---- */
struct inferd_logit_bias {
    int32_t token; /* token id */
    float bias;    /* added to the raw logit */
};

struct inferd_sampling {
    float temperature;        /* 0: greedy */
    int top_k;                /* 0: off */
    float top_p;              /* 1: off */
    float min_p;              /* 0: off */
    float repetition_penalty; /* 1: off */
    float presence_penalty;   /* 0: off */
    float frequency_penalty;  /* 0: off */
    uint64_t seed;            /* draws keyed by (seed, position) */
    bool logprobs;            /* report each token's logprob (costs a vocabulary pass) */
    int n_logprobs;           /* top alternatives per token, 0..20 (needs logprobs) */
    const struct inferd_logit_bias *logit_bias; /* (n_logit_bias), copied at submit */
    int n_logit_bias;                           /* entries */
};

void inferd_sampling_default(struct inferd_sampling *s);

/* Structured output: the generated text must match a grammar. */
enum inferd_grammar_kind {
    INFERD_GRAMMAR_NONE = 0,        /* unconstrained */
    INFERD_GRAMMAR_EBNF = 1,        /* GBNF text, start rule `root` (docs/grammar.md) */
    INFERD_GRAMMAR_REGEX = 2,       /* regex matching the whole output */
    INFERD_GRAMMAR_JSON_SCHEMA = 3, /* JSON Schema document: output is JSON it accepts */
    INFERD_GRAMMAR_JSON_OBJECT = 4, /* any JSON object (source unused) */
    INFERD_GRAMMAR_SEQUENCE = 5,    /* JSON array of alternatives, each an array of literal
                                       strings and {"schema": ..., "label": ...} pieces */
};

/* Budgets of one grammar (docs/grammar.md, "Limits"); 0 takes the default.
 * A grammar beyond them is refused (ERR_INVALID, the message naming the
 * construct: regex fragment and offset, GBNF rule and line, JSON Schema
 * pointer); one that only shows it while generating fails its request
 * alone with an INFERD_FINISH_ERROR event. */
struct inferd_grammar_limits {
    int max_rules;          /* builder rules */
    int max_elems;          /* lowered program elements */
    int64_t compile_work;   /* work units of one compile */
    int64_t compile_cpu_ms; /* thread CPU time of one compile */
    int max_stacks;         /* stacks alive in one matcher state */
    int max_nodes;          /* stack nodes one request's matcher holds */
    int64_t step_work;      /* work units one generated token may cost the matcher */
    int64_t mask_work;      /* work units one token mask may cost (bounds how long a step can
                               wait for a mask) */
    int probe_steps;        /* dry-run token steps at compile (< 0: none) */
    int64_t table_bytes;    /* mask-table memory one compiled grammar caches */
};

struct inferd_grammar {
    enum inferd_grammar_kind kind;              /* NONE: no constraint (unless compiled) */
    const char *source;                         /* (len) grammar text, compiled at submit on
                                                   the calling thread (through the model's
                                                   cache) when compiled is NULL */
    size_t len;                                 /* bytes of source */
    const struct inferd_grammar_limits *limits; /* NULL: defaults */
    const inferd_compiled_grammar *compiled;    /* from inferd_grammar_compile (then kind,
                                                   source and limits are not read): submit
                                                   only makes a matcher, taking its own
                                                   reference; the caller may free its handle
                                                   once inferd_submit returned */
};

struct inferd_request {
    const int32_t *prompt;           /* (n_prompt) token ids, copied at submit */
    int n_prompt;                    /* >= 1 */
    int max_tokens;                  /* tokens to generate at most (>= 1) */
    bool ignore_eos;                 /* keep going past end-of-generation tokens */
    int priority;                    /* higher runs first and is preempted last (default 0) */
    const char *cache_salt;          /* (cache_salt_len) bytes; NULL/empty: shared cache */
    size_t cache_salt_len;           /* only requests with equal salts share KV blocks */
    struct inferd_sampling sampling; /* how to pick tokens */
    bool hold;                       /* queue it held, waiting on a KV tier load: it is not
                                        admitted until inferd_kv_release_hold (other requests
                                        keep stepping); it counts against max_waiting and in
                                        inferd_stats.n_loading, not n_waiting */
    int n_output;                    /* resume: the prompt's last n_output tokens are output
                                        already (a request continued on another engine: prompt
                                        = its prompt + what it generated so far; 0 <= n_output
                                        < min(n_prompt, max_tokens)). They count as generated
                                        (max_tokens is the whole output's, penalties see them,
                                        the grammar is advanced through them at submit, usage
                                        counts them) and the next token is drawn at the next
                                        position: the output goes on exactly as the
                                        uninterrupted request's would. */
    struct inferd_grammar grammar;   /* optional constraint: tokens are drawn from those that
                                        keep the output in the grammar (masked logits are -inf,
                                        logprobs are of the masked distribution); the request
                                        finishes with STOP when the grammar is complete and
                                        allows nothing more, and end-of-generation tokens are
                                        allowed only where the grammar is complete */
};

enum inferd_finish {
    INFERD_FINISH_NONE,
    INFERD_FINISH_STOP,
    INFERD_FINISH_LENGTH,
    INFERD_FINISH_CANCELLED,
    INFERD_FINISH_ERROR
};

struct inferd_token_logprob {
    int32_t token; /* id */
    float logprob; /* natural log of its probability under the raw logits */
};

struct inferd_event {
    uint64_t request;                    /* id from inferd_submit */
    int32_t token;                       /* generated token (-1 on a pure finish event) */
    float logprob;                       /* of token; 0 unless sampling.logprobs */
    int n_top;                           /* valid entries of top */
    struct inferd_token_logprob top[20]; /* alternatives, most likely first */
    enum inferd_finish finish;           /* NONE while the request goes on */
    int n_prompt;                        /* usage: prompt tokens (on finish) */
    int n_cached;      /* usage: of those, read from the prefix cache (on finish) */
    double queue_s;    /* seconds from submit to first admission (on finish; 0 if never
                          admitted) */
    int n_generated;   /* usage: generated so far */
    int error;         /* on INFERD_FINISH_ERROR: the code (ERR_INTERNAL if a grammar
                          allows no token of this vocabulary; ERR_INVALID if it ran past a
                          budget while generating) */
    char message[256]; /* on INFERD_FINISH_ERROR: what happened, naming the construct
                          ("regex fragment '((a?b?){30}){30}' at offset 0: too costly: a token
                          mask needs more than 4194304 work units ..."); empty otherwise */
};

/* ---- grammars compiled off the engine thread ---- */

/* Compiles g (kind, source, limits; g->compiled must be NULL) for model m:
 * parse, lower, the dry runs, and the grammar's first mask tables, under
 * its budgets, through the model's compile cache (a grammar sent again is
 * a cache hit; a refusal is remembered too). The model's grammar
 * vocabulary (token bytes + trie) is built on the first call, once.
 * Any thread, any number at once (the cache and the vocabulary build are
 * locked; a grammar's mask tables have their own lock). Returns 0 with *out
 * a handle owned by the caller, or ERR_INVALID (bad kind or source, a
 * budget exceeded: the message names the construct), ERR_FORMAT /
 * ERR_UNSUPPORTED (the model's tokenizer cannot be read as token bytes),
 * with a message in err. The handle is immutable: it may be used for any
 * number of submits to any engine on m, from any thread. */
int inferd_grammar_compile(inferd_model *m, const struct inferd_grammar *g,
                           inferd_compiled_grammar **out, char *err, size_t err_len);
/* Frees the caller's handle (requests submitted with it keep their own
 * reference). NULL is fine. Any thread. */
void inferd_compiled_grammar_free(inferd_compiled_grammar *cg);

/* Validates and queues the request; everything it points to is copied (a
 * compiled grammar is referenced). Errors, with a message naming the field:
 * ERR_INVALID (bad token id, max_tokens, sampling parameter, a compiled
 * grammar of another model), ERR_TOO_LARGE (prompt, or prompt + max_tokens,
 * longer than max_ctx), ERR_OVERLOADED (max_waiting requests wait already;
 * nothing was queued); a grammar source that does not compile is
 * ERR_INVALID with the compiler's message. Compiling a source here runs on the
 * calling thread - the engine's - under the same budgets; servers compile
 * with inferd_grammar_compile on their own threads instead. */
int inferd_submit(inferd_engine *e, const struct inferd_request *r, uint64_t *id, char *err,
                  size_t err_len);
/* Finishes the request now: its KV blocks are released before this returns
 * (full blocks stay in the prefix cache) and a finish event with
 * INFERD_FINISH_CANCELLED is queued for inferd_poll. Returns 0, or
 * ERR_NOT_FOUND for an unknown or already finished id. */
int inferd_cancel(inferd_engine *e, uint64_t id);
/* Holds the request out of the schedule (paused) or lets it back in. A
 * paused request keeps its place, its KV blocks and its state; it computes
 * nothing until resumed, and its output does not change (the draws are keyed
 * by seed and position). Its blocks stay preemptible as any running
 * request's. For a reader that stops reading: the server pauses a stream
 * whose socket is full. Returns 0, or ERR_NOT_FOUND. */
int inferd_pause(inferd_engine *e, uint64_t id, bool paused);

/* Runs one step. Returns the number of tokens computed (0 when idle) or a
 * negative code. */
int inferd_engine_step(inferd_engine *e);
/* Pops the next event; false when none is pending. */
bool inferd_poll(inferd_engine *e, struct inferd_event *ev);

/* A snapshot for metrics and balancers. Gauges describe the engine now;
 * counters (n_*) only grow. Hit rate = n_prefix_hit_tokens /
 * n_prefix_query_tokens. */
struct inferd_stats {
    int n_waiting;            /* gauge: requests queued (new or preempted) */
    int n_running;            /* gauge: requests admitted (prefilling or decoding) */
    int n_loading;            /* gauge: requests held for a KV tier load (inferd_request.hold) */
    int kv_blocks_total;      /* pool size */
    int kv_blocks_used;       /* gauge: blocks referenced by requests */
    int kv_blocks_cached;     /* gauge: unreferenced blocks kept by the prefix cache (LRU) */
    int kv_blocks_free;       /* gauge: blocks holding nothing */
    int kv_blocks_indexed;    /* gauge: blocks in the prefix index (referenced or not) */
    int last_step_tokens;     /* gauge: tokens in the last forward step */
    int last_step_seqs;       /* gauge: requests in the last forward step */
    int last_step_limit;      /* gauge: tokens the last step could hold (budget, or less
                                 next to decodes: prefill_step_ratio) */
    double step_ms_fixed;     /* gauge: measured step cost model, fixed part (0: none yet) */
    double step_ms_per_token; /* gauge: measured step cost model, per token (0: none yet) */
    int64_t queued_tokens;    /* gauge: tokens waiting requests still need (prompt + max_tokens) */
    double tokens_per_s;      /* gauge: recent step throughput (moving average; 0 before any) */
    double est_queue_ms;      /* gauge: queued_tokens / tokens_per_s (0 when unknown) */
    uint64_t n_steps;         /* forward steps run */
    uint64_t n_submitted;     /* requests accepted */
    uint64_t n_rejected;      /* requests refused with ERR_OVERLOADED */
    uint64_t n_finished;      /* requests finished (any reason) */
    uint64_t n_cancelled;     /* of those, cancelled */
    uint64_t n_prompt_tokens; /* prompt positions computed by prefill (recomputation too) */
    uint64_t n_cached_tokens; /* positions attached from the prefix cache instead */
    uint64_t n_generated_tokens; /* tokens sampled */
    double grammar_mask_s;   /* counter: seconds the engine thread spent on grammar masks outside
                                the forward (filling inline, or waiting for the helper after it) */
    double sample_s;         /* counter: seconds the engine thread spent sampling the rows of
                                its steps (wall time; the rows run on the compute threads) */
    uint64_t n_decode_steps; /* steps holding only decode tokens (one per running request) */
    uint64_t n_decode_step_tokens;  /* tokens of those steps */
    double decode_step_s;           /* counter: seconds of those steps (sampling included) */
    uint64_t n_prompt_steps;        /* steps holding prompt tokens (prefill or recomputation) */
    double prompt_step_s;           /* counter: seconds of those steps (sampling included) */
    uint64_t n_preempted;           /* requests sent back to recompute for lack of KV */
    uint64_t n_prefix_lookups;      /* admissions that looked up the prefix cache */
    uint64_t n_prefix_hits;         /* of those, attaching at least one block */
    uint64_t n_prefix_hit_blocks;   /* blocks attached */
    uint64_t n_prefix_hit_tokens;   /* positions attached (= blocks x block_tokens) */
    uint64_t n_prefix_query_tokens; /* positions of the sequences looked up */
    uint64_t n_kv_stored;           /* blocks entered into the prefix index */
    uint64_t n_kv_evicted;          /* blocks evicted from it to make room */
};

void inferd_engine_stats(const inferd_engine *e, struct inferd_stats *s);

/* ---- KV block events (config kv_events) ---- */
enum inferd_kv_event_kind { INFERD_KV_STORED, INFERD_KV_EVICTED };

struct inferd_kv_event {
    enum inferd_kv_event_kind kind; /* block entered / left the prefix index */
    uint8_t id[16];                 /* block id: XXH3-128, big-endian */
};

/* Moves up to cap pending events to out, oldest first; returns how many.
 * Events accumulate until drained when config.kv_events is set. */
int inferd_kv_events(inferd_engine *e, struct inferd_kv_event *out, int cap);

/* ---- KV block ids and tiers ---- */

/* Positions per KV block (block ids cover this many tokens each). */
int inferd_engine_block_tokens(const inferd_engine *e);
/* The ids of the full blocks of a token sequence, without an engine: a pure
 * function of the engine fingerprint (inferd_engine_fingerprint), the block
 * size, the cache salt (salt_len bytes; NULL/0: none) and the tokens - the
 * ids the engine gives the same blocks, so a router or a tier computes them
 * anywhere. Writes min(n_tokens / block_tokens, cap) ids (the 16-byte form
 * of inferd_kv_event) and returns that count, or ERR_INVALID. Any thread. */
int inferd_kv_block_ids(const uint8_t fingerprint[16], int block_tokens, const char *salt,
                        size_t salt_len, const int32_t *tokens, int n_tokens, uint8_t (*ids)[16],
                        int cap);
/* How many of ids[0..n), from the first, the engine's pool holds now
 * (0 with the prefix cache off). */
int inferd_kv_cached_prefix(const inferd_engine *e, const uint8_t (*ids)[16], int n);
/* Lets a request submitted with hold be admitted (its imported prefix
 * blocks are then attached like any cached ones). Returns 0, or
 * ERR_NOT_FOUND for an unknown or finished id. Releasing an unheld request
 * is a no-op. Imported blocks sit unreferenced on the LRU until admission;
 * under memory pressure some may be evicted first and are then recomputed
 * (output unchanged). */
int inferd_kv_release_hold(inferd_engine *e, uint64_t id);
/* What a frame of this engine carries: its fingerprint, the layers and the
 * bytes per layer per block (K and V together). */
void inferd_kv_frame_layout(const inferd_engine *e, uint8_t fingerprint[16], uint32_t *n_layer,
                            uint32_t *layer_bytes);

/* ---- KV block export / import by id (tiers, transfers) ----
 * A frame carries one cached block: a 56-byte header (magic, engine
 * fingerprint, id, layout, XXH3-64 checksum) and the block's bytes, layer by
 * layer (src/kv/frame.h has the layout). Frames move between engines with
 * equal fingerprints; an imported block is found by the next request whose
 * prompt hashes to its id, exactly as if this engine had computed it. */

/* Bytes of one frame (0 with the prefix cache off). */
size_t inferd_kv_frame_bytes(const inferd_engine *e);
/* Writes the cached block `id` into buf. Returns 0, ERR_NOT_FOUND (not
 * cached here) or ERR_INVALID (cap < inferd_kv_frame_bytes). */
int inferd_kv_export(inferd_engine *e, const uint8_t id[16], void *buf, size_t cap);
/* Validates a frame (external input) and caches its block, unreferenced.
 * Returns 0 (also when the id is cached already), ERR_FORMAT (bad magic,
 * size, checksum), ERR_INVALID (other fingerprint or layout, cache off) or
 * ERR_NO_KV (every block in use), with a message in err. */
int inferd_kv_import(inferd_engine *e, const void *buf, size_t len, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif
