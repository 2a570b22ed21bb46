/*
 * sampler.c - see sampler.h for the definitions this file implements.
 *
 * Shape of one call (V = n_vocab):
 *
 *   raw_scan        the best raw tokens (the greedy answer when nothing is
 *                   penalized; the logprob alternatives): one vectorized
 *                   pass takes the best logit of each block of 64 ids
 *                   (block_key; the max alone when that is all a call
 *                   needs), and only blocks that beat the worst token kept
 *                   so far are walked id by id
 *   build_overrides bias and penalties touch few tokens, so they are kept
 *                   sparse: ov[] holds (token, processed z), slot[token] finds
 *                   it. The logits are never copied.
 *   greedy          best untouched raw token vs. the overrides; a second pass
 *                   only if the raw best itself was touched
 *   top-k > 0       heap of the k best (z, id) keys in one pass, sort the k
 *   top-k off       "lazy" path: one vectorized pass computes every weight
 *                   and its bucket floor(-8 t), a second counts tokens per
 *                   bucket (a block all in the last bucket by one compare
 *                   per token); then buckets are gathered and sorted, in order,
 *                   only as deep as the top-p cut or the draw needs. The
 *                   bucket is monotone in z, so the tokens of buckets 0..b are
 *                   exactly a prefix of rank order:
 *
 *       bucket:  0        1        2     ...   127 (all of t < -15.9)
 *       rank:   [sorted ][sorted  ][...]        never sorted unless reached
 *
 *                   A gather skips whole blocks of 64 ids whose best bucket
 *                   is past the band, which for a peaked distribution is
 *                   nearly all of them. A block whose best logit lies more
 *                   than 87 below the top after temperature (t < -87, as
 *                   under a +100 bias or a low temperature) weighs +0
 *                   throughout (block_zero): its exps are not computed and
 *                   the totals skip it, since adding +0 changes no bit.
 *   logprobs        one more pass (exp and a running sum over the raw
 *                   logits); the exp part is skipped when the lazy path's
 *                   weights are those very terms (T == 1, nothing touched)
 *   sparse mask     a token mask (params.allowed) that allows at most
 *                   V / SPARSE_DIV tokens - most grammar positions - is
 *                   listed once (ids ascending) and every step above runs
 *                   over that list only: the max and raw scan over the
 *                   listed ids, then a full sort of the listed candidates
 *                   (the top-k path's code with k = all of them), logprobs
 *                   summed over them. Disallowed tokens weigh +0 and have
 *                   no rank, so each total (a sum over ids in id order,
 *                   +0 terms left out) and each walk is the same as the
 *                   dense path's: the choice of path changes no bit.
 *
 * Which path ranks the tokens, and how far, never changes a result: every
 * total is defined over token ids (sum_lanes), and a streaming pass or a sort
 * of the few ids involved give the same double; every cumulative walks the
 * same rank order. The tests check the two paths against each other.
 *
 * Scratch invariants between calls: slot[] is all -1 and n_ov is 0;
 * masked[] is all -inf unless masked_dirty (a dense mask filled it).
 */
#include "engine/sampler.h"

#include "base/check.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define N_BUCKETS   128  /* weight buckets for the lazy path */
#define BUCKET_RATE 8.0f /* buckets per unit of -t (t = log weight) */
#define BUCKET_NONE 255  /* bucket of a token that is not a candidate */
#define SMALL_SORT  48   /* insertion sort at or below this many keys */
#define MAX_VOCAB   (1 << 30)
#define BLOCK       64 /* ids per block_min entry */
#define SUM_LANES   8  /* interleaved accumulators of a total (see sum_lanes) */
#define SPARSE_DIV  16 /* a mask allowing at most V / SPARSE_DIV tokens is walked as a list */

/* A token whose logit bias or penalties changed. */
struct override {
    int32_t token;    /* token id */
    float z;          /* processed logit so far */
    int32_t count;    /* occurrences in generated (presence/frequency) */
    int32_t rep_done; /* repetition penalty already applied */
};

struct sampler {
    int n_vocab;                /* V */
    int32_t *slot;              /* (V) index into ov, or -1 when untouched */
    struct override *ov;        /* (V) touched tokens in first-touch order */
    int n_ov;                   /* live entries of ov during a call */
    float *w;                   /* (V) weight per token id; valid for this call's ranked tokens */
    uint8_t *bucket;            /* (V) weight bucket per token id, lazy path only */
    uint8_t *block_min;         /* (ceil(V / BLOCK)) least bucket in each block of BLOCK ids */
    int32_t *block_key;         /* (ceil(V / BLOCK)) best raw order_key in each block, valid when
                                   block_key_ok */
    bool block_key_ok;          /* block_key holds this call's logits */
    uint8_t *block_zero;        /* (ceil(V / BLOCK)) lazy path: every weight in the block is +0 */
    int32_t *rank;              /* (V) token ids in rank order; first n_ranked valid */
    int n_ranked;               /* ranked prefix length */
    int next_bucket;            /* lazy path: first bucket not yet gathered into rank */
    int n_extends;              /* lazy path: extend() calls so far in this call */
    int32_t *ids;               /* (V) gather scratch */
    uint64_t *keys;             /* (V) sort keys / top-k heap */
    uint64_t *keys_tmp;         /* (V) radix sort ping-pong buffer */
    int32_t hist_n[256];        /* lazy path: tokens per bucket (BUCKET_NONE: non-candidates) */
    double bucket_w[N_BUCKETS]; /* typical weight in each bucket, to estimate masses */
    float *masked;              /* (V) logits with disallowed tokens at -inf (params.allowed) */
    bool masked_dirty;          /* masked[] holds a dense fill, not all -inf */
    int32_t *allow;             /* (V) allowed ids ascending, first n_allow valid (sparse mask) */
};

/* Per-call values shared by the steps below. */
struct call {
    const float *x;       /* (V) raw logits */
    const int32_t *allow; /* (n_allow) the only ids that can be candidates; NULL = all V */
    int n_allow;          /* listed ids when allow */
    float m;              /* max processed logit */
    float inv_temp;       /* 1 / temperature, in float */
    float min_p;          /* min-p threshold on w */
};

/* ---- small numeric helpers ----
 *
 * The per-vocabulary loops must stay branch-free to vectorize. GCC turns a
 * float select such as `x < -87 ? -87 : x` into a branch (jump threading: on
 * one side the rest folds to a constant) and then, because float arithmetic
 * may trap, refuses to vectorize the loop. So the selects in those loops are
 * done on the bits, as integer min/and, which it leaves alone. */

static inline uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}

