#!/usr/bin/env bash
# KV tiers end to end through `inferd serve`: a prompt whose prefix comes
# back from the RAM tier, the disk tier after a restart (also after kill -9),
# a shared directory written by another server process, and a real Redis
# server gives bitwise the tokens and logprobs of recomputing it. Then the
# faults: corrupt files on disk and Redis stopped under load are misses,
# never errors or other output.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
scratch kv_tiers

# start NAME ARGS...: a server in the background; sets $port.
start() {
    local name=$1; shift
    rm -f "$work/$name.port"
    "$INFERD_BIN" serve -m "$m" --name tiny --port 0 --port-file "$work/$name.port" \
        --data-dir "$work/data-$name" --threads 2 --ctx 512 -v "$@" >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}
stop() { kill -TERM "$1"; wait "$1" 2>/dev/null || true; }

# ask PORT SEED: completes prompt number SEED (200 token ids, 12 full
# blocks); prints the tokens and logprobs as one canonical line.
ask() {
    $PY - "$1" "$2" <<'EOF'
import json, sys, urllib.request
port, seed = int(sys.argv[1]), int(sys.argv[2])
prompt = [(seed * 7919 + i * 104729) % 150 + 10 for i in range(200)]
body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 8, "temperature": 0.8,
                   "seed": 5, "logprobs": 2, "ignore_eos": True}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                             {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=60))
lp = r["choices"][0]["logprobs"]
print(json.dumps({"tokens": lp["tokens"], "logprobs": lp["token_logprobs"],
                  "top": lp["top_logprobs"]}, sort_keys=True))
EOF
}
# served LOG TIER: the blocks TIER served according to the last request line.
served() { grep -o "kv_tier_blocks=[a-z0-9:,]*" "$1" | tail -1 | grep -o "$2:[0-9]*" | cut -d: -f2; }
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v k="$2" '$1 == k {print $2}'; }

# The reference: no tiers, every block computed.
start ref --kv-tier none || { fail "reference server"; finish; exit 1; }
want=$(ask "$port" 1)
[ -n "$want" ] && ok "reference answer" || fail "reference answer"
stop "$pid"

# RAM tier: a pool of 40 blocks; three other prompts push prompt 1's blocks
# out of it (write-back to RAM), then prompt 1 comes back from RAM.
start ram --kv-tier ram:64MiB --kv-blocks 40 || { fail "ram server"; finish; exit 1; }
ask "$port" 1 >/dev/null
for s in 2 3 4; do ask "$port" "$s" >/dev/null; done
got=$(ask "$port" 1)
n=$(served "$work/ram.log" ram)
if [ "$got" = "$want" ] && [ "${n:-0}" -ge 6 ]; then ok "ram tier: $n blocks, bitwise equal"
else fail "ram tier: '${n:-0}' blocks served; equal: $([ "$got" = "$want" ] && echo yes || echo no)"; fi
stop "$pid"

# Disk tier, clean restart: the second server starts with an empty pool.
start disk --kv-tier "disk:$work/disk:256MiB" || { fail "disk server"; finish; exit 1; }
ask "$port" 1 >/dev/null
stop "$pid"
start disk --kv-tier "disk:$work/disk:256MiB" || { fail "disk server restart"; finish; exit 1; }
got=$(ask "$port" 1)
n=$(served "$work/disk.log" disk)
if [ "$got" = "$want" ] && [ "${n:-0}" -ge 10 ]; then ok "disk tier after restart: $n blocks, bitwise equal"
else fail "disk tier after restart: '${n:-0}' blocks; equal: $([ "$got" = "$want" ] && echo yes || echo no)"; fi

# kill -9 while prompt 2's blocks are being written, then restart: starts,
# serves, equal output (whatever survived is verified before use).
ask "$port" 2 >/dev/null &
sleep 0.3
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
start disk --kv-tier "disk:$work/disk:256MiB" || { fail "disk server after kill -9"; finish; exit 1; }
got=$(ask "$port" 1)
[ "$got" = "$want" ] && ok "disk tier after kill -9: serves, bitwise equal" || fail "disk tier after kill -9"
stop "$pid"

