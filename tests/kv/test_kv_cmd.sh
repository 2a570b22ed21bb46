#!/usr/bin/env bash
# `inferd kv stat|ls|verify|gc` on a disk tier directory a real server
# filled: the counts match the files, a flipped payload byte and a
# truncated record are found (and only they), --repair removes them, gc
# evicts the records expiring first down to --max and removes stale
# temporary files, and the modifying commands refuse a directory a running
# server holds while the reading ones work beside it.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work=$(mktemp -d "$INFERD_SCRATCH/kv_cmd.XXXXXX")
dir="$work/tier"
pid=
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
kv() { "$INFERD_BIN" kv "$@"; }

# start: a server on the tier directory in the background; sets $pid, $port.
start() {
    rm -f "$work/port"
    "$INFERD_BIN" serve -m "$m" --name tiny --port 0 --port-file "$work/port" \
        --data-dir "$work/data" --threads 2 --ctx 512 --kv-tier "disk:$dir:64MiB" \
        >>"$work/serve.log" 2>&1 &
    pid=$!
    wait_port "$pid" "$work/port" "$work/serve.log"
}
stop() { kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# ask SEED: a completion of 200 prompt token ids (12 full blocks) of their own.
ask() {
    $PY - "$port" "$1" <<'EOF'
import json, sys, urllib.request
port, seed = int(sys.argv[1]), int(sys.argv[2])
prompt = [(seed * 7919 + i * 104729) % 150 + 10 for i in range(200)]
body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 4,
                   "temperature": 0}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                             {"Content-Type": "application/json"})
json.load(urllib.request.urlopen(req, timeout=60))
EOF
}
# records: the record files (32 hex digits), one path a line, sorted.
records() { find "$dir" -type f -regextype posix-extended -regex '.*/[0-9a-f]{32}' | sort; }
# js EXPR < JSON: evaluates EXPR on the parsed object j.
js() { $PY -c "import json, sys; j = json.load(sys.stdin); print($1)"; }

# Command-line and directory errors.
set +e
kv >/dev/null 2>&1; a=$?
kv stat >/dev/null 2>&1; b=$?
kv frob "$work" >/dev/null 2>&1; c=$?
kv gc "$work" --max 1q >/dev/null 2>&1; d=$?
kv gc "$work" --target 1MiB >/dev/null 2>&1; e=$?
err=$(kv stat "$work/none" 2>&1); f=$?
mkdir -p "$work/other"; echo x >"$work/other/notes.txt"
err2=$(kv gc "$work/other" 2>&1); g=$?
set -e
[ "$a$b$c$d$e" = 22222 ] && ok "usage errors exit 2" || fail "usage errors: $a $b $c $d $e"
if [ "$f" = 1 ] && [ "$(echo "$err" | wc -l)" = 1 ] && [[ "$err" == *"cannot open tier directory"* ]]
then ok "missing DIR: one line, exit 1"; else fail "missing DIR: exit $f: $err"; fi
if [ "$g" = 1 ] && [[ "$err2" == *"not a KV tier directory"* ]] && [ -f "$work/other/notes.txt" ]
then ok "not a tier directory: refused, exit 1"; else fail "not a tier directory: exit $g: $err2"; fi
kv --help | grep -q "verify" && kv gc --help | grep -q -- "--target" &&
    ok "--help" || fail "--help"

