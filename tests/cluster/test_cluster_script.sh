#!/usr/bin/env bash
# scripts/cluster.sh: `up` starts Redis, a gateway and three workers on a
# generated model and prints a URL that answers a chat request; `status`
# lists them running; `down` stops every one of them.
source "$(dirname "$0")/../lib.sh"
work=$(mktemp -d "$INFERD_SCRATCH/cluster.XXXXXX")
dir="$work/c"
cleanup() {
    INFERD_BIN="$INFERD_BIN" bash "$INFERD_SRC/scripts/cluster.sh" down "$dir" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
out=$(INFERD_BIN="$INFERD_BIN" INFERD_PORT=0 bash "$INFERD_SRC/scripts/cluster.sh" up "$dir")
url=$(echo "$out" | grep -o 'http://127.0.0.1:[0-9]*' | head -1)
[ -n "$url" ] && ok "cluster.sh up: $out" || { fail "cluster.sh up: $out"; finish; exit 1; }
for _ in $(seq 1 50); do
    [ "$(grep -c 'in rotation' "$dir/gateway.log" || true)" -ge 3 ] && break
    sleep 0.1
done
r=$(curl -s "$url/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"model","messages":[{"role":"user","content":"hi"}],"max_tokens":5}')
if grep -q '"completion_tokens":5' <<<"$r"; then ok "cluster.sh: the gateway answers a chat"
else fail "cluster.sh: chat answer: ${r:0:300}"; fi
st=$(INFERD_BIN="$INFERD_BIN" bash "$INFERD_SRC/scripts/cluster.sh" status "$dir")
[ "$(echo "$st" | grep -c running)" -eq 5 ] && ok "cluster.sh status: 5 running" ||
    fail "cluster.sh status: $st"
pids=$(cat "$dir"/*.pid)
INFERD_BIN="$INFERD_BIN" bash "$INFERD_SRC/scripts/cluster.sh" down "$dir" >/dev/null
alive=0
for p in $pids; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
[ "$alive" -eq 0 ] && ok "cluster.sh down: every process stopped" ||
    fail "cluster.sh down: $alive still running"
finish
