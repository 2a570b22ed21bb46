/*
 * test_toolcall.c - the streaming tool-call parser, per model family: the
 * events of a whole text, and the same events (merged) whatever way the text
 * is cut into pieces - at every byte boundary, and one byte at a time.
 *
 * Events are rendered to one string: C{text} for content, S0{name} for a
 * call start, A0{args} for its arguments (adjacent pieces joined), E0 for
 * its end. Ids are checked separately (they only depend on the seed).
 */
#include "test.h"

#include "base/check.h"

#include "api/toolcall.h"
#include "grammar/grammar.h"

#include <jansson.h>

static char *names[] = {"get_weather", "search", "noop"};

#define DSB                                                                                        \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "begin\xef\xbd\x9c>"
#define DSE                                                                                        \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "calls\xe2\x96\x81"                                                                            \
    "end\xef\xbd\x9c>"
#define DCB                                                                                        \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "begin\xef\xbd\x9c>"
#define DCE                                                                                        \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "call\xe2\x96\x81"                                                                             \
    "end\xef\xbd\x9c>"
#define DSEP                                                                                       \
    "<\xef\xbd\x9ctool\xe2\x96\x81"                                                                \
    "sep\xef\xbd\x9c>"

struct render {
    struct buf s;    /* rendered events */
    int last;        /* kind of the last rendered event, -1 none */
    int last_index;  /* its call index */
    char ids[8][40]; /* ids by call */
};

static void put(struct render *r, const struct toolcall_parser *p, int n)
{
    for (int i = 0; i < n; i++) {
        const struct toolcall_ev *e = &p->ev[i];
        bool join = (e->kind == TOOLCALL_EV_CONTENT || e->kind == TOOLCALL_EV_ARGS) &&
                    r->last == (int)e->kind && r->last_index == e->index;
        if (join) {
            r->s.len--; /* drop the closing brace, append, close again */
            buf_append(&r->s, e->text, e->len);
            buf_putc(&r->s, '}');
        } else {
            switch (e->kind) {
            case TOOLCALL_EV_CONTENT:
                buf_puts(&r->s, "C{");
                buf_append(&r->s, e->text, e->len);
                buf_putc(&r->s, '}');
                break;
            case TOOLCALL_EV_START:
                buf_printf(&r->s, "S%d{%s}", e->index, e->text);
                if (e->index < 8) snprintf(r->ids[e->index], 40, "%s", e->id);
                break;
            case TOOLCALL_EV_ARGS:
                buf_printf(&r->s, "A%d{", e->index);
                buf_append(&r->s, e->text, e->len);
                buf_putc(&r->s, '}');
                break;
            case TOOLCALL_EV_END:
                buf_printf(&r->s, "E%d", e->index);
                break;
            }
        }
        r->last = (int)e->kind;
        r->last_index = e->kind == TOOLCALL_EV_CONTENT ? 0 : e->index;
        if (e->kind == TOOLCALL_EV_START || e->kind == TOOLCALL_EV_END) r->last = -1;
    }
}

/* Feeds text cut at the given offsets (sorted, n_cuts of them). */
static void run_cuts(enum toolcall_family f, const char *text, const size_t *cuts, int n_cuts,
                     struct render *r)
{
    memset(r, 0, sizeof(*r));
    r->last = -1;
    struct toolcall_parser p;
    toolcall_init(&p, f, names, 3, "call_", 42);
    size_t len = strlen(text), at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        put(r, &p, toolcall_feed(&p, text + at, end - at));
        at = end;
    }
    put(r, &p, toolcall_finish(&p));
    toolcall_release(&p);
}

