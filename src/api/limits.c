/*
 * limits.c - what a request may not ask for: features inferd does not have,
 * metadata beyond OpenAI's limits, prompts beyond the context.
 *
 * Unimplemented fields. The SDKs send many optional fields, and new ones
 * every release, so an unknown field is accepted. A *known* field is
 * decided once, here or in docs/api.md's table, by one question: could
 * ignoring it change the answer? Fields that only tune latency, billing,
 * caching or routing on the provider's side (service_tier,
 * prompt_cache_key, speed, ...) are accepted and ignored. Fields that ask
 * for output inferd cannot make (audio, built-in tools, reasoning effort,
 * background runs, server-held conversations, ...) are refused with a 400
 * naming the field, unless their value asks for nothing (null, false, [],
 * the API's default), which SDKs and frameworks often send as is. The table
 * below holds each refused field with the values that pass; fields that the
 * decoders read themselves (tools, tool_choice, content parts, item types)
 * are refused there, with the offending element's path.
 *
 * Thread: the event-loop thread, like every decoder. Pure functions.
 */
#include "api/api.h"

#include "base/check.h"

#include <stdio.h>
#include <string.h>

#define KIND(k) (1u << (k))

/* Predicates over a present, non-null value: true when it asks for nothing
 * inferd lacks. */
static bool never(const json_t *v)
{
    (void)v;
    return false;
}

static bool is_false(const json_t *v)
{
    return json_is_false(v);
}

static bool is_empty(const json_t *v)
{
    return (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

static bool is_empty_string(const json_t *v)
{
    return json_is_string(v) && json_string_length(v) == 0;
}

static bool is_one(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) == 1;
}

static bool is_zero(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) == 0;
}

static bool is_str(const json_t *v, const char *s)
{
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* reasoning effort "none" is what a model without reasoning does anyway */
static bool no_reasoning(const json_t *v)
{
    return is_str(v, "none");
}

/* OpenAI's default verbosity; the only one a model without the knob has */
static bool medium(const json_t *v)
{
    return is_str(v, "medium");
}

/* Anthropic's default effort */
static bool high(const json_t *v)
{
    return is_str(v, "high");
}

static bool text_only(const json_t *v)
{
    if (!json_is_array(v)) return false;
    size_t i;
    const json_t *m;
    json_array_foreach(v, i, m)
    {
        if (!is_str(m, "text")) return false;
    }
    return true;
}

static bool thinking_off(const json_t *v)
{
    return json_is_object(v) && is_str(json_object_get(v, "type"), "disabled");
}

/* Responses include: every value names extra data of items inferd never
 * makes (images, built-in tool results, encrypted reasoning), except the
 * output logprobs, which would be missing. */
static bool no_logprobs_include(const json_t *v)
{
    if (!json_is_array(v)) return false;
    size_t i;
    const json_t *m;
    json_array_foreach(v, i, m)
    {
        if (!json_is_string(m) || is_str(m, "message.output_text.logprobs")) return false;
    }
    return true;
}

struct refusal {
    unsigned kinds;               /* KIND(api_kind) bits of the APIs that have the field */
    const char *path;             /* field, "parent.child" for a nested one */
    bool (*fine)(const json_t *); /* values that ask for nothing missing */
    const char *why;              /* message after "path: " */
};

static const struct refusal refusals[] = {
    {KIND(API_CHAT), "audio", never, "audio output is not supported (text only)"},
    {KIND(API_CHAT), "modalities", text_only, "only [\"text\"] is supported (no audio output)"},
    {KIND(API_CHAT), "functions", is_empty,
     "the deprecated functions field is not supported; use tools"},
    {KIND(API_CHAT), "function_call", never,
     "the deprecated function_call field is not supported; use tool_choice"},
    {KIND(API_CHAT), "web_search_options", never,
     "web search is not supported (inferd runs no built-in tools)"},
    {KIND(API_CHAT), "reasoning_effort", no_reasoning,
     "this model has no reasoning effort to set; only \"none\" is accepted"},
    {KIND(API_CHAT), "verbosity", medium,
     "this model has no verbosity setting; only \"medium\" is accepted"},
    {KIND(API_CHAT) | KIND(API_RESPONSES), "moderation", never, "moderation is not supported"},
    {KIND(API_COMPLETION), "best_of", is_one, "best_of > 1 is not supported; use n"},
    {KIND(API_COMPLETION), "suffix", is_empty_string, "suffix (insertion) is not supported"},
    {KIND(API_RESPONSES), "background", is_false, "background responses are not supported"},
    {KIND(API_RESPONSES), "conversation", never,
     "conversations are not supported; use previous_response_id"},
    {KIND(API_RESPONSES), "prompt", never,
     "reusable prompts are not supported; send input and instructions"},
    {KIND(API_RESPONSES), "context_management", is_empty,
     "context management (compaction) is not supported"},
    {KIND(API_RESPONSES), "reasoning.effort", no_reasoning,
     "this model has no reasoning effort to set; only \"none\" is accepted"},
    {KIND(API_RESPONSES), "text.verbosity", medium,
     "this model has no verbosity setting; only \"medium\" is accepted"},
    {KIND(API_RESPONSES), "top_logprobs", is_zero,
     "logprobs are not supported on the Responses API (use Chat Completions)"},
    {KIND(API_RESPONSES), "include", no_logprobs_include,
     "expected an array of strings without message.output_text.logprobs (no logprobs on the "
     "Responses API)"},
    {KIND(API_MESSAGES), "container", never,
     "containers are not supported (inferd runs no server tools)"},
    {KIND(API_MESSAGES), "mcp_servers", is_empty, "MCP servers are not supported"},
    {KIND(API_MESSAGES), "thinking", thinking_off,
     "extended thinking is not supported; only {\"type\": \"disabled\"} is accepted"},
    {KIND(API_MESSAGES), "output_config.effort", high,
     "this model has no effort levels; only \"high\" (the default) is accepted"},
    {KIND(API_MESSAGES), "context_management", never, "context management is not supported"},
    {KIND(API_MESSAGES), "compaction", never, "compaction is not supported"},
    {KIND(API_MESSAGES), "thread", never,
     "server-held threads are not supported; send the whole conversation"},
};

int api_check_unsupported(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    for (size_t i = 0; i < ARRAY_LEN(refusals); i++) {
        const struct refusal *f = &refusals[i];
        if (!(f->kinds & KIND(r->kind))) continue;
        const json_t *v = root;
        const char *dot = strchr(f->path, '.');
        if (dot) {
            char parent[32];
            snprintf(parent, sizeof(parent), "%.*s", (int)(dot - f->path), f->path);
            v = json_object_get(root, parent);
            if (!v || json_is_null(v)) continue;
            if (!json_is_object(v)) return api_fail(r, msg, parent, "expected an object");
            v = json_object_get(v, dot + 1);
        } else {
            v = json_object_get(root, f->path);
        }
        if (!v || json_is_null(v) || f->fine(v)) continue;
        return api_fail(r, msg, f->path, "%s", f->why);
    }
    return 0;
}

/* Characters of UTF-8 text (jansson strings are valid UTF-8). */
static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

enum { META_MAX_KEYS = 16, META_MAX_KEY = 64, META_MAX_VALUE = 512 };

int api_get_metadata(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const json_t *md = json_object_get(root, "metadata");
    if (!md || json_is_null(md)) return 0;
    if (!json_is_object(md))
        return api_fail(r, msg, "metadata", "expected an object of string values");
    if (json_object_size(md) > META_MAX_KEYS)
        return api_fail(r, msg, "metadata", "at most %d keys, got %zu", META_MAX_KEYS,
                        json_object_size(md));
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)md, key, v)
    {
        char p[96];
        snprintf(p, sizeof(p), "metadata.%s", key); /* cut to fit */
        size_t n_key = utf8_chars(key, strlen(key));
        if (n_key > META_MAX_KEY)
            return api_fail(r, msg, p, "keys are at most %d characters, this one has %zu",
                            META_MAX_KEY, n_key);
        if (!json_is_string(v)) return api_fail(r, msg, p, "expected a string");
        size_t n_val = utf8_chars(json_string_value(v), json_string_length(v));
        if (n_val > META_MAX_VALUE)
            return api_fail(r, msg, p, "values are at most %d characters, this one has %zu",
                            META_MAX_VALUE, n_val);
    }
    json_decref(r->metadata);
    r->metadata = json_incref((json_t *)md);
    return 0;
}

