/*
 * hf_tokenizer.c - tokenizer.json + tokenizer_config.json -> GGUF tokenizer
 * metadata. The mapping rules are in hf_tokenizer.h; this file is the
 * parsing, in the order the fields depend on each other:
 *
 *   tokenizer.json  --> model kind (gpt2 | llama) --> tokens, types, merges
 *                   --> pre-tokenizer family (structure match, or opts.pre)
 *   tokenizer_config.json --> special ids (resolved against the tokens),
 *                             add_bos / add_eos (after the post_processor),
 *                             chat template
 *   config.json (optional) --> special ids still unknown
 *
 * jansson owns the parsed documents until load returns; every string kept
 * in struct hf_tokenizer is copied out first.
 */
#include "model/hf_tokenizer.h"

#include "base/check.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- known pre-tokenizer families ----
 * Each is the exact list of Split regexes (behavior Isolated, not inverted)
 * that precedes a ByteLevel pre-tokenizer, as in the model's tokenizer.json.
 * The regex text is compared byte for byte: a family differs from another
 * only in such details (Llama 3 groups digits by three, Qwen2 splits each). */

#define RE_LLAMA3                                                                                  \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                                   \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek-V3: digits in threes, then runs of CJK ideographs (U+4E00-U+9FA5),
 * hiragana and katakana, then the rest. Note the raw CR/LF characters. */
#define RE_DSV3_DIGITS "\\p{N}{1,3}"
#define RE_DSV3_CJK                                                                                \
    "[\xe4\xb8\x80-\xe9\xbe\xa5"                                                                   \
    "\xe3\x81\x80-\xe3\x82\x9f\xe3\x82\xa0-\xe3\x83\xbf]+"
#define RE_DSV3_REST                                                                               \
    "[!\"#$%&'()*+,\\-./"                                                                          \
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"                 \
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

/* o200k (GPT-4o) and Tekken (Mistral NeMo): case-aware letter runs, marks
 * inside words, '/' kept with trailing punctuation. */
