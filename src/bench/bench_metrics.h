/*
 * bench_metrics.h - per-request records and the figures computed from them.
 *
 * Times of one request, in seconds from the run start (client clock):
 *
 *   due ---- ready ---- send ------ first ------ ... ------ end
 *   |  queue  | send lag |   TTFT    | ITL | ITL | ...  |
 *             |          |<------------- E2E ------------>|
 *
 *   queue     = ready - due    client-side wait for a free concurrency slot
 *   send lag  = send - ready   how late the generator sent it (its own error)
 *   TTFT      = first - send   first content event
 *   E2E       = end - send
 *   TPOT      = (end - first) / (n_output - 1)   requests with n_output >= 2
 *   ITL       = gaps between successive content events (pooled over requests
 *               for the aggregate; per request for the ITL-p99 SLO)
 *   speed     = 1 / TPOT       output tokens per second seen by one user
 *
 * Aggregates over successful requests: mean, p50, p90, p99, max, with
 * percentiles by linear interpolation between closest ranks
 * (rank = p/100 * (n-1), as numpy's default). Rates divide by the measured
 * duration = last end - first send. The exact formulas of goodput, cache hit
 * ratios, speculative decoding and cost are in docs/bench.md and next to the
 * functions below; the unit tests check them against hand-computed values.
 *
 * Lifetime: records own their gap arrays (bench_record_release). Pure
 * functions otherwise; single-threaded.
 */
#ifndef INFERD_BENCH_METRICS_H
#define INFERD_BENCH_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bench_record {
    int32_t item;         /* workload item index */
    int32_t status;       /* HTTP status; 0 = no response (connect / transport error) */
    bool ok;              /* 200 and a complete stream without an error event */
    double due_s;         /* became due */
    double ready_s;       /* a concurrency slot was free */
    double send_s;        /* handed to the connection */
    double first_s;       /* first content event; < 0 none */
    double end_s;         /* response complete or failed */
    int32_t n_input;      /* prompt tokens (usage when reported, else the workload's) */
    int32_t n_output;     /* output tokens (usage when reported, else content events) */
    int32_t n_cached;     /* usage cached_tokens; -1 not reported */
    int32_t ideal_cached; /* cached tokens with an infinite cache (workload) */
    int32_t n_events;     /* content events */
    double *gaps_s;       /* (n_gaps) inter-event gaps */
    int32_t n_gaps;       /* n_events - 1 when n_events > 0 */
    int32_t cap_gaps;     /* allocated gaps */
    int64_t spec_drafts;  /* per-request speculative fields, -1 not reported */
    int64_t spec_draft_tok;
    int64_t spec_accepted;
    char error[120]; /* what failed, "" when ok */
};

void bench_record_add_gap(struct bench_record *r, double gap_s);
void bench_record_release(struct bench_record *r);

/* Per-request derived values (< 0 when undefined). */
double bench_record_ttft(const struct bench_record *r);
double bench_record_e2e(const struct bench_record *r);
double bench_record_tpot(const struct bench_record *r);
double bench_record_itl_p99(const struct bench_record *r);

struct bench_stats {
    int64_t n;   /* samples */
    double mean; /* arithmetic mean */
    double p50;  /* percentiles, linear interpolation */
    double p90;
    double p99;
    double max;
};

/* Percentile p in [0, 100] of sorted v (n >= 1). */
double bench_percentile(const double *sorted, size_t n, double p);
/* Sorts v in place and fills s (all zero when n == 0). */
void bench_stats_compute(double *v, size_t n, struct bench_stats *s);

/* Latency targets; a target <= 0 is not set. */
struct bench_slo {
    double ttft_s;    /* TTFT <= */
    double tpot_s;    /* TPOT <= (requests with one output token pass) */
    double itl_p99_s; /* the request's own p99 ITL <= */
    double e2e_s;     /* E2E <= */
};

/* True when r succeeded and meets every set target. */
bool bench_slo_met(const struct bench_slo *slo, const struct bench_record *r);

/* Speculative decoding counters (summed per-request fields, or Prometheus
 * deltas). A count < 0 means unknown. */
