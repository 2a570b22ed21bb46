/*
 * fuzz_tokenizer.c - fuzz target for model/tokenizer: text from a request is
 * untrusted input of encode, and the ids a model emits are input of decode.
 *
 * Tokenizers are built in-process once, from a small synthetic vocabulary
 * written as a GGUF file (no large binaries in the corpus): the 256 byte
 * tokens, a few dozen merges (ASCII words, a space prefix, multi-byte UTF-8
 * pieces), and added tokens (a control token, a user-defined one with
 * lstrip/rstrip, a single-word one), under every byte-level pre-tokenizer
 * family; plus two SentencePiece ones (merges by rank, and by score with
 * byte fallback).
 *
 * Input: byte 0 picks the tokenizer and the flags; the rest is the text.
 * Checks (abort on failure): every id is in the vocabulary; decoding
 * succeeds; stream decoding equals whole decoding, with and without
 * skip_special; for byte-level tokenizers without a normalizer or stripping
 * tokens, decode(encode(text)) equals the lossy decoding of the text's own
 * bytes.
 */
#include "base/buf.h"
#include "gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const families[] = {"gpt-4o",      "llama-bpe", "qwen2",
                                       "deepseek-v3", "gpt-2",     "tekken"};
#define N_BPE (int)(sizeof(families) / sizeof(families[0]))
#define N_TOK (2 * N_BPE + 2)

static struct tokenizer *toks[N_TOK];
static bool plain[N_TOK]; /* byte-level, no NFC, no stripping tokens: round trips */

/* GPT-2 byte alphabet. */
static unsigned byte_cp(unsigned b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) n++;
    return 256 + n;
}

/* Appends the byte-level spelling of raw bytes s. */
static void spell(struct buf *o, const char *s)
{
    for (; *s; s++) {
        unsigned cp = byte_cp((unsigned char)*s);
        if (cp < 0x80) {
            buf_putc(o, (char)cp);
        } else {
            buf_putc(o, (char)(0xc0 | cp >> 6));
            buf_putc(o, (char)(0x80 | (cp & 0x3f)));
        }
    }
}

/* Raw-byte merges "left right"; each adds the token left+right. */
static const char *const raw_merges[][2] = {
    {"t", "h"},           {"th", "e"},      {" ", "t"},           {" t", "he"},
    {"i", "n"},           {"in", "g"},      {" ", "a"},           {"a", "n"},
    {"an", "d"},          {" a", "nd"},     {"e", "r"},           {"o", "n"},
    {" ", "o"},           {" o", "n"},      {"\n", "\n"},         {" ", " "},
    {"  ", "  "},         {"1", "2"},       {"12", "3"},          {"\xe4", "\xb8"},
    {"\xe4\xb8", "\xad"}, {"\xe6", "\x96"}, {"\xe6\x96", "\x87"}, {"\xf0", "\x9f"},
    {"<", "|"},           {"|", ">"},       {"e", "\xcc"},        {"e\xcc", "\x81"},
    {"\xc3", "\xa9"},
};

static struct tokenizer *load(struct gguf_writer *w)
{
    char path[64];
    snprintf(path, sizeof(path), "/tmp/inferd-fuzz-tok-%d.gguf", (int)getpid());
    struct err_msg msg;
    struct gguf_file *f;
    struct tokenizer *t = NULL;
    if (gguf_writer_write(w, path, &msg) || gguf_open(path, &f, &msg)) abort();
    if (tokenizer_new_gguf(f, &t, &msg)) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", msg.text);
        abort();
    }
    gguf_close(f);
    unlink(path);
    gguf_writer_free(w);
    return t;
}

static void build_bpe(void)
{
    enum { N_MERGES = sizeof(raw_merges) / sizeof(raw_merges[0]) };
    struct buf text[256 + N_MERGES + 3] = {{0}};
    const char *tok[256 + N_MERGES + 3], *merge[N_MERGES];
    struct buf mbuf[N_MERGES] = {{0}};
    int32_t type[256 + N_MERGES + 3];
    int n = 0;
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        if (b == 0) {
            buf_puts(&text[n], "\xc4\x80"); /* byte 0 spells U+0100 */
        } else {
            spell(&text[n], s);
        }
        type[n++] = 1;
    }
    for (int m = 0; m < N_MERGES; m++) {
        spell(&mbuf[m], raw_merges[m][0]);
        buf_putc(&mbuf[m], ' ');
        spell(&mbuf[m], raw_merges[m][1]);
        merge[m] = buf_str(&mbuf[m]);
        spell(&text[n], raw_merges[m][0]);
        spell(&text[n], raw_merges[m][1]);
        type[n++] = 1;
    }
    int end = n, tool = n + 1, word = n + 2;
    buf_puts(&text[n], "<|im_end|>"), type[n++] = 3;
    buf_puts(&text[n], "<tool>"), type[n++] = 4;
    buf_puts(&text[n], "zz"), type[n++] = 4;
    for (int i = 0; i < n; i++)
        tok[i] = buf_str(&text[i]);
    int32_t ids[3] = {end, tool, word}, flags[3] = {1, 2 | 4 | 8, 16};
    const char *added[3] = {"<|im_end|>", "<tool>", "zz"};
    for (int f = 0; f < N_BPE; f++) {
        for (int variant = 0; variant < 2; variant++) {
            struct gguf_writer *w = gguf_writer_new();
            gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
            gguf_writer_set_str(w, "tokenizer.ggml.pre", families[f]);
            gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
            gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)n);
            gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merge, N_MERGES);
            gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)end);
            if (variant == 0) {
                /* With flags: stripping and single-word tokens. */
                gguf_writer_set_arr_i32(w, "tokenizer.inferd.added_ids", ids, 3);
                gguf_writer_set_arr_i32(w, "tokenizer.inferd.added_flags", flags, 3);
                gguf_writer_set_arr_str(w, "tokenizer.inferd.added_text", added, 3);
                toks[f] = load(w);
            } else {
                toks[f + N_BPE] = load(w);
            }
        }
    }
    for (int i = 0; i < n; i++)
        buf_release(&text[i]);
    for (int m = 0; m < N_MERGES; m++)
        buf_release(&mbuf[m]);
}

