/*
 * routes.c - the route table and what every request passes before its
 * handler: CORS, authentication, the limits; the endpoints that are not
 * generation (health, metrics, models, stored responses, tokenizer).
 *
 *   request -> Origin allowed? (else 403) -> OPTIONS: preflight / Allow
 *           -> route by path (else 404) and method (else 405 + Allow)
 *           -> operational (health, metrics: no key, answered while stopping)
 *           -> stopping? 503 -> key? 401 -> in progress < max_open? (else 503)
 *           -> handler
 *
 * CORS. A browser sends `Origin` with every cross-site request, "simple"
 * POSTs included, which it sends without asking first. A request whose
 * Origin is not allowed is refused before anything runs, so a web page the
 * user happens to visit cannot drive a server on their machine. Allowed:
 * the server's own origins (http://127.0.0.1:PORT, http://localhost:PORT,
 * http://[::1]:PORT and the listen address), the --cors-origin list, or any
 * origin with --cors-origin '*'. The Host header is never trusted for this
 * (DNS rebinding makes it the attacker's). Clients that send no Origin -
 * curl, the SDKs, servers - are not browsers and pass.
 *
 * Endpoints whose work can be long (tokenize, count tokens: a large text;
 * stored responses: SQLite) run as side jobs on the prep / store threads
 * and answer when they come back.
 *
 * Thread: the event-loop thread.
 */
#include "serve/server_impl.h"

#include "api/resources.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "model/chat_template.h"
#include "model/tokenizer/tokenizer.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { M_GET = 1, M_POST = 2, M_DELETE = 4 };

struct route;
typedef void (*route_fn)(struct server *s, struct http_request *req, const struct route *rt,
                         const char *id);

struct route {
    const char *pattern;  /* path; "{}" stands for one non-empty segment (an id), a final
                             "{*}" for the rest of the path */
    unsigned methods;     /* M_* accepted (GET routes answer HEAD too) */
    const char *endpoint; /* label for metrics and logs */
    enum api_kind kind;   /* the API whose error schema applies */
    bool open;            /* operational: no key needed, answered while stopping */
    route_fn fn;          /* handler */
};

/* ------------------------------------------------------------ replies */

void serve_send_json(struct server *s, struct http_request *req, int status, json_t *v)
{
    (void)s;
    char *text = json_dumps(v, JSON_COMPACT);
    struct buf b = {0};
    buf_puts(&b, text);
    buf_putc(&b, '\n');
    http_respond(req, status, "application/json", b.data, b.len);
    buf_release(&b);
    free(text);
    json_decref(v);
}

void serve_log_line(const char *method, const char *request_id, uint64_t t_start_ns,
                    const char *endpoint, int status, int n_prompt, int n_gen, const char *note)
{
    log_info("%s %s %d prompt=%d gen=%d %.1fms id=%s%s", method, endpoint, status, n_prompt, n_gen,
             (double)(time_now_ns() - t_start_ns) * 1e-6, request_id, note);
}

void serve_log_request(struct http_request *req, const char *endpoint, int status, int n_prompt,
                       int n_gen, const char *note)
{
    serve_log_line(http_method(req), http_request_id(req), http_t_start_ns(req), endpoint, status,
                   n_prompt, n_gen, note);
}

/* Retry-After for 429 / 503: the engine's estimate of its queue wait,
 * rounded up to whole seconds (at least 1). */
void serve_retry_after(struct server *s, struct http_request *req)
{
    struct runner_stats rs;
    s->be->ops->stats(s->be, &rs);
    char v[24];
    snprintf(v, sizeof(v), "%d", (int)MIN(3600.0, MAX(1.0, rs.engine.est_queue_ms / 1000.0 + 1)));
    http_add_header(req, "Retry-After", v);
}

void serve_send_error(struct server *s, struct http_request *req, const char *endpoint,
                      enum api_kind kind, int code, const char *message, const char *param)
{
    int status = err_http_status(code);
    if (code == ERR_OVERLOADED || code == ERR_UNAVAILABLE || code == ERR_QUOTA)
        serve_retry_after(s, req);
    metrics_request(&s->metrics, endpoint, status);
    char note[400];
    snprintf(note, sizeof(note), " error=\"%.360s\"", message);
    serve_log_request(req, endpoint, status, 0, 0, note);
    serve_send_json(s, req, status, api_error_json(kind, code, message, param));
}

