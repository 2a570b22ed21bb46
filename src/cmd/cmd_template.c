/*
 * cmd_template.c - `inferd template`: renders a chat through a model's chat
 * template and prints the prompt text, exactly what the API layer would
 * feed the tokenizer.
 *
 *   inferd template -m MODEL.gguf --messages FILE [--tools FILE]
 *                   [--no-generation-prompt] [--kwargs JSON]
 *   (--template FILE [--bos TEXT] [--eos TEXT] | --tokenizer DIR) instead of -m
 *
 * --messages FILE holds a JSON array of messages, or an object with
 * "messages" (and optionally "tools"). Two modes for tests and tuning:
 *   --batch FILE   JSONL, one case per line: {"messages": [...], "tools":
 *                  [...], "add_generation_prompt": bool, "kwargs": {...},
 *                  optionally "template": "..." to use instead of the given one};
 *                  prints one JSON line per case: {"text": "..."} or
 *                  {"error": "..."} (what the differential tests read);
 *   --bench N      renders the chat N times, prints the mean time per render.
 */
#include "cmd/cmd.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/timeutil.h"
#include "cmd/opt.h"
#include "gguf/gguf.h"
#include "model/chat_template.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "inferd: cannot open '%s': %s\n", path, strerror(errno));
        return NULL;
    }
    struct buf b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        buf_append(&b, chunk, n);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "inferd: cannot read '%s'\n", path);
        buf_release(&b);
        return NULL;
    }
    if (len) *len = b.len;
    if (!b.data) return xstrdup("");
    return b.data;
}

static json_t *load_json(const char *path, size_t flags)
{
    json_error_t e;
    json_t *j = json_load_file(path, JSON_DECODE_ANY | flags, &e);
    if (!j) fprintf(stderr, "inferd: '%s': line %d: %s\n", path, e.line, e.text);
    return j;
}

/* A special token in tokenizer_config.json: a string or {"content": ...}. */
static const char *special_text(const json_t *cfg, const char *key)
{
    const json_t *t = json_object_get(cfg, key);
    if (json_is_object(t)) t = json_object_get(t, "content");
    return json_is_string(t) ? json_string_value(t) : "";
}

/* The template and bos/eos text of a Hugging Face tokenizer dir, read from
 * tokenizer_config.json alone (tokenizer.json is not needed to render). */
static int from_tokenizer_dir(const char *dir, struct chat_template **ct)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    /* model_max_length is often 1e30, past jansson's integers. */
    json_t *cfg = load_json(path, JSON_DECODE_INT_AS_REAL);
    if (!cfg) return ERR_INVALID;
    const json_t *t = json_object_get(cfg, "chat_template");
    const char *src = json_string_value(t);
    if (json_is_array(t)) {
        size_t i;
        const json_t *e;
        json_array_foreach(t, i, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, "default"))
                src = json_string_value(json_object_get(e, "template"));
        }
    }
    if (!src) {
        fprintf(stderr,
                "inferd: '%s': no chat_template (a string, or a list with one named "
                "\"default\")\n",
                path);
        json_decref(cfg);
        return ERR_NOT_FOUND;
    }
    struct err_msg msg = {{0}};
    int rc = chat_template_new(src, special_text(cfg, "bos_token"), special_text(cfg, "eos_token"),
                               ct, &msg);
    if (rc) fprintf(stderr, "inferd: '%s': chat_template: %s\n", path, msg.text);
    json_decref(cfg);
    return rc;
}

static int run_batch(const struct chat_template *ct, const char *path)
{
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return 1;
    struct buf out = {0}, line_out = {0};
    char *p = text, *end = text + len;
    size_t lineno = 0;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        lineno++;
        if (n == 0) {
            p += 1;
            continue;
        }
        json_error_t e;
        json_t *c = json_loadb(p, n, 0, &e);
        p += n + (nl ? 1 : 0);
        json_t *res = json_object();
        if (!c || !json_is_object(c)) {
            char m[256];
            snprintf(m, sizeof(m), "%s line %zu: %s", path, lineno,
                     c ? "expected an object" : e.text);
            json_object_set_new(res, "error", json_string(m));
        } else {
            json_t *gp = json_object_get(c, "add_generation_prompt");
            struct err_msg msg = {{0}};
            buf_clear(&out);
            /* A case may bring its own template (language tests). */
            const char *own = json_string_value(json_object_get(c, "template"));
            struct chat_template *use = (struct chat_template *)ct;
            int rc = 0;
            if (own) rc = chat_template_new(own, "", "", &use, &msg);
            if (!rc)
                rc = chat_template_apply(use, json_object_get(c, "messages"),
                                         json_object_get(c, "tools"), gp ? json_is_true(gp) : true,
                                         json_object_get(c, "kwargs"), &out, &msg);
            if (own && use != ct) chat_template_free(use);
            if (rc)
                json_object_set_new(res, "error", json_string(msg.text));
            else
                json_object_set_new(res, "text", json_stringn(out.data ? out.data : "", out.len));
        }
        json_decref(c);
        char *s = json_dumps(res, JSON_COMPACT | JSON_ENSURE_ASCII);
        buf_clear(&line_out);
        fputs(s ? s : "{\"error\":\"cannot encode result\"}", stdout);
        fputc('\n', stdout);
        free(s);
        json_decref(res);
    }
    buf_release(&out);
    buf_release(&line_out);
    free(text);
    return 0;
}

