/*
 * err.c - messages and HTTP statuses for the codes in err.h.
 */
#include "base/err.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *err_str(int code)
{
    switch (code) {
    case 0:
        return "ok";
    case ERR_INVALID:
        return "invalid input";
    case ERR_FORMAT:
        return "malformed data";
    case ERR_UNSUPPORTED:
        return "not supported";
    case ERR_NO_KV:
        return "no KV cache space";
    case ERR_OVERLOADED:
        return "overloaded";
    case ERR_QUOTA:
        return "quota exceeded";
    case ERR_NOT_FOUND:
        return "not found";
    case ERR_TOO_LARGE:
        return "too large";
    case ERR_PROTOCOL:
        return "protocol error";
    case ERR_CANCELLED:
        return "cancelled";
    case ERR_INTERNAL:
        return "internal error";
    default:
        if (code < 0 && code > -4096) return strerror(-code);
        return "unknown error";
    }
}

int err_http_status(int code)
{
    switch (code) {
    case 0:
        return 200;
    case ERR_INVALID:
    case ERR_FORMAT:
        return 400;
    case ERR_NOT_FOUND:
    case -ENOENT:
        return 404;
    case ERR_TOO_LARGE:
        return 413;
    case ERR_QUOTA:
    case ERR_OVERLOADED:
        return 429;
    case ERR_UNSUPPORTED:
        return 400;
    case ERR_NO_KV:
        return 503;
    case ERR_CANCELLED:
        return 499;
    default:
        return 500;
    }
}

int err_set(struct err_msg *m, int code, const char *fmt, ...)
{
    if (m) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->text, sizeof(m->text), fmt, ap);
        va_end(ap);
    }
    return code;
}
