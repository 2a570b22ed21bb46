// jinja_lang_diff.js - the Jinja language, snippet by snippet, against
// @huggingface/jinja: statements, expressions, filters, tests and methods
// chat templates use, each rendered by the oracle and by one
// `inferd template --batch` process (each case carries its own template),
// compared byte for byte; a snippet the oracle rejects must fail in inferd.
//
//   node jinja_lang_diff.js --inferd BIN --scratch DIR
//
// Only what both implement: the oracle lacks some of Jinja2 ({% raw %},
// string ordering, first/list/count on strings, map with a filter name,
// list.append, tests with an argument but no parentheses); the unit tests
// cover those. Values are printed through tojson or as strings/numbers, because the two
// print none, booleans, lists and dicts differently (the oracle as JSON,
// Jinja2 as Python's repr; inferd follows Jinja2). Other known departures
// of the oracle from Jinja2 are left out: str.strip/lstrip/rstrip with an
// argument, capitalize (the oracle keeps the rest's case), int() of a
// negative float, `is number` on booleans, == on containers (identity),
// selectattr with a test on a missing attribute, unique (case-sensitive
// in the oracle), title on apostrophes, attributes of undefined values and
// string + number (errors in Jinja2).
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { createRequire } = require('module');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const nodeModules = process.env.INFERD_NODE_MODULES || path.join(__dirname, '../../node_modules');
const { Template } = createRequire(path.join(nodeModules, 'x.js'))('@huggingface/jinja');
const FIXED_NOW = Date.UTC(2024, 6, 26, 10, 30, 0); // strftime_now on both sides
const RealDate = Date;
global.Date = class extends RealDate {
  constructor(...a) { if (a.length) super(...a); else super(FIXED_NOW); }
  static now() { return FIXED_NOW; }
};

const V = {
  s: '  Hello, World  ', u: 'h\u00e9llo \u4e16\u754c', n: 7, f: 2.5, neg: -3, t: true, no: false, z: null,
  xs: [3, 1, 2], strs: ['b', 'a', 'c'], empty: [],
  d: { b: 1, a: 2, c: { deep: [1, 'x', null, true] } },
  ms: [{ role: 'system', content: 'S' }, { role: 'user', content: 'U1' }, { role: 'assistant', content: 'A1', tool_calls: [{ function: { name: 'f', arguments: { q: 1 } } }] },
    { role: 'tool', content: 'T' }, { role: 'user', content: 'U2' }],
  tool: { type: 'function', function: { name: 'get', description: 'Get "it"\n', parameters: { type: 'object', properties: { a: { type: 'number', minimum: 0.5 } } } } },
};

