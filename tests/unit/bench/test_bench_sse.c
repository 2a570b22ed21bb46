/*
 * test_bench_sse.c - the streaming parser: events split at every byte,
 * CRLF split across feeds, chat deltas, usage with cached tokens and
 * speculative fields, [DONE], error events and malformed JSON.
 */
#include "test.h"

#include "bench/bench_sse.h"

static const char stream[] =
    ": keep-alive comment\r\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\r\n\r\n"
    "event: message\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"text\":\" b\"}]}\n\n"
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":2,"
    "\"prompt_tokens_details\":{\"cached_tokens\":32},\"completion_tokens_details\":"
    "{\"spec_drafts\":1,\"spec_draft_tokens\":3,\"spec_accepted_tokens\":0}}}\n\n"
    "data: [DONE]\n\n";

TEST(whole_stream)
{
    struct bench_sse s;
    bench_sse_init(&s, true);
    EXPECT_EQ_INT(bench_sse_feed(&s, stream, sizeof(stream) - 1), 2);
    EXPECT_EQ_INT(s.n_content, 2);
    EXPECT(s.done && !s.failed);
    EXPECT(!strcmp(buf_str(&s.text), " a b"));
    EXPECT_EQ_INT(s.prompt_tokens, 40);
    EXPECT_EQ_INT(s.output_tokens, 2);
    EXPECT_EQ_INT(s.cached_tokens, 32);
    EXPECT_EQ_INT(s.spec_drafts, 1);
    EXPECT_EQ_INT(s.spec_draft_tok, 3);
    EXPECT_EQ_INT(s.spec_accepted, 0);
    bench_sse_release(&s);
}

TEST(byte_by_byte_equals_whole)
{
    struct bench_sse s;
    bench_sse_init(&s, true);
    int events = 0;
    for (size_t i = 0; i + 1 < sizeof(stream); i++)
        events += bench_sse_feed(&s, stream + i, 1);
    EXPECT_EQ_INT(events, 2);
    EXPECT(s.done && !s.failed);
    EXPECT(!strcmp(buf_str(&s.text), " a b"));
    EXPECT_EQ_INT(s.cached_tokens, 32);
    bench_sse_release(&s);
}

TEST(multi_line_data_and_split_crlf)
{
    /* one event in two data lines; the CR and LF of its end arrive apart */
    const char *a = "data: {\"choices\":\r", *b = "\ndata: [{\"delta\":{\"content\":\"x\"}}]}\r";
    const char *c = "\n\r\n";
    struct bench_sse s;
    bench_sse_init(&s, true);
    int ev = bench_sse_feed(&s, a, strlen(a));
    ev += bench_sse_feed(&s, b, strlen(b));
    EXPECT_EQ_INT(ev, 0);
    ev += bench_sse_feed(&s, c, strlen(c));
    EXPECT_EQ_INT(ev, 1);
    EXPECT(!s.failed);
    EXPECT(!strcmp(buf_str(&s.text), "x"));
    EXPECT(!s.done);
    bench_sse_release(&s);
}

TEST(error_event_and_malformed_json_fail_without_crashing)
{
    const char *e = "data: {\"error\":{\"message\":\"out of KV\",\"type\":\"server_error\"}}\n\n";
    struct bench_sse s;
    bench_sse_init(&s, false);
    EXPECT_EQ_INT(bench_sse_feed(&s, e, strlen(e)), 0);
    EXPECT(s.failed);
    EXPECT(strstr(s.error, "out of KV") != NULL);
    bench_sse_release(&s);

    const char *bad[] = {"data: {\"choices\":[\n\n", "data: 42\n\n", "data: \xff\xfe\n\n",
                         "data: {\"choices\":\"x\",\"usage\":[1]}\n\n"};
    for (size_t k = 0; k < 4; k++) {
        bench_sse_init(&s, true);
        bench_sse_feed(&s, bad[k], strlen(bad[k]));
        EXPECT_EQ_INT(s.n_content, 0);
        if (k < 3) EXPECT(s.failed);
        EXPECT_EQ_INT(s.prompt_tokens, -1);
        bench_sse_release(&s);
    }
}

TEST(endless_line_is_dropped)
{
    struct bench_sse s;
    bench_sse_init(&s, false);
    char *chunk = malloc(1 << 20);
    memset(chunk, 'x', 1 << 20);
    memcpy(chunk, "data: ", 6);
    for (int i = 0; i < 20; i++)
        bench_sse_feed(&s, chunk, 1 << 20);
    EXPECT(s.failed);
    EXPECT(strstr(s.error, "too long") != NULL);
    EXPECT(s.line.cap <= BENCH_SSE_MAX_EVENT * 2);
    free(chunk);
    bench_sse_release(&s);
}

TEST_MAIN()
