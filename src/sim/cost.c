/*
 * cost.c - see cost.h.
 */
#include "sim/cost.h"

#include "base/buf.h"
#include "base/check.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sim_cost_default(struct sim_cost *c)
{
    *c = (struct sim_cost){.fixed_ms = 20,
                           .prefill_ms_per_token = 1,
                           .decode_ms_per_token = 1,
                           .kv_bytes_per_token = 12288,
                           .kv_tokens = 65536,
                           .link_gbs = 1,
                           .link_ms = 0.2,
                           .token_budget = 512,
                           .max_seqs = 64};
    snprintf(c->name, sizeof(c->name), "default");
    snprintf(c->source, sizeof(c->source), "built-in default");
}

/* ---- the table ---- */

enum { F_DOUBLE, F_INT64, F_INT, F_TEXT };

struct field {
    const char *key;
    int kind;
    size_t off;
    double lo, hi; /* numeric range */
};

#define FD(k, lo, hi)                                                                              \
    {                                                                                              \
#k, F_DOUBLE, offsetof(struct sim_cost, k), lo, hi                                         \
    }
static const struct field fields[] = {
    {"name", F_TEXT, offsetof(struct sim_cost, name), 0, 0},
    {"source", F_TEXT, offsetof(struct sim_cost, source), 0, 0},
    FD(fixed_ms, 0, 1e6),
    FD(prefill_ms_per_token, 0, 1e6),
    FD(decode_ms_per_token, 0, 1e6),
    FD(attn_ms_per_mpair, 0, 1e6),
    FD(ctx_ms_per_ktoken, 0, 1e6),
    FD(kv_bytes_per_token, 1, 1e9),
    {"kv_tokens", F_INT64, offsetof(struct sim_cost, kv_tokens), 1, 1e12},
    FD(link_gbs, 1e-6, 1e6),
    FD(link_ms, 0, 1e6),
    {"token_budget", F_INT, offsetof(struct sim_cost, token_budget), 1, 65536},
    {"max_seqs", F_INT, offsetof(struct sim_cost, max_seqs), 1, 4096},
};
#undef FD

static int set_field(const struct field *f, struct sim_cost *c, const char *val, const char *name,
                     int line, struct err_msg *m)
{
    char *base = (char *)c + f->off;
    if (f->kind == F_TEXT) {
        size_t cap =
            f->off == offsetof(struct sim_cost, name) ? sizeof(c->name) : sizeof(c->source);
        snprintf(base, cap, "%s", val);
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(val, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == val || *end || errno || !isfinite(v) || v < f->lo || v > f->hi)
        return err_set(m, ERR_FORMAT, "%s:%d: %s: \"%s\" is not a number in [%g, %g]", name, line,
                       f->key, val, f->lo, f->hi);
    if (f->kind == F_DOUBLE)
        *(double *)base = v;
    else if (f->kind == F_INT64)
        *(int64_t *)base = (int64_t)v;
    else
        *(int *)base = (int)v;
    return 0;
}

static int parse_table(const char *name, const char *data, size_t len, struct sim_cost *c,
                       struct err_msg *m)
{
    char line[512];
    int no = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && data[j] != '\n')
            j++;
        no++;
        size_t n = j - i;
        if (n >= sizeof(line))
            return err_set(m, ERR_FORMAT, "%s:%d: line longer than %zu bytes", name, no,
                           sizeof(line) - 1);
        memcpy(line, data + i, n);
        line[n] = 0;
        i = j + 1;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *k = line;
        while (*k == ' ' || *k == '\t' || *k == '\r')
            k++;
        size_t e = strlen(k);
        while (e && (k[e - 1] == ' ' || k[e - 1] == '\t' || k[e - 1] == '\r'))
            k[--e] = 0;
        if (!*k) continue;
        char *v = k;
        while (*v && *v != ' ' && *v != '\t')
            v++;
        if (!*v) return err_set(m, ERR_FORMAT, "%s:%d: \"%s\" has no value", name, no, k);
        *v++ = 0;
        while (*v == ' ' || *v == '\t')
            v++;
        const struct field *f = NULL;
        for (size_t x = 0; x < ARRAY_LEN(fields); x++)
            if (!strcmp(fields[x].key, k)) f = &fields[x];
        if (!f) return err_set(m, ERR_FORMAT, "%s:%d: unknown key \"%s\"", name, no, k);
        int rc = set_field(f, c, v, name, no, m);
        if (rc) return rc;
    }
    return 0;
}

/* ---- bench-engine --json ---- */

