#!/usr/bin/env bash
# Prefill/decode disaggregation on loopback: a gateway in front of a prefill
# worker and a decode worker, against `inferd serve` on the same model. The
# decode worker takes each prompt's KV blocks from the prefill worker as they
# fill; completions (greedy and seeded, several choices, logprobs, streams
# of several hundred tokens), a streamed chat and JSON-schema output give
# bitwise the tokens and logprobs of the single process. Then the failures:
# a prefill worker that hangs (SIGSTOP) or is killed (SIGKILL) with a
# request waiting on it, and one whose engine differs (another model under
# the same file name): the decode worker computes the prompt itself, the
# output is the same, the counters say what happened.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen2-q8_0-pd --preset tiny --arch qwen2 --type q8_0)
scratch disagg

# worker NAME ROLE [MODEL]: sets $pid and $port.
worker() {
    local name=$1 role=$2 mdl=${3:-$m}
    rm -f "$work/$name.port"
    "$INFERD_BIN" worker -m "$mdl" --role "$role" --listen 127.0.0.1:0 \
        --port-file "$work/$name.port" --threads 1 --ctx 1024 --name "$name" \
        >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}

worker pf prefill; pf_pid=$pid; pf_port=$port
worker dc decode; dc_pid=$pid; dc_port=$port
front gw gateway -m "$m" --name tiny --ctx 1024 --local-prefill 0 \
    --workers "127.0.0.1:$pf_port,127.0.0.1:$dc_port"
gw_pid=$pid; gw=$port
front ref serve -m "$m" --name tiny --threads 1 --ctx 1024 --kv-tier none; ref=$port
in_rotation "$work/gw.log" 2 || true

# ask PORT CASE [SALT]: one request of a fixed case (canon.py); prints its canonical
# outcome (texts, tokens and logprobs of every choice; status for errors).
# SALT varies the prompt, so that no cache holds it yet.
ask() {
    $PY "$INFERD_SRC/tests/cluster/canon.py" "$1" "$2" 333 "$(out_of "$2")" "${3:-0}"
}
# out_of CASE: its output tokens (several hundred: long streams)
out_of() { case $1 in greedy) echo 400 ;; json) echo 200 ;; *) echo 300 ;; esac; }
# metric NAME POOL: a gateway pool series' value
metric() {
    local met
    met=$(curl -sf "http://127.0.0.1:$gw/metrics" || true)
    awk -v k="$1{pool=\"$2\"}" '$1 == k {print $2}' <<<"$met"
}

i=10
for case in greedy seeded chat json; do
    i=$((i + 1))
    a=$(ask "$gw" "$case" $i); b=$(ask "$ref" "$case" $i)
    if [ "$a" = "$b" ] && [ "${#a}" -gt 400 ] && [ "${a#status}" = "$a" ]; then
        ok "disagg: $case gives bitwise the output of inferd serve (${#a} bytes)"
    else
        fail "disagg: $case differs: ${a:0:300} vs ${b:0:300}"
    fi
done
# every one of them took its prompt's blocks from the prefill worker (the
# two choices of seeded each asked: they start together)
pulls=$(grep -c 'kv=done' "$work/dc.log" || true)
fallbacks=$(grep -c 'kv=fallback' "$work/dc.log" || true)
# (and attached them: the prompt's cached tokens are the blocks that came)
got=$(grep 'kv=done' "$work/dc.log" | grep -c 'cached=[1-9][0-9]* .*kv_got=[1-9]' || true)
sent=$(grep -c 'prefill kv_sent=[1-9]' "$work/pf.log" || true)
if [ "$pulls" -ge 4 ] && [ "$fallbacks" -eq 0 ] && [ "$got" -ge 4 ] && [ "$sent" -ge 4 ]; then
    ok "disagg: $pulls requests took their prompts' KV from the prefill worker ($sent prefills)"
else
    fail "disagg: pulls=$pulls fallbacks=$fallbacks got=$got sent=$sent"
fi
# a prompt the decode worker holds already is not asked for again
n0=$(grep -c 'kv_from=' "$work/dc.log" || true)
a=$(ask "$gw" greedy 11); b=$(ask "$ref" greedy 11)
n1=$(grep -c 'kv_from=' "$work/dc.log" || true)
[ "$a" = "$b" ] && [ "$n1" = "$n0" ] &&
    ok "disagg: a prompt the decode worker holds is not pulled again; same output" ||
    fail "disagg: repeated prompt pulled ($n0 -> $n1)"
sleep 0.6 # a STATS round
recv=$(metric inferd_pool_kv_blocks_received_total decode)
psent=$(metric inferd_pool_kv_blocks_sent_total prefill)
if [ "${recv:-0}" -gt 0 ] && [ "$recv" = "$psent" ] &&
    [ "$(metric inferd_pool_workers prefill)" = 1 ] &&
    [ "$(metric inferd_pool_kv_pull_fallbacks_total decode)" = 0 ]; then
    ok "disagg: the gateway's pool metrics: $psent blocks sent by prefill, $recv received by decode"
else
    fail "disagg: pool metrics: sent=$psent received=$recv"
