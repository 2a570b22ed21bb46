/*
 * pipeline.h - the output side of one generation request: generated tokens
 * in, the API's bytes out.
 *
 * Per choice, every token goes through the same stages, in this order:
 *
 *   token id --> detokenizer --> stop strings --> tool-call parser --> encoder
 *   (+ logprob   (incremental,   (hold back a     (content, calls,     (SSE events into
 *    entries)     UTF-8 safe)     possible stop)   argument pieces)     `wire`, or the
 *                                                                       choice's text and
 *                                                                       calls for the JSON)
 *
 * The pipeline knows nothing of where tokens come from (the engine's events
 * in `inferd serve`, a worker's frames in a gateway) nor of HTTP: the caller
 * feeds tokens and finishes, then sends what accumulated in `wire` (streams)
 * or the JSON of api_pipe_response (whole answers). A stop string found in
 * the text ends its choice at once; api_pipe_token says so, so the caller can
 * cancel the choice's generation.
 *
 * Memory: a caller-owned struct (api_pipe_init / api_pipe_release); the
 * request it points to must outlive it. Tool names are copied. Thread: one
 * owner at a time (the tokenizer is immutable and shared).
 */
#ifndef INFERD_API_PIPELINE_H
#define INFERD_API_PIPELINE_H

#include "api/api.h"
#include "api/encode.h"
#include "api/stopstr.h"
#include "api/toolcall.h"
#include "base/buf.h"
#include "model/tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* What the pipeline needs of the served model. */
struct api_pipe_model {
    const struct tokenizer *tok; /* the model's tokenizer */
    const char *name;            /* the model's name in the API */
    enum toolcall_family family; /* how the model writes tool calls */
    const int32_t *markers;      /* (n_markers) special tokens the tool parser must see */
    int n_markers;               /* entries of markers */
};

/* One choice's state. */
struct api_pipe_choice {
    struct tokenizer_stream ts; /* incremental detokenizer */
    struct stopstr ss;          /* stop-string hold-back */
    struct toolcall_parser tc;  /* tool calls out of the text (when parse_tools) */
    json_t *lp_pending;         /* stream: logprob entries whose text is still held back */
    bool done;                  /* the choice has ended (out.choices[i].finish set) */
};

struct api_pipe {
    struct api_out out;         /* the results, in the encoders' terms */
    struct api_pipe_model m;    /* the model (copied) */
    bool parse_tools;           /* the output is parsed for tool calls */
    char **tool_names;          /* (n_tool_names) the request's tools (owned) */
    int n_tool_names;           /* entries of tool_names */
    struct api_pipe_choice *ch; /* (out.n_choices) */
    bool started;               /* stream: the start events are in `wire` already */
    struct buf wire;            /* stream bytes not yet taken by the caller */
};

/* The choices are n_prompts * r->n (prompt-major). parse_tools: the
 * request's tools are parsed out of the text (the caller decides: tools
 * given, tool_choice not none, a known family). The caller sets out.id and
 * the usage counts. Every input here was validated by the decoders. */
void api_pipe_init(struct api_pipe *p, const struct api_request *r, const struct api_pipe_model *m,
                   int n_prompts, bool parse_tools, int64_t created);
void api_pipe_release(struct api_pipe *p);

/* Echo: the prompt text opens choice i's text (and its stream). */
void api_pipe_echo(struct api_pipe *p, int i, const char *text, size_t len);

/* One generated token of choice i. n_generated: tokens generated so far
 * (this one included). ends_turn: the generation stopped on this token with
 * STOP (an end-of-generation token is then not rendered). tops: (n_top)
 * alternatives for logprobs. Returns true when this token ended the choice
 * (a stop string, or the first tool call of a request that allows one): the
 * caller should stop generating it. */
struct api_pipe_top {
    int32_t token; /* alternative token */
    float logprob; /* its log probability */
};
bool api_pipe_token(struct api_pipe *p, int i, int32_t token, float logprob,
                    const struct api_pipe_top *tops, int n_top, int n_generated, bool ends_turn);
/* The generation of choice i ended (why: EOG, LENGTH or ERROR): flushes the
 * held-back text and ends the choice. No-op for a choice already ended. */
void api_pipe_finish(struct api_pipe *p, int i, enum api_finish why);
bool api_pipe_all_done(const struct api_pipe *p);

/* Stream: the start events (if not sent yet). */
void api_pipe_stream_begin(struct api_pipe *p);
/* Stream: the final events (usage, [DONE], response.completed, ...). */
void api_pipe_stream_end(struct api_pipe *p);
/* Stream: an error event after the stream started. */
void api_pipe_stream_error(struct api_pipe *p, int code, const char *message);

#endif
