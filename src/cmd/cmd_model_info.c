/*
 * cmd_model_info.c - `inferd model info FILE`: everything a GGUF file says
 * about itself, for an operator deciding whether a download is what it
 * claims to be.
 *
 *   file / format     path, GGUF version, size, alignment
 *   metadata          every key with its value; long arrays summarized
 *                     (type, count, first elements), long strings cut at 80
 *                     bytes with their length (chat templates)
 *   hyper-parameters  model_hparams_read(), or why they cannot be read
 *   tensors           name, type, shape, bytes; totals per type; parameters
 *   tokenizer         model, pre-tokenizer, vocab, merges, token types,
 *                     bos/eos with their text, chat template present or not
 *
 * All text from the file is escaped before it reaches the terminal: control
 * bytes, invalid UTF-8 and C1 controls print as \xHH, so a hostile file
 * cannot drive the terminal. The file itself was validated by gguf_open, so
 * every accessor below succeeds on what the reader accepted.
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "base/dtype.h"
#include "gguf/gguf.h"
#include "model/model.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INFO_STR_MAX  80 /* bytes of a string value shown before cutting */
#define INFO_ELEM_STR 40 /* bytes of each string array element shown */
#define INFO_ARR_NUMS 8  /* numeric array elements shown */
#define INFO_ARR_STRS 5  /* string array elements shown */

static const char *const vtype_names[] = {
    [GGUF_VTYPE_UINT8] = "u8",    [GGUF_VTYPE_INT8] = "i8",    [GGUF_VTYPE_UINT16] = "u16",
    [GGUF_VTYPE_INT16] = "i16",   [GGUF_VTYPE_UINT32] = "u32", [GGUF_VTYPE_INT32] = "i32",
    [GGUF_VTYPE_FLOAT32] = "f32", [GGUF_VTYPE_BOOL] = "bool",  [GGUF_VTYPE_STRING] = "string",
    [GGUF_VTYPE_ARRAY] = "array", [GGUF_VTYPE_UINT64] = "u64", [GGUF_VTYPE_INT64] = "i64",
    [GGUF_VTYPE_FLOAT64] = "f64",
};

static const char *vtype_name(enum gguf_vtype t)
{
    return (unsigned)t < ARRAY_LEN(vtype_names) ? vtype_names[t] : "?";
}

/* Length of the valid, printable UTF-8 sequence at p (2..4 bytes), or 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t len;
    uint32_t cp, min;
    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        len = 2, cp = p[0] & 0x1f, min = 0x80;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        len = 3, cp = p[0] & 0x0f, min = 0x800;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        len = 4, cp = p[0] & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    if (cp >= 0x80 && cp <= 0x9f) return 0; /* C1 controls */
    return len;
}

/* Prints up to max bytes of s (whole characters) escaped, in double quotes;
 * "..." after the quote when cut. */
static void print_str(const char *s, uint64_t len, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    putchar('"');
    while (i < len && i < max) {
        unsigned char c = p[i];
        size_t u;
        if (c == '"' || c == '\\') {
            printf("\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", stdout);
            i++;
        } else if (c == '\t') {
            fputs("\\t", stdout);
            i++;
        } else if (c >= 0x20 && c < 0x7f) {
            putchar(c);
            i++;
        } else if (c >= 0x80 && (u = utf8_len(p + i, (size_t)(len - i))) > 0) {
            if (i + u > max) break;
            fwrite(p + i, 1, u, stdout);
            i += u;
        } else {
            printf("\\x%02x", c);
            i++;
        }
    }
    putchar('"');
    if (i < len) fputs("...", stdout);
}

/* "1,234,567" */
static const char *fmt_count(uint64_t v, char buf[static 32])
{
    char tmp[32];
    int n = snprintf(tmp, sizeof(tmp), "%" PRIu64, v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
    return buf;
}

/* "2,944 bytes (2.88 KiB)", or "737 bytes" below 1 KiB. */
static const char *fmt_bytes(uint64_t v, char buf[static 64])
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    char count[32];
    fmt_count(v, count);
    if (v < 1024) {
        snprintf(buf, 64, "%s bytes", count);
        return buf;
    }
    double x = (double)v / 1024;
    int u = 0;
    while (x >= 1024 && u < 3) {
        x /= 1024;
        u++;
    }
    snprintf(buf, 64, "%s bytes (%.2f %s)", count, x, units[u]);
    return buf;
}

