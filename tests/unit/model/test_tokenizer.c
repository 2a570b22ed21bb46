/*
 * test_tokenizer.c - model/tokenizer on small synthetic vocabularies written
 * as GGUF files: merge order, ignore_merges, added tokens and their flags,
 * the parse_special switch, files without inferd's keys, invalid UTF-8,
 * bad ids, bad files.
 *
 * The byte-level vocabulary is the 256 byte tokens (id = byte value, spelled
 * in the GPT-2 byte alphabet, derived here independently of the library)
 * followed by a few merges' results and added tokens.
 */
#include "test.h"

#include "base/check.h"
#include "gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

#include <unistd.h>

/* ---- building vocabularies ---- */

/* GPT-2's bytes_to_unicode: the code point standing for byte b. */
static unsigned byte_cp(unsigned b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff))) n++;
    return 256 + n;
}

static void put_cp(char **o, unsigned cp)
{
    if (cp < 0x80) {
        *(*o)++ = (char)cp;
    } else {
        *(*o)++ = (char)(0xc0 | cp >> 6);
        *(*o)++ = (char)(0x80 | (cp & 0x3f));
    }
}

#define MAX_TOK 512

struct vocab {
    int n;                  /* tokens */
    char *tok[MAX_TOK];     /* (n) texts */
    int32_t type[MAX_TOK];  /* (n) GGUF token types */
    int n_merges;           /* merges */
    char *merge[MAX_TOK];   /* (n_merges) "a b" */
    int n_added;            /* entries of the inferd added keys; -1 = omit the keys */
    int32_t added_id[16];   /* (n_added) */
    int32_t added_flag[16]; /* (n_added) */
};

static int add(struct vocab *v, const char *text, int32_t type)
{
    v->tok[v->n] = xstrdup(text);
    v->type[v->n] = type;
    return v->n++;
}

/* Byte-level: 256 byte tokens, then merges (each "a b" adds token "ab"). */
static void bytelevel(struct vocab *v, const char *const *merges, int n_merges)
{
    memset(v, 0, sizeof(*v));
    v->n_added = -1;
    for (unsigned b = 0; b < 256; b++) {
        char s[4], *o = s;
        put_cp(&o, byte_cp(b));
        *o = 0;
        add(v, s, 1);
    }
    for (int i = 0; i < n_merges; i++) {
        v->merge[v->n_merges++] = xstrdup(merges[i]);
        char joined[64], *o = joined;
        for (const char *p = merges[i]; *p; p++)
            if (*p != ' ') *o++ = *p;
        *o = 0;
        add(v, joined, 1);
    }
}

static void vocab_free(struct vocab *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->tok[i]);
    for (int i = 0; i < v->n_merges; i++)
        free(v->merge[i]);
}

static char last_error[1024]; /* message of the last failed load */

/* Writes v as GGUF tokenizer keys and loads it back. */
static struct tokenizer *load(const struct vocab *v, const char *model, const char *pre, int bos,
                              int eos, bool add_bos)
{
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    if (pre) gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok,
                            (uint64_t)v->n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v->type, (uint64_t)v->n);
    if (v->n_merges)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merge,
                                (uint64_t)v->n_merges);
    if (bos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
    if (v->n_added >= 0) {
        const char *text[16];
        for (int i = 0; i < v->n_added; i++)
            text[i] = v->tok[v->added_id[i]];
        gguf_writer_set_arr_i32(w, "tokenizer.inferd.added_ids", v->added_id, (uint64_t)v->n_added);
        gguf_writer_set_arr_i32(w, "tokenizer.inferd.added_flags", v->added_flag,
                                (uint64_t)v->n_added);
        gguf_writer_set_arr_str(w, "tokenizer.inferd.added_text", text, (uint64_t)v->n_added);
    }
    char path[] = "/tmp/inferd_test_tok_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct err_msg msg;
    struct gguf_file *f = NULL;
    struct tokenizer *t = NULL;
    int rc = gguf_writer_write(w, path, &msg);
    if (rc == 0) rc = gguf_open(path, &f, &msg);
    if (rc == 0) rc = tokenizer_new_gguf(f, &t, &msg);
    if (rc) snprintf(last_error, sizeof(last_error), "%s", msg.text);
    if (f) gguf_close(f);
    unlink(path);
    gguf_writer_free(w);
    return t;
}

