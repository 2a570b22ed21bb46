#!/usr/bin/env bash
# `inferd sim --trace ...`: worked requests give the latencies the cost table
# implies (a prompt step, decode steps, a prefix hit, a disaggregated
# transfer); a run is deterministic; admission refuses under overload and
# nothing under light load; bad input is one clear error line.
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d "$INFERD_SCRATCH/sim.XXXXXX")
trap 'rm -rf "$work"' EXIT
sim() { "$INFERD_BIN" sim "$@"; }
MOON="$INFERD_SRC/../shared/traces/mooncake/synthetic_trace.jsonl"
[ -f "$MOON" ] || MOON=""

# a step costs 10 ms + 1 ms per prompt token; decode tokens and attention
# are free; transfers 1 GB/s + 5 ms
cat >"$work/unit.cost" <<'C'
name      unit
source    test
fixed_ms  10
prefill_ms_per_token 1
decode_ms_per_token  0
kv_bytes_per_token   1000
kv_tokens 100000
link_gbs  1
link_ms   5
token_budget 512
max_seqs  8
C
# jq-free JSON reads
field() { $PY -c 'import json,sys; j=json.load(sys.stdin)[int(sys.argv[1])]
for k in sys.argv[2].split("."): j=j[k]
print(j)' "$@"; }

printf '{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [1]}\n' >"$work/one.jsonl"
j=$(sim --trace "mooncake:$work/one.jsonl" --cost "$work/unit.cost" --json)
ttft=$(field 0 ttft_ms.p50 <<<"$j"); tpot=$(field 0 tpot_ms.p50 <<<"$j")
[ "$ttft" = 110.0 ] && [ "$tpot" = 10.0 ] && ok "one request: TTFT 10 + 100 ms, TPOT one 10 ms step" ||
    fail "one request: ttft $ttft tpot $tpot: $j"

# the same prompt 10 s later: 6 full blocks of 16 attach, 4 tokens compute
printf '%s\n' '{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [1]}' \
    '{"timestamp": 10000, "input_length": 100, "output_length": 3, "hash_ids": [1]}' >"$work/two.jsonl"
j=$(sim --trace "mooncake:$work/two.jsonl" --cost "$work/unit.cost" --json)
p50=$(field 0 ttft_ms.p50 <<<"$j"); hit=$(field 0 hit_ratio <<<"$j")
[ "$p50" = 14.0 ] && [ "$hit" = 0.48 ] && ok "prefix hit: TTFT 10 + 4 ms, 96 of 200 prompt tokens cached" ||
    fail "prefix hit: ttft p50 $p50 hit $hit: $j"

# disaggregated: 1,000 tokens on the prefill worker (10 + 512, 10 + 488 ms),
# 62 blocks of 16 x 1000 B streamed (the last chunk's 488 tokens after it:
# 0.488 ms) + 5 ms, then the decode worker computes the last 8 (18 ms)
printf '{"timestamp": 0, "input_length": 1000, "output_length": 2, "hash_ids": [1, 2]}\n' >"$work/long.jsonl"
j=$(sim --trace "mooncake:$work/long.jsonl" --cost "$work/unit.cost" --prefill 1 --decode 1 --json)
ttft=$(field 0 ttft_ms.p50 <<<"$j"); gb=$(field 0 kv_moved_gb <<<"$j")
$PY -c "import sys; t=float(sys.argv[1]); assert abs(t - (1020 + 0.512 + 5 + 18)) < 0.01, t" "$ttft" &&
    [ "$gb" = 0.001 ] && ok "disaggregated: TTFT = prefill + last chunk's transfer + latency + tail" ||
    fail "disaggregated: ttft $ttft kv $gb: $j"

if [ -n "$MOON" ]; then
    run() { sim --trace "mooncake:$MOON" --requests 400 --decode 4 --block-tokens 64 \
        --policy round-robin,least-loaded,cache-aware,balanced --json "$@" |
        $PY -c 'import json,sys; j=json.load(sys.stdin)
for r in j: r.pop("wall_s")
print(json.dumps(j, sort_keys=True))'; }
    a=$(run); b=$(run)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "deterministic: two runs, four policies, the same figures" ||
        fail "deterministic: runs differ"
    # overload: admission refuses some and the goodput rises; light load:
    # nothing refused
    H100="$INFERD_SRC/bench/sim/h100-llama3-8b.cost"
    over() { sim --trace "mooncake:$MOON" --requests 400 --decode 2 --block-tokens 64 --speed 20 \
        --cost "$H100" --slo-ttft 5000 --json "$@"; }
    j=$(over --admit); j0=$(over)
    rej=$(field 0 rejected <<<"$j"); served=$(field 0 served <<<"$j")
    good=$(field 0 goodput_rps <<<"$j"); good0=$(field 0 goodput_rps <<<"$j0")
    [ "$rej" -gt 0 ] && [ "$served" -gt 0 ] && $PY -c "assert $good > 2 * $good0" &&
        ok "overload: $rej refused early, $served served, goodput $good against $good0 req/s" ||
        fail "overload: rejected $rej served $served goodput $good vs $good0"
    j=$(sim --trace "mooncake:$MOON" --requests 100 --decode 8 --block-tokens 64 --speed 0.05 \
        --cost "$H100" --slo-ttft 5000 --admit --json)
    rej=$(field 0 rejected <<<"$j")
    [ "$rej" = 0 ] && ok "light load: nothing refused" || fail "light load: $rej refused"
    out=$(sim --trace "mooncake:$MOON" --requests 200 --decode 2 --block-tokens 64 --svg "$work")
    [ -s "$work/sim_ttft_cdf.svg" ] && [ -s "$work/sim_tpot_cdf.svg" ] && [[ "$out" == *balanced* ]] &&
        ok "table and SVG plots" || fail "table/svg: $out"
else
    echo "skip trace runs: no shared Mooncake trace"
fi

# bad input: one line on stderr, exit 2
printf '{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [1]}\n{"timestamp": 1, "input_len' >"$work/broken.jsonl"
printf 'fixed_ms 10\nwarp_factor 9\n' >"$work/badkey.cost"
printf 'fixed_ms ten\n' >"$work/badnum.cost"
cases=(
    "--trace mooncake:$work/broken.jsonl|broken.jsonl: line 2"
    "--trace mooncake:$work/one.jsonl --decode 0|decode"
    "--trace mooncake:$work/one.jsonl --cost $work/unit.cost --slo-tpot 5|below one decode step"
    "--trace mooncake:$work/one.jsonl --block-tokens 100|not a multiple"
    "--trace mooncake:$work/one.jsonl --cost $work/badkey.cost|badkey.cost:2: unknown key"
    "--trace mooncake:$work/one.jsonl --cost $work/badnum.cost|badnum.cost:1: fixed_ms"
    "--trace mooncake:$work/one.jsonl --policy random|unknown 'random'"
    "--trace mooncake:$work/one.jsonl --admit|needs a target"
    "--trace weird:$work/one.jsonl|unknown format"
    "--decode 2|give a trace"
)
for c in "${cases[@]}"; do
    args=${c%%|*}; want=${c#*|}
    set +e; err=$(sim $args 2>&1 >/dev/null); rc=$?; set -e
    if [ "$rc" = 2 ] && [[ "$err" == *"$want"* ]]; then ok "refused: $args: $(echo "$err" | head -1)"
    else fail "bad input $args: exit $rc: $err"; fi
done
finish