const snippets = [
  // output, whitespace control, comments
  'a{{ s }}b', '{{ n }}|{{ f }}|{{ neg }}|{{ u }}', 'x {#- c -#} y', 'a  {{- n -}}  b', '{%- if t -%}  yes  {%- endif -%}',
  '{% if t %}\n  x\n{% endif %}\nend', '  {% for x in xs %}\n    {{ x }}\n  {% endfor %}\n', '{{ "multi" }}\n\n{{ "line" }}\n',
  // if / for
  '{% if n > 5 and not no %}A{% elif n %}B{% else %}C{% endif %}', '{% if z is none %}N{% endif %}{% if missing %}M{% else %}-{% endif %}',
  '{% for x in xs %}{{ loop.index }}:{{ x }}{% if not loop.last %},{% endif %}{% endfor %}',
  '{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.length }}{{ loop.first|tojson }}{% endfor %}',
  '{% for x in empty %}x{% else %}none{% endfor %}', '{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }};{% endfor %}',
  '{% for k, v in d|items %}{{ k }}={{ v|tojson }};{% endfor %}', '{% for k in d %}{{ k }}{% endfor %}',
  '{% for m in ms %}{% if m.role == "user" %}{{ m.content }}{% endif %}{% endfor %}',
  '{% for m in ms[::-1] %}{{ m.role[0] }}{% endfor %}', '{% for a in xs %}{% for b in strs %}{{ a }}{{ b }}{% endfor %}{% endfor %}',
  '{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}', '{% for x in xs %}{% if x == 1 %}{% break %}{% endif %}{{ x }}{% endfor %}',
  '{% for x in range(3) %}{{ x }}{% endfor %}{% for x in range(1, 7, 2) %}{{ x }}{% endfor %}',
  // set / namespace / macro / call / filter block
  '{% set a = n * 2 %}{{ a }}', '{% set a, b = 1, 2 %}{{ a + b }}', '{% set x %}in{{ n }}{% endset %}[{{ x }}]',
  '{% set ns = namespace(c=0, s="") %}{% for x in xs %}{% set ns.c = ns.c + x %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.c }}{{ ns.s }}',
  '{% macro m(a, b="d") %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}',
  '{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}inner{% endcall %}',
  '{% filter upper %}shout {{ n }}{% endfilter %}',
  // expressions
  '{{ n + 1 }} {{ n - 10 }} {{ n * 3 }} {{ n / 2 }} {{ n // 2 }} {{ n % 4 }} {{ 2 ** 8 }} {{ f * 2 }}', '{{ -n }} {{ +n }} {{ -f }}',
  '{{ "a" ~ n ~ "b" }} {{ "x" + "y" }} {{ (xs + [9])|tojson }}', 
  '{{ (n == 7)|tojson }}{{ (n != 7)|tojson }}{{ (n < 8)|tojson }}{{ xs|first }}{{ xs|last }}{{ xs|list|tojson }}', '{{ ("ell" in s)|tojson }}{{ (2 in xs)|tojson }}{{ ("a" in d)|tojson }}{{ ("q" not in s)|tojson }}',
  '{{ "y" if t else "n" }}{{ "y" if no else "n" }}', '{{ (n and "x") }}{{ (0 or "z") }}',
  '{{ xs[0] }}{{ xs[-1] }}{{ d.a }}{{ d["b"] }}{{ d.c.deep[1] }}', '{{ xs[1:]|tojson }}{{ xs[:2]|tojson }}{{ xs[::-1]|tojson }}{{ strs[::2]|tojson }}',
  '{{ s[2:7] }}|{{ u[1:3] }}|{{ u[::-1] }}', '{{ [1, "a", [2]]|tojson }}{{ {"k": "v", "n": [1]}|tojson }}',
  '{{ (d.missing is defined)|tojson }}{{ (d.a is defined)|tojson }}', '{{ ms[2].tool_calls[0].function.arguments|tojson }}',
  // filters
  '[{{ s|trim }}]', '{{ s|length }}{{ xs|length }}{{ d|length }}{{ u|length }}', '{{ s|upper }}{{ s|lower }}', '{{ "hello big world"|title }}',
  '{{ s|replace("l", "L") }}', '{{ xs|join(",") }}{{ strs|join }}', 
  '{{ missing|default("dflt") }}{{ n|default(0) }}', '{{ ""|default("e", true) }}',
  '{{ d|items|list|tojson }}', '{{ ms|selectattr("role", "equalto", "user")|map(attribute="content")|join(",") }}',
  '{{ ms|rejectattr("role", "equalto", "user")|map(attribute="role")|join(",") }}', 
  '{{ [1, 2, 1, 3]|unique|list|tojson }}', '{{ "42"|int + 1 }} {{ "2.5"|float * 2 }} {{ 3.7|int }} {{ "abc"|int }}',
  '{{ xs|sort|tojson }}{{ strs|sort(reverse=true)|tojson }}', '{{ d|dictsort|tojson }}', '{{ -5|abs }}{{ neg|abs }}',
  '{{ xs|reverse|list|tojson }}', '{{ "a\\nb\\n\\nc"|indent }}|{{ "a\\nb"|indent(2) }}|{{ "x\\ny"|indent(2, true) }}',
  '{{ tool|tojson }}', '{{ d|tojson(indent=2) }}', '{{ tool|tojson(indent=4) }}', '{{ u|tojson }}{{ "q\\"\\\\\\n\\t"|tojson }}',
  '{{ {"b": 1, "a": [2, {"d": 1, "c": 2}]}|tojson(sort_keys=true) }}', '{{ n|string ~ f|string }}', '{{ "<b>"|safe }}',
  // tests
  '{{ (n is number)|tojson }}{{ (s is string)|tojson }}{{ (d is mapping)|tojson }}{{ (xs is iterable)|tojson }}{{ (z is none)|tojson }}',
  '{{ (t is boolean)|tojson }}{{ (t is true)|tojson }}{{ (no is false)|tojson }}{{ (missing is undefined)|tojson }}{{ (n is defined)|tojson }}',
  '{{ (3 is odd)|tojson }}{{ (4 is even)|tojson }}{{ (s is sequence)|tojson }}{{ (n is integer)|tojson }}',
  '{{ ("abc" is lower)|tojson }}{{ ("ABC" is upper)|tojson }}{{ (n is not none)|tojson }}',
  // methods
  '[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]', '{{ "a,b,,c".split(",")|tojson }}{{ "  a  b ".split()|tojson }}{{ "a b c".split(" ", 1)|tojson }}',
  '{{ s.startswith("  He")|tojson }}{{ s.endswith("x")|tojson }}{{ s.startswith(("x", "  "))|tojson }}', '{{ s.replace("o", "0") }}{{ "aaa".replace("a", "b", 2) }}',
  '{{ s.upper() }}{{ s.lower() }}{{ "hello world".title() }}', '{{ d.items()|list|tojson }}{{ d.keys()|list|tojson }}{{ d.values()|list|tojson }}',
  '{{ d.get("a") }}{{ d.get("zz", "def") }}', 
  '{{ "a</think>b".split("</think>")[-1] }}{{ "x<think>y".split("<think>")[0] }}',
  // globals and errors
  '{{ raise_exception("custom failure") }}', '{{ range(4)|list|tojson }}', '{{ strftime_now("%Y-%m-%d") }}',
 '{% for x in 5 %}{% endfor %}', '{{ xs|bogusfilter }}',
];

