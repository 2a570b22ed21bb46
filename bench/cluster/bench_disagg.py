#!/usr/bin/env python3
"""Prefill/decode disaggregation on this machine's loopback: what the KV
hand-off costs and what it buys.

    bench/cluster/bench_disagg.py [--inferd build/release/inferd] [--model F.gguf]
                                  [--only transfer,ttft,itl] [--rounds 3] [--prompt 4000]

The model defaults to a random-weight qwen2.5-0.5b-shaped q8_0 file made with
`inferd model make` in the scratch directory. Every worker and server runs one
compute thread. Three measurements, each against its baseline in the same run:

transfer  A prompt the prefill worker holds already goes to a decode worker
          started empty, so the prefill worker's step is short and its blocks
          leave at once: blocks per second from the first KV_BLOCK's arrival to
          KV_DONE (the decode worker's log line), against a plain TCP probe on
          loopback (one socket, the same bytes, 1 MiB sends) run just before.
ttft      Time to first token of a --prompt-token prompt (a new one every
          round): the gateway in front of one prefill and one decode worker,
          against `inferd serve`, alternating.
itl       8 streams decode while long prompts (--long tokens, one every
          --every seconds) arrive: inter-token gaps of the 8 streams, p50/p99,
          disaggregated (1 prefill + 1 decode worker) against two mixed workers
          behind the same gateway, alternating rounds. The long prompts end
          after their first token; the 8 streams' prompts are short enough to
          be prefilled where they decode.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "kv"))
from serverctl import Run  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--inferd", default=os.path.join(here, "../../build/release/inferd"))
ap.add_argument("--model")
ap.add_argument("--only", default="transfer,ttft,itl")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--prompt", type=int, default=4000)
ap.add_argument("--long", type=int, default=2000)
ap.add_argument("--every", type=float, default=3.0)
ap.add_argument("--streams", type=int, default=8)
ap.add_argument("--stream-tokens", type=int, default=600)
args = ap.parse_args()
run = Run("bench_disagg")
B = args.inferd
only = set(args.only.split(","))
ctx = max(args.prompt, args.long) + 300

model = run.q05_model(B, args.model)
print(run.machine_line(model, "1 compute thread per engine"))


def wait_port(name, proc):
    return run.wait_port(run.path(name + ".port"), proc, run.path(name + ".log"))


def worker(name, role):
    portf = run.path(name + ".port")
    if os.path.exists(portf):
        os.unlink(portf)
    p = run.spawn([B, "worker", "-m", model, "--role", role, "--name", name, "--listen",
                   "127.0.0.1:0", "--port-file", portf, "--threads", "1", "--ctx", str(ctx),
                   "--max-seqs", "16"],
                  stdout=open(run.path(name + ".log"), "a"), stderr=subprocess.STDOUT)
    return p, wait_port(name, p)


def gateway(name, ports, local_prefill=256):
    portf = run.path(name + ".port")
    if os.path.exists(portf):
        os.unlink(portf)
    p = run.spawn([B, "gateway", "-m", model, "--name", "m", "--ctx", str(ctx),
                   "--local-prefill", str(local_prefill), "--workers",
                   ",".join(f"127.0.0.1:{x}" for x in ports), "--port", "0", "--port-file", portf,
                   "--data-dir", run.path("data-" + name)],
                  stdout=open(run.path(name + ".log"), "a"), stderr=subprocess.STDOUT)
    port = wait_port(name, p)
    for _ in range(200):
        if open(run.path(name + ".log")).read().count("in rotation") >= len(ports):
            return p, port
        time.sleep(0.05)
    run.fail(f"{name}: workers not in rotation")


def stop(*ps):
    for p in ps:
        p.send_signal(signal.SIGTERM)
    for p in ps:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


def prompt_ids(seed, n):
    return [(seed * 7919 + i * 104729) % 20000 + 100 for i in range(n)]


def ask(port, ids, max_tokens=1, gaps=None):
    """Streams one completion; returns (ttft, total); appends inter-token
    gaps to gaps when given."""
    body = json.dumps({"model": "m", "prompt": ids, "max_tokens": max_tokens, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    t0 = time.monotonic()
    first = last = None
    with urllib.request.urlopen(req, timeout=900) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"text"' in line:
                now = time.monotonic()
                if first is None:
                    first = now - t0
                elif gaps is not None:
                    gaps.append(now - last)
                last = now
    return first, time.monotonic() - t0


def tcp_probe_gbps(nbytes):
    """One loopback TCP connection, nbytes in 1 MiB sends, received into a
    buffer: the plain socket rate of this machine."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    done = {}

    def sink():
        c, _ = srv.accept()
        buf = bytearray(1 << 20)
        view, got = memoryview(buf), 0
        while got < nbytes:
            n = c.recv_into(view)
            if not n:
                break
            got += n
        done["t"] = time.monotonic()
        c.close()

    th = threading.Thread(target=sink)
    th.start()
    cl = socket.create_connection(srv.getsockname())
    cl.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk = b"\x5a" * (1 << 20)
    t0 = time.monotonic()
    left = nbytes
    while left > 0:
        cl.sendall(chunk[:min(left, len(chunk))])
        left -= min(left, len(chunk))
    th.join()
    cl.close()
    srv.close()
    return nbytes / (done["t"] - t0) / 1e9


def last_pull(name):
    text = open(run.path(name + ".log")).read()
    m = re.findall(r"kv_got=(\d+) kv_bytes=(\d+) kv_ms=([0-9.]+) kv_stream_ms=([0-9.]+) kv=(\S+)",
                   text)
    if not m:
        run.fail(f"{name}: no pull in its log")
    got, nb, ms, sms, how = m[-1]
    return int(got), int(nb), float(ms), float(sms), how


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


