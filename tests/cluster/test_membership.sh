#!/usr/bin/env bash
# Cluster membership in a real Redis (started here on a Unix socket):
# workers announce themselves with keys that expire, a gateway given only
# --redis finds them and serves through both; a worker that hangs (SIGSTOP)
# is out of rotation within 3 s and back once it resumes; Redis stopped
# leaves the gateway serving with the workers it knows, and after a restart
# a worker that stops cleanly (SIGTERM) leaves at once; a bad --redis URL
# exits 2.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen2-q8_0-gw --preset tiny --arch qwen2 --type q8_0)
scratch members

sock="$work/redis.sock"
start_redis || { fail "redis-server did not start"; finish; exit 1; }

worker() {
    local name=$1
    rm -f "$work/$name.port"
    "$INFERD_BIN" worker -m "$m" --listen 127.0.0.1:0 --port-file "$work/$name.port" \
        --threads 1 --ctx 512 --name "$name" --redis "unix:$sock" >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}
worker wa; wa_pid=$pid; wa_port=$port
worker wb; wb_pid=$pid; wb_port=$port
"$INFERD_BIN" gateway -m "$m" --name tiny --ctx 512 --redis "unix:$sock" --port 0 \
    --port-file "$work/gw.port" --data-dir "$work/gw-data" >>"$work/gw.log" 2>&1 &
gw_pid=$!; pids+=("$gw_pid")
wait_port "$gw_pid" "$work/gw.port" "$work/gw.log"; gw=$port

# wait_log PATTERN [N] [TENTHS]: until the gateway's log has N lines matching
wait_log() {
    local pat=$1 n=${2:-1} t=${3:-50}
    for _ in $(seq 1 "$t"); do
        [ "$(grep -c -- "$pat" "$work/gw.log" || true)" -ge "$n" ] && return 0
        sleep 0.1
    done
    return 1
}

# ask: a short greedy completion through the gateway; prints "ok N" or the status
ask() {
    $PY - "$gw" <<'EOF'
import json, sys, urllib.request, urllib.error
body = {"model": "tiny", "prompt": [5, 9, 14, 2, 77], "max_tokens": 6, "temperature": 0,
        "ignore_eos": True}
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/completions",
                             json.dumps(body).encode(), {"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print("ok", json.loads(r.read())["usage"]["completion_tokens"])
except urllib.error.HTTPError as e:
    print("status", e.code)
EOF
}
served() { local good=0; for _ in $(seq 1 "$1"); do [ "$(ask)" = "ok 6" ] && good=$((good + 1)); done; echo "$good"; }

if wait_log "in rotation" 2 && [ "$(served 4)" = 4 ]; then
    ok "membership: the gateway found both workers in Redis and serves"
else
    fail "membership: workers not found: $(cat "$work/gw.log" | tail -5)"
fi
keys=$(redis-cli -s "$sock" --scan --pattern 'inferd:workers:*' | wc -l)
[ "$keys" -eq 2 ] && ok "membership: two keys in Redis" || fail "membership: $keys keys"

# a hung worker: out of rotation within 3 s, back when it resumes
kill -STOP "$wb_pid"
t0=$(date +%s%N)
wait_log "worker 127.0.0.1:$wb_port\( left\|: silent\)" 1 40 || true
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
if grep -q "worker 127.0.0.1:$wb_port\( left\|: silent\)" "$work/gw.log" && [ "$dt" -lt 3500 ] &&
    [ "$(served 3)" = 3 ]; then
    ok "membership: a stopped worker is out of rotation after $dt ms; the other serves"
else
    fail "membership: stopped worker: $dt ms"
fi
kill -CONT "$wb_pid"
if wait_log "worker 127.0.0.1:$wb_port (wb, mixed) in rotation" 2 60; then
    ok "membership: the resumed worker is back in rotation"
else
    fail "membership: the resumed worker did not come back"
fi

# Redis away: the gateway keeps serving with the workers it knows
kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; redis_pid=
sleep 1
if [ "$(served 4)" = 4 ] && kill -0 "$gw_pid"; then
    ok "membership: Redis down, the gateway serves with the workers it knows"
else
    fail "membership: Redis down broke serving"
fi
start_redis || fail "redis-server restart"
sleep 3 # the workers announce again after their backoff
keys=$(redis-cli -s "$sock" --scan --pattern 'inferd:workers:*' | wc -l)
[ "$keys" -eq 2 ] && ok "membership: both workers announced again after the restart" ||
    fail "membership: $keys keys after the restart"

# a clean stop withdraws at once
kill -TERM "$wa_pid"
t0=$(date +%s%N)
wait_log "worker 127.0.0.1:$wa_port\( left\|: connection closed\)" 1 30 || true
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$wa_pid" 2>/dev/null || true
nkeys() { redis-cli -s "$sock" --scan --pattern 'inferd:workers:*' | wc -l; }
for _ in $(seq 1 30); do [ "$(nkeys)" -eq 1 ] && break; sleep 0.1; done
if [ "$dt" -lt 1500 ] && [ "$(served 3)" = 3 ] && [ "$(nkeys)" -eq 1 ]; then
    ok "membership: a worker stopped with SIGTERM leaves in $dt ms, its key deleted"
else
    fail "membership: SIGTERM'd worker: $dt ms"
fi

for bad in "redis://nohost" "http://x:1" "unix:relative"; do
    set +e
    out=$("$INFERD_BIN" gateway -m "$m" --redis "$bad" 2>&1); rc=$?
    set -e
    if [ "$rc" -eq 2 ] && grep -q -- '--redis' <<<"$out"; then ok "membership: --redis '$bad' refused"
    else fail "membership: --redis '$bad': rc=$rc $out"; fi
done
finish
