/*
 * proto.c - the cluster protocol codec (proto.h has the format).
 *
 * Decoding reads through a cursor that refuses to run past the payload;
 * the first failure is kept with the field's name and ends the decode.
 * Encoding writes the frame and then decodes it again, so a frame this
 * side sends passes exactly the checks the other side applies.
 */
#include "cluster/proto.h"

#include "base/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t magic[4] = {'I', 'F', 'C', 'P'};

const char *cl_type_name(int type)
{
    static const char *const names[] = {
        [CL_HELLO] = "HELLO",         [CL_SUBMIT] = "SUBMIT", [CL_TOKEN] = "TOKEN",
        [CL_CANCEL] = "CANCEL",       [CL_STATS] = "STATS",   [CL_KV_BLOCK] = "KV_BLOCK",
        [CL_KV_DONE] = "KV_DONE",     [CL_PING] = "PING",     [CL_PONG] = "PONG",
        [CL_ERROR] = "ERROR",         [CL_BYE] = "BYE",       [CL_PAUSE] = "PAUSE",
        [CL_KV_EVENTS] = "KV_EVENTS",
    };
    return type > 0 && type <= CL_TYPE_LAST ? names[type] : "?";
}

/* Little-endian ----------------------------------------------------------------- */

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_le(struct buf *b, uint64_t v, int n)
{
    uint8_t t[8];
    for (int i = 0; i < n; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    buf_append(b, t, (size_t)n);
}

/* Header --------------------------------------------------------------------------- */

int cl_frame_peek(const uint8_t *buf, size_t n, size_t *frame_len, struct err_msg *msg)
{
    *frame_len = 0;
    /* a wrong magic or version is known from the first bytes: refuse early */
    for (size_t i = 0; i < MIN(n, sizeof(magic)); i++)
        if (buf[i] != magic[i]) return err_set(msg, ERR_PROTOCOL, "frame: bad magic (not IFCP)");
    if (n >= 5 && buf[4] != CL_PROTO_VERSION)
        return err_set(msg, ERR_PROTOCOL, "frame: protocol version %u, this side speaks %d", buf[4],
                       CL_PROTO_VERSION);
    if (n < CL_HEADER) return 0;
    if (buf[5] < CL_HELLO || buf[5] > CL_TYPE_LAST)
        return err_set(msg, ERR_PROTOCOL, "frame: unknown type %u", buf[5]);
    if (get_le(buf + 6, 2) != 0)
        return err_set(msg, ERR_PROTOCOL, "frame: flags 0x%04x (none are defined)",
                       (unsigned)get_le(buf + 6, 2));
    if (get_le(buf + 12, 4) != 0) return err_set(msg, ERR_PROTOCOL, "frame: reserved bytes set");
    uint64_t len = get_le(buf + 8, 4);
    if (len > CL_MAX_PAYLOAD)
        return err_set(msg, ERR_PROTOCOL, "frame: %s payload of %llu bytes (at most %d)",
                       cl_type_name(buf[5]), (unsigned long long)len, CL_MAX_PAYLOAD);
    *frame_len = CL_HEADER + (size_t)len;
    return n >= *frame_len;
}

/* Decoding -------------------------------------------------------------------------- */

struct rd {
    const uint8_t *p; /* payload */
    size_t n, off;    /* its bytes, the cursor */
    const char *type; /* for messages */
    struct err_msg *msg;
    int rc; /* first failure (0: none) */
};

static bool fail(struct rd *r, const char *field, const char *why)
{
    if (!r->rc) r->rc = err_set(r->msg, ERR_PROTOCOL, "%s frame: %s: %s", r->type, field, why);
    return false;
}

/* Whether n more bytes are there (a failure naming field when not). */
static bool need(struct rd *r, size_t n, const char *field)
{
    if (r->rc) return false;
    if (r->n - r->off < n) return fail(r, field, "the payload ends inside it");
    return true;
}

static uint64_t rd_uint(struct rd *r, int n, const char *field)
{
    if (!need(r, (size_t)n, field)) return 0;
    uint64_t v = get_le(r->p + r->off, n);
    r->off += (size_t)n;
    return v;
}

static int32_t rd_i32(struct rd *r, const char *field)
{
    return (int32_t)(uint32_t)rd_uint(r, 4, field);
}

static float rd_f32(struct rd *r, const char *field)
{
    uint32_t u = (uint32_t)rd_uint(r, 4, field);
    float f;
    memcpy(&f, &u, 4);
    if (!r->rc && !isfinite(f)) fail(r, field, "not a finite number");
    return f;
}

static double rd_f64(struct rd *r, const char *field)
{
    uint64_t u = rd_uint(r, 8, field);
    double d;
    memcpy(&d, &u, 8);
    if (!r->rc && !isfinite(d)) fail(r, field, "not a finite number");
    return d;
}

/* A string of a u16 (lb 2) or u32 (lb 4) length of at most max bytes, with
 * no NUL unless binary. Into out (max + 1 bytes) when out is set, else into
 * a new heap copy at *heap (NULL when empty; NUL-terminated either way).
 * Returns its length. */
static size_t rd_bytes(struct rd *r, int lb, size_t max, bool binary, char *out, char **heap,
                       const char *field)
{
    size_t len = (size_t)rd_uint(r, lb, field);
    if (r->rc) return 0;
    if (len > max) {
        fail(r, field, "longer than allowed");
        return 0;
    }
    if (!need(r, len, field)) return 0;
    const uint8_t *s = r->p + r->off;
    if (!binary && memchr(s, 0, len)) {
        fail(r, field, "holds a NUL byte");
        return 0;
    }
    if (out) {
        memcpy(out, s, len);
        out[len] = 0;
    } else if (len) {
        *heap = xmalloc(len + 1);
        memcpy(*heap, s, len);
        (*heap)[len] = 0;
    }
    r->off += len;
    return len;
}

/* A count of u32 elements of elem bytes each, at most max: checked against
 * the bytes left before anyone allocates for it. */
static uint32_t rd_count(struct rd *r, size_t elem, uint32_t max, const char *field)
{
    uint32_t n = (uint32_t)rd_uint(r, 4, field);
    if (r->rc) return 0;
    if (n > max) {
        fail(r, field, "more entries than allowed");
        return 0;
    }
    if (!need(r, (size_t)n * elem, field)) return 0;
    return n;
}

static size_t rd_str(struct rd *r, int lb, size_t max, char *out, char **heap, const char *field)
{
    return rd_bytes(r, lb, max, false, out, heap, field);
}

static void dec_hello(struct rd *r, struct cl_hello *h)
{
    h->role = (uint8_t)rd_uint(r, 1, "role");
    if (!r->rc && (h->role < CL_ROLE_PREFILL || h->role > CL_ROLE_GATEWAY))
        fail(r, "role", "not prefill, decode, mixed or gateway");
    if (need(r, 16, "fingerprint")) {
        memcpy(h->fingerprint, r->p + r->off, 16);
        r->off += 16;
    }
    h->block_tokens = (uint32_t)rd_uint(r, 4, "block tokens");
    h->frame_bytes = (uint32_t)rd_uint(r, 4, "frame bytes");
    if (!r->rc && h->frame_bytes > CL_MAX_PAYLOAD) fail(r, "frame bytes", "beyond a payload");
    h->max_ctx = (uint32_t)rd_uint(r, 4, "context length");
    rd_str(r, 2, CL_MAX_NAME, h->name, NULL, "name");
    rd_str(r, 2, CL_MAX_NAME, h->model, NULL, "model");
}

static void dec_limits(struct rd *r, struct cl_grammar_limits *l)
{
    l->max_rules = rd_i32(r, "grammar limits");
    l->max_elems = rd_i32(r, "grammar limits");
    l->compile_work = (int64_t)rd_uint(r, 8, "grammar limits");
    l->compile_cpu_ms = (int64_t)rd_uint(r, 8, "grammar limits");
    l->max_stacks = rd_i32(r, "grammar limits");
    l->max_nodes = rd_i32(r, "grammar limits");
    l->step_work = (int64_t)rd_uint(r, 8, "grammar limits");
    l->mask_work = (int64_t)rd_uint(r, 8, "grammar limits");
    l->probe_steps = rd_i32(r, "grammar limits");
    l->table_bytes = (int64_t)rd_uint(r, 8, "grammar limits");
    if (!r->rc && (l->max_rules < 0 || l->max_elems < 0 || l->compile_work < 0 ||
                   l->compile_cpu_ms < 0 || l->max_stacks < 0 || l->max_nodes < 0 ||
                   l->step_work < 0 || l->mask_work < 0 || l->table_bytes < 0))
        fail(r, "grammar limits", "a negative budget");
}

static void dec_submit(struct rd *r, struct cl_submit *s)
{
    s->request = rd_uint(r, 8, "request");
    if (!r->rc && !s->request) fail(r, "request", "0 (ids start at 1)");
    rd_str(r, 2, CL_MAX_TRACE, s->traceparent, NULL, "traceparent");
    s->priority = rd_i32(r, "priority");
    s->max_tokens = (uint32_t)rd_uint(r, 4, "max tokens");
    if (!r->rc && (s->max_tokens < 1 || s->max_tokens > CL_MAX_PROMPT))
        fail(r, "max tokens", "out of range");
    s->flags = (uint8_t)rd_uint(r, 1, "flags");
    if (!r->rc && (s->flags & ~(CL_SUBMIT_IGNORE_EOS | CL_SUBMIT_LOGPROBS | CL_SUBMIT_PREFILL)))
        fail(r, "flags", "unknown bits set");
    s->n_logprobs = (uint8_t)rd_uint(r, 1, "top logprobs");
    if (!r->rc && s->n_logprobs > CL_MAX_TOP) fail(r, "top logprobs", "more than 20");
    if (!r->rc && s->n_logprobs && !(s->flags & CL_SUBMIT_LOGPROBS))
        fail(r, "top logprobs", "asked for without logprobs");
    s->temperature = rd_f32(r, "temperature");
    if (!r->rc && s->temperature < 0) fail(r, "temperature", "negative");
    s->top_k = rd_i32(r, "top_k");
    if (!r->rc && s->top_k < 0) fail(r, "top_k", "negative");
    s->top_p = rd_f32(r, "top_p");
    if (!r->rc && !(s->top_p > 0 && s->top_p <= 1)) fail(r, "top_p", "not in (0, 1]");
    s->min_p = rd_f32(r, "min_p");
    if (!r->rc && !(s->min_p >= 0 && s->min_p <= 1)) fail(r, "min_p", "not in [0, 1]");
    s->repetition_penalty = rd_f32(r, "repetition penalty");
    if (!r->rc && !(s->repetition_penalty > 0)) fail(r, "repetition penalty", "not positive");
    s->presence_penalty = rd_f32(r, "presence penalty");
    s->frequency_penalty = rd_f32(r, "frequency penalty");
    s->seed = rd_uint(r, 8, "seed");
    s->n_logit_bias = rd_count(r, 8, CL_MAX_LOGIT_BIAS, "logit bias");
    if (s->n_logit_bias) {
        s->bias_token = xmalloc(sizeof(*s->bias_token) * s->n_logit_bias);
        s->bias = xmalloc(sizeof(*s->bias) * s->n_logit_bias);
        for (uint32_t i = 0; i < s->n_logit_bias && !r->rc; i++) {
            s->bias_token[i] = rd_i32(r, "logit bias token");
            s->bias[i] = rd_f32(r, "logit bias");
            if (!r->rc && s->bias_token[i] < 0) fail(r, "logit bias token", "negative");
        }
    }
    s->grammar_kind = (uint8_t)rd_uint(r, 1, "grammar kind");
    if (!r->rc && s->grammar_kind > 5) fail(r, "grammar kind", "unknown");
    uint8_t has = (uint8_t)rd_uint(r, 1, "grammar limits");
    if (!r->rc && has > 1) fail(r, "grammar limits", "flag neither 0 nor 1");
    s->has_limits = has == 1;
    if (s->has_limits) dec_limits(r, &s->limits);
    s->grammar_len = (uint32_t)rd_str(r, 4, CL_MAX_GRAMMAR, NULL, &s->grammar, "grammar source");
    s->salt_len = (uint16_t)rd_bytes(r, 2, CL_MAX_SALT, true, NULL, &s->cache_salt, "cache salt");
    rd_str(r, 2, CL_MAX_CLASS, s->ttl_class, NULL, "TTL class");
    s->n_prompt = rd_count(r, 4, CL_MAX_PROMPT, "prompt");
    if (!r->rc && s->n_prompt == 0) fail(r, "prompt", "empty");
    if (s->n_prompt) {
        s->prompt = xmalloc(sizeof(*s->prompt) * s->n_prompt);
        for (uint32_t i = 0; i < s->n_prompt && !r->rc; i++) {
            s->prompt[i] = rd_i32(r, "prompt");
            if (!r->rc && s->prompt[i] < 0) fail(r, "prompt", "a negative token id");
        }
    }
    s->n_generated = (uint32_t)rd_uint(r, 4, "generated");
    if (!r->rc && s->n_generated >= s->n_prompt)
        fail(r, "generated", "not fewer than the prompt's tokens");
    rd_str(r, 2, CL_MAX_NAME, s->kv_peer, NULL, "KV peer");
    if (!r->rc && s->kv_peer[0] && (s->flags & CL_SUBMIT_PREFILL))
        fail(r, "KV peer", "named on a prefill-only request");
    s->kv_skip = (uint32_t)rd_uint(r, 4, "KV skip");
    if (!r->rc && s->kv_skip && !(s->flags & CL_SUBMIT_PREFILL))
        fail(r, "KV skip", "set on a request that is not prefill-only");
    if (!r->rc && s->kv_skip > s->n_prompt) fail(r, "KV skip", "beyond the prompt");
}

static void dec_token(struct rd *r, struct cl_token *t)
{
    t->request = rd_uint(r, 8, "request");
    t->index = (uint32_t)rd_uint(r, 4, "index");
    t->token = rd_i32(r, "token");
    if (!r->rc && t->token < -1) fail(r, "token", "negative");
    t->logprob = rd_f32(r, "logprob");
    t->n_top = (uint8_t)rd_uint(r, 1, "top");
    if (!r->rc && t->n_top > CL_MAX_TOP) fail(r, "top", "more than 20");
    for (int i = 0; i < t->n_top && !r->rc; i++) {
        t->top_token[i] = rd_i32(r, "top token");
        t->top_logprob[i] = rd_f32(r, "top logprob");
        if (!r->rc && t->top_token[i] < 0) fail(r, "top token", "negative");
    }
    t->finish = (uint8_t)rd_uint(r, 1, "finish");
    if (!r->rc && t->finish > 4) fail(r, "finish", "unknown reason");
    if (!r->rc && t->token == -1 && !t->finish) fail(r, "token", "none, and no finish");
    if (!t->finish) return;
    t->n_prompt = (uint32_t)rd_uint(r, 4, "usage prompt");
    t->n_cached = (uint32_t)rd_uint(r, 4, "usage cached");
    if (!r->rc && t->n_cached > t->n_prompt) fail(r, "usage cached", "more than the prompt");
    t->queue_s = rd_f64(r, "queue seconds");
    if (!r->rc && t->queue_s < 0) fail(r, "queue seconds", "negative");
    t->n_generated = (uint32_t)rd_uint(r, 4, "usage generated");
    t->error = rd_i32(r, "error");
    rd_str(r, 2, CL_MAX_NAME, t->message, NULL, "message");
}

static void dec_stats(struct rd *r, struct cl_stats *s)
{
    s->running = (uint32_t)rd_uint(r, 4, "running");
    s->waiting = (uint32_t)rd_uint(r, 4, "waiting");
    s->loading = (uint32_t)rd_uint(r, 4, "loading");
    s->kv_blocks_total = (uint32_t)rd_uint(r, 4, "KV blocks");
    s->kv_blocks_used = (uint32_t)rd_uint(r, 4, "KV blocks used");
    s->kv_blocks_cached = (uint32_t)rd_uint(r, 4, "KV blocks cached");
    if (!r->rc && (uint64_t)s->kv_blocks_used + s->kv_blocks_cached > s->kv_blocks_total)
        fail(r, "KV blocks", "used and cached beyond the total");
    s->step_ms_fixed = rd_f64(r, "step ms fixed");
    s->step_ms_per_token = rd_f64(r, "step ms per token");
    s->tokens_per_s = rd_f64(r, "tokens per second");
    if (!r->rc && (s->step_ms_fixed < 0 || s->step_ms_per_token < 0 || s->tokens_per_s < 0))
        fail(r, "step costs", "negative");
    s->queued_tokens = rd_uint(r, 8, "queued tokens");
    s->finished = rd_uint(r, 8, "finished");
    for (int i = 0; i < CL_STAT_COUNTERS; i++)
        s->counter[i] = rd_uint(r, 8, "counters");
    s->decode_step_s = rd_f64(r, "decode step seconds");
    s->prompt_step_s = rd_f64(r, "prompt step seconds");
    if (!r->rc && (s->decode_step_s < 0 || s->prompt_step_s < 0))
        fail(r, "step seconds", "negative");
}

int cl_decode(const uint8_t *buf, size_t len, struct cl_msg *m, struct err_msg *msg)
{
    memset(m, 0, sizeof(*m));
    size_t flen = 0;
    int rc = cl_frame_peek(buf, len, &flen, msg);
    if (rc < 0) return rc;
    if (rc == 0) return err_set(msg, ERR_PROTOCOL, "frame: cut short (%zu bytes)", len);
    if (flen != len)
        return err_set(msg, ERR_PROTOCOL, "frame: %zu bytes where the header says %zu", len, flen);
    struct rd r = {
        .p = buf + CL_HEADER, .n = len - CL_HEADER, .type = cl_type_name(buf[5]), .msg = msg};
    m->type = (enum cl_type)buf[5];
    switch (m->type) {
    case CL_HELLO:
        dec_hello(&r, &m->u.hello);
        break;
    case CL_SUBMIT:
        dec_submit(&r, &m->u.submit);
        break;
    case CL_TOKEN:
        dec_token(&r, &m->u.token);
        break;
    case CL_CANCEL:
        m->u.request = rd_uint(&r, 8, "request");
        break;
    case CL_STATS:
        dec_stats(&r, &m->u.stats);
        break;
    case CL_KV_BLOCK:
        m->u.kv_block.request = rd_uint(&r, 8, "request");
        m->u.kv_block.index = (uint32_t)rd_uint(&r, 4, "block index");
        if (!r.rc && r.off == r.n) fail(&r, "frame", "empty");
        m->u.kv_block.frame = r.p + r.off;
        m->u.kv_block.frame_len = r.n - r.off;
        r.off = r.n;
        break;
    case CL_KV_DONE:
        m->u.kv_done.request = rd_uint(&r, 8, "request");
        m->u.kv_done.n_blocks = (uint32_t)rd_uint(&r, 4, "blocks");
        m->u.kv_done.n_computed = (uint32_t)rd_uint(&r, 4, "computed");
        break;
    case CL_PING:
    case CL_PONG:
        m->u.nonce = rd_uint(&r, 8, "nonce");
        break;
    case CL_ERROR:
        m->u.error.request = rd_uint(&r, 8, "request");
        m->u.error.code = rd_i32(&r, "code");
        if (!r.rc && m->u.error.code >= 0) fail(&r, "code", "not an error code");
        rd_str(&r, 2, CL_MAX_NAME, m->u.error.message, NULL, "message");
        break;
    case CL_BYE:
        break;
    case CL_PAUSE:
        m->u.pause.request = rd_uint(&r, 8, "request");
        m->u.pause.paused = (uint8_t)rd_uint(&r, 1, "paused");
        if (!r.rc && m->u.pause.paused > 1) fail(&r, "paused", "neither 0 nor 1");
        break;
    case CL_KV_EVENTS: {
        struct cl_kv_events *e = &m->u.kv_events;
        e->seq = rd_uint(&r, 8, "sequence");
        e->n = (uint32_t)rd_uint(&r, 4, "events");
        if (r.rc) break;
        if (e->n > CL_MAX_KV_EVENTS) {
            fail(&r, "events", "too many");
            break;
        }
        if (r.n - r.off != (size_t)e->n * CL_KV_EVENT_BYTES) {
            fail(&r, "events", "not n x 18 bytes");
            break;
        }
        e->data = r.p + r.off;
        for (uint32_t i = 0; i < e->n && !r.rc; i++) {
            const uint8_t *ev = e->data + (size_t)i * CL_KV_EVENT_BYTES;
            if (ev[0] < 1 || ev[0] > 2)
                fail(&r, "event kind", "neither 1 nor 2");
            else if (ev[1] > 3)
                fail(&r, "event tier", "above 3");
        }
        r.off = r.n;
        break;
    }
    }
    if (!r.rc && r.off != r.n) fail(&r, "payload", "bytes after the last field");
    if (r.rc) {
        cl_msg_free(m);
        return r.rc;
    }
    return 0;
}

void cl_kv_event_at(const struct cl_kv_events *e, uint32_t i, int *kind, int *tier, uint8_t id[16])
{
    const uint8_t *ev = e->data + (size_t)i * CL_KV_EVENT_BYTES;
    *kind = ev[0];
    *tier = ev[1];
    memcpy(id, ev + 2, 16);
}

void cl_msg_free(struct cl_msg *m)
{
    if (m->type == CL_SUBMIT) {
        struct cl_submit *s = &m->u.submit;
        free(s->bias_token);
        free(s->bias);
        free(s->grammar);
        free(s->cache_salt);
        free(s->prompt);
    }
    memset(m, 0, sizeof(*m));
}

/* Encoding -------------------------------------------------------------------------- */

static void put_f32(struct buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_le(b, u, 4);
}

static void put_f64(struct buf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    put_le(b, u, 8);
}

/* A string of at most (1 << 8 * lb) - 1 bytes; longer ones are cut here and
 * refused by the decode check after (the bound is below that anyway). */
static void put_str(struct buf *b, const char *s, size_t len, int lb)
{
    size_t max = lb == 2 ? 0xffff : 0xffffffffu;
    if (len > max) len = max;
    put_le(b, len, lb);
    if (len) buf_append(b, s, len);
}

static void enc_submit(struct buf *b, const struct cl_submit *s)
{
    put_le(b, s->request, 8);
    put_str(b, s->traceparent, strlen(s->traceparent), 2);
    put_le(b, (uint32_t)s->priority, 4);
    put_le(b, s->max_tokens, 4);
    put_le(b, s->flags, 1);
    put_le(b, s->n_logprobs, 1);
    put_f32(b, s->temperature);
    put_le(b, (uint32_t)s->top_k, 4);
    put_f32(b, s->top_p);
    put_f32(b, s->min_p);
    put_f32(b, s->repetition_penalty);
    put_f32(b, s->presence_penalty);
    put_f32(b, s->frequency_penalty);
    put_le(b, s->seed, 8);
    put_le(b, s->n_logit_bias, 4);
    for (uint32_t i = 0; i < s->n_logit_bias; i++) {
        put_le(b, (uint32_t)s->bias_token[i], 4);
        put_f32(b, s->bias[i]);
    }
    put_le(b, s->grammar_kind, 1);
    put_le(b, s->has_limits, 1);
    if (s->has_limits) {
        const struct cl_grammar_limits *l = &s->limits;
        put_le(b, (uint32_t)l->max_rules, 4);
        put_le(b, (uint32_t)l->max_elems, 4);
        put_le(b, (uint64_t)l->compile_work, 8);
        put_le(b, (uint64_t)l->compile_cpu_ms, 8);
        put_le(b, (uint32_t)l->max_stacks, 4);
        put_le(b, (uint32_t)l->max_nodes, 4);
        put_le(b, (uint64_t)l->step_work, 8);
        put_le(b, (uint64_t)l->mask_work, 8);
        put_le(b, (uint32_t)l->probe_steps, 4);
        put_le(b, (uint64_t)l->table_bytes, 8);
    }
    put_str(b, s->grammar, s->grammar ? s->grammar_len : 0, 4);
    put_str(b, s->cache_salt, s->cache_salt ? s->salt_len : 0, 2);
    put_str(b, s->ttl_class, strlen(s->ttl_class), 2);
    put_le(b, s->n_prompt, 4);
    for (uint32_t i = 0; i < s->n_prompt; i++)
        put_le(b, (uint32_t)s->prompt[i], 4);
    put_le(b, s->n_generated, 4);
    put_str(b, s->kv_peer, strlen(s->kv_peer), 2);
    put_le(b, s->kv_skip, 4);
}

static void enc_token(struct buf *b, const struct cl_token *t)
{
    put_le(b, t->request, 8);
    put_le(b, t->index, 4);
    put_le(b, (uint32_t)t->token, 4);
    put_f32(b, t->logprob);
    put_le(b, t->n_top, 1);
    for (int i = 0; i < t->n_top && i < CL_MAX_TOP; i++) {
        put_le(b, (uint32_t)t->top_token[i], 4);
        put_f32(b, t->top_logprob[i]);
    }
    put_le(b, t->finish, 1);
    if (!t->finish) return;
    put_le(b, t->n_prompt, 4);
    put_le(b, t->n_cached, 4);
    put_f64(b, t->queue_s);
    put_le(b, t->n_generated, 4);
    put_le(b, (uint32_t)t->error, 4);
    put_str(b, t->message, strlen(t->message), 2);
}

int cl_encode(const struct cl_msg *m, struct buf *out, struct err_msg *msg)
{
    const size_t start = out->len;
    buf_append(out, magic, sizeof(magic));
    put_le(out, CL_PROTO_VERSION, 1);
    put_le(out, (uint64_t)m->type, 1);
    put_le(out, 0, 2);
    put_le(out, 0, 4); /* payload bytes, below */
    put_le(out, 0, 4);
    switch (m->type) {
    case CL_HELLO: {
        const struct cl_hello *h = &m->u.hello;
        put_le(out, h->role, 1);
        buf_append(out, h->fingerprint, 16);
        put_le(out, h->block_tokens, 4);
        put_le(out, h->frame_bytes, 4);
        put_le(out, h->max_ctx, 4);
        put_str(out, h->name, strlen(h->name), 2);
        put_str(out, h->model, strlen(h->model), 2);
        break;
    }
    case CL_SUBMIT:
        enc_submit(out, &m->u.submit);
        break;
    case CL_TOKEN:
        enc_token(out, &m->u.token);
        break;
    case CL_CANCEL:
        put_le(out, m->u.request, 8);
        break;
    case CL_STATS: {
        const struct cl_stats *s = &m->u.stats;
        put_le(out, s->running, 4);
        put_le(out, s->waiting, 4);
        put_le(out, s->loading, 4);
        put_le(out, s->kv_blocks_total, 4);
        put_le(out, s->kv_blocks_used, 4);
        put_le(out, s->kv_blocks_cached, 4);
        put_f64(out, s->step_ms_fixed);
        put_f64(out, s->step_ms_per_token);
        put_f64(out, s->tokens_per_s);
        put_le(out, s->queued_tokens, 8);
        put_le(out, s->finished, 8);
        for (int i = 0; i < CL_STAT_COUNTERS; i++)
            put_le(out, s->counter[i], 8);
        put_f64(out, s->decode_step_s);
        put_f64(out, s->prompt_step_s);
        break;
    }
    case CL_KV_BLOCK:
        put_le(out, m->u.kv_block.request, 8);
        put_le(out, m->u.kv_block.index, 4);
        if (m->u.kv_block.frame_len) buf_append(out, m->u.kv_block.frame, m->u.kv_block.frame_len);
        break;
    case CL_KV_DONE:
        put_le(out, m->u.kv_done.request, 8);
        put_le(out, m->u.kv_done.n_blocks, 4);
        put_le(out, m->u.kv_done.n_computed, 4);
        break;
    case CL_PING:
    case CL_PONG:
        put_le(out, m->u.nonce, 8);
        break;
    case CL_ERROR:
        put_le(out, m->u.error.request, 8);
        put_le(out, (uint32_t)m->u.error.code, 4);
        put_str(out, m->u.error.message, strlen(m->u.error.message), 2);
        break;
    case CL_BYE:
        break;
    case CL_PAUSE:
        put_le(out, m->u.pause.request, 8);
        put_le(out, m->u.pause.paused, 1);
        break;
    case CL_KV_EVENTS:
        if (m->u.kv_events.n > CL_MAX_KV_EVENTS) { /* (before reading n events' bytes) */
            out->len = start;
            if (out->data) out->data[start] = 0;
            return err_set(msg, ERR_INVALID, "encode: KV_EVENTS: %u events (at most %d)",
                           m->u.kv_events.n, CL_MAX_KV_EVENTS);
        }
        put_le(out, m->u.kv_events.seq, 8);
        put_le(out, m->u.kv_events.n, 4);
        if (m->u.kv_events.n)
            buf_append(out, m->u.kv_events.data, (size_t)m->u.kv_events.n * CL_KV_EVENT_BYTES);
        break;
    default:
        out->len = start;
        if (out->data) out->data[start] = 0;
        return err_set(msg, ERR_INVALID, "encode: unknown frame type %d", (int)m->type);
    }
    size_t payload = out->len - start - CL_HEADER;
    if (payload <= CL_MAX_PAYLOAD) {
        for (int i = 0; i < 4; i++)
            out->data[start + 8 + i] = (char)(uint8_t)(payload >> (8 * i));
    }
    /* what the peer will check, checked here */
    struct cl_msg back;
    struct err_msg why = {{0}};
    int rc = payload > CL_MAX_PAYLOAD
                 ? err_set(&why, ERR_PROTOCOL, "payload of %zu bytes (at most %d)", payload,
                           CL_MAX_PAYLOAD)
                 : cl_decode((const uint8_t *)out->data + start, out->len - start, &back, &why);
    if (rc) {
        out->len = start;
        out->data[start] = 0;
        return err_set(msg, ERR_INVALID, "encode: %s", why.text);
    }
    cl_msg_free(&back);
    return 0;
}

void cl_submit_set_kv_skip(uint8_t *frame, size_t len, uint32_t skip)
{
    for (int i = 0; i < 4; i++)
        frame[len - 4 + (size_t)i] = (uint8_t)(skip >> (8 * i));
}
