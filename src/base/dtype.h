/*
 * dtype.h - tensor element types, numbered as in the GGUF format.
 *
 * Quantized types store blocks of BLCK elements in TYPE_SIZE bytes; a row of
 * n elements (n a multiple of the block) takes n / blck * type_size bytes.
 * The numbering is GGUF's (ggml_type), so files move between tools.
 */
#ifndef INFERD_BASE_DTYPE_H
#define INFERD_BASE_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dtype {
    DTYPE_F32 = 0,
    DTYPE_F16 = 1,
    DTYPE_Q4_0 = 2,
    DTYPE_Q8_0 = 8,
    DTYPE_Q4_K = 12,
    DTYPE_Q5_K = 13,
    DTYPE_Q6_K = 14,
    DTYPE_Q8_K = 15, /* activations only (K-quant dot products) */
    DTYPE_BF16 = 30,
    DTYPE_COUNT = 40, /* one past the largest GGUF type id we know of */
};

struct dtype_info {
    const char *name; /* "q8_0", NULL for ids we do not support */
    int blck;         /* elements per block (1 for float types) */
    size_t type_size; /* bytes per block */
};

/* NULL-named entry for unsupported / unknown ids; t may be any value. */
const struct dtype_info *dtype_info(uint32_t t);
bool dtype_supported(uint32_t t);
/* Bytes for a row of n elements; n must be a multiple of the block size. */
size_t dtype_row_size(enum dtype t, int64_t n);
/* Parses "q8_0", "f16", ... (case-insensitive); returns -1 if unknown. */
int dtype_from_name(const char *name);

#endif
