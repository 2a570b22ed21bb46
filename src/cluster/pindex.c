/*
 * pindex.c - the global prefix index (pindex.h): a 16-byte-keyed open
 * addressing table of holder lists, and per worker a sequence check with a
 * reorder ring.
 *
 * A holder is one 32-bit word, worker << 4 | tier mask, so a list sorted by
 * word is sorted by worker and a match merges lists without decoding. A
 * holder whose mask reaches 0 leaves the list; a slot whose list empties
 * leaves the table.
 *
 * The reorder ring of a worker has window entries; an event with seq s
 * waits at s % window. Every held seq lies in (next, next + window], a span
 * of window consecutive values, so no two held events share an entry, and
 * after applying next the one entry to look at is that of next + 1.
 */
#include "cluster/pindex.h"

#include "base/check.h"
#include "base/err.h"

#include <stdlib.h>
#include <string.h>

#define TIER_MASK   ((1u << PIDX_TIERS) - 1)
#define SPILL_MIN   8            /* first spill array, in holders */
#define NOWHERE     ((size_t)-1) /* no such slot */
#define RING_FREE   0xff         /* kind of an unused ring entry */
#define MATCH_STACK 256          /* hits a match tracks without allocating */

struct pidx_slot {
    uint64_t key[2]; /* the id's 16 bytes as two words, memory order */
    union {
        struct {
            uint32_t n;              /* holders, 0..PIDX_INLINE; 0: the slot is empty */
            uint32_t h[PIDX_INLINE]; /* (n) holders, ascending */
        } in;
        struct {
            uint32_t n;   /* holders, > PIDX_INLINE (the same word as in.n) */
            uint32_t cap; /* holders allocated at h */
            uint32_t *h;  /* (cap) holders, ascending; the first n used */
        } out;
    } u; /* in while u.in.n <= PIDX_INLINE, else out */
};
_Static_assert(sizeof(struct pidx_slot) == 32, "a slot is half a cache line");

struct pidx_worker {
    uint64_t next;           /* the seq expected next (when started) */
    struct pidx_event *ring; /* (window) held events at seq % window, or NULL */
    uint64_t n_blocks;       /* ids the worker has entries for */
    int n_ring;              /* events held in ring */
    bool started;            /* a stream is under way (next is valid) */
    bool resync;             /* events were lost: waiting for a snapshot */
};

static int window_of(const struct pidx *x)
{
    return x->window > 0 ? x->window : PIDX_WINDOW_DEFAULT;
}

static void key_of(const uint8_t id[16], uint64_t k[2])
{
    memcpy(&k[0], id, 8);
    memcpy(&k[1], id + 8, 8);
}

/* Ids are hashes already, but test and simulator ids are often counters:
 * mix both words so any 16 bytes spread over the table. */
static size_t home_of(const uint64_t k[2], size_t mask)
{
    uint64_t h = k[0] ^ (k[1] * 0x9e3779b97f4a7c15ull);
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    return (size_t)h & mask;
}

static uint32_t *holders(struct pidx_slot *s)
{
    return s->u.in.n > PIDX_INLINE ? s->u.out.h : s->u.in.h;
}

static const uint32_t *holders_c(const struct pidx_slot *s)
{
    return s->u.in.n > PIDX_INLINE ? s->u.out.h : s->u.in.h;
}

/* First position in h[0..n) whose worker is >= worker. */
static uint32_t lower(const uint32_t *h, uint32_t n, uint32_t worker)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (h[mid] >> PIDX_TIERS < worker)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t find(const struct pidx *x, const uint64_t k[2])
{
    if (!x->cap) return NOWHERE;
    size_t mask = x->cap - 1;
    for (size_t i = home_of(k, mask);; i = (i + 1) & mask) {
        const struct pidx_slot *s = &x->slots[i];
        if (!s->u.in.n) return NOWHERE;
        if (s->key[0] == k[0] && s->key[1] == k[1]) return i;
    }
}

