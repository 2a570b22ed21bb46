/*
 * bench_trace.c - Mooncake JSONL, Azure CSV and agentic JSON readers (see
 * bench_trace.h). Every value is range-checked before use; a message names
 * file, line (or request index) and field.
 */
#include "bench/bench_trace.h"

#include "base/check.h"
#include "base/rng.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Ids named by the trace live in [0, 2^40); the file number goes above them,
 * and fresh (unnamed) ids set bit 62. */
#define TRACE_ID_LIMIT (1ull << 40)
#define TRACE_ID_FRESH (1ull << 62)
#define TRACE_MAX_LEN  (1 << 24) /* tokens per request we accept from a file */

bool bench_trace_format_parse(const char *s, enum bench_trace_format *f)
{
    if (!strcmp(s, "mooncake"))
        *f = BENCH_TRACE_MOONCAKE;
    else if (!strcmp(s, "azure"))
        *f = BENCH_TRACE_AZURE;
    else if (!strcmp(s, "agentic"))
        *f = BENCH_TRACE_AGENTIC;
    else
        return false;
    return true;
}

int32_t bench_trace_block_tokens(enum bench_trace_format f)
{
    switch (f) {
    case BENCH_TRACE_MOONCAKE:
        return 512;
    case BENCH_TRACE_AZURE:
        return 0;
    case BENCH_TRACE_AGENTIC:
        return 64;
    }
    return 0;
}

static double spread(const struct bench_trace_opts *o, double bucket, int64_t key)
{
    if (bucket <= 0) return 0;
    uint64_t s = o->seed ^ ((uint64_t)key * 0x9e3779b97f4a7c15ull) ^ 0x5b12ead;
    uint64_t r = rng_next(&s);
    return (double)(r >> 11) * (1.0 / 9007199254740992.0) * bucket;
}

/* Shared state of one file being read. */
struct reader {
    struct bench_workload *w;         /* destination */
    const struct bench_trace_opts *o; /* options */
    const char *name;                 /* file name for messages */
    uint64_t ns;                      /* this file's id namespace (high bits) */
    uint64_t fresh;                   /* next fresh id */
    uint64_t *ids;                    /* (cap_ids) scratch block list */
    int32_t cap_ids;                  /* allocated entries */
};

/* Fills r->ids with the file's ids (namespaced) and fresh ids for blocks the
 * trace left unnamed; returns the block count. */
static int32_t block_list(struct reader *r, int32_t n_input, const uint64_t *named, int32_t n_named)
{
    int32_t B = r->w->block_tokens;
    int32_t n = (n_input + B - 1) / B;
    if (n > r->cap_ids) {
        r->cap_ids = n;
        r->ids = xrealloc(r->ids, sizeof(uint64_t) * (size_t)n);
    }
    for (int32_t k = 0; k < n; k++)
        r->ids[k] = k < n_named ? (r->ns | named[k]) : (r->ns | TRACE_ID_FRESH | r->fresh++);
    return n;
}

/* Reads an integer field of obj into *out within [lo, hi]. */
static int get_int(struct reader *r, const char *where, json_t *obj, const char *key, int64_t lo,
                   int64_t hi, int64_t *out, struct err_msg *m)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return err_set(m, ERR_FORMAT, "%s: %s: missing field '%s'", r->name, where, key);
    double d;
    if (json_is_integer(v))
        d = (double)json_integer_value(v);
    else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v))
        d = json_real_value(v);
    else
        return err_set(m, ERR_FORMAT, "%s: %s: field '%s' must be an integer", r->name, where, key);
    if (d < (double)lo || d > (double)hi)
        return err_set(m, ERR_FORMAT, "%s: %s: field '%s' = %.0f is out of range [%lld, %lld]",
                       r->name, where, key, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

static int get_num(struct reader *r, const char *where, json_t *obj, const char *key, bool required,
                   double *out, struct err_msg *m)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        if (!required) return 0;
        return err_set(m, ERR_FORMAT, "%s: %s: missing field '%s'", r->name, where, key);
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return err_set(m, ERR_FORMAT, "%s: %s: field '%s' must be a number >= 0", r->name, where,
                       key);
    *out = json_number_value(v);
    return 0;
}

