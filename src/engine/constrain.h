/*
 * constrain.h - the engine's hooks into the grammar module (structured
 * output): one per-engine context, one matcher per constrained request.
 *
 *   submit   -> constrain_attach: compile (through the engine's cache) and
 *               make the request's matcher
 *   sampling -> constrain_mask: the allowed-token bitmap for the next token
 *               (the sampler puts -inf on the rest)
 *   sampled  -> constrain_advance: feed the token; says whether the request
 *               is done (grammar complete and nothing may follow, or EOS)
 *
 * The vocabulary (token bytes + trie) and the compile cache are built on the
 * first constrained request, so engines that never see one pay nothing.
 *
 * Thread: the engine's owner thread, like every engine entry point. The mask
 * for step N+1 is computed after step N's forward pass (not overlapped with
 * it yet; see docs/grammar.md "Next").
 */
#ifndef INFERD_ENGINE_CONSTRAIN_H
#define INFERD_ENGINE_CONSTRAIN_H

#include "base/err.h"
#include "grammar/grammar.h"

#include <stdbool.h>
#include <stdint.h>

struct model;

#define CONSTRAIN_CACHE_GRAMMARS 64 /* compiled grammars kept per engine */

struct constrain {
    const struct model *m;       /* the engine's model (tokenizer keys) */
    int32_t eog[8];              /* end-of-generation ids */
    int n_eog;                   /* entries */
    struct grammar_vocab *vocab; /* built on first use; owned */
    struct grammar_cache *cache; /* built on first use; owned */
};

void constrain_init(struct constrain *c, const struct model *m, const int32_t *eog, int n_eog);
void constrain_release(struct constrain *c);

/* A matcher for (kind, src): compiled or taken from the cache. Returns 0,
 * or ERR_INVALID / ERR_TOO_LARGE / ERR_UNSUPPORTED with msg ("grammar: ..."). */
int constrain_attach(struct constrain *c, enum grammar_kind kind, const char *src, size_t len,
                     struct grammar_matcher **out, struct err_msg *msg);

/* Fills mask ((n_vocab + 63) / 64 words); returns the number of allowed
 * tokens (0: the grammar cannot go on with this vocabulary). */
int constrain_mask(struct grammar_matcher *m, uint64_t *mask);

/* Feeds the sampled token. Returns true when the request is complete: an
 * end-of-generation token was accepted, or the grammar accepts and allows no
 * further byte. The token must be one the last mask allowed (CHECKed). */
bool constrain_advance(struct grammar_matcher *m, int32_t token);

#endif
