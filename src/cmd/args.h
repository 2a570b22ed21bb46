/*
 * args.h - small helpers for subcommand option parsing: strict numbers and
 * token-id lists, each printing a clear message on bad input.
 */
#ifndef INFERD_CMD_ARGS_H
#define INFERD_CMD_ARGS_H

#include "inferd/inferd.h"

#include <stdbool.h>
#include <stdint.h>

/* Parses a whole string as an integer in [lo, hi]; prints
 * "inferd: --opt: ..." and returns false on failure. */
bool arg_int(const char *opt, const char *s, long lo, long hi, long *out);
bool arg_float(const char *opt, const char *s, double lo, double hi, double *out);
/* KV cache element type: f16, bf16 or f32. */
bool arg_kv(const char *opt, const char *s, enum inferd_kv_type *out);
/* "1,2,3" -> heap array (caller frees). */
bool arg_tokens(const char *opt, const char *s, int32_t **out, int *n);
/* Value of option i (argv[i+1]) or a usage message and NULL. */
const char *arg_value(int argc, char **argv, int *i);

#endif
