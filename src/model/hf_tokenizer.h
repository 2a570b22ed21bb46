/*
 * hf_tokenizer.h - imports a Hugging Face tokenizer (tokenizer.json +
 * tokenizer_config.json) into the GGUF tokenizer metadata that llama.cpp's
 * converter (convert_hf_to_gguf.py + gguf-py's SpecialVocab) writes, so files
 * made here load in other GGUF tools and the other way round:
 *
 *   tokenizer.ggml.model          "gpt2" (byte-level BPE) | "llama" (SentencePiece-style
 *                                 BPE with byte fallback, from tokenizer.json)
 *   tokenizer.ggml.pre            pre-tokenizer family: "llama-bpe" | "qwen2" |
 *                                 "deepseek-v3" | "gpt-4o" | "tekken" | "gpt-2" |
 *                                 "default" (llama) | --pre
 *   tokenizer.ggml.tokens         string[n_tokens], id order; holes "[PAD<id>]"
 *   tokenizer.ggml.token_type     int32[n_tokens]: HF_TOKEN_TYPE_*
 *   tokenizer.ggml.scores         float32[n_tokens], "llama" model only
 *   tokenizer.ggml.merges         string[n_merges], "left right"
 *   tokenizer.ggml.{bos,eos,unknown,padding}_token_id   u32, when known
 *   tokenizer.ggml.add_bos_token / add_eos_token        bool
 *   tokenizer.chat_template       string, when the config has one
 *   tokenizer.ggml.add_space_prefix  bool, "llama" model: the normalizer prepends U+2581
 *
 * and, for what GGUF has no key for, inferd's own (readers that do not know
 * them fall back on per-family defaults, see model/tokenizer/tokenizer.c):
 *
 *   tokenizer.inferd.nfc              bool: the normalizer is NFC (Qwen2)
 *   tokenizer.inferd.ignore_merges    bool: model.ignore_merges (Llama 3)
 *   tokenizer.inferd.added_ids        int32[n_added]: added_tokens[].id
 *   tokenizer.inferd.added_flags      int32[n_added]: HF_ADDED_* (special,
 *                                     lstrip, rstrip, normalized, single_word)
 *   tokenizer.inferd.added_text       string[n_added]: added_tokens[].content
 *
 * How each field is derived (the converter's rules, restated):
 *
 * - tokens: model.vocab (token -> id) and added_tokens[] (id, content),
 *   an added token overriding the vocab entry with the same id. The count is
 *   max id + 1, raised to min_tokens if asked (a model's config vocab_size,
 *   which is often padded: Qwen2.5 151936). Ids with no token become
 *   "[PAD<id>]" of type UNUSED.
 * - token_type: NORMAL for vocab tokens; an added token is CONTROL when it is
 *   "special" or merely looks special ("<|...|>", "<｜...｜>", "<pad>",
 *   "<mask>", "<unused...>"), else USER_DEFINED with U+2581 replaced by a
 *   space. "llama" model: "<0xXX>" tokens are BYTE, model.unk_token UNKNOWN.
 *   (The converter also round-trips non-normalized added tokens through the
 *   HF tokenizer; for the tokenizers we ship this is the identity, and we
 *   have no HF tokenizer to run, so that step is skipped.)
 * - merges: strings "a b" are kept; pairs ["a", "b"] (tokenizers >= 0.20)
 *   become "a b" with any space inside a part written as U+0120, as gguf-py
 *   does, so the string form stays unambiguous.
 * - pre: detected from the pre_tokenizer *structure*, not a hash of sample
 *   tokenizations as the converter does: the list of Split regexes followed
 *   by ByteLevel must equal a known family's exactly. Anything else is an
 *   error that says to pass a name explicitly (opts.pre).
 * - special ids: tokenizer_config.json {bos,eos,unk,pad}_token, a string or
 *   an object with "content", resolved against added_tokens (first match),
 *   then against the vocab; config.json's {bos,eos,unk,pad}_token_id (if that
 *   file exists beside them) fill what is still unknown.
 * - add_bos / add_eos: the post_processor (TemplateProcessing: a leading
 *   special token equal to bos -> add_bos, a trailing one equal to eos ->
 *   add_eos; RobertaProcessing -> both), overridden by tokenizer_config's
 *   add_bos_token / add_eos_token booleans. Where neither says, the converter
 *   writes nothing and llama.cpp falls back on a default per pre-tokenizer
 *   (llama-bpe and SentencePiece add BOS, the others do not); we write that
 *   default explicitly, so every reader agrees.
 * - chat_template: tokenizer_config.json "chat_template"; a list of named
 *   templates yields the one named "default".
 * - scores ("llama" model only): a SentencePiece BPE merges the adjacent pair
 *   whose merged piece scores highest, so a piece's score is minus the rank
 *   of the first merge that produces it; pieces no merge produces score below
 *   every merge result. (The converter's tokenizer.json path writes -1000 for
 *   every token, which makes that merge order arbitrary.)
 *
 * Errors name the file and the field: "tokenizer.json: model.vocab: token
 * 'x' has id -3 (expected 0..16777215)". Unsupported tokenizer kinds
 * (Unigram, WordPiece) are ERR_UNSUPPORTED.
 *
 * Lifetime: struct hf_tokenizer is caller-owned; its arrays are heap memory
 * released by hf_tokenizer_release. Thread safety: none needed (one call).
 */
