/*
 * call.c - the life of one generation request (server_impl.h has the
 * picture), on the event-loop thread.
 *
 * Every call ends its HTTP exchange exactly once (http_respond or
 * http_stream_end; for a client that is gone these write nothing), which
 * frees the request: what the log line needs of it is copied at the start.
 * The call is freed only when nothing else holds it: no prep or store job
 * out, and the runner has sent the final message of each of its tags.
 *
 * No acknowledged data is lost: a Responses answer with store on is
 * written to the store (synchronously durable, on the store thread) before
 * the client sees it complete - the whole JSON, or the stream's
 * response.completed event. If the write fails, the client gets an error
 * instead of a response it would believe stored.
 *
 * Backpressure: a stream's output goes to the connection layer as it is
 * made; when the client's socket is full (http_blocked), the call's engine
 * requests are paused (inferd_pause: they keep their KV and compute
 * nothing) until the layer reports the queue drained. A client that stays
 * full past the write timeout is gone, and its requests are cancelled.
 */
#include "serve/server_impl.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "model/tokenizer/tokenizer.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/random.h>
#include <time.h>

#define CALL_OF(j) ((struct call *)((char *)(j)-offsetof(struct call, job)))

static void new_id(const char *prefix, char *out, size_t n)
{
    uint64_t r[2] = {0, 0};
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) r[0] = time_now_ns();
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)r[0],
             (unsigned long long)(r[1] & 0xffffffffu));
}

static bool engine_idle(const struct call *c)
{
    if (!c->gens) return true;
    for (int i = 0; i < c->pipe.out.n_choices; i++)
        if (c->gens[i].engine_open) return false;
    return true;
}

static void prep_release(struct call_prep *p)
{
    for (int i = 0; i < p->n_prompts; i++) {
        if (p->prompt_ids) i32vec_release(&p->prompt_ids[i]);
        if (p->prompt_text) free(p->prompt_text[i]);
    }
    free(p->prompt_ids);
    free(p->prompt_text);
    json_decref(p->history);
    inferd_compiled_grammar_free(p->grammar);
    memset(p, 0, sizeof(*p));
}

static void call_free(struct call *c)
{
    struct server *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->gens)
        for (int i = 0; i < c->pipe.out.n_choices; i++)
            u64map_del(&s->tags, c->gens[i].tag);
    if (c->pipe_on) api_pipe_release(&c->pipe);
    prep_release(&c->prep);
    api_request_release(&c->r);
    free(c->gens);
    free(c->store_resp);
    free(c->store_conv);
    free(c);
    s->metrics.open_requests--;
    if (s->stopping) serve_maybe_exit(s);
}

void call_free_now(struct call *c)
{
    call_free(c);
}

/* Frees the call if nothing holds it any more. */
static void maybe_free(struct call *c)
{
    if (c->replied && !c->job_out && engine_idle(c)) call_free(c);
}

/* Sends what the pipeline made (streams), and pauses the engine requests
 * while the socket is full. */
static void flush(struct call *c)
{
    struct buf *w = &c->pipe.wire;
    if (!w->len) return;
    if (c->gone) {
        buf_clear(w);
        return;
    }
    if (!c->http_started) {
        c->http_started = true;
        http_add_header(c->req, "Cache-Control", "no-cache");
        http_stream_start(c->req, 200, "text/event-stream");
    }
    http_stream_write(c->req, w->data, w->len);
    buf_clear(w);
    if (!c->paused && !c->replied && http_blocked(c->req)) {
        c->paused = true;
        for (int i = 0; i < c->pipe.out.n_choices; i++)
            if (c->gens[i].engine_open) c->srv->be->ops->pause(c->srv->be, c->gens[i].tag, true);
    }
}

static void on_drain(struct http_request *req, void *arg)
{
    struct call *c = arg;
    if (!c->paused) return;
    c->paused = false;
    for (int i = 0; i < c->pipe.out.n_choices; i++)
        if (c->gens[i].engine_open) c->srv->be->ops->pause(c->srv->be, c->gens[i].tag, false);
}

static void cancel_all(struct call *c)
{
    if (!c->gens) return;
    for (int i = 0; i < c->pipe.out.n_choices; i++)
        if (c->gens[i].engine_open) c->srv->be->ops->cancel(c->srv->be, c->gens[i].tag);
}

