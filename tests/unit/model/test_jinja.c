/*
 * test_jinja.c - the Jinja interpreter construct by construct (statements,
 * expressions, filters, tests, methods, whitespace control as transformers
 * configures it), Python semantics where they matter for chat templates,
 * error messages with their template line, the limits against hostile
 * templates, and chat_template_apply / chat_template_from_gguf.
 *
 * The differential test against @huggingface/jinja (tests/diff) covers the
 * shipped templates; this file covers the language itself.
 */
#include "test.h"

#include "base/check.h"
#include "gguf/gguf.h"
#include "model/chat_template.h"
#include "model/jinja/jinja.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Renders src with ctx (JSON text or NULL). Returns the output, or
 * "ERROR: <message>" (static buffer; valid until the next call). */
static const char *render(const char *src, const char *ctx_json)
{
    static char result[1 << 16];
    struct jinja_template *t;
    struct err_msg msg = {{0}};
    json_t *ctx = NULL;
    if (ctx_json) {
        json_error_t e;
        ctx = json_loads(ctx_json, 0, &e);
        CHECK(ctx);
    }
    int rc = jinja_parse(src, strlen(src), &t, &msg);
    if (rc) {
        snprintf(result, sizeof(result), "ERROR: %s", msg.text);
        json_decref(ctx);
        return result;
    }
    struct buf out = {0};
    rc = jinja_render(t, ctx, &out, &msg);
    if (rc)
        snprintf(result, sizeof(result), "ERROR: %s", msg.text);
    else
        snprintf(result, sizeof(result), "%s", buf_str(&out));
    buf_release(&out);
    jinja_free(t);
    json_decref(ctx);
    return result;
}

