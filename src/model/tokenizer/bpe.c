/*
 * bpe.c - from a stretch of text (no added tokens in it) to token ids.
 *
 * Byte-level BPE ("gpt2"):
 *
 *   text --NFC (Qwen2)--> --split regex 1..k (PCRE2 JIT)--> pieces
 *   piece --whole piece in vocab? (llama3 ignore_merges, or known to be
 *           what BPE gives)--> one id
 *         --else bytes -> single-byte tokens --merge by rank--> ids
 *
 * Each Split step is Hugging Face's "Isolated" behaviour: every match is a
 * piece and so is every gap between matches; the next step splits each
 * piece again. The patterns are the tokenizer.json ones with \s and \S
 * spelled out as Unicode White_Space (what Hugging Face's Oniguruma and Rust
 * regex mean by \s; PCRE2's own \s leaves out U+0085). Bytes that are not
 * valid UTF-8 never match (PCRE2_MATCH_INVALID_UTF), so they form gap pieces
 * of their own and are encoded byte by byte; valid text around them splits
 * as if they were not there.
 *
 * SentencePiece-style BPE ("llama"): the section is normalized (U+2581 for
 * spaces, one prepended when add_space_prefix), split into characters, each
 * character becomes its token or, when missing, its bytes' <0xXX> tokens,
 * and the whole section is merged: by merge rank when the file has merges
 * (exactly Hugging Face), else by the score of the merged token (SentencePiece
 * and llama.cpp without merges).
 *
 * The merge engine applies the lowest-ranked adjacent pair first, leftmost
 * on ties (Hugging Face's order). Pieces up to SMALL_PIECE symbols use a
 * linear scan (most words are short); longer ones a binary heap over a
 * linked list, O(n log n), so a megabyte of spaces is not quadratic. Pieces
 * up to STACK_PIECE bytes allocate nothing.
 *
 * Threads: any; per-thread PCRE2 match data and JIT stack are created on
 * first use and freed when the thread exits (a pthread key destructor).
 */
#include "model/tokenizer/internal.h"

#include "base/check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define SMALL_PIECE 16  /* linear scan up to this many symbols */
#define STACK_PIECE 256 /* heap merging without allocation up to this many */

/* ---- pre-tokenizer patterns ---- */

/* Unicode White_Space, the meaning of \s in the tokenizer.json patterns. */
#define WS                                                                                         \
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}" \
    "\\x{3000}"
#define S_           "[" WS "]"
#define NS_          "[^" WS "]"
#define CONTRACTIONS "'s|'t|'re|'ve|'m|'ll|'d"

static const struct {
    const char *name;                       /* tokenizer.ggml.pre */
    const char *regex[TOKENIZER_MAX_REGEX]; /* Split steps, NULL-terminated */
} families[] = {
    {"gpt-2",
     {CONTRACTIONS "| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S_ "+(?!" NS_ ")|" S_ "+"}},
    {"llama-bpe",
     {"(?i:" CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
      "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"}},
    {"qwen2",
     {"(?i:" CONTRACTIONS ")|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
      "\\p{L}\\p{N}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"}},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
      "\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"}},
    {"gpt-4o",
     {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?"
      "i:" CONTRACTIONS ")?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}"
      "\\p{Lm}\\p{Lo}\\p{M}]*(?i:" CONTRACTIONS ")?|\\p{N}{1,3}| ?[^" WS
      "\\p{L}\\p{N}]+[\\r\\n/]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"}},
    {"tekken",
     {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
      "\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n/]*|" S_ "*[\\r\\n]+|" S_ "+(?!" NS_ ")|" S_ "+"}},
};

/* Other names llama.cpp writes for the same splits. */
static const struct {
    const char *alias; /* tokenizer.ggml.pre as found */
    const char *name;  /* the family above */
} aliases[] = {
    {"llama3", "llama-bpe"},      {"llama-v3", "llama-bpe"}, {"qwen3", "qwen2"},
    {"deepseek3", "deepseek-v3"}, {"o200k", "gpt-4o"},       {"default", "gpt-2"},
};

