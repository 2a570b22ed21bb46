// zod4-gen.mjs - regenerates zod4.json: the JSON Schemas that zod 4 emits for
// its string formats (z.toJSONSchema), the inputs of test_formats.c. zod is
// not a dependency of the project; run this where zod is installed:
//   npm install zod@4.6.7 && node zod4-gen.mjs > part.json   (and zod@4.0.0)
// then merge the parts under "zod <version>" keys. Formats the grammar does
// not support (cidrv4, duration, e164, ...) are left out.
import { z } from "zod";
import { createRequire } from "node:module";

const version = createRequire(import.meta.url)("zod/package.json").version;
const out = {};
const add = (k, s) => {
  const j = z.toJSONSchema(s);
  delete j.$schema;
  out[k] = j;
};
add("email", z.email());
add("uuid", z.uuid());
add("datetime", z.iso.datetime());
if (version !== "4.0.0") {
  add("uuidv4", z.uuidv4());
  add("guid", z.guid());
  add("url", z.url());
  add("ipv4", z.ipv4());
  add("ipv6", z.ipv6());
  add("date", z.iso.date());
  add("time", z.iso.time());
  add("time_p3", z.iso.time({ precision: 3 }));
  add("datetime_offset", z.iso.datetime({ offset: true }));
  add("datetime_local", z.iso.datetime({ local: true }));
  add("datetime_p0", z.iso.datetime({ precision: 0 }));
  add("datetime_p3", z.iso.datetime({ precision: 3 }));
  add("hostname", z.hostname());
  add("email_max", z.email().max(255));
  add("email_html5", z.email({ pattern: z.regexes.html5Email }));
  add("email_rfc5322", z.email({ pattern: z.regexes.rfc5322Email }));
  add("object", z.object({ email: z.email(), id: z.uuid(), at: z.iso.datetime() }));
}
console.log(JSON.stringify({ [`zod ${version}`]: out }, null, 1));
