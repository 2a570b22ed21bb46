/*
 * cmd_run.c - `inferd run` (generate on the command line) and `inferd logits`
 * (raw logits of every prompt position, for reference checks).
 *
 * `run` can put the request in a crowd (--batch-with N random requests),
 * chunk its prefill (--chunk) and change the thread count, and write every
 * step's logprob as an exact hex float (--dump-logprobs): comparing dumps
 * checks the engine's bit-exact invariance from the command line.
 *
 * `--runs N` submits the same request N times in a row on one engine: later
 * runs find the prompt in the prefix cache, and the command checks that they
 * give the first run's tokens and logprobs bit for bit.
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "engine/forward.h"
#include "inferd/inferd.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_run(int argc, char **argv)
{
    const char *model_path = NULL, *text = NULL, *dump_path = NULL;
    struct cmd_ints tokens = {0};
    int rc = 1;
    long max_tokens = 128, batch_with = 0, runs = 1;
    bool ignore_eos = false;
    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    struct inferd_sampling sp;
    inferd_sampling_default(&sp);
    sp.temperature = 0.0f;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model (required)", &model_path),
        CMD_OPT_INTS("tokens", 0, "IDS", "the prompt: comma-separated token ids", &tokens, 0,
                     INT32_MAX),
        CMD_OPT_STR("prompt", 'p', "TEXT", "a text prompt (needs the tokenizer: not yet)", &text),
        CMD_OPT_INT("max-tokens", 'n', "N", "tokens to generate (default 128)", &max_tokens, 1,
                    1 << 20),
        CMD_OPT_INT("threads", 0, "N", "compute threads (default: all cores)", &cfg.n_threads, 1,
                    256),
        CMD_OPT_INT("chunk", 0, "N", "tokens per forward step = prefill chunk (default 512)",
                    &cfg.token_budget, 1, 65536),
        CMD_OPT_INT("batch-with", 0, "N", "run alongside N random requests (default 0)",
                    &batch_with, 0, 4000),
        CMD_OPT_ENUM("kv", 0, NULL, "KV cache type (default f16)", &cfg.kv_type, cmd_kv_types),
        CMD_OPT_INT("block", 0, "N", "KV block size in tokens (default 16)", &cfg.block_tokens, 1,
                    4096),
        CMD_OPT_FLOAT("temp", 0, "T", "temperature (default 0: greedy)", &sp.temperature, 0, 100),
        CMD_OPT_INT("top-k", 0, "K", "sample among the K most likely tokens (0: all)", &sp.top_k, 0,
                    1 << 24),
        CMD_OPT_FLOAT("top-p", 0, "P", "nucleus sampling", &sp.top_p, 0, 1),
        CMD_OPT_FLOAT("min-p", 0, "P", "drop tokens below P x the top probability", &sp.min_p, 0,
                      1),
        CMD_OPT_INT("seed", 0, "S", "sampling seed", &sp.seed, 0, INT64_MAX),
        CMD_OPT_FLOAT("repeat-penalty", 0, "R", "repetition penalty", &sp.repetition_penalty, 0,
                      100),
        CMD_OPT_FLOAT("presence-penalty", 0, "P", "presence penalty", &sp.presence_penalty, -2, 2),
        CMD_OPT_FLOAT("frequency-penalty", 0, "F", "frequency penalty", &sp.frequency_penalty, -2,
                      2),
        CMD_OPT_INT("logprobs", 0, "N", "also print the top N alternatives per token",
                    &sp.n_logprobs, 0, 20),
        CMD_OPT_FLAG("ignore-eos", 0, "do not stop at end-of-generation tokens", &ignore_eos),
        CMD_OPT_STR("dump-logprobs", 0, "FILE",
                    "each step's token and logprob as an exact hex float", &dump_path),
        CMD_OPT_INT("runs", 0, "N",
                    "run the request N times on one engine; later runs read the\n"
                    "prompt from the prefix cache and must match run 1 bitwise",
                    &runs, 1, 1000),
        CMD_OPT_FLAG("no-prefix-cache", 0, "never reuse KV across requests", &cfg.no_prefix_cache),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "run", .synopsis = "-m MODEL (--tokens IDS | -p TEXT) [options]", .opts = opts};
    int argi;
    enum cmd_opt_result pr = cmd_opt_parse(&spec, argc, argv, &argi);
    if (pr != CMD_OPT_OK) {
        free(tokens.v);
        return cmd_opt_exit(pr);
    }
    int32_t *prompt = tokens.v;
    const int n_prompt = tokens.n;
    const long n_logprobs = sp.n_logprobs;
    sp.logprobs = dump_path || n_logprobs > 0;
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) goto usage;
    if (!model_path) {
        cmd_usage_error(&spec, "-m MODEL is required");
        goto usage;
    }
    if (text && !prompt) {
        cmd_usage_error(&spec, "text prompts need the tokenizer, which this build does not "
                               "have yet; pass token ids with --tokens");
        goto usage;
    }
    if (!prompt) {
        cmd_usage_error(&spec, "give a prompt with --tokens IDS");
        goto usage;
    }

    char err[512];
    inferd_model *model;
    if (inferd_model_load(model_path, &model, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot load model '%s': %s\n", model_path, err);
        free(prompt);
        return 1;
    }
    FILE *dump = NULL;
    if (dump_path && !(dump = fopen(dump_path, "w"))) {
        fprintf(stderr, "inferd: cannot write '%s'\n", dump_path);
        goto out_model;
    }
    /* The longest sequence: the request, or a crowd request (prompt up to
     * 2 n_prompt + 8, as generated below). */
    const int longest = (int)MIN((int64_t)2 * n_prompt + 8 + max_tokens, INT32_MAX / 2);
    if (cfg.max_ctx == 0) cfg.max_ctx = longest;
    /* Room for the request and its crowd without waiting on KV. */
    if (cfg.kv_blocks == 0) {
        int bt = cfg.block_tokens ? cfg.block_tokens : 16;
        cfg.kv_blocks = (int)MIN((batch_with + 1) * (longest / bt + 2), INT32_MAX / 2);
    }
    if (cfg.max_seqs == 0) cfg.max_seqs = (int)MAX(64, batch_with + 1);
    inferd_engine *e;
    if (inferd_engine_new(model, &cfg, &e, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot create engine: %s\n", err);
        goto out_dump;
    }

    /* The crowd is submitted first, so the request of interest shares every
     * step with it and its prefill lands in odd places of the batch. */
    uint64_t rng = 0x5eed;
    const int n_vocab = inferd_model_n_vocab(model);
    for (long j = 0; j < batch_with; j++) {
        int n = 1 + (int)(rng_next(&rng) % (uint64_t)(2 * n_prompt + 8));
        int32_t *toks = xmalloc(sizeof(int32_t) * (size_t)n);
        for (int i = 0; i < n; i++)
            toks[i] = (int32_t)(rng_next(&rng) % (uint64_t)n_vocab);
        struct inferd_request r = {.prompt = toks,
                                   .n_prompt = n,
                                   .max_tokens = 1 + (int)(rng_next(&rng) % (uint64_t)max_tokens),
                                   .ignore_eos = true};
        inferd_sampling_default(&r.sampling);
        r.sampling.seed = rng_next(&rng);
        uint64_t id;
        if (inferd_submit(e, &r, &id, err, sizeof(err))) {
            fprintf(stderr, "inferd: crowd request: %s\n", err);
            free(toks);
            goto out_engine;
        }
        free(toks);
    }
    struct inferd_request req = {.prompt = prompt,
                                 .n_prompt = n_prompt,
                                 .max_tokens = (int)max_tokens,
                                 .ignore_eos = ignore_eos,
                                 .sampling = sp};
    /* Run 1's tokens and logprobs, which later runs must repeat. */
    int32_t *first_tok = xmalloc(sizeof(int32_t) * (size_t)max_tokens);
    float *first_lp = xmalloc(sizeof(float) * (size_t)max_tokens);
    int n_first = 0;
    for (long run = 0; run < runs; run++) {
        uint64_t id;
        if (inferd_submit(e, &req, &id, err, sizeof(err))) {
            fprintf(stderr, "inferd: run: %s\n", err);
            goto out_first;
        }
        double t0 = time_now_s(), t_first = 0;
        int n_gen = 0, n_cached = 0;
        bool done = false, same = true;
        enum inferd_finish why = INFERD_FINISH_NONE;
        while (!done) {
            int n = inferd_engine_step(e);
            if (n < 0) {
                fprintf(stderr, "inferd: step failed: %s\n", inferd_strerror(n));
                goto out_first;
            }
            struct inferd_event ev;
            while (inferd_poll(e, &ev)) {
                if (ev.request != id) continue;
                if (ev.token >= 0) {
                    if (n_gen == 0) t_first = time_now_s();
                    if (run == 0) {
                        first_tok[n_gen] = ev.token;
                        first_lp[n_gen] = ev.logprob;
                        n_first = n_gen + 1;
                        printf("%d ", ev.token);
                        if (n_logprobs) {
                            printf("(%.4f:", (double)ev.logprob);
                            for (int i = 0; i < ev.n_top; i++)
                                printf(" %d=%.4f", ev.top[i].token, (double)ev.top[i].logprob);
                            printf(") ");
                        }
                        fflush(stdout);
                        if (dump) fprintf(dump, "%d %a\n", ev.token, (double)ev.logprob);
                    } else if (n_gen >= n_first || first_tok[n_gen] != ev.token ||
                               memcmp(&first_lp[n_gen], &ev.logprob, sizeof(float)) != 0) {
                        same = false;
                    }
                    n_gen++;
                }
                if (ev.finish != INFERD_FINISH_NONE) {
                    why = ev.finish;
                    n_cached = ev.n_cached;
                    done = true;
                }
            }
            if (n == 0 && !done) {
                fprintf(stderr, "inferd: run: the engine stalled (KV cache too small?)\n");
                goto out_first;
            }
        }
        double t1 = time_now_s();
        if (run == 0) {
            printf("\n");
            fflush(stdout);
        }
        same = same && n_gen == n_first;
        /* With a crowd the timings include the others' work; they are the
         * request's own wall-clock rates. */
        char label[32] = "";
        if (runs > 1) snprintf(label, sizeof(label), "run %ld: ", run + 1);
        fprintf(stderr,
                "%sprompt: %d tokens (%d cached), %.1f tokens/s | generation: %d tokens, %.1f "
                "tokens/s | finish: %s%s\n",
                label, n_prompt, n_cached, n_prompt / (t_first - t0), n_gen,
                n_gen > 1 ? (n_gen - 1) / (t1 - t_first) : 0.0,
                why == INFERD_FINISH_STOP     ? "stop"
                : why == INFERD_FINISH_LENGTH ? "length"
                                              : "other",
                run == 0 ? ""
                : same   ? " | output identical to run 1"
                         : "");
        if (!same) {
            fprintf(stderr, "inferd: run: run %ld gave other tokens or logprobs than run 1\n",
                    run + 1);
            goto out_first;
        }
    }
    rc = 0;
out_first:
    free(first_tok);
    free(first_lp);
out_engine:
    inferd_engine_free(e);
out_dump:
    if (dump) fclose(dump);
out_model:
    inferd_model_free(model);
    free(prompt);
    return rc;
usage:
    free(prompt);
    return CMD_EXIT_USAGE;
}

