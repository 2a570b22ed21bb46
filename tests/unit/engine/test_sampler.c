/*
 * test_sampler.c - the sampler against hand-computed cases, its two ranking
 * paths against each other, sampling statistics, and pinned numerics.
 *
 * Observing a filter: its kept set is read off as the set of tokens that
 * thousands of draws (positions 0..N-1) produce; a kept token of probability
 * >= 5% is missed with probability < 1e-40, and a dropped one must never
 * appear. Observing a penalty: the penalized token races a "competitor" whose
 * raw logit sits just above or just below the hand-computed value; greedy
 * then says which side the value is on. Exactness: the top-k path (heap,
 * full sort) and the lazy bucketed path must pick the same token at every
 * position. Everything is seeded, so every run sees the same numbers.
 */
#include "test.h"

#include "base/check.h"
#include "base/timeutil.h"
#include "engine/sampler.h"

#include <float.h>
#include <stdbool.h>

/* ---- helpers ---- */

static uint64_t rng_state;

static double rng_uniform(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

static double rng_gauss(void)
{
    double u1 = rng_uniform(), u2 = rng_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static float *random_logits(int n, double sigma, uint64_t seed)
{
    rng_state = seed;
    float *x = xmalloc((size_t)n * sizeof(*x));
    for (int i = 0; i < n; i++)
        x[i] = (float)(sigma * rng_gauss());
    return x;
}

static struct sampler_params params(float temperature)
{
    struct sampler_params p;
    sampler_params_default(&p);
    p.temperature = temperature;
    return p;
}

static int32_t sample_at(struct sampler *s, const struct sampler_params *p, const float *x,
                         int64_t pos)
{
    struct sampler_result r;
    int rc = sampler_sample(s, p, x, NULL, 0, NULL, 0, pos, &r);
    EXPECT_EQ_INT(rc, 0);
    return rc ? -1 : r.token;
}

/* Bit mask of the tokens (ids < 32) that positions 0..n-1 draw. */
static uint32_t drawn_set(struct sampler *s, const struct sampler_params *p, const float *x, int n)
{
    uint32_t set = 0;
    for (int i = 0; i < n; i++) {
        int32_t t = sample_at(s, p, x, i);
        if (t >= 0 && t < 32)
            set |= 1u << t;
        else
            set |= 1u << 31;
    }
    return set;
}

/* ---- greedy ---- */

TEST(greedy_picks_argmax_lowest_id_on_ties)
{
    float x[] = {0.5f, 3.0f, -1.0f, 3.0f, NAN, INFINITY, 2.9f, -INFINITY};
    struct sampler *s = sampler_new(ARRAY_LEN(x));
    struct sampler_params p = params(0.0f);
    EXPECT_EQ_INT(sample_at(s, &p, x, 0), 1); /* 1 and 3 tie; NaN and +inf never win */
    x[1] = 2.0f;
    EXPECT_EQ_INT(sample_at(s, &p, x, 0), 3);
    x[7] = 3.5f;
    EXPECT_EQ_INT(sample_at(s, &p, x, 0), 7);
    /* Filters do not change the greedy answer. */
    p.top_k = 2;
    p.top_p = 0.1f;
    p.min_p = 0.9f;
    EXPECT_EQ_INT(sample_at(s, &p, x, 5), 7);
    sampler_free(s);
}

TEST(greedy_ties_after_penalty_go_to_lowest_id)
{
    /* Token 2 is the raw best; repetition 2 brings it to 2.0 = token 4's
     * logit, and then the lower id (2) must win; token 0 at 2.0 beats both. */
    float x[] = {-5.0f, -5.0f, 4.0f, -5.0f, 2.0f};
    int32_t prompt[] = {2};
    struct sampler *s = sampler_new(ARRAY_LEN(x));
    struct sampler_params p = params(0.0f);
    p.repetition_penalty = 2.0f;
    struct sampler_result r;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, prompt, 1, NULL, 0, 1, &r), 0);
    EXPECT_EQ_INT(r.token, 2);
    x[0] = 2.0f;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, prompt, 1, NULL, 0, 1, &r), 0);
    EXPECT_EQ_INT(r.token, 0);
    sampler_free(s);
}

TEST(temperature_to_zero_is_greedy)
{
    int V = 1000;
    float *x = random_logits(V, 2.0, 11);
    struct sampler *s = sampler_new(V);
    struct sampler_params g = params(0.0f);
    int32_t best = sample_at(s, &g, x, 0);
    /* Make the margin to the runner-up at least 0.5. */
    for (int i = 0; i < V; i++)
        if (i != best && x[i] > x[best] - 0.5f) x[i] = x[best] - 0.5f;
    const float temps[] = {1e-2f, 1e-3f, 1e-20f};
    for (size_t k = 0; k < ARRAY_LEN(temps); k++) {
        struct sampler_params p = params(temps[k]);
        int hits = 0;
        for (int pos = 0; pos < 300; pos++)
            hits += sample_at(s, &p, x, pos) == best;
        EXPECT_EQ_INT(hits, 300);
    }
    /* ...while a warm temperature does not always agree. */
    struct sampler_params warm = params(5.0f);
    int hits = 0;
    for (int pos = 0; pos < 300; pos++)
        hits += sample_at(s, &warm, x, pos) == best;
    EXPECT(hits < 300);
    free(x);
    sampler_free(s);
}

TEST(top_k_1_equals_greedy)
{
    int V = 3000;
    float *x = random_logits(V, 2.0, 21);
    for (int i = 0; i < V; i++)
        x[i] = roundf(x[i] * 2.0f) / 2.0f; /* many exact ties */
    int32_t prompt[64], gen[16];
    for (int i = 0; i < 64; i++)
        prompt[i] = (i * 37) % V;
    for (int i = 0; i < 16; i++)
        gen[i] = (i * 101) % V;
    struct sampler_bias bias[] = {{5, 1.0f}, {6, -2.0f}};
    struct sampler *s = sampler_new(V);
    const float temps[] = {0.5f, 1.0f, 3.0f};
    for (int variant = 0; variant < 2; variant++) {
        struct sampler_params g = params(0.0f);
        if (variant) {
            g.repetition_penalty = 1.3f;
            g.presence_penalty = 0.4f;
            g.frequency_penalty = 0.2f;
            g.logit_bias = bias;
            g.n_logit_bias = 2;
        }
        struct sampler_result rg, rk;
        EXPECT_EQ_INT(sampler_sample(s, &g, x, prompt, 64, gen, 16, 80, &rg), 0);
        for (size_t k = 0; k < ARRAY_LEN(temps); k++) {
            struct sampler_params p = g;
            p.temperature = temps[k];
            p.top_k = 1;
            for (int pos = 80; pos < 180; pos++) {
                EXPECT_EQ_INT(sampler_sample(s, &p, x, prompt, 64, gen, 16, pos, &rk), 0);
                EXPECT_EQ_INT(rk.token, rg.token);
            }
        }
    }
    free(x);
    sampler_free(s);
}

