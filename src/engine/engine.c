/*
 * engine.c - the engine behind include/inferd/inferd.h: requests, the step
 * scheduler, the prefix cache's use, sampling and events.
 *
 * A step: the scheduler (sched.h) ranks the requests and builds the batch
 * under the token budget - decodes first, then prompt chunks and admissions
 * with prefix hits, preempting for KV when blocks run out; the forward pass
 * (forward.h) runs it; then every request that produced logits samples one
 * token and emits an event. Preemption never changes a request's output: KV
 * is a pure function of the tokens before it (the forward pass is
 * bit-exact), and sampling is keyed by (seed, position).
 *
 * After the forward, every request's newly completed blocks are committed to
 * the prefix index (so concurrent requests with the same prefix share them
 * from then on). Finished and cancelled requests release their blocks at
 * once, tail first, so a cached chain's head is evicted last.
 *
 * A prefix hit is bitwise indistinguishable from a miss: attention always
 * reads K/V from the cache (a fresh token writes its K/V first, then reads
 * it back), so it sees the same rounded values whether its context was
 * computed in this step, an earlier step, or by another request.

 * Structured output: a request with a grammar has a matcher (constrain.h);
 * before sampling it fills the request's token mask, the sampler puts -inf
 * outside it, and the sampled token advances the matcher. The masks of a
 * step are filled by a helper thread while the forward runs (constrain.h),
 * or after it in inline mode; the bits are the same. Small hooks
 * (grammar_hook_*) are the whole coupling.
 *
 * Sampling is keyed by (seed, position) and logits are batch-invariant
 * (forward.h), so a request's events are the same whatever else runs.
 *
 * Thread model: every entry point is called from one thread at a time (the
 * owner of the engine); compute fans out to the thread pool inside fwd_run,
 * and so does sampling: the compute threads claim the rows of a step one at
 * a time, one sampler (scratch) each, while grammar masks before and events
 * after stay on the engine thread, in row order.
 */
#include "inferd/inferd.h"

#include "base/check.h"
#include "base/tpool.h"
#include "engine/constrain.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "engine/sched.h"
#include "engine/stepcost.h"
#include "kernels/kernels.h"
#include "base/timeutil.h"
#include "kv/pool.h"
#include "kv/prefix.h"
#include "model/model.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* Bumped whenever a kernel change alters the bits of K/V or their layout in
 * a block: block ids (and exported frames) of engines with different numerics
 * never match. 2: keys kept as K panels (by dimension within a block).
 * 3: attention over a bf16 cache rounds queries and weights to bf16. */
#define ENGINE_NUMERICS_VERSION "inferd-kv-numerics-3"

struct inferd_model {
    struct model *m;                /* loaded weights */
    int32_t eog[8];                 /* end-of-generation token ids */
    int n_eog;                      /* entries of eog */
    struct constrain_model grammar; /* grammar vocabulary + compile cache (first use, any thread) */
};

/* A grammar compiled for one model (inferd_grammar_compile): immutable, so
 * any thread may submit with it; each request takes its own reference. */
struct inferd_compiled_grammar {
    const struct inferd_model *model; /* whose vocabulary its mask tables are for */
    struct grammar *g;                /* one reference */
};

/* A request: the scheduler's part (sched.h) first, then what the forward
 * pass and sampling need. */
struct req {
    struct sched_req s;       /* scheduling state (first: the scheduler's pointer is ours) */
    int32_t *tokens;          /* (cap) prompt then generated tokens */
    int cap;                  /* allocated entries of tokens */
    bool ignore_eos;          /* do not stop at end-of-generation tokens */
    struct sampler_params sp; /* sampling parameters (bias array owned) */
    struct kv_block_id extra; /* extra key of block ids (cache salt hash) */

    struct grammar_matcher *gm; /* structured output state, or NULL */
    uint64_t *mask;             /* ((n_vocab + 63) / 64) allowed tokens when gm */
    int mask_allowed;           /* constrain_mask's result as filled during this step's forward;
                                   INT_MIN: not filled */
};

struct inferd_engine {
    struct inferd_model *model;      /* not owned */
    struct inferd_engine_config cfg; /* resolved configuration */
    struct tpool *pool;              /* compute threads */
    struct kv_pool kv;               /* paged cache */
    struct kv_prefix prefix;         /* content index over kv (unused if no_prefix_cache) */
    bool prefix_on;                  /* prefix cache in use */
    uint8_t fingerprint[16];         /* engine fingerprint (block ids hash it) */
    uint8_t *evict_frame;            /* (frame bytes) scratch of the pre-eviction hook, or NULL */
    struct fwd_ctx *fwd;             /* forward scratch */
    struct sampler **samplers;       /* (n_samplers) sampling scratch, one per compute thread */
    int n_samplers;                  /* entries of samplers: min(tpool_size(pool), max_seqs) */
    struct sched sched;              /* requests and the step scheduler */
    bool sched_on;                   /* sched is initialised */
    uint64_t next_id;                /* next request id */
    /* step scratch, sized for token_budget */
    int32_t *b_tokens, *b_pos, *b_seq; /* (token_budget) */
    bool *b_want;                      /* (token_budget) */
    struct req **b_out_req;            /* (token_budget) request of each logits row */
    struct sampler_result *b_res;      /* (token_budget) sampled result of each logits row */
    int *b_mask_rc;                    /* (token_budget) row may be sampled when > 0 (its grammar
                                          allows some token; 0: none; < 0: the mask's error) */
    int b_n_out;                       /* logits rows of this step (sample_rows reads it) */
    atomic_int b_next_row;             /* next row for a sample_rows thread to claim */
    struct constrain_job *b_jobs;      /* (token_budget) masks filled during the forward */
    struct req **b_job_req;            /* (token_budget) request of each job */
    float *logits;                     /* (token_budget, n_vocab) */
    struct inferd_event *events;       /* ring of pending events */
    int ev_head, ev_count, ev_cap;     /* ring state */
    struct inferd_stats stats;         /* counters (gauges filled in by inferd_engine_stats) */

