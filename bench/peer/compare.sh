#!/usr/bin/env bash
# Side by side with llama.cpp: its llama-bench and `inferd bench-engine` on
# the same GGUF files, alternating run by run (the host is noisy, so each
# round runs both back to back), then the medians and their ratios.
#
#   bench/peer/compare.sh LLAMA_BUILD_DIR [options]
#
#   LLAMA_BUILD_DIR   a llama.cpp build directory holding bin/llama-bench
#                     (built outside this repository, for the ISA to compare:
#                     for the avx2 level e.g. -DGGML_NATIVE=OFF -DGGML_AVX2=ON
#                     -DGGML_AVX512=OFF, and run with --isa avx2)
#   --types LIST      weight types to make and compare (default q8_0,q4_k,q6_k,f16)
#   --models DIR      where the random-weight files are made / reused
#                     (default /tmp/inferd-peer)
#   --preset P        model shape (default qwen2.5-0.5b)
#   --threads N       threads for both (default 2)
#   --rounds N        alternating rounds per type (default 3)
#   --pp N, --tg N    prompt and generated tokens (default 512, 128)
#   --isa LEVEL       INFERD_ISA for inferd (default: its own choice)
#   --inferd PATH     the inferd binary (default build/release/inferd)
#
# Prints one line per run, then per type: llama.cpp and inferd tokens/s
# (median, min-max), inferd / llama.cpp, and inferd's decode as a share of
# the read bandwidth bench-engine measured in the same run.
set -euo pipefail

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
llama=$1; shift
[ -x "$llama/bin/llama-bench" ] || { echo "compare.sh: no executable $llama/bin/llama-bench" >&2; exit 2; }
types=q8_0,q4_k,q6_k,f16 models=/tmp/inferd-peer preset=qwen2.5-0.5b threads=2 rounds=3
pp=512 tg=128 isa= inferd=$(dirname "$0")/../../build/release/inferd
while [ $# -gt 0 ]; do
    case $1 in
    --types) types=$2 ;;
    --models) models=$2 ;;
    --preset) preset=$2 ;;
    --threads) threads=$2 ;;
    --rounds) rounds=$2 ;;
    --pp) pp=$2 ;;
    --tg) tg=$2 ;;
    --isa) isa=$2 ;;
    --inferd) inferd=$2 ;;
    -h | --help) usage ;;
    *) echo "compare.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift 2 || { echo "compare.sh: option '$1' needs a value" >&2; exit 2; }
done
[ -x "$inferd" ] || { echo "compare.sh: no inferd binary at $inferd" >&2; exit 2; }
mkdir -p "$models"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
fam=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
mod=$(grep -m1 '^model\s*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
echo "cpu: $cpu (family $fam model $mod), $(nproc) cpus; threads $threads; pp$pp tg$tg;" \
     "inferd level: ${isa:-auto}; llama.cpp: $llama"

IFS=, read -r -a tlist <<<"$types"
for t in "${tlist[@]}"; do
    m="$models/$preset-$t.gguf"
    [ -f "$m" ] || "$inferd" model make --preset "$preset" --type "$t" -o "$m" >/dev/null
    for r in $(seq 1 "$rounds"); do
        # llama.cpp first in odd rounds, inferd first in even ones
        for who in $( [ $((r % 2)) -eq 1 ] && echo "llama inferd" || echo "inferd llama"); do
            if [ "$who" = llama ]; then
                "$llama/bin/llama-bench" -m "$m" -p "$pp" -n "$tg" -t "$threads" -r 1 -o json \
                    >"$out/$t.llama.$r.json" 2>"$out/err"
            else
                env ${isa:+INFERD_ISA=$isa} "$inferd" bench-engine -m "$m" --threads "$threads" \
                    --pp "$pp" --tg "$tg" --batches 16 --json >"$out/$t.inferd.$r.json" 2>"$out/err"
            fi || { echo "compare.sh: $who failed on $m:" >&2; cat "$out/err" >&2; exit 1; }
        done
        python3 - "$out" "$t" "$r" <<'EOF'
import json, sys
d, t, r = sys.argv[1:]
ll = json.load(open(f"{d}/{t}.llama.{r}.json"))
inf = json.load(open(f"{d}/{t}.inferd.{r}.json"))
lp = next(e["avg_ts"] for e in ll if e["n_prompt"] > 0)
lg = next(e["avg_ts"] for e in ll if e["n_gen"] > 0)
f = {x["name"][:2]: x for x in inf["figures"] if x["batch"] == 1}
b16 = next(x["tokens_per_s"] for x in inf["figures"] if x["batch"] == 16)
print(f"  {t} round {r}: llama.cpp pp {lp:.1f} tg {lg:.1f} | inferd ({inf['isa']}) "
      f"pp {f['pp']['tokens_per_s']:.1f} tg {f['tg']['tokens_per_s']:.1f} "
      f"({f['tg']['pct_of_limit']:.0f}% of {f['tg']['limit_value']:.1f} GB/s) b16 {b16:.1f}")
EOF
    done
done

python3 - "$out" "$types" "$rounds" <<'EOF'
import json, statistics, sys
d, types, rounds = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
print(f"\n{'type':6} {'weights (inferd)':26} | {'pp llama.cpp':>18} {'pp inferd':>18} {'ratio':>5} |"
      f" {'tg llama.cpp':>16} {'tg inferd':>16} {'ratio':>5} {'tg %bw':>6} | {'b16/b1':>6}")
def med(v):
    return f"{statistics.median(v):7.1f} ({min(v):.0f}-{max(v):.0f})"
for t in types:
    lp, lg, ip, ig, bw, b16 = [], [], [], [], [], []
    for r in range(1, rounds + 1):
        ll = json.load(open(f"{d}/{t}.llama.{r}.json"))
        inf = json.load(open(f"{d}/{t}.inferd.{r}.json"))
        lp.append(next(e["avg_ts"] for e in ll if e["n_prompt"] > 0))
        lg.append(next(e["avg_ts"] for e in ll if e["n_gen"] > 0))
        f = {x["name"][:2]: x for x in inf["figures"] if x["batch"] == 1}
        ip.append(f["pp"]["tokens_per_s"])
        ig.append(f["tg"]["tokens_per_s"])
        bw.append(f["tg"]["pct_of_limit"])
        b16.append(next(x["tokens_per_s"] for x in inf["figures"] if x["batch"] == 16) /
                   f["tg"]["tokens_per_s"])
    m = statistics.median
    print(f"{t:6} {inf['weight_types'][:26]:26} | {med(lp):>18} {med(ip):>18} {m(ip) / m(lp):5.2f} |"
          f" {med(lg):>16} {med(ig):>16} {m(ig) / m(lg):5.2f} {m(bw):5.0f}% | {m(b16):6.2f}")
EOF
