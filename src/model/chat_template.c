/*
 * chat_template.c - apply_chat_template over the Jinja interpreter.
 *
 * The render context is built per call as a small JSON object that refers
 * to (does not copy) the caller's messages and tools:
 *
 *   { "messages": [...], "tools": [...] (when given),
 *     "add_generation_prompt": bool, "bos_token": "...", "eos_token": "...",
 *     ...every member of kwargs (enable_thinking, date_string, ...) }
 *
 * Messages are validated (an array of objects with a string role) and only
 * the ones that need it are rewritten into copies:
 *   - content given as an array whose parts are all {"type": "text"} becomes
 *     the texts joined with "\n" (what the OpenAI API means by such an
 *     array; templates that handle arrays themselves see other arrays as-is);
 *   - tool_calls[].function.arguments given as a JSON string becomes the
 *     object it encodes (the templates apply tojson to it), except for
 *     templates that paste the arguments into the prompt as text with '+'
 *     (DeepSeek-V3's), which get a string: objects there are serialized as
 *     Python's json.dumps would;
 *   - "content": null (OpenAI's assistant turn that only calls tools)
 *     becomes "", except for templates that test content against none
 *     themselves (DeepSeek-V3's): elsewhere None would print as "None" or
 *     fail a string method.
 *
 * Thread safety: the struct is immutable after chat_template_new; every
 * apply builds its own context and render state.
 */
#include "model/chat_template.h"

#include "base/check.h"
#include "gguf/gguf.h"
#include "model/jinja/jinja.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>

struct chat_template {
    struct jinja_template *t; /* the parsed template */
    json_t *bos;              /* JSON string: bos_token */
    json_t *eos;              /* JSON string: eos_token */
    bool args_as_text;        /* template concatenates function.arguments as a string */
    bool null_content;        /* template tests content against none: keep null */
};

/* Does the template compare message content with none itself? */
static bool tests_content_none(const char *src)
{
    static const char *const pats[] = {"content'] is none",      "content\"] is none",
                                       "content is none",        "content'] is not none",
                                       "content\"] is not none", "content is not none"};
    for (size_t i = 0; i < ARRAY_LEN(pats); i++)
        for (const char *at = strstr(src, pats[i]); at; at = strstr(at + 1, pats[i])) {
            /* "content", not the end of another name ("reasoning_content") */
            char before = at > src ? at[-1] : ' ';
            if (!isalnum((unsigned char)before) && before != '_') return true;
        }
    return false;
}

/* Does the template use arguments as text ("... arguments'] + ...")? */
static bool uses_arguments_as_text(const char *src)
{
    static const char *const pats[] = {"['arguments'] +",  "[\"arguments\"] +", "['arguments']+",
                                       "[\"arguments\"]+", ".arguments +",      ".arguments+"};
    for (size_t i = 0; i < ARRAY_LEN(pats); i++)
        if (strstr(src, pats[i])) return true;
    return false;
}

int chat_template_new(const char *src, const char *bos_text, const char *eos_text,
                      struct chat_template **out, struct err_msg *msg)
{
    *out = NULL;
    struct chat_template *ct = xcalloc(1, sizeof(*ct));
    int rc = jinja_parse(src, strlen(src), &ct->t, msg);
    if (rc) {
        free(ct);
        return rc;
    }
    ct->bos = json_string(bos_text ? bos_text : "");
    ct->eos = json_string(eos_text ? eos_text : "");
    if (!ct->bos || !ct->eos) {
        chat_template_free(ct);
        return err_set(msg, ERR_INVALID, "chat template: bos/eos token text is not valid UTF-8");
    }
    ct->args_as_text = uses_arguments_as_text(src);
    ct->null_content = tests_content_none(src);
    *out = ct;
    return 0;
}

void chat_template_free(struct chat_template *ct)
{
    if (!ct) return;
    jinja_free(ct->t);
    json_decref(ct->bos);
    json_decref(ct->eos);
    free(ct);
}

/* Joined text of an all-text content array, or NULL (not all text). */
static json_t *joined_text(const json_t *content)
{
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!type || strcmp(type, "text") || !json_is_string(json_object_get(part, "text")))
            return NULL;
    }
    struct buf b = {0};
    json_array_foreach(content, i, part)
    {
        if (i) buf_putc(&b, '\n');
        json_t *t = json_object_get(part, "text");
        buf_append(&b, json_string_value(t), json_string_length(t));
    }
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    buf_release(&b);
    return s;
}

