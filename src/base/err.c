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
    case ERR_UNAUTHORIZED:
        return "unauthorized";
    case ERR_UNAVAILABLE:
        return "unavailable";
    case ERR_FORBIDDEN:
        return "forbidden";
    case ERR_METHOD:
        return "method not allowed";
    case ERR_CONTEXT:
        return "prompt beyond the context length";
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
    case ERR_CONTEXT: /* both APIs answer an over-long prompt with 400, not 413 */
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
    case ERR_UNAVAILABLE:
        return 503;
    case ERR_UNAUTHORIZED:
        return 401;
    case ERR_CANCELLED:
        return 499;
    case ERR_FORBIDDEN:
        return 403;
    case ERR_METHOD:
        return 405;
    default:
        return 500;
    }
}

const char *err_openai_type(int code)
{
    switch (err_http_status(code)) {
    case 400:
    case 404:
    case 405:
    case 413:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 429:
        return "rate_limit_error";
    case 503:
        return "service_unavailable_error";
    default:
        return "server_error";
    }
}

const char *err_anthropic_type(int code)
{
    switch (err_http_status(code)) {
    case 400:
    case 405:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
        return "overloaded_error";
    default:
        return "api_error";
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