static void grow(struct pidx *x)
{
    struct pidx_slot *old = x->slots;
    size_t old_cap = x->cap;
    x->cap = old_cap ? old_cap * 2 : 64;
    x->slots = xcalloc(x->cap, sizeof(*x->slots));
    size_t mask = x->cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].u.in.n) continue;
        size_t j = home_of(old[i].key, mask);
        while (x->slots[j].u.in.n)
            j = (j + 1) & mask;
        x->slots[j] = old[i]; /* a spill array moves with its slot */
    }
    free(old);
}

/* The slot of k, or a fresh empty one keyed k (the caller gives it a
 * holder before anything else looks). */
static struct pidx_slot *find_or_add(struct pidx *x, const uint64_t k[2])
{
    if ((x->stats.n_blocks + 1) * 4 > (uint64_t)x->cap * 3) grow(x);
    size_t mask = x->cap - 1;
    size_t i = home_of(k, mask);
    while (x->slots[i].u.in.n) {
        if (x->slots[i].key[0] == k[0] && x->slots[i].key[1] == k[1]) return &x->slots[i];
        i = (i + 1) & mask;
    }
    x->slots[i].key[0] = k[0];
    x->slots[i].key[1] = k[1];
    x->stats.n_blocks++;
    return &x->slots[i];
}

/* Empties slot i (no holders, nothing spilled) and closes the hole: later
 * members of its run move back while their home is not between the hole
 * and them (cyclically). */
static void delete_slot(struct pidx *x, size_t i)
{
    size_t mask = x->cap - 1, hole = i;
    for (size_t j = (i + 1) & mask; x->slots[j].u.in.n; j = (j + 1) & mask) {
        size_t home = home_of(x->slots[j].key, mask);
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (stays) continue;
        x->slots[hole] = x->slots[j];
        hole = j;
    }
    memset(&x->slots[hole], 0, sizeof(x->slots[hole]));
    x->stats.n_blocks--;
}

/* Puts holder word v at position j of s's list (n -> n + 1). */
static void insert_holder(struct pidx *x, struct pidx_slot *s, uint32_t j, uint32_t v)
{
    uint32_t n = s->u.in.n;
    if (n < PIDX_INLINE) {
        memmove(&s->u.in.h[j + 1], &s->u.in.h[j], (n - j) * sizeof(uint32_t));
        s->u.in.h[j] = v;
    } else if (n == PIDX_INLINE) {
        /* in.h and out.cap / out.h share bytes: read the list out first */
        uint32_t *h = xmalloc(SPILL_MIN * sizeof(uint32_t));
        memcpy(h, s->u.in.h, j * sizeof(uint32_t));
        h[j] = v;
        memcpy(&h[j + 1], &s->u.in.h[j], (n - j) * sizeof(uint32_t));
        s->u.out.cap = SPILL_MIN;
        s->u.out.h = h;
        x->stats.n_spill += SPILL_MIN * sizeof(uint32_t);
    } else {
        if (n == s->u.out.cap) {
            s->u.out.h = xrealloc(s->u.out.h, 2 * (size_t)n * sizeof(uint32_t));
            s->u.out.cap = 2 * n;
            x->stats.n_spill += n * sizeof(uint32_t);
        }
        uint32_t *h = s->u.out.h;
        memmove(&h[j + 1], &h[j], (n - j) * sizeof(uint32_t));
        h[j] = v;
    }
    s->u.in.n = n + 1;
}

/* Takes position j out of s's list (n -> n - 1). */
static void remove_holder(struct pidx *x, struct pidx_slot *s, uint32_t j)
{
    uint32_t n = s->u.in.n;
    if (n <= PIDX_INLINE) {
        memmove(&s->u.in.h[j], &s->u.in.h[j + 1], (n - j - 1) * sizeof(uint32_t));
    } else if (n == PIDX_INLINE + 1) {
        uint32_t *h = s->u.out.h, cap = s->u.out.cap;
        uint32_t keep[PIDX_INLINE];
        memcpy(keep, h, j * sizeof(uint32_t));
        memcpy(&keep[j], &h[j + 1], (n - j - 1) * sizeof(uint32_t));
        free(h);
        x->stats.n_spill -= cap * sizeof(uint32_t);
        memcpy(s->u.in.h, keep, sizeof(keep));
    } else {
        uint32_t *h = s->u.out.h;
        memmove(&h[j], &h[j + 1], (n - j - 1) * sizeof(uint32_t));
        /* halve at 1/4 full, so a list near a boundary does not realloc on
         * every change */
        uint32_t cap = s->u.out.cap;
        if (cap > SPILL_MIN && n - 1 <= cap / 4) {
            s->u.out.h = xrealloc(h, (cap / 2) * sizeof(uint32_t));
            s->u.out.cap = cap / 2;
            x->stats.n_spill -= (cap / 2) * sizeof(uint32_t);
        }
    }
    s->u.in.n = n - 1;
}