int tokenizer__setup_pre(struct tokenizer *t, struct err_msg *msg)
{
    const char *name = t->pre;
    for (size_t i = 0; i < ARRAY_LEN(aliases); i++)
        if (strcmp(name, aliases[i].alias) == 0) name = aliases[i].name;
    for (size_t f = 0; f < ARRAY_LEN(families); f++) {
        if (strcmp(families[f].name, name) != 0) continue;
        for (int k = 0; k < TOKENIZER_MAX_REGEX && families[f].regex[k]; k++) {
            int err;
            PCRE2_SIZE off;
            pcre2_code *re =
                pcre2_compile((PCRE2_SPTR)families[f].regex[k], PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_NO_UTF_CHECK,
                              &err, &off, NULL);
            CHECK(re);                                 /* our own patterns: a failure is a bug */
            pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter if JIT is unavailable */
            t->regex[t->n_regex++] = re;
        }
        return 0;
    }
    return err_set(msg, ERR_UNSUPPORTED,
                   "tokenizer.ggml.pre: pre-tokenizer '%s' is not supported (llama-bpe, qwen2, "
                   "deepseek-v3, gpt-4o, tekken, gpt-2)",
                   t->pre);
}

/* ---- per-thread matching state ---- */

/* Match data, match context and JIT stack of one thread; freed by the key's
 * destructor when the thread exits. */
struct match_state {
    pcre2_match_data *md;       /* ovector of one pair: the patterns capture nothing */
    pcre2_match_context *mctx;  /* carries the JIT stack */
    pcre2_jit_stack *jit_stack; /* 32 KiB growing to 4 MiB, for long runs */
};

static pthread_key_t match_key;
static pthread_once_t match_once = PTHREAD_ONCE_INIT;

static void match_state_free(void *p)
{
    struct match_state *m = p;
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    pcre2_jit_stack_free(m->jit_stack);
    free(m);
}

static void match_key_init(void)
{
    CHECK(pthread_key_create(&match_key, match_state_free) == 0);
}

static struct match_state *match_state(void)
{
    pthread_once(&match_once, match_key_init);
    struct match_state *m = pthread_getspecific(match_key);
    if (!m) {
        m = xmalloc(sizeof(*m));
        m->md = pcre2_match_data_create(1, NULL);
        m->mctx = pcre2_match_context_create(NULL);
        m->jit_stack = pcre2_jit_stack_create(32 << 10, 4 << 20, NULL);
        CHECK(m->md && m->mctx && m->jit_stack);
        pcre2_jit_stack_assign(m->mctx, NULL, m->jit_stack);
        CHECK(pthread_setspecific(match_key, m) == 0);
    }
    return m;
}

/* ---- the merge engine ---- */

/* Rank and result of merging the adjacent tokens a, b; false if they do not
 * merge. */
static inline bool pair(const struct tokenizer *t, int32_t a, int32_t b, uint32_t *rank,
                        int32_t *result)
{
    if (t->has_merges) {
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint64_t i = (key * 0x9e3779b97f4a7c15ull >> 20) & t->merges.mask;
        for (;; i = (i + 1) & t->merges.mask) {
            const struct tokenizer_merge_slot *s = &t->merges.slots[i];
            if (s->key == key) {
                *rank = s->rank;
                *result = s->result;
                return true;
            }
            if (s->key == UINT64_MAX) return false;
        }
    }
    /* Merging by score: the concatenation must be a token. */
    size_t la, lb;
    const char *ka = tokenizer__key(t, a, &la), *kb = tokenizer__key(t, b, &lb);
    char tmp[256];
    if (la + lb > sizeof(tmp)) return false;
    memcpy(tmp, ka, la);
    memcpy(tmp + la, kb, lb);
    int32_t r = tokenizer__lookup(t, tmp, la + lb);
    if (r < 0) return false;
    *rank = t->score_rank[r];
    *result = r;
    return true;
}

