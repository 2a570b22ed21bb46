/*
 * prep.c - preparing a generation request, on a prep thread: everything
 * between the request's bytes and the token ids the engine takes.
 *
 *   body --decode--> api_request --(Responses) stored conversation--> messages
 *        --chat template--> text --byte bound--> tokenizer --> prompt ids
 *        --checks (context, vocabulary, logit bias)--> grammar compiled
 *        (under its budgets) --> ready
 *
 * None of it may run on the event loop: decoding an 8 MiB body, rendering a
 * long conversation, tokenizing a large prompt or compiling a grammar takes
 * milliseconds to seconds, and every other client would wait for it; nor on
 * the engine thread, where every running stream would.
 *
 * The byte bound. A token stands for at most max_token_bytes bytes of text
 * (the longest token of the vocabulary), so a text of B bytes has at least
 * B / max_token_bytes tokens - unless the tokenizer's normalization shrinks
 * it first: NFC composes at most three bytes into one in the worst case
 * (a decomposed Hangul syllable, 9 bytes, becomes 3). Text longer than
 * 3 * max_token_bytes * max_ctx bytes therefore cannot fit the context
 * whatever it says, and is refused before the tokenizer sees it - and a body
 * holding a string that long before the JSON parser does (one pass over the
 * raw bytes, api_json_longest_string: an 8 MiB prompt costs ~8 ms of a prep
 * thread instead of ~80).
 *
 * Thread: a prep thread owns the call's `r` and `prep` while the job runs;
 * it reads the server's immutable parts (tokenizer, template, model name,
 * limits) and the store (which has its own lock).
 */
#include "serve/server_impl.h"

#include "api/toolcall.h"
#include "base/check.h"
#include "model/chat_template.h"
#include "model/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool model_ok(struct server *s, const char *name)
{
    return !*name || !strcmp(name, s->model_name);
}

/* Responses: instructions, the stored conversation continued, the input. */
static int build_messages(struct server *s, struct call *c, struct err_msg *msg)
{
    struct api_request *r = &c->r;
    if (r->kind != API_RESPONSES) return 0;
    json_t *msgs = json_array();
    if (r->instructions)
        json_array_append_new(msgs,
                              json_pack("{s:s,s:s}", "role", "system", "content", r->instructions));
    if (r->previous_response_id) {
        char *conv = NULL;
        if (!s->store) {
            json_decref(msgs);
            return err_set(msg, ERR_NOT_FOUND, "previous_response_id: no response store");
        }
        int rc = store_get(s->store, r->previous_response_id, NULL, &conv, msg);
        if (rc) {
            json_decref(msgs);
            snprintf(r->bad_param, sizeof(r->bad_param), "previous_response_id");
            return rc;
        }
        c->prep.history = json_loads(conv, 0, NULL);
        free(conv);
        if (!json_is_array(c->prep.history)) {
            json_decref(msgs);
            return err_set(msg, ERR_INTERNAL, "stored conversation of '%s' is unreadable",
                           r->previous_response_id);
        }
        json_array_extend(msgs, c->prep.history);
    }
    json_array_extend(msgs, r->input_items);
    r->messages = msgs;
    return 0;
}

/* Tool calls: which output is parsed, and the grammar of a forced call. */
static int setup_tools(struct server *s, struct call *c, struct err_msg *msg)
{
    struct api_request *r = &c->r;
    if (!r->tools || r->kind == API_COMPLETION) return 0;
    if (r->tool_choice == API_TOOL_CHOICE_REQUIRED || r->tool_choice == API_TOOL_CHOICE_NAMED) {
        struct buf g = {0};
        int rc = toolcall_grammar(s->pm.family, r->tools,
                                  r->tool_choice == API_TOOL_CHOICE_NAMED ? r->tool_name : NULL, &g,
                                  msg);
        if (rc) {
            snprintf(r->bad_param, sizeof(r->bad_param), "tool_choice");
            buf_release(&g);
            return rc;
        }
        r->grammar_kind = INFERD_GRAMMAR_SEQUENCE;
        r->grammar_src = xstrdup(buf_str(&g));
        buf_release(&g);
    }
    if (r->tool_choice == API_TOOL_CHOICE_NONE || s->pm.family == TOOLCALL_NONE) return 0;
    c->prep.parse_tools = true;
    return 0;
}

/* The context error for a prompt known only from its text's length to be
 * beyond the context (the byte bound): no token count to quote. */
