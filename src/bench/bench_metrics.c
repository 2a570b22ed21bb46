/*
 * bench_metrics.c - per-request derived times, percentiles, SLO attainment,
 * goodput, cache hit ratios, speculative decoding and cost (formulas in
 * bench_metrics.h and docs/bench.md).
 */
#include "bench/bench_metrics.h"

#include "base/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void bench_record_add_gap(struct bench_record *r, double gap_s)
{
    if (r->n_gaps == r->cap_gaps) {
        r->cap_gaps = r->cap_gaps ? r->cap_gaps * 2 : 16;
        r->gaps_s = xrealloc(r->gaps_s, sizeof(double) * (size_t)r->cap_gaps);
    }
    r->gaps_s[r->n_gaps++] = gap_s;
}

void bench_record_release(struct bench_record *r)
{
    free(r->gaps_s);
    r->gaps_s = NULL;
    r->n_gaps = r->cap_gaps = 0;
}

double bench_record_ttft(const struct bench_record *r)
{
    return r->first_s >= 0 ? r->first_s - r->send_s : -1;
}

double bench_record_e2e(const struct bench_record *r)
{
    return r->end_s - r->send_s;
}

double bench_record_tpot(const struct bench_record *r)
{
    if (r->first_s < 0 || r->n_output < 2) return -1;
    return (r->end_s - r->first_s) / (double)(r->n_output - 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_record_itl_p99(const struct bench_record *r)
{
    if (r->n_gaps == 0) return -1;
    double *v = xmalloc(sizeof(double) * (size_t)r->n_gaps);
    memcpy(v, r->gaps_s, sizeof(double) * (size_t)r->n_gaps);
    qsort(v, (size_t)r->n_gaps, sizeof(double), cmp_double);
    double p = bench_percentile(v, (size_t)r->n_gaps, 99);
    free(v);
    return p;
}

double bench_percentile(const double *sorted, size_t n, double p)
{
    CHECK(n >= 1 && p >= 0 && p <= 100);
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    if (lo >= n - 1) return sorted[n - 1];
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

void bench_stats_compute(double *v, size_t n, struct bench_stats *s)
{
    memset(s, 0, sizeof(*s));
    if (!n) return;
    qsort(v, n, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    s->n = (int64_t)n;
    s->mean = sum / (double)n;
    s->p50 = bench_percentile(v, n, 50);
    s->p90 = bench_percentile(v, n, 90);
    s->p99 = bench_percentile(v, n, 99);
    s->max = v[n - 1];
}

bool bench_slo_met(const struct bench_slo *slo, const struct bench_record *r)
{
    if (!r->ok) return false;
    if (slo->ttft_s > 0 && !(bench_record_ttft(r) >= 0 && bench_record_ttft(r) <= slo->ttft_s))
        return false;
    if (slo->tpot_s > 0 && bench_record_tpot(r) > slo->tpot_s) return false;
    if (slo->itl_p99_s > 0 && bench_record_itl_p99(r) > slo->itl_p99_s) return false;
    if (slo->e2e_s > 0 && bench_record_e2e(r) > slo->e2e_s) return false;
    return true;
}

void bench_spec_compute(struct bench_spec *s, double duration_s)
{
    s->known = s->drafts > 0 && s->draft_tokens >= 0 && s->accepted >= 0;
    s->acceptance = s->tau = s->k_mean = s->steps_per_s = 0;
    s->decode_tok_s = s->all_accepted_tok_s = 0;
    if (!s->known) return;
    s->acceptance = s->draft_tokens ? (double)s->accepted / (double)s->draft_tokens : 0;
    s->tau = 1.0 + (double)s->accepted / (double)s->drafts;
    s->k_mean = (double)s->draft_tokens / (double)s->drafts;
    if (duration_s > 0) {
        s->steps_per_s = (double)s->drafts / duration_s;
        s->decode_tok_s = s->steps_per_s * s->tau;
        s->all_accepted_tok_s = s->steps_per_s * (1.0 + s->k_mean);
    }
}

void bench_cost_compute(const struct bench_prices *p, double in_tok_s, double out_tok_s, double hit,
                        struct bench_cost *c)
{
    memset(c, 0, sizeof(*c));
    c->hit = hit < 0 ? 0 : hit;
    double usd_h = p->machine_usd_h * (p->machines > 0 ? p->machines : 1);
    if (out_tok_s > 0) c->usd_per_m_out = usd_h / (out_tok_s * 3600.0) * 1e6;
    if (in_tok_s + out_tok_s > 0)
        c->usd_per_m_tokens = usd_h / ((in_tok_s + out_tok_s) * 3600.0) * 1e6;
    static const double hits[5] = {0, 0.25, 0.5, 0.75, 1};
    for (int k = 0; k < 6; k++) {
        double h = k < 5 ? hits[k] : c->hit;
        double rev =
            3600.0 *
            (in_tok_s * ((1 - h) * p->in_usd_m + h * p->cached_usd_m) + out_tok_s * p->out_usd_m) /
            1e6;
        if (k < 5)
            c->revenue_at[k] = rev;
        else
            c->revenue_usd_h = rev;
    }
    c->margin_usd_h = c->revenue_usd_h - usd_h;
}

struct edge {
    double t;  /* when */
    int delta; /* +1 send, -1 end */
};

/* Time order; at equal times an end comes before a send. */
static int cmp_edge(const void *a, const void *b)
{
    const struct edge *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta;
}

void bench_summary_compute(struct bench_record *recs, size_t n, const struct bench_slo *slo,
                           const struct bench_spec *spec_in, struct bench_summary *s)
{
    memset(s, 0, sizeof(*s));
    s->slo = *slo;
    s->slo_set = slo->ttft_s > 0 || slo->tpot_s > 0 || slo->itl_p99_s > 0 || slo->e2e_s > 0;
    s->n_total = (int32_t)n;
    s->hit_server = -1;
    if (!n) return;

    size_t n_gaps = 0;
    double t_first = INFINITY, t_last = -INFINITY, last_send = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        n_gaps += (size_t)recs[i].n_gaps;
        if (recs[i].send_s < t_first) t_first = recs[i].send_s;
        if (recs[i].send_s > last_send) last_send = recs[i].send_s;
        if (recs[i].end_s > t_last) t_last = recs[i].end_s;
    }
    s->duration_s = t_last > t_first ? t_last - t_first : 0;
    /* the rate the generator actually sent at, independent of the server's tail */
    if (n > 1 && last_send > t_first) s->send_rate = (double)(n - 1) / (last_send - t_first);

    /* peak open requests: +1 at each send, -1 at each end, in time order */
    struct edge *ev = xmalloc(sizeof(*ev) * 2 * n);
    for (size_t i = 0; i < n; i++) {
        ev[2 * i] = (struct edge){recs[i].send_s, 1};
        ev[2 * i + 1] = (struct edge){recs[i].end_s, -1};
    }
    qsort(ev, 2 * n, sizeof(*ev), cmp_edge);
    int32_t open_now = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        open_now += ev[i].delta;
        if (open_now > s->peak_in_flight) s->peak_in_flight = open_now;
    }
    free(ev);

    double *queue = xmalloc(sizeof(double) * n), *lag = xmalloc(sizeof(double) * n);
    double *ttft = xmalloc(sizeof(double) * n), *tpot = xmalloc(sizeof(double) * n);
    double *e2e = xmalloc(sizeof(double) * n), *speed = xmalloc(sizeof(double) * n);
    double *itl = xmalloc(sizeof(double) * (n_gaps ? n_gaps : 1));
    size_t n_ttft = 0, n_tpot = 0, n_e2e = 0, n_itl = 0;
    int64_t in_tok = 0, out_tok = 0, good_tok = 0, ideal_all = 0, input_all = 0;
    int64_t ideal_rep = 0;
    struct bench_spec spec = {0};
    bool spec_rec = false;
    for (size_t i = 0; i < n; i++) {
        struct bench_record *r = &recs[i];
        queue[i] = r->ready_s - r->due_s;
        lag[i] = r->send_s - r->ready_s;
        ideal_all += r->ideal_cached;
        input_all += r->n_input;
        if (!r->ok) {
            int32_t k = 0;
            while (k < s->n_error_kinds && s->errors[k].status != r->status)
                k++;
            if (k == s->n_error_kinds && k < (int32_t)ARRAY_LEN(s->errors)) {
                s->errors[k].status = r->status;
                s->n_error_kinds++;
            }
            if (k < (int32_t)ARRAY_LEN(s->errors)) s->errors[k].n++;
            continue;
        }
        s->n_ok++;
        in_tok += r->n_input;
        out_tok += r->n_output;
        if (bench_record_ttft(r) >= 0) ttft[n_ttft++] = bench_record_ttft(r);
        e2e[n_e2e++] = bench_record_e2e(r);
        double tp = bench_record_tpot(r);
        if (tp >= 0) {
            tpot[n_tpot] = tp;
            speed[n_tpot++] = tp > 0 ? 1.0 / tp : INFINITY;
        }
        for (int32_t g = 0; g < r->n_gaps; g++)
            itl[n_itl++] = r->gaps_s[g];
        if (bench_slo_met(slo, r)) {
            s->n_slo_met++;
            good_tok += r->n_output;
        }
        if (r->n_cached >= 0) {
            s->prompt_tokens += r->n_input;
            s->cached_tokens += r->n_cached;
            ideal_rep += r->ideal_cached;
        }
        if (r->spec_drafts >= 0 && r->spec_draft_tok >= 0 && r->spec_accepted >= 0) {
            spec_rec = true;
            spec.drafts += r->spec_drafts;
            spec.draft_tokens += r->spec_draft_tok;
            spec.accepted += r->spec_accepted;
        }
    }
    bench_stats_compute(queue, n, &s->queue);
    bench_stats_compute(lag, n, &s->lag);
    bench_stats_compute(ttft, n_ttft, &s->ttft);
    bench_stats_compute(tpot, n_tpot, &s->tpot);
    bench_stats_compute(e2e, n_e2e, &s->e2e);
    bench_stats_compute(speed, n_tpot, &s->speed);
    bench_stats_compute(itl, n_itl, &s->itl);
    free(queue), free(lag), free(ttft), free(tpot), free(e2e), free(speed), free(itl);

    double d = s->duration_s;
    if (d > 0) {
        s->req_s = s->n_ok / d;
        s->in_tok_s = (double)in_tok / d;
        s->out_tok_s = (double)out_tok / d;
        s->goodput_req_s = s->n_slo_met / d;
        s->goodput_tok_s = (double)good_tok / d;
    }
    s->slo_attainment = (double)s->n_slo_met / (double)n;
    s->error_rate = (double)(n - (size_t)s->n_ok) / (double)n;
    if (s->prompt_tokens > 0) {
        s->hit_server = (double)s->cached_tokens / (double)s->prompt_tokens;
        s->hit_ideal = (double)ideal_rep / (double)s->prompt_tokens;
    } else {
        s->hit_ideal = input_all ? (double)ideal_all / (double)input_all : 0;
    }
    /* most frequent failure first */
    for (int32_t a = 0; a < s->n_error_kinds; a++)
        for (int32_t b = a + 1; b < s->n_error_kinds; b++)
            if (s->errors[b].n > s->errors[a].n) {
                struct bench_status_count t = s->errors[a];
                s->errors[a] = s->errors[b];
                s->errors[b] = t;
            }
    if (spec_rec)
        s->spec = spec;
    else if (spec_in)
        s->spec = *spec_in;
    else
        s->spec.drafts = s->spec.draft_tokens = s->spec.accepted = -1;
    bench_spec_compute(&s->spec, d);
}
