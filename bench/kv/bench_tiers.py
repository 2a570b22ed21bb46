#!/usr/bin/env python3
"""KV tiers: time to first token of a long prompt whose prefix is held only
in the engine pool, the RAM tier, the disk tier (cold page cache), a shared
directory, or Redis, against recomputing it; each tier's load time against
the bytes moved over that medium's read bandwidth measured in the same run;
and decode tokens/s with write-through to the disk tier on and off
(alternating runs).

    bench/kv/bench_tiers.py [--inferd build/release/inferd] [--model FILE]
                            [--prompt 4000] [--threads 2] [--rounds 3]

The model defaults to a random-weight qwen2.5-0.5b-shaped q8_0 file made
with `inferd model make` in the scratch directory. Prints one line per
measurement and a summary table; every figure comes from this run.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--inferd", default=os.path.join(os.path.dirname(__file__), "../../build/release/inferd"))
ap.add_argument("--model")
ap.add_argument("--prompt", type=int, default=4000)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--decode-tokens", type=int, default=128)
ap.add_argument("--only", choices=["ttft", "decode"], help="run one of the two parts")
args = ap.parse_args()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serverctl import Run  # noqa: E402

run = Run("bench_tiers")
work, procs, cleanup, fail = run.work, run.procs, run.cleanup, run.fail


model = args.model
if not model:
    model = os.path.join(work, "q05-q8_0.gguf")
    subprocess.run([args.inferd, "model", "make", "--preset", "qwen2.5-0.5b", "--type", "q8_0",
                    "-o", model], check=True, stdout=subprocess.DEVNULL)

ctx = args.prompt + 200
bt = 16
pool_blocks = (ctx + bt - 1) // bt + 8


def start(name, tiers, extra=()):
    flags = ["--threads", str(args.threads), "--ctx", str(ctx), "--kv-blocks", str(pool_blocks), "-v"]
    for t in tiers:
        flags += ["--kv-tier", t]
    return run.serve(args.inferd, model, name, flags + list(extra))


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def prompt_ids(seed):
    return [(seed * 7919 + i * 104729) % 20000 + 100 for i in range(args.prompt)]


def ask(port, seed, max_tokens=1):
    body = json.dumps({"model": "m", "prompt": prompt_ids(seed), "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = None
    n = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"text"' in line:
                if first is None:
                    first = time.monotonic() - t0
                n += 1
    return first, time.monotonic() - t0, n


def last_load_ms(name):
    text = open(os.path.join(work, name + ".log")).read()
    m = re.findall(r"kv tiers: request \d+: (\d+) of (\d+) blocks loaded in ([0-9.]+) ms", text)
    return (int(m[-1][0]), float(m[-1][2])) if m else (0, 0.0)


def frame_bytes_of(dirpath):
    for root, _, files in os.walk(dirpath):
        for f in files:
            if len(f) == 32 and all(c in "0123456789abcdef" for c in f):
                return os.path.getsize(os.path.join(root, f))
    return 0


def drop_cache(dirpath):
    for root, _, files in os.walk(dirpath):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def seq_read_gbps(path, nbytes, cold):
    """A plain sequential read of a file of nbytes."""
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        left = nbytes
        while left > 0:
            f.write(chunk[:min(left, len(chunk))])
            left -= len(chunk)
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    if cold:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    else:
        while os.read(fd, 1 << 20):
            pass
        os.lseek(fd, 0, 0)
    t0 = time.monotonic()
    got = 0
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        got += len(b)
    dt = time.monotonic() - t0
    os.close(fd)
    os.unlink(path)
    return got / dt / 1e9


def redis_get_gbps(sock, value_bytes, n):
    out = subprocess.run(["redis-benchmark", "-s", sock, "-t", "set,get", "-d", str(value_bytes),
                          "-n", str(n), "-c", "1", "-q"], capture_output=True, text=True).stdout
    m = re.search(r"GET: ([0-9.]+) requests per second", out)
    return float(m.group(1)) * value_bytes / 1e9 if m else 0.0


print(f"cpu: {open('/proc/cpuinfo').read().split('model name')[1].split(':')[1].splitlines()[0].strip()}, "
      f"{os.cpu_count()} cpus; prompt {args.prompt} tokens; threads {args.threads}; "
      f"isa {os.environ.get('INFERD_ISA', 'auto')}")

results = {k: [] for k in ["recompute", "pool", "ram", "disk", "shared", "redis"]}
loads = {k: [] for k in ["ram", "disk", "shared", "redis"]}
bw = {k: [] for k in ["ram", "disk", "shared", "redis"]}

redis_sock = os.path.join(work, "redis.sock")
redis = subprocess.Popen(["redis-server", "--unixsocket", redis_sock, "--port", "0", "--save", "",
                          "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL)
procs.append(redis)
for _ in range(100):
    if subprocess.run(["redis-cli", "-s", redis_sock, "ping"], capture_output=True,
                      text=True).stdout.strip() == "PONG":
        break
    time.sleep(0.05)

for r in range(args.rounds if args.only != "decode" else 0):
    seed = 1000 + r * 10  # a prompt no earlier round used
    # (f) recompute, then (a) the engine pool
    p, port = start("none", ["none"])
    ttft, _, _ = ask(port, seed)
    results["recompute"].append(ttft)
    ttft, _, _ = ask(port, seed)
    results["pool"].append(ttft)
    stop(p)
    # (b) RAM: two other prompts push the prefix out of the pool into RAM
    p, port = start("ram", ["ram:4GiB"])
    ask(port, seed)
    ask(port, seed + 1)
    ask(port, seed + 2)
    ttft, _, _ = ask(port, seed)
    results["ram"].append(ttft)
    loads["ram"].append(last_load_ms("ram"))
    stop(p)
    # (c) disk, cold page cache, after a restart; (d) shared, the same
    for kind in ["disk", "shared"]:
        d = os.path.join(work, f"{kind}-{r}")
        p, port = start(kind, [f"{kind}:{d}:8GiB"])
        ask(port, seed)
        time.sleep(1.0)
        stop(p)
        drop_cache(d)
        p, port = start(kind, [f"{kind}:{d}:8GiB"])
        ttft, _, _ = ask(port, seed)
        results[kind].append(ttft)
        loads[kind].append(last_load_ms(kind))
        fb = frame_bytes_of(d)
        stop(p)
        bw[kind].append(seq_read_gbps(os.path.join(work, "seq.bin"),
                                      fb * (args.prompt // bt), cold=True))
        shutil.rmtree(d, ignore_errors=True)
    # (e) Redis, after a restart of the server
    p, port = start("redis", [f"redis+unix://{redis_sock}"])
    ask(port, seed)
    time.sleep(1.0)
    stop(p)
    p, port = start("redis", [f"redis+unix://{redis_sock}"])
    ttft, _, _ = ask(port, seed)
    results["redis"].append(ttft)
    loads["redis"].append(last_load_ms("redis"))
    stop(p)
    fb = fb or 1
    bw["redis"].append(redis_get_gbps(redis_sock, fb, 200))
    bw["ram"].append(seq_read_gbps(os.path.join(work, "seq.bin"), fb * (args.prompt // bt),
                                   cold=False))
    print(f"round {r + 1}: ttft s " + " ".join(f"{k} {v[-1]:.3f}" for k, v in results.items()) +
          " | loads (blocks, ms) " + " ".join(f"{k} {v[-1]}" for k, v in loads.items()), flush=True)

# Decode with write-through to the disk tier on and off, alternating.
dec = {"off": [], "disk": []}
for r in range(args.rounds if args.only != "ttft" else 0):
    for mode in (["off", "disk"] if r % 2 == 0 else ["disk", "off"]):
        tiers = ["none"] if mode == "off" else [f"disk:{os.path.join(work, 'dec')}:8GiB"]
        p, port = start("dec-" + mode, tiers)
        body = json.dumps({"model": "m", "prompt": prompt_ids(7)[:64],
                           "max_tokens": args.decode_tokens, "temperature": 0,
                           "ignore_eos": True, "stream": True}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
        t_first = t_last = None
        n = 0
        with urllib.request.urlopen(req, timeout=600) as resp:
            for line in resp:
                if line.startswith(b"data: {") and b'"text"' in line:
                    now = time.monotonic()
                    t_first = t_first or now
                    t_last = now
                    n += 1
        dec[mode].append((n - 1) / (t_last - t_first))
        stop(p)
        shutil.rmtree(os.path.join(work, "dec"), ignore_errors=True)

med = statistics.median
if args.only == "decode":
    print(f"decode tok/s: tiers off {dec['off']}, disk write-through {dec['disk']}: "
          f"{100 * med(dec['disk']) / med(dec['off']):.1f} %")
    cleanup()
    sys.exit(0)
rc = med(results["recompute"])
print("\ncase        TTFT s (median, min-max)   % of recompute   load ms   blocks   bytes/bw ms   load / (bytes/bw)")
for k in ["recompute", "pool", "ram", "disk", "shared", "redis"]:
    v = results[k]
    line = f"{k:10} {med(v):8.3f} ({min(v):.3f}-{max(v):.3f})   {100 * med(v) / rc:8.1f} %"
    if k in loads:
        blocks = med([b for b, _ in loads[k]])
        ms = med([m for _, m in loads[k]])
        ideal = blocks * fb / (med(bw[k]) * 1e9) * 1e3 if med(bw[k]) > 0 else 0
        line += f"   {ms:8.1f}   {blocks:6.0f}   {ideal:8.1f} ({med(bw[k]):.2f} GB/s)   " \
                f"{ms / ideal if ideal else 0:.2f}x"
    print(line)
if args.only == "ttft":
    cleanup()
    sys.exit(0)
print(f"\ndecode tok/s: tiers off {med(dec['off']):.2f} ({min(dec['off']):.2f}-{max(dec['off']):.2f}), "
      f"disk write-through {med(dec['disk']):.2f} ({min(dec['disk']):.2f}-{max(dec['disk']):.2f}): "
      f"{100 * med(dec['disk']) / med(dec['off']):.1f} %")
cleanup()