#define EXPECT_RENDER(src, ctx, want)                                                              \
    do {                                                                                           \
        const char *got_ = render(src, ctx);                                                       \
        if (strcmp(got_, want)) {                                                                  \
            fprintf(stderr, "  %s:%d: template %s\n    got  \"%s\"\n    want \"%s\"\n", __FILE__,  \
                    __LINE__, #src, got_, want);                                                   \
            test_failures_in_case++;                                                               \
        }                                                                                          \
    } while (0)

TEST(text_and_output)
{
    EXPECT_RENDER("hello", NULL, "hello");
    EXPECT_RENDER("", NULL, "");
    EXPECT_RENDER("a{{ x }}b", "{\"x\": \"X\"}", "aXb");
    EXPECT_RENDER("{{ 1 }}{{ 2.5 }}{{ true }}{{ none }}{{ missing }}", NULL, "12.5TrueNone");
    EXPECT_RENDER("{{ 'a' 'b' \"c\" }}", NULL, "abc");
    EXPECT_RENDER("{{ '\\n\\t\\\\\\'\\u00e9\\x41' }}", NULL,
                  "\n\t\\'\xc3\xa9"
                  "A");
    EXPECT_RENDER("{# comment #}x{#- trimmed -#}  y", NULL, "xy");
    EXPECT_RENDER("{% raw %}{{ not parsed }}{% endraw %}", NULL, "{{ not parsed }}");
    /* One trailing newline is dropped, as Jinja's keep_trailing_newline=False. */
    EXPECT_RENDER("x\n", NULL, "x");
    EXPECT_RENDER("x\n\n", NULL, "x\n");
}

TEST(whitespace_control)
{
    EXPECT_RENDER("a  {{- 'b' -}}  \n c", NULL, "abc");
    EXPECT_RENDER("a\n  {%- if true -%}\n  b\n{%- endif %}", NULL, "ab");
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: the
     * indentation before it. Expressions keep both. */
    EXPECT_RENDER("{% if true %}\n    x\n{% endif %}\ny", NULL, "    x\ny");
    EXPECT_RENDER("  {% if true %}a{% endif %}\n  {{ 'b' }}\n", NULL, "a  b");
    EXPECT_RENDER("{# c #}\nz", NULL, "z");
    EXPECT_RENDER("{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}", NULL, "  1\n  2\n");
    /* generation markers vanish. */
    EXPECT_RENDER("a {% generation %}b{% endgeneration %} c", NULL, "a b c");
    EXPECT_RENDER("a {%- generation -%} b", NULL, "ab");
}

TEST(if_elif_else)
{
    const char *t = "{% if x == 1 %}one{% elif x == 2 %}two{% elif x > 10 %}big{% else %}other{% "
                    "endif %}";
    EXPECT_RENDER(t, "{\"x\": 1}", "one");
    EXPECT_RENDER(t, "{\"x\": 2}", "two");
    EXPECT_RENDER(t, "{\"x\": 11}", "big");
    EXPECT_RENDER(t, "{\"x\": 3}", "other");
    EXPECT_RENDER("{% if [] %}a{% elif {} %}b{% elif '' %}c{% elif 0.0 %}d{% else %}e{% endif %}",
                  NULL, "e");
    EXPECT_RENDER("{% if not x %}no x{% endif %}", NULL, "no x");
    EXPECT_RENDER("{{ 'y' if a and not b or c else 'n' }}", "{\"a\": 1, \"b\": 0, \"c\": 0}", "y");
    EXPECT_RENDER("[{{ 'y' if false }}]", NULL, "[]");
    /* and / or return an operand, as in Python. */
    EXPECT_RENDER("{{ 0 or 'z' }} {{ 'a' and 'b' }} {{ '' and 'b' }}|", NULL, "z b |");
}

TEST(for_loops)
{
    EXPECT_RENDER("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                  "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};"
                  "{% endfor %}",
                  "{\"xs\": [\"a\", \"b\"]}", "1021TrueFalse2;2110FalseTrue2;");
    EXPECT_RENDER("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT_RENDER("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}",
                  NULL, "2/2 4/2 ");
    EXPECT_RENDER("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
                  "{\"d\": {\"b\": 1, \"a\": 2}}", "b=1,a=2,");
    EXPECT_RENDER("{% for k in d %}{{ k }}{% endfor %}", "{\"d\": {\"x\": 1, \"y\": 2}}", "xy");
    EXPECT_RENDER("{% for c in 'h\xc3\xa9' %}[{{ c }}]{% endfor %}", NULL, "[h][\xc3\xa9]");
    EXPECT_RENDER("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}"
                  "{% endfor %}",
                  NULL, "13");
    EXPECT_RENDER(
        "{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}", NULL,
        "1");
    EXPECT_RENDER("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}"
                  "{{ loop.index }}|{% endfor %}",
                  NULL, "1x2y1|1x2y2|");
    EXPECT_RENDER("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}",
                  NULL, "-2 1-3 2- ");
    /* A set inside a loop does not leak out of it. */
    EXPECT_RENDER("{% set x = 1 %}{% for i in [5] %}{% set x = i %}{% endfor %}{{ x }}", NULL, "1");
    EXPECT_RENDER("{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(5, 1, -2) %}{{ i }}"
                  "{% endfor %}",
                  NULL, "01253");
    EXPECT_RENDER("{% for x in none %}{% endfor %}", NULL,
                  "ERROR: template line 1: 'none' object is not iterable");
}

TEST(set_and_namespace)
{
    EXPECT_RENDER("{% set a, b = 1, 2 %}{{ a }}{{ b }}", NULL, "12");
    EXPECT_RENDER("{% set (a, b) = ['x', 'y'] %}{{ b }}{{ a }}", NULL, "yx");
    EXPECT_RENDER("{% set x %}in {{ 'block' }}{% endset %}[{{ x }}]", NULL, "[in block]");
    EXPECT_RENDER("{% set x | upper %}shout{% endset %}{{ x }}", NULL, "SHOUT");
    EXPECT_RENDER(
        "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}"
        "{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}",
        NULL, "6 123");
    EXPECT_RENDER("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c }}", NULL,
                  "12");
    EXPECT_RENDER("{% set d = {} %}{% set d.x = 1 %}", NULL,
                  "ERROR: template line 1: cannot assign attribute 'x' on a dict (only on a "
                  "namespace)");
    EXPECT_RENDER("{% set a, b = [1] %}", NULL,
                  "ERROR: template line 1: too few values to unpack (expected 2, got 1)");
}

