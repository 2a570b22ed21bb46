/*
 * pipeline.c - tokens to API output, per choice (see pipeline.h for the
 * stages).
 *
 * Logprob entries of a stream travel with the text they belong to: a token
 * whose text is held back (a possible stop string, a possible tool-call
 * marker) keeps its entry in lp_pending until that text is sent, so a
 * client reading deltas sees each entry with its own text or later, never
 * before it.
 */
#include "api/pipeline.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void api_pipe_init(struct api_pipe *p, const struct api_request *r, const struct api_pipe_model *m,
                   int n_prompts, bool parse_tools, int64_t created)
{
    memset(p, 0, sizeof(*p));
    p->m = *m;
    p->parse_tools = parse_tools;
    p->out.req = r;
    p->out.model = m->name;
    p->out.created = created;
    p->out.lazy_blocks = parse_tools;
    int n = n_prompts * r->n;
    p->out.n_choices = n;
    p->out.choices = xcalloc((size_t)n, sizeof(*p->out.choices));
    p->ch = xcalloc((size_t)n, sizeof(*p->ch));
    if (parse_tools) {
        p->tool_names = xcalloc(json_array_size(r->tools) + 1, sizeof(char *));
        size_t k;
        const json_t *t;
        json_array_foreach(r->tools, k, t)
        {
            const char *name =
                json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            p->tool_names[p->n_tool_names++] = xstrdup(name ? name : "");
        }
    }
    for (int i = 0; i < n; i++) {
        struct api_pipe_choice *c = &p->ch[i];
        /* With the parser on, the detokenizer keeps special tokens so that
         * the family's markers reach the parser; api_pipe_token drops the
         * other special tokens itself. */
        tokenizer_stream_init(&c->ts, !parse_tools);
        stopstr_init(&c->ss, r->stop, r->n_stop);
        if (parse_tools) {
            uint64_t id_seed = 0;
            if (getrandom(&id_seed, sizeof(id_seed), 0) != (ssize_t)sizeof(id_seed))
                id_seed = (uint64_t)created * 1000003u + (uint64_t)i;
            toolcall_init(&c->tc, m->family, p->tool_names, p->n_tool_names,
                          r->kind == API_MESSAGES ? "toolu_" : "call_", id_seed);
        }
    }
}

void api_pipe_release(struct api_pipe *p)
{
    for (int i = 0; i < p->out.n_choices; i++) {
        struct api_choice *ch = &p->out.choices[i];
        tokenizer_stream_release(&p->ch[i].ts);
        stopstr_release(&p->ch[i].ss);
        if (p->parse_tools) toolcall_release(&p->ch[i].tc);
        json_decref(p->ch[i].lp_pending);
        for (int k = 0; k < ch->n_calls; k++) {
            free(ch->calls[k].name);
            buf_release(&ch->calls[k].args);
        }
        free(ch->calls);
        buf_release(&ch->text);
        json_decref(ch->logprobs);
    }
    for (int k = 0; k < p->n_tool_names; k++)
        free(p->tool_names[k]);
    free(p->tool_names);
    free(p->ch);
    free(p->out.choices);
    buf_release(&p->wire);
    memset(p, 0, sizeof(*p));
}

void api_pipe_stream_begin(struct api_pipe *p)
{
    if (p->started) return;
    p->started = true;
    api_stream_start(&p->out, &p->wire);
}

/* Content text (after the stop-string check and the tool-call parser). */
static void emit_content(struct api_pipe *p, int i, const char *text, size_t len)
{
    struct api_pipe_choice *c = &p->ch[i];
    if (!len) return;
    buf_append(&p->out.choices[i].text, text, len);
    if (p->out.req->stream) {
        api_pipe_stream_begin(p);
        api_stream_delta(&p->out, i, text, len, c->lp_pending, &p->wire);
        json_decref(c->lp_pending);
        c->lp_pending = NULL;
    }
}

/* The parser's events for choice i: content, and calls into the choice. */
static void end_choice(struct api_pipe *p, int i, enum api_finish why);

static void tool_events(struct api_pipe *p, int i, int n)
{
    struct api_pipe_choice *c = &p->ch[i];
    struct api_choice *ch = &p->out.choices[i];
    bool stream = p->out.req->stream;
    for (int k = 0; k < n; k++) {
        const struct toolcall_ev *e = &c->tc.ev[k];
        if (e->kind == TOOLCALL_EV_CONTENT) {
            emit_content(p, i, e->text, e->len);
            continue;
        }
        if (stream) api_pipe_stream_begin(p);
        if (e->kind == TOOLCALL_EV_START) {
            CHECK(e->index == ch->n_calls);
            ch->calls = xrealloc(ch->calls, sizeof(*ch->calls) * (size_t)(ch->n_calls + 1));
            struct api_toolcall *t = &ch->calls[ch->n_calls++];
            memset(t, 0, sizeof(*t));
            snprintf(t->id, sizeof(t->id), "%s", e->id);
            t->name = xstrdup(e->text);
            if (stream) api_stream_tool_start(&p->out, i, e->index, &p->wire);
        } else if (e->kind == TOOLCALL_EV_ARGS) {
            buf_append(&ch->calls[e->index].args, e->text, e->len);
            if (stream) api_stream_tool_args(&p->out, i, e->index, e->text, e->len, &p->wire);
        } else {
            if (stream) api_stream_tool_end(&p->out, i, e->index, &p->wire);
            /* parallel_tool_calls: false (Anthropic disable_parallel_tool_use):
             * the first call is the whole answer. */
            if (p->out.req->one_call) {
                end_choice(p, i, API_FINISH_EOG);
                return;
            }
        }
    }
}

/* Text that passed the stop-string check: through the tool-call parser when
 * the request has one. */
