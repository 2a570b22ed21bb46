/*
 * args.c - see args.h.
 */
#include "cmd/args.h"

#include "base/check.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool arg_int(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "inferd: %s: expected an integer in [%ld, %ld], got '%s'\n", opt, lo, hi,
                s);
        return false;
    }
    *out = v;
    return true;
}

bool arg_float(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "inferd: %s: expected a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return false;
    }
    *out = v;
    return true;
}

bool arg_kv(const char *opt, const char *s, enum inferd_kv_type *out)
{
    if (!strcmp(s, "f16"))
        *out = INFERD_KV_F16;
    else if (!strcmp(s, "bf16"))
        *out = INFERD_KV_BF16;
    else if (!strcmp(s, "f32"))
        *out = INFERD_KV_F32;
    else {
        fprintf(stderr, "inferd: %s: expected f16, bf16 or f32, got '%s'\n", opt, s);
        return false;
    }
    return true;
}

bool arg_tokens(const char *opt, const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr,
                    "inferd: %s: expected comma-separated token ids, bad entry #%d in '%s'\n", opt,
                    k + 1, s);
            free(ids);
            return false;
        }
        if (k == cap) ids = xrealloc(ids, sizeof(int32_t) * (size_t)(cap *= 2));
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        fprintf(stderr, "inferd: %s: no token ids given\n", opt);
        free(ids);
        return false;
    }
    *out = ids;
    *n = k;
    return true;
}

const char *arg_value(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "inferd: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}
