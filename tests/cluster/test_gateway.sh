#!/usr/bin/env bash
# `inferd gateway` in front of two `inferd worker` processes on loopback,
# against `inferd serve` on the same model: completions (greedy and seeded,
# several choices, logprobs), a streamed chat and JSON-schema output give
# bitwise the same tokens and logprobs through the gateway. Then the
# failures: a worker killed with -9 leaves the other serving; with none
# left a request is a clean 503 and the gateway lives on; a worker started
# again on its port is back in rotation; a worker serving another model is
# refused; bad --workers lists and an unknown --policy exit 2.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen2-q8_0-gw --preset tiny --arch qwen2 --type q8_0)
scratch gateway

# worker NAME [LISTEN] [MODEL]: sets $pid and $port.
worker() {
    local name=$1 listen=${2:-127.0.0.1:0} mdl=${3:-$m}
    rm -f "$work/$name.port"
    "$INFERD_BIN" worker -m "$mdl" --listen "$listen" --port-file "$work/$name.port" \
        --threads 1 --ctx 512 --name "$name" >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}

worker wa; wa_pid=$pid; wa_port=$port
worker wb; wb_pid=$pid; wb_port=$port
front gw gateway -m "$m" --name tiny --ctx 512 --workers "127.0.0.1:$wa_port,127.0.0.1:$wb_port"
gw_pid=$pid; gw=$port
front ref serve -m "$m" --name tiny --threads 1 --ctx 512 --kv-tier none; ref=$port

# both workers in rotation (HELLO done) before the comparisons
in_rotation "$work/gw.log" 2 || true

# ask PORT CASE: one request of a fixed case; prints its canonical outcome
# (texts, tokens and logprobs of every choice; status for errors).
ask() {
    $PY "$INFERD_SRC/tests/cluster/canon.py" "$1" "$2" 120 "$(out_of "$2")" 0
}
out_of() { case $1 in greedy) echo 200 ;; seeded) echo 64 ;; chat) echo 48 ;; *) echo 60 ;; esac; }

for case in greedy seeded chat json; do
    a=$(ask "$gw" "$case"); b=$(ask "$ref" "$case")
    if [ "$a" = "$b" ] && [ "${#a}" -gt 40 ] && [ "${a#status}" = "$a" ]; then
        ok "gateway: $case gives bitwise the output of inferd serve"
    else
        fail "gateway: $case differs: ${a:0:300} vs ${b:0:300}"
    fi
done
# one trace across the hops: the client's traceparent, else the request id
tid=4bf92f3577b34da6a3ce929d0e0e4736
curl -s "http://127.0.0.1:$gw/v1/completions" -H 'content-type: application/json' \
    -H "traceparent: 00-$tid-00f067aa0ba902b7-01" \
    -d '{"model":"tiny","prompt":[5,9,14],"max_tokens":3}' >/dev/null
rid=$(curl -s -D - -o /dev/null "http://127.0.0.1:$gw/v1/completions" \
    -H 'content-type: application/json' -d '{"model":"tiny","prompt":[5,9,14],"max_tokens":3}' |
    tr -d '\r' | awk -F': ' 'tolower($1) == "x-request-id" {print $2}')
sleep 0.2
if grep -q "traceparent=00-$tid-" "$work"/w[ab].log && [ -n "$rid" ] &&
    grep -q "traceparent=00-$rid-" "$work"/w[ab].log && grep -q "id=$rid" "$work/gw.log"; then
    ok "gateway: the trace id reaches the worker's log (client's traceparent; else the request id)"
else
    fail "gateway: trace ids: rid=$rid; $(grep -h traceparent "$work"/w[ab].log | tail -2)"
fi
met=$(curl -sf "http://127.0.0.1:$gw/metrics" || true) # whole, then grep: no SIGPIPE under pipefail
if grep -q '^inferd_num_requests_running' <<<"$met" &&
    grep -q '^inferd_engine_steps_total [1-9]' <<<"$met"; then
    ok "gateway: /metrics answers with the workers' gauges and counters"
else
    fail "gateway: /metrics"
fi

# a worker that hangs (SIGSTOP) is out of rotation within 3 s; the other serves
kill -STOP "$wb_pid"
t0=$(date +%s%N)
for _ in $(seq 1 40); do
    grep -q "worker 127.0.0.1:$wb_port: silent" "$work/gw.log" && break
    sleep 0.1
done
dt=$(( ($(date +%s%N) - t0) / 1000000 ))  # ms
good=0
for _ in 1 2 3; do [ "$(ask "$gw" seeded)" = "$(ask "$ref" seeded)" ] && good=$((good + 1)); done
if grep -q "worker 127.0.0.1:$wb_port: silent" "$work/gw.log" && [ "$dt" -lt 3500 ] &&
    [ "$good" -eq 3 ]; then
    ok "gateway: a stopped worker is out of rotation after $dt ms; the other serves 3 of 3"
else
    fail "gateway: stopped worker: out after $dt ms, $good of 3 served"