    struct constrain constrain; /* grammar mask helper (the vocabulary and cache: the model's) */
};

const char *inferd_strerror(int code)
{
    return err_str(code);
}

static void copy_err(char *err, size_t err_len, const struct err_msg *m, int rc)
{
    if (!err || !err_len) return;
    snprintf(err, err_len, "%s", m->text[0] ? m->text : err_str(rc));
}

/* ---- models ---- */

static void add_eog(struct inferd_model *im, int64_t id)
{
    if (id < 0 || id >= im->m->hp.n_vocab || im->n_eog == (int)ARRAY_LEN(im->eog)) return;
    for (int i = 0; i < im->n_eog; i++)
        if (im->eog[i] == id) return;
    im->eog[im->n_eog++] = (int32_t)id;
}

int inferd_model_load(const char *path, inferd_model **out, char *err, size_t err_len)
{
    kern_init();
    struct err_msg msg = {{0}};
    struct model *m;
    int rc = model_load(path, &m, &msg);
    if (rc) {
        copy_err(err, err_len, &msg, rc);
        return rc;
    }
    model_pack(m);
    struct inferd_model *im = xcalloc(1, sizeof(*im));
    im->m = m;
    static const char *keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                 "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < ARRAY_LEN(keys); i++) {
        uint32_t v;
        if (gguf_get_u32(m->gguf, keys[i], &v, NULL) == 0) add_eog(im, v);
    }
    /* Chat models end turns with control tokens the metadata does not
     * always name as eos; llama.cpp-style lookup by their text. */
    static const char *texts[] = {"<|im_end|>",    "<|eot_id|>", "<|end_of_text|>",
                                  "<|endoftext|>", "<|eom_id|>", "<｜end▁of▁sentence｜>"};
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    if (gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", &et, &n, &data, NULL) == 0 &&
        et == GGUF_VTYPE_STRING) {
        int64_t k = gguf_find_key(m->gguf, "tokenizer.ggml.tokens");
        for (uint64_t i = 0; i < n && i < (uint64_t)m->hp.n_vocab; i++) {
            struct gguf_str s = gguf_arr_str_at(m->gguf, k, i);
            if (s.len < 5 || s.ptr[0] != '<') continue;
            for (size_t j = 0; j < ARRAY_LEN(texts); j++)
                if (strlen(texts[j]) == s.len && memcmp(texts[j], s.ptr, s.len) == 0)
                    add_eog(im, (int64_t)i);
        }
    }
    constrain_model_init(&im->grammar, m, im->eog, im->n_eog);
    *out = im;
    return 0;
}

void inferd_model_free(inferd_model *im)
{
    if (!im) return;
    constrain_model_release(&im->grammar);
    model_free(im->m);
    free(im);
}

int inferd_model_n_vocab(const inferd_model *im)
{
    return im->m->hp.n_vocab;
}

int inferd_model_n_ctx_train(const inferd_model *im)
{
    return im->m->hp.n_ctx_train;
}

int inferd_model_eog_tokens(const inferd_model *im, int32_t *ids, int cap)
{
    int n = MIN(cap, im->n_eog);
    memcpy(ids, im->eog, sizeof(int32_t) * (size_t)n);
    return n;
}

/* ---- engines ---- */

void inferd_engine_config_default(struct inferd_engine_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kv_type = INFERD_KV_F16;
}

void inferd_sampling_default(struct inferd_sampling *s)
{
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
}

/* XXH3-128 of (model fingerprint, numerics version, KV type, block size),
 * written high word first, big-endian. */
static void engine_fingerprint(const struct model *m, enum dtype kvt, int block_tokens,
                               uint8_t out[16])
{
    uint8_t buf[16 + sizeof(ENGINE_NUMERICS_VERSION) + 8];
    size_t n = 0;
    memcpy(buf, m->fingerprint, 16);
    n += 16;
    memcpy(buf + n, ENGINE_NUMERICS_VERSION, sizeof(ENGINE_NUMERICS_VERSION));
    n += sizeof(ENGINE_NUMERICS_VERSION);
    uint32_t fields[2] = {(uint32_t)kvt, (uint32_t)block_tokens};
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 4; k++)
            buf[n++] = (uint8_t)(fields[f] >> (8 * k));
    XXH128_hash_t h = XXH3_128bits(buf, n);
    for (int k = 0; k < 8; k++) {
        out[k] = (uint8_t)(h.high64 >> (56 - 8 * k));
        out[8 + k] = (uint8_t)(h.low64 >> (56 - 8 * k));
    }
}

void inferd_engine_fingerprint(const inferd_engine *e, uint8_t out[16])
{
    memcpy(out, e->fingerprint, 16);
}

/* The prefix cache is about to evict a block: hand its frame to the
 * caller's pre-eviction hook while the bytes are still there. */
static void on_evict(void *ctx, const struct kv_block_id *id)
{
    struct inferd_engine *e = ctx;
    size_t len = kv_prefix_frame_bytes(&e->prefix);
    if (kv_prefix_export(&e->prefix, id, e->evict_frame, len)) return;
    uint8_t idb[16];
    kv_block_id_to_bytes(id, idb);
    e->cfg.kv_evict_hook(e->cfg.kv_evict_ctx, idb, e->evict_frame, len);
}

static void retire(void *ctx, struct sched_req *sq);
static void block_ids(void *ctx, struct sched_req *sq, int n);

