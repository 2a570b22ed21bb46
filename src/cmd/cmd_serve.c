/*
 * cmd_serve.c - `inferd serve`: flags -> serve_config -> serve_run
 * (src/serve/serve.h).
 *
 * One table row per flag (cmd/opt.h): it names the flag, checks its value
 * and stores it straight into the serve_config that serve_config_default
 * filled, so a new serve setting is one field in serve.h plus one row here.
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "base/log.h"
#include "cluster/members.h"
#include "cluster/remote.h"
#include "serve/serve.h"
#include "serve/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --prefill-ratio R: the config's -1 means off, which the flag spells 0;
 * ratios in (0, 1] would forbid prefilling next to decodes at all. */
static int set_prefill_ratio(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    float *ratio = dst;
    char *end;
    double r = strtod(val, &end);
    if (end == val || *end || !(r == 0 || (r > 1 && r <= 1000)))
        return err_set(m, ERR_INVALID, "%s: expected 0 (off) or a number in (1, 1000], got '%s'",
                       spelling, val);
    *ratio = r > 0 ? (float)r : -1.0f;
    return 0;
}

/* --kv-ttl-default [ENDPOINT=]CLASS: ENDPOINT one of chat, completions,
 * responses, messages; none: every endpoint. Classes are looked up after
 * all flags (a class may be defined by a later --kv-ttl). */
struct ttl_default {
    char spec[8][80]; /* as given */
    int n;            /* entries */
};

static int add_ttl_default(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct ttl_default *d = dst;
    if (d->n == 8 || strlen(val) >= sizeof(d->spec[0]))
        return err_set(m, ERR_INVALID, "%s '%s': too many or too long", spelling, val);
    snprintf(d->spec[d->n++], sizeof(d->spec[0]), "%s", val);
    return 0;
}

/* The api_kind of an endpoint named by s[0..n): chat, completions,
 * responses, messages; -1 for another name. */
static int endpoint_kind(const char *s, size_t n)
{
    static const char *const endpoints[4] = {"chat", "completions", "responses", "messages"};
    for (int j = 0; j < 4; j++) /* in api_kind order */
        if (strlen(endpoints[j]) == n && !strncmp(s, endpoints[j], n)) return j;
    return -1;
}

static int apply_ttl_defaults(struct serve_config *c, const struct ttl_default *d,
                              struct err_msg *m)
{
    for (int i = 0; i < d->n; i++) {
        const char *v = d->spec[i], *eq = strchr(v, '=');
        const char *cls = eq ? eq + 1 : v;
        int k = kv_ttl_classes_find(&c->kv.ttl, cls, strlen(cls));
        if (k < 0)
            return err_set(m, ERR_INVALID,
                           "--kv-ttl-default '%s': no class '%s' (define it with "
                           "--kv-ttl %s=DURATION)",
                           v, cls, cls);
        if (!eq) {
            c->kv.ttl.dflt = k;
            continue;
        }
        int e = endpoint_kind(v, (size_t)(eq - v));
        if (e < 0)
            return err_set(m, ERR_INVALID,
                           "--kv-ttl-default '%s': endpoint must be chat, completions, responses "
                           "or messages",
                           v);
        c->kv_ttl_endpoint[e] = k;
    }
    return 0;
}

/* --slo [ENDPOINT=]TTFT_MS/TPOT_MS (gateway): latency targets, all
 * endpoints or one; 0 or an empty side: none. */
static int set_slo(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct serve_config *c = dst;
    const char *eq = strchr(val, '='), *v = eq ? eq + 1 : val;
    int e = -1;
    if (eq) {
        e = endpoint_kind(val, (size_t)(eq - val));
        if (e < 0)
            return err_set(m, ERR_INVALID,
                           "%s '%s': endpoint must be chat, completions, responses or messages",
                           spelling, val);
    }
    char *end;
    double ttft = *v == '/' ? 0 : strtod(v, &end);
    if (*v == '/') end = (char *)v;
    if (end == v && *v != '/') goto bad;
    double tpot = 0;
    if (*end == '/') {
        const char *t = end + 1;
        tpot = *t ? strtod(t, &end) : 0;
        if (*t && end == t) goto bad;
    }
    if (*end || !(ttft >= 0) || !(tpot >= 0) || ttft > 1e7 || tpot > 1e7) goto bad;
    for (int j = 0; j < 4; j++)
        if (e < 0 || e == j) {
            c->slo_ttft_ms[j] = ttft;
            c->slo_tpot_ms[j] = tpot;
        }
    return 0;
bad:
    return err_set(m, ERR_INVALID,
                   "%s '%s': expected [ENDPOINT=]TTFT_MS/TPOT_MS (milliseconds, >= 0)", spelling,
                   val);
}

/* --listen HOST:PORT (gateway): host and port in one. */
static int set_listen(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct serve_config *c = dst;
    static char host[64];
    if (cmd_parse_host_port(spelling, val, host, sizeof(host), &c->port, m)) return ERR_INVALID;
    c->host = host;
    return 0;
}

