/*
 * vocab.c - a model's tokens as raw byte strings, and a trie over them.
 *
 * Masks walk tokens as bytes through the automaton, so each token needs the
 * exact bytes that detokenizing it produces:
 *
 *   "gpt2" (byte-level BPE, Qwen, Llama 3, DeepSeek): pieces are written in
 *     the GPT-2 byte alphabet - bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for
 *     themselves, the other 68 bytes map in order to U+0100.. ("Ġ" U+0120 is
 *     the space byte 0x20). A piece is decoded character by character back to
 *     bytes. User-defined tokens (type 4) are stored as plain text.
 *   "llama" (SentencePiece): U+2581 "▁" is a space, <0xXX> byte tokens (type
 *     6) are the byte XX, everything else is its UTF-8 text.
 *
 * This must agree with the tokenizer's decode (src/model/tokenizer/): one
 * known difference is that a SentencePiece decoder may drop the leading space
 * of the very first token of a text; masks see the space, which is what the
 * model generated. Token types (tokenizer.ggml.token_type): normal (1),
 * user-defined (4) and byte (6) tokens take part in matching; unknown (2),
 * control (3) and unused (5) never do. A token with no bytes never does.
 *
 * The trie holds the normal tokens sorted by bytes, so a subtree's tokens
 * are a contiguous range of `order` (mask.c walks it once per grammar
 * position). It is built in depth-first preorder, then packed: 32 bytes a
 * node, each node's children numbered contiguously (pack_trie). A second
 * trie holds only the tokens of at least GRAMMAR_REP_CAP characters (the
 * long tokens of a bounded repetition's shared tables, mask.c).
 *
 * Each node also carries a summary of the byte strings below it, so a mask
 * walk can take a whole subtree of plain text in one step (mask.c, "runs"):
 * from which UTF-8 decoding states every string below is well-formed (whole
 * characters, the last one possibly cut short) when decoding starts at the
 * node in that state - a property of the strings below only, so a token
 * that starts with the continuation bytes of a character begun by the
 * previous token qualifies too -, the most characters any of them starts,
 * which ASCII bytes occur below, and whether any non-ASCII byte does.
 *
 * Lifetime: process (one per loaded model); immutable after construction,
 * shared read-only by every thread. Construction may run on any thread, and
 * on several at once for different models.
 */
#include "base/check.h"
#include "gguf/gguf.h"
#include "grammar/grammar_impl.h"

#include <stdlib.h>
#include <string.h>

/* qsort's context: per thread, so that vocabularies of two models can be
 * built at once on different threads. */
static __thread const struct grammar_vocab *sort_vocab;