/* Encodes text and compares with the expected ids (terminated by -1). */
static bool enc_is(const struct tokenizer *t, const char *text, size_t len, unsigned flags,
                   const int32_t *want)
{
    struct i32vec ids = {0};
    tokenizer_encode(t, text, len, flags, &ids);
    size_t n = 0;
    while (want[n] >= 0)
        n++;
    bool same = ids.n == n && (n == 0 || memcmp(ids.v, want, n * sizeof(*want)) == 0);
    if (!same) {
        fprintf(stderr, "  encode '%.*s': got", (int)len, text);
        for (size_t i = 0; i < ids.n; i++)
            fprintf(stderr, " %d", ids.v[i]);
        fprintf(stderr, "\n");
    }
    i32vec_release(&ids);
    return same;
}

#define ENC(t, s, flags, ...)                                                                      \
    EXPECT(enc_is((t), (s), sizeof(s) - 1, (flags), (const int32_t[]){__VA_ARGS__, -1}))

static const char *const merges[] = {
    "h e",          "l l", "he ll",          "hell o", "\xc4\xa0 w", "o r",
    "\xc4\xa0w or", "l d", "\xc4\xa0wor ld", "a a",    "x y",
};
enum { HE = 256, LL, HELL, HELLO, G_W, OR, G_WOR, LD, G_WORLD, AA, XY };

/* ---- byte-level BPE ---- */

TEST(merges_by_rank)
{
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    EXPECT(t != NULL);
    if (!t) {
        fprintf(stderr, "  %s\n", last_error);
        return;
    }
    ENC(t, "hello world", 0, HELLO, G_WORLD);
    /* Equal ranks: leftmost first. */
    ENC(t, "aaa", 0, AA, 'a');
    ENC(t, "aaaa", 0, AA, AA);
    /* No merge for "lo": the rest stays bytes. */
    ENC(t, "lo", 0, 'l', 'o');
    EXPECT(enc_is(t, "", 0, 0, (const int32_t[]){-1}));
    EXPECT_EQ_INT(tokenizer_n_vocab(t), v.n);
    EXPECT(strcmp(tokenizer_piece(t, G_WORLD), "\xc4\xa0world") == 0);
    EXPECT(tokenizer_piece(t, -1) == NULL && tokenizer_piece(t, v.n) == NULL);
    tokenizer_free(t);
    vocab_free(&v);
}

TEST(whole_piece_and_ignore_merges)
{
    /* "xyz" is a token no merge reaches: BPE gives "xy" "z"; with
     * ignore_merges (llama-bpe) the whole piece is one token. */
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    int xyz = add(&v, "xyz", 1);
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    ENC(t, "xyz", 0, XY, 'z');
    ENC(t, "xyz", 0, XY, 'z'); /* second time through the whole-piece cache */
    tokenizer_free(t);
    t = load(&v, "gpt2", "llama-bpe", -1, -1, false);
    ENC(t, "xyz", 0, xyz);
    tokenizer_free(t);
    vocab_free(&v);
}

TEST(invalid_utf8_is_bytes)
{
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    /* Invalid bytes are pieces of their own; the text around splits as if
     * they were not there. */
    ENC(t, "hello\xff world", 0, HELLO, 0xff, G_WORLD);
    ENC(t, "\xe4\xb8", 0, 0xe4, 0xb8);
    ENC(t, "he\xc0\xafll", 0, HE, 0xc0, 0xaf, LL);
    struct buf out = {0};
    struct err_msg msg;
    int32_t ids[] = {0xe4, 0xb8, 'a', 0xff};
    EXPECT_EQ_INT(tokenizer_decode(t, ids, 4, false, &out, &msg), 0);
    EXPECT(strcmp(buf_str(&out), "\xef\xbf\xbd"
                                 "a\xef\xbf\xbd") == 0);
    buf_release(&out);
    tokenizer_free(t);
    vocab_free(&v);
}

