/*
 * sampler.h - turns one row of logits into one token, deterministically.
 *
 * One call of sampler_sample picks the next token of one sequence from the
 * model's logits for that position. The pipeline, in this order:
 *
 *   raw logits x (const, n_vocab floats; non-finite entries are never chosen)
 *     |  1. logit bias       z = x + bias                  (each listed token)
 *     |  2. repetition       z > 0 ? z / r : z * r         (each distinct token in
 *     |                                                     the last repetition_window
 *     |                                                     tokens of prompt+generated)
 *     |  3. presence/freq.   z -= presence + frequency * c (each token generated
 *     |                                                     c > 0 times so far)
 *     v
 *   processed logits z  (clamped to +-FLT_MAX, so they stay finite)
 *     |-- temperature == 0: greedy = argmax z, the lowest id wins ties.  Done.
 *     |  4. temperature      t_i = (z_i - max z) * (1/T),  w_i = exp(t_i)  (float)
 *     |  5. top-k            keep the first k in rank order
 *     |  6. top-p            keep the shortest rank prefix of what is left whose
 *     |                      weight reaches top_p of its total
 *     |  7. min-p            keep those with w_i >= min_p (w of the top token is 1,
 *     |                      so this is "p_i >= min_p * p_max")
 *     |  8. renormalize and draw with u = U(seed, position)
 *     v
 *   token
 *
 * Exact definitions. Every result is a pure function of (params, logits,
 * prompt, generated, position): no hidden state, no dependence on the batch,
 * the thread, or how many calls came before. The rules that make it exact:
 *
 *   - Rank order: z descending, then token id ascending. Because exp is
 *     strictly increasing this is the exact probability order; using z rather
 *     than the rounded weights means two different logits never tie.
 *   - w_i is computed in float by a self-contained exp (no libm), so the bits
 *     do not depend on the C library or the ISA; w of the top token is exactly
 *     1 and weights below e^-87 are 0.
 *   - A total (the top-p normalizer over the kept set, and the renormalizing
 *     total of the final set F) is a double sum over the set in ascending
 *     token id order, kept in 8 interleaved lanes (lane = id mod 8, added at
 *     the end as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))) so that it vectorizes.
 *   - A cumulative sum walks rank order in double. top-p keeps the shortest
 *     prefix whose cumulative reaches top_p * total (all of it if rounding
 *     never gets there). The draw walks F in rank order and takes the first
 *     token whose cumulative exceeds u * total (if rounding leaves none, the
 *     last token of F with w > 0).
 *   - u = U(seed, position) is counter based: a splitmix64 hash of the seed
 *     and the token's absolute position, cut to a 53-bit double in [0, 1). The
 *     same request gives the same tokens whatever else is in the batch, and a
 *     request migrated to another machine, or re-verified by speculative
 *     decoding, draws the same token at the same position.
 *
 * The implementation never fully sorts the vocabulary unless the definition
 * needs every token: top-k is a heap selection; without top-k, tokens are
 * bucketed by weight and only the buckets that the top-p cut or the draw reach
 * are sorted (each bucket is a rank-order prefix, so results equal the
 * full-sort definition bit for bit). Greedy is one pass (two when a penalty
 * or bias touches the raw best token). The loops over the vocabulary are
 * vectorized, with AVX-512 and AVX2 clones picked at load time that give the
 * same bits.
 * exp and log are computed here from IEEE basic operations, not libm, and
 * the build forbids FMA contraction, so tokens and logprobs come out the same
 * on every machine and compiler.
 *
 * Logprobs (when params.logprobs): the log-softmax of the *raw* logits, before
 * bias, penalties and temperature. That is what OpenAI-compatible servers
 * report by default, it is what the model believes, and it does not change
 * with sampling knobs. log p_i = (x_i - max x) - log(sum_j exp(x_j - max x)),
 * the sum one running double sum in token id order, exp as above. Reported:
 * the chosen token's logprob and the n_logprobs best alternatives (raw rank
 * order: logprob descending, then id).
 *
 * Token masks (params.allowed, e.g. from a grammar): tokens outside the mask
 * get the raw logit -inf before step 1, so they are never chosen, whatever
 * their bias, and - deliberately - logprobs are those of the *masked*
 * distribution: the log-softmax over the allowed tokens only. That is the
 * distribution the token was actually drawn from, so a chosen token's
 * logprob is never below what its probability of being picked implies, and
 * alternatives never list tokens the grammar forbids. A mask with no finite
 * allowed logit is ERR_INVALID like any all-non-finite row.
 *
 * Memory: a struct sampler holds scratch sized for n_vocab (about 54 bytes per
 * token, ~8 MB at 152k) allocated once by sampler_new; sampling never
 * allocates. Parameters and token arrays are caller-owned and only read during
 * the call.
 *
 * Thread safety: a sampler is used by one thread at a time (the engine keeps
 * one per compute thread); different samplers are independent, and which
 * one samples a row changes no bit. sampler_params_* and sampler_uniform are
 * pure.
 */