/* ---- filters on a hand-built distribution ---- */

/* p = {0.05, 0.50, 0.15, 0.30} over ids 0..3 (rank order 1, 3, 2, 0). */
static void four_token_logits(float *x)
{
    const double prob[] = {0.05, 0.50, 0.15, 0.30};
    for (int i = 0; i < 4; i++)
        x[i] = (float)log(prob[i]);
}

#define SET(a) (1u << (a))

TEST(top_p_keeps_smallest_prefix_reaching_p)
{
    float x[4];
    four_token_logits(x);
    struct sampler *s = sampler_new(4);
    struct sampler_params p = params(1.0f);
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(0) | SET(1) | SET(2) | SET(3));
    p.top_p = 0.4f; /* 0.5 >= 0.4 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1));
    p.top_p = 0.75f; /* 0.5 < 0.75 <= 0.8 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3));
    p.top_p = 0.85f; /* 0.8 < 0.85 <= 0.95 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3) | SET(2));
    p.top_p = 0.97f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(0) | SET(1) | SET(2) | SET(3));
    /* top-p works on what top-k kept: k=2 leaves {0.5, 0.3}, so 0.75 of
     * 0.8 = 0.6 needs both. */
    p.top_k = 2;
    p.top_p = 0.75f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3));
    p.top_p = 0.6f; /* 0.6 * 0.8 = 0.48 <= 0.5 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1));
    sampler_free(s);
}

TEST(filter_boundaries_are_inclusive)
{
    /* Tied logits have weight exactly 1, so every sum is an exact integer:
     * top-p 0.5 of 4 needs exactly 2 (cumulative 2 >= 0.5 * 4), and ties
     * rank by id. */
    float x[] = {1.0f, 1.0f, 1.0f, 1.0f};
    struct sampler *s = sampler_new(4);
    struct sampler_params p = params(1.0f);
    p.top_p = 0.5f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 2000), SET(0) | SET(1));
    p.top_p = 0.25f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 2000), SET(0));
    p.top_p = 0.75f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 2000), SET(0) | SET(1) | SET(2));
    p.top_p = 0.76f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 2000), SET(0) | SET(1) | SET(2) | SET(3));
    /* min-p 1 keeps exactly the tokens tied with the best. */
    float y[] = {0.5f, 2.0f, 1.999f, 2.0f};
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    EXPECT_EQ_INT(drawn_set(s, &p, y, 2000), SET(1) | SET(3));
    sampler_free(s);
}

TEST(top_k_keeps_k_best)
{
    float x[4];
    four_token_logits(x);
    struct sampler *s = sampler_new(4);
    struct sampler_params p = params(1.0f);
    p.top_k = 2;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3));
    p.top_k = 3;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3) | SET(2));
    p.top_k = 4;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(0) | SET(1) | SET(2) | SET(3));
    /* Ties at the k boundary: the lower id is kept. */
    float y[] = {1.0f, 2.0f, 1.0f, 1.0f};
    p.top_k = 2;
    EXPECT_EQ_INT(drawn_set(s, &p, y, 3000), SET(0) | SET(1));
    sampler_free(s);
}

TEST(min_p_is_relative_to_max_prob)
{
    float x[4];
    four_token_logits(x);
    struct sampler *s = sampler_new(4);
    struct sampler_params p = params(1.0f);
    p.min_p = 0.2f; /* threshold 0.1: drops 0.05 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3) | SET(2));
    p.min_p = 0.5f; /* threshold 0.25 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3));
    p.min_p = 0.7f; /* threshold 0.35 */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1));
    p.min_p = 0.05f; /* threshold 0.025: keeps all */
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(0) | SET(1) | SET(2) | SET(3));
    /* Relative to the max of the tempered distribution: at T = 0.5 the
     * ratios square: 0.15/0.5 = 0.3 -> 0.09, 0.3/0.5 = 0.6 -> 0.36. */
    p.temperature = 0.5f;
    p.min_p = 0.2f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3));
    /* After top-p (0.85 keeps {1, 3, 2}), min-p 0.5 leaves {1, 3}. */
    p.temperature = 1.0f;
    p.top_p = 0.85f;
    p.min_p = 0.5f;
    EXPECT_EQ_INT(drawn_set(s, &p, x, 3000), SET(1) | SET(3));
    sampler_free(s);
}

/* ---- penalties ---- */

#define PEN_V      16
#define COMPETITOR 15

/* Greedy says whether token `tok`'s processed logit is above (false) or
 * below (true) the raw logit v of COMPETITOR. */
static bool loses_to(struct sampler *s, const struct sampler_params *p, float *x, float v,
                     const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen, int tok)
{
    x[COMPETITOR] = v;
    struct sampler_result r;
    int rc = sampler_sample(s, p, x, prompt, n_prompt, gen, n_gen, n_prompt + n_gen, &r);
    EXPECT_EQ_INT(rc, 0);
    EXPECT(r.token == tok || r.token == COMPETITOR);
    return r.token == COMPETITOR;
}

/* Checks that token tok's processed logit is `want` (to within 1e-4). */
static void expect_processed(struct sampler *s, const struct sampler_params *p, float *x,
                             const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
                             int tok, float want, int line)
{
    bool below = loses_to(s, p, x, want + 1e-4f, prompt, n_prompt, gen, n_gen, tok);
    bool above = !loses_to(s, p, x, want - 1e-4f, prompt, n_prompt, gen, n_gen, tok);
    if (!below || !above) {
        fprintf(stderr, "  line %d: token %d processed logit is not %g\n", line, tok, (double)want);
        test_failures_in_case++;
    }
}

#define EXPECT_PROCESSED(p, x, pr, npr, g, ng, tok, want)                                          \
    expect_processed(s, p, x, pr, npr, g, ng, tok, want, __LINE__)

static void pen_logits(float *x)
{
    for (int i = 0; i < PEN_V; i++)
        x[i] = -50.0f;
}

TEST(repetition_penalty_divides_positive_multiplies_negative)
{
    struct sampler *s = sampler_new(PEN_V);
    float x[PEN_V];
    pen_logits(x);
    struct sampler_params p = params(0.0f);
    p.repetition_penalty = 2.0f;
    int32_t prompt[] = {5, 5, 5};
    x[5] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 3, NULL, 0, 5, 1.5f); /* once, not per occurrence */
    x[5] = -1.0f;
    EXPECT_PROCESSED(&p, x, prompt, 3, NULL, 0, 5, -2.0f);
    /* Generated tokens count too. */
    pen_logits(x);
    int32_t gen[] = {7};
    x[7] = 3.0f;
    EXPECT_PROCESSED(&p, x, NULL, 0, gen, 1, 7, 1.5f);
    /* Off at 1: raw value. */
    p.repetition_penalty = 1.0f;
    EXPECT_PROCESSED(&p, x, NULL, 0, gen, 1, 7, 3.0f);
    sampler_free(s);
}

