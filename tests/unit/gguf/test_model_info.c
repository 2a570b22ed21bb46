/*
 * test_model_info.c - `inferd model info` end to end: writes a small model
 * with the GGUF writer, runs the binary ($INFERD_BIN, set by ctest) and checks
 * what it prints: metadata values, summaries of long arrays and strings,
 * escaping of hostile text, the tensor table, totals and the tokenizer
 * summary; and the one-line error and exit status for a bad file.
 */
#include "test.h"

#include "base/check.h"
#include "base/dtype.h"
#include "gguf/gguf.h"

#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

/* Runs cmd through the shell; returns its exit status and stdout (heap). */
static int run(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    CHECK(p);
    size_t n = 0, cap = 4096;
    char *buf = xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (cap - n < 1024) buf = xrealloc(buf, cap *= 2);
    }
    buf[n] = 0;
    *out = buf;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *bin(void)
{
    const char *b = getenv("INFERD_BIN");
    if (!b || !b[0] || access(b, X_OK) != 0) {
        fprintf(stderr, "  INFERD_BIN is not set to the inferd binary (ctest sets it)\n");
        return NULL;
    }
    return b;
}

/* A qwen3-shaped toy: metadata, tokenizer, four tensors (1,576 parameters). */
static void write_model(const char *path)
{
    static const char *const toks[] = {
        "<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "ab", "\xc4\xa0", "\xc4\x8a",
        "hello",         "world",        "!",          "?", "x", "y",  "z",        "w"};
    static const char *const merges[] = {"a b", "\xc4\xa0 a", "h e"};
    static const int32_t types[16] = {3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6, 6, 4, 5};
    struct gguf_writer *w = gguf_writer_new();
    struct err_msg m;
    char tmpl[201];
    memset(tmpl, 'T', 200);
    memcpy(tmpl, "{%- for message in messages %}", 30);
    tmpl[200] = 0;

    gguf_writer_set_str(w, "general.architecture", "qwen3");
    gguf_writer_set_str(w, "general.name", "evil\x1b[31mname");
    gguf_writer_set_u32(w, "qwen3.context_length", 128);
    gguf_writer_set_u32(w, "qwen3.embedding_length", 32);
    gguf_writer_set_u32(w, "qwen3.block_count", 1);
    gguf_writer_set_u32(w, "qwen3.feed_forward_length", 64);
    gguf_writer_set_u32(w, "qwen3.attention.head_count", 4);
    gguf_writer_set_u32(w, "qwen3.attention.head_count_kv", 2);
    gguf_writer_set_u32(w, "qwen3.attention.key_length", 8);
    gguf_writer_set_f32(w, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_writer_set_f32(w, "qwen3.rope.freq_base", 1000000.0f);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 16);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", types, 16);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 3);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    gguf_writer_set_bool(w, "test.flag", true);
    gguf_writer_set_i32(w, "test.neg", -42);
    uint8_t data[1024] = {0};
    CHECK(gguf_writer_add_tensor(w, "token_embd.weight", DTYPE_Q8_0, 2, (int64_t[]){32, 16}, data,
                                 16 * 34, &m) == 0);
    CHECK(gguf_writer_add_tensor(w, "output_norm.weight", DTYPE_F32, 1, (int64_t[]){32}, data, 128,
                                 &m) == 0);
    CHECK(gguf_writer_add_tensor(w, "blk.0.attn_q.weight", DTYPE_Q4_0, 2, (int64_t[]){32, 32}, data,
                                 32 * 18, &m) == 0);
    CHECK(gguf_writer_add_tensor(w, "blk.0.attn_q_norm.weight", DTYPE_F32, 1, (int64_t[]){8}, data,
                                 32, &m) == 0);
    CHECK(gguf_writer_write(w, path, &m) == 0);
    gguf_writer_free(w);
}

