#!/usr/bin/env bash
# inferd bench against the scripted mock server (inferd bench-mock): the
# reported figures equal what the mock's script implies (cache hits, token
# counts, speculative acceptance, error counts, trace timing, think-time
# dependencies, quality probes), and bad input fails with a clear message.
# Timing figures are checked only as lower bounds (the script's delays), so
# a loaded machine cannot make the test fail.
source "$(dirname "$0")/../lib.sh"
dir="$INFERD_SCRATCH/bench.$$"
rm -rf "$dir"; mkdir -p "$dir"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [ "$failed" -eq 0 ] && rm -rf "$dir"   # keep the outputs of a failed run
}
trap cleanup EXIT

# start_mock NAME ARGS...: starts a mock, sets $port
start_mock() {
    local name=$1; shift
    rm -f "$dir/$name.port"
    "$INFERD_BIN" bench-mock --port 0 --port-file "$dir/$name.port" "$@" 2>"$dir/$name.log" &
    pids+=($!)
    for _ in $(seq 100); do [ -s "$dir/$name.port" ] && break; sleep 0.05; done
    port=$(cat "$dir/$name.port")
}
bench() { "$INFERD_BIN" bench --no-progress --metrics-path none "$@"; }
check() { # check NAME PYTHON-ASSERTIONS FILE
    if $PY - "$3" <<PY
import json, sys
p = sys.argv[1]
s = json.load(open(p)) if p.endswith('.json') else [json.loads(l) for l in open(p)]
$2
PY
    then ok "$1"; else fail "$1"; fi
}

# 1. prefix sharing + speculation reported per request, one request at a time
start_mock spec --ttft-ms 30 --itl-ms 10 --block-tokens 16 --spec-k 3 --spec-accept 1
bench --url "http://127.0.0.1:$port" --synthetic prefix --groups 2 --users-per-group 2 \
    --prefix-tokens 32 --input 16 --output 9 --requests 8 --concurrency 1 \
    --slo-ttft 10000 --slo-tpot 10000 --out "$dir/r1" >"$dir/r1.txt"
check "prefix hits: server ratio equals the ideal 0.5" '
c = s["prefix_cache"]
assert s["requests"] == 8 and s["succeeded"] == 8, s
assert abs(c["server_hit_ratio"] - 0.5) < 1e-9 and abs(c["ideal_hit_ratio"] - 0.5) < 1e-9, c
assert c["prompt_tokens_reported"] == 8 * 48 and c["cached_tokens_reported"] == 6 * 32, c' \
    "$dir/r1/summary.json"
check "speculation: acceptance 1/3, tau 2, corrected decode rate" '
p = s["speculative"]
assert p["drafts"] == 32 and p["draft_tokens"] == 96 and p["accepted_tokens"] == 32, p
assert abs(p["acceptance_rate"] - 1/3) < 1e-9 and abs(p["mean_accepted_len"] - 2) < 1e-9, p
d = s["duration_s"]
assert abs(p["decode_tokens_per_s"] - 64 / d) < 1e-6 * p["decode_tokens_per_s"], p
assert abs(p["all_accepted_tokens_per_s"] - 128 / d) < 1e-6 * p["all_accepted_tokens_per_s"], p' \
    "$dir/r1/summary.json"
check "latency lower bounds from the script; goodput = all tokens" '
# every request: first event >= 30 ms, last >= 30 + 4 * 10 ms after sending
assert s["ttft_ms"]["p50"] >= 30 and s["e2e_ms"]["p50"] >= 70, (s["ttft_ms"], s["e2e_ms"])
assert s["itl_ms"]["n"] == 32 and s["tpot_ms"]["n"] == 8, (s["itl_ms"], s["tpot_ms"])
assert s["slo"]["met"] == 8 and abs(s["slo"]["attainment"] - 1) < 1e-12
assert abs(s["slo"]["token_goodput"] * s["duration_s"] - 72) < 1e-6, s["slo"]
assert abs(s["output_tokens_per_s"] * s["duration_s"] - 72) < 1e-6' "$dir/r1/summary.json"
check "records: one per request, cached tokens per group" '
assert len(s) == 8
assert [r["cached_tokens"] for r in s] == [0, 32, 0, 32, 32, 32, 32, 32], [r["cached_tokens"] for r in s]
assert all(r["ok"] and r["output_tokens"] == 9 and r["events"] == 5 and len(r["itl_ms"]) == 4 for r in s)
assert all(r["ideal_cached_tokens"] == r["cached_tokens"] for r in s)' "$dir/r1/records.jsonl"
if grep -q "<svg" "$dir/r1/cdf.svg" && grep -q "polyline" "$dir/r1/cdf.svg"; then
    ok "latency CDF svg written"; else fail "latency CDF svg"; fi
