/*
 * bench_workload.h - what `inferd bench` sends: a list of requests, each a
 * prompt described by content-addressed blocks, an output length, and when it
 * may be sent.
 *
 * Every workload, synthetic or replayed, is reduced to the same form:
 *
 *   item i:  blocks = [h0, h1, h2]  n_input = 2*B + r  (B = block_tokens)
 *            +-------- B --------+-------- B --------+--- r ---+
 *            | tokens(h0)        | tokens(h1)        | tokens(h2)[0..r) |
 *
 * The tokens of a block are a pure function of (seed, block id, position), so
 * the same id always becomes the same token block: two requests that share a
 * leading run of ids share exactly that prefix of prompt tokens, which is how
 * trace prefix reuse (Mooncake / agentic hash_ids) reaches the server intact.
 * A trailing partial block is the prefix of the full block of the same id.
 *
 * When an item may be sent:
 *   - a root item (after < 0) becomes due at t_s seconds after the run starts
 *     (from the trace, or from the arrival process, see bench_workload_arrivals);
 *   - a follow-up item (after >= 0: the next turn of a chat or an agent
 *     session) becomes due think_s seconds after item `after` finished.
 * A concurrency cap may then hold a due item in a client-side queue; that
 * wait is measured separately from the server's latency.
 *
 * Lifetime: a workload owns its items and their block arrays (caller-owned
 * struct, bench_workload_release frees). Single-threaded.
 */
#ifndef INFERD_BENCH_WORKLOAD_H
#define INFERD_BENCH_WORKLOAD_H

#include "base/buf.h"
#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

/* A length distribution: "fixed:N", "uniform:LO:HI", "normal:MEAN:SD",
 * "lognormal:MEAN:SD" (mean and sd of the lengths themselves, not of their
 * logarithm). Samples are rounded and clamped to [1, max]. */
enum bench_dist_kind {
    BENCH_DIST_FIXED,
    BENCH_DIST_UNIFORM,
    BENCH_DIST_NORMAL,
    BENCH_DIST_LOGNORMAL,
};

struct bench_dist {
    enum bench_dist_kind kind; /* shape */
    double a;                  /* fixed value, uniform low, or mean */
    double b;                  /* uniform high, or standard deviation */
    int32_t max;               /* clamp: samples never exceed this */
};

/* Parses spec into d; ERR_INVALID with a message naming `what` on error. */
int bench_dist_parse(const char *what, const char *spec, struct bench_dist *d, struct err_msg *m);
/* One sample in [1, d->max], advancing *rng. */
int32_t bench_dist_sample(const struct bench_dist *d, uint64_t *rng);
/* Standard normal and gamma(shape, scale=1) variates from splitmix64. */
double bench_rand_normal(uint64_t *rng);
double bench_rand_gamma(double shape, uint64_t *rng);
/* Uniform in [0, 1). */
double bench_rand_unit(uint64_t *rng);

struct bench_item {
    double t_s;       /* root items: due time in seconds from run start */
    int32_t n_input;  /* prompt tokens */
    int32_t n_output; /* tokens asked for (max_tokens) */
    uint64_t *blocks; /* (n_blocks) block ids; n_blocks = ceil(n_input / block_tokens) */
    int32_t n_blocks; /* entries in blocks */
    int32_t after;    /* index of the item that must finish first, or -1 */
    double think_s;   /* delay after `after` finished before this item is due */
    int32_t session;  /* session (chat / agent / trace file) number, -1 none */
    int32_t src_line; /* trace line (or request index) it came from; 0 synthetic */
    /* chat sessions (synthetic multiturn / agentic): how the prompt splits
     * into messages when sent as a conversation (bench_client.h) */
    int32_t n_sys_blocks; /* leading blocks forming the system prompt (shared prefix) */
    int32_t user_block;   /* first block of this turn's new user input */
    int32_t n_user;       /* tokens of this turn's new user input (0: not a chat turn) */
};

struct bench_workload {
    struct bench_item *items; /* (n) in creation order */
    int32_t n;                /* items used */
    int32_t cap;              /* items allocated */
    int32_t block_tokens;     /* tokens per block (512 Mooncake, 64 agentic, ...) */
    uint64_t seed;            /* token content seed: tokens = f(seed, block id, pos) */
    int32_t vocab_lo;         /* token ids are drawn from [vocab_lo, vocab_hi) */
    int32_t vocab_hi;         /* exclusive upper bound */
};

void bench_workload_init(struct bench_workload *w, int32_t block_tokens);
void bench_workload_release(struct bench_workload *w);
/* Appends an item (blocks copied); returns its index. */
int32_t bench_workload_add(struct bench_workload *w, const struct bench_item *it);

