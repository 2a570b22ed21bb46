/*
 * fuzz_grammar_sequence.c - fuzz target: the input as a sequence grammar
 * (literal text and JSON Schema pieces; see ../grammar_fuzz.h for what runs
 * after it compiles).
 */
#include "../grammar_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_grammar(GRAMMAR_SEQUENCE, data, size);
    return 0;
}