# Fill the directory through a server: three prompts of their own.
start || { fail "server"; finish; exit 1; }
for s in 1 2 3; do ask "$s"; done
stop
mapfile -t recs < <(records)
n=${#recs[@]}
rec_bytes=$(stat -c %s "${recs[0]}")
total=$(cat "${recs[@]}" | wc -c)
[ "$n" -ge 30 ] && ok "server wrote $n records of $rec_bytes bytes" || fail "only $n records"

# stat: counts and bytes match the files; one layout; live expiry range.
j=$(kv stat "$dir" --json)
got=$(echo "$j" | js '(j["files"], j["states"]["ok"]["files"], j["bytes"], len(j["layouts"]),
    j["layouts"][0]["blocks"], j["layouts"][0]["frame_bytes"] + 56, j["live"]["blocks"],
    j["live"]["expires_first"] is not None and j["live"]["expires_first"] <= j["live"]["expires_last"])')
want="($n, $n, $total, 1, $n, $rec_bytes, $n, True)"
[ "$got" = "$want" ] && ok "stat --json: $n ok, $total bytes, one layout" || fail "stat --json: $got, want $want"
fp=$(echo "$j" | js 'j["layouts"][0]["fingerprint"]')
kv stat "$dir" | grep -Eq "^  ok +$n " && ok "stat text" || fail "stat text: $(kv stat "$dir")"
got=$(kv stat "$dir" --json --fingerprint "$fp" | js '(j["states"]["ok"]["files"], j["states"]["foreign"]["files"])')
got2=$(kv stat "$dir" --json --fingerprint 00000000000000000000000000000000 |
    js '(j["states"]["ok"]["files"], j["states"]["foreign"]["files"])')
[ "$got" = "($n, 0)" ] && [ "$got2" = "(0, $n)" ] && ok "stat --fingerprint: other engines are foreign" ||
    fail "stat --fingerprint: $got / $got2"

# ls: one line per record, the ids are the file names.
ls_ids=$(kv ls "$dir" | awk '$2 == "ok" && $3 == '"$rec_bytes"' && $6 == substr("'"$fp"'", 1, 8) {print $1}' | sort)
file_ids=$(printf '%s\n' "${recs[@]}" | xargs -n1 basename | sort)
json_ids=$(kv ls "$dir" --json | $PY -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    assert r["state"] == "ok" and r["stored"] <= r["expires"] and r["expires"].endswith("Z"), r
    print(r["id"])' | sort)
[ "$ls_ids" = "$file_ids" ] && [ "$json_ids" = "$file_ids" ] && ok "ls and ls --json: $n records" ||
    fail "ls: $(kv ls "$dir" | wc -l) lines, $(echo "$json_ids" | wc -l) JSON lines for $n files"

# verify: all sound; then a flipped payload byte and a truncated record.
out=$(kv verify "$dir") && [[ "$out" == *"verified $n records"*"0 corrupt"* ]] &&
    ok "verify: $n sound" || fail "verify: $out"
flipped=${recs[3]}; cut=${recs[7]}
$PY - "$flipped" "$cut" <<'EOF'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-100, os.SEEK_END); b = f.read(1); f.seek(-100, os.SEEK_END); f.write(bytes([b[0] ^ 1]))
os.truncate(sys.argv[2], os.path.getsize(sys.argv[2]) - 100)
EOF
set +e; out=$(kv verify "$dir"); rc=$?; set -e
bad=$(echo "$out" | grep '^corrupt' | sort)
if [ "$rc" = 1 ] && [ "$(echo "$bad" | wc -l)" = 2 ] &&
    echo "$bad" | grep -q "$flipped: .*checksum" && echo "$bad" | grep -q "$cut: .*bytes"
then ok "verify: the flipped and the truncated record, exit 1"; else fail "verify after damage: exit $rc: $out"; fi
out=$(kv verify "$dir" --repair) && [[ "$out" == *"removed 2 corrupt records"* ]] &&
    [ ! -e "$flipped" ] && [ ! -e "$cut" ] && ok "verify --repair: removed 2" || fail "verify --repair: $out"
n=$((n - 2))
out=$(kv verify "$dir") && [[ "$out" == *"verified $n records"* ]] && ok "verify after repair: exit 0" ||
    fail "verify after repair: $out"

# gc: a stale temporary file goes, a fresh one (a write in progress) stays.
stale="$dir/ab/.ab000000000000000000000000000001.tmp"
fresh="$dir/ab/.ab000000000000000000000000000002.host.1.1.tmp"
mkdir -p "$dir/ab"; echo partial >"$stale"; echo partial >"$fresh"
touch -d '2 hours ago' "$stale"
out=$(kv gc "$dir") && [[ "$out" == *"0 corrupt, 1 stale temporary, 0 evicted"* ]] &&
    [ ! -e "$stale" ] && [ -e "$fresh" ] && ok "gc: stale temporary file removed, fresh kept" ||
    fail "gc temp: $out"
kv ls "$dir" | grep -q "^ab000000000000000000000000000002  temp" && ok "ls shows the temporary file" ||
    fail "ls temp"

# gc --max: evicts the records expiring first until 5 fit.
keep=$(kv ls "$dir" --json | $PY -c '
import json, sys
r = [json.loads(l) for l in sys.stdin]
r = sorted((x["expires"], x["id"]) for x in r if x["state"] == "ok")
print("\n".join(sorted(i for _, i in r[-5:])))')
max=$((5 * rec_bytes + rec_bytes / 2))
out=$(kv gc "$dir" --max "${max}B") && [[ "$out" == *"$((n - 5)) evicted"* ]] &&
    [ "$(records | xargs -n1 basename | sort)" = "$keep" ] &&
    ok "gc --max: evicted $((n - 5)), the 5 expiring last are left" || fail "gc --max: $out"
got=$(kv stat "$dir" --json | js '(j["states"]["ok"]["files"], j["states"]["ok"]["bytes"] <= '"$max"')')
[ "$got" = "(5, True)" ] && ok "stat after gc: 5 records within --max" || fail "stat after gc: $got"

# With a server on the directory: gc and verify --repair refuse, stat works.
start || { fail "server restart"; finish; exit 1; }
before=$(records)
set +e
err=$(kv gc "$dir" 2>&1 >/dev/null); a=$?
err2=$(kv verify "$dir" --repair 2>&1 >/dev/null); b=$?
j=$(kv stat "$dir" --json); c=$?
set -e
if [ "$a" = 1 ] && [ "$(echo "$err" | wc -l)" = 1 ] && [[ "$err" == *"in use by a running server"* ]] &&
    [ "$b" = 1 ] && [[ "$err2" == *"in use"* ]] && [ "$(records)" = "$before" ]
then ok "gc, verify --repair refuse a served directory: $err"; else fail "served directory: $a '$err' / $b '$err2'"; fi
got=$(echo "$j" | js 'j["states"]["ok"]["files"]')
[ "$c" = 0 ] && [ "$got" = 5 ] && ok "stat beside the server" || fail "stat beside the server: exit $c, $got"
holder=$(echo "$j" | js 'j["lock_pid"]')
[ "$holder" = "$pid" ] && ok "stat names the server's pid ($pid)" ||
    echo "note: /proc/locks names no holder here ($holder); stat cannot show it"
stop
out=$(kv gc "$dir") && ok "gc once the server is gone" || fail "gc after stop: $out"

finish