static enum api_kind kind_of_path(const char *path)
{
    return !strncmp(path, "/v1/messages", 12) ? API_MESSAGES : API_CHAT;
}

void serve_error_body(const char *path, int status, const char *message, struct buf *out, void *arg)
{
    (void)arg;
    int code = status == 413 || status == 431 ? ERR_TOO_LARGE
               : status == 503                ? ERR_UNAVAILABLE
               : status == 429                ? ERR_OVERLOADED
                                              : ERR_INVALID;
    json_t *v = api_error_json(kind_of_path(path ? path : ""), code, message, NULL);
    char *text = json_dumps(v, JSON_COMPACT);
    buf_puts(out, text);
    buf_putc(out, '\n');
    free(text);
    json_decref(v);
}

void serve_on_refusal(const char *peer, const char *request_id, int status, const char *why,
                      void *arg)
{
    struct server *s = arg;
    metrics_request(&s->metrics, "connection", status);
    log_info("refused %s %d id=%s error=\"%s\"", peer, status, request_id, why);
}

/* ---------------------------------------------------------- side jobs */

enum side_op { SIDE_TOKENIZE, SIDE_COUNT, SIDE_DETOKENIZE, SIDE_GET, SIDE_DELETE, SIDE_ITEMS };

/* A non-generation request whose work runs on a worker thread. */
struct side {
    struct jobq_job job;          /* on the prep or store queue */
    struct server *srv;           /* owner */
    struct http_request *req;     /* the request (valid until answered) */
    const struct route *rt;       /* its route */
    enum side_op op;              /* what to do */
    char id[128];                 /* stored response id (SIDE_GET, _DELETE, _ITEMS) */
    struct api_request r;         /* decoder scratch (bad_param) */
    int rc;                       /* result: 0 or an error */
    struct err_msg msg;           /* the error's message */
    json_t *out;                  /* the answer (rc == 0) */
    struct api_items_query items; /* SIDE_ITEMS: the query (parsed on the loop) */
};

#define SIDE_OF(j) ((struct side *)((char *)(j)-offsetof(struct side, job)))

static bool model_ok(struct server *s, const char *name)
{
    return !*name || !strcmp(name, s->model_name);
}

/* /tokenize, /v1/messages/count_tokens: ids or a count of a text or a
 * conversation (rendered with the chat template). */
static int side_tokenize(struct side *j, const char *body, size_t len)
{
    struct server *s = j->srv;
    struct api_request *r = &j->r;
    struct err_msg *msg = &j->msg;
    struct i32vec ids = {0};
    int rc;
    if (j->op == SIDE_COUNT) {
        if ((rc = anthropic_count_decode(body, len, r, msg))) return rc;
        if (!model_ok(s, r->model))
            return err_set(msg, ERR_NOT_FOUND, "model '%s' does not exist; this server serves '%s'",
                           r->model, s->model_name);
    } else {
        struct api_tokenize t;
        rc = api_tokenize_decode(body, len, &t, msg);
        snprintf(r->bad_param, sizeof(r->bad_param), "%s", t.bad_param);
        if (!rc && t.text)
            tokenizer_encode(s->tok, t.text, strlen(t.text),
                             (t.add_special ? TOKENIZER_ADD_SPECIAL : 0) | TOKENIZER_PARSE_SPECIAL,
                             &ids);
        if (!rc && t.messages) {
            r->messages = t.messages;
            t.messages = NULL;
        }
        api_tokenize_release(&t);
        if (rc) return rc;
    }
    if (r->messages) {
        if (!s->tmpl) return err_set(msg, ERR_INVALID, "messages: the model has no chat template");
        struct buf text = {0};
        rc = chat_template_apply(s->tmpl, r->messages, r->tools, true, NULL, &text, msg);
        if (!rc) tokenizer_encode(s->tok, buf_str(&text), text.len, TOKENIZER_PARSE_SPECIAL, &ids);
        buf_release(&text);
        if (rc) {
            i32vec_release(&ids);
            return rc;
        }
    }
    if (j->op == SIDE_COUNT) {
        j->out = json_pack("{s:i}", "input_tokens", (int)ids.n);
    } else {
        json_t *a = json_array();
        for (size_t i = 0; i < ids.n; i++)
            json_array_append_new(a, json_integer(ids.v[i]));
        j->out = json_pack("{s:o,s:i,s:i}", "tokens", a, "count", (int)ids.n, "max_model_len",
                           s->max_ctx);
    }
    i32vec_release(&ids);
    return 0;
}

