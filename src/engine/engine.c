/*
 * engine.c - the engine behind include/inferd/inferd.h: requests, the step
 * scheduler, sampling and events.
 *
 * A step builds one batch under the token budget: first one decode token for
 * every running request whose prompt is done (oldest first), then prefill
 * chunks of requests still in their prompt, oldest first, each chunk as large
 * as the remaining budget allows. KV blocks are reserved before the forward.
 * A prompt chunk that cannot get blocks waits for a later step; a decode
 * token that cannot get one preempts the newest request holding blocks,
 * which goes back to waiting and later recomputes every token it has (its
 * output does not change: the forward pass is bit-exact). After the forward,
 * every request that produced logits samples one token and emits an event.
 *
 *   waiting --admit--> running (prefill chunks ... decode ...) --> finished
 *      ^                  |
 *      +----preempted-----+
 *
 * Sampling is keyed by (seed, position) and logits are batch-invariant
 * (forward.h), so a request's events are the same whatever else runs.
 *
 * Thread model: every entry point is called from one thread at a time (the
 * owner of the engine); compute fans out to the thread pool inside fwd_run.
 */
#include "inferd/inferd.h"

#include "base/check.h"
#include "base/tpool.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "kernels/kernels.h"
#include "kv/pool.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct inferd_model {
    struct model *m; /* loaded weights */
    int32_t eog[8];  /* end-of-generation token ids */
    int n_eog;       /* entries of eog */
};

enum req_state { REQ_STATE_WAITING, REQ_STATE_RUNNING, REQ_STATE_FINISHED };

struct req {
    uint64_t id;              /* handle given to the caller */
    enum req_state state;     /* lifecycle */
    int32_t *tokens;          /* (cap) prompt then generated tokens */
    int n_prompt;             /* prompt length */
    int n_tokens;             /* prompt + generated */
    int cap;                  /* allocated entries of tokens */
    int n_computed;           /* positions whose K/V are in the cache */
    int max_tokens;           /* generation limit */
    bool ignore_eos;          /* do not stop at end-of-generation tokens */
    bool cancelled;           /* finish at the next step */
    struct sampler_params sp; /* sampling parameters (bias array owned) */
    struct kv_seq kv;         /* block table */
    int batch_seq;            /* index in the current batch's seqs, or -1 */
};

struct inferd_engine {
    struct inferd_model *model;      /* not owned */
    struct inferd_engine_config cfg; /* resolved configuration */
    struct tpool *pool;              /* compute threads */
    struct kv_pool kv;               /* paged cache */
    struct fwd_ctx *fwd;             /* forward scratch */
    struct sampler *sampler;         /* sampling scratch */
    struct req **reqs;               /* (n_reqs) live requests, admission order */
    int n_reqs, cap_reqs;            /* count, allocated */
    uint64_t next_id;                /* next request id */
    /* step scratch, sized for token_budget */
    int32_t *b_tokens, *b_pos, *b_seq; /* (token_budget) */
    bool *b_want;                      /* (token_budget) */
    struct req **b_out_req;            /* (token_budget) request of each logits row */
    const struct kv_seq **b_seqs;      /* (max_seqs) */
    struct req **b_seq_req;            /* (max_seqs) request of each batch sequence */
    float *logits;                     /* (token_budget, n_vocab) */
    struct inferd_event *events;       /* ring of pending events */
    int ev_head, ev_count, ev_cap;     /* ring state */
    struct inferd_stats stats;         /* counters */
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
    *out = im;
    return 0;
}