int inferd_engine_new(inferd_model *im, const struct inferd_engine_config *cfg_in,
                      inferd_engine **out, char *err, size_t err_len)
{
    const struct model_hparams *hp = &im->m->hp;
    struct err_msg msg = {{0}};
    struct inferd_engine_config cfg = *cfg_in;
    if (cfg.n_threads <= 0) cfg.n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cfg.block_tokens <= 0) cfg.block_tokens = KV_BLOCK_TOKENS_DEFAULT;
    if (cfg.token_budget <= 0) cfg.token_budget = 512;
    if (cfg.prefill_step_ratio == 0) cfg.prefill_step_ratio = 2.0f;
    if (cfg.prefill_step_ratio > 0 && !(cfg.prefill_step_ratio > 1)) {
        snprintf(err, err_len, "prefill_step_ratio %g must be > 1 (or < 0: off)",
                 (double)cfg.prefill_step_ratio);
        return ERR_INVALID;
    }
    if (cfg.max_seqs <= 0) cfg.max_seqs = 64;
    if (cfg.max_waiting <= 0) cfg.max_waiting = MAX(256, 4 * cfg.max_seqs);
    if (cfg.max_ctx <= 0) cfg.max_ctx = MIN(hp->n_ctx_train, 4096);
    if (cfg.n_threads > 256 || cfg.token_budget > 65536 || cfg.max_seqs > 4096 ||
        cfg.max_waiting > (1 << 20) || cfg.max_ctx > (1 << 22)) {
        snprintf(err, err_len, "engine configuration out of range");
        return ERR_INVALID;
    }
    enum dtype kvt = cfg.kv_type == INFERD_KV_F32    ? DTYPE_F32
                     : cfg.kv_type == INFERD_KV_BF16 ? DTYPE_BF16
                                                     : DTYPE_F16;
    size_t block_bytes = (size_t)hp->n_layer * 2 * hp->n_head_kv * hp->head_dim *
                         (size_t)cfg.block_tokens * dtype_info(kvt)->type_size;
    if (cfg.kv_blocks <= 0) {
        /* Enough for max_seqs full contexts, but no more than 1 GiB by default. */
        size_t want = (size_t)cfg.max_seqs * ((size_t)cfg.max_ctx / cfg.block_tokens + 1);
        size_t cap = ((size_t)1 << 30) / block_bytes;
        size_t min = (size_t)cfg.max_ctx / cfg.block_tokens + 1;
        cfg.kv_blocks = (int)MAX(MIN(want, cap), min);
    }

    if ((int64_t)cfg.kv_blocks * cfg.block_tokens < cfg.max_ctx) {
        snprintf(err, err_len, "kv_blocks %d x %d tokens cannot hold one sequence of max_ctx %d",
                 cfg.kv_blocks, cfg.block_tokens, cfg.max_ctx);
        return ERR_INVALID;
    }
    struct inferd_engine *e = xcalloc(1, sizeof(*e));
    e->model = im;
    e->cfg = cfg;
    e->next_id = 1;
    struct kv_pool_config kc = {
        .n_layer = hp->n_layer,
        .n_kv_head = hp->n_head_kv,
        .head_dim = hp->head_dim,
        .block_tokens = cfg.block_tokens,
        .n_blocks = cfg.kv_blocks,
        .dtype = kvt,
    };
    int rc = kv_pool_init(&e->kv, &kc, &msg);
    if (rc) goto err_free;
    engine_fingerprint(im->m, kvt, cfg.block_tokens, e->fingerprint);
    if (!cfg.no_prefix_cache) {
        kv_prefix_init(&e->prefix, &e->kv, e->fingerprint);
        e->prefix.record_events = cfg.kv_events;
        e->prefix_on = true;
        if (cfg.kv_evict_hook) {
            e->evict_frame = xmalloc(kv_prefix_frame_bytes(&e->prefix));
            e->prefix.evict_hook = on_evict;
            e->prefix.evict_ctx = e;
        }
    }
    e->pool = tpool_new(cfg.n_threads);
    rc = fwd_ctx_new(im->m, &e->kv, e->pool, cfg.token_budget, cfg.max_ctx, &e->fwd, &msg);
    if (rc) goto err_free;
    /* No more samplers (~54 bytes a token each) than rows a step can have. */
    e->n_samplers = MIN(tpool_size(e->pool), cfg.max_seqs);
    e->samplers = xcalloc((size_t)e->n_samplers, sizeof(*e->samplers));
    for (int i = 0; i < e->n_samplers; i++)
        e->samplers[i] = sampler_new(hp->n_vocab);
    size_t B = (size_t)cfg.token_budget;
    e->b_tokens = xmalloc(sizeof(int32_t) * B);
    e->b_pos = xmalloc(sizeof(int32_t) * B);
    e->b_seq = xmalloc(sizeof(int32_t) * B);
    e->b_want = xmalloc(sizeof(bool) * B);
    e->b_out_req = xmalloc(sizeof(struct req *) * B);
    e->b_res = xmalloc(sizeof(struct sampler_result) * B);
    e->b_mask_rc = xmalloc(sizeof(int) * B);
    e->b_jobs = xmalloc(sizeof(struct constrain_job) * B);
    e->b_job_req = xmalloc(sizeof(struct req *) * B);
    e->logits = xaligned_alloc(sizeof(float) * B * (size_t)hp->n_vocab);
    e->stats.kv_blocks_total = cfg.kv_blocks;
    struct sched_config sc = {.token_budget = cfg.token_budget,
                              .max_seqs = cfg.max_seqs,
                              .block_tokens = cfg.block_tokens,
                              .prefill_step_ratio = cfg.prefill_step_ratio};
    struct sched_ops ops = {.block_ids = block_ids, .retire = retire, .ctx = e};
    sched_init(&e->sched, &sc, &e->kv, e->prefix_on ? &e->prefix : NULL, &ops);
    e->sched_on = true;
    constrain_init(&e->constrain, &im->grammar, e->cfg.grammar_inline);
    *out = e;
    return 0;

