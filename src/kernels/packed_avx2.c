/*
 * packed_avx2.c - the avx2 level's packed quantized matmul (packed256.h):
 * vpmaddubsw + vpmaddwd.
 */
#define PK_VNNI   0
#define PK_SUFFIX avx2
#include "kernels/packed256.h"
