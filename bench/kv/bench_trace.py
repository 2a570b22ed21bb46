#!/usr/bin/env python3
"""KV tiers end to end: `inferd bench` replays the first N requests of a
Mooncake trace against `inferd serve` (the tiny preset) with the engine
pool at a share of those requests' distinct blocks, once with a disk tier
large enough for all of them and once with tiers off; prints the server
hit ratio of each next to the trace's ideal for those requests.

    bench/kv/bench_trace.py [--trace ../shared/traces/mooncake/synthetic_trace.jsonl]
                            [--requests 100] [--pool-share 0.05] [--threads 2]
                            [--inferd build/release/inferd] [--order tiers,none]

Requests run one at a time in trace order (closed loop, concurrency 1):
the cache sees the trace's order and every figure is the server's own
(usage cached_tokens over prompt tokens). The pool is never made smaller
than the longest prompt needs. Every figure comes from this run.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--inferd", default=os.path.join(here, "../../build/release/inferd"))
ap.add_argument("--trace", default=os.path.join(here, "../../../shared/traces/mooncake/synthetic_trace.jsonl"))
ap.add_argument("--requests", type=int, default=100)
ap.add_argument("--pool-share", type=float, default=0.05)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--order", default="tiers,none", help="runs, in order: tiers (disk tier) and none")
args = ap.parse_args()

TRACE_BLOCK = 512  # Mooncake hash_ids blocks, in tokens (docs/bench.md)
ENGINE_BLOCK = 16

reqs = []
with open(args.trace) as f:
    for line in f:
        if line.strip():
            reqs.append(json.loads(line))
        if len(reqs) == args.requests:
            break
distinct = len({h for r in reqs for h in r["hash_ids"]})
longest = max(r["input_length"] + r["output_length"] for r in reqs)
engine_blocks = distinct * TRACE_BLOCK // ENGINE_BLOCK
need = (longest + 1023) // 1024 * 1024 // ENGINE_BLOCK + 16
pool = max(int(engine_blocks * args.pool_share), need)
ctx = (longest + 1023) // 1024 * 1024
print(f"trace {os.path.basename(args.trace)}: first {len(reqs)} requests, {distinct} distinct "
      f"trace blocks = {engine_blocks} engine blocks of {ENGINE_BLOCK}; pool {pool} blocks "
      f"({100.0 * pool / engine_blocks:.1f}%), longest request {longest} tokens")
cpu = ""
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
print(f"cpu: {cpu}, {os.cpu_count()} cpus, {args.threads} threads")

sys.path.insert(0, here)
from serverctl import Run  # noqa: E402

run = Run("bench_trace")
work, cleanup, fail = run.work, run.cleanup, run.fail

model = os.path.join(work, "tiny.gguf")
subprocess.run([args.inferd, "model", "make", "--preset", "tiny", "--arch", "qwen3", "--type",
                "q8_0", "--ctx", str(ctx), "-o", model], check=True, stdout=subprocess.DEVNULL)


def start(name, tiers):
    flags = ["--threads", str(args.threads), "--ctx", str(ctx), "--kv-blocks", str(pool),
             "--max-seqs", "1"]
    for t in tiers:
        flags += ["--kv-tier", t]
    return run.serve(args.inferd, model, name, flags)


def metric(port, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def share_of_ideal(pc):
    if not pc["ideal_hit_ratio"]:
        return "no share: the ideal is 0"
    return f"{100.0 * pc['server_hit_ratio'] / pc['ideal_hit_ratio']:.1f}% of it"


results = {}
for mode in args.order.split(","):
    tiers = [f"disk:{os.path.join(work, 'tier')}:64GiB"] if mode == "tiers" else ["none"]
    p, port = start(mode, tiers)
    out = os.path.join(work, "out-" + mode)
    t0 = time.monotonic()
    b = subprocess.run([args.inferd, "bench", "--url", f"http://127.0.0.1:{port}", "--model", "m",
                        "--trace", "mooncake:" + args.trace, "--max-requests", str(len(reqs)),
                        "--arrival", "closed", "--concurrency", "1", "--timeout", "1800",
                        "--no-progress", "--json", "--out", out],
                       capture_output=True, text=True)
    wall = time.monotonic() - t0
    if b.returncode:
        fail(f"bench ({mode}) exit {b.returncode}: {b.stderr[-2000:]}")
    s = json.loads(b.stdout)
    pc = s["prefix_cache"]
    tier_hits = metric(port, 'inferd_kv_tier_hits_total{tier="disk"}') if mode == "tiers" else 0
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)
    results[mode] = pc
    errors = s.get("errors", {})
    print(f"{mode:5s}: server hit ratio {pc['server_hit_ratio']:.4f}, ideal {pc['ideal_hit_ratio']:.4f}"
          f" ({share_of_ideal(pc)}); "
          f"disk-tier block hits {tier_hits:.0f}; errors {errors}; {wall:.0f} s", flush=True)

cleanup()