/* serve, or (gateway) the same front door in front of workers. */
static int serve_main(int argc, char **argv, bool gateway)
{
    const char *self = gateway ? "gateway" : "serve";
    struct serve_config c;
    serve_config_default(&c);
    bool verbose = false;
    struct ttl_default ttl_defaults = {0};
    struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE",
                    "GGUF model to serve (default: a random-weight demo\n"
                    "model made on first start in the data dir)",
                    &c.model_path),
        CMD_OPT_STR("name", 0, "NAME", "model id in the API (default: file name)", &c.model_name),
        CMD_OPT_STR("host", 0, "ADDR", "listen address (default 127.0.0.1)", &c.host),
        CMD_OPT_INT("port", 0, "N", "listen port (default 8080; 0 = any free port)", &c.port, 0,
                    65535),
        CMD_OPT_STR("data-dir", 0, "DIR", "stored responses, demo model (default ./inferd-data)",
                    &c.data_dir),
        CMD_OPT_ENGINE_SIZE(c),
        CMD_OPT_ENUM("kv", 0, NULL,
                     "KV cache element type (default f16; bf16 halves\n"
                     "attention's arithmetic on CPUs with AVX-512 BF16)",
                     &c.kv_type, cmd_kv_types),
        CMD_OPT_INT("kv-blocks", 0, "N", "KV cache blocks (default: fit ctx x max-seqs)",
                    &c.kv_blocks, 1, 1 << 24),
        CMD_OPT_INT("token-budget", 0, "N",
                    "tokens per engine step: decode tokens + prefill\nchunks (default 512)",
                    &c.token_budget, 16, 1 << 16),
        CMD_OPT_CALL("prefill-ratio", 0, "R",
                     "a step that prefills next to decoding streams costs\n"
                     "at most R decode-only steps, by measured step costs\n"
                     "(default 2; 0: off, chunks fill the token budget)",
                     set_prefill_ratio, &c.prefill_step_ratio),
        CMD_OPT_INT("max-queue", 0, "N", "waiting sequences before 429 (default 256)", &c.max_queue,
                    1, 1 << 20),
        CMD_OPT_INT("max-open", 0, "N", "requests in progress before 503 (default 1024)",
                    &c.max_open, 1, 1 << 20),
        CMD_OPT_INT("max-body", 0, "BYTES", "request body limit (default 8 MiB)", &c.max_body, 1024,
                    1L << 32),
        CMD_OPT_INT("max-headers", 0, "BYTES", "request header limit (default 64 KiB)",
                    &c.max_headers, 1024, 1L << 24),
        CMD_OPT_INT("max-conns", 0, "N", "open connections before 503 (default 4096)", &c.max_conns,
                    1, 1 << 20),
        CMD_OPT_INT("max-conns-per-client", 0, "N",
                    "open connections from one address before 429\n(default 512)",
                    &c.max_conns_per_client, 1, 1 << 20),
        CMD_OPT_INT("header-timeout", 0, "S",
                    "the whole request head must arrive within S seconds\n(default 10)",
                    &c.header_timeout_s, 1, 3600),
        CMD_OPT_INT("body-timeout", 0, "S",
                    "the whole body must arrive within S seconds after\nthe head (default 60)",
                    &c.body_timeout_s, 1, 86400),
        CMD_OPT_INT("idle-timeout", 0, "S",
                    "a keep-alive connection with no request closes after\nS seconds (default 120)",
                    &c.idle_timeout_s, 1, 86400),
        CMD_OPT_INT("write-timeout", 0, "S",
                    "a client that reads nothing for S seconds is gone;\nits requests are "
                    "cancelled (default 30)",
                    &c.write_timeout_s, 1, 86400),
        CMD_OPT_INT("stream-buffer", 0, "BYTES",
                    "output queued to a client before its stream pauses\n(default 256 KiB)",
                    &c.stream_buffer, 4096, 1L << 30),
        CMD_OPT_STR("cors-origin", 0, "LIST",
                    "web origins allowed besides the server's own,\ncomma-separated ('*': any; "
                    "default none)",
                    &c.cors_origins),
        CMD_OPT_INT("prep-threads", 0, "N",
                    "request preparation threads: decoding, templates,\ntokenizing (default 2)",
                    &c.prep_threads, 1, 256),
        CMD_OPT_STR("store", 0, "URL",
                    "where stored responses live: redis://HOST:PORT[/DB]\n"
                    "or unix:/PATH, one every gateway behind a load\n"
                    "balancer shares (default: DATA-DIR/responses.db)",
                    &c.store_url),
        CMD_OPT_INT("store-ttl", 0, "S",
                    "stored responses expire after S seconds (default\n30 days; 0: never)",
                    &c.store_ttl_s, 0, 1L << 40),
        CMD_OPT_INT("store-max-bytes", 0, "BYTES",
                    "the most one stored response may take, with its\nconversation "
                    "(default 16 MiB)",
                    &c.store_max_bytes, 1024, 1L << 34),
        CMD_OPT_INT("shutdown-timeout", 0, "S",
                    "grace for in-flight requests on SIGTERM (default 30)", &c.shutdown_timeout_s,
                    0, 86400),
        CMD_OPT_STR("api-key", 0, "KEY", "require 'Authorization: Bearer KEY' or 'x-api-key'",
                    &c.api_key),
        CMD_OPT_STR("port-file", 0, "FILE", "write the bound port there once listening",
                    &c.port_file),
        CMD_OPT_KV_TIERS(c.kv, "disk:DATA-DIR/kv, sized to fit"),
        CMD_OPT_CALL("kv-ttl-default", 0, "[ENDPOINT=]CLASS",
                     "class of requests that name none (default chat);\n"
                     "ENDPOINT: chat, completions, responses, messages",
                     add_ttl_default, &ttl_defaults),
        CMD_OPT_FLAG("verbose", 'v', "debug logging", &verbose),
        /* the gateway's own, last: serve ends its table before them */
        CMD_OPT_STR("workers", 0, "LIST",
                    "the workers that run the engine: HOST:PORT,...\n(inferd worker)", &c.workers),
        CMD_OPT_STR("redis", 0, "URL",
                    "take the workers announced in this Redis\n(redis://HOST:PORT or "
                    "unix:/PATH; with or instead of --workers)",
                    &c.redis),
        CMD_OPT_INT("local-prefill", 0, "N",
                    "prompts of at most N tokens are prefilled by the\nworker that decodes "
                    "them, longer ones by a prefill\nworker when there is one (default 256)",
                    &c.local_prefill, 0, 1 << 30),
        CMD_OPT_STR("policy", 0, "NAME",
                    "routing: balanced (default: the least compute to\nfinish, cache overlap "
                    "counted), cache-aware,\nleast-loaded, round-robin",
                    &c.policy),
        CMD_OPT_CALL("slo", 0, "[ENDPOINT=]TTFT/TPOT",
                     "latency targets in ms (e.g. 2000/50; repeatable per\nendpoint): a request "
                     "whose best placement is\npredicted to miss them gets 429 and Retry-After",
                     set_slo, &c),
        CMD_OPT_CALL("listen", 0, "HOST:PORT", "listen address and port in one", set_listen, &c),
        CMD_OPT_END,
    };
    if (!gateway) opts[ARRAY_LEN(opts) - 7] = opts[ARRAY_LEN(opts) - 1];
    const struct cmd_spec spec = {.name = self,
                                  .synopsis =
                                      gateway ? "-m MODEL.gguf --workers HOST:PORT,... [options]"
                                              : "[-m MODEL.gguf] [options]",
                                  .opts = opts};
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    if (verbose) log_set_level(LOG_LEVEL_DEBUG);
    if (gateway && ((!c.workers && !c.redis) || !c.model_path)) {
        fprintf(stderr, "inferd gateway: %s\n",
                !c.model_path ? "a model is needed (-m FILE: the workers' GGUF, for its tokenizer "
                                "and chat template)"
                              : "--workers HOST:PORT,... or --redis URL is needed");
        return CMD_EXIT_USAGE;
    }

    struct err_msg msg = {{0}};
    struct members *probe = NULL;
    if (gateway && c.redis && members_open(c.redis, "x", &probe, &msg)) {
        fprintf(stderr, "inferd gateway: %s\n", msg.text);
        return CMD_EXIT_USAGE;
    }
    members_close(probe);
    struct store *store_probe = NULL;
    if (c.store_url && store_open_redis(c.store_url, 0, 0, &store_probe, &msg)) {
        fprintf(stderr, "inferd %s: %s\n", self, msg.text);
        return CMD_EXIT_USAGE;
    }
    store_close(store_probe);
    enum pol_kind kind;
    if (gateway && c.policy && !pol_kind_parse(c.policy, &kind)) {
        fprintf(stderr,
                "inferd gateway: --policy '%s': expected balanced, cache-aware, least-loaded or "
                "round-robin\n",
                c.policy);
        return CMD_EXIT_USAGE;
    }
    if (gateway && c.workers && remote_check_list(c.workers, &msg)) {
        fprintf(stderr, "inferd gateway: %s\n", msg.text);
        return CMD_EXIT_USAGE;
    }
    if (apply_ttl_defaults(&c, &ttl_defaults, &msg)) {
        fprintf(stderr, "inferd %s: %s\n", self, msg.text);
        return CMD_EXIT_USAGE;
    }
    int rc = serve_run(&c, &msg);
    if (rc) {
        fprintf(stderr, "inferd %s: %s\n", self, msg.text[0] ? msg.text : err_str(rc));
        return CMD_EXIT_FAIL;
    }
    return CMD_EXIT_OK;
}

int cmd_serve(int argc, char **argv)
{
    return serve_main(argc, argv, false);
}

int cmd_gateway(int argc, char **argv)
{
    return serve_main(argc, argv, true);
}