static inline float bitsf(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

static inline bool is_finite(float x)
{
    return (fbits(x) & 0x7f800000u) != 0x7f800000u;
}

/* keep ? x : +0.0f, as a bit mask. */
static inline float keep_or_zero(bool keep, float x)
{
    return bitsf(fbits(x) & (0u - (uint32_t)keep));
}

static inline float clampf(float x)
{
    return x > FLT_MAX ? FLT_MAX : (x < -FLT_MAX ? -FLT_MAX : x);
}

/* The vocabulary-wide loops are IEEE basic operations only (no FMA: the
 * build has -ffp-contract=off), so an AVX-512 clone (x86-64-v4: F, BW, DQ,
 * VL, for the byte loops) and an AVX2 clone compute exactly the bits of the
 * baseline SSE2 code, 16 or 8 lanes at a time instead of 4. The dynamic
 * loader picks the clone once, from the CPU (ifunc). */
#ifndef VOCAB_LOOP /* -DVOCAB_LOOP= builds the baseline code only */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VOCAB_LOOP __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#endif
#ifndef VOCAB_LOOP
#define VOCAB_LOOP
#endif

#define BITS_M87     0xc2ae0000u /* fbits(-87.0f) */
#define BITS_NEG0    0x80000000u /* fbits(-0.0f) */
#define BITS_NEG_INF 0xff800000u /* fbits(-INFINITY) */

/*
 * e^x for x <= 0, in float, from IEEE basic operations only (no libm, no FMA:
 * the build has -ffp-contract=off), so scalar and vectorized loops and every
 * machine give the same bits. x = n ln2 + r with |r| <= ln2/2 (Cody-Waite
 * split of ln2), e^r by its degree-7 Taylor polynomial (truncation < 1e-8),
 * times 2^n built in the exponent field. exp_neg(0) == 1 exactly; x < -87
 * (e^x < 1.7e-38) and -inf give 0; x >= 0 gives 1. NaN must not be passed.
 * For x <= -0 the bits grow with |x|, so the clamps are unsigned integer
 * compares.
 */
static inline float exp_neg(float x)
{
    uint32_t u = fbits(x);
    u = (int32_t)u >= 0 ? BITS_NEG0 : u;       /* x >= +0 -> -0 */
    uint32_t uc = u < BITS_M87 ? u : BITS_M87; /* max(x, -87) */
    float xc = bitsf(uc);
    float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to integer */
    float r = xc - n * 0.693145751953125f;
    r = r - n * 1.42860677e-6f;
    float p = 1.98412698e-4f;
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23; /* n in [-126, 0] */
    float y = p * bitsf((uint32_t)e);
    return keep_or_zero(u <= BITS_M87, y);
}

/* Sort key of a logit: ascending key = descending z; -0 and +0 are equal. */
static inline uint32_t desc_key(float z)
{
    uint32_t u;
    if (z == 0.0f) z = 0.0f;
    memcpy(&u, &z, sizeof(u));
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with z */
    return ~u;
}

/* (z desc, id asc) as one integer: ascending = rank order. */
static inline uint64_t rank_key(float z, int32_t id)
{
    return ((uint64_t)desc_key(z) << 32) | (uint32_t)id;
}

static inline float key_z(uint64_t key)
{
    uint32_t u = ~(uint32_t)(key >> 32);
    u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
    float z;
    memcpy(&z, &u, sizeof(z));
    return z;
}

/* Sorts a[0..n) ascending and returns the buffer holding the result (a or
 * tmp). Large inputs use a stable LSD radix sort over bytes [lo, hi) only, so
 * callers pass a range that leaves out bytes already in order (e.g. the id
 * half of rank keys gathered in id order); small ones an insertion sort on
 * the whole key, which agrees with it under the same precondition. */
static uint64_t *sort_keys(uint64_t *a, uint64_t *tmp, int n, int lo, int hi)
{
    if (n <= SMALL_SORT) {
        for (int i = 1; i < n; i++) {
            uint64_t k = a[i];
            int j = i;
            while (j > 0 && a[j - 1] > k) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = k;
        }
        return a;
    }
    uint32_t cnt[8][256];
    memset(cnt, 0, sizeof(cnt));
    for (int i = 0; i < n; i++)
        for (int b = lo; b < hi; b++)
            cnt[b][(a[i] >> (8 * b)) & 255]++;
    for (int b = lo; b < hi; b++) {
        int shift = 8 * b;
        if (cnt[b][(a[0] >> shift) & 255] == (uint32_t)n) continue; /* one digit: no-op */
        uint32_t off[256], sum = 0;
        for (int d = 0; d < 256; d++) {
            off[d] = sum;
            sum += cnt[b][d];
        }
        for (int i = 0; i < n; i++)
            tmp[off[(a[i] >> shift) & 255]++] = a[i];
        uint64_t *t = a;
        a = tmp;
        tmp = t;
    }
    return a;
}

static inline float zval(const struct sampler *s, const float *x, int32_t id)
{
    int32_t k = s->slot[id];
    return k >= 0 ? s->ov[k].z : x[id];
}

/* ---- parameters ---- */

void sampler_params_default(struct sampler_params *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->repetition_window = 0;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->logit_bias = NULL;
    p->n_logit_bias = 0;
    p->seed = 0;
    p->logprobs = false;
    p->n_logprobs = 0;
    p->allowed = NULL;
}

int sampler_params_validate(const struct sampler_params *p, int n_vocab, struct err_msg *msg)
{
    if (!p) return err_set(msg, ERR_INVALID, "sampling parameters missing");
    if (!(is_finite(p->temperature) && p->temperature >= 0.0f))
        return err_set(msg, ERR_INVALID, "temperature must be a finite number >= 0 (got %g)",
                       (double)p->temperature);
    if (p->top_k < 0)
        return err_set(msg, ERR_INVALID, "top_k must be >= 0 (got %d)", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return err_set(msg, ERR_INVALID, "top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return err_set(msg, ERR_INVALID, "min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(is_finite(p->repetition_penalty) && p->repetition_penalty > 0.0f))
        return err_set(msg, ERR_INVALID, "repetition_penalty must be a finite number > 0 (got %g)",
                       (double)p->repetition_penalty);
    if (p->repetition_window < 0)
        return err_set(msg, ERR_INVALID, "repetition_window must be >= 0 (got %d)",
                       (int)p->repetition_window);
    if (!is_finite(p->presence_penalty))
        return err_set(msg, ERR_INVALID, "presence_penalty must be finite (got %g)",
                       (double)p->presence_penalty);
    if (!is_finite(p->frequency_penalty))
        return err_set(msg, ERR_INVALID, "frequency_penalty must be finite (got %g)",
                       (double)p->frequency_penalty);
    if (p->n_logit_bias < 0)
        return err_set(msg, ERR_INVALID, "n_logit_bias must be >= 0 (got %d)",
                       (int)p->n_logit_bias);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return err_set(msg, ERR_INVALID, "logit_bias is NULL but n_logit_bias is %d",
                       (int)p->n_logit_bias);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const struct sampler_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return err_set(msg, ERR_INVALID,
                           "logit_bias[%d].token: %d is outside the vocabulary [0, %d)", i,
                           (int)b->token, n_vocab);
        if (!is_finite(b->bias))
            return err_set(msg, ERR_INVALID, "logit_bias[%d].bias must be finite (got %g)", i,
                           (double)b->bias);
    }
    if (p->n_logprobs < 0 || p->n_logprobs > SAMPLER_MAX_LOGPROBS)
        return err_set(msg, ERR_INVALID, "n_logprobs must be in [0, %d] (got %d)",
                       SAMPLER_MAX_LOGPROBS, (int)p->n_logprobs);
    if (p->n_logprobs > 0 && !p->logprobs)
        return err_set(msg, ERR_INVALID, "n_logprobs is %d but logprobs is off",
                       (int)p->n_logprobs);
    return 0;
}

/* ---- object ---- */

struct sampler *sampler_new(int n_vocab)
{
    if (n_vocab < 1 || n_vocab > MAX_VOCAB) return NULL;
    struct sampler *s = xcalloc(1, sizeof(*s));
    size_t v = (size_t)n_vocab;
    s->n_vocab = n_vocab;
    /* Middle of each bucket's weight range; the last one is open-ended. */
    for (int b = 0; b < N_BUCKETS; b++)
        s->bucket_w[b] = exp(-((double)b + 0.5) / BUCKET_RATE);
    s->bucket_w[N_BUCKETS - 1] = exp(-((double)N_BUCKETS + 2.0) / BUCKET_RATE);
    s->slot = xmalloc(v * sizeof(*s->slot));
    for (size_t i = 0; i < v; i++)
        s->slot[i] = -1;
    s->ov = xmalloc(v * sizeof(*s->ov));
    s->w = xmalloc(v * sizeof(*s->w));
    s->bucket = xmalloc(v * sizeof(*s->bucket));
    s->block_min = xmalloc((v + BLOCK - 1) / BLOCK);
    s->block_key = xmalloc((v + BLOCK - 1) / BLOCK * sizeof(*s->block_key));
    s->block_zero = xmalloc((v + BLOCK - 1) / BLOCK);
    s->rank = xmalloc(v * sizeof(*s->rank));
    s->ids = xmalloc(v * sizeof(*s->ids));
    s->keys = xmalloc(v * sizeof(*s->keys));
    s->keys_tmp = xmalloc(v * sizeof(*s->keys_tmp));
    s->masked = xmalloc(v * sizeof(*s->masked));
    for (size_t i = 0; i < v; i++)
        s->masked[i] = -INFINITY;
    s->allow = xmalloc(v * sizeof(*s->allow));
    return s;
}

void sampler_free(struct sampler *s)
{
    if (!s) return;
    free(s->slot);
    free(s->ov);
    free(s->w);
    free(s->bucket);
    free(s->block_min);
    free(s->block_key);
    free(s->block_zero);
    free(s->rank);
    free(s->ids);
    free(s->keys);
    free(s->keys_tmp);
    free(s->masked);
    free(s->allow);
    free(s);
}

/* ---- randomness ---- */

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Output number `position` of the splitmix64 stream whose state starts at
 * mix64(seed): no state to carry, so any position can be drawn directly. */
double sampler_uniform(uint64_t seed, int64_t position)
{
    uint64_t state = mix64(seed) + ((uint64_t)position + 1) * 0x9e3779b97f4a7c15ull;
    return (double)(mix64(state) >> 11) * 0x1.0p-53;
}

/* ---- raw scan: best raw tokens ---- */

/* The best `cap` finite raw logits in rank order (z desc, id asc). */
struct top_raw {
    int n;                            /* filled */
    int cap;                          /* wanted, 1..SAMPLER_MAX_LOGPROBS */
    float z[SAMPLER_MAX_LOGPROBS];    /* (n) logits, descending */
    int32_t id[SAMPLER_MAX_LOGPROBS]; /* (n) token ids */
};

static void top_raw_insert(struct top_raw *t, float v, int32_t id)
{
    /* Ids arrive ascending, so v goes after every kept token with an equal z. */
    int pos = t->n < t->cap ? t->n : t->cap - 1;
    while (pos > 0 && t->z[pos - 1] < v) {
        t->z[pos] = t->z[pos - 1];
        t->id[pos] = t->id[pos - 1];
        pos--;
    }
    t->z[pos] = v;
    t->id[pos] = id;
    if (t->n < t->cap) t->n++;
}

/* The float order as integers (sign-magnitude to two's complement): x < y
 * gives key(x) < key(y); the one difference is that +0 ranks above -0. */
static inline int32_t order_key(float v)
{
    uint32_t u = fbits(v);
    return (int32_t)(u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu));
}