/* Counts and logs a call whose answer is complete (or whose client left). */
static void account(struct call *c, int err_code, const char *err_text)
{
    struct server *s = c->srv;
    const struct api_out *o = &c->pipe.out;
    int n_gen = c->pipe_on ? api_out_completion_tokens(o) : 0;
    int status = c->gone ? 499 : c->status;
    uint64_t now = time_now_ns();
    if (!err_code && !c->gone && c->pipe_on) {
        metrics_observe(&s->metrics.e2e, (double)(now - c->t_start_ns) * 1e-9);
        for (int i = 0; i < o->n_choices; i++) {
            const struct gen *g = &c->gens[i];
            int n = o->choices[i].n_tokens;
            if (n > 1 && g->t_last_ns > g->t_first_ns)
                metrics_observe(&s->metrics.tpot,
                                (double)(g->t_last_ns - g->t_first_ns) * 1e-9 / (n - 1));
        }
    }
    if (c->pipe_on) {
        s->metrics.prompt_tokens += (uint64_t)o->n_prompt_tokens;
        s->metrics.cached_tokens += (uint64_t)o->n_cached_tokens;
    }
    /* which tier served how many of the prompt's blocks */
    char tiers[200] = "";
    if (s->kv_chain) {
        struct kv_chain_stats ks;
        kv_chain_snapshot(s->kv_chain, &ks);
        size_t at = 0;
        for (int t = 0; t < ks.n_tiers && at < sizeof(tiers) - 40; t++) {
            if (!c->kv_tier_blocks[t]) continue;
            s->metrics.tier_blocks[t] += (uint64_t)c->kv_tier_blocks[t];
            at += (size_t)snprintf(tiers + at, sizeof(tiers) - at, "%s%s:%d", at ? "," : "",
                                   ks.tiers[t].name, c->kv_tier_blocks[t]);
        }
    }
    s->metrics.generated_tokens += (uint64_t)n_gen;
    metrics_request(&s->metrics, c->endpoint, status);
    /* every failed answer says why, also a stream that ended in an error event */
    char note[640] = "";
    if (c->gone)
        snprintf(note, sizeof(note), " error=\"the client went away\"");
    else if (err_code)
        snprintf(note, sizeof(note), " error=\"%.360s\"", err_text ? err_text : err_str(err_code));
    if (tiers[0]) {
        size_t l = strlen(note);
        snprintf(note + l, sizeof(note) - l, " kv_tier_blocks=%s", tiers);
    }
    serve_log_line(c->method, c->request_id, c->t_start_ns, c->endpoint, status,
                   c->pipe_on ? o->n_prompt_tokens : 0, n_gen, note);
}

/* Ends the HTTP exchange of a call whose client is gone. */
static void drop(struct call *c)
{
    if (c->replied) return;
    c->replied = true;
    if (c->http_started)
        http_stream_end(c->req);
    else
        http_respond(c->req, 499, "application/json", "", 0);
    account(c, ERR_CANCELLED, NULL);
}

static void on_gone(struct http_request *req, void *arg)
{
    struct call *c = arg;
    if (c->gone || c->replied) {
        c->gone = true;
        return;
    }
    c->gone = true;
    c->srv->metrics.cancelled++;
    cancel_all(c);
    /* A prep or store job still out ends the exchange when it returns; the
     * engine requests end theirs with their final messages. */
    if (!c->job_out && engine_idle(c)) {
        drop(c);
        maybe_free(c);
    }
}

/* The final bytes of a successful answer (after the store, if any). */
static void send_answer(struct call *c)
{
    if (c->r.stream) {
        api_pipe_stream_end(&c->pipe);
        flush(c);
        http_stream_end(c->req); /* writes nothing for a client that is gone */
    } else if (!c->gone) {
        char *body = c->store_resp ? c->store_resp : NULL;
        json_t *v = body ? NULL : api_response(&c->pipe.out);
        char *s = body ? body : json_dumps(v, JSON_COMPACT);
        size_t n = strlen(s);
        struct buf b = {0};
        buf_append(&b, s, n);
        buf_putc(&b, '\n');
        http_respond(c->req, 200, "application/json", b.data, b.len);
        buf_release(&b);
        if (!body) free(s);
        json_decref(v);
    } else {
        http_respond(c->req, 499, "application/json", "", 0);
    }
    c->status = 200;
}

