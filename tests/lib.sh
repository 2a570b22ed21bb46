# Shared helpers for script tests (sourced). Environment from ctest:
# INFERD_BIN, INFERD_SRC, INFERD_SCRATCH.
set -euo pipefail
: "${INFERD_BIN:?}" "${INFERD_SRC:?}" "${INFERD_SCRATCH:?}"
mkdir -p "$INFERD_SCRATCH/models"
export INFERD_NODE_MODULES="$INFERD_SRC/node_modules"
PY=/usr/bin/python3   # Debian's python3, which has python3-numpy

# model NAME ARGS...: path of a generated model, made once per build tree
# (tests run in parallel: a lock keeps one maker per name).
model() {
    local name=$1; shift
    local path="$INFERD_SCRATCH/models/$name.gguf"
    (
        flock 9
        if [ ! -f "$path" ]; then
            "$INFERD_BIN" model make "$@" -o "$path.tmp" >/dev/null
            mv "$path.tmp" "$path"
        fi
    ) 9>"$path.lock"
    echo "$path"
}

passed=0; failed=0
ok()   { echo "ok   $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); }
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}

# wait_port PID PORTFILE LOG: waits (30 s at most) for the server PID to
# write its port to PORTFILE and sets $port; on failure (the server exited
# or never wrote it) prints LOG to stderr and returns 1.
wait_port() {
    local p=$1 file=$2 log=$3
    for _ in $(seq 1 300); do
        [ -s "$file" ] && { port=$(cat "$file"); return 0; }
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    cat "$log" >&2
    return 1
}

# front NAME CMD ARGS...: `inferd CMD ARGS` (serve or gateway) on a free
# port in the background, its port file, data directory and log named after
# NAME under $work; sets $pid and $port once it listens.
front() {
    local name=$1; shift
    rm -f "$work/$name.port"
    "$INFERD_BIN" "$@" --port 0 --port-file "$work/$name.port" --data-dir "$work/$name-data" \
        >>"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    wait_port "$pid" "$work/$name.port" "$work/$name.log"
}

# in_rotation LOG N: waits (10 s at most) until a gateway's LOG says N
# workers came into rotation, counting from its start.
in_rotation() {
    for _ in $(seq 1 100); do
        [ "$(grep -c 'in rotation' "$1" || true)" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# start_redis: a redis-server on the Unix socket $sock, its files in $work
# (both set by the caller); sets $redis_pid. Fails if it does not answer.
start_redis() {
    redis-server --unixsocket "$sock" --port 0 --save "" --appendonly no --dir "$work" \
        >>"$work/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 1 100); do
        redis-cli -s "$sock" ping 2>/dev/null | grep -q PONG && return 0
        sleep 0.05
    done
    return 1
}

# scratch NAME: a scratch directory $work for one script, and a trap that on
# any exit kills every pid in $pids and $redis_pid and removes $work.
scratch() {
    work=$(mktemp -d "$INFERD_SCRATCH/$1.XXXXXX")
    pids=()
    redis_pid=
    trap scratch_cleanup EXIT
}
scratch_cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    [ -n "$redis_pid" ] && kill -9 "$redis_pid" 2>/dev/null || true
    rm -rf "$work"
}
