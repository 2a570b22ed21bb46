/*
 * test_grammar.c - the grammar engine: GBNF parsing and matching, the regex
 * dialect, JSON Schema compilation (errors name keyword and path), token
 * masks against brute force on small vocabularies (including tokens that
 * split UTF-8 characters), end-of-generation handling and the compile cache.
 */
#include "test.h"

#include "base/buf.h"
#include "base/check.h"
#include "grammar/grammar.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static struct grammar *compile(enum grammar_kind k, const char *src)
{
    struct err_msg m = {{0}};
    struct grammar *g = NULL;
    int rc = grammar_compile(k, src, strlen(src), &g, &m);
    if (rc) fprintf(stderr, "  compile failed: %s\n", m.text);
    return g;
}

/* 1 if the whole input is accepted, 0 if rejected, -1 if it does not compile. */
static int match(enum grammar_kind k, const char *src, const char *input)
{
    struct grammar *g = compile(k, src);
    if (!g) return -1;
    struct grammar_matcher *m = grammar_matcher_new(g, NULL);
    bool ok =
        grammar_matcher_accept_bytes(m, input, strlen(input)) && grammar_matcher_is_accepting(m);
    grammar_matcher_free(m);
    grammar_unref(g);
    return ok;
}

static int compile_error(enum grammar_kind k, const char *src, const char *needle)
{
    struct err_msg m = {{0}};
    struct grammar *g = NULL;
    int rc = grammar_compile(k, src, strlen(src), &g, &m);
    if (rc == 0) {
        grammar_unref(g);
        fprintf(stderr, "  expected an error for %s\n", src);
        return 0;
    }
    if (needle && !strstr(m.text, needle)) {
        fprintf(stderr, "  message '%s' lacks '%s'\n", m.text, needle);
        return 0;
    }
    return rc;
}

TEST(sequence_kind)
{
    const char *src = "[[\"<a>\", {\"schema\": {\"type\": \"object\", \"properties\": {\"x\": "
                      "{\"type\": \"integer\"}}, \"required\": [\"x\"], \"additionalProperties\": "
                      "false}}, \"</a>\"], [\"B\", {\"schema\": {\"enum\": [1, 2]}}], [\"C\"]]";
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "<a>{\"x\": 5}</a>"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "<a> {\"x\":-12}\n</a>"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "<a>{\"x\": \"s\"}</a>"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "<a>{}</a>"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "<a>{\"x\": 5}"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "B2"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "B3"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, "C"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_SEQUENCE, src, " C"), 0);
    /* UTF-8 literals (DeepSeek's markers are full-width) */
    EXPECT_EQ_INT(
        match(GRAMMAR_SEQUENCE, "[[\"<\xef\xbd\x9c\xe2\x96\x81>\"]]", "<\xef\xbd\x9c\xe2\x96\x81>"),
        1);
    EXPECT(compile_error(GRAMMAR_SEQUENCE, "[]", "non-empty array of alternatives"));
    EXPECT(compile_error(GRAMMAR_SEQUENCE, "[[]]", "[0]: expected a non-empty array of pieces"));
    EXPECT(compile_error(GRAMMAR_SEQUENCE, "[[\"a\", 5]]", "[0][1]: expected a string or"));
    EXPECT(compile_error(GRAMMAR_SEQUENCE, "[[\"a\"", "not valid JSON"));
    EXPECT(compile_error(GRAMMAR_SEQUENCE,
                         "[[\"a\", {\"schema\": {\"properties\": {\"x\": {\"contains\": {}}}}, "
                         "\"label\": \"tools[3] 'f'\"}]]",
                         "tools[3] 'f': json schema: #/properties/x/contains"));
    EXPECT(compile_error(GRAMMAR_SEQUENCE, "[[{\"schema\": {\"type\": \"blob\"}}]]", "[0][0]: "));
}

TEST(ebnf_basics)
{
    const char *g = "# arithmetic\n"
                    "root ::= expr\n"
                    "expr ::= term (\"+\" term)*\n"
                    "term ::= num | \"(\" expr \")\"\n"
                    "num  ::= [0-9]+\n";
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, g, "1+2"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, g, "(1+22)+3"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, g, "(1+22"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, g, "1++2"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, g, ""), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"a\"? \"b\"{2,3}", "bb"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"a\"? \"b\"{2,3}", "abbb"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"a\"? \"b\"{2,3}", "abbbb"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"a\"? \"b\"{2,3}", "b"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= [a-c]{2,}", "abcabc"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= [a-c]{2,}", "a"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= [^a-c]+", "xyz"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= [^a-c]+", "xaz"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"\\x41\\u00e9\\n\\\"\"", "A\xc3\xa9\n\""), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= . . .", "a\xe4\xb8\xad\xf0\x9f\x98\x80"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= .", "\xe4\xb8"), 0); /* incomplete */
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= [\\u4e00-\\u9fff]+", "\xe4\xb8\xad\xe6\x96\x87"),
                  1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= [\\u4e00-\\u9fff]+",
                        "\xe4\xb8\xad"
                        "a"),
                  0);
    /* rules used before definition, multi-line alternatives */
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= a\n  | b\nb ::= \"y\"\na ::= \"x\"", "y"), 1);
    /* right recursion is fine */
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"(\" root \")\" | \"\"", "((()))"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_EBNF, "root ::= \"(\" root \")\" | \"\"", "(()"), 0);
}

