/*
 * stepcost.c - see stepcost.h.
 *
 * The fit keeps five decayed sums; the least-squares line is
 *
 *     b = cov(n, t) / var(n),   a = mean(t) - b * mean(n)
 *
 * with var(n) required to exceed MIN_VAR_N (observations of one batch size
 * only say nothing about the slope).
 */
#include "engine/stepcost.h"

#include "base/check.h"

#include <math.h>

#define MIN_VAR_N 0.25 /* tokens^2: batch sizes must differ before a slope exists */

void stepcost_init(struct stepcost *c)
{
    *c = (struct stepcost){0};
}

void stepcost_observe(struct stepcost *c, int n_tokens, double seconds, bool decode_only)
{
    CHECK(n_tokens > 0);
    if (!(seconds >= 0) || !isfinite(seconds)) return;
    const double n = n_tokens, d = STEPCOST_DECAY;
    if (decode_only) {
        c->gw = d * c->gw + n;
        c->gt = d * c->gt + n * seconds;
    }
    c->sw = d * c->sw + 1;
    c->sn = d * c->sn + n;
    c->snn = d * c->snn + n * n;
    c->st = d * c->st + seconds;
    c->snt = d * c->snt + n * seconds;
    c->n_obs++;
    const double mn = c->sn / c->sw, mt = c->st / c->sw;
    const double var = c->snn / c->sw - mn * mn;
    c->fitted = var > MIN_VAR_N;
    if (!c->fitted) return;
    c->b_s = (c->snt / c->sw - mn * mt) / var;
    c->a_s = mt - c->b_s * mn;
}

double stepcost_usual_gap(const struct stepcost *c)
{
    return c->gw > 0 ? c->gt / c->gw : 0;
}

double stepcost_predict(const struct stepcost *c, int n_tokens)
{
    return c->fitted ? c->a_s + c->b_s * n_tokens : 0;
}

int stepcost_limit(const struct stepcost *c, int n_decode, double ratio, int budget)
{
    if (n_decode <= 0 || ratio <= 1 || !c->fitted || !(c->b_s > 0)) return budget;
    if (n_decode >= budget) return budget;
    /* A negative fixed cost (noise at a steep slope) would shrink the
     * decode step's predicted cost below what its tokens cost alone. */
    double decode_s = MAX(c->a_s, 0) + c->b_s * n_decode;
    double extra = (ratio * MAX(decode_s, stepcost_usual_gap(c)) - decode_s) / c->b_s;
    if (!(extra < (double)budget)) return budget; /* also catches inf / nan */
    int n = n_decode + MAX((int)extra, 1);
    return MIN(n, budget);
}