static int side_detokenize(struct side *j, const char *body, size_t len)
{
    struct server *s = j->srv;
    struct api_tokenize t;
    int rc = api_detokenize_decode(body, len, s->n_vocab, &t, &j->msg);
    snprintf(j->r.bad_param, sizeof(j->r.bad_param), "%s", t.bad_param);
    if (!rc) {
        struct buf text = {0};
        rc = tokenizer_decode(s->tok, t.ids.v, t.ids.n, false, &text, &j->msg);
        if (!rc) {
            json_t *sv = json_stringn(text.data ? text.data : "", text.len);
            j->out = json_pack("{s:o}", "text", sv ? sv : json_string(""));
        }
        buf_release(&text);
    }
    api_tokenize_release(&t);
    return rc;
}

static int side_stored(struct side *j)
{
    struct server *s = j->srv;
    if (j->op == SIDE_DELETE) {
        int rc = store_delete(s->store, j->id, &j->msg);
        if (!rc)
            j->out =
                json_pack("{s:s,s:s,s:b}", "id", j->id, "object", "response.deleted", "deleted", 1);
        return rc;
    }
    char *resp = NULL, *conv = NULL;
    int rc = store_get(s->store, j->id, &resp, j->op == SIDE_ITEMS ? &conv : NULL, &j->msg);
    if (rc) return rc;
    json_t *v = json_loads(resp, 0, NULL);
    free(resp);
    if (!v) {
        free(conv);
        return err_set(&j->msg, ERR_INTERNAL, "stored response '%s' is unreadable", j->id);
    }
    if (j->op == SIDE_GET) {
        j->out = v;
        return 0;
    }
    /* input_items: from the stored conversation, by the query. */
    json_decref(v);
    rc = api_input_items(j->id, conv, &j->items, &j->out, &j->msg);
    free(conv);
    if (rc) snprintf(j->r.bad_param, sizeof(j->r.bad_param), "%s", j->items.bad_param);
    return rc;
}

static void side_run(struct jobq_job *job)
{
    struct side *j = SIDE_OF(job);
    size_t len;
    const char *body = http_body(j->req, &len);
    if (!body) body = "";
    switch (j->op) {
    case SIDE_TOKENIZE:
    case SIDE_COUNT:
        j->rc = side_tokenize(j, body, len);
        break;
    case SIDE_DETOKENIZE:
        j->rc = side_detokenize(j, body, len);
        break;
    default:
        j->rc = side_stored(j);
        break;
    }
}

static void side_done(struct jobq_job *job)
{
    struct side *j = SIDE_OF(job);
    struct server *s = j->srv;
    if (job->cancelled && !j->rc && !j->out)
        j->rc = err_set(&j->msg, ERR_UNAVAILABLE, "the server is shutting down");
    if (j->rc) {
        serve_send_error(s, j->req, j->rt->endpoint, j->rt->kind, j->rc,
                         j->msg.text[0] ? j->msg.text : err_str(j->rc), j->r.bad_param);
        json_decref(j->out);
    } else {
        metrics_request(&s->metrics, j->rt->endpoint, 200);
        serve_log_request(j->req, j->rt->endpoint, 200, 0, 0, "");
        serve_send_json(s, j->req, 200, j->out);
    }
    api_request_release(&j->r);
    free(j);
    s->n_side_jobs--;
    if (s->stopping) serve_maybe_exit(s);
}

/* Queues a side job; from the push on, the job belongs to its worker until
 * side_done. */
static void side_start(struct server *s, struct http_request *req, const struct route *rt,
                       enum side_op op, const char *id, const struct api_items_query *items)
{
    struct side *j = xcalloc(1, sizeof(*j));
    j->srv = s;
    j->req = req;
    j->rt = rt;
    j->op = op;
    j->r.kind = rt->kind;
    if (id) snprintf(j->id, sizeof(j->id), "%s", id);
    if (items) j->items = *items;
    j->job.run = side_run;
    j->job.done = side_done;
    s->n_side_jobs++;
    jobq_push(op <= SIDE_DETOKENIZE ? &s->prep : &s->storeq, &j->job); /* the job's now */
}

