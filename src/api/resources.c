/*
 * resources.c - models and input-item lists (resources.h), and the path and
 * query parsing of their routes.
 *
 * Shapes: OpenAI's API reference (model, list; responses input_items, a
 * cursor page of items) and Anthropic's (ModelInfo, its list page). Paths and
 * queries come from the network: percent-decoding refuses malformed escapes
 * and NUL bytes, lengths are bounded by the caller's buffers, and every
 * parameter error names the parameter.
 *
 * Input items are rebuilt from the stored conversation (chat-shaped
 * messages, what previous_response_id continues), so nothing extra is
 * stored per response; their ids are a function of (response id, position),
 * which keeps `after` cursors valid across calls.
 */
#include "api/resources.h"

#include "base/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------- models */

json_t *api_model_object(enum api_kind kind, const struct api_model_info *m)
{
    if (kind == API_MESSAGES) {
        char at[32];
        time_t t = (time_t)m->created;
        struct tm tm;
        if (!gmtime_r(&t, &tm) || !strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm))
            snprintf(at, sizeof(at), "1970-01-01T00:00:00Z");
        /* the answer needs one token of the context at least */
        return json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:s,s:n,s:n,s:n,s:n}", "type", "model", "id",
                         m->id, "display_name", m->display_name ? m->display_name : m->id,
                         "created_at", at, "max_input_tokens", m->context_length, "max_tokens",
                         m->context_length > 1 ? m->context_length - 1 : 1, "lifecycle", "active",
                         "capabilities", "line", "deprecated_at", "retires_at");
    }
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", m->id, "object", "model", "created",
                          (json_int_t)m->created, "owned_by", m->owned_by ? m->owned_by : "inferd",
                          "context_length", m->context_length);
    if (m->description) json_object_set_new(o, "description", json_string(m->description));
    return o;
}

json_t *api_models_list(enum api_kind kind, const struct api_model_info *models, int n)
{
    json_t *data = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(data, api_model_object(kind, &models[i]));
    if (kind != API_MESSAGES) return json_pack("{s:s,s:o}", "object", "list", "data", data);
    return json_pack("{s:o,s:b,s:o,s:o}", "data", data, "has_more", 0, "first_id",
                     n ? json_string(models[0].id) : json_null(), "last_id",
                     n ? json_string(models[n - 1].id) : json_null());
}

int api_model_find(const struct api_model_info *models, int n, const char *id, struct err_msg *msg)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(models[i].id, id)) return i;
    return err_set(msg, ERR_NOT_FOUND, "model '%.200s' does not exist; this server serves '%s'", id,
                   n ? models[0].id : "");
}

/* ---------------------------------------------------------- url parts */

static int hex(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..len) into out (n bytes, NUL-terminated); plus: '+'
 * reads as a space (query strings). False on a bad escape, a NUL byte, or
 * no room. */
static bool url_decode(const char *s, size_t len, bool plus, char *out, size_t n)
{
    size_t o = 0;
    if (n == 0) return false;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 2 < len ? hex(s[i + 1]) : -1;
            int lo = i + 2 < len ? hex(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) return false;
            c = hi * 16 + lo;
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == 0 || o + 1 >= n) return false;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return true;
}

bool api_path_match(const char *path, const char *prefix, const char *suffix, char *id, size_t n)
{
    size_t lp = strlen(prefix), ls = strlen(suffix), l = strlen(path);
    if (l <= lp + ls || strncmp(path, prefix, lp) || strcmp(path + l - ls, suffix)) return false;
    const char *seg = path + lp;
    size_t len = l - lp - ls;
    if (memchr(seg, '/', len)) return false;
    return url_decode(seg, len, false, id, n);
}

/* ---------------------------------------------------------- input items */

static int query_fail(struct api_items_query *q, struct err_msg *msg, const char *param,
                      const char *what)
{
    snprintf(q->bad_param, sizeof(q->bad_param), "%s", param);
    return err_set(msg, ERR_INVALID, "%s: %s", param, what);
}

int api_input_items_query(const char *query, struct api_items_query *q, struct err_msg *msg)
{
    memset(q, 0, sizeof(*q));
    q->limit = 20;
    const char *p = query ? query : "";
    while (*p) {
        size_t len = strcspn(p, "&");
        const char *eq = memchr(p, '=', len);
        size_t lk = eq ? (size_t)(eq - p) : len;
        char key[32], val[256];
        bool known_key = url_decode(p, lk, true, key, sizeof(key));
        if (known_key) {
            const char *v = eq ? eq + 1 : p + len;
            size_t lv = (size_t)(p + len - v);
            bool is_limit = !strcmp(key, "limit"), is_order = !strcmp(key, "order");
            bool is_after = !strcmp(key, "after");
            if ((is_limit || is_order || is_after) && !url_decode(v, lv, true, val, sizeof(val)))
                return query_fail(q, msg, key, "malformed or too long");
            if (is_limit) {
                char *end;
                long x = strtol(val, &end, 10);
                if (!*val || *end || x < 1 || x > 100)
                    return query_fail(q, msg, "limit", "expected an integer in [1, 100]");
                q->limit = (int)x;
            } else if (is_order) {
                if (strcmp(val, "asc") && strcmp(val, "desc"))
                    return query_fail(q, msg, "order", "expected \"asc\" or \"desc\"");
                q->asc = !strcmp(val, "asc");
            } else if (is_after) {
                if (strlen(val) >= sizeof(q->after))
                    return query_fail(q, msg, "after", "expected an item id");
                snprintf(q->after, sizeof(q->after), "%s", val);
            }
            /* include / include[] name extra data inferd's items never
             * carry; any other parameter is ignored as an unknown field is */
        }
        p += len;
        if (*p == '&') p++;
    }
    return 0;
}