void inferd_model_free(inferd_model *im)
{
    if (!im) return;
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

int inferd_engine_new(inferd_model *im, const struct inferd_engine_config *cfg_in,
                      inferd_engine **out, char *err, size_t err_len)
{
    const struct model_hparams *hp = &im->m->hp;
    struct err_msg msg = {{0}};
    struct inferd_engine_config cfg = *cfg_in;
    if (cfg.n_threads <= 0) cfg.n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (cfg.block_tokens <= 0) cfg.block_tokens = KV_BLOCK_TOKENS_DEFAULT;
    if (cfg.token_budget <= 0) cfg.token_budget = 512;
    if (cfg.max_seqs <= 0) cfg.max_seqs = 64;
    if (cfg.max_ctx <= 0) cfg.max_ctx = MIN(hp->n_ctx_train, 4096);
    if (cfg.n_threads > 256 || cfg.token_budget > 65536 || cfg.max_seqs > 4096 ||
        cfg.max_ctx > (1 << 22)) {
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
    e->pool = tpool_new(cfg.n_threads);
    rc = fwd_ctx_new(im->m, &e->kv, e->pool, cfg.token_budget, cfg.max_ctx, &e->fwd, &msg);
    if (rc) goto err_free;
    e->sampler = sampler_new(hp->n_vocab);
    size_t B = (size_t)cfg.token_budget;
    e->b_tokens = xmalloc(sizeof(int32_t) * B);
    e->b_pos = xmalloc(sizeof(int32_t) * B);
    e->b_seq = xmalloc(sizeof(int32_t) * B);
    e->b_want = xmalloc(sizeof(bool) * B);
    e->b_out_req = xmalloc(sizeof(struct req *) * B);
    e->b_seqs = xmalloc(sizeof(struct kv_seq *) * (size_t)cfg.max_seqs);
    e->b_seq_req = xmalloc(sizeof(struct req *) * (size_t)cfg.max_seqs);
    e->logits = xaligned_alloc(sizeof(float) * B * (size_t)hp->n_vocab);
    e->stats.kv_blocks_total = cfg.kv_blocks;
    *out = e;
    return 0;

err_free:
    copy_err(err, err_len, &msg, rc);
    inferd_engine_free(e);
    return rc;
}

static void req_free(struct inferd_engine *e, struct req *r)
{
    kv_seq_release(&e->kv, &r->kv);
    free(r->tokens);
    free((void *)r->sp.logit_bias);
    free(r);
}

void inferd_engine_free(inferd_engine *e)
{
    if (!e) return;
    for (int i = 0; i < e->n_reqs; i++)
        req_free(e, e->reqs[i]);
    free(e->reqs);
    fwd_ctx_free(e->fwd);
    if (e->pool) tpool_free(e->pool);
    if (e->sampler) sampler_free(e->sampler);
    kv_pool_release(&e->kv);
    free(e->b_tokens);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_out_req);
    free(e->b_seqs);
    free(e->b_seq_req);
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
    if ((int64_t)r->n_prompt + r->max_tokens > e->cfg.max_ctx) {
        rc = err_set(&msg, ERR_TOO_LARGE,
                     "prompt (%d tokens) + max_tokens (%d) exceeds the context length %d",
                     r->n_prompt, r->max_tokens, e->cfg.max_ctx);
        goto err;
    }
    for (int i = 0; i < r->n_prompt; i++) {
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab) {
            rc = err_set(&msg, ERR_INVALID, "prompt[%d]: token id %d is out of range [0, %d)", i,
                         r->prompt[i], n_vocab);
            goto err;
        }
    }
    struct req *q = xcalloc(1, sizeof(*q));
    to_sampler_params(&r->sampling, &q->sp);
    if ((rc = sampler_params_validate(&q->sp, n_vocab, &msg))) {
        free((void *)q->sp.logit_bias);
        free(q);
        goto err;
    }
    q->id = e->next_id++;
    q->state = REQ_STATE_WAITING;
    q->cap = r->n_prompt + r->max_tokens;
    q->tokens = xmalloc(sizeof(int32_t) * (size_t)q->cap);
    memcpy(q->tokens, r->prompt, sizeof(int32_t) * (size_t)r->n_prompt);
    q->n_prompt = q->n_tokens = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->ignore_eos = r->ignore_eos;
    q->batch_seq = -1;
    if (e->n_reqs == e->cap_reqs) {
        e->cap_reqs = MAX(16, e->cap_reqs * 2);
        e->reqs = xrealloc(e->reqs, sizeof(*e->reqs) * (size_t)e->cap_reqs);
    }
    e->reqs[e->n_reqs++] = q;
    *id = q->id;
    return 0;
err:
    copy_err(err, err_len, &msg, rc);
    return rc;
}

