#!/usr/bin/env bash
# `inferd model make`: tiny models for every arch x weight type, read back by
# an independent GGUF reader (Python stdlib struct, below) that checks every
# tensor's name, type and shape against model.h, the hyper-parameter keys,
# and the tokenizer keys; the K-quant fall-back on qwen2.5-0.5b's 896-wide
# rows; determinism (seed, thread count); usage errors.
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

cat >"$work/check.py" <<'EOF'
# check.py FILE ARCH TYPE N_LAYER N_VOCAB TIED [NAME=TYPE ...]: exit 1 with a
# message per mismatch. NAME=TYPE overrides the expected type of a tensor.
import struct, sys

GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "q4_k": 12, "q5_k": 13, "q6_k": 14, "bf16": 30}
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 8: (32, 34), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 30: (1, 2)}
FTYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "q4_k": 14, "q5_k": 16, "q6_k": 18, "bf16": 32}
SHAPES = {  # preset tiny
    "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64, "n_ff": 768, "ctx": 4096}

path, arch, wtype, n_layer, n_vocab, tied = sys.argv[1:7]
n_layer, n_vocab, tied = int(n_layer), int(n_vocab), tied == "1"
override = dict(a.split("=") for a in sys.argv[7:])
buf = open(path, "rb").read()
pos = 0
errors = []

def take(fmt):
    global pos
    v = struct.unpack_from("<" + fmt, buf, pos)
    pos += struct.calcsize("<" + fmt)
    return v[0] if len(v) == 1 else v

def string():
    global pos
    n = take("Q")
    s = buf[pos:pos + n].decode("utf-8")
    pos += n
    return s

SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
          12: "d"}

def value(t):
    if t == 8:
        return string()
    if t == 9:
        et, n = take("I"), take("Q")
        return (et, [value(et) for _ in range(n)])
    return (t, take(SCALAR[t]))

assert buf[:4] == b"GGUF", "bad magic"
pos = 4
version, n_tensors, n_kv = take("I"), take("Q"), take("Q")
kv = {}
for _ in range(n_kv):
    k = string()
    kv[k] = value(take("I"))
infos = []
for _ in range(n_tensors):
    name = string()
    nd = take("I")
    ne = [take("Q") for _ in range(nd)]
    infos.append((name, ne, take("I"), take("Q")))
align = 32
data0 = (pos + align - 1) // align * align

def check(cond, what):
    if not cond:
        errors.append(what)

def u32(key, want):
    got = kv.get(key)
    check(got == (4, want), f"{key} = {got}, expected u32 {want}")

def f32(key, want):
    got = kv.get(key)
    check(got is not None and got[0] == 6 and abs(got[1] - want) <= 1e-6 * want,
          f"{key} = {got}, expected f32 {want}")

check(version == 3, f"version {version}")
check(kv.get("general.architecture") == arch, f"general.architecture = {kv.get('general.architecture')}")
check(kv.get("general.name", "").startswith("inferd-test "), "general.name")
u32("general.file_type", FTYPE[wtype])
E, H, KVH, D, F = (SHAPES[k] for k in ("n_embd", "n_head", "n_head_kv", "head_dim", "n_ff"))
u32(f"{arch}.embedding_length", E)
u32(f"{arch}.block_count", n_layer)
u32(f"{arch}.feed_forward_length", F)
u32(f"{arch}.attention.head_count", H)
u32(f"{arch}.attention.head_count_kv", KVH)
u32(f"{arch}.attention.key_length", D)
u32(f"{arch}.attention.value_length", D)
u32(f"{arch}.rope.dimension_count", D)
u32(f"{arch}.context_length", SHAPES["ctx"])
f32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
f32(f"{arch}.rope.freq_base", 10000.0 if arch == "llama" else 1e6)

tokens = kv.get("tokenizer.ggml.tokens")
types = kv.get("tokenizer.ggml.token_type")
merges = kv.get("tokenizer.ggml.merges")
check(kv.get("tokenizer.ggml.model") == "gpt2", "tokenizer.ggml.model")
check(kv.get("tokenizer.ggml.pre") == ("llama-bpe" if arch == "llama" else "qwen2"),
      f"tokenizer.ggml.pre = {kv.get('tokenizer.ggml.pre')}")
check(tokens is not None and tokens[0] == 8 and len(tokens[1]) == n_vocab,
      "tokenizer.ggml.tokens count")
check(types is not None and types[0] == 5 and len(types[1]) == n_vocab,
      "tokenizer.ggml.token_type: int32 per token")
