/*
 * sim.h - a discrete-event simulator of an inferd cluster, for `inferd sim`:
 * a gateway routing a trace's requests over prefill, decode or mixed
 * workers, each worker the engine's own scheduler (engine/sched.h) over its
 * own KV pool and prefix cache (kv/pool.h, kv/prefix.h: the real eviction),
 * with the forward pass replaced by a cost model (cost.h).
 *
 * What is the real code and what is modelled:
 *
 *   real      routing (cluster/policy.h, remote_route), admission (pol_admit),
 *             the global prefix index (cluster/pindex.h) fed by the pools' own
 *             KV events, the scheduler (admission, chunking, preemption,
 *             prefix hits), the pools and their LRU eviction
 *   modelled  a step's duration (cost.h), a KV transfer's duration (link
 *             bandwidth and latency), the clock
 *
 * Events, in time order (ties by insertion, so a run is deterministic):
 *
 *   ARRIVE    a request reaches the gateway: the snapshot (each worker's
 *             counts, KV, measured step line, and the prompt's cached
 *             leading blocks from the index) goes to remote_route; admission
 *             may refuse it (429); else it is submitted to the chosen worker
 *             (prefill-only to a prefill worker when disaggregated)
 *   STEP      a synchronised group of workers (--dp-group; 1 = each worker
 *             on its own) runs one step: every member builds its batch, the
 *             group's step lasts as long as its slowest member's
 *   PREFILLED a prefill worker's request has its prompt computed: its full
 *             blocks travel to the decode worker (time: bytes / link + latency,
 *             overlapped with the prefill as the real transfer streams), are
 *             entered into that worker's pool (kv_prefix_adopt), and the
 *             request is submitted there; it attaches them and computes the
 *             tail
 *
 * Each output token is an event of the step that sampled it: TTFT (arrival
 * to first token), TPOT (mean gap after the first), ITL (every gap, in a
 * log-bucket histogram) per request; a follow-up request (an agent's next
 * turn) arrives its think time after its predecessor finished.
 *
 * Balance efficiency, per pool (prefill, decode or mixed):
 *   step balance  sum over group steps of mean(member work) / sum of
 *                 max(member work): the share of a synchronised group's time
 *                 its members compute rather than wait for the slowest (work =
 *                 the member's modelled step time, 0 when idle)
 *   offline ratio the pool's total work spread evenly over its workers,
 *                 against the busiest group's busy time: the run's throughput
 *                 over that of an ideally balanced offline run of the same
 *                 steps (equal to step balance for one group)
 *
 * Memory: per worker its pool's bookkeeping (~50 bytes a block) and its
 * live requests; per request its metrics; the index as pindex.h. Thread
 * safety: none; one run per call, nothing shared between runs.
 */
#ifndef INFERD_SIM_SIM_H
#define INFERD_SIM_SIM_H

#include "base/err.h"
#include "bench/bench_workload.h"
#include "cluster/policy.h"
#include "sim/cost.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sim_config {
    int n_prefill;            /* prefill workers (0: the decode workers are mixed) */
    int n_decode;             /* decode (or mixed) workers, >= 1 */
    int dp_group;             /* workers per synchronised group (0: the whole pool) */
    int block_tokens;         /* KV block size (divides the trace's) */
    int local_prefill;        /* disaggregated: prompts this short stay on the decode worker */
    int max_waiting;          /* a worker's waiting requests at most (then ERR_OVERLOADED) */
    double bucket_window_s;   /* decay time of the per-bucket compute (balanced's spread) */
    struct pol_config policy; /* routing */
    struct pol_slo slo;       /* targets: goodput counts requests meeting them */
    bool admit;               /* refuse at arrival what would miss them (pol_admit) */
    struct sim_cost cost;     /* step and transfer costs, pool size, scheduler limits */
};

/* 1 worker of each default, 16-token blocks, local prefill 256, 10 s
 * window, the default policy and costs. */
void sim_config_default(struct sim_config *c);
/* Refuses impossible configurations (no worker, SLOs below one step, a
 * block size the trace's is not a multiple of, a pool below one request's
 * context) with a message saying which. */
int sim_config_check(const struct sim_config *c, int trace_block_tokens, struct err_msg *m);

struct sim_pool_result {
    int n_workers;       /* in the pool (0: no such pool) */
    double step_balance; /* see above */
    double offline_ratio;
    double busy_s; /* summed member work */
    uint64_t n_steps;
};

struct sim_result {
    uint64_t n_requests;   /* arrived */
    uint64_t n_served;     /* finished */
    uint64_t n_rejected;   /* refused by admission (429) */
    uint64_t n_overloaded; /* refused by a full worker queue */
    uint64_t n_good;       /* served within the SLO */
    double span_s;         /* first arrival to last finish */
    double ttft_ms[3];     /* p50, p90, p99 */
    double ttft_mean_ms, tpot_mean_ms;
    double tpot_ms[3];
    double itl_ms[3];
    double throughput_rps;    /* served / span */
    double output_tps;        /* output tokens / span */
    double goodput_rps;       /* good / span */
    double token_goodput_tps; /* output tokens of good requests / span */
    double hit_ratio;     /* prompt tokens attached from a cache where the prompt was computed */
    double ideal_hit;     /* the trace's infinite-cache hit ratio (set by the caller:
                             bench_workload_ideal_hit, once per workload) */
    double kv_moved_gb;   /* prefill -> decode */
    uint64_t n_preempted; /* summed over workers */
    uint64_t n_events;    /* simulated events */
    double wall_s;        /* how long the run took here */
    struct sim_pool_result prefill, decode;
    double *ttft_sorted; /* (n_ttft) ms, ascending (plots) */
    size_t n_ttft;
    double *tpot_sorted; /* (n_tpot) ms, ascending */
    size_t n_tpot;
};

/* Runs w (items due at their t_s, follow-ups after their predecessors) on
 * the cluster c. */
int sim_run(const struct sim_config *c, const struct bench_workload *w, struct sim_result *out,
            struct err_msg *m);
void sim_result_release(struct sim_result *r);

/* Makes w `copies` times as long: copy k is the trace again after copy k-1
 * (its ids in a namespace of their own, so copies share no blocks), then
 * every time is divided by speed. */
void sim_workload_repeat(struct bench_workload *w, int copies, double speed);

#endif
