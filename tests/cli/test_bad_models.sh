#!/usr/bin/env bash
# Bad model files: not GGUF, truncated, unknown tensor type, inconsistent
# shapes, a missing tensor. Every command that opens a model answers with one
# clear error line on stderr and exit status 1 - never a crash.
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
good=$(model tiny-llama-q8_0 --preset tiny --arch llama --type q8_0)

echo "this is not a model" >"$work/text.gguf"
head -c 100000 "$good" >"$work/truncated.gguf"
: >"$work/empty.gguf"
# Patch files with the standard library only (struct), no numpy.
$PY - "$good" "$work" <<'PY'
import struct, sys
src, out = sys.argv[1], sys.argv[2]
data = bytearray(open(src, 'rb').read())

def patch_u32_key(buf, key, value):
    k = key.encode()
    i = buf.index(struct.pack('<Q', len(k)) + k) + 8 + len(k)
    assert struct.unpack_from('<I', buf, i)[0] == 4  # u32
    struct.pack_into('<I', buf, i + 4, value)

def patch_tensor_type(buf, name, t):
    n = name.encode()
    i = buf.index(struct.pack('<Q', len(n)) + n) + 8 + len(n)
    nd = struct.unpack_from('<I', buf, i)[0]
    struct.pack_into('<I', buf, i + 4 + 8 * nd, t)

def rename_tensor(buf, old, new):
    o, n = old.encode(), new.encode()
    assert len(o) == len(n)
    i = buf.index(struct.pack('<Q', len(o)) + o)
    buf[i + 8:i + 8 + len(o)] = n

b = bytearray(data); patch_u32_key(b, 'llama.embedding_length', 320)
open(out + '/shape.gguf', 'wb').write(b)
b = bytearray(data); patch_tensor_type(b, 'blk.0.attn_q.weight', 21)
open(out + '/type.gguf', 'wb').write(b)
b = bytearray(data); rename_tensor(b, 'blk.1.ffn_up.weight', 'blk.1.ffn_xx.weight')
open(out + '/missing.gguf', 'wb').write(b)
b = bytearray(data); patch_u32_key(b, 'llama.attention.head_count_kv', 3)
open(out + '/gqa.gguf', 'wb').write(b)
PY

check() { # name expected-words command...
    local name=$1 words=$2; shift 2
    local rc=0
    "$@" >"$work/out" 2>"$work/err" || rc=$?
    local lines; lines=$(wc -l <"$work/err")
    if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -qi -- "$words" "$work/err"; then
        ok "$name: $(cat "$work/err")"
    else
        fail "$name: exit $rc, $lines stderr lines: $(head -3 "$work/err")"
    fi
}

for f in text truncated empty shape type missing gqa; do
    case $f in
        text|empty) w="gguf";; truncated) w="past end of file\|truncat";;
        shape) w="shape";; type) w="type";; missing) w="ffn_up";; gqa) w="head_count";;
    esac
    check "run $f" "$w" "$INFERD_BIN" run -m "$work/$f.gguf" --tokens 1,2,3 -n 2
    check "logits $f" "$w" "$INFERD_BIN" logits -m "$work/$f.gguf" --tokens 1,2 -o "$work/l.bin"
    check "bench-engine $f" "$w" "$INFERD_BIN" bench-engine -m "$work/$f.gguf"
done
for f in text truncated empty type; do
    check "model info $f" "gguf" "$INFERD_BIN" model info "$work/$f.gguf"
done
check "missing file" "no such file" "$INFERD_BIN" run -m "$work/nope.gguf" --tokens 1 -n 1
# Bad requests on a good model: a clear message, exit 2 (usage) or 1.
rc=0; "$INFERD_BIN" run -m "$good" --tokens 1,999999999 -n 2 2>"$work/err" >/dev/null || rc=$?
if [ "$rc" -ne 0 ] && grep -q "out of range" "$work/err"; then ok "token id out of range"; else fail "token id out of range (rc $rc)"; fi
rc=0; "$INFERD_BIN" run -m "$good" --tokens 1,2 -n 2 --top-p 0 2>"$work/err" >/dev/null || rc=$?
if [ "$rc" -ne 0 ] && grep -q "top_p" "$work/err"; then ok "bad top_p"; else fail "bad top_p (rc $rc): $(cat "$work/err")"; fi
finish