err_free:
    copy_err(err, err_len, &msg, rc);
    inferd_engine_free(e);
    return rc;
}

/* sched_ops.retire: frees a request (its blocks are released). */
static void retire(void *ctx, struct sched_req *sq)
{
    struct req *r = (struct req *)sq;
    (void)ctx;
    free(r->tokens);
    free(r->s.ids);
    free((void *)r->sp.logit_bias);
    grammar_matcher_free(r->gm);
    free(r->mask);
    free(r);
}

/* sched_ops.block_ids: the ids of q's first n full blocks, hashed from its
 * tokens along the chain. */
static void block_ids(void *ctx, struct sched_req *sq, int n)
{
    struct inferd_engine *e = ctx;
    struct req *q = (struct req *)sq;
    const int bt = e->cfg.block_tokens;
    for (; sq->n_ids < n; sq->n_ids++) {
        int i = sq->n_ids;
        CHECK((i + 1) * bt <= sq->n_tokens);
        sq->ids[i] = kv_prefix_block_id(&e->prefix, i ? &sq->ids[i - 1] : NULL, &q->extra,
                                        q->tokens + (size_t)i * bt);
    }
}

void inferd_engine_free(inferd_engine *e)
{
    if (!e) return;
    if (e->sched_on) sched_release(&e->sched); /* frees the requests */
    fwd_ctx_free(e->fwd);
    if (e->pool) tpool_free(e->pool);
    for (int i = 0; i < e->n_samplers; i++)
        sampler_free(e->samplers[i]);
    free(e->samplers);
    kv_prefix_release(&e->prefix); /* after the requests released their blocks */
    free(e->evict_frame);
    kv_pool_release(&e->kv);
    constrain_release(&e->constrain);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_out_req);
    free(e->b_res);
    free(e->b_mask_rc);
    free(e->b_jobs);
    free(e->b_job_req);
    free(e->logits);
    free(e->events);
    free(e);
}

/* ---- requests ---- */

static void to_sampler_params(const struct inferd_sampling *s, struct sampler_params *p)
{
    sampler_params_default(p);
    p->temperature = s->temperature;
    p->top_k = s->top_k;
    p->top_p = s->top_p;
    p->min_p = s->min_p;
    p->repetition_penalty = s->repetition_penalty;
    p->presence_penalty = s->presence_penalty;
    p->frequency_penalty = s->frequency_penalty;
    p->seed = s->seed;
    p->logprobs = s->logprobs || s->n_logprobs > 0;
    p->n_logprobs = s->n_logprobs;
    p->n_logit_bias = s->n_logit_bias;
    p->logit_bias = NULL;
    if (s->n_logit_bias > 0) {
        struct sampler_bias *b = xmalloc(sizeof(*b) * (size_t)s->n_logit_bias);
        for (int i = 0; i < s->n_logit_bias; i++) {
            b[i].token = s->logit_bias[i].token;
            b[i].bias = s->logit_bias[i].bias;
        }
        p->logit_bias = b;
    }
}

/* ---- structured output hooks (engine/constrain.h) ---- */

/* Resolves the public limits into the grammar module's (0: default). */
static void to_grammar_limits(const struct inferd_grammar_limits *in, struct grammar_limits *out)
{
    memset(out, 0, sizeof(*out));
    if (!in) return;
    out->max_rules = in->max_rules;
    out->max_elems = in->max_elems;
    out->compile_work = in->compile_work;
    out->compile_cpu_ms = in->compile_cpu_ms;
    out->max_stacks = in->max_stacks;
    out->max_nodes = in->max_nodes;
    out->step_work = in->step_work;
    out->mask_work = in->mask_work;
    out->probe_steps = in->probe_steps;
    out->table_bytes = in->table_bytes;
}

/* Compiles g's source for im (through the model's cache). */
static int grammar_compile_source(struct inferd_model *im, const struct inferd_grammar *g,
                                  struct grammar **out, struct err_msg *msg)
{
    if (g->kind < INFERD_GRAMMAR_EBNF || g->kind > INFERD_GRAMMAR_SEQUENCE)
        return err_set(msg, ERR_INVALID, "grammar.kind: unknown kind %d", (int)g->kind);
    if (!g->source && g->len > 0) return err_set(msg, ERR_INVALID, "grammar.source: missing");
    struct grammar_limits lim;
    to_grammar_limits(g->limits, &lim);
    return constrain_compile(&im->grammar, (enum grammar_kind)g->kind, g->source ? g->source : "",
                             g->len, &lim, out, msg);
}

int inferd_grammar_compile(inferd_model *im, const struct inferd_grammar *g,
                           inferd_compiled_grammar **out, char *err, size_t err_len)
{
    struct err_msg msg = {{0}};
    struct grammar *cg = NULL;
    int rc = g->compiled ? err_set(&msg, ERR_INVALID, "grammar.compiled: already compiled")
             : g->kind == INFERD_GRAMMAR_NONE
                 ? err_set(&msg, ERR_INVALID, "grammar.kind: nothing to compile")
                 : grammar_compile_source(im, g, &cg, &msg);
    if (rc) {
        copy_err(err, err_len, &msg, rc);
        return rc;
    }
    struct inferd_compiled_grammar *h = xcalloc(1, sizeof(*h));
    h->model = im;
    h->g = cg;
    *out = h;
    return 0;
}

void inferd_compiled_grammar_free(inferd_compiled_grammar *cg)
{
    if (!cg) return;
    grammar_unref(cg->g);
    free(cg);
}

/* At submit: the request's matcher, over its compiled grammar or one
 * compiled from its source now (on this thread). */
