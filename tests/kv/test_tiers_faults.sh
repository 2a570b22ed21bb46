#!/usr/bin/env bash
# KV tier faults through `inferd serve`: bad tier flags stop the start with
# one line and exit 2; a disk tier on a full filesystem (a 512 KiB tmpfs)
# and one whose directory turns unwritable while serving stops writing, says
# so in the log and in /metrics, and every request still succeeds; the tier
# writes again once the filesystem lets it. The tmpfs lives in a private
# mount namespace of the server (unshare -m), gone with it.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work=$(mktemp -d "$INFERD_SCRATCH/kv_faults.XXXXXX")
pid=
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Bad flags: one line on stderr naming the flag, exit 2, before any model load.
for c in "--kv-tier|bogus|expected ram:SIZE" "--kv-tier|ram:12parsecs|unknown unit" \
    "--kv-tier|disk:$work/d:0B|above 0" "--kv-tier|redis://|expected redis://" \
    "--kv-evict|lfu|expected slru or lru" "--kv-admit|prompt:0|expected prompt:N" \
    "--kv-admit|sometimes|expected all, seen or prompt:N"; do
    IFS='|' read -r flag val want <<<"$c"
    set +e; err=$("$INFERD_BIN" serve -m "$m" --port 0 --data-dir "$work/data" "$flag" "$val" 2>&1 >/dev/null)
    rc=$?; set -e
    if [ "$rc" = 2 ] && [ "$(echo "$err" | wc -l)" = 1 ] && [[ "$err" == *"$flag"* ]] &&
        [[ "$err" == *"$want"* ]]; then ok "$flag '$val' refused: $err"
    else fail "$flag '$val': exit $rc: $err"; fi
done

if ! unshare -m sh -c "mount -t tmpfs -o size=64k tmpfs '$work'" 2>/dev/null; then
    echo "skip disk-full and unwritable-directory tests: this machine cannot mount a tmpfs in a private"
    echo "     mount namespace (unshare -m needs CAP_SYS_ADMIN)"
    finish
    exit $?
fi

mnt="$work/mnt"; mkdir -p "$mnt"
# start: the server in its own mount namespace with a 512 KiB tmpfs on $mnt
# (about 30 block records of the tiny model) as the disk tier, claimed 64 MiB;
# without the capabilities that let root write where the mode says no, so
# that a directory's mode is what makes it unwritable.
start() {
    rm -f "$work/port"
    unshare -m bash -c "mount -t tmpfs -o size=512k tmpfs '$mnt' && exec setpriv \
        --bounding-set=-dac_override,-dac_read_search -- '$INFERD_BIN' serve \
        -m '$m' --name tiny --port 0 --port-file '$work/port' --data-dir '$work/data' \
        --threads 2 --ctx 512 --kv-tier 'disk:$mnt/kv:64MiB'" >>"$work/serve.log" 2>&1 &
    pid=$!
    wait_port "$pid" "$work/port" "$work/serve.log"
}
# ask SEED: a completion of 200 prompt token ids (12 full blocks); prints the HTTP status.
ask() {
    curl -s -o /dev/null -w '%{http_code}' --max-time 60 "http://127.0.0.1:$port/v1/completions" \
        -H 'Content-Type: application/json' -d "$($PY -c "
import json, sys
s = int(sys.argv[1])
print(json.dumps({'model': 'tiny', 'max_tokens': 2, 'temperature': 0,
                  'prompt': [(s * 7919 + i * 104729) % 150 + 10 for i in range(200)]}))" "$1")"
}
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
drained() { # waits (bounded) until the tier's writes and failed writes stop changing
    local last= now= same=0
    for _ in $(seq 1 100); do
        now="$(metric 'inferd_kv_tier_written_bytes_total{tier="disk"}') $(metric 'inferd_kv_tier_put_errors_total{tier="disk"}')"
        if [ "$now" = "$last" ]; then same=$((same + 1)); [ "$same" -ge 3 ] && return 0; else same=0; fi
        last=$now
        sleep 0.2
    done
}

start || { fail "server on a tmpfs"; finish; exit 1; }
codes=""
for s in $(seq 1 6); do codes+=$(ask "$s"); drained; done
errs=$(metric 'inferd_kv_tier_put_errors_total{tier="disk"}')
used=$(metric 'inferd_kv_tier_used_bytes{tier="disk"}')
if [ "$codes" = "200200200200200200" ] && [ "${errs:-0}" -ge 1 ] &&
    grep -q "the filesystem is full" "$work/serve.log" && [ "${used:-0}" -le 524288 ]; then
    ok "disk full: 6 requests 200, $errs puts failed, tier keeps to $used bytes, logged"
else
    fail "disk full: codes $codes, put errors ${errs:-none}, used ${used:-none}"
    grep "kv tier" "$work/serve.log" >&2 || true
fi
# after the retry interval the tier writes again, evicting within what fitted
sleep 11
before=$(metric 'inferd_kv_tier_written_bytes_total{tier="disk"}')
codes=$(ask 7)
drained
after=$(metric 'inferd_kv_tier_written_bytes_total{tier="disk"}')
if [ "$codes" = 200 ] && [ "${after:-0}" -gt "${before:-0}" ] &&
    [ "$(metric 'inferd_kv_tier_writable{tier="disk"}')" = 1 ]; then
    ok "disk full, later: writes resume within what fitted ($before -> $after bytes written)"
else fail "disk full, later: code $codes, written $before -> $after"; fi

# unwritable while serving (mode a-w): puts stop (logged, writable 0), requests go on
nsenter -t "$pid" -m chmod -R a-w "$mnt/kv"
codes=""
for s in 8 9; do codes+=$(ask "$s"); drained; done
w=$(metric 'inferd_kv_tier_writable{tier="disk"}')
if [ "$codes" = "200200" ] && [ "$w" = 0 ] && grep -q "cannot write (.*[Pp]ermission denied" "$work/serve.log"
then ok "unwritable directory: requests 200, writable 0, logged"
else fail "unwritable directory: codes $codes, writable ${w:-none}"; grep "kv tier" "$work/serve.log" >&2 || true; fi
nsenter -t "$pid" -m chmod -R u+w "$mnt/kv"
sleep 11
codes=$(ask 10); drained
w=$(metric 'inferd_kv_tier_writable{tier="disk"}')
if [ "$codes" = 200 ] && [ "$w" = 1 ] && grep -q "writable again" "$work/serve.log"; then
    ok "directory writable again: the tier takes puts"
else fail "writable again: code $codes, writable ${w:-none}"; fi
grep "kv tier" "$work/serve.log" | tail -5 >&2
kill -TERM "$pid"; wait "$pid" 2>/dev/null || true; pid=
finish
