#!/usr/bin/env bash
# test_grammar.sh - structured output end to end on a random-weight model.
#
# A random model gives random text, which makes the constraint a hard test:
# for each of the schemas in tests/cli/grammar/schemas/ (41), `inferd grammar
# gen` runs N constrained generations through the engine with random
# sampling, and every one must finish with "stop", parse as JSON and validate
# against its schema (ajv, tests/cli/grammar/validate.mjs). Also: `inferd
# grammar check` errors, and GBNF / regex generations checked in the shell.
#
# First pass: N generations per schema (INFERD_GRAMMAR_GEN_COUNT, default 8),
# each schema's N in one `gen` run (up to 64 at once in the engine's batch),
# INFERD_GRAMMAR_GEN_JOBS schemas at a time (default 1). Then, while the time
# budget lasts (INFERD_GRAMMAR_GEN_BUDGET_S seconds from the start of the
# suite, default 150: about three minutes on 2 cores with the rest of this
# file), more rounds of 16 per schema with fresh seeds, so CI checks as many
# generations as fit; the total is printed. The long mode of docs/grammar.md:
# INFERD_GRAMMAR_GEN_COUNT=1000 INFERD_GRAMMAR_GEN_BUDGET_S=0
# INFERD_GRAMMAR_GEN_JOBS=2.
source "$INFERD_SRC/tests/lib.sh"
here="$INFERD_SRC/tests/cli/grammar"
M=$(model tiny-qwen3 --preset tiny --tokenizer qwen3)
N=${INFERD_GRAMMAR_GEN_COUNT:-8}
budget=${INFERD_GRAMMAR_GEN_BUDGET_S:-150}
n_jobs=${INFERD_GRAMMAR_GEN_JOBS:-1}
t_start=$SECONDS
out="$INFERD_SCRATCH/grammar"
mkdir -p "$out"

# check: good and bad grammars, errors naming the place
if "$INFERD_BIN" grammar check --ebnf <(printf 'root ::= "a" [0-9]+\n') | grep -q '^ok:'; then
    ok "check accepts a GBNF grammar"
else fail "check accepts a GBNF grammar"; fi
msg=$("$INFERD_BIN" grammar check --json-schema <(echo '{"properties":{"a":{"contains":{}}}}') 2>&1 || true)
if grep -q '#/properties/a/contains: unsupported keyword' <<<"$msg"; then
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

# the schema suite: every schema N times, then rounds while the budget lasts
gen_valid() { # schema name count seed -> 0 when every generation is valid
    "$INFERD_BIN" grammar gen -m "$M" --json-schema "$1" --count "$3" -n 512 --seed "$4" \
        >"$out/$2.jsonl" 2>"$out/$2.err" || { echo "gen failed: $(cat "$out/$2.err")"; return 1; }
    node "$here/validate.mjs" "$1" "$out/$2.jsonl" >"$out/$2.val" 2>&1 || { cat "$out/$2.val"; return 1; }
}
schemas=("$here"/schemas/*.json)
n_gen=0
for s in "${schemas[@]}"; do # n_jobs at a time; each leaves its verdict in a file
    name=$(basename "$s" .json)
    while [ "$(jobs -rp | wc -l)" -ge "$n_jobs" ]; do wait -n; done
    { gen_valid "$s" "$name" "$N" 1 >"$out/$name.log" && echo ok >>"$out/$name.log" ||
        echo bad >>"$out/$name.log"; } &
done
wait
for s in "${schemas[@]}"; do
    name=$(basename "$s" .json)
    if [ "$(tail -n 1 "$out/$name.log")" = ok ]; then
        ok "$name: $N generations valid"
        n_gen=$((n_gen + N))
    else
        sed '$d' "$out/$name.log"
        fail "$name"
    fi
done
round=2
while [ $((SECONDS - t_start)) -lt "$budget" ]; do
    for s in "${schemas[@]}"; do
        [ $((SECONDS - t_start)) -lt "$budget" ] || break
        name=$(basename "$s" .json)
        if gen_valid "$s" "$name" 16 "$round"; then
            n_gen=$((n_gen + 16))
        else
            fail "$name: round $round, seed $round"
        fi
    done
    round=$((round + 1))
done
[ "${#schemas[@]}" -ge 30 ] && ok "${#schemas[@]} schemas" || fail "only ${#schemas[@]} schemas"
echo "# $n_gen schema generations valid in $((SECONDS - t_start)) s (budget ${budget} s)"
finish