#define RE_GPT4O                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?"  \
    "i:'s|'t|"                                                                                     \
    "'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{"  \
    "Lm}\\p{Lo}\\p{M}]*("                                                                          \
    "?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "                                                   \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_TEKKEN                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^" \
    "\\r\\n\\p{"                                                                                   \
    "L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| "       \
    "?[^\\s\\p{L}\\p{N}]+["                                                                        \
    "\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

struct pre_family {
    const char *name;      /* tokenizer.ggml.pre */
    int n_split;           /* Split pre-tokenizers before ByteLevel */
    const char *split[4];  /* (n_split) their regexes, in order */
    bool byte_level_regex; /* ByteLevel.use_regex (its built-in GPT-2 split) */
};

static const struct pre_family pre_families[] = {
    {"llama-bpe", 1, {RE_LLAMA3}, false},
    {"qwen2", 1, {RE_QWEN2}, false},
    {"deepseek-v3", 3, {RE_DSV3_DIGITS, RE_DSV3_CJK, RE_DSV3_REST}, false},
    {"gpt-4o", 1, {RE_GPT4O}, false},
    {"tekken", 1, {RE_TEKKEN}, false},
    {"gpt-2", 0, {NULL}, true},
};

/* Pre-tokenizers for which llama.cpp adds BOS when the file does not say. */
static const char *pre_add_bos[] = {"llama3",       "llama-v3", "llama-bpe", "falcon3",
                                    "falcon-h1",    "pixtral",  "midm-2.0",  "lfm2",
                                    "jina-v5-nano", "tekken",   "chameleon"};

/* ---- small helpers ---- */

static int read_file(const char *path, char **out, size_t *len, struct err_msg *msg)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        int e = errno;
        return err_set(msg, -e, "cannot open tokenizer file '%s': %s", path, strerror(e));
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(buf);
        return err_set(msg, -EIO, "cannot read tokenizer file '%s'", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

/* Parses path as a JSON object. A missing file is -ENOENT. */
static int load_json(const char *path, json_t **out, struct err_msg *msg)
{
    char *text;
    size_t len;
    int rc = read_file(path, &text, &len, msg);
    if (rc) return rc;
    json_error_t jerr;
    /* Integers decode as doubles: configs carry values like model_max_length
     * = 1e30 that overflow jansson's integers; ids are checked by as_id. */
    json_t *root = json_loadb(text, len, JSON_DECODE_INT_AS_REAL, &jerr);
    free(text);
    if (!root)
        return err_set(msg, ERR_FORMAT, "'%s': invalid JSON at line %d, column %d: %s", path,
                       jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(msg, ERR_FORMAT, "'%s': expected a JSON object at the top level", path);
    }
    *out = root;
    return 0;
}

/* A JSON number that is an integer in [0, limit). */
static bool as_id(const json_t *v, int64_t limit, int64_t *out)
{
    if (!json_is_number(v)) return false;
    double d = json_number_value(v);
    if (!(d >= 0 && d < (double)limit) || d != (double)(int64_t)d) return false;
    *out = (int64_t)d;
    return true;
}

static bool starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* Added tokens that some models forget to mark "special" but that ought to
 * be control tokens (the converter's list). */
static bool looks_special(const char *t)
{
    static const char *exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < ARRAY_LEN(exact); i++)
        if (strcmp(t, exact[i]) == 0) return true;
    if (starts_with(t, "<|") && ends_with(t, "|>")) return true;
    if (starts_with(t, "<\xef\xbd\x9c") && ends_with(t, "\xef\xbd\x9c>"))
        return true; /* fullwidth bars */
    if (starts_with(t, "<unused") && ends_with(t, ">")) return true;
    return false;
}

/* Copy of s with every occurrence of `from` replaced by `to`. */
static char *str_replace_all(const char *s, const char *from, const char *to)
{
    size_t nf = strlen(from), nt = strlen(to), n = 0;
    for (const char *p = s; (p = strstr(p, from)); p += nf)
        n++;
    char *out = xmalloc(strlen(s) + n * (nt > nf ? nt - nf : 0) + 1), *o = out;
    for (const char *p = s;;) {
        const char *q = strstr(p, from);
        if (!q) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, to, nt);
        o += nt;
        p = q + nf;
    }
    return out;
}

static bool is_byte_token(const char *t)
{
    static const char hex[] = "0123456789abcdefABCDEF";
    return strlen(t) == 6 && starts_with(t, "<0x") && t[5] == '>' && strchr(hex, t[3]) &&
           strchr(hex, t[4]);
}

/* ---- tokenizer.json ---- */

/* State shared by the parsing steps; everything borrowed from the JSON
 * documents lives until load returns. */
struct ctx {
    const char *tok_path; /* dir/tokenizer.json */
    const char *cfg_path; /* dir/tokenizer_config.json */
    json_t *tok_json;     /* tokenizer.json root */
    json_t *cfg_json;     /* tokenizer_config.json root */
    json_t *vocab;        /* model.vocab object: token -> id */
    json_t *added;        /* added_tokens array, or NULL */
    bool spm;             /* model kind "llama" (BPE with byte fallback) */
    const char **text;    /* (n) borrowed token text per id, NULL = hole */
    int64_t n;            /* token count */
};

static int parse_vocab(struct ctx *c, const struct hf_tokenizer_opts *opts,
                       struct hf_tokenizer *tok, struct err_msg *msg)
{
    json_t *model = json_object_get(c->tok_json, "model");
    if (!json_is_object(model))
        return err_set(msg, ERR_FORMAT, "'%s': missing 'model' object", c->tok_path);
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type) return err_set(msg, ERR_FORMAT, "'%s': model.type: missing", c->tok_path);
    if (strcmp(type, "BPE") != 0)
        return err_set(msg, ERR_UNSUPPORTED,
                       "'%s': model.type '%s' is not supported (only BPE tokenizers)", c->tok_path,
                       type);
    json_t *bf = json_object_get(model, "byte_fallback");
    if (bf && !json_is_boolean(bf) && !json_is_null(bf))
        return err_set(msg, ERR_FORMAT, "'%s': model.byte_fallback: expected a boolean",
                       c->tok_path);
    c->spm = json_is_true(bf);

    c->vocab = json_object_get(model, "vocab");
    if (!json_is_object(c->vocab))
        return err_set(msg, ERR_FORMAT, "'%s': model.vocab: missing or not an object", c->tok_path);
    c->added = json_object_get(c->tok_json, "added_tokens");
    if (c->added && !json_is_array(c->added) && !json_is_null(c->added))
        return err_set(msg, ERR_FORMAT, "'%s': added_tokens: expected an array", c->tok_path);
    if (json_is_null(c->added)) c->added = NULL;

    /* Size first: max id + 1 over both sources. */
    int64_t max_id = -1;
    const char *key;
    json_t *val;
    int64_t id;
    json_object_foreach(c->vocab, key, val)
    {
        if (!as_id(val, HF_TOKENIZER_MAX_TOKENS, &id))
            return err_set(msg, ERR_FORMAT,
                           "'%s': model.vocab: token '%.64s' has a bad id (expected "
                           "an integer in 0..%d)",
                           c->tok_path, key, HF_TOKENIZER_MAX_TOKENS - 1);
        max_id = MAX(max_id, id);
    }
    size_t i;
    json_array_foreach(c->added, i, val)
    {
        if (!json_is_object(val) || !json_is_string(json_object_get(val, "content")) ||
            !as_id(json_object_get(val, "id"), HF_TOKENIZER_MAX_TOKENS, &id))
            return err_set(msg, ERR_FORMAT,
                           "'%s': added_tokens[%zu]: expected an object with "
                           "'content' (string) and 'id' (0..%d)",
                           c->tok_path, i, HF_TOKENIZER_MAX_TOKENS - 1);
        json_t *sp = json_object_get(val, "special");
        if (sp && !json_is_boolean(sp))
            return err_set(msg, ERR_FORMAT, "'%s': added_tokens[%zu].special: expected a boolean",
                           c->tok_path, i);
        max_id = MAX(max_id, id);
    }
    if (max_id < 0) return err_set(msg, ERR_FORMAT, "'%s': model.vocab: empty", c->tok_path);
    c->n = max_id + 1;
    if (opts && opts->min_tokens > c->n) {
        if (opts->min_tokens > HF_TOKENIZER_MAX_TOKENS)
            return err_set(msg, ERR_INVALID, "vocabulary size %lld is too large",
                           (long long)opts->min_tokens);
        c->n = opts->min_tokens;
    }

    c->text = xcalloc((size_t)c->n, sizeof(*c->text));
    tok->n_tokens = c->n;
    tok->tokens = xcalloc((size_t)c->n, sizeof(*tok->tokens));
    tok->types = xcalloc((size_t)c->n, sizeof(*tok->types));
    json_object_foreach(c->vocab, key, val)
    {
        as_id(val, HF_TOKENIZER_MAX_TOKENS, &id);
        if (c->text[id])
            return err_set(msg, ERR_FORMAT,
                           "'%s': model.vocab: id %lld is used by both '%.64s' "
                           "and '%.64s'",
                           c->tok_path, (long long)id, c->text[id], key);
        c->text[id] = key;
        tok->types[id] = HF_TOKEN_TYPE_NORMAL;
        if (c->spm && is_byte_token(key)) tok->types[id] = HF_TOKEN_TYPE_BYTE;
    }
    if (c->spm) {
        const char *unk = json_string_value(json_object_get(model, "unk_token"));
        if (unk && as_id(json_object_get(c->vocab, unk), c->n, &id))
            tok->types[id] = HF_TOKEN_TYPE_UNKNOWN;
    }
    /* Added tokens override the vocab entry with their id. */
    size_t n_added = c->added ? json_array_size(c->added) : 0;
    tok->added_ids = xcalloc(MAX(n_added, 1), sizeof(*tok->added_ids));
    tok->added_flags = xcalloc(MAX(n_added, 1), sizeof(*tok->added_flags));
    tok->added_text = xcalloc(MAX(n_added, 1), sizeof(*tok->added_text));
    json_array_foreach(c->added, i, val)
    {
        as_id(json_object_get(val, "id"), HF_TOKENIZER_MAX_TOKENS, &id);
        const char *content = json_string_value(json_object_get(val, "content"));
        c->text[id] = content;
        bool special = json_is_true(json_object_get(val, "special"));
        json_t *norm = json_object_get(val, "normalized");
        int32_t fl =
            (special ? HF_ADDED_SPECIAL : 0) |
            (json_is_true(json_object_get(val, "lstrip")) ? HF_ADDED_LSTRIP : 0) |
            (json_is_true(json_object_get(val, "rstrip")) ? HF_ADDED_RSTRIP : 0) |
            (json_is_true(json_object_get(val, "single_word")) ? HF_ADDED_SINGLE_WORD : 0) |
            ((json_is_boolean(norm) ? json_is_true(norm) : !special) ? HF_ADDED_NORMALIZED : 0);
        tok->added_ids[tok->n_added] = (int32_t)id;
        tok->added_flags[tok->n_added] = fl;
        tok->added_text[tok->n_added++] = xstrdup(content);
        tok->types[id] =
            special || looks_special(content) ? HF_TOKEN_TYPE_CONTROL : HF_TOKEN_TYPE_USER_DEFINED;
    }
    for (id = 0; id < c->n; id++) {
        if (!c->text[id]) {
            char pad[32];
            snprintf(pad, sizeof(pad), "[PAD%lld]", (long long)id);
            tok->tokens[id] = xstrdup(pad);
            tok->types[id] = HF_TOKEN_TYPE_UNUSED;
        } else if (tok->types[id] == HF_TOKEN_TYPE_USER_DEFINED) {
            /* llama.cpp matches user-defined tokens against raw text, so the
             * SentencePiece space marker U+2581 is pre-normalized to ' '. */
            tok->tokens[id] = str_replace_all(c->text[id], "\xe2\x96\x81", " ");
        } else {
            tok->tokens[id] = xstrdup(c->text[id]);
        }
    }
    return 0;
}

/* One merge part with spaces written as U+0120 (gguf-py's encoding). */
static size_t put_part(char *o, const char *s)
{
    size_t n = 0;
    for (; *s; s++) {
        if (*s == ' ') {
            o[n++] = (char)0xc4;
            o[n++] = (char)0xa0;
        } else {
            o[n++] = *s;
        }
    }
    return n;
}

static int parse_merges(struct ctx *c, struct hf_tokenizer *tok, struct err_msg *msg)
{
    json_t *merges = json_object_get(json_object_get(c->tok_json, "model"), "merges");
    if (!json_is_array(merges) || json_array_size(merges) == 0)
        return err_set(msg, ERR_FORMAT, "'%s': model.merges: missing or empty", c->tok_path);
    size_t n = json_array_size(merges), i;
    tok->merges = xcalloc(n, sizeof(*tok->merges));
    json_t *m;
    json_array_foreach(merges, i, m)
    {
        if (json_is_string(m)) {
            if (!strchr(json_string_value(m), ' '))
                return err_set(msg, ERR_FORMAT,
                               "'%s': model.merges[%zu]: '%.64s' has no space "
                               "between its two parts",
                               c->tok_path, i, json_string_value(m));
            tok->merges[i] = xstrdup(json_string_value(m));
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            const char *a = json_string_value(json_array_get(m, 0));
            const char *b = json_string_value(json_array_get(m, 1));
            char *s = xmalloc(2 * (strlen(a) + strlen(b)) + 2);
            size_t k = put_part(s, a);
            s[k++] = ' ';
            k += put_part(s + k, b);
            s[k] = 0;
            tok->merges[i] = s;
        } else {
            return err_set(msg, ERR_FORMAT,
                           "'%s': model.merges[%zu]: expected a string \"a b\" "
                           "or a pair [\"a\", \"b\"]",
                           c->tok_path, i);
        }
        tok->n_merges = (int64_t)i + 1;
    }
    return 0;
}

/* SentencePiece-style scores from merge ranks (see the header). */
static void spm_scores(struct ctx *c, struct hf_tokenizer *tok)
{
    tok->scores = xcalloc((size_t)c->n, sizeof(*tok->scores));
    const float unreached = -(float)tok->n_merges - 1.0f;
    bool *set = xcalloc((size_t)c->n, sizeof(*set));
    for (int64_t r = 0; r < tok->n_merges; r++) {
        /* "a b" -> "ab": drop the first space (pieces use U+2581, not ' '). */
        const char *m = tok->merges[r];
        const char *sp = strchr(m, ' ');
        size_t la = (size_t)(sp - m), lb = strlen(sp + 1);
        char *joined = xmalloc(la + lb + 1);
        memcpy(joined, m, la);
        memcpy(joined + la, sp + 1, lb + 1);
        int64_t i;
        bool found = as_id(json_object_get(c->vocab, joined), c->n, &i);
        free(joined);
        if (found && !set[i]) {
            tok->scores[i] = -(float)r;
            set[i] = true;
        }
    }
    for (int64_t i = 0; i < c->n; i++)
        if (!set[i] && tok->types[i] == HF_TOKEN_TYPE_NORMAL) tok->scores[i] = unreached;
    free(set);
}

/* Matches the pre_tokenizer against pre_families. */
static int detect_pre(struct ctx *c, const struct hf_tokenizer_opts *opts, struct hf_tokenizer *tok,
                      struct err_msg *msg)
{
    if (opts && opts->pre) {
        tok->pre = xstrdup(opts->pre);
        return 0;
    }
    if (c->spm) {
        tok->pre = xstrdup("default"); /* SentencePiece: no pre-tokenizer */
        return 0;
    }
    json_t *pt = json_object_get(c->tok_json, "pre_tokenizer");
    const char *splits[8];
    int n_split = 0;
    int byte_level_regex = -1; /* -1: no ByteLevel at the end */
    bool shape_ok = json_is_object(pt);
    /* A Sequence lists its steps; anything else is a one-step list. */
    json_t *list = pt;
    size_t n = 1;
    if (shape_ok && json_is_array(json_object_get(pt, "pretokenizers"))) {
        list = json_object_get(pt, "pretokenizers");
        n = json_array_size(list);
    }
    for (size_t i = 0; shape_ok && i < n; i++) {
        json_t *p = list == pt ? pt : json_array_get(list, i);
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!type) {
            shape_ok = false;
        } else if (i + 1 == n && strcmp(type, "ByteLevel") == 0) {
            byte_level_regex = json_is_true(json_object_get(p, "use_regex"));
        } else if (strcmp(type, "Split") == 0 && n_split < (int)ARRAY_LEN(splits)) {
            const char *re =
                json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
            const char *beh = json_string_value(json_object_get(p, "behavior"));
            /* Removed + invert keeps exactly the matches: the same split as
             * Isolated for these patterns, which match every character
             * (GPT-4o's tokenizer.json is written that way). */
            bool invert = json_is_true(json_object_get(p, "invert"));
            if (!re || !beh ||
                !((strcmp(beh, "Isolated") == 0 && !invert) ||
                  (strcmp(beh, "Removed") == 0 && invert)))
                shape_ok = false;
            else
                splits[n_split++] = re;
        } else {
            shape_ok = false;
        }
    }
    if (shape_ok && byte_level_regex >= 0) {
        for (size_t f = 0; f < ARRAY_LEN(pre_families); f++) {
            const struct pre_family *pf = &pre_families[f];
            if (pf->n_split != n_split || pf->byte_level_regex != (byte_level_regex == 1)) continue;
            int k = 0;
            while (k < n_split && strcmp(pf->split[k], splits[k]) == 0)
                k++;
            if (k == n_split) {
                tok->pre = xstrdup(pf->name);
                return 0;
            }
        }
    }
    return err_set(
        msg, ERR_UNSUPPORTED,
        "'%s': pre_tokenizer: not a known family (llama-bpe, qwen2, deepseek-v3, "
        "gpt-4o, tekken, gpt-2); pass the tokenizer.ggml.pre name explicitly (--pre NAME)",
        c->tok_path);
}