TEST(repetition_window_sees_only_last_tokens)
{
    struct sampler *s = sampler_new(PEN_V);
    float x[PEN_V];
    pen_logits(x);
    struct sampler_params p = params(0.0f);
    p.repetition_penalty = 2.0f;
    p.repetition_window = 2;
    int32_t prompt[] = {5, 6, 7};
    int32_t gen[] = {8};
    /* Window over prompt + generated = {7, 8}. */
    x[5] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 3, gen, 1, 5, 3.0f);
    x[5] = -50.0f;
    x[7] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 3, gen, 1, 7, 1.5f);
    x[7] = -50.0f;
    x[8] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 3, gen, 1, 8, 1.5f);
    /* 0 = everything. */
    p.repetition_window = 0;
    x[8] = -50.0f;
    x[5] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 3, gen, 1, 5, 1.5f);
    sampler_free(s);
}

TEST(presence_and_frequency_count_generated_only)
{
    struct sampler *s = sampler_new(PEN_V);
    float x[PEN_V];
    pen_logits(x);
    struct sampler_params p = params(0.0f);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    int32_t prompt[] = {6, 6};
    int32_t gen[] = {5, 2, 5, 5};
    x[5] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 2, gen, 4, 5, 3.0f - (0.5f + 0.25f * 3));
    x[5] = -50.0f;
    x[2] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 2, gen, 4, 2, 3.0f - (0.5f + 0.25f));
    x[2] = -50.0f;
    x[6] = 3.0f; /* prompt only: untouched */
    EXPECT_PROCESSED(&p, x, prompt, 2, gen, 4, 6, 3.0f);
    /* Negative penalties reward. */
    p.presence_penalty = -1.0f;
    p.frequency_penalty = 0.0f;
    x[6] = -50.0f;
    x[5] = 3.0f;
    EXPECT_PROCESSED(&p, x, prompt, 2, gen, 4, 5, 4.0f);
    sampler_free(s);
}

TEST(bias_then_repetition_then_presence)
{
    struct sampler *s = sampler_new(PEN_V);
    float x[PEN_V];
    pen_logits(x);
    struct sampler_bias bias[] = {{5, 1.0f}};
    struct sampler_params p = params(0.0f);
    p.logit_bias = bias;
    p.n_logit_bias = 1;
    p.repetition_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    int32_t gen[] = {5};
    x[5] = 3.0f;
    EXPECT_PROCESSED(&p, x, NULL, 0, gen, 1, 5, (3.0f + 1.0f) / 2.0f - 0.5f);
    /* The bias flips the sign before the repetition penalty sees it:
     * (1 - 3) * 2 - 0.5, not 1 / 2 - 3 - 0.5. */
    bias[0].bias = -3.0f;
    x[5] = 1.0f;
    EXPECT_PROCESSED(&p, x, NULL, 0, gen, 1, 5, (1.0f - 3.0f) * 2.0f - 0.5f);
    /* Repeated bias entries add up. */
    struct sampler_bias twice[] = {{5, 1.0f}, {5, 1.5f}};
    struct sampler_params q = params(0.0f);
    q.logit_bias = twice;
    q.n_logit_bias = 2;
    EXPECT_PROCESSED(&q, x, NULL, 0, NULL, 0, 5, 3.5f);
    sampler_free(s);
}

TEST(logit_bias_bans_and_forces)
{
    int V = 1000;
    float *x = random_logits(V, 1.0, 31);
    struct sampler *s = sampler_new(V);
    struct sampler_params g = params(0.0f);
    int32_t best = sample_at(s, &g, x, 0);
    int32_t worst = 0;
    for (int i = 0; i < V; i++)
        if (x[i] < x[worst]) worst = i;

    struct sampler_bias ban = {best, -100.0f};
    struct sampler_params p = params(1.0f);
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    g.logit_bias = &ban;
    g.n_logit_bias = 1;
    EXPECT(sample_at(s, &g, x, 0) != best);
    int seen_best = 0;
    for (int pos = 0; pos < 3000; pos++)
        seen_best += sample_at(s, &p, x, pos) == best;
    EXPECT_EQ_INT(seen_best, 0);

    struct sampler_bias force = {worst, 100.0f};
    p.logit_bias = &force;
    g.logit_bias = &force;
    EXPECT_EQ_INT(sample_at(s, &g, x, 0), worst);
    int forced = 0;
    for (int pos = 0; pos < 3000; pos++)
        forced += sample_at(s, &p, x, pos) == worst;
    EXPECT_EQ_INT(forced, 3000);
    /* Forcing also wins against top-k, top-p and min-p. */
    p.top_k = 40;
    p.top_p = 0.5f;
    p.min_p = 0.1f;
    EXPECT_EQ_INT(sample_at(s, &p, x, 9), worst);
    free(x);
    sampler_free(s);
}

/* ---- randomness ---- */

TEST(same_seed_and_position_same_token_in_any_order)
{
    int V = 5000, N = 200;
    float *x = random_logits(V, 1.5, 41);
    struct sampler *s = sampler_new(V);
    struct sampler_params a = params(1.0f);
    a.seed = 42;
    a.top_p = 0.95f;
    int32_t first[200];
    for (int pos = 0; pos < N; pos++)
        first[pos] = sample_at(s, &a, x, pos);

    /* A fresh sampler ("another machine"), positions backwards, every call
     * interleaved with other seeds and other parameters on the same object. */
    struct sampler *s2 = sampler_new(V);
    struct sampler_params b = params(0.7f);
    b.seed = 7;
    b.top_k = 40;
    int same = 0, same_other_seed = 0;
    for (int pos = N - 1; pos >= 0; pos--) {
        (void)sample_at(s2, &b, x, pos);
        same += sample_at(s2, &a, x, pos) == first[pos];
        b.seed++;
    }
    EXPECT_EQ_INT(same, N);
    struct sampler_params c = a;
    c.seed = 43;
    for (int pos = 0; pos < N; pos++)
        same_other_seed += sample_at(s, &c, x, pos) == first[pos];
    EXPECT(same_other_seed < N / 2);

    /* The uniform itself. */
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        double u = sampler_uniform(99, i);
        EXPECT(u >= 0.0 && u < 1.0);
        sum += u;
    }
    EXPECT_NEAR(sum / 10000, 0.5, 0.01);
    EXPECT(sampler_uniform(1, 5) == sampler_uniform(1, 5));
    EXPECT(sampler_uniform(1, 5) != sampler_uniform(2, 5));
    EXPECT(sampler_uniform(1, 5) != sampler_uniform(1, 6));
    free(x);
    sampler_free(s);
    sampler_free(s2);
}

