// validate.mjs SCHEMA OUTPUT.jsonl - checks `inferd grammar gen` output: every
// generation finished with "stop", parses as JSON and validates against the
// schema (ajv, JSON Schema 2020-12). ajv-formats is not installed, so the
// formats the grammar supports are checked here by their definitions (dates
// also by month length; Feb 29 is accepted in any year, where the grammar is
// stricter).
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import { isIPv4, isIPv6 } from "node:net";

const [schemaPath, outPath] = process.argv.slice(2);
const schema = JSON.parse(readFileSync(schemaPath, "utf8"));
const ajv = new Ajv2020({ strict: false, validateFormats: false, logger: false });
const validate = ajv.compile(schema);

const days = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const date = (s) => {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  return !!m && +m[2] >= 1 && +m[2] <= 12 && +m[3] >= 1 && +m[3] <= days[+m[2] - 1];
};
const time = (s) => /^([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$/.test(s);
const formats = {
  date,
  time,
  "date-time": (s) => {
    const i = s.search(/[Tt]/);
    return i === 10 && date(s.slice(0, i)) && time(s.slice(i + 1));
  },
  uuid: (s) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(s),
  email: (s) => /^[^@\s"(),:;<>[\\\]]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$/.test(s) && !/\.\./.test(s) &&
    s.indexOf("@") <= 64 && s.length <= 254 && hostname(s.slice(s.indexOf("@") + 1)),
  hostname: (s) => hostname(s),
  ipv4: (s) => isIPv4(s) && !/(^|\.)0\d/.test(s),
  ipv6: (s) => isIPv6(s),
  // the WHATWG parser is laxer than RFC 3986, so the characters are checked too
  uri: (s) => /^[A-Za-z][A-Za-z0-9+.-]*:/.test(s) && /^([A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$/.test(s) &&
    (() => { try { new URL(s); return true; } catch { return false; } })(),
};
function hostname(s) {
  return s.length <= 253 && s.split(".").every((l) => /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(l));
}
function checkFormats(sch, v) {
  if (!sch || typeof sch !== "object") return true;
  if (typeof v === "string" && sch.format && formats[sch.format] && !formats[sch.format](v)) return false;
  if (sch.properties && v && typeof v === "object")
    return Object.entries(v).every(([k, x]) => checkFormats(sch.properties[k], x));
  return true;
}

// ajv checks multipleOf on doubles, which is wrong for integers beyond 2^53 (the
// grammar allows 32 digits): such errors are re-checked exactly on the number's text.
function numberTexts(text) { // the JSON with every number replaced by a marker string of its text
  let out = "", i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      out += text.slice(i, j + 1); i = j + 1;
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      const m = /^-?\d+(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
      out += JSON.stringify("\u0000" + m[0]); i += m[0].length;
    } else { out += c; i++; }
  }
  return JSON.parse(out);
}
function exactMultiple(text, err) {
  let v = numberTexts(text);
  for (const key of err.instancePath.split("/").slice(1))
    v = v[key.replace(/~1/g, "/").replace(/~0/g, "~")];
  const m = /^\u0000(-?\d+)(\.0+)?$/.exec(v);
  const k = err.params.multipleOf;
  return !!m && Number.isInteger(k) && BigInt(m[1]) % BigInt(k) === 0n;
}

let n = 0, bad = 0;
for (const line of readFileSync(outPath, "utf8").split("\n")) {
  if (!line) continue;
  n++;
  const rec = JSON.parse(line);
  let why = null, value;
  if (rec.finish !== "stop") why = `finish ${rec.finish} after ${rec.tokens} tokens`;
  else {
    try { value = JSON.parse(rec.text); } catch (e) { why = `not JSON: ${e.message}`; }
    if (!why && !validate(value) &&
        !validate.errors.every((e) => e.keyword === "multipleOf" && exactMultiple(rec.text, e)))
      why = ajv.errorsText(validate.errors);
    if (!why && !checkFormats(schema, value)) why = `format ${schema.format ?? "of a member"}`;
  }
  if (why) {
    bad++;
    if (bad <= 3) console.log(`  invalid generation ${rec.index}: ${why}: ${JSON.stringify(rec.text).slice(0, 300)}`);
  }
}
console.log(`${schemaPath.split("/").pop()}: ${n - bad}/${n} valid`);
process.exit(bad === 0 && n > 0 ? 0 : 1);
