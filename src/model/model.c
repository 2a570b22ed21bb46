/*
 * model.c - reads hyper-parameters from GGUF metadata and binds the weight
 * tensors of a llama / qwen2 / qwen3 model, validating every shape and type
 * so the forward pass can trust them.
 *
 * The model fingerprint identifies "what produces these logits": an XXH3-128
 * over the architecture, hyper-parameters, every tensor (name, type, shape,
 * data) and the tokenizer's tokens and merges. KV block ids (src/kv) hash it
 * in, so blocks from another model or another quantization never match.
 */
#include "model/model.h"

#include "base/check.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

static const char *arch_names[MODEL_ARCH_COUNT] = {
    [MODEL_ARCH_LLAMA] = "llama",
    [MODEL_ARCH_QWEN2] = "qwen2",
    [MODEL_ARCH_QWEN3] = "qwen3",
};

const char *model_arch_name(enum model_arch arch)
{
    return (unsigned)arch < MODEL_ARCH_COUNT ? arch_names[arch] : "?";
}

int model_arch_from_name(const char *name, size_t len)
{
    for (int i = 0; i < MODEL_ARCH_COUNT; i++)
        if (strlen(arch_names[i]) == len && memcmp(arch_names[i], name, len) == 0) return i;
    return -1;
}

/* Reads "<arch>.<suffix>" as a positive int; absent -> *out = dflt (or error
 * if dflt < 0, meaning required). */
static int get_int(const struct gguf_file *f, const char *arch, const char *suffix, int dflt,
                   int *out, struct err_msg *msg)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    uint64_t v;
    int rc = gguf_get_u64(f, key, &v, msg);
    if (rc == -ENOENT) {
        if (dflt < 0) return err_set(msg, ERR_FORMAT, "missing metadata key '%s'", key);
        *out = dflt;
        return 0;
    }
    if (rc) return rc;
    if (v == 0 || v > (1u << 30))
        return err_set(msg, ERR_FORMAT, "metadata '%s' = %llu is out of range", key,
                       (unsigned long long)v);
    *out = (int)v;
    return 0;
}

static int get_float(const struct gguf_file *f, const char *arch, const char *suffix, float dflt,
                     float *out, struct err_msg *msg)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    int rc = gguf_get_f32(f, key, out, msg);
    if (rc == -ENOENT) {
        *out = dflt;
        return 0;
    }
    if (rc) return rc;
    if (!(*out > 0) || *out > 1e12f)
        return err_set(msg, ERR_FORMAT, "metadata '%s' = %g is out of range", key, (double)*out);
    return 0;
}

int model_hparams_read(const struct gguf_file *f, struct model_hparams *hp, struct err_msg *msg)
{
    memset(hp, 0, sizeof(*hp));
    struct gguf_str s;
    int rc = gguf_get_str(f, "general.architecture", &s, msg);
    if (rc == -ENOENT)
        return err_set(msg, ERR_FORMAT, "missing metadata key 'general.architecture'");
    if (rc) return rc;
    int arch = model_arch_from_name(s.ptr, s.len);
    if (arch < 0)
        return err_set(msg, ERR_UNSUPPORTED,
                       "architecture '%.*s' is not supported (llama, qwen2, qwen3)",
                       (int)MIN(s.len, 64), s.ptr);
    hp->arch = (enum model_arch)arch;
    char a[16];
    snprintf(a, sizeof(a), "%s", arch_names[arch]);

    if ((rc = get_int(f, a, "embedding_length", -1, &hp->n_embd, msg)) ||
        (rc = get_int(f, a, "block_count", -1, &hp->n_layer, msg)) ||
        (rc = get_int(f, a, "feed_forward_length", -1, &hp->n_ff, msg)) ||
        (rc = get_int(f, a, "attention.head_count", -1, &hp->n_head, msg)) ||
        (rc = get_int(f, a, "attention.head_count_kv", hp->n_head, &hp->n_head_kv, msg)) ||
        (rc = get_int(f, a, "context_length", 4096, &hp->n_ctx_train, msg)))
        return rc;
    int dflt_hd = hp->n_embd / hp->n_head;
    int vlen = 0;
    if ((rc = get_int(f, a, "attention.key_length", dflt_hd, &hp->head_dim, msg)) ||
        (rc = get_int(f, a, "attention.value_length", hp->head_dim, &vlen, msg)) ||
        (rc = get_int(f, a, "rope.dimension_count", hp->head_dim, &hp->n_rot, msg)))
        return rc;
    if (vlen != hp->head_dim)
        return err_set(msg, ERR_UNSUPPORTED, "attention.value_length %d != key_length %d", vlen,
                       hp->head_dim);
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv)
        return err_set(msg, ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d",
                       hp->n_head, hp->n_head_kv);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2 || hp->head_dim % 2)
        return err_set(msg, ERR_FORMAT, "rope.dimension_count %d does not fit head dim %d",
                       hp->n_rot, hp->head_dim);
    if (hp->n_layer > 4096)
        return err_set(msg, ERR_FORMAT, "block_count %d is too large", hp->n_layer);
    float dflt_eps = 1e-5f;
    if ((rc = get_float(f, a, "attention.layer_norm_rms_epsilon", dflt_eps, &hp->rms_eps, msg)) ||
        (rc = get_float(f, a, "rope.freq_base", 10000.0f, &hp->rope_theta, msg)))
        return rc;
    hp->rope_neox = hp->arch != MODEL_ARCH_LLAMA;
    hp->qkv_bias = hp->arch == MODEL_ARCH_QWEN2;
    hp->qk_norm = hp->arch == MODEL_ARCH_QWEN3;

    const struct gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
    if (!emb) return err_set(msg, ERR_FORMAT, "missing tensor 'token_embd.weight'");
    if (emb->n_dims != 2 || emb->ne[0] != hp->n_embd || emb->ne[1] > (1 << 24))
        return err_set(msg, ERR_FORMAT,
                       "tensor 'token_embd.weight' has shape [%lld, %lld], expected [%d, n_vocab]",
                       (long long)emb->ne[0], (long long)emb->ne[1], hp->n_embd);
    hp->n_vocab = (int)emb->ne[1];
    hp->tied_output = gguf_find_tensor(f, "output.weight") == NULL;
    return 0;
}

