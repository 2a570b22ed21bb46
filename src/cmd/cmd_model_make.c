/*
 * cmd_model_make.c - `inferd model make`: writes a random-weight GGUF test
 * model with a real shape and a real tokenizer (model/maker.h).
 *
 *   inferd model make --preset tiny --type q8_0 -o tiny.gguf
 *   inferd model make --preset qwen2.5-0.5b --type q4_k -o qwen05.gguf
 *   inferd model make --preset tiny --arch llama --tokenizer deepseek_v3 -o x.gguf
 *
 * Options are parsed strictly (unknown options, bad numbers, a missing -o are
 * usage errors, exit 2); anything that fails while making the model (a
 * tokenizer file, the write) is exit 1 with the maker's message.
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/dtype.h"
#include "base/err.h"
#include "base/timeutil.h"
#include "model/maker.h"
#include "model/model.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int set_preset(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    if (!maker_preset_find(val))
        return err_set(m, ERR_INVALID, "%s: unknown preset '%s'", spelling, val);
    *(const char **)dst = val;
    return 0;
}

static int set_arch(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    int arch = model_arch_from_name(val, strlen(val));
    if (arch < 0)
        return err_set(m, ERR_INVALID, "%s: unknown architecture '%s' (llama, qwen2, qwen3)",
                       spelling, val);
    *(int *)dst = arch;
    return 0;
}

static int set_type(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    int t = dtype_from_name(val);
    if (t < 0 || !dtype_supported((uint32_t)t))
        return err_set(m, ERR_INVALID,
                       "%s: unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k)", spelling,
                       val);
    *(enum dtype *)dst = (enum dtype)t;
    return 0;
}

/* --pre: written into the file as tokenizer.ggml.pre, so only names of the
 * form llama.cpp uses. */
