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
#include "cmd/args.h"
#include "cmd/cmd.h"

#include "base/dtype.h"
#include "base/err.h"
#include "base/timeutil.h"
#include "model/maker.h"
#include "model/model.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: inferd model make -o FILE [options]\n"
            "\n"
            "Writes a GGUF model with random weights, the shape of a real model and a real\n"
            "tokenizer. Good for tests and speed figures; it does not produce meaningful text.\n"
            "\n"
            "options:\n"
            "  -o, --output FILE   file to write (required)\n"
            "  --preset P          shape (default tiny):");
    for (int i = 0; i < maker_n_presets(); i++)
        fprintf(out, " %s", maker_preset_at(i)->name);
    fprintf(
        out,
        "\n"
        "  --arch A            llama | qwen2 | qwen3 (default: the preset's)\n"
        "  --type T            matrix type: f32 f16 bf16 q8_0 q4_0 q4_k q6_k (default f16);\n"
        "                      q4_k/q6_k fall back to q4_0/q8_0 for rows not a multiple of 256\n"
        "  --tokenizer T       qwen3 | llama3 | deepseek_v3 | gpt4o | llama2 | gemma3 |\n"
        "                      mistral_nemo | a directory with tokenizer.json\n"
        "                      and tokenizer_config.json (default: qwen3, llama3 for llama)\n"
        "  --pre NAME          tokenizer.ggml.pre to write instead of detecting it\n"
        "  --tied / --untied   share token_embd as the output projection or not\n"
        "  --layers N          block count instead of the preset's\n"
        "  --ctx N             context length instead of the preset's\n"
        "  --seed N            weight seed (default 1)\n"
        "  --threads N         worker threads (default: online CPUs)\n"
        "\n"
        "Package tokenizers are looked up under $INFERD_NODE_MODULES, ./node_modules and\n"
        "<dir of inferd>/../../node_modules.\n");
}

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "inferd model make: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nrun 'inferd model make --help' for the options\n");
    va_end(ap);
    return 2;
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

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            o.out_path = v;
        } else if (!strcmp(a, "--preset")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            if (!maker_preset_find(v)) return usage_error("unknown preset '%s'", v);
            o.preset = v;
        } else if (!strcmp(a, "--arch")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            o.arch = model_arch_from_name(v, strlen(v));
            if (o.arch < 0)
                return usage_error("unknown architecture '%s' (llama, qwen2, qwen3)", v);
        } else if (!strcmp(a, "--type")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            int t = dtype_from_name(v);
            if (t < 0 || !dtype_supported((uint32_t)t))
                return usage_error("unknown type '%s' (f32 f16 bf16 q8_0 q4_0 q4_k q6_k)", v);
            o.type = (enum dtype)t;
        } else if (!strcmp(a, "--tokenizer")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            tokenizer = v;
        } else if (!strcmp(a, "--pre")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            if (!*v || strlen(v) > 31 ||
                strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789._-") != strlen(v))
                return usage_error("--pre '%s': expected a name like llama-bpe or qwen2", v);
            o.pre = v;
        } else if (!strcmp(a, "--tied")) {
            o.tied = 1;
        } else if (!strcmp(a, "--untied")) {
            o.tied = 0;
        } else if (!strcmp(a, "--layers")) {
            if (!(v = arg_value(argc, argv, &i)) || !arg_int(a, v, 1, 4096, &n)) return 2;
            o.n_layer = (int)n;
        } else if (!strcmp(a, "--ctx")) {
            if (!(v = arg_value(argc, argv, &i)) || !arg_int(a, v, 1, 1 << 30, &n)) return 2;
            o.n_ctx = (int)n;
        } else if (!strcmp(a, "--seed")) {
            if (!(v = arg_value(argc, argv, &i))) return 2;
            char *end;
            unsigned long long s = strtoull(v, &end, 10);
            if (end == v || *end || *v == '-')
                return usage_error("--seed: expected a non-negative integer, got '%s'", v);
            o.seed = s;
        } else if (!strcmp(a, "--threads")) {
            if (!(v = arg_value(argc, argv, &i)) || !arg_int(a, v, 1, 256, &n)) return 2;
            n_threads = n;
        } else {
            return usage_error("unknown option '%s'", a);
        }
    }
    if (!o.out_path) return usage_error("an output file is required (-o FILE)");
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
