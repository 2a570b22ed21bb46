#!/usr/bin/env bash
# The global prefix index on loopback: two mixed workers send their KV
# events to two gateways (which list the workers in opposite orders, so an
# idle tie goes to a different worker on each). A prompt cached on one
# worker is routed there by either gateway - the one that did not place it
# too - and a gateway started after the fact learns the workers' caches
# from their replay. Early rejection: with latency targets no placement can
# meet, a long prompt gets 429 with a Retry-After; a short one with room is
# served; /metrics counts both and shows the index and the balance gauge.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen2-q8_0-px --preset tiny --arch qwen2 --type q8_0)
scratch prefix_index

# worker NAME: sets $pid and $port.
worker() {
    local name=$1
    rm -f "$work/$name.port"
    "$INFERD_BIN" worker -m "$m" --role mixed --listen 127.0.0.1:0 --port-file "$work/$name.port" \
        --threads 1 --ctx 1024 --name "$name" >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}
worker A; a_port=$port
worker B; b_port=$port
front g1 gateway -m "$m" --name tiny --ctx 1024 --workers "127.0.0.1:$a_port,127.0.0.1:$b_port"
g1_pid=$pid; g1=$port
front g2 gateway -m "$m" --name tiny --ctx 1024 --workers "127.0.0.1:$b_port,127.0.0.1:$a_port"
g2=$port
in_rotation "$work/g1.log" 2 || true
in_rotation "$work/g2.log" 2 || true

# ask PORT SALT TRACE: a 300-token completion prompt (distinct per salt), 4
# tokens out, tagged with a trace id the worker logs
ask() {
    $PY - "$1" "$2" "$3" <<'PY'
import json, sys, urllib.request, urllib.error
port, salt, trace = sys.argv[1], int(sys.argv[2]), sys.argv[3]
prompt = [(7919 * (salt + 1) + i * 104729) % 150 + 10 for i in range(300)]
body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
    {"Content-Type": "application/json",
     "traceparent": "00-%032x-00000000000000aa-01" % int(trace)})
try:
    urllib.request.urlopen(req, timeout=60).read()
    print("200")
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("Retry-After"), json.loads(e.read())["error"]["message"])
PY
}
# on TRACE: the worker (A or B) whose log names the trace, with its cached count
on() {
    local t; t=$(printf '%032x' "$1")
    for n in A B; do
        l=$(grep "traceparent=00-$t" "$work/$n.log" | tail -1 || true)
        [ -n "$l" ] && { c=${l#*cached=}; echo "$n ${c%% *}"; return; }
    done
    echo "none"
}
# settle: events travel with the next wake of each worker; wait a little
settle() { sleep 0.5; }

r=$(ask "$g1" 1 101); settle
r=$(ask "$g2" 2 102); settle
p1=$(on 101); p2=$(on 102)
[ "${p1%% *}" = A ] && [ "${p2%% *}" = B ] &&
    ok "idle ties: g1 placed prompt 1 on A, g2 placed prompt 2 on B" ||
    fail "placement: prompt 1 on $p1, prompt 2 on $p2"
# each gateway routes the prompt the other placed to where it is cached
ask "$g1" 2 103 >/dev/null; ask "$g2" 1 104 >/dev/null; settle
x=$(on 103); y=$(on 104)
if [ "${x%% *}" = B ] && [ "${x#* }" -gt 0 ] && [ "${y%% *}" = A ] && [ "${y#* }" -gt 0 ]; then
    ok "both gateways route a prompt to the worker holding it (g1: $x cached, g2: $y cached)"
else
    fail "index routing: g1 sent prompt 2 to $x, g2 sent prompt 1 to $y"
fi
met=$(curl -sf "http://127.0.0.1:$g1/metrics" || true)
blocks=$(awk '$1 == "inferd_cluster_prefix_index_blocks" {print $2}' <<<"$met")
routed=$(awk '$1 == "inferd_cluster_routed_cached_blocks_total" {print $2}' <<<"$met")
[ "${blocks:-0}" -gt 0 ] && [ "${routed:-0}" -gt 0 ] &&
    ok "g1 /metrics: $blocks blocks indexed, $routed cached blocks routed to" ||
    fail "g1 index metrics: blocks=$blocks routed=$routed"

# a gateway restarted: it learns both caches from the workers' replay
kill -9 "$g1_pid"
front g3 gateway -m "$m" --name tiny --ctx 1024 --workers "127.0.0.1:$a_port,127.0.0.1:$b_port"
g3=$port
in_rotation "$work/g3.log" 2 || true
settle
ask "$g3" 2 105 >/dev/null; settle
z=$(on 105)
[ "${z%% *}" = B ] && [ "${z#* }" -gt 0 ] &&
    ok "a new gateway routes prompt 2 to B from the replayed state ($z cached)" ||
    fail "after restart: prompt 2 went to $z"

# early rejection: a TTFT target below what 300 prompt tokens cost on this
# machine, a TPOT target any decode step meets
front g4 gateway -m "$m" --name tiny --ctx 1024 --slo 5/100000 \
    --workers "127.0.0.1:$a_port,127.0.0.1:$b_port"
g4=$port
in_rotation "$work/g4.log" 2 || true
sleep 0.6 # a STATS round: the workers' measured costs
r=$(ask "$g4" 7 106)
set -- $r
if [ "$1" = 429 ] && [ "${2:-0}" -ge 1 ] && [[ "$r" == *"time to first token"* ]]; then
    ok "refused early: $r"
else fail "early rejection: $r"; fi
front g5 gateway -m "$m" --name tiny --ctx 1024 --slo completions=60000/60000 \
    --workers "127.0.0.1:$a_port,127.0.0.1:$b_port"
g5=$port
in_rotation "$work/g5.log" 2 || true
r=$(ask "$g5" 8 107)
[ "$r" = 200 ] && ok "a request its targets allow is served" || fail "generous targets: $r"
met=$(curl -sf "http://127.0.0.1:$g4/metrics" || true)
refused=$(awk '$1 == "inferd_cluster_requests_refused_total" {print $2}' <<<"$met")
[ "${refused:-0}" = 1 ] && ok "g4 counts 1 refused" || fail "refused counter: $refused"
sleep 5.5 # a balance window with work in it
ask "$g3" 9 108 >/dev/null; sleep 5.5
met=$(curl -sf "http://127.0.0.1:$g3/metrics" || true)
bal=$(awk '$1 == "inferd_pool_balance_efficiency{pool=\"mixed\"}" {print $2}' <<<"$met")
$PY -c "import sys; v=float(sys.argv[1]); assert 0 < v <= 1" "${bal:-0}" &&
    ok "balance efficiency of the mixed pool: $bal" || fail "balance gauge: '$bal'"

# bad targets are refused on the command line
set +e
err=$("$INFERD_BIN" gateway -m "$m" --workers "127.0.0.1:$a_port" --slo fast 2>&1 >/dev/null)
rc=$?
set -e
[ "$rc" = 2 ] && [[ "$err" == *"TTFT_MS/TPOT_MS"* ]] && ok "--slo fast: refused" ||
    fail "--slo fast: exit $rc: $err"
finish