/* ----------------------------------------------------------- handlers */

static void on_generate(struct server *s, struct http_request *req, const struct route *rt,
                        const char *id)
{
    call_start(s, req, rt->endpoint, rt->kind);
}

static void on_tokenize(struct server *s, struct http_request *req, const struct route *rt,
                        const char *id)
{
    side_start(s, req, rt,
               !strcmp(rt->pattern, "/detokenize") ? SIDE_DETOKENIZE
               : rt->kind == API_MESSAGES          ? SIDE_COUNT
                                                   : SIDE_TOKENIZE,
               NULL, NULL);
}

static void on_stored(struct server *s, struct http_request *req, const struct route *rt,
                      const char *id)
{
    if (!s->store) {
        serve_send_error(s, req, rt->endpoint, rt->kind, ERR_NOT_FOUND,
                         "responses are not stored on this server", NULL);
        return;
    }
    enum side_op op = strstr(rt->pattern, "input_items")    ? SIDE_ITEMS
                      : !strcmp(http_method(req), "DELETE") ? SIDE_DELETE
                                                            : SIDE_GET;
    struct api_items_query q;
    memset(&q, 0, sizeof(q));
    if (op == SIDE_ITEMS) {
        struct err_msg msg = {{0}};
        const char *query = http_query(req);
        if (api_input_items_query(*query ? query : NULL, &q, &msg)) {
            serve_send_error(s, req, rt->endpoint, rt->kind, ERR_INVALID, msg.text, q.bad_param);
            return;
        }
    }
    side_start(s, req, rt, op, id, &q);
}

/* The served model in the API's terms. */
static void model_info(struct server *s, struct api_model_info *m)
{
    memset(m, 0, sizeof(*m));
    m->id = s->model_name;
    m->created = s->created;
    m->context_length = s->max_ctx;
    m->description = s->demo ? serve_demo_note : NULL;
}

/* "%2F" and the like in an id taken from the path. */
static void percent_decode(char *id)
{
    char *w = id;
    for (const char *r = id; *r; r++) {
        if (r[0] == '%' && isxdigit((unsigned char)r[1]) && isxdigit((unsigned char)r[2])) {
            char hex[3] = {r[1], r[2], 0};
            *w++ = (char)strtol(hex, NULL, 16);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
}

/* The Anthropic SDK sends anthropic-version with every request, the OpenAI
 * SDK never: the shape follows it. */
static void on_models(struct server *s, struct http_request *req, const struct route *rt,
                      const char *id)
{
    enum api_kind kind = http_header(req, "anthropic-version") ? API_MESSAGES : API_CHAT;
    struct api_model_info m;
    model_info(s, &m);
    if (id) {
        char dec[128];
        snprintf(dec, sizeof(dec), "%s", id);
        percent_decode(dec);
        struct err_msg msg = {{0}};
        int rc = api_model_find(&m, 1, dec, &msg);
        if (rc < 0) {
            serve_send_error(s, req, rt->endpoint, kind, rc, msg.text, "model");
            return;
        }
    }
    metrics_request(&s->metrics, rt->endpoint, 200);
    serve_log_request(req, rt->endpoint, 200, 0, 0, "");
    serve_send_json(s, req, 200, id ? api_model_object(kind, &m) : api_models_list(kind, &m, 1));
}

static void on_health(struct server *s, struct http_request *req, const struct route *rt,
                      const char *id)
{
    struct runner_stats rs;
    s->be->ops->stats(s->be, &rs);
    serve_send_json(s, req, s->stopping ? 503 : 200,
                    json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i}", "status",
                              s->stopping ? "stopping" : "ok", "model", s->model_name, "running",
                              rs.engine.n_running, "waiting", rs.engine.n_waiting, "kv_blocks_used",
                              rs.engine.kv_blocks_used, "kv_blocks_total",
                              rs.engine.kv_blocks_total, "connections",
                              http_server_n_conns(s->http)));
}

