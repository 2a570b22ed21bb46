#!/usr/bin/env bash
# `inferd sim cache`: a worked trace gives the figures counted by hand in
# both trace formats (Mooncake JSONL, a kv-cache-tester JSON document) and
# as JSON; bad traces and capacities are one clear error line each.
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d "$INFERD_SCRATCH/sim_cmd.XXXXXX")
trap 'rm -rf "$work"' EXIT
sim() { "$INFERD_BIN" sim cache "$@"; }

# requests [1 2 3] [1 2 4] [5 6] [1 2 3] [5 6 7]: 14 blocks; at 3 blocks
# LRU hits 2, Belady 5, the infinite cache 7 (test_tier_index.c works them)
cat >"$work/t.jsonl" <<'T'
{"timestamp": 0, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 1, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 4]}
{"timestamp": 2, "input_length": 1024, "output_length": 10, "hash_ids": [5, 6]}

{"timestamp": 3, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 4, "input_length": 1536, "output_length": 10, "hash_ids": [5, 6, 7]}
T
out=$(sim "$work/t.jsonl" --capacity 3)
if [[ "$out" == *"5 requests, 14 blocks, 7 distinct; capacity 3 blocks"* ]] &&
    echo "$out" | grep -Eq '^  lru +14\.29%' && echo "$out" | grep -Eq '^  belady +35\.71%' &&
    echo "$out" | grep -Eq '^  infinite +50\.00%'; then
    ok "worked trace: lru 2, belady 5, infinite 7 of 14"
else fail "worked trace: $out"; fi

j=$(sim "$work/t.jsonl" --capacity 100% --json)
if $PY -c '
import json, sys
j = json.loads(sys.argv[1]); p = j["policies"]
assert j["requests"] == 5 and j["capacity"] == 7, j
seen = p.pop("slru+seen")
assert all(abs(v["hit_ratio"] - 0.5) < 1e-9 for v in p.values()), p
assert seen["hits"] == 2, seen  # a first offer is refused: only 1 2 of [1 2 3] again
' "$j"; then ok "--json, capacity 100%: every policy but seen-admission is the ideal"
else fail "--json: $j"; fi

# the same requests as a kv-cache-tester document
$PY - "$work/t.json" <<'P'
import json, sys
reqs = [[1, 2, 3], [1, 2, 4], [5, 6], [1, 2, 3], [5, 6, 7]]
json.dump({"id": "t", "requests": [{"t": i, "type": "s", "hash_ids": h} for i, h in enumerate(reqs)]},
          open(sys.argv[1], "w"))
P
out2=$(sim "$work/t.json" --capacity 3)
[ "$(echo "$out" | sed 1d)" = "$(echo "$out2" | sed 1d)" ] && ok "JSON document: same figures" ||
    fail "JSON document: $out2"

# bad input: one line on stderr, exit 1 (trace) or 2 (command line)
printf '{"hash_ids": [1, 2]}\n{"hash_ids": [1, \n' >"$work/broken.jsonl"
printf '{"timestamp": 1}\n' >"$work/noids.jsonl"
printf '{"hash_ids": [1, -2]}\n' >"$work/neg.jsonl"
: >"$work/empty.jsonl"
for c in "broken.jsonl:2:" "noids.jsonl" "neg.jsonl" "empty.jsonl:no requests" "missing.jsonl:No such file"; do
    f=${c%%:*}; want=${c#*:}; [ "$want" = "$c" ] && want=
    set +e; err=$(sim "$work/$f" 2>&1 >/dev/null); rc=$?; set -e
    if [ "$rc" = 1 ] && [ "$(echo "$err" | wc -l)" = 1 ] && [[ "$err" == *"$f"*"$want"* ]]; then
        ok "bad trace $f: $err"
    else fail "bad trace $f: exit $rc: $err"; fi
done
for c in 0 -3 0% 101% 5x ""; do
    set +e; err=$(sim "$work/t.jsonl" --capacity "$c" 2>&1 >/dev/null); rc=$?; set -e
    [ "$rc" = 2 ] && [[ "$err" == *"--capacity"* ]] && ok "--capacity '$c' refused" ||
        fail "--capacity '$c': exit $rc: $err"
done
set +e; sim >/dev/null 2>&1; a=$?; sim "$work/t.jsonl" --frob >/dev/null 2>&1; b=$?; set -e
[ "$a" = 2 ] && [ "$b" = 2 ] && ok "usage errors exit 2" || fail "usage errors: $a $b"
finish