static void store_run(struct jobq_job *j)
{
    struct call *c = CALL_OF(j);
    c->store_rc =
        store_put(c->srv->store, c->pipe.out.id, c->store_resp, c->store_conv, &c->store_msg);
}

static void store_done(struct jobq_job *j)
{
    struct call *c = CALL_OF(j);
    c->job_out = false;
    if (j->cancelled && !c->store_rc)
        c->store_rc = err_set(&c->store_msg, ERR_UNAVAILABLE,
                              "the server is shutting down: the response was not stored");
    if (c->store_rc) {
        log_error("%s", c->store_msg.text);
        char text[600];
        snprintf(text, sizeof(text), "the response could not be stored: %s", c->store_msg.text);
        if (c->r.stream) {
            api_pipe_stream_error(&c->pipe, c->store_rc, text);
            flush(c);
            http_stream_end(c->req);
            c->status = 200;
        } else if (!c->gone) {
            c->status = err_http_status(c->store_rc);
            json_t *e = api_error_json(c->r.kind, c->store_rc, text, "store");
            serve_send_json(c->srv, c->req, c->status, e);
        } else {
            http_respond(c->req, 499, "application/json", "", 0);
        }
    } else {
        send_answer(c);
    }
    account(c, c->store_rc, c->store_rc ? c->store_msg.text : NULL);
    maybe_free(c);
}

/* Ends the HTTP exchange of a call whose choices all ended (or failed). */
static void finish(struct call *c, int err_code, const char *err_text)
{
    struct server *s = c->srv;
    if (c->replied) return;
    if (c->gone) {
        drop(c);
        return;
    }
    c->replied = true;
    if (err_code) cancel_all(c); /* the other choices of a failed call are of no use */
    if (err_code && !c->http_started) {
        c->status = err_http_status(err_code);
        if (err_code == ERR_OVERLOADED && c->retry_after_s > 0) {
            char v[16];
            snprintf(v, sizeof(v), "%d", c->retry_after_s);
            http_add_header(c->req, "Retry-After", v);
        } else if (err_code == ERR_OVERLOADED) {
            serve_retry_after(s, c->req);
        }
        serve_send_json(s, c->req, c->status, api_error_json(c->r.kind, err_code, err_text, NULL));
    } else if (err_code) {
        api_pipe_stream_error(&c->pipe, err_code, err_text);
        flush(c);
        http_stream_end(c->req);
        c->status = 200;
    } else if (c->r.kind == API_RESPONSES && c->r.store && s->store) {
        json_t *resp = api_response(&c->pipe.out);
        json_t *conv = api_responses_conversation(&c->pipe.out, c->prep.history);
        c->store_resp = json_dumps(resp, JSON_COMPACT);
        c->store_conv = json_dumps(conv, JSON_COMPACT);
        json_decref(resp);
        json_decref(conv);
        c->job.run = store_run;
        c->job.done = store_done;
        c->job_out = true;
        jobq_push(&s->storeq, &c->job);
        return; /* store_done answers */
    } else {
        send_answer(c);
    }
    account(c, err_code, err_text);
}