/* Pearson chi-square of counts against probabilities. */
static double chi_square(const int *count, const double *prob, int k, int n)
{
    double chi = 0;
    for (int i = 0; i < k; i++) {
        double e = prob[i] * n;
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    return chi;
}

TEST(draws_follow_the_distribution)
{
    const double prob[] = {0.1, 0.2, 0.3, 0.4};
    float x[4];
    for (int i = 0; i < 4; i++)
        x[i] = (float)log(prob[i]);
    struct sampler *s = sampler_new(4);
    struct sampler_params p = params(1.0f);
    p.seed = 1234;
    int N = 20000, count[4] = {0};
    for (int pos = 0; pos < N; pos++) {
        int32_t t = sample_at(s, &p, x, pos);
        if (t >= 0 && t < 4) count[t]++;
    }
    double chi = chi_square(count, prob, 4, N);
    printf("  chi-square (3 dof, 20000 draws) = %.3f\n", chi);
    EXPECT(chi < 16.27); /* p = 0.001 */

    /* Temperature 2 flattens to p^(1/2) normalized; top-k 3 renormalizes. */
    p.temperature = 2.0f;
    double tp[4], z = 0;
    for (int i = 0; i < 4; i++)
        z += tp[i] = sqrt(prob[i]);
    for (int i = 0; i < 4; i++)
        tp[i] /= z;
    memset(count, 0, sizeof(count));
    for (int pos = 0; pos < N; pos++)
        count[sample_at(s, &p, x, pos) & 3]++;
    EXPECT(chi_square(count, tp, 4, N) < 16.27);

    p.temperature = 1.0f;
    p.top_k = 3;
    const double kp[] = {0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9};
    memset(count, 0, sizeof(count));
    for (int pos = 0; pos < N; pos++)
        count[sample_at(s, &p, x, pos) & 3]++;
    EXPECT_EQ_INT(count[0], 0);
    EXPECT(chi_square(count + 1, kp, 3, N) < 13.82); /* 2 dof, p = 0.001 */
    sampler_free(s);
}

/* ---- logprobs ---- */

TEST(logprobs_are_raw_log_softmax)
{
    float x[] = {1.0f, 2.0f, 3.0f, 0.5f, NAN, -INFINITY, 3.0f};
    int V = ARRAY_LEN(x);
    double lse = 0;
    for (int i = 0; i < V; i++)
        if (isfinite(x[i])) lse += exp((double)x[i] - 3.0);
    lse = 3.0 + log(lse);

    struct sampler *s = sampler_new(V);
    struct sampler_params p = params(0.0f);
    p.logprobs = true;
    p.n_logprobs = 3;
    struct sampler_result r;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, NULL, 0, 0, &r), 0);
    EXPECT_EQ_INT(r.token, 2);
    EXPECT_NEAR(r.logprob, 3.0 - lse, 2e-6);
    EXPECT_EQ_INT(r.n_top, 3);
    EXPECT_EQ_INT(r.top[0].token, 2); /* tie of 2 and 6: id order */
    EXPECT_EQ_INT(r.top[1].token, 6);
    EXPECT_EQ_INT(r.top[2].token, 1);
    EXPECT_NEAR(r.top[0].logprob, 3.0 - lse, 2e-6);
    EXPECT_NEAR(r.top[1].logprob, 3.0 - lse, 2e-6);
    EXPECT_NEAR(r.top[2].logprob, 2.0 - lse, 2e-6);

    /* Bias, penalties and temperature change the token, not the logprobs. */
    struct sampler_bias bias = {3, 10.0f};
    int32_t gen[] = {2, 6};
    p.logit_bias = &bias;
    p.n_logit_bias = 1;
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 1.0f;
    p.temperature = 0.7f;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, gen, 2, 2, &r), 0);
    EXPECT_EQ_INT(r.token, 3);
    EXPECT_NEAR(r.logprob, 0.5 - lse, 2e-6);
    EXPECT_EQ_INT(r.top[0].token, 2);
    EXPECT_NEAR(r.top[2].logprob, 2.0 - lse, 2e-6);

    /* More alternatives asked than finite logits exist. */
    p.n_logprobs = 20;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, NULL, 0, 0, &r), 0);
    EXPECT_EQ_INT(r.n_top, 5);
    EXPECT_EQ_INT(r.top[4].token, 3);
    EXPECT_NEAR(r.top[4].logprob, 0.5 - lse, 2e-6);
    double mass = 0;
    for (int i = 0; i < r.n_top; i++)
        mass += exp(r.top[i].logprob);
    EXPECT_NEAR(mass, 1.0, 1e-5);

    /* Off: nothing reported. */
    p.logprobs = false;
    p.n_logprobs = 0;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, NULL, 0, 0, &r), 0);
    EXPECT_EQ_INT(r.n_top, 0);
    EXPECT(r.logprob == 0.0f);
    sampler_free(s);
}

TEST(logprobs_on_large_vocab_match_double_reference)
{
    int V = 50000;
    float *x = random_logits(V, 3.0, 51);
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        m = fmax(m, x[i]);
    for (int i = 0; i < V; i++)
        sum += exp((double)x[i] - m);
    double lse = m + log(sum);
    struct sampler *s = sampler_new(V);
    const float temps[] = {1.0f, 0.8f};
    for (size_t k = 0; k < ARRAY_LEN(temps); k++) {
        struct sampler_params p = params(temps[k]);
        p.logprobs = true;
        p.n_logprobs = 5;
        for (int pos = 0; pos < 20; pos++) {
            struct sampler_result r;
            EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, NULL, 0, pos, &r), 0);
            EXPECT_NEAR(r.logprob, x[r.token] - lse, 1e-5);
            for (int i = 1; i < r.n_top; i++)
                EXPECT(r.top[i].logprob <= r.top[i - 1].logprob);
        }
    }
    free(x);
    sampler_free(s);
}

/* ---- validation and errors ---- */

struct bad_case {
    const char *field; /* must appear in the message */
    void (*mutate)(struct sampler_params *p);
};

