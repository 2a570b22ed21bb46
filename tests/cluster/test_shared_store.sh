#!/usr/bin/env bash
# Two gateways behind one (imagined) load balancer share their stored
# responses through a real redis-server (--store): a response created on
# one is retrieved, continued (previous_response_id) and deleted on the
# other, and the continuation equals the same conversation on one gateway.
# Redis down: storing fails with a clear 503 and the gateway lives; Redis
# back: storing works again. A bad --store URL exits 2.
source "$(dirname "$0")/../lib.sh"
m=$(model tiny-qwen2-q8_0-store --preset tiny --arch qwen2 --type q8_0)
scratch store
sock="$work/redis.sock"
start_redis || { fail "store: redis-server did not answer"; finish; }

"$INFERD_BIN" worker -m "$m" --listen 127.0.0.1:0 --port-file "$work/w.port" --threads 1 \
    --ctx 512 --name w >>"$work/w.log" 2>&1 &
pids+=($!)
wait_port "$!" "$work/w.port" "$work/w.log"; wp=$port
# gateway NAME: sets $port
gateway() {
    front "$1" gateway -m "$m" --name tiny --ctx 512 --workers "127.0.0.1:$wp" --store "unix:$sock"
    in_rotation "$work/$1.log" 1 || true
}
gateway ga; ga=$port
gateway gb; gb=$port

# req METHOD PORT PATH [BODY]: prints "STATUS BODY"
req() {
    $PY - "$@" <<'EOF'
import json, sys, urllib.request, urllib.error
method, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
body = sys.argv[4].encode() if len(sys.argv) > 4 else None
r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body,
                           {"Content-Type": "application/json"}, method=method)
try:
    with urllib.request.urlopen(r, timeout=60) as resp:
        print(resp.status, resp.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
EOF
}
field() { $PY -c 'import json,sys; d=json.loads(sys.argv[1].split(" ",1)[1]); print(eval(sys.argv[2]))' "$1" "$2"; }

r1=$(req POST "$ga" /v1/responses '{"model":"tiny","input":"Hello there","max_output_tokens":6,"temperature":0}')
id=$(field "$r1" 'd["id"]')
got=$(req GET "$gb" "/v1/responses/$id")
if [ "${r1%% *}" = 200 ] && [ "${got%% *}" = 200 ] &&
    [ "$(field "$got" 'd["output"]')" = "$(field "$r1" 'd["output"]')" ]; then
    ok "store: a response stored by one gateway is retrieved from the other"
else
    fail "store: retrieve across gateways: ${got:0:200}"
fi
keys=$(redis-cli -s "$sock" --scan --pattern 'inferd:responses:*' | wc -l)
[ "$keys" -ge 1 ] && ok "store: the response is a key in Redis ($keys)" || fail "store: no key in Redis"

# the continuation on the other gateway equals the same on the first
b='{"model":"tiny","input":"And again","max_output_tokens":6,"temperature":0,"previous_response_id":"'$id'"}'
c_b=$(req POST "$gb" /v1/responses "$b")
c_a=$(req POST "$ga" /v1/responses "$b")
if [ "${c_b%% *}" = 200 ] && [ "$(field "$c_b" 'd["output"][0]["content"]')" = "$(field "$c_a" 'd["output"][0]["content"]')" ] &&
    [ "$(field "$c_b" 'd["usage"]["input_tokens"]')" -gt "$(field "$r1" 'd["usage"]["input_tokens"]')" ] &&
    [ "$(field "$c_b" 'd["previous_response_id"]')" = "$id" ]; then
    ok "store: previous_response_id continues on the other gateway, the same as on the first"
else
    fail "store: continuation: ${c_b:0:300}"
fi
del=$(req DELETE "$gb" "/v1/responses/$id")
after=$(req GET "$ga" "/v1/responses/$id")
[ "${del%% *}" = 200 ] && [ "${after%% *}" = 404 ] &&
    ok "store: deleted on one gateway, gone on the other (404)" ||
    fail "store: delete across gateways: $del / ${after:0:120}"

# Redis down: a stored response cannot be kept: a clear error; store:false works
kill -9 "$redis_pid"; wait "$redis_pid" 2>/dev/null || true
down=$(req POST "$ga" /v1/responses '{"model":"tiny","input":"x","max_output_tokens":2}')
nostore=$(req POST "$ga" /v1/responses '{"model":"tiny","input":"x","max_output_tokens":2,"store":false}')
if [ "${down%% *}" = 503 ] && grep -q 'redis' <<<"$down" && [ "${nostore%% *}" = 200 ]; then
    ok "store: Redis down: storing is a 503 naming Redis, unstored responses are served"
else
    fail "store: redis down: ${down:0:200} / ${nostore:0:80}"
fi
start_redis
for _ in $(seq 1 40); do
    back=$(req POST "$gb" /v1/responses '{"model":"tiny","input":"y","max_output_tokens":2}')
    [ "${back%% *}" = 200 ] && break
    sleep 0.25
done
[ "${back%% *}" = 200 ] && kill -0 "${pids[1]}" &&
    ok "store: Redis back: storing works again, the gateways lived through it" ||
    fail "store: after redis restart: ${back:0:200}"

for bad in "redis://nohost" "sqlite:x"; do
    set +e
    out=$("$INFERD_BIN" gateway -m "$m" --workers "127.0.0.1:$wp" --store "$bad" 2>&1); rc=$?
    set -e
    [ "$rc" -eq 2 ] && grep -q -- '--store' <<<"$out" && ok "store: --store '$bad' refused" ||
        fail "store: --store '$bad': rc=$rc $out"
done
finish