static int parse_bench(const char *name, const char *data, size_t len, struct sim_cost *c,
                       struct err_msg *m)
{
    json_error_t je;
    json_t *doc = json_loadb(data, len, 0, &je);
    if (!doc) return err_set(m, ERR_FORMAT, "%s:%d: not JSON: %s", name, je.line, je.text);
    int rc = 0;
    json_t *figs = json_object_get(doc, "figures");
    if (!json_is_array(figs)) {
        rc = err_set(m, ERR_FORMAT, "%s: no \"figures\" array (not bench-engine --json output)",
                     name);
        goto out;
    }
    /* decode points (batch, step seconds) and the prefill figure */
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    int n = 0;
    double pp_tokens = 0, pp_tok_s = 0;
    size_t k;
    json_t *f;
    json_array_foreach(figs, k, f)
    {
        const char *fn = json_string_value(json_object_get(f, "name"));
        json_t *b = json_object_get(f, "batch"), *t = json_object_get(f, "tokens_per_s");
        if (!fn || !json_is_integer(b) || !json_is_number(t) || json_number_value(t) <= 0) {
            rc = err_set(m, ERR_FORMAT, "%s: figures[%zu]: needs name, batch, tokens_per_s > 0",
                         name, k);
            goto out;
        }
        double tok_s = json_number_value(t);
        if (!strncmp(fn, "pp", 2)) {
            pp_tokens = atof(fn + 2);
            pp_tok_s = tok_s;
        } else if (!strncmp(fn, "tg", 2) || !strncmp(fn, "decode-b", 8)) {
            double x = (double)json_integer_value(b), y = x / tok_s * 1e3; /* ms per step */
            sx += x, sy += y, sxx += x * x, sxy += x * y;
            n++;
        }
    }
    double den = n * sxx - sx * sx;
    if (n < 2 || den <= 0 || pp_tokens <= 0) {
        rc = err_set(m, ERR_FORMAT,
                     "%s: needs a prefill figure and decode figures at two batch sizes or more",
                     name);
        goto out;
    }
    double slope = (n * sxy - sx * sy) / den, icpt = (sy - slope * sx) / n;
    if (slope <= 0) slope = sy / sx; /* noise: a line through the origin */
    if (icpt < 0) icpt = 0;
    c->fixed_ms = icpt;
    c->decode_ms_per_token = slope;
    double pp_ms = pp_tokens / pp_tok_s * 1e3;
    c->prefill_ms_per_token = fmax(pp_ms - icpt, pp_ms * 0.5) / pp_tokens;
    c->attn_ms_per_mpair = 0;
    c->ctx_ms_per_ktoken = 0;
    json_t *kvb = json_object_get(doc, "kv_bytes_per_token");
    if (json_is_number(kvb) && json_number_value(kvb) > 0)
        c->kv_bytes_per_token = json_number_value(kvb);
    const char *model = json_string_value(json_object_get(doc, "model"));
    const char *isa = json_string_value(json_object_get(doc, "isa"));
    json_t *th = json_object_get(doc, "threads");
    snprintf(c->name, sizeof(c->name), "%s", model ? model : "bench-engine");
    snprintf(c->source, sizeof(c->source), "inferd bench-engine --json (%s, %lld threads, %s)",
             name, json_is_integer(th) ? (long long)json_integer_value(th) : 0LL, isa ? isa : "?");
out:
    json_decref(doc);
    return rc;
}

int sim_cost_parse(const char *name, const char *data, size_t len, struct sim_cost *c,
                   struct err_msg *m)
{
    size_t i = 0;
    while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
        i++;
    return i < len && data[i] == '{' ? parse_bench(name, data, len, c, m)
                                     : parse_table(name, data, len, c, m);
}

int sim_cost_load(const char *path, struct sim_cost *c, struct err_msg *m)
{
    struct buf b = {0};
    int rc = buf_append_file(&b, path);
    if (rc) {
        buf_release(&b);
        return err_set(m, rc, "%s: %s", path, strerror(-rc));
    }
    rc = sim_cost_parse(path, buf_str(&b), b.len, c, m);
    buf_release(&b);
    return rc;
}

double sim_cost_step_ms(const struct sim_cost *c, const struct sched *s)
{
    double ms = s->n_batch > 0 ? c->fixed_ms : 0;
    double pairs = 0, ctx = 0;
    for (int j = 0; j < s->n_chunks; j++) {
        const struct sched_chunk *ch = &s->chunks[j];
        bool decode = ch->n == 1 && ch->from >= ch->q->n_prompt; /* an output token's */
        if (decode) {
            ms += c->decode_ms_per_token;
            ctx += ch->from;
        } else {
            ms += c->prefill_ms_per_token * ch->n;
            pairs += (double)ch->n * (ch->from + ch->n / 2.0);
        }
    }
    return ms + c->attn_ms_per_mpair * pairs * 1e-6 + c->ctx_ms_per_ktoken * ctx * 1e-3;
}