check(merges is not None and merges[0] == 8 and len(merges[1]) > 100000, "tokenizer.ggml.merges")
check(kv.get("tokenizer.ggml.add_bos_token") == (7, arch == "llama"), "add_bos_token")
check(isinstance(kv.get("tokenizer.chat_template"), str), "tokenizer.chat_template")
if arch == "llama":
    u32("tokenizer.ggml.bos_token_id", 128000)
    check(tokens[1][128000] == "<|begin_of_text|>", "token 128000")
else:
    u32("tokenizer.ggml.eos_token_id", 151645)
    check(tokens[1][151645] == "<|im_end|>" and types[1][151645] == (5, 3),
          "<|im_end|> is control token 151645")

want = {"token_embd.weight": ([E, n_vocab], wtype), "output_norm.weight": ([E], "f32")}
if not tied:
    want["output.weight"] = ([E, n_vocab], wtype)
for i in range(n_layer):
    b = f"blk.{i}."
    want.update({
        b + "attn_norm.weight": ([E], "f32"), b + "ffn_norm.weight": ([E], "f32"),
        b + "attn_q.weight": ([E, H * D], wtype), b + "attn_k.weight": ([E, KVH * D], wtype),
        b + "attn_v.weight": ([E, KVH * D], wtype), b + "attn_output.weight": ([H * D, E], wtype),
        b + "ffn_gate.weight": ([E, F], wtype), b + "ffn_up.weight": ([E, F], wtype),
        b + "ffn_down.weight": ([F, E], wtype)})
    if arch == "qwen2":
        want.update({b + "attn_q.bias": ([H * D], "f32"), b + "attn_k.bias": ([KVH * D], "f32"),
                     b + "attn_v.bias": ([KVH * D], "f32")})
    if arch == "qwen3":
        want.update({b + "attn_q_norm.weight": ([D], "f32"), b + "attn_k_norm.weight": ([D], "f32")})
for name, t in override.items():
    want[name] = (want[name][0], t)

got = {name: (ne, t, off) for name, ne, t, off in infos}
check(set(got) == set(want), f"tensors: extra {sorted(set(got) - set(want))}, "
                             f"missing {sorted(set(want) - set(got))}")