static void emit_text(struct api_pipe *p, int i, const char *text, size_t len)
{
    if (!p->parse_tools) {
        emit_content(p, i, text, len);
        return;
    }
    if (len && !p->ch[i].done) tool_events(p, i, toolcall_feed(&p->ch[i].tc, text, len));
}

static void end_choice(struct api_pipe *p, int i, enum api_finish why)
{
    struct api_pipe_choice *c = &p->ch[i];
    if (c->done) return;
    c->done = true;
    p->out.choices[i].finish = why;
    if (!p->out.req->stream) return;
    api_pipe_stream_begin(p);
    if (c->lp_pending) { /* entries of held-back text that never came */
        api_stream_delta(&p->out, i, "", 0, c->lp_pending, &p->wire);
        json_decref(c->lp_pending);
        c->lp_pending = NULL;
    }
    api_stream_choice_end(&p->out, i, &p->wire);
}

void api_pipe_echo(struct api_pipe *p, int i, const char *text, size_t len)
{
    buf_append(&p->out.choices[i].text, text, len);
    if (p->out.req->stream) {
        api_pipe_stream_begin(p);
        api_stream_delta(&p->out, i, text, len, NULL, &p->wire);
    }
}

static void token_text(const struct tokenizer *tok, int32_t id, char *out, size_t n)
{
    struct buf b = {0};
    if (tokenizer_decode(tok, &id, 1, false, &b, NULL) == 0)
        snprintf(out, n, "%s", buf_str(&b));
    else
        snprintf(out, n, "<%d>", id);
    buf_release(&b);
}

static void add_logprobs(struct api_pipe *p, int i, int32_t token, float logprob,
                         const struct api_pipe_top *top, int n_top)
{
    const struct api_request *r = p->out.req;
    char text[256], top_text[API_MAX_TOP_LOGPROBS][256];
    struct api_top tops[API_MAX_TOP_LOGPROBS];
    token_text(p->m.tok, token, text, sizeof(text));
    n_top = MIN(n_top, MIN(r->top_logprobs, API_MAX_TOP_LOGPROBS));
    for (int k = 0; k < n_top; k++) {
        token_text(p->m.tok, top[k].token, top_text[k], sizeof(top_text[k]));
        tops[k].text = top_text[k];
        tops[k].logprob = top[k].logprob;
    }
    size_t off = p->out.choices[i].text.len;
    json_t **target = r->stream ? &p->ch[i].lp_pending : &p->out.choices[i].logprobs;
    api_logprob_append(r->kind, target, text, logprob, tops, n_top, off);
}

/* Detokenized text of choice i: the stop-string check, then on. */
static void feed(struct api_pipe *p, int i, const char *text, size_t len)
{
    struct api_pipe_choice *c = &p->ch[i];
    struct buf safe = {0};
    int hit = stopstr_feed(&c->ss, text, len, &safe);
    emit_text(p, i, safe.data ? safe.data : "", safe.len);
    buf_release(&safe);
    if (hit >= 0 && !c->done) {
        if (p->parse_tools) tool_events(p, i, toolcall_finish(&c->tc));
        p->out.choices[i].stop_index = hit;
        end_choice(p, i, API_FINISH_STOP_SEQ);
    }
}

bool api_pipe_token(struct api_pipe *p, int i, int32_t token, float logprob,
                    const struct api_pipe_top *tops, int n_top, int n_generated, bool ends_turn)
{
    struct api_pipe_choice *c = &p->ch[i];
    if (c->done) return false;
    const struct tokenizer *tok = p->m.tok;
    bool logprobs = p->out.req->logprobs;
    p->out.choices[i].n_tokens = n_generated;
    bool silent = ends_turn && tokenizer_is_eog(tok, token);
    if (p->parse_tools && !silent && tokenizer_is_special(tok, token)) {
        bool marker = false;
        for (int k = 0; k < p->m.n_markers; k++)
            marker |= p->m.markers[k] == token;
        if (!marker) {
            if (logprobs) add_logprobs(p, i, token, logprob, tops, n_top);
            return false; /* nothing to decode */
        }
    }
    if (silent) return false;
    if (logprobs) add_logprobs(p, i, token, logprob, tops, n_top);
    struct buf piece = {0};
    if (tokenizer_stream_push(tok, &c->ts, token, &piece, NULL) == 0)
        feed(p, i, piece.data ? piece.data : "", piece.len);
    buf_release(&piece);
    return c->done;
}

void api_pipe_finish(struct api_pipe *p, int i, enum api_finish why)
{
    struct api_pipe_choice *c = &p->ch[i];
    if (c->done) return;
    struct buf tail = {0};
    tokenizer_stream_flush(p->m.tok, &c->ts, &tail);
    feed(p, i, tail.data ? tail.data : "", tail.len);
    buf_release(&tail);
    if (c->done) return; /* the tail completed a stop string, or the one call */
    struct buf rest = {0};
    stopstr_flush(&c->ss, &rest);
    emit_text(p, i, rest.data ? rest.data : "", rest.len);
    buf_release(&rest);
    if (p->parse_tools) tool_events(p, i, toolcall_finish(&c->tc));
    end_choice(p, i, why);
}

bool api_pipe_all_done(const struct api_pipe *p)
{
    for (int i = 0; i < p->out.n_choices; i++)
        if (!p->ch[i].done) return false;
    return true;
}

void api_pipe_stream_end(struct api_pipe *p)
{
    api_pipe_stream_begin(p);
    api_stream_end(&p->out, &p->wire);
}

void api_pipe_stream_error(struct api_pipe *p, int code, const char *message)
{
    api_pipe_stream_begin(p);
    api_stream_error(&p->out, code, message, &p->wire);
}
