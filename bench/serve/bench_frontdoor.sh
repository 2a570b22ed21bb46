#!/usr/bin/env bash
# Front-door benchmark: `inferd serve` under hostile connection load against a
# quiet run of the same streams, alternating (bench_frontdoor.py has the
# phases and the targets).
#
# Starts the server on the qwen2.5-0.5b preset (Q8_0, random weights, 2
# threads; PRESET=tiny for a model so small that the HTTP path, not the
# engine, bounds the streams) with room for the 1,200 extra connections.
#
# Usage: [PRESET=qwen2.5-0.5b|tiny] [ROUNDS=N] bench/serve/bench_frontdoor.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
out=${2:-/tmp/inferd-bench-frontdoor}
bin=$build/inferd
preset=${PRESET:-qwen2.5-0.5b}
mkdir -p "$out"
model=$out/$preset-q8_0.gguf
[ -f "$model" ] || "$bin" model make --preset "$preset" --type q8_0 -o "$model" >/dev/null
ulimit -n 8192
rm -f "$out/port"
"$bin" serve -m "$model" --name m --port 0 --port-file "$out/port" --data-dir "$out/data" \
    --threads 2 --ctx 4096 --max-seqs 16 --max-conns 4000 --max-conns-per-client 4000 \
    --max-body 16777216 >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do [ -s "$out/port" ] && break; sleep 0.1; done
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs;" \
     "kernels: ${INFERD_ISA:-auto}; model $preset q8_0"
python3 "$root/bench/serve/bench_frontdoor.py" "$(cat "$out/port")" "${ROUNDS:-3}"
