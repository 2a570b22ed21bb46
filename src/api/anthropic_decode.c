/*
 * anthropic_decode.c - request decoder for the Anthropic Messages API
 * (POST /v1/messages and /v1/messages/count_tokens).
 *
 * system: a string or an array of text blocks, becomes the first message
 * (role "system") for the chat template. messages: user / assistant turns
 * whose content is a string or text blocks (image, tool_use, tool_result
 * blocks are refused by name). max_tokens is required for /v1/messages, as
 * Anthropic requires it; stop_sequences has no documented cap, ours is
 * API_MAX_STOP. temperature is 0..1 in this API.
 */
#include "api/api.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if ((rc = api_get_anthropic_tools(root, r, msg))) goto out;
    const json_t *md = json_object_get(root, "metadata");
    if (md && !json_is_null(md)) {
        if (!json_is_object(md)) {
            rc = api_fail(r, msg, "metadata", "expected an object");
            goto out;
        }
        if ((rc = api_get_string(md, "user_id", &r->user, r, msg))) {
            snprintf(r->bad_param, sizeof(r->bad_param), "metadata.user_id");
            goto out;
        }
    }
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
        char *text = NULL;
        if ((rc = api_content_text(content, p, &text, r, msg))) goto out;
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(role));
        json_object_set_new(o, "content", json_string(text));
        free(text);
        json_array_append_new(r->messages, o);
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
