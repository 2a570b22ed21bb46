/*
 * test_proto.c - the cluster protocol codec (cluster/proto.h): every frame
 * type round-trips field for field; a byte stream frames only whole frames;
 * each kind of bad frame is refused with a message naming what was wrong,
 * before anything is allocated for a count the payload cannot hold; encode
 * refuses what decode would.
 */
#include "test.h"

#include "base/buf.h"
#include "base/check.h"
#include "base/err.h"
#include "cluster/proto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int32_t prompt[5] = {11, 22, 33, 44, 55};
static int32_t bias_tok[2] = {7, 9};
static float bias_val[2] = {-1.5f, 2.25f};

static struct cl_msg a_submit(void)
{
    struct cl_msg m = {.type = CL_SUBMIT};
    struct cl_submit *s = &m.u.submit;
    s->request = 0x1122334455667788ull;
    snprintf(s->traceparent, sizeof(s->traceparent), "00-%032x-%016x-01", 7, 9);
    s->priority = -3;
    s->max_tokens = 300;
    s->flags = CL_SUBMIT_IGNORE_EOS | CL_SUBMIT_LOGPROBS;
    s->n_logprobs = 5;
    s->temperature = 0.7f;
    s->top_k = 40;
    s->top_p = 0.9f;
    s->min_p = 0.05f;
    s->repetition_penalty = 1.1f;
    s->presence_penalty = -0.5f;
    s->frequency_penalty = 0.25f;
    s->seed = 42;
    s->n_logit_bias = 2;
    s->bias_token = bias_tok;
    s->bias = bias_val;
    s->grammar_kind = 2;
    s->has_limits = true;
    s->limits = (struct cl_grammar_limits){1, 2, 3, 4, 5, 6, 7, 8, -1, 10};
    s->grammar = "[a-z]+";
    s->grammar_len = 6;
    s->cache_salt = "t\0nant";
    s->salt_len = 6;
    snprintf(s->ttl_class, sizeof(s->ttl_class), "agent");
    s->n_prompt = 5;
    s->prompt = prompt;
    s->n_generated = 2;
    snprintf(s->kv_peer, sizeof(s->kv_peer), "127.0.0.1:7000");
    return m;
}

TEST(submit_round_trips)
{
    struct cl_msg m = a_submit(), d;
    struct buf b = {0};
    struct err_msg e = {{0}};
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), 0);
    size_t flen = 0;
    EXPECT_EQ_INT(cl_frame_peek((const uint8_t *)b.data, b.len, &flen, &e), 1);
    EXPECT_EQ_INT(flen, b.len);
    EXPECT_EQ_INT(cl_decode((const uint8_t *)b.data, b.len, &d, &e), 0);
    const struct cl_submit *s = &m.u.submit, *t = &d.u.submit;
    EXPECT_EQ_INT(d.type, CL_SUBMIT);
    EXPECT(t->request == s->request && t->priority == -3 && t->max_tokens == 300);
    EXPECT(strcmp(t->traceparent, s->traceparent) == 0);
    EXPECT(t->flags == s->flags && t->n_logprobs == 5 && t->top_k == 40 && t->seed == 42);
    EXPECT(t->temperature == 0.7f && t->top_p == 0.9f && t->min_p == 0.05f);
    EXPECT(t->repetition_penalty == 1.1f && t->presence_penalty == -0.5f &&
           t->frequency_penalty == 0.25f);
    EXPECT(t->n_logit_bias == 2 && t->bias_token[1] == 9 && t->bias[0] == -1.5f);
    EXPECT(t->grammar_kind == 2 && t->has_limits && t->limits.probe_steps == -1 &&
           t->limits.table_bytes == 10 && t->limits.compile_work == 3);
    EXPECT(t->grammar_len == 6 && strcmp(t->grammar, "[a-z]+") == 0);
    EXPECT(t->salt_len == 6 && memcmp(t->cache_salt, "t\0nant", 6) == 0);
    EXPECT(strcmp(t->ttl_class, "agent") == 0 && strcmp(t->kv_peer, "127.0.0.1:7000") == 0);
    EXPECT(t->n_prompt == 5 && memcmp(t->prompt, prompt, sizeof(prompt)) == 0);
    EXPECT_EQ_INT(t->n_generated, 2);
    /* decode then encode gives the same bytes */
    struct buf b2 = {0};
    EXPECT_EQ_INT(cl_encode(&d, &b2, &e), 0);
    EXPECT(b2.len == b.len && memcmp(b2.data, b.data, b.len) == 0);
    cl_msg_free(&d);
    buf_release(&b);
    buf_release(&b2);
}

