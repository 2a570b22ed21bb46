/*
 * test_encode.c - answer and error shapes: finish reasons per API, stop
 * sequences, usage with cached tokens, error schemas and types per status.
 */
#include "test.h"

#include "api/encode.h"

TEST(errors_in_each_schema)
{
    json_t *o = api_error_json(API_CHAT, ERR_INVALID, "temperature: bad", "temperature");
    json_t *e = json_object_get(o, "error");
    EXPECT(!strcmp(json_string_value(json_object_get(e, "type")), "invalid_request_error"));
    EXPECT(!strcmp(json_string_value(json_object_get(e, "param")), "temperature"));
    EXPECT(!strcmp(json_string_value(json_object_get(e, "message")), "temperature: bad"));
    json_decref(o);
    o = api_error_json(API_MESSAGES, ERR_OVERLOADED, "busy", NULL);
    EXPECT(!strcmp(json_string_value(json_object_get(o, "type")), "error"));
    e = json_object_get(o, "error");
    EXPECT(!strcmp(json_string_value(json_object_get(e, "type")), "rate_limit_error"));
    json_decref(o);
    EXPECT_EQ_INT(err_http_status(ERR_UNAUTHORIZED), 401);
    EXPECT_EQ_INT(err_http_status(ERR_UNAVAILABLE), 503);
    EXPECT_EQ_INT(err_http_status(ERR_TOO_LARGE), 413);
    EXPECT(!strcmp(err_anthropic_type(ERR_NOT_FOUND), "not_found_error"));
    EXPECT(!strcmp(err_openai_type(ERR_UNAUTHORIZED), "authentication_error"));
    EXPECT(!strcmp(err_openai_type(ERR_INTERNAL), "server_error"));
}

static void fill(struct api_out *o, struct api_request *r, struct api_choice *c, int n)
{
    memset(o, 0, sizeof(*o));
    o->req = r;
    snprintf(o->id, sizeof(o->id), "resp_abc");
    o->model = "m";
    o->choices = c;
    o->n_choices = n;
    o->n_prompt_tokens = 40;
    o->n_cached_tokens = 32;
}

TEST(answers_carry_finish_and_usage)
{
    struct api_request r = {.kind = API_CHAT, .n = 2};
    char *stops[] = {"END"};
    r.stop[0] = stops[0];
    r.n_stop = 1;
    struct api_choice c[2] = {{.n_tokens = 3, .finish = API_FINISH_STOP_SEQ},
                              {.n_tokens = 5, .finish = API_FINISH_LENGTH}};
    buf_puts(&c[0].text, "abc");
    buf_puts(&c[1].text, "hello");
    struct api_out o;
    fill(&o, &r, c, 2);
    json_t *a = api_response(&o);
    json_t *ch = json_object_get(a, "choices");
    EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(ch, 0), "finish_reason")),
                   "stop"));
    EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(ch, 1), "finish_reason")),
                   "length"));
    json_t *u = json_object_get(a, "usage");
    EXPECT_EQ_INT(json_integer_value(json_object_get(u, "completion_tokens")), 8);
    EXPECT_EQ_INT(json_integer_value(json_object_get(u, "total_tokens")), 48);
    EXPECT_EQ_INT(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"),
                                                     "cached_tokens")),
                  32);
    json_decref(a);

    r.kind = API_MESSAGES;
    fill(&o, &r, c, 1);
    a = api_response(&o);
    EXPECT(!strcmp(json_string_value(json_object_get(a, "stop_reason")), "stop_sequence"));
    EXPECT(!strcmp(json_string_value(json_object_get(a, "stop_sequence")), "END"));
    u = json_object_get(a, "usage");
    EXPECT_EQ_INT(json_integer_value(json_object_get(u, "input_tokens")), 8);
    EXPECT_EQ_INT(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 32);
    json_decref(a);

    r.kind = API_RESPONSES;
    r.store = true;
    fill(&o, &r, c + 1, 1);
    a = api_response(&o);
    EXPECT(!strcmp(json_string_value(json_object_get(a, "status")), "incomplete"));
    json_decref(a);
    r.stop[0] = NULL;
    r.n_stop = 0;
    buf_release(&c[0].text);
    buf_release(&c[1].text);
}

