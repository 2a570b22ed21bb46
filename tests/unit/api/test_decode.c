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

typedef int (*decode_fn)(const char *, size_t, struct api_request *, struct err_msg *);

#define CHAT_MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"
#define AN_BODY                                                                                    \
    "\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

/* Fields for features inferd lacks: refused naming the field, unless their
 * value asks for nothing. */
TEST(unsupported_fields)
{
    struct api_request r;
    struct err_msg m;
    static const struct {
        int api; /* 0 chat, 1 completions, 2 responses, 3 messages */
        const char *field;
        const char *param;
    } refused[] = {
        {0, "\"audio\":{\"voice\":\"alloy\",\"format\":\"wav\"}", "audio"},
        {0, "\"modalities\":[\"text\",\"audio\"]", "modalities"},
        {0, "\"functions\":[{\"name\":\"f\"}]", "functions"},
        {0, "\"function_call\":\"auto\"", "function_call"},
        {0, "\"web_search_options\":{}", "web_search_options"},
        {0, "\"reasoning_effort\":\"high\"", "reasoning_effort"},
        {0, "\"verbosity\":\"low\"", "verbosity"},
        {0, "\"moderation\":{}", "moderation"},
        {1, "\"best_of\":3", "best_of"},
        {1, "\"suffix\":\"end\"", "suffix"},
        {2, "\"background\":true", "background"},
        {2, "\"conversation\":\"conv_1\"", "conversation"},
        {2, "\"prompt\":{\"id\":\"pmpt_1\"}", "prompt"},
        {2, "\"context_management\":[{\"type\":\"compaction\"}]", "context_management"},
        {2, "\"reasoning\":{\"effort\":\"low\"}", "reasoning.effort"},
        {2, "\"reasoning\":\"low\"", "reasoning"},
        {2, "\"text\":{\"verbosity\":\"high\"}", "text.verbosity"},
        {2, "\"top_logprobs\":2", "top_logprobs"},
        {2, "\"include\":[\"message.output_text.logprobs\"]", "include"},
        {2, "\"tools\":[{\"type\":\"web_search\"}]", "tools[0]"},
        {2, "\"tools\":[{\"type\":\"file_search\",\"vector_store_ids\":[]}]", "tools[0]"},
        {2, "\"tools\":[{\"type\":\"code_interpreter\"}]", "tools[0]"},
        {2, "\"tools\":[{\"type\":\"computer_use_preview\"}]", "tools[0]"},
        {2, "\"tools\":[{\"type\":\"mcp\",\"server_label\":\"x\"}]", "tools[0]"},
        {2, "\"tools\":[{\"type\":\"image_generation\"}]", "tools[0]"},
        {2, "\"tool_choice\":{\"type\":\"web_search_preview\"}", "tool_choice"},
        {3, "\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]", "tools[0]"},
        {3, "\"tools\":[{\"type\":\"code_execution_20250825\",\"name\":\"code_execution\"}]",
         "tools[0]"},
        {3, "\"tools\":[{\"type\":\"bash_20250124\",\"name\":\"bash\"}]", "tools[0]"},
        {3,
         "\"tools\":[{\"type\":\"text_editor_20250728\",\"name\":\"str_replace_based_edit_tool\"}]",
         "tools[0]"},
        {3, "\"tools\":[{\"type\":\"computer_20250124\",\"name\":\"computer\"}]", "tools[0]"},
        {3, "\"tools\":[{\"type\":\"web_fetch_20250910\",\"name\":\"web_fetch\"}]", "tools[0]"},
        {3, "\"mcp_servers\":[{\"type\":\"url\",\"url\":\"https://x\",\"name\":\"x\"}]",
         "mcp_servers"},
        {3, "\"container\":\"cntr_1\"", "container"},
        {3, "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}", "thinking"},
        {3, "\"thinking\":{\"type\":\"adaptive\"}", "thinking"},
        {3, "\"output_config\":{\"effort\":\"low\"}", "output_config.effort"},
        {3, "\"context_management\":{\"edits\":[]}", "context_management"},
        {3, "\"compaction\":{}", "compaction"},
        {3, "\"thread\":{\"type\":\"create\"}", "thread"},
    };
    /* values that ask for nothing, as SDKs and frameworks send them */
    static const struct {
        int api;
        const char *field;
    } accepted[] = {
        {0, "\"audio\":null,\"modalities\":[\"text\"],\"functions\":[],\"prediction\":{\"type\":"
            "\"content\",\"content\":\"x\"},\"reasoning_effort\":\"none\",\"verbosity\":\"medium\","
            "\"store\":true,\"service_tier\":\"auto\",\"prompt_cache_key\":\"k\","
            "\"safety_identifier\":\"s\",\"parallel_tool_calls\":true,\"stream_options\":"
            "{\"include_obfuscation\":false},\"web_search_options\":null,\"future_field\":1"},
        {1, "\"best_of\":1,\"suffix\":\"\",\"user\":\"u\""},
        {2, "\"background\":false,\"conversation\":null,\"prompt\":null,\"reasoning\":{\"effort\":"
            "\"none\",\"summary\":\"auto\"},\"text\":{\"verbosity\":\"medium\"},\"include\":"
            "[\"reasoning.encrypted_content\",\"file_search_call.results\"],\"top_logprobs\":0,"
            "\"truncation\":\"auto\",\"service_tier\":\"flex\",\"context_management\":[],"
            "\"prompt_cache_retention\":\"24h\""},
        {3, "\"thinking\":{\"type\":\"disabled\"},\"output_config\":{\"effort\":\"high\"},"
            "\"mcp_servers\":[],\"container\":null,\"service_tier\":\"auto\",\"speed\":\"fast\","
            "\"inference_geo\":\"us\",\"cache_control\":{\"type\":\"ephemeral\"},\"tools\":"
            "[{\"type\":\"custom\",\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]"},
    };
    static const decode_fn fns[] = {openai_chat_decode, openai_completion_decode, responses_decode,
                                    anthropic_decode};
    static const char *const base[] = {CHAT_MSGS, "\"prompt\":\"x\"", "\"input\":\"x\"", AN_BODY};
    char body[1024];
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        snprintf(body, sizeof(body), "{%s,%s}", base[refused[i].api], refused[i].field);
        EXPECT_EQ_INT(dec(fns[refused[i].api], body, &r, &m), ERR_INVALID);
        if (strcmp(r.bad_param, refused[i].param))
            fprintf(stderr, "  refused case %zu: param '%s' (%s)\n", i, r.bad_param, m.text);
        EXPECT(!strcmp(r.bad_param, refused[i].param));
        EXPECT(!strncmp(m.text, refused[i].param, strlen(refused[i].param)));
        api_request_release(&r);
    }
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++) {
        snprintf(body, sizeof(body), "{%s,%s}", base[accepted[i].api], accepted[i].field);
        int rc = dec(fns[accepted[i].api], body, &r, &m);
        if (rc) fprintf(stderr, "  accepted case %zu: %s\n", i, m.text);
        EXPECT_EQ_INT(rc, 0);
        api_request_release(&r);
    }
    /* the refusal says why */
    snprintf(body, sizeof(body), "{%s,\"background\":true}", base[2]);
    EXPECT_EQ_INT(dec(responses_decode, body, &r, &m), ERR_INVALID);
    EXPECT(strstr(m.text, "not supported") != NULL);
    api_request_release(&r);
}