TEST(ebnf_errors)
{
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= foo", "'foo' is used but not defined"));
    EXPECT(compile_error(GRAMMAR_EBNF, "a ::= \"x\"", "no 'root'"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= root \"x\" | \"y\"", "left-recursive"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= \"x", "line 1"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= [z-a]", "out of order"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= \"a\"\nroot ::= \"b\"", "defined twice"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= \"a\"{3,2}", "n < m"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= x\nx ::= \"a\" x", "matches no input"));
    EXPECT(compile_error(GRAMMAR_EBNF, "root ::= (\"a\"", "expected ')'"));
}

TEST(regex_dialect)
{
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "[a-z]+\\d{2,3}", "abc12"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "[a-z]+\\d{2,3}", "abc1234"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "^(foo|bar)baz$", "barbaz"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "(?:ab)*c", "ababc"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "(?<y>\\d{4})-\\d\\d", "2024-01"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "\\w+\\s\\W", "ab_1 !"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "\\D\\S", "a b"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "[^\\d]+", "abc"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "[^\\d]+", "a1"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "\\u00e9+", "\xc3\xa9\xc3\xa9"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "\\uD83D\\uDE00", "\xf0\x9f\x98\x80"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "a.c", "a\nc"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "a{2}", "aa"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "a{,2}", "a{,2}"), 1); /* not a quantifier */
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "x?y+?", "yy"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "[-a]+", "-a-"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "\\.\\*\\$", ".*$"), 1);
    EXPECT(compile_error(GRAMMAR_REGEX, "(a)\\1", "backreferences"));
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "a(?=b)[a-z]", "ab"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "a(?!b)[a-z]", "ab"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "(a$|b)c?", "bc"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "(a$|b)c?", "ac"), 0);
    EXPECT(compile_error(GRAMMAR_REGEX, "a(?=b)", "matches no input"));
    EXPECT(compile_error(GRAMMAR_REGEX, "(?<=a)b",
                         "lookbehind assertions are not supported at offset 0"));
    EXPECT(compile_error(GRAMMAR_REGEX, "\\bword", "word boundary"));
    EXPECT(compile_error(GRAMMAR_REGEX, "a(^b)", "anchors"));
    EXPECT(compile_error(GRAMMAR_REGEX, "(a", "expected ')'"));
    EXPECT(compile_error(GRAMMAR_REGEX, "*a", "nothing to repeat"));
    EXPECT(compile_error(GRAMMAR_REGEX, "a)", "unbalanced"));
    /* found by fuzzing: a lone surrogate is no character, a trailing
     * backslash, an empty class */
    EXPECT(compile_error(GRAMMAR_REGEX, "\\uD800", "matches no input"));
    EXPECT(compile_error(GRAMMAR_REGEX, "ab\\", "ends with"));
    EXPECT_EQ_INT(match(GRAMMAR_REGEX, "[]x|y", "y"), 1);
}

TEST(schema_types)
{
    const char *s =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":2}},"
        "\"required\":[\"name\"],\"additionalProperties\":false}";
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"x\"}"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{ \"name\" : \"x\" , \"age\": 150 }"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"x\",\"age\":151}"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"x\",\"age\":-1}"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"age\":1}"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"x\",\"tags\":[\"a\",\"b\"]}"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"x\",\"tags\":[\"a\",\"b\",\"a\"]}"),
                  0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"x\",\"other\":1}"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, s, "{\"name\":\"\\u00e9\\n\"}"), 1);
    /* additional properties allowed by default, but not under a declared name */
    const char *open = "{\"properties\":{\"a\":{\"type\":\"integer\"}}}";
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, open, "{\"a\":1,\"b\":\"x\"}"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, open, "{\"ab\":\"x\"}"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, open, "{\"a\":\"x\"}"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, open, "[1]"), 1); /* no type: anything else */
    /* integer ranges */
    const char *r = "{\"type\":\"integer\",\"minimum\":-17,\"exclusiveMaximum\":205}";
    for (int v = -30; v < 230; v++) {
        char t[16];
        snprintf(t, sizeof(t), "%d", v);
        EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, r, t), v >= -17 && v < 205);
    }
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, r, "007"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":5}", "123456789"),
                  1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"minimum\":5}", "4"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"maximum\":-5}", "-123"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"integer\",\"maximum\":-5}", "-4"), 0);
    /* number bounds */
    const char *nb = "{\"type\":\"number\",\"minimum\":-2,\"exclusiveMaximum\":3}";
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, nb, "2.999"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, nb, "3"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, nb, "-2.0"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, nb, "-2.01"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, nb, "-1.5"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, nb, "0.5"), 1);
    /* strings */
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA,
                        "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\""),
                  1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA,
                        "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\""),
                  0);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^a+$\"}", "\"aaa\""), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"b\"}", "\"abc\""),
                  1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"b\"}", "\"ac\""),
                  0);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^\\\"$\"}", "\"\\\"\""), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"format\":\"date\"}", "\"2024-02-29\""), 1);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date\"}", "\"2024-13-01\""),
        0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"uuid\"}",
                        "\"123e4567-e89b-12d3-a456-426614174000\""),
                  1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"date-time\"}",
                        "\"2024-01-02T03:04:05.5+01:00\""),
                  1);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"email\"}", "\"a.b@c.de\""),
        1);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"format\":\"email\"}", "\"a@b\""), 0);
}