static int cmp_tok(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const struct grammar_vocab *v = sort_vocab;
    uint64_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], MIN(lx, ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

/* UTF-8 decoding states (enum grammar_u8, grammar_impl.h) follow Unicode
 * table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF. */
enum { U8_INVALID = GRAMMAR_U8_STATES };

static uint8_t u8_next(uint8_t st, unsigned b)
{
    switch (st) {
    case GRAMMAR_U8_BOUNDARY:
        if (b < 0x80) return GRAMMAR_U8_BOUNDARY;
        if (b >= 0xC2 && b <= 0xDF) return GRAMMAR_U8_NEED1;
        if (b == 0xE0) return GRAMMAR_U8_AFTER_E0;
        if (b == 0xED) return GRAMMAR_U8_AFTER_ED;
        if (b >= 0xE1 && b <= 0xEF) return GRAMMAR_U8_NEED2;
        if (b == 0xF0) return GRAMMAR_U8_AFTER_F0;
        if (b >= 0xF1 && b <= 0xF3) return GRAMMAR_U8_NEED3;
        if (b == 0xF4) return GRAMMAR_U8_AFTER_F4;
        return U8_INVALID;
    case GRAMMAR_U8_NEED1:
        return b >= 0x80 && b <= 0xBF ? GRAMMAR_U8_BOUNDARY : U8_INVALID;
    case GRAMMAR_U8_NEED2:
        return b >= 0x80 && b <= 0xBF ? GRAMMAR_U8_NEED1 : U8_INVALID;
    case GRAMMAR_U8_NEED3:
        return b >= 0x80 && b <= 0xBF ? GRAMMAR_U8_NEED2 : U8_INVALID;
    case GRAMMAR_U8_AFTER_E0:
        return b >= 0xA0 && b <= 0xBF ? GRAMMAR_U8_NEED1 : U8_INVALID;
    case GRAMMAR_U8_AFTER_ED:
        return b >= 0x80 && b <= 0x9F ? GRAMMAR_U8_NEED1 : U8_INVALID;
    case GRAMMAR_U8_AFTER_F0:
        return b >= 0x90 && b <= 0xBF ? GRAMMAR_U8_NEED2 : U8_INVALID;
    case GRAMMAR_U8_AFTER_F4:
        return b >= 0x80 && b <= 0x8F ? GRAMMAR_U8_NEED2 : U8_INVALID;
    default:
        return U8_INVALID;
    }
}

/* The trie as first built: nodes in depth-first preorder, so a subtree is
 * the node range [i, end[i]). */
struct pretrie {
    int32_t *parent; /* (n) parent node (-1 for the root 0) */
    uint8_t *byte;   /* (n) byte on the edge from the parent */
    int32_t *end;    /* (n) one past the last node of the subtree */
    int32_t *first;  /* (n) first index into order of the subtree */
    int32_t *last;   /* (n) one past the last index into order of the subtree */
    int32_t *ntok;   /* (n) tokens ending exactly here */
    int n;           /* nodes */
};

/* Computes the per-node summaries (see the header comment) over the
 * preorder trie p and packs it into v->tn, renumbered so that each node's
 * children are contiguous: a node's children get the next free block when
 * the node itself is reached in preorder, which keeps a subtree's blocks
 * close together. Also fills t->ord_starts. */
static void pack_trie(struct grammar_trie *t, const struct pretrie *p)
{
    _Static_assert(sizeof(struct grammar_tnode) == 32, "trie node is not 32 bytes");
    int n = p->n;
    int32_t *starts = xmalloc(sizeof(int32_t) * (size_t)n);     /* characters on the path */
    int32_t *max_starts = xmalloc(sizeof(int32_t) * (size_t)n); /* most in the subtree */
    uint8_t *wf = xmalloc((size_t)n);
    uint64_t(*sub_ascii)[2] = xcalloc((size_t)n, sizeof(*sub_ascii));
    uint8_t *sub_mb = xcalloc((size_t)n, 1);
    starts[0] = 0;
    for (int i = 1; i < n; i++) /* preorder: the parent comes first */
        starts[i] = starts[p->parent[i]] + ((p->byte[i] & 0xC0) != 0x80);
    for (int i = 0; i < n; i++) {
        max_starts[i] = starts[i];
        wf[i] = (uint8_t)((1u << GRAMMAR_U8_STATES) - 1); /* nothing below yet */
    }
    for (int i = n - 1; i > 0; i--) { /* children before their parent */
        int32_t par = p->parent[i];
        unsigned b = p->byte[i];
        if (max_starts[i] > max_starts[par]) max_starts[par] = max_starts[i];
        /* Decoding from state u at the parent stays well-formed through
         * this child's subtree iff its byte is allowed in u and the
         * subtree is well-formed from the state that byte leads to. */
        uint8_t ok = 0;
        for (unsigned u = 0; u < GRAMMAR_U8_STATES; u++) {
            uint8_t nx = u8_next((uint8_t)u, b);
            if (nx != U8_INVALID && (wf[i] >> nx & 1)) ok |= (uint8_t)(1u << u);
        }
        wf[par] &= ok;
        sub_ascii[par][0] |= sub_ascii[i][0];
        sub_ascii[par][1] |= sub_ascii[i][1];
        if (b < 0x80) sub_ascii[par][b >> 6] |= 1ull << (b & 63);
        sub_mb[par] |= sub_mb[i] | (b >= 0x80);
    }
    t->ord_starts = xmalloc(sizeof(int32_t) * (size_t)(t->n_order ? t->n_order : 1));
    for (int i = 0; i < n; i++)
        for (int k = p->first[i]; k < p->first[i] + p->ntok[i]; k++)
            t->ord_starts[k] = starts[i];

    int32_t *id = xmalloc(sizeof(int32_t) * (size_t)n); /* preorder node -> packed node */
    t->tn = xcalloc((size_t)n, sizeof(*t->tn));
    t->n_nodes = n;
    id[0] = 0;
    int next = 1;
    for (int i = 0; i < n; i++) {
        struct grammar_tnode *nd = &t->tn[id[i]];
        int kids = next;
        for (int c = i + 1; c < p->end[i]; c = p->end[c])
            id[c] = next++;
        CHECK(next - kids <= 256);
        nd->kids = next > kids ? kids : 0;
        nd->n_kids = (uint16_t)(next - kids);
        nd->first = p->first[i];
        nd->sub_ascii[0] = sub_ascii[i][0];
        nd->sub_ascii[1] = sub_ascii[i][1];
        nd->chars = (uint16_t)MIN(max_starts[i] - starts[i], UINT16_MAX);
        nd->byte = p->byte[i];
        nd->wf = wf[i];
        nd->sub_mb = sub_mb[i];
        nd->n_here = (uint8_t)MIN(p->ntok[i], UINT8_MAX);
    }
    CHECK(next == n);
    free(id);
    free(starts);
    free(max_starts);
    free(wf);
    free(sub_ascii);
    free(sub_mb);
}

/* Builds trie t over its tokens t->order (sorted by bytes); grows
 * v->max_depth to the longest. */
static void build_trie(struct grammar_trie *t, struct grammar_vocab *v)
{
    /* Nodes: at most one per token byte, plus the root. */
    size_t cap = 1;
    for (int k = 0; k < t->n_order; k++)
        cap += v->off[t->order[k] + 1] - v->off[t->order[k]];
    struct pretrie p = {
        .parent = xmalloc(sizeof(int32_t) * cap),
        .byte = xmalloc(cap),
        .end = xmalloc(sizeof(int32_t) * cap),
        .first = xmalloc(sizeof(int32_t) * cap),
        .last = xmalloc(sizeof(int32_t) * cap),
        .ntok = xcalloc(cap, sizeof(int32_t)),
    };
    p.parent[0] = -1;
    p.byte[0] = 0;
    p.first[0] = 0;
    int n = 1;
    int32_t *path = xmalloc(sizeof(int32_t) * (cap + 1)); /* node at each depth of the path */
    path[0] = 0;
    const char *prev = NULL;
    uint64_t prev_len = 0;
    for (int k = 0; k < t->n_order; k++) {
        int32_t id = t->order[k];
        const char *s = v->bytes + v->off[id];
        uint64_t len = v->off[id + 1] - v->off[id];
        uint64_t common = 0;
        while (prev && common < len && common < prev_len && s[common] == prev[common])
            common++;
        for (uint64_t d = common + 1; d <= len; d++) {
            p.parent[n] = path[d - 1];
            p.byte[n] = (uint8_t)s[d - 1];
            p.first[n] = k;
            path[d] = n++;
        }
        p.ntok[path[len]]++;
        if ((int)len > v->max_depth) v->max_depth = (int)len;
        prev = s;
        prev_len = len;
    }
    free(path);
    p.n = n;
    for (int i = 0; i < n; i++) {
        p.end[i] = i + 1;
        p.last[i] = p.first[i] + p.ntok[i];
    }
    p.last[0] = t->n_order;
    for (int i = n - 1; i > 0; i--) {
        int32_t par = p.parent[i];
        if (p.end[i] > p.end[par]) p.end[par] = p.end[i];
        if (p.last[i] > p.last[par]) p.last[par] = p.last[i];
    }
    pack_trie(t, &p);
    free(p.parent);
    free(p.byte);
    free(p.end);
    free(p.first);
    free(p.last);
    free(p.ntok);
}

struct grammar_vocab *grammar__vocab_build(int n_vocab, char *bytes, uint64_t *off, uint8_t *cls,
                                           const int32_t *eog, int n_eog)
{
    struct grammar_vocab *v = xcalloc(1, sizeof(*v));
    v->n_vocab = n_vocab;
    v->bytes = bytes;
    v->off = off;
    v->cls = cls;
    v->n_eog = n_eog;
    v->eog = xmalloc(sizeof(int32_t) * (size_t)(n_eog ? n_eog : 1));
    if (n_eog) memcpy(v->eog, eog, sizeof(int32_t) * (size_t)n_eog);
    for (int i = 0; i < n_vocab; i++) {
        if (off[i + 1] == off[i]) cls[i] = GRAMMAR_TOKEN_CONTROL;
        for (int k = 0; k < n_eog; k++)
            if (eog[k] == i) cls[i] = GRAMMAR_TOKEN_CONTROL;
    }
    struct grammar_trie *t = &v->trie;
    t->order = xmalloc(sizeof(int32_t) * (size_t)n_vocab);
    for (int i = 0; i < n_vocab; i++)
        if (cls[i] == GRAMMAR_TOKEN_NORMAL) t->order[t->n_order++] = i;
    pthread_mutex_lock(&sort_mu);
    sort_vocab = v;
    qsort(t->order, (size_t)t->n_order, sizeof(int32_t), cmp_tok);
    pthread_mutex_unlock(&sort_mu);

    build_trie(&v->trie, v);
    /* The long tokens, in the same (sorted) order. */
    struct grammar_trie *lt = &v->long_trie;
    lt->order = xmalloc(sizeof(int32_t) * (size_t)(v->trie.n_order ? v->trie.n_order : 1));
    for (int k = 0; k < v->trie.n_order; k++)
        if (v->trie.ord_starts[k] >= GRAMMAR_REP_CAP) lt->order[lt->n_order++] = v->trie.order[k];
    build_trie(lt, v);
    return v;
}

struct grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *bytes, const uint32_t *len,
                                        const uint8_t *cls, const int32_t *eog, int n_eog)
{
    if (n_vocab < 1) return NULL;
    uint64_t *off = xmalloc(sizeof(uint64_t) * ((size_t)n_vocab + 1));
    off[0] = 0;
    for (int i = 0; i < n_vocab; i++)
        off[i + 1] = off[i] + len[i];
    char *all = xmalloc(off[n_vocab] ? off[n_vocab] : 1);
    for (int i = 0; i < n_vocab; i++)
        if (len[i]) memcpy(all + off[i], bytes[i], len[i]);
    uint8_t *c = xmalloc((size_t)n_vocab);
    memcpy(c, cls, (size_t)n_vocab);
    return grammar__vocab_build(n_vocab, all, off, c, eog, n_eog);
}