/* Rewrites one tool call's arguments as the template wants them; returns a
 * new reference to the call (a copy when changed) or NULL with msg set. */
static json_t *fix_tool_call(const struct chat_template *ct, json_t *call, size_t mi, size_t ci,
                             struct err_msg *msg, int *rc)
{
    json_t *fn = json_object_get(call, "function");
    json_t *args = fn ? json_object_get(fn, "arguments") : NULL;
    if (!json_is_object(call)) {
        *rc =
            err_set(msg, ERR_INVALID, "messages[%zu].tool_calls[%zu]: expected an object", mi, ci);
        return NULL;
    }
    if (fn && !json_is_object(fn)) {
        *rc = err_set(msg, ERR_INVALID,
                      "messages[%zu].tool_calls[%zu].function: expected an object", mi, ci);
        return NULL;
    }
    json_t *new_args = NULL;
    if (args && json_is_string(args) && !ct->args_as_text) {
        json_error_t jerr;
        new_args = json_loadb(json_string_value(args), json_string_length(args),
                              JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!new_args) {
            *rc = err_set(msg, ERR_INVALID,
                          "messages[%zu].tool_calls[%zu].function.arguments: not valid JSON (%s)",
                          mi, ci, jerr.text);
            return NULL;
        }
    } else if (args && !json_is_string(args) && ct->args_as_text) {
        /* json.dumps layout: ", " and ": " separators, non-ASCII kept. */
        char *s = json_dumps(args, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!s) {
            *rc = err_set(msg, ERR_INVALID,
                          "messages[%zu].tool_calls[%zu].function.arguments: cannot serialize", mi,
                          ci);
            return NULL;
        }
        /* Compact jansson output uses "," and ":"; re-space them outside strings. */
        struct buf b = {0};
        bool in_str = false;
        for (const char *p = s; *p; p++) {
            buf_putc(&b, *p);
            if (in_str) {
                if (*p == '\\' && p[1])
                    buf_putc(&b, *++p);
                else if (*p == '"')
                    in_str = false;
            } else if (*p == '"') {
                in_str = true;
            } else if (*p == ',' || *p == ':') {
                buf_putc(&b, ' ');
            }
        }
        free(s);
        new_args = json_stringn(b.data, b.len);
        buf_release(&b);
    }
    if (!new_args) return json_incref(call);
    json_t *c2 = json_copy(call);
    json_t *f2 = json_copy(fn);
    json_object_set_new(f2, "arguments", new_args);
    json_object_set_new(c2, "function", f2);
    return c2;
}

/* Validates messages; returns a new reference to them or to a rewritten copy. */
static json_t *prepare_messages(const struct chat_template *ct, const json_t *messages,
                                struct err_msg *msg, int *rc)
{
    if (!json_is_array(messages)) {
        *rc = err_set(msg, ERR_INVALID, "messages: expected an array");
        return NULL;
    }
    json_t *out = NULL; /* copy made on the first change */
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        if (!json_is_object(m)) {
            *rc = err_set(msg, ERR_INVALID, "messages[%zu]: expected an object", i);
            goto err;
        }
        if (!json_is_string(json_object_get(m, "role"))) {
            *rc = err_set(msg, ERR_INVALID, "messages[%zu].role: expected a string", i);
            goto err;
        }
        json_t *content = json_object_get(m, "content");
        json_t *calls = json_object_get(m, "tool_calls");
        json_t *new_content = NULL, *new_calls = NULL;
        if (content && json_is_array(content)) new_content = joined_text(content);
        if (content && json_is_null(content) && !ct->null_content) new_content = json_string("");
        if (calls && !json_is_null(calls)) {
            if (!json_is_array(calls)) {
                *rc = err_set(msg, ERR_INVALID, "messages[%zu].tool_calls: expected an array", i);
                goto err;
            }
            size_t k;
            json_t *call;
            bool changed = false;
            new_calls = json_array();
            json_array_foreach(calls, k, call)
            {
                json_t *c = fix_tool_call(ct, call, i, k, msg, rc);
                if (!c) {
                    json_decref(new_calls);
                    json_decref(new_content);
                    goto err;
                }
                changed |= c != call;
                json_array_append_new(new_calls, c);
            }
            if (!changed) {
                json_decref(new_calls);
                new_calls = NULL;
            }
        }
        if (!new_content && !new_calls) continue;
        if (!out) out = json_copy((json_t *)messages);
        json_t *m2 = json_copy(m);
        if (new_content) json_object_set_new(m2, "content", new_content);
        if (new_calls) json_object_set_new(m2, "tool_calls", new_calls);
        json_array_set_new(out, i, m2);
    }
    return out ? out : json_incref((json_t *)messages);
