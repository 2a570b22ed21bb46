/*
 * grammar.h - structured output: EBNF, regex and JSON Schema as token masks.
 *
 * Three front ends compile text into one grammar IR, which is lowered to a
 * byte-level pushdown automaton; a matcher walks it per request, and a mask
 * builder turns a matcher state into the set of vocabulary tokens whose bytes
 * keep the output inside the language.
 *
 *   GBNF text ----- ebnf.c ---.
 *   regex ------- regex.c ----+--> builder (ir.c) --lower--> struct grammar
 *   JSON Schema -- schema.c --'    rules of code-point      flat byte program,
 *                                  classes and rule refs    refcounted, immutable
 *
 *   struct grammar + struct grammar_vocab (token bytes + trie, one per model)
 *        |                     |
 *        v                     v
 *   struct grammar_matcher (per request) --fill_mask--> uint64 bitmap over the
 *        ^  accept_token                                 vocabulary
 *        '---------------------------------------------'
 *
 * Lifetimes: a struct grammar is a refcounted shared object (the compile
 * cache and every matcher hold a reference); its lazily filled mask tables
 * are guarded by a mutex inside it. A struct grammar_vocab is built once per
 * model and must outlive every grammar and matcher used with it. A matcher is
 * owned by one request and used by one thread at a time.
 *
 * Budgets (budget.c, struct grammar_limits): a compile is bounded in rules,
 * program size, work units and thread CPU time; a matcher in stacks per
 * state, stack nodes, and work per token and per mask. Work units are
 * counted where the work is done (a stack node visited by a closure, a trie
 * node visited by a mask walk, a leaf interned) and a computation that runs
 * past its bound stops there, so no input can make one call run long. What
 * runs past a bound is named: the regex fragment and its offset, the GBNF
 * rule and line, the JSON Schema pointer.
 *
 * Errors: compile functions return 0 or ERR_INVALID (bad source, unsupported
 * JSON Schema keyword: the message names the keyword and its JSON path; a
 * grammar beyond a budget: the message names the construct and the bound).
 */
#ifndef INFERD_GRAMMAR_GRAMMAR_H
#define INFERD_GRAMMAR_GRAMMAR_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct buf;
struct gguf_file;
struct grammar;
struct grammar_vocab;
struct grammar_matcher;
struct grammar_cache;

enum grammar_kind {
    GRAMMAR_EBNF = 1,        /* GBNF text; the start rule is `root` */
    GRAMMAR_REGEX = 2,       /* a JSON-Schema-dialect regex matching the whole output */
    GRAMMAR_JSON_SCHEMA = 3, /* a JSON Schema document; output is JSON text */
    GRAMMAR_JSON_OBJECT = 4, /* any JSON object; source ignored (may be empty) */
    GRAMMAR_SEQUENCE = 5,    /* JSON: alternatives of literal text and JSON Schema pieces
                                (seq.c); forced tool calls inside a family's wrapper */
};

/* Name of a kind ("ebnf", "regex", "json_schema", "json_object", "sequence"). */
const char *grammar_kind_name(enum grammar_kind kind);

/* ---- budgets ---- */

/* What one compile and one matcher may cost. Zero fields take the default
 * (grammar_limits_default; probe_steps < 0: no steps past the start state);
 * the values are documented in docs/grammar.md ("Limits"). A compiled
 * grammar keeps its limits: its matchers and mask tables run under them. */
struct grammar_limits {
    int max_rules;          /* builder rules of one grammar */
    int max_elems;          /* lowered program elements */
    int64_t compile_work;   /* work units of one compile: builder, lowering, dry run */
    int64_t compile_cpu_ms; /* thread CPU time of one compile (read every 2^14 units) */
    int max_stacks;         /* stacks alive in one matcher state */
    int max_nodes;          /* stack nodes one matcher (or one grammar's table walks) holds */
    int64_t step_work;      /* units one token's bytes may cost a matcher */
    int64_t mask_work;      /* units one mask may cost: table walks, ORs, run-time checks */
    int probe_steps;        /* dry-run steps past the start state */
    int64_t table_bytes;    /* mask-table memory one grammar caches; beyond, a table serves
                               one mask */
};

