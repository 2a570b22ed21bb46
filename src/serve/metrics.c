/*
 * metrics.c - Prometheus text rendering (see metrics.h).
 */
#include "serve/metrics.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const double bounds[METRICS_BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                   0.25,  0.5,    1,     2.5,  5,     10};

void metrics_request(struct metrics *m, const char *endpoint, int status)
{
    for (int i = 0; i < m->n_req; i++) {
        if (m->req[i].status == status && !strcmp(m->req[i].endpoint, endpoint)) {
            m->req[i].n++;
            return;
        }
    }
    if (m->n_req == METRICS_MAX_SERIES) return; /* routes x statuses is bounded well below */
    struct metrics_series *s = &m->req[m->n_req++];
    snprintf(s->endpoint, sizeof(s->endpoint), "%s", endpoint);
    s->status = status;
    s->n = 1;
}

void metrics_observe(struct metrics_hist *h, double seconds)
{
    int b = 0;
    while (b < METRICS_BUCKETS - 1 && seconds > bounds[b])
        b++;
    h->counts[b]++;
    h->sum += seconds;
    h->n++;
}

static void hist(struct buf *out, const char *name, const char *help, const struct metrics_hist *h)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int b = 0; b < METRICS_BUCKETS - 1; b++) {
        cum += h->counts[b];
        buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[b], (unsigned long long)cum);
    }
    cum += h->counts[METRICS_BUCKETS - 1];
    buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
               (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->n);
}

static void scalar(struct buf *out, const char *name, const char *type, const char *help,
                   unsigned long long v)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name, v);
}