static int grammar_hook_submit(struct inferd_engine *e, const struct inferd_request *r,
                               struct req *q, struct err_msg *msg)
{
    const struct inferd_grammar *g = &r->grammar;
    struct grammar *cg;
    int rc;
    if (g->compiled) {
        if (g->compiled->model != e->model)
            return err_set(msg, ERR_INVALID,
                           "grammar.compiled: compiled for another model than this engine's");
        cg = grammar_ref(g->compiled->g);
    } else {
        if (g->kind == INFERD_GRAMMAR_NONE) return 0;
        if ((rc = grammar_compile_source(e->model, g, &cg, msg))) return rc;
    }
    rc = constrain_attach(&e->constrain, cg, &q->gm, msg);
    grammar_unref(cg);
    if (rc) return rc;
    q->mask = xmalloc(sizeof(uint64_t) * (size_t)((e->model->m->hp.n_vocab + 63) / 64));
    q->mask_allowed = INT_MIN;
    return 0;
}

/* Before sampling: points the sampler at the request's mask. Returns the
 * tokens it allows (> 0 to sample; 0: the grammar allows no token of this
 * vocabulary) or the error of a mask past its budget. */
static int grammar_hook_mask(struct req *q)
{
    if (!q->gm) return 1;
    q->sp.allowed = q->mask;
    int allowed = q->mask_allowed != INT_MIN ? q->mask_allowed : constrain_mask(q->gm, q->mask);
    q->mask_allowed = INT_MIN;
    return allowed;
}

/* The finish event of a request whose grammar failed: the matcher's
 * message (a budget, naming the construct), or that no token fits. */
static void grammar_error_event(struct req *q, int rc, struct inferd_event *ev)
{
    const char *text = NULL;
    if (rc < 0 && q->gm) grammar_matcher_error(q->gm, &text);
    ev->error = rc < 0 ? rc : ERR_INTERNAL;
    snprintf(ev->message, sizeof(ev->message), "%s",
             text ? text : "grammar: no token of this vocabulary continues the output");
}

/* Before the forward: hands the masks of the requests that sample in this
 * step to the helper thread (constrain.h). Returns the jobs posted. */
static int grammar_hook_overlap(struct inferd_engine *e, int n_batch)
{
    if (!constrain_overlaps(&e->constrain)) return 0;
    int n = 0;
    for (int t = 0; t < n_batch; t++) {
        struct req *q = (struct req *)e->sched.chunks[e->b_seq[t]].q;
        if (!e->b_want[t] || !q->gm) continue;
        e->b_jobs[n] = (struct constrain_job){.gm = q->gm, .mask = q->mask, .allowed = INT_MIN};
        e->b_job_req[n++] = q;
    }
    if (n) constrain_masks_start(&e->constrain, e->b_jobs, n);
    return n;
}

/* After the forward: the helper's masks, for grammar_hook_mask. */
static void grammar_hook_collect(struct inferd_engine *e, int n_jobs)
{
    if (!n_jobs) return;
    constrain_masks_wait(&e->constrain);
    for (int i = 0; i < n_jobs; i++)
        e->b_job_req[i]->mask_allowed = e->b_jobs[i].allowed;
}

/* After sampling: advances the grammar; *done when it is complete. Returns
 * 0, or the error of a step past its budget. */
static int grammar_hook_advance(struct req *q, int32_t token, bool *done)
{
    *done = false;
    return q->gm ? constrain_advance(q->gm, token, done) : 0;
}

int inferd_submit(inferd_engine *e, const struct inferd_request *r, uint64_t *id, char *err,
                  size_t err_len)
{
    struct err_msg msg = {{0}};
    int rc;
    const int n_vocab = e->model->m->hp.n_vocab;
    if (!r->prompt || r->n_prompt < 1) {
        rc = err_set(&msg, ERR_INVALID, "prompt: must hold at least one token");
        goto err;
    }
    if (r->max_tokens < 1) {
        rc = err_set(&msg, ERR_INVALID, "max_tokens: must be at least 1, got %d", r->max_tokens);
        goto err;
    }
    if (r->n_prompt >= e->cfg.max_ctx) {
        rc = err_set(&msg, ERR_TOO_LARGE,
                     "prompt: %d tokens do not fit the context length %d (at most %d prompt "
                     "tokens, leaving room for one generated token)",
                     r->n_prompt, e->cfg.max_ctx, e->cfg.max_ctx - 1);
        goto err;
    }
    if (r->n_output < 0 || r->n_output >= r->n_prompt || r->n_output >= r->max_tokens) {
        rc = err_set(&msg, ERR_INVALID,
                     "n_output: %d output tokens resumed of a %d-token prompt with max_tokens "
                     "%d (at least 0, fewer than both)",
                     r->n_output, r->n_prompt, r->max_tokens);
        goto err;
    }
    if ((int64_t)r->n_prompt - r->n_output + r->max_tokens > e->cfg.max_ctx) {
        rc = err_set(&msg, ERR_TOO_LARGE,
                     "max_tokens: prompt (%d tokens) + max_tokens (%d) exceeds the context "
                     "length %d",
                     r->n_prompt - r->n_output, r->max_tokens, e->cfg.max_ctx);
        goto err;
    }
    if (r->cache_salt_len > 0 && !r->cache_salt) {
        rc = err_set(&msg, ERR_INVALID, "cache_salt: NULL with length %zu", r->cache_salt_len);
        goto err;
    }
    for (int i = 0; i < r->n_prompt; i++) {
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab) {
            rc = err_set(&msg, ERR_INVALID, "prompt[%d]: token id %d is out of range [0, %d)", i,
                         r->prompt[i], n_vocab);
            goto err;
        }
    }
    if (sched_count(&e->sched, SCHED_WAITING) >= e->cfg.max_waiting) {
        e->stats.n_rejected++;
        rc = err_set(&msg, ERR_OVERLOADED,
                     "engine overloaded: %d requests are waiting already (max_waiting)",
                     e->cfg.max_waiting);
        goto err;
    }
    struct req *q = xcalloc(1, sizeof(*q));
    to_sampler_params(&r->sampling, &q->sp);
    if ((rc = sampler_params_validate(&q->sp, n_vocab, &msg))) {
        free((void *)q->sp.logit_bias);
        free(q);
        goto err;
    }
    if ((rc = grammar_hook_submit(e, r, q, &msg)) ||
        (q->gm && r->n_output &&
         (rc =
              constrain_replay(q->gm, r->prompt + r->n_prompt - r->n_output, r->n_output, &msg)))) {
        grammar_matcher_free(q->gm);
        free(q->mask);
        free((void *)q->sp.logit_bias);
        free(q);
        goto err;
    }
    q->cap = r->n_prompt - r->n_output + r->max_tokens;
    q->tokens = xmalloc(sizeof(int32_t) * (size_t)q->cap);
    memcpy(q->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    q->ignore_eos = r->ignore_eos;
    q->extra = kv_prefix_extra_key(r->cache_salt, r->cache_salt_len);
    /* resumed (n_output > 0): the prompt's tail is output already */
    sched_req_init(
        &q->s, e->next_id++, r->n_prompt - r->n_output, r->n_prompt, r->max_tokens, r->priority,
        time_now_s(),
        xmalloc(sizeof(struct kv_block_id) * (size_t)(q->cap / e->cfg.block_tokens + 1)));
    q->s.held = r->hold;
    sched_add(&e->sched, &q->s);
    e->stats.n_submitted++;
    *id = q->s.id;
    return 0;
err:
    copy_err(err, err_len, &msg, rc);
    return rc;
}