static void on_metrics(struct server *s, struct http_request *req, const struct route *rt,
                       const char *id)
{
    struct runner_stats rs;
    s->be->ops->stats(s->be, &rs);
    struct buf b = {0};
    metrics_render(&s->metrics, &rs, &b);
    if (s->kv_chain) {
        struct kv_chain_stats ks;
        kv_chain_snapshot(s->kv_chain, &ks);
        metrics_render_tiers(&s->metrics, &ks, &b);
    }
    if (s->remote) remote_render_metrics(s->remote, &b);
    http_respond(req, 200, "text/plain; version=0.0.4", b.data, b.len);
    buf_release(&b);
}

static const struct route routes[] = {
    {"/health", M_GET, "/health", API_CHAT, true, on_health},
    {"/metrics", M_GET, "/metrics", API_CHAT, true, on_metrics},
    {"/v1/chat/completions", M_POST, "/v1/chat/completions", API_CHAT, false, on_generate},
    {"/v1/completions", M_POST, "/v1/completions", API_COMPLETION, false, on_generate},
    {"/v1/responses", M_POST, "/v1/responses", API_RESPONSES, false, on_generate},
    {"/v1/responses/{}", M_GET | M_DELETE, "/v1/responses/{id}", API_RESPONSES, false, on_stored},
    {"/v1/responses/{}/input_items", M_GET, "/v1/responses/{id}/input_items", API_RESPONSES, false,
     on_stored},
    {"/v1/messages", M_POST, "/v1/messages", API_MESSAGES, false, on_generate},
    {"/v1/messages/count_tokens", M_POST, "/v1/messages/count_tokens", API_MESSAGES, false,
     on_tokenize},
    {"/v1/models", M_GET, "/v1/models", API_CHAT, false, on_models},
    {"/v1/models/{*}", M_GET, "/v1/models/{id}", API_CHAT, false, on_models},
    {"/tokenize", M_POST, "/tokenize", API_CHAT, false, on_tokenize},
    {"/detokenize", M_POST, "/detokenize", API_CHAT, false, on_tokenize},
};

/* Matches path against pattern; the "{}" segment goes to id. */
static bool match(const char *pattern, const char *path, char *id, size_t id_cap)
{
    *id = 0;
    while (*pattern) {
        if (!strcmp(pattern, "{*}")) { /* the rest of the path: model ids may hold '/' */
            size_t n = strlen(path);
            if (n == 0 || n >= id_cap) return false;
            memcpy(id, path, n + 1);
            return true;
        }
        if (pattern[0] == '{' && pattern[1] == '}') {
            size_t n = strcspn(path, "/");
            if (n == 0 || n >= id_cap) return false;
            memcpy(id, path, n);
            id[n] = 0;
            path += n;
            pattern += 2;
            continue;
        }
        if (*pattern++ != *path++) return false;
    }
    return *path == 0;
}

static unsigned method_bit(const char *m)
{
    if (!strcmp(m, "GET") || !strcmp(m, "HEAD")) return M_GET;
    if (!strcmp(m, "POST")) return M_POST;
    if (!strcmp(m, "DELETE")) return M_DELETE;
    return 0;
}

static void allow_list(unsigned methods, char *out, size_t n)
{
    snprintf(out, n, "%s%s%s%sOPTIONS", methods & M_GET ? "GET, HEAD, " : "",
             methods & M_POST ? "POST, " : "", methods & M_DELETE ? "DELETE, " : "", "");
}

static bool origin_allowed(struct server *s, const char *origin)
{
    if (!origin) return true;
    for (int i = 0; i < (int)ARRAY_LEN(s->own_origins); i++)
        if (s->own_origins[i][0] && !strcmp(origin, s->own_origins[i])) return true;
    const char *list = s->cfg->cors_origins;
    if (!list) return false;
    size_t olen = strlen(origin);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        const char *a = p;
        size_t an = n;
        while (an && isspace((unsigned char)*a))
            a++, an--;
        while (an && isspace((unsigned char)a[an - 1]))
            an--;
        if ((an == 1 && *a == '*') || (an == olen && !memcmp(a, origin, olen))) return true;
        p += n;
        if (*p) p++;
    }
    return false;
}