static void on_message(struct server *s, struct call *c, int i, const struct runner_msg *m)
{
    struct gen *g = &c->gens[i];
    const struct inferd_event *ev = &m->ev;
    bool final = m->rc != 0 || ev->finish != INFERD_FINISH_NONE;
    if (final) {
        g->engine_open = false;
        u64map_del(&s->tags, g->tag);
    }
    if (c->replied) return; /* answered already (an error, or shutdown): bookkeeping only */
    if (m->rc) {
        c->retry_after_s = m->retry_after_s;
        finish(c, m->rc, m->err);
        return;
    }
    if (!c->gone && ev->token >= 0) {
        uint64_t now = time_now_ns();
        if (!g->t_first_ns) {
            g->t_first_ns = now;
            if (i == 0) metrics_observe(&s->metrics.ttft, (double)(now - c->t_start_ns) * 1e-9);
        }
        g->t_last_ns = now;
        struct api_pipe_top tops[API_MAX_TOP_LOGPROBS];
        int n_top = MIN(ev->n_top, API_MAX_TOP_LOGPROBS);
        for (int k = 0; k < n_top; k++) {
            tops[k].token = ev->top[k].token;
            tops[k].logprob = ev->top[k].logprob;
        }
        if (api_pipe_token(&c->pipe, i, ev->token, ev->logprob, tops, n_top, ev->n_generated,
                           ev->finish == INFERD_FINISH_STOP) &&
            g->engine_open)
            s->be->ops->cancel(s->be, g->tag); /* a stop string ended the choice */
    }
    if (final && g->prompt * c->r.n == i) {
        c->pipe.out.n_cached_tokens += ev->n_cached;
        for (int t = 0; t < KV_CHAIN_MAX_TIERS; t++)
            c->kv_tier_blocks[t] += m->kv_tier_blocks[t];
    }
    if (final) metrics_observe(&s->metrics.queue, ev->queue_s);
    if (final && !c->gone) {
        switch (ev->finish) {
        case INFERD_FINISH_STOP:
            api_pipe_finish(&c->pipe, i, API_FINISH_EOG);
            break;
        case INFERD_FINISH_LENGTH:
            api_pipe_finish(&c->pipe, i, API_FINISH_LENGTH);
            break;
        default:
            if (c->pipe.ch[i].done) break; /* cancelled after a stop string */
            api_pipe_finish(&c->pipe, i, API_FINISH_ERROR);
            finish(c, ev->error ? ev->error : ERR_UNAVAILABLE,
                   ev->finish == INFERD_FINISH_CANCELLED
                       ? "the request was cancelled: the server is shutting down"
                   : ev->message[0] ? ev->message
                                    : "the engine failed this request");
            break;
        }
    }
}

void call_on_wake(struct server *s)
{
    size_t n = s->be->ops->drain(s->be, &s->msgs, &s->cap_msgs);
    for (size_t k = 0; k < n; k++) {
        struct gen *g = u64map_get(&s->tags, s->msgs[k].tag);
        if (!g) continue;
        struct call *c = g->call;
        on_message(s, c, (int)(g - c->gens), &s->msgs[k]);
        if (!c->replied) flush(c);
        if (c->gone) {
            /* Every cancellation has to land before the call can go. */
            if (engine_idle(c)) drop(c);
        } else if (!c->replied && api_pipe_all_done(&c->pipe)) {
            finish(c, 0, NULL);
        }
        maybe_free(c);
    }
}

/* The prep job is back: an error answer, or the engine requests. */
static void start_generation(struct server *s, struct call *c)
{
    struct api_request *r = &c->r;
    struct call_prep *p = &c->prep;
    api_pipe_init(&c->pipe, r, &s->pm, p->n_prompts, p->parse_tools, (int64_t)time(NULL));
    c->pipe_on = true;
    struct api_out *o = &c->pipe.out;
    new_id(r->kind == API_CHAT         ? "chatcmpl-"
           : r->kind == API_COMPLETION ? "cmpl-"
           : r->kind == API_RESPONSES  ? "resp_"
                                       : "msg_",
           o->id, sizeof(o->id));
    int n_choices = o->n_choices;
    c->gens = xcalloc((size_t)n_choices, sizeof(*c->gens));
    uint64_t seed = r->sp.seed;
    if (!r->has_seed && getrandom(&seed, sizeof(seed), 0) != (ssize_t)sizeof(seed))
        seed = time_now_ns();
    for (int k = 0; k < p->n_prompts; k++)
        o->n_prompt_tokens += (int)p->prompt_ids[k].n;
    for (int i = 0; i < n_choices; i++) {
        struct gen *g = &c->gens[i];
        g->call = c;
        g->prompt = i / r->n;
        g->tag = ++s->next_tag;
        g->engine_open = true;
        u64map_put(&s->tags, g->tag, g);
        if (p->prompt_text) {
            const char *t = p->prompt_text[g->prompt];
            api_pipe_echo(&c->pipe, i, t, strlen(t));
        }
        const struct i32vec *ids = &p->prompt_ids[g->prompt];
        struct inferd_request q = {0};
        q.prompt = ids->v;
        q.n_prompt = (int)ids->n;
        q.max_tokens = r->max_tokens ? r->max_tokens : s->max_ctx - (int)ids->n;
        q.priority = r->priority;
        q.ignore_eos = r->ignore_eos;
        q.sampling = r->sp;
        q.sampling.seed = seed + (uint64_t)(i % r->n);
        q.sampling.logprobs = r->logprobs;
        q.sampling.n_logprobs = r->logprobs ? r->top_logprobs : 0;
        q.grammar.kind = r->grammar_kind;
        q.grammar.source = r->grammar_src;
        q.grammar.len = r->grammar_src ? strlen(r->grammar_src) : 0;
        q.grammar.compiled = p->grammar; /* the engine takes its own reference */
        char tp[64];
        snprintf(tp, sizeof(tp), "00-%s-%016llx-01", c->trace_id, (unsigned long long)g->tag);
        const struct node_targets tg = {.ttft_ms = s->cfg->slo_ttft_ms[r->kind],
                                        .tpot_ms = s->cfg->slo_tpot_ms[r->kind]};
        s->be->ops->submit(s->be, g->tag, &q, p->kv_ttl_s, p->kv_ttl_class, tp, &tg);
    }
    flush(c);
}

