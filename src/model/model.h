/*
 * model.h - a loaded model: hyper-parameters read from GGUF metadata and the
 * weight tensors bound by name, for the llama, qwen2 and qwen3 families.
 *
 * Names and keys are those of the wider GGUF ecosystem, so files move
 * between tools:
 *
 *   general.architecture            "llama" | "qwen2" | "qwen3"
 *   <arch>.context_length           trained context
 *   <arch>.embedding_length         n_embd
 *   <arch>.block_count              n_layer
 *   <arch>.feed_forward_length      n_ff
 *   <arch>.attention.head_count     n_head
 *   <arch>.attention.head_count_kv  n_head_kv (default n_head)
 *   <arch>.attention.key_length     head_dim (default n_embd / n_head)
 *   <arch>.attention.value_length   must equal key_length
 *   <arch>.attention.layer_norm_rms_epsilon
 *   <arch>.rope.freq_base           (default 10000)
 *   <arch>.rope.dimension_count     rotated dims per head (default head_dim)
 *
 *   token_embd.weight        (n_vocab, n_embd)      GGUF ne = [n_embd, n_vocab]
 *   output_norm.weight       (n_embd)
 *   output.weight            (n_vocab, n_embd)      absent = tied to token_embd
 *   blk.N.attn_norm.weight   (n_embd)
 *   blk.N.attn_q.weight      (n_head * head_dim, n_embd)   + .bias for qwen2
 *   blk.N.attn_k.weight      (n_head_kv * head_dim, n_embd) + .bias for qwen2
 *   blk.N.attn_v.weight      (n_head_kv * head_dim, n_embd) + .bias for qwen2
 *   blk.N.attn_q_norm.weight (head_dim)             qwen3 only
 *   blk.N.attn_k_norm.weight (head_dim)             qwen3 only
 *   blk.N.attn_output.weight (n_embd, n_head * head_dim)
 *   blk.N.ffn_norm.weight    (n_embd)
 *   blk.N.ffn_gate.weight    (n_ff, n_embd)
 *   blk.N.ffn_up.weight      (n_ff, n_embd)
 *   blk.N.ffn_down.weight    (n_embd, n_ff)
 *
 * Shapes above are (rows, row length); matrices are applied as y = W x with
 * one row per output. RoPE: llama rotates interleaved pairs (x[2i], x[2i+1]);
 * qwen2/qwen3 rotate halves (x[i], x[i + d/2]) ("NeoX").
 *
 * Lifetime: a model is refcounted process state; weights stay mapped until
 * model_free. Thread safety: immutable after load.
 */
#ifndef INFERD_MODEL_H
#define INFERD_MODEL_H

#include "base/err.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

enum model_arch { MODEL_ARCH_LLAMA, MODEL_ARCH_QWEN2, MODEL_ARCH_QWEN3, MODEL_ARCH_COUNT };

const char *model_arch_name(enum model_arch arch);
/* -1 if unknown. */
int model_arch_from_name(const char *name, size_t len);

struct model_hparams {
    enum model_arch arch; /* family */
    int n_vocab;          /* rows of token_embd */
    int n_ctx_train;      /* trained context length */
    int n_embd;           /* hidden size */
    int n_layer;          /* transformer blocks */
    int n_head;           /* query heads */
    int n_head_kv;        /* key/value heads (GQA: n_head % n_head_kv == 0) */
    int head_dim;         /* per-head dim of q, k and v */
    int n_ff;             /* FFN inner size */
    int n_rot;            /* rotated dims per head (<= head_dim, even) */
    float rms_eps;        /* RMSNorm epsilon */
    float rope_theta;     /* RoPE base frequency */
    bool rope_neox;       /* true: rotate halves; false: interleaved pairs */
    bool qkv_bias;        /* q/k/v projections carry a bias (qwen2) */
    bool qk_norm;         /* per-head RMSNorm on q and k (qwen3) */
    bool tied_output;     /* output projection shares token_embd */
};

struct model_layer {
    const struct gguf_tensor *attn_norm; /* (n_embd) f32 */
    const struct gguf_tensor *wq, *wk, *wv, *wo;
    const struct gguf_tensor *bq, *bk, *bv;    /* qwen2; else NULL */
    const struct gguf_tensor *q_norm, *k_norm; /* qwen3; else NULL */
    const struct gguf_tensor *ffn_norm;        /* (n_embd) f32 */
    const struct gguf_tensor *w_gate, *w_up, *w_down;
    /* packed copies (kern_pack, see model_pack), or NULL: the tensor's rows serve */
    const void *pk_wq, *pk_wk, *pk_wv, *pk_wo;
    const void *pk_gate, *pk_up, *pk_down;
};

struct model {
    struct gguf_file *gguf;             /* owns the mapping */
    struct model_hparams hp;            /* validated */
    const struct gguf_tensor *tok_embd; /* (n_vocab, n_embd) */
    const struct gguf_tensor *out_norm; /* (n_embd) */
    const struct gguf_tensor *output;   /* (n_vocab, n_embd); == tok_embd if tied */
    struct model_layer *layers;         /* (n_layer) */
    uint8_t fingerprint[16];            /* XXH3-128 over metadata + tensor data */
    const void *pk_output;              /* packed output projection, or NULL */
    void *pk_mem;                       /* one huge-page arena: every packed or resident copy */
    size_t pk_bytes;                    /* its size */
    struct gguf_tensor *resident;       /* matrices copied into pk_mem as they are (not packed) */
    char name[128];                     /* general.name or the file name */
};

/* Loads and validates path: architecture, hyper-parameters, every tensor's
 * presence, type (supported, norms/biases f32) and shape. Errors name the
 * key or tensor. */
int model_load(const char *path, struct model **out, struct err_msg *msg);
void model_free(struct model *m);
/* Copies every matrix the forward pass multiplies by into one huge-page
 * arena (huge_alloc): packed (kern_pack) where the current kernel level
 * packs the type, else as it is, with the layer's tensor pointer moved to a
 * resident copy of its descriptor. Then releases the mapped pages of the
 * originals (gguf_release_pages), so the weights are resident once, in
 * anonymous memory whose 2 MiB pages keep a decode step's stream through
 * every weight from missing the TLB on each 4 KiB file page (the token
 * embedding rows a step reads fault back in, unless the output projection is
 * tied to them and they share its copy). Call once, before the model is
 * shared. */
void model_pack(struct model *m);

/* Reads and validates hyper-parameters only (used by model info). */
int model_hparams_read(const struct gguf_file *f, struct model_hparams *hp, struct err_msg *msg);

#endif