TEST(metadata_limits)
{
    struct api_request r;
    struct err_msg m;
    char body[8192], md[6144];
    /* 16 keys of 64 characters with 512-character values pass (chat and responses) */
    char key[65], val[513];
    memset(val, 'v', 512);
    val[512] = 0;
    size_t o = 0;
    for (int k = 0; k < 16; k++) {
        snprintf(key, sizeof(key), "%02d%062d", k, 0);
        o += (size_t)snprintf(md + o, sizeof(md) - o, "%s\"%s\":\"%s\"", k ? "," : "", key,
                              k ? "v" : val);
    }
    snprintf(body, sizeof(body), "{%s,\"metadata\":{%s}}", CHAT_MSGS, md);
    EXPECT_EQ_INT(dec(openai_chat_decode, body, &r, &m), 0);
    EXPECT_EQ_INT(json_object_size(r.metadata), 16);
    api_request_release(&r);
    snprintf(body, sizeof(body), "{\"input\":\"x\",\"metadata\":{%s}}", md);
    EXPECT_EQ_INT(dec(responses_decode, body, &r, &m), 0);
    api_request_release(&r);
    /* multi-byte characters count once: 512 x "é" is 1024 bytes */
    o = 0;
    for (int k = 0; k < 512; k++)
        o += (size_t)snprintf(md + o, sizeof(md) - o, "\xc3\xa9");
    snprintf(body, sizeof(body), "{\"input\":\"x\",\"metadata\":{\"k\":\"%s\"}}", md);
    EXPECT_EQ_INT(dec(responses_decode, body, &r, &m), 0);
    api_request_release(&r);
    snprintf(body, sizeof(body), "{\"input\":\"x\",\"metadata\":{\"k\":\"%s\xc3\xa9\"}}", md);
    EXPECT_EQ_INT(dec(responses_decode, body, &r, &m), ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "metadata.k"));
    api_request_release(&r);
    static const struct {
        const char *md;
        const char *param;
    } bad[] = {
        {"{\"a\":1}", "metadata.a"},
        {"[1]", "metadata"},
        {"{\"k\":\"" /* 513 characters */
         "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
         "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
         "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
         "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
         "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
         "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\"}",
         "metadata.k"},
        {"{\"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\":\"v\"}",
         "metadata.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"},
        {"{\"a\":\"1\",\"b\":\"1\",\"c\":\"1\",\"d\":\"1\",\"e\":\"1\",\"f\":\"1\",\"g\":\"1\","
         "\"h\":\"1\",\"i\":\"1\",\"j\":\"1\",\"k\":\"1\",\"l\":\"1\",\"m\":\"1\",\"n\":\"1\","
         "\"o\":\"1\",\"p\":\"1\",\"q\":\"1\"}",
         "metadata"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (int api = 0; api < 2; api++) {
            snprintf(body, sizeof(body), "{%s,\"metadata\":%s}",
                     api ? "\"input\":\"x\"" : CHAT_MSGS, bad[i].md);
            EXPECT_EQ_INT(dec(api ? responses_decode : openai_chat_decode, body, &r, &m),
                          ERR_INVALID);
            if (strcmp(r.bad_param, bad[i].param))
                fprintf(stderr, "  metadata case %zu/%d: param '%s' (%s)\n", i, api, r.bad_param,
                        m.text);
            EXPECT(!strcmp(r.bad_param, bad[i].param));
            api_request_release(&r);
        }
    }
    /* Anthropic: user_id only, a string of up to 256 characters */
    snprintf(body, sizeof(body), "{%s,\"metadata\":{\"user_id\":\"u\",\"session\":\"s\"}}",
             AN_BODY);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "metadata.session"));
    api_request_release(&r);
    memset(md, 'u', 257);
    md[257] = 0;
    snprintf(body, sizeof(body), "{%s,\"metadata\":{\"user_id\":\"%s\"}}", AN_BODY, md);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "metadata.user_id"));
    api_request_release(&r);
    md[256] = 0;
    snprintf(body, sizeof(body), "{%s,\"metadata\":{\"user_id\":\"%s\"}}", AN_BODY, md);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), 0);
    EXPECT_EQ_INT(strlen(r.user), 256);
    api_request_release(&r);
    snprintf(body, sizeof(body), "{%s,\"metadata\":{\"user_id\":null}}", AN_BODY);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), 0);
    EXPECT(r.user == NULL);
    api_request_release(&r);
}

