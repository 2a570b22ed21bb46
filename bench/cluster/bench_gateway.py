#!/usr/bin/env python3
"""What `inferd gateway` costs on its own: the gateway in front of one
`inferd worker --mock` (no engine: every request is answered at once), against
`inferd bench-mock` (an HTTP server that answers at once) as the client-side
baseline, with the same `inferd bench` load, alternating rounds.

    bench/cluster/bench_gateway.py [--inferd build/release/inferd] [--rounds 3]
                                   [--requests 3000] [--output 4] [--concurrency 64]

Added latency = the gateway's end-to-end latency at concurrency 1 minus
bench-mock's, p50 and p99 (medians over the rounds). Throughput = streamed
requests per second through the gateway at --concurrency, with one prep
thread beside its event-loop thread. Everything runs on this machine's cores
together (client, gateway, mock worker): the throughput is a floor.
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "kv"))
from serverctl import Run  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--inferd", default=os.path.join(here, "../../build/release/inferd"))
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--requests", type=int, default=3000)
ap.add_argument("--output", type=int, default=4)
ap.add_argument("--concurrency", type=int, default=64)
args = ap.parse_args()
run = Run("bench_gateway")
B = args.inferd


model = run.path("tiny.gguf")
subprocess.run([B, "model", "make", "--preset", "tiny", "-o", model], check=True,
               stdout=subprocess.DEVNULL)
logs = {k: open(run.path(k + ".log"), "w") for k in ["worker", "gateway", "mock"]}
w = run.spawn([B, "worker", "--mock", "-m", model, "--listen", "127.0.0.1:0", "--port-file",
               run.path("w.port")], stdout=logs["worker"], stderr=subprocess.STDOUT)
wp = run.wait_port(run.path("w.port"), w, run.path("worker.log"))
g = run.spawn([B, "gateway", "-m", model, "--name", "tiny", "--workers", f"127.0.0.1:{wp}",
               "--port", "0", "--port-file", run.path("g.port"), "--prep-threads", "1",
               "--data-dir", run.path("gdata")], stdout=logs["gateway"], stderr=subprocess.STDOUT)
gp = run.wait_port(run.path("g.port"), g, run.path("gateway.log"))
mk = run.spawn([B, "bench-mock", "--port", "0", "--port-file", run.path("m.port"),
                "--ttft-ms", "0", "--itl-ms", "0"], stdout=logs["mock"], stderr=subprocess.STDOUT)
mp = run.wait_port(run.path("m.port"), mk, run.path("mock.log"))
time.sleep(1.0)  # the worker's HELLO


def bench(port, conc, n):
    out = subprocess.run([B, "bench", "--url", f"http://127.0.0.1:{port}", "--model", "tiny",
                          "--synthetic", "plain", "--requests", str(n), "--input", "fixed:16",
                          "--output", f"fixed:{args.output}", "--concurrency", str(conc),
                          "--metrics-path", "none"], capture_output=True, text=True)
    t = out.stdout
    ok = re.search(r"requests\s+(\d+) sent, (\d+) succeeded", t)
    if not ok or ok.group(1) != ok.group(2):
        run.fail(f"bench failed:\n{t}\n{out.stderr}")
    e2e = re.search(r"E2E \(ms\)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)", t)
    rps = re.search(r"throughput\s+([0-9.]+) req/s", t)
    return float(e2e.group(2)), float(e2e.group(4)), float(rps.group(1))


cpu = open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].splitlines()[0].strip()
print(f"cpu: {cpu}, {os.cpu_count()} cpus; requests of 16 tokens in, {args.output} out, streamed")
gw, mo, thr = [], [], []
for r in range(args.rounds):
    order = [("gateway", gp), ("mock", mp)] if r % 2 == 0 else [("mock", mp), ("gateway", gp)]
    for name, port in order:
        p50, p99, _ = bench(port, 1, args.requests)
        (gw if name == "gateway" else mo).append((p50, p99))
    _, _, rps = bench(gp, args.concurrency, args.requests * 3)
    thr.append(rps)
    print(f"round {r + 1}: gateway e2e p50/p99 {gw[-1][0]:.3f}/{gw[-1][1]:.3f} ms, "
          f"bench-mock {mo[-1][0]:.3f}/{mo[-1][1]:.3f} ms, gateway at c={args.concurrency} "
          f"{rps:.0f} req/s", flush=True)
med = statistics.median
a50 = med([g_[0] for g_ in gw]) - med([m_[0] for m_ in mo])
a99 = med([g_[1] for g_ in gw]) - med([m_[1] for m_ in mo])
print(f"\nadded latency: p50 {a50:.3f} ms, p99 {a99:.3f} ms (gateway + mock worker minus "
      f"bench-mock, medians of {args.rounds} rounds)")
print(f"throughput: {med(thr):.0f} streamed requests/s through the gateway "
      f"(median; {min(thr):.0f}-{max(thr):.0f}), concurrency {args.concurrency}")
for p in (g, w, mk):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
run.cleanup()
