/*
 * test_decode.c - request decoders: each API's fields land in the one
 * api_request shape, and bad input is refused with the field named.
 */
#include "test.h"

#include "api/api.h"

static int dec(int (*fn)(const char *, size_t, struct api_request *, struct err_msg *),
               const char *body, struct api_request *r, struct err_msg *m)
{
    memset(m, 0, sizeof(*m));
    return fn(body, strlen(body), r, m);
}

TEST(chat_fields)
{
    struct api_request r;
    struct err_msg m;
    EXPECT_EQ_INT(dec(openai_chat_decode,
                      "{\"model\":\"x\",\"messages\":[{\"role\":\"developer\",\"content\":\"be "
                      "brief\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi "
                      "\"},{\"type\":\"text\",\"text\":\"there\"}]}],\"temperature\":0.5,"
                      "\"top_k\":7,\"stop\":[\"a\",\"b\"],\"n\":3,\"max_completion_tokens\":9,"
                      "\"logprobs\":true,\"top_logprobs\":2,\"logit_bias\":{\"42\":-100},"
                      "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"seed\":5}",
                      &r, &m),
                  0);
    EXPECT(!strcmp(r.model, "x"));
    EXPECT_EQ_INT(json_array_size(r.messages), 2);
    EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(r.messages, 0), "role")),
                   "system"));
    EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(r.messages, 1), "content")),
                   "hi there"));
    EXPECT_NEAR(r.sp.temperature, 0.5, 0);
    EXPECT_EQ_INT(r.sp.top_k, 7);
    EXPECT_EQ_INT(r.n_stop, 2);
    EXPECT_EQ_INT(r.n, 3);
    EXPECT_EQ_INT(r.max_tokens, 9);
    EXPECT(r.logprobs && r.top_logprobs == 2);
    EXPECT_EQ_INT(r.n_bias, 1);
    EXPECT_EQ_INT(r.sp.logit_bias[0].token, 42);
    EXPECT(r.stream && r.include_usage);
    EXPECT_EQ_INT(r.sp.seed, 5);
    api_request_release(&r);
}

TEST(chat_errors_name_the_field)
{
    struct api_request r;
    struct err_msg m;
    const char *cases[][2] = {
        {"[1]", "body"},
        {"{bad", "body"},
        {"{\"messages\":[]}", "messages"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "messages[0].role"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
         "messages[0].content[0]"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":[\"a\",\"b\",\"c\",\"d\","
         "\"e\"]}",
         "stop"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}",
         "top_logprobs"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logit_bias\":{\"a\":1}}",
         "logit_bias"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":0}", "n"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":\"5\"}",
         "max_tokens"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        EXPECT_EQ_INT(dec(openai_chat_decode, cases[i][0], &r, &m), ERR_INVALID);
        if (strcmp(r.bad_param, cases[i][1]))
            fprintf(stderr, "  case %zu: param '%s' (%s)\n", i, r.bad_param, m.text);
        EXPECT(!strcmp(r.bad_param, cases[i][1]));
        EXPECT(!strncmp(m.text, cases[i][1], strlen(cases[i][1])));
        api_request_release(&r);
    }
}

TEST(completion_prompts)
{
    struct api_request r;
    struct err_msg m;
    EXPECT_EQ_INT(dec(openai_completion_decode, "{\"prompt\":\"hello\"}", &r, &m), 0);
    EXPECT_EQ_INT(r.n_prompts, 1);
    EXPECT(!strcmp(r.prompts[0].text, "hello"));
    EXPECT_EQ_INT(r.max_tokens, 16);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(openai_completion_decode, "{\"prompt\":[1,2,3],\"logprobs\":2}", &r, &m), 0);
    EXPECT_EQ_INT(r.n_prompts, 1);
    EXPECT_EQ_INT(r.prompts[0].ids.n, 3);
    EXPECT(r.logprobs && r.top_logprobs == 2);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(openai_completion_decode, "{\"prompt\":[\"a\",[7,8]]}", &r, &m), 0);
    EXPECT_EQ_INT(r.n_prompts, 2);
    EXPECT_EQ_INT(r.prompts[1].ids.v[1], 8);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(openai_completion_decode, "{\"prompt\":[1,-2]}", &r, &m), ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "prompt[1]"));
    api_request_release(&r);
    EXPECT_EQ_INT(dec(openai_completion_decode, "{}", &r, &m), ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "prompt"));
    api_request_release(&r);
}