void metrics_render(const struct metrics *m, const struct runner_stats *rs, struct buf *out)
{
    buf_puts(out, "# HELP inferd_requests_total HTTP requests by endpoint and status.\n"
                  "# TYPE inferd_requests_total counter\n");
    for (int i = 0; i < m->n_req; i++)
        buf_printf(out, "inferd_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                   m->req[i].endpoint, m->req[i].status, (unsigned long long)m->req[i].n);
    hist(out, "inferd_time_to_first_token_seconds", "Time from request to first token.", &m->ttft);
    hist(out, "inferd_time_per_output_token_seconds",
         "Mean time between output tokens of a request, after the first.", &m->tpot);
    hist(out, "inferd_e2e_request_latency_seconds", "Generation request latency.", &m->e2e);
    hist(out, "inferd_queue_time_seconds",
         "Time an engine request waited between submit and its first admission.", &m->queue);
    scalar(out, "inferd_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
           m->prompt_tokens);
    scalar(out, "inferd_cached_prompt_tokens_total", "counter",
           "Prompt tokens served from the prefix cache.", m->cached_tokens);
    scalar(out, "inferd_generation_tokens_total", "counter", "Tokens generated.",
           m->generated_tokens);
    scalar(out, "inferd_requests_cancelled_total", "counter",
           "Requests cancelled because the client went away.", m->cancelled);
    scalar(out, "inferd_http_requests_open", "gauge", "HTTP requests being served.",
           (unsigned long long)m->open_requests);
    const struct inferd_stats *e = &rs->engine;
    scalar(out, "inferd_num_requests_running", "gauge", "Sequences holding KV in the engine.",
           (unsigned long long)e->n_running);
    scalar(out, "inferd_num_requests_waiting", "gauge", "Sequences waiting to start.",
           (unsigned long long)e->n_waiting);
    scalar(out, "inferd_kv_blocks_total", "gauge", "KV cache blocks in the pool.",
           (unsigned long long)e->kv_blocks_total);
    scalar(out, "inferd_kv_blocks_used", "gauge", "KV cache blocks referenced.",
           (unsigned long long)e->kv_blocks_used);
    scalar(out, "inferd_kv_blocks_cached", "gauge",
           "Unreferenced KV blocks kept by the prefix cache.",
           (unsigned long long)e->kv_blocks_cached);
    scalar(out, "inferd_kv_blocks_free", "gauge", "KV blocks holding nothing.",
           (unsigned long long)e->kv_blocks_free);
    scalar(out, "inferd_prefix_cache_query_tokens_total", "counter",
           "Prompt positions looked up in the prefix cache.",
           (unsigned long long)e->n_prefix_query_tokens);
    scalar(out, "inferd_prefix_cache_hit_tokens_total", "counter",
           "Prompt positions found in the prefix cache.",
           (unsigned long long)e->n_prefix_hit_tokens);
    buf_printf(out,
               "# HELP inferd_prefix_cache_hit_ratio Hit tokens / query tokens since start.\n"
               "# TYPE inferd_prefix_cache_hit_ratio gauge\ninferd_prefix_cache_hit_ratio %.6f\n",
               e->n_prefix_query_tokens
                   ? (double)e->n_prefix_hit_tokens / (double)e->n_prefix_query_tokens
                   : 0.0);
    buf_printf(out,
               "# HELP inferd_queue_wait_estimate_seconds Engine estimate of the wait of a new "
               "request.\n# TYPE inferd_queue_wait_estimate_seconds gauge\n"
               "inferd_queue_wait_estimate_seconds %.6f\n",
               e->est_queue_ms / 1000.0);
    scalar(out, "inferd_requests_rejected_total", "counter",
           "Engine submissions refused because the waiting queue was full (429).",
           (unsigned long long)e->n_rejected);
    scalar(out, "inferd_engine_cancelled_total", "counter", "Engine requests cancelled.",
           (unsigned long long)e->n_cancelled);
    scalar(out, "inferd_engine_steps_total", "counter", "Forward steps run.",
           (unsigned long long)e->n_steps);
    scalar(out, "inferd_engine_prefill_tokens_total", "counter", "Prompt tokens computed.",
           (unsigned long long)e->n_prompt_tokens);
    buf_printf(out,
               "# HELP inferd_engine_kind_steps_total Forward steps by kind: decode (only decode "
               "tokens) or prompt (holding prompt tokens).\n"
               "# TYPE inferd_engine_kind_steps_total counter\n"
               "inferd_engine_kind_steps_total{kind=\"decode\"} %llu\n"
               "inferd_engine_kind_steps_total{kind=\"prompt\"} %llu\n"
               "# HELP inferd_engine_step_seconds_total Seconds of forward steps by kind, "
               "sampling included.\n"
               "# TYPE inferd_engine_step_seconds_total counter\n"
               "inferd_engine_step_seconds_total{kind=\"decode\"} %.6f\n"
               "inferd_engine_step_seconds_total{kind=\"prompt\"} %.6f\n",
               (unsigned long long)e->n_decode_steps, (unsigned long long)e->n_prompt_steps,
               e->decode_step_s, e->prompt_step_s);
    scalar(out, "inferd_engine_decode_step_tokens_total", "counter",
           "Tokens of decode-only steps (their mean batch: / the decode steps).",
           (unsigned long long)e->n_decode_step_tokens);
    scalar(out, "inferd_preemptions_total", "counter", "Requests preempted for lack of KV.",
           (unsigned long long)e->n_preempted);
    buf_printf(out,
               "# HELP inferd_step_cost_fixed_seconds Measured step cost model: fixed part.\n"
               "# TYPE inferd_step_cost_fixed_seconds gauge\ninferd_step_cost_fixed_seconds %.6f\n"
               "# HELP inferd_step_cost_token_seconds Measured step cost model: per token.\n"
               "# TYPE inferd_step_cost_token_seconds gauge\ninferd_step_cost_token_seconds %.6f\n",
               e->step_ms_fixed / 1000.0, e->step_ms_per_token / 1000.0);
    scalar(out, "inferd_step_token_limit", "gauge",
           "Tokens the last step could hold: the budget, or less next to decodes.",
           (unsigned long long)e->last_step_limit);
    buf_puts(out, "# HELP inferd_step_batch_tokens Tokens computed per forward step.\n"
                  "# TYPE inferd_step_batch_tokens histogram\n");
    uint64_t cum = 0;
    for (int b = 0; b < RUNNER_STEP_BUCKETS; b++) {
        cum += rs->step_hist[b];
        if (b == RUNNER_STEP_BUCKETS - 1)
            buf_printf(out, "inferd_step_batch_tokens_bucket{le=\"+Inf\"} %llu\n",
                       (unsigned long long)cum);
        else
            buf_printf(out, "inferd_step_batch_tokens_bucket{le=\"%d\"} %llu\n",
                       runner_step_bounds[b], (unsigned long long)cum);
    }
    buf_printf(out, "inferd_step_batch_tokens_sum %llu\ninferd_step_batch_tokens_count %llu\n",
               (unsigned long long)rs->step_tokens, (unsigned long long)rs->n_steps);
}

/* One counter or gauge series per tier. */
static void per_tier(struct buf *out, const struct kv_chain_stats *ks, const char *name,
                     const char *type, const char *help, size_t off)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int i = 0; i < ks->n_tiers; i++) {
        uint64_t v;
        memcpy(&v, (const char *)&ks->tiers[i].tier + off, sizeof(v));
        buf_printf(out, "%s{tier=\"%s\"} %llu\n", name, ks->tiers[i].name, (unsigned long long)v);
    }
}

