/*
 * dtype.c - the type table from dtype.h.
 */
#include "base/dtype.h"

#include <strings.h>

static const struct dtype_info table[DTYPE_COUNT] = {
    [DTYPE_F32] = {"f32", 1, 4},
    [DTYPE_F16] = {"f16", 1, 2},
    [DTYPE_Q4_0] = {"q4_0", 32, 2 + 16},
    [DTYPE_Q8_0] = {"q8_0", 32, 2 + 32},
    [DTYPE_Q4_K] = {"q4_k", 256, 2 + 2 + 12 + 128},
    [DTYPE_Q5_K] = {"q5_k", 256, 2 + 2 + 12 + 32 + 128},
    [DTYPE_Q6_K] = {"q6_k", 256, 128 + 64 + 16 + 2},
    [DTYPE_Q8_K] = {"q8_k", 256, 4 + 256 + 2 * 16},
    [DTYPE_BF16] = {"bf16", 1, 2},
};

static const struct dtype_info unknown = {NULL, 0, 0};

const struct dtype_info *dtype_info(uint32_t t)
{
    if (t >= DTYPE_COUNT || !table[t].name) return &unknown;
    return &table[t];
}

bool dtype_supported(uint32_t t)
{
    return t < DTYPE_COUNT && table[t].name && t != DTYPE_Q8_K;
}

size_t dtype_row_size(enum dtype t, int64_t n)
{
    const struct dtype_info *ti = dtype_info(t);
    return (size_t)(n / ti->blck) * ti->type_size;
}

int dtype_from_name(const char *name)
{
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (table[i].name && strcasecmp(table[i].name, name) == 0) return i;
    return -1;
}