static void build_spm(int slot, bool with_merges)
{
    static const char *const pieces[] = {
        "\xe2\x96\x81",    "t", "h",           "e", "\xe2\x96\x81t", "th", "the",
        "\xe2\x96\x81the", "a", "\xe4\xb8\xad"};
    static const char *const merges[] = {"t h", "th e", "\xe2\x96\x81 t", "\xe2\x96\x81 the"};
    const char *tok[300];
    int32_t type[300];
    float score[300];
    struct buf names[256] = {{0}};
    int n = 0;
    tok[n] = "<unk>", type[n] = 2, score[n++] = 0;
    tok[n] = "<s>", type[n] = 3, score[n++] = 0;
    tok[n] = "</s>", type[n] = 3, score[n++] = 0;
    for (int b = 0; b < 256; b++) {
        buf_printf(&names[b], "<0x%02X>", b);
        tok[n] = buf_str(&names[b]), type[n] = 6, score[n++] = 0;
    }
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++)
        tok[n] = pieces[i], type[n] = 1, score[n++] = -(float)(i % 4);
    tok[n] = "<|im_end|>", type[n] = 3, score[n++] = 0;
    tok[n] = "\xe2\x96\x81\xe2\x96\x81", type[n] = 4, score[n++] = 0;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", type, (uint64_t)n);
    gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", score, (uint64_t)n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (with_merges) gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 4);
    toks[slot] = load(w);
    for (int b = 0; b < 256; b++)
        buf_release(&names[b]);
}

static void init(void)
{
    build_bpe();
    build_spm(N_TOK - 2, true);
    build_spm(N_TOK - 1, false);
    for (int i = N_BPE; i < 2 * N_BPE; i++)
        plain[i] = strcmp(families[i - N_BPE], "qwen2") != 0;
}

static void check_stream(const struct tokenizer *t, const struct i32vec *ids, bool skip)
{
    struct buf whole = {0}, streamed = {0};
    struct err_msg msg;
    if (tokenizer_decode(t, ids->v, ids->n, skip, &whole, &msg)) abort();
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, skip);
    for (size_t i = 0; i < ids->n; i++)
        if (tokenizer_stream_push(t, &s, ids->v[i], &streamed, &msg)) abort();
    tokenizer_stream_flush(t, &s, &streamed);
    tokenizer_stream_release(&s);
    if (whole.len != streamed.len || memcmp(buf_str(&whole), buf_str(&streamed), whole.len))
        abort();
    buf_release(&whole);
    buf_release(&streamed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!toks[0]) init();
    if (size == 0) return 0;
    int which = data[0] % N_TOK;
    unsigned flags = (data[0] / N_TOK) & 3u;
    const struct tokenizer *t = toks[which];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    struct i32vec ids = {0};
    tokenizer_encode(t, text, len, flags, &ids);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.v[i] < 0 || ids.v[i] >= tokenizer_n_vocab(t)) abort();
    check_stream(t, &ids, false);
    check_stream(t, &ids, true);

    if (plain[which] && !(flags & TOKENIZER_ADD_SPECIAL)) {
        /* Byte ids are the byte values in this vocabulary. */
        struct i32vec raw = {0};
        for (size_t i = 0; i < len; i++)
            i32vec_push(&raw, (unsigned char)text[i]);
        struct buf a = {0}, b = {0};
        struct err_msg msg;
        if (tokenizer_decode(t, ids.v, ids.n, false, &a, &msg) ||
            tokenizer_decode(t, raw.v, raw.n, false, &b, &msg))
            abort();
        if (a.len != b.len || memcmp(buf_str(&a), buf_str(&b), a.len)) abort();
        buf_release(&a);
        buf_release(&b);
        i32vec_release(&raw);
    }
    i32vec_release(&ids);
    return 0;
}
