/*
 * cache.c - compiled grammars by source, so a schema sent with every request
 * is compiled (and its mask tables filled) once.
 *
 * Key: XXH3-64 of (kind byte, source bytes); the source is kept too and
 * compared on a hash hit, so a collision can never hand out a wrong grammar.
 * Entries hold one reference each; a caller gets its own reference, so
 * evicting an entry (least recently used, when `capacity` entries exist)
 * never frees a grammar a request still uses. Lookups are a linear scan of
 * at most `capacity` hashes: capacities are small (tens to hundreds) and the
 * scan is nothing next to a compile.
 *
 * The mask tables inside cached grammars belong to this cache's vocabulary;
 * one cache per model.
 *
 * Thread safety: all calls take the cache's mutex; compiles run outside it,
 * so two threads may compile the same source at once (the second insert
 * keeps the first grammar).
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct cache_entry {
    uint64_t hash;     /* XXH3-64 of kind + source */
    int kind;          /* enum grammar_kind */
    char *src;         /* (len) owned copy of the source */
    size_t len;        /* bytes */
    struct grammar *g; /* one reference */
    uint64_t used;     /* tick of the last hit */
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

static uint64_t key_hash(enum grammar_kind kind, const char *src, size_t len)
{
    XXH3_state_t *st = XXH3_createState();
    CHECK(st);
    XXH3_64bits_reset(st);
    uint8_t k = (uint8_t)kind;
    XXH3_64bits_update(st, &k, 1);
    XXH3_64bits_update(st, src, len);
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

void grammar_cache_free(struct grammar_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        grammar_unref(c->e[i].g);
        free(c->e[i].src);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static struct grammar *lookup(struct grammar_cache *c, uint64_t h, enum grammar_kind kind,
                              const char *src, size_t len)
{
    for (int i = 0; i < c->n; i++) {
        struct cache_entry *e = &c->e[i];
        if (e->hash == h && e->kind == (int)kind && e->len == len &&
            (len == 0 || memcmp(e->src, src, len) == 0)) {
            e->used = ++c->tick;
            return grammar_ref(e->g);
        }
    }
    return NULL;
}

int grammar_cache_get(struct grammar_cache *c, enum grammar_kind kind, const char *src, size_t len,
                      struct grammar **out, struct err_msg *msg)
{
    if (kind == GRAMMAR_JSON_OBJECT) len = 0; /* the source does not matter */
    uint64_t h = key_hash(kind, src, len);
    pthread_mutex_lock(&c->mu);
    struct grammar *g = lookup(c, h, kind, src, len);
    if (g) c->hits++;
    pthread_mutex_unlock(&c->mu);
    if (g) {
        *out = g;
        return 0;
    }
    int rc = grammar_compile(kind, src, len, &g, msg);
    if (rc) return rc;
    pthread_mutex_lock(&c->mu);
    c->misses++;
    struct grammar *again = lookup(c, h, kind, src, len);
    if (again) {
        pthread_mutex_unlock(&c->mu);
        grammar_unref(g);
        *out = again;
        return 0;
    }
    int slot = c->n;
    if (c->n == c->cap) {
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        grammar_unref(c->e[slot].g);
        free(c->e[slot].src);
    } else {
        c->n++;
    }
    struct cache_entry *e = &c->e[slot];
    e->hash = h;
    e->kind = (int)kind;
    e->src = xmalloc(len ? len : 1);
    if (len) memcpy(e->src, src, len);
    e->len = len;
    e->g = grammar_ref(g);
    e->used = ++c->tick;
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return 0;
}

void grammar_cache_stats(const struct grammar_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
}
