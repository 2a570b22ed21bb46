#!/usr/bin/env bash
# Generator benchmark for `inferd bench`: how many streaming requests per
# second it sustains, how many streams it holds open, and how late it sends
# (send lag = actual send - due time), against `inferd bench-mock` on this
# machine. Not a test: the figures depend on the machine and its load, which
# is printed with them.
#
#   bench/bench_generator.sh [RATE] [STREAM_RATE]     (defaults 2000 1000)
#
# Run 1 (rate):    Poisson arrivals at RATE req/s for 10 s; each request 64
#                  prompt tokens, 4 streamed tokens 2 ms apart.
# Run 2 (streams): Poisson arrivals at STREAM_RATE req/s for 8 s; each stream
#                  stays open ~6 s (TTFT 1 s, then 5 more events 1 s apart),
#                  so about STREAM_RATE * 6 streams are open at the peak.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${INFERD_BIN:-build/release/inferd}
rate=${1:-2000}
srate=${2:-1000}
tmp=$(mktemp -d)
mock_pid=
cleanup() { [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start_mock() {
    [ -n "$mock_pid" ] && kill "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null || true
    rm -f "$tmp/port"
    "$B" bench-mock --port 0 --port-file "$tmp/port" "$@" 2>/dev/null &
    mock_pid=$!
    for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
    port=$(cat "$tmp/port")
}

report() { # report NAME JSON TIMEFILE
    python3 - "$@" <<'PY'
import json, sys
name, path, tf = sys.argv[1:4]
s = json.load(open(path))
cpu = sum(float(x) for x in open(tf).read().split())
lag = s["send_lag_ms"]
print(f"{name}: {s['requests']} requests, {s['succeeded']} ok, "
      f"sent at {s['send_rate']:.0f} req/s, completed in {s['duration_s']:.2f} s, "
      f"peak {s['peak_in_flight']} open streams")
print(f"  send lag ms: p50 {lag['p50']:.3f}  p99 {lag['p99']:.3f}  max {lag['max']:.3f}; "
      f"client CPU {cpu:.2f} s = {cpu / s['requests'] * 1e6:.0f} us per request")
print(f"  server side (mock): TTFT p50 {s['ttft_ms']['p50']:.1f} ms, "
      f"ITL p50 {s['itl_ms']['p50']:.1f} ms")
PY
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), fd limit $(ulimit -Hn)"
start_mock --ttft-ms 2 --itl-ms 2
/usr/bin/time -f "%U %S" -o "$tmp/t1" "$B" bench --no-progress --metrics-path none \
    --url "http://127.0.0.1:$port" --input 64 --output 4 --requests $((rate * 10)) \
    --rate "$rate" --json >"$tmp/r1.json"
report "rate $rate req/s" "$tmp/r1.json" "$tmp/t1"

start_mock --ttft-ms 1000 --itl-ms 1000
/usr/bin/time -f "%U %S" -o "$tmp/t2" "$B" bench --no-progress --metrics-path none \
    --url "http://127.0.0.1:$port" --input 64 --output 6 --requests $((srate * 8)) \
    --rate "$srate" --json >"$tmp/r2.json"
report "streams at $srate req/s" "$tmp/r2.json" "$tmp/t2"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
