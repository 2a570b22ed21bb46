#!/usr/bin/env bash
# Tool calls end to end with the official SDKs: one `inferd serve` per
# tool-call family on tiny random-weight models with real tokenizers
# (qwen3: Hermes <tool_call>; deepseek_v3: DeepSeek markers; llama3: bare
# JSON; mistral_nemo: [TOOL_CALLS] / bare array), then
# tests/e2e/tools.test.mjs with node's test runner.
source "$(dirname "$0")/../lib.sh"
declare -A models
models[hermes]=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
models[deepseek]=$(model tiny-qwen3-ds3tok-q8_0 --preset tiny --arch qwen3 --type q8_0 --tokenizer deepseek_v3)
models[llama3]=$(model tiny-llama-q8_0 --preset tiny --arch llama --type q8_0)
models[mistral]=$(model tiny-qwen3-nemotok-q8_0 --preset tiny --arch qwen3 --type q8_0 --tokenizer mistral_nemo)
work="$INFERD_SCRATCH/e2e_tools.$$"
rm -rf "$work"
mkdir -p "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

for fam in "${!models[@]}"; do
    "$INFERD_BIN" serve -m "${models[$fam]}" --name tiny --port 0 --port-file "$work/$fam.port" \
        --data-dir "$work/$fam" --threads 1 --ctx 2048 >"$work/$fam.log" 2>&1 &
    pids+=($!)
done
urls=""
for fam in "${!models[@]}"; do
    for _ in $(seq 1 300); do [ -s "$work/$fam.port" ] && break; sleep 0.1; done
    [ -s "$work/$fam.port" ] || { cat "$work/$fam.log"; fail "$fam server did not start"; finish; exit 1; }
    grep -q "tool calls: $fam format" "$work/$fam.log" && ok "$fam: family detected" ||
        fail "$fam: family detected ($(grep 'tool calls' "$work/$fam.log"))"
    urls="$urls$fam=http://127.0.0.1:$(cat "$work/$fam.port"),"
done

t0=$(date +%s.%N)
if INFERD_TOOL_URLS="$urls" INFERD_MODEL=tiny \
    node --test --test-reporter=spec "$INFERD_SRC/tests/e2e/tools.test.mjs" >"$work/node.out" 2>&1; then
    ok "SDK tool suite: $(grep -E '^ℹ (pass|fail)' "$work/node.out" | tr '\n' ' ')"
else
    cat "$work/node.out"
    for fam in "${!models[@]}"; do echo "--- $fam server log (tail)"; tail -5 "$work/$fam.log"; done
    fail "SDK tool suite"
fi
echo "node suite took $(/usr/bin/python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)") s"
finish
