/*
 * fuzz_hf_tokenizer.c - fuzz target for the Hugging Face tokenizer import
 * (tokenizer.json + tokenizer_config.json -> GGUF metadata), an untrusted
 * input of `inferd model make`.
 *
 * Input: tokenizer.json bytes, a NUL, tokenizer_config.json bytes (no NUL:
 * config "{}"). The files go to a scratch directory made once per process;
 * each input is loaded with detection and with a --pre override and, when it
 * loads, written into a GGUF writer, so every path that reads the JSON runs.
 */
#include "gguf/gguf.h"
#include "model/hf_tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];

static void put(const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void cleanup(void)
{
    char path[512];
    const char *names[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "/tmp/inferd-fuzz-hf-%d", (int)getpid());
        if (mkdir(dir, 0700) && access(dir, W_OK)) abort();
        atexit(cleanup);
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t n1 = nul ? (size_t)(nul - data) : size;
    put("tokenizer.json", data, n1);
    if (nul)
        put("tokenizer_config.json", nul + 1, size - n1 - 1);
    else
        put("tokenizer_config.json", "{}", 2);

    const struct hf_tokenizer_opts with_pre = {.pre = "fuzz", .min_tokens = 8};
    const struct hf_tokenizer_opts *opts[2] = {NULL, &with_pre};
    for (int i = 0; i < 2; i++) {
        struct hf_tokenizer tok;
        struct err_msg msg = {{0}};
        if (hf_tokenizer_load(dir, opts[i], &tok, &msg) == 0) {
            struct gguf_writer *w = gguf_writer_new();
            hf_tokenizer_to_gguf(&tok, w);
            gguf_writer_free(w);
        } else if (!msg.text[0]) {
            abort(); /* every failure must say why */
        }
        hf_tokenizer_release(&tok);
    }
    return 0;
}