/* Every combination of decimal bounds (absent, inclusive, exclusive) against
 * values around them: accepted iff lo <= v <= hi numerically. ("-0" is not
 * generated: zero is written "0".) */
TEST(number_bounds_exhaustive)
{
    static const char *bnd[] = {"-2.5", "-1", "-0.5", "0", "0.25", "1", "1.5", "3"};
    static const char *val[] = {"-3",    "-2.5",  "-2.50", "-2.49", "-1.0", "-1",    "-0.51",
                                "-0.5",  "-0.05", "0",     "0.0",   "0.25", "0.250", "0.2501",
                                "0.1",   "0.9",   "1",     "1.5",   "1.49", "1.51",  "2",
                                "2.999", "3",     "3.0",   "3.01",  "10",   "-10.75"};
    int bad = 0;
    for (int li = -1; li < 8; li++)
        for (int hi = -1; hi < 8; hi++)
            for (int ex = 0; ex < 4; ex++) {
                if (li < 0 && hi < 0) continue;
                char sch[256];
                int n = snprintf(sch, sizeof(sch), "{\"type\":\"number\"");
                if (li >= 0)
                    n += snprintf(sch + n, sizeof(sch) - (size_t)n, ",\"%s\":%s",
                                  ex & 1 ? "exclusiveMinimum" : "minimum", bnd[li]);
                if (hi >= 0)
                    n += snprintf(sch + n, sizeof(sch) - (size_t)n, ",\"%s\":%s",
                                  ex & 2 ? "exclusiveMaximum" : "maximum", bnd[hi]);
                snprintf(sch + n, sizeof(sch) - (size_t)n, "}");
                /* an empty range matches nothing: a compile error */
                bool empty = li >= 0 && hi >= 0 &&
                             (strtod(bnd[li], NULL) > strtod(bnd[hi], NULL) ||
                              (strtod(bnd[li], NULL) == strtod(bnd[hi], NULL) && ex));
                if (empty) {
                    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, sch, "matches no input"));
                    continue;
                }
                struct grammar *g = compile(GRAMMAR_JSON_SCHEMA, sch);
                if (!g) {
                    bad++;
                    continue;
                }
                for (size_t k = 0; k < ARRAY_LEN(val); k++) {
                    double v = strtod(val[k], NULL);
                    bool want = true;
                    if (li >= 0) {
                        double b = strtod(bnd[li], NULL);
                        want &= ex & 1 ? v > b : v >= b;
                    }
                    if (hi >= 0) {
                        double b = strtod(bnd[hi], NULL);
                        want &= ex & 2 ? v < b : v <= b;
                    }
                    struct grammar_matcher *m = grammar_matcher_new(g, NULL);
                    bool got = grammar_matcher_accept_bytes(m, val[k], strlen(val[k])) &&
                               grammar_matcher_is_accepting(m);
                    grammar_matcher_free(m);
                    if (got != want) {
                        if (bad++ < 5)
                            fprintf(stderr, "  %s: %s %s\n", sch, val[k],
                                    want ? "rejected" : "accepted");
                    }
                }
                grammar_unref(g);
            }
    EXPECT_EQ_INT(bad, 0);
}

TEST(schema_combinators_and_refs)
{
    const char *tree =
        "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
        "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
        "node\"}}},"
        "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, tree, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}"),
        1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, tree, "{\"v\":1,\"kids\":[{\"w\":2}]}"), 0);
    const char *any = "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}";
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, any, "null"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, any, "1"), 0);
    const char *all =
        "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
        "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}],\"type\":\"object\"}";
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, all, "{\"a\":1,\"b\":\"x\"}"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, all, "{\"a\":1}"), 0);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"const\":{\"a\":[1,true]}}", "{ \"a\" : [ 1 , true ] }"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"enum\":[1,\"x\",null]}", "1.0"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"enum\":[1,\"x\",null]}", "2"), 0);
    const char *tup =
        "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],"
        "\"items\":false}";
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, tup, "[1,\"a\"]"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, tup, "[1]"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, tup, "[1,\"a\",2]"), 0);
    EXPECT_EQ_INT(
        match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"minItems\":2,\"maxItems\":3}", "[1]"), 0);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"minItems\":2,\"maxItems\":3}",
                        "[1, 2 ,3]"),
                  1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_OBJECT, "", "{\"a\": [1, {\"b\": null}], \"c\": -1.5e3}"), 1);
    EXPECT_EQ_INT(match(GRAMMAR_JSON_OBJECT, "", "[1]"), 0);
}