static void bad_temp(struct sampler_params *p)
{
    p->temperature = -0.5f;
}
static void bad_temp_nan(struct sampler_params *p)
{
    p->temperature = NAN;
}
static void bad_top_k(struct sampler_params *p)
{
    p->top_k = -1;
}
static void bad_top_p0(struct sampler_params *p)
{
    p->top_p = 0.0f;
}
static void bad_top_p(struct sampler_params *p)
{
    p->top_p = 1.5f;
}
static void bad_min_p(struct sampler_params *p)
{
    p->min_p = -0.1f;
}
static void bad_min_p1(struct sampler_params *p)
{
    p->min_p = 1.01f;
}
static void bad_rep(struct sampler_params *p)
{
    p->repetition_penalty = 0.0f;
}
static void bad_rep_inf(struct sampler_params *p)
{
    p->repetition_penalty = INFINITY;
}
static void bad_window(struct sampler_params *p)
{
    p->repetition_window = -3;
}
static void bad_presence(struct sampler_params *p)
{
    p->presence_penalty = NAN;
}
static void bad_frequency(struct sampler_params *p)
{
    p->frequency_penalty = -INFINITY;
}
static void bad_n_logprobs(struct sampler_params *p)
{
    p->logprobs = true;
    p->n_logprobs = 21;
}
static void bad_n_logprobs_off(struct sampler_params *p)
{
    p->n_logprobs = 2;
}
static void bad_n_bias(struct sampler_params *p)
{
    p->n_logit_bias = -1;
}
static void bad_bias_null(struct sampler_params *p)
{
    p->n_logit_bias = 1;
    p->logit_bias = NULL;
}
static const struct sampler_bias bias_far[] = {{0, 1.0f}, {100, 1.0f}};
static void bad_bias_token(struct sampler_params *p)
{
    p->logit_bias = bias_far;
    p->n_logit_bias = 2;
}
static const struct sampler_bias bias_neg[] = {{-1, 1.0f}};
static void bad_bias_neg(struct sampler_params *p)
{
    p->logit_bias = bias_neg;
    p->n_logit_bias = 1;
}
static const struct sampler_bias bias_nan[] = {{3, NAN}};
static void bad_bias_val(struct sampler_params *p)
{
    p->logit_bias = bias_nan;
    p->n_logit_bias = 1;
}

TEST(validation_names_the_field)
{
    const struct bad_case cases[] = {
        {"temperature", bad_temp},
        {"temperature", bad_temp_nan},
        {"top_k", bad_top_k},
        {"top_p", bad_top_p0},
        {"top_p", bad_top_p},
        {"min_p", bad_min_p},
        {"min_p", bad_min_p1},
        {"repetition_penalty", bad_rep},
        {"repetition_penalty", bad_rep_inf},
        {"repetition_window", bad_window},
        {"presence_penalty", bad_presence},
        {"frequency_penalty", bad_frequency},
        {"n_logprobs", bad_n_logprobs},
        {"n_logprobs", bad_n_logprobs_off},
        {"n_logit_bias", bad_n_bias},
        {"logit_bias", bad_bias_null},
        {"logit_bias[1].token", bad_bias_token},
        {"logit_bias[0].token", bad_bias_neg},
        {"logit_bias[0].bias", bad_bias_val},
    };
    float x[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)i / 10;
    struct sampler *s = sampler_new(100);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct sampler_params p;
        sampler_params_default(&p);
        EXPECT_EQ_INT(sampler_params_validate(&p, 100, NULL), 0);
        cases[i].mutate(&p);
        struct err_msg m = {{0}};
        EXPECT_EQ_INT(sampler_params_validate(&p, 100, &m), ERR_INVALID);
        if (!strstr(m.text, cases[i].field)) {
            fprintf(stderr, "  case %zu: message '%s' does not name '%s'\n", i, m.text,
                    cases[i].field);
            test_failures_in_case++;
        }
        /* sampler_sample refuses the same and leaves *out alone. */
        struct sampler_result r, before;
        memset(&r, 0xab, sizeof(r));
        before = r;
        EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, NULL, 0, 0, &r), ERR_INVALID);
        EXPECT(memcmp(&r, &before, sizeof(r)) == 0);
    }
    /* Edges that are valid. */
    struct sampler_params p = params(0.0f);
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.top_k = 1000000;
    p.logprobs = true;
    p.n_logprobs = 20;
    EXPECT_EQ_INT(sampler_params_validate(&p, 100, NULL), 0);
    sampler_free(s);
}

TEST(bad_call_arguments_leave_no_trace)
{
    int V = 64;
    float *x = random_logits(V, 1.0, 61);
    struct sampler *s = sampler_new(V);
    struct sampler_params p = params(0.9f);
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.3f;
    int32_t good[] = {1, 2, 3, 1};
    int32_t bad_prompt[] = {1, 2, 64};
    int32_t bad_gen[] = {5, -1};
    struct sampler_result want, r, before;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, good, 4, good, 4, 8, &want), 0);

    memset(&r, 0x5a, sizeof(r));
    before = r;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, bad_prompt, 3, good, 4, 7, &r), ERR_INVALID);
    EXPECT_EQ_INT(sampler_sample(s, &p, x, good, 4, bad_gen, 2, 6, &r), ERR_INVALID);
    EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 4, good, 4, 8, &r), ERR_INVALID);
    EXPECT_EQ_INT(sampler_sample(s, &p, x, good, 4, good, -1, 8, &r), ERR_INVALID);
    EXPECT_EQ_INT(sampler_sample(s, &p, x, good, 4, good, 4, -1, &r), ERR_INVALID);
    EXPECT_EQ_INT(sampler_sample(s, &p, NULL, good, 4, good, 4, 8, &r), ERR_INVALID);
    EXPECT(memcmp(&r, &before, sizeof(r)) == 0);
    /* An id outside the window is not read, so it is not an error. */
    p.repetition_window = 2;
    p.frequency_penalty = 0.0f;
    EXPECT_EQ_INT(sampler_sample(s, &p, x, bad_prompt, 2, good, 4, 7, &r), 0);
    p.repetition_window = 0;
    p.frequency_penalty = 0.3f;

    /* The failed calls left no override behind: same answer as before. */
    EXPECT_EQ_INT(sampler_sample(s, &p, x, good, 4, good, 4, 8, &r), 0);
    EXPECT_EQ_INT(r.token, want.token);
    struct sampler_params plain = params(0.0f);
    struct sampler *fresh = sampler_new(V);
    EXPECT_EQ_INT(sample_at(s, &plain, x, 0), sample_at(fresh, &plain, x, 0));

    /* No finite logit at all. */
    float dead[4] = {NAN, -INFINITY, INFINITY, NAN};
    struct sampler *s4 = sampler_new(4);
    EXPECT_EQ_INT(sampler_sample(s4, &plain, dead, NULL, 0, NULL, 0, 0, &r), ERR_INVALID);
    EXPECT_EQ_INT(sampler_sample(s4, &p, dead, NULL, 0, NULL, 0, 0, &r), ERR_INVALID);
    dead[3] = -1e30f; /* one finite token: always it */
    EXPECT_EQ_INT(sampler_sample(s4, &p, dead, NULL, 0, NULL, 0, 0, &r), 0);
    EXPECT_EQ_INT(r.token, 3);
    EXPECT(sampler_new(0) == NULL);
    free(x);
    sampler_free(s);
    sampler_free(fresh);
    sampler_free(s4);
}

