/*
 * bench_report.c - JSON / JSONL / text / SVG outputs of a bench run (see
 * bench_report.h).
 */
#include "bench/bench_report.h"

#include "base/buf.h"
#include "base/check.h"
#include "bench/bench_svg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static json_t *stats_json(const struct bench_stats *s, double scale)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)s->n, "mean", s->mean * scale,
                     "p50", s->p50 * scale, "p90", s->p90 * scale, "p99", s->p99 * scale, "max",
                     s->max * scale);
}

/* JSON has no infinity: an unbounded figure is written as null. */
static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *bench_report_summary_json(const struct bench_summary *s, const struct bench_cost *c)
{
    json_t *j = json_object();
    json_object_set_new(j, "requests", json_integer(s->n_total));
    json_object_set_new(j, "succeeded", json_integer(s->n_ok));
    json_object_set_new(j, "duration_s", json_real(s->duration_s));
    json_object_set_new(j, "peak_in_flight", json_integer(s->peak_in_flight));
    json_object_set_new(j, "send_rate", json_real(s->send_rate));
    json_object_set_new(j, "request_throughput", json_real(s->req_s));
    json_object_set_new(j, "input_tokens_per_s", json_real(s->in_tok_s));
    json_object_set_new(j, "output_tokens_per_s", json_real(s->out_tok_s));
    json_object_set_new(j, "queue_wait_ms", stats_json(&s->queue, 1e3));
    json_object_set_new(j, "send_lag_ms", stats_json(&s->lag, 1e3));
    json_object_set_new(j, "ttft_ms", stats_json(&s->ttft, 1e3));
    json_object_set_new(j, "tpot_ms", stats_json(&s->tpot, 1e3));
    json_object_set_new(j, "itl_ms", stats_json(&s->itl, 1e3));
    json_object_set_new(j, "e2e_ms", stats_json(&s->e2e, 1e3));
    json_t *sp = stats_json(&s->speed, 1);
    json_object_set_new(sp, "max", num(s->speed.max));
    json_object_set_new(j, "output_tokens_per_s_per_user", sp);

    json_t *slo = json_object();
    if (s->slo.ttft_s > 0) json_object_set_new(slo, "ttft_ms", json_real(s->slo.ttft_s * 1e3));
    if (s->slo.tpot_s > 0) json_object_set_new(slo, "tpot_ms", json_real(s->slo.tpot_s * 1e3));
    if (s->slo.itl_p99_s > 0)
        json_object_set_new(slo, "itl_p99_ms", json_real(s->slo.itl_p99_s * 1e3));
    if (s->slo.e2e_s > 0) json_object_set_new(slo, "e2e_ms", json_real(s->slo.e2e_s * 1e3));
    json_object_set_new(slo, "met", json_integer(s->n_slo_met));
    json_object_set_new(slo, "attainment", json_real(s->slo_attainment));
    json_object_set_new(slo, "request_goodput", json_real(s->goodput_req_s));
    json_object_set_new(slo, "token_goodput", json_real(s->goodput_tok_s));
    json_object_set_new(j, "slo", slo);

    json_t *cache = json_object();
    json_object_set_new(cache, "server_hit_ratio",
                        s->hit_server >= 0 ? json_real(s->hit_server) : json_null());
    json_object_set_new(cache, "ideal_hit_ratio", json_real(s->hit_ideal));
    json_object_set_new(cache, "prompt_tokens_reported", json_integer(s->prompt_tokens));
    json_object_set_new(cache, "cached_tokens_reported", json_integer(s->cached_tokens));
    json_object_set_new(j, "prefix_cache", cache);

    json_t *err = json_object();
    json_object_set_new(err, "rate", json_real(s->error_rate));
    json_t *by = json_object();
    for (int32_t k = 0; k < s->n_error_kinds; k++) {
        char key[16];
        snprintf(key, sizeof(key), "%d", s->errors[k].status);
        json_object_set_new(by, s->errors[k].status ? key : "transport",
                            json_integer(s->errors[k].n));
    }
    json_object_set_new(err, "by_status", by);
    json_object_set_new(j, "errors", err);

    if (s->spec.known) {
        const struct bench_spec *p = &s->spec;
        json_object_set_new(
            j, "speculative",
            json_pack("{s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "drafts", (json_int_t)p->drafts,
                      "draft_tokens", (json_int_t)p->draft_tokens, "accepted_tokens",
                      (json_int_t)p->accepted, "acceptance_rate", p->acceptance,
                      "mean_accepted_len", p->tau, "mean_draft_len", p->k_mean,
                      "verify_steps_per_s", p->steps_per_s, "decode_tokens_per_s", p->decode_tok_s,
                      "all_accepted_tokens_per_s", p->all_accepted_tok_s));
    }
    if (c) {
        json_t *at = json_array();
        static const double hits[5] = {0, 0.25, 0.5, 0.75, 1};
        for (int k = 0; k < 5; k++)
            json_array_append_new(at, json_pack("{s:f,s:f}", "hit_ratio", hits[k],
                                                "revenue_usd_per_h", c->revenue_at[k]));
        json_object_set_new(j, "cost",
                            json_pack("{s:f,s:f,s:f,s:f,s:f,s:o}", "usd_per_m_output_tokens",
                                      c->usd_per_m_out, "usd_per_m_tokens", c->usd_per_m_tokens,
                                      "hit_ratio", c->hit, "revenue_usd_per_h", c->revenue_usd_h,
                                      "margin_usd_per_h", c->margin_usd_h, "revenue_by_hit_ratio",
                                      at));
    }
    return j;
}