/* Normalizer facts the tokenizer needs: NFC, and SentencePiece's prepended
 * U+2581 (a Prepend normalizer, or Metaspace with a prefix space); plus
 * model.ignore_merges. */
static bool has_normalizer(json_t *n, const char *type, const char *prepend)
{
    if (!json_is_object(n)) return false;
    json_t *list = json_object_get(n, "normalizers");
    if (json_is_array(list)) {
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
        {
            if (has_normalizer(e, type, prepend)) return true;
        }
        return false;
    }
    const char *t = json_string_value(json_object_get(n, "type"));
    if (!t || strcmp(t, type) != 0) return false;
    if (!prepend) return true;
    const char *p = json_string_value(json_object_get(n, "prepend"));
    return p && strcmp(p, prepend) == 0;
}

static void parse_normalizer(struct ctx *c, struct hf_tokenizer *tok)
{
    json_t *n = json_object_get(c->tok_json, "normalizer");
    tok->nfc = has_normalizer(n, "NFC", NULL);
    tok->add_space_prefix = -1;
    if (c->spm) {
        json_t *pt = json_object_get(c->tok_json, "pre_tokenizer");
        const char *pt_type = json_string_value(json_object_get(pt, "type"));
        const char *scheme = json_string_value(json_object_get(pt, "prepend_scheme"));
        bool metaspace = pt_type && strcmp(pt_type, "Metaspace") == 0 &&
                         (json_is_true(json_object_get(pt, "add_prefix_space")) ||
                          (scheme && strcmp(scheme, "never") != 0));
        tok->add_space_prefix = has_normalizer(n, "Prepend", "\xe2\x96\x81") || metaspace;
    }
    tok->ignore_merges =
        json_is_true(json_object_get(json_object_get(c->tok_json, "model"), "ignore_merges"));
}

