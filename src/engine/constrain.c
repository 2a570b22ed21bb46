/*
 * constrain.c - see constrain.h. Glue and the mask helper thread; the
 * matching itself is in src/grammar/.
 */
#include "engine/constrain.h"

#include "base/check.h"
#include "model/model.h"

#include <string.h>

void constrain_init(struct constrain *c, const struct model *m, const int32_t *eog, int n_eog,
                    bool inline_masks)
{
    memset(c, 0, sizeof(*c));
    c->m = m;
    c->n_eog = MIN(n_eog, (int)ARRAY_LEN(c->eog));
    memcpy(c->eog, eog, sizeof(int32_t) * (size_t)c->n_eog);
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
    grammar_cache_free(c->cache);
    grammar_vocab_free(c->vocab);
    memset(c, 0, sizeof(*c));
}

int constrain_attach(struct constrain *c, enum grammar_kind kind, const char *src, size_t len,
                     struct grammar_matcher **out, struct err_msg *msg)
{
    if (!c->vocab) {
        int rc =
            grammar_vocab_from_gguf(c->m->gguf, c->m->hp.n_vocab, c->eog, c->n_eog, &c->vocab, msg);
        if (rc) return rc;
        c->cache = grammar_cache_new(c->vocab, CONSTRAIN_CACHE_GRAMMARS);
        /* Without a helper the masks are simply filled inline. */
        if (!c->inline_masks) c->helper_on = pthread_create(&c->helper, NULL, helper_main, c) == 0;
    }
    struct grammar *g;
    int rc = grammar_cache_get(c->cache, kind, src, len, &g, msg);
    if (rc) return rc;
    *out = grammar_matcher_new(g, c->vocab);
    grammar_unref(g);
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

bool constrain_advance(struct grammar_matcher *m, int32_t token)
{
    bool ok = grammar_matcher_accept_token(m, token);
    CHECK(ok); /* the sampler only draws tokens inside the mask */
    return grammar_matcher_is_terminated(m) ||
           (grammar_matcher_is_accepting(m) && !grammar_matcher_can_continue(m));
}