/* "494.03 M" */
static const char *fmt_params(uint64_t v, char buf[static 32])
{
    if (v >= 1000000000)
        snprintf(buf, 32, "%.2f B", (double)v / 1e9);
    else if (v >= 1000000)
        snprintf(buf, 32, "%.2f M", (double)v / 1e6);
    else if (v >= 1000)
        snprintf(buf, 32, "%.2f K", (double)v / 1e3);
    else
        snprintf(buf, 32, "%" PRIu64, v);
    return buf;
}

/* Shortest decimal that reads back as the same float (1e-06, not
 * 9.99999997e-07). */
static void print_f32(float v)
{
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v || v != v) break;
    }
    fputs(buf, stdout);
}

/* Element i of a packed numeric array, printed. */
static void print_elem(enum gguf_vtype t, const uint8_t *data, uint64_t i)
{
    switch (t) {
    case GGUF_VTYPE_UINT8:
        printf("%u", data[i]);
        break;
    case GGUF_VTYPE_INT8:
        printf("%d", (int8_t)data[i]);
        break;
    case GGUF_VTYPE_BOOL:
        fputs(data[i] ? "true" : "false", stdout);
        break;
    case GGUF_VTYPE_UINT16: {
        uint16_t v;
        memcpy(&v, data + 2 * i, 2);
        printf("%u", v);
        break;
    }
    case GGUF_VTYPE_INT16: {
        int16_t v;
        memcpy(&v, data + 2 * i, 2);
        printf("%d", v);
        break;
    }
    case GGUF_VTYPE_UINT32: {
        uint32_t v;
        memcpy(&v, data + 4 * i, 4);
        printf("%" PRIu32, v);
        break;
    }
    case GGUF_VTYPE_INT32: {
        int32_t v;
        memcpy(&v, data + 4 * i, 4);
        printf("%" PRId32, v);
        break;
    }
    case GGUF_VTYPE_FLOAT32: {
        float v;
        memcpy(&v, data + 4 * i, 4);
        print_f32(v);
        break;
    }
    case GGUF_VTYPE_UINT64: {
        uint64_t v;
        memcpy(&v, data + 8 * i, 8);
        printf("%" PRIu64, v);
        break;
    }
    case GGUF_VTYPE_INT64: {
        int64_t v;
        memcpy(&v, data + 8 * i, 8);
        printf("%" PRId64, v);
        break;
    }
    case GGUF_VTYPE_FLOAT64: {
        double v;
        memcpy(&v, data + 8 * i, 8);
        printf("%g", v);
        break;
    }
    default:
        fputs("?", stdout);
        break;
    }
}

static void print_array(const struct gguf_file *f, const char *key)
{
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK(gguf_get_arr(f, key, &et, &n, &data, NULL) == 0);
    printf("[%s x %" PRIu64 "]", vtype_name(et), n);
    uint64_t show = et == GGUF_VTYPE_STRING ? INFO_ARR_STRS : INFO_ARR_NUMS;
    if (n <= show + 1) show = n; /* no "... 1 more" */
    for (uint64_t i = 0; i < show; i++) {
        fputs(i ? ", " : " ", stdout);
        if (et == GGUF_VTYPE_STRING) {
            struct gguf_str s = gguf_arr_str(f, key, i);
            print_str(s.ptr, s.len, INFO_ELEM_STR);
        } else {
            print_elem(et, data, i);
        }
    }
    if (show < n) printf(", ... (%" PRIu64 " more)", n - show);
}

