/*
 * encode.c - response, stream and error shapes of each API (see encode.h).
 *
 * References for the shapes: the OpenAI API reference (chat.completion,
 * chat.completion.chunk, text_completion, response and its streaming
 * events) and Anthropic's Messages API reference (message, streaming
 * events, errors). Field order follows the references so captured output
 * reads like theirs. Usage: cached prompt tokens are reported where each API
 * has a field for them (prompt_tokens_details.cached_tokens,
 * input_tokens_details.cached_tokens, cache_read_input_tokens).
 */
#include "api/encode.h"

#include "base/check.h"
#include "net/sse.h"

#include <stdlib.h>
#include <string.h>

int api_out_completion_tokens(const struct api_out *o)
{
    int n = 0;
    for (int i = 0; i < o->n_choices; i++)
        n += o->choices[i].n_tokens;
    return n;
}

static json_t *bytes_of(const char *s)
{
    json_t *a = json_array();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        json_array_append_new(a, json_integer(*p));
    return a;
}

/* jansson refuses invalid UTF-8; token texts can be partial characters. */
static json_t *str_lossy(const char *s)
{
    json_t *v = json_string(s);
    return v ? v : json_string("\xef\xbf\xbd");
}

static json_t *strn_lossy(const char *s, size_t n)
{
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("\xef\xbf\xbd");
}

/* Length of the well-formed UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80                    ? 1
                 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
                 : (s[0] & 0xf0) == 0xe0        ? 3
                 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4
                                                : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (len == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f))) return 0;
    if (len == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))) return 0;
    return len;
}

/* Error messages quote what the client sent, cut to a length: a cut or a
 * bad byte becomes U+FFFD and the rest of the message stays readable. */
static json_t *str_repaired(const char *s)
{
    json_t *v = json_string(s);
    if (v) return v;
    struct buf b = {0};
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq(p + i, n - i);
        if (len) {
            buf_append(&b, s + i, len);
            i += len;
        } else {
            buf_puts(&b, "\xef\xbf\xbd");
            i++;
        }
    }
    v = json_string(buf_str(&b));
    buf_release(&b);
    return v ? v : json_string("\xef\xbf\xbd");
}

void api_logprob_append(enum api_kind kind, json_t **target, const char *text, float logprob,
                        const struct api_top *tops, int n_top, size_t text_offset)
{
    if (kind == API_COMPLETION) {
        if (!*target)
            *target = json_pack("{s:[],s:[],s:[],s:[]}", "tokens", "token_logprobs", "top_logprobs",
                                "text_offset");
        json_array_append_new(json_object_get(*target, "tokens"), str_lossy(text));
        json_array_append_new(json_object_get(*target, "token_logprobs"), json_real(logprob));
        json_t *top = json_object();
        for (int i = 0; i < n_top; i++)
            json_object_set_new(top, tops[i].text, json_real(tops[i].logprob));
        json_array_append_new(json_object_get(*target, "top_logprobs"), top);
        json_array_append_new(json_object_get(*target, "text_offset"),
                              json_integer((json_int_t)text_offset));
        return;
    }
    if (!*target) *target = json_array();
    json_t *top = json_array();
    for (int i = 0; i < n_top; i++)
        json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", str_lossy(tops[i].text),
                                             "logprob", (double)tops[i].logprob, "bytes",
                                             bytes_of(tops[i].text)));
    json_array_append_new(*target,
                          json_pack("{s:o,s:f,s:o,s:o}", "token", str_lossy(text), "logprob",
                                    (double)logprob, "bytes", bytes_of(text), "top_logprobs", top));
}

/* The model ended its turn after calling tools. */
static bool called(const struct api_choice *c)
{
    return c->n_calls > 0 && c->finish == API_FINISH_EOG;
}

/* OpenAI ends a turn with calls with "tool_calls", except when the request
 * named the function to call: then "stop" (what OpenAI answers, and vLLM
 * after it). */
