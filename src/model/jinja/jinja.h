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
 * or the raise_exception text for a template's own checks. Unknown filters
 * and tests are parse errors.
 *
 * Semantics are Python Jinja2's where it and @huggingface/jinja disagree
 * (transformers renders with Jinja2): undefined prints as "" and a missing
 * key or attribute is undefined, but an attribute or item of an undefined
 * value is an error ("'x' is undefined"); None prints "None", booleans
 * "True"/"False", lists and dicts as Python's repr; == compares content;
 * str.strip(chars) strips only chars; tojson is json.dumps(ensure_ascii=
 * False) with ", " / ": " separators (indent, sort_keys, separators and
 * ensure_ascii arguments honoured). Case mapping is ASCII only.
 *
 * strftime_now(fmt) formats the current UTC time, or the time in
 * INFERD_TEMPLATE_NOW (seconds since the epoch) when that is set.
 *
 * Limits (each an error naming the line, so a hostile template cannot take
 * the process down): 1 MiB of source (ERR_TOO_LARGE), block / expression
 * nesting 128, macro recursion 64, 16 MiB of output and per string, 10^6
 * loop iterations and list items per render, 256 MiB of render memory.
 * Rendering needs under 512 KiB of stack whatever the template.
 *
 * Lifetime: a parsed template is a heap object, immutable after parsing; any
 * thread may render it concurrently (render state is per call). ctx is only
 * read, and must outlive the render call.
 */
#ifndef INFERD_MODEL_JINJA_H
#define INFERD_MODEL_JINJA_H

#include "base/buf.h"
#include "base/err.h"

#include <jansson.h>
#include <stddef.h>

struct jinja_template;

/* Parses src[0..len) (need not be NUL-terminated) into *out. */
int jinja_parse(const char *src, size_t len, struct jinja_template **out, struct err_msg *msg);
void jinja_free(struct jinja_template *t);

/* Renders with ctx (a JSON object; NULL = empty) and appends to out. On error
 * out may hold a partial rendering. */
int jinja_render(const struct jinja_template *t, const json_t *ctx, struct buf *out,
                 struct err_msg *msg);

#endif
