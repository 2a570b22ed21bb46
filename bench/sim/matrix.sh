#!/usr/bin/env bash
# The policy table of docs/sim.md: the Mooncake and Azure (conversation)
# traces scaled to saturate 16, 64 and 1,024 mixed data-parallel replicas,
# every policy, with SLO admission on, on the H100 / Llama-3-8B cost table.
# GROUP (default 1: the replicas step independently, as inferd gateway's
# workers do; 0: the pool is one synchronised group). One JSON array per
# run into OUT.
#
#   bench/sim/matrix.sh [OUT_DIR] [INFERD] [GROUP]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/inferd-sim-matrix}
bin=${2:-$here/../../build/release/inferd}
group=${3:-1}
traces=$here/../../../shared/traces
mkdir -p "$out"
cost=$here/h100-llama3-8b.cost
pol=round-robin,least-loaded,cache-aware,balanced
# name  trace  per-replica rate  requests per replica  ttft  tpot
runs=(
    "mooncake mooncake:$traces/mooncake/synthetic_trace.jsonl 1.5 400 5000 50"
    "azure azure:$traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv 15 1000 2000 50"
)
for r in "${runs[@]}"; do
    set -- $r
    name=$1 trace=$2 per=$3 reqs=$4 ttft=$5 tpot=$6
    for n in 16 64 1024; do
        rate=$(python3 -c "print($per * $n)")
        total=$((reqs * n)); [ "$total" -gt 200000 ] && total=200000
        echo "== $name x$n: $total requests at $rate/s" >&2
        "$bin" sim --trace "$trace" --decode "$n" --dp-group "$group" --requests "$total" --rate "$rate" \
            --cost "$cost" --block-tokens 64 --policy "$pol" --slo-ttft "$ttft" \
            --slo-tpot "$tpot" --admit --json >"$out/$name-$n.json"
    done
done
