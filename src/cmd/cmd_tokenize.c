/*
 * cmd_tokenize.c - `inferd tokenize`: text -> token ids with a model's
 * tokenizer, for operators checking a prompt and for the differential tests.
 *
 *   inferd tokenize -m MODEL.gguf [--ids|--pieces] [--special] [--] TEXT
 *   inferd tokenize --tokenizer DIR ...            (a tokenizer.json dir)
 *   inferd tokenize ... --batch FILE.jsonl          one JSON string per line in,
 *                                                   one JSON id array per line out
 *   inferd tokenize ... --batch FILE --decode       one JSON id array per line in,
 *                                                   one JSON string out; exits 1
 *                                                   if stream decoding disagrees
 *   inferd tokenize ... --bench FILE [--repeat N]   encode speed on FILE (MB/s,
 *                                                   one thread)
 *
 * Exit status: 0 ok, 1 failure (bad model, bad input line), 2 usage.
 */
#include "cmd/cmd.h"

#include "base/buf.h"
#include "base/check.h"
#include "cmd/opt.h"
#include "gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Writes s as a JSON string: UTF-8 passes through, invalid bytes become
 * U+FFFD (the text is for comparison, not for round trips of raw bytes). */
static void put_json_str(struct buf *o, const char *s, size_t n)
{
    buf_putc(o, '"');
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        if (c == '"' || c == '\\') {
            buf_putc(o, '\\');
            buf_putc(o, (char)c);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            buf_printf(o, "\\u%04x", c);
            i++;
        } else if (c < 0x80) {
            buf_putc(o, (char)c);
            i++;
        } else {
            size_t l = c >= 0xc2 && c <= 0xdf   ? 2
                       : c >= 0xe0 && c <= 0xef ? 3
                       : c >= 0xf0 && c <= 0xf4 ? 4
                                                : 0;
            bool ok = l && i + l <= n;
            for (size_t k = 1; ok && k < l; k++)
                ok = (u[i + k] & 0xc0) == 0x80;
            if (ok && l == 3) {
                unsigned cp = (c & 0x0f) << 12 | (u[i + 1] & 0x3f) << 6;
                ok = cp >= 0x800 && !(cp >= 0xd800 && cp <= 0xdfff);
            }
            if (ok && l == 4) {
                unsigned cp = (c & 0x07) << 18 | (u[i + 1] & 0x3f) << 12;
                ok = cp >= 0x10000 && cp <= 0x10ffff;
            }
            if (ok) {
                buf_append(o, s + i, l);
                i += l;
            } else {
                buf_puts(o, "\\ufffd");
                i++;
            }
        }
    }
    buf_putc(o, '"');
}

static void put_ids(struct buf *o, const struct tokenizer *t, const struct i32vec *ids, bool pieces)
{
    buf_putc(o, '[');
    for (size_t i = 0; i < ids->n; i++) {
        if (i) buf_putc(o, ',');
        if (pieces) {
            const char *p = tokenizer_piece(t, ids->v[i]);
            put_json_str(o, p, strlen(p));
        } else {
            buf_printf(o, "%d", ids->v[i]);
        }
    }
    buf_putc(o, ']');
}

static int load(const char *model, const char *dir, struct tokenizer **t)
{
    struct err_msg msg;
    int rc;
    if (dir) {
        rc = tokenizer_new_hf(dir, t, &msg);
    } else {
        struct gguf_file *f;
        rc = gguf_open(model, &f, &msg);
        if (rc == 0) {
            rc = tokenizer_new_gguf(f, t, &msg);
            gguf_close(f);
        }
    }
    if (rc)
        fprintf(stderr, "inferd: cannot load tokenizer from '%s': %s\n", dir ? dir : model,
                msg.text);
    return rc;
}

/* Decodes one JSON id array line both ways; 0, or 1 with a message. */
static int decode_line(const struct tokenizer *t, json_t *v, size_t line, bool skip, struct buf *o)
{
    if (!json_is_array(v)) {
        fprintf(stderr, "inferd: line %zu: expected a JSON array of ids\n", line);
        return 1;
    }
    size_t n = json_array_size(v);
    int32_t *ids = xmalloc((n + 1) * sizeof(*ids));
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < INT32_MIN ||
            json_integer_value(e) > INT32_MAX) {
            fprintf(stderr, "inferd: line %zu: element %zu is not an integer id\n", line, i);
            free(ids);
            return 1;
        }
        ids[i] = (int32_t)json_integer_value(e);
    }
    struct buf whole = {0}, streamed = {0};
    struct err_msg msg;
    int rc = tokenizer_decode(t, ids, n, skip, &whole, &msg);
    if (rc == 0) {
        struct tokenizer_stream s;
        tokenizer_stream_init(&s, skip);
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = tokenizer_stream_push(t, &s, ids[i], &streamed, &msg);
        tokenizer_stream_flush(t, &s, &streamed);
        tokenizer_stream_release(&s);
    }
    if (rc) {
        fprintf(stderr, "inferd: line %zu: %s\n", line, msg.text);
    } else if (whole.len != streamed.len ||
               memcmp(buf_str(&whole), buf_str(&streamed), whole.len)) {
        fprintf(stderr, "inferd: line %zu: stream decoding differs from whole decoding\n", line);
        rc = 1;
    } else {
        put_json_str(o, buf_str(&whole), whole.len);
    }
    buf_release(&whole);
    buf_release(&streamed);
    free(ids);
    return rc ? 1 : 0;
}

