/*
 * stopstr.c - stop-string hold-back (see stopstr.h).
 *
 * Each feed searches the pending text for every stop string (the earliest
 * match wins; at equal positions, the first listed), then keeps
 * back the longest suffix that is a proper prefix of some stop string.
 * Pending stays shorter than the longest stop string, so a feed costs
 * O((pending + piece) * total stop length), tiny next to a forward step.
 */
#include "api/stopstr.h"

#include <string.h>

void stopstr_init(struct stopstr *s, char *const *stops, int n)
{
    memset(s, 0, sizeof(*s));
    s->stops = stops;
    s->n = n;
}

void stopstr_release(struct stopstr *s)
{
    buf_release(&s->pending);
}

static const char *find(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m > n) return NULL;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return hay + i;
    return NULL;
}

int stopstr_feed(struct stopstr *s, const char *text, size_t len, struct buf *out)
{
    if (s->matched) return -1;
    if (s->n == 0) {
        buf_append(out, text, len);
        return -1;
    }
    buf_append(&s->pending, text, len);
    const char *p = s->pending.data;
    size_t n = s->pending.len;
    const char *best = NULL;
    int best_i = -1;
    for (int i = 0; i < s->n; i++) {
        const char *at = find(p, n, s->stops[i], strlen(s->stops[i]));
        if (at && (!best || at < best)) {
            best = at;
            best_i = i;
        }
    }
    if (best) {
        buf_append(out, p, (size_t)(best - p));
        buf_clear(&s->pending);
        s->matched = true;
        return best_i;
    }
    /* Longest suffix of pending that is a proper prefix of a stop string. */
    size_t hold = 0;
    for (int i = 0; i < s->n; i++) {
        size_t m = strlen(s->stops[i]);
        for (size_t k = (m - 1 < n ? m - 1 : n); k > hold; k--) {
            if (!memcmp(p + n - k, s->stops[i], k)) {
                hold = k;
                break;
            }
        }
    }
    buf_append(out, p, n - hold);
    memmove(s->pending.data, p + n - hold, hold);
    s->pending.len = hold;
    s->pending.data[hold] = 0;
    return -1;
}

void stopstr_flush(struct stopstr *s, struct buf *out)
{
    if (!s->matched) buf_append(out, s->pending.data ? s->pending.data : "", s->pending.len);
    buf_clear(&s->pending);
}
