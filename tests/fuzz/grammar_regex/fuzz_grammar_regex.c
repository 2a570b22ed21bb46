/*
 * fuzz_grammar_regex.c - fuzz target: the input as a regex grammar
 * (see ../grammar_fuzz.h for what runs after it compiles).
 */
#include "../grammar_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_grammar(GRAMMAR_REGEX, data, size);
    return 0;
}
