/*
 * cost.h - what a simulated worker's forward step costs (the part of a step
 * the simulator replaces: sched.h builds the batch, this prices it).
 *
 * A step of a batch of chunks (sched_chunk) costs
 *
 *     step_ms = fixed_ms
 *             + prefill_ms_per_token x prompt tokens in the step
 *             + decode_ms_per_token  x decode tokens in the step
 *             + attn_ms_per_mpair    x 1e-6 x sum over prefill chunks of
 *                                      n x (from + n / 2)   (query x key pairs)
 *             + ctx_ms_per_ktoken    x 1e-3 x sum over decode tokens of
 *                                      their context length  (KV read)
 *
 * the roofline's shape: a decode step reads the weights once (fixed) and
 * each sequence's KV (context); a prompt chunk is compute-bound per token,
 * and its attention grows with the context it attends to.
 *
 * Where the numbers come from:
 *
 *   a table file (text, one "key value" per line, '#' starts a comment):
 *
 *     name                 h100-llama3-8b-bf16
 *     source               where the figures come from (free text)
 *     fixed_ms             6.0
 *     prefill_ms_per_token 0.033
 *     decode_ms_per_token  0.05
 *     attn_ms_per_mpair    0.0006
 *     ctx_ms_per_ktoken    0.047
 *     kv_bytes_per_token   131072     KV of one token, all layers
 *     kv_tokens            400000     KV capacity of one worker's pool
 *     link_gbs             25         prefill -> decode transfer bandwidth
 *     link_ms              0.5        per-transfer latency
 *     token_budget         8192       the worker's tokens per step
 *     max_seqs             256        its running requests at most
 *
 *   or `inferd bench-engine --json` output (a '{' first): the decode
 *   figures (batch 1 and the --batches list) give fixed and per-token decode
 *   costs by a least-squares line through (batch, batch / tokens_per_s), the
 *   prefill figure the per-prompt-token cost beyond the fixed one; the KV
 *   per token comes from the model's shape when the JSON carries it. The
 *   attention terms are 0 from a depth-0 run (the figures cannot separate
 *   them), so calibrate with the context lengths the trace has.
 *
 * Errors name the file and the line (or the JSON field) and what is wrong.
 */
#ifndef INFERD_SIM_COST_H
#define INFERD_SIM_COST_H

#include "base/err.h"
#include "engine/sched.h"

#include <stdint.h>

struct sim_cost {
    char name[64];               /* profile name */
    char source[256];            /* where its figures come from */
    double fixed_ms;             /* per step */
    double prefill_ms_per_token; /* per prompt token */
    double decode_ms_per_token;  /* per decode token */
    double attn_ms_per_mpair;    /* per million (query, key) pairs of prompt chunks */
    double ctx_ms_per_ktoken;    /* per thousand context tokens read by decodes */
    double kv_bytes_per_token;   /* KV bytes of one token */
    int64_t kv_tokens;           /* KV capacity of a worker, tokens */
    double link_gbs;             /* KV transfer bandwidth, GB/s */
    double link_ms;              /* KV transfer latency, ms */
    int token_budget;            /* scheduler: tokens per step */
    int max_seqs;                /* scheduler: running requests at most */
};

/* A profile of this machine's order (0.5B-class model on two cores), the
 * defaults before a file sets anything. */
void sim_cost_default(struct sim_cost *c);
/* Reads a table or bench-engine JSON (over the defaults). */
int sim_cost_load(const char *path, struct sim_cost *c, struct err_msg *m);
/* The same from memory; name appears in messages. */
int sim_cost_parse(const char *name, const char *data, size_t len, struct sim_cost *c,
                   struct err_msg *m);
/* The cost of the batch sched_build just built, ms. */
double sim_cost_step_ms(const struct sim_cost *c, const struct sched *s);

#endif
