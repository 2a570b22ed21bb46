/*
 * constrain.c - see constrain.h. Glue, the per-model vocabulary and cache,
 * and the mask helper thread; the matching itself is in src/grammar/.
 */
#include "engine/constrain.h"

#include "base/check.h"
#include "model/model.h"

#include <string.h>

void constrain_model_init(struct constrain_model *cm, const struct model *m, const int32_t *eog,
                          int n_eog)
{
    memset(cm, 0, sizeof(*cm));
    cm->m = m;
    cm->n_eog = MIN(n_eog, (int)ARRAY_LEN(cm->eog));
    memcpy(cm->eog, eog, sizeof(int32_t) * (size_t)cm->n_eog);
    pthread_mutex_init(&cm->mu, NULL);
}

void constrain_model_release(struct constrain_model *cm)
{
    grammar_cache_free(cm->cache);
    grammar_vocab_free(cm->vocab);
    pthread_mutex_destroy(&cm->mu);
    memset(cm, 0, sizeof(*cm));
}

int constrain_model_get(struct constrain_model *cm, struct grammar_vocab **v,
                        struct grammar_cache **c, struct err_msg *msg)
{
    /* Double-checked: once built, the vocabulary and cache never change, and
     * the release store below orders their contents before the pointer. */
    struct grammar_vocab *vocab = __atomic_load_n(&cm->vocab, __ATOMIC_ACQUIRE);
    if (!vocab) {
        pthread_mutex_lock(&cm->mu);
        vocab = cm->vocab;
        if (!vocab && !cm->err) {
            struct grammar_vocab *built = NULL;
            cm->err = grammar_vocab_from_gguf(cm->m->gguf, cm->m->hp.n_vocab, cm->eog, cm->n_eog,
                                              &built, &cm->err_msg);
            if (!cm->err) {
                cm->cache = grammar_cache_new(built, CONSTRAIN_CACHE_GRAMMARS);
                __atomic_store_n(&cm->vocab, built, __ATOMIC_RELEASE);
                vocab = built;
            }
        }
        int err = cm->err;
        if (err) err_set(msg, err, "%s", cm->err_msg.text);
        pthread_mutex_unlock(&cm->mu);
        if (err) return err;
    }
    if (v) *v = vocab;
    if (c) *c = cm->cache;
    return 0;
}

int constrain_compile(struct constrain_model *cm, enum grammar_kind kind, const char *src,
                      size_t len, const struct grammar_limits *lim, struct grammar **out,
                      struct err_msg *msg)
{
    struct grammar_cache *cache;
    int rc = constrain_model_get(cm, NULL, &cache, msg);
    if (rc) return rc;
    return grammar_cache_get(cache, kind, src, len, lim, out, msg);
}

void constrain_init(struct constrain *c, struct constrain_model *cm, bool inline_masks)
{
    memset(c, 0, sizeof(*c));
    c->cm = cm;
    c->inline_masks = inline_masks;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

static void *helper_main(void *arg)
{
    struct constrain *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (c->state != CONSTRAIN_HELPER_POSTED && c->state != CONSTRAIN_HELPER_QUIT)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->state == CONSTRAIN_HELPER_QUIT) break;
        struct constrain_job *jobs = c->jobs;
        int n = c->n_jobs;
        pthread_mutex_unlock(&c->mu);
        for (int i = 0; i < n; i++)
            jobs[i].allowed = grammar_matcher_fill_mask(jobs[i].gm, jobs[i].mask);
        pthread_mutex_lock(&c->mu);
        c->state = CONSTRAIN_HELPER_DONE;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void constrain_release(struct constrain *c)
{
    if (c->helper_on) {
        pthread_mutex_lock(&c->mu);
        CHECK(c->state == CONSTRAIN_HELPER_IDLE);
        c->state = CONSTRAIN_HELPER_QUIT;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->helper, NULL);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    memset(c, 0, sizeof(*c));
}

int constrain_attach(struct constrain *c, struct grammar *g, struct grammar_matcher **out,
                     struct err_msg *msg)
{
    struct grammar_vocab *v;
    int rc = constrain_model_get(c->cm, &v, NULL, msg);
    if (rc) return rc;
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    const char *text;
    if ((rc = grammar_matcher_error(m, &text))) {
        err_set(msg, rc, "%s", text);
        grammar_matcher_free(m);
        return rc;
    }
    /* Without a helper the masks are simply filled inline. */
    if (!c->inline_masks && !c->helper_on)
        c->helper_on = pthread_create(&c->helper, NULL, helper_main, c) == 0;
    *out = m;
    return 0;
}

int constrain_mask(struct grammar_matcher *m, uint64_t *mask)
{
    return grammar_matcher_fill_mask(m, mask);
}

bool constrain_overlaps(const struct constrain *c)
{
    return c->helper_on;
}

void constrain_masks_start(struct constrain *c, struct constrain_job *jobs, int n)
{
    CHECK(c->helper_on && n >= 1);
    pthread_mutex_lock(&c->mu);
    CHECK(c->state == CONSTRAIN_HELPER_IDLE);
    c->jobs = jobs;
    c->n_jobs = n;
    c->state = CONSTRAIN_HELPER_POSTED;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

void constrain_masks_wait(struct constrain *c)
{
    pthread_mutex_lock(&c->mu);
    CHECK(c->state != CONSTRAIN_HELPER_IDLE);
    while (c->state != CONSTRAIN_HELPER_DONE)
        pthread_cond_wait(&c->cv, &c->mu);
    c->state = CONSTRAIN_HELPER_IDLE;
    c->jobs = NULL;
    c->n_jobs = 0;
    pthread_mutex_unlock(&c->mu);
}

int constrain_replay(struct grammar_matcher *m, const int32_t *tokens, int n, struct err_msg *msg)
{
    for (int i = 0; i < n; i++) {
        if (!grammar_matcher_accept_token(m, tokens[i])) {
            const char *text = NULL;
            int rc = grammar_matcher_error(m, &text);
            return err_set(msg, ERR_INVALID, "resumed output: token %d (id %d) %s%s", i, tokens[i],
                           rc ? "ran past a grammar budget: " : "is not allowed by the grammar",
                           rc && text ? text : "");
        }
        if (grammar_matcher_is_terminated(m) ||
            (grammar_matcher_is_accepting(m) && !grammar_matcher_can_continue(m)))
            return err_set(msg, ERR_INVALID,
                           "resumed output: the grammar is complete after token %d of %d", i, n);
    }
    return 0;
}

int constrain_advance(struct grammar_matcher *m, int32_t token, bool *done)
{
    *done = false;
    if (!grammar_matcher_accept_token(m, token)) {
        /* The sampler only draws tokens inside the mask: only a budget can
         * refuse one. */
        int rc = grammar_matcher_error(m, NULL);
        CHECK(rc != 0);
        return rc;
    }
    *done = grammar_matcher_is_terminated(m) ||
            (grammar_matcher_is_accepting(m) && !grammar_matcher_can_continue(m));
    return 0;
}
