#!/usr/bin/env python3
"""The simulator against a real cluster on this machine: one small trace run
through a gateway in front of two mixed workers, and through `inferd sim`
calibrated here by `inferd bench-engine --json`; TTFT and throughput side by
side.

    bench/sim/validate.py [--inferd build/release/inferd] [--model F.gguf]
                          [--requests 60] [--rates 1.5,3] [--seed 7]

The model defaults to a random-weight qwen2.5-0.5b-shaped q8_0 file made with
`inferd model make`. Each worker runs one compute thread (two workers, two
cores); bench-engine calibrates with one thread too, two copies at once (as
the two workers share the memory bandwidth). The trace (Mooncake
JSONL, written here) has prompts of 64-640 tokens, a quarter of them sharing
one of four 512-token system blocks, and 16-48 output tokens, arriving as a
Poisson process at each rate given. The simulator runs the same file with
the same seed (so the same arrival spread), 16-token blocks, each worker its
own group (they do not step in lockstep), and the engine's default scheduler
limits (512-token budget, 64 sequences).

Reported per rate: TTFT p50 and mean, output tokens per second and requests
per second over the run, real and simulated, and sim / real.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "kv"))
from serverctl import Run  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--inferd", default=os.path.join(here, "../../build/release/inferd"))
ap.add_argument("--model")
ap.add_argument("--requests", type=int, default=60)
ap.add_argument("--rates", default="1.5,3")
ap.add_argument("--seed", type=int, default=7)
args = ap.parse_args()
run = Run("sim_validate")
B = args.inferd

model = run.q05_model(B, args.model)
print(run.machine_line(model, "1 compute thread per engine"))

# calibration: this machine's step costs, one thread, measured as the
# cluster runs - two engines at once, one per core, sharing the memory
# bandwidth; the simulator takes the first one's figures
calib = run.path("calib.json")
cal = [subprocess.Popen([B, "bench-engine", "-m", model, "--threads", "1", "--json"],
                        stdout=open(run.path(f"calib{k}.json"), "w"), stderr=subprocess.DEVNULL)
       for k in range(2)]
for p in cal:
    if p.wait():
        run.fail("bench-engine failed")
os.replace(run.path("calib0.json"), calib)
print("# calibration:", open(calib).read().strip()[:300], "...")


def trace(rate, path, run_no):
    """Each run's blocks are its own (the workers' caches hold the last
    run's): ids from a range of their own."""
    rng = random.Random(args.seed)
    base = 1_000_000 * (run_no + 1)
    t, nxt = 0.0, base + 1000
    with open(path, "w") as f:
        for i in range(args.requests):
            t += rng.expovariate(rate)
            n_in = rng.randint(64, 640)
            ids = []
            if rng.random() < 0.25:
                ids.append(base + rng.randrange(4))  # a shared system block
                n_in = max(n_in, 520)
            while len(ids) * 512 < n_in:
                ids.append(nxt)
                nxt += 1
            f.write(json.dumps({"timestamp": int(t * 1000), "input_length": n_in,
                                "output_length": rng.randint(16, 48), "hash_ids": ids}) + "\n")


def wait_port(name, proc):
    return run.wait_port(run.path(name + ".port"), proc, run.path(name + ".log"))


def worker(name):
    portf = run.path(name + ".port")
    p = run.spawn([B, "worker", "-m", model, "--role", "mixed", "--listen", "127.0.0.1:0",
                   "--port-file", portf, "--threads", "1", "--ctx", "2048", "--name", name,
                   "--kv-tier", "none"],
                  stdout=open(run.path(name + ".log"), "a"), stderr=subprocess.STDOUT)
    return wait_port(name, p)


ports = [worker("w0"), worker("w1")]
portf = run.path("gw.port")
gw = run.spawn([B, "gateway", "-m", model, "--name", "m", "--ctx", "2048", "--port", "0",
                "--port-file", portf, "--data-dir", run.path("gw-data"),
                "--workers", ",".join(f"127.0.0.1:{p}" for p in ports)],
               stdout=open(run.path("gw.log"), "a"), stderr=subprocess.STDOUT)
gw_port = wait_port("gw", gw)
time.sleep(1.0)  # both workers in rotation

print(f"{'rate':>5} {'':5} {'TTFT p50':>9} {'TTFT mean':>10} {'tok/s':>7} {'req/s':>6}")
for run_no, rate in enumerate(float(x) for x in args.rates.split(",")):
    tf = run.path(f"trace-{rate}.jsonl")
    trace(rate, tf, run_no)
    out = subprocess.run([B, "bench", "--url", f"http://127.0.0.1:{gw_port}", "--model", "m",
                          "--trace", f"mooncake:{tf}", "--seed", "0", "--json", "--no-progress",
                          "--metrics-path", "none"], check=True, capture_output=True, text=True)
    real = json.loads(out.stdout)
    sim = json.loads(subprocess.run(
        [B, "sim", "--trace", f"mooncake:{tf}", "--seed", "0", "--decode", "2", "--dp-group", "1",
         "--cost", calib, "--json"], check=True, capture_output=True, text=True).stdout)[0]
    r = {"p50": real["ttft_ms"]["p50"], "mean": real["ttft_ms"]["mean"],
         "tok": real["output_tokens_per_s"], "req": real["request_throughput"]}
    s = {"p50": sim["ttft_ms"]["p50"], "mean": sim["ttft_ms"]["mean"], "tok": sim["output_tps"],
         "req": sim["throughput_rps"]}
    for name, v in (("real", r), ("sim", s)):
        print(f"{rate:5.1f} {name:5} {v['p50']:9.0f} {v['mean']:10.0f} {v['tok']:7.1f} "
              f"{v['req']:6.2f}")
    print(f"{'':5} {'ratio':5} {s['p50'] / r['p50']:9.2f} {s['mean'] / max(r['mean'], 1e-9):10.2f} "
          f"{s['tok'] / r['tok']:7.2f} {s['req'] / r['req']:6.2f}")