/* ---- tokenizer_config.json ---- */

/* The text of config field "<typ>_token": a string, an object with
 * "content", or absent/null (*out = NULL). */
static int config_token(struct ctx *c, const char *typ, const char **out, struct err_msg *msg)
{
    char key[32];
    snprintf(key, sizeof(key), "%s_token", typ);
    json_t *v = json_object_get(c->cfg_json, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return 0;
    }
    if (json_is_object(v) && json_is_string(json_object_get(v, "content"))) {
        *out = json_string_value(json_object_get(v, "content"));
        return 0;
    }
    return err_set(msg, ERR_FORMAT,
                   "'%s': %s: expected a string or an object with a string 'content'", c->cfg_path,
                   key);
}

/* Id of the token with this text: first matching added token, then vocab. */
static int64_t resolve_token(struct ctx *c, const char *text)
{
    size_t i;
    json_t *a;
    int64_t id;
    json_array_foreach(c->added, i, a)
    {
        if (strcmp(json_string_value(json_object_get(a, "content")), text) == 0 &&
            as_id(json_object_get(a, "id"), c->n, &id))
            return id;
    }
    return as_id(json_object_get(c->vocab, text), c->n, &id) ? id : -1;
}

static int parse_special(struct ctx *c, struct hf_tokenizer *tok, struct err_msg *msg)
{
    static const char *types[] = {"bos", "eos", "unk", "pad"};
    int64_t *ids[] = {&tok->bos_id, &tok->eos_id, &tok->unk_id, &tok->pad_id};
    const char *text[4];
    int rc;
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        if ((rc = config_token(c, types[t], &text[t], msg))) return rc;
        *ids[t] = text[t] ? resolve_token(c, text[t]) : -1;
        /* bos/eos naming a token that does not exist is a broken pair of
         * files; unk/pad often name tokens a BPE vocabulary never had. */
        if (text[t] && *ids[t] < 0 && t < 2)
            return err_set(msg, ERR_FORMAT, "'%s': %s_token '%.64s' is not a token in '%s'",
                           c->cfg_path, types[t], text[t], c->tok_path);
    }
    const char *cls;
    if ((rc = config_token(c, "cls", &cls, msg))) return rc;

    /* add_bos / add_eos: post_processor first, then the config's flags. */
    int add_bos = -1, add_eos = -1;
    json_t *pp = json_object_get(c->tok_json, "post_processor");
    if (json_is_object(pp)) {
        json_t *procs = json_object_get(pp, "processors");
        size_t n = json_is_array(procs) ? json_array_size(procs) : 1;
        for (size_t i = 0; i < n; i++) {
            json_t *p = json_is_array(procs) ? json_array_get(procs, i) : pp;
            const char *type = json_string_value(json_object_get(p, "type"));
            if (!type) continue;
            if (strcmp(type, "RobertaProcessing") == 0) {
                add_bos = add_eos = 1;
                continue;
            }
            if (strcmp(type, "TemplateProcessing") != 0) continue;
            json_t *single = json_object_get(p, "single");
            size_t ns = json_is_array(single) ? json_array_size(single) : 0;
            if (ns < 2) continue;
            const char *first = json_string_value(
                json_object_get(json_object_get(json_array_get(single, 0), "SpecialToken"), "id"));
            const char *last = json_string_value(json_object_get(
                json_object_get(json_array_get(single, ns - 1), "SpecialToken"), "id"));
            if (first)
                add_bos =
                    (text[0] && strcmp(first, text[0]) == 0) || (cls && strcmp(first, cls) == 0);
            if (last) add_eos = text[1] && strcmp(last, text[1]) == 0;
        }
    }
    static const char *flag_keys[] = {"add_bos_token", "add_eos_token"};
    int *flags[] = {&add_bos, &add_eos};
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(c->cfg_json, flag_keys[k]);
        if (json_is_boolean(v))
            *flags[k] = json_is_true(v);
        else if (v && !json_is_null(v))
            return err_set(msg, ERR_FORMAT, "'%s': %s: expected a boolean", c->cfg_path,
                           flag_keys[k]);
    }
    if (add_bos < 0) {
        /* llama.cpp's reader default when the file is silent. */
        add_bos = c->spm;
        for (size_t i = 0; i < ARRAY_LEN(pre_add_bos); i++)
            if (strcmp(tok->pre, pre_add_bos[i]) == 0) add_bos = 1;
    }
    tok->add_bos = add_bos == 1;
    tok->add_eos = add_eos == 1;
    return 0;
}