static const char *tmp(const char *name)
{
    static char path[512];
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/inferd-info-XXXXXX", t && t[0] ? t : "/tmp");
        CHECK(mkdtemp(dir));
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

#define EXPECT_HAS(out, s)                                                                         \
    do {                                                                                           \
        if (!strstr((out), (s))) {                                                                 \
            fprintf(stderr, "  %s:%d: output lacks '%s'\n", __FILE__, __LINE__, (s));              \
            test_failures_in_case++;                                                               \
        }                                                                                          \
    } while (0)

TEST(model_info_prints_everything)
{
    const char *b = bin();
    EXPECT(b != NULL);
    if (!b) return;
    char path[512], cmd[2048];
    snprintf(path, sizeof(path), "%s", tmp("toy.gguf"));
    write_model(path);
    snprintf(cmd, sizeof(cmd), "'%s' model info '%s' 2>&1", b, path);
    char *out;
    EXPECT_EQ_INT(run(cmd, &out), 0);

    EXPECT_HAS(out, "format: GGUF v3");
    EXPECT_HAS(out, "alignment 32");
    EXPECT_HAS(out, "metadata: 21 keys");
    EXPECT_HAS(out, "qwen3.block_count");
    EXPECT_HAS(out, "u32     1\n");
    EXPECT_HAS(out, "f32     1e-06\n");
    EXPECT_HAS(out, "bool    true\n");
    EXPECT_HAS(out, "i32     -42\n");
    /* Long arrays: type, count, first elements. */
    EXPECT_HAS(out, "[string x 16] \"<|endoftext|>\", \"<|im_start|>\", \"<|im_end|>\", \"a\", "
                    "\"b\", ... (11 more)");
    EXPECT_HAS(out, "[i32 x 16] 3, 3, 3, 1, 1, 1, 1, 1, ... (8 more)");
    /* Long strings: length and the first 80 bytes. */
    EXPECT_HAS(out, "string  (200 bytes) \"{%- for message in messages %}TTTT");
    EXPECT_HAS(out, "TTTT\"...\n");
    /* Control characters never reach the terminal raw. */
    EXPECT(strchr(out, 0x1b) == NULL);
    EXPECT_HAS(out, "\"evil\\x1b[31mname\"");
    /* Hyper-parameters (model_hparams_read). */
    EXPECT_HAS(out, "arch qwen3, n_vocab 16, n_ctx_train 128");
    EXPECT_HAS(out, "n_head 4, n_head_kv 2, head_dim 8");
    /* Tensor table and totals. */
    EXPECT_HAS(out, "tensors: 4\n");
    EXPECT_HAS(out, "token_embd.weight         q8_0   [32, 16]");
    EXPECT_HAS(out, "blk.0.attn_q.weight       q4_0   [32, 32]                      576\n");
    EXPECT_HAS(out, "  f32         2 tensors               40 parameters  160 bytes\n");
    EXPECT_HAS(out, "  all         4 tensors            1,576 parameters  1,280 bytes (1.25 KiB)");
    EXPECT_HAS(out, "parameters: 1,576 (1.58 K)");
    /* Tokenizer summary. */
    EXPECT_HAS(out, "model \"gpt2\", pre \"qwen2\"");
    EXPECT_HAS(out, "vocab 16 tokens, 3 merges");
    EXPECT_HAS(out, "token types: normal 9, control 3, user_defined 1, unused 1, byte 2");
    EXPECT_HAS(out, "bos   0 \"<|endoftext|>\"");
    EXPECT_HAS(out, "eos   2 \"<|im_end|>\"");
    EXPECT_HAS(out, "chat template: yes (200 bytes)");
    if (test_failures_in_case) fprintf(stderr, "--- output ---\n%s--- end ---\n", out);
    free(out);
    unlink(path);
}

TEST(model_info_bad_file)
{
    const char *b = bin();
    EXPECT(b != NULL);
    if (!b) return;
    char path[512], cmd[2048], want[1024];
    snprintf(path, sizeof(path), "%s", tmp("bad.gguf"));
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputs("GGML not a model at all, just some bytes to read", f);
    fclose(f);
    /* stderr only: stdout must stay empty. */
    snprintf(cmd, sizeof(cmd), "'%s' model info '%s' 2>&1 >/dev/null", b, path);
    char *out;
    EXPECT_EQ_INT(run(cmd, &out), 1);
    snprintf(want, sizeof(want),
             "inferd: cannot read model '%s': gguf: not a GGUF file (magic 'GGML', expected "
             "'GGUF')\n",
             path);
    EXPECT(strcmp(out, want) == 0);
    if (strcmp(out, want)) fprintf(stderr, "  got: %s", out);
    free(out);

    snprintf(cmd, sizeof(cmd), "'%s' model info '%s' 2>/dev/null", b, path);
    EXPECT_EQ_INT(run(cmd, &out), 1);
    EXPECT_EQ_INT(strlen(out), 0);
    free(out);
    unlink(path);

    snprintf(cmd, sizeof(cmd), "'%s' model info '%s/missing.gguf' 2>&1", b, dir);
    EXPECT_EQ_INT(run(cmd, &out), 1);
    EXPECT(strstr(out, "inferd: cannot read model '") && strstr(out, "missing.gguf': "));
    free(out);

    snprintf(cmd, sizeof(cmd), "'%s' model info 2>&1", b);
    EXPECT_EQ_INT(run(cmd, &out), 2);
    EXPECT(strstr(out, "usage: inferd model info FILE") != NULL);
    free(out);
    if (dir[0]) EXPECT_EQ_INT(rmdir(dir), 0);
}

TEST_MAIN()