/* Token at position pos (0-based) inside block `id`: deterministic. */
int32_t bench_block_token(const struct bench_workload *w, uint64_t id, int32_t pos);
/* Appends the prompt token ids of item i to out. */
void bench_item_tokens(const struct bench_workload *w, int32_t i, struct i32vec *out);
/* Appends the prompt of item i as text: one word per token, see docs/bench.md
 * ("--text"): the word list is chosen so each word is one token in common BPE
 * vocabularies, hence lengths and block boundaries are approximate. */
void bench_item_text(const struct bench_workload *w, int32_t i, struct buf *out);
/* Appends n_tokens tokens of item i as text, starting at block from_block
 * (the words of bench_item_text). */
void bench_item_range_text(const struct bench_workload *w, int32_t i, int32_t from_block,
                           int32_t n_tokens, struct buf *out);
/* Words of text mode: bench_token_word(t) is word t mod BENCH_N_WORDS. */
#define BENCH_N_WORDS 74
/* The JSON-escaped-safe word of a token id (text mode). */
const char *bench_token_word(int32_t tok);

/* Ideal prefix-cache hit ratio (infinite cache, requests in due order):
 * for each item the longest leading run of blocks already seen counts as
 * cached (a block's cached length is capped by the longest length it was
 * seen with). Returns cached tokens / input tokens, 0 when empty. Per-item
 * cached counts are written to ideal_cached (n entries) when non-NULL. */
double bench_workload_ideal_hit(const struct bench_workload *w, int32_t *ideal_cached);

/* Synthetic workloads. All take the parameters below; the shape decides
 * which are used:
 *   plain      : n_requests independent prompts of len_in / len_out;
 *   prefix     : n_groups system prompts of prefix_tokens, each shared by
 *                users_per_group users; each request = group prefix + own
 *                len_in tokens (n_requests spread round-robin over users);
 *   multiturn  : n_sessions chats of n_turns; turn k's prompt is turn k-1's
 *                prompt + an answer of turn k-1's output length + len_in new
 *                tokens; think_s between turns (sent as a conversation, the
 *                answer is the server's real one: bench_client.h);
 *   agentic    : like multiturn, but each turn adds a tool result of len_in
 *                tokens and the delay between turns is drawn from think. */
enum bench_shape {
    BENCH_SHAPE_PLAIN,
    BENCH_SHAPE_PREFIX,
    BENCH_SHAPE_MULTITURN,
    BENCH_SHAPE_AGENTIC,
};

struct bench_synth {
    enum bench_shape shape;    /* see above */
    int32_t n_requests;        /* plain / prefix: request count */
    struct bench_dist len_in;  /* new input tokens per request or turn */
    struct bench_dist len_out; /* output tokens per request or turn */
    int32_t n_groups;          /* prefix: distinct system prompts */
    int32_t prefix_tokens;     /* prefix: system prompt length */
    int32_t users_per_group;   /* prefix: users sharing one system prompt */
    int32_t n_sessions;        /* multiturn / agentic: sessions */
    int32_t n_turns;           /* multiturn / agentic: turns per session */
    struct bench_dist think;   /* multiturn / agentic: think time in milliseconds */
    uint64_t seed;             /* length draws */
};

int bench_workload_synth(struct bench_workload *w, const struct bench_synth *s, struct err_msg *m);

/* Arrival process for root items. */
enum bench_arrival {
    BENCH_ARRIVAL_TRACE,   /* keep t_s (trace timestamps), divided by time_scale */
    BENCH_ARRIVAL_POISSON, /* exponential gaps at `rate` per second */
    BENCH_ARRIVAL_GAMMA,   /* gamma gaps, mean 1/rate, shape = burstiness */
    BENCH_ARRIVAL_CLOSED,  /* all due at 0; the concurrency cap paces them */
};

struct bench_arrivals {
    enum bench_arrival kind; /* process */
    double rate;             /* requests per second (poisson, gamma) */
    double burstiness;       /* gamma shape: 1 = Poisson, < 1 burstier, > 1 smoother */
    double time_scale;       /* trace: replay speed factor (2 = twice as fast) */
    uint64_t seed;           /* gap draws */
};

/* Rewrites t_s of root items (sessions: the first item of each session) in
 * item order; follow-ups keep their dependency. Also divides think_s by
 * time_scale in trace mode. */
void bench_workload_arrivals(struct bench_workload *w, const struct bench_arrivals *a);

/* Keeps the first n items (n >= w->n: no-op). A follow-up always comes after
 * the item it depends on, so no kept item depends on a dropped one. */
void bench_workload_truncate(struct bench_workload *w, int32_t n);

#endif