TEST(responses_input)
{
    struct api_request r;
    struct err_msg m;
    EXPECT_EQ_INT(dec(responses_decode,
                      "{\"input\":\"hi\",\"instructions\":\"sys\",\"previous_response_id\":"
                      "\"resp_1\",\"store\":false,\"max_output_tokens\":4}",
                      &r, &m),
                  0);
    EXPECT_EQ_INT(json_array_size(r.input_items), 1);
    EXPECT(!strcmp(r.instructions, "sys"));
    EXPECT(!strcmp(r.previous_response_id, "resp_1"));
    EXPECT(!r.store && r.max_tokens == 4);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(responses_decode,
                      "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                      "\"text\":\"a\"}]},{\"type\":\"function_call\"}]}",
                      &r, &m),
                  ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "input[1].call_id"));
    api_request_release(&r);
    EXPECT_EQ_INT(dec(responses_decode, "{\"input\":[{\"type\":\"image\"}]}", &r, &m), ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "input[0].type"));
    api_request_release(&r);
    /* function calls: parallel ones join one assistant turn; outputs are tool messages */
    EXPECT_EQ_INT(
        dec(responses_decode,
            "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"type\":\"function_call\","
            "\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},{\"type\":\"function_call\","
            "\"call_id\":\"c2\",\"name\":\"g\",\"arguments\":\"{\\\"a\\\":1}\"},{\"type\":"
            "\"function_call_output\",\"call_id\":\"c1\",\"output\":\"r1\"}],\"tools\":[{\"type\":"
            "\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],\"tool_choice\":"
            "{\"type\":\"function\",\"name\":\"f\"}}",
            &r, &m),
        0);
    EXPECT_EQ_INT(json_array_size(r.input_items), 3);
    json_t *a = json_array_get(r.input_items, 1);
    EXPECT(json_is_null(json_object_get(a, "content")));
    EXPECT_EQ_INT(json_array_size(json_object_get(a, "tool_calls")), 2);
    json_t *t = json_array_get(r.input_items, 2);
    EXPECT(!strcmp(json_string_value(json_object_get(t, "role")), "tool"));
    EXPECT(!strcmp(json_string_value(json_object_get(t, "tool_call_id")), "c1"));
    EXPECT(r.tool_choice == API_TOOL_CHOICE_NAMED && !strcmp(r.tool_name, "f"));
    EXPECT(!strcmp(json_string_value(json_object_get(
                       json_object_get(json_array_get(r.tools, 0), "function"), "name")),
                   "f"));
    api_request_release(&r);
}

TEST(tool_choice_forms)
{
    struct api_request r;
    struct err_msg m;
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    char body[512];
    static const struct {
        const char *choice;
        int rc;
        enum api_tool_choice want;
    } chat[] = {
        {"\"auto\"", 0, API_TOOL_CHOICE_AUTO},
        {"\"none\"", 0, API_TOOL_CHOICE_NONE},
        {"\"required\"", 0, API_TOOL_CHOICE_REQUIRED},
        {"{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", 0, API_TOOL_CHOICE_NAMED},
        {"{\"type\":\"function\",\"function\":{\"name\":\"g\"}}", ERR_INVALID, 0},
        {"\"any\"", ERR_INVALID, 0},
        {"5", ERR_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof(chat) / sizeof(chat[0]); i++) {
        snprintf(body, sizeof(body),
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
                 "\"tool_choice\":%s}",
                 tools, chat[i].choice);
        EXPECT_EQ_INT(dec(openai_chat_decode, body, &r, &m), chat[i].rc);
        if (!chat[i].rc) EXPECT_EQ_INT(r.tool_choice, chat[i].want);
        if (chat[i].rc) EXPECT(!strcmp(r.bad_param, "tool_choice"));
        api_request_release(&r);
    }
    /* forced + response_format: both would constrain the output */
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],%s,"
             "\"tool_choice\":\"required\",\"regex\":\"a\"}",
             tools);
    EXPECT_EQ_INT(dec(openai_chat_decode, body, &r, &m), ERR_INVALID);
    EXPECT(strstr(m.text, "cannot be combined") != NULL);
    api_request_release(&r);
    /* tool names are plain identifiers */
    EXPECT_EQ_INT(dec(openai_chat_decode,
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":"
                      "\"function\",\"function\":{\"name\":\"a\\\"b\"}}]}",
                      &r, &m),
                  ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "tools[0].function.name"));
    api_request_release(&r);
    /* forced without tools */
    EXPECT_EQ_INT(dec(openai_chat_decode,
                      "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":"
                      "\"required\"}",
                      &r, &m),
                  ERR_INVALID);
    api_request_release(&r);
    /* Anthropic: any / tool / auto / none */
    static const struct {
        const char *choice;
        int rc;
        enum api_tool_choice want;
    } an[] = {
        {"{\"type\":\"any\"}", 0, API_TOOL_CHOICE_REQUIRED},
        {"{\"type\":\"tool\",\"name\":\"f\"}", 0, API_TOOL_CHOICE_NAMED},
        {"{\"type\":\"none\"}", 0, API_TOOL_CHOICE_NONE},
        {"{\"type\":\"tool\"}", ERR_INVALID, 0},
        {"{\"type\":\"required\"}", ERR_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof(an) / sizeof(an[0]); i++) {
        snprintf(body, sizeof(body),
                 "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":"
                 "\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":"
                 "{\"type\":\"object\"}}],\"tool_choice\":%s}",
                 an[i].choice);
        EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), an[i].rc);
        if (!an[i].rc) EXPECT_EQ_INT(r.tool_choice, an[i].want);
        api_request_release(&r);
    }
}

