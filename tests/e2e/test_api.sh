#!/usr/bin/env bash
# The API server end to end with the official SDKs: starts `inferd serve` twice
# on a tiny random-weight qwen3 model (a main server and one with an API key
# and tiny limits), runs tests/e2e/api.test.mjs and client_features.test.mjs
# with node's test runner, then
# stops both servers with SIGTERM and checks they exit cleanly.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work="$INFERD_SCRATCH/e2e_api.$$"
rm -rf "$work"
mkdir -p "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# start NAME ARGS...: starts a server in the background (pid appended to pids).
start() {
    local name=$1; shift
    "$INFERD_BIN" serve -m "$m" --name tiny --port 0 --port-file "$work/$name.port" \
        --data-dir "$work/$name" --threads 2 --ctx 1024 --max-body 2097152 "$@" \
        >"$work/$name.log" 2>&1 &
    pids+=($!)
}
# port NAME: waits for the server's port file and prints the port.
port_of() {
    for _ in $(seq 1 300); do
        [ -s "$work/$1.port" ] && { cat "$work/$1.port"; return 0; }
        sleep 0.1
    done
    cat "$work/$1.log" >&2
    return 1
}

start main
start limited --api-key test-key --max-seqs 1 --max-queue 1 --max-open 3
port=$(port_of main) || { fail "main server did not start"; finish; exit 1; }
lport=$(port_of limited) || { fail "limited server did not start"; finish; exit 1; }

t0=$(date +%s.%N)
if INFERD_URL="http://127.0.0.1:$port" INFERD_URL_LIMITED="http://127.0.0.1:$lport" \
    INFERD_MODEL=tiny node --test --test-reporter=spec "$INFERD_SRC/tests/e2e/api.test.mjs" \
    >"$work/node.out" 2>&1; then
    ok "SDK suite: $(grep -E '^ℹ (pass|fail)' "$work/node.out" | tr '\n' ' ')"
else
    cat "$work/node.out"
    echo "--- server log (tail)"
    tail -20 "$work/main.log"
    fail "SDK suite"
fi
if INFERD_URL="http://127.0.0.1:$port" INFERD_MODEL=tiny node --test --test-reporter=spec \
    "$INFERD_SRC/tests/e2e/client_features.test.mjs" >"$work/features.out" 2>&1; then
    ok "client features: $(grep -E '^ℹ (pass|fail)' "$work/features.out" | tr '\n' ' ')"
else
    cat "$work/features.out"
    tail -20 "$work/main.log"
    fail "client features"
fi
echo "node suite took $(/usr/bin/python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)") s"

# One log line per request: method, path, status, tokens, ms.
if grep -qE 'POST /v1/chat/completions 200 prompt=[0-9]+ gen=[0-9]+ [0-9.]+ms' "$work/main.log"; then
    ok "request log lines"
else
    fail "request log lines"
fi
grep -q 'random weights' "$work/main.log" && fail "named model claims random weights" || true

# Clean shutdown on SIGTERM: exits 0, says so, the SQLite store is intact.
for i in 0 1; do
    kill -TERM "${pids[$i]}"
done
for i in 0 1; do
    if wait "${pids[$i]}"; then ok "server $i exits 0 on SIGTERM"; else fail "server $i exit status"; fi
done
pids=()
if grep -q 'stopped' "$work/main.log" &&
    /usr/bin/python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('pragma integrity_check').fetchone()[0]=='ok' or sys.exit(1); c.execute('select count(*) from responses').fetchone()" "$work/main/responses.db"; then
    ok "store closed cleanly"
else
    fail "store after shutdown"
fi
finish