/* Merges sym[0..n) in place; returns the new count. */
static size_t merge_small(const struct tokenizer *t, int32_t *sym, size_t n)
{
    uint32_t rank[SMALL_PIECE];
    int32_t res[SMALL_PIECE];
    for (size_t i = 0; i + 1 < n; i++)
        if (!pair(t, sym[i], sym[i + 1], &rank[i], &res[i])) rank[i] = UINT32_MAX;
    while (n > 1) {
        uint32_t best = UINT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] < best) best = rank[i], bi = i;
        if (best == UINT32_MAX) break;
        sym[bi] = res[bi];
        size_t tail = n - bi - 2;
        memmove(sym + bi + 1, sym + bi + 2, tail * sizeof(*sym));
        memmove(rank + bi + 1, rank + bi + 2, (tail > 0 ? tail - 1 : 0) * sizeof(*rank));
        memmove(res + bi + 1, res + bi + 2, (tail > 0 ? tail - 1 : 0) * sizeof(*res));
        n--;
        if (bi > 0 && !pair(t, sym[bi - 1], sym[bi], &rank[bi - 1], &res[bi - 1]))
            rank[bi - 1] = UINT32_MAX;
        if (bi + 1 < n && !pair(t, sym[bi], sym[bi + 1], &rank[bi], &res[bi]))
            rank[bi] = UINT32_MAX;
    }
    return n;
}

struct heap_ent {
    uint32_t rank; /* merge rank */
    int32_t pos;   /* left symbol (its index never changes) */
    int32_t left;  /* left symbol's id when pushed */
    int32_t right; /* right symbol's id when pushed */
};

static bool heap_less(const struct heap_ent *a, const struct heap_ent *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct heap_ent *h, size_t *n, struct heap_ent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static struct heap_ent heap_pop(struct heap_ent *h, size_t *n)
{
    struct heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* Heap merging. Each merge pops one entry and pushes at most two, and there
 * are at most n - 1 merges, so the heap never holds more than 2n entries. */
static size_t merge_heap(const struct tokenizer *t, int32_t *sym, size_t n)
{
    int32_t next_s[STACK_PIECE], prev_s[STACK_PIECE];
    struct heap_ent h_s[2 * STACK_PIECE];
    bool big = n > STACK_PIECE;
    int32_t *next = big ? xmalloc(n * sizeof(*next)) : next_s;
    int32_t *prev = big ? xmalloc(n * sizeof(*prev)) : prev_s;
    struct heap_ent *h = big ? xmalloc(2 * n * sizeof(*h)) : h_s;
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    uint32_t rank;
    int32_t res;
    for (size_t i = 0; i + 1 < n; i++)
        if (pair(t, sym[i], sym[i + 1], &rank, &res))
            heap_push(h, &nh, (struct heap_ent){rank, (int32_t)i, sym[i], sym[i + 1]});
    while (nh) {
        struct heap_ent e = heap_pop(h, &nh);
        int32_t p = e.pos, q = next[p];
        /* Stale: the left symbol died or changed, or its neighbour did. */
        if (sym[p] != e.left || q < 0 || sym[q] != e.right) continue;
        pair(t, sym[p], sym[q], &rank, &res);
        sym[p] = res;
        sym[q] = -1;
        next[p] = next[q];
        if (next[q] >= 0) prev[next[q]] = p;
        CHECK(nh + 2 <= 2 * n);
        if (prev[p] >= 0 && pair(t, sym[prev[p]], sym[p], &rank, &res))
            heap_push(h, &nh, (struct heap_ent){rank, prev[p], sym[prev[p]], sym[p]});
        if (next[p] >= 0 && pair(t, sym[p], sym[next[p]], &rank, &res))
            heap_push(h, &nh, (struct heap_ent){rank, p, sym[p], sym[next[p]]});
    }
    size_t m = 0;
    for (int32_t i = 0; i >= 0; i = next[i])
        sym[m++] = sym[i];
    if (big) {
        free(next);
        free(prev);
        free(h);
    }
    return m;
}

static size_t merge(const struct tokenizer *t, int32_t *sym, size_t n)
{
    return n <= SMALL_PIECE ? merge_small(t, sym, n) : merge_heap(t, sym, n);
}

/* ---- byte-level pieces ---- */

static void bpe_piece(const struct tokenizer *t, const char *s, size_t n, struct i32vec *out)
{
    int32_t whole = tokenizer__lookup(t, s, n);
    uint8_t known = 0;
    if (whole >= 0) {
        if (t->ignore_merges) {
            i32vec_push(out, whole);
            return;
        }
        known = __atomic_load_n(&t->whole_ok[whole], __ATOMIC_RELAXED);
        if (known == 1) {
            i32vec_push(out, whole);
            return;
        }
    }
    int32_t small[STACK_PIECE];
    int32_t *sym = n <= STACK_PIECE ? small : xmalloc(n * sizeof(*sym));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(unsigned char)s[i]];
        /* A byte-level vocabulary has all 256 bytes; a file that lacks one
         * gets unknown (or nothing, when there is no unknown token). */
        if (id < 0) id = t->unk;
        if (id >= 0) sym[m++] = id;
    }
    m = merge(t, sym, m);
    if (whole >= 0 && !known)
        __atomic_store_n(&t->whole_ok[whole], (uint8_t)(m == 1 && sym[0] == whole ? 1 : 2),
                         __ATOMIC_RELAXED);
    i32vec_append(out, sym, m);
    if (sym != small) free(sym);
}

