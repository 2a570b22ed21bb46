/*
 * constrain.h - the engine's hooks into the grammar module (structured
 * output): one per-model context (vocabulary + compile cache), one per-engine
 * context (the mask helper thread), one matcher per constrained request.
 *
 *   any thread -> constrain_compile: a grammar for (kind, source, limits)
 *                 from the model's cache, compiled and probed on a miss
 *                 (inferd_grammar_compile runs it on the server's preparation
 *                 threads, off the engine thread)
 *   submit     -> constrain_attach: the request's matcher over a compiled
 *                 grammar (cheap: the start state's closure)
 *   sampling   -> constrain_mask: the allowed-token bitmap for the next token
 *                 (the sampler puts -inf on the rest); negative: the grammar
 *                 ran past its mask budget and the request fails alone
 *   sampled    -> constrain_advance: feed the token; says whether the request
 *                 is done (grammar complete and nothing may follow, or EOS)
 *
 * Per model (struct constrain_model, inside inferd_model): the vocabulary
 * (token bytes + trie) and the compile cache are built once, on the first
 * use from any thread, under the model's grammar mutex and published with a
 * release store, so engines that never see a grammar pay nothing and every
 * engine and preparation thread on the model shares one vocabulary, one
 * cache and the mask tables inside the cached grammars. The cache is thread
 * safe (grammar.h); its grammars are refcounted, so an engine request keeps
 * its grammar alive after the cache evicted it.
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
 * own lock, held for one table computation at a time, each bounded by the
 * mask budget - so the wait after the forward is bounded too, whatever a
 * grammar does. The masks are the same bits whichever thread fills them, so
 * the output is identical with and without the overlap (tested); inline mode
 * (inferd_engine_config.grammar_inline) fills them on the engine thread after
 * the forward instead. The helper starts with the first constrained request.
 *
 * Thread: the engine's owner thread calls the per-engine functions, like
 * every engine entry point; constrain_model_* and constrain_compile may be
 * called from any thread; the helper thread is internal.
 */
#ifndef INFERD_ENGINE_CONSTRAIN_H
#define INFERD_ENGINE_CONSTRAIN_H

#include "base/err.h"
#include "grammar/grammar.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct model;

#define CONSTRAIN_CACHE_GRAMMARS 64 /* compiled grammars kept per model */

/* The grammar state of one model, shared by its engines and by any thread
 * that compiles for it. */
struct constrain_model {
    pthread_mutex_t mu;          /* guards the build below */
    const struct model *m;       /* the model (tokenizer keys) */
    int32_t eog[8];              /* end-of-generation ids */
    int n_eog;                   /* entries */
    struct grammar_vocab *vocab; /* built on first use, then immutable; read with acquire */
    struct grammar_cache *cache; /* made with vocab; owned */
    int err;                     /* the vocabulary could not be built: every use fails so */
    struct err_msg err_msg;      /* its message */
};

void constrain_model_init(struct constrain_model *cm, const struct model *m, const int32_t *eog,
                          int n_eog);
void constrain_model_release(struct constrain_model *cm);
/* The model's vocabulary and compile cache, built on the first call (any
 * thread; later calls are one atomic load). Returns 0, or ERR_FORMAT /
 * ERR_UNSUPPORTED when the tokenizer cannot be read as token bytes. */
int constrain_model_get(struct constrain_model *cm, struct grammar_vocab **v,
                        struct grammar_cache **c, struct err_msg *msg);
/* A compiled and probed grammar for (kind, src, lim) with a reference for
 * the caller, from the model's cache (compiled on a miss, on the calling
 * thread). Any thread. Returns 0, or ERR_INVALID with msg ("grammar: ...":
 * a bad source, or a budget the grammar exceeds, naming the construct). */
int constrain_compile(struct constrain_model *cm, enum grammar_kind kind, const char *src,
                      size_t len, const struct grammar_limits *lim, struct grammar **out,
                      struct err_msg *msg);

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
    struct constrain_model *cm;        /* the model's grammar state */
    bool inline_masks;                 /* no helper thread: masks after the forward */
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
void constrain_init(struct constrain *c, struct constrain_model *cm, bool inline_masks);
void constrain_release(struct constrain *c);

/* A matcher for the compiled grammar g (which must come from this model's
 * cache: its tables are for the model's vocabulary); starts the helper
 * thread on first use. Returns 0, or ERR_INVALID when the start state
 * alone is beyond g's budgets (msg names the construct). */
int constrain_attach(struct constrain *c, struct grammar *g, struct grammar_matcher **out,
                     struct err_msg *msg);

/* Fills mask ((n_vocab + 63) / 64 words); returns the number of allowed
 * tokens (0: the grammar cannot go on with this vocabulary), or ERR_INVALID
 * when the mask ran past its budget (grammar_matcher_error has the message). */
int constrain_mask(struct grammar_matcher *m, uint64_t *mask);

/* Whether masks are filled by the helper during the forward. */
bool constrain_overlaps(const struct constrain *c);
/* Posts jobs (n >= 1; the array and the matchers stay untouched by the
 * caller until constrain_masks_wait returns). Requires constrain_overlaps. */
void constrain_masks_start(struct constrain *c, struct constrain_job *jobs, int n);
/* Waits until the posted masks are filled. */
void constrain_masks_wait(struct constrain *c);

/* Feeds the sampled token (one the last mask allowed). Returns 0 and sets
 * *done when the request is complete (an end-of-generation token was
 * accepted, or the grammar accepts and allows no further byte); or
 * ERR_INVALID when the step ran past its budget (the matcher is failed;
 * grammar_matcher_error has the message). */
int constrain_advance(struct grammar_matcher *m, int32_t token, bool *done);
/* Feeds tokens already output elsewhere (a resumed request) with no mask
 * before them. Returns 0 when every one is accepted and the grammar can
 * still go on; ERR_INVALID with a message naming the first that is not, or
 * saying the output completes the grammar already. */
int constrain_replay(struct grammar_matcher *m, const int32_t *tokens, int n, struct err_msg *msg);

#endif