static void prep_run(struct jobq_job *j)
{
    struct call *c = CALL_OF(j);
    size_t len;
    const char *body = http_body(c->req, &len);
    prep_generation(c->srv, c, body ? body : "", len, c->r.kind);
}

static void prep_done(struct jobq_job *j)
{
    struct call *c = CALL_OF(j);
    struct server *s = c->srv;
    c->job_out = false;
    if (c->gone) {
        drop(c);
        maybe_free(c);
        return;
    }
    if (j->cancelled || s->stopping) {
        finish(c, ERR_UNAVAILABLE, "the server is shutting down");
    } else if (c->prep.rc) {
        c->replied = true;
        const char *text = c->prep.msg.text[0] ? c->prep.msg.text : err_str(c->prep.rc);
        c->status = err_http_status(c->prep.rc);
        serve_send_error(s, c->req, c->endpoint, c->r.kind, c->prep.rc, text, c->r.bad_param);
    } else {
        start_generation(s, c);
    }
    maybe_free(c);
}

static bool lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* The W3C trace id of a request: from a well-formed traceparent header
 * ("00-<32 hex>-<16 hex>-<2 hex>", not all zeros), else the request id when
 * it is 32 hex digits (ours are), else a hash of it. */
static void trace_id_of(const struct http_request *req, const char *request_id, char out[33])
{
    const char *tp = http_header(req, "traceparent");
    if (tp && strlen(tp) == 55 && !strncmp(tp, "00-", 3) && tp[35] == '-' && tp[52] == '-' &&
        lower_hex(tp + 3, 32) && lower_hex(tp + 36, 16) &&
        strncmp(tp + 3, "00000000000000000000000000000000", 32)) {
        snprintf(out, 33, "%.32s", tp + 3);
        return;
    }
    size_t n = strlen(request_id);
    if (n == 32 && lower_hex(request_id, 32)) {
        snprintf(out, 33, "%s", request_id);
        return;
    }
    XXH128_hash_t h = XXH3_128bits(request_id, n);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

void call_start(struct server *s, struct http_request *req, const char *endpoint,
                enum api_kind kind)
{
    struct call *c = xcalloc(1, sizeof(*c));
    c->srv = s;
    c->req = req;
    c->endpoint = endpoint;
    snprintf(c->method, sizeof(c->method), "%s", http_method(req));
    snprintf(c->request_id, sizeof(c->request_id), "%s", http_request_id(req));
    trace_id_of(req, c->request_id, c->trace_id);
    c->t_start_ns = http_t_start_ns(req);
    c->r.kind = kind;
    c->next = s->calls;
    if (s->calls) s->calls->prev = c;
    s->calls = c;
    s->metrics.open_requests++;
    http_set_hooks(req, on_gone, on_drain, c);
    c->job.run = prep_run;
    c->job.done = prep_done;
    c->job_out = true;
    jobq_push(&s->prep, &c->job);
}

void call_fail_all(struct server *s, int code, const char *message)
{
    for (struct call *c = s->calls, *next; c; c = next) {
        next = c->next;
        if (c->job_out) continue; /* its job's done() answers */
        cancel_all(c);
        finish(c, code, message);
        maybe_free(c);
    }
}
