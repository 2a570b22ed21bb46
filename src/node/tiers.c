/*
 * tiers.c - an engine process's KV tiers (tiers.h).
 */
#include "node/tiers.h"

#include "base/log.h"
#include "node/runner.h"

#include <stdlib.h>
#include <string.h>

void node_tiers_default(struct node_tiers *t)
{
    memset(t, 0, sizeof(*t));
    kv_ttl_classes_default(&t->ttl);
}

bool node_tiers_write_back(const struct node_tiers *t)
{
    for (int i = 0; i < t->n; i++)
        if (t->specs[i].kind == KV_TIER_RAM) return true;
    return false;
}

int node_tiers_open(const struct node_tiers *t, const struct kv_tier_spec *dflt, inferd_engine *e,
                    int max_ctx, struct runner *r, struct kv_chain **out, struct err_msg *msg)
{
    *out = NULL;
    const struct kv_tier_spec *specs = t->specs;
    int n = t->n;
    bool is_default = n == 0;
    if (t->off || !inferd_kv_frame_bytes(e) || (is_default && !dflt)) return 0;
    if (is_default) {
        specs = dflt;
        n = 1;
    }
    struct kv_frame_layout l;
    inferd_kv_frame_layout(e, l.fingerprint, &l.n_layer, &l.layer_bytes);
    /* staging for the longest prompt a request can bring */
    size_t bt = (size_t)inferd_engine_block_tokens(e);
    size_t blocks = ((size_t)max_ctx + bt - 1) / bt;
    struct kv_chain_opts o = {
        .wake = runner_kv_wake, .wake_ctx = r, .staging_bytes = blocks * kv_frame_bytes(&l)};
    struct kv_chain *c;
    int rc = kv_chain_new(&l, &o, &c, msg);
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        struct kv_tier *tier;
        struct kv_tier_spec sp = specs[i];
        sp.policy = t->policy;
        if ((rc = kv_tier_open(&sp, &l, kv_chain_now(c), &tier, msg))) {
            kv_chain_free(c);
            if (!is_default) return rc;
            log_warn("kv tiers: the default disk tier is off: %s", msg->text);
            msg->text[0] = 0;
            return 0;
        }
        bool ram = specs[i].kind == KV_TIER_RAM;
        struct kv_chain_tier_cfg tc = {.write = ram ? KV_WRITE_BACK : KV_WRITE_THROUGH,
                                       .min_prompt_blocks = ram ? 0 : t->admit_prompt_blocks};
        if ((rc = kv_chain_add(c, tier, &tc, msg))) {
            kv_chain_free(c);
            return rc;
        }
        bool indexed = ram || specs[i].kind == KV_TIER_DISK;
        log_info("kv tier %d: %s %s (%.1f GiB, %s%s%s%s%s)", i + 1, tier->name,
                 ram ? "in memory" : specs[i].path, (double)specs[i].bytes / (double)(1ull << 30),
                 tc.write == KV_WRITE_BACK ? "write-back" : "write-through",
                 indexed ? ", evict " : "", indexed ? kv_evict_policy_name(sp.policy.evict) : "",
                 indexed ? ", admit " : "", indexed ? kv_admit_policy_name(sp.policy.admit) : "");
    }
    *out = c;
    return 0;
}

/* --kv-tier SPEC, repeatable, in order; "none": no tiers at all. */
int node_tiers_add(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct node_tiers *t = dst;
    (void)spelling;
    if (!strcmp(val, "none")) {
        t->off = true;
        return 0;
    }
    if (t->n == KV_CHAIN_MAX_TIERS)
        return err_set(m, ERR_INVALID, "--kv-tier: at most %d tiers", KV_CHAIN_MAX_TIERS);
    return kv_tier_spec_parse(val, &t->specs[t->n++], m);
}

/* --kv-evict / --kv-admit: policies of the RAM and disk tiers. */
int node_tiers_set_evict(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    (void)spelling;
    if (kv_evict_policy_parse(val, &((struct node_tiers *)dst)->policy.evict))
        return err_set(m, ERR_INVALID, "--kv-evict '%s': expected slru or lru", val);
    return 0;
}

int node_tiers_set_admit(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    (void)spelling;
    struct node_tiers *t = dst;
    if (!strncmp(val, "prompt:", 7)) {
        char *end;
        long n = strtol(val + 7, &end, 10);
        if (end == val + 7 || *end || n < 1 || n > 1 << 20)
            return err_set(m, ERR_INVALID, "--kv-admit '%s': expected prompt:N, N >= 1 blocks",
                           val);
        t->admit_prompt_blocks = (int)n;
        return 0;
    }
    if (kv_admit_policy_parse(val, &t->policy.admit))
        return err_set(m, ERR_INVALID, "--kv-admit '%s': expected all, seen or prompt:N", val);
    return 0;
}

/* --kv-ttl CLASS=DURATION */
int node_tiers_set_ttl(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    (void)spelling;
    return kv_ttl_classes_set(&((struct node_tiers *)dst)->ttl, val, m);
}
