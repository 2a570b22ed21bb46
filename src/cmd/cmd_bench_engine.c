/*
 * cmd_bench_engine.c - `inferd bench-engine`: prefill and decode speed of the
 * engine, each printed next to this machine's physical limit measured in the
 * same run (bench/peak.h):
 *
 *   decode  : (weight bytes + KV bytes read per step) / step time, as a share
 *             of the measured memory read bandwidth (the roofline);
 *   prefill : FLOPs per second as a share of the measured peak of the
 *             instruction the weight type's kernel uses (int8 VNNI dot for
 *             quantized weights, BF16 dot for bf16, FP32 FMA for f16/f32).
 *
 * The engine runs exactly as it serves: requests through inferd_submit, steps
 * through the scheduler. Random prompts; the first run of each figure is a
 * warm-up that is not counted.
 */
#include "cmd/cmd.h"
#include "cmd/opt.h"

#include "base/check.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "bench/peak.h"
#include "engine/forward.h"
#include "inferd/inferd.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The engine's model handle wraps struct model; bench reads shapes through
 * model_load directly (a second mapping of the same file costs nothing). */

struct bench_fig {
    const char *name;  /* "pp512", "tg128", "batch16" */
    int batch;         /* concurrent sequences */
    double tok_s;      /* tokens per second */
    double limit_pct;  /* share of the physical limit */
    const char *limit; /* which limit */
};

static uint64_t rng_state = 0xbe9c4;
static int32_t rand_tok(int n_vocab)
{
    return (int32_t)(rng_next(&rng_state) % (uint64_t)n_vocab);
}

/* Submits a request of n_prompt random tokens whose first n_shared come
 * from a fixed stream (the same for every request: a shared prefix, which the
 * prefix cache serves after the first); greedy, max_tokens as given. */
static int submit_random(inferd_engine *e, int n_vocab, int n_prompt, int n_shared, int max_tokens,
                         uint64_t *id)
{
    int32_t *p = xmalloc(sizeof(int32_t) * (size_t)n_prompt);
    uint64_t shared = 0x5eed;
    for (int i = 0; i < n_prompt; i++)
        p[i] = i < n_shared ? (int32_t)(rng_next(&shared) % (uint64_t)n_vocab) : rand_tok(n_vocab);
    struct inferd_request r = {
        .prompt = p, .n_prompt = n_prompt, .max_tokens = max_tokens, .ignore_eos = true};
    inferd_sampling_default(&r.sampling);
    r.sampling.temperature = 0;
    uint64_t own;
    char err[256];
    int rc = inferd_submit(e, &r, id ? id : &own, err, sizeof(err));
    if (rc) fprintf(stderr, "inferd: bench-engine: %s\n", err);
    free(p);
    return rc;
}

static int drain(inferd_engine *e)
{
    struct inferd_event ev;
    int n = 0;
    while (inferd_poll(e, &ev))
        n++;
    return n;
}

/* Runs steps until no work is left; returns seconds. */
static double run_all(inferd_engine *e)
{
    double t0 = time_now_s();
    while (inferd_engine_step(e) > 0)
        drain(e);
    return time_now_s() - t0;
}

/* Prefill of n tokens in one sequence: seconds for the prefill step(s). */
static double time_prefill(inferd_engine *e, int n_vocab, int n)
{
    if (submit_random(e, n_vocab, n, 0, 1, NULL)) return -1;
    return run_all(e);
}

/* Drains the events, noting each of the B requests' generated count; returns
 * how many produced their first token. */
static int note_tokens(inferd_engine *e, const uint64_t *ids, int B, int *gen)
{
    struct inferd_event ev;
    int first = 0;
    while (inferd_poll(e, &ev))
        for (int i = 0; i < B; i++)
            if (ev.request == ids[i] && ev.token >= 0) {
                first += gen[i] == 0;
                gen[i] = ev.n_generated;
            }
    return first;
}

/* Decode at batch B: B sequences with prompts of `prompt` tokens (the first
 * `shared` of them common to all); seconds per step over `steps` steps in
 * which every one of the B sequences decodes, and the mean context length
 * seen. The sequences are cancelled after the timed steps: the first ones
 * started decoding while the others were still being prefilled, so they are
 * given room to go on rather than a common length. */