void inferd_cancel(inferd_engine *e, uint64_t id)
{
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id) e->reqs[i]->cancelled = true;
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

static void finish(struct inferd_engine *e, struct req *q, enum inferd_finish why,
                   struct inferd_event *ev)
{
    if (!ev) {
        ev = push_event(e);
        ev->request = q->id;
        ev->token = -1;
    }
    ev->finish = why;
    ev->n_prompt = q->n_prompt;
    ev->n_generated = q->n_tokens - q->n_prompt;
    q->state = REQ_STATE_FINISHED;
    kv_seq_release(&e->kv, &q->kv);
}

static bool is_eog(const struct inferd_model *im, int32_t tok)
{
    for (int i = 0; i < im->n_eog; i++)
        if (im->eog[i] == tok) return true;
    return false;
}

/* Preempts the newest request that holds KV blocks and is not in the batch
 * being built: frees its blocks and sends it back to waiting, to recompute
 * its tokens later. Returns it, or NULL if there is none. */
static struct req *preempt_newest(struct inferd_engine *e)
{
    for (int i = e->n_reqs - 1; i >= 0; i--) {
        struct req *q = e->reqs[i];
        if (q->state != REQ_STATE_RUNNING || q->batch_seq >= 0 || q->kv.n_blocks == 0) continue;
        kv_seq_release(&e->kv, &q->kv);
        q->n_computed = 0;
        q->state = REQ_STATE_WAITING;
        e->stats.n_preempted++;
        return q;
    }
    return NULL;
}

/* Adds tokens [from, from + n) of q to the batch; the last one wants logits
 * if it completes the known tokens. Returns false if KV blocks ran out. */
static bool batch_add(struct inferd_engine *e, struct req *q, int n, int *n_batch, int *n_seqs)
{
    int from = q->n_computed;
    if (kv_seq_reserve(&e->kv, &q->kv, from + n)) return false;
    if (q->batch_seq < 0) {
        q->batch_seq = (*n_seqs)++;
        e->b_seqs[q->batch_seq] = &q->kv;
        e->b_seq_req[q->batch_seq] = q;
    }
    for (int i = 0; i < n; i++) {
        int t = (*n_batch)++;
        e->b_tokens[t] = q->tokens[from + i];
        e->b_pos[t] = from + i;
        e->b_seq[t] = q->batch_seq;
        e->b_want[t] = from + i == q->n_tokens - 1;
    }
    return true;
}