/* Encodes m, decodes it back into *d; false on any failure. */
static bool round_trip(const struct cl_msg *m, struct cl_msg *d)
{
    struct buf b = {0};
    struct err_msg e = {{0}};
    bool ok = cl_encode(m, &b, &e) == 0 && cl_decode((const uint8_t *)b.data, b.len, d, &e) == 0;
    if (!ok) fprintf(stderr, "round trip of %s: %s\n", cl_type_name(m->type), e.text);
    buf_release(&b);
    return ok;
}

TEST(every_other_type_round_trips)
{
    struct cl_msg m = {.type = CL_HELLO}, d;
    m.u.hello.role = CL_ROLE_DECODE;
    for (int i = 0; i < 16; i++)
        m.u.hello.fingerprint[i] = (uint8_t)(i * 3);
    m.u.hello.block_tokens = 16;
    m.u.hello.frame_bytes = 196664;
    m.u.hello.max_ctx = 4096;
    snprintf(m.u.hello.name, sizeof(m.u.hello.name), "decode-1");
    snprintf(m.u.hello.model, sizeof(m.u.hello.model), "qwen2.5-0.5b");
    EXPECT(round_trip(&m, &d));
    EXPECT(memcmp(&d.u.hello, &m.u.hello, sizeof(m.u.hello)) == 0);

    m = (struct cl_msg){.type = CL_TOKEN};
    struct cl_token *t = &m.u.token;
    t->request = 5;
    t->index = 17;
    t->token = 1234;
    t->logprob = -0.125f;
    t->n_top = 3;
    for (int i = 0; i < 3; i++) {
        t->top_token[i] = 100 + i;
        t->top_logprob[i] = -1.0f * (float)i;
    }
    EXPECT(round_trip(&m, &d));
    EXPECT(d.u.token.index == 17 && d.u.token.token == 1234 && d.u.token.logprob == -0.125f);
    EXPECT(d.u.token.n_top == 3 && d.u.token.top_token[2] == 102 && d.u.token.finish == 0);
    t->token = -1;
    t->n_top = 0;
    t->finish = 4;
    t->n_prompt = 100;
    t->n_cached = 64;
    t->queue_s = 0.5;
    t->n_generated = 17;
    t->error = ERR_INVALID;
    snprintf(t->message, sizeof(t->message), "grammar ran past a budget");
    EXPECT(round_trip(&m, &d));
    EXPECT(d.u.token.finish == 4 && d.u.token.n_cached == 64 && d.u.token.queue_s == 0.5);
    EXPECT(d.u.token.error == ERR_INVALID && strcmp(d.u.token.message, t->message) == 0);

    m = (struct cl_msg){.type = CL_STATS};
    m.u.stats = (struct cl_stats){.running = 2,
                                  .waiting = 3,
                                  .loading = 1,
                                  .kv_blocks_total = 100,
                                  .kv_blocks_used = 40,
                                  .kv_blocks_cached = 50,
                                  .step_ms_fixed = 1.5,
                                  .step_ms_per_token = 0.25,
                                  .tokens_per_s = 80.0,
                                  .queued_tokens = 4000,
                                  .finished = 9};
    m.u.stats.counter[CL_STAT_CANCELLED] = 7;
    m.u.stats.counter[CL_STAT_PREFIX_HIT_TOKENS] = 1 << 20;
    m.u.stats.prompt_step_s = 1.25;
    EXPECT(round_trip(&m, &d));
    EXPECT(memcmp(&d.u.stats, &m.u.stats, sizeof(m.u.stats)) == 0);

    uint8_t frame[300];
    for (size_t i = 0; i < sizeof(frame); i++)
        frame[i] = (uint8_t)(i * 7);
    m = (struct cl_msg){.type = CL_KV_BLOCK};
    m.u.kv_block = (struct cl_kv_block){9, 3, frame, sizeof(frame)};
    struct buf b = {0};
    struct err_msg e = {{0}};
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), 0);
    EXPECT_EQ_INT(cl_decode((const uint8_t *)b.data, b.len, &d, &e), 0);
    EXPECT(d.u.kv_block.request == 9 && d.u.kv_block.index == 3 &&
           d.u.kv_block.frame_len == sizeof(frame) &&
           memcmp(d.u.kv_block.frame, frame, sizeof(frame)) == 0);
    buf_release(&b);

    m = (struct cl_msg){.type = CL_KV_DONE, .u.kv_done = {9, 250, 4000}};
    EXPECT(round_trip(&m, &d) && d.u.kv_done.n_blocks == 250 && d.u.kv_done.n_computed == 4000);
    m = (struct cl_msg){.type = CL_CANCEL, .u.request = 77};
    EXPECT(round_trip(&m, &d) && d.u.request == 77);
    m = (struct cl_msg){.type = CL_PING, .u.nonce = 0xfeedull};
    EXPECT(round_trip(&m, &d) && d.type == CL_PING && d.u.nonce == 0xfeedull);
    m.type = CL_PONG;
    EXPECT(round_trip(&m, &d) && d.type == CL_PONG);
    m = (struct cl_msg){.type = CL_ERROR};
    m.u.error.request = 0;
    m.u.error.code = ERR_PROTOCOL;
    snprintf(m.u.error.message, sizeof(m.u.error.message), "bad frame");
    EXPECT(round_trip(&m, &d) && d.u.error.code == ERR_PROTOCOL);
    m = (struct cl_msg){.type = CL_BYE};
    EXPECT(round_trip(&m, &d) && d.type == CL_BYE);
    m = (struct cl_msg){.type = CL_PAUSE, .u.pause = {0x42, 1}};
    EXPECT(round_trip(&m, &d) && d.type == CL_PAUSE && d.u.pause.request == 0x42 &&
           d.u.pause.paused == 1);
    m.u.pause.paused = 2; /* neither */
    struct buf pb = {0};
    struct err_msg pe = {{0}};
    EXPECT_EQ_INT(cl_encode(&m, &pb, &pe), ERR_INVALID);
    EXPECT(strstr(pe.text, "paused") != NULL);
    buf_release(&pb);
    /* KV_EVENTS: two events, then each kind of bad one */
    uint8_t ev[2 * CL_KV_EVENT_BYTES] = {1, 0};
    for (int i = 0; i < 16; i++)
        ev[2 + i] = (uint8_t)i, ev[CL_KV_EVENT_BYTES + 2 + i] = (uint8_t)(100 + i);
    ev[CL_KV_EVENT_BYTES] = 2;
    ev[CL_KV_EVENT_BYTES + 1] = 3;
    m = (struct cl_msg){.type = CL_KV_EVENTS, .u.kv_events = {.seq = 77, .n = 2, .data = ev}};
    /* (decoded events point into the frame: it stays until they are read) */
    struct buf kb = {0};
    EXPECT(cl_encode(&m, &kb, &pe) == 0 &&
           cl_decode((const uint8_t *)kb.data, kb.len, &d, &pe) == 0 && d.type == CL_KV_EVENTS &&
           d.u.kv_events.seq == 77 && d.u.kv_events.n == 2);
    int kind = 0, tier = 0;
    uint8_t id[16] = {0};
    if (d.type == CL_KV_EVENTS) cl_kv_event_at(&d.u.kv_events, 1, &kind, &tier, id);
    EXPECT(kind == 2 && tier == 3 && id[0] == 100 && id[15] == 115);
    buf_release(&kb);
    const struct {
        int at;
        uint8_t v;
        const char *field;
    } bad[] = {{0, 3, "event kind"}, {CL_KV_EVENT_BYTES + 1, 4, "event tier"}};
    for (size_t k = 0; k < ARRAY_LEN(bad); k++) {
        uint8_t e2[sizeof(ev)];
        memcpy(e2, ev, sizeof(ev));
        e2[bad[k].at] = bad[k].v;
        m.u.kv_events.data = e2;
        EXPECT_EQ_INT(cl_encode(&m, &pb, &pe), ERR_INVALID);
        EXPECT(strstr(pe.text, bad[k].field) != NULL);
    }
    m.u.kv_events.data = ev;
    m.u.kv_events.n = CL_MAX_KV_EVENTS + 1;
    EXPECT_EQ_INT(cl_encode(&m, &pb, &pe), ERR_INVALID); /* too many (and too few bytes) */
    buf_release(&pb);
}