TEST(stream_events_in_order)
{
    struct api_request r = {.kind = API_RESPONSES, .n = 1};
    struct api_choice c = {.n_tokens = 2, .finish = API_FINISH_EOG};
    buf_puts(&c.text, "hi");
    struct api_out o;
    fill(&o, &r, &c, 1);
    struct buf b = {0};
    api_stream_start(&o, &b);
    api_stream_delta(&o, 0, "hi", 2, NULL, &b);
    api_stream_choice_end(&o, 0, &b);
    api_stream_end(&o, &b);
    const char *want[] = {"response.created",           "response.in_progress",
                          "response.output_item.added", "response.content_part.added",
                          "response.output_text.delta", "response.output_text.done",
                          "response.content_part.done", "response.output_item.done",
                          "response.completed"};
    const char *p = buf_str(&b);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char line[96];
        snprintf(line, sizeof(line), "event: %s\n", want[i]);
        const char *at = strstr(p, line);
        EXPECT(at != NULL);
        if (at) p = at + strlen(line);
    }
    EXPECT_EQ_INT(o.seq, 9);
    EXPECT(strstr(buf_str(&b), "\"sequence_number\":8") != NULL);
    buf_release(&b);
    buf_release(&c.text);
}

/* Events in b, in order: each of want[] found after the previous one. */
static void expect_in_order(const struct buf *b, const char *const *want, size_t n)
{
    const char *p = buf_str(b);
    for (size_t i = 0; i < n; i++) {
        const char *at = strstr(p, want[i]);
        if (!at) {
            fprintf(stderr, "  missing (in order): %s\n", want[i]);
            test_failures_in_case++;
            return;
        }
        p = at + strlen(want[i]);
    }
}

/* Text, then a tool call: the text block closes when the call's opens. */
TEST(tool_calls_stream_and_answer)
{
    for (int api = 0; api < 3; api++) {
        struct api_request r = {.kind = api == 0   ? API_MESSAGES
                                        : api == 1 ? API_RESPONSES
                                                   : API_CHAT,
                                .n = 1};
        struct api_toolcall t = {.id = "call_X1", .name = "get_weather"};
        struct api_choice c = {.n_tokens = 9, .finish = API_FINISH_EOG, .calls = &t, .n_calls = 1};
        struct api_out o;
        fill(&o, &r, &c, 1);
        o.lazy_blocks = true;
        struct buf b = {0};
        api_stream_start(&o, &b);
        buf_puts(&c.text, "Sure.");
        api_stream_delta(&o, 0, "Sure.", 5, NULL, &b);
        api_stream_tool_start(&o, 0, 0, &b);
        buf_puts(&t.args, "{\"city\":");
        api_stream_tool_args(&o, 0, 0, "{\"city\":", 8, &b);
        buf_puts(&t.args, "\"Oslo\"}");
        api_stream_tool_args(&o, 0, 0, "\"Oslo\"}", 7, &b);
        api_stream_tool_end(&o, 0, 0, &b);
        api_stream_choice_end(&o, 0, &b);
        api_stream_end(&o, &b);
        json_t *a = api_response(&o);
        if (r.kind == API_MESSAGES) {
            const char *want[] = {
                "event: message_start",
                "event: ping",
                "\"index\":0,\"content_block\":{\"type\":\"text\"",
                "\"text_delta\",\"text\":\"Sure.\"",
                "{\"type\":\"content_block_stop\",\"index\":0}",
                ("\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_X1\","
                 "\"name\":\"get_weather\",\"input\":{}}"),
                "\"input_json_delta\",\"partial_json\":\"{\\\"city\\\":\"}",
                "{\"type\":\"content_block_stop\",\"index\":1}",
                "\"stop_reason\":\"tool_use\"",
                "event: message_stop"};
            expect_in_order(&b, want, sizeof(want) / sizeof(want[0]));
            json_t *content = json_object_get(a, "content");
            EXPECT_EQ_INT(json_array_size(content), 2);
            json_t *tu = json_array_get(content, 1);
            EXPECT(!strcmp(json_string_value(json_object_get(tu, "type")), "tool_use"));
            EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(tu, "input"), "city")),
                           "Oslo"));
            EXPECT(!strcmp(json_string_value(json_object_get(a, "stop_reason")), "tool_use"));
        } else if (r.kind == API_RESPONSES) {
            const char *want[] = {
                "event: response.output_item.added",
                "\"output_index\":0",
                "event: response.output_text.delta",
                "event: response.output_item.done",
                "event: response.output_item.added",
                "\"type\":\"function_call\",\"id\":\"fc_X1\",\"call_id\":\"call_X1\"",
                "event: response.function_call_arguments.delta",
                "event: response.function_call_arguments.done",
                "\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\",\"type\"",
                "event: response.output_item.done",
                "event: response.completed"};
            expect_in_order(&b, want, sizeof(want) / sizeof(want[0]));
            json_t *out = json_object_get(a, "output");
            EXPECT_EQ_INT(json_array_size(out), 2);
            EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(out, 1), "type")),
                           "function_call"));
        } else {
            const char *want[] = {"\"content\":\"Sure.\"",
                                  ("\"tool_calls\":[{\"index\":0,\"id\":\"call_X1\",\"type\":"
                                   "\"function\",\"function\":{\"name\":\"get_weather\","
                                   "\"arguments\":\"\"}}]"),
                                  "\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":",
                                  "\"finish_reason\":\"tool_calls\"", "data: [DONE]"};
            expect_in_order(&b, want, sizeof(want) / sizeof(want[0]));
            json_t *msg =
                json_object_get(json_array_get(json_object_get(a, "choices"), 0), "message");
            json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
            EXPECT(!strcmp(
                json_string_value(json_object_get(json_object_get(tc, "function"), "arguments")),
                "{\"city\":\"Oslo\"}"));
        }
        json_decref(a);
        buf_release(&b);
        buf_release(&c.text);
        buf_release(&t.args);
    }
}