static int parse_template(struct ctx *c, const char *dir, struct hf_tokenizer *tok,
                          struct err_msg *msg)
{
    json_t *t = json_object_get(c->cfg_json, "chat_template");
    char path[4096];
    int rc;
    if (!t || json_is_null(t)) {
        /* Newer checkpoints keep the template in its own file. */
        char *text;
        size_t len;
        snprintf(path, sizeof(path), "%s/chat_template.jinja", dir);
        if (read_file(path, &text, &len, NULL) == 0) {
            if (strlen(text) != len) {
                free(text);
                return err_set(msg, ERR_FORMAT, "'%s': contains a NUL byte", path);
            }
            tok->chat_template = text;
            return 0;
        }
        snprintf(path, sizeof(path), "%s/chat_template.json", dir);
        json_t *root;
        struct err_msg local;
        if ((rc = load_json(path, &root, &local)) == -ENOENT) return 0;
        if (rc) return err_set(msg, rc, "%s", local.text);
        const char *s = json_string_value(json_object_get(root, "chat_template"));
        if (s) tok->chat_template = xstrdup(s);
        json_decref(root);
        if (!s) return err_set(msg, ERR_FORMAT, "'%s': chat_template: expected a string", path);
        return 0;
    }
    if (json_is_string(t)) {
        tok->chat_template = xstrdup(json_string_value(t));
        return 0;
    }
    if (json_is_array(t)) {
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *src = json_string_value(json_object_get(e, "template"));
            if (!name || !src)
                return err_set(msg, ERR_FORMAT,
                               "'%s': chat_template[%zu]: expected an object "
                               "with string 'name' and 'template'",
                               c->cfg_path, i);
            if (strcmp(name, "default") == 0 && !tok->chat_template)
                tok->chat_template = xstrdup(src);
        }
        return 0;
    }
    return err_set(msg, ERR_FORMAT,
                   "'%s': chat_template: expected a string or a list of named templates",
                   c->cfg_path);
}