TEST(long_runs)
{
    /* Past the small-piece limit the heap merger takes over; both must give
     * the same pairs: 301 "a"s -> 150 "aa" and one "a". */
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    char text[302];
    memset(text, 'a', 301);
    text[301] = 0;
    struct i32vec ids = {0};
    tokenizer_encode(t, text, 301, 0, &ids);
    EXPECT_EQ_INT(ids.n, 151);
    bool ok = true;
    for (size_t i = 0; i + 1 < ids.n; i++)
        ok = ok && ids.v[i] == AA;
    EXPECT(ok && ids.v[150] == 'a');
    i32vec_release(&ids);
    tokenizer_free(t);
    vocab_free(&v);
}

/* ---- added tokens ---- */

TEST(special_tokens_need_parse_special)
{
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    int end = add(&v, "<|im_end|>", 3), tool = add(&v, "<tool>", 4), bos = add(&v, "<s>", 3);
    /* No inferd keys: llama.cpp's defaults (control = special). */
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", bos, end, true);
    ENC(t, "hello<|im_end|>", TOKENIZER_PARSE_SPECIAL, HELLO, end);
    /* Without the switch the text is ordinary text. */
    struct i32vec ids = {0};
    tokenizer_encode(t, "hello<|im_end|>", 15, 0, &ids);
    bool found = false;
    for (size_t i = 0; i < ids.n; i++)
        found = found || ids.v[i] == end;
    EXPECT(!found && ids.n > 2);
    i32vec_release(&ids);
    /* User-defined tokens are vocabulary: always matched. */
    ENC(t, "hello<tool>", 0, HELLO, tool);
    /* BOS added on request; EOS is not (add_eos false). */
    ENC(t, "hello", TOKENIZER_ADD_SPECIAL, bos, HELLO);
    EXPECT(tokenizer_is_special(t, end) && !tokenizer_is_special(t, tool));
    EXPECT(tokenizer_is_eog(t, end) && !tokenizer_is_eog(t, HELLO));
    EXPECT_EQ_INT(tokenizer_bos(t), bos);
    EXPECT(strcmp(tokenizer_bos_text(t), "<s>") == 0);
    EXPECT(strcmp(tokenizer_eos_text(t), "<|im_end|>") == 0);
    /* Leftmost, longest: "<tool>" inside "<<tool>>". */
    ENC(t, "<<tool>>", 0, '<', tool, '>');
    tokenizer_free(t);
    vocab_free(&v);
}

TEST(added_token_flags)
{
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    int strip = add(&v, "<tool>", 4), word = add(&v, "zz", 4), eot = add(&v, "<|eot_id|>", 3);
    v.n_added = 3;
    v.added_id[0] = strip, v.added_flag[0] = 2 | 4; /* lstrip | rstrip */
    v.added_id[1] = word, v.added_flag[1] = 16;     /* single_word */
    v.added_id[2] = eot, v.added_flag[2] = 1;       /* special */
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    ENC(t, "a  <tool>\n b", 0, 'a', strip, 'b');
    ENC(t, "a zz b", 0, 'a', ' ', word, ' ', 'b');
    /* Inside a word "zz" is not the added token. */
    struct i32vec ids = {0};
    tokenizer_encode(t, "azzb", 4, 0, &ids);
    EXPECT_EQ_INT(ids.n, 4);
    i32vec_release(&ids);
    EXPECT(tokenizer_is_special(t, eot) && tokenizer_is_eog(t, eot));
    EXPECT(!tokenizer_is_special(t, strip));
    /* skip_special drops special tokens when decoding. */
    struct buf out = {0};
    struct err_msg msg;
    int32_t seq[] = {HELLO, eot, G_WORLD};
    tokenizer_decode(t, seq, 3, true, &out, &msg);
    EXPECT(strcmp(buf_str(&out), "hello world") == 0);
    buf_clear(&out);
    tokenizer_decode(t, seq, 3, false, &out, &msg);
    EXPECT(strcmp(buf_str(&out), "hello<|eot_id|> world") == 0);
    buf_release(&out);
    tokenizer_free(t);
    vocab_free(&v);
}