/* Splits s[0..n) with regex `level` and recurses on every match and gap. */
static void split(const struct tokenizer *t, int level, const char *s, size_t n,
                  pcre2_match_data *md, pcre2_match_context *mctx, struct i32vec *out)
{
    if (level == t->n_regex) {
        bpe_piece(t, s, n, out);
        return;
    }
    const pcre2_code *re = t->regex[level];
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, md, mctx);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            /* JIT stack exhausted on a pathological run: the interpreter
             * keeps its state on the heap. */
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_JIT, md, mctx);
        }
        if (rc < 0) break;
        size_t a = ov[0], b = ov[1];
        if (b <= a) break; /* the patterns never match empty; be safe */
        if (a > pos) split(t, level + 1, s + pos, a - pos, md, mctx, out);
        split(t, level + 1, s + a, b - a, md, mctx, out);
        pos = b;
    }
    if (pos < n) split(t, level + 1, s + pos, n - pos, md, mctx, out);
}

static void encode_bytelevel(const struct tokenizer *t, const char *s, size_t n, struct i32vec *out)
{
    char *norm = NULL;
    if (t->nfc) {
        /* Code points below U+0300 are all NFC-stable: skip the work unless
         * a lead byte of U+0300 or above is present. */
        bool need = false;
        for (size_t i = 0; i < n && !need; i++)
            need = (unsigned char)s[i] >= 0xcc;
        utf8proc_uint8_t *dst;
        if (need && utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                 UTF8PROC_STABLE | UTF8PROC_COMPOSE) >= 0) {
            norm = (char *)dst;
            s = norm;
            n = strlen(norm);
        }
    }
    struct match_state *m = match_state();
    split(t, 0, s, n, m->md, m->mctx, out);
    free(norm);
}

/* ---- SentencePiece sections ---- */

static size_t char_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t l = c < 0x80                 ? 1
               : c >= 0xc2 && c <= 0xdf ? 2
               : c >= 0xe0 && c <= 0xef ? 3
               : c >= 0xf0 && c <= 0xf4 ? 4
                                        : 1;
    if (l > n) return 1;
    for (size_t i = 1; i < l; i++)
        if ((s[i] & 0xc0) != 0x80) return 1;
    return l;
}

static void encode_spm(const struct tokenizer *t, const char *s, size_t n, struct i32vec *out)
{
    struct buf norm = {0};
    if (t->add_space_prefix) buf_append(&norm, "\xe2\x96\x81", 3);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ')
            buf_append(&norm, "\xe2\x96\x81", 3);
        else
            buf_putc(&norm, s[i]);
    }
    int32_t *sym = xmalloc((norm.len + 1) * sizeof(*sym));
    size_t m = 0;
    const unsigned char *u = (const unsigned char *)norm.data;
    for (size_t i = 0; i < norm.len;) {
        size_t l = char_len(u + i, norm.len - i);
        int32_t id = tokenizer__lookup(t, norm.data + i, l);
        if (id >= 0) {
            sym[m++] = id;
        } else if (t->byte_fallback) {
            for (size_t k = 0; k < l; k++) {
                int32_t b = t->byte_id[u[i + k]];
                if (b < 0) b = t->unk;
                if (b >= 0) sym[m++] = b;
            }
        } else if (t->unk >= 0) {
            sym[m++] = t->unk;
        }
        i += l;
    }
    m = merge(t, sym, m);
    i32vec_append(out, sym, m);
    free(sym);
    buf_release(&norm);
}

void tokenizer__encode_section(const struct tokenizer *t, const char *s, size_t n,
                               struct i32vec *out)
{
    if (t->kind == TOKENIZER_KIND_BPE)
        encode_bytelevel(t, s, n, out);
    else
        encode_spm(t, s, n, out);
}