void grammar_vocab_free(struct grammar_vocab *v)
{
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->cls);
    free(v->eog);
    free(v->trie.order);
    free(v->trie.ord_starts);
    free(v->trie.tn);
    free(v->long_trie.order);
    free(v->long_trie.ord_starts);
    free(v->long_trie.tn);
    free(v);
}

int grammar_vocab_n(const struct grammar_vocab *v)
{
    return v->n_vocab;
}

const char *grammar_vocab_bytes(const struct grammar_vocab *v, int32_t id, uint32_t *len)
{
    CHECK(id >= 0 && id < v->n_vocab);
    if (v->cls[id] != GRAMMAR_TOKEN_NORMAL) {
        *len = 0;
        return NULL;
    }
    *len = (uint32_t)(v->off[id + 1] - v->off[id]);
    return v->bytes + v->off[id];
}

bool grammar_vocab_is_eog(const struct grammar_vocab *v, int32_t id)
{
    for (int k = 0; k < v->n_eog; k++)
        if (v->eog[k] == id) return true;
    return false;
}

/* ---- GGUF ---- */

/* GPT-2 byte alphabet, inverted: code point -> byte, -1 if not in it. */
static int gpt2_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 0x100 || cp >= 0x100 + 68) return -1;
    /* the n-th byte outside the printable set */
    int k = (int)(cp - 0x100);
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (printable) continue;
        if (k-- == 0) return b;
    }
    return -1;
}

