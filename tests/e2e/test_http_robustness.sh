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
    --threads 2 --ctx 1024 --idle-timeout 2 --max-headers 8192 --max-body 65536 \
    --shutdown-timeout 5 >"$work/log" 2>&1 &
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

# Shutdown with a stream in flight: SIGTERM while it runs; the stream must
# end with [DONE] (finished in the grace period) and the server exit 0.
curl -sN "http://127.0.0.1:$port/v1/completions" \
    -d '{"prompt":"go","max_tokens":300,"stream":true}' >"$work/stream" &
curl_pid=$!
sleep 0.3
kill -TERM "$pid"
wait "$curl_pid" || true
if wait "$pid"; then ok "exit 0 after SIGTERM with a stream in flight"; else fail "exit status"; fi
pid=
if tail -c 200 "$work/stream" | grep -q 'data: \[DONE\]'; then
    ok "in-flight stream finished during the grace period"
else
    tail -c 300 "$work/stream"
    fail "in-flight stream did not end with [DONE]"
fi
grep -q 'finishing in-flight requests' "$work/log" && ok "shutdown logged" || fail "shutdown log"
finish
