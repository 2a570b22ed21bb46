/*
 * tokenizer.c - loading, the added-token matcher, encode dispatch.
 *
 * Both loaders fill one struct src (borrowed views of the token list, types,
 * merges and specials) and build() turns it into the immutable tokenizer:
 *
 *   GGUF tokenizer.* keys ----\
 *                              > struct src --> blobs, hash tables, added
 *   tokenizer.json dir -------/   (views)       tokens, regexes, attributes
 *   (through hf_tokenizer_load)
 *
 * Added tokens. Hugging Face matches added tokens on the raw text before
 * normalizing and pre-tokenizing (leftmost, longest first), and GGUF keeps no
 * record of their flags (lstrip, rstrip, normalized, single_word, special).
 * The model maker therefore writes three extra keys (hf_tokenizer.h):
 * tokenizer.inferd.added_ids / added_flags / added_text, the tokenizer.json
 * entries verbatim. A GGUF file without them (made by other tools) gets
 * llama.cpp's defaults: every CONTROL and USER_DEFINED token is an added
 * token, CONTROL ones special, none strips or needs a whole word. Likewise
 * tokenizer.inferd.nfc and tokenizer.inferd.ignore_merges say what the
 * tokenizer.json said; without them they follow the family (Qwen2 NFC,
 * Llama 3 / Tekken ignore merges), as llama.cpp does.
 *
 * Control tokens are matched only with TOKENIZER_PARSE_SPECIAL: without it,
 * text that spells "<|im_end|>" is tokenized as ordinary text, so a user
 * cannot inject turn markers. User-defined added tokens are always matched
 * (they are vocabulary, not control), as in llama.cpp and Hugging Face.
 */
#define _GNU_SOURCE /* qsort_r */
#include "model/tokenizer/internal.h"

#include "base/check.h"
#include "model/hf_tokenizer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

/* Views of everything a tokenizer is built from; nothing here is owned. */
struct src {
    const char *model;             /* "gpt2" | "llama" */
    const char *pre;               /* family name; NULL = "default" */
    int64_t n;                     /* tokens */
    struct gguf_str *tokens;       /* (n) */
    const int32_t *types;          /* (n) or NULL = all NORMAL */
    const float *scores;           /* (n) or NULL */
    int64_t n_merges;              /* entries in merges */
    struct gguf_str *merges;       /* (n_merges) "left right" */
    const int32_t *merge_ids;      /* (3 * n_merges) left, right, result; NULL = resolve */
    int64_t bos, eos, unk;         /* -1 = none */
    bool add_bos, add_eos;         /* TOKENIZER_ADD_SPECIAL behaviour */
    int add_space_prefix;          /* -1 = unknown (default per kind) */
    int nfc;                       /* -1 = unknown (default per family) */
    int ignore_merges;             /* -1 = unknown (default per family) */
    struct gguf_str chat_template; /* ptr NULL = none */
    int64_t n_added;               /* -1 = no added-token keys: derive from types */
    const int32_t *added_ids;      /* (n_added) */
    const int32_t *added_flags;    /* (n_added) TOKENIZER_ADDED_* */
    struct gguf_str *added_text;   /* (n_added) content as in tokenizer.json */
};

/* ---- memory ---- */

/* Allocation for the large load-time tables: 2 MiB-aligned and advised as
 * huge pages, because on virtual machines the page faults of touching
 * several MiB of fresh 4 KiB pages cost more than filling them. Freed with
 * free(). */
static void *big_alloc(size_t n)
{
    const size_t huge = 2u << 20;
    if (n < huge / 2) return xmalloc(MAX(n, 1));
    size_t rounded = (n + huge - 1) & ~(huge - 1);
    void *p = NULL;
    if (posix_memalign(&p, huge, rounded) != 0) return xmalloc(n);
    madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}

static void *big_calloc(size_t n)
{
    void *p = big_alloc(n);
    memset(p, 0, n);
    return p;
}

/* ---- hashing ---- */

static uint64_t ceil_pow2(uint64_t x)
{
    uint64_t p = 16;
    while (p < x)
        p <<= 1;
    return p;
}

int32_t tokenizer__lookup(const struct tokenizer *t, const char *s, size_t n)
{
    uint64_t h = XXH3_64bits(s, n);
    uint64_t tag = h >> 32;
    for (uint64_t i = h & t->vocab.mask;; i = (i + 1) & t->vocab.mask) {
        uint64_t e = t->vocab.slots[i];
        if (!e) return -1;
        if ((e >> 32) != tag) continue;
        int32_t id = (int32_t)(uint32_t)e - 1;
        size_t kn;
        const char *k = tokenizer__key(t, id, &kn);
        if (kn == n && memcmp(k, s, n) == 0) return id;
    }
}