/* Whole, every single cut, and byte by byte must agree; returns the whole. */
static void check(enum toolcall_family f, const char *text, const char *want)
{
    struct render whole, part;
    run_cuts(f, text, NULL, 0, &whole);
    if (strcmp(buf_str(&whole.s), want)) {
        fprintf(stderr, "  family %s, text %s\n    got  %s\n    want %s\n", toolcall_family_name(f),
                text, buf_str(&whole.s), want);
        test_failures_in_case++;
    }
    size_t len = strlen(text);
    for (size_t c = 0; c <= len; c++) {
        run_cuts(f, text, &c, 1, &part);
        if (strcmp(buf_str(&part.s), buf_str(&whole.s)) || strcmp(part.ids[0], whole.ids[0])) {
            fprintf(stderr, "  cut at %zu of %s:\n    got  %s\n    want %s\n", c, text,
                    buf_str(&part.s), buf_str(&whole.s));
            test_failures_in_case++;
            buf_release(&part.s);
            break;
        }
        buf_release(&part.s);
    }
    size_t *all = malloc(sizeof(size_t) * (len + 1));
    for (size_t c = 0; c < len; c++)
        all[c] = c + 1;
    run_cuts(f, text, all, len ? (int)len - 1 : 0, &part);
    if (strcmp(buf_str(&part.s), buf_str(&whole.s))) {
        fprintf(stderr, "  byte by byte: %s\n    got  %s\n    want %s\n", text, buf_str(&part.s),
                buf_str(&whole.s));
        test_failures_in_case++;
    }
    free(all);
    buf_release(&part.s);
    buf_release(&whole.s);
}

TEST(hermes_calls)
{
    enum toolcall_family f = TOOLCALL_HERMES;
    check(f, "plain text, no call", "C{plain text, no call}");
    check(f,
          "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
          "</tool_call>",
          "S0{get_weather}A0{{\"city\": \"Paris\"}}E0");
    check(f,
          "Let me look.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": "
          "\"a}\\\"b\", \"n\": [1, 2.5e3, -0.1, true, null]}}\n</tool_call>\n<tool_call>\n"
          "{\"arguments\": {}, \"name\": \"noop\"}\n</tool_call>\n",
          "C{Let me look.\n}S0{search}A0{{\"q\": \"a}\\\"b\", \"n\": [1, 2.5e3, -0.1, true, "
          "null]}}E0S1{noop}A1{{}}E1");
    /* a name only: arguments {} */
    check(f, "<tool_call>{\"name\":\"noop\"}</tool_call>", "S0{noop}A0{{}}E0");
    /* members around: skipped */
    check(f,
          "<tool_call>{\"id\": 7, \"name\": \"noop\", \"x\": {\"y\": [1]}, \"arguments\": "
          "{\"a\": 1}}</tool_call>",
          "S0{noop}A0{{\"a\": 1}}E0");
}

TEST(hermes_fallbacks)
{
    enum toolcall_family f = TOOLCALL_HERMES;
    /* unknown tool: the text comes back as content */
    check(f, "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
          "C{<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>}");
    /* not JSON */
    check(f, "x <tool_call> hello </tool_call> y", "C{x <tool_call> hello </tool_call> y}");
    /* a marker prefix that goes nowhere, and one cut short */
    check(f, "a <tool_ b", "C{a <tool_ b}");
    check(f, "ends with <tool_ca", "C{ends with <tool_ca}");
    /* arguments not an object */
    check(f, "<tool_call>{\"name\": \"noop\", \"arguments\": \"{}\"}</tool_call>",
          "C{<tool_call>{\"name\": \"noop\", \"arguments\": \"{}\"}</tool_call>}");
    /* bad JSON after the commit: the call ends there, the rest is content */
    check(f, "<tool_call>{\"name\": \"noop\", \"arguments\": {\"a\": tru }}</tool_call>",
          "S0{noop}A0{{\"a\": tru}E0C{ }}</tool_call>}");
    /* cut short inside the arguments (max_tokens) */
    check(f, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"ab",
          "S0{search}A0{{\"q\": \"ab}E0");
    /* cut short before the commit */
    check(f, "<tool_call>{\"name\": \"sea", "C{<tool_call>{\"name\": \"sea}");
    /* no end marker: the call stands, the rest is content */
    check(f, "<tool_call>{\"name\": \"noop\", \"arguments\": {}} and more",
          "S0{noop}A0{{}}E0C{and more}");
    /* leading-zero number, escaped name, deep nesting */
    check(f, "<tool_call>{\"name\": \"noop\", \"arguments\": {\"a\": 01}}",
          "S0{noop}A0{{\"a\": 0}E0C{1}}}");
    check(f, "<tool_call>{\"name\": \"no\\u006fp\"}", "C{<tool_call>{\"name\": \"no\\u006fp\"}}");
}