static void store(struct pidx *x, struct pidx_worker *w, uint32_t worker, const uint8_t id[16],
                  int tier)
{
    uint64_t k[2];
    key_of(id, k);
    struct pidx_slot *s = find_or_add(x, k);
    uint32_t n = s->u.in.n, *h = holders(s);
    uint32_t j = lower(h, n, worker);
    if (j < n && h[j] >> PIDX_TIERS == worker) {
        h[j] |= 1u << tier;
        return;
    }
    insert_holder(x, s, j, worker << PIDX_TIERS | 1u << tier);
    x->stats.n_holders++;
    w->n_blocks++;
}

static void evict(struct pidx *x, struct pidx_worker *w, uint32_t worker, const uint8_t id[16],
                  int tier)
{
    uint64_t k[2];
    key_of(id, k);
    size_t i = find(x, k);
    if (i == NOWHERE) return;
    struct pidx_slot *s = &x->slots[i];
    uint32_t n = s->u.in.n, *h = holders(s);
    uint32_t j = lower(h, n, worker);
    if (j == n || h[j] >> PIDX_TIERS != worker) return;
    h[j] &= ~(1u << tier);
    if (h[j] & TIER_MASK) return;
    remove_holder(x, s, j);
    x->stats.n_holders--;
    w->n_blocks--;
    if (!s->u.in.n) delete_slot(x, i);
}

static void apply_one(struct pidx *x, struct pidx_worker *w, uint32_t worker,
                      const struct pidx_event *ev)
{
    if (ev->kind == PIDX_STORED)
        store(x, w, worker, ev->id, ev->tier);
    else
        evict(x, w, worker, ev->id, ev->tier);
    x->stats.n_applied++;
}

/* Removes every entry of worker. One pass over the table, ending once the
 * worker's count reaches 0. A deletion shifts later run members back into
 * slot i, so i is looked at again; members that wrap around from the start
 * of the table land past i and are merely seen twice. */
static void forget(struct pidx *x, uint32_t worker)
{
    struct pidx_worker *w = &x->workers[worker];
    for (size_t i = 0; i < x->cap && w->n_blocks;) {
        struct pidx_slot *s = &x->slots[i];
        uint32_t n = s->u.in.n;
        if (!n) {
            i++;
            continue;
        }
        uint32_t *h = holders(s), j = lower(h, n, worker);
        if (j < n && h[j] >> PIDX_TIERS == worker) {
            remove_holder(x, s, j);
            x->stats.n_holders--;
            w->n_blocks--;
            if (!s->u.in.n) {
                delete_slot(x, i);
                continue;
            }
        }
        i++;
    }
    CHECK(w->n_blocks == 0);
}

static void ring_free(struct pidx_worker *w)
{
    free(w->ring);
    w->ring = NULL;
    w->n_ring = 0;
}

/* The worker's stream lost an event: what the index has for it may be
 * wrong, so it goes, until a snapshot. */
static void lose(struct pidx *x, uint32_t worker)
{
    struct pidx_worker *w = &x->workers[worker];
    forget(x, worker);
    ring_free(w);
    w->resync = true;
    x->stats.n_resyncs++;
}

/* Applies the held events that follow next without a gap. */
static void drain(struct pidx *x, struct pidx_worker *w, uint32_t worker)
{
    int window = window_of(x);
    while (w->n_ring) {
        struct pidx_event *e = &w->ring[w->next % (uint64_t)window];
        if (e->kind == RING_FREE || e->seq != w->next) break;
        apply_one(x, w, worker, e);
        e->kind = RING_FREE;
        w->n_ring--;
        w->next++;
    }
}

