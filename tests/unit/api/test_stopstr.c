/*
 * test_stopstr.c - stop strings held back across piece boundaries, and SSE
 * framing: the client must never see part of a stop string, and every other
 * byte exactly once.
 */
#include "test.h"

#include "api/stopstr.h"
#include "net/sse.h"

/* Feeds text split into pieces of `step` bytes; returns the matched index. */
static int run(char *const *stops, int n, const char *text, size_t step, struct buf *out)
{
    struct stopstr s;
    stopstr_init(&s, stops, n);
    int hit = -1;
    size_t len = strlen(text);
    for (size_t i = 0; i < len && hit < 0; i += step) {
        size_t k = i + step <= len ? step : len - i;
        hit = stopstr_feed(&s, text + i, k, out);
    }
    if (hit < 0) stopstr_flush(&s, out);
    stopstr_release(&s);
    return hit;
}

TEST(no_stops_pass_through)
{
    struct buf out = {0};
    EXPECT_EQ_INT(run(NULL, 0, "hello world", 3, &out), -1);
    EXPECT(!strcmp(buf_str(&out), "hello world"));
    buf_release(&out);
}

TEST(stop_split_across_every_boundary)
{
    char *stops[] = {"STOP"};
    for (size_t step = 1; step <= 12; step++) {
        struct buf out = {0};
        EXPECT_EQ_INT(run(stops, 1, "abc STOP def", step, &out), 0);
        EXPECT(!strcmp(buf_str(&out), "abc "));
        buf_release(&out);
    }
}

TEST(partial_prefix_is_held_then_released)
{
    char *stops[] = {"</end>"};
    struct stopstr s;
    stopstr_init(&s, stops, 1);
    struct buf out = {0};
    EXPECT_EQ_INT(stopstr_feed(&s, "x </e", 5, &out), -1);
    EXPECT(!strcmp(buf_str(&out), "x ")); /* "</e" may start the stop string */
    EXPECT_EQ_INT(stopstr_feed(&s, "nd", 2, &out), -1);
    EXPECT(!strcmp(buf_str(&out), "x ")); /* "</end" still may */
    EXPECT_EQ_INT(stopstr_feed(&s, "!", 1, &out), -1);
    EXPECT(!strcmp(buf_str(&out), "x </end!"));
    stopstr_flush(&s, &out);
    EXPECT(!strcmp(buf_str(&out), "x </end!"));
    stopstr_release(&s);
    buf_release(&out);
}

TEST(earliest_of_several_wins)
{
    char *stops[] = {"world", "lo w", "zzz"};
    struct buf out = {0};
    EXPECT_EQ_INT(run(stops, 3, "hello world", 2, &out), 1);
    EXPECT(!strcmp(buf_str(&out), "hel"));
    buf_release(&out);
}

TEST(flush_releases_held_tail_without_match)
{
    char *stops[] = {"abc"};
    struct buf out = {0};
    EXPECT_EQ_INT(run(stops, 1, "xxab", 1, &out), -1);
    EXPECT(!strcmp(buf_str(&out), "xxab"));
    buf_release(&out);
}

TEST(feeds_after_match_are_ignored)
{
    char *stops[] = {"."};
    struct stopstr s;
    stopstr_init(&s, stops, 1);
    struct buf out = {0};
    EXPECT_EQ_INT(stopstr_feed(&s, "a.b", 3, &out), 0);
    EXPECT_EQ_INT(stopstr_feed(&s, "more", 4, &out), -1);
    stopstr_flush(&s, &out);
    EXPECT(!strcmp(buf_str(&out), "a"));
    stopstr_release(&s);
    buf_release(&out);
}

TEST(utf8_stop_string)
{
    char *stops[] = {"\xc3\xa9t\xc3\xa9"}; /* "été" */
    struct buf out = {0};
    EXPECT_EQ_INT(run(stops, 1, "un \xc3\xa9t\xc3\xa9 chaud", 1, &out), 0);
    EXPECT(!strcmp(buf_str(&out), "un "));
    buf_release(&out);
}

TEST(sse_named_and_multiline)
{
    struct buf out = {0};
    sse_event(&out, NULL, "{\"a\":1}", 7);
    EXPECT(!strcmp(buf_str(&out), "data: {\"a\":1}\n\n"));
    buf_clear(&out);
    sse_event(&out, "ping", "x\ny\r\nz\rw", 8);
    EXPECT(!strcmp(buf_str(&out), "event: ping\ndata: x\ndata: y\ndata: z\ndata: w\n\n"));
    buf_clear(&out);
    sse_event(&out, NULL, "[DONE]", 6);
    EXPECT(!strcmp(buf_str(&out), "data: [DONE]\n\n"));
    buf_release(&out);
}

TEST_MAIN()
