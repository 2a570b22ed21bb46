/*
 * cmd_sim.c - `inferd sim cache TRACE...`: the KV tiers' eviction and
 * admission code (kv/tier_index.h) replayed over request traces
 * (kv/sim.h), next to plain LRU, Belady's offline optimum and the
 * infinite cache, so policies compare in seconds on any trace.
 *
 * Trace formats, told apart by the first byte that is not blank:
 *
 *   '{' on every line   JSON lines, one request each with "hash_ids"
 *                       (Mooncake's FAST'25 traces)
 *   '{' one document    an object with "requests": [{"hash_ids": ...}]
 *                       (kv-cache-tester conversations; ids local to the
 *                       file)
 *
 * Each file is simulated on its own (ids of different files are never the
 * same block). --capacity is blocks, or a share of each trace's distinct
 * blocks ("5%").
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "kv/sim.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends the "hash_ids" of request object r. */
static int add_request(struct kv_sim_trace *t, json_t *r, uint64_t **buf, size_t *cap)
{
    json_t *ids = json_object_get(r, "hash_ids");
    if (!json_is_array(ids)) return -1;
    size_t n = json_array_size(ids);
    if (n > *cap) {
        *cap = n;
        *buf = xrealloc(*buf, n * sizeof(**buf));
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
        (*buf)[i] = (uint64_t)json_integer_value(v);
    }
    kv_sim_trace_add(t, *buf, n);
    return 0;
}

static int load_trace(const char *path, struct kv_sim_trace *t)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "inferd sim cache: %s: %s\n", path, strerror(errno));
        return 1;
    }
    json_error_t je;
    json_t *doc = json_loadf(f, JSON_DISABLE_EOF_CHECK, &je);
    uint64_t *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    json_t *reqs = doc ? json_object_get(doc, "requests") : NULL;
    if (json_is_array(reqs)) { /* one conversation document */
        for (size_t i = 0; i < json_array_size(reqs) && !rc; i++)
            if (add_request(t, json_array_get(reqs, i), &buf, &cap)) {
                fprintf(stderr, "inferd sim cache: %s: request %zu has no list of hash_ids\n", path,
                        i + 1);
                rc = 1;
            }
    } else { /* JSON lines */
        json_decref(doc);
        doc = NULL;
        rewind(f);
        char *line = NULL;
        size_t lcap = 0;
        size_t lineno = 0;
        while (!rc && getline(&line, &lcap, f) > 0) {
            lineno++;
            if (strspn(line, " \t\r\n") == strlen(line)) continue;
            json_t *r = json_loads(line, 0, &je);
            if (!r || add_request(t, r, &buf, &cap)) {
                fprintf(stderr, "inferd sim cache: %s:%zu: %s\n", path, lineno,
                        r ? "no list of hash_ids (non-negative integers)" : je.text);
                rc = 1;
            }
            json_decref(r);
        }
        free(line);
    }
    if (!rc && !t->n_req) {
        fprintf(stderr, "inferd sim cache: %s: no requests\n", path);
        rc = 1;
    }
    json_decref(doc);
    free(buf);
    fclose(f);
    return rc;
}

struct capacity {
    double share; /* of the distinct blocks, or 0 */
    uint64_t blocks;
};

static int parse_capacity(const char *s, struct capacity *c)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || v <= 0) return -1;
    if (!strcmp(end, "%")) {
        if (v > 100) return -1;
        c->share = v / 100;
        return 0;
    }
    if (*end || v != (double)(uint64_t)v) return -1;
    c->blocks = (uint64_t)v;
    return 0;
}

static double ratio(const struct kv_sim_result *r)
{
    return r->blocks ? (double)r->hits / (double)r->blocks : 0;
}

static void print_row(const char *name, const struct kv_sim_result *r,
                      const struct kv_sim_result *lru, bool json, bool *first)
{
    double x = ratio(r), base = ratio(lru);
    if (json) {
        printf("%s\"%s\":{\"hits\":%llu,\"hit_ratio\":%.6f}", *first ? "" : ",", name,
               (unsigned long long)r->hits, x);
        *first = false;
        return;
    }
    printf("  %-14s %7.2f%%", name, 100 * x);
    if (r != lru && base > 0) printf("   %+6.1f%% vs lru", 100 * (x / base - 1));
    printf("\n");
}

