/*
 * fuzz_api_items.c - fuzz target for the routes and queries of the GET
 * endpoints (api/resources.h): a request path and query are untrusted bytes.
 *
 * Input: the bytes as a path (api_path_match against the model and
 * input-items routes) and as a query (api_input_items_query), which, when it
 * parses, pages through a fixed stored conversation (api_input_items).
 * Checks (abort on failure): a matched id is non-empty and fits; a query
 * error names its parameter; a page holds at most `limit` items, and an
 * error is ERR_INVALID naming "after".
 */
#include "api/resources.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char conversation[] =
    "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":null,"
    "\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
    "\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c\"},"
    "{\"role\":\"assistant\",\"content\":\"a\"}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0; /* a path or query never holds a NUL: stop there */
    char id[64];
    if (api_path_match(s, "/v1/models/", "", id, sizeof(id)) &&
        (!id[0] || strlen(id) >= sizeof(id) || strncmp(s, "/v1/models/", 11)))
        abort();
    if (api_path_match(s, "/v1/responses/", "/input_items", id, sizeof(id)) &&
        (!id[0] || strlen(id) >= sizeof(id)))
        abort();
    struct api_items_query q;
    struct err_msg m = {{0}};
    int rc = api_input_items_query(s, &q, &m);
    if (rc != 0 && (rc != ERR_INVALID || !q.bad_param[0] || !m.text[0])) abort();
    if (rc == 0) {
        if (q.limit < 1 || q.limit > 100) abort();
        json_t *out = NULL;
        rc = api_input_items("resp_fuzz", conversation, &q, &out, &m);
        if (rc != 0 && (rc != ERR_INVALID || strcmp(q.bad_param, "after"))) abort();
        if (rc == 0 && json_array_size(json_object_get(out, "data")) > (size_t)q.limit) abort();
        json_decref(out);
    }
    free(s);
    return 0;
}
