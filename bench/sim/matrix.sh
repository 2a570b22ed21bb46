#!/usr/bin/env bash
# The policy table of docs/sim.md: the Mooncake and Azure (conversation)
# traces scaled to saturate 16, 64 and 1,024 mixed data-parallel replicas
# (each pool one synchronised group), every policy, with SLO admission on,
# on the H100 / Llama-3-8B cost table. One JSON array per run into OUT.
#
#   bench/sim/matrix.sh [OUT_DIR] [INFERD]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/inferd-sim-matrix}
bin=${2:-$here/../../build/release/inferd}
traces=$here/../../../shared/traces
mkdir -p "$out"
cost=$here/h100-llama3-8b.cost
pol=round-robin,least-loaded,cache-aware,balanced
# name  trace  per-replica rate  requests per replica  ttft  tpot
runs=(
    "mooncake mooncake:$traces/mooncake/synthetic_trace.jsonl 0.3 400 5000 50"
    "azure azure:$traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv 9 1000 2000 50"
)
for r in "${runs[@]}"; do
    set -- $r
    name=$1 trace=$2 per=$3 reqs=$4 ttft=$5 tpot=$6
    for n in 16 64 1024; do
        rate=$(python3 -c "print($per * $n)")
        total=$((reqs * n)); [ "$total" -gt 500000 ] && total=500000
        echo "== $name x$n: $total requests at $rate/s" >&2
        "$bin" sim --trace "$trace" --decode "$n" --requests "$total" --rate "$rate" \
            --cost "$cost" --block-tokens 64 --policy "$pol" --slo-ttft "$ttft" \
            --slo-tpot "$tpot" --admit --json >"$out/$name-$n.json"
    done
done
