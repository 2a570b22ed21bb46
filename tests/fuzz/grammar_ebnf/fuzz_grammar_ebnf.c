/*
 * fuzz_grammar_ebnf.c - fuzz target: the input as a ebnf grammar
 * (see ../grammar_fuzz.h for what runs after it compiles).
 */
#include "../grammar_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_grammar(GRAMMAR_EBNF, data, size);
    return 0;
}
