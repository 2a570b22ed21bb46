/*
 * fuzz_jinja.c - fuzz target for the Jinja interpreter: chat templates come
 * from model files and tokenizer configs, so a template is untrusted input.
 *
 * Input: template source. It is parsed and, when it parses, rendered twice
 * against a fixed context shaped like a chat (system / user / assistant with
 * tool calls / tool messages, tools, kwargs, bos/eos), once with
 * add_generation_prompt true and once false, so both halves of the usual
 * templates run. Any outcome but a crash, a sanitizer report or a leak is
 * fine; the limits in jinja_impl.h bound time and memory.
 */
#include "model/jinja/jinja.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char ctx_text[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"  Hi \\u00e9\\n\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nok\", "
    "\"reasoning_content\": null},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}, "
    "{\"type\": \"image\"}]},"
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"abcdefghi\", "
    "\"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1.5, "
    "\"y\": [true, null]}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"abcdefghi\", \"content\": \"{\\\"r\\\": 1}\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": "
    "\"d\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": "
    "\"number\"}}, \"required\": [\"x\"]}}}],"
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false,"
    "\"add_generation_prompt\": true}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *ctx;
    if (!ctx) {
        ctx = json_loads(ctx_text, 0, NULL);
        if (!ctx) abort();
    }
    struct jinja_template *t;
    struct err_msg msg;
    if (jinja_parse((const char *)data, size, &t, &msg)) return 0;
    struct buf out = {0};
    for (int gen = 0; gen < 2; gen++) {
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(gen));
        buf_clear(&out);
        jinja_render(t, ctx, &out, &msg);
    }
    buf_release(&out);
    jinja_free(t);
    return 0;
}