static int set_pre(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    if (!*val || strlen(val) > 31 ||
        strspn(val, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(val))
        return err_set(m, ERR_INVALID, "%s: expected a name like llama-bpe or qwen2, got '%s'",
                       spelling, val);
    *(const char **)dst = val;
    return 0;
}

/* --seed: the whole uint64_t range, as the maker takes it. */
static int set_seed(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    char *end;
    errno = 0;
    unsigned long long s = strtoull(val, &end, 10);
    if (errno || end == val || *end || *val == '-')
        return err_set(m, ERR_INVALID, "%s: expected a non-negative integer, got '%s'", spelling,
                       val);
    *(uint64_t *)dst = s;
    return 0;
}

static void human_bytes(uint64_t n, char *buf, size_t size)
{
    if (n >= (1ull << 30))
        snprintf(buf, size, "%.2f GiB", (double)n / (double)(1ull << 30));
    else
        snprintf(buf, size, "%.1f MiB", (double)n / (double)(1ull << 20));
}

int cmd_model_make(int argc, char **argv)
{
    struct maker_opts o = {
        .preset = "tiny",
        .arch = -1,
        .type = DTYPE_F16,
        .tied = -1,
        .seed = 1,
        .notes = stderr,
    };
    const char *tokenizer = NULL;
    long n_threads = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 256) n_threads = 256;

    char presets[256] = "shape (default tiny):";
    for (int i = 0; i < maker_n_presets(); i++) {
        size_t len = strlen(presets);
        snprintf(presets + len, sizeof(presets) - len, " %s", maker_preset_at(i)->name);
    }
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("output", 'o', "FILE", "file to write (required)", &o.out_path),
        CMD_OPT_CALL("preset", 0, "P", presets, set_preset, &o.preset),
        CMD_OPT_CALL("arch", 0, "A", "llama | qwen2 | qwen3 (default: the preset's)", set_arch,
                     &o.arch),
        CMD_OPT_CALL("type", 0, "T",
                     "matrix type: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k (default f16);\n"
                     "q4_k falls back to q4_0, q5_k and q6_k to q8_0 for rows not a\n"
                     "multiple of 256",
                     set_type, &o.type),
        CMD_OPT_STR("tokenizer", 0, "T",
                    "qwen3 | llama3 | deepseek_v3 | gpt4o | llama2 | gemma3 |\n"
                    "mistral_nemo | a directory with tokenizer.json\n"
                    "and tokenizer_config.json (default: qwen3, llama3 for llama)",
                    &tokenizer),
        CMD_OPT_CALL("pre", 0, "NAME", "tokenizer.ggml.pre to write instead of detecting it",
                     set_pre, &o.pre),
        CMD_OPT_SET("tied", 0, "share token_embd as the output projection", &o.tied, 1),
        CMD_OPT_SET("untied", 0, "a separate output.weight", &o.tied, 0),
        CMD_OPT_INT("layers", 0, "N", "block count instead of the preset's", &o.n_layer, 1, 4096),
        CMD_OPT_INT("ctx", 0, "N", "context length instead of the preset's", &o.n_ctx, 1, 1 << 30),
        CMD_OPT_CALL("seed", 0, "N", "weight seed (default 1)", set_seed, &o.seed),
        CMD_OPT_INT("threads", 0, "N", "worker threads (default: online CPUs)", &n_threads, 1, 256),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "model make",
        .synopsis = "-o FILE [options]",
        .about =
            "Writes a GGUF model with random weights, the shape of a real model and a real\n"
            "tokenizer. Good for tests and speed figures; it does not produce meaningful text.",
        .epilog =
            "Package tokenizers are looked up under $INFERD_NODE_MODULES, ./node_modules and\n"
            "<dir of inferd>/../../node_modules.\n",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    if (!o.out_path) return cmd_usage_error(&spec, "an output file is required (-o FILE)");
    o.n_threads = (int)n_threads;

    const struct maker_preset *ps = maker_preset_find(o.preset);
    enum model_arch arch = o.arch >= 0 ? (enum model_arch)o.arch : ps->arch;
    char tok_dir[PATH_MAX];
    struct err_msg msg = {{0}};
    int rc = maker_tokenizer_dir(tokenizer, arch, "/proc/self/exe", tok_dir, sizeof(tok_dir), &msg);
    if (rc) {
        fprintf(stderr, "inferd model make: %s\n", msg.text);
        return 1;
    }
    o.tokenizer_dir = tok_dir;

    double t0 = time_now_s();
    struct maker_result res;
    rc = maker_make(&o, &res, &msg);
    if (rc) {
        fprintf(stderr, "inferd model make: %s\n", msg.text[0] ? msg.text : err_str(rc));
        return 1;
    }
    double dt = time_now_s() - t0;

    const struct model_hparams *hp = &res.hp;
    char size[32];
    human_bytes(res.n_bytes, size, sizeof(size));
    printf("wrote %s: %s\n", o.out_path, res.name);
    printf("  %s: %d layers, n_embd %d, %d heads / %d kv x %d, n_ff %d, ctx %d, rope %g, %s%s%s\n",
           model_arch_name(hp->arch), hp->n_layer, hp->n_embd, hp->n_head, hp->n_head_kv,
           hp->head_dim, hp->n_ff, hp->n_ctx_train, (double)hp->rope_theta,
           hp->tied_output ? "tied output" : "separate output", hp->qkv_bias ? ", qkv bias" : "",
           hp->qk_norm ? ", qk norm" : "");
    printf("  tokenizer %s / %s from %s: %d tokens, %lld merges\n", res.tok_model, res.tok_pre,
           tok_dir, hp->n_vocab, (long long)res.n_merges);
    printf("  %.1fM params in %lld tensors (%lld in a fall-back type), %s, %.1f s, %d threads\n",
           (double)res.n_params / 1e6, (long long)res.n_tensors, (long long)res.n_fallback, size,
           dt, o.n_threads);
    return 0;
}