static int text_too_long(struct server *s, struct call *c, size_t bytes, struct err_msg *msg)
{
    const char *param = c->r.kind == API_COMPLETION  ? "prompt"
                        : c->r.kind == API_RESPONSES ? "input"
                                                     : "messages";
    snprintf(c->r.bad_param, sizeof(c->r.bad_param), "%s", param);
    if (c->r.kind == API_MESSAGES)
        return err_set(msg, ERR_CONTEXT,
                       "prompt is too long: %zu bytes of text cannot fit %d tokens maximum", bytes,
                       s->max_ctx);
    return err_set(msg, ERR_CONTEXT,
                   "This model's maximum context length is %d tokens. However, your %s's text "
                   "is %zu bytes, more than any %d tokens can hold. Please reduce the length of "
                   "the %s.",
                   s->max_ctx, param, bytes, s->max_ctx, param);
}

static int tokenize_prompts(struct server *s, struct call *c, struct err_msg *msg)
{
    int rc;
    struct api_request *r = &c->r;
    struct call_prep *p = &c->prep;
    if (r->messages) {
        if (!s->tmpl)
            return err_set(msg, ERR_INVALID,
                           "messages: the model has no chat template; use /v1/completions");
        struct buf text = {0};
        rc = chat_template_apply(s->tmpl, r->messages, r->tools, true, NULL, &text, msg);
        if (!rc && text.len > s->max_prompt_bytes) rc = text_too_long(s, c, text.len, msg);
        if (rc) {
            buf_release(&text);
            return rc;
        }
        p->n_prompts = 1;
        p->prompt_ids = xcalloc(1, sizeof(*p->prompt_ids));
        tokenizer_encode(s->tok, buf_str(&text), text.len, TOKENIZER_PARSE_SPECIAL,
                         &p->prompt_ids[0]);
        buf_release(&text);
    } else {
        for (int k = 0; k < r->n_prompts; k++)
            if (r->prompts[k].text && strlen(r->prompts[k].text) > s->max_prompt_bytes)
                return text_too_long(s, c, strlen(r->prompts[k].text), msg);
        p->n_prompts = r->n_prompts;
        p->prompt_ids = xcalloc((size_t)r->n_prompts, sizeof(*p->prompt_ids));
        if (r->echo) p->prompt_text = xcalloc((size_t)r->n_prompts, sizeof(char *));
        for (int k = 0; k < r->n_prompts; k++) {
            const struct api_prompt *ap = &r->prompts[k];
            if (ap->text)
                tokenizer_encode(s->tok, ap->text, strlen(ap->text),
                                 TOKENIZER_ADD_SPECIAL | TOKENIZER_PARSE_SPECIAL,
                                 &p->prompt_ids[k]);
            else
                i32vec_append(&p->prompt_ids[k], ap->ids.v, ap->ids.n);
            for (size_t t = 0; t < p->prompt_ids[k].n; t++) {
                int32_t id = p->prompt_ids[k].v[t];
                if (id < 0 || id >= s->n_vocab) {
                    snprintf(r->bad_param, sizeof(r->bad_param), "prompt");
                    return err_set(msg, ERR_INVALID,
                                   "prompt[%d][%zu]: token id %d is out of range [0, %d)", k, t, id,
                                   s->n_vocab);
                }
            }
            if (r->echo) {
                struct buf t = {0};
                if (ap->text)
                    buf_puts(&t, ap->text);
                else
                    tokenizer_decode(s->tok, ap->ids.v, ap->ids.n, false, &t, NULL);
                p->prompt_text[k] = xstrdup(buf_str(&t));
                buf_release(&t);
            }
        }
    }
    for (int k = 0; k < p->n_prompts; k++) {
        int n = (int)p->prompt_ids[k].n;
        if (n == 0) {
            snprintf(r->bad_param, sizeof(r->bad_param), "prompt");
            return err_set(msg, ERR_INVALID, "prompt: encodes to no tokens");
        }
        if ((rc = api_check_context(r, n, s->max_ctx, msg))) return rc;
    }
    for (int b = 0; b < r->n_bias; b++)
        if (r->bias[b].token >= s->n_vocab) {
            snprintf(r->bad_param, sizeof(r->bad_param), "logit_bias");
            return err_set(msg, ERR_INVALID, "logit_bias: token %d is out of range [0, %d)",
                           r->bias[b].token, s->n_vocab);
        }
    return 0;
}

