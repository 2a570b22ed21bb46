#!/usr/bin/env bash
# The SDK end-to-end suite of `inferd serve` (tests/e2e/api.test.mjs, the
# official OpenAI and Anthropic SDKs) run against `inferd gateway` in front
# of workers: a main gateway, and one with an API key and tiny limits whose
# worker runs one sequence and queues one.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
scratch gateway_sdk

# bg NAME CMD...: in the background, waits for NAME's port file; sets $port
bg() {
    local name=$1; shift
    "$@" --port-file "$work/$name.port" >>"$work/$name.log" 2>&1 &
    pids+=($!)
    wait_port "$!" "$work/$name.port" "$work/$name.log"
}
bg w1 "$INFERD_BIN" worker -m "$m" --listen 127.0.0.1:0 --threads 2 --ctx 1024; w1=$port
bg w2 "$INFERD_BIN" worker -m "$m" --listen 127.0.0.1:0 --threads 2 --ctx 1024 --max-seqs 1 \
    --max-queue 1; w2=$port
bg main "$INFERD_BIN" gateway -m "$m" --name tiny --ctx 1024 --max-body 2097152 --port 0 \
    --workers "127.0.0.1:$w1" --data-dir "$work/main"; gw=$port
bg limited "$INFERD_BIN" gateway -m "$m" --name tiny --ctx 1024 --max-body 2097152 --port 0 \
    --workers "127.0.0.1:$w2" --data-dir "$work/limited" --api-key test-key --max-open 3; lgw=$port
for _ in $(seq 1 50); do
    grep -q 'in rotation' "$work/main.log" && grep -q 'in rotation' "$work/limited.log" && break
    sleep 0.1
done
if INFERD_URL="http://127.0.0.1:$gw" INFERD_URL_LIMITED="http://127.0.0.1:$lgw" \
    INFERD_MODEL=tiny node --test --test-reporter=spec "$INFERD_SRC/tests/e2e/api.test.mjs" \
    >"$work/node.out" 2>&1; then
    ok "SDK suite through the gateway: $(grep -E '^ℹ (pass|fail)' "$work/node.out" | tr '\n' ' ')"
else
    grep -E '✖|not ok|Error' "$work/node.out" | head -40
    tail -20 "$work/main.log"
    fail "SDK suite through the gateway"
fi
finish
