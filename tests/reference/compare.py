#!/usr/bin/python3
"""compare.py - engine logits against reference logits, with per-type tolerances.

Inputs: the engine's raw little-endian float32 logits (n_tokens, n_vocab) as
written by `inferd logits -o`, or a .npy (used to compare a perturbed
reference); the reference .npy from forward_ref.py (float64, same shape).

Per position t, with r = reference row, e = engine row, sd = std(r):
    max_rel  max|e - r| / sd          worst single logit, scale-free
    rms_rel  rms(e - r) / sd          typical logit error, scale-free
    cos      e.r / (|e| |r|)
    argmax   argmax e == argmax r, or a near tie: r[argmax e] is within
             max_rel tolerance * sd of max r (the test's own error budget
             cannot order two logits closer than that)

A row fails if max_rel, rms_rel or 1 - cos exceed the tolerance of the
weight type and KV type, or argmax disagrees outside a near tie.  The
tolerances and why they are what they are: README.md in this folder.

Usage:
    compare.py --engine OUT.bin|OUT.npy --ref REF.npy --type q4_k [--kv f16] [--label NAME]
               [--verbose]
Exit status: 0 within tolerance, 1 beyond it, 2 bad input.
"""

import argparse
import os
import sys

import numpy as np

# (weight type, kv type) -> (max_rel, rms_rel, 1 - cos).  See README.md.
# Derived from the emulated engine numerics (forward_ref.py --emulate-*, run
# by calibrate.py over the 24 tiny models): each bound sits between the
# largest error of a faithful emulation of a correct engine (2-15x below the
# bound) and the smallest error of any deliberate bug (forward_ref.py
# --perturb; 1.9-70x above the bound).
TOLERANCES = {}
for _w in ("f32", "f16"):
    TOLERANCES[(_w, "f32")] = (5e-5, 1e-5, 1e-10)      # f32 arithmetic only
    TOLERANCES[(_w, "f16")] = (1e-2, 2e-3, 2e-6)       # + K/V rounded to f16
    TOLERANCES[(_w, "bf16")] = (7e-2, 1.5e-2, 1e-4)    # + K/V, q, softmax weights to bf16
for _kv in ("f32", "f16", "bf16"):
    TOLERANCES[("bf16", _kv)] = (1.2e-1, 2.5e-2, 3e-4)  # activations rounded to bf16
    for _w in ("q8_0", "q4_0"):
        TOLERANCES[(_w, _kv)] = (3e-1, 6.5e-2, 2e-3)    # activations as q8_0 (32-blocks)
    for _w in ("q4_k", "q5_k", "q6_k"):
        TOLERANCES[(_w, _kv)] = (3.8e-1, 8e-2, 3.2e-3)  # activations as q8_K (256-blocks)


def load_logits(path, shape):
    """Engine output: raw float32 of exactly `shape`, or a .npy."""
    if path.endswith(".npy"):
        a = np.load(path)
    else:
        a = np.fromfile(path, dtype="<f4")
        if a.size != shape[0] * shape[1]:
            raise ValueError("'%s' holds %d floats, expected %d x %d = %d"
                             % (path, a.size, shape[0], shape[1], shape[0] * shape[1]))
        a = a.reshape(shape)
    if a.shape != tuple(shape):
        raise ValueError("'%s' has shape %s, expected %s" % (path, a.shape, tuple(shape)))
    return a.astype(np.float64)


