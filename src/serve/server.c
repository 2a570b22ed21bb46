/*
 * server.c - `inferd serve` set up and torn down: the model, the engine and
 * its runner thread, the store, the prep and store threads, the connection
 * layer; signals and a graceful shutdown.
 *
 * The other files of the server, in reading order: server_impl.h (the
 * structures and the path of one request), routes.c (what every request
 * passes, the route table), prep.c (preparation on the prep threads),
 * call.c (one generation request from submit to the last byte). The output
 * pipeline they feed is src/api/pipeline.h; the wire is src/net/http.h.
 *
 * Shutdown: the first SIGINT / SIGTERM stops accepting (the connection layer
 * drains: idle connections close, busy ones after their answer), refuses new
 * work with 503, and lets the calls in flight finish for shutdown_timeout_s;
 * then (or at a second signal) they fail with 503 / an error event. The loop
 * ends when no call, job or connection is left, checked on a short timer.
 */
#include "serve/server_impl.h"

#include "base/check.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "gguf/gguf.h"
#include "inferd/inferd.h"
#include "model/chat_template.h"
#include "model/maker.h"
#include "model/tokenizer/tokenizer.h"

#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

const char serve_demo_note[] =
    "random weights: this demo model produces meaningless text; serve a real model with "
    "`inferd serve -m FILE.gguf`";

/* ------------------------------------------------------------- shutdown */

void serve_maybe_exit(struct server *s)
{
    if (s->calls || s->n_side_jobs || http_server_n_requests(s->http)) return;
    event_base_loopexit(s->base, NULL);
}

static void on_exit_poll(evutil_socket_t fd, short what, void *arg)
{
    serve_maybe_exit(arg);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    log_warn("shutdown: %s", "grace period over, failing the requests still in flight");
    call_fail_all(s, ERR_UNAVAILABLE, "the server is shutting down");
    /* The error answers and events still have to reach their sockets: the
     * poll ends the loop once every call is gone; a second at most. */
    struct timeval tv = {1, 0};
    event_base_loopexit(s->base, &tv);
    serve_maybe_exit(s);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct server *s = arg;
    if (s->stopping) {
        log_warn("second signal: %s", "stopping now");
        on_deadline(-1, 0, s);
        return;
    }
    log_info("%s: finishing in-flight requests, then stopping", strsignal((int)sig));
    s->stopping = true;
    http_server_drain(s->http);
    struct timeval tv = {s->cfg->shutdown_timeout_s, 0};
    s->deadline = evtimer_new(s->base, on_deadline, s);
    evtimer_add(s->deadline, &tv);
    struct timeval poll = {0, 50 * 1000};
    s->exit_ev = event_new(s->base, -1, EV_PERSIST, on_exit_poll, s);
    event_add(s->exit_ev, &poll);
    serve_maybe_exit(s);
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    call_on_wake(arg);
}

static void on_jobs(evutil_socket_t fd, short what, void *arg)
{
    jobq_complete(arg);
}

/* Purges expired stored responses: on the store thread, once at start and
 * then every ten minutes. */
struct purge_job {
    struct jobq_job job; /* on the store queue */
    struct server *srv;  /* owner */
    int n;               /* rows removed */
    int rc;              /* result */
    struct err_msg msg;  /* its message */
};

static void purge_run(struct jobq_job *j)
{
    struct purge_job *p = (struct purge_job *)j;
    p->rc = store_purge(p->srv->store, &p->n, &p->msg);
}

static void purge_done(struct jobq_job *j)
{
    struct purge_job *p = (struct purge_job *)j;
    struct server *s = p->srv;
    if (p->rc)
        log_error("%s", p->msg.text);
    else if (p->n)
        log_info("store: %d expired responses removed", p->n);
    free(p);
    s->n_side_jobs--;
    if (s->stopping) serve_maybe_exit(s);
}

static void on_purge(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    if (s->stopping || !s->store) return;
    struct purge_job *p = xcalloc(1, sizeof(*p));
    p->srv = s;
    p->job.run = purge_run;
    p->job.done = purge_done;
    s->n_side_jobs++;
    jobq_push(&s->storeq, &p->job);
}