TEST(a_stream_frames_only_whole_frames)
{
    struct buf b = {0};
    struct err_msg e = {{0}};
    struct cl_msg m = a_submit();
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), 0);
    size_t first = b.len;
    m = (struct cl_msg){.type = CL_PING, .u.nonce = 1};
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), 0);
    /* fed one byte more at a time: nothing until the first is whole */
    size_t flen = 0;
    for (size_t n = 0; n < first; n++)
        EXPECT_EQ_INT(cl_frame_peek((const uint8_t *)b.data, n, &flen, &e), 0);
    EXPECT_EQ_INT(cl_frame_peek((const uint8_t *)b.data, first, &flen, &e), 1);
    EXPECT_EQ_INT(flen, first);
    EXPECT_EQ_INT(cl_frame_peek((const uint8_t *)b.data + first, b.len - first, &flen, &e), 1);
    EXPECT_EQ_INT(flen, b.len - first);
    /* a decode of a frame with the next one's bytes attached is refused */
    struct cl_msg d;
    EXPECT_EQ_INT(cl_decode((const uint8_t *)b.data, first + 3, &d, &e), ERR_PROTOCOL);
    buf_release(&b);
}

/* Encodes a submit, lets edit change its bytes, and returns what decode
 * says, with the message in e. */
static int decode_edited(void (*edit)(struct buf *b), struct err_msg *e)
{
    struct cl_msg m = a_submit(), d;
    struct buf b = {0};
    CHECK(cl_encode(&m, &b, e) == 0);
    edit(&b);
    int rc = cl_decode((const uint8_t *)b.data, b.len, &d, e);
    if (!rc) cl_msg_free(&d);
    buf_release(&b);
    return rc;
}