TEST(schema_errors)
{
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA,
                         "{\"type\":\"object\",\"properties\":{\"a\":{\"contains\":{}}}}",
                         "#/properties/a/contains: unsupported keyword"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"not\":{\"enum\":[1]}}", "#/not: not supported"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"patternProperties\":{}}", "#/patternProperties"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"type\":\"strin\"}", "unknown type"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"$ref\":\"http://x/y\"}", "$ref"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"format\":\"idn-email\"}", "unsupported format"));
    EXPECT(
        compile_error(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"(\"}", "#/pattern"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"multipleOf\":2.5}", "#/multipleOf"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA,
                         "{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":1}",
                         "#/multipleOf: not supported together with bounds"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"minProperties\":1}", "#/minProperties"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"maxProperties\":1}", "#/maxProperties"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"propertyNames\":{\"maxLength\":2}}",
                         "#/propertyNames"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"dependentRequired\":{\"a\":[\"b\"]}}",
                         "#/dependentRequired"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true}",
                         "#/uniqueItems"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"type\":", "not valid JSON"));
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "false", "matches no input"));
}

/* Keywords exact only in some cases (schema.c rewrite()). */
TEST(schema_partial_keywords)
{
    const char *mul = "{\"type\":\"integer\",\"multipleOf\":7}";
    for (int x = -200; x <= 200; x++) {
        char t[32];
        snprintf(t, sizeof(t), "%d", x);
        EXPECT(match(GRAMMAR_JSON_SCHEMA, mul, t) == (x % 7 == 0));
    }
    EXPECT(match(GRAMMAR_JSON_SCHEMA, mul, "700000000000000000000000000007") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, mul, "700000000000000000000000000008") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"multipleOf\":4}", "12.00") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"number\",\"multipleOf\":4}", "12.5") == 0);
    const char *nots = "{\"not\":{\"type\":[\"string\",\"number\"]}}";
    EXPECT(match(GRAMMAR_JSON_SCHEMA, nots, "\"a\"") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, nots, "3") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, nots, "null") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, nots, "[1]") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, "{\"not\":{}}", "1") == -1); /* matches nothing */
    const char *names = "{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]+$\"},"
                        "\"properties\":{\"ab\":{},\"B1\":{}},\"additionalProperties\":false}";
    EXPECT(match(GRAMMAR_JSON_SCHEMA, names, "{\"ab\":1}") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, names, "{\"B1\":1}") == 0);
    const char *maxp = "{\"type\":\"object\",\"maxProperties\":0}";
    EXPECT(match(GRAMMAR_JSON_SCHEMA, maxp, "{}") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, maxp, "{\"a\":1}") == 0);
    const char *dep = "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},"
                      "\"required\":[\"a\"],\"dependentRequired\":{\"a\":[\"b\"]}}";
    EXPECT(match(GRAMMAR_JSON_SCHEMA, dep, "{\"a\":1,\"b\":2}") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, dep, "{\"a\":1}") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}",
                 "[1]") == 1);
    const char *ite = "{\"if\":{\"type\":\"string\"},\"then\":{\"maxLength\":2},"
                      "\"else\":{\"type\":\"integer\",\"multipleOf\":5}}";
    EXPECT(match(GRAMMAR_JSON_SCHEMA, ite, "\"ab\"") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, ite, "\"abc\"") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, ite, "15") == 1);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, ite, "16") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, ite, "null") == 0);
    EXPECT(match(GRAMMAR_JSON_SCHEMA, "{\"if\":false,\"then\":false}", "[]") == 1);
    EXPECT(compile_error(GRAMMAR_JSON_SCHEMA, "{\"if\":{\"minimum\":3},\"then\":{}}",
                         "#/if: not supported"));
}

/* ---- masks ---- */

struct tvocab {
    const char *bytes[400]; /* token texts */
    uint32_t len[400];      /* lengths */
    uint8_t cls[400];       /* classes */
    int n;                  /* tokens */
};

static void tv_add(struct tvocab *v, const char *s, size_t n, int cls)
{
    v->bytes[v->n] = s;
    v->len[v->n] = (uint32_t)n;
    v->cls[v->n++] = (uint8_t)cls;
}

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* A vocabulary of every single byte, JSON-ish pieces, random strings and
 * split UTF-8 characters, plus a control token and an EOS. */
