/*
 * resources.h - the answers of the GET endpoints that generate nothing: the
 * served models (OpenAI's and Anthropic's shapes) and a stored response's
 * input items (OpenAI's cursor list), with the path and query parsing they
 * need. The server routes and sends; everything about shapes, parameters
 * and their errors is here, so it is tested and fuzzed without a server.
 *
 *   GET /v1/models               api_models_list
 *   GET /v1/models/{id}          api_path_match, api_model_find, api_model_object
 *   GET /v1/responses/{id}/input_items
 *                                api_path_match, api_input_items_query, then
 *                                store_get(id) -> api_input_items
 *
 * Which models shape: the Anthropic SDK sends an `anthropic-version` header
 * with every request (the OpenAI SDK never does), so a request with one gets
 * kind API_MESSAGES, any other API_CHAT; errors go out in that kind's schema
 * (api_error_json).
 *
 * Lifetime: returned JSON is a new reference owned by the caller; inputs
 * are only read. Thread: the event-loop thread; pure functions.
 */
#ifndef INFERD_API_RESOURCES_H
#define INFERD_API_RESOURCES_H

#include "api/api.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* One served model, as the server knows it. */
struct api_model_info {
    const char *id;           /* the id clients send as "model" */
    const char *display_name; /* Anthropic display_name; NULL: the id */
    int64_t created;          /* unix seconds (OpenAI created, Anthropic created_at) */
    const char *owned_by;     /* OpenAI owned_by; NULL: "inferd" */
    int context_length;       /* tokens of context (prompt + answer) */
    const char *description;  /* OpenAI description (e.g. the demo-model note), or NULL */
};

/* The model object: OpenAI {id, object: "model", created, owned_by,
 * context_length[, description]}; Anthropic (kind API_MESSAGES) {type:
 * "model", id, display_name, created_at (RFC 3339), max_input_tokens,
 * max_tokens, lifecycle: "active", ...}. */
json_t *api_model_object(enum api_kind kind, const struct api_model_info *m);
/* GET /v1/models: OpenAI {object: "list", data}; Anthropic {data, has_more:
 * false, first_id, last_id} (every model in one page). */
json_t *api_models_list(enum api_kind kind, const struct api_model_info *models, int n);
/* The index of id among models, or ERR_NOT_FOUND with msg ("model 'x' does
 * not exist; this server serves 'y'"); the server answers it with param
 * "model" (OpenAI code "model_not_found"). */
int api_model_find(const struct api_model_info *models, int n, const char *id, struct err_msg *msg);

/* Whether path (no query) is prefix + ID + suffix with ID one non-empty path
 * segment; ID is percent-decoded into id (n bytes, NUL-terminated). False
 * when ID is empty, holds '/', decodes to a NUL or does not fit. */
bool api_path_match(const char *path, const char *prefix, const char *suffix, char *id, size_t n);

/* The query of GET /v1/responses/{id}/input_items. */
struct api_items_query {
    int limit;          /* items per page, 1..100 (default 20) */
    bool asc;           /* order=asc: oldest first (default desc: newest first) */
    char after[128];    /* list the items after this id ("" = from the start) */
    char bad_param[32]; /* parameter named by the last error */
};
/* Parses query (what follows '?' in the URI; NULL or "" for none): limit,
 * order, after; include / include[] are accepted and ignored (inferd's input
 * items carry no images, file results or logprobs to include); other
 * parameters are ignored. ERR_INVALID naming the parameter in msg
 * ("limit: expected an integer in [1, 100]") and q->bad_param. */
int api_input_items_query(const char *query, struct api_items_query *q, struct err_msg *msg);
/* The input items of stored response response_id as OpenAI's list {object:
 * "list", data, first_id, last_id, has_more}. conversation: the stored
 * conversation JSON text (api_responses_conversation: every message up to
 * and including the response's own answer, which is left out). Items are
 * the whole input the response answered: the turns of earlier responses it
 * continued (previous_response_id) and its own input; messages become
 * message items (input_text / output_text parts), assistant tool calls
 * function_call items, tool messages function_call_output items. Ids are
 * stable: a type prefix, the response id's random part and the item's
 * position. ERR_INVALID (param "after" in q->bad_param) when q->after is no
 * item's id; ERR_INTERNAL when conversation is not readable. */
int api_input_items(const char *response_id, const char *conversation, struct api_items_query *q,
                    json_t **out, struct err_msg *msg);

#endif
