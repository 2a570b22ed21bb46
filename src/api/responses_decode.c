/*
 * responses_decode.c - request decoder for the OpenAI Responses API
 * (POST /v1/responses).
 *
 * input is a string (one user message) or an array of items: messages
 * ({type: "message"?, role, content: string | [input_text | output_text]}),
 * function_call ({call_id, name, arguments}: an assistant tool-call turn)
 * and function_call_output ({call_id, output}: a "tool" message); other item
 * types (files, images, built-in tools) are refused by name.
 * The decoded items land in r->input_items as {role, content} messages; the
 * serving layer prepends the stored conversation of previous_response_id and
 * the turn's instructions (a system message that, as OpenAI documents, does
 * not carry over to the next turn) to build r->messages.
 */
#include "api/api.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A function_call item (an earlier answer's call, sent back with its
 * output): joins the assistant turn before it when that one is a tool-call
 * turn too, as parallel calls are one assistant message for the template. */
static int decode_call(const json_t *it, const char *path, json_t *out, struct api_request *r,
                       struct err_msg *msg)
{
    char p[96];
    const char *keys[] = {"call_id", "name", "arguments"};
    for (size_t k = 0; k < ARRAY_LEN(keys); k++) {
        if (!json_is_string(json_object_get(it, keys[k]))) {
            snprintf(p, sizeof(p), "%s.%s", path, keys[k]);
            return api_fail(r, msg, p, "expected a string");
        }
    }
    json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"), "type",
                             "function", "function", "name", json_object_get(it, "name"),
                             "arguments", json_object_get(it, "arguments"));
    json_t *last = json_array_get(out, json_array_size(out) - 1);
    json_t *calls = json_object_get(last, "tool_calls");
    if (last && json_is_array(calls) &&
        !strcmp(json_string_value(json_object_get(last, "role")), "assistant")) {
        json_array_append_new(calls, call);
        return 0;
    }
    json_array_append_new(
        out, json_pack("{s:s,s:n,s:[o]}", "role", "assistant", "content", "tool_calls", call));
    return 0;
}

static int decode_item(const json_t *it, size_t i, json_t *out, struct api_request *r,
                       struct err_msg *msg)
{
    char path[64], p[96];
    snprintf(path, sizeof(path), "input[%zu]", i);
    if (!json_is_object(it)) return api_fail(r, msg, path, "expected an object");
    const char *type = json_string_value(json_object_get(it, "type"));
    if (type && !strcmp(type, "function_call")) return decode_call(it, path, out, r, msg);
    if (type && !strcmp(type, "function_call_output")) {
        const json_t *id = json_object_get(it, "call_id");
        const json_t *output = json_object_get(it, "output");
        char *text = NULL;
        snprintf(p, sizeof(p), "%s.call_id", path);
        if (!json_is_string(id)) return api_fail(r, msg, p, "expected a string");
        snprintf(p, sizeof(p), "%s.output", path);
        if (!output) return api_fail(r, msg, p, "required");
        int rc = api_content_text(output, p, &text, r, msg);
        if (rc) return rc;
        json_array_append_new(
            out, json_pack("{s:s,s:s,s:O}", "role", "tool", "content", text, "tool_call_id", id));
        free(text);
        return 0;
    }
    if (type && strcmp(type, "message")) {
        snprintf(p, sizeof(p), "%s.type", path);
        return api_fail(r, msg, p,
                        "item type '%.40s' is not supported (message, function_call, "
                        "function_call_output)",
                        type);
    }
    const char *role = json_string_value(json_object_get(it, "role"));
    snprintf(p, sizeof(p), "%s.role", path);
    if (!role) return api_fail(r, msg, p, "expected a string");
    if (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
        strcmp(role, "developer"))
        return api_fail(r, msg, p, "'%.40s' is not one of user, assistant, system, developer",
                        role);
    snprintf(p, sizeof(p), "%s.content", path);
    const json_t *content = json_object_get(it, "content");
    if (!content) return api_fail(r, msg, p, "required");
    char *text = NULL;
    int rc = api_content_text(content, p, &text, r, msg);
    if (rc) return rc;
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(strcmp(role, "developer") ? role : "system"));
    json_object_set_new(m, "content", json_string(text));
    free(text);
    json_array_append_new(out, m);
    return 0;
}

int responses_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_RESPONSES;
    r->n = 1;
    r->store = true;
    inferd_sampling_default(&r->sp);
    json_t *root;
    int rc = api_parse_body(body, len, &root, r, msg);
    if (rc) return rc;
    double d;
    const json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model)) {
        rc = api_fail(r, msg, "model", "expected a string");
        goto out;
    }
    if (model) snprintf(r->model, sizeof(r->model), "%s", json_string_value(model));
    if ((rc = api_get_bool(root, "stream", &r->stream, r, msg))) goto out;
    if ((rc = api_get_bool(root, "store", &r->store, r, msg))) goto out;
    if ((rc = api_get_string(root, "previous_response_id", &r->previous_response_id, r, msg)))
        goto out;
    if ((rc = api_get_string(root, "instructions", &r->instructions, r, msg))) goto out;
    if ((rc = api_get_string(root, "user", &r->user, r, msg))) goto out;
    if ((rc = api_get_int(root, "max_output_tokens", 1, 1 << 24, &r->max_tokens, r, msg))) goto out;
    d = r->sp.temperature;
    if ((rc = api_get_number(root, "temperature", 0, 2, &d, r, msg))) goto out;
    r->sp.temperature = (float)d;
    d = r->sp.top_p;
    if ((rc = api_get_number(root, "top_p", 0, 1, &d, r, msg))) goto out;
    r->sp.top_p = d == 0 ? 1.0f : (float)d;
    const json_t *seed = json_object_get(root, "seed");
    if (json_is_integer(seed)) {
        r->sp.seed = (uint64_t)json_integer_value(seed);
        r->has_seed = true;
    }
    if ((rc = api_get_text_format(root, r, msg))) goto out;
    if ((rc = api_get_responses_tools(root, r, msg))) goto out;
    if ((rc = api_get_metadata(root, r, msg))) goto out;
    if ((rc = api_get_cache_class(root, r, msg))) goto out;
    if ((rc = api_check_unsupported(root, r, msg))) goto out;
    const json_t *input = json_object_get(root, "input");
    r->input_items = json_array();
    if (json_is_string(input)) {
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set(m, "content", (json_t *)input);
        json_array_append_new(r->input_items, m);
    } else if (json_is_array(input) && json_array_size(input) > 0) {
        size_t i;
        const json_t *it;
        json_array_foreach(input, i, it)
        {
            if ((rc = decode_item(it, i, r->input_items, r, msg))) goto out;
        }
    } else {
        rc = api_fail(r, msg, "input", "expected a string or a non-empty array of items");
        goto out;
    }
out:
    json_decref(root);
    return rc;
}
