/*
 * grammar_test_vocab.h - the small vocabulary grammar tests and fuzz targets
 * run masks over: every byte from first_byte on as a token of its own, a few
 * longer pieces, and one end token "</s>" (a control token, the only
 * end-of-generation id). Byte tokens make every string reachable; pieces
 * exercise tokens that cross grammar boundaries.
 *
 * The caller owns the vocabulary (grammar_vocab_free); token bytes are
 * copied by grammar_vocab_new.
 */
#ifndef INFERD_TESTS_GRAMMAR_TEST_VOCAB_H
#define INFERD_TESTS_GRAMMAR_TEST_VOCAB_H

#include "grammar/grammar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline struct grammar_vocab *grammar_test_vocab(int first_byte, const char *const *pieces,
                                                       int n_pieces)
{
    static char bytes[256];
    int cap = 256 + n_pieces + 1, n = 0;
    const char **tok = malloc(sizeof(*tok) * (size_t)cap);
    uint32_t *len = malloc(sizeof(*len) * (size_t)cap);
    uint8_t *cls = malloc(sizeof(*cls) * (size_t)cap);
    for (int c = first_byte; c < 256; c++) {
        bytes[c] = (char)c;
        tok[n] = bytes + c;
        len[n] = 1;
        cls[n++] = GRAMMAR_TOKEN_NORMAL;
    }
    for (int i = 0; i < n_pieces; i++) {
        tok[n] = pieces[i];
        len[n] = (uint32_t)strlen(pieces[i]);
        cls[n++] = GRAMMAR_TOKEN_NORMAL;
    }
    tok[n] = "</s>";
    len[n] = 4;
    cls[n++] = GRAMMAR_TOKEN_CONTROL;
    int32_t eos = n - 1;
    struct grammar_vocab *v = grammar_vocab_new(n, tok, len, cls, &eos, 1);
    free(tok);
    free(len);
    free(cls);
    return v;
}

#endif
