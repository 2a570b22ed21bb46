/*
 * bench_workload.c - length distributions, synthetic workload shapes,
 * arrival processes, block -> token rendering and the ideal prefix-cache hit
 * ratio (see bench_workload.h for the model).
 *
 * Synthetic shapes are built from whole blocks: the shared system prompt and
 * every interior piece of a growing conversation are rounded up to whole
 * blocks (only a request's final piece may end inside a block), because the
 * block list can only describe a partial block at the end. With the default
 * 16-token synthetic block this changes lengths by less than 16 tokens.
 *
 * Random variates: splitmix64 (base/rng.h) -> uniform doubles -> Box-Muller
 * normals, Marsaglia-Tsang gammas ("A simple method for generating gamma
 * variables", ACM TOMS 2000). Same seed, same workload, on every machine.
 */
#include "bench/bench_workload.h"

#include "base/check.h"
#include "base/rng.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- distributions ---- */

double bench_rand_unit(uint64_t *rng)
{
    return (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double bench_rand_normal(uint64_t *rng)
{
    double u = bench_rand_unit(rng), v = bench_rand_unit(rng);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

double bench_rand_gamma(double shape, uint64_t *rng)
{
    CHECK(shape > 0);
    if (shape < 1) {
        /* gamma(k) = gamma(k + 1) * U^(1/k) */
        double u = bench_rand_unit(rng);
        if (u < 1e-300) u = 1e-300;
        return bench_rand_gamma(shape + 1, rng) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = bench_rand_normal(rng), v = 1 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = bench_rand_unit(rng);
        if (u < 1e-300) continue;
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
}

static bool parse_num(const char *s, const char **end, double *out)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || e == s || !isfinite(v)) return false;
    *out = v;
    *end = e;
    return true;
}

int bench_dist_parse(const char *what, const char *spec, struct bench_dist *d, struct err_msg *m)
{
    static const struct {
        const char *name;
        enum bench_dist_kind kind;
        int n_args;
    } kinds[] = {{"fixed:", BENCH_DIST_FIXED, 1},
                 {"uniform:", BENCH_DIST_UNIFORM, 2},
                 {"normal:", BENCH_DIST_NORMAL, 2},
                 {"lognormal:", BENCH_DIST_LOGNORMAL, 2}};
    memset(d, 0, sizeof(*d));
    d->max = 1 << 24;
    const char *p = NULL;
    int n_args = 0;
    for (size_t k = 0; k < ARRAY_LEN(kinds); k++) {
        size_t n = strlen(kinds[k].name);
        if (!strncmp(spec, kinds[k].name, n)) {
            d->kind = kinds[k].kind;
            n_args = kinds[k].n_args;
            p = spec + n;
        }
    }
    if (!p) {
        /* a bare number means fixed */
        d->kind = BENCH_DIST_FIXED;
        n_args = 1;
        p = spec;
    }
    double v[2] = {0, 0};
    for (int k = 0; k < n_args; k++) {
        const char *e;
        if (!parse_num(p, &e, &v[k]) || v[k] < 0)
            return err_set(m, ERR_INVALID,
                           "%s: bad distribution '%s' (want fixed:N, uniform:LO:HI, "
                           "normal:MEAN:SD or lognormal:MEAN:SD with numbers >= 0)",
                           what, spec);
        p = e;
        if (k + 1 < n_args) {
            if (*p != ':')
                return err_set(m, ERR_INVALID, "%s: '%s' needs %d numbers separated by ':'", what,
                               spec, n_args);
            p++;
        }
    }
    if (*p) return err_set(m, ERR_INVALID, "%s: trailing text in distribution '%s'", what, spec);
    d->a = v[0];
    d->b = v[1];
    if (d->kind == BENCH_DIST_UNIFORM && d->b < d->a)
        return err_set(m, ERR_INVALID, "%s: uniform high < low in '%s'", what, spec);
    if (d->kind == BENCH_DIST_LOGNORMAL && d->a <= 0)
        return err_set(m, ERR_INVALID, "%s: lognormal mean must be > 0 in '%s'", what, spec);
    return 0;
}

int32_t bench_dist_sample(const struct bench_dist *d, uint64_t *rng)
{
    double x = d->a;
    switch (d->kind) {
    case BENCH_DIST_FIXED:
        break;
    case BENCH_DIST_UNIFORM:
        /* integers lo..hi inclusive, equally likely */
        x = floor(d->a) + floor(bench_rand_unit(rng) * (floor(d->b) - floor(d->a) + 1));
        break;
    case BENCH_DIST_NORMAL:
        x = d->a + d->b * bench_rand_normal(rng);
        break;
    case BENCH_DIST_LOGNORMAL: {
        double s2 = log(1 + (d->b * d->b) / (d->a * d->a));
        double mu = log(d->a) - 0.5 * s2;
        x = exp(mu + sqrt(s2) * bench_rand_normal(rng));
        break;
    }
    }
    x = floor(x + 0.5);
    if (x < 1) x = 1;
    if (x > d->max) x = d->max;
    return (int32_t)x;
}

/* ---- items ---- */

void bench_workload_init(struct bench_workload *w, int32_t block_tokens)
{
    CHECK(block_tokens > 0);
    memset(w, 0, sizeof(*w));
    w->block_tokens = block_tokens;
    w->vocab_lo = 1000;
    w->vocab_hi = 30000;
}

void bench_workload_release(struct bench_workload *w)
{
    for (int32_t i = 0; i < w->n; i++)
        free(w->items[i].blocks);
    free(w->items);
    memset(w, 0, sizeof(*w));
}

int32_t bench_workload_add(struct bench_workload *w, const struct bench_item *it)
{
    CHECK(it->n_blocks == (it->n_input + w->block_tokens - 1) / w->block_tokens);
    CHECK(it->after < w->n);
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 64;
        w->items = xrealloc(w->items, sizeof(*w->items) * (size_t)w->cap);
    }
    struct bench_item *d = &w->items[w->n];
    *d = *it;
    d->blocks = xmalloc(sizeof(uint64_t) * (size_t)(it->n_blocks ? it->n_blocks : 1));
    if (it->n_blocks) memcpy(d->blocks, it->blocks, sizeof(uint64_t) * (size_t)it->n_blocks);
    return w->n++;
}

void bench_workload_truncate(struct bench_workload *w, int32_t n)
{
    if (n < 0 || n >= w->n) return;
    for (int32_t i = n; i < w->n; i++)
        free(w->items[i].blocks);
    w->n = n;
}

int32_t bench_block_token(const struct bench_workload *w, uint64_t id, int32_t pos)
{
    uint64_t s = w->seed ^ (id * 0xd1342543de82ef95ull) ^ ((uint64_t)pos * 0x2545f4914f6cdd1dull);
    uint64_t range = (uint64_t)(w->vocab_hi - w->vocab_lo);
    return w->vocab_lo + (int32_t)(rng_next(&s) % range);
}

void bench_item_tokens(const struct bench_workload *w, int32_t i, struct i32vec *out)
{
    const struct bench_item *it = &w->items[i];
    for (int32_t b = 0; b < it->n_blocks; b++) {
        int32_t n = MIN(w->block_tokens, it->n_input - b * w->block_tokens);
        for (int32_t p = 0; p < n; p++)
            i32vec_push(out, bench_block_token(w, it->blocks[b], p));
    }
}

/* Short, common English words: each is a single token (with its leading
 * space) in the GPT-2/cl100k/o200k, Llama 3 and Qwen BPE vocabularies. */
static const char *const words[] = {
    " the",  " of",    " and",   " to",    " in",    " is",   " that", " for",   " it",    " as",
    " was",  " with",  " be",    " by",    " on",    " not",  " he",   " this",  " are",   " or",
    " his",  " from",  " at",    " which", " but",   " have", " an",   " had",   " they",  " you",
    " were", " their", " one",   " all",   " we",    " can",  " her",  " has",   " there", " been",
    " if",   " more",  " when",  " will",  " would", " who",  " so",   " no",    " she",   " other",
    " its",  " may",   " these", " what",  " them",  " than", " some", " him",   " time",  " into",
    " only", " do",    " could", " new",   " about", " two",  " then", " first", " also",  " after",
    " any",  " like",  " our",   " should"};

_Static_assert(ARRAY_LEN(words) == BENCH_N_WORDS, "BENCH_N_WORDS names the word count");

const char *bench_token_word(int32_t tok)
{
    return words[(uint32_t)tok % ARRAY_LEN(words)];
}

void bench_item_text(const struct bench_workload *w, int32_t i, struct buf *out)
{
    const struct bench_item *it = &w->items[i];
    for (int32_t b = 0; b < it->n_blocks; b++) {
        int32_t n = MIN(w->block_tokens, it->n_input - b * w->block_tokens);
        for (int32_t p = 0; p < n; p++)
            buf_puts(out, bench_token_word(bench_block_token(w, it->blocks[b], p)));
    }
}

void bench_item_range_text(const struct bench_workload *w, int32_t i, int32_t from_block,
                           int32_t n_tokens, struct buf *out)
{
    const struct bench_item *it = &w->items[i];
    for (int32_t b = from_block; b < it->n_blocks && n_tokens > 0; b++) {
        int32_t n = MIN(w->block_tokens, n_tokens);
        for (int32_t p = 0; p < n; p++)
            buf_puts(out, bench_token_word(bench_block_token(w, it->blocks[b], p)));
        n_tokens -= n;
    }
}

/* ---- ideal prefix hits: an open-addressing map block id -> longest length seen ---- */

struct seen_map {
    uint64_t *keys; /* (cap) block ids; slot empty when lens[i] == 0 */
    int32_t *lens;  /* (cap) longest length the id was seen with */
    size_t n, cap;  /* used / allocated slots (cap a power of two) */
};

static size_t seen_slot(const struct seen_map *s, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 17) & (s->cap - 1);
    while (s->lens[i] && s->keys[i] != id)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static void seen_grow(struct seen_map *s)
{
    struct seen_map t = {.cap = s->cap ? s->cap * 2 : 1024};
    t.keys = xcalloc(t.cap, sizeof(uint64_t));
    t.lens = xcalloc(t.cap, sizeof(int32_t));
    for (size_t i = 0; i < s->cap; i++)
        if (s->lens[i]) {
            size_t j = seen_slot(&t, s->keys[i]);
            t.keys[j] = s->keys[i];
            t.lens[j] = s->lens[i];
            t.n++;
        }
    free(s->keys);
    free(s->lens);
    *s = t;
}

double bench_workload_ideal_hit(const struct bench_workload *w, int32_t *ideal_cached)
{
    struct seen_map s = {0};
    seen_grow(&s);
    int64_t total = 0, cached = 0;
    for (int32_t i = 0; i < w->n; i++) {
        const struct bench_item *it = &w->items[i];
        int32_t hit = 0;
        bool prefix = true;
        for (int32_t b = 0; b < it->n_blocks; b++) {
            int32_t len = MIN(w->block_tokens, it->n_input - b * w->block_tokens);
            if ((s.n + 1) * 2 > s.cap) seen_grow(&s);
            size_t j = seen_slot(&s, it->blocks[b]);
            if (prefix) {
                int32_t seen = s.lens[j];
                hit += MIN(seen, len);
                /* a shorter earlier copy covers only its own tokens: the
                 * rest of this block and everything after it is new */
                if (seen < len) prefix = false;
            }
            if (!s.lens[j]) {
                s.keys[j] = it->blocks[b];
                s.n++;
            }
            if (s.lens[j] < len) s.lens[j] = len;
        }
        if (ideal_cached) ideal_cached[i] = hit;
        total += it->n_input;
        cached += hit;
    }
    free(s.keys);
    free(s.lens);
    return total ? (double)cached / (double)total : 0;
}

/* ---- synthetic shapes ---- */

static int32_t round_up(int32_t n, int32_t b)
{
    return (n + b - 1) / b * b;
}

/* Appends n fresh block ids for `tokens` tokens to v (tokens may end mid-block
 * only for the final piece of a prompt). */
static void push_fresh(uint64_t **v, int32_t *n, int32_t *cap, uint64_t *next_id, int32_t n_new)
{
    for (int32_t k = 0; k < n_new; k++) {
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            *v = xrealloc(*v, sizeof(uint64_t) * (size_t)*cap);
        }
        (*v)[(*n)++] = (*next_id)++;
    }
}