/* Finds name and checks its shape (rows, cols) = ne (cols, rows); a NULL
 * result with required = false is fine. */
static int bind(const struct gguf_file *f, const char *name, int64_t cols, int64_t rows,
                bool must_f32, bool required, const struct gguf_tensor **out, struct err_msg *msg)
{
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    *out = t;
    if (!t) return required ? err_set(msg, ERR_FORMAT, "missing tensor '%s'", name) : 0;
    bool ok = rows ? (t->n_dims == 2 && t->ne[0] == cols && t->ne[1] == rows)
                   : (t->n_dims == 1 && t->ne[0] == cols);
    if (!ok)
        return err_set(msg, ERR_FORMAT, "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)(t->n_dims > 1 ? t->ne[1] : 1),
                       (long long)cols, (long long)(rows ? rows : 1));
    if (must_f32 && t->type != DTYPE_F32)
        return err_set(msg, ERR_UNSUPPORTED, "tensor '%s' has type %s, expected f32", name,
                       dtype_info(t->type)->name);
    if (t->type == DTYPE_Q8_K)
        return err_set(msg, ERR_UNSUPPORTED,
                       "tensor '%s' has type q8_k, which is not a weight type", name);
    return 0;
}

static void hash_tensor(XXH3_state_t *st, const struct gguf_tensor *t)
{
    if (!t) return;
    XXH3_128bits_update(st, t->name.ptr, t->name.len);
    XXH3_128bits_update(st, &t->type, sizeof(t->type));
    XXH3_128bits_update(st, t->ne, sizeof(t->ne));
    XXH3_128bits_update(st, t->data, t->size);
}

