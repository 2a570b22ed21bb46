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
 * Masks overlap the forward pass. A request's mask depends only on its
 * matcher, and the matcher is final once the previous token was fed, so
 * before a step's forward the engine hands the masks of the requests that
 * will sample in it to a helper thread (constrain_masks_start) and collects
 * them after (constrain_masks_wait):
 *
 *   engine thread:  build batch | start | fwd_run (with the pool) | wait | sample
 *   helper thread:                      | fill masks ...     |
 *
 * During that window the helper alone touches those matchers (the engine
 * thread only runs the forward); the grammar's shared mask tables have their
 * own lock. The masks are the same bits whichever thread fills them, so the
 * output is identical with and without the overlap (tested); inline mode
 * (inferd_engine_config.grammar_inline) fills them on the engine thread after
 * the forward instead. The helper starts with the first constrained request.
 *
 * Thread: the engine's owner thread calls everything here, like every engine
 * entry point; the helper thread is internal.
 */
#ifndef INFERD_ENGINE_CONSTRAIN_H
#define INFERD_ENGINE_CONSTRAIN_H

#include "base/err.h"
#include "grammar/grammar.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct model;

#define CONSTRAIN_CACHE_GRAMMARS 64 /* compiled grammars kept per engine */

/* One mask to fill: the helper writes mask and allowed. */
struct constrain_job {
    struct grammar_matcher *gm; /* the request's matcher (the helper's during the window) */
    uint64_t *mask;             /* ((n_vocab + 63) / 64) output */
    int allowed;                /* output: allowed tokens (constrain_mask's result) */
};

enum constrain_helper_state {
    CONSTRAIN_HELPER_IDLE,   /* waiting for a batch */
    CONSTRAIN_HELPER_POSTED, /* a batch is posted and not finished */
    CONSTRAIN_HELPER_DONE,   /* the batch's masks are filled */
    CONSTRAIN_HELPER_QUIT,   /* exit */
};

struct constrain {
    const struct model *m;             /* the engine's model (tokenizer keys) */
    int32_t eog[8];                    /* end-of-generation ids */
    int n_eog;                         /* entries */
    bool inline_masks;                 /* no helper thread: masks after the forward */
    struct grammar_vocab *vocab;       /* built on first use; owned */
    struct grammar_cache *cache;       /* built on first use; owned */
    bool helper_on;                    /* the helper thread runs */
    pthread_t helper;                  /* fills posted masks */
    pthread_mutex_t mu;                /* guards state, jobs, n_jobs */
    pthread_cond_t cv;                 /* state changes */
    enum constrain_helper_state state; /* see the enum */
    struct constrain_job *jobs;        /* (n_jobs) the posted batch; caller-owned */
    int n_jobs;                        /* entries */
};

/* inline_masks: fill masks on the calling thread after the forward (no
 * helper thread). */
void constrain_init(struct constrain *c, const struct model *m, const int32_t *eog, int n_eog,
                    bool inline_masks);
void constrain_release(struct constrain *c);

/* A matcher for (kind, src): compiled or taken from the cache. Returns 0,
 * or ERR_INVALID / ERR_TOO_LARGE / ERR_UNSUPPORTED with msg ("grammar: ..."). */
int constrain_attach(struct constrain *c, enum grammar_kind kind, const char *src, size_t len,
                     struct grammar_matcher **out, struct err_msg *msg);

/* Fills mask ((n_vocab + 63) / 64 words); returns the number of allowed
 * tokens (0: the grammar cannot go on with this vocabulary). */
int constrain_mask(struct grammar_matcher *m, uint64_t *mask);

/* Whether masks are filled by the helper during the forward. */
bool constrain_overlaps(const struct constrain *c);
/* Posts jobs (n >= 1; the array and the matchers stay untouched by the
 * caller until constrain_masks_wait returns). Requires constrain_overlaps. */
void constrain_masks_start(struct constrain *c, struct constrain_job *jobs, int n);
/* Waits until the posted masks are filled. */
void constrain_masks_wait(struct constrain *c);

/* Feeds the sampled token. Returns true when the request is complete: an
 * end-of-generation token was accepted, or the grammar accepts and allows no
 * further byte. The token must be one the last mask allowed (CHECKed). */
bool constrain_advance(struct grammar_matcher *m, int32_t token);

#endif
