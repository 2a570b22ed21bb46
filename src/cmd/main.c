/*
 * main.c - the inferd binary: dispatches to subcommands (cmd.h).
 */
#include "cmd/cmd.h"
#include "kernels/kernels.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "usage: inferd <command> [options]\n"
            "\n"
            "commands:\n"
            "  serve         the HTTP API server (OpenAI and Anthropic APIs)\n"
            "  worker        an engine node of a cluster (internal protocol over TCP)\n"
            "  gateway       the HTTP API in front of workers (tokenizes, templates, streams)\n"
            "  run           generate from a prompt on the command line\n"
            "  logits        write the logits of every prompt position (float32)\n"
            "  bench-engine  prefill / decode speed, as a share of this machine's limits\n"
            "  bench         load generator and evaluator for OpenAI-compatible servers\n"
            "  model info    describe a GGUF model file\n"
            "  model make    write a random-weight test model with a real tokenizer\n"
            "  tokenize      text -> token ids with a model's tokenizer\n"
            "  template      print the prompt a model's chat template makes of a chat\n"
            "  grammar       structured output: check a grammar, generate under one, bench masks\n"
            "  sim           a cluster simulated over a trace (routing, balance, SLOs)\n"
            "  sim cache     KV tier eviction policies replayed over request traces\n"
            "  kv            inspect and repair a disk or shared KV tier directory\n"
            "\n"
            "run 'inferd <command> --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    /* a level asked for and not there: say so rather than run (and measure) another */
    const char *isa_error = kern_isa_env_error();
    if (isa_error) {
        fprintf(stderr, "inferd: %s\n", isa_error);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "template")) return cmd_template(argc - 1, argv + 1);
    if (!strcmp(cmd, "grammar")) return cmd_grammar(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-engine")) return cmd_bench_engine(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "sim")) return cmd_sim(argc - 1, argv + 1);
    if (!strcmp(cmd, "kv")) return cmd_kv(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker")) return cmd_worker(argc - 1, argv + 1);
    if (!strcmp(cmd, "gateway")) return cmd_gateway(argc - 1, argv + 1);
    /* hidden: the scripted server bench's tests run against (docs/bench.md) */
    if (!strcmp(cmd, "bench-mock")) return cmd_bench_mock(argc - 1, argv + 1);
    if (!strcmp(cmd, "model")) {
        if (argc >= 3 && !strcmp(argv[2], "info")) return cmd_model_info(argc - 2, argv + 2);
        if (argc >= 3 && !strcmp(argv[2], "make")) return cmd_model_make(argc - 2, argv + 2);
        bool help = argc >= 3 && (!strcmp(argv[2], "-h") || !strcmp(argv[2], "--help"));
        fprintf(help ? stdout : stderr,
                "usage: inferd model info FILE | inferd model make [options]\n");
        return help ? 0 : 2;
    }
    fprintf(stderr, "inferd: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