/* One character of a vocabulary piece; 0xFFFFFFFF (never a GPT-2 alphabet
 * character) for a malformed one, which then marks the piece as text. */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t len = grammar__utf8_decode(s, n, cp);
    if (len) return len;
    *cp = 0xFFFFFFFFu;
    return 1;
}

int grammar_vocab_from_gguf(const struct gguf_file *f, int n_vocab, const int32_t *eog, int n_eog,
                            struct grammar_vocab **out, struct err_msg *msg)
{
    struct gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, msg);
    if (rc) return rc;
    bool gpt2 = model.len == 4 && memcmp(model.ptr, "gpt2", 4) == 0;
    bool spm = model.len == 5 && memcmp(model.ptr, "llama", 5) == 0;
    if (!gpt2 && !spm)
        return err_set(msg, ERR_UNSUPPORTED,
                       "grammar: tokenizer.ggml.model '%.*s' is not supported (gpt2, llama)",
                       (int)MIN(model.len, 64), model.ptr);
    enum gguf_vtype et;
    uint64_t n;
    if ((rc = gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n, NULL, msg))) return rc;
    if (et != GGUF_VTYPE_STRING || n < (uint64_t)n_vocab)
        return err_set(msg, ERR_FORMAT,
                       "grammar: tokenizer.ggml.tokens must be %d strings (got %llu)", n_vocab,
                       (unsigned long long)n);
    const void *types = NULL;
    uint64_t n_types = 0;
    enum gguf_vtype tt = GGUF_VTYPE_INT32;
    if (gguf_find_key(f, "tokenizer.ggml.token_type") >= 0) {
        if ((rc = gguf_get_arr(f, "tokenizer.ggml.token_type", &tt, &n_types, &types, msg)))
            return rc;
        if (tt != GGUF_VTYPE_INT32 || n_types < (uint64_t)n_vocab)
            return err_set(msg, ERR_FORMAT, "grammar: tokenizer.ggml.token_type must be %d int32",
                           n_vocab);
    }
    int64_t key = gguf_find_key(f, "tokenizer.ggml.tokens");
    uint64_t *off = xmalloc(sizeof(uint64_t) * ((size_t)n_vocab + 1));
    uint8_t *cls = xmalloc((size_t)n_vocab);
    size_t cap = 1 << 20, used = 0;
    char *all = xmalloc(cap);
    for (int i = 0; i < n_vocab; i++) {
        struct gguf_str s = gguf_arr_str_at(f, key, (uint64_t)i);
        int32_t type = 1;
        if (types) memcpy(&type, (const char *)types + 4 * (size_t)i, 4);
        cls[i] =
            (type == 1 || type == 4 || type == 6) ? GRAMMAR_TOKEN_NORMAL : GRAMMAR_TOKEN_CONTROL;
        off[i] = used;
        if (used + s.len + 8 > cap) {
            cap = 2 * (used + s.len + 8);
            all = xrealloc(all, cap);
        }
        const unsigned char *u = (const unsigned char *)s.ptr;
        if (cls[i] != GRAMMAR_TOKEN_NORMAL) continue;
        if (type == 4) {
            memcpy(all + used, s.ptr, s.len);
            used += s.len;
        } else if (spm && type == 6) {
            unsigned v;
            if (s.len == 6 && memcmp(s.ptr, "<0x", 3) == 0 && s.ptr[5] == '>') {
                char hex[3] = {s.ptr[3], s.ptr[4], 0};
                v = (unsigned)strtoul(hex, NULL, 16);
                all[used++] = (char)v;
            } else {
                memcpy(all + used, s.ptr, s.len);
                used += s.len;
            }
        } else if (spm) {
            for (size_t k = 0; k < s.len;) {
                if (k + 3 <= s.len && u[k] == 0xE2 && u[k + 1] == 0x96 && u[k + 2] == 0x81) {
                    all[used++] = ' ';
                    k += 3;
                } else {
                    all[used++] = (char)u[k++];
                }
            }
        } else {
            /* Byte-level: every character maps back to one byte; a piece
             * outside the alphabet is kept as text. */
            size_t start = used;
            bool ok = true;
            for (size_t k = 0; k < s.len;) {
                uint32_t cp;
                k += utf8_next(u + k, s.len - k, &cp);
                int b = cp == 0xFFFFFFFFu ? -1 : gpt2_byte(cp);
                if (b < 0) {
                    ok = false;
                    break;
                }
                all[used++] = (char)b;
            }
            if (!ok) {
                used = start;
                memcpy(all + used, s.ptr, s.len);
                used += s.len;
            }
        }
    }
    off[n_vocab] = used;
    for (int k = 0; k < n_eog; k++)
        if (eog[k] < 0 || eog[k] >= n_vocab) {
            free(all);
            free(off);
            free(cls);
            return err_set(msg, ERR_FORMAT, "grammar: end-of-generation token %d out of range",
                           eog[k]);
        }
    *out = grammar__vocab_build(n_vocab, all, off, cls, eog, n_eog);
    return 0;
}
