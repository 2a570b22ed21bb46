/*
 * fuzz_api_chat.c - fuzz target for the OpenAI Chat Completions request decoder: any bytes
 * from the network decode to a request or to ERR_INVALID naming a field,
 * never a crash, and the decoded request releases cleanly.
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
    int rc = openai_chat_decode((const char *)data, size, &r, &m);
    if (rc != 0 && (rc != ERR_INVALID || !m.text[0] || !r.bad_param[0])) abort();
    api_request_release(&r);
    return 0;
}