static struct pidx_worker *worker_at(struct pidx *x, int worker)
{
    CHECK(worker >= 0 && worker <= PIDX_MAX_WORKER);
    if (worker >= x->n_workers) {
        int n = MAX(worker + 1, MIN(2 * x->n_workers, PIDX_MAX_WORKER + 1));
        n = MAX(n, 16);
        x->workers = xrealloc(x->workers, (size_t)n * sizeof(*x->workers));
        memset(&x->workers[x->n_workers], 0, (size_t)(n - x->n_workers) * sizeof(*x->workers));
        x->n_workers = n;
    }
    return &x->workers[worker];
}

void pidx_init(struct pidx *x, int reorder_window)
{
    memset(x, 0, sizeof(*x));
    x->window = reorder_window;
}

void pidx_release(struct pidx *x)
{
    for (size_t i = 0; i < x->cap; i++)
        if (x->slots[i].u.in.n > PIDX_INLINE) free(x->slots[i].u.out.h);
    free(x->slots);
    for (int i = 0; i < x->n_workers; i++)
        free(x->workers[i].ring);
    free(x->workers);
    pidx_init(x, x->window);
}

int pidx_apply(struct pidx *x, int worker, const struct pidx_event *ev)
{
    struct pidx_worker *w = worker_at(x, worker);
    uint32_t wk = (uint32_t)worker;
    if (w->resync) return PIDX_RESYNC;
    if (ev->kind > PIDX_EVICTED || ev->tier >= PIDX_TIERS) {
        x->stats.n_invalid++;
        lose(x, wk);
        return PIDX_RESYNC;
    }
    if (!w->started) {
        w->started = true;
        w->next = ev->seq;
    }
    if (ev->seq < w->next) {
        x->stats.n_stale++;
        return PIDX_STALE;
    }
    if (ev->seq == w->next) {
        apply_one(x, w, wk, ev);
        w->next++;
        drain(x, w, wk);
        return PIDX_APPLIED;
    }
    int window = window_of(x);
    if (ev->seq - w->next > (uint64_t)window) {
        lose(x, wk);
        return PIDX_RESYNC;
    }
    if (!w->ring) {
        w->ring = xmalloc((size_t)window * sizeof(*w->ring));
        for (int i = 0; i < window; i++)
            w->ring[i].kind = RING_FREE;
    }
    struct pidx_event *e = &w->ring[ev->seq % (uint64_t)window];
    if (e->kind != RING_FREE) {
        CHECK(e->seq == ev->seq); /* held seqs span fewer than window + 1 values */
        x->stats.n_stale++;
        return PIDX_STALE;
    }
    *e = *ev;
    w->n_ring++;
    x->stats.n_buffered++;
    return PIDX_BUFFERED;
}

int pidx_snapshot(struct pidx *x, int worker, uint64_t seq, const uint8_t (*ids)[16],
                  const uint8_t *tiers, int n)
{
    CHECK(n >= 0);
    for (int i = 0; i < n; i++)
        if (tiers[i] >= PIDX_TIERS) return ERR_INVALID;
    struct pidx_worker *w = worker_at(x, worker);
    uint32_t wk = (uint32_t)worker;
    forget(x, wk);
    w->resync = false;
    w->started = true;
    w->next = seq + 1;
    for (int i = 0; i < n; i++)
        store(x, w, wk, ids[i], tiers[i]);
    /* Held events the snapshot covers are superseded; those after it keep
     * their entries (they lie within window of the new next). */
    int window = window_of(x);
    for (int i = 0; w->ring && i < window; i++) {
        struct pidx_event *e = &w->ring[i];
        if (e->kind == RING_FREE) continue;
        if (e->seq < w->next || e->seq - w->next > (uint64_t)window) {
            e->kind = RING_FREE;
            w->n_ring--;
        }
    }
    drain(x, w, wk);
    return 0;
}

