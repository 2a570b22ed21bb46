#!/usr/bin/env bash
# Requests that outlive their worker: a gateway in front of two workers,
# against `inferd serve` on the same model. A worker killed with SIGKILL in
# the middle of a stream, or stopped with SIGSTOP, has its request moved to
# the other worker from the tokens already streamed; the client's stream
# goes on with no token missing or repeated and equals the uninterrupted
# run bitwise (seeded sampling with penalties; JSON-schema output). With no
# worker left to move to, the stream ends with a clear error, counted. A
# gateway killed mid-stream loses only its own streams. The workers share a
# KV tier (a directory): a moved request's new worker takes from it the KV
# its old one wrote.
source "$(dirname "$0")/../lib.sh"
m=$(model q05-2l-q8_0-mig --preset qwen2.5-0.5b --layers 2 --type q8_0)
scratch migrate

# worker NAME [LISTEN]: sets $pid and $port.
worker() {
    local name=$1 listen=${2:-127.0.0.1:0}
    rm -f "$work/$name.port"
    "$INFERD_BIN" worker -m "$m" --listen "$listen" --port-file "$work/$name.port" \
        --threads 1 --ctx 1024 --name "$name" --kv-tier "shared:$work/kv:256MiB" -v \
        >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}
# gateway NAME: sets $gw_pid and $gw.
gateway() {
    front "$1" gateway -m "$m" --name s --ctx 1024 --workers "127.0.0.1:$wa_port,127.0.0.1:$wb_port"
    gw_pid=$pid; gw=$port
    in_rotation "$work/$1.log" 2 || true
}
worker wa; wa_pid=$pid; wa_port=$port
worker wb; wb_pid=$pid; wb_port=$port
gateway gw
front ref serve -m "$m" --name s --threads 1 --ctx 1024 --kv-tier none; ref=$port