static json_t *text_part(const char *type, const json_t *text)
{
    json_t *part = json_pack("{s:s,s:O}", "type", type, "text", text);
    if (!strcmp(type, "output_text")) json_object_set_new(part, "annotations", json_array());
    return part;
}

/* Appends the items of one stored message (chat shape) to items; false
 * when it is not a message this server stores. */
static bool message_items(const json_t *m, json_t *items)
{
    const char *role = json_string_value(json_object_get(m, "role"));
    const json_t *content = json_object_get(m, "content");
    if (!role || (content && !json_is_string(content) && !json_is_null(content))) return false;
    if (!strcmp(role, "tool")) {
        const json_t *id = json_object_get(m, "tool_call_id");
        if (!json_is_string(id) || !json_is_string(content)) return false;
        json_array_append_new(items,
                              json_pack("{s:s,s:O,s:O,s:s}", "type", "function_call_output",
                                        "call_id", id, "output", content, "status", "completed"));
        return true;
    }
    bool assistant = !strcmp(role, "assistant");
    const json_t *calls = json_object_get(m, "tool_calls");
    if (json_is_string(content) && (json_string_length(content) || !json_is_array(calls))) {
        json_t *item = json_pack("{s:s,s:s,s:[o],s:s}", "type", "message", "role", role, "content",
                                 text_part(assistant ? "output_text" : "input_text", content),
                                 "status", "completed");
        json_array_append_new(items, item);
    }
    if (!assistant || !calls) return true;
    if (!json_is_array(calls)) return false;
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c)
    {
        const json_t *fn = json_object_get(c, "function");
        const json_t *id = json_object_get(c, "id"), *name = json_object_get(fn, "name");
        const json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args)) return false;
        json_array_append_new(items, json_pack("{s:s,s:O,s:O,s:O,s:s}", "type", "function_call",
                                               "call_id", id, "name", name, "arguments", args,
                                               "status", "completed"));
    }
    return true;
}

int api_input_items(const char *response_id, const char *conversation, struct api_items_query *q,
                    json_t **out, struct err_msg *msg)
{
    *out = NULL;
    json_t *conv = json_loads(conversation ? conversation : "", 0, NULL);
    json_t *items = json_array();
    int rc = 0;
    size_t n_msgs = json_array_size(conv);
    /* the last message is the response's own answer, not its input */
    const json_t *last = json_array_get(conv, n_msgs - 1);
    const char *last_role = json_string_value(json_object_get(last, "role"));
    if (last_role && !strcmp(last_role, "assistant")) n_msgs--;
    bool ok = json_is_array(conv);
    for (size_t i = 0; ok && i < n_msgs; i++)
        ok = message_items(json_array_get(conv, i), items);
    if (!ok) {
        rc = err_set(msg, ERR_INTERNAL, "stored conversation of '%.100s' is unreadable",
                     response_id);
        goto out;
    }
    const char *u = strchr(response_id, '_');
    const char *tail = u ? u + 1 : response_id;
    size_t n = json_array_size(items);
    for (size_t k = 0; k < n; k++) {
        json_t *it = json_array_get(items, k);
        const char *type = json_string_value(json_object_get(it, "type"));
        const char *prefix = !strcmp(type, "message")         ? "msg"
                             : !strcmp(type, "function_call") ? "fc"
                                                              : "fco";
        char id[192];
        snprintf(id, sizeof(id), "%s_%.120s_%zu", prefix, tail, k);
        json_object_set_new(it, "id", json_string(id));
    }
    /* position p of the page in the chosen order is item at(p) */
    size_t start = 0;
    if (q->after[0]) {
        size_t p = 0;
        while (p < n) {
            size_t k = q->asc ? p : n - 1 - p;
            if (!strcmp(json_string_value(json_object_get(json_array_get(items, k), "id")),
                        q->after))
                break;
            p++;
        }
        if (p == n) {
            snprintf(q->bad_param, sizeof(q->bad_param), "after");
            rc = err_set(msg, ERR_INVALID, "after: no input item '%.100s' in response '%.100s'",
                         q->after, response_id);
            goto out;
        }
        start = p + 1;
    }
    json_t *data = json_array();
    size_t p = start;
    for (; p < n && p - start < (size_t)q->limit; p++)
        json_array_append(data, json_array_get(items, q->asc ? p : n - 1 - p));
    size_t got = json_array_size(data);
    json_t *first = got ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *lastid = got ? json_object_get(json_array_get(data, got - 1), "id") : NULL;
    *out = json_pack("{s:s,s:o,s:o,s:o,s:b}", "object", "list", "data", data, "first_id",
                     first ? json_incref(first) : json_null(), "last_id",
                     lastid ? json_incref(lastid) : json_null(), "has_more", p < n);
out:
    json_decref(items);
    json_decref(conv);
    return rc;
}