static void set_len(struct buf *b, uint32_t len)
{
    for (int i = 0; i < 4; i++)
        b->data[8 + i] = (char)(uint8_t)(len >> (8 * i));
}

static void bad_magic(struct buf *b)
{
    b->data[0] = 'X';
}
static void bad_version(struct buf *b)
{
    b->data[4] = 2;
}
static void bad_type(struct buf *b)
{
    b->data[5] = 99;
}
static void bad_flags(struct buf *b)
{
    b->data[6] = 1;
}
static void bad_reserved(struct buf *b)
{
    b->data[15] = 1;
}
static void trailing(struct buf *b)
{
    buf_putc(b, 0);
    set_len(b, (uint32_t)(b->len - CL_HEADER));
}
static void cut(struct buf *b)
{
    b->len -= 3;
    set_len(b, (uint32_t)(b->len - CL_HEADER));
}
/* offsets into a_submit's payload, after the 16-byte header */
enum { OFF_TRACE = CL_HEADER + 8 };
static size_t off_sampling(const struct buf *b)
{
    size_t tl = (uint8_t)b->data[OFF_TRACE] | (size_t)(uint8_t)b->data[OFF_TRACE + 1] << 8;
    return OFF_TRACE + 2 + tl + 4 + 4 + 1 + 1; /* at temperature */
}
static void nan_temperature(struct buf *b)
{
    float f = NAN;
    memcpy(b->data + off_sampling(b), &f, 4);
}
static void zero_top_p(struct buf *b)
{
    float f = 0;
    memcpy(b->data + off_sampling(b) + 8, &f, 4);
}
static void unknown_flag(struct buf *b)
{
    b->data[off_sampling(b) - 2] |= 8;
}
static void nul_in_trace(struct buf *b)
{
    b->data[OFF_TRACE + 3] = 0;
}
static void huge_bias_count(struct buf *b)
{
    size_t at = off_sampling(b) + 7 * 4 + 8; /* the logit bias count */
    uint32_t n = 1000000;                    /* fits the bound, not the payload */
    memcpy(b->data + at, &n, 4);
}

