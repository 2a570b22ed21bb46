#!/usr/bin/env bash
# Hostile HTTP against `inferd serve` (http_robustness.py: malformed requests,
# oversized headers and bodies, slowloris, vanishing clients), then shutdown
# with a stream in flight: the stream still ends properly (its events up to
# the end, or an error event) and the process exits 0.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen3-q8_0 --preset tiny --arch qwen3 --type q8_0)
work="$INFERD_SCRATCH/e2e_http.$$"
rm -rf "$work"
mkdir -p "$work"
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

"$INFERD_BIN" serve -m "$m" --port 0 --port-file "$work/port" --data-dir "$work/data" \
    --threads 2 --ctx 4096 --idle-timeout 2 --header-timeout 2 --max-headers 8192 --max-body 65536 \
    --shutdown-timeout 8 >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(cat "$work/port")

if out=$(/usr/bin/python3 "$INFERD_SRC/tests/e2e/http_robustness.py" "$port" 2>&1); then
    ok "robustness: $(grep -c '^ok' <<<"$out") checks"
else
    echo "$out"
    tail -20 "$work/log"
    fail "robustness"
fi

# Shutdown with streams in flight: SIGTERM while they run. A short one ends
# with [DONE] within the grace period; a long one (4000 steps, well past the
# 8 s grace) ends
# with an error event; either way the stream is well formed and the server
# exits 0.
curl -sN "http://127.0.0.1:$port/v1/completions" \
    -d '{"prompt":"go","max_tokens":4,"stream":true}' >"$work/short" &
c1=$!
curl -sN "http://127.0.0.1:$port/v1/completions" \
    -d '{"prompt":"go","max_tokens":4000,"n":4,"stream":true,"logit_bias":{"151645":-100}}' \
    >"$work/long" &
c2=$!
for _ in $(seq 1 200); do [ -s "$work/long" ] && break; sleep 0.05; done  # streaming began
kill -TERM "$pid"
wait "$c1" "$c2" || true
if wait "$pid"; then ok "exit 0 after SIGTERM with streams in flight"; else fail "exit status"; fi
pid=
if tail -c 200 "$work/short" | grep -q 'data: \[DONE\]'; then
    ok "short stream finished during the grace period"
else
    tail -c 300 "$work/short"
    fail "short stream did not end with [DONE]"
fi
if tail -c 400 "$work/long" | grep -q 'data: {"error":{"message":"the server is shutting down"'; then
    ok "long stream ended with an error event after the grace period"
else
    tail -c 400 "$work/long"
    fail "long stream did not end with an error event"
fi
grep -q 'finishing in-flight requests' "$work/log" && ok "shutdown logged" || fail "shutdown log"
finish
