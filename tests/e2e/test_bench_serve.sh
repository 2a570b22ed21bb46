#!/usr/bin/env bash
# inferd bench against inferd serve: the evaluator and the server agree end
# to end. A tiny random-weight model serves a shared-prefix workload (token-id
# prompts through /v1/completions) and a multi-turn chat workload (text through
# /v1/chat/completions); every request must succeed with the requested output
# length, and the prefix-cache hits the server reports in usage must show up
# in the bench summary (the server caches whole 16-token blocks, so its ratio
# is at most the trace's ideal and, for block-aligned shared prefixes run one
# at a time, equal to it).
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work="$INFERD_SCRATCH/e2e_bench.$$"
rm -rf "$work"; mkdir -p "$work"
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    [ "$failed" -eq 0 ] && rm -rf "$work"
}
trap cleanup EXIT

# A bf16 KV cache (as bench/serve/bench_serve.sh runs it); the API suite runs f16.
"$INFERD_BIN" serve -m "$m" --name tiny --port 0 --port-file "$work/port" --data-dir "$work/data" \
    --threads 2 --ctx 1024 --kv bf16 >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || { cat "$work/serve.log"; fail "server did not start"; finish; exit 1; }
url="http://127.0.0.1:$(cat "$work/port")"

check() { # check NAME PYTHON-ASSERTIONS FILE
    if $PY - "$3" <<PY
import json, sys
s = json.load(open(sys.argv[1]))
$2
PY
    then ok "$1"; else
        fail "$1"
        grep '"ok":false' "$(dirname "$3")/records.jsonl" | head -3
        tail -12 "$work/serve.log"
    fi
}

# 1. shared prefixes, one request at a time: 2 groups x 3 users, a 64-token
#    system prefix each (block aligned) + 16 own tokens, 8 output tokens.
"$INFERD_BIN" bench --url "$url" --model tiny --no-progress --synthetic prefix --groups 2 \
    --users-per-group 3 --prefix-tokens 64 --input 16 --output 8 --requests 6 --concurrency 1 \
    --vocab 1000:30000 --out "$work/prefix" >"$work/prefix.txt" 2>&1 || { cat "$work/prefix.txt"; }
check "prefix workload: all succeed, server hit ratio equals the ideal" '
assert s["requests"] == 6 and s["succeeded"] == 6, s
c = s["prefix_cache"]
assert c["prompt_tokens_reported"] == 6 * 80, c
# users 2 and 3 of each group reuse the 64-token prefix: 4 * 64 cached
assert c["cached_tokens_reported"] == 4 * 64, c
assert abs(c["server_hit_ratio"] - c["ideal_hit_ratio"]) < 1e-9, c
assert abs(s["output_tokens_per_s"] * s["duration_s"] - 6 * 8) < 0.01, s' "$work/prefix/summary.json"

# 2. concurrent multi-turn chats through the chat API (text prompts).
"$INFERD_BIN" bench --url "$url" --model tiny --no-progress --chat --synthetic multiturn \
    --sessions 4 --turns 3 --input 24 --output 6 --concurrency 4 \
    --out "$work/chat" >"$work/chat.txt" 2>&1 || { cat "$work/chat.txt"; }
check "multi-turn chats: 12 requests succeed, later turns hit the cache" '
assert s["requests"] == 12 and s["succeeded"] == 12, s
c = s["prefix_cache"]
assert c["cached_tokens_reported"] > 0, c
assert s["ttft_ms"]["n"] == 12, s["ttft_ms"]' "$work/chat/summary.json"

# 3. chat sessions whose answers round-trip (--answer-words: one-token words):
#    each later turn reuses every full KV block of the previous prompt and the
#    answer (all but the last generated token were computed), so only the
#    answer's partial block, the template and the new message are prefilled.
"$INFERD_BIN" bench --url "$url" --model tiny --no-progress --chat --answer-words \
    --synthetic agentic --sessions 2 --turns 3 --prefix-tokens 64 --input 24 --output 40 \
    --think 0 --concurrency 1 --seed 5 --out "$work/words" >"$work/words.txt" 2>&1 ||
    { cat "$work/words.txt"; }
if $PY - "$work/words/records.jsonl" <<'PY'
import json, sys
r = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda r: r["item"])
assert len(r) == 6 and all(x["ok"] and x["output_tokens"] == 40 for x in r), r
for k in (1, 2, 4, 5):
    p = r[k - 1]
    full = (p["input_tokens"] + p["output_tokens"] - 1) // 16 * 16
    assert r[k]["cached_tokens"] == full, (k, r[k]["cached_tokens"], full)
PY
then ok "chat sessions: a finished turn's prompt and answer are served from the cache"
else fail "chat sessions: answers not reused"; fi

kill -TERM "$pid"; wait "$pid" && ok "server exits cleanly" || fail "server exit status"
pid=

# A KV type the server does not have: exit status 2 and a message naming it.
rc=0; "$INFERD_BIN" serve -m "$m" --port 0 --data-dir "$work/data" --kv f8 >"$work/bad.log" 2>&1 ||
    rc=$?
if [ "$rc" -eq 2 ] && grep -q "^inferd serve: --kv: expected f16, bf16 or f32, got 'f8'" "$work/bad.log"
then ok "serve --kv f8: a clear error"; else fail "serve --kv f8: rc $rc"; cat "$work/bad.log"; fi
finish