/* Inserts id under its key unless the key is taken (first id wins). */
static void vocab_insert(struct tokenizer *t, int32_t id)
{
    size_t n;
    const char *s = tokenizer__key(t, id, &n);
    uint64_t h = XXH3_64bits(s, n);
    uint64_t tag = h >> 32, i = h & t->vocab.mask, e;
    for (; (e = t->vocab.slots[i]); i = (i + 1) & t->vocab.mask) {
        if ((e >> 32) != tag) continue;
        size_t kn;
        const char *k = tokenizer__key(t, (int32_t)(uint32_t)e - 1, &kn);
        if (kn == n && memcmp(k, s, n) == 0) return;
    }
    t->vocab.slots[i] = tag << 32 | (uint64_t)(id + 1);
}

static void merge_insert(struct tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t result)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = (key * 0x9e3779b97f4a7c15ull >> 20) & t->merges.mask;
    for (;; i = (i + 1) & t->merges.mask) {
        struct tokenizer_merge_slot *s = &t->merges.slots[i];
        if (s->key == key) return; /* an earlier rank already merges this pair */
        if (s->key == UINT64_MAX) {
            *s = (struct tokenizer_merge_slot){key, rank, result};
            return;
        }
    }
}

/* ---- the GPT-2 byte alphabet ---- */

/* The GPT-2 byte alphabet: byte b is written as code point byte_cp[b]. */
static const uint16_t byte_cp[256] = {
#define R8(x) x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7
    /* 0x00-0x20 -> U+0100.. ; 0x21-0x7e themselves ; 0x7f-0xa0 -> U+0121.. ;
     * 0xa1-0xac themselves ; 0xad -> U+0143 ; 0xae-0xff themselves */
    R8(256), R8(264), R8(272), R8(280), 288,     R8(33),  R8(41),  R8(49),  R8(57),  R8(65),
    R8(73),  R8(81),  R8(89),  R8(97),  R8(105), R8(113), 121,     122,     123,     124,
    125,     126,     R8(289), R8(297), R8(305), R8(313), 321,     322,     R8(161), 169,
    170,     171,     172,     323,     174,     175,     R8(176), R8(184), R8(192), R8(200),
    R8(208), R8(216), R8(224), R8(232), R8(240), R8(248)
#undef R8
};

static int16_t cp_byte[324]; /* inverse of byte_cp; -1 = no byte */
static pthread_once_t cp_byte_once = PTHREAD_ONCE_INIT;

static void cp_byte_init(void)
{
    for (int i = 0; i < 324; i++)
        cp_byte[i] = -1;
    for (int b = 0; b < 256; b++)
        cp_byte[byte_cp[b]] = (int16_t)b;
}

/* Decodes one UTF-8 code point of s[0..n) (n > 0): its length, or 0 when the
 * bytes there are not a valid sequence. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
    *cp = v;
    return len;
}

/* Byte-level entry s[0..n) -> raw bytes at dst (room for n): their count,
 * or -1 if a character is outside the byte alphabet (then the entry stands
 * for itself). Every character of the alphabet is printable ASCII (itself)
 * or a two-byte sequence (U+00A1..U+0143). */
static long unmap_bytes(const char *s, size_t n, char *dst)
{
    pthread_once(&cp_byte_once, cp_byte_init);
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        if (c >= 0x21 && c <= 0x7e) {
            dst[o++] = (char)c;
            i++;
            continue;
        }
        if ((c & 0xe0) != 0xc0 || i + 1 >= n || (u[i + 1] & 0xc0) != 0x80) return -1;
        unsigned cp = (c & 0x1f) << 6 | (u[i + 1] & 0x3f);
        if (cp < 0x80 || cp >= 324 || cp_byte[cp] < 0) return -1;
        dst[o++] = (char)cp_byte[cp];
        i += 2;
    }
    return (long)o;
}

static bool is_byte_text(const char *s, size_t n, int *byte)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    *byte = v;
    return true;
}

/* Writes s with every `from` replaced by `to` at dst; returns the length. */
static size_t put_replaced(char *dst, const char *s, size_t n, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), o = 0;
    for (size_t i = 0; i < n;) {
        if (i + nf <= n && memcmp(s + i, from, nf) == 0) {
            memcpy(dst + o, to, nt);
            o += nt;
            i += nf;
        } else {
            dst[o++] = s[i++];
        }
    }
    return o;
}

/* Known end-of-generation markers beyond eos (llama.cpp's list). */
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end_of_text|>",
    "<|endoftext|>",
    "<|end|>",
    "<|eom_id|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<EOT>",
    "_<EOT>",
    "<|EOT|>",
    "<｜end▁of▁sentence｜>",
    "<|end_of_turn|>",
    "</s>",
};

