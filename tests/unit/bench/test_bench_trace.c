/*
 * test_bench_trace.c - trace readers: the three formats parse into the
 * expected items (ids namespaced per file, unnamed blocks fresh, timestamps
 * spread inside their bucket, agentic think-time dependencies), and malformed
 * input gives an error that names the file, the line (or request) and the
 * field. The real traces in ../shared/traces are checked when present.
 */
#include "test.h"

#include "bench/bench_trace.h"

#include <unistd.h>

static int parse(struct bench_workload *w, enum bench_trace_format f, const char *text,
                 struct err_msg *m)
{
    struct bench_trace_opts o = {.bucket_s = -1, .seed = 5};
    return bench_trace_parse(w, f, "t.txt", text, strlen(text), &o, m);
}

TEST(mooncake)
{
    struct bench_workload w;
    bench_workload_init(&w, 512);
    const char *t = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, "
                    "\"hash_ids\": [0, 1]}\n"
                    "\n"
                    "{\"timestamp\": 27, \"input_length\": 600, \"output_length\": 7, "
                    "\"hash_ids\": [0]}\n";
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(parse(&w, BENCH_TRACE_MOONCAKE, t, &m), 0);
    EXPECT_EQ_INT(w.n, 2);
    EXPECT(w.items[0].t_s >= 0 && w.items[0].t_s < 0.001);
    EXPECT(w.items[1].t_s >= 0.027 && w.items[1].t_s < 0.028);
    EXPECT_EQ_INT(w.items[1].src_line, 3);
    EXPECT_EQ_INT(w.items[1].n_blocks, 2); /* id 0 + a fresh id for the unnamed tail */
    EXPECT(w.items[0].blocks[0] == w.items[1].blocks[0]);
    EXPECT(w.items[1].blocks[1] != w.items[0].blocks[1]);
    EXPECT_NEAR(bench_workload_ideal_hit(&w, NULL), 512.0 / 1600.0, 1e-12);
    /* deterministic spreading */
    struct bench_workload w2;
    bench_workload_init(&w2, 512);
    EXPECT_EQ_INT(parse(&w2, BENCH_TRACE_MOONCAKE, t, &m), 0);
    EXPECT_NEAR(w2.items[1].t_s, w.items[1].t_s, 0);
    bench_workload_release(&w2);
    bench_workload_release(&w);
}

static void expect_error(enum bench_trace_format f, int32_t block, const char *text,
                         const char *where, const char *field)
{
    struct bench_workload w;
    bench_workload_init(&w, block);
    struct err_msg m = {{0}};
    EXPECT(parse(&w, f, text, &m) < 0);
    EXPECT_EQ_INT(w.n, 0);
    if (!strstr(m.text, "t.txt") || !strstr(m.text, where) || !strstr(m.text, field))
        fprintf(stderr, "  message was: %s (wanted %s, %s)\n", m.text, where, field);
    EXPECT(strstr(m.text, "t.txt") && strstr(m.text, where) && strstr(m.text, field));
    bench_workload_release(&w);
}

TEST(mooncake_errors_name_line_and_field)
{
    const char *ok = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, "
                     "\"hash_ids\": [0]}\n";
    char t[512];
    snprintf(t, sizeof(t),
             "%s%s{\"timestamp\": 1, \"input_length\": \"x\", \"output_length\": 5, "
             "\"hash_ids\": [0]}\n",
             ok, ok);
    expect_error(BENCH_TRACE_MOONCAKE, 512, t, "line 3", "input_length");
    snprintf(t, sizeof(t), "%s{\"timestamp\": 1, \"input_length\": 10\n", ok);
    expect_error(BENCH_TRACE_MOONCAKE, 512, t, "line 2", "JSON");
    expect_error(BENCH_TRACE_MOONCAKE, 512,
                 "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, "
                 "\"hash_ids\": [0, 1]}\n",
                 "line 1", "hash_ids");
    expect_error(BENCH_TRACE_MOONCAKE, 512,
                 "{\"timestamp\": -3, \"input_length\": 10, \"output_length\": 5, "
                 "\"hash_ids\": []}\n",
                 "line 1", "timestamp");
    expect_error(BENCH_TRACE_MOONCAKE, 512,
                 "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, "
                 "\"hash_ids\": [-1]}\n",
                 "line 1", "hash_ids[0]");
    expect_error(BENCH_TRACE_MOONCAKE, 512, "{\"timestamp\": 0, \"input_length\": 10}\n", "line 1",
                 "output_length");
    expect_error(BENCH_TRACE_MOONCAKE, 512, "\n\n", "", "no requests");
}

TEST(azure)
{
    struct bench_workload w;
    bench_workload_init(&w, 512);
    const char *t = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                    "2023-11-16 18:17:03.9799600,4808,10\r\n"
                    "2023-11-16 18:17:04.0319600,3180,0\r\n";
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(parse(&w, BENCH_TRACE_AZURE, t, &m), 0);
    EXPECT_EQ_INT(w.n, 2);
    EXPECT_NEAR(w.items[0].t_s, 0, 0);
    EXPECT_NEAR(w.items[1].t_s, 0.052, 1e-6);
    EXPECT_EQ_INT(w.items[0].n_input, 4808);
    EXPECT_EQ_INT(w.items[0].n_blocks, 10);
    EXPECT_EQ_INT(w.items[1].n_output, 1);                 /* 0 generated: still ask for one */
    EXPECT_NEAR(bench_workload_ideal_hit(&w, NULL), 0, 0); /* no prefix information */
    bench_workload_release(&w);
}