TEST(extreme_values_stay_finite)
{
    float x[] = {FLT_MAX, -FLT_MAX, 0.0f, -0.0f, 1e-30f, 3e38f};
    struct sampler *s = sampler_new(ARRAY_LEN(x));
    struct sampler_bias bias[] = {{0, 3e38f}, {1, -3e38f}, {2, 1e30f}};
    int32_t gen[] = {0, 0, 1, 2, 5};
    struct sampler_params p = params(1e-38f);
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    p.repetition_penalty = 1e-30f;
    p.frequency_penalty = 3e38f;
    p.top_p = 0.5f;
    for (int pos = 0; pos < 50; pos++) {
        struct sampler_result r;
        EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, gen, 5, pos, &r), 0);
        EXPECT(r.token >= 0 && r.token < (int)ARRAY_LEN(x));
    }
    p.temperature = 1e-45f; /* 1 / T overflows */
    p.top_p = 1.0f;
    for (int pos = 0; pos < 50; pos++) {
        struct sampler_result r;
        EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, NULL, 0, pos, &r), 0);
        EXPECT_EQ_INT(r.token, 0); /* the max, FLT_MAX (bias saturates there) */
    }
    p.temperature = 3e38f;
    p.min_p = 1.0f;
    for (int pos = 0; pos < 50; pos++) {
        struct sampler_result r;
        EXPECT_EQ_INT(sampler_sample(s, &p, x, NULL, 0, gen, 5, pos, &r), 0);
        EXPECT(r.token >= 0 && r.token < (int)ARRAY_LEN(x));
    }
    sampler_free(s);
}

/* ---- the two ranking paths agree bit for bit ---- */

/* Without top-k the sampler ranks lazily by weight buckets; with top-k it
 * heap-selects and sorts. Give the vocabulary one hopeless token (weight
 * exactly 0) and top_k = V - 1 keeps everything else: the definition then
 * gives the same token, so both paths must agree at every position. */
static void paths_agree_on(const float *x, int V, struct sampler_params p, const int32_t *prompt,
                           int n_prompt, const int32_t *gen, int n_gen, int n_pos, const char *what)
{
    struct sampler *s = sampler_new(V);
    struct sampler_params k = p;
    p.top_k = 0;
    k.top_k = V - 1;
    int differ = 0;
    for (int pos = 0; pos < n_pos; pos++) {
        struct sampler_result a, b;
        EXPECT_EQ_INT(sampler_sample(s, &p, x, prompt, n_prompt, gen, n_gen, pos, &a), 0);
        EXPECT_EQ_INT(sampler_sample(s, &k, x, prompt, n_prompt, gen, n_gen, pos, &b), 0);
        differ += a.token != b.token;
    }
    if (differ) {
        fprintf(stderr, "  %s, T %g top_p %g min_p %g: %d of %d positions differ\n", what,
                (double)p.temperature, (double)p.top_p, (double)p.min_p, differ, n_pos);
        test_failures_in_case++;
    }
    sampler_free(s);
}

static void paths_agree(double sigma, struct sampler_params p, const int32_t *prompt, int n_prompt,
                        const int32_t *gen, int n_gen, int n_pos)
{
    int V = 20000;
    float *x = random_logits(V, sigma, 71 + (uint64_t)(sigma * 100));
    x[V / 2] = -1e30f; /* the hopeless token */
    char what[64];
    snprintf(what, sizeof(what), "sigma %g", sigma);
    paths_agree_on(x, V, p, prompt, n_prompt, gen, n_gen, n_pos, what);
    free(x);
}

TEST(lazy_ranking_equals_full_sort)
{
    int32_t prompt[200], gen[50];
    for (int i = 0; i < 200; i++)
        prompt[i] = (i * 7919) % 20000;
    for (int i = 0; i < 50; i++)
        gen[i] = (i * 104729) % 20000;
    struct sampler_bias bias[] = {{17, 2.0f}, {18, -100.0f}};
    const double sigmas[] = {0.3, 2.0, 6.0};
    const float temps[] = {0.6f, 1.0f, 4.0f};
    const float top_ps[] = {1.0f, 0.9f, 0.999f};
    const float min_ps[] = {0.0f, 0.05f};
    for (size_t a = 0; a < ARRAY_LEN(sigmas); a++)
        for (size_t b = 0; b < ARRAY_LEN(temps); b++)
            for (size_t c = 0; c < ARRAY_LEN(top_ps); c++)
                for (size_t d = 0; d < ARRAY_LEN(min_ps); d++) {
                    struct sampler_params p = params(temps[b]);
                    p.top_p = top_ps[c];
                    p.min_p = min_ps[d];
                    p.seed = a * 100 + b * 10 + c;
                    paths_agree(sigmas[a], p, NULL, 0, NULL, 0, 40);
                }
    struct sampler_params p = params(0.8f);
    p.top_p = 0.95f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.2f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    paths_agree(2.0, p, prompt, 200, gen, 50, 200);

    /* Weights at the bottom of their buckets, exact ties, and many tokens per
     * bucket, so that estimates are off and bands are large. */
    int V = 40000;
    float *x = xmalloc((size_t)V * sizeof(*x));
    for (int i = 0; i < V; i++)
        x[i] = -(float)((i * 37) % 160 + 1) / 8.0f + 1e-4f;
    x[V - 1] = 0.0f;
    x[V / 2] = -1e30f;
    const float deep_ps[] = {1.0f, 0.999f, 0.5f};
    for (size_t c = 0; c < ARRAY_LEN(deep_ps); c++) {
        struct sampler_params q = params(1.0f);
        q.top_p = deep_ps[c];
        q.seed = 5;
        paths_agree_on(x, V, q, NULL, 0, NULL, 0, 100, "bucket edges");
        q.min_p = 0.01f;
        paths_agree_on(x, V, q, NULL, 0, NULL, 0, 100, "bucket edges");
    }
    free(x);

    /* One token at weight 1 and 60000 at e^-15.9, just inside the open last
     * bucket, where the lazy path's mass estimate is 30% low: a top-p of
     * 0.9928 ends inside that bucket, but the estimate says the head alone
     * suffices, so the walk must come back for a second band. */
    V = 60002;
    x = xmalloc((size_t)V * sizeof(*x));
    for (int i = 0; i < V; i++)
        x[i] = -15.9f;
    x[7] = 0.0f;
    x[V / 2] = -1e30f;
    struct sampler_params q = params(1.0f);
    q.top_p = 0.9928f;
    paths_agree_on(x, V, q, NULL, 0, NULL, 0, 50, "second band");
    q.top_p = 1.0f;
    paths_agree_on(x, V, q, NULL, 0, NULL, 0, 300, "second band");
    free(x);
}

/* ---- masks: the sparse list path equals the dense path ---- */

/* Everything a result holds, compared bit for bit. */
static bool same_result(const struct sampler_result *a, const struct sampler_result *b)
{
    if (a->token != b->token || a->n_top != b->n_top) return false;
    if (memcmp(&a->logprob, &b->logprob, sizeof(float))) return false;
    for (int i = 0; i < a->n_top; i++)
        if (a->top[i].token != b->top[i].token ||
            memcmp(&a->top[i].logprob, &b->top[i].logprob, sizeof(float)))
            return false;
    return true;
}

/* A mask with n_allow random ids of V (some listed twice: set once). */
static void random_mask(uint64_t *mask, int V, int n_allow)
{
    memset(mask, 0, sizeof(uint64_t) * (size_t)((V + 63) / 64));
    for (int i = 0; i < n_allow; i++) {
        int id = (int)(rng_uniform() * V);
        mask[id >> 6] |= 1ull << (id & 63);
    }
}