int inferd_engine_step(inferd_engine *e)
{
    /* Retire cancelled and finished requests first, freeing their blocks. */
    int w = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        struct req *q = e->reqs[i];
        if (q->cancelled && q->state != REQ_STATE_FINISHED)
            finish(e, q, INFERD_FINISH_CANCELLED, NULL);
        if (q->state == REQ_STATE_FINISHED) {
            req_free(e, q);
            continue;
        }
        q->batch_seq = -1;
        e->reqs[w++] = q;
    }
    e->n_reqs = w;

    int n_batch = 0, n_seqs = 0, running = 0;
    const int budget = e->cfg.token_budget;
    /* Decode tokens first: one per running request with exactly one token
     * not yet in the cache. If its next block is not to be had, preempt the
     * newest request holding blocks (not one already in this batch): it
     * drops its KV and recomputes later from its tokens, which - the forward
     * pass being bit-exact - changes nothing in its output. */
    for (int i = 0; i < e->n_reqs && n_batch < budget && n_seqs < e->cfg.max_seqs; i++) {
        struct req *q = e->reqs[i];
        if (q->state != REQ_STATE_RUNNING || q->n_tokens - q->n_computed != 1) continue;
        while (!batch_add(e, q, 1, &n_batch, &n_seqs)) {
            struct req *victim = preempt_newest(e);
            if (!victim || victim == q) break;
        }
    }
    /* Then prompt chunks (and recomputation after preemption), oldest first. */
    for (int i = 0; i < e->n_reqs && n_batch < budget; i++) {
        struct req *q = e->reqs[i];
        bool fresh = q->state == REQ_STATE_WAITING;
        bool catching_up = q->state == REQ_STATE_RUNNING && q->n_tokens - q->n_computed > 1;
        if ((!fresh && !catching_up) || q->batch_seq >= 0) continue;
        if (n_seqs == e->cfg.max_seqs) break;
        int n = MIN(q->n_tokens - q->n_computed, budget - n_batch);
        if (!batch_add(e, q, n, &n_batch, &n_seqs)) break;
        q->state = REQ_STATE_RUNNING;
    }
    for (int i = 0; i < e->n_reqs; i++)
        running += e->reqs[i]->state == REQ_STATE_RUNNING;
    e->stats.n_running = running;
    e->stats.n_waiting = e->n_reqs - running;
    e->stats.kv_blocks_used = e->kv.cfg.n_blocks - e->kv.n_free;
    if (n_batch == 0) return 0;

    struct fwd_batch b = {
        .n_tokens = n_batch,
        .tokens = e->b_tokens,
        .pos = e->b_pos,
        .seq = e->b_seq,
        .want_logits = e->b_want,
        .n_seqs = n_seqs,
        .seqs = e->b_seqs,
    };
    struct err_msg msg = {{0}};
    int rc = fwd_run(e->fwd, &b, e->logits, &msg);
    CHECK(rc == 0); /* the batch was built from validated requests */
    e->stats.n_steps++;

    /* Advance computed positions, then sample for every logits row. */
    int n_out = 0;
    for (int t = 0; t < n_batch; t++) {
        struct req *q = e->b_seq_req[e->b_seq[t]];
        if (q->n_computed < q->n_prompt) e->stats.n_prompt_tokens++;
        q->n_computed++;
        if (e->b_want[t]) e->b_out_req[n_out++] = q;
    }
    const int n_vocab = e->model->m->hp.n_vocab;
    for (int j = 0; j < n_out; j++) {
        struct req *q = e->b_out_req[j];
        struct sampler_result res;
        rc = sampler_sample(e->sampler, &q->sp, e->logits + (size_t)j * n_vocab, q->tokens,
                            q->n_prompt, q->tokens + q->n_prompt, q->n_tokens - q->n_prompt,
                            q->n_tokens, &res);
        CHECK(rc == 0); /* parameters were validated at submit */
        q->tokens[q->n_tokens++] = res.token;
        e->stats.n_generated_tokens++;
        struct inferd_event *ev = push_event(e);
        ev->request = q->id;
        ev->token = res.token;
        ev->logprob = res.logprob;
        ev->n_top = res.n_top;
        for (int i = 0; i < res.n_top; i++) {
            ev->top[i].token = res.top[i].token;
            ev->top[i].logprob = res.top[i].logprob;
        }
        ev->n_generated = q->n_tokens - q->n_prompt;
        if (!q->ignore_eos && is_eog(e->model, res.token))
            finish(e, q, INFERD_FINISH_STOP, ev);
        else if (q->n_tokens - q->n_prompt >= q->max_tokens)
            finish(e, q, INFERD_FINISH_LENGTH, ev);
    }
    return n_batch;
}

void inferd_engine_stats(const inferd_engine *e, struct inferd_stats *s)
{
    *s = e->stats;
}
