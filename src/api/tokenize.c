/*
 * tokenize.c - the bodies of the server's POST /tokenize and /detokenize
 * (vLLM's shapes), decoded into struct api_tokenize (api.h).
 *
 * /tokenize: {"messages": [...]} runs the Chat Completions message
 * validation (the server then renders them with the chat template), else
 * "prompt" (or "text") must be a string, with "add_special" (default true)
 * for the model's BOS. /detokenize: {"tokens": [...]}, every id inside the
 * vocabulary. Errors name the field, as the generation decoders' do; the
 * server answers them in the OpenAI error schema.
 *
 * Thread: the event-loop thread. Fuzzed by tests/fuzz/api_tokenize/.
 */
#include "api/api.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void api_tokenize_release(struct api_tokenize *t)
{
    free(t->text);
    json_decref(t->messages);
    i32vec_release(&t->ids);
    memset(t, 0, sizeof(*t));
}

/* Hands a decode error's field from the scratch request to t. */
static int keep_param(int rc, const struct api_request *r, struct api_tokenize *t)
{
    if (rc) snprintf(t->bad_param, sizeof(t->bad_param), "%s", r->bad_param);
    return rc;
}

int api_tokenize_decode(const char *body, size_t len, struct api_tokenize *t, struct err_msg *msg)
{
    memset(t, 0, sizeof(*t));
    t->add_special = true;
    struct api_request r = {0};
    json_t *root;
    int rc = api_parse_body(body, len, &root, &r, msg);
    if (rc) return keep_param(rc, &r, t);
    const json_t *msgs = json_object_get(root, "messages");
    if (msgs) {
        /* The chat decoder's validation, on a body of the messages alone. */
        json_t *wrap = json_pack("{s:O}", "messages", msgs);
        char *w = json_dumps(wrap, JSON_COMPACT);
        CHECK(w);
        rc = openai_chat_decode(w, strlen(w), &r, msg);
        free(w);
        json_decref(wrap);
        if (!rc) {
            t->messages = r.messages;
            r.messages = NULL;
        }
    } else {
        const json_t *text = json_object_get(root, "prompt");
        if (!text) text = json_object_get(root, "text");
        if (!json_is_string(text))
            rc = api_fail(&r, msg, "prompt", "expected a string (or 'messages')");
        else
            rc = api_get_bool(root, "add_special", &t->add_special, &r, msg);
        if (!rc) t->text = xstrdup(json_string_value(text));
    }
    json_decref(root);
    keep_param(rc, &r, t);
    api_request_release(&r);
    return rc;
}

int api_detokenize_decode(const char *body, size_t len, int n_vocab, struct api_tokenize *t,
                          struct err_msg *msg)
{
    memset(t, 0, sizeof(*t));
    struct api_request r = {0};
    json_t *root;
    int rc = api_parse_body(body, len, &root, &r, msg);
    if (rc) return keep_param(rc, &r, t);
    const json_t *tokens = json_object_get(root, "tokens");
    if (!json_is_array(tokens)) rc = api_fail(&r, msg, "tokens", "expected an array of token ids");
    size_t i;
    const json_t *v;
    if (!rc) json_array_foreach(tokens, i, v)
        {
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) >= n_vocab) {
                char p[48];
                snprintf(p, sizeof(p), "tokens[%zu]", i);
                rc = api_fail(&r, msg, p, "expected a token id in [0, %d)", n_vocab);
                break;
            }
            i32vec_push(&t->ids, (int32_t)json_integer_value(v));
        }
    json_decref(root);
    return keep_param(rc, &r, t);
}
