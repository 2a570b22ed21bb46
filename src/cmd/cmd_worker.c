/*
 * cmd_worker.c - `inferd worker`: an engine node speaking the cluster
 * protocol (cluster/worker.h has what it does and what it does not yet).
 *
 * Exit status: 0 after SIGINT/SIGTERM; 1 when the model, the engine or the
 * listen address fails; 2 for a bad command line.
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "base/log.h"
#include "cluster/worker.h"
#include "node/tiers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct cmd_choice roles[] = {
    {"prefill", CL_ROLE_PREFILL}, {"decode", CL_ROLE_DECODE}, {"mixed", CL_ROLE_MIXED}, {NULL, 0}};

struct listen_addr {
    char host[64];
    int port;
};

/* --listen HOST:PORT (IPv4; port 0: any free one). */
static int set_listen(void *dst, const char *spelling, const char *val, struct err_msg *m)
{
    struct listen_addr *a = dst;
    return cmd_parse_host_port(spelling, val, a->host, sizeof(a->host), &a->port, m);
}

int cmd_worker(int argc, char **argv)
{
    struct worker_config c;
    worker_config_default(&c);
    struct listen_addr addr = {"127.0.0.1", 7070};
    int role = CL_ROLE_MIXED;
    bool verbose = false;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model to serve (required)", &c.model_path),
        CMD_OPT_ENUM("role", 0, NULL,
                     "what this worker does in a cluster (default mixed;\n"
                     "prefill and decode run whole requests for now)",
                     &role, roles),
        CMD_OPT_CALL("listen", 0, "HOST:PORT",
                     "where peers connect (default 127.0.0.1:7070;\nport 0: any free one)",
                     set_listen, &addr),
        CMD_OPT_STR("name", 0, "NAME", "this worker's name in HELLO and logs (default ROLE-PORT)",
                    &c.name),
        CMD_OPT_ENGINE_SIZE(c),
        CMD_OPT_INT("kv-blocks", 0, "N", "KV cache blocks (default: fit ctx x max-seqs)",
                    &c.kv_blocks, 1, 1 << 24),
        CMD_OPT_INT("max-queue", 0, "N",
                    "waiting sequences before a request is refused\n(default 256)", &c.max_queue, 1,
                    1 << 20),
        CMD_OPT_INT("max-conns", 0, "N", "peer connections at once (default 256)", &c.max_conns, 1,
                    1 << 20),
        CMD_OPT_INT("stats-ms", 0, "MS", "STATS frame period to each peer (default 250)",
                    &c.stats_ms, 10, 60000),
        CMD_OPT_KV_TIERS(c.kv, "none"),
        CMD_OPT_STR("port-file", 0, "FILE", "write the bound port there once listening",
                    &c.port_file),
        CMD_OPT_STR("redis", 0, "URL",
                    "announce this worker in Redis for gateways\n(redis://HOST:PORT or "
                    "unix:/PATH; keys expire 2.5 s\nafter the last heartbeat)",
                    &c.redis),
        CMD_OPT_FLAG("mock", 0,
                     "no engine: answer every request at once (the prompt's\n"
                     "tokens, cycled), to measure a gateway on its own",
                     &c.mock),
        CMD_OPT_FLAG("verbose", 'v', "debug logging", &verbose),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {.name = "worker",
                                  .synopsis = "-m MODEL.gguf [--role ROLE] [--listen HOST:PORT]",
                                  .opts = opts};
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    if (r != CMD_OPT_OK) return cmd_opt_exit(r);
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    if (!c.model_path) {
        fprintf(stderr, "inferd worker: a model is needed (-m FILE)\n");
        return CMD_EXIT_USAGE;
    }
    if (verbose) log_set_level(LOG_LEVEL_DEBUG);
    c.host = addr.host;
    c.port = addr.port;
    c.role = (enum cl_role)role;
    struct err_msg msg = {{0}};
    int rc = worker_run(&c, &msg);
    if (rc) {
        fprintf(stderr, "inferd worker: %s\n", msg.text[0] ? msg.text : err_str(rc));
        return CMD_EXIT_FAIL;
    }
    return CMD_EXIT_OK;
}
