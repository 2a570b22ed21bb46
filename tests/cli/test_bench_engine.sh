#!/usr/bin/env bash
# bench-engine end to end on the tiny model: the JSON report parses, names
# every figure asked for, and every figure is a positive rate with a share of
# a measured limit. (No speed is asserted: that is the benchmark's job.)
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
out=$("$INFERD_BIN" bench-engine -m "$m" --threads 2 --pp 64 --tg 8 --batches 2,4 --json)
if $PY - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
names = [f["name"] for f in r["figures"]]
assert names == ["pp64", "tg8", "decode-b2", "decode-b4"], names
for f in r["figures"]:
    assert f["tokens_per_s"] > 0 and f["pct_of_limit"] > 0 and f["limit_value"] > 0, f
lim = r["limits"]
assert lim["read_gbs"] > 0 and lim["fma_gflops"] > 0, lim
assert r["weight_type"] == "q8_0" and r["threads"] == 2 and r["weight_bytes"] > 0
PY
then ok "bench-engine --json"; else fail "bench-engine --json: $out"; fi
# decode from deep contexts sharing a prefix: every timed step decodes all
# the sequences (the figure is reported only then)
out=$("$INFERD_BIN" bench-engine -m "$m" --threads 2 --pp 64 --tg 4 --batches 3 --depth 100 \
    --shared-prefix 64 --json)
if $PY - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
names = [f["name"] for f in r["figures"]]
assert names == ["pp64", "tg4@d100", "decode-b3@d100/64"], names
PY
then ok "bench-engine --depth --shared-prefix"; else fail "bench-engine --shared-prefix: $out"; fi
rc=0; "$INFERD_BIN" bench-engine -m "$m" --depth 10 --shared-prefix 11 2>/dev/null || rc=$?
if [ "$rc" -eq 2 ]; then ok "a shared prefix past the depth is a usage error"; else fail "gave $rc"; fi
rc=0; "$INFERD_BIN" bench-engine -m "$m" --pp 0 2>/dev/null || rc=$?
if [ "$rc" -eq 2 ]; then ok "bad --pp is a usage error"; else fail "bad --pp gave $rc"; fi
finish
