// bench_tiktoken.js - one-thread encode speed of the npm `tiktoken` package
// (the WASM build of OpenAI's Rust tiktoken), o200k_base, on each file given;
// prints one JSON line per file, the same fields as `inferd tokenize --bench`.
//
// usage: node bench_tiktoken.js NODE_MODULES SECONDS FILE...
'use strict';
const fs = require('fs');
const path = require('path');
const [nm, secondsArg, ...files] = process.argv.slice(2);
const { get_encoding } = require(path.join(nm, 'tiktoken'));
const enc = get_encoding('o200k_base');
for (const f of files) {
  const text = fs.readFileSync(f, 'utf8');
  const bytes = Buffer.byteLength(text);
  const ids = enc.encode_ordinary(text); // warm-up
  let repeat = 0;
  const t0 = process.hrtime.bigint();
  let t;
  do {
    enc.encode_ordinary(text);
    repeat++;
    t = Number(process.hrtime.bigint() - t0) / 1e9;
  } while (t < Number(secondsArg));
  fs.writeFileSync(f + '.tiktoken.ids', JSON.stringify(Array.from(ids)) + '\n');
  console.log(JSON.stringify({ file: f, bytes, tokens: ids.length, repeat, seconds: t,
    mb_per_s: bytes * repeat / t / 1e6 }));
}
enc.free();
