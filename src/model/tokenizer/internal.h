/*
 * internal.h - the tokenizer object, shared by the files of this module only:
 *
 *   tokenizer.c   loading (GGUF keys or a tokenizer.json directory), the
 *                 added-token matcher, encode dispatch, accessors
 *   bpe.c         pre-tokenizer regexes, NFC, byte-level pieces,
 *                 SentencePiece sections, and the one merge engine both use
 *   decode.c      ids -> text, lossy UTF-8, the stream detokenizer
 *
 * Every token has two byte strings in one blob each:
 *
 *   text   the vocabulary entry as stored ("Ġhello", "▁the", "<0x0A>")
 *   bytes  what decoding emits: byte-level entries mapped back through the
 *          GPT-2 byte alphabet, "▁" -> " " for SentencePiece, <0xXX> -> the
 *          byte; added tokens as they are
 *
 * The merge engine works on the model's own key strings: raw bytes for
 * byte-level BPE (so encoding never maps text into the byte alphabet: the
 * vocabulary was mapped back once, at load), the stored text for
 * SentencePiece. Two hash tables make loading and lookups fast: key string ->
 * id (model tokens only, not added tokens), and (left id, right id) -> (rank,
 * merged id).
 *
 * Immutable after load, except whole_ok, a cache of "BPE of this token's
 * own bytes gives back the token" filled lazily with relaxed atomic stores
 * of a value that never changes once computed; so concurrent encoders are
 * safe.
 */
#ifndef INFERD_MODEL_TOKENIZER_INTERNAL_H
#define INFERD_MODEL_TOKENIZER_INTERNAL_H

#include "model/tokenizer/tokenizer.h"

#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

enum tokenizer_kind {
    TOKENIZER_KIND_BPE, /* "gpt2": byte-level BPE */
    TOKENIZER_KIND_SPM, /* "llama": SentencePiece-style BPE with byte fallback */
};

/* Token types, numbered as GGUF's tokenizer.ggml.token_type. */
enum {
    TOKENIZER_TYPE_NORMAL = 1,
    TOKENIZER_TYPE_UNKNOWN = 2,
    TOKENIZER_TYPE_CONTROL = 3,
    TOKENIZER_TYPE_USER_DEFINED = 4,
    TOKENIZER_TYPE_UNUSED = 5,
    TOKENIZER_TYPE_BYTE = 6,
};

/* Flags of an added token (tokenizer.inferd.added_flags), as the
 * tokenizer.json "added_tokens" entry says. */
enum {
    TOKENIZER_ADDED_SPECIAL = 1 << 0,     /* "special": skipped by skip_special */
    TOKENIZER_ADDED_LSTRIP = 1 << 1,      /* eats whitespace on its left */
    TOKENIZER_ADDED_RSTRIP = 1 << 2,      /* eats whitespace on its right */
    TOKENIZER_ADDED_NORMALIZED = 1 << 3,  /* matched against normalized text */
    TOKENIZER_ADDED_SINGLE_WORD = 1 << 4, /* only as a whole word */
};

/* Per-token attribute bits (struct tokenizer.attr). */
enum {
    TOKENIZER_ATTR_SPECIAL = 1 << 0, /* dropped by skip_special */
    TOKENIZER_ATTR_EOG = 1 << 1,     /* ends generation */
    TOKENIZER_ATTR_ADDED = 1 << 2,   /* an added token (matched before splitting) */
};

/* One added token for the matcher. */
struct tokenizer_added {
    int32_t id;     /* token id */
    unsigned flags; /* TOKENIZER_ADDED_* */
    uint32_t off;   /* text to match: offset in added_blob */
    uint32_t len;   /* its length in bytes (> 0) */
};

/* Open-addressing table: key string -> id. */
struct tokenizer_vocab_map {
    uint64_t *slots; /* (mask + 1) (hash tag << 32) | (id + 1); 0 = empty */
    uint64_t mask;   /* slot count - 1 (a power of two minus one) */
};