static int cmp_added(const void *pa, const void *pb, void *blob)
{
    const struct tokenizer_added *a = pa, *b = pb;
    unsigned char fa = (unsigned char)((char *)blob)[a->off];
    unsigned char fb = (unsigned char)((char *)blob)[b->off];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int build_added(struct tokenizer *t, const struct src *s, struct err_msg *msg)
{
    struct buf blob = {0};
    int64_t n = s->n_added >= 0 ? s->n_added : s->n;
    t->added = xcalloc((size_t)MAX(n, 1), sizeof(*t->added));
    for (int64_t i = 0; i < n; i++) {
        int32_t id;
        unsigned flags;
        const char *text;
        size_t len;
        if (s->n_added >= 0) {
            id = s->added_ids[i];
            if (id < 0 || id >= t->n_vocab) {
                buf_release(&blob);
                return err_set(msg, ERR_FORMAT,
                               "tokenizer.inferd.added_ids[%lld]: id %d is not a token",
                               (long long)i, id);
            }
            flags = (unsigned)s->added_flags[i];
            text = s->added_text[i].ptr;
            len = s->added_text[i].len;
        } else {
            id = (int32_t)i;
            int32_t ty = t->types[id];
            if (ty != TOKENIZER_TYPE_CONTROL && ty != TOKENIZER_TYPE_USER_DEFINED) continue;
            flags =
                ty == TOKENIZER_TYPE_CONTROL ? TOKENIZER_ADDED_SPECIAL : TOKENIZER_ADDED_NORMALIZED;
            text = t->text_blob + t->text_off[id];
            len = t->text_off[id + 1] - t->text_off[id] - 1;
        }
        if (len == 0) continue;
        struct tokenizer_added *a = &t->added[t->n_added++];
        a->id = id;
        a->flags = flags;
        a->off = (uint32_t)blob.len;
        /* SentencePiece normalizes spaces to U+2581: a normalized added
         * token written with U+2581 matches raw text with spaces. */
        buf_reserve(&blob, len);
        if (t->kind == TOKENIZER_KIND_SPM && (flags & TOKENIZER_ADDED_NORMALIZED))
            blob.len += put_replaced(blob.data + blob.len, text, len, "\xe2\x96\x81", " ");
        else
            buf_append(&blob, text, len);
        a->len = (uint32_t)(blob.len - a->off);
        t->attr[id] |= TOKENIZER_ATTR_ADDED;
        if (s->n_added >= 0 && (flags & TOKENIZER_ADDED_SPECIAL))
            t->attr[id] |= TOKENIZER_ATTR_SPECIAL;
    }
    buf_putc(&blob, 0);
    t->added_blob = blob.data;
    qsort_r(t->added, (size_t)t->n_added, sizeof(*t->added), cmp_added, t->added_blob);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_added && (unsigned char)t->added_blob[t->added[k].off] < b)
            k++;
        t->added_first[b] = (uint32_t)k;
    }
    return 0;
}

