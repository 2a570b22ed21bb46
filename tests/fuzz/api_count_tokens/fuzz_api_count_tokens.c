/*
 * fuzz_api_count_tokens.c - fuzz target for the body of Anthropic's POST
 * /v1/messages/count_tokens (anthropic_count_decode): any bytes decode to a
 * request or to ERR_INVALID naming a field, never a crash, and the decoded
 * request releases cleanly. A decoded request has chat messages for the
 * template (the system prompt first when given).
 */
#include "api/api.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct api_request r;
    struct err_msg m = {{0}};
    int rc = anthropic_count_decode((const char *)data, size, &r, &m);
    if (rc != 0 && (rc != ERR_INVALID || !m.text[0] || !r.bad_param[0])) abort();
    if (rc == 0 && (!json_is_array(r.messages) || r.kind != API_MESSAGES)) abort();
    api_request_release(&r);
    return 0;
}