/* config.json's <typ>_token_id fills special ids still unknown. */
static int parse_model_config(struct ctx *c, const char *dir, struct hf_tokenizer *tok,
                              struct err_msg *msg)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root;
    struct err_msg local;
    int rc = load_json(path, &root, &local);
    if (rc == -ENOENT) return 0;
    if (rc) return err_set(msg, rc, "%s", local.text);
    static const char *keys[] = {"bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id"};
    int64_t *ids[] = {&tok->bos_id, &tok->eos_id, &tok->unk_id, &tok->pad_id};
    for (size_t k = 0; k < ARRAY_LEN(keys); k++) {
        json_t *v = json_object_get(root, keys[k]);
        if (!json_is_number(v) || *ids[k] >= 0) continue; /* lists, nulls: not a single id */
        if (!as_id(v, c->n, ids[k])) {
            rc = err_set(msg, ERR_FORMAT, "'%s': %s = %g is not a token id (0..%lld)", path,
                         keys[k], json_number_value(v), (long long)c->n - 1);
            break;
        }
    }
    json_decref(root);
    return rc;
}

int hf_tokenizer_load(const char *dir, const struct hf_tokenizer_opts *opts,
                      struct hf_tokenizer *tok, struct err_msg *msg)
{
    memset(tok, 0, sizeof(*tok));
    tok->bos_id = tok->eos_id = tok->unk_id = tok->pad_id = -1;
    char tok_path[4096], cfg_path[4096];
    snprintf(tok_path, sizeof(tok_path), "%s/tokenizer.json", dir);
    snprintf(cfg_path, sizeof(cfg_path), "%s/tokenizer_config.json", dir);
    struct ctx c = {.tok_path = tok_path, .cfg_path = cfg_path};
    int rc;
    if ((rc = load_json(tok_path, &c.tok_json, msg))) goto err;
    if ((rc = load_json(cfg_path, &c.cfg_json, msg))) goto err_free_tok;
    if ((rc = parse_vocab(&c, opts, tok, msg)) || (rc = parse_merges(&c, tok, msg)) ||
        (rc = detect_pre(&c, opts, tok, msg)) || (rc = parse_special(&c, tok, msg)) ||
        (rc = parse_template(&c, dir, tok, msg)) || (rc = parse_model_config(&c, dir, tok, msg)))
        goto err_free_cfg;
    tok->model = xstrdup(c.spm ? "llama" : "gpt2");
    parse_normalizer(&c, tok);
    if (c.spm) spm_scores(&c, tok);
    free(c.text);
    json_decref(c.cfg_json);
    json_decref(c.tok_json);
    return 0;

err_free_cfg:
    free(c.text);
    json_decref(c.cfg_json);
err_free_tok:
    json_decref(c.tok_json);
err:
    hf_tokenizer_release(tok);
    return rc;
}