static struct inferd_event *push_event(struct inferd_engine *e)
{
    if (e->ev_count == e->ev_cap) {
        int cap = MAX(64, e->ev_cap * 2);
        struct inferd_event *ev = xmalloc(sizeof(*ev) * (size_t)cap);
        for (int i = 0; i < e->ev_count; i++)
            ev[i] = e->events[(e->ev_head + i) % e->ev_cap];
        free(e->events);
        e->events = ev;
        e->ev_cap = cap;
        e->ev_head = 0;
    }
    struct inferd_event *ev = &e->events[(e->ev_head + e->ev_count++) % e->ev_cap];
    memset(ev, 0, sizeof(*ev));
    return ev;
}

bool inferd_poll(inferd_engine *e, struct inferd_event *ev)
{
    if (e->ev_count == 0) return false;
    *ev = e->events[e->ev_head];
    e->ev_head = (e->ev_head + 1) % e->ev_cap;
    e->ev_count--;
    return true;
}

/* Ends q: the finish event (ev, or a new pure finish event) gets the reason
 * and the usage; the blocks are released now. q stays in reqs until the next
 * step retires it. */
static void finish(struct inferd_engine *e, struct req *q, enum inferd_finish why,
                   struct inferd_event *ev)
{
    if (!ev) {
        ev = push_event(e);
        ev->request = q->s.id;
        ev->token = -1;
    }
    ev->finish = why;
    ev->n_prompt = q->s.n_prompt;
    ev->n_cached = q->s.n_cached_prompt;
    ev->queue_s = q->s.queue_s;
    ev->n_generated = q->s.n_tokens - q->s.n_prompt;
    sched_finish(&e->sched, &q->s);
    e->stats.n_finished++;
    e->stats.n_cancelled += why == INFERD_FINISH_CANCELLED;
}

int inferd_pause(inferd_engine *e, uint64_t id, bool paused)
{
    struct sched_req *q = sched_find(&e->sched, id);
    if (!q || q->state == SCHED_FINISHED) return ERR_NOT_FOUND;
    q->paused = paused;
    return 0;
}

int inferd_cancel(inferd_engine *e, uint64_t id)
{
    struct sched_req *q = sched_find(&e->sched, id);
    if (!q || q->state == SCHED_FINISHED) return ERR_NOT_FOUND;
    finish(e, (struct req *)q, INFERD_FINISH_CANCELLED, NULL);
    return 0;
}

static bool is_eog(const struct inferd_model *im, int32_t tok)
{
    for (int i = 0; i < im->n_eog; i++)
        if (im->eog[i] == tok) return true;
    return false;
}

/* tpool_fn: samples the step's logits rows into b_res, each thread with its
 * own sampler. Rows are claimed one at a time from a shared counter, so a
 * thread that starts late (its core busy with another process) or rows of
 * unequal cost (greedy, logprobs, masks) leave the others no idle wait. A
 * row's result is a pure function of its logits and request (sampler.h), so
 * which thread samples it changes no bit. Only reads request state: each
 * request has one row per step, and tokens are appended after every row is
 * sampled. */
static void sample_rows(void *ctx, int ith, int nth)
{
    struct inferd_engine *e = ctx;
    const int n_vocab = e->model->m->hp.n_vocab;
    (void)nth;
    if (ith >= e->n_samplers) return;
    for (;;) {
        int j = atomic_fetch_add_explicit(&e->b_next_row, 1, memory_order_relaxed);
        if (j >= e->b_n_out) break;
        if (e->b_mask_rc[j] <= 0) continue;
        const struct req *q = e->b_out_req[j];
        int rc = sampler_sample(e->samplers[ith], &q->sp, e->logits + (size_t)j * n_vocab,
                                q->tokens, q->s.n_prompt, q->tokens + q->s.n_prompt,
                                q->s.n_tokens - q->s.n_prompt, q->s.n_tokens, &e->b_res[j]);
        CHECK(rc == 0); /* parameters were validated at submit */
    }
}

