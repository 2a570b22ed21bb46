/*
 * grammar_fuzz.h - shared body of the grammar fuzz targets: compile the
 * input as one kind of grammar; when it compiles, drive a matcher over a
 * small vocabulary (masks, tokens, raw bytes) so that every stage after the
 * parser runs on fuzzer-made grammars too. Errors are fine; crashes, leaks
 * and sanitizer reports are not.
 */
#ifndef INFERD_TESTS_GRAMMAR_FUZZ_H
#define INFERD_TESTS_GRAMMAR_FUZZ_H

#include "../grammar_test_vocab.h"
#include "grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct grammar_vocab *fuzz_vocab(void)
{
    static struct grammar_vocab *v;
    if (v) return v;
    static const char *pieces[] = {"{\"",      "\":",    "\",", "true", "null", "12", "ab",
                                   "\xe4\xb8", "\xad\"", "  ",  "\n",   "[1",   "},"};
    v = grammar_test_vocab(0, pieces, (int)(sizeof(pieces) / sizeof(pieces[0])));
    return v;
}

static void fuzz_grammar(enum grammar_kind kind, const uint8_t *data, size_t size)
{
    if (size > 4096) return; /* compile time grows with size; keep runs fast */
    struct err_msg m;
    struct grammar *g;
    if (grammar_compile(kind, (const char *)data, size, &g, &m)) return;
    struct grammar_vocab *v = fuzz_vocab();
    uint64_t mask[(300 + 63) / 64];
    struct grammar_matcher *mt = grammar_matcher_new(g, v);
    /* walk: take the allowed token picked by the input's bytes */
    for (size_t step = 0; step < 24; step++) {
        int n = grammar_matcher_fill_mask(mt, mask);
        if (n <= 0) break; /* done, or a budget ran out (an error value, fine) */
        int pick = size ? data[step % size] % n : 0, t = -1;
        for (int i = 0; i < grammar_vocab_n(v) && t < 0; i++)
            if ((mask[i >> 6] >> (i & 63)) & 1 && pick-- == 0) t = i;
        if (t < 0) abort();
        if (!grammar_matcher_accept_token(mt, t)) {
            if (grammar_matcher_error(mt, NULL)) break; /* a budget, not a wrong mask */
            abort();                                    /* a mask must be exact */
        }
        if (grammar_matcher_is_terminated(mt)) break;
    }
    grammar_matcher_free(mt);
    /* raw bytes of the input as text to match */
    mt = grammar_matcher_new(g, NULL);
    grammar_matcher_accept_bytes(mt, data, size);
    (void)grammar_matcher_is_accepting(mt);
    grammar_matcher_free(mt);
    grammar_unref(g);
}

#endif