/* What @anthropic-ai/sdk's messages.parse sends (output_config.format) and
 * the beta's output_format, both {"type": "json_schema", "schema"}. */
TEST(anthropic_output_format)
{
    struct api_request r;
    struct err_msg m;
    char body[1024];
    const char *schema = "{\"type\":\"object\",\"properties\":{\"answer\":{\"type\":\"number\"}},"
                         "\"required\":[\"answer\"],\"additionalProperties\":false}";
    snprintf(body, sizeof(body),
             "{%s,\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":%s}}}",
             AN_BODY, schema);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), 0);
    EXPECT_EQ_INT(r.grammar_kind, INFERD_GRAMMAR_JSON_SCHEMA);
    EXPECT(r.grammar_src && !strcmp(r.grammar_src, schema));
    api_request_release(&r);
    snprintf(body, sizeof(body), "{%s,\"output_format\":{\"type\":\"json_schema\",\"schema\":%s}}",
             AN_BODY, schema);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), 0);
    EXPECT_EQ_INT(r.grammar_kind, INFERD_GRAMMAR_JSON_SCHEMA);
    EXPECT(r.grammar_src && !strcmp(r.grammar_src, schema));
    api_request_release(&r);
    /* count_tokens takes the same body */
    EXPECT_EQ_INT(dec(anthropic_count_decode, body, &r, &m), 0);
    api_request_release(&r);
    static const struct {
        const char *field;
        const char *param;
    } bad[] = {
        {"\"output_format\":{\"type\":\"json_schema\",\"schema\":{}},\"output_config\":{\"format\":"
         "{\"type\":\"json_schema\",\"schema\":{}}}",
         "output_format"},
        {"\"output_config\":{\"format\":{\"type\":\"json_object\"}}", "output_config.format.type"},
        {"\"output_config\":{\"format\":{\"type\":\"json_schema\"}}",
         "output_config.format.schema"},
        {"\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":[]}}",
         "output_config.format.schema"},
        {"\"output_config\":5", "output_config"},
        {"\"output_format\":\"json\"", "output_format"},
        {"\"output_format\":{\"type\":\"json_schema\",\"schema\":{}},\"tools\":[{\"name\":\"f\"}],"
         "\"tool_choice\":{\"type\":\"any\"}",
         "tool_choice"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(body, sizeof(body), "{%s,%s}", AN_BODY, bad[i].field);
        EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), ERR_INVALID);
        if (strcmp(r.bad_param, bad[i].param))
            fprintf(stderr, "  output_format case %zu: param '%s' (%s)\n", i, r.bad_param, m.text);
        EXPECT(!strcmp(r.bad_param, bad[i].param));
        api_request_release(&r);
    }
    /* null is absent */
    snprintf(body, sizeof(body), "{%s,\"output_format\":null,\"output_config\":{\"format\":null}}",
             AN_BODY);
    EXPECT_EQ_INT(dec(anthropic_decode, body, &r, &m), 0);
    EXPECT_EQ_INT(r.grammar_kind, INFERD_GRAMMAR_NONE);
    api_request_release(&r);
}