static int sim_one(const char *path, const struct capacity *c, bool json)
{
    struct kv_sim_trace t = {0};
    if (load_trace(path, &t)) {
        kv_sim_trace_release(&t);
        return 1;
    }
    uint64_t distinct = kv_sim_trace_distinct(&t);
    uint64_t cap = c->share ? (uint64_t)((double)distinct * c->share) : c->blocks;
    if (cap < 1) cap = 1;
    struct kv_sim_result slru, seen, lru_po, lru, bel, ideal;
    const struct kv_tier_policy p_slru = {.evict = KV_EVICT_SLRU},
                                p_seen = {.evict = KV_EVICT_SLRU, .admit = KV_ADMIT_SEEN},
                                p_lru = {.evict = KV_EVICT_LRU};
    kv_sim_policy(&t, cap, &p_slru, true, &slru);
    kv_sim_policy(&t, cap, &p_seen, true, &seen);
    kv_sim_policy(&t, cap, &p_lru, true, &lru_po);
    kv_sim_policy(&t, cap, &p_lru, false, &lru);
    kv_sim_belady(&t, cap, &bel);
    kv_sim_ideal(&t, &ideal);
    bool first = true;
    if (json) {
        json_t *p = json_string(path);
        char *ps = json_dumps(p, JSON_ENCODE_ANY);
        printf("{\"trace\":%s,\"requests\":%zu,\"blocks\":%llu,\"distinct\":%llu,"
               "\"capacity\":%llu,",
               ps, t.n_req, (unsigned long long)slru.blocks, (unsigned long long)distinct,
               (unsigned long long)cap);
        free(ps);
        json_decref(p);
        printf("\"policies\":{");
    } else {
        printf("%s: %zu requests, %llu blocks, %llu distinct; capacity %llu blocks (%.1f%% of "
               "distinct)\n",
               path, t.n_req, (unsigned long long)slru.blocks, (unsigned long long)distinct,
               (unsigned long long)cap, 100.0 * (double)cap / (double)distinct);
        printf("  %-14s %8s\n", "policy", "hits");
    }
    print_row("slru", &slru, &lru, json, &first);
    print_row("slru+seen", &seen, &lru, json, &first);
    print_row("lru+order", &lru_po, &lru, json, &first);
    print_row("lru", &lru, &lru, json, &first);
    print_row("belady", &bel, &lru, json, &first);
    print_row("infinite", &ideal, &lru, json, &first);
    if (json)
        printf("}}\n");
    else
        printf("  (slru: the tiers' default, with prompt order; slru+seen: --kv-admit seen;\n"
               "   lru+order: --kv-evict lru, with prompt order; lru: plain recency;\n"
               "   belady: offline optimum; infinite: the trace's ideal)\n");
    kv_sim_trace_release(&t);
    return 0;
}

int cmd_sim(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "cache")) return cmd_sim_cluster(argc, argv);
    const char *capacity = "5%";
    int json = 0;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("capacity", 'c', "N|P%",
                    "blocks the tier holds, or a share of each trace's\n"
                    "distinct blocks (default 5%)",
                    &capacity),
        CMD_OPT_FLAG("json", 0, "one JSON object per trace", &json),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "sim cache", .synopsis = "TRACE... [--capacity N|P%] [--json]", .opts = opts};
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc - 1, argv + 1, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    struct capacity c = {0};
    if (parse_capacity(capacity, &c))
        return cmd_usage_error(&spec,
                               "--capacity '%s': expected blocks (N >= 1) or a share "
                               "(0 < P <= 100, with %%)",
                               capacity);
    if (argi >= argc - 1) return cmd_usage_error(&spec, "give one or more TRACE files");
    int rc = 0;
    for (int i = argi; i < argc - 1; i++)
        rc |= sim_one(argv[1 + i], &c, json);
    return rc;
}