# transfer ------------------------------------------------------------------------------
if "transfer" in only:
    pf, pfp = worker("t-prefill", "prefill")
    ids = prompt_ids(1, args.prompt)
    rates, probes = [], []
    for r in range(args.rounds + 1):
        dc, dcp = worker(f"t-decode{r}", "decode")
        gw, gwp = gateway(f"t-gw{r}", [pfp, dcp], local_prefill=0)
        ask(gwp, ids)  # round 0 fills the prefill worker's cache; later rounds find it there
        got, nb, ms, sms, how = last_pull(f"t-decode{r}")
        stop(gw, dc)
        if how != "done":
            run.fail(f"transfer round {r}: the pull ended '{how}'")
        if r == 0:
            continue
        probe = tcp_probe_gbps(nb)
        rate = nb * (got - 1) / got / (sms / 1e3) / 1e9  # the first block's own trip is not timed
        probes.append(probe)
        rates.append(rate)
        print(f"transfer round {r}: {got} blocks, {nb / 2**20:.1f} MiB: {sms:.1f} ms first "
              f"block to done ({rate:.2f} GB/s; whole pull {ms:.1f} ms); TCP probe "
              f"{probe:.2f} GB/s; ratio {rate / probe:.2f}")
    stop(pf)
    print(f"transfer: KV {med(rates):.2f} GB/s against TCP {med(probes):.2f} GB/s: "
          f"{med(rates) / med(probes):.0%} of the probe (medians of {len(rates)})")

# ttft ----------------------------------------------------------------------------------
if "ttft" in only:
    pf, pfp = worker("f-prefill", "prefill")
    dc, dcp = worker("f-decode", "decode")
    gw, gwp = gateway("f-gw", [pfp, dcp], local_prefill=0)
    ref, refp = run.serve(B, model, "f-serve", ["--threads", "1", "--ctx", str(ctx),
                                                "--kv-tier", "none"])
    single, disagg = [], []
    for r in range(args.rounds):
        for kind in (["serve", "disagg"] if r % 2 == 0 else ["disagg", "serve"]):
            ids = prompt_ids(1000 + 2 * r + (kind == "disagg"), args.prompt)
            t, _ = ask(refp if kind == "serve" else gwp, ids)
            (single if kind == "serve" else disagg).append(t)
            extra = ""
            if kind == "disagg":
                got, nb, ms, sms, how = last_pull("f-decode")
                extra = f" ({got} blocks streamed, pull {ms:.0f} ms, {how})"
            print(f"ttft round {r}: {kind} {t:.2f} s{extra}")
    stop(gw, pf, dc, ref)
    print(f"ttft: {args.prompt}-token prompt, disaggregated {med(disagg):.2f} s against one "
          f"inferd serve {med(single):.2f} s: {med(disagg) / med(single):.3f}x "
          f"(medians of {len(single)})")

# itl -----------------------------------------------------------------------------------
if "itl" in only:
    def load(port, seed):
        gaps = []
        short = [prompt_ids(seed * 100 + i, 48) for i in range(args.streams)]
        th = [threading.Thread(target=ask, args=(port, ids, args.stream_tokens, gaps))
              for ids in short]
        for t in th:
            t.start()
        time.sleep(1.0)  # the streams are decoding
        longs = []
        t_end = time.monotonic() + args.every * 4
        k = 0
        while time.monotonic() < t_end and any(t.is_alive() for t in th):
            lt = threading.Thread(target=ask, args=(port, prompt_ids(seed * 100 + 50 + k,
                                                                      args.long), 1))
            lt.start()
            longs.append(lt)
            k += 1
            time.sleep(args.every)
        for t in th + longs:
            t.join()
        return gaps, k

    res = {"mixed": [], "disagg": []}
    for r in range(args.rounds):
        for kind in (["mixed", "disagg"] if r % 2 == 0 else ["disagg", "mixed"]):
            if kind == "mixed":
                a, ap_ = worker(f"i-mixed-a{r}", "mixed")
                b, bp = worker(f"i-mixed-b{r}", "mixed")
            else:
                a, ap_ = worker(f"i-prefill{r}", "prefill")
                b, bp = worker(f"i-decode{r}", "decode")
            gw, gwp = gateway(f"i-gw-{kind}{r}", [ap_, bp])
            gaps, k = load(gwp, 7 + 2 * r + (kind == "disagg"))
            stop(gw, a, b)
            res[kind].append((pct(gaps, 0.5), pct(gaps, 0.99), len(gaps), k))
            print(f"itl round {r}: {kind}: p50 {pct(gaps, 0.5) * 1e3:.1f} ms, p99 "
                  f"{pct(gaps, 0.99) * 1e3:.1f} ms over {len(gaps)} gaps, {k} long prompts")
    m99 = med([x[1] for x in res["mixed"]])
    d99 = med([x[1] for x in res["disagg"]])
    m50 = med([x[0] for x in res["mixed"]])
    d50 = med([x[0] for x in res["disagg"]])
    print(f"itl: {args.streams} streams with {args.long}-token prompts arriving every "
          f"{args.every:g} s: p99 disaggregated {d99 * 1e3:.1f} ms against two mixed workers "
          f"{m99 * 1e3:.1f} ms: {d99 / m99:.2f}x (p50 {d50 * 1e3:.1f} against {m50 * 1e3:.1f} ms; "
          f"medians of {len(res['mixed'])} rounds)")