TEST(macros_call_filter_blocks)
{
    EXPECT_RENDER("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                  "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}",
                  NULL, "Hi A! Hi B? Hi C.");
    EXPECT_RENDER(
        "{% macro m() %}{{ varargs|length }}{{ kwargs.k }}{% endmacro %}{{ m(1, 2, k=3) }}", NULL,
        "23");
    EXPECT_RENDER("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                  "{% call wrap('b') %}bold{% endcall %}",
                  NULL, "<b>bold</b>");
    EXPECT_RENDER("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                  "{% call(item) each([1, 2]) %}[{{ item }}]{% endcall %}",
                  NULL, "[1][2]");
    EXPECT_RENDER("{% filter upper %}abc {{ 'd' }}{% endfilter %}", NULL, "ABC D");
    EXPECT_RENDER("{% filter replace('a', 'o') | upper %}banana{% endfilter %}", NULL, "BONONO");
    EXPECT_RENDER("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                  "{{ f(3) }}",
                  NULL, "321");
}

TEST(expressions)
{
    EXPECT_RENDER("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} "
                  "{{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ -2 }} {{ 1.5 + 1 }} {{ 4 / 2 }}",
                  NULL, "7 9 3 -4 1 2 3.5 1024 -2 2.5 2.0");
    EXPECT_RENDER("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1] + [2] }}", NULL,
                  "a1NoneTrue ababab [1, 1] [1, 2]");
    EXPECT_RENDER(
        "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ 1 < 2 <= 2 }} {{ 'b' > 'a' }}", NULL,
        "True True True True True");
    EXPECT_RENDER("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }} "
                  "{{ 'x' in undefined_thing }}",
                  NULL, "True True True True False");
    EXPECT_RENDER("{{ [1, 2] == [1, 2] }} {{ {'a': [1]} == {'a': [1]} }} {{ m == n }}",
                  "{\"m\": {\"x\": [1, {\"y\": 2}]}, \"n\": {\"x\": [1, {\"y\": 2}]}}",
                  "True True True");
    EXPECT_RENDER(
        "{{ xs[0] }}{{ xs[-1] }}{{ xs[5] }}|{{ d.a }}{{ d['a'] }}{{ d.nope }}|{{ 'abc'[1] }}",
        "{\"xs\": [1, 2, 3], \"d\": {\"a\": \"A\"}}", "13|AA|b");
    EXPECT_RENDER(
        "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ xs[-2:] }}",
        "{\"xs\": [1, 2, 3]}", "[2, 3] [1, 2] [3, 2, 1] [1, 3] [] [2, 3]");
    EXPECT_RENDER("{{ 'h\xc3\xa9llo'[::-1] }} {{ 'hello'[1:3] }} {{ 'h\xc3\xa9llo'[1:3] }}", NULL,
                  "oll\xc3\xa9h el \xc3\xa9l");
    EXPECT_RENDER("{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}", NULL,
                  "[1, 'a', None, True, 1.5, {'k': 'v'}]");
    EXPECT_RENDER("{{ {'a': 1, 'b': [2]}['b'][0] }} {{ (1, 2)[1] }} {{ xs.0 }}",
                  "{\"xs\": [\"z\"]}", "2 2 z");
    EXPECT_RENDER("{{ x.y }}", NULL, "ERROR: template line 1: 'x' is undefined");
    EXPECT_RENDER("{{ 1 + 'a' }}", NULL,
                  "ERROR: template line 1: unsupported operand types for +: 'int' and 'string'");
    EXPECT_RENDER("{{ 1 / 0 }}", NULL, "ERROR: template line 1: division by zero");
    EXPECT_RENDER("{{ 9223372036854775807 + 1 }}", NULL,
                  "ERROR: template line 1: integer overflow");
    EXPECT_RENDER("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1.5e-7 }} {{ 100.0 }}", NULL,
                  "0.30000000000000004 1e+20 1e+16 1.5e-07 100.0");
}