static const char *err_code_of(json_t *o)
{
    return json_string_value(json_object_get(json_object_get(o, "error"), "code"));
}

TEST(error_codes)
{
    json_t *e, *o = api_error_json(API_CHAT, ERR_CONTEXT, "This model's maximum ...", "messages");
    EXPECT(err_code_of(o) && !strcmp(err_code_of(o), "context_length_exceeded"));
    EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(o, "error"), "type")),
                   "invalid_request_error"));
    EXPECT(!strcmp(json_string_value(json_object_get(json_object_get(o, "error"), "param")),
                   "messages"));
    json_decref(o);
    o = api_error_json(API_RESPONSES, ERR_NOT_FOUND, "model 'x' does not exist", "model");
    EXPECT(err_code_of(o) && !strcmp(err_code_of(o), "model_not_found"));
    json_decref(o);
    /* the others are as they were */
    o = api_error_json(API_CHAT, ERR_INVALID, "temperature: bad", "temperature");
    EXPECT(err_code_of(o) && !strcmp(err_code_of(o), "invalid_value"));
    json_decref(o);
    int nulls[] = {ERR_NOT_FOUND, ERR_OVERLOADED, ERR_TOO_LARGE, ERR_INTERNAL, ERR_UNAUTHORIZED};
    for (size_t i = 0; i < sizeof(nulls) / sizeof(nulls[0]); i++) {
        o = api_error_json(API_CHAT, nulls[i], "x", i ? NULL : "previous_response_id");
        EXPECT(json_is_null(json_object_get(json_object_get(o, "error"), "code")));
        json_decref(o);
    }
    /* a quote cut inside a character keeps the rest of the message */
    o = api_error_json(API_CHAT, ERR_INVALID, "metadata.\xc3\xa9\xc3: bad \xff key",
                       "metadata.\xc3");
    e = json_object_get(o, "error");
    EXPECT(!strcmp(json_string_value(json_object_get(e, "message")),
                   "metadata.\xc3\xa9\xef\xbf\xbd: bad \xef\xbf\xbd key"));
    EXPECT(!strcmp(json_string_value(json_object_get(e, "param")), "metadata.\xef\xbf\xbd"));
    json_decref(o);
    /* Anthropic: invalid_request_error, no code field */
    o = api_error_json(API_MESSAGES, ERR_CONTEXT, "prompt is too long: 9 tokens > 8 maximum",
                       "messages");
    e = json_object_get(o, "error");
    EXPECT(!strcmp(json_string_value(json_object_get(e, "type")), "invalid_request_error"));
    EXPECT(json_object_get(e, "code") == NULL);
    EXPECT_EQ_INT(json_object_size(e), 2);
    json_decref(o);
}

/* A streamed chat turn that is only a tool call opens with role and content
 * null; the finish reason is "stop" for a named function, "tool_calls"
 * otherwise (streamed and not). */