TEST(anthropic_tool_blocks)
{
    struct api_request r;
    struct err_msg m;
    EXPECT_EQ_INT(
        dec(anthropic_decode,
            "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
            "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Let me see.\"},"
            "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\",\"input\":{\"a\":1}}]},"
            "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
            "\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]},{\"type\":\"text\",\"text\":"
            "\"thanks\"}]}]}",
            &r, &m),
        0);
    /* user, assistant (text + tool_calls), tool, user */
    EXPECT_EQ_INT(json_array_size(r.messages), 4);
    json_t *a = json_array_get(r.messages, 1);
    EXPECT(!strcmp(json_string_value(json_object_get(a, "content")), "Let me see."));
    json_t *call = json_array_get(json_object_get(a, "tool_calls"), 0);
    EXPECT(!strcmp(json_string_value(json_object_get(call, "id")), "t1"));
    EXPECT(
        !strcmp(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
                "{\"a\":1}"));
    json_t *t = json_array_get(r.messages, 2);
    EXPECT(!strcmp(json_string_value(json_object_get(t, "role")), "tool"));
    EXPECT(!strcmp(json_string_value(json_object_get(t, "content")), "ok"));
    EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(r.messages, 3), "content")),
                   "thanks"));
    api_request_release(&r);
    /* a tool_result alone adds no empty user turn; tool_use needs an object input */
    EXPECT_EQ_INT(dec(anthropic_decode,
                      "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\","
                      "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":"
                      "\"r\"}]}]}",
                      &r, &m),
                  0);
    EXPECT_EQ_INT(json_array_size(r.messages), 1);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(anthropic_decode,
                      "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"assistant\","
                      "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":"
                      "5}]}]}",
                      &r, &m),
                  ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "messages[0].content[0]"));
    api_request_release(&r);
    EXPECT_EQ_INT(dec(anthropic_decode,
                      "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\","
                      "\"content\":[{\"type\":\"image\"}]}]}",
                      &r, &m),
                  ERR_INVALID);
    api_request_release(&r);
}

TEST(anthropic_fields)
{
    struct api_request r;
    struct err_msg m;
    EXPECT_EQ_INT(dec(anthropic_decode,
                      "{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":"
                      "\"S\"}],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                      "\"stop_sequences\":[\"x\"],\"top_k\":3,\"metadata\":{\"user_id\":\"u\"}}",
                      &r, &m),
                  0);
    EXPECT_EQ_INT(json_array_size(r.messages), 2);
    EXPECT_EQ_INT(r.max_tokens, 5);
    EXPECT_EQ_INT(r.n_stop, 1);
    EXPECT(!strcmp(r.user, "u"));
    api_request_release(&r);
    EXPECT_EQ_INT(dec(anthropic_decode,
                      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r,
                      &m),
                  ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "max_tokens"));
    api_request_release(&r);
    EXPECT_EQ_INT(dec(anthropic_count_decode,
                      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &r,
                      &m),
                  0);
    api_request_release(&r);
}

TEST_MAIN()