/* --------------------------------------------------------------- set-up */

void serve_config_default(struct serve_config *c)
{
    memset(c, 0, sizeof(*c));
    c->host = "127.0.0.1";
    c->port = 8080;
    c->data_dir = "./inferd-data";
    c->max_seqs = 64;
    c->local_prefill = 256;
    c->kv_type = INFERD_KV_F16;
    c->max_queue = 256;
    c->max_open = 1024;
    c->max_conns = 4096;
    c->max_conns_per_client = 512;
    c->max_body = 8u << 20;
    c->max_headers = 64u << 10;
    c->header_timeout_s = 10;
    c->body_timeout_s = 60;
    c->idle_timeout_s = 120;
    c->write_timeout_s = 30;
    c->stream_buffer = 256u << 10;
    c->prep_threads = 2;
    c->store_ttl_s = 30 * 24 * 3600;
    c->store_max_bytes = 16u << 20;
    c->shutdown_timeout_s = 30;
    node_tiers_default(&c->kv);
    for (int i = 0; i < 4; i++)
        c->kv_ttl_endpoint[i] = -1;
}

/* The embedded default tier: data_dir/kv, a quarter of the free space at
 * start, between 64 MiB and 64 GiB. */
static int default_tier(const struct serve_config *cfg, struct kv_tier_spec *t, struct err_msg *msg)
{
    memset(t, 0, sizeof(*t));
    t->kind = KV_TIER_DISK;
    if (snprintf(t->path, sizeof(t->path), "%s/kv", cfg->data_dir) >= (int)sizeof(t->path))
        return err_set(msg, ERR_INVALID, "data dir '%s': too long", cfg->data_dir);
    struct statvfs fs;
    if (statvfs(cfg->data_dir, &fs))
        return err_set(msg, -errno, "data dir '%s': %s", cfg->data_dir, strerror(errno));
    uint64_t free_bytes = (uint64_t)fs.f_bavail * fs.f_frsize;
    t->bytes = MIN(MAX(free_bytes / 4, (uint64_t)64 << 20), (uint64_t)64 << 30);
    return 0;
}

static int open_tiers(struct server *s, const struct serve_config *cfg, struct err_msg *msg)
{
    struct kv_tier_spec dflt;
    int rc = 0;
    if (!cfg->kv.off && cfg->kv.n == 0 && (rc = default_tier(cfg, &dflt, msg))) return rc;
    return node_tiers_open(&cfg->kv, cfg->kv.n ? NULL : &dflt, s->engine, s->max_ctx, &s->runner,
                           &s->kv_chain, msg);
}

static int make_demo(const struct serve_config *cfg, char *path, size_t n, struct err_msg *msg)
{
    char dir[PATH_MAX - 64];
    snprintf(dir, sizeof(dir), "%.3900s/models", cfg->data_dir);
    mkdir(dir, 0755);
    snprintf(path, n, "%s/demo-tiny-qwen3-q8_0.gguf", dir);
    struct stat st;
    if (stat(path, &st) == 0) return 0;
    char tok_dir[PATH_MAX];
    int rc = maker_tokenizer_dir("qwen3", MODEL_ARCH_QWEN3, "/proc/self/exe", tok_dir,
                                 sizeof(tok_dir), msg);
    if (rc) return rc;
    log_info("no model given: making the demo model %s - %s", path, serve_demo_note);
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    struct maker_opts o = {.preset = "tiny",
                           .arch = MODEL_ARCH_QWEN3,
                           .type = DTYPE_Q8_0,
                           .tokenizer_dir = tok_dir,
                           .tied = -1,
                           .seed = 1,
                           .n_threads = 2,
                           .out_path = tmp};
    if ((rc = maker_make(&o, NULL, msg))) return rc;
    if (rename(tmp, path)) return err_set(msg, -errno, "rename '%s': %s", tmp, strerror(errno));
    return 0;
}

/* The marker is one token of the vocabulary. */
static bool has_token(const char *text, void *ctx)
{
    struct server *s = ctx;
    struct i32vec ids = {0};
    tokenizer_encode(s->tok, text, strlen(text), TOKENIZER_PARSE_SPECIAL, &ids);
    bool one = ids.n == 1;
    i32vec_release(&ids);
    return one;
}

