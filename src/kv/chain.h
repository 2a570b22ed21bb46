/*
 * chain.h - the tier chain: the KV tiers behind the engine pool, in order
 * (fastest first), and the I/O thread that moves frames in and out of them
 * while the engine keeps stepping.
 *
 * The engine thread talks to the chain through three queues:
 *
 *   put    a frame to store: a block that entered the prefix index
 *          (write-through tiers take it) or is leaving the pool (write-back
 *          tiers take it: the engine's pre-eviction hook)
 *   load   a run of block ids a new request's prompt needs and the pool
 *          lacks; the I/O thread finds each id in the first tier that holds
 *          it, in order, and stops at the first id no tier has (only a
 *          leading run of blocks is of use to a prompt)
 *   done   finished loads: the frames, leading blocks first, which tier
 *          served how many, and how long it took
 *
 * Loads go before puts: a load is on some request's time to first token,
 * a put is not. Puts are copied into the queue, bounded in bytes; when the
 * queue is full a put is dropped and counted (the write path never slows
 * the engine).
 *
 * Cost rule: a load that would be slower than recomputing is not done. The
 * caller passes what one block costs to recompute (the engine's step-cost
 * model: ms per token x block tokens); each tier keeps a moving average of
 * what one block costs to load from it (measured); the I/O thread stops a
 * load at the first block whose tier costs more than recomputing it.
 *
 * Time: expiries are unix seconds from the injectable clock in
 * kv_chain_opts (the wall clock by default), so tests advance time.
 *
 * Thread safety: kv_chain_put/load/poll/snapshot may be called from any
 * thread (one mutex guards the queues and the published stats); the tiers
 * themselves are used by the I/O thread only.
 */
#ifndef INFERD_KV_CHAIN_H
#define INFERD_KV_CHAIN_H

#include "base/err.h"
#include "kv/tier.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { KV_CHAIN_MAX_TIERS = 8 };
#define KV_CHAIN_SPARE_MAX ((size_t)256 << 20)

/* When a tier takes a block. */
enum kv_write_policy {
    KV_WRITE_THROUGH, /* when it enters the prefix index (computed or imported) */
    KV_WRITE_BACK,    /* when the engine pool evicts it */
};

struct kv_chain_tier_cfg {
    enum kv_write_policy write; /* see above */
    int min_prompt_blocks;      /* admission: only blocks of prompts of at least this many
                                   full blocks (0: all) */
};

struct kv_chain_opts {
    int64_t (*now)(void *ctx); /* unix seconds (NULL: time()) */
    void *now_ctx;             /* for now */
    void (*wake)(void *ctx);   /* called by the I/O thread when a load finished (NULL: none) */
    void *wake_ctx;            /* for wake */
    size_t max_queue_bytes;    /* bound on queued put frames (0: 256 MiB) */
    size_t staging_bytes;      /* a load buffer of this size (at most KV_CHAIN_SPARE_MAX)
                                  made ready when the I/O thread starts, so that the first
                                  load does not wait for fresh pages (0: none) */
};

/* One finished load (kv_chain_poll). */
struct kv_chain_load {
    uint64_t tag;                    /* the caller's name for it */
    int n_want;                      /* ids asked for */
    int n_frames;                    /* leading ids found, verified, in frames */
    uint8_t *frames;                 /* (n_frames x frame bytes), owned: kv_chain_load_free */
    size_t frames_cap;               /* bytes allocated at frames */
    int by_tier[KV_CHAIN_MAX_TIERS]; /* of n_frames, how many each tier served */
    double ms;                       /* from queued to done */
    bool cost_stop;                  /* stopped early: loading cost more than recomputing */
};

struct kv_chain_tier_stats {
    char name[64];             /* the tier's name */
    struct kv_tier_stats tier; /* the tier's own counters */
    double ms_per_block;       /* measured load cost per block (0: none yet) */
};

struct kv_chain_stats {
    int n_tiers; /* entries of tiers */
    struct kv_chain_tier_stats tiers[KV_CHAIN_MAX_TIERS];
    uint64_t puts_dropped;       /* puts refused: queue full */
    uint64_t loads;              /* loads done */
    uint64_t loads_cost_stopped; /* of those, cut short by the cost rule */
    size_t queue_bytes;          /* gauge: frames waiting to be put */
};

struct kv_chain;

/* A chain for frames of layout l. Tiers are added before kv_chain_start. */
int kv_chain_new(const struct kv_frame_layout *l, const struct kv_chain_opts *o,
                 struct kv_chain **out, struct err_msg *msg);
/* Appends an opened tier (the chain owns it from now on). */
int kv_chain_add(struct kv_chain *c, struct kv_tier *t, const struct kv_chain_tier_cfg *cfg,
                 struct err_msg *msg);
/* Starts the I/O thread. */
int kv_chain_start(struct kv_chain *c, struct err_msg *msg);
/* Stops the thread (queued puts are written first, pending loads end
 * empty) and closes the tiers. NULL is fine. */
void kv_chain_free(struct kv_chain *c);

int kv_chain_n_tiers(const struct kv_chain *c);
/* Unix seconds by the chain's clock. */
int64_t kv_chain_now(const struct kv_chain *c);

/* Queues a copy of a frame for the tiers whose write policy matches
 * (evicting: write-back tiers; else write-through ones) and whose admission
 * takes a prompt of prompt_blocks blocks. expires: unix seconds. parent: the
 * block before it in its prompt (NULL: none known), the tiers'
 * eviction-order hint (kv_tier_ops.put). Returns false if dropped (queue full) or no tier
 * wanted it. */
bool kv_chain_put(struct kv_chain *c, const uint8_t id[16], const void *frame, size_t len,
                  int64_t expires, bool evicting, int prompt_blocks, const uint8_t *parent);
/* Queues a load of ids[0..n) under tag; a hit raises the block's expiry to
 * at least `expires` in the tier that served it. recompute_ms_per_block: see
 * the cost rule (<= 0: no limit). */
void kv_chain_load(struct kv_chain *c, uint64_t tag, const uint8_t (*ids)[16], int n,
                   double recompute_ms_per_block, int64_t expires);
/* Moves up to cap finished loads to out; returns how many. */
int kv_chain_poll(struct kv_chain *c, struct kv_chain_load *out, int cap);
/* Gives l's frames back: the chain keeps the largest buffer of at most
 * KV_CHAIN_SPARE_MAX bytes for the next load (a buffer whose pages are
 * already mapped: a new one costs a page fault every 4 KiB while the load
 * fills it), and frees the rest. */
void kv_chain_load_free(struct kv_chain *c, struct kv_chain_load *l);
/* Counters of the chain and of each tier, as of the last I/O job. */
void kv_chain_snapshot(struct kv_chain *c, struct kv_chain_stats *s);

#endif