static void print_value(const struct gguf_file *f, const char *key, enum gguf_vtype t)
{
    switch (t) {
    case GGUF_VTYPE_STRING: {
        struct gguf_str s;
        CHECK(gguf_get_str(f, key, &s, NULL) == 0);
        if (s.len > INFO_STR_MAX) printf("(%" PRIu64 " bytes) ", s.len);
        print_str(s.ptr, s.len, INFO_STR_MAX);
        break;
    }
    case GGUF_VTYPE_ARRAY:
        print_array(f, key);
        break;
    case GGUF_VTYPE_BOOL: {
        bool v;
        CHECK(gguf_get_bool(f, key, &v, NULL) == 0);
        fputs(v ? "true" : "false", stdout);
        break;
    }
    case GGUF_VTYPE_FLOAT32: {
        float v;
        CHECK(gguf_get_f32(f, key, &v, NULL) == 0);
        print_f32(v);
        break;
    }
    case GGUF_VTYPE_FLOAT64: {
        double v;
        CHECK(gguf_get_f64(f, key, &v, NULL) == 0);
        printf("%.17g", v);
        break;
    }
    case GGUF_VTYPE_INT8:
    case GGUF_VTYPE_INT16:
    case GGUF_VTYPE_INT32:
    case GGUF_VTYPE_INT64: {
        int64_t v;
        CHECK(gguf_get_i64(f, key, &v, NULL) == 0);
        printf("%" PRId64, v);
        break;
    }
    default: {
        uint64_t v;
        CHECK(gguf_get_u64(f, key, &v, NULL) == 0);
        printf("%" PRIu64, v);
        break;
    }
    }
}

static void print_metadata(const struct gguf_file *f)
{
    int64_t n = gguf_n_kv(f);
    size_t width = 0;
    for (int64_t i = 0; i < n; i++)
        width = MAX(width, (size_t)gguf_key(f, i).len);
    width = MIN(width, 48);
    printf("metadata: %" PRId64 " keys\n", n);
    for (int64_t i = 0; i < n; i++) {
        struct gguf_str k = gguf_key(f, i);
        enum gguf_vtype t = gguf_kv_type(f, i);
        /* Keys hold no NUL (the reader checks), so the copy finds this key. */
        char *key = xmalloc((size_t)k.len + 1);
        memcpy(key, k.ptr, (size_t)k.len);
        key[k.len] = 0;
        fputs("  ", stdout);
        bool plain = true;
        for (uint64_t j = 0; j < k.len; j++)
            plain &= k.ptr[j] > 0x20 && k.ptr[j] < 0x7f && k.ptr[j] != '"' && k.ptr[j] != '\\';
        if (plain && k.len <= 48)
            printf("%-*s", (int)width, key);
        else
            print_str(k.ptr, k.len, 48);
        printf("  %-6s  ", t == GGUF_VTYPE_ARRAY ? "array" : vtype_name(t));
        print_value(f, key, t);
        putchar('\n');
        free(key);
    }
}

static void print_hparams(const struct gguf_file *f)
{
    struct model_hparams hp;
    struct err_msg m = {{0}};
    int rc = model_hparams_read(f, &hp, &m);
    printf("hyper-parameters:\n");
    if (rc) {
        printf("  not available: %s\n", m.text[0] ? m.text : err_str(rc));
        return;
    }
    printf("  arch %s, n_vocab %d, n_ctx_train %d\n", model_arch_name(hp.arch), hp.n_vocab,
           hp.n_ctx_train);
    printf("  n_embd %d, n_layer %d, n_ff %d\n", hp.n_embd, hp.n_layer, hp.n_ff);
    printf("  n_head %d, n_head_kv %d, head_dim %d, n_rot %d\n", hp.n_head, hp.n_head_kv,
           hp.head_dim, hp.n_rot);
    printf("  rms_eps %g, rope_theta %g, rope %s\n", (double)hp.rms_eps, (double)hp.rope_theta,
           hp.rope_neox ? "neox (halves)" : "interleaved pairs");
    printf("  qkv_bias %s, qk_norm %s, tied_output %s\n", hp.qkv_bias ? "yes" : "no",
           hp.qk_norm ? "yes" : "no", hp.tied_output ? "yes" : "no");
}

static int64_t tensor_elems(const struct gguf_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->n_dims; d++)
        n *= t->ne[d]; /* the reader checked this does not overflow */
    return n;
}

/* Per-type totals. */
struct type_total {
    uint64_t n_tensors; /* tensors of this type */
    uint64_t bytes;     /* their data */
    uint64_t params;    /* their elements */
};

