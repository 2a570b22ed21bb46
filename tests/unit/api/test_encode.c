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

TEST_MAIN()
