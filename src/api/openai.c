/*
 * openai.c - request decoders for OpenAI Chat Completions and Completions.
 *
 * Chat: messages (system, developer, user, assistant, tool) are brought into
 * the shape the chat template expects: content as one string (text parts
 * joined; other part types are refused, this server has no vision), role
 * "developer" read as "system", assistant tool_calls / tool_call_id / name
 * passed through. Completions: prompt as a string, an array of strings, an
 * array of token ids, or an array of such arrays; each prompt is its own set
 * of n choices, indexed prompt * n + j as OpenAI does.
 *
 * Sampling fields shared by both (openai_decode_sampling): temperature,
 * top_p, top_k, min_p, presence / frequency / repetition penalties, seed,
 * logit_bias, stop, n, max_tokens (max_completion_tokens for chat), user,
 * stream, stream_options.include_usage. Ranges are OpenAI's where it has one
 * (temperature 0..2, penalties -2..2, logit bias -100..100, 4 stops). Fields
 * for features inferd lacks (audio, web search, ...) are refused by
 * api_check_unsupported (limits.c).
 */
#include "api/api.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode_logit_bias(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const json_t *v = json_object_get(root, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return api_fail(r, msg, "logit_bias", "expected an object of token id -> bias");
    if (json_object_size(v) > API_MAX_BIAS)
        return api_fail(r, msg, "logit_bias", "at most %d entries", API_MAX_BIAS);
    r->bias = xcalloc(json_object_size(v) + 1, sizeof(*r->bias));
    const char *key;
    const json_t *b;
    json_object_foreach((json_t *)v, key, b)
    {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id > INT32_MAX)
            return api_fail(r, msg, "logit_bias", "key '%.40s' is not a token id", key);
        if (!json_is_number(b) || json_number_value(b) < -100 || json_number_value(b) > 100)
            return api_fail(r, msg, "logit_bias",
                            "bias of token %ld must be a number in [-100, 100]", id);
        r->bias[r->n_bias].token = (int32_t)id;
        r->bias[r->n_bias++].bias = (float)json_number_value(b);
    }
    r->sp.logit_bias = r->bias;
    r->sp.n_logit_bias = r->n_bias;
    return 0;
}

/* Fields common to chat and completions. */
static int decode_common(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    int rc;
    double d;
    const json_t *model = json_object_get(root, "model");
    if (model && !json_is_string(model)) return api_fail(r, msg, "model", "expected a string");
    if (model) snprintf(r->model, sizeof(r->model), "%s", json_string_value(model));
    inferd_sampling_default(&r->sp);
    r->n = 1;
    if ((rc = api_get_bool(root, "stream", &r->stream, r, msg))) return rc;
    /* vLLM's extension, which benchmark clients send so that an answer has
     * the length they asked for */
    if ((rc = api_get_bool(root, "ignore_eos", &r->ignore_eos, r, msg))) return rc;
    const json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return api_fail(r, msg, "stream_options", "expected an object");
        if ((rc = api_get_bool(so, "include_usage", &r->include_usage, r, msg))) {
            snprintf(r->bad_param, sizeof(r->bad_param), "stream_options.include_usage");
            return rc;
        }
    }
    d = r->sp.temperature;
    if ((rc = api_get_number(root, "temperature", 0, 2, &d, r, msg))) return rc;
    r->sp.temperature = (float)d;
    d = r->sp.top_p;
    if ((rc = api_get_number(root, "top_p", 0, 1, &d, r, msg))) return rc;
    r->sp.top_p = (float)d;
    if (r->sp.top_p == 0.0f) r->sp.top_p = 1.0f; /* 0 reads as "off" here, as in vLLM */
    int k = 0;
    if ((rc = api_get_int(root, "top_k", -1, 1 << 20, &k, r, msg))) return rc;
    r->sp.top_k = k < 0 ? 0 : k;
    d = 0;
    if ((rc = api_get_number(root, "min_p", 0, 1, &d, r, msg))) return rc;
    r->sp.min_p = (float)d;
    d = 0;
    if ((rc = api_get_number(root, "presence_penalty", -2, 2, &d, r, msg))) return rc;
    r->sp.presence_penalty = (float)d;
    d = 0;
    if ((rc = api_get_number(root, "frequency_penalty", -2, 2, &d, r, msg))) return rc;
    r->sp.frequency_penalty = (float)d;
    d = 1;
    if ((rc = api_get_number(root, "repetition_penalty", 0.01, 10, &d, r, msg))) return rc;
    r->sp.repetition_penalty = (float)d;
    const json_t *seed = json_object_get(root, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return api_fail(r, msg, "seed", "expected an integer");
        r->sp.seed = (uint64_t)json_integer_value(seed);
        r->has_seed = true;
    }
    if ((rc = api_get_int(root, "n", 1, API_MAX_N, &r->n, r, msg))) return rc;
    if ((rc = api_get_stop(root, "stop", 4, r, msg))) return rc;
    if ((rc = api_get_string(root, "user", &r->user, r, msg))) return rc;
    if ((rc = decode_logit_bias(root, r, msg))) return rc;
    if ((rc = api_get_int(root, "max_tokens", 1, 1 << 24, &r->max_tokens, r, msg))) return rc;
    if ((rc = api_get_int(root, "priority", -1000000, 1000000, &r->priority, r, msg))) return rc;
    if ((rc = api_get_response_format(root, r, msg))) return rc;
    if ((rc = api_get_cache_class(root, r, msg))) return rc;
    return api_check_unsupported(root, r, msg);
}