static const char *openai_finish(const struct api_request *r, const struct api_choice *c)
{
    if (called(c)) return r->tool_choice == API_TOOL_CHOICE_NAMED ? "stop" : "tool_calls";
    switch (c->finish) {
    case API_FINISH_LENGTH:
        return "length";
    case API_FINISH_NONE:
        return NULL;
    default:
        return "stop";
    }
}

static json_t *openai_usage(const struct api_out *o)
{
    int c = api_out_completion_tokens(o);
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", o->n_prompt_tokens,
                     "completion_tokens", c, "total_tokens", o->n_prompt_tokens + c,
                     "prompt_tokens_details", "cached_tokens", o->n_cached_tokens);
}

static const char *anthropic_stop(const struct api_choice *c)
{
    if (called(c)) return "tool_use";
    switch (c->finish) {
    case API_FINISH_LENGTH:
        return "max_tokens";
    case API_FINISH_STOP_SEQ:
        return "stop_sequence";
    default:
        return "end_turn";
    }
}

static json_t *anthropic_usage(const struct api_out *o, bool with_input)
{
    json_t *u = json_object();
    if (with_input) {
        json_object_set_new(u, "input_tokens",
                            json_integer(o->n_prompt_tokens - o->n_cached_tokens));
        json_object_set_new(u, "cache_creation_input_tokens", json_integer(0));
        json_object_set_new(u, "cache_read_input_tokens", json_integer(o->n_cached_tokens));
    }
    json_object_set_new(u, "output_tokens", json_integer(api_out_completion_tokens(o)));
    return u;
}

static void item_id(const struct api_out *o, char *out, size_t n)
{
    snprintf(out, n, "msg_%s", o->id + 5); /* resp_X -> msg_X */
}

/* A call's arguments as an object (Anthropic's input): the text the model
 * wrote, or {} when it is not a complete JSON object (output cut short). */
static json_t *call_input(const struct api_toolcall *t)
{
    json_t *v = json_loadb(t->args.data ? t->args.data : "", t->args.len, 0, NULL);
    if (json_is_object(v)) return v;
    json_decref(v);
    return json_object();
}

static json_t *call_args(const struct api_toolcall *t)
{
    return strn_lossy(t->args.data ? t->args.data : "", t->args.len);
}

/* Responses function_call item ids: fc_ + the call id's random part. */
static void fc_id(const struct api_toolcall *t, char *out, size_t n)
{
    const char *u = strchr(t->id, '_');
    snprintf(out, n, "fc_%s", u ? u + 1 : t->id);
}

static json_t *responses_call_item(const struct api_toolcall *t, bool done)
{
    char id[64];
    fc_id(t, id, sizeof(id));
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s}", "type", "function_call", "id", id, "call_id",
                     t->id, "name", t->name, "arguments", done ? call_args(t) : json_string(""),
                     "status", done ? "completed" : "in_progress");
}

static json_t *chat_tool_calls(const struct api_choice *c)
{
    json_t *a = json_array();
    for (int k = 0; k < c->n_calls; k++)
        json_array_append_new(a, json_pack("{s:s,s:s,s:{s:s,s:o}}", "id", c->calls[k].id, "type",
                                           "function", "function", "name", c->calls[k].name,
                                           "arguments", call_args(&c->calls[k])));
    return a;
}

static json_t *responses_part(const char *text, size_t len)
{
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", strn_lossy(text, len),
                     "annotations");
}

