/*
 * api_format.c - the structured-output and tool fields of the OpenAI request
 * bodies, decoded into api_request.grammar_kind / grammar_src / tools.
 *
 * The grammar itself is compiled later (the server's prep threads, through
 * inferd_grammar_compile and the model's compile cache), so this file only
 * checks shapes and picks the kind, and records which field gave it
 * (grammar_param) for the 400 of a schema the compiler refuses. Schemas are
 * passed on as compact JSON text.
 *
 * Thread: any (the server decodes on its prep threads).
 */
#include "api/api.h"

#include "base/check.h"

#include <string.h>

/* Sets the constraint once; a second one is an error naming param. */
static int set_constraint(struct api_request *r, struct err_msg *msg, const char *param,
                          enum inferd_grammar_kind kind, char *src)
{
    if (r->grammar_kind != INFERD_GRAMMAR_NONE) {
        free(src);
        return api_fail(r, msg, param,
                        "only one of response_format (json), grammar and regex may be given");
    }
    r->grammar_kind = kind;
    r->grammar_src = src;
    snprintf(r->grammar_param, sizeof(r->grammar_param), "%s", param);
    return 0;
}

/* fmt: {"type": ..., schema at schema_obj["schema"]}; path names fmt. */
static int decode_format(const json_t *fmt, const json_t *schema_obj, const char *path,
                         struct api_request *r, struct err_msg *msg)
{
    char p[96];
    if (!json_is_object(fmt)) return api_fail(r, msg, path, "expected an object");
    const char *type = json_string_value(json_object_get(fmt, "type"));
    snprintf(p, sizeof(p), "%s.type", path);
    if (!type) return api_fail(r, msg, p, "expected a string");
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object"))
        return set_constraint(r, msg, path, INFERD_GRAMMAR_JSON_OBJECT, xstrdup(""));
    if (strcmp(type, "json_schema"))
        return api_fail(r, msg, p, "'%.40s' is not one of text, json_object, json_schema", type);
    if (!json_is_object(schema_obj)) {
        snprintf(p, sizeof(p), "%s.json_schema", path);
        return api_fail(r, msg, p, "expected an object with a schema");
    }
    const json_t *schema = json_object_get(schema_obj, "schema");
    snprintf(p, sizeof(p), "%s%s.schema", path, schema_obj == fmt ? "" : ".json_schema");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return api_fail(r, msg, p, "expected a JSON Schema object");
    const json_t *strict = json_object_get(schema_obj, "strict");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict)) {
        snprintf(p, sizeof(p), "%s%s.strict", path, schema_obj == fmt ? "" : ".json_schema");
        return api_fail(r, msg, p, "expected a boolean");
    }
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(text);
    return set_constraint(r, msg, path, INFERD_GRAMMAR_JSON_SCHEMA, text);
}

int api_get_response_format(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    int rc;
    const json_t *rf = json_object_get(root, "response_format");
    if (rf && !json_is_null(rf)) {
        const json_t *js = json_object_get(rf, "json_schema");
        if ((rc = decode_format(rf, js, "response_format", r, msg))) return rc;
    }
    static const struct {
        const char *key;
        enum inferd_grammar_kind kind;
    } extra[] = {{"grammar", INFERD_GRAMMAR_EBNF}, {"regex", INFERD_GRAMMAR_REGEX}};
    for (size_t i = 0; i < ARRAY_LEN(extra); i++) {
        const json_t *v = json_object_get(root, extra[i].key);
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v) || json_string_length(v) == 0)
            return api_fail(r, msg, extra[i].key, "expected a non-empty string");
        if ((rc = set_constraint(r, msg, extra[i].key, extra[i].kind,
                                 xstrdup(json_string_value(v)))))
            return rc;
    }
    return 0;
}

int api_get_text_format(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const json_t *text = json_object_get(root, "text");
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return api_fail(r, msg, "text", "expected an object");
    const json_t *fmt = json_object_get(text, "format");
    if (!fmt || json_is_null(fmt)) return 0;
    int rc = decode_format(fmt, fmt, "text.format", r, msg);
    if (!rc) r->text_format = json_incref((json_t *)fmt); /* echoed as sent */
    return rc;
}

/* Tool names as OpenAI and Anthropic define them: 1..64 of [A-Za-z0-9_-]
 * (dots too, which some clients use). The parser matches names as plain
 * text and grammars write them literally, so nothing else may pass. */
static int check_name(const char *name, const char *path, struct api_request *r,
                      struct err_msg *msg)
{
    size_t n = strlen(name);
    bool ok = n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-' || c == '.';
    }
    if (!ok)
        return api_fail(r, msg, path,
                        "tool names are 1 to 64 characters of a-z, A-Z, 0-9, '_', '-', '.'");
    return 0;
}

/* A forced choice must name a tool the request defines, and leaves no room
 * for another constraint on the same output. */