static int decode_message(const json_t *m, size_t i, json_t *out, struct api_request *r,
                          struct err_msg *msg)
{
    char path[64];
    snprintf(path, sizeof(path), "messages[%zu]", i);
    if (!json_is_object(m)) return api_fail(r, msg, path, "expected an object");
    const char *role = json_string_value(json_object_get(m, "role"));
    char p[96];
    snprintf(p, sizeof(p), "%s.role", path);
    if (!role) return api_fail(r, msg, p, "expected a string");
    if (strcmp(role, "system") && strcmp(role, "developer") && strcmp(role, "user") &&
        strcmp(role, "assistant") && strcmp(role, "tool"))
        return api_fail(r, msg, p, "'%.40s' is not one of system, developer, user, assistant, tool",
                        role);
    json_t *o = json_object();
    json_object_set_new(o, "role", json_string(strcmp(role, "developer") ? role : "system"));
    const json_t *content = json_object_get(m, "content");
    snprintf(p, sizeof(p), "%s.content", path);
    if (!content || json_is_null(content)) {
        if (strcmp(role, "assistant")) {
            json_decref(o);
            return api_fail(r, msg, p, "required for role '%s'", role);
        }
        /* null stays null: the chat template decides (DeepSeek's tells a
         * tool-call turn by it) */
        json_object_set_new(o, "content", json_null());
    } else {
        char *text = NULL;
        int rc = api_content_text(content, p, &text, r, msg);
        if (rc) {
            json_decref(o);
            return rc;
        }
        json_object_set_new(o, "content", json_string(text));
        free(text);
        if (!json_object_get(o, "content")) { /* not UTF-8: jansson refused it */
            json_decref(o);
            return api_fail(r, msg, p, "invalid UTF-8");
        }
    }
    const char *pass[] = {"name", "tool_calls", "tool_call_id"};
    for (size_t j = 0; j < ARRAY_LEN(pass); j++) {
        json_t *v = json_object_get(m, pass[j]);
        if (v && !json_is_null(v)) json_object_set(o, pass[j], v);
    }
    json_array_append_new(out, o);
    return 0;
}