static struct grammar_vocab *test_vocab(struct tvocab *tv, char *store)
{
    static const char *pieces[] = {"{",
                                   "}",
                                   "[",
                                   "]",
                                   "\"",
                                   ",",
                                   ":",
                                   " ",
                                   "\n",
                                   "  ",
                                   "{\"",
                                   "\":",
                                   "\",",
                                   "\"}",
                                   "\"]",
                                   "},",
                                   "],",
                                   ", \"",
                                   "true",
                                   "false",
                                   "null",
                                   "nu",
                                   "ll",
                                   "tr",
                                   "ue",
                                   "12",
                                   "-1",
                                   ".5",
                                   "e1",
                                   "abc",
                                   "name",
                                   "age",
                                   "\": \"",
                                   "\xe4\xb8",
                                   "\xad",
                                   "\xe4\xb8\xad",
                                   "\xe6\x96\x87",
                                   "\xf0\x9f",
                                   "\x98\x80",
                                   "\xf0\x9f\x98\x80",
                                   "\xc3",
                                   "\xa9",
                                   "\\n",
                                   "\\\"",
                                   "\\u00",
                                   "e9",
                                   "a\"",
                                   "1,",
                                   "0}",
                                   "\"a\"",
                                   "\"b\"",
                                   "[1",
                                   "x\":",
                                   "2024-",
                                   "01-",
                                   "T12:"};
    tv->n = 0;
    for (int c = 0; c < 256; c++) {
        store[c] = (char)c;
        tv_add(tv, store + c, 1, GRAMMAR_TOKEN_NORMAL);
    }
    for (size_t i = 0; i < ARRAY_LEN(pieces); i++)
        tv_add(tv, pieces[i], strlen(pieces[i]), GRAMMAR_TOKEN_NORMAL);
    static char rnd_store[40][6];
    for (int i = 0; i < 40; i++) {
        int len = 1 + (int)(rnd() % 5);
        for (int k = 0; k < len; k++)
            rnd_store[i][k] = "ab\"{}:, 01"[rnd() % 10];
        tv_add(tv, rnd_store[i], (size_t)len, GRAMMAR_TOKEN_NORMAL);
    }
    tv_add(tv, "<|ctl|>", 7, GRAMMAR_TOKEN_CONTROL);
    tv_add(tv, "</s>", 4, GRAMMAR_TOKEN_CONTROL);
    int32_t eos = tv->n - 1;
    return grammar_vocab_new(tv->n, tv->bytes, tv->len, tv->cls, &eos, 1);
}

/* Brute force: token t may follow `hist` iff a fresh matcher takes hist then t. */
static bool brute(struct grammar *g, const struct grammar_vocab *v, const struct buf *hist, int t,
                  const struct tvocab *tv, int eos)
{
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    bool ok = grammar_matcher_accept_bytes(m, hist->data, hist->len);
    CHECK(ok);
    if (t == eos)
        ok = grammar_matcher_is_accepting(m);
    else if (tv->cls[t] != GRAMMAR_TOKEN_NORMAL)
        ok = false;
    else
        ok = grammar_matcher_accept_bytes(m, tv->bytes[t], tv->len[t]);
    grammar_matcher_free(m);
    return ok;
}

static void mask_vs_brute(enum grammar_kind k, const char *src, int walks, int steps)
{
    struct tvocab tv;
    char store[256];
    struct grammar_vocab *v = test_vocab(&tv, store);
    int eos = tv.n - 1;
    struct grammar *g = compile(k, src);
    EXPECT(g != NULL);
    if (!g) return;
    int words = (tv.n + 63) / 64;
    uint64_t mask[8];
    for (int w = 0; w < walks; w++) {
        struct grammar_matcher *m = grammar_matcher_new(g, v);
        struct buf hist = {0};
        for (int s = 0; s < steps; s++) {
            int n_allowed = grammar_matcher_fill_mask(m, mask);
            int allowed[400], n = 0, mismatches = 0;
            for (int t = 0; t < tv.n; t++) {
                bool bit = (mask[t >> 6] >> (t & 63)) & 1;
                if (bit) allowed[n++] = t;
                if (bit != brute(g, v, &hist, t, &tv, eos)) {
                    if (mismatches++ < 3)
                        fprintf(stderr, "  after '%.*s': token %d '%.*s' mask %d\n", (int)hist.len,
                                hist.data, t, (int)tv.len[t], tv.bytes[t], (int)bit);
                }
            }
            EXPECT_EQ_INT(mismatches, 0);
            EXPECT_EQ_INT(n_allowed, n);
            if (mismatches || n == 0) break;
            int t = allowed[rnd() % (unsigned)n];
            EXPECT(grammar_matcher_accept_token(m, t));
            if (t == eos) {
                EXPECT(grammar_matcher_is_terminated(m));
                EXPECT_EQ_INT(grammar_matcher_fill_mask(m, mask), 0);
                break;
            }
            buf_append(&hist, tv.bytes[t], tv.len[t]);
        }
        (void)words;
        buf_release(&hist);
        grammar_matcher_free(m);
    }
    grammar_unref(g);
    grammar_vocab_free(v);
}