int bench_report_write_json(const char *path, json_t *j, struct err_msg *m)
{
    if (json_dump_file(j, path, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) != 0)
        return err_set(m, -EIO, "cannot write '%s'", path);
    return 0;
}

int bench_report_records(const char *path, const struct bench_record *recs, size_t n,
                         struct err_msg *m)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        int e = errno;
        return err_set(m, -e, "cannot write '%s': %s", path, strerror(e));
    }
    struct buf b = {0};
    for (size_t i = 0; i < n; i++) {
        const struct bench_record *r = &recs[i];
        buf_clear(&b);
        buf_printf(&b,
                   "{\"item\":%d,\"status\":%d,\"ok\":%s,\"due_ms\":%.3f,\"queue_ms\":%.3f,"
                   "\"send_lag_ms\":%.3f,\"send_ms\":%.3f,",
                   r->item, r->status, r->ok ? "true" : "false", r->due_s * 1e3,
                   (r->ready_s - r->due_s) * 1e3, (r->send_s - r->ready_s) * 1e3, r->send_s * 1e3);
        if (bench_record_ttft(r) >= 0)
            buf_printf(&b, "\"ttft_ms\":%.3f,", bench_record_ttft(r) * 1e3);
        else
            buf_puts(&b, "\"ttft_ms\":null,");
        buf_printf(&b, "\"e2e_ms\":%.3f,", bench_record_e2e(r) * 1e3);
        if (bench_record_tpot(r) >= 0)
            buf_printf(&b, "\"tpot_ms\":%.4f,", bench_record_tpot(r) * 1e3);
        else
            buf_puts(&b, "\"tpot_ms\":null,");
        buf_printf(&b, "\"input_tokens\":%d,\"output_tokens\":%d,\"events\":%d,", r->n_input,
                   r->n_output, r->n_events);
        if (r->n_cached >= 0)
            buf_printf(&b, "\"cached_tokens\":%d,", r->n_cached);
        else
            buf_puts(&b, "\"cached_tokens\":null,");
        buf_printf(&b, "\"ideal_cached_tokens\":%d,", r->ideal_cached);
        if (r->spec_drafts >= 0)
            buf_printf(&b,
                       "\"spec_drafts\":%lld,\"spec_draft_tokens\":%lld,"
                       "\"spec_accepted_tokens\":%lld,",
                       (long long)r->spec_drafts, (long long)r->spec_draft_tok,
                       (long long)r->spec_accepted);
        buf_puts(&b, "\"itl_ms\":[");
        for (int32_t g = 0; g < r->n_gaps; g++)
            buf_printf(&b, g ? ",%.3f" : "%.3f", r->gaps_s[g] * 1e3);
        buf_puts(&b, "]");
        if (r->error[0]) {
            json_t *e = json_string(r->error);
            char *enc = e ? json_dumps(e, JSON_ENCODE_ANY) : NULL;
            buf_printf(&b, ",\"error\":%s", enc ? enc : "\"(not UTF-8)\"");
            free(enc);
            json_decref(e);
        }
        buf_puts(&b, "}\n");
        fwrite(b.data, 1, b.len, f);
    }
    buf_release(&b);
    bool bad = ferror(f);
    if (fclose(f) || bad) return err_set(m, -EIO, "cannot write '%s'", path);
    return 0;
}

static void row(FILE *f, const char *name, const struct bench_stats *s, double scale)
{
    fprintf(f, "  %-24s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, s->mean * scale,
            s->p50 * scale, s->p90 * scale, s->p99 * scale, s->max * scale);
}