int openai_chat_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_CHAT;
    json_t *root;
    int rc = api_parse_body(body, len, &root, r, msg);
    if (rc) return rc;
    if ((rc = decode_common(root, r, msg))) goto out;
    if ((rc = api_get_int(root, "max_completion_tokens", 1, 1 << 24, &r->max_tokens, r, msg)))
        goto out;
    if ((rc = api_get_bool(root, "logprobs", &r->logprobs, r, msg))) goto out;
    if ((rc = api_get_int(root, "top_logprobs", 0, 20, &r->top_logprobs, r, msg))) goto out;
    if (r->top_logprobs > 0 && !r->logprobs) {
        rc = api_fail(r, msg, "top_logprobs", "requires logprobs: true");
        goto out;
    }
    if ((rc = api_get_tools(root, r, msg))) goto out;
    if ((rc = api_get_metadata(root, r, msg))) goto out;
    const json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        rc = api_fail(r, msg, "messages", "expected a non-empty array of messages");
        goto out;
    }
    r->messages = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m)
    {
        if ((rc = decode_message(m, i, r->messages, r, msg))) goto out;
    }
out:
    json_decref(root);
    return rc;
}

static int decode_ids(const json_t *a, const char *path, struct i32vec *out, struct api_request *r,
                      struct err_msg *msg)
{
    size_t i;
    const json_t *t;
    if (json_array_size(a) == 0) return api_fail(r, msg, path, "must not be empty");
    json_array_foreach(a, i, t)
    {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            char p[80];
            snprintf(p, sizeof(p), "%s[%zu]", path, i);
            return api_fail(r, msg, p, "expected a token id (integer >= 0)");
        }
        i32vec_push(out, (int32_t)json_integer_value(t));
    }
    return 0;
}

static int decode_prompt(const json_t *p, struct api_request *r, struct err_msg *msg)
{
    if (json_is_string(p)) {
        r->prompts = xcalloc(1, sizeof(*r->prompts));
        r->n_prompts = 1;
        r->prompts[0].text = xstrdup(json_string_value(p));
        return 0;
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return api_fail(r, msg, "prompt",
                        "expected a string, an array of strings, or token ids (non-empty)");
    const json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        r->prompts = xcalloc(1, sizeof(*r->prompts));
        r->n_prompts = 1;
        return decode_ids(p, "prompt", &r->prompts[0].ids, r, msg);
    }
    if (json_array_size(p) > API_MAX_PROMPTS)
        return api_fail(r, msg, "prompt", "at most %d prompts per request", API_MAX_PROMPTS);
    r->prompts = xcalloc(json_array_size(p), sizeof(*r->prompts));
    size_t i;
    const json_t *e;
    json_array_foreach(p, i, e)
    {
        char path[64];
        snprintf(path, sizeof(path), "prompt[%zu]", i);
        r->n_prompts++;
        if (json_is_string(e)) {
            r->prompts[i].text = xstrdup(json_string_value(e));
        } else if (json_is_array(e)) {
            int rc = decode_ids(e, path, &r->prompts[i].ids, r, msg);
            if (rc) return rc;
        } else {
            return api_fail(r, msg, path, "expected a string or an array of token ids");
        }
    }
    return 0;
}

int openai_completion_decode(const char *body, size_t len, struct api_request *r,
                             struct err_msg *msg)
{
    memset(r, 0, sizeof(*r));
    r->kind = API_COMPLETION;
    json_t *root;
    int rc = api_parse_body(body, len, &root, r, msg);
    if (rc) return rc;
    r->max_tokens = 16; /* the Completions API's documented default */
    if ((rc = decode_common(root, r, msg))) goto out;
    const json_t *lp = json_object_get(root, "logprobs");
    if (lp && !json_is_null(lp)) {
        if ((rc = api_get_int(root, "logprobs", 0, 20, &r->top_logprobs, r, msg))) goto out;
        r->logprobs = true;
    }
    if ((rc = api_get_bool(root, "echo", &r->echo, r, msg))) goto out;
    const json_t *p = json_object_get(root, "prompt");
    if (!p) {
        rc = api_fail(r, msg, "prompt", "required");
        goto out;
    }
    rc = decode_prompt(p, r, msg);
out:
    json_decref(root);
    return rc;
}
