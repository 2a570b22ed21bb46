#!/usr/bin/env bash
# Chat templates against @huggingface/jinja: for every family whose npm
# tokenizer ships a chat_template (DeepSeek-V3, Qwen3, Llama 3, Mistral Nemo,
# Gemma 3; Llama 2 and GPT-4o ship none), the hand-made cases of
# template_diff.js plus 300 seeded random conversations, rendered through one
# `inferd template --batch` process per family and compared byte for byte;
# then the language itself, snippet by snippet (jinja_lang_diff.js).
source "$(dirname "$0")/../lib.sh"
work="$INFERD_SCRATCH/template_diff"
mkdir -p "$work"
for family in deepseek_v3 qwen3 llama3 mistral_nemo gemma3 llama2 gpt4o; do
    if out=$(node "$INFERD_SRC/tests/diff/template_diff.js" --family "$family" \
        --inferd "$INFERD_BIN" --scratch "$work" --random 300 --seed 20261129 2>&1); then
        ok "$family: $(tail -1 <<<"$out")"
    else
        echo "$out" | grep -v '^ok' | head -20
        fail "$family: $(tail -1 <<<"$out")"
    fi
done
if out=$(node "$INFERD_SRC/tests/diff/jinja_lang_diff.js" --inferd "$INFERD_BIN" --scratch "$work" 2>&1); then
    ok "language snippets: $(tail -1 <<<"$out")"
else
    echo "$out" | grep -v '^ok' | head -20
    fail "language snippets: $(tail -1 <<<"$out")"
fi
finish
