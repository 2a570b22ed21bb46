#!/usr/bin/env bash
# Serving benchmark (issue: continuous batching, prefix cache, chunked prefill).
#
# Starts `inferd serve` on the qwen2.5-0.5b preset (Q8_0, random weights, 2
# threads) and drives it with `inferd bench`:
#
#   1. chats: 8 sessions of $TURNS-turn conversations through
#      /v1/chat/completions that share one ~1,000-token system prompt, run
#      with 1 client and then with 8 concurrent clients, $ROUNDS (2) times in
#      turn (fresh seeds, so each run starts from a cold cache). The machine's
#      memory bandwidth drifts by tens of percent within minutes, and the
#      1-client run is bound by it more than the 8-client one, so a single
#      pair can land on two different machines; alternating pairs show it. Each turn sends the whole conversation
#      as a chat client does: the system prompt, every earlier user message
#      and the server's real answer to it, then a new user message of $INPUT
#      tokens; the answer is $OUTPUT tokens (ignore_eos), made of common
#      one-token English words (--answer-words, a logit bias: random weights
#      would otherwise answer random tokens whose text re-tokenizes
#      differently, unlike a trained model's; ANSWER_WORDS=0 shows that
#      case). Reports output
#      tokens/s, TTFT and TPOT p50/p99, ITL p50/p99, the server's prefix hit
#      ratio, the prefill share of the work and how much of each turn's
#      history (previous prompt + answer) was prefilled again; the batching
#      gain is tokens/s(8) / tokens/s(1). From the server's step counters
#      (/metrics before and after each run): the same ratio over the
#      decode-only steps, and the share of the engine's step time spent in
#      steps with prompt tokens (the same prompt work in both runs).
#   2. cached vs uncached TTFT: groups of requests sharing a 896-token prefix
#      with 100 own tokens each, one at a time: the first of each group is
#      uncached, the others ~90% cached; TTFT medians of both kinds.
#
# The server runs with --token-budget $TOKEN_BUDGET (default 512),
# --prefill-ratio $PREFILL_RATIO (default 2): a step that prefills next to
# decoding streams costs at most that many decode-only steps, and --kv $KV
# (default bf16: two products per lane and instruction in attention on CPUs
# with AVX-512 BF16, as CPU serving engines run it; KV=f16 runs the server's
# own default).
#
# Usage: [TOKEN_BUDGET=N] [PREFILL_RATIO=R] [KV=f16|bf16|f32] [TURNS=N] [INPUT=N] [OUTPUT=N]
#        [ANSWER_WORDS=0|1] [ROUNDS=N] bench/serve/bench_serve.sh [BUILD_DIR] [OUT_DIR]
# Figures go to OUT_DIR (default /tmp/inferd-bench-serve): summary JSON per
# run and a report on stdout. Random weights: speed figures are real, text is
# not meaningful.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
out=${2:-/tmp/inferd-bench-serve}
bin=$build/inferd
mkdir -p "$out"
model=$out/qwen2.5-0.5b-q8_0.gguf
[ -f "$model" ] || "$bin" model make --preset qwen2.5-0.5b --type q8_0 -o "$model" >/dev/null

"$bin" serve -m "$model" --name qwen --port 0 --port-file "$out/port" --data-dir "$out/data" \
    --threads 2 --ctx 4096 --max-seqs 16 --token-budget "${TOKEN_BUDGET:-512}" \
    --prefill-ratio "${PREFILL_RATIO:-2}" --kv "${KV:-bf16}" \
    >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
rm -f "$out/port"
for _ in $(seq 1 600); do [ -s "$out/port" ] && break; sleep 0.1; done
url="http://127.0.0.1:$(cat "$out/port")"

scrape() { # scrape FILE: the server's /metrics text
    /usr/bin/python3 -c 'import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1] + "/metrics").read())' "$url" "$1"
}
run() { # run NAME ARGS...
    local name=$1; shift
    scrape "$out/$name.before.prom"
    "$bin" bench --url "$url" --model qwen --no-progress --out "$out/$name" "$@" >"$out/$name.txt"
    scrape "$out/$name.after.prom"
}
turns=${TURNS:-3}
chats=(--synthetic agentic --chat --sessions 8 --turns "$turns" --prefix-tokens 1008
       --input "${INPUT:-64}" --output "${OUTPUT:-256}" --think 0)
[ "${ANSWER_WORDS:-1}" = 1 ] && chats+=(--answer-words)
rounds=${ROUNDS:-2}
for r in $(seq 1 "$rounds"); do
    run "c1-$r" "${chats[@]}" --concurrency 1 --seed $((10 * r + 1))
    run "c8-$r" "${chats[@]}" --concurrency 8 --seed $((10 * r + 2))
done
run ttft --synthetic prefix --groups 3 --users-per-group 4 --prefix-tokens 896 --input 100 \
    --output 4 --requests 12 --concurrency 1 --seed 13