/* hash_ids of one request: at most ceil(n_input / B) non-negative integers. */
static int get_ids(struct reader *r, const char *where, json_t *obj, int32_t n_input,
                   uint64_t **named, int32_t *n_named, struct err_msg *m)
{
    json_t *a = json_object_get(obj, "hash_ids");
    if (!a) return err_set(m, ERR_FORMAT, "%s: %s: missing field 'hash_ids'", r->name, where);
    if (!json_is_array(a))
        return err_set(m, ERR_FORMAT, "%s: %s: 'hash_ids' must be an array", r->name, where);
    size_t n = json_array_size(a);
    int32_t B = r->w->block_tokens;
    if (n > (size_t)((n_input + B - 1) / B))
        return err_set(m, ERR_FORMAT,
                       "%s: %s: %zu hash_ids for %d input tokens (at most %d blocks of %d)",
                       r->name, where, n, n_input, (n_input + B - 1) / B, B);
    *named = xrealloc(*named, sizeof(uint64_t) * (n ? n : 1));
    for (size_t k = 0; k < n; k++) {
        json_t *v = json_array_get(a, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (uint64_t)json_integer_value(v) >= TRACE_ID_LIMIT)
            return err_set(m, ERR_FORMAT, "%s: %s: hash_ids[%zu] must be an integer in [0, 2^40)",
                           r->name, where, k);
        (*named)[k] = (uint64_t)json_integer_value(v);
    }
    *n_named = (int32_t)n;
    return 0;
}

/* Next line of [*p, end): sets *line and *len (without the newline), advances. */
static bool next_line(const char **p, const char *end, const char **line, size_t *len)
{
    if (*p >= end) return false;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    const char *e = nl ? nl : end;
    *line = *p;
    *len = (size_t)(e - *p);
    if (*len && (*p)[*len - 1] == '\r') (*len)--;
    *p = nl ? nl + 1 : end;
    return true;
}

static int read_mooncake(struct reader *r, const char *data, size_t size, struct err_msg *m)
{
    double bucket = r->o->bucket_s >= 0 ? r->o->bucket_s : 1e-3;
    const char *p = data, *end = data + size, *line;
    size_t len;
    int lineno = 0, rc = 0, n_req = 0;
    uint64_t *named = NULL;
    while (next_line(&p, end, &line, &len)) {
        lineno++;
        size_t k = 0;
        while (k < len && (line[k] == ' ' || line[k] == '\t'))
            k++;
        if (k == len) continue; /* blank line */
        if (r->o->max_requests > 0 && n_req >= r->o->max_requests) break;
        char where[32];
        snprintf(where, sizeof(where), "line %d", lineno);
        json_error_t je;
        json_t *o = json_loadb(line, len, 0, &je);
        if (!o) {
            rc = err_set(m, ERR_FORMAT, "%s: line %d: bad JSON at column %d: %s", r->name, lineno,
                         je.column, je.text);
            goto out;
        }
        if (!json_is_object(o)) {
            json_decref(o);
            rc = err_set(m, ERR_FORMAT, "%s: line %d: expected a JSON object", r->name, lineno);
            goto out;
        }
        double ts;
        int64_t n_in, n_out;
        int32_t n_named;
        if ((rc = get_num(r, where, o, "timestamp", true, &ts, m)) ||
            (rc = get_int(r, where, o, "input_length", 1, TRACE_MAX_LEN, &n_in, m)) ||
            (rc = get_int(r, where, o, "output_length", 1, TRACE_MAX_LEN, &n_out, m)) ||
            (rc = get_ids(r, where, o, (int32_t)n_in, &named, &n_named, m))) {
            json_decref(o);
            goto out;
        }
        json_decref(o);
        struct bench_item it = {.t_s = ts * 1e-3 + spread(r->o, bucket, lineno),
                                .n_input = (int32_t)n_in,
                                .n_output = (int32_t)n_out,
                                .after = -1,
                                .session = -1,
                                .src_line = lineno};
        it.n_blocks = block_list(r, it.n_input, named, n_named);
        it.blocks = r->ids;
        bench_workload_add(r->w, &it);
        n_req++;
    }
out:
    free(named);
    return rc;
}

