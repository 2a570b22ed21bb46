#!/usr/bin/env bash
# test_grammar.sh - structured output end to end on a random-weight model.
#
# A random model gives random text, which makes the constraint a hard test:
# for each of the schemas in tests/cli/grammar/schemas/ (34), `inferd grammar
# gen` runs N constrained generations through the engine with random
# sampling, and every one must finish with "stop", parse as JSON and validate
# against its schema (ajv, tests/cli/grammar/validate.mjs). Also: `inferd
# grammar check` errors, and GBNF / regex generations checked in the shell.
#
# N is INFERD_GRAMMAR_GEN_COUNT (default 8, so the suite stays within about
# two minutes on 2 cores; the long mode of docs/grammar.md uses 1000).
source "$INFERD_SRC/tests/lib.sh"
here="$INFERD_SRC/tests/cli/grammar"
M=$(model tiny-qwen3 --preset tiny --tokenizer qwen3)
N=${INFERD_GRAMMAR_GEN_COUNT:-8}
out="$INFERD_SCRATCH/grammar"
mkdir -p "$out"

# check: good and bad grammars, errors naming the place
if "$INFERD_BIN" grammar check --ebnf <(printf 'root ::= "a" [0-9]+\n') | grep -q '^ok:'; then
    ok "check accepts a GBNF grammar"
else fail "check accepts a GBNF grammar"; fi
msg=$("$INFERD_BIN" grammar check --json-schema <(echo '{"properties":{"a":{"not":{}}}}') 2>&1 || true)
if grep -q '#/properties/a/not: unsupported keyword' <<<"$msg"; then
    ok "unsupported keyword named with its JSON path"
else fail "unsupported keyword message: $msg"; fi
if ! "$INFERD_BIN" grammar check --regex '(a' 2>/dev/null; then ok "bad regex fails"; else fail "bad regex accepted"; fi

# GBNF and regex generations: the text must match, checked independently
"$INFERD_BIN" grammar gen -m "$M" --ebnf <(printf 'root ::= ("yes" | "no") ("," [0-9]{1,3}){0,3}\n') \
    --count "$N" -n 64 --seed 7 >"$out/ebnf.jsonl"
bad=$(node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
let bad = lines.filter(l => { const r = JSON.parse(l); return r.finish !== "stop" || !/^(yes|no)(,[0-9]{1,3}){0,3}$/.test(r.text); });
console.log(lines.length === 0 ? 1 : bad.length);' "$out/ebnf.jsonl")
[ "$bad" = 0 ] && ok "GBNF generations match" || fail "GBNF generations: $bad bad"
"$INFERD_BIN" grammar gen -m "$M" --regex '[a-f0-9]{8}-(x|yz){1,3}' --count "$N" -n 64 --seed 9 >"$out/regex.jsonl"
bad=$(node -e '
const lines = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n");
let bad = lines.filter(l => { const r = JSON.parse(l); return r.finish !== "stop" || !/^[a-f0-9]{8}-(x|yz){1,3}$/.test(r.text); });
console.log(lines.length === 0 ? 1 : bad.length);' "$out/regex.jsonl")
[ "$bad" = 0 ] && ok "regex generations match" || fail "regex generations: $bad bad"

# the schema suite
n_schemas=0
for s in "$here"/schemas/*.json; do
    n_schemas=$((n_schemas + 1))
    name=$(basename "$s" .json)
    if ! "$INFERD_BIN" grammar gen -m "$M" --json-schema "$s" --count "$N" -n 512 --seed 1 \
        >"$out/$name.jsonl" 2>"$out/$name.err"; then
        fail "$name: gen failed: $(cat "$out/$name.err")"
        continue
    fi
    if node "$here/validate.mjs" "$s" "$out/$name.jsonl"; then
        ok "$name: $N generations valid"
    else
        fail "$name"
    fi
done
[ "$n_schemas" -ge 30 ] && ok "$n_schemas schemas" || fail "only $n_schemas schemas"
finish