static int cmp_score(const void *pa, const void *pb, void *scores)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    const float *sc = scores;
    if (sc[a] != sc[b]) return sc[a] > sc[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int build_merges(struct tokenizer *t, const struct src *s, struct err_msg *msg)
{
    t->has_merges = s->n_merges > 0;
    t->n_merges = s->n_merges;
    if (!t->has_merges) {
        if (t->kind == TOKENIZER_KIND_BPE)
            return err_set(msg, ERR_FORMAT, "tokenizer.ggml.merges: missing (required by gpt2)");
        if (!s->scores)
            return err_set(msg, ERR_FORMAT,
                           "tokenizer.ggml.scores: missing (required by llama without merges)");
        /* Higher score merges first: rank tokens by descending score. */
        int32_t *order = xmalloc((size_t)t->n_vocab * sizeof(*order));
        for (int32_t i = 0; i < t->n_vocab; i++)
            order[i] = i;
        qsort_r(order, (size_t)t->n_vocab, sizeof(*order), cmp_score, (void *)s->scores);
        t->score_rank = xmalloc((size_t)t->n_vocab * sizeof(*t->score_rank));
        for (int32_t i = 0; i < t->n_vocab; i++)
            t->score_rank[order[i]] = (uint32_t)i;
        free(order);
        return 0;
    }
    uint64_t cap = ceil_pow2((uint64_t)s->n_merges * 2 + 16);
    t->merges.slots = big_alloc(cap * sizeof(*t->merges.slots));
    for (uint64_t i = 0; i < cap; i++)
        t->merges.slots[i].key = UINT64_MAX;
    t->merges.mask = cap - 1;
    if (s->merge_ids) {
        /* Resolved by the model maker: no string work at all. */
        for (int64_t r = 0; r < s->n_merges; r++) {
            const int32_t *m = &s->merge_ids[3 * r];
            if (m[0] < 0 && m[1] < 0 && m[2] < 0) continue; /* a merge that never applies */
            if (m[0] < 0 || m[1] < 0 || m[2] < 0 || m[0] >= t->n_vocab || m[1] >= t->n_vocab ||
                m[2] >= t->n_vocab)
                return err_set(msg, ERR_FORMAT,
                               "tokenizer.inferd.merge_ids[%lld]: ids %d %d -> %d are not tokens",
                               (long long)r, m[0], m[1], m[2]);
            merge_insert(t, m[0], m[1], (uint32_t)r, m[2]);
        }
        return 0;
    }
    char stack[512];
    char *tmp = stack;
    size_t tmp_cap = sizeof(stack);
    for (int64_t r = 0; r < s->n_merges; r++) {
        const char *m = s->merges[r].ptr;
        size_t n = s->merges[r].len;
        const char *sp = memchr(m, ' ', n);
        if (!sp || sp == m || sp + 1 == m + n) {
            if (tmp != stack) free(tmp);
            return err_set(msg, ERR_FORMAT,
                           "tokenizer.ggml.merges[%lld]: expected \"left right\", got '%.*s'",
                           (long long)r, (int)MIN(n, 64), m);
        }
        if (n > tmp_cap) {
            if (tmp != stack) free(tmp);
            tmp_cap = n * 2;
            tmp = xmalloc(tmp_cap);
        }
        size_t la = (size_t)(sp - m), lb = n - la - 1;
        long ua = (long)la, ub = (long)lb;
        if (t->kind == TOKENIZER_KIND_BPE) {
            /* Left and right unmapped back to back: tmp[0..ua+ub) is the
             * merged token's key. */
            ua = unmap_bytes(m, la, tmp);
            ub = ua < 0 ? -1 : unmap_bytes(sp + 1, lb, tmp + ua);
            if (ub < 0) continue;
        } else {
            memcpy(tmp, m, la);
            memcpy(tmp + la, sp + 1, lb);
        }
        int32_t ia = tokenizer__lookup(t, tmp, (size_t)ua);
        int32_t ib = tokenizer__lookup(t, tmp + ua, (size_t)ub);
        int32_t ir = tokenizer__lookup(t, tmp, (size_t)(ua + ub));
        /* Hugging Face refuses a merge whose parts or result are not in the
         * vocabulary; such a merge can never apply, so it is dropped. */
        if (ia < 0 || ib < 0 || ir < 0) continue;
        merge_insert(t, ia, ib, (uint32_t)r, ir);
    }
    if (tmp != stack) free(tmp);
    return 0;
}

static void set_attrs(struct tokenizer *t, const struct src *s)
{
    for (int32_t i = 0; i < t->n_vocab; i++) {
        /* Without the added-token keys, control tokens are the special ones. */
        if (s->n_added < 0 && t->types[i] == TOKENIZER_TYPE_CONTROL)
            t->attr[i] |= TOKENIZER_ATTR_SPECIAL;
        if (t->types[i] == TOKENIZER_TYPE_NORMAL) continue;
        const char *text = t->text_blob + t->text_off[i];
        for (size_t k = 0; k < ARRAY_LEN(eog_texts); k++)
            if (strcmp(text, eog_texts[k]) == 0) t->attr[i] |= TOKENIZER_ATTR_EOG;
    }
    if (t->eos >= 0) t->attr[t->eos] |= TOKENIZER_ATTR_EOG;
}

static int check_id(int64_t id, int64_t n, const char *key, int32_t *out, struct err_msg *msg)
{
    if (id >= n) return err_set(msg, ERR_FORMAT, "%s: id %lld is not a token", key, (long long)id);
    *out = (int32_t)(id < 0 ? -1 : id);
    return 0;
}

static int build(const struct src *s, struct tokenizer **out, struct err_msg *msg)
{
    *out = NULL;
    enum tokenizer_kind kind;
    if (strcmp(s->model, "gpt2") == 0)
        kind = TOKENIZER_KIND_BPE;
    else if (strcmp(s->model, "llama") == 0)
        kind = TOKENIZER_KIND_SPM;
    else
        return err_set(msg, ERR_UNSUPPORTED,
                       "tokenizer.ggml.model: '%s' is not supported (gpt2 or llama)", s->model);
    if (s->n <= 0 || s->n > HF_TOKENIZER_MAX_TOKENS)
        return err_set(msg, ERR_FORMAT, "tokenizer.ggml.tokens: %lld tokens (expected 1..%d)",
                       (long long)s->n, HF_TOKENIZER_MAX_TOKENS);
    struct tokenizer *t = xcalloc(1, sizeof(*t));
    t->kind = kind;
    t->n_vocab = (int32_t)s->n;
    t->pre = xstrdup(s->pre ? s->pre : "default");
    int rc;
    if ((rc = check_id(s->bos, s->n, "tokenizer.ggml.bos_token_id", &t->bos, msg)) ||
        (rc = check_id(s->eos, s->n, "tokenizer.ggml.eos_token_id", &t->eos, msg)) ||
        (rc = check_id(s->unk, s->n, "tokenizer.ggml.unknown_token_id", &t->unk, msg)))
        goto err;
    t->add_bos = s->add_bos;
    t->add_eos = s->add_eos;
    t->add_space_prefix =
        s->add_space_prefix < 0 ? kind == TOKENIZER_KIND_SPM : s->add_space_prefix == 1;
    if (s->chat_template.ptr) {
        t->chat_template = xmalloc(s->chat_template.len + 1);
        memcpy(t->chat_template, s->chat_template.ptr, s->chat_template.len);
        t->chat_template[s->chat_template.len] = 0;
    }

    size_t n = (size_t)s->n;
    t->types = xmalloc(n * sizeof(*t->types));
    t->attr = xcalloc(n, 1);
    t->whole_ok = xcalloc(n, 1);
    for (size_t i = 0; i < n; i++) {
        int32_t ty = s->types ? s->types[i] : TOKENIZER_TYPE_NORMAL;
        if (ty < TOKENIZER_TYPE_NORMAL || ty > TOKENIZER_TYPE_BYTE) {
            rc =
                err_set(msg, ERR_FORMAT, "tokenizer.ggml.token_type[%zu]: %d is not a type", i, ty);
            goto err;
        }
        t->types[i] = ty;
    }

    /* Texts, decoded bytes and keys, each in one blob, sized for the worst
     * case first (bytes never outgrow the text; a SentencePiece key can
     * triple where spaces become U+2581). */
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += s->tokens[i].len + 1;
    if (total > UINT32_MAX / 3) {
        rc = err_set(msg, ERR_FORMAT, "tokenizer.ggml.tokens: more than 1 GiB of text");
        goto err;
    }
    t->text_off = big_alloc((n + 1) * sizeof(uint32_t));
    t->bytes_off = big_alloc((n + 1) * sizeof(uint32_t));
    t->key_off = big_alloc((n + 1) * sizeof(uint32_t));
    t->text_blob = big_alloc(total + 1);
    t->bytes_blob = big_alloc(total + 1);
    t->key_blob = big_alloc(3 * total + 1);
    char *text = t->text_blob, *bytes = t->bytes_blob, *key = t->key_blob;
    for (int i = 0; i < 256; i++)
        t->byte_id[i] = -1;
    for (size_t i = 0; i < n; i++) {
        const char *p = s->tokens[i].ptr;
        size_t len = s->tokens[i].len;
        int32_t ty = t->types[i];
        bool added = ty == TOKENIZER_TYPE_CONTROL || ty == TOKENIZER_TYPE_USER_DEFINED;
        t->text_off[i] = (uint32_t)(text - t->text_blob);
        memcpy(text, p, len);
        text[len] = 0;
        text += len + 1;
        t->bytes_off[i] = (uint32_t)(bytes - t->bytes_blob);
        t->key_off[i] = (uint32_t)(key - t->key_blob);
        int byte;
        if (kind == TOKENIZER_KIND_BPE) {
            long got = added ? -1 : unmap_bytes(p, len, bytes);
            if (got < 0) {
                memcpy(bytes, p, len);
                got = (long)len;
            }
            memcpy(key, bytes, (size_t)got);
            bytes += got;
            key += got;
        } else if (ty == TOKENIZER_TYPE_BYTE && is_byte_text(p, len, &byte)) {
            *bytes++ = (char)byte;
            memcpy(key, p, len);
            key += len;
            if (t->byte_id[byte] < 0) t->byte_id[byte] = (int32_t)i;
        } else {
            bytes += put_replaced(bytes, p, len, "\xe2\x96\x81", " ");
            if (ty == TOKENIZER_TYPE_USER_DEFINED) {
                key += put_replaced(key, p, len, " ", "\xe2\x96\x81");
            } else {
                memcpy(key, p, len);
                key += len;
            }
        }
    }
    t->text_off[n] = (uint32_t)(text - t->text_blob);
    t->bytes_off[n] = (uint32_t)(bytes - t->bytes_blob);
    t->key_off[n] = (uint32_t)(key - t->key_blob);
    *bytes = 0;
    *key = 0;

    /* Model vocabulary: every token but control ones, which only the added
     * token matcher produces. */
    uint64_t cap = ceil_pow2(n * 2 + 16);
    t->vocab.slots = big_calloc(cap * sizeof(*t->vocab.slots));
    t->vocab.mask = cap - 1;
    for (size_t i = 0; i < n; i++)
        if (t->types[i] != TOKENIZER_TYPE_CONTROL) vocab_insert(t, (int32_t)i);
    if (kind == TOKENIZER_KIND_BPE) {
        for (int b = 0; b < 256; b++) {
            char c = (char)b;
            t->byte_id[b] = tokenizer__lookup(t, &c, 1);
        }
    }
    t->byte_fallback = kind == TOKENIZER_KIND_SPM && t->byte_id[0] >= 0;

    if ((rc = build_merges(t, s, msg)) || (rc = build_added(t, s, msg))) goto err;
    set_attrs(t, s);

    t->nfc = s->nfc >= 0 ? s->nfc == 1 : strcmp(t->pre, "qwen2") == 0;
    t->ignore_merges = s->ignore_merges >= 0
                           ? s->ignore_merges == 1
                           : strcmp(t->pre, "llama-bpe") == 0 || strcmp(t->pre, "tekken") == 0;
    if (kind == TOKENIZER_KIND_BPE && (rc = tokenizer__setup_pre(t, msg))) goto err;
    *out = t;
    return 0;

err:
    tokenizer_free(t);
    return rc;
}

void tokenizer_free(struct tokenizer *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_regex; i++)
        pcre2_code_free(t->regex[i]);
    free(t->pre);
    free(t->text_blob);
    free(t->text_off);
    free(t->key_blob);
    free(t->key_off);
    free(t->bytes_blob);
    free(t->bytes_off);
    free(t->types);
    free(t->attr);
    free(t->vocab.slots);
    free(t->merges.slots);
    free(t->score_rank);
    free(t->whole_ok);
    free(t->added);
    free(t->added_blob);
    free(t->chat_template);
    free(t);
}