static double time_decode(inferd_engine *e, int n_vocab, int max_ctx, int B, int prompt, int shared,
                          int steps, double *mean_ctx)
{
    uint64_t ids[1024];
    int gen[1024] = {0}; /* tokens generated so far per sequence */
    for (int i = 0; i < B; i++)
        if (submit_random(e, n_vocab, prompt, shared, max_ctx - prompt, &ids[i])) return -1;
    /* Prefill everything (step until every sequence has its first token),
     * then one decode step untimed. */
    for (int n_started = 0; n_started < B;) {
        if (inferd_engine_step(e) <= 0) return -1;
        n_started += note_tokens(e, ids, B, gen);
    }
    inferd_engine_step(e);
    note_tokens(e, ids, B, gen);
    double ctx0 = 0;
    for (int i = 0; i < B; i++)
        ctx0 += prompt + gen[i];
    double t0 = time_now_s();
    bool whole = true;
    for (int s = 0; s < steps; s++) {
        whole &= inferd_engine_step(e) == B;
        drain(e);
    }
    double dt = time_now_s() - t0;
    for (int i = 0; i < B; i++)
        inferd_cancel(e, ids[i]);
    run_all(e);
    *mean_ctx = ctx0 / B + steps / 2.0;
    return whole ? dt / steps : -1;
}