struct bench_spec {
    int64_t drafts;            /* verification steps that carried a draft */
    int64_t draft_tokens;      /* tokens proposed */
    int64_t accepted;          /* proposed tokens accepted */
    bool known;                /* all three known and drafts > 0 */
    double acceptance;         /* accepted / draft_tokens */
    double tau;                /* mean accepted length 1 + accepted / drafts */
    double k_mean;             /* draft length draft_tokens / drafts */
    double steps_per_s;        /* drafts / duration */
    double decode_tok_s;       /* steps_per_s * tau: decode throughput corrected by tau */
    double all_accepted_tok_s; /* steps_per_s * (1 + k_mean): what "all accepted" would claim */
};

void bench_spec_compute(struct bench_spec *s, double duration_s);

/* Machine cost and token prices (USD). */
struct bench_prices {
    double machine_usd_h; /* per machine and hour; <= 0: no cost figures */
    int32_t machines;     /* machines behind the endpoint */
    double in_usd_m;      /* price per million uncached input tokens */
    double cached_usd_m;  /* per million cached input tokens */
    double out_usd_m;     /* per million output tokens */
};

struct bench_cost {
    double usd_per_m_out;    /* machine cost per million output tokens */
    double usd_per_m_tokens; /* machine cost per million (input + output) tokens */
    double revenue_usd_h;    /* at the measured hit ratio */
    double margin_usd_h;     /* revenue - machine cost */
    double hit;              /* the hit ratio used */
    double revenue_at[5];    /* revenue per hour at hit ratios 0, .25, .5, .75, 1 */
};

/* cost per M output = machines * usd_h / (out_tok_s * 3600) * 1e6;
 * revenue/h(h) = 3600 * (in_tok_s * ((1-h)*in + h*cached) + out_tok_s * out) / 1e6. */
void bench_cost_compute(const struct bench_prices *p, double in_tok_s, double out_tok_s, double hit,
                        struct bench_cost *c);

struct bench_status_count {
    int32_t status; /* HTTP status, 0 = transport error */
    int32_t n;      /* requests */
};

struct bench_summary {
    int32_t n_total;                                /* requests sent (records) */
    int32_t n_ok;                                   /* succeeded */
    double duration_s;                              /* last end - first send */
    int32_t peak_in_flight;                         /* most requests open at one time (send..end) */
    double send_rate;                               /* (n_total - 1) / (last send - first send) */
    struct bench_stats queue;                       /* client queue wait (all records) */
    struct bench_stats lag;                         /* send lag (all records) */
    struct bench_stats ttft, tpot, itl, e2e, speed; /* successful requests */
    double req_s;                                   /* successful requests per second */
    double in_tok_s;       /* input tokens of successful requests per second */
    double out_tok_s;      /* output tokens per second */
    struct bench_slo slo;  /* targets used */
    bool slo_set;          /* any target set */
    int32_t n_slo_met;     /* requests meeting every target */
    double slo_attainment; /* n_slo_met / n_total */
    double goodput_req_s;  /* n_slo_met / duration */
    double goodput_tok_s;  /* output tokens of SLO-meeting requests / duration */
    int64_t prompt_tokens; /* sum of n_input over requests that reported cached tokens */
    int64_t cached_tokens; /* sum of n_cached over those */
    double hit_server;     /* cached / prompt over reporting requests; -1 none reported */
    double hit_ideal;      /* ideal cached / input over the same requests (all when none) */
    struct bench_status_count errors[16]; /* failures by status, most frequent first */
    int32_t n_error_kinds;                /* entries used */
    double error_rate;                    /* (n_total - n_ok) / n_total */
    struct bench_spec spec;               /* speculative decoding (known = false if not reported) */
};

/* Computes everything from the records. spec_in, when non-NULL and known
 * counts, supplies server counters (Prometheus deltas) used when the records
 * carry no per-request speculative fields. */
void bench_summary_compute(struct bench_record *recs, size_t n, const struct bench_slo *slo,
                           const struct bench_spec *spec_in, struct bench_summary *s);

#endif
