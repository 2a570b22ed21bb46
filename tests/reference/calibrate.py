#!/usr/bin/python3
"""calibrate.py - measures what the tolerances in compare.py must allow and
must reject, for one or more model files.

For each model it computes the exact float64 logits and then:

  * emulations of a correct engine (forward_ref --emulate-act auto with each
    KV type): activations rounded before every matmul as the engine does
    (q8_0 / q8_K blocks, bf16) and K/V rounded to the cache type.  Their
    error against the exact logits is what a correct engine should show; the
    tolerances must pass all of them with margin.
  * every deliberate bug in forward_ref.PERTURBATIONS that applies to the
    model.  The tolerances must fail all of them.

The output is the evidence table behind README.md.  With --check it exits 1
when an emulation fails or a perturbation passes, which test_reference.sh
uses to prove, on the engine's own test models, that the comparison can fail.

Usage:
    calibrate.py MODEL... [--tokens LIST] [--kv f32,f16,bf16] [--perturb all|none|A,B]
                 [--check]
    calibrate.py --synthetic DIR [--vocab N]   (writes and measures synthetic models)
"""

import argparse
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import forward_ref  # noqa: E402
import gguf_ref  # noqa: E402

DEFAULT_TOKENS = [
    9707, 11, 1879, 0, 576, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13, 220, 16,
    17, 18, 19, 4013, 73, 14585, 2, 12095, 20, 100, 6730, 25, 1000, 4321, 8, 22557, 127,
    501, 29909, 3, 64, 999, 2048, 12,
]


def applicable(model, pname):
    types = set(model.weight_types())
    if pname == "no_bias":
        return model.qkv_bias
    if pname == "no_qk_norm":
        return model.qk_norm
    if pname == "tied_output":
        return not model.tied
    if pname.startswith("q4k"):
        return "q4_k" in types
    if pname == "q5k_high":
        return "q5_k" in types
    if pname == "q6k_high":
        return "q6_k" in types
    if pname == "q4_0_offset":
        return "q4_0" in types
    if pname in ("transpose_wq", "transpose_wo"):
        return model.n_head * model.head_dim == model.n_embd
    if pname == "gqa_mod":
        return model.n_head_kv not in (1, model.n_head)
    return True


def main_type(model):
    """The weight type the model was made with: that of attn_q in layer 0."""
    return model.tensor("blk.0.attn_q.weight").type_name


def calibrate(path, tokens, kvs, perturbs, check, out=sys.stdout):
    m = forward_ref.Model(path)
    m.cache_output = True
    wtype = main_type(m)
    ref = forward_ref.forward(m, tokens)
    ok_all = True
    name = os.path.basename(path)
    print("%s: arch %s, weights %s (all: %s), vocab %d, tied %s"
          % (name, m.arch, wtype, ",".join(m.weight_types()), m.n_vocab, m.tied), file=out)
    for kv in kvs:
        emu = forward_ref.forward(m, tokens, act="auto", kv=kv)
        met = compare.metrics(emu, ref)
        ok, _, reasons = compare.judge(met, compare.TOLERANCES[(wtype, kv)])
        print("  " + compare.summary_line("emulated kv=%s" % kv, met, ok), file=out)
        for r in reasons:
            print("      " + r, file=out)
        ok_all &= ok
    # Perturbations are judged with the loosest tolerance in use for this
    # weight type (the f16-KV one), the one the engine run must meet.
    tol = compare.TOLERANCES[(wtype, "f16")]
    for pname in perturbs:
        if not applicable(m, pname):
            print("  (bug %s does not apply to this model)" % pname, file=out)
            continue
        bad = forward_ref.forward(m, tokens, perturb=pname)
        met = compare.metrics(bad, ref)
        ok, _, _ = compare.judge(met, tol)
        print("  " + compare.summary_line("bug %s" % pname, met, ok)
              + ("" if not ok else "   <-- NOT DETECTED"), file=out)
        ok_all &= not ok
    return ok_all


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--tokens", default=",".join(map(str, DEFAULT_TOKENS)))
    ap.add_argument("--kv", default="f32,f16,bf16")
    ap.add_argument("--perturb", default="all")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--synthetic", metavar="DIR")
    ap.add_argument("--vocab", type=int, default=40000)
    args = ap.parse_args(argv[1:])
    tokens = forward_ref.parse_tokens(args.tokens)
    kvs = [k for k in args.kv.split(",") if k]
    if args.perturb == "all":
        perturbs = list(forward_ref.PERTURBATIONS)
    elif args.perturb == "none":
        perturbs = []
    else:
        perturbs = args.perturb.split(",")
        for p in perturbs:
            if p not in forward_ref.PERTURBATIONS:
                ap.error("unknown perturbation %s" % p)
    models = list(args.models)
    if args.synthetic:
        os.makedirs(args.synthetic, exist_ok=True)
        for arch in ("llama", "qwen2", "qwen3"):
            for wtype in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"):
                p = os.path.join(args.synthetic, "syn-%s-%s-%d.gguf" % (arch, wtype, args.vocab))
                if not os.path.exists(p):
                    forward_ref.make_synthetic_model(p, arch, wtype, n_vocab=args.vocab,
                                                     tied=(arch != "llama"))
                models.append(p)
    if not models:
        ap.error("no models")
    inputs_ok = True
    all_ok = True
    for p in models:
        try:
            all_ok &= calibrate(p, tokens, kvs, perturbs, args.check)
        except (gguf_ref.GGUFError, ValueError) as e:
            print("error: %s: %s" % (p, e), file=sys.stderr)
            inputs_ok = False
        sys.stdout.flush()
    if not inputs_ok:
        return 2
    if args.check and not all_ok:
        print("calibration check FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