/* The prompt's field in each API, for "param". */
static const char *prompt_field(enum api_kind kind)
{
    switch (kind) {
    case API_COMPLETION:
        return "prompt";
    case API_RESPONSES:
        return "input";
    default:
        return "messages";
    }
}

int api_check_context(struct api_request *r, int n_prompt, int max_ctx, struct err_msg *msg)
{
    /* at least one token must be generated */
    int answer = r->max_tokens > 0 ? r->max_tokens : 1;
    if ((long)n_prompt + answer <= max_ctx) return 0;
    snprintf(r->bad_param, sizeof(r->bad_param), "%s", prompt_field(r->kind));
    long total = (long)n_prompt + answer;
    bool prompt_alone = n_prompt >= max_ctx || r->max_tokens <= 0;
    switch (r->kind) {
    case API_CHAT:
        if (prompt_alone)
            return err_set(msg, ERR_CONTEXT,
                           "This model's maximum context length is %d tokens. However, your "
                           "messages resulted in %d tokens. Please reduce the length of the "
                           "messages.",
                           max_ctx, n_prompt);
        return err_set(msg, ERR_CONTEXT,
                       "This model's maximum context length is %d tokens. However, you requested "
                       "%ld tokens (%d in the messages, %d in the completion). Please reduce the "
                       "length of the messages or completion.",
                       max_ctx, total, n_prompt, r->max_tokens);
    case API_COMPLETION:
        return err_set(msg, ERR_CONTEXT,
                       "This model's maximum context length is %d tokens, however you requested "
                       "%ld tokens (%d in your prompt; %d for the completion). Please reduce your "
                       "prompt; or completion length.",
                       max_ctx, total, n_prompt, answer);
    case API_RESPONSES:
        if (prompt_alone)
            return err_set(msg, ERR_CONTEXT,
                           "Your input exceeds the context window of this model. This model's "
                           "maximum context length is %d tokens; your input resulted in %d "
                           "tokens. Please adjust your input and try again.",
                           max_ctx, n_prompt);
        return err_set(msg, ERR_CONTEXT,
                       "Your input exceeds the context window of this model. This model's "
                       "maximum context length is %d tokens; you requested %ld tokens (%d in "
                       "the input, %d in max_output_tokens). Please adjust your input or "
                       "max_output_tokens and try again.",
                       max_ctx, total, n_prompt, r->max_tokens);
    case API_MESSAGES:
        if (prompt_alone)
            return err_set(msg, ERR_CONTEXT, "prompt is too long: %d tokens > %d maximum", n_prompt,
                           max_ctx - 1);
        return err_set(msg, ERR_CONTEXT,
                       "input length and `max_tokens` exceed context limit: %d + %d > %d, "
                       "decrease input length or `max_tokens` and try again",
                       n_prompt, r->max_tokens, max_ctx);
    }
    CHECK(0);
    return ERR_INTERNAL;
}