int inferd_engine_step(inferd_engine *e)
{
    double t0 = time_now_s();
    struct sched *sc = &e->sched;
    const int n_batch = sched_build(sc, t0);
    const int n_seqs = sc->n_chunks;
    e->stats.last_step_tokens = n_batch;
    e->stats.last_step_seqs = n_seqs;
    e->stats.last_step_limit = sc->limit;
    if (n_batch == 0) return 0;
    /* The chunks become the forward's token rows, in batch order. */
    int t = 0;
    for (int j = 0; j < n_seqs; j++) {
        const struct sched_chunk *c = &sc->chunks[j];
        const struct req *q = (const struct req *)c->q;
        for (int k = 0; k < c->n; k++, t++) {
            e->b_tokens[t] = q->tokens[c->from + k];
            e->b_pos[t] = c->from + k;
            e->b_seq[t] = j;
            e->b_want[t] = c->want && k == c->n - 1;
        }
    }
    CHECK(t == n_batch);

    struct fwd_batch b = {
        .n_tokens = n_batch,
        .tokens = e->b_tokens,
        .pos = e->b_pos,
        .seq = e->b_seq,
        .want_logits = e->b_want,
        .n_seqs = n_seqs,
        .seqs = sc->seqs,
    };
    struct err_msg msg = {{0}};
    int n_jobs = grammar_hook_overlap(e, n_batch);
    int rc = fwd_run(e->fwd, &b, e->logits, &msg);
    CHECK(rc == 0); /* the batch was built from validated requests */
    double tg = time_now_s();
    grammar_hook_collect(e, n_jobs);
    e->stats.grammar_mask_s += time_now_s() - tg;

    /* Advance computed positions, commit completed blocks, then sample for
     * every logits row. */
    sched_advance(sc);
    int n_out = 0;
    for (int j = 0; j < n_seqs; j++)
        if (sc->chunks[j].want) e->b_out_req[n_out++] = (struct req *)sc->chunks[j].q;
    /* Grammar masks first (the matchers are not thread-safe), then the rows
     * are sampled on the compute threads, then the results are applied and
     * the events pushed in row order. */
    for (int j = 0; j < n_out; j++) {
        tg = time_now_s();
        e->b_mask_rc[j] = grammar_hook_mask(e->b_out_req[j]);
        e->stats.grammar_mask_s += time_now_s() - tg;
    }
    e->b_n_out = n_out;
    atomic_store_explicit(&e->b_next_row, 0, memory_order_relaxed);
    tg = time_now_s();
    if (n_out > 1 && e->n_samplers > 1)
        tpool_run(e->pool, sample_rows, e);
    else
        sample_rows(e, 0, 1);
    e->stats.sample_s += time_now_s() - tg;
    for (int j = 0; j < n_out; j++) {
        struct req *q = e->b_out_req[j];
        const struct sampler_result *res = &e->b_res[j];
        if (e->b_mask_rc[j] <= 0) {
            /* The grammar fails this request alone: no token fits, or its
             * mask ran past the budget (which bounded what it cost). */
            struct inferd_event *ev = push_event(e);
            ev->request = q->s.id;
            ev->token = -1;
            grammar_error_event(q, e->b_mask_rc[j], ev);
            finish(e, q, INFERD_FINISH_ERROR, ev);
            continue;
        }
        q->tokens[q->s.n_tokens++] = res->token;
        e->stats.n_generated_tokens++;
        struct inferd_event *ev = push_event(e);
        ev->request = q->s.id;
        ev->token = res->token;
        ev->logprob = res->logprob;
        ev->n_top = res->n_top;
        for (int i = 0; i < res->n_top; i++) {
            ev->top[i].token = res->top[i].token;
            ev->top[i].logprob = res->top[i].logprob;
        }
        ev->n_generated = q->s.n_tokens - q->s.n_prompt;
        bool done;
        int grc = grammar_hook_advance(q, res->token, &done);
        if (grc) {
            grammar_error_event(q, grc, ev);
            finish(e, q, INFERD_FINISH_ERROR, ev);
        } else if (done || (!q->ignore_eos && is_eog(e->model, res->token)))
            finish(e, q, INFERD_FINISH_STOP, ev);
        else if (q->s.n_tokens - q->s.n_prompt >= q->s.max_tokens)
            finish(e, q, INFERD_FINISH_LENGTH, ev);
    }
    /* Throughput for queue-time estimates: a moving average over busy steps;
     * the step's cost (sampling included: it is part of every gap a client
     * sees) feeds the chunk limit. */
    double dt = time_now_s() - t0;
    const bool decode_only = sc->n_decode == n_batch;
    sched_observe(sc, dt);
    if (decode_only) {
        e->stats.n_decode_steps++;
        e->stats.n_decode_step_tokens += (uint64_t)n_batch;
        e->stats.decode_step_s += dt;
    } else {
        e->stats.n_prompt_steps++;
        e->stats.prompt_step_s += dt;
    }
    if (dt > 0) {
        double tps = n_batch / dt;
        e->stats.tokens_per_s =
            e->stats.tokens_per_s > 0 ? 0.8 * e->stats.tokens_per_s + 0.2 * tps : tps;
    }
    return n_batch;
}