/* ---- GGUF ---- */

/* A string array key as views; *n = 0 and *out = NULL when absent. */
static int gguf_strs(const struct gguf_file *f, const char *key, bool required,
                     struct gguf_str **out, int64_t *n, struct err_msg *msg)
{
    *out = NULL;
    *n = 0;
    enum gguf_vtype et;
    uint64_t cnt;
    int rc = gguf_get_arr(f, key, &et, &cnt, NULL, msg);
    if (rc == -ENOENT && !required) return 0;
    if (rc == -ENOENT) return err_set(msg, ERR_FORMAT, "%s: missing", key);
    if (rc) return rc;
    if (et != GGUF_VTYPE_STRING)
        return err_set(msg, ERR_FORMAT, "%s: expected a string array", key);
    if (cnt > HF_TOKENIZER_MAX_TOKENS * 4ull)
        return err_set(msg, ERR_FORMAT, "%s: %llu entries is too many", key,
                       (unsigned long long)cnt);
    int64_t ki = gguf_find_key(f, key);
    *out = big_alloc((size_t)MAX(cnt, 1) * sizeof(**out));
    for (uint64_t i = 0; i < cnt; i++)
        (*out)[i] = gguf_arr_str_at(f, ki, i);
    *n = (int64_t)cnt;
    return 0;
}

