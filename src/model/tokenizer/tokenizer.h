/*
 * tokenizer.h - text <-> token ids, exactly as the model's Hugging Face
 * tokenizer does it.
 *
 * Two model kinds, both from the GGUF tokenizer.* metadata (or, for the
 * model maker and tools, straight from a tokenizer.json directory):
 *
 *   "gpt2"   byte-level BPE: added/special tokens matched first, then the
 *            family's pre-tokenizer split regexes (PCRE2 JIT), bytes mapped
 *            to the GPT-2 byte alphabet, merges applied by rank (llama3's
 *            "ignore merges": a whole pre-token that is in the vocab is one
 *            token).
 *   "llama"  SentencePiece-style BPE (Llama 2, Mistral, Gemma): normalizer
 *            (prepend U+2581, spaces -> U+2581), merges by score, byte
 *            fallback to <0xXX> tokens.
 *
 * Encoding never fails on text: invalid UTF-8 is handled as Hugging Face's
 * tokenizers handle it (byte-level models encode the raw bytes).
 * Hugging Face strings cannot hold invalid UTF-8, so the rule for it is
 * ours: bytes that are not valid UTF-8 never match a split regex, so each
 * run of them is a pre-token of its own, encoded byte by byte (SentencePiece:
 * <0xXX> byte fallback); the valid text around them tokenizes as if they
 * were not there.
 *
 * Added tokens (specials and user-defined) are matched on the raw text
 * before anything else, leftmost and longest first, with their lstrip /
 * rstrip / single_word flags. Control tokens match only with
 * TOKENIZER_PARSE_SPECIAL (off by default: user text never injects them);
 * user-defined ones always match. GGUF keeps no record of those flags nor of
 * the NFC normalizer or llama3's ignore_merges, so the model maker stores
 * them in tokenizer.inferd.* keys (model/hf_tokenizer.h) together with the
 * merges resolved to ids; files without these keys load with llama.cpp's
 * defaults (every CONTROL / USER_DEFINED token is an added token, control
 * ones special, no flags; NFC for "qwen2"; ignore_merges for "llama-bpe"
 * and "tekken").
 *
 * Known differences from Hugging Face: none found on the differential tests
 * (tests/diff). By construction: \s in split regexes is Unicode White_Space
 * as in Hugging Face's regex engines (the JavaScript port used as the test
 * oracle differs on U+0085 and U+FEFF, which the tests leave out); character
 * classes follow PCRE2's Unicode tables (14.0 for PCRE2 10.42), so letters
 * added to Unicode later are not letters here; decoding does not apply
 * clean_up_tokenization_spaces (neither does llama.cpp). Not supported:
 * Metaspace's prepend_scheme "first" (a U+2581 is prepended to every
 * section between added tokens, as the Prepend normalizer does), Unigram
 * and WordPiece models; a GGUF "gpt2" file whose pre-tokenizer is missing
 * or "default" gets the GPT-2 split.
 *
 * Decoding: tokenizer_decode turns a whole id sequence into text; the stream
 * API turns one id at a time into text and never emits half a UTF-8
 * character, so concatenating every piece it returns equals decoding the
 * whole sequence at once.
 *
 * Lifetime: a tokenizer is a heap object, immutable after creation; any
 * thread may encode / decode with it concurrently. It copies what it needs
 * from the GGUF file (the file may be closed afterwards).
 */
#ifndef INFERD_MODEL_TOKENIZER_H
#define INFERD_MODEL_TOKENIZER_H

#include "base/buf.h"
#include "base/err.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tokenizer;

/* Flags for tokenizer_encode. */
enum tokenizer_flags {
    TOKENIZER_ADD_SPECIAL = 1 << 0,   /* add BOS/EOS as the model's config says */
    TOKENIZER_PARSE_SPECIAL = 1 << 1, /* special-token text becomes special tokens;
                                         without it, user text cannot inject them */
};

/* Loads from GGUF tokenizer.* keys. ERR_FORMAT / ERR_UNSUPPORTED with a
 * message naming the key on a bad or unknown tokenizer. */
int tokenizer_new_gguf(const struct gguf_file *f, struct tokenizer **out, struct err_msg *msg);

/* Loads from dir/tokenizer.json + dir/tokenizer_config.json. */
int tokenizer_new_hf(const char *dir, struct tokenizer **out, struct err_msg *msg);

/* Builds from an already loaded tokenizer.json (model/hf_tokenizer.h); the
 * model maker uses it to check and resolve what it writes. */
struct hf_tokenizer;
int tokenizer_new_hf_loaded(const struct hf_tokenizer *h, struct tokenizer **out,
                            struct err_msg *msg);

void tokenizer_free(struct tokenizer *t);

/* The merges resolved to token ids, in rank order: (3 * n) int32 left,
 * right, result, or -1 -1 -1 for a merge that can never apply; returns n.
 * *out is heap memory the caller frees. Written by the model maker as
 * tokenizer.inferd.merge_ids, so loading needs no string lookups. */
int64_t tokenizer_merge_ids(const struct tokenizer *t, int32_t **out);

int32_t tokenizer_n_vocab(const struct tokenizer *t);
int32_t tokenizer_bos(const struct tokenizer *t); /* -1 = none */
int32_t tokenizer_eos(const struct tokenizer *t); /* -1 = none */
/* Text of the BOS / EOS token ("" when none), for chat templates. */
const char *tokenizer_bos_text(const struct tokenizer *t);
const char *tokenizer_eos_text(const struct tokenizer *t);
/* True for tokens that end generation (eos, eot, <|im_end|>, <|eot_id|>, ...). */
bool tokenizer_is_eog(const struct tokenizer *t, int32_t id);
/* True for control/special tokens (skipped when decoding with skip_special). */
bool tokenizer_is_special(const struct tokenizer *t, int32_t id);
/* The chat template source from the model, or NULL. */
const char *tokenizer_chat_template(const struct tokenizer *t);
/* The vocabulary entry of id as stored (e.g. "Ġhello", "▁the", "<0x0A>"). */
const char *tokenizer_piece(const struct tokenizer *t, int32_t id);

/* Appends the ids of text[0..len) to out. Returns 0 (text never fails). */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                     struct i32vec *out);

/* Appends the text of ids to out. Ids outside the vocabulary are ERR_INVALID
 * (message names the position). skip_special drops control tokens. */
int tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                     struct buf *out, struct err_msg *msg);

/* Incremental detokenizer: caller-owned state, one per sequence. */
struct tokenizer_stream {
    struct i32vec ids;  /* every id pushed so far */
    size_t n_emitted;   /* bytes of the whole decoded text already returned */
    bool skip_special;  /* as tokenizer_decode */
    struct buf scratch; /* decoding workspace: bytes not yet decidable */
    bool started;       /* a non-empty token was pushed (leading-space rule) */
};

void tokenizer_stream_init(struct tokenizer_stream *s, bool skip_special);
void tokenizer_stream_release(struct tokenizer_stream *s);
/* Pushes one id; appends to out the text that is now complete (possibly
 * nothing). ERR_INVALID for an id outside the vocabulary. */
int tokenizer_stream_push(const struct tokenizer *t, struct tokenizer_stream *s, int32_t id,
                          struct buf *out, struct err_msg *msg);
/* Appends whatever is still held back (an incomplete UTF-8 tail is emitted
 * as U+FFFD, as whole-sequence decoding does). */
void tokenizer_stream_flush(const struct tokenizer *t, struct tokenizer_stream *s, struct buf *out);

#endif