static json_t *responses_item(const struct api_out *o, bool done)
{
    char id[80];
    item_id(o, id, sizeof(id));
    const struct api_choice *c = &o->choices[0];
    json_t *content = json_array();
    if (done)
        json_array_append_new(content,
                              responses_part(c->text.data ? c->text.data : "", c->text.len));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

/* The request's tools and tool_choice echoed in the Responses shape. */
static json_t *responses_tools(const struct api_request *r)
{
    json_t *a = json_array();
    size_t i;
    const json_t *t;
    json_array_foreach(r->tools, i, t)
    {
        const json_t *fn = json_object_get(t, "function");
        const json_t *params = json_object_get(fn, "parameters");
        const json_t *desc = json_object_get(fn, "description");
        json_array_append_new(a, json_pack("{s:s,s:O,s:O,s:O,s:n}", "type", "function", "name",
                                           json_object_get(fn, "name"), "description",
                                           desc ? desc : json_null(), "parameters",
                                           params ? params : json_null(), "strict"));
    }
    return a;
}

static json_t *responses_tool_choice(const struct api_request *r)
{
    switch (r->tool_choice) {
    case API_TOOL_CHOICE_NONE:
        return json_string("none");
    case API_TOOL_CHOICE_REQUIRED:
        return json_string("required");
    case API_TOOL_CHOICE_NAMED:
        return json_pack("{s:s,s:s}", "type", "function", "name", r->tool_name);
    case API_TOOL_CHOICE_AUTO:
        break;
    }
    return json_string("auto");
}

static json_t *responses_object(const struct api_out *o, bool done)
{
    const struct api_request *r = o->req;
    const struct api_choice *c = &o->choices[0];
    bool incomplete = done && c->finish == API_FINISH_LENGTH;
    json_t *resp = json_pack(
        "{s:s,s:s,s:I,s:s,s:o,s:o,s:s,s:o,s:b,s:f,s:f,s:o,s:o,s:o}", "id", o->id, "object",
        "response", "created_at", (json_int_t)o->created, "status",
        !done        ? "in_progress"
        : incomplete ? "incomplete"
                     : "completed",
        "error", json_null(), "incomplete_details",
        incomplete ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "model",
        o->model, "output", json_array(), "store", r->store, "temperature",
        (double)r->sp.temperature, "top_p", (double)r->sp.top_p, "instructions",
        r->instructions ? json_string(r->instructions) : json_null(), "previous_response_id",
        r->previous_response_id ? json_string(r->previous_response_id) : json_null(), "metadata",
        r->metadata ? json_incref(r->metadata) : json_object());
    json_object_set_new(resp, "max_output_tokens",
                        r->max_tokens ? json_integer(r->max_tokens) : json_null());
    json_object_set_new(resp, "parallel_tool_calls", json_boolean(!r->one_call));
    json_object_set_new(resp, "tool_choice", responses_tool_choice(r));
    json_object_set_new(resp, "tools", responses_tools(r));
    json_object_set_new(resp, "text",
                        json_pack("{s:o}", "format",
                                  r->text_format ? json_incref(r->text_format)
                                                 : json_pack("{s:s}", "type", "text")));
    if (done) {
        json_t *output = json_object_get(resp, "output");
        if (c->text.len || !c->n_calls) json_array_append_new(output, responses_item(o, true));
        for (int k = 0; k < c->n_calls; k++)
            json_array_append_new(output, responses_call_item(&c->calls[k], true));
        int n = api_out_completion_tokens(o);
        json_object_set_new(resp, "usage",
                            json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens",
                                      o->n_prompt_tokens, "input_tokens_details", "cached_tokens",
                                      o->n_cached_tokens, "output_tokens", n,
                                      "output_tokens_details", "reasoning_tokens", 0,
                                      "total_tokens", o->n_prompt_tokens + n));
    } else {
        json_object_set_new(resp, "usage", json_null());
    }
    return resp;
}