/* The defaults. */
void grammar_limits_default(struct grammar_limits *l);
/* l with zero fields replaced by the defaults (lim NULL: all defaults). */
void grammar_limits_resolve(const struct grammar_limits *lim, struct grammar_limits *out);

/* Compiles src (len bytes, need not be NUL-terminated) into a grammar with one
 * reference owned by the caller, under the default limits. Returns 0 or
 * ERR_INVALID with msg naming what was wrong and where. Besides parsing and
 * lowering, a dry run (the closure of the start state and probe_steps byte
 * steps along the most ambiguous byte) refuses grammars whose states would
 * exceed the matcher bounds. Thread safe (no shared state). */
int grammar_compile(enum grammar_kind kind, const char *src, size_t len, struct grammar **out,
                    struct err_msg *msg);
/* The same under lim (NULL: defaults). */
int grammar_compile_limits(enum grammar_kind kind, const char *src, size_t len,
                           const struct grammar_limits *lim, struct grammar **out,
                           struct err_msg *msg);
/* The dry run with a vocabulary: the start state's mask and probe_steps
 * tokens (each step the allowed token with the most bytes) under the
 * grammar's mask and step budgets. Fills the tables it computes (cached in
 * g), so it is also the grammar's warm-up. Returns 0, or ERR_INVALID with
 * the budget error naming the construct. Thread safe (tables under g's lock;
 * the matcher is its own). */
int grammar_probe(struct grammar *g, const struct grammar_vocab *v, struct err_msg *msg);
/* The limits g was compiled under. */
const struct grammar_limits *grammar_limits_of(const struct grammar *g);
struct grammar *grammar_ref(struct grammar *g);
/* Drops a reference; the last one frees. NULL is fine. Thread safe. */
void grammar_unref(struct grammar *g);

/* Readable dump of the lowered program (for tests and `--dump`). */
void grammar_dump(const struct grammar *g, struct buf *out);

/* ---- vocabulary ---- */

/* Token classes: only NORMAL tokens take part in matching; CONTROL tokens
 * (special, unknown, unused) are never allowed, except end-of-generation
 * tokens when the grammar accepts. */
enum grammar_token_class {
    GRAMMAR_TOKEN_NORMAL = 0,
    GRAMMAR_TOKEN_CONTROL = 1,
};

/* Builds a vocabulary from explicit token byte strings: bytes[i] (len[i]
 * bytes) for token i, cls[i] its class, eog the end-of-generation ids. Copies
 * everything. Returns NULL if n_vocab < 1. Process lifetime object. */
struct grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *bytes, const uint32_t *len,
                                        const uint8_t *cls, const int32_t *eog, int n_eog);
/* Reads tokenizer.ggml.{model,tokens,token_type} from a GGUF file and decodes
 * every piece to the raw bytes the tokenizer's decode produces: "gpt2" pieces
 * through the GPT-2 byte alphabet, "llama" (SentencePiece) pieces with U+2581
 * as space and <0xXX> byte tokens. Must agree with tokenizer decode (tested
 * against the tiny qwen3 model). Returns 0, ERR_FORMAT or ERR_UNSUPPORTED. */
int grammar_vocab_from_gguf(const struct gguf_file *f, int n_vocab, const int32_t *eog, int n_eog,
                            struct grammar_vocab **out, struct err_msg *msg);
void grammar_vocab_free(struct grammar_vocab *v);
int grammar_vocab_n(const struct grammar_vocab *v);
/* Raw bytes of token id (NULL length 0 for control tokens). */
const char *grammar_vocab_bytes(const struct grammar_vocab *v, int32_t id, uint32_t *len);
bool grammar_vocab_is_eog(const struct grammar_vocab *v, int32_t id);

/* ---- matching ---- */

