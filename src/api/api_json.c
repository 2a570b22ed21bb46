/*
 * api_json.c - typed field access for the request decoders (api.h).
 *
 * Every getter checks the JSON type and range of one optional field and, on
 * a mismatch, returns ERR_INVALID with a message "field: expected ..." and
 * the field name in r->bad_param, so each API can put it in its error body.
 * Absent fields and JSON null leave the output untouched (the caller's
 * default stands), which is what every API documents for optional fields.
 */
#include "api/api.h"

#include "base/check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int api_fail(struct api_request *r, struct err_msg *msg, const char *param, const char *fmt, ...)
{
    snprintf(r->bad_param, sizeof(r->bad_param), "%s", param);
    char text[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return err_set(msg, ERR_INVALID, "%s: %s", param, text);
}

void api_request_release(struct api_request *r)
{
    free(r->bias);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    json_decref(r->messages);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        i32vec_release(&r->prompts[i].ids);
    }
    free(r->prompts);
    free(r->previous_response_id);
    free(r->instructions);
    json_decref(r->input_items);
    json_decref(r->metadata);
    free(r->user);
    free(r->grammar_src);
    json_decref(r->tools);
    free(r->tool_name);
    json_decref(r->text_format);
    memset(r, 0, sizeof(*r));
}

size_t api_json_longest_string(const char *body, size_t len)
{
    size_t longest = 0;
    const char *p = body, *end = body + len;
    for (;;) {
        p = memchr(p, '"', (size_t)(end - p));
        if (!p) return longest;
        p++;
        size_t n = 0;
        while (p < end && *p != '"') {
            if (*p != '\\') {
                /* a run of plain bytes at once */
                const char *q = p;
                while (q < end && *q != '"' && *q != '\\')
                    q++;
                n += (size_t)(q - p);
                p = q;
                continue;
            }
            if (p + 1 >= end) return MAX(longest, n);
            if (p[1] != 'u') {
                n += 1;
                p += 2;
                continue;
            }
            unsigned cp = 0;
            for (int k = 2; k < 6 && p + k < end; k++) {
                char c = p[k];
                cp = cp * 16 + (unsigned)(c >= '0' && c <= '9'   ? c - '0'
                                          : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                 : 0);
            }
            n += cp < 0x80 ? 1 : cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF) ? 2 : 3;
            p += 6;
        }
        longest = MAX(longest, n);
        if (p >= end) return longest;
        p++; /* the closing quote */
    }
}

int api_parse_body(const char *body, size_t len, json_t **root, struct api_request *r,
                   struct err_msg *msg)
{
    json_error_t jerr;
    /* Rejecting duplicate keys keeps "which value counts" out of question. */
    *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root)
        return api_fail(r, msg, "body", "invalid JSON at line %d column %d: %s", jerr.line,
                        jerr.column, jerr.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return api_fail(r, msg, "body", "expected a JSON object");
    }
    return 0;
}

static bool absent(const json_t *v)
{
    return !v || json_is_null(v);
}

int api_get_number(const json_t *o, const char *key, double lo, double hi, double *out,
                   struct api_request *r, struct err_msg *msg)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    if (!json_is_number(v)) return api_fail(r, msg, key, "expected a number");
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return api_fail(r, msg, key, "%g is out of range [%g, %g]", d, lo, hi);
    *out = d;
    return 0;
}

int api_get_int(const json_t *o, const char *key, long lo, long hi, int *out, struct api_request *r,
                struct err_msg *msg)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    if (!json_is_integer(v)) return api_fail(r, msg, key, "expected an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_fail(r, msg, key, "%lld is out of range [%ld, %ld]", (long long)x, lo, hi);
    *out = (int)x;
    return 0;
}

int api_get_bool(const json_t *o, const char *key, bool *out, struct api_request *r,
                 struct err_msg *msg)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    if (!json_is_boolean(v)) return api_fail(r, msg, key, "expected true or false");
    *out = json_is_true(v);
    return 0;
}

int api_get_cache_class(const json_t *root, struct api_request *r, struct err_msg *msg)
{
    const char *key = "cache_ttl_class";
    const json_t *v = json_object_get(root, key);
    if (absent(v)) return 0;
    if (!json_is_string(v)) return api_fail(r, msg, key, "expected a string");
    const char *c = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n >= sizeof(r->cache_ttl_class))
        return api_fail(r, msg, key, "expected a class name of 1 to %zu bytes",
                        sizeof(r->cache_ttl_class) - 1);
    for (size_t i = 0; i < n; i++)
        if (!((c[i] >= 'a' && c[i] <= 'z') || (c[i] >= 'A' && c[i] <= 'Z') ||
              (c[i] >= '0' && c[i] <= '9') || c[i] == '_' || c[i] == '-'))
            return api_fail(r, msg, key, "class names use letters, digits, '_' and '-'");
    memcpy(r->cache_ttl_class, c, n + 1);
    return 0;
}

int api_get_string(const json_t *o, const char *key, char **out, struct api_request *r,
                   struct err_msg *msg)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    if (!json_is_string(v)) return api_fail(r, msg, key, "expected a string");
    free(*out);
    *out = xstrdup(json_string_value(v));
    return 0;
}

int api_get_stop(const json_t *o, const char *key, int max, struct api_request *r,
                 struct err_msg *msg)
{
    const json_t *v = json_object_get(o, key);
    if (absent(v)) return 0;
    CHECK(max <= API_MAX_STOP);
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return api_fail(r, msg, key, "must not be empty");
        r->stop[r->n_stop++] = xstrdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) return api_fail(r, msg, key, "expected a string or array of strings");
    if ((int)json_array_size(v) > max)
        return api_fail(r, msg, key, "at most %d stop sequences, got %zu", max, json_array_size(v));
    size_t i;
    const json_t *s;
    json_array_foreach(v, i, s)
    {
        if (!json_is_string(s) || json_string_length(s) == 0) {
            char p[64];
            snprintf(p, sizeof(p), "%s[%zu]", key, i);
            return api_fail(r, msg, p, "expected a non-empty string");
        }
        r->stop[r->n_stop++] = xstrdup(json_string_value(s));
    }
    return 0;
}

int api_content_text(const json_t *content, const char *path, char **out, struct api_request *r,
                     struct err_msg *msg)
{
    if (json_is_string(content)) {
        *out = xstrdup(json_string_value(content));
        return 0;
    }
    if (!json_is_array(content))
        return api_fail(r, msg, path, "expected a string or an array of text parts");
    struct buf b = {0};
    size_t i;
    const json_t *part;
    json_array_foreach(content, i, part)
    {
        char p[128];
        snprintf(p, sizeof(p), "%s[%zu]", path, i);
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        if (!json_is_object(part) || !type) {
            buf_release(&b);
            return api_fail(r, msg, p, "expected an object with a 'type'");
        }
        if (strcmp(type, "text") && strcmp(type, "input_text") && strcmp(type, "output_text")) {
            buf_release(&b);
            return api_fail(r, msg, p, "content type '%s' is not supported (text only)", type);
        }
        if (!json_is_string(text)) {
            buf_release(&b);
            return api_fail(r, msg, p, "'text' must be a string");
        }
        buf_append(&b, json_string_value(text), json_string_length(text));
    }
    *out = xstrdup(buf_str(&b));
    buf_release(&b);
    return 0;
}