static int check_choice(struct api_request *r, struct err_msg *msg)
{
    if (r->tool_choice != API_TOOL_CHOICE_REQUIRED && r->tool_choice != API_TOOL_CHOICE_NAMED)
        return 0;
    if (!r->tools)
        return api_fail(r, msg, "tool_choice", "forces a tool call but no tools are given");
    if (r->grammar_kind != INFERD_GRAMMAR_NONE)
        return api_fail(r, msg, "tool_choice",
                        "a forced tool call cannot be combined with response_format, text.format, "
                        "grammar or regex (both would constrain the same output)");
    if (r->tool_choice == API_TOOL_CHOICE_NAMED) {
        size_t i;
        const json_t *t;
        json_array_foreach(r->tools, i, t)
        {
            const char *name =
                json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            if (name && !strcmp(name, r->tool_name)) return 0;
        }
        return api_fail(r, msg, "tool_choice", "names '%.64s', which is not one of the tools",
                        r->tool_name);
    }
    return 0;
}

/* "auto" | "none" | "required" (any = the Anthropic spelling of required). */
static int choice_word(const char *c, const char *required, struct api_request *r)
{
    if (!strcmp(c, "auto"))
        r->tool_choice = API_TOOL_CHOICE_AUTO;
    else if (!strcmp(c, "none"))
        r->tool_choice = API_TOOL_CHOICE_NONE;
    else if (!strcmp(c, required))
        r->tool_choice = API_TOOL_CHOICE_REQUIRED;
    else
        return -1;
    return 0;
}

static void set_named(struct api_request *r, const char *name)
{
    r->tool_choice = API_TOOL_CHOICE_NAMED;
    free(r->tool_name);
    r->tool_name = xstrdup(name);
}

/* OpenAI tool_choice (Chat and Responses): "auto" | "none" | "required", or
 * {"type": "function", ...} naming one tool; name is read where that API
 * keeps it, shape spells the object form for the error. */
static int openai_choice(const json_t *choice, const char *name, const char *shape,
                         struct api_request *r, struct err_msg *msg)
{
    if (choice && !json_is_null(choice)) {
        const char *c = json_string_value(choice);
        const char *type = json_string_value(json_object_get(choice, "type"));
        if (c) {
            if (choice_word(c, "required", r))
                return api_fail(r, msg, "tool_choice", "'%.40s' is not one of auto, none, required",
                                c);
        } else if (type && !strcmp(type, "function") && name) {
            set_named(r, name);
        } else {
            return api_fail(r, msg, "tool_choice",
                            "expected \"auto\", \"none\", \"required\" or %s", shape);
        }
    }
    return check_choice(r, msg);
}

/* Appends tools[i] as an OpenAI Chat function definition to out, after
 * checking its name (Responses and Anthropic tools are rewritten so). */
static int add_function(json_t *out, size_t i, const json_t *name, const json_t *desc,
                        const json_t *params, struct api_request *r, struct err_msg *msg)
{
    char p[64];
    snprintf(p, sizeof(p), "tools[%zu].name", i);
    int rc = check_name(json_string_value(name), p, r, msg);
    if (rc) return rc;
    json_t *fn = json_pack("{s:O}", "name", name);
    if (json_is_string(desc)) json_object_set(fn, "description", (json_t *)desc);
    if (json_is_object(params)) json_object_set(fn, "parameters", (json_t *)params);
    json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    return 0;
}

/* parallel_tool_calls (OpenAI Chat, Responses; default true). */
static int parallel_calls(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    bool parallel = true;
    int rc = api_get_bool(root, "parallel_tool_calls", &parallel, r, msg);
    r->one_call = !parallel;
    return rc;
}

int api_get_tools(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) return api_fail(r, msg, "tools", "expected an array");
        size_t i;
        const json_t *t;
        json_array_foreach(tools, i, t)
        {
            char p[64];
            snprintf(p, sizeof(p), "tools[%zu]", i);
            const json_t *fn = json_object_get(t, "function");
            const json_t *params = json_object_get(fn, "parameters");
            if (!json_is_object(t) || !json_is_object(fn) ||
                !json_is_string(json_object_get(fn, "name")) ||
                (params && !json_is_object(params) && !json_is_null(params)))
                return api_fail(r, msg, p,
                                "expected {\"type\": \"function\", \"function\": {\"name\", "
                                "\"parameters\": object, ...}}");
            snprintf(p, sizeof(p), "tools[%zu].function.name", i);
            int rc = check_name(json_string_value(json_object_get(fn, "name")), p, r, msg);
            if (rc) return rc;
        }
        if (json_array_size(tools) > 0) r->tools = json_incref((json_t *)tools);
    }
    int rc = parallel_calls(root, r, msg);
    if (rc) return rc;
    const json_t *choice = json_object_get(root, "tool_choice");
    const char *name =
        json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
    return openai_choice(choice, name, "{\"type\": \"function\", \"function\": {\"name\": string}}",
                         r, msg);
}