TEST(llama3_calls)
{
    enum toolcall_family f = TOOLCALL_LLAMA3;
    check(f, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
          "S0{get_weather}A0{{\"city\": \"Oslo\"}}E0");
    check(f, "  {\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}\n",
          "S0{search}A0{{\"q\": \"x\"}}E0");
    /* a JSON answer that is not a call stays content */
    check(f, "{\"answer\": 42}", "C{{\"answer\": 42}}");
    check(f, " {\"name\": \"unknown\", \"parameters\": {}}",
          "C{ {\"name\": \"unknown\", \"parameters\": {}}}");
    /* bare JSON only as the whole answer */
    check(f, "Sure: {\"name\": \"noop\", \"parameters\": {}}",
          "C{Sure: {\"name\": \"noop\", \"parameters\": {}}}");
    check(f, "<|python_tag|>brave_search.call(query=\"x\")",
          "C{<|python_tag|>brave_search.call(query=\"x\")}");
}

TEST(deepseek_calls)
{
    enum toolcall_family f = TOOLCALL_DEEPSEEK;
    check(f,
          DSB DCB "function" DSEP "get_weather\n```json\n{\"city\": \"Rome\"}\n```" DCE "\n" DCB
                  "function" DSEP "noop\n```json\n{}\n```" DCE DSE,
          "S0{get_weather}A0{{\"city\": \"Rome\"}}E0S1{noop}A1{{}}E1");
    check(f,
          "Checking." DSB DCB "function" DSEP "search\n```json\n{\"q\": [1]}\n```" DCE DSE " done",
          "C{Checking.}S0{search}A0{{\"q\": [1]}}E0C{ done}");
    /* unknown name */
    check(f, DSB DCB "function" DSEP "nope\n```json\n{}\n```" DCE DSE,
          "C{" DSB DCB "function" DSEP "nope\n```json\n{}\n```" DCE DSE "}");
    /* no fence */
    check(f, DSB DCB "function" DSEP "noop\n{}" DCE DSE,
          "C{" DSB DCB "function" DSEP "noop\n{}" DCE DSE "}");
}

TEST(mistral_calls)
{
    enum toolcall_family f = TOOLCALL_MISTRAL;
    check(f,
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}, \"id\": "
          "\"abcdefghi\"}, {\"name\": \"noop\", \"arguments\": {}}]",
          "S0{get_weather}A0{{\"city\": \"Lima\"}}E0S1{noop}A1{{}}E1");
    /* the bare array (a forced call's grammar writes it) */
    check(f, "[{\"name\": \"search\", \"arguments\": {\"q\": \"z\"}}]",
          "S0{search}A0{{\"q\": \"z\"}}E0");
    check(f, "[1, 2]", "C{[1, 2]}");
    /* second call malformed: the first stands */
    check(f, "[TOOL_CALLS][{\"name\": \"noop\", \"arguments\": {}}, {\"name\": 5}]",
          "S0{noop}A0{{}}E0C{, {\"name\": 5}]}");
}

TEST(ids_depend_on_the_seed_only)
{
    struct toolcall_parser a, b;
    toolcall_init(&a, TOOLCALL_HERMES, names, 3, "call_", 7);
    toolcall_init(&b, TOOLCALL_MISTRAL, names, 3, "call_", 7);
    const char *ht = "<tool_call>{\"name\": \"noop\"}</tool_call>";
    int n = toolcall_feed(&a, ht, strlen(ht));
    EXPECT_EQ_INT(n, 3);
    EXPECT(a.ev[0].kind == TOOLCALL_EV_START && !strncmp(a.ev[0].id, "call_", 5) &&
           strlen(a.ev[0].id) == 29);
    const char *mt = "[TOOL_CALLS][{\"name\": \"noop\", \"arguments\": {}}]";
    n = toolcall_feed(&b, mt, strlen(mt));
    EXPECT(n >= 1 && b.ev[0].kind == TOOLCALL_EV_START && strlen(b.ev[0].id) == 9);
    toolcall_release(&a);
    toolcall_release(&b);
}

static bool has_tok(const char *text, void *ctx)
{
    for (const char *const *t = ctx; *t; t++)
        if (!strcmp(*t, text)) return true;
    return false;
}

