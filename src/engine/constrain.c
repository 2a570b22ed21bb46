/*
 * constrain.c - see constrain.h. Glue only: the work is in src/grammar/.
 */
#include "engine/constrain.h"

#include "base/check.h"
#include "model/model.h"

#include <string.h>

void constrain_init(struct constrain *c, const struct model *m, const int32_t *eog, int n_eog)
{
    memset(c, 0, sizeof(*c));
    c->m = m;
    c->n_eog = MIN(n_eog, (int)ARRAY_LEN(c->eog));
    memcpy(c->eog, eog, sizeof(int32_t) * (size_t)c->n_eog);
}

void constrain_release(struct constrain *c)
{
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

bool constrain_advance(struct grammar_matcher *m, int32_t token)
{
    bool ok = grammar_matcher_accept_token(m, token);
    CHECK(ok); /* the sampler only draws tokens inside the mask */
    return grammar_matcher_is_terminated(m) ||
           (grammar_matcher_is_accepting(m) && !grammar_matcher_can_continue(m));
}