json_t *api_response(const struct api_out *o)
{
    const struct api_request *r = o->req;
    switch (r->kind) {
    case API_CHAT:
    case API_COMPLETION: {
        json_t *choices = json_array();
        for (int i = 0; i < o->n_choices; i++) {
            const struct api_choice *c = &o->choices[i];
            json_t *text = strn_lossy(c->text.data ? c->text.data : "", c->text.len);
            json_t *ch;
            if (r->kind == API_CHAT) {
                json_t *lp = c->logprobs
                                 ? json_pack("{s:O,s:[]}", "content", c->logprobs, "refusal")
                                 : json_null();
                if (c->n_calls && !c->text.len) {
                    json_decref(text); /* OpenAI's shape for a tool-call-only answer */
                    text = json_null();
                }
                ch = json_pack("{s:i,s:{s:s,s:o,s:n},s:o,s:s}", "index", i, "message", "role",
                               "assistant", "content", text, "refusal", "logprobs", lp,
                               "finish_reason", openai_finish(r, c));
                if (c->n_calls)
                    json_object_set_new(json_object_get(ch, "message"), "tool_calls",
                                        chat_tool_calls(c));
            } else {
                ch = json_pack("{s:o,s:i,s:O,s:s}", "text", text, "index", i, "logprobs",
                               c->logprobs ? c->logprobs : json_null(), "finish_reason",
                               openai_finish(r, c));
            }
            json_array_append_new(choices, ch);
        }
        return json_pack("{s:s,s:s,s:I,s:s,s:o,s:o,s:n}", "id", o->id, "object",
                         r->kind == API_CHAT ? "chat.completion" : "text_completion", "created",
                         (json_int_t)o->created, "model", o->model, "choices", choices, "usage",
                         openai_usage(o), "system_fingerprint");
    }
    case API_RESPONSES:
        return responses_object(o, true);
    case API_MESSAGES: {
        const struct api_choice *c = &o->choices[0];
        json_t *content = json_array();
        if (c->text.len || !c->n_calls)
            json_array_append_new(
                content, json_pack("{s:s,s:o}", "type", "text", "text",
                                   strn_lossy(c->text.data ? c->text.data : "", c->text.len)));
        for (int k = 0; k < c->n_calls; k++)
            json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                     c->calls[k].id, "name", c->calls[k].name,
                                                     "input", call_input(&c->calls[k])));
        return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:o,s:o}", "id", o->id, "type", "message",
                         "role", "assistant", "model", o->model, "content", content, "stop_reason",
                         anthropic_stop(c), "stop_sequence",
                         c->finish == API_FINISH_STOP_SEQ ? json_string(r->stop[c->stop_index])
                                                          : json_null(),
                         "usage", anthropic_usage(o, true));
    }
    }
    CHECK(0);
    return NULL;
}

static void emit(struct buf *sse, const char *name, json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT);
    sse_event(sse, name, s, strlen(s));
    free(s);
    json_decref(v);
}

/* Responses events carry their type and a sequence number. */
static void emit_resp(struct api_out *o, struct buf *sse, const char *type, json_t *v)
{
    json_object_set_new(v, "type", json_string(type));
    json_object_set_new(v, "sequence_number", json_integer(o->seq++));
    emit(sse, type, v);
}

static json_t *chat_chunk(const struct api_out *o, json_t *choices)
{
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:n,s:o}", "id", o->id, "object",
                          o->req->kind == API_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)o->created, "model", o->model,
                          "system_fingerprint", "choices", choices);
    if (o->req->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* Responses message items after the first get their index in the id. */
static void block_item_id(const struct api_out *o, char *out, size_t n)
{
    item_id(o, out, n);
    if (o->block > 0) snprintf(out + strlen(out), n - strlen(out), "_%d", o->block);
}

static json_t *responses_text_item(const struct api_out *o, const char *id, const char *text,
                                   size_t len, bool done)
{
    json_t *content = json_array();
    if (done) json_array_append_new(content, responses_part(text, len));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

/* Opens a text block / message item at o->block (Responses and Messages). */
/* from: offset in the choice's text where the block's text begins. */
static void open_text(struct api_out *o, size_t from, struct buf *sse)
{
    char id[96];
    o->open = 1;
    o->text_from = from;
    if (o->req->kind == API_RESPONSES) {
        block_item_id(o, id, sizeof(id));
        emit_resp(o, sse, "response.output_item.added",
                  json_pack("{s:i,s:o}", "output_index", o->block, "item",
                            responses_text_item(o, id, "", 0, false)));
        emit_resp(o, sse, "response.content_part.added",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", o->block,
                            "content_index", 0, "part", responses_part("", 0)));
    } else {
        emit(sse, "content_block_start",
             json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index", o->block,
                       "content_block", "type", "text", "text", ""));
    }
}

