/*
 * cache.c - compiled grammars by source, so a schema sent with every request
 * is compiled (and its mask tables filled) once.
 *
 * Key: XXH3-64 of (kind byte, source bytes, the resolved limits); the source
 * and limits are kept too and compared on a hash hit, so a collision can
 * never hand out a wrong grammar. Entries hold one reference each; a caller
 * gets its own reference, so evicting an entry (least recently used, when
 * `capacity` entries exist) never frees a grammar a request still uses.
 * Lookups are a linear scan of at most `capacity` hashes: capacities are
 * small (tens to hundreds) and the scan is nothing next to a compile.
 *
 * A miss compiles and then probes the grammar over the cache's vocabulary
 * (grammar_probe: the start state's mask and a few token steps under the
 * grammar's budgets), so a grammar handed out has passed its dry runs and
 * its first tables are already computed. Refusals are entries too (no
 * grammar, the error and its message): a grammar sent again is refused
 * without compiling it again. (The CPU-time bound is the compiling thread's
 * own CPU time, which other load hardly changes.)
 *
 * The mask tables inside cached grammars belong to this cache's vocabulary;
 * one cache per model.
 *
 * Thread safety: any number of threads may call grammar_cache_get at once.
 * Every call takes the cache's mutex for the lookup and again for the
 * insert (entries, LRU clock, counters); compiles and probes run outside
 * it, so two threads may compile the same source at once (the second
 * insert keeps the first grammar). A grammar's own tables have their own
 * lock (mask.c).
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct cache_entry {
    uint64_t hash;             /* XXH3-64 of kind + source + limits */
    int kind;                  /* enum grammar_kind */
    char *src;                 /* (len) owned copy of the source */
    size_t len;                /* bytes */
    struct grammar_limits lim; /* resolved limits it was compiled under */
    struct grammar *g;         /* one reference, or NULL: a refusal */
    int err;                   /* the refusal's code (g NULL) */
    char *err_text;            /* its message; owned */
    uint64_t used;             /* tick of the last hit */
};

struct grammar_cache {
    pthread_mutex_t mu;                /* guards everything below */
    const struct grammar_vocab *vocab; /* vocabulary of the mask tables */
    struct cache_entry *e;             /* (n) entries */
    int n;                             /* entries in use */
    int cap;                           /* capacity */
    uint64_t tick;                     /* lookups so far (LRU clock) */
    uint64_t hits;                     /* lookups served from the cache */
    uint64_t misses;                   /* lookups that compiled */
};

/* The limits as a flat list of numbers (the struct has padding). */
static void limits_words(const struct grammar_limits *l, int64_t w[10])
{
    int64_t v[10] = {l->max_rules,   l->max_elems,  l->compile_work, l->compile_cpu_ms,
                     l->max_stacks,  l->max_nodes,  l->step_work,    l->mask_work,
                     l->probe_steps, l->table_bytes};
    memcpy(w, v, sizeof(v));
}

static bool limits_equal(const struct grammar_limits *a, const struct grammar_limits *b)
{
    int64_t x[10], y[10];
    limits_words(a, x);
    limits_words(b, y);
    return memcmp(x, y, sizeof(x)) == 0;
}

static uint64_t key_hash(enum grammar_kind kind, const char *src, size_t len,
                         const struct grammar_limits *lim)
{
    XXH3_state_t *st = XXH3_createState();
    CHECK(st);
    XXH3_64bits_reset(st);
    uint8_t k = (uint8_t)kind;
    XXH3_64bits_update(st, &k, 1);
    XXH3_64bits_update(st, src, len);
    int64_t w[10];
    limits_words(lim, w);
    XXH3_64bits_update(st, w, sizeof(w));
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

struct grammar_cache *grammar_cache_new(const struct grammar_vocab *v, int capacity)
{
    struct grammar_cache *c = xcalloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    c->vocab = v;
    c->cap = capacity > 0 ? capacity : 1;
    c->e = xcalloc((size_t)c->cap, sizeof(*c->e));
    return c;
}

static void entry_release(struct cache_entry *e)
{
    grammar_unref(e->g);
    free(e->src);
    free(e->err_text);
    memset(e, 0, sizeof(*e));
}

void grammar_cache_free(struct grammar_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++)
        entry_release(&c->e[i]);
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The entry for (h, kind, src, lim), or NULL; a hit bumps its LRU tick.
 * Under c->mu. */
static struct cache_entry *lookup(struct grammar_cache *c, uint64_t h, enum grammar_kind kind,
                                  const char *src, size_t len, const struct grammar_limits *lim)
{
    for (int i = 0; i < c->n; i++) {
        struct cache_entry *e = &c->e[i];
        if (e->hash == h && e->kind == (int)kind && e->len == len &&
            (len == 0 || memcmp(e->src, src, len) == 0) && limits_equal(&e->lim, lim)) {
            e->used = ++c->tick;
            return e;
        }
    }
    return NULL;
}

/* What an entry hands out: a reference, or its refusal. Under c->mu. */
static int entry_result(const struct cache_entry *e, struct grammar **out, struct err_msg *msg)
{
    if (e->g) {
        *out = grammar_ref(e->g);
        return 0;
    }
    return err_set(msg, e->err, "%s", e->err_text);
}

int grammar_cache_get(struct grammar_cache *c, enum grammar_kind kind, const char *src, size_t len,
                      const struct grammar_limits *lim_in, struct grammar **out,
                      struct err_msg *msg)
{
    if (kind == GRAMMAR_JSON_OBJECT) len = 0; /* the source does not matter */
    struct grammar_limits lim;
    grammar_limits_resolve(lim_in, &lim);
    uint64_t h = key_hash(kind, src, len, &lim);
    pthread_mutex_lock(&c->mu);
    struct cache_entry *e = lookup(c, h, kind, src, len, &lim);
    int rc = 0;
    if (e) {
        c->hits++;
        rc = entry_result(e, out, msg);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    pthread_mutex_unlock(&c->mu);
    struct grammar *g = NULL;
    struct err_msg m = {{0}};
    rc = grammar_compile_limits(kind, src, len, &lim, &g, &m);
    if (rc == 0) {
        rc = grammar_probe(g, c->vocab, &m);
        if (rc) {
            grammar_unref(g);
            g = NULL;
        }
    }
    pthread_mutex_lock(&c->mu);
    c->misses++;
    struct cache_entry *again = lookup(c, h, kind, src, len, &lim);
    if (again) {
        int rc2 = entry_result(again, out, msg);
        pthread_mutex_unlock(&c->mu);
        grammar_unref(g);
        return rc2;
    }
    int slot = c->n;
    if (c->n == c->cap) {
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        entry_release(&c->e[slot]);
    } else {
        c->n++;
    }
    e = &c->e[slot];
    e->hash = h;
    e->kind = (int)kind;
    e->src = xmalloc(len ? len : 1);
    if (len) memcpy(e->src, src, len);
    e->len = len;
    e->lim = lim;
    e->g = g;
    e->err = rc;
    e->err_text = rc ? xstrdup(m.text) : NULL;
    e->used = ++c->tick;
    rc = entry_result(e, out, msg);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void grammar_cache_stats(const struct grammar_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
}