TEST(masks_equal_brute_force)
{
    mask_vs_brute(
        GRAMMAR_JSON_SCHEMA,
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
        "\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"},"
        "\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"maxItems\":3}},"
        "\"required\":[\"name\"]}",
        30, 40);
    mask_vs_brute(GRAMMAR_JSON_OBJECT, "", 30, 40);
    mask_vs_brute(GRAMMAR_EBNF, "root ::= (\"ab\" | [\\u4e00-\\u9fff] | \"\\U0001F600\")+ \"!\"?",
                  30, 30);
    mask_vs_brute(GRAMMAR_REGEX, "[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:)?", 20, 20);
    mask_vs_brute(GRAMMAR_JSON_SCHEMA, "{\"type\":\"string\",\"pattern\":\"^[\\u00e9a]{1,8}$\"}",
                  20, 20);
    /* format and pattern at once: the rules of a minimal DFA */
    mask_vs_brute(GRAMMAR_JSON_SCHEMA,
                  "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":20,"
                  "\"pattern\":\"^(?!\\\\.)(?!.*\\\\.\\\\.)[a-z.]+@[a-z]+\\\\.[a-z]{2,}$\"}",
                  20, 30);
}

/* A larger vocabulary for the table shortcuts that need many tokens: runs
 * over plain-text subtrees (also starting inside a character), runs of
 * height 0, and bounded repetitions far from their end, whose tables share
 * the short tokens' verdicts and decide tokens of GRAMMAR_REP_CAP or more
 * characters on their own. Texts live in one arena; returns the vocabulary
 * (EOS is the last token). */
struct bigvocab {
    char *text;         /* token texts, concatenated */
    const char **bytes; /* (n) */
    uint32_t *len;      /* (n) */
    uint8_t *cls;       /* (n) */
    int n;              /* tokens */
};

static void bv_add(struct bigvocab *bv, size_t *used, const char *s, size_t n)
{
    memcpy(bv->text + *used, s, n);
    bv->bytes[bv->n] = bv->text + *used;
    bv->len[bv->n] = (uint32_t)n;
    bv->cls[bv->n++] = GRAMMAR_TOKEN_NORMAL;
    *used += n;
}

static struct grammar_vocab *big_vocab(struct bigvocab *bv)
{
    enum { CAP = 2400 };
    bv->text = malloc(CAP * 64);
    bv->bytes = malloc(sizeof(char *) * CAP);
    bv->len = malloc(sizeof(uint32_t) * CAP);
    bv->cls = malloc(CAP);
    bv->n = 0;
    size_t used = 0;
    for (int c = 0; c < 256; c++) {
        char b = (char)c;
        bv_add(bv, &used, &b, 1);
    }
    static const char *alpha = "abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 -._";
    static const char *cjk[] = {"\xe4\xb8\xad", "\xe6\x96\x87", "\xe5\xad\x97", "\xc3\xa9",
                                "\xf0\x9f\x98\x80"};
    static const char *tails[] = {"\"",      "\",", "\"}", "\"]", "\": \"", "\\n", "\\\"",
                                  "\\u00e9", "\n",  "@",   ".",   ",",      "}",   "\t"};
    char t[64];
    while (bv->n < CAP - 2) {
        int kind = (int)(rnd() % 8), n = 0;
        int len = kind < 3   ? 1 + (int)(rnd() % 8)
                  : kind < 5 ? 12 + (int)(rnd() % 28)
                             : 1 + (int)(rnd() % 5);
        if (kind == 5) { /* multi-byte characters, sometimes starting or ending inside one */
            if (rnd() % 3 == 0) t[n++] = "\xb8\xad\x96"[rnd() % 3];
            for (int k = 0; k < len && n < 40; k++) {
                const char *c = cjk[rnd() % 5];
                size_t cl = strlen(c);
                if (rnd() % 6 == 0 && k + 1 == len) cl = 1 + rnd() % (unsigned)(cl - 1);
                memcpy(t + n, c, cl);
                n += (int)cl;
            }
        } else if (kind == 6) { /* whitespace and digit runs */
            const char *set = rnd() % 2 ? " \n" : "0123456789";
            for (int k = 0; k < 2 * len + 8; k++)
                t[n++] = set[rnd() % strlen(set)];
        } else {
            for (int k = 0; k < len; k++)
                t[n++] = alpha[rnd() % strlen(alpha)];
        }
        if (kind == 7 || rnd() % 5 == 0) {
            const char *tl = tails[rnd() % ARRAY_LEN(tails)];
            memcpy(t + n, tl, strlen(tl));
            n += (int)strlen(tl);
        }
        bv_add(bv, &used, t, (size_t)n);
    }
    bv_add(bv, &used, "<|ctl|>", 7);
    bv->cls[bv->n - 1] = GRAMMAR_TOKEN_CONTROL;
    bv_add(bv, &used, "</s>", 4);
    bv->cls[bv->n - 1] = GRAMMAR_TOKEN_CONTROL;
    int32_t eos = bv->n - 1;
    return grammar_vocab_new(bv->n, bv->bytes, bv->len, bv->cls, &eos, 1);
}