# stream PORT CASE [MARK]: one streamed request of a fixed case; prints its
# canonical outcome (text, and each token's logprob and alternatives; or
# the error). With MARK, touches that file after the 40th token.
stream() {
    $PY - "$1" "$2" "${3:-}" <<'EOF'
import json, sys, urllib.request
port, case, mark = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if case == "seeded":
    path, body = "/v1/completions", {
        "model": "s", "prompt": [(i * 7919) % 5000 + 100 for i in range(40)], "max_tokens": 600,
        "temperature": 0.9, "top_p": 0.95, "seed": 5, "presence_penalty": 0.4,
        "frequency_penalty": 0.2, "repetition_penalty": 1.1, "logprobs": 2, "ignore_eos": True}
else:
    path, body = "/v1/chat/completions", {
        "model": "s", "max_tokens": 500, "temperature": 0.8, "seed": 9, "logprobs": True,
        "top_logprobs": 2,
        "messages": [{"role": "user", "content": "A record, please."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {
            "type": "object", "properties": {"name": {"type": "string"},
                                             "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["name", "tags"], "additionalProperties": False}}}}
body["stream"] = True
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
text, lps, n, err = "", [], 0, None
with urllib.request.urlopen(req, timeout=120) as r:
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: {"):
            continue
        d = json.loads(line[6:])
        if "error" in d:
            err = d["error"].get("message")
            continue
        for c in d.get("choices", []):
            text += c.get("text") or (c.get("delta") or {}).get("content") or ""
            lp = c.get("logprobs") or {}
            if "content" in lp:  # chat
                for t in lp["content"] or []:
                    lps.append([t["token"], t["logprob"], [x["logprob"] for x in t["top_logprobs"]]])
                    n += 1
            elif lp.get("tokens"):
                lps += [list(x) for x in zip(lp["tokens"], lp["token_logprobs"])]
                n += len(lp["tokens"])
        if mark and n >= 40:
            open(mark, "w").close()
            mark = ""
print(json.dumps({"error": err}) if err else json.dumps([text, lps]))
EOF
}
metric() {
    local met
    met=$(curl -sf "http://127.0.0.1:$gw/metrics" || true)
    awk -v k="$1" '$1 == k {print $2}' <<<"$met"
}
# which_worker BEFORE_A BEFORE_B: the worker whose log got a submit since
submits() { grep -c 'submitted: ' "$work/$1.log" || true; }

# move CASE SIGNAL: a stream whose worker gets SIGNAL after 40 tokens
move() {
    local case=$1 sig=$2 a0 b0 victim vpid
    a0=$(submits wa); b0=$(submits wb)
    rm -f "$work/mark"
    stream "$gw" "$case" "$work/mark" >"$work/moved.out" &
    local client=$!
    for _ in $(seq 1 500); do [ -f "$work/mark" ] && break; sleep 0.01; done
    if [ "$(submits wa)" -gt "$a0" ]; then victim=wa; vpid=$wa_pid; else victim=wb; vpid=$wb_pid; fi
    kill -STOP "$vpid" # frozen mid-stream
    [ "$sig" = KILL ] && kill -9 "$vpid"
    wait "$client"
    [ "$sig" = STOP ] && kill -CONT "$vpid"
    echo "$victim"
}

want=$(stream "$ref" seeded)
victim=$(move seeded KILL)
got=$(cat "$work/moved.out")
if [ -f "$work/mark" ] && [ "$got" = "$want" ] && [ "${#got}" -gt 2000 ] &&
    grep -q "moved from 127.0.0.1:.* after [1-9][0-9]* output tokens" "$work/gw.log"; then
    ok "migrate: $victim killed mid-stream: the stream went on on the other worker, bitwise the uninterrupted run (${#got} bytes)"
else
    fail "migrate: killed worker: ${got:0:300} / want ${want:0:200} / $(grep moved "$work/gw.log")"
fi
# the resumed request carried its output as prompt (the other worker's log)
if grep -q 'submitted: prompt=[0-9]* output=[1-9]' "$work"/w[ab].log; then
    ok "migrate: the new worker got the prompt + the streamed tokens as its prompt"
else
    fail "migrate: no resumed submit in the workers' logs"
fi
# the new worker read the prompt's and the streamed tokens' KV from the
# tier both share (the killed one wrote it as its blocks filled)
if grep -q 'kv tiers: request [0-9]*: \([3-9]\|[1-9][0-9]\+\) of [0-9]* blocks loaded' "$work"/w[ab].log; then
    ok "migrate: the new worker loaded the moved request's KV from the shared tier: $(grep -ho '\([3-9]\|[1-9][0-9]\+\) of [0-9]* blocks loaded' "$work"/w[ab].log | head -1)"
else
    fail "migrate: no shared-tier load on the new worker: $(grep -h 'kv tier' "$work"/w[ab].log | tail -3)"
fi
# the killed worker back on its port
if [ "$victim" = wa ]; then worker wa "127.0.0.1:$wa_port"; wa_pid=$pid; else worker wb "127.0.0.1:$wb_port"; wb_pid=$pid; fi
in_rotation "$work/gw.log" 3 || true

want=$(stream "$ref" json)
t0=$(date +%s%N)
victim=$(move json STOP)
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
got=$(cat "$work/moved.out")
if [ "$got" = "$want" ] && [ "${#got}" -gt 200 ] && grep -q "$victim.*silent\|silent" "$work/gw.log"; then
    ok "migrate: $victim stopped mid-stream: moved after its silence, JSON output bitwise the same ($dt ms)"
else
    fail "migrate: stopped worker: ${got:0:300} / want ${want:0:200}"
fi
moved=$(metric inferd_cluster_requests_moved_total)
lost=$(metric inferd_cluster_requests_lost_total)
[ "${moved:-0}" -ge 2 ] && [ "${lost:-1}" = 0 ] &&
    ok "migrate: the gateway counts $moved moved and $lost lost requests" ||
    fail "migrate: counters moved=$moved lost=$lost"

# nowhere to go: the other worker down too, the stream ends with an error
in_rotation "$work/gw.log" 4 || true
a0=$(submits wa); b0=$(submits wb)
rm -f "$work/mark"
stream "$gw" seeded "$work/mark" >"$work/lost.out" &
client=$!
for _ in $(seq 1 500); do [ -f "$work/mark" ] && break; sleep 0.01; done
if [ "$(submits wa)" -gt "$a0" ]; then kill -9 "$wb_pid"; kill -9 "$wa_pid"; else kill -9 "$wa_pid"; kill -9 "$wb_pid"; fi
wait "$client" || true
got=$(cat "$work/lost.out")
if grep -q '"error": "worker 127.0.0.1:[0-9]* lost' <<<"$got" &&
    [ "$(metric inferd_cluster_requests_lost_total)" = 1 ] && kill -0 "$gw_pid"; then
    ok "migrate: with no worker left the stream ends with a clear error, counted lost; the gateway lives"
else
    fail "migrate: nowhere to move: ${got:0:300}"
fi

# two gateways; one killed mid-stream: the other's stream is whole
worker wa "127.0.0.1:$wa_port"; wa_pid=$pid
worker wb "127.0.0.1:$wb_port"; wb_pid=$pid
g1_pid=$gw_pid; g1=$gw
in_rotation "$work/gw.log" 6 || true
gateway gw2
want=$(stream "$ref" seeded)
rm -f "$work/mark"
stream "$g1" seeded "$work/mark" >/dev/null 2>&1 &
c1=$!
stream "$gw" seeded >"$work/g2.out" &
c2=$!
for _ in $(seq 1 500); do [ -f "$work/mark" ] && break; sleep 0.01; done
kill -9 "$g1_pid"
wait "$c1" 2>/dev/null || true
wait "$c2"
got=$(cat "$work/g2.out")
sleep 0.3
if [ "$got" = "$want" ] && grep -q 'disconnected' "$work"/w[ab].log; then
    ok "migrate: a gateway killed mid-stream: the other gateway's stream is whole and the same"
else
    fail "migrate: gateway restart: ${got:0:200}"
fi
finish
