#!/usr/bin/env bash
# test_reference.sh - the engine's logits against the independent numpy reference.
#
# For every architecture (llama, qwen2, qwen3) and weight type (f32 f16 bf16
# q8_0 q4_0 q4_k q5_k q6_k): make the tiny test model (cached in
# $INFERD_SCRATCH/models/), run `inferd logits` on a fixed 40-token prompt with
# the default f16 KV cache (and for f32 weights again with --kv f32, where the
# tolerance is tight, and --kv bf16), compute the float64 reference logits with
# forward_ref.py, and compare them with compare.py under the tolerance of the
# weight type (README.md explains each).  Before that, the reader and the
# reference check themselves on synthetic files; after it, calibrate.py proves
# on the engine's own models that the same tolerances reject deliberate bugs
# (wrong rope style, missing bias, transposed weight, wrong GQA mapping,
# q4_K / q5_K / q6_K layout errors...) and accept an emulation of correct rounding.
#
# Environment (set by ctest): INFERD_BIN (the inferd binary), INFERD_SRC (the
# source tree), INFERD_SCRATCH (a scratch directory kept between runs).
# Optional: REF_ONLY="llama:q4_k qwen3:f32" restricts the matrix;
# REF_SKIP_PERTURB=1 skips the bug-detection proof; REF_JOBS (default 2)
# checks run at once; REF_THREADS (default 2) engine threads.
# Prints a table and ends with "N passed, N failed"; exit status 1 on any failure.
set -u

PY=/usr/bin/python3
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="${INFERD_BIN:-}"
SCRATCH="${INFERD_SCRATCH:-${TMPDIR:-/tmp}/inferd-scratch}"
MODELS="$SCRATCH/models"
WORK="$SCRATCH/reference"
RESULTS="$WORK/results"
ARCHS="llama qwen2 qwen3"
TYPES="f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k"
# A fixed prompt of 40 token ids, all below every tiny preset's vocab size.
TOKENS="9707,11,1879,0,576,3974,13876,38835,34208,916,279,15678,5562,13,220,16,17,18,19,4013,73,14585,2,12095,20,100,6730,25,1000,4321,8,22557,127,501,29909,3,64,999,2048,12"
THREADS="${REF_THREADS:-2}"
JOBS="${REF_JOBS:-2}"
# model -> the deliberate bugs tried on it: every architecture-level bug on
# qwen2 f32 (the tightest tolerance) and, on the others, what is specific to
# their rope style, q/k norm, separate output matrix and block layouts.
PERTURB_SPECS="qwen2:f32:all
llama:q4_k:rope_style,gqa_mod,tied_output,q4k_scales,q4k_nibbles
llama:q4_0:q4_0_offset
qwen2:q5_k:q5k_high
qwen3:q6_k:rope_style,no_qk_norm,tied_output,q6k_high"

passed=0
failed=0
report() { # status label detail
    if [ "$1" = ok ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    printf '%-4s %-24s %s\n' "$1" "$2" "$3"
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

mkdir -p "$MODELS" "$WORK" || { report FAIL setup "cannot create $SCRATCH"; finish; }
rm -rf "$RESULTS" && mkdir -p "$RESULTS" || { report FAIL setup "cannot create $RESULTS"; finish; }

if ! "$PY" -c 'import numpy' 2>/dev/null; then
    report FAIL setup "$PY has no numpy (apt-get install python3-numpy)"
    finish
fi

t0=$(date +%s)

# 1. The reference checks itself (no engine needed).
if out=$("$PY" "$HERE/gguf_ref.py" --selftest "$WORK" 2>&1); then
    report ok selftest "$out"
else
    report FAIL selftest "$out"
fi
if out=$("$PY" "$HERE/forward_ref.py" --selftest 2>&1); then
    report ok selftest "$out"
else
    report FAIL selftest "$out"
fi

# 2. The engine must be there with its logits command.
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
    report FAIL engine "INFERD_BIN '$BIN' is not an executable"
    finish
fi
if ! "$BIN" logits --help >/dev/null 2>&1; then
    report FAIL engine "'$BIN logits --help' failed: the engine has no logits command"
    finish
fi

wanted() { # arch type
    [ -z "${REF_ONLY:-}" ] && return 0
    case " $REF_ONLY " in *" $1:$2 "*) return 0 ;; esac
    return 1
}

tied_flag() { # arch: llama and qwen3 with a separate output matrix, qwen2 tied
    case "$1" in qwen2) echo --tied ;; *) echo --untied ;; esac
}

model_path() { # arch type
    echo "$MODELS/tiny-$1-$(tied_flag "$1" | tr -d -)-$2.gguf"
}