/* out[j] = the largest order_key of a finite logit among ids [j * BLOCK,
 * (j + 1) * BLOCK), INT32_MIN when the block has none. */
VOCAB_LOOP static void block_max_loop(const float *restrict x, int32_t *restrict out, int n)
{
    for (int j = 0; j * BLOCK < n; j++) {
        int end = (j + 1) * BLOCK < n ? (j + 1) * BLOCK : n;
        int32_t best = INT32_MIN;
        for (int i = j * BLOCK; i < end; i++) {
            uint32_t u = fbits(x[i]);
            uint32_t fin = 0u - (uint32_t)is_finite(x[i]); /* all ones or zero */
            uint32_t key = u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu);
            int32_t k = (int32_t)((key & fin) | (0x80000000u & ~fin));
            best = k > best ? k : best;
        }
        out[j] = best;
    }
}

/* The ids are visited in ascending order, as the definition reads; a block
 * whose best key is not above the worst kept token's cannot hold a finite
 * logit that beats it (the keys order like the floats, and the one place
 * they differ, +0 over -0, only lets a block through), so only the rare
 * blocks with a better token are walked one id at a time. */
static void raw_scan(struct sampler *s, const float *x, int n_vocab, struct top_raw *t)
{
    int i = 0;
    t->n = 0;
    for (; i < n_vocab && t->n < t->cap; i++)
        if (is_finite(x[i])) top_raw_insert(t, x[i], i);
    if (i >= n_vocab) return;
    float thr = t->z[t->cap - 1]; /* the worst kept */
    int32_t thr_key = order_key(thr);
    block_max_loop(x, s->block_key, n_vocab);
    s->block_key_ok = true;
    for (int j = i / BLOCK; j * BLOCK < n_vocab; j++) {
        if (s->block_key[j] <= thr_key) continue;
        int end = (j + 1) * BLOCK < n_vocab ? (j + 1) * BLOCK : n_vocab;
        for (int k = MAX(i, j * BLOCK); k < end; k++) {
            float v = x[k];
            /* A tie with the worst kept loses (higher id): strict >. */
            if (v > thr && is_finite(v)) {
                top_raw_insert(t, v, k);
                thr = t->z[t->cap - 1];
                thr_key = order_key(thr);
            }
        }
    }
}