/* Every mask along random walks equals a byte walk of every token. */
static void big_mask_vs_walk(const struct bigvocab *bv, const struct grammar_vocab *v,
                             enum grammar_kind k, const char *src, int walks, int steps)
{
    struct grammar *g = compile(k, src);
    EXPECT(g != NULL);
    if (!g) return;
    uint64_t *mask = malloc(sizeof(uint64_t) * (size_t)((bv->n + 63) / 64));
    int *allowed = malloc(sizeof(int) * (size_t)bv->n);
    for (int w = 0; w < walks; w++) {
        struct grammar_matcher *m = grammar_matcher_new(g, v);
        struct buf hist = {0};
        for (int s = 0; s < steps; s++) {
            int n_allowed = grammar_matcher_fill_mask(m, mask), n = 0, mismatches = 0;
            for (int t = 0; t < bv->n; t++) {
                bool bit = (mask[t >> 6] >> (t & 63)) & 1;
                if (bit) allowed[n++] = t;
                if (bit != grammar_matcher_allows(m, t) && mismatches++ < 3)
                    fprintf(stderr, "  walk %d step %d: token %d '%.*s' mask %d\n", w, s, t,
                            (int)bv->len[t], bv->bytes[t], (int)bit);
            }
            EXPECT_EQ_INT(mismatches, 0);
            EXPECT_EQ_INT(n_allowed, n);
            if (mismatches) {
                fprintf(stderr, "  after: ");
                fwrite(hist.data, 1, hist.len, stderr);
                fprintf(stderr, "\n");
            }
            if (mismatches || n == 0) break;
            int t = allowed[rnd() % (unsigned)n];
            EXPECT(grammar_matcher_accept_token(m, t));
            buf_append(&hist, bv->bytes[t], bv->len[t]);
            if (grammar_matcher_is_terminated(m)) break;
        }
        buf_release(&hist);
        grammar_matcher_free(m);
    }
    free(mask);
    free(allowed);
    grammar_unref(g);
}

TEST(masks_on_a_larger_vocabulary)
{
    struct bigvocab bv;
    struct grammar_vocab *v = big_vocab(&bv);
    big_mask_vs_walk(
        &bv, v, GRAMMAR_JSON_SCHEMA,
        "{\"type\":\"object\",\"properties\":{"
        "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":40},"
        "\"bio\":{\"type\":\"string\",\"maxLength\":60},"
        "\"mail\":{\"type\":\"string\",\"format\":\"email\"},"
        "\"code\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9 ]{0,30}$\"},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":20},"
        "\"maxItems\":3},"
        "\"n\":{\"type\":\"integer\"},\"x\":{\"type\":\"number\"}},"
        "\"required\":[\"name\",\"bio\",\"mail\",\"code\",\"tags\"],\"additionalProperties\":"
        "false}",
        12, 60);
    big_mask_vs_walk(&bv, v, GRAMMAR_EBNF,
                     "root ::= [^\"]{0,50} \"\\\"\" [a-z \\u4e00-\\u9fff]{3,45} [\\n]", 12, 30);
    grammar_vocab_free(v);
    free(bv.text);
    free(bv.bytes);
    free(bv.len);
    free(bv.cls);
}

/* A stack deeper than the table key (GRAMMAR_CTX_DEPTH frames): a token
 * that closes more frames than the key holds is "uncertain" in the table and
 * must be decided at run time from the real stack. */
TEST(uncertain_tokens_below_the_key)
{
    struct grammar *g = compile(GRAMMAR_EBNF, "root ::= p\np ::= \"x\" | \"(\" p \")\"\n");
    EXPECT(g != NULL);
    if (!g) return;
    enum { DEPTH = 70 };
    static char closes[DEPTH + 1];
    memset(closes, ')', sizeof(closes));
    const char *bytes[] = {"(", "x", ")", closes, closes, "</s>"};
    uint32_t len[] = {1, 1, 1, DEPTH, DEPTH + 1, 4};
    uint8_t cls[] = {0, 0, 0, 0, 0, GRAMMAR_TOKEN_CONTROL};
    int32_t eos = 5;
    struct grammar_vocab *v = grammar_vocab_new(6, bytes, len, cls, &eos, 1);
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    for (int i = 0; i < DEPTH; i++)
        EXPECT(grammar_matcher_accept_token(m, 0));
    EXPECT(grammar_matcher_accept_token(m, 1));
    uint64_t mask[1];
    EXPECT_EQ_INT(grammar_matcher_fill_mask(m, mask), 2);
    EXPECT_EQ_INT((int)((mask[0] >> 2) & 1), 1); /* one ')' */
    EXPECT_EQ_INT((int)((mask[0] >> 3) & 1), 1); /* all DEPTH at once */
    EXPECT_EQ_INT((int)((mask[0] >> 4) & 1), 0); /* one too many */
    EXPECT(grammar_matcher_accept_token(m, 3));
    EXPECT_EQ_INT(grammar_matcher_fill_mask(m, mask), 1);
    EXPECT_EQ_INT((int)((mask[0] >> 5) & 1), 1); /* complete: only end of generation */
    grammar_matcher_free(m);
    grammar_vocab_free(v);
    grammar_unref(g);
}

