#!/usr/bin/env bash
# Hostile clients against `inferd serve` (hostile.py: smuggling, strict
# HTTP, CORS, slowloris, slow bodies, connection caps, a huge prompt while
# /health is timed, slow readers), then file-descriptor exhaustion: a server
# under a low `ulimit -n` flooded with connections pauses accepting instead
# of spinning or flooding its log, and serves again once they close.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work="$INFERD_SCRATCH/e2e_hostile.$$"
rm -rf "$work"
mkdir -p "$work"
pid=
pid2=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    [ -n "$pid2" ] && kill "$pid2" 2>/dev/null
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