void metrics_render_tiers(const struct metrics *m, const struct kv_chain_stats *ks, struct buf *out)
{
#define TIER(name, type, help, field)                                                              \
    per_tier(out, ks, name, type, help, offsetof(struct kv_tier_stats, field))
    TIER("inferd_kv_tier_hits_total", "counter", "Blocks a KV tier served, verified.", hits);
    TIER("inferd_kv_tier_misses_total", "counter",
         "Block reads a KV tier could not serve (absent, expired, corrupt, down).", misses);
    TIER("inferd_kv_tier_read_bytes_total", "counter", "Frame bytes read from a KV tier.",
         bytes_read);
    TIER("inferd_kv_tier_written_bytes_total", "counter", "Bytes written to a KV tier.",
         bytes_written);
    TIER("inferd_kv_tier_put_errors_total", "counter",
         "Blocks a KV tier failed to store (full, unwritable, down).", put_errors);
    TIER("inferd_kv_tier_not_admitted_total", "counter",
         "Blocks a KV tier's admission policy turned down.", not_admitted);
    TIER("inferd_kv_tier_evictions_total", "counter", "Blocks a KV tier dropped for room.",
         evictions);
    TIER("inferd_kv_tier_expirations_total", "counter", "Blocks a KV tier dropped as expired.",
         expirations);
    TIER("inferd_kv_tier_corrupt_total", "counter",
         "Torn, corrupt or foreign records a KV tier dropped.", corrupt);
    TIER("inferd_kv_tier_used_bytes", "gauge", "Bytes a KV tier holds.", used_bytes);
    TIER("inferd_kv_tier_capacity_bytes", "gauge", "A KV tier's capacity.", capacity_bytes);
    TIER("inferd_kv_tier_blocks", "gauge", "Blocks a KV tier holds.", n_blocks);
#undef TIER
    buf_puts(out, "# HELP inferd_kv_tier_writable Whether a KV tier accepts writes.\n"
                  "# TYPE inferd_kv_tier_writable gauge\n");
    for (int i = 0; i < ks->n_tiers; i++)
        buf_printf(out, "inferd_kv_tier_writable{tier=\"%s\"} %d\n", ks->tiers[i].name,
                   ks->tiers[i].tier.writable ? 1 : 0);
    buf_puts(out, "# HELP inferd_kv_tier_prompt_blocks_total Prompt blocks of finished requests "
                  "each KV tier served.\n# TYPE inferd_kv_tier_prompt_blocks_total counter\n");
    for (int i = 0; i < ks->n_tiers; i++)
        buf_printf(out, "inferd_kv_tier_prompt_blocks_total{tier=\"%s\"} %llu\n", ks->tiers[i].name,
                   (unsigned long long)m->tier_blocks[i]);
    const char *name = "inferd_kv_tier_load_seconds";
    buf_printf(out,
               "# HELP %s Block load latency of a KV tier (verified hits).\n"
               "# TYPE %s histogram\n",
               name, name);
    for (int i = 0; i < ks->n_tiers; i++) {
        const struct kv_tier_stats *t = &ks->tiers[i].tier;
        uint64_t cum = 0, n = 0;
        for (int b = 0; b < KV_TIER_LAT_BUCKETS; b++)
            n += t->lat_hist[b];
        for (int b = 0; b < KV_TIER_LAT_BUCKETS - 1; b++) {
            cum += t->lat_hist[b];
            buf_printf(out, "%s_bucket{tier=\"%s\",le=\"%g\"} %llu\n", name, ks->tiers[i].name,
                       kv_tier_lat_bounds_ms[b] / 1000.0, (unsigned long long)cum);
        }
        buf_printf(out,
                   "%s_bucket{tier=\"%s\",le=\"+Inf\"} %llu\n%s_sum{tier=\"%s\"} %.6f\n"
                   "%s_count{tier=\"%s\"} %llu\n",
                   name, ks->tiers[i].name, (unsigned long long)n, name, ks->tiers[i].name,
                   t->lat_sum_ms / 1000.0, name, ks->tiers[i].name, (unsigned long long)n);
    }
    scalar(out, "inferd_kv_tier_puts_dropped_total", "counter",
           "Blocks not queued for the KV tiers because the write queue was full.",
           ks->puts_dropped);
    scalar(out, "inferd_kv_tier_loads_total", "counter", "Tier loads run for new requests.",
           ks->loads);
    scalar(out, "inferd_kv_tier_loads_cost_stopped_total", "counter",
           "Tier loads cut short because recomputing was cheaper.", ks->loads_cost_stopped);
}