static void close_text(struct api_out *o, struct buf *sse)
{
    const struct api_choice *c = &o->choices[0];
    const char *text = (c->text.data ? c->text.data : "") + o->text_from;
    size_t len = c->text.len - o->text_from;
    char id[96];
    if (o->req->kind == API_RESPONSES) {
        block_item_id(o, id, sizeof(id));
        emit_resp(o, sse, "response.output_text.done",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", o->block,
                            "content_index", 0, "text", strn_lossy(text, len)));
        emit_resp(o, sse, "response.content_part.done",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", o->block,
                            "content_index", 0, "part", responses_part(text, len)));
        emit_resp(o, sse, "response.output_item.done",
                  json_pack("{s:i,s:o}", "output_index", o->block, "item",
                            responses_text_item(o, id, text, len, true)));
    } else {
        emit(sse, "content_block_stop",
             json_pack("{s:s,s:i}", "type", "content_block_stop", "index", o->block));
    }
    o->open = 0;
    o->block++;
}

/* A chat choice's first chunk: the role, and content "" before text. */
static void chat_open(struct api_out *o, int i, struct buf *sse)
{
    struct api_choice *c = &o->choices[i];
    if (c->opened) return;
    c->opened = true;
    emit(sse, NULL,
         chat_chunk(o, json_pack("[{s:i,s:{s:s,s:s},s:n,s:n}]", "index", i, "delta", "role",
                                 "assistant", "content", "", "logprobs", "finish_reason")));
}

void api_stream_tool_start(struct api_out *o, int i, int k, struct buf *sse)
{
    struct api_choice *c = &o->choices[i];
    const struct api_toolcall *t = &c->calls[k];
    switch (o->req->kind) {
    case API_CHAT: {
        json_t *delta = json_object();
        if (!c->opened) { /* a turn that opens with a call: OpenAI's first chunk */
            c->opened = true;
            json_object_set_new(delta, "role", json_string("assistant"));
            json_object_set_new(delta, "content", json_null());
        }
        json_object_set_new(delta, "tool_calls",
                            json_pack("[{s:i,s:s,s:s,s:{s:s,s:s}}]", "index", k, "id", t->id,
                                      "type", "function", "function", "name", t->name, "arguments",
                                      ""));
        emit(sse, NULL,
             chat_chunk(o, json_pack("[{s:i,s:o,s:n,s:n}]", "index", i, "delta", delta, "logprobs",
                                     "finish_reason")));
        break;
    }
    case API_RESPONSES:
        if (o->open == 1) close_text(o, sse);
        o->open = 2;
        emit_resp(o, sse, "response.output_item.added",
                  json_pack("{s:i,s:o}", "output_index", o->block, "item",
                            responses_call_item(t, false)));
        break;
    case API_MESSAGES:
        if (o->open == 1) close_text(o, sse);
        o->open = 2;
        emit(sse, "content_block_start",
             json_pack("{s:s,s:i,s:{s:s,s:s,s:s,s:{}}}", "type", "content_block_start", "index",
                       o->block, "content_block", "type", "tool_use", "id", t->id, "name", t->name,
                       "input"));
        break;
    case API_COMPLETION:
        break;
    }
}

void api_stream_tool_args(struct api_out *o, int i, int k, const char *text, size_t len,
                          struct buf *sse)
{
    const struct api_toolcall *t = &o->choices[i].calls[k];
    char id[64];
    switch (o->req->kind) {
    case API_CHAT:
        emit(sse, NULL,
             chat_chunk(o, json_pack("[{s:i,s:{s:[{s:i,s:{s:o}}]},s:n,s:n}]", "index", i, "delta",
                                     "tool_calls", "index", k, "function", "arguments",
                                     strn_lossy(text, len), "logprobs", "finish_reason")));
        break;
    case API_RESPONSES:
        fc_id(t, id, sizeof(id));
        emit_resp(o, sse, "response.function_call_arguments.delta",
                  json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index", o->block, "delta",
                            strn_lossy(text, len)));
        break;
    case API_MESSAGES:
        emit(sse, "content_block_delta",
             json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", o->block,
                       "delta", "type", "input_json_delta", "partial_json", strn_lossy(text, len)));
        break;
    case API_COMPLETION:
        break;
    }
}