err:
    json_decref(out);
    return NULL;
}

int chat_template_apply(const struct chat_template *ct, const json_t *messages, const json_t *tools,
                        bool add_generation_prompt, const json_t *kwargs, struct buf *out,
                        struct err_msg *msg)
{
    int rc = 0;
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return err_set(msg, ERR_INVALID, "tools: expected an array");
    if (kwargs && !json_is_object(kwargs) && !json_is_null(kwargs))
        return err_set(msg, ERR_INVALID, "chat template kwargs: expected an object");
    json_t *msgs = prepare_messages(ct, messages, msg, &rc);
    if (!msgs) return rc;
    json_t *ctx = json_object();
    json_object_set_new(ctx, "messages", msgs);
    if (tools && !json_is_null(tools)) json_object_set(ctx, "tools", (json_t *)tools);
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_set(ctx, "bos_token", ct->bos);
    json_object_set(ctx, "eos_token", ct->eos);
    if (kwargs && json_is_object(kwargs)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)kwargs, k, v) json_object_set(ctx, k, v);
    }
    rc = jinja_render(ct->t, ctx, out, msg);
    json_decref(ctx);
    return rc;
}

/* Text of the token whose id is stored under key, or "" (heap string). */
static int token_text(const struct gguf_file *f, const char *key, char **out, struct err_msg *msg)
{
    *out = NULL;
    uint64_t id, n_tokens;
    int rc = gguf_get_u64(f, key, &id, msg);
    if (rc == -ENOENT) {
        *out = xstrdup("");
        return 0;
    }
    if (rc) return rc;
    enum gguf_vtype et;
    rc = gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &n_tokens, NULL, msg);
    if (rc == -ENOENT)
        return err_set(msg, ERR_FORMAT, "gguf: %s is set but tokenizer.ggml.tokens is missing",
                       key);
    if (rc) return rc;
    if (et != GGUF_VTYPE_STRING)
        return err_set(msg, ERR_FORMAT, "gguf: tokenizer.ggml.tokens: expected strings");
    if (id >= n_tokens)
        return err_set(msg, ERR_FORMAT, "gguf: %s = %llu, outside the %llu tokens", key,
                       (unsigned long long)id, (unsigned long long)n_tokens);
    struct gguf_str s = gguf_arr_str(f, "tokenizer.ggml.tokens", id);
    char *t = xmalloc(s.len + 1);
    memcpy(t, s.ptr, s.len);
    t[s.len] = 0;
    *out = t;
    return 0;
}

int chat_template_from_gguf(const struct gguf_file *f, struct chat_template **out,
                            struct err_msg *msg)
{
    *out = NULL;
    struct gguf_str src;
    int rc = gguf_get_str(f, "tokenizer.chat_template", &src, msg);
    if (rc == -ENOENT) return err_set(msg, ERR_NOT_FOUND, "model has no tokenizer.chat_template");
    if (rc) return rc;
    char *bos = NULL, *eos = NULL;
    if ((rc = token_text(f, "tokenizer.ggml.bos_token_id", &bos, msg))) goto out;
    if ((rc = token_text(f, "tokenizer.ggml.eos_token_id", &eos, msg))) goto out;
    char *text = xmalloc(src.len + 1);
    memcpy(text, src.ptr, src.len);
    text[src.len] = 0;
    if (memchr(src.ptr, 0, src.len)) {
        rc = err_set(msg, ERR_FORMAT, "gguf: tokenizer.chat_template contains a NUL byte");
    } else {
        rc = chat_template_new(text, bos, eos, out, msg);
    }
    free(text);
out:
    free(bos);
    free(eos);
    return rc;
}