end = data0
for name, (ne, t) in want.items():
    if name not in got:
        continue
    gne, gt, off = got[name]
    check(gne == ne, f"{name}: shape {gne}, expected {ne}")
    check(gt == GGML[t], f"{name}: type {gt}, expected {t}")
    blck, size = BLOCK.get(gt, (1, 0))
    nbytes = (gne[0] // blck) * size * (gne[1] if len(gne) > 1 else 1)
    check(off % align == 0, f"{name}: offset {off} not aligned")
    end = max(end, data0 + off + nbytes)
    if gt == 0 and name.endswith("norm.weight"):
        vals = struct.unpack_from(f"<{gne[0]}f", buf, data0 + off)
        mean = sum(vals) / len(vals)
        check(abs(mean - 1) < 0.05, f"{name}: mean {mean}, expected ~1")
check(end <= len(buf) and len(buf) - end < align, f"file size {len(buf)}, data ends at {end}")
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
EOF

# Every arch x every type (models shared with other tests through lib.sh).
for arch in qwen3 qwen2 llama; do
    if [ "$arch" = llama ]; then vocab=128256; tied=0; else vocab=151669; tied=1; fi
    for type in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k; do
        m=$(model "tiny-$arch-$type" --preset tiny --arch "$arch" --type "$type")
        if $PY "$work/check.py" "$m" "$arch" "$type" 2 "$vocab" "$tied"; then
            ok "tiny $arch $type"
        else
            fail "tiny $arch $type"
        fi
    done
done

# model info reads what make wrote.
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
if "$INFERD_BIN" model info "$m" >"$work/info" 2>&1 && grep -q "blk.1.attn_k_norm.weight" "$work/info"
then ok "model info"; else fail "model info"; cat "$work/info"; fi

# --untied / --tied / --layers / --ctx and the deepseek tokenizer.
"$INFERD_BIN" model make --preset tiny --arch qwen3 --untied --layers 3 --type q8_0 \
    -o "$work/u.gguf" >/dev/null
if $PY "$work/check.py" "$work/u.gguf" qwen3 q8_0 3 151669 0; then ok "--untied --layers 3"
else fail "--untied --layers 3"; fi
"$INFERD_BIN" model make --preset tiny --arch llama --tokenizer deepseek_v3 --tied --ctx 512 \
    --layers 1 --type q4_0 -o "$work/ds.gguf" >"$work/ds.out"
if grep -q "gpt2 / deepseek-v3" "$work/ds.out" && grep -q "ctx 512" "$work/ds.out" \
    && grep -q "128815 tokens" "$work/ds.out" && grep -q "tied output" "$work/ds.out"
then ok "deepseek tokenizer"; else fail "deepseek tokenizer"; cat "$work/ds.out"; fi

# K-quant rows of 896 fall back (q5_k, q6_k -> q8_0) with a note; 4864-wide
# ffn_down rows keep the K-quant. The vocabulary is padded to Qwen2.5's 151936.
for kq in q5_k:13 q6_k:14; do
ktype=${kq%:*} kid=${kq#*:}
if "$INFERD_BIN" model make --preset qwen2.5-0.5b --layers 1 --type "$ktype" -o "$work/q.gguf" \
    >/dev/null 2>"$work/q.err" && grep -q "note: rows of 896" "$work/q.err" \
    && $PY - "$work/q.gguf" "$kid" <<'EOF'
import struct, sys
buf = open(sys.argv[1], "rb").read()
pos = 24
def take(fmt):
    global pos
    v = struct.unpack_from("<" + fmt, buf, pos); pos += struct.calcsize("<" + fmt); return v[0]
def skip_value(t):
    global pos
    if t == 8:
        n = take("Q"); pos += n; return
    if t == 9:
        et, n = take("I"), take("Q")
        for _ in range(n): skip_value(et)
        return
    pos += {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}[t]
n_tensors, n_kv = struct.unpack_from("<QQ", buf, 8)
for _ in range(n_kv):
    n = take("Q"); pos += n; skip_value(take("I"))
types = {}
for _ in range(n_tensors):
    n = take("Q"); name = buf[pos:pos + n].decode(); pos += n
    ne = [take("Q") for _ in range(take("I"))]; types[name] = (take("I"), ne); take("Q")
want = {"token_embd.weight": (8, [896, 151936]), "blk.0.attn_q.weight": (8, [896, 896]),
        "blk.0.attn_q.bias": (0, [896]), "blk.0.attn_k.weight": (8, [896, 128]),
        "blk.0.ffn_down.weight": (int(sys.argv[2]), [4864, 896]),
        "blk.0.ffn_up.weight": (8, [896, 4864])}
bad = {k: types.get(k) for k, v in want.items() if types.get(k) != v}
print(bad or "", end="")
sys.exit(1 if bad or "output.weight" in types else 0)
EOF
then ok "qwen2.5-0.5b $ktype fall-back"; else fail "qwen2.5-0.5b $ktype fall-back"; cat "$work/q.err"; fi
done

# Same seed -> same bytes, whatever the threads; another seed -> other bytes.
mk() { "$INFERD_BIN" model make --preset tiny --layers 1 --type q4_k "$@" >/dev/null; }
mk --seed 9 --threads 1 -o "$work/a.gguf"
mk --seed 9 --threads 2 -o "$work/b.gguf"
mk --seed 10 --threads 2 -o "$work/c.gguf"
if cmp -s "$work/a.gguf" "$work/b.gguf"; then ok "seed 9: same bytes on 1 and 2 threads"
else fail "seed 9: bytes differ between thread counts"; fi
if ! cmp -s "$work/a.gguf" "$work/c.gguf"; then ok "seed 10 differs"; else fail "seed 10 same"; fi

# Usage errors exit 2 with a message; runtime errors exit 1.
expect_exit() {
    local want=$1 pattern=$2; shift 2
    local rc=0
    "$INFERD_BIN" model make "$@" >"$work/out" 2>&1 || rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$work/out"; then ok "exit $want: $*"
    else fail "exit $rc (want $want): $*"; cat "$work/out"; fi
}
expect_exit 2 "output file is required" --preset tiny
expect_exit 2 "unknown preset 'huge'" --preset huge -o "$work/x.gguf"
expect_exit 2 "unknown type 'q5_0'" --type q5_0 -o "$work/x.gguf"
expect_exit 2 "unknown architecture 'gpt2'" --arch gpt2 -o "$work/x.gguf"
expect_exit 2 "unknown option '--bogus'" --bogus -o "$work/x.gguf"
expect_exit 2 "layers" --layers 0 -o "$work/x.gguf"
expect_exit 2 "needs a value" -o
expect_exit 1 "tokenizer directory '/nonexistent' does not exist" --tokenizer /nonexistent \
    -o "$work/x.gguf"
mkdir -p "$work/badtok"
echo '{"model": ' >"$work/badtok/tokenizer.json"
echo '{}' >"$work/badtok/tokenizer_config.json"
expect_exit 1 "tokenizer.json': invalid JSON" --tokenizer "$work/badtok" -o "$work/x.gguf"
expect_exit 1 "cannot" --layers 1 -o "$work/no/such/dir/x.gguf"
[ ! -e "$work/x.gguf" ] && ok "no file left after errors" || fail "file left after an error"
finish
