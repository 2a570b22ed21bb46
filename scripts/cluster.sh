#!/usr/bin/env bash
# A cluster on this machine's loopback, to try: Redis, one gateway, one
# prefill and two decode workers on a generated model.
#
#   scripts/cluster.sh up [DIR]     start them (state and logs in DIR, default
#                                   ./inferd-cluster); prints the API URL
#   scripts/cluster.sh down [DIR]   stop them (SIGTERM, then SIGKILL after 10 s)
#   scripts/cluster.sh status [DIR] which are running
#
# INFERD_MODEL=FILE.gguf serves a real model (default: a random-weight
# qwen3-shaped model made in DIR); INFERD_PORT picks the gateway's port
# (default 8080); INFERD_BIN the binary (default build/release/inferd).
# Workers announce themselves in Redis (scripts/setup.sh installs
# redis-server); without redis-server the gateway gets a static list.
# Prompts longer than 256 tokens are prefilled by the prefill worker and
# stream their KV to the decode worker that generates (docs/cluster.md).
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
dir=${2:-./inferd-cluster}
bin=${INFERD_BIN:-build/release/inferd}
port=${INFERD_PORT:-8080}

running() { [ -f "$dir/$1.pid" ] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

# start NAME CMD...: in the background, its pid and log in DIR
start() {
    local name=$1; shift
    "$@" >>"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
}

# wait_file FILE NAME: until FILE has content, or NAME died
wait_file() {
    for _ in $(seq 1 300); do
        [ -s "$1" ] && return 0
        running "$2" || break
        sleep 0.1
    done
    echo "cluster: $2 did not start; its log:" >&2
    tail -5 "$dir/$2.log" >&2
    return 1
}

names="gateway decode-2 decode-1 prefill-1 redis"

case "$cmd" in
up)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    for n in $names; do
        if running "$n"; then echo "cluster: $n is running already (scripts/cluster.sh down $dir)" >&2; exit 1; fi
    done
    [ -x "$bin" ] || { echo "cluster: no $bin (make build first)" >&2; exit 1; }
    model=${INFERD_MODEL:-$dir/model.gguf}
    if [ -z "${INFERD_MODEL:-}" ] && [ ! -f "$model" ]; then
        "$bin" model make --preset tiny --arch qwen3 -o "$model" >/dev/null
    fi
    members=()
    if command -v redis-server >/dev/null; then
        rm -f "$dir/redis.sock"
        start redis redis-server --unixsocket "$dir/redis.sock" --port 0 --save "" \
            --appendonly no --dir "$dir"
        for _ in $(seq 1 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
        members=(--redis "unix:$dir/redis.sock")
    fi
    list=()
    for w in prefill-1:prefill decode-1:decode decode-2:decode; do
        n=${w%%:*}; role=${w#*:}
        rm -f "$dir/$n.port"
        start "$n" "$bin" worker -m "$model" --role "$role" --name "$n" \
            --listen 127.0.0.1:0 --port-file "$dir/$n.port" --threads 1 "${members[@]}"
        wait_file "$dir/$n.port" "$n"
        list+=("127.0.0.1:$(cat "$dir/$n.port")")
    done
    rm -f "$dir/gateway.port"
    if [ ${#members[@]} -gt 0 ]; then via=("${members[@]}"); else via=(--workers "$(IFS=,; echo "${list[*]}")"); fi
    start gateway "$bin" gateway -m "$model" "${via[@]}" --port "$port" \
        --port-file "$dir/gateway.port" --data-dir "$dir/gateway-data"
    wait_file "$dir/gateway.port" gateway
    echo "cluster up: http://127.0.0.1:$(cat "$dir/gateway.port") (gateway; workers ${list[*]}; logs in $dir)"
    ;;
down)
    for n in $names; do
        running "$n" && kill -TERM "$(cat "$dir/$n.pid")" 2>/dev/null || true
    done
    for n in $names; do
        for _ in $(seq 1 100); do running "$n" || break; sleep 0.1; done
        running "$n" && kill -9 "$(cat "$dir/$n.pid")" 2>/dev/null || true
        rm -f "$dir/$n.pid"
    done
    echo "cluster down ($dir)"
    ;;
status)
    for n in $names; do
        if running "$n"; then echo "$n: running (pid $(cat "$dir/$n.pid"))"; else echo "$n: stopped"; fi
    done
    ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
