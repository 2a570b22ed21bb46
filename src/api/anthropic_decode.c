/*
 * anthropic_decode.c - request decoder for the Anthropic Messages API
 * (POST /v1/messages and /v1/messages/count_tokens).
 *
 * system: a string or an array of text blocks, becomes the first message
 * (role "system") for the chat template. messages: user / assistant turns
 * whose content is a string or blocks: text, tool_use (assistant: its
 * tool_calls), tool_result (user: "tool" messages); others (image, document)
 * are refused by name. max_tokens is required for /v1/messages, as
 * Anthropic requires it; stop_sequences has no documented cap, ours is
 * API_MAX_STOP. temperature is 0..1 in this API. Structured outputs come as
 * output_config.format or the beta's output_format (api_format.c); server
 * tools, MCP servers, containers and extended thinking are refused
 * (api_check_unsupported, limits.c).
 */
#include "api/api.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One turn's content: a string, or blocks. Text blocks are joined; an
 * assistant's tool_use blocks become its tool_calls (arguments as JSON text,
 * the OpenAI shape the template layer expects); a user's tool_result blocks
 * become "tool" messages before the user's own text (if any). */
static int decode_turn(const char *role, const json_t *content, const char *path, json_t *out,
                       struct api_request *r, struct err_msg *msg)
{
    char p[128];
    bool assistant = !strcmp(role, "assistant");
    json_t *text_parts = json_array(), *calls = json_array();
    size_t n_results = 0;
    int rc = 0;
    if (json_is_array(content)) {
        size_t i;
        const json_t *b;
        json_array_foreach(content, i, b)
        {
            snprintf(p, sizeof(p), "%s[%zu]", path, i);
            const char *type = json_string_value(json_object_get(b, "type"));
            if (type && !strcmp(type, "tool_use") && assistant) {
                const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
                const json_t *input = json_object_get(b, "input");
                if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
                    rc = api_fail(r, msg, p,
                                  "tool_use: expected {\"id\": string, \"name\": string, "
                                  "\"input\": object}");
                    goto out;
                }
                char *args = json_dumps(input, JSON_COMPACT);
                json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type",
                                                       "function", "function", "name", name,
                                                       "arguments", args));
                free(args);
            } else if (type && !strcmp(type, "tool_result") && !assistant) {
                const json_t *id = json_object_get(b, "tool_use_id");
                const json_t *rc_content = json_object_get(b, "content");
                char *text = NULL;
                if (!json_is_string(id)) {
                    rc = api_fail(r, msg, p, "tool_result: expected a string tool_use_id");
                    goto out;
                }
                if (rc_content && !json_is_null(rc_content)) {
                    char cp[160];
                    snprintf(cp, sizeof(cp), "%s.content", p);
                    if ((rc = api_content_text(rc_content, cp, &text, r, msg))) goto out;
                }
                json_array_append_new(out, json_pack("{s:s,s:s,s:O}", "role", "tool", "content",
                                                     text ? text : "", "tool_call_id", id));
                free(text);
                n_results++;
            } else {
                json_array_append(text_parts, (json_t *)b);
            }
        }
    } else {
        json_array_append(text_parts, (json_t *)content);
    }
    char *text = NULL;
    const json_t *tc = json_is_array(content) ? text_parts : json_array_get(text_parts, 0);
    if ((rc = api_content_text(tc, path, &text, r, msg))) goto out;
    if (n_results && !*text && !json_array_size(calls)) {
        free(text);
        goto out; /* only tool results: no empty user turn after them */
    }
    json_t *o = json_object();
    json_object_set_new(o, "role", json_string(role));
    json_object_set_new(o, "content",
                        json_array_size(calls) && !*text ? json_null() : json_string(text));
    free(text);
    if (json_array_size(calls)) json_object_set(o, "tool_calls", calls);
    json_array_append_new(out, o);
out:
    json_decref(text_parts);
    json_decref(calls);
    return rc;
}

/* metadata: Anthropic's has user_id only (a string of up to 256
 * characters, or null), and refuses other keys. */
