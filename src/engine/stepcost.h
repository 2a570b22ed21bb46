/*
 * stepcost.h - the engine's own model of what a forward step costs, and the
 * prefill chunk it allows next to running decodes (Sarathi-Serve's
 * "stall-free batching": bound the prefill tokens a step carries so that the
 * requests decoding in it are slowed by a bounded factor).
 *
 * Every busy step is one observation (n tokens in the batch, seconds it
 * took). The model is a straight line fitted to recent observations by
 * exponentially weighted least squares:
 *
 *     step_s(n) ~ a + b * n          weights decay by STEPCOST_DECAY per step
 *
 *   seconds
 *     |                          x  mixed steps (decodes + a prefill chunk)
 *     |                 .-'
 *     |          x .-'               the line through recent steps: a
 *     |     x.-'                     secant through the operating points,
 *     |  .-' x   decode-only steps   whatever the true curve's shape is
 *     +-------------------------- n tokens
 *
 * A step with d decode tokens may then hold n tokens in all, where
 *
 *     a + b * n <= ratio * (a + b * d)   =>   n <= d + (ratio - 1)(a + b d) / b
 *
 * (with the usual gap G in place of a + b * d when G is longer:
 * n <= d + (ratio * G - (a + b d)) / b)
 *
 * so a decoding request's inter-token gap in a step that also prefills is at
 * most `ratio` times its gap in a decode-only step. The decode-only cost is
 * the larger of the line's a + b * d and the gap decoding requests usually
 * see: the mean of recent decode-only steps' seconds, weighted by their
 * decode tokens (decaying like the fit). When most streams wait for their
 * prompts (turns of many clients ending together), the few still decoding
 * are held to the gap they had under the full load rather than to the
 * shorter gap of their small batch, and the waiting prompts advance in
 * chunks that amortize the weight reads. The line is a secant,
 * not the kernel's true curve: steps too slow pull the slope up and the next
 * chunk down, steps too fast the reverse, so the chunk settles where mixed
 * steps cost about `ratio` decode steps, on this machine, under this load.
 *
 * Until the observations spread over different batch sizes (no slope yet)
 * or when the slope is not positive (noise), the limit is the whole budget:
 * the next mixed step is the measurement that gives the line its slope.
 * Without decodes in the step there is nobody to protect: the limit is the
 * budget (a prompt alone prefills as fast as the engine can).
 *
 * Plain data, caller-owned, no allocation. Thread: the engine's owner.
 */
#ifndef INFERD_ENGINE_STEPCOST_H
#define INFERD_ENGINE_STEPCOST_H

#include <stdbool.h>

#define STEPCOST_DECAY 0.97 /* weight kept per new observation (~33-step memory) */

struct stepcost {
    double sw;   /* sum of weights */
    double sn;   /* weighted sum of n */
    double snn;  /* weighted sum of n^2 */
    double st;   /* weighted sum of seconds */
    double snt;  /* weighted sum of n * seconds */
    int n_obs;   /* observations so far */
    double a_s;  /* fitted fixed cost per step, seconds (valid when fitted) */
    double b_s;  /* fitted cost per token, seconds (valid when fitted) */
    bool fitted; /* a_s and b_s come from observations with spread in n */
    double gw;   /* decode-only steps: weighted sum of their decode tokens */
    double gt;   /* decode-only steps: weighted sum of tokens * seconds */
};

void stepcost_init(struct stepcost *c);
/* Records a step of n_tokens (> 0) that took seconds (>= 0) and refits;
 * decode_only: every token of the step was a decode (the usual-gap mean). */
void stepcost_observe(struct stepcost *c, int n_tokens, double seconds, bool decode_only);
/* The gap decoding requests usually see, seconds (0 before any decode-only
 * step). */
double stepcost_usual_gap(const struct stepcost *c);
/* The most tokens a step with n_decode decode tokens may hold so that it
 * costs at most ratio times a decode-only step (or the usual gap, if
 * longer), within [n_decode + 1,
 * budget] (at least one prefill token, so prompts always advance). budget
 * when n_decode is 0, ratio <= 1, or the model has no positive slope yet. */
int stepcost_limit(const struct stepcost *c, int n_decode, double ratio, int budget);
/* Predicted seconds of a step of n tokens (0 before a fit). */
double stepcost_predict(const struct stepcost *c, int n_tokens);

#endif