/* ---- decoding errors ---- */

TEST(bad_ids)
{
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    struct buf out = {0};
    struct err_msg msg;
    int32_t ids[] = {HELLO, v.n, 3};
    EXPECT_EQ_INT(tokenizer_decode(t, ids, 3, false, &out, &msg), ERR_INVALID);
    EXPECT(strstr(msg.text, "token 1") != NULL);
    int32_t neg = -5;
    EXPECT_EQ_INT(tokenizer_decode(t, &neg, 1, false, &out, &msg), ERR_INVALID);
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, false);
    EXPECT_EQ_INT(tokenizer_stream_push(t, &s, HELLO, &out, &msg), 0);
    EXPECT_EQ_INT(tokenizer_stream_push(t, &s, 1 << 30, &out, &msg), ERR_INVALID);
    EXPECT(!tokenizer_is_eog(t, -1) && !tokenizer_is_special(t, 1 << 30));
    tokenizer_stream_release(&s);
    buf_release(&out);
    tokenizer_free(t);
    vocab_free(&v);
}

TEST(stream_holds_partial_characters)
{
    struct vocab v;
    bytelevel(&v, merges, (int)ARRAY_LEN(merges));
    struct tokenizer *t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, false);
    struct buf out = {0};
    struct err_msg msg;
    /* U+4E2D in three byte tokens: nothing until the last one. */
    tokenizer_stream_push(t, &s, 0xe4, &out, &msg);
    tokenizer_stream_push(t, &s, 0xb8, &out, &msg);
    EXPECT_EQ_INT(out.len, 0);
    tokenizer_stream_push(t, &s, 0xad, &out, &msg);
    EXPECT(strcmp(buf_str(&out), "\xe4\xb8\xad") == 0);
    /* An incomplete tail is U+FFFD at flush, as whole decoding gives. */
    tokenizer_stream_push(t, &s, 0xf0, &out, &msg);
    tokenizer_stream_push(t, &s, 0x9f, &out, &msg);
    EXPECT_EQ_INT(out.len, 3);
    tokenizer_stream_flush(t, &s, &out);
    EXPECT(strcmp(buf_str(&out), "\xe4\xb8\xad\xef\xbf\xbd") == 0);
    /* A byte that cannot continue is decided at once. */
    buf_clear(&out);
    tokenizer_stream_push(t, &s, 0xe4, &out, &msg);
    tokenizer_stream_push(t, &s, 'a', &out, &msg);
    EXPECT(strcmp(buf_str(&out), "\xef\xbf\xbd"
                                 "a") == 0);
    tokenizer_stream_release(&s);
    buf_release(&out);
    tokenizer_free(t);
    vocab_free(&v);
}

/* ---- SentencePiece ---- */

