/*
 * encode.h - results back into each API's shapes: whole responses, stream
 * events and errors.
 *
 * The serving layer keeps one struct api_out per HTTP request: the decoded
 * request, one api_choice per generated sequence (prompt-major: choice
 * p * n + j is completion j of prompt p), and the usage counts. Encoders read
 * it and write JSON; stream encoders append complete SSE events to a buf.
 *
 * Stream order, per API (what the encoders emit at each call):
 *   start       chat: a role chunk per choice (with lazy_blocks, on the
 *               choice's first text, call or end instead: a call's first
 *               chunk carries role and content null, as OpenAI's does) |
 *               responses: response.created,
 *               response.in_progress, output_item.added, content_part.added |
 *               messages: message_start, content_block_start, ping
 *   delta       one text chunk (chat / completions chunk, output_text.delta,
 *               content_block_delta with text_delta)
 *   tool_*      a parsed tool call: start, argument pieces, end (chat:
 *               delta.tool_calls | responses: function_call item events |
 *               messages: tool_use block with input_json_delta). When tools
 *               are parsed (lazy_blocks), Responses items and Anthropic
 *               blocks open on their first text or call and close when the
 *               next one opens; an answer with neither still gets one empty
 *               text block.
 *   choice_end  chat / completions: a chunk carrying finish_reason |
 *               responses: output_text.done, content_part.done,
 *               output_item.done | messages: content_block_stop
 *   end         chat / completions: the usage chunk (include_usage) and
 *               [DONE] | responses: response.completed | messages:
 *               message_delta (stop_reason, usage) and message_stop
 *
 * Thread: the event-loop thread, one request's owner.
 */
#ifndef INFERD_API_ENCODE_H
#define INFERD_API_ENCODE_H

#include "api/api.h"
#include "base/buf.h"

#include <jansson.h>
#include <stdint.h>

enum api_finish {
    API_FINISH_NONE,     /* still generating */
    API_FINISH_EOG,      /* the model ended its turn (end-of-generation token) */
    API_FINISH_LENGTH,   /* max_tokens or the context length */
    API_FINISH_STOP_SEQ, /* a stop string (stop_index says which) */
    API_FINISH_ERROR,    /* the engine failed the request */
};

/* One parsed tool call of a choice (api/toolcall.h). */
struct api_toolcall {
    char id[48];     /* call id (call_..., toolu_..., or Mistral's 9 characters) */
    char *name;      /* function name (owned) */
    struct buf args; /* arguments: JSON object text, as the model wrote it */
};

struct api_choice {
    struct buf text;            /* whole content text so far (calls excluded) */
    struct api_toolcall *calls; /* (n_calls) tool calls parsed from the output */
    int n_calls;                /* entries of calls */
    json_t *logprobs;           /* chat: array of content entries; completions: logprobs object */
    int n_tokens;               /* tokens generated */
    enum api_finish finish;     /* why it ended */
    int stop_index;             /* API_FINISH_STOP_SEQ: index into req->stop */
    bool opened;                /* chat stream: its role chunk went out */
};

struct api_out {
    const struct api_request *req; /* what was asked */
    char id[64];                   /* chatcmpl-..., cmpl-..., resp_..., msg_... */
    int64_t created;               /* unix seconds */
    const char *model;             /* the served model's name */
    struct api_choice *choices;    /* (n_choices) */
    int n_choices;                 /* prompts * n */
    int n_prompt_tokens;           /* prompt tokens over every prompt (once per prompt) */
    int n_cached_tokens;           /* of those, served from the prefix cache */
    int seq;                       /* Responses stream sequence_number, next to use */
    bool lazy_blocks;              /* tools parsed: Responses items / Anthropic blocks open
                                      when their first text or call comes (else the text
                                      block opens with the stream) */
    int block;                     /* Responses output_index / Anthropic block index now */
    int open;                      /* what is open at `block`: 0 nothing, 1 text, 2 a call */
    size_t text_from;              /* choice text offset where the open text block began */
};

int api_out_completion_tokens(const struct api_out *o);

/* Logprob entries for one token, in each API's shape. text: the token's
 * own text; tops: (n_top) alternatives with their texts. */
struct api_top {
    const char *text; /* token text */
    float logprob;    /* natural log */
};
/* Appends one token's entry to *target (created on first use): chat: an
 * array of {token, logprob, bytes, top_logprobs}; completions: an object of
 * parallel arrays {tokens, token_logprobs, top_logprobs, text_offset}. */
void api_logprob_append(enum api_kind kind, json_t **target, const char *text, float logprob,
                        const struct api_top *tops, int n_top, size_t text_offset);

json_t *api_response(const struct api_out *o);
void api_stream_start(struct api_out *o, struct buf *sse);
/* lp: logprob entries for this delta (chat: array; completions: object) or NULL. */
void api_stream_delta(struct api_out *o, int i, const char *text, size_t len, json_t *lp,
                      struct buf *sse);
/* Tool call k of choice i (o->choices[i].calls[k] is filled): its start,
 * a piece of its arguments, its end. Chat: delta.tool_calls; Responses: a
 * function_call output item; Messages: a tool_use content block. */
void api_stream_tool_start(struct api_out *o, int i, int k, struct buf *sse);
void api_stream_tool_args(struct api_out *o, int i, int k, const char *text, size_t len,
                          struct buf *sse);
void api_stream_tool_end(struct api_out *o, int i, int k, struct buf *sse);
void api_stream_choice_end(struct api_out *o, int i, struct buf *sse);
void api_stream_end(struct api_out *o, struct buf *sse);
/* An error in the API's own schema (HTTP status separately). For streams
 * that already started, api_stream_error appends an error event. OpenAI's
 * "code": "invalid_value" (ERR_INVALID), "context_length_exceeded"
 * (ERR_CONTEXT), "model_not_found" (ERR_NOT_FOUND with param "model"),
 * null otherwise. */
json_t *api_error_json(enum api_kind kind, int code, const char *message, const char *param);
void api_stream_error(const struct api_out *o, int code, const char *message, struct buf *sse);
/* The Responses conversation to store: the turn's messages plus the answer. */
json_t *api_responses_conversation(const struct api_out *o, const json_t *history);

#endif
