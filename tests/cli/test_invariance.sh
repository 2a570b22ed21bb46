#!/usr/bin/env bash
# Bit-exact invariance from the command line: a request's tokens and
# logprobs (exact hex floats) are identical alone or in a crowd, with any
# prefill chunking, block size and thread count - for every weight type; and
# when later runs of the same request read its prompt from the prefix cache.
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

prompt=$(seq -s, 1000 37 3200)   # 60 tokens
# each weight type over the default f16 KV cache, and q8_0 and f32 over a bf16
# one (attention then runs vdpbf16ps at the AVX-512 level)
for config in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q8_0:bf16 f32:bf16; do
    type=${config%%:*}; kv=f16
    [ "$config" != "$type" ] && kv=${config#*:}
    m=$(model "tiny-qwen3-$type" --preset tiny --arch qwen3 --type "$type")
    [ "$kv" != f16 ] && type="$type kv=$kv"
    run() { "$INFERD_BIN" run -m "$m" --tokens "$prompt" -n 12 --ignore-eos --temp 0.8 --seed 7 \
                --kv "$kv" --dump-logprobs "$work/$1" "${@:2}" >/dev/null 2>"$work/$1.err"; }
    run base --threads 1 --chunk 512
    for v in "crowd:--batch-with 5" "chunk7:--chunk 7 --batch-with 3" "chunk1:--chunk 1" \
             "threads2:--threads 2 --chunk 13 --batch-with 2" "threads2b:--threads 2 --chunk 5" \
             "threads2c:--threads 2 --batch-with 7" "block4:--block 4 --chunk 9" \
             "block5:--block 5 --chunk 9 --batch-with 2"; do
        name=${v%%:*}; args=${v#*:}
        # shellcheck disable=SC2086
        if run "$name" --threads 1 $args && cmp -s "$work/base" "$work/$name" \
            && [ "$(wc -l <"$work/base")" -eq 12 ]; then
            ok "$type $name"
        else
            fail "$type $name"; diff "$work/base" "$work/$name" | head -5 || cat "$work/$name.err"
        fi
    done
    # Runs 2 and 3 attach 14 blocks of 4 (56 of 60 prompt tokens) from the
    # prefix cache; run fails if their tokens or logprobs differ from run 1.
    if run prefix --threads 1 --runs 3 --block 4 --chunk 9 && cmp -s "$work/base" "$work/prefix" \
        && grep -q "^run 3: prompt: 60 tokens (56 cached).*output identical to run 1" \
            "$work/prefix.err"; then
        ok "$type prefix-cache hit"
    else
        fail "$type prefix-cache hit"; cat "$work/prefix.err"
    fi
done
finish