/* Responses and Anthropic tool lists ({name, description, <params_key>}),
 * rewritten as OpenAI Chat function definitions into r->tools. only_type:
 * the one "type" a tool may name besides none ("function" / "custom"): the
 * others are tools the provider runs itself (web search, code execution,
 * ...), which inferd has not, and says so in `others`; shape spells a tool
 * for the error. */
static int rewrite_tools(const json_t *tools, const char *params_key, const char *only_type,
                         const char *others, const char *shape, struct api_request *r,
                         struct err_msg *msg)
{
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return api_fail(r, msg, "tools", "expected an array");
    json_t *out = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t)
    {
        char p[64];
        snprintf(p, sizeof(p), "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        const json_t *name = json_object_get(t, "name");
        const json_t *desc = json_object_get(t, "description");
        const json_t *params = json_object_get(t, params_key);
        int rc;
        const json_t *tv = json_object_get(t, "type");
        if (tv && !json_is_null(tv) && (!type || strcmp(type, only_type)))
            rc = api_fail(r, msg, p, "tool type '%.40s' is not supported: %s (%s tools only)",
                          type ? type : "?", others, only_type);
        else if (!json_is_object(t) || !json_is_string(name) ||
                 (desc && !json_is_string(desc) && !json_is_null(desc)) ||
                 (params && !json_is_object(params) && !json_is_null(params)))
            rc = api_fail(r, msg, p, "expected %s", shape);
        else
            rc = add_function(out, i, name, desc, params, r, msg);
        if (rc) {
            json_decref(out);
            return rc;
        }
    }
    if (json_array_size(out) > 0)
        r->tools = out;
    else
        json_decref(out);
    return 0;
}

int api_get_responses_tools(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    int rc = rewrite_tools(json_object_get(root, "tools"), "parameters", "function",
                           "inferd runs no built-in tools",
                           "{\"type\": \"function\", \"name\": string, \"description\": "
                           "string, \"parameters\": object}",
                           r, msg);
    if (rc || (rc = parallel_calls(root, r, msg))) return rc;
    const json_t *choice = json_object_get(root, "tool_choice");
    return openai_choice(choice, json_string_value(json_object_get(choice, "name")),
                         "{\"type\": \"function\", \"name\": string}", r, msg);
}

int api_get_anthropic_tools(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    int rc = rewrite_tools(json_object_get(root, "tools"), "input_schema", "custom",
                           "inferd runs no server tools",
                           "{\"name\": string, \"description\": string, \"input_schema\": "
                           "object}",
                           r, msg);
    if (rc) return rc;
    const json_t *choice = json_object_get(root, "tool_choice");
    if (choice && !json_is_null(choice)) {
        const char *c = json_string_value(json_object_get(choice, "type"));
        const char *name = json_string_value(json_object_get(choice, "name"));
        if (c && !strcmp(c, "tool") && name)
            set_named(r, name);
        else if (!c || choice_word(c, "any", r))
            return api_fail(r, msg, "tool_choice",
                            "expected {\"type\": \"auto\" | \"none\" | \"any\"} or {\"type\": "
                            "\"tool\", \"name\": string}");
        bool one = false;
        if ((rc = api_get_bool(choice, "disable_parallel_tool_use", &one, r, msg))) {
            snprintf(r->bad_param, sizeof(r->bad_param), "tool_choice.disable_parallel_tool_use");
            return rc;
        }
        r->one_call = one;
    }
    return check_choice(r, msg);
}

int api_get_output_format(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const json_t *beta = json_object_get(root, "output_format");
    const json_t *config = json_object_get(root, "output_config");
    const json_t *fmt = NULL;
    if (config && !json_is_null(config)) {
        if (!json_is_object(config)) return api_fail(r, msg, "output_config", "expected an object");
        fmt = json_object_get(config, "format");
    }
    bool has_beta = beta && !json_is_null(beta), has_config = fmt && !json_is_null(fmt);
    if (has_beta && has_config)
        return api_fail(r, msg, "output_format",
                        "give either output_format or output_config.format, not both");
    if (!has_beta && !has_config) return 0;
    const char *path = has_beta ? "output_format" : "output_config.format";
    fmt = has_beta ? beta : fmt;
    char p[64];
    snprintf(p, sizeof(p), "%s.type", path);
    if (!json_is_object(fmt)) return api_fail(r, msg, path, "expected an object");
    const char *type = json_string_value(json_object_get(fmt, "type"));
    if (!type || strcmp(type, "json_schema"))
        return api_fail(r, msg, p, "expected \"json_schema\"");
    return decode_format(fmt, fmt, path, r, msg);
}
