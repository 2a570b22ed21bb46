/*
 * kernels_avxvnni.c - what the avxvnni level (AVX2 + AVX-VNNI) runs in
 * place of the avx2 level's kernels: the int8 dot products that 256-bit
 * vpdpbusd does in one instruction where AVX2 needs vpmaddubsw + vpmaddwd.
 * Everything not set here is the avx2 level's (dispatch.c builds the table).
 * The arithmetic is the canonical one (kernels_impl.h): this level gives the
 * scalar reference's bits.
 */
#include "kernels/kernels_impl.h"

const struct kern__ops kern__ops_avxvnni_delta = {
    /* dispatch.c puts kern__matmul_packed_avxvnni_evex in its place on
     * CPUs with AVX-512 VNNI but not AVX-VNNI */
    .matmul_packed = kern__matmul_packed_avxvnni,
    .packed = KERN__PACKED256_TYPES,
};
