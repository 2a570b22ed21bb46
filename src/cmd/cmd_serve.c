/*
 * cmd_serve.c - `inferd serve`: flags -> serve_config -> serve_run
 * (src/serve/serve.h).
 */
#include "cmd/args.h"
#include "cmd/cmd.h"

#include "base/log.h"
#include "serve/serve.h"

#include <stdio.h>
#include <string.h>

static void serve_usage(void)
{
    fprintf(stderr, "usage: inferd serve [-m MODEL.gguf] [options]\n"
                    "  -m, --model FILE        GGUF model to serve (default: a random-weight "
                    "demo\n"
                    "                          model made on first start in the data dir)\n"
                    "  --name NAME             model id in the API (default: file name)\n"
                    "  --host ADDR             listen address (default 127.0.0.1)\n"
                    "  --port N                listen port (default 8080; 0 = any free "
                    "port)\n"
                    "  --data-dir DIR          stored responses, demo model (default "
                    "./inferd-data)\n"
                    "  --threads N             engine compute threads (default: all cores)\n"
                    "  --ctx N                 context length per request (default "
                    "min(trained, 4096))\n"
                    "  --max-seqs N            sequences decoding at once (default 64)\n"
                    "  --kv f16|bf16|f32       KV cache element type (default f16; bf16 "
                    "halves attention's\n"
                    "                          arithmetic on CPUs with AVX-512 BF16)\n"
                    "  --kv-blocks N           KV cache blocks (default: fit ctx x "
                    "max-seqs)\n"
                    "  --token-budget N        tokens per engine step: decode tokens + prefill "
                    "chunks (default 512)\n"
                    "  --prefill-ratio R       a step that prefills next to decoding streams "
                    "costs at most R\n"
                    "                          decode-only steps, by measured step costs "
                    "(default 2; 0: off,\n"
                    "                          chunks fill the token budget)\n"
                    "  --max-queue N           waiting sequences before 429 (default 256)\n"
                    "  --max-open N            requests in progress before 503 (default "
                    "1024)\n"
                    "  --max-body BYTES        request body limit (default 8 MiB)\n"
                    "  --max-headers BYTES     request header limit (default 64 KiB)\n"
                    "  --idle-timeout S        connection read/write timeout (default 120)\n"
                    "  --shutdown-timeout S    grace for in-flight requests on SIGTERM "
                    "(default 30)\n"
                    "  --api-key KEY           require 'Authorization: Bearer KEY' or "
                    "'x-api-key'\n"
                    "  --port-file FILE        write the bound port there once listening\n"
                    "  -v, --verbose           debug logging\n");
}

int cmd_serve(int argc, char **argv)
{
    struct serve_config c;
    serve_config_default(&c);
    long n;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            serve_usage();
            return 0;
        }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            log_set_level(LOG_LEVEL_DEBUG);
            continue;
        }
        if (!(v = arg_value(argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            c.model_path = v;
        } else if (!strcmp(a, "--name")) {
            c.model_name = v;
        } else if (!strcmp(a, "--host")) {
            c.host = v;
        } else if (!strcmp(a, "--data-dir")) {
            c.data_dir = v;
        } else if (!strcmp(a, "--api-key")) {
            c.api_key = v;
        } else if (!strcmp(a, "--port-file")) {
            c.port_file = v;
        } else if (!strcmp(a, "--port")) {
            if (!arg_int(a, v, 0, 65535, &n)) return 2;
            c.port = (int)n;
        } else if (!strcmp(a, "--threads")) {
            if (!arg_int(a, v, 0, 1024, &n)) return 2;
            c.n_threads = (int)n;
        } else if (!strcmp(a, "--ctx")) {
            if (!arg_int(a, v, 16, 1 << 24, &n)) return 2;
            c.max_ctx = (int)n;
        } else if (!strcmp(a, "--max-seqs")) {
            if (!arg_int(a, v, 1, 4096, &n)) return 2;
            c.max_seqs = (int)n;
        } else if (!strcmp(a, "--token-budget")) {
            if (!arg_int(a, v, 16, 1 << 16, &n)) return 2;
            c.token_budget = (int)n;
        } else if (!strcmp(a, "--prefill-ratio")) {
            double r;
            if (!arg_float(a, v, 0, 1000, &r)) return 2;
            if (r > 0 && r <= 1) {
                fprintf(stderr, "inferd: serve: --prefill-ratio must be > 1 (or 0: off)\n");
                return 2;
            }
            c.prefill_step_ratio = r > 0 ? (float)r : -1.0f;
        } else if (!strcmp(a, "--kv")) {
            if (!arg_kv(a, v, &c.kv_type)) return 2;
        } else if (!strcmp(a, "--kv-blocks")) {
            if (!arg_int(a, v, 1, 1 << 24, &n)) return 2;
            c.kv_blocks = (int)n;
        } else if (!strcmp(a, "--max-queue")) {
            if (!arg_int(a, v, 1, 1 << 20, &n)) return 2;
            c.max_queue = (int)n;
        } else if (!strcmp(a, "--max-open")) {
            if (!arg_int(a, v, 1, 1 << 20, &n)) return 2;
            c.max_open = (int)n;
        } else if (!strcmp(a, "--max-body")) {
            if (!arg_int(a, v, 1024, 1L << 32, &n)) return 2;
            c.max_body = (size_t)n;
        } else if (!strcmp(a, "--max-headers")) {
            if (!arg_int(a, v, 1024, 1L << 24, &n)) return 2;
            c.max_headers = (size_t)n;
        } else if (!strcmp(a, "--idle-timeout")) {
            if (!arg_int(a, v, 1, 86400, &n)) return 2;
            c.idle_timeout_s = (int)n;
        } else if (!strcmp(a, "--shutdown-timeout")) {
            if (!arg_int(a, v, 0, 86400, &n)) return 2;
            c.shutdown_timeout_s = (int)n;
        } else {
            fprintf(stderr, "inferd serve: unknown option '%s'\n", a);
            serve_usage();
            return 2;
        }
    }
    struct err_msg msg = {{0}};
    int rc = serve_run(&c, &msg);
    if (rc) {
        fprintf(stderr, "inferd serve: %s\n", msg.text[0] ? msg.text : err_str(rc));
        return 1;
    }
    return 0;
}