/* raw_scan over the listed ids only (ascending); the others must be -inf. */
static void raw_scan_ids(const float *x, const int32_t *ids, int n, struct top_raw *t)
{
    int j = 0;
    t->n = 0;
    for (; j < n && t->n < t->cap; j++)
        if (is_finite(x[ids[j]])) top_raw_insert(t, x[ids[j]], ids[j]);
    float thr = t->n == t->cap ? t->z[t->cap - 1] : INFINITY;
    for (; j < n; j++) {
        float v = x[ids[j]];
        if (v > thr) {
            if (!is_finite(v)) continue;
            top_raw_insert(t, v, ids[j]);
            thr = t->z[t->cap - 1];
        }
    }
}

/* raw_max over the listed ids: the same integer keys, so the same bits
 * (+0 wins over -0 here too). */
static float ids_max(const float *x, const int32_t *ids, int n)
{
    int32_t best = INT32_MIN;
    for (int j = 0; j < n; j++) {
        float v = x[ids[j]];
        if (!is_finite(v)) continue;
        uint32_t u = fbits(v);
        int32_t k = (int32_t)(u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu));
        best = k > best ? k : best;
    }
    if (best == INT32_MIN) return -INFINITY;
    uint32_t u = (uint32_t)best;
    return bitsf(u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu));
}

/* The largest finite raw logit, or -inf if there is none: the best of the
 * block maxima, which the lazy path reuses. An integer max reduction
 * vectorizes where a float one may not (NaN rules), and the keys order like
 * the floats (+0 above -0). */
static float raw_max(struct sampler *s, const float *x, int n)
{
    block_max_loop(x, s->block_key, n);
    s->block_key_ok = true;
    int32_t best = INT32_MIN;
    for (int j = 0; j * BLOCK < n; j++)
        best = s->block_key[j] > best ? s->block_key[j] : best;
    if (best == INT32_MIN) return -INFINITY;
    uint32_t u = (uint32_t)best;
    return bitsf(u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu));
}

/* ---- bias and penalties ---- */

/* Entry for token id, created from its raw logit; -1 when the raw logit is
 * not finite (such a token stays out whatever the bias). */
static int32_t ov_get(struct sampler *s, const float *x, int32_t id)
{
    int32_t k = s->slot[id];
    if (k >= 0) return k;
    if (!is_finite(x[id])) return -1;
    k = s->n_ov++;
    s->ov[k].token = id;
    s->ov[k].z = x[id];
    s->ov[k].count = 0;
    s->ov[k].rep_done = 0;
    s->slot[id] = k;
    return k;
}

static void ov_clear(struct sampler *s)
{
    for (int i = 0; i < s->n_ov; i++)
        s->slot[s->ov[i].token] = -1;
    s->n_ov = 0;
}

/* Steps 1-3 of the pipeline into ov[]. Returns ERR_INVALID on a token id out
 * of range; the caller clears ov either way. */
static int build_overrides(struct sampler *s, const struct sampler_params *p, const float *x,
                           const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen)
{
    int V = s->n_vocab;
    for (int i = 0; i < p->n_logit_bias; i++) {
        int32_t k = ov_get(s, x, p->logit_bias[i].token);
        if (k >= 0) s->ov[k].z = clampf(s->ov[k].z + p->logit_bias[i].bias);
    }

    if (p->repetition_penalty != 1.0f) {
        float r = p->repetition_penalty;
        int64_t total = (int64_t)n_prompt + n_gen;
        int64_t start = 0;
        if (p->repetition_window > 0 && p->repetition_window < total)
            start = total - p->repetition_window;
        for (int64_t i = start; i < total; i++) {
            int32_t id = i < n_prompt ? prompt[i] : gen[i - n_prompt];
            if (id < 0 || id >= V) return ERR_INVALID;
            int32_t k = ov_get(s, x, id);
            if (k < 0 || s->ov[k].rep_done) continue;
            float z = s->ov[k].z;
            s->ov[k].z = clampf(z > 0.0f ? z / r : z * r);
            s->ov[k].rep_done = 1;
        }
    }

    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int i = 0; i < n_gen; i++) {
            int32_t id = gen[i];
            if (id < 0 || id >= V) return ERR_INVALID;
            int32_t k = ov_get(s, x, id);
            if (k >= 0) s->ov[k].count++;
        }
        for (int k = 0; k < s->n_ov; k++) {
            if (s->ov[k].count == 0) continue;
            float pen = p->presence_penalty + p->frequency_penalty * (float)s->ov[k].count;
            s->ov[k].z = clampf(s->ov[k].z - pen);
        }
    }
    return 0;
}

/* Best processed token in rank order: the best untouched raw token against
 * every override. -1 if there is no candidate. */
static int32_t best_processed(const struct sampler *s, const float *x, const struct top_raw *t)
{
    float bz = -INFINITY;
    int32_t bid = -1;
    /* The raw top list is an exact rank-order prefix, so its first untouched
     * entry is the best untouched token. */
    for (int i = 0; i < t->n; i++) {
        if (s->slot[t->id[i]] < 0) {
            bz = t->z[i];
            bid = t->id[i];
            break;
        }
    }
    if (bid < 0 && t->n > 0 && s->n_ov > 0) {
        for (int i = 0; i < s->n_vocab; i++) {
            float v = x[i];
            if (v > bz && v <= FLT_MAX && s->slot[i] < 0) {
                bz = v;
                bid = i;
            }
        }
    }
    for (int k = 0; k < s->n_ov; k++) {
        float z = s->ov[k].z;
        int32_t id = s->ov[k].token;
        if (bid < 0 || z > bz || (z == bz && id < bid)) {
            bz = z;
            bid = id;
        }
    }
    return bid;
}

/* ---- top-k path ---- */