void api_stream_tool_end(struct api_out *o, int i, int k, struct buf *sse)
{
    const struct api_toolcall *t = &o->choices[i].calls[k];
    char id[64];
    switch (o->req->kind) {
    case API_RESPONSES:
        fc_id(t, id, sizeof(id));
        emit_resp(o, sse, "response.function_call_arguments.done",
                  json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index", o->block, "arguments",
                            call_args(t)));
        emit_resp(
            o, sse, "response.output_item.done",
            json_pack("{s:i,s:o}", "output_index", o->block, "item", responses_call_item(t, true)));
        o->open = 0;
        o->block++;
        break;
    case API_MESSAGES:
        emit(sse, "content_block_stop",
             json_pack("{s:s,s:i}", "type", "content_block_stop", "index", o->block));
        o->open = 0;
        o->block++;
        break;
    default:
        break;
    }
}

void api_stream_start(struct api_out *o, struct buf *sse)
{
    switch (o->req->kind) {
    case API_CHAT:
        /* With tools parsed the role chunk waits for the first text or call:
         * a tool-call turn opens with content null, as OpenAI's does. */
        if (!o->lazy_blocks)
            for (int i = 0; i < o->n_choices; i++)
                chat_open(o, i, sse);
        break;
    case API_COMPLETION:
        break;
    case API_RESPONSES:
        emit_resp(o, sse, "response.created",
                  json_pack("{s:o}", "response", responses_object(o, false)));
        emit_resp(o, sse, "response.in_progress",
                  json_pack("{s:o}", "response", responses_object(o, false)));
        if (!o->lazy_blocks) open_text(o, 0, sse);
        break;
    case API_MESSAGES: {
        json_t *u = anthropic_usage(o, true);
        json_object_set_new(u, "output_tokens", json_integer(0));
        emit(sse, "message_start",
             json_pack("{s:s,s:{s:s,s:s,s:s,s:[],s:s,s:n,s:n,s:o}}", "type", "message_start",
                       "message", "id", o->id, "type", "message", "role", "assistant", "content",
                       "model", o->model, "stop_reason", "stop_sequence", "usage", u));
        if (!o->lazy_blocks) open_text(o, 0, sse);
        emit(sse, "ping", json_pack("{s:s}", "type", "ping"));
        break;
    }
    }
}

void api_stream_delta(struct api_out *o, int i, const char *text, size_t len, json_t *lp,
                      struct buf *sse)
{
    char id[96];
    switch (o->req->kind) {
    case API_CHAT:
        chat_open(o, i, sse);
        emit(sse, NULL,
             chat_chunk(
                 o, json_pack("[{s:i,s:{s:o},s:o,s:n}]", "index", i, "delta", "content",
                              strn_lossy(text, len), "logprobs",
                              lp ? json_pack("{s:O,s:[]}", "content", lp, "refusal") : json_null(),
                              "finish_reason")));
        break;
    case API_COMPLETION:
        emit(sse, NULL,
             chat_chunk(o, json_pack("[{s:o,s:i,s:O,s:n}]", "text", strn_lossy(text, len), "index",
                                     i, "logprobs", lp ? lp : json_null(), "finish_reason")));
        break;
    case API_RESPONSES:
        if (o->open != 1) open_text(o, o->choices[i].text.len - len, sse);
        block_item_id(o, id, sizeof(id));
        emit_resp(o, sse, "response.output_text.delta",
                  json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", o->block,
                            "content_index", 0, "delta", strn_lossy(text, len)));
        break;
    case API_MESSAGES:
        if (o->open != 1) open_text(o, o->choices[i].text.len - len, sse);
        emit(sse, "content_block_delta",
             json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index", o->block,
                       "delta", "type", "text_delta", "text", strn_lossy(text, len)));
        break;
    }
}