/* A mask that allows few tokens (at most V / 16) is walked as a list of ids;
 * one that allows more fills a masked copy of the row. The definitions are
 * the same, so: the result with the mask must equal the result of the
 * unmasked sampler on the logits with every disallowed token set to -inf -
 * tokens, logprobs and alternatives, bit for bit - for any parameters, with
 * penalties and biases on allowed and disallowed tokens, and with sparse and
 * dense masks alternating on one sampler (masked scratch reused). */
TEST(sparse_mask_equals_dense_definition)
{
    int V = 50000;
    float *x = random_logits(V, 2.0, 123);
    x[3] = 0.0f; /* +0 and -0 both allowed below: the max must pick as the dense scan */
    x[4] = -0.0f;
    x[5] = NAN;
    x[6] = INFINITY;
    float *xm = xmalloc((size_t)V * sizeof(*xm));
    uint64_t *mask = xmalloc(sizeof(uint64_t) * (size_t)((V + 63) / 64));
    struct sampler *s = sampler_new(V), *ref = sampler_new(V);
    int32_t prompt[40], gen[20];
    for (int i = 0; i < 40; i++)
        prompt[i] = (i * 7919) % V;
    for (int i = 0; i < 20; i++)
        gen[i] = (i * 104729) % V;
    const int sizes[] = {1, 2, 7, 60, 900, V / 20, V / 16, V / 16 + 1, V / 3};
    int checked = 0, differ = 0;
    rng_state = 9;
    for (size_t a = 0; a < ARRAY_LEN(sizes); a++) {
        for (int variant = 0; variant < 8; variant++) {
            random_mask(mask, V, sizes[a]);
            for (int i = 3; i < 7; i++)
                mask[0] |= (variant & 1) ? 1ull << i : 0;
            struct sampler_bias bias[3];
            struct sampler_params p = params(variant == 2 ? 0.0f : (variant == 5 ? 3.0f : 0.7f));
            p.top_k = variant == 3 ? 5 : 0;
            p.top_p = variant == 4 ? 0.6f : 1.0f;
            p.min_p = variant == 6 ? 0.1f : 0.0f;
            p.logprobs = variant % 2 == 0;
            p.n_logprobs = p.logprobs ? 4 : 0;
            if (variant >= 6) { /* bias an allowed token and a (probably) forbidden one */
                int on = -1;
                for (int i = 0; i < V && on < 0; i++)
                    if ((mask[i >> 6] >> (i & 63)) & 1) on = i;
                bias[0] = (struct sampler_bias){on, 3.0f};
                bias[1] = (struct sampler_bias){(on + 1) % V, 50.0f};
                bias[2] = (struct sampler_bias){prompt[1], -2.0f};
                p.logit_bias = bias;
                p.n_logit_bias = 3;
                p.repetition_penalty = 1.3f;
                p.presence_penalty = 0.4f;
                p.frequency_penalty = 0.2f;
            }
            for (int i = 0; i < V; i++)
                xm[i] = (mask[i >> 6] >> (i & 63)) & 1 ? x[i] : -INFINITY;
            bool any = false;
            for (int i = 0; i < V; i++)
                any |= xm[i] >= -FLT_MAX && xm[i] <= FLT_MAX;
            for (int pos = 0; pos < 12; pos++) {
                struct sampler_params q = p;
                q.seed = (uint64_t)(a * 100 + (size_t)variant);
                struct sampler_result r1, r2;
                memset(&r1, 0, sizeof(r1));
                memset(&r2, 0, sizeof(r2));
                int rc2 = sampler_sample(ref, &q, xm, prompt, 40, gen, 20, pos, &r2);
                q.allowed = mask;
                int rc1 = sampler_sample(s, &q, x, prompt, 40, gen, 20, pos, &r1);
                EXPECT_EQ_INT(rc1, rc2);
                EXPECT_EQ_INT(rc1, any ? 0 : ERR_INVALID);
                checked++;
                if (rc1 == 0 && rc2 == 0 && !same_result(&r1, &r2)) {
                    if (differ++ < 3)
                        fprintf(stderr, "  %d allowed, variant %d, position %d: token %d vs %d\n",
                                sizes[a], variant, pos, (int)r1.token, (int)r2.token);
                    test_failures_in_case++;
                }
                if (rc1 == 0) EXPECT((mask[r1.token >> 6] >> (r1.token & 63)) & 1);
            }
        }
    }
    EXPECT(checked == (int)ARRAY_LEN(sizes) * 8 * 12);
    free(x);
    free(xm);
    free(mask);
    sampler_free(s);
    sampler_free(ref);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t ka = *(const uint64_t *)a, kb = *(const uint64_t *)b;
    return ka < kb ? -1 : ka > kb;
}

TEST(top_p_on_large_vocab_matches_double_reference)
{
    /* The kept set computed independently (qsort, libm exp in double); the
     * sampler's cut may differ from it only by rounding at the boundary. */
    int V = 30000;
    float *x = random_logits(V, 2.0, 81);
    float T = 0.8f, top_p = 0.9f;
    double *w = xmalloc((size_t)V * sizeof(*w));
    uint64_t *keys = xmalloc((size_t)V * sizeof(*keys)); /* (z desc, id asc) */
    int *rank_of = xmalloc((size_t)V * sizeof(*rank_of));
    float m = x[0];
    for (int i = 0; i < V; i++)
        m = fmaxf(m, x[i]);
    double total = 0;
    for (int i = 0; i < V; i++) {
        total += w[i] = exp(((double)x[i] - m) / T);
        uint32_t u;
        memcpy(&u, &x[i], sizeof(u));
        u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
        keys[i] = ((uint64_t)~u << 32) | (uint32_t)i;
    }
    qsort(keys, (size_t)V, sizeof(*keys), cmp_u64);
    double c = 0;
    int L = 0;
    for (int j = 0; j < V; j++) {
        int id = (int)(uint32_t)keys[j];
        rank_of[id] = j;
        if (!L) {
            c += w[id];
            if (c >= top_p * total) L = j + 1;
        }
    }
    struct sampler *s = sampler_new(V);
    struct sampler_params p = params(T);
    p.top_p = top_p;
    int max_rank = 0;
    for (int pos = 0; pos < 500; pos++) {
        int32_t t = sample_at(s, &p, x, pos);
        if (t < 0) continue;
        EXPECT(rank_of[t] <= L); /* L - 1 is the last kept; one more for rounding */
        if (rank_of[t] > max_rank) max_rank = rank_of[t];
    }
    printf("  top-p %.2f keeps %d of %d tokens; deepest drawn rank %d\n", (double)top_p, L, V,
           max_rank);
    EXPECT(max_rank > L / 2);
    free(x);
    free(w);
    free(keys);
    free(rank_of);
    sampler_free(s);
}