TEST(filters)
{
    EXPECT_RENDER("[{{ '  a b \\n'|trim }}] {{ 'xxaxx'|trim('x') }}", NULL, "[a b] a");
    EXPECT_RENDER("{{ 'h\xc3\xa9'|length }} {{ [1, 2]|length }} {{ {'a': 1}|count }} "
                  "{{ missing|length }}",
                  NULL, "2 2 1 0");
    EXPECT_RENDER("{{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world'|title }} {{ 'Ab'|upper }}"
                  "{{ 'Ab'|lower }}",
                  NULL, "Hello world Hello Big-World ABab");
    EXPECT_RENDER("{{ 'aaa'|replace('a', 'b', 2) }} {{ 'ab'|replace('', '-') }}", NULL,
                  "bba -a-b-");
    EXPECT_RENDER(
        "{{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join }} {{ xs|join('/', attribute='n') }}",
        "{\"xs\": [{\"n\": 1}, {\"n\": 2}]}", "1, 2, 3 ab 1/2");
    EXPECT_RENDER("{{ [3, 4]|first }}{{ [3, 4]|last }}{{ 'xyz'|first }}{{ []|first }}", NULL,
                  "34x");
    EXPECT_RENDER("{{ x|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} "
                  "{{ none|d('n', boolean=true) }}",
                  NULL, "d  d n");
    EXPECT_RENDER("{% for k, v in {'b': 1, 'a': 2}|items %}{{ k }}{{ v }}{% endfor %} "
                  "{{ {'b': 1, 'A': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', "
                  "reverse=true) }}",
                  NULL, "b1a2 [['A', 2], ['b', 1]] [['a', 2], ['b', 1]]");
    EXPECT_RENDER("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|list }} "
                  "{{ ms|rejectattr('role', 'eq', 'user')|map(attribute='c')|join }} "
                  "{{ ms|selectattr('t', 'undefined')|map(attribute='c')|join }} "
                  "{{ ms|selectattr('t')|list|length }}",
                  "{\"ms\": [{\"role\": \"user\", \"c\": \"a\"}, {\"role\": \"bot\", \"c\": \"b\", "
                  "\"t\": 1}, {\"role\": \"user\", \"c\": \"d\"}]}",
                  "['a', 'd'] b ad 1");
    EXPECT_RENDER("{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3]|reject('==', 2)|list }} "
                  "{{ ['a', 'B']|map('upper')|join }} {{ [0, 1, '']|select|list }}",
                  NULL, "[1, 3] [1, 3] AB [1]");
    EXPECT_RENDER("{{ 'abc'|list }} {{ ['a', 'A', 'b', 'a']|unique|list }} "
                  "{{ ['a', 'A']|unique(case_sensitive=true)|list }}",
                  NULL, "['a', 'b', 'c'] ['a', 'b'] ['a', 'A']");
    EXPECT_RENDER("{{ '42'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ -3.9|int }} "
                  "{{ '2.5'|float }} {{ 2|float }} {{ '0x1'|int }}",
                  NULL, "42 0 7 3 -3 2.5 2.0 0");
    EXPECT_RENDER(
        "{{ 2.5|round }} {{ 3.5|round }} {{ 1.2345|round(2) }} {{ 1.21|round(1, 'ceil') }} "
        "{{ 7|round }} {{ -1.5|abs }} {{ -3|abs }}",
        NULL, "2.0 4.0 1.23 1.3 7.0 1.5 3");
    EXPECT_RENDER("{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|"
                  "{{ 'a\\n\\nb'|indent(1, blank=true) }}",
                  NULL, "a\n    b\n\n    c|  a\n  b|a\n \n b");
    EXPECT_RENDER("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort(reverse=true) }} "
                  "{{ xs|sort(attribute='n')|map(attribute='n')|list }}",
                  "{\"xs\": [{\"n\": 2}, {\"n\": 1}]}", "[1, 2, 3] ['c', 'b', 'A'] [1, 2]");
    EXPECT_RENDER("{{ [1, 2, 3]|sum }} {{ [1, 2.5]|sum }} {{ [3, 1]|min }} {{ [3, 1]|max }} "
                  "{{ [1, 2]|reverse|list }} {{ 'abc'|reverse }}",
                  NULL, "6 3.5 1 3 [2, 1] cba");
    EXPECT_RENDER("{{ 42|string ~ 'x' }} {{ [1]|string }} {{ 'a<b'|safe }} {{ '<&\">'|e }}", NULL,
                  "42x [1] a<b &lt;&amp;&#34;&gt;");
    EXPECT_RENDER("{{ 'one two  three'|wordcount }} {{ [1, 2, 3]|batch(2)|list }}", NULL,
                  "3 [[1, 2], [3]]");
}

