/*
 * seq.c - the "sequence" front end: alternatives of literal text and JSON
 * Schema values, in one grammar.
 *
 * Forced tool calls need a model family's wrapper text around a JSON value
 * (Qwen's "<tool_call>\n{...}\n</tool_call>", DeepSeek's marker tokens
 * around a name and a fenced JSON block). GBNF cannot embed a JSON Schema
 * and a schema cannot hold literal text, so this front end composes the two
 * at the builder level, where every front end meets:
 *
 *   source  [ alternative, ... ]                      at least one
 *   alternative  [ piece, ... ]                       at least one
 *   piece   "literal text"                            matched exactly (UTF-8)
 *         | {"schema": <JSON Schema>, "label": "..."} a JSON value the schema
 *                                                     accepts, whitespace around
 *
 *   root ::= alt_0 | alt_1 | ...     alt_i ::= piece piece ...
 *
 * Each schema piece is compiled by schema.c into the same builder (its own
 * rules; helper rules are not shared between pieces, which costs a few rules
 * and nothing else). A schema error keeps schema.c's message (keyword and
 * JSON pointer, relative to the piece's schema) behind the piece's label, so
 * the API can say which tool's parameters were refused.
 *
 * Thread: pure function of its input.
 */
#include "base/check.h"
#include "grammar/grammar_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int piece(struct grammar_builder *b, int alt, const json_t *p, const char *where,
                 struct err_msg *msg)
{
    if (json_is_string(p)) {
        if (json_string_length(p) > 0)
            grammar__lit(b, alt, json_string_value(p), json_string_length(p));
        return 0;
    }
    const json_t *schema = json_object_get(p, "schema");
    const json_t *label = json_object_get(p, "label");
    if (!json_is_object(p) || !schema || (label && !json_is_string(label)))
        return err_set(msg, ERR_INVALID,
                       "sequence: %s: expected a string or {\"schema\": ..., \"label\": string}",
                       where);
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(text);
    /* budget errors name the piece too */
    b->origin_prefix = label ? json_string_value(label) : where;
    int r = grammar__schema_build(b, text, strlen(text), false, msg);
    b->origin_prefix = NULL;
    free(text);
    if (r < 0) {
        char inner[sizeof(msg->text)];
        snprintf(inner, sizeof(inner), "%s", msg->text);
        return err_set(msg, r, "%s: %s", label ? json_string_value(label) : where, inner);
    }
    grammar__ref(b, alt, r);
    return 0;
}

int grammar__seq_build(struct grammar_builder *b, const char *src, size_t len, struct err_msg *msg)
{
    json_error_t jerr;
    json_t *doc = json_loadb(src, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc)
        return err_set(msg, ERR_INVALID, "sequence: not valid JSON: %s (line %d, column %d)",
                       jerr.text, jerr.line, jerr.column);
    int rc = 0;
    if (!json_is_array(doc) || json_array_size(doc) == 0) {
        rc = err_set(msg, ERR_INVALID, "sequence: expected a non-empty array of alternatives");
        goto out;
    }
    int root = grammar__rule(b, "root");
    size_t i, j;
    const json_t *alt, *p;
    json_array_foreach(doc, i, alt)
    {
        if (!json_is_array(alt) || json_array_size(alt) == 0) {
            rc = err_set(msg, ERR_INVALID, "sequence: [%zu]: expected a non-empty array of pieces",
                         i);
            goto out;
        }
        char name[32];
        snprintf(name, sizeof(name), "alt-%zu", i);
        int a = grammar__rule(b, name);
        grammar__alt(b, a);
        json_array_foreach(alt, j, p)
        {
            char where[48];
            snprintf(where, sizeof(where), "[%zu][%zu]", i, j);
            if ((rc = piece(b, a, p, where, msg))) goto out;
        }
        grammar__alt(b, root);
        grammar__ref(b, root, a);
    }
    rc = root;
out:
    json_decref(doc);
    return rc;
}