static int decode_metadata(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const json_t *md = json_object_get(root, "metadata");
    if (!md || json_is_null(md)) return 0;
    if (!json_is_object(md)) return api_fail(r, msg, "metadata", "expected an object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)md, key, v)
    {
        char p[96];
        snprintf(p, sizeof(p), "metadata.%s", key); /* cut to fit */
        if (strcmp(key, "user_id"))
            return api_fail(r, msg, p, "unknown field (metadata has only user_id)");
        if (json_is_null(v)) continue;
        if (!json_is_string(v)) return api_fail(r, msg, p, "expected a string");
        size_t n = 0;
        const char *c = json_string_value(v);
        for (size_t i = 0; i < json_string_length(v); i++)
            n += ((unsigned char)c[i] & 0xc0) != 0x80; /* characters, not bytes */
        if (n > 256) return api_fail(r, msg, p, "at most 256 characters, got %zu", n);
        free(r->user);
        r->user = xstrdup(json_string_value(v));
    }
    return 0;
}

static int decode(const char *body, size_t len, bool need_max, struct api_request *r,
                  struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_MESSAGES;
    r->n = 1;
    inferd_sampling_default(&r->sp);
    json_t *root;
    int rc = api_parse_body(body, len, &root, r, msg);
    if (rc) return rc;
    double d;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_string(model)) {
        rc = api_fail(r, msg, "model", "required string");
        goto out;
    }
    snprintf(r->model, sizeof(r->model), "%s", json_string_value(model));
    if (need_max) {
        if (!json_object_get(root, "max_tokens")) {
            rc = api_fail(r, msg, "max_tokens", "required");
            goto out;
        }
        if ((rc = api_get_int(root, "max_tokens", 1, 1 << 24, &r->max_tokens, r, msg))) goto out;
    }
    if ((rc = api_get_bool(root, "stream", &r->stream, r, msg))) goto out;
    d = r->sp.temperature;
    if ((rc = api_get_number(root, "temperature", 0, 1, &d, r, msg))) goto out;
    r->sp.temperature = (float)d;
    d = r->sp.top_p;
    if ((rc = api_get_number(root, "top_p", 0, 1, &d, r, msg))) goto out;
    r->sp.top_p = d == 0 ? 1.0f : (float)d;
    int k = 0;
    if ((rc = api_get_int(root, "top_k", 0, 1 << 20, &k, r, msg))) goto out;
    r->sp.top_k = k;
    if ((rc = api_get_stop(root, "stop_sequences", API_MAX_STOP, r, msg))) goto out;
    if ((rc = api_get_output_format(root, r, msg))) goto out;
    if ((rc = api_get_anthropic_tools(root, r, msg))) goto out;
    if ((rc = decode_metadata(root, r, msg))) goto out;
    if ((rc = api_get_cache_class(root, r, msg))) goto out;
    if ((rc = api_check_unsupported(root, r, msg))) goto out;
    r->messages = json_array();
    const json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        char *text = NULL;
        if ((rc = api_content_text(sys, "system", &text, r, msg))) goto out;
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("system"));
        json_object_set_new(m, "content", json_string(text));
        free(text);
        json_array_append_new(r->messages, m);
    }
    const json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        rc = api_fail(r, msg, "messages", "expected a non-empty array of messages");
        goto out;
    }
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char path[64], p[96];
        snprintf(path, sizeof(path), "messages[%zu]", i);
        if (!json_is_object(m)) {
            rc = api_fail(r, msg, path, "expected an object");
            goto out;
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(p, sizeof(p), "%s.role", path);
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            rc = api_fail(r, msg, p, "expected \"user\" or \"assistant\"");
            goto out;
        }
        snprintf(p, sizeof(p), "%s.content", path);
        const json_t *content = json_object_get(m, "content");
        if (!content) {
            rc = api_fail(r, msg, p, "required");
            goto out;
        }
        if ((rc = decode_turn(role, content, p, r->messages, r, msg))) goto out;
    }
out:
    json_decref(root);
    return rc;
}

int anthropic_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg)
{
    return decode(body, len, true, r, msg);
}

int anthropic_count_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg)
{
    return decode(body, len, false, r, msg);
}