void inferd_engine_stats(const inferd_engine *e, struct inferd_stats *s)
{
    *s = e->stats;
    s->n_waiting = s->n_running = s->n_loading = 0;
    s->queued_tokens = 0;
    const struct sched *sc = &e->sched;
    s->n_steps = sc->stats.n_steps;
    s->n_prompt_tokens = sc->stats.n_prompt_tokens;
    s->n_preempted = sc->stats.n_preempted;
    if (e->prefix_on) {
        s->n_prefix_lookups = sc->stats.n_prefix_lookups;
        s->n_prefix_query_tokens = sc->stats.n_prefix_query_tokens;
        s->n_prefix_hits = sc->stats.n_prefix_hits;
        s->n_prefix_hit_blocks = sc->stats.n_prefix_hit_blocks;
        s->n_prefix_hit_tokens = sc->stats.n_prefix_hit_tokens;
        s->n_cached_tokens = sc->stats.n_prefix_hit_tokens;
    }
    for (int i = 0; i < sc->n_reqs; i++) {
        const struct sched_req *q = sc->reqs[i];
        if (q->state == SCHED_RUNNING) s->n_running++;
        if (q->state != SCHED_WAITING) continue;
        if (q->held) {
            s->n_loading++;
            continue;
        }
        s->n_waiting++;
        s->queued_tokens +=
            (q->n_tokens - q->n_computed) + (q->max_tokens - (q->n_tokens - q->n_prompt));
    }
    const struct kv_pool *p = &e->kv;
    s->kv_blocks_total = p->cfg.n_blocks;
    s->kv_blocks_free = p->n_free;
    s->kv_blocks_cached = e->prefix_on ? e->prefix.n_lru : 0;
    s->kv_blocks_used = p->cfg.n_blocks - s->kv_blocks_free - s->kv_blocks_cached;
    s->kv_blocks_indexed = e->prefix_on ? e->prefix.n_cached : 0;
    s->n_kv_stored = e->prefix_on ? e->prefix.n_stored : 0;
    s->n_kv_evicted = e->prefix_on ? e->prefix.n_evicted : 0;
    s->step_ms_fixed = sc->cost.fitted ? 1e3 * sc->cost.a_s : 0;
    s->step_ms_per_token = sc->cost.fitted ? 1e3 * sc->cost.b_s : 0;
    s->est_queue_ms = s->tokens_per_s > 0 ? 1000.0 * (double)s->queued_tokens / s->tokens_per_s : 0;
}

int inferd_kv_events(inferd_engine *e, struct inferd_kv_event *out, int cap)
{
    if (!e->prefix_on || cap <= 0) return 0;
    int n = 0;
    struct kv_prefix_event ev[64];
    while (n < cap) {
        int k = kv_prefix_take_events(&e->prefix, ev, MIN(cap - n, (int)ARRAY_LEN(ev)));
        if (k == 0) break;
        for (int i = 0; i < k; i++, n++) {
            out[n].kind =
                ev[i].kind == KV_PREFIX_EVENT_STORED ? INFERD_KV_STORED : INFERD_KV_EVICTED;
            kv_block_id_to_bytes(&ev[i].id, out[n].id);
        }
    }
    return n;
}

size_t inferd_kv_frame_bytes(const inferd_engine *e)
{
    return e->prefix_on ? kv_prefix_frame_bytes(&e->prefix) : 0;
}

int inferd_kv_export(inferd_engine *e, const uint8_t id[16], void *buf, size_t cap)
{
    if (!e->prefix_on) return ERR_NOT_FOUND;
    struct kv_block_id bid = kv_block_id_from_bytes(id);
    return kv_prefix_export(&e->prefix, &bid, buf, cap);
}

int inferd_engine_block_tokens(const inferd_engine *e)
{
    return e->cfg.block_tokens;
}

void inferd_kv_frame_layout(const inferd_engine *e, uint8_t fingerprint[16], uint32_t *n_layer,
                            uint32_t *layer_bytes)
{
    memcpy(fingerprint, e->fingerprint, 16);
    *n_layer = (uint32_t)e->kv.cfg.n_layer;
    *layer_bytes = (uint32_t)(2 * e->kv.half_bytes);
}

int inferd_kv_block_ids(const uint8_t fingerprint[16], int block_tokens, const char *salt,
                        size_t salt_len, const int32_t *tokens, int n_tokens, uint8_t (*ids)[16],
                        int cap)
{
    if (block_tokens <= 0 || n_tokens < 0 || cap < 0 || (salt_len && !salt)) return ERR_INVALID;
    int n = MIN(n_tokens / block_tokens, cap);
    if (n == 0) return 0;
    struct kv_block_id extra = kv_prefix_extra_key(salt, salt_len), id = {0, 0};
    uint8_t *scratch = xmalloc(48 + 4 * (size_t)block_tokens);
    for (int i = 0; i < n; i++) {
        id = kv_block_id_compute(fingerprint, block_tokens, i ? &id : NULL, &extra,
                                 tokens + (size_t)i * block_tokens, scratch);
        kv_block_id_to_bytes(&id, ids[i]);
    }
    free(scratch);
    return n;
}

int inferd_kv_cached_prefix(const inferd_engine *e, const uint8_t (*ids)[16], int n)
{
    if (!e->prefix_on) return 0;
    int i = 0;
    for (; i < n; i++) {
        struct kv_block_id id = kv_block_id_from_bytes(ids[i]);
        if (!kv_prefix_lookup(&e->prefix, &id, NULL)) break;
    }
    return i;
}

int inferd_kv_release_hold(inferd_engine *e, uint64_t id)
{
    struct sched_req *q = sched_find(&e->sched, id);
    if (!q || q->state == SCHED_FINISHED) return ERR_NOT_FOUND;
    q->held = false;
    return 0;
}

int inferd_kv_import(inferd_engine *e, const void *buf, size_t len, char *err, size_t err_len)
{
    struct err_msg msg = {{0}};
    int rc = e->prefix_on ? kv_prefix_import(&e->prefix, buf, len, &msg)
                          : err_set(&msg, ERR_INVALID, "kv import: the prefix cache is off");
    if (rc) copy_err(err, err_len, &msg, rc);
    return rc;
}
