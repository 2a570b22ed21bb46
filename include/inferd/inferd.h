/*
 * inferd.h - the embeddable engine API.
 *
 * A model is loaded once (weights stay memory-mapped) and shared by engines.
 * An engine owns a paged KV cache, a compute thread pool and a scheduler.
 * Callers submit requests (token ids + sampling parameters) and receive
 * events (one per generated token, then a finish event) by polling.
 *
 * Driving: inferd_engine_step() runs one scheduler step - one batched forward
 * over up to token_budget tokens that mixes decode tokens of running requests
 * with prefill chunks of waiting ones - on the calling thread (plus the
 * engine's compute threads). Embedders that want a background engine thread
 * run the step loop on a thread of their own; every call on one engine must
 * come from one thread at a time.
 *
 * Errors: functions return 0 or a negative code (see inferd_strerror); those
 * that take a char *err buffer also write a message there.
 *
 * Bit-exactness: a request's tokens and logprobs do not depend on the other
 * requests in the engine, on the budget/chunking, or on n_threads.
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
    int n_threads;               /* compute threads incl. the caller (0: all cores) */
    int kv_blocks;               /* KV blocks in the pool (0: fit max_ctx * max_seqs) */
    int block_tokens;            /* positions per KV block (0: 16) */
    int token_budget;            /* tokens per forward step (0: 512) */
    int max_seqs;                /* running requests at once (0: 64) */
    int max_ctx;                 /* longest request in positions (0: min(trained, 4096)) */
    enum inferd_kv_type kv_type; /* KV element type */
};

void inferd_engine_config_default(struct inferd_engine_config *cfg);
/* The engine keeps a pointer to m: free the engine first. */
int inferd_engine_new(inferd_model *m, const struct inferd_engine_config *cfg, inferd_engine **out,
                      char *err, size_t err_len);
void inferd_engine_free(inferd_engine *e);

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
};

struct inferd_grammar {
    enum inferd_grammar_kind kind; /* NONE: no constraint */
    const char *source;            /* (len) grammar text, compiled (and cached) at submit */
    size_t len;                    /* bytes of source */
};

struct inferd_request {
    const int32_t *prompt;           /* (n_prompt) token ids, copied at submit */
    int n_prompt;                    /* >= 1 */
    int max_tokens;                  /* tokens to generate at most (>= 1) */
    bool ignore_eos;                 /* keep going past end-of-generation tokens */
    int priority;                    /* higher runs first (reserved for the scheduler) */
    struct inferd_sampling sampling; /* how to pick tokens */
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
    int n_prompt;                        /* prompt tokens (on finish) */
    int n_generated;                     /* generated so far */
    int error;                           /* on INFERD_FINISH_ERROR: the code (ERR_INTERNAL if a
                                            grammar allows no token of this vocabulary) */
};

/* Validates and queues the request. Errors: ERR_INVALID-class codes with a
 * message naming the field (bad token id, prompt longer than max_ctx, bad
 * sampling parameter, a grammar that does not compile: "grammar: ..."). */
int inferd_submit(inferd_engine *e, const struct inferd_request *r, uint64_t *id, char *err,
                  size_t err_len);
/* Finishes the request at the next step boundary with INFERD_FINISH_CANCELLED
 * and frees its KV blocks. Unknown ids are ignored. */
void inferd_cancel(inferd_engine *e, uint64_t id);

/* Runs one step. Returns the number of tokens computed (0 when idle) or a
 * negative code. */
int inferd_engine_step(inferd_engine *e);
/* Pops the next event; false when none is pending. */
bool inferd_poll(inferd_engine *e, struct inferd_event *ev);

struct inferd_stats {
    int n_waiting;               /* requests not yet started */
    int n_running;               /* requests with KV in the cache */
    int kv_blocks_total;         /* pool size */
    int kv_blocks_used;          /* referenced blocks */
    uint64_t n_steps;            /* forward steps run */
    uint64_t n_prompt_tokens;    /* prefill tokens computed */
    uint64_t n_generated_tokens; /* tokens sampled */
    uint64_t n_preempted;        /* requests sent back to recompute for lack of KV */
};

void inferd_engine_stats(const inferd_engine *e, struct inferd_stats *s);

#ifdef __cplusplus
}
#endif

#endif