const cases = snippets.map((t) => ({ template: t }));
const expected = cases.map((c) => {
  try { return { text: new Template(c.template).render({ ...V, messages: [], add_generation_prompt: true, bos_token: '', eos_token: '' }) }; } catch (e) { return { error: String(e.message) }; }
});

fs.mkdirSync(args.scratch, { recursive: true });
const batchFile = path.join(args.scratch, 'language.jsonl');
fs.writeFileSync(batchFile, cases.map((c) => JSON.stringify({ template: c.template, messages: [], kwargs: V })).join('\n') + '\n');
const tpl = path.join(args.scratch, 'empty.jinja');
fs.writeFileSync(tpl, '');
const out = execFileSync(args.inferd, ['template', '--template', tpl, '--batch', batchFile],
  { env: { ...process.env, INFERD_TEMPLATE_NOW: String(FIXED_NOW / 1000), TZ: 'UTC' } }).toString();
const got = out.trim().split('\n').map((l) => JSON.parse(l));

let passed = 0, failed = 0;
for (let i = 0; i < cases.length; i++) {
  const e = expected[i], g = got[i] || { error: 'no output' };
  let why = null;
  if (e.text !== undefined && g.text !== e.text) why = `inferd ${JSON.stringify(g.text !== undefined ? g.text : g.error)} oracle ${JSON.stringify(e.text)}`;
  if (e.error !== undefined && g.error === undefined) why = `oracle failed (${e.error}), inferd rendered ${JSON.stringify(g.text)}`;
  if (why) { failed++; console.log(`FAIL language: ${JSON.stringify(cases[i].template)}: ${why}`); } else passed++;
}
console.log(`ok   language: ${cases.length} snippets compared`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