static int run_batch(const struct tokenizer *t, const char *path, unsigned flags, bool pieces,
                     bool decode, bool skip)
{
    FILE *fp = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "inferd: cannot open '%s'\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    struct buf o = {0};
    struct i32vec ids = {0};
    int status = 0;
    while ((len = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        json_error_t jerr;
        json_t *v = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!v) {
            fprintf(stderr, "inferd: %s: line %zu: invalid JSON: %s\n", path, lineno, jerr.text);
            status = 1;
            break;
        }
        buf_clear(&o);
        if (decode) {
            status = decode_line(t, v, lineno, skip, &o);
        } else if (!json_is_string(v)) {
            fprintf(stderr, "inferd: %s: line %zu: expected a JSON string\n", path, lineno);
            status = 1;
        } else {
            ids.n = 0;
            tokenizer_encode(t, json_string_value(v), json_string_length(v), flags, &ids);
            put_ids(&o, t, &ids, pieces);
        }
        json_decref(v);
        if (status) break;
        buf_putc(&o, '\n');
        fwrite(o.data, 1, o.len, stdout);
    }
    free(line);
    buf_release(&o);
    i32vec_release(&ids);
    if (fp != stdin) fclose(fp);
    return status;
}

static int run_bench(const struct tokenizer *t, const char *path, long repeat, unsigned flags)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "inferd: cannot open '%s'\n", path);
        return 1;
    }
    struct buf text = {0};
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), fp)) > 0)
        buf_append(&text, chunk, got);
    fclose(fp);
    struct i32vec ids = {0};
    tokenizer_encode(t, buf_str(&text), text.len, flags, &ids); /* warm-up */
    size_t n_tokens = ids.n;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long r = 0; r < repeat; r++) {
        ids.n = 0;
        tokenizer_encode(t, buf_str(&text), text.len, flags, &ids);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
    printf("{\"bytes\":%zu,\"tokens\":%zu,\"repeat\":%ld,\"seconds\":%.6f,\"mb_per_s\":%.3f}\n",
           text.len, n_tokens, repeat, s, (double)text.len * (double)repeat / s / 1e6);
    buf_release(&text);
    i32vec_release(&ids);
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *dir = NULL, *batch = NULL, *bench = NULL, *text = NULL;
    bool pieces = false, decode = false, skip = false;
    unsigned flags = 0;
    long repeat = 5;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model whose tokenizer to use", &model),
        CMD_OPT_STR("tokenizer", 0, "DIR",
                    "a directory with tokenizer.json and tokenizer_config.json", &dir),
        CMD_OPT_SET("ids", 0, "print ids (default)", &pieces, false),
        CMD_OPT_SET("pieces", 0, "print the vocabulary entries instead of ids", &pieces, true),
        CMD_OPT_BITS("special", 0, "match special-token text (\"<|im_end|>\") as special tokens",
                     &flags, TOKENIZER_PARSE_SPECIAL),
        CMD_OPT_BITS("add-special", 0, "add BOS / EOS as the model's config says", &flags,
                     TOKENIZER_ADD_SPECIAL),
        CMD_OPT_STR("batch", 0, "FILE", "one JSON string per line -> one JSON id array per line",
                    &batch),
        CMD_OPT_FLAG("decode", 0,
                     "with --batch: JSON id arrays -> JSON strings (checks that\n"
                     "stream decoding gives the same text)",
                     &decode),
        CMD_OPT_FLAG("skip-special", 0, "with --decode: drop control tokens", &skip),
        /* hidden: bench/tokenizer */
        CMD_OPT_STR("bench", 0, "FILE", NULL, &bench),
        CMD_OPT_INT("repeat", 0, "N", NULL, &repeat, 1, 1000000),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "tokenize",
        .synopsis = "(-m MODEL.gguf | --tokenizer DIR) [options] [--] [TEXT]",
        .about =
            "Prints the token ids of TEXT (a JSON array) as the model's tokenizer makes them.\n"
            "TEXT may begin with '-' after '--'.",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (argc - argi > 1) return cmd_usage_error(&spec, "give the text as one argument");
    if (argi < argc) text = argv[argi];
    if (!model == !dir) return cmd_usage_error(&spec, "give one of -m MODEL and --tokenizer DIR");
    if (!text && !batch && !bench) return cmd_usage_error(&spec, "give a TEXT or --batch FILE");
    struct tokenizer *t;
    if (load(model, dir, &t)) return 1;
    int status;
    if (bench) {
        status = run_bench(t, bench, repeat, flags);
    } else if (batch) {
        status = run_batch(t, batch, flags, pieces, decode, skip);
    } else {
        struct i32vec ids = {0};
        struct buf o = {0};
        tokenizer_encode(t, text, strlen(text), flags, &ids);
        put_ids(&o, t, &ids, pieces);
        printf("%s\n", buf_str(&o));
        i32vec_release(&ids);
        buf_release(&o);
        status = 0;
    }
    tokenizer_free(t);
    return status;
}
