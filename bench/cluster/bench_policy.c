/*
 * bench_policy.c - routing decisions per second: remote_route (the
 * gateway's choice, cluster/remote.h) over a snapshot of N workers, each
 * decision rebuilding the snapshot from per-worker stats first and pooling
 * its cost lines (pol_pool_costs) as the gateway does, then the admission
 * check (pol_estimate, pol_admit), for every policy.
 *
 *   build/release/bench_policy [WORKERS] [DECISIONS]   (default 64, 2000000)
 *
 * Half the workers are prefill, half decode; loads, KV use, queued tokens
 * and cached blocks vary by worker and request. One thread.
 */
#include "cluster/policy.h"
#include "cluster/proto.h"
#include "cluster/remote.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 64;
    long decisions = argc > 2 ? atol(argv[2]) : 2000000;
    if (n < 1 || n > 4096 || decisions < 1) {
        fprintf(stderr, "usage: bench_policy [WORKERS 1-4096] [DECISIONS]\n");
        return 2;
    }
    struct cl_stats *st = calloc((size_t)n, sizeof(*st));
    struct pol_worker *w = calloc((size_t)n, sizeof(*w));
    for (int i = 0; i < n; i++)
        st[i] = (struct cl_stats){.running = (uint32_t)(i * 7 % 13),
                                  .waiting = (uint32_t)(i % 3),
                                  .kv_blocks_total = 4096,
                                  .kv_blocks_used = (uint32_t)(i * 97 % 4000),
                                  .step_ms_fixed = 8 + i % 5,
                                  .step_ms_per_token = 0.05 + 0.01 * (i % 7),
                                  .queued_tokens = (uint64_t)(i * 331 % 20000)};
    printf("# %d workers (half prefill, half decode), %ld decisions per policy, one thread\n", n,
           decisions);
    for (int k = POL_ROUND_ROBIN; k <= POL_BALANCED; k++) {
        struct pol_config c;
        pol_config_default(&c);
        c.kind = (enum pol_kind)k;
        const struct pol_slo slo = {.ttft_ms = 2000, .tpot_ms = 100};
        long sum = 0;
        double t0 = now_s();
        for (long d = 0; d < decisions; d++) {
            for (int i = 0; i < n; i++) /* the snapshot, as the gateway builds it */
                w[i] = (struct pol_worker){.up = true,
                                           .role = i < n / 2 ? CL_ROLE_PREFILL : CL_ROLE_DECODE,
                                           .running = (int)st[i].running,
                                           .waiting = (int)st[i].waiting + (int)(d % 3),
                                           .queued_tokens = (int64_t)st[i].queued_tokens,
                                           .kv_used = (int)st[i].kv_blocks_used,
                                           .kv_total = (int)st[i].kv_blocks_total,
                                           .ms_fixed = st[i].step_ms_fixed,
                                           .ms_per_token = st[i].step_ms_per_token,
                                           .cached_blocks = (int)((d + (long)i) % 11)};
            struct pol_request q = {
                .n_prompt = 200 + (int)(d % 3000), .max_tokens = 256, .seq = (uint64_t)d};
            pol_pool_costs(w, n);
            int pf;
            int dw = remote_route(&c, w, n, &q, 256, &pf);
            struct pol_estimate e;
            pol_estimate(&c, pf >= 0 ? &w[pf] : NULL, &w[dw], &q, &e);
            sum += dw + pf + pol_admit(&slo, &e);
        }
        double dt = now_s() - t0;
        printf("%-13s %10.0f decisions/s (%.2f us each; checksum %ld)\n", pol_kind_name(c.kind),
               (double)decisions / dt, dt / (double)decisions * 1e6, sum);
    }
    free(st);
    free(w);
    return 0;
}