/* Request header names a preflight may ask for: token characters only. */
static bool header_list_ok(const char *v)
{
    for (; *v; v++)
        if (!isalnum((unsigned char)*v) && !strchr("-_, ", *v)) return false;
    return true;
}

static void preflight(struct server *s, struct http_request *req, unsigned methods)
{
    char allow[80];
    allow_list(methods, allow, sizeof(allow));
    if (http_header(req, "Origin") && http_header(req, "Access-Control-Request-Method")) {
        http_add_header(req, "Access-Control-Allow-Methods", allow);
        const char *h = http_header(req, "Access-Control-Request-Headers");
        http_add_header(req, "Access-Control-Allow-Headers",
                        h && header_list_ok(h)
                            ? h
                            : "authorization, content-type, x-api-key, anthropic-version, "
                              "x-request-id");
        http_add_header(req, "Access-Control-Max-Age", "600");
    }
    http_add_header(req, "Allow", allow);
    metrics_request(&s->metrics, "OPTIONS", 204);
    http_respond(req, 204, NULL, NULL, 0);
}

static bool authorized(struct server *s, struct http_request *req)
{
    if (!s->cfg->api_key) return true;
    const char *auth = http_header(req, "Authorization");
    const char *key = http_header(req, "x-api-key");
    if (key && !strcmp(key, s->cfg->api_key)) return true;
    return auth && !strncmp(auth, "Bearer ", 7) && !strcmp(auth + 7, s->cfg->api_key);
}

void serve_on_request(struct http_request *req, void *arg)
{
    struct server *s = arg;
    const char *path = http_path(req), *method = http_method(req);
    enum api_kind kind = kind_of_path(path);
    const char *origin = http_header(req, "Origin");
    if (!origin_allowed(s, origin)) {
        char text[400];
        snprintf(text, sizeof(text),
                 "origin '%.200s' is not allowed to use this server (serve --cors-origin)", origin);
        serve_send_error(s, req, "cors", kind, ERR_FORBIDDEN, text, NULL);
        return;
    }
    if (origin) {
        http_add_header(req, "Access-Control-Allow-Origin", origin);
        http_add_header(req, "Vary", "Origin");
        http_add_header(req, "Access-Control-Expose-Headers", "x-request-id, retry-after");
    }
    bool options = !strcmp(method, "OPTIONS");
    if (options && !strcmp(path, "*")) {
        preflight(s, req, M_GET | M_POST | M_DELETE);
        return;
    }
    char id[128];
    unsigned allowed = 0, want = method_bit(method);
    for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
        const struct route *rt = &routes[i];
        if (!match(rt->pattern, path, id, sizeof(id))) continue;
        if (options) {
            preflight(s, req, rt->methods);
            return;
        }
        if (!(rt->methods & want)) {
            allowed |= rt->methods;
            continue;
        }
        if (!rt->open) {
            if (s->stopping) {
                serve_send_error(s, req, rt->endpoint, rt->kind, ERR_UNAVAILABLE,
                                 "the server is shutting down", NULL);
                return;
            }
            if (!authorized(s, req)) {
                serve_send_error(s, req, rt->endpoint, rt->kind, ERR_UNAUTHORIZED,
                                 "missing or invalid API key (Authorization: Bearer KEY or "
                                 "x-api-key)",
                                 NULL);
                return;
            }
            if (want == M_POST && s->metrics.open_requests + s->n_side_jobs >= s->cfg->max_open) {
                serve_send_error(s, req, rt->endpoint, rt->kind, ERR_UNAVAILABLE,
                                 "too many requests in progress; retry shortly", NULL);
                return;
            }
        }
        rt->fn(s, req, rt, id[0] ? id : NULL);
        return;
    }
    char text[400];
    if (allowed) {
        char allow[80];
        allow_list(allowed, allow, sizeof(allow));
        http_add_header(req, "Allow", allow);
        snprintf(text, sizeof(text), "method %s is not allowed on %.200s (allowed: %s)", method,
                 path, allow);
        serve_send_error(s, req, "other", kind, ERR_METHOD, text, NULL);
        return;
    }
    snprintf(text, sizeof(text), "no route for %s %.200s", method, path);
    serve_send_error(s, req, "other", kind, ERR_NOT_FOUND, text, NULL);
}