static void heap_sift_down(uint64_t *h, int n, int i)
{
    uint64_t v = h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] > h[c]) c++;
        if (h[c] <= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

static void heap_push(uint64_t *h, int *n, uint64_t v)
{
    int i = (*n)++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (h[parent] >= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

/* Ranks the k best candidates (all of them if there are fewer) into
 * s->rank. The heap is a max-heap of rank keys: its root is the worst token
 * kept. */
static void rank_top_k(struct sampler *s, const float *x, int k)
{
    uint64_t *h = s->keys;
    const int32_t *slot = s->slot;
    int n = 0, i = 0, V = s->n_vocab;
    for (; i < V && n < k; i++)
        if (is_finite(x[i]) && slot[i] < 0) heap_push(h, &n, rank_key(x[i], i));
    float root_z = n == k ? key_z(h[0]) : INFINITY;
    for (; i < V; i++) {
        float v = x[i];
        /* Ids arrive ascending: an equal z loses to the root, so strict >.
         * Rarely true once the heap holds good tokens. */
        if (__builtin_expect(v > root_z, 0)) {
            if (!is_finite(v) || slot[i] >= 0) continue;
            h[0] = rank_key(v, i);
            heap_sift_down(h, n, 0);
            root_z = key_z(h[0]);
        }
    }
    for (int j = 0; j < s->n_ov; j++) {
        uint64_t key = rank_key(s->ov[j].z, s->ov[j].token);
        if (n < k) {
            heap_push(h, &n, key);
        } else if (key < h[0]) {
            h[0] = key;
            heap_sift_down(h, n, 0);
        }
    }
    uint64_t *sorted = sort_keys(h, s->keys_tmp, n, 0, 8);
    for (int j = 0; j < n; j++)
        s->rank[j] = (int32_t)(uint32_t)sorted[j];
    s->n_ranked = n;
    s->next_bucket = N_BUCKETS; /* nothing more to rank */
}

/* The top-k path's ranking for a sparse mask: every listed candidate (the
 * allowed ids with a finite logit) sorted, the first k kept (all when k is 0
 * or larger). The ids are listed ascending, so the keys arrive in id order
 * and sorting their z half is enough. */
static void rank_listed(struct sampler *s, const float *x, const int32_t *ids, int n_ids, int k)
{
    int n = 0;
    for (int j = 0; j < n_ids; j++)
        if (is_finite(x[ids[j]])) s->keys[n++] = rank_key(zval(s, x, ids[j]), ids[j]);
    uint64_t *sorted = sort_keys(s->keys, s->keys_tmp, n, 4, 8);
    if (k > 0 && k < n) n = k;
    for (int j = 0; j < n; j++)
        s->rank[j] = (int32_t)(uint32_t)sorted[j];
    s->n_ranked = n;
    s->next_bucket = N_BUCKETS; /* nothing more to rank */
}

/* ---- lazy path ---- */

#define BITS_LAST_BUCKET 0x42fe0000u /* fbits((float)(N_BUCKETS - 1)) */

/* floor(-t * BUCKET_RATE) clamped to the last bucket; monotone in t. A
 * positive t (only for touched tokens, which are patched afterwards) lands in
 * the last bucket. */
static inline int bucket_of(float t)
{
    float b = 0.0f - t * BUCKET_RATE; /* 0 - x, not -x: t == 0 must give +0 */
    uint32_t u = fbits(b);
    u = u < BITS_LAST_BUCKET ? u : BITS_LAST_BUCKET;
    return (int)bitsf(u);
}

/* w[i] and bucket[i] of ids [i0, end) from their raw logits (touched tokens
 * are patched by the caller); non-candidates get 0 and BUCKET_NONE. */
VOCAB_LOOP static void weigh_loop(const float *restrict x, float *restrict w,
                                  uint8_t *restrict bucket, int i0, int end, float m,
                                  float inv_temp)
{
    for (int i = i0; i < end; i++) {
        float v = x[i];
        bool fin = is_finite(v);
        float t = keep_or_zero(fin, v - m) * inv_temp;
        w[i] = keep_or_zero(fin, exp_neg(t));
        bucket[i] = (uint8_t)((uint32_t)bucket_of(t) | (BUCKET_NONE & ((uint32_t)fin - 1u)));
    }
}

/* weigh_loop's answer for ids of +0 blocks (see zero_blocks): every weight
 * +0, every candidate in the last bucket. */
VOCAB_LOOP static void weigh_zero_loop(const float *restrict x, float *restrict w,
                                       uint8_t *restrict bucket, int i0, int end)
{
    for (int i = i0; i < end; i++) {
        bool fin = is_finite(x[i]);
        w[i] = 0.0f;
        bucket[i] = (uint8_t)((N_BUCKETS - 1) | (BUCKET_NONE & ((uint32_t)fin - 1u)));
    }
}

/* zero[j] = every raw weight in block j is +0: its best finite logit (the
 * block key) gives t < -87, exp_neg's cut, or it has none (the key then
 * decodes to a NaN, which compares false). t = (v - m) * inv_temp is
 * monotone in v, so the best decides for all. Returns how many. */
VOCAB_LOOP static int zero_blocks(const int32_t *restrict key, uint8_t *restrict zero, int n_blocks,
                                  float m, float inv_temp)
{
    int n = 0;
    for (int j = 0; j < n_blocks; j++) {
        uint32_t u = (uint32_t)key[j];
        float v = bitsf(u ^ ((uint32_t)((int32_t)u >> 31) & 0x7fffffffu));
        float t = (v - m) * inv_temp;
        uint8_t z = (uint8_t)((key[j] == INT32_MIN) | (t < -87.0f));
        zero[j] = z;
        n += z;
    }
    return n;
}

VOCAB_LOOP static void block_min_loop(const uint8_t *restrict bucket, uint8_t *restrict out, int n)
{
    for (int j = 0; j * BLOCK < n; j++) {
        int end = (j + 1) * BLOCK < n ? (j + 1) * BLOCK : n;
        uint8_t m = 255;
        for (int i = j * BLOCK; i < end; i++)
            m = bucket[i] < m ? bucket[i] : m;
        out[j] = m;
    }
}

/*
 * A total, as the header defines it: the double sum over token ids in
 * ascending order - split into SUM_LANES interleaved lanes (lane = id mod 8,
 * each summed in id order, the lanes added pairwise at the end). The order is
 * as fixed as a single running sum, but the lanes are independent, so the
 * loop vectorizes instead of waiting on one add at a time. Terms with
 * w < min_p count as +0, which leaves a sum of non-negatives unchanged, so
 * summing all V ids equals summing just the members.
 */
static inline double lanes_add(const double *acc)
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Adds ids [i0, end) into the lanes; i0 is a multiple of SUM_LANES. */
VOCAB_LOOP static void sum_lanes(const float *restrict w, int i0, int end, float min_p,
                                 double *restrict lanes)
{
    double acc[SUM_LANES];
    for (int l = 0; l < SUM_LANES; l++)
        acc[l] = lanes[l];
    int i = i0;
    for (; i + SUM_LANES <= end; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++)
            acc[l] += keep_or_zero(w[i + l] >= min_p, w[i + l]);
    for (; i < end; i++)
        acc[i % SUM_LANES] += keep_or_zero(w[i] >= min_p, w[i]);
    for (int l = 0; l < SUM_LANES; l++)
        lanes[l] = acc[l];
}

/* The total of every id (lazy path). A block of +0 weights would add +0 to
 * each lane (never -0: the lanes start at +0 and only grow), which changes
 * no bit, so only the runs of other blocks are summed. BLOCK is a multiple
 * of SUM_LANES, so lane = id mod 8 still. */
static double total_all(const struct sampler *s, float min_p)
{
    double lanes[SUM_LANES] = {0};
    int V = s->n_vocab, n_blocks = (V + BLOCK - 1) / BLOCK;
    for (int j = 0; j < n_blocks;) {
        int k = j;
        while (k < n_blocks && s->block_zero[k] == s->block_zero[j])
            k++;
        if (!s->block_zero[j]) sum_lanes(s->w, j * BLOCK, MIN(k * BLOCK, V), min_p, lanes);
        j = k;
    }
    return lanes_add(lanes);
}

/* The same total over an explicit set of ids, already sorted ascending. */
static double sum_lanes_ids(const float *w, const uint64_t *ids, int n, float min_p)
{
    double acc[SUM_LANES] = {0};
    for (int j = 0; j < n; j++) {
        float wv = w[ids[j]];
        acc[ids[j] % SUM_LANES] += keep_or_zero(wv >= min_p, wv);
    }
    return lanes_add(acc);
}

/* Lazy path set-up: weights and buckets of every token, the per-bucket token
 * counts that guide extend(), and the totals over all candidates and over
 * those with w >= min_p. */
static void weigh_all(struct sampler *s, const struct call *c, double *w_all, double *w_min)
{
    float *w = s->w;
    uint8_t *bucket = s->bucket;
    float m = c->m, inv_temp = c->inv_temp, min_p = c->min_p;
    int V = s->n_vocab;
    int n_blocks = (V + BLOCK - 1) / BLOCK;
    if (!s->block_key_ok) block_max_loop(c->x, s->block_key, V);
    int n_zero = zero_blocks(s->block_key, s->block_zero, n_blocks, m, inv_temp);
    if (n_zero == 0) {
        weigh_loop(c->x, w, bucket, 0, V, m, inv_temp);
    } else { /* runs of +0 blocks and of the others */
        for (int j = 0; j < n_blocks;) {
            int k = j;
            while (k < n_blocks && s->block_zero[k] == s->block_zero[j])
                k++;
            int i0 = j * BLOCK, end = MIN(k * BLOCK, V);
            if (s->block_zero[j])
                weigh_zero_loop(c->x, w, bucket, i0, end);
            else
                weigh_loop(c->x, w, bucket, i0, end, m, inv_temp);
            j = k;
        }
    }
    for (int k = 0; k < s->n_ov; k++) {
        float t = (s->ov[k].z - m) * inv_temp;
        w[s->ov[k].token] = exp_neg(t);
        bucket[s->ov[k].token] = (uint8_t)bucket_of(t);
        s->block_zero[s->ov[k].token / BLOCK] = 0;
    }
    block_min_loop(bucket, s->block_min, V);
    *w_all = total_all(s, 0.0f);
    *w_min = min_p > 0.0f ? total_all(s, min_p) : *w_all;

    /* Token counts per bucket: extend() estimates masses from them. A block
     * whose least bucket is the last one (all its tokens below e^-15.9, or
     * not candidates) only needs its non-candidates counted, which
     * vectorizes; for a peaked distribution, or a +100 bias, that is nearly
     * every block. Elsewhere four interleaved copies break the
     * store-to-load chain that a run of one bucket would make. */
    int32_t hist_n[4][256];
    memset(hist_n, 0, sizeof(hist_n));
    for (int j = 0; j * BLOCK < V; j++) {
        int i = j * BLOCK, end = (j + 1) * BLOCK < V ? (j + 1) * BLOCK : V;
        if (s->block_min[j] >= N_BUCKETS - 1) {
            int n_none = 0;
            for (int k = i; k < end; k++)
                n_none += bucket[k] == BUCKET_NONE;
            hist_n[0][BUCKET_NONE] += n_none;
            hist_n[0][N_BUCKETS - 1] += end - i - n_none;
            continue;
        }
        for (; i + 4 <= end; i += 4) {
            hist_n[0][bucket[i]]++;
            hist_n[1][bucket[i + 1]]++;
            hist_n[2][bucket[i + 2]]++;
            hist_n[3][bucket[i + 3]]++;
        }
        for (; i < end; i++)
            hist_n[0][bucket[i]]++;
    }
    for (int b = 0; b < 256; b++)
        s->hist_n[b] = hist_n[0][b] + hist_n[1][b] + hist_n[2][b] + hist_n[3][b];
    s->n_ranked = 0;
    s->next_bucket = 0;
    s->n_extends = 0;
}

/* Appends the next buckets to the ranked prefix. How many: the calling walk
 * must reach cumulative `target` out of `total`, i.e. it may leave at most
 * total - target unranked. Bucket masses are estimated as count x typical
 * weight (only buckets that can reach min_p count), scaled so that they add
 * up to total, and the band ends where the estimated mass left beyond it is
 * within 80% of that allowance. If the walk still falls short it asks again;
 * from the second retry on the band at least doubles, so a bad estimate
 * costs few gather passes. Returns false when every candidate is ranked. */
static bool extend(struct sampler *s, const float *x, double target, double total, float min_p)
{
    int b0 = s->next_bucket;
    while (b0 < N_BUCKETS && s->hist_n[b0] == 0)
        b0++;
    if (b0 >= N_BUCKETS) {
        s->next_bucket = N_BUCKETS;
        return false;
    }
    double est[N_BUCKETS], est_total = 0.0;
    for (int b = 0; b < N_BUCKETS; b++) {
        bool reaches = s->bucket_w[b] * exp(1.0 / (2.0 * BUCKET_RATE)) >= (double)min_p;
        est[b] = reaches ? s->hist_n[b] * s->bucket_w[b] : 0.0;
        est_total += est[b];
    }
    double allow = 0.8 * (total - target) * (est_total / total); /* in estimate units */
    double beyond = est_total;
    for (int b = 0; b < b0; b++)
        beyond -= est[b];
    int b1 = b0;
    beyond -= est[b0];
    while (b1 + 1 < N_BUCKETS && beyond > allow)
        beyond -= est[++b1];
    int min_width = s->n_extends >= 2 ? b0 : 1; /* second retry on: at least double */
    if (b1 < b0 + min_width - 1) b1 = MIN(N_BUCKETS - 1, b0 + min_width - 1);
    s->n_extends++;
    s->next_bucket = b1 + 1;

    /* Gather in id order, so that a stable sort on the z half of the key
     * keeps ties in id order. Blocks whose best bucket is past b1 are
     * skipped whole: for a peaked distribution that is nearly all of them. */
    const uint8_t *bucket = s->bucket;
    int32_t *ids = s->ids;
    int V = s->n_vocab, n = 0;
    uint8_t lo = (uint8_t)b0, hi = (uint8_t)b1;
    for (int j = 0; j * BLOCK < V; j++) {
        if (s->block_min[j] > hi) continue;
        int end = (j + 1) * BLOCK < V ? (j + 1) * BLOCK : V;
        for (int i = j * BLOCK; i < end; i++) {
            uint8_t b = bucket[i];
            ids[n] = i; /* branch-free compaction */
            n += (b >= lo) & (b <= hi);
        }
    }
    for (int j = 0; j < n; j++)
        s->keys[j] = rank_key(zval(s, x, ids[j]), ids[j]);
    uint64_t *sorted = sort_keys(s->keys, s->keys_tmp, n, 4, 8);
    int32_t *dst = s->rank + s->n_ranked;
    for (int j = 0; j < n; j++)
        dst[j] = (int32_t)(uint32_t)sorted[j];
    s->n_ranked += n;
    return true;
}

/* ---- cut and draw (both paths) ---- */

/* The total of the first n ranked tokens with w >= min_p. */
static double ranked_total(struct sampler *s, int n, float min_p)
{
    for (int j = 0; j < n; j++)
        s->keys[j] = (uint32_t)s->rank[j];
    uint64_t *sorted = sort_keys(s->keys, s->keys_tmp, n, 0, 4);
    return sum_lanes_ids(s->w, sorted, n, min_p);
}

/* Shortest ranked prefix whose cumulative weight reaches target, a share of
 * total (extending the ranking as needed when lazy). */
static int top_p_cut(struct sampler *s, const float *x, double target, double total, bool lazy)
{
    double c = 0.0;
    int j = 0;
    for (;;) {
        if (j == s->n_ranked && (!lazy || !extend(s, x, target, total, 0.0f))) break;
        c += s->w[s->rank[j]];
        j++;
        if (c >= target) break;
    }
    return j;
}

/* Walks the first `limit` ranked tokens (ranking more as needed when lazy),
 * skipping w < min_p, and returns the first whose cumulative exceeds target
 * = u * total; if rounding leaves none, the last one with w > 0. */
static int32_t draw(struct sampler *s, const float *x, int limit, bool lazy, double target,
                    double total, float min_p)
{
    double c = 0.0;
    int32_t last = -1;
    for (int j = 0; j < limit; j++) {
        if (j == s->n_ranked && (!lazy || !extend(s, x, target, total, min_p))) break;
        int32_t id = s->rank[j];
        float wv = s->w[id];
        if (wv < min_p) continue;
        if (wv > 0.0f) last = id;
        c += wv;
        if (c > target) return id;
    }
    return last;
}

/* Steps 4-8 of the pipeline. On return s->w holds the weights of (at least)
 * every ranked token; *w_is_raw_exp says whether it holds exp(x_i - max x)
 * for every id, which the logprob sum can then reuse. */
static int32_t sample_token(struct sampler *s, const struct sampler_params *p, const struct call *c,
                            double u, bool *w_is_raw_exp)
{
    const float *x = c->x;
    int k = p->top_k;
    /* A top_k at or above the number of candidates keeps them all; both
     * paths compute that same definition, so this test is only for speed. */
    bool lazy = !c->allow && (k == 0 || k >= s->n_vocab);
    double w_kept; /* total of the top-k set */
    double w_min;  /* total of its members with w >= min_p (lazy path) */
    int n_kept;    /* size of the top-k set */

    if (lazy) {
        weigh_all(s, c, &w_kept, &w_min);
        n_kept = s->n_vocab - s->hist_n[BUCKET_NONE];
        *w_is_raw_exp = c->inv_temp == 1.0f && s->n_ov == 0;
    } else {
        if (c->allow)
            rank_listed(s, x, c->allow, c->n_allow, k);
        else
            rank_top_k(s, x, k);
        for (int j = 0; j < s->n_ranked; j++) {
            int32_t id = s->rank[j];
            s->w[id] = exp_neg((zval(s, x, id) - c->m) * c->inv_temp);
        }
        n_kept = s->n_ranked;
        w_kept = ranked_total(s, n_kept, 0.0f);
        w_min = c->min_p > 0.0f ? ranked_total(s, n_kept, c->min_p) : w_kept;
        *w_is_raw_exp = false;
    }

    int limit = n_kept; /* the draw walks this much of the rank order */
    double total = w_min;
    if (p->top_p < 1.0f) {
        limit = top_p_cut(s, x, (double)p->top_p * w_kept, w_kept, lazy);
        if (limit < n_kept) total = ranked_total(s, limit, c->min_p);
    }
    return draw(s, x, limit, lazy, u * total, total, c->min_p);
}

/* ---- logprobs ---- */

/* exp(x_i - m) of every finite raw logit, 0 for the others. */
VOCAB_LOOP static void exp_loop(const float *restrict x, float *restrict w, int n, float m)
{
    for (int i = 0; i < n; i++) {
        float v = x[i];
        bool fin = is_finite(v);
        w[i] = keep_or_zero(fin, exp_neg(keep_or_zero(fin, v - m)));
    }
}

/* sum_i exp(x_i - m) over the finite raw logits: one running double sum in
 * token id order, as the header promises for logprobs. The terms are staged
 * in s->w so that the exp loop vectorizes; have_terms says s->w holds them
 * already (the lazy path at T == 1 with nothing touched computed the very
 * same values). */
static double raw_exp_sum(struct sampler *s, const struct call *c, float m, bool have_terms)
{
    const float *x = c->x;
    int V = s->n_vocab;
    if (c->allow) { /* the same running sum without its +0 terms */
        double sum = 0.0;
        for (int j = 0; j < c->n_allow; j++) {
            float v = x[c->allow[j]];
            bool fin = is_finite(v);
            sum += keep_or_zero(fin, exp_neg(keep_or_zero(fin, v - m)));
        }
        return sum;
    }
    if (!have_terms) exp_loop(x, s->w, V, m);
    const float *w = s->w;
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        sum += w[i];
    return sum;
}

/* Natural log of x >= 1 from IEEE basic operations (and frexp, which is
 * exact), like exp_neg, so logprobs carry the same bits on every machine
 * whatever its libm.
 * x = f 2^e with f in [sqrt(1/2), sqrt(2)); log f = 2 atanh(s), s = (f-1)/(f+1),
 * |s| < 0.172, by its series to s^25 (truncation < 1e-20); ln2 split in a
 * high part with trailing zeros (e * LN2_HI is exact) and a low part. */
static double log_det(double x)
{
    int e;
    double f = frexp(x, &e); /* exact: [0.5, 1) */
    if (f < 0.70710678118654752440) {
        f *= 2.0;
        e--;
    }
    double sn = (f - 1.0) / (f + 1.0), s2 = sn * sn;
    double p = 2.0 / 25.0;
    for (int k = 11; k >= 0; k--)
        p = p * s2 + 2.0 / (2 * k + 1);
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    return (double)e * ln2_hi + ((double)e * ln2_lo + sn * p);
}

static float raw_logprob(float v, float m, double log_sum)
{
    return (float)(((double)v - (double)m) - log_sum);
}

/* ---- token masks ---- */

/* Lists the allowed ids in s->allow when there are at most V / SPARSE_DIV of
 * them; returns how many, or -1 (nothing listed) when there are more. Bits
 * past V are ignored. */
static int list_allowed(struct sampler *s, const uint64_t *allowed)
{
    int V = s->n_vocab, n_words = (V + 63) / 64, n = 0;
    uint64_t tail = V % 64 ? (1ull << (V % 64)) - 1 : ~0ull; /* valid bits of the last word */
    for (int j = 0; j < n_words; j++)
        n += __builtin_popcountll(j == n_words - 1 ? allowed[j] & tail : allowed[j]);
    if (n > V / SPARSE_DIV) return -1;
    n = 0;
    for (int j = 0; j < n_words; j++) {
        uint64_t word = j == n_words - 1 ? allowed[j] & tail : allowed[j];
        while (word) {
            s->allow[n++] = j * 64 + __builtin_ctzll(word);
            word &= word - 1;
        }
    }
    return n;
}

/* masked[] = the logits with disallowed tokens at -inf, a 64-token word at a
 * time (whole words allowed or forbidden are the common case). */
static void fill_dense(struct sampler *s, const uint64_t *allowed, const float *x)
{
    int V = s->n_vocab;
    float *out = s->masked;
    for (int j = 0; j * 64 < V; j++) {
        int i0 = j * 64, n = MIN(64, V - i0);
        uint64_t word = allowed[j];
        if (n == 64 && word == ~0ull) {
            memcpy(out + i0, x + i0, 64 * sizeof(*out));
        } else if (word == 0) {
            for (int i = 0; i < n; i++)
                out[i0 + i] = -INFINITY;
        } else { /* a select on the bits: a branch per token mispredicts */
            for (int i = 0; i < n; i++) {
                uint32_t keep = 0u - (uint32_t)((word >> i) & 1);
                out[i0 + i] = bitsf((fbits(x[i0 + i]) & keep) | (BITS_NEG_INF & ~keep));
            }
        }
    }
    s->masked_dirty = true;
}

/* masked[] = -inf except the listed ids, which get their logits. */
static void fill_sparse(struct sampler *s, int n_allow, const float *x)
{
    if (s->masked_dirty) {
        for (int i = 0; i < s->n_vocab; i++)
            s->masked[i] = -INFINITY;
        s->masked_dirty = false;
    }
    for (int j = 0; j < n_allow; j++)
        s->masked[s->allow[j]] = x[s->allow[j]];
}

/* ---- the call ---- */

int sampler_sample(struct sampler *s, const struct sampler_params *p, const float *logits,
                   const int32_t *prompt, int n_prompt, const int32_t *generated, int n_generated,
                   int64_t position, struct sampler_result *out)
{
    if (!s || !logits || !out) return ERR_INVALID;
    int rc = sampler_params_validate(p, s->n_vocab, NULL);
    if (rc) return rc;
    if (n_prompt < 0 || n_generated < 0 || position < 0) return ERR_INVALID;
    if ((n_prompt > 0 && !prompt) || (n_generated > 0 && !generated)) return ERR_INVALID;
    s->block_key_ok = false;
    /* Disallowed tokens become -inf: never chosen whatever their bias, and
     * absent from the logprob normalizer. A sparse mask also lists its ids,
     * and every later step walks only those (n_allow >= 0). */
    int n_allow = -1;
    if (p->allowed) {
        n_allow = list_allowed(s, p->allowed);
        if (n_allow >= 0)
            fill_sparse(s, n_allow, logits);
        else
            fill_dense(s, p->allowed, logits);
        logits = s->masked;
    }
    const int32_t *allow = n_allow >= 0 ? s->allow : NULL;

    rc = build_overrides(s, p, logits, prompt, n_prompt, generated, n_generated);
    if (rc) goto out_clear;

    /* Sampling with nothing touched and no logprobs needs only the max; every
     * other case wants the best raw tokens. */
    struct top_raw top;
    top.cap = p->n_logprobs > 0 ? p->n_logprobs : 1;
    top.n = 0;
    float m;
    int32_t best = -1;
    if (p->temperature > 0.0f && s->n_ov == 0 && !p->logprobs) {
        m = allow ? ids_max(logits, allow, n_allow) : raw_max(s, logits, s->n_vocab);
    } else {
        if (allow)
            raw_scan_ids(logits, allow, n_allow, &top);
        else
            raw_scan(s, logits, s->n_vocab, &top);
        best = best_processed(s, logits, &top);
        m = best >= 0 ? zval(s, logits, best) : -INFINITY;
    }
    if (m == -INFINITY) { /* no finite logit: nothing can be sampled */
        rc = ERR_INVALID;
        goto out_clear;
    }

    struct sampler_result res;
    memset(&res, 0, sizeof(res));
    bool w_is_raw_exp = false;
    struct call c = {
        .x = logits,
        .allow = allow,
        .n_allow = n_allow,
        .m = m,
        .inv_temp = p->temperature > 0.0f ? clampf(1.0f / p->temperature) : 0.0f, /* not +inf */
        .min_p = p->min_p,
    };
    if (p->temperature == 0.0f) {
        res.token = best;
    } else {
        double u = sampler_uniform(p->seed, position);
        res.token = sample_token(s, p, &c, u, &w_is_raw_exp);
    }
    CHECK(res.token >= 0);

    if (p->logprobs) {
        float m_raw = top.z[0];
        double log_sum = log_det(raw_exp_sum(s, &c, m_raw, w_is_raw_exp));
        res.logprob = raw_logprob(logits[res.token], m_raw, log_sum);
        res.n_top = MIN(p->n_logprobs, top.n);
        for (int i = 0; i < res.n_top; i++) {
            res.top[i].token = top.id[i];
            res.top[i].logprob = raw_logprob(top.z[i], m_raw, log_sum);
        }
    }
    *out = res;
    rc = 0;

out_clear:
    ov_clear(s);
    for (int j = 0; j < n_allow; j++) /* masked[] back to all -inf */
        s->masked[s->allow[j]] = -INFINITY;
    return rc;
}