TEST(tojson)
{
    EXPECT_RENDER("{{ x|tojson }}",
                  "{\"x\": {\"b\": [1, 2.5, true, null, \"s\"], \"a\": {}, \"c\": [], "
                  "\"u\": \"\xc3\xa9\\n\\\"\\u0001\"}}",
                  "{\"b\": [1, 2.5, true, null, \"s\"], \"a\": {}, \"c\": [], "
                  "\"u\": \"\xc3\xa9\\n\\\"\\u0001\"}");
    EXPECT_RENDER("{{ x|tojson(indent=2) }}", "{\"x\": {\"a\": [1, {\"b\": null}], \"c\": []}}",
                  "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": []\n}");
    EXPECT_RENDER("{{ x|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }} "
                  "{{ [1, 2]|tojson(separators=[',', ':']) }}",
                  "{\"x\": {\"b\": 1, \"a\": 2}}", "{\"a\": 2, \"b\": 1} \"\\u00e9\" [1,2]");
    EXPECT_RENDER("{{ 1.0|tojson }} {{ {'k': none}|tojson }} {{ '\xf0\x9f\x99\x82'|tojson }}", NULL,
                  "1.0 {\"k\": null} \"\xf0\x9f\x99\x82\"");
}

TEST(tests)
{
    EXPECT_RENDER("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}"
                  "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 1 is number }}"
                  "{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}",
                  NULL, "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    EXPECT_RENDER(
        "{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is even }}"
        "{{ 6 is divisibleby 3 }}{{ 'a' is in ['a'] }}{{ 2 is eq 2 }}{{ 'x' is equalto 'x' }}"
        "{{ 1 is not none }}{{ 'ab' is lower }}{{ 3 is gt 2 }}",
        NULL, "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    EXPECT_RENDER("{{ ns is mapping }} {{ f is callable }}", NULL, "False False");
}

TEST(methods)
{
    EXPECT_RENDER("[{{ ' a '.strip() }}][{{ ' a '.lstrip() }}][{{ ' a '.rstrip() }}]"
                  "[{{ '\\n\\nx\\n'.strip('\\n') }}][{{ 'xyax'.lstrip('xy') }}]",
                  NULL, "[a][a ][ a][x][ax]");
    EXPECT_RENDER("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
                  "{{ 'a</think>b'.split('</think>')[-1] }} {{ 'a.b.c'.rsplit('.', 1) }}",
                  NULL, "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] b ['a.b', 'c']");
    EXPECT_RENDER("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}"
                  "{{ 'a-b'.replace('-', '+') }}{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"
                  "{{ \"it's a test\".title() }}{{ 'abc'.find('c') }}{{ 'aXbX'.count('X') }}",
                  NULL, "TrueTruea+bABabIt'S A Test22");
    EXPECT_RENDER("{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} "
                  "{{ d.get('z', 'def') }} {{ d.get('z') }}",
                  "{\"d\": {\"a\": 1, \"b\": 2}}",
                  "[['a', 1], ['b', 2]] ['a', 'b'] [1, 2] 1 def None");
    EXPECT_RENDER(
        "{% set xs = [] %}{% do xs.append(1) %}{{ xs.append(2) }}{{ xs }} {{ ', '.join(['a', "
        "'b']) }} {{ '{} and {x}'.format(1, x=2) }}",
        NULL, "None[1, 2] a, b 1 and 2");
    EXPECT_RENDER("{{ xs.append(1) }}", "{\"xs\": []}",
                  "ERROR: template line 1: cannot modify a list that came from the input");
    EXPECT_RENDER("{{ 'x'.nosuch() }}", NULL, "ERROR: template line 1: 'nosuch' is undefined");
}

TEST(globals_and_raise)
{
    EXPECT_RENDER("{{ raise_exception('Roles must alternate') }}", NULL,
                  "ERROR: Roles must alternate");
    EXPECT_RENDER("{{ dict(a=1)|tojson }} {{ range(3)|list }}", NULL, "{\"a\": 1} [0, 1, 2]");
    EXPECT_RENDER("{{ messages }}", "{\"messages\": \"shadowed\"}", "shadowed");
    /* Context values shadow builtins, as in transformers. */
    EXPECT_RENDER("{{ range }}", "{\"range\": 5}", "5");
    setenv("INFERD_TEMPLATE_NOW", "1721989800", 1); /* 2024-07-26 10:30 UTC */
    EXPECT_RENDER("{{ strftime_now('%d %b %Y %H:%M') }} {{ strftime_now('%B') }}", NULL,
                  "26 Jul 2024 10:30 July");
    unsetenv("INFERD_TEMPLATE_NOW");
}

TEST(error_messages_name_the_line)
{
    EXPECT_RENDER("line one\n{{ x | foo }}", NULL, "ERROR: template line 2: unknown filter 'foo'");
    EXPECT_RENDER("a\nb\n{% if x is bogus %}{% endif %}", NULL,
                  "ERROR: template line 3: unknown test 'bogus'");
    EXPECT_RENDER("{% if x %}\nopen\n", NULL,
                  "ERROR: template line 1: 'if' block is never closed (expected '{% endif %}')");
    EXPECT_RENDER("x\n{% endfor %}", NULL,
                  "ERROR: template line 2: unexpected 'endfor' outside any block");
    EXPECT_RENDER("{% for x in y %}\n{% endif %}", NULL,
                  "ERROR: template line 2: unexpected 'endif' inside 'for' (opened on line 1)");
    EXPECT_RENDER("\n\n{% frobnicate %}", NULL,
                  "ERROR: template line 3: unknown statement 'frobnicate'");
    EXPECT_RENDER("{{ 'abc }}", NULL, "ERROR: template line 1: unterminated string literal");
    EXPECT_RENDER("{{ 1 +\n }}", NULL, "ERROR: template line 2: unexpected '}}' in expression");
    EXPECT_RENDER("{{ a $ b }}", NULL, "ERROR: template line 1: unexpected character '$'");
    EXPECT_RENDER("x\n{{ 'unclosed'", NULL, "ERROR: template line 2: '{{' without a closing '}}'");
    EXPECT_RENDER("\n{#", NULL, "ERROR: template line 2: '{#' without a closing '#}'");
    /* Render errors too, counting lines of the template as written (trim
     * and lstrip do not shift them). */
    EXPECT_RENDER("{% if true %}\n  {% if true %}\n{{ 1 // 0 }}{% endif %}{% endif %}", NULL,
                  "ERROR: template line 3: integer division or modulo by zero");
    EXPECT_RENDER("{% for m in ms %}\n{{ m.content.upper() }}\n{% endfor %}", "{\"ms\": [{}]}",
                  "ERROR: template line 2: 'content' is undefined");
    EXPECT_RENDER("a\n\n{{ 5() }}", NULL, "ERROR: template line 3: 'int' object is not callable");
}

TEST(limits)
{
    /* Nesting beyond the parse depth. */
    struct buf deep = {0};
    for (int i = 0; i < 400; i++)
        buf_puts(&deep, "{% if true %}");
    EXPECT(
        !strncmp(render(buf_str(&deep), NULL), "ERROR: template line 1: nesting deeper than", 43));
    buf_clear(&deep);
    buf_puts(&deep, "{{ ");
    for (int i = 0; i < 1000; i++)
        buf_puts(&deep, "(");
    buf_puts(&deep, "1 }}");
    EXPECT(
        !strncmp(render(buf_str(&deep), NULL), "ERROR: template line 1: nesting deeper than", 43));
    buf_release(&deep);
    /* Output, iterations, recursion, string size, memory. */
    EXPECT_RENDER("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL,
                  "ERROR: template line 1: output larger than 16777216 bytes");
    EXPECT_RENDER("{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(2) %}"
                  "{% endfor %}{% endfor %}{% endfor %}",
                  NULL, "ERROR: template line 1: more than 1000000 loop iterations");
    EXPECT_RENDER("{{ range(2000000) }}", NULL,
                  "ERROR: template line 1: range() longer than 1000000 items");
    EXPECT_RENDER("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL,
                  "ERROR: template line 1: macro calls nested deeper than 64");
    EXPECT_RENDER("{{ 'x' * 100000000 }}", NULL,
                  "ERROR: template line 1: string longer than 16777216 bytes");
    EXPECT_RENDER("{% set ns = "
                  "namespace(s='xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx')"
                  " %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                  NULL, "ERROR: template line 1: string longer than 16777216 bytes");
    EXPECT_RENDER("{% set ns = namespace(s='x' * 1000000) %}{% for i in range(300) %}"
                  "{% set ns.t = ns.s ~ i %}{% endfor %}",
                  NULL, "ERROR: template line 1: render uses more than 268435456 bytes of memory");
}

TEST(python_semantics_over_the_js_oracle)
{
    /* selectattr with the undefined test selects the items lacking the
     * attribute (Mistral's alternation check relies on it). */
    EXPECT_RENDER("{{ ms|selectattr('tool_calls', 'undefined')|list|length }}",
                  "{\"ms\": [{\"r\": 1}, {\"r\": 2, \"tool_calls\": []}]}", "1");
    /* == compares content, not identity. */
    EXPECT_RENDER("{{ a == b }}", "{\"a\": {\"x\": 1}, \"b\": {\"x\": 1}}", "True");
    /* strip with an argument strips only those characters. */
    EXPECT_RENDER("[{{ '\\n  x'.lstrip('\\n') }}]", NULL, "[  x]");
}

/* ---- chat_template ---- */

static const char *apply(const char *tpl, const char *messages, const char *tools, bool gen,
                         const char *kwargs)
{
    static char result[1 << 14];
    struct chat_template *ct;
    struct err_msg msg = {{0}};
    if (chat_template_new(tpl, "<s>", "</s>", &ct, &msg)) {
        snprintf(result, sizeof(result), "ERROR: %s", msg.text);
        return result;
    }
    json_t *m = json_loads(messages, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL;
    json_t *k = kwargs ? json_loads(kwargs, 0, NULL) : NULL;
    CHECK(m);
    struct buf out = {0};
    if (chat_template_apply(ct, m, t, gen, k, &out, &msg))
        snprintf(result, sizeof(result), "ERROR: %s", msg.text);
    else
        snprintf(result, sizeof(result), "%s", buf_str(&out));
    buf_release(&out);
    json_decref(m);
    json_decref(t);
    json_decref(k);
    chat_template_free(ct);
    return result;
}

#define EXPECT_STR(got, want)                                                                      \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (strcmp(g_, w_)) {                                                                      \
            fprintf(stderr, "  %s:%d:\n    got  \"%s\"\n    want \"%s\"\n", __FILE__, __LINE__,    \
                    g_, w_);                                                                       \
            test_failures_in_case++;                                                               \
        }                                                                                          \
    } while (0)

TEST(chat_template_context)
{
    const char *tpl =
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
        "{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.arguments|tojson }}"
        "{% endfor %}{% endif %}{% endfor %}{% if tools %}T{{ tools|length }}{% endif %}"
        "{% if add_generation_prompt %}<gen>{% endif %}{{ eos_token if think is defined }}";
    EXPECT_STR(apply(tpl, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, true, NULL),
               "<s><user>hi<gen>");
    EXPECT_STR(apply(tpl, "[{\"role\": \"user\", \"content\": \"hi\"}]", "[{}]", false,
                     "{\"think\": true}"),
               "<s><user>hiT1</s>");
    EXPECT_STR(apply(tpl,
                     "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, "
                     "{\"type\": \"text\", \"text\": \"b\"}]}]",
                     NULL, false, NULL),
               "<s><user>a\nb");
    EXPECT_STR(
        apply(tpl,
              "[{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": "
              "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]}]",
              NULL, false, NULL),
        "<s><assistant>{\"x\": 1}");
    /* content null: "" unless the template tests content against none. */
    EXPECT_STR(apply(tpl, "[{\"role\": \"assistant\", \"content\": null}]", NULL, false, NULL),
               "<s><assistant>");
    EXPECT_STR(apply("{% for m in messages %}{{ m.content is none }}{% endfor %}",
                     "[{\"role\": \"assistant\", \"content\": null}]", NULL, false, NULL),
               "True");
    /* A template that pastes arguments as text gets text, objects serialized. */
    const char *ds = "{% for m in messages %}{% for c in m.tool_calls %}{{ 'A:' + "
                     "c['function']['arguments'] + ';' }}{% endfor %}{% endfor %}";
    EXPECT_STR(apply(ds,
                     "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                     "\"arguments\": {\"a\": [1, \"x,y\"], \"b\": \"\xc3\xa9\"}}}, {\"function\": {"
                     "\"arguments\": \"{\\\"raw\\\":1}\"}}]}]",
                     NULL, false, NULL),
               "A:{\"a\": [1, \"x,y\"], \"b\": \"\xc3\xa9\"};A:{\"raw\":1};");
    EXPECT_STR(apply(tpl, "[{\"content\": \"x\"}]", NULL, true, NULL),
               "ERROR: messages[0].role: expected a string");
    EXPECT_STR(apply(tpl, "[{\"role\": \"user\"}, 3]", NULL, true, NULL),
               "ERROR: messages[1]: expected an object");
    EXPECT_STR(apply(tpl,
                     "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
                     "\"arguments\": \"{bad\"}}]}]",
                     NULL, true, NULL),
               "ERROR: messages[0].tool_calls[0].function.arguments: not valid JSON (string or '}' "
               "expected near 'bad')");
    EXPECT_STR(apply("{{ raise_exception('nope') }}", "[]", NULL, true, NULL), "ERROR: nope");
    EXPECT_STR(apply("{% if %}", "[]", NULL, true, NULL),
               "ERROR: template line 1: unexpected '%}' in expression");
}

TEST(template_from_gguf)
{
    char path[] = "/tmp/inferd_test_jinja_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct gguf_writer *w = gguf_writer_new();
    const char *tokens[] = {"<unk>", "<|bos|>", "<|eos|>"};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 3);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_str(w, "tokenizer.chat_template",
                        "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}");
    struct err_msg msg = {{0}};
    EXPECT_EQ_INT(gguf_writer_write(w, path, &msg), 0);
    gguf_writer_free(w);
    struct gguf_file *f;
    EXPECT_EQ_INT(gguf_open(path, &f, &msg), 0);
    struct chat_template *ct;
    EXPECT_EQ_INT(chat_template_from_gguf(f, &ct, &msg), 0);
    gguf_close(f);
    json_t *m = json_loads("[{\"role\": \"user\", \"content\": \"mid\"}]", 0, NULL);
    struct buf out = {0};
    EXPECT_EQ_INT(chat_template_apply(ct, m, NULL, true, NULL, &out, &msg), 0);
    EXPECT_STR(buf_str(&out), "<|bos|>mid<|eos|>");
    buf_release(&out);
    json_decref(m);
    chat_template_free(ct);

    /* No template; a bos id past the vocabulary. */
    w = gguf_writer_new();
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 3);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 7);
    EXPECT_EQ_INT(gguf_writer_write(w, path, &msg), 0);
    gguf_writer_free(w);
    EXPECT_EQ_INT(gguf_open(path, &f, &msg), 0);
    EXPECT_EQ_INT(chat_template_from_gguf(f, &ct, &msg), ERR_NOT_FOUND);
    gguf_close(f);
    w = gguf_writer_new();
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, 3);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 7);
    gguf_writer_set_str(w, "tokenizer.chat_template", "x");
    EXPECT_EQ_INT(gguf_writer_write(w, path, &msg), 0);
    gguf_writer_free(w);
    EXPECT_EQ_INT(gguf_open(path, &f, &msg), 0);
    EXPECT_EQ_INT(chat_template_from_gguf(f, &ct, &msg), ERR_FORMAT);
    EXPECT_STR(msg.text, "gguf: tokenizer.ggml.bos_token_id = 7, outside the 3 tokens");
    gguf_close(f);
    unlink(path);
}

TEST_MAIN()
