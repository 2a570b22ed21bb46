#!/usr/bin/env bash
# Hostile clients against `inferd serve` (hostile.py: smuggling, strict
# HTTP, CORS, slowloris, slow bodies, connection caps, a huge prompt and
# pathological grammars while /health is timed and streams run, slow
# readers), the store's limit and retention, then file-descriptor exhaustion: a server
# under a low `ulimit -n` flooded with connections pauses accepting instead
# of spinning or flooding its log, and serves again once they close.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work="$INFERD_SCRATCH/e2e_hostile.$$"
rm -rf "$work"
mkdir -p "$work"
pid=
pid2=
pid3=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    [ -n "$pid2" ] && kill "$pid2" 2>/dev/null
    [ -n "$pid3" ] && kill "$pid3" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

wait_port() {
    for _ in $(seq 1 300); do [ -s "$1" ] && break; sleep 0.1; done
    cat "$1"
}

"$INFERD_BIN" serve -m "$m" --port 0 --port-file "$work/port" --data-dir "$work/data" \
    --threads 2 --ctx 4096 --header-timeout 2 --body-timeout 2 --write-timeout 3 \
    --max-conns 96 --max-conns-per-client 48 --stream-buffer 65536 --max-body 16777216 \
    --max-headers 8192 >"$work/log" 2>&1 &
pid=$!
port=$(wait_port "$work/port")

if out=$(timeout 300 /usr/bin/python3 "$INFERD_SRC/tests/e2e/hostile.py" "$port" 2>&1); then
    ok "hostile clients: $(grep -c '^ok' <<<"$out") checks"
else
    echo "$out"
    tail -30 "$work/log"
    fail "hostile clients"
fi
# Every refusal's log line says why.
if grep -E ' 4[0-9][0-9] ' "$work/log" | grep -v 'error="' | grep -q .; then
    grep -E ' 4[0-9][0-9] ' "$work/log" | grep -v 'error="' | head -5
    fail "a 4xx log line without its reason"
else
    ok "every 4xx log line says why ($(grep -cE ' 4[0-9][0-9] ' "$work/log") lines)"
fi
kill -TERM "$pid"
wait "$pid" && ok "exit 0 after the attacks" || fail "exit status after the attacks"
pid=

# The store: an answer it cannot keep is an error, never a response the
# client believes stored; stored responses expire after --store-ttl.
"$INFERD_BIN" serve -m "$m" --port 0 --port-file "$work/port3" --data-dir "$work/data3" \
    --threads 2 --ctx 1024 --store-max-bytes 2048 --store-ttl 2 >"$work/log3" 2>&1 &
pid3=$!
port3=$(wait_port "$work/port3")
big=$(head -c 3000 /dev/zero | tr '\0' 'a')
code=$(curl -s -o "$work/big.json" -w '%{http_code}' "http://127.0.0.1:$port3/v1/responses" \
    -d "{\"input\":\"$big\",\"max_output_tokens\":2}")
if [ "$code" = 413 ] && grep -q 'could not be stored' "$work/big.json"; then
    ok "a response over --store-max-bytes is an error ($code), not a silent drop"
else
    cat "$work/big.json"; fail "store over its limit answered $code"
fi
curl -sN "http://127.0.0.1:$port3/v1/responses" \
    -d "{\"input\":\"$big\",\"max_output_tokens\":2,\"stream\":true}" >"$work/big.sse"
if grep -q '^event: error' "$work/big.sse" && ! grep -q 'response.completed' "$work/big.sse"; then
    ok "a streamed response over --store-max-bytes ends with an error event, not response.completed"
else
    tail -c 400 "$work/big.sse"; fail "streamed store error"
fi
id=$(curl -s "http://127.0.0.1:$port3/v1/responses" -d '{"input":"hi","max_output_tokens":2}' |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
c1=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port3/v1/responses/$id")
sleep 3
c2=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port3/v1/responses/$id")
[ "$c1" = 200 ] && [ "$c2" = 404 ] && ok "stored response served ($c1), expired after --store-ttl ($c2)" \
    || fail "retention: $c1 then $c2"
kill -TERM "$pid3"; wait "$pid3" && ok "store server exits 0" || fail "store server exit"
pid3=

# File descriptors run out: 64 allowed, 200 connections attempted.
(
    ulimit -n 64
    exec "$INFERD_BIN" serve -m "$m" --port 0 --port-file "$work/port2" \
        --data-dir "$work/data2" --threads 2 --ctx 512 >"$work/log2" 2>&1
) &
pid2=$!
port2=$(wait_port "$work/port2")
if timeout 60 /usr/bin/python3 - "$port2" "$pid2" <<'EOF'; then
import socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / 100.0
conns = []
for _ in range(200):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        conns.append(s)
    except OSError:
        break
time.sleep(0.5)
c0 = cpu()
time.sleep(2.0)
used = cpu() - c0
print(f"opened {len(conns)} connections; server CPU over 2 s while fds ran out: {used:.2f} s")
for s in conns:
    s.close()
ok = used < 0.5
for _ in range(50):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        if s.recv(100).startswith(b"HTTP/1.1 200"):
            print("served again after the flood")
            sys.exit(0 if ok else 1)
    except OSError:
        pass
    time.sleep(0.2)
sys.exit(1)
EOF
    ok "fd exhaustion: accept paused, no spin, served again"
else
    tail -20 "$work/log2"
    fail "fd exhaustion"
fi
n=$(grep -ci 'accept' "$work/log2" || true)
[ "$n" -le 10 ] && ok "fd exhaustion logged $n lines (not one per attempt)" \
    || fail "fd exhaustion flooded the log ($n lines)"
kill -TERM "$pid2"
wait "$pid2" || true
pid2=
finish