int bench_workload_synth(struct bench_workload *w, const struct bench_synth *s, struct err_msg *m)
{
    const int32_t B = w->block_tokens;
    uint64_t rng = s->seed ^ 0x5eed5eedull;
    uint64_t next_id = 1;
    uint64_t *v = NULL;
    int32_t nv = 0, capv = 0;
    switch (s->shape) {
    case BENCH_SHAPE_PLAIN:
    case BENCH_SHAPE_PREFIX: {
        int32_t n_groups = s->shape == BENCH_SHAPE_PREFIX ? s->n_groups : 0;
        if (s->shape == BENCH_SHAPE_PREFIX &&
            (s->n_groups < 1 || s->users_per_group < 1 || s->prefix_tokens < 1))
            return err_set(m, ERR_INVALID,
                           "prefix workload: --groups, --users-per-group and --prefix-tokens "
                           "must be >= 1");
        int32_t prefix_blocks = n_groups ? round_up(s->prefix_tokens, B) / B : 0;
        uint64_t first_group_id = next_id;
        next_id += (uint64_t)n_groups * (uint64_t)prefix_blocks;
        for (int32_t r = 0; r < s->n_requests; r++) {
            nv = 0;
            int32_t n_in = bench_dist_sample(&s->len_in, &rng);
            int32_t n_out = bench_dist_sample(&s->len_out, &rng);
            struct bench_item it = {.after = -1, .session = -1, .n_output = n_out};
            if (n_groups) {
                /* requests go round-robin over all users; user u is in group
                 * u / users_per_group */
                int32_t n_users = n_groups * s->users_per_group;
                int32_t user = r % n_users, g = user / s->users_per_group;
                for (int32_t k = 0; k < prefix_blocks; k++) {
                    uint64_t id =
                        first_group_id + (uint64_t)g * (uint64_t)prefix_blocks + (uint64_t)k;
                    push_fresh(&v, &nv, &capv, &id, 1);
                }
                it.session = user;
            }
            push_fresh(&v, &nv, &capv, &next_id, (n_in + B - 1) / B);
            it.n_input = prefix_blocks * B + n_in;
            it.blocks = v;
            it.n_blocks = nv;
            bench_workload_add(w, &it);
        }
        break;
    }
    case BENCH_SHAPE_MULTITURN:
    case BENCH_SHAPE_AGENTIC: {
        if (s->n_sessions < 1 || s->n_turns < 1)
            return err_set(m, ERR_INVALID, "session workload: --sessions and --turns must be >= 1");
        /* agentic sessions share one tool/system prefix across sessions */
        int32_t shared_blocks = 0;
        uint64_t shared_id = next_id;
        if (s->shape == BENCH_SHAPE_AGENTIC && s->prefix_tokens > 0) {
            shared_blocks = round_up(s->prefix_tokens, B) / B;
            next_id += (uint64_t)shared_blocks;
        }
        for (int32_t sess = 0; sess < s->n_sessions; sess++) {
            nv = 0;
            uint64_t id = shared_id;
            push_fresh(&v, &nv, &capv, &id, shared_blocks);
            int32_t ctx = shared_blocks * B, prev = -1, prev_out = 0;
            for (int32_t turn = 0; turn < s->n_turns; turn++) {
                int32_t n_in = bench_dist_sample(&s->len_in, &rng);
                int32_t n_out = bench_dist_sample(&s->len_out, &rng);
                double think = turn ? bench_dist_sample(&s->think, &rng) * 1e-3 : 0;
                if (turn) {
                    /* the previous prompt's final piece and the previous
                     * answer become interior: whole blocks from here on */
                    int32_t answer = round_up(prev_out, B);
                    push_fresh(&v, &nv, &capv, &next_id, answer / B);
                    ctx = round_up(ctx, B) + answer;
                }
                int32_t user_block = nv;
                push_fresh(&v, &nv, &capv, &next_id, (n_in + B - 1) / B);
                struct bench_item it = {.n_input = ctx + n_in,
                                        .n_sys_blocks = shared_blocks,
                                        .user_block = user_block,
                                        .n_user = n_in,
                                        .n_output = n_out,
                                        .blocks = v,
                                        .n_blocks = nv,
                                        .after = prev,
                                        .think_s = think,
                                        .session = sess};
                prev = bench_workload_add(w, &it);
                ctx += n_in;
                prev_out = n_out;
            }
        }
        break;
    }
    }
    free(v);
    return 0;
}

/* ---- arrivals ---- */

void bench_workload_arrivals(struct bench_workload *w, const struct bench_arrivals *a)
{
    uint64_t rng = a->seed ^ 0xa11a1ull;
    double t = 0;
    bool first = true;
    for (int32_t i = 0; i < w->n; i++) {
        struct bench_item *it = &w->items[i];
        if (a->kind == BENCH_ARRIVAL_TRACE) {
            CHECK(a->time_scale > 0);
            it->t_s /= a->time_scale;
            it->think_s /= a->time_scale;
            continue;
        }
        if (it->after >= 0) continue;
        switch (a->kind) {
        case BENCH_ARRIVAL_TRACE:
            break;
        case BENCH_ARRIVAL_CLOSED:
            t = 0;
            break;
        case BENCH_ARRIVAL_POISSON: {
            /* the first request goes at 0; gaps after it */
            double u = bench_rand_unit(&rng);
            if (!first) t += -log(1 - u) / a->rate;
            break;
        }
        case BENCH_ARRIVAL_GAMMA: {
            double shape = a->burstiness;
            double g = bench_rand_gamma(shape, &rng) / (shape * a->rate);
            if (!first) t += g;
            break;
        }
        }
        it->t_s = t;
        first = false;
    }
}