make_model() { # arch type; made once, reused from the cache
    local path
    path="$(model_path "$1" "$2")"
    [ -s "$path" ] && return 0
    if ! "$BIN" model make --preset tiny --arch "$1" --type "$2" "$(tied_flag "$1")" \
            --threads "$THREADS" -o "$path.tmp.$$" >"$WORK/make.log" 2>&1; then
        rm -f "$path.tmp.$$"
        return 1
    fi
    mv -f "$path.tmp.$$" "$path"
}

# Result lines of background checks: "status<TAB>label<TAB>detail" in
# $RESULTS/<seq>, printed in sequence order once all have finished.
emit() { # file status label detail
    printf '%s\t%s\t%s\n' "$2" "$3" "$4" >>"$1"
}

check_model() { # arch type result-file: reference once, engine per KV type, compare
    local arch="$1" type="$2" res="$3" name="$1-$2" model ref kvs kv eng out rc line
    model="$(model_path "$arch" "$type")"
    ref="$WORK/$name.ref.npy"
    if ! out=$("$PY" "$HERE/forward_ref.py" "$model" --tokens "$TOKENS" -o "$ref" 2>&1); then
        emit "$res" FAIL "$name" "reference failed: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
        return
    fi
    kvs="f16"
    [ "$type" = f32 ] && kvs="f16 f32 bf16"
    for kv in $kvs; do
        eng="$WORK/$name.kv-$kv.bin"
        rm -f "$eng"
        if ! out=$("$BIN" logits -m "$model" --tokens "$TOKENS" --threads "$THREADS" \
                --kv "$kv" -o "$eng" 2>&1); then
            emit "$res" FAIL "$name kv=$kv" \
                "inferd logits failed: $(echo "$out" | tail -n 3 | tr '\n' ' ')"
            continue
        fi
        out=$("$PY" "$HERE/compare.py" --engine "$eng" --ref "$ref" --type "$type" --kv "$kv" \
              --label "" 2>&1)
        rc=$?
        line=$(echo "$out" | head -n 1 | sed -e 's/^ *//' -e 's/^\(ok\|FAIL\) *//')
        if [ $rc -eq 0 ]; then
            emit "$res" ok "$name kv=$kv" "$line"
        else
            emit "$res" FAIL "$name kv=$kv" "$line $(echo "$out" | tail -n +2 | tr -s ' \n' ' ')"
        fi
    done
}

check_bugs() { # arch type perturbations result-file
    local name="$1-$2" out n
    if out=$("$PY" "$HERE/calibrate.py" "$(model_path "$1" "$2")" --tokens "$TOKENS" --kv f16 \
            --perturb "$3" --check 2>&1); then
        n=$(echo "$out" | grep -c '^  bug')
        emit "$4" ok "bugs caught $name" \
            "$n deliberate bugs rejected, emulated rounding accepted"
    else
        emit "$4" FAIL "bugs caught $name" \
            "$(echo "$out" | grep -E 'NOT DETECTED|FAIL|rror' | tr -s ' \n' ' ')"
    fi
}

# Models first, one at a time (the maker uses every thread it is given).
for arch in $ARCHS; do
    for type in $TYPES; do
        wanted "$arch" "$type" || continue
        if ! make_model "$arch" "$type"; then
            report FAIL "$arch-$type" \
                "model make failed: $(tail -n 3 "$WORK/make.log" | tr '\n' ' ')"
        fi
    done
done

# Then the checks, JOBS at a time; the long bug-detection runs start first.
# Result files are numbered in the order the table prints them.
run_bg() { # function args...
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    "$@" &
}
if [ -z "${REF_SKIP_PERTURB:-}" ]; then
    n=500
    while IFS=: read -r arch type bugs; do
        wanted "$arch" "$type" || continue
        [ -s "$(model_path "$arch" "$type")" ] || continue
        n=$((n + 1))
        run_bg check_bugs "$arch" "$type" "$bugs" "$RESULTS/$n"
    done <<<"$PERTURB_SPECS"
fi
n=100
for arch in $ARCHS; do
    for type in $TYPES; do
        wanted "$arch" "$type" || continue
        [ -s "$(model_path "$arch" "$type")" ] || continue
        n=$((n + 1))
        run_bg check_model "$arch" "$type" "$RESULTS/$n"
    done
done
wait

printf '\n%-4s %-24s %s\n' "" "model / kv" \
    "worst position over the prompt (compare.py; tolerances in README.md)"
for f in "$RESULTS"/*; do
    [ -e "$f" ] || continue
    if [ ! -s "$f" ]; then
        report FAIL "check $(basename "$f")" "produced no result"
        continue
    fi
    while IFS=$'\t' read -r status label detail; do
        report "$status" "$label" "$detail"
    done <"$f"
done
echo "elapsed $(($(date +%s) - t0))s"
finish
