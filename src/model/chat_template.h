/*
 * chat_template.h - turns a chat (OpenAI-style messages, optional tools) into
 * the prompt text the model was trained on, by running the model's own Jinja
 * chat template (tokenizer.chat_template) the way Hugging Face's
 * apply_chat_template does.
 *
 * Before rendering, messages are brought into the shape the shipped templates
 * expect: a content array of text parts becomes one string; an assistant
 * tool call's function.arguments given as a JSON string is parsed into an
 * object (templates apply `tojson` to it); the template sees bos_token,
 * eos_token, messages, tools (when given), add_generation_prompt, and every
 * member of kwargs (e.g. enable_thinking) as globals.
 *
 * Lifetime: heap object, immutable after creation; any thread may apply it
 * concurrently.
 */
#ifndef INFERD_MODEL_CHAT_TEMPLATE_H
#define INFERD_MODEL_CHAT_TEMPLATE_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stdbool.h>

struct chat_template;

/* Parses src (a Jinja chat template). bos_text / eos_text may be "" (not
 * NULL). ERR_INVALID with "template line N: ..." on a bad template. */
int chat_template_new(const char *src, const char *bos_text, const char *eos_text,
                      struct chat_template **out, struct err_msg *msg);
void chat_template_free(struct chat_template *ct);

struct gguf_file;

/* The model's own template: tokenizer.chat_template, with bos/eos text from
 * tokenizer.ggml.tokens[tokenizer.ggml.{bos,eos}_token_id] ("" when a key is
 * absent). ERR_NOT_FOUND when the file has no chat template; ERR_FORMAT for
 * a token id outside the vocabulary; parse errors as chat_template_new. */
int chat_template_from_gguf(const struct gguf_file *f, struct chat_template **out,
                            struct err_msg *msg);

/* Appends the prompt text to out. messages: JSON array of message objects
 * (role, content, name, tool_calls, tool_call_id); tools: JSON array of
 * OpenAI tool definitions or NULL; kwargs: JSON object or NULL. Returns
 * ERR_INVALID with a message naming the message index and field for bad
 * input, or the template's own raise_exception text. */
int chat_template_apply(const struct chat_template *ct, const json_t *messages, const json_t *tools,
                        bool add_generation_prompt, const json_t *kwargs, struct buf *out,
                        struct err_msg *msg);

#endif
