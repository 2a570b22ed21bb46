/*
 * api.h - one decoded generation request, whatever API it came through.
 *
 * The HTTP APIs inferd speaks (OpenAI Chat Completions, Completions and
 * Responses; Anthropic Messages) differ in field names and shapes but ask
 * for the same thing: a prompt (chat messages for the model's template, or
 * text / token ids), how many tokens, how to sample, when to stop, and how to
 * answer (stream or not, logprobs). Each decoder (openai.c, responses.c,
 * anthropic.c) validates a JSON body and fills one struct api_request; the
 * serving layer (src/serve/) only ever sees this struct, and the same API's
 * encoder turns the results back into that API's shapes.
 *
 * Validation: decoders never trust the body. Every error is ERR_INVALID (or
 * ERR_TOO_LARGE) with a message that starts with the offending field's path
 * ("messages[2].content: expected a string or an array of parts"), and the
 * field path alone in api_request.bad_param (OpenAI's error "param").
 *
 * Lifetime: api_request_release frees everything a decoder allocated; a
 * zeroed struct is valid to release. Thread: the event-loop thread decodes;
 * the struct is owned by one request at a time.
 */
#ifndef INFERD_API_API_H
#define INFERD_API_API_H

#include "base/buf.h"
#include "base/err.h"
#include "inferd/inferd.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

enum api_kind {
    API_CHAT,       /* POST /v1/chat/completions */
    API_COMPLETION, /* POST /v1/completions */
    API_RESPONSES,  /* POST /v1/responses */
    API_MESSAGES,   /* POST /v1/messages */
};

/* What the client allows or demands of tool calls (tool_choice). */
enum api_tool_choice {
    API_TOOL_CHOICE_AUTO = 0, /* the model may call tools: output is parsed for calls */
    API_TOOL_CHOICE_NONE,     /* tools are shown to the template, output is never parsed */
    API_TOOL_CHOICE_REQUIRED, /* a call to one of the tools, forced by a grammar */
    API_TOOL_CHOICE_NAMED,    /* a call to tool_name, forced by a grammar */
};

enum {
    API_MAX_STOP = 16,
    API_MAX_N = 16,
    API_MAX_PROMPTS = 64,
    API_MAX_BIAS = 1024,
    API_MAX_TOP_LOGPROBS = 20,
};

struct api_prompt {
    char *text;        /* prompt text (NULL when given as token ids) */
    struct i32vec ids; /* token ids given by the client (used when text is NULL) */
};

struct api_request {
    enum api_kind kind;             /* which API decoded it */
    char model[128];                /* requested model name ("" = the served one) */
    bool ignore_eos;                /* OpenAI endpoints' vLLM extension: generate past
                                       end-of-generation tokens up to max_tokens */
    bool stream;                    /* answer with server-sent events */
    bool include_usage;             /* OpenAI stream_options.include_usage */
    int n;                          /* completions per prompt (1..API_MAX_N) */
    int max_tokens;                 /* 0 = until the context is full */
    int priority;                   /* higher runs first (vLLM's extension field "priority") */
    char cache_ttl_class[32];       /* extension "cache_ttl_class": the traffic class whose TTL
                                       its KV blocks get ("" = the endpoint's default) */
    struct inferd_sampling sp;      /* sampling; sp.logit_bias points at bias */
    bool has_seed;                  /* the client chose sp.seed (else drawn per request) */
    struct inferd_logit_bias *bias; /* (n_bias) OpenAI logit_bias entries */
    int n_bias;                     /* entries of bias */
    bool logprobs;                  /* report token logprobs */
    int top_logprobs;               /* alternatives per token (0..20) */
    char *stop[API_MAX_STOP];       /* stop strings (owned) */
    int n_stop;                     /* entries of stop */
    json_t *messages;           /* chat-style prompt: array of {role, content} for the template */
    struct api_prompt *prompts; /* (n_prompts) completions prompts; NULL for chat-style */
    int n_prompts;              /* entries of prompts */
    bool echo;                  /* completions: prepend the prompt to the text */
    /* Responses API */
    bool store;                 /* keep the response for GET / previous_response_id */
    char *previous_response_id; /* continue that stored conversation, or NULL */
    char *instructions;         /* system text for this turn only, or NULL */
    json_t *input_items;        /* this turn's input as message items (stored) */
    json_t *metadata;           /* client metadata echoed back (Responses, Messages) */
    char *user;                 /* OpenAI user / Anthropic metadata.user_id, or NULL */
    /* structured output: response_format / text.format / grammar / regex */
    enum inferd_grammar_kind grammar_kind; /* NONE: unconstrained */
    char *grammar_src;                     /* schema JSON, GBNF or regex text (owned), or NULL */
    char grammar_param[40];                /* the field that gave it ("response_format", ...) */
    json_t *tools; /* OpenAI Chat tool definitions (every API's, rewritten), or NULL */
    enum api_tool_choice tool_choice; /* tool_choice, decoded */
    char *tool_name;                  /* API_TOOL_CHOICE_NAMED: the function (owned) */
    bool one_call;       /* parallel_tool_calls: false / disable_parallel_tool_use: true: the
                            answer ends after its first call */
    json_t *text_format; /* Responses text.format as sent (echoed back), or NULL */
    char bad_param[96];  /* field named by the last decode error */
};