#ifndef INFERD_ENGINE_SAMPLER_H
#define INFERD_ENGINE_SAMPLER_H

#include "base/err.h"

#include <stdbool.h>
#include <stdint.h>

#define SAMPLER_MAX_LOGPROBS 20 /* most alternatives a result can carry */

/* One logit bias entry. */
struct sampler_bias {
    int32_t token; /* token id in [0, n_vocab) */
    float bias;    /* added to the raw logit; finite. -100 effectively bans, +100 forces */
};

/* Sampling parameters of one request. Caller-owned; sampler_params_default
 * gives "plain sampling at temperature 1, every filter and penalty off". */
struct sampler_params {
    float temperature;         /* finite, >= 0; 0 = greedy (filters then have no effect) */
    int32_t top_k;             /* >= 0; keep the k best tokens; 0 (or >= n_vocab) = off */
    float top_p;               /* (0, 1]; nucleus mass to keep; 1 = off */
    float min_p;               /* [0, 1]; drop tokens below min_p * max prob; 0 = off */
    float repetition_penalty;  /* finite, > 0; HF/llama.cpp semantics; 1 = off */
    int32_t repetition_window; /* >= 0; last tokens of prompt+generated it sees; 0 = all
                                  (each call then reads the whole prompt) */
    float presence_penalty;    /* finite; minus once for each token generated so far; 0 = off */
    float frequency_penalty;   /* finite; minus per time it was generated so far; 0 = off */
    const struct sampler_bias *logit_bias; /* (n_logit_bias) caller-owned; repeats add up */
    int32_t n_logit_bias;                  /* >= 0; entries in logit_bias */
    uint64_t seed;      /* keys the draws, with the position; n > 1 choices need distinct seeds */
    bool logprobs;      /* compute result.logprob (costs a vocab pass) */
    int32_t n_logprobs; /* 0..SAMPLER_MAX_LOGPROBS alternatives; > 0 needs logprobs */
    const uint64_t *allowed; /* ((n_vocab + 63) / 64) bitmap of tokens that may be chosen
                                (bit i of word i / 64), e.g. a grammar mask; NULL = all */
};

/* A token with its raw logprob. */
struct sampler_logprob {
    int32_t token; /* token id */
    float logprob; /* log-softmax of the raw logits, <= 0 */
};

/* What one sampler_sample call produced. Caller-owned. */
struct sampler_result {
    int32_t token;                                    /* the chosen token id */
    float logprob;                                    /* its raw logprob; 0 unless logprobs */
    int n_top;                                        /* filled entries of top */
    struct sampler_logprob top[SAMPLER_MAX_LOGPROBS]; /* (n_top) best raw alternatives,
                                                         logprob descending then id */
};

/* Fills p with the defaults: temperature 1, top_k 0, top_p 1, min_p 0,
 * repetition_penalty 1, window 0, presence/frequency 0, no bias, seed 0, no
 * logprobs. */
void sampler_params_default(struct sampler_params *p);

/* Checks every field of p against a vocabulary of n_vocab tokens. Returns 0,
 * or ERR_INVALID with msg (if non-NULL) naming the first bad field, e.g.
 * "top_p must be in (0, 1] (got 1.5)" or "logit_bias[2].token: 200000 is
 * outside the vocabulary [0, 151936)". For the API layer to call before a
 * request is admitted; sampler_sample runs it again. */
int sampler_params_validate(const struct sampler_params *p, int n_vocab, struct err_msg *msg);

/* A sampler with scratch for n_vocab tokens (1 <= n_vocab <= 2^30). Returns
 * NULL if n_vocab is out of range; aborts if memory runs out (process
 * lifetime object, allocated at engine start). Free with sampler_free. */
struct sampler *sampler_new(int n_vocab);
void sampler_free(struct sampler *s);

/*
 * Samples the token at absolute sequence position `position` (0-based; the
 * first generated token of a prompt of n tokens is at position n).
 *
 *   logits      (n_vocab) raw logits for this position; only read
 *   prompt      (n_prompt) token ids; read only when repetition_penalty != 1
 *   generated   (n_generated) tokens generated so far; read when any penalty
 *               is on. NULL is fine for an array of length 0.
 *
 * Token ids that the call reads must be in [0, n_vocab). Returns 0 and fills
 * *out, or ERR_INVALID - bad params (see sampler_params_validate for the
 * reason), a negative count or position, a NULL array with a non-zero length,
 * a token id out of range, or no finite logit at all - and then *out is
 * untouched and nothing else changes.
 */
int sampler_sample(struct sampler *s, const struct sampler_params *p, const float *logits,
                   const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                   int64_t position, struct sampler_result *out);

/* The uniform double in [0, 1) that sampling at (seed, position) draws with:
 * 53 random bits, a pure function of its arguments. Exposed for tests and for
 * code that must draw the same number (speculative verification). */
double sampler_uniform(uint64_t seed, int64_t position);

#endif