TEST(sentencepiece_by_score)
{
    /* No merges: pairs merge by the score of the merged piece; unknown
     * characters fall back to <0xXX>; one leading space is added and
     * stripped again when decoding. */
    struct vocab v;
    memset(&v, 0, sizeof(v));
    v.n_added = -1;
    add(&v, "<unk>", 2);
    int bos = add(&v, "<s>", 3), eos = add(&v, "</s>", 3);
    int byte0 = v.n;
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof(s), "<0x%02X>", b);
        add(&v, s, 6);
    }
    int sp = add(&v, "\xe2\x96\x81", 1), h = add(&v, "h", 1), i_ = add(&v, "i", 1);
    int hi = add(&v, "hi", 1), sphi = add(&v, "\xe2\x96\x81hi", 1);
    float scores[MAX_TOK] = {0};
    scores[hi] = -1, scores[sphi] = -2, scores[sp] = -10, scores[h] = -10, scores[i_] = -10;
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tok, (uint64_t)v.n);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", v.type, (uint64_t)v.n);
    gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", scores, (uint64_t)v.n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    char path[] = "/tmp/inferd_test_tok_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    struct err_msg msg;
    struct gguf_file *f;
    struct tokenizer *t = NULL;
    EXPECT_EQ_INT(gguf_writer_write(w, path, &msg), 0);
    EXPECT_EQ_INT(gguf_open(path, &f, &msg), 0);
    EXPECT_EQ_INT(tokenizer_new_gguf(f, &t, &msg), 0);
    gguf_close(f);
    unlink(path);
    gguf_writer_free(w);
    if (!t) return;
    /* "hi hi": "▁hi" "▁hi"; BOS by default (llama.cpp's rule for llama). */
    ENC(t, "hi hi", TOKENIZER_ADD_SPECIAL, bos, sphi, sphi);
    /* "é" is not a piece: its two bytes. */
    ENC(t, "\xc3\xa9", 0, sp, byte0 + 0xc3, byte0 + 0xa9);
    struct buf out = {0};
    int32_t seq[] = {bos, sphi, byte0 + 0xc3, byte0 + 0xa9, sphi};
    EXPECT_EQ_INT(tokenizer_decode(t, seq, 5, true, &out, &msg), 0);
    EXPECT(strcmp(buf_str(&out), "hi\xc3\xa9 hi") == 0);
    /* The stream strips the same leading space. */
    struct tokenizer_stream s;
    tokenizer_stream_init(&s, true);
    struct buf streamed = {0};
    for (int k = 0; k < 5; k++)
        tokenizer_stream_push(t, &s, seq[k], &streamed, &msg);
    tokenizer_stream_flush(t, &s, &streamed);
    EXPECT(strcmp(buf_str(&streamed), buf_str(&out)) == 0);
    tokenizer_stream_release(&s);
    buf_release(&streamed);
    buf_release(&out);
    EXPECT(tokenizer_is_eog(t, eos) && tokenizer_is_special(t, bos));
    tokenizer_free(t);
    vocab_free(&v);
}

/* ---- bad files ---- */

TEST(bad_files)
{
    struct vocab v;
    bytelevel(&v, merges, 2);
    struct tokenizer *t = load(&v, "wordpiece", "gpt-4o", -1, -1, false);
    EXPECT(t == NULL && strstr(last_error, "tokenizer.ggml.model"));
    t = load(&v, "gpt2", "no-such-family", -1, -1, false);
    EXPECT(t == NULL && strstr(last_error, "tokenizer.ggml.pre"));
    t = load(&v, "gpt2", "gpt-4o", v.n + 5, -1, false); /* bos out of range */
    EXPECT(t == NULL && strstr(last_error, "bos_token_id"));
    v.type[3] = 42;
    t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    EXPECT(t == NULL && strstr(last_error, "token_type[3]"));
    v.type[3] = 1;
    free(v.merge[0]);
    v.merge[0] = xstrdup("nospace");
    t = load(&v, "gpt2", "gpt-4o", -1, -1, false);
    EXPECT(t == NULL && strstr(last_error, "merges[0]"));
    vocab_free(&v);
    /* A GGUF file with no tokenizer at all. */
    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    char path[] = "/tmp/inferd_test_tok_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    struct err_msg msg;
    struct gguf_file *f;
    EXPECT_EQ_INT(gguf_writer_write(w, path, &msg), 0);
    EXPECT_EQ_INT(gguf_open(path, &f, &msg), 0);
    EXPECT_EQ_INT(tokenizer_new_gguf(f, &t, &msg), ERR_FORMAT);
    EXPECT(strstr(msg.text, "tokenizer.ggml.model") != NULL);
    gguf_close(f);
    unlink(path);
    gguf_writer_free(w);
}

TEST_MAIN()