/* "YYYY-MM-DD HH:MM:SS[.fraction]" -> seconds since the epoch (UTC). */
static bool parse_azure_time(const char *s, size_t len, double *out)
{
    char tmp[64];
    if (len >= sizeof(tmp)) return false;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    struct tm tm = {0};
    int used = 0;
    if (sscanf(tmp, "%4d-%2d-%2d %2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6)
        return false;
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
        tm.tm_min > 59 || tm.tm_sec > 60 || tm.tm_year < 1970)
        return false;
    double frac = 0;
    if (tmp[used] == '.') {
        double scale = 0.1;
        int k = used + 1;
        if (!tmp[k]) return false;
        for (; tmp[k]; k++, scale *= 0.1) {
            if (tmp[k] < '0' || tmp[k] > '9') return false;
            frac += (tmp[k] - '0') * scale;
        }
    } else if (tmp[used]) {
        return false;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *out = (double)timegm(&tm) + frac;
    return true;
}

static bool parse_count(const char *s, size_t len, int64_t *out)
{
    if (!len || len > 12) return false;
    int64_t v = 0;
    for (size_t k = 0; k < len; k++) {
        if (s[k] < '0' || s[k] > '9') return false;
        v = v * 10 + (s[k] - '0');
    }
    *out = v;
    return true;
}

static int read_azure(struct reader *r, const char *data, size_t size, struct err_msg *m)
{
    double bucket = r->o->bucket_s >= 0 ? r->o->bucket_s : 0;
    const char *p = data, *end = data + size, *line;
    size_t len;
    int lineno = 0, n_req = 0;
    double t0 = 0;
    if (!next_line(&p, end, &line, &len))
        return err_set(m, ERR_FORMAT,
                       "%s: line 1: empty file (expected the header "
                       "TIMESTAMP,ContextTokens,GeneratedTokens)",
                       r->name);
    lineno = 1;
    static const char header[] = "TIMESTAMP,ContextTokens,GeneratedTokens";
    if (len != strlen(header) || memcmp(line, header, len))
        return err_set(m, ERR_FORMAT, "%s: line 1: expected the header '%s'", r->name, header);
    while (next_line(&p, end, &line, &len)) {
        lineno++;
        if (!len) continue;
        if (r->o->max_requests > 0 && n_req >= r->o->max_requests) break;
        const char *c1 = memchr(line, ',', len);
        const char *c2 = c1 ? memchr(c1 + 1, ',', len - (size_t)(c1 + 1 - line)) : NULL;
        if (!c2 || memchr(c2 + 1, ',', len - (size_t)(c2 + 1 - line)))
            return err_set(m, ERR_FORMAT, "%s: line %d: expected 3 comma-separated fields", r->name,
                           lineno);
        double ts;
        int64_t n_in, n_out;
        if (!parse_azure_time(line, (size_t)(c1 - line), &ts))
            return err_set(m, ERR_FORMAT,
                           "%s: line %d: TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS.fffffff'",
                           r->name, lineno);
        if (!parse_count(c1 + 1, (size_t)(c2 - c1 - 1), &n_in) || n_in < 1 || n_in > TRACE_MAX_LEN)
            return err_set(m, ERR_FORMAT,
                           "%s: line %d: ContextTokens: expected an integer in "
                           "[1, %d]",
                           r->name, lineno, TRACE_MAX_LEN);
        if (!parse_count(c2 + 1, (size_t)(line + len - c2 - 1), &n_out) || n_out > TRACE_MAX_LEN)
            return err_set(m, ERR_FORMAT,
                           "%s: line %d: GeneratedTokens: expected an integer in "
                           "[0, %d]",
                           r->name, lineno, TRACE_MAX_LEN);
        if (n_req == 0) t0 = ts;
        if (ts < t0)
            return err_set(m, ERR_FORMAT, "%s: line %d: TIMESTAMP goes back before the first row",
                           r->name, lineno);
        /* a request that generated nothing still asks for one token: the
         * server must answer something to be timed */
        struct bench_item it = {.t_s = ts - t0 + spread(r->o, bucket, lineno),
                                .n_input = (int32_t)n_in,
                                .n_output = n_out ? (int32_t)n_out : 1,
                                .after = -1,
                                .session = -1,
                                .src_line = lineno};
        it.n_blocks = block_list(r, it.n_input, NULL, 0);
        it.blocks = r->ids;
        bench_workload_add(r->w, &it);
        n_req++;
    }
    return 0;
}

static int read_agentic(struct reader *r, const char *data, size_t size, struct err_msg *m)
{
    double bucket = r->o->bucket_s >= 0 ? r->o->bucket_s : 1.0;
    json_error_t je;
    json_t *root = json_loadb(data, size, 0, &je);
    if (!root)
        return err_set(m, ERR_FORMAT, "%s: line %d: bad JSON at column %d: %s", r->name, je.line,
                       je.column, je.text);
    int rc = 0;
    uint64_t *named = NULL;
    json_t *reqs = json_is_object(root) ? json_object_get(root, "requests") : NULL;
    if (!json_is_array(reqs)) {
        rc = err_set(m, ERR_FORMAT, "%s: expected an object with a 'requests' array", r->name);
        goto out;
    }
    json_t *bs = json_object_get(root, "block_size");
    if (bs && (!json_is_integer(bs) || json_integer_value(bs) != r->w->block_tokens)) {
        rc = err_set(m, ERR_FORMAT, "%s: block_size must be %d (the workload's block size)",
                     r->name, r->w->block_tokens);
        goto out;
    }
    int32_t prev = -1;
    double prev_t = 0;
    size_t n = json_array_size(reqs);
    for (size_t k = 0; k < n; k++) {
        if (r->o->max_requests > 0 && (int)k >= r->o->max_requests) break;
        char where[48];
        snprintf(where, sizeof(where), "requests[%zu]", k);
        json_t *o = json_array_get(reqs, k);
        if (!json_is_object(o)) {
            rc = err_set(m, ERR_FORMAT, "%s: %s: expected an object", r->name, where);
            goto out;
        }
        double t, think = 0;
        int64_t n_in, n_out;
        int32_t n_named;
        if ((rc = get_num(r, where, o, "t", true, &t, m)) ||
            (rc = get_num(r, where, o, "think_time", false, &think, m)) ||
            (rc = get_int(r, where, o, "in", 1, TRACE_MAX_LEN, &n_in, m)) ||
            (rc = get_int(r, where, o, "out", 0, TRACE_MAX_LEN, &n_out, m)) ||
            (rc = get_ids(r, where, o, (int32_t)n_in, &named, &n_named, m)))
            goto out;
        if (k && t < prev_t) {
            rc = err_set(m, ERR_FORMAT, "%s: %s: t = %g goes back before the previous request",
                         r->name, where, t);
            goto out;
        }
        prev_t = t;
        struct bench_item it = {.t_s = t + spread(r->o, bucket, (int64_t)k),
                                .n_input = (int32_t)n_in,
                                .n_output = n_out ? (int32_t)n_out : 1,
                                .after = -1,
                                .session = r->o->file_no,
                                .src_line = (int32_t)k};
        if (!r->o->sessions_timed && prev >= 0) {
            it.after = prev;
            it.think_s = think;
        }
        it.n_blocks = block_list(r, it.n_input, named, n_named);
        it.blocks = r->ids;
        prev = bench_workload_add(r->w, &it);
    }
out:
    free(named);
    json_decref(root);
    return rc;
}

int bench_trace_parse(struct bench_workload *w, enum bench_trace_format f, const char *name,
                      const char *data, size_t len, const struct bench_trace_opts *o,
                      struct err_msg *m)
{
    int32_t want = bench_trace_block_tokens(f);
    if (want && w->block_tokens != want)
        return err_set(m, ERR_INVALID,
                       "%s: this format's hash ids name %d-token blocks, but the "
                       "workload uses %d-token blocks (mixed formats?)",
                       name, want, w->block_tokens);
    if (o->file_no < 0 || o->file_no >= (1 << 20))
        return err_set(m, ERR_INVALID, "%s: too many trace files", name);
    struct reader r = {.w = w, .o = o, .name = name, .ns = (uint64_t)o->file_no << 41};
    int32_t before = w->n;
    int rc = 0;
    switch (f) {
    case BENCH_TRACE_MOONCAKE:
        rc = read_mooncake(&r, data, len, m);
        break;
    case BENCH_TRACE_AZURE:
        rc = read_azure(&r, data, len, m);
        break;
    case BENCH_TRACE_AGENTIC:
        rc = read_agentic(&r, data, len, m);
        break;
    }
    free(r.ids);
    if (rc) {
        bench_workload_truncate(w, before);
        return rc;
    }
    if (w->n == before) return err_set(m, ERR_FORMAT, "%s: no requests in the trace", name);
    return 0;
}

int bench_trace_load(struct bench_workload *w, enum bench_trace_format f, const char *path,
                     const struct bench_trace_opts *o, struct err_msg *m)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        return err_set(m, -e, "cannot open trace '%s': %s", path, strerror(e));
    }
    struct buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
        buf_append(&b, chunk, n);
    bool bad = ferror(fp);
    fclose(fp);
    if (bad) {
        buf_release(&b);
        return err_set(m, -EIO, "cannot read trace '%s'", path);
    }
    int rc = bench_trace_parse(w, f, path, buf_str(&b), b.len, o, m);
    buf_release(&b);
    return rc;
}