# Corrupt files: flip a byte in the middle of every block file, restart:
# each is a counted miss (corrupt), the answer is still the recomputed one.
$PY - "$work/disk" <<'EOF'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(root, f)
        n = os.path.getsize(p)
        if n > 4096:
            with open(p, "r+b") as fh:
                fh.seek(n // 2); b = fh.read(1); fh.seek(n // 2); fh.write(bytes([b[0] ^ 0x5a]))
EOF
start disk --kv-tier "disk:$work/disk:256MiB" || { fail "disk server with corrupt files"; finish; exit 1; }
got=$(ask "$port" 1)
bad=$(metric "$port" 'inferd_kv_tier_corrupt_total{tier="disk"}')
if [ "$got" = "$want" ] && [ "${bad:-0}" -ge 1 ]; then ok "corrupt disk files: $bad dropped, bitwise equal"
else fail "corrupt disk files: corrupt=${bad:-none}; equal: $([ "$got" = "$want" ] && echo yes || echo no)"; fi
stop "$pid"

# Shared directory: server A publishes, server B (another process, its own
# pool and data dir) hits.
start sharedA --kv-tier "shared:$work/shared:256MiB" || { fail "shared server A"; finish; exit 1; }
pidA=$pid
ask "$port" 1 >/dev/null
sleep 0.5
start sharedB --kv-tier "shared:$work/shared:256MiB" || { fail "shared server B"; finish; exit 1; }
got=$(ask "$port" 1)
n=$(served "$work/sharedB.log" shared)
if [ "$got" = "$want" ] && [ "${n:-0}" -ge 10 ]; then ok "shared tier across processes: $n blocks, bitwise equal"
else fail "shared tier: '${n:-0}' blocks; equal: $([ "$got" = "$want" ] && echo yes || echo no)"; fi
stop "$pid"; stop "$pidA"

# Redis: a real redis-server on a Unix socket in the scratch directory.
sock="$work/redis.sock"
start_redis || { fail "redis-server did not start"; finish; exit 1; }
start redis --kv-tier "redis+unix://$sock" || { fail "redis server"; finish; exit 1; }
ask "$port" 1 >/dev/null
sleep 0.5
stop "$pid"
start redis --kv-tier "redis+unix://$sock" || { fail "redis server restart"; finish; exit 1; }
got=$(ask "$port" 1)
n=$(served "$work/redis.log" redis)
if [ "$got" = "$want" ] && [ "${n:-0}" -ge 10 ]; then ok "redis tier: $n blocks, bitwise equal"
else fail "redis tier: '${n:-0}' blocks; equal: $([ "$got" = "$want" ] && echo yes || echo no)"; fi

# Redis stopped under load, then back: no client error, hits resume.
errs=0
kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; redis_pid=
for s in 5 6 1; do ask "$port" "$s" >/dev/null || errs=$((errs + 1)); done
got=$(ask "$port" 1) || errs=$((errs + 1))
[ "$errs" -eq 0 ] && [ "$got" = "$want" ] && ok "redis down: no client error, same output" ||
    fail "redis down: $errs client errors"
start_redis || fail "redis-server restart"
sleep 6 # past the reconnect backoff's ceiling
ask "$port" 7 >/dev/null; sleep 0.5
stop "$pid"
start redis --kv-tier "redis+unix://$sock" || { fail "redis server restart 2"; finish; exit 1; }
ask "$port" 7 >/dev/null
n=$(served "$work/redis.log" redis)
[ "${n:-0}" -ge 10 ] && ok "redis back: hits resume ($n blocks)" || fail "redis back: '${n:-0}' blocks"
stop "$pid"

finish