/* A numeric array of n 4-byte elements of type want, copied; NULL if absent. */
static int gguf_arr4(const struct gguf_file *f, const char *key, enum gguf_vtype want, int64_t n,
                     void **out, struct err_msg *msg)
{
    *out = NULL;
    enum gguf_vtype et;
    uint64_t cnt;
    const void *data;
    int rc = gguf_get_arr(f, key, &et, &cnt, &data, msg);
    if (rc == -ENOENT) return 0;
    if (rc) return rc;
    if (et != want || cnt != (uint64_t)n)
        return err_set(msg, ERR_FORMAT, "%s: expected %lld elements of type %d, got %llu of %d",
                       key, (long long)n, (int)want, (unsigned long long)cnt, (int)et);
    *out = big_alloc((size_t)MAX(n, 1) * 4);
    memcpy(*out, data, (size_t)n * 4);
    return 0;
}

/* Optional bool key: -1 when absent. */
static int gguf_opt_bool(const struct gguf_file *f, const char *key, int *out, struct err_msg *msg)
{
    bool v;
    int rc = gguf_get_bool(f, key, &v, msg);
    *out = -1;
    if (rc == -ENOENT) return 0;
    if (rc) return rc;
    *out = v;
    return 0;
}

static int gguf_opt_id(const struct gguf_file *f, const char *key, int64_t *out,
                       struct err_msg *msg)
{
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v, msg);
    *out = -1;
    if (rc == -ENOENT) return 0;
    if (rc) return rc;
    *out = v;
    return 0;
}

static char *gguf_opt_str(const struct gguf_file *f, const char *key, int *rc, struct err_msg *msg)
{
    struct gguf_str v;
    *rc = gguf_get_str(f, key, &v, msg);
    if (*rc == -ENOENT) {
        *rc = 0;
        return NULL;
    }
    if (*rc) return NULL;
    char *s = xmalloc(v.len + 1);
    memcpy(s, v.ptr, v.len);
    s[v.len] = 0;
    return s;
}