int cmd_logits(int argc, char **argv)
{
    const char *model_path = NULL, *out_path = NULL;
    struct cmd_ints tokens = {0};
    long threads = 1, chunk = 0;
    enum inferd_kv_type kvt = INFERD_KV_F16;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model (required)", &model_path),
        CMD_OPT_INTS("tokens", 0, "IDS", "comma-separated token ids (required)", &tokens, 0,
                     INT32_MAX),
        CMD_OPT_STR("output", 'o', "FILE", "where the logits go (required)", &out_path),
        CMD_OPT_INT("threads", 0, "N", "compute threads (default 1)", &threads, 1, 256),
        CMD_OPT_INT("chunk", 0, "N", "tokens per forward step (default: all)", &chunk, 1, 65536),
        CMD_OPT_ENUM("kv", 0, NULL, "KV cache type (default f16)", &kvt, cmd_kv_types),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "logits",
        .synopsis = "-m MODEL --tokens IDS -o OUT [options]",
        .about = "Writes float32 logits, shape (n_tokens, n_vocab), little-endian.",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result r = cmd_opt_parse(&spec, argc, argv, &argi);
    int32_t *toks = tokens.v;
    const int n_toks = tokens.n;
    if (r != CMD_OPT_OK) {
        free(toks);
        return cmd_opt_exit(r);
    }
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) goto usage;
    if (!model_path || !out_path || !toks) {
        cmd_usage_error(&spec, "-m, --tokens and -o are required");
        goto usage;
    }
    if (chunk == 0) chunk = n_toks;

    kern_init();
    struct err_msg msg = {{0}};
    struct model *m;
    if (model_load(model_path, &m, &msg)) {
        fprintf(stderr, "inferd: cannot load model '%s': %s\n", model_path, msg.text);
        free(toks);
        return 1;
    }
    int rc = 1;
    const int V = m->hp.n_vocab, bt = 16;
    struct kv_pool kv;
    struct kv_pool_config kc = {.n_layer = m->hp.n_layer,
                                .n_kv_head = m->hp.n_head_kv,
                                .head_dim = m->hp.head_dim,
                                .block_tokens = bt,
                                .n_blocks = n_toks / bt + 1,
                                .dtype = kvt == INFERD_KV_F32    ? DTYPE_F32
                                         : kvt == INFERD_KV_BF16 ? DTYPE_BF16
                                                                 : DTYPE_F16};
    struct tpool *pool = NULL;
    struct fwd_ctx *fwd = NULL;
    struct kv_seq seq = {0};
    float *logits = NULL;
    int32_t *pos = NULL, *sq = NULL;
    bool *want = NULL;
    FILE *f = NULL;
    if (kv_pool_init(&kv, &kc, &msg)) goto out_model;
    pool = tpool_new((int)threads);
    if (fwd_ctx_new(m, &kv, pool, (int)chunk, n_toks, &fwd, &msg)) goto out_kv;
    if (kv_seq_reserve(&kv, &seq, n_toks)) goto out_kv;
    logits = xmalloc(sizeof(float) * (size_t)chunk * V);
    pos = xmalloc(sizeof(int32_t) * (size_t)n_toks);
    sq = xcalloc((size_t)n_toks, sizeof(int32_t));
    want = xmalloc(sizeof(bool) * (size_t)n_toks);
    for (int i = 0; i < n_toks; i++) {
        pos[i] = i;
        want[i] = true;
    }
    if (!(f = fopen(out_path, "wb"))) {
        err_set(&msg, ERR_INVALID, "cannot write '%s'", out_path);
        goto out_kv;
    }
    const struct kv_seq *seqs[1] = {&seq};
    for (int s = 0; s < n_toks; s += (int)chunk) {
        int n = MIN((int)chunk, n_toks - s);
        struct fwd_batch b = {n, toks + s, pos + s, sq + s, want + s, 1, seqs};
        if (fwd_run(fwd, &b, logits, &msg)) goto out_kv;
        if (fwrite(logits, sizeof(float), (size_t)n * V, f) != (size_t)n * V) {
            err_set(&msg, ERR_INVALID, "short write to '%s'", out_path);
            goto out_kv;
        }
    }
    rc = 0;
out_kv:
    if (f && fclose(f) && rc == 0) {
        fprintf(stderr, "inferd: logits: cannot write '%s'\n", out_path);
        rc = 1;
    }
    kv_seq_release(&kv, &seq);
    fwd_ctx_free(fwd);
    if (pool) tpool_free(pool);
    kv_pool_release(&kv);
    free(logits);
    free(pos);
    free(sq);
    free(want);
out_model:
    if (rc && msg.text[0]) fprintf(stderr, "inferd: logits: %s\n", msg.text);
    model_free(m);
    free(toks);
    return rc;
usage:
    free(toks);
    return 2;
}
