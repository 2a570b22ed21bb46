/*
 * jinja.h - a Jinja2 interpreter for chat templates.
 *
 * Covers what the chat templates shipped with DeepSeek-V3, Qwen3/Qwen2.5,
 * Llama 3.x, Mistral and Gemma 3 use, rendering exactly what Hugging Face's
 * transformers (and @huggingface/jinja) render: statements (if/elif/else,
 * for with else and loop.*, set incl. block set, macro, call, filter,
 * namespace), expressions, filters, tests, string/list/dict methods,
 * raise_exception, whitespace control ({%- -%}, trim_blocks and
 * lstrip_blocks as transformers sets them).
 *
 * Values come in as jansson JSON (the API layer already holds the request as
 * JSON): the render context is a JSON object whose members become the
 * template's global variables, e.g.
 *   {"messages": [...], "tools": [...], "add_generation_prompt": true,
 *    "bos_token": "<s>", "eos_token": "</s>"}
 *
 * Errors (parse or render) are ERR_INVALID with a message that names the
 * template line and the construct: "template line 12: unknown filter 'foo'",
 * or the raise_exception text for a template's own checks.
 *
 * Lifetime: a parsed template is a heap object, immutable after parsing; any
 * thread may render it concurrently (render state is per call).
 */
#ifndef INFERD_MODEL_JINJA_H
#define INFERD_MODEL_JINJA_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stddef.h>

struct jinja_template;

int jinja_parse(const char *src, size_t len, struct jinja_template **out, struct err_msg *msg);
void jinja_free(struct jinja_template *t);

/* Renders with ctx (a JSON object; NULL = empty) and appends to out. On error
 * out may hold a partial rendering. */
int jinja_render(const struct jinja_template *t, const json_t *ctx, struct buf *out,
                 struct err_msg *msg);

#endif