int tokenizer_new_gguf(const struct gguf_file *f, struct tokenizer **out, struct err_msg *msg)
{
    *out = NULL;
    struct src s = {.bos = -1, .eos = -1, .unk = -1, .n_added = -1};
    char *model = NULL, *pre = NULL;
    int32_t *types = NULL, *added_ids = NULL, *added_flags = NULL, *merge_ids = NULL;
    float *scores = NULL;
    int64_t n_added_text = 0, n_added = 0;
    int rc;
    model = gguf_opt_str(f, "tokenizer.ggml.model", &rc, msg);
    if (rc) goto done;
    if (!model) {
        rc = err_set(msg, ERR_FORMAT, "tokenizer.ggml.model: missing (the file has no tokenizer)");
        goto done;
    }
    pre = gguf_opt_str(f, "tokenizer.ggml.pre", &rc, msg);
    if (rc) goto done;
    s.model = model;
    s.pre = pre;
    if ((rc = gguf_strs(f, "tokenizer.ggml.tokens", true, &s.tokens, &s.n, msg)) ||
        (rc = gguf_strs(f, "tokenizer.ggml.merges", false, &s.merges, &s.n_merges, msg)) ||
        (rc = gguf_arr4(f, "tokenizer.ggml.token_type", GGUF_VTYPE_INT32, s.n, (void **)&types,
                        msg)) ||
        (rc = gguf_arr4(f, "tokenizer.ggml.scores", GGUF_VTYPE_FLOAT32, s.n, (void **)&scores,
                        msg)) ||
        (rc = gguf_opt_id(f, "tokenizer.ggml.bos_token_id", &s.bos, msg)) ||
        (rc = gguf_opt_id(f, "tokenizer.ggml.eos_token_id", &s.eos, msg)) ||
        (rc = gguf_opt_id(f, "tokenizer.ggml.unknown_token_id", &s.unk, msg)))
        goto done;
    s.types = types;
    s.scores = scores;
    if ((rc = gguf_arr4(f, "tokenizer.inferd.merge_ids", GGUF_VTYPE_INT32, 3 * s.n_merges,
                        (void **)&merge_ids, msg)))
        goto done;
    s.merge_ids = merge_ids;
    int add_bos, add_eos;
    if ((rc = gguf_opt_bool(f, "tokenizer.ggml.add_bos_token", &add_bos, msg)) ||
        (rc = gguf_opt_bool(f, "tokenizer.ggml.add_eos_token", &add_eos, msg)) ||
        (rc = gguf_opt_bool(f, "tokenizer.ggml.add_space_prefix", &s.add_space_prefix, msg)) ||
        (rc = gguf_opt_bool(f, "tokenizer.inferd.nfc", &s.nfc, msg)) ||
        (rc = gguf_opt_bool(f, "tokenizer.inferd.ignore_merges", &s.ignore_merges, msg)))
        goto done;
    /* llama.cpp's defaults when the file is silent: SentencePiece and
     * Llama 3 add BOS. */
    s.add_bos = add_bos >= 0
                    ? add_bos == 1
                    : strcmp(model, "llama") == 0 || (pre && strcmp(pre, "llama-bpe") == 0);
    s.add_eos = add_eos == 1;
    struct gguf_str tmpl;
    rc = gguf_get_str(f, "tokenizer.chat_template", &tmpl, msg);
    if (rc == 0)
        s.chat_template = tmpl;
    else if (rc != -ENOENT)
        goto done;
    if ((rc =
             gguf_strs(f, "tokenizer.inferd.added_text", false, &s.added_text, &n_added_text, msg)))
        goto done;
    if (s.added_text) {
        n_added = n_added_text;
        if ((rc = gguf_arr4(f, "tokenizer.inferd.added_ids", GGUF_VTYPE_INT32, n_added,
                            (void **)&added_ids, msg)) ||
            (rc = gguf_arr4(f, "tokenizer.inferd.added_flags", GGUF_VTYPE_INT32, n_added,
                            (void **)&added_flags, msg)))
            goto done;
        if (!added_ids || !added_flags) {
            rc = err_set(msg, ERR_FORMAT,
                         "tokenizer.inferd.added_text: present without added_ids / added_flags");
            goto done;
        }
        s.n_added = n_added;
        s.added_ids = added_ids;
        s.added_flags = added_flags;
    }
    rc = build(&s, out, msg);
done:
    free(model);
    free(pre);
    free(s.tokens);
    free(s.merges);
    free(s.added_text);
    free(types);
    free(scores);
    free(added_ids);
    free(added_flags);
    free(merge_ids);
    return rc;
}

/* ---- tokenizer.json ---- */

static struct gguf_str view(const char *s)
{
    return (struct gguf_str){s, s ? strlen(s) : 0};
}

int tokenizer_new_hf_loaded(const struct hf_tokenizer *h, struct tokenizer **out,
                            struct err_msg *msg)
{
    *out = NULL;
    struct src s = {
        .model = h->model,
        .pre = h->pre,
        .n = h->n_tokens,
        .types = h->types,
        .scores = h->scores,
        .n_merges = h->n_merges,
        .bos = h->bos_id,
        .eos = h->eos_id,
        .unk = h->unk_id,
        .add_bos = h->add_bos,
        .add_eos = h->add_eos,
        .add_space_prefix = h->add_space_prefix,
        .nfc = h->nfc,
        .ignore_merges = h->ignore_merges,
        .chat_template = view(h->chat_template),
        .n_added = h->n_added,
        .added_ids = h->added_ids,
        .added_flags = h->added_flags,
    };
    s.tokens = xmalloc((size_t)MAX(h->n_tokens, 1) * sizeof(*s.tokens));
    for (int64_t i = 0; i < h->n_tokens; i++)
        s.tokens[i] = view(h->tokens[i]);
    s.merges = xmalloc((size_t)MAX(h->n_merges, 1) * sizeof(*s.merges));
    for (int64_t i = 0; i < h->n_merges; i++)
        s.merges[i] = view(h->merges[i]);
    s.added_text = xmalloc((size_t)MAX(h->n_added, 1) * sizeof(*s.added_text));
    for (int64_t i = 0; i < h->n_added; i++)
        s.added_text[i] = view(h->added_text[i]);
    int rc = build(&s, out, msg);
    free(s.tokens);
    free(s.merges);
    free(s.added_text);
    return rc;
}