TEST(one_call_and_text_format)
{
    struct api_request r;
    struct err_msg m;
    EXPECT_EQ_INT(dec(openai_chat_decode, "{" CHAT_MSGS ",\"parallel_tool_calls\":false}", &r, &m),
                  0);
    EXPECT(r.one_call);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(openai_chat_decode, "{" CHAT_MSGS "}", &r, &m), 0);
    EXPECT(!r.one_call);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(openai_chat_decode, "{" CHAT_MSGS ",\"parallel_tool_calls\":1}", &r, &m),
                  ERR_INVALID);
    EXPECT(!strcmp(r.bad_param, "parallel_tool_calls"));
    api_request_release(&r);
    EXPECT_EQ_INT(dec(responses_decode, "{\"input\":\"x\",\"parallel_tool_calls\":false}", &r, &m),
                  0);
    EXPECT(r.one_call);
    api_request_release(&r);
    EXPECT_EQ_INT(dec(anthropic_decode,
                      "{" AN_BODY
                      ",\"tools\":[{\"name\":\"f\"}],\"tool_choice\":{\"type\":\"auto\","
                      "\"disable_parallel_tool_use\":true}}",
                      &r, &m),
                  0);
    EXPECT(r.one_call);
    api_request_release(&r);
    /* Responses keeps text.format as sent, for the echo */
    const char *fmt = "{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":{\"type\":\"object\"},"
                      "\"strict\":true,\"description\":\"d\"}";
    char body[512];
    snprintf(body, sizeof(body), "{\"input\":\"x\",\"text\":{\"format\":%s}}", fmt);
    EXPECT_EQ_INT(dec(responses_decode, body, &r, &m), 0);
    json_t *want = json_loads(fmt, 0, NULL);
    EXPECT(r.text_format && json_equal(r.text_format, want));
    json_decref(want);
    api_request_release(&r);
}