void api_stream_choice_end(struct api_out *o, int i, struct buf *sse)
{
    const struct api_choice *c = &o->choices[i];
    switch (o->req->kind) {
    case API_CHAT:
        chat_open(o, i, sse);
        emit(sse, NULL,
             chat_chunk(o, json_pack("[{s:i,s:{},s:n,s:s}]", "index", i, "delta", "logprobs",
                                     "finish_reason", openai_finish(o->req, c))));
        break;
    case API_COMPLETION:
        emit(sse, NULL,
             chat_chunk(o, json_pack("[{s:s,s:i,s:n,s:s}]", "text", "", "index", i, "logprobs",
                                     "finish_reason", openai_finish(o->req, c))));
        break;
    case API_RESPONSES:
    case API_MESSAGES:
        /* An answer with neither text nor calls still has its text block. */
        if (o->open == 0 && o->block == 0) open_text(o, c->text.len, sse);
        if (o->open == 1) close_text(o, sse);
        break;
    }
}

void api_stream_end(struct api_out *o, struct buf *sse)
{
    const struct api_choice *c = &o->choices[0];
    switch (o->req->kind) {
    case API_CHAT:
    case API_COMPLETION:
        if (o->req->include_usage) {
            json_t *chunk = chat_chunk(o, json_array());
            json_object_set_new(chunk, "usage", openai_usage(o));
            emit(sse, NULL, chunk);
        }
        sse_event(sse, NULL, "[DONE]", 6);
        break;
    case API_RESPONSES: {
        json_t *resp = responses_object(o, true);
        const char *type =
            c->finish == API_FINISH_LENGTH ? "response.incomplete" : "response.completed";
        emit_resp(o, sse, type, json_pack("{s:o}", "response", resp));
        break;
    }
    case API_MESSAGES:
        emit(sse, "message_delta",
             json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason",
                       anthropic_stop(c), "stop_sequence",
                       c->finish == API_FINISH_STOP_SEQ ? json_string(o->req->stop[c->stop_index])
                                                        : json_null(),
                       "usage", anthropic_usage(o, false)));
        emit(sse, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        break;
    }
}

json_t *api_error_json(enum api_kind kind, int code, const char *message, const char *param)
{
    if (kind == API_MESSAGES)
        return json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type",
                         err_anthropic_type(code), "message", str_repaired(message));
    const char *c = NULL;
    if (code == ERR_INVALID) c = "invalid_value";
    if (code == ERR_CONTEXT) c = "context_length_exceeded";
    if (code == ERR_NOT_FOUND && param && !strcmp(param, "model")) c = "model_not_found";
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", str_repaired(message), "type",
                     err_openai_type(code), "param",
                     param && *param ? str_repaired(param) : json_null(), "code",
                     c ? json_string(c) : json_null());
}

void api_stream_error(const struct api_out *o, int code, const char *message, struct buf *sse)
{
    json_t *e = api_error_json(o->req->kind, code, message, NULL);
    if (o->req->kind == API_RESPONSES) {
        json_t *inner = json_incref(json_object_get(e, "error"));
        json_decref(e);
        e = json_pack("{s:s,s:o,s:o,s:n}", "type", "error", "code",
                      json_string(err_openai_type(code)), "message", str_repaired(message),
                      "param");
        json_decref(inner);
        emit(sse, "error", e);
        return;
    }
    emit(sse, o->req->kind == API_MESSAGES ? "error" : NULL, e);
}

json_t *api_responses_conversation(const struct api_out *o, const json_t *history)
{
    json_t *conv = history ? json_deep_copy(history) : json_array();
    json_array_extend(conv, o->req->input_items);
    const struct api_choice *c = &o->choices[0];
    /* a tool-call turn without text has content null, as clients send it back */
    json_t *m = json_pack("{s:s,s:o}", "role", "assistant", "content",
                          c->n_calls && !c->text.len
                              ? json_null()
                              : strn_lossy(c->text.data ? c->text.data : "", c->text.len));
    if (c->n_calls) json_object_set_new(m, "tool_calls", chat_tool_calls(c));
    json_array_append_new(conv, m);
    return conv;
}