int tokenizer_new_hf(const char *dir, struct tokenizer **out, struct err_msg *msg)
{
    *out = NULL;
    struct hf_tokenizer h;
    int rc = hf_tokenizer_load(dir, NULL, &h, msg);
    if (rc) return rc;
    rc = tokenizer_new_hf_loaded(&h, out, msg);
    hf_tokenizer_release(&h);
    return rc;
}

int64_t tokenizer_merge_ids(const struct tokenizer *t, int32_t **out)
{
    int32_t *m = xmalloc((size_t)MAX(t->n_merges, 1) * 3 * sizeof(*m));
    for (int64_t i = 0; i < 3 * t->n_merges; i++)
        m[i] = -1;
    if (t->has_merges)
        for (uint64_t i = 0; i <= t->merges.mask; i++) {
            const struct tokenizer_merge_slot *s = &t->merges.slots[i];
            if (s->key == UINT64_MAX) continue;
            m[3 * s->rank] = (int32_t)(s->key >> 32);
            m[3 * s->rank + 1] = (int32_t)(uint32_t)s->key;
            m[3 * s->rank + 2] = s->result;
        }
    *out = m;
    return t->n_merges;
}

/* ---- accessors ---- */

int32_t tokenizer_n_vocab(const struct tokenizer *t)
{
    return t->n_vocab;
}

int32_t tokenizer_bos(const struct tokenizer *t)
{
    return t->bos;
}

int32_t tokenizer_eos(const struct tokenizer *t)
{
    return t->eos;
}

const char *tokenizer_bos_text(const struct tokenizer *t)
{
    return t->bos >= 0 ? t->text_blob + t->text_off[t->bos] : "";
}

const char *tokenizer_eos_text(const struct tokenizer *t)
{
    return t->eos >= 0 ? t->text_blob + t->text_off[t->eos] : "";
}

bool tokenizer_is_eog(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->attr[id] & TOKENIZER_ATTR_EOG);
}

bool tokenizer_is_special(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->attr[id] & TOKENIZER_ATTR_SPECIAL);
}

const char *tokenizer_chat_template(const struct tokenizer *t)
{
    return t->chat_template;
}

const char *tokenizer_piece(const struct tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->text_blob + t->text_off[id] : NULL;
}

/* ---- encoding ---- */

/* Unicode White_Space at s[0..n): its length, or 0. */
static size_t space_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    size_t l = utf8_next(s, n, &cp);
    if (!l) return 0;
    bool ws = (cp >= 0x09 && cp <= 0x0d) || cp == 0x20 || cp == 0x85 || cp == 0xa0 ||
              cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
              cp == 0x202f || cp == 0x205f || cp == 0x3000;
    return ws ? l : 0;
}

/* Length of the whitespace run ending at s + n. */
static size_t trailing_space(const char *s, size_t n)
{
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && end - start < 4 && ((unsigned char)s[start] & 0xc0) == 0x80)
            start--;
        size_t l = space_len((const unsigned char *)s + start, end - start);
        if (l != end - start) break;
        end = start;
    }
    return n - end;
}

static bool is_word_byte(unsigned char c)
{
    return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') ||
           ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                     struct i32vec *out)
{
    bool special = flags & TOKENIZER_PARSE_SPECIAL;
    if ((flags & TOKENIZER_ADD_SPECIAL) && t->add_bos && t->bos >= 0) i32vec_push(out, t->bos);
    size_t start = 0; /* start of the pending ordinary text */
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        unsigned b = u[i];
        const struct tokenizer_added *hit = NULL;
        for (uint32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
            const struct tokenizer_added *a = &t->added[k];
            if (a->len > len - i || memcmp(t->added_blob + a->off, text + i, a->len) != 0) continue;
            if (!special && t->types[a->id] == TOKENIZER_TYPE_CONTROL) continue;
            if ((a->flags & TOKENIZER_ADDED_SINGLE_WORD) &&
                ((i > 0 && is_word_byte(u[i - 1])) ||
                 (i + a->len < len && is_word_byte(u[i + a->len]))))
                continue;
            hit = a;
            break;
        }
        if (!hit) {
            i++;
            continue;
        }
        size_t end = i;
        if (hit->flags & TOKENIZER_ADDED_LSTRIP) end -= trailing_space(text + start, i - start);
        if (end > start) tokenizer__encode_section(t, text + start, end - start, out);
        i32vec_push(out, hit->id);
        i += hit->len;
        if (hit->flags & TOKENIZER_ADDED_RSTRIP) {
            size_t l;
            while (i < len && (l = space_len(u + i, len - i)))
                i += l;
        }
        start = i;
    }
    if (len > start) tokenizer__encode_section(t, text + start, len - start, out);
    if ((flags & TOKENIZER_ADD_SPECIAL) && t->add_eos && t->eos >= 0) i32vec_push(out, t->eos);
    return 0;
}