static void fingerprint(struct model *m)
{
    XXH3_state_t *st = XXH3_createState();
    CHECK(st);
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, &m->hp, sizeof(m->hp));
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++)
        hash_tensor(st, gguf_tensor(m->gguf, i));
    static const char *tok_keys[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    for (size_t k = 0; k < ARRAY_LEN(tok_keys); k++) {
        enum gguf_vtype et;
        uint64_t n;
        const void *data;
        if (gguf_get_arr(m->gguf, tok_keys[k], &et, &n, &data, NULL) || et != GGUF_VTYPE_STRING)
            continue;
        int64_t ki = gguf_find_key(m->gguf, tok_keys[k]);
        for (uint64_t i = 0; i < n; i++) {
            struct gguf_str s = gguf_arr_str_at(m->gguf, ki, i);
            XXH3_128bits_update(st, &s.len, sizeof(s.len));
            XXH3_128bits_update(st, s.ptr, s.len);
        }
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    memcpy(m->fingerprint, &h.high64, 8);
    memcpy(m->fingerprint + 8, &h.low64, 8);
}

int model_load(const char *path, struct model **out, struct err_msg *msg)
{
    struct gguf_file *f;
    int rc = gguf_open(path, &f, msg);
    if (rc) return rc;
    struct model *m = xcalloc(1, sizeof(*m));
    m->gguf = f;
    struct model_hparams *hp = &m->hp;
    if ((rc = model_hparams_read(f, hp, msg))) goto err_free;

    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    if ((rc = bind(f, "token_embd.weight", E, V, false, true, &m->tok_embd, msg)) ||
        (rc = bind(f, "output_norm.weight", E, 0, true, true, &m->out_norm, msg)) ||
        (rc = bind(f, "output.weight", E, V, false, false, &m->output, msg)))
        goto err_free;
    if (!m->output) m->output = m->tok_embd;

    m->layers = xcalloc((size_t)hp->n_layer, sizeof(*m->layers));
    for (int il = 0; il < hp->n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        char n[96];
#define BIND(field, suffix, cols, rows, f32, req)                                                  \
    snprintf(n, sizeof(n), "blk.%d.%s", il, suffix);                                               \
    if ((rc = bind(f, n, cols, rows, f32, req, &L->field, msg))) goto err_free;
        BIND(attn_norm, "attn_norm.weight", E, 0, true, true);
        BIND(wq, "attn_q.weight", E, Q, false, true);
        BIND(wk, "attn_k.weight", E, KV, false, true);
        BIND(wv, "attn_v.weight", E, KV, false, true);
        BIND(wo, "attn_output.weight", Q, E, false, true);
        BIND(bq, "attn_q.bias", Q, 0, true, hp->qkv_bias);
        BIND(bk, "attn_k.bias", KV, 0, true, hp->qkv_bias);
        BIND(bv, "attn_v.bias", KV, 0, true, hp->qkv_bias);
        BIND(q_norm, "attn_q_norm.weight", hp->head_dim, 0, true, hp->qk_norm);
        BIND(k_norm, "attn_k_norm.weight", hp->head_dim, 0, true, hp->qk_norm);
        BIND(ffn_norm, "ffn_norm.weight", E, 0, true, true);
        BIND(w_gate, "ffn_gate.weight", E, F, false, true);
        BIND(w_up, "ffn_up.weight", E, F, false, true);
        BIND(w_down, "ffn_down.weight", F, E, false, true);
#undef BIND
    }

    struct gguf_str name;
    if (gguf_get_str(f, "general.name", &name, NULL) == 0 && name.len > 0) {
        snprintf(m->name, sizeof(m->name), "%.*s", (int)MIN(name.len, 127), name.ptr);
    } else {
        const char *base = strrchr(path, '/');
        snprintf(m->name, sizeof(m->name), "%s", base ? base + 1 : path);
    }
    fingerprint(m);
    *out = m;
    return 0;

err_free:
    model_free(m);
    return rc;
}

/* The matrices of m that the forward pass multiplies by, with where their
 * packed copy goes and where the tensor is referenced from. */
static int matrices(struct model *m, const struct gguf_tensor **ts, const void ***pk,
                    const struct gguf_tensor ***tp)
{
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *t[7] = {L->wq,     L->wk,   L->wv,    L->wo,
                                          L->w_gate, L->w_up, L->w_down};
        const void **p[7] = {&L->pk_wq,   &L->pk_wk, &L->pk_wv,  &L->pk_wo,
                             &L->pk_gate, &L->pk_up, &L->pk_down};
        const struct gguf_tensor **r[7] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                           &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++, n++) {
            if (ts) ts[n] = t[i];
            if (pk) pk[n] = p[i];
            if (tp) tp[n] = r[i];
        }
    }
    if (ts) ts[n] = m->output;
    if (pk) pk[n] = &m->pk_output;
    if (tp) tp[n] = &m->output;
    return n + 1;
}

void model_pack(struct model *m)
{
    CHECK(!m->pk_mem);
    const int n = matrices(m, NULL, NULL, NULL);
    const struct gguf_tensor **ts = xmalloc(sizeof(*ts) * (size_t)n);
    const void ***pk = xmalloc(sizeof(*pk) * (size_t)n);
    const struct gguf_tensor ***tp = xmalloc(sizeof(*tp) * (size_t)n);
    size_t *off = xmalloc(sizeof(*off) * (size_t)n);
    bool *packed = xmalloc(sizeof(*packed) * (size_t)n);
    matrices(m, ts, pk, tp);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        size_t b = kern_pack_size(ts[i]->type, (int)ts[i]->ne[1], (int)ts[i]->ne[0]);
        packed[i] = b > 0;
        off[i] = total;
        total += ((packed[i] ? b : ts[i]->size) + 63) & ~(size_t)63;
    }
    m->pk_mem = xhuge_alloc(total);
    m->pk_bytes = total;
    m->resident = xcalloc((size_t)n, sizeof(*m->resident));
    const void *embd_data = m->tok_embd->data;
    for (int i = 0; i < n; i++) {
        const struct gguf_tensor *t = ts[i];
        void *dst = (char *)m->pk_mem + off[i];
        if (packed[i]) {
            const int rows = (int)t->ne[1], k = (int)t->ne[0];
            kern_pack(t->type, t->data, dtype_row_size(t->type, k), k, rows, 0, rows, dst);
            *pk[i] = dst;
            continue;
        }
        memcpy(dst, t->data, t->size);
        m->resident[i] = *t;
        m->resident[i].data = dst;
        *tp[i] = &m->resident[i];
        /* a tied output projection is the embedding table: look rows up in the copy too */
        if (t->data == embd_data) m->tok_embd = &m->resident[i];
    }
    for (int i = 0; i < n; i++)
        gguf_release_pages(m->gguf, ts[i]->data, ts[i]->size);
    free(ts);
    free(pk);
    free(tp);
    free(off);
    free(packed);
}

void model_free(struct model *m)
{
    if (!m) return;
    free(m->pk_mem);
    free(m->resident);
    gguf_close(m->gguf);
    free(m->layers);
    free(m);
}