/* The request's grammar, compiled here under its budgets (the engine only
 * makes a matcher at submit). A refusal names the construct and the field
 * that gave the grammar. */
static int compile_grammar(struct server *s, struct call *c, struct err_msg *msg)
{
    struct api_request *r = &c->r;
    if (r->grammar_kind == INFERD_GRAMMAR_NONE) return 0;
    struct inferd_grammar g = {.kind = r->grammar_kind,
                               .source = r->grammar_src,
                               .len = r->grammar_src ? strlen(r->grammar_src) : 0};
    char err[sizeof(msg->text) - 64];
    int rc = inferd_grammar_compile(s->model, &g, &c->prep.grammar, err, sizeof(err));
    if (!rc) return 0;
    const char *param = r->grammar_kind == INFERD_GRAMMAR_SEQUENCE ? "tool_choice"
                        : r->grammar_param[0]                      ? r->grammar_param
                                                                   : "grammar";
    snprintf(r->bad_param, sizeof(r->bad_param), "%s", param);
    return err_set(msg, rc == ERR_INVALID ? ERR_INVALID : rc, "%s: %s", param, err);
}

/* The request's traffic class -> its blocks' time to live. */
static int ttl_class(struct server *s, struct call *c, struct err_msg *msg)
{
    const struct kv_ttl_classes *t = &s->cfg->kv.ttl;
    int k = -1;
    if (c->r.cache_ttl_class[0]) {
        k = kv_ttl_classes_find(t, c->r.cache_ttl_class, strlen(c->r.cache_ttl_class));
        if (k < 0) {
            char known[256] = "";
            for (int i = 0, at = 0; i < t->n && at < 200; i++)
                at += snprintf(known + at, sizeof(known) - (size_t)at, "%s%s", i ? ", " : "",
                               t->c[i].name);
            snprintf(c->r.bad_param, sizeof(c->r.bad_param), "cache_ttl_class");
            return err_set(msg, ERR_INVALID,
                           "cache_ttl_class: unknown class '%s' (this server has %s)",
                           c->r.cache_ttl_class, known);
        }
    } else {
        k = s->cfg->kv_ttl_endpoint[c->r.kind];
        if (k < 0) k = t->dflt;
    }
    c->prep.kv_ttl_s = t->c[k].ttl_s;
    snprintf(c->prep.kv_ttl_class, sizeof(c->prep.kv_ttl_class), "%s", t->c[k].name);
    return 0;
}

void prep_generation(struct server *s, struct call *c, const char *body, size_t len,
                     enum api_kind kind)
{
    struct err_msg *msg = &c->prep.msg;
    int rc;
    c->r.kind = kind;
    /* Every string of a body ends up in the prompt or in a field with a
     * small limit of its own, so one longer than any prompt could be is
     * refused before the parse, which would cost ~10 ns a byte. */
    if (len > s->max_prompt_bytes) {
        size_t longest = api_json_longest_string(body, len);
        if (longest > s->max_prompt_bytes) {
            c->prep.rc = text_too_long(s, c, longest, msg);
            return;
        }
    }
    switch (kind) {
    case API_CHAT:
        rc = openai_chat_decode(body, len, &c->r, msg);
        break;
    case API_COMPLETION:
        rc = openai_completion_decode(body, len, &c->r, msg);
        break;
    case API_RESPONSES:
        rc = responses_decode(body, len, &c->r, msg);
        break;
    default:
        rc = anthropic_decode(body, len, &c->r, msg);
        break;
    }
    c->r.kind = kind;
    if (!rc && !model_ok(s, c->r.model)) {
        snprintf(c->r.bad_param, sizeof(c->r.bad_param), "model");
        rc = err_set(msg, ERR_NOT_FOUND, "model '%s' does not exist; this server serves '%s'",
                     c->r.model, s->model_name);
    }
    if (!rc) rc = ttl_class(s, c, msg);
    if (!rc) rc = build_messages(s, c, msg);
    if (!rc) rc = setup_tools(s, c, msg);
    if (!rc) rc = tokenize_prompts(s, c, msg);
    if (!rc) rc = compile_grammar(s, c, msg);
    if (!rc && c->r.n * c->prep.n_prompts > API_MAX_PROMPTS)
        rc = err_set(msg, ERR_INVALID, "n x prompts: at most %d sequences per request",
                     API_MAX_PROMPTS);
    c->prep.rc = rc;
}
