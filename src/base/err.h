/*
 * err.h - the one table of error codes.
 *
 * Every action in inferd returns int: 0 on success or a negative code. Codes
 * in (-4095, 0) are negated errno values (ENOENT, ENOMEM, ...); our own codes
 * start at ERR_BASE and never collide with errno. The same table maps each
 * code to a message, an HTTP status and the OpenAI / Anthropic error types, so
 * the API layer never invents its own mapping.
 *
 * Thread safety: everything here is pure or reads constant tables.
 */
#ifndef INFERD_BASE_ERR_H
#define INFERD_BASE_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum err_code {
    ERR_BASE = -10000,
    ERR_INVALID = ERR_BASE - 1,       /* bad input from outside: request, file, config */
    ERR_FORMAT = ERR_BASE - 2,        /* malformed file or frame (GGUF, peer protocol) */
    ERR_UNSUPPORTED = ERR_BASE - 3,   /* valid but not implemented (tensor type, arch) */
    ERR_NO_KV = ERR_BASE - 4,         /* no KV cache blocks left */
    ERR_OVERLOADED = ERR_BASE - 5,    /* queue full: retry later */
    ERR_QUOTA = ERR_BASE - 6,         /* tenant quota or rate limit */
    ERR_NOT_FOUND = ERR_BASE - 7,     /* unknown model / object */
    ERR_TOO_LARGE = ERR_BASE - 8,     /* body or context beyond a limit */
    ERR_PROTOCOL = ERR_BASE - 9,      /* peer broke the protocol */
    ERR_CANCELLED = ERR_BASE - 10,    /* request cancelled by its owner */
    ERR_INTERNAL = ERR_BASE - 11,     /* a bug: should never reach a user */
    ERR_UNAUTHORIZED = ERR_BASE - 12, /* missing or wrong API key */
    ERR_UNAVAILABLE = ERR_BASE - 13,  /* shutting down or at a connection limit: retry */
    ERR_CONTEXT = ERR_BASE - 14,      /* prompt (+ max_tokens) beyond the model's context */
    ERR_FORBIDDEN = ERR_BASE - 15,    /* the caller may not do this (a web origin not allowed) */
    ERR_METHOD = ERR_BASE - 16,       /* a known path, another method (HTTP 405) */
};

/* Short static text for a code ("invalid input", "no such file", ...). */
const char *err_str(int code);

/* HTTP status an API response should carry for this code. */
int err_http_status(int code);

/* The error "type" of each API's error body for this code:
 * OpenAI {"error":{"type": ...}}, Anthropic {"type":"error","error":{"type": ...}}. */
const char *err_openai_type(int code);
const char *err_anthropic_type(int code);

/* Error message buffer: functions that parse external input fill one of
 * these with a message that names the subject and the field. Caller-owned. */
struct err_msg {
    char text[512]; /* NUL-terminated; empty when nothing was set */
};

/* Formats into m (if m is non-NULL) and returns code, so parsers can write
 * `return err_set(m, ERR_FORMAT, "tensor '%s': offset out of range", name);` */
int err_set(struct err_msg *m, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