int cmd_template(int argc, char **argv)
{
    const char *model = NULL, *tpl = NULL, *tokdir = NULL, *messages_path = NULL;
    const char *tools_path = NULL, *kwargs_text = NULL, *batch = NULL;
    const char *bos = "", *eos = "";
    bool gen_prompt = true;
    long bench = 0;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE",
                    "GGUF model: tokenizer.chat_template, bos/eos from its vocabulary", &model),
        CMD_OPT_STR("template", 0, "FILE",
                    "a Jinja template file (bos/eos from --bos / --eos, default \"\")", &tpl),
        CMD_OPT_STR("tokenizer", 0, "DIR", "a Hugging Face tokenizer dir (tokenizer_config.json)",
                    &tokdir),
        CMD_OPT_STR("messages", 0, "FILE",
                    "JSON array of messages, or {\"messages\": [...], \"tools\": [...]}",
                    &messages_path),
        CMD_OPT_STR("tools", 0, "FILE", "JSON array of tool definitions", &tools_path),
        CMD_OPT_STR("kwargs", 0, "JSON",
                    "extra template variables, e.g. '{\"enable_thinking\": false}'", &kwargs_text),
        CMD_OPT_SET("no-generation-prompt", 0, "do not open an assistant turn at the end",
                    &gen_prompt, false),
        CMD_OPT_STR("bos", 0, "TEXT", "bos_token for --template", &bos),
        CMD_OPT_STR("eos", 0, "TEXT", "eos_token for --template", &eos),
        CMD_OPT_STR("batch", 0, "FILE", "JSONL cases in, JSON lines {\"text\"} / {\"error\"} out",
                    &batch),
        CMD_OPT_INT("bench", 0, "N", "render N times and print the time per render", &bench, 1,
                    100000000),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "template",
        .synopsis = "(-m MODEL.gguf | --template FILE | --tokenizer DIR)\n"
                    "--messages FILE [--tools FILE] [--no-generation-prompt]\n"
                    "[--kwargs JSON] [--bos TEXT] [--eos TEXT]\n"
                    "[--batch FILE.jsonl] [--bench N]",
        .about = "Prints the prompt the model's chat template makes of a conversation.",
        .epilog =
            "strftime_now uses INFERD_TEMPLATE_NOW (seconds since the epoch, UTC) when set.\n",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    if (!!model + !!tpl + !!tokdir != 1)
        return cmd_usage_error(&spec, "give exactly one of -m, --template, --tokenizer");
    if (!messages_path && !batch)
        return cmd_usage_error(&spec, "--messages FILE (or --batch FILE) is required");

    struct chat_template *ct = NULL;
    struct err_msg msg = {{0}};
    int status = 1;
    if (model) {
        struct gguf_file *f;
        int rc = gguf_open(model, &f, &msg);
        if (rc) {
            fprintf(stderr, "inferd: cannot open model '%s': %s\n", model,
                    msg.text[0] ? msg.text : err_str(rc));
            return 1;
        }
        rc = chat_template_from_gguf(f, &ct, &msg);
        gguf_close(f);
        if (rc) {
            fprintf(stderr, "inferd: '%s': %s\n", model, msg.text);
            return 1;
        }
    } else if (tpl) {
        char *src = read_file(tpl, NULL);
        if (!src) return 1;
        int rc = chat_template_new(src, bos, eos, &ct, &msg);
        free(src);
        if (rc) {
            fprintf(stderr, "inferd: '%s': %s\n", tpl, msg.text);
            return 1;
        }
    } else if (from_tokenizer_dir(tokdir, &ct)) {
        return 1;
    }

    if (batch) {
        status = run_batch(ct, batch);
        chat_template_free(ct);
        return status;
    }

    json_t *messages = NULL, *tools = NULL, *kwargs = NULL, *doc = load_json(messages_path, 0);
    if (!doc) goto out;
    if (json_is_object(doc)) {
        messages = json_incref(json_object_get(doc, "messages"));
        tools = json_incref(json_object_get(doc, "tools"));
    } else {
        messages = json_incref(doc);
    }
    if (tools_path) {
        json_decref(tools);
        if (!(tools = load_json(tools_path, 0))) goto out;
    }
    if (kwargs_text) {
        json_error_t e;
        kwargs = json_loads(kwargs_text, 0, &e);
        if (!kwargs || !json_is_object(kwargs)) {
            fprintf(stderr, "inferd: --kwargs: expected a JSON object (%s)\n",
                    kwargs ? "not an object" : e.text);
            goto out;
        }
    }
    struct buf out = {0};
    int rc = chat_template_apply(ct, messages, tools, gen_prompt, kwargs, &out, &msg);
    if (rc) {
        fprintf(stderr, "inferd: %s\n", msg.text);
        buf_release(&out);
        goto out;
    }
    if (bench) {
        /* CPU time as well as wall time: on a busy machine the wall clock
         * also counts the time other processes held the core. */
        struct timespec c0, c1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
        double t0 = time_now_s();
        for (long i = 0; i < bench; i++) {
            buf_clear(&out);
            chat_template_apply(ct, messages, tools, gen_prompt, kwargs, &out, &msg);
        }
        double dt = time_now_s() - t0;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9;
        printf("%ld renders, %zu bytes each: %.2f us per render (CPU %.2f us)\n", bench, out.len,
               dt * 1e6 / (double)bench, cpu * 1e6 / (double)bench);
    } else {
        fwrite(out.data ? out.data : "", 1, out.len, stdout);
    }
    buf_release(&out);
    status = 0;
out:
    json_decref(doc);
    json_decref(messages);
    json_decref(tools);
    json_decref(kwargs);
    chat_template_free(ct);
    return status;
}