fi
kill -CONT "$wb_pid"
for _ in $(seq 1 50); do
    [ "$(grep -c "worker 127.0.0.1:$wb_port (wb, mixed) in rotation" "$work/gw.log" || true)" -ge 2 ] && break
    sleep 0.1
done

# a worker killed with -9: the other serves every request
kill -9 "$wa_pid"; wait "$wa_pid" 2>/dev/null || true
good=0
for _ in 1 2 3 4; do
    r=$(ask "$gw" greedy)
    [ "$r" = "$(ask "$ref" greedy)" ] && good=$((good + 1))
done
if [ "$good" -eq 4 ]; then ok "gateway: one worker killed, the other serves all 4 requests"
else fail "gateway: $good of 4 requests served after a worker was killed"; fi

# none left: a clean 503, the gateway lives on
kill -9 "$wb_pid"; wait "$wb_pid" 2>/dev/null || true
sleep 0.3
r=$(ask "$gw" greedy)
if [ "$r" = "status 503 server_error" ] || [ "${r:0:10}" = "status 503" ]; then
    ok "gateway: no worker left is a 503 ($r)"
else
    fail "gateway: no worker left gave: ${r:0:200}"
fi
kill -0 "$gw_pid" && ok "gateway: still running" || fail "gateway: died"

# a worker started again on its port is back within a few seconds
worker wa2 "127.0.0.1:$wa_port"
back=
for _ in $(seq 1 50); do
    r=$(ask "$gw" greedy)
    if [ "${r:0:6}" != "status" ]; then back=1; break; fi
    sleep 0.2
done
if [ -n "$back" ] && [ "$r" = "$(ask "$ref" greedy)" ]; then
    ok "gateway: a restarted worker is back in rotation, same output"
else
    fail "gateway: the restarted worker did not come back: ${r:0:200}"
fi

# a worker of another model is refused
other="$work/other.gguf"
cp "$m" "$other"
worker wo 127.0.0.1:0 "$other"
wo_port=$port
"$INFERD_BIN" gateway -m "$m" --name tiny --workers "127.0.0.1:$wo_port" --port 0 \
    --port-file "$work/gw2.port" --data-dir "$work/gw2-data" >>"$work/gw2.log" 2>&1 &
gw2_pid=$!; pids+=("$gw2_pid")
wait_port "$gw2_pid" "$work/gw2.port" "$work/gw2.log"; gw2=$port
sleep 0.5
r=$(ask "$gw2" greedy)
if [ "${r:0:10}" = "status 503" ] && grep -q "serves 'other.gguf'" "$work/gw2.log"; then
    ok "gateway: a worker serving another model is refused"
else
    fail "gateway: another model's worker: ${r:0:200}"
fi

# a mock worker (no engine) answers at once through a gateway
rm -f "$work/wm.port"
"$INFERD_BIN" worker --mock -m "$m" --listen 127.0.0.1:0 --port-file "$work/wm.port" \
    >>"$work/wm.log" 2>&1 &
wm_pid=$!; pids+=("$wm_pid")
wait_port "$wm_pid" "$work/wm.port" "$work/wm.log"; wm_port=$port
"$INFERD_BIN" gateway -m "$m" --name tiny --ctx 512 --workers "127.0.0.1:$wm_port" --port 0 \
    --port-file "$work/gw3.port" --data-dir "$work/gw3-data" >>"$work/gw3.log" 2>&1 &
gw3_pid=$!; pids+=("$gw3_pid")
wait_port "$gw3_pid" "$work/gw3.port" "$work/gw3.log"; gw3=$port
for _ in $(seq 1 50); do grep -q 'in rotation' "$work/gw3.log" && break; sleep 0.1; done
r=$(curl -s "http://127.0.0.1:$gw3/v1/completions" -H 'content-type: application/json' \
    -d '{"model":"tiny","prompt":[5,9,14],"max_tokens":5,"stream":true}')
if [ "$(echo "$r" | grep -c '"text"')" -ge 5 ] && grep -q '"finish_reason":"length"' <<<"$r"; then
    ok "gateway: a mock worker streams its 5 tokens"
else
    fail "gateway: mock worker: ${r:0:300}"
fi

# bad --workers: one line, exit 2
for bad in "nohost" "127.0.0.1:0" "127.0.0.1:99999" "1.2.3:80" ","; do
    set +e
    out=$("$INFERD_BIN" gateway -m "$m" --workers "$bad" 2>&1)
    rc=$?
    set -e
    if [ "$rc" -eq 2 ] && [ "$(echo "$out" | wc -l)" -eq 1 ] && grep -q -- --workers <<<"$out"; then
        ok "gateway: --workers '$bad' refused: $out"
    else
        fail "gateway: --workers '$bad': rc=$rc $out"
    fi
done
set +e
out=$("$INFERD_BIN" gateway -m "$m" --workers 127.0.0.1:1 --policy random 2>&1); rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q -- "--policy 'random'" <<<"$out" &&
    ok "gateway: --policy 'random' refused: $out" || fail "gateway: --policy random: rc=$rc $out"
finish