/* How this model writes tool calls, and which special tokens carry it. */
static void detect_tools(struct server *s)
{
    struct api_pipe_model *pm = &s->pm;
    pm->tok = s->tok;
    pm->name = s->model_name;
    pm->family = toolcall_family_detect(has_token, s, tokenizer_chat_template(s->tok));
    pm->markers = s->tool_markers;
    for (const char *const *m = toolcall_family_markers(pm->family); *m; m++) {
        struct i32vec ids = {0};
        tokenizer_encode(s->tok, *m, strlen(*m), TOKENIZER_PARSE_SPECIAL, &ids);
        if (ids.n == 1 && tokenizer_is_special(s->tok, ids.v[0]) &&
            pm->n_markers < (int)ARRAY_LEN(s->tool_markers))
            s->tool_markers[pm->n_markers++] = ids.v[0];
        i32vec_release(&ids);
    }
    log_info("tool calls: %s format (%d special marker tokens)", toolcall_family_name(pm->family),
             pm->n_markers);
}

/* The byte bound of prompt text (prep.c explains the factor 3). */
static void prompt_bound(struct server *s)
{
    size_t longest = 1;
    struct buf b = {0};
    for (int32_t id = 0; id < s->n_vocab; id++) {
        buf_clear(&b);
        if (tokenizer_decode(s->tok, &id, 1, false, &b, NULL) == 0) longest = MAX(longest, b.len);
    }
    buf_release(&b);
    s->max_token_bytes = longest;
    s->max_prompt_bytes = 3 * longest * (size_t)s->max_ctx;
    log_debug("prompt text bound: %zu bytes (%zu bytes per token at most, context %d)",
              s->max_prompt_bytes, longest, s->max_ctx);
}

/* What serve and a gateway both start: the store and the worker threads. */
static int load_rest(struct server *s, const struct serve_config *cfg, struct err_msg *msg)
{
    int rc;
    if ((rc = cfg->store_url ? store_open_redis(cfg->store_url, cfg->store_ttl_s,
                                                cfg->store_max_bytes, &s->store, msg)
                             : store_open(cfg->data_dir, cfg->store_ttl_s, cfg->store_max_bytes,
                                          &s->store, msg)))
        return rc;
    if ((rc = jobq_start(&s->prep, cfg->prep_threads > 0 ? cfg->prep_threads : 2, 5, msg)))
        return rc;
    s->prep_on = true;
    if ((rc = jobq_start(&s->storeq, 1, 0, msg))) return rc;
    s->store_on = true;
    return 0;
}

