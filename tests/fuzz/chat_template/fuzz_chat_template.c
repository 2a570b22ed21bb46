/*
 * fuzz_chat_template.c - fuzz target for chat_template_apply with the chat
 * templates of real models: the messages and tools of a request are
 * untrusted input of every template the server runs.
 *
 * Templates: Qwen3, DeepSeek-V3, Mistral-Nemo and Llama 3 as their
 * tokenizer_config.json ships them (templates.h, written by
 * gen_templates.py; no files are read at run time, so the replay needs no
 * model). Input: a JSON object {"messages", "tools", "kwargs"}, each passed
 * as it is (any JSON value, or absent), rendered by every template with
 * add_generation_prompt true and false. Bytes that are not JSON are passed
 * as the text of one user message.
 *
 * Checks (abort on failure): never a crash; a shape the server could never
 * send is refused with ERR_INVALID and a message, whatever the template:
 * messages not an array, a message not an object or without a string role,
 * tools not an array, kwargs not an object.
 */
#include "model/chat_template.h"

#include "templates.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_TEMPLATES (sizeof(fuzz_templates) / sizeof(fuzz_templates[0]))

static struct chat_template *tmpl[N_TEMPLATES];

static void load(void)
{
    for (size_t i = 0; i < N_TEMPLATES; i++) {
        struct err_msg msg;
        if (chat_template_new(fuzz_templates[i].src, fuzz_templates[i].bos, fuzz_templates[i].eos,
                              &tmpl[i], &msg))
            abort(); /* a shipped template must parse */
    }
}

/* A shape no decoder lets through: every template must refuse it. */
static bool bad_shape(const json_t *messages, const json_t *tools, const json_t *kwargs)
{
    if (!json_is_array(messages)) return true;
    if (tools && !json_is_null(tools) && !json_is_array(tools)) return true;
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) return true;
    size_t i;
    const json_t *m;
    json_array_foreach(messages, i, m)
    {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) return true;
    }
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tmpl[0]) load();
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    if (!root) {
        json_t *text = json_stringn((const char *)data, size);
        if (!text) return 0; /* not UTF-8: no request carries it */
        root = json_pack("{s:[{s:s,s:o}]}", "messages", "role", "user", "content", text);
    }
    const json_t *messages = json_object_get(root, "messages");
    const json_t *tools = json_object_get(root, "tools");
    const json_t *kwargs = json_object_get(root, "kwargs");
    if (json_is_null(tools)) tools = NULL;
    if (json_is_null(kwargs)) kwargs = NULL;
    bool bad = bad_shape(messages, tools, kwargs);
    struct buf out = {0};
    for (size_t i = 0; i < N_TEMPLATES; i++) {
        for (int gen = 0; gen < 2; gen++) {
            struct err_msg msg = {{0}};
            buf_clear(&out);
            int rc = chat_template_apply(tmpl[i], messages, tools, gen, kwargs, &out, &msg);
            if (bad && (rc != ERR_INVALID || !msg.text[0])) abort();
            if (rc && !msg.text[0]) abort();
        }
    }
    buf_release(&out);
    json_decref(root);
    return 0;
}