static void print_tensors(const struct gguf_file *f)
{
    int64_t n = gguf_n_tensors(f);
    struct type_total tot[DTYPE_COUNT] = {{0}};
    uint64_t all_bytes = 0, all_params = 0;
    char b1[32], b2[64], b3[32];
    size_t width = 4;
    for (int64_t i = 0; i < n; i++)
        width = MAX(width, (size_t)gguf_tensor(f, i)->name.len);
    width = MIN(width, 48);

    printf("tensors: %" PRId64 "\n", n);
    if (n) printf("  %-*s  %-5s  %-28s  %s\n", (int)width, "name", "type", "shape", "bytes");
    for (int64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        char shape[128];
        int o = snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t->n_dims; d++)
            o += snprintf(shape + o, sizeof(shape) - (size_t)o, "%s%" PRId64, d ? ", " : "",
                          t->ne[d]);
        snprintf(shape + o, sizeof(shape) - (size_t)o, "]");
        fputs("  ", stdout);
        bool plain = t->name.len <= 48;
        for (uint64_t j = 0; j < t->name.len && plain; j++)
            plain = t->name.ptr[j] > 0x20 && t->name.ptr[j] < 0x7f && t->name.ptr[j] != '"' &&
                    t->name.ptr[j] != '\\';
        if (plain)
            printf("%-*.*s", (int)width, (int)t->name.len, t->name.ptr);
        else
            print_str(t->name.ptr, t->name.len, 48);
        printf("  %-5s  %-28s  %s\n", dtype_info(t->type)->name, shape, fmt_count(t->size, b1));
        uint64_t ne = (uint64_t)tensor_elems(t);
        tot[t->type].n_tensors++;
        tot[t->type].bytes += t->size;
        tot[t->type].params += ne;
        all_bytes += t->size;
        all_params += ne;
    }
    printf("totals:\n");
    for (int ty = 0; ty < DTYPE_COUNT; ty++) {
        if (!tot[ty].n_tensors) continue;
        printf("  %-5s  %6" PRIu64 " tensors  %15s parameters  %s\n",
               dtype_info((uint32_t)ty)->name, tot[ty].n_tensors, fmt_count(tot[ty].params, b1),
               fmt_bytes(tot[ty].bytes, b2));
    }
    printf("  all    %6" PRId64 " tensors  %15s parameters  %s\n", n, fmt_count(all_params, b1),
           fmt_bytes(all_bytes, b2));
    printf("parameters: %s (%s)\n", fmt_count(all_params, b1), fmt_params(all_params, b3));
}

/* Prints "<label> <id> "<text>"" for a token id key, if present. */
static void print_special(const struct gguf_file *f, const char *label, const char *key,
                          uint64_t n_vocab, bool have_tokens)
{
    uint32_t id;
    struct err_msg m;
    int rc = gguf_get_u32(f, key, &id, &m);
    if (rc == -ENOENT) return;
    printf("  %-5s ", label);
    if (rc) {
        printf("unreadable: %s\n", m.text);
        return;
    }
    printf("%" PRIu32 " ", id);
    if (have_tokens && id < n_vocab) {
        struct gguf_str s = gguf_arr_str(f, "tokenizer.ggml.tokens", id);
        print_str(s.ptr, s.len, INFO_STR_MAX);
    } else if (have_tokens) {
        printf("(out of range: vocab has %" PRIu64 " tokens)", n_vocab);
    } else {
        printf("(no vocabulary)");
    }
    putchar('\n');
}

/* True with *s set if key holds a string (false: absent or another type). */
static bool get_str(const struct gguf_file *f, const char *key, struct gguf_str *s)
{
    return gguf_get_str(f, key, s, NULL) == 0;
}