static int load(struct server *s, const struct serve_config *cfg, struct err_msg *msg)
{
    char path[PATH_MAX];
    int rc;
    if (mkdir(cfg->data_dir, 0755) && errno != EEXIST)
        return err_set(msg, -errno, "data dir '%s': %s", cfg->data_dir, strerror(errno));
    if (cfg->model_path) {
        snprintf(path, sizeof(path), "%s", cfg->model_path);
    } else {
        s->demo = true;
        if ((rc = make_demo(cfg, path, sizeof(path), msg))) return rc;
    }
    if (cfg->model_name) {
        snprintf(s->model_name, sizeof(s->model_name), "%s", cfg->model_name);
    } else if (s->demo) {
        snprintf(s->model_name, sizeof(s->model_name), "inferd-demo-random");
    } else {
        const char *b = strrchr(path, '/');
        b = b ? b + 1 : path;
        size_t l = strlen(b);
        if (l > 5 && !strcmp(b + l - 5, ".gguf")) l -= 5;
        snprintf(s->model_name, sizeof(s->model_name), "%.*s", (int)MIN(l, 200), b);
    }
    char err[512] = "";
    if ((rc = inferd_model_load(path, &s->model, err, sizeof(err))))
        return err_set(msg, rc, "model '%s': %s", path, err);
    struct gguf_file *f;
    if ((rc = gguf_open(path, &f, msg))) return rc;
    rc = tokenizer_new_gguf(f, &s->tok, msg);
    gguf_close(f);
    if (rc) return rc;
    const char *src = tokenizer_chat_template(s->tok);
    if (src) {
        if ((rc = chat_template_new(src, tokenizer_bos_text(s->tok), tokenizer_eos_text(s->tok),
                                    &s->tmpl, msg)))
            log_warn("chat template unusable (%s): chat endpoints will answer 400", msg->text);
    }
    detect_tools(s);
    s->n_vocab = inferd_model_n_vocab(s->model);
    if (cfg->workers || cfg->redis) { /* a gateway: the engine runs in the workers */
        int train = inferd_model_n_ctx_train(s->model);
        s->max_ctx = cfg->max_ctx ? cfg->max_ctx : MIN(train, 4096);
        prompt_bound(s);
        return load_rest(s, cfg, msg);
    }
    struct inferd_engine_config ec;
    inferd_engine_config_default(&ec);
    ec.n_threads = cfg->n_threads;
    ec.max_ctx = cfg->max_ctx;
    ec.max_seqs = cfg->max_seqs;
    ec.kv_blocks = cfg->kv_blocks;
    ec.kv_type = cfg->kv_type;
    ec.token_budget = cfg->token_budget;
    ec.prefill_step_ratio = cfg->prefill_step_ratio;
    ec.max_waiting = cfg->max_queue;
    if (!cfg->kv.off) {
        ec.kv_events = true; /* drained by the runner: write-through tiers */
        if (node_tiers_write_back(&cfg->kv)) {
            ec.kv_evict_hook = runner_kv_evict_hook;
            ec.kv_evict_ctx = &s->runner;
        }
    }
    if ((rc = inferd_engine_new(s->model, &ec, &s->engine, err, sizeof(err))))
        return err_set(msg, rc, "engine: %s", err);
    int train = inferd_model_n_ctx_train(s->model);
    s->max_ctx = cfg->max_ctx ? cfg->max_ctx : MIN(train, 4096);
    if ((rc = open_tiers(s, cfg, msg))) return rc;
    prompt_bound(s);
    if ((rc = load_rest(s, cfg, msg))) return rc;
    /* the default class's TTL for blocks no live request names */
    if ((rc = runner_start_tiers(&s->runner, s->engine, s->kv_chain,
                                 cfg->kv.ttl.c[cfg->kv.ttl.dflt].ttl_s, false, msg)))
        return rc;
    node_backend_local(&s->local, &s->runner);
    s->be = &s->local.base;
    return 0;
}

/* Tears down in the order that keeps every reference valid: workers
 * (their done() may answer), the calls still open (answered with errors),
 * the runner, the connections, then the calls' memory and the engine. */
static void unload(struct server *s)
{
    if (s->prep_on) jobq_stop(&s->prep);
    if (s->store_on) jobq_stop(&s->storeq);
    s->prep_on = s->store_on = false;
    if (s->http) call_fail_all(s, ERR_UNAVAILABLE, "the server is shutting down");
    runner_stop(&s->runner);
    kv_chain_free(s->kv_chain); /* writes what is queued */
    s->kv_chain = NULL;
    for (struct call *c = s->calls; c; c = c->next)
        if (c->gens)
            for (int i = 0; i < c->pipe.out.n_choices; i++)
                c->gens[i].engine_open = false;
    if (s->http) http_server_free(s->http);
    s->http = NULL;
    while (s->calls)
        call_free_now(s->calls);
    u64map_release(&s->tags);
    remote_free(s->remote);
    s->remote = NULL;
    if (s->engine) inferd_engine_free(s->engine);
    if (s->model) inferd_model_free(s->model);
    if (s->tmpl) chat_template_free(s->tmpl);
    if (s->tok) tokenizer_free(s->tok);
    store_close(s->store);
    free(s->msgs);
}

static void own_origins(struct server *s)
{
    const char *hosts[] = {"127.0.0.1", "localhost", "[::1]", s->cfg->host};
    for (int i = 0; i < (int)ARRAY_LEN(s->own_origins); i++)
        snprintf(s->own_origins[i], sizeof(s->own_origins[i]), "http://%.60s:%d", hosts[i],
                 s->port);
}