TEST(context_errors)
{
    struct err_msg m = {{0}};
    static const struct {
        enum api_kind kind;
        int max_tokens, n_prompt;
        const char *param, *text;
    } cases[] = {
        {API_CHAT, 0, 1024, "messages",
         "This model's maximum context length is 1024 tokens. However, your messages resulted in "
         "1024 tokens. Please reduce the length of the messages."},
        {API_CHAT, 100, 1000, "messages",
         "This model's maximum context length is 1024 tokens. However, you requested 1100 tokens "
         "(1000 in the messages, 100 in the completion). Please reduce the length of the messages "
         "or completion."},
        {API_COMPLETION, 16, 1020, "prompt",
         "This model's maximum context length is 1024 tokens, however you requested 1036 tokens "
         "(1020 in your prompt; 16 for the completion). Please reduce your prompt; or completion "
         "length."},
        {API_RESPONSES, 0, 2000, "input", "Your input exceeds the context window of this model."},
        {API_MESSAGES, 10, 1500, "messages", "prompt is too long: 1500 tokens > 1023 maximum"},
        {API_MESSAGES, 100, 1000, "messages",
         "input length and `max_tokens` exceed context limit: 1000 + 100 > 1024, decrease input "
         "length or `max_tokens` and try again"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct api_request r = {.kind = cases[i].kind, .max_tokens = cases[i].max_tokens};
        EXPECT_EQ_INT(api_check_context(&r, cases[i].n_prompt, 1024, &m), ERR_CONTEXT);
        EXPECT(!strcmp(r.bad_param, cases[i].param));
        if (strncmp(m.text, cases[i].text, strlen(cases[i].text)))
            fprintf(stderr, "  context case %zu: %s\n", i, m.text);
        EXPECT(!strncmp(m.text, cases[i].text, strlen(cases[i].text)));
    }
    /* fits: room for the answer, exactly */
    struct api_request r = {.kind = API_CHAT};
    EXPECT_EQ_INT(api_check_context(&r, 1023, 1024, &m), 0);
    r.max_tokens = 24;
    EXPECT_EQ_INT(api_check_context(&r, 1000, 1024, &m), 0);
    EXPECT_EQ_INT(api_check_context(&r, 1001, 1024, &m), ERR_CONTEXT);
    EXPECT_EQ_INT(err_http_status(ERR_CONTEXT), 400);
    EXPECT(!strcmp(err_openai_type(ERR_CONTEXT), "invalid_request_error"));
    EXPECT(!strcmp(err_anthropic_type(ERR_CONTEXT), "invalid_request_error"));
}

TEST(tokenize_bodies)
{
    struct api_tokenize t;
    struct err_msg m = {{0}};
    const char *b = "{\"prompt\":\"hello\",\"add_special\":false}";
    EXPECT_EQ_INT(api_tokenize_decode(b, strlen(b), &t, &m), 0);
    EXPECT(t.text && !strcmp(t.text, "hello") && !t.add_special && !t.messages);
    api_tokenize_release(&t);
    b = "{\"text\":\"hi\"}";
    EXPECT_EQ_INT(api_tokenize_decode(b, strlen(b), &t, &m), 0);
    EXPECT(t.text && !strcmp(t.text, "hi") && t.add_special);
    api_tokenize_release(&t);
    b = "{\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}";
    EXPECT_EQ_INT(api_tokenize_decode(b, strlen(b), &t, &m), 0);
    EXPECT(!t.text && json_array_size(t.messages) == 2);
    EXPECT(!strcmp(json_string_value(json_object_get(json_array_get(t.messages, 1), "content")),
                   "ab"));
    api_tokenize_release(&t);
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"[]", "body"},
        {"{\"prompt\":5}", "prompt"},
        {"{}", "prompt"},
        {"{\"prompt\":\"x\",\"add_special\":\"yes\"}", "add_special"},
        {"{\"messages\":[]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        EXPECT_EQ_INT(api_tokenize_decode(bad[i].body, strlen(bad[i].body), &t, &m), ERR_INVALID);
        EXPECT(!strcmp(t.bad_param, bad[i].param));
        EXPECT(!strncmp(m.text, bad[i].param, strlen(bad[i].param)));
        api_tokenize_release(&t);
    }
    b = "{\"tokens\":[1,2,99]}";
    EXPECT_EQ_INT(api_detokenize_decode(b, strlen(b), 100, &t, &m), 0);
    EXPECT(t.ids.n == 3 && t.ids.v[2] == 99);
    api_tokenize_release(&t);
    b = "{\"tokens\":[1,100]}";
    EXPECT_EQ_INT(api_detokenize_decode(b, strlen(b), 100, &t, &m), ERR_INVALID);
    EXPECT(!strcmp(t.bad_param, "tokens[1]"));
    EXPECT(!strcmp(m.text, "tokens[1]: expected a token id in [0, 100)"));
    api_tokenize_release(&t);
    b = "{\"tokens\":\"1\"}";
    EXPECT_EQ_INT(api_detokenize_decode(b, strlen(b), 100, &t, &m), ERR_INVALID);
    EXPECT(!strcmp(m.text, "tokens: expected an array of token ids"));
    api_tokenize_release(&t);
}