TEST(family_detection)
{
    const char *qwen[] = {"<|im_start|>", "<tool_call>", NULL};
    const char *llama[] = {"<|start_header_id|>", NULL};
    const char *ds[] = {DSB, "<tool_call>", NULL};
    const char *ms[] = {"[TOOL_CALLS]", "[INST]", NULL};
    const char *none[] = {"<s>", NULL};
    EXPECT_EQ_INT(toolcall_family_detect(has_tok, qwen, NULL), TOOLCALL_HERMES);
    EXPECT_EQ_INT(toolcall_family_detect(has_tok, llama, NULL), TOOLCALL_LLAMA3);
    EXPECT_EQ_INT(toolcall_family_detect(has_tok, ds, NULL), TOOLCALL_DEEPSEEK);
    EXPECT_EQ_INT(toolcall_family_detect(has_tok, ms, NULL), TOOLCALL_MISTRAL);
    EXPECT_EQ_INT(toolcall_family_detect(has_tok, none, NULL), TOOLCALL_NONE);
    EXPECT_EQ_INT(toolcall_family_detect(has_tok, none, "...<tool_call>..."), TOOLCALL_HERMES);
}

/* The forced-call grammar of each family accepts exactly the calls the
 * parser reads back: the family's canonical text for a tool is in the
 * grammar's language, and parses to that call; a wrong name or arguments
 * that break the schema are not in it. */
static bool in_grammar(const char *src, const char *text)
{
    struct err_msg m = {{0}};
    struct grammar *g = NULL;
    if (grammar_compile(GRAMMAR_SEQUENCE, src, strlen(src), &g, &m)) {
        fprintf(stderr, "  grammar: %s\n", m.text);
        return false;
    }
    struct grammar_matcher *mt = grammar_matcher_new(g, NULL);
    bool ok = grammar_matcher_accept_bytes(mt, text, strlen(text)) &&
              grammar_matcher_is_accepting(mt) && !grammar_matcher_can_continue(mt);
    grammar_matcher_free(mt);
    grammar_unref(g);
    return ok;
}

TEST(forced_grammar_matches_parser)
{
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": "
        "{\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}, \"required\": "
        "[\"q\"], \"additionalProperties\": false}}}, {\"type\": \"function\", \"function\": "
        "{\"name\": \"noop\"}}]",
        0, NULL);
    CHECK(tools);
    static const struct {
        enum toolcall_family fam;
        const char *good, *bad_args, *other;
    } cases[] = {
        {TOOLCALL_HERMES,
         "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"n\": 1}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"noop\", \"arguments\": {\"any\": [1]}}\n</tool_call>"},
        {TOOLCALL_LLAMA3, "{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}",
         "{\"name\": \"search\", \"parameters\": {}}", "{\"name\": \"noop\", \"parameters\": {}}"},
        {TOOLCALL_MISTRAL, "[{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]",
         "[{\"name\": \"search\", \"arguments\": {\"q\": 5}}]",
         "[{\"name\": \"noop\", \"arguments\": {}}]"},
        {TOOLCALL_DEEPSEEK, DSB DCB "function" DSEP "search\n```json\n{\"q\": \"x\"}\n```" DCE DSE,
         DSB DCB "function" DSEP "search\n```json\n[]\n```" DCE DSE,
         DSB DCB "function" DSEP "noop\n```json\n{}\n```" DCE DSE},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct buf all = {0}, one = {0};
        struct err_msg m = {{0}};
        EXPECT_EQ_INT(toolcall_grammar(cases[k].fam, tools, NULL, &all, &m), 0);
        EXPECT_EQ_INT(toolcall_grammar(cases[k].fam, tools, "search", &one, &m), 0);
        EXPECT(in_grammar(buf_str(&all), cases[k].good));
        EXPECT(in_grammar(buf_str(&one), cases[k].good));
        EXPECT(!in_grammar(buf_str(&all), cases[k].bad_args));
        EXPECT(in_grammar(buf_str(&all), cases[k].other));
        EXPECT(!in_grammar(buf_str(&one), cases[k].other));
        struct render r;
        run_cuts(cases[k].fam, cases[k].good, NULL, 0, &r);
        EXPECT(!strcmp(buf_str(&r.s), "S0{search}A0{{\"q\": \"x\"}}E0"));
        buf_release(&r.s);
        buf_release(&all);
        buf_release(&one);
    }
    struct buf b = {0};
    struct err_msg m = {{0}};
    EXPECT_EQ_INT(toolcall_grammar(TOOLCALL_HERMES, tools, "nope", &b, &m), ERR_INVALID);
    EXPECT(strstr(m.text, "no tool named 'nope'") != NULL);
    EXPECT_EQ_INT(toolcall_grammar(TOOLCALL_NONE, tools, NULL, &b, &m), ERR_INVALID);
    buf_release(&b);
    json_decref(tools);
}

TEST_MAIN()