TEST(bad_frames_are_refused_naming_the_field)
{
    struct {
        void (*edit)(struct buf *b);
        const char *says;
    } cases[] = {
        {bad_magic, "magic"},       {bad_version, "version 2"},
        {bad_type, "unknown type"}, {bad_flags, "flags"},
        {bad_reserved, "reserved"}, {trailing, "after the last field"},
        {cut, "ends inside"},       {nan_temperature, "temperature: not a finite"},
        {zero_top_p, "top_p"},      {unknown_flag, "flags: unknown bits"},
        {nul_in_trace, "NUL"},      {huge_bias_count, "logit bias: the payload ends"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct err_msg e = {{0}};
        int rc = decode_edited(cases[i].edit, &e);
        EXPECT_EQ_INT(rc, ERR_PROTOCOL);
        if (!strstr(e.text, cases[i].says))
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, e.text, cases[i].says);
        EXPECT(strstr(e.text, cases[i].says) != NULL);
    }
    /* a header claiming more than the bound is refused from the header alone */
    uint8_t h[CL_HEADER] = {'I', 'F', 'C', 'P', CL_PROTO_VERSION, CL_KV_BLOCK};
    uint32_t big = CL_MAX_PAYLOAD + 1u;
    memcpy(h + 8, &big, 4);
    size_t flen;
    struct err_msg e = {{0}};
    EXPECT_EQ_INT(cl_frame_peek(h, sizeof(h), &flen, &e), ERR_PROTOCOL);
    EXPECT(strstr(e.text, "at most") != NULL);
    /* a wrong magic is known from the first byte */
    EXPECT_EQ_INT(cl_frame_peek((const uint8_t *)"G", 1, &flen, &e), ERR_PROTOCOL);
}

TEST(encode_refuses_what_a_peer_would)
{
    struct buf b = {0};
    buf_puts(&b, "kept");
    struct err_msg e = {{0}};
    struct cl_msg m = a_submit();
    m.u.submit.temperature = -1;
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    EXPECT(strstr(e.text, "temperature") != NULL);
    EXPECT(b.len == 4 && strcmp(b.data, "kept") == 0);
    m = a_submit();
    m.u.submit.n_generated = 5; /* all of the prompt */
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    m = a_submit();
    m.u.submit.n_logprobs = 21;
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    m = (struct cl_msg){.type = CL_ERROR};
    m.u.error.code = 0;
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    m = (struct cl_msg){.type = CL_TOKEN};
    m.u.token.token = -1; /* no token and no finish */
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    m = (struct cl_msg){.type = (enum cl_type)42};
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    EXPECT(b.len == 4);
    buf_release(&b);
}

TEST(prefill_only_submits_carry_a_skip_that_can_be_set_in_place)
{
    struct cl_msg m = a_submit(), d;
    m.u.submit.flags |= CL_SUBMIT_PREFILL;
    m.u.submit.kv_peer[0] = 0;
    struct buf b = {0};
    struct err_msg e = {{0}};
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), 0);
    cl_submit_set_kv_skip((uint8_t *)b.data, b.len, 3);
    EXPECT_EQ_INT(cl_decode((const uint8_t *)b.data, b.len, &d, &e), 0);
    EXPECT_EQ_INT(d.u.submit.kv_skip, 3);
    EXPECT(d.u.submit.flags & CL_SUBMIT_PREFILL);
    cl_msg_free(&d);
    cl_submit_set_kv_skip((uint8_t *)b.data, b.len, 6); /* beyond the 5-token prompt */
    EXPECT_EQ_INT(cl_decode((const uint8_t *)b.data, b.len, &d, &e), ERR_PROTOCOL);
    EXPECT(strstr(e.text, "KV skip: beyond the prompt") != NULL);
    /* a skip on a whole request, a peer on a prefill-only one: refused */
    m = a_submit();
    m.u.submit.kv_skip = 1;
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    EXPECT(strstr(e.text, "KV skip") != NULL);
    m = a_submit();
    m.u.submit.flags |= CL_SUBMIT_PREFILL;
    EXPECT_EQ_INT(cl_encode(&m, &b, &e), ERR_INVALID);
    EXPECT(strstr(e.text, "KV peer: named on a prefill-only request") != NULL);
    buf_release(&b);
}

TEST_MAIN()