/* One slot of the merge table. */
struct tokenizer_merge_slot {
    uint64_t key;   /* (left << 32) | right; UINT64_MAX = empty */
    uint32_t rank;  /* merge priority: lower merges first */
    int32_t result; /* id of the merged token */
};

struct tokenizer_merge_map {
    struct tokenizer_merge_slot *slots; /* (mask + 1) */
    uint64_t mask;                      /* slot count - 1 */
};

#define TOKENIZER_MAX_REGEX 4

struct tokenizer {
    enum tokenizer_kind kind; /* byte-level BPE or SentencePiece */
    char *pre;                /* tokenizer.ggml.pre family name */
    int32_t n_vocab;          /* token count */

    char *text_blob;     /* token texts, each NUL-terminated */
    uint32_t *text_off;  /* (n_vocab + 1) token i's text starts at text_off[i] */
    char *key_blob;      /* model key strings (see tokenizer__key), back to back */
    uint32_t *key_off;   /* (n_vocab + 1) token i is key_blob[off[i], off[i+1]) */
    char *bytes_blob;    /* decoded bytes of every token, back to back */
    uint32_t *bytes_off; /* (n_vocab + 1) token i is bytes_blob[off[i], off[i+1]) */
    int32_t *types;      /* (n_vocab) TOKENIZER_TYPE_* */
    uint8_t *attr;       /* (n_vocab) TOKENIZER_ATTR_* */

    struct tokenizer_vocab_map vocab;  /* model key string -> id (added tokens excluded) */
    struct tokenizer_merge_map merges; /* (left, right) -> rank, merged id */
    bool has_merges;                   /* false: SentencePiece merging by score */
    int64_t n_merges;                  /* merge ranks 0..n_merges-1 */
    uint32_t *score_rank;              /* (n_vocab) without merges: rank by score, else NULL */
    int32_t byte_id[256];              /* token of a single raw byte (<0xXX> for SPM); -1 */
    uint8_t *whole_ok;                 /* (n_vocab) 0 unknown, 1 BPE(token) == token, 2 not */

    int n_regex;                            /* pre-tokenizer Split steps, applied in order */
    pcre2_code *regex[TOKENIZER_MAX_REGEX]; /* (n_regex) JIT-compiled */
    bool nfc;                               /* NFC-normalize text before splitting (Qwen2) */
    bool ignore_merges;                     /* a pre-token in the vocab is one token (Llama 3) */
    bool add_space_prefix;                  /* SPM: prepend U+2581; decode strips one space */
    bool byte_fallback;                     /* SPM: unknown characters become <0xXX> tokens */

    struct tokenizer_added *added; /* (n_added) sorted by first byte, then longest first */
    int n_added;                   /* added tokens */
    char *added_blob;              /* their match texts */
    uint32_t added_first[257];     /* added[added_first[b] .. added_first[b+1]) start with b */

    int32_t bos;         /* -1 = none */
    int32_t eos;         /* -1 = none */
    int32_t unk;         /* -1 = none */
    bool add_bos;        /* TOKENIZER_ADD_SPECIAL prepends bos */
    bool add_eos;        /* TOKENIZER_ADD_SPECIAL appends eos */
    char *chat_template; /* NULL = none */
};

/* Key string -> id in the model vocabulary, or -1. */
int32_t tokenizer__lookup(const struct tokenizer *t, const char *s, size_t n);

/* Compiles the family's split regexes into t (ERR_UNSUPPORTED for an
 * unknown family name). */
int tokenizer__setup_pre(struct tokenizer *t, struct err_msg *msg);

/* Encodes one stretch of text without added tokens. */
void tokenizer__encode_section(const struct tokenizer *t, const char *s, size_t n,
                               struct i32vec *out);

/* The key string of a token: raw bytes for BPE, the text for SPM (with
 * the spaces of user-defined tokens written back as U+2581). */
static inline const char *tokenizer__key(const struct tokenizer *t, int32_t id, size_t *len)
{
    *len = t->key_off[id + 1] - t->key_off[id];
    return t->key_blob + t->key_off[id];
}

#endif