void pidx_drop_worker(struct pidx *x, int worker)
{
    CHECK(worker >= 0 && worker <= PIDX_MAX_WORKER);
    if (worker >= x->n_workers) return;
    forget(x, (uint32_t)worker);
    ring_free(&x->workers[worker]);
    memset(&x->workers[worker], 0, sizeof(x->workers[worker]));
}

bool pidx_needs_resync(const struct pidx *x, int worker)
{
    return worker >= 0 && worker < x->n_workers && x->workers[worker].resync;
}

uint64_t pidx_worker_blocks(const struct pidx *x, int worker)
{
    return worker >= 0 && worker < x->n_workers ? x->workers[worker].n_blocks : 0;
}

/* One more block b of the prompt is held by the hit r with tier mask word v. */
static void extend(struct pidx_hit *r, int b, uint32_t v)
{
    r->n_any = b + 1;
    if (r->n_pool == b && (v & 1u)) r->n_pool = b + 1;
}

int pidx_match(const struct pidx *x, const uint8_t (*ids)[16], int n, struct pidx_hit *out, int cap)
{
    if (n <= 0) return 0;
    uint64_t k[2];
    key_of(ids[0], k);
    size_t i0 = find(x, k);
    if (i0 == NOWHERE) return 0;
    const struct pidx_slot *s = &x->slots[i0];
    uint32_t m = s->u.in.n;
    const uint32_t *h = holders_c(s);

    /* r: every worker holding block 0, ascending (out itself when it has
     * room); live: the positions in r still running, ascending. */
    struct pidx_hit r_stack[MATCH_STACK];
    uint32_t live_stack[MATCH_STACK];
    struct pidx_hit *r = cap >= 0 && (uint32_t)cap >= m ? out
                         : m <= MATCH_STACK             ? r_stack
                                                        : xmalloc(m * sizeof(*r));
    uint32_t *live = m <= MATCH_STACK ? live_stack : xmalloc(m * sizeof(*live));
    for (uint32_t a = 0; a < m; a++) {
        r[a] = (struct pidx_hit){
            .worker = (int)(h[a] >> PIDX_TIERS), .n_any = 1, .n_pool = (h[a] & 1u) ? 1 : 0};
        live[a] = a;
    }
    uint32_t n_live = m;
    for (int b = 1; b < n && n_live; b++) {
        key_of(ids[b], k);
        size_t i = find(x, k);
        if (i == NOWHERE) break;
        s = &x->slots[i];
        uint32_t nh = s->u.in.n, kept = 0;
        h = holders_c(s);
        if (nh > 8 * n_live) {
            /* few runs left against a long list: search it instead */
            for (uint32_t a = 0; a < n_live; a++) {
                struct pidx_hit *t = &r[live[a]];
                uint32_t j = lower(h, nh, (uint32_t)t->worker);
                if (j == nh || h[j] >> PIDX_TIERS != (uint32_t)t->worker) continue;
                extend(t, b, h[j]);
                live[kept++] = live[a];
            }
        } else {
            for (uint32_t a = 0, j = 0; a < n_live && j < nh;) {
                struct pidx_hit *t = &r[live[a]];
                uint32_t wj = h[j] >> PIDX_TIERS;
                if (wj < (uint32_t)t->worker) {
                    j++;
                } else if (wj > (uint32_t)t->worker) {
                    a++;
                } else {
                    extend(t, b, h[j]);
                    live[kept++] = live[a];
                    a++;
                    j++;
                }
            }
        }
        n_live = kept;
    }
    if (r != out) {
        if (cap > 0) memcpy(out, r, (size_t)MIN((uint32_t)cap, m) * sizeof(*r));
        if (r != r_stack) free(r);
    }
    if (live != live_stack) free(live);
    return (int)m;
}

size_t pidx_bytes(const struct pidx *x)
{
    size_t bytes = x->cap * sizeof(struct pidx_slot) + (size_t)x->stats.n_spill +
                   (size_t)x->n_workers * sizeof(struct pidx_worker);
    for (int i = 0; i < x->n_workers; i++)
        if (x->workers[i].ring) bytes += (size_t)window_of(x) * sizeof(struct pidx_event);
    return bytes;
}