void bench_report_text(FILE *f, const struct bench_summary *s, const struct bench_cost *c)
{
    fprintf(f, "requests          %d sent, %d succeeded (error rate %.2f%%)\n", s->n_total, s->n_ok,
            s->error_rate * 100);
    for (int32_t k = 0; k < s->n_error_kinds; k++)
        fprintf(f, "  failed          %d x %s%d\n", s->errors[k].n,
                s->errors[k].status ? "HTTP " : "transport ", s->errors[k].status);
    fprintf(f, "duration          %.3f s, sent at %.1f req/s, at most %d requests open at once\n",
            s->duration_s, s->send_rate, s->peak_in_flight);
    fprintf(f, "throughput        %.2f req/s, %.1f input tok/s, %.1f output tok/s\n", s->req_s,
            s->in_tok_s, s->out_tok_s);
    fprintf(f, "  %-24s %10s %10s %10s %10s %10s\n", "", "mean", "p50", "p90", "p99", "max");
    row(f, "queue wait (ms)", &s->queue, 1e3);
    row(f, "send lag (ms)", &s->lag, 1e3);
    row(f, "TTFT (ms)", &s->ttft, 1e3);
    row(f, "TPOT (ms)", &s->tpot, 1e3);
    row(f, "ITL (ms)", &s->itl, 1e3);
    row(f, "E2E (ms)", &s->e2e, 1e3);
    row(f, "tok/s per user", &s->speed, 1);
    if (s->slo_set)
        fprintf(
            f, "SLO               %d of %d met (%.2f%%): goodput %.2f req/s, %.1f output tok/s\n",
            s->n_slo_met, s->n_total, s->slo_attainment * 100, s->goodput_req_s, s->goodput_tok_s);
    if (s->hit_server >= 0)
        fprintf(f, "prefix cache      server hit ratio %.4f, ideal (infinite cache) %.4f\n",
                s->hit_server, s->hit_ideal);
    else
        fprintf(f, "prefix cache      server reports no cached_tokens; ideal %.4f\n", s->hit_ideal);
    if (s->spec.known)
        fprintf(f,
                "speculative       acceptance %.4f, mean accepted length tau %.3f (draft %.2f); "
                "decode %.1f tok/s (all-accepted would claim %.1f)\n",
                s->spec.acceptance, s->spec.tau, s->spec.k_mean, s->spec.decode_tok_s,
                s->spec.all_accepted_tok_s);
    if (c)
        fprintf(f,
                "cost              $%.4f per M output tokens; revenue $%.2f/h at hit ratio %.3f "
                "(margin $%.2f/h); at hit 0 / 0.5 / 1: $%.2f / $%.2f / $%.2f per h\n",
                c->usd_per_m_out, c->revenue_usd_h, c->hit, c->margin_usd_h, c->revenue_at[0],
                c->revenue_at[2], c->revenue_at[4]);
}

int bench_report_cdf_svg(const char *path, const struct bench_record *recs, size_t n,
                         struct err_msg *m)
{
    static const char *const names[4] = {"TTFT", "TPOT", "ITL", "E2E"};
    double *xs[4], *ys[4];
    size_t cnt[4] = {0};
    size_t n_gaps = 0;
    for (size_t i = 0; i < n; i++)
        n_gaps += (size_t)recs[i].n_gaps;
    for (int k = 0; k < 4; k++) {
        size_t cap = (k == 2 ? n_gaps : n) + 1;
        xs[k] = xmalloc(sizeof(double) * cap);
        ys[k] = xmalloc(sizeof(double) * cap);
    }
    for (size_t i = 0; i < n; i++) {
        const struct bench_record *r = &recs[i];
        if (!r->ok) continue;
        if (bench_record_ttft(r) >= 0) xs[0][cnt[0]++] = bench_record_ttft(r) * 1e3;
        if (bench_record_tpot(r) >= 0) xs[1][cnt[1]++] = bench_record_tpot(r) * 1e3;
        for (int32_t g = 0; g < r->n_gaps; g++)
            xs[2][cnt[2]++] = r->gaps_s[g] * 1e3;
        xs[3][cnt[3]++] = bench_record_e2e(r) * 1e3;
    }
    struct bench_svg_series se[4];
    for (int k = 0; k < 4; k++) {
        struct bench_stats unused;
        bench_stats_compute(xs[k], cnt[k], &unused); /* sorts */
        for (size_t i = 0; i < cnt[k]; i++)
            ys[k][i] = (double)(i + 1) / (double)cnt[k];
        se[k] = (struct bench_svg_series){
            .name = names[k], .x = xs[k], .y = ys[k], .n = cnt[k], .line = true};
    }
    struct bench_svg_plot p = {.title = "latency CDF (successful requests)",
                               .xlabel = "milliseconds",
                               .ylabel = "fraction of requests (ITL: of gaps)",
                               .series = se,
                               .n_series = 4};
    int rc = bench_svg_write(&p, path, m);
    for (int k = 0; k < 4; k++) {
        free(xs[k]);
        free(ys[k]);
    }
    return rc;
}