/* ---- pinned numerics ---- */

/* Tokens and logprob bits over a spread of parameters, hashed. A request
 * migrated between two builds continues identically only if this does not
 * move: if a change here is deliberate, it is a numerics version change. */
TEST(results_are_pinned)
{
    int V = 5000;
    /* Inputs from integer arithmetic only (no libm), so that they are the
     * same bits everywhere: a sum of four uniforms, roughly normal. */
    float *x = xmalloc((size_t)V * sizeof(*x));
    rng_state = 101;
    for (int i = 0; i < V; i++) {
        double u = rng_uniform() + rng_uniform() + rng_uniform() + rng_uniform();
        x[i] = (float)((u - 2.0) * 5.0);
    }
    x[3] = NAN;
    x[4] = -INFINITY;
    int32_t prompt[] = {1, 2, 3, 7, 7, 9};
    int32_t gen[] = {11, 7, 12};
    struct sampler_bias bias[] = {{20, 5.0f}, {21, -100.0f}};
    const float temps[] = {0.0f, 0.6f, 1.0f, 1.7f};
    struct sampler *s = sampler_new(V);
    uint64_t h = 1469598103934665603ull;
    for (int variant = 0; variant < 8; variant++) {
        struct sampler_params p = params(temps[variant % 4]);
        p.seed = 1000 + (uint64_t)variant;
        p.logprobs = true;
        p.n_logprobs = 3;
        if (variant >= 4) {
            p.top_k = variant == 4 ? 50 : 0;
            p.top_p = 0.9f;
            p.min_p = variant == 6 ? 0.02f : 0.0f;
            p.repetition_penalty = 1.2f;
            p.presence_penalty = 0.3f;
            p.frequency_penalty = 0.2f;
            p.logit_bias = bias;
            p.n_logit_bias = 2;
        }
        for (int pos = 9; pos < 29; pos++) {
            struct sampler_result r;
            EXPECT_EQ_INT(sampler_sample(s, &p, x, prompt, 6, gen, 3, pos, &r), 0);
            uint32_t words[2 + 2 * SAMPLER_MAX_LOGPROBS];
            int n = 0;
            words[n++] = (uint32_t)r.token;
            memcpy(&words[n++], &r.logprob, 4);
            for (int i = 0; i < r.n_top; i++) {
                words[n++] = (uint32_t)r.top[i].token;
                memcpy(&words[n++], &r.top[i].logprob, 4);
            }
            const uint8_t *b = (const uint8_t *)words;
            for (size_t i = 0; i < (size_t)n * 4; i++)
                h = (h ^ b[i]) * 1099511628211ull;
        }
    }
    if (h != 0x7e8cd2e660e2a2aeull) {
        fprintf(stderr, "  results digest %016llx differs from the pinned one\n",
                (unsigned long long)h);
        test_failures_in_case++;
    }
    free(x);
    sampler_free(s);
}

/* ---- speed (printed, not asserted) ---- */

/* Best of 15 rounds of 12 calls: other work on the (shared) machine only
 * adds time. Positions differ between calls so that the draws do. */
static void time_case(struct sampler *s, const char *name, const struct sampler_params *p,
                      const float *x, const int32_t *prompt, int n_prompt, const int32_t *gen,
                      int n_gen)
{
    struct sampler_result r;
    double best = INFINITY;
    for (int round = 0; round < 15; round++) {
        uint64_t t0 = time_now_ns();
        for (int pos = 0; pos < 12; pos++) {
            int rc = sampler_sample(s, p, x, prompt, n_prompt, gen, n_gen, round * 12 + pos, &r);
            CHECK(rc == 0);
        }
        double us = (double)(time_now_ns() - t0) / 12 / 1e3;
        if (us < best) best = us;
    }
    printf("  %-44s %8.1f us/call\n", name, best);
}

TEST(speed_on_151936_vocab)
{
    int V = 151936;
    struct sampler *s = sampler_new(V);
    int32_t prompt[2000], gen[200];
    for (int i = 0; i < 2000; i++)
        prompt[i] = (i * 7919) % V;
    for (int i = 0; i < 200; i++)
        gen[i] = (i * 104729) % V;
    /* A model-like row (a bulk around 0 and a few dozen plausible tokens far
     * above it), then two flat ones; flat rows make top-p and the draw rank
     * deep into the vocabulary, the worst case of the lazy path. */
    const char *names[] = {"peaked: N(0, 2^2) + 32 tokens at 10..20", "N(0, 4^2)", "N(0, 2^2)"};
    for (int k = 0; k < 3; k++) {
        float *x = random_logits(V, k == 1 ? 4.0 : 2.0, 91);
        if (k == 0)
            for (int i = 0; i < 32; i++)
                x[(i * 4099 + 17) % V] = (float)(10.0 + 10.0 * rng_uniform());
        printf("  logits %s:\n", names[k]);
        struct sampler_params p = params(0.0f);
        time_case(s, "greedy", &p, x, NULL, 0, NULL, 0);
        p.logprobs = true;
        p.n_logprobs = 5;
        time_case(s, "greedy + logprobs(5)", &p, x, NULL, 0, NULL, 0);
        p = params(0.8f);
        p.top_k = 40;
        time_case(s, "T 0.8, top-k 40", &p, x, NULL, 0, NULL, 0);
        p = params(0.8f);
        p.top_p = 0.9f;
        time_case(s, "T 0.8, top-p 0.9", &p, x, NULL, 0, NULL, 0);
        p = params(1.0f);
        time_case(s, "T 1 (no filter)", &p, x, NULL, 0, NULL, 0);
        p.logprobs = true;
        time_case(s, "T 1 + logprobs", &p, x, NULL, 0, NULL, 0);
        p = params(0.8f);
        p.min_p = 0.05f;
        time_case(s, "T 0.8, min-p 0.05", &p, x, NULL, 0, NULL, 0);
        p = params(0.8f);
        p.top_k = 40;
        p.top_p = 0.95f;
        p.min_p = 0.05f;
        p.repetition_penalty = 1.1f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.5f;
        time_case(s, "llama.cpp-like + penalties over 2200 tokens", &p, x, prompt, 2000, gen, 200);
        /* grammar masks: a structural position (few tokens, listed) and
         * free text (most tokens, a masked copy of the row) */
        uint64_t *mask = xmalloc(sizeof(uint64_t) * (size_t)((V + 63) / 64));
        random_mask(mask, V, 2000);
        p = params(1.0f);
        p.allowed = mask;
        time_case(s, "T 1, mask allowing ~2,000 tokens", &p, x, NULL, 0, NULL, 0);
        random_mask(mask, V, 150000); /* ~63% of the vocabulary */
        time_case(s, "T 1, mask allowing ~95,000 tokens", &p, x, NULL, 0, NULL, 0);
        free(mask);
        free(x);
    }
    sampler_free(s);
}

TEST_MAIN()