/usr/bin/python3 - "$out" "$turns" "$rounds" <<'PY'
import json, sys, statistics
out, turns, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
c1s = [json.load(open(f"{out}/c1-{r}/summary.json")) for r in range(1, rounds + 1)]
c8s = [json.load(open(f"{out}/c8-{r}/summary.json")) for r in range(1, rounds + 1)]
def line(name, s):
    pc = s["prefix_cache"]
    print(f"{name}: {s['succeeded']}/{s['requests']} ok, output {s['output_tokens_per_s']:.1f} tok/s, "
          f"TTFT p50/p99 {s['ttft_ms']['p50']:.0f}/{s['ttft_ms']['p99']:.0f} ms, "
          f"TPOT p50/p99 {s['tpot_ms']['p50']:.1f}/{s['tpot_ms']['p99']:.1f} ms, "
          f"ITL p50/p99 {s['itl_ms']['p50']:.1f}/{s['itl_ms']['p99']:.1f} ms, "
          f"prefix hit {pc['server_hit_ratio']:.3f}")
def work(name):
    # items are sessions in order, turns consecutive: item i is turn i % turns
    recs = sorted((json.loads(l) for l in open(f"{out}/{name}/records.jsonl")),
                  key=lambda r: r["item"])
    ok = [r for r in recs if r.get("ok")]
    prefill = sum(r["input_tokens"] - r["cached_tokens"] for r in ok)
    decode = sum(r["output_tokens"] for r in ok)
    hist = again = 0
    for r in recs:
        if r["item"] % turns == 0 or not r.get("ok"): continue
        p = recs[r["item"] - 1]
        h = p["input_tokens"] + p["output_tokens"]
        hist += h
        again += max(0, h - r["cached_tokens"])
    print(f"  {name}: prefilled {prefill} prompt tokens for {decode} output tokens: prefill "
          f"{prefill / (prefill + decode):.0%} of the tokens computed; history of later turns "
          f"{hist} tokens, {again / max(hist, 1):.0%} of it prefilled again")
def steps(name):
    # the engine's step counters over one run (/metrics before and after)
    def read(path):
        v = {}
        for l in open(path):
            if l.startswith("inferd_engine_") and " " in l:
                k, x = l.rsplit(" ", 1)
                v[k] = float(x)
        return v
    a, b = read(f"{out}/{name}.before.prom"), read(f"{out}/{name}.after.prom")
    d = lambda k: b.get(k, 0) - a.get(k, 0)
    n = d('inferd_engine_kind_steps_total{kind="decode"}')
    tok = d("inferd_engine_decode_step_tokens_total")
    ds, ps = d('inferd_engine_step_seconds_total{kind="decode"}'), \
        d('inferd_engine_step_seconds_total{kind="prompt"}')
    return tok / ds if ds > 0 else 0.0, tok / n if n else 0.0, ps / (ds + ps) if ds + ps > 0 else 0.0
dec = {}
for r, (c1, c8) in enumerate(zip(c1s, c8s), 1):
    line(f"round {r}, 1 client ", c1)
    line(f"round {r}, 8 clients", c8)
    print(f"  round {r}: gain {c8['output_tokens_per_s'] / c1['output_tokens_per_s']:.2f}x, "
          f"ITL p99 / p50 at 8 clients {c8['itl_ms']['p99'] / c8['itl_ms']['p50']:.2f}")
    s1, s8 = steps(f"c1-{r}"), steps(f"c8-{r}")
    dec[r] = (s1[0], s8[0])
    print(f"  round {r}: decode-only steps {s1[0]:.1f} tok/s (mean batch {s1[1]:.1f}) against "
          f"{s8[0]:.1f} (mean batch {s8[1]:.1f}): {s8[0] / max(s1[0], 1e-9):.2f}x; steps with "
          f"prompt tokens {s1[2]:.0%} / {s8[2]:.0%} of the engine's step time")
work("c1-1")
work("c8-1")
tps = lambda runs: statistics.mean(s["output_tokens_per_s"] for s in runs)
gain = tps(c8s) / tps(c1s)
itl = max(s["itl_ms"]["p99"] / s["itl_ms"]["p50"] for s in c8s)
print(f"batching gain (8 vs 1 client, {rounds} rounds): {tps(c8s):.1f} / {tps(c1s):.1f} tok/s = "
      f"{gain:.2f}x  (target >= 4x)")
print(f"decode-only steps ({rounds} rounds): "
      f"{statistics.mean(v[1] for v in dec.values()) / statistics.mean(v[0] for v in dec.values()):.2f}x "
      f"(the same tokens/s ratio over the steps without prompt tokens)")
print(f"ITL p99 / p50 at 8 clients, worst round: {itl:.2f}  (target <= 3)")
recs = [json.loads(l) for l in open(f"{out}/ttft/records.jsonl")]
cold = [r["ttft_ms"] for r in recs if r.get("ok") and r.get("cached_tokens", 0) == 0]
warm = [r["ttft_ms"] for r in recs if r.get("ok") and r.get("cached_tokens", 0) > 0]
share = statistics.median([r["cached_tokens"] / r["input_tokens"] for r in recs
                           if r.get("cached_tokens", 0) > 0])
ratio = statistics.median(warm) / statistics.median(cold)
print(f"TTFT uncached median {statistics.median(cold):.0f} ms (n={len(cold)}), "
      f"{share:.0%} cached median {statistics.median(warm):.0f} ms (n={len(warm)}): "
      f"{ratio:.1%} of uncached  (target < 25%)")
PY
