/*
 * test_resources.c - model objects in both APIs' shapes, route and query
 * parsing, and a stored response's input items (ids, order, pages, cursors).
 */
#include "test.h"

#include "api/encode.h"
#include "api/resources.h"

static const char *str(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

TEST(models_in_each_shape)
{
    struct api_model_info m[2] = {
        {.id = "tiny", .created = 1764547200, .context_length = 1024, .description = "demo"},
        {.id = "big",
         .display_name = "Big One",
         .created = 0,
         .context_length = 8192,
         .owned_by = "me"},
    };
    json_t *o = api_model_object(API_CHAT, &m[0]);
    EXPECT(!strcmp(str(o, "id"), "tiny") && !strcmp(str(o, "object"), "model"));
    EXPECT_EQ_INT(json_integer_value(json_object_get(o, "created")), 1764547200);
    EXPECT(!strcmp(str(o, "owned_by"), "inferd") && !strcmp(str(o, "description"), "demo"));
    EXPECT_EQ_INT(json_integer_value(json_object_get(o, "context_length")), 1024);
    json_decref(o);
    o = api_model_object(API_MESSAGES, &m[0]);
    EXPECT(!strcmp(str(o, "type"), "model") && !strcmp(str(o, "id"), "tiny"));
    EXPECT(!strcmp(str(o, "display_name"), "tiny"));
    EXPECT(!strcmp(str(o, "created_at"), "2025-12-01T00:00:00Z"));
    EXPECT_EQ_INT(json_integer_value(json_object_get(o, "max_input_tokens")), 1024);
    EXPECT(json_object_get(o, "object") == NULL);
    json_decref(o);
    o = api_models_list(API_CHAT, m, 2);
    EXPECT(!strcmp(str(o, "object"), "list"));
    EXPECT_EQ_INT(json_array_size(json_object_get(o, "data")), 2);
    EXPECT(!strcmp(str(json_array_get(json_object_get(o, "data"), 1), "owned_by"), "me"));
    json_decref(o);
    o = api_models_list(API_MESSAGES, m, 2);
    EXPECT(json_is_false(json_object_get(o, "has_more")));
    EXPECT(!strcmp(str(o, "first_id"), "tiny") && !strcmp(str(o, "last_id"), "big"));
    EXPECT(!strcmp(str(json_array_get(json_object_get(o, "data"), 1), "display_name"), "Big One"));
    EXPECT(!strcmp(str(json_array_get(json_object_get(o, "data"), 1), "created_at"),
                   "1970-01-01T00:00:00Z"));
    json_decref(o);
    struct err_msg msg = {{0}};
    EXPECT_EQ_INT(api_model_find(m, 2, "big", &msg), 1);
    EXPECT_EQ_INT(api_model_find(m, 2, "gpt-4o", &msg), ERR_NOT_FOUND);
    EXPECT(!strcmp(msg.text, "model 'gpt-4o' does not exist; this server serves 'tiny'"));
    EXPECT_EQ_INT(err_http_status(ERR_NOT_FOUND), 404);
}

TEST(path_match)
{
    char id[16];
    EXPECT(api_path_match("/v1/models/tiny", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!strcmp(id, "tiny"));
    EXPECT(api_path_match("/v1/models/a%2Fb%20c", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!strcmp(id, "a/b c"));
    EXPECT(api_path_match("/v1/responses/resp_1/input_items", "/v1/responses/", "/input_items", id,
                          sizeof(id)));
    EXPECT(!strcmp(id, "resp_1"));
    EXPECT(!api_path_match("/v1/models/", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/models", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/models/a/b", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/responses/r/x", "/v1/responses/", "/input_items", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/models/a%2", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/models/a%zz", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/models/a%00b", "/v1/models/", "", id, sizeof(id)));
    EXPECT(!api_path_match("/v1/models/0123456789abcdef", "/v1/models/", "", id, sizeof(id)));
    EXPECT(api_path_match("/v1/models/0123456789abcde", "/v1/models/", "", id, sizeof(id)));
}

TEST(items_query)
{
    struct api_items_query q;
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(api_input_items_query(NULL, &q, &m), 0);
    EXPECT(q.limit == 20 && !q.asc && !q.after[0]);
    EXPECT_EQ_INT(api_input_items_query("limit=5&order=asc&after=msg_x%5F1&include%5B%5D=a&"
                                        "include[]=message.input_image.image_url&foo",
                                        &q, &m),
                  0);
    EXPECT(q.limit == 5 && q.asc && !strcmp(q.after, "msg_x_1"));
    EXPECT_EQ_INT(api_input_items_query("limit=100&order=desc", &q, &m), 0);
    EXPECT(q.limit == 100 && !q.asc);
    static const struct {
        const char *query, *param;
    } bad[] = {
        {"limit=0", "limit"},   {"limit=101", "limit"}, {"limit=", "limit"},
        {"limit=5x", "limit"},  {"limit", "limit"},     {"order=up", "order"},
        {"order=%41", "order"}, {"after=%zz", "after"}, {"limit=1&order=", "order"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        EXPECT_EQ_INT(api_input_items_query(bad[i].query, &q, &m), ERR_INVALID);
        if (strcmp(q.bad_param, bad[i].param))
            fprintf(stderr, "  query case %zu: '%s' (%s)\n", i, q.bad_param, m.text);
        EXPECT(!strcmp(q.bad_param, bad[i].param));
        EXPECT(!strncmp(m.text, bad[i].param, strlen(bad[i].param)));
    }
}

/* The conversation a stored response keeps: an earlier turn, this turn's
 * input with a tool call and its output, and the answer (left out). */
static const char conversation[] =
    "[{\"role\":\"system\",\"content\":\"be brief\"},"
    "{\"role\":\"user\",\"content\":\"weather?\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"
    "\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"{\\\"c\\\":\\\"Oslo\\\"}\"}}]},"
    "{\"role\":\"tool\",\"content\":\"sunny\",\"tool_call_id\":\"call_1\"},"
    "{\"role\":\"assistant\",\"content\":\"It is sunny.\"}]";

static json_t *items(const char *query, int want_rc)
{
    struct api_items_query q;
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(api_input_items_query(query, &q, &m), 0);
    json_t *out = NULL;
    int rc = api_input_items("resp_abc", conversation, &q, &out, &m);
    EXPECT_EQ_INT(rc, want_rc);
    if (rc == ERR_INVALID) EXPECT(!strcmp(q.bad_param, "after"));
    return out;
}

TEST(input_items_list)
{
    json_t *l = items("order=asc", 0);
    json_t *d = json_object_get(l, "data");
    EXPECT(!strcmp(str(l, "object"), "list"));
    EXPECT_EQ_INT(json_array_size(d), 4); /* system, user, function_call, its output */
    EXPECT(!strcmp(str(json_array_get(d, 0), "type"), "message"));
    EXPECT(!strcmp(str(json_array_get(d, 0), "role"), "system"));
    EXPECT(!strcmp(str(json_array_get(d, 0), "id"), "msg_abc_0"));
    json_t *part = json_array_get(json_object_get(json_array_get(d, 1), "content"), 0);
    EXPECT(!strcmp(str(part, "type"), "input_text") && !strcmp(str(part, "text"), "weather?"));
    json_t *fc = json_array_get(d, 2);
    EXPECT(!strcmp(str(fc, "type"), "function_call") && !strcmp(str(fc, "call_id"), "call_1"));
    EXPECT(!strcmp(str(fc, "name"), "get") && !strcmp(str(fc, "arguments"), "{\"c\":\"Oslo\"}"));
    EXPECT(!strcmp(str(fc, "id"), "fc_abc_2"));
    json_t *fo = json_array_get(d, 3);
    EXPECT(!strcmp(str(fo, "type"), "function_call_output") && !strcmp(str(fo, "output"), "sunny"));
    EXPECT(!strcmp(str(l, "first_id"), "msg_abc_0") && !strcmp(str(l, "last_id"), "fco_abc_3"));
    EXPECT(json_is_false(json_object_get(l, "has_more")));
    json_decref(l);
    /* default order: newest first */
    l = items("", 0);
    EXPECT(!strcmp(str(l, "first_id"), "fco_abc_3") && !strcmp(str(l, "last_id"), "msg_abc_0"));
    json_decref(l);
    /* pages follow the cursor */
    l = items("limit=3", 0);
    EXPECT_EQ_INT(json_array_size(json_object_get(l, "data")), 3);
    EXPECT(json_is_true(json_object_get(l, "has_more")));
    EXPECT(!strcmp(str(l, "last_id"), "msg_abc_1"));
    json_decref(l);
    l = items("limit=3&after=msg_abc_1", 0);
    EXPECT_EQ_INT(json_array_size(json_object_get(l, "data")), 1);
    EXPECT(!strcmp(str(l, "first_id"), "msg_abc_0"));
    EXPECT(json_is_false(json_object_get(l, "has_more")));
    json_decref(l);
    l = items("order=asc&limit=2&after=msg_abc_1", 0);
    EXPECT(!strcmp(str(l, "first_id"), "fc_abc_2") && !strcmp(str(l, "last_id"), "fco_abc_3"));
    EXPECT(json_is_false(json_object_get(l, "has_more")));
    json_decref(l);
    /* after the last: an empty page */
    l = items("order=asc&after=fco_abc_3", 0);
    EXPECT_EQ_INT(json_array_size(json_object_get(l, "data")), 0);
    EXPECT(json_is_null(json_object_get(l, "first_id")));
    json_decref(l);
    EXPECT(items("after=msg_nope", ERR_INVALID) == NULL);
    /* an unreadable stored conversation is ours to fix, not the client's */
    struct api_items_query q;
    struct err_msg m = {{0}};
    api_input_items_query("", &q, &m);
    json_t *out = NULL;
    EXPECT_EQ_INT(api_input_items("resp_abc", "{\"x\":1}", &q, &out, &m), ERR_INTERNAL);
    EXPECT_EQ_INT(api_input_items("resp_abc", "[{\"role\":5}]", &q, &out, &m), ERR_INTERNAL);
    EXPECT(out == NULL);
}

/* What finish_call stores comes back as the same turn's items. */
TEST(input_items_of_a_stored_turn)
{
    struct api_request r = {.kind = API_RESPONSES, .n = 1};
    r.input_items = json_loads("[{\"role\":\"user\",\"content\":\"hi\"}]", 0, NULL);
    json_t *history = json_loads("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                                 "\"content\":\"b\"}]",
                                 0, NULL);
    struct api_choice c = {.n_tokens = 1, .finish = API_FINISH_EOG};
    buf_puts(&c.text, "hello");
    struct api_out o = {.req = &r, .choices = &c, .n_choices = 1, .model = "m"};
    snprintf(o.id, sizeof(o.id), "resp_Z");
    json_t *conv = api_responses_conversation(&o, history);
    char *text = json_dumps(conv, JSON_COMPACT);
    struct api_items_query q;
    struct err_msg m = {{0}};
    api_input_items_query("order=asc", &q, &m);
    json_t *out = NULL;
    EXPECT_EQ_INT(api_input_items(o.id, text, &q, &out, &m), 0);
    json_t *d = json_object_get(out, "data");
    EXPECT_EQ_INT(json_array_size(d), 3);
    json_t *prev = json_array_get(d, 1);
    EXPECT(!strcmp(str(prev, "role"), "assistant"));
    json_t *part = json_array_get(json_object_get(prev, "content"), 0);
    EXPECT(!strcmp(str(part, "type"), "output_text") && !strcmp(str(part, "text"), "b"));
    EXPECT(!strcmp(str(json_array_get(json_object_get(json_array_get(d, 2), "content"), 0), "text"),
                   "hi"));
    json_decref(out);
    free(text);
    json_decref(conv);
    json_decref(history);
    json_decref(r.input_items);
    buf_release(&c.text);
}

TEST_MAIN()