void api_request_release(struct api_request *r);

/* Decoders: body is the raw JSON bytes (not NUL-terminated). 0 or
 * ERR_INVALID with msg and r->bad_param set. r is filled from zero. */
int openai_chat_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg);
int openai_completion_decode(const char *body, size_t len, struct api_request *r,
                             struct err_msg *msg);
int responses_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg);
int anthropic_decode(const char *body, size_t len, struct api_request *r, struct err_msg *msg);
/* POST /v1/messages/count_tokens: the same body without max_tokens. */
int anthropic_count_decode(const char *body, size_t len, struct api_request *r,
                           struct err_msg *msg);

/* The decoded length in bytes of the longest string literal in a JSON text,
 * found by one pass over the raw bytes without parsing (escapes counted as
 * what they decode to; \uXXXX as its UTF-8 length, a surrogate half as 2).
 * Malformed text gives a number the parser will not reach anyway. The
 * server refuses a body holding text longer than the context could ever
 * take before paying for its parse (prep.c). Pure; any thread. */
size_t api_json_longest_string(const char *body, size_t len);

/* Shared JSON helpers for the decoders (api_json.c). Each returns 0 or
 * ERR_INVALID with msg and param set; absent optional fields leave *out. */
int api_parse_body(const char *body, size_t len, json_t **root, struct api_request *r,
                   struct err_msg *msg);
int api_get_number(const json_t *o, const char *key, double lo, double hi, double *out,
                   struct api_request *r, struct err_msg *msg);
int api_get_int(const json_t *o, const char *key, long lo, long hi, int *out, struct api_request *r,
                struct err_msg *msg);
int api_get_bool(const json_t *o, const char *key, bool *out, struct api_request *r,
                 struct err_msg *msg);
/* Copies a string field into a fresh heap string (*out NULL when absent). */
/* The extension field cache_ttl_class (every API): a name of letters,
 * digits, '_' and '-', at most 31 bytes; the server checks it is a class it
 * knows. */
int api_get_cache_class(const json_t *root, struct api_request *r, struct err_msg *msg);
int api_get_string(const json_t *o, const char *key, char **out, struct api_request *r,
                   struct err_msg *msg);
/* stop: a string or an array of up to max strings. */
int api_get_stop(const json_t *o, const char *key, int max, struct api_request *r,
                 struct err_msg *msg);
/* Structured output (api_format.c). OpenAI Chat / Completions: response_format
 * ({"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
 * "schema", "strict"}}) and the extension fields "grammar" (GBNF) and "regex";
 * at most one of them constrains. Responses: text.format ({"type": "text" |
 * "json_object" | "json_schema", "name", "schema", "strict"}). The grammar is
 * compiled at submit (an uncompilable one is a 400 there). */
int api_get_response_format(const json_t *root, struct api_request *r, struct err_msg *msg);
int api_get_text_format(const json_t *root, struct api_request *r, struct err_msg *msg);
/* tools / tool_choice (OpenAI Chat): tools [{type: "function", function: {name,
 * description, parameters}}]; tool_choice "auto" | "none" | "required" |
 * {"type": "function", "function": {"name"}}. A forced choice (required, a
 * name) with response_format / grammar / regex is an error: both would
 * constrain the same output. */