static void print_tokenizer(const struct gguf_file *f)
{
    static const char *const type_names[] = {"undefined",    "normal", "unknown", "control",
                                             "user_defined", "unused", "byte"};
    struct gguf_str s;
    enum gguf_vtype et;
    uint64_t n_vocab = 0, n_merges = 0;
    const void *data;
    char b[32];

    printf("tokenizer:\n");
    bool have_tokens = gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_vocab, &data, NULL) == 0 &&
                       et == GGUF_VTYPE_STRING;
    printf("  model ");
    if (get_str(f, "tokenizer.ggml.model", &s))
        print_str(s.ptr, s.len, INFO_STR_MAX);
    else
        fputs("(none)", stdout);
    printf(", pre ");
    if (get_str(f, "tokenizer.ggml.pre", &s))
        print_str(s.ptr, s.len, INFO_STR_MAX);
    else
        fputs("(none)", stdout);
    putchar('\n');
    if (!have_tokens) {
        printf("  vocab: none (no string array 'tokenizer.ggml.tokens')\n");
        n_vocab = 0;
    } else {
        printf("  vocab %s tokens", fmt_count(n_vocab, b));
        if (gguf_get_arr(f, "tokenizer.ggml.merges", &et, &n_merges, &data, NULL) == 0)
            printf(", %s merges", fmt_count(n_merges, b));
        putchar('\n');
    }

    uint64_t n_types;
    if (gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &n_types, &data, NULL) == 0 &&
        (et == GGUF_VTYPE_INT32 || et == GGUF_VTYPE_UINT32)) {
        uint64_t counts[ARRAY_LEN(type_names) + 1] = {0}; /* last: other values */
        for (uint64_t i = 0; i < n_types; i++) {
            int32_t v;
            memcpy(&v, (const uint8_t *)data + 4 * i, 4);
            counts[v >= 0 && (size_t)v < ARRAY_LEN(type_names) ? (size_t)v
                                                               : ARRAY_LEN(type_names)]++;
        }
        printf("  token types:");
        const char *sep = " ";
        for (size_t k = 0; k <= ARRAY_LEN(type_names); k++) {
            if (!counts[k]) continue;
            printf("%s%s %s", sep, k < ARRAY_LEN(type_names) ? type_names[k] : "other",
                   fmt_count(counts[k], b));
            sep = ", ";
        }
        if (n_types != n_vocab && have_tokens)
            printf(" (%" PRIu64 " types for %" PRIu64 " tokens)", n_types, n_vocab);
        putchar('\n');
    }
    print_special(f, "bos", "tokenizer.ggml.bos_token_id", n_vocab, have_tokens);
    print_special(f, "eos", "tokenizer.ggml.eos_token_id", n_vocab, have_tokens);
    print_special(f, "eot", "tokenizer.ggml.eot_token_id", n_vocab, have_tokens);
    print_special(f, "pad", "tokenizer.ggml.padding_token_id", n_vocab, have_tokens);
    print_special(f, "unk", "tokenizer.ggml.unknown_token_id", n_vocab, have_tokens);
    if (get_str(f, "tokenizer.chat_template", &s))
        printf("  chat template: yes (%" PRIu64 " bytes)\n", s.len);
    else
        printf("  chat template: no\n");
}

int cmd_model_info(int argc, char **argv)
{
    const struct cmd_opt opts[] = {CMD_OPT_END};
    const struct cmd_spec spec = {
        .name = "model info",
        .synopsis = "FILE",
        .about = "Prints a GGUF file's metadata, hyper-parameters, tensors and tokenizer.",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (argc - argi != 1) {
        fprintf(stderr, "inferd model info: give one model FILE\n");
        cmd_opt_usage(&spec, stderr);
        return CMD_EXIT_USAGE;
    }
    const char *path = argv[argi];
    struct gguf_file *f;
    struct err_msg m = {{0}};
    int rc = gguf_open(path, &f, &m);
    if (rc) {
        fprintf(stderr, "inferd: cannot read model '%s': %s\n", path,
                m.text[0] ? m.text : err_str(rc));
        return 1;
    }
    char b[64];
    printf("file: %s\n", path);
    printf("format: GGUF v%" PRIu32 ", %s, alignment %zu\n", gguf_version(f),
           fmt_bytes(gguf_file_size(f), b), gguf_alignment(f));
    print_metadata(f);
    print_hparams(f);
    print_tensors(f);
    print_tokenizer(f);
    gguf_close(f);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "inferd: model info: cannot write output: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}