/* A matcher at the start of the grammar; holds a reference on g. v may be
 * NULL for byte-level use only (no masks, no tokens). The matcher runs
 * under g's limits; when the start state alone exceeds them the matcher
 * starts failed (grammar_matcher_error). */
struct grammar_matcher *grammar_matcher_new(struct grammar *g, const struct grammar_vocab *v);
void grammar_matcher_free(struct grammar_matcher *m);
/* Feeds bytes. Returns true and advances if every byte is allowed; false and
 * leaves the state unchanged otherwise. False also when the step exceeds a
 * budget (stacks, nodes, step work): the matcher then is failed for good -
 * every later call refuses - and grammar_matcher_error says why. */
bool grammar_matcher_accept_bytes(struct grammar_matcher *m, const void *bytes, size_t n);
/* Feeds one token: its bytes, or an end-of-generation token (allowed only in
 * an accepting state; afterwards the matcher is terminated). Control tokens
 * are rejected. Returns false and leaves the state unchanged when rejected. */
bool grammar_matcher_accept_token(struct grammar_matcher *m, int32_t token);
/* Whether accept_token(m, token) would succeed, without changing the state
 * (a byte walk: the reference that masks are checked against). */
bool grammar_matcher_allows(struct grammar_matcher *m, int32_t token);
/* The input so far is a complete sentence of the grammar. */
bool grammar_matcher_is_accepting(const struct grammar_matcher *m);
/* Some further byte is allowed. */
bool grammar_matcher_can_continue(const struct grammar_matcher *m);
/* An end-of-generation token was accepted. */
bool grammar_matcher_is_terminated(const struct grammar_matcher *m);
/* Writes the allowed-token bitmap: bit i of mask[i / 64] set iff token i may
 * come next (its bytes keep the output in the language; an end-of-generation
 * token iff accepting). mask has (n_vocab + 63) / 64 words. Returns the number
 * of allowed tokens, or ERR_INVALID when the mask exceeds its budget (work,
 * stacks; the matcher is failed from then on, mask all zero). May compute
 * and cache mask tables inside the grammar, taking its lock for one table
 * at a time; every table computation is bounded by the mask budget, so the
 * lock is never held longer than one budget. */
int grammar_matcher_fill_mask(struct grammar_matcher *m, uint64_t *mask);
/* 0, or the error that failed the matcher (ERR_INVALID: a budget ran out);
 * *text (if text) its message, naming the construct and the bound, valid
 * while m lives. */
int grammar_matcher_error(const struct grammar_matcher *m, const char **text);
/* Work units the last accept / allows / fill_mask call took (tests assert
 * on it: a bound on work that does not depend on the machine). */
int64_t grammar_matcher_last_work(const struct grammar_matcher *m);

/* Mask tables this grammar has computed and cached so far. */
void grammar_table_stats(struct grammar *g, int *n_cached, uint64_t *n_built);

/* ---- compile cache ---- */

/* A bounded cache of compiled grammars keyed by XXH3-64 of (kind, source,
 * limits), for one vocabulary (mask tables live in the grammars). Thread
 * safe: any number of threads may call it at once (one mutex around the
 * table and its LRU clock; compiles run outside it). */
struct grammar_cache *grammar_cache_new(const struct grammar_vocab *v, int capacity);
void grammar_cache_free(struct grammar_cache *c);
/* Compiled and probed grammar for (kind, src, lim) with a new reference for
 * the caller: from the cache, or compiled under lim (NULL: defaults), probed
 * over the cache's vocabulary (grammar_probe) and inserted (the least
 * recently used entry leaves when full; grammars in use stay alive through
 * their references). Errors as grammar_compile and grammar_probe; a refusal
 * is cached too, so a grammar sent again is refused without the work. */
int grammar_cache_get(struct grammar_cache *c, enum grammar_kind kind, const char *src, size_t len,
                      const struct grammar_limits *lim, struct grammar **out, struct err_msg *msg);
/* Hits and misses so far. */
void grammar_cache_stats(const struct grammar_cache *c, uint64_t *hits, uint64_t *misses);

#endif