fi

# A prefill worker that hangs with a request waiting on it: the decode worker
# hears nothing for 2.5 s and computes the prompt itself; same output.
kill -STOP "$pf_pid"
t0=$(date +%s%N)
a=$(ask "$gw" greedy 1); b=$(ask "$ref" greedy 1)
dt=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$a" = "$b" ] && [ "${#a}" -gt 400 ] && grep -q 'prefill worker .*: silent for 2.5 s' "$work/dc.log"; then
    ok "disagg: a stopped prefill worker: the decode worker computed the prompt, same output ($dt ms)"
else
    fail "disagg: stopped prefill worker: ${a:0:200} / $(tail -3 "$work/dc.log")"
fi
kill -CONT "$pf_pid"

# Killed while a request waits on it (stopped first, so that the request is
# surely in its hands): the connection drops, the decode worker goes on.
for _ in $(seq 1 50); do grep -q "127.0.0.1:$pf_port.*in rotation" "$work/gw.log" && break; sleep 0.1; done
sleep 0.6
kill -STOP "$pf_pid"
ask "$gw" seeded 2 >"$work/killed.out" &
asker=$!
sleep 1 # the request reaches the prefill worker's socket; its silence is not 2.5 s yet
kill -9 "$pf_pid"
wait "$asker"
a=$(cat "$work/killed.out"); b=$(ask "$ref" seeded 2)
if [ "$a" = "$b" ] && [ "${#a}" -gt 400 ] &&
    grep -q 'kv=fallback: peer lost' "$work/dc.log"; then
    ok "disagg: a prefill worker killed with a request on it: computed by the decode worker, same output"
else
    fail "disagg: killed prefill worker: ${a:0:200} / $(tail -3 "$work/dc.log")"
fi
# no prefill worker left: requests go to the decode worker whole
for _ in $(seq 1 40); do grep -q "worker 127.0.0.1:$pf_port: " "$work/gw.log" && break; sleep 0.1; done
a=$(ask "$gw" json 3); b=$(ask "$ref" json 3)
[ "$a" = "$b" ] && [ "${#a}" -gt 40 ] &&
    ok "disagg: with no prefill worker the decode worker serves whole requests" ||
    fail "disagg: no prefill worker: ${a:0:200}"
fb=$(metric inferd_pool_kv_pull_fallbacks_total decode)
[ "${fb:-0}" -ge 2 ] && ok "disagg: the gateway counts $fb pull fallbacks" ||
    fail "disagg: fallbacks metric '$fb'"

# A prefill worker with another engine under the same file name: the decode
# worker refuses its blocks (fingerprint), computes the prompt, same output.
mkdir -p "$work/other"
"$INFERD_BIN" model make --preset tiny --arch qwen2 --type q8_0 --seed 99 \
    -o "$work/other/$(basename "$m")" >/dev/null
worker pf2 prefill "$work/other/$(basename "$m")"; pf2_port=$port
# the gateway takes it from a second gateway's list: restart ours with it
kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true
front gw2 gateway -m "$m" --name tiny --ctx 1024 --local-prefill 0 \
    --workers "127.0.0.1:$pf2_port,127.0.0.1:$dc_port"
gw_pid=$pid; gw=$port
in_rotation "$work/gw2.log" 2 || true
a=$(ask "$gw" chat 4); b=$(ask "$ref" chat 4)
if [ "$a" = "$b" ] && [ "${#a}" -gt 400 ] &&
    grep -q 'another engine fingerprint.*refused' "$work/dc.log"; then
    ok "disagg: a prefill worker with another engine is refused; the output is the same"
else
    fail "disagg: foreign prefill worker: ${a:0:200} / $(grep -c fingerprint "$work/dc.log")"
fi

# Two prefill workers: the first choice hangs with the request on it, the
# decode worker goes on with the second from the first block it lacks;
# every block comes from a prefill worker, none is computed by the decoder.
worker pa prefill; pa_pid=$pid; pa_port=$port
worker pb prefill; pb_port=$port
kill "$gw_pid"; wait "$gw_pid" 2>/dev/null || true
front gw3 gateway -m "$m" --name tiny --ctx 1024 --local-prefill 0 \
    --workers "127.0.0.1:$pa_port,127.0.0.1:$pb_port,127.0.0.1:$dc_port"
gw_pid=$pid; gw=$port
in_rotation "$work/gw3.log" 3 || true
kill -STOP "$pa_pid"
a=$(ask "$gw" greedy 5); b=$(ask "$ref" greedy 5)
kill -CONT "$pa_pid"
line=$(grep 'kv_from=' "$work/dc.log" | tail -1)
if [ "$a" = "$b" ] && [ "${#a}" -gt 400 ] && grep -q "kv_from=127.0.0.1:$pb_port .*kv=done" <<<"$line" &&
    grep -q "asking prefill worker 127.0.0.1:$pb_port for blocks" "$work/dc.log"; then
    ok "disagg: the first prefill worker hung: the second sent the blocks, same output"
else
    fail "disagg: second prefill worker: ${a:0:100} / $line"
fi
finish