int api_get_tools(const json_t *root, struct api_request *r, struct err_msg *msg);
/* Responses tools ([{type: "function", name, description, parameters}]) and
 * tool_choice ("auto" | "none" | "required" | {"type": "function", "name"}),
 * rewritten as OpenAI Chat tool definitions. */
int api_get_responses_tools(const json_t *root, struct api_request *r, struct err_msg *msg);
/* Anthropic tools ({name, description, input_schema}) rewritten as OpenAI
 * tool definitions for the template; tool_choice {"type": "auto" | "none" |
 * "any" | "tool", "name"}. */
int api_get_anthropic_tools(const json_t *root, struct api_request *r, struct err_msg *msg);
/* Anthropic structured outputs: output_config.format (what @anthropic-ai/sdk's
 * messages.parse sends, and beta.messages.parse rewrites output_format into)
 * or the beta's top-level output_format, each {"type": "json_schema",
 * "schema": {...}}; both at once is an error. Decode before the tools, so a
 * forced tool choice sees the constraint. */
int api_get_output_format(const json_t *root, struct api_request *r, struct err_msg *msg);

/* What a request may not ask for (limits.c). api_check_unsupported refuses,
 * for r->kind, each field that asks for a feature inferd does not have and
 * whose silent omission would change the answer (audio, built-in tools,
 * background runs, reasoning effort, ...; docs/api.md lists them with the
 * fields accepted and ignored): ERR_INVALID naming the field. Unknown fields
 * stay accepted, as SDKs add optional fields faster than servers. */
int api_check_unsupported(const json_t *root, struct api_request *r, struct err_msg *msg);
/* OpenAI metadata (Chat, Responses): an object of at most 16 string values,
 * keys up to 64 characters, values up to 512; errors name "metadata" or
 * "metadata.KEY". Sets r->metadata. */
int api_get_metadata(const json_t *root, struct api_request *r, struct err_msg *msg);
/* Whether a prompt of n_prompt tokens fits a context of max_ctx tokens with
 * room for the answer (one token, or r->max_tokens when set): 0, or
 * ERR_CONTEXT with the message each API gives for it (OpenAI: "This model's
 * maximum context length is N tokens. However, ..."; Anthropic: "prompt is too
 * long: M tokens > N maximum") and r->bad_param set to the prompt's field
 * ("messages", "prompt", "input"). Called by the server after tokenizing. */
int api_check_context(struct api_request *r, int n_prompt, int max_ctx, struct err_msg *msg);

/* The bodies of POST /tokenize and /detokenize (tokenize.c). /tokenize takes
 * {"prompt" | "text": string, "add_special": bool (default true)} or
 * {"messages": [...]} (validated as Chat messages, for the chat template);
 * /detokenize {"tokens": [ids in [0, n_vocab)]}. */
struct api_tokenize {
    char *text;         /* /tokenize: the text to encode (owned); NULL with messages */
    bool add_special;   /* /tokenize: add the model's special prefix (BOS) to text */
    json_t *messages;   /* /tokenize: chat messages in the template's shape, or NULL */
    struct i32vec ids;  /* /detokenize: the ids to decode */
    char bad_param[96]; /* field named by the last decode error */
};
/* 0, or ERR_INVALID with msg and t->bad_param set. t is filled from zero. */
int api_tokenize_decode(const char *body, size_t len, struct api_tokenize *t, struct err_msg *msg);
int api_detokenize_decode(const char *body, size_t len, int n_vocab, struct api_tokenize *t,
                          struct err_msg *msg);
/* Frees what a decoder allocated; a zeroed struct is valid to release. */
void api_tokenize_release(struct api_tokenize *t);
/* ERR_INVALID naming param: message "param: ..." */
int api_fail(struct api_request *r, struct err_msg *msg, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Joins the text parts of an OpenAI / Anthropic content value (a string, or an
 * array of {type: text|input_text|output_text, text}) into one heap string. */
int api_content_text(const json_t *content, const char *path, char **out, struct api_request *r,
                     struct err_msg *msg);

#endif