#ifndef INFERD_MODEL_HF_TOKENIZER_H
#define INFERD_MODEL_HF_TOKENIZER_H

#include "base/err.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (llama.cpp). */
enum hf_token_type {
    HF_TOKEN_TYPE_NORMAL = 1,
    HF_TOKEN_TYPE_UNKNOWN = 2,
    HF_TOKEN_TYPE_CONTROL = 3,
    HF_TOKEN_TYPE_USER_DEFINED = 4,
    HF_TOKEN_TYPE_UNUSED = 5,
    HF_TOKEN_TYPE_BYTE = 6,
};

/* Largest token count we accept (ids are checked against it). */
#define HF_TOKENIZER_MAX_TOKENS (1 << 22)

struct hf_tokenizer_opts {
    const char *pre;    /* tokenizer.ggml.pre to write instead of detecting; NULL = detect */
    int64_t min_tokens; /* pad the token list to at least this many; 0 = no padding */
};

struct hf_tokenizer {
    char *model;          /* tokenizer.ggml.model: "gpt2" | "llama" */
    char *pre;            /* tokenizer.ggml.pre */
    int64_t n_tokens;     /* vocabulary size = rows of token_embd */
    char **tokens;        /* (n_tokens) NUL-terminated UTF-8 */
    int32_t *types;       /* (n_tokens) enum hf_token_type */
    float *scores;        /* (n_tokens) for model "llama"; NULL for "gpt2" */
    int64_t n_merges;     /* entries in merges */
    char **merges;        /* (n_merges) "left right" */
    int64_t bos_id;       /* -1 = none */
    int64_t eos_id;       /* -1 = none */
    int64_t unk_id;       /* -1 = none */
    int64_t pad_id;       /* -1 = none */
    bool add_bos;         /* prepend bos when tokenizing a prompt */
    bool add_eos;         /* append eos when tokenizing a prompt */
    char *chat_template;  /* Jinja source; NULL = none */
    int add_space_prefix; /* "llama": normalizer prepends U+2581 (1/0); -1 for "gpt2" */
    int nfc;              /* normalizer is NFC (1/0) */
    int ignore_merges;    /* model.ignore_merges (1/0) */
    int64_t n_added;      /* entries of added_tokens[] */
    int32_t *added_ids;   /* (n_added) their ids */
    int32_t *added_flags; /* (n_added) HF_ADDED_* bits */
    char **added_text;    /* (n_added) their "content", verbatim */
};

/* Flags of an added token (tokenizer.inferd.added_flags). */
enum hf_added_flag {
    HF_ADDED_SPECIAL = 1 << 0,     /* "special" */
    HF_ADDED_LSTRIP = 1 << 1,      /* "lstrip" */
    HF_ADDED_RSTRIP = 1 << 2,      /* "rstrip" */
    HF_ADDED_NORMALIZED = 1 << 3,  /* "normalized" (default: not special) */
    HF_ADDED_SINGLE_WORD = 1 << 4, /* "single_word" */
};

/* Reads dir/tokenizer.json and dir/tokenizer_config.json (both required) and
 * dir/config.json (optional) into *tok. opts may be NULL. On failure returns
 * a negative code (-ENOENT for a missing file, ERR_FORMAT for bad JSON or a
 * bad field, ERR_UNSUPPORTED for a tokenizer kind or pre-tokenizer we do not
 * know), fills msg, and leaves *tok empty (release is still safe). */
int hf_tokenizer_load(const char *dir, const struct hf_tokenizer_opts *opts,
                      struct hf_tokenizer *tok, struct err_msg *msg);

/* Frees everything *tok owns and zeroes it. */
void hf_tokenizer_release(struct hf_tokenizer *tok);

/* Sets the tokenizer.* keys listed above on w (copies everything). */
void hf_tokenizer_to_gguf(const struct hf_tokenizer *tok, struct gguf_writer *w);

/* Index of the token with exactly this text, or -1 (linear scan; tests and
 * tools). */
int64_t hf_tokenizer_find(const struct hf_tokenizer *tok, const char *text);

#endif