TEST(chat_tool_turn_shapes)
{
    static const enum api_tool_choice choices[] = {API_TOOL_CHOICE_NAMED, API_TOOL_CHOICE_REQUIRED,
                                                   API_TOOL_CHOICE_AUTO};
    for (size_t ci = 0; ci < sizeof(choices) / sizeof(choices[0]); ci++) {
        struct api_request r = {.kind = API_CHAT, .n = 1, .tool_choice = choices[ci]};
        struct api_toolcall t = {.id = "call_A", .name = "f"};
        struct api_choice c = {.n_tokens = 5, .finish = API_FINISH_EOG, .calls = &t, .n_calls = 1};
        struct api_out o;
        fill(&o, &r, &c, 1);
        o.lazy_blocks = true;
        struct buf b = {0};
        api_stream_start(&o, &b);
        EXPECT_EQ_INT(b.len, 0); /* the role waits for the first text or call */
        api_stream_tool_start(&o, 0, 0, &b);
        buf_puts(&t.args, "{}");
        api_stream_tool_args(&o, 0, 0, "{}", 2, &b);
        api_stream_tool_end(&o, 0, 0, &b);
        api_stream_choice_end(&o, 0, &b);
        api_stream_end(&o, &b);
        const char *first = strstr(buf_str(&b), "data: ");
        EXPECT(first && !strncmp(first + 6, "{", 1));
        json_t *chunk = first ? json_loadb(first + 6, strcspn(first + 6, "\n"), 0, NULL) : NULL;
        json_t *delta =
            json_object_get(json_array_get(json_object_get(chunk, "choices"), 0), "delta");
        EXPECT(!strcmp(json_string_value(json_object_get(delta, "role")) ?: "", "assistant"));
        EXPECT(json_is_null(json_object_get(delta, "content")));
        EXPECT_EQ_INT(json_array_size(json_object_get(delta, "tool_calls")), 1);
        json_decref(chunk);
        EXPECT(strstr(buf_str(&b), "\"content\":\"\"") == NULL);
        const char *want = choices[ci] == API_TOOL_CHOICE_NAMED
                               ? "\"finish_reason\":\"stop\""
                               : "\"finish_reason\":\"tool_calls\"";
        EXPECT(strstr(buf_str(&b), want) != NULL);
        json_t *a = api_response(&o);
        json_t *ch = json_array_get(json_object_get(a, "choices"), 0);
        EXPECT(!strcmp(json_string_value(json_object_get(ch, "finish_reason")),
                       choices[ci] == API_TOOL_CHOICE_NAMED ? "stop" : "tool_calls"));
        EXPECT(json_is_null(json_object_get(json_object_get(ch, "message"), "content")));
        json_decref(a);
        buf_release(&b);
        buf_release(&t.args);
    }
    /* tools parsed, but the answer is text: the role chunk (content "") comes
     * before the first text, once per choice */
    struct api_request r = {.kind = API_CHAT, .n = 2};
    struct api_choice c[2] = {{.n_tokens = 1, .finish = API_FINISH_EOG},
                              {.n_tokens = 0, .finish = API_FINISH_LENGTH}};
    struct api_out o;
    fill(&o, &r, c, 2);
    o.lazy_blocks = true;
    struct buf b = {0};
    api_stream_start(&o, &b);
    buf_puts(&c[0].text, "hi");
    api_stream_delta(&o, 0, "hi", 2, NULL, &b);
    api_stream_delta(&o, 0, "", 0, NULL, &b);
    api_stream_choice_end(&o, 0, &b);
    api_stream_choice_end(&o, 1, &b);
    const char *want[] = {
        "\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}",
        "\"index\":0,\"delta\":{\"content\":\"hi\"}",
        "\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}",
        "\"index\":1,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\""};
    expect_in_order(&b, want, sizeof(want) / sizeof(want[0]));
    const char *p = buf_str(&b);
    int n_roles = 0;
    while ((p = strstr(p, "\"role\""))) {
        n_roles++;
        p++;
    }
    EXPECT_EQ_INT(n_roles, 2);
    buf_release(&b);
    buf_release(&c[0].text);
    /* without tools the role chunks open the stream, as before */
    o.lazy_blocks = false;
    c[0].opened = c[1].opened = false;
    api_stream_start(&o, &b);
    EXPECT(strstr(buf_str(&b), "\"index\":1,\"delta\":{\"role\":\"assistant\"") != NULL);
    buf_release(&b);
}

/* Responses echoes text.format as sent and parallel_tool_calls. */
TEST(responses_echoes_text_format)
{
    const char *fmt = "{\"type\":\"json_schema\",\"name\":\"answer\",\"schema\":{\"type\":"
                      "\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}},\"strict\":true,"
                      "\"description\":\"d\"}";
    struct api_request r = {.kind = API_RESPONSES, .n = 1, .one_call = true};
    r.text_format = json_loads(fmt, 0, NULL);
    struct api_choice c = {.n_tokens = 1, .finish = API_FINISH_EOG};
    struct api_out o;
    fill(&o, &r, &c, 1);
    json_t *a = api_response(&o);
    EXPECT(json_equal(json_object_get(json_object_get(a, "text"), "format"), r.text_format));
    EXPECT(json_is_false(json_object_get(a, "parallel_tool_calls")));
    json_decref(a);
    struct buf b = {0};
    api_stream_start(&o, &b);
    EXPECT(strstr(buf_str(&b), "\"format\":{\"type\":\"json_schema\",\"name\":\"answer\"") != NULL);
    buf_release(&b);
    json_decref(r.text_format);
    r.text_format = NULL;
    r.one_call = false;
    a = api_response(&o);
    EXPECT(!strcmp(json_string_value(json_object_get(
                       json_object_get(json_object_get(a, "text"), "format"), "type")),
                   "text"));
    EXPECT(json_is_true(json_object_get(a, "parallel_tool_calls")));
    json_decref(a);
}

TEST_MAIN()