int serve_run(const struct serve_config *cfg, struct err_msg *msg)
{
    struct server s = {0};
    s.cfg = cfg;
    s.created = (int64_t)time(NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = load(&s, cfg, msg);
    if (rc) {
        unload(&s);
        return rc;
    }
    if (s.demo)
        log_info("serving '%s' - %s", s.model_name, serve_demo_note);
    else
        log_info("serving '%s' from %s", s.model_name, cfg->model_path);
    s.base = event_base_new();
    if (cfg->workers || cfg->redis) {
        const char *b = strrchr(cfg->model_path, '/');
        if ((rc = remote_new(s.base, cfg->workers, cfg->redis, b ? b + 1 : cfg->model_path,
                             &s.remote, msg)))
            goto out;
        remote_set_local_prefill(s.remote, cfg->local_prefill);
        enum pol_kind kind = POL_BALANCED;
        if (cfg->policy && !pol_kind_parse(cfg->policy, &kind)) {
            rc = err_set(msg, ERR_INVALID, "--policy '%s': unknown", cfg->policy);
            goto out;
        }
        remote_set_policy(s.remote, kind);
        remote_set_max_ctx(s.remote, s.max_ctx);
        s.be = remote_backend(s.remote);
    }
    struct http_config hc;
    http_config_default(&hc);
    hc.host = cfg->host;
    hc.port = cfg->port;
    hc.max_conns = cfg->max_conns;
    hc.max_conns_per_client = cfg->max_conns_per_client;
    hc.max_header_bytes = cfg->max_headers;
    hc.max_body_bytes = cfg->max_body;
    hc.header_timeout_ms = cfg->header_timeout_s * 1000;
    hc.body_timeout_ms = cfg->body_timeout_s * 1000;
    hc.idle_timeout_ms = cfg->idle_timeout_s * 1000;
    hc.write_timeout_ms = cfg->write_timeout_s * 1000;
    hc.out_high_water = cfg->stream_buffer;
    s.hooks = (struct http_hooks){.arg = &s,
                                  .on_request = serve_on_request,
                                  .error_body = serve_error_body,
                                  .on_refusal = serve_on_refusal};
    if ((rc = http_server_new(s.base, &hc, &s.hooks, &s.http, msg))) goto out;
    s.port = http_server_port(s.http);
    own_origins(&s);
    s.wake_ev = event_new(s.base, s.be->wake_fd, EV_READ | EV_PERSIST, on_wake, &s);
    s.prep_ev = event_new(s.base, s.prep.done_fd, EV_READ | EV_PERSIST, on_jobs, &s.prep);
    s.store_ev = event_new(s.base, s.storeq.done_fd, EV_READ | EV_PERSIST, on_jobs, &s.storeq);
    s.purge_ev = event_new(s.base, -1, EV_PERSIST, on_purge, &s);
    s.sig_int = evsignal_new(s.base, SIGINT, on_signal, &s);
    s.sig_term = evsignal_new(s.base, SIGTERM, on_signal, &s);
    struct timeval every = {600, 0};
    event_add(s.wake_ev, NULL);
    event_add(s.prep_ev, NULL);
    event_add(s.store_ev, NULL);
    event_add(s.purge_ev, &every);
    event_add(s.sig_int, NULL);
    event_add(s.sig_term, NULL);
    on_purge(-1, 0, &s);
    log_info("listening on http://%s:%d (model context %d tokens, data dir %s)", cfg->host, s.port,
             s.max_ctx, cfg->data_dir);
    if (cfg->port_file) {
        FILE *pf = fopen(cfg->port_file, "w");
        if (pf) {
            fprintf(pf, "%d\n", s.port);
            fclose(pf);
        }
    }
    event_base_dispatch(s.base);
    log_info("stopped: %s", "closing the engine and the store");
out:
    unload(&s);
    struct event *evs[] = {s.deadline, s.exit_ev,  s.wake_ev, s.prep_ev,
                           s.store_ev, s.purge_ev, s.sig_int, s.sig_term};
    for (size_t i = 0; i < ARRAY_LEN(evs); i++)
        if (evs[i]) event_free(evs[i]);
    event_base_free(s.base);
    return rc;
}
