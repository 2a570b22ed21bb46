/*
 * tiers.h - the KV tiers of an engine process (`inferd serve`, `inferd
 * worker`): what the operator asked for (--kv-tier, --kv-evict, --kv-admit,
 * --kv-ttl) and opening it into a tier chain for the process's runner.
 *
 * RAM tiers take blocks as the engine pool evicts them (write-back: the
 * engine needs the pre-eviction hook); the others as blocks enter the
 * prefix index (write-through), subject to admission. Blocks live for the
 * TTL of the traffic class of the request that stored or hit them.
 */
#ifndef INFERD_NODE_TIERS_H
#define INFERD_NODE_TIERS_H

#include "base/err.h"
#include "inferd/inferd.h"
#include "kv/chain.h"
#include "kv/spec.h"

#include <stdbool.h>

struct runner;

struct node_tiers {
    struct kv_tier_spec specs[KV_CHAIN_MAX_TIERS]; /* (n) fastest first */
    int n;                                         /* entries of specs */
    bool off;                                      /* --kv-tier none: no tiers at all */
    struct kv_tier_policy policy;                  /* RAM and disk tiers: eviction, admission */
    int admit_prompt_blocks;                       /* tiers but RAM: only blocks of prompts of
                                                      at least this many blocks (0: all) */
    struct kv_ttl_classes ttl;                     /* traffic classes and their TTLs */
};

/* None listed; the default traffic classes. */
void node_tiers_default(struct node_tiers *t);
/* Whether the engine needs the pre-eviction hook (a RAM tier listed). */
bool node_tiers_write_back(const struct node_tiers *t);
/* Opens t's tiers for engine e (or, when t lists none, dflt; NULL: no
 * default) into a chain whose finished loads wake runner r, with staging
 * for a max_ctx-token prompt. *out stays NULL when there are no tiers
 * (t->off, the engine's prefix cache off, none listed and no default). A
 * listed tier that cannot open is an error; a default one that cannot is a
 * warning and no tiers. */
int node_tiers_open(const struct node_tiers *t, const struct kv_tier_spec *dflt, inferd_engine *e,
                    int max_ctx, struct runner *r, struct kv_chain **out, struct err_msg *msg);

/* Command-line setters for cmd_opt (dst: a struct node_tiers). */
int node_tiers_add(void *dst, const char *spelling, const char *val, struct err_msg *m);
int node_tiers_set_evict(void *dst, const char *spelling, const char *val, struct err_msg *m);
int node_tiers_set_admit(void *dst, const char *spelling, const char *val, struct err_msg *m);
int node_tiers_set_ttl(void *dst, const char *spelling, const char *val, struct err_msg *m);

#endif