TEST(longest_string_counts_decoded_bytes)
{
    const char *b = "{\"a\":\"xyz\",\"b\":[\"\\n\\\"\\u00e9\\u4e2d\\ud83d\\ude00ok\"],\"c\":1}";
    /* "\n\"" 2 bytes, e-acute 2, a CJK character 3, a surrogate pair 4, "ok" 2 */
    EXPECT_EQ_INT(api_json_longest_string(b, strlen(b)), 13);
    EXPECT_EQ_INT(api_json_longest_string("{}", 2), 0);
    EXPECT_EQ_INT(api_json_longest_string("{\"k\":\"abc", 9), 3); /* cut short */
    const char *keys = "{\"a-long-key-here\":\"v\"}";
    EXPECT_EQ_INT(api_json_longest_string(keys, strlen(keys)), 15);
    /* the parser agrees on a long string */
    char big[4200];
    int n = snprintf(big, sizeof(big), "{\"prompt\":\"");
    for (int i = 0; i < 500; i++)
        n += snprintf(big + n, sizeof(big) - (size_t)n, "\\u00e9");
    n += snprintf(big + n, sizeof(big) - (size_t)n, "\"}");
    json_t *v = json_loadb(big, (size_t)n, 0, NULL);
    EXPECT(v != NULL);
    EXPECT_EQ_INT(api_json_longest_string(big, (size_t)n),
                  json_string_length(json_object_get(v, "prompt")));
    json_decref(v);
}

TEST_MAIN()