def metrics(eng, ref):
    """Per-position metrics, a dict of arrays of length n_tokens."""
    diff = eng - ref
    sd = ref.std(axis=1)
    sd = np.where(sd > 0, sd, 1.0)
    nan = ~np.isfinite(eng).all(axis=1)
    diff = np.where(np.isfinite(diff), diff, np.inf)
    ae = np.argmax(np.where(np.isfinite(eng), eng, -np.inf), axis=1)
    ar = np.argmax(ref, axis=1)
    rows = np.arange(ref.shape[0])
    with np.errstate(invalid="ignore"):
        cos = (eng * ref).sum(axis=1) / (np.linalg.norm(eng, axis=1) * np.linalg.norm(ref, axis=1))
    cos = np.where(nan | ~np.isfinite(cos), -1.0, cos)
    return {
        "max_abs": np.abs(diff).max(axis=1),
        "max_rel": np.abs(diff).max(axis=1) / sd,
        "rms_rel": np.sqrt(np.mean(diff * diff, axis=1)) / sd,
        "one_minus_cos": 1.0 - cos,
        "argmax_eq": ae == ar,
        "argmax_gap": (ref[rows, ar] - ref[rows, ae]) / sd,   # 0 when equal
        "top2_gap": (ref[rows, ar] - np.partition(ref, -2, axis=1)[:, -2]) / sd,
        "std": sd,
    }


def judge(m, tol):
    """Returns (ok, per-position fail mask, reasons)."""
    t_max, t_rms, t_cos = tol
    reasons = []
    bad = np.zeros(m["max_rel"].shape, dtype=bool)
    for key, lim in (("max_rel", t_max), ("rms_rel", t_rms), ("one_minus_cos", t_cos)):
        b = ~(m[key] <= lim)
        if b.any():
            reasons.append("%s %.3g > %.3g at position %d"
                           % (key, np.nanmax(np.where(b, m[key], -np.inf)), lim,
                              int(np.argmax(np.where(b, m[key], -np.inf)))))
        bad |= b
    b = ~m["argmax_eq"] & ~(m["argmax_gap"] <= t_max)
    if b.any():
        reasons.append("argmax differs at %d positions (first %d, gap %.3g sd)"
                       % (b.sum(), int(np.argmax(b)), m["argmax_gap"][np.argmax(b)]))
    bad |= b
    return not bad.any(), bad, reasons


def summary_line(label, m, ok):
    return ("%-28s %-4s max_rel %.2e  rms_rel %.2e  1-cos %.1e  argmax %d/%d  max_abs %.2e"
            % (label, "ok" if ok else "FAIL", m["max_rel"].max(), m["rms_rel"].max(),
               m["one_minus_cos"].max(), m["argmax_eq"].sum(), m["argmax_eq"].size,
               m["max_abs"].max()))


def main(argv):
    ap = argparse.ArgumentParser(description="compare engine logits with reference logits")
    ap.add_argument("--engine", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--type", required=True, help="weight type of the model")
    ap.add_argument("--kv", default="f16", help="KV cache type the engine ran with")
    ap.add_argument("--label", default=None)
    ap.add_argument("--verbose", action="store_true", help="one line per position")
    args = ap.parse_args(argv[1:])
    key = (args.type.lower(), args.kv.lower())
    if key not in TOLERANCES:
        print("error: no tolerance for weight type %s with kv %s" % key, file=sys.stderr)
        return 2
    tol = TOLERANCES[key]
    try:
        ref = np.load(args.ref)
        if ref.ndim != 2:
            raise ValueError("reference '%s' is not 2-D" % args.ref)
        eng = load_logits(args.engine, ref.shape)
    except (OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    m = metrics(eng, ref)
    ok, bad, reasons = judge(m, tol)
    label = args.label if args.label is not None else os.path.basename(args.engine)
    if args.verbose:
        print("pos  max_rel   rms_rel   1-cos     argmax  top2_gap/sd")
        for t in range(ref.shape[0]):
            print("%3d  %.2e  %.2e  %.1e  %-6s  %.3g%s"
                  % (t, m["max_rel"][t], m["rms_rel"][t], m["one_minus_cos"][t],
                     "same" if m["argmax_eq"][t] else "DIFF", m["top2_gap"][t],
                     "  <-- fail" if bad[t] else ""))
    print(summary_line(label, m, ok))
    for r in reasons:
        print("    " + r)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