TEST(utf8_across_tokens)
{
    struct tvocab tv;
    char store[256];
    struct grammar_vocab *v = test_vocab(&tv, store);
    struct grammar *g = compile(GRAMMAR_EBNF, "root ::= [\\u4e00-\\u9fff]+");
    struct grammar_matcher *m = grammar_matcher_new(g, v);
    /* token "\xe4\xb8" then "\xad" spells U+4E2D */
    int t1 = -1, t2 = -1;
    for (int t = 256; t < tv.n; t++) {
        if (tv.len[t] == 2 && memcmp(tv.bytes[t], "\xe4\xb8", 2) == 0) t1 = t;
        if (tv.len[t] == 1 && memcmp(tv.bytes[t], "\xad", 1) == 0) t2 = t;
    }
    EXPECT(t1 >= 0 && t2 >= 0);
    uint64_t mask[8];
    grammar_matcher_fill_mask(m, mask);
    EXPECT((mask[t1 >> 6] >> (t1 & 63)) & 1);
    EXPECT(!((mask[t2 >> 6] >> (t2 & 63)) & 1));
    EXPECT(grammar_matcher_accept_token(m, t1));
    EXPECT(!grammar_matcher_is_accepting(m));
    grammar_matcher_fill_mask(m, mask);
    EXPECT((mask[t2 >> 6] >> (t2 & 63)) & 1);
    EXPECT(!((mask['a' >> 6] >> ('a' & 63)) & 1));
    int eos = tv.n - 1;
    EXPECT(!((mask[eos >> 6] >> (eos & 63)) & 1));
    EXPECT(grammar_matcher_accept_token(m, t2));
    EXPECT(grammar_matcher_is_accepting(m));
    grammar_matcher_fill_mask(m, mask);
    EXPECT((mask[eos >> 6] >> (eos & 63)) & 1);
    int ctl = tv.n - 2;
    EXPECT(!((mask[ctl >> 6] >> (ctl & 63)) & 1));
    EXPECT(!grammar_matcher_accept_token(m, ctl));
    grammar_matcher_free(m);
    grammar_unref(g);
    grammar_vocab_free(v);
}

TEST(compile_cache)
{
    struct tvocab tv;
    char store[256];
    struct grammar_vocab *v = test_vocab(&tv, store);
    struct grammar_cache *c = grammar_cache_new(v, 2);
    struct grammar *a, *b, *d;
    struct err_msg m;
    const char *s1 = "root ::= \"a\"", *s2 = "root ::= \"b\"", *s3 = "root ::= \"c\"";
    EXPECT_EQ_INT(grammar_cache_get(c, GRAMMAR_EBNF, s1, strlen(s1), NULL, &a, &m), 0);
    EXPECT_EQ_INT(grammar_cache_get(c, GRAMMAR_EBNF, s1, strlen(s1), NULL, &b, &m), 0);
    EXPECT(a == b);
    grammar_unref(b);
    /* the same text as a regex is a different grammar */
    EXPECT_EQ_INT(grammar_cache_get(c, GRAMMAR_REGEX, s1, strlen(s1), NULL, &b, &m), 0);
    EXPECT(a != b);
    grammar_unref(b);
    EXPECT_EQ_INT(grammar_cache_get(c, GRAMMAR_EBNF, s2, strlen(s2), NULL, &d, &m), 0);
    grammar_unref(d);
    EXPECT_EQ_INT(grammar_cache_get(c, GRAMMAR_EBNF, s3, strlen(s3), NULL, &d, &m), 0);
    grammar_unref(d);
    /* a was evicted from the cache but is alive through our reference */
    struct grammar_matcher *mt = grammar_matcher_new(a, v);
    EXPECT(grammar_matcher_accept_bytes(mt, "a", 1));
    grammar_matcher_free(mt);
    grammar_unref(a);
    uint64_t hits, misses;
    grammar_cache_stats(c, &hits, &misses);
    EXPECT_EQ_INT(hits, 1);
    EXPECT_EQ_INT(misses, 4);
    EXPECT(grammar_cache_get(c, GRAMMAR_EBNF, "bad", 3, NULL, &d, &m) == ERR_INVALID);
    grammar_cache_free(c);
    grammar_vocab_free(v);
}

TEST_MAIN()