# a PNG beside each SVG when rsvg-convert (scripts/setup.sh installs it) is there
if command -v rsvg-convert >/dev/null; then
    if [ "$(head -c 8 "$dir/r1/cdf.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
    then ok "latency CDF png written"; else fail "latency CDF png"; fi
fi
if grep -q "speculative" "$dir/r1.txt" && grep -q "server hit ratio 0.5000" "$dir/r1.txt"; then
    ok "text report"; else fail "text report: $(cat "$dir/r1.txt")"; fi

# text prompts through chat: one word per token keeps the prefix blocks
start_mock text --ttft-ms 2 --itl-ms 1 --block-tokens 16
bench --url "http://127.0.0.1:$port" --chat --synthetic prefix --groups 2 --users-per-group 3 \
    --prefix-tokens 64 --input 16 --output 3 --requests 12 --concurrency 1 --json >"$dir/rt.json"
check "--chat text prompts: server hits equal the ideal" '
c = s["prefix_cache"]
assert s["succeeded"] == 12 and c["prompt_tokens_reported"] == 12 * 80, c
assert abs(c["server_hit_ratio"] - c["ideal_hit_ratio"]) < 1e-9 and c["ideal_hit_ratio"] > 0.6, c' \
    "$dir/rt.json"

# chat sessions: each turn carries the earlier answers the server really gave
# (the mock answers one word per token), so turn k's prompt is turn k-1's
# prompt + its answer + the new user message, and the mock's cache (whole
# prompt blocks) hits turn k-1's prompt
bench --url "http://127.0.0.1:$port" --chat --synthetic agentic --sessions 2 --turns 3 \
    --prefix-tokens 32 --input 8 --output 5 --think 0 --concurrency 1 --seed 99 \
    --out "$dir/cs" >/dev/null
check "--chat sessions send the real answers back" '
r = sorted(s, key=lambda r: r["item"])
assert [x["input_tokens"] for x in r] == [40, 53, 66, 40, 53, 66], [x["input_tokens"] for x in r]
assert [x["cached_tokens"] for x in r[:3]] == [0, 32, 48], [x["cached_tokens"] for x in r]
assert r[3]["cached_tokens"] == 32 and all(x["ok"] for x in r)' "$dir/cs/records.jsonl"

# --answer-words needs the server's /tokenize (the mock has none): a clear error
rc=0; err=$(bench --url "http://127.0.0.1:$port" --chat --answer-words --requests 1 --input 4 \
    --output 2 2>&1) || rc=$?
if [ "$rc" -eq 1 ] && [[ "$err" == *"--answer-words: POST /tokenize gave HTTP"* ]]; then
    ok "--answer-words without /tokenize is a clear error"; else fail "answer words: $rc $err"; fi

# 2. speculation only through Prometheus counters (scraped before and after)
start_mock prom --ttft-ms 5 --itl-ms 2 --spec-k 4 --spec-accept 2 --spec-metrics-only
"$INFERD_BIN" bench --no-progress --url "http://127.0.0.1:$port" --input 32 --output 7 \
    --requests 5 --concurrency 2 --json >"$dir/r2.json"
check "speculation from /metrics deltas" '
p = s["speculative"]
# 7 tokens: first, then steps of 3 -> 2 steps per request
assert p["drafts"] == 10 and p["draft_tokens"] == 40 and p["accepted_tokens"] == 20, p
assert abs(p["mean_accepted_len"] - 3) < 1e-9 and abs(p["acceptance_rate"] - 0.5) < 1e-9, p' \
    "$dir/r2.json"

# 3. failures by status, cost
start_mock fail --ttft-ms 2 --itl-ms 1 --fail-every 4
bench --url "http://127.0.0.1:$port" --input 16 --output 4 --requests 8 --concurrency 1 \
    --machine-usd-h 3 --machines 2 --price-in 1 --price-cached 0.25 --price-out 4 \
    --json >"$dir/r3.json"
check "errors by status and cost formulas" '
e = s["errors"]
assert s["succeeded"] == 6 and abs(e["rate"] - 0.25) < 1e-12 and e["by_status"] == {"503": 2}, e
c = s["cost"]; o = s["output_tokens_per_s"]; i = s["input_tokens_per_s"]
assert abs(c["usd_per_m_output_tokens"] - 6 / (o * 3600) * 1e6) < 1e-6 * c["usd_per_m_output_tokens"]
h = c["hit_ratio"]
rev = 3600 * (i * ((1 - h) * 1 + h * 0.25) + o * 4) / 1e6
assert abs(c["revenue_usd_per_h"] - rev) < 1e-6 * max(rev, 1), (c, rev)
assert abs(c["revenue_by_hit_ratio"][4]["revenue_usd_per_h"] - 3600 * (i * 0.25 + o * 4) / 1e6) < 1e-6' \
    "$dir/r3.json"

# 4. trace replay timing (time-scale 2) and agentic think-time dependencies
start_mock fast --ttft-ms 5 --itl-ms 1
cat >"$dir/t.jsonl" <<'T'
{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}
{"timestamp": 100, "input_length": 600, "output_length": 3, "hash_ids": [0, 2]}
{"timestamp": 300, "input_length": 100, "output_length": 3, "hash_ids": [5]}
T
bench --url "http://127.0.0.1:$port" --trace "mooncake:$dir/t.jsonl" --time-scale 2 \
    --out "$dir/r4" >/dev/null
check "mooncake replay: due times scaled, spread inside the 1 ms bucket" '
d = [r["due_ms"] for r in s]
assert 0 <= d[0] < 0.5 and 50 <= d[1] < 50.5 and 150 <= d[2] < 150.5, d
assert all(r["send_ms"] >= r["due_ms"] for r in s)' "$dir/r4/records.jsonl"
cat >"$dir/a.json" <<'T'
{"block_size": 64, "requests": [
 {"t": 0, "in": 200, "out": 4, "hash_ids": [1, 2, 3]},
 {"t": 5, "in": 300, "out": 4, "hash_ids": [1, 2, 3, 4], "think_time": 0.2}]}
T
bench --url "http://127.0.0.1:$port" --trace "agentic:$dir/a.json" --out "$dir/r5" >/dev/null
check "agentic: next turn due think_time after the previous one ended" '
a, b = s
end_a = a["send_ms"] + a["e2e_ms"]
assert 199 <= b["due_ms"] - end_a <= 203, (b["due_ms"], end_a)
assert b["ideal_cached_tokens"] == 192, b' "$dir/r5/records.jsonl"

# concurrency cap: the client-side wait is queue time, not server latency
start_mock cap --ttft-ms 50 --itl-ms 1
bench --url "http://127.0.0.1:$port" --input 16 --output 1 --requests 6 --rate 100000 \
    --max-concurrency 2 --out "$dir/rc" >/dev/null
check "concurrency cap: waits recorded as queue time" '
q = sorted(r["queue_ms"] for r in s)
assert q[0] < 5 and q[1] < 5 and q[2] >= 45 and q[4] >= 95, q
assert all(r["e2e_ms"] >= 50 and r["send_ms"] >= r["due_ms"] + r["queue_ms"] - 0.002 for r in s)' \
    "$dir/rc/records.jsonl"
start_mock fast --ttft-ms 5 --itl-ms 1

# 5. concurrency sweep: sweep.json with both points and a Pareto plot
bench --url "http://127.0.0.1:$port" --input 16 --output 8 --requests 12 \
    --sweep-concurrency 1,4 --user-speed 1 --out "$dir/r6" >/dev/null
check "concurrency sweep" '
assert [p["label"] for p in s["points"]] == ["concurrency=1", "concurrency=4"]
assert len(s["pareto_front"]) >= 1 and s["throughput_at_user_speed"] > 0, s.get("pareto_front")' \
    "$dir/r6/sweep.json"
if grep -q "Pareto front" "$dir/r6/pareto.svg"; then ok "pareto svg"; else fail "pareto svg"; fi

# 6. max-rate search: an SLO nobody meets gives no rate
bench --url "http://127.0.0.1:$port" --input 16 --output 4 --requests 10 --slo-ttft 0.001 \
    --find-max-rate 90 --search-lo 100 --search-hi 400 --json >"$dir/r7.json"
check "max-rate search reports none when even the lowest rate misses" '
assert s["max_rate"] is None and len(s["points"]) == 1, s["max_rate"]' "$dir/r7.json"

# 7. quality probes: a saved reference matches the same server, not a perturbed one
bench --url "http://127.0.0.1:$port" --input 16 --output 4 --requests 2 --probes 3 \
    --save-reference "$dir/ref.json" --json >"$dir/q1.json"
check "probes repeat at temperature 0" '
assert s["quality"]["start_vs_end"]["exact_match"] == 1.0' "$dir/q1.json"
start_mock perturbed --ttft-ms 5 --itl-ms 1 --perturb-from 2
bench --url "http://127.0.0.1:$port" --input 16 --output 4 --requests 2 --probes 3 \
    --reference "$dir/ref.json" --json >"$dir/q2.json"
check "perturbed outputs diverge from the reference after two tokens" '
q = s["quality"]["end_vs_reference"]
assert q["exact_match"] == 0 and all(d >= 6 for d in q["first_divergence"]), q' "$dir/q2.json"

# 8. bad input
printf '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n{"timestamp": 1}\n' \
    >"$dir/bad.jsonl"
rc=0; err=$(bench --trace "mooncake:$dir/bad.jsonl" 2>&1) || rc=$?
if [ "$rc" -eq 1 ] && [[ "$err" == *"bad.jsonl: line 2"*"input_length"* ]]; then
    ok "malformed trace names file, line and field"; else fail "malformed trace: rc=$rc $err"; fi
rc=0; bench --input uniform:9:2 2>/dev/null || rc=$?
if [ "$rc" -eq 2 ]; then ok "bad distribution is a usage error"; else fail "bad dist gave $rc"; fi
rc=0; err=$(bench --url http://127.0.0.1:1 --requests 2 --input 4 --output 2 --json 2>&1) || rc=$?
if [ "$rc" -eq 0 ] && [[ "$err" == *'"transport": 2'* ]]; then
    ok "unreachable server: requests fail as transport errors"; else fail "unreachable: $rc $err"; fi
finish