int cmd_bench_engine(int argc, char **argv)
{
    const char *model_path = NULL;
    long threads = 0, pp = 512, tg = 128, depth = 0, shared = 0, bsteps = 32;
    bool json = false;
    int batches[8] = {4, 16, 64}, n_batches = 3;
    struct cmd_ints batch_list = {0};
    enum inferd_kv_type kvt = INFERD_KV_F16;
    const struct cmd_opt opts[] = {
        CMD_OPT_STR("model", 'm', "FILE", "GGUF model (required)", &model_path),
        CMD_OPT_INT("threads", 0, "N", "compute threads (default: all cores)", &threads, 1, 256),
        CMD_OPT_INT("pp", 0, "N", "prompt tokens of the prefill figure (default 512)", &pp, 1,
                    16384),
        CMD_OPT_INT("tg", 0, "N", "decode steps of the batch-1 figure (default 128)", &tg, 2,
                    16384),
        CMD_OPT_INTS("batches", 0, "B,B,..",
                     "batch sizes of the decode figures (default 4,16,64;\n"
                     "at most 8, each clamped to [1, 1024])",
                     &batch_list, 0, INT32_MAX),
        CMD_OPT_INT("depth", 0, "N",
                    "decode tests start from N-token contexts (attention over\n"
                    "a served conversation's history; default: 1-16 tokens)",
                    &depth, 1, 131072),
        CMD_OPT_INT("shared-prefix", 0, "N",
                    "the first N tokens of those contexts are the same in\n"
                    "every sequence (a shared system prompt, held once by the\n"
                    "prefix cache); N <= depth",
                    &shared, 0, 131072),
        CMD_OPT_INT("steps", 0, "N",
                    "decode steps timed per batch size (default 32; more\n"
                    "steps average out a noisy machine)",
                    &bsteps, 2, 16384),
        CMD_OPT_ENUM("kv", 0, NULL, "KV cache type (default f16)", &kvt, cmd_kv_types),
        CMD_OPT_FLAG("json", 0, "print the figures as one JSON object", &json),
        CMD_OPT_END,
    };
    const struct cmd_spec spec = {
        .name = "bench-engine",
        .synopsis = "-m MODEL [options]",
        .about = "Prefill and decode speed, each as a share of this machine's limit measured in\n"
                 "the same run.",
        .opts = opts,
    };
    int argi;
    enum cmd_opt_result pr = cmd_opt_parse(&spec, argc, argv, &argi);
    if (batch_list.v) {
        n_batches = MIN(batch_list.n, 8);
        for (int k = 0; k < n_batches; k++)
            batches[k] = MAX(1, MIN(batch_list.v[k], 1024));
        free(batch_list.v);
    }
    if (pr != CMD_OPT_OK) return cmd_opt_exit(pr);
    if (cmd_opt_operands_max(&spec, argc, argv, argi, 0)) return CMD_EXIT_USAGE;
    if (!model_path) return cmd_usage_error(&spec, "-m MODEL is required");
    if (shared > depth)
        return cmd_usage_error(&spec, "--shared-prefix %ld exceeds --depth %ld", shared, depth);

    char err[512];
    inferd_model *im;
    if (inferd_model_load(model_path, &im, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot load model '%s': %s\n", model_path, err);
        return 1;
    }
    struct err_msg msg = {{0}};
    struct model *m;
    if (model_load(model_path, &m, &msg)) {
        fprintf(stderr, "inferd: cannot load model '%s': %s\n", model_path, msg.text);
        inferd_model_free(im);
        return 1;
    }
    const struct model_hparams *hp = &m->hp;
    int max_batch = 1;
    for (int k = 0; k < n_batches; k++)
        max_batch = MAX(max_batch, batches[k]);

    struct inferd_engine_config cfg;
    inferd_engine_config_default(&cfg);
    cfg.n_threads = (int)threads;
    cfg.kv_type = kvt;
    /* Prompts in chunks that fill the step: the first sequences of a decode
     * test decode while the others are prefilled, for about
     * max_batch * depth / budget steps, which max_ctx leaves room for. */
    cfg.token_budget = (int)MAX(pp, MAX(max_batch, 512));
    cfg.prefill_step_ratio = -1;
    cfg.max_seqs = max_batch;
    cfg.max_ctx = (int)MAX(pp + 2, MAX(depth, 16) + MAX(tg, bsteps) + 8 +
                                       max_batch * MAX(depth, 16) / cfg.token_budget);
    cfg.kv_blocks = max_batch * (cfg.max_ctx / 16 + 2) + (int)pp / 16 + 4;
    inferd_engine *e;
    if (inferd_engine_new(im, &cfg, &e, err, sizeof(err))) {
        fprintf(stderr, "inferd: cannot create engine: %s\n", err);
        model_free(m);
        inferd_model_free(im);
        return 1;
    }
    int nth = threads ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);

    /* Limits on a pool of the same size, while the engine's pool sleeps:
     * once before and once after the engine figures, keeping the higher of
     * each (the stricter limit), since a shared machine can read low. */
    struct peak pk;
    struct tpool *pool = tpool_new(nth);
    _Static_assert((int)PEAK_LEVEL_AVX512 == (int)KERN_ISA_AVX512 &&
                       (int)PEAK_LEVEL_AVXVNNI == (int)KERN_ISA_AVXVNNI,
                   "peak levels are numbered as the kernel levels");
    const enum peak_level level = (enum peak_level)kern_isa();
    peak_measure(pool, level, &pk);

    const int V = hp->n_vocab;
    struct fig_raw {
        double dt, bytes_or_flops;
    } raw[12];
    const double kv_elt = kvt == INFERD_KV_F32 ? 4 : 2;
    const double kv_per_pos = (double)hp->n_layer * 2 * hp->n_head_kv * hp->head_dim * kv_elt;
    const double w_bytes = (double)fwd_weight_bytes(m, true);
    double body_params = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *ts[] = {L->wq,     L->wk,   L->wv,    L->wo,
                                          L->w_gate, L->w_up, L->w_down};
        for (size_t i = 0; i < ARRAY_LEN(ts); i++)
            body_params += (double)ts[i]->ne[0] * ts[i]->ne[1];
    }
    /* The weight type that holds most of the body's bytes names the model
     * and picks the limit; a file that mixes types (a q4_K file keeps rows
     * that are not a multiple of 256 in q4_0) lists them all. */
    double type_bytes[DTYPE_COUNT] = {0};
    for (int il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *ts[] = {L->wq,     L->wk,   L->wv,    L->wo,
                                          L->w_gate, L->w_up, L->w_down};
        for (size_t i = 0; i < ARRAY_LEN(ts); i++)
            type_bytes[ts[i]->type] += (double)ts[i]->size;
    }
    enum dtype wt = m->layers[0].w_up->type;
    double body_bytes = 0;
    for (int t = 0; t < DTYPE_COUNT; t++) {
        body_bytes += type_bytes[t];
        if (type_bytes[t] > type_bytes[wt]) wt = (enum dtype)t;
    }
    char mix[128] = "";
    for (int t = 0, n = 0; t < DTYPE_COUNT && n < (int)sizeof(mix); t++)
        if (type_bytes[t] > 0)
            n += snprintf(mix + n, sizeof(mix) - (size_t)n, "%s%s %.0f%%", n ? ", " : "",
                          dtype_info((enum dtype)t)->name, 100 * type_bytes[t] / body_bytes);
    /* the limit of the instruction the level's kernels use for that type */
    const bool float_w =
        wt == DTYPE_F32 || wt == DTYPE_F16 || (wt == DTYPE_BF16 && level != PEAK_LEVEL_AVX512);
    const char *peak_name = float_w ? "fp32-fma" : wt == DTYPE_BF16 ? "bf16-dot" : "int8-dot";
    const char *peak_insn = float_w            ? pk.fma_insn
                            : wt == DTYPE_BF16 ? "zmm vdpbf16ps"
                                               : pk.int8_insn;

    /* Bandwidth on a shared machine drifts by 2x within minutes: each
     * decode figure is judged against a read probe taken right before and
     * right after it (the higher of the two). */
    const size_t probe_bytes = (size_t)512 << 20;
    void *probe = peak_read_buffer(probe_bytes);
    double local_bw[12] = {0};
    struct bench_fig figs[12];
    int n_figs = 0;
    char names[12][24];

    /* Prefill: warm-up (pages the weights in), then the best of 3. */
    time_prefill(e, V, (int)pp);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double dt = time_prefill(e, V, (int)pp);
        if (dt > 0 && dt < best) best = dt;
    }
    double attn_flops =
        (double)hp->n_layer * hp->n_head * hp->head_dim * 2 * 2 * ((double)pp * (pp + 1) / 2);
    double flops = 2 * body_params * pp + 2.0 * V * hp->n_embd + attn_flops;
    snprintf(names[n_figs], sizeof(names[0]), "pp%ld", pp);
    figs[n_figs] = (struct bench_fig){names[n_figs], 1, pp / best, 0, peak_name};
    raw[n_figs++] = (struct fig_raw){best, flops};

    /* Decode at batch 1 and the batch sizes asked for. */
    int bsz[9] = {1};
    for (int k = 0; k < n_batches; k++)
        bsz[k + 1] = batches[k];
    for (int k = 0; k <= n_batches; k++) {
        int B = bsz[k], steps = k == 0 ? (int)tg : (int)bsteps;
        double mean_ctx;
        if (k == 0) time_decode(e, V, cfg.max_ctx, 1, 1, 0, 8, &mean_ctx); /* warm-up */
        double bw0 = peak_read_gbs(pool, probe, probe_bytes, 3);
        int prompt = depth > 0 ? (int)depth : k == 0 ? 1 : 16;
        double dt = time_decode(e, V, cfg.max_ctx, B, prompt, depth > 0 ? (int)shared : 0, steps,
                                &mean_ctx);
        double bw1 = peak_read_gbs(pool, probe, probe_bytes, 3);
        if (dt <= 0) {
            fprintf(stderr, "inferd: bench-engine: decode at batch %d could not run\n", B);
            break;
        }
        double bytes = w_bytes + B * mean_ctx * kv_per_pos;
        local_bw[n_figs] = MAX(bw0, bw1);
        if (k == 0)
            snprintf(names[n_figs], sizeof(names[0]), depth ? "tg%ld@d%ld" : "tg%ld", tg, depth);
        else if (shared)
            snprintf(names[n_figs], sizeof(names[0]), "decode-b%d@d%ld/%ld", B, depth, shared);
        else
            snprintf(names[n_figs], sizeof(names[0]), depth ? "decode-b%d@d%ld" : "decode-b%d", B,
                     depth);
        figs[n_figs] = (struct bench_fig){names[n_figs], B, B / dt, 0, "mem-read"};
        raw[n_figs++] = (struct fig_raw){dt, bytes};
    }

    struct peak pk2;
    peak_measure(pool, level, &pk2);
    tpool_free(pool);
    free(probe);
    pk.read_gbs = MAX(pk.read_gbs, pk2.read_gbs);
    pk.fma_gflops = MAX(pk.fma_gflops, pk2.fma_gflops);
    pk.bf16_gflops = MAX(pk.bf16_gflops, pk2.bf16_gflops);
    pk.int8_gops = MAX(pk.int8_gops, pk2.int8_gops);
    const double peak_ops = float_w            ? pk.fma_gflops
                            : wt == DTYPE_BF16 ? pk.bf16_gflops
                                               : pk.int8_gops;
    for (int i = 0; i < n_figs; i++) {
        if (!strcmp(figs[i].limit, "mem-read"))
            figs[i].limit_pct = 100 * raw[i].bytes_or_flops / (local_bw[i] * 1e9) / raw[i].dt;
        else
            figs[i].limit_pct = 100 * raw[i].bytes_or_flops / raw[i].dt * 1e-9 / peak_ops;
    }

    if (json) {
        printf("{\"model\":\"%s\",\"weight_type\":\"%s\",\"weight_types\":\"%s\","
               "\"threads\":%d,\"isa\":\"%s\",\"depth\":%ld,\"kv_bytes_per_token\":%.0f,",
               m->name, dtype_info(wt)->name, mix, nth, kern_isa_name(kern_isa()), depth,
               (double)kv_per_pos);
        printf("\"limits\":{\"read_gbs\":%.2f,\"fma_gflops\":%.1f,\"fma_insn\":\"%s\","
               "\"bf16_gflops\":%.1f,\"int8_gops\":%.1f,\"int8_insn\":\"%s\"},"
               "\"compute_limit\":\"%s\",\"weight_bytes\":%.0f,\"figures\":[",
               pk.read_gbs, pk.fma_gflops, pk.fma_insn, pk.bf16_gflops, pk.int8_gops, pk.int8_insn,
               peak_insn, w_bytes);
        for (int i = 0; i < n_figs; i++)
            printf("%s{\"name\":\"%s\",\"batch\":%d,\"tokens_per_s\":%.2f,\"pct_of_limit\":%.1f,"
                   "\"limit\":\"%s\",\"limit_value\":%.1f}",
                   i ? "," : "", figs[i].name, figs[i].batch, figs[i].tok_s, figs[i].limit_pct,
                   figs[i].limit, local_bw[i] > 0 ? local_bw[i] : peak_ops);
        printf("]}\n");
    } else {
        printf("model %s (%s weights: %s of the body; %.0f MB read per decode step), %d threads, "
               "kernels %s\n",
               m->name, dtype_info(wt)->name, mix, w_bytes / 1e6, nth, kern_isa_name(kern_isa()));
        printf("limits measured now: memory read %.1f GB/s | fp32 fma (%s) %.0f GFLOP/s | ",
               pk.read_gbs, pk.fma_insn, pk.fma_gflops);
        if (pk.bf16_gflops > 0) printf("bf16 dot %.0f GFLOP/s | ", pk.bf16_gflops);
        printf("int8 dot (%s) %.0f GOP/s\n", pk.int8_insn, pk.int8_gops);
        printf("compute figures are judged by: %s (%s)\n", peak_name, peak_insn);
        printf("%-12s %6s %12s %10s  %s\n", "test", "batch", "tokens/s", "% limit", "limit");
        for (int i = 0; i < n_figs; i++) {
            if (local_bw[i] > 0)
                printf("%-12s %6d %12.1f %9.1f%%  %s (%.1f GB/s probed around this test)\n",
                       figs[i].name, figs[i].batch, figs[i].tok_s, figs[i].limit_pct, figs[i].limit,
                       local_bw[i]);
            else
                printf("%-12s %6d %12.1f %9.1f%%  %s (%.0f G/s)\n", figs[i].name, figs[i].batch,
                       figs[i].tok_s, figs[i].limit_pct, figs[i].limit, peak_ops);
        }
    }
    inferd_engine_free(e);
    model_free(m);
    inferd_model_free(im);
    return 0;
}
