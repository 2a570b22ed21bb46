/*
 * fuzz_grammar_schema.c - fuzz target: the input as a schema grammar
 * (see ../grammar_fuzz.h for what runs after it compiles).
 */
#include "../grammar_fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_grammar(GRAMMAR_JSON_SCHEMA, data, size);
    return 0;
}