TEST(azure_errors_name_line_and_field)
{
    expect_error(BENCH_TRACE_AZURE, 512, "TIMESTAMP,Context,Generated\n", "line 1", "header");
    expect_error(BENCH_TRACE_AZURE, 512,
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,10,1\n"
                 "2023-13-16 18:17:04.0,10,1\n",
                 "line 3", "TIMESTAMP");
    expect_error(BENCH_TRACE_AZURE, 512,
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,1x0,1\n", "line 2",
                 "ContextTokens");
    expect_error(BENCH_TRACE_AZURE, 512,
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,10\n", "line 2",
                 "3 comma-separated");
    expect_error(BENCH_TRACE_AZURE, 512,
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9,10,-1\n", "line 2",
                 "GeneratedTokens");
}

TEST(agentic_sessions)
{
    const char *t = "{\"block_size\":64,\"requests\":["
                    "{\"t\":0.0,\"type\":\"n\",\"in\":100,\"out\":5,\"hash_ids\":[1]},"
                    "{\"t\":8.0,\"type\":\"s\",\"in\":130,\"out\":6,\"hash_ids\":[1,2],"
                    "\"think_time\":3.0}]}";
    struct bench_workload w;
    bench_workload_init(&w, 64);
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(parse(&w, BENCH_TRACE_AGENTIC, t, &m), 0);
    EXPECT_EQ_INT(w.n, 2);
    EXPECT_EQ_INT(w.items[1].after, 0);
    EXPECT_NEAR(w.items[1].think_s, 3.0, 0);
    EXPECT_EQ_INT(w.items[1].n_blocks, 3);
    EXPECT(w.items[0].blocks[0] == w.items[1].blocks[0]);
    EXPECT(w.items[0].blocks[1] != w.items[1].blocks[1]); /* fresh tail vs named id 2 */
    EXPECT(w.items[1].t_s >= 8.0 && w.items[1].t_s < 9.0);
    bench_workload_release(&w);
    /* absolute timing: no dependency */
    bench_workload_init(&w, 64);
    struct bench_trace_opts o = {.bucket_s = 0, .sessions_timed = true};
    EXPECT_EQ_INT(bench_trace_parse(&w, BENCH_TRACE_AGENTIC, "t.txt", t, strlen(t), &o, &m), 0);
    EXPECT_EQ_INT(w.items[1].after, -1);
    EXPECT_NEAR(w.items[1].t_s, 8.0, 0);
    bench_workload_release(&w);
}

TEST(agentic_errors_name_request_and_field)
{
    expect_error(BENCH_TRACE_AGENTIC, 64,
                 "{\"requests\":[{\"t\":0,\"in\":10,\"out\":1,"
                 "\"hash_ids\":[]},{\"t\":1,\"out\":1,\"hash_ids\":[]}]}",
                 "requests[1]", "'in'");
    expect_error(BENCH_TRACE_AGENTIC, 64, "{\"requests\":[\n{\"t\":0,,}]}", "line 2", "JSON");
    expect_error(BENCH_TRACE_AGENTIC, 64, "{\"block_size\":16,\"requests\":[]}", "", "block_size");
    expect_error(BENCH_TRACE_AGENTIC, 64,
                 "{\"requests\":[{\"t\":5,\"in\":10,\"out\":1,\"hash_ids\":[]},"
                 "{\"t\":1,\"in\":10,\"out\":1,\"hash_ids\":[]}]}",
                 "requests[1]", "goes back");
    expect_error(BENCH_TRACE_AGENTIC, 64, "[1,2]", "", "requests");
}

TEST(missing_file_and_namespaces)
{
    struct bench_workload w;
    bench_workload_init(&w, 512);
    struct err_msg m = {{0}};
    struct bench_trace_opts o = {.bucket_s = 0};
    EXPECT(bench_trace_load(&w, BENCH_TRACE_MOONCAKE, "/nonexistent/x.jsonl", &o, &m) < 0);
    EXPECT(strstr(m.text, "/nonexistent/x.jsonl") != NULL);
    /* the same id in two files names different blocks */
    const char *t = "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, "
                    "\"hash_ids\": [3]}\n";
    EXPECT_EQ_INT(bench_trace_parse(&w, BENCH_TRACE_MOONCAKE, "a", t, strlen(t), &o, &m), 0);
    o.file_no = 1;
    EXPECT_EQ_INT(bench_trace_parse(&w, BENCH_TRACE_MOONCAKE, "b", t, strlen(t), &o, &m), 0);
    EXPECT(w.items[0].blocks[0] != w.items[1].blocks[0]);
    bench_workload_release(&w);
}

TEST(shared_traces_when_present)
{
    const char *mc = "/work/shared/traces/mooncake/synthetic_trace.jsonl";
    if (access(mc, R_OK) != 0) {
        printf("  (shared traces not present: skipped)\n");
        return;
    }
    struct bench_workload w;
    bench_workload_init(&w, 512);
    struct err_msg m = {{0}};
    struct bench_trace_opts o = {.bucket_s = -1};
    EXPECT_EQ_INT(bench_trace_load(&w, BENCH_TRACE_MOONCAKE, mc, &o, &m), 0);
    EXPECT_EQ_INT(w.n, 3993);
    /* README: 64.0% of blocks are prefix hits; in tokens it is close to that */
    double r = bench_workload_ideal_hit(&w, NULL);
    EXPECT(r > 0.60 && r < 0.68);
    bench_workload_release(&w);
}

TEST_MAIN()