void hf_tokenizer_release(struct hf_tokenizer *tok)
{
    if (tok->tokens)
        for (int64_t i = 0; i < tok->n_tokens; i++)
            free(tok->tokens[i]);
    if (tok->merges)
        for (int64_t i = 0; i < tok->n_merges; i++)
            free(tok->merges[i]);
    free(tok->tokens);
    free(tok->types);
    free(tok->scores);
    free(tok->merges);
    free(tok->model);
    free(tok->pre);
    free(tok->chat_template);
    if (tok->added_text)
        for (int64_t i = 0; i < tok->n_added; i++)
            free(tok->added_text[i]);
    free(tok->added_text);
    free(tok->added_ids);
    free(tok->added_flags);
    memset(tok, 0, sizeof(*tok));
    tok->bos_id = tok->eos_id = tok->unk_id = tok->pad_id = -1;
}

void hf_tokenizer_to_gguf(const struct hf_tokenizer *tok, struct gguf_writer *w)
{
    gguf_writer_set_str(w, "tokenizer.ggml.model", tok->model);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", tok->pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok->tokens,
                            (uint64_t)tok->n_tokens);
    gguf_writer_set_arr_i32(w, "tokenizer.ggml.token_type", tok->types, (uint64_t)tok->n_tokens);
    if (tok->scores)
        gguf_writer_set_arr_f32(w, "tokenizer.ggml.scores", tok->scores, (uint64_t)tok->n_tokens);
    if (tok->n_merges)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)tok->merges,
                                (uint64_t)tok->n_merges);
    static const char *id_keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                    "tokenizer.ggml.unknown_token_id",
                                    "tokenizer.ggml.padding_token_id"};
    const int64_t ids[] = {tok->bos_id, tok->eos_id, tok->unk_id, tok->pad_id};
    for (size_t k = 0; k < ARRAY_LEN(id_keys); k++)
        if (ids[k] >= 0) gguf_writer_set_u32(w, id_keys[k], (uint32_t)ids[k]);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", tok->add_bos);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", tok->add_eos);
    if (tok->chat_template) gguf_writer_set_str(w, "tokenizer.chat_template", tok->chat_template);
    if (tok->add_space_prefix >= 0)
        gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", tok->add_space_prefix == 1);
    gguf_writer_set_bool(w, "tokenizer.inferd.nfc", tok->nfc == 1);
    gguf_writer_set_bool(w, "tokenizer.inferd.ignore_merges", tok->ignore_merges == 1);
    gguf_writer_set_arr_i32(w, "tokenizer.inferd.added_ids", tok->added_ids,
                            (uint64_t)tok->n_added);
    gguf_writer_set_arr_i32(w, "tokenizer.inferd.added_flags", tok->added_flags,
                            (uint64_t)tok->n_added);
    gguf_writer_set_arr_str(w, "tokenizer.inferd.added_text", (const char *const *)tok->added_text,
                            (uint64_t)tok->n_added);
}

int64_t hf_tokenizer_find(const struct hf_tokenizer *tok, const char *text)
{
    for (int64_t i = 0; i < tok->n_tokens; i++)
        if (strcmp(tok->tokens[i], text) == 0) return i;
    return -1;
}
